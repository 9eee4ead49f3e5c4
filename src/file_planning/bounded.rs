//! Planning of snapshots with very many delete files, in memory bounded by what the scan needs.
//!
//! ```text
//!  data manifests ──► live data files, pruned by the filters ──► DataIndex (by path, by scope)
//!                                                                     │ build side
//!  delete manifests ──► one manifest at a time ──► each delete entry ─┴► probe: the files it
//!                       (streamed, not cached)      applies to, by the spec's rules; dropped
//!                                                   at once when it applies to none
//! ```
//! The in-memory planner ([`super::DeleteIndex`]) indexes every delete entry of the snapshot and
//! looks each data file up. This one inverts the join: the data files the scan reads (which the
//! plan holds anyway) are the build side, and delete entries stream past them, so planning holds
//! the delete entries that apply to the scan and, at a time, the few manifests being decoded —
//! not every delete entry of the table.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::logical_expr::utils::expr_to_columns;
use datafusion::logical_expr::Expr;
use futures::StreamExt;
use iceberg::spec::{DataContentType, ManifestContentType, ManifestFile, Struct};
use iceberg::table::Table;

use super::deletes::{DataFileRef, DeleteFileRef};
use super::strict::FileStats;
use super::{read_manifest, FileFilter, PlannedFile, ScanFiles};

/// Manifests decoded at once.
const CONCURRENCY: usize = 2;

/// Live delete files the manifest list counts (entries of unknown count as none).
pub(super) fn delete_file_count(list: &[ManifestFile]) -> u64 {
    list.iter()
        .filter(|m| m.content == ManifestContentType::Deletes)
        .map(|m| {
            u64::from(m.added_files_count.unwrap_or(0))
                + u64::from(m.existing_files_count.unwrap_or(0))
        })
        .sum()
}

/// The scan's data files, indexed for the delete entries streaming past.
struct DataIndex {
    files: Vec<PlannedFile>,
    by_path: HashMap<String, usize>,
    by_scope: HashMap<(i32, Struct), Vec<usize>>,
    /// Lowest data sequence number per scope, and over all files.
    oldest_in_scope: HashMap<(i32, Struct), i64>,
    oldest: Option<i64>,
}

impl DataIndex {
    fn new(files: Vec<PlannedFile>) -> Self {
        let mut index = Self {
            by_path: HashMap::with_capacity(files.len()),
            by_scope: HashMap::new(),
            oldest_in_scope: HashMap::new(),
            oldest: None,
            files: vec![],
        };
        for (i, f) in files.iter().enumerate() {
            let scope = (f.spec_id, f.partition.clone());
            index.by_path.insert(f.path.clone(), i);
            let oldest = index
                .oldest_in_scope
                .entry(scope.clone())
                .or_insert(f.data_seq);
            *oldest = (*oldest).min(f.data_seq);
            index.by_scope.entry(scope).or_default().push(i);
            index.oldest = Some(index.oldest.map_or(f.data_seq, |o| o.min(f.data_seq)));
        }
        index.files = files;
        index
    }
}

/// What the delete entries seen so far decided.
#[derive(Default)]
struct Assignment {
    equality: Vec<Arc<DeleteFileRef>>,
    /// Highest sequence number of the applicable equality deletes per scope, and of the
    /// unpartitioned (global) ones.
    equality_max_in_scope: HashMap<(i32, Struct), i64>,
    equality_max_global: Option<i64>,
}

impl Assignment {
    /// Assigns one delete entry to the files it applies to (to none: it is dropped).
    fn probe(&mut self, index: &mut DataIndex, d: Arc<DeleteFileRef>) {
        match d.content {
            DataContentType::PositionDeletes => {
                let targets: &[usize] = match &d.referenced_data_file {
                    Some(path) => index
                        .by_path
                        .get(path)
                        .map(std::slice::from_ref)
                        .unwrap_or(&[]),
                    None => index
                        .by_scope
                        .get(&(d.spec_id, d.partition.clone()))
                        .map(Vec::as_slice)
                        .unwrap_or(&[]),
                };
                let named = d.referenced_data_file.is_some();
                for &i in targets {
                    let file = &mut index.files[i];
                    let same_partition =
                        !named || (file.spec_id == d.spec_id && file.partition == d.partition);
                    if file.data_seq <= d.data_seq && same_partition {
                        file.position_deletes.push(Arc::clone(&d));
                    }
                }
            }
            DataContentType::EqualityDeletes if d.spec_unpartitioned => {
                if index.oldest.is_some_and(|o| d.data_seq > o) {
                    self.equality_max_global = Some(
                        self.equality_max_global
                            .map_or(d.data_seq, |m| m.max(d.data_seq)),
                    );
                    self.equality.push(d);
                }
            }
            DataContentType::EqualityDeletes => {
                let scope = (d.spec_id, d.partition.clone());
                if index
                    .oldest_in_scope
                    .get(&scope)
                    .is_some_and(|o| d.data_seq > *o)
                {
                    let max = self
                        .equality_max_in_scope
                        .entry(scope)
                        .or_insert(d.data_seq);
                    *max = (*max).max(d.data_seq);
                    self.equality.push(d);
                }
            }
            DataContentType::Data => {}
        }
    }

