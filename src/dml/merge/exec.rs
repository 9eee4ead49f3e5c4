//! A planned `MERGE` as the statement its node (`MergeExec`, a
//! [`StatementExec`](crate::physical_plan::statement::StatementExec) whose child is the source)
//! runs: read the source, plan and join the target, write the new rows, then position deletes or
//! the rewrite, check it, and commit; again on the new table state after a conflict.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SpillFile, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::expressions::{self, Column};
use datafusion::physical_plan::joins::PartitionMode;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, SpillMetrics};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use iceberg::spec::Operation;
use iceberg::table::Table;

use crate::commit::{
    commit_or_clean_up, removed_with_deletes, MetadataStore, NewFile, RemovedDeletes,
    SnapshotChanges,
};
use crate::dml::core::WriteMode;
use crate::dml::splice::{files_allow_splice, moves_rows};
use crate::file_planning::{PlannedFile, ScanFiles};
use crate::physical_plan::merge::clauses::{Clause, RowLayout};
use crate::physical_plan::merge::join::{hash_join, join_filter, join_plan, JoinMode};
use crate::physical_plan::merge::key_filter::{source_key_filter, KeyFilterExec};
use crate::physical_plan::merge::on::JoinSpec;
use crate::physical_plan::merge::positions::{
    positions_consumer, MergePositions, MergeReport, PositionMap,
};
use crate::physical_plan::merge::rows::{MergeRowsExec, RowsMode};
use crate::physical_plan::merge::source::{read_source, BufferedSource, SourceRead};
use crate::physical_plan::merge::splice::SpliceValues;
use crate::physical_plan::spill::SpillWriter;
use crate::physical_plan::statement::{Statement, StatementMetrics};
use crate::physical_plan::without_work_stealing;
use crate::physical_plan::write::WrittenFiles;
use crate::physical_plan::write::{run_writers, sort_requirement, DataFileWriterExec, WriterTally};

use super::{MergeJob, SOURCE_MARKER};

/// A planned `MERGE`: its node's child is the source. One output row: `count`, the rows
/// updated, deleted and inserted (each kind is a metric).
#[derive(Debug)]
pub(super) struct MergeStatement {
    pub(super) job: Arc<MergeJob>,
}

