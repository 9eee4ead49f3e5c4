//! One row group of a splice: the rows it loses, its decoded columns given their new values and
//! encoded again, and the chunks of its other columns copied as they are.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::kernels::zip::zip;
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{DataType, Schema};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use futures::StreamExt;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::RowGroupMetaData;

use super::super::column_metrics::count_nans;
use super::super::parquet_file::RowGroup;
use super::super::WrittenFiles;
use super::file::{NewParquet, OldFile};
use super::io::{chunk_range, splice_array, ChunkAt};
use super::{Computed, FileValues, Splicer};
use crate::file_planning::PlannedFile;

/// The encoders of a row group's encoded columns.
enum Encoders {
    /// The parquet writer's column writers, one per leaf, driven here (some columns encoded).
    Here(Vec<ArrowColumnWriter>),
    /// A task per leaf column (every column encoded).
    Parallel(RowGroup),
}

/// One file's splice under way: the two files, the new values, and how far it got.
pub(super) struct FileSplice<'a> {
    pub(super) splicer: &'a Splicer,
    pub(super) file: &'a PlannedFile,
    pub(super) old: OldFile,
    pub(super) new: NewParquet,
    pub(super) values: FileValues,
    pub(super) computed: Option<Arc<Computed>>,
    pub(super) reservation: MemoryReservation,
    pub(super) written: &'a WrittenFiles,
    /// The first of `values.positions` not yet spliced.
    pub(super) next: usize,
    /// The first row of the current row group in the old file.
    pub(super) start: u64,
    /// The rows that took new values, or were dropped.
    pub(super) spliced: u64,
    pub(super) nan_counts: HashMap<i32, u64>,
    pub(super) groups_copied: usize,
}

/// A row group to write: its index, rows, and the rows it loses (by offset in it, ascending).
pub(super) struct Group<'g> {
    pub(super) index: usize,
    pub(super) meta: &'g RowGroupMetaData,
    pub(super) gone: &'g [u32],
    /// Whether the splice leaves rows out (then a group that keeps every row copies all but
    /// its float columns, and one that loses rows is encoded whole).
    pub(super) dropping: bool,
}

impl Group<'_> {
    fn rows(&self) -> u64 {
        self.meta.num_rows() as u64
    }
}

