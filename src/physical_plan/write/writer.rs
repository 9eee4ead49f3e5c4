//! The work of one writer partition: align batches to the table schema, split them by partition
//! value, write rolling parquet files with full column metrics, and describe them as manifest
//! entries (JSON) for the commit node.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::physical_plan::metrics::Count;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use iceberg::arrow::{schema_to_arrow_schema, RecordBatchPartitionSplitter};
use iceberg::spec::{
    deserialize_data_file_from_json, serialize_data_file_to_json, DataFile, DataFileBuilder,
    DataFileFormat, Literal, PartitionKey, PrimitiveLiteral, PrimitiveType, Struct, TableMetadata,
};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, LocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, Encoding, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::locations::FileLocations;
use super::parquet_file::ParquetFileWriterBuilder;
use crate::arrow58::{batch_to_58, schema_from_58, RecordBatch58, SchemaRef58};
use crate::commit::NewFile;
use crate::commit::WrittenFiles;
use crate::error::IcebergResultExt;

/// Schema of the writer's output: one row per data file written.
pub(crate) fn data_files_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("spec_id", DataType::Int32, false),
        Field::new("data_file", DataType::Utf8, false),
    ]))
}

/// The `spec_id` of a tally row: a writer's report of the rows a [`ChangeRowsExec`] below it
/// read and selected, which travels with the data file rows (a spec id is never negative).
///
/// [`ChangeRowsExec`]: crate::physical_plan::change_rows::ChangeRowsExec
const TALLY_SPEC_ID: i32 = -1;

/// What a tally row's `data_file` holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Tally {
    rows_read: u64,
    rows_selected: u64,
}

/// A one-row batch of the writer's output schema holding the tally (`read`, `selected`).
pub(crate) fn tally_batch((read, selected): (u64, u64)) -> Result<RecordBatch> {
    let json = serde_json::to_string(&Tally {
        rows_read: read,
        rows_selected: selected,
    })
    .map_err(|e| DataFusionError::Internal(format!("encoding a tally: {e}")))?;
    Ok(RecordBatch::try_new(
        data_files_schema(),
        vec![
            Arc::new(Int32Array::from(vec![TALLY_SPEC_ID])),
            Arc::new(StringArray::from(vec![json])),
        ],
    )?)
}

/// The sum of the tally rows of a writer's output batch: (rows read, rows selected).
pub(crate) fn decode_tally(batch: &RecordBatch) -> Result<(u64, u64)> {
    let (spec_ids, jsons) = data_file_columns(batch)?;
    let (mut read, mut selected) = (0u64, 0u64);
    for i in (0..batch.num_rows()).filter(|&i| spec_ids.value(i) == TALLY_SPEC_ID) {
        let t: Tally = serde_json::from_str(jsons.value(i))
            .map_err(|e| DataFusionError::Internal(format!("undecodable tally row: {e}")))?;
        read += t.rows_read;
        selected += t.rows_selected;
    }
    Ok((read, selected))
}

pub(crate) fn data_file_columns(batch: &RecordBatch) -> Result<(&Int32Array, &StringArray)> {
    let bad = || DataFusionError::Internal("unexpected data file batch layout".into());
    if batch.num_columns() != 2 {
        return Err(bad());
    }
    let spec_ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int32Array>()
        .ok_or_else(bad)?;
    let jsons = batch
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(bad)?;
    Ok((spec_ids, jsons))
}

/// Parses the writer's output rows back into data files (tally rows are skipped).
pub(crate) fn decode_data_files(
    batch: &RecordBatch,
    metadata: &TableMetadata,
) -> Result<Vec<NewFile>> {
    let (spec_ids, jsons) = data_file_columns(batch)?;
    // Rows with a negative spec id are reports (tallies), not files.
    (0..batch.num_rows())
        .filter(|&i| spec_ids.value(i) >= 0)
        .map(|i| new_file_of_json(spec_ids.value(i), jsons.value(i), metadata))
        .collect()
}

