//! `expire_snapshots`: forget old snapshots, then delete the files only they reached.
//!
//! ```text
//!  choose   keep every ref's head, and along each branch the `retain_last` newest ancestors and
//!           those newer than `older_than`; expire the other snapshots older than `older_than`
//!           and any given by id (never a ref's head)
//!  commit   metadata only: the snapshots and their statistics removed (compare-and-swap, again
//!           on a concurrent commit)
//!  clean    files the expired snapshots reach (every manifest entry, manifests, manifest
//!           lists, statistics) ANTI JOIN files the remaining snapshots reach (live entries,
//!           manifests, lists, statistics), sorted and merge-joined in bounded memory ─► deleted
//! ```
//! A data file deleted by a snapshot that stays is reached by no remaining snapshot (its entry
//! there is a deletion), so it goes with the last snapshot that read it.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::UInt8Type;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use futures::StreamExt;
use iceberg::spec::{SnapshotRef, TableMetadata};
use iceberg::table::Table;
use iceberg::TableIdent;
use object_store::ObjectStoreExt;

use super::files::{self, FileKind, ReachableFiles};
use crate::commit::{CommitResult, MetadataChange, MetadataStore};
use crate::error::IcebergResultExt;

/// What an expiry did, in Spark's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpireSnapshotsResult {
    /// Snapshots removed from the table's metadata.
    pub expired_snapshots_count: u64,
    /// Data files deleted.
    pub deleted_data_files_count: u64,
    /// Position delete files (and Puffin files of deletion vectors) deleted.
    pub deleted_position_delete_files_count: u64,
    /// Equality delete files deleted.
    pub deleted_equality_delete_files_count: u64,
    /// Manifests deleted.
    pub deleted_manifest_files_count: u64,
    /// Manifest lists deleted.
    pub deleted_manifest_lists_count: u64,
    /// Statistics files deleted.
    pub deleted_statistics_files_count: u64,
    /// Files that could not be deleted (each logged; they are orphans now).
    pub failed_deletes_count: u64,
}

impl ExpireSnapshotsResult {
    pub(crate) fn count(&mut self, kind: FileKind) {
        match kind {
            FileKind::Data => self.deleted_data_files_count += 1,
            FileKind::PositionDeletes => self.deleted_position_delete_files_count += 1,
            FileKind::EqualityDeletes => self.deleted_equality_delete_files_count += 1,
            FileKind::Manifest => self.deleted_manifest_files_count += 1,
            FileKind::ManifestList => self.deleted_manifest_lists_count += 1,
            FileKind::Statistics => self.deleted_statistics_files_count += 1,
            FileKind::Metadata | FileKind::Other => {}
        }
    }
}

/// Expires snapshots of a table: Spark's `expire_snapshots`.
#[derive(Debug, Clone)]
pub struct ExpireSnapshots {
    store: Arc<dyn MetadataStore>,
    ident: TableIdent,
    older_than_ms: Option<i64>,
    retain_last: Option<usize>,
    snapshot_ids: Vec<i64>,
    clean_files: bool,
    max_concurrent_deletes: usize,
}

impl ExpireSnapshots {
    /// An expiry of the table `ident` in `store` with the table's defaults
    /// (`history.expire.max-snapshot-age-ms`, 5 days; `history.expire.min-snapshots-to-keep`, 1).
    pub fn new(store: Arc<dyn MetadataStore>, ident: TableIdent) -> Self {
        Self {
            store,
            ident,
            older_than_ms: None,
            retain_last: None,
            snapshot_ids: vec![],
            clean_files: true,
            max_concurrent_deletes: 8,
        }
    }

    /// Expires snapshots committed before this time (milliseconds since the epoch, UTC).
    pub fn older_than_ms(mut self, ms: i64) -> Self {
        self.older_than_ms = Some(ms);
        self
    }

    /// Keeps at least this many of the newest ancestors of each branch, however old.
    pub fn retain_last(mut self, n: usize) -> Self {
        self.retain_last = Some(n);
        self
    }

    /// Expires this snapshot too, whatever its age (not the head of a branch or tag).
    pub fn expire_snapshot_id(mut self, id: i64) -> Self {
        self.snapshot_ids.push(id);
        self
    }

    /// Whether to delete the files only expired snapshots reached (default true).
    pub fn clean_files(mut self, clean: bool) -> Self {
        self.clean_files = clean;
        self
    }

