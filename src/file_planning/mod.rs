//! File planning: snapshot → manifest list → manifests → the data files a scan or a statement
//! reads, each with the delete files that apply to it, pruned by partition values and column
//! bounds, and grouped for parallel reads. Below the commit layer: it reads metadata, never
//! writes it.

mod avro_manifest;
mod bounded;
pub(crate) mod bucket;
mod cache;
mod column_stats;
mod defaults;
mod deletes;
pub(crate) mod field_ids;
mod inline;
pub(crate) mod literal;
mod manifest;
mod predicate;
mod relabel;
pub(crate) mod strict;
mod transforms;

pub use cache::{
    manifest_cache_stats, set_manifest_cache_capacity, ManifestCacheStats,
    DEFAULT_MANIFEST_CACHE_BYTES,
};
pub use column_stats::{distinct_counts, ColumnSummary};
pub use deletes::{BlobRange, DataFileRef, DeleteFileRef, DeleteIndex};
pub use field_ids::FieldIdAdapterFactory;
pub(crate) use inline::{inline_manifests, INLINE_MANIFESTS};
pub(crate) use manifest::{load_entries, sequence_numbers};
pub use predicate::{prunable_filters, to_predicate, unprunable_columns};

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::FileGroup;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::Expr;

use futures::StreamExt;
use iceberg::expr::Predicate;
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, ManifestFile, SnapshotRef, Struct, TableMetadataRef,
};
use iceberg::table::Table;

use crate::error::IcebergResultExt;
use crate::storage::location::{file_at, LocationMap};

/// A data file chosen for a scan, with the delete files that apply to it.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    /// Location as recorded in the manifest.
    pub path: String,
    /// File size in bytes.
    pub size: u64,
    /// Row count from the manifest (before deletes).
    pub record_count: u64,
    /// Data sequence number (0 when the snapshot has no delete files: then it is not needed).
    pub data_seq: i64,
    /// Partition spec the file was written for.
    pub spec_id: i32,
    /// Partition tuple.
    pub partition: Struct,
    /// Position delete files that apply to this file, by the spec's rules.
    pub position_deletes: Vec<Arc<DeleteFileRef>>,
    /// Whether an equality delete applies to this file.
    pub equality_deletes: bool,
    /// Row lineage (format v3): the row id of the file's first row, written or inherited from
    /// its manifest; `None` for files from before row lineage.
    pub first_row_id: Option<i64>,
    /// The file's format as its manifest entry records it.
    pub format: DataFileFormat,
}

/// What a scan reads: data files, and the equality delete files that apply to any of them
/// (kept once, not per data file).
#[derive(Debug, Clone, Default)]
pub struct ScanFiles {
    /// The data files.
    pub files: Vec<PlannedFile>,
    /// Equality delete files that apply to at least one of `files`.
    pub equality_deletes: Vec<Arc<DeleteFileRef>>,
    /// Whether the delete manifests were streamed past the data files (above the planning
    /// threshold) instead of indexed.
    pub streamed: bool,
    /// What the files' manifest entries record about their columns, summed up (for the
    /// planner's estimates), when planning gathered it.
    pub columns: Option<Arc<ColumnSummary>>,
}

impl ScanFiles {
    /// Whether some delete applies to some file.
    pub fn has_deletes(&self) -> bool {
        !self.equality_deletes.is_empty() || self.files.iter().any(|f| !f.is_clean())
    }

    /// Distinct delete files (each deletion vector counts as one) that apply.
    pub fn delete_file_count(&self) -> usize {
        let mut paths: Vec<(&str, Option<u64>)> = self
            .files
            .iter()
            .flat_map(|f| f.position_deletes.iter().map(|d| d.identity()))
            .chain(self.equality_deletes.iter().map(|d| d.identity()))
            .collect();
        paths.sort_unstable();
        paths.dedup();
        paths.len()
    }
}

impl PlannedFile {
    pub(crate) fn new(data: DataFileRef, size: u64, record_count: u64) -> Self {
        Self {
            path: data.path,
            size,
            record_count,
            data_seq: data.data_seq,
            spec_id: data.spec_id,
            partition: data.partition,
            position_deletes: vec![],
            equality_deletes: false,
            first_row_id: None,
            format: DataFileFormat::Parquet,
        }
    }

    /// Whether no delete file applies: the manifest's row count is exact.
    pub fn is_clean(&self) -> bool {
        self.position_deletes.is_empty() && !self.equality_deletes
    }
}

