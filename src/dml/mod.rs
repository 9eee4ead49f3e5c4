//! `DELETE`, `UPDATE` and `MERGE`: one file per command over a shared core, and the query
//! planner that guards the first two.
//!
//! ```text
//!  guard.rs    IcebergQueryPlanner: refuses DML inputs DataFusion would hand to the table wrong
//!  delete.rs   DELETE ┐
//!  update.rs   UPDATE ┴─ rewrite/: the two-pass statement, planned (mod.rs) and run
//!                        (exec.rs: DeleteExec / UpdateExec); update.rs also splices
//!                        mor_pass.rs: its merge-on-read pass 1 (position delete files)
//!                        (on workers: physical_plan::write::PositionDeleteWriterExec)
//!  merge/      MERGE INTO (MergeExec)
//!  overwrite.rs INSERT OVERWRITE (OverwriteExec): the new rows, and a copy-on-write DELETE by
//!              its filter or the partitions it writes, in one snapshot
//!  core.rs     what all of them share: the target, the write mode (their node, its retry
//!              loop and counters: physical_plan::statement::StatementExec)
//!  splice.rs   copy-on-write by column splice (UPDATE and MERGE): when it applies, the
//!              rewrite of files whose other columns are copied as they are
//! ```

pub(crate) mod core;
pub(crate) mod delete;
pub(crate) mod guard;
pub(crate) mod merge;
mod mor_pass;
pub(crate) mod overwrite;
mod rewrite;
pub(crate) mod splice;
pub(crate) mod update;

pub(crate) use self::core::DmlTarget;
pub use guard::IcebergQueryPlanner;
pub(crate) use overwrite::OverwriteScope;
