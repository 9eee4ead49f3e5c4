//! Joins that finish in bounded memory: under a memory limit, hash joins whose build sides may
//! not fit together are planned as sort-merge joins, which spill (their sorts and their buffered
//! rows).
//!
//! ```text
//!  DataFusion's JoinSelection ──► HashJoinExec (build side: left) ...
//!        │  iceberg.join_memory_budget > 0: the build sides held at once (each its estimated
//!        │  size × 2, the hash table beside the rows) must stay within half of it; the largest
//!        │  of those held at the peak are changed until they do; unknown sizes always are
//!        ▼
//!  SortMergeJoinExec (same keys, filter, join type, NULL semantics) [+ the hash join's
//!  projection]; EnsureRequirements then gives it hash-partitioned, sorted inputs, so `EXPLAIN`
//!  shows the sorts and the merge join
//!        │
//!        ▼  after EnsureRequirements (CompactSortInputs; any other full sort too)
//!  SortExec ◄── CompactViewsExec ◄── the sort's input, where its rows hold string views
//! ```
//! A hash join's build side is held whole in memory and cannot spill: under a small pool it
//! fails. Several hash joins of one plan hold their build sides at the same time: a join's
//! build side stays while the joins on its probe side run (a chain of joins holds them all),
//! and is gone once its own probe ends. Null-aware anti joins (`NOT IN` over a nullable
//! subquery) stay hash joins, which alone implement their semantics.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::compute::SortOptions;
use arrow::datatypes::DataType;
use datafusion::common::internal_err;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::joins::{HashJoinExec, SortMergeJoinExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, PlanProperties, SendableRecordBatchStream,
};
use datafusion::physical_plan::{ExecutionPlan, Statistics, StatisticsArgs, StatisticsContext};
use futures::StreamExt;

use crate::physical_plan::baseline::Baseline;
use crate::IcebergOptions;

/// The rule (see the module docs); placed right after DataFusion's join selection.
#[derive(Debug, Default)]
pub(crate) struct SpillingJoins;

/// Bytes per value assumed for a variable-width column without a size estimate.
const VARIABLE_WIDTH: usize = 32;

impl PhysicalOptimizerRule for SpillingJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let budget = IcebergOptions::from_config(config).join_memory_budget as usize;
        if budget == 0 {
            return Ok(plan);
        }
        let merged = merged_joins(&plan, budget / 2)?;
        // The hash joins in the order `transform_up` visits them (children first), as
        // `merged_joins` numbered them.
        let mut visited = 0usize;
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            visited += 1;
            if !merged.get(visited - 1).copied().unwrap_or(false) {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(sort_merge(join)?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "iceberg_spilling_joins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `join` as a sort-merge join with the same output.
fn sort_merge(join: &HashJoinExec) -> Result<Arc<dyn ExecutionPlan>> {
    let merge: Arc<dyn ExecutionPlan> = Arc::new(SortMergeJoinExec::try_new(
        Arc::clone(join.left()),
        Arc::clone(join.right()),
        join.on().to_vec(),
        join.filter().cloned(),
        *join.join_type(),
        vec![SortOptions::default(); join.on().len()],
        join.null_equality(),
    )?);
    let Some(projection) = join.projection.as_ref() else {
        return Ok(merge);
    };
    let schema = merge.schema();
    let exprs: Vec<(Arc<dyn datafusion::physical_plan::PhysicalExpr>, String)> = projection
        .iter()
        .map(|&i| {
            let name = schema.field(i).name().clone();
            (
                Arc::new(datafusion::physical_expr::expressions::Column::new(
                    &name, i,
                )) as _,
                name,
            )
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, merge)?))
}

/// A hash join of the plan, numbered in the order `transform_up` visits it.
struct HashJoin {
    /// What its build side holds as a hash table (its rows' estimated size × 2); `None`
    /// when unknown.
    holds: Option<usize>,
    /// Whether it may become a sort-merge join (not null-aware).
    changeable: bool,
}

/// Which of `plan`'s hash joins (in `transform_up`'s order) become sort-merge joins so that
/// the build sides held at once stay within `limit` bytes: those of unknown size, then the
/// largest of the ones held at the peak, one by one.
fn merged_joins(plan: &Arc<dyn ExecutionPlan>, limit: usize) -> Result<Vec<bool>> {
    let mut joins = vec![];
    let shape = shape(plan.as_ref(), &mut joins)?;
    let mut merged: Vec<bool> = joins
        .iter()
        .map(|j| j.changeable && j.holds.is_none())
        .collect();
    loop {
        let (peak, held) = peak(&shape, &joins, &merged);
        if peak <= limit {
            return Ok(merged);
        }
        let largest = held
            .into_iter()
            .filter(|&i| joins[i].changeable && !merged[i])
            .max_by_key(|&i| joins[i].holds.unwrap_or(0));
        match largest {
            Some(i) => merged[i] = true,
            // Only null-aware joins are left: nothing more can change.
            None => return Ok(merged),
        }
    }
}

/// A plan as the budget sees it: where its hash joins are (by number) and what runs beside
/// what.
struct Shape {
    join: Option<usize>,
    children: Vec<Shape>,
}

/// The shape of `plan`, its hash joins pushed to `joins` in post-order (children first, left
/// to right: `transform_up`'s order).
fn shape(plan: &dyn ExecutionPlan, joins: &mut Vec<HashJoin>) -> Result<Shape> {
    let children = plan
        .children()
        .into_iter()
        .map(|child| shape(child.as_ref(), joins))
        .collect::<Result<Vec<_>>>()?;
    let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
        return Ok(Shape {
            join: None,
            children,
        });
    };
    let stats = StatisticsContext::new().compute(join.left().as_ref(), &StatisticsArgs::new())?;
    joins.push(HashJoin {
        holds: estimated_bytes(&stats, join.left().as_ref()).map(|b| b.saturating_mul(2)),
        changeable: !join.null_aware,
    });
    Ok(Shape {
        join: Some(joins.len() - 1),
        children,
    })
}

