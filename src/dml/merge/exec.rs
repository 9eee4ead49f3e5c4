//! A planned `MERGE` as the statement its node (`MergeExec`, a
//! [`StatementExec`](crate::physical_plan::statement::StatementExec) whose child is the source)
//! runs: read the source, plan and join the target, write the new rows, then position deletes or
//! the rewrite, check it, and commit; again on the new table state after a conflict.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SpillFile, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::expressions::{self, Column};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, SpillMetrics};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;
use iceberg::spec::Operation;
use iceberg::table::Table;

use crate::commit::MetadataStore;

use crate::commit::{commit_or_clean_up, removed_with_deletes};
use crate::commit::{RemovedDeletes, SnapshotChanges};
use crate::dml::core::WriteMode;
use crate::dml::splice::{drop_rows, files_allow_splice, moves_rows, splice_files, DroppedRows};
use crate::file_planning::{PlannedFile, ScanFiles};
use crate::physical_plan::merge::join::{
    hash_join, join_filter, join_plan, rewrite_join, JoinMode,
};
use crate::physical_plan::merge::key_filter::{source_key_filter, KeyFilterExec};
use crate::physical_plan::merge::positions::{
    positions_consumer, DropCounts, DropPositionsExec, MergePositions, MergeReport, PositionMap,
};
use crate::physical_plan::merge::rewrite::RewriteExec;
use crate::physical_plan::merge::rows::{MergeRowsExec, RowsMode};
use crate::physical_plan::merge::source::{read_source, spilled_exec, BufferedSource};
use crate::physical_plan::merge::splice::SpliceValues;
use crate::physical_plan::spill::SpillWriter;
use crate::physical_plan::statement::{Statement, StatementMetrics};
use crate::physical_plan::without_work_stealing;
use crate::physical_plan::write::{run_writers, sort_requirement, DataFileWriterExec, WriterTally};
use crate::physical_plan::write::{DeleteWriter, FileDeletes};
use crate::physical_plan::write::{NewValues, Splicer, WrittenFiles};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::joins::PartitionMode;

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
        let result = changes(job, Arc::clone(&source), context, m, &written, splice).await;
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

