//! Position deletes applied inside the parquet scan.
//!
//! ```text
//!  exec.rs      PositionalDeleteExec: the node, its partitions' routes (none, bitmaps, anti-join)
//!  opener.rs    a partition's data files read with their deletes (access plans, dense drops)
//!  join.rs      the anti-join route: deletes sorted (spilling) and merged with the rows
//!  load.rs      position delete files and deletion vectors read into positions per data file
//!  dv.rs        deletion vectors (Puffin blobs)
//!  appended.rs  the columns appended to the scan's (`_pos`, the live flag)
//! ```

mod appended;
pub(crate) mod dv;
mod exec;
mod join;
mod load;
mod opener;

pub use appended::{LIVE_COLUMN, POSITION_COLUMN};
pub use dv::DeletionVectorRef;
pub use exec::{PositionalDeleteExec, DEFAULT_JOIN_THRESHOLD};
pub(crate) use load::positions_in;
pub use load::{FileDeletes, PositionDeleteFile};
