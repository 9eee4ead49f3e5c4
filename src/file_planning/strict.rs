//! Proofs about whole data files from their manifest entries: does a condition hold for every
//! row of a file ([`FileStats::all_match`]), or for none ([`FileStats::none_match`])?
//!
//! A `DELETE` removes a file whose every row matches without reading it, and a concurrent
//! commit's new file conflicts with a `DELETE` unless none of its rows can match. Both answers
//! are conservative: `false` means "not proven". Facts come from identity partition values
//! (exact) and column bounds (exact for fixed-width types; for strings and binaries the writer
//! may truncate them, which keeps them valid bounds but not values), together with null and NaN
//! counts: a row whose condition is NULL does not match.

use std::cmp::Ordering;
use std::collections::HashMap;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use iceberg::spec::{
    DataFile, Datum, Literal, PartitionSpec, PrimitiveLiteral, PrimitiveType, Schema, Transform,
    Type,
};

use super::literal::literal_scalar;

/// What a file's manifest entry says about one column.
#[derive(Debug, Clone, Default)]
struct ColumnFacts {
    /// A value no row is below (NULLs and NaNs aside).
    lower: Option<ScalarValue>,
    /// A value no row is above.
    upper: Option<ScalarValue>,
    /// Whether `lower`/`upper` are values of the column, not just bounds.
    exact: bool,
    /// NULL rows.
    nulls: Option<u64>,
    /// Whether no row is NaN (always true for non-float columns).
    no_nan: bool,
    /// The column's type, and the `bucket[N]` partition values the file has for it.
    ty: Option<PrimitiveType>,
    buckets: Vec<(u32, i32)>,
    /// A prefix of every non-NULL value (a `truncate[W]` partition value of a string column).
    prefix: Option<String>,
}

/// Column facts of one data file, for the columns a condition names.
#[derive(Debug, Clone)]
pub(crate) struct FileStats {
    rows: u64,
    columns: HashMap<String, ColumnFacts>,
}

/// The text of a string value.
fn text(v: &ScalarValue) -> Option<&str> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(s.as_str()),
        _ => None,
    }
}

impl ColumnFacts {
    /// Adds what the file's partition values of non-identity transforms of the column say
    /// (see [`super::transforms`]): bounds intersected with the column's, bucket numbers, and
    /// all rows NULL where such a value is NULL.
    fn with_transform_facts(
        &mut self,
        file: &DataFile,
        spec: &PartitionSpec,
        id: i32,
        ty: &PrimitiveType,
    ) {
        for (pos, field) in spec.fields().iter().enumerate() {
            if field.source_id != id
                || matches!(
                    field.transform,
                    Transform::Identity | Transform::Void | Transform::Unknown
                )
            {
                continue;
            }
            match file.partition().fields().get(pos) {
                // A transform of a non-NULL value is not NULL.
                Some(None) => self.nulls = Some(file.record_count()),
                Some(Some(Literal::Primitive(v))) => match field.transform {
                    Transform::Bucket(n) => {
                        if let PrimitiveLiteral::Int(b) = v {
                            self.buckets.push((n, *b));
                        }
                    }
                    transform => {
                        if let (Transform::Truncate(_), PrimitiveLiteral::String(t)) =
                            (transform, v)
                        {
                            self.prefix = Some(t.clone());
                        }
                        if let Some(r) = super::transforms::range(ty, transform, v) {
                            self.narrow(r);
                        }
                    }
                },
                _ => {}
            }
        }
    }

    /// Intersects the column's bounds with `r` (bounds taken from `r` are not values).
    fn narrow(&mut self, r: super::transforms::Range) {
        let tighter_lower = match &self.lower {
            Some(lo) => cmp(&r.lower, lo) == Some(Ordering::Greater),
            None => true,
        };
        if tighter_lower {
            self.lower = Some(r.lower);
            self.exact = false;
        }
        let tighter_upper = match &self.upper {
            Some(hi) => cmp(&r.upper, hi) == Some(Ordering::Less),
            None => true,
        };
        if tighter_upper {
            self.upper = Some(r.upper);
            self.exact = false;
        }
    }

