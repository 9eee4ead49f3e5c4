//! Merge-on-read pass 1 of `DELETE` and `UPDATE` when the session distributes its plans: the
//! position delete files are written where the matching rows are found, on the workers.
//!
//! ```text
//!  coordinator   DeleteExec / UpdateExec ◄── rows: delete files written, matches per file
//!                        ▲ one stream
//!  worker tasks  PositionDeleteWriterExec  (one delete file per data file, merged with its
//!                        ▲                  earlier deletes: DeleteWriter)
//!                hash(_file) shuffle        (every position of a data file reaches one task)
//!                        ▲
//!  worker tasks  scan(_file, _pos) ─► Filter(condition)
//! ```
//!
//! Memory: a task holds one bitmap of positions per data file it has seen (reserved from the
//! pool). When the pool refuses, format v2 writes what it holds and goes on (a data file may then
//! get several delete files: valid, only less tidy); format v3 allows one deletion vector per
//! data file, so the statement fails with `ResourcesExhausted`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int32Array, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{Distribution, EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use roaring::RoaringTreemap;

use super::{new_file_json, new_file_of_json};
use super::{DeleteWriter, FileDeletes};
use crate::commit::RemovedDeletes;
use crate::commit::WrittenFiles;
use crate::file_planning::PlannedFile;
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::scan::request::FILE_COLUMN;
use crate::physical_plan::single_child;
use crate::storage::location::LocationMap;

/// Writes the position delete files of merge-on-read pass 1 from its rows `(_file, _pos)`,
/// hash-partitioned by `_file`: one delete file per data file with matching rows, holding them
/// and every position of the file's earlier file-scoped deletes (format v3: a deletion vector
/// holding all of its position deletes). Files the statement removes whole are only counted.
///
/// Output, one row per delete file written and one per data file with matches: `data_file`
/// (recorded path), `matched` (rows), and for a delete file `spec_id`, `delete_file` (its
/// manifest entry as JSON) and `replaces` (the earlier delete files it replaces, JSON).
#[derive(Debug)]
pub struct PositionDeleteWriterExec {
    input: Arc<dyn ExecutionPlan>,
    table: Table,
    locations: LocationMap,
    /// The data files pass 1 reads, with the position deletes that apply to them.
    files: Arc<Vec<PlannedFile>>,
    /// Of those, the ones the statement removes whole (counted, no delete file).
    whole: Arc<HashSet<String>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// Schema of [`PositionDeleteWriterExec`]'s output.
fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("data_file", DataType::Utf8, false),
        Field::new("matched", DataType::UInt64, false),
        Field::new("spec_id", DataType::Int32, true),
        Field::new("delete_file", DataType::Utf8, true),
        Field::new("replaces", DataType::Utf8, true),
    ]))
}

impl PositionDeleteWriterExec {
    /// Writes the delete files of `files` (pass 1's data files; those in `whole` are only
    /// counted) of `table` from `input`'s rows `(_file, _pos)`.
    pub(crate) fn try_new(
        input: Arc<dyn ExecutionPlan>,
        table: Table,
        locations: LocationMap,
        files: Vec<PlannedFile>,
        whole: HashSet<String>,
    ) -> Result<Self> {
        Self::with_parts(input, table, locations, Arc::new(files), Arc::new(whole))
    }