/// Default of `iceberg.planning_threshold`: live delete files in a snapshot above which
/// planning streams delete manifests instead of indexing every delete entry.
pub const DEFAULT_PLANNING_THRESHOLD: u64 = 100_000;

/// What a scan's filters let planning prune.
#[derive(Debug, Clone, Default)]
pub struct FileFilter {
    /// The filters as an Iceberg predicate (what `EXPLAIN` shows the scan was pruned by).
    pub predicate: Option<Predicate>,
    /// The same conjuncts as DataFusion expressions over top-level columns of `schema`, for
    /// pruning by this crate's file statistics.
    pub exprs: Vec<Expr>,
    /// The schema `exprs` name columns of.
    pub schema: Option<iceberg::spec::SchemaRef>,
}

impl FileFilter {
    /// The filters a scan of `schema` was given, without the conjuncts on `excluded` columns
    /// (see [`unprunable_columns`]).
    pub fn new(
        filters: &[Expr],
        excluded: &HashSet<String>,
        schema: iceberg::spec::SchemaRef,
    ) -> Self {
        Self {
            predicate: to_predicate(filters, excluded),
            exprs: prunable_filters(filters, excluded),
            schema: Some(schema),
        }
    }
}

/// The data files of `snapshot` that may hold rows matching `filter` (all of them without one),
/// each with the delete files that apply to it: files are pruned by their partition values and
/// column bounds through this crate's file statistics ([`strict::FileStats`]), from the
/// snapshot's listing (every live file of its manifests, decoded in parallel and cached, so the
/// same snapshot is planned again without reading a manifest); which deletes apply is decided by
/// this crate's own rules ([`DeleteIndex`]).
///
/// A snapshot with more than `planning_threshold` live delete files is planned in bounded
/// memory instead: its delete manifests stream past the scan's data files, and only the delete
/// entries that apply are kept (data files are then pruned by `filter.exprs` through this
/// crate's file statistics).
///
/// `locations` is where the table's recorded locations are read from (it keys the manifest
/// cache).
pub async fn plan_files_pruned(
    table: &Table,
    locations: &LocationMap,
    snapshot: &SnapshotRef,
    filter: &FileFilter,
    planning_threshold: u64,
) -> Result<ScanFiles> {
    let list = manifest_list(table, locations, snapshot).await?;
    if bounded::delete_file_count(&list) > planning_threshold {
        return bounded::plan(table, &list, filter).await;
    }
    let listing = list_snapshot(table, locations, snapshot).await?;
    let metadata = table.metadata();
    let schema = metadata
        .schema_by_id(snapshot.schema_id().unwrap_or(metadata.current_schema_id()))
        .unwrap_or_else(|| metadata.current_schema());
    // Without a filter, every file; with one, the files whose partition values and column
    // bounds may hold matching rows (the manifests' files are listed, and cached, either way).
    let prune = match (&filter.schema, filter.exprs.is_empty()) {
        (Some(schema), false) => Some((schema, filter_columns(&filter.exprs)?)),
        _ => None,
    };
    let Some((filter_schema, columns)) = prune else {
        return Ok(listing.plan(Some(schema), |_| true));
    };
    Ok(listing.plan(Some(schema), |f| {
        let (Some(file), Some(spec)) = (
            f.stats.as_deref(),
            metadata.partition_spec_by_id(f.data.spec_id),
        ) else {
            return true;
        };
        !strict::FileStats::of(file, spec, filter_schema, &columns).none_match(&filter.exprs)
    }))
}

/// The live data files of `snapshot` among `wanted` (recorded paths), each with its partition
/// spec id and its manifest entry's file (statistics included), from the snapshot's cached
/// listing.
pub(crate) async fn listed_data_files(
    table: &Table,
    locations: &LocationMap,
    snapshot: &SnapshotRef,
    wanted: &HashSet<&str>,
) -> Result<Vec<(i32, Arc<DataFile>)>> {
    let listing = list_snapshot(table, locations, snapshot).await?;
    Ok(listing
        .data
        .into_iter()
        .filter(|f| wanted.contains(f.data.path.as_str()))
        .filter_map(|f| f.stats.map(|s| (f.data.spec_id, s)))
        .collect())
}

