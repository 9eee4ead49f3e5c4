//! `rewrite_position_delete_files`: one delete file per data file, and no dangling deletes.
//!
//! ```text
//!  plan   every data file with position deletes ─► chosen when it has several delete files, a
//!         partition-scoped one, a v2 file on a v3 table, or always with rewrite-all; a chosen
//!         file pulls in every file a partition-scoped delete file it has applies to (so that
//!         delete file can go)
//!  write  per chosen data file: its positions from all its delete files ─► one file-scoped
//!         position delete file (v2) or deletion vector (v3)
//!  commit `replace`: adds those, removes what they replace, the partition-scoped files whose
//!         every target was rewritten, and dangling delete files (that apply to no data file)
//! ```
//! Rows read the same before and after; a concurrent commit that adds deletes for a chosen
//! data file or removes it makes the rewrite fail, changing nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use futures::StreamExt;
use iceberg::spec::{DataContentType, FormatVersion, Operation, SnapshotRef};
use iceberg::table::Table;
use iceberg::TableIdent;

use crate::commit::commit_or_clean_up;
use crate::commit::MetadataStore;
use crate::commit::{RemovedDeletes, SnapshotChanges, Validation};
use crate::file_planning::{plan_files_pruned, DeleteFileRef, FileFilter, ScanFiles};
use crate::physical_plan::write::DeleteWriter;
use crate::physical_plan::write::WrittenFiles;
use crate::storage::location::LocationMap;
use crate::IcebergOptions;

/// A delete file's identity, owned ([`DeleteFileRef::identity`]).
type DeleteKey = (String, Option<u64>);

fn key(d: &DeleteFileRef) -> DeleteKey {
    let (path, offset) = d.identity();
    (path.to_string(), offset)
}

/// The delete files of `snapshot` that apply to none of its data files (`scan`: its data
/// files, planned with their deletes).
pub(crate) async fn dangling_deletes(
    table: &Table,
    snapshot: &SnapshotRef,
    scan: &ScanFiles,
) -> Result<Vec<Arc<DeleteFileRef>>> {
    let applying: HashSet<DeleteKey> = scan
        .files
        .iter()
        .flat_map(|f| f.position_deletes.iter().map(|d| key(d)))
        .chain(scan.equality_deletes.iter().map(|d| key(d)))
        .collect();
    Ok(
        crate::file_planning::listed_delete_files(table, &LocationMap::default(), snapshot)
            .await?
            .into_iter()
            .filter(|d| !applying.contains(&key(d)))
            .collect(),
    )
}

/// What a rewrite of position deletes did, in Spark's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewritePositionDeleteFilesResult {
    /// Delete files (each deletion vector counts as one) removed.
    pub rewritten_delete_files_count: u64,
    /// Delete files (or deletion vectors) added.
    pub added_delete_files_count: u64,
    /// Bytes of the delete files removed (a vector's blob length).
    pub rewritten_bytes_count: u64,
    /// Bytes of the delete files added.
    pub added_bytes_count: u64,
    /// Of the removed, those that applied to no data file.
    pub dangling_delete_files_count: u64,
}

/// Merges each data file's position deletes into one file and drops dangling delete files:
/// Spark's `rewrite_position_delete_files`.
#[derive(Debug, Clone)]
pub struct RewritePositionDeleteFiles {
    store: Arc<dyn MetadataStore>,
    ident: TableIdent,
    options: BTreeMap<String, String>,
}

impl RewritePositionDeleteFiles {
    /// A rewrite of the table `ident` in `store`.
    pub fn new(store: Arc<dyn MetadataStore>, ident: TableIdent) -> Self {
        Self {
            store,
            ident,
            options: BTreeMap::new(),
        }
    }

