//! Table maintenance: the procedures Iceberg users know from Spark, in bounded memory, through
//! the crate's own commit path.
//!
//! ```text
//!  rewrite_data_files.rs   RewriteDataFiles: compaction that applies deletes (bin-pack, sort),
//!                          committed as a `replace` snapshot
//!  options.rs              its options, by Spark's names and with Spark's defaults
//!  expire_snapshots.rs     ExpireSnapshots: forget old snapshots, delete what only they reached
//!  orphan_files.rs         RemoveOrphanFiles: delete old files under the table's location that
//!                          nothing of the table reaches
//!  rewrite_manifests.rs    RewriteManifests: data manifests clustered by partition
//!  files.rs                what snapshots reach, and the bounded-memory anti-join both use
//!  position_deletes.rs     RewritePositionDeleteFiles: one delete file per data file, dangling
//!                          delete files dropped
//!  snapshot_procedures.rs  rollback_to_snapshot / _timestamp, set_current_snapshot,
//!                          fast_forward, cherrypick_snapshot, publish_changes: main (or a
//!                          branch) moved between snapshots, staged snapshots published
//!  progress.rs             MaintenanceProgress: a session extension long runs report to
//!  call.rs                 CALL [catalog.]system.<procedure>(..): the same from SQL
//! ```

mod add_files;
mod args;
mod call;
mod expire_snapshots;
mod files;
mod options;
mod orphan_files;
mod position_deletes;
mod progress;
mod rewrite_data_files;
mod rewrite_manifests;
mod snapshot_procedures;
mod zorder;

pub use add_files::{register_table, snapshot, AddFiles, AddFilesResult, Registered, GC_ENABLED};
pub use call::{call, is_call, CallOutput};
pub use expire_snapshots::{ExpireSnapshots, ExpireSnapshotsResult};
pub use options::RewriteOptions;
pub use orphan_files::{RemoveOrphanFiles, RemoveOrphanFilesResult, RemoveOrphanFilesStream};
pub use position_deletes::{RewritePositionDeleteFiles, RewritePositionDeleteFilesResult};
pub use progress::{MaintenanceProgress, ProgressEvent};
pub use rewrite_data_files::{
    PlannedRewrite, RewriteDataFiles, RewriteDataFilesResult, RewriteStrategy,
};
pub use rewrite_manifests::{RewriteManifests, RewriteManifestsResult};
pub use snapshot_procedures::{
    cherrypick_snapshot, fast_forward, publish_changes, rollback_to_snapshot,
    rollback_to_timestamp, set_current_snapshot, FastForward, HeadChange, Picked, SnapshotOrRef,
    SOURCE_SNAPSHOT_ID,
};
pub use zorder::ZOrderOptions;

/// One result row of nullable longs, named as `columns` name them.
pub(crate) fn longs_row(
    columns: &[(&str, Option<i64>)],
) -> datafusion::error::Result<arrow::array::RecordBatch> {
    use std::sync::Arc;
    let schema = Arc::new(arrow::datatypes::Schema::new(
        columns
            .iter()
            .map(|(n, _)| arrow::datatypes::Field::new(*n, arrow::datatypes::DataType::Int64, true))
            .collect::<Vec<_>>(),
    ));
    let arrays = columns
        .iter()
        .map(|(_, v)| Arc::new(arrow::array::Int64Array::from(vec![*v])) as arrow::array::ArrayRef)
        .collect();
    Ok(arrow::array::RecordBatch::try_new(schema, arrays)?)
}

/// Refuses to `what` (a procedure that deletes files) on a table with `gc.enabled=false`, whose
/// files may belong to another table (a `snapshot`'s do), as Java refuses.
pub(crate) fn refuse_without_gc(
    table: &iceberg::table::Table,
    what: &str,
) -> datafusion::error::Result<()> {
    let disabled = table
        .metadata()
        .properties()
        .get(GC_ENABLED)
        .is_some_and(|v| v.eq_ignore_ascii_case("false"));
    match disabled {
        true => Err(datafusion::error::DataFusionError::Plan(format!(
            "cannot {what} of table '{}': {GC_ENABLED} is false (deleting its files may corrupt \
             other tables); nothing was changed",
            table.identifier()
        ))),
        false => Ok(()),
    }
}

#[cfg(test)]
mod send_check {
    use super::*;
    fn assert_send<T: Send>(_: T) {}
    #[allow(dead_code)]
    fn futures_are_send(
        state: &datafusion::execution::context::SessionState,
        store: std::sync::Arc<dyn crate::MetadataStore>,
        catalog: std::sync::Arc<dyn crate::catalog::IcebergCatalog>,
        ident: iceberg::TableIdent,
    ) {
        assert_send(RewriteDataFiles::new(store.clone(), ident.clone()).execute(state));
        assert_send(ExpireSnapshots::new(store.clone(), ident.clone()).execute(state));
        assert_send(RemoveOrphanFiles::new(store.clone(), ident.clone()).execute(state));
        assert_send(RewritePositionDeleteFiles::new(store.clone(), ident.clone()).execute(state));
        assert_send(RewriteManifests::new(store.clone(), ident.clone()).execute(state));
        assert_send(AddFiles::new(store.clone(), ident.clone(), "/x").execute());
        assert_send(call(state, &catalog, "CALL x"));
    }
}
