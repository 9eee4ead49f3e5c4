//! Committing written files: [`CommitExec`] gathers the writers' files and commits one snapshot.

mod exec;

pub use exec::CommitExec;
pub(crate) use exec::{count_batch, count_schema};