    fn finish(self, index: DataIndex) -> ScanFiles {
        let files = index
            .files
            .into_iter()
            .map(|mut f| {
                super::deletes::prefer_deletion_vectors(&mut f.position_deletes);
                f.equality_deletes = self.equality_max_global.is_some_and(|m| m > f.data_seq)
                    || self
                        .equality_max_in_scope
                        .get(&(f.spec_id, f.partition.clone()))
                        .is_some_and(|m| *m > f.data_seq);
                f
            })
            .collect();
        ScanFiles {
            files,
            equality_deletes: self.equality,
            streamed: true,
            columns: None,
        }
    }
}

/// Plans `snapshot` by streaming its delete manifests past its data files (see the module
/// documentation). Data files are pruned by `filter`'s expressions through their manifest
/// entries' partition values and column bounds.
pub(super) async fn plan(
    table: &Table,
    list: &[ManifestFile],
    filter: &FileFilter,
) -> Result<ScanFiles> {
    let metadata = table.metadata();
    let (data_manifests, delete_manifests): (Vec<ManifestFile>, Vec<ManifestFile>) = list
        .iter()
        .cloned()
        .partition(|m| m.content == ManifestContentType::Data);

    let prune = Pruning::new(filter)?;
    let file_io = table.file_io().clone();
    let reads = data_manifests.into_iter().map(|manifest| {
        let spec = metadata
            .partition_spec_by_id(manifest.partition_spec_id)
            .cloned();
        let (metadata, file_io, prune) = (table.metadata_ref(), file_io.clone(), prune.clone());
        crate::io_runtime::spawn(async move {
            data_files(manifest, metadata, file_io, spec, prune).await
        })
    });
    let mut data = vec![];
    let mut reads = futures::stream::iter(reads).buffered(CONCURRENCY);
    while let Some(files) = reads.next().await {
        data.extend(files?);
    }
    let mut index = DataIndex::new(data);

    let mut assignment = Assignment::default();
    let reads = delete_manifests.into_iter().map(|manifest| {
        let (metadata, file_io) = (table.metadata_ref(), file_io.clone());
        crate::io_runtime::spawn(read_manifest(manifest, metadata, file_io))
    });
    let mut reads = futures::stream::iter(reads).buffered(CONCURRENCY);
    while let Some(files) = reads.next().await {
        let (_, deletes) = files?;
        for d in deletes {
            assignment.probe(&mut index, d);
        }
    }
    Ok(assignment.finish(index))
}

/// The filter conjuncts and what file statistics need to judge them.
#[derive(Clone)]
struct Pruning {
    exprs: Arc<Vec<Expr>>,
    columns: Arc<Vec<String>>,
    schema: Option<iceberg::spec::SchemaRef>,
}

impl Pruning {
    fn new(filter: &FileFilter) -> Result<Self> {
        let mut columns = std::collections::HashSet::new();
        for e in &filter.exprs {
            expr_to_columns(e, &mut columns)?;
        }
        Ok(Self {
            exprs: Arc::new(filter.exprs.clone()),
            columns: Arc::new(columns.into_iter().map(|c| c.name).collect()),
            schema: filter.schema.clone(),
        })
    }
}

