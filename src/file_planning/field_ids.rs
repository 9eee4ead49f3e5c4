//! Schema evolution by field id: file columns are matched to table columns by Iceberg field id
//! (or through the table's name mapping when files carry no ids), never by name alone.
//!
//! ```text
//!  file schema (ids in PARQUET:field_id)      table schema
//!   a#1  b#2  c#3 (dropped)             ──►   a#1  bb#2 (renamed)  c#5 (new, same old name)
//!  renamed view handed to DataFusion:  a    bb   __iceberg_unmapped_2
//! ```
//! DataFusion's default expression adapter then does the rest on the renamed view: casts for
//! promoted types (int→long, float→double, decimal widening), NULL for columns a file lacks
//! (their `initial-default` when the column has one).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_adapter::{
    DefaultPhysicalExprAdapterFactory, PhysicalExprAdapter, PhysicalExprAdapterFactory,
};
use iceberg::spec::{NameMapping, DEFAULT_SCHEMA_NAME_MAPPING};

/// The adapters [`FieldIdAdapterFactory::shared`] made that are still in use.
static MADE: std::sync::Mutex<Vec<std::sync::Weak<FieldIdAdapterFactory>>> =
    std::sync::Mutex::new(Vec::new());

/// Parquet's field-id key in Arrow field metadata.
pub(crate) const PARQUET_FIELD_ID: &str = "PARQUET:field_id";

/// Maps each file's columns onto the table's columns by field id.
#[derive(Debug, Clone)]
pub struct FieldIdAdapterFactory {
    /// Table column name for each top-level field id.
    names_by_id: HashMap<i32, String>,
    /// Field id for each file column name, from `schema.name-mapping.default`.
    mapped_ids: HashMap<String, i32>,
    /// Leaf name of every nested (non top-level) field, by id.
    nested_names_by_id: HashMap<i32, String>,
    /// Top-level columns by name: a column a file lacks reads as its `initial-default`, and
    /// defaulted fields nested in it that a file lacks read as theirs (see [`super::defaults`]).
    columns: HashMap<String, iceberg::spec::NestedField>,
    /// Whether some field of the schema, at any depth, has an `initial-default`.
    has_defaults: bool,
    /// What it was made from (to make it again where a plan is decoded).
    source: Arc<(iceberg::spec::Schema, HashMap<String, String>)>,
}

