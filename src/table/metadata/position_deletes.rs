//! `position_deletes`: one row per position a live position delete file or deletion vector of a
//! snapshot deletes, in Spark's columns: `file_path` (the data file), `pos`, `row` (the deleted
//! row, where the delete file stores it), `partition`, `spec_id`, `delete_file_path`.
//!
//! Read a delete file at a time, in batches; a deletion vector is one ranged read of its Puffin
//! file, its positions emitted in batches.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use bytes::Bytes;
use datafusion::error::{DataFusionError, Result};
use futures::{Stream, StreamExt};
use iceberg::spec::{DataContentType, DataFileFormat, ManifestContentType, ManifestStatus};
use iceberg::table::Table;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use crate::error::IcebergResultExt;
use crate::physical_plan::scan::metadata::FileMetadataColumns;
use crate::storage::location::LocationMap;

/// Field ids of the position delete file columns (the spec's reserved ids).
const FILE_PATH_ID: i32 = 2147483546;
const POS_ID: i32 = 2147483545;
const ROW_ID: i32 = 2147483544;

/// Rows per batch of a deletion vector's positions.
const BATCH_ROWS: usize = 8192;

/// The table's columns: `partition` only on a table with partition fields (Java's rule).
pub(super) fn schema(table: &Table) -> Result<SchemaRef> {
    let metadata = table.metadata();
    let row = crate::physical_plan::scan::schema::arrow_schema(metadata.current_schema())?;
    // The row of a delete file that stores none is NULL: its fields may all be NULL.
    let row_fields: Fields = row
        .fields()
        .iter()
        .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
        .collect();
    let mut fields = vec![
        Field::new("file_path", DataType::Utf8, false),
        Field::new("pos", DataType::Int64, false),
        Field::new("row", DataType::Struct(row_fields), true),
    ];
    if let Some(partition) = FileMetadataColumns::of(metadata)?.partition_type() {
        fields.push(Field::new("partition", partition, false));
    }
    fields.push(Field::new("spec_id", DataType::Int32, false));
    fields.push(Field::new("delete_file_path", DataType::Utf8, false));
    Ok(Arc::new(Schema::new(fields)))
}

/// One live position delete file (or deletion vector) to read.
struct DeleteFile {
    path: String,
    spec_id: i32,
    partition: Option<datafusion::common::ScalarValue>,
    /// A deletion vector: the data file, the blob's range, the positions it holds.
    vector: Option<(String, u64, u64, u64)>,
}

