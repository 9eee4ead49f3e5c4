//! `DELETE FROM t [WHERE c]`: files whose every row matches go from the manifests unread; the
//! rest through the two-pass rewrite (copy-on-write) or position deletes (merge-on-read).

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::rewrite::{plan, DmlJob, DmlOp};
use super::splice::{drop_rows, DroppedRows};
use super::DmlTarget;
use crate::file_planning::PlannedFile;
use crate::physical_plan::write::{Computed, NewValues, Splicer, WrittenFiles};

/// Plans `DELETE FROM target WHERE filters` (AND-ed; none: every row).
pub(crate) async fn plan_delete(
    target: DmlTarget<'_>,
    state: &dyn Session,
    filters: Vec<Expr>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan(target, state, DmlOp::Delete, filters).await
}

/// Copy-on-write `DELETE` by splice: each touched file is written again without the rows the
/// condition selects, its row groups that keep every row copied as they are (only the groups
/// that lose rows are decoded and encoded again). `None` when the splice does not apply (a
/// distributed statement, row lineage, a condition on metadata columns, deletes on the files);
/// the files it could not splice come back in [`DroppedRows::refused`] for the ordinary rewrite.
/// The files it wrote are recorded in `written`.
pub(super) async fn splice_delete(
    job: &DmlJob,
    touched: &[PlannedFile],
    context: &Arc<TaskContext>,
    written: &WrittenFiles,
) -> Result<Option<DroppedRows>> {
    let DmlOp::Delete = &job.op else {
        return Ok(None);
    };
    if !job.may_splice(touched) {
        return Ok(None);
    }
    let Some(condition) = job.condition() else {
        // Every row goes: the files went whole at planning.
        return Ok(None);
    };
    let (inputs, nullable, df_schema) = job.computed_inputs(std::iter::once(&condition))?;
    if inputs.is_empty() {
        // A condition of no column (a volatile one, say) is left to the ordinary rewrite.
        return Ok(None);
    }
    let computed = Arc::new(Computed {
        schema: Arc::clone(&nullable),
        condition: job.state.create_physical_expr(condition, &df_schema)?,
        values: vec![],
    });
    let splicer = Arc::new(Splicer::new(
        &job.table,
        &job.locations,
        vec![],
        &inputs,
        context,
    )?);
    let drops = move |_: &str| Ok(NewValues::DroppedWhere(Arc::clone(&computed)));
    Ok(Some(drop_rows(splicer, drops, touched, written).await?))
}
