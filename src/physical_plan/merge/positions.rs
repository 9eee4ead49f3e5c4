//! The target rows a `MERGE` changes, by file and position: what merge-on-read writes as position
//! deletes and copy-on-write leaves out of the files it rewrites ([`DropPositionsExec`]). The
//! same structure holds every matched position to enforce the SQL cardinality rule (a target
//! row matched by two source rows is an error). Positions are roaring bitmaps, reserved from the
//! memory pool.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use roaring::RoaringTreemap;

use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::file_keys::FileKeys;
use crate::physical_plan::keep_rows::keep_rows;
use crate::physical_plan::single_child;

/// Positions of one batch, grouped by file.
#[derive(Debug, Default)]
pub(crate) struct FilePositions(HashMap<String, Vec<u64>>);

impl FilePositions {
    /// The (file, position) of each row, `files` and `positions` being its columns.
    pub(crate) fn of(files: &ArrayRef, positions: &arrow::array::Int64Array) -> Result<Self> {
        let files = FileKeys::of(files)?;
        let mut by_key: Vec<Vec<u64>> = vec![vec![]; files.names.len()];
        for (i, &k) in files.keys.iter().enumerate() {
            by_key[k].push(positions.value(i) as u64);
        }
        let mut out = Self::default();
        for (k, found) in by_key.into_iter().enumerate() {
            if !found.is_empty() {
                out.0
                    .entry(files.names.value(k).to_string())
                    .or_default()
                    .extend(found);
            }
        }
        Ok(out)
    }

    fn len(&self) -> u64 {
        self.0.values().map(|v| v.len() as u64).sum()
    }
}

/// Positions by data file.
pub(crate) type PositionMap = HashMap<String, RoaringTreemap>;

#[derive(Debug, Default)]
struct Held {
    matched: PositionMap,
    changed: PositionMap,
    /// The deleted ones among `changed`, when kept apart (a copy-on-write first pass that
    /// leaves the updated rows' new versions to the rewrite tells them apart this way; a change
    /// set rarely deletes as many rows as it updates).
    deleted: Option<PositionMap>,
    /// Bytes the bitmaps take (as serialized; close to their size in memory).
    bytes: usize,
}

/// The pool's consumer for a statement's [`MergePositions`]. The bitmaps cannot spill: in a
/// fair pool, a consumer that says it can would get an equal share with every spillable buffer
/// (a Grace join's partitions, hundreds of them) and fail past it; as an unspillable one it
/// holds what it needs while the pool has room, and the spillable ones spill sooner.
pub(crate) fn positions_consumer() -> MemoryConsumer {
    MemoryConsumer::new("MergePositions")
}

/// The positions a statement's join found, shared by its partitions.
#[derive(Debug)]
pub(crate) struct MergePositions {
    held: Mutex<Held>,
    reservation: MemoryReservation,
    /// Rows updated, deleted, inserted.
    pub updated: AtomicU64,
    pub deleted: AtomicU64,
    pub inserted: AtomicU64,
}

