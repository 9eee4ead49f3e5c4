//! Reading one partition's data files with their deletes applied: per file, the deleted
//! positions become a parquet access plan (scan, skip or a row selection per row group) for
//! DataFusion's reader, dense ones are dropped after decoding, and past the bitmap threshold the
//! partition takes the anti-join route instead.

use std::collections::HashMap;
use std::sync::Arc;

use crate::physical_plan::keep_rows::keep_rows;
use arrow::array::RecordBatch;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::Count;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};

use super::appended::{with_live, with_live_field, with_position_field};
use super::load::{
    read_deletion_vector, read_position_deletes, Bitmaps, Deleted, FileDeletes, Gathered,
    PositionDeleteFile, DELETE_FILES_IN_FLIGHT, WHOLE_DELETE_FILE_BYTES,
};
use crate::physical_plan::parquet_files::fetch_footer;

/// Spill metrics of the anti-join's sort.
pub(super) struct SpillCounters {
    pub(super) count: Count,
    pub(super) bytes: Count,
    pub(super) rows: Count,
}

/// State of the anti-join route of one partition.
pub(super) struct JoinState {
    pub(super) opener: Arc<FileOpener>,
    /// Data files left, with the index of their recorded path when deletes apply to them.
    pub(super) files: std::collections::VecDeque<(PartitionedFile, Option<u32>)>,
    /// The file being read: its stream, path index, next row position and deletion vector.
    pub(super) current: Option<(
        SendableRecordBatchStream,
        Option<u32>,
        u64,
        Option<roaring::RoaringTreemap>,
    )>,
    /// Memory of the deletion vector of the file being read.
    pub(super) vector_memory: MemoryReservation,
    pub(super) cursor: super::join::DeleteCursor,
    pub(super) positions: Option<arrow::datatypes::SchemaRef>,
    pub(super) sort: Arc<dyn ExecutionPlan>,
    pub(super) spill: SpillCounters,
}

/// Reads one partition's data files with their deletes applied.
pub(super) struct FileOpener {
    pub(super) config: FileScanConfig,
    /// `config` without the pushed-down predicate: the anti-join numbers the rows it reads, so
    /// the reader must not skip any.
    pub(super) unfiltered: FileScanConfig,
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) deletes: Arc<HashMap<String, FileDeletes>>,
    pub(super) context: Arc<TaskContext>,
    pub(super) removed: Count,
    pub(super) files_read: Count,
    /// Files whose deleted rows were dropped after decoding whole row groups.
    pub(super) dense_files: Count,
    /// Whether the scan hands the parquet reader no predicate, so that it reads every row of
    /// the row groups it is given (the k-th row read is then the k-th position read).
    pub(super) filter_free: bool,
}

impl FileOpener {
    /// The distinct delete files that apply to some of `files`.
    pub(super) fn delete_files(&self, files: &[PartitionedFile]) -> Vec<PositionDeleteFile> {
        let mut out: Vec<PositionDeleteFile> = files
            .iter()
            .filter_map(|f| self.deletes.get(f.object_meta.location.as_ref()))
            .flat_map(|d| d.delete_files.iter().cloned())
            .collect();
        out.sort_by(|a, b| a.location.cmp(&b.location));
        out.dedup();
        out
    }

