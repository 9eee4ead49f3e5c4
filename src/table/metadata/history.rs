//! The metadata tables read from the metadata file alone: `snapshots`, `history`,
//! `metadata_log_entries`, `refs`.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, MapBuilder, RecordBatch, StringArray,
    StringBuilder, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::Result;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;

use super::{timestamp_type, MetadataKind};

/// The columns of `kind` (Spark's).
pub(super) fn schema(kind: MetadataKind) -> SchemaRef {
    let ts = timestamp_type;
    let fields = match kind {
        MetadataKind::Snapshots => vec![
            Field::new("committed_at", ts(), false),
            Field::new("snapshot_id", DataType::Int64, false),
            Field::new("parent_id", DataType::Int64, true),
            Field::new("operation", DataType::Utf8, true),
            Field::new("manifest_list", DataType::Utf8, false),
            Field::new("summary", summary_type(), true),
        ],
        MetadataKind::History => vec![
            Field::new("made_current_at", ts(), false),
            Field::new("snapshot_id", DataType::Int64, false),
            Field::new("parent_id", DataType::Int64, true),
            Field::new("is_current_ancestor", DataType::Boolean, false),
        ],
        MetadataKind::MetadataLogEntries => vec![
            Field::new("timestamp", ts(), false),
            Field::new("file", DataType::Utf8, false),
            Field::new("latest_snapshot_id", DataType::Int64, true),
            Field::new("latest_schema_id", DataType::Int32, true),
            Field::new("latest_sequence_number", DataType::Int64, true),
        ],
        _ => vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("type", DataType::Utf8, false),
            Field::new("snapshot_id", DataType::Int64, false),
            Field::new("max_reference_age_in_ms", DataType::Int64, true),
            Field::new("min_snapshots_to_keep", DataType::Int32, true),
            Field::new("max_snapshot_age_in_ms", DataType::Int64, true),
        ],
    };
    Arc::new(Schema::new(fields))
}

/// `map<string, string>` as Arrow's map builder makes it.
fn summary_type() -> DataType {
    super::files::type_of(MapBuilder::new(
        None,
        StringBuilder::new(),
        StringBuilder::new(),
    ))
}

/// The one batch of `kind`.
pub(super) fn batch(table: &Table, kind: MetadataKind, schema: &SchemaRef) -> Result<RecordBatch> {
    let md = table.metadata();
    let columns = match kind {
        MetadataKind::Snapshots => snapshots(md),
        MetadataKind::History => history(md),
        MetadataKind::MetadataLogEntries => log_entries(table),
        _ => refs(md)?,
    };
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

fn timestamps(values: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampMillisecondArray::from(values).with_timezone("+00:00"))
}

fn snapshots(md: &TableMetadata) -> Vec<ArrayRef> {
    let mut list: Vec<_> = md.snapshots().collect();
    list.sort_by_key(|s| (s.timestamp_ms(), s.sequence_number()));
    let mut summary = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for s in &list {
        let mut props: Vec<_> = s.summary().additional_properties.iter().collect();
        props.sort();
        for (k, v) in props {
            summary.keys().append_value(k);
            summary.values().append_value(v);
        }
        // Appending an entry cannot fail once keys and values match in number.
        let _ = summary.append(true);
    }
    vec![
        timestamps(list.iter().map(|s| s.timestamp_ms()).collect()),
        Arc::new(Int64Array::from_iter_values(
            list.iter().map(|s| s.snapshot_id()),
        )),
        Arc::new(Int64Array::from_iter(
            list.iter().map(|s| s.parent_snapshot_id()),
        )),
        Arc::new(StringArray::from_iter(
            list.iter().map(|s| Some(s.summary().operation.as_str())),
        )),
        Arc::new(StringArray::from_iter_values(
            list.iter().map(|s| s.manifest_list()),
        )),
        Arc::new(summary.finish()),
    ]
}

/// The ids of the current snapshot and its ancestors.
fn current_ancestors(md: &TableMetadata) -> HashSet<i64> {
    crate::commit::refs::ancestors(md, md.current_snapshot_id())
        .map(|s| s.snapshot_id())
        .collect()
}

fn history(md: &TableMetadata) -> Vec<ArrayRef> {
    let ancestors = current_ancestors(md);
    let log: Vec<_> = md.history().to_vec();
    vec![
        timestamps(log.iter().map(|e| e.timestamp_ms).collect()),
        Arc::new(Int64Array::from_iter_values(
            log.iter().map(|e| e.snapshot_id),
        )),
        Arc::new(Int64Array::from_iter(log.iter().map(|e| {
            md.snapshot_by_id(e.snapshot_id)
                .and_then(|s| s.parent_snapshot_id())
        }))),
        Arc::new(BooleanArray::from_iter(
            log.iter().map(|e| Some(ancestors.contains(&e.snapshot_id))),
        )),
    ]
}

/// The metadata files of the log, then the current one; each with the snapshot that was
/// current at its time (the newest of the snapshot log at or before it, as Java finds it).
fn log_entries(table: &Table) -> Vec<ArrayRef> {
    let md = table.metadata();
    let mut entries: Vec<(i64, String)> = md
        .metadata_log()
        .iter()
        .map(|e| (e.timestamp_ms, e.metadata_file.clone()))
        .collect();
    if let Some(location) = table.metadata_location() {
        entries.push((md.last_updated_ms(), location.to_string()));
    }
    let latest = |at: i64| {
        md.history()
            .iter()
            .filter(|e| e.timestamp_ms <= at)
            .max_by_key(|e| e.timestamp_ms)
            .and_then(|e| md.snapshot_by_id(e.snapshot_id))
    };
    let snapshots: Vec<_> = entries.iter().map(|(at, _)| latest(*at)).collect();
    vec![
        timestamps(entries.iter().map(|(at, _)| *at).collect()),
        Arc::new(StringArray::from_iter_values(
            entries.iter().map(|(_, f)| f.as_str()),
        )),
        Arc::new(Int64Array::from_iter(
            snapshots.iter().map(|s| s.map(|s| s.snapshot_id())),
        )),
        Arc::new(Int32Array::from_iter(
            snapshots.iter().map(|s| s.and_then(|s| s.schema_id())),
        )),
        Arc::new(Int64Array::from_iter(
            snapshots.iter().map(|s| s.map(|s| s.sequence_number())),
        )),
    ]
}

/// Branches and tags, by name.
fn refs(md: &TableMetadata) -> Result<Vec<ArrayRef>> {
    let refs = crate::commit::refs::refs(md)?;
    Ok(vec![
        Arc::new(StringArray::from_iter_values(
            refs.iter().map(|r| r.name.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(refs.iter().map(|r| {
            if r.branch {
                "BRANCH"
            } else {
                "TAG"
            }
        }))),
        Arc::new(Int64Array::from_iter_values(
            refs.iter().map(|r| r.snapshot_id),
        )),
        Arc::new(Int64Array::from_iter(refs.iter().map(|r| r.max_ref_age_ms))),
        Arc::new(Int32Array::from_iter(
            refs.iter()
                .map(|r| r.min_snapshots_to_keep.map(|n| n as i32)),
        )),
        Arc::new(Int64Array::from_iter(
            refs.iter().map(|r| r.max_snapshot_age_ms),
        )),
    ])
}
