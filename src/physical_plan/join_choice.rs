//! Joins that finish in bounded memory: under a memory limit, a hash join whose build side may
//! not fit is planned as a sort-merge join, which spills (its sorts and its buffered rows).
//!
//! ```text
//!  DataFusion's JoinSelection ──► HashJoinExec (build side: left)
//!        │  iceberg.join_memory_budget > 0 and the build side's estimated size × 2 (the hash
//!        │  table beside the rows) above half of it, or unknown
//!        ▼
//!  SortMergeJoinExec (same keys, filter, join type, NULL semantics) [+ the hash join's
//!  projection]; EnforceDistribution and EnforceSorting then give it hash-partitioned, sorted
//!  inputs, so `EXPLAIN` shows the sorts and the merge join
//! ```
//! A hash join's build side is held whole in memory and cannot spill: under a small pool it
//! fails. Null-aware anti joins (`NOT IN` over a nullable subquery) stay hash joins, which alone
//! implement their semantics.

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
use datafusion::physical_plan::joins::{HashJoinExec, SortMergeJoinExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, PlanProperties, SendableRecordBatchStream,
};
use datafusion::physical_plan::{ExecutionPlan, Statistics, StatisticsArgs, StatisticsContext};
use futures::StreamExt;

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
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if join.null_aware || fits(join.left().as_ref(), budget)? {
                return Ok(Transformed::no(node));
            }
            let input = |plan: &Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
                match CompactViewsExec::needed(plan.as_ref()) {
                    true => Arc::new(CompactViewsExec::new(Arc::clone(plan))),
                    false => Arc::clone(plan),
                }
            };
            let merge: Arc<dyn ExecutionPlan> = Arc::new(SortMergeJoinExec::try_new(
                input(join.left()),
                input(join.right()),
                join.on().to_vec(),
                join.filter().cloned(),
                *join.join_type(),
                vec![SortOptions::default(); join.on().len()],
                join.null_equality(),
            )?);
            let Some(projection) = join.projection.as_ref() else {
                return Ok(Transformed::yes(merge));
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
            Ok(Transformed::yes(
                Arc::new(ProjectionExec::try_new(exprs, merge)?) as _,
            ))
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

/// Whether `build`, held as a hash table (about twice its rows' size), surely takes at most
/// half of `budget`: unknown sizes do not.
fn fits(build: &dyn ExecutionPlan, budget: usize) -> Result<bool> {
    let stats = StatisticsContext::new().compute(build, &StatisticsArgs::new())?;
    Ok(estimated_bytes(&stats, build).is_some_and(|bytes| bytes.saturating_mul(2) <= budget / 2))
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

/// Passes batches on with their string and binary views copied into buffers of their own
/// when they share larger buffers: a join's output rows point into the whole build side's
/// buffers, and a sort reserves every buffer a batch holds, so one batch would count as the
/// build side's size (tens of MiB) and starve the pool. Placed under a sort-merge join's
/// inputs by [`SpillingJoins`].
#[derive(Debug)]
pub(crate) struct CompactViewsExec {
    input: Arc<dyn ExecutionPlan>,
}

impl CompactViewsExec {
    /// Compacts the batches of `input`.
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
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
        let stream = self.input.execute(partition, context)?;
        let schema = stream.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.map(|batch| batch.map(compact)),
        )))
    }
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
}