    /// The anti-join route: this partition's deletes sorted by (path, position) under the pool
    /// (spilling), merged with its data files read whole in path order.
    pub(super) fn anti_join(
        self: Arc<Self>,
        files: Vec<PartitionedFile>,
        positions: Option<arrow::datatypes::SchemaRef>,
        spill: SpillCounters,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let mut ordered: Vec<(PartitionedFile, Option<String>)> = files
            .into_iter()
            .map(|f| {
                let path = self
                    .deletes
                    .get(f.object_meta.location.as_ref())
                    .map(|d| d.recorded_path.clone());
                (f, path)
            })
            .collect();
        // The deletes come sorted by recorded path: files with deletes are read in that order.
        ordered.sort_by(|a, b| a.1.cmp(&b.1));
        let paths: Vec<String> = ordered.iter().filter_map(|(_, p)| p.clone()).collect();
        // Files with deletes, in path order, are numbered as their paths are in `paths`.
        let mut next = 0u32;
        let numbered: Vec<(PartitionedFile, Option<u32>)> = ordered
            .iter()
            .map(|(f, p)| {
                let index = p.as_ref().map(|_| {
                    next += 1;
                    next - 1
                });
                (f.clone(), index)
            })
            .collect();
        let delete_files =
            self.delete_files(&ordered.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>());
        // Deletion vectors are read file by file as each data file is (one bitmap at a time);
        // position delete files are sorted together.
        let position_files: Vec<PositionDeleteFile> = delete_files
            .iter()
            .filter(|f| f.deletion_vector.is_none())
            .cloned()
            .collect();
        let (sort, stream) = super::join::sorted_deletes(
            &self.config.object_store_url,
            &position_files,
            &paths,
            Arc::clone(&self.context),
        )?;
        self.files_read.add(delete_files.len());
        let vector_memory = MemoryConsumer::new("PositionalDeleteExec[deletion vector]")
            .register(self.context.memory_pool());
        let state = JoinState {
            opener: self,
            files: numbered.into(),
            current: None,
            vector_memory,
            cursor: super::join::DeleteCursor::new(stream),
            positions,
            sort,
            spill,
        };
        let stream = futures::stream::try_unfold(state, |mut st| async move {
            loop {
                if st.current.is_none() {
                    let Some((file, path)) = st.files.pop_front() else {
                        if let Some(m) = st.sort.metrics() {
                            st.spill.count.add(m.spill_count().unwrap_or(0));
                            st.spill.bytes.add(m.spilled_bytes().unwrap_or(0));
                            st.spill.rows.add(m.spilled_rows().unwrap_or(0));
                        }
                        return Ok(None);
                    };
                    let vector = match path {
                        Some(_) => st.opener.deletion_vector_of(&file).await?,
                        None => None,
                    };
                    let size = vector.as_ref().map_or(0, |v| v.serialized_size());
                    st.vector_memory.try_resize(size).map_err(|e| {
                        DataFusionError::ResourcesExhausted(format!(
                            "the deletion vector of {} does not fit in memory: {e}",
                            file.object_meta.location
                        ))
                    })?;
                    let (stream, first) = st
                        .opener
                        .open(file, &HashMap::new(), false, true, false)
                        .await?;
                    st.current = Some((stream, path, first, vector));
                }
                let Some((stream, path, start, vector)) = st.current.as_mut() else {
                    continue;
                };
                let Some(batch) = stream.next().await else {
                    st.current = None;
                    continue;
                };
                let batch = batch?;
                let n = batch.num_rows() as u64;
                let at = *start;
                *start += n;
                let path = *path;
                let out = super::join::filter_batch(
                    batch,
                    at,
                    path,
                    vector.as_ref(),
                    &mut st.cursor,
                    st.positions.as_ref(),
                    &st.opener.removed,
                )
                .await?;
                if out.num_rows() > 0 {
                    return Ok(Some((out, st)));
                }
            }
        });
        Ok(Box::pin(stream))
    }

    /// The deletion vectors that apply to `file`, as one set (`None` when it has none).
    pub(super) async fn deletion_vector_of(
        &self,
        file: &PartitionedFile,
    ) -> Result<Option<roaring::RoaringTreemap>> {
        let Some(deletes) = self.deletes.get(file.object_meta.location.as_ref()) else {
            return Ok(None);
        };
        let mut out: Option<roaring::RoaringTreemap> = None;
        for d in &deletes.delete_files {
            if let Some(dv) = &d.deletion_vector {
                let positions =
                    super::dv::read(self.store.as_ref(), &d.location, dv, d.rows).await?;
                *out.get_or_insert_with(Default::default) |= positions;
            }
        }
        Ok(out)
    }

