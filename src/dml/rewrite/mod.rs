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
//!            or, copy-on-write, by splice (no delete on the file, its columns as this crate
//!            writes them): DELETE leaves the matching rows out, copying the row groups that
//!            keep every row; UPDATE of columns that neither partition nor sort the table
//!            encodes those columns again and copies the rest
//!    verify  rows matched in pass 2 = pass 1's count; rows read = rows written (+ rows deleted)
//!    commit  delete / overwrite snapshot: remove the files, add the rewritten ones; on concurrent
//!            commits that add rows c may match or deletes to rewritten files: plan and run again
//! ```
//! An `UPDATE` removes no file whole: every file with a matching row is rewritten.
//! Memory: pass 1 keeps one counter per matching file; pass 2 streams (the sort spills).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::utils::{conjunction, expr_to_columns};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::expressions::{CastExpr, Column};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use iceberg::spec::{SnapshotRef, TableMetadata};
use iceberg::table::Table;

use super::guard::{dml_checked, unchecked_dml_error};
use crate::commit::MetadataStore;
use crate::commit::WriteTo;
use crate::error::IcebergResultExt;
use crate::file_planning::strict::FileStats;
use crate::file_planning::{
    plan_files_pruned, unprunable_columns, FileFilter, PlannedFile, ScanFiles,
};
use crate::physical_plan::change_rows::{ChangeCounts, ChangeRowsExec, RowChange};
use crate::physical_plan::positional_delete::POSITION_COLUMN;
use crate::physical_plan::scan::lineage;
use crate::physical_plan::scan::metadata::{self, FileMetadataColumns};
use crate::physical_plan::scan::plan::plan_statement_scan;
use crate::physical_plan::scan::request::{ScanRequest, FILE_COLUMN};
use crate::physical_plan::scan::schema::arrow_schema;
use crate::physical_plan::statement::StatementExec;
use crate::physical_plan::write::{
    plain_columns_of, sort_requirement, DataFileWriterExec, WrittenFiles,
};
use crate::storage::location::LocationMap;
use crate::IcebergOptions;

use super::core::{DmlTarget, WriteMode};
use crate::physical_plan::write::PositionDeleteWriterExec;

mod exec;

use exec::DmlStatement;
pub(in crate::dml) use exec::{prepare, validation, Prepared};

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
    // Conditions may name the metadata columns (`_file`, `_pos`, `_spec_id`, `_partition`).
    let df_schema = DFSchema::try_from(MetadataColumnsNeeded::checking_schema(&schema, metadata)?)?;
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
            // Values may read metadata columns too (`SET v = _pos`).
            expr_to_columns(value, &mut columns)?;
            let field = schema.field_with_name(column).map_err(|_| {
                DataFusionError::Plan(format!("UPDATE cannot assign column '{column}'"))
            })?;
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

    let job = DmlJob::new(&target, session, filters, columns, op, mode, true)?;
    let (job, pass1) = job.plan().await?;
    let statement = Arc::new(DmlStatement { job: Arc::new(job) });
    Ok(Arc::new(StatementExec::new(
        statement,
        pass1.into_iter().collect(),
    )))
}

/// The removal of an `INSERT OVERWRITE`: a copy-on-write `DELETE` of the rows `filters` select
/// (AND-ed; none: every row) from `target`'s current snapshot, whose rows it does not count
/// (files removed whole are not read). The job, and its pass 1 when files must be read.
pub(in crate::dml) async fn plan_removal(
    target: DmlTarget<'_>,
    session: SessionState,
    filters: Vec<Expr>,
) -> Result<(DmlJob, Option<Arc<dyn ExecutionPlan>>)> {
    let mut columns = HashSet::new();
    for f in &filters {
        expr_to_columns(f, &mut columns)?;
    }
    let mut columns: Vec<String> = columns.into_iter().map(|c| c.name).collect();
    columns.sort();
    let job = DmlJob::new(
        &target,
        session,
        filters,
        columns,
        DmlOp::Delete,
        WriteMode::CopyOnWrite,
        false,
    )?;
    job.plan().await
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
        crate::file_planning::listed_data_files(table, locations, snapshot, &wanted).await?
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
    /// Where the snapshot goes; the statement reads that branch's head.
    pub(super) write_to: WriteTo,
    /// Whether the rows of files removed whole are counted (the statement's answer); pass 1
    /// then reads those with deletes.
    pub(super) count_removed: bool,
    /// Files removed whole.
    pub(super) removed_whole: Vec<PlannedFile>,
    /// Rows of the files removed whole that no delete applies to.
    pub(super) rows_removed_whole: u64,
    /// Files pass 1 reads.
    pub(super) checked: ScanFiles,
}

