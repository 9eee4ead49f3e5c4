//! Merge-on-read's delete output: for each data file a statement deletes rows from, one delete
//! file that holds all of the file's deleted positions, replacing the ones before it.
//!
//! ```text
//!  format v2: new positions ∪ the file's file-scoped position delete files
//!             ─► one position delete file (referenced_data_file = the data file)
//!  format v3: new positions ∪ the file's deletion vector ∪ every position delete file of it
//!             ─► one deletion vector (Puffin)
//!  the commit removes what the new file replaces: file-scoped position delete files, the old
//!  vector (by Puffin file and offset); partition-scoped files stay (they name other files too;
//!  a reader ignores them for a file that has a deletion vector)
//! ```
//! So deletes do not pile up: a data file has at most one file-scoped delete file or vector,
//! whatever the number of statements.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use iceberg::spec::FormatVersion;
use iceberg::table::Table;
use object_store::ObjectStore;
use roaring::RoaringTreemap;

use super::{write_deletion_vectors, write_file_position_deletes, DeletionVector};
use crate::commit::WrittenFiles;
use crate::commit::{NewFile, RemovedDeletes};
use crate::file_planning::{DeleteFileRef, PlannedFile};
use crate::physical_plan::positional_delete::{positions_in, PositionDeleteFile};
use crate::storage::location::LocationMap;

/// One data file's delete output: the new file and what it replaces.
#[derive(Debug)]
pub(crate) struct FileDeletes {
    pub file: NewFile,
    pub replaces: RemovedDeletes,
}

/// Writes the merged delete file of each data file a merge-on-read statement changes.
#[derive(Clone)]
pub(crate) struct DeleteWriter {
    table: Table,
    store: Arc<dyn ObjectStore>,
    locations: LocationMap,
    url: datafusion::execution::object_store::ObjectStoreUrl,
    vectors: bool,
    /// The data files the statement may delete from, by recorded path.
    files: Arc<HashMap<String, PlannedFile>>,
}

impl DeleteWriter {
    /// A writer for `files` (the statement's planned data files, with the position deletes
    /// that apply to them) of `table`, reading earlier deletes through `context`'s stores.
    pub(crate) fn new(
        table: &Table,
        locations: &LocationMap,
        files: &[PlannedFile],
        context: &TaskContext,
    ) -> Result<Self> {
        let url = locations.store_url(table.metadata().location())?;
        let store = context.runtime_env().object_store(&url)?;
        Ok(Self {
            table: table.clone(),
            store,
            locations: locations.clone(),
            url,
            vectors: table.metadata().format_version() >= FormatVersion::V3,
            files: Arc::new(files.iter().map(|f| (f.path.clone(), f.clone())).collect()),
        })
    }

    /// Whether the table takes deletion vectors (format v3) rather than position delete files.
    pub(crate) fn writes_vectors(&self) -> bool {
        self.vectors
    }

    /// Whether `path` is one of the data files the statement may delete from.
    pub(crate) fn plans(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    /// The data file `path`'s planned form.
    fn planned(&self, path: &str) -> Result<&PlannedFile> {
        self.files
            .get(path)
            .ok_or_else(|| DataFusionError::Internal(format!("{path} was not planned")))
    }

    /// The earlier delete files of `data` that the new one takes in (and, but for partition-
    /// scoped ones, replaces).
    fn merged<'a>(&self, data: &'a PlannedFile) -> Vec<&'a Arc<DeleteFileRef>> {
        data.position_deletes
            .iter()
            .filter(|d| self.vectors || file_scoped(d, &data.path))
            .collect()
    }

    /// Writes one delete file for the data file `path` holding `positions` (rows the statement
    /// deletes) and every position its earlier deletes held, and records it in `written`.
    pub(crate) async fn write(
        &self,
        path: &str,
        mut positions: RoaringTreemap,
        written: &WrittenFiles,
    ) -> Result<FileDeletes> {
        let data = self.planned(path)?;
        let merged = self.merged(data);
        if !merged.is_empty() {
            let files = merged
                .iter()
                .map(|d| self.delete_file(d, &data.path))
                .collect::<Result<Vec<_>>>()?;
            positions |= positions_in(&self.store, &files, &data.path).await?;
        }
        let mut replaces = RemovedDeletes::default();
        for d in merged.iter().filter(|d| file_scoped(d, &data.path)) {
            replaces.insert(d);
        }
        let file = self.write_file(data, positions, written).await?;
        Ok(FileDeletes { file, replaces })
    }

    /// Writes `positions` of `data` as its one delete file (a vector on v3).
    async fn write_file(
        &self,
        data: &PlannedFile,
        positions: RoaringTreemap,
        written: &WrittenFiles,
    ) -> Result<NewFile> {
        let file = if self.vectors {
            let vector = DeletionVector {
                data_file: data.path.clone(),
                spec_id: data.spec_id,
                partition: data.partition.clone(),
                positions,
            };
            let mut files =
                write_deletion_vectors(&self.table, std::slice::from_ref(&vector)).await?;
            if let Some(f) = files.first() {
                written.record(f.file.file_path().to_string());
            }
            files
                .pop()
                .ok_or_else(|| DataFusionError::Internal("no deletion vector was written".into()))?
        } else {
            let file = write_file_position_deletes(
                &self.table,
                data.spec_id,
                data.partition.clone(),
                &data.path,
                &positions,
            )
            .await?;
            written.record(file.file.file_path().to_string());
            file
        };
        Ok(file)
    }

    /// Merges every position delete that applies to the data file `path` (file- and partition-
    /// scoped files, its vector) into one delete file of that file alone. Returns it (`None`
    /// when they hold no position of the file) and the file-scoped ones it replaces.
    pub(crate) async fn merge_all(
        &self,
        path: &str,
        written: &WrittenFiles,
    ) -> Result<(Option<NewFile>, RemovedDeletes)> {
        let data = self.planned(path)?;
        let files = data
            .position_deletes
            .iter()
            .map(|d| self.delete_file(d, &data.path))
            .collect::<Result<Vec<_>>>()?;
        let positions = match files.is_empty() {
            true => RoaringTreemap::new(),
            false => positions_in(&self.store, &files, &data.path).await?,
        };
        let mut replaces = RemovedDeletes::default();
        for d in data
            .position_deletes
            .iter()
            .filter(|d| file_scoped(d, &data.path))
        {
            replaces.insert(d);
        }
        if positions.is_empty() {
            return Ok((None, replaces));
        }
        let file = self.write_file(data, positions, written).await?;
        Ok((Some(file), replaces))
    }

    fn delete_file(&self, d: &DeleteFileRef, data_file: &str) -> Result<PositionDeleteFile> {
        let location = self
            .locations
            .object_path_in(&self.url, &d.path)?
            .to_string();
        Ok(PositionDeleteFile::of(d, location, data_file))
    }
}

/// Whether `d` holds deletes of the data file `path` only (a deletion vector, or a position
/// delete file that names it).
fn file_scoped(d: &DeleteFileRef, path: &str) -> bool {
    d.referenced_data_file.as_deref() == Some(path)
}

/// The delete outputs of a statement, folded into what its commit adds and removes.
pub(crate) fn fold(outputs: Vec<FileDeletes>) -> (Vec<NewFile>, RemovedDeletes) {
    let mut added = Vec::with_capacity(outputs.len());
    let mut removed = RemovedDeletes::default();
    for o in outputs {
        added.push(o.file);
        removed.extend(o.replaces);
    }
    (added, removed)
}
