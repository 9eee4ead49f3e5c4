//! Merge-on-read pass 1 of `DELETE` and `UPDATE`: the positions of the matching rows, written
//! as one position delete file per data file while the scan runs, partition by partition.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::AsArray;
use arrow::datatypes::DataType;
use arrow::datatypes::Int64Type;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::physical_plan::{ExecutionPlan, Partitioning, SendableRecordBatchStream};
use futures::StreamExt;
use roaring::RoaringTreemap;

use crate::physical_plan::write::WrittenFiles;

use super::rewrite::DmlJob;
use crate::physical_plan::write::{DeleteWriter, FileDeletes};

/// The object paths of the files whose rows reach several partitions of `plan`: files split
/// into byte ranges over several partitions' file groups (a repartitioned scan gives every file
/// a range, also one read whole by one partition: only files in more than one group count).
/// `None` when every file's rows may: the plan deals batches round-robin over partitions
/// (DataFusion adds that above a scan of fewer partitions than it wants, e.g. a few small
/// files).
fn files_in_several_partitions(plan: &Arc<dyn ExecutionPlan>) -> Option<HashSet<String>> {
    let mut groups_of: HashMap<String, usize> = HashMap::new();
    let mut stack = vec![Arc::clone(plan)];
    while let Some(p) = stack.pop() {
        if p.downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::RoundRobinBatch(n) if *n > 1))
        {
            return None;
        }
        if let Some(config) = crate::physical_plan::file_scan(&p) {
            for group in &config.file_groups {
                let in_group: HashSet<String> = group
                    .files()
                    .iter()
                    .filter(|f| f.range.is_some())
                    .map(|f| f.object_meta.location.to_string())
                    .collect();
                for path in in_group {
                    *groups_of.entry(path).or_default() += 1;
                }
            }
        }
        stack.extend(p.children().into_iter().cloned());
    }
    Some(
        groups_of
            .into_iter()
            .filter(|(_, groups)| *groups > 1)
            .map(|(path, _)| path)
            .collect(),
    )
}

/// One partition's positions of one data file.
type Positions = (String, RoaringTreemap);

/// What one partition of merge-on-read pass 1 found.
#[derive(Default)]
struct PartitionPositions {
    /// Matching rows per data file.
    counts: HashMap<String, u64>,
    /// Delete files written.
    written: Vec<FileDeletes>,
    /// Positions in files split over several partitions, held to be written as one file, and
    /// the memory they take.
    held: Vec<Positions>,
    held_memory: Option<MemoryReservation>,
}

/// Merge-on-read pass 1: runs `plan` (rows `(_file, _pos)`) partition by partition, each on its
/// own task, and writes one position delete file (format v3: deletion vector) per data file with
/// matching rows, merged with the file's earlier deletes ([`DeleteWriter`]). A partition
/// reads a data file's positions in order, so one bitmap per partition is held at a time
/// (reserved from the pool). A file DataFusion split into byte ranges, or whose batches it
/// deals round-robin, reaches several partitions: their bitmaps are held (reserved) and merged
/// into its one delete file at the end; when the pool refuses that memory, each is written as
/// it completes (several delete files for one data file, as valid, only less tidy), except on
/// format v3, which allows one deletion vector per data file (the statement then fails with
/// `ResourcesExhausted`). Returns
/// the matching rows per data file and the files. Files the statement removes whole are
/// counted, not written for.
pub(super) async fn write_position_deletes(
    job: &DmlJob,
    plan: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    written: &WrittenFiles,
) -> Result<(HashMap<String, u64>, Vec<FileDeletes>)> {
    // Files removed whole are only counted.
    let whole: HashSet<&str> = job.removed_whole.iter().map(|f| f.path.as_str()).collect();
    // (Distributed, the workers write them: `PositionDeleteWriterExec`.)
    let spread = files_in_several_partitions(&plan);
    let mut files: HashMap<String, FileTarget> = HashMap::new();
    for f in &job.checked.files {
        let split = match &spread {
            None => true,
            Some(spread) => {
                !spread.is_empty()
                    && spread.contains(&job.locations.object_path(&f.path)?.to_string())
            }
        };
        let target = FileTarget {
            write: !whole.contains(f.path.as_str()),
            split,
        };
        files.insert(f.path.clone(), target);
    }
    let files = Arc::new(files);
    let writer = DeleteWriter::new(&job.table, &job.locations, &job.checked.files, context)?;
    let partitions = plan.output_partitioning().partition_count();
    let mut tasks = vec![];
    for i in 0..partitions {
        let stream = plan.execute(i, Arc::clone(context))?;
        let pass = PositionsPass {
            files: Arc::clone(&files),
            writer: writer.clone(),
            written: written.clone(),
            pool: Arc::clone(context.memory_pool()),
            partition: i,
        };
        tasks.push(SpawnedTask::spawn(pass.run(stream)));
    }
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut out = vec![];
    let mut held: HashMap<String, RoaringTreemap> = HashMap::new();
    let mut held_memory = vec![];
    let mut failure = None;
    for task in tasks {
        match task.join_unwind().await {
            Ok(Ok(found)) => {
                for (path, n) in found.counts {
                    *counts.entry(path).or_default() += n;
                }
                out.extend(found.written);
                for (path, positions) in found.held {
                    *held.entry(path).or_default() |= positions;
                }
                held_memory.extend(found.held_memory);
            }
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(DataFusionError::ExecutionJoin(Box::new(e)))),
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let mut held: Vec<Positions> = held.into_iter().collect();
    held.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, positions) in held {
        out.push(writer.write(&path, positions, written).await?);
    }
    drop(held_memory);
    Ok((counts, out))
}

