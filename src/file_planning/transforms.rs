//! What a partition value of a non-identity transform says about its source column in every
//! row of a data file (Iceberg's inclusive projection, read backwards): `day(ts) = d` bounds
//! `ts` to that day, `truncate(10, n) = 20` bounds `n` to `[20, 29]`, `truncate(2, s) = 'ab'`
//! bounds `s` to `['ab', 'ac')`, `bucket(16, id) = 3` rules out every value whose bucket is not
//! 3. [`super::strict::FileStats`] intersects these with the file's column bounds.

use chrono::{Datelike, NaiveDate};
use datafusion::common::ScalarValue;
use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType, Transform};

use super::literal::literal_scalar;

const MICROS_PER_HOUR: i64 = 3_600_000_000;
const MICROS_PER_DAY: i64 = 24 * MICROS_PER_HOUR;

/// Bounds a transform's value puts on its source column (inclusive), in the column's Arrow
/// type as [`literal_scalar`] gives it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Range {
    pub lower: ScalarValue,
    pub upper: ScalarValue,
}

/// Days from 1970-01-01 to the first day of month `months` after January 1970.
fn month_start(months: i64) -> Option<i64> {
    let year = 1970 + months.div_euclid(12);
    let month = months.rem_euclid(12) as u32 + 1;
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, 1)?;
    Some(date.num_days_from_ce() as i64 - 719_163)
}

/// The first and last day (days since the epoch) a time transform's value covers.
fn day_span(transform: Transform, v: i64) -> Option<(i64, i64)> {
    Some(match transform {
        Transform::Day => (v, v),
        Transform::Month => (month_start(v)?, month_start(v + 1)? - 1),
        Transform::Year => (month_start(v * 12)?, month_start((v + 1) * 12)? - 1),
        _ => return None,
    })
}

