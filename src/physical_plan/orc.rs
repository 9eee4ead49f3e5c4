//! ORC data files (Hive, Impala and Trino write them) as a DataFusion [`FileSource`], read with
//! `orc-rust`.
//!
//! ```text
//!  ORC file ── footer: the Iceberg field id of each type (type attribute `iceberg.id`)
//!     │
//!     ▼  the file's schema as the decoder gives it: field ids on every field, nested struct
//!     │  fields named as the table names their ids, timestamps in the table's unit (ns or µs)
//!     ▼  orc-rust: the stripes' columns the scan needs, as Arrow
//!  batch in the file's types ──► the table's columns through the field-id adapter parquet
//!     files go through (ids, else the table's name mapping, else names; promotions; structs
//!     by field name; `initial-default` of what the file lacks); a column the file lacks that
//!     its identity partition fixes is that value (exact per-file statistics)
//!     ▼
//!  DataFusion's projection (partition columns, expressions) over the table's columns
//! ```
//! Rows come in file order, whole files at a time (of a file split into byte ranges, the first
//! range reads it all), numbered as they come: the positions the file's position deletes and
//! deletion vectors name are dropped (the set of one file at a time), and the row position
//! column, when the table schema has it, is each row's number. Filters are applied above the
//! scan.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use datafusion::common::internal_err;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{ScalarValue, Statistics};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{
    FileOpenFuture, FileOpener, FileScanConfig, FileSource,
};
use datafusion::datasource::projection::{ProjectionOpener, SplitProjection};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_adapter::PhysicalExprAdapterFactory;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::projection::ProjectionExprs;
use datafusion::physical_plan::DisplayFormatType;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use object_store::{ObjectStore, ObjectStoreExt};
use orc_rust::async_arrow_reader::ArrowStreamReader;
use orc_rust::projection::ProjectionMask;
use orc_rust::reader::AsyncChunkReader;
use orc_rust::schema::{ArrowSchemaOptions, DataType as OrcType, RootDataType, TimestampPrecision};
use orc_rust::ArrowReaderBuilder;
use prost013::Message;
use roaring::RoaringTreemap;

use iceberg::spec::{PrimitiveType, Schema as IcebergSchema, Type as IcebergType};

use crate::file_planning::field_ids::PARQUET_FIELD_ID;
use crate::file_planning::FieldIdAdapterFactory;
use crate::physical_plan::positional_delete::{positions_in, FileDeletes};

/// The type attribute Iceberg's ORC writer stores a field's id in.
const ICEBERG_ID: &str = "iceberg.id";

/// Reads ORC data files into the table's columns (see the module docs).
#[derive(Clone)]
pub(crate) struct OrcSource {
    table_schema: TableSchema,
    /// The Iceberg field id of each column of the table's file schema, in order
    /// ([`POSITION_ID`] for the row position column).
    field_ids: Arc<[i32]>,
    /// The position delete files of each data file (by object store location), with the path
    /// the table records the file by (what they name it by).
    deletes: Arc<HashMap<String, FileDeletes>>,
    /// Matches a file's columns to the table's (field ids, the name mapping, defaults), as it
    /// does for parquet files.
    adapter: Arc<FieldIdAdapterFactory>,
    projection: SplitProjection,
    batch_size: Option<usize>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for OrcSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrcSource")
            .field("field_ids", &self.field_ids)
            .finish()
    }
}

