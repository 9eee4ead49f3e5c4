//! Position deletes applied inside the parquet scan.

pub(crate) mod dv;
mod exec;
mod join;

pub use dv::DeletionVectorRef;
pub(crate) use exec::positions_in;
pub use exec::{
    FileDeletes, PositionDeleteFile, PositionalDeleteExec, DEFAULT_JOIN_THRESHOLD, LIVE_COLUMN,
    POSITION_COLUMN,
};
