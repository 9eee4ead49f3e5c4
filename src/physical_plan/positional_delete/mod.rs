//! Position deletes applied inside the parquet scan.

mod exec;
mod join;

pub use exec::{
    FileDeletes, PositionDeleteFile, PositionalDeleteExec, DEFAULT_JOIN_THRESHOLD, POSITION_COLUMN,
};