impl DmlJob {
    /// The statement on `target`, not planned yet.
    fn new(
        target: &DmlTarget<'_>,
        session: SessionState,
        filters: Vec<Expr>,
        columns: Vec<String>,
        op: DmlOp,
        mode: WriteMode,
        count_removed: bool,
    ) -> Result<Self> {
        Ok(Self {
            table: target.table.clone(),
            store: Arc::clone(&target.store),
            distributed: crate::physical_plan::distributes(session.config()),
            state: session,
            schema: arrow_schema(target.table.metadata().current_schema())?,
            locations: target.locations.clone(),
            filters,
            columns,
            op,
            mode,
            base_snapshot_id: None,
            write_to: target.write_to.clone(),
            count_removed,
            removed_whole: vec![],
            rows_removed_whole: 0,
            checked: ScanFiles::default(),
        })
    }

    /// Chooses the files of the snapshot the statement reads (its branch's head): those removed whole and those pass 1
    /// reads (its plan is returned).
    async fn plan(mut self) -> Result<(Self, Option<Arc<dyn ExecutionPlan>>)> {
        let table = self.table.clone();
        let metadata = table.metadata();
        let Some(snapshot) = self.write_to.head(metadata) else {
            return Ok((self, None));
        };
        self.base_snapshot_id = Some(snapshot.snapshot_id());
        let snapshot_schema = snapshot.schema(metadata).df()?;
        let mut unprunable =
            unprunable_columns(metadata, metadata.current_schema(), &snapshot_schema);
        unprunable.extend(self.metadata_needed().names());
        let filter = FileFilter::new(
            &self.filters,
            &unprunable,
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
        } else if self.metadata_needed().any() {
            // Conditions on metadata columns are decided row by row, in pass 1.
            HashSet::new()
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
                if f.is_clean() || !self.count_removed {
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
            columns: candidates.columns,
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
            write_to: self.write_to.clone(),
            count_removed: self.count_removed,
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
            Some(plan) => Some(crate::physical_plan::optimized(&job.state, plan)?),
            None => None,
        };
        Ok((job, pass1))
    }

    /// `plan` made ready to run: through the physical optimizer rules of the session, and on a
    /// coordinator also distributed over its workers (through the session's query planner).
    async fn executable(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        match self.distributed {
            true => super::guard::through_planner(&self.state, plan).await,
            false => crate::physical_plan::optimized(&self.state, plan),
        }
    }

    /// The metadata columns the statement's condition names.
    pub(super) fn metadata_needed(&self) -> MetadataColumnsNeeded {
        MetadataColumnsNeeded::of(&self.columns, &self.schema)
    }

    pub(super) fn condition(&self) -> Option<Expr> {
        conjunction(self.filters.clone())
    }

    /// Whether copy-on-write may splice the `touched` files (see [`crate::dml::splice`]): in
    /// one process, with splicing on, without row lineage (whose columns copied chunks do not
    /// hold), a condition on the table's own columns, and files that allow it.
    pub(super) fn may_splice(&self, touched: &[PlannedFile]) -> bool {
        let metadata = self.table.metadata();
        let files = ScanFiles {
            files: touched.to_vec(),
            equality_deletes: self.checked.equality_deletes.clone(),
            streamed: self.checked.streamed,
            columns: self.checked.columns.clone(),
        };
        !self.distributed
            && IcebergOptions::from_config(self.state.config_options()).copy_on_write_splice
            && !lineage::has_row_lineage(metadata)
            && !self.metadata_needed().any()
            && crate::dml::splice::files_allow_splice(&files, metadata)
    }

    /// The table columns `exprs` read, and the table's schema with every column nullable (the
    /// columns a splice does not read are NULL in the rows the expressions see) in both forms.
    pub(super) fn computed_inputs<'a>(
        &self,
        exprs: impl Iterator<Item = &'a Expr>,
    ) -> Result<(Vec<usize>, SchemaRef, DFSchema)> {
        let mut used = HashSet::new();
        for e in exprs {
            expr_to_columns(e, &mut used)?;
        }
        let inputs: Vec<usize> = used
            .iter()
            .map(|c| self.schema.index_of(&c.name))
            .collect::<std::result::Result<_, _>>()?;
        let nullable: SchemaRef = Arc::new(arrow::datatypes::Schema::new(
            self.schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let df_schema = DFSchema::try_from(nullable.as_ref().clone())?;
        Ok((inputs, nullable, df_schema))
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
        let needed = self.metadata_needed();
        // A condition on the row lineage columns reads them.
        let (read_schema, schema) = match needed.lineage {
            true => {
                let rows = lineage::rows_schema(self.table.metadata())?;
                let arrow = arrow_schema(&rows)?;
                (rows, arrow)
            }
            false => (
                Arc::clone(self.table.metadata().current_schema()),
                Arc::clone(&self.schema),
            ),
        };
        let projection: Vec<usize> = self
            .columns
            .iter()
            .filter(|c| schema.index_of(c).is_ok() || !needed.names().contains(c))
            .map(|c| schema.index_of(c))
            .collect::<std::result::Result<_, _>>()?;
        let file_metadata = needed.file_metadata(self.table.metadata())?;
        let req = ScanRequest {
            table: &self.table,
            read_schema: &read_schema,
            schema: &schema,
            projection: Some(&projection),
            filtered: true,
            limit: None,
            locations: &self.locations,
            stores: self.store.object_stores(),
            file_column: true,
            position_column: self.mode == WriteMode::MergeOnRead || needed.pos,
            row_lineage: needed.lineage,
            file_metadata: file_metadata.as_ref(),
        };
        let mut plan = plan_statement_scan(state, &req, &self.checked).await?;
        plan = needed.named(plan)?;
        if let Some(condition) = self.physical_condition(&plan.schema())? {
            plan = Arc::new(FilterExec::try_new(condition, plan)?);
        }
        let schema = plan.schema();
        let mut output = vec![FILE_COLUMN];
        if self.mode == WriteMode::MergeOnRead {
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
            columns: self.checked.columns.clone(),
        };
        // On a table with row lineage the rows moved to new files keep their ids; the ones the
        // statement changes take the new files' sequence number.
        let lineage = lineage::has_row_lineage(self.table.metadata());
        let read_schema = lineage::rows_schema(self.table.metadata())?;
        let schema = match lineage {
            true => arrow_schema(&read_schema)?,
            false => Arc::clone(&self.schema),
        };
        let needed = self.metadata_needed();
        let file_metadata = needed.file_metadata(self.table.metadata())?;
        let req = ScanRequest {
            table: &self.table,
            read_schema: &read_schema,
            schema: &schema,
            projection: None,
            filtered: true,
            limit: None,
            locations: &self.locations,
            stores: self.store.object_stores(),
            file_column: needed.file_column(),
            position_column: needed.pos,
            row_lineage: lineage,
            file_metadata: file_metadata.as_ref(),
        };
        let written_columns = schema.fields().len();
        let scan = plan_statement_scan(&self.state, &req, &scan_files).await?;
        let scan = needed.named(scan)?;
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
        // The metadata columns the condition read are not written.
        let keep = MetadataColumnsNeeded::dropped(keep, written_columns)?;
        let sort = sort_requirement(&self.table, &keep.schema())?;
        // Columns whose dictionaries overflowed in the files rewritten are written plain.
        let plain = plain_columns_of(
            &self.state.task_ctx(),
            self.store.object_stores(),
            &self.locations,
            self.table.metadata().location(),
            &scan_files.files,
        )
        .await?
        .plain;
        // Distributed, each task sorts and writes its own rows: the change's counts reach the
        // writer in the same task, and no task's rows all go to one process.
        let plan: Arc<dyn ExecutionPlan> = Arc::new(
            DataFileWriterExec::try_new(keep, self.table.clone(), sort, written)?
                .with_row_lineage(lineage)?
                .with_local_sort(self.distributed)
                .with_plain_columns(plain)
                .with_tally(counts),
        );
        // The rules DataFusion runs on every plan: the sort the writer requires, among others.
        self.executable(plan).await
    }
}

/// The metadata columns (`_file`, `_pos`, `_spec_id`, `_partition`) a condition names, read
/// alongside the rows and named as the condition names them.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MetadataColumnsNeeded {
    file: bool,
    pos: bool,
    spec_id: bool,
    partition: bool,
    /// `_row_id` or `_last_updated_sequence_number` (format v3).
    lineage: bool,
}

impl MetadataColumnsNeeded {
    /// Those of `columns` (what a condition names) that are metadata columns rather than
    /// columns of `schema` (the table's).
    fn of(columns: &[String], schema: &SchemaRef) -> Self {
        let named = |n: &str| columns.iter().any(|c| c == n) && schema.field_with_name(n).is_err();
        Self {
            file: named(metadata::FILE),
            pos: named(metadata::POS),
            spec_id: named(metadata::SPEC_ID),
            partition: named(metadata::PARTITION),
            lineage: named(lineage::ROW_ID) || named(lineage::LAST_UPDATED_SEQUENCE_NUMBER),
        }
    }

