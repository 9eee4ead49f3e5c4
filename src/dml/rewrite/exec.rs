//! A planned `DELETE` or `UPDATE` as the statement its node (`DeleteExec` / `UpdateExec`, a
//! [`StatementExec`](crate::physical_plan::statement::StatementExec)) runs: pass 1 (its child),
//! pass 2, the self-check and the commit; planned again on the new table state when a concurrent
//! commit changed what it read.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, RecordBatch};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::Distribution;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::StreamExt;
use iceberg::spec::{Operation, TableMetadata};
use iceberg::table::Table;

use super::{DmlJob, DmlOp};
use crate::commit::MetadataStore;
use crate::commit::{commit_or_clean_up, removed_with_deletes};
use crate::commit::{NewFile, RemovedDeletes, SnapshotChanges, Validation};
use crate::dml::core::WriteMode;
use crate::dml::delete::splice_delete;
use crate::dml::mor_pass::write_position_deletes;
use crate::dml::update::splice_update;
use crate::file_planning::strict::FileStats;
use crate::file_planning::PlannedFile;
use crate::physical_plan::statement::{Statement, StatementMetrics};
use crate::physical_plan::write::position_delete_writer::Reported;
use crate::physical_plan::write::{decode_tally, run_writers, WrittenFiles};
use crate::IcebergOptions;

/// A planned `DELETE` or `UPDATE`, run by a
/// [`StatementExec`](crate::physical_plan::statement::StatementExec) (shown as `DeleteExec` /
/// `UpdateExec`) whose child is pass 1: pass 2, verification and the commit. One output row:
/// `count`, the rows deleted or updated.
#[derive(Debug)]
pub(super) struct DmlStatement {
    pub(super) job: Arc<DmlJob>,
}

/// Adds each row's file to `counts`.
fn count_files(batch: &RecordBatch, counts: &mut HashMap<String, u64>) -> Result<()> {
    let files = crate::physical_plan::file_keys::FileKeys::of(batch.column(0))?;
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

async fn run_once(
    job: Arc<DmlJob>,
    pass1: Option<Arc<dyn ExecutionPlan>>,
    context: Arc<TaskContext>,
    m: &StatementMetrics,
) -> Result<u64> {
    let written = WrittenFiles::default();
    let (changes, answer) = match prepare(&job, pass1, &context, m, &written).await {
        Ok(Prepared::Nothing(answer)) => return Ok(answer),
        Ok(Prepared::Changes(changes, answer)) => (changes, answer),
        Err(e) => {
            written.remove_all(job.table.file_io()).await;
            return Err(e);
        }
    };
    let outcome = commit_or_clean_up(&job.store, &job.table, *changes, &written).await?;
    m.add("commit_attempts", outcome.attempts as usize);
    Ok(answer)
}

/// What a run of a statement changes, before its commit.
pub(in crate::dml) enum Prepared {
    /// Nothing to commit; the statement's answer.
    Nothing(u64),
    /// The snapshot to commit (its validation included), and the statement's answer once it
    /// has committed.
    Changes(Box<SnapshotChanges>, u64),
}

/// Runs `job`'s passes (pass 1 is `pass1`) and returns what they change; the files written are
/// recorded in `written` (the caller removes them when this fails or the commit does).
pub(in crate::dml) async fn prepare(
    job: &DmlJob,
    pass1: Option<Arc<dyn ExecutionPlan>>,
    context: &Arc<TaskContext>,
    m: &StatementMetrics,
    written: &WrittenFiles,
) -> Result<Prepared> {
    let mor = job.mode == WriteMode::MergeOnRead;
    // Pass 1: matching live rows per file (merge-on-read: written as position deletes).
    let first = match pass1 {
        Some(plan) => match first_pass(job, plan, context, written).await {
            Ok(first) => first,
            Err(e) => {
                written.remove_all(job.table.file_io()).await;
                return Err(e);
            }
        },
        None => FirstPass::default(),
    };
    let matched = &first.matched;
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
    if removed.is_empty() && first.delete_files.is_empty() {
        return Ok(Prepared::Nothing(0));
    }
    if let DmlOp::Update(assignments) = &job.op {
        if assignments.is_empty() {
            return Ok(Prepared::Nothing(deleted));
        }
    }

    // Pass 2: copy-on-write rewrites the touched files; a merge-on-read UPDATE writes the new
    // versions of the matching rows.
    let mut added: Vec<NewFile> = vec![];
    let rewrite = !touched.is_empty() && (!mor || matches!(job.op, DmlOp::Update(_)));
    if rewrite {
        let pass = SecondPass {
            job,
            touched: &touched,
            matched: matched_in_touched,
            context,
            written,
            m,
        };
        match pass.run().await {
            Ok(files) => added = files,
            Err(e) => {
                written.remove_all(job.table.file_io()).await;
                return Err(e.context(format!(
                    "{} on table '{}' failed while rewriting {} file(s); nothing was changed",
                    job.op.sql(),
                    job.table.identifier(),
                    touched.len()
                )));
            }
        }
    }

    let threshold = IcebergOptions::from_config(job.state.config_options()).planning_threshold;
    let (removed_files, removed_vectors, delete_files_removed) = removed_with_deletes(
        &job.table,
        &job.write_to,
        &job.locations,
        threshold,
        &removed,
        &job.checked.equality_deletes,
        first.replaced,
    )
    .await?;
    let changes = SnapshotChanges {
        operation: if added.is_empty() {
            Operation::Delete
        } else {
            Operation::Overwrite
        },
        added_data_files: added,
        added_delete_files: first.delete_files,
        removed_files,
        removed_deletion_vectors: removed_vectors,
        summary_properties: HashMap::new(),
        validation: Some(validation(job, &touched)),
        data_sequence_number: None,
        rewrite_data_manifests: false,
        task_context: None,
        write_to: job.write_to.clone(),
        ..Default::default()
    };
    m.add("rows_deleted", deleted as usize);
    m.add("files_removed_whole", job.removed_whole.len());
    m.add("files_rewritten", if mor { 0 } else { touched.len() });
    m.add("files_written", changes.added_data_files.len());
    m.add("delete_files_written", changes.added_delete_files.len());
    m.add("delete_files_removed", delete_files_removed);
    Ok(Prepared::Changes(Box::new(changes), deleted))
}

/// What pass 1 found: the matching live rows per data file, and for merge-on-read the delete
/// files it wrote and those they replace.
#[derive(Default)]
struct FirstPass {
    matched: HashMap<String, u64>,
    delete_files: Vec<NewFile>,
    replaced: RemovedDeletes,
}

/// Runs pass 1 (`plan`): counts the matching rows per file, or writes their position deletes
/// (merge-on-read; distributed, the workers write them and their rows report them).
async fn first_pass(
    job: &DmlJob,
    plan: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    written: &WrittenFiles,
) -> Result<FirstPass> {
    let mut first = FirstPass::default();
    match (job.mode, job.distributed) {
        (WriteMode::MergeOnRead, true) => {
            let mut reported = Reported::default();
            let mut stream = execute_stream(plan, Arc::clone(context))?;
            while let Some(batch) = stream.next().await {
                reported.add(&batch?, job.table.metadata(), written)?;
            }
            first.matched = reported.counts;
            (first.delete_files, first.replaced) =
                crate::physical_plan::write::fold(reported.files);
        }
        (WriteMode::MergeOnRead, false) => {
            let (counts, files) = write_position_deletes(job, plan, context, written).await?;
            first.matched = counts;
            (first.delete_files, first.replaced) = crate::physical_plan::write::fold(files);
        }
        (WriteMode::CopyOnWrite, _) => {
            let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(plan));
            let mut stream = execute_stream(plan, Arc::clone(context))?;
            while let Some(batch) = stream.next().await {
                count_files(&batch?, &mut first.matched)?;
            }
        }
    }
    Ok(first)
}

