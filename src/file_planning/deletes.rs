//! Which delete files apply to which data files, by the spec's scan-planning rules.
//!
//! ```text
//! position delete  applies to data file D  iff  D.data_seq <= delete.data_seq
//!                  and (referenced_data_file = D.path   when the delete names one,
//!                       else same spec and partition)
//! equality delete  applies to data file D  iff  D.data_seq <  delete.data_seq
//!                  and (same spec and partition, or the delete's spec is unpartitioned)
//! deletion vector  a position delete (format v3) naming D: when one applies to D, D's position
//!                  delete files do not (the vector holds their positions)
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{DataContentType, Struct};

/// What planning needs to know of a data file.
#[derive(Debug, Clone, PartialEq)]
pub struct DataFileRef {
    /// Recorded location.
    pub path: String,
    /// Data sequence number (inherited from the manifest when not written in the entry).
    pub data_seq: i64,
    /// Partition spec the file was written for.
    pub spec_id: i32,
    /// Partition tuple.
    pub partition: Struct,
}

/// What planning needs to know of a delete file.
#[derive(Debug, Clone, PartialEq)]
pub struct DeleteFileRef {
    /// Recorded location.
    pub path: String,
    /// File size in bytes.
    pub size: u64,
    /// Delete rows in the file.
    pub record_count: u64,
    /// Position or equality deletes.
    pub content: DataContentType,
    /// Data sequence number.
    pub data_seq: i64,
    /// Partition spec the file was written for.
    pub spec_id: i32,
    /// Whether that spec is unpartitioned (then the delete applies in every partition).
    pub spec_unpartitioned: bool,
    /// Partition tuple.
    pub partition: Struct,
    /// The one data file a position delete file covers, when it says so.
    pub referenced_data_file: Option<String>,
    /// Equality field ids (equality deletes).
    pub equality_ids: Vec<i32>,
    /// For a deletion vector (a position delete stored in a Puffin file): where its blob lies.
    pub deletion_vector: Option<BlobRange>,
}

impl DeleteFileRef {
    /// What tells delete files apart: the path, and a deletion vector's blob offset (several
    /// vectors share a Puffin file).
    pub fn identity(&self) -> (&str, Option<u64>) {
        (self.path.as_str(), self.deletion_vector.map(|b| b.offset))
    }

    /// Whether this delete may apply to `data` by the spec's sequence-number and scope rules
    /// (not looking at which file a position delete names): an equality delete when it is newer
    /// than the file, a position delete when it is not older; in the file's partition, or
    /// everywhere when its spec is unpartitioned.
    pub fn may_apply_to(&self, data: &super::PlannedFile) -> bool {
        let newer = match self.content {
            DataContentType::EqualityDeletes => data.data_seq < self.data_seq,
            _ => data.data_seq <= self.data_seq,
        };
        newer
            && (self.spec_unpartitioned
                || (self.spec_id == data.spec_id && self.partition == data.partition))
    }
}

/// Where a deletion vector's blob lies in its Puffin file (`content_offset`,
/// `content_size_in_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlobRange {
    /// Offset of the blob's first byte.
    pub offset: u64,
    /// The blob's length in bytes.
    pub length: u64,
}

/// Delete files indexed for assignment to data files.
///
/// Memory and time stay linear in files + deletes: position deletes are looked up per data file
/// (by path, or by partition), equality deletes are summarised per scope by their highest
/// sequence number, and the equality deletes a scan needs are chosen once for all its files.
#[derive(Debug, Default)]
pub struct DeleteIndex {
    /// Position deletes that name their data file, by that file's path.
    by_data_file: HashMap<String, Vec<Arc<DeleteFileRef>>>,
    /// Partition-scoped position deletes, by (spec, partition).
    positions_by_partition: HashMap<(i32, Struct), Vec<Arc<DeleteFileRef>>>,
    /// Partition-scoped equality deletes, by (spec, partition).
    equality_by_partition: HashMap<(i32, Struct), Vec<Arc<DeleteFileRef>>>,
    /// Equality deletes of unpartitioned specs: they apply everywhere.
    global: Vec<Arc<DeleteFileRef>>,
    /// Highest sequence number of the equality deletes of each scope.
    equality_max_seq: HashMap<(i32, Struct), i64>,
    global_max_seq: Option<i64>,
}

impl DeleteIndex {
    /// Indexes `deletes`.
    pub fn new(deletes: impl IntoIterator<Item = DeleteFileRef>) -> Self {
        Self::from_shared(deletes.into_iter().map(Arc::new))
    }

