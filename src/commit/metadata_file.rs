//! Naming and writing table metadata files (`<location>/metadata/<version>-<uuid>.metadata.json`).

use std::str::FromStr;

use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::MetadataLocation;

use crate::error::IcebergResultExt;
use crate::file_planning::INLINE_MANIFESTS;

/// The location of the next metadata file of a table.
///
/// Follows the current file's version when its name has the standard form; otherwise (tables
/// written with other naming, such as `v3.metadata.json`) the version is the length of the
/// metadata log, so names stay increasing.
pub(crate) fn new_metadata_location(
    table_location: &str,
    current: Option<&str>,
    new_metadata: &TableMetadata,
) -> MetadataLocation {
    let table_location = table_location.trim_end_matches('/');
    match current.map(MetadataLocation::from_str) {
        Some(Ok(cur)) => cur.with_next_version().with_new_metadata(new_metadata),
        _ => {
            let base = MetadataLocation::new_with_metadata(table_location, new_metadata);
            let mut loc = base;
            for _ in 0..new_metadata.metadata_log().len() {
                loc = loc.with_next_version();
            }
            loc
        }
    }
}

/// Reads table metadata (plain or gzip JSON).
///
/// Snapshot ids are longs, but some writers print ids above `i64::MAX` as unsigned numbers (the
/// same 64 bits). Those are read back as the signed long they stand for, which is also what the
/// Avro manifest lists of such tables hold.
pub(crate) async fn read_metadata(file_io: &FileIO, location: &str) -> Result<TableMetadata> {
    let bytes = file_io.new_input(location).df()?.read().await.df()?;
    let json: Vec<u8> = if bytes.len() > 2 && bytes[0] == 0x1F && bytes[1] == 0x8B {
        let mut out = vec![];
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)?;
        out
    } else {
        bytes.to_vec()
    };
    let mut value: serde_json::Value = serde_json::from_slice(&json).map_err(|e| {
        DataFusionError::Execution(format!("table metadata {location} is not valid JSON: {e}"))
    })?;
    wrap_unsigned_snapshot_ids(&mut value);
    inline_manifest_lists(&mut value);
    default_next_row_id(&mut value, location);
    serde_json::from_value(value).map_err(|e| {
        DataFusionError::Execution(format!(
            "table metadata {location} is not valid Iceberg metadata: {e}"
        ))
    })
}

/// Refuses to write to a table whose history has v1 snapshots without a manifest list: writing
/// its metadata back would need the inline form, which this crate does not write.
pub(crate) fn refuse_inline_manifests(metadata: &TableMetadata) -> Result<()> {
    match metadata
        .snapshots()
        .find(|s| s.manifest_list().starts_with(INLINE_MANIFESTS))
    {
        Some(s) => Err(DataFusionError::NotImplemented(format!(
            "snapshot {} of this format v1 table lists its manifests inline (no manifest list): \
             iceberg-exec reads such tables but does not write to them; nothing was changed",
            s.snapshot_id()
        ))),
        None => Ok(()),
    }
}

fn inline_manifest_lists(metadata: &mut serde_json::Value) {
    let Some(snapshots) = metadata.get_mut("snapshots").and_then(|v| v.as_array_mut()) else {
        return;
    };
    for snapshot in snapshots {
        let Some(obj) = snapshot.as_object_mut() else {
            continue;
        };
        let has_list = obj.get("manifest-list").is_some_and(|v| !v.is_null());
        if has_list || !obj.get("manifests").is_some_and(|v| v.is_array()) {
            continue;
        }
        if let Some(manifests) = obj.remove("manifests") {
            obj.insert(
                "manifest-list".into(),
                serde_json::Value::String(format!("{INLINE_MANIFESTS}{manifests}")),
            );
        }
    }
}