impl MergePositions {
    pub(crate) fn new(reservation: MemoryReservation) -> Self {
        Self {
            held: Mutex::new(Held::default()),
            reservation,
            updated: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            inserted: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Held>> {
        self.held
            .lock()
            .map_err(|_| DataFusionError::Internal("MERGE positions lock poisoned".into()))
    }

    /// Records target rows a source row matched; errors when one was matched before.
    pub(crate) fn matched(&self, rows: &FilePositions) -> Result<()> {
        let mut held = self.lock()?;
        let held = &mut *held;
        for (file, positions) in &rows.0 {
            let bitmap = held.matched.entry(file.clone()).or_default();
            let before = bitmap.serialized_size();
            for &p in positions {
                if !bitmap.insert(p) {
                    return Err(DataFusionError::Execution(format!(
                        "MERGE matched a target row more than once (row {p} of {file}): each \
                         target row may match at most one source row; nothing was changed"
                    )));
                }
            }
            held.bytes = held.bytes + bitmap.serialized_size() - before;
        }
        self.reserve(held.bytes)
    }

    /// Keeps the deleted positions apart too (see [`Self::take_deleted`]).
    pub(crate) fn keeping_deleted(self) -> Self {
        if let Ok(mut held) = self.held.lock() {
            held.deleted = Some(HashMap::new());
        }
        self
    }

    /// Records target rows a clause updates or deletes.
    pub(crate) fn changed(&self, rows: &FilePositions, change: Change) -> Result<()> {
        let mut held = self.lock()?;
        let held = &mut *held;
        for (file, positions) in &rows.0 {
            let bitmap = held.changed.entry(file.clone()).or_default();
            let before = bitmap.serialized_size();
            for &p in positions {
                if !bitmap.insert(p) {
                    return Err(DataFusionError::Internal(format!(
                        "MERGE changed row {p} of {file} twice"
                    )));
                }
            }
            held.bytes = held.bytes + bitmap.serialized_size() - before;
            if let (Change::Delete, Some(deleted)) = (change, held.deleted.as_mut()) {
                let bitmap = deleted.entry(file.clone()).or_default();
                let before = bitmap.serialized_size();
                bitmap.extend(positions.iter().copied());
                held.bytes = held.bytes + bitmap.serialized_size() - before;
            }
        }
        let counter = match change {
            Change::Update => &self.updated,
            Change::Delete => &self.deleted,
        };
        counter.fetch_add(rows.len(), Ordering::Relaxed);
        self.reserve(held.bytes)
    }

    /// Counts rows inserted.
    pub(crate) fn inserted(&self, n: u64) {
        self.inserted.fetch_add(n, Ordering::Relaxed);
    }

    fn reserve(&self, bytes: usize) -> Result<()> {
        self.reservation.try_resize(bytes).map_err(|e| {
            e.context(
                "MERGE holds the positions of the target rows it matches and changes as bitmaps",
            )
        })
    }

    /// The changed positions by file (the matched ones are dropped with their memory).
    pub(crate) fn take_changed(&self) -> Result<PositionMap> {
        let mut held = self.lock()?;
        held.matched = HashMap::new();
        Ok(std::mem::take(&mut held.changed))
    }

    /// The deleted positions by file, when kept apart.
    pub(crate) fn take_deleted(&self) -> Result<PositionMap> {
        let mut held = self.lock()?;
        Ok(held.deleted.take().unwrap_or_default())
    }

    /// (updated, deleted, inserted) rows.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        (
            self.updated.load(Ordering::Relaxed),
            self.deleted.load(Ordering::Relaxed),
            self.inserted.load(Ordering::Relaxed),
        )
    }
}

/// The spec id of a writer's report row holding one data file's changed positions.
const POSITIONS_SPEC_ID: i32 = -2;
/// The spec id of a writer's report row holding the rows updated, deleted and inserted.
const COUNTS_SPEC_ID: i32 = -3;
/// The spec id of a writer's report row holding a rewrite's rows read and dropped.
const DROP_COUNTS_SPEC_ID: i32 = -4;

#[derive(serde::Serialize, serde::Deserialize)]
struct DropRow {
    read: u64,
    dropped: u64,
}

