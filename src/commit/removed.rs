//! Which files a commit that removes data files removes with them: the delete files that can
//! no longer apply to any data file that stays.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::error::Result;
use iceberg::table::Table;

use super::changes::RemovedDeletes;
use crate::file_planning::{plan_files_pruned, DeleteFileRef, FileFilter, PlannedFile};
use crate::storage::location::LocationMap;

/// Every file a commit removing the data files `removed` removes: those, the position delete
/// files and deletion vectors that reference exactly one of them, and the delete files
/// (`equality_deletes` of the scan, partition-scoped position deletes of removed files) that
/// may apply to no data file that stays, plus `replaced` (the delete files the statement's new
/// ones take in). Also returns the deletion vectors that go and how many delete files (vectors
/// included) go. (Files the commit adds are newer than every existing delete: none applies to
/// them.)
pub(crate) async fn removed_with_deletes(
    table: &Table,
    write_to: &super::WriteTo,
    locations: &LocationMap,
    planning_threshold: u64,
    removed: &[&PlannedFile],
    equality_deletes: &[Arc<DeleteFileRef>],
    replaced: RemovedDeletes,
) -> Result<(HashSet<String>, HashSet<(String, u64)>, usize)> {
    let removed_paths: HashSet<&str> = removed.iter().map(|f| f.path.as_str()).collect();
    let mut delete_files_removed = replaced.len();
    let mut gone = replaced;
    for f in removed {
        for d in &f.position_deletes {
            if d.referenced_data_file.as_deref() == Some(f.path.as_str()) && gone.insert(d) {
                delete_files_removed += 1;
            }
        }
    }
    let RemovedDeletes {
        files: mut removed_files,
        vectors,
    } = gone;
    removed_files.extend(removed_paths.iter().map(|p| p.to_string()));
    let mut candidates: Vec<Arc<DeleteFileRef>> = equality_deletes.to_vec();
    for f in removed {
        candidates.extend(
            f.position_deletes
                .iter()
                .filter(|d| d.referenced_data_file.is_none() && d.deletion_vector.is_none())
                .cloned(),
        );
    }
    if !removed.is_empty() && !candidates.is_empty() {
        for path in orphan_deletes(
            table,
            write_to,
            locations,
            planning_threshold,
            &removed_paths,
            &candidates,
        )
        .await?
        {
            if removed_files.insert(path) {
                delete_files_removed += 1;
            }
        }
    }
    Ok((removed_files, vectors, delete_files_removed))
}

/// Those of `deletes` that may apply to no data file of the base snapshot (the head `write_to`
/// reads) except `removed` ones
/// (by scope and sequence number: a position delete file without `referenced_data_file` is
/// kept while any file of its partition may still be its target).
async fn orphan_deletes(
    table: &Table,
    write_to: &super::WriteTo,
    locations: &LocationMap,
    planning_threshold: u64,
    removed: &HashSet<&str>,
    deletes: &[Arc<DeleteFileRef>],
) -> Result<Vec<String>> {
    let Some(snapshot) = write_to.head(table.metadata()) else {
        return Ok(vec![]);
    };
    // Only the data files are needed: above the planning threshold the delete manifests stream
    // past them, as in the statement's own planning.
    let remaining: Vec<PlannedFile> = plan_files_pruned(
        table,
        locations,
        snapshot,
        &FileFilter::default(),
        planning_threshold,
    )
    .await?
    .files
    .into_iter()
    .filter(|f| !removed.contains(f.path.as_str()))
    .collect();
    let mut out: Vec<String> = vec![];
    for d in deletes {
        let used = remaining.iter().any(|f| d.may_apply_to(f));
        if !used && !out.contains(&d.path) {
            out.push(d.path.clone());
        }
    }
    Ok(out)
}
