//! `remove_orphan_files`: delete files under a table's location that no snapshot and no
//! metadata file of the table reaches, and that are old enough that no commit in flight may
//! still be about to add them.
//!
//! ```text
//!  listing of the location (last modified before older_than, default 3 days ago)
//!     ANTI JOIN  every file any snapshot reaches (all manifest entries, manifests, lists),
//!                metadata files (current and logged), statistics, version-hint.text
//!     sorted and merge-joined in bounded memory ─► deleted (or only listed: dry_run)
//! ```

use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use iceberg::TableIdent;

use super::files::{self, canonical, FileBatcher, FileKind, ReachableFiles};
use crate::catalog::MetadataStore;

/// What an orphan removal found (and deleted, unless a dry run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoveOrphanFilesResult {
    /// The orphan files, in the canonical form of their location.
    pub orphan_file_locations: Vec<String>,
    /// Files under the location that were listed (before the age filter).
    pub listed_files_count: u64,
    /// Orphans that could not be deleted (each logged).
    pub failed_deletes_count: u64,
}

/// Finds and deletes orphan files of a table: Spark's `remove_orphan_files`.
#[derive(Debug, Clone)]
pub struct RemoveOrphanFiles {
    store: Arc<dyn MetadataStore>,
    ident: TableIdent,
    older_than_ms: Option<i64>,
    location: Option<String>,
    dry_run: bool,
    max_concurrent_deletes: usize,
}

impl RemoveOrphanFiles {
    /// An orphan removal for the table `ident` in `store`: its whole location, files older
    /// than 3 days.
    pub fn new(store: Arc<dyn MetadataStore>, ident: TableIdent) -> Self {
        Self {
            store,
            ident,
            older_than_ms: None,
            location: None,
            dry_run: false,
            max_concurrent_deletes: 8,
        }
    }

    /// Only files last modified before this time (milliseconds since the epoch) are orphans.
    pub fn older_than_ms(mut self, ms: i64) -> Self {
        self.older_than_ms = Some(ms);
        self
    }

    /// Looks only under this location (inside the table's location).
    pub fn location(mut self, location: impl Into<String>) -> Self {
        self.location = Some(location.into());
        self
    }

    /// Finds the orphans without deleting them.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// How many files are deleted at the same time (default 8).
    pub fn max_concurrent_deletes(mut self, n: usize) -> Self {
        self.max_concurrent_deletes = n.max(1);
        self
    }

    /// Finds the orphans and, unless a dry run, deletes them.
    pub async fn execute(self, state: &SessionState) -> Result<RemoveOrphanFilesResult> {
        let table = Arc::clone(&self.store).load(&self.ident).await?;
        let metadata = table.metadata();
        let table_location = canonical(metadata.location())?;
        let location = match &self.location {
            None => table_location.clone(),
            Some(l) => {
                let l = canonical(l)?;
                let inside = l == table_location
                    || l.starts_with(&format!("{}/", table_location.trim_end_matches('/')));
                if !inside {
                    return Err(DataFusionError::Plan(format!(
                        "remove_orphan_files: location '{l}' is not inside the location of \
                         table '{}' ({table_location})",
                        self.ident
                    )));
                }
                l
            }
        };
        let older_than = self
            .older_than_ms
            .unwrap_or_else(|| chrono::Utc::now().timestamp_millis() - 3 * 24 * 3600 * 1000);

        let mut extra: Vec<(String, FileKind)> = vec![];
        if let Some(current) = table.metadata_location() {
            extra.push((current.to_string(), FileKind::Metadata));
        }
        for log in metadata.metadata_log() {
            extra.push((log.metadata_file.clone(), FileKind::Metadata));
        }
        extra.push((
            format!(
                "{}/metadata/version-hint.text",
                metadata.location().trim_end_matches('/')
            ),
            FileKind::Metadata,
        ));
        extra.extend(files::statistics_files(metadata, None));
        let reachable = files::source(Arc::new(ReachableFiles {
            table: table.clone(),
            snapshots: metadata.snapshots().cloned().collect(),
            live_only: false,
            extra,
        }))?;
        let listing = Listing {
            stores: Arc::clone(self.store.object_stores()),
            location,
            older_than,
            listed: Arc::default(),
        };
        let listed = Arc::clone(&listing.listed);
        let candidates = files::source(Arc::new(listing))?;
        let mut orphans = files::unreachable(candidates, reachable, state.task_ctx())?;

        let mut result = RemoveOrphanFilesResult::default();
        if self.dry_run {
            while let Some(batch) = orphans.next().await {
                push_paths(&batch?, &mut result.orphan_file_locations);
            }
        } else {
            super::expire_snapshots::delete_all(
                &self.store,
                orphans,
                self.max_concurrent_deletes,
                |path, _, deleted, r: &mut RemoveOrphanFilesResult| {
                    r.orphan_file_locations.push(path.to_string());
                    if !deleted {
                        r.failed_deletes_count += 1
                    }
                },
                &mut result,
            )
            .await?;
        }
        result.listed_files_count = listed.load(std::sync::atomic::Ordering::Relaxed);
        Ok(result)
    }
}

fn push_paths(batch: &RecordBatch, out: &mut Vec<String>) {
    let paths = batch.column(0).as_string::<i32>();
    out.extend((0..paths.len()).map(|i| paths.value(i).to_string()));
}

/// The files under a location last modified before a time, as a stream of (path, kind) batches.
#[derive(Debug)]
struct Listing {
    stores: Arc<crate::storage::ObjectStores>,
    /// Canonical.
    location: String,
    older_than: i64,
    listed: Arc<std::sync::atomic::AtomicU64>,
}

impl PartitionStream for Listing {
    fn schema(&self) -> &arrow::datatypes::SchemaRef {
        static SCHEMA: std::sync::OnceLock<arrow::datatypes::SchemaRef> =
            std::sync::OnceLock::new();
        SCHEMA.get_or_init(files::files_schema)
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStream::builder(files::files_schema(), 2);
        let tx = builder.tx();
        let stores = Arc::clone(&self.stores);
        let location = self.location.clone();
        let older_than = self.older_than;
        let listed = Arc::clone(&self.listed);
        builder.spawn(async move {
            let located = crate::storage::locate(&location)?;
            let store = stores.store(&located.url)?;
            let url = located.url.as_str().to_string();
            let mut listing = store.list(Some(&located.path));
            let mut out = FileBatcher::new();
            while let Some(meta) = listing.next().await {
                let meta = meta.map_err(|e| DataFusionError::External(Box::new(e)))?;
                listed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if meta.last_modified.timestamp_millis() >= older_than {
                    continue;
                }
                let path = format!("{url}{}", meta.location);
                if let Some(b) = out.push(&path, FileKind::Other)? {
                    if tx.send(Ok(b)).await.is_err() {
                        return Ok(());
                    }
                }
            }
            if !out.is_empty() {
                let _ = tx.send(Ok(out.finish()?)).await;
            }
            Ok(())
        });
        builder.build()
    }
}