    /// Reads every delete file that applies to one of `files` once, keeping the positions of
    /// those files (`None` when one of them does not fit in 32 bits).
    pub(super) async fn load_bitmaps(
        &self,
        files: &[PartitionedFile],
        reservation: MemoryReservation,
    ) -> Result<Option<Bitmaps>> {
        // recorded path -> object location, for the files of this partition that have deletes
        let mut wanted: HashMap<String, String> = HashMap::new();
        let mut delete_files: Vec<PositionDeleteFile> = vec![];
        for f in files {
            let location = f.object_meta.location.to_string();
            if let Some(d) = self.deletes.get(&location) {
                wanted.insert(d.recorded_path.clone(), location);
                delete_files.extend(d.delete_files.iter().cloned());
            }
        }
        delete_files.sort_by(|a, b| a.location.cmp(&b.location));
        delete_files.dedup();
        let reserve = |size: usize| {
            reservation.try_resize(size).map_err(|e| {
                DataFusionError::ResourcesExhausted(format!(
                    "position deletes of {} data files do not fit in memory: {e}",
                    wanted.len()
                ))
            })
        };
        let mut gathered: HashMap<String, Gathered> = HashMap::new();
        // A few delete files in flight at once: on object stores each costs several requests.
        let wanted_paths = &wanted;
        let mut reads = futures::stream::iter(delete_files)
            .map(|file| {
                let store = Arc::clone(&self.store);
                // A small file is fetched whole, its bytes held (and reserved) while it is read;
                // a deletion vector is one ranged read of its blob.
                let whole = reservation.new_empty();
                let whole = (file.deletion_vector.is_none()
                    && file.size <= WHOLE_DELETE_FILE_BYTES
                    && whole.try_grow(file.size as usize).is_ok())
                .then_some(whole);
                async move {
                    let mut local: HashMap<String, Gathered> = HashMap::new();
                    let fits = match &file.deletion_vector {
                        Some(dv) => {
                            read_deletion_vector(&store, &file, dv, wanted_paths, &mut local)
                                .await?
                        }
                        None => {
                            read_position_deletes(
                                &store,
                                &file,
                                whole.is_some(),
                                wanted_paths,
                                &mut local,
                            )
                            .await?
                        }
                    };
                    drop(whole);
                    Ok::<_, DataFusionError>(fits.then_some(local))
                }
            })
            .buffered(DELETE_FILES_IN_FLIGHT);
        while let Some(read) = reads.next().await {
            let Some(local) = read? else {
                return Ok(None);
            };
            for (location, g) in local {
                gathered.entry(location).or_default().append(g);
            }
            self.files_read.add(1);
            reserve(
                gathered
                    .values()
                    .map(|g| g.positions.capacity() * size_of::<u32>())
                    .sum(),
            )?;
        }
        drop(reads);
        let positions: HashMap<String, Deleted> = gathered
            .into_iter()
            .map(|(location, g)| (location, g.finish()))
            .collect();
        reserve(positions.values().map(|d| size_of_val(d.positions())).sum())?;
        Ok(Some(Bitmaps {
            positions,
            _reservation: reservation,
        }))
    }

