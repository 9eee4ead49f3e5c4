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

/// A [`KeyRange`] may take this much memory even when the table is smaller (it fits in cache).
pub const RANGE_MIN_BYTES: usize = 64 * 1024;

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
    /// Exact membership of integer keys over their range, built by [`KeyTable::seal`] instead
    /// of the filter when it is small enough.
    range: Option<Box<KeyRange>>,
}

/// Exact membership of the keys of one signed integer column: one bit per value from the
/// smallest deleted key to the largest. A probe row whose bit is clear is certainly not
/// deleted, and one whose bit is set certainly has a deleted key (its sequence number and scope
/// are still to check), so the probe needs neither a hash of every row nor a Bloom filter. Data
/// files usually hold runs of increasing ids, which walk this array in order.
///
/// When every key is deleted in one scope by a few distinct sequence numbers (deletes committed
/// in a few waves), the range also keeps, for each of those numbers, the bits of the keys deleted
/// at or above it: a file of any data sequence number is then settled by one of them, without a
/// lookup per row ([`KeyRange::settles`]).
#[derive(Debug)]
pub struct KeyRange {
    min: i64,
    /// Values covered (`bits` holds at least this many bits).
    span: u64,
    bits: Vec<u64>,
    /// Whether a NULL key is deleted.
    null: bool,
    /// When every deleted key is in one scope: that scope and the lowest delete sequence
    /// number (a row of that scope or any, by [`KeyRange::settles`], older than it is deleted
    /// iff its key is held, without looking the key up).
    uniform: Option<(i32, i64)>,
    /// With `uniform`, when they fit: for each higher distinct delete sequence number, in
    /// ascending order, the keys deleted at or above it. `None`: not built.
    tiers: Option<Vec<Tier>>,
}

/// The keys deleted at or above one sequence number (see [`KeyRange`]).
#[derive(Debug)]
struct Tier {
    from_seq: i64,
    bits: Vec<u64>,
    null: bool,
}

/// At most this many distinct delete sequence numbers get bits of their own.
const MAX_TIERS: usize = 8;

/// One set of keys of a [`KeyRange`]: the rows whose key it holds are deleted.
#[derive(Debug, Clone, Copy)]
pub struct KeyBits<'a> {
    min: i64,
    span: u64,
    bits: &'a [u64],
    null: bool,
}

impl KeyRange {
    /// The range of the keys of `table`, each the row format of one `width`-byte signed integer
    /// (4 or 8); `None` when a key has another form or the bits would exceed `max_bytes`.
    fn build(table: &KeyTable, width: usize, max_bytes: usize) -> Option<Self> {
        let (mut min, mut max, mut null) = (i64::MAX, i64::MIN, false);
        let mut uniform: Option<(i32, i64)> = None;
        let mut scopes_differ = false;
        let mut seqs: Vec<i64> = vec![];
        for (key, scope, seq) in table.iter() {
            match decode_signed(key, width)? {
                Some(v) => (min, max) = (min.min(v), max.max(v)),
                None => null = true,
            }
            match &mut uniform {
                None => uniform = Some((scope, seq)),
                Some((s, q)) => {
                    scopes_differ |= *s != scope;
                    *q = (*q).min(seq);
                }
            }
            if seqs.len() <= MAX_TIERS && !seqs.contains(&seq) {
                seqs.push(seq);
            }
        }
        let uniform = uniform.filter(|_| !scopes_differ);
        let (span, words) = match min <= max {
            true => {
                let span = (i128::from(max) - i128::from(min) + 1) as u128;
                (span as u64, span.div_ceil(64))
            }
            // Only NULL keys (or none).
            false => (0, 0),
        };
        if words * 8 > max_bytes as u128 {
            return None;
        }
        let words = words as usize;
        let min = if span == 0 { 0 } else { min };
        let set = |bits: &mut [u64], v: i64| {
            let off = v.wrapping_sub(min) as u64;
            bits[(off >> 6) as usize] |= 1 << (off & 63);
        };
        let mut bits = vec![0u64; words];
        for (key, _, _) in table.iter() {
            if let Some(Some(v)) = decode_signed(key, width) {
                set(&mut bits, v);
            }
        }
        // One scope: a key has one entry, at the highest sequence number that deletes it.
        seqs.sort_unstable();
        let tiers =
            (uniform.is_some() && seqs.len() <= MAX_TIERS && (words * seqs.len()) * 8 <= max_bytes)
                .then(|| {
                    let mut tiers: Vec<Tier> = seqs
                        .iter()
                        .skip(1)
                        .map(|&from_seq| Tier {
                            from_seq,
                            bits: vec![0u64; words],
                            null: false,
                        })
                        .collect();
                    for (key, _, seq) in table.iter() {
                        let key = decode_signed(key, width).flatten();
                        for tier in tiers.iter_mut().take_while(|t| t.from_seq <= seq) {
                            match key {
                                Some(v) => set(&mut tier.bits, v),
                                None => tier.null = true,
                            }
                        }
                    }
                    tiers
                });
        Some(Self {
            min,
            span,
            bits,
            null,
            uniform,
            tiers,
        })
    }

