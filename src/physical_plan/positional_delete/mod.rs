//! Position deletes applied inside the parquet scan.

mod exec;

pub use exec::{FileDeletes, PositionDeleteFile, PositionalDeleteExec, POSITION_COLUMN};
