//! Column chunks of strings and binaries that arrive dictionary-encoded.
//!
//! The parquet writer's own encoder takes a dictionary array value by value: it hashes every
//! row's bytes into its dictionary and compares every row's bytes for the page and chunk
//! bounds, as it would for a plain array. When a rewrite reads a column as the dictionaries its
//! files already hold, that work is mostly wasted: an input dictionary of a few thousand values
//! serves hundreds of thousands of rows. [`DictionaryChunk`] encodes such a column itself:
//!
//! - Each input dictionary value is hashed into the chunk's dictionary once, the first time a
//!   row refers to it; every row after that is a table lookup from its input key to its output
//!   key.
//! - Bounds come from ranks: the values of an input dictionary are sorted once, and a page's
//!   lowest and highest values are found by comparing the rows' ranks (integers), then one
//!   comparison of bytes per batch.
//! - Pages are written as the parquet writer writes them (format v1 data pages, the dictionary
//!   page first, RLE/bit-packed keys and definition levels, plain values after a dictionary
//!   outgrows its limit), with the same chunk statistics, column index and offset index, so
//!   nothing reading the file can tell which encoder wrote a chunk.
//!
//! Only a top-level, non-repeated byte-array column whose settings the encoder covers
//! ([`supported`]) takes this path; its chunk falls back to the parquet writer's encoder when
//! its first array is not a dictionary.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, DictionaryArray};
use arrow::datatypes::{DataType, Int32Type};
use bytes::Bytes;
use datafusion::error::{DataFusionError, Result};
use parquet::basic::{
    BoundaryOrder, Compression, Encoding, EncodingMask, PageType, Type as PhysicalType,
};
use parquet::column::page::{CompressedPage, Page, PageWriteSpec, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::ByteArray;
use parquet::file::metadata::{
    ColumnChunkMetaData, ColumnIndexBuilder, OffsetIndexBuilder, PageEncodingStats,
};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

/// The page compressions this encoder applies itself; others leave the column to the parquet
/// writer's encoder.
#[derive(Debug, Clone, Copy)]
pub(super) enum Codec {
    Uncompressed,
    Snappy,
    Zstd(i32),
}

impl Codec {
    fn compression(self) -> Compression {
        match self {
            Codec::Uncompressed => Compression::UNCOMPRESSED,
            Codec::Snappy => Compression::SNAPPY,
            Codec::Zstd(level) => {
                Compression::ZSTD(parquet::basic::ZstdLevel::try_new(level).unwrap_or_default())
            }
        }
    }

    fn compress(self, data: Vec<u8>) -> Result<Vec<u8>> {
        match self {
            Codec::Uncompressed => Ok(data),
            Codec::Snappy => snap::raw::Encoder::new()
                .compress_vec(&data)
                .map_err(|e| DataFusionError::External(Box::new(e))),
            Codec::Zstd(level) => zstd::bulk::compress(&data, level).map_err(DataFusionError::from),
        }
    }
}

/// Whether this encoder can write column `descr` with `props`, and with which compression.
pub(super) fn supported(descr: &ColumnDescPtr, props: &WriterProperties) -> Option<Codec> {
    let path = descr.path();
    let plain_fallback = matches!(props.encoding(path), None | Some(Encoding::PLAIN));
    let eligible = descr.physical_type() == PhysicalType::BYTE_ARRAY
        && path.parts().len() == 1
        && descr.max_rep_level() == 0
        && descr.max_def_level() <= 1
        && props.dictionary_enabled(path)
        && props.statistics_enabled(path) == EnabledStatistics::Page
        && props.bloom_filter_properties(path).is_none()
        && !props.write_page_header_statistics(path)
        && props.writer_version() == WriterVersion::PARQUET_1_0
        && props.dictionary_page_encoding() == Encoding::PLAIN
        && plain_fallback;
    if !eligible {
        return None;
    }
    match props.compression(path) {
        Compression::UNCOMPRESSED => Some(Codec::Uncompressed),
        Compression::SNAPPY => Some(Codec::Snappy),
        Compression::ZSTD(level) => Some(Codec::Zstd(level.compression_level())),
        _ => None,
    }
}

/// Whether `array` is what this encoder takes without conversion: a dictionary of strings or
/// binaries.
pub(super) fn is_byte_dictionary(array: &dyn Array) -> bool {
    matches!(array.data_type(), DataType::Dictionary(_, value)
        if matches!(value.as_ref(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary
            | DataType::LargeBinary | DataType::Utf8View | DataType::BinaryView))
}

/// The bytes of an input dictionary's values, whatever their Arrow type.
enum Values<'a> {
    Utf8(&'a arrow::array::StringArray),
    LargeUtf8(&'a arrow::array::LargeStringArray),
    Binary(&'a arrow::array::BinaryArray),
    LargeBinary(&'a arrow::array::LargeBinaryArray),
    Utf8View(&'a arrow::array::StringViewArray),
    BinaryView(&'a arrow::array::BinaryViewArray),
}

impl<'a> Values<'a> {
    fn of(array: &'a dyn Array) -> Result<Self> {
        Ok(match array.data_type() {
            DataType::Utf8 => Values::Utf8(array.as_string()),
            DataType::LargeUtf8 => Values::LargeUtf8(array.as_string()),
            DataType::Binary => Values::Binary(array.as_binary()),
            DataType::LargeBinary => Values::LargeBinary(array.as_binary()),
            DataType::Utf8View => Values::Utf8View(array.as_string_view()),
            DataType::BinaryView => Values::BinaryView(array.as_binary_view()),
            other => {
                return Err(DataFusionError::Internal(format!(
                    "dictionary column encoder: values of type {other}"
                )))
            }
        })
    }

    fn get(&self, i: usize) -> &'a [u8] {
        match self {
            Values::Utf8(a) => a.value(i).as_bytes(),
            Values::LargeUtf8(a) => a.value(i).as_bytes(),
            Values::Binary(a) => a.value(i),
            Values::LargeBinary(a) => a.value(i),
            Values::Utf8View(a) => a.value(i).as_bytes(),
            Values::BinaryView(a) => a.value(i),
        }
    }
}

/// What the encoder keeps of an input dictionary it saw.
struct InputDictionary {
    /// The dictionary's values (to know when the next array brings the same ones).
    values: ArrayRef,
    /// The chunk's key of each input key, `u32::MAX` until a row refers to it.
    keys: Vec<u32>,
    /// The rank of each value among the dictionary's values (bytes order); empty until the
    /// dictionary serves a second array (a dictionary per array is compared row by row).
    ranks: Vec<u32>,
    /// The byte length of each value, beside the ranks.
    lens: Vec<u32>,
}

/// The data page in progress.
#[derive(Default)]
struct PageState {
    /// Definition levels of its rows (optional columns).
    levels: Vec<u32>,
    /// The chunk's dictionary keys of its values, while the chunk dictionary-encodes.
    keys: Vec<u32>,
    /// Its values, plain-encoded, once the dictionary has outgrown its limit.
    plain: Vec<u8>,
    rows: usize,
    nulls: usize,
    /// Bytes of its values, unencoded.
    value_bytes: i64,
    min: Option<Vec<u8>>,
    max: Option<Vec<u8>>,
}

/// A data page, compressed, waiting for the dictionary page to go first.
struct EncodedPage {
    page: CompressedPage,
    rows: usize,
    value_bytes: i64,
}

/// Encodes one column chunk of a dictionary-encoded byte-array column; see the module
/// documentation.
pub(super) struct DictionaryChunk {
    descr: ColumnDescPtr,
    props: Arc<WriterProperties>,
    codec: Codec,
    /// The chunk's dictionary: each value's key, and the values plain-encoded (the page).
    interned: HashMap<Vec<u8>, u32>,
    dictionary: Vec<u8>,
    /// The dictionary outgrew its limit: pages from here on are plain.
    plain: bool,
    /// The input dictionaries last seen, most recent first (inputs read side by side take
    /// turns).
    inputs: Vec<InputDictionary>,
    page: PageState,
    pages: Vec<EncodedPage>,
    pages_bytes: usize,
    column_index: ColumnIndexBuilder,
    ascending: bool,
    descending: bool,
    last_bounds: Option<(Vec<u8>, Vec<u8>)>,
    min: Option<Vec<u8>>,
    max: Option<Vec<u8>>,
    rows: usize,
    nulls: usize,
    value_bytes: i64,
}

impl DictionaryChunk {
    /// An encoder of column `descr` (which [`supported`] accepted, giving `codec`).
    pub(super) fn new(descr: ColumnDescPtr, props: Arc<WriterProperties>, codec: Codec) -> Self {
        Self {
            descr,
            props,
            codec,
            interned: HashMap::new(),
            dictionary: Vec::new(),
            plain: false,
            inputs: Vec::new(),
            page: PageState::default(),
            pages: Vec::new(),
            pages_bytes: 0,
            column_index: ColumnIndexBuilder::new(PhysicalType::BYTE_ARRAY),
            ascending: true,
            descending: true,
            last_bounds: None,
            min: None,
            max: None,
            rows: 0,
            nulls: 0,
            value_bytes: 0,
        }
    }

    /// Whether no rows were written yet.
    pub(super) fn is_empty(&self) -> bool {
        self.rows == 0 && self.page.rows == 0
    }

    /// Memory held: the dictionary (bytes and table), the encoded pages, the page in progress,
    /// what is kept of the input dictionary.
    pub(super) fn memory_size(&self) -> usize {
        let input: usize = self
            .inputs
            .iter()
            .map(|d| (d.keys.capacity() + d.ranks.capacity() + d.lens.capacity()) * 4)
            .sum();
        self.dictionary.capacity() * 2
            + self.interned.capacity() * 48
            + self.pages_bytes
            + (self.page.keys.capacity() + self.page.levels.capacity()) * 4
            + self.page.plain.capacity()
            + input
    }

    /// Bytes the chunk would take if closed now (estimated for the page in progress).
    pub(super) fn estimated_size(&self) -> usize {
        self.dictionary.len() + self.pages_bytes + self.page_estimate()
    }

    fn bit_width(&self) -> u8 {
        bits_for((self.interned.len() as u32).saturating_sub(1))
    }

    /// Encoded bytes of the page in progress (before compression).
    fn page_estimate(&self) -> usize {
        let levels = self.page.levels.len() / 8 + 8;
        let values = if self.plain {
            self.page.plain.len()
        } else {
            self.page.keys.len() * self.bit_width() as usize / 8 + 8
        };
        levels + values
    }

    /// Adds the rows of `array`: a dictionary of strings or binaries is taken as it is; any
    /// other string or binary array is dictionary-encoded first.
    pub(super) fn write(&mut self, array: &ArrayRef) -> Result<()> {
        let array = match array.data_type() {
            DataType::Dictionary(key, _) if key.as_ref() == &DataType::Int32 => Arc::clone(array),
            DataType::Dictionary(_, value) => arrow::compute::cast(
                array,
                &DataType::Dictionary(Box::new(DataType::Int32), value.clone()),
            )?,
            other => arrow::compute::cast(
                array,
                &DataType::Dictionary(Box::new(DataType::Int32), Box::new(other.clone())),
            )?,
        };
        let dictionary: &DictionaryArray<Int32Type> = array.as_dictionary();
        self.take_input(dictionary)?;
        let batch_size = self.props.write_batch_size().max(1);
        let mut start = 0;
        while start < dictionary.len() {
            let len = batch_size.min(dictionary.len() - start);
            self.write_slice(dictionary, start, len)?;
            start += len;
            let full = self.page.rows >= self.props.data_page_row_count_limit()
                || self.page_estimate() >= self.props.data_page_size_limit();
            if full {
                self.flush_page()?;
            }
            if !self.plain && self.dictionary.len() > self.props.dictionary_page_size_limit() {
                // As the parquet writer does: the rest of the chunk goes plain.
                self.flush_page()?;
                self.plain = true;
            }
        }
        Ok(())
    }

    /// Makes `dictionary`'s values the current input dictionary (the first of `inputs`),
    /// keeping what is known of them when they were seen before. The values of a dictionary
    /// that serves a second array are ranked: from then on its rows' bounds are found by rank.
    fn take_input(&mut self, dictionary: &DictionaryArray<Int32Type>) -> Result<()> {
        let values = dictionary.values();
        match self
            .inputs
            .iter()
            .position(|d| same_values(&d.values, values))
        {
            Some(at) => {
                let mut input = self.inputs.remove(at);
                if input.ranks.is_empty() {
                    let bytes = Values::of(values.as_ref())?;
                    input.ranks = ranks(&bytes, values.len());
                    input.lens = (0..values.len())
                        .map(|k| bytes.get(k).len() as u32)
                        .collect();
                }
                self.inputs.insert(0, input);
            }
            None => {
                self.inputs.truncate(INPUT_DICTIONARIES - 1);
                self.inputs.insert(
                    0,
                    InputDictionary {
                        values: Arc::clone(values),
                        keys: vec![u32::MAX; values.len()],
                        ranks: Vec::new(),
                        lens: Vec::new(),
                    },
                );
            }
        }
        Ok(())
    }

    /// Encodes rows `start..start + len` of `dictionary`.
    fn write_slice(
        &mut self,
        dictionary: &DictionaryArray<Int32Type>,
        start: usize,
        len: usize,
    ) -> Result<()> {
        let Some(input) = self.inputs.first_mut() else {
            return Err(DataFusionError::Internal("no input dictionary".into()));
        };
        let values = Values::of(dictionary.values().as_ref())?;
        let keys = &dictionary.keys().values()[start..start + len];
        let nulls = dictionary.nulls().map(|n| n.slice(start, len));
        // Rows whose key is valid but whose value is null are nulls too.
        let value_nulls = dictionary.values().logical_nulls();
        let optional = self.descr.max_def_level() > 0;

        // The common case, a ranked dictionary and no nulls: a lookup, a push and two integer
        // comparisons a row.
        if nulls.is_none() && value_nulls.is_none() && !self.plain && !input.ranks.is_empty() {
            if optional {
                self.page.levels.resize(self.page.levels.len() + len, 1);
            }
            self.page.keys.reserve(len);
            let (mut low, mut high) = (keys[0] as usize, keys[0] as usize);
            let (mut low_rank, mut high_rank) = (input.ranks[low], input.ranks[high]);
            let mut value_bytes = 0i64;
            for key in keys {
                let key = *key as usize;
                let mut out = input.keys[key];
                if out == u32::MAX {
                    out = intern(&mut self.interned, &mut self.dictionary, values.get(key));
                    input.keys[key] = out;
                }
                self.page.keys.push(out);
                let rank = input.ranks[key];
                if rank < low_rank {
                    low_rank = rank;
                    low = key;
                }
                if rank > high_rank {
                    high_rank = rank;
                    high = key;
                }
                value_bytes += input.lens[key] as i64;
            }
            self.page.value_bytes += value_bytes;
            self.page.rows += len;
            self.page_bounds(values.get(low), values.get(high));
            return Ok(());
        }

        let mut low: Option<usize> = None;
        let mut high: Option<usize> = None;
        let (mut low_rank, mut high_rank) = (u32::MAX, 0u32);
        for (i, key) in keys.iter().enumerate() {
            let key = *key as usize;
            let valid = nulls.as_ref().is_none_or(|n| n.is_valid(i))
                && value_nulls.as_ref().is_none_or(|n| n.is_valid(key));
            if !valid {
                if !optional {
                    return Err(DataFusionError::Execution(format!(
                        "column '{}' is required but a row holds null",
                        self.descr.path()
                    )));
                }
                self.page.levels.push(0);
                self.page.nulls += 1;
                continue;
            }
            if optional {
                self.page.levels.push(1);
            }
            let bytes = values.get(key);
            self.page.value_bytes += bytes.len() as i64;
            if self.plain {
                self.page
                    .plain
                    .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                self.page.plain.extend_from_slice(bytes);
            } else {
                let mut out = input.keys[key];
                if out == u32::MAX {
                    out = intern(&mut self.interned, &mut self.dictionary, bytes);
                    input.keys[key] = out;
                }
                self.page.keys.push(out);
            }
            if input.ranks.is_empty() {
                if low.is_none_or(|l| bytes < values.get(l)) {
                    low = Some(key);
                }
                if high.is_none_or(|h| bytes > values.get(h)) {
                    high = Some(key);
                }
            } else {
                let rank = input.ranks[key];
                if rank < low_rank {
                    low_rank = rank;
                    low = Some(key);
                }
                if rank > high_rank || high.is_none() {
                    high_rank = rank;
                    high = Some(key);
                }
            }
        }
        self.page.rows += len;
        if let (Some(low), Some(high)) = (low, high) {
            self.page_bounds(values.get(low), values.get(high));
        }
        Ok(())
    }

    /// Widens the page's bounds to `low` and `high`.
    fn page_bounds(&mut self, low: &[u8], high: &[u8]) {
        if self.page.min.as_deref().is_none_or(|m| low < m) {
            self.page.min = Some(low.to_vec());
        }
        if self.page.max.as_deref().is_none_or(|m| high > m) {
            self.page.max = Some(high.to_vec());
        }
    }

    /// Encodes and compresses the page in progress, and records it in the indexes.
    fn flush_page(&mut self) -> Result<()> {
        if self.page.rows == 0 {
            return Ok(());
        }
        let page = std::mem::take(&mut self.page);
        let mut buffer = Vec::with_capacity(self.page_estimate());
        if self.descr.max_def_level() > 0 {
            let mut levels = Vec::new();
            hybrid_encode(&page.levels, 1, &mut levels);
            buffer.extend_from_slice(&(levels.len() as u32).to_le_bytes());
            buffer.extend_from_slice(&levels);
        }
        let encoding = if self.plain && page.keys.is_empty() {
            buffer.extend_from_slice(&page.plain);
            Encoding::PLAIN
        } else {
            let width = self.bit_width();
            buffer.push(width);
            hybrid_encode(&page.keys, width, &mut buffer);
            Encoding::RLE_DICTIONARY
        };
        let uncompressed = buffer.len();
        let compressed = self.codec.compress(buffer)?;
        self.pages_bytes += compressed.len();
        let data_page = Page::DataPage {
            buf: Bytes::from(compressed),
            num_values: page.rows as u32,
            encoding,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };

        // The column index: each page's bounds, truncated as the writer's properties say.
        let null_page = page.nulls == page.rows;
        match (&page.min, &page.max) {
            (Some(min), Some(max)) if !null_page => {
                if let Some((last_min, last_max)) = &self.last_bounds {
                    if last_min > min || last_max > max {
                        self.ascending = false;
                    }
                    if min > last_min || max > last_max {
                        self.descending = false;
                    }
                }
                let length = self.props.column_index_truncate_length();
                self.column_index.append(
                    false,
                    truncate_lower(min, length, self.is_utf8()).0,
                    truncate_upper(max, length, self.is_utf8()).0,
                    page.nulls as i64,
                );
                if self.min.as_ref().is_none_or(|m| min < m) {
                    self.min = Some(min.clone());
                }
                if self.max.as_ref().is_none_or(|m| max > m) {
                    self.max = Some(max.clone());
                }
                self.last_bounds = Some((min.clone(), max.clone()));
            }
            _ => self
                .column_index
                .append(true, vec![], vec![], page.nulls as i64),
        }
        self.rows += page.rows;
        self.nulls += page.nulls;
        self.value_bytes += page.value_bytes;
        self.pages.push(EncodedPage {
            page: CompressedPage::new(data_page, uncompressed),
            rows: page.rows,
            value_bytes: page.value_bytes,
        });
        Ok(())
    }

    fn is_utf8(&self) -> bool {
        self.descr.logical_type_ref() == Some(&parquet::basic::LogicalType::String)
            || self.descr.converted_type() == parquet::basic::ConvertedType::UTF8
    }

    /// Closes the chunk: the dictionary page, then the data pages, and what the file's footer
    /// and page indexes say of them. The bytes start at offset 0, as
    /// `SerializedRowGroupWriter::append_column` takes them.
    pub(super) fn close(mut self) -> Result<(Bytes, ColumnCloseResult)> {
        self.flush_page()?;
        #[cfg(test)]
        if let Ok(mut closed) = CLOSED.lock() {
            closed.push(self.descr.path().string());
        }
        let mut sink = TrackedWrite::new(Vec::with_capacity(
            self.pages_bytes + self.dictionary.len() + 64 * (self.pages.len() + 1),
        ));
        let mut encodings = vec![Encoding::RLE];
        let mut encoding_stats: Vec<PageEncodingStats> = Vec::new();
        let mut offsets = OffsetIndexBuilder::new();
        let (mut compressed_size, mut uncompressed_size, mut written) = (0i64, 0i64, 0u64);
        let mut dictionary_offset = None;
        let mut data_offset = None;
        {
            let mut writer = SerializedPageWriter::new(&mut sink);
            let mut account = |spec: &PageWriteSpec| {
                compressed_size += spec.compressed_size as i64;
                uncompressed_size += spec.uncompressed_size as i64;
                written += spec.bytes_written;
            };
            let dictionary_encoded = self
                .pages
                .first()
                .is_some_and(|p| p.page.encoding() == Encoding::RLE_DICTIONARY);
            if dictionary_encoded {
                let dictionary = std::mem::take(&mut self.dictionary);
                let uncompressed = dictionary.len();
                let page = Page::DictionaryPage {
                    buf: Bytes::from(self.codec.compress(dictionary)?),
                    num_values: self.interned.len() as u32,
                    encoding: Encoding::PLAIN,
                    is_sorted: false,
                };
                let spec = writer.write_page(CompressedPage::new(page, uncompressed))?;
                account(&spec);
                dictionary_offset = Some(spec.offset as i64);
                encodings.push(Encoding::PLAIN);
                encoding_stats.push(PageEncodingStats {
                    page_type: PageType::DICTIONARY_PAGE,
                    encoding: Encoding::PLAIN,
                    count: 1,
                });
            }
            for page in std::mem::take(&mut self.pages) {
                let encoding = page.page.encoding();
                if !encodings.contains(&encoding) {
                    encodings.push(encoding);
                }
                match encoding_stats.last_mut() {
                    Some(s) if s.page_type == PageType::DATA_PAGE && s.encoding == encoding => {
                        s.count += 1
                    }
                    _ => encoding_stats.push(PageEncodingStats {
                        page_type: PageType::DATA_PAGE,
                        encoding,
                        count: 1,
                    }),
                }
                let spec = writer.write_page(page.page)?;
                account(&spec);
                data_offset.get_or_insert(spec.offset as i64);
                offsets.append_offset_and_size(spec.offset as i64, spec.compressed_size as i32);
                offsets.append_row_count(page.rows as i64);
                offsets.append_unencoded_byte_array_data_bytes(Some(page.value_bytes));
            }
            writer.close()?;
        }

        let length = self.props.statistics_truncate_length();
        let utf8 = self.is_utf8();
        let (min, min_exact) = match &self.min {
            Some(m) => {
                let (v, truncated) = truncate_lower(m, length, utf8);
                (Some(ByteArray::from(v)), !truncated)
            }
            None => (None, false),
        };
        let (max, max_exact) = match &self.max {
            Some(m) => {
                let (v, truncated) = truncate_upper(m, length, utf8);
                (Some(ByteArray::from(v)), !truncated)
            }
            None => (None, false),
        };
        let has_bounds = min.is_some();
        let mut statistics = ValueStatistics::new(min, max, None, Some(self.nulls as u64), false)
            .with_backwards_compatible_min_max(self.descr.sort_order().is_signed());
        if has_bounds {
            statistics = statistics
                .with_min_is_exact(min_exact)
                .with_max_is_exact(max_exact);
        }
        let metadata = ColumnChunkMetaData::builder(Arc::clone(&self.descr))
            .set_compression(self.codec.compression())
            .set_encodings_mask(EncodingMask::new_from_encodings(encodings.iter()))
            .set_page_encoding_stats(encoding_stats)
            .set_total_compressed_size(compressed_size)
            .set_total_uncompressed_size(uncompressed_size)
            .set_num_values(self.rows as i64)
            .set_data_page_offset(data_offset.unwrap_or(0))
            .set_dictionary_page_offset(dictionary_offset)
            .set_statistics(Statistics::ByteArray(statistics))
            .set_unencoded_byte_array_data_bytes(Some(self.value_bytes))
            .build()?;
        let mut column_index = self.column_index;
        column_index.set_boundary_order(match (self.ascending, self.descending) {
            (true, _) => BoundaryOrder::ASCENDING,
            (false, true) => BoundaryOrder::DESCENDING,
            (false, false) => BoundaryOrder::UNORDERED,
        });
        let column_index = match column_index.valid() {
            true => Some(column_index.build()?),
            false => None,
        };
        let bytes = Bytes::from(sink.into_inner()?);
        Ok((
            bytes,
            ColumnCloseResult {
                bytes_written: written,
                rows_written: self.rows as u64,
                metadata,
                bloom_filter: None,
                column_index,
                offset_index: Some(offsets.build()),
            },
        ))
    }
}

/// The key of `bytes` in the chunk's dictionary (`interned`, and its page `dictionary`), added
/// when new.
fn intern(interned: &mut HashMap<Vec<u8>, u32>, dictionary: &mut Vec<u8>, bytes: &[u8]) -> u32 {
    if let Some(k) = interned.get(bytes) {
        return *k;
    }
    let k = interned.len() as u32;
    interned.insert(bytes.to_vec(), k);
    dictionary.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    dictionary.extend_from_slice(bytes);
    k
}

/// Input dictionaries remembered: more than the inputs a writer's scan reads side by side.
const INPUT_DICTIONARIES: usize = 8;

/// Whether two dictionaries' values are the same: the same array, or arrays over the same
/// buffers (a batch that crossed the Arrow C data interface holds new arrays over the buffers it
/// had).
fn same_values(a: &ArrayRef, b: &ArrayRef) -> bool {
    Arc::ptr_eq(a, b) || (a.len() == b.len() && a.to_data().ptr_eq(&b.to_data()))
}

/// The columns of the chunks this encoder closed (tests tell by it which encoder wrote a
/// chunk).
#[cfg(test)]
static CLOSED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// How many chunks of columns named `column` this encoder closed so far.
#[cfg(test)]
pub(crate) fn chunks_closed(column: &str) -> usize {
    CLOSED
        .lock()
        .map(|c| c.iter().filter(|p| *p == column).count())
        .unwrap_or(0)
}

/// The rank of each of a dictionary's `len` values in bytes order (equal values, equal ranks
/// are not needed: any order among them picks an equal value).
fn ranks(values: &Values<'_>, len: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..len as u32).collect();
    order.sort_unstable_by(|a, b| values.get(*a as usize).cmp(values.get(*b as usize)));
    let mut ranks = vec![0u32; len];
    for (rank, key) in order.into_iter().enumerate() {
        ranks[key as usize] = rank as u32;
    }
    ranks
}

/// Bits needed for values up to `max`.
fn bits_for(max: u32) -> u8 {
    (32 - max.leading_zeros()) as u8
}

/// Bit-packed groups per run, at most: a one-byte run header, as other writers keep it.
const MAX_PACKED_GROUPS: usize = 63;

/// Appends `values` (each below `1 << width`) in the RLE/bit-packing hybrid encoding, without a
/// length prefix: runs of eight or more equal values as repeats, the rest bit-packed in groups
/// of eight (the last group padded with zeros).
fn hybrid_encode(values: &[u32], width: u8, out: &mut Vec<u8>) {
    let value_bytes = (width as usize).div_ceil(8);
    let mut packed_start = 0; // first value not yet written
    let mut i = 0;
    while i < values.len() {
        let value = values[i];
        let mut run = 1;
        while i + run < values.len() && values[i + run] == value {
            run += 1;
        }
        // Only whole groups of eight can be bit-packed before a repeat: the values waiting
        // take the run's first values until they make whole groups.
        let waiting = i - packed_start;
        let borrow = (8 - waiting % 8) % 8;
        if run >= 8 + borrow {
            write_packed(&values[packed_start..i + borrow], width, out);
            let repeat = run - borrow;
            write_varint((repeat as u64) << 1, out);
            out.extend_from_slice(&value.to_le_bytes()[..value_bytes]);
            i += run;
            packed_start = i;
        } else {
            i += run;
        }
    }
    write_packed(&values[packed_start..], width, out);
}

/// Appends `values` as bit-packed runs (groups of eight, the last padded with zeros).
fn write_packed(values: &[u32], width: u8, out: &mut Vec<u8>) {
    for run in values.chunks(MAX_PACKED_GROUPS * 8) {
        let groups = run.len().div_ceil(8);
        write_varint(((groups as u64) << 1) | 1, out);
        let mut acc: u64 = 0;
        let mut bits = 0u32;
        for k in 0..groups * 8 {
            let v = run.get(k).copied().unwrap_or(0) as u64;
            acc |= v << bits;
            bits += width as u32;
            while bits >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
        // Eight values of `width` bits end on a byte boundary.
        debug_assert_eq!(bits, 0);
    }
}

fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A lower bound of `value` at most `length` bytes long (on a character boundary for UTF-8),
/// and whether it was shortened.
fn truncate_lower(value: &[u8], length: Option<usize>, utf8: bool) -> (Vec<u8>, bool) {
    let Some(length) = length.filter(|l| value.len() > *l) else {
        return (value.to_vec(), false);
    };
    let cut = match std::str::from_utf8(value) {
        Ok(text) if utf8 => (1..=length).rev().find(|i| text.is_char_boundary(*i)),
        _ => Some(length),
    };
    match cut {
        Some(cut) if cut > 0 => (value[..cut].to_vec(), true),
        _ => (value.to_vec(), false),
    }
}

/// An upper bound of `value` at most `length` bytes long: a prefix with its last character (or
/// byte) incremented; `value` itself when no such prefix exists.
fn truncate_upper(value: &[u8], length: Option<usize>, utf8: bool) -> (Vec<u8>, bool) {
    let Some(length) = length.filter(|l| value.len() > *l) else {
        return (value.to_vec(), false);
    };
    let bound = match std::str::from_utf8(value) {
        Ok(text) if utf8 => {
            let cut = (length.saturating_sub(3)..=length)
                .rev()
                .find(|i| text.is_char_boundary(*i));
            cut.and_then(|cut| next_utf8_prefix(&text[..cut]))
        }
        _ => next_bytes_prefix(&value[..length]),
    };
    match bound {
        Some(bound) => (bound, true),
        None => (value.to_vec(), false),
    }
}

/// The shortest-changed successor of `text` among strings no longer than it: its last
/// character that can be incremented without changing its width, incremented, and the rest
/// dropped.
fn next_utf8_prefix(text: &str) -> Option<Vec<u8>> {
    for (at, c) in text.char_indices().rev() {
        let next = char::from_u32(c as u32 + 1).filter(|n| n.len_utf8() == c.len_utf8());
        if let Some(next) = next {
            let mut bytes = text.as_bytes()[..at].to_vec();
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(next.encode_utf8(&mut buf).as_bytes());
            return Some(bytes);
        }
    }
    None
}

/// `bytes` plus one, as a big-endian number that may not carry out of its first byte.
fn next_bytes_prefix(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = bytes.to_vec();
    while let Some(last) = out.last_mut() {
        if *last < u8::MAX {
            *last += 1;
            return Some(out);
        }
        out.pop();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes the hybrid encoding of `count` values of `width` bits.
    fn hybrid_decode(mut data: &[u8], width: u8, count: usize) -> Vec<u32> {
        let value_bytes = (width as usize).div_ceil(8);
        let mut out = Vec::new();
        while out.len() < count {
            let mut header = 0u64;
            let mut shift = 0;
            loop {
                let b = data[0];
                data = &data[1..];
                header |= ((b & 0x7f) as u64) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            if header & 1 == 1 {
                let values = (header >> 1) as usize * 8;
                let bytes = values * width as usize / 8;
                let mut acc = 0u64;
                let mut bits = 0;
                let mut taken = 0;
                for b in &data[..bytes] {
                    acc |= (*b as u64) << bits;
                    bits += 8;
                    while bits >= width as u32 && taken < values {
                        out.push((acc & ((1u64 << width) - 1)) as u32);
                        acc >>= width;
                        bits -= width as u32;
                        taken += 1;
                    }
                }
                if width == 0 {
                    out.extend(std::iter::repeat_n(0, values));
                }
                data = &data[bytes..];
            } else {
                let mut v = [0u8; 4];
                v[..value_bytes].copy_from_slice(&data[..value_bytes]);
                data = &data[value_bytes..];
                out.extend(std::iter::repeat_n(
                    u32::from_le_bytes(v),
                    (header >> 1) as usize,
                ));
            }
        }
        out.truncate(count);
        out
    }

    #[test]
    fn the_hybrid_encoding_decodes_to_its_values() {
        let mut cases: Vec<(Vec<u32>, u8)> = vec![
            (vec![], 3),
            (vec![5], 3),
            (vec![0; 1000], 0),
            (vec![1; 37], 1),
            ((0..1000).map(|i| i % 13).collect(), 4),
            ((0..5000).map(|i| (i * 7919) % 4999).collect(), 13),
            ((0..100).map(|i| u32::from(i % 30 < 20)).collect(), 1),
        ];
        // Repeats after values that do not fill a group, and at the very end.
        let mut mixed = vec![1, 2, 3];
        mixed.extend([9; 20]);
        mixed.extend([4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6]);
        mixed.extend([2; 9]);
        cases.push((mixed, 4));
        cases.push(((0..3000).map(|i| (i / 100) as u32).collect(), 5));
        for (values, width) in cases {
            let mut out = Vec::new();
            hybrid_encode(&values, width, &mut out);
            assert_eq!(
                hybrid_decode(&out, width, values.len()),
                values,
                "width {width}"
            );
        }
        // Long repeats cost a few bytes, not a bit each.
        let mut out = Vec::new();
        hybrid_encode(&[1; 20_000], 1, &mut out);
        assert!(out.len() <= 4, "{}", out.len());
    }

    #[test]
    fn truncated_bounds_still_bound() {
        let (lower, cut) = truncate_lower("abcdef".as_bytes(), Some(3), true);
        assert_eq!((lower.as_slice(), cut), (&b"abc"[..], true));
        let (upper, cut) = truncate_upper("abcdef".as_bytes(), Some(3), true);
        assert_eq!((upper.as_slice(), cut), (&b"abd"[..], true));
        // Never split a character; the upper bound stays valid UTF-8 and above the value.
        let value = "aé€x".as_bytes();
        let (lower, _) = truncate_lower(value, Some(4), true);
        assert_eq!(lower, "aé".as_bytes());
        let (upper, _) = truncate_upper(value, Some(4), true);
        let upper = String::from_utf8(upper).unwrap();
        assert!(upper.as_bytes() > value && upper.len() <= 4, "{upper}");
        // Bytes that cannot be incremented carry to the byte before; none left: untruncated.
        let (upper, cut) = truncate_upper(&[1, 0xff, 0xff, 7], Some(3), false);
        assert_eq!((upper, cut), (vec![2], true));
        let (upper, cut) = truncate_upper(&[0xff, 0xff, 0xff, 7], Some(3), false);
        assert_eq!((upper, cut), (vec![0xff, 0xff, 0xff, 7], false));
        assert_eq!(
            truncate_lower(b"ab", Some(3), true),
            (b"ab".to_vec(), false)
        );
    }
}
