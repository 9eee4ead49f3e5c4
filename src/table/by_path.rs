//! Opening a table from its files: a `metadata.json` path, or a table directory
//! (`metadata/version-hint.text`, else the highest-versioned metadata file).

use std::path::{Path, PathBuf};

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};
use object_store::ObjectStoreExt;

use crate::catalog::table_handle;
use crate::commit::metadata_file::read_metadata;
use crate::storage::location::LocationMap;
use crate::storage::{locate, remote_scheme, table_file_io, ObjectStores};

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
fn hinted_file<'a>(names: &'a [String], text: &str) -> Option<&'a String> {
    if text.is_empty() || text.contains(['/', '\\']) || text == ".." {
        return None;
    }
    let wanted = [
        text.to_string(),
        format!("{text}.metadata.json"),
        format!("{text}.gz.metadata.json"),
        format!("{text}.metadata.json.gz"),
        format!("v{text}.metadata.json"),
    ];
    let found = wanted.iter().find_map(|w| names.iter().find(|n| *n == w));
    if let Some(n) = found {
        log::debug!("version-hint.text '{text}' read as {n}");
    }
    found
}

/// Which of the files `names` of the metadata directory `dir` of the table at `target` is
/// current, given the text of its `version-hint.text` if it has one.
fn choose_metadata(
    target: &str,
    dir: &str,
    names: &[String],
    hint: Option<&str>,
) -> Result<String> {
    let not_found =
        |why: String| DataFusionError::Plan(format!("no Iceberg table at '{target}': {why}"));
    let mut candidates: Vec<(u64, &String)> = names
        .iter()
        .filter(|n| is_metadata_file(n))
        .map(|n| (version_of(n).unwrap_or(0), n))
        .collect();
    if let Some(text) = hint {
        let text = text.trim();
        if let Ok(v) = text.parse::<u64>() {
            if let Some((_, n)) = candidates
                .iter()
                .find(|(cv, n)| *cv == v && n.starts_with('v'))
            {
                return Ok((*n).clone());
            }
            if let Some((_, n)) = candidates.iter().find(|(cv, _)| *cv == v) {
                return Ok((*n).clone());
            }
        } else if let Some(n) = hinted_file(names, text) {
            return Ok(n.clone());
        }
        return Err(not_found(format!(
            "version-hint.text names version '{text}', which has no metadata file"
        )));
    }
    candidates.sort();
    let Some((top, newest)) = candidates.pop() else {
        return Err(not_found(format!("no *.metadata.json in {dir}")));
    };
    if candidates.last().is_some_and(|(v, _)| *v == top) {
        // Catalog tables leave the metadata of lost commits behind under the same version:
        // only the catalog knows which one is current.
        return Err(not_found(format!(
            "several metadata files have version {top} in {dir}; name the metadata.json to read"
        )));
    }
    Ok(newest.clone())
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
    let names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| not_found(e.to_string()))?
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    let hint = dir.join("version-hint.text");
    let hint = match hint.is_file() {
        true => Some(std::fs::read_to_string(&hint).map_err(|e| not_found(e.to_string()))?),
        false => None,
    };
    let chosen = choose_metadata(
        &path.display().to_string(),
        &dir.display().to_string(),
        &names,
        hint.as_deref(),
    )?;
    Ok(dir.join(chosen))
}

/// The metadata file of the table at the object-store location `target` (a `metadata.json`, or
/// the table's directory).
async fn find_remote_metadata_file(stores: &ObjectStores, target: &str) -> Result<String> {
    let target = target.trim_end_matches('/');
    if is_metadata_file(target.rsplit('/').next().unwrap_or_default()) {
        return Ok(target.to_string());
    }
    let listed = |dir: String| async move {
        let located = locate(&dir)?;
        let store = stores.store(&located.url)?;
        let prefix = located.path.clone();
        let names: Vec<String> = store
            .list(Some(&prefix))
            .try_filter_map(|m| {
                let rest = m
                    .location
                    .prefix_match(&prefix)
                    .map(|p| p.collect::<Vec<_>>());
                futures::future::ready(Ok(match rest {
                    Some(parts) if parts.len() == 1 => Some(parts[0].as_ref().to_string()),
                    _ => None,
                }))
            })
            .try_collect()
            .await
            .map_err(|e| {
                DataFusionError::Plan(format!(
                    "no Iceberg table at '{target}': cannot list {dir}: {e}"
                ))
            })?;
        Ok::<_, DataFusionError>((dir, located, store, names))
    };
    let (mut dir, mut located, mut store, mut names) = listed(format!("{target}/metadata")).await?;
    if names.is_empty() {
        (dir, located, store, names) = listed(target.to_string()).await?;
    }
    let hint = if names.iter().any(|n| n == "version-hint.text") {
        let key = located.path.clone().join("version-hint.text");
        let unreadable = |e: object_store::Error| {
            DataFusionError::Plan(format!("cannot read {dir}/version-hint.text: {e}"))
        };
        let got = store.get(&key).await.map_err(unreadable)?;
        let bytes = got.bytes().await.map_err(unreadable)?;
        Some(String::from_utf8_lossy(&bytes).to_string())
    } else {
        None
    };
    let chosen = choose_metadata(target, &dir, &names, hint.as_deref())?;
    Ok(format!("{dir}/{chosen}"))
}

/// Opens the table at `path` (read-only), resolving recorded locations through `locations`; an
/// object-store location (`s3://bucket/wh/ns/t`) is read through `stores`.
pub async fn open_table_at(
    path: &str,
    locations: &LocationMap,
    stores: &Arc<ObjectStores>,
) -> Result<Table> {
    let shown = if remote_scheme(path).is_some() {
        find_remote_metadata_file(stores, path).await?
    } else {
        let file = find_metadata_file(Path::new(path))?;
        std::path::absolute(&file)?.display().to_string()
    };
    let file_io = table_file_io(locations, stores);
    let metadata = read_metadata(&table_file_io(&LocationMap::default(), stores), &shown).await?;
    let trimmed = path.trim_end_matches('/');
    let name = trimmed
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(&shown)
        .to_string();
    let ident = TableIdent::new(NamespaceIdent::new("path".to_string()), name);
    table_handle(ident, shown, metadata, file_io)
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
