//! Nested field names by field id. A struct field renamed since a file was written keeps its
//! old name in the file; a field dropped and added again under the same name is a different
//! field. Casts match struct fields by name, so before a file's column is cast to the table's
//! type its nested fields are relabelled: the table's name for each field id the table has, a
//! name no query asks for (so the field reads as missing) for every other id.
//!
//! ```text
//!  file:   point { x#7, z#9 }          table: point { px#7, z#12 }
//!  read:   point { px#7, __iceberg_unmapped_9 }  ──cast──►  point { px, z: NULL }
//! ```
//! Relabelling changes names only: the arrays' buffers are shared, not copied.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayData, RecordBatch};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;

use parquet::arrow::PARQUET_FIELD_ID_META_KEY as PARQUET_FIELD_ID;

/// `t` with the struct fields below it named by their field ids: `names` holds the table's
/// name of each nested id. Fields without an id keep their names.
pub(crate) fn relabelled(t: &DataType, names: &HashMap<i32, String>) -> DataType {
    let child = |c: &FieldRef, rename: bool| -> FieldRef {
        let mut f = c
            .as_ref()
            .clone()
            .with_data_type(relabelled(c.data_type(), names));
        let id = c
            .metadata()
            .get(PARQUET_FIELD_ID)
            .and_then(|v| v.parse::<i32>().ok());
        if let (true, Some(id)) = (rename, id) {
            let name = names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("__iceberg_unmapped_{id}"));
            f = f.with_name(name);
        }
        Arc::new(f)
    };
    match t {
        DataType::Struct(children) => {
            DataType::Struct(children.iter().map(|c| child(c, true)).collect())
        }
        // Element, key and value names are not the table's to choose: only what is below them.
        DataType::List(c) => DataType::List(child(c, false)),
        DataType::LargeList(c) => DataType::LargeList(child(c, false)),
        DataType::FixedSizeList(c, n) => DataType::FixedSizeList(child(c, false), *n),
        DataType::Map(entries, sorted) => {
            let entries = match entries.data_type() {
                DataType::Struct(kv) => Arc::new(
                    Field::new(
                        entries.name(),
                        DataType::Struct(kv.iter().map(|c| child(c, false)).collect()),
                        entries.is_nullable(),
                    )
                    .with_metadata(entries.metadata().clone()),
                ),
                _ => Arc::clone(entries),
            };
            DataType::Map(entries, *sorted)
        }
        other => other.clone(),
    }
}

/// `data` as type `to`, which differs from its own in field names only.
fn relabel_data(data: ArrayData, to: &DataType) -> Result<ArrayData> {
    if data.data_type() == to {
        return Ok(data);
    }
    let child_types: Vec<DataType> = match to {
        DataType::Struct(children) => children.iter().map(|c| c.data_type().clone()).collect(),
        DataType::List(c) | DataType::LargeList(c) | DataType::FixedSizeList(c, _) => {
            vec![c.data_type().clone()]
        }
        DataType::Map(entries, _) => vec![entries.data_type().clone()],
        _ => vec![],
    };
    if child_types.len() != data.child_data().len() {
        return Err(DataFusionError::Internal(format!(
            "cannot read {} as {to}",
            data.data_type()
        )));
    }
    let children = data
        .child_data()
        .iter()
        .zip(&child_types)
        .map(|(c, t)| relabel_data(c.clone(), t))
        .collect::<Result<Vec<_>>>()?;
    let builder = data
        .into_builder()
        .data_type(to.clone())
        .child_data(children);
    Ok(builder.build()?)
}

/// A file column's values with the nested field names of [`relabelled`].
#[derive(Debug, Clone)]
pub(crate) struct Relabel {
    child: Arc<dyn PhysicalExpr>,
    to: DataType,
}

impl Relabel {
    /// `child`'s values as type `to` (the same type, nested fields renamed).
    pub(crate) fn new(child: Arc<dyn PhysicalExpr>, to: DataType) -> Self {
        Self { child, to }
    }
}

impl PartialEq for Relabel {
    fn eq(&self, other: &Self) -> bool {
        self.child.as_ref() == other.child.as_ref() && self.to == other.to
    }
}

impl Eq for Relabel {}

impl Hash for Relabel {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.child.hash(state);
        self.to.hash(state);
    }
}

impl std::fmt::Display for Relabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "by_field_id({})", self.child)
    }
}

impl PhysicalExpr for Relabel {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.child.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let values = self.child.evaluate(batch)?.into_array(batch.num_rows())?;
        let data = relabel_data(values.to_data(), &self.to)?;
        Ok(ColumnarValue::Array(make_array(data)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.child]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let child = children
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal("by_field_id takes one child".into()))?;
        Ok(Arc::new(Self {
            child,
            to: self.to.clone(),
        }))
    }

    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int32Array, StructArray};
    use arrow::datatypes::Int32Type;
    use datafusion::physical_expr::expressions::Column;

    use super::*;

    fn with_id(name: &str, t: DataType, id: i32) -> Field {
        Field::new(name, t, true).with_metadata(HashMap::from([(
            PARQUET_FIELD_ID.to_string(),
            id.to_string(),
        )]))
    }

    #[test]
    fn nested_fields_take_the_table_names_of_their_ids() {
        let file = DataType::Struct(
            vec![
                Arc::new(with_id("x", DataType::Int32, 7)),
                Arc::new(with_id("z", DataType::Int32, 9)),
            ]
            .into(),
        );
        let names = HashMap::from([(7, "px".to_string()), (12, "z".to_string())]);
        let to = relabelled(&file, &names);
        let DataType::Struct(fields) = &to else {
            panic!("{to}")
        };
        let got: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(got, ["px", "__iceberg_unmapped_9"]);

        // The values are the same arrays under the new names.
        let DataType::Struct(file_fields) = &file else {
            unreachable!()
        };
        let array = StructArray::new(
            file_fields.clone(),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(Int32Array::from(vec![3, 4])),
            ],
            None,
        );
        let schema = Arc::new(Schema::new(vec![Field::new("p", file.clone(), true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(array)]).unwrap();
        let expr = Relabel::new(Arc::new(Column::new("p", 0)), to.clone());
        let out = expr.evaluate(&batch).unwrap().into_array(2).unwrap();
        assert_eq!(out.data_type(), &to);
        let px = out.as_struct().column_by_name("px").unwrap();
        assert_eq!(px.as_primitive::<Int32Type>().values(), &[1, 2]);
    }
}
