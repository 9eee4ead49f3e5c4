//! What a commit changes: the files it adds and removes, the deletes a removal takes along, the
//! checks it makes against commits that happened since its base, and how a conflict is told.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::error::DataFusionError;
use iceberg::spec::{DataFile, Operation, TableMetadata};

/// The table's main branch: its head is the current snapshot.
pub const MAIN_BRANCH: &str = "main";

/// A file added by a snapshot, with the partition spec it was written for.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// The partition spec id of `file.partition`.
    pub spec_id: i32,
    /// The file's manifest description.
    pub file: DataFile,
}

/// What a snapshot changes in a table.
#[derive(Debug, Default, Clone)]
pub struct SnapshotChanges {
    /// The snapshot operation recorded in the summary.
    pub operation: Operation,
    /// New data files (content = data).
    pub added_data_files: Vec<NewFile>,
    /// New position or equality delete files.
    pub added_delete_files: Vec<NewFile>,
    /// Paths of data or delete files that this snapshot removes from the table (deletion
    /// vectors are not removed by path: several may share a Puffin file).
    pub removed_files: HashSet<String>,
    /// Deletion vectors this snapshot removes, by Puffin file path and blob offset.
    pub removed_deletion_vectors: HashSet<(String, u64)>,
    /// Extra summary properties (e.g. the engine that wrote the snapshot).
    pub summary_properties: HashMap<String, String>,
    /// Checks against commits that happened since the statement read the table.
    pub validation: Option<Validation>,
    /// The data sequence number of `added_data_files` (`None`: the new snapshot's). A
    /// compaction gives its files the sequence number of the snapshot it read, so equality
    /// deletes committed meanwhile still apply to the rows it moved (format v2 and later).
    pub data_sequence_number: Option<i64>,
    /// Whether the parent's data manifests are rewritten, their live entries clustered by
    /// partition (`rewrite_manifests`; delete manifests are carried as they are).
    pub rewrite_data_manifests: bool,
    /// Where a rewrite of data manifests sorts their entries and reserves the ones it holds
    /// (memory pool, spill files); `None`: a context of its own, without a memory limit.
    pub task_context: Option<Arc<datafusion::execution::TaskContext>>,
    /// Where the snapshot goes: `main`, another branch, or staged.
    pub write_to: super::WriteTo,
    /// Manifests of added data files the statement wrote itself, for the snapshot id
    /// `snapshot_id` (sequence numbers left to the manifest list): an import too large to hold
    /// its files' descriptions in memory. Their counts go in `summary_properties`.
    pub added_manifests: Vec<iceberg::spec::ManifestFile>,
    /// The id the snapshot must have (the one `added_manifests` were written for).
    pub snapshot_id: Option<i64>,
    /// Table properties set in the same commit.
    pub set_properties: HashMap<String, String>,
}

/// Delete files a commit removes: position or equality delete files by path, deletion vectors
/// by Puffin file path and blob offset.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemovedDeletes {
    /// Delete files (not deletion vectors), by path.
    pub files: HashSet<String>,
    /// Deletion vectors, by Puffin file path and blob offset.
    pub vectors: HashSet<(String, u64)>,
}

impl RemovedDeletes {
    /// Adds what `other` removes.
    pub fn extend(&mut self, other: RemovedDeletes) {
        self.files.extend(other.files);
        self.vectors.extend(other.vectors);
    }

    /// Adds `d` (a deletion vector by Puffin file and offset, any other delete file by path);
    /// whether it was not there yet.
    pub fn insert(&mut self, d: &crate::file_planning::DeleteFileRef) -> bool {
        match d.deletion_vector {
            Some(blob) => self.vectors.insert((d.path.clone(), blob.offset)),
            None => self.files.insert(d.path.clone()),
        }
    }

    /// How many delete files and vectors are removed.
    pub fn len(&self) -> usize {
        self.files.len() + self.vectors.len()
    }

    /// Whether nothing is removed.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.vectors.is_empty()
    }
}

/// The key a deletion vector is removed by, for a manifest entry that is one.
pub(super) fn vector_key(file: &DataFile) -> Option<(String, u64)> {
    match (file.file_format(), file.content_offset()) {
        (iceberg::spec::DataFileFormat::Puffin, Some(offset)) => {
            Some((file.file_path().to_string(), offset.max(0) as u64))
        }
        _ => None,
    }
}

/// A commit refused because a concurrent commit changed what the statement read: running the
/// statement again on the new table state may succeed.
#[derive(Debug)]
pub struct ConcurrentChange(pub String);

impl std::fmt::Display for ConcurrentChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConcurrentChange {}

pub(super) fn conflict(message: String) -> DataFusionError {
    DataFusionError::External(Box::new(ConcurrentChange(message)))
}

/// Whether `e` (or a cause of it) is a [`ConcurrentChange`].
pub fn is_concurrent_change(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::External(inner) => inner.is::<ConcurrentChange>(),
        DataFusionError::Context(_, inner) => is_concurrent_change(inner),
        _ => false,
    }
}

/// Decides whether a data file committed concurrently may hold rows a statement's condition
/// matches (`true` when it cannot tell).
pub type MayMatch = Arc<dyn Fn(&TableMetadata, i32, &DataFile) -> bool + Send + Sync>;

/// What a statement that read the table at `base_snapshot_id` requires of the commits made
/// since, for its result to equal running it after them (serializable isolation).
#[derive(Clone)]
pub struct Validation {
    /// The snapshot the statement read (`None`: the table was empty).
    pub base_snapshot_id: Option<i64>,
    /// New data files it would have had to see: a conflict when this says they may match.
    pub may_match: MayMatch,
    /// Data files whose rows it changes (rewrites, or deletes from by position): their removal or
    /// new deletes for them conflict.
    pub read_files: HashSet<String>,
    /// Whether equality deletes committed since do not conflict: the files the statement adds
    /// keep the base snapshot's data sequence number, so those deletes apply to them too
    /// ([`SnapshotChanges::data_sequence_number`]).
    pub equality_deletes_carry_over: bool,
}

impl std::fmt::Debug for Validation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validation")
            .field("base_snapshot_id", &self.base_snapshot_id)
            .field("read_files", &self.read_files.len())
            .field(
                "equality_deletes_carry_over",
                &self.equality_deletes_carry_over,
            )
            .finish()
    }
}

impl SnapshotChanges {
    /// An append of `files`.
    pub fn append(files: Vec<NewFile>) -> Self {
        Self {
            operation: Operation::Append,
            added_data_files: files,
            ..Default::default()
        }
    }

    /// Rows added by this change.
    pub fn added_records(&self) -> u64 {
        self.added_data_files
            .iter()
            .map(|f| f.file.record_count())
            .sum()
    }
}
