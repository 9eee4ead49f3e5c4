//! The source's keys as a filter on the target, ahead of the join (a runtime filter, as Spark's
//! and delta-rs's merges use): a target row whose key no source row has cannot match, and
//! without `WHEN NOT MATCHED BY SOURCE` a row that cannot match is left as it is. Most target
//! rows of a typical `MERGE` are such rows; dropping them after a bit test spares the hash join
//! their probe and lets it repartition only what remains.
//!
//! ```text
//!   source keys ──hash──► blocked Bloom filter (one 64-bit word per key, two bits set in it)
//!   target rows ──hash of their keys──► word test ──► rows that may match (false positives
//!                                                     are the join's to reject)
//! ```
//! A row with a NULL key never matches and is dropped too. The filter is sized at 16 bits per
//! source key (about 1.5% false positives), reserved from the memory pool; it is not built
//! when the pool cannot give it 4 bits per key. A filter that passes most rows (the change set
//! touches most of the target) stops testing and passes batches through.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::cast;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{JoinType, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, SpillMetrics,
};
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    apply_expression_roots, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;

use super::on::JoinSpec;
use super::source::{BufferedSource, KeyBounds, SourceRead};
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::single_child;

/// Bits per source key the filter aims for.
const BITS_PER_KEY: usize = 16;
/// Fewer bits per key than this and the filter is not built (it would pass too much).
const MIN_BITS_PER_KEY: usize = 4;
/// Rows a filter tests before it judges whether it is worth testing.
const TRIAL_ROWS: usize = 64 * 1024;
/// The share of tested rows above which a filter stops testing.
const USELESS_PASS_RATE: f64 = 0.7;

/// The hash state of the filter (any fixed one: both sides hash with it).
fn hash_state() -> RandomState {
    RandomState::with_seed(0x4d45_5247_455f_4b45)
}

/// The source's keys as a set that may say yes wrongly, never no wrongly.
pub(crate) struct KeyFilter {
    words: Vec<u64>,
    kind: Kind,
    /// Target rows the filter dropped.
    skipped: AtomicUsize,
    _reservation: MemoryReservation,
}

/// How keys map to bits.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A blocked Bloom filter: the word is `hash & mask`.
    Bloom { mask: usize },
    /// One integer key within `[min, min + bits)`: bit `key - min`, exact.
    Dense { min: i64 },
}

impl fmt::Debug for KeyFilter {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("KeyFilter")
            .field("kind", &self.kind)
            .field("bits", &(self.words.len() * 64))
            .finish()
    }
}

/// The key as 64-bit integers when a dense filter can take it (one integer key).
fn dense_key(keys: &[ArrayRef]) -> Result<Option<ArrayRef>> {
    match keys {
        [k] if dense_type(k.data_type()) => Ok(Some(cast(k, &DataType::Int64)?)),
        _ => Ok(None),
    }
}

fn dense_type(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | Date32 | Date64
    )
}

/// The two bits a hash sets in its word.
fn bits(hash: u64) -> u64 {
    (1u64 << ((hash >> 52) & 63)) | (1u64 << ((hash >> 58) & 63))
}

/// Rows with a NULL in any of `keys`.
fn key_nulls(keys: &[ArrayRef]) -> Option<NullBuffer> {
    keys.iter().fold(None, |acc, k| {
        NullBuffer::union(acc.as_ref(), k.logical_nulls().as_ref())
    })
}

/// What the plan codec carries of the node.
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
impl KeyFilter {
    /// The filter's words, and for an exact integer filter its lowest key (a Bloom filter:
    /// `None`).
    pub(crate) fn parts(&self) -> (&[u64], Option<i64>) {
        match self.kind {
            Kind::Bloom { .. } => (&self.words, None),
            Kind::Dense { min } => (&self.words, Some(min)),
        }
    }

