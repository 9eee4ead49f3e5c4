//! Table definitions for DDL: schema conversion from Arrow, and the textual partitioning and
//! sort-order syntax (`day(ts), bucket(16, id)`, `id DESC NULLS LAST`).

use std::collections::HashMap;

use arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};
use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{
    FormatVersion, ListType, MapType, NestedField, NestedFieldRef, NullOrder, PrimitiveType,
    Schema, SortDirection, SortField, SortOrder, StructType, Transform, Type, UnboundPartitionSpec,
};
use iceberg::TableCreation;
use std::sync::Arc;

use crate::error::IcebergResultExt;

/// One partition field: a transform of a source column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionTerm {
    /// The transform (identity, bucket[N], truncate[W], year, month, day, hour, void).
    pub transform: Transform,
    /// The source column's name.
    pub column: String,
}

/// One sort key of a sort order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortTerm {
    /// The transform applied before sorting (usually identity).
    pub transform: Transform,
    /// The source column's name.
    pub column: String,
    /// Ascending or descending.
    pub direction: SortDirection,
    /// Where NULLs go.
    pub null_order: NullOrder,
}

/// Everything needed to create an Iceberg table, independent of SQL.
#[derive(Debug, Clone)]
pub struct TableDefinition {
    /// Columns (Arrow types are mapped to Iceberg types; field ids are assigned).
    pub schema: SchemaRef,
    /// Partition fields, in order.
    pub partitioning: Vec<PartitionTerm>,
    /// Sort order keys, in order.
    pub sort_order: Vec<SortTerm>,
    /// Table properties (`write.delete.mode`, `write.target-file-size-bytes`, ...).
    pub properties: HashMap<String, String>,
    /// Table location; the catalog's default when `None`.
    pub location: Option<String>,
    /// Format version (2 by default).
    pub format_version: FormatVersion,
}

impl TableDefinition {
    /// An unpartitioned, unsorted v2 table with these columns.
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            partitioning: vec![],
            sort_order: vec![],
            properties: HashMap::new(),
            location: None,
            format_version: FormatVersion::V2,
        }
    }

    /// Sets the partitioning from text, e.g. `"day(ts), bucket(16, id)"`.
    pub fn with_partitioning(mut self, text: &str) -> Result<Self> {
        self.partitioning = parse_partitioning(text)?;
        Ok(self)
    }

    /// Sets the sort order from text, e.g. `"id DESC NULLS LAST, name"`.
    pub fn with_sort_order(mut self, text: &str) -> Result<Self> {
        self.sort_order = parse_sort_order(text)?;
        Ok(self)
    }

    /// Adds a table property.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The Iceberg schema (fresh field ids) for these columns.
    pub fn iceberg_schema(&self) -> Result<Schema> {
        let fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| normalise_field(f, self.format_version))
            .collect::<Result<_>>()?;
        let arrow = ArrowSchema::new(fields);
        let schema = iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(
            &crate::arrow58::schema_to_58(&arrow)?,
        )
        .df()?;
        if !arrow.fields().iter().any(|f| has_uuid(f)) {
            return Ok(schema);
        }
        let Type::Struct(columns) = with_uuids(
            &DataType::Struct(arrow.fields().clone()),
            &Type::Struct(schema.as_struct().clone()),
        ) else {
            return Ok(schema);
        };
        Schema::builder()
            .with_schema_id(schema.schema_id())
            .with_fields(columns.fields().iter().cloned())
            .build()
            .df()
    }

    /// The creation request for the iceberg crate's metadata builder.
    pub fn to_creation(&self, name: &str) -> Result<TableCreation> {
        let schema = self.iceberg_schema()?;
        let field_id = |column: &str| -> Result<i32> {
            schema
                .field_by_name(column)
                .map(|f| f.id)
                .ok_or_else(|| DataFusionError::Plan(format!("unknown column '{column}'")))
        };
        let mut spec = UnboundPartitionSpec::builder();
        for term in &self.partitioning {
            let id = field_id(&term.column)?;
            let is_uuid = schema
                .field_by_id(id)
                .is_some_and(|f| matches!(*f.field_type, Type::Primitive(PrimitiveType::Uuid)));
            if is_uuid && term.transform == Transform::Identity {
                return Err(DataFusionError::NotImplemented(format!(
                    "partitioning by identity({}): uuid partition values cannot be written yet; \
                     use bucket(N, {})",
                    term.column, term.column
                )));
            }
            spec = spec
                .add_partition_field(id, partition_field_name(term), term.transform)
                .df()?;
        }
        let mut order = SortOrder::builder();
        if !self.sort_order.is_empty() {
            order.with_order_id(1);
        }
        for term in &self.sort_order {
            order.with_sort_field(SortField {
                source_id: field_id(&term.column)?,
                transform: term.transform,
                direction: term.direction,
                null_order: term.null_order,
            });
        }
        let order = order.build(&schema).df()?;
        let mut properties = self.properties.clone();
        properties
            .entry("write.parquet.compression-codec".to_string())
            .or_insert_with(|| "zstd".to_string());
        Ok(TableCreation::builder()
            .name(name.to_string())
            .location_opt(self.location.clone())
            .schema(schema)
            .partition_spec(spec.build())
            .sort_order(order)
            .properties(properties)
            .format_version(self.format_version)
            .build())
    }
}