    /// Whether the file's bucket and truncate partition values rule out every row equal to
    /// `v`.
    fn partition_excludes(&self, v: &ScalarValue) -> bool {
        if let (Some(prefix), Some(v)) = (&self.prefix, text(v)) {
            if !v.starts_with(prefix.as_str()) {
                return true;
            }
        }
        let Some(ty) = &self.ty else { return false };
        self.buckets
            .iter()
            .any(|(n, b)| super::transforms::bucket_of(ty, *n, v).is_some_and(|of| of != *b))
    }

    /// The column's string bounds.
    fn string_bounds(&self) -> Option<(&str, &str)> {
        Some((text(self.lower.as_ref()?)?, text(self.upper.as_ref()?)?))
    }

    /// Whether no value of the column starts with `prefix`.
    fn no_prefix(&self, prefix: &str) -> bool {
        if let Some(fixed) = &self.prefix {
            if !fixed.starts_with(prefix) && !prefix.starts_with(fixed.as_str()) {
                return true;
            }
        }
        let Some((lo, hi)) = self.string_bounds() else {
            return false;
        };
        // Every value is in [lo, hi]; those starting with `prefix` are in [prefix, next).
        hi < prefix || (lo > prefix && !lo.starts_with(prefix))
    }
}

impl FileStats {
    /// Facts of `file` (written under `spec`) about the top-level `columns` of `schema`.
    pub(crate) fn of(
        file: &DataFile,
        spec: &PartitionSpec,
        schema: &Schema,
        columns: &[String],
    ) -> Self {
        let mut facts = HashMap::new();
        for name in columns {
            let Some(field) = schema.as_struct().fields().iter().find(|f| &f.name == name) else {
                continue;
            };
            let Type::Primitive(ty) = field.field_type.as_ref() else {
                continue;
            };
            let id = field.id;
            let float = matches!(ty, PrimitiveType::Float | PrimitiveType::Double);
            let mut c = ColumnFacts {
                lower: file.lower_bounds().get(&id).and_then(|d| scalar(d, ty)),
                upper: file.upper_bounds().get(&id).and_then(|d| scalar(d, ty)),
                exact: !matches!(
                    ty,
                    PrimitiveType::String | PrimitiveType::Binary | PrimitiveType::Fixed(_)
                ),
                nulls: file.null_value_counts().get(&id).copied(),
                no_nan: !float || file.nan_value_counts().get(&id) == Some(&0),
                ty: Some(ty.clone()),
                buckets: vec![],
                prefix: None,
            };
            c.with_transform_facts(file, spec, id, ty);
            // An identity partition value is the column's value in every row.
            let identity = spec
                .fields()
                .iter()
                .position(|p| p.source_id == id && p.transform == Transform::Identity);
            if let Some(pos) = identity {
                match file.partition().fields().get(pos) {
                    Some(Some(Literal::Primitive(v))) => {
                        if let Some(s) = literal_scalar(ty, v) {
                            c = ColumnFacts {
                                lower: Some(s.clone()),
                                upper: Some(s),
                                exact: true,
                                nulls: Some(0),
                                no_nan: c.no_nan,
                                ty: c.ty.take(),
                                buckets: vec![],
                                prefix: None,
                            };
                        }
                    }
                    Some(None) => {
                        c = ColumnFacts {
                            nulls: Some(file.record_count()),
                            ..ColumnFacts::default()
                        }
                    }
                    _ => {}
                }
            }
            facts.insert(name.clone(), c);
        }
        Self {
            rows: file.record_count(),
            columns: facts,
        }
    }

    /// Whether every conjunct in `filters` is TRUE for every row (no filters: every row).
    pub(crate) fn all_match(&self, filters: &[Expr]) -> bool {
        filters.iter().all(|f| self.always(f))
    }

    /// Whether some conjunct in `filters` is never TRUE for any row.
    pub(crate) fn none_match(&self, filters: &[Expr]) -> bool {
        self.rows == 0 || filters.iter().any(|f| self.never(f))
    }

    fn column(&self, e: &Expr) -> Option<&ColumnFacts> {
        match e {
            Expr::Column(c) => self.columns.get(&c.name),
            _ => None,
        }
    }

    /// A column with no NULL and no NaN row, and its facts.
    fn non_null(&self, e: &Expr) -> Option<&ColumnFacts> {
        self.column(e).filter(|c| c.nulls == Some(0) && c.no_nan)
    }

