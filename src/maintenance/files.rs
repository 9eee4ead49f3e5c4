//! Which files a table's snapshots reach, and which of a set of files none of them reaches: the
//! bounded-memory core of `expire_snapshots` and `remove_orphan_files`.
//!
//! ```text
//!  candidates (paths, kinds) ──► SortExec (spilling) ──┐
//!                                                      SortMergeJoinExec LeftAnti on path ──► unreachable
//!  reachable (paths)         ──► SortExec (spilling) ──┘      (sorted: duplicates adjacent, dropped)
//! ```
//! Paths are compared in one canonical form (`scheme://authority/key`, `s3a`/`s3n` as `s3`, local
//! files as `file:///path`), so a listing and the locations a manifest records meet.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringBuilder, UInt8Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::NullEquality;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::JoinType;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::joins::SortMergeJoinExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{execute_stream, ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;
use iceberg::spec::{DataContentType, ManifestStatus, SnapshotRef};
use iceberg::table::Table;

use crate::physical_plan::spawned::SpawnedExec;
use crate::storage::location::LocationMap;

/// What a file is to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum FileKind {
    Data = 0,
    PositionDeletes = 1,
    EqualityDeletes = 2,
    Manifest = 3,
    ManifestList = 4,
    Statistics = 5,
    Metadata = 6,
    /// A listed file of unknown role.
    Other = 7,
}

impl FileKind {
    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Data,
            1 => Self::PositionDeletes,
            2 => Self::EqualityDeletes,
            3 => Self::Manifest,
            4 => Self::ManifestList,
            5 => Self::Statistics,
            6 => Self::Metadata,
            _ => Self::Other,
        }
    }

    fn of(content: DataContentType) -> Self {
        match content {
            DataContentType::Data => Self::Data,
            DataContentType::PositionDeletes => Self::PositionDeletes,
            DataContentType::EqualityDeletes => Self::EqualityDeletes,
        }
    }
}

/// The schema of file lists: `path` (canonical) and `kind` ([`FileKind`]).
pub(crate) fn files_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("kind", DataType::UInt8, false),
    ]))
}

/// `location` in the one form paths are compared in.
pub(crate) fn canonical(location: &str) -> Result<String> {
    let located = crate::storage::locate(location)?;
    let url = located.url.as_str();
    let url = match url.split_once("://") {
        Some(("s3a" | "s3n", rest)) => format!("s3://{rest}"),
        _ => url.to_string(),
    };
    Ok(format!("{url}{}", located.path))
}

/// Collects (path, kind) pairs into batches of at most `BATCH` rows.
pub(crate) struct FileBatcher {
    paths: StringBuilder,
    kinds: Vec<u8>,
}

const BATCH: usize = 8192;

impl FileBatcher {
    pub(crate) fn new() -> Self {
        Self {
            paths: StringBuilder::new(),
            kinds: vec![],
        }
    }

    /// Adds a file; returns a full batch when one is ready.
    pub(crate) fn push(&mut self, path: &str, kind: FileKind) -> Result<Option<RecordBatch>> {
        self.paths.append_value(canonical(path)?);
        self.kinds.push(kind as u8);
        if self.kinds.len() >= BATCH {
            return self.finish().map(Some);
        }
        Ok(None)
    }

