//! A process-wide cache of decoded manifests and manifest lists.
//!
//! Both kinds of file are immutable once written (a commit writes new files, it never changes
//! old ones), so an entry can never go stale. Entries are keyed by the location the file is read
//! from (after the table's [`LocationMap`](crate::LocationMap)) and its length, and hold only
//! what planning keeps of the file. The cache is bounded in bytes (estimated) and drops the least
//! recently used entries first; one entry may take at most a quarter of it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use iceberg::spec::ManifestFile;

use super::ManifestFiles;

/// Default bound of the cache of decoded manifests.
pub const DEFAULT_MANIFEST_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// What the cache holds and how it has been used since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManifestCacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that read the file.
    pub misses: u64,
    /// Entries held now.
    pub entries: usize,
    /// Estimated bytes held now.
    pub bytes: usize,
    /// The bound.
    pub capacity: usize,
}

struct Lru<V> {
    map: HashMap<(String, u64), (Arc<V>, usize, u64)>,
    bytes: usize,
    capacity: usize,
    tick: u64,
    hits: u64,
    misses: u64,
}

impl<V> Lru<V> {
    fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::new(),
            bytes: 0,
            capacity,
            tick: 0,
            hits: 0,
            misses: 0,
        }
    }

    fn get(&mut self, key: &(String, u64)) -> Option<Arc<V>> {
        self.tick += 1;
        match self.map.get_mut(key) {
            Some((v, _, used)) => {
                *used = self.tick;
                self.hits += 1;
                Some(Arc::clone(v))
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    fn insert(&mut self, key: (String, u64), value: Arc<V>, bytes: usize) {
        if bytes > self.capacity / 4 {
            return;
        }
        self.tick += 1;
        if let Some((_, old, _)) = self.map.insert(key, (value, bytes, self.tick)) {
            self.bytes -= old;
        }
        self.bytes += bytes;
        self.shrink_to(self.capacity);
    }

    fn shrink_to(&mut self, capacity: usize) {
        while self.bytes > capacity {
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, b, _)) = self.map.remove(&oldest) {
                self.bytes -= b;
            }
        }
    }
}

struct Caches {
    manifests: Lru<ManifestFiles>,
    lists: Lru<Vec<ManifestFile>>,
}

static CACHE: LazyLock<Mutex<Caches>> = LazyLock::new(|| {
    Mutex::new(Caches {
        manifests: Lru::new(DEFAULT_MANIFEST_CACHE_BYTES),
        lists: Lru::new(DEFAULT_MANIFEST_CACHE_BYTES / 8),
    })
});

fn caches() -> std::sync::MutexGuard<'static, Caches> {
    // The cache holds no invariant a panic elsewhere could break half-way.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the bound of the manifest cache (0 turns it off), dropping entries to fit.
pub fn set_manifest_cache_capacity(bytes: usize) {
    let mut c = caches();
    c.manifests.capacity = bytes;
    c.manifests.shrink_to(bytes);
    c.lists.capacity = bytes / 8;
    c.lists.shrink_to(bytes / 8);
}

/// The manifest cache's use so far and what it holds.
pub fn manifest_cache_stats() -> ManifestCacheStats {
    let c = caches();
    ManifestCacheStats {
        hits: c.manifests.hits + c.lists.hits,
        misses: c.manifests.misses + c.lists.misses,
        entries: c.manifests.map.len() + c.lists.map.len(),
        bytes: c.manifests.bytes + c.lists.bytes,
        capacity: c.manifests.capacity,
    }
}

pub(super) fn get_manifest(key: &(String, u64)) -> Option<Arc<ManifestFiles>> {
    caches().manifests.get(key)
}

pub(super) fn put_manifest(key: (String, u64), files: Arc<ManifestFiles>) {
    let bytes = manifest_bytes(&files);
    caches().manifests.insert(key, files, bytes);
}

pub(super) fn get_list(key: &(String, u64)) -> Option<Arc<Vec<ManifestFile>>> {
    caches().lists.get(key)
}

pub(super) fn put_list(key: (String, u64), list: Arc<Vec<ManifestFile>>) {
    let bytes = list.iter().map(manifest_file_bytes).sum::<usize>() + 64;
    caches().lists.insert(key, list, bytes);
}

fn struct_bytes(s: &iceberg::spec::Struct) -> usize {
    32 + s.fields().len() * 40
}

fn manifest_bytes((data, deletes): &ManifestFiles) -> usize {
    let data: usize = data
        .iter()
        .map(|f| {
            // The entry's file: its path, partition and column statistics.
            let stats = f.stats.as_deref().map_or(0, |s| {
                240 + s.file_path().len()
                    + struct_bytes(s.partition())
                    + (s.lower_bounds().len() + s.upper_bounds().len()) * 64
                    + (s.column_sizes().len()
                        + s.value_counts().len()
                        + s.null_value_counts().len()
                        + s.nan_value_counts().len())
                        * 24
                    + s.split_offsets().map_or(0, |o| o.len() * 8)
            });
            96 + f.data.path.len() + struct_bytes(&f.data.partition) + stats
        })
        .sum();
    let deletes: usize = deletes
        .iter()
        .map(|d| {
            160 + d.path.len()
                + d.referenced_data_file.as_ref().map_or(0, String::len)
                + d.equality_ids.len() * 4
                + struct_bytes(&d.partition)
        })
        .sum();
    64 + data + deletes
}

fn manifest_file_bytes(m: &ManifestFile) -> usize {
    200 + m.manifest_path.len() + m.partitions.as_ref().map_or(0, |p| p.len() * 96)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_goes_first() {
        let mut lru: Lru<u32> = Lru::new(100);
        lru.insert(("a".into(), 1), Arc::new(1), 20);
        lru.insert(("b".into(), 1), Arc::new(2), 20);
        assert!(lru.get(&("a".into(), 1)).is_some());
        lru.insert(("c".into(), 1), Arc::new(3), 20);
        lru.insert(("d".into(), 1), Arc::new(4), 20);
        lru.insert(("e".into(), 1), Arc::new(5), 25);
        // 105 bytes > 100: "b" is the least recently used.
        assert!(lru.get(&("b".into(), 1)).is_none());
        assert!(lru.get(&("a".into(), 1)).is_some());
        assert_eq!(lru.bytes, 85);
        // Same path, other length: another entry.
        assert!(lru.get(&("a".into(), 2)).is_none());
        // Too large for one entry: not kept.
        lru.insert(("f".into(), 1), Arc::new(6), 26);
        assert!(lru.get(&("f".into(), 1)).is_none());
        lru.shrink_to(0);
        assert_eq!((lru.map.len(), lru.bytes), (0, 0));
    }
}
