//! `UPDATE t SET c = v, .. [WHERE c]`: every file with a matching row is rewritten with the new
//! values (copy-on-write), or its matching rows are deleted by position and their new versions
//! appended (merge-on-read).

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::rewrite::{plan, DmlJob, DmlOp};
use super::splice::{moves_rows, splice_files};
use super::DmlTarget;
use crate::commit::NewFile;
use crate::file_planning::PlannedFile;
use crate::physical_plan::statement::StatementMetrics;
use crate::physical_plan::write::{Computed, NewValues, Splicer, WrittenFiles};

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

/// Copy-on-write `UPDATE` by column splice (see [`super::splice`]): when the assigned columns
/// neither partition nor sort the table and no delete applies to the touched files, each file is
/// written again with the assigned columns changed where the condition holds and every other
/// column chunk copied. Returns the new files and the rows changed, or `None` when the splice
/// does not apply or a file cannot be spliced (then nothing it wrote is left). The files it
/// wrote are recorded in `written`.
pub(super) async fn splice_update(
    job: &DmlJob,
    touched: &[PlannedFile],
    context: &Arc<TaskContext>,
    written: &WrittenFiles,
    m: &StatementMetrics,
) -> Result<Option<(Vec<NewFile>, u64)>> {
    let DmlOp::Update(assignments) = &job.op else {
        return Ok(None);
    };
    let metadata = job.table.metadata();
    // A condition on metadata columns is decided on the scan that gives them.
    if assignments.is_empty() || !job.may_splice(touched) {
        return Ok(None);
    }
    let schema = &job.schema;
    let mut assigned: Vec<(usize, &Expr)> = assignments
        .iter()
        .map(|(name, value)| Ok((schema.index_of(name)?, value)))
        .collect::<Result<_>>()?;
    assigned.sort_by_key(|(c, _)| *c);
    let columns: Vec<usize> = assigned.iter().map(|(c, _)| *c).collect();
    if moves_rows(metadata, &columns) {
        return Ok(None);
    }
    // The columns the condition and the values read.
    let condition = job.condition();
    let (inputs, nullable, df_schema) =
        job.computed_inputs(condition.iter().chain(assigned.iter().map(|(_, v)| *v)))?;
    let physical = |e: Expr| job.state.create_physical_expr(e, &df_schema);
    let computed = Arc::new(Computed {
        schema: Arc::clone(&nullable),
        condition: physical(condition.unwrap_or_else(|| datafusion::logical_expr::lit(true)))?,
        values: assigned
            .iter()
            .map(|(c, v)| Ok((*c, physical((*v).clone())?)))
            .collect::<Result<_>>()?,
    });
    let splicer = Arc::new(Splicer::new(
        &job.table,
        &job.locations,
        columns,
        &inputs,
        context,
    )?);
    let attempt = WrittenFiles::default();
    let values = move |_: &str| Ok(NewValues::Computed(Arc::clone(&computed)));
    match splice_files(splicer, values, touched, &attempt).await {
        Ok(Some((files, changed))) => {
            for location in attempt.take() {
                written.record(location);
            }
            m.add("files_spliced", files.len());
            Ok(Some((files, changed)))
        }
        Ok(None) => {
            attempt.remove_all(job.table.file_io()).await;
            m.add("splice_fallbacks", 1);
            Ok(None)
        }
        Err(e) => {
            attempt.remove_all(job.table.file_io()).await;
            Err(e)
        }
    }
}