/// Pass 2 over the touched files: copy-on-write rewrites them (by column splice for an
/// `UPDATE`, by row-group splice for a `DELETE`, where they apply); a merge-on-read `UPDATE`
/// writes the new versions of the matching rows. Checked against pass 1 row for row.
struct SecondPass<'a> {
    job: &'a DmlJob,
    touched: &'a [PlannedFile],
    /// The rows pass 1 matched in the touched files.
    matched: u64,
    context: &'a Arc<TaskContext>,
    written: &'a WrittenFiles,
    m: &'a StatementMetrics,
}

impl SecondPass<'_> {
    /// The new data files.
    async fn run(&self) -> Result<Vec<NewFile>> {
        let (job, touched, m) = (self.job, self.touched, self.m);
        let mor = job.mode == WriteMode::MergeOnRead;
        // Copy-on-write UPDATE by column splice, when it applies.
        if !mor {
            if let Some(files) = self.splice_update().await? {
                return Ok(files);
            }
        }
        // Copy-on-write DELETE: row groups that keep every row are copied as they are.
        let mut added: Vec<NewFile> = vec![];
        let (mut read, mut selected) = (0, 0);
        let mut rest = touched.to_vec();
        if !mor {
            if let Some(d) = splice_delete(job, touched, self.context, self.written).await? {
                m.add("files_spliced", touched.len() - d.refused.len());
                m.add("row_groups_copied", d.groups_copied);
                m.add("splice_fallbacks", usize::from(!d.refused.is_empty()));
                (read, selected) = (d.read, d.dropped);
                added.extend(d.files);
                rest = d.refused;
            }
        }
        if !rest.is_empty() {
            let plan = job.rewrite_plan(rest, self.written.clone()).await?;
            let metadata = job.table.metadata();
            let files = run_writers(plan, self.context, metadata, self.written, |batch| {
                // Each writing task reports its counts (one process: one tally of them all).
                let (r, s) = decode_tally(batch)?;
                read += r;
                selected += s;
                Ok(())
            })
            .await?;
            added.extend(files);
        }
        // Self-check: the two passes must agree row for row.
        let written_rows: u64 = added.iter().map(|f| f.file.record_count()).sum();
        let expected = match (&job.op, mor) {
            (DmlOp::Delete, _) => read.checked_sub(selected),
            (DmlOp::Update(_), false) => Some(read),
            (DmlOp::Update(_), true) => Some(selected),
        };
        let matched = self.matched;
        if selected != matched || expected != Some(written_rows) {
            return Err(DataFusionError::Execution(format!(
                "{} on table '{}' aborted, nothing was changed: the rewrite does not add \
                 up (pass 1 matched {matched} rows in the rewritten files; pass 2 \
                 read {read}, matched {selected}, wrote {written_rows})",
                job.op.sql(),
                job.table.identifier()
            )));
        }
        m.add("rows_rewritten", written_rows as usize);
        Ok(added)
    }

    /// A copy-on-write `UPDATE` by column splice, when it applies: the new files, checked.
    async fn splice_update(&self) -> Result<Option<Vec<NewFile>>> {
        let (job, touched) = (self.job, self.touched);
        let spliced = splice_update(job, touched, self.context, self.written, self.m).await?;
        let Some((files, selected)) = spliced else {
            return Ok(None);
        };
        let read: u64 = touched.iter().map(|f| f.record_count).sum();
        let written_rows: u64 = files.iter().map(|f| f.file.record_count()).sum();
        let matched = self.matched;
        if selected != matched || written_rows != read {
            return Err(DataFusionError::Execution(format!(
                "UPDATE on table '{}' aborted, nothing was changed: the splice does not \
                 add up (pass 1 matched {matched} rows in the rewritten \
                 files; the splice changed {selected} and wrote {written_rows} of \
                 their {read} rows)",
                job.table.identifier()
            )));
        }
        self.m.add("rows_rewritten", written_rows as usize);
        Ok(Some(files))
    }
}

