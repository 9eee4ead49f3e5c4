//! A table's branches and tags as its metadata records them. The iceberg crate keeps the refs
//! of `TableMetadata` private; its serialized form has them.

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::TableMetadata;

/// A branch or tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableRef {
    pub(crate) name: String,
    pub(crate) snapshot_id: i64,
    /// A branch (else a tag).
    pub(crate) branch: bool,
    pub(crate) max_ref_age_ms: Option<i64>,
    /// Branches only.
    pub(crate) min_snapshots_to_keep: Option<i64>,
    /// Branches only.
    pub(crate) max_snapshot_age_ms: Option<i64>,
}

/// Every ref of `metadata`, by name.
pub(crate) fn refs(metadata: &TableMetadata) -> Result<Vec<TableRef>> {
    let json =
        serde_json::to_value(metadata).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let long = |v: &serde_json::Value| v.as_i64().or_else(|| v.as_u64().map(|u| u as i64));
    let mut out = vec![];
    for (name, r) in json["refs"].as_object().into_iter().flatten() {
        let snapshot_id = long(&r["snapshot-id"])
            .ok_or_else(|| DataFusionError::Internal(format!("ref '{name}' has no snapshot id")))?;
        let branch = r["type"] == "branch";
        out.push(TableRef {
            name: name.clone(),
            snapshot_id,
            branch,
            max_ref_age_ms: long(&r["max-ref-age-ms"]),
            min_snapshots_to_keep: long(&r["min-snapshots-to-keep"]).filter(|_| branch),
            max_snapshot_age_ms: long(&r["max-snapshot-age-ms"]).filter(|_| branch),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The ref `name` of `metadata`, if there is one.
pub(crate) fn table_ref(metadata: &TableMetadata, name: &str) -> Result<Option<TableRef>> {
    Ok(refs(metadata)?.into_iter().find(|r| r.name == name))
}

impl TableRef {
    /// The ref's retention, as the metadata builder takes it.
    pub(crate) fn retention(&self) -> iceberg::spec::SnapshotRetention {
        match self.branch {
            true => iceberg::spec::SnapshotRetention::Branch {
                min_snapshots_to_keep: self.min_snapshots_to_keep.map(|n| n as i32),
                max_snapshot_age_ms: self.max_snapshot_age_ms,
                max_ref_age_ms: self.max_ref_age_ms,
            },
            false => iceberg::spec::SnapshotRetention::Tag {
                max_ref_age_ms: self.max_ref_age_ms,
            },
        }
    }
}

/// The snapshots from `head` back through their parents (stopping at a missing one, or at a
/// cycle a broken table may have).
pub(crate) fn ancestors(
    metadata: &TableMetadata,
    head: Option<i64>,
) -> impl Iterator<Item = &iceberg::spec::SnapshotRef> + '_ {
    let mut at = head;
    let mut seen = std::collections::HashSet::new();
    std::iter::from_fn(move || {
        let s = metadata.snapshot_by_id(at?)?;
        if !seen.insert(s.snapshot_id()) {
            return None;
        }
        at = s.parent_snapshot_id();
        Some(s)
    })
}