    /// The rows pushed since the last batch.
    pub(crate) fn finish(&mut self) -> Result<RecordBatch> {
        let paths: ArrayRef = Arc::new(self.paths.finish());
        let kinds: ArrayRef = Arc::new(UInt8Array::from(std::mem::take(&mut self.kinds)));
        Ok(RecordBatch::try_new(files_schema(), vec![paths, kinds])?)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}

/// The statistics files (table and partition statistics) of `metadata`, of the snapshots in
/// `only` when given.
pub(crate) fn statistics_files(
    metadata: &iceberg::spec::TableMetadata,
    only: Option<&HashSet<i64>>,
) -> Vec<(String, FileKind)> {
    let wanted = |id: i64| only.is_none_or(|ids| ids.contains(&id));
    metadata
        .statistics_iter()
        .filter(|s| wanted(s.snapshot_id))
        .map(|s| (s.statistics_path.clone(), FileKind::Statistics))
        .chain(
            metadata
                .partition_statistics_iter()
                .filter(|s| wanted(s.snapshot_id))
                .map(|s| (s.statistics_path.clone(), FileKind::Statistics)),
        )
        .collect()
}

/// The files `snapshots` of `table` reach: their manifest lists, their manifests (each once),
/// and the files the manifests list (only live entries with `live_only`), plus `extra`.
#[derive(Debug)]
pub(crate) struct ReachableFiles {
    pub table: Table,
    pub snapshots: Vec<SnapshotRef>,
    pub live_only: bool,
    pub extra: Vec<(String, FileKind)>,
}

impl PartitionStream for ReachableFiles {
    fn schema(&self) -> &SchemaRef {
        static SCHEMA: std::sync::OnceLock<SchemaRef> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(files_schema)
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStream::builder(files_schema(), 2);
        let tx = builder.tx();
        let table = self.table.clone();
        let snapshots = self.snapshots.clone();
        let live_only = self.live_only;
        let extra = self.extra.clone();
        builder.spawn(async move {
            let send = |batch: RecordBatch| {
                let tx = tx.clone();
                async move {
                    // The receiver gone means the query stopped: stop quietly.
                    tx.send(Ok(batch)).await.is_ok()
                }
            };
            let mut out = FileBatcher::new();
            for (path, kind) in &extra {
                if let Some(b) = out.push(path, *kind)? {
                    if !send(b).await {
                        return Ok(());
                    }
                }
            }
            let mut seen_manifests: HashSet<String> = HashSet::new();
            for snapshot in &snapshots {
                if let Some(b) = out.push(snapshot.manifest_list(), FileKind::ManifestList)? {
                    if !send(b).await {
                        return Ok(());
                    }
                }
                let list =
                    crate::file_planning::manifest_list(&table, &LocationMap::default(), snapshot)
                        .await?;
                for manifest in list.iter() {
                    if !seen_manifests.insert(manifest.manifest_path.clone()) {
                        continue;
                    }
                    if let Some(b) = out.push(&manifest.manifest_path, FileKind::Manifest)? {
                        if !send(b).await {
                            return Ok(());
                        }
                    }
                    // Through the crate's own decoder (the iceberg crate's is several times
                    // slower on large manifests).
                    let loaded = crate::file_planning::load_entries(
                        manifest,
                        table.metadata(),
                        table.file_io(),
                    )
                    .await?;
                    for entry in &loaded {
                        if live_only && entry.status() == ManifestStatus::Deleted {
                            continue;
                        }
                        let kind = FileKind::of(entry.content_type());
                        if let Some(b) = out.push(entry.file_path(), kind)? {
                            if !send(b).await {
                                return Ok(());
                            }
                        }
                    }
                }
            }
            if !out.is_empty() {
                send(out.finish()?).await;
            }
            Ok(())
        });
        builder.build()
    }
}

/// A plan reading one partition from `stream`.
pub(crate) fn source(stream: Arc<dyn PartitionStream>) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(Arc::new(StreamingTableExec::try_new(
        files_schema(),
        vec![stream],
        None,
        Vec::<LexOrdering>::new(),
        false,
        None,
    )?))
}

/// The rows of `candidates` whose path no row of `reachable` has, sorted by path, each path
/// once. Both sides are sorted (spilling under memory pressure) and merge-joined.
pub(crate) fn unreachable(
    candidates: Arc<dyn ExecutionPlan>,
    reachable: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    let plan = unreachable_plan(candidates, reachable)?;
    Ok(distinct_paths(execute_stream(plan, context)?))
}

/// The anti-join of [`unreachable`]: its output is sorted by path, repeats included.
pub(crate) fn unreachable_plan(
    candidates: Arc<dyn ExecutionPlan>,
    reachable: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let by_path = |plan: Arc<dyn ExecutionPlan>| -> Result<Arc<dyn ExecutionPlan>> {
        let order = LexOrdering::new([PhysicalSortExpr::new(
            Arc::new(Column::new_with_schema("path", &plan.schema())?),
            SortOptions::default(),
        )])
        .ok_or_else(|| DataFusionError::Internal("empty ordering".into()))?;
        // Each side sorts in a task of its own from the start: the listing (system calls) and
        // the manifests (decoding) proceed at the same time.
        Ok(Arc::new(SpawnedExec::new(Arc::new(SortExec::new(
            order, plan,
        )))))
    };
    let left = by_path(candidates)?;
    let right = by_path(reachable)?;
    let on = vec![(
        Arc::new(Column::new_with_schema("path", &left.schema())?) as _,
        Arc::new(Column::new_with_schema("path", &right.schema())?) as _,
    )];
    Ok(Arc::new(SortMergeJoinExec::try_new(
        left,
        right,
        on,
        None,
        JoinType::LeftAnti,
        vec![SortOptions::default()],
        NullEquality::NullEqualsNothing,
    )?))
}