/// The most bytes the hash joins of `shape` hold at once while it runs, and the joins (by
/// number) that hold them then. A hash join holds its build side while the build side's own
/// input finishes and while its probe side runs; the other operators, and a hash join merged
/// into a sort-merge join, run their children at the same time (a union, a sort-merge join).
fn peak(shape: &Shape, joins: &[HashJoin], merged: &[bool]) -> (usize, Vec<usize>) {
    let children = shape.children.iter().map(|c| peak(c, joins, merged));
    match shape.join {
        Some(me) if !merged[me] => {
            let (busiest, mut held) = children.max_by_key(|(bytes, _)| *bytes).unwrap_or_default();
            held.push(me);
            (busiest.saturating_add(joins[me].holds.unwrap_or(0)), held)
        }
        _ => children.fold((0, vec![]), |(bytes, mut held), (b, h)| {
            held.extend(h);
            (bytes.saturating_add(b), held)
        }),
    }
}

/// Puts [`CompactViewsExec`] right under every sort (of a sort-merge join's input, or any
/// other, TopK apart) whose input holds string or binary views; placed after DataFusion's
/// EnsureRequirements, which adds the sorts and may push them down through other nodes.
#[derive(Debug, Default)]
pub(crate) struct CompactSortInputs;

impl PhysicalOptimizerRule for CompactSortInputs {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if IcebergOptions::from_config(config).join_memory_budget == 0 {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let Some(sort) = node.downcast_ref::<SortExec>() else {
                return Ok(Transformed::no(node));
            };
            let input = sort.input();
            if sort.fetch().is_some()
                || !CompactViewsExec::needed(input.as_ref())
                || input.downcast_ref::<CompactViewsExec>().is_some()
            {
                return Ok(Transformed::no(node));
            }
            let input: Arc<dyn ExecutionPlan> = Arc::new(CompactViewsExec::new(Arc::clone(input)));
            Ok(Transformed::yes(replace_children_if_necessary(
                node,
                vec![input],
            )?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "iceberg_compact_sort_inputs"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The in-memory size of the rows `stats` describe: their byte size when known; else, per
/// column, fixed-width values by their width and variable-width ones by the larger of their
/// size estimate and [`VARIABLE_WIDTH`] a value (an Iceberg scan's string sizes are what the
/// files store, compressed, far below what the rows take in memory).
fn estimated_bytes(stats: &Statistics, plan: &dyn ExecutionPlan) -> Option<usize> {
    if let Some(&bytes) = stats.total_byte_size.get_value() {
        return Some(bytes);
    }
    let rows = stats.num_rows.get_value().copied();
    let schema = plan.schema();
    let mut total = 0usize;
    for (field, column) in schema.fields().iter().zip(&stats.column_statistics) {
        let known = column.byte_size.get_value().copied();
        let bytes = match (field.data_type().primitive_width(), rows) {
            (Some(width), Some(rows)) => width.saturating_mul(rows),
            (None, Some(rows)) => known.unwrap_or(0).max(rows.saturating_mul(VARIABLE_WIDTH)),
            (_, None) => known?,
        };
        total = total.saturating_add(bytes);
    }
    Some(total)
}

/// Passes batches on, in slices of at most the session's batch size, with their string and
/// binary views copied into buffers of their own when they share larger buffers: a join's output rows point into the whole build side's
/// buffers, and a sort reserves every buffer a batch holds, so one batch would count as the
/// build side's size (tens of MiB) and starve the pool. Placed right under sorts by
/// [`CompactSortInputs`].
#[derive(Debug)]
pub(crate) struct CompactViewsExec {
    input: Arc<dyn ExecutionPlan>,
    /// Baseline metrics (output rows, elapsed compute).
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl CompactViewsExec {
    /// Compacts the batches of `input`.
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            input,
            metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
        }
    }

    /// Whether a plan's rows hold views worth compacting.
    fn needed(plan: &dyn ExecutionPlan) -> bool {
        plan.schema()
            .fields()
            .iter()
            .any(|f| matches!(f.data_type(), DataType::Utf8View | DataType::BinaryView))
    }
}

impl DisplayAs for CompactViewsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "CompactViewsExec")
    }
}

