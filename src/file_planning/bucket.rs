//! `iceberg_bucket(N, value)`: Iceberg's bucket transform as a SQL function (Spark's
//! `system.bucket`), vectorised. Writes sort by it when a table's sort order has a `bucket`
//! key; a plan that calls it travels by the function's name.
//!
//! The hash is the spec's (Appendix B): 32-bit murmur3 (x86, seed 0) of the value's bytes:
//! ints, longs, dates, times and timestamps as an 8-byte little-endian long, strings as UTF-8,
//! binary as is, decimals as the fewest big-endian two's-complement bytes of the unscaled value,
//! uuids as their 16 bytes. The bucket is `(hash & i32::MAX) % N`.

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, AsArray, Int32Array};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Int32Type, Int64Type, Time64MicrosecondType, TimeUnit,
    TimestampMicrosecondType,
};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The function (one instance, so plans compare equal).
pub fn iceberg_bucket() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(Bucket::new())));
    Arc::clone(&UDF)
}

fn hash(bytes: &[u8]) -> i32 {
    let mut reader = bytes;
    // Reading from a slice cannot fail.
    murmur3::murmur3_32(&mut reader, 0).unwrap_or_default() as i32
}

fn hash_long(v: i64) -> i32 {
    hash(&v.to_le_bytes())
}

/// The fewest big-endian two's-complement bytes that hold `v`.
fn hash_decimal(v: i128) -> i32 {
    let bytes = v.to_be_bytes();
    let len = (1..=16)
        .find(|n| {
            let shift = 128 - 8 * n;
            (v << shift) >> shift == v
        })
        .unwrap_or(16);
    hash(&bytes[16 - len..])
}

/// The bucket of each value of `values` under `n` buckets (NULL stays NULL).
pub(crate) fn buckets(values: &ArrayRef, n: u32) -> Result<Int32Array> {
    let bucket = |h: i32| (h & i32::MAX) % n as i32;
    let out: Int32Array = match values.data_type() {
        DataType::Int32 => values
            .as_primitive::<Int32Type>()
            .unary(|v| bucket(hash_long(v as i64))),
        DataType::Date32 => values
            .as_primitive::<Date32Type>()
            .unary(|v| bucket(hash_long(v as i64))),
        DataType::Int64 => values
            .as_primitive::<Int64Type>()
            .unary(|v| bucket(hash_long(v))),
        DataType::Time64(TimeUnit::Microsecond) => values
            .as_primitive::<Time64MicrosecondType>()
            .unary(|v| bucket(hash_long(v))),
        DataType::Timestamp(TimeUnit::Microsecond, _) => values
            .as_primitive::<TimestampMicrosecondType>()
            .unary(|v| bucket(hash_long(v))),
        DataType::Decimal128(_, _) => values
            .as_primitive::<Decimal128Type>()
            .unary(|v| bucket(hash_decimal(v))),
        DataType::Utf8 => values
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(|s| bucket(hash(s.as_bytes()))))
            .collect(),
        DataType::LargeUtf8 => values
            .as_string::<i64>()
            .iter()
            .map(|v| v.map(|s| bucket(hash(s.as_bytes()))))
            .collect(),
        DataType::Utf8View => values
            .as_string_view()
            .iter()
            .map(|v| v.map(|s| bucket(hash(s.as_bytes()))))
            .collect(),
        DataType::Binary => values
            .as_binary::<i32>()
            .iter()
            .map(|v| v.map(|b| bucket(hash(b))))
            .collect(),
        DataType::LargeBinary => values
            .as_binary::<i64>()
            .iter()
            .map(|v| v.map(|b| bucket(hash(b))))
            .collect(),
        DataType::BinaryView => values
            .as_binary_view()
            .iter()
            .map(|v| v.map(|b| bucket(hash(b))))
            .collect(),
        DataType::FixedSizeBinary(_) => values
            .as_fixed_size_binary()
            .iter()
            .map(|v| v.map(|b| bucket(hash(b))))
            .collect(),
        other => {
            return Err(DataFusionError::Plan(format!(
                "iceberg_bucket: no Iceberg bucket for values of type {other}"
            )))
        }
    };
    Ok(out)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Bucket {
    signature: Signature,
}

impl Bucket {
    fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Bucket {
    fn name(&self) -> &str {
        "iceberg_bucket"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [n, values] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(
                "iceberg_bucket takes two arguments: (N, value)".into(),
            ));
        };
        let n = match n {
            ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(Some(n)) if n > 0 && n <= i32::MAX as i64 => n as u32,
                _ => {
                    return Err(DataFusionError::Plan(format!(
                        "iceberg_bucket: the bucket count must be a positive integer, got {s}"
                    )))
                }
            },
            ColumnarValue::Array(_) => {
                return Err(DataFusionError::Plan(
                    "iceberg_bucket: the bucket count must be a constant".into(),
                ))
            }
        };
        let rows = args.number_rows;
        let out = buckets(&values.to_array(rows)?, n)?;
        Ok(match values {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(out)),
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Decimal128Array, Int64Array, StringArray};
    use iceberg::spec::{Datum, PrimitiveLiteral, Transform};
    use rand::{Rng, SeedableRng};

    use super::*;

    fn theirs(n: u32, datum: Datum) -> i32 {
        let f = iceberg::transform::create_transform_function(&Transform::Bucket(n)).unwrap();
        match f.transform_literal(&datum).unwrap().unwrap().literal() {
            PrimitiveLiteral::Int(b) => *b,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn buckets_are_the_iceberg_crate_s() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let longs: Vec<i64> = (0..200).map(|_| rng.random()).chain([0, -1, 34]).collect();
        let got = buckets(&(Arc::new(Int64Array::from(longs.clone())) as ArrayRef), 16).unwrap();
        for (v, b) in longs.iter().zip(got.values()) {
            assert_eq!(*b, theirs(16, Datum::long(*v)), "{v}");
        }
        let texts: Vec<String> = (0..100)
            .map(|i| format!("s{}-{}", i, rng.random::<u32>()))
            .chain(["iceberg".to_string(), String::new()])
            .collect();
        let array: ArrayRef = Arc::new(StringArray::from(texts.clone()));
        let got = buckets(&array, 7).unwrap();
        for (v, b) in texts.iter().zip(got.values()) {
            assert_eq!(*b, theirs(7, Datum::string(v)), "{v}");
        }
        // The spec's example: bucket(34L) hashes to 2017239379.
        assert_eq!(hash_long(34), 2017239379);
        let decimals: Vec<i128> = (0..200)
            .map(|_| rng.random::<i64>() as i128 * rng.random_range(1..1000))
            .chain([0, 1, -1, 127, 128, -128, -129, 255, 256, i64::MAX as i128])
            .collect();
        let array: ArrayRef = Arc::new(
            Decimal128Array::from(decimals.clone())
                .with_precision_and_scale(38, 2)
                .unwrap(),
        );
        let got = buckets(&array, 11).unwrap();
        for (v, b) in decimals.iter().zip(got.values()) {
            let sign = if *v < 0 { "-" } else { "" };
            let abs = v.unsigned_abs();
            let datum =
                Datum::decimal_from_str(format!("{sign}{}.{:02}", abs / 100, abs % 100)).unwrap();
            assert_eq!(*b, theirs(11, datum), "{v}");
        }
        // The spec's example: decimal 14.20 hashes to -500754589.
        assert_eq!(hash_decimal(1420), -500754589);
    }
}