/// `sorted` (by path) without repeated paths, across batches too.
pub(crate) fn distinct_paths(sorted: SendableRecordBatchStream) -> SendableRecordBatchStream {
    let mut last: Option<String> = None;
    let deduped = sorted.map(move |batch| {
        let batch = batch?;
        let paths = batch.column(0).as_string::<i32>();
        let mut keep = Vec::with_capacity(batch.num_rows());
        for i in 0..paths.len() {
            let p = paths.value(i);
            let new = last.as_deref() != Some(p);
            if new {
                last = Some(p.to_string());
            }
            keep.push(new);
        }
        let mask = arrow::array::BooleanArray::from(keep);
        Ok(arrow::compute::filter_record_batch(&batch, &mask)?)
    });
    Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(files_schema(), deduped),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::prelude::SessionConfig;

    /// Paths `s3://b/f<i>` for `ids`, in batches.
    #[derive(Debug)]
    struct Generated(Vec<u64>);

    impl PartitionStream for Generated {
        fn schema(&self) -> &SchemaRef {
            static SCHEMA: std::sync::OnceLock<SchemaRef> = std::sync::OnceLock::new();
            SCHEMA.get_or_init(files_schema)
        }

        fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
            let ids = self.0.clone();
            let batches = ids.chunks(4096).map(|chunk| {
                let mut b = FileBatcher::new();
                for i in chunk {
                    b.push(&format!("s3://b/data/f{i:09}.parquet"), FileKind::Data)?;
                }
                b.finish()
            });
            let stream = futures::stream::iter(batches.collect::<Vec<_>>());
            Box::pin(
                datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                    files_schema(),
                    stream,
                ),
            )
        }
    }

    fn find<'a>(
        plan: &'a Arc<dyn ExecutionPlan>,
        name: &str,
        out: &mut Vec<&'a Arc<dyn ExecutionPlan>>,
    ) {
        if plan.name() == name {
            out.push(plan);
        }
        for c in plan.children() {
            find(c, name, out);
        }
    }

    #[tokio::test]
    async fn the_anti_join_spills_under_a_small_pool() {
        const N: u64 = 300_000;
        // Candidates in scattered order, some twice; every third one is unreachable.
        let candidates: Vec<u64> = (0..N).map(|i| i * 7919 % N).chain(0..1000).collect();
        let reachable: Vec<u64> = (0..N)
            .filter(|i| i % 3 != 0)
            .chain((1..500).filter(|i| i % 3 != 0))
            .collect();
        let pool = Arc::new(FairSpillPool::new(4 << 20));
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool) as Arc<dyn MemoryPool>)
            .build_arc()
            .unwrap();
        let config = SessionConfig::new().with_sort_spill_reservation_bytes(256 << 10);
        let ctx = Arc::new(
            TaskContext::default()
                .with_session_config(config)
                .with_runtime(runtime),
        );
        let plan = unreachable_plan(
            source(Arc::new(Generated(candidates))).unwrap(),
            source(Arc::new(Generated(reachable))).unwrap(),
        )
        .unwrap();
        let mut stream = distinct_paths(execute_stream(Arc::clone(&plan), ctx).unwrap());
        let mut got = vec![];
        while let Some(b) = stream.next().await {
            let b = b.unwrap();
            let paths = b.column(0).as_string::<i32>();
            got.extend((0..paths.len()).map(|i| paths.value(i).to_string()));
        }
        drop(stream);
        let want: Vec<String> = (0..N)
            .filter(|i| i % 3 == 0)
            .map(|i| format!("s3://b/data/f{i:09}.parquet"))
            .collect();
        assert_eq!(got.len(), want.len());
        assert_eq!(got, want);
        let mut sorts = vec![];
        find(&plan, "SortExec", &mut sorts);
        let spills: usize = sorts
            .iter()
            .filter_map(|s| s.metrics())
            .filter_map(|m| m.spill_count())
            .sum();
        assert!(spills > 0, "the sorts spilled");
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn paths_meet_in_one_form() {
        assert_eq!(
            canonical("s3a://b/ns/t/data/f.parquet").unwrap(),
            canonical("s3://b/ns/t/data/f.parquet").unwrap()
        );
        assert_eq!(
            canonical("file:///tmp/wh/t/f.parquet").unwrap(),
            canonical("/tmp/wh/t/f.parquet").unwrap()
        );
        assert_eq!(
            canonical("/tmp/wh/t/f.parquet").unwrap(),
            "file:///tmp/wh/t/f.parquet"
        );
        assert_ne!(
            canonical("s3://b/k").unwrap(),
            canonical("s3://c/k").unwrap()
        );
    }
}
