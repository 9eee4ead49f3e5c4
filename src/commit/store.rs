//! What a commit changes and where it lands: a table's proposed next metadata, the store that
//! compares and swaps it (a catalog), and how a proposal ended.

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::error::Result;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};

/// A table's next metadata, as a commit proposes it.
#[derive(Debug, Clone)]
pub struct MetadataChange {
    /// The version it was built on.
    pub base: Table,
    /// The complete new metadata.
    pub metadata: TableMetadata,
    /// The same change as the REST spec's updates (`add-snapshot`, `set-snapshot-ref`, ...).
    pub updates: Vec<TableUpdate>,
    /// What must still hold of the table for the change to apply (`assert-table-uuid`,
    /// `assert-ref-snapshot-id`).
    pub requirements: Vec<TableRequirement>,
}

/// How a proposed change ended.
#[derive(Debug)]
pub enum CommitResult {
    /// The table is now at the new metadata.
    Committed(Box<Table>),
    /// The table moved on since the base: nothing was changed.
    Conflict,
}

/// Holds each table's current metadata: what a commit compares and replaces.
///
/// An error from [`commit_metadata`](Self::commit_metadata) means nothing was committed, unless
/// it is a [`CommitStateUnknown`](super::CommitStateUnknown): then the change may have
/// taken effect and the files it names must be kept.
#[async_trait::async_trait]
pub trait MetadataStore: Debug + Send + Sync {
    /// Loads the current version of a table.
    async fn load(self: Arc<Self>, ident: &TableIdent) -> Result<Table>;

    /// Makes `change` the table's current metadata if the table is still at `change.base`.
    async fn commit_metadata(
        self: Arc<Self>,
        ident: &TableIdent,
        change: MetadataChange,
    ) -> Result<CommitResult>;

    /// The file I/O for the tables of this store.
    fn file_io(&self) -> &FileIO;

    /// The object stores its tables' files are in (shared with its file I/O).
    fn object_stores(&self) -> &Arc<crate::storage::ObjectStores>;
}