/// A distributed copy-on-write rewrite: each task's writer reports the rows its task's
/// [`DropPositionsExec`] read and dropped.
impl crate::physical_plan::write::WriterTally for DropCounts {
    fn rows(&self) -> Result<RecordBatch> {
        let row = DropRow {
            read: self.read.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        };
        Ok(RecordBatch::try_new(
            crate::physical_plan::write::data_files_schema(),
            vec![
                Arc::new(arrow::array::Int32Array::from(vec![DROP_COUNTS_SPEC_ID])),
                Arc::new(arrow::array::StringArray::from(vec![to_json(&row)?])),
            ],
        )?)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PositionsRow {
    file: String,
    /// The roaring bitmap, serialized, as hex.
    positions: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CountsRow {
    updated: u64,
    deleted: u64,
    inserted: u64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>> {
    let bad = || DataFusionError::Internal("undecodable MERGE positions".into());
    if !text.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
        .collect()
}

/// `positions` serialized (roaring's portable format), as hex.
pub(crate) fn bitmap_hex(positions: &RoaringTreemap) -> Result<String> {
    let mut bytes = Vec::with_capacity(positions.serialized_size());
    positions
        .serialize_into(&mut bytes)
        .map_err(|e| DataFusionError::Internal(format!("serializing positions: {e}")))?;
    Ok(hex(&bytes))
}

/// The positions [`bitmap_hex`] wrote.
pub(crate) fn bitmap_of_hex(text: &str) -> Result<RoaringTreemap> {
    let bytes = unhex(text)?;
    RoaringTreemap::deserialize_from(bytes.as_slice())
        .map_err(|e| DataFusionError::Internal(format!("undecodable positions: {e}")))
}

/// A distributed `MERGE`'s first pass: each task's writer reports the positions its task's
/// join changed, and its counts, as rows of its output.
impl crate::physical_plan::write::WriterTally for MergePositions {
    fn rows(&self) -> Result<RecordBatch> {
        let changed = self.take_changed()?;
        let mut spec_ids = vec![];
        let mut jsons = vec![];
        let mut files: Vec<_> = changed.into_iter().collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (file, positions) in files {
            let row = PositionsRow {
                file,
                positions: bitmap_hex(&positions)?,
            };
            spec_ids.push(POSITIONS_SPEC_ID);
            jsons.push(to_json(&row)?);
        }
        let (updated, deleted, inserted) = self.counts();
        spec_ids.push(COUNTS_SPEC_ID);
        jsons.push(to_json(&CountsRow {
            updated,
            deleted,
            inserted,
        })?);
        Ok(RecordBatch::try_new(
            crate::physical_plan::write::data_files_schema(),
            vec![
                Arc::new(arrow::array::Int32Array::from(spec_ids)),
                Arc::new(arrow::array::StringArray::from(jsons)),
            ],
        )?)
    }
}

fn to_json(v: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(v)
        .map_err(|e| DataFusionError::Internal(format!("encoding a MERGE report: {e}")))
}

/// What the writers of a distributed `MERGE`'s first pass reported, summed over their tasks.
#[derive(Debug, Default)]
pub(crate) struct MergeReport {
    pub changed: PositionMap,
    pub updated: u64,
    pub deleted: u64,
    pub inserted: u64,
    /// The rewrite's rows read and dropped ([`DropPositionsExec`]).
    pub read: u64,
    pub dropped: u64,
}

impl MergeReport {
    /// Adds the report rows of one writer output batch (its data file rows are skipped).
    pub(crate) fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let (spec_ids, jsons) = crate::physical_plan::write::data_file_columns(batch)?;
        let bad = |e: serde_json::Error| {
            DataFusionError::Internal(format!("undecodable MERGE report row: {e}"))
        };
        for i in 0..batch.num_rows() {
            match spec_ids.value(i) {
                POSITIONS_SPEC_ID => {
                    let row: PositionsRow = serde_json::from_str(jsons.value(i)).map_err(bad)?;
                    let positions = bitmap_of_hex(&row.positions)?;
                    let held = self.changed.entry(row.file.clone()).or_default();
                    let before = held.len() + positions.len();
                    *held |= positions;
                    // Each target row is joined in one task only.
                    if held.len() != before {
                        return Err(DataFusionError::Internal(format!(
                            "two tasks changed the same rows of {}",
                            row.file
                        )));
                    }
                }
                COUNTS_SPEC_ID => {
                    let row: CountsRow = serde_json::from_str(jsons.value(i)).map_err(bad)?;
                    self.updated += row.updated;
                    self.deleted += row.deleted;
                    self.inserted += row.inserted;
                }
                DROP_COUNTS_SPEC_ID => {
                    let row: DropRow = serde_json::from_str(jsons.value(i)).map_err(bad)?;
                    self.read += row.read;
                    self.dropped += row.dropped;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Rows read and dropped by a [`DropPositionsExec`], over its partitions.
#[derive(Debug, Default)]
pub(crate) struct DropCounts {
    pub read: AtomicU64,
    pub dropped: AtomicU64,
}

/// Copy-on-write's second pass: the rows of the rewritten files (its child reads them with
/// their file and position as the last two columns) without those at `positions`; the output
/// is the table's columns.
#[derive(Debug)]
pub(crate) struct DropPositionsExec {
    input: Arc<dyn ExecutionPlan>,
    positions: Arc<PositionMap>,
    schema: SchemaRef,
    counts: Arc<DropCounts>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl DropPositionsExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        positions: Arc<PositionMap>,
        schema: SchemaRef,
        counts: Arc<DropCounts>,
    ) -> Self {
        let properties = Arc::new(
            input
                .properties()
                .as_ref()
                .clone()
                .with_eq_properties(EquivalenceProperties::new(Arc::clone(&schema))),
        );
        Self {
            input,
            positions,
            schema,
            counts,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        }
    }
}

/// What the plan codec carries of the node.
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
impl DropPositionsExec {
    pub(crate) fn positions(&self) -> &Arc<PositionMap> {
        &self.positions
    }

    pub(crate) fn schema_out(&self) -> &SchemaRef {
        &self.schema
    }

    pub(crate) fn counts(&self) -> &Arc<DropCounts> {
        &self.counts
    }
}

impl DisplayAs for DropPositionsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let rows: u64 = self.positions.values().map(|b| b.len()).sum();
        write!(
            f,
            "DropPositionsExec: files={}, rows={rows}",
            self.positions.len()
        )
    }
}

impl ExecutionPlan for DropPositionsExec {
    fn name(&self) -> &str {
        "DropPositionsExec"
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

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        // Its properties do not carry the input's ordering over (the output drops the file and
        // position columns): a sort the writer needs goes above it.
        vec![false]
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::LowerEqual
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(
            single_child("DropPositionsExec", children)?,
            Arc::clone(&self.positions),
            Arc::clone(&self.schema),
            Arc::clone(&self.counts),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let input = baseline.input(self.input.execute(partition, context)?);
        let positions = Arc::clone(&self.positions);
        let schema = Arc::clone(&self.schema);
        let counts = Arc::clone(&self.counts);
        let dropped = MetricBuilder::new(&self.metrics).counter("rows_dropped", partition);
        let columns = schema.fields().len();
        let out_schema = Arc::clone(&schema);
        let stream = input.map(move |batch| {
            let batch = batch?;
            let n = batch.num_rows();
            let files = FileKeys::of(batch.column(columns))?;
            let pos = batch
                .column(columns + 1)
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| DataFusionError::Internal("position column is not Int64".into()))?;
            let drop = positions_in(&files, pos, |f| positions.get(f));
            let gone = drop.count_set_bits();
            counts.read.fetch_add(n as u64, Ordering::Relaxed);
            counts.dropped.fetch_add(gone as u64, Ordering::Relaxed);
            dropped.add(gone);
            // Without the file and position columns, the batch holds its columns alone.
            let (_, mut kept, _) = batch.into_parts();
            kept.truncate(columns);
            keep_rows(RecordBatch::try_new(Arc::clone(&schema), kept)?, &!&drop)
        });
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(out_schema, stream))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Whether each row's (file, position) is in its file's bitmap (`bitmap_of`). Positions of one
/// file rise through a batch of a scan, so each file's bitmap is walked alongside them; a
/// position out of order is looked up instead.
pub(crate) fn positions_in<'a>(
    files: &FileKeys,
    pos: &Int64Array,
    bitmap_of: impl Fn(&str) -> Option<&'a RoaringTreemap>,
) -> BooleanBuffer {
    type Walk<'a> = (
        &'a RoaringTreemap,
        std::iter::Peekable<roaring::treemap::Iter<'a>>,
        u64,
    );
    let mut walks: Vec<Option<Option<Walk<'a>>>> = vec![None; files.names.len()];
    let mut out = vec![false; pos.len()];
    for (i, hit) in out.iter_mut().enumerate() {
        let k = files.keys[i];
        let walk = walks[k].get_or_insert_with(|| {
            bitmap_of(files.names.value(k)).map(|b| (b, b.iter().peekable(), 0))
        });
        let Some((bitmap, iter, last)) = walk else {
            continue;
        };
        let p = pos.value(i) as u64;
        if p < *last {
            *hit = bitmap.contains(p);
            continue;
        }
        *last = p;
        while iter.next_if(|&v| v < p).is_some() {}
        *hit = iter.peek() == Some(&p);
    }
    BooleanBuffer::from(out)
}

/// What a clause does to a target row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Update,
    Delete,
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, DictionaryArray, Int64Array, StringArray, UInt16Array};

    #[test]
    fn positions_walk_and_look_up_alike() {
        let a: RoaringTreemap = [1u64, 5, 6, 100, 5_000_000_000].into_iter().collect();
        let b: RoaringTreemap = [0u64, 2].into_iter().collect();
        let map: PositionMap = [("a".to_string(), a), ("b".to_string(), b)].into();
        // Rows of files a, b and c (no bitmap), a's positions rising but for one step back.
        let names = StringArray::from(vec!["a", "b", "c"]);
        let keys = UInt16Array::from(vec![0, 0, 1, 0, 2, 0, 0, 1, 0, 0]);
        let files: ArrayRef = Arc::new(DictionaryArray::new(keys, Arc::new(names)));
        let pos = Int64Array::from(vec![0, 1, 0, 5, 5, 7, 6, 2, 100, 5_000_000_000]);
        let files = FileKeys::of(&files).unwrap();
        let got = positions_in(&files, &pos, |f| map.get(f));
        let want: Vec<bool> = (0..pos.len())
            .map(|i| {
                let name = files.names.value(files.keys[i]);
                map.get(name)
                    .is_some_and(|b| b.contains(pos.value(i) as u64))
            })
            .collect();
        assert_eq!(got.iter().collect::<Vec<_>>(), want);
        assert_eq!(got.count_set_bits(), 7);
    }
}
