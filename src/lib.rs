//! # iceberg-exec
//!
//! Apache Iceberg tables as first-class citizens of Apache DataFusion: an Iceberg catalog you
//! register in a [`SessionContext`](datafusion::prelude::SessionContext), scans on DataFusion's
//! parquet engine with merge-on-read deletes applied, and writes (`INSERT`, `CREATE TABLE AS`,
//! `DELETE`, `UPDATE`) through this crate's own snapshot producer and compare-and-swap commit, in
//! bounded memory.
//!
//! ```no_run
//! use iceberg_exec::{IcebergSession, WarehouseConfig};
//!
//! # async fn demo() -> datafusion::error::Result<()> {
//! let session = IcebergSession::open(WarehouseConfig::local("./warehouse")).await?;
//! let ctx = session.context();
//! ctx.sql("CREATE SCHEMA IF NOT EXISTS ns").await?.collect().await?;
//! ctx.sql("CREATE TABLE ns.t (id BIGINT NOT NULL, name VARCHAR)").await?.collect().await?;
//! ctx.sql("INSERT INTO ns.t VALUES (1, 'a'), (2, 'b')").await?.collect().await?;
//! ctx.sql("SELECT * FROM ns.t").await?.show().await?;
//! # Ok(()) }
//! ```

#[doc(hidden)]
pub mod arrow58;
pub mod catalog;
pub mod commit;
mod config;
#[cfg(feature = "distributed")]
pub mod distributed;
mod dml;
mod error;
pub mod file_planning;
mod ident;
mod io_runtime;
pub mod maintenance;
pub mod physical_plan;
/// File planning's first home: every name here is [`file_planning`]'s.
#[deprecated(since = "0.1.0", note = "moved to `iceberg_exec::file_planning`")]
pub mod scan {
    pub use crate::file_planning::*;
}
mod session;
/// The commit layer's first home: every name here is [`commit`]'s.
#[deprecated(since = "0.1.0", note = "moved to `iceberg_exec::commit`")]
pub mod snapshot {
    pub use crate::commit::{
        commit, is_commit_state_unknown, is_concurrent_change, CommitOutcome, CommitStateUnknown,
        ConcurrentChange, MayMatch, NewFile, RemovedDeletes, SnapshotChanges, SnapshotProducer,
        Validation, MAIN_BRANCH, STATEMENT_ID_PROPERTY,
    };
}
mod storage;
pub mod table;
mod uuid_type;

pub use catalog::{
    CatalogUri, IcebergCatalog, IcebergCatalogProvider, IcebergSchemaProvider, RestCatalog,
    SqlCatalog, SqlCatalogConfig,
};
pub use commit::MetadataStore;
pub use config::IcebergOptions;
pub use dml::IcebergQueryPlanner;
pub use session::{
    parse_size, session_state_builder, CatalogChoice, IcebergSession, WarehouseConfig,
};
pub use storage::LocationMap;
pub use storage::{ObjectStores, StorageOptions, TableStorage, TableStorageFactory};
pub use table::{
    find_metadata_file, open_table_at, IcebergScanFunction, IcebergSnapshotsFunction,
    IcebergTableFactory, IcebergTableProvider, TableDefinition,
};
pub use uuid_type::{
    is_uuid, to_uuid, uuid_field, uuid_to_string, IcebergTypePlanner, UuidCoercion, UUID_EXTENSION,
};

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The user guide's Rust examples (`docs/rust.md`), compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/rust.md")]
pub struct GuideRustDoctests;
