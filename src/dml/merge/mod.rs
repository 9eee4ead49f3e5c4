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
//!    pass 1  join(source, target scan with deletes applied, + _file, _pos, filtered by the
//!                 source's keys unless NOT MATCHED BY SOURCE) ─► MergeRowsExec
//!              ─► new rows (updates, inserts) ─► [sort, spilling] ─► DataFileWriterExec
//!              ─► positions of the target rows updated or deleted (bitmaps, reserved)
//!    merge-on-read: one position delete file per data file with changed rows
//!    copy-on-write pass 2: scan(files with changed rows) ─► DropPositionsExec ─► writer,
//!      or by splice when the files allow it: the changed rows left out, the row groups that
//!      keep every row copied as they are (a file that cannot be spliced takes the scan)
//!      or, when pass 1 read only the deciding columns (`Decide`): scan ─► RewriteExec (kept
//!      rows pass, updated rows join a copy of the source for their new versions) ─► writer
//!      or, when the clauses only update columns that neither partition nor sort the table
//!      and no delete applies to the files (`Splice`, see [`splice`]): pass 1 computes the
//!      updated columns' new values; each file is written again with its other columns' chunks
//!      copied as they are and the updated columns spliced in place
//!    verify  rows written = updated + inserted; positions = updated + deleted; pass 2 dropped
//!            exactly the changed positions
//!    commit  one overwrite snapshot (append when it only inserts), validated against
//!            concurrent commits (on a conflict the statement runs again on the new state)
//! ```

mod exec;
mod second_pass;

use exec::MergeStatement;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, DFSchemaRef, JoinType, TableReference};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::dml::{MergeIntoAction, MergeIntoClause};
use datafusion::logical_expr::utils::expr_to_columns;
use datafusion::logical_expr::{col, lit, Expr};
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::metrics::SpillMetrics;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{execute_stream, ExecutionPlan, ExecutionPlanProperties};
use futures::StreamExt;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;

use super::core::{DmlTarget, WriteMode};
use crate::commit::MetadataStore;
use crate::commit::{NewFile, Validation};
use crate::error::IcebergResultExt;
use crate::file_planning::strict::FileStats;
use crate::file_planning::{plan_files_pruned, unprunable_columns, FileFilter, ScanFiles};
use crate::physical_plan::merge::clauses::{
    self, clause_columns, compile, Clause, ClauseKind, RowLayout, Sides,
};
use crate::physical_plan::merge::on::{self, split_on, JoinSpec};
use crate::physical_plan::merge::source::{self, KeyBounds};
use crate::physical_plan::positional_delete::POSITION_COLUMN;
use crate::physical_plan::scan::lineage;
use crate::physical_plan::scan::plan::plan_statement_scan;
use crate::physical_plan::scan::request::{ScanRequest, FILE_COLUMN};
use crate::physical_plan::scan::schema::arrow_schema;
use crate::physical_plan::statement::StatementExec;
use crate::physical_plan::write::{
    decode_data_files, sort_requirement, DataFileWriterExec, WrittenFiles,
};
use crate::storage::location::LocationMap;
use crate::IcebergOptions;

/// The source-side marker column: TRUE on join rows with a source row.
pub(super) const SOURCE_MARKER: &str = "__merge_source_row";

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
    let deciding_and_read = read.clone();
    let target_columns: Vec<usize> = match updates {
        true => (0..table_schema.fields().len()).collect(),
        false => {
            let mut v: Vec<usize> = read.into_iter().collect();
            v.sort();
            v
        }
    };
    let layout = row_layout(&merge_schema, source_columns, target_columns.clone())?;
    let compiled = compile(&clauses, &layout, &table_schema, &session)?;
    // On a table with row lineage the rows the statement writes end with the lineage columns:
    // updated rows (which read every column) carry their `_row_id` forward, copied rows both.
    let lineage = lineage::has_row_lineage(metadata);
    let (layout, rows_schema) = match lineage {
        false => (Arc::new(layout), Arc::clone(&table_schema)),
        true => {
            let extended = arrow_schema(lineage::rows_schema(metadata)?.as_ref())?;
            let mut target_columns = target_columns;
            if updates {
                let n = table_schema.fields().len();
                target_columns.extend([n, n + 1]);
            }
            let layout = row_layout_with(&merge_schema, source_columns, target_columns, &extended)?;
            (Arc::new(layout), extended)
        }
    };
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
    // Distributed, the first pass runs in the workers' tasks and reads whole rows (the narrow
    // first pass joins the source again in its rewrite, here).
    let distributed = crate::physical_plan::distributes(session.config());
    let decide = match mode == WriteMode::CopyOnWrite && !by_source && updates && !distributed {
        true => decide_plan(
            &clauses,
            &on,
            &sides,
            &split,
            &merge_schema,
            &table_schema,
            join_type,
            &session,
        )?,
        false => None,
    };
    let splicing = options.copy_on_write_splice;
    let splice =
        match mode == WriteMode::CopyOnWrite && splicing && updates && !distributed && !lineage {
            true => splice_plan(
                &clauses,
                &deciding_and_read,
                &split,
                &merge_schema,
                &table_schema,
                join_type,
                &session,
                on.to_string(),
            )?,
            false => None,
        };
    let job = MergeJob {
        table: table.clone(),
        store: Arc::clone(&target.store),
        write_to: target.write_to.clone(),
        state: session,
        locations: target.locations.clone(),
        table_schema: rows_schema,
        schema_id: metadata.current_schema_id(),
        layout,
        clauses: compiled.into(),
        spec,
        mode,
        prune,
        by_source,
        decide,
        splice,
        splicing,
        distributed,
    };
    let statement = Arc::new(MergeStatement { job: Arc::new(job) });
    Ok(Arc::new(StatementExec::new(statement, vec![source])))
}

