//! ORC data files (Hive, Impala and Trino write them) as a DataFusion [`FileSource`], read with
//! `orc-rust`.
//!
//! ```text
//!  ORC file ── footer: the Iceberg field id of each column (type attribute `iceberg.id`)
//!     │
//!     ▼  orc-rust: the stripes' columns the scan needs, as Arrow (timestamps in µs)
//!  batch in the file's types ──► the table's columns by field id, cast to the table's types
//!     (promotions, binary → fixed/uuid, long → time); a column the file lacks is its identity
//!     partition value (exact per-file statistics), else NULL
//!     ▼
//!  DataFusion's projection (partition columns, expressions) over the table's columns
//! ```
//! A file without field ids (written before the table was, or by a writer that keeps none)
//! matches columns by name. Rows come in file order, whole files at a time (of a file split into
//! byte ranges, the first range reads it all), numbered as they come: the positions the file's position deletes and deletion
//! vectors name are dropped (the set of one file at a time), and the row position column, when
//! the table schema has it, is each row's number. Filters are applied above the scan.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    new_null_array, ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions,
};
use arrow::compute::filter_record_batch;
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, SchemaRef};
use bytes::Bytes;
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
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::projection::ProjectionExprs;
use datafusion::physical_plan::DisplayFormatType;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use object_store::{ObjectStore, ObjectStoreExt};
use orc_rust::async_arrow_reader::ArrowStreamReader;
use orc_rust::projection::ProjectionMask;
use orc_rust::reader::AsyncChunkReader;
use orc_rust::schema::TimestampPrecision;
use orc_rust::ArrowReaderBuilder;
use prost013::Message;
use roaring::RoaringTreemap;

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
    /// its file schema).
    pub(crate) fn new(
        table_schema: TableSchema,
        field_ids: Arc<[i32]>,
        deletes: HashMap<String, FileDeletes>,
    ) -> Self {
        Self {
            projection: SplitProjection::unprojected(&table_schema),
            table_schema,
            field_ids,
            deletes: Arc::new(deletes),
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
    batch_size: usize,
}

impl FileOpener for OrcOpener {
    fn open(&self, file: PartitionedFile) -> Result<FileOpenFuture> {
        let store = Arc::clone(&self.object_store);
        let schema = Arc::clone(&self.schema);
        let field_ids = self.field_ids.clone();
        let columns = self.columns.clone();
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
            let orc_columns: Vec<(String, Option<i32>)> = root
                .children()
                .iter()
                .map(|c| {
                    (
                        c.name().to_string(),
                        ids.get(c.data_type().column_index()).copied().flatten(),
                    )
                })
                .collect();
            let by_id = orc_columns.iter().any(|(_, id)| id.is_some());
            // Where each wanted column is in the file (by field id, or by name in a file
            // without ids).
            let sources: Vec<Option<usize>> = schema
                .fields()
                .iter()
                .zip(&field_ids)
                .map(|(f, id)| {
                    if *id == POSITION_ID {
                        return None;
                    }
                    orc_columns.iter().position(|(name, file_id)| match by_id {
                        true => *file_id == Some(*id),
                        false => name == f.name(),
                    })
                })
                .collect();
            // Columns the file lacks: their per-file constant (identity partition values), or
            // NULL.
            let constants: Vec<Option<ScalarValue>> = sources
                .iter()
                .zip(&columns)
                .zip(schema.fields())
                .zip(&field_ids)
                .map(|(((source, &at), field), id)| match source {
                    Some(_) => Ok(None),
                    None if *id == POSITION_ID => Ok(None),
                    None => {
                        constant(file.statistics.as_deref(), at, rows, field.data_type()).map(Some)
                    }
                })
                .collect::<Result<_>>()?;
            let mut read: Vec<usize> = sources.iter().flatten().copied().collect();
            read.sort_unstable();
            read.dedup();
            let stream: ArrowStreamReader<ObjectReader> = builder
                .with_batch_size(batch_size)
                .with_timestamp_precision(TimestampPrecision::Microsecond)
                // By ORC type id (pre-order: a nested column's children take ids too).
                .with_projection(ProjectionMask::roots(
                    &root,
                    read.iter()
                        .map(|&i| root.children()[i].data_type().column_index()),
                ))
                .build_async();
            let mut next_row: u64 = 0;
            let batches = stream.map(move |batch| {
                let batch = batch.map_err(|e| named(&e))?;
                let first = next_row;
                next_row += batch.num_rows() as u64;
                let arrays = schema
                    .fields()
                    .iter()
                    .zip(&sources)
                    .zip(&constants)
                    .zip(&field_ids)
                    .map(|(((field, source), constant), id)| -> Result<ArrayRef> {
                        if *id == POSITION_ID {
                            let positions: Int64Array =
                                (first as i64..(first + batch.num_rows() as u64) as i64).collect();
                            return Ok(Arc::new(positions));
                        }
                        match (source, constant) {
                            (Some(i), _) => {
                                let name = &orc_columns[*i].0;
                                let at = batch
                                    .schema()
                                    .index_of(name)
                                    .map_err(|_| named(&format!("column {name} was not read")))?;
                                let column = batch.column(at);
                                if column.data_type() == field.data_type() {
                                    return Ok(Arc::clone(column));
                                }
                                cast_with_options(
                                    column,
                                    field.data_type(),
                                    &CastOptions::default(),
                                )
                                .map_err(|e| {
                                    named(&format!(
                                        "column {name} ({}) does not read as {}: {e}",
                                        column.data_type(),
                                        field.data_type()
                                    ))
                                })
                            }
                            (None, Some(value)) => Ok(value.to_array_of_size(batch.num_rows())?),
                            (None, None) => Ok(new_null_array(field.data_type(), batch.num_rows())),
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                let out = RecordBatch::try_new_with_options(
                    Arc::clone(&schema),
                    arrays,
                    &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
                )?;
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
/// partition value the file does not store), or NULL.
fn constant(
    statistics: Option<&Statistics>,
    at: usize,
    rows: u64,
    ty: &DataType,
) -> Result<ScalarValue> {
    let null = || ScalarValue::try_from(ty);
    let Some(column) = statistics.and_then(|s| s.column_statistics.get(at)) else {
        return null();
    };
    match (&column.min_value, &column.max_value, &column.null_count) {
        (Precision::Exact(min), Precision::Exact(max), _) if min == max && !min.is_null() => {
            if min.data_type() == *ty {
                Ok(min.clone())
            } else {
                min.cast_to(ty)
            }
        }
        (_, _, Precision::Exact(n)) if *n as u64 == rows => null(),
        _ => null(),
    }
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
