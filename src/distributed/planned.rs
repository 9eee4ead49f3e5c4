//! Planned data files (with the position deletes that apply to them) as a plan carries them:
//! partition tuples as Iceberg single-value JSON of their spec's partition type, and each delete
//! file once however many data files it applies to.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{DataContentType, Literal, Struct, TableMetadata, Type};
use serde::{Deserialize, Serialize};

use crate::error::IcebergResultExt;
use crate::file_planning::{BlobRange, DeleteFileRef, PlannedFile};
use crate::physical_plan::write::{
    non_finite_fields, partition_type_of, with_non_finite, NonFinite,
};

/// Planned data files and their delete files, encoded.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
pub(super) struct EncodedFiles {
    files: Vec<EncodedFile>,
    deletes: Vec<EncodedDelete>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct EncodedFile {
    path: String,
    size: u64,
    record_count: u64,
    data_seq: i64,
    spec_id: i32,
    partition: EncodedPartition,
    /// Indexes into [`EncodedFiles::deletes`].
    position_deletes: Vec<usize>,
    equality_deletes: bool,
    first_row_id: Option<i64>,
    /// Whether the file is an ORC file (else parquet).
    #[serde(default)]
    orc: bool,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct EncodedDelete {
    path: String,
    size: u64,
    record_count: u64,
    content: DataContentType,
    data_seq: i64,
    spec_id: i32,
    spec_unpartitioned: bool,
    partition: EncodedPartition,
    referenced_data_file: Option<String>,
    equality_ids: Vec<i32>,
    /// A deletion vector's blob: offset and length.
    deletion_vector: Option<(u64, u64)>,
}

/// A partition tuple: its single-value JSON, and the fields holding NaN or an infinity
/// (which that JSON writes as null).
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct EncodedPartition {
    json: serde_json::Value,
    non_finite: Vec<(usize, NonFinite)>,
}

fn partition_json(ty: &Type, p: &Struct) -> Result<serde_json::Value> {
    Literal::Struct(p.clone()).try_into_json(ty).df()
}

fn encode_partition(
    metadata: &TableMetadata,
    spec_id: i32,
    p: &Struct,
) -> Result<EncodedPartition> {
    Ok(EncodedPartition {
        json: partition_json(&Type::Struct(partition_type_of(metadata, spec_id)?), p)?,
        non_finite: non_finite_fields(p),
    })
}

/// The partition tuple `p` encodes. Its JSON must encode back to itself: the single-value JSON
/// of some types does not travel (nanosecond timestamps), and a tuple that came out different
/// would put a delete file in the wrong partition.
fn partition_of(metadata: &TableMetadata, spec_id: i32, p: EncodedPartition) -> Result<Struct> {
    let ty = partition_type_of(metadata, spec_id)?;
    let struct_type = Type::Struct(ty.clone());
    let decoded = match Literal::try_from_json(p.json.clone(), &struct_type).df()? {
        Some(Literal::Struct(s)) => s,
        other => {
            return Err(DataFusionError::Internal(format!(
                "undecodable partition tuple: {other:?}"
            )))
        }
    };
    if partition_json(&struct_type, &decoded)? != p.json {
        return Err(DataFusionError::NotImplemented(format!(
            "a partition tuple of spec {spec_id} ({}) cannot be sent to a worker; run the \
             statement in one session",
            p.json
        )));
    }
    match p.non_finite.is_empty() {
        true => Ok(decoded),
        false => with_non_finite(&decoded, &p.non_finite, &ty),
    }
}

impl EncodedFiles {
    /// Encodes `files` of the table `metadata` describes.
    pub(super) fn of(files: &[PlannedFile], metadata: &TableMetadata) -> Result<Self> {
        let mut index: HashMap<(String, Option<u64>), usize> = HashMap::new();
        let mut deletes = vec![];
        let mut encoded = Vec::with_capacity(files.len());
        for f in files {
            let mut position_deletes = Vec::with_capacity(f.position_deletes.len());
            for d in &f.position_deletes {
                let key = (d.path.clone(), d.deletion_vector.map(|b| b.offset));
                let i = match index.get(&key) {
                    Some(&i) => i,
                    None => {
                        deletes.push(EncodedDelete {
                            path: d.path.clone(),
                            size: d.size,
                            record_count: d.record_count,
                            content: d.content,
                            data_seq: d.data_seq,
                            spec_id: d.spec_id,
                            spec_unpartitioned: d.spec_unpartitioned,
                            partition: encode_partition(metadata, d.spec_id, &d.partition)?,
                            referenced_data_file: d.referenced_data_file.clone(),
                            equality_ids: d.equality_ids.clone(),
                            deletion_vector: d.deletion_vector.map(|b| (b.offset, b.length)),
                        });
                        index.insert(key, deletes.len() - 1);
                        deletes.len() - 1
                    }
                };
                position_deletes.push(i);
            }
            encoded.push(EncodedFile {
                path: f.path.clone(),
                size: f.size,
                record_count: f.record_count,
                data_seq: f.data_seq,
                spec_id: f.spec_id,
                partition: encode_partition(metadata, f.spec_id, &f.partition)?,
                position_deletes,
                equality_deletes: f.equality_deletes,
                first_row_id: f.first_row_id,
                orc: f.format == iceberg::spec::DataFileFormat::Orc,
            });
        }
        Ok(Self {
            files: encoded,
            deletes,
        })
    }

    /// The planned files, for the table `metadata` describes.
    pub(super) fn decode(self, metadata: &TableMetadata) -> Result<Vec<PlannedFile>> {
        let deletes = self
            .deletes
            .into_iter()
            .map(|d| {
                Ok(Arc::new(DeleteFileRef {
                    partition: partition_of(metadata, d.spec_id, d.partition)?,
                    path: d.path,
                    size: d.size,
                    record_count: d.record_count,
                    content: d.content,
                    data_seq: d.data_seq,
                    spec_id: d.spec_id,
                    spec_unpartitioned: d.spec_unpartitioned,
                    referenced_data_file: d.referenced_data_file,
                    equality_ids: d.equality_ids,
                    deletion_vector: d
                        .deletion_vector
                        .map(|(offset, length)| BlobRange { offset, length }),
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        self.files
            .into_iter()
            .map(|f| {
                let position_deletes = f
                    .position_deletes
                    .iter()
                    .map(|&i| {
                        deletes.get(i).cloned().ok_or_else(|| {
                            DataFusionError::Internal(format!("no delete file {i} was encoded"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(PlannedFile {
                    partition: partition_of(metadata, f.spec_id, f.partition)?,
                    path: f.path,
                    size: f.size,
                    record_count: f.record_count,
                    data_seq: f.data_seq,
                    spec_id: f.spec_id,
                    position_deletes,
                    equality_deletes: f.equality_deletes,
                    first_row_id: f.first_row_id,
                    format: match f.orc {
                        true => iceberg::spec::DataFileFormat::Orc,
                        false => iceberg::spec::DataFileFormat::Parquet,
                    },
                })
            })
            .collect()
    }
}
