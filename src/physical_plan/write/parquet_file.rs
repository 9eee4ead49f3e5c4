//! The parquet file writer under every data and delete file this crate writes.
//!
//! It plugs into the iceberg crate's writer stack (rolling, data-file, equality-delete and fan-out
//! writers) as a [`FileWriterBuilder`], and differs from the iceberg crate's own parquet writer in
//! three ways:
//!
//! - **Columns are encoded in parallel.** Each leaf column of the row group in progress is
//!   encoded by a task of its own, fed through a small bounded channel, so a single file (a
//!   compaction's output, a sorted INSERT) uses every core instead of one. At the end of a row
//!   group the column chunks are joined and appended in order; encoded bytes go to storage as
//!   each row group completes.
//! - **What it buffers is reserved from the memory pool.** The encoders' buffered pages are
//!   reserved, up to a quarter of a bounded pool per file; past that, or when the pool
//!   refuses, the row group in progress is closed early (smaller row groups, bounded memory)
//!   rather than failing the statement or starving the operators beside it.
//! - **Column metrics are the Iceberg spec's**: sizes, value, null and NaN counts, and lower and
//!   upper bounds per field id. A bound is kept only when every row group with values gives one
//!   (a row group without statistics makes the file's bound unknown, never a tighter one), and
//!   truncated parquet statistics are kept as the valid bounds they are.
//!
//! `write.parquet.row-group-limit` and `write.parquet.row-group-size-bytes` bound row groups.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{FieldRef, SchemaRef};
use bytes::Bytes;
use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use iceberg::io::{FileWrite, OutputFile};
use iceberg::spec::{DataFileBuilder, Schema as IcebergSchema};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder};
use iceberg::writer::CurrentFileStatus;
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn,
    ArrowRowGroupWriterFactory, ArrowWriterOptions,
};
use parquet::arrow::ArrowWriter;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnDescPtr;
use tokio::sync::mpsc;

use super::column_metrics::{count_nans, file_metrics};
use super::dictionary_chunk::{self, DictionaryChunk};
use crate::arrow58::{batch_from_58, RecordBatch58};
use crate::error::IcebergResultExt;

/// Leaf arrays queued per column encoder: enough to keep both sides busy, little memory.
const QUEUED_LEAVES: usize = 2;

/// A row group is never closed early for memory below this many rows (one default batch).
const MIN_PRESSURED_ROW_GROUP_ROWS: usize = 8192;

/// The share of a bounded memory pool one file's encoders may hold: the rest stays for the
/// operators beside the writer (joins, sorts, delete sets), which may not be able to spill.
const POOL_SHARE_DIVISOR: usize = 4;

/// Builds [`ParquetFileWriter`]s: one per file the rolling writer opens.
#[derive(Clone)]
pub(crate) struct ParquetFileWriterBuilder {
    settings: Arc<Settings>,
}

struct Settings {
    props: Arc<WriterProperties>,
    /// The Iceberg schema of the rows (field ids, types for the bounds).
    schema: Arc<IcebergSchema>,
    /// The same rows in DataFusion's Arrow, with field ids in the field metadata.
    arrow: SchemaRef,
    /// Where the encoders' buffers are reserved; `None` leaves them unaccounted (small files
    /// written outside a plan, such as delete files).
    pool: Option<Arc<dyn MemoryPool>>,
    /// Buffered bytes after which a file closes its row group: a share of a bounded pool.
    memory_cap: usize,
    row_group_rows: usize,
    row_group_bytes: usize,
}

impl ParquetFileWriterBuilder {
    /// Writers of `schema` (`arrow` is its Arrow form, as [`crate::arrow58::iceberg_to_arrow`]
    /// gives it) with `props`, reserving from `pool` when given.
    pub(crate) fn new(
        props: WriterProperties,
        schema: Arc<IcebergSchema>,
        arrow: SchemaRef,
        pool: Option<Arc<dyn MemoryPool>>,
        row_group_bytes: usize,
    ) -> Self {
        let row_group_rows = props.max_row_group_row_count().unwrap_or(usize::MAX).max(1);
        let memory_cap = match pool.as_ref().map(|p| p.memory_limit()) {
            Some(MemoryLimit::Finite(limit)) => limit / POOL_SHARE_DIVISOR,
            _ => usize::MAX,
        };
        Self {
            settings: Arc::new(Settings {
                props: Arc::new(props),
                schema,
                arrow,
                pool,
                memory_cap,
                row_group_rows,
                row_group_bytes: row_group_bytes.max(1),
            }),
        }
    }
}

impl FileWriterBuilder for ParquetFileWriterBuilder {
    type R = ParquetFileWriter;

    async fn build(&self, output_file: OutputFile) -> iceberg::Result<ParquetFileWriter> {
        // Not a spiller in the pool's sense: counting it among the spillers would shrink the
        // fair share of every operator that spills beside it. Its own cap keeps it small.
        let reservation = self.settings.pool.as_ref().map(|pool| {
            MemoryConsumer::new(format!("ParquetFileWriter[{}]", output_file.location()))
                .register(pool)
        });
        Ok(ParquetFileWriter {
            settings: Arc::clone(&self.settings),
            output: output_file,
            open: None,
            rows: 0,
            nan_counts: HashMap::new(),
            reservation,
            dictionary_schema: None,
        })
    }
}

