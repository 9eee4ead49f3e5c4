//! The build side of the equality-delete join: deleted keys with the highest delete sequence
//! number per scope, in a compact hash table.
//!
//! ```text
//!  bytes:   |key a|key b|...            one copy of each distinct key (arrow row format)
//!  entries: [a, scope 0, seq 7, next ─┐] [b, GLOBAL, seq 3, next ∅] [a, GLOBAL, seq 5, next ∅]
//!  map:     hash(key) → first entry of that key, the rest chained through `next`
//! ```
//! A probe row `(key, scope, data_seq)` is deleted iff an entry of its key has
//! `scope ∈ {GLOBAL, row scope}` and `seq > data_seq`.

use std::mem::size_of;

use hashbrown::HashTable;

/// Scope of an equality delete that applies in every partition (an unpartitioned spec).
pub const GLOBAL_SCOPE: i32 = -1;
/// Scope of data files in partitions without partition-scoped equality deletes.
pub const NO_SCOPE: i32 = -2;

const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: usize,
    len: u32,
    scope: i32,
    seq: i64,
    next: u32,
}

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;

/// Hash of a key for the table.
#[inline]
pub fn table_hash(key: &[u8]) -> u64 {
    // Keys are short (one or a few row-encoded columns): the first and last 8 bytes are read
    // whole (overlapping when shorter than 16), longer keys fold 16-byte blocks first, and a
    // 128-bit multiply mixes every input bit into every output bit.
    let len = key.len();
    if len <= 16 {
        let (a, b) = if len >= 8 {
            (read8(key, 0), read8(key, len - 8))
        } else if len >= 4 {
            (u64::from(read4(key, 0)), u64::from(read4(key, len - 4)))
        } else if len > 0 {
            let v =
                u64::from(key[0]) << 16 | u64::from(key[len / 2]) << 8 | u64::from(key[len - 1]);
            (v, 0)
        } else {
            (0, 0)
        };
        return finish(a, b, P0, len);
    }
    let mut seed = P0;
    let mut at = 0;
    while at + 16 < len {
        seed = mum(read8(key, at) ^ P1, read8(key, at + 8) ^ seed);
        at += 16;
    }
    finish(read8(key, len - 16), read8(key, len - 8), seed, len)
}

#[inline]
fn finish(a: u64, b: u64, seed: u64, len: usize) -> u64 {
    let h = mum(a ^ P1, b ^ seed ^ len as u64);
    folded(mum(h ^ P0, P1 ^ len as u64))
}

/// [`table_hash`] of the row-format key of one non-NULL 4-byte signed integer column
/// (`[1, big-endian value with the sign bit flipped]`), computed from the value: the probe
/// hashes every row, and assembling the bytes first costs a stalled load per row.
#[inline]
pub fn signed_row_hash_4(v: u32) -> u64 {
    // The bytes after the validity byte, read little-endian.
    let s = (v ^ 0x8000_0000).swap_bytes();
    finish(u64::from(1 | (s << 8)), u64::from(s), P0, 5)
}

/// [`signed_row_hash_4`] for 8-byte integers.
#[inline]
pub fn signed_row_hash_8(v: u64) -> u64 {
    let s = (v ^ (1 << 63)).swap_bytes();
    finish(1 | (s << 8), s, P0, 9)
}

/// [`signed_row_hash_4`] for 16-byte integers.
#[inline]
pub fn signed_row_hash_16(v: u128) -> u64 {
    let s = (v ^ (1 << 127)).swap_bytes();
    let seed = mum((1 | ((s as u64) << 8)) ^ P1, ((s >> 56) as u64) ^ P0);
    finish(s as u64, (s >> 64) as u64, seed, 17)
}

/// The 128-bit product of `a` and `b`, folded to 64 bits.
fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

