//! The build side of the equality-delete join: the delete rows' keys read into a key table
//! (reserved from the pool), or, when the pool refuses it, partitioned by hash into spill files
//! (Grace), each loaded again when its turn comes.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, BinaryArray, BinaryBuilder, Int32Array, Int64Array, RecordBatch, UInt32Array,
};
use arrow::compute::{cast, take_record_batch};
use arrow::datatypes::{DataType, Int32Type, Int64Type, SchemaRef};
use arrow::row::{RowConverter, Rows};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SpillFile;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::metrics::{Count, SpillMetrics, Time};
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use futures::StreamExt;

use super::table::{partition_of, KeyTable};
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::spill::SpillWriter;

/// Spill files being written, one per hash partition.
pub(super) struct Partitioner<'a> {
    pub(super) level: u32,
    pub(super) joiner: &'a Joiner,
    pub(super) schema: SchemaRef,
    pub(super) writers: Vec<Option<SpillWriter>>,
}

impl<'a> Partitioner<'a> {
    pub(super) fn new(joiner: &'a Joiner, manager: &SpillManager, level: u32) -> Self {
        Self {
            level,
            joiner,
            schema: Arc::clone(manager.schema()),
            writers: (0..joiner.fanout).map(|_| None).collect(),
        }
    }

    /// Appends each row of `batch` to the partition of its key.
    pub(super) fn push<'k>(
        &mut self,
        batch: &RecordBatch,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> Result<()> {
        let fanout = self.writers.len();
        let mut indices: Vec<Vec<u32>> = vec![vec![]; fanout];
        for (i, key) in keys.enumerate() {
            indices[partition_of(key, self.level, fanout)].push(i as u32);
        }
        for (p, idx) in indices.into_iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            let part = take_record_batch(batch, &UInt32Array::from(idx))?;
            let writer = match &mut self.writers[p] {
                Some(w) => w,
                slot => slot.insert(SpillWriter::create(
                    &self.joiner.env,
                    &self.schema,
                    self.joiner.spill_metrics.clone(),
                    "EqualityDeleteExec",
                )?),
            };
            writer.append(&part)?;
        }
        Ok(())
    }

    pub(super) fn finish(self) -> Result<Vec<Option<Arc<dyn SpillFile>>>> {
        self.writers
            .into_iter()
            .map(|w| match w {
                Some(w) => w.finish().map(Some),
                None => Ok(None),
            })
            .collect()
    }
}

/// Deleted keys once read (the whole build side, or one spilled partition of it).
pub(super) enum Loaded {
    /// Every key fits in memory, paid for by the reservation.
    Fits(KeyTable, MemoryReservation),
    /// Too large: the keys, partitioned by key hash into spill files (`None`: no key there).
    Split(Vec<Option<Arc<dyn SpillFile>>>),
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loaded::Fits(table, reservation) => f
                .debug_tuple("Fits")
                .field(table)
                .field(reservation)
                .finish(),
            Loaded::Split(files) => {
                let spilled = files.iter().filter(|f| f.is_some()).count();
                write!(f, "Split({spilled} of {} partitions spilled)", files.len())
            }
        }
    }
}

/// One partition's share of the join.
pub(super) struct Joiner {
    /// The node's baseline metrics (the build side's streams are its inputs).
    pub(super) baseline: Baseline,
    pub(super) converter: RowConverter,
    /// Types of the key columns (the build side's).
    pub(super) key_types: Vec<DataType>,
    pub(super) columns: EqualityDeleteColumns,
    pub(super) fanout: usize,
    pub(super) key_spill: SpillManager,
    pub(super) probe_spill: SpillManager,
    pub(super) env: Arc<RuntimeEnv>,
    pub(super) spill_metrics: SpillMetrics,
    pub(super) pool: Arc<dyn MemoryPool>,
    /// Probe columns output (all when `None`).
    pub(super) projection: Option<Vec<usize>>,
    /// The width of the single integer key, when its deleted values can be held as a
    /// [`super::table::KeyRange`].
    pub(super) range_width: Option<usize>,
    pub(super) partition: usize,
    pub(super) deleted: Count,
    pub(super) build_keys: Count,
    /// Probe rows checked against an exact integer key range (the rest hash into the table).
    pub(super) key_range_rows: Count,
    /// Time reading the delete rows into the key table (or spill partitions).
    pub(super) build_time: Time,
    /// Time looking probe rows up and filtering them.
    pub(super) probe_time: Time,
    pub(super) grace_partitions: Count,
}