impl OrcSource {
    /// A source of `table_schema`'s columns, whose field ids are `field_ids` (one per column of
    /// its file schema), read as `adapter` maps files onto the table.
    pub(crate) fn new(
        table_schema: TableSchema,
        field_ids: Arc<[i32]>,
        deletes: HashMap<String, FileDeletes>,
        adapter: Arc<FieldIdAdapterFactory>,
    ) -> Self {
        Self {
            projection: SplitProjection::unprojected(&table_schema),
            table_schema,
            field_ids,
            deletes: Arc::new(deletes),
            adapter,
            batch_size: None,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

#[cfg(feature = "distributed")]
impl OrcSource {
    /// The field id of each column of the table's file schema.
    pub(crate) fn field_ids(&self) -> &[i32] {
        &self.field_ids
    }

    /// The position deletes of the data files (by object store location).
    pub(crate) fn deletes(&self) -> &HashMap<String, FileDeletes> {
        &self.deletes
    }

    /// How files are matched to the table's columns.
    pub(crate) fn adapter(&self) -> &FieldIdAdapterFactory {
        &self.adapter
    }
}

impl FileSource for OrcSource {
    fn create_file_opener(
        &self,
        object_store: Arc<dyn ObjectStore>,
        _base_config: &FileScanConfig,
        _partition: usize,
    ) -> Result<Arc<dyn FileOpener>> {
        let file_schema = self.table_schema.file_schema();
        let indices = self.projection.file_indices.clone();
        let opener = Arc::new(OrcOpener {
            deletes: Arc::clone(&self.deletes),
            object_store,
            schema: Arc::new(file_schema.project(&indices)?),
            field_ids: indices.iter().map(|&i| self.field_ids[i]).collect(),
            columns: indices,
            adapter: Arc::clone(&self.adapter),
            batch_size: self.batch_size.unwrap_or(8192),
        }) as Arc<dyn FileOpener>;
        ProjectionOpener::try_new(self.projection.clone(), opener, file_schema)
    }

    fn table_schema(&self) -> &TableSchema {
        &self.table_schema
    }

    fn with_batch_size(&self, batch_size: usize) -> Arc<dyn FileSource> {
        let mut source = self.clone();
        source.batch_size = Some(batch_size);
        Arc::new(source)
    }

    fn try_pushdown_projection(
        &self,
        projection: &ProjectionExprs,
    ) -> Result<Option<Arc<dyn FileSource>>> {
        let mut source = self.clone();
        let merged = self.projection.source.try_merge(projection)?;
        source.projection = SplitProjection::new(self.table_schema.file_schema(), &merged);
        Ok(Some(Arc::new(source)))
    }

    fn projection(&self) -> Option<&ProjectionExprs> {
        Some(&self.projection.source)
    }

    fn metrics(&self) -> &ExecutionPlanMetricsSet {
        &self.metrics
    }

    fn file_type(&self) -> &str {
        "orc"
    }

    fn supports_repartitioning(&self) -> bool {
        false
    }

    fn fmt_extra(&self, _t: DisplayFormatType, _f: &mut fmt::Formatter) -> fmt::Result {
        Ok(())
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        datafusion::physical_plan::apply_expression_roots(self.projection.source.iter(), f)
    }
}

/// Opens one ORC file into batches of `schema` (the table's columns the scan reads).
struct OrcOpener {
    deletes: Arc<HashMap<String, FileDeletes>>,
    object_store: Arc<dyn ObjectStore>,
    schema: SchemaRef,
    /// The field id of each column of `schema`.
    field_ids: Vec<i32>,
    /// The index of each column of `schema` in the table's file schema (for the statistics).
    columns: Vec<usize>,
    adapter: Arc<FieldIdAdapterFactory>,
    batch_size: usize,
}

impl FileOpener for OrcOpener {
    fn open(&self, file: PartitionedFile) -> Result<FileOpenFuture> {
        let store = Arc::clone(&self.object_store);
        let schema = Arc::clone(&self.schema);
        let field_ids = self.field_ids.clone();
        let columns = self.columns.clone();
        let adapter = Arc::clone(&self.adapter);
        let batch_size = self.batch_size;
        let file_deletes = self
            .deletes
            .get(file.object_meta.location.as_ref())
            .cloned();
        // A file split into byte ranges (a planner that splits every file scan) is read whole
        // by the range that starts it; the others read nothing, so every row comes once, and
        // in order (rows are numbered as read).
        if file.range.as_ref().is_some_and(|r| r.start > 0) {
            return Ok(futures::future::ready(Ok(futures::stream::empty().boxed())).boxed());
        }
        Ok(async move {
            let location = file.object_meta.location.clone();
            let size = file.object_meta.size;
            let shown = location.to_string();
            let named = move |e: &dyn fmt::Display| {
                DataFusionError::Execution(format!("ORC data file {shown}: {e}"))
            };
            // The positions deleted in this file; rows are numbered as read, in file order.
            let deleted = match file_deletes {
                None => None,
                Some(d) => Some(Arc::new(
                    positions_in(&store, &d.delete_files, &d.recorded_path).await?,
                )),
            };
            let mut reader = ObjectReader {
                store,
                location: location.clone(),
                size,
                tail: None,
            };
            let tail = reader.read_tail().await.map_err(|e| named(&e))?;
            let mut footer_reader = ObjectReader {
                store: Arc::clone(&reader.store),
                location: location.clone(),
                size,
                tail: None,
            };
            let builder = ArrowReaderBuilder::try_new_async(reader)
                .await
                .map_err(|e| named(&e))?;
            let compression = builder.file_metadata().compression();
            let ids = footer_field_ids(&mut footer_reader, tail, compression)
                .await
                .map_err(|e| named(&e))?;
            let root = builder.file_metadata().root_data_type().clone();
            let rows = builder.file_metadata().number_of_rows();
            // The file's columns as the decoder is to give them: with their field ids, nested
            // fields named as the table names them, timestamps in the table's unit.
            let (table, _) = adapter.source();
            let file_schema = decoded_schema(&root, &ids, table);
            let columns = FileColumns::plan(
                &schema,
                &field_ids,
                &columns,
                &adapter,
                &file_schema,
                file.statistics.as_deref(),
                rows,
            )?;
            let (read, physical, outputs) = (columns.read, columns.physical, columns.outputs);
            let stream: ArrowStreamReader<ObjectReader> = builder
                .with_batch_size(batch_size)
                // By ORC type id (pre-order: a nested column's children take ids too).
                .with_projection(ProjectionMask::roots(
                    &root,
                    read.iter()
                        .map(|&i| root.children()[i].data_type().column_index()),
                ))
                .with_schema(physical)
                .build_async();
            let mut next_row: u64 = 0;
            let batches = stream.map(move |batch| {
                let batch = batch.map_err(|e| named(&e))?;
                let first = next_row;
                next_row += batch.num_rows() as u64;
                let out = output_batch(&schema, &outputs, &batch, first, &named)?;
                match &deleted {
                    Some(deleted) => live_rows(out, first, deleted),
                    None => Ok(out),
                }
            });
            Ok(batches.boxed())
        }
        .boxed())
    }
}

/// How the opener reads one file: the file columns it decodes, their schema, and how each
/// output column is made.
struct FileColumns {
    read: Vec<usize>,
    physical: SchemaRef,
    outputs: Vec<Output>,
}

impl FileColumns {
    /// The table column each file column reads into (by field id, else the name mapping, else
    /// by name), and the file columns the scan needs. Columns the file lacks whose per-file
    /// statistics make them constant (identity partition values) read as that value, as the
    /// parquet opener reads them; every other column goes through the same field-id adapter
    /// parquet files go through: promotions and casts (structs by field name),
    /// `initial-default` values of the columns and nested fields the file lacks, NULL
    /// otherwise.
    fn plan(
        schema: &SchemaRef,
        field_ids: &[i32],
        columns: &[usize],
        adapter: &FieldIdAdapterFactory,
        file_schema: &Schema,
        statistics: Option<&Statistics>,
        rows: u64,
    ) -> Result<Self> {
        let renamed = adapter.renamed(file_schema);
        let wanted: Vec<Option<usize>> = schema
            .fields()
            .iter()
            .zip(field_ids)
            .map(|(f, id)| match *id == POSITION_ID {
                true => None,
                false => renamed.fields().iter().position(|r| r.name() == f.name()),
            })
            .collect();
        let constants: Vec<Option<ScalarValue>> = wanted
            .iter()
            .zip(columns)
            .zip(schema.fields())
            .zip(field_ids)
            .map(|(((source, &at), field), id)| match source {
                Some(_) => Ok(None),
                None if *id == POSITION_ID => Ok(None),
                None => constant(statistics, at, rows, field.data_type()),
            })
            .collect::<Result<_>>()?;
        let mut read: Vec<usize> = wanted.iter().flatten().copied().collect();
        read.sort_unstable();
        read.dedup();
        let physical = Arc::new(file_schema.project(&read)?);
        let logical: Vec<(usize, FieldRef)> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| field_ids[*i] != POSITION_ID && constants[*i].is_none())
            .map(|(i, f)| (i, Arc::clone(f)))
            .collect();
        let logical_schema = Arc::new(Schema::new(
            logical
                .iter()
                .map(|(_, f)| Arc::clone(f))
                .collect::<Vec<_>>(),
        ));
        let expr_adapter = adapter.create(logical_schema, Arc::clone(&physical))?;
        let mut exprs = logical.iter().enumerate().map(|(at, (_, f))| {
            expr_adapter.rewrite(Arc::new(Column::new(f.name(), at)) as Arc<dyn PhysicalExpr>)
        });
        // How each output column is made.
        let outputs: Vec<Output> = constants
            .into_iter()
            .zip(field_ids)
            .map(|(constant, id)| match (constant, *id == POSITION_ID) {
                (_, true) => Ok(Output::Position),
                (Some(value), false) => Ok(Output::Constant(value)),
                (None, false) => exprs
                    .next()
                    .unwrap_or_else(|| internal_err!("ORC column without an expression"))
                    .map(Output::Read),
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            read,
            physical,
            outputs,
        })
    }
}

/// The output rows of a decoded `batch` whose first row is row `first` of the file.
fn output_batch(
    schema: &SchemaRef,
    outputs: &[Output],
    batch: &RecordBatch,
    first: u64,
    named: &impl Fn(&dyn fmt::Display) -> DataFusionError,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let arrays = schema
        .fields()
        .iter()
        .zip(outputs)
        .map(|(field, output)| -> Result<ArrayRef> {
            match output {
                Output::Position => {
                    let positions: Int64Array =
                        (first as i64..(first + rows as u64) as i64).collect();
                    Ok(Arc::new(positions))
                }
                Output::Constant(value) => Ok(value.to_array_of_size(rows)?),
                Output::Read(expr) => expr
                    .evaluate(batch)
                    .and_then(|v| v.into_array(rows))
                    .map_err(|e| named(&format!("column {} does not read: {e}", field.name()))),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

/// How the opener makes one output column of a file.
enum Output {
    /// The row's position in the file.
    Position,
    /// The value the file's statistics fix for every row.
    Constant(ScalarValue),
    /// The file's column as the field-id adapter maps it (cast, defaulted, or NULL).
    Read(Arc<dyn PhysicalExpr>),
}

/// The id the row position column takes among a source's field ids (no Iceberg field has it).
pub(crate) const POSITION_ID: i32 = i32::MIN;

/// `batch` (rows `first..` of its file) without the rows `deleted` holds.
fn live_rows(batch: RecordBatch, first: u64, deleted: &RoaringTreemap) -> Result<RecordBatch> {
    let end = first + batch.num_rows() as u64;
    if deleted.range_cardinality(first..end) == 0 {
        return Ok(batch);
    }
    let keep: BooleanArray = (first..end).map(|p| Some(!deleted.contains(p))).collect();
    Ok(filter_record_batch(&batch, &keep)?)
}

/// The value every row of a file holds in column `at` by its exact statistics (an identity
/// partition value the file does not store, or NULL in every row), if they fix one.
fn constant(
    statistics: Option<&Statistics>,
    at: usize,
    rows: u64,
    ty: &DataType,
) -> Result<Option<ScalarValue>> {
    let Some(column) = statistics.and_then(|s| s.column_statistics.get(at)) else {
        return Ok(None);
    };
    match (&column.min_value, &column.max_value, &column.null_count) {
        (Precision::Exact(min), Precision::Exact(max), _) if min == max && !min.is_null() => {
            match min.data_type() == *ty {
                true => Ok(Some(min.clone())),
                false => min.cast_to(ty).map(Some),
            }
        }
        (_, _, Precision::Exact(n)) if *n as u64 == rows => ScalarValue::try_from(ty).map(Some),
        _ => Ok(None),
    }
}

/// The Arrow schema the decoder is to give `root`'s columns in, whose ORC types have the field
/// ids `ids` (by type id): each field carries its field id as parquet files carry theirs; a
/// nested struct field is named and made nullable as `table`'s field of its id (one the table
/// dropped gets a name no field has, so it is left out); timestamps are read in nanoseconds
/// where the table's type has them, microseconds elsewhere.
fn decoded_schema(root: &RootDataType, ids: &[Option<i32>], table: &IcebergSchema) -> Schema {
    let base = root.create_arrow_schema_with_options(
        &HashMap::new(),
        ArrowSchemaOptions::new().with_timestamp_precision(TimestampPrecision::Microsecond),
    );
    let fields: Vec<Field> = base
        .fields()
        .iter()
        .zip(root.children())
        .map(|(f, c)| decoded_field(f, c.data_type(), ids, table, Nesting::Top))
        .collect();
    Schema::new(fields)
}

/// Where a field is: a top-level column, a struct's field, or a list's or map's child.
#[derive(Clone, Copy, PartialEq)]
enum Nesting {
    Top,
    InStruct,
    Other,
}

fn decoded_field(
    field: &Field,
    orc: &OrcType,
    ids: &[Option<i32>],
    table: &IcebergSchema,
    nesting: Nesting,
) -> Field {
    let id = ids.get(orc.column_index()).copied().flatten();
    let in_table = id.and_then(|id| table.field_by_id(id));
    let data_type = match (field.data_type(), orc) {
        (DataType::Struct(children), OrcType::Struct { children: orc, .. }) => DataType::Struct(
            children
                .iter()
                .zip(orc)
                .map(|(f, c)| decoded_field(f, c.data_type(), ids, table, Nesting::InStruct))
                .collect(),
        ),
        (DataType::List(child), OrcType::List { child: orc, .. }) => DataType::List(Arc::new(
            decoded_field(child, orc, ids, table, Nesting::Other),
        )),
        (DataType::Map(entries, sorted), OrcType::Map { key, value, .. }) => {
            let entries = match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => {
                    let kv: Fields = vec![
                        decoded_field(&kv[0], key, ids, table, Nesting::Other),
                        decoded_field(&kv[1], value, ids, table, Nesting::Other),
                    ]
                    .into();
                    Arc::new(
                        entries
                            .as_ref()
                            .clone()
                            .with_data_type(DataType::Struct(kv)),
                    )
                }
                _ => Arc::clone(entries),
            };
            DataType::Map(entries, *sorted)
        }
        (DataType::Timestamp(_, zone), _)
            if in_table.is_some_and(|f| {
                matches!(
                    *f.field_type,
                    IcebergType::Primitive(
                        PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs
                    )
                )
            }) =>
        {
            DataType::Timestamp(TimeUnit::Nanosecond, zone.clone())
        }
        (other, _) => other.clone(),
    };
    let mut out = field.clone().with_data_type(data_type);
    if nesting != Nesting::Top {
        match (in_table, id) {
            (Some(f), _) => {
                out = out.with_nullable(!f.required);
                if nesting == Nesting::InStruct {
                    out = out.with_name(f.name.clone());
                }
            }
            (None, Some(id)) if nesting == Nesting::InStruct => {
                out = out.with_name(format!("__iceberg_dropped_{id}"));
            }
            _ => {}
        }
    }
    if let Some(id) = id {
        let mut metadata = out.metadata().clone();
        metadata.insert(PARQUET_FIELD_ID.to_string(), id.to_string());
        out = out.with_metadata(metadata);
    }
    out
}

/// An ORC file in an object store, read by range (its size known from the manifest).
struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    location: object_store::path::Path,
    size: u64,
    /// The last bytes of the file, once read for the footer.
    tail: Option<(u64, Bytes)>,
}

impl ObjectReader {
    async fn range(&mut self, range: Range<u64>) -> std::io::Result<Bytes> {
        if let Some((start, tail)) = &self.tail {
            if range.start >= *start {
                let from = (range.start - start) as usize;
                let to = (range.end - start) as usize;
                if to <= tail.len() {
                    return Ok(tail.slice(from..to));
                }
            }
        }
        self.store
            .get_range(&self.location, range)
            .await
            .map_err(std::io::Error::other)
    }
}

impl ObjectReader {
    /// Reads (and keeps) the last 16 KiB of the file, where its postscript, footer and
    /// metadata are: orc-rust reads the same bytes first.
    async fn read_tail(&mut self) -> std::io::Result<(u64, Bytes)> {
        let len = self.size.min(16 * 1024);
        let start = self.size - len;
        let tail = self.range(start..self.size).await?;
        self.tail = Some((start, tail.clone()));
        Ok((start, tail))
    }
}

impl AsyncChunkReader for ObjectReader {
    fn len(&mut self) -> BoxFuture<'_, std::io::Result<u64>> {
        let size = self.size;
        async move { Ok(size) }.boxed()
    }

    fn get_bytes(
        &mut self,
        offset_from_start: u64,
        length: u64,
    ) -> BoxFuture<'_, std::io::Result<Bytes>> {
        async move {
            self.range(offset_from_start..offset_from_start + length)
                .await
        }
        .boxed()
    }
}

/// The Iceberg field id of each ORC type of the file (by type id; `None` where the type has no
/// `iceberg.id` attribute), from its footer; `tail` is the file's last bytes (from `start`).
async fn footer_field_ids(
    reader: &mut ObjectReader,
    (start, tail): (u64, Bytes),
    compression: Option<orc_rust::compression::Compression>,
) -> Result<Vec<Option<i32>>> {
    let bad = |what: &str| DataFusionError::Execution(format!("not a readable ORC file: {what}"));
    let Some(&postscript_len) = tail.last() else {
        return Err(bad("empty file"));
    };
    let postscript_len = postscript_len as usize;
    if postscript_len + 1 > tail.len() {
        return Err(bad("postscript past the file's start"));
    }
    let postscript_at = tail.len() - 1 - postscript_len;
    let postscript = orc_rust::proto::PostScript::decode(&tail[postscript_at..tail.len() - 1])
        .map_err(|e| bad(&format!("postscript: {e}")))?;
    let footer_len = postscript.footer_length.unwrap_or(0) as usize;
    let footer_bytes = match footer_len <= postscript_at {
        true => tail.slice(postscript_at - footer_len..postscript_at),
        false => {
            let end = start + postscript_at as u64;
            reader
                .range(end.saturating_sub(footer_len as u64)..end)
                .await
                .map_err(|e| bad(&e.to_string()))?
        }
    };
    let footer = {
        use std::io::Read;
        let mut decoded = vec![];
        orc_rust::compression::Decompressor::new(footer_bytes, compression, vec![])
            .read_to_end(&mut decoded)
            .map_err(|e| bad(&format!("footer: {e}")))?;
        orc_rust::proto::Footer::decode(decoded.as_slice())
            .map_err(|e| bad(&format!("footer: {e}")))?
    };
    Ok(footer
        .types
        .iter()
        .map(|t| {
            t.attributes
                .iter()
                .find(|a| a.key.as_deref() == Some(ICEBERG_ID))
                .and_then(|a| a.value.as_deref())
                .and_then(|v| v.parse().ok())
        })
        .collect())
}
