//! `initial-default` values (format v3) of fields a data file does not store, at any depth: a
//! top-level column the file lacks reads as its default, and a field missing from a struct the
//! file does store reads as its default in every row whose struct is not NULL (inside lists
//! and map values too).
//!
//! ```text
//!  table  s: struct<x int, z int (initial-default 7)>     file  s: struct<x int>
//!  read:  {x: 1, z: 7}, NULL, {x: 3, z: 7}                       {x: 1}, NULL, {x: 3}
//! ```
//! A struct's own default is either NULL or `{}` (the spec allows nothing else): `{}` reads as a
//! struct whose fields take their own defaults (NULL for those without one).
//!
//! The rewrite is per file ([`super::FieldIdAdapterFactory`] makes one adapter a file): a column
//! whose file type lacks some defaulted field is read through [`FillDefaults`], which converts
//! the file's arrays to the table's type (missing fields NULL) and puts the defaults in.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, ListArray, MapArray, RecordBatch, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use iceberg::spec::{Literal, NestedField, Type};

/// Where a file's values need defaults put in, below one column.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Fill {
    /// A field the file lacks: rows whose parent is not NULL read this value.
    Value(ScalarValue),
    /// A struct (or a list's elements, a map's entries at index 0) the file stores, with fills
    /// below it: by child index in the table's type.
    Nested(Vec<(usize, Fill)>),
}

/// The value a missing `field` reads as, of Arrow type `arrow`: `None` when it has no
/// `initial-default` (it reads as NULL).
pub(crate) fn default_value(field: &NestedField, arrow: &DataType) -> Result<Option<ScalarValue>> {
    let Some(default) = &field.initial_default else {
        return Ok(None);
    };
    let unsupported = || {
        DataFusionError::NotImplemented(format!(
            "field '{}' has an initial-default {default:?} of type {} that this reader cannot use",
            field.name, field.field_type
        ))
    };
    match (field.field_type.as_ref(), default, arrow) {
        (Type::Primitive(ty), Literal::Primitive(v), _) => {
            let value = super::literal::literal_scalar(ty, v).ok_or_else(unsupported)?;
            Ok(Some(match &value.data_type() == arrow {
                true => value,
                false => value.cast_to(arrow)?,
            }))
        }
        // `{}`: a struct of its fields' own defaults.
        (Type::Struct(st), Literal::Struct(_), DataType::Struct(fields)) => {
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(fields.len());
            for f in fields.iter() {
                let child = st
                    .fields()
                    .iter()
                    .find(|c| c.name == *f.name())
                    .ok_or_else(unsupported)?;
                let value = match default_value(child, f.data_type())? {
                    Some(v) => v,
                    None => ScalarValue::try_new_null(f.data_type())?,
                };
                columns.push(value.to_array_of_size(1)?);
            }
            let array = StructArray::try_new(fields.clone(), columns, None)?;
            Ok(Some(ScalarValue::Struct(Arc::new(array))))
        }
        _ => Err(unsupported()),
    }
}

/// The fills a file whose column has Arrow type `physical` needs to read it as `logical` (the
/// table's type of the column, whose Iceberg type is `ty`); `None` when it needs none.
pub(crate) fn fills(logical: &DataType, physical: &DataType, ty: &Type) -> Result<Option<Fill>> {
    let nested = match (logical, physical, ty) {
        (DataType::Struct(lf), DataType::Struct(pf), Type::Struct(st)) => {
            let mut out = vec![];
            for (i, l) in lf.iter().enumerate() {
                let Some(field) = st.fields().iter().find(|f| f.name == *l.name()) else {
                    continue;
                };
                match pf.iter().find(|p| p.name() == l.name()) {
                    Some(p) => {
                        if let Some(fill) = fills(l.data_type(), p.data_type(), &field.field_type)?
                        {
                            out.push((i, fill));
                        }
                    }
                    None => {
                        if let Some(v) = default_value(field, l.data_type())? {
                            out.push((i, Fill::Value(v)));
                        }
                    }
                }
            }
            out
        }
        (DataType::List(l), DataType::List(p), Type::List(lt))
        | (DataType::LargeList(l), DataType::LargeList(p), Type::List(lt)) => {
            match fills(l.data_type(), p.data_type(), &lt.element_field.field_type)? {
                Some(fill) => vec![(0, fill)],
                None => vec![],
            }
        }
        (DataType::Map(l, _), DataType::Map(p, _), Type::Map(mt)) => {
            let (DataType::Struct(le), DataType::Struct(pe)) = (l.data_type(), p.data_type())
            else {
                return Ok(None);
            };
            let (Some(lv), Some(pv)) = (le.get(1), pe.get(1)) else {
                return Ok(None);
            };
            match fills(lv.data_type(), pv.data_type(), &mt.value_field.field_type)? {
                Some(fill) => vec![(0, Fill::Nested(vec![(1, fill)]))],
                None => vec![],
            }
        }
        _ => vec![],
    };
    Ok((!nested.is_empty()).then_some(Fill::Nested(nested)))
}