/// Runs `plan` (writers; its partitions coalesced into one stream) and returns the data files
/// its output names, each recorded in `written` as it arrives (files a worker wrote are then
/// removed here if the statement fails). `report` sees every output batch (its tally rows).
pub(crate) async fn run_writers(
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    context: &Arc<datafusion::execution::TaskContext>,
    metadata: &TableMetadata,
    written: &WrittenFiles,
    mut report: impl FnMut(&RecordBatch) -> Result<()>,
) -> Result<Vec<NewFile>> {
    let plan =
        Arc::new(datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec::new(plan));
    let mut stream = datafusion::physical_plan::execute_stream(plan, Arc::clone(context))?;
    let mut files = vec![];
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let new = decode_data_files(&batch, metadata)?;
        for f in &new {
            written.record(f.file.file_path().to_string());
        }
        files.extend(new);
        report(&batch)?;
    }
    Ok(files)
}

/// The partition type of the spec `spec_id` of `metadata`, over its current schema.
pub(crate) fn partition_type_of(
    metadata: &TableMetadata,
    spec_id: i32,
) -> Result<iceberg::spec::StructType> {
    let spec = metadata
        .partition_spec_by_id(spec_id)
        .ok_or_else(|| DataFusionError::Internal(format!("unknown partition spec {spec_id}")))?;
    spec.partition_type(metadata.current_schema()).df()
}

/// `file`'s manifest entry as the JSON a writer's output row holds.
pub(crate) fn new_file_json(file: &NewFile, metadata: &TableMetadata) -> Result<String> {
    let partition_type = partition_type_of(metadata, file.spec_id)?;
    file_text(
        file.file.clone(),
        &partition_type,
        metadata.format_version(),
    )
}

/// A written file as its writer's output row holds it: the iceberg crate's JSON of its
/// manifest entry, and the partition fields that hold NaN or an infinity. That JSON writes
/// such a value (of an identity-partitioned float) as null, as JSON has no NaN and no
/// infinities; the fields are named beside it so that they decode as they were, not as null
/// (a file of NaN rows in the null partition would be dropped by `DELETE ... WHERE f IS
/// NULL`).
#[derive(serde::Serialize, serde::Deserialize)]
struct FileText<'a> {
    non_finite: Vec<(usize, NonFinite)>,
    #[serde(borrow)]
    file: std::borrow::Cow<'a, str>,
}

/// A float that JSON cannot hold.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NonFinite {
    NaN,
    Infinity,
    NegativeInfinity,
}

impl NonFinite {
    fn of(value: f64) -> Option<Self> {
        match value {
            v if v.is_nan() => Some(Self::NaN),
            f64::INFINITY => Some(Self::Infinity),
            f64::NEG_INFINITY => Some(Self::NegativeInfinity),
            _ => None,
        }
    }

    fn f64(self) -> f64 {
        match self {
            Self::NaN => f64::NAN,
            Self::Infinity => f64::INFINITY,
            Self::NegativeInfinity => f64::NEG_INFINITY,
        }
    }
}

fn file_text(
    file: DataFile,
    partition_type: &iceberg::spec::StructType,
    version: iceberg::spec::FormatVersion,
) -> Result<String> {
    let non_finite = non_finite_fields(file.partition());
    let json = serialize_data_file_to_json(file, partition_type, version).df()?;
    serde_json::to_string(&FileText {
        non_finite,
        file: json.into(),
    })
    .map_err(|e| DataFusionError::Internal(format!("encoding a written file: {e}")))
}

/// The file [`new_file_json`] wrote, under the spec `spec_id`.
pub(crate) fn new_file_of_json(
    spec_id: i32,
    json: &str,
    metadata: &TableMetadata,
) -> Result<NewFile> {
    let partition_type = partition_type_of(metadata, spec_id)?;
    let file = file_of_text(json, spec_id, &partition_type, metadata.current_schema())?;
    Ok(NewFile { spec_id, file })
}

/// The file [`file_text`] wrote.
fn file_of_text(
    text: &str,
    spec_id: i32,
    partition_type: &iceberg::spec::StructType,
    schema: &iceberg::spec::Schema,
) -> Result<DataFile> {
    let text: FileText = serde_json::from_str(text)
        .map_err(|e| DataFusionError::Internal(format!("a written file's text: {e}")))?;
    let file = deserialize_data_file_from_json(&text.file, spec_id, partition_type, schema).df()?;
    if text.non_finite.is_empty() {
        return Ok(file);
    }
    let partition = with_non_finite(file.partition(), &text.non_finite, partition_type)?;
    with_partition(&file, spec_id, partition)
}

