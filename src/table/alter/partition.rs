//! Partition evolution and write order: `ADD | DROP | REPLACE PARTITION FIELD` make a new
//! partition spec that becomes the default (files written before keep theirs and are pruned by
//! it); `WRITE [LOCALLY] ORDERED BY | UNORDERED | DISTRIBUTED BY PARTITION` set the sort order
//! and `write.distribution-mode`.
//!
//! The rules are Java's `BaseUpdatePartitionSpec`: a field the spec has already, or a time
//! transform of a column another time transform already partitions by (`day(ts)` beside
//! `hour(ts)`), is refused; new fields are named as Java names them (`id_bucket_16`,
//! `s_trunc_4`, `ts_day`, a column's own name for identity); on format v2 and later a field
//! added again gets the field id it had in an older spec, and a dropped field leaves the spec;
//! on v1 a dropped field stays as a `void` transform (v1 specs keep their fields' ids in
//! order).

use std::collections::HashMap;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{
    FormatVersion, NullOrder, SortDirection, SortField, SortOrder, TableMetadata, Transform, Type,
    UnboundPartitionField, UnboundPartitionSpec,
};

/// A partition transform of a column, as written (`bucket(16, id)`, `days(ts)`, `region`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Term {
    pub transform: Transform,
    /// The source column's path.
    pub column: Vec<String>,
}

impl std::fmt::Display for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let column = self.column.join(".");
        match self.transform {
            Transform::Identity => write!(f, "{column}"),
            Transform::Bucket(n) => write!(f, "bucket({n}, {column})"),
            Transform::Truncate(w) => write!(f, "truncate({w}, {column})"),
            other => write!(f, "{other}({column})"),
        }
    }
}

/// How a partition field is named in `DROP` / `REPLACE PARTITION FIELD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldName {
    /// A bare name: the partition field of that name, else the identity transform of the column.
    Name(String),
    /// A transform of a column.
    Term(Term),
}

/// One change of the partition spec.
#[derive(Debug, Clone)]
pub(crate) enum PartitionChange {
    Add {
        term: Term,
        name: Option<String>,
    },
    Drop(FieldName),
    Replace {
        field: FieldName,
        with: Term,
        name: Option<String>,
    },
}

/// A sort key of `WRITE ORDERED BY`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SortKey {
    pub term: Term,
    pub direction: SortDirection,
    pub null_order: NullOrder,
}

/// `WRITE ...`: the sort order (`None` keeps it) and the distribution mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteOrder {
    /// `Some(vec![])` for `UNORDERED`.
    pub order: Option<Vec<SortKey>>,
    /// `range`, `none` or `hash` (`write.distribution-mode`).
    pub distribution: &'static str,
}

fn refused(what: String) -> DataFusionError {
    DataFusionError::Plan(what)
}

/// The field id and type of the column `path`.
fn source(metadata: &TableMetadata, term: &Term) -> Result<(i32, Type)> {
    let name = term.column.join(".");
    let field = metadata
        .current_schema()
        .field_by_name(&name)
        .ok_or_else(|| refused(format!("no column '{name}' in the table")))?;
    let t = field.field_type.as_ref().clone();
    if !matches!(t, Type::Primitive(_)) {
        return Err(refused(format!(
            "cannot partition or sort by '{name}': it is not a primitive column"
        )));
    }
    term.transform.result_type(&t).map_err(|_| {
        refused(format!(
            "{term} does not apply to column '{name}' of type {t}"
        ))
    })?;
    Ok((field.id, t))
}

/// The name Java gives a new partition field.
fn default_name(term: &Term) -> String {
    let c = term.column.join("_");
    match term.transform {
        Transform::Identity => term.column.join("."),
        Transform::Bucket(n) => format!("{c}_bucket_{n}"),
        Transform::Truncate(w) => format!("{c}_trunc_{w}"),
        Transform::Year => format!("{c}_year"),
        Transform::Month => format!("{c}_month"),
        Transform::Day => format!("{c}_day"),
        Transform::Hour => format!("{c}_hour"),
        Transform::Void | Transform::Unknown => format!("{c}_null"),
    }
}

fn is_time(t: Transform) -> bool {
    matches!(
        t,
        Transform::Year | Transform::Month | Transform::Day | Transform::Hour
    )
}

/// The partition spec `changes` make of `metadata`'s default one.
pub(crate) fn evolve(
    metadata: &TableMetadata,
    changes: &[PartitionChange],
) -> Result<UnboundPartitionSpec> {
    let v1 = metadata.format_version() == FormatVersion::V1;
    let mut fields: Vec<UnboundPartitionField> = metadata
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| UnboundPartitionField {
            source_id: f.source_id,
            field_id: Some(f.field_id),
            name: f.name.clone(),
            transform: f.transform,
        })
        .collect();
    // Field ids of (source, transform) in every spec the table has had (reused from v2 on).
    let mut known: HashMap<(i32, Transform), i32> = HashMap::new();
    for spec in metadata.partition_specs_iter() {
        for f in spec.fields() {
            known.insert((f.source_id, f.transform), f.field_id);
        }
    }
    let mut last_id = metadata.last_partition_id();
    for change in changes {
        match change {
            PartitionChange::Add { term, name } => {
                add(metadata, &mut fields, &known, &mut last_id, v1, term, name)?
            }
            PartitionChange::Drop(field) => drop(metadata, &mut fields, v1, field)?,
            PartitionChange::Replace { field, with, name } => {
                drop(metadata, &mut fields, v1, field)?;
                add(metadata, &mut fields, &known, &mut last_id, v1, with, name)?;
            }
        }
    }
    Ok(UnboundPartitionSpec::builder()
        .add_partition_fields(fields)
        .map_err(|e| refused(format!("the new partition spec is not valid: {e}")))?
        .build())
}