#[async_trait::async_trait]
impl Statement for MergeStatement {
    fn name(&self) -> &'static str {
        "MergeExec"
    }

    fn describe(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let job = &self.job;
        let clauses: Vec<&str> = job.clauses.iter().map(|c| c.text.as_str()).collect();
        write!(
            f,
            "table={}, mode={}, join={} on {}, keys={}, clauses=[{}]",
            job.table.identifier(),
            job.mode.name(),
            job.spec.join_type,
            job.spec.text,
            job.spec.source_keys.len(),
            clauses.join("; "),
        )?;
        // The columns a copy-on-write rewrite may splice into files copied otherwise as
        // they are (see `splice`).
        if let Some(s) = &job.splice {
            let names: Vec<&str> = s
                .columns
                .iter()
                .map(|&c| job.table_schema.field(c).name().as_str())
                .collect();
            write!(f, ", splice=[{}]", names.join(", "))?;
        }
        Ok(())
    }

    fn counters(&self) -> &'static [&'static str] {
        &[
            "source_rows",
            "target_files_scanned",
            "rows_updated",
            "rows_deleted",
            "rows_inserted",
            "files_rewritten",
            "files_written",
            "delete_files_written",
            "delete_files_removed",
            "grace_partitions",
            "target_rows_skipped_by_key_filter",
            "first_pass_target_columns",
            "files_spliced",
            "row_groups_copied",
            "splice_fallbacks",
            "commit_attempts",
        ]
    }

    fn spills(&self) -> bool {
        true
    }

    fn context(&self, context: Arc<TaskContext>) -> Arc<TaskContext> {
        without_work_stealing(context)
    }

    fn table(&self) -> &Table {
        &self.job.table
    }

    fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.job.store
    }

    async fn run_once(
        &self,
        children: &[Arc<dyn ExecutionPlan>],
        context: &Arc<TaskContext>,
        metrics: &StatementMetrics,
    ) -> Result<u64> {
        let [source] = children else {
            return Err(DataFusionError::Internal(
                "MergeExec reads one source".into(),
            ));
        };
        run_once(&self.job, Arc::clone(source), context, metrics).await
    }

    async fn again(
        &self,
        table: Table,
        children: &[Arc<dyn ExecutionPlan>],
    ) -> Result<(Arc<dyn Statement>, Vec<Arc<dyn ExecutionPlan>>)> {
        let job = &self.job;
        if table.metadata().current_schema_id() != job.schema_id {
            return Err(DataFusionError::Execution(format!(
                "MERGE on table '{}' stopped: the table's schema changed while it ran; \
                 nothing was changed",
                job.sql_table()
            )));
        }
        let mut again = MergeJob::clone(job);
        again.table = table;
        let statement = Arc::new(MergeStatement {
            job: Arc::new(again),
        });
        Ok((statement, children.to_vec()))
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
    m: &StatementMetrics,
) -> Result<u64> {
    // A splice that cannot finish (its values do not fit, a file another writer made) gives
    // way to the ordinary rewrite: the files it wrote go, and the statement runs again.
    let mut splice = job.splice.is_some();
    let mut source = source;
    let (written, result) = loop {
        let written = WrittenFiles::default();
        let run = Run {
            job,
            context,
            m,
            written: &written,
        };
        let result = run.changes(Arc::clone(&source), splice).await;
        match result {
            Ok(Outcome::SpliceRefused) => {
                // The source runs again: its plan's nodes (a repartition's channels, a file
                // scan's queue) start afresh.
                source = reset_plan_states(source)?;
                written.remove_all(job.table.file_io()).await;
                m.add("splice_fallbacks", 1);
                splice = false;
            }
            other => break (written, other),
        }
    };
    let (changes, counts) = match result {
        Ok(Outcome::Changes(c, counts)) => (*c, counts),
        Ok(Outcome::Nothing) => return Ok(0),
        Ok(Outcome::SpliceRefused) => {
            return Err(DataFusionError::Internal(
                "MERGE splice refused twice".into(),
            ))
        }
        Err(e) => {
            written.remove_all(job.table.file_io()).await;
            return Err(e);
        }
    };
    let files_written = changes.added_data_files.len();
    let delete_files_written = changes.added_delete_files.len();
    let outcome = commit_or_clean_up(&job.store, &job.table, changes, &written).await?;
    m.add("commit_attempts", outcome.attempts as usize);
    let (updated, deleted, inserted, rewritten, delete_files_removed) = counts;
    m.add("rows_updated", updated as usize);
    m.add("rows_deleted", deleted as usize);
    m.add("rows_inserted", inserted as usize);
    m.add("files_rewritten", rewritten);
    m.add("files_written", files_written);
    m.add("delete_files_written", delete_files_written);
    m.add("delete_files_removed", delete_files_removed);
    Ok(updated + deleted + inserted)
}

/// What a run of both passes came to.
enum Outcome {
    /// The statement changes nothing.
    Nothing,
    /// The snapshot changes to commit.
    Changes(Box<SnapshotChanges>, MergeCounts),
    /// The splice could not finish: run again without it.
    SpliceRefused,
}

/// (updated, deleted, inserted, files rewritten, delete files removed).
type MergeCounts = (u64, u64, u64, usize, usize);

/// One run of a `MERGE`'s passes: what every step of it needs.
pub(super) struct Run<'a> {
    pub(super) job: &'a MergeJob,
    pub(super) context: &'a Arc<TaskContext>,
    pub(super) m: &'a StatementMetrics,
    pub(super) written: &'a WrittenFiles,
}

/// The first pass's columns and clauses: the whole rows, the deciding columns only (a narrow
/// copy-on-write pass), or the deciding and updated columns (a column splice).
struct Pass<'a> {
    layout: &'a Arc<RowLayout>,
    clauses: &'a Arc<[Clause]>,
    spec: &'a JoinSpec,
    /// By column splice: the updated rows' new values, kept by file and position.
    splice_values: Option<Arc<SpliceValues>>,
    /// The source's batches when the pass is narrow (its rewrite joins them again).
    decide: Option<Vec<RecordBatch>>,
}

/// What the first pass did.
pub(super) struct FirstPass {
    /// The new data files (updated rows' new versions, inserted rows).
    pub(super) added: Vec<NewFile>,
    /// The target positions updated or deleted, by file.
    pub(super) changed: PositionMap,
    /// The deleted ones among them, when a narrow pass keeps them apart.
    pub(super) deleted_positions: PositionMap,
    pub(super) updated: u64,
    pub(super) deleted: u64,
    pub(super) inserted: u64,
}

/// What the second pass wrote: new data files (copy-on-write), delete files and the ones they
/// replace (merge-on-read), and the data files it rewrote.
#[derive(Default)]
pub(super) struct SecondPass {
    pub(super) added: Vec<NewFile>,
    pub(super) delete_files: Vec<NewFile>,
    pub(super) replaced: RemovedDeletes,
    pub(super) rewritten: usize,
}