/// The fields of a partition tuple that hold NaN or an infinity (JSON writes them as null).
pub(crate) fn non_finite_fields(partition: &Struct) -> Vec<(usize, NonFinite)> {
    partition
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let v = match v {
                Some(Literal::Primitive(PrimitiveLiteral::Double(v))) => v.0,
                Some(Literal::Primitive(PrimitiveLiteral::Float(v))) => v.0 as f64,
                _ => return None,
            };
            NonFinite::of(v).map(|n| (i, n))
        })
        .collect()
}

/// `partition` (decoded from JSON, of `partition_type`) with the non-finite values `fields`
/// back in their fields (null there, as JSON left them).
pub(crate) fn with_non_finite(
    partition: &Struct,
    fields: &[(usize, NonFinite)],
    partition_type: &iceberg::spec::StructType,
) -> Result<Struct> {
    let bad =
        |what: String| DataFusionError::Internal(format!("a non-finite partition value: {what}"));
    let mut values: Vec<Option<Literal>> = partition.iter().map(|v| v.cloned()).collect();
    for &(i, value) in fields {
        let field = partition_type
            .fields()
            .get(i)
            .filter(|_| matches!(values.get(i), Some(None)))
            .ok_or_else(|| bad(format!("field {i} is out of range or not null")))?;
        values[i] = Some(match field.field_type.as_primitive_type() {
            Some(PrimitiveType::Float) => Literal::float(value.f64() as f32),
            Some(PrimitiveType::Double) => Literal::double(value.f64()),
            _ => {
                return Err(bad(format!(
                    "the {} field {}",
                    field.field_type, field.name
                )))
            }
        });
    }
    Ok(Struct::from_iter(values))
}