    fn with_parts(
        input: Arc<dyn ExecutionPlan>,
        table: Table,
        locations: LocationMap,
        files: Arc<Vec<PlannedFile>>,
        whole: Arc<HashSet<String>>,
    ) -> Result<Self> {
        let schema = input.schema();
        let fields = schema.fields();
        if fields.len() != 2
            || fields[0].name() != FILE_COLUMN
            || fields[1].data_type() != &DataType::Int64
        {
            return Err(DataFusionError::Internal(format!(
                "PositionDeleteWriterExec needs rows ({FILE_COLUMN}, position), got {schema}"
            )));
        }
        let partitions = input.output_partitioning().partition_count();
        let properties = PlanProperties::new(
            EquivalenceProperties::new(output_schema()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Self {
            input,
            table,
            locations,
            files,
            whole,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

/// What the plan codec carries of the node.
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
impl PositionDeleteWriterExec {
    /// The table written to.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// How the table's recorded locations map to object store paths.
    pub fn locations(&self) -> &LocationMap {
        &self.locations
    }

    /// The data files whose positions may arrive.
    pub fn files(&self) -> &[PlannedFile] {
        &self.files
    }

    /// The data files only counted (the statement removes them whole).
    pub fn whole(&self) -> &HashSet<String> {
        &self.whole
    }
}

impl DisplayAs for PositionDeleteWriterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PositionDeleteWriterExec: table={}, files={}",
            self.table.identifier(),
            self.files.len()
        )
    }
}

impl ExecutionPlan for PositionDeleteWriterExec {
    fn name(&self) -> &str {
        "PositionDeleteWriterExec"
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
        // Every position of a data file in one partition: one delete file per data file.
        vec![Distribution::KeyPartitioned(vec![Arc::new(Column::new(
            FILE_COLUMN,
            0,
        ))])]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = single_child("PositionDeleteWriterExec", children)?;
        Ok(Arc::new(Self::with_parts(
            input,
            self.table.clone(),
            self.locations.clone(),
            Arc::clone(&self.files),
            Arc::clone(&self.whole),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let writer = DeleteWriter::new(&self.table, &self.locations, &self.files, &context)?;
        let input = baseline.input(self.input.execute(partition, Arc::clone(&context))?);
        let reservation = MemoryConsumer::new(format!("PositionDeleteWriterExec[{partition}]"))
            .register(context.memory_pool());
        let task = Task {
            writer,
            table: self.table.clone(),
            whole: Arc::clone(&self.whole),
            reservation,
            written: WrittenFiles::default(),
            delete_files: MetricBuilder::new(&self.metrics)
                .counter("delete_files_written", partition),
            flushes: MetricBuilder::new(&self.metrics).counter("early_writes", partition),
        };
        let fut = async move {
            let written = task.written.clone();
            let file_io = task.table.file_io().clone();
            match task.run(input).await {
                Ok(batch) => Ok(batch),
                Err(e) => {
                    // Files this task wrote are nobody's: the statement fails.
                    written.remove_all(&file_io).await;
                    Err(e)
                }
            }
        };
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            output_schema(),
            futures::stream::once(fut),
        ))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One partition of [`PositionDeleteWriterExec`].
struct Task {
    writer: DeleteWriter,
    table: Table,
    whole: Arc<HashSet<String>>,
    reservation: MemoryReservation,
    written: WrittenFiles,
    delete_files: datafusion::physical_plan::metrics::Count,
    flushes: datafusion::physical_plan::metrics::Count,
}

impl Task {
    async fn run(self, mut input: SendableRecordBatchStream) -> Result<RecordBatch> {
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut held: HashMap<String, RoaringTreemap> = HashMap::new();
        let mut held_bytes = 0usize;
        let mut out: Vec<(String, FileDeletes)> = vec![];
        while let Some(batch) = input.next().await {
            let batch = batch?;
            let paths = arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
            let paths = paths.as_string::<i32>();
            let positions = batch.column(1).as_primitive::<Int64Type>();
            let mut row = 0;
            while row < batch.num_rows() {
                // A run of rows of one data file.
                let path = paths.value(row);
                let start = row;
                while row < batch.num_rows() && paths.value(row) == path {
                    row += 1;
                }
                if !self.writer.plans(path) {
                    return Err(DataFusionError::Internal(format!("{path} was not planned")));
                }
                *counts.entry(path.to_string()).or_default() += (row - start) as u64;
                if self.whole.contains(path) {
                    continue;
                }
                let bitmap = held.entry(path.to_string()).or_default();
                let before = bitmap.serialized_size();
                bitmap.extend((start..row).map(|i| positions.value(i) as u64));
                held_bytes = held_bytes + bitmap.serialized_size() - before;
            }
            if let Err(e) = self.reservation.try_resize(held_bytes) {
                // One deletion vector per data file: what is held cannot be written in parts.
                if self.writer.writes_vectors() {
                    return Err(e);
                }
                self.flushes.add(1);
                for (path, positions) in sorted(std::mem::take(&mut held)) {
                    out.push((path.clone(), self.write(&path, positions).await?));
                }
                held_bytes = 0;
                self.reservation.free();
            }
        }
        for (path, positions) in sorted(held) {
            out.push((path.clone(), self.write(&path, positions).await?));
        }
        self.reservation.free();
        encode(&out, counts, self.table.metadata())
    }

    async fn write(&self, path: &str, positions: RoaringTreemap) -> Result<FileDeletes> {
        let file = self.writer.write(path, positions, &self.written).await?;
        self.delete_files.add(1);
        Ok(file)
    }
}

fn sorted(held: HashMap<String, RoaringTreemap>) -> Vec<(String, RoaringTreemap)> {
    let mut held: Vec<_> = held.into_iter().collect();
    held.sort_by(|a, b| a.0.cmp(&b.0));
    held
}

/// The output batch: a row per delete file written, a row per data file's matches.
fn encode(
    written: &[(String, FileDeletes)],
    counts: HashMap<String, u64>,
    metadata: &TableMetadata,
) -> Result<RecordBatch> {
    let rows = written.len() + counts.len();
    let mut data_files = Vec::with_capacity(rows);
    let mut matched = Vec::with_capacity(rows);
    let mut spec_ids = Vec::with_capacity(rows);
    let mut delete_files = Vec::with_capacity(rows);
    let mut replaces = Vec::with_capacity(rows);
    for (path, deletes) in written {
        let spec_id = deletes.file.spec_id;
        let json = new_file_json(&deletes.file, metadata)?;
        let replaced = serde_json::to_string(&deletes.replaces)
            .map_err(|e| DataFusionError::Internal(format!("encoding replaced deletes: {e}")))?;
        data_files.push(path.clone());
        matched.push(0);
        spec_ids.push(Some(spec_id));
        delete_files.push(Some(json));
        replaces.push(Some(replaced));
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort();
    for (path, n) in counts {
        data_files.push(path);
        matched.push(n);
        spec_ids.push(None);
        delete_files.push(None);
        replaces.push(None);
    }
    Ok(RecordBatch::try_new(
        output_schema(),
        vec![
            Arc::new(StringArray::from(data_files)),
            Arc::new(UInt64Array::from(matched)),
            Arc::new(Int32Array::from(spec_ids)),
            Arc::new(StringArray::from(delete_files)),
            Arc::new(StringArray::from(replaces)),
        ],
    )?)
}

/// What the writers reported, summed over their output: matched rows per data file, and the
/// delete files written (recorded in `written` as they arrive, to be removed if the statement
/// fails).
#[derive(Default)]
pub(crate) struct Reported {
    pub counts: HashMap<String, u64>,
    pub files: Vec<FileDeletes>,
}

impl Reported {
    /// Adds one output batch of [`PositionDeleteWriterExec`].
    pub(crate) fn add(
        &mut self,
        batch: &RecordBatch,
        metadata: &TableMetadata,
        written: &WrittenFiles,
    ) -> Result<()> {
        let bad = || DataFusionError::Internal("unexpected position delete writer output".into());
        if batch.schema().fields() != output_schema().fields() {
            return Err(bad());
        }
        let data_files = batch.column(0).as_string::<i32>();
        let matched = batch
            .column(1)
            .as_primitive::<arrow::datatypes::UInt64Type>();
        let spec_ids = batch
            .column(2)
            .as_primitive::<arrow::datatypes::Int32Type>();
        let delete_files = batch.column(3).as_string::<i32>();
        let replaces = batch.column(4).as_string::<i32>();
        for i in 0..batch.num_rows() {
            if delete_files.is_null(i) {
                *self
                    .counts
                    .entry(data_files.value(i).to_string())
                    .or_default() += matched.value(i);
                continue;
            }
            if spec_ids.is_null(i) || replaces.is_null(i) {
                return Err(bad());
            }
            let file = new_file_of_json(spec_ids.value(i), delete_files.value(i), metadata)?;
            written.record(file.file.file_path().to_string());
            let replaces: RemovedDeletes =
                serde_json::from_str(replaces.value(i)).map_err(|e| {
                    DataFusionError::Internal(format!("undecodable replaced deletes: {e}"))
                })?;
            self.files.push(FileDeletes { file, replaces });
        }
        Ok(())
    }
}
