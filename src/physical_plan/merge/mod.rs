//! The operators of a `MERGE INTO` (planned and run by `dml::merge`).
//!
//! ```text
//!  on.rs          the ON condition compiled: hash join keys over each side, the join filter
//!  source.rs      the source read once: buffered under a budget or spilled, key bounds
//!  key_filter.rs  KeyFilterExec: target rows whose keys no source row has, dropped early
//!  join.rs        the join of source and target (hash, Grace through
//!                 SequentialPartitionsExec, nested loop), and the rewrite's join
//!  clauses.rs     the WHEN clauses compiled against the join rows
//!  rows.rs        MergeRowsExec: each joined row through the first clause that fits
//!  positions.rs   the positions of changed target rows per file; DropPositionsExec
//!  rewrite.rs     RewriteExec: copy-on-write pass 2 from the deciding columns
//!  splice.rs      the updated columns' new values, for a rewrite by column splice
//! ```

pub(crate) mod clauses;
pub(crate) mod join;
pub(crate) mod key_filter;
pub(crate) mod on;
pub(crate) mod positions;
pub(crate) mod rewrite;
pub(crate) mod rows;
pub(crate) mod source;
pub(crate) mod splice;
