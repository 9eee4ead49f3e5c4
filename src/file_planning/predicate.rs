//! DataFusion filters as Iceberg predicates, for pruning manifests and data files.
//!
//! Only what is certain is converted: a conjunct that cannot be expressed is dropped (pruning
//! becomes weaker, never wrong), and an OR or NOT with any unconvertible part is dropped whole.

use std::collections::HashSet;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use iceberg::expr::{Predicate, Reference};
use iceberg::spec::Datum;

/// The conjunction of every filter that converts, or `None` when none does.
///
/// Conjuncts that reference a column in `excluded` are left out (columns whose type changed
/// over the table's history: their older bounds and partition values are stored in the old
/// type, which the iceberg crate's evaluators compare wrongly with the new one).
pub fn to_predicate(filters: &[Expr], excluded: &HashSet<String>) -> Option<Predicate> {
    prunable_filters(filters, excluded)
        .iter()
        .filter_map(convert)
        .reduce(Predicate::and)
}

/// The conjuncts of `filters` that name no column in `excluded` (see [`to_predicate`]), for
/// pruning by this crate's own file statistics.
pub fn prunable_filters(filters: &[Expr], excluded: &HashSet<String>) -> Vec<Expr> {
    filters
        .iter()
        .flat_map(split_and)
        .filter(|e| !e.column_refs().iter().any(|c| excluded.contains(&c.name)))
        .cloned()
        .collect()
}

/// Names (in `schema`) of the columns that must not be used for pruning:
/// - columns whose type differs in some schema of the table's history (older bounds and
///   partition values are stored in the old type, which the iceberg crate's evaluators compare
///   wrongly with the new one);
/// - float and double columns (the evaluators treat NaN unlike DataFusion's total order, and
///   would prune files whose NaN rows DataFusion returns);
/// - columns whose name means another field, or nothing, in the schema of the snapshot being
///   read (the iceberg crate binds pruning predicates by name to that schema).
pub fn unprunable_columns(
    metadata: &iceberg::spec::TableMetadata,
    schema: &iceberg::spec::Schema,
    snapshot_schema: &iceberg::spec::Schema,
) -> HashSet<String> {
    use iceberg::spec::{PrimitiveType, Type};
    let mut out = HashSet::new();
    for field in schema.as_struct().fields() {
        let promoted = metadata.schemas_iter().any(|old| {
            old.field_by_id(field.id)
                .is_some_and(|f| f.field_type != field.field_type)
        });
        let floating = matches!(
            *field.field_type,
            Type::Primitive(PrimitiveType::Float | PrimitiveType::Double)
        );
        let renamed = snapshot_schema
            .field_by_name(&field.name)
            .is_none_or(|f| f.id != field.id);
        if promoted || floating || renamed {
            out.insert(field.name.clone());
        }
    }
    out
}

fn split_and(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            let mut v = split_and(left);
            v.extend(split_and(right));
            v
        }
        other => vec![other],
    }
}

fn datum(v: &ScalarValue) -> Option<Datum> {
    Some(match v {
        ScalarValue::Boolean(Some(b)) => Datum::bool(*b),
        ScalarValue::Int8(Some(i)) => Datum::int(*i as i32),
        ScalarValue::Int16(Some(i)) => Datum::int(*i as i32),
        ScalarValue::Int32(Some(i)) => Datum::int(*i),
        ScalarValue::Int64(Some(i)) => Datum::long(*i),
        ScalarValue::Float32(Some(f)) => Datum::float(*f),
        ScalarValue::Float64(Some(f)) => Datum::double(*f),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Datum::string(s),
        ScalarValue::Date32(Some(d)) => Datum::date(*d),
        ScalarValue::TimestampMicrosecond(Some(t), None) => Datum::timestamp_micros(*t),
        ScalarValue::TimestampMicrosecond(Some(t), Some(_)) => Datum::timestamptz_micros(*t),
        ScalarValue::TimestampNanosecond(Some(t), None) => Datum::timestamp_nanos(*t),
        ScalarValue::TimestampNanosecond(Some(t), Some(_)) => Datum::timestamptz_nanos(*t),
        _ => return None,
    })
}

