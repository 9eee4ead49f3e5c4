//! The join of a `MERGE`'s source with its target, in bounded memory.
//!
//! ```text
//!  ON a AND b AND …  ─► equalities target_expr = source_expr  ─► hash join keys
//!                    └► the rest                               ─► join filter
//!
//!  source ─► buffered under a budget (an eighth of a finite pool), min/max of each key taken
//!    fits:     HashJoinExec(CollectLeft: source in memory, target streamed in its partitions)
//!    too big:  spilled to one file; then a Grace hash join out of DataFusion's parts:
//!              HashJoinExec(Partitioned) over RepartitionExec(hash, N) of both sides (which
//!              spill what waits, holding an eighth of the pool at most together), its N
//!              partitions run one after another
//!              (SequentialPartitionsExec), so one N-th of the source is in memory at a time
//!    no keys:  NestedLoopJoinExec (it spills its build side itself)
//! ```
//! NULL keys never match (`NullEqualsNothing`).

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, JoinSide, JoinType, NullEquality, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::{SpillFile, TaskContext};
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Accumulator, BinaryExpr, Expr, Operator};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter};
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::SpillMetrics;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    execute_stream, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties, SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};

use super::clauses::{RowLayout, Side, Sides};
use super::key_filter::{KeyFilter, KeyFilterExec};
use crate::physical_plan::memory_share::{MemoryShare, MemoryShareExec};
use crate::physical_plan::spill::SpillWriter;

/// The `ON` condition taken apart.
#[derive(Debug, Clone, Default)]
pub(crate) struct SplitOn {
    /// `(source, target)` expressions an equality pairs.
    pub pairs: Vec<(Expr, Expr)>,
    /// Every other conjunct (the join filter).
    pub rest: Vec<Expr>,
    /// Those of `rest` that name only target columns.
    pub target_only: Vec<Expr>,
}

/// Splits `on` into hash keys and a filter.
pub(crate) fn split_on(on: &Expr, sides: &Sides<'_>) -> Result<SplitOn> {
    let mut out = SplitOn::default();
    let mut unused = Default::default();
    for conjunct in split_conjunction(on) {
        if let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) = conjunct
        {
            let l = sides.used(left, &mut unused)?;
            let r = sides.used(right, &mut unused)?;
            let one = |s: &std::collections::HashSet<Side>, side| s.len() == 1 && s.contains(&side);
            if one(&l, Side::Target) && one(&r, Side::Source) {
                out.pairs
                    .push((right.as_ref().clone(), left.as_ref().clone()));
                continue;
            }
            if one(&l, Side::Source) && one(&r, Side::Target) {
                out.pairs
                    .push((left.as_ref().clone(), right.as_ref().clone()));
                continue;
            }
        }
        let used = sides.used(conjunct, &mut unused)?;
        if used.len() == 1 && used.contains(&Side::Target) {
            out.target_only.push(conjunct.clone());
        }
        out.rest.push(conjunct.clone());
    }
    Ok(out)
}

/// The join, compiled: keys over each side's rows, the filter over the join rows.
#[derive(Debug, Clone)]
pub(crate) struct JoinSpec {
    pub source_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub target_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    pub join_type: JoinType,
    /// For each key that is a bare target column: (key index, table column name).
    pub bounded_columns: Vec<(usize, String)>,
    /// The `ON` condition as written (for EXPLAIN).
    pub text: String,
}

impl JoinSpec {
    pub(crate) fn try_new(
        split: &SplitOn,
        layout: &RowLayout,
        join_type: JoinType,
        state: &SessionState,
        text: String,
    ) -> Result<Self> {
        let (source_schema, target_schema) = side_schemas(layout)?;
        let mut source_keys = vec![];
        let mut target_keys = vec![];
        let mut bounded_columns = vec![];
        for (k, (s, t)) in split.pairs.iter().enumerate() {
            source_keys.push(state.create_physical_expr(s.clone(), &source_schema)?);
            target_keys.push(state.create_physical_expr(t.clone(), &target_schema)?);
            if let Expr::Column(c) = t {
                bounded_columns.push((k, c.name.clone()));
            }
        }
        let filter = match datafusion::logical_expr::utils::conjunction(split.rest.clone()) {
            Some(f) => Some(state.create_physical_expr(f, &layout.schema)?),
            None => None,
        };
        Ok(Self {
            source_keys,
            target_keys,
            filter,
            join_type,
            bounded_columns,
            text,
        })
    }
}