/// The partition field name other engines use for a transform of a column.
pub(crate) fn partition_field_name(term: &PartitionTerm) -> String {
    let c = &term.column;
    match term.transform {
        Transform::Identity => c.clone(),
        Transform::Bucket(_) => format!("{c}_bucket"),
        Transform::Truncate(_) => format!("{c}_trunc"),
        Transform::Year => format!("{c}_year"),
        Transform::Month => format!("{c}_month"),
        Transform::Day => format!("{c}_day"),
        Transform::Hour => format!("{c}_hour"),
        Transform::Void | Transform::Unknown => format!("{c}_null"),
    }
}

/// Maps Arrow types DataFusion produces onto the ones Iceberg has.
fn normalise_field(f: &Field, version: FormatVersion) -> Result<Field> {
    let t = match f.data_type() {
        DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => DataType::Int32,
        DataType::UInt32 => DataType::Int64,
        DataType::UInt64 => {
            return Err(DataFusionError::Plan(format!(
                "column '{}': unsigned 64-bit integers have no Iceberg type; use BIGINT or DECIMAL(20, 0)",
                f.name()
            )))
        }
        DataType::Float16 => DataType::Float32,
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        DataType::Date64 => DataType::Date32,
        DataType::Time32(_) | DataType::Time64(_) => DataType::Time64(TimeUnit::Microsecond),
        DataType::Timestamp(unit, tz) => {
            let unit = match (unit, version) {
                (TimeUnit::Nanosecond, FormatVersion::V3) => TimeUnit::Nanosecond,
                _ => TimeUnit::Microsecond,
            };
            // Iceberg has "timestamp" and "timestamptz" (stored as UTC).
            DataType::Timestamp(unit, tz.as_ref().map(|_| "+00:00".into()))
        }
        DataType::Struct(children) => DataType::Struct(
            children
                .iter()
                .map(|c| normalise_field(c, version).map(std::sync::Arc::new))
                .collect::<Result<_>>()?,
        ),
        DataType::List(c) | DataType::LargeList(c) | DataType::ListView(c) => {
            DataType::List(std::sync::Arc::new(normalise_field(c, version)?))
        }
        other => other.clone(),
    };
    let normalised = Field::new(f.name(), t, f.is_nullable());
    Ok(if crate::uuid_type::is_uuid(f) {
        crate::uuid_type::uuid_field(normalised)
    } else {
        normalised
    })
}

