//! `rewrite_data_files`: compaction that applies deletes.
//!
//! ```text
//!  plan (reads manifests only)
//!    snapshot ─► data files [pruned by `where`] with their deletes
//!      ─► candidates: outside [min, max] size, or too many delete files, or a high share of
//!         known deleted rows (file-scoped position deletes, deletion vectors); every file with
//!         rewrite-all
//!      ─► per partition, bin-packed into groups of at most max-file-group-size-bytes
//!      ─► groups kept when they have min-input-files (and > 1) files, or more bytes than one
//!         target file, or more than max-file-size-bytes, or a file with delete issues
//!  execute (max-concurrent-file-group-rewrites writers at a time; bin-pack splits a group into
//!           bins of about one target file of input bytes, each its own writer)
//!    group: scan(files, deletes applied, + _row_id / _last_updated_sequence_number on v3)
//!      ─► count ─► [sort: the given or the table's order, spilling] ─► one writer rolling at
//!         target-file-size-bytes
//!    verify  rows written = live rows read
//!    commit  `replace`: remove the group's files, the deletion vectors and file-scoped position
//!            deletes of those files, and the delete files that apply to no file left; add the
//!            new files at the data sequence number of the snapshot read (equality deletes
//!            committed meanwhile still apply to them); one commit, or one per batch of groups
//!            with partial progress
//! ```
//! A commit made meanwhile that removes a rewritten file or adds position deletes that may apply
//! to one makes the rewrite fail, changing nothing (those deletes are kept); appends and, with
//! the starting sequence number, equality deletes do not conflict.

mod groups;
mod rewriter;
mod sort;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::Operation;
use iceberg::table::Table;
use iceberg::TableIdent;

use super::options::RewriteOptions;
use super::progress::Reporter;
use crate::commit::MetadataStore;
use crate::commit::{commit_or_clean_up, removed_with_deletes};
use crate::commit::{NewFile, RemovedDeletes, SnapshotChanges, Validation};
use crate::error::IcebergResultExt;
use crate::file_planning::{
    plan_files_pruned, unprunable_columns, DeleteFileRef, FileFilter, PlannedFile,
};
use crate::physical_plan::scan::lineage;
use crate::physical_plan::scan::schema::arrow_schema;
use crate::physical_plan::write::WrittenFiles;
use crate::storage::location::LocationMap;
use crate::IcebergOptions;
use std::sync::atomic::{AtomicU64, Ordering};

pub use super::options::RewriteStrategy;
use groups::{choose_groups, pack, FileGroup};
use rewriter::GroupRewriter;
use sort::sort_of;

/// What a rewrite did, in Spark's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewriteDataFilesResult {
    /// Data files removed by the rewrite.
    pub rewritten_data_files_count: u64,
    /// Data files it added.
    pub added_data_files_count: u64,
    /// Bytes of the data files removed.
    pub rewritten_bytes_count: u64,
    /// Data files of groups whose rewrite or commit failed (partial progress only).
    pub failed_data_files_count: u64,
    /// Delete files (each deletion vector counts as one) removed because they apply to no
    /// remaining file.
    pub removed_delete_files_count: u64,
    /// Live rows the new files hold.
    pub rewritten_rows_count: u64,
}

/// Compacts a table's data files, applying their deletes: Spark's `rewrite_data_files`.
///
/// ```no_run
/// # async fn f(session: &iceberg_exec::IcebergSession) -> datafusion::error::Result<()> {
/// use iceberg_exec::maintenance::RewriteDataFiles;
/// let store: std::sync::Arc<dyn iceberg_exec::MetadataStore> = session.catalog().clone();
/// let ident = iceberg::TableIdent::from_strs(["ns", "t"]).unwrap();
/// let result = RewriteDataFiles::new(store, ident)
///     .option("min-input-files", "2")
///     .execute(&session.context().state())
///     .await?;
/// println!("{} files rewritten", result.rewritten_data_files_count);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RewriteDataFiles {
    store: Arc<dyn MetadataStore>,
    ident: TableIdent,
    options: BTreeMap<String, String>,
    filter: Option<Expr>,
    where_sql: Option<String>,
    strategy: RewriteStrategy,
}

impl RewriteDataFiles {
    /// A rewrite of the table `ident` in `store`, with Spark's default options.
    pub fn new(store: Arc<dyn MetadataStore>, ident: TableIdent) -> Self {
        Self {
            store,
            ident,
            options: BTreeMap::new(),
            filter: None,
            where_sql: None,
            strategy: RewriteStrategy::default(),
        }
    }