/// The DataFusion schemas of the source side (source columns and marker) and the target side
/// (table columns read, file, position) of the join rows.
fn side_schemas(layout: &RowLayout) -> Result<(DFSchema, DFSchema)> {
    let fields: Vec<_> = layout
        .schema
        .iter()
        .map(|(q, f)| (q.cloned(), Arc::clone(f)))
        .collect();
    let split = layout.target_start();
    let source = DFSchema::new_with_metadata(fields[..split].to_vec(), Default::default())?;
    let target = DFSchema::new_with_metadata(fields[split..].to_vec(), Default::default())?;
    Ok((source, target))
}

/// The smallest and largest value of one source key (`None`: no non-NULL value).
#[derive(Debug, Clone)]
pub(crate) struct KeyBounds {
    pub min: ScalarValue,
    pub max: ScalarValue,
}

/// The source, read once.
pub(crate) enum BufferedSource {
    /// All of it in memory (reserved).
    Memory(Vec<RecordBatch>, MemoryReservation),
    /// Spilled to a file, with its size in memory.
    Spilled(Arc<dyn SpillFile>, usize),
}

/// What reading the source found.
pub(crate) struct SourceRead {
    pub buffered: BufferedSource,
    pub schema: SchemaRef,
    pub rows: u64,
    /// Per key of `JoinSpec::bounded_columns`, in that order.
    pub bounds: Vec<Option<KeyBounds>>,
}

/// The memory the source may hold: an eighth of a finite pool (`None`: no limit).
fn source_budget(context: &TaskContext) -> Option<usize> {
    // The in-memory join's build side holds about three times the source's bytes (the
    // repartitioned batches and the hash table), and the writers and the position bitmaps
    // need their part of the pool beside it.
    match context.memory_pool().memory_limit() {
        MemoryLimit::Finite(n) => Some(n / 8),
        _ => None,
    }
}

/// Reads `source` (one stream of all its partitions), keeping it in memory while it fits in an
/// eighth of a finite pool, spilling it to one file when it does not.
pub(crate) async fn read_source(
    source: Arc<dyn ExecutionPlan>,
    spec: &JoinSpec,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<SourceRead> {
    let schema = source.schema();
    let budget = source_budget(context).unwrap_or(usize::MAX);
    let reservation = MemoryConsumer::new("MergeSource")
        .with_can_spill(true)
        .register(context.memory_pool());
    let mut mins = vec![];
    let mut maxs = vec![];
    for (k, _) in &spec.bounded_columns {
        let ty = spec.source_keys[*k].data_type(&schema)?;
        mins.push(MinAccumulator::try_new(&ty)?);
        maxs.push(MaxAccumulator::try_new(&ty)?);
    }
    let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(source));
    let mut stream = execute_stream(plan, Arc::clone(context))?;
    let mut batches = vec![];
    let mut spilled: Option<SpillWriter> = None;
    let mut rows = 0u64;
    let mut bytes = 0usize;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        for (i, (k, _)) in spec.bounded_columns.iter().enumerate() {
            let key = spec.source_keys[*k]
                .evaluate(&batch)?
                .into_array(batch.num_rows())?;
            mins[i].update_batch(&[Arc::clone(&key)])?;
            maxs[i].update_batch(&[key])?;
        }
        let size = batch.get_array_memory_size();
        bytes += size;
        if let Some(file) = spilled.as_mut() {
            file.append(&batch)?;
            continue;
        }
        if bytes <= budget && reservation.try_grow(size).is_ok() {
            batches.push(batch);
            continue;
        }
        let mut file = SpillWriter::create(
            &context.runtime_env(),
            &schema,
            spill.clone(),
            "MERGE source",
        )?;
        for b in batches.drain(..) {
            file.append(&b)?;
        }
        file.append(&batch)?;
        reservation.free();
        spilled = Some(file);
    }
    let mut bounds = vec![];
    for (min, max) in mins.iter_mut().zip(maxs.iter_mut()) {
        let (min, max) = (min.evaluate()?, max.evaluate()?);
        bounds.push((!min.is_null() && !max.is_null()).then_some(KeyBounds { min, max }));
    }
    let buffered = match spilled {
        Some(file) => BufferedSource::Spilled(file.finish()?, bytes),
        None => BufferedSource::Memory(batches, reservation),
    };
    Ok(SourceRead {
        buffered,
        schema,
        rows,
        bounds,
    })
}

/// A spill file read as a stream, as often as asked.
struct SpilledStream {
    file: Arc<dyn SpillFile>,
    schema: SchemaRef,
    spill: SpillManager,
}

impl fmt::Debug for SpilledStream {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("SpilledStream")
            .field("schema", &self.schema)
            .finish()
    }
}

impl PartitionStream for SpilledStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        match self
            .spill
            .read_spill_as_stream(Arc::clone(&self.file), None)
        {
            Ok(stream) => stream,
            Err(e) => Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                futures::stream::once(async move { Err(e) }),
            )),
        }
    }
}

