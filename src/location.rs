//! Where recorded file locations live now: relative paths resolve against a base directory, and
//! recorded prefixes map to new ones (tables whose files moved since they were written).

use std::path::{Path, PathBuf};

use datafusion::error::{DataFusionError, Result};
use object_store::path::Path as ObjectPath;
use serde::{Deserialize, Serialize};

/// Rewrites recorded file locations to where the files are now.
///
/// Rules, in order: the longest matching prefix mapping replaces the recorded prefix; a relative
/// location is joined to the base directory (the working directory when none is set);
/// `file://` URIs and absolute paths are used as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocationMap {
    base_dir: Option<PathBuf>,
    prefixes: Vec<(String, String)>,
}

impl LocationMap {
    /// Resolves relative locations against `dir`.
    pub fn with_base_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.base_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Maps locations that start with `from` to start with `to` instead.
    pub fn with_prefix(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.prefixes.push((from.into(), to.into()));
        self.prefixes
            .sort_by_key(|(f, _)| std::cmp::Reverse(f.len()));
        self
    }

    /// Whether this map changes nothing.
    pub fn is_identity(&self) -> bool {
        self.base_dir.is_none() && self.prefixes.is_empty()
    }

    /// The location as a local path or URI that can be opened now.
    pub fn resolve(&self, location: &str) -> String {
        let mapped = self
            .prefixes
            .iter()
            .find(|(from, _)| location.starts_with(from.as_str()))
            .map(|(from, to)| format!("{to}{}", &location[from.len()..]));
        let location = mapped.as_deref().unwrap_or(location);
        if location.contains("://") || location.starts_with('/') {
            return location.to_string();
        }
        match &self.base_dir {
            Some(base) => base.join(location).display().to_string(),
            None => location.to_string(),
        }
    }

    /// The object-store path of a recorded location, for DataFusion's readers.
    pub(crate) fn object_path(&self, location: &str) -> Result<ObjectPath> {
        to_object_path(&self.resolve(location))
    }
}

/// The local object-store path of a location (`file:///abs`, `/abs`, or relative to the working
/// directory).
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

    #[test]
    fn relative_and_prefixed_locations() {
        let m = LocationMap::default()
            .with_base_dir("/fixtures/iceberg")
            .with_prefix("s3://bucket/wh/", "/restore/wh/")
            .with_prefix("s3://bucket/", "/restore/other/");
        assert_eq!(
            m.resolve("lineitem/data/a.parquet"),
            "/fixtures/iceberg/lineitem/data/a.parquet"
        );
        assert_eq!(
            m.resolve("./t/metadata/v1.json"),
            "/fixtures/iceberg/./t/metadata/v1.json"
        );
        assert_eq!(
            m.resolve("s3://bucket/wh/t/a.parquet"),
            "/restore/wh/t/a.parquet"
        );
        assert_eq!(
            m.resolve("s3://bucket/x.parquet"),
            "/restore/other/x.parquet"
        );
        assert_eq!(m.resolve("/abs/a.parquet"), "/abs/a.parquet");
        assert_eq!(m.resolve("file:///abs/a.parquet"), "file:///abs/a.parquet");
        assert!(LocationMap::default().is_identity());
        assert_eq!(LocationMap::default().resolve("rel/a"), "rel/a");
    }
}
