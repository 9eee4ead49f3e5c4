//! Copy-on-write's splice: the rewrite of a data file whose changed rows stay where they are and
//! change only some columns (an `UPDATE SET c = ..` that neither deletes rows nor moves them to
//! another partition), or whose rows only go.
//!
//! The new file has the old file's row groups, row for row. The chunks of the columns that do
//! not change are copied byte for byte, statistics and all; the changed columns are decoded a
//! batch at a time, take their new values at the changed positions and are encoded again with
//! the table's writer properties. Float columns are always encoded again, changed or not: their
//! NaN counts (an Iceberg metric the parquet footer does not keep) come from the values.
//!
//! ```text
//!  old file  row group 0: [id][k][value][s]   row group 1: [id][k][value][s] ...
//!                           │  │    │     │
//!                           │  │    └ decode ─ new values at the changed positions ─ encode
//!                           ▼  ▼    ▼     ▼
//!  new file  row group 0: [id][k][value'][s]  ...   (copied chunks in place, offsets moved)
//! ```
//!
//! A copy-on-write `DELETE`, and a `MERGE` whose rewrite only leaves rows out, splice the same
//! way: a row group that keeps every row is copied chunk for chunk (float columns aside), one
//! that loses rows is decoded whole, filtered and encoded again, one that loses every row is
//! left out. Deleting a few rows from a large file then costs the row groups that held them.
//!
//! ```text
//!  old file  row group 0 (no row goes)   row group 1 (rows 7, 9 go)   row group 2 (all go)
//!                     │ copied                   │ decode, filter, encode       ✗
//!  new file  row group 0                 row group 1'
//! ```
//!
//! A file is spliced only when its parquet schema is, leaf column for leaf column, the one this
//! crate writes for the table's schema (names, field ids, physical and logical types): the copied
//! chunks are then what a rewrite would have encoded from the same values. Otherwise, or when a
//! row group's chunks do not fit in the memory the pool grants, [`Splicer::splice`] answers
//! `None` and changes nothing: the caller rewrites the file the ordinary way.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::kernels::zip::zip;
use arrow::compute::{cast, filter_record_batch, interleave, prep_null_mask_filter};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::{Buf, Bytes};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use iceberg::spec::{PartitionKey, Schema as IcebergSchema};
use iceberg::table::Table;
use iceberg::writer::file_writer::location_generator::LocationGenerator;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowWriterOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::arrow::{ArrowWriter, ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{ChunkReader, Length};
use parquet::schema::types::ColumnDescPtr;
use roaring::RoaringTreemap;

use super::column_metrics::{count_nans, file_metrics, holds_floats};
use super::dictionary::columns_of_file;
use super::dictionary_chunk;
use super::locations::FileLocations;
use super::parquet_file::{RowGroup, SharedBuffer};
use super::writer::{with_plain_columns, writer_properties};
use super::WrittenFiles;
use crate::commit::NewFile;
use crate::error::IcebergResultExt;
use crate::file_planning::PlannedFile;
use crate::storage::location::LocationMap;

/// Rows decoded at a time from a changed column.
const BATCH_ROWS: usize = 8192;

/// The new values of one data file's changed columns.
#[derive(Debug)]
pub(crate) struct FileValues {
    /// Positions in the file, strictly ascending.
    pub positions: Vec<u64>,
    /// One row per position: the new values, one column per [`Splicer`] spliced column.
    pub values: RecordBatch,
}

/// New values computed from each row's own columns, as an `UPDATE SET c = e WHERE cond` does.
#[derive(Debug)]
pub(crate) struct Computed {
    /// The table's columns (all nullable): what `condition` and the values are compiled over.
    /// Columns the splicer does not read are NULL in the rows they see.
    pub schema: SchemaRef,
    /// Which rows change (NULL: they do not).
    pub condition: Arc<dyn PhysicalExpr>,
    /// (table column, its new value), one per spliced column, in the splicer's order.
    pub values: Vec<(usize, Arc<dyn PhysicalExpr>)>,
}

/// Where a file's new values come from, or which of its rows go.
#[derive(Debug)]
pub(crate) enum NewValues {
    /// Given, by position (a `MERGE`'s first pass computed them).
    At(FileValues),
    /// Computed from the rows as they are read.
    Computed(Arc<Computed>),
    /// The rows at these positions go; the others stay as they are (a copy-on-write `MERGE`
    /// whose first pass found the rows it deletes or writes anew).
    Dropped(RoaringTreemap),
    /// The rows the condition selects go (a copy-on-write `DELETE`); `values` is empty.
    DroppedWhere(Arc<Computed>),
}

/// A file written by [`Splicer::splice`].
#[derive(Debug)]
pub(crate) struct Spliced {
    /// The new file, in the old one's partition; `None` when every row was dropped (then no
    /// file was written).
    pub file: Option<NewFile>,
    /// The rows that took new values, or that were dropped.
    pub spliced: u64,
    /// The row groups whose chunks were copied as they are (all but float columns'), not
    /// decoded and encoded again.
    pub groups_copied: usize,
}

/// Splices new values of some columns of a table into its data files (see the module's text).
pub(crate) struct Splicer {
    table: Table,
    schema: Arc<IcebergSchema>,
    /// The table's rows in Arrow, with field ids: the layout of the new files.
    arrow: SchemaRef,
    props: WriterProperties,
    /// Table columns that take new values.
    spliced: Vec<usize>,
    /// Table columns decoded and encoded again: the spliced ones and those holding floats.
    encoded: Vec<usize>,
    /// Table columns decoded: the encoded ones and those the new values are computed from.
    read: Vec<usize>,
    /// Table columns the new values or the dropping condition are computed from.
    inputs: Vec<usize>,
    store: Arc<dyn ObjectStore>,
    url: datafusion::execution::object_store::ObjectStoreUrl,
    locations: LocationMap,
    files: FileLocations,
    pool: Arc<dyn MemoryPool>,
}

impl Splicer {
    /// A splicer of `spliced` (table columns, ascending) into `table`'s files, also reading
    /// `inputs` (the columns computed values need), reading and reserving through `context`.
    pub(crate) fn new(
        table: &Table,
        locations: &LocationMap,
        spliced: Vec<usize>,
        inputs: &[usize],
        context: &TaskContext,
    ) -> Result<Self> {
        let metadata = table.metadata();
        let schema = metadata.current_schema().clone();
        let arrow: SchemaRef = Arc::new(crate::arrow58::iceberg_to_arrow(&schema)?);
        let encoded: Vec<usize> = (0..arrow.fields().len())
            .filter(|c| spliced.contains(c) || holds_floats(arrow.field(*c).data_type()))
            .collect();
        let mut read: Vec<usize> = encoded.iter().chain(inputs).copied().collect();
        read.sort();
        read.dedup();
        let mut inputs = inputs.to_vec();
        inputs.sort();
        inputs.dedup();
        let url = locations.store_url(metadata.location())?;
        let store = context.runtime_env().object_store(&url)?;
        Ok(Self {
            table: table.clone(),
            schema,
            arrow,
            props: writer_properties(metadata)?,
            spliced,
            encoded,
            read,
            inputs,
            store,
            url,
            locations: locations.clone(),
            files: FileLocations::new(metadata)?,
            pool: Arc::clone(context.memory_pool()),
        })
    }

    /// Writes `file` again with `values` spliced in (or its dropped rows left out); `None`
    /// when the file cannot be spliced (then nothing was written). The new file's location is
    /// recorded in `written` before it is created.
    pub(crate) async fn splice(
        &self,
        file: &PlannedFile,
        values: NewValues,
        written: &WrittenFiles,
    ) -> Result<Option<Spliced>> {
        let no_positions = || FileValues {
            positions: vec![],
            values: RecordBatch::new_empty(Arc::new(Schema::empty())),
        };
        let (values, computed, drops) = match values {
            NewValues::At(v) => {
                check_values(file, &v, self.spliced.len())?;
                (v, None, Drops::None)
            }
            NewValues::Computed(c) => (no_positions(), Some(c), Drops::None),
            NewValues::Dropped(p) => (no_positions(), None, Drops::At(p)),
            NewValues::DroppedWhere(c) => (no_positions(), None, Drops::Where(c)),
        };
        let dropping = !matches!(drops, Drops::None);
        let mut spliced = values.positions.len() as u64;
        let path = self.locations.object_path_in(&self.url, &file.path)?;
        let recorded = ObjectMeta {
            location: path.clone(),
            last_modified: chrono::Utc::now(),
            size: file.size,
            e_tag: None,
            version: None,
        };
        let (footer, _) = crate::physical_plan::parquet_files::fetch_footer(
            self.store.as_ref(),
            &recorded,
            None,
            None,
            true,
        )
        .await?;
        // Copied chunks keep their page offsets (the writer needs them for every chunk once
        // its own have them).
        let Some(offsets) = footer.offset_index().cloned() else {
            return Ok(None);
        };
        let columns = footer.file_metadata().schema_descr().num_columns();
        if offsets.len() != footer.num_row_groups() || offsets.iter().any(|g| g.len() != columns) {
            return Ok(None);
        }
        // Their page statistics too, when the old file has them.
        let page_stats = footer
            .column_index()
            .filter(|c| c.len() == footer.num_row_groups() && c.iter().all(|g| g.len() == columns));
        // Columns whose dictionaries overflowed in the file are encoded plain, as a rewrite
        // of the file would (copied chunks stay as they are).
        let dictionaries = columns_of_file(&footer);
        let props = Arc::new(with_plain_columns(
            self.props.clone(),
            &self.schema,
            &dictionaries.plain,
        ));
        let options = ArrowWriterOptions::new().with_properties(props.as_ref().clone());
        let buffer = SharedBuffer::default();
        let writer =
            ArrowWriter::try_new_with_options(buffer.clone(), Arc::clone(&self.arrow), options)?;
        let (mut out, factory) = writer.into_serialized_writer()?;
        if !same_columns(&footer, out.schema_descr()) {
            return Ok(None);
        }
        let spec = self
            .table
            .metadata()
            .partition_spec_by_id(file.spec_id)
            .ok_or_else(|| {
                DataFusionError::Internal(format!("no partition spec {}", file.spec_id))
            })?;
        let key = PartitionKey::new(
            spec.as_ref().clone(),
            Arc::clone(&self.schema),
            file.partition.clone(),
        );
        let name = format!("{}-spliced.parquet", uuid::Uuid::new_v4());
        let location = self.files.generate_location(Some(&key), &name);

        let reservation =
            MemoryConsumer::new(format!("ColumnSplice[{}]", file.path)).register(&self.pool);
        let reader = StoreReader {
            store: Arc::clone(&self.store),
            path: path.clone(),
            footer: Arc::clone(&footer),
        };
        let reader_metadata =
            ArrowReaderMetadata::try_new(Arc::clone(&footer), ArrowReaderOptions::new())?;
        // A row group encoded whole reads the strings whose dictionaries held in the file as
        // dictionaries, which the file writer's dictionary encoder takes as they are (no
        // value decoded and interned again).
        let own: Vec<Option<(ColumnDescPtr, dictionary_chunk::Codec)>> = out
            .schema_descr()
            .columns()
            .iter()
            .map(|d| dictionary_chunk::supported(d, &props).map(|codec| (Arc::clone(d), codec)))
            .collect();
        let whole_metadata = dictionary_reader(
            &footer,
            &reader_metadata,
            out.schema_descr(),
            &own,
            &dictionaries.kept,
        )?;
        let group_batches = |index: usize, columns: &[usize], whole: bool| {
            ParquetRecordBatchStreamBuilder::new_with_metadata(
                reader.clone(),
                match whole {
                    true => whole_metadata.clone(),
                    false => reader_metadata.clone(),
                },
            )
            .with_projection(ProjectionMask::roots(
                footer.file_metadata().schema_descr(),
                columns.iter().copied(),
            ))
            .with_row_groups(vec![index])
            .with_batch_size(BATCH_ROWS)
            .build()
        };
        let descr = out.schema_descr();
        let leaves = descr.num_columns();
        let root_of: Vec<usize> = (0..leaves).map(|l| descr.get_column_root_idx(l)).collect();
        let first_leaf = |root: usize| root_of.iter().position(|&r| r == root);
        // A row group that loses rows is decoded and encoded again whole.
        let every_column: Vec<usize> = (0..self.arrow.fields().len()).collect();

        let mut sink: Option<Box<dyn iceberg::io::FileWrite>> = None;
        let mut flushed = 0usize;
        let mut nan_counts: HashMap<i32, u64> = HashMap::new();
        let mut next = 0usize; // the first position not yet spliced
        let mut start = 0u64; // the first row of the row group in the file
        let mut groups_written = 0usize;
        let mut groups_copied = 0usize;
        let mut dropped = match &drops {
            Drops::At(positions) => Some(positions.iter()),
            _ => None,
        }
        .into_iter()
        .flatten()
        .peekable();
        for (index, group) in footer.row_groups().iter().enumerate() {
            let rows = group.num_rows() as u64;
            // The rows of this group that go, by their offset in it (ascending).
            let gone: Vec<u32> = match &drops {
                Drops::None => vec![],
                Drops::At(_) => {
                    let mut gone = vec![];
                    while let Some(p) = dropped.next_if(|&p| p < start + rows) {
                        gone.push((p - start) as u32);
                    }
                    gone
                }
                Drops::Where(c) => {
                    let mut gone = vec![];
                    let mut at = 0u32;
                    let mut batches = group_batches(index, &self.inputs, false)?;
                    while let Some(batch) = batches.next().await {
                        let batch = batch?;
                        let (mask, _) = self.computed(c, &batch, &self.inputs)?;
                        gone.extend(mask.values().set_indices().map(|i| at + i as u32));
                        at += batch.num_rows() as u32;
                    }
                    gone
                }
            };
            if dropping {
                spliced += gone.len() as u64;
                if gone.len() as u64 == rows {
                    start += rows;
                    continue;
                }
            }
            let gone_bytes = gone.len() * std::mem::size_of::<u32>();
            let (encoded, read): (&[usize], &[usize]) = match (dropping, gone.is_empty()) {
                (false, _) => (&self.encoded, &self.read),
                (true, true) => (&self.encoded, &self.encoded),
                (true, false) => (&every_column, &every_column),
            };
            // A group encoded whole goes to the file writer's encoders, a task per column; the
            // columns of a group that is mostly copied are encoded here.
            let whole = encoded.len() == every_column.len();
            let mut encoders = match whole {
                true => {
                    Encoders::Parallel(RowGroup::start(&factory, groups_written, &own, &props)?)
                }
                false => Encoders::Here(factory.create_column_writers(groups_written)?),
            };
            let mut encoded_bytes = 0usize;
            if !read.is_empty() {
                let mut batches = group_batches(index, read, whole)?;
                let mut at = start;
                let mut gone_next = 0usize; // the first of `gone` not yet left out
                while let Some(batch) = batches.next().await {
                    let batch = batch?;
                    let n = batch.num_rows() as u64;
                    let from = next;
                    while next < values.positions.len() && values.positions[next] < at + n {
                        next += 1;
                    }
                    let changed = match &computed {
                        Some(c) => Some(self.computed(c, &batch, &self.read)?),
                        None => None,
                    };
                    let mut columns: Vec<ArrayRef> = Vec::with_capacity(encoded.len());
                    for &c in encoded {
                        let field = self.arrow.field(c);
                        let k = read.iter().position(|&r| r == c).ok_or_else(|| {
                            DataFusionError::Internal(format!("column {c} was not read"))
                        })?;
                        let mut array = Arc::clone(batch.column(k));
                        let dictionary = matches!(array.data_type(),
                            DataType::Dictionary(_, v) if v.as_ref() == field.data_type());
                        if array.data_type() != field.data_type() && !dictionary {
                            array = cast(&array, field.data_type())?;
                        }
                        if let Some((mask, new)) = &changed {
                            if let Some(s) = self.spliced.iter().position(|&x| x == c) {
                                array = zip(mask, &new[s], &array)?;
                            }
                        } else if let Some(s) = self.spliced.iter().position(|&x| x == c) {
                            if next > from {
                                let mut new = values.values.column(s).slice(from, next - from);
                                if new.data_type() != field.data_type() {
                                    new = cast(&new, field.data_type())?;
                                }
                                array =
                                    splice_array(&array, &new, &values.positions[from..next], at)?;
                            }
                        }
                        columns.push(array);
                    }
                    if let Some((mask, _)) = &changed {
                        spliced += mask.true_count() as u64;
                    }
                    let fields: Vec<_> = encoded
                        .iter()
                        .zip(&columns)
                        .map(|(&c, array)| {
                            Arc::new(
                                self.arrow
                                    .field(c)
                                    .clone()
                                    .with_data_type(array.data_type().clone()),
                            )
                        })
                        .collect();
                    let mut out_batch =
                        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
                    // The rows that go, left out of this batch.
                    let offset = (at - start) as u32;
                    let first_gone = gone_next;
                    while gone_next < gone.len() && u64::from(gone[gone_next] - offset) < n {
                        gone_next += 1;
                    }
                    if gone_next > first_gone {
                        let mut keep = vec![true; n as usize];
                        for &g in &gone[first_gone..gone_next] {
                            keep[(g - offset) as usize] = false;
                        }
                        out_batch = filter_record_batch(&out_batch, &BooleanArray::from(keep))?;
                    }
                    count_nans(&out_batch, &mut nan_counts);
                    encoded_bytes = match &mut encoders {
                        Encoders::Here(writers) => {
                            for (k, &c) in encoded.iter().enumerate() {
                                let first = first_leaf(c).ok_or_else(|| {
                                    DataFusionError::Internal(format!(
                                        "no parquet leaf for column {c}"
                                    ))
                                })?;
                                let leaves =
                                    compute_leaves(self.arrow.field(c), out_batch.column(k))?;
                                for (j, leaf) in leaves.iter().enumerate() {
                                    writers[first + j].write(leaf)?;
                                }
                            }
                            writers.iter().map(|w| w.memory_size()).sum()
                        }
                        Encoders::Parallel(group) => match group.send(&out_batch).await? {
                            true => group.memory(),
                            false => usize::MAX,
                        },
                    };
                    if encoded_bytes == usize::MAX {
                        // An encoder stopped: its error comes out of `finish`.
                        if let Encoders::Parallel(group) = encoders {
                            group.finish().await?;
                        }
                        return Err(DataFusionError::Internal(
                            "a column encoder stopped without an error".into(),
                        ));
                    }
                    if reservation.try_resize(encoded_bytes + gone_bytes).is_err() {
                        return Ok(None);
                    }
                    at += n;
                }
                if at != start + rows || gone_next != gone.len() {
                    return Err(DataFusionError::Execution(format!(
                        "data file {} gave {} rows of row group {index}, its footer says {rows}",
                        file.path,
                        at - start
                    )));
                }
            }
            // The chunks of the other columns, as they are in the old file.
            let copied: Vec<usize> = (0..leaves)
                .filter(|l| !encoded.contains(&root_of[*l]))
                .collect();
            let ranges: Vec<Range<u64>> = copied
                .iter()
                .map(|&l| chunk_range(group.column(l)))
                .collect::<Result<_>>()?;
            let copied_bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
            if reservation
                .try_resize(encoded_bytes + gone_bytes + copied_bytes as usize)
                .is_err()
            {
                return Ok(None);
            }
            let mut fetched = self.store.get_ranges(&path, &ranges).await?.into_iter();
            if sink.is_none() {
                written.record(location.clone());
                let output = self.table.file_io().new_output(&location).df()?;
                sink = Some(output.writer().await.df()?);
            }
            let mut row_group = out.next_row_group()?;
            let mut range = ranges.iter();
            let writers = match encoders {
                Encoders::Here(writers) => writers,
                Encoders::Parallel(group) => {
                    for chunk in group.finish().await? {
                        chunk.append_to(&mut row_group)?;
                    }
                    vec![]
                }
            };
            for (l, writer) in writers.into_iter().enumerate() {
                if encoded.contains(&root_of[l]) {
                    writer.close()?.append_to_row_group(&mut row_group)?;
                    continue;
                }
                let (Some(bytes), Some(r)) = (fetched.next(), range.next()) else {
                    return Err(DataFusionError::Internal(
                        "a copied chunk went missing".into(),
                    ));
                };
                let chunk = group.column(l);
                let close = ColumnCloseResult {
                    bytes_written: r.end - r.start,
                    rows_written: rows,
                    metadata: chunk.clone(),
                    bloom_filter: None,
                    column_index: page_stats.and_then(|c| c[index].get(l)).cloned(),
                    offset_index: offsets.get(index).and_then(|g| g.get(l)).cloned(),
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
            groups_written += 1;
            groups_copied += usize::from(!whole);
            out.flush()?;
            let bytes = buffer.take();
            if let Some(sink) = sink.as_mut() {
                flushed += bytes.len();
                sink.write(Bytes::from(bytes)).await.df()?;
            }
            reservation.free();
            start += rows;
        }
        if next != values.positions.len() {
            return Err(DataFusionError::Execution(format!(
                "{} changed positions of data file {} are past its {start} rows",
                values.positions.len() - next,
                file.path
            )));
        }
        if let Drops::At(positions) = &drops {
            if positions.len() != spliced {
                return Err(DataFusionError::Execution(format!(
                    "{} dropped positions of data file {} are past its {start} rows",
                    positions.len() - spliced,
                    file.path
                )));
            }
        }
        if dropping && groups_written == 0 {
            // Every row went: no file takes this one's place.
            drop(reservation);
            return Ok(Some(Spliced {
                file: None,
                spliced,
                groups_copied,
            }));
        }
        let metadata = out.finish()?;
        let tail = buffer.take();
        let mut sink = match sink {
            Some(s) => s,
            None => {
                // A file without row groups: nothing to splice, but keep the contract.
                written.record(location.clone());
                self.table
                    .file_io()
                    .new_output(&location)
                    .df()?
                    .writer()
                    .await
                    .df()?
            }
        };
        flushed += tail.len();
        sink.write(Bytes::from(tail)).await.df()?;
        sink.close().await.df()?;
        drop(reservation);
        let mut builder = file_metrics(&self.schema, &metadata, flushed, &location, nan_counts)?;
        builder
            .partition(file.partition.clone())
            .partition_spec_id(file.spec_id);
        let data_file = builder
            .build()
            .map_err(|e| DataFusionError::Internal(format!("spliced data file: {e}")))?;
        Ok(Some(Spliced {
            file: Some(NewFile {
                spec_id: file.spec_id,
                file: data_file,
            }),
            spliced,
            groups_copied,
        }))
    }

    /// Which rows of `batch` (the table columns `read`) change, and the new values of the
    /// spliced columns for every row (in the writer's types).
    fn computed(
        &self,
        computed: &Computed,
        batch: &RecordBatch,
        read: &[usize],
    ) -> Result<(BooleanArray, Vec<ArrayRef>)> {
        let n = batch.num_rows();
        let mut columns = Vec::with_capacity(computed.schema.fields().len());
        for (c, field) in computed.schema.fields().iter().enumerate() {
            columns.push(match read.iter().position(|&r| r == c) {
                Some(k) if batch.column(k).data_type() == field.data_type() => {
                    Arc::clone(batch.column(k))
                }
                Some(k) => cast(batch.column(k), field.data_type())?,
                None => new_null_array(field.data_type(), n),
            });
        }
        let rows = RecordBatch::try_new(Arc::clone(&computed.schema), columns)?;
        let mask = computed.condition.evaluate(&rows)?.into_array(n)?;
        let mask = mask.as_boolean_opt().ok_or_else(|| {
            DataFusionError::Internal("an UPDATE condition is not boolean".into())
        })?;
        let mask = match mask.null_count() {
            0 => mask.clone(),
            _ => prep_null_mask_filter(mask),
        };
        let mut values = Vec::with_capacity(computed.values.len());
        for (c, value) in &computed.values {
            let field = self.arrow.field(*c);
            let mut array = value.evaluate(&rows)?.into_array(n)?;
            if array.data_type() != field.data_type() {
                array = cast(&array, field.data_type())?;
            }
            if !field.is_nullable() && array.null_count() > 0 {
                let nulls_taken = match array.logical_nulls() {
                    Some(nulls) => (0..n).any(|i| mask.value(i) && nulls.is_null(i)),
                    None => false,
                };
                if nulls_taken {
                    return Err(DataFusionError::Execution(format!(
                        "UPDATE would write NULL into required (non-nullable) column '{}'",
                        field.name()
                    )));
                }
            }
            values.push(array);
        }
        Ok((mask, values))
    }
}

/// The encoders of a row group's encoded columns.
enum Encoders {
    /// The parquet writer's column writers, one per leaf, driven here (some columns encoded).
    Here(Vec<parquet::arrow::arrow_writer::ArrowColumnWriter>),
    /// A task per leaf column (every column encoded).
    Parallel(RowGroup),
}

/// The rows a splice leaves out.
enum Drops {
    /// None: the file keeps every row.
    None,
    /// The rows at these positions.
    At(RoaringTreemap),
    /// The rows the condition selects.
    Where(Arc<Computed>),
}

/// How a row group encoded whole is read: `plain` (the file's own reading), with the top-level
/// strings and binaries the dictionary encoder takes (`own`, by leaf) and whose dictionaries held
/// in the file (`kept`, field ids) read as dictionaries.
fn dictionary_reader(
    footer: &Arc<ParquetMetaData>,
    plain: &ArrowReaderMetadata,
    descr: &parquet::schema::types::SchemaDescriptor,
    own: &[Option<(ColumnDescPtr, dictionary_chunk::Codec)>],
    kept: &[i32],
) -> Result<ArrowReaderMetadata> {
    let file_schema = plain.schema();
    let mut hinted = false;
    let fields: Vec<Field> = file_schema
        .fields()
        .iter()
        .enumerate()
        .map(|(root, f)| {
            let held = (0..descr.num_columns())
                .find(|&l| descr.get_column_root_idx(l) == root)
                .filter(|&l| own[l].is_some())
                .is_some_and(|l| {
                    let column = descr.column(l);
                    let info = column.self_type().get_basic_info();
                    info.has_id() && kept.contains(&info.id())
                });
            match f.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
                    if held =>
                {
                    hinted = true;
                    f.as_ref().clone().with_data_type(DataType::Dictionary(
                        Box::new(DataType::Int32),
                        Box::new(f.data_type().clone()),
                    ))
                }
                _ => f.as_ref().clone(),
            }
        })
        .collect();
    if !hinted {
        return Ok(plain.clone());
    }
    let schema = Schema::new_with_metadata(fields, file_schema.metadata().clone());
    Ok(ArrowReaderMetadata::try_new(
        Arc::clone(footer),
        ArrowReaderOptions::new().with_schema(Arc::new(schema)),
    )?)
}

/// The values must be one row per position, positions strictly ascending.
fn check_values(file: &PlannedFile, values: &FileValues, columns: usize) -> Result<()> {
    let ascending = values.positions.windows(2).all(|w| w[0] < w[1]);
    if !ascending
        || values.values.num_rows() != values.positions.len()
        || values.values.num_columns() != columns
    {
        return Err(DataFusionError::Internal(format!(
            "the new values for {} are not one row per ascending position",
            file.path
        )));
    }
    Ok(())
}

/// Whether the file's leaf columns are those the writer writes, one for one.
fn same_columns(footer: &ParquetMetaData, out: &parquet::schema::types::SchemaDescriptor) -> bool {
    let file = footer.file_metadata().schema_descr();
    file.num_columns() == out.num_columns()
        && (0..out.num_columns()).all(|l| *file.column(l) == *out.column(l))
}

/// Where a column chunk's bytes are in its file.
fn chunk_range(chunk: &parquet::file::metadata::ColumnChunkMetaData) -> Result<Range<u64>> {
    let start = chunk
        .dictionary_page_offset()
        .unwrap_or_else(|| chunk.data_page_offset());
    let size = chunk.compressed_size();
    match (u64::try_from(start), u64::try_from(size)) {
        (Ok(s), Ok(n)) => Ok(s..s + n),
        _ => Err(DataFusionError::Execution(format!(
            "a column chunk claims offset {start} and size {size}"
        ))),
    }
}

/// `old` with `new[j]` in place of row `positions[j] - at`.
fn splice_array(old: &ArrayRef, new: &ArrayRef, positions: &[u64], at: u64) -> Result<ArrayRef> {
    let mut indices: Vec<(usize, usize)> = (0..old.len()).map(|i| (0, i)).collect();
    for (j, &p) in positions.iter().enumerate() {
        let i = p
            .checked_sub(at)
            .map(|i| i as usize)
            .filter(|&i| i < indices.len())
            .ok_or_else(|| DataFusionError::Internal(format!("position {p} out of its batch")))?;
        indices[i] = (1, j);
    }
    Ok(interleave(&[old.as_ref(), new.as_ref()], &indices)?)
}

/// One fetched column chunk, read by its offsets in the file it came from.
struct ChunkAt {
    start: u64,
    bytes: Bytes,
}

impl ChunkAt {
    fn at(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let from = start
            .checked_sub(self.start)
            .map(|f| f as usize)
            .filter(|f| f + length <= self.bytes.len())
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!(
                    "bytes {start}..+{length} are not in the fetched chunk"
                ))
            })?;
        Ok(self.bytes.slice(from..from + length))
    }
}

impl Length for ChunkAt {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl ChunkReader for ChunkAt {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let rest = (self.len().saturating_sub(start)) as usize;
        Ok(self.at(start, rest)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.at(start, length)
    }
}

/// Reads a data file's column data through its store, its footer already known.
#[derive(Clone)]
struct StoreReader {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    footer: Arc<ParquetMetaData>,
}

impl AsyncFileReader for StoreReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .get_range(&self.path, range)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let footer = Arc::clone(&self.footer);
        async move { Ok(footer) }.boxed()
    }
}
