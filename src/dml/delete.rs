//! `DELETE FROM t [WHERE c]`: files whose every row matches go from the manifests unread; the
//! rest through the two-pass rewrite (copy-on-write) or position deletes (merge-on-read).

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::rewrite::{plan, DmlOp};
use super::DmlTarget;

/// Plans `DELETE FROM target WHERE filters` (AND-ed; none: every row).
pub(crate) async fn plan_delete(
    target: DmlTarget<'_>,
    state: &dyn Session,
    filters: Vec<Expr>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan(target, state, DmlOp::Delete, filters).await
}