    /// Reads one data file, skipping its deleted positions (and numbering the rest when
    /// `positions`). Also answers the position in the file of the first row read: a file that
    /// DataFusion split into byte ranges over several partitions is read here only in the row
    /// groups of its range (see [`row_groups_in_range`]).
    pub(super) async fn open(
        &self,
        mut file: PartitionedFile,
        bitmaps: &HashMap<String, Deleted>,
        positions: bool,
        unfiltered: bool,
        live: bool,
    ) -> Result<(SendableRecordBatchStream, u64)> {
        let location = file.object_meta.location.to_string();
        let deleted = bitmaps.get(&location).filter(|d| !d.is_empty());
        // Rows are numbered by their position (here or by the anti-join) when positions are
        // asked for or deletes apply: those files are read by this crate's range rule.
        let numbered = positions || self.deletes.contains_key(&location);
        let none = Deleted::default();
        let deleted = deleted.unwrap_or(&none);
        // Position spans of the row groups read (all of the file unless split into ranges).
        let mut spans = vec![(0, u64::MAX)];
        let mut dense: Option<ReadPositions> = None;
        if !deleted.is_empty() || (numbered && file.range.is_some()) {
            // Through DataFusion's metadata cache: the scan of this file reuses the footer.
            let cache = self
                .context
                .runtime_env()
                .cache_manager
                .get_file_metadata_cache();
            let hint = self
                .context
                .session_config()
                .options()
                .execution
                .parquet
                .metadata_size_hint;
            let (metadata, _) = fetch_footer(
                self.store.as_ref(),
                &file.object_meta,
                Some(cache),
                hint,
                true,
            )
            .await?;
            let groups = metadata.row_groups();
            let rows: Vec<u64> = groups
                .iter()
                .map(|rg| rg.num_rows().max(0) as u64)
                .collect();
            let read = match file.range.take() {
                Some(range) => row_groups_in_range(groups, range.start, range.end, &location)?,
                None => vec![true; groups.len()],
            };
            let per_group = deleted_per_group(&rows, deleted.positions());
            spans = whole_groups(&rows, &read, &vec![0; rows.len()]).1;
            let (read_rows, read_deleted) = rows
                .iter()
                .zip(&per_group)
                .zip(&read)
                .filter(|(_, r)| **r)
                .fold((0, 0), |(n, d), ((rn, rd), _)| (n + rn, d + rd));
            let plan = if !positions
                && self.filter_free
                && read_deleted > 0
                && read_deleted * DENSE_DELETES_PER_ROW >= read_rows
            {
                // Dense deletes: the row groups are read whole and the deleted rows dropped
                // after decoding, where a selection of short runs would cost more to build and
                // follow than the rows it saves decoding.
                let (plan, spans) = whole_groups(&rows, &read, &per_group);
                dense = Some(ReadPositions::new(spans, deleted.clone(), location.clone()));
                self.removed.add(read_deleted as usize);
                self.dense_files.add(1);
                plan
            } else {
                let (plan, removed) = access_plan(&rows, &read, deleted.positions());
                self.removed.add(removed as usize);
                plan
            };
            file = file.with_extension(plan);
        }
        // The position of the first row read.
        let first = spans.first().map_or(0, |s| s.0);
        let config = match unfiltered {
            true => &self.unfiltered,
            false => &self.config,
        };
        let config = FileScanConfigBuilder::from(config.clone())
            .with_file_groups(vec![FileGroup::new(vec![file])])
            .build();
        let stream =
            DataSourceExec::from_data_source(config).execute(0, Arc::clone(&self.context))?;
        if live {
            // Dense deletes marked for the node above; every other row read is live.
            let schema = with_live_field(&stream.schema());
            let out = Arc::clone(&schema);
            let marked = stream.map(move |batch| {
                let batch = batch?;
                let keep = match dense.as_mut() {
                    Some(dense) => dense.mask(batch.num_rows())?,
                    None => None,
                };
                with_live(batch, keep, &out)
            });
            let marked = Box::pin(RecordBatchStreamAdapter::new(schema, marked));
            return Ok((marked, first));
        }
        if let Some(mut dense) = dense {
            let schema = stream.schema();
            let filtered = stream.map(move |batch| {
                let batch = batch?;
                match dense.mask(batch.num_rows())? {
                    Some(keep) => keep_rows(batch, keep.values()),
                    None => Ok(batch),
                }
            });
            let filtered = Box::pin(RecordBatchStreamAdapter::new(schema, filtered));
            return Ok((filtered, first));
        }
        if !positions {
            return Ok((stream, first));
        }
        let schema = with_position_field(&stream.schema());
        let mut cursor = ReadPositions::new(spans, deleted.clone(), location);
        let out = Arc::clone(&schema);
        let numbered = stream.map(move |batch| {
            let batch = batch?;
            let pos = cursor.live(batch.num_rows())?;
            let mut columns = batch.columns().to_vec();
            columns.push(Arc::new(pos));
            Ok(arrow::array::RecordBatch::try_new(
                Arc::clone(&out),
                columns,
            )?)
        });
        Ok((
            Box::pin(RecordBatchStreamAdapter::new(schema, numbered)),
            first,
        ))
    }
}

