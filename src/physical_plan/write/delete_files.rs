//! Writing delete files: position deletes (`file_path`, `pos`, sorted) and equality deletes
//! (the equality columns of deleted rows), as parquet files with full column metrics, described
//! as [`NewFile`]s ready for a row-delta commit ([`crate::commit::commit`]).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow_array58::{ArrayRef, Int64Array, StringArray};
use datafusion::error::{DataFusionError, Result};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{
    DataContentType, DataFileFormat, NestedField, PartitionKey, PrimitiveType, Schema, Struct, Type,
};
use iceberg::table::Table;
use iceberg::writer::base_writer::equality_delete_writer::{
    EqualityDeleteFileWriterBuilder, EqualityDeleteWriterConfig,
};
use iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator;
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};

use super::locations::FileLocations;
use super::writer::{parquet_writers, position_delete_writers, WriteSchema};
use crate::arrow58::RecordBatch58;
use crate::commit::NewFile;
use crate::error::IcebergResultExt;

/// Field id of `file_path` in position delete files (reserved by the spec).
pub const DELETE_FILE_PATH_ID: i32 = 2147483546;
/// Field id of `pos` in position delete files (reserved by the spec).
pub const DELETE_POS_ID: i32 = 2147483545;

/// One delete file never rolls over.
const NO_ROLLING: usize = usize::MAX;

/// The partition key of (`spec_id`, `partition`) in `table`, `None` when unpartitioned.
pub(super) fn partition_key(
    table: &Table,
    spec_id: i32,
    partition: Struct,
) -> Result<Option<PartitionKey>> {
    let metadata = table.metadata();
    let spec = metadata.partition_spec_by_id(spec_id).ok_or_else(|| {
        DataFusionError::Plan(format!(
            "table '{}' has no partition spec {spec_id}",
            table.identifier()
        ))
    })?;
    if spec.is_unpartitioned() {
        return Ok(None);
    }
    Ok(Some(PartitionKey::new(
        spec.as_ref().clone(),
        metadata.current_schema().clone(),
        partition,
    )))
}

fn names(kind: &str) -> DefaultFileNameGenerator {
    DefaultFileNameGenerator::new(
        format!("{kind}-{}", uuid::Uuid::new_v4()),
        None,
        DataFileFormat::Parquet,
    )
}

/// Writes one position delete file for data files of partition `partition` of spec `spec_id`:
/// `deletes` are (recorded data file path, row position); they are sorted and deduplicated.
/// When every delete names the same data file, the file records it as `referenced_data_file`.
pub async fn write_position_delete_file(
    table: &Table,
    spec_id: i32,
    partition: Struct,
    mut deletes: Vec<(String, i64)>,
) -> Result<NewFile> {
    if deletes.is_empty() {
        return Err(DataFusionError::Plan(
            "a position delete file needs at least one position".into(),
        ));
    }
    if let Some((path, pos)) = deletes.iter().find(|(_, p)| *p < 0) {
        return Err(DataFusionError::Plan(format!(
            "position {pos} of {path} is negative"
        )));
    }
    deletes.sort();
    deletes.dedup();
    let single = deletes
        .first()
        .map(|(p, _)| p.clone())
        .filter(|first| deletes.iter().all(|(p, _)| p == first));
    let chunks = deletes.chunks(64 * 1024).map(|chunk| {
        (
            StringArray::from_iter_values(chunk.iter().map(|(p, _)| p.as_str())),
            Int64Array::from_iter_values(chunk.iter().map(|(_, p)| *p)),
        )
    });
    write_positions(table, spec_id, partition, single, chunks).await
}

/// Writes one position delete file for the data file `data_file` (recorded path, in partition
/// `partition` of spec `spec_id`): the positions in `positions`, recorded with
/// `referenced_data_file` (a file-scoped delete file).
pub async fn write_file_position_deletes(
    table: &Table,
    spec_id: i32,
    partition: Struct,
    data_file: &str,
    positions: &roaring::RoaringTreemap,
) -> Result<NewFile> {
    if positions.is_empty() {
        return Err(DataFusionError::Plan(
            "a position delete file needs at least one position".into(),
        ));
    }
    if positions.max().is_some_and(|p| p > i64::MAX as u64) {
        return Err(DataFusionError::Plan(format!(
            "a position of {data_file} is out of range"
        )));
    }
    let mut iter = positions.iter().peekable();
    let chunks = std::iter::from_fn(move || {
        iter.peek()?;
        let pos: Vec<i64> = iter.by_ref().take(64 * 1024).map(|p| p as i64).collect();
        let paths = StringArray::from_iter_values(std::iter::repeat_n(data_file, pos.len()));
        Some((paths, Int64Array::from(pos)))
    });
    write_positions(
        table,
        spec_id,
        partition,
        Some(data_file.to_string()),
        chunks,
    )
    .await
}

