//! Spark's metadata columns of an Iceberg table: `_file` (the data file's location as recorded),
//! `_pos` (the row's position in it), `_spec_id` (the partition spec it was written for) and
//! `_partition` (its partition tuple, as a struct of every partition field the table's specs
//! have had, NULL where the file's spec lacks one), and on format v3 the row lineage columns.
//!
//! They are read by name and are not part of `SELECT *`: a provider
//! ([`IcebergTableProvider::with_metadata_columns`](crate::IcebergTableProvider::with_metadata_columns))
//! appends them to its schema, and the SQL layer (`crate::table::metadata_columns`) reads a
//! table through such a provider only in statements that name one, with its wildcards
//! excluding them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::scalar::ScalarStructBuilder;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use iceberg::spec::{Literal, NestedField, PrimitiveType, TableMetadata, Type};

use crate::error::IcebergResultExt;
use crate::file_planning::PlannedFile;

/// `_file`: the data file's location as its manifest records it.
pub const FILE: &str = "_file";
/// `_pos`: the row's position in its data file (0-based, before deletes).
pub const POS: &str = "_pos";
/// `_spec_id`: the id of the partition spec the data file was written for.
pub const SPEC_ID: &str = "_spec_id";
/// `_partition`: the data file's partition tuple.
pub const PARTITION: &str = "_partition";

/// The names of every metadata column (the row lineage ones included).
pub const NAMES: [&str; 6] = [
    FILE,
    POS,
    SPEC_ID,
    PARTITION,
    super::lineage::ROW_ID,
    super::lineage::LAST_UPDATED_SEQUENCE_NUMBER,
];

/// The per-file metadata columns of a table: `_spec_id`, and `_partition` when the table has
/// (had) partition fields.
#[derive(Debug, Clone)]
pub(crate) struct FileMetadataColumns {
    /// Every partition field of every spec, by field id: its name and Arrow type.
    partition: Vec<(i32, FieldRef)>,
    /// The iceberg result type of each of `partition`.
    types: Vec<PrimitiveType>,
    /// For each spec id, the position of each of its fields in `partition`.
    specs: BTreeMap<i32, Vec<Option<usize>>>,
}

