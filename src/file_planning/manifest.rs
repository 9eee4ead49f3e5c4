//! Reading manifests and manifest lists as other writers write them, not only as the iceberg
//! crate expects them.
//!
//! - A manifest's Avro header should carry `schema`, `partition-spec`, `partition-spec-id`,
//!   `format-version` and `content`. Some writers (BigQuery, tools that rewrite manifests) leave
//!   them out; the iceberg crate then refuses the manifest, or reads a v2 delete manifest as v1
//!   data. Like Java's `ManifestReader`, the missing keys are taken from the manifest-list entry
//!   (spec id, content) and the table metadata (schema, spec, format version): the header is
//!   completed with them before the iceberg crate decodes the file.
//! - A manifest list's file and row counts are optional in format v1. The iceberg crate requires
//!   them when it reads the list as v2 (a v1 list in an upgraded table, or a writer that leaves
//!   them null): such a list is decoded again with every count optional.
//!
//! Both liberal paths log at debug level when they are taken.

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::types::Value;
use apache_avro::Schema as AvroSchema;
use bytes::Bytes;
use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, DataFileBuilder, FieldSummary, FormatVersion, Manifest, ManifestContentType,
    ManifestEntry, ManifestFile, ManifestStatus, TableMetadata,
};
use serde::Deserialize;

use crate::error::IcebergResultExt;

/// The first bytes of every Avro object container file.
const AVRO_MAGIC: &[u8] = b"Obj\x01";

/// Sequence number of format v1 manifests (before sequence numbers existed).
const INITIAL_SEQUENCE_NUMBER: i64 = 0;

/// Reads and decodes `manifest` of a table described by `table`; the error names it.
async fn load_manifest(
    manifest: &ManifestFile,
    table: &TableMetadata,
    file_io: &FileIO,
) -> Result<Manifest> {
    let named = |e: &dyn std::fmt::Display| {
        DataFusionError::Execution(format!(
            "manifest {} could not be read: {e}",
            manifest.manifest_path
        ))
    };
    if manifest.key_metadata.is_some() {
        // Encrypted: only the iceberg crate can open it (and its header cannot be inspected).
        return manifest.load_manifest(file_io).await.map_err(|e| named(&e));
    }
    let bytes = file_io
        .new_input(&manifest.manifest_path)
        .df()?
        .read()
        .await
        .map_err(|e| named(&e))?;
    let bytes = complete_header(bytes, manifest, table).map_err(|e| named(&e))?;
    let (metadata, entries) = parse_with_iceberg(&bytes, manifest).map_err(|e| named(&e))?;
    Ok(Manifest::new(metadata, entries))
}

/// A manifest's (completed) bytes decoded by the iceberg crate, with the spec's inheritance.
fn parse_with_iceberg(
    bytes: &[u8],
    manifest: &ManifestFile,
) -> iceberg::Result<(iceberg::spec::ManifestMetadata, Vec<ManifestEntry>)> {
    let (entries, metadata) = Manifest::parse_avro(bytes)?.into_parts();
    let mut entries: Vec<ManifestEntry> = entries
        .into_iter()
        .map(|e| {
            let mut e = Arc::unwrap_or_clone(e);
            inherit(&mut e, manifest);
            e
        })
        .collect();
    inherit_row_ids(&mut entries, manifest)?;
    Ok((metadata, entries))
}

/// The entries of `manifest`, with the spec's inheritance applied: through this crate's decoder
/// ([`super::avro_manifest`]) when it reads the file, else as [`load_manifest`]. Planning reads
/// through it, and so do commits, which write the entries back: the decoder gives every field
/// the iceberg crate gives (its tests compare the two on other writers' manifests).
pub(crate) async fn load_entries(
    manifest: &ManifestFile,
    table: &TableMetadata,
    file_io: &FileIO,
) -> Result<Vec<ManifestEntry>> {
    let named = |e: &dyn std::fmt::Display| {
        DataFusionError::Execution(format!(
            "manifest {} could not be read: {e}",
            manifest.manifest_path
        ))
    };
    if manifest.key_metadata.is_none() {
        let bytes = file_io
            .new_input(&manifest.manifest_path)
            .df()?
            .read()
            .await
            .map_err(|e| named(&e))?;
        let bytes = complete_header(bytes, manifest, table).map_err(|e| named(&e))?;
        if let Some(spec) = table.partition_spec_by_id(manifest.partition_spec_id) {
            if let Some(mut entries) =
                super::avro_manifest::decode(&bytes, spec).map_err(|e| named(&e))?
            {
                for e in &mut entries {
                    inherit(e, manifest);
                }
                inherit_row_ids(&mut entries, manifest).map_err(|e| named(&e))?;
                return Ok(entries);
            }
        }
        // Left to the iceberg crate: the bytes already read.
        let (_, entries) = parse_with_iceberg(&bytes, manifest).map_err(|e| named(&e))?;
        return Ok(entries);
    }
    let (entries, _) = load_manifest(manifest, table, file_io).await?.into_parts();
    Ok(entries.into_iter().map(Arc::unwrap_or_clone).collect())
}