/// Copy-on-write's first pass when it can read fewer columns than the whole rows: the columns
/// that decide what happens to a row (`ON` and the clauses' conditions), the clauses compiled
/// against those rows without computing new versions, and the join over them. `None` when the
/// deciding columns are every column, or a condition is volatile (pass 2 evaluates them again
/// and must come to the same decision).
#[allow(clippy::too_many_arguments)]
fn decide_plan(
    clauses: &[MergeIntoClause],
    on: &Expr,
    sides: &Sides<'_>,
    split: &on::SplitOn,
    merge_schema: &DFSchemaRef,
    table_schema: &SchemaRef,
    join_type: JoinType,
    session: &SessionState,
) -> Result<Option<Decide>> {
    let conditions: Vec<&Expr> = std::iter::once(on)
        .chain(clauses.iter().filter_map(|c| c.predicate.as_ref()))
        .collect();
    if conditions.iter().any(|e| e.is_volatile()) {
        return Ok(None);
    }
    let mut columns = HashSet::new();
    for e in &conditions {
        sides.used(e, &mut columns)?;
    }
    if columns.len() >= table_schema.fields().len() {
        return Ok(None);
    }
    let mut columns: Vec<usize> = columns.into_iter().collect();
    columns.sort();
    let source_columns = merge_schema.fields().len() - table_schema.fields().len();
    let layout = Arc::new(row_layout(merge_schema, source_columns, columns)?);
    // The first pass records which rows are updated; their new versions come in pass 2.
    let deciding: Vec<MergeIntoClause> = clauses
        .iter()
        .map(|c| MergeIntoClause {
            kind: c.kind,
            predicate: c.predicate.clone(),
            action: match &c.action {
                MergeIntoAction::Update(_) => MergeIntoAction::Update(vec![]),
                other => other.clone(),
            },
        })
        .collect();
    let compiled = compile(&deciding, &layout, table_schema, session)?;
    let spec = JoinSpec::try_new(split, &layout, join_type, session, on.to_string())?;
    Ok(Some(Decide {
        layout,
        clauses: compiled.into(),
        spec,
    }))
}

/// Copy-on-write by column splice (see [`splice`]), when the clauses only update, and only
/// columns that neither place a row in a partition nor order the table: the first pass reads
/// the columns the conditions and the new values need besides the updated ones. `None`
/// otherwise.
#[allow(clippy::too_many_arguments)]
fn splice_plan(
    clauses: &[MergeIntoClause],
    read: &HashSet<usize>,
    split: &on::SplitOn,
    merge_schema: &DFSchemaRef,
    table_schema: &SchemaRef,
    join_type: JoinType,
    session: &SessionState,
    on: String,
) -> Result<Option<Splice>> {
    let updated_columns = || -> Result<Option<Vec<usize>>> {
        let mut columns = vec![];
        for c in clauses {
            match &c.action {
                MergeIntoAction::Delete => return Ok(None),
                MergeIntoAction::Update(assignments) => {
                    for (name, _) in assignments {
                        let i = table_schema.index_of(name)?;
                        if !columns.contains(&i) {
                            columns.push(i);
                        }
                    }
                }
                MergeIntoAction::Insert { .. } => {}
            }
        }
        columns.sort();
        Ok((!columns.is_empty()).then_some(columns))
    };
    let Some(columns) = updated_columns()? else {
        return Ok(None);
    };
    let mut target: Vec<usize> = read
        .iter()
        .copied()
        .chain(columns.iter().copied())
        .collect();
    target.sort();
    target.dedup();
    let source_columns = merge_schema.fields().len() - table_schema.fields().len();
    let layout = Arc::new(row_layout(merge_schema, source_columns, target)?);
    let compiled = compile(clauses, &layout, table_schema, session)?;
    let spec = JoinSpec::try_new(split, &layout, join_type, session, on)?;
    Ok(Some(Splice {
        layout,
        clauses: compiled.into(),
        spec,
        columns,
    }))
}

