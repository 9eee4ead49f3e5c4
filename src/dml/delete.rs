//! `DELETE FROM t [WHERE c]`: files whose every row matches go from the manifests unread; the
//! rest through the two-pass rewrite (copy-on-write) or position deletes (merge-on-read).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::utils::expr_to_columns;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::rewrite::{plan, DmlJob, DmlOp};
use super::splice::{drop_rows, files_allow_splice, DroppedRows};
use super::DmlTarget;
use crate::physical_plan::scan::lineage;
use crate::physical_plan::write::{Computed, NewValues, Splicer, WrittenFiles};
use crate::scan::{PlannedFile, ScanFiles};

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
    let metadata = job.table.metadata();
    let files = ScanFiles {
        files: touched.to_vec(),
        equality_deletes: job.checked.equality_deletes.clone(),
        streamed: job.checked.streamed,
        columns: job.checked.columns.clone(),
    };
    if job.distributed
        || !crate::IcebergOptions::from_config(job.state.config_options()).copy_on_write_splice
        || lineage::has_row_lineage(metadata)
        || job.metadata_needed().any()
        || !files_allow_splice(&files, metadata)
    {
        return Ok(None);
    }
    let Some(condition) = job.condition() else {
        // Every row goes: the files went whole at planning.
        return Ok(None);
    };
    let schema = &job.schema;
    let mut used = HashSet::new();
    expr_to_columns(&condition, &mut used)?;
    let inputs: Vec<usize> = used
        .iter()
        .map(|c| schema.index_of(&c.name))
        .collect::<std::result::Result<_, _>>()?;
    if inputs.is_empty() {
        // A condition of no column (a volatile one, say) is left to the ordinary rewrite.
        return Ok(None);
    }
    // Columns not read are NULL in the rows the condition sees, so all are nullable.
    let nullable: SchemaRef = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let df_schema = DFSchema::try_from(nullable.as_ref().clone())?;
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