/// The spec's inheritance: entries without a snapshot id or sequence numbers take them from the
/// manifest-list entry (added entries, and every entry of a v1 manifest).
fn inherit(entry: &mut ManifestEntry, manifest: &ManifestFile) {
    if entry.snapshot_id.is_none() {
        entry.snapshot_id = Some(manifest.added_snapshot_id);
    }
    let inherits = entry.status == ManifestStatus::Added
        || manifest.sequence_number == INITIAL_SEQUENCE_NUMBER;
    if inherits && entry.sequence_number.is_none() {
        entry.sequence_number = Some(manifest.sequence_number);
    }
    if inherits && entry.file_sequence_number.is_none() {
        entry.file_sequence_number = Some(manifest.sequence_number);
    }
}

/// Row lineage (format v3): data files without a `first_row_id` take the manifest's plus the
/// record counts of the entries without one before them, in file order, whatever their status.
/// (A manifest without a `first_row_id` predates row lineage: its files have none.) Commits that
/// rewrite a manifest then write each entry's ids out, so rows keep them.
fn inherit_row_ids(entries: &mut [ManifestEntry], manifest: &ManifestFile) -> iceberg::Result<()> {
    let Some(first) = manifest.first_row_id else {
        return Ok(());
    };
    if manifest.content != ManifestContentType::Data {
        return Ok(());
    }
    let mut next = first;
    for e in entries.iter_mut() {
        if e.data_file.first_row_id().is_some() {
            continue;
        }
        let rows = e.data_file.record_count();
        e.data_file = with_first_row_id(&e.data_file, next as i64, manifest.partition_spec_id)?;
        next = next.checked_add(rows).ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("row ids of {} overflow", manifest.manifest_path),
            )
        })?;
    }
    Ok(())
}

/// `file` with `first_row_id` set (every other field kept).
pub(crate) fn with_first_row_id(
    file: &DataFile,
    first_row_id: i64,
    spec_id: i32,
) -> iceberg::Result<DataFile> {
    let mut b = DataFileBuilder::default();
    b.content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(file.partition().clone())
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
        .first_row_id(Some(first_row_id))
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes());
    if let Some(id) = file.sort_order_id() {
        b.sort_order_id(id);
    }
    b.build().map_err(|e| {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("{}: {e}", file.file_path()),
        )
    })
}

fn header_schema() -> AvroSchema {
    AvroSchema::map(AvroSchema::Bytes)
}

/// The header metadata of an Avro file and the offset where the metadata map ends.
fn read_header(bytes: &[u8]) -> Result<(HashMap<String, Value>, usize)> {
    let bad = |why: String| DataFusionError::Execution(format!("not an Avro file: {why}"));
    let Some(mut rest) = bytes.strip_prefix(AVRO_MAGIC) else {
        return Err(bad("no Avro magic".into()));
    };
    let before = rest.len();
    let value = apache_avro::from_avro_datum(&header_schema(), &mut rest, None)
        .map_err(|e| bad(e.to_string()))?;
    let end = AVRO_MAGIC.len() + before - rest.len();
    match value {
        Value::Map(map) => Ok((map, end)),
        other => Err(bad(format!("header is {other:?}"))),
    }
}