/// What a concurrent commit must not have changed: the files the statement read or removes, and
/// any file a concurrent commit added that may hold rows its condition selects.
pub(in crate::dml) fn validation(job: &DmlJob, touched: &[PlannedFile]) -> Validation {
    // Files removed whole too: a delete committed for one of them meanwhile would stay behind,
    // pointing at a file the table no longer has.
    let read_files: HashSet<String> = touched
        .iter()
        .chain(job.removed_whole.iter())
        .map(|f| f.path.clone())
        .collect();
    let (filters, columns) = (job.filters.clone(), job.columns.clone());
    let may_match: crate::commit::MayMatch =
        Arc::new(move |metadata: &TableMetadata, spec_id: i32, file| {
            let Some(spec) = metadata.partition_spec_by_id(spec_id) else {
                return true;
            };
            !FileStats::of(file, spec, metadata.current_schema(), &columns).none_match(&filters)
        });
    Validation {
        base_snapshot_id: job.base_snapshot_id,
        may_match,
        read_files,
        equality_deletes_carry_over: false,
    }
}

#[async_trait::async_trait]
impl Statement for DmlStatement {
    fn name(&self) -> &'static str {
        match self.job.op {
            DmlOp::Delete => "DeleteExec",
            DmlOp::Update(_) => "UpdateExec",
        }
    }

    fn describe(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let job = &self.job;
        write!(
            f,
            "table={}, mode={}, removed_whole={}, checked={}",
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

    fn counters(&self) -> &'static [&'static str] {
        &[
            "rows_deleted",
            "files_removed_whole",
            "files_rewritten",
            "rows_rewritten",
            "files_spliced",
            "row_groups_copied",
            "splice_fallbacks",
            "files_written",
            "delete_files_removed",
            "delete_files_written",
            "commit_attempts",
        ]
    }

    fn child_distribution(&self) -> Distribution {
        // Distributed, pass 1 reaches this node as one stream from the workers (the planner
        // puts the network boundary where the partitions merge).
        match self.job.distributed {
            true => Distribution::SinglePartition,
            false => Distribution::UnspecifiedDistribution,
        }
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
        let pass1 = children.first().cloned();
        run_once(Arc::clone(&self.job), pass1, Arc::clone(context), metrics).await
    }

    async fn again(
        &self,
        table: Table,
        _children: &[Arc<dyn ExecutionPlan>],
    ) -> Result<(Arc<dyn Statement>, Vec<Arc<dyn ExecutionPlan>>)> {
        let (job, pass1) = self.job.again(table).await?;
        let statement = Arc::new(DmlStatement { job: Arc::new(job) });
        Ok((statement, pass1.into_iter().collect()))
    }
}
