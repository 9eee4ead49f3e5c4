//! Dropping the deleted rows of a batch.
//!
//! Deletes usually leave most rows of a batch and take scattered ones (every tenth row, say),
//! so the kept rows form many short runs. Arrow's filter lists those runs bit by bit, then copies
//! each into a newly allocated buffer. [`keep_rows`] finds the runs a 64-bit word of the mask at
//! a time and compacts in place each column whose buffers the batch holds alone: primitive
//! values, string and binary bytes (their offsets shifted), the views of view arrays. No
//! allocation, and the column's memory is still in cache from its decoding. Shared buffers are
//! copied run by run; other types (booleans, dictionaries, nested) go through arrow's filter.

use std::sync::Arc;

use arrow::array::{
    downcast_primitive, Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray,
    BooleanBufferBuilder, GenericByteArray, GenericByteViewArray, OffsetSizeTrait, PrimitiveArray,
    RecordBatch, RecordBatchOptions,
};
use arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::{FilterBuilder, FilterPredicate};
use arrow::datatypes::{
    ArrowNativeType, BinaryType, BinaryViewType, ByteArrayType, ByteViewType, DataType,
    LargeBinaryType, LargeUtf8Type, StringViewType, Utf8Type,
};
use datafusion::error::Result;

/// The rows of `batch` whose bit in `keep` is set (`keep.len()` is the batch's row count).
pub(crate) fn keep_rows(batch: RecordBatch, keep: &BooleanBuffer) -> Result<RecordBatch> {
    let n = batch.num_rows();
    debug_assert_eq!(keep.len(), n);
    let kept = keep.count_set_bits();
    if kept == n {
        return Ok(batch);
    }
    if kept == 0 {
        return Ok(batch.slice(0, 0));
    }
    let runs = runs_of(keep);
    let (schema, columns, _) = batch.into_parts();
    let mut predicate: Option<FilterPredicate> = None;
    let columns = columns
        .into_iter()
        .map(|column| {
            let data_type = column.data_type().clone();
            macro_rules! compact {
                ($t:ty, $column:expr) => {
                    Ok(compact_primitive::<$t>($column, &runs, kept))
                };
            }
            downcast_primitive! {
                &data_type => (compact, column),
                DataType::Utf8 => Ok(compact_bytes::<Utf8Type>(column, &runs, kept)),
                DataType::LargeUtf8 => Ok(compact_bytes::<LargeUtf8Type>(column, &runs, kept)),
                DataType::Binary => Ok(compact_bytes::<BinaryType>(column, &runs, kept)),
                DataType::LargeBinary => Ok(compact_bytes::<LargeBinaryType>(column, &runs, kept)),
                DataType::Utf8View => Ok(compact_views::<StringViewType>(column, &runs, kept)),
                DataType::BinaryView => Ok(compact_views::<BinaryViewType>(column, &runs, kept)),
                _ => {
                    let predicate = predicate.get_or_insert_with(|| {
                        FilterBuilder::new(&BooleanArray::new(keep.clone(), None))
                            .optimize()
                            .build()
                    });
                    Ok(predicate.filter(&column)?)
                }
            }
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(kept)),
    )?)
}

/// The maximal runs of set bits of `keep`, as `start..end` row ranges, found a word at a time.
fn runs_of(keep: &BooleanBuffer) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    let mut push = |start: usize, end: usize| match runs.last_mut() {
        // A run that crosses a word boundary continues the last one.
        Some(last) if last.1 as usize == start => last.1 = end as u32,
        _ => runs.push((start as u32, end as u32)),
    };
    let mut word = |mut bits: u64, base: usize| {
        while bits != 0 {
            let start = bits.trailing_zeros() as usize;
            // The ones from `start` up: the trailing zeros of the complement.
            let ones = (!(bits >> start)).trailing_zeros() as usize;
            push(base + start, base + start + ones);
            if start + ones >= 64 {
                break;
            }
            bits &= u64::MAX << (start + ones);
        }
    };
    let chunks = keep.bit_chunks();
    let mut base = 0;
    for bits in chunks.iter() {
        word(bits, base);
        base += 64;
    }
    let rest = chunks.remainder_len();
    if rest > 0 {
        word(chunks.remainder_bits() & (u64::MAX >> (64 - rest)), base);
    }
    runs
}