/// Writes one parquet file; see the module documentation.
pub(crate) struct ParquetFileWriter {
    settings: Arc<Settings>,
    output: OutputFile,
    /// The file, once the first rows arrive (no rows, no file).
    open: Option<OpenFile>,
    rows: usize,
    nan_counts: HashMap<i32, u64>,
    reservation: Option<MemoryReservation>,
    /// The schema of the last batch with dictionary columns, both versions.
    dictionary_schema: Option<(crate::arrow58::SchemaRef58, SchemaRef)>,
}

struct OpenFile {
    file: SerializedFileWriter<SharedBuffer>,
    buffer: SharedBuffer,
    sink: Box<dyn FileWrite>,
    factory: ArrowRowGroupWriterFactory,
    /// For each leaf column, how [`DictionaryChunk`] would encode it, if it can.
    own: Vec<Option<(ColumnDescPtr, dictionary_chunk::Codec)>>,
    group: Option<RowGroup>,
    groups: usize,
    /// Bytes handed to storage so far.
    flushed: usize,
}

/// The bytes the file writer produced and storage has not taken yet.
#[derive(Clone, Default)]
pub(super) struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl SharedBuffer {
    pub(super) fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.0.lock().map(|b| b.len()).unwrap_or(0)
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("parquet output buffer poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a column encoder last reported of itself, read by the file writer without waiting.
#[derive(Default)]
struct EncoderSize {
    memory: AtomicUsize,
    encoded: AtomicUsize,
}

/// The row group in progress: one encoding task per leaf column.
pub(super) struct RowGroup {
    senders: Vec<mpsc::Sender<Leaf>>,
    tasks: Vec<SpawnedTask<Result<ColumnChunk>>>,
    sizes: Arc<[EncoderSize]>,
    /// The leaf columns [`DictionaryChunk`] may encode (top-level byte arrays).
    whole: Vec<bool>,
    rows: usize,
}

/// What a column encoder is handed.
enum Leaf {
    /// A leaf column as the parquet writer's encoder takes it.
    Arrow(ArrowLeafColumn),
    /// A whole top-level column that [`DictionaryChunk`] may take (when it is a dictionary).
    Whole(FieldRef, ArrayRef),
}

/// A closed column chunk, by whichever encoder wrote it.
pub(super) enum ColumnChunk {
    Arrow(ArrowColumnChunk),
    Own(Bytes, ColumnCloseResult),
}

/// Encodes the leaves of one column until its channel closes, then closes the chunk (its last
/// page flushed and compressed) in the same task, beside the other columns. A column `own`
/// can encode goes to it when its first array is a dictionary, and then stays with it.
async fn encode_column(
    mut leaves: mpsc::Receiver<Leaf>,
    mut writer: ArrowColumnWriter,
    mut own: Option<DictionaryChunk>,
    sizes: Arc<[EncoderSize]>,
    column: usize,
) -> Result<ColumnChunk> {
    let mut arrow_used = false;
    while let Some(leaf) = leaves.recv().await {
        match leaf {
            Leaf::Whole(field, array) => match own.as_mut() {
                Some(chunk)
                    if !arrow_used
                        && (!chunk.is_empty()
                            || dictionary_chunk::is_byte_dictionary(array.as_ref())) =>
                {
                    chunk.write(&array)?;
                    sizes[column]
                        .memory
                        .store(chunk.memory_size(), Ordering::Relaxed);
                    sizes[column]
                        .encoded
                        .store(chunk.estimated_size(), Ordering::Relaxed);
                    continue;
                }
                _ => {
                    for leaf in compute_leaves(&field, &array)? {
                        writer.write(&leaf)?;
                    }
                }
            },
            Leaf::Arrow(leaf) => writer.write(&leaf)?,
        }
        arrow_used = true;
        sizes[column]
            .memory
            .store(writer.memory_size(), Ordering::Relaxed);
        sizes[column]
            .encoded
            .store(writer.get_estimated_total_bytes(), Ordering::Relaxed);
    }
    match own {
        Some(chunk) if !chunk.is_empty() => {
            let (bytes, close) = chunk.close()?;
            Ok(ColumnChunk::Own(bytes, close))
        }
        _ => Ok(ColumnChunk::Arrow(writer.close()?)),
    }
}

impl RowGroup {
    /// `own`: for each leaf column, how [`DictionaryChunk`] would encode it, if it can.
    pub(super) fn start(
        factory: &ArrowRowGroupWriterFactory,
        index: usize,
        own: &[Option<(ColumnDescPtr, dictionary_chunk::Codec)>],
        props: &Arc<WriterProperties>,
    ) -> Result<Self> {
        let writers = factory.create_column_writers(index)?;
        let sizes: Arc<[EncoderSize]> = writers.iter().map(|_| EncoderSize::default()).collect();
        let mut senders = Vec::with_capacity(writers.len());
        let mut tasks = Vec::with_capacity(writers.len());
        for (column, writer) in writers.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel(QUEUED_LEAVES);
            senders.push(tx);
            let chunk = own
                .get(column)
                .cloned()
                .flatten()
                .map(|(descr, codec)| DictionaryChunk::new(descr, Arc::clone(props), codec));
            tasks.push(SpawnedTask::spawn(encode_column(
                rx,
                writer,
                chunk,
                Arc::clone(&sizes),
                column,
            )));
        }
        Ok(Self {
            senders,
            tasks,
            sizes,
            whole: own.iter().map(Option::is_some).collect(),
            rows: 0,
        })
    }

    pub(super) fn memory(&self) -> usize {
        self.sizes
            .iter()
            .map(|s| s.memory.load(Ordering::Relaxed))
            .sum()
    }

    fn encoded(&self) -> usize {
        self.sizes
            .iter()
            .map(|s| s.encoded.load(Ordering::Relaxed))
            .sum()
    }

    /// Hands every leaf column of `batch` to its encoder. `Ok(false)` when an encoder has
    /// stopped (its error comes out of [`Self::finish`]).
    pub(super) async fn send(&mut self, batch: &RecordBatch) -> Result<bool> {
        let mut column = 0;
        for (array, field) in batch.columns().iter().zip(batch.schema().fields()) {
            let leaves = match self.whole.get(column) {
                // A top-level byte array: its encoder decides how to take it.
                Some(true) => vec![Leaf::Whole(Arc::clone(field), Arc::clone(array))],
                _ => compute_leaves(field, array)?
                    .into_iter()
                    .map(Leaf::Arrow)
                    .collect(),
            };
            for leaf in leaves {
                let Some(sender) = self.senders.get(column) else {
                    return Err(DataFusionError::Internal(
                        "parquet writer: more leaf columns than encoders".into(),
                    ));
                };
                if sender.send(leaf).await.is_err() {
                    return Ok(false);
                }
                column += 1;
            }
        }
        self.rows += batch.num_rows();
        Ok(true)
    }

    /// Ends every encoder's input and takes the chunks they close (all at once), in column
    /// order.
    pub(super) async fn finish(self) -> Result<Vec<ColumnChunk>> {
        drop(self.senders);
        let mut chunks = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            chunks.push(
                task.join_unwind()
                    .await
                    .map_err(|e| DataFusionError::ExecutionJoin(Box::new(e)))??,
            );
        }
        Ok(chunks)
    }
}