/// Both passes: the snapshot changes to commit, or `None` when the statement changes nothing.
async fn changes(
    job: &MergeJob,
    source: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    m: &StatementMetrics,
    written: &WrittenFiles,
    splice: bool,
) -> Result<Outcome> {
    let fail = |what: String| {
        DataFusionError::Execution(format!(
            "MERGE on table '{}' aborted, nothing was changed: {what}",
            job.sql_table()
        ))
    };
    let read = read_source(with_marker(source)?, &job.spec, context, m.spill()).await?;
    m.add("source_rows", read.rows as usize);
    let filters = job.target_filters(&read.bounds);
    let files = job.target_files(&filters).await?;
    m.add("target_files_scanned", files.files.len());
    // Copy-on-write by column splice when every file it may touch allows it.
    let metadata = job.table.metadata();
    let splice = match &job.splice {
        Some(s)
            if splice
                && files_allow_splice(&files, metadata)
                && !moves_rows(metadata, &s.columns) =>
        {
            Some(s)
        }
        _ => None,
    };
    // Otherwise copy-on-write reads only the deciding columns first when it can, with the
    // source in memory: the rewrite then joins the updated rows with the source again. Its
    // batches are shared with pass 1's plan, which holds them until pass 1 ends.
    let (decide, source_batches) = match (&job.decide, &read.buffered, splice) {
        (Some(d), BufferedSource::Memory(batches, _), None) => (Some(d), Some(batches.clone())),
        _ => (None, None),
    };
    let (layout, clauses, spec) = match (splice, decide) {
        (Some(s), _) => (&s.layout, &s.clauses, &s.spec),
        (None, Some(d)) => (&d.layout, &d.clauses, &d.spec),
        (None, None) => (&job.layout, &job.clauses, &job.spec),
    };
    let splice_values = splice.map(|s| {
        Arc::new(SpliceValues::new(
            s.columns.clone(),
            &job.table_schema,
            context,
        ))
    });
    let source_schema = Arc::clone(&read.schema);
    let target = job.scan(&files, Some(&layout.target_columns)).await?;
    if m.value("first_pass_target_columns") == 0 {
        m.add("first_pass_target_columns", layout.target_columns.len());
    }
    // Distributed, with the source in memory and hash keys: the join, the clauses and the
    // writers run in the workers' tasks, which report the positions they changed.
    let distributed_source = match (&read.buffered, job.distributed && decide.is_none()) {
        (BufferedSource::Memory(batches, _), true) if !spec.source_keys.is_empty() => {
            Some(batches.clone())
        }
        _ => None,
    };
    let (mut added, changed, deleted_positions, (updated, deleted, inserted)) =
        match distributed_source {
            Some(batches) => {
                // The source's keys travel as a filter on the target too: only target rows
                // that may match are shuffled.
                let key_filter =
                    source_key_filter(&read, spec, &target.schema(), context, m.spill()).await?;
                let target: Arc<dyn ExecutionPlan> = match &key_filter {
                    Some(f) => Arc::new(KeyFilterExec::new(
                        target,
                        spec.target_keys.clone(),
                        Arc::clone(f),
                    )),
                    None => target,
                };
                let (added, report) = distributed_first_pass(
                    job,
                    batches,
                    Arc::clone(&read.schema),
                    target,
                    written,
                    context,
                )
                .await?;
                drop(read);
                (
                    added,
                    report.changed,
                    PositionMap::new(),
                    (report.updated, report.deleted, report.inserted),
                )
            }
            None => {
                let key_filter =
                    source_key_filter(&read, spec, &target.schema(), context, m.spill()).await?;
                let (join, mode) = join_plan(
                    read,
                    target,
                    key_filter.clone(),
                    spec,
                    layout,
                    context,
                    m.spill(),
                )?;
                if let JoinMode::Grace(n) = mode {
                    m.add("grace_partitions", n);
                }
                let positions =
                    MergePositions::new(positions_consumer().register(context.memory_pool()));
                let positions = Arc::new(match decide {
                    Some(_) => positions.keeping_deleted(),
                    None => positions,
                });
                let rows: Arc<dyn ExecutionPlan> = Arc::new(
                    MergeRowsExec::new(
                        join,
                        Arc::clone(clauses),
                        Arc::clone(layout),
                        Arc::clone(&job.table_schema),
                        Arc::clone(&positions),
                    )
                    .with_mode(match (&splice_values, decide) {
                        (Some(v), _) => RowsMode::Splice(Arc::clone(v)),
                        (None, Some(_)) => RowsMode::Decide,
                        (None, None) => RowsMode::NewRows,
                    }),
                );
                let added = job.write(rows, written, context, &m.spill()).await?;
                if let Some(f) = &key_filter {
                    m.add("target_rows_skipped_by_key_filter", f.skipped());
                }
                let counts = positions.counts();
                let changed = positions.take_changed()?;
                let deleted_positions = positions.take_deleted()?;
                (added, changed, deleted_positions, counts)
            }
        };
    let new_rows: u64 = added.iter().map(|f| f.file.record_count()).sum();
    // A narrow first pass or a splice leaves the updated rows' new versions to the rewrite.
    let new_in_pass_1 = match decide.is_some() || splice.is_some() {
        true => inserted,
        false => updated + inserted,
    };
    if new_rows != new_in_pass_1 {
        return Err(fail(format!(
            "it wrote {new_rows} new rows for {updated} updated and {inserted} inserted"
        )));
    }
    // The copy the rewrite joins with, when it has updated rows to make new versions of (the
    // batches themselves go: nothing holds them through pass 2).
    let source_copy = match source_batches {
        Some(batches) if updated > 0 && job.mode == WriteMode::CopyOnWrite => {
            Some(copy_source(&batches, &source_schema, context)?)
        }
        _ => None,
    };
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
        return Ok(Outcome::Nothing);
    }
    if let Some(values) = &splice_values {
        if values.refused()? {
            return Ok(Outcome::SpliceRefused);
        }
    }

    let mut delete_files = vec![];
    let mut replaced = RemovedDeletes::default();
    let mut rewritten = 0;
    if !touched.is_empty() {
        match job.mode {
            WriteMode::MergeOnRead => {
                let outputs = write_deletes(job, &touched, &changed, written, context).await?;
                (delete_files, replaced) = crate::physical_plan::write::fold(outputs);
            }
            WriteMode::CopyOnWrite if splice_values.is_some() => {
                let Some(values) = splice_values.clone() else {
                    return Err(DataFusionError::Internal("no splice values".into()));
                };
                let splicer = Arc::new(Splicer::new(
                    &job.table,
                    &job.locations,
                    values.columns().to_vec(),
                    &[],
                    context,
                )?);
                let take = move |path: &str| values.take(path).map(NewValues::At);
                let Some((files, spliced)) = splice_files(splicer, take, &touched, written).await?
                else {
                    return Ok(Outcome::SpliceRefused);
                };
                let read: u64 = touched.iter().map(|f| f.record_count).sum();
                let kept: u64 = files.iter().map(|f| f.file.record_count()).sum();
                if spliced != updated || deleted != 0 || kept != read {
                    return Err(fail(format!(
                        "the splice does not add up (pass 1 updated {updated} and deleted \
                         {deleted} rows; the splice took {spliced} new values and wrote {kept} of \
                         the {read} rows of the rewritten files)"
                    )));
                }
                m.add("files_spliced", files.len());
                rewritten = touched.len();
                added.extend(files);
            }
            WriteMode::CopyOnWrite => {
                let changed = Arc::new(changed);
                // Without new versions to join, the files only lose rows: their row groups that
                // keep every row are copied as they are, the others encoded again.
                let mut by_splice = DroppedRows::default();
                let mut rest = touched.clone();
                let touched_files = ScanFiles {
                    files: touched.clone(),
                    equality_deletes: files.equality_deletes.clone(),
                    streamed: files.streamed,
                    columns: files.columns.clone(),
                };
                if source_copy.is_none() && job.drops_by_splice(&touched_files) {
                    let splicer = Arc::new(Splicer::new(
                        &job.table,
                        &job.locations,
                        vec![],
                        &[],
                        context,
                    )?);
                    let positions = Arc::clone(&changed);
                    let drops = move |path: &str| {
                        positions
                            .get(path)
                            .cloned()
                            .map(NewValues::Dropped)
                            .ok_or_else(|| {
                                DataFusionError::Internal(format!("no changed rows in {path}"))
                            })
                    };
                    by_splice = drop_rows(splicer, drops, &touched, written).await?;
                    rest = std::mem::take(&mut by_splice.refused);
                    m.add("files_spliced", touched.len() - rest.len());
                    m.add("row_groups_copied", by_splice.groups_copied);
                    m.add("splice_fallbacks", usize::from(!rest.is_empty()));
                }
                let spliced = Arc::new(AtomicU64::new(0));
                let (kept, read, dropped) = match rest.is_empty() {
                    true => (vec![], 0, 0),
                    false => {
                        let counts = Arc::new(DropCounts::default());
                        let rewrite = ScanFiles {
                            files: rest.clone(),
                            equality_deletes: files.equality_deletes.clone(),
                            streamed: files.streamed,
                            columns: files.columns.clone(),
                        };
                        let scan = job.scan(&rewrite, None).await?;
                        let keep: Arc<dyn ExecutionPlan> = match source_copy {
                            Some(copy) => {
                                let source = spilled_exec(copy, source_schema, context, m.spill())?;
                                let spliced = Arc::clone(&spliced);
                                let versions = |probe: Arc<dyn ExecutionPlan>| {
                                    let join = rewrite_join(source, probe, &job.spec, &job.layout)?;
                                    let unused = Arc::new(MergePositions::new(
                                        positions_consumer().register(context.memory_pool()),
                                    ));
                                    Ok(Arc::new(
                                        MergeRowsExec::new(
                                            join,
                                            Arc::clone(&job.clauses),
                                            Arc::clone(&job.layout),
                                            Arc::clone(&job.table_schema),
                                            unused,
                                        )
                                        .with_mode(RowsMode::Rewrite(spliced)),
                                    )
                                        as Arc<dyn ExecutionPlan>)
                                };
                                Arc::new(RewriteExec::try_new(
                                    scan,
                                    versions,
                                    Arc::clone(&changed),
                                    Arc::new(deleted_positions),
                                    Arc::clone(&counts),
                                    Arc::clone(&job.table_schema),
                                )?)
                            }
                            None => Arc::new(DropPositionsExec::new(
                                scan,
                                Arc::clone(&changed),
                                Arc::clone(&job.table_schema),
                                Arc::clone(&counts),
                            )),
                        };
                        // Distributed, the rewrite runs in the workers' tasks too (each with the
                        // changed positions), which report what they read and dropped.
                        match job.distributed && keep.downcast_ref::<DropPositionsExec>().is_some()
                        {
                            true => {
                                let (kept, report) = distributed_write(
                                    job,
                                    keep,
                                    Arc::clone(&counts) as Arc<dyn WriterTally>,
                                    written,
                                    context,
                                )
                                .await?;
                                (kept, report.read, report.dropped)
                            }
                            false => {
                                let kept = job.write(keep, written, context, &m.spill()).await?;
                                let read = counts.read.load(Ordering::Relaxed);
                                (kept, read, counts.dropped.load(Ordering::Relaxed))
                            }
                        }
                    }
                };
                let spliced = spliced.load(Ordering::Relaxed);
                let (read, dropped) = (read + by_splice.read, dropped + by_splice.dropped);
                let mut kept = kept;
                kept.extend(by_splice.files);
                let kept_rows: u64 = kept.iter().map(|f| f.file.record_count()).sum();
                // Without a narrow first pass, the rewrite drops the updated rows (their new
                // versions were written in pass 1); with one, it writes them.
                let (should_drop, should_splice) = match decide {
                    Some(_) => (deleted, updated),
                    None => (changed_rows, 0),
                };
                if dropped != should_drop
                    || spliced != should_splice
                    || read.checked_sub(dropped) != Some(kept_rows)
                {
                    return Err(fail(format!(
                        "the rewrite does not add up (pass 1 changed {changed_rows} rows in the \
                         rewritten files, {updated} of them updated; pass 2 read {read}, dropped \
                         {dropped}, updated {spliced}, wrote {kept_rows})"
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
    let (removed_files, removed_vectors, delete_files_removed) = removed_with_deletes(
        &job.table,
        &job.locations,
        job.planning_threshold(),
        &removed,
        &files.equality_deletes,
        replaced,
    )
    .await?;
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
        removed_deletion_vectors: removed_vectors,
        summary_properties: HashMap::new(),
        validation: Some(job.validation(&filters, read_files)?),
        data_sequence_number: None,
        rewrite_data_manifests: false,
        task_context: None,
    };
    Ok(Outcome::Changes(
        Box::new(changes),
        (updated, deleted, inserted, rewritten, delete_files_removed),
    ))
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
) -> Result<(Vec<crate::commit::NewFile>, MergeReport)> {
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
async fn distributed_write(
    job: &MergeJob,
    input: Arc<dyn ExecutionPlan>,
    tally: Arc<dyn WriterTally>,
    written: &WrittenFiles,
    context: &Arc<TaskContext>,
) -> Result<(Vec<crate::commit::NewFile>, MergeReport)> {
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

/// Merge-on-read: one position delete file (format v3: deletion vector) per data file with
/// changed rows, merged with the file's earlier deletes, written a few at a time on the
/// runtime's threads.
async fn write_deletes(
    job: &MergeJob,
    touched: &[PlannedFile],
    changed: &PositionMap,
    written: &WrittenFiles,
    context: &Arc<TaskContext>,
) -> Result<Vec<FileDeletes>> {
    let writer = DeleteWriter::new(&job.table, &job.locations, touched, context)?;
    let mut tasks = vec![];
    for f in touched {
        let bitmap = changed
            .get(&f.path)
            .ok_or_else(|| DataFusionError::Internal(format!("no positions for {}", f.path)))?
            .clone();
        let (writer, written, path) = (writer.clone(), written.clone(), f.path.clone());
        tasks.push(async move {
            SpawnedTask::spawn(async move { writer.write(&path, bitmap, &written).await })
                .join_unwind()
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?
        });
    }
    let parallel = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
    // Every task started runs to its end (and records its file), also after another failed.
    let results: Vec<Result<FileDeletes>> = futures::stream::iter(tasks)
        .buffered(parallel)
        .collect()
        .await;
    results.into_iter().collect()
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
