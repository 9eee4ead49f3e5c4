//! Iceberg literals as Arrow scalars.

use datafusion::common::ScalarValue;
use iceberg::spec::{PrimitiveLiteral, PrimitiveType};

/// The Arrow-typed value of a literal of type `ty`.
pub(crate) fn literal_scalar(ty: &PrimitiveType, v: &PrimitiveLiteral) -> Option<ScalarValue> {
    let utc = || Some("+00:00".into());
    Some(match (ty, v) {
        (PrimitiveType::Boolean, PrimitiveLiteral::Boolean(b)) => ScalarValue::Boolean(Some(*b)),
        (PrimitiveType::Int, PrimitiveLiteral::Int(v)) => ScalarValue::Int32(Some(*v)),
        (PrimitiveType::Long, PrimitiveLiteral::Long(v)) => ScalarValue::Int64(Some(*v)),
        (PrimitiveType::Float, PrimitiveLiteral::Float(v)) => ScalarValue::Float32(Some(v.0)),
        (PrimitiveType::Double, PrimitiveLiteral::Double(v)) => ScalarValue::Float64(Some(v.0)),
        (PrimitiveType::Decimal { precision, scale }, PrimitiveLiteral::Int128(v)) => {
            ScalarValue::Decimal128(Some(*v), *precision as u8, *scale as i8)
        }
        (PrimitiveType::Date, PrimitiveLiteral::Int(v)) => ScalarValue::Date32(Some(*v)),
        (PrimitiveType::Time, PrimitiveLiteral::Long(v)) => {
            ScalarValue::Time64Microsecond(Some(*v))
        }
        (PrimitiveType::Timestamp, PrimitiveLiteral::Long(v)) => {
            ScalarValue::TimestampMicrosecond(Some(*v), None)
        }
        (PrimitiveType::Timestamptz, PrimitiveLiteral::Long(v)) => {
            ScalarValue::TimestampMicrosecond(Some(*v), utc())
        }
        (PrimitiveType::TimestampNs, PrimitiveLiteral::Long(v)) => {
            ScalarValue::TimestampNanosecond(Some(*v), None)
        }
        (PrimitiveType::TimestamptzNs, PrimitiveLiteral::Long(v)) => {
            ScalarValue::TimestampNanosecond(Some(*v), utc())
        }
        (PrimitiveType::String, PrimitiveLiteral::String(s)) => {
            ScalarValue::Utf8View(Some(s.clone()))
        }
        (PrimitiveType::Uuid, PrimitiveLiteral::UInt128(v)) => {
            ScalarValue::FixedSizeBinary(16, Some(v.to_be_bytes().to_vec()))
        }
        (PrimitiveType::Fixed(len), PrimitiveLiteral::Binary(b)) if b.len() as u64 == *len => {
            ScalarValue::FixedSizeBinary(*len as i32, Some(b.clone()))
        }
        (PrimitiveType::Binary, PrimitiveLiteral::Binary(b)) => {
            ScalarValue::LargeBinary(Some(b.clone()))
        }
        _ => return None,
    })
}