    /// Proves `e` TRUE for every row.
    fn always(&self, e: &Expr) -> bool {
        match e {
            Expr::Literal(ScalarValue::Boolean(Some(true)), _) => true,
            Expr::Column(_) => self
                .non_null(e)
                .is_some_and(|c| holds_all(c, Operator::Eq, &ScalarValue::Boolean(Some(true)))),
            Expr::Not(inner) if matches!(inner.as_ref(), Expr::Column(_)) => self
                .non_null(inner)
                .is_some_and(|c| holds_all(c, Operator::Eq, &ScalarValue::Boolean(Some(false)))),
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
                Operator::And => self.always(left) && self.always(right),
                Operator::Or => self.always(left) || self.always(right),
                _ => match comparison(left, *op, right) {
                    Some((col, op, v)) => self.non_null(col).is_some_and(|c| holds_all(c, op, v)),
                    None => false,
                },
            },
            Expr::IsNull(inner) => self
                .column(inner)
                .is_some_and(|c| c.nulls == Some(self.rows)),
            Expr::IsNotNull(inner) => self.column(inner).is_some_and(|c| c.nulls == Some(0)),
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => match (literal(low), literal(high)) {
                (Some(lo), Some(hi)) => self.non_null(expr).is_some_and(|c| {
                    holds_all(c, Operator::GtEq, lo) && holds_all(c, Operator::LtEq, hi)
                }),
                _ => false,
            },
            Expr::InList(list) if !list.negated => {
                let Some(c) = self.non_null(&list.expr) else {
                    return false;
                };
                list.list.iter().any(|v| match literal(v) {
                    Some(v) => holds_all(c, Operator::Eq, v),
                    None => false,
                })
            }
            _ => false,
        }
    }

    /// Proves `e` not TRUE (FALSE or NULL) for every row.
    fn never(&self, e: &Expr) -> bool {
        let all_null = |c: &ColumnFacts| c.nulls == Some(self.rows);
        match e {
            // A boolean column: never TRUE when no row is TRUE; NOT of one when no row is FALSE.
            Expr::Column(_) => self.column(e).is_some_and(|c| {
                all_null(c) || holds_none(c, Operator::Eq, &ScalarValue::Boolean(Some(true)))
            }),
            Expr::Not(inner) => {
                self.always(inner)
                    || (matches!(inner.as_ref(), Expr::Column(_))
                        && self.column(inner).is_some_and(|c| {
                            all_null(c)
                                || holds_none(c, Operator::Eq, &ScalarValue::Boolean(Some(false)))
                        }))
            }
            Expr::Like(like)
                if !like.negated && !like.case_insensitive && like.escape_char.is_none() =>
            {
                let (
                    Some(c),
                    Some(
                        ScalarValue::Utf8(Some(p))
                        | ScalarValue::Utf8View(Some(p))
                        | ScalarValue::LargeUtf8(Some(p)),
                    ),
                ) = (self.column(&like.expr), literal(&like.pattern))
                else {
                    return false;
                };
                all_null(c)
                    || match super::transforms::like_prefix(p) {
                        Some(Ok(prefix)) => c.no_prefix(prefix),
                        Some(Err(exact)) => {
                            holds_none(
                                c,
                                Operator::Eq,
                                &ScalarValue::Utf8View(Some(exact.to_string())),
                            ) || c.no_prefix(exact)
                        }
                        None => false,
                    }
            }
            Expr::ScalarFunction(f) if f.name() == "starts_with" => match f.args.as_slice() {
                [column, prefix] => match (self.column(column), literal(prefix)) {
                    (
                        Some(c),
                        Some(
                            ScalarValue::Utf8(Some(p))
                            | ScalarValue::Utf8View(Some(p))
                            | ScalarValue::LargeUtf8(Some(p)),
                        ),
                    ) => all_null(c) || c.no_prefix(p),
                    _ => false,
                },
                _ => false,
            },
            Expr::Literal(ScalarValue::Boolean(b), _) => *b != Some(true),
            Expr::Literal(v, _) if v.is_null() => true,
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
                Operator::And => self.never(left) || self.never(right),
                Operator::Or => self.never(left) && self.never(right),
                _ => match comparison(left, *op, right) {
                    // Only NULL rows (comparing NULL is never TRUE).
                    Some((col, _, _))
                        if self.column(col).is_some_and(|c| c.nulls == Some(self.rows)) =>
                    {
                        true
                    }
                    Some((col, op, v)) => self.column(col).is_some_and(|c| {
                        holds_none(c, op, v) || (op == Operator::Eq && c.partition_excludes(v))
                    }),
                    None => false,
                },
            },
            Expr::IsNull(inner) => self.column(inner).is_some_and(|c| c.nulls == Some(0)),
            Expr::IsNotNull(inner) => self
                .column(inner)
                .is_some_and(|c| c.nulls == Some(self.rows)),
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => match (literal(low), literal(high), self.column(expr)) {
                (Some(lo), Some(hi), Some(c)) => {
                    holds_none(c, Operator::GtEq, lo) || holds_none(c, Operator::LtEq, hi)
                }
                _ => false,
            },
            Expr::InList(list) if !list.negated => match self.column(&list.expr) {
                Some(c) => list.list.iter().all(|v| match literal(v) {
                    Some(v) => holds_none(c, Operator::Eq, v) || c.partition_excludes(v),
                    None => matches!(v, Expr::Literal(s, _) if s.is_null()),
                }),
                None => false,
            },
            _ => false,
        }
    }
}

