//! The manifests a file table's filters let it skip: by `content` (a data manifest holds data
//! files, a delete manifest delete files) and by comparisons of `partition.<field>` with a
//! constant (against the partition summaries of the manifest list). Filters it cannot use keep
//! every manifest; DataFusion applies them to the rows either way.

use std::cmp::Ordering;

use crate::physical_plan::scan::metadata::FileMetadataColumns;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use iceberg::spec::{Datum, ManifestContentType, ManifestFile, PrimitiveType, TableMetadata, Type};

/// What the filters say of the manifests to read.
#[derive(Debug, Clone, Default)]
pub(super) struct ManifestFilter {
    conditions: Vec<Condition>,
}

#[derive(Debug, Clone)]
enum Condition {
    /// `content` is one of these.
    Content(Vec<i64>),
    /// `partition.<field> <op> value`.
    Partition(String, Operator, ScalarValue),
    /// `partition.<field> IS NULL`.
    PartitionNull(String),
}

impl ManifestFilter {
    /// The conditions of `filters` (conjunctions split) it can use.
    pub(super) fn new(filters: &[Expr]) -> Self {
        let mut conditions = vec![];
        for f in filters {
            for c in datafusion::logical_expr::utils::split_conjunction(f) {
                conditions.extend(condition(c));
            }
        }
        Self { conditions }
    }

    /// Whether `manifest` may hold a row the filters keep. `columns`: the table's partition
    /// struct, which names each partition field id.
    pub(super) fn may_match(
        &self,
        metadata: &TableMetadata,
        columns: &FileMetadataColumns,
        manifest: &ManifestFile,
    ) -> bool {
        let id = |name: &str| columns.partition_field_id(name);
        self.conditions.iter().all(|c| match c {
            Condition::Content(values) => values.iter().any(|v| match manifest.content {
                ManifestContentType::Data => *v == 0,
                ManifestContentType::Deletes => *v == 1 || *v == 2,
            }),
            Condition::Partition(field, op, value) => match id(field) {
                Some(id) => partition_may_match(metadata, manifest, id, Some((*op, value))),
                None => true,
            },
            Condition::PartitionNull(field) => match id(field) {
                Some(id) => partition_may_match(metadata, manifest, id, None),
                None => true,
            },
        })
    }
}

/// The condition `e` is, when it is one this module uses.
fn condition(e: &Expr) -> Option<Condition> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, value, op) = match (left.as_ref(), right.as_ref()) {
                (c, Expr::Literal(v, _)) => (c, v, *op),
                (Expr::Literal(v, _), c) => (c, v, op.swap()?),
                _ => return None,
            };
            if value.is_null() {
                return None;
            }
            if is_column(column, "content") && op == Operator::Eq {
                return integer(value).map(|v| Condition::Content(vec![v]));
            }
            let field = partition_field(column)?;
            matches!(
                op,
                Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            )
            .then(|| Condition::Partition(field, op, value.clone()))
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr, "content") => list
            .list
            .iter()
            .map(|v| match v {
                Expr::Literal(v, _) => integer(v),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(Condition::Content),
        Expr::IsNull(inner) => partition_field(inner).map(Condition::PartitionNull),
        _ => None,
    }
}

fn is_column(e: &Expr, name: &str) -> bool {
    matches!(e, Expr::Column(c) if c.name == name)
}

fn integer(v: &ScalarValue) -> Option<i64> {
    v.cast_to(&arrow::datatypes::DataType::Int64)
        .ok()
        .and_then(|v| match v {
            ScalarValue::Int64(Some(i)) => Some(i),
            _ => None,
        })
}

/// `<field>` of `partition.<field>` (`get_field(partition, '<field>')`).
fn partition_field(e: &Expr) -> Option<String> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    if f.name() != "get_field" {
        return None;
    }
    match f.args.as_slice() {
        [base, Expr::Literal(ScalarValue::Utf8(Some(name)), _)] if is_column(base, "partition") => {
            Some(name.clone())
        }
        _ => None,
    }
}

/// Whether the partition summaries of `manifest` allow a value of the partition field
/// `field_id` with `op value` (or NULL, for `None`). A spec without the field holds NULL there.
fn partition_may_match(
    metadata: &TableMetadata,
    manifest: &ManifestFile,
    field_id: i32,
    compared: Option<(Operator, &ScalarValue)>,
) -> bool {
    let Some(spec) = metadata.partition_spec_by_id(manifest.partition_spec_id) else {
        return true;
    };
    let Some(at) = spec.fields().iter().position(|f| f.field_id == field_id) else {
        // Every file of this spec has NULL in the field: only IS NULL keeps it.
        return compared.is_none();
    };
    let Some(summary) = manifest.partitions.as_ref().and_then(|p| p.get(at)) else {
        return true;
    };
    let Some((op, value)) = compared else {
        return summary.contains_null;
    };
    let field = &spec.fields()[at];
    let source = metadata
        .schemas_iter()
        .find_map(|s| s.field_by_id(field.source_id))
        .map(|f| (*f.field_type).clone());
    let Some(Type::Primitive(ty)) = source.and_then(|t| field.transform.result_type(&t).ok())
    else {
        return true;
    };
    // NaN is outside the bounds, and above every number in DataFusion's order.
    if is_float(&ty) && summary.contains_nan != Some(false) {
        return true;
    }
    let bound = |b: Option<&[u8]>| -> Option<ScalarValue> {
        let d = Datum::try_from_bytes(b?, ty.clone()).ok()?;
        crate::file_planning::literal::literal_scalar(&ty, d.literal())
    };
    let lower = bound(summary.lower_bound.as_ref().map(|b| b.as_slice()));
    let upper = bound(summary.upper_bound.as_ref().map(|b| b.as_slice()));
    let (Some(lower), Some(upper)) = (lower, upper) else {
        // No bounds: only NULLs (or values without bounds) in the field.
        return summary.lower_bound.is_some() || summary.upper_bound.is_some() || is_float(&ty);
    };
    let Ok(value) = value.cast_to(&lower.data_type()) else {
        return true;
    };
    let (Some(low), Some(high)) = (value.partial_cmp(&lower), value.partial_cmp(&upper)) else {
        return true;
    };
    match op {
        Operator::Eq => low != Ordering::Less && high != Ordering::Greater,
        Operator::Lt => lower < value,
        Operator::LtEq => low != Ordering::Less,
        Operator::Gt => upper > value,
        Operator::GtEq => high != Ordering::Greater,
        _ => true,
    }
}

fn is_float(ty: &PrimitiveType) -> bool {
    matches!(ty, PrimitiveType::Float | PrimitiveType::Double)
}
