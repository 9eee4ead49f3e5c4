//! `UPDATE t SET c = v, .. [WHERE c]`: every file with a matching row is rewritten with the new
//! values (copy-on-write), or its matching rows are deleted by position and their new versions
//! appended (merge-on-read).

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::rewrite::{plan, DmlOp};
use super::DmlTarget;

/// Plans `UPDATE target SET assignments WHERE filters` (AND-ed; none: every row); values are of
/// their column's type (DataFusion casts them).
pub(crate) async fn plan_update(
    target: DmlTarget<'_>,
    state: &dyn Session,
    assignments: Vec<(String, Expr)>,
    filters: Vec<Expr>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan(target, state, DmlOp::Update(assignments), filters).await
}