impl ColumnChunk {
    /// Appends the chunk to `row_group`, the next column of it.
    pub(super) fn append_to<W: Write + Send>(
        self,
        row_group: &mut parquet::file::writer::SerializedRowGroupWriter<'_, W>,
    ) -> Result<()> {
        match self {
            ColumnChunk::Arrow(chunk) => chunk.append_to_row_group(row_group)?,
            ColumnChunk::Own(bytes, close) => row_group.append_column(&bytes, close)?,
        }
        Ok(())
    }
}

impl OpenFile {
    async fn create(settings: &Settings, output: &OutputFile) -> Result<Self> {
        let buffer = SharedBuffer::default();
        let options = ArrowWriterOptions::new().with_properties((*settings.props).clone());
        let writer = ArrowWriter::try_new_with_options(
            buffer.clone(),
            Arc::clone(&settings.arrow),
            options,
        )?;
        let (file, factory) = writer.into_serialized_writer()?;
        let own = file
            .schema_descr()
            .columns()
            .iter()
            .map(|descr| {
                dictionary_chunk::supported(descr, &settings.props)
                    .map(|codec| (Arc::clone(descr), codec))
            })
            .collect();
        let sink = output.writer().await.df()?;
        Ok(Self {
            file,
            buffer,
            sink,
            factory,
            own,
            group: None,
            groups: 0,
            flushed: 0,
        })
    }

    fn written_size(&self) -> usize {
        self.flushed + self.buffer.len() + self.group.as_ref().map(RowGroup::encoded).unwrap_or(0)
    }

    /// Closes the row group in progress (if any) into the file and hands its bytes to storage.
    async fn finish_group(&mut self) -> Result<()> {
        let Some(group) = self.group.take() else {
            return Ok(());
        };
        let chunks = group.finish().await?;
        let mut row_group = self.file.next_row_group()?;
        for chunk in chunks {
            chunk.append_to(&mut row_group)?;
        }
        row_group.close()?;
        self.groups += 1;
        self.drain().await
    }

    async fn drain(&mut self) -> Result<()> {
        self.file.flush()?;
        let bytes = self.buffer.take();
        if !bytes.is_empty() {
            self.flushed += bytes.len();
            self.sink.write(Bytes::from(bytes)).await.df()?;
        }
        Ok(())
    }
}

impl ParquetFileWriter {
    /// The Arrow 59 schema of `batch`: the file's, unless the batch keeps some columns as
    /// dictionaries (see `align_batch`); then its own, converted once per schema.
    fn schema_of(&mut self, batch: &RecordBatch58) -> Result<SchemaRef> {
        let dictionaries = batch
            .columns()
            .iter()
            .any(|c| matches!(c.data_type(), arrow_schema58::DataType::Dictionary(..)));
        if !dictionaries {
            return Ok(Arc::clone(&self.settings.arrow));
        }
        if let Some((schema58, schema)) = &self.dictionary_schema {
            if Arc::ptr_eq(schema58, &batch.schema()) || **schema58 == *batch.schema() {
                return Ok(Arc::clone(schema));
            }
        }
        let schema = Arc::new(crate::arrow58::schema_from_58(&batch.schema())?);
        self.dictionary_schema = Some((batch.schema(), Arc::clone(&schema)));
        Ok(schema)
    }

