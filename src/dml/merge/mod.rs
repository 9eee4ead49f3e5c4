//! `MERGE INTO target USING source ON c WHEN …`: DataFusion plans the statement and hands the
//! source's plan, the `ON` condition and the clauses to
//! [`TableProvider::merge_into`](datafusion::catalog::TableProvider::merge_into); this module
//! runs it.
//!
//! ```text
//!  planning (no side effects; EXPLAIN stops here)
//!    clauses checked and compiled against the join rows; ON split into hash keys + filter
//!  MergeExec (execute)
//!    source ─► read once (in memory, or spilled), min/max of each key
//!    target files ─► pruned by ON's target-only conjuncts and the keys' bounds (unless WHEN
//!                    NOT MATCHED BY SOURCE needs every row)
//!    pass 1  join(source, target scan with deletes applied, + _file, _pos) ─► MergeRowsExec
//!              ─► new rows (updates, inserts) ─► [sort, spilling] ─► DataFileWriterExec
//!              ─► positions of the target rows updated or deleted (bitmaps, reserved)
//!    merge-on-read: one position delete file per data file with changed rows
//!    copy-on-write pass 2: scan(files with changed rows) ─► DropPositionsExec ─► writer
//!    verify  rows written = updated + inserted; positions = updated + deleted; pass 2 dropped
//!            exactly the changed positions
//!    commit  one overwrite snapshot (append when it only inserts), validated against
//!            concurrent commits (on a conflict the statement runs again on the new state)
//! ```

mod clauses;
mod join;
mod positions;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, DFSchemaRef, JoinType, TableReference};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::dml::MergeIntoClause;
use datafusion::logical_expr::utils::expr_to_columns;
use datafusion::logical_expr::{col, lit, Expr};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::expressions::{self, Column};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, SpillMetrics,
};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    execute_stream, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use iceberg::spec::{Operation, TableMetadata};
use iceberg::table::Table;

use self::clauses::{clause_columns, compile, Clause, ClauseKind, MergeRowsExec, RowLayout, Sides};
use self::join::{join_plan, read_source, split_on, JoinMode, JoinSpec, KeyBounds};
use self::positions::{DropCounts, DropPositionsExec, MergePositions, PositionMap};
use super::core::{commit_or_clean_up, removed_with_deletes};
use super::statement::{DmlTarget, WriteMode};
use crate::catalog::MetadataStore;
use crate::error::IcebergResultExt;
use crate::location::LocationMap;
use crate::physical_plan::commit::count_schema;
use crate::physical_plan::positional_delete::POSITION_COLUMN;
use crate::physical_plan::without_work_stealing;
use crate::physical_plan::write::{
    decode_data_files, sort_requirement, write_file_position_deletes, DataFileWriterExec,
    WrittenFiles,
};
use crate::scan::strict::FileStats;
use crate::scan::{plan_files_pruned, unprunable_columns, FileFilter, PlannedFile, ScanFiles};
use crate::snapshot::{is_concurrent_change, NewFile, SnapshotChanges, Validation};
use crate::table::provider::arrow_schema;
use crate::table::scan_plan::{plan_scan, ScanRequest, FILE_COLUMN};
use crate::IcebergOptions;

/// The source-side marker column: TRUE on join rows with a source row.
const SOURCE_MARKER: &str = "__merge_source_row";