impl FieldIdAdapterFactory {
    /// An adapter for reading files into `schema`, with the table's `properties`.
    pub fn new(schema: &iceberg::spec::Schema, properties: &HashMap<String, String>) -> Self {
        let names_by_id = schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| (f.id, f.name.clone()))
            .collect();
        let mapped_ids = properties
            .get(DEFAULT_SCHEMA_NAME_MAPPING)
            .and_then(|json| match serde_json::from_str::<NameMapping>(json) {
                Ok(m) => Some(m),
                Err(e) => {
                    log::warn!("ignoring unreadable {DEFAULT_SCHEMA_NAME_MAPPING}: {e}");
                    None
                }
            })
            .map(|m| {
                m.fields()
                    .iter()
                    .filter_map(|f| f.field_id().map(|id| (f, id)))
                    .flat_map(|(f, id)| f.names().iter().map(move |n| (n.clone(), id)))
                    .collect()
            })
            .unwrap_or_default();
        let columns = schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| (f.name.clone(), f.as_ref().clone()))
            .collect();
        let has_defaults = schema
            .field_id_to_fields()
            .values()
            .any(|f| f.initial_default.is_some());
        let top: std::collections::HashSet<i32> =
            schema.as_struct().fields().iter().map(|f| f.id).collect();
        let nested_names_by_id = schema
            .field_id_to_fields()
            .iter()
            .filter(|(id, _)| !top.contains(id))
            .map(|(id, f)| (*id, f.name.clone()))
            .collect();
        Self {
            names_by_id,
            mapped_ids,
            nested_names_by_id,
            columns,
            has_defaults,
            source: Arc::new((schema.clone(), properties.clone())),
        }
    }

    /// The schema and table properties it was made from.
    pub fn source(&self) -> (&iceberg::spec::Schema, &HashMap<String, String>) {
        (&self.source.0, &self.source.1)
    }

    /// This adapter, shared, and findable again from a scan that holds it (see
    /// [`FieldIdAdapterFactory::of`]).
    pub fn shared(self) -> Arc<Self> {
        let adapter = Arc::new(self);
        let mut made = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        made.retain(|w| w.strong_count() > 0);
        made.push(Arc::downgrade(&adapter));
        adapter
    }

    /// The adapter a scan holds, if it is one made by [`FieldIdAdapterFactory::shared`] (the
    /// factory trait has no downcast: a plan codec finds this crate's adapters here).
    pub fn of(adapter: &Arc<dyn PhysicalExprAdapterFactory>) -> Option<Arc<Self>> {
        let address = Arc::as_ptr(adapter) as *const ();
        let made = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        made.iter()
            .find(|w| std::ptr::eq(w.as_ptr() as *const (), address))
            .and_then(std::sync::Weak::upgrade)
    }

    /// The file schema with each column renamed to the table column of the same field id.
    pub(crate) fn renamed(&self, physical: &Schema) -> Schema {
        let ids: Vec<Option<i32>> = physical
            .fields()
            .iter()
            .map(|f| {
                f.metadata()
                    .get(PARQUET_FIELD_ID)
                    .and_then(|v| v.parse().ok())
                    .or_else(|| self.mapped_ids.get(f.name()).copied())
            })
            .collect();
        if ids.iter().all(Option::is_none) {
            // No ids and no name mapping: names are all there is.
            return physical.clone();
        }
        let fields: Vec<Field> = physical
            .fields()
            .iter()
            .zip(ids)
            .enumerate()
            .map(|(i, (f, id))| {
                let name = id
                    .and_then(|id| self.names_by_id.get(&id).cloned())
                    .unwrap_or_else(|| format!("__iceberg_unmapped_{i}"));
                let t = super::relabel::relabelled(f.data_type(), &self.nested_names_by_id);
                f.as_ref().clone().with_name(name).with_data_type(t)
            })
            .collect();
        Schema::new_with_metadata(fields, physical.metadata().clone())
    }
}

/// Whether `t` has a map in it.
fn has_map(t: &DataType) -> bool {
    match t {
        DataType::Map(_, _) => true,
        DataType::Struct(children) => children.iter().any(|c| has_map(c.data_type())),
        DataType::List(c) | DataType::LargeList(c) | DataType::FixedSizeList(c, _) => {
            has_map(c.data_type())
        }
        _ => false,
    }
}

/// `t` without field metadata (the field ids a file's types carry).
fn bare(t: &DataType) -> DataType {
    let field = |f: &FieldRef| Arc::new(Field::new(f.name(), bare(f.data_type()), f.is_nullable()));
    match t {
        DataType::Struct(children) => DataType::Struct(children.iter().map(field).collect()),
        DataType::List(c) => DataType::List(field(c)),
        DataType::LargeList(c) => DataType::LargeList(field(c)),
        DataType::FixedSizeList(c, n) => DataType::FixedSizeList(field(c), *n),
        DataType::Map(e, sorted) => DataType::Map(field(e), *sorted),
        other => other.clone(),
    }
}

