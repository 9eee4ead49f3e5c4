//! The two-pass core of `DELETE FROM t WHERE c` and `UPDATE t SET .. WHERE c`: metadata-only
//! deletes where the manifests prove every row of a file matches, a rewrite or position deletes
//! elsewhere ([`super::mor_pass`] writes those).
//!
//! ```text
//!  planning (no side effects; EXPLAIN stops here)
//!    manifests ─► candidate files (pruned by c) ─┬─ every row matches c (proved from partition
//!                                                │  values / bounds) ─► removed whole, unread
//!                                                └─ the rest ─► pass 1
//!  DmlExec (execute)
//!    pass 1  scan(candidates, deletes applied, + _file) ─► Filter(c) ─► matching rows per file
//!    pass 2  scan(files with a match, deletes applied) ─► ChangeRows (DELETE: keep the rows
//!              where c IS NOT TRUE; UPDATE: assign where c IS TRUE)
//!              ─► [sort by the table's sort order, spilling] ─► DataFileWriterExec
//!    verify  rows matched in pass 2 = pass 1's count; rows read = rows written (+ rows deleted)
//!    commit  delete / overwrite snapshot: remove the files, add the rewritten ones; on concurrent
//!            commits that add rows c may match or deletes to rewritten files: plan and run again
//! ```
//! An `UPDATE` removes no file whole: every file with a matching row is rewritten.
//! Memory: pass 1 keeps one counter per matching file; pass 2 streams (the sort spills).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::utils::{conjunction, expr_to_columns};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{
    execute_stream, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use iceberg::spec::{Operation, SnapshotRef, TableMetadata};
use iceberg::table::Table;

use super::core::{commit_or_clean_up, removed_with_deletes};
use super::guard::{dml_checked, unchecked_dml_error};
use crate::catalog::MetadataStore;
use crate::error::IcebergResultExt;
use crate::location::LocationMap;
use crate::physical_plan::change_rows::{ChangeCounts, ChangeRowsExec, RowChange};
use crate::physical_plan::positional_delete::POSITION_COLUMN;
use crate::physical_plan::scan::lineage;
use crate::physical_plan::scan::plan::arrow_schema;
use crate::physical_plan::scan::plan::{plan_statement_scan, ScanRequest, FILE_COLUMN};
use crate::physical_plan::write::{
    decode_tally, run_writers, sort_requirement, Computed, DataFileWriterExec, NewValues, Splicer,
    WrittenFiles,
};
use crate::scan::strict::FileStats;
use crate::scan::{plan_files_pruned, unprunable_columns, FileFilter, PlannedFile, ScanFiles};
use crate::snapshot::{is_concurrent_change, NewFile, RemovedDeletes, SnapshotChanges, Validation};
use crate::IcebergOptions;

use super::core::{DmlTarget, WriteMode};
use super::mor_pass::write_position_deletes;
use super::mor_writer::{PositionDeleteWriterExec, Reported};
use super::splice::{files_allow_splice, moves_rows, splice_files};

/// What a statement does to the rows its condition selects.
#[derive(Debug, Clone)]
pub(crate) enum DmlOp {
    /// `DELETE`.
    Delete,
    /// `UPDATE`: (column, new value) pairs, values already of the column's type.
    Update(Vec<(String, Expr)>),
}

impl DmlOp {
    fn sql(&self) -> &'static str {
        match self {
            Self::Delete => "DELETE",
            Self::Update(_) => "UPDATE",
        }
    }
}

/// The mode of a `DELETE` or `UPDATE`.
pub(crate) fn mode_of(
    metadata: &TableMetadata,
    options: &IcebergOptions,
    op: &DmlOp,
) -> Result<WriteMode> {
    let (session, property, option) = match op {
        DmlOp::Delete => (
            &options.delete_mode,
            "write.delete.mode",
            "iceberg.delete_mode",
        ),
        DmlOp::Update(_) => (
            &options.update_mode,
            "write.update.mode",
            "iceberg.update_mode",
        ),
    };
    WriteMode::from_setting(metadata, session, property, option)
}

