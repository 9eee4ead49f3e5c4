//! `remove_orphan_files`: delete files under a table's location that no snapshot and no
//! metadata file of the table reaches, and that are old enough that no commit in flight may
//! still be about to add them.
//!
//! ```text
//!  listing of the location (last modified before older_than, default 3 days ago)
//!     ANTI JOIN  every file any snapshot reaches (all manifest entries, manifests, lists),
//!                metadata files (current and logged), statistics, version-hint.text
//!     sorted and merge-joined in bounded memory ─► deleted (or only listed: dry_run) a batch
//!                                                  at a time, as the orphans are read
//! ```

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::{RecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::{RecordBatchReceiverStream, RecordBatchStreamAdapter};
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{Stream, StreamExt};
use iceberg::TableIdent;

use super::expire_snapshots;
use super::files::{self, canonical, FileBatcher, FileKind, ReachableFiles};
use crate::commit::MetadataStore;

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

    /// Finds the orphans and, unless a dry run, deletes them. The result holds every orphan's
    /// location: for tables that may have millions, [`Self::execute_stream`] hands them over a
    /// batch at a time instead.
    pub async fn execute(self, state: &SessionState) -> Result<RemoveOrphanFilesResult> {
        let mut stream = self.execute_stream(state.task_ctx()).await?;
        let mut result = RemoveOrphanFilesResult::default();
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let paths = batch.column(0).as_string::<i32>();
            result
                .orphan_file_locations
                .extend((0..paths.len()).map(|i| paths.value(i).to_string()));
        }
        result.listed_files_count = stream.listed_files_count();
        result.failed_deletes_count = stream.failed_deletes_count();
        Ok(result)
    }

    /// Checks the call: the table loads and the location is inside its location. Nothing is
    /// listed or deleted.
    pub async fn validate(&self) -> Result<()> {
        let table = Arc::clone(&self.store).load(&self.ident).await?;
        self.location_in(&table).map(|_| ())
    }

    /// The orphans as a stream of batches of one column, `orphan_file_location`, in path order:
    /// each batch is deleted (unless a dry run) before it is handed over, and the next is not
    /// deleted until it is asked for. The anti-join below spills, so memory stays bounded
    /// however many files the location holds and however many are orphans.
    pub async fn execute_stream(
        self,
        context: Arc<TaskContext>,
    ) -> Result<RemoveOrphanFilesStream> {
        let table = Arc::clone(&self.store).load(&self.ident).await?;
        let location = self.location_in(&table)?;
        let metadata = table.metadata();
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
        let counts = Arc::new(OrphanCounts::default());
        let listing = Listing {
            stores: Arc::clone(self.store.object_stores()),
            location,
            older_than,
            counts: Arc::clone(&counts),
        };
        let candidates = files::source(Arc::new(listing))?;
        let orphans = files::unreachable(candidates, reachable, context)?;

        let stores = Arc::clone(self.store.object_stores());
        let concurrency = self.max_concurrent_deletes;
        let dry_run = self.dry_run;
        let failed = Arc::clone(&counts);
        let out = orphans.then(move |batch| {
            let stores = Arc::clone(&stores);
            let failed = Arc::clone(&failed);
            async move {
                let batch = batch?;
                if !dry_run {
                    let outcomes =
                        expire_snapshots::delete_batch(&stores, &batch, concurrency).await;
                    let failures = outcomes.iter().filter(|(_, _, deleted)| !deleted).count();
                    failed
                        .failed_deletes
                        .fetch_add(failures as u64, Ordering::Relaxed);
                }
                RecordBatch::try_new(orphans_schema(), vec![Arc::clone(batch.column(0))])
                    .map_err(DataFusionError::from)
            }
        });
        Ok(RemoveOrphanFilesStream {
            inner: Box::pin(RecordBatchStreamAdapter::new(orphans_schema(), out)),
            counts,
        })
    }

    /// The canonical location to look under: the table's, or the one given when it is inside.
    fn location_in(&self, table: &iceberg::table::Table) -> Result<String> {
        super::refuse_without_gc(table, "delete orphan files")?;
        let table_location = canonical(table.metadata().location())?;
        let Some(l) = &self.location else {
            return Ok(table_location);
        };
        let l = canonical(l)?;
        let inside = l == table_location
            || l.starts_with(&format!("{}/", table_location.trim_end_matches('/')));
        if !inside {
            return Err(DataFusionError::Plan(format!(
                "remove_orphan_files: location '{l}' is not inside the location of table \
                 '{}' ({table_location})",
                self.ident
            )));
        }
        Ok(l)
    }
}

/// The schema of the orphans an orphan removal hands over: Spark's result column.
pub(crate) fn orphans_schema() -> SchemaRef {
    static SCHEMA: std::sync::OnceLock<SchemaRef> = std::sync::OnceLock::new();
    Arc::clone(SCHEMA.get_or_init(|| {
        Arc::new(Schema::new(vec![Field::new(
            "orphan_file_location",
            DataType::Utf8,
            false,
        )]))
    }))
}

/// What an orphan removal counted so far.
#[derive(Debug, Default)]
struct OrphanCounts {
    listed: AtomicU64,
    failed_deletes: AtomicU64,
}

/// The orphans of [`RemoveOrphanFiles::execute_stream`], a batch at a time, with the counts of
/// the removal so far.
pub struct RemoveOrphanFilesStream {
    inner: SendableRecordBatchStream,
    counts: Arc<OrphanCounts>,
}

impl RemoveOrphanFilesStream {
    /// Files listed under the location so far (before the age filter): all of them once the
    /// first batch is out (the anti-join sorts the whole listing first).
    pub fn listed_files_count(&self) -> u64 {
        self.counts.listed.load(Ordering::Relaxed)
    }

    /// Orphans handed over so far that could not be deleted (each logged).
    pub fn failed_deletes_count(&self) -> u64 {
        self.counts.failed_deletes.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for RemoveOrphanFilesStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoveOrphanFilesStream")
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Stream for RemoveOrphanFilesStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl RecordBatchStream for RemoveOrphanFilesStream {
    fn schema(&self) -> SchemaRef {
        orphans_schema()
    }
}

/// The files under a location last modified before a time, as a stream of (path, kind) batches.
#[derive(Debug)]
struct Listing {
    stores: Arc<crate::storage::ObjectStores>,
    /// Canonical.
    location: String,
    older_than: i64,
    counts: Arc<OrphanCounts>,
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
        let counts = Arc::clone(&self.counts);
        builder.spawn(async move {
            let located = crate::storage::locate(&location)?;
            let store = stores.store(&located.url)?;
            let url = located.url.as_str().to_string();
            let mut listing = store.list(Some(&located.path));
            let mut out = FileBatcher::new();
            while let Some(meta) = listing.next().await {
                let meta = meta.map_err(|e| DataFusionError::External(Box::new(e)))?;
                counts.listed.fetch_add(1, Ordering::Relaxed);
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
