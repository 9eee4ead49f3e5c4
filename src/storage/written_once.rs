//! The bytes of Iceberg's write-once metadata files, kept for a session.
//!
//! Manifest lists and manifests (`.avro`) are never rewritten in place: a commit writes new ones
//! under new names. One scan may read them twice (the iceberg crate's planner prunes with its
//! own reads, then this crate lists the snapshot's delete files), and every query of a session
//! reads the current snapshot's again; on object storage each read is a round trip. The file
//! I/O of a session's tables reads them through this cache, bounded in size (oldest first
//! out), so each is fetched once. It is off while the manifest cache is
//! ([`set_manifest_cache_capacity`](crate::scan::set_manifest_cache_capacity) with 0), and never
//! holds more than that cache's bound.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;

/// Bytes held at most (less when the manifest cache is bounded lower).
const CAPACITY: usize = 64 << 20;

fn capacity() -> usize {
    CAPACITY.min(crate::scan::cache::manifest_cache_capacity())
}

/// Larger files are not kept (they would push out many others).
const LARGEST: usize = 8 << 20;

/// Whether `location` names a file of the kinds kept: manifest lists and manifests.
pub(crate) fn is_written_once(location: &str) -> bool {
    location.ends_with(".avro")
}

/// Write-once files by location.
#[derive(Default)]
pub(crate) struct WrittenOnce {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    files: HashMap<String, Bytes>,
    order: VecDeque<String>,
    bytes: usize,
}

impl WrittenOnce {
    /// The bytes of `location`, when kept.
    pub(crate) fn get(&self, location: &str) -> Option<Bytes> {
        if capacity() == 0 {
            return None;
        }
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.files.get(location).cloned()
    }

    /// Keeps the bytes of `location` (unless too large), dropping the oldest over capacity.
    pub(crate) fn put(&self, location: &str, bytes: &Bytes) {
        let capacity = capacity();
        if bytes.len() > LARGEST.min(capacity) {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.files.contains_key(location) {
            return;
        }
        state.bytes += bytes.len();
        state.files.insert(location.to_string(), bytes.clone());
        state.order.push_back(location.to_string());
        while state.bytes > capacity {
            let Some(oldest) = state.order.pop_front() else {
                break;
            };
            if let Some(gone) = state.files.remove(&oldest) {
                state.bytes -= gone.len();
            }
        }
    }

    /// Forgets `location` (it was deleted).
    pub(crate) fn remove(&self, location: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gone) = state.files.remove(location) {
            state.bytes -= gone.len();
            state.order.retain(|l| l != location);
        }
    }

    /// Forgets every location under `prefix`.
    pub(crate) fn remove_under(&self, prefix: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = state
            .files
            .keys()
            .filter(|l| l.starts_with(prefix))
            .cloned()
            .collect();
        for location in gone {
            if let Some(bytes) = state.files.remove(&location) {
                state.bytes -= bytes.len();
            }
            state.order.retain(|l| l != &location);
        }
    }

    /// Bytes held.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.state.lock().unwrap().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_files_leave_first_and_large_ones_are_not_kept() {
        let cache = WrittenOnce::default();
        let mb = Bytes::from(vec![7u8; 1 << 20]);
        for i in 0..64 {
            cache.put(&format!("m{i}.avro"), &mb);
        }
        assert_eq!(cache.held(), 64 << 20);
        cache.put("m64.avro", &mb);
        assert!(cache.get("m0.avro").is_none());
        assert_eq!(cache.get("m1.avro").as_deref(), Some(&mb[..]));
        assert_eq!(cache.held(), 64 << 20);
        cache.put("big.avro", &Bytes::from(vec![0u8; LARGEST + 1]));
        assert!(cache.get("big.avro").is_none());
        cache.remove("m1.avro");
        assert!(cache.get("m1.avro").is_none());
        assert_eq!(cache.held(), 63 << 20);
        cache.put("dir/a.avro", &mb);
        cache.remove_under("dir/");
        assert!(cache.get("dir/a.avro").is_none());
        assert_eq!(cache.held(), 63 << 20);
        assert!(is_written_once("s3://b/t/metadata/snap-1-1-x.avro"));
        assert!(!is_written_once("s3://b/t/metadata/v3.metadata.json"));
    }
}

#[cfg(test)]
mod file_io_tests {
    use crate::storage::{table_file_io, ObjectStores, StorageOptions};
    use crate::LocationMap;

    #[tokio::test]
    async fn a_manifest_is_read_once_per_session_until_it_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("m0.avro");
        let metadata = dir.path().join("v1.metadata.json");
        std::fs::write(&manifest, b"manifest bytes").unwrap();
        std::fs::write(&metadata, b"{}").unwrap();
        let stores = ObjectStores::standalone(StorageOptions::new(Vec::<(String, String)>::new()));
        let io = table_file_io(&LocationMap::default(), &stores);
        let (m, j) = (
            manifest.display().to_string(),
            metadata.display().to_string(),
        );
        assert_eq!(
            &io.new_input(&m).unwrap().read().await.unwrap()[..],
            b"manifest bytes"
        );
        assert_eq!(&io.new_input(&j).unwrap().read().await.unwrap()[..], b"{}");
        // Gone from disk behind the session's back: the manifest is still known, the metadata
        // file (not a write-once kind) is read again and fails.
        std::fs::remove_file(&manifest).unwrap();
        std::fs::remove_file(&metadata).unwrap();
        assert_eq!(
            &io.new_input(&m).unwrap().read().await.unwrap()[..],
            b"manifest bytes"
        );
        assert!(io.new_input(&j).unwrap().read().await.is_err());
        // Deleted through the file I/O: forgotten.
        io.delete(&m).await.unwrap();
        assert!(io.new_input(&m).unwrap().read().await.is_err());
    }
}