/// A plan reading the batches of spill `file` (of `schema`), as often as executed.
pub(crate) fn spilled_exec(
    file: Arc<dyn SpillFile>,
    schema: SchemaRef,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<Arc<dyn ExecutionPlan>> {
    let stream = SpilledStream {
        file,
        schema: Arc::clone(&schema),
        spill: SpillManager::new(context.runtime_env(), spill, Arc::clone(&schema)),
    };
    Ok(Arc::new(StreamingTableExec::try_new(
        schema,
        vec![Arc::new(stream)],
        None,
        vec![],
        false,
        None,
    )?))
}

/// `plan`'s rows written to one spill file and read back from it: a pipeline break, so what
/// produced them (and the memory it holds) is gone before the next operator starts.
pub(crate) async fn spill_through(
    plan: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let mut file =
        SpillWriter::create(&context.runtime_env(), &schema, spill.clone(), "MERGE rows")?;
    let plan: Arc<dyn ExecutionPlan> = match plan.output_partitioning().partition_count() {
        1 => plan,
        _ => Arc::new(CoalescePartitionsExec::new(plan)),
    };
    let mut stream = execute_stream(plan, Arc::clone(context))?;
    while let Some(batch) = stream.next().await {
        file.append(&batch?)?;
    }
    drop(stream);
    spilled_exec(file.finish()?, schema, context, spill)
}

/// How the join ran (for EXPLAIN ANALYZE and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinMode {
    /// The source in memory.
    InMemory,
    /// Grace hash join over this many partitions.
    Grace(usize),
    /// Nested loops (no equality in `ON`).
    NestedLoop,
}

