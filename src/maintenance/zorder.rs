//! Z-order for `rewrite_data_files`' sort strategy: `sort_order => 'zorder(c1, c2)'`.
//!
//! Sorting by one column clusters the files by it alone: a filter on the second column still
//! reads every file. A z-order sorts by a key that interleaves the bits of all the columns, so
//! each file covers a compact box of the value space and the per-file bounds prune filters on
//! any of them.
//!
//! Each value first becomes bytes whose unsigned order is the value's order (Iceberg's
//! z-order byte rules):
//! - integers, dates, times, timestamps: 8 bytes big-endian, sign bit flipped;
//! - unsigned integers: 8 bytes big-endian;
//! - floats: the 64-bit pattern of the value as a double, all bits flipped when negative and
//!   only the sign bit otherwise;
//! - decimals: 16 bytes big-endian, sign bit flipped;
//! - booleans: one byte, `0x80` for true;
//! - strings and binaries: the first `var-length-contribution` bytes (default 8), zero-padded;
//! - nulls: zero bytes of the column's width (first).
//!
//! The key takes the first bit of every column, then the second, and so on (a column whose
//! bytes run out drops out of later rounds), up to `max-output-size` bytes. The sort below the
//! writer orders by this key and spills like any other sort; the key is never written.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray};
use arrow::buffer::{Buffer, OffsetBuffer};
use arrow::compute::{cast, SortOptions};
use arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type, Schema, UInt64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortRequirement, ScalarFunctionExpr};

/// Bytes a string or binary column gives the key by default (Spark's
/// `var-length-contribution`).
pub const DEFAULT_VAR_LENGTH_CONTRIBUTION: usize = 8;

/// The longest key by default (Spark's `max-output-size`).
pub const DEFAULT_MAX_OUTPUT_SIZE: usize = i32::MAX as usize;

/// How long a z-order key grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ZOrderOptions {
    /// Bytes each string or binary value contributes (`var-length-contribution`).
    pub var_length_contribution: usize,
    /// The most bytes a key holds (`max-output-size`).
    pub max_output_size: usize,
}

impl Default for ZOrderOptions {
    fn default() -> Self {
        Self {
            var_length_contribution: DEFAULT_VAR_LENGTH_CONTRIBUTION,
            max_output_size: DEFAULT_MAX_OUTPUT_SIZE,
        }
    }
}

/// The columns of `zorder(c1, c2, ...)`; `None` when `text` is not a z-order.
pub(crate) fn parse_zorder(text: &str) -> Result<Option<Vec<String>>> {
    let trimmed = text.trim();
    let Some(head) = trimmed.get(..6) else {
        return Ok(None);
    };
    if !head.eq_ignore_ascii_case("zorder") {
        return Ok(None);
    }
    let bad = || {
        DataFusionError::Plan(format!(
            "rewrite_data_files sort_order: cannot read '{trimmed}'; write zorder(c1, c2, ...)"
        ))
    };
    let inner = trimmed[6..]
        .trim_start()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(bad)?;
    let mut names: Vec<String> = vec![];
    for item in inner.split(',') {
        let name = item.trim().trim_matches('"');
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad());
        }
        if names.iter().any(|n| n == name) {
            return Err(DataFusionError::Plan(format!(
                "rewrite_data_files sort_order: column '{name}' appears twice in the z-order"
            )));
        }
        names.push(name.to_string());
    }
    Ok(Some(names))
}

/// The sort requirement of a z-order of `columns` of `input`.
pub(crate) fn zorder_requirement(
    columns: &[String],
    input: &Schema,
    options: ZOrderOptions,
) -> Result<PhysicalSortRequirement> {
    let mut args: Vec<Arc<dyn PhysicalExpr>> = vec![];
    for name in columns {
        let index = input.index_of(name).map_err(|_| {
            DataFusionError::Plan(format!("rewrite_data_files sort_order: no column '{name}'"))
        })?;
        let ty = input.field(index).data_type();
        if width(ty, options).is_none() {
            return Err(DataFusionError::Plan(format!(
                "rewrite_data_files sort_order: z-order cannot use column '{name}' of type {ty}"
            )));
        }
        args.push(Arc::new(Column::new(name, index)));
    }
    let udf = Arc::new(ScalarUDF::new_from_impl(ZOrderKey::new(options)));
    let key = ScalarFunctionExpr::try_new(udf, args, input, Arc::new(ConfigOptions::default()))?;
    Ok(PhysicalSortRequirement::new(
        Arc::new(key),
        Some(SortOptions {
            descending: false,
            nulls_first: true,
        }),
    ))
}

