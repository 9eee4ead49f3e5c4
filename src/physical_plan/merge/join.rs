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

use arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{JoinSide, JoinType, NullEquality};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter};
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::SpillMetrics;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};

use super::clauses::RowLayout;
use super::key_filter::{KeyFilter, KeyFilterExec};
use super::on::JoinSpec;
use super::source::{source_budget, spilled_exec, BufferedSource, SourceRead};
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::memory_share::{MemoryShare, MemoryShareExec};

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
    /// Baseline metrics (output rows, elapsed compute).
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl SequentialPartitionsExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            input,
            properties,
            metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
        }
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
        let baseline = Baseline::new(&self.metrics, partition);
        let input = Arc::clone(&self.input);
        let n = input.properties().partitioning.partition_count();
        let inputs = baseline.clone();
        let stream = futures::stream::iter(0..n)
            .map(move |i| {
                Ok::<_, DataFusionError>(inputs.input(input.execute(i, Arc::clone(&context))?))
            })
            .try_flatten();
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            self.input.schema(),
            stream,
        ))))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