    async fn write_batch(&mut self, mut batch: RecordBatch) -> Result<()> {
        count_nans(&batch, &mut self.nan_counts);
        self.rows += batch.num_rows();
        let settings = Arc::clone(&self.settings);
        if self.open.is_none() {
            self.open = Some(OpenFile::create(&settings, &self.output).await?);
        }
        let Some(open) = self.open.as_mut() else {
            return Err(DataFusionError::Internal("parquet file not open".into()));
        };
        while batch.num_rows() > 0 {
            if open.group.is_none() {
                open.group = Some(RowGroup::start(
                    &open.factory,
                    open.groups,
                    &open.own,
                    &settings.props,
                )?);
            }
            let Some(group) = open.group.as_mut() else {
                return Err(DataFusionError::Internal("no row group in progress".into()));
            };
            let take = batch
                .num_rows()
                .min(settings.row_group_rows.saturating_sub(group.rows).max(1));
            if !group.send(&batch.slice(0, take)).await? {
                // An encoder stopped: its error is the statement's.
                open.finish_group().await?;
                return Err(DataFusionError::Internal(
                    "a parquet column encoder stopped without an error".into(),
                ));
            }
            batch = batch.slice(take, batch.num_rows() - take);

            let full = group.rows >= settings.row_group_rows
                || group.encoded() >= settings.row_group_bytes;
            let pressed = match self.reservation.as_mut() {
                Some(reservation) => {
                    let memory = group.memory();
                    let refused =
                        memory > settings.memory_cap || reservation.try_resize(memory).is_err();
                    if !refused {
                        false
                    } else if group.rows >= MIN_PRESSURED_ROW_GROUP_ROWS {
                        true
                    } else {
                        // Too small to close early: account for it anyway.
                        reservation.resize(memory);
                        false
                    }
                }
                None => false,
            };
            if full || pressed {
                open.finish_group().await?;
                if let Some(reservation) = self.reservation.as_mut() {
                    reservation.free();
                }
            }
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<Vec<DataFileBuilder>> {
        let Some(mut open) = self.open.take() else {
            return Ok(vec![]);
        };
        open.finish_group().await?;
        let metadata = open.file.finish()?;
        open.drain().await?;
        open.sink.close().await.df()?;
        if let Some(reservation) = self.reservation.as_mut() {
            reservation.free();
        }
        let builder = file_metrics(
            &self.settings.schema,
            &metadata,
            open.flushed,
            self.output.location(),
            std::mem::take(&mut self.nan_counts),
        )?;
        Ok(vec![builder])
    }
}

fn to_iceberg(e: DataFusionError) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, "writing a parquet file").with_source(e)
}

impl FileWriter for ParquetFileWriter {
    async fn write(&mut self, batch: &RecordBatch58) -> iceberg::Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let schema = self.schema_of(batch).map_err(to_iceberg)?;
        let batch = batch_from_58(batch, &schema).map_err(to_iceberg)?;
        self.write_batch(batch).await.map_err(to_iceberg)
    }

    async fn close(mut self) -> iceberg::Result<Vec<DataFileBuilder>> {
        self.finish().await.map_err(to_iceberg)
    }
}

impl CurrentFileStatus for ParquetFileWriter {
    fn current_file_path(&self) -> String {
        self.output.location().to_string()
    }

    fn current_row_num(&self) -> usize {
        self.rows
    }

    fn current_written_size(&self) -> usize {
        self.open.as_ref().map(OpenFile::written_size).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::array::{
        DictionaryArray, Float32Array, Float64Array, Int64Array, ListArray, StringArray,
        StructArray,
    };
    use arrow::buffer::{NullBuffer, OffsetBuffer};
    use arrow::compute::concat_batches;
    use arrow::datatypes::DataType;
    use arrow::datatypes::Int32Type;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use iceberg::io::FileIO;
    use iceberg::spec::{Datum, PrimitiveType, Type};
    use iceberg::spec::{ListType, NestedField, StructType};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::metadata::ColumnChunkMetaData;
    use parquet::file::metadata::ParquetMetaData;
    use parquet::file::properties::EnabledStatistics;

    fn schema() -> Arc<IcebergSchema> {
        let double = || Type::Primitive(PrimitiveType::Double);
        Arc::new(
            IcebergSchema::builder()
                .with_fields([
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
                    NestedField::optional(3, "score", double()).into(),
                    NestedField::optional(
                        4,
                        "point",
                        Type::Struct(StructType::new(vec![NestedField::optional(
                            5,
                            "x",
                            Type::Primitive(PrimitiveType::Float),
                        )
                        .into()])),
                    )
                    .into(),
                    NestedField::optional(
                        6,
                        "tags",
                        Type::List(ListType::new(
                            NestedField::optional(7, "element", double()).into(),
                        )),
                    )
                    .into(),
                ])
                .build()
                .unwrap(),
        )
    }

    /// `rows` rows of every shape the writer handles: nulls, NaNs, nested floats.
    fn batch(arrow: &SchemaRef, start: i64, rows: usize) -> RecordBatch {
        let ids: Vec<i64> = (start..start + rows as i64).collect();
        let names = StringArray::from_iter(
            ids.iter()
                .map(|i| (i % 5 != 0).then(|| format!("name-{:06}", i % 1000))),
        );
        let scores = Float64Array::from_iter(ids.iter().map(|i| match i % 7 {
            0 => None,
            1 => Some(f64::NAN),
            _ => Some(*i as f64 / 3.0),
        }));
        let DataType::Struct(point_fields) = arrow.field(3).data_type() else {
            unreachable!()
        };
        let xs = Float32Array::from_iter(ids.iter().map(|i| match i % 11 {
            0 => None,
            1 => Some(f32::NAN),
            _ => Some(-(*i as f32)),
        }));
        let points = StructArray::try_new(
            point_fields.clone(),
            vec![Arc::new(xs)],
            Some(NullBuffer::from_iter(ids.iter().map(|i| i % 13 != 0))),
        )
        .unwrap();
        let DataType::List(element) = arrow.field(4).data_type() else {
            unreachable!()
        };
        // Row i holds i % 3 elements; the element after a NaN is i itself.
        let lengths: Vec<usize> = ids.iter().map(|i| (i % 3) as usize).collect();
        let values = Float64Array::from_iter(ids.iter().flat_map(|i| {
            let i = *i;
            (0..(i % 3)).map(move |k| {
                if k == 0 && i % 4 == 0 {
                    f64::NAN
                } else {
                    (i * 10 + k) as f64
                }
            })
        }));
        let tags = ListArray::try_new(
            Arc::clone(element),
            OffsetBuffer::from_lengths(lengths),
            Arc::new(values),
            None,
        )
        .unwrap();
        RecordBatch::try_new(
            Arc::clone(arrow),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(names),
                Arc::new(scores),
                Arc::new(points),
                Arc::new(tags),
            ],
        )
        .unwrap()
    }