/// Plans `MERGE INTO target USING source ON on clauses…`. `merge_schema` is the target's
/// columns (qualified by the table's name) followed by the source's.
pub(crate) async fn plan_merge(
    target: DmlTarget<'_>,
    state: &dyn Session,
    source: Arc<dyn ExecutionPlan>,
    merge_schema: DFSchemaRef,
    on: Expr,
    clauses: Vec<MergeIntoClause>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let session = state
        .as_any()
        .downcast_ref::<SessionState>()
        .ok_or_else(|| {
            DataFusionError::NotImplemented(
                "MERGE on Iceberg tables needs DataFusion's SessionState".into(),
            )
        })?
        .clone();
    let table = target.table;
    let metadata = table.metadata();
    let table_schema = arrow_schema(metadata.current_schema())?;
    let source_columns = source.schema().fields().len();
    let target_fields = merge_schema.fields().len().checked_sub(source_columns);
    if target_fields != Some(table_schema.fields().len()) {
        return Err(DataFusionError::Internal(format!(
            "MERGE schema has {} fields for a table of {} and a source of {source_columns}",
            merge_schema.fields().len(),
            table_schema.fields().len()
        )));
    }
    let sides = Sides {
        merge_schema: &merge_schema,
        target_fields: table_schema.fields().len(),
    };
    clauses::check_expression(&on, "ON condition")?;
    let (mut read, updates) = clause_columns(&clauses, &sides, &table_schema)?;
    sides.used(&on, &mut read)?;
    let target_columns: Vec<usize> = match updates {
        true => (0..table_schema.fields().len()).collect(),
        false => {
            let mut v: Vec<usize> = read.into_iter().collect();
            v.sort();
            v
        }
    };
    let layout = Arc::new(row_layout(&merge_schema, source_columns, target_columns)?);
    let compiled = compile(&clauses, &layout, &table_schema, &session)?;
    let inserts = compiled
        .iter()
        .any(|c| c.kind == ClauseKind::NotMatchedByTarget);
    let by_source = compiled
        .iter()
        .any(|c| c.kind == ClauseKind::NotMatchedBySource);
    // The join's left side is the source.
    let join_type = match (inserts, by_source) {
        (true, true) => JoinType::Full,
        (true, false) => JoinType::Left,
        (false, true) => JoinType::Right,
        (false, false) => JoinType::Inner,
    };
    let split = split_on(&on, &sides)?;
    let spec = JoinSpec::try_new(&split, &layout, join_type, &session, on.to_string())?;
    // Target rows that fail ON's target-only conjuncts match nothing: only WHEN NOT MATCHED BY
    // SOURCE could change them.
    let prune = match by_source {
        true => vec![],
        false => split
            .target_only
            .iter()
            .map(unqualified)
            .collect::<Result<Vec<_>>>()?,
    };
    let options = IcebergOptions::from_config(state.config_options());
    let mode = WriteMode::from_setting(
        metadata,
        &options.merge_mode,
        "write.merge.mode",
        "iceberg.merge_mode",
    )?;
    let job = MergeJob {
        table: table.clone(),
        store: Arc::clone(&target.store),
        state: session,
        locations: target.locations.clone(),
        table_schema,
        schema_id: metadata.current_schema_id(),
        layout,
        clauses: compiled.into(),
        spec,
        mode,
        prune,
        by_source,
    };
    Ok(Arc::new(MergeExec::new(source, Arc::new(job))))
}