/// Plans `DELETE FROM target WHERE filters` or `UPDATE target SET .. WHERE filters` (filters
/// AND-ed; none: every row).
pub(crate) async fn plan(
    target: DmlTarget<'_>,
    state: &dyn Session,
    op: DmlOp,
    filters: Vec<Expr>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let sql = op.sql();
    if !dml_checked() {
        return Err(unchecked_dml_error(sql));
    }
    let session = state
        .as_any()
        .downcast_ref::<SessionState>()
        .ok_or_else(|| {
            DataFusionError::NotImplemented(format!(
                "{sql} on Iceberg tables needs DataFusion's SessionState"
            ))
        })?
        .clone();
    let table = target.table;
    let metadata = table.metadata();
    let options = IcebergOptions::from_config(state.config_options());
    let mode = match &op {
        // `SET c = c` changes nothing: it only counts the matching rows.
        DmlOp::Update(a) if a.is_empty() => WriteMode::CopyOnWrite,
        _ => mode_of(metadata, &options, &op)?,
    };
    let schema = arrow_schema(metadata.current_schema())?;
    let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
    let mut columns = HashSet::new();
    for f in &filters {
        expr_to_columns(f, &mut columns)?;
        // Names and types are checked here, before anything runs.
        let ty = f.get_type(&df_schema)?;
        if ty != DataType::Boolean && ty != DataType::Null {
            return Err(DataFusionError::Plan(format!(
                "a {sql} condition must be boolean, got {ty} for {f}"
            )));
        }
    }
    if let DmlOp::Update(assignments) = &op {
        for (column, value) in assignments {
            let field = df_schema.field_with_unqualified_name(column)?;
            let ty = value.get_type(&df_schema)?;
            if &ty != field.data_type() {
                return Err(DataFusionError::Plan(format!(
                    "UPDATE cannot assign a value of type {ty} to column '{column}' ({})",
                    field.data_type()
                )));
            }
        }
    }
    let mut columns: Vec<String> = columns.into_iter().map(|c| c.name).collect();
    columns.sort();

    let job = DmlJob {
        table: table.clone(),
        store: Arc::clone(&target.store),
        distributed: crate::physical_plan::distributes(session.config()),
        state: session,
        schema,
        locations: target.locations.clone(),
        filters,
        columns,
        op,
        mode,
        base_snapshot_id: None,
        removed_whole: vec![],
        rows_removed_whole: 0,
        checked: ScanFiles::default(),
    };
    let (job, pass1) = job.plan().await?;
    Ok(Arc::new(DmlExec::new(pass1, job)))
}

/// The candidate files whose every row provably matches `filters`.
async fn proven_files(
    table: &Table,
    locations: &LocationMap,
    snapshot: &SnapshotRef,
    files: &[PlannedFile],
    columns: &[String],
    filters: &[Expr],
) -> Result<HashSet<String>> {
    let wanted: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    let mut proven = HashSet::new();
    // From the snapshot's listing, which planning the scan has just read (and cached).
    for (spec_id, file) in
        crate::scan::listed_data_files(table, locations, snapshot, &wanted).await?
    {
        let Some(spec) = metadata.partition_spec_by_id(spec_id) else {
            continue;
        };
        if FileStats::of(&file, spec, schema, columns).all_match(filters) {
            proven.insert(file.file_path().to_string());
        }
    }
    Ok(proven)
}

/// Everything a `DELETE` or `UPDATE` decided at planning time.
#[derive(Debug)]
pub(super) struct DmlJob {
    pub(super) table: Table,
    pub(super) store: Arc<dyn MetadataStore>,
    /// The planning session: pass 2 is planned with it once pass 1 has run.
    pub(super) state: SessionState,
    /// Whether the session distributes its plans over workers: pass 1 then reads on them (and
    /// writes the position delete files there), and pass 2 reads, changes and writes on them
    /// (each task reports the counts of its rows in the writer's output).
    pub(super) distributed: bool,
    pub(super) schema: SchemaRef,
    pub(super) locations: LocationMap,
    pub(super) filters: Vec<Expr>,
    /// Columns the condition names.
    pub(super) columns: Vec<String>,
    pub(super) op: DmlOp,
    pub(super) mode: WriteMode,
    pub(super) base_snapshot_id: Option<i64>,
    /// Files removed whole.
    pub(super) removed_whole: Vec<PlannedFile>,
    /// Rows of the files removed whole that no delete applies to.
    pub(super) rows_removed_whole: u64,
    /// Files pass 1 reads.
    pub(super) checked: ScanFiles,
}

