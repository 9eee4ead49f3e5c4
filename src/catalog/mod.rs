//! Where tables live: the SQL catalog (SQLite by default, the JDBC layout), its DataFusion
//! catalog/schema providers, and the metadata-pointer abstraction the commit path swaps.

mod names;
mod provider;
mod sql;
mod uri;

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::error::Result;
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::TableIdent;

pub(crate) use names::check_location;
pub use provider::{IcebergCatalogProvider, IcebergSchemaProvider};
pub use sql::{SqlCatalog, SqlCatalogConfig, SwapOutcome};
pub use uri::CatalogUri;

/// Builds a [`Table`] handle from loaded metadata.
pub(crate) fn table_handle(
    ident: TableIdent,
    metadata_location: String,
    metadata: iceberg::spec::TableMetadata,
    file_io: FileIO,
) -> Result<Table> {
    use crate::error::IcebergResultExt;
    Table::builder()
        .identifier(ident)
        .metadata_location(metadata_location)
        .metadata(metadata)
        .file_io(file_io)
        .runtime(crate::io_runtime::iceberg_runtime()?)
        .build()
        .df()
}

/// Holds each table's current-metadata pointer: what a commit compares and swaps.
#[async_trait::async_trait]
pub trait MetadataStore: Debug + Send + Sync {
    /// Loads the current version of a table.
    async fn load(self: Arc<Self>, ident: &TableIdent) -> Result<Table>;

    /// Points the table at `new_location` if it still points at `expected`.
    async fn swap(
        self: Arc<Self>,
        ident: &TableIdent,
        expected: &str,
        new_location: &str,
    ) -> Result<SwapOutcome>;

    /// The file I/O for the tables of this store.
    fn file_io(&self) -> &FileIO;
}
