//! Our own snapshot producer and commit path: manifests, manifest lists, snapshot summaries,
//! sequence numbers and refs, committed by compare-and-swap with retries.

mod cluster;
mod commit;
pub(crate) mod metadata_file;
mod producer;

pub use commit::{
    commit, is_commit_state_unknown, CommitOutcome, CommitStateUnknown, STATEMENT_ID_PROPERTY,
};
pub use producer::{
    is_concurrent_change, ConcurrentChange, MayMatch, NewFile, RemovedDeletes, SnapshotChanges,
    SnapshotProducer, Validation, MAIN_BRANCH,
};