impl Run<'_> {
    /// The error that stops the statement, nothing changed.
    pub(super) fn fail(&self, what: String) -> DataFusionError {
        DataFusionError::Execution(format!(
            "MERGE on table '{}' aborted, nothing was changed: {what}",
            self.job.sql_table()
        ))
    }

    /// Both passes: the snapshot changes to commit, or what stopped them.
    async fn changes(&self, source: Arc<dyn ExecutionPlan>, splice: bool) -> Result<Outcome> {
        let (job, m) = (self.job, self.m);
        let read = read_source(with_marker(source)?, &job.spec, self.context, m.spill()).await?;
        m.add("source_rows", read.rows as usize);
        let filters = job.target_filters(&read.bounds);
        let files = job.target_files(&filters).await?;
        m.add("target_files_scanned", files.files.len());
        let pass = self.pass(&files, &read, splice);
        let source_schema = Arc::clone(&read.schema);
        let narrow = pass.decide.is_some();
        let by_splice = pass.splice_values.is_some();
        let mut first = self.first_pass(read, &files, &pass).await?;
        let (updated, deleted, inserted) = (first.updated, first.deleted, first.inserted);
        let new_rows: u64 = first.added.iter().map(|f| f.file.record_count()).sum();
        // A narrow first pass or a splice leaves the updated rows' new versions to the rewrite.
        let new_in_pass_1 = match narrow || by_splice {
            true => inserted,
            false => updated + inserted,
        };
        if new_rows != new_in_pass_1 {
            return Err(self.fail(format!(
                "it wrote {new_rows} new rows for {updated} updated and {inserted} inserted"
            )));
        }
        let changed_rows: u64 = first.changed.values().map(|b| b.len()).sum();
        if changed_rows != updated + deleted {
            return Err(self.fail(format!(
                "it holds {changed_rows} changed positions for {updated} updated and {deleted} \
                 deleted rows"
            )));
        }
        // The copy the rewrite joins with, when it has updated rows to make new versions of (the
        // batches themselves go: nothing holds them through pass 2).
        let source_copy = match pass.decide {
            Some(batches) if updated > 0 && job.mode == WriteMode::CopyOnWrite => {
                Some(copy_source(&batches, &source_schema, self.context)?)
            }
            _ => None,
        };
        let touched = self.touched(&files, &first.changed)?;
        if first.added.is_empty() && touched.is_empty() {
            return Ok(Outcome::Nothing);
        }
        if let Some(values) = &pass.splice_values {
            if values.refused()? {
                return Ok(Outcome::SpliceRefused);
            }
        }
        let second = match (touched.is_empty(), job.mode, &pass.splice_values) {
            (true, _, _) => SecondPass::default(),
            (false, WriteMode::MergeOnRead, _) => {
                self.merge_on_read(&touched, &first.changed).await?
            }
            (false, WriteMode::CopyOnWrite, Some(values)) => {
                match self.splice(values, &touched, &first).await? {
                    Some(second) => second,
                    None => return Ok(Outcome::SpliceRefused),
                }
            }
            (false, WriteMode::CopyOnWrite, None) => {
                let source = source_copy.map(|copy| (copy, source_schema));
                self.rewrite(&files, &touched, &mut first, source, narrow)
                    .await?
            }
        };
        self.snapshot_changes(&files, &filters, &touched, first, second)
            .await
    }

    /// The first pass this run makes (see [`Pass`]): by column splice when every file it may
    /// touch allows it; otherwise, for copy-on-write with the source in memory, the deciding
    /// columns only when the statement allows it; else whole rows.
    fn pass<'a>(&'a self, files: &ScanFiles, read: &SourceRead, splice: bool) -> Pass<'a> {
        let job = self.job;
        let metadata = job.table.metadata();
        if let Some(s) = job.splice.as_ref().filter(|s| {
            splice && files_allow_splice(files, metadata) && !moves_rows(metadata, &s.columns)
        }) {
            return Pass {
                layout: &s.layout,
                clauses: &s.clauses,
                spec: &s.spec,
                splice_values: Some(Arc::new(SpliceValues::new(
                    s.columns.clone(),
                    &job.table_schema,
                    self.context,
                ))),
                decide: None,
            };
        }
        // The narrow pass's source batches are shared with pass 1's plan, which holds them
        // until pass 1 ends.
        match (&job.decide, &read.buffered) {
            (Some(d), BufferedSource::Memory(batches, _)) => Pass {
                layout: &d.layout,
                clauses: &d.clauses,
                spec: &d.spec,
                splice_values: None,
                decide: Some(batches.clone()),
            },
            _ => Pass {
                layout: &job.layout,
                clauses: &job.clauses,
                spec: &job.spec,
                splice_values: None,
                decide: None,
            },
        }
    }

    /// The join of the source with the target's live rows, the clauses, and the new rows
    /// written: in the workers' tasks when distributed, with the source in memory and hash
    /// keys (they report the positions they changed); here otherwise.
    async fn first_pass(
        &self,
        read: SourceRead,
        files: &ScanFiles,
        pass: &Pass<'_>,
    ) -> Result<FirstPass> {
        let (job, context, m) = (self.job, self.context, self.m);
        let target = job.scan(files, Some(&pass.layout.target_columns)).await?;
        if m.value("first_pass_target_columns") == 0 {
            m.add(
                "first_pass_target_columns",
                pass.layout.target_columns.len(),
            );
        }
        // The source's keys travel as a filter on the target too: only target rows that may
        // match are shuffled, or reach the join.
        let key_filter =
            source_key_filter(&read, pass.spec, &target.schema(), context, m.spill()).await?;
        let distributed =
            job.distributed && pass.decide.is_none() && !pass.spec.source_keys.is_empty();
        let in_memory = match (&read.buffered, distributed) {
            (BufferedSource::Memory(batches, _), true) => Some(batches.clone()),
            _ => None,
        };
        if let Some(batches) = in_memory {
            let target: Arc<dyn ExecutionPlan> = match &key_filter {
                Some(f) => Arc::new(KeyFilterExec::new(
                    target,
                    pass.spec.target_keys.clone(),
                    Arc::clone(f),
                )),
                None => target,
            };
            let (added, report) = distributed_first_pass(
                job,
                batches,
                Arc::clone(&read.schema),
                target,
                self.written,
                context,
            )
            .await?;
            drop(read);
            return Ok(FirstPass {
                added,
                changed: report.changed,
                deleted_positions: PositionMap::new(),
                updated: report.updated,
                deleted: report.deleted,
                inserted: report.inserted,
            });
        }
        let (join, mode) = join_plan(
            read,
            target,
            key_filter.clone(),
            pass.spec,
            pass.layout,
            context,
            m.spill(),
        )?;
        if let JoinMode::Grace(n) = mode {
            m.add("grace_partitions", n);
        }
        let positions = MergePositions::new(positions_consumer().register(context.memory_pool()));
        let positions = Arc::new(match pass.decide {
            Some(_) => positions.keeping_deleted(),
            None => positions,
        });
        let rows = MergeRowsExec::new(
            join,
            Arc::clone(pass.clauses),
            Arc::clone(pass.layout),
            Arc::clone(&job.table_schema),
            Arc::clone(&positions),
        )
        .with_mode(match (&pass.splice_values, &pass.decide) {
            (Some(v), _) => RowsMode::Splice(Arc::clone(v)),
            (None, Some(_)) => RowsMode::Decide,
            (None, None) => RowsMode::NewRows,
        });
        let added = job
            .write(Arc::new(rows), self.written, context, &m.spill())
            .await?;
        if let Some(f) = &key_filter {
            m.add("target_rows_skipped_by_key_filter", f.skipped());
        }
        let (updated, deleted, inserted) = positions.counts();
        Ok(FirstPass {
            added,
            changed: positions.take_changed()?,
            deleted_positions: positions.take_deleted()?,
            updated,
            deleted,
            inserted,
        })
    }

    /// The planned files with changed rows, in path order.
    fn touched(&self, files: &ScanFiles, changed: &PositionMap) -> Result<Vec<PlannedFile>> {
        let by_path: HashMap<&str, &PlannedFile> =
            files.files.iter().map(|f| (f.path.as_str(), f)).collect();
        let mut touched: Vec<PlannedFile> = vec![];
        for path in changed.keys() {
            let file = by_path
                .get(path.as_str())
                .ok_or_else(|| self.fail(format!("{path} was changed but not planned")))?;
            touched.push((*file).clone());
        }
        touched.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(touched)
    }

    /// The snapshot changes of both passes: the new files, the rewritten ones and the delete
    /// files that go with them, validated against what the statement read.
    async fn snapshot_changes(
        &self,
        files: &ScanFiles,
        filters: &Option<Option<Vec<Expr>>>,
        touched: &[PlannedFile],
        first: FirstPass,
        second: SecondPass,
    ) -> Result<Outcome> {
        let job = self.job;
        let removed: Vec<&PlannedFile> = match job.mode {
            WriteMode::CopyOnWrite => touched.iter().collect(),
            WriteMode::MergeOnRead => vec![],
        };
        let (removed_files, removed_vectors, delete_files_removed) = removed_with_deletes(
            &job.table,
            &job.write_to,
            &job.locations,
            job.planning_threshold(),
            &removed,
            &files.equality_deletes,
            second.replaced,
        )
        .await?;
        let read_files: HashSet<String> = touched.iter().map(|f| f.path.clone()).collect();
        let operation = match removed_files.is_empty() && second.delete_files.is_empty() {
            true => Operation::Append,
            false => Operation::Overwrite,
        };
        let mut added = first.added;
        added.extend(second.added);
        let changes = SnapshotChanges {
            operation,
            added_data_files: added,
            added_delete_files: second.delete_files,
            removed_files,
            removed_deletion_vectors: removed_vectors,
            summary_properties: HashMap::new(),
            validation: Some(job.validation(filters, read_files)?),
            data_sequence_number: None,
            rewrite_data_manifests: false,
            task_context: None,
            write_to: job.write_to.clone(),
            ..Default::default()
        };
        let counts = (
            first.updated,
            first.deleted,
            first.inserted,
            second.rewritten,
            delete_files_removed,
        );
        Ok(Outcome::Changes(Box::new(changes), counts))
    }
}