    /// Writes `count` batches of `rows` rows with `props` (reserving from `pool` when given),
    /// checks that the file reads back the same rows, and returns its description and rows.
    async fn round_trip(
        props: WriterProperties,
        pool: Option<Arc<dyn MemoryPool>>,
        count: i64,
        rows: usize,
    ) -> (iceberg::spec::DataFile, RecordBatch) {
        let schema = schema();
        let arrow = Arc::new(crate::arrow58::iceberg_to_arrow(&schema).unwrap());
        let builder =
            ParquetFileWriterBuilder::new(props, schema, Arc::clone(&arrow), pool, 1 << 30);
        let batches: Vec<RecordBatch> = (0..count)
            .map(|i| batch(&arrow, i * rows as i64, rows))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let io = FileIO::new_with_fs();
        let output = io.new_output(path.to_str().unwrap()).unwrap();
        let mut writer = builder.build(output).await.unwrap();
        let schema58 = Arc::new(crate::arrow58::schema_to_58(&arrow).unwrap());
        for b in &batches {
            let b58 = crate::arrow58::batch_to_58(b, &schema58).unwrap();
            writer.write(&b58).await.unwrap();
        }
        let mut built = writer.close().await.unwrap();
        assert_eq!(built.len(), 1);
        let file = built.remove(0).partition_spec_id(0).build().unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let read: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        let read = concat_batches(&read[0].schema(), &read).unwrap();
        let all = concat_batches(&arrow, &batches).unwrap();
        assert_eq!(all.num_rows(), read.num_rows());
        for (x, y) in all.columns().iter().zip(read.columns()) {
            assert_eq!(x.to_data(), y.to_data());
        }
        (file, all)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_read_back_with_the_spec_metrics() {
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(10_000))
            .build();
        let (file, all) = round_trip(props, None, 5, 7_000).await;
        let rows = all.num_rows() as u64;
        assert_eq!(file.record_count(), rows);
        // 35,000 rows in row groups of at most 10,000.
        assert_eq!(file.split_offsets().map(|s| s.len()), Some(4));
        assert_eq!(file.value_counts()[&1], rows);
        assert_eq!(file.null_value_counts()[&1], 0);
        assert_eq!(
            file.null_value_counts()[&2],
            all.column(1).null_count() as u64
        );

        // NaN counts, top level and nested, against a count over the rows.
        let ids: Vec<i64> = (0..rows as i64).collect();
        let score_nans = ids.iter().filter(|i| *i % 7 == 1).count() as u64;
        let x_nans = ids.iter().filter(|i| *i % 11 == 1 && *i % 13 != 0).count() as u64;
        let tag_nans = ids.iter().filter(|i| *i % 4 == 0 && *i % 3 > 0).count() as u64;
        assert_eq!(file.nan_value_counts()[&3], score_nans);
        assert_eq!(file.nan_value_counts()[&5], x_nans);
        assert_eq!(file.nan_value_counts()[&7], tag_nans);

        // Bounds: exact, NaN left out, per field id.
        assert_eq!(file.lower_bounds()[&1], Datum::long(0));
        assert_eq!(file.upper_bounds()[&1], Datum::long(rows as i64 - 1));
        assert_eq!(file.lower_bounds()[&2], Datum::string("name-000001"));
        assert_eq!(file.upper_bounds()[&2], Datum::string("name-000999"));
        let scores: Vec<f64> = ids
            .iter()
            .filter(|i| *i % 7 > 1)
            .map(|i| *i as f64 / 3.0)
            .collect();
        let max = scores.iter().cloned().fold(f64::MIN, f64::max);
        assert_eq!(file.lower_bounds()[&3], Datum::double(2.0 / 3.0));
        assert_eq!(file.upper_bounds()[&3], Datum::double(max));
        assert_eq!(file.upper_bounds()[&5], Datum::float(-2.0));
        let tags: Vec<f64> = ids
            .iter()
            .flat_map(|i| (0..i % 3).map(move |k| (i, k)))
            .filter(|(i, k)| !(*k == 0 && *i % 4 == 0))
            .map(|(i, k)| (i * 10 + k) as f64)
            .collect();
        let tag_max = tags.iter().cloned().fold(f64::MIN, f64::max);
        let tag_min = tags.iter().cloned().fold(f64::MAX, f64::min);
        assert_eq!(file.lower_bounds()[&7], Datum::double(tag_min));
        assert_eq!(file.upper_bounds()[&7], Datum::double(tag_max));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn missing_or_truncated_statistics_give_safe_bounds() {
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(3_000))
            .set_statistics_truncate_length(Some(6))
            .set_column_statistics_enabled("score".into(), EnabledStatistics::None)
            .build();
        let (file, _) = round_trip(props, None, 1, 10_000).await;
        // No statistics for `score`: no bounds and no null count, rather than wrong ones.
        assert!(!file.lower_bounds().contains_key(&3));
        assert!(!file.upper_bounds().contains_key(&3));
        assert!(!file.null_value_counts().contains_key(&3));
        // Truncated strings stay valid bounds: a prefix below, a successor above.
        let lower = &file.lower_bounds()[&2];
        let upper = &file.upper_bounds()[&2];
        assert!(*lower <= Datum::string("name-000001"), "{lower}");
        assert!(*upper >= Datum::string("name-000999"), "{upper}");
        assert_ne!(*upper, Datum::string("name-000999"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_leaves_the_pool_to_the_operators_beside_it() {
        use datafusion::execution::memory_pool::FairSpillPool;
        let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(8 << 20));
        // An operator that cannot spill holds 4 MiB and needs 1 MiB more now and then.
        let other = MemoryConsumer::new("unspillable").register(&pool);
        other.try_grow(4 << 20).unwrap();
        let schema = schema();
        let arrow = Arc::new(crate::arrow58::iceberg_to_arrow(&schema).unwrap());
        let props = WriterProperties::builder()
            .set_compression(parquet::basic::Compression::UNCOMPRESSED)
            .set_dictionary_enabled(false)
            .build();
        let builder = ParquetFileWriterBuilder::new(
            props,
            schema,
            Arc::clone(&arrow),
            Some(Arc::clone(&pool)),
            1 << 30,
        );
        let dir = tempfile::tempdir().unwrap();
        let io = FileIO::new_with_fs();
        let output = io
            .new_output(dir.path().join("f.parquet").to_str().unwrap())
            .unwrap();
        let mut writer = builder.build(output).await.unwrap();
        let schema58 = Arc::new(crate::arrow58::schema_to_58(&arrow).unwrap());
        for i in 0..40 {
            let b = batch(&arrow, i * 8_192, 8_192);
            writer
                .write(&crate::arrow58::batch_to_58(&b, &schema58).unwrap())
                .await
                .unwrap();
            // At most a quarter of the pool (plus one batch in flight) is the writer's.
            assert!(
                pool.reserved() <= (4 << 20) + (2 << 20) + (512 << 10),
                "{}",
                pool.reserved()
            );
            other.try_grow(1 << 20).unwrap();
            other.shrink(1 << 20);
        }
        let files = writer.close().await.unwrap();
        assert_eq!(files.len(), 1);
        drop(other);
        assert_eq!(pool.reserved(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_pressure_closes_row_groups_early() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(256 << 10));
        let props = WriterProperties::builder()
            .set_compression(parquet::basic::Compression::UNCOMPRESSED)
            .set_dictionary_enabled(false)
            .build();
        let (file, _) = round_trip(props, Some(Arc::clone(&pool)), 25, 8_192).await;
        // One row group would fit the row limit; the pool made several.
        let groups = file.split_offsets().map(|s| s.len()).unwrap_or(0);
        assert!(groups > 1, "{groups} row groups");
        assert_eq!(pool.reserved(), 0);
    }

    /// Writes `batches` through a writer of `schema` with `props` and returns the file's
    /// description, its footer with page indexes, and its rows.
    async fn write_file(
        schema: Arc<IcebergSchema>,
        props: WriterProperties,
        batches: &[RecordBatch],
    ) -> (iceberg::spec::DataFile, Arc<ParquetMetaData>, RecordBatch) {
        let arrow = Arc::new(crate::arrow58::iceberg_to_arrow(&schema).unwrap());
        let builder = ParquetFileWriterBuilder::new(props, schema, arrow, None, 1 << 30);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let io = FileIO::new_with_fs();
        let mut writer = builder
            .build(io.new_output(path.to_str().unwrap()).unwrap())
            .await
            .unwrap();
        for b in batches {
            writer.write_batch(b.clone()).await.unwrap();
        }
        let mut built = writer.finish().await.unwrap();
        let file = built.remove(0).partition_spec_id(0).build().unwrap();
        let options = parquet::arrow::arrow_reader::ArrowReaderOptions::new()
            .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required);
        let reader = ParquetRecordBatchReaderBuilder::try_new_with_options(
            std::fs::File::open(&path).unwrap(),
            options,
        )
        .unwrap();
        let footer = Arc::clone(reader.metadata());
        let read: Vec<RecordBatch> = reader.build().unwrap().map(|b| b.unwrap()).collect();
        let read = concat_batches(&read[0].schema(), &read).unwrap();
        (file, footer, read)
    }

    fn strings_schema() -> Arc<IcebergSchema> {
        let string = || Type::Primitive(PrimitiveType::String);
        Arc::new(
            IcebergSchema::builder()
                .with_fields([
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "name", string()).into(),
                    NestedField::required(3, "code", string()).into(),
                ])
                .build()
                .unwrap(),
        )
    }

    /// Batches of `rows` rows: `name` and `code` as dictionaries, each dictionary shared by
    /// `per_dictionary` batches (as a parquet reader hands out a column chunk), with unused
    /// and repeated entries, null keys and a null entry; `plain` gives the same rows with
    /// plain strings.
    fn dictionary_batches(
        count: usize,
        rows: usize,
        per_dictionary: usize,
        distinct: usize,
    ) -> (Vec<RecordBatch>, Vec<RecordBatch>) {
        use arrow::array::{Int32Array, StringArray};
        let schema = strings_schema();
        let plain_arrow = Arc::new(crate::arrow58::iceberg_to_arrow(&schema).unwrap());
        let dict_type = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let dict_arrow = Arc::new(arrow::datatypes::Schema::new(
            plain_arrow
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Utf8 => f.as_ref().clone().with_data_type(dict_type.clone()),
                    _ => f.as_ref().clone(),
                })
                .collect::<Vec<_>>(),
        ));
        let mut dicts = Vec::new();
        let mut plains = Vec::new();
        let mut values: Option<(ArrayRef, ArrayRef)> = None;
        for b in 0..count {
            if b % per_dictionary == 0 {
                // Each chunk's dictionary: distinct values in a shuffled order, some of them
                // shared with the previous dictionary; entry 0 of `name`'s is null.
                let base = b / per_dictionary * distinct / 2;
                let names = StringArray::from_iter((0..distinct).map(|i| {
                    (i != 0).then(|| format!("name-{:05}", (base + i * 7919 % distinct) * 3))
                }));
                let codes = StringArray::from_iter_values(
                    (0..distinct).map(|i| format!("c{}", (base + distinct - i) % 97)),
                );
                values = Some((Arc::new(names), Arc::new(codes)));
            }
            let (names, codes) = values.clone().unwrap();
            let start = (b * rows) as i64;
            let ids = Int64Array::from_iter_values(start..start + rows as i64);
            let name_keys = Int32Array::from_iter((0..rows).map(|r| {
                let k = (r * 31 + b * 7) % distinct;
                (r % 11 != 3).then_some(k as i32)
            }));
            let code_keys =
                Int32Array::from_iter_values((0..rows).map(|r| ((r * 13 + b) % distinct) as i32));
            let name: ArrayRef =
                Arc::new(DictionaryArray::<Int32Type>::try_new(name_keys, names).unwrap());
            let code: ArrayRef =
                Arc::new(DictionaryArray::<Int32Type>::try_new(code_keys, codes).unwrap());
            let ids: ArrayRef = Arc::new(ids);
            let dict = RecordBatch::try_new(
                Arc::clone(&dict_arrow),
                vec![Arc::clone(&ids), Arc::clone(&name), Arc::clone(&code)],
            )
            .unwrap();
            let plain = RecordBatch::try_new(
                Arc::clone(&plain_arrow),
                vec![
                    ids,
                    arrow::compute::cast(&name, &DataType::Utf8).unwrap(),
                    arrow::compute::cast(&code, &DataType::Utf8).unwrap(),
                ],
            )
            .unwrap();
            dicts.push(dict);
            plains.push(plain);
        }
        (dicts, plains)
    }

    /// Every page of every chunk of `column` in `footer`: its column index bounds hold the
    /// lowest and highest value of its rows in `values` (exactly, or as valid truncations), and
    /// its null count theirs.
    fn check_page_bounds(footer: &ParquetMetaData, column: usize, values: &StringArray) {
        use parquet::file::page_index::column_index::ColumnIndexMetaData;
        let (Some(indexes), Some(offsets)) = (footer.column_index(), footer.offset_index()) else {
            panic!("no page index");
        };
        let mut first_row = 0usize;
        for (g, group) in footer.row_groups().iter().enumerate() {
            let ColumnIndexMetaData::BYTE_ARRAY(index) = &indexes[g][column] else {
                panic!("no byte array column index: {:?}", indexes[g][column]);
            };
            let pages = &offsets[g][column].page_locations;
            assert!(!pages.is_empty());
            for (p, page) in pages.iter().enumerate() {
                let start = first_row + page.first_row_index as usize;
                let end = match pages.get(p + 1) {
                    Some(next) => first_row + next.first_row_index as usize,
                    None => first_row + group.num_rows() as usize,
                };
                let rows = values.slice(start, end - start);
                let present: Vec<&str> = rows.iter().flatten().collect();
                assert_eq!(
                    index.null_count(p),
                    Some((rows.len() - present.len()) as i64)
                );
                match (present.iter().min(), present.iter().max()) {
                    (Some(min), Some(max)) => {
                        let low = index.min_value(p).unwrap();
                        let high = index.max_value(p).unwrap();
                        assert!(low <= min.as_bytes() && min.as_bytes().starts_with(low));
                        assert!(high >= max.as_bytes(), "page {p}");
                        if max.len() <= 64 {
                            assert_eq!(high, max.as_bytes());
                            assert_eq!(low, min.as_bytes());
                        }
                    }
                    _ => assert!(index.is_null_page(p)),
                }
            }
            first_row += group.num_rows() as usize;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dictionary_columns_write_what_the_parquet_writer_would() {
        use parquet::basic::Compression;
        use parquet::file::properties::WriterVersion;
        let (dicts, plains) = dictionary_batches(12, 3_000, 4, 600);
        let all = concat_batches(&plains[0].schema(), &plains).unwrap();
        for (compression, dictionary_limit, page_rows) in [
            (Compression::ZSTD(Default::default()), 1 << 20, 2_000),
            (Compression::SNAPPY, 1 << 20, 20_000),
            (Compression::UNCOMPRESSED, 1 << 20, 20_000),
            // The dictionary outgrows its page: the rest of each chunk goes plain.
            (Compression::ZSTD(Default::default()), 3_000, 2_000),
        ] {
            let props = || {
                WriterProperties::builder()
                    .set_compression(compression)
                    .set_max_row_group_row_count(Some(20_000))
                    .set_data_page_row_count_limit(page_rows)
                    .set_dictionary_page_size_limit(dictionary_limit)
                    .set_statistics_truncate_length(Some(8))
                    .set_writer_version(WriterVersion::PARQUET_1_0)
                    .build()
            };
            let before = dictionary_chunk::chunks_closed("code");
            let (ours, our_footer, our_rows) = write_file(strings_schema(), props(), &dicts).await;
            // The column's chunk in each of two row groups.
            assert!(dictionary_chunk::chunks_closed("code") - before >= 2);
            let (theirs, their_footer, their_rows) =
                write_file(strings_schema(), props(), &plains).await;

            // The same rows, the same metrics.
            for (x, y) in all.columns().iter().zip(our_rows.columns()) {
                assert_eq!(x.to_data(), y.to_data());
            }
            assert_eq!(our_rows.num_rows(), their_rows.num_rows());
            assert_eq!(ours.value_counts(), theirs.value_counts());
            assert_eq!(ours.null_value_counts(), theirs.null_value_counts());
            assert_eq!(ours.lower_bounds(), theirs.lower_bounds());
            assert_eq!(ours.upper_bounds(), theirs.upper_bounds());

            // The same chunk statistics (truncated alike) and encodings as the parquet writer's.
            assert_eq!(our_footer.num_row_groups(), their_footer.num_row_groups());
            for (a, b) in our_footer
                .row_groups()
                .iter()
                .zip(their_footer.row_groups())
            {
                assert_eq!(a.num_rows(), b.num_rows());
                for c in 1..3 {
                    let (a, b) = (a.column(c), b.column(c));
                    assert_eq!(a.statistics(), b.statistics(), "column {c}");
                    assert_eq!(a.num_values(), b.num_values());
                    assert_eq!(a.compression(), b.compression());
                    assert!(a.dictionary_page_offset().is_some());
                    assert_eq!(
                        a.unencoded_byte_array_data_bytes(),
                        b.unencoded_byte_array_data_bytes()
                    );
                    let plain = |m: &ColumnChunkMetaData| {
                        let data_pages = m.page_encoding_stats_mask().unwrap();
                        assert!(data_pages.is_set(parquet::basic::Encoding::RLE_DICTIONARY));
                        data_pages.is_set(parquet::basic::Encoding::PLAIN)
                    };
                    // `name` has 600 values of 15 bytes a chunk, `code` 97 short ones.
                    let overflows = c == 1 && dictionary_limit < (1 << 20);
                    assert_eq!(plain(a), overflows, "column {c}");
                    assert_eq!(plain(a), plain(b), "column {c}");
                }
            }
            // Page bounds against the rows of each page.
            for (c, column) in [(1, all.column(1)), (2, all.column(2))] {
                check_page_bounds(&our_footer, c, column.as_string::<i32>());
            }
        }

        // Two inputs read side by side take turns, each batch crossing the Arrow C data
        // interface (new arrays over the same buffers): the same rows and bounds.
        let order = [0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10, 11];
        let schema58 = Arc::new(crate::arrow58::schema_to_58(&dicts[0].schema()).unwrap());
        let turns: Vec<RecordBatch> = order
            .iter()
            .map(|i| {
                let b58 = crate::arrow58::batch_to_58(&dicts[*i], &schema58).unwrap();
                batch_from_58(&b58, &dicts[0].schema()).unwrap()
            })
            .collect();
        let plain_turns: Vec<RecordBatch> = order.iter().map(|i| plains[*i].clone()).collect();
        let all = concat_batches(&plains[0].schema(), &plain_turns).unwrap();
        let props = || WriterProperties::builder().build();
        let (ours, footer, rows) = write_file(strings_schema(), props(), &turns).await;
        let (theirs, their_footer, _) = write_file(strings_schema(), props(), &plain_turns).await;
        for (x, y) in all.columns().iter().zip(rows.columns()) {
            assert_eq!(x.to_data(), y.to_data());
        }
        assert_eq!(ours.lower_bounds(), theirs.lower_bounds());
        assert_eq!(ours.upper_bounds(), theirs.upper_bounds());
        for (a, b) in footer.row_groups().iter().zip(their_footer.row_groups()) {
            assert_eq!(a.column(1).statistics(), b.column(1).statistics());
        }
        check_page_bounds(&footer, 1, all.column(1).as_string::<i32>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_begun_plain_stays_with_the_parquet_writer() {
        // Plain strings first, then dictionaries, then plain again, in one row group: each
        // chunk keeps the encoder it began with, and the rows come back as written.
        let (dicts, plains) = dictionary_batches(6, 1_000, 2, 300);
        let mixed: Vec<RecordBatch> = (0..6)
            .map(|i| match i % 3 {
                1 => dicts[i].clone(),
                _ => plains[i].clone(),
            })
            .collect();
        let all = concat_batches(&plains[0].schema(), &plains).unwrap();
        let (_, footer, rows) = write_file(
            strings_schema(),
            WriterProperties::builder().build(),
            &mixed,
        )
        .await;
        for (x, y) in all.columns().iter().zip(rows.columns()) {
            assert_eq!(x.to_data(), y.to_data());
        }
        check_page_bounds(&footer, 1, all.column(1).as_string::<i32>());
        // Dictionaries first, then plain strings: the dictionary encoder takes the plain ones.
        let mixed: Vec<RecordBatch> = (0..6)
            .map(|i| match i % 2 {
                0 => dicts[i].clone(),
                _ => plains[i].clone(),
            })
            .collect();
        let (_, footer, rows) = write_file(
            strings_schema(),
            WriterProperties::builder().build(),
            &mixed,
        )
        .await;
        for (x, y) in all.columns().iter().zip(rows.columns()) {
            assert_eq!(x.to_data(), y.to_data());
        }
        check_page_bounds(&footer, 2, all.column(2).as_string::<i32>());
    }
}