    /// The filter [`Self::parts`] describe, its memory reserved by `reservation`.
    pub(crate) fn from_parts(
        words: Vec<u64>,
        dense_min: Option<i64>,
        reservation: MemoryReservation,
    ) -> Result<Self> {
        let kind = match dense_min {
            Some(min) => Kind::Dense { min },
            None if words.len().is_power_of_two() => Kind::Bloom {
                mask: words.len() - 1,
            },
            None => {
                return Err(DataFusionError::Internal(
                    "a Bloom key filter has a power of two words".into(),
                ))
            }
        };
        reservation.try_grow(words.len() * 8)?;
        Ok(Self {
            words,
            kind,
            skipped: AtomicUsize::new(0),
            _reservation: reservation,
        })
    }
}

impl KeyFilter {
    /// Target rows dropped so far.
    pub(crate) fn skipped(&self) -> usize {
        self.skipped.load(Ordering::Relaxed)
    }

    /// A Bloom filter for `keys` source rows, or `None` when `reservation` cannot grow to a
    /// useful size (at most `budget` bytes).
    fn bloom(keys: u64, budget: usize, reservation: MemoryReservation) -> Option<Self> {
        let wanted = (keys as usize).max(1).saturating_mul(BITS_PER_KEY) / 64;
        let mut words = wanted.max(1).next_power_of_two();
        while words * 8 > budget || reservation.try_grow(words * 8).is_err() {
            words /= 2;
            if words == 0 || words * 64 < (keys as usize).saturating_mul(MIN_BITS_PER_KEY) {
                return None;
            }
        }
        Some(Self {
            words: vec![0; words],
            kind: Kind::Bloom { mask: words - 1 },
            skipped: AtomicUsize::new(0),
            _reservation: reservation,
        })
    }

    /// An exact filter of one integer key whose values lie in `[min, max]`, when that range
    /// takes at most 8 bytes per key and fits in `budget` and the pool.
    fn dense(
        keys: u64,
        (min, max): (i64, i64),
        budget: usize,
        reservation: &MemoryReservation,
    ) -> Option<Self> {
        let range = (max as i128 - min as i128 + 1) as u128;
        if range > (keys as u128).saturating_mul(64) {
            return None;
        }
        let words = (range as usize).div_ceil(64);
        if words * 8 > budget {
            return None;
        }
        let reservation = reservation.new_empty();
        reservation.try_grow(words * 8).ok()?;
        Some(Self {
            words: vec![0; words],
            kind: Kind::Dense { min },
            skipped: AtomicUsize::new(0),
            _reservation: reservation,
        })
    }

    /// Adds the keys of a batch of source rows (rows with a NULL key match nothing).
    pub(crate) fn insert(&mut self, keys: &[ArrayRef], hashes: &mut Vec<u64>) -> Result<()> {
        let Some(first) = keys.first() else {
            return Ok(());
        };
        let nulls = key_nulls(keys);
        let valid = |i: usize| nulls.as_ref().is_none_or(|n| n.is_valid(i));
        match self.kind {
            Kind::Dense { min } => {
                let key = dense_key(keys)?.ok_or_else(|| {
                    DataFusionError::Internal("a dense key filter needs one integer key".into())
                })?;
                for (i, &v) in key.as_primitive::<Int64Type>().values().iter().enumerate() {
                    if valid(i) {
                        let bit = v.wrapping_sub(min) as u64 as usize;
                        let word = self.words.get_mut(bit / 64).ok_or_else(|| {
                            DataFusionError::Internal(format!("key {v} outside its bounds"))
                        })?;
                        *word |= 1 << (bit % 64);
                    }
                }
            }
            Kind::Bloom { mask } => {
                hashes.clear();
                hashes.resize(first.len(), 0);
                create_hashes(keys, &hash_state(), hashes)?;
                for (i, &h) in hashes.iter().enumerate() {
                    if valid(i) {
                        self.words[h as usize & mask] |= bits(h);
                    }
                }
            }
        }
        Ok(())
    }

