//! What names and locations the catalog accepts: a name never chooses where files go outside
//! its parent's location, and an explicit location is an absolute place that holds no table yet.
//!
//! A table's default location is `<warehouse>/<namespace levels>/<table>`, so each name is one
//! path segment. Names that could act as more (or other) than one segment are refused, not
//! encoded: `/` and `\` (separators), the segments `.` and `..`, NUL and the other control
//! characters, and, in a namespace level, `.` (the catalog's level separator). Refusing keeps
//! the catalog readable by every engine: Java's `JdbcCatalog` and pyiceberg's `SqlCatalog` join
//! names into locations as they are, so an encoded name would lead them elsewhere.

use datafusion::error::{DataFusionError, Result};
use iceberg::NamespaceIdent;

/// Why `name` cannot be one path segment, if it cannot.
fn segment_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name == "." || name == ".." {
        Some("'.' and '..' name directories relative to others")
    } else if name.contains('/') || name.contains('\\') {
        Some("'/' and '\\' separate directories")
    } else if name.chars().any(char::is_control) {
        Some("control characters (NUL among them) are not allowed in names")
    } else {
        None
    }
}

fn refused(what: &str, name: &str, why: &str) -> DataFusionError {
    DataFusionError::Plan(format!(
        "invalid {what} '{}': {why}; nothing was changed",
        name.escape_debug()
    ))
}

/// Checks a table name.
pub(crate) fn check_table_name(name: &str) -> Result<()> {
    match segment_problem(name) {
        Some(why) => Err(refused("table name", name, why)),
        None => Ok(()),
    }
}

/// Checks every level of a namespace.
pub(crate) fn check_namespace(ns: &NamespaceIdent) -> Result<()> {
    for level in ns.as_ref() {
        if let Some(why) = segment_problem(level) {
            return Err(refused("namespace", level, why));
        }
        if level.contains('.') {
            return Err(refused(
                "namespace",
                level,
                "'.' separates namespace levels in the catalog, so a level cannot contain it",
            ));
        }
    }
    Ok(())
}

/// Refuses a new table's location when it already holds a table's metadata (two tables would
/// share, and later clean up, each other's files).
pub(crate) async fn check_location_is_free(
    stores: &crate::storage::ObjectStores,
    location: &str,
) -> Result<()> {
    let taken = |shown: &str| {
        DataFusionError::Plan(format!(
            "location '{location}' already holds an Iceberg table (metadata files in {shown}); \
             choose another LOCATION; nothing was changed"
        ))
    };
    if crate::storage::remote_scheme(location).is_some() {
        use futures::TryStreamExt;
        let dir = format!("{}/metadata", location.trim_end_matches('/'));
        let located = crate::storage::locate(&dir)?;
        let store = stores.store(&located.url)?;
        let listed: Vec<object_store::ObjectMeta> = store
            .list(Some(&located.path))
            .try_collect()
            .await
            .map_err(|e| DataFusionError::Execution(format!("cannot list '{dir}': {e}")))?;
        if listed
            .iter()
            .any(|m| m.location.as_ref().ends_with(".metadata.json"))
        {
            return Err(taken(&dir));
        }
        return Ok(());
    }
    let path = location.strip_prefix("file://").unwrap_or(location);
    let metadata = std::path::Path::new(path).join("metadata");
    let Ok(entries) = std::fs::read_dir(&metadata) else {
        return Ok(());
    };
    if entries
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".metadata.json"))
    {
        return Err(taken(&metadata.display().to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::location::check_location;

    #[test]
    fn names_that_are_not_one_segment_are_refused() {
        for bad in [
            "", ".", "..", "a/b", "../x", "a\\b", "..\\x", "a\0b", "a\nb", "a\u{7f}",
        ] {
            let e = check_table_name(bad).unwrap_err().to_string();
            assert!(e.contains("invalid table name"), "{bad:?}: {e}");
            assert!(!e.contains('\n') && !e.contains('\0'), "{bad:?}: {e}");
            let ns = NamespaceIdent::from_strs(["ok", bad]).unwrap();
            assert!(check_namespace(&ns).is_err(), "{bad:?}");
        }
        for good in ["t", "t.v2", "..t", "a b", "ünïcode", "x-y_z"] {
            check_table_name(good).unwrap();
        }
        check_namespace(&NamespaceIdent::from_strs(["a", "b"]).unwrap()).unwrap();
        let dotted = NamespaceIdent::from_strs(["a.b"]).unwrap();
        assert!(check_namespace(&dotted)
            .unwrap_err()
            .to_string()
            .contains("separates namespace levels"));
    }

    #[test]
    fn locations_are_absolute_without_dot_segments() {
        for good in [
            "/data/t",
            "file:///data/t",
            "/data/t/",
            "/data/..t/x",
            "s3://bucket/t",
            "s3://bucket",
        ] {
            check_location("LOCATION", good).unwrap();
        }
        for (bad, why) in [
            ("rel/t", "absolute"),
            ("./t", "absolute"),
            ("/data/../etc", "'..'"),
            ("file:///data/./t", "'..'"),
            ("/data/x\\..\\y", "'..'"),
            ("/data/\0t", "control"),
            ("s3:///t", "bucket"),
            ("s3://bucket/a/../t", "'..'"),
            ("mailto:x", "absolute"),
        ] {
            let e = check_location("LOCATION", bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[tokio::test]
    async fn a_location_holding_metadata_is_taken() {
        let stores = crate::storage::ObjectStores::standalone(Default::default());
        let dir = tempfile::tempdir().unwrap();
        let loc = dir.path().display().to_string();
        check_location_is_free(&stores, &loc).await.unwrap();
        std::fs::create_dir(dir.path().join("metadata")).unwrap();
        std::fs::write(dir.path().join("metadata/notes.txt"), "x").unwrap();
        check_location_is_free(&stores, &format!("file://{loc}"))
            .await
            .unwrap();
        std::fs::write(dir.path().join("metadata/00000-a.metadata.json"), "{}").unwrap();
        let e = check_location_is_free(&stores, &loc)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("already holds an Iceberg table"), "{e}");
    }
}