/// The (key, scope, seq) rows of a table, for spilling.
pub(super) fn key_batches(table: &KeyTable) -> Result<Vec<RecordBatch>> {
    let mut out = vec![];
    let entries: Vec<(&[u8], i32, i64)> = table.iter().collect();
    for chunk in entries.chunks(SPILL_BATCH_ROWS) {
        let mut keys = BinaryBuilder::new();
        for (k, _, _) in chunk {
            keys.append_value(k);
        }
        let scope = Int32Array::from_iter_values(chunk.iter().map(|(_, s, _)| *s));
        let seq = Int64Array::from_iter_values(chunk.iter().map(|(_, _, q)| *q));
        out.push(RecordBatch::try_from_iter([
            ("key", Arc::new(keys.finish()) as ArrayRef),
            ("scope", Arc::new(scope) as ArrayRef),
            ("seq", Arc::new(seq) as ArrayRef),
        ])?);
    }
    Ok(out)
}

/// Adds the key range or filter when the pool grants its memory (the table works without it).
pub(super) fn seal(
    table: &mut KeyTable,
    reservation: &MemoryReservation,
    range_width: Option<usize>,
) {
    table.seal(range_width);
    if reservation.try_resize(table.size()).is_err() {
        table.unseal();
        reservation.resize(table.size());
    }
}

/// The width of the signed integer a column of `data_type` stores, for the types whose row
/// format [`ProbeKeys::Signed`] reproduces.
pub(super) fn signed_width(data_type: &DataType) -> Option<usize> {
    match data_type {
        DataType::Int32 | DataType::Date32 | DataType::Time32(_) => Some(4),
        DataType::Int64
        | DataType::Date64
        | DataType::Time64(_)
        | DataType::Timestamp(_, _)
        | DataType::Duration(_) => Some(8),
        DataType::Decimal128(_, _) => Some(16),
        _ => None,
    }
}

impl Joiner {
    pub(super) fn reservation(&self, what: &str) -> MemoryReservation {
        MemoryConsumer::new(format!("EqualityDeleteExec[{what}]"))
            .with_can_spill(true)
            .register(&self.pool)
    }