impl FileSplice<'_> {
    /// Writes one row group of the new file. `Ok(false)`: the pool refused the memory it
    /// takes, and the file is not spliced.
    pub(super) async fn write_group(&mut self, group: &Group<'_>) -> Result<bool> {
        let every_column: Vec<usize> = (0..self.splicer.arrow.fields().len()).collect();
        let splicer = self.splicer;
        let (encoded, read): (&[usize], &[usize]) = match (group.dropping, group.gone.is_empty()) {
            (false, _) => (&splicer.encoded, &splicer.read),
            (true, true) => (&splicer.encoded, &splicer.encoded),
            // A row group that loses rows is decoded and encoded again whole.
            (true, false) => (&every_column, &every_column),
        };
        // A group encoded whole goes to the file writer's encoders, a task per column; the
        // columns of a group that is mostly copied are encoded here.
        let whole = encoded.len() == every_column.len();
        let mut encoders = match whole {
            true => Encoders::Parallel(RowGroup::start(
                &self.new.factory,
                self.new.groups_written,
                &self.new.own,
                &self.new.props,
            )?),
            false => Encoders::Here(
                self.new
                    .factory
                    .create_column_writers(self.new.groups_written)?,
            ),
        };
        let gone_bytes = std::mem::size_of_val(group.gone);
        let mut encoded_bytes = 0;
        if !read.is_empty() {
            match self
                .encode_group(group, encoded, read, whole, &mut encoders, gone_bytes)
                .await?
            {
                Some(bytes) => encoded_bytes = bytes,
                None => return Ok(false),
            }
        }
        if !self
            .copy_and_close(group, encoded, encoders, encoded_bytes + gone_bytes)
            .await?
        {
            return Ok(false);
        }
        self.new.groups_written += 1;
        self.groups_copied += usize::from(!whole);
        self.new.flush(self.splicer, self.written).await?;
        self.reservation.free();
        Ok(true)
    }

    /// Decodes the table columns `read` of a row group, gives the `encoded` ones their new
    /// values, leaves the gone rows out and encodes them. The memory the encoders hold, or
    /// `None` when the pool refused it.
    async fn encode_group(
        &mut self,
        group: &Group<'_>,
        encoded: &[usize],
        read: &[usize],
        whole: bool,
        encoders: &mut Encoders,
        gone_bytes: usize,
    ) -> Result<Option<usize>> {
        let mut batches = self.old.group_batches(group.index, read, whole)?;
        let mut at = self.start;
        let mut gone_next = 0usize; // the first of `gone` not yet left out
        let mut encoded_bytes = 0;
        while let Some(batch) = batches.next().await {
            let batch = batch?;
            let n = batch.num_rows() as u64;
            let mut out = self.new_columns(&batch, encoded, read, at)?;
            // The rows that go, left out of this batch.
            let offset = (at - self.start) as u32;
            let first_gone = gone_next;
            while gone_next < group.gone.len() && u64::from(group.gone[gone_next] - offset) < n {
                gone_next += 1;
            }
            if gone_next > first_gone {
                let mut keep = vec![true; n as usize];
                for &g in &group.gone[first_gone..gone_next] {
                    keep[(g - offset) as usize] = false;
                }
                out = filter_record_batch(&out, &BooleanArray::from(keep))?;
            }
            count_nans(&out, &mut self.nan_counts);
            let arrow = &self.splicer.arrow;
            let Some(bytes) =
                encode_batch(encoders, &out, encoded, arrow, &self.new.root_of).await?
            else {
                // An encoder stopped: its error comes out of `finish`.
                if let Encoders::Parallel(g) = std::mem::replace(encoders, Encoders::Here(vec![])) {
                    g.finish().await?;
                }
                return Err(DataFusionError::Internal(
                    "a column encoder stopped without an error".into(),
                ));
            };
            encoded_bytes = bytes;
            if self
                .reservation
                .try_resize(encoded_bytes + gone_bytes)
                .is_err()
            {
                return Ok(None);
            }
            at += n;
        }
        if at != self.start + group.rows() || gone_next != group.gone.len() {
            return Err(DataFusionError::Execution(format!(
                "data file {} gave {} rows of row group {}, its footer says {}",
                self.file.path,
                at - self.start,
                group.index,
                group.rows()
            )));
        }
        Ok(Some(encoded_bytes))
    }

    /// The `encoded` columns of a decoded batch (the table columns `read`, from row `at` of
    /// the file), with the new values of the spliced ones.
    fn new_columns(
        &mut self,
        batch: &RecordBatch,
        encoded: &[usize],
        read: &[usize],
        at: u64,
    ) -> Result<RecordBatch> {
        let splicer = self.splicer;
        let n = batch.num_rows() as u64;
        let from = self.next;
        let positions = &self.values.positions;
        while self.next < positions.len() && positions[self.next] < at + n {
            self.next += 1;
        }
        let changed = match &self.computed {
            Some(c) => Some(splicer.computed(c, batch, &splicer.read)?),
            None => None,
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(encoded.len());
        for &c in encoded {
            let field = splicer.arrow.field(c);
            let k = read
                .iter()
                .position(|&r| r == c)
                .ok_or_else(|| DataFusionError::Internal(format!("column {c} was not read")))?;
            let mut array = Arc::clone(batch.column(k));
            let dictionary = matches!(array.data_type(),
                DataType::Dictionary(_, v) if v.as_ref() == field.data_type());
            if array.data_type() != field.data_type() && !dictionary {
                array = cast(&array, field.data_type())?;
            }
            let spliced = splicer.spliced.iter().position(|&x| x == c);
            match (&changed, spliced) {
                (Some((mask, new)), Some(s)) => array = zip(mask, &new[s], &array)?,
                (None, Some(s)) if self.next > from => {
                    let mut new = self.values.values.column(s).slice(from, self.next - from);
                    if new.data_type() != field.data_type() {
                        new = cast(&new, field.data_type())?;
                    }
                    array = splice_array(&array, &new, &positions[from..self.next], at)?;
                }
                _ => {}
            }
            columns.push(array);
        }
        if let Some((mask, _)) = &changed {
            self.spliced += mask.true_count() as u64;
        }
        let fields: Vec<_> = encoded
            .iter()
            .zip(&columns)
            .map(|(&c, array)| {
                let field = splicer.arrow.field(c).clone();
                Arc::new(field.with_data_type(array.data_type().clone()))
            })
            .collect();
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?)
    }

    /// Fetches the chunks of the columns not encoded, as they are in the old file, and closes
    /// the row group with them and the encoded ones. `Ok(false)` when the pool refused the
    /// memory the fetched chunks take.
    async fn copy_and_close(
        &mut self,
        group: &Group<'_>,
        encoded: &[usize],
        encoders: Encoders,
        held: usize,
    ) -> Result<bool> {
        let leaves = self.new.root_of.len();
        let copied: Vec<usize> = (0..leaves)
            .filter(|l| !encoded.contains(&self.new.root_of[*l]))
            .collect();
        let ranges: Vec<Range<u64>> = copied
            .iter()
            .map(|&l| chunk_range(group.meta.column(l)))
            .collect::<Result<_>>()?;
        let copied_bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        if self
            .reservation
            .try_resize(held + copied_bytes as usize)
            .is_err()
        {
            return Ok(false);
        }
        let fetched = self
            .splicer
            .store
            .get_ranges(&self.old.path, &ranges)
            .await?;
        let mut row_group = self.new.out.next_row_group()?;
        let writers = match encoders {
            Encoders::Here(writers) => writers,
            Encoders::Parallel(encoders) => {
                for chunk in encoders.finish().await? {
                    chunk.append_to(&mut row_group)?;
                }
                vec![]
            }
        };
        let mut fetched = fetched.into_iter().zip(&ranges);
        for (l, writer) in writers.into_iter().enumerate() {
            if encoded.contains(&self.new.root_of[l]) {
                writer.close()?.append_to_row_group(&mut row_group)?;
                continue;
            }
            let Some((bytes, r)) = fetched.next() else {
                return Err(DataFusionError::Internal(
                    "a copied chunk went missing".into(),
                ));
            };
            let close = ColumnCloseResult {
                bytes_written: r.end - r.start,
                rows_written: group.rows(),
                metadata: group.meta.column(l).clone(),
                bloom_filter: None,
                column_index: self.old.page_stats(group.index, l),
                offset_index: self
                    .old
                    .offsets
                    .get(group.index)
                    .and_then(|g| g.get(l))
                    .cloned(),
            };
            row_group.append_column(
                &ChunkAt {
                    start: r.start,
                    bytes,
                },
                close,
            )?;
        }
        row_group.close()?;
        Ok(true)
    }
}