    /// The table's columns and the metadata columns its conditions may name.
    fn checking_schema(
        schema: &SchemaRef,
        metadata: &TableMetadata,
    ) -> Result<arrow::datatypes::Schema> {
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        let mut extra = metadata::appended_fields(metadata)?;
        if lineage::has_row_lineage(metadata) {
            let rows = arrow_schema(lineage::rows_schema(metadata)?.as_ref())?;
            extra.extend(rows.fields().iter().skip(schema.fields().len()).cloned());
        }
        for f in extra {
            if schema.field_with_name(f.name()).is_err() {
                fields.push(f);
            }
        }
        Ok(arrow::datatypes::Schema::new(fields))
    }

    pub(super) fn any(&self) -> bool {
        self.file || self.pos || self.spec_id || self.partition || self.lineage
    }

    fn names(&self) -> Vec<String> {
        [
            (self.file, metadata::FILE),
            (self.pos, metadata::POS),
            (self.spec_id, metadata::SPEC_ID),
            (self.partition, metadata::PARTITION),
            (self.lineage, lineage::ROW_ID),
            (self.lineage, lineage::LAST_UPDATED_SEQUENCE_NUMBER),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| n.to_string())
        .collect()
    }

    fn file_column(&self) -> bool {
        self.file || self.spec_id || self.partition
    }