fn target_of<'a>(files: &'a HashMap<String, FileTarget>, path: &str) -> Result<&'a FileTarget> {
    files
        .get(path)
        .ok_or_else(|| DataFusionError::Internal(format!("{path} was not planned")))
}

/// Where a data file's position deletes go.
struct FileTarget {
    /// False for files the statement removes whole.
    write: bool,
    /// Whether several partitions read it.
    split: bool,
}

/// One partition's task of merge-on-read pass 1.
struct PositionsPass {
    files: Arc<HashMap<String, FileTarget>>,
    writer: DeleteWriter,
    written: WrittenFiles,
    pool: Arc<dyn MemoryPool>,
    partition: usize,
}

impl PositionsPass {
    async fn run(self, mut stream: SendableRecordBatchStream) -> Result<PartitionPositions> {
        let reservation = MemoryConsumer::new(format!("MergeOnReadDelete[{}]", self.partition))
            .register(&self.pool);
        let mut found = PartitionPositions::default();
        let mut current: Option<Positions> = None;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let paths = arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
            let paths = paths.as_string::<i32>();
            let positions = batch.column(1).as_primitive::<Int64Type>();
            for row in 0..batch.num_rows() {
                let path = paths.value(row);
                if current.as_ref().is_none_or(|(p, _)| p != path) {
                    if let Some(done) = current.take() {
                        self.finish(done, &mut found).await?;
                    }
                    current = Some((path.to_string(), RoaringTreemap::new()));
                }
                if let Some((_, bitmap)) = current.as_mut() {
                    bitmap.insert(positions.value(row) as u64);
                }
            }
            let size = current.as_ref().map_or(0, |(_, b)| b.serialized_size());
            if let Err(e) = reservation.try_resize(size) {
                // One deletion vector per data file: held parts cannot be written apart.
                if self.writer.writes_vectors() {
                    return Err(e);
                }
                // Held positions give way to the file being read: written now, they free
                // their memory (their files then get more than one delete file).
                self.write_held(&mut found).await?;
                reservation.try_resize(size)?;
            }
        }
        if let Some(done) = current.take() {
            self.finish(done, &mut found).await?;
        }
        Ok(found)
    }

    /// Writes the positions this partition holds and frees their memory.
    async fn write_held(&self, found: &mut PartitionPositions) -> Result<()> {
        for (path, positions) in std::mem::take(&mut found.held) {
            let file = self.writer.write(&path, positions, &self.written).await?;
            found.written.push(file);
        }
        if let Some(memory) = &found.held_memory {
            memory.free();
        }
        Ok(())
    }

    /// Counts a file's positions found here, and writes them, or holds them when other
    /// partitions read the same file (and the pool grants the memory).
    async fn finish(
        &self,
        (path, bitmap): Positions,
        found: &mut PartitionPositions,
    ) -> Result<()> {
        *found.counts.entry(path.clone()).or_default() += bitmap.len();
        let target = target_of(&self.files, &path)?;
        if !target.write {
            return Ok(());
        }
        if target.split {
            let memory = found.held_memory.get_or_insert_with(|| {
                MemoryConsumer::new(format!(
                    "MergeOnReadDelete[{}, split files]",
                    self.partition
                ))
                .register(&self.pool)
            });
            match memory.try_grow(bitmap.serialized_size()) {
                Ok(()) => {
                    found.held.push((path, bitmap));
                    return Ok(());
                }
                // One deletion vector per data file: the parts cannot be written apart.
                Err(e) if self.writer.writes_vectors() => return Err(e),
                Err(_) => {}
            }
        }
        let file = self.writer.write(&path, bitmap, &self.written).await?;
        found.written.push(file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{Field, Schema};
    use datafusion::datasource::listing::PartitionedFile;
    use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::execution::object_store::ObjectStoreUrl;

    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;

    use super::*;

    #[test]
    fn only_files_in_several_groups_are_split() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let file = |path: &str, range: Option<(i64, i64)>| {
            let f = PartitionedFile::new(path.to_string(), 1000);
            match range {
                Some((start, end)) => f.with_range(start, end),
                None => f,
            }
        };
        // `a` is split over groups 0 and 1; `b` has a range but is read whole by group 1; `c`
        // has no range.
        let groups = vec![
            FileGroup::new(vec![file("a", Some((0, 600)))]),
            FileGroup::new(vec![
                file("a", Some((600, 1000))),
                file("b", Some((0, 1000))),
            ]),
            FileGroup::new(vec![file("c", None)]),
        ];
        let config = FileScanConfigBuilder::new(
            ObjectStoreUrl::local_filesystem(),
            Arc::new(ParquetSource::new(schema)),
        )
        .with_file_groups(groups)
        .build();
        let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
        let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(Arc::clone(&scan)));
        assert_eq!(
            files_in_several_partitions(&plan),
            Some(HashSet::from(["a".to_string()]))
        );
        let dealt: Arc<dyn ExecutionPlan> = Arc::new(
            RepartitionExec::try_new(Arc::clone(&scan), Partitioning::RoundRobinBatch(4)).unwrap(),
        );
        assert_eq!(files_in_several_partitions(&dealt), None);
    }
}
