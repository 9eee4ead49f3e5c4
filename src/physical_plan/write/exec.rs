//! [`DataFileWriterExec`]: the plan node that writes Iceberg data files.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;

use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::single_child;
use arrow::array::RecordBatch;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::{
    Distribution, EquivalenceProperties, LexRequirement, OrderingRequirements,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use iceberg::table::Table;

use super::writer::{
    data_files_schema, tally_batch, write_partition, PartitionWrite, WriterCounters,
};
use crate::commit::WrittenFiles;
use crate::physical_plan::change_rows::ChangeCounts;

/// A report a [`DataFileWriterExec`] appends to its output once all of its partitions have
/// written: rows of its output schema whose spec id is negative (never a partition spec's).
pub(crate) trait WriterTally: Send + Sync + fmt::Debug {
    /// The rows, taken once the last partition has written.
    fn rows(&self) -> Result<RecordBatch>;
}

impl WriterTally for ChangeCounts {
    fn rows(&self) -> Result<RecordBatch> {
        tally_batch(self.get())
    }
}

/// Writes its input as Iceberg data files, one writer per input partition.
///
/// # Algorithm
/// Each input partition is written by its own writer: batches are cast onto the table schema
/// (with field ids), split by partition value (fan-out, one open file per partition value), and
/// written as parquet files that roll over at `write.target-file-size-bytes`. When the table has
/// a sort order the node requires one input stream sorted by it; DataFusion's `EnforceSorting`
/// then puts a `SortExec` below, which spills under memory pressure, so every file is sorted and
/// files cover disjoint ranges of the sort key.
///
/// ```text
///   input partition i ──► [SortExec (spilling)] ──► cast ──► split by partition ──► rolling
///                                                                    parquet files ──► rows
///   output partition i: one row per file (spec_id, data_file JSON)
/// ```
#[derive(Debug)]
pub struct DataFileWriterExec {
    input: Arc<dyn ExecutionPlan>,
    table: Table,
    sort: Option<LexRequirement>,
    written: WrittenFiles,
    /// Whether the input ends with the row lineage columns, written out (see
    /// [`Self::with_row_lineage`]).
    row_lineage: bool,
    /// Overrides the table's `write.target-file-size-bytes`.
    target_file_size: Option<usize>,
    /// Top-level columns (field ids) written without dictionary encoding.
    plain_columns: Vec<i32>,
    /// Whether every row goes through one writer (see [`Self::with_single_writer`]).
    single_writer: bool,
    /// Whether each input partition is sorted on its own (see [`Self::with_local_sort`]).
    local_sort: bool,
    /// What a node below reports in the output (see [`Self::with_tally`]).
    tally: Option<Arc<dyn WriterTally>>,
    /// Partitions whose files are all written (the last one reports the tally).
    finished: Arc<AtomicUsize>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl DataFileWriterExec {
    /// Writes the input's last two columns, `_row_id` and `_last_updated_sequence_number`, into
    /// every file with their reserved field ids: rows a rewrite moves keep their ids. Only
    /// for tables with row lineage (format v3).
    pub fn with_row_lineage(mut self, row_lineage: bool) -> Result<Self> {
        use crate::physical_plan::scan::lineage;
        if row_lineage {
            if !lineage::has_row_lineage(self.table.metadata()) {
                return Err(DataFusionError::Internal(format!(
                    "row lineage columns written to table '{}', which has no row lineage",
                    self.table.identifier()
                )));
            }
            let schema = self.input.schema();
            let n = schema.fields().len();
            let names: Vec<&str> = schema.fields()[n.saturating_sub(2)..]
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            if names != [lineage::ROW_ID, lineage::LAST_UPDATED_SEQUENCE_NUMBER] {
                return Err(DataFusionError::Internal(format!(
                    "the rows written do not end with the row lineage columns: {names:?}"
                )));
            }
        }
        self.row_lineage = row_lineage;
        Ok(self)
    }

    /// Rolls files at `bytes` instead of the table's `write.target-file-size-bytes`.
    pub fn with_target_file_size(mut self, bytes: usize) -> Self {
        self.target_file_size = Some(bytes);
        self
    }

    /// Writes the top-level columns of `field_ids` without dictionary encoding (those whose
    /// dictionaries overflowed in the files a rewrite reads).
    pub fn with_plain_columns(mut self, field_ids: Vec<i32>) -> Self {
        self.plain_columns = field_ids;
        self
    }

    /// The top-level columns (field ids) written without dictionary encoding.
    pub fn plain_columns(&self) -> &[i32] {
        &self.plain_columns
    }

    /// A writer of `input` into `table`, requiring `sort` order when given.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        table: Table,
        sort: Option<LexRequirement>,
        written: WrittenFiles,
    ) -> Result<Self> {
        let input = without_string_views(input)?;
        let properties = Arc::new(Self::compute_properties(&input));
        Ok(Self {
            input,
            table,
            sort,
            written,
            row_lineage: false,
            target_file_size: None,
            plain_columns: vec![],
            single_writer: false,
            local_sort: false,
            tally: None,
            finished: Arc::new(AtomicUsize::new(0)),
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        })
    }

    /// Sorts each input partition on its own and writes it with its own writer: every file is
    /// sorted, but key ranges of files from different writers may overlap. For distributed
    /// writes, where one globally sorted stream would bring every row to one process.
    pub fn with_local_sort(mut self, local: bool) -> Self {
        self.local_sort = local;
        self
    }

    /// Reports `counts` (those of the [`ChangeRowsExec`] below, in the same process) in the
    /// output once every partition has written its files: one more row, a tally, that
    /// the statement reads back to check its passes against each other. The tally travels with
    /// the data file rows, so it reaches the statement from whichever process wrote.
    ///
    /// [`ChangeRowsExec`]: crate::physical_plan::change_rows::ChangeRowsExec
    pub fn with_tally(self, counts: Arc<ChangeCounts>) -> Self {
        self.with_report(counts)
    }

    /// Appends `tally`'s rows to the output once every partition has written its files (see
    /// [`Self::with_tally`]): what a node below in the same process found, reaching the
    /// statement from whichever process wrote.
    pub(crate) fn with_report(mut self, tally: Arc<dyn WriterTally>) -> Self {
        self.tally = Some(tally);
        self
    }

    fn compute_properties(input: &Arc<dyn ExecutionPlan>) -> PlanProperties {
        PlanProperties::new(
            EquivalenceProperties::new(data_files_schema()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Final,
            Boundedness::Bounded,
        )
    }

    /// Writes every row through one writer (its input coalesced to one stream), so files fill
    /// up to the target size instead of one set of files per input partition.
    pub fn with_single_writer(mut self) -> Self {
        self.single_writer = true;
        self
    }

    fn with_target_file_size_of(mut self, bytes: Option<usize>) -> Self {
        self.target_file_size = bytes;
        self
    }

    fn with_single_writer_of(mut self, single: bool) -> Self {
        self.single_writer = single;
        self
    }

    /// The table written to.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Whether the input is required in the table's sort order.
    pub fn is_sorted(&self) -> bool {
        self.sort.is_some()
    }

    /// Whether the row lineage columns are written (see [`Self::with_row_lineage`]).
    pub fn writes_row_lineage(&self) -> bool {
        self.row_lineage
    }

    /// The file size set by [`Self::with_target_file_size`].
    pub fn target_file_size(&self) -> Option<usize> {
        self.target_file_size
    }

    /// Whether every row goes through one writer (see [`Self::with_single_writer`]).
    pub fn is_single_writer(&self) -> bool {
        self.single_writer
    }

    /// Whether each input partition is sorted on its own (see [`Self::with_local_sort`]).
    pub fn is_local_sort(&self) -> bool {
        self.local_sort
    }

    /// Whether the output reports a tally (see [`Self::with_tally`]).
    pub fn has_tally(&self) -> bool {
        self.tally.is_some()
    }
}

/// `input` with its string-view columns cast to plain strings (what the files hold), so the sort
/// a sorted table puts below the writer works on compact batches: a view batch holds on to the
/// whole buffers it points into, which the sort would count and spill again and again.
fn without_string_views(input: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::physical_expr::expressions::{CastExpr, Column};
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_plan::projection::ProjectionExec;
    let schema = input.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| f.data_type() == &DataType::Utf8View)
    {
        return Ok(input);
    }
    let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let col: Arc<dyn PhysicalExpr> = Arc::new(Column::new(f.name(), i));
            let expr = match f.data_type() {
                DataType::Utf8View => Arc::new(CastExpr::new(col, DataType::Utf8, None)) as _,
                _ => col,
            };
            (expr, f.name().clone())
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}

impl DisplayAs for DataFileWriterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let metadata = self.table.metadata();
        write!(
            f,
            "DataFileWriterExec: table={}, spec_id={}",
            self.table.identifier(),
            metadata.default_partition_spec_id()
        )?;
        if let Some(sort) = &self.sort {
            let keys: Vec<String> = sort.iter().map(|r| r.to_string()).collect();
            write!(f, ", sort=[{}]", keys.join(", "))?;
        }
        if self.row_lineage {
            write!(f, ", row_lineage=true")?;
        }
        if let Some(bytes) = self.target_file_size {
            write!(f, ", target_file_size={bytes}")?;
        }
        if self.local_sort && self.sort.is_some() {
            write!(f, ", local_sort=true")?;
        }
        if !self.plain_columns.is_empty() {
            let schema = metadata.current_schema();
            let names: Vec<String> = self
                .plain_columns
                .iter()
                .map(|id| match schema.field_by_id(*id) {
                    Some(field) => field.name.clone(),
                    None => format!("#{id}"),
                })
                .collect();
            write!(f, ", without_dictionary=[{}]", names.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for DataFileWriterExec {
    fn name(&self) -> &str {
        "DataFileWriterExec"
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
        // A sorted table is written from one globally sorted stream: files cover disjoint key
        // ranges, which is what readers prune best on.
        if self.single_writer || (self.sort.is_some() && !self.local_sort) {
            vec![Distribution::SinglePartition]
        } else {
            vec![Distribution::UnspecifiedDistribution]
        }
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        vec![self.sort.clone().map(OrderingRequirements::new)]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
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
        let input = single_child("DataFileWriterExec", children)?;
        let mut node = Self::try_new(
            input,
            self.table.clone(),
            self.sort.clone(),
            self.written.clone(),
        )?
        .with_row_lineage(self.row_lineage)?
        .with_target_file_size_of(self.target_file_size)
        .with_single_writer_of(self.single_writer)
        .with_local_sort(self.local_sort)
        .with_plain_columns(self.plain_columns.clone());
        node.tally = self.tally.clone();
        Ok(Arc::new(node))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let pool = Arc::clone(&context.runtime_env().memory_pool);
        let input = baseline.input(self.input.execute(partition, context)?);
        let counters = WriterCounters {
            rows: MetricBuilder::new(&self.metrics).counter("rows_written", partition),
            files: MetricBuilder::new(&self.metrics).counter("files_written", partition),
            bytes: MetricBuilder::new(&self.metrics).counter("bytes_written", partition),
        };
        let table = self.table.clone();
        let written = self.written.clone();
        let partitions = self.properties.output_partitioning().partition_count();
        let tally = self.tally.clone();
        let finished = Arc::clone(&self.finished);
        let files = write_partition(
            input,
            table,
            partition,
            written,
            counters,
            PartitionWrite {
                row_lineage: self.row_lineage,
                target_file_size: self.target_file_size,
                pool,
                plain_columns: self.plain_columns.clone(),
            },
        );
        let fut = async move {
            let batch = files.await?;
            let Some(counts) = tally else {
                return Ok(batch);
            };
            // The last partition to finish reports: every row the ChangeRowsExec below passed
            // on has reached a writer by then, so its counts are final.
            if finished.fetch_add(1, Ordering::AcqRel) + 1 != partitions {
                return Ok(batch);
            }
            let tally = counts.rows()?;
            Ok(arrow::compute::concat_batches(
                &data_files_schema(),
                [&batch, &tally],
            )?)
        };
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            data_files_schema(),
            futures::stream::once(fut),
        ))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