/// `column` (a `PrimitiveArray<T>`) cut down to `runs`, which hold `kept` rows: in place when
/// nothing else holds its values, else copied run by run.
fn compact_primitive<T: ArrowPrimitiveType>(
    column: ArrayRef,
    runs: &[(u32, u32)],
    kept: usize,
) -> ArrayRef {
    let array: PrimitiveArray<T> = column.as_primitive::<T>().clone();
    // The batch's reference gone, the clone may be the only one.
    drop(column);
    let (data_type, values, nulls) = array.into_parts();
    Arc::new(
        PrimitiveArray::<T>::new(
            compact_values(values, runs, kept),
            compact_nulls(nulls, runs, kept),
        )
        .with_data_type(data_type),
    )
}

/// `column` (a string or binary view array) cut down to `runs`: its views like a primitive
/// column's values, its data buffers kept whole (as arrow's filter does).
fn compact_views<T: ByteViewType>(column: ArrayRef, runs: &[(u32, u32)], kept: usize) -> ArrayRef {
    let array = column.as_byte_view::<T>().clone();
    drop(column);
    let (views, buffers, nulls) = array.into_parts();
    let views = compact_values(views, runs, kept);
    let nulls = compact_nulls(nulls, runs, kept);
    // SAFETY: every view is one of a valid array's, unchanged, over the same buffers.
    Arc::new(unsafe { GenericByteViewArray::<T>::new_unchecked(views, buffers, nulls) })
}

/// `column` (a string or binary array) cut down to `runs`: the bytes of each run moved to the
/// front in place when nothing else holds them (else copied), the offsets shifted to match.
fn compact_bytes<T: ByteArrayType>(column: ArrayRef, runs: &[(u32, u32)], kept: usize) -> ArrayRef {
    let array = column.as_bytes::<T>().clone();
    drop(column);
    let (offsets, values, nulls) = array.into_parts();
    let rows = offsets.len() - 1;
    let mut offsets = match owned::<T::Offset>(offsets.into_inner().into_inner()) {
        Ok(owned) => owned,
        Err(shared) => ScalarBuffer::<T::Offset>::new(shared, 0, rows + 1)
            .to_vec()
            .into(),
    };
    let offsets_mut = offsets.typed_data_mut::<T::Offset>();
    let values: Buffer = match owned::<u8>(values) {
        Ok(mut owned) => {
            let len = shift_runs(offsets_mut, runs, |from, to| {
                owned.as_slice_mut().copy_within(from, to);
            });
            owned.truncate(len);
            owned.into()
        }
        Err(shared) => {
            let mut out: Vec<u8> = Vec::new();
            shift_runs(offsets_mut, runs, |from, _| {
                out.extend_from_slice(&shared[from]);
            });
            out.into()
        }
    };
    offsets.truncate((kept + 1) * std::mem::size_of::<T::Offset>());
    // SAFETY: the offsets rise from 0 to the bytes kept, and each value is the whole bytes of
    // one value of a valid array (valid UTF-8 for strings), moved.
    let offsets =
        unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::new(offsets.into(), 0, kept + 1)) };
    let nulls = compact_nulls(nulls, runs, kept);
    Arc::new(unsafe { GenericByteArray::<T>::new_unchecked(offsets, values, nulls) })
}

/// Rewrites `offsets` (of rows, with one more entry) for the rows of `runs` placed one after
/// another from byte 0, calling `bytes(from, to)` for each run's byte range `from` and the
/// position `to` its bytes go to, in order (`to` never past `from`). Answers the bytes kept.
fn shift_runs<O: OffsetSizeTrait>(
    offsets: &mut [O],
    runs: &[(u32, u32)],
    mut bytes: impl FnMut(std::ops::Range<usize>, usize),
) -> usize {
    let (mut row, mut at) = (0usize, 0usize);
    for &(start, end) in runs {
        let (start, end) = (start as usize, end as usize);
        let (from, to) = (offsets[start].as_usize(), offsets[end].as_usize());
        bytes(from..to, at);
        // Rows before `start` are written at indexes up to `row`, which never passes `start`:
        // each offset is read before its index is written.
        for k in 1..=end - start {
            offsets[row + k] = O::usize_as(offsets[start + k].as_usize() - from + at);
        }
        row += end - start;
        at += to - from;
    }
    offsets[0] = O::usize_as(0);
    at
}