/// A distributed `MERGE`'s first pass. The source (in memory here) and the target are
/// hash-partitioned by the join keys, and each task joins its partitions, applies the clauses
/// and writes the new rows (sorting its own for a sorted table). Its writer then reports, in
/// its output, the target positions the task changed and its counts. A target row has one key,
/// so one task sees it: the check that no target row matches twice holds per task. Returns the
/// new data files (recorded in `written` as they arrive) and the reports' sum.
async fn distributed_first_pass(
    job: &MergeJob,
    batches: Vec<RecordBatch>,
    schema: SchemaRef,
    target: Arc<dyn ExecutionPlan>,
    written: &WrittenFiles,
    context: &Arc<TaskContext>,
) -> Result<(Vec<NewFile>, MergeReport)> {
    let spec = &job.spec;
    let filter = spec
        .filter
        .as_ref()
        .map(|f| join_filter(Arc::clone(f), &schema, &target.schema(), &job.layout))
        .transpose()?;
    let source = MemorySourceConfig::try_new_exec(&[batches], schema, None)?;
    let join = hash_join(
        source,
        target,
        filter,
        spec,
        spec.join_type,
        PartitionMode::Partitioned,
    )?;
    let positions = Arc::new(MergePositions::new(
        positions_consumer().register(context.memory_pool()),
    ));
    let rows: Arc<dyn ExecutionPlan> = Arc::new(MergeRowsExec::new(
        Arc::new(join),
        Arc::clone(&job.clauses),
        Arc::clone(&job.layout),
        Arc::clone(&job.table_schema),
        Arc::clone(&positions),
    ));
    distributed_write(job, rows, positions, written, context).await
}

