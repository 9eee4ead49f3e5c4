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

use crate::commit::MetadataStore;
use crate::commit::{commit_or_clean_up, SnapshotChanges, WriteTo, STATEMENT_ID_PROPERTY};
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::single_child;
use crate::physical_plan::write::{decode_data_files, WrittenFiles};

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
    /// The statement's id, recorded in the snapshot so that running the node again commits
    /// nothing more ([`STATEMENT_ID_PROPERTY`]).
    statement_id: Option<String>,
    /// Where the snapshot goes.
    write_to: WriteTo,
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

/// The one row of a statement node: `count`, `n`.
pub(crate) fn count_batch(n: u64) -> Result<RecordBatch> {
    let array = Arc::new(UInt64Array::from(vec![n])) as ArrayRef;
    Ok(RecordBatch::try_new(count_schema(), vec![array])?)
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
            statement_id: None,
            write_to: WriteTo::Main,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        }
    }

    /// Commits once however often it runs: the snapshot records `id` (a new one per statement)
    /// and a run that finds it committed already removes the files it wrote and answers with
    /// that commit's row count. For hosts that retry tasks.
    pub fn with_statement_id(mut self, id: impl Into<String>) -> Self {
        self.statement_id = Some(id.into());
        self
    }

    /// Commits to a branch other than `main`, or stages the snapshot (see [`WriteTo`]).
    pub fn with_write_to(mut self, to: WriteTo) -> Self {
        self.write_to = to;
        self
    }

    /// Where the snapshot goes.
    pub fn write_to(&self) -> &WriteTo {
        &self.write_to
    }

    /// The statement id (see [`Self::with_statement_id`]).
    pub fn statement_id(&self) -> Option<&str> {
        self.statement_id.as_deref()
    }

    /// The table as planned.
    pub fn table(&self) -> &Table {
        &self.table
    }
}

impl DisplayAs for CommitExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CommitExec: table={}, operation=append",
            self.table.identifier()
        )?;
        match &self.write_to {
            WriteTo::Main => Ok(()),
            WriteTo::Branch(b) => write!(f, ", branch={b}"),
            WriteTo::Staged(id) => write!(f, ", staged wap.id={id}"),
        }
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
        let mut node = Self::new(
            input,
            Arc::clone(&self.store),
            self.table.clone(),
            self.written.clone(),
        );
        node.statement_id = self.statement_id.clone();
        node.write_to = self.write_to.clone();
        Ok(Arc::new(node))
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
        let baseline = Baseline::new(&self.metrics, 0);
        let mut input = baseline.input(self.input.execute(0, context)?);
        let store = Arc::clone(&self.store);
        let table = self.table.clone();
        let written = self.written.clone();
        let statement_id = self.statement_id.clone();
        let write_to = self.write_to.clone();
        let files_metric = MetricBuilder::new(&self.metrics).counter("files_committed", 0);
        let attempts_metric = MetricBuilder::new(&self.metrics).counter("commit_attempts", 0);
        let committed = async move {
            let file_io = store.file_io().clone();
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
            let mut changes = SnapshotChanges::append(files);
            changes.write_to = write_to;
            if let Some(id) = statement_id {
                changes
                    .summary_properties
                    .insert(STATEMENT_ID_PROPERTY.to_string(), id);
            }
            let rows = changes.added_records();
            files_metric.add(changes.added_data_files.len());
            if changes.added_data_files.is_empty() {
                // Nothing written (no input rows): no snapshot.
                written.take();
                return Ok(rows);
            }
            let o = commit_or_clean_up(&store, &table, changes, &written).await?;
            attempts_metric.add(o.attempts as usize);
            if !o.duplicate {
                return Ok(rows);
            }
            // An earlier run of this statement committed, and the answer is that commit's (this
            // run's own count when the snapshot does not record one).
            Ok(o.table
                .metadata()
                .snapshot_by_id(o.snapshot_id)
                .and_then(|s| s.summary().additional_properties.get("added-records"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(rows))
        };
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            futures::stream::once(async move { count_batch(committed.await?) }),
        ))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
