//! Deletion vectors (format v3): the Puffin `deletion-vector-v1` blob, encoded and decoded.
//!
//! ```text
//!  blob = length (u32 BE: 4 + vector bytes) │ magic D1 D3 39 64 │ vector │ CRC-32 (u32 BE)
//!  vector = portable 64-bit Roaring: bitmap count (u64 LE), then per 32-bit key (ascending):
//!           key (u32 LE) │ 32-bit Roaring bitmap
//! ```
//! The CRC covers the magic and the vector. A deletion vector is one data file's deleted
//! positions: readers fetch exactly its bytes (`content_offset`, `content_size_in_bytes` of its
//! manifest entry) with one ranged read, never the whole Puffin file.

use datafusion::error::{DataFusionError, Result};
use object_store::{ObjectStore, ObjectStoreExt};
use roaring::RoaringTreemap;

/// The magic bytes that open a deletion vector's vector.
const MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// Bytes around the vector: length, magic, CRC.
const FRAME_BYTES: usize = 4 + 4 + 4;

/// A deletion vector stored in a Puffin file, as its manifest entry describes it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct DeletionVectorRef {
    /// Recorded location of the data file it deletes rows from (`referenced_data_file`).
    pub data_file: String,
    /// Where its blob starts in the Puffin file (`content_offset`).
    pub offset: u64,
    /// Its blob's length (`content_size_in_bytes`).
    pub length: u64,
}

/// Encodes `positions` as a `deletion-vector-v1` blob.
pub(crate) fn encode(positions: &RoaringTreemap) -> Result<Vec<u8>> {
    if positions.max().is_some_and(|p| p > i64::MAX as u64) {
        return Err(DataFusionError::Internal(
            "a deletion vector position does not fit in 63 bits".into(),
        ));
    }
    let mut vector = positions.clone();
    vector.optimize();
    let size = vector.serialized_size();
    let mut out = Vec::with_capacity(size + FRAME_BYTES);
    let length = u32::try_from(size + MAGIC.len()).map_err(|_| {
        DataFusionError::Execution(format!("a deletion vector of {size} bytes is too large"))
    })?;
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&MAGIC);
    vector
        .serialize_into(&mut out)
        .map_err(|e| DataFusionError::Internal(format!("deletion vector: {e}")))?;
    let crc = crc32fast::hash(&out[4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Decodes a `deletion-vector-v1` blob read from `location` (named in errors), checking its
/// length, magic and checksum, and that it holds `cardinality` positions (its manifest entry's
/// `record_count`).
pub(crate) fn decode(blob: &[u8], location: &str, cardinality: u64) -> Result<RoaringTreemap> {
    let bad = |what: String| {
        DataFusionError::Execution(format!("deletion vector in {location} is corrupt: {what}"))
    };
    if blob.len() < FRAME_BYTES {
        return Err(bad(format!(
            "{} bytes is shorter than its frame",
            blob.len()
        )));
    }
    let length = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    if length != blob.len() - 8 {
        return Err(bad(format!(
            "its length field says {length} bytes, the blob holds {}",
            blob.len() - 8
        )));
    }
    if blob[4..8] != MAGIC {
        return Err(bad(format!("wrong magic {:02X?}", &blob[4..8])));
    }
    let body = &blob[4..blob.len() - 4];
    let tail = &blob[blob.len() - 4..];
    let stored = u32::from_be_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let actual = crc32fast::hash(body);
    if stored != actual {
        return Err(bad(format!(
            "CRC-32 {actual:08x} does not match the stored {stored:08x}"
        )));
    }
    let positions = RoaringTreemap::deserialize_from(&body[4..])
        .map_err(|e| bad(format!("the Roaring bitmap does not decode: {e}")))?;
    if positions.max().is_some_and(|p| p > i64::MAX as u64) {
        return Err(bad("a position has its highest bit set".into()));
    }
    if positions.len() != cardinality {
        return Err(bad(format!(
            "it holds {} positions, its manifest entry says {cardinality}",
            positions.len()
        )));
    }
    Ok(positions)
}

/// Reads the deletion vector `dv` of the Puffin file at `location` (object store path) with one
/// ranged request, and decodes it.
pub(crate) async fn read(
    store: &dyn ObjectStore,
    location: &str,
    dv: &DeletionVectorRef,
    cardinality: u64,
) -> Result<RoaringTreemap> {
    let path = crate::storage::location::parsed_object_path(location)?;
    let end = dv.offset.checked_add(dv.length).ok_or_else(|| {
        DataFusionError::Execution(format!(
            "deletion vector in {location} has an impossible range {}+{}",
            dv.offset, dv.length
        ))
    })?;
    let bytes = store
        .get_range(&path, dv.offset..end)
        .await
        .map_err(|e| DataFusionError::Execution(format!("deletion vector in {location}: {e}")))?;
    decode(&bytes, location, cardinality)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_frame() {
        let mut positions: RoaringTreemap = (0..5000u64).step_by(3).collect();
        positions.insert(1 << 40);
        positions.insert_range(70_000..90_000);
        let blob = encode(&positions).unwrap();
        assert_eq!(
            u32::from_be_bytes(blob[0..4].try_into().unwrap()) as usize,
            blob.len() - 8
        );
        assert_eq!(blob[4..8], MAGIC);
        assert_eq!(decode(&blob, "f", positions.len()).unwrap(), positions);
    }

    #[test]
    fn matches_the_spec_layout_byte_for_byte() {
        // Positions {1, 3} in key 0: one bitmap, an array container of two values.
        let positions: RoaringTreemap = [1u64, 3].into_iter().collect();
        let blob = encode(&positions).unwrap();
        let mut vector = vec![];
        vector.extend_from_slice(&1u64.to_le_bytes()); // one 32-bit bitmap
        vector.extend_from_slice(&0u32.to_le_bytes()); // its key
                                                       // 32-bit Roaring (no run containers): cookie 12346, container count, then per
                                                       // container key and cardinality - 1, offsets, and the values.
        vector.extend_from_slice(&12346u32.to_le_bytes());
        vector.extend_from_slice(&1u32.to_le_bytes());
        vector.extend_from_slice(&0u16.to_le_bytes());
        vector.extend_from_slice(&1u16.to_le_bytes());
        vector.extend_from_slice(&16u32.to_le_bytes());
        vector.extend_from_slice(&1u16.to_le_bytes());
        vector.extend_from_slice(&3u16.to_le_bytes());
        let mut expected = ((vector.len() + 4) as u32).to_be_bytes().to_vec();
        expected.extend_from_slice(&MAGIC);
        expected.extend_from_slice(&vector);
        let crc = crc32fast::hash(&expected[4..]);
        expected.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(blob, expected);
    }

    #[test]
    fn damage_is_named() {
        let positions: RoaringTreemap = (10..20u64).collect();
        let blob = encode(&positions).unwrap();
        let err = |b: &[u8], n: u64| decode(b, "s3://b/x.puffin", n).unwrap_err().to_string();

        let mut flipped = blob.clone();
        let last_vector_byte = flipped.len() - 5;
        flipped[last_vector_byte] ^= 1;
        let e = err(&flipped, 10);
        assert!(e.contains("s3://b/x.puffin") && e.contains("CRC-32"), "{e}");

        let mut magic = blob.clone();
        magic[5] = 0;
        assert!(err(&magic, 10).contains("magic"));

        assert!(err(&blob[..blob.len() - 1], 10).contains("length field"));
        assert!(err(&blob[..6], 10).contains("shorter"));
        assert!(err(&blob, 11).contains("says 11"));
    }
}
