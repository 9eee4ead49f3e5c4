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

/// Checks an explicit location (`LOCATION`, `write.data.path`): an absolute local path or
/// `file://` URI without `.` or `..` segments or control characters. `what` names it in errors.
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
        None if location.contains("://") => {
            return Err(bad("only local paths and file:// URIs are supported"))
        }
        None => location,
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

/// Refuses a new table's location when it already holds a table's metadata (two tables would
/// share, and later clean up, each other's files).
pub(crate) fn check_location_is_free(location: &str) -> Result<()> {
    let path = location.strip_prefix("file://").unwrap_or(location);
    let metadata = std::path::Path::new(path).join("metadata");
    let Ok(entries) = std::fs::read_dir(&metadata) else {
        return Ok(());
    };
    let taken = entries
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".metadata.json"));
    if taken {
        return Err(DataFusionError::Plan(format!(
            "location '{location}' already holds an Iceberg table (metadata files in {}); \
             choose another LOCATION; nothing was changed",
            metadata.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for good in ["/data/t", "file:///data/t", "/data/t/", "/data/..t/x"] {
            check_location("LOCATION", good).unwrap();
        }
        for (bad, why) in [
            ("rel/t", "absolute"),
            ("./t", "absolute"),
            ("/data/../etc", "'..'"),
            ("file:///data/./t", "'..'"),
            ("/data/x\\..\\y", "'..'"),
            ("/data/\0t", "control"),
            ("s3://bucket/t", "only local"),
        ] {
            let e = check_location("LOCATION", bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_location_holding_metadata_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let loc = dir.path().display().to_string();
        check_location_is_free(&loc).unwrap();
        std::fs::create_dir(dir.path().join("metadata")).unwrap();
        std::fs::write(dir.path().join("metadata/notes.txt"), "x").unwrap();
        check_location_is_free(&format!("file://{loc}")).unwrap();
        std::fs::write(dir.path().join("metadata/00000-a.metadata.json"), "{}").unwrap();
        let e = check_location_is_free(&loc).unwrap_err().to_string();
        assert!(e.contains("already holds an Iceberg table"), "{e}");
    }
}
