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

use arrow::compute::SortOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::joins::{HashJoinExec, SortMergeJoinExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, Statistics, StatisticsArgs, StatisticsContext};

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