    /// Sets an option by Spark's name (`min-input-files`, `target-file-size-bytes`, ...).
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }

    /// Rewrites only files that may hold rows matching `filter` (over the table's columns).
    pub fn filter(mut self, filter: Expr) -> Self {
        self.filter = Some(filter);
        self
    }

    /// Like [`Self::filter`], given as SQL (`"part = 1 AND day > '2026-01-01'"`).
    pub fn filter_sql(mut self, filter: impl Into<String>) -> Self {
        self.where_sql = Some(filter.into());
        self
    }

    /// How rows are laid out in the new files.
    pub fn strategy(mut self, strategy: RewriteStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Chooses the file groups to rewrite (reads manifests only; nothing changes).
    pub async fn plan(self, state: &SessionState) -> Result<PlannedRewrite> {
        let table = Arc::clone(&self.store).load(&self.ident).await?;
        let metadata = table.metadata();
        let options = RewriteOptions::parse(metadata, &self.options)?;
        let schema = arrow_schema(metadata.current_schema())?;
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let mut filters = vec![];
        if let Some(sql) = &self.where_sql {
            let expr = state.create_logical_expr(sql, &df_schema).map_err(|e| {
                DataFusionError::Plan(format!(
                    "rewrite_data_files: bad where '{sql}': {}",
                    e.to_string().replace('\n', " ")
                ))
            })?;
            filters.push(expr);
        }
        filters.extend(self.filter.clone());
        // Types coerced and constants folded, as DataFusion does for a query's filters, so the
        // manifests' partition values and bounds can prune.
        let df_schema = Arc::new(df_schema);
        let simplifier = ExprSimplifier::new(
            SimplifyContext::builder()
                .with_schema(Arc::clone(&df_schema))
                .build(),
        );
        let mut coerced = vec![];
        for f in filters {
            let f = simplifier.simplify(simplifier.coerce(f, &df_schema)?)?;
            let ty = f.get_type(&df_schema)?;
            if ty != arrow::datatypes::DataType::Boolean {
                return Err(DataFusionError::Plan(format!(
                    "rewrite_data_files: where must be boolean, got {ty} for {f}"
                )));
            }
            coerced.push(f);
        }
        let filters = coerced;
        // The order files are written in, checked now so a bad one changes nothing.
        let sort_input = arrow_schema(lineage::rows_schema(metadata)?.as_ref())?;
        let sort = sort_of(&table, &self.strategy, &sort_input, options.zorder)?;

        let mut planned = PlannedRewrite {
            store: Arc::clone(&self.store),
            table: table.clone(),
            options,
            strategy: self.strategy.clone(),
            sort_display: sort.as_ref().map(|s| {
                s.iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }),
            groups: vec![],
            equality_deletes: vec![],
            streamed: false,
            base_snapshot_id: None,
            base_sequence_number: 0,
        };
        let Some(snapshot) = metadata.current_snapshot() else {
            return Ok(planned);
        };
        planned.base_snapshot_id = Some(snapshot.snapshot_id());
        planned.base_sequence_number = snapshot.sequence_number();
        let snapshot_schema = snapshot.schema(metadata).df()?;
        let filter = FileFilter::new(
            &filters,
            &unprunable_columns(metadata, metadata.current_schema(), &snapshot_schema),
            metadata.current_schema().clone(),
        );
        let threshold = IcebergOptions::from_config(state.config_options()).planning_threshold;
        let files = plan_files_pruned(
            &table,
            &LocationMap::default(),
            snapshot,
            &filter,
            threshold,
        )
        .await?;
        planned.groups = choose_groups(&planned.options, &files);
        planned.equality_deletes = files.equality_deletes;
        planned.streamed = files.streamed;
        Ok(planned)
    }

    /// Plans and runs the rewrite.
    pub async fn execute(self, state: &SessionState) -> Result<RewriteDataFilesResult> {
        self.plan(state).await?.execute(state).await
    }
}

/// The file groups a rewrite chose, ready to run ([`RewriteDataFiles::plan`]).
#[derive(Debug)]
pub struct PlannedRewrite {
    store: Arc<dyn MetadataStore>,
    table: Table,
    options: RewriteOptions,
    strategy: RewriteStrategy,
    sort_display: Option<String>,
    groups: Vec<FileGroup>,
    equality_deletes: Vec<Arc<DeleteFileRef>>,
    streamed: bool,
    base_snapshot_id: Option<i64>,
    base_sequence_number: i64,
}