/// Format v3 requires `next-row-id`; some writers leave it out of tables without snapshots.
/// Read liberally: the next row id is where the recorded snapshots' row ranges end (0 without
/// snapshots). When a snapshot lacks its range, the field stays missing and parsing says so.
fn default_next_row_id(metadata: &mut serde_json::Value, location: &str) {
    let Some(obj) = metadata.as_object_mut() else {
        return;
    };
    if obj.get("format-version").and_then(|v| v.as_i64()) != Some(3)
        || obj.contains_key("next-row-id")
    {
        return;
    }
    let snapshots = obj
        .get("snapshots")
        .and_then(|v| v.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let ends: Option<Vec<i64>> = snapshots
        .iter()
        .map(|s| {
            let first = s.get("first-row-id")?.as_i64()?;
            let added = s.get("added-rows")?.as_i64()?;
            first.checked_add(added)
        })
        .collect();
    if let Some(next) = ends.map(|e| e.into_iter().max().unwrap_or(0)) {
        log::debug!("table metadata {location} has no next-row-id: read as {next}");
        obj.insert("next-row-id".into(), serde_json::Value::from(next));
    }
}

fn wrap_unsigned(v: &mut serde_json::Value) {
    if let Some(u) = v.as_u64() {
        if u > i64::MAX as u64 {
            *v = serde_json::Value::from(u as i64);
        }
    }
}

fn wrap_unsigned_snapshot_ids(metadata: &mut serde_json::Value) {
    let Some(obj) = metadata.as_object_mut() else {
        return;
    };
    if let Some(v) = obj.get_mut("current-snapshot-id") {
        wrap_unsigned(v);
    }
    for list in [
        "snapshots",
        "snapshot-log",
        "statistics",
        "partition-statistics",
    ] {
        if let Some(items) = obj.get_mut(list).and_then(|v| v.as_array_mut()) {
            for item in items {
                for key in ["snapshot-id", "parent-snapshot-id"] {
                    if let Some(v) = item.get_mut(key) {
                        wrap_unsigned(v);
                    }
                }
            }
        }
    }
    if let Some(refs) = obj.get_mut("refs").and_then(|v| v.as_object_mut()) {
        for r in refs.values_mut() {
            if let Some(v) = r.get_mut("snapshot-id") {
                wrap_unsigned(v);
            }
        }
    }
}

/// Writes `metadata` to `location`, failing if a file is already there.
pub(crate) async fn write_metadata(
    file_io: &FileIO,
    metadata: &TableMetadata,
    location: &MetadataLocation,
) -> Result<String> {
    let path = location.to_string();
    if file_io.exists(&path).await.df()? {
        return Err(DataFusionError::Execution(format!(
            "metadata file {path} already exists"
        )));
    }
    metadata.write_to(file_io, location).await.df()?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_next_row_id_is_where_the_snapshots_end() {
        let mut empty = serde_json::json!({"format-version": 3, "snapshots": []});
        default_next_row_id(&mut empty, "m");
        assert_eq!(empty["next-row-id"], 0);
        let mut none = serde_json::json!({"format-version": 3});
        default_next_row_id(&mut none, "m");
        assert_eq!(none["next-row-id"], 0);
        let mut ranged = serde_json::json!({"format-version": 3, "snapshots": [
            {"first-row-id": 0, "added-rows": 10}, {"first-row-id": 10, "added-rows": 5}]});
        default_next_row_id(&mut ranged, "m");
        assert_eq!(ranged["next-row-id"], 15);
        let mut unranged = serde_json::json!({"format-version": 3, "snapshots": [{}]});
        default_next_row_id(&mut unranged, "m");
        assert!(unranged.get("next-row-id").is_none());
        let mut v2 = serde_json::json!({"format-version": 2});
        default_next_row_id(&mut v2, "m");
        assert!(v2.get("next-row-id").is_none());
        let mut kept = serde_json::json!({"format-version": 3, "next-row-id": 7});
        default_next_row_id(&mut kept, "m");
        assert_eq!(kept["next-row-id"], 7);
    }

    #[test]
    fn unsigned_ids_wrap_to_the_same_bits() {
        let mut v = serde_json::json!({
            "current-snapshot-id": 9876543210123456789u64,
            "snapshots": [{"snapshot-id": 9876543210123456789u64, "parent-snapshot-id": 5}],
            "refs": {"main": {"snapshot-id": 9876543210123456789u64}}
        });
        wrap_unsigned_snapshot_ids(&mut v);
        let wrapped = 9876543210123456789u64 as i64;
        assert!(wrapped < 0);
        assert_eq!(v["current-snapshot-id"], wrapped);
        assert_eq!(v["snapshots"][0]["snapshot-id"], wrapped);
        assert_eq!(v["snapshots"][0]["parent-snapshot-id"], 5);
        assert_eq!(v["refs"]["main"]["snapshot-id"], wrapped);
    }
}