    pub(super) fn encode(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.converter.convert_columns(columns)?)
    }

    /// Reads the delete rows of `build` into a key table, or into spill partitions when the
    /// pool refuses the table.
    pub(super) async fn build(
        &self,
        build: Arc<dyn ExecutionPlan>,
        context: Arc<TaskContext>,
    ) -> Result<Loaded> {
        // The build runs again if partitions of the probe side run after the others let it
        // go: its plan starts afresh each time (a file scan's queue of files shared between its
        // partitions would otherwise be the one the first build drained).
        let build = reset_plan_states(build)?;
        let streams = (0..build.output_partitioning().partition_count())
            .map(|p| Ok(self.baseline.input(build.execute(p, Arc::clone(&context))?)))
            .collect::<Result<Vec<_>>>()?;
        let keys = futures::stream::select_all(streams).map(|b| self.key_batch(&b?));
        let timer = self.build_time.timer();
        let loaded = self.fill(keys, 0, "build").await?;
        timer.done();
        if let Loaded::Fits(table, _) = &loaded {
            self.build_keys.add(table.len());
        }
        Ok(loaded)
    }

    /// Delete rows (key…, delete_seq, scope) as a batch of (row-encoded key, scope, seq).
    pub(super) fn key_batch(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let k = self.columns.keys.len();
        let rows = self.encode(&batch.columns()[..k])?;
        let mut keys = BinaryBuilder::new();
        for r in rows.iter() {
            keys.append_value(r.as_ref());
        }
        Ok(RecordBatch::try_new(
            Arc::clone(self.key_spill.schema()),
            vec![
                Arc::new(keys.finish()),
                cast(batch.column(k + 1), &DataType::Int32)?,
                cast(batch.column(k), &DataType::Int64)?,
            ],
        )?)
    }

    /// Reads key batches into a table, or, once the pool refuses it, into spill partitions
    /// split at `level`.
    pub(super) async fn fill(
        &self,
        mut batches: impl futures::Stream<Item = Result<RecordBatch>> + Unpin,
        level: u32,
        consumer: &str,
    ) -> Result<Loaded> {
        let mut table = KeyTable::default();
        let reservation = self.reservation(consumer);
        let mut split: Option<Partitioner> = None;
        while let Some(batch) = batches.next().await {
            let batch = batch?;
            let keys = binary_keys(&batch)?;
            if split.is_none() {
                let projected = table.size_after(batch.num_rows(), keys.value_data().len());
                if reservation.try_resize(projected).is_ok() {
                    let scope = batch.column(1).as_primitive::<Int32Type>();
                    let seq = batch.column(2).as_primitive::<Int64Type>();
                    table.reserve(batch.num_rows());
                    for i in 0..batch.num_rows() {
                        table.insert(keys.value(i), scope.value(i), seq.value(i));
                    }
                    reservation.resize(table.size());
                    continue;
                }
                // The pool refuses: everything goes to disk, partitioned by key.
                let mut p = Partitioner::new(self, &self.key_spill, level);
                for kb in key_batches(&table)? {
                    p.push(&kb, binary_keys(&kb)?.iter().flatten())?;
                }
                table = KeyTable::default();
                reservation.resize(0);
                split = Some(p);
            }
            if let Some(p) = split.as_mut() {
                p.push(&batch, keys.iter().flatten())?;
            }
        }
        match split {
            None => {
                seal(&mut table, &reservation, self.range_width);
                Ok(Loaded::Fits(table, reservation))
            }
            Some(p) => Ok(Loaded::Split(p.finish()?)),
        }
    }

    /// Loads one spilled build partition, or splits it at `level` when the pool refuses it.
    pub(super) async fn load(&self, file: Arc<dyn SpillFile>, level: u32) -> Result<Loaded> {
        if level > MAX_LEVEL {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "equality deletes: a key partition still exceeds the memory pool after {MAX_LEVEL} rounds of partitioning (partition {})",
                self.partition
            )));
        }
        let stream = self.key_spill.read_spill_as_stream(file, None)?;
        self.fill(stream, level, &self.partition.to_string()).await
    }
}

/// Deepest Grace re-partitioning before giving up.
pub(super) const MAX_LEVEL: u32 = 6;

/// Rows per batch when spilling the key table.
pub(super) const SPILL_BATCH_ROWS: usize = 8192;

/// Where the keys and the gate of each row are in the probe input.
#[derive(Debug, Clone)]
pub struct EqualityDeleteColumns {
    /// Key columns, in the order of the build side's key columns.
    pub keys: Vec<usize>,
    /// The gate column (UInt32, non-null): for each row, the index in `gates` of its data
    /// file's gate. A per-file constant; one narrow integer per row is the cheapest form
    /// DataFusion materializes it in.
    pub gate: usize,
    /// Gates of the data files.
    pub gates: Arc<[FileGate]>,
    /// The [`LIVE_COLUMN`](crate::physical_plan::positional_delete::LIVE_COLUMN) of a
    /// `PositionalDeleteExec` below that marks the position-deleted rows instead of dropping
    /// them (Boolean, non-null): rows marked `false` are dropped here too.
    pub live: Option<usize>,
}

/// What decides whether an equality delete applies to a data file's rows: the file's data
/// sequence number and its partition scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FileGate {
    /// The data file's data sequence number.
    pub data_seq: i64,
    /// Its partition scope (`NO_SCOPE` when no partition-scoped equality delete is in its
    /// partition).
    pub scope: i32,
}

pub(super) fn binary_keys(batch: &RecordBatch) -> Result<&BinaryArray> {
    batch.column(0).as_binary_opt::<i32>().ok_or_else(|| {
        DataFusionError::Internal("EqualityDeleteExec: spilled keys are not binary".into())
    })
}