/// The rows of the snapshot `snapshot_id` (the current one when `None`).
pub(super) fn stream(
    table: Table,
    locations: LocationMap,
    snapshot_id: Option<i64>,
    schema: SchemaRef,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    let listed = {
        let table = table.clone();
        async move { delete_files(&table, &locations, snapshot_id).await }
    };
    futures::stream::once(listed)
        .map(move |listed| {
            let (table, schema) = (table.clone(), Arc::clone(&schema));
            match listed {
                Ok(files) => futures::stream::iter(files)
                    .then(move |f| {
                        let (table, schema) = (table.clone(), Arc::clone(&schema));
                        async move {
                            let job = async move { read(&table, &f, &schema).await };
                            crate::io_runtime::spawn(job).await
                        }
                    })
                    .flat_map(|batches| match batches {
                        Ok(b) => futures::stream::iter(b.into_iter().map(Ok)).boxed(),
                        Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
                    })
                    .boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
}

/// The live position delete files of the snapshot's delete manifests.
async fn delete_files(
    table: &Table,
    locations: &LocationMap,
    snapshot_id: Option<i64>,
) -> Result<Vec<DeleteFile>> {
    let md = table.metadata();
    let snapshot = match snapshot_id {
        Some(id) => md.snapshot_by_id(id).cloned(),
        None => md.current_snapshot().cloned(),
    };
    let Some(snapshot) = snapshot else {
        return Ok(vec![]);
    };
    let columns = FileMetadataColumns::of(md)?;
    let list = crate::file_planning::manifest_list(table, locations, &snapshot).await?;
    let mut out = vec![];
    for manifest in list.iter() {
        if manifest.content != ManifestContentType::Deletes {
            continue;
        }
        let entries = crate::file_planning::load_entries(manifest, md, table.file_io()).await?;
        for e in &entries {
            let f = e.data_file();
            if e.status() == ManifestStatus::Deleted
                || f.content_type() != DataContentType::PositionDeletes
            {
                continue;
            }
            let vector = match f.file_format() {
                DataFileFormat::Puffin => {
                    let (Some(data), Some(offset), Some(size)) = (
                        f.referenced_data_file(),
                        f.content_offset(),
                        f.content_size_in_bytes(),
                    ) else {
                        return Err(DataFusionError::Execution(format!(
                            "deletion vector in {} lacks its data file or blob range",
                            f.file_path()
                        )));
                    };
                    Some((data, offset as u64, size as u64, f.record_count()))
                }
                _ => None,
            };
            out.push(DeleteFile {
                path: f.file_path().to_string(),
                spec_id: manifest.partition_spec_id,
                partition: columns.partition_value(manifest.partition_spec_id, f.partition())?,
                vector,
            });
        }
    }
    Ok(out)
}

/// The rows of one delete file, in batches.
async fn read(table: &Table, file: &DeleteFile, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let input = table.file_io().new_input(&file.path).df()?;
    if let Some((data_file, offset, size, cardinality)) = &file.vector {
        let bytes = input
            .reader()
            .await
            .df()?
            .read(*offset..offset + size)
            .await
            .df()?;
        let positions =
            crate::physical_plan::positional_delete::dv::decode(&bytes, &file.path, *cardinality)?;
        let mut out = vec![];
        let mut chunk: Vec<i64> = Vec::with_capacity(BATCH_ROWS);
        for p in positions.iter() {
            chunk.push(p as i64);
            if chunk.len() == BATCH_ROWS {
                out.push(rows(file, schema, data_file, std::mem::take(&mut chunk))?);
            }
        }
        if !chunk.is_empty() {
            out.push(rows(file, schema, data_file, chunk)?);
        }
        return Ok(out);
    }
    let bytes: Bytes = input.read().await.df()?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?.with_batch_size(BATCH_ROWS);
    let roots = builder.parquet_schema().root_schema().get_fields().to_vec();
    let find = |id: i32, name: &str| {
        roots.iter().position(|f| {
            let info = f.get_basic_info();
            (info.has_id() && info.id() == id) || (!info.has_id() && info.name() == name)
        })
    };
    let (Some(path_at), Some(pos_at)) = (find(FILE_PATH_ID, "file_path"), find(POS_ID, "pos"))
    else {
        return Err(DataFusionError::Execution(format!(
            "position delete file {} has no file_path and pos columns",
            file.path
        )));
    };
    let row_at = find(ROW_ID, "row");
    let mut wanted = vec![path_at, pos_at];
    wanted.extend(row_at);
    let mask = ProjectionMask::roots(builder.parquet_schema(), wanted);
    let reader = builder.with_projection(mask).build()?;
    let mut out = vec![];
    for batch in reader {
        let batch = batch?;
        let paths = arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
        let positions = arrow::compute::cast(batch.column(1), &DataType::Int64)?;
        let stored = row_at.map(|_| batch.column(2).clone());
        out.push(assemble(file, schema, paths, positions, stored)?);
    }
    Ok(out)
}

/// The rows of a deletion vector's positions of `data_file`.
fn rows(
    file: &DeleteFile,
    schema: &SchemaRef,
    data_file: &str,
    positions: Vec<i64>,
) -> Result<RecordBatch> {
    let n = positions.len();
    let paths: ArrayRef = Arc::new(StringArray::from(vec![data_file; n]));
    assemble(
        file,
        schema,
        paths,
        Arc::new(Int64Array::from(positions)),
        None,
    )
}

/// A batch of the table's columns: the positions, the stored rows (NULL where none), the delete
/// file's partition, spec and path.
fn assemble(
    file: &DeleteFile,
    schema: &SchemaRef,
    paths: ArrayRef,
    positions: ArrayRef,
    stored: Option<ArrayRef>,
) -> Result<RecordBatch> {
    let n = paths.len();
    let DataType::Struct(row_fields) = schema.field_with_name("row")?.data_type().clone() else {
        return Err(DataFusionError::Internal("row is not a struct".into()));
    };
    let row = match stored {
        Some(stored) => stored_rows(&stored, &row_fields, &file.path)?,
        None => arrow::array::new_null_array(&DataType::Struct(row_fields), n),
    };
    let mut columns = vec![paths, positions, row];
    if let Some(p) = &file.partition {
        columns.push(p.to_array_of_size(n)?);
    }
    columns.push(Arc::new(Int32Array::from(vec![file.spec_id; n])));
    columns.push(Arc::new(StringArray::from(vec![file.path.as_str(); n])));
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// The `row` column a delete file stores, read as the table's row: fields by field id (by name
/// in files without ids), each cast to the table's type, NULL where the file lacks one.
fn stored_rows(stored: &ArrayRef, fields: &Fields, location: &str) -> Result<ArrayRef> {
    let Some(s) = stored.as_any().downcast_ref::<StructArray>() else {
        return Err(DataFusionError::Execution(format!(
            "position delete file {location}: its row column is not a struct"
        )));
    };
    // Fields by id where the file's carry ids (a rename keeps them), else by name.
    let id = crate::physical_plan::parquet_files::field_id;
    let stored_fields = s.fields();
    let with_ids = stored_fields.iter().any(|f| id(f).is_some());
    let mut children = vec![];
    for f in fields {
        let at = match (with_ids, id(f)) {
            (true, Some(want)) => stored_fields.iter().position(|c| id(c) == Some(want)),
            _ => stored_fields.iter().position(|c| c.name() == f.name()),
        };
        let child = match at.map(|i| s.column(i)) {
            Some(c) => arrow::compute::cast(c, f.data_type()).map_err(|e| {
                DataFusionError::Execution(format!(
                    "position delete file {location}: row column '{}' does not read as the \
                     table's: {e}",
                    f.name()
                ))
            })?,
            None => arrow::array::new_null_array(f.data_type(), s.len()),
        };
        children.push(child);
    }
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        children,
        s.nulls().cloned(),
    )?))
}