fn column(e: &Expr) -> Option<Reference> {
    match e {
        Expr::Column(c) => Some(Reference::new(c.name.clone())),
        _ => None,
    }
}

fn literal(e: &Expr) -> Option<Datum> {
    match e {
        Expr::Literal(v, _) => datum(v),
        _ => None,
    }
}

fn compare(r: Reference, op: Operator, d: Datum) -> Option<Predicate> {
    Some(match op {
        Operator::Eq => r.equal_to(d),
        Operator::NotEq => r.not_equal_to(d),
        Operator::Lt => r.less_than(d),
        Operator::LtEq => r.less_than_or_equal_to(d),
        Operator::Gt => r.greater_than(d),
        Operator::GtEq => r.greater_than_or_equal_to(d),
        _ => return None,
    })
}

fn flip(op: Operator) -> Option<Operator> {
    Some(match op {
        Operator::Eq => Operator::Eq,
        Operator::NotEq => Operator::NotEq,
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        _ => return None,
    })
}

fn convert(e: &Expr) -> Option<Predicate> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => Some(convert(left)?.and(convert(right)?)),
            Operator::Or => Some(convert(left)?.or(convert(right)?)),
            _ => {
                if let (Some(c), Some(d)) = (column(left), literal(right)) {
                    compare(c, *op, d)
                } else if let (Some(d), Some(c)) = (literal(left), column(right)) {
                    compare(c, flip(*op)?, d)
                } else {
                    None
                }
            }
        },
        Expr::Not(inner) => Some(convert(inner)?.negate()),
        Expr::IsNull(inner) => Some(column(inner)?.is_null()),
        Expr::IsNotNull(inner) => Some(column(inner)?.is_not_null()),
        Expr::InList(list) => {
            let c = column(&list.expr)?;
            let values: Option<Vec<Datum>> = list.list.iter().map(literal).collect();
            let values = values?;
            Some(if list.negated {
                c.is_not_in(values)
            } else {
                c.is_in(values)
            })
        }
        Expr::Between(b) => {
            let c = column(&b.expr)?;
            let (lo, hi) = (literal(&b.low)?, literal(&b.high)?);
            let p = c
                .clone()
                .greater_than_or_equal_to(lo)
                .and(c.less_than_or_equal_to(hi));
            Some(if b.negated { p.negate() } else { p })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col, lit};

    use super::*;

    #[test]
    fn converts_what_it_can_and_drops_the_rest() {
        let none = HashSet::new();
        let p = to_predicate(&[col("a").gt(lit(5i64)).and(col("b").eq(lit("x")))], &none).unwrap();
        assert_eq!(p.to_string(), "(a > 5) AND (b = \"x\")");
        // Conjuncts on excluded (type-promoted) columns are left out.
        let promoted = HashSet::from(["a".to_string()]);
        let p = to_predicate(
            &[col("a").gt(lit(5i64)).and(col("b").eq(lit("x")))],
            &promoted,
        )
        .unwrap();
        assert_eq!(p.to_string(), "b = \"x\"");
        let p = to_predicate(&[lit(5i64).lt_eq(col("a"))], &none).unwrap();
        assert_eq!(p.to_string(), "a >= 5");
        // An unconvertible conjunct is dropped; an unconvertible OR side drops the OR.
        let odd = col("a").eq(col("b"));
        let p = to_predicate(&[odd.clone(), col("c").is_null()], &none).unwrap();
        assert_eq!(p.to_string(), "c IS NULL");
        assert!(to_predicate(&[col("c").is_null().or(odd.clone())], &none).is_none());
        assert!(to_predicate(&[odd], &none).is_none());
        let p = to_predicate(
            &[col("a").in_list(vec![lit(1i32), lit(2i32)], false)],
            &none,
        )
        .unwrap();
        assert!(p.to_string().contains("IN"), "{p}");
    }
}