#[allow(clippy::too_many_arguments)]
fn add(
    metadata: &TableMetadata,
    fields: &mut Vec<UnboundPartitionField>,
    known: &HashMap<(i32, Transform), i32>,
    last_id: &mut i32,
    v1: bool,
    term: &Term,
    name: &Option<String>,
) -> Result<()> {
    let (source_id, _) = source(metadata, term)?;
    let live = |f: &&UnboundPartitionField| f.transform != Transform::Void;
    if let Some(same) = fields
        .iter()
        .filter(live)
        .find(|f| f.source_id == source_id && f.transform == term.transform)
    {
        return Err(refused(format!(
            "cannot add partition field {term}: the spec has it already (as '{}')",
            same.name
        )));
    }
    if let Some(other) = fields
        .iter()
        .filter(live)
        .find(|f| f.source_id == source_id && is_time(f.transform) && is_time(term.transform))
    {
        return Err(refused(format!(
            "cannot add partition field {term}: it is redundant with '{}' ({}) on the same \
             column",
            other.name, other.transform
        )));
    }
    let name = name.clone().unwrap_or_else(|| default_name(term));
    if let Some(at) = fields.iter().position(|f| f.name == name) {
        match (v1, fields[at].transform) {
            // A v1 field dropped earlier keeps its place as void: it gives up the name.
            (true, Transform::Void) => {
                let id = fields[at].field_id.unwrap_or_default();
                fields[at].name = format!("{name}_{id}");
            }
            _ => {
                return Err(refused(format!(
                    "cannot add partition field '{name}': the spec has a field of that name"
                )))
            }
        }
    }
    let schema_field = metadata.current_schema().field_by_name(&name);
    if schema_field.is_some_and(|f| f.id != source_id || term.transform != Transform::Identity) {
        return Err(refused(format!(
            "cannot add partition field '{name}': a column has that name (give the field \
             another with AS)"
        )));
    }
    let field_id = match known.get(&(source_id, term.transform)) {
        Some(id) if !v1 => *id,
        _ => {
            *last_id += 1;
            *last_id
        }
    };
    fields.push(UnboundPartitionField {
        source_id,
        field_id: Some(field_id),
        name,
        transform: term.transform,
    });
    Ok(())
}

fn drop(
    metadata: &TableMetadata,
    fields: &mut Vec<UnboundPartitionField>,
    v1: bool,
    field: &FieldName,
) -> Result<()> {
    let live = |f: &UnboundPartitionField| f.transform != Transform::Void;
    let at = match field {
        FieldName::Name(name) => fields.iter().position(|f| live(f) && f.name == *name),
        FieldName::Term(_) => None,
    };
    let at = match (at, field) {
        (Some(at), _) => at,
        (None, FieldName::Name(name)) => {
            let term = Term {
                transform: Transform::Identity,
                column: vec![name.clone()],
            };
            find_term(metadata, fields, &term)?
                .ok_or_else(|| refused(format!("the partition spec has no field '{name}'")))?
        }
        (None, FieldName::Term(term)) => find_term(metadata, fields, term)?
            .ok_or_else(|| refused(format!("the partition spec has no field {term}")))?,
    };
    match v1 {
        true => fields[at].transform = Transform::Void,
        false => {
            fields.remove(at);
        }
    }
    Ok(())
}

fn find_term(
    metadata: &TableMetadata,
    fields: &[UnboundPartitionField],
    term: &Term,
) -> Result<Option<usize>> {
    let name = term.column.join(".");
    let Some(column) = metadata.current_schema().field_by_name(&name) else {
        return Ok(None);
    };
    Ok(fields.iter().position(|f| {
        f.transform != Transform::Void && f.source_id == column.id && f.transform == term.transform
    }))
}

/// The sort order of `keys` (the unsorted order for none).
pub(crate) fn sort_order(metadata: &TableMetadata, keys: &[SortKey]) -> Result<SortOrder> {
    if keys.is_empty() {
        return Ok(SortOrder::unsorted_order());
    }
    let mut order = SortOrder::builder();
    order.with_order_id(1);
    for key in keys {
        let (source_id, _) = source(metadata, &key.term)?;
        order.with_sort_field(SortField {
            source_id,
            transform: key.term.transform,
            direction: key.direction,
            null_order: key.null_order,
        });
    }
    order
        .build(metadata.current_schema())
        .map_err(|e| refused(format!("the sort order is not valid: {e}")))
}
