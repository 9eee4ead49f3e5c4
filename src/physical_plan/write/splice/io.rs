//! The splice's reading and copying: the old file's byte ranges through its store, a fetched
//! column chunk read by its offsets in the old file, and the reading of a row group encoded
//! whole with its kept dictionaries.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::interleave;
use arrow::datatypes::{DataType, Field, Schema};
use bytes::{Buf, Bytes};
use datafusion::error::{DataFusionError, Result};
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::schema::types::ColumnDescPtr;

use super::super::dictionary_chunk;

/// How a row group encoded whole is read: `plain` (the file's own reading), with the top-level
/// strings and binaries the dictionary encoder takes (`own`, by leaf) and whose dictionaries held
/// in the file (`kept`, field ids) read as dictionaries.
pub(super) fn dictionary_reader(
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

/// Whether the file's leaf columns are those the writer writes, one for one.
pub(super) fn same_columns(
    footer: &ParquetMetaData,
    out: &parquet::schema::types::SchemaDescriptor,
) -> bool {
    let file = footer.file_metadata().schema_descr();
    file.num_columns() == out.num_columns()
        && (0..out.num_columns()).all(|l| *file.column(l) == *out.column(l))
}

/// Where a column chunk's bytes are in its file.
pub(super) fn chunk_range(
    chunk: &parquet::file::metadata::ColumnChunkMetaData,
) -> Result<Range<u64>> {
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
pub(super) fn splice_array(
    old: &ArrayRef,
    new: &ArrayRef,
    positions: &[u64],
    at: u64,
) -> Result<ArrayRef> {
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
pub(super) struct ChunkAt {
    pub(super) start: u64,
    pub(super) bytes: Bytes,
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
pub(super) struct StoreReader {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) path: ObjectPath,
    pub(super) footer: Arc<ParquetMetaData>,
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
