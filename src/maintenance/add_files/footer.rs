//! One parquet file as a table may take it: its columns' field ids (its own, else the table's
//! name mapping), whether each can be read as the table's column of that id, and its
//! description (counts, sizes, bounds) from its footer alone.

use std::collections::HashMap;

use arrow::datatypes::{DataType, Field};
use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{MappedField, NameMapping, NestedField, Schema, Type};
use parquet::file::metadata::ParquetMetaData;
use parquet::schema::types::ColumnDescriptor;

/// The table's name mapping (`schema.name-mapping.default`), or one made from its schema: every
/// field by its current name.
pub(super) fn name_mapping(
    schema: &Schema,
    properties: &HashMap<String, String>,
) -> Result<(NameMapping, bool)> {
    if let Some(json) = properties.get(iceberg::spec::DEFAULT_SCHEMA_NAME_MAPPING) {
        let mapping = serde_json::from_str::<NameMapping>(json).map_err(|e| {
            DataFusionError::Plan(format!(
                "the table's {} is not a name mapping: {e}",
                iceberg::spec::DEFAULT_SCHEMA_NAME_MAPPING
            ))
        })?;
        return Ok((mapping, false));
    }
    fn mapped(field: &NestedField) -> MappedField {
        let children = match field.field_type.as_ref() {
            Type::Struct(s) => s.fields().iter().map(|f| mapped(f)).collect(),
            Type::List(l) => vec![mapped(&l.element_field)],
            Type::Map(m) => vec![mapped(&m.key_field), mapped(&m.value_field)],
            Type::Primitive(_) => vec![],
        };
        MappedField::new(Some(field.id), vec![field.name.clone()], children)
    }
    let fields = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| mapped(f))
        .collect();
    Ok((NameMapping::new(fields), true))
}

/// The field id of a column path (`a`, `s.x`, `l.list.element`, `m.key_value.key`) through a
/// name mapping.
fn mapped_id(mapping: &NameMapping, path: &[String]) -> Option<i32> {
    let mut level: Vec<&MappedField> = mapping.fields().iter().collect();
    let mut id = None;
    let mut parts = path.iter().peekable();
    while let Some(part) = parts.next() {
        // Parquet's list and map groups have a level the mapping does not name.
        if (part == "list" || part == "key_value") && id.is_some() {
            continue;
        }
        let field = level.iter().find(|f| f.names().iter().any(|n| n == part))?;
        id = field.field_id();
        level = field.fields().iter().map(|f| f.as_ref()).collect();
        if parts.peek().is_none() {
            return id;
        }
    }
    None
}

/// How a file's columns get their field ids.
pub(super) enum Ids<'a> {
    /// The file's own (it has some).
    Embedded,
    /// The table's name mapping.
    Mapped(&'a NameMapping),
}

impl<'a> Ids<'a> {
    /// The way `metadata`'s file gets ids: its own when any column has one.
    pub(super) fn of(metadata: &ParquetMetaData, mapping: &'a NameMapping) -> Self {
        match carries_ids(metadata) {
            true => Self::Embedded,
            false => Self::Mapped(mapping),
        }
    }

    /// The field id of a leaf column.
    pub(super) fn leaf(&self, column: &ColumnDescriptor) -> Option<i32> {
        match self {
            Self::Embedded => embedded(column),
            Self::Mapped(m) => {
                let path: Vec<String> = column.path().parts().to_vec();
                mapped_id(m, &path)
            }
        }
    }

    /// The field id of a top-level Arrow field of the file.
    fn top(&self, field: &Field) -> Option<i32> {
        match self {
            Self::Embedded => crate::physical_plan::parquet_files::field_id(field),
            Self::Mapped(m) => m
                .fields()
                .iter()
                .find(|f| f.names().iter().any(|n| n == field.name()))
                .and_then(|f| f.field_id()),
        }
    }
}

/// Whether a file carries Iceberg field ids (any column, at any depth).
pub(super) fn carries_ids(metadata: &ParquetMetaData) -> bool {
    let schema = metadata.file_metadata().schema_descr();
    schema.columns().iter().any(|c| embedded(c).is_some())
        || schema
            .root_schema()
            .get_fields()
            .iter()
            .any(|f| f.get_basic_info().has_id())
}

/// The refusal of a file with field ids where the table's columns are matched by name: readers
/// would match its columns by those ids, not the table's.
pub(super) fn carries_ids_refused(location: &str) -> String {
    format!(
        "{location} carries Iceberg field ids (it was written for an Iceberg table): register \
         that table with register_table, or add the files to a table with those ids with \
         add_files"
    )
}

fn embedded(column: &ColumnDescriptor) -> Option<i32> {
    crate::physical_plan::write::column_metrics::embedded_id(column)
}

