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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::Schema;
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexRequirement, PhysicalSortRequirement};
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataContentType, Operation, Struct, Transform};
use iceberg::table::Table;
use iceberg::TableIdent;

use super::options::RewriteOptions;
use super::progress::Reporter;
use super::zorder::{parse_zorder, zorder_requirement, ZOrderOptions};
use crate::commit::MetadataStore;
use crate::commit::{commit_or_clean_up, removed_with_deletes};
use crate::commit::{NewFile, RemovedDeletes, SnapshotChanges, Validation};
use crate::error::IcebergResultExt;
use crate::file_planning::{
    plan_files_pruned, unprunable_columns, DeleteFileRef, FileFilter, PlannedFile, ScanFiles,
};
use crate::physical_plan::change_rows::{ChangeCounts, ChangeRowsExec, RowChange};
use crate::physical_plan::optimized;
use crate::physical_plan::scan::lineage;
use crate::physical_plan::scan::plan::{plan_statement_scan, ScanRequest};
use crate::physical_plan::scan::schema::{arrow_schema, with_dictionaries, with_plain_strings};
use crate::physical_plan::write::{
    decode_data_files, plain_columns_of, sort_requirement, DataFileWriterExec, WrittenFiles,
};
use crate::storage::location::LocationMap;
use crate::IcebergOptions;
use std::sync::atomic::{AtomicU64, Ordering};

/// How the rows of a file group are laid out in the new files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RewriteStrategy {
    /// Combine files as they are, rows in file order (Spark's bin-pack; `Sort` sorts).
    #[default]
    BinPack,
    /// Sort the rows of each group: by this order (`"c1 DESC NULLS LAST, c2"`), by a z-order
    /// of columns (`"zorder(c1, c2)"`), or by the table's sort order when `None`.
    Sort(Option<String>),
}

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

/// Data files of one partition rewritten together.
#[derive(Debug, Clone)]
struct FileGroup {
    files: Vec<PlannedFile>,
}

impl FileGroup {
    fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Delete files that apply to `f`, and the share of its rows they are known to delete.
fn delete_load(f: &PlannedFile, equality: &[Arc<DeleteFileRef>]) -> (usize, f64) {
    let eq = equality.iter().filter(|d| d.may_apply_to(f)).count();
    let known: u64 = f
        .position_deletes
        .iter()
        .filter(|d| d.referenced_data_file.as_deref() == Some(f.path.as_str()))
        .map(|d| d.record_count)
        .sum();
    let ratio = match f.record_count {
        0 => 0.0,
        n => known.min(n) as f64 / n as f64,
    };
    (f.position_deletes.len() + eq, ratio)
}

/// `files` packed next-fit into groups of at most `limit` bytes (a larger file goes alone).
fn pack(files: Vec<PlannedFile>, limit: u64) -> Vec<FileGroup> {
    let mut out = vec![];
    let mut current = FileGroup { files: vec![] };
    for f in files {
        if !current.files.is_empty() && current.bytes() + f.size > limit {
            out.push(std::mem::replace(&mut current, FileGroup { files: vec![] }));
        }
        current.files.push(f);
    }
    if !current.files.is_empty() {
        out.push(current);
    }
    out
}

/// Spark's bin-pack selection: candidate files, packed per partition, groups worth rewriting.
fn choose_groups(options: &RewriteOptions, scan: &ScanFiles) -> Vec<FileGroup> {
    let delete_issue = |f: &PlannedFile| {
        let (count, ratio) = delete_load(f, &scan.equality_deletes);
        count >= options.delete_file_threshold || ratio >= options.delete_ratio_threshold
    };
    let mut partitions: Vec<((i32, Struct), Vec<PlannedFile>)> = vec![];
    let mut index: HashMap<(i32, Struct), usize> = HashMap::new();
    for f in &scan.files {
        let candidate = options.rewrite_all
            || f.size < options.min_file_size
            || f.size > options.max_file_size
            || delete_issue(f);
        if !candidate {
            continue;
        }
        let key = (f.spec_id, f.partition.clone());
        let i = *index.entry(key.clone()).or_insert_with(|| {
            partitions.push((key, vec![]));
            partitions.len() - 1
        });
        partitions[i].1.push(f.clone());
    }
    let mut groups: Vec<FileGroup> = partitions
        .into_iter()
        .flat_map(|(_, files)| pack(files, options.max_file_group_size))
        .collect();
    groups.retain(|g| {
        let n = g.files.len();
        options.rewrite_all
            || (n > 1 && n >= options.min_input_files)
            || (n > 1 && g.bytes() > options.target_file_size)
            || g.bytes() > options.max_file_size
            || g.files.iter().any(delete_issue)
    });
    groups
}

/// The order the new files are written in.
fn sort_of(
    table: &Table,
    strategy: &RewriteStrategy,
    input: &Schema,
    zorder: ZOrderOptions,
) -> Result<Option<LexRequirement>> {
    match strategy {
        // As Spark's bin-pack: files are combined as they are, not sorted.
        RewriteStrategy::BinPack => Ok(None),
        RewriteStrategy::Sort(None) => match sort_requirement(table, input)? {
            Some(order) => Ok(Some(order)),
            None => Err(DataFusionError::Plan(format!(
                "rewrite_data_files: table '{}' has no sort order; give one with sort_order",
                table.identifier()
            ))),
        },
        RewriteStrategy::Sort(Some(order)) => match parse_zorder(order)? {
            Some(columns) => {
                let columns = without_identity_partition_columns(table, columns)?;
                let key = zorder_requirement(&columns, input, zorder)?;
                Ok(LexRequirement::new([key]))
            }
            None => parse_sort_order(order, input).map(Some),
        },
    }
}

/// The z-order columns less the table's identity partition columns, as Spark has them: their
/// value is the same throughout a partition, so they would only take bits from the others. A
/// z-order of nothing else is an error.
fn without_identity_partition_columns(table: &Table, columns: Vec<String>) -> Result<Vec<String>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    let identity: Vec<&str> = metadata
        .default_partition_spec()
        .fields()
        .iter()
        .filter(|f| f.transform == Transform::Identity)
        .filter_map(|f| schema.name_by_field_id(f.source_id))
        .collect();
    let (dropped, kept): (Vec<String>, Vec<String>) = columns
        .into_iter()
        .partition(|c| identity.contains(&c.as_str()));
    if kept.is_empty() {
        return Err(DataFusionError::Plan(format!(
            "rewrite_data_files sort_order: cannot z-order table '{}' only by identity partition \
             columns ({}): their value is the same throughout a partition",
            table.identifier(),
            dropped.join(", ")
        )));
    }
    if !dropped.is_empty() {
        log::warn!(
            "rewrite_data_files: identity partition columns ({}) of table '{}' left out of the \
             z-order: their value is the same throughout a partition",
            dropped.join(", "),
            table.identifier()
        );
    }
    Ok(kept)
}

