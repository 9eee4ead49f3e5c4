//! Writing deletion vectors (format v3): data files' deleted positions as `deletion-vector-v1`
//! blobs in a Puffin file, through the iceberg crate's Puffin writer, each described as a
//! [`NewFile`] (a position delete entry naming its data file, blob offset and length).
//!
//! ```text
//!  "PFA1" │ DV(data file 1) │ DV(data file 2) │ ... │ footer "PFA1" JSON size flags "PFA1"
//!         ▲ offset 4        ▲ 4 + len(DV 1)
//! ```
//! Blobs are stored uncompressed (the spec forbids compressing them), so each offset is known
//! before the footer is written: 4 plus the lengths of the blobs before it.

use std::collections::HashMap;

use datafusion::error::{DataFusionError, Result};
use iceberg::puffin::{
    Blob, CompressionCodec, PuffinWriter, CREATED_BY_PROPERTY, DELETION_VECTOR_V1,
};
use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Struct};
use iceberg::table::Table;
use iceberg::writer::file_writer::location_generator::LocationGenerator;
use roaring::RoaringTreemap;

use super::delete_files::partition_key;
use super::locations::FileLocations;
use crate::commit::NewFile;
use crate::error::IcebergResultExt;
use crate::physical_plan::positional_delete::dv;

/// The Puffin magic that opens the file, before the first blob.
const PUFFIN_HEADER_BYTES: u64 = 4;

/// One data file's deleted positions, to be written as a deletion vector.
#[derive(Debug, Clone)]
pub struct DeletionVector {
    /// Recorded location of the data file.
    pub data_file: String,
    /// The data file's partition spec.
    pub spec_id: i32,
    /// The data file's partition tuple.
    pub partition: Struct,
    /// Its deleted positions (all of them: a vector replaces the file's earlier deletes).
    pub positions: RoaringTreemap,
}

/// Writes `vectors` (for distinct data files, each non-empty) into one Puffin file in the
/// table's data location and describes each as a delete entry. The file goes under the first
/// vector's partition path.
pub async fn write_deletion_vectors(
    table: &Table,
    vectors: &[DeletionVector],
) -> Result<Vec<NewFile>> {
    let Some(first) = vectors.first() else {
        return Ok(vec![]);
    };
    let mut seen = std::collections::HashSet::new();
    for v in vectors {
        if v.positions.is_empty() {
            return Err(DataFusionError::Internal(format!(
                "an empty deletion vector for {}",
                v.data_file
            )));
        }
        if !seen.insert(v.data_file.as_str()) {
            return Err(DataFusionError::Internal(format!(
                "two deletion vectors for {} in one commit",
                v.data_file
            )));
        }
    }
    let metadata = table.metadata();
    let key = partition_key(table, first.spec_id, first.partition.clone())?;
    let name = format!("{}-deletes.puffin", uuid::Uuid::new_v4());
    let location = FileLocations::new(metadata)?.generate_location(key.as_ref(), &name);
    let output = table.file_io().new_output(&location).df()?;
    let properties = HashMap::from([(
        CREATED_BY_PROPERTY.to_string(),
        format!("iceberg-exec {}", env!("CARGO_PKG_VERSION")),
    )]);
    let mut writer = PuffinWriter::new(&output, properties, false).await.df()?;
    let mut offset = PUFFIN_HEADER_BYTES;
    let mut ranges = Vec::with_capacity(vectors.len());
    for v in vectors {
        let data = dv::encode(&v.positions)?;
        let length = data.len() as u64;
        let blob = Blob::builder()
            .r#type(DELETION_VECTOR_V1.to_string())
            .fields(vec![])
            .snapshot_id(-1)
            .sequence_number(-1)
            .data(data)
            .properties(HashMap::from([
                ("referenced-data-file".to_string(), v.data_file.clone()),
                ("cardinality".to_string(), v.positions.len().to_string()),
            ]))
            .build();
        writer.add(blob, CompressionCodec::None).await.df()?;
        ranges.push((offset, length));
        offset += length;
    }
    writer.close().await.df()?;
    let size = output.to_input_file().metadata().await.df()?.size;
    vectors
        .iter()
        .zip(ranges)
        .map(|(v, (offset, length))| {
            let file = DataFileBuilder::default()
                .content(DataContentType::PositionDeletes)
                .file_path(location.clone())
                .file_format(DataFileFormat::Puffin)
                .partition(v.partition.clone())
                .partition_spec_id(v.spec_id)
                .record_count(v.positions.len())
                .file_size_in_bytes(size)
                .referenced_data_file(Some(v.data_file.clone()))
                .content_offset(Some(offset as i64))
                .content_size_in_bytes(Some(length as i64))
                .build()
                .map_err(|e| DataFusionError::Internal(format!("deletion vector entry: {e}")))?;
            Ok(NewFile {
                spec_id: v.spec_id,
                file,
            })
        })
        .collect()
}