/// Writers that run at once: `wanted`, but under a memory limit one per 128 MiB of it (each
/// holds its delete joins and, with sort strategy, a sort; all of them share the pool).
fn concurrency(state: &SessionState, wanted: usize) -> usize {
    use datafusion::execution::memory_pool::MemoryLimit;
    match state.runtime_env().memory_pool.memory_limit() {
        MemoryLimit::Finite(bytes) => wanted.min((bytes >> 27).max(1)),
        MemoryLimit::Infinite | MemoryLimit::Unknown => wanted,
    }
}

/// Files rewritten so far, reported to the session's progress watcher.
struct Progress {
    reporter: Reporter,
    done: AtomicU64,
    total: u64,
}

impl Progress {
    fn advance(&self, files: u64) {
        let done = self.done.fetch_add(files, Ordering::Relaxed) + files;
        self.reporter
            .report("rewrite_data_files", done, self.total, "files");
    }
}

/// What one group's rewrite produced.
struct Rewritten {
    files: Vec<FileGroup>,
    added: Vec<NewFile>,
    rows: u64,
}

impl PlannedRewrite {
    /// How many groups will be rewritten.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// How many data files will be rewritten.
    pub fn file_count(&self) -> usize {
        self.groups.iter().map(|g| g.files.len()).sum()
    }