/// Hands a batch of the encoded table columns to their encoders (`root_of`: the table column
/// of each leaf column); the memory they hold after it, or `None` when an encoder task stopped.
async fn encode_batch(
    encoders: &mut Encoders,
    batch: &RecordBatch,
    encoded: &[usize],
    arrow: &Schema,
    root_of: &[usize],
) -> Result<Option<usize>> {
    match encoders {
        Encoders::Here(writers) => {
            for (k, &c) in encoded.iter().enumerate() {
                let first = root_of.iter().position(|&r| r == c).ok_or_else(|| {
                    DataFusionError::Internal(format!("no parquet leaf for column {c}"))
                })?;
                let leaves = compute_leaves(arrow.field(c), batch.column(k))?;
                for (j, leaf) in leaves.iter().enumerate() {
                    writers[first + j].write(leaf)?;
                }
            }
            Ok(Some(writers.iter().map(|w| w.memory_size()).sum()))
        }
        Encoders::Parallel(group) => Ok(group.send(batch).await?.then(|| group.memory())),
    }
}

impl Splicer {
    /// The rows of row group `index` that `condition` selects, by their offset in the group.
    pub(super) async fn rows_where(
        &self,
        old: &OldFile,
        condition: &Computed,
        index: usize,
    ) -> Result<Vec<u32>> {
        let mut gone = vec![];
        let mut at = 0u32;
        let mut batches = old.group_batches(index, &self.inputs, false)?;
        while let Some(batch) = batches.next().await {
            let batch = batch?;
            let (mask, _) = self.computed(condition, &batch, &self.inputs)?;
            gone.extend(mask.values().set_indices().map(|i| at + i as u32));
            at += batch.num_rows() as u32;
        }
        Ok(gone)
    }
}