    fn file_metadata(&self, table: &TableMetadata) -> Result<Option<FileMetadataColumns>> {
        match self.spec_id || self.partition {
            true => Ok(Some(FileMetadataColumns::of(table)?)),
            false => Ok(None),
        }
    }

    /// `plan` (a scan asked for what [`Self::file_column`], `pos` and [`Self::file_metadata`]
    /// say) with the metadata columns the condition names appended under their names.
    fn named(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.any() {
            return Ok(plan);
        }
        let schema = plan.schema();
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
        let column = |name: &str| -> Result<Arc<dyn PhysicalExpr>> {
            Ok(Arc::new(Column::new(name, schema.index_of(name)?)))
        };
        if self.file {
            exprs.push((
                Arc::new(CastExpr::new(column(FILE_COLUMN)?, DataType::Utf8, None)),
                metadata::FILE.to_string(),
            ));
        }
        if self.pos {
            exprs.push((column(POSITION_COLUMN)?, metadata::POS.to_string()));
        }
        // `_spec_id` and `_partition` come from the scan under their own names.
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }

    /// `plan` with only its first `columns` columns (the table's), when it has more.
    fn dropped(plan: Arc<dyn ExecutionPlan>, columns: usize) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = plan.schema();
        if schema.fields().len() == columns {
            return Ok(plan);
        }
        let exprs = schema
            .fields()
            .iter()
            .take(columns)
            .enumerate()
            .map(|(i, f)| {
                (
                    Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>,
                    f.name().clone(),
                )
            })
            .collect::<Vec<_>>();
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }
}
