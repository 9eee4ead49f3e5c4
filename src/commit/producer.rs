//! The snapshot producer: turns a set of file changes into manifests, a manifest list and a new
//! snapshot on top of a base table version.
//!
//! ```text
//!  changes (added data files, added delete files, removed data files)
//!     │  written once per producer      ┌────────────────────────────────────┐
//!     ├──────────────────────────────►  │ new manifests (entries inherit the │
//!     │                                 │ snapshot's sequence number)        │
//!     │  per attempt, on the base       └────────────────────────────────────┘
//!     └─► parent manifests: kept as they are, or rewritten when they list a removed file
//!         ─► manifest list (snap-<id>-<attempt>-<uuid>.avro) ─► snapshot + its branch's ref
//!            (`main`, another branch, or none: staged)
//! ```
//! A retry after a conflict re-applies the same changes on the newer base: new manifests are
//! reused, the manifest list and metadata are rebuilt.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, ManifestContentType, ManifestFile,
    ManifestListWriter, ManifestStatus, ManifestWriterBuilder, Snapshot, SnapshotSummaryCollector,
    Summary, TableMetadata,
};
use iceberg::table::Table;
use iceberg::TableRequirement;
use uuid::Uuid;

use super::changes::{conflict, vector_key, SnapshotChanges, Validation};
use super::write_to::{WriteTo, STAGED_WAP_ID};
use crate::commit::MetadataChange;
use crate::error::IcebergResultExt;
use crate::file_planning::sequence_numbers;
use crate::storage::location::LocationMap;

/// Builds snapshots for one set of changes, possibly several times (one per commit attempt).
#[derive(Debug)]
pub struct SnapshotProducer {
    /// Shared with the tasks that rewrite manifests side by side.
    changes: Arc<SnapshotChanges>,
    commit_uuid: Uuid,
    snapshot_id: Option<i64>,
    /// Manifests of added files, written at the first attempt and reused afterwards.
    new_manifests: Option<Vec<ManifestFile>>,
    /// Files written for the current attempt (manifest list, rewritten manifests).
    attempt_files: Vec<String>,
    /// Files written once for all attempts.
    shared_files: Vec<String>,
}

impl SnapshotProducer {
    /// A producer for `changes`.
    pub fn new(changes: SnapshotChanges) -> Self {
        Self {
            changes: Arc::new(changes),
            commit_uuid: Uuid::new_v4(),
            snapshot_id: None,
            new_manifests: None,
            attempt_files: vec![],
            shared_files: vec![],
        }
    }

    /// The changes this producer commits.
    pub fn changes(&self) -> &SnapshotChanges {
        &self.changes
    }

    /// The id of the snapshot being produced (after the first `apply`).
    pub fn snapshot_id(&self) -> Option<i64> {
        self.snapshot_id
    }

    fn metadata_path(&self, base: &TableMetadata, file: &str) -> String {
        format!("{}/metadata/{file}", base.location().trim_end_matches('/'))
    }