/// Bytes a value of `ty` gives the key; `None` for types a z-order cannot use.
fn width(ty: &DataType, options: ZOrderOptions) -> Option<usize> {
    use DataType::*;
    Some(match ty {
        Int8
        | Int16
        | Int32
        | Int64
        | Date32
        | Date64
        | Time32(_)
        | Time64(_)
        | Timestamp(_, _)
        | Duration(_) => 8,
        UInt8 | UInt16 | UInt32 | UInt64 => 8,
        Float16 | Float32 | Float64 => 8,
        Decimal128(_, _) => 16,
        Boolean => 1,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => {
            options.var_length_contribution
        }
        _ => return None,
    })
}

/// The z-order key of its arguments, as a binary value (see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ZOrderKey {
    signature: Signature,
    options: ZOrderOptions,
}

impl ZOrderKey {
    fn new(options: ZOrderOptions) -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Immutable),
            options,
        }
    }
}

impl ScalarUDFImpl for ZOrderKey {
    fn name(&self) -> &str {
        "zorder"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let mut columns = Vec::with_capacity(args.args.len());
        for arg in &args.args {
            columns.push(ordered_bytes(&arg.to_array(rows)?, self.options)?);
        }
        Ok(ColumnarValue::Array(Arc::new(interleave(
            &columns,
            rows,
            self.options.max_output_size,
        ))))
    }
}

/// One column's values as fixed-width order-preserving bytes: `width` bytes per row, row after
/// row.
struct OrderedColumn {
    width: usize,
    bytes: Vec<u8>,
}