    /// Which rows of a batch of target rows may match a source row.
    fn may_match(&self, keys: &[ArrayRef], hashes: &mut Vec<u64>) -> Result<BooleanArray> {
        let rows = keys.first().map_or(0, |k| k.len());
        let found = match self.kind {
            Kind::Dense { min } => {
                let key = dense_key(keys)?.ok_or_else(|| {
                    DataFusionError::Internal("a dense key filter needs one integer key".into())
                })?;
                let values = key.as_primitive::<Int64Type>().values();
                let bits = self.words.len() as u64 * 64;
                BooleanBuffer::collect_bool(rows, |i| {
                    let bit = values[i].wrapping_sub(min) as u64;
                    bit < bits && self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0
                })
            }
            Kind::Bloom { mask } => {
                hashes.clear();
                hashes.resize(rows, 0);
                create_hashes(keys, &hash_state(), hashes)?;
                BooleanBuffer::collect_bool(rows, |i| {
                    let h = hashes[i];
                    let b = bits(h);
                    self.words[h as usize & mask] & b == b
                })
            }
        };
        let found = match key_nulls(keys) {
            Some(n) => &found & n.inner(),
            None => found,
        };
        Ok(BooleanArray::new(found, None))
    }
}

/// Whether source and target keys hash alike (same types, none nested).
pub(crate) fn keys_comparable(source: &[DataType], target: &[DataType]) -> bool {
    source.len() == target.len()
        && !source.is_empty()
        && source
            .iter()
            .zip(target)
            .all(|(s, t)| s == t && !t.is_nested())
}

/// Keeps the rows of its child (the target's rows) whose keys may match a source row.
#[derive(Debug)]
pub(crate) struct KeyFilterExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    filter: Arc<KeyFilter>,
    /// Set when the filter proved useless: batches pass untested.
    useless: Arc<AtomicBool>,
    metrics: ExecutionPlanMetricsSet,
}

#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
impl KeyFilterExec {
    /// The target's key expressions.
    pub(crate) fn keys(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.keys
    }

    /// The source's keys.
    pub(crate) fn filter(&self) -> &Arc<KeyFilter> {
        &self.filter
    }
}

impl KeyFilterExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        filter: Arc<KeyFilter>,
    ) -> Self {
        Self {
            input,
            keys,
            filter,
            useless: Arc::new(AtomicBool::new(false)),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for KeyFilterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        write!(
            f,
            "KeyFilterExec: source keys of [{}], bits={}",
            keys.join(", "),
            self.filter.words.len() * 64
        )
    }
}

