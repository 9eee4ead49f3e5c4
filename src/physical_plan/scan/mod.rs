//! [`IcebergScanExec`]: names the Iceberg scan in plans (table, snapshot, files kept by pruning,
//! predicate used) above the DataFusion parquet scan that reads the files.

mod exec;

pub use exec::{IcebergScanExec, ScanSummary};
