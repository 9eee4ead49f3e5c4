//! Where recorded file locations live now: relative paths resolve against a base directory, and
//! recorded prefixes map to new ones (tables whose files moved since they were written).

use std::path::{Path, PathBuf};

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
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
    ///
    /// What a mapping or the base directory resolves stays under it: a recorded location whose
    /// `..` segments climb above the mapped prefix or the base directory is refused.
    pub fn resolve(&self, location: &str) -> Result<String> {
        let mapped = self
            .prefixes
            .iter()
            .find(|(from, _)| location.starts_with(from.as_str()));
        if let Some((from, to)) = mapped {
            let rest = &location[from.len()..];
            check_within(location, rest, to)?;
            return Ok(format!("{to}{rest}"));
        }
        if location.contains("://") || location.starts_with('/') {
            return Ok(location.to_string());
        }
        match &self.base_dir {
            Some(base) => {
                check_within(location, location, &base.display().to_string())?;
                Ok(base.join(location).display().to_string())
            }
            None => Ok(location.to_string()),
        }
    }

    /// The object-store path of a recorded location, for DataFusion's readers.
    pub(crate) fn object_path(&self, location: &str) -> Result<ObjectPath> {
        Ok(self.locate(location)?.path)
    }

    /// The store and path of a recorded location.
    pub(crate) fn locate(&self, location: &str) -> Result<super::Located> {
        super::locate(&self.resolve(location)?)
    }

    /// The store a table's files are read from: the one holding its location.
    pub(crate) fn store_url(&self, table_location: &str) -> Result<ObjectStoreUrl> {
        Ok(self.locate(table_location)?.url)
    }

    /// The path of a recorded location inside the store `url`; a file in another store is
    /// refused (one scan reads from one store).
    pub(crate) fn object_path_in(
        &self,
        url: &ObjectStoreUrl,
        location: &str,
    ) -> Result<ObjectPath> {
        let located = self.locate(location)?;
        if &located.url != url {
            return Err(DataFusionError::NotImplemented(format!(
                "file '{location}' is in {}, not in {url} with the table's other files: tables \
                 whose files span object stores are not supported",
                located.url
            )));
        }
        Ok(located.path)
    }
}

/// Refuses `rest` (the part of `location` resolved against `under`) when its `..` segments
/// climb above where it starts.
fn check_within(location: &str, rest: &str, under: &str) -> Result<()> {
    let mut depth: usize = 0;
    for segment in rest.split(['/', '\\']) {
        match segment {
            "" | "." => {}
            ".." => {
                depth = depth.checked_sub(1).ok_or_else(|| {
                    DataFusionError::Plan(format!(
                        "recorded location '{location}' climbs out of '{under}' with '..': refused"
                    ))
                })?
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// A file to scan at `location` (an object-store path, as [`ObjectPath`] displays it), of
/// `size` bytes. The path is taken as it is: building a [`PartitionedFile`] from a string would
/// encode its `%` again, and files whose names hold escapes (Java writes `part=a%2Fb`) would not
/// be found.
///
/// [`PartitionedFile`]: datafusion::datasource::listing::PartitionedFile
pub(crate) fn file_at(
    location: &str,
    size: u64,
) -> Result<datafusion::datasource::listing::PartitionedFile> {
    Ok(object_store::ObjectMeta {
        location: parsed_object_path(location)?,
        last_modified: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
        size,
        e_tag: None,
        version: None,
    }
    .into())
}

/// The object-store path `location` displays as (the inverse of its `Display`).
pub(crate) fn parsed_object_path(location: &str) -> Result<ObjectPath> {
    ObjectPath::parse(location)
        .map_err(|e| DataFusionError::Execution(format!("bad file location '{location}': {e}")))
}

/// Checks an explicit location (`LOCATION`, `write.data.path`, a warehouse): an absolute local
/// path, a `file://` URI, or an object-store URI with a bucket (`s3://bucket/prefix`), without
/// `.` or `..` segments or control characters. `what` names it in errors.
pub(crate) fn check_location(what: &str, location: &str) -> Result<()> {
    let bad = |why: &str| {
        DataFusionError::Plan(format!(
            "invalid {what} '{}': {why}; nothing was changed",
            location.escape_debug()
        ))
    };
    if location.chars().any(char::is_control) {
        return Err(bad("control characters are not allowed in locations"));
    }
    let path = match location.strip_prefix("file://") {
        Some(p) => p,
        None => match super::remote_scheme(location) {
            Some(scheme) => {
                let rest = &location[scheme.len() + 3..];
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("an object-store location names its bucket"));
                }
                if key.split('/').any(|s| s == "." || s == "..") {
                    return Err(bad("a location must not contain '.' or '..' segments"));
                }
                return Ok(());
            }
            None if location.contains("://") => return Err(bad("unrecognised URI scheme")),
            None => location,
        },
    };
    if !path.starts_with('/') {
        return Err(bad(
            "a location must be absolute (a path starting with '/')",
        ));
    }
    if path.split(['/', '\\']).any(|s| s == "." || s == "..") {
        return Err(bad("a location must not contain '.' or '..' segments"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_prefixed_locations() {
        let m = LocationMap::default()
            .with_base_dir("/fixtures/iceberg")
            .with_prefix("s3://bucket/wh/", "/restore/wh/")
            .with_prefix("s3://bucket/", "/restore/other/");
        let m = |l: &str| m.resolve(l).unwrap();
        assert_eq!(
            m("lineitem/data/a.parquet"),
            "/fixtures/iceberg/lineitem/data/a.parquet"
        );
        assert_eq!(
            m("./t/metadata/v1.json"),
            "/fixtures/iceberg/./t/metadata/v1.json"
        );
        assert_eq!(m("s3://bucket/wh/t/a.parquet"), "/restore/wh/t/a.parquet");
        assert_eq!(m("s3://bucket/x.parquet"), "/restore/other/x.parquet");
        assert_eq!(m("/abs/a.parquet"), "/abs/a.parquet");
        assert_eq!(m("file:///abs/a.parquet"), "file:///abs/a.parquet");
        assert_eq!(m("t/../u/a.parquet"), "/fixtures/iceberg/t/../u/a.parquet");
        assert!(LocationMap::default().is_identity());
        assert_eq!(LocationMap::default().resolve("rel/a").unwrap(), "rel/a");
    }

    #[test]
    fn resolved_locations_stay_under_their_base_and_prefix() {
        let m = LocationMap::default()
            .with_base_dir("/fixtures/iceberg")
            .with_prefix("s3://bucket/wh/", "/restore/wh/");
        for bad in [
            "../etc/passwd",
            "t/../../etc/passwd",
            "t\\..\\..\\x",
            "s3://bucket/wh/../../etc/passwd",
            "s3://bucket/wh/t/../../x",
        ] {
            let e = m.resolve(bad).unwrap_err().to_string();
            assert!(e.contains("climbs out of"), "{bad}: {e}");
            assert!(m.object_path(bad).is_err(), "{bad}");
        }
    }
}
