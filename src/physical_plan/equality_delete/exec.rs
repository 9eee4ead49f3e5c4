//! [`EqualityDeleteExec`]: a hash anti-join of data rows against equality-deleted keys, gated
//! per row by sequence number and partition scope, spilling as a Grace hash join.
//!
//! ```text
//!   build (child 1): delete rows (key…, delete_seq, scope) ─► KeyTable (shared by all partitions)
//!   probe (child 0): data rows (…, key…, _gate) ─► keep unless KeyTable says deleted
//!                    (_gate: index of the row's file's (data_seq, scope) in a table of the plan)
//!
//!   build larger than its reservation:
//!     build rows ─► hash(key, level 0) ─► F spill files   probe rows ─► same hash ─► F spill files
//!     then per partition p: load build p (split again at level 1, 2, … if still too large),
//!     stream probe p through it
//! ```
//! Keys compare in Arrow's row format: NULL equals NULL, NULL never equals a value, and types
//! are the table's (both sides are read through the same schema).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, SpillMetrics,
};
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

use super::build::{signed_width, EqualityDeleteColumns, Joiner, Loaded};
use crate::physical_plan::baseline::Baseline;

/// The build side shared by the partitions of one execution, dropped (with its memory and
/// spill files) when the last partition is done with it.
#[derive(Debug, Default)]
struct SharedBuild {
    built: tokio::sync::Mutex<Option<Arc<Loaded>>>,
    users: AtomicUsize,
}

/// One partition's claim on the shared build.
struct BuildUser(Arc<SharedBuild>);

impl BuildUser {
    fn new(shared: &Arc<SharedBuild>) -> Self {
        shared.users.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(shared))
    }
}

impl Drop for BuildUser {
    fn drop(&mut self) {
        if self.0.users.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Ok(mut built) = self.0.built.try_lock() {
                *built = None;
            }
        }
    }
}

/// Removes rows whose key an applicable equality delete holds: a row dies iff a build row with
/// an equal key, in its scope or the global scope, has a delete sequence number greater than
/// the row's data sequence number.
///
/// Child 0 is the data (probe); child 1 yields the delete rows as `key…, delete_seq (Int64),
/// scope (Int32)`. The output is the probe's columns, or those of
/// [`EqualityDeleteExec::with_projection`]: the rows kept are copied once, without the columns
/// only the join needed.
#[derive(Debug)]
pub struct EqualityDeleteExec {
    input: Arc<dyn ExecutionPlan>,
    build: Arc<dyn ExecutionPlan>,
    columns: EqualityDeleteColumns,
    equality_ids: Vec<i32>,
    fanout: usize,
    projection: Option<Vec<usize>>,
    shared: Arc<SharedBuild>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl EqualityDeleteExec {
    /// Joins `input` against the deleted keys `build` yields, for the equality field ids
    /// `equality_ids`, splitting into `fanout` partitions when the keys do not fit in memory.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        build: Arc<dyn ExecutionPlan>,
        columns: EqualityDeleteColumns,
        equality_ids: Vec<i32>,
        fanout: usize,
    ) -> Result<Self> {
        let probe = input.schema();
        let build_schema = build.schema();
        if fanout < 2 {
            return Err(DataFusionError::Configuration(format!(
                "the equality-delete join needs a fanout of at least 2 (iceberg.equality_delete_fanout), got {fanout}"
            )));
        }
        let k = columns.keys.len();
        if k == 0 || build_schema.fields().len() != k + 2 {
            return Err(DataFusionError::Internal(format!(
                "EqualityDeleteExec: {k} key columns but a build side of {} columns",
                build_schema.fields().len()
            )));
        }
        if probe.fields().get(columns.gate).map(|f| f.data_type()) != Some(&DataType::UInt32) {
            return Err(DataFusionError::Internal(format!(
                "EqualityDeleteExec: probe column {} is not a UInt32 gate column",
                columns.gate
            )));
        }
        if let Some(live) = columns.live {
            if probe.fields().get(live).map(|f| f.data_type()) != Some(&DataType::Boolean) {
                return Err(DataFusionError::Internal(format!(
                    "EqualityDeleteExec: probe column {live} is not a Boolean live column"
                )));
            }
        }
        for (i, &c) in columns.keys.iter().enumerate() {
            let (p, b) = (probe.field(c), build_schema.field(i));
            if p.data_type() != b.data_type() {
                return Err(DataFusionError::Internal(format!(
                    "EqualityDeleteExec: key {} is {} in the data but {} in the deletes",
                    p.name(),
                    p.data_type(),
                    b.data_type()
                )));
            }
        }
        let properties = Self::properties_of(&input, None)?;
        Ok(Self {
            input,
            build,
            columns,
            equality_ids,
            fanout,
            projection: None,
            shared: Arc::default(),
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        })
    }

