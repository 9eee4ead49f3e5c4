//! Where tables live: the SQL catalog (SQLite by default, the JDBC layout), its DataFusion
//! catalog/schema providers, and the metadata-pointer abstraction the commit path swaps.

mod files;
mod names;
mod pointer;
pub(crate) mod prefetch;
mod provider;
mod pyiceberg_config;
mod rest;
mod sql;
mod uri;

use std::fmt::Debug;

use datafusion::error::Result;
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::TableIdent;

pub use pointer::{MetadataPointer, SwapOutcome};
pub(crate) use provider::ensure_namespace;
pub use provider::{IcebergCatalogProvider, IcebergSchemaProvider, DEFAULT_NAMESPACE};
pub use pyiceberg_config::{pyiceberg_catalog, pyiceberg_config_path, pyiceberg_execution};
pub use rest::RestCatalog;
pub use sql::{SqlCatalog, SqlCatalogConfig};
pub use uri::CatalogUri;

// The commit layer's names, where they were first published.
pub use crate::commit::{CommitResult, MetadataChange, MetadataStore};

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

/// The last handle loaded for each table of a catalog. A metadata file never changes, so a
/// handle whose metadata location is still the current one is reused: its metadata is not
/// parsed again and its manifest cache stays warm across queries.
#[derive(Debug, Default)]
pub(crate) struct HandleCache(std::sync::Mutex<std::collections::HashMap<TableIdent, Table>>);

impl HandleCache {
    /// Handles kept at most (the cache starts over beyond).
    const MAX: usize = 256;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<TableIdent, Table>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached handle of `ident` if it is at `location`.
    pub(crate) fn get(&self, ident: &TableIdent, location: &str) -> Option<Table> {
        self.lock()
            .get(ident)
            .filter(|t| t.metadata_location() == Some(location))
            .cloned()
    }

    /// Keeps `table` as the handle of `ident`.
    pub(crate) fn put(&self, ident: &TableIdent, table: &Table) {
        let mut handles = self.lock();
        if handles.len() >= Self::MAX && !handles.contains_key(ident) {
            handles.clear();
        }
        handles.insert(ident.clone(), table.clone());
    }

    /// Forgets the handle of `ident`.
    pub(crate) fn remove(&self, ident: &TableIdent) {
        self.lock().remove(ident);
    }
}

/// A catalog of Iceberg tables: what DataFusion's catalog and schema providers
/// ([`IcebergCatalogProvider`], [`IcebergSchemaProvider`]) and the table functions need.
/// [`SqlCatalog`] and [`RestCatalog`] implement it; commits go through its [`MetadataStore`].
#[async_trait::async_trait]
pub trait IcebergCatalog: MetadataStore {
    /// The catalog's name (the DataFusion catalog it is registered as).
    fn name(&self) -> &str;

    /// Every namespace.
    async fn list_namespaces(&self) -> Result<Vec<iceberg::NamespaceIdent>>;

    /// Whether a namespace exists.
    async fn namespace_exists(&self, ns: &iceberg::NamespaceIdent) -> Result<bool>;

    /// Creates a namespace; fails when it exists.
    async fn create_namespace(
        &self,
        ns: &iceberg::NamespaceIdent,
        properties: std::collections::HashMap<String, String>,
    ) -> Result<()>;

    /// Drops an empty namespace.
    async fn drop_namespace(&self, ns: &iceberg::NamespaceIdent) -> Result<()>;

    /// The tables of a namespace.
    async fn list_tables(&self, ns: &iceberg::NamespaceIdent) -> Result<Vec<TableIdent>>;

    /// Whether a table exists.
    async fn table_exists(&self, ident: &TableIdent) -> Result<bool>;

    /// Loads a table; fails when there is none.
    async fn load_table(&self, ident: &TableIdent) -> Result<Table>;

    /// Loads a table, or `None` when there is none.
    async fn try_load_table(&self, ident: &TableIdent) -> Result<Option<Table>>;

    /// Creates a table.
    async fn create_table(
        &self,
        ns: &iceberg::NamespaceIdent,
        creation: iceberg::TableCreation,
    ) -> Result<Table>;

    /// Removes a table from the catalog; its files stay.
    async fn drop_table(&self, ident: &TableIdent) -> Result<()>;

    /// Registers an existing table (by its metadata file) under `ident`.
    async fn register_table(&self, ident: &TableIdent, metadata_location: &str) -> Result<Table>;

    /// Gives the table `from` the name `to` (its files stay where they are).
    async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
        let _ = to;
        Err(datafusion::error::DataFusionError::NotImplemented(format!(
            "catalog '{}' cannot rename table '{from}'",
            self.name()
        )))
    }
}

/// Implements [`IcebergCatalog`] for a catalog type through its inherent methods of the same
/// names.
macro_rules! catalog_through_inherent_methods {
    ($t:ty) => {
        #[async_trait::async_trait]
        impl IcebergCatalog for $t {
            fn name(&self) -> &str {
                <$t>::name(self)
            }
            async fn list_namespaces(&self) -> Result<Vec<iceberg::NamespaceIdent>> {
                <$t>::list_namespaces(self).await
            }
            async fn namespace_exists(&self, ns: &iceberg::NamespaceIdent) -> Result<bool> {
                <$t>::namespace_exists(self, ns).await
            }
            async fn create_namespace(
                &self,
                ns: &iceberg::NamespaceIdent,
                properties: std::collections::HashMap<String, String>,
            ) -> Result<()> {
                <$t>::create_namespace(self, ns, properties).await
            }
            async fn drop_namespace(&self, ns: &iceberg::NamespaceIdent) -> Result<()> {
                <$t>::drop_namespace(self, ns).await
            }
            async fn list_tables(&self, ns: &iceberg::NamespaceIdent) -> Result<Vec<TableIdent>> {
                <$t>::list_tables(self, ns).await
            }
            async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
                <$t>::table_exists(self, ident).await
            }
            async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
                <$t>::load_table(self, ident).await
            }
            async fn try_load_table(&self, ident: &TableIdent) -> Result<Option<Table>> {
                <$t>::try_load_table(self, ident).await
            }
            async fn create_table(
                &self,
                ns: &iceberg::NamespaceIdent,
                creation: iceberg::TableCreation,
            ) -> Result<Table> {
                <$t>::create_table(self, ns, creation).await
            }
            async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
                <$t>::drop_table(self, ident).await
            }
            async fn register_table(
                &self,
                ident: &TableIdent,
                metadata_location: &str,
            ) -> Result<Table> {
                <$t>::register_table(self, ident, metadata_location).await
            }
            async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
                <$t>::rename_table(self, from, to).await
            }
        }
    };
}

catalog_through_inherent_methods!(SqlCatalog);
catalog_through_inherent_methods!(RestCatalog);