    /// Words of bits held.
    fn words(&self) -> usize {
        self.bits.capacity()
            + self
                .tiers
                .iter()
                .flatten()
                .map(|t| t.bits.capacity())
                .sum::<usize>()
    }

    /// Every key held, whatever deletes it.
    pub fn all(&self) -> KeyBits<'_> {
        KeyBits {
            min: self.min,
            span: self.span,
            bits: &self.bits,
            null: self.null,
        }
    }

    /// For rows of one scope and data sequence number: `Some(Some(keys))` when a row is deleted
    /// iff `keys` holds its key, `Some(None)` when no row is, `None` when each must be looked up.
    pub fn settles(&self, scope: i32, data_seq: i64) -> Option<Option<KeyBits<'_>>> {
        let (s, min_seq) = self.uniform?;
        if s != GLOBAL_SCOPE && s != scope {
            return Some(None);
        }
        if min_seq > data_seq {
            return Some(Some(self.all()));
        }
        let tiers = self.tiers.as_ref()?;
        Some(
            tiers
                .iter()
                .find(|t| t.from_seq > data_seq)
                .map(|t| KeyBits {
                    bits: &t.bits,
                    null: t.null,
                    ..self.all()
                }),
        )
    }
}

impl KeyBits<'_> {
    /// Whether the non-NULL key `v` is held.
    #[inline]
    pub fn holds(&self, v: i64) -> bool {
        let off = v.wrapping_sub(self.min) as u64;
        off < self.span && (self.bits[(off >> 6) as usize] >> (off & 63)) & 1 == 1
    }

    /// Which of the `n` (at most 64) consecutive values from `first` are held, as the low bits
    /// of a word, when they all lie inside the range or all outside it (`None` when the run
    /// straddles an end, or would pass `i64::MAX`).
    #[inline]
    pub fn run(&self, first: i64, n: usize) -> Option<u64> {
        debug_assert!((1..=64).contains(&n));
        let last = first.checked_add(n as i64 - 1)?;
        let off = i128::from(first) - i128::from(self.min);
        let end = i128::from(last) - i128::from(self.min);
        if end < 0 || off >= i128::from(self.span) {
            return Some(0);
        }
        if off < 0 || end >= i128::from(self.span) {
            return None;
        }
        let (w, b) = ((off >> 6) as usize, (off & 63) as u32);
        let lo = self.bits[w] >> b;
        let hi = match b {
            0 => 0,
            _ => self.bits.get(w + 1).map_or(0, |x| x << (64 - b)),
        };
        let word = lo | hi;
        Some(match n {
            64 => word,
            _ => word & ((1u64 << n) - 1),
        })
    }

    /// Whether the NULL key is held.
    pub fn holds_null(&self) -> bool {
        self.null
    }
}