/// `bytes` with the manifest metadata keys it lacks added to its header (unchanged when it has
/// them all).
fn complete_header(bytes: Bytes, manifest: &ManifestFile, table: &TableMetadata) -> Result<Bytes> {
    let (mut header, end) = read_header(&bytes)?;
    let missing: Vec<&str> = [
        "schema",
        "partition-spec",
        "partition-spec-id",
        "format-version",
        "content",
    ]
    .into_iter()
    .filter(|k| !header.contains_key(*k))
    .filter(|k| {
        // What the iceberg crate assumes without these keys holds for format v1 tables: a v1
        // manifest, of data.
        let v1 = table.format_version() == FormatVersion::V1;
        !(v1 && (*k == "format-version"
            || (*k == "content" && manifest.content == ManifestContentType::Data)))
    })
    .collect();
    if missing.is_empty() {
        return Ok(bytes);
    }
    log::debug!(
        "manifest {} lacks {} in its metadata: taken from the manifest list and table metadata",
        manifest.manifest_path,
        missing.join(", ")
    );
    let json = |v: serde_json::Result<Vec<u8>>| {
        v.map_err(|e| DataFusionError::Internal(format!("manifest metadata: {e}")))
    };
    let spec_id = match header.get("partition-spec-id") {
        Some(Value::Bytes(b)) => String::from_utf8_lossy(b).parse().map_err(|_| {
            DataFusionError::Execution("partition-spec-id in its metadata is not a number".into())
        })?,
        _ => manifest.partition_spec_id,
    };
    let schema = match header.get("schema-id") {
        Some(Value::Bytes(b)) => String::from_utf8_lossy(b)
            .parse()
            .ok()
            .and_then(|id| table.schema_by_id(id)),
        _ => None,
    }
    .unwrap_or_else(|| table.current_schema());
    for key in missing {
        let value = match key {
            "schema" => json(serde_json::to_vec(schema.as_ref()))?,
            "partition-spec" => {
                let spec = table.partition_spec_by_id(spec_id).ok_or_else(|| {
                    DataFusionError::Execution(format!(
                        "its partition spec {spec_id} is not in the table metadata"
                    ))
                })?;
                json(serde_json::to_vec(spec.fields()))?
            }
            "partition-spec-id" => spec_id.to_string().into_bytes(),
            "format-version" => json(serde_json::to_vec(&table.format_version()))?,
            _ => manifest.content.to_string().into_bytes(),
        };
        header.insert(key.to_string(), Value::Bytes(value));
    }
    let encoded = apache_avro::to_avro_datum(&header_schema(), Value::Map(header))
        .map_err(|e| DataFusionError::Internal(format!("manifest header: {e}")))?;
    let mut out = Vec::with_capacity(bytes.len() + encoded.len());
    out.extend_from_slice(AVRO_MAGIC);
    out.extend_from_slice(&encoded);
    out.extend_from_slice(&bytes[end..]);
    Ok(out.into())
}

/// A manifest-list entry with every field the spec lets some version leave out optional.
#[derive(Deserialize)]
struct LenientListEntry {
    manifest_path: String,
    manifest_length: i64,
    partition_spec_id: i32,
    #[serde(default)]
    content: i32,
    #[serde(default)]
    sequence_number: i64,
    #[serde(default)]
    min_sequence_number: i64,
    added_snapshot_id: i64,
    #[serde(default, alias = "added_data_files_count")]
    added_files_count: Option<i32>,
    #[serde(default, alias = "existing_data_files_count")]
    existing_files_count: Option<i32>,
    #[serde(default, alias = "deleted_data_files_count")]
    deleted_files_count: Option<i32>,
    #[serde(default)]
    added_rows_count: Option<i64>,
    #[serde(default)]
    existing_rows_count: Option<i64>,
    #[serde(default)]
    deleted_rows_count: Option<i64>,
    #[serde(default)]
    partitions: Option<Vec<FieldSummary>>,
    #[serde(default)]
    key_metadata: Option<serde_bytes::ByteBuf>,
    #[serde(default)]
    first_row_id: Option<i64>,
}

fn count<T: TryInto<U>, U>(v: Option<T>, what: &str) -> Result<Option<U>> {
    v.map(|n| {
        n.try_into()
            .map_err(|_| DataFusionError::Execution(format!("negative {what}")))
    })
    .transpose()
}