/// Every live delete file of `snapshot` (each deletion vector on its own), whether or not it
/// applies to a data file.
pub(crate) async fn listed_delete_files(
    table: &Table,
    locations: &LocationMap,
    snapshot: &SnapshotRef,
) -> Result<Vec<Arc<DeleteFileRef>>> {
    let listing = list_snapshot(table, locations, snapshot).await?;
    Ok(listing.deletes.all().cloned().collect())
}

/// The top-level columns `exprs` name.
fn filter_columns(exprs: &[Expr]) -> Result<Vec<String>> {
    let mut columns = HashSet::new();
    for e in exprs {
        datafusion::logical_expr::utils::expr_to_columns(e, &mut columns)?;
    }
    Ok(columns.into_iter().map(|c| c.name).collect())
}

/// The absolute location a recorded location is read from: the cache key of the file.
fn cache_location(locations: &LocationMap, recorded: &str) -> Result<String> {
    let resolved = locations.resolve(recorded)?;
    if resolved.contains("://") {
        return Ok(resolved);
    }
    Ok(std::path::absolute(&resolved)
        .map(|p| p.display().to_string())
        .unwrap_or(resolved))
}

/// The snapshot's manifests (its manifest list's entries), from the cache when read before.
///
/// A format v1 snapshot that names its manifests inline has no manifest list: its entries are
/// made from the manifests themselves (their spec and content), with the sequence numbers of v1
/// (0) and the snapshot's id for files that do not carry one.
pub(crate) async fn manifest_list(
    table: &Table,
    locations: &LocationMap,
    snapshot: &SnapshotRef,
) -> Result<Arc<Vec<ManifestFile>>> {
    // A manifest list belongs to one snapshot; the id tells copies of a path apart.
    let key = (
        cache_location(locations, snapshot.manifest_list())?,
        snapshot.snapshot_id() as u64,
    );
    if let Some(list) = cache::get_list(&key) {
        return Ok(list);
    }
    let list = match inline_manifests(snapshot.manifest_list()) {
        Some(paths) => {
            let mut entries = vec![];
            for path in paths? {
                entries.push(inline_entry(table, snapshot, path).await?);
            }
            entries
        }
        None => match table.manifest_list_reader(snapshot).load().await {
            Ok(list) => list.consume_entries().into_iter().collect(),
            Err(e) => lenient_manifest_list(table, snapshot)
                .await
                .map_err(|lenient| {
                    log::debug!("lenient read of the manifest list failed too: {lenient}");
                    DataFusionError::Execution(format!(
                        "manifest list {} of snapshot {} could not be read: {e}",
                        snapshot.manifest_list(),
                        snapshot.snapshot_id()
                    ))
                })?,
        },
    };
    let list = Arc::new(list);
    cache::put_list(key, Arc::clone(&list));
    Ok(list)
}

/// The manifest list of `snapshot` decoded with every count optional (see [`manifest`]).
async fn lenient_manifest_list(table: &Table, snapshot: &SnapshotRef) -> Result<Vec<ManifestFile>> {
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())
        .df()?
        .read()
        .await
        .df()?;
    let list = manifest::parse_lenient_manifest_list(&bytes)?;
    log::debug!(
        "manifest list {} read with optional counts",
        snapshot.manifest_list()
    );
    Ok(list)
}

async fn inline_entry(table: &Table, snapshot: &SnapshotRef, path: String) -> Result<ManifestFile> {
    let bytes = table
        .file_io()
        .new_input(&path)
        .df()?
        .read()
        .await
        .map_err(|e| DataFusionError::Execution(format!("manifest {path}: {e}")))?;
    let manifest = iceberg::spec::Manifest::parse_avro(&bytes)
        .map_err(|e| DataFusionError::Execution(format!("manifest {path} does not parse: {e}")))?;
    let metadata = manifest.metadata();
    Ok(ManifestFile {
        manifest_path: path,
        manifest_length: bytes.len() as i64,
        partition_spec_id: metadata.partition_spec().spec_id(),
        content: *metadata.content(),
        sequence_number: 0,
        min_sequence_number: 0,
        added_snapshot_id: snapshot.snapshot_id(),
        added_files_count: None,
        existing_files_count: None,
        deleted_files_count: None,
        added_rows_count: None,
        existing_rows_count: None,
        deleted_rows_count: None,
        partitions: None,
        key_metadata: None,
        first_row_id: None,
    })
}

/// Every live file of a snapshot: data files with what delete planning needs, delete files
/// indexed by scope.
struct SnapshotListing {
    data: Vec<ListedFile>,
    deletes: DeleteIndex,
}