/// The value of a row-format key of one `width`-byte signed integer column (`[1, big-endian
/// value with the sign bit flipped]`, or `width + 1` zero bytes for NULL): `Some(None)` for
/// NULL, `None` when the key has another form.
fn decode_signed(key: &[u8], width: usize) -> Option<Option<i64>> {
    if key.len() != width + 1 {
        return None;
    }
    match (key[0], width) {
        (0, _) => key.iter().all(|&b| b == 0).then_some(None),
        (1, 4) => {
            let u = u32::from_be_bytes(key[1..].try_into().ok()?) ^ (1 << 31);
            Some(Some(i64::from(u as i32)))
        }
        (1, 8) => {
            let u = u64::from_be_bytes(key[1..].try_into().ok()?) ^ (1 << 63);
            Some(Some(u as i64))
        }
        _ => None,
    }
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
        self.range.as_deref().map_or(0, KeyRange::words) * size_of::<u64>()
            + self.filter.capacity() * size_of::<u64>()
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

    /// Builds the probe's first check over the keys inserted so far (later inserts clear it):
    /// for keys of one `width`-byte signed integer column ([`KeyTable::range`]), the exact
    /// [`KeyRange`] when it takes no more memory than the table itself (or than
    /// [`RANGE_MIN_BYTES`]); else the Bloom filter
    /// ([`KeyTable::may_hold`]).
    pub fn seal(&mut self, width: Option<usize>) {
        self.unseal();
        if let Some(w) = width {
            // Other widths: `build` finds keys of another form and declines.
            self.range = KeyRange::build(self, w, self.size().max(RANGE_MIN_BYTES)).map(Box::new);
            if self.range.is_some() {
                return;
            }
        }
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

    /// Drops the filter or range.
    pub fn unseal(&mut self) {
        self.filter = vec![];
        self.range = None;
    }

    /// The exact integer key range, when [`KeyTable::seal`] built one.
    pub fn range(&self) -> Option<&KeyRange> {
        self.range.as_deref()
    }

    /// Whether no row of data sequence number `data_seq` or above can be deleted.
    pub fn spares_from(&self, data_seq: i64) -> bool {
        self.max_seq.is_none_or(|m| m <= data_seq)
    }

    /// Records that `key` is deleted in `scope` by a delete with sequence number `seq`.
    pub fn insert(&mut self, key: &[u8], scope: i32, seq: i64) {
        self.max_seq = Some(self.max_seq.map_or(seq, |m| m.max(seq)));
        if !self.filter.is_empty() || self.range.is_some() {
            self.unseal();
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
                t.seal(None);
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
        t.seal(None);
        assert!(t.size() <= t.size_after(0, 0) && t.size() > before);
        // Every key passes the filter; most absent keys do not reach the map.
        assert!((0..10_000u32).all(|i| t.is_deleted(&i.to_be_bytes(), 0, 0)));
        assert!(!(10_000..20_000u32).any(|i| t.is_deleted(&i.to_be_bytes(), 0, 0)));
    }

    /// What `settles` answered, with the keys it gave as the values they hold in -100..6000.
    fn held(settled: Option<Option<KeyBits<'_>>>) -> Option<Vec<i64>> {
        settled.map(|keys| keys.map_or(vec![], |k| (-100..6000).filter(|&v| k.holds(v)).collect()))
    }

    /// The row format of a nullable signed integer of `width` bytes.
    fn signed_key(v: Option<i64>, width: usize) -> Vec<u8> {
        match (v, width) {
            (None, _) => vec![0; width + 1],
            (Some(v), 4) => {
                let mut k = vec![1];
                k.extend(((v as i32 as u32) ^ (1 << 31)).to_be_bytes());
                k
            }
            (Some(v), _) => {
                let mut k = vec![1];
                k.extend(((v as u64) ^ (1 << 63)).to_be_bytes());
                k
            }
        }
    }

    #[test]
    fn integer_keys_seal_into_an_exact_range() {
        for width in [4, 8] {
            let mut t = KeyTable::default();
            let keys = [-70i64, -1, 0, 63, 64, 1000, 5000];
            for k in keys {
                t.insert(&signed_key(Some(k), width), GLOBAL_SCOPE, 2);
            }
            t.insert(&signed_key(None, width), 3, 2);
            t.seal(Some(width));
            let range = t.range().expect("a range of 5071 values fits");
            assert!(range.all().holds_null());
            for v in -200..6000 {
                assert_eq!(
                    range.all().holds(v),
                    keys.contains(&v),
                    "{v} (width {width})"
                );
            }
            assert!(!range.all().holds(i64::MIN) && !range.all().holds(i64::MAX));
            // Runs of consecutive values: the bits `holds` gives them, or `None` across an end.
            for first in -300..5200i64 {
                for n in [1usize, 7, 63, 64] {
                    let last = first + n as i64 - 1;
                    let want = (0..n).fold(0u64, |w, j| {
                        w | u64::from(range.all().holds(first + j as i64)) << j
                    });
                    match range.all().run(first, n) {
                        Some(word) => assert_eq!(word, want, "{first}+{n}"),
                        None => assert!(
                            (first < -70 && last >= -70) || (first <= 5000 && last > 5000),
                            "{first}+{n}"
                        ),
                    }
                }
            }
            assert_eq!(range.all().run(i64::MAX - 3, 64), None);
            assert_eq!(range.all().run(i64::MAX - 63, 64), Some(0));
            assert_eq!(range.all().run(i64::MIN, 64), Some(0));
            // The gate still applies to what the range holds.
            assert!(t.is_deleted(&signed_key(Some(63), width), 9, 1));
            assert!(!t.is_deleted(&signed_key(Some(63), width), 9, 2));
            assert!(t.is_deleted(&signed_key(None, width), 3, 1));
            assert!(!t.is_deleted(&signed_key(None, width), 4, 1));
            // The NULL key's scope (3) differs from the others' (global): never settled.
            assert_eq!(held(range.settles(9, 1)), None);
            // Another insert drops the range.
            t.insert(&signed_key(Some(7), width), GLOBAL_SCOPE, 2);
            assert!(t.range().is_none());
        }
        // Keys spread too far for a range of at most the table's size: the Bloom filter.
        let mut t = KeyTable::default();
        for k in [i64::MIN, 0, i64::MAX] {
            t.insert(&signed_key(Some(k), 8), GLOBAL_SCOPE, 2);
        }
        t.seal(Some(8));
        assert!(t.range().is_none());
        assert!(!t.filter.is_empty());
        assert!(t.is_deleted(&signed_key(Some(i64::MAX), 8), 0, 0));
        // Keys of another form (not one integer column): no range.
        let mut t = KeyTable::default();
        t.insert(b"abcde", GLOBAL_SCOPE, 2);
        t.seal(Some(4));
        assert!(t.range().is_none() && !t.filter.is_empty());
        // Only NULL deleted: an empty range that holds NULL.
        let mut t = KeyTable::default();
        t.insert(&signed_key(None, 8), GLOBAL_SCOPE, 2);
        t.seal(Some(8));
        let range = t.range().unwrap();
        assert!(range.all().holds_null() && !range.all().holds(0) && !range.all().holds(i64::MIN));
        // Every key in one scope: rows older than the oldest delete are settled by the range.
        for (scope, seqs) in [(GLOBAL_SCOPE, [5, 3]), (4, [6, 3])] {
            let mut t = KeyTable::default();
            t.insert(&signed_key(Some(10), 8), scope, seqs[0]);
            t.insert(&signed_key(Some(12), 8), scope, seqs[1]);
            t.seal(Some(8));
            let range = t.range().unwrap();
            assert_eq!(held(range.settles(4, 2)), Some(vec![10, 12]));
            // Between the two deletes: only the later one's key.
            let later = if seqs[0] > seqs[1] { 10 } else { 12 };
            assert_eq!(held(range.settles(4, 3)), Some(vec![later]));
            assert_eq!(held(range.settles(4, 6)), Some(vec![]));
            let other = if scope == GLOBAL_SCOPE {
                Some(vec![10, 12])
            } else {
                Some(vec![])
            };
            assert_eq!(held(range.settles(7, 2)), other);
        }
        // Two scopes: every row is looked up.
        let mut t = KeyTable::default();
        t.insert(&signed_key(Some(10), 8), 1, 5);
        t.insert(&signed_key(Some(12), 8), GLOBAL_SCOPE, 5);
        t.seal(Some(8));
        assert_eq!(held(t.range().unwrap().settles(1, 0)), None);
        // More distinct sequence numbers than get bits of their own: rows between them are
        // looked up; rows older than all of them are still settled.
        let mut t = KeyTable::default();
        for k in 0..(MAX_TIERS as i64 + 1) {
            t.insert(&signed_key(Some(k), 8), GLOBAL_SCOPE, 10 + k);
        }
        t.seal(Some(8));
        let range = t.range().unwrap();
        assert_eq!(
            held(range.settles(0, 9)).map(|v| v.len()),
            Some(MAX_TIERS + 1)
        );
        assert_eq!(held(range.settles(0, 10)), None);
        // A few: each data sequence number is settled by the keys deleted above it.
        let mut t = KeyTable::default();
        for (k, seq) in [(1, 5), (2, 7), (3, 5), (4, 9), (5, 7)] {
            t.insert(&signed_key(Some(k), 8), GLOBAL_SCOPE, seq);
        }
        t.insert(&signed_key(None, 8), GLOBAL_SCOPE, 7);
        t.seal(Some(8));
        let range = t.range().unwrap();
        for (data_seq, want, null) in [
            (0, vec![1, 2, 3, 4, 5], true),
            (4, vec![1, 2, 3, 4, 5], true),
            (5, vec![2, 4, 5], true),
            (6, vec![2, 4, 5], true),
            (7, vec![4], false),
            (8, vec![4], false),
        ] {
            let keys = range.settles(3, data_seq).unwrap().unwrap();
            assert_eq!(held(Some(Some(keys))), Some(want), "{data_seq}");
            assert_eq!(keys.holds_null(), null, "{data_seq}");
            // The same as the table's own answer, row by row.
            for k in 0..8 {
                assert_eq!(
                    keys.holds(k),
                    t.is_deleted(&signed_key(Some(k), 8), 3, data_seq),
                    "{k} at {data_seq}"
                );
            }
        }
        assert!(range.settles(3, 9).unwrap().is_none());
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