    /// Where the keys and gates are in the probe input.
    pub fn columns(&self) -> &EqualityDeleteColumns {
        &self.columns
    }

    /// The equality field ids the deletes hold.
    pub fn equality_ids(&self) -> &[i32] {
        &self.equality_ids
    }

    /// Partitions the join splits into when the keys do not fit in memory.
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// The probe columns output, when not all of them.
    pub fn projection(&self) -> Option<&[usize]> {
        self.projection.as_deref()
    }

    /// Outputs only the probe columns `projection` (in that order).
    pub fn with_projection(mut self, projection: Vec<usize>) -> Result<Self> {
        self.properties = Self::properties_of(&self.input, Some(&projection))?;
        self.projection = Some(projection);
        Ok(self)
    }

    fn properties_of(
        input: &Arc<dyn ExecutionPlan>,
        projection: Option<&Vec<usize>>,
    ) -> Result<Arc<PlanProperties>> {
        let partitioning = input.output_partitioning();
        let (schema, partitioning) = match projection {
            None => (input.schema(), partitioning.clone()),
            Some(p) => (
                Arc::new(input.schema().project(p)?),
                // Column indices change: keep only the partition count.
                Partitioning::UnknownPartitioning(partitioning.partition_count()),
            ),
        };
        Ok(Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            partitioning,
            EmissionType::Incremental,
            Boundedness::Bounded,
        )))
    }

    fn key_names(&self) -> Vec<String> {
        let schema = self.input.schema();
        self.columns
            .keys
            .iter()
            .map(|&i| schema.field(i).name().clone())
            .collect()
    }
}

impl DisplayAs for EqualityDeleteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "EqualityDeleteExec: equality_ids={:?}, keys=[{}], fanout={}",
            self.equality_ids,
            self.key_names().join(", "),
            self.fanout
        )?;
        if self.projection.is_some() {
            let names: Vec<String> = self
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            write!(f, ", projection=[{}]", names.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for EqualityDeleteExec {
    fn name(&self) -> &str {
        "EqualityDeleteExec"
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

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false, false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input, &self.build]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input, build] = <[_; 2]>::try_from(children).map_err(|_| {
            DataFusionError::Internal("EqualityDeleteExec takes exactly two children".into())
        })?;
        let exec = Self::try_new(
            input,
            build,
            self.columns.clone(),
            self.equality_ids.clone(),
            self.fanout,
        )?;
        Ok(Arc::new(match &self.projection {
            Some(p) => exec.with_projection(p.clone())?,
            None => exec,
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        // Read ahead on a task of its own: the probe side's time is not this node's.
        let input = read_ahead(self.input.execute(partition, Arc::clone(&context))?);
        let schema = self.schema();
        let build_schema = self.build.schema();
        let k = self.columns.keys.len();
        let key_types: Vec<DataType> = build_schema.fields()[..k]
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let key_fields: Vec<SortField> = key_types.iter().cloned().map(SortField::new).collect();
        // One 4- or 8-byte integer key: its deleted values can be held as a bit range.
        let range_width = match &key_types[..] {
            [t] => signed_width(t).filter(|w| matches!(w, 4 | 8)),
            _ => None,
        };
        let spill_metrics = SpillMetrics::new(&self.metrics, partition);
        let keys_schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Binary, false),
            Field::new("scope", DataType::Int32, false),
            Field::new("seq", DataType::Int64, false),
        ]));
        let joiner = Joiner {
            baseline: baseline.clone(),
            key_types,
            converter: RowConverter::new(key_fields)?,
            columns: self.columns.clone(),
            fanout: self.fanout,
            key_spill: SpillManager::new(context.runtime_env(), spill_metrics.clone(), keys_schema),
            probe_spill: SpillManager::new(
                context.runtime_env(),
                spill_metrics.clone(),
                self.input.schema(),
            ),
            projection: self.projection.clone(),
            range_width,
            env: context.runtime_env(),
            spill_metrics,
            pool: Arc::clone(context.memory_pool()),
            partition,
            deleted: MetricBuilder::new(&self.metrics).counter("equality_deleted_rows", partition),
            build_keys: MetricBuilder::new(&self.metrics).counter("build_keys", partition),
            key_range_rows: MetricBuilder::new(&self.metrics).counter("key_range_rows", partition),
            build_time: MetricBuilder::new(&self.metrics).subset_time("build_time", partition),
            probe_time: MetricBuilder::new(&self.metrics).subset_time("probe_time", partition),
            grace_partitions: MetricBuilder::new(&self.metrics)
                .counter("grace_partitions", partition),
        };
        let build = Arc::clone(&self.build);
        let user = BuildUser::new(&self.shared);
        let mut builder = RecordBatchReceiverStream::builder(schema, 2);
        let tx = builder.tx();
        let work = baseline.clone();
        builder.spawn(work.timed(async move {
            let built = {
                let mut slot = user.0.built.lock().await;
                match slot.as_ref() {
                    Some(b) => Arc::clone(b),
                    None => {
                        let b = Arc::new(joiner.build(build, context).await?);
                        *slot = Some(Arc::clone(&b));
                        b
                    }
                }
            };
            let result = joiner.probe(&built, input, &tx).await;
            drop(built);
            drop(user);
            result
        }));
        Ok(baseline.output(builder.build()))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &datafusion::physical_plan::StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(Arc::new(Statistics::new_unknown(&self.schema())))
    }
}