impl FileMetadataColumns {
    /// The columns of `metadata`'s table.
    pub(crate) fn of(metadata: &TableMetadata) -> Result<Self> {
        // The source of a field may have been dropped from the current schema: look through
        // every schema the table has had.
        let source_type = |id: i32| {
            std::iter::once(metadata.current_schema())
                .chain(metadata.schemas_iter())
                .find_map(|s| s.field_by_id(id).map(|f| (*f.field_type).clone()))
        };
        let mut by_id: BTreeMap<i32, (String, PrimitiveType)> = BTreeMap::new();
        let mut specs: Vec<_> = metadata.partition_specs_iter().collect();
        // Newer specs name a field last.
        specs.sort_by_key(|s| s.spec_id());
        for spec in &specs {
            for field in spec.fields() {
                let Some(source) = source_type(field.source_id) else {
                    continue;
                };
                let Ok(Type::Primitive(result)) = field.transform.result_type(&source) else {
                    continue;
                };
                by_id.insert(field.field_id, (field.name.clone(), result));
            }
        }
        // A name two fields have had (a field dropped and another added under its name) is
        // the newest field's; the older ones are `name_<field id>`.
        let newest: HashMap<&str, i32> = by_id
            .iter()
            .map(|(id, (name, _))| (name.as_str(), *id))
            .collect();
        let fields: Vec<_> = by_id
            .iter()
            .map(|(id, (name, ty))| {
                let name = match newest.get(name.as_str()) == Some(id) {
                    true => name.clone(),
                    false => format!("{name}_{id}"),
                };
                Arc::new(NestedField::optional(
                    *id,
                    name,
                    Type::Primitive(ty.clone()),
                ))
            })
            .collect();
        let arrow = match fields.is_empty() {
            true => vec![],
            false => {
                let schema = iceberg::spec::Schema::builder()
                    .with_fields(fields)
                    .build()
                    .df()?;
                super::schema::arrow_schema(&schema)?
                    .fields()
                    .iter()
                    .map(|f| match f.data_type() {
                        // Partition values are plain strings.
                        DataType::Utf8View => {
                            Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8))
                        }
                        _ => Arc::clone(f),
                    })
                    .collect()
            }
        };
        let partition: Vec<(i32, FieldRef)> = by_id.keys().copied().zip(arrow).collect();
        let types = by_id.values().map(|(_, t)| t.clone()).collect();
        let specs = specs
            .iter()
            .map(|spec| {
                let at = spec
                    .fields()
                    .iter()
                    .map(|f| partition.iter().position(|(id, _)| *id == f.field_id))
                    .collect();
                (spec.spec_id(), at)
            })
            .collect();
        Ok(Self {
            partition,
            types,
            specs,
        })
    }

    /// The partition field id of the `_partition` struct's field `name`.
    pub(crate) fn partition_field_id(&self, name: &str) -> Option<i32> {
        self.partition
            .iter()
            .find(|(_, f)| f.name() == name)
            .map(|(id, _)| *id)
    }

    /// The `_partition` struct's type (`None` for a table that never had partition fields).
    pub(crate) fn partition_type(&self) -> Option<DataType> {
        (!self.partition.is_empty()).then(|| {
            DataType::Struct(
                self.partition
                    .iter()
                    .map(|(_, f)| Arc::clone(f))
                    .collect::<Fields>(),
            )
        })
    }

    /// The per-file columns, in the order [`Self::values`] gives them.
    pub(crate) fn fields(&self) -> Vec<FieldRef> {
        let mut fields = vec![Arc::new(Field::new(SPEC_ID, DataType::Int32, false))];
        if let Some(t) = self.partition_type() {
            fields.push(Arc::new(Field::new(PARTITION, t, false)));
        }
        fields
    }

    /// The values of [`Self::fields`] for `file`.
    pub(crate) fn values(&self, file: &PlannedFile) -> Result<Vec<ScalarValue>> {
        let mut values = vec![ScalarValue::Int32(Some(file.spec_id))];
        values.extend(self.partition_value(file.spec_id, &file.partition)?);
        Ok(values)
    }

    /// The `_partition` struct of a file of spec `spec_id` with the partition tuple
    /// `partition` (`None` for a table that never had partition fields).
    pub(crate) fn partition_value(
        &self,
        spec_id: i32,
        partition: &iceberg::spec::Struct,
    ) -> Result<Option<ScalarValue>> {
        if self.partition.is_empty() {
            return Ok(None);
        }
        let mut tuple: Vec<Option<&Literal>> = vec![None; self.partition.len()];
        if let Some(at) = self.specs.get(&spec_id) {
            for (value, at) in partition.iter().zip(at) {
                if let Some(at) = at {
                    tuple[*at] = value;
                }
            }
        }
        let mut builder = ScalarStructBuilder::new();
        for (((_, field), ty), value) in self.partition.iter().zip(&self.types).zip(tuple) {
            let scalar = match value {
                Some(Literal::Primitive(p)) => {
                    super::constants::partition_scalar(ty, p, field.data_type())?
                }
                _ => ScalarValue::try_from(field.data_type())?,
            };
            builder = builder.with_scalar(field.as_ref().clone(), scalar);
        }
        Ok(Some(builder.build()?))
    }
}

/// The metadata columns a table's provider appends after its columns (and after the row lineage
/// columns on v3): `_file`, `_pos`, `_spec_id`, `_partition` (when the table has partition
/// fields).
pub(crate) fn appended_fields(metadata: &TableMetadata) -> Result<Vec<FieldRef>> {
    let mut fields = vec![
        Arc::new(Field::new(FILE, DataType::Utf8, false)),
        Arc::new(Field::new(POS, DataType::Int64, false)),
    ];
    fields.extend(FileMetadataColumns::of(metadata)?.fields());
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{
        FormatVersion, NestedField, PrimitiveType, Schema, SortOrder, Transform, Type,
        UnboundPartitionSpec,
    };

    use super::*;

    /// A partition field name two specs gave different fields: `_partition` keeps both, the
    /// older by `name_<field id>`.
    #[test]
    fn a_partition_name_reused_by_a_newer_field_keeps_both() {
        let schema = Schema::builder()
            .with_fields(vec![NestedField::optional(
                1,
                "ts",
                Type::Primitive(PrimitiveType::Timestamp),
            )
            .into()])
            .build()
            .unwrap();
        let by = |t: Transform| {
            UnboundPartitionSpec::builder()
                .add_partition_field(1, "p", t)
                .unwrap()
                .build()
        };
        let metadata = iceberg::spec::TableMetadataBuilder::new(
            schema,
            by(Transform::Day),
            SortOrder::unsorted_order(),
            "file:///t".to_string(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .add_partition_spec(by(Transform::Month))
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        let ids: Vec<i32> = metadata
            .partition_specs_iter()
            .flat_map(|s| s.fields().iter().map(|f| f.field_id))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(ids.len(), 2, "two fields: {ids:?}");
        let columns = FileMetadataColumns::of(&metadata).unwrap();
        let Some(DataType::Struct(fields)) = columns.partition_type() else {
            panic!("no _partition struct");
        };
        let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, [format!("p_{}", ids[0]).as_str(), "p"]);
        assert_eq!(fields[0].data_type(), &DataType::Date32);
        assert_eq!(fields[1].data_type(), &DataType::Int32);
    }
}