    /// How many files are deleted at the same time (default 8).
    pub fn max_concurrent_deletes(mut self, n: usize) -> Self {
        self.max_concurrent_deletes = n.max(1);
        self
    }

    /// The ids to expire from `metadata` at time `now_ms`.
    fn choose(&self, metadata: &TableMetadata, now_ms: i64) -> Result<Vec<i64>> {
        let props = metadata.properties();
        let prop = |key: &str, default: i64| -> Result<i64> {
            match props.get(key) {
                None => Ok(default),
                Some(v) => v.trim().parse().map_err(|_| {
                    DataFusionError::Plan(format!(
                        "table property {key} must be a number, got '{v}'"
                    ))
                }),
            }
        };
        let older_than = match self.older_than_ms {
            Some(ms) => ms,
            None => now_ms - prop("history.expire.max-snapshot-age-ms", 5 * 24 * 3600 * 1000)?,
        };
        let retain_last = match self.retain_last {
            Some(n) => n,
            None => prop("history.expire.min-snapshots-to-keep", 1)?.max(1) as usize,
        };
        if retain_last < 1 {
            return Err(DataFusionError::Plan(
                "expire_snapshots: retain_last must be at least 1".into(),
            ));
        }
        let mut retained: HashSet<i64> = HashSet::new();
        let refs = crate::commit::refs::refs(metadata)?;
        let heads: HashSet<i64> = refs.iter().map(|r| r.snapshot_id).collect();
        for r in &refs {
            retained.insert(r.snapshot_id);
            if !r.branch {
                continue;
            }
            // A branch's own settings win over the defaults.
            let keep = r
                .min_snapshots_to_keep
                .map_or(retain_last, |n| n.max(1) as usize);
            let older_than = r.max_snapshot_age_ms.map_or(older_than, |age| now_ms - age);
            for (kept, s) in
                crate::commit::refs::ancestors(metadata, Some(r.snapshot_id)).enumerate()
            {
                if kept >= keep && s.timestamp_ms() < older_than {
                    break;
                }
                retained.insert(s.snapshot_id());
            }
        }
        for id in &self.snapshot_ids {
            if metadata.snapshot_by_id(*id).is_none() {
                return Err(DataFusionError::Plan(format!(
                    "expire_snapshots: table '{}' has no snapshot {id}",
                    self.ident
                )));
            }
            if heads.contains(id) {
                return Err(DataFusionError::Plan(format!(
                    "expire_snapshots: snapshot {id} is the head of a branch or tag of '{}'; \
                     it cannot expire",
                    self.ident
                )));
            }
        }
        let mut expired: Vec<i64> = metadata
            .snapshots()
            .filter(|s| {
                let id = s.snapshot_id();
                self.snapshot_ids.contains(&id)
                    || (!retained.contains(&id) && s.timestamp_ms() < older_than)
            })
            .map(|s| s.snapshot_id())
            .collect();
        expired.sort();
        Ok(expired)
    }

    /// Expires the snapshots and deletes the files only they reached.
    pub async fn execute(self, state: &SessionState) -> Result<ExpireSnapshotsResult> {
        const ATTEMPTS: usize = 4;
        let now = chrono::Utc::now().timestamp_millis();
        for _ in 0..ATTEMPTS {
            let table = Arc::clone(&self.store).load(&self.ident).await?;
            super::refuse_without_gc(&table, "expire snapshots")?;
            let metadata = table.metadata();
            let expired_ids = self.choose(metadata, now)?;
            if expired_ids.is_empty() {
                return Ok(ExpireSnapshotsResult::default());
            }
            let expired: Vec<SnapshotRef> = expired_ids
                .iter()
                .filter_map(|id| metadata.snapshot_by_id(*id).cloned())
                .collect();
            let mut builder = metadata
                .clone()
                .into_builder(table.metadata_location().map(str::to_string))
                .remove_snapshots(&expired_ids);
            for id in &expired_ids {
                builder = builder
                    .remove_statistics(*id)
                    .remove_partition_statistics(*id);
            }
            let built = builder.build().df()?;
            let change = MetadataChange {
                base: table.clone(),
                metadata: built.metadata,
                updates: built.changes,
                requirements: vec![
                    iceberg::TableRequirement::UuidMatch {
                        uuid: metadata.uuid(),
                    },
                    iceberg::TableRequirement::RefSnapshotIdMatch {
                        r#ref: crate::commit::MAIN_BRANCH.to_string(),
                        snapshot_id: metadata.current_snapshot_id(),
                    },
                ],
            };
            match Arc::clone(&self.store)
                .commit_metadata(&self.ident, change)
                .await?
            {
                CommitResult::Conflict => continue,
                CommitResult::Committed(_) => {}
            }
            let mut result = ExpireSnapshotsResult {
                expired_snapshots_count: expired.len() as u64,
                ..Default::default()
            };
            if self.clean_files {
                let after = Arc::clone(&self.store).load(&self.ident).await?;
                self.clean(state, &table, expired, &after, &mut result)
                    .await?;
            }
            return Ok(result);
        }
        Err(DataFusionError::Execution(format!(
            "expire_snapshots on '{}' lost to concurrent commits {ATTEMPTS} times; nothing was \
             changed",
            self.ident
        )))
    }