/// The join of the read source with `target`; its rows are laid out as [`RowLayout`] says.
///
/// With a filter of the source's keys, the target's rows go through it first; a source in
/// memory is then hash-partitioned with what remains of the target, so that each partition
/// builds its part of the hash table and emits its unmatched source rows in parallel.
pub(crate) fn join_plan(
    read: SourceRead,
    target: Arc<dyn ExecutionPlan>,
    key_filter: Option<Arc<KeyFilter>>,
    spec: &JoinSpec,
    layout: &RowLayout,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<(Arc<dyn ExecutionPlan>, JoinMode)> {
    let SourceRead {
        buffered, schema, ..
    } = read;
    let (source, spilled_bytes): (Arc<dyn ExecutionPlan>, Option<usize>) = match buffered {
        BufferedSource::Memory(batches, reservation) => {
            // The join reserves the build side itself.
            drop(reservation);
            let exec = MemorySourceConfig::try_new_exec(&[batches], Arc::clone(&schema), None)?;
            (exec, None)
        }
        BufferedSource::Spilled(file, bytes) => (
            spilled_exec(file, Arc::clone(&schema), context, spill)?,
            Some(bytes),
        ),
    };
    let filter = spec
        .filter
        .as_ref()
        .map(|f| join_filter(Arc::clone(f), &schema, &target.schema(), layout))
        .transpose()?;
    if spec.source_keys.is_empty() {
        let join = NestedLoopJoinExec::try_new(source, target, filter, &spec.join_type, None)?;
        return Ok((Arc::new(join), JoinMode::NestedLoop));
    }
    let filtered = key_filter.is_some();
    let target: Arc<dyn ExecutionPlan> = match key_filter {
        Some(f) => Arc::new(KeyFilterExec::new(target, spec.target_keys.clone(), f)),
        None => target,
    };
    let Some(bytes) = spilled_bytes else {
        let partitions = context.session_config().target_partitions();
        let (source, target, mode) = match filtered && partitions > 1 {
            true => {
                let (source, target) = repartitioned(source, target, spec, partitions)?;
                (source, target, PartitionMode::Partitioned)
            }
            false => (source, target, PartitionMode::CollectLeft),
        };
        let join = hash_join(source, target, filter, spec, spec.join_type, mode)?;
        return Ok((Arc::new(join), JoinMode::InMemory));
    };
    let budget = source_budget(context).unwrap_or(bytes).max(1);
    // A partition's build side holds its batches and a hash table: a third of the budget each.
    let partitions = (bytes * 3)
        .div_ceil(budget)
        .next_power_of_two()
        .clamp(2, 4096);
    let (source, target) = repartitioned(source, target, spec, partitions)?;
    let join = hash_join(
        source,
        target,
        filter,
        spec,
        spec.join_type,
        PartitionMode::Partitioned,
    )?;
    Ok((
        Arc::new(SequentialPartitionsExec::new(Arc::new(join))),
        JoinMode::Grace(partitions),
    ))
}

/// The `join_type` hash join of the source with the target on `spec`'s keys (a NULL key
/// matches nothing), with `filter` (`ON`'s other conjuncts), in `mode`.
pub(crate) fn hash_join(
    source: Arc<dyn ExecutionPlan>,
    target: Arc<dyn ExecutionPlan>,
    filter: Option<JoinFilter>,
    spec: &JoinSpec,
    join_type: JoinType,
    mode: PartitionMode,
) -> Result<HashJoinExec> {
    let on = spec
        .source_keys
        .iter()
        .cloned()
        .zip(spec.target_keys.iter().cloned())
        .collect();
    HashJoinExec::try_new(
        source,
        target,
        on,
        filter,
        &join_type,
        None,
        mode,
        NullEquality::NullEqualsNothing,
        false,
    )
}

/// Both sides hash-partitioned by their keys into `partitions`. What the two repartitions
/// buffer is held to an eighth of a bounded pool together (past it they spill): the join's
/// build sides cannot spill, and a fair pool would otherwise let channels waiting for their
/// partition take the memory those build sides ask for later.
fn repartitioned(
    source: Arc<dyn ExecutionPlan>,
    target: Arc<dyn ExecutionPlan>,
    spec: &JoinSpec,
    partitions: usize,
) -> Result<(Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>)> {
    let share = MemoryShare::new(REPARTITION_SHARE_DIVISOR);
    let side = |input, keys: &[Arc<dyn PhysicalExpr>]| -> Result<Arc<dyn ExecutionPlan>> {
        let repartition =
            RepartitionExec::try_new(input, Partitioning::Hash(keys.to_vec(), partitions))?;
        Ok(Arc::new(MemoryShareExec::new(
            Arc::new(repartition),
            Arc::clone(&share),
        )))
    };
    Ok((
        side(source, &spec.source_keys)?,
        side(target, &spec.target_keys)?,
    ))
}

/// The join's two repartitions buffer at most this fraction of a bounded pool together.
const REPARTITION_SHARE_DIVISOR: usize = 8;

/// Copy-on-write's rewrite join (see `rewrite.rs`): the source (in memory) with the rows pass
/// 1 updated (`probe`, as the rewrite's scan has them), by `ON`.
pub(crate) fn rewrite_join(
    source: Arc<dyn ExecutionPlan>,
    probe: Arc<dyn ExecutionPlan>,
    spec: &JoinSpec,
    layout: &RowLayout,
) -> Result<Arc<dyn ExecutionPlan>> {
    let filter = spec
        .filter
        .as_ref()
        .map(|f| join_filter(Arc::clone(f), &source.schema(), &probe.schema(), layout))
        .transpose()?;
    // Every probe row was matched in pass 1.
    let join = hash_join(
        source,
        probe,
        filter,
        spec,
        JoinType::Inner,
        PartitionMode::CollectLeft,
    )?;
    Ok(Arc::new(join))
}

/// The join filter over all columns of both sides (the join rows' layout).
pub(crate) fn join_filter(
    expression: Arc<dyn PhysicalExpr>,
    source: &SchemaRef,
    target: &SchemaRef,
    layout: &RowLayout,
) -> Result<JoinFilter> {
    let mut indices = vec![];
    let mut fields = vec![];
    for (i, f) in source.fields().iter().enumerate() {
        indices.push(ColumnIndex {
            index: i,
            side: JoinSide::Left,
        });
        fields.push(f.as_ref().clone().with_nullable(true));
    }
    for (i, f) in target.fields().iter().enumerate() {
        indices.push(ColumnIndex {
            index: i,
            side: JoinSide::Right,
        });
        fields.push(f.as_ref().clone().with_nullable(true));
    }
    if fields.len() != layout.schema.fields().len() {
        return Err(DataFusionError::Internal(format!(
            "MERGE join rows have {} columns, the layout {}",
            fields.len(),
            layout.schema.fields().len()
        )));
    }
    Ok(JoinFilter::new(
        expression,
        indices,
        Arc::new(Schema::new(fields)),
    ))
}

/// Runs its input's partitions one after another, as one partition.
#[derive(Debug)]
pub(crate) struct SequentialPartitionsExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl SequentialPartitionsExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self { input, properties }
    }
}

impl DisplayAs for SequentialPartitionsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SequentialPartitionsExec: partitions={}",
            self.input.properties().partitioning.partition_count()
        )
    }
}

impl ExecutionPlan for SequentialPartitionsExec {
    fn name(&self) -> &str {
        "SequentialPartitionsExec"
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

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(crate::physical_plan::single_child(
            "SequentialPartitionsExec",
            children,
        )?)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "SequentialPartitionsExec has one partition, asked for {partition}"
            )));
        }
        let input = Arc::clone(&self.input);
        let n = input.properties().partitioning.partition_count();
        let stream = futures::stream::iter(0..n)
            .map(move |i| input.execute(i, Arc::clone(&context)))
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.input.schema(),
            stream,
        )))
    }
}