/// `e` with its columns' qualifiers dropped (the target's columns, by name in the table).
fn unqualified(e: &Expr) -> Result<Expr> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    e.clone()
        .transform(|x| match x {
            Expr::Column(c) if c.relation.is_some() => {
                Ok(Transformed::yes(Expr::Column(c.name.as_str().into())))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
}

/// The join rows: the source's columns, the marker, the target columns read, file, position.
fn row_layout(
    merge_schema: &DFSchema,
    source_columns: usize,
    target_columns: Vec<usize>,
) -> Result<RowLayout> {
    let target_fields = merge_schema.fields().len() - source_columns;
    let nullable = |f: &Field| Arc::new(f.clone().with_nullable(true));
    let mut fields: Vec<(Option<TableReference>, Arc<Field>)> = vec![];
    for (q, f) in merge_schema.iter().skip(target_fields) {
        fields.push((q.cloned(), nullable(f)));
    }
    fields.push((
        None,
        nullable(&Field::new(SOURCE_MARKER, DataType::Boolean, true)),
    ));
    for &c in &target_columns {
        let (q, f) = merge_schema.qualified_field(c);
        fields.push((q.cloned(), nullable(f)));
    }
    fields.push((None, nullable(&file_field())));
    fields.push((
        None,
        nullable(&Field::new(POSITION_COLUMN, DataType::Int64, true)),
    ));
    Ok(RowLayout {
        source_columns,
        target_columns,
        schema: Arc::new(DFSchema::new_with_metadata(fields, HashMap::new())?),
    })
}

fn file_field() -> Field {
    Field::new(
        FILE_COLUMN,
        DataType::Dictionary(Box::new(DataType::UInt16), Box::new(DataType::Utf8)),
        false,
    )
}

/// Everything a `MERGE` decided at planning time.
#[derive(Debug)]
struct MergeJob {
    table: Table,
    store: Arc<dyn MetadataStore>,
    state: SessionState,
    locations: LocationMap,
    table_schema: SchemaRef,
    schema_id: i32,
    layout: Arc<RowLayout>,
    clauses: Arc<[Clause]>,
    spec: JoinSpec,
    mode: WriteMode,
    /// Conjuncts over target columns (unqualified) a target row must pass to be changed.
    prune: Vec<Expr>,
    /// Whether WHEN NOT MATCHED BY SOURCE clauses exist (every target row may change).
    by_source: bool,
}

impl MergeJob {
    fn sql_table(&self) -> String {
        self.table.identifier().to_string()
    }

    /// The conjuncts a target file must possibly match to hold rows the statement changes, or
    /// `None` when every row may change. `Some(None)`: no row can (a key without any non-NULL
    /// source value).
    fn target_filters(&self, bounds: &[Option<KeyBounds>]) -> Option<Option<Vec<Expr>>> {
        if self.by_source {
            return None;
        }
        let mut filters = self.prune.clone();
        for ((_, column), b) in self.spec.bounded_columns.iter().zip(bounds) {
            match b {
                Some(b) => filters.push(
                    col(column.as_str())
                        .gt_eq(lit(b.min.clone()))
                        .and(col(column.as_str()).lt_eq(lit(b.max.clone()))),
                ),
                None => return Some(None),
            }
        }
        Some(Some(filters))
    }

    /// The data files of the current snapshot that may hold rows the statement changes.
    async fn target_files(&self, filters: &Option<Option<Vec<Expr>>>) -> Result<ScanFiles> {
        let metadata = self.table.metadata();
        let Some(snapshot) = metadata.current_snapshot() else {
            return Ok(ScanFiles::default());
        };
        let filters: Vec<Expr> = match filters {
            Some(None) => return Ok(ScanFiles::default()),
            Some(Some(f)) => f.clone(),
            None => vec![],
        };
        let snapshot_schema = snapshot.schema(metadata).df()?;
        let filter = FileFilter::new(
            &filters,
            &unprunable_columns(metadata, metadata.current_schema(), &snapshot_schema),
            metadata.current_schema().clone(),
        );
        plan_files_pruned(
            &self.table,
            &self.locations,
            snapshot,
            &filter,
            self.planning_threshold(),
        )
        .await
    }

    fn planning_threshold(&self) -> u64 {
        IcebergOptions::from_config(self.state.config_options()).planning_threshold
    }

    /// `plan` through the session's physical optimizer rules.
    fn optimized(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        super::core::optimized(&self.state, plan)
    }

    /// A scan of `files` (`projection` of the table's columns, or all) ending with each row's
    /// file and position.
    async fn scan(
        &self,
        files: &ScanFiles,
        projection: Option<&Vec<usize>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if files.files.is_empty() {
            let columns: Vec<usize> = match projection {
                Some(p) => p.clone(),
                None => (0..self.table_schema.fields().len()).collect(),
            };
            let mut fields: Vec<Field> = columns
                .iter()
                .map(|&c| self.table_schema.field(c).clone())
                .collect();
            fields.push(file_field());
            fields.push(Field::new(POSITION_COLUMN, DataType::Int64, false));
            return Ok(Arc::new(EmptyExec::new(Arc::new(Schema::new(fields)))));
        }
        let req = ScanRequest {
            table: &self.table,
            read_schema: self.table.metadata().current_schema(),
            schema: &self.table_schema,
            projection,
            filtered: true,
            limit: None,
            locations: &self.locations,
            file_column: true,
            position_column: true,
        };
        self.optimized(plan_scan(&self.state, &req, files).await?)
    }

    /// Writes `input` (rows of the table's schema) as data files, sorted by the table's sort
    /// order; returns the files.
    async fn write(
        &self,
        input: Arc<dyn ExecutionPlan>,
        written: &WrittenFiles,
        context: &Arc<TaskContext>,
    ) -> Result<Vec<NewFile>> {
        let sort = sort_requirement(&self.table, &input.schema())?;
        let input: Arc<dyn ExecutionPlan> = match &sort {
            Some(req) => {
                let ordering = LexOrdering::new(req.iter().map(|r| {
                    PhysicalSortExpr::new(Arc::clone(&r.expr), r.options.unwrap_or_default())
                }))
                .ok_or_else(|| DataFusionError::Internal("empty sort order".into()))?;
                let single: Arc<dyn ExecutionPlan> =
                    match input.output_partitioning().partition_count() {
                        1 => input,
                        _ => Arc::new(CoalescePartitionsExec::new(input)),
                    };
                Arc::new(SortExec::new(ordering, single))
            }
            None => input,
        };
        let writer: Arc<dyn ExecutionPlan> = Arc::new(DataFileWriterExec::try_new(
            input,
            self.table.clone(),
            sort,
            written.clone(),
        )?);
        let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(writer));
        let mut stream = execute_stream(plan, Arc::clone(context))?;
        let mut files = vec![];
        while let Some(batch) = stream.next().await {
            files.extend(decode_data_files(&batch?, self.table.metadata())?);
        }
        Ok(files)
    }

    /// The conflict check of the commit: concurrent data files that may hold rows the
    /// statement would have matched (every one when NOT MATCHED BY SOURCE may change any row).
    fn validation(
        &self,
        filters: &Option<Option<Vec<Expr>>>,
        read_files: HashSet<String>,
    ) -> Validation {
        let filters: Option<Vec<Expr>> = match filters {
            Some(Some(f)) if !f.is_empty() => Some(f.clone()),
            _ => None,
        };
        let may_match: crate::snapshot::MayMatch = match filters {
            None => Arc::new(|_: &TableMetadata, _: i32, _| true),
            Some(filters) => {
                let mut columns = HashSet::new();
                for f in &filters {
                    let _ = expr_to_columns(f, &mut columns);
                }
                let mut columns: Vec<String> = columns.into_iter().map(|c| c.name).collect();
                columns.sort();
                Arc::new(move |metadata: &TableMetadata, spec_id: i32, file| {
                    let Some(spec) = metadata.partition_spec_by_id(spec_id) else {
                        return true;
                    };
                    !FileStats::of(file, spec, metadata.current_schema(), &columns)
                        .none_match(&filters)
                })
            }
        };
        Validation {
            base_snapshot_id: self.table.metadata().current_snapshot_id(),
            may_match,
            read_files,
        }
    }
}

/// Runs a `MERGE`; its child is the source. One output row: `count`, the rows updated, deleted
/// and inserted (each kind is a metric).
#[derive(Debug)]
pub struct MergeExec {
    source: Arc<dyn ExecutionPlan>,
    job: Arc<MergeJob>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl MergeExec {
    fn new(source: Arc<dyn ExecutionPlan>, job: Arc<MergeJob>) -> Self {
        let properties = super::core::count_properties();
        Self {
            source,
            job,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        }
    }
}

impl DisplayAs for MergeExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let job = &self.job;
        let clauses: Vec<&str> = job.clauses.iter().map(|c| c.text.as_str()).collect();
        write!(
            f,
            "MergeExec: table={}, mode={}, join={} on {}, keys={}, clauses=[{}]",
            job.table.identifier(),
            job.mode.name(),
            job.spec.join_type,
            job.spec.text,
            job.spec.source_keys.len(),
            clauses.join("; "),
        )
    }
}