/// `file` with another partition tuple (every other field as it is).
fn with_partition(file: &DataFile, spec_id: i32, partition: Struct) -> Result<DataFile> {
    let mut b = DataFileBuilder::default();
    b.content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(partition)
        .partition_spec_id(spec_id)
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .column_sizes(file.column_sizes().clone())
        .value_counts(file.value_counts().clone())
        .null_value_counts(file.null_value_counts().clone())
        .nan_value_counts(file.nan_value_counts().clone())
        .lower_bounds(file.lower_bounds().clone())
        .upper_bounds(file.upper_bounds().clone())
        .key_metadata(file.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(file.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(file.equality_ids())
        .first_row_id(file.first_row_id())
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes());
    if let Some(id) = file.sort_order_id() {
        b.sort_order_id(id);
    }
    b.build()
        .map_err(|e| DataFusionError::Internal(format!("rebuilding a data file: {e}")))
}

/// Remembers every location handed out, so files of a failed write can be removed.
#[derive(Clone)]
struct RecordingLocations {
    inner: FileLocations,
    written: WrittenFiles,
}

impl LocationGenerator for RecordingLocations {
    fn generate_location(&self, key: Option<&PartitionKey>, file_name: &str) -> String {
        let location = self.inner.generate_location(key, file_name);
        self.written.record(location.clone());
        location
    }
}

fn bad_level(e: parquet::errors::ParquetError) -> DataFusionError {
    DataFusionError::Configuration(format!("write.parquet.compression-level: {e}"))
}

/// Parquet writer properties from the table's `write.parquet.*` properties.
pub(super) fn writer_properties(metadata: &TableMetadata) -> Result<WriterProperties> {
    let props = metadata.properties();
    let codec = props
        .get("write.parquet.compression-codec")
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_else(|| "zstd".to_string());
    let level: Option<i32> = props
        .get("write.parquet.compression-level")
        .map(|l| {
            l.parse::<i32>().map_err(|_| {
                DataFusionError::Configuration(format!(
                    "write.parquet.compression-level must be an integer, got '{l}'"
                ))
            })
        })
        .transpose()?;
    let compression = match codec.as_str() {
        "zstd" => Compression::ZSTD(ZstdLevel::try_new(level.unwrap_or(3)).map_err(bad_level)?),
        "gzip" => {
            Compression::GZIP(GzipLevel::try_new(level.unwrap_or(6) as u32).map_err(bad_level)?)
        }
        "snappy" => Compression::SNAPPY,
        "lz4" => Compression::LZ4_RAW,
        "uncompressed" | "none" => Compression::UNCOMPRESSED,
        other => {
            return Err(DataFusionError::Configuration(format!(
                "unsupported write.parquet.compression-codec '{other}'"
            )))
        }
    };
    let row_group_rows = positive_property(metadata, "write.parquet.row-group-limit")?;
    let mut builder = match row_group_rows {
        Some(n) => WriterProperties::builder().set_max_row_group_row_count(Some(n)),
        None => WriterProperties::builder(),
    };
    // Page and dictionary sizes when the table sets them (the parquet writer's own defaults
    // otherwise: 1 MiB pages and dictionaries, 20,000 rows per page).
    if let Some(bytes) = positive_property(metadata, "write.parquet.page-size-bytes")? {
        builder = builder.set_data_page_size_limit(bytes);
    }
    if let Some(rows) = positive_property(metadata, "write.parquet.page-row-limit")? {
        builder = builder.set_data_page_row_count_limit(rows);
    }
    if let Some(bytes) = positive_property(metadata, "write.parquet.dict-size-bytes")? {
        builder = builder.set_dictionary_page_size_limit(bytes);
    }
    Ok(builder
        .set_compression(compression)
        .set_created_by(concat!("iceberg-exec version ", env!("CARGO_PKG_VERSION")).to_string())
        .build())
}

/// Default of `write.parquet.row-group-size-bytes` (the Iceberg spec's).
const DEFAULT_ROW_GROUP_BYTES: usize = 128 << 20;

/// The table's `write.parquet.row-group-size-bytes`: encoded bytes after which a row group is
/// closed.
fn row_group_bytes(metadata: &TableMetadata) -> Result<usize> {
    Ok(
        positive_property(metadata, "write.parquet.row-group-size-bytes")?
            .unwrap_or(DEFAULT_ROW_GROUP_BYTES),
    )
}

/// A table property that must be a positive integer when set.
fn positive_property(metadata: &TableMetadata, name: &str) -> Result<Option<usize>> {
    metadata
        .properties()
        .get(name)
        .map(|v| {
            v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                DataFusionError::Configuration(format!(
                    "{name} must be a positive integer, got '{v}'"
                ))
            })
        })
        .transpose()
}

/// The parquet writers of `schema` for a table: its `write.parquet.*` properties, encoders'
/// buffers reserved from `pool` when given, the top-level columns of `plain` (field ids) without
/// dictionary encoding.
pub(super) fn parquet_writers(
    metadata: &TableMetadata,
    schema: Arc<iceberg::spec::Schema>,
    pool: Option<Arc<dyn MemoryPool>>,
    plain: &[i32],
) -> Result<ParquetFileWriterBuilder> {
    let props = with_plain_columns(writer_properties(metadata)?, &schema, plain);
    writers_of(metadata, schema, pool, props)
}

/// `props` with dictionary encoding off for the top-level primitive columns `plain` (field ids)
/// of `schema`.
pub(super) fn with_plain_columns(
    props: WriterProperties,
    schema: &iceberg::spec::Schema,
    plain: &[i32],
) -> WriterProperties {
    let plain: Vec<ColumnPath> = schema
        .as_struct()
        .fields()
        .iter()
        .filter(|f| plain.contains(&f.id) && f.field_type.is_primitive())
        .map(|f| ColumnPath::new(vec![f.name.clone()]))
        .collect();
    if plain.is_empty() {
        return props;
    }
    let mut builder = props.into_builder();
    for column in plain {
        builder = builder.set_column_dictionary_enabled(column, false);
    }
    builder.build()
}