/// `input` driven from now on, a batch or two ahead of its reader: what it does before its
/// first batch (a positional delete below loads its delete files) overlaps the build of the
/// keys instead of following it.
fn read_ahead(input: SendableRecordBatchStream) -> SendableRecordBatchStream {
    let mut ahead = RecordBatchReceiverStream::builder(input.schema(), 1);
    let tx = ahead.tx();
    ahead.spawn(async move {
        let mut input = input;
        while let Some(batch) = input.next().await {
            if tx.send(batch).await.is_err() {
                break;
            }
        }
        Ok(())
    });
    ahead.build()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::array::{ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, UInt32Array};
    use arrow::compute::cast;
    use arrow::datatypes::{Int64Type, UInt32Type};
    use datafusion::execution::memory_pool::MemoryPool;

    use super::super::build::FileGate;
    use super::super::probe::ProbeKeys;
    use super::super::table::table_hash;

    use arrow::array::{Array, BooleanArray, StringArray};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::execution::memory_pool::FairSpillPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::physical_plan::collect;

    use super::*;
    use crate::physical_plan::equality_delete::{GLOBAL_SCOPE, NO_SCOPE};

    /// The gates of the tests' probe rows: data sequence numbers 0 to 15 in scopes -2 to 13.
    fn test_gates() -> Arc<[FileGate]> {
        (0..256)
            .map(|g| FileGate {
                data_seq: g / 16,
                scope: (g % 16) as i32 - 2,
            })
            .collect()
    }

    /// The index of (seq, scope) in [`test_gates`].
    fn gate_of(seq: i64, scope: i32) -> u32 {
        assert!((0..16).contains(&seq) && (-2..14).contains(&scope));
        (seq * 16 + i64::from(scope + 2)) as u32
    }

    /// The (seq, scope) of a gate column's row.
    fn gate_at(column: &ArrayRef, i: usize) -> (i64, i32) {
        let g = test_gates()[column.as_primitive::<UInt32Type>().value(i) as usize];
        (g.data_seq, g.scope)
    }

    fn probe_batch(rows: &[(Option<i64>, Option<&str>, i64, i32)]) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0))) as ArrayRef,
            ),
            (
                "name",
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))) as ArrayRef,
            ),
            (
                "gate",
                Arc::new(UInt32Array::from_iter_values(
                    rows.iter().map(|r| gate_of(r.2, r.3)),
                )) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    fn build_batch(rows: &[(Option<i64>, Option<&str>, i64, i32)]) -> RecordBatch {
        let b = probe_batch(rows);
        RecordBatch::try_from_iter([
            ("id", Arc::clone(b.column(0))),
            ("name", Arc::clone(b.column(1))),
            (
                "delete_seq",
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))) as ArrayRef,
            ),
            (
                "delete_scope",
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.3))) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    /// Runs the join over `partitions` probe partitions in a runtime with a pool of `limit`.
    async fn run(
        probe: Vec<Vec<RecordBatch>>,
        build: Vec<RecordBatch>,
        limit: usize,
    ) -> (Vec<RecordBatch>, MetricsSet, Arc<dyn MemoryPool>) {
        run_join(probe, build, vec![0, 1], None, limit).await
    }

    /// Runs the join of probe columns `keys` (the gate column is column 2; the probe's `live`
    /// column, when it has one, marks position-deleted rows), outputting `projection`.
    async fn run_join(
        probe: Vec<Vec<RecordBatch>>,
        build: Vec<RecordBatch>,
        keys: Vec<usize>,
        projection: Option<Vec<usize>>,
        limit: usize,
    ) -> (Vec<RecordBatch>, MetricsSet, Arc<dyn MemoryPool>) {
        let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(limit));
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool))
            .build_arc()
            .unwrap();
        let ctx = Arc::new(TaskContext::default().with_runtime(runtime));
        let probe_schema = probe[0][0].schema();
        let build_schema = build[0].schema();
        let live = probe_schema.index_of("live").ok();
        let input = MemorySourceConfig::try_new_exec(&probe, probe_schema, None).unwrap();
        let build = MemorySourceConfig::try_new_exec(&[build], build_schema, None).unwrap();
        let ids = (1..=keys.len() as i32).collect();
        let columns = EqualityDeleteColumns {
            keys,
            gate: 2,
            gates: test_gates(),
            live,
        };
        let mut exec = EqualityDeleteExec::try_new(input, build, columns, ids, 4).unwrap();
        if let Some(p) = projection {
            exec = exec.with_projection(p).unwrap();
        }
        let exec = Arc::new(exec);
        let out = collect(Arc::clone(&exec) as _, ctx).await.unwrap();
        (out, exec.metrics().unwrap(), pool)
    }

    fn ids(batches: &[RecordBatch]) -> Vec<i64> {
        let mut out: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let id = b.column(0).as_primitive::<Int64Type>().clone();
                let gate = Arc::clone(b.column(2));
                (0..b.num_rows()).map(move |i| {
                    let (seq, scope) = gate_at(&gate, i);
                    id.value(i) * 1000 + seq * 10 + scope as i64
                })
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn direct_keys_match_the_row_format() {
        use arrow::array::{Date32Array, Decimal128Array, Int32Array, TimestampMicrosecondArray};
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![
                Some(0),
                Some(-1),
                None,
                Some(i32::MIN),
                Some(i32::MAX),
                Some(7),
            ])),
            Arc::new(Int64Array::from(vec![
                Some(0),
                Some(-1),
                None,
                Some(i64::MIN),
                Some(i64::MAX),
                Some(1 << 40),
            ])),
            Arc::new(Date32Array::from(vec![Some(19000), None, Some(-3)])),
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(-5), Some(1_700_000_000_000_000), None])
                    .with_timezone("UTC"),
            ),
            Arc::new(
                Decimal128Array::from(vec![Some(-12345), None, Some(i128::MAX), Some(0)])
                    .with_precision_and_scale(38, 2)
                    .unwrap(),
            ),
            Arc::new(Int64Array::from_iter_values((0..2000u64).map(|i| {
                (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 64)) as i64 - (1 << 40)
            }))),
            Arc::new(Int32Array::from_iter_values((0..2000u32).map(|i| {
                (i.wrapping_mul(0x9e37_79b9) >> (i % 32)) as i32 - (1 << 20)
            }))),
            // A slice: the offset is honoured.
            Arc::new(Int64Array::from(vec![Some(9), None, Some(-9), Some(3)]).slice(1, 3)),
        ];
        for column in columns {
            let converter =
                RowConverter::new(vec![SortField::new(column.data_type().clone())]).unwrap();
            let rows = converter.convert_columns(&[Arc::clone(&column)]).unwrap();
            let width = signed_width(column.data_type()).unwrap();
            let keys = ProbeKeys::Signed {
                data: column.to_data(),
                width,
            };
            let mut buf = [0u8; 17];
            let direct: Vec<Vec<u8>> = (0..column.len())
                .map(|i| keys.key(i, &mut buf).to_vec())
                .collect();
            let expected: Vec<Vec<u8>> = rows.iter().map(|r| r.as_ref().to_vec()).collect();
            assert_eq!(direct, expected, "{}", column.data_type());
            let hashes: Vec<u64> = expected.iter().map(|k| table_hash(k)).collect();
            assert_eq!(keys.hashes(), hashes, "{}", column.data_type());
            assert_eq!(ProbeKeys::Rows(rows).hashes(), hashes);
        }
        assert_eq!(signed_width(&DataType::Utf8View), None);
        assert_eq!(signed_width(&DataType::Float64), None);
    }

    /// A probe batch of one data file: `id` (of `key_type`), `value`, and the file's gate.
    fn file_batch(ids: &[Option<i64>], key_type: &DataType, seq: i64, scope: i32) -> RecordBatch {
        let n = ids.len();
        let id = cast(
            &(Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef),
            key_type,
        )
        .unwrap();
        let gate = UInt32Array::from(vec![gate_of(seq, scope); n]);
        RecordBatch::try_from_iter([
            ("id", id),
            (
                "value",
                Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i * 7))) as ArrayRef,
            ),
            ("gate", Arc::new(gate) as ArrayRef),
        ])
        .unwrap()
    }

    #[tokio::test]
    async fn integer_keys_through_a_range_or_the_filter_match_an_oracle() {
        // (key, delete seq, scope): NULL deleted in scope 1 only; a dense run and some
        // negative keys; `far` adds a key that makes the range too wide (the filter route);
        // `uniform` puts every key in the global scope (files older than every delete are
        // then settled by the range alone).
        // `null` deletes the NULL key. `marked`: a live column marks some rows deleted by
        // position (what a `PositionalDeleteExec` below does with dense deletes).
        for (key_type, far, uniform, null, marked) in
            [DataType::Int64, DataType::Int32, DataType::Date32]
                .into_iter()
                .flat_map(|t| {
                    [
                        (false, false, true, false),
                        (true, false, true, false),
                        (false, true, true, false),
                        (false, true, false, false),
                        (false, true, true, true),
                        (true, false, true, true),
                        (false, false, false, true),
                    ]
                    .map(|(f, u, n, m)| (t.clone(), f, u, n, m))
                })
        {
            let scoped = |s: i32| if uniform { GLOBAL_SCOPE } else { s };
            let mut deleted: Vec<(Option<i64>, i64, i32)> = vec![];
            if null {
                deleted.push((None, 4, scoped(1)));
            }
            deleted.extend((0..3000i64).map(|k| {
                let scope = if k % 5 == 0 { scoped(2) } else { GLOBAL_SCOPE };
                (Some(k * 3 - 600), 2 + k % 4, scope)
            }));
            if far {
                let v = if key_type == DataType::Int64 {
                    1 << 40
                } else {
                    1 << 30
                };
                deleted.push((Some(v), 9, GLOBAL_SCOPE));
                deleted.push((Some(-v), 9, GLOBAL_SCOPE));
            }
            let build = RecordBatch::try_from_iter([
                (
                    "id",
                    cast(
                        &(Arc::new(Int64Array::from_iter(deleted.iter().map(|d| d.0))) as ArrayRef),
                        &key_type,
                    )
                    .unwrap(),
                ),
                (
                    "delete_seq",
                    Arc::new(Int64Array::from_iter_values(deleted.iter().map(|d| d.1))) as ArrayRef,
                ),
                (
                    "delete_scope",
                    Arc::new(Int32Array::from_iter_values(deleted.iter().map(|d| d.2))) as ArrayRef,
                ),
            ])
            .unwrap();
            // Files of every (data seq, scope), ids running through and past the keys.
            let mut probe = vec![];
            let mut expected = vec![];
            // Live rows the deletes remove.
            let mut equality_deleted = 0;
            let mut rows: Vec<(i64, Option<i64>, bool, bool)> = vec![];
            for (f, (seq, scope)) in [(1, 1), (3, 2), (3, NO_SCOPE), (5, 1), (9, 2), (1, 3)]
                .into_iter()
                .enumerate()
            {
                let ids: Vec<Option<i64>> = (-1000..9500i64)
                    .map(|i| (i % 97 != 0).then_some(i + f as i64))
                    .collect();
                let mut batch = file_batch(&ids, &key_type, seq, scope);
                // The last file has every row live (a file without position deletes).
                let live: Vec<bool> = (0..ids.len())
                    .map(|i| !marked || f == 5 || (i * 7 + f) % 10 != 3)
                    .collect();
                if marked {
                    let mut columns = batch.columns().to_vec();
                    columns.push(Arc::new(BooleanArray::from(live.clone())));
                    let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
                    fields.push(Arc::new(Field::new("live", DataType::Boolean, false)));
                    batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
                }
                let values = batch.column(1).as_primitive::<Int64Type>().clone();
                for (i, id) in ids.iter().enumerate() {
                    let dies = deleted.iter().any(|&(k, dseq, dscope)| {
                        k == *id && dseq > seq && (dscope == GLOBAL_SCOPE || dscope == scope)
                    });
                    if f < 2 {
                        rows.push((values.value(i), *id, dies, live[i]));
                    }
                    if live[i] && !dies {
                        expected.push((values.value(i), *id));
                    }
                    equality_deleted += usize::from(live[i] && dies);
                }
                probe.push(batch);
            }
            // Rows of two files in one batch (a gate per row), sliced (offsets).
            let mixed = arrow::compute::concat_batches(&probe[0].schema(), &probe[..2]).unwrap();
            let mixed = mixed.slice(5, mixed.num_rows() - 7);
            for (value, id, dies, live) in &rows[5..rows.len() - 2] {
                if *live && !dies {
                    expected.push((*value, *id));
                }
                equality_deleted += usize::from(*live && *dies);
            }
            probe.push(mixed);
            // All in memory, and again under a pool too small for the keys (Grace partitions).
            for limit in [1 << 30, 48 * 1024] {
                let (out, metrics, pool) = run_join(
                    vec![probe.clone()],
                    vec![build.clone()],
                    vec![0],
                    Some(vec![1, 0]),
                    limit,
                )
                .await;
                let case = format!(
                    "{key_type} far={far} uniform={uniform} null={null} marked={marked} {limit}"
                );
                let mut kept = vec![];
                for b in &out {
                    assert_eq!(b.schema().field(0).name(), "value");
                    assert_eq!(b.num_columns(), 2);
                    let id = cast(b.column(1), &DataType::Int64).unwrap();
                    let id = id.as_primitive::<Int64Type>();
                    let value = b.column(0).as_primitive::<Int64Type>();
                    for i in 0..b.num_rows() {
                        kept.push((value.value(i), (!id.is_null(i)).then(|| id.value(i))));
                    }
                }
                kept.sort();
                expected.sort();
                assert_eq!(kept.len(), expected.len(), "{case}");
                assert_eq!(kept, expected, "{case}");
                // Rows the positional deletes marked are not counted as equality-deleted.
                let counted = metrics.sum_by_name("equality_deleted_rows").unwrap();
                assert_eq!(counted.as_usize(), equality_deleted, "{case}");
                if limit > 1 << 20 {
                    let range_rows = metrics.sum_by_name("key_range_rows").unwrap().as_usize();
                    assert_eq!(range_rows > 0, !far, "{case}");
                    assert_eq!(metrics.spill_count(), Some(0), "{case}");
                } else {
                    assert!(metrics.spill_count().unwrap() > 0, "{case}");
                }
                assert_eq!(pool.reserved(), 0);
            }
        }
    }

    #[tokio::test]
    async fn nulls_sequence_numbers_and_scopes() {
        let probe = vec![vec![probe_batch(&[
            (Some(1), Some("a"), 1, 0),
            (Some(1), None, 1, 0),
            (None, None, 1, 0),
            (None, Some("a"), 1, 0),
            (Some(2), Some("b"), 5, 0),
            (Some(2), Some("b"), 1, 1),
            (Some(3), Some("c"), 1, NO_SCOPE),
        ])]];
        let build = vec![build_batch(&[
            // NULL equals NULL: deletes (1, NULL) and (NULL, NULL) only.
            (Some(1), None, 3, GLOBAL_SCOPE),
            (None, None, 3, GLOBAL_SCOPE),
            // Scoped to partition 0 and newer than data seq 1, older than 5.
            (Some(2), Some("b"), 3, 0),
            // Global, but not newer than the row (seq 1 vs data seq 1).
            (Some(3), Some("c"), 1, GLOBAL_SCOPE),
        ])];
        let (out, metrics, pool) = run(probe, build, 1 << 30).await;
        let mut kept: Vec<String> = vec![];
        for b in &out {
            let id = b.column(0).as_primitive::<Int64Type>();
            let name = b.column(1).as_string::<i32>();
            for i in 0..b.num_rows() {
                kept.push(format!(
                    "{:?}/{:?}/{}",
                    (!id.is_null(i)).then(|| id.value(i)),
                    (!name.is_null(i)).then(|| name.value(i)),
                    gate_at(b.column(2), i).1
                ));
            }
        }
        kept.sort();
        assert_eq!(
            kept,
            [
                "None/Some(\"a\")/0",
                "Some(1)/Some(\"a\")/0",
                "Some(2)/Some(\"b\")/0",
                "Some(2)/Some(\"b\")/1",
                "Some(3)/Some(\"c\")/-2",
            ]
        );
        assert_eq!(
            metrics
                .sum_by_name("equality_deleted_rows")
                .unwrap()
                .as_usize(),
            2
        );
        assert_eq!(metrics.spill_count(), Some(0));
        assert_eq!(pool.reserved(), 0);
    }

    #[tokio::test]
    async fn grace_partitions_recursively_under_a_tiny_pool() {
        // 60K deleted keys, every third id, in scope 0 or globally; probe rows of two
        // partitions.
        let deleted: Vec<(Option<i64>, Option<&str>, i64, i32)> = (0..60_000i64)
            .map(|i| {
                let scope = if i % 2 == 0 { 0 } else { GLOBAL_SCOPE };
                (Some(i * 3), Some("x"), 5, scope)
            })
            .collect();
        let build: Vec<RecordBatch> = deleted.chunks(4096).map(build_batch).collect();
        let mut probe = vec![vec![], vec![]];
        let mut expected = vec![];
        for i in 0..30_000i64 {
            let (id, seq, scope) = (i * 2, 1 + i % 7, (i % 3) as i32 - 1);
            let row = (Some(id), Some("x"), seq, scope);
            let deleted = id % 3 == 0 && {
                let key_scope = if (id / 3) % 2 == 0 { 0 } else { GLOBAL_SCOPE };
                5 > seq && (key_scope == GLOBAL_SCOPE || key_scope == scope)
            };
            if !deleted {
                expected.push(id * 1000 + seq * 10 + scope as i64);
            }
            probe[(i % 2) as usize].push(probe_batch(&[row]));
        }
        let probe: Vec<Vec<RecordBatch>> = probe
            .into_iter()
            .map(|p| vec![arrow::compute::concat_batches(&p[0].schema(), &p).unwrap()])
            .collect();
        expected.sort();
        // 256 KiB: the 60K keys (several MB) split 4 ways, then again, and again.
        let (out, metrics, pool) = run(probe, build, 256 * 1024).await;
        assert_eq!(ids(&out), expected);
        let grace: HashMap<String, usize> = metrics
            .iter()
            .filter(|m| m.value().name() == "grace_partitions")
            .map(|m| (format!("{:?}", m.partition()), m.value().as_usize()))
            .collect();
        // More joined partitions than one round's fanout: the split recursed.
        assert!(grace.values().sum::<usize>() > 2 * 4, "{grace:?}");
        assert!(metrics.spill_count().unwrap() > 0);
        assert_eq!(pool.reserved(), 0);
    }
}