impl PhysicalExprAdapterFactory for FieldIdAdapterFactory {
    fn create(
        &self,
        logical_file_schema: SchemaRef,
        physical_file_schema: SchemaRef,
    ) -> Result<Arc<dyn PhysicalExprAdapter>> {
        let renamed = Arc::new(self.renamed(&physical_file_schema));
        // Columns the file lacks that have an initial default read as that value; columns it
        // has whose nested defaulted fields it lacks get those filled in.
        let mut defaults = HashMap::new();
        let mut fills = HashMap::new();
        if self.has_defaults {
            for logical in logical_file_schema.fields() {
                let Some(column) = self.columns.get(logical.name()) else {
                    continue;
                };
                match renamed.field_with_name(logical.name()) {
                    Err(_) => {
                        if let Some(v) =
                            super::defaults::default_value(column, logical.data_type())?
                        {
                            defaults.insert(logical.name().clone(), v);
                        }
                    }
                    Ok(physical) => {
                        let fill = super::defaults::fills(
                            logical.data_type(),
                            physical.data_type(),
                            &column.field_type,
                        )?;
                        if let Some(fill) = fill {
                            fills.insert(logical.name().clone(), (fill, Arc::clone(logical)));
                        }
                    }
                }
            }
        }
        // DataFusion's cast does not evolve the structs of map values: a column with a map
        // whose type changed is converted like one with fills (no defaults to put in).
        for logical in logical_file_schema.fields() {
            if fills.contains_key(logical.name()) || !has_map(logical.data_type()) {
                continue;
            }
            if let Ok(physical) = renamed.field_with_name(logical.name()) {
                if bare(physical.data_type()) != bare(logical.data_type()) {
                    let fill = super::defaults::Fill::Nested(vec![]);
                    fills.insert(logical.name().clone(), (fill, Arc::clone(logical)));
                }
            }
        }
        // A column with fills is converted to the table's type by [`FillDefaults`] itself:
        // DataFusion's adapter sees it in the file's type.
        let logical_file_schema = match fills.is_empty() {
            true => logical_file_schema,
            false => {
                let fields: Vec<arrow::datatypes::FieldRef> = logical_file_schema
                    .fields()
                    .iter()
                    .map(|f| {
                        match (
                            fills.contains_key(f.name()),
                            renamed.field_with_name(f.name()),
                        ) {
                            (true, Ok(physical)) => Arc::new(
                                f.as_ref()
                                    .clone()
                                    .with_data_type(physical.data_type().clone()),
                            ),
                            _ => Arc::clone(f),
                        }
                    })
                    .collect();
                Arc::new(Schema::new_with_metadata(
                    fields,
                    logical_file_schema.metadata().clone(),
                ))
            }
        };
        Ok(Arc::new(FieldIdAdapter {
            inner: DefaultPhysicalExprAdapterFactory
                .create(logical_file_schema, Arc::clone(&renamed))?,
            renamed,
            physical: physical_file_schema,
            defaults,
            fills,
        }))
    }
}

/// Rewrites through the renamed view, then gives columns back their names in the file (the
/// parquet reader re-resolves columns by name against what it read).
#[derive(Debug)]
struct FieldIdAdapter {
    inner: Arc<dyn PhysicalExprAdapter>,
    /// The file's schema named by field id (nested fields too).
    renamed: SchemaRef,
    physical: SchemaRef,
    /// Values of the columns this file lacks that have an initial default.
    defaults: HashMap<String, ScalarValue>,
    /// Columns this file has, with nested defaulted fields it lacks (and the table's field).
    fills: HashMap<String, (super::defaults::Fill, arrow::datatypes::FieldRef)>,
}