    /// Sets an option: `rewrite-all` (merge every data file's deletes, even a single file),
    /// `max-concurrent-file-group-rewrites` (data files written at a time, default 8).
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }

    /// The options: (`rewrite-all`, `max-concurrent-file-group-rewrites`).
    fn options(&self) -> Result<(bool, usize)> {
        let mut rewrite_all = false;
        let mut concurrency = 8usize;
        for (k, v) in &self.options {
            match k.as_str() {
                "rewrite-all" => {
                    rewrite_all = match v.trim().to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(DataFusionError::Plan(format!(
                                "rewrite_position_delete_files option 'rewrite-all' must be \
                                 'true' or 'false', got '{v}'"
                            )))
                        }
                    }
                }
                "max-concurrent-file-group-rewrites" => {
                    concurrency = v.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        DataFusionError::Plan(format!(
                            "rewrite_position_delete_files option '{k}' must be a number \
                             greater than 0, got '{v}'"
                        ))
                    })?
                }
                other => {
                    return Err(DataFusionError::Plan(format!(
                        "rewrite_position_delete_files has no option '{other}' (options: \
                         rewrite-all, max-concurrent-file-group-rewrites)"
                    )))
                }
            }
        }
        Ok((rewrite_all, concurrency))
    }

    /// Rewrites and commits.
    pub async fn execute(self, state: &SessionState) -> Result<RewritePositionDeleteFilesResult> {
        let (rewrite_all, concurrency) = self.options()?;
        let table = Arc::clone(&self.store).load(&self.ident).await?;
        let metadata = table.metadata();
        let Some(snapshot) = metadata.current_snapshot().cloned() else {
            return Ok(RewritePositionDeleteFilesResult::default());
        };
        if metadata.format_version() == FormatVersion::V1 {
            return Ok(RewritePositionDeleteFilesResult::default());
        }
        let v3 = metadata.format_version() >= FormatVersion::V3;
        let threshold = IcebergOptions::from_config(state.config_options()).planning_threshold;
        let scan = plan_files_pruned(
            &table,
            &LocationMap::default(),
            &snapshot,
            &FileFilter::default(),
            threshold,
        )
        .await?;
        let choice = Choice::of(&scan, v3, rewrite_all);
        let dangling = dangling_deletes(&table, &snapshot, &scan).await?;
        if choice.chosen.is_empty() && dangling.is_empty() {
            return Ok(RewritePositionDeleteFilesResult::default());
        }

        let files: Vec<_> = choice
            .chosen
            .iter()
            .map(|&i| scan.files[i].clone())
            .collect();
        let writer = DeleteWriter::new(&table, &LocationMap::default(), &files, &state.task_ctx())?;
        let written = WrittenFiles::default();
        let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
        let shared = written.clone();
        let outputs: Vec<Result<_>> = futures::stream::iter(paths.into_iter().map(move |path| {
            let (writer, written) = (writer.clone(), shared.clone());
            async move { writer.merge_all(&path, &written).await }
        }))
        .buffer_unordered(concurrency)
        .collect()
        .await;
        let mut added = vec![];
        let mut removed = RemovedDeletes::default();
        for o in outputs {
            match o {
                Ok((file, replaces)) => {
                    added.extend(file);
                    removed.extend(replaces);
                }
                Err(e) => {
                    written.remove_all(table.file_io()).await;
                    return Err(e.context(format!(
                        "rewrite_position_delete_files on table '{}' failed; nothing was changed",
                        self.ident
                    )));
                }
            }
        }
        let chosen_paths: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let mut result = RewritePositionDeleteFilesResult::default();
        for d in choice.removed(&scan, &files, &dangling) {
            removed.insert(&d);
            result.rewritten_delete_files_count += 1;
            result.rewritten_bytes_count += match d.deletion_vector {
                Some(blob) => blob.length,
                None => d.size,
            };
        }
        result.dangling_delete_files_count = dangling.len() as u64;
        result.added_delete_files_count = added.len() as u64;
        result.added_bytes_count = added
            .iter()
            .map(|f| match f.file.content_size_in_bytes() {
                Some(n) => n as u64,
                None => f.file.file_size_in_bytes(),
            })
            .sum();
        if added
            .iter()
            .any(|f| f.file.content_type() != DataContentType::PositionDeletes)
        {
            return Err(DataFusionError::Internal(
                "a position delete rewrite wrote something else".into(),
            ));
        }
        let changes = SnapshotChanges {
            operation: Operation::Replace,
            added_data_files: vec![],
            added_delete_files: added,
            removed_files: removed.files,
            removed_deletion_vectors: removed.vectors,
            summary_properties: HashMap::new(),
            validation: Some(Validation {
                base_snapshot_id: Some(snapshot.snapshot_id()),
                may_match: Arc::new(|_, _, _| false),
                read_files: chosen_paths.iter().map(|p| p.to_string()).collect(),
                equality_deletes_carry_over: true,
            }),
            data_sequence_number: None,
            rewrite_data_manifests: false,
            task_context: None,
            write_to: crate::commit::WriteTo::Main,
            ..Default::default()
        };
        commit_or_clean_up(&self.store, &table, changes, &written)
            .await
            .map_err(|e| {
                e.context(format!(
                    "rewrite_position_delete_files on table '{}' did not commit",
                    self.ident
                ))
            })?;
        Ok(result)
    }
}

