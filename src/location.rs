//! Mapping Iceberg file locations to DataFusion object-store paths.

use datafusion::error::{DataFusionError, Result};
use object_store::path::Path as ObjectPath;

/// The local object-store path of a recorded location (`file:///abs`, `/abs`, or relative to the
/// working directory).
pub(crate) fn to_object_path(location: &str) -> Result<ObjectPath> {
    if location.contains("://") && !location.starts_with("file://") {
        return Err(DataFusionError::NotImplemented(format!(
            "only local files are supported, got '{location}'"
        )));
    }
    let raw = location.strip_prefix("file://").unwrap_or(location);
    let path = std::path::absolute(raw)
        .map_err(|e| DataFusionError::Execution(format!("bad file location '{location}': {e}")))?;
    ObjectPath::from_absolute_path(&path)
        .map_err(|e| DataFusionError::Execution(format!("bad file location '{location}': {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_and_paths_agree() {
        let a = to_object_path("file:///tmp/wh/t/data/a.parquet").unwrap();
        let b = to_object_path("/tmp/wh/t/data/a.parquet").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_ref(), "tmp/wh/t/data/a.parquet");
        assert!(to_object_path("s3://bucket/a.parquet").is_err());
    }
}