/// The parquet writers of position delete files (`schema`: `file_path`, `pos`) for a table: its
/// `write.parquet.*` properties, with `pos` delta-encoded instead of dictionary-encoded. Positions
/// are sorted and distinct within a data file, so their deltas pack into a few bits each, where a
/// dictionary holds every value once more (often until it overflows) and reading it back
/// decompresses eight bytes a position.
pub(super) fn position_delete_writers(
    metadata: &TableMetadata,
    schema: Arc<iceberg::spec::Schema>,
) -> Result<ParquetFileWriterBuilder> {
    let pos = ColumnPath::new(vec!["pos".to_string()]);
    let props = writer_properties(metadata)?
        .into_builder()
        .set_column_dictionary_enabled(pos.clone(), false)
        .set_column_encoding(pos, Encoding::DELTA_BINARY_PACKED)
        .build();
    writers_of(metadata, schema, None, props)
}

/// Writers of `schema` with `props`, row groups closed at the table's size.
fn writers_of(
    metadata: &TableMetadata,
    schema: Arc<iceberg::spec::Schema>,
    pool: Option<Arc<dyn MemoryPool>>,
    props: WriterProperties,
) -> Result<ParquetFileWriterBuilder> {
    let arrow = Arc::new(crate::arrow58::iceberg_to_arrow(&schema)?);
    Ok(ParquetFileWriterBuilder::new(
        props,
        schema,
        arrow,
        pool,
        row_group_bytes(metadata)?,
    ))
}

/// A table's row layout in both Arrow versions: DataFusion's batches are cast onto it on
/// Arrow 59, then handed to the iceberg crate's writers on Arrow 58 (without copies).
pub(super) struct WriteSchema {
    arrow: SchemaRef,
    arrow58: SchemaRef58,
    /// The layout with the dictionary columns of the last batch that had some, both versions.
    dictionaries: std::sync::Mutex<Option<(SchemaRef, SchemaRef58)>>,
}

impl WriteSchema {
    /// The layout of `schema`, with field ids, as the iceberg crate maps it.
    pub(super) fn of(schema: &iceberg::spec::Schema) -> Result<Self> {
        let arrow58 = Arc::new(schema_to_arrow_schema(schema).df()?);
        let arrow = Arc::new(schema_from_58(&arrow58)?);
        Ok(Self {
            arrow,
            arrow58,
            dictionaries: std::sync::Mutex::new(None),
        })
    }

    /// `batch` cast onto the layout (see [`align_batch`]), as the iceberg writers take it.
    pub(super) fn align(&self, batch: &RecordBatch) -> Result<RecordBatch58> {
        let aligned = align_batch(batch, &self.arrow)?;
        if Arc::ptr_eq(&aligned.schema(), &self.arrow) {
            return batch_to_58(&aligned, &self.arrow58);
        }
        // Dictionary columns kept: the same layout with their types, converted once.
        let mut cached = self
            .dictionaries
            .lock()
            .map_err(|_| DataFusionError::Internal("write schema cache poisoned".into()))?;
        let (schema, schema58) = match cached.as_ref() {
            Some((schema, schema58)) if **schema == *aligned.schema() => {
                (Arc::clone(schema), Arc::clone(schema58))
            }
            _ => {
                let schema = aligned.schema();
                let schema58 = Arc::new(crate::arrow58::schema_to_58(&schema)?);
                *cached = Some((Arc::clone(&schema), Arc::clone(&schema58)));
                (schema, schema58)
            }
        };
        drop(cached);
        let aligned = aligned.with_schema(schema)?;
        batch_to_58(&aligned, &schema58)
    }
}