/// `column op value` from `left op right` (either side the column), with a non-NULL literal.
fn comparison<'a>(
    left: &'a Expr,
    op: Operator,
    right: &'a Expr,
) -> Option<(&'a Expr, Operator, &'a ScalarValue)> {
    let flip = |op: Operator| match op {
        Operator::Lt => Some(Operator::Gt),
        Operator::LtEq => Some(Operator::GtEq),
        Operator::Gt => Some(Operator::Lt),
        Operator::GtEq => Some(Operator::LtEq),
        Operator::Eq | Operator::NotEq => Some(op),
        _ => None,
    };
    flip(op)?;
    match (left, right) {
        (Expr::Column(_), r) => literal(r).map(|v| (left, op, v)),
        (l, Expr::Column(_)) => literal(l).and_then(|v| flip(op).map(|op| (right, op, v))),
        _ => None,
    }
}

fn literal(e: &Expr) -> Option<&ScalarValue> {
    match e {
        Expr::Literal(v, _) if !v.is_null() => Some(v),
        _ => None,
    }
}

fn cmp(a: &ScalarValue, b: &ScalarValue) -> Option<Ordering> {
    a.partial_cmp(b)
}

/// Whether `value op v` is TRUE for every non-NULL value of the column.
fn holds_all(c: &ColumnFacts, op: Operator, v: &ScalarValue) -> bool {
    let (Some(lo), Some(hi)) = (&c.lower, &c.upper) else {
        return false;
    };
    match op {
        Operator::Lt => cmp(hi, v) == Some(Ordering::Less),
        Operator::LtEq => matches!(cmp(hi, v), Some(Ordering::Less | Ordering::Equal)),
        Operator::Gt => cmp(lo, v) == Some(Ordering::Greater),
        Operator::GtEq => matches!(cmp(lo, v), Some(Ordering::Greater | Ordering::Equal)),
        Operator::Eq => {
            c.exact && cmp(lo, v) == Some(Ordering::Equal) && cmp(hi, v) == Some(Ordering::Equal)
        }
        Operator::NotEq => {
            cmp(hi, v) == Some(Ordering::Less) || cmp(lo, v) == Some(Ordering::Greater)
        }
        _ => false,
    }
}

/// Whether `value op v` is TRUE for no value of the column (NULL and NaN rows never match a
/// comparison with a non-NaN literal except `!=`, which NaN rows do match).
fn holds_none(c: &ColumnFacts, op: Operator, v: &ScalarValue) -> bool {
    let (Some(lo), Some(hi)) = (&c.lower, &c.upper) else {
        return false;
    };
    // NaN sorts above every value in DataFusion's comparisons: a NaN row may match `>`.
    let nan_safe = c.no_nan;
    match op {
        Operator::Lt => matches!(cmp(lo, v), Some(Ordering::Greater | Ordering::Equal)),
        Operator::LtEq => cmp(lo, v) == Some(Ordering::Greater),
        Operator::Gt => nan_safe && matches!(cmp(hi, v), Some(Ordering::Less | Ordering::Equal)),
        Operator::GtEq => nan_safe && cmp(hi, v) == Some(Ordering::Less),
        Operator::Eq => cmp(hi, v) == Some(Ordering::Less) || cmp(lo, v) == Some(Ordering::Greater),
        Operator::NotEq => {
            nan_safe
                && c.exact
                && cmp(lo, v) == Some(Ordering::Equal)
                && cmp(hi, v) == Some(Ordering::Equal)
        }
        _ => false,
    }
}