/// The data files whose deletes a rewrite merges (indexes into the planned files, ascending),
/// and the data files each partition-scoped delete file applies to.
struct Choice {
    chosen: Vec<usize>,
    targets: HashMap<DeleteKey, Vec<usize>>,
}

impl Choice {
    /// The files with several delete files, a partition-scoped one, a v2 file on a v3 table
    /// (or any, with `rewrite_all`), and every target of a partition-scoped delete file of
    /// theirs (so that file can go).
    fn of(scan: &ScanFiles, v3: bool, rewrite_all: bool) -> Self {
        let mut targets: HashMap<DeleteKey, Vec<usize>> = HashMap::new();
        for (i, f) in scan.files.iter().enumerate() {
            for d in &f.position_deletes {
                if d.referenced_data_file.as_deref() != Some(f.path.as_str()) {
                    targets.entry(key(d)).or_default().push(i);
                }
            }
        }
        let mut chosen: HashSet<usize> = scan
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                let ds = &f.position_deletes;
                !ds.is_empty()
                    && (rewrite_all
                        || ds.len() > 1
                        || ds
                            .iter()
                            .any(|d| d.referenced_data_file.as_deref() != Some(f.path.as_str()))
                        || (v3 && ds.iter().any(|d| d.deletion_vector.is_none())))
            })
            .map(|(i, _)| i)
            .collect();
        // Pull in every target of the partition-scoped files of chosen data files.
        loop {
            let before = chosen.len();
            let more: Vec<usize> = chosen
                .iter()
                .flat_map(|&i| scan.files[i].position_deletes.iter())
                .filter_map(|d| targets.get(&key(d)))
                .flatten()
                .copied()
                .collect();
            chosen.extend(more);
            if chosen.len() == before {
                break;
            }
        }
        let mut chosen: Vec<usize> = chosen.into_iter().collect();
        chosen.sort();
        Self { chosen, targets }
    }

    /// The delete files the rewrite removes: the file-scoped ones of the rewritten data files
    /// (`files`), the partition-scoped ones whose every target was rewritten, and `dangling`.
    fn removed(
        &self,
        scan: &ScanFiles,
        files: &[crate::file_planning::PlannedFile],
        dangling: &[Arc<DeleteFileRef>],
    ) -> Vec<Arc<DeleteFileRef>> {
        let chosen_paths: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let mut removed: HashMap<DeleteKey, Arc<DeleteFileRef>> = HashMap::new();
        for f in files {
            for d in &f.position_deletes {
                let k = key(d);
                let file_scoped = d.referenced_data_file.as_deref() == Some(f.path.as_str());
                let all_targets_rewritten = self.targets.get(&k).is_none_or(|t| {
                    t.iter()
                        .all(|&i| chosen_paths.contains(scan.files[i].path.as_str()))
                });
                if file_scoped || all_targets_rewritten {
                    removed.insert(k, Arc::clone(d));
                }
            }
        }
        for d in dangling {
            removed.insert(key(d), Arc::clone(d));
        }
        removed.into_values().collect()
    }
}