    /// Builds the new table metadata on top of `base`, writing manifests and a manifest list.
    pub async fn apply(&mut self, base: &Table, attempt: u32) -> Result<MetadataChange> {
        let metadata = base.metadata();
        self.attempt_files.clear();

        let snapshot_id = match (self.changes.snapshot_id, self.snapshot_id) {
            (Some(id), _) if metadata.snapshot_by_id(id).is_some() => {
                return Err(DataFusionError::Execution(format!(
                    "snapshot id {id}, chosen for the manifests written, was taken meanwhile; \
                     nothing was changed"
                )))
            }
            (Some(id), _) => {
                self.snapshot_id = Some(id);
                id
            }
            (None, Some(id)) if metadata.snapshot_by_id(id).is_none() => id,
            _ => {
                let id = new_snapshot_id(metadata);
                self.snapshot_id = Some(id);
                id
            }
        };
        let parent = self.changes.write_to.head(metadata).cloned();
        if let Some(validation) = &self.changes.validation {
            validate(base, parent.as_ref().map(|p| p.snapshot_id()), validation).await?;
        }
        let format_version = metadata.format_version();
        let sequence_number = match format_version {
            FormatVersion::V1 => 0,
            _ => metadata.next_sequence_number(),
        };

        if self.new_manifests.is_none() {
            let manifests = self.write_new_manifests(base, snapshot_id).await?;
            self.new_manifests = Some(manifests);
        }
        let mut manifests: Vec<ManifestFile> = self.new_manifests.clone().unwrap_or_default();
        manifests.extend(self.changes.added_manifests.iter().cloned());

        // Carry the parent's manifests over, rewriting those that list removed files.
        let mut summary = SnapshotSummaryCollector::default();
        let mut found_removed: HashSet<String> = HashSet::new();
        let mut rewrite_counts: Option<(usize, usize, usize)> = None;
        if let Some(parent) = &parent {
            // Commits go to catalog tables: their locations are read as recorded.
            let list =
                crate::file_planning::manifest_list(base, &LocationMap::default(), parent).await?;
            let removes_nothing = self.changes.removed_files.is_empty()
                && self.changes.removed_deletion_vectors.is_empty();
            // A manifest rewrite writes every manifest anew; other commits carry them over.
            let carried: &[ManifestFile] = if self.changes.rewrite_data_manifests {
                let counts = self
                    .cluster_data_manifests(base, &list, snapshot_id, attempt, &mut manifests)
                    .await?;
                rewrite_counts = Some(counts);
                &[]
            } else {
                &list
            };
            if removes_nothing {
                manifests.extend(carried.iter().cloned());
            } else {
                self.rewrite_manifests(
                    base,
                    carried,
                    snapshot_id,
                    attempt,
                    &mut manifests,
                    &mut summary,
                    &mut found_removed,
                )
                .await?;
            }
        }
        let wanted = self.changes.removed_files.iter().cloned().chain(
            self.changes
                .removed_deletion_vectors
                .iter()
                .map(|(path, offset)| vector_name(path, *offset)),
        );
        let missing: Vec<String> = wanted.filter(|p| !found_removed.contains(p)).collect();
        if !missing.is_empty() {
            return Err(conflict(format!(
                "commit conflict: {} file(s) to remove are no longer in the table (e.g. {})",
                missing.len(),
                missing[0]
            )));
        }

        for new in self
            .changes
            .added_data_files
            .iter()
            .chain(self.changes.added_delete_files.iter())
        {
            let spec = metadata.partition_spec_by_id(new.spec_id).ok_or_else(|| {
                DataFusionError::Internal(format!("unknown partition spec {}", new.spec_id))
            })?;
            summary.add_file(&new.file, metadata.current_schema().clone(), spec.clone());
        }

        let parent_id = parent.as_ref().map(|p| p.snapshot_id());
        let (list_path, next_row_id) = self
            .write_manifest_list(base, snapshot_id, parent_id, attempt, manifests)
            .await?;
        let mut props = summary.build();
        if let Some((replaced, created, kept)) = rewrite_counts {
            props.insert("manifests-replaced".to_string(), replaced.to_string());
            props.insert("manifests-created".to_string(), created.to_string());
            props.insert("manifests-kept".to_string(), kept.to_string());
        }
        props.extend(self.changes.summary_properties.clone());
        if let WriteTo::Staged(wap_id) = &self.changes.write_to {
            props.insert(STAGED_WAP_ID.to_string(), wap_id.clone());
        }
        add_totals(&mut props, parent.as_ref().map(|p| p.summary()));
        let summary = Summary {
            operation: self.changes.operation.clone(),
            additional_properties: props,
        };
        let timestamp_ms = chrono::Utc::now()
            .timestamp_millis()
            .max(metadata.last_updated_ms() + 1);
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent_id)
            .with_sequence_number(sequence_number)
            .with_timestamp_ms(timestamp_ms)
            .with_manifest_list(list_path)
            .with_summary(summary)
            .with_schema_id(metadata.current_schema_id());
        let snapshot = match (format_version, next_row_id) {
            (FormatVersion::V3, Some(next)) => {
                let first = metadata.next_row_id();
                snapshot
                    .with_row_range(first, next.saturating_sub(first))
                    .build()
            }
            _ => snapshot.build(),
        };
        on_target(base, snapshot, parent_id, &self.changes)
    }

    /// Writes the manifest list of the snapshot; its location, and the next row id after the
    /// rows its manifests hand ids to (format v3).
    async fn write_manifest_list(
        &mut self,
        base: &Table,
        snapshot_id: i64,
        parent_id: Option<i64>,
        attempt: u32,
        manifests: Vec<ManifestFile>,
    ) -> Result<(String, Option<u64>)> {
        let metadata = base.metadata();
        let list_path = self.metadata_path(
            metadata,
            &format!("snap-{snapshot_id}-{attempt}-{}.avro", self.commit_uuid),
        );
        let out = base.file_io().new_output(&list_path).df()?;
        self.attempt_files.push(list_path.clone());
        let writer = out.writer().await.df()?;
        let sequence_number = metadata.next_sequence_number();
        let mut list_writer = match metadata.format_version() {
            FormatVersion::V1 => ManifestListWriter::v1(writer, snapshot_id, parent_id),
            FormatVersion::V2 => {
                ManifestListWriter::v2(writer, snapshot_id, parent_id, sequence_number)
            }
            FormatVersion::V3 => ManifestListWriter::v3(
                writer,
                snapshot_id,
                parent_id,
                sequence_number,
                Some(metadata.next_row_id()),
            ),
        };
        list_writer.add_manifests(manifests.into_iter()).df()?;
        let next_row_id = list_writer.next_row_id();
        list_writer.close().await.df()?;
        Ok((list_path, next_row_id))
    }

    async fn write_new_manifests(
        &mut self,
        base: &Table,
        snapshot_id: i64,
    ) -> Result<Vec<ManifestFile>> {
        let metadata = base.metadata();
        let mut groups: HashMap<(i32, bool), Vec<DataFile>> = HashMap::new();
        for f in &self.changes.added_data_files {
            if f.file.content_type() != DataContentType::Data {
                return Err(DataFusionError::Internal(
                    "a delete file was given as an added data file".into(),
                ));
            }
            groups
                .entry((f.spec_id, false))
                .or_default()
                .push(f.file.clone());
        }
        let v3 = metadata.format_version() >= FormatVersion::V3;
        for f in &self.changes.added_delete_files {
            if f.file.content_type() == DataContentType::Data {
                return Err(DataFusionError::Internal(
                    "a data file was given as an added delete file".into(),
                ));
            }
            // The spec: position delete files must not be added to v3 tables, and deletion
            // vectors exist from v3 on.
            let vector = f.file.file_format() == iceberg::spec::DataFileFormat::Puffin;
            if f.file.content_type() == DataContentType::PositionDeletes && vector != v3 {
                return Err(DataFusionError::Plan(format!(
                    "table '{}' is format v{}: its position deletes must be {}, not {}",
                    base.identifier(),
                    metadata.format_version() as u8,
                    if v3 {
                        "deletion vectors"
                    } else {
                        "position delete files"
                    },
                    f.file.file_path()
                )));
            }
            groups
                .entry((f.spec_id, true))
                .or_default()
                .push(f.file.clone());
        }
        if metadata.format_version() == FormatVersion::V1 && groups.keys().any(|(_, d)| *d) {
            return Err(DataFusionError::Plan(
                "format v1 tables cannot hold delete files".into(),
            ));
        }
        let mut keys: Vec<_> = groups.keys().cloned().collect();
        keys.sort();
        let per_manifest = manifest_entries_target(metadata)?;
        let mut out = vec![];
        let mut n = 0;
        for key in keys {
            let files = groups.remove(&key).unwrap_or_default();
            // Manifests roll like Java's at about commit.manifest.target-size-bytes, so readers
            // hold one bounded manifest at a time.
            for chunk in files.chunks(per_manifest) {
                let path = self.metadata_path(metadata, &format!("{}-m{n}.avro", self.commit_uuid));
                n += 1;
                self.shared_files.push(path.clone());
                let mut writer = manifest_writer(base, &path, snapshot_id, key.0, key.1)?;
                // Data files take the given data sequence number; delete files always the
                // snapshot's (they must apply to everything committed before them).
                let seq = match (key.1, self.changes.data_sequence_number) {
                    (false, Some(seq)) if metadata.format_version() >= FormatVersion::V2 => seq,
                    _ => -1,
                };
                for f in chunk {
                    writer.add_file(f.clone(), seq).df()?;
                }
                out.push(writer.write_manifest_file().await.df()?);
            }
        }
        Ok(out)
    }

    /// Writes the live entries of the data manifests of `list` into new manifests clustered
    /// by partition (existing entries, their snapshot ids and sequence numbers kept) and pushes
    /// them and the delete manifests onto `out`. Returns (replaced, created, kept) manifests.
    async fn cluster_data_manifests(
        &mut self,
        base: &Table,
        list: &[ManifestFile],
        snapshot_id: i64,
        attempt: u32,
        out: &mut Vec<ManifestFile>,
    ) -> Result<(usize, usize, usize)> {
        let metadata = base.metadata();
        let (mut replaced, mut kept) = (0, 0);
        for manifest in list {
            if manifest.content == ManifestContentType::Data {
                replaced += 1;
            } else {
                out.push(manifest.clone());
                kept += 1;
            }
        }
        let context = self.changes.task_context.clone().unwrap_or_default();
        let per_manifest = manifest_entries_target(metadata)?;
        let mut clustered = super::cluster::Clustered::start(base, list, per_manifest, context)?;
        let mut created = 0;
        while let Some((spec_id, entries)) = clustered.next_chunk().await? {
            let path = self.metadata_path(
                metadata,
                &format!("{}-c{attempt}-{created}.avro", self.commit_uuid),
            );
            self.attempt_files.push(path.clone());
            let mut writer = manifest_writer(base, &path, snapshot_id, spec_id, false)?;
            for (file, sid, seq, file_seq) in entries {
                writer.add_existing_file(file, sid, seq, file_seq).df()?;
            }
            out.push(writer.write_manifest_file().await.df()?);
            created += 1;
        }
        log::debug!(
            "rewrite_manifests: {created} manifests written from {} window(s) of entries",
            clustered.windows
        );
        Ok((replaced, created, kept))
    }

    /// Carries `carried` (the parent's manifests) into `manifests`, rewriting those that list
    /// a removed file: several at a time, each read, decoded and written on its own task, and
    /// taken back in the parent's order. Every task is awaited, so a failed rewrite leaves no
    /// task writing behind the cleanup.
    #[allow(clippy::too_many_arguments)]
    async fn rewrite_manifests(
        &mut self,
        base: &Table,
        carried: &[ManifestFile],
        snapshot_id: i64,
        attempt: u32,
        manifests: &mut Vec<ManifestFile>,
        summary: &mut SnapshotSummaryCollector,
        found: &mut HashSet<String>,
    ) -> Result<()> {
        use futures::StreamExt;
        let paths: Vec<String> = (0..carried.len())
            .map(|index| {
                self.metadata_path(
                    base.metadata(),
                    &format!("{}-r{attempt}-{index}.avro", self.commit_uuid),
                )
            })
            .collect();
        let changes = Arc::clone(&self.changes);
        let jobs = carried.iter().cloned().zip(paths).map(|(manifest, path)| {
            let (base, changes) = (base.clone(), Arc::clone(&changes));
            let written = path.clone();
            async move {
                let job = rewrite_manifest(base, changes, manifest.clone(), written, snapshot_id);
                (manifest, path, crate::io_runtime::spawn(job).await)
            }
        });
        let mut done = futures::stream::iter(jobs).buffered(MANIFEST_REWRITE_CONCURRENCY);
        let metadata = base.metadata();
        let mut first_error = None;
        while let Some((manifest, path, result)) = done.next().await {
            match result {
                Ok(None) => manifests.push(manifest),
                Ok(Some((rewritten, removed))) => {
                    self.attempt_files.push(path);
                    // An error here still lets the other rewrites finish before it is returned.
                    let Some(spec) = metadata.partition_spec_by_id(manifest.partition_spec_id)
                    else {
                        first_error.get_or_insert(DataFusionError::Internal(format!(
                            "unknown partition spec {}",
                            manifest.partition_spec_id
                        )));
                        continue;
                    };
                    for file in &removed {
                        found.insert(removal_name(file));
                        summary.remove_file(file, metadata.current_schema().clone(), spec.clone());
                    }
                    manifests.push(rewritten);
                }
                Err(e) => {
                    // A rewrite that failed may have left part of its file behind.
                    self.attempt_files.push(path);
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Deletes the files written for the last attempt (after a lost compare-and-swap).
    pub async fn cleanup_attempt(&mut self, file_io: &FileIO) {
        for f in self.attempt_files.drain(..) {
            delete_logged(file_io, &f).await;
        }
    }

    /// Deletes every file this producer wrote (after the commit finally failed).
    pub async fn cleanup_all(&mut self, file_io: &FileIO) {
        self.cleanup_attempt(file_io).await;
        for f in self.shared_files.drain(..) {
            delete_logged(file_io, &f).await;
        }
        self.new_manifests = None;
    }
}

/// How many of the parent's manifests a commit rewrites at a time.
const MANIFEST_REWRITE_CONCURRENCY: usize = 4;

/// Rewrites `manifest` to `path` without the entries `changes` removes (kept as deleted
/// entries), when it lists any; returns the new manifest and the files it removed. `None`: the
/// manifest lists none of them and is carried as it is (nothing is written).
async fn rewrite_manifest(
    base: Table,
    changes: Arc<SnapshotChanges>,
    manifest: ManifestFile,
    path: String,
    snapshot_id: i64,
) -> Result<Option<(ManifestFile, Vec<DataFile>)>> {
    let loaded =
        crate::file_planning::load_entries(&manifest, base.metadata(), base.file_io()).await?;
    let hits = loaded
        .iter()
        .any(|e| e.is_alive() && removes(&changes, e.data_file()));
    if !hits {
        return Ok(None);
    }
    let deletes = manifest.content == ManifestContentType::Deletes;
    let mut writer = manifest_writer(
        &base,
        &path,
        snapshot_id,
        manifest.partition_spec_id,
        deletes,
    )?;
    let mut removed = vec![];
    for entry in &loaded {
        if !entry.is_alive() {
            continue;
        }
        let (seq, file_seq) = sequence_numbers(entry)?;
        if removes(&changes, entry.data_file()) {
            removed.push(entry.data_file().clone());
            writer
                .add_delete_file(entry.data_file().clone(), seq, file_seq)
                .df()?;
        } else {
            let sid = entry.snapshot_id().unwrap_or(manifest.added_snapshot_id);
            let status_ok = matches!(
                entry.status(),
                ManifestStatus::Added | ManifestStatus::Existing
            );
            debug_assert!(status_ok);
            writer
                .add_existing_file(entry.data_file().clone(), sid, seq, file_seq)
                .df()?;
        }
    }
    Ok(Some((writer.write_manifest_file().await.df()?, removed)))
}

/// Whether `changes` removes the live entry `file`.
fn removes(changes: &SnapshotChanges, file: &DataFile) -> bool {
    match vector_key(file) {
        Some(key) => changes.removed_deletion_vectors.contains(&key),
        None => changes.removed_files.contains(file.file_path()),
    }
}

/// Fails when a snapshot committed after `validation.base_snapshot_id` (up to `head`) changed
/// what the statement read: new data files its condition may match, or new delete files that may
/// apply to files it read.
async fn validate(base: &Table, head: Option<i64>, validation: &Validation) -> Result<()> {
    let metadata = base.metadata();
    let mut at = head;
    while at != validation.base_snapshot_id {
        let Some(id) = at else {
            return Err(conflict(
                "commit conflict: the snapshot this statement read is no longer an ancestor of \
                 the table's current state (rolled back concurrently); nothing was changed"
                    .into(),
            ));
        };
        let snapshot = metadata.snapshot_by_id(id).ok_or_else(|| {
            DataFusionError::Internal(format!("snapshot {id} is missing from the table"))
        })?;
        let list =
            crate::file_planning::manifest_list(base, &LocationMap::default(), snapshot).await?;
        for manifest in list.iter() {
            if manifest.added_snapshot_id != id {
                continue;
            }
            let loaded =
                crate::file_planning::load_entries(manifest, base.metadata(), base.file_io())
                    .await?;
            for entry in &loaded {
                let file = entry.data_file();
                if entry.status() == ManifestStatus::Deleted
                    && validation.read_files.contains(file.file_path())
                {
                    return Err(conflict(format!(
                        "commit conflict: snapshot {id}, committed concurrently, removed data \
                         file {} that this statement changes; nothing was changed, run the \
                         statement again",
                        file.file_path()
                    )));
                }
                if entry.status() != ManifestStatus::Added {
                    continue;
                }
                let found = match entry.content_type() {
                    DataContentType::Data => (validation.may_match)(
                        metadata,
                        manifest.partition_spec_id,
                        file,
                    )
                    .then_some(
                        "added a data file that may hold rows this statement's condition matches",
                    ),
                    DataContentType::EqualityDeletes if validation.equality_deletes_carry_over => {
                        None
                    }
                    _ => {
                        let unrelated = matches!(
                            file.referenced_data_file(),
                            Some(r) if !validation.read_files.contains(&r)
                        );
                        (!validation.read_files.is_empty() && !unrelated).then_some(
                            "added delete files that may apply to data files this statement rewrites",
                        )
                    }
                };
                if let Some(what) = found {
                    return Err(conflict(format!(
                        "commit conflict: snapshot {id}, committed concurrently, {what} ({}); \
                         nothing was changed, run the statement again",
                        file.file_path()
                    )));
                }
            }
        }
        at = snapshot.parent_snapshot_id();
    }
    Ok(())
}

/// How a removed entry is named in the commit's bookkeeping (and its conflict message).
fn removal_name(file: &DataFile) -> String {
    match vector_key(file) {
        Some((path, offset)) => vector_name(&path, offset),
        None => file.file_path().to_string(),
    }
}

fn vector_name(path: &str, offset: u64) -> String {
    format!("{path} (deletion vector at offset {offset})")
}

/// Deletes a file written for a failed commit; one that cannot be removed is only an orphan.
async fn delete_logged(file_io: &FileIO, path: &str) {
    if let Err(e) = file_io.delete(path).await {
        log::warn!("could not remove {path} after a failed commit: {e}");
    }
}

pub(crate) fn manifest_writer(
    base: &Table,
    path: &str,
    snapshot_id: i64,
    spec_id: i32,
    deletes: bool,
) -> Result<iceberg::spec::ManifestWriter> {
    let metadata = base.metadata();
    let spec = metadata
        .partition_spec_by_id(spec_id)
        .ok_or_else(|| DataFusionError::Internal(format!("unknown partition spec {spec_id}")))?;
    let out = base.file_io().new_output(path).df()?;
    let builder = ManifestWriterBuilder::new(
        out,
        Some(snapshot_id),
        metadata.current_schema().clone(),
        spec.as_ref().clone(),
    );
    Ok(match (metadata.format_version(), deletes) {
        (FormatVersion::V1, _) => builder.build_v1(),
        (FormatVersion::V2, false) => builder.build_v2_data(),
        (FormatVersion::V2, true) => builder.build_v2_deletes(),
        (FormatVersion::V3, false) => builder.build_v3_data(),
        (FormatVersion::V3, true) => builder.build_v3_deletes(),
    })
}

/// A fresh positive snapshot id not used by the table.
pub(crate) fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let id = (rand::random::<u64>() >> 1) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// Adds `total-*` properties: the parent's totals plus what this snapshot added, minus what it
/// removed. Totals are left out when the parent does not carry them (they would be wrong).
fn add_totals(props: &mut HashMap<String, String>, previous: Option<&Summary>) {
    const TOTALS: [(&str, &str, &str); 6] = [
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        ("total-data-files", "added-data-files", "deleted-data-files"),
        (
            "total-delete-files",
            "added-delete-files",
            "removed-delete-files",
        ),
        (
            "total-position-deletes",
            "added-position-deletes",
            "removed-position-deletes",
        ),
        (
            "total-equality-deletes",
            "added-equality-deletes",
            "removed-equality-deletes",
        ),
    ];
    let get = |p: &HashMap<String, String>, k: &str| -> Option<u64> {
        p.get(k).and_then(|v| v.parse::<u64>().ok())
    };
    for (total, added, removed) in TOTALS {
        let prev = match previous {
            None => Some(0),
            Some(s) => get(&s.additional_properties, total),
        };
        if let Some(prev) = prev {
            let value = (prev + get(props, added).unwrap_or(0))
                .saturating_sub(get(props, removed).unwrap_or(0));
            props.insert(total.to_string(), value.to_string());
        }
    }
}

/// Bytes a manifest entry takes, roughly (path, partition, full column metrics).
const MANIFEST_ENTRY_BYTES: usize = 1024;

/// Entries per new manifest: `commit.manifest.target-size-bytes` (8 MiB) over the typical
/// entry size.
pub(crate) fn manifest_entries_target(metadata: &iceberg::spec::TableMetadata) -> Result<usize> {
    let target = match metadata
        .properties()
        .get("commit.manifest.target-size-bytes")
    {
        Some(v) => v.parse::<usize>().map_err(|_| {
            DataFusionError::Configuration(format!(
                "commit.manifest.target-size-bytes must be an integer, got '{v}'"
            ))
        })?,
        None => 8 * 1024 * 1024,
    };
    Ok((target / MANIFEST_ENTRY_BYTES).max(1))
}

/// The change that adds `snapshot` to `base` where `to` says: the head of its branch, required
/// to find the branch at `parent_id` (absent when the branch is new) and the table the same one;
/// or staged, only added.
fn on_target(
    base: &Table,
    snapshot: Snapshot,
    parent_id: Option<i64>,
    changes: &SnapshotChanges,
) -> Result<MetadataChange> {
    let to = &changes.write_to;
    let metadata = base.metadata();
    let location = base.metadata_location().map(str::to_string);
    let mut builder = metadata.clone().into_builder(location);
    if !changes.set_properties.is_empty() {
        builder = builder
            .set_properties(changes.set_properties.clone())
            .df()?;
    }
    let mut requirements = vec![TableRequirement::UuidMatch {
        uuid: metadata.uuid(),
    }];
    let builder = match to {
        WriteTo::Staged(_) => builder.add_snapshot(snapshot).df()?,
        WriteTo::Main | WriteTo::Branch(_) => {
            let branch = to.branch_name();
            // A new branch starts at `main`'s head: it must still not exist.
            let found = metadata.snapshot_for_ref(branch).map(|s| s.snapshot_id());
            requirements.push(TableRequirement::RefSnapshotIdMatch {
                r#ref: branch.to_string(),
                snapshot_id: found.and(parent_id),
            });
            builder.set_branch_snapshot(snapshot, branch).df()?
        }
    };
    let result = builder.build().df()?;
    Ok(MetadataChange {
        base: base.clone(),
        metadata: result.metadata,
        updates: result.changes,
        requirements,
    })
}

#[cfg(test)]
mod tests {
    use iceberg::spec::Operation;

    use super::*;

    #[test]
    fn totals_accumulate_and_skip_unknown() {
        let mut props = HashMap::from([
            ("added-records".to_string(), "10".to_string()),
            ("added-data-files".to_string(), "2".to_string()),
        ]);
        let prev = Summary {
            operation: Operation::Append,
            additional_properties: HashMap::from([
                ("total-records".to_string(), "5".to_string()),
                ("total-data-files".to_string(), "1".to_string()),
            ]),
        };
        add_totals(&mut props, Some(&prev));
        assert_eq!(props["total-records"], "15");
        assert_eq!(props["total-data-files"], "3");
        assert!(!props.contains_key("total-files-size"));

        let mut first = HashMap::from([("added-records".to_string(), "4".to_string())]);
        add_totals(&mut first, None);
        assert_eq!(first["total-records"], "4");
        assert_eq!(first["total-delete-files"], "0");
    }
}
