//! The Arrow schemas a scan reads an Iceberg schema as: what DataFusion sees (string views,
//! uuids marked, no field ids), and the variants a rewrite reads (plain strings, dictionaries).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::error::Result;

use crate::physical_plan::parquet_files::byte_dictionary_type;

/// The Arrow schema DataFusion sees for an Iceberg schema (no field-id metadata).
pub(crate) fn arrow_schema(schema: &iceberg::spec::Schema) -> Result<SchemaRef> {
    let with_ids = crate::arrow58::iceberg_to_arrow(schema)?;
    let fields: Vec<_> = with_ids
        .fields()
        .iter()
        .map(|f| {
            let f = mark_uuid(strip_field_metadata(f), f, schema);
            // Top-level strings are string views, as DataFusion reads parquet strings by default
            // (`schema_force_view_types`): the parquet reader then decodes into views directly.
            match f.data_type() {
                arrow::datatypes::DataType::Utf8 => {
                    f.with_data_type(arrow::datatypes::DataType::Utf8View)
                }
                _ => f,
            }
        })
        .collect();
    Ok(Arc::new(arrow::datatypes::Schema::new(fields)))
}

/// `schema` with its top-level string views as plain strings: a scan whose rows a writer copies
/// into new files decodes into the strings the writer encodes, instead of views it would cast.
pub(crate) fn with_plain_strings(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8View => Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8)),
            _ => Arc::clone(f),
        })
        .collect();
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// `schema` (the Arrow form of `read_schema`) with the top-level strings and binaries of
/// `field_ids` as dictionaries: a scan whose rows a writer copies into new files reads those
/// columns as the files' dictionaries, and the writer encodes them from the dictionaries (see
/// `write::dictionary_chunk`), instead of every value copied out and hashed back in.
pub(crate) fn with_dictionaries(
    schema: &SchemaRef,
    read_schema: &iceberg::spec::Schema,
    field_ids: &[i32],
) -> SchemaRef {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .zip(read_schema.as_struct().fields())
        .map(|(f, field)| match byte_dictionary_type(f.data_type()) {
            Some(dictionary) if field_ids.contains(&field.id) => {
                Arc::new(f.as_ref().clone().with_data_type(dictionary))
            }
            _ => Arc::clone(f),
        })
        .chain(
            schema
                .fields()
                .iter()
                .skip(read_schema.as_struct().fields().len())
                .cloned(),
        )
        .collect();
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// `plain` marked `arrow.uuid` when `f` (with its field id) is an Iceberg uuid. Only columns are
/// marked: Arrow compares nested types with their fields' metadata, so a marked field inside a
/// struct or list would make the files' own types (unmarked) unequal to the table's.
fn mark_uuid(
    plain: arrow::datatypes::Field,
    f: &arrow::datatypes::Field,
    schema: &iceberg::spec::Schema,
) -> arrow::datatypes::Field {
    let is_uuid = f
        .metadata()
        .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
        .and_then(|id| id.parse::<i32>().ok())
        .and_then(|id| schema.field_by_id(id))
        .is_some_and(|field| {
            matches!(
                *field.field_type,
                iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Uuid)
            )
        });
    if is_uuid {
        crate::uuid_type::uuid_field(plain)
    } else {
        plain
    }
}

fn strip_field_metadata(f: &arrow::datatypes::Field) -> arrow::datatypes::Field {
    let strip = |c: &FieldRef| Arc::new(strip_field_metadata(c));
    let data_type = match f.data_type() {
        DataType::Struct(children) => DataType::Struct(children.iter().map(strip).collect()),
        DataType::List(c) => DataType::List(strip(c)),
        DataType::LargeList(c) => DataType::LargeList(strip(c)),
        DataType::FixedSizeList(c, n) => DataType::FixedSizeList(strip(c), *n),
        DataType::Map(c, sorted) => DataType::Map(strip(c), *sorted),
        other => other.clone(),
    };
    Field::new(f.name(), data_type, f.is_nullable())
}