/// Casts `batch` onto the table's Arrow schema (with field ids), checking required columns. A
/// dictionary column of the column's own type stays a dictionary (the parquet writer encodes it
/// from its dictionary); the batch's schema then says so for that column.
fn align_batch(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    if batch.num_columns() != target.fields().len() {
        return Err(DataFusionError::Plan(format!(
            "INSERT gives {} columns, the table has {}",
            batch.num_columns(),
            target.fields().len()
        )));
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    // A value that does not fit the column's type is an error, never a silent NULL.
    let options = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut dictionary_fields: Vec<FieldRef> = vec![];
    for (i, (field, column)) in target.fields().iter().zip(batch.columns()).enumerate() {
        let kept = match column.data_type() {
            DataType::Dictionary(_, value) => {
                value.as_ref() == field.data_type()
                    && matches!(field.data_type(), DataType::Utf8 | DataType::Binary)
            }
            _ => false,
        };
        let column = if column.data_type() == field.data_type() {
            Arc::clone(column)
        } else if kept {
            if dictionary_fields.is_empty() {
                dictionary_fields = target.fields().iter().cloned().collect();
            }
            dictionary_fields[i] = Arc::new(
                field
                    .as_ref()
                    .clone()
                    .with_data_type(column.data_type().clone()),
            );
            Arc::clone(column)
        } else {
            arrow::compute::cast_with_options(column, field.data_type(), &options)?
        };
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(DataFusionError::Execution(format!(
                "column '{}' is required (NOT NULL) but the inserted rows hold NULL",
                field.name()
            )));
        }
        columns.push(column);
    }
    let schema = match dictionary_fields.is_empty() {
        true => Arc::clone(target),
        false => Arc::new(arrow::datatypes::Schema::new_with_metadata(
            dictionary_fields,
            target.metadata().clone(),
        )),
    };
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Counters of one writer partition.
#[derive(Debug, Clone)]
pub(crate) struct WriterCounters {
    pub rows: Count,
    pub files: Count,
    pub bytes: Count,
}

/// How one writer partition writes (besides the table's own properties).
pub(crate) struct PartitionWrite {
    /// The input ends with the row lineage columns, written out with their reserved field ids.
    pub row_lineage: bool,
    /// Overrides `write.target-file-size-bytes`.
    pub target_file_size: Option<usize>,
    /// Where the parquet encoders reserve their buffers.
    pub pool: Arc<dyn MemoryPool>,
    /// Top-level columns (field ids) written without dictionary encoding.
    pub plain_columns: Vec<i32>,
}

/// Writes one input partition and returns the batch describing the files written.
pub(crate) async fn write_partition(
    mut input: SendableRecordBatchStream,
    table: Table,
    partition: usize,
    written: WrittenFiles,
    counters: WriterCounters,
    how: PartitionWrite,
) -> Result<RecordBatch> {
    let PartitionWrite {
        row_lineage,
        target_file_size,
        pool,
        plain_columns,
    } = how;
    let metadata = table.metadata();
    let schema = match row_lineage {
        true => crate::physical_plan::scan::lineage::rows_schema(metadata)?,
        false => metadata.current_schema().clone(),
    };
    let spec = metadata.default_partition_spec().clone();
    let target = WriteSchema::of(&schema)?;
    let target_file_size = match target_file_size {
        Some(bytes) => bytes,
        None => {
            metadata
                .table_properties()
                .df()?
                .write_target_file_size_bytes
        }
    };

    let parquet = parquet_writers(metadata, schema.clone(), Some(pool), &plain_columns)?;
    let locations = RecordingLocations {
        inner: FileLocations::new(metadata)?,
        written,
    };
    let names = DefaultFileNameGenerator::new(
        format!("{partition:05}-{}", uuid::Uuid::new_v4()),
        None,
        DataFileFormat::Parquet,
    );
    let rolling = RollingFileWriterBuilder::new(
        parquet,
        target_file_size,
        table.file_io().clone(),
        locations,
        names,
    );
    let builder = DataFileWriterBuilder::new(rolling);

    let files: Vec<DataFile> = if spec.is_unpartitioned() {
        let mut writer = builder.build(None).await.df()?;
        while let Some(batch) = input.next().await {
            let batch = target.align(&batch?)?;
            counters.rows.add(batch.num_rows());
            writer.write(batch).await.df()?;
        }
        writer.close().await.df()?
    } else {
        let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
            schema.clone(),
            spec.clone(),
        )
        .df()?;
        let mut writer = FanoutWriter::new(builder);
        while let Some(batch) = input.next().await {
            let batch = target.align(&batch?)?;
            counters.rows.add(batch.num_rows());
            for (key, part) in splitter.split(&batch).df()? {
                writer.write(key, part).await.df()?;
            }
        }
        writer.close().await.df()?
    };

    let partition_type = spec.partition_type(&schema).df()?;
    let mut jsons = Vec::with_capacity(files.len());
    for file in files {
        counters.files.add(1);
        counters.bytes.add(file.file_size_in_bytes() as usize);
        jsons.push(file_text(file, &partition_type, metadata.format_version())?);
    }
    let spec_ids = Int32Array::from(vec![spec.spec_id(); jsons.len()]);
    Ok(RecordBatch::try_new(
        data_files_schema(),
        vec![Arc::new(spec_ids), Arc::new(StringArray::from(jsons))],
    )?)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use iceberg::spec::{
        DataContentType, Datum, FormatVersion, NestedField, PartitionSpec, Schema, Transform, Type,
    };

    use super::*;

    /// A written file's text gives back the same file, every field of it, NaN and infinite
    /// partition values included (the iceberg crate's JSON alone makes them null).
    #[test]
    fn a_written_file_decodes_as_it_was_with_nan_partition_values() {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "d", Type::Primitive(PrimitiveType::Double)).into(),
                NestedField::optional(2, "f", Type::Primitive(PrimitiveType::Float)).into(),
                NestedField::optional(3, "i", Type::Primitive(PrimitiveType::Int)).into(),
            ])
            .build()
            .unwrap();
        let spec = PartitionSpec::builder(schema.clone())
            .with_spec_id(3)
            .add_partition_field("d", "d", Transform::Identity)
            .unwrap()
            .add_partition_field("f", "f", Transform::Identity)
            .unwrap()
            .add_partition_field("i", "i", Transform::Identity)
            .unwrap()
            .build()
            .unwrap();
        let partition_type = spec.partition_type(&schema).unwrap();
        let nan = Struct::from_iter([
            Some(Literal::double(f64::NAN)),
            Some(Literal::float(f32::NAN)),
            None,
        ]);
        let numbers = Struct::from_iter([Some(Literal::double(1.5)), None, Some(Literal::int(7))]);
        let infinities = Struct::from_iter([
            Some(Literal::double(f64::NEG_INFINITY)),
            Some(Literal::float(f32::INFINITY)),
            Some(Literal::int(7)),
        ]);
        for (partition, content) in [
            (nan.clone(), DataContentType::Data),
            (numbers, DataContentType::Data),
            (infinities, DataContentType::Data),
            (nan.clone(), DataContentType::PositionDeletes),
            (nan, DataContentType::EqualityDeletes),
        ] {
            let mut b = DataFileBuilder::default();
            match content {
                DataContentType::PositionDeletes => b
                    .file_format(DataFileFormat::Puffin)
                    .referenced_data_file(Some("file:///t/data/a.parquet".to_string()))
                    .content_offset(Some(4))
                    .content_size_in_bytes(Some(40)),
                DataContentType::EqualityDeletes => b
                    .file_format(DataFileFormat::Parquet)
                    .equality_ids(Some(vec![3])),
                DataContentType::Data => b.file_format(DataFileFormat::Parquet),
            };
            let file = b
                .content(content)
                .file_path("file:///t/data/b".to_string())
                .partition(partition)
                .partition_spec_id(3)
                .record_count(10)
                .file_size_in_bytes(1000)
                .column_sizes(HashMap::from([(1, 100)]))
                .value_counts(HashMap::from([(1, 10), (2, 10)]))
                .null_value_counts(HashMap::from([(1, 0), (2, 3)]))
                .nan_value_counts(HashMap::from([(1, 10), (2, 2)]))
                .lower_bounds(HashMap::from([(3, Datum::int(1))]))
                .upper_bounds(HashMap::from([(3, Datum::int(9))]))
                .key_metadata(Some(vec![1, 2, 3]))
                .split_offsets(Some(vec![4]))
                .sort_order_id(0)
                .first_row_id(Some(40))
                .build()
                .unwrap();
            let text = file_text(file.clone(), &partition_type, FormatVersion::V3).unwrap();
            let back = file_of_text(&text, 3, &partition_type, &schema).unwrap();
            assert_eq!(back, file, "{text}");
        }
    }
}