    /// Rewrites the groups and commits them; a failure before a commit leaves nothing behind.
    pub async fn execute(self, state: &SessionState) -> Result<RewriteDataFilesResult> {
        let mut result = RewriteDataFilesResult::default();
        if self.groups.is_empty() {
            return Ok(result);
        }
        let batches: Vec<Vec<FileGroup>> = if self.options.partial_progress {
            let per_commit = self.groups.len().div_ceil(self.options.max_commits);
            self.groups.chunks(per_commit).map(<[_]>::to_vec).collect()
        } else {
            vec![self.groups.clone()]
        };
        let progress = Arc::new(Progress {
            reporter: Reporter::of(state),
            done: AtomicU64::new(0),
            total: self.file_count() as u64,
        });
        progress.advance(0);
        for batch in batches {
            let files: u64 = batch.iter().map(|g| g.files.len() as u64).sum();
            match self.rewrite_and_commit(state, batch, &progress).await {
                Ok(done) => {
                    result.rewritten_data_files_count += done.rewritten_data_files_count;
                    result.added_data_files_count += done.added_data_files_count;
                    result.rewritten_bytes_count += done.rewritten_bytes_count;
                    result.removed_delete_files_count += done.removed_delete_files_count;
                    result.rewritten_rows_count += done.rewritten_rows_count;
                }
                Err(e) if self.options.partial_progress => {
                    log::warn!(
                        "rewrite_data_files on '{}': {files} file(s) not rewritten: {e}",
                        self.table.identifier()
                    );
                    result.failed_data_files_count += files;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(result)
    }

    /// The units one writer each rewrites of `group`: bin-packing splits it into bins of about
    /// one target file of input bytes, written side by side; a sorted group stays whole (its
    /// files cover disjoint ranges of the sort key).
    fn bins(&self, group: FileGroup) -> Vec<FileGroup> {
        match self.strategy {
            RewriteStrategy::BinPack => pack(group.files, self.options.target_file_size),
            RewriteStrategy::Sort(_) => vec![group],
        }
    }

    /// Rewrites `groups`, a few at a time; the new files are recorded in `written`.
    async fn rewrite_groups(
        &self,
        state: &SessionState,
        groups: Vec<FileGroup>,
        progress: &Arc<Progress>,
        written: &WrittenFiles,
    ) -> Result<Rewritten> {
        let rewriter = Arc::new(GroupRewriter {
            store: Arc::clone(&self.store),
            table: self.table.clone(),
            strategy: self.strategy.clone(),
            zorder: self.options.zorder,
            target_file_size: self.options.target_file_size,
            equality_deletes: self.equality_deletes.clone(),
            streamed: self.streamed,
            state: state.clone(),
        });
        let shared = written.clone();
        let units: Vec<FileGroup> = groups.into_iter().flat_map(|g| self.bins(g)).collect();
        let progress = Arc::clone(progress);
        futures::stream::iter(units.into_iter().map(move |g| {
            let (rewriter, written) = (Arc::clone(&rewriter), shared.clone());
            let progress = Arc::clone(&progress);
            async move {
                let (added, rows) = rewriter.rewrite(&g, written).await?;
                progress.advance(g.files.len() as u64);
                Ok::<_, DataFusionError>(Rewritten {
                    files: vec![g],
                    added,
                    rows,
                })
            }
        }))
        .buffer_unordered(concurrency(state, self.options.max_concurrent_groups))
        .try_fold(
            Rewritten {
                files: vec![],
                added: vec![],
                rows: 0,
            },
            |mut acc, r| async move {
                acc.files.extend(r.files);
                acc.added.extend(r.added);
                acc.rows += r.rows;
                Ok(acc)
            },
        )
        .await
    }

    /// Rewrites `groups` and commits them as one `replace` snapshot.
    async fn rewrite_and_commit(
        &self,
        state: &SessionState,
        groups: Vec<FileGroup>,
        progress: &Arc<Progress>,
    ) -> Result<RewriteDataFilesResult> {
        let written = WrittenFiles::default();
        let rewritten = self.rewrite_groups(state, groups, progress, &written).await;
        let rewritten = match rewritten {
            Ok(r) => r,
            Err(e) => {
                written.remove_all(self.table.file_io()).await;
                return Err(e.context(format!(
                    "rewrite_data_files on table '{}' failed; nothing was changed",
                    self.table.identifier()
                )));
            }
        };
        let removed: Vec<&PlannedFile> = rewritten.files.iter().flat_map(|g| &g.files).collect();
        // Which delete files apply to no file left is decided on the table as it is now
        // (earlier commits of this rewrite removed files too).
        let table = Arc::clone(&self.store)
            .load(self.table.identifier())
            .await?;
        let threshold = IcebergOptions::from_config(state.config_options()).planning_threshold;
        let (removed_files, removed_vectors, delete_files_removed) = match removed_with_deletes(
            &table,
            &crate::commit::WriteTo::Main,
            &LocationMap::default(),
            threshold,
            &removed,
            &self.equality_deletes,
            RemovedDeletes::default(),
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                written.remove_all(self.table.file_io()).await;
                return Err(e);
            }
        };
        let mut gone = RemovedDeletes {
            files: removed_files,
            vectors: removed_vectors,
        };
        let mut delete_files_removed = delete_files_removed;
        if self.options.remove_dangling_deletes {
            // Delete files that already applied to no data file go in the same commit.
            let dangling = match dangling_deletes(&table, threshold).await {
                Ok(d) => d,
                Err(e) => {
                    written.remove_all(self.table.file_io()).await;
                    return Err(e);
                }
            };
            for d in dangling {
                if gone.insert(&d) {
                    delete_files_removed += 1;
                }
            }
        }
        let read_files: HashSet<String> = removed.iter().map(|f| f.path.clone()).collect();
        let keep_sequence = self.options.use_starting_sequence_number;
        let mut summary = HashMap::new();
        summary.insert(
            "rewrite-data-files.strategy".to_string(),
            match &self.strategy {
                RewriteStrategy::BinPack => "binpack".to_string(),
                RewriteStrategy::Sort(_) => "sort".to_string(),
            },
        );
        let changes = SnapshotChanges {
            operation: Operation::Replace,
            added_data_files: rewritten.added.clone(),
            added_delete_files: vec![],
            removed_files: gone.files,
            removed_deletion_vectors: gone.vectors,
            summary_properties: summary,
            validation: Some(Validation {
                base_snapshot_id: self.base_snapshot_id,
                // A compaction changes no row: data files committed meanwhile never conflict.
                may_match: Arc::new(|_, _, _| false),
                read_files,
                equality_deletes_carry_over: keep_sequence,
            }),
            data_sequence_number: keep_sequence.then_some(self.base_sequence_number),
            rewrite_data_manifests: false,
            task_context: None,
            write_to: crate::commit::WriteTo::Main,
            ..Default::default()
        };
        commit_or_clean_up(&self.store, &self.table, changes, &written)
            .await
            .map_err(|e| {
                e.context(format!(
                    "rewrite_data_files on table '{}' did not commit",
                    self.table.identifier()
                ))
            })?;
        Ok(RewriteDataFilesResult {
            rewritten_data_files_count: removed.len() as u64,
            added_data_files_count: rewritten.added.len() as u64,
            rewritten_bytes_count: removed.iter().map(|f| f.size).sum(),
            failed_data_files_count: 0,
            removed_delete_files_count: delete_files_removed as u64,
            rewritten_rows_count: rewritten.rows,
        })
    }
}

impl std::fmt::Display for PlannedRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rewrite_data_files: table={}, groups={}, files={}, target_file_size={}",
            self.table.identifier(),
            self.group_count(),
            self.file_count(),
            self.options.target_file_size
        )?;
        if let Some(sort) = &self.sort_display {
            write!(f, ", sort=[{sort}]")?;
        }
        Ok(())
    }
}

