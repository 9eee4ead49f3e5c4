//! A `MERGE`'s second pass: merge-on-read's delete files, or copy-on-write's rewrite of the
//! files with changed rows (by column splice, by row-group splice where rows only go, or read,
//! joined with the source again where a narrow first pass left the new versions to it, and
//! written), each checked against what the first pass counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SpillFile, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use super::exec::{distributed_write, FirstPass, Run, SecondPass};
use super::MergeJob;
use crate::commit::NewFile;
use crate::dml::splice::{drop_rows, splice_files, DroppedRows};
use crate::file_planning::{PlannedFile, ScanFiles};
use crate::physical_plan::merge::join::rewrite_join;
use crate::physical_plan::merge::positions::{
    positions_consumer, DropCounts, DropPositionsExec, MergePositions, PositionMap,
};
use crate::physical_plan::merge::rewrite::RewriteExec;
use crate::physical_plan::merge::rows::{MergeRowsExec, RowsMode};
use crate::physical_plan::merge::source::spilled_exec;
use crate::physical_plan::merge::splice::SpliceValues;
use crate::physical_plan::write::{DeleteWriter, FileDeletes, WriterTally};
use crate::physical_plan::write::{NewValues, Splicer, WrittenFiles};

/// The rows of the files a rewrite reads and drops, and the new versions it writes.
struct Rewritten {
    kept: Vec<NewFile>,
    read: u64,
    dropped: u64,
}

