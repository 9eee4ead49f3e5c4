//! Table maintenance: the procedures Iceberg users know from Spark, in bounded memory, through
//! the crate's own commit path.
//!
//! ```text
//!  rewrite_data_files.rs   RewriteDataFiles: compaction that applies deletes (bin-pack, sort),
//!                          committed as a `replace` snapshot
//!  options.rs              its options, by Spark's names and with Spark's defaults
//!  call.rs                 CALL [catalog.]system.<procedure>(..): the same from SQL
//! ```

mod call;
mod options;
mod rewrite_data_files;

pub use call::{call, is_call};
pub use options::RewriteOptions;
pub use rewrite_data_files::{
    PlannedRewrite, RewriteDataFiles, RewriteDataFilesResult, RewriteStrategy,
};