/// `array` as order-preserving bytes (nulls: zeros).
fn ordered_bytes(array: &ArrayRef, options: ZOrderOptions) -> Result<OrderedColumn> {
    use DataType::*;
    let ty = array.data_type();
    let width = width(ty, options).ok_or_else(|| {
        DataFusionError::Plan(format!("z-order cannot use a column of type {ty}"))
    })?;
    let rows = array.len();
    let mut bytes = vec![0u8; rows * width];
    let valid = |i: usize| array.is_valid(i);
    match ty {
        Int8
        | Int16
        | Int32
        | Int64
        | Date32
        | Date64
        | Time32(_)
        | Time64(_)
        | Timestamp(_, _)
        | Duration(_) => {
            let wide = to_int64(array)?;
            let values = wide.as_primitive::<Int64Type>();
            for i in (0..rows).filter(|i| valid(*i)) {
                let v = (values.value(i) as u64) ^ (1 << 63);
                bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
        UInt8 | UInt16 | UInt32 | UInt64 => {
            let wide = cast(array, &UInt64)?;
            let values = wide.as_primitive::<UInt64Type>();
            for i in (0..rows).filter(|i| valid(*i)) {
                bytes[i * 8..i * 8 + 8].copy_from_slice(&values.value(i).to_be_bytes());
            }
        }
        Float16 | Float32 | Float64 => {
            let wide = cast(array, &Float64)?;
            let values = wide.as_primitive::<Float64Type>();
            for i in (0..rows).filter(|i| valid(*i)) {
                let bits = values.value(i).to_bits();
                let v = if bits >> 63 == 1 {
                    !bits
                } else {
                    bits ^ (1 << 63)
                };
                bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
        Decimal128(_, _) => {
            let values = array.as_primitive::<Decimal128Type>();
            for i in (0..rows).filter(|i| valid(*i)) {
                let v = (values.value(i) as u128) ^ (1 << 127);
                bytes[i * 16..i * 16 + 16].copy_from_slice(&v.to_be_bytes());
            }
        }
        Boolean => {
            let values = array.as_boolean();
            for i in (0..rows).filter(|i| valid(*i)) {
                bytes[i] = if values.value(i) { 0x80 } else { 0 };
            }
        }
        Utf8 => {
            let values = array.as_string::<i32>();
            fill_prefixes(&mut bytes, width, rows, valid, |i| {
                values.value(i).as_bytes()
            })
        }
        LargeUtf8 => {
            let values = array.as_string::<i64>();
            fill_prefixes(&mut bytes, width, rows, valid, |i| {
                values.value(i).as_bytes()
            })
        }
        Utf8View => {
            let values = array.as_string_view();
            fill_prefixes(&mut bytes, width, rows, valid, |i| {
                values.value(i).as_bytes()
            })
        }
        Binary => {
            let values = array.as_binary::<i32>();
            fill_prefixes(&mut bytes, width, rows, valid, |i| values.value(i))
        }
        LargeBinary => {
            let values = array.as_binary::<i64>();
            fill_prefixes(&mut bytes, width, rows, valid, |i| values.value(i))
        }
        BinaryView => {
            let values = array.as_binary_view();
            fill_prefixes(&mut bytes, width, rows, valid, |i| values.value(i))
        }
        FixedSizeBinary(_) => {
            let values = array.as_fixed_size_binary();
            fill_prefixes(&mut bytes, width, rows, valid, |i| values.value(i))
        }
        other => {
            return Err(DataFusionError::Plan(format!(
                "z-order cannot use a column of type {other}"
            )))
        }
    }
    Ok(OrderedColumn { width, bytes })
}

/// Signed integer-like values (dates, times, timestamps, durations by their integer) as `Int64`.
fn to_int64(array: &ArrayRef) -> Result<ArrayRef> {
    let ints = match array.data_type() {
        DataType::Date32 | DataType::Time32(_) => cast(array, &DataType::Int32)?,
        _ => Arc::clone(array),
    };
    Ok(cast(&ints, &DataType::Int64)?)
}

/// Writes the first `width` bytes of each valid row's value, zero-padded.
fn fill_prefixes<'a>(
    bytes: &mut [u8],
    width: usize,
    rows: usize,
    valid: impl Fn(usize) -> bool,
    value: impl Fn(usize) -> &'a [u8],
) {
    for i in (0..rows).filter(|i| valid(*i)) {
        let v = value(i);
        let n = v.len().min(width);
        bytes[i * width..i * width + n].copy_from_slice(&v[..n]);
    }
}

/// Each row's key: bit `b` of every column in turn, for `b` from the most significant bit of
/// the first byte on, skipping columns whose bytes ran out, up to `max_output_size` bytes.
fn interleave(columns: &[OrderedColumn], rows: usize, max_output_size: usize) -> BinaryArray {
    let total: usize = columns.iter().map(|c| c.width).sum();
    let size = total.min(max_output_size);
    let widest = columns.iter().map(|c| c.width).max().unwrap_or(0);
    let mut out = vec![0u8; rows * size];
    let out_bits = size * 8;
    for row in 0..rows {
        let key = &mut out[row * size..(row + 1) * size];
        let mut at = 0;
        'rounds: for bit in 0..widest * 8 {
            let (byte, mask) = (bit / 8, 0x80u8 >> (bit % 8));
            for column in columns {
                if byte >= column.width {
                    continue;
                }
                if at == out_bits {
                    break 'rounds;
                }
                if column.bytes[row * column.width + byte] & mask != 0 {
                    key[at / 8] |= 0x80 >> (at % 8);
                }
                at += 1;
            }
        }
    }
    let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(size, rows));
    BinaryArray::new(offsets, Buffer::from_vec(out), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Date32Array, Float64Array, Int32Array, Int64Array, StringArray,
        TimestampMicrosecondArray,
    };
    use arrow::datatypes::Field;

    fn key(columns: Vec<ArrayRef>, options: ZOrderOptions) -> Vec<Vec<u8>> {
        let rows = columns[0].len();
        let ordered: Vec<OrderedColumn> = columns
            .iter()
            .map(|c| ordered_bytes(c, options).unwrap())
            .collect();
        let keys = interleave(&ordered, rows, options.max_output_size);
        (0..rows).map(|i| keys.value(i).to_vec()).collect()
    }

    /// Whether the bytes of `values` (one column) sort as the values do.
    fn sorts_like<T: PartialOrd + Copy + std::fmt::Debug>(values: &[T], array: ArrayRef) {
        let keys = key(vec![array], ZOrderOptions::default());
        for i in 0..values.len() {
            for j in 0..values.len() {
                if values[i] < values[j] {
                    assert!(keys[i] < keys[j], "{:?} < {:?}", values[i], values[j]);
                }
            }
        }
    }

    #[test]
    fn bytes_sort_as_the_values_do() {
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        sorts_like(&ints, Arc::new(Int64Array::from(ints.to_vec())));
        let small = [i32::MIN, -3, 0, 2, i32::MAX];
        sorts_like(&small, Arc::new(Int32Array::from(small.to_vec())));
        let floats = [
            f64::NEG_INFINITY,
            -2.5,
            -0.0001,
            0.0,
            1e-9,
            3.0,
            f64::INFINITY,
        ];
        sorts_like(&floats, Arc::new(Float64Array::from(floats.to_vec())));
        let days = [-400, -1, 0, 19000];
        sorts_like(&days, Arc::new(Date32Array::from(days.to_vec())));
        let micros = [-10_000_000i64, 0, 1_700_000_000_000_000];
        sorts_like(
            &micros,
            Arc::new(TimestampMicrosecondArray::from(micros.to_vec())),
        );
        let strings = ["", "a", "ab", "abc", "b", "zz"];
        sorts_like(&strings, Arc::new(StringArray::from(strings.to_vec())));
        let bools = [false, true];
        sorts_like(&bools, Arc::new(BooleanArray::from(bools.to_vec())));
    }

    #[test]
    fn nulls_come_first_and_strings_contribute_a_prefix() {
        let keys = key(
            vec![Arc::new(Int64Array::from(vec![None, Some(i64::MIN)]))],
            ZOrderOptions::default(),
        );
        assert!(keys[0] <= keys[1]);
        assert_eq!(keys[0], vec![0u8; 8]);
        // Beyond the contribution, strings tie.
        let options = ZOrderOptions {
            var_length_contribution: 3,
            ..Default::default()
        };
        let keys = key(
            vec![Arc::new(StringArray::from(vec!["abcX", "abcY", "abd"]))],
            options,
        );
        assert_eq!(keys[0], keys[1]);
        assert!(keys[1] < keys[2]);
        assert_eq!(keys[0].len(), 3);
    }

    #[test]
    fn the_key_interleaves_the_bits_of_every_column() {
        // Two one-byte columns: the key alternates their bits, first column first.
        let a: ArrayRef = Arc::new(BooleanArray::from(vec![true, false, true]));
        let b: ArrayRef = Arc::new(BooleanArray::from(vec![false, true, true]));
        let keys = key(vec![a, b], ZOrderOptions::default());
        assert_eq!(keys, [vec![0x80, 0], vec![0x40, 0], vec![0xC0, 0]]);

        // On a 4x4 grid of (x, y) the key visits quadrants in z-order: every point of the
        // lower-left quadrant sorts before every point of the others.
        let (mut xs, mut ys) = (vec![], vec![]);
        for x in 0..4i64 {
            for y in 0..4i64 {
                xs.push(x);
                ys.push(y);
            }
        }
        let keys = key(
            vec![
                Arc::new(Int64Array::from(xs.clone())),
                Arc::new(Int64Array::from(ys.clone())),
            ],
            ZOrderOptions::default(),
        );
        let quadrant = |i: usize| (xs[i] / 2, ys[i] / 2);
        for i in 0..16 {
            for j in 0..16 {
                if quadrant(i) == (0, 0) && quadrant(j) != (0, 0) {
                    assert!(keys[i] < keys[j], "{i} {j}");
                }
            }
        }
        // Neither column alone decides: (1, 0) sorts before (0, 2).
        let at = |x, y| (0..16).find(|i| xs[*i] == x && ys[*i] == y).unwrap();
        assert!(keys[at(1, 0)] < keys[at(0, 2)]);
        assert!(keys[at(0, 1)] < keys[at(2, 0)]);
    }

    #[test]
    fn max_output_size_truncates_the_key() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![3, 4]));
        let options = ZOrderOptions {
            max_output_size: 5,
            ..Default::default()
        };
        let keys = key(vec![a, b], options);
        assert!(keys.iter().all(|k| k.len() == 5));
    }

    #[test]
    fn zorder_text_reads_columns_and_refuses_what_it_cannot_use() {
        assert_eq!(
            parse_zorder(" ZORDER(a, \"b\")").unwrap(),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(parse_zorder("a DESC").unwrap(), None);
        let err = |t: &str| parse_zorder(t).unwrap_err().to_string();
        assert!(err("zorder(a, a)").contains("twice"));
        assert!(err("zorder a, b").contains("zorder(c1, c2"));
        assert!(err("zorder(a,)").contains("cannot read"));

        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
                true,
            ),
        ]);
        let options = ZOrderOptions::default();
        let e = zorder_requirement(&["l".into()], &schema, options)
            .unwrap_err()
            .to_string();
        assert!(e.contains("z-order cannot use column 'l'"), "{e}");
        let e = zorder_requirement(&["x".into()], &schema, options)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no column 'x'"), "{e}");
        let r = zorder_requirement(&["a".into()], &schema, options).unwrap();
        assert_eq!(r.expr.to_string(), "zorder(a@0)");
    }
}