/// Writes `input` (rows of the table) in the workers' tasks, each sorting its own rows for a
/// sorted table, its writer reporting `tally`; returns the data files (recorded in `written`
/// as they arrive) and the reports' sum.
pub(super) async fn distributed_write(
    job: &MergeJob,
    input: Arc<dyn ExecutionPlan>,
    tally: Arc<dyn WriterTally>,
    written: &WrittenFiles,
    context: &Arc<TaskContext>,
) -> Result<(Vec<NewFile>, MergeReport)> {
    let sort = sort_requirement(&job.table, &input.schema())?;
    let writer = DataFileWriterExec::try_new(input, job.table.clone(), sort, written.clone())?
        .with_row_lineage(job.row_lineage())?
        .with_local_sort(true)
        .with_report(tally);
    let plan = crate::dml::guard::through_planner(&job.state, Arc::new(writer)).await?;
    let mut report = MergeReport::default();
    let added = run_writers(plan, context, job.table.metadata(), written, |batch| {
        report.add(batch)
    })
    .await?;
    Ok((added, report))
}

/// A copy of the source batches in a spill file, for the rewrite's join.
fn copy_source(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    context: &Arc<TaskContext>,
) -> Result<Arc<dyn SpillFile>> {
    let metrics = ExecutionPlanMetricsSet::new();
    let mut file = SpillWriter::create(
        &context.runtime_env(),
        schema,
        SpillMetrics::new(&metrics, 0),
        "MERGE source copy",
    )?;
    for b in batches {
        file.append(b)?;
    }
    file.finish()
}
