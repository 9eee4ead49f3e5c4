//! Opening a table from its files: a `metadata.json` path, or a table directory
//! (`metadata/version-hint.text`, else the highest-versioned metadata file).

use std::path::{Path, PathBuf};

use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};

use crate::catalog::table_handle;
use crate::location::LocationMap;
use crate::snapshot::metadata_file::read_metadata;
use crate::storage::file_io_for;

fn is_metadata_file(name: &str) -> bool {
    name.ends_with(".metadata.json") || name.ends_with(".metadata.json.gz")
}

/// The version a metadata file name carries: `v12.metadata.json` → 12,
/// `00012-<uuid>.metadata.json` → 12.
fn version_of(name: &str) -> Option<u64> {
    let stem = name.strip_prefix('v').unwrap_or(name);
    let digits: String = stem.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The metadata file a `version-hint.text` that is not a number designates: a whole file name,
/// or a stem such as `00001-<uuid>` or `v1` (the forms other writers leave there).
fn hinted_file(dir: &Path, text: &str) -> Option<PathBuf> {
    if text.is_empty() || text.contains(['/', '\\']) || text == ".." {
        return None;
    }
    let names = [
        text.to_string(),
        format!("{text}.metadata.json"),
        format!("{text}.gz.metadata.json"),
        format!("{text}.metadata.json.gz"),
        format!("v{text}.metadata.json"),
    ];
    let found = names.iter().map(|n| dir.join(n)).find(|p| p.is_file());
    if let Some(p) = &found {
        log::debug!("version-hint.text '{text}' read as {}", p.display());
    }
    found
}

/// The metadata file a path designates.
pub fn find_metadata_file(path: &Path) -> Result<PathBuf> {
    let not_found = |why: String| {
        DataFusionError::Plan(format!("no Iceberg table at '{}': {why}", path.display()))
    };
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    if !path.is_dir() {
        return Err(not_found("no such file or directory".into()));
    }
    let dir = if path.join("metadata").is_dir() {
        path.join("metadata")
    } else {
        path.to_path_buf()
    };
    let mut candidates: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .map_err(|e| not_found(e.to_string()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            is_metadata_file(&name).then(|| (version_of(&name).unwrap_or(0), e.path()))
        })
        .collect();
    let hint = dir.join("version-hint.text");
    if hint.is_file() {
        let text = std::fs::read_to_string(&hint).map_err(|e| not_found(e.to_string()))?;
        let text = text.trim();
        if let Ok(v) = text.parse::<u64>() {
            if let Some((_, p)) = candidates.iter().find(|(cv, p)| {
                *cv == v
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('v'))
            }) {
                return Ok(p.clone());
            }
            if let Some((_, p)) = candidates.iter().find(|(cv, _)| *cv == v) {
                return Ok(p.clone());
            }
        } else if let Some(p) = hinted_file(&dir, text) {
            return Ok(p);
        }
        return Err(not_found(format!(
            "version-hint.text names version '{text}', which has no metadata file"
        )));
    }
    candidates.sort();
    let Some((top, newest)) = candidates.pop() else {
        return Err(not_found(format!(
            "no *.metadata.json in {}",
            dir.display()
        )));
    };
    if candidates.last().is_some_and(|(v, _)| *v == top) {
        // Catalog tables leave the metadata of lost commits behind under the same version:
        // only the catalog knows which one is current.
        return Err(not_found(format!(
            "several metadata files have version {top} in {}; name the metadata.json to read",
            dir.display()
        )));
    }
    Ok(newest)
}

/// Opens the table at `path` (read-only), resolving recorded locations through `locations`.
pub async fn open_table_at(path: &Path, locations: &LocationMap) -> Result<Table> {
    let metadata_file = find_metadata_file(path)?;
    let metadata_file = std::path::absolute(&metadata_file)?;
    let shown = metadata_file.display().to_string();
    let metadata = read_metadata(&FileIO::new_with_fs(), &shown).await?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| shown.clone());
    let ident = TableIdent::new(NamespaceIdent::new("path".to_string()), name);
    table_handle(ident, shown, metadata, file_io_for(locations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(version_of("v12.metadata.json"), Some(12));
        assert_eq!(version_of("00012-6a1b.metadata.json"), Some(12));
        assert_eq!(version_of("vfinal.metadata.json"), None);
    }

    #[test]
    fn ambiguous_versions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let md = dir.path().join("metadata");
        std::fs::create_dir(&md).unwrap();
        for n in [
            "00001-aaaa.metadata.json",
            "00001-bbbb.metadata.json",
            "00000-cccc.metadata.json",
        ] {
            std::fs::write(md.join(n), "{}").unwrap();
        }
        let e = find_metadata_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("several metadata files have version 1"), "{e}");
    }

    #[test]
    fn picks_hint_then_highest() {
        let dir = tempfile::tempdir().unwrap();
        let md = dir.path().join("metadata");
        std::fs::create_dir(&md).unwrap();
        for n in ["v1.metadata.json", "v2.metadata.json", "v10.metadata.json"] {
            std::fs::write(md.join(n), "{}").unwrap();
        }
        assert_eq!(
            find_metadata_file(dir.path()).unwrap(),
            md.join("v10.metadata.json")
        );
        std::fs::write(md.join("version-hint.text"), "2\n").unwrap();
        assert_eq!(
            find_metadata_file(dir.path()).unwrap(),
            md.join("v2.metadata.json")
        );
        std::fs::write(md.join("version-hint.text"), "v1.metadata.json").unwrap();
        assert_eq!(
            find_metadata_file(dir.path()).unwrap(),
            md.join("v1.metadata.json")
        );
        std::fs::write(md.join("version-hint.text"), "7").unwrap();
        let e = find_metadata_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("version '7'"), "{e}");
        assert!(find_metadata_file(&dir.path().join("nope")).is_err());
    }
}