impl ExecutionPlan for KeyFilterExec {
    fn name(&self) -> &str {
        "KeyFilterExec"
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        apply_expression_roots(self.keys.iter(), f)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(
            single_child("KeyFilterExec", children)?,
            self.keys.clone(),
            Arc::clone(&self.filter),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let input = baseline.input(self.input.execute(partition, context)?);
        let schema: SchemaRef = input.schema();
        let counter =
            |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, partition);
        let (tested, passed) = (counter("rows_tested"), counter("rows_passed"));
        let keys = self.keys.clone();
        let filter = Arc::clone(&self.filter);
        let useless = Arc::clone(&self.useless);
        let mut hashes = vec![];
        let (mut seen, mut kept) = (0usize, 0usize);
        let stream = input.map(move |batch| {
            let batch = batch?;
            if useless.load(Ordering::Relaxed) {
                return Ok(batch);
            }
            let columns = keys
                .iter()
                .map(|k| k.evaluate(&batch)?.into_array(batch.num_rows()))
                .collect::<Result<Vec<_>>>()?;
            let mask = filter.may_match(&columns, &mut hashes)?;
            let n = mask.true_count();
            tested.add(batch.num_rows());
            passed.add(n);
            filter
                .skipped
                .fetch_add(batch.num_rows() - n, Ordering::Relaxed);
            seen += batch.num_rows();
            kept += n;
            if seen >= TRIAL_ROWS && kept as f64 > seen as f64 * USELESS_PASS_RATE {
                useless.store(true, Ordering::Relaxed);
            }
            match n == batch.num_rows() {
                true => Ok(batch),
                false => Ok(filter_record_batch(&batch, &mask)?),
            }
        });
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(schema, stream))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// The filter of the source's keys for `spec`'s join, when one can help: the join drops target
/// rows without a match (no `WHEN NOT MATCHED BY SOURCE`), and both sides' keys hash alike.
/// Built from the source as read (in memory, or its spill file read once more).
pub(crate) async fn source_key_filter(
    read: &SourceRead,
    spec: &JoinSpec,
    target_schema: &SchemaRef,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<Option<Arc<KeyFilter>>> {
    if !matches!(spec.join_type, JoinType::Inner | JoinType::Left) || read.rows == 0 {
        return Ok(None);
    }
    let source_types = spec
        .source_keys
        .iter()
        .map(|k| k.data_type(&read.schema))
        .collect::<Result<Vec<_>>>()?;
    let target_types = spec
        .target_keys
        .iter()
        .map(|k| k.data_type(target_schema))
        .collect::<Result<Vec<_>>>()?;
    if !keys_comparable(&source_types, &target_types) {
        return Ok(None);
    }
    let budget = match context.memory_pool().memory_limit() {
        MemoryLimit::Finite(n) => n / 8,
        _ => usize::MAX,
    };
    let reservation = MemoryConsumer::new("MergeKeyFilter").register(context.memory_pool());
    let range = match (&spec.bounded_columns[..], &read.bounds[..]) {
        ([(0, _)], [Some(b)]) if spec.source_keys.len() == 1 && dense_type(&source_types[0]) => {
            int_bounds(b)?
        }
        _ => None,
    };
    let dense = range.and_then(|r| KeyFilter::dense(read.rows, r, budget, &reservation));
    let Some(mut filter) = dense.or_else(|| KeyFilter::bloom(read.rows, budget, reservation))
    else {
        return Ok(None);
    };
    let mut hashes = vec![];
    let mut add = |batch: &RecordBatch| -> Result<()> {
        let keys = spec
            .source_keys
            .iter()
            .map(|k| k.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<_>>>()?;
        filter.insert(&keys, &mut hashes)
    };
    match &read.buffered {
        BufferedSource::Memory(batches, _) => batches.iter().try_for_each(&mut add)?,
        BufferedSource::Spilled(file, _) => {
            let manager = SpillManager::new(context.runtime_env(), spill, Arc::clone(&read.schema));
            let mut stream = manager.read_spill_as_stream(Arc::clone(file), None)?;
            while let Some(batch) = stream.next().await {
                add(&batch?)?;
            }
        }
    }
    Ok(Some(Arc::new(filter)))
}

/// A key's bounds as 64-bit integers.
fn int_bounds(b: &KeyBounds) -> Result<Option<(i64, i64)>> {
    let int = |v: &ScalarValue| -> Result<Option<i64>> {
        match v.cast_to(&DataType::Int64)? {
            ScalarValue::Int64(v) => Ok(v),
            _ => Ok(None),
        }
    };
    Ok(int(&b.min)?.zip(int(&b.max)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryPool};

    fn filter_of(keys: &[ArrayRef], pool: &Arc<dyn MemoryPool>) -> KeyFilter {
        let reservation = MemoryConsumer::new("test").register(pool);
        let mut f = KeyFilter::bloom(keys[0].len() as u64, usize::MAX, reservation)
            .expect("room for the filter");
        f.insert(keys, &mut vec![]).unwrap();
        f
    }

    #[test]
    fn every_source_key_passes_and_nulls_do_not() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 20));
        let ids: ArrayRef = Arc::new(Int64Array::from_iter((0..10_000).map(|i| i * 3)));
        let names: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..10_000).map(|i| format!("n{i}")),
        ));
        let f = filter_of(&[Arc::clone(&ids), Arc::clone(&names)], &pool);
        assert!(pool.reserved() > 0);
        let hit = f.may_match(&[ids, names], &mut vec![]).unwrap();
        assert_eq!(hit.true_count(), 10_000);

        let probe: ArrayRef = Arc::new(Int64Array::from_iter((0..30_000).map(Some)));
        let names: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..30_000).map(|i| format!("n{}", i / 3)),
        ));
        let hit = f.may_match(&[probe, names], &mut vec![]).unwrap();
        // The 10,000 rows whose pair is a source key, and a few false positives.
        assert!(hit.true_count() >= 10_000 && hit.true_count() < 10_000 + 1_000);
        for i in (0..30_000).step_by(3) {
            assert!(hit.value(i), "row {i} is a source key");
        }

        let with_null: ArrayRef = Arc::new(Int64Array::from(vec![Some(0), None, Some(3)]));
        let names: ArrayRef = Arc::new(StringArray::from(vec!["n0", "n0", "n1"]));
        let hit = f.may_match(&[with_null, names], &mut vec![]).unwrap();
        assert_eq!(
            hit.iter().collect::<Vec<_>>(),
            vec![Some(true), Some(false), Some(true)]
        );
        drop(f);
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn false_positives_stay_near_the_design_rate() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 22));
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100_000));
        let f = filter_of(&[ids], &pool);
        let others: ArrayRef = Arc::new(Int64Array::from_iter_values(1_000_000..2_000_000));
        let hit = f.may_match(&[others], &mut vec![]).unwrap();
        // 16 bits per key, two bits in one word: about 1.5% expected.
        assert!(
            hit.true_count() < 40_000,
            "{} false positives",
            hit.true_count()
        );
    }

    #[test]
    fn a_pool_without_room_builds_no_filter() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1024));
        let reservation = MemoryConsumer::new("test").register(&pool);
        assert!(KeyFilter::bloom(1_000_000, usize::MAX, reservation).is_none());
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn a_dense_filter_is_exact_within_its_bounds() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 20));
        let reservation = MemoryConsumer::new("test").register(&pool);
        // Too wide a range for the keys: no dense filter.
        assert!(KeyFilter::dense(10, (0, 10 * 64), usize::MAX, &reservation).is_none());
        let mut f = KeyFilter::dense(1_000, (-500, 2_497), usize::MAX, &reservation).unwrap();
        assert!(pool.reserved() >= 3_000 / 8);
        let keys: ArrayRef = Arc::new(arrow::array::Int32Array::from_iter(
            (0..1_000).map(|i| (i % 7 != 0).then_some(-500 + i * 3)),
        ));
        f.insert(&[keys], &mut vec![]).unwrap();
        let probe: ArrayRef = Arc::new(arrow::array::Int32Array::from_iter(
            (-1_000..4_000).map(Some).chain([None]),
        ));
        let hit = f.may_match(&[probe], &mut vec![]).unwrap();
        let want = (-1_000..4_000)
            .map(|v: i32| {
                let i = (v + 500) / 3;
                v >= -500 && (v + 500) % 3 == 0 && i < 1_000 && i % 7 != 0
            })
            .chain([false]);
        assert_eq!(
            hit.iter().map(Option::unwrap).collect::<Vec<_>>(),
            want.collect::<Vec<_>>()
        );
        let outside: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![5_000]));
        assert!(f.insert(&[outside], &mut vec![]).is_err());
        drop(f);
        drop(reservation);
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn comparable_keys() {
        assert!(keys_comparable(&[DataType::Int64], &[DataType::Int64]));
        assert!(!keys_comparable(&[DataType::Int32], &[DataType::Int64]));
        assert!(!keys_comparable(&[], &[]));
    }
}
