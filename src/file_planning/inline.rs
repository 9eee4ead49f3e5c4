//! Format v1 snapshots that list their manifests inline.

use datafusion::error::{DataFusionError, Result};

/// How a format v1 snapshot that lists its manifests inline (the `manifests` field, written
/// before manifest lists existed) is carried in [`Snapshot::manifest_list`]: this prefix and the
/// JSON array of manifest locations. The iceberg crate reads only snapshots with a manifest list,
/// so the metadata reader (`commit::metadata_file::read_metadata`) rewrites such snapshots this
/// way, planning reads the manifests named ([`inline_manifests`]), and commits refuse tables that
/// have them (`refuse_inline_manifests`, checked by the providers before writing and by every
/// commit), so the form never reaches a metadata file.
///
/// [`Snapshot::manifest_list`]: iceberg::spec::Snapshot::manifest_list
pub(crate) const INLINE_MANIFESTS: &str = "iceberg-exec-inline-manifests:";

/// The manifest locations of a snapshot whose manifest list is carried inline.
pub(crate) fn inline_manifests(manifest_list: &str) -> Option<Result<Vec<String>>> {
    let json = manifest_list.strip_prefix(INLINE_MANIFESTS)?;
    Some(
        serde_json::from_str(json)
            .map_err(|e| DataFusionError::Internal(format!("inline manifest list {json}: {e}"))),
    )
}