/// `"c1 DESC NULLS LAST, c2"` over `input` (Iceberg's defaults: ASC, nulls first when
/// ascending and last when descending).
fn parse_sort_order(text: &str, input: &Schema) -> Result<LexRequirement> {
    let bad = |why: String| DataFusionError::Plan(format!("rewrite_data_files sort_order: {why}"));
    let mut reqs = vec![];
    for item in text.split(',') {
        let words: Vec<String> = item.split_whitespace().map(str::to_string).collect();
        let Some(name) = words.first() else {
            return Err(bad(format!("empty item in '{text}'")));
        };
        let name = name.trim_matches('"');
        let upper: Vec<String> = words[1..].iter().map(|w| w.to_ascii_uppercase()).collect();
        let (descending, rest) = match upper.first().map(String::as_str) {
            Some("DESC") => (true, &upper[1..]),
            Some("ASC") => (false, &upper[1..]),
            _ => (false, &upper[..]),
        };
        let nulls_first = match rest.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            [] => !descending,
            ["NULLS", "FIRST"] => true,
            ["NULLS", "LAST"] => false,
            _ => return Err(bad(format!("cannot read '{}'", item.trim()))),
        };
        let index = input
            .index_of(name)
            .map_err(|_| bad(format!("no column '{name}'")))?;
        reqs.push(PhysicalSortRequirement::new(
            Arc::new(Column::new(name, index)),
            Some(SortOptions {
                descending,
                nulls_first,
            }),
        ));
    }
    LexRequirement::new(reqs).ok_or_else(|| bad("no columns given".into()))
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

    /// Rewrites `groups` and commits them as one `replace` snapshot.
    async fn rewrite_and_commit(
        &self,
        state: &SessionState,
        groups: Vec<FileGroup>,
        progress: &Arc<Progress>,
    ) -> Result<RewriteDataFilesResult> {
        let written = WrittenFiles::default();
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
        let rewritten = futures::stream::iter(units.into_iter().map(move |g| {
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
        .await;
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
            let dangling = match table.metadata().current_snapshot() {
                Some(snapshot) => {
                    let scan = plan_files_pruned(
                        &table,
                        &LocationMap::default(),
                        snapshot,
                        &FileFilter::default(),
                        threshold,
                    )
                    .await?;
                    super::position_deletes::dangling_deletes(&table, snapshot, &scan).await?
                }
                None => vec![],
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

/// What rewriting one group needs, owned (groups run concurrently).
struct GroupRewriter {
    store: Arc<dyn MetadataStore>,
    table: Table,
    strategy: RewriteStrategy,
    zorder: ZOrderOptions,
    target_file_size: u64,
    equality_deletes: Vec<Arc<DeleteFileRef>>,
    streamed: bool,
    state: SessionState,
}

impl GroupRewriter {
    /// The plan that rewrites one group: its live rows (deletes applied, row lineage carried on
    /// v3) written into new files of the target size.
    async fn group_plan(
        &self,
        group: &FileGroup,
        counts: Arc<ChangeCounts>,
        written: WrittenFiles,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let metadata = self.table.metadata();
        let lineage = lineage::has_row_lineage(metadata);
        let read_schema = lineage::rows_schema(metadata)?;
        let locations = LocationMap::default();
        // How the files' columns fared with dictionaries: those that overflowed are written
        // plain, those that held are read as the files' dictionaries.
        let dictionaries = plain_columns_of(
            &self.state.task_ctx(),
            self.store.object_stores(),
            &locations,
            metadata.location(),
            &group.files,
        )
        .await?;
        // Strings decoded as the writer encodes them: no views to cast, and the columns whose
        // dictionaries held as dictionaries (see `dictionary_columns`).
        let schema = with_dictionaries(
            &with_plain_strings(&arrow_schema(&read_schema)?),
            &read_schema,
            &self.dictionary_columns(&dictionaries.kept),
        );
        let req = ScanRequest {
            table: &self.table,
            read_schema: &read_schema,
            schema: &schema,
            projection: None,
            filtered: false,
            limit: None,
            locations: &locations,
            stores: self.store.object_stores(),
            file_column: false,
            position_column: false,
            row_lineage: lineage,
            file_metadata: None,
        };
        let files = ScanFiles {
            files: group.files.clone(),
            equality_deletes: self.equality_deletes.clone(),
            streamed: self.streamed,
            columns: None,
        };
        let scan = plan_statement_scan(&self.state, &req, &files).await?;
        // Counts the live rows (the condition selects none: every row passes).
        let rows: Arc<dyn ExecutionPlan> = Arc::new(ChangeRowsExec::try_new(
            scan,
            datafusion::physical_plan::expressions::lit(false),
            RowChange::Delete,
            counts,
        )?);
        let sort = sort_of(&self.table, &self.strategy, &rows.schema(), self.zorder)?;
        // One writer per group: its files fill up to the target size.
        let writer = DataFileWriterExec::try_new(rows, self.table.clone(), sort, written)?
            .with_row_lineage(lineage)?
            .with_target_file_size(self.target_file_size as usize)
            .with_plain_columns(dictionaries.plain)
            .with_single_writer();
        optimized(&self.state, Arc::new(writer))
    }

    /// Of the columns (field ids) whose dictionaries held in the files, those a bin-pack reads
    /// as dictionaries: any but the partition sources (the writer computes partition values
    /// from them) and equality-delete keys (looked up by value). A sort reads values.
    fn dictionary_columns(&self, kept: &[i32]) -> Vec<i32> {
        if !matches!(self.strategy, RewriteStrategy::BinPack) {
            return vec![];
        }
        let metadata = self.table.metadata();
        let sources: Vec<i32> = metadata
            .partition_specs_iter()
            .flat_map(|spec| spec.fields().iter().map(|f| f.source_id))
            .collect();
        kept.iter()
            .copied()
            .filter(|id| !sources.contains(id))
            .filter(|id| {
                !self
                    .equality_deletes
                    .iter()
                    .any(|d| d.equality_ids.contains(id))
            })
            .collect()
    }

    /// Rewrites one group: the files it wrote and the rows they hold.
    async fn rewrite(
        &self,
        group: &FileGroup,
        written: WrittenFiles,
    ) -> Result<(Vec<NewFile>, u64)> {
        let counts = Arc::new(ChangeCounts::default());
        let plan = self.group_plan(group, Arc::clone(&counts), written).await?;
        let mut stream = execute_stream(plan, self.state.task_ctx())?;
        let mut added = vec![];
        while let Some(batch) = stream.next().await {
            added.extend(decode_data_files(&batch?, self.table.metadata())?);
        }
        // Self-check: every live row read is written, and no more rows than the files hold.
        let (read, _) = counts.get();
        let rows: u64 = added.iter().map(|f| f.file.record_count()).sum();
        let stored: u64 = group.files.iter().map(|f| f.record_count).sum();
        if rows != read || read > stored {
            return Err(DataFusionError::Execution(format!(
                "rewrite_data_files on table '{}' does not add up: read {read} live rows of \
                 {stored}, wrote {rows}",
                self.table.identifier()
            )));
        }
        if added
            .iter()
            .any(|f| f.file.content_type() != DataContentType::Data)
        {
            return Err(DataFusionError::Internal(
                "the rewrite wrote a delete file".into(),
            ));
        }
        Ok((added, rows))
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

#[cfg(test)]
mod tests {
    use super::*;
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