impl DmlJob {
    /// Chooses the files of the table's current snapshot: those removed whole and those pass 1
    /// reads (its plan is returned).
    async fn plan(mut self) -> Result<(Self, Option<Arc<dyn ExecutionPlan>>)> {
        let table = self.table.clone();
        let metadata = table.metadata();
        let Some(snapshot) = metadata.current_snapshot() else {
            return Ok((self, None));
        };
        self.base_snapshot_id = Some(snapshot.snapshot_id());
        let snapshot_schema = snapshot.schema(metadata).df()?;
        let filter = FileFilter::new(
            &self.filters,
            &unprunable_columns(metadata, metadata.current_schema(), &snapshot_schema),
            metadata.current_schema().clone(),
        );
        let threshold = IcebergOptions::from_config(self.state.config_options()).planning_threshold;
        let candidates =
            plan_files_pruned(&table, &self.locations, snapshot, &filter, threshold).await?;

        // Files whose every row matches go whole, unread (their rows are counted from the
        // manifest when no delete applies to them, else by pass 1). UPDATE rewrites them all.
        let whole = if matches!(self.op, DmlOp::Update(_)) {
            HashSet::new()
        } else if self.filters.is_empty() {
            candidates.files.iter().map(|f| f.path.clone()).collect()
        } else {
            proven_files(
                &table,
                &self.locations,
                snapshot,
                &candidates.files,
                &self.columns,
                &self.filters,
            )
            .await?
        };
        let mut to_check = vec![];
        for f in candidates.files {
            if whole.contains(&f.path) {
                if f.is_clean() {
                    self.rows_removed_whole += f.record_count;
                } else {
                    // Its live rows are counted by pass 1 (all of them match).
                    to_check.push(f.clone());
                }
                self.removed_whole.push(f);
            } else {
                to_check.push(f);
            }
        }
        self.checked = ScanFiles {
            files: to_check,
            equality_deletes: candidates.equality_deletes,
            streamed: candidates.streamed,
        };
        let pass1 = match self.checked.files.is_empty() {
            true => None,
            false => Some(self.matching_files_plan(&self.state).await?),
        };
        // Distributed, merge-on-read writes the position delete files where the rows are
        // found: each worker task those of the data files hashed to it.
        let pass1 = match pass1 {
            Some(plan) if self.distributed && self.mode == WriteMode::MergeOnRead => {
                let whole = self.removed_whole.iter().map(|f| f.path.clone()).collect();
                Some(Arc::new(PositionDeleteWriterExec::try_new(
                    plan,
                    table.clone(),
                    self.locations.clone(),
                    self.checked.files.clone(),
                    whole,
                )?) as Arc<dyn ExecutionPlan>)
            }
            other => other,
        };
        Ok((self, pass1))
    }

    /// The same statement on a newer version of the table, planned again (pass 1 optimized
    /// like DataFusion optimizes every plan).
    async fn again(&self, table: Table) -> Result<(Self, Option<Arc<dyn ExecutionPlan>>)> {
        let job = Self {
            schema: arrow_schema(table.metadata().current_schema())?,
            table,
            store: Arc::clone(&self.store),
            state: self.state.clone(),
            distributed: self.distributed,
            locations: self.locations.clone(),
            filters: self.filters.clone(),
            columns: self.columns.clone(),
            op: self.op.clone(),
            mode: self.mode,
            base_snapshot_id: None,
            removed_whole: vec![],
            rows_removed_whole: 0,
            checked: ScanFiles::default(),
        };
        let (job, pass1) = job.plan().await?;
        let pass1 = match pass1 {
            // One stream, as the statement node requires of its input when distributed.
            Some(plan) if job.distributed => Some(
                job.executable(Arc::new(CoalescePartitionsExec::new(plan)))
                    .await?,
            ),
            Some(plan) => Some(super::core::optimized(&job.state, plan)?),
            None => None,
        };
        Ok((job, pass1))
    }

    /// `plan` made ready to run: through the physical optimizer rules of the session, and on a
    /// coordinator also distributed over its workers (through the session's query planner).
    async fn executable(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        match self.distributed {
            true => super::guard::through_planner(&self.state, plan).await,
            false => super::core::optimized(&self.state, plan),
        }
    }