    /// Deletes what `expired` (of `before`) reached and no snapshot of `after` reaches.
    async fn clean(
        &self,
        state: &SessionState,
        before: &Table,
        expired: Vec<SnapshotRef>,
        after: &Table,
        result: &mut ExpireSnapshotsResult,
    ) -> Result<()> {
        let expired_ids: HashSet<i64> = expired.iter().map(|s| s.snapshot_id()).collect();
        let candidates = files::source(Arc::new(ReachableFiles {
            table: before.clone(),
            snapshots: expired,
            live_only: false,
            extra: files::statistics_files(before.metadata(), Some(&expired_ids)),
        }))?;
        let reachable = files::source(Arc::new(ReachableFiles {
            table: after.clone(),
            snapshots: after.metadata().snapshots().cloned().collect(),
            live_only: true,
            extra: files::statistics_files(after.metadata(), None),
        }))?;
        let gone = files::unreachable(candidates, reachable, state.task_ctx())?;
        delete_all(
            &self.store,
            gone,
            self.max_concurrent_deletes,
            |_, kind, deleted, r: &mut ExpireSnapshotsResult| match deleted {
                true => r.count(kind),
                false => r.failed_deletes_count += 1,
            },
            result,
        )
        .await
    }
}

/// Deletes every file of `files` (path, kind batches), `concurrency` at a time, reporting
/// each (path, kind, deleted or not) to `tally`. A file already gone counts as deleted.
pub(crate) async fn delete_all<R>(
    store: &Arc<dyn MetadataStore>,
    mut files: datafusion::physical_plan::SendableRecordBatchStream,
    concurrency: usize,
    tally: impl Fn(&str, FileKind, bool, &mut R),
    result: &mut R,
) -> Result<()> {
    let stores = Arc::clone(store.object_stores());
    while let Some(batch) = files.next().await {
        for (path, kind, deleted) in delete_batch(&stores, &batch?, concurrency).await {
            tally(&path, kind, deleted, result);
        }
    }
    Ok(())
}

/// Deletes the files of one (path, kind) batch, `concurrency` at a time: each file with its
/// kind and whether it is gone (a failure is logged and reported as not deleted).
pub(crate) async fn delete_batch(
    stores: &Arc<crate::storage::ObjectStores>,
    batch: &RecordBatch,
    concurrency: usize,
) -> Vec<(String, FileKind, bool)> {
    let paths = batch.column(0).as_string::<i32>();
    let kinds = batch.column(1).as_primitive::<UInt8Type>();
    let jobs: Vec<(String, FileKind)> = (0..batch.num_rows())
        .map(|i| {
            (
                paths.value(i).to_string(),
                FileKind::from_u8(kinds.value(i)),
            )
        })
        .collect();
    futures::stream::iter(jobs)
        .map(|(path, kind)| {
            let stores = Arc::clone(stores);
            async move {
                let deleted = match delete_one(&stores, &path).await {
                    Ok(()) => true,
                    Err(e) => {
                        log::warn!("could not delete {path}: {e}");
                        false
                    }
                };
                (path, kind, deleted)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

async fn delete_one(stores: &Arc<crate::storage::ObjectStores>, path: &str) -> Result<()> {
    let located = crate::storage::locate(path)?;
    let store = stores.store(&located.url)?;
    match store.delete(&located.path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(DataFusionError::External(Box::new(e))),
    }
}
