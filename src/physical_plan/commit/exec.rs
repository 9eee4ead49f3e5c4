//! [`CommitExec`]: collects data files from its input and commits them as one snapshot.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::{Distribution, EquivalenceProperties};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use iceberg::table::Table;

use crate::catalog::MetadataStore;
use crate::physical_plan::single_child;
use crate::physical_plan::write::{decode_data_files, WrittenFiles};
use crate::snapshot::{commit, is_commit_state_unknown, SnapshotChanges};

/// Commits the data files produced by its input as one append snapshot and returns one row,
/// `count`: the number of rows added.
///
/// # Algorithm
/// Reads every row of its (single) input partition, decoding data files; then commits them
/// through the compare-and-swap commit path, which retries on conflicts. If the input fails or
/// the commit finally fails, every file the statement wrote is deleted and the table is left as
/// it was.
#[derive(Debug)]
pub struct CommitExec {
    input: Arc<dyn ExecutionPlan>,
    store: Arc<dyn MetadataStore>,
    /// The table as planned: its schema and specs describe the files the writers produce.
    table: Table,
    written: WrittenFiles,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

/// The schema of a write statement's answer: one row, `count`.
pub(crate) fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

impl CommitExec {
    /// A commit of `input`'s files, written for `table`, to that table in `store`.
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        store: Arc<dyn MetadataStore>,
        table: Table,
        written: WrittenFiles,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            input,
            store,
            table,
            written,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        }
    }
}

impl DisplayAs for CommitExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CommitExec: table={}, operation=append",
            self.table.identifier()
        )
    }
}

impl ExecutionPlan for CommitExec {
    fn name(&self) -> &str {
        "CommitExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = single_child("CommitExec", children)?;
        Ok(Arc::new(Self::new(
            input,
            Arc::clone(&self.store),
            self.table.clone(),
            self.written.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "CommitExec has one partition, asked for {partition}"
            )));
        }
        let mut input = self.input.execute(0, context)?;
        let store = Arc::clone(&self.store);
        let table = self.table.clone();
        let written = self.written.clone();
        let files_metric = MetricBuilder::new(&self.metrics).counter("files_committed", 0);
        let attempts_metric = MetricBuilder::new(&self.metrics).counter("commit_attempts", 0);
        let fut = async move {
            let file_io = store.file_io().clone();
            let ident = table.identifier().clone();
            let mut files = vec![];
            while let Some(batch) = input.next().await {
                match batch.and_then(|b| decode_data_files(&b, table.metadata())) {
                    Ok(mut f) => {
                        // Files written elsewhere (a distributed plan's workers) are known here
                        // only from the stream: removed too if the statement fails.
                        for new in &f {
                            written.record(new.file.file_path().to_string());
                        }
                        files.append(&mut f)
                    }
                    Err(e) => {
                        drop(input);
                        written.remove_all(&file_io).await;
                        return Err(e);
                    }
                }
            }
            let changes = SnapshotChanges::append(files);
            let rows = changes.added_records();
            files_metric.add(changes.added_data_files.len());
            let committed = if changes.added_data_files.is_empty() {
                // Nothing written (no input rows): no snapshot.
                Ok(None)
            } else {
                commit(Arc::clone(&store), &ident, changes).await.map(Some)
            };
            match committed {
                Ok(outcome) => {
                    if let Some(o) = outcome {
                        attempts_metric.add(o.attempts as usize);
                    }
                    written.take();
                    let array = Arc::new(UInt64Array::from(vec![rows])) as ArrayRef;
                    Ok(RecordBatch::try_new(count_schema(), vec![array])?)
                }
                Err(e) => {
                    if !is_commit_state_unknown(&e) {
                        written.remove_all(&file_io).await;
                    }
                    Err(e)
                }
            }
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            futures::stream::once(fut),
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