/// `array` (as the file stores it) in the table's type `target`, with `fill` put in: struct
/// fields by name (those the file lacks take their default where the struct is not NULL, NULL
/// otherwise), through lists and map entries, primitive promotions by Arrow's cast. Defaults go
/// in as the arrays are built, so a required field the file lacks is never NULL on the way.
fn to_table_type(array: &ArrayRef, target: &DataType, fill: Option<&Fill>) -> Result<ArrayRef> {
    let children: &[(usize, Fill)] = match fill {
        Some(Fill::Nested(children)) => children,
        Some(Fill::Value(_)) => {
            return Err(DataFusionError::Internal(
                "a default value where a nested type was expected".into(),
            ))
        }
        None => &[],
    };
    let child = |i: usize| children.iter().find(|(at, _)| *at == i).map(|(_, f)| f);
    if array.data_type() == target && children.is_empty() {
        return Ok(Arc::clone(array));
    }
    match (array.data_type(), target) {
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_struct();
            let columns = fields
                .iter()
                .enumerate()
                .map(|(i, f)| match (s.column_by_name(f.name()), child(i)) {
                    (Some(c), fill) => to_table_type(c, f.data_type(), fill),
                    (None, Some(Fill::Value(v))) => {
                        let values = v.to_array_of_size(s.len())?;
                        match s.nulls() {
                            Some(nulls) => null_where(&values, nulls),
                            None => Ok(values),
                        }
                    }
                    (None, _) => Ok(arrow::array::new_null_array(f.data_type(), s.len())),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                columns,
                s.nulls().cloned(),
            )?))
        }
        (DataType::List(_), DataType::List(field)) => {
            let list = array.as_list::<i32>();
            Ok(Arc::new(ListArray::try_new(
                Arc::clone(field),
                list.offsets().clone(),
                to_table_type(list.values(), field.data_type(), child(0))?,
                list.nulls().cloned(),
            )?))
        }
        (DataType::LargeList(_), DataType::LargeList(field)) => {
            let list = array.as_list::<i64>();
            Ok(Arc::new(arrow::array::LargeListArray::try_new(
                Arc::clone(field),
                list.offsets().clone(),
                to_table_type(list.values(), field.data_type(), child(0))?,
                list.nulls().cloned(),
            )?))
        }
        (DataType::Map(_, _), DataType::Map(field, sorted)) => {
            let map = array.as_map();
            let entries: ArrayRef = Arc::new(map.entries().clone());
            let entries = to_table_type(&entries, field.data_type(), child(0))?;
            Ok(Arc::new(MapArray::try_new(
                Arc::clone(field),
                map.offsets().clone(),
                entries.as_struct().clone(),
                map.nulls().cloned(),
                *sorted,
            )?))
        }
        _ => Ok(arrow::compute::cast(array, target)?),
    }
}

/// `array` NULL wherever `valid` is not set, down to the fields of structs (as a parquet
/// reader leaves the fields of a NULL struct).
fn null_where(array: &ArrayRef, valid: &NullBuffer) -> Result<ArrayRef> {
    let nulls = NullBuffer::union(array.nulls(), Some(valid));
    match array.data_type() {
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(|c| null_where(c, valid))
                .collect::<Result<Vec<_>>>()?;
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                columns,
                nulls,
            )?))
        }
        _ => Ok(arrow::array::make_array(
            array.to_data().into_builder().nulls(nulls).build()?,
        )),
    }
}

/// A column read with the `initial-default`s of the fields its file lacks put in (see the module
/// docs): its child is the column as DataFusion casts it to the table's type.
#[derive(Debug)]
pub(crate) struct FillDefaults {
    child: Arc<dyn PhysicalExpr>,
    fill: Fill,
    field: FieldRef,
}

impl FillDefaults {
    /// `child` (of the table's type `field`) with `fill` applied.
    pub(crate) fn new(child: Arc<dyn PhysicalExpr>, fill: Fill, field: FieldRef) -> Self {
        Self { child, fill, field }
    }
}

impl PartialEq for FillDefaults {
    fn eq(&self, other: &Self) -> bool {
        self.child.as_ref() == other.child.as_ref()
            && self.fill == other.fill
            && self.field == other.field
    }
}

