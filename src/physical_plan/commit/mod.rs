//! Committing written files: [`CommitExec`] gathers the writers' files and commits one snapshot.

mod exec;

pub(crate) use exec::count_schema;
pub use exec::CommitExec;
