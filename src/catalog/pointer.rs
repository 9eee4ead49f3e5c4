//! Catalogs that keep a pointer to each table's current metadata file (the SQL catalog, and the
//! layout Java's `JdbcCatalog` and pyiceberg share): a commit writes the new metadata file, then
//! compares and swaps the pointer. Every such store is a [`MetadataStore`].

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::TableIdent;

use super::{table_handle, CommitResult, MetadataChange, MetadataStore};
use crate::commit::metadata_file::{new_metadata_location, write_metadata};
use crate::commit::CommitStateUnknown;
use crate::error::IcebergResultExt;
use crate::storage::ObjectStores;

/// The outcome of a compare-and-swap on a table's metadata pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapOutcome {
    /// The pointer now names the new metadata file.
    Swapped,
    /// Someone else moved the pointer first; nothing was changed.
    Conflict,
}

/// Holds each table's current-metadata pointer: what a commit compares and swaps.
#[async_trait::async_trait]
pub trait MetadataPointer: Debug + Send + Sync {
    /// Loads the current version of a table.
    async fn load_current(self: Arc<Self>, ident: &TableIdent) -> Result<Table>;

    /// Points the table at `new_location` if it still points at `expected`.
    async fn swap(
        self: Arc<Self>,
        ident: &TableIdent,
        expected: &str,
        new_location: &str,
    ) -> Result<SwapOutcome>;

    /// The file I/O for the tables of this store.
    fn pointer_file_io(&self) -> &FileIO;

    /// The object stores its tables' files are in.
    fn pointer_object_stores(&self) -> &Arc<ObjectStores>;
}

#[async_trait::async_trait]
impl<T: MetadataPointer + 'static> MetadataStore for T {
    async fn load(self: Arc<Self>, ident: &TableIdent) -> Result<Table> {
        self.load_current(ident).await
    }

    async fn commit_metadata(
        self: Arc<Self>,
        ident: &TableIdent,
        change: MetadataChange,
    ) -> Result<CommitResult> {
        let file_io = self.pointer_file_io().clone();
        let base = &change.base;
        let location = new_metadata_location(
            base.metadata().location(),
            base.metadata_location(),
            &change.metadata,
        );
        let new_path = match write_metadata(&file_io, &change.metadata, &location).await {
            Ok(p) => p,
            Err(e) => {
                let _ = file_io.delete(location.to_string()).await;
                return Err(e.context(format!("writing metadata of table '{ident}'")));
            }
        };
        let expected = base.metadata_location_result().df()?.to_string();
        let handle = |path: String| {
            table_handle(
                ident.clone(),
                path,
                change.metadata.clone(),
                file_io.clone(),
            )
            .map_err(|e| {
                DataFusionError::External(Box::new(CommitStateUnknown(format!(
                    "table '{ident}' was committed, but its handle could not be built: {e}"
                ))))
            })
        };
        match Arc::clone(&self).swap(ident, &expected, &new_path).await {
            Ok(SwapOutcome::Swapped) => Ok(CommitResult::Committed(Box::new(handle(new_path)?))),
            Ok(SwapOutcome::Conflict) => {
                let _ = file_io.delete(&new_path).await;
                Ok(CommitResult::Conflict)
            }
            // The swap may have happened even though it reported an error (say, the connection
            // dropped after the UPDATE ran): look before deleting anything.
            Err(e) => match self.load_current(ident).await {
                Ok(now) if now.metadata_location() == Some(new_path.as_str()) => {
                    Ok(CommitResult::Committed(Box::new(handle(new_path)?)))
                }
                Ok(_) => {
                    let _ = file_io.delete(&new_path).await;
                    Err(e)
                }
                Err(reload) => Err(DataFusionError::External(Box::new(CommitStateUnknown(
                    format!(
                        "commit to table '{ident}' failed ({e}) and the table could not be \
                         reloaded to check whether it took effect ({reload}); files are kept"
                    ),
                )))),
            },
        }
    }

    fn file_io(&self) -> &FileIO {
        self.pointer_file_io()
    }

    fn object_stores(&self) -> &Arc<ObjectStores> {
        self.pointer_object_stores()
    }
}