impl Eq for FillDefaults {}

impl Hash for FillDefaults {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.child.hash(state);
        self.fill.hash(state);
        self.field.hash(state);
    }
}

impl std::fmt::Display for FillDefaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "initial_defaults({})", self.child)
    }
}

impl PhysicalExpr for FillDefaults {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.field.data_type().clone())
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(self.field.is_nullable())
    }

    fn return_field(&self, _input_schema: &Schema) -> Result<FieldRef> {
        Ok(Arc::clone(&self.field))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let values = self.child.evaluate(batch)?.into_array(batch.num_rows())?;
        let values = to_table_type(&values, self.field.data_type(), Some(&self.fill))?;
        Ok(ColumnarValue::Array(values))
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
            .ok_or_else(|| DataFusionError::Internal("initial_defaults takes one child".into()))?;
        Ok(Arc::new(Self {
            child,
            fill: self.fill.clone(),
            field: Arc::clone(&self.field),
        }))
    }

    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::Int32Array;
    use arrow::datatypes::{Field, Fields};
    use iceberg::spec::{PrimitiveLiteral, PrimitiveType, StructType};

    use super::*;

    fn struct_type() -> (Type, DataType, DataType) {
        let ty = Type::Struct(StructType::new(vec![
            NestedField::optional(2, "x", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::optional(3, "z", Type::Primitive(PrimitiveType::String))
                .with_initial_default(Literal::Primitive(PrimitiveLiteral::String("d".into())))
                .into(),
        ]));
        let logical = DataType::Struct(Fields::from(vec![
            Field::new("x", DataType::Int32, true),
            Field::new("z", DataType::Utf8, true),
        ]));
        let physical = DataType::Struct(Fields::from(vec![Field::new("x", DataType::Int32, true)]));
        (ty, logical, physical)
    }

    #[test]
    fn missing_struct_fields_read_their_default_unless_the_struct_is_null() {
        let (ty, logical, physical) = struct_type();
        let fill = fills(&logical, &physical, &ty).unwrap().unwrap();
        assert_eq!(
            fill,
            Fill::Nested(vec![(1, Fill::Value(ScalarValue::Utf8(Some("d".into()))))])
        );
        // As the file stores it: no `z`; a required `z` would refuse a NULL on the way.
        let DataType::Struct(physical_fields) = &physical else {
            unreachable!()
        };
        let file: ArrayRef = Arc::new(StructArray::new(
            physical_fields.clone(),
            vec![Arc::new(Int32Array::from(vec![Some(1), None, Some(3)]))],
            Some(NullBuffer::from(vec![true, false, true])),
        ));
        let DataType::Struct(fields) = &logical else {
            unreachable!()
        };
        let required: Vec<Field> = fields
            .iter()
            .map(|f| match f.name().as_str() {
                "z" => f.as_ref().clone().with_nullable(false),
                _ => f.as_ref().clone(),
            })
            .collect();
        for target in [logical.clone(), DataType::Struct(required.into())] {
            let filled = to_table_type(&file, &target, Some(&fill)).unwrap();
            let z = filled.as_struct().column(1).as_string::<i32>().clone();
            assert_eq!(z.iter().collect::<Vec<_>>(), [Some("d"), None, Some("d")]);
        }
        // A file that stores the field needs no fill.
        assert!(fills(&logical, &logical, &ty).unwrap().is_none());
    }

    #[test]
    fn defaults_inside_list_elements_and_empty_struct_defaults() {
        let (element, logical_element, physical_element) = struct_type();
        let list = Type::List(iceberg::spec::ListType::new(
            NestedField::list_element(4, element.clone(), false).into(),
        ));
        let logical = DataType::List(Arc::new(Field::new(
            "element",
            logical_element.clone(),
            true,
        )));
        let physical = DataType::List(Arc::new(Field::new("element", physical_element, true)));
        let fill = fills(&logical, &physical, &list).unwrap().unwrap();
        assert!(matches!(&fill, Fill::Nested(c) if c.len() == 1 && c[0].0 == 0));
        // `{}` for the whole struct: its fields' defaults.
        let field = NestedField::optional(1, "s", element).with_initial_default(Literal::Struct(
            iceberg::spec::Struct::from_iter([None, None]),
        ));
        let value = default_value(&field, &logical_element).unwrap().unwrap();
        let ScalarValue::Struct(s) = value else {
            panic!("{value:?}")
        };
        assert!(s.column(0).is_null(0));
        assert_eq!(s.column(1).as_string::<i32>().value(0), "d");
    }
}