/// `t` (converted from `arrow` by the iceberg crate, which knows no extension types) with the
/// fields Arrow marks `arrow.uuid` as Iceberg uuids.
fn with_uuids(arrow: &DataType, t: &Type) -> Type {
    let field = |a: &Field, f: &NestedFieldRef| -> NestedFieldRef {
        let field_type = if crate::uuid_type::is_uuid(a) {
            Type::Primitive(PrimitiveType::Uuid)
        } else {
            with_uuids(a.data_type(), &f.field_type)
        };
        Arc::new(NestedField {
            field_type: Box::new(field_type),
            ..f.as_ref().clone()
        })
    };
    match (arrow, t) {
        (DataType::Struct(children), Type::Struct(st)) if children.len() == st.fields().len() => {
            Type::Struct(StructType::new(
                children
                    .iter()
                    .zip(st.fields())
                    .map(|(a, f)| field(a, f))
                    .collect(),
            ))
        }
        (DataType::List(c), Type::List(l)) => Type::List(ListType {
            element_field: field(c, &l.element_field),
        }),
        (DataType::Map(entries, _), Type::Map(m)) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => Type::Map(MapType {
                key_field: field(&kv[0], &m.key_field),
                value_field: field(&kv[1], &m.value_field),
            }),
            _ => t.clone(),
        },
        _ => t.clone(),
    }
}