impl Run<'_> {
    /// Merge-on-read: one delete file per data file with changed rows.
    pub(super) async fn merge_on_read(
        &self,
        touched: &[PlannedFile],
        changed: &PositionMap,
    ) -> Result<SecondPass> {
        let outputs = write_deletes(self.job, touched, changed, self.written, self.context).await?;
        let (delete_files, replaced) = crate::physical_plan::write::fold(outputs);
        Ok(SecondPass {
            delete_files,
            replaced,
            ..SecondPass::default()
        })
    }

    /// Copy-on-write by column splice: each touched file written again with the new values the
    /// first pass computed. `None` when a file cannot be spliced.
    pub(super) async fn splice(
        &self,
        values: &Arc<SpliceValues>,
        touched: &[PlannedFile],
        first: &FirstPass,
    ) -> Result<Option<SecondPass>> {
        let job = self.job;
        let splicer = Arc::new(Splicer::new(
            &job.table,
            &job.locations,
            values.columns().to_vec(),
            &[],
            self.context,
        )?);
        let values = Arc::clone(values);
        let take = move |path: &str| values.take(path).map(NewValues::At);
        let Some((files, spliced)) = splice_files(splicer, take, touched, self.written).await?
        else {
            return Ok(None);
        };
        let (updated, deleted) = (first.updated, first.deleted);
        let read: u64 = touched.iter().map(|f| f.record_count).sum();
        let kept: u64 = files.iter().map(|f| f.file.record_count()).sum();
        if spliced != updated || deleted != 0 || kept != read {
            return Err(self.fail(format!(
                "the splice does not add up (pass 1 updated {updated} and deleted {deleted} \
                 rows; the splice took {spliced} new values and wrote {kept} of the {read} rows \
                 of the rewritten files)"
            )));
        }
        self.m.add("files_spliced", files.len());
        Ok(Some(SecondPass {
            added: files,
            rewritten: touched.len(),
            ..SecondPass::default()
        }))
    }

    /// Copy-on-write's rewrite of the touched files without their changed rows, and with the
    /// updated rows' new versions when a narrow first pass (`narrow`) left them to it (joined
    /// with `source`, a copy of the source).
    pub(super) async fn rewrite(
        &self,
        files: &ScanFiles,
        touched: &[PlannedFile],
        first: &mut FirstPass,
        source: Option<(Arc<dyn SpillFile>, SchemaRef)>,
        narrow: bool,
    ) -> Result<SecondPass> {
        let (updated, deleted) = (first.updated, first.deleted);
        let changed_rows = updated + deleted;
        let changed = Arc::new(std::mem::take(&mut first.changed));
        // Without new versions to join, the files only lose rows: their row groups that keep
        // every row are copied as they are, the others encoded again.
        let mut by_splice = DroppedRows::default();
        let mut rest = touched.to_vec();
        if source.is_none() && self.job.drops_by_splice(&subset(files, touched.to_vec())) {
            by_splice = self.drop_by_splice(touched, &changed).await?;
            rest = std::mem::take(&mut by_splice.refused);
        }
        let spliced = Arc::new(AtomicU64::new(0));
        let rewritten = match rest.is_empty() {
            true => Rewritten {
                kept: vec![],
                read: 0,
                dropped: 0,
            },
            false => {
                let deleted_positions = std::mem::take(&mut first.deleted_positions);
                let rest = subset(files, rest);
                self.rewrite_rest(&rest, &changed, deleted_positions, source, &spliced)
                    .await?
            }
        };
        let spliced = spliced.load(Ordering::Relaxed);
        let read = rewritten.read + by_splice.read;
        let dropped = rewritten.dropped + by_splice.dropped;
        let mut kept = rewritten.kept;
        kept.extend(by_splice.files);
        let kept_rows: u64 = kept.iter().map(|f| f.file.record_count()).sum();
        // Without a narrow first pass, the rewrite drops the updated rows (their new versions
        // were written in pass 1); with one, it writes them.
        let (should_drop, should_splice) = match narrow {
            true => (deleted, updated),
            false => (changed_rows, 0),
        };
        if dropped != should_drop
            || spliced != should_splice
            || read.checked_sub(dropped) != Some(kept_rows)
        {
            return Err(self.fail(format!(
                "the rewrite does not add up (pass 1 changed {changed_rows} rows in the \
                 rewritten files, {updated} of them updated; pass 2 read {read}, dropped \
                 {dropped}, updated {spliced}, wrote {kept_rows})"
            )));
        }
        Ok(SecondPass {
            added: kept,
            rewritten: touched.len(),
            ..SecondPass::default()
        })
    }

    /// The touched files written again by row-group splice without their changed rows; the
    /// ones that cannot be are in `refused`.
    async fn drop_by_splice(
        &self,
        touched: &[PlannedFile],
        changed: &Arc<PositionMap>,
    ) -> Result<DroppedRows> {
        let job = self.job;
        let splicer = Arc::new(Splicer::new(
            &job.table,
            &job.locations,
            vec![],
            &[],
            self.context,
        )?);
        let positions = Arc::clone(changed);
        let drops = move |path: &str| {
            positions
                .get(path)
                .cloned()
                .map(NewValues::Dropped)
                .ok_or_else(|| DataFusionError::Internal(format!("no changed rows in {path}")))
        };
        let dropped = drop_rows(splicer, drops, touched, self.written).await?;
        let m = self.m;
        m.add("files_spliced", touched.len() - dropped.refused.len());
        m.add("row_groups_copied", dropped.groups_copied);
        m.add("splice_fallbacks", usize::from(!dropped.refused.is_empty()));
        Ok(dropped)
    }

    /// The files of `rest` read with their deletes, without the changed rows (and with the
    /// updated rows' new versions, joined with `source`), and written: in the workers' tasks
    /// when distributed and nothing is joined, here otherwise.
    async fn rewrite_rest(
        &self,
        rest: &ScanFiles,
        changed: &Arc<PositionMap>,
        deleted_positions: PositionMap,
        source: Option<(Arc<dyn SpillFile>, SchemaRef)>,
        spliced: &Arc<AtomicU64>,
    ) -> Result<Rewritten> {
        let (job, context) = (self.job, self.context);
        let counts = Arc::new(DropCounts::default());
        let scan = job.scan(rest, None).await?;
        let keep: Arc<dyn ExecutionPlan> = match source {
            Some((copy, schema)) => {
                let source = spilled_exec(copy, schema, context, self.m.spill())?;
                let spliced = Arc::clone(spliced);
                let versions = |probe: Arc<dyn ExecutionPlan>| {
                    let join = rewrite_join(source, probe, &job.spec, &job.layout)?;
                    let unused = Arc::new(MergePositions::new(
                        positions_consumer().register(context.memory_pool()),
                    ));
                    let rows = MergeRowsExec::new(
                        join,
                        Arc::clone(&job.clauses),
                        Arc::clone(&job.layout),
                        Arc::clone(&job.table_schema),
                        unused,
                    )
                    .with_mode(RowsMode::Rewrite(spliced));
                    Ok(Arc::new(rows) as Arc<dyn ExecutionPlan>)
                };
                Arc::new(RewriteExec::try_new(
                    scan,
                    versions,
                    Arc::clone(changed),
                    Arc::new(deleted_positions),
                    Arc::clone(&counts),
                    Arc::clone(&job.table_schema),
                )?)
            }
            None => Arc::new(DropPositionsExec::new(
                scan,
                Arc::clone(changed),
                Arc::clone(&job.table_schema),
                Arc::clone(&counts),
            )),
        };
        // Distributed, the rewrite runs in the workers' tasks too (each with the changed
        // positions), which report what they read and dropped.
        if job.distributed && keep.downcast_ref::<DropPositionsExec>().is_some() {
            let tally = Arc::clone(&counts) as Arc<dyn WriterTally>;
            let (kept, report) = distributed_write(job, keep, tally, self.written, context).await?;
            return Ok(Rewritten {
                kept,
                read: report.read,
                dropped: report.dropped,
            });
        }
        let kept = job
            .write(keep, self.written, context, &self.m.spill())
            .await?;
        Ok(Rewritten {
            kept,
            read: counts.read.load(Ordering::Relaxed),
            dropped: counts.dropped.load(Ordering::Relaxed),
        })
    }
}

/// `files` (the planned target) narrowed to `subset`, with the same equality deletes.
fn subset(files: &ScanFiles, subset: Vec<PlannedFile>) -> ScanFiles {
    ScanFiles {
        files: subset,
        equality_deletes: files.equality_deletes.clone(),
        streamed: files.streamed,
        columns: files.columns.clone(),
    }
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