    /// Indexes `deletes` that are shared with others (the manifest cache).
    pub fn from_shared(deletes: impl IntoIterator<Item = Arc<DeleteFileRef>>) -> Self {
        let mut index = Self::default();
        for d in deletes {
            let scope = (d.spec_id, d.partition.clone());
            match (d.content, d.referenced_data_file.clone()) {
                (DataContentType::PositionDeletes, Some(target)) => {
                    index.by_data_file.entry(target).or_default().push(d);
                }
                // Position deletes stay scoped to their own spec and partition, even unpartitioned.
                (DataContentType::PositionDeletes, None) => {
                    index
                        .positions_by_partition
                        .entry(scope)
                        .or_default()
                        .push(d);
                }
                (DataContentType::EqualityDeletes, _) if d.spec_unpartitioned => {
                    index.global_max_seq = Some(
                        index
                            .global_max_seq
                            .map_or(d.data_seq, |m| m.max(d.data_seq)),
                    );
                    index.global.push(d);
                }
                (DataContentType::EqualityDeletes, _) => {
                    let max = index
                        .equality_max_seq
                        .entry(scope.clone())
                        .or_insert(d.data_seq);
                    *max = (*max).max(d.data_seq);
                    index
                        .equality_by_partition
                        .entry(scope)
                        .or_default()
                        .push(d);
                }
                (DataContentType::Data, _) => {}
            }
        }
        index
    }

    /// Every delete file indexed.
    pub fn all(&self) -> impl Iterator<Item = &Arc<DeleteFileRef>> {
        self.by_data_file
            .values()
            .chain(self.positions_by_partition.values())
            .chain(self.equality_by_partition.values())
            .flatten()
            .chain(self.global.iter())
    }

    /// Whether there are no delete files at all.
    pub fn is_empty(&self) -> bool {
        self.by_data_file.is_empty()
            && self.positions_by_partition.is_empty()
            && self.equality_by_partition.is_empty()
            && self.global.is_empty()
    }

    /// The position delete files that apply to `data`: its deletion vector when one applies
    /// (it holds the positions of the older delete files), else its position delete files.
    pub fn position_deletes(&self, data: &DataFileRef) -> Vec<Arc<DeleteFileRef>> {
        let mut all: Vec<Arc<DeleteFileRef>> = self
            .by_data_file
            .get(&data.path)
            .into_iter()
            .flatten()
            .filter(|d| d.spec_id == data.spec_id && d.partition == data.partition)
            .chain(
                self.positions_by_partition
                    .get(&(data.spec_id, data.partition.clone()))
                    .into_iter()
                    .flatten(),
            )
            .filter(|d| data.data_seq <= d.data_seq)
            .cloned()
            .collect();
        prefer_deletion_vectors(&mut all);
        all
    }

    /// Whether some equality delete applies to `data`.
    pub fn has_equality_deletes(&self, data: &DataFileRef) -> bool {
        self.global_max_seq.is_some_and(|m| m > data.data_seq)
            || self
                .equality_max_seq
                .get(&(data.spec_id, data.partition.clone()))
                .is_some_and(|m| *m > data.data_seq)
    }

    /// The equality delete files that apply to at least one of `files`.
    pub fn equality_deletes_for<'a>(
        &self,
        files: impl IntoIterator<Item = &'a DataFileRef>,
    ) -> Vec<Arc<DeleteFileRef>> {
        // The oldest data file of each scope decides which deletes can still apply there.
        let mut oldest: HashMap<(i32, Struct), i64> = HashMap::new();
        let mut oldest_any: Option<i64> = None;
        for f in files {
            oldest_any = Some(oldest_any.map_or(f.data_seq, |m| m.min(f.data_seq)));
            let scope = (f.spec_id, f.partition.clone());
            if self.equality_max_seq.contains_key(&scope) {
                let o = oldest.entry(scope).or_insert(f.data_seq);
                *o = (*o).min(f.data_seq);
            }
        }
        let scoped = oldest.iter().flat_map(|(scope, seq)| {
            self.equality_by_partition
                .get(scope)
                .into_iter()
                .flatten()
                .filter(move |d| d.data_seq > *seq)
        });
        let global = self
            .global
            .iter()
            .filter(|d| oldest_any.is_some_and(|seq| d.data_seq > seq));
        scoped.chain(global).cloned().collect()
    }

    /// Every delete file that applies to `data` (position and equality).
    pub fn applicable(&self, data: &DataFileRef) -> Vec<Arc<DeleteFileRef>> {
        let mut all = self.position_deletes(data);
        all.extend(self.equality_deletes_for([data]));
        all
    }
}

/// Keeps only the deletion vectors of `deletes` (the position deletes that apply to one data
/// file) when there is one: a deletion vector replaces the position delete files before it.
pub(crate) fn prefer_deletion_vectors(deletes: &mut Vec<Arc<DeleteFileRef>>) {
    if deletes.iter().any(|d| d.deletion_vector.is_some()) {
        deletes.retain(|d| d.deletion_vector.is_some());
    }
}

#[cfg(test)]
mod tests {
    use iceberg::spec::Literal;

    use super::*;

    fn part(v: i64) -> Struct {
        Struct::from_iter([Some(Literal::long(v))])
    }