fn has_uuid(f: &Field) -> bool {
    crate::uuid_type::is_uuid(f)
        || match f.data_type() {
            DataType::Struct(children) => children.iter().any(|c| has_uuid(c)),
            DataType::List(c) | DataType::Map(c, _) => has_uuid(c),
            _ => false,
        }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<String> {
    let mut parts = vec![];
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in text.chars() {
        match ch {
            '(' => {
                depth += 1;
                cur.push(ch)
            }
            ')' => {
                depth -= 1;
                cur.push(ch)
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(ch),
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
        s[1..s.len() - 1].to_string()
    } else {
        s.to_string()
    }
}

/// Parses one transform term: `col`, `identity(col)`, `bucket(16, col)`, `truncate(4, col)`,
/// `year(col)`/`years(col)`, `month(col)`, `day(col)`, `hour(col)`, `void(col)`.
fn parse_term(term: &str) -> Result<(Transform, String)> {
    let bad = |why: &str| DataFusionError::Plan(format!("invalid transform '{term}': {why}"));
    let Some(open) = term.find('(') else {
        return Ok((Transform::Identity, unquote(term)));
    };
    if !term.ends_with(')') {
        return Err(bad("missing ')'"));
    }
    let func = term[..open].trim().to_ascii_lowercase();
    let args: Vec<String> = split_top_level(&term[open + 1..term.len() - 1]);
    let one_arg = |args: &[String]| -> Result<String> {
        match args {
            [c] => Ok(unquote(c)),
            _ => Err(bad("expected one column")),
        }
    };
    let width_and_col = |args: &[String]| -> Result<(u32, String)> {
        match args {
            [n, c] => Ok((
                n.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("expected a positive integer width"))?,
                unquote(c),
            )),
            _ => Err(bad("expected (<width>, <column>)")),
        }
    };
    Ok(match func.as_str() {
        "identity" => (Transform::Identity, one_arg(&args)?),
        "bucket" => {
            let (n, c) = width_and_col(&args)?;
            (Transform::Bucket(n), c)
        }
        "truncate" => {
            let (n, c) = width_and_col(&args)?;
            (Transform::Truncate(n), c)
        }
        "year" | "years" => (Transform::Year, one_arg(&args)?),
        "month" | "months" => (Transform::Month, one_arg(&args)?),
        "day" | "days" => (Transform::Day, one_arg(&args)?),
        "hour" | "hours" => (Transform::Hour, one_arg(&args)?),
        "void" => (Transform::Void, one_arg(&args)?),
        other => return Err(bad(&format!("unknown transform '{other}'"))),
    })
}

/// Parses a partitioning list such as `"day(ts), bucket(16, id), region"`.
pub fn parse_partitioning(text: &str) -> Result<Vec<PartitionTerm>> {
    split_top_level(text)
        .iter()
        .map(|t| parse_term(t).map(|(transform, column)| PartitionTerm { transform, column }))
        .collect()
}

/// Parses a sort order such as `"id DESC NULLS LAST, day(ts)"`. Defaults follow SQL: ASC, and
/// NULLS FIRST for ASC / NULLS LAST for DESC.
pub fn parse_sort_order(text: &str) -> Result<Vec<SortTerm>> {
    let mut terms = vec![];
    for part in split_top_level(text) {
        let upper = part.to_ascii_uppercase();
        let mut expr = part.as_str();
        let mut null_order = None;
        for (suffix, order) in [
            (" NULLS FIRST", NullOrder::First),
            (" NULLS LAST", NullOrder::Last),
        ] {
            if upper.ends_with(suffix) {
                expr = &expr[..expr.len() - suffix.len()];
                null_order = Some(order);
                break;
            }
        }
        let upper_expr = expr.to_ascii_uppercase();
        let mut direction = SortDirection::Ascending;
        for (suffix, dir) in [
            (" ASC", SortDirection::Ascending),
            (" DESC", SortDirection::Descending),
        ] {
            if upper_expr.ends_with(suffix) {
                expr = &expr[..expr.len() - suffix.len()];
                direction = dir;
                break;
            }
        }
        let (transform, column) = parse_term(expr.trim())?;
        let null_order = null_order.unwrap_or(match direction {
            SortDirection::Ascending => NullOrder::First,
            SortDirection::Descending => NullOrder::Last,
        });
        terms.push(SortTerm {
            transform,
            column,
            direction,
            null_order,
        });
    }
    Ok(terms)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn partitioning_terms() {
        let p =
            parse_partitioning("day(ts), bucket(16, id), region, truncate(4, \"Name\")").unwrap();
        assert_eq!(
            p[0],
            PartitionTerm {
                transform: Transform::Day,
                column: "ts".into()
            }
        );
        assert_eq!(
            p[1],
            PartitionTerm {
                transform: Transform::Bucket(16),
                column: "id".into()
            }
        );
        assert_eq!(
            p[2],
            PartitionTerm {
                transform: Transform::Identity,
                column: "region".into()
            }
        );
        assert_eq!(
            p[3],
            PartitionTerm {
                transform: Transform::Truncate(4),
                column: "Name".into()
            }
        );
        assert!(parse_partitioning("bucket(x, id)").is_err());
        assert!(parse_partitioning("bucket(0, id)").is_err());
        assert!(parse_partitioning("frobnicate(id)")
            .unwrap_err()
            .to_string()
            .contains("unknown transform"));
    }

    #[test]
    fn sort_terms() {
        let s = parse_sort_order("id DESC, name asc nulls last, day(ts)").unwrap();
        assert_eq!(s[0].direction, SortDirection::Descending);
        assert_eq!(s[0].null_order, NullOrder::Last);
        assert_eq!(s[1].column, "name");
        assert_eq!(s[1].null_order, NullOrder::Last);
        assert_eq!(s[2].transform, Transform::Day);
        assert_eq!(s[2].null_order, NullOrder::First);
    }

    #[test]
    fn definition_to_creation_assigns_ids_and_names() {
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
            Field::new("name", DataType::Utf8View, true),
        ]));
        let def = TableDefinition::new(schema)
            .with_partitioning("day(ts), bucket(4, id)")
            .unwrap()
            .with_sort_order("name DESC")
            .unwrap();
        let c = def.to_creation("t").unwrap();
        let ts = c.schema.field_by_name("ts").unwrap();
        assert_eq!(ts.field_type.to_string(), "timestamp");
        let spec = c.partition_spec.unwrap();
        let names: Vec<&str> = spec.fields().iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["ts_day", "id_bucket"]);
        let order = c.sort_order.unwrap();
        assert_eq!(order.order_id, 1);
        assert_eq!(
            order.fields[0].source_id,
            c.schema.field_by_name("name").unwrap().id
        );
        let bad = TableDefinition::new(Arc::new(ArrowSchema::new(vec![Field::new(
            "a",
            DataType::Int32,
            true,
        )])))
        .with_partitioning("day(zz)")
        .unwrap()
        .to_creation("t")
        .unwrap_err();
        assert!(bad.to_string().contains("unknown column 'zz'"), "{bad}");
    }
}