/// `work` running from now on as a task of its own (inside a Tokio runtime; otherwise when
/// awaited), its result awaited by the future returned. Dropping that future stops it.
pub(super) fn eager<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> futures::future::BoxFuture<'static, Result<T>> {
    use futures::FutureExt;
    if tokio::runtime::Handle::try_current().is_err() {
        return work.boxed();
    }
    let task = datafusion::common::runtime::SpawnedTask::spawn(work);
    async move {
        task.join_unwind()
            .await
            .map_err(|e| DataFusionError::ExecutionJoin(Box::new(e)))?
    }
    .boxed()
}

/// Deleted rows per row in a file's row groups at or above which (1 in 64) the groups are read
/// whole and deleted rows dropped after decoding: a row selection then has runs too short for
/// the parquet reader to skip anything (it too decodes everything below runs of 32 rows).
pub(super) const DENSE_DELETES_PER_ROW: u64 = 64;

/// How many of `deleted` (sorted) fall into each row group of a file whose groups hold `rows`
/// rows.
pub(super) fn deleted_per_group(rows: &[u64], deleted: &[u32]) -> Vec<u64> {
    let mut out = Vec::with_capacity(rows.len());
    let (mut start, mut below) = (0u64, 0usize);
    for &n in rows {
        let end = start + n;
        let upto = deleted.partition_point(|p| u64::from(*p) < end);
        out.push((upto - below) as u64);
        (start, below) = (end, upto);
    }
    out
}

/// The access plan that reads the groups marked in `read` whole, skipping those whose rows are
/// all deleted (`deleted` per group), and the position spans `[start, end)` it reads, in order.
pub(super) fn whole_groups(
    rows: &[u64],
    read: &[bool],
    deleted: &[u64],
) -> (ParquetAccessPlan, Vec<(u64, u64)>) {
    let mut groups = Vec::with_capacity(rows.len());
    let mut spans: Vec<(u64, u64)> = vec![];
    let mut start = 0u64;
    for ((&n, &read), &d) in rows.iter().zip(read).zip(deleted) {
        let end = start + n;
        if read && d < n {
            groups.push(RowGroupAccess::Scan);
            match spans.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => spans.push((start, end)),
            }
        } else {
            groups.push(RowGroupAccess::Skip);
        }
        start = end;
    }
    (ParquetAccessPlan::new(groups), spans)
}

/// `config` with its parquet source's predicate replaced by `true` and row filtering off: the
/// reader then skips no row of the row groups it is given (pruning by statistics, bloom filters,
/// the page index and row filters all need a predicate).
pub(super) fn without_predicate(config: &FileScanConfig) -> Result<FileScanConfig> {
    let source = config.file_source();
    if source.filter().is_none() {
        return Ok(config.clone());
    }
    let parquet = source.downcast_ref::<ParquetSource>().ok_or_else(|| {
        DataFusionError::Internal(format!(
            "PositionalDeleteExec reads parquet, got a {} source",
            source.file_type()
        ))
    })?;
    let always: Arc<dyn PhysicalExpr> =
        Arc::new(datafusion::physical_expr::expressions::Literal::new(
            datafusion::common::ScalarValue::Boolean(Some(true)),
        ));
    let source = parquet.with_predicate(always).with_pushdown_filters(false);
    Ok(FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source))
        .build())
}

/// Which row groups a scan of the byte range `start..end` of a file reads: those whose first page
/// starts inside it. DataFusion splits large files into ranges that tile the file, so every row
/// group is read by exactly one of them; this is the rule of DataFusion's parquet reader, applied
/// here so that positions can be counted (the range itself is then not handed to the reader).
pub(super) fn row_groups_in_range(
    groups: &[parquet::file::metadata::RowGroupMetaData],
    start: i64,
    end: i64,
    location: &str,
) -> Result<Vec<bool>> {
    let offsets: Vec<i64> = groups
        .iter()
        .map(|rg| {
            let col = rg.column(0);
            col.dictionary_page_offset()
                .unwrap_or_else(|| col.data_page_offset())
        })
        .collect();
    // Groups without rows may share an offset: they read nothing, whichever range takes them.
    let with_rows: Vec<i64> = offsets
        .iter()
        .zip(groups)
        .filter(|(_, rg)| rg.num_rows() > 0)
        .map(|(o, _)| *o)
        .collect();
    if with_rows.windows(2).any(|w| w[0] >= w[1]) {
        // Positions within a range are counted from its first row group on.
        return Err(DataFusionError::Execution(format!(
            "data file {location} has row groups out of file order, so a byte range of it \
             cannot be numbered by position; SET datafusion.optimizer.repartition_file_scans = \
             false reads it whole"
        )));
    }
    Ok(offsets.iter().map(|o| (start..end).contains(o)).collect())
}