/// Adds what every node of the executed `plan` spilled to `spill`.
fn add_spills(plan: &Arc<dyn ExecutionPlan>, spill: &SpillMetrics) {
    if let Some(m) = plan.metrics() {
        spill.spill_file_count.add(m.spill_count().unwrap_or(0));
        spill.spilled_bytes.add(m.spilled_bytes().unwrap_or(0));
        spill.spilled_rows.add(m.spilled_rows().unwrap_or(0));
    }
    for child in plan.children() {
        add_spills(child, spill);
    }
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
    let table: Vec<Field> = (0..target_fields)
        .map(|c| merge_schema.field(c).as_ref().clone())
        .collect();
    row_layout_with(
        merge_schema,
        source_columns,
        target_columns,
        &Arc::new(Schema::new(table)),
    )
}

/// [`row_layout`] for rows of `table_schema`, which may have columns after the statement's
/// target columns (the row lineage columns, unqualified).
fn row_layout_with(
    merge_schema: &DFSchema,
    source_columns: usize,
    target_columns: Vec<usize>,
    table_schema: &SchemaRef,
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
        match c < target_fields {
            true => {
                let (q, f) = merge_schema.qualified_field(c);
                fields.push((q.cloned(), nullable(f)));
            }
            false => fields.push((None, nullable(table_schema.field(c)))),
        }
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

pub(super) fn file_field() -> Field {
    Field::new(
        FILE_COLUMN,
        DataType::Dictionary(Box::new(DataType::UInt16), Box::new(DataType::Utf8)),
        false,
    )
}

/// Everything a `MERGE` decided at planning time.
#[derive(Debug, Clone)]
pub(super) struct MergeJob {
    pub(super) table: Table,
    pub(super) store: Arc<dyn MetadataStore>,
    pub(super) state: SessionState,
    pub(super) locations: LocationMap,
    /// The rows read and written: the table's columns, then `_row_id` and
    /// `_last_updated_sequence_number` on a table with row lineage.
    pub(super) table_schema: SchemaRef,
    pub(super) schema_id: i32,
    pub(super) layout: Arc<RowLayout>,
    pub(super) clauses: Arc<[Clause]>,
    pub(super) spec: JoinSpec,
    pub(super) mode: WriteMode,
    /// Conjuncts over target columns (unqualified) a target row must pass to be changed.
    pub(super) prune: Vec<Expr>,
    /// Whether WHEN NOT MATCHED BY SOURCE clauses exist (every target row may change).
    pub(super) by_source: bool,
    /// Copy-on-write's narrow first pass, when it applies (see [`decide_plan`]).
    pub(super) decide: Option<Decide>,
    /// Copy-on-write by column splice, when it may apply (see [`splice_plan`]).
    pub(super) splice: Option<Splice>,
    /// Whether copy-on-write may splice at all (`iceberg.copy_on_write_splice`).
    pub(super) splicing: bool,
    /// Whether the session distributes its plans over workers: the first pass then runs in
    /// their tasks when the source fits in memory and `ON` has hash keys.
    pub(super) distributed: bool,
    /// Where the snapshot goes; the statement reads that branch's head.
    pub(super) write_to: crate::commit::WriteTo,
}

/// The first pass of a copy-on-write `MERGE` that reads only the deciding columns: it finds
/// the rows to update and delete, and writes the inserted ones; the rewrite (pass 2) joins the
/// updated rows with their source rows again and writes their new versions among the kept rows.
#[derive(Debug, Clone)]
pub(super) struct Decide {
    pub(super) layout: Arc<RowLayout>,
    pub(super) clauses: Arc<[Clause]>,
    pub(super) spec: JoinSpec,
}

/// The first pass of a copy-on-write `MERGE` by column splice: the join rows carry the updated
/// columns, and the clauses compiled against them compute the updated rows' new values.
#[derive(Debug, Clone)]
pub(super) struct Splice {
    pub(super) layout: Arc<RowLayout>,
    pub(super) clauses: Arc<[Clause]>,
    pub(super) spec: JoinSpec,
    /// The table columns the clauses update (ascending).
    pub(super) columns: Vec<usize>,
}

impl MergeJob {
    /// Whether the rows read and written end with the row lineage columns.
    pub(super) fn row_lineage(&self) -> bool {
        lineage::has_row_lineage(self.table.metadata())
    }

    /// Whether copy-on-write may write the `files` that lose rows by splice (row groups that
    /// keep every row copied as they are): in one process, without row lineage (whose columns
    /// the files' chunks do not hold), and when the files allow it.
    pub(super) fn drops_by_splice(&self, files: &ScanFiles) -> bool {
        self.splicing
            && !self.distributed
            && !self.row_lineage()
            && crate::dml::splice::files_allow_splice(files, self.table.metadata())
    }

    pub(super) fn sql_table(&self) -> String {
        self.table.identifier().to_string()
    }

    /// The conjuncts a target file must possibly match to hold rows the statement changes, or
    /// `None` when every row may change. `Some(None)`: no row can (a key without any non-NULL
    /// source value).
    pub(super) fn target_filters(&self, bounds: &[Option<KeyBounds>]) -> Option<Option<Vec<Expr>>> {
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

    /// The data files of the snapshot it reads (its branch's head) that may hold rows the statement changes.
    pub(super) async fn target_files(
        &self,
        filters: &Option<Option<Vec<Expr>>>,
    ) -> Result<ScanFiles> {
        let metadata = self.table.metadata();
        let Some(snapshot) = self.write_to.head(metadata) else {
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

    pub(super) fn planning_threshold(&self) -> u64 {
        IcebergOptions::from_config(self.state.config_options()).planning_threshold
    }

    /// `plan` through the session's physical optimizer rules.
    pub(super) fn optimized(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        crate::physical_plan::optimized(&self.state, plan)
    }

    /// A scan of `files` (`projection` of the table's columns, or all) ending with each row's
    /// file and position.
    pub(super) async fn scan(
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
        let read_schema = lineage::rows_schema(self.table.metadata())?;
        let req = ScanRequest {
            table: &self.table,
            read_schema: &read_schema,
            schema: &self.table_schema,
            projection,
            filtered: true,
            limit: None,
            locations: &self.locations,
            stores: self.store.object_stores(),
            file_column: true,
            position_column: true,
            row_lineage: self.row_lineage(),
            file_metadata: None,
        };
        self.optimized(plan_statement_scan(&self.state, &req, files).await?)
    }

    /// Writes `input` (rows of the table's schema) as data files, sorted by the table's sort
    /// order; returns the files. What the plan spilled is added to `spill`.
    pub(super) async fn write(
        &self,
        input: Arc<dyn ExecutionPlan>,
        written: &WrittenFiles,
        context: &Arc<TaskContext>,
        spill: &SpillMetrics,
    ) -> Result<Vec<NewFile>> {
        let sort = sort_requirement(&self.table, &input.schema())?;
        // Under a memory limit the sort does not run alongside what feeds it (a join holds
        // its build side and repartition buffers until its output is consumed): the rows go
        // through a spill file first.
        let limited = matches!(
            context.memory_pool().memory_limit(),
            datafusion::execution::memory_pool::MemoryLimit::Finite(_)
        );
        let input = match sort.is_some() && limited {
            true => source::spill_through(input, context, spill.clone()).await?,
            false => input,
        };
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
        let writer: Arc<dyn ExecutionPlan> = Arc::new(
            DataFileWriterExec::try_new(input, self.table.clone(), sort, written.clone())?
                .with_row_lineage(self.row_lineage())?,
        );
        let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(writer));
        let mut stream = execute_stream(Arc::clone(&plan), Arc::clone(context))?;
        let mut files = vec![];
        while let Some(batch) = stream.next().await {
            files.extend(decode_data_files(&batch?, self.table.metadata())?);
        }
        add_spills(&plan, spill);
        Ok(files)
    }

    /// The conflict check of the commit: concurrent data files that may hold rows the
    /// statement would have matched (every one when NOT MATCHED BY SOURCE may change any row).
    pub(super) fn validation(
        &self,
        filters: &Option<Option<Vec<Expr>>>,
        read_files: HashSet<String>,
    ) -> Result<Validation> {
        let filters: Option<Vec<Expr>> = match filters {
            Some(Some(f)) if !f.is_empty() => Some(f.clone()),
            _ => None,
        };
        let may_match: crate::commit::MayMatch = match filters {
            None => Arc::new(|_: &TableMetadata, _: i32, _| true),
            Some(filters) => {
                let mut columns = HashSet::new();
                for f in &filters {
                    expr_to_columns(f, &mut columns)?;
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
        Ok(Validation {
            base_snapshot_id: self.write_to.head_id(self.table.metadata()),
            may_match,
            read_files,
            equality_deletes_carry_over: false,
        })
    }
}