/// The live data files of one data manifest that may hold rows the filters keep.
async fn data_files(
    manifest: ManifestFile,
    metadata: iceberg::spec::TableMetadataRef,
    file_io: iceberg::io::FileIO,
    spec: Option<iceberg::spec::PartitionSpecRef>,
    prune: Pruning,
) -> Result<Vec<PlannedFile>> {
    let loaded = super::manifest::load_entries(&manifest, &metadata, &file_io).await?;
    let mut out = vec![];
    for entry in &loaded {
        if !entry.is_alive() || entry.content_type() != DataContentType::Data {
            continue;
        }
        let file = entry.data_file();
        if let (Some(spec), Some(schema), false) =
            (spec.as_ref(), prune.schema.as_ref(), prune.exprs.is_empty())
        {
            if FileStats::of(file, spec, schema, &prune.columns).none_match(&prune.exprs) {
                continue;
            }
        }
        out.push(PlannedFile {
            first_row_id: file.first_row_id(),
            format: file.file_format(),
            ..PlannedFile::new(
                DataFileRef {
                    path: file.file_path().to_string(),
                    data_seq: entry.sequence_number().unwrap_or(0),
                    spec_id: manifest.partition_spec_id,
                    partition: file.partition().clone(),
                },
                file.file_size_in_bytes(),
                file.record_count(),
            )
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use iceberg::spec::Literal;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::super::{DeleteIndex, SnapshotListing};
    use super::*;

    fn normal(s: ScanFiles) -> (Vec<String>, Vec<String>) {
        let mut files: Vec<String> = s
            .files
            .iter()
            .map(|f| {
                let mut pos: Vec<&str> =
                    f.position_deletes.iter().map(|d| d.path.as_str()).collect();
                pos.sort();
                format!("{} eq={} pos={pos:?}", f.path, f.equality_deletes)
            })
            .collect();
        files.sort();
        let mut eq: Vec<String> = s.equality_deletes.iter().map(|d| d.path.clone()).collect();
        eq.sort();
        (files, eq)
    }

    /// Random data and delete files around every boundary of the rules (equal sequence
    /// numbers, other partitions, other specs, unpartitioned deletes, referenced files) are
    /// assigned alike by both planners.
    #[test]
    fn streamed_assignment_matches_the_index() {
        let mut rng = StdRng::seed_from_u64(7);
        for round in 0..200 {
            let part =
                |rng: &mut StdRng| Struct::from_iter([Some(Literal::int(rng.random_range(0..3)))]);
            let data: Vec<DataFileRef> = (0..rng.random_range(1..12))
                .map(|i| DataFileRef {
                    path: format!("d{i}"),
                    data_seq: rng.random_range(0..6),
                    spec_id: rng.random_range(0..2),
                    partition: part(&mut rng),
                })
                .collect();
            let deletes: Vec<DeleteFileRef> = (0..rng.random_range(0..20))
                .map(|i| {
                    let unpartitioned = rng.random_bool(0.2);
                    let equality = rng.random_bool(0.5);
                    DeleteFileRef {
                        path: format!("x{i}"),
                        size: 1,
                        record_count: 1,
                        content: if equality {
                            DataContentType::EqualityDeletes
                        } else {
                            DataContentType::PositionDeletes
                        },
                        data_seq: rng.random_range(0..6),
                        spec_id: if unpartitioned {
                            2
                        } else {
                            rng.random_range(0..2)
                        },
                        spec_unpartitioned: unpartitioned,
                        partition: if unpartitioned {
                            Struct::empty()
                        } else {
                            part(&mut rng)
                        },
                        referenced_data_file: (!equality && rng.random_bool(0.4))
                            .then(|| format!("d{}", rng.random_range(0..14))),
                        equality_ids: vec![1],
                        deletion_vector: None,
                    }
                })
                .collect();
            // Some file-scoped position deletes are deletion vectors (v3).
            let mut deletes = deletes;
            for d in deletes.iter_mut() {
                if d.referenced_data_file.is_some() && rng.random_bool(0.5) {
                    d.deletion_vector = Some(super::super::BlobRange {
                        offset: 4,
                        length: 10,
                    });
                }
            }
            let listing = SnapshotListing {
                data: data
                    .iter()
                    .map(|d| super::super::ListedFile {
                        data: d.clone(),
                        size: 10,
                        rows: 10,
                        stats: None,
                    })
                    .collect(),
                deletes: DeleteIndex::new(deletes.clone()),
            };
            let indexed = normal(listing.plan(None, |_| true));
            let mut index = DataIndex::new(
                data.iter()
                    .map(|d| PlannedFile::new(d.clone(), 10, 10))
                    .collect(),
            );
            let mut assignment = Assignment::default();
            for d in deletes {
                assignment.probe(&mut index, Arc::new(d));
            }
            let streamed = normal(assignment.finish(index));
            assert_eq!(streamed, indexed, "round {round}");
        }
    }
}