/// Where the rows a scan of some of a file's row groups reads lie in the file: the position
/// spans of those groups, in order, and which positions are deleted. Numbers the live rows of a
/// scan that skipped the deleted ones ([`ReadPositions::live`]), or says which rows of a scan of
/// whole groups to drop ([`ReadPositions::mask`]).
pub(super) struct ReadPositions {
    pub(super) spans: std::collections::VecDeque<(u64, u64)>,
    pub(super) deleted: Deleted,
    /// Index of the first deleted position not passed yet.
    pub(super) next: usize,
    pub(super) location: String,
}

impl ReadPositions {
    pub(super) fn new(spans: Vec<(u64, u64)>, deleted: Deleted, location: String) -> Self {
        Self {
            spans: spans.into(),
            deleted,
            next: 0,
            location,
        }
    }

    /// The positions of the next `n` rows read, deleted ones never read.
    pub(super) fn live(&mut self, n: usize) -> Result<arrow::array::Int64Array> {
        let deleted = self.deleted.positions();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(span) = self.spans.front_mut() else {
                return Err(DataFusionError::Internal(format!(
                    "the scan of {} returned more rows than it has live positions",
                    self.location
                )));
            };
            if span.0 >= span.1 {
                self.spans.pop_front();
                continue;
            }
            // Deleted positions before the span's next one no longer matter.
            while deleted
                .get(self.next)
                .is_some_and(|d| u64::from(*d) < span.0)
            {
                self.next += 1;
            }
            let until = match deleted.get(self.next) {
                Some(&d) if u64::from(d) == span.0 => {
                    span.0 += 1;
                    self.next += 1;
                    continue;
                }
                Some(&d) => u64::from(d).min(span.1),
                None => span.1,
            };
            // Up to the next deleted position, every position is live.
            let run = (until - span.0).min((n - out.len()) as u64);
            out.extend((span.0..span.0 + run).map(|p| p as i64));
            span.0 += run;
        }
        Ok(arrow::array::Int64Array::from(out))
    }

    /// Which of the next `n` rows read to keep (`None`: all of them).
    pub(super) fn mask(&mut self, n: usize) -> Result<Option<arrow::array::BooleanArray>> {
        let deleted = self.deleted.positions();
        let mut keep: Option<arrow::array::BooleanBufferBuilder> = None;
        let mut at = 0usize;
        while at < n {
            let Some(span) = self.spans.front_mut() else {
                return Err(DataFusionError::Internal(format!(
                    "the scan of {} returned more rows than its row groups hold",
                    self.location
                )));
            };
            let len = (span.1 - span.0).min((n - at) as u64);
            let (lo, hi) = (span.0, span.0 + len);
            while let Some(&d) = deleted.get(self.next) {
                let d = u64::from(d);
                if d >= hi {
                    break;
                }
                self.next += 1;
                if d >= lo {
                    let keep = keep.get_or_insert_with(|| {
                        let mut b = arrow::array::BooleanBufferBuilder::new(n);
                        b.append_n(n, true);
                        b
                    });
                    keep.set_bit(at + (d - lo) as usize, false);
                }
            }
            span.0 = hi;
            if span.0 == span.1 {
                self.spans.pop_front();
            }
            at += len as usize;
        }
        Ok(keep.map(|mut k| arrow::array::BooleanArray::new(k.finish(), None)))
    }
}