/// The string just above every string that starts with `prefix` (its last character that can
/// be incremented, incremented), or `None` when there is none.
pub(crate) fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The range of source values in a file whose partition value for `transform` is `v` (the
/// source column of type `ty`); `None` when the transform says nothing this module uses.
pub(crate) fn range(
    ty: &PrimitiveType,
    transform: Transform,
    v: &PrimitiveLiteral,
) -> Option<Range> {
    let scalar = |p: PrimitiveLiteral| literal_scalar(ty, &p);
    let value = match v {
        PrimitiveLiteral::Int(v) => *v as i64,
        PrimitiveLiteral::Long(v) => *v,
        PrimitiveLiteral::String(s) => {
            // truncate(W, s): the values start with `s`.
            if transform == Transform::Identity || !matches!(transform, Transform::Truncate(_)) {
                return None;
            }
            let upper = successor(s)?;
            return Some(Range {
                lower: scalar(PrimitiveLiteral::String(s.clone()))?,
                upper: scalar(PrimitiveLiteral::String(upper))?,
            });
        }
        PrimitiveLiteral::Int128(v) => {
            let Transform::Truncate(w) = transform else {
                return None;
            };
            return Some(Range {
                lower: scalar(PrimitiveLiteral::Int128(*v))?,
                upper: scalar(PrimitiveLiteral::Int128(v.checked_add(w as i128 - 1)?))?,
            });
        }
        _ => return None,
    };
    // Writers that divide toward zero (Java before 1.1, iceberg-rust 0.10 for timestamps) file
    // the last fraction of a pre-1970 period under the next one: a value at or before the
    // epoch's period may hold rows of the period before it (Java's reader widens the same way).
    let first = match transform {
        Transform::Hour | Transform::Day | Transform::Month | Transform::Year if value <= 0 => {
            value.checked_sub(1)?
        }
        _ => value,
    };
    let (lo, hi): (i64, i64) = match (ty, transform) {
        (PrimitiveType::Int | PrimitiveType::Long, Transform::Truncate(w)) => {
            (value, value.checked_add(w as i64 - 1)?)
        }
        (PrimitiveType::Date, Transform::Day | Transform::Month | Transform::Year) => {
            (day_span(transform, first)?.0, day_span(transform, value)?.1)
        }
        (
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs,
            Transform::Hour | Transform::Day | Transform::Month | Transform::Year,
        ) => {
            let (lo, hi) = match transform {
                Transform::Hour => (
                    first.checked_mul(MICROS_PER_HOUR)?,
                    value.checked_add(1)?.checked_mul(MICROS_PER_HOUR)? - 1,
                ),
                _ => {
                    let (start, _) = day_span(transform, first)?;
                    let (_, last) = day_span(transform, value)?;
                    (
                        start.checked_mul(MICROS_PER_DAY)?,
                        last.checked_add(1)?.checked_mul(MICROS_PER_DAY)? - 1,
                    )
                }
            };
            match ty {
                PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs => (
                    lo.checked_mul(1000)?,
                    hi.checked_mul(1000)?.checked_add(999)?,
                ),
                _ => (lo, hi),
            }
        }
        _ => return None,
    };
    let literal = |n: i64| match ty {
        PrimitiveType::Int | PrimitiveType::Date => {
            i32::try_from(n).ok().map(PrimitiveLiteral::Int)
        }
        _ => Some(PrimitiveLiteral::Long(n)),
    };
    Some(Range {
        lower: scalar(literal(lo)?)?,
        upper: scalar(literal(hi)?)?,
    })
}

/// The bucket `v` (a literal compared with a column of type `ty`) falls in under `bucket[n]`;
/// `None` for a value this module does not convert.
pub(crate) fn bucket_of(ty: &PrimitiveType, n: u32, v: &ScalarValue) -> Option<i32> {
    let datum = match (ty, v) {
        (PrimitiveType::Int, ScalarValue::Int32(Some(x))) => Datum::int(*x),
        (PrimitiveType::Int, ScalarValue::Int64(Some(x))) => Datum::int(i32::try_from(*x).ok()?),
        (PrimitiveType::Long, ScalarValue::Int64(Some(x))) => Datum::long(*x),
        (PrimitiveType::Long, ScalarValue::Int32(Some(x))) => Datum::long(*x as i64),
        (
            PrimitiveType::String,
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
        ) => Datum::string(s),
        (PrimitiveType::Date, ScalarValue::Date32(Some(d))) => Datum::date(*d),
        (PrimitiveType::Timestamp, ScalarValue::TimestampMicrosecond(Some(t), None)) => {
            Datum::timestamp_micros(*t)
        }
        (PrimitiveType::Timestamptz, ScalarValue::TimestampMicrosecond(Some(t), Some(_))) => {
            Datum::timestamptz_micros(*t)
        }
        _ => return None,
    };
    let function = iceberg::transform::create_transform_function(&Transform::Bucket(n)).ok()?;
    match function.transform_literal(&datum).ok()??.literal() {
        PrimitiveLiteral::Int(b) => Some(*b),
        _ => None,
    }
}

/// The prefix a `LIKE` pattern asks for when it is `prefix%` (no other wildcard, no escapes),
/// or the whole pattern as an exact value when it has no wildcard (`Err`).
pub(crate) fn like_prefix(pattern: &str) -> Option<Result<&str, &str>> {
    let wild = |s: &str| s.contains(['%', '_', '\\']);
    match pattern.strip_suffix('%') {
        Some(prefix) if !wild(prefix) => Some(Ok(prefix)),
        Some(_) => None,
        None if !wild(pattern) => Some(Err(pattern)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_transforms_bound_their_source_to_the_period() {
        // 2024-02 is month 649 since 1970-01; February 2024 has 29 days.
        let r = range(
            &PrimitiveType::Date,
            Transform::Month,
            &PrimitiveLiteral::Int(649),
        )
        .unwrap();
        let days = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap().num_days_from_ce() - 719_163;
        assert_eq!(r.lower, ScalarValue::Date32(Some(days(2024, 2, 1))));
        assert_eq!(r.upper, ScalarValue::Date32(Some(days(2024, 2, 29))));
        let r = range(
            &PrimitiveType::Timestamp,
            Transform::Day,
            &PrimitiveLiteral::Int(1),
        )
        .unwrap();
        assert_eq!(
            r.lower,
            ScalarValue::TimestampMicrosecond(Some(MICROS_PER_DAY), None)
        );
        assert_eq!(
            r.upper,
            ScalarValue::TimestampMicrosecond(Some(2 * MICROS_PER_DAY - 1), None)
        );
        let r = range(
            &PrimitiveType::TimestampNs,
            Transform::Hour,
            &PrimitiveLiteral::Int(0),
        )
        .unwrap();
        assert_eq!(
            r.upper,
            ScalarValue::TimestampNanosecond(Some(MICROS_PER_HOUR * 1000 - 1), None)
        );
        // At and before the epoch's period the range starts a period early: writers that divide
        // toward zero file a period's last fraction under the next one.
        let r = range(
            &PrimitiveType::Date,
            Transform::Year,
            &PrimitiveLiteral::Int(-1),
        )
        .unwrap();
        assert_eq!(r.lower, ScalarValue::Date32(Some(days(1968, 1, 1))));
        assert_eq!(r.upper, ScalarValue::Date32(Some(-1)));
        let r = range(
            &PrimitiveType::Timestamp,
            Transform::Day,
            &PrimitiveLiteral::Int(-1),
        )
        .unwrap();
        assert_eq!(
            r.lower,
            ScalarValue::TimestampMicrosecond(Some(-2 * MICROS_PER_DAY), None)
        );
        assert_eq!(r.upper, ScalarValue::TimestampMicrosecond(Some(-1), None));
        let r = range(
            &PrimitiveType::Timestamp,
            Transform::Hour,
            &PrimitiveLiteral::Int(0),
        )
        .unwrap();
        assert_eq!(
            r.lower,
            ScalarValue::TimestampMicrosecond(Some(-MICROS_PER_HOUR), None)
        );
    }

    #[test]
    fn truncate_bounds_numbers_and_strings() {
        let r = range(
            &PrimitiveType::Long,
            Transform::Truncate(10),
            &PrimitiveLiteral::Long(-20),
        )
        .unwrap();
        assert_eq!(r.lower, ScalarValue::Int64(Some(-20)));
        assert_eq!(r.upper, ScalarValue::Int64(Some(-11)));
        let r = range(
            &PrimitiveType::String,
            Transform::Truncate(2),
            &PrimitiveLiteral::String("ab".into()),
        )
        .unwrap();
        assert_eq!(r.upper, ScalarValue::Utf8View(Some("ac".into())));
        assert_eq!(successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(successor("\u{10FFFF}"), None);
        assert!(range(
            &PrimitiveType::Long,
            Transform::Bucket(4),
            &PrimitiveLiteral::Int(1)
        )
        .is_none());
    }

    #[test]
    fn buckets_are_iceberg_s_and_like_prefixes_are_recognised() {
        // The spec's reference values: bucket hashes of 34 (int/long) and "iceberg".
        let h = |n, ty: &PrimitiveType, v: ScalarValue| bucket_of(ty, n, &v).unwrap();
        let all = i32::MAX as u32;
        assert_eq!(
            h(all, &PrimitiveType::Long, ScalarValue::Int64(Some(34))),
            2017239379
        );
        assert_eq!(
            h(
                all,
                &PrimitiveType::String,
                ScalarValue::Utf8View(Some("iceberg".into()))
            ),
            1210000089
        );
        assert_eq!(
            h(16, &PrimitiveType::Int, ScalarValue::Int32(Some(34))),
            h(16, &PrimitiveType::Long, ScalarValue::Int64(Some(34)))
        );
        assert_eq!(like_prefix("ab%"), Some(Ok("ab")));
        assert_eq!(like_prefix("abc"), Some(Err("abc")));
        assert_eq!(like_prefix("a_c%"), None);
        assert_eq!(like_prefix("%ab"), None);
    }
}