/// `values` cut down to `runs` (which hold `kept` rows): in place when nothing else holds them,
/// else copied.
fn compact_values<V: ArrowNativeType>(
    values: ScalarBuffer<V>,
    runs: &[(u32, u32)],
    kept: usize,
) -> ScalarBuffer<V> {
    let len = values.len();
    match owned::<V>(values.into_inner()) {
        Ok(mut owned) => {
            compact_in_place(owned.typed_data_mut::<V>(), runs);
            owned.truncate(kept * std::mem::size_of::<V>());
            ScalarBuffer::new(owned.into(), 0, kept)
        }
        Err(shared) => copy_runs(&ScalarBuffer::<V>::new(shared, 0, len), runs, kept),
    }
}

/// `buffer`'s memory to mutate, when nothing else holds it: allocated as a `Vec<V>` (as the
/// parquet reader does) or by arrow's builders.
fn owned<V: ArrowNativeType>(buffer: Buffer) -> std::result::Result<MutableBuffer, Buffer> {
    buffer
        .into_vec::<V>()
        .map(MutableBuffer::from)
        .or_else(Buffer::into_mutable)
}

/// The validity of the rows of `runs` (`None` when none of them is NULL-able).
fn compact_nulls(
    nulls: Option<NullBuffer>,
    runs: &[(u32, u32)],
    kept: usize,
) -> Option<NullBuffer> {
    nulls.filter(|n| n.null_count() > 0).map(|nulls| {
        let mut bits = BooleanBufferBuilder::new(kept);
        let offset = nulls.offset();
        for &(start, end) in runs {
            bits.append_packed_range(
                offset + start as usize..offset + end as usize,
                nulls.validity(),
            );
        }
        NullBuffer::new(bits.finish())
    })
}

/// Moves the values of `runs` to the front of `values`, in order.
fn compact_in_place<V: Copy>(values: &mut [V], runs: &[(u32, u32)]) {
    let mut at = 0;
    for &(start, end) in runs {
        let (start, end) = (start as usize, end as usize);
        if start != at {
            values.copy_within(start..end, at);
        }
        at += end - start;
    }
}