impl SnapshotListing {
    /// The data files `keep` accepts, with the delete files that apply to them.
    /// The data files `keep` accepts, with the delete files that apply to them and, given a
    /// schema, the summed statistics of its columns.
    fn plan(
        self,
        schema: Option<&iceberg::spec::Schema>,
        keep: impl Fn(&ListedFile) -> bool,
    ) -> ScanFiles {
        let deletes = self.deletes;
        let kept: Vec<ListedFile> = self.data.into_iter().filter(|f| keep(f)).collect();
        let columns = schema.map(|schema| {
            let mut columns = ColumnSummary::new(schema);
            for f in &kept {
                columns.add(f.stats.as_deref());
            }
            Arc::new(columns)
        });
        let equality_deletes = deletes.equality_deletes_for(kept.iter().map(|f| &f.data));
        let files = kept
            .into_iter()
            .map(
                |ListedFile {
                     data: d,
                     size,
                     rows,
                     stats,
                 }| {
                    let position_deletes = deletes.position_deletes(&d);
                    let equality = deletes.has_equality_deletes(&d);
                    PlannedFile {
                        position_deletes,
                        equality_deletes: equality,
                        format: stats
                            .as_ref()
                            .map(|f| f.file_format())
                            .unwrap_or(DataFileFormat::Parquet),
                        first_row_id: stats.and_then(|f| f.first_row_id()),
                        ..PlannedFile::new(d, size, rows)
                    }
                },
            )
            .collect();
        ScanFiles {
            files,
            equality_deletes,
            streamed: false,
            columns,
        }
    }
}

/// Manifests read and decoded at once (each on the I/O runtime's threads).
const MANIFEST_READ_CONCURRENCY: usize = 4;

/// The live files of one manifest.
type ManifestFiles = (Vec<ListedFile>, Vec<Arc<DeleteFileRef>>);

/// A live data file of a snapshot as listed from its manifest.
#[derive(Debug, Clone)]
pub(crate) struct ListedFile {
    data: DataFileRef,
    size: u64,
    rows: u64,
    /// The manifest entry's file, with its column statistics (for pruning by filters).
    stats: Option<Arc<DataFile>>,
}

async fn list_snapshot(
    table: &Table,
    locations: &LocationMap,
    snapshot: &SnapshotRef,
) -> Result<SnapshotListing> {
    let list = manifest_list(table, locations, snapshot).await?;
    let jobs: Vec<ManifestFile> = list.iter().cloned().collect();
    let metadata = table.metadata_ref();
    let file_io = table.file_io().clone();
    // Decoding is CPU work: each manifest on its own task, reduced to what planning keeps
    // before the next is read.
    let locations = locations.clone();
    let reads = jobs.into_iter().map(move |manifest| {
        // What entries inherit from the list entry is part of the key: a manifest listed again
        // with another sequence number or first row id (after an upgrade to v3) decodes anew.
        let key = cache_location(&locations, &manifest.manifest_path).map(|at| {
            let inherited = format!(
                "{at}\0{}\0{:?}",
                manifest.sequence_number, manifest.first_row_id
            );
            (inherited, manifest.manifest_length.max(0) as u64)
        });
        let (metadata, file_io) = (Arc::clone(&metadata), file_io.clone());
        async move {
            let key = key?;
            if let Some(files) = cache::get_manifest(&key) {
                return Ok(files);
            }
            let files = Arc::new(
                crate::io_runtime::spawn(read_manifest(manifest, metadata, file_io)).await?,
            );
            cache::put_manifest(key, Arc::clone(&files));
            Ok::<_, DataFusionError>(files)
        }
    });
    let mut manifests = futures::stream::iter(reads).buffered(MANIFEST_READ_CONCURRENCY);
    let mut data = vec![];
    let mut deletes = vec![];
    while let Some(files) = manifests.next().await {
        let files = files?;
        data.extend(files.0.iter().cloned());
        deletes.extend(files.1.iter().cloned());
    }
    Ok(SnapshotListing {
        data,
        deletes: DeleteIndex::from_shared(deletes),
    })
}

