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

#[cfg(test)]
mod send_check {
    use super::*;
    fn assert_send<T: Send>(_: T) {}
    #[allow(dead_code)]
    fn futures_are_send(
        state: &datafusion::execution::context::SessionState,
        store: std::sync::Arc<dyn crate::MetadataStore>,
        ident: iceberg::TableIdent,
    ) {
        assert_send(RewriteDataFiles::new(store.clone(), ident.clone()).execute(state));
        assert_send(ExpireSnapshots::new(store.clone(), ident.clone()).execute(state));
        assert_send(RemoveOrphanFiles::new(store.clone(), ident.clone()).execute(state));
        assert_send(RewritePositionDeleteFiles::new(store.clone(), ident.clone()).execute(state));
        assert_send(RewriteManifests::new(store.clone(), ident.clone()).execute(state));
        assert_send(call(state, store, "c", "CALL x"));
    }
}