impl PhysicalExprAdapter for FieldIdAdapter {
    fn rewrite(&self, expr: Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
        let expr = match self.defaults.is_empty() && self.fills.is_empty() {
            true => expr,
            false => {
                expr.transform(|e| {
                    let Some(column) = e.downcast_ref::<Column>() else {
                        return Ok(Transformed::no(e));
                    };
                    if let Some(v) = self.defaults.get(column.name()) {
                        return Ok(Transformed::yes(
                            Arc::new(Literal::new(v.clone())) as Arc<dyn PhysicalExpr>
                        ));
                    }
                    match self.fills.get(column.name()) {
                        Some((fill, field)) => Ok(Transformed::yes(Arc::new(
                            super::defaults::FillDefaults::new(
                                Arc::clone(&e),
                                fill.clone(),
                                Arc::clone(field),
                            ),
                        )
                            as Arc<dyn PhysicalExpr>)),
                        None => Ok(Transformed::no(e)),
                    }
                })?
                .data
            }
        };
        let rewritten = self.inner.rewrite(expr)?;
        rewritten
            .transform(|e| {
                let Some(col) = e.downcast_ref::<Column>() else {
                    return Ok(Transformed::no(e));
                };
                let (Some(f), Some(r)) = (
                    self.physical.fields().get(col.index()),
                    self.renamed.fields().get(col.index()),
                ) else {
                    return Ok(Transformed::no(e));
                };
                let same_type = f.data_type() == r.data_type();
                if f.name() == col.name() && same_type {
                    return Ok(Transformed::no(e));
                }
                let column = Arc::new(Column::new(f.name(), col.index())) as Arc<dyn PhysicalExpr>;
                Ok(Transformed::yes(match same_type {
                    true => column,
                    // Nested fields named by id (see [`super::relabel`]).
                    false => Arc::new(super::relabel::Relabel::new(column, r.data_type().clone())),
                }))
            })
            .map(|t| t.data)
    }
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, PrimitiveType, StructType, Type};

    use super::*;

    fn with_id(name: &str, t: DataType, id: i32) -> Field {
        Field::new(name, t, true).with_metadata(HashMap::from([(
            PARQUET_FIELD_ID.to_string(),
            id.to_string(),
        )]))
    }

    #[test]
    fn renames_by_id_and_hides_dropped_columns() {
        let table = iceberg::spec::Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "a", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "bb", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(5, "c", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let factory = FieldIdAdapterFactory::new(&table, &HashMap::new());
        let file = Schema::new(vec![
            with_id("a", DataType::Int32, 1),
            with_id("b", DataType::Utf8, 2),
            with_id("c", DataType::Float32, 3),
        ]);
        let names: Vec<String> = factory
            .renamed(&file)
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["a", "bb", "__iceberg_unmapped_2"]);
    }

    #[test]
    fn nested_fields_are_renamed_by_id() {
        let inner = StructType::new(vec![NestedField::optional(
            3,
            "x_renamed",
            Type::Primitive(PrimitiveType::Int),
        )
        .into()]);
        let table = iceberg::spec::Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "s", Type::Struct(inner)).into()
            ])
            .build()
            .unwrap();
        let factory = FieldIdAdapterFactory::new(&table, &HashMap::new());
        let file = Schema::new(vec![with_id(
            "s",
            DataType::Struct(
                vec![
                    Arc::new(with_id("x", DataType::Int32, 3)),
                    Arc::new(with_id("x_renamed", DataType::Int32, 4)),
                ]
                .into(),
            ),
            1,
        )]);
        let renamed = factory.renamed(&file);
        let DataType::Struct(fields) = renamed.field(0).data_type() else {
            panic!("{renamed:?}")
        };
        let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        // Field 4 (dropped, its name taken by field 3) is hidden.
        assert_eq!(names, ["x_renamed", "__iceberg_unmapped_4"]);
    }

    #[test]
    fn name_mapping_supplies_missing_ids() {
        let table = iceberg::spec::Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "label", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let props = HashMap::from([(
            DEFAULT_SCHEMA_NAME_MAPPING.to_string(),
            r#"[{"field-id": 1, "names": ["id", "ID"]}, {"field-id": 2, "names": ["name"]}]"#
                .to_string(),
        )]);
        let factory = FieldIdAdapterFactory::new(&table, &props);
        let file = Schema::new(vec![
            Field::new("ID", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]);
        let names: Vec<String> = factory
            .renamed(&file)
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["id", "label"]);
        // Without ids or a mapping, names are kept.
        let plain = FieldIdAdapterFactory::new(&table, &HashMap::new());
        assert_eq!(plain.renamed(&file), file);
    }
}
