//! The physical plan of a scan ([`plan`]: data files with their deletes applied) and
//! [`IcebergScanExec`], which names the Iceberg scan in plans (table, snapshot, files kept by pruning,
//! predicate used) above the DataFusion parquet scan that reads the files.

pub(crate) mod constants;
pub(crate) mod equality;
mod exec;
mod layout;
pub(crate) mod lineage;
pub mod metadata;
pub(crate) mod plan;
pub(crate) mod request;
pub(crate) mod schema;

pub use exec::{IcebergScanExec, ScanSummary};