/// The Arrow-typed value of a bound, in the type DataFusion gives the column.
fn scalar(d: &Datum, ty: &PrimitiveType) -> Option<ScalarValue> {
    if d.data_type() != ty {
        // A bound written before a type promotion: not comparable as is.
        return None;
    }
    literal_scalar(ty, d.literal())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::prelude::{col, lit};
    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, NestedField, Struct, UnboundPartitionSpec,
    };

    use super::*;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "ts", Type::Primitive(PrimitiveType::Timestamp)).into(),
                NestedField::optional(3, "s", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(4, "n", Type::Primitive(PrimitiveType::Int)).into(),
            ])
            .build()
            .unwrap()
    }

    /// A file without column statistics in partition (bucket(4, id), day(ts), truncate(2, s),
    /// truncate(10, n)) = `values`.
    fn stats(values: Vec<Option<Literal>>) -> FileStats {
        let schema = Arc::new(schema());
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "id_bucket", Transform::Bucket(4))
            .unwrap()
            .add_partition_field(2, "ts_day", Transform::Day)
            .unwrap()
            .add_partition_field(3, "s_trunc", Transform::Truncate(2))
            .unwrap()
            .add_partition_field(4, "n_trunc", Transform::Truncate(10))
            .unwrap()
            .build()
            .bind(Arc::clone(&schema))
            .unwrap();
        let file = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("f.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::from_iter(values))
            .partition_spec_id(0)
            .record_count(10)
            .file_size_in_bytes(100)
            .build()
            .unwrap();
        let columns: Vec<String> = ["id", "ts", "s", "n"].map(String::from).to_vec();
        FileStats::of(&file, &spec, &schema, &columns)
    }

    #[test]
    fn partition_transforms_prune_without_column_bounds() {
        let bucket_of_34 = super::super::transforms::bucket_of(
            &PrimitiveType::Long,
            4,
            &ScalarValue::Int64(Some(34)),
        )
        .unwrap();
        let f = stats(vec![
            Some(Literal::int(bucket_of_34)),
            Some(Literal::int(20_000)),
            Some(Literal::string("ab")),
            Some(Literal::int(20)),
        ]);
        let day = 20_000i64 * 86_400_000_000;
        let ts = |micros: i64| lit(ScalarValue::TimestampMicrosecond(Some(micros), None));
        // bucket: only values of the file's bucket may match.
        assert!(!f.none_match(&[col("id").eq(lit(34i64))]));
        let other = (0..100i64)
            .find(|v| {
                super::super::transforms::bucket_of(
                    &PrimitiveType::Long,
                    4,
                    &ScalarValue::Int64(Some(*v)),
                ) != Some(bucket_of_34)
            })
            .unwrap();
        assert!(f.none_match(&[col("id").eq(lit(other))]));
        assert!(f.none_match(&[col("id").in_list(vec![lit(other)], false)]));
        // day: the file's rows are within its day.
        assert!(f.none_match(&[col("ts").lt(ts(day))]));
        assert!(!f.none_match(&[col("ts").lt(ts(day + 1))]));
        assert!(f.none_match(&[col("ts").gt_eq(ts(day + 86_400_000_000))]));
        assert!(!f.none_match(&[col("ts").gt(ts(day + 86_400_000_000 - 2))]));
        // truncate: strings start with the value, numbers are within its width.
        assert!(f.none_match(&[col("s").eq(lit("ac"))]));
        assert!(!f.none_match(&[col("s").eq(lit("abz"))]));
        assert!(f.none_match(&[col("s").like(lit("b%"))]));
        assert!(!f.none_match(&[col("s").like(lit("a%"))]));
        assert!(f.none_match(&[col("n").gt(lit(29i32))]));
        assert!(!f.none_match(&[col("n").gt(lit(28i32))]));
        // Nothing is proved of every row from a range.
        assert!(!f.all_match(&[col("n").eq(lit(20i32))]));
        // A NULL partition value: every row's source is NULL.
        let nulls = stats(vec![None, None, None, None]);
        assert!(nulls.none_match(&[col("id").eq(lit(34i64))]));
        assert!(nulls.none_match(&[col("ts").is_not_null()]));
        assert!(nulls.all_match(&[col("s").is_null()]));
    }
}
