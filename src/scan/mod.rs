//! Scan planning: snapshot → manifest list → manifests → data files, grouped for parallel reads.

mod field_ids;
mod predicate;

pub use field_ids::FieldIdAdapterFactory;
pub use predicate::{promoted_columns, to_predicate};

use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::FileGroup;
use datafusion::error::{DataFusionError, Result};
use futures::TryStreamExt;
use iceberg::expr::Predicate;
use iceberg::spec::{DataContentType, ManifestContentType, SnapshotRef};
use iceberg::table::Table;

use crate::error::IcebergResultExt;
use crate::location::LocationMap;

/// A data file chosen for a scan.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    /// Location as recorded in the manifest.
    pub path: String,
    /// File size in bytes.
    pub size: u64,
    /// Row count from the manifest.
    pub record_count: u64,
}

/// The data files of `snapshot` that may hold rows matching `filter` (all of them without one):
/// manifests are skipped by their partition summaries, files by partition values and column
/// bounds, through the iceberg crate's evaluators. Refuses files that have delete files.
pub async fn plan_files_pruned(
    table: &Table,
    snapshot: &SnapshotRef,
    filter: Option<Predicate>,
) -> Result<Vec<PlannedFile>> {
    let Some(filter) = filter else {
        return plan_files(table, snapshot).await;
    };
    if matches!(filter, Predicate::AlwaysTrue) {
        return plan_files(table, snapshot).await;
    }
    let scan = table
        .scan()
        .snapshot_id(snapshot.snapshot_id())
        .select_all()
        .with_filter(filter)
        .build()
        .df()?;
    let tasks: Vec<_> = scan.plan_files().await.df()?.try_collect().await.df()?;
    let mut files = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Some(delete) = task.deletes.first() {
            return Err(delete_files_error(table, snapshot, &delete.file_path));
        }
        files.push(PlannedFile {
            record_count: task.record_count.unwrap_or(0),
            size: task.file_size_in_bytes,
            path: task.data_file_path,
        });
    }
    Ok(files)
}

fn delete_files_error(table: &Table, snapshot: &SnapshotRef, path: &str) -> DataFusionError {
    DataFusionError::NotImplemented(format!(
        "table '{}' snapshot {} has delete files ({path}); reading merge-on-read deletes is not supported yet",
        table.identifier(),
        snapshot.snapshot_id(),
    ))
}

/// The data files of `snapshot`, refusing snapshots that carry delete files.
///
/// Delete files are not applied yet, and returning rows they delete would be wrong, so a
/// snapshot with any live delete file is an error.
pub async fn plan_files(table: &Table, snapshot: &SnapshotRef) -> Result<Vec<PlannedFile>> {
    let list = table.manifest_list_reader(snapshot).load().await.df()?;
    let mut files = vec![];
    for manifest in list.entries() {
        let loaded = manifest.load_manifest(table.file_io()).await.df()?;
        for entry in loaded.entries() {
            if !entry.is_alive() {
                continue;
            }
            if manifest.content == ManifestContentType::Deletes
                || entry.content_type() != DataContentType::Data
            {
                return Err(delete_files_error(table, snapshot, entry.file_path()));
            }
            files.push(PlannedFile {
                path: entry.file_path().to_string(),
                size: entry.file_size_in_bytes(),
                record_count: entry.record_count(),
            });
        }
    }
    Ok(files)
}

/// Splits files into at most `target` groups of similar total size (largest first, each into the
/// currently smallest group).
pub fn group_files(
    files: &[PlannedFile],
    target: usize,
    locations: &LocationMap,
) -> Result<Vec<FileGroup>> {
    let target = target.max(1).min(files.len().max(1));
    let mut order: Vec<&PlannedFile> = files.iter().collect();
    order.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.path.cmp(&b.path)));
    let mut groups: Vec<(u64, Vec<PartitionedFile>)> = (0..target).map(|_| (0, vec![])).collect();
    for f in order {
        let (size, group) = groups
            .iter_mut()
            .min_by_key(|(s, _)| *s)
            .ok_or_else(|| DataFusionError::Internal("no file groups".into()))?;
        *size += f.size;
        group.push(PartitionedFile::new(
            locations.object_path(&f.path)?.to_string(),
            f.size,
        ));
    }
    Ok(groups
        .into_iter()
        .filter(|(_, g)| !g.is_empty())
        .map(|(_, g)| FileGroup::new(g))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_balanced() {
        let files: Vec<PlannedFile> = [100u64, 90, 60, 50, 10, 5]
            .iter()
            .enumerate()
            .map(|(i, s)| PlannedFile {
                path: format!("/tmp/f{i}.parquet"),
                size: *s,
                record_count: 1,
            })
            .collect();
        let groups = group_files(&files, 2, &LocationMap::default()).unwrap();
        assert_eq!(groups.len(), 2);
        let sizes: Vec<u64> = groups
            .iter()
            .map(|g| g.iter().map(|f| f.object_meta.size).sum())
            .collect();
        assert_eq!(sizes.iter().sum::<u64>(), 315);
        assert!(sizes.iter().all(|s| (150..=165).contains(s)), "{sizes:?}");
        assert_eq!(
            group_files(&files[..1], 8, &LocationMap::default())
                .unwrap()
                .len(),
            1
        );
    }
}