/// The delete files of `table`'s current snapshot that apply to none of its data files.
async fn dangling_deletes(
    table: &Table,
    threshold: u64,
) -> Result<Vec<Arc<crate::file_planning::DeleteFileRef>>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(vec![]);
    };
    let scan = plan_files_pruned(
        table,
        &LocationMap::default(),
        snapshot,
        &FileFilter::default(),
        threshold,
    )
    .await?;
    super::position_deletes::dangling_deletes(table, snapshot, &scan).await
}

#[cfg(test)]
mod tests {
    use super::sort::parse_sort_order;
    use arrow::compute::SortOptions;
    use arrow::datatypes::Schema;
    use arrow::datatypes::{DataType, Field};

    #[test]
    fn sort_orders_read_like_spark() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
        ]);
        let order = parse_sort_order("b DESC NULLS FIRST, a", &schema).unwrap();
        let names: Vec<String> = order.iter().map(|r| r.expr.to_string()).collect();
        assert_eq!(names, ["b@1", "a@0"]);
        let options: Vec<SortOptions> = order.iter().map(|r| r.options.unwrap()).collect();
        assert_eq!(
            options,
            [
                SortOptions {
                    descending: true,
                    nulls_first: true
                },
                SortOptions {
                    descending: false,
                    nulls_first: true
                }
            ]
        );
        let desc = parse_sort_order("a desc", &schema).unwrap();
        assert!(!desc.iter().next().unwrap().options.unwrap().nulls_first);
        let err = |t: &str| parse_sort_order(t, &schema).unwrap_err().to_string();
        assert!(err("c").contains("no column 'c'"));
        assert!(err("a SIDEWAYS").contains("cannot read 'a SIDEWAYS'"));
        assert!(err("a,").contains("empty item"));
    }

    /// A bin-pack reads the string columns whose dictionaries held as dictionaries and writes
    /// them from the dictionaries (not the partition source, read as values): the rows and
    /// nulls come out as they went in.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bin_packing_carries_string_dictionaries_through() {
        use crate::physical_plan::write::chunks_closed;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::IcebergSession::open(crate::WarehouseConfig::local(dir.path()))
            .await
            .unwrap();
        let run = |q: String| {
            let s = s.clone();
            async move { s.sql(&q).await?.collect().await }
        };
        run("CREATE SCHEMA ns".into()).await.unwrap();
        run(
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, dict_probe_v VARCHAR, \
             dict_probe_k VARCHAR NOT NULL, dict_probe_p VARCHAR NOT NULL) STORED AS ICEBERG \
             LOCATION '' PARTITIONED BY (dict_probe_p) \
             OPTIONS ('write.delete.mode' 'merge-on-read')"
                .into(),
        )
        .await
        .unwrap();
        for i in 0..4 {
            run(format!(
                "INSERT INTO ns.t SELECT value, CASE WHEN value % 9 = 0 THEN NULL ELSE \
                 'v-' || CAST((value * 7) % 50 AS VARCHAR) END, 'k' || CAST(value % 7 AS VARCHAR), \
                 'p' || CAST(value % 2 AS VARCHAR) FROM generate_series({}, {})",
                i * 5000,
                i * 5000 + 4999
            ))
            .await
            .unwrap();
        }
        run("DELETE FROM ns.t WHERE id % 10 = 3".into())
            .await
            .unwrap();
        let query = "SELECT id, dict_probe_v, dict_probe_k, dict_probe_p FROM ns.t ORDER BY id";
        let before = run(query.into()).await.unwrap();
        let closed = |c: &str| chunks_closed(&format!("dict_probe_{c}"));
        let (v, k, p) = (closed("v"), closed("k"), closed("p"));
        let result = run(
            "CALL system.rewrite_data_files(table => 'ns.t', options => \
                          map('rewrite-all', 'true'))"
                .into(),
        )
        .await
        .unwrap();
        let rewritten = result[0]
            .column_by_name("rewritten_data_files_count")
            .and_then(|c| c.as_any().downcast_ref::<arrow::array::Int32Array>())
            .map(|a| a.value(0));
        assert_eq!(rewritten, Some(8));
        // One file per partition, each with the two columns' chunks from the dictionary
        // encoder; the partition source is read as values.
        assert!(closed("v") >= v + 2, "{v} -> {}", closed("v"));
        assert!(closed("k") >= k + 2, "{k} -> {}", closed("k"));
        assert_eq!(closed("p"), p);
        let after = run(query.into()).await.unwrap();
        let text = |b: &[arrow::array::RecordBatch]| {
            arrow::util::pretty::pretty_format_batches(b)
                .unwrap()
                .to_string()
        };
        assert_eq!(text(&before), text(&after));
    }
}