impl ExecutionPlan for CompactViewsExec {
    fn name(&self) -> &str {
        "CompactViewsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
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
        match <[_; 1]>::try_from(children) {
            Ok([input]) => Ok(Arc::new(Self::new(input))),
            Err(_) => internal_err!("CompactViewsExec has one child"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let rows = context.session_config().batch_size().max(1);
        let stream = baseline.input(self.input.execute(partition, context)?);
        let schema = stream.schema();
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.flat_map(move |batch| {
                futures::stream::iter(match batch {
                    Ok(batch) => pieces(batch, rows).map(|b| Ok(compact(b))).collect(),
                    Err(e) => vec![Err(e)],
                })
            }),
        ))))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// `batch` in slices of at most `rows` rows. A join can give one batch of all its rows (a
/// semi join's matched build rows): a sort holds such a batch's sorted chunks, each of which
/// would count the whole batch's string buffers, where compacted slices hold their own.
fn pieces(batch: RecordBatch, rows: usize) -> impl Iterator<Item = RecordBatch> {
    let total = batch.num_rows();
    let whole = total <= rows;
    (0..total.div_ceil(rows).max(1)).map(move |i| match whole {
        true => batch.clone(),
        false => batch.slice(i * rows, rows.min(total - i * rows)),
    })
}

/// `batch` with each view column that holds more than twice the bytes it shows copied into
/// buffers of its own.
fn compact(batch: RecordBatch) -> RecordBatch {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| {
            if let Some(views) = c.as_string_view_opt() {
                if sparse(views.data_buffers(), views.views(), views.len()) {
                    return Arc::new(views.gc()) as ArrayRef;
                }
            } else if let Some(views) = c.as_binary_view_opt() {
                if sparse(views.data_buffers(), views.views(), views.len()) {
                    return Arc::new(views.gc()) as ArrayRef;
                }
            }
            Arc::clone(c)
        })
        .collect();
    RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .unwrap_or(batch)
}

/// Whether views of `rows` values keep more than twice the out-of-line bytes they show.
fn sparse(buffers: &[arrow::buffer::Buffer], views: &[u128], rows: usize) -> bool {
    let held: usize = buffers.iter().map(|b| b.capacity()).sum();
    if held == 0 || rows == 0 {
        return false;
    }
    // Values longer than 12 bytes live in the buffers (their length is the view's low 32 bits).
    let shown: usize = views
        .iter()
        .map(|v| (*v as u32) as usize)
        .filter(|&len| len > 12)
        .sum();
    // (A builder's first block, 8 to 32 KiB, is not worth copying.)
    held > 2 * shown + 32 * 1024
}

#[cfg(test)]
mod tests {
    use arrow::array::StringViewArray;
    use arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn views_sharing_a_larger_buffer_are_copied_out_and_read_alike() {
        let values: Vec<String> = (0..10_000)
            .map(|i| format!("a long string value {i}"))
            .collect();
        let all = StringViewArray::from_iter_values(values.iter());
        // Ten rows that still hold the buffers of ten thousand (as a join's output rows do).
        let few = all.slice(500, 10);
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(few.clone())]).unwrap();
        let held = |b: &RecordBatch| -> usize {
            b.column(0)
                .as_string_view()
                .data_buffers()
                .iter()
                .map(|d| d.capacity())
                .sum()
        };
        let before = held(&batch);
        let compacted = compact(batch);
        assert!(
            held(&compacted) * 20 < before,
            "{} of {before}",
            held(&compacted)
        );
        assert_eq!(compacted.column(0).as_string_view(), &few);

        // Views that use their buffers are passed on as they are.
        let own = RecordBatch::try_new(
            compacted.schema(),
            vec![Arc::new(StringViewArray::from_iter_values(
                values.iter().take(10),
            ))],
        )
        .unwrap();
        let before = held(&own);
        assert_eq!(held(&compact(own)), before);
    }

    #[test]
    fn a_batch_larger_than_the_batch_size_is_sliced_and_each_slice_compacted() {
        let values: Vec<String> = (0..10_000)
            .map(|i| format!("a long string value {i}"))
            .collect();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let all = Arc::new(StringViewArray::from_iter_values(values.iter()));
        let batch = RecordBatch::try_new(schema, vec![all.clone() as ArrayRef]).unwrap();
        let whole: usize = all.data_buffers().iter().map(|d| d.capacity()).sum();
        let slices: Vec<RecordBatch> = pieces(batch.clone(), 4096).map(compact).collect();
        assert_eq!(
            slices.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
            [4096, 4096, 1808]
        );
        let mut read = vec![];
        for slice in &slices {
            let views = slice.column(0).as_string_view();
            // Each slice holds the bytes of its own rows, not the whole batch's.
            let held: usize = views.data_buffers().iter().map(|d| d.capacity()).sum();
            assert!(held * 2 < whole, "{held} of {whole}");
            read.extend(views.iter().map(|v| v.unwrap().to_string()));
        }
        assert_eq!(read, values);
        // A batch within the size passes whole.
        assert_eq!(pieces(batch, 10_000).count(), 1);
    }
}