/// Writes (file_path, pos) chunks, already sorted, as one position delete file.
async fn write_positions(
    table: &Table,
    spec_id: i32,
    partition: Struct,
    referenced: Option<String>,
    chunks: impl Iterator<Item = (StringArray, Int64Array)>,
) -> Result<NewFile> {
    let schema = Arc::new(
        Schema::builder()
            .with_fields([
                NestedField::required(
                    DELETE_FILE_PATH_ID,
                    "file_path",
                    Type::Primitive(PrimitiveType::String),
                )
                .into(),
                NestedField::required(DELETE_POS_ID, "pos", Type::Primitive(PrimitiveType::Long))
                    .into(),
            ])
            .build()
            .df()?,
    );
    let arrow_schema = Arc::new(schema_to_arrow_schema(&schema).df()?);
    let key = partition_key(table, spec_id, partition)?;
    let metadata = table.metadata();
    let rolling = RollingFileWriterBuilder::new(
        position_delete_writers(metadata, Arc::clone(&schema))?,
        NO_ROLLING,
        table.file_io().clone(),
        FileLocations::new(metadata)?,
        names("pos-deletes"),
    );
    let mut writer = rolling.build();
    for (paths, pos) in chunks {
        let batch = RecordBatch58::try_new(
            Arc::clone(&arrow_schema),
            vec![Arc::new(paths) as ArrayRef, Arc::new(pos)],
        )
        .map_err(|e| DataFusionError::Internal(format!("position delete batch: {e}")))?;
        writer.write(&key, &batch).await.df()?;
    }
    let mut built = writer.close().await.df()?;
    let [mut file] = <[_; 1]>::try_from(std::mem::take(&mut built)).map_err(|v| {
        DataFusionError::Internal(format!(
            "expected one position delete file, got {}",
            v.len()
        ))
    })?;
    file.content(DataContentType::PositionDeletes)
        .partition_spec_id(spec_id)
        .referenced_data_file(referenced);
    if let Some(k) = &key {
        file.partition(k.data().clone());
    }
    let file = file
        .build()
        .map_err(|e| DataFusionError::Internal(format!("position delete file: {e}")))?;
    Ok(NewFile { spec_id, file })
}

/// Writes one equality delete file for partition `partition` of spec `spec_id` (an unpartitioned
/// spec makes the deletes apply in every partition): rows of `batches` (the table's columns, in
/// order) are deleted wherever all `equality_ids` columns are equal. Only the equality columns
/// are stored.
pub async fn write_equality_delete_file(
    table: &Table,
    equality_ids: Vec<i32>,
    spec_id: i32,
    partition: Struct,
    batches: &[RecordBatch],
) -> Result<NewFile> {
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let target = WriteSchema::of(&schema)?;
    let config = EqualityDeleteWriterConfig::new(equality_ids, schema.clone()).df()?;
    let delete_schema =
        Arc::new(iceberg::arrow::arrow_schema_to_schema(config.projected_arrow_schema_ref()).df()?);
    let rolling = RollingFileWriterBuilder::new(
        parquet_writers(metadata, delete_schema, None, &[])?,
        NO_ROLLING,
        table.file_io().clone(),
        FileLocations::new(metadata)?,
        names("eq-deletes"),
    );
    let key = partition_key(table, spec_id, partition)?;
    let mut writer = EqualityDeleteFileWriterBuilder::new(rolling, config)
        .build(key)
        .await
        .df()?;
    for batch in batches {
        writer.write(target.align(batch)?).await.df()?;
    }
    let files = writer.close().await.df()?;
    let [file] = <[_; 1]>::try_from(files).map_err(|v| {
        DataFusionError::Internal(format!(
            "expected one equality delete file, got {}",
            v.len()
        ))
    })?;
    Ok(NewFile { spec_id, file })
}