impl LenientListEntry {
    fn into_manifest_file(self) -> Result<ManifestFile> {
        Ok(ManifestFile {
            manifest_path: self.manifest_path,
            manifest_length: self.manifest_length,
            partition_spec_id: self.partition_spec_id,
            content: ManifestContentType::try_from(self.content).df()?,
            sequence_number: self.sequence_number,
            min_sequence_number: self.min_sequence_number,
            added_snapshot_id: self.added_snapshot_id,
            added_files_count: count(self.added_files_count, "added_files_count")?,
            existing_files_count: count(self.existing_files_count, "existing_files_count")?,
            deleted_files_count: count(self.deleted_files_count, "deleted_files_count")?,
            added_rows_count: count(self.added_rows_count, "added_rows_count")?,
            existing_rows_count: count(self.existing_rows_count, "existing_rows_count")?,
            deleted_rows_count: count(self.deleted_rows_count, "deleted_rows_count")?,
            partitions: self.partitions,
            key_metadata: self.key_metadata.map(|b| b.into_vec()),
            first_row_id: count(self.first_row_id, "first_row_id")?,
        })
    }
}

/// Decodes a manifest list by its own (writer) schema with every count optional.
pub(crate) fn parse_lenient_manifest_list(bytes: &[u8]) -> Result<Vec<ManifestFile>> {
    let reader = apache_avro::Reader::new(bytes)
        .map_err(|e| DataFusionError::Execution(format!("not an Avro file: {e}")))?;
    reader
        .map(|value| {
            let value = value.map_err(|e| DataFusionError::Execution(e.to_string()))?;
            apache_avro::from_value::<LenientListEntry>(&value)
                .map_err(|e| DataFusionError::Execution(e.to_string()))?
                .into_manifest_file()
        })
        .collect()
}

/// A live entry's data and file sequence numbers (after inheritance), as a rewritten manifest
/// keeps them.
pub(crate) fn sequence_numbers(entry: &iceberg::spec::ManifestEntry) -> Result<(i64, Option<i64>)> {
    let seq = entry.sequence_number().ok_or_else(|| {
        DataFusionError::Internal("manifest entry without sequence number".into())
    })?;
    Ok((seq, entry.file_sequence_number.or(Some(seq))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_read_back_as_written() {
        let mut map = HashMap::new();
        map.insert("a".to_string(), Value::Bytes(b"1".to_vec()));
        map.insert("avro.codec".to_string(), Value::Bytes(b"null".to_vec()));
        let mut file = AVRO_MAGIC.to_vec();
        file.extend(apache_avro::to_avro_datum(&header_schema(), Value::Map(map.clone())).unwrap());
        let body = b"0123456789abcdef-blocks";
        file.extend_from_slice(body);
        let (header, end) = read_header(&file).unwrap();
        assert_eq!(header, map);
        assert_eq!(&file[end..], body);
        assert!(read_header(b"PAR1....").is_err());
    }

    /// A data file with every field set, and `first_row_id` as given.
    fn full_file(first_row_id: Option<i64>) -> DataFile {
        use iceberg::spec::{DataContentType, DataFileFormat, Datum, Literal, Struct};
        let mut b = DataFileBuilder::default();
        b.content(DataContentType::PositionDeletes)
            .file_path("s3://b/t/data/x.puffin".into())
            .file_format(DataFileFormat::Puffin)
            .partition(Struct::from_iter([Some(Literal::int(3))]))
            .partition_spec_id(7)
            .record_count(12)
            .file_size_in_bytes(345)
            .column_sizes(HashMap::from([(1, 10)]))
            .value_counts(HashMap::from([(1, 12)]))
            .null_value_counts(HashMap::from([(1, 1)]))
            .nan_value_counts(HashMap::from([(2, 0)]))
            .lower_bounds(HashMap::from([(1, Datum::long(1))]))
            .upper_bounds(HashMap::from([(1, Datum::long(99))]))
            .key_metadata(Some(vec![1, 2]))
            .split_offsets(Some(vec![4, 8]))
            .equality_ids(Some(vec![1]))
            .sort_order_id(2)
            .first_row_id(first_row_id)
            .referenced_data_file(Some("s3://b/t/data/a.parquet".into()))
            .content_offset(Some(4))
            .content_size_in_bytes(Some(40));
        b.build().unwrap()
    }

    #[test]
    fn a_first_row_id_is_set_and_nothing_else_changes() {
        let file = full_file(None);
        assert_eq!(
            with_first_row_id(&file, 42, 7).unwrap(),
            full_file(Some(42))
        );
    }
}
