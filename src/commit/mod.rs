//! The commit layer: everything that changes a table's metadata. The proposed change and the
//! store that swaps it ([`MetadataStore`], implemented by the catalogs), metadata files, the
//! snapshot producer (manifests, manifest lists, summaries, sequence numbers, refs), the commit
//! loop with its retries and commit-state-unknown, the files a statement wrote (removed when its
//! commit fails for sure) and the delete files a removal takes along.
//!
//! It imports file planning (`scan`: reading manifests), storage and locations; nothing above:
//! catalogs, operators, statements, maintenance and the distributed nodes import it.

mod changes;
mod cluster;
pub(crate) mod metadata_file;
mod producer;
mod proposal;
pub(crate) mod refs;
mod removed;
mod retry;
mod store;
mod write_to;
mod written;

pub use changes::{
    is_concurrent_change, ConcurrentChange, MayMatch, NewFile, RemovedDeletes, SnapshotChanges,
    Validation, MAIN_BRANCH,
};
pub use producer::SnapshotProducer;
pub(crate) use producer::{manifest_entries_target, manifest_writer, new_snapshot_id};
pub(crate) use proposal::{commit_proposal, Proposal};
pub(crate) use removed::removed_with_deletes;
pub use retry::{
    commit, is_commit_state_unknown, CommitOutcome, CommitStateUnknown, STATEMENT_ID_PROPERTY,
};
pub(crate) use retry::{commit_or_clean_up, RetryPolicy};
pub use store::{CommitResult, MetadataChange, MetadataStore};
pub(crate) use write_to::wap_enabled;
pub use write_to::{WriteTo, PUBLISHED_WAP_ID, STAGED_WAP_ID, WAP_ENABLED};
pub use written::WrittenFiles;