struct Counters {
    source_rows: Count,
    target_files: Count,
    rows_updated: Count,
    rows_deleted: Count,
    rows_inserted: Count,
    files_rewritten: Count,
    files_written: Count,
    delete_files_written: Count,
    delete_files_removed: Count,
    grace_partitions: Count,
    commit_attempts: Count,
    statement_attempts: Count,
    spill: SpillMetrics,
}

impl ExecutionPlan for MergeExec {
    fn name(&self) -> &str {
        "MergeExec"
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
        vec![&self.source]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let source = crate::physical_plan::single_child("MergeExec", children)?;
        Ok(Arc::new(Self::new(source, Arc::clone(&self.job))))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "MergeExec has one partition, asked for {partition}"
            )));
        }
        let counter = |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, 0);
        let m = Counters {
            source_rows: counter("source_rows"),
            target_files: counter("target_files_scanned"),
            rows_updated: counter("rows_updated"),
            rows_deleted: counter("rows_deleted"),
            rows_inserted: counter("rows_inserted"),
            files_rewritten: counter("files_rewritten"),
            files_written: counter("files_written"),
            delete_files_written: counter("delete_files_written"),
            delete_files_removed: counter("delete_files_removed"),
            grace_partitions: counter("grace_partitions"),
            commit_attempts: counter("commit_attempts"),
            statement_attempts: counter("statement_attempts"),
            spill: SpillMetrics::new(&self.metrics, 0),
        };
        let fut = run(
            Arc::clone(&self.job),
            Arc::clone(&self.source),
            without_work_stealing(context),
            m,
        );
        let stream = futures::stream::once(async move {
            let n = fut.await?;
            let array = Arc::new(UInt64Array::from(vec![n])) as ArrayRef;
            Ok(RecordBatch::try_new(count_schema(), vec![array])?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Runs the statement; on a conflicting concurrent commit, again on the new table state, up to
/// the table's `commit.retry.num-retries` times.
async fn run(
    mut job: Arc<MergeJob>,
    source: Arc<dyn ExecutionPlan>,
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
        match run_once(&job, Arc::clone(&source), &context, &m).await {
            Err(e) if is_concurrent_change(&e) && attempt <= retries => {
                log::info!("MERGE on '{}' runs again: {e}", job.sql_table());
                let table = Arc::clone(&job.store).load(job.table.identifier()).await?;
                if table.metadata().current_schema_id() != job.schema_id {
                    return Err(DataFusionError::Execution(format!(
                        "MERGE on table '{}' stopped: the table's schema changed while it ran; \
                         nothing was changed",
                        job.sql_table()
                    )));
                }
                let mut again = clone_job(&job);
                again.table = table;
                job = Arc::new(again);
            }
            other => return other,
        }
    }
}

fn clone_job(job: &MergeJob) -> MergeJob {
    MergeJob {
        table: job.table.clone(),
        store: Arc::clone(&job.store),
        state: job.state.clone(),
        locations: job.locations.clone(),
        table_schema: Arc::clone(&job.table_schema),
        schema_id: job.schema_id,
        layout: Arc::clone(&job.layout),
        clauses: Arc::clone(&job.clauses),
        spec: job.spec.clone(),
        mode: job.mode,
        prune: job.prune.clone(),
        by_source: job.by_source,
    }
}

/// The source's rows with the marker column.
fn with_marker(source: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = source.schema();
    let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            (
                Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>,
                f.name().clone(),
            )
        })
        .collect();
    exprs.push((expressions::lit(true), SOURCE_MARKER.to_string()));
    Ok(Arc::new(ProjectionExec::try_new(exprs, source)?))
}