    fn data(path: &str, seq: i64, p: i64) -> DataFileRef {
        DataFileRef {
            path: path.into(),
            data_seq: seq,
            spec_id: 0,
            partition: part(p),
        }
    }

    fn delete(content: DataContentType, seq: i64, p: Option<i64>) -> DeleteFileRef {
        DeleteFileRef {
            path: format!("del-{seq}-{p:?}"),
            size: 1,
            record_count: 1,
            content,
            data_seq: seq,
            spec_id: if p.is_some() { 0 } else { 1 },
            spec_unpartitioned: p.is_none(),
            partition: p.map(part).unwrap_or_else(Struct::empty),
            referenced_data_file: None,
            equality_ids: vec![1],
            deletion_vector: None,
        }
    }

    #[test]
    fn sequence_numbers_gate_each_kind() {
        let idx = DeleteIndex::new([
            delete(DataContentType::PositionDeletes, 3, Some(0)),
            delete(DataContentType::EqualityDeletes, 3, Some(0)),
        ]);
        let kinds = |seq| {
            let mut k: Vec<_> = idx
                .applicable(&data("a", seq, 0))
                .iter()
                .map(|d| d.content)
                .collect();
            k.sort_by_key(|c| *c as i32);
            k
        };
        // Older data: both apply.
        assert_eq!(
            kinds(2),
            [
                DataContentType::PositionDeletes,
                DataContentType::EqualityDeletes
            ]
        );
        // Same sequence number: position deletes apply, equality deletes do not.
        assert_eq!(kinds(3), [DataContentType::PositionDeletes]);
        // Newer data: nothing applies.
        assert!(kinds(4).is_empty());
    }

    #[test]
    fn partition_scope_and_global_deletes() {
        let idx = DeleteIndex::new([
            delete(DataContentType::EqualityDeletes, 5, Some(0)),
            delete(DataContentType::EqualityDeletes, 5, None),
        ]);
        assert_eq!(idx.applicable(&data("a", 1, 0)).len(), 2);
        // Another partition sees only the unpartitioned (global) delete.
        let other = idx.applicable(&data("b", 1, 1));
        assert_eq!(other.len(), 1);
        assert!(other[0].spec_unpartitioned);
        // Same partition values under another spec are another partition.
        let mut d = data("c", 1, 0);
        d.spec_id = 2;
        assert_eq!(idx.applicable(&d).len(), 1);
    }

    #[test]
    fn unpartitioned_position_deletes_are_not_global() {
        let idx = DeleteIndex::new([delete(DataContentType::PositionDeletes, 5, None)]);
        assert!(idx.applicable(&data("a", 1, 0)).is_empty());
        let mut unpartitioned = data("b", 1, 0);
        unpartitioned.spec_id = 1;
        unpartitioned.partition = Struct::empty();
        assert_eq!(idx.applicable(&unpartitioned).len(), 1);
    }

    #[test]
    fn referenced_data_file_targets_one_file() {
        let mut pos = delete(DataContentType::PositionDeletes, 4, Some(0));
        pos.referenced_data_file = Some("a".into());
        let idx = DeleteIndex::new([pos]);
        assert_eq!(idx.applicable(&data("a", 1, 0)).len(), 1);
        assert!(idx.applicable(&data("b", 1, 0)).is_empty());
        assert!(!idx.is_empty());
        assert!(DeleteIndex::default().is_empty());
    }

    #[test]
    fn a_deletion_vector_replaces_position_delete_files() {
        let scoped = delete(DataContentType::PositionDeletes, 4, Some(0));
        let mut named = delete(DataContentType::PositionDeletes, 4, Some(0));
        named.path = "named".into();
        named.referenced_data_file = Some("a".into());
        let mut dv = delete(DataContentType::PositionDeletes, 5, Some(0));
        dv.path = "dvs.puffin".into();
        dv.referenced_data_file = Some("a".into());
        dv.deletion_vector = Some(BlobRange {
            offset: 4,
            length: 40,
        });
        let idx = DeleteIndex::new([scoped.clone(), named, dv]);
        let for_a = idx.position_deletes(&data("a", 1, 0));
        assert_eq!(for_a.len(), 1);
        assert_eq!(for_a[0].path, "dvs.puffin");
        // Another file of the partition keeps the partition-scoped file.
        let for_b = idx.position_deletes(&data("b", 1, 0));
        assert_eq!(for_b.len(), 1);
        assert_eq!(for_b[0].path, scoped.path);
        // Data newer than every delete: none applies.
        assert!(idx.position_deletes(&data("a", 6, 0)).is_empty());
        // A vector recorded in another partition than its data file does not apply to it.
        let mut elsewhere = delete(DataContentType::PositionDeletes, 5, Some(1));
        elsewhere.referenced_data_file = Some("a".into());
        elsewhere.deletion_vector = Some(BlobRange {
            offset: 4,
            length: 40,
        });
        let idx = DeleteIndex::new([elsewhere]);
        assert!(idx.position_deletes(&data("a", 1, 0)).is_empty());
    }
}