/// The values of `runs` (which hold `kept` rows) copied into a new buffer.
fn copy_runs<V: ArrowNativeType>(
    values: &[V],
    runs: &[(u32, u32)],
    kept: usize,
) -> ScalarBuffer<V> {
    let mut out = Vec::with_capacity(kept);
    for &(start, end) in runs {
        out.extend_from_slice(&values[start as usize..end as usize]);
    }
    ScalarBuffer::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        Decimal128Array, Int32Array, Int64Array, LargeBinaryArray, StringArray, StringViewArray,
        TimestampMicrosecondArray,
    };
    use arrow::compute::filter_record_batch;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use rand::{Rng, SeedableRng};

    fn batch(n: usize, rng: &mut rand::rngs::StdRng) -> RecordBatch {
        let ids: Int64Array = (0..n as i64).map(Some).collect();
        let nullable: Int32Array = (0..n as i32)
            .map(|v| rng.random_bool(0.8).then_some(v))
            .collect();
        let names: StringArray = (0..n).map(|v| Some(format!("name {v}"))).collect();
        let views: StringViewArray = (0..n)
            .map(|v| (v % 3 != 0).then(|| format!("a longer string value {v}")))
            .collect();
        let decimals = Decimal128Array::from((0..n as i128).map(|v| v * 7).collect::<Vec<_>>())
            .with_precision_and_scale(20, 2)
            .unwrap();
        let times =
            TimestampMicrosecondArray::from((0..n as i64).collect::<Vec<_>>()).with_timezone("UTC");
        let blobs: LargeBinaryArray = (0..n)
            .map(|v| (v % 5 != 1).then(|| vec![v as u8; v % 7]))
            .collect();
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("n", DataType::Int32, true),
            Field::new("s", DataType::Utf8, false),
            Field::new("v", DataType::Utf8View, true),
            Field::new("d", DataType::Decimal128(20, 2), false),
            Field::new(
                "t",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            Field::new("b", DataType::LargeBinary, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(ids),
                Arc::new(nullable),
                Arc::new(names),
                Arc::new(views),
                Arc::new(decimals),
                Arc::new(times),
                Arc::new(blobs),
            ],
        )
        .unwrap()
    }

    /// Masks of every shape (scattered, clustered, across word ends, all or none kept) against
    /// arrow's filter, on batches held uniquely (compacted in place) and shared (copied), whole
    /// and sliced at an offset.
    #[test]
    fn keeps_the_rows_arrows_filter_keeps() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for n in [1usize, 63, 64, 65, 127, 128, 1000, 8192] {
            for shape in 0..7 {
                let mask: Vec<bool> = (0..n)
                    .map(|i| match shape {
                        0 => i % 10 != 3,
                        1 => rng.random_bool(0.9),
                        2 => rng.random_bool(0.1),
                        3 => (i / 100) % 3 != 0,
                        4 => i % 64 != 63 && i % 64 != 0,
                        5 => true,
                        _ => false,
                    })
                    .collect();
                let keep = BooleanBuffer::from(mask);
                let original = batch(n, &mut rng);
                let expected =
                    filter_record_batch(&original, &BooleanArray::new(keep.clone(), None)).unwrap();
                // Shared: `original` still holds every column.
                let shared = keep_rows(original.clone(), &keep).unwrap();
                assert_eq!(shared, expected, "shared, n {n}, shape {shape}");
                // Unique: the only reference, compacted in place.
                let strings = original.column(2).as_string::<i32>().values().as_ptr();
                let unique = keep_rows(original, &keep).unwrap();
                assert_eq!(unique, expected, "unique, n {n}, shape {shape}");
                for column in unique.columns() {
                    column.to_data().validate_full().unwrap();
                }
                if unique.num_rows() > 0 {
                    let moved = unique.column(2).as_string::<i32>().values().as_ptr();
                    assert_eq!(moved, strings, "strings compacted in place");
                }
                // A slice at an offset, with a mask that starts mid-byte.
                if n > 10 {
                    let whole = batch(n, &mut rng);
                    let part = whole.slice(3, n - 5);
                    let keep = keep.slice(3, n - 5);
                    let expected =
                        filter_record_batch(&part, &BooleanArray::new(keep.clone(), None)).unwrap();
                    drop(whole);
                    assert_eq!(keep_rows(part, &keep).unwrap(), expected);
                }
            }
        }
    }

    /// A column the batch holds alone keeps its memory (whether a `Vec` or an arrow builder
    /// allocated it); one held elsewhere too is copied and left as it was.
    #[test]
    fn compacts_a_column_it_holds_alone_in_place() {
        let keep = BooleanBuffer::from((0..1000).map(|i| i % 10 != 3).collect::<Vec<_>>());
        let expected: Vec<i64> = (0..1000).filter(|i| i % 10 != 3).collect();
        let from_vec = Int64Array::new((0..1000i64).collect::<Vec<_>>().into(), None);
        let from_builder: Int64Array = (0..1000i64).map(Some).collect();
        for column in [from_vec, from_builder] {
            let before = column.values().as_ptr();
            let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
            let batch = RecordBatch::try_new(schema, vec![Arc::new(column)]).unwrap();
            let kept = keep_rows(batch, &keep).unwrap();
            let values = kept.column(0).as_primitive::<arrow::datatypes::Int64Type>();
            assert_eq!(values.values().as_ref(), &expected[..]);
            assert_eq!(values.values().as_ptr(), before, "compacted in place");
        }
        let shared = Int64Array::new((0..1000i64).collect::<Vec<_>>().into(), None);
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(shared.clone())]).unwrap();
        let kept = keep_rows(batch, &keep).unwrap();
        let values = kept.column(0).as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(values.values().as_ref(), &expected[..]);
        assert_ne!(values.values().as_ptr(), shared.values().as_ptr());
        assert_eq!(
            shared.values().as_ref(),
            &(0..1000).collect::<Vec<i64>>()[..]
        );
    }

    #[test]
    fn runs_are_maximal_and_cross_words() {
        let mut mask = vec![true; 200];
        mask[5] = false;
        mask[130] = false;
        assert_eq!(
            runs_of(&BooleanBuffer::from(mask)),
            vec![(0, 5), (6, 130), (131, 200)]
        );
        assert_eq!(runs_of(&BooleanBuffer::from(vec![false; 70])), vec![]);
        let keep = BooleanBuffer::from(vec![true; 70]).slice(1, 66);
        assert_eq!(runs_of(&keep), vec![(0, 66)]);
    }
}