    fn condition(&self) -> Option<Expr> {
        conjunction(self.filters.clone())
    }

    /// A physical form of the condition over `schema`.
    fn physical_condition(&self, schema: &SchemaRef) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        self.condition()
            .map(|c| self.state.create_physical_expr(c, &df_schema))
            .transpose()
    }

    /// Pass 1: the `_file` of every live row that matches, over the checked files (and its
    /// `_pos` for merge-on-read).
    async fn matching_files_plan(&self, state: &SessionState) -> Result<Arc<dyn ExecutionPlan>> {
        let projection: Vec<usize> = self
            .columns
            .iter()
            .map(|c| self.schema.index_of(c))
            .collect::<std::result::Result<_, _>>()?;
        let req = ScanRequest {
            table: &self.table,
            read_schema: self.table.metadata().current_schema(),
            schema: &self.schema,
            projection: Some(&projection),
            filtered: true,
            limit: None,
            locations: &self.locations,
            stores: self.store.object_stores(),
            file_column: true,
            position_column: self.mode == WriteMode::MergeOnRead,
            row_lineage: false,
        };
        let mut plan = plan_statement_scan(state, &req, &self.checked).await?;
        if let Some(condition) = self.physical_condition(&plan.schema())? {
            plan = Arc::new(FilterExec::try_new(condition, plan)?);
        }
        let schema = plan.schema();
        let mut output = vec![FILE_COLUMN];
        if req.position_column {
            output.push(POSITION_COLUMN);
        }
        let exprs = output
            .into_iter()
            .map(|name| {
                Ok((
                    Arc::new(Column::new(name, schema.index_of(name)?)) as Arc<dyn PhysicalExpr>,
                    name.to_string(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }

    /// Pass 2: the rows of `files` after the change, written as new data files.
    async fn rewrite_plan(
        &self,
        files: Vec<PlannedFile>,
        written: WrittenFiles,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let scan_files = ScanFiles {
            files,
            equality_deletes: self.checked.equality_deletes.clone(),
            streamed: self.checked.streamed,
        };
        // On a table with row lineage the rows moved to new files keep their ids; the ones the
        // statement changes take the new files' sequence number.
        let lineage = lineage::has_row_lineage(self.table.metadata());
        let read_schema = lineage::rows_schema(self.table.metadata())?;
        let schema = match lineage {
            true => arrow_schema(&read_schema)?,
            false => Arc::clone(&self.schema),
        };
        let req = ScanRequest {
            table: &self.table,
            read_schema: &read_schema,
            schema: &schema,
            projection: None,
            filtered: true,
            limit: None,
            locations: &self.locations,
            stores: self.store.object_stores(),
            file_column: false,
            position_column: false,
            row_lineage: lineage,
        };
        let scan = plan_statement_scan(&self.state, &req, &scan_files).await?;
        let schema = scan.schema();
        let condition = self
            .physical_condition(&schema)?
            .unwrap_or_else(|| datafusion::physical_plan::expressions::lit(true));
        let change = match &self.op {
            DmlOp::Delete => RowChange::Delete,
            DmlOp::Update(assignments) => {
                let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
                let mut assignments: Vec<_> = assignments
                    .iter()
                    .map(|(column, value)| {
                        Ok((
                            schema.index_of(column)?,
                            self.state.create_physical_expr(value.clone(), &df_schema)?,
                        ))
                    })
                    .collect::<Result<_>>()?;
                if lineage {
                    assignments.push((
                        schema.index_of(lineage::LAST_UPDATED_SEQUENCE_NUMBER)?,
                        lineage::null_sequence_number(),
                    ));
                }
                match self.mode {
                    WriteMode::CopyOnWrite => RowChange::Update(assignments),
                    WriteMode::MergeOnRead => RowChange::UpdateSelected(assignments),
                }
            }
        };
        let counts = Arc::new(ChangeCounts::default());
        let keep: Arc<dyn ExecutionPlan> = Arc::new(ChangeRowsExec::try_new(
            scan,
            condition,
            change,
            Arc::clone(&counts),
        )?);
        let sort = sort_requirement(&self.table, &keep.schema())?;
        // Distributed, each task sorts and writes its own rows: the change's counts reach the
        // writer in the same task, and no task's rows all go to one process.
        let plan: Arc<dyn ExecutionPlan> = Arc::new(
            DataFileWriterExec::try_new(keep, self.table.clone(), sort, written)?
                .with_row_lineage(lineage)?
                .with_local_sort(self.distributed)
                .with_tally(counts),
        );
        // The rules DataFusion runs on every plan: the sort the writer requires, among others.
        self.executable(plan).await
    }
}

/// Runs a `DELETE` or `UPDATE`: pass 1 (its child), pass 2, verification and the commit. One
/// output row: `count`, the rows deleted or updated. Shown as `DeleteExec` / `UpdateExec`.
#[derive(Debug)]
pub struct DmlExec {
    pass1: Option<Arc<dyn ExecutionPlan>>,
    job: Arc<DmlJob>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl DmlExec {
    fn new(pass1: Option<Arc<dyn ExecutionPlan>>, job: DmlJob) -> Self {
        Self::with_job(pass1, Arc::new(job))
    }

    fn with_job(pass1: Option<Arc<dyn ExecutionPlan>>, job: Arc<DmlJob>) -> Self {
        let properties = super::core::count_properties();
        Self {
            pass1,
            job,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        }
    }
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let job = &self.job;
        write!(
            f,
            "{}: table={}, mode={}, removed_whole={}, checked={}",
            self.name(),
            job.table.identifier(),
            job.mode.name(),
            job.removed_whole.len(),
            job.checked.files.len(),
        )?;
        if let DmlOp::Update(assignments) = &job.op {
            let set: Vec<String> = assignments
                .iter()
                .map(|(c, v)| format!("{c} = {v}"))
                .collect();
            write!(f, ", set=[{}]", set.join(", "))?;
        }
        if let Some(c) = job.condition() {
            write!(f, ", condition={c}")?;
        }
        Ok(())
    }
}

/// Adds each row's file to `counts`.
fn count_files(batch: &RecordBatch, counts: &mut HashMap<String, u64>) -> Result<()> {
    let files = super::core::FileKeys::of(batch.column(0))?;
    let mut per_key = vec![0u64; files.names.len()];
    for &k in &files.keys {
        per_key[k] += 1;
    }
    for (k, n) in per_key.into_iter().enumerate() {
        if n > 0 {
            *counts.entry(files.names.value(k).to_string()).or_default() += n;
        }
    }
    Ok(())
}

struct Counters {
    rows_deleted: datafusion::physical_plan::metrics::Count,
    files_removed: datafusion::physical_plan::metrics::Count,
    files_rewritten: datafusion::physical_plan::metrics::Count,
    rows_rewritten: datafusion::physical_plan::metrics::Count,
    files_spliced: datafusion::physical_plan::metrics::Count,
    splice_fallbacks: datafusion::physical_plan::metrics::Count,
    files_written: datafusion::physical_plan::metrics::Count,
    delete_files_removed: datafusion::physical_plan::metrics::Count,
    delete_files_written: datafusion::physical_plan::metrics::Count,
    commit_attempts: datafusion::physical_plan::metrics::Count,
    statement_attempts: datafusion::physical_plan::metrics::Count,
}

/// Runs the statement; when a concurrent commit changed what it read, plans and runs it again on
/// the new table state, up to the table's `commit.retry.num-retries` times.
async fn run(
    mut job: Arc<DmlJob>,
    mut pass1: Option<Arc<dyn ExecutionPlan>>,
    context: Arc<TaskContext>,
    m: Counters,
) -> Result<u64> {
    let retries = job
        .table
        .metadata()
        .table_properties()
        .df()?
        .commit_num_retries;
    let mut attempt = 0;
    loop {
        attempt += 1;
        m.statement_attempts.add(1);
        match run_once(Arc::clone(&job), pass1.clone(), Arc::clone(&context), &m).await {
            Err(e) if is_concurrent_change(&e) && attempt <= retries => {
                log::info!(
                    "{} on '{}' runs again: {e}",
                    job.op.sql(),
                    job.table.identifier()
                );
                let table = Arc::clone(&job.store).load(job.table.identifier()).await?;
                let (again, plan) = job.again(table).await?;
                job = Arc::new(again);
                pass1 = plan;
            }
            other => return other,
        }
    }
}

async fn run_once(
    job: Arc<DmlJob>,
    pass1: Option<Arc<dyn ExecutionPlan>>,
    context: Arc<TaskContext>,
    m: &Counters,
) -> Result<u64> {
    let mor = job.mode == WriteMode::MergeOnRead;
    let written = WrittenFiles::default();
    // Pass 1: matching live rows per file (merge-on-read: written as position deletes).
    let mut matched: HashMap<String, u64> = HashMap::new();
    let mut delete_files: Vec<NewFile> = vec![];
    let mut replaced = RemovedDeletes::default();
    if let Some(plan) = pass1 {
        if mor && job.distributed {
            // The workers wrote the delete files: their rows report them.
            let result: Result<Reported> = async {
                let mut reported = Reported::default();
                let mut stream = execute_stream(plan, Arc::clone(&context))?;
                while let Some(batch) = stream.next().await {
                    reported.add(&batch?, job.table.metadata(), &written)?;
                }
                Ok(reported)
            }
            .await;
            match result {
                Ok(reported) => {
                    matched = reported.counts;
                    (delete_files, replaced) = super::deletes::fold(reported.files);
                }
                Err(e) => {
                    written.remove_all(job.table.file_io()).await;
                    return Err(e);
                }
            }
        } else if mor {
            match write_position_deletes(&job, plan, &context, &written).await {
                Ok((counts, files)) => {
                    matched = counts;
                    (delete_files, replaced) = super::deletes::fold(files);
                }
                Err(e) => {
                    written.remove_all(job.table.file_io()).await;
                    return Err(e);
                }
            }
        } else {
            let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(plan));
            let mut stream = execute_stream(plan, Arc::clone(&context))?;
            while let Some(batch) = stream.next().await {
                count_files(&batch?, &mut matched)?;
            }
        }
    }
    let whole: HashSet<&str> = job.removed_whole.iter().map(|f| f.path.as_str()).collect();
    let touched: Vec<PlannedFile> = job
        .checked
        .files
        .iter()
        .filter(|f| !whole.contains(f.path.as_str()) && matched.contains_key(&f.path))
        .cloned()
        .collect();
    let deleted: u64 = job.rows_removed_whole + matched.values().sum::<u64>();
    let matched_in_touched: u64 = touched.iter().map(|f| matched[&f.path]).sum();

    let mut removed: Vec<&PlannedFile> = job.removed_whole.iter().collect();
    if !mor {
        removed.extend(touched.iter());
    }
    if removed.is_empty() && delete_files.is_empty() {
        return Ok(0);
    }
    if let DmlOp::Update(assignments) = &job.op {
        if assignments.is_empty() {
            return Ok(deleted);
        }
    }

    // Pass 2: copy-on-write rewrites the touched files; a merge-on-read UPDATE writes the new
    // versions of the matching rows.
    let mut added: Vec<NewFile> = vec![];
    let rewrite = !touched.is_empty() && (!mor || matches!(job.op, DmlOp::Update(_)));
    if rewrite {
        let result: Result<()> = async {
            // Copy-on-write UPDATE by column splice, when it applies.
            let spliced = match mor {
                true => None,
                false => splice_update(&job, &touched, &context, &written, m).await?,
            };
            if let Some((files, selected)) = spliced {
                let read: u64 = touched.iter().map(|f| f.record_count).sum();
                let written_rows: u64 = files.iter().map(|f| f.file.record_count()).sum();
                added.extend(files);
                if selected != matched_in_touched || written_rows != read {
                    return Err(DataFusionError::Execution(format!(
                        "UPDATE on table '{}' aborted, nothing was changed: the splice does not \
                         add up (pass 1 matched {matched_in_touched} rows in the rewritten \
                         files; the splice changed {selected} and wrote {written_rows} of \
                         their {read} rows)",
                        job.table.identifier()
                    )));
                }
                m.rows_rewritten.add(written_rows as usize);
                return Ok(());
            }
            let plan = job.rewrite_plan(touched.clone(), written.clone()).await?;
            let (mut read, mut selected) = (0, 0);
            let files = run_writers(plan, &context, job.table.metadata(), &written, |batch| {
                // Each writing task reports its counts (one process: one tally of them all).
                let (r, s) = decode_tally(batch)?;
                read += r;
                selected += s;
                Ok(())
            })
            .await?;
            added.extend(files);
            // Self-check: the two passes must agree row for row.
            let written_rows: u64 = added.iter().map(|f| f.file.record_count()).sum();
            let expected = match (&job.op, mor) {
                (DmlOp::Delete, _) => read.checked_sub(selected),
                (DmlOp::Update(_), false) => Some(read),
                (DmlOp::Update(_), true) => Some(selected),
            };
            if selected != matched_in_touched || expected != Some(written_rows) {
                return Err(DataFusionError::Execution(format!(
                    "{} on table '{}' aborted, nothing was changed: the rewrite does not add \
                     up (pass 1 matched {matched_in_touched} rows in the rewritten files; pass 2 \
                     read {read}, matched {selected}, wrote {written_rows})",
                    job.op.sql(),
                    job.table.identifier()
                )));
            }
            m.rows_rewritten.add(written_rows as usize);
            Ok(())
        }
        .await;
        if let Err(e) = result {
            written.remove_all(job.table.file_io()).await;
            return Err(e.context(format!(
                "{} on table '{}' failed while rewriting {} file(s); nothing was changed",
                job.op.sql(),
                job.table.identifier(),
                touched.len()
            )));
        }
    }

    let threshold = IcebergOptions::from_config(job.state.config_options()).planning_threshold;
    let (removed_files, removed_vectors, delete_files_removed) = removed_with_deletes(
        &job.table,
        &job.locations,
        threshold,
        &removed,
        &job.checked.equality_deletes,
        replaced,
    )
    .await?;
    let read_files: HashSet<String> = touched.iter().map(|f| f.path.clone()).collect();
    let (filters, columns) = (job.filters.clone(), job.columns.clone());
    let may_match: crate::snapshot::MayMatch =
        Arc::new(move |metadata: &TableMetadata, spec_id: i32, file| {
            let Some(spec) = metadata.partition_spec_by_id(spec_id) else {
                return true;
            };
            !FileStats::of(file, spec, metadata.current_schema(), &columns).none_match(&filters)
        });
    let changes = SnapshotChanges {
        operation: if added.is_empty() {
            Operation::Delete
        } else {
            Operation::Overwrite
        },
        added_data_files: added,
        added_delete_files: delete_files,
        removed_files,
        removed_deletion_vectors: removed_vectors,
        summary_properties: HashMap::new(),
        validation: Some(Validation {
            base_snapshot_id: job.base_snapshot_id,
            may_match,
            read_files,
            equality_deletes_carry_over: false,
        }),
        data_sequence_number: None,
        rewrite_data_manifests: false,
    };
    let files_written = changes.added_data_files.len();
    let delete_files_written = changes.added_delete_files.len();
    let outcome = commit_or_clean_up(&job.store, &job.table, changes, &written).await?;
    m.commit_attempts.add(outcome.attempts as usize);
    m.rows_deleted.add(deleted as usize);
    m.files_removed.add(job.removed_whole.len());
    m.files_rewritten.add(if mor { 0 } else { touched.len() });
    m.files_written.add(files_written);
    m.delete_files_written.add(delete_files_written);
    m.delete_files_removed.add(delete_files_removed);
    Ok(deleted)
}

/// Copy-on-write `UPDATE` by column splice (see [`super::splice`]): when the assigned columns
/// neither partition nor sort the table and no delete applies to the touched files, each file is
/// written again with the assigned columns changed where the condition holds and every other
/// column chunk copied. Returns the new files and the rows changed, or `None` when the splice
/// does not apply or a file cannot be spliced (then nothing it wrote is left). The files it
/// wrote are recorded in `written`.
async fn splice_update(
    job: &DmlJob,
    touched: &[PlannedFile],
    context: &Arc<TaskContext>,
    written: &WrittenFiles,
    m: &Counters,
) -> Result<Option<(Vec<NewFile>, u64)>> {
    let DmlOp::Update(assignments) = &job.op else {
        return Ok(None);
    };
    let metadata = job.table.metadata();
    if job.distributed || lineage::has_row_lineage(metadata) || assignments.is_empty() {
        return Ok(None);
    }
    let schema = &job.schema;
    let mut assigned: Vec<(usize, &Expr)> = assignments
        .iter()
        .map(|(name, value)| Ok((schema.index_of(name)?, value)))
        .collect::<Result<_>>()?;
    assigned.sort_by_key(|(c, _)| *c);
    let columns: Vec<usize> = assigned.iter().map(|(c, _)| *c).collect();
    let files = ScanFiles {
        files: touched.to_vec(),
        equality_deletes: job.checked.equality_deletes.clone(),
        streamed: job.checked.streamed,
    };
    if moves_rows(metadata, &columns) || !files_allow_splice(&files, metadata) {
        return Ok(None);
    }
    // The columns the condition and the values read.
    let condition = job.condition();
    let mut used = HashSet::new();
    for e in condition.iter().chain(assigned.iter().map(|(_, v)| *v)) {
        expr_to_columns(e, &mut used)?;
    }
    let inputs: Vec<usize> = used
        .iter()
        .map(|c| schema.index_of(&c.name))
        .collect::<std::result::Result<_, _>>()?;
    // Columns not read are NULL in the rows the expressions see, so all are nullable.
    let nullable: SchemaRef = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let df_schema = DFSchema::try_from(nullable.as_ref().clone())?;
    let physical = |e: Expr| job.state.create_physical_expr(e, &df_schema);
    let computed = Arc::new(Computed {
        schema: Arc::clone(&nullable),
        condition: physical(condition.unwrap_or_else(|| datafusion::logical_expr::lit(true)))?,
        values: assigned
            .iter()
            .map(|(c, v)| Ok((*c, physical((*v).clone())?)))
            .collect::<Result<_>>()?,
    });
    let splicer = Arc::new(Splicer::new(
        &job.table,
        &job.locations,
        columns,
        &inputs,
        context,
    )?);
    let attempt = WrittenFiles::default();
    let values = move |_: &str| Ok(NewValues::Computed(Arc::clone(&computed)));
    match splice_files(splicer, values, touched, &attempt).await {
        Ok(Some((files, changed))) => {
            for location in attempt.take() {
                written.record(location);
            }
            m.files_spliced.add(files.len());
            Ok(Some((files, changed)))
        }
        Ok(None) => {
            attempt.remove_all(job.table.file_io()).await;
            m.splice_fallbacks.add(1);
            Ok(None)
        }
        Err(e) => {
            attempt.remove_all(job.table.file_io()).await;
            Err(e)
        }
    }
}

impl ExecutionPlan for DmlExec {
    fn name(&self) -> &str {
        match self.job.op {
            DmlOp::Delete => "DeleteExec",
            DmlOp::Update(_) => "UpdateExec",
        }
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.pass1.iter().collect()
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.pass1.iter().count()]
    }

    fn required_input_distribution(&self) -> Vec<datafusion::physical_expr::Distribution> {
        use datafusion::physical_expr::Distribution;
        // Distributed, pass 1 reaches this node as one stream from the workers (the planner
        // puts the network boundary where the partitions merge).
        let d = match self.job.distributed {
            true => Distribution::SinglePartition,
            false => Distribution::UnspecifiedDistribution,
        };
        vec![d; self.pass1.iter().count()]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != self.pass1.iter().count() {
            return Err(DataFusionError::Internal(
                "DmlExec got a different number of children".into(),
            ));
        }
        Ok(Arc::new(Self::with_job(
            children.into_iter().next(),
            Arc::clone(&self.job),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        crate::dml::core::only_partition("DmlExec", partition)?;
        let counter = |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, 0);
        let m = Counters {
            rows_deleted: counter("rows_deleted"),
            files_removed: counter("files_removed_whole"),
            files_rewritten: counter("files_rewritten"),
            rows_rewritten: counter("rows_rewritten"),
            files_spliced: counter("files_spliced"),
            splice_fallbacks: counter("splice_fallbacks"),
            files_written: counter("files_written"),
            delete_files_removed: counter("delete_files_removed"),
            delete_files_written: counter("delete_files_written"),
            commit_attempts: counter("commit_attempts"),
            statement_attempts: counter("statement_attempts"),
        };
        let fut = run(Arc::clone(&self.job), self.pass1.clone(), context, m);
        Ok(crate::dml::core::count_stream(fut))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