fn read8(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

fn read4(bytes: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(w)
}

/// The hash as the table uses it: its high half repeated in the low half. A slot keeps the high
/// half, so the map rehashes and the filter is built from slots alone, without touching the
/// entries or key bytes (random memory accesses that dominated building).
fn folded(hash: u64) -> u64 {
    let hi = hash >> 32;
    (hi << 32) | hi
}

/// A map slot: the high half of the key's hash (compared before touching the entry) and the
/// index of the key's first entry.
fn slot(hash: u64, idx: u32) -> u64 {
    (hash & 0xffff_ffff_0000_0000) | u64::from(idx)
}

fn slot_idx(slot: u64) -> u32 {
    slot as u32
}

fn same_hash(slot: u64, hash: u64) -> bool {
    (slot ^ hash) >> 32 == 0
}

/// Hash of a key for choosing a spill partition at `level` (independent of the table hash and
/// of every other level, so a partition spreads again when split further).
pub fn partition_of(key: &[u8], level: u32, fanout: usize) -> usize {
    let l = u64::from(level) + 1;
    let h = ahash::RandomState::with_seeds(
        l.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        l ^ 0xa5a5,
        l.rotate_left(17),
        0x51ce,
    )
    .hash_one(key);
    (h % fanout as u64) as usize
}

/// Deleted keys: for each distinct (key, scope), the highest delete sequence number.
#[derive(Debug, Default)]
pub struct KeyTable {
    map: HashTable<u64>,
    entries: Vec<Entry>,
    bytes: Vec<u8>,
    /// Highest delete sequence number held (rows at or above it cannot be deleted).
    max_seq: Option<i64>,
    /// Two bits per key in a bit array about 16× the key count (a Bloom filter, built by
    /// [`KeyTable::seal`]): most probes of absent keys end here, in cache, without touching the
    /// larger map.
    filter: Vec<u64>,
}

/// Bits of the filter for `entries` keys.
fn filter_bits(entries: usize) -> usize {
    (entries.max(1) * 16).next_power_of_two().max(4096)
}

/// The filter word of a hash and the two bits it sets there (a blocked Bloom filter: one
/// memory access per probe).
fn filter_word(hash: u64, words: usize) -> (usize, u64) {
    let word = (hash as usize) & (words - 1);
    let bits = (1u64 << ((hash >> 52) & 63)) | (1u64 << ((hash >> 58) & 63));
    (word, bits)
}

impl KeyTable {
    /// Number of distinct (key, scope) entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the table holds now.
    pub fn size(&self) -> usize {
        self.filter.capacity() * size_of::<u64>()
            + self.bytes.capacity()
            + self.entries.capacity() * size_of::<Entry>()
            + self.map.allocation_size()
    }

    /// Bytes the table would hold after `rows` more entries with `key_bytes` more key bytes
    /// (growth included), so the reservation can be taken before allocating.
    pub fn size_after(&self, rows: usize, key_bytes: usize) -> usize {
        // Vec growth: at least double, at least a small minimum.
        fn grown(len: usize, cap: usize, min: usize) -> usize {
            if len > cap {
                len.max(cap * 2).max(min)
            } else {
                cap
            }
        }
        let n = self.entries.len() + rows;
        let map = if n > self.map.capacity() {
            let buckets = match n {
                0..4 => 4,
                4..8 => 8,
                _ => (n * 8 / 7).next_power_of_two(),
            };
            // Slots (padded to the control group alignment), one control byte each, one group.
            (buckets * size_of::<u64>()).next_multiple_of(16) + buckets + 16
        } else {
            self.map.allocation_size()
        };
        filter_bits(n) / 8
            + grown(self.bytes.len() + key_bytes, self.bytes.capacity(), 8)
            + grown(n, self.entries.capacity(), 4) * size_of::<Entry>()
            + map
    }

    fn key<'a>(bytes: &'a [u8], e: &Entry) -> &'a [u8] {
        &bytes[e.offset..e.offset + e.len as usize]
    }

    /// Builds the filter over the keys inserted so far; later inserts clear it.
    pub fn seal(&mut self) {
        let bits = filter_bits(self.map.len());
        let mut filter = vec![0u64; bits / 64];
        for &s in self.map.iter() {
            let (word, mask) = filter_word(folded(s), bits / 64);
            filter[word] |= mask;
        }
        self.filter = filter;
    }

    /// Makes room for `rows` more keys at once (one growth instead of several).
    pub fn reserve(&mut self, rows: usize) {
        self.entries.reserve(rows);
        self.map.reserve(rows, |&s| folded(s));
    }

    /// Drops the filter.
    pub fn unseal(&mut self) {
        self.filter = vec![];
    }

    /// Whether no row of data sequence number `data_seq` or above can be deleted.
    pub fn spares_from(&self, data_seq: i64) -> bool {
        self.max_seq.is_none_or(|m| m <= data_seq)
    }

    /// Records that `key` is deleted in `scope` by a delete with sequence number `seq`.
    pub fn insert(&mut self, key: &[u8], scope: i32, seq: i64) {
        self.max_seq = Some(self.max_seq.map_or(seq, |m| m.max(seq)));
        if !self.filter.is_empty() {
            self.filter = vec![];
        }
        let Self {
            map,
            entries,
            bytes,
            ..
        } = self;
        let hash = table_hash(key);
        let found = map.find_mut(hash, |&s| {
            same_hash(s, hash) && Self::key(bytes, &entries[slot_idx(s) as usize]) == key
        });
        match found {
            Some(head) => {
                let mut i = slot_idx(*head);
                while i != NONE {
                    let e = &mut entries[i as usize];
                    if e.scope == scope {
                        e.seq = e.seq.max(seq);
                        return;
                    }
                    i = e.next;
                }
                // Same key, new scope: share the key bytes, chain in front.
                let first = entries[slot_idx(*head) as usize];
                entries.push(Entry {
                    scope,
                    seq,
                    next: slot_idx(*head),
                    ..first
                });
                *head = slot(hash, (entries.len() - 1) as u32);
            }
            None => {
                let offset = bytes.len();
                bytes.extend_from_slice(key);
                entries.push(Entry {
                    offset,
                    len: key.len() as u32,
                    scope,
                    seq,
                    next: NONE,
                });
                let idx = (entries.len() - 1) as u32;
                map.insert_unique(hash, slot(hash, idx), |&s| folded(s));
            }
        }
    }

    /// Whether a row with `key`, in `scope`, of data sequence number `data_seq` is deleted.
    #[cfg(test)]
    pub fn is_deleted(&self, key: &[u8], scope: i32, data_seq: i64) -> bool {
        let hash = table_hash(key);
        self.may_hold(hash) && self.is_deleted_hashed(key, hash, scope, data_seq)
    }

    /// Whether a key of hash `hash` may be in the table (false: certainly not). Cheap: probes
    /// check this for a whole batch first, so the filter's memory accesses overlap.
    #[inline]
    pub fn may_hold(&self, hash: u64) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let (word, mask) = filter_word(hash, self.filter.len());
        self.filter[word] & mask == mask
    }

    /// [`KeyTable::is_deleted`] for a key whose [`table_hash`] is `hash`.
    pub fn is_deleted_hashed(&self, key: &[u8], hash: u64, scope: i32, data_seq: i64) -> bool {
        let Some(&head) = self.map.find(hash, |&s| {
            same_hash(s, hash) && Self::key(&self.bytes, &self.entries[slot_idx(s) as usize]) == key
        }) else {
            return false;
        };
        let mut i = slot_idx(head);
        while i != NONE {
            let e = &self.entries[i as usize];
            if (e.scope == GLOBAL_SCOPE || e.scope == scope) && e.seq > data_seq {
                return true;
            }
            i = e.next;
        }
        false
    }

    /// Every entry as (key, scope, seq).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], i32, i64)> + '_ {
        self.entries
            .iter()
            .map(|e| (Self::key(&self.bytes, e), e.scope, e.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_and_scope_gate_each_key() {
        let mut t = KeyTable::default();
        t.insert(b"a", 0, 5);
        t.insert(b"a", 0, 3); // an older delete of the same key and scope changes nothing
        t.insert(b"a", GLOBAL_SCOPE, 2);
        t.insert(b"b", 1, 4);
        assert_eq!(t.len(), 3);
        assert!(!t.spares_from(4));
        assert!(t.spares_from(5));
        for sealed in [false, true] {
            if sealed {
                t.seal();
            }
            assert!(t.is_deleted(b"a", 0, 4));
            assert!(!t.is_deleted(b"zz", 0, 0));
        }
        // Same scope: deleted iff the delete is newer than the data.
        assert!(t.is_deleted(b"a", 0, 4));
        assert!(!t.is_deleted(b"a", 0, 5));
        // Another scope sees only the global delete (seq 2).
        assert!(t.is_deleted(b"a", 7, 1));
        assert!(!t.is_deleted(b"a", 7, 2));
        assert!(!t.is_deleted(b"a", NO_SCOPE, 3));
        assert!(t.is_deleted(b"b", 1, 0));
        assert!(!t.is_deleted(b"b", 0, 0));
        assert!(!t.is_deleted(b"c", 0, 0));
        let mut seen: Vec<_> = t.iter().map(|(k, s, q)| (k.to_vec(), s, q)).collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                (b"a".to_vec(), GLOBAL_SCOPE, 2),
                (b"a".to_vec(), 0, 5),
                (b"b".to_vec(), 1, 4)
            ]
        );
    }

    #[test]
    fn size_estimate_covers_growth() {
        let mut t = KeyTable::default();
        for i in 0..10_000u32 {
            let key = i.to_be_bytes();
            let projected = t.size_after(1, key.len());
            t.insert(&key, 0, 1);
            assert!(t.size() <= projected, "{} > {projected} at {i}", t.size());
        }
        assert!(t.is_deleted(&77u32.to_be_bytes(), 0, 0));
        let before = t.size();
        t.seal();
        assert!(t.size() <= t.size_after(0, 0) && t.size() > before);
        // Every key passes the filter; most absent keys do not reach the map.
        assert!((0..10_000u32).all(|i| t.is_deleted(&i.to_be_bytes(), 0, 0)));
        assert!(!(10_000..20_000u32).any(|i| t.is_deleted(&i.to_be_bytes(), 0, 0)));
    }

    #[test]
    fn levels_partition_independently() {
        // Keys of one level-0 partition spread over all partitions at level 1.
        let keys: Vec<[u8; 4]> = (0..4000u32)
            .map(u32::to_be_bytes)
            .filter(|k| partition_of(k, 0, 8) == 3)
            .collect();
        let mut counts = [0usize; 8];
        for k in &keys {
            counts[partition_of(k, 1, 8)] += 1;
        }
        assert!(counts.iter().all(|&c| c > keys.len() / 16), "{counts:?}");
    }
}