async fn run_once(
    job: &MergeJob,
    source: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    m: &Counters,
) -> Result<u64> {
    let written = WrittenFiles::default();
    let result = changes(job, source, context, m, &written).await;
    let (changes, counts) = match result {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(0),
        Err(e) => {
            written.remove_all(job.table.file_io()).await;
            return Err(e);
        }
    };
    let files_written = changes.added_data_files.len();
    let delete_files_written = changes.added_delete_files.len();
    let outcome = commit_or_clean_up(&job.store, &job.table, changes, &written).await?;
    m.commit_attempts.add(outcome.attempts as usize);
    let (updated, deleted, inserted, rewritten, delete_files_removed) = counts;
    m.rows_updated.add(updated as usize);
    m.rows_deleted.add(deleted as usize);
    m.rows_inserted.add(inserted as usize);
    m.files_rewritten.add(rewritten);
    m.files_written.add(files_written);
    m.delete_files_written.add(delete_files_written);
    m.delete_files_removed.add(delete_files_removed);
    Ok(updated + deleted + inserted)
}

/// (updated, deleted, inserted, files rewritten, delete files removed).
type MergeCounts = (u64, u64, u64, usize, usize);

/// Both passes: the snapshot changes to commit, or `None` when the statement changes nothing.
async fn changes(
    job: &MergeJob,
    source: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    m: &Counters,
    written: &WrittenFiles,
) -> Result<Option<(SnapshotChanges, MergeCounts)>> {
    let fail = |what: String| {
        DataFusionError::Execution(format!(
            "MERGE on table '{}' aborted, nothing was changed: {what}",
            job.sql_table()
        ))
    };
    let read = read_source(with_marker(source)?, &job.spec, context, m.spill.clone()).await?;
    m.source_rows.add(read.rows as usize);
    let filters = job.target_filters(&read.bounds);
    let files = job.target_files(&filters).await?;
    m.target_files.add(files.files.len());
    let target = job.scan(&files, Some(&job.layout.target_columns)).await?;
    let (join, mode) = join_plan(
        read,
        target,
        &job.spec,
        &job.layout,
        context,
        m.spill.clone(),
    )?;
    if let JoinMode::Grace(n) = mode {
        m.grace_partitions.add(n);
    }
    let positions = Arc::new(MergePositions::new(
        MemoryConsumer::new("MergePositions")
            .with_can_spill(true)
            .register(context.memory_pool()),
    ));
    let rows: Arc<dyn ExecutionPlan> = Arc::new(MergeRowsExec::new(
        join,
        Arc::clone(&job.clauses),
        Arc::clone(&job.layout),
        Arc::clone(&job.table_schema),
        Arc::clone(&positions),
    ));
    let mut added = job.write(rows, written, context).await?;
    let (updated, deleted, inserted) = positions.counts();
    let new_rows: u64 = added.iter().map(|f| f.file.record_count()).sum();
    if new_rows != updated + inserted {
        return Err(fail(format!(
            "it wrote {new_rows} new rows for {updated} updated and {inserted} inserted"
        )));
    }
    let changed = positions.take_changed()?;
    drop(positions);
    let changed_rows: u64 = changed.values().map(|b| b.len()).sum();
    if changed_rows != updated + deleted {
        return Err(fail(format!(
            "it holds {changed_rows} changed positions for {updated} updated and {deleted} \
             deleted rows"
        )));
    }
    let by_path: HashMap<&str, &PlannedFile> =
        files.files.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut touched: Vec<PlannedFile> = vec![];
    for path in changed.keys() {
        let file = by_path
            .get(path.as_str())
            .ok_or_else(|| fail(format!("{path} was changed but not planned")))?;
        touched.push((*file).clone());
    }
    touched.sort_by(|a, b| a.path.cmp(&b.path));
    if added.is_empty() && touched.is_empty() {
        return Ok(None);
    }

    let mut delete_files = vec![];
    let mut rewritten = 0;
    if !touched.is_empty() {
        match job.mode {
            WriteMode::MergeOnRead => {
                delete_files = write_deletes(job, &touched, &changed, written).await?;
            }
            WriteMode::CopyOnWrite => {
                let counts = Arc::new(DropCounts::default());
                let rewrite = ScanFiles {
                    files: touched.clone(),
                    equality_deletes: files.equality_deletes.clone(),
                    streamed: files.streamed,
                };
                let scan = job.scan(&rewrite, None).await?;
                let keep: Arc<dyn ExecutionPlan> = Arc::new(DropPositionsExec::new(
                    scan,
                    Arc::new(changed),
                    Arc::clone(&job.table_schema),
                    Arc::clone(&counts),
                ));
                let kept = job.write(keep, written, context).await?;
                let read = counts.read.load(std::sync::atomic::Ordering::Relaxed);
                let dropped = counts.dropped.load(std::sync::atomic::Ordering::Relaxed);
                let kept_rows: u64 = kept.iter().map(|f| f.file.record_count()).sum();
                if dropped != changed_rows || read.checked_sub(dropped) != Some(kept_rows) {
                    return Err(fail(format!(
                        "the rewrite does not add up (pass 1 changed {changed_rows} rows in the \
                         rewritten files; pass 2 read {read}, dropped {dropped}, wrote \
                         {kept_rows})"
                    )));
                }
                rewritten = touched.len();
                added.extend(kept);
            }
        }
    }
    let removed: Vec<&PlannedFile> = match job.mode {
        WriteMode::CopyOnWrite => touched.iter().collect(),
        WriteMode::MergeOnRead => vec![],
    };
    let (removed_files, delete_files_removed) = match removed.is_empty() {
        true => (HashSet::new(), 0),
        false => {
            removed_with_deletes(
                &job.table,
                &job.locations,
                job.planning_threshold(),
                &removed,
                &files.equality_deletes,
            )
            .await?
        }
    };
    let read_files: HashSet<String> = touched.iter().map(|f| f.path.clone()).collect();
    let operation = match removed_files.is_empty() && delete_files.is_empty() {
        true => Operation::Append,
        false => Operation::Overwrite,
    };
    let changes = SnapshotChanges {
        operation,
        added_data_files: added,
        added_delete_files: delete_files,
        removed_files,
        summary_properties: HashMap::new(),
        validation: Some(job.validation(&filters, read_files)),
    };
    Ok(Some((
        changes,
        (updated, deleted, inserted, rewritten, delete_files_removed),
    )))
}

/// Merge-on-read: one position delete file per data file with changed rows.
async fn write_deletes(
    job: &MergeJob,
    touched: &[PlannedFile],
    changed: &PositionMap,
    written: &WrittenFiles,
) -> Result<Vec<NewFile>> {
    let mut out = vec![];
    for chunk in touched.chunks(8) {
        let writes = chunk.iter().map(|f| async move {
            let bitmap = changed
                .get(&f.path)
                .ok_or_else(|| DataFusionError::Internal(format!("no positions for {}", f.path)))?;
            let file = write_file_position_deletes(
                &job.table,
                f.spec_id,
                f.partition.clone(),
                &f.path,
                bitmap,
            )
            .await?;
            written.record(file.file.file_path().to_string());
            Ok::<_, DataFusionError>(file)
        });
        out.extend(futures::future::try_join_all(writes).await?);
    }
    Ok(out)
}