/// Fails unless every column of the file (by id) reads as the table's column of that id, and
/// every required column of the table is in the file or given (`given`: the identity partition
/// columns, filled from the path, and columns with an `initial-default`).
pub(super) fn check_schema(
    location: &str,
    metadata: &ParquetMetaData,
    ids: &Ids<'_>,
    table: &Schema,
    table_arrow: &arrow::datatypes::Schema,
    given: &[i32],
) -> Result<()> {
    let file = parquet::arrow::parquet_to_arrow_schema(
        metadata.file_metadata().schema_descr(),
        metadata.file_metadata().key_value_metadata(),
    )
    .map_err(|e| DataFusionError::Plan(format!("add_files: {location}: {e}")))?;
    let mut found = vec![];
    for field in file.fields() {
        let Some(id) = ids.top(field) else { continue };
        let Some(column) = table.as_struct().fields().iter().position(|f| f.id == id) else {
            continue;
        };
        let expected = table_arrow.field(column);
        if !readable_as(field.data_type(), expected.data_type()) {
            return Err(DataFusionError::Plan(format!(
                "add_files: {location}: column '{}' ({}) cannot be read as the table's column \
                 '{}' ({}); nothing was added",
                field.name(),
                field.data_type(),
                expected.name(),
                expected.data_type()
            )));
        }
        found.push(id);
    }
    for f in table.as_struct().fields() {
        let present = found.contains(&f.id) || given.contains(&f.id) || f.initial_default.is_some();
        if f.required && !present {
            return Err(DataFusionError::Plan(format!(
                "add_files: {location} has no column for the table's required column '{}'; \
                 nothing was added",
                f.name
            )));
        }
    }
    Ok(())
}

/// Whether values of the file's type `file` read as the table's type `table`: the same type,
/// or a promotion Iceberg allows (int to long, float to double, a wider decimal), across
/// Arrow's encodings of one Iceberg type (string views, dictionaries, timestamp units).
pub(super) fn readable_as(file: &DataType, table: &DataType) -> bool {
    use DataType::*;
    let text = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    let bytes = |t: &DataType| matches!(t, Binary | LargeBinary | BinaryView | FixedSizeBinary(_));
    let list = |t: &DataType| match t {
        List(f) | LargeList(f) | ListView(f) | LargeListView(f) | FixedSizeList(f, _) => {
            Some(f.data_type().clone())
        }
        _ => None,
    };
    match (file, table) {
        (a, b) if a == b => true,
        (Dictionary(_, v), t) => readable_as(v, t),
        (Int8 | Int16 | Int32 | UInt8 | UInt16, Int32 | Int64) => true,
        (Int64 | UInt32, Int64) => true,
        (Float16 | Float32, Float32 | Float64) | (Float64, Float64) => true,
        (Decimal128(p1, s1), Decimal128(p2, s2)) => s1 == s2 && p1 <= p2,
        (a, b) if text(a) && text(b) => true,
        (FixedSizeBinary(a), FixedSizeBinary(b)) => a == b,
        (a, b) if bytes(a) && bytes(b) && !matches!(b, FixedSizeBinary(_)) => true,
        (Timestamp(_, a), Timestamp(_, b)) => a.is_some() == b.is_some(),
        (Date32, Date32) => true,
        (Time32(_) | Time64(_), Time64(_)) => true,
        (Struct(a), Struct(b)) => a.iter().all(|f| {
            b.iter()
                .find(|t| t.name() == f.name())
                .is_none_or(|t| readable_as(f.data_type(), t.data_type()))
        }),
        (Map(a, _), Map(b, _)) => readable_as(a.data_type(), b.data_type()),
        (a, b) => match (list(a), list(b)) {
            (Some(x), Some(y)) => readable_as(&x, &y),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::PrimitiveType;

    #[test]
    fn promotions_read_and_narrowings_do_not() {
        assert!(readable_as(&DataType::Int32, &DataType::Int64));
        assert!(readable_as(&DataType::Utf8View, &DataType::Utf8));
        assert!(readable_as(
            &DataType::Decimal128(9, 2),
            &DataType::Decimal128(18, 2)
        ));
        assert!(!readable_as(&DataType::Int64, &DataType::Int32));
        assert!(!readable_as(&DataType::Utf8, &DataType::Int64));
        assert!(!readable_as(
            &DataType::Decimal128(9, 2),
            &DataType::Decimal128(18, 3)
        ));
        assert!(!readable_as(&DataType::Float64, &DataType::Float32));
    }

    #[test]
    fn mapped_ids_follow_nested_paths() {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(
                    2,
                    "tags",
                    Type::List(iceberg::spec::ListType::new(
                        NestedField::list_element(3, Type::Primitive(PrimitiveType::String), false)
                            .into(),
                    )),
                )
                .into(),
            ])
            .build()
            .unwrap();
        let (mapping, made) = name_mapping(&schema, &HashMap::new()).unwrap();
        assert!(made);
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(mapped_id(&mapping, &path(&["id"])), Some(1));
        assert_eq!(
            mapped_id(&mapping, &path(&["tags", "list", "element"])),
            Some(3)
        );
        assert_eq!(mapped_id(&mapping, &path(&["other"])), None);
    }
}