/// The live files of `manifest`, a manifest of the table `metadata` describes.
pub(crate) async fn read_manifest(
    manifest: ManifestFile,
    metadata: TableMetadataRef,
    file_io: iceberg::io::FileIO,
) -> Result<ManifestFiles> {
    let spec_id = manifest.partition_spec_id;
    let unpartitioned = metadata
        .partition_spec_by_id(spec_id)
        .is_none_or(|s| s.is_unpartitioned());
    let loaded = manifest::load_entries(&manifest, &metadata, &file_io).await?;
    let mut data = vec![];
    let mut deletes = vec![];
    for entry in &loaded {
        if !entry.is_alive() {
            continue;
        }
        let file = entry.data_file();
        let data_seq = entry.sequence_number().unwrap_or(0);
        match entry.content_type() {
            DataContentType::Data => data.push(ListedFile {
                data: DataFileRef {
                    path: file.file_path().to_string(),
                    data_seq,
                    spec_id,
                    partition: file.partition().clone(),
                },
                size: file.file_size_in_bytes(),
                rows: file.record_count(),
                stats: Some(Arc::new(file.clone())),
            }),
            content => deletes.push(Arc::new(DeleteFileRef {
                deletion_vector: deletion_vector(file)?,
                path: file.file_path().to_string(),
                size: file.file_size_in_bytes(),
                record_count: file.record_count(),
                content,
                data_seq,
                spec_id,
                spec_unpartitioned: unpartitioned,
                partition: file.partition().clone(),
                referenced_data_file: file.referenced_data_file(),
                equality_ids: file.equality_ids().unwrap_or_default(),
            })),
        }
    }
    Ok((data, deletes))
}

/// Where the deletion vector `file` (a delete entry) lies in its Puffin file; `None` for delete
/// files of other formats. A vector without its range or data file is an error naming it.
fn deletion_vector(file: &DataFile) -> Result<Option<BlobRange>> {
    if file.file_format() != DataFileFormat::Puffin {
        return Ok(None);
    }
    let bad = |what: &str| {
        DataFusionError::Execution(format!(
            "deletion vector in {} has {what}; its manifest entry is invalid",
            file.file_path()
        ))
    };
    if file.content_type() != DataContentType::PositionDeletes {
        return Err(bad("content other than position deletes"));
    }
    if file.referenced_data_file().is_none() {
        return Err(bad("no referenced_data_file"));
    }
    match (file.content_offset(), file.content_size_in_bytes()) {
        (Some(offset), Some(length)) if offset >= 0 && length >= 0 => Ok(Some(BlobRange {
            offset: offset as u64,
            length: length as u64,
        })),
        _ => Err(bad("no valid content_offset and content_size_in_bytes")),
    }
}

/// The data files of `snapshot`, each with the position deletes that apply to it (the
/// equality deletes of the scan are in [`plan_files_pruned`]'s answer).
pub async fn plan_files(table: &Table, snapshot: &SnapshotRef) -> Result<Vec<PlannedFile>> {
    Ok(list_snapshot(table, &LocationMap::default(), snapshot)
        .await?
        .plan(None, |_| true)
        .files)
}

/// Splits files into at most `target` groups of similar total size (largest first, each into the
/// currently smallest group).
///
/// `decorate` gives each file what the scan knows of it beyond its location and size (the
/// values of the scan's per-file columns, per-file statistics).
pub fn group_files(
    files: &[PlannedFile],
    target: usize,
    locations: &LocationMap,
    url: &ObjectStoreUrl,
    mut decorate: impl FnMut(&PlannedFile, PartitionedFile) -> Result<PartitionedFile>,
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
        let file = file_at(locations.object_path_in(url, &f.path)?.as_ref(), f.size)?;
        group.push(decorate(f, file)?);
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
                data_seq: 0,
                spec_id: 0,
                partition: Struct::empty(),
                position_deletes: vec![],
                equality_deletes: false,
                first_row_id: None,
                format: DataFileFormat::Parquet,
            })
            .collect();
        let local = ObjectStoreUrl::local_filesystem;
        let groups =
            group_files(&files, 2, &LocationMap::default(), &local(), |_, f| Ok(f)).unwrap();
        assert_eq!(groups.len(), 2);
        let sizes: Vec<u64> = groups
            .iter()
            .map(|g| g.iter().map(|f| f.object_meta.size).sum())
            .collect();
        assert_eq!(sizes.iter().sum::<u64>(), 315);
        assert!(sizes.iter().all(|s| (150..=165).contains(s)), "{sizes:?}");
        assert_eq!(
            group_files(
                &files[..1],
                8,
                &LocationMap::default(),
                &local(),
                |_, f| Ok(f)
            )
            .unwrap()
            .len(),
            1
        );
    }
}