/// The access plan that reads the row groups marked in `read` of a file whose row groups hold
/// `rows` rows, skipping their `deleted` positions, and how many rows it removes from them.
pub(crate) fn access_plan(
    rows: &[u64],
    read: &[bool],
    deleted: &[u32],
) -> (ParquetAccessPlan, u64) {
    let mut groups = Vec::with_capacity(rows.len());
    let mut positions = deleted.iter().map(|p| u64::from(*p)).peekable();
    let mut start = 0u64;
    let mut removed = 0u64;
    for (&n, &read) in rows.iter().zip(read) {
        let end = start + n;
        let mut selectors: Vec<RowSelector> = vec![];
        let mut cursor = start;
        let mut skipped = 0u64;
        while let Some(&p) = positions.peek() {
            if p >= end {
                break;
            }
            positions.next();
            if p < cursor || !read {
                continue;
            }
            if p > cursor {
                selectors.push(RowSelector::select((p - cursor) as usize));
            }
            match selectors.last_mut() {
                Some(last) if last.skip => last.row_count += 1,
                _ => selectors.push(RowSelector::skip(1)),
            }
            skipped += 1;
            cursor = p + 1;
        }
        if cursor < end {
            selectors.push(RowSelector::select((end - cursor) as usize));
        }
        removed += skipped;
        groups.push(if !read || skipped == n {
            RowGroupAccess::Skip
        } else if skipped == 0 {
            RowGroupAccess::Scan
        } else {
            RowGroupAccess::Selection(RowSelection::from(selectors))
        });
        start = end;
    }
    (ParquetAccessPlan::new(groups), removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(plan: &ParquetAccessPlan) -> Vec<String> {
        plan.inner()
            .iter()
            .map(|g| match g {
                RowGroupAccess::Scan => "scan".to_string(),
                RowGroupAccess::Skip => "skip".to_string(),
                RowGroupAccess::Selection(s) => s
                    .iter()
                    .map(|r| format!("{}{}", if r.skip { "-" } else { "+" }, r.row_count))
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect()
    }

    #[test]
    fn live_positions_skip_deleted_ones() {
        let deleted = Deleted::from_sorted(vec![0, 3, 4, 9]);
        let all = vec![(0, u64::MAX)];
        let mut live = ReadPositions::new(all.clone(), deleted.clone(), "f".into());
        let take = |live: &mut ReadPositions, n| live.live(n).unwrap().values().to_vec();
        assert_eq!(take(&mut live, 3), vec![1, 2, 5]);
        assert_eq!(take(&mut live, 4), vec![6, 7, 8, 10]);
        assert_eq!(take(&mut live, 0), Vec::<i64>::new());
        assert_eq!(take(&mut live, 2), vec![11, 12]);
        let mut none = ReadPositions::new(all, Deleted::default(), "f".into());
        assert_eq!(take(&mut none, 3), vec![0, 1, 2]);
        // Only some row groups read (a byte range): earlier deletes are passed over, and the
        // rows between spans never come.
        let mut ranged = ReadPositions::new(vec![(4, 6), (8, 11)], deleted, "f".into());
        assert_eq!(take(&mut ranged, 3), vec![5, 8, 10]);
        assert!(ranged.live(1).is_err());
    }

    #[test]
    fn gathered_positions_end_sorted_and_distinct() {
        let mut sorted = Gathered::default();
        assert!(sorted.extend(&[1, 5, 9]) && sorted.extend(&[12, 40]));
        assert!(sorted.sorted);
        assert_eq!(sorted.finish().positions(), [1, 5, 9, 12, 40]);
        // Two delete files for one data file: overlapping, out of order, repeated.
        let mut mixed = Gathered::default();
        assert!(mixed.extend(&[3, 8, 20]) && mixed.extend(&[1, 8, 9]) && mixed.extend(&[2, 2]));
        assert!(!mixed.sorted);
        assert_eq!(mixed.finish().positions(), [1, 2, 3, 8, 9, 20]);
        // A run that is not increasing by itself.
        let mut unsorted = Gathered::default();
        assert!(unsorted.extend(&[7, 4]));
        assert_eq!(unsorted.finish().positions(), [4, 7]);
        // Gathered from two delete files, merged in the order they were read.
        let (mut a, mut b) = (Gathered::default(), Gathered::default());
        assert!(a.extend(&[1, 4]) && b.extend(&[6, 9]));
        a.append(b);
        assert!(a.sorted);
        let (mut c, mut d) = (Gathered::default(), Gathered::default());
        assert!(c.extend(&[5, 8]) && d.extend(&[2, 8]));
        c.append(d);
        assert!(!c.sorted);
        assert_eq!(c.finish().positions(), [2, 5, 8]);
        let mut empty = Gathered::default();
        let mut e = Gathered::default();
        assert!(e.extend(&[3, 1]));
        empty.append(e);
        assert_eq!(empty.finish().positions(), [1, 3]);
        // Beyond 32 bits: refused (the partition takes the anti-join route).
        assert!(!Gathered::default().extend(&[1, 1 << 32]));
        assert!(Gathered::default().extend(&[u32::MAX as i64]));
    }

    #[test]
    fn dense_deletes_drop_rows_after_decoding() {
        // Row groups of 4, 3 and 5 rows: positions 0..4, 4..7, 7..12.
        let deleted = Deleted::from_sorted(vec![1, 2, 4, 5, 6, 11, 40]);
        let per_group = deleted_per_group(&[4, 3, 5], deleted.positions());
        assert_eq!(per_group, [2, 3, 1]);
        // The second group is all deleted: skipped, the others read whole.
        let (plan, spans) = whole_groups(&[4, 3, 5], &[true; 3], &per_group);
        assert_eq!(describe(&plan), ["scan", "skip", "scan"]);
        assert_eq!(spans, [(0, 4), (7, 12)]);
        let (plan, spans) = whole_groups(&[4, 3, 5], &[false, true, true], &per_group);
        assert_eq!(describe(&plan), ["skip", "skip", "scan"]);
        assert_eq!(spans, [(7, 12)]);
        let (_, spans) = whole_groups(&[4, 3, 5], &[true; 3], &[0, 0, 0]);
        assert_eq!(spans, [(0, 12)]);

        // Rows read: positions 0 1 2 3 7 8 9 10 11, in batches of 3, 4 and 2.
        let mut dense = ReadPositions::new(vec![(0, 4), (7, 12)], deleted, "f".into());
        let mask = |m: Option<arrow::array::BooleanArray>| {
            m.map(|m| m.iter().map(|b| b.unwrap()).collect::<Vec<_>>())
        };
        assert_eq!(mask(dense.mask(3).unwrap()), Some(vec![true, false, false]));
        assert_eq!(mask(dense.mask(4).unwrap()), None);
        assert_eq!(mask(dense.mask(2).unwrap()), Some(vec![true, false]));
        assert_eq!(mask(dense.mask(0).unwrap()), None);
        // More rows than the spans hold is an error, not a guess.
        assert!(dense.mask(1).is_err());
    }

    #[test]
    fn positions_become_row_group_selections() {
        // Row groups of 4, 3 and 5 rows: positions 0..4, 4..7, 7..12.
        let deleted = [1u32, 2, 4, 5, 6, 11, 40];
        let (plan, removed) = access_plan(&[4, 3, 5], &[true; 3], &deleted);
        assert_eq!(describe(&plan), ["+1 -2 +1", "skip", "+4 -1"]);
        // Position 40 lies beyond the file and removes nothing.
        assert_eq!(removed, 6);
        let (plan, removed) = access_plan(&[4, 3], &[true; 2], &[]);
        assert_eq!(describe(&plan), ["scan", "scan"]);
        assert_eq!(removed, 0);
        // Row groups outside the scan's byte range: skipped, their deletes not counted.
        let (plan, removed) = access_plan(&[4, 3, 5], &[false, true, true], &deleted);
        assert_eq!(describe(&plan), ["skip", "skip", "+4 -1"]);
        assert_eq!(removed, 4);
        let (plan, removed) = access_plan(&[4, 3, 5], &[true, false, false], &deleted);
        assert_eq!(describe(&plan), ["+1 -2 +1", "skip", "skip"]);
        assert_eq!(removed, 2);
    }
}
