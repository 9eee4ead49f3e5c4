//! The SQL of the `ALTER TABLE` statements: their dialect and how names fold, column types (as
//! `ADD COLUMN` and `ALTER COLUMN ... TYPE` write them, Spark's names included) to Iceberg
//! types, and `DEFAULT` values to Iceberg literals.

use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::datatypes::{DataType, Schema as ArrowSchema, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{Cast, Expr};
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, DataType as SqlType, ExactNumberInfo, Ident, TimezoneInfo,
};
use datafusion::sql::sqlparser::dialect::{Dialect, GenericDialect};
use iceberg::spec::{
    FormatVersion, ListType, Literal, MapType, NestedField, PrimitiveLiteral, PrimitiveType,
    StructType, Type,
};

/// The widest decimal Iceberg has.
const MAX_DECIMAL_PRECISION: u32 = 38;

/// The SQL dialect of these statements: DataFusion's (generic) names and quotes, plus Spark's
/// backquoted names and `STRUCT<a: int>`, `MAP<k, v>`, `LONG` types.
#[derive(Debug, Default)]
pub(crate) struct DdlDialect;

impl Dialect for DdlDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        GenericDialect.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        GenericDialect.is_identifier_part(ch)
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '"' || ch == '`'
    }
    fn supports_struct_literal(&self) -> bool {
        true
    }
    fn supports_map_literal_with_angle_brackets(&self) -> bool {
        true
    }
    fn supports_long_type_as_bigint(&self) -> bool {
        true
    }
}

/// `ident` as DataFusion names it: unquoted names folded to lower case.
pub(crate) fn normalised(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// Field ids handed out in order, from the table's last column id on.
pub(crate) struct FieldIds {
    pub(crate) last: i32,
}

impl FieldIds {
    pub(crate) fn next(&mut self) -> i32 {
        self.last += 1;
        self.last
    }
}

/// The Iceberg type `sql` names, nested fields numbered by `ids` (a struct's fields first,
/// then what is inside each, as Java numbers them). Nested fields are optional.
pub(crate) fn iceberg_type(
    sql: &SqlType,
    version: FormatVersion,
    ids: &mut FieldIds,
) -> Result<Type> {
    let nested = |t: &SqlType, ids: &mut FieldIds| iceberg_type(t, version, ids);
    Ok(match sql {
        SqlType::Struct(fields, _) => {
            let mut named = Vec::with_capacity(fields.len());
            for f in fields {
                let name = f.field_name.as_ref().ok_or_else(|| {
                    DataFusionError::Plan(format!("type {sql}: every struct field needs a name"))
                })?;
                named.push((ids.next(), normalised(name), &f.field_type));
            }
            let mut out = Vec::with_capacity(named.len());
            for (id, name, t) in named {
                out.push(Arc::new(NestedField::optional(id, name, nested(t, ids)?)));
            }
            Type::Struct(StructType::new(out))
        }
        SqlType::Array(
            ArrayElemTypeDef::AngleBracket(t)
            | ArrayElemTypeDef::SquareBracket(t, _)
            | ArrayElemTypeDef::Parenthesis(t),
        ) => {
            let id = ids.next();
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id,
                nested(t, ids)?,
                false,
            ))))
        }
        SqlType::Map(k, v) => {
            let (key_id, value_id) = (ids.next(), ids.next());
            let key = nested(k, ids)?;
            let value = nested(v, ids)?;
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(key_id, key)),
                Arc::new(NestedField::map_value_element(value_id, value, false)),
            ))
        }
        other => Type::Primitive(primitive(other, version)?),
    })
}

/// The Iceberg primitive type `sql` names.
pub(super) fn primitive(sql: &SqlType, version: FormatVersion) -> Result<PrimitiveType> {
    let nanos = |precision: &Option<u64>, tz: bool| -> Result<PrimitiveType> {
        match (precision, version, tz) {
            (None | Some(0..=6), _, false) => Ok(PrimitiveType::Timestamp),
            (None | Some(0..=6), _, true) => Ok(PrimitiveType::Timestamptz),
            (Some(9), FormatVersion::V3, false) => Ok(PrimitiveType::TimestampNs),
            (Some(9), FormatVersion::V3, true) => Ok(PrimitiveType::TimestamptzNs),
            (Some(9), _, _) => Err(DataFusionError::Plan(format!(
                "type {sql}: nanosecond timestamps need format version 3"
            ))),
            _ => Err(DataFusionError::Plan(format!(
                "type {sql}: timestamps have precision 6 (microseconds) or 9 (nanoseconds)"
            ))),
        }
    };
    Ok(match sql {
        SqlType::Boolean | SqlType::Bool => PrimitiveType::Boolean,
        SqlType::TinyInt(_)
        | SqlType::SmallInt(_)
        | SqlType::Int2(_)
        | SqlType::Int(_)
        | SqlType::Integer(_)
        | SqlType::Int4(_)
        | SqlType::Int16
        | SqlType::Int32 => PrimitiveType::Int,
        SqlType::BigInt(_) | SqlType::Int8(_) | SqlType::Int64 => PrimitiveType::Long,
        SqlType::Real | SqlType::Float4 | SqlType::Float32 => PrimitiveType::Float,
        SqlType::Float(ExactNumberInfo::None) => PrimitiveType::Float,
        SqlType::Float(ExactNumberInfo::Precision(p)) if *p <= 24 => PrimitiveType::Float,
        SqlType::Float(ExactNumberInfo::Precision(_))
        | SqlType::Double(ExactNumberInfo::None)
        | SqlType::DoublePrecision
        | SqlType::Float8
        | SqlType::Float64 => PrimitiveType::Double,
        SqlType::Decimal(info) | SqlType::Numeric(info) | SqlType::Dec(info) => {
            // Spark's default precision and scale.
            let (precision, scale) = match info {
                ExactNumberInfo::None => (10, 0),
                ExactNumberInfo::Precision(p) => (*p, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => (*p, *s),
            };
            if precision == 0 || precision > MAX_DECIMAL_PRECISION as u64 {
                return Err(DataFusionError::Plan(format!(
                    "type {sql}: decimal precision must be 1 to {MAX_DECIMAL_PRECISION}"
                )));
            }
            if scale < 0 || scale as u64 > precision {
                return Err(DataFusionError::Plan(format!(
                    "type {sql}: decimal scale must be 0 to the precision"
                )));
            }
            PrimitiveType::Decimal {
                precision: precision as u32,
                scale: scale as u32,
            }
        }
        SqlType::Char(_)
        | SqlType::Character(_)
        | SqlType::Varchar(_)
        | SqlType::CharVarying(_)
        | SqlType::CharacterVarying(_)
        | SqlType::Nvarchar(_)
        | SqlType::Text
        | SqlType::String(_) => PrimitiveType::String,
        SqlType::Binary(_) | SqlType::Varbinary(_) | SqlType::Blob(_) | SqlType::Bytea => {
            PrimitiveType::Binary
        }
        SqlType::Uuid => PrimitiveType::Uuid,
        SqlType::Date => PrimitiveType::Date,
        SqlType::Time(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => PrimitiveType::Time,
        SqlType::Timestamp(p, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => {
            nanos(p, false)?
        }
        SqlType::Timestamp(p, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => nanos(p, true)?,
        SqlType::TimestampNtz(p) => nanos(p, false)?,
        SqlType::Custom(name, args) => {
            let name = name.to_string().to_ascii_lowercase();
            match (name.as_str(), args.as_slice()) {
                ("timestamp_ntz", []) => PrimitiveType::Timestamp,
                ("timestamp_ltz" | "timestamptz", []) => PrimitiveType::Timestamptz,
                ("fixed", [n]) => PrimitiveType::Fixed(n.trim().parse().map_err(|_| {
                    DataFusionError::Plan(format!("type {sql}: fixed needs a length"))
                })?),
                _ => return Err(no_type(sql)),
            }
        }
        _ => return Err(no_type(sql)),
    })
}

fn no_type(sql: &SqlType) -> DataFusionError {
    DataFusionError::Plan(format!(
        "type {sql} has no Iceberg type (use BOOLEAN, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p, s), \
         STRING, BINARY, DATE, TIME, TIMESTAMP, TIMESTAMP WITH TIME ZONE, UUID, ARRAY<..>, \
         MAP<.., ..> or STRUCT<name: type, ..>)"
    ))
}

/// The Arrow type a `DEFAULT` value of `t` is cast to before it becomes a literal.
pub(crate) fn arrow_type(t: &PrimitiveType) -> DataType {
    match t {
        PrimitiveType::Boolean => DataType::Boolean,
        PrimitiveType::Int => DataType::Int32,
        PrimitiveType::Long => DataType::Int64,
        PrimitiveType::Float => DataType::Float32,
        PrimitiveType::Double => DataType::Float64,
        PrimitiveType::Decimal { precision, scale } => {
            DataType::Decimal128(*precision as u8, *scale as i8)
        }
        PrimitiveType::Date => DataType::Date32,
        PrimitiveType::Time => DataType::Time64(TimeUnit::Microsecond),
        PrimitiveType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        PrimitiveType::Timestamptz => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
        }
        PrimitiveType::TimestampNs => DataType::Timestamp(TimeUnit::Nanosecond, None),
        PrimitiveType::TimestamptzNs => {
            DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into()))
        }
        PrimitiveType::String | PrimitiveType::Uuid => DataType::Utf8,
        PrimitiveType::Binary | PrimitiveType::Fixed(_) => DataType::Binary,
    }
}

/// The value of the SQL expression `value` (a constant: `42`, `'a'`, `DATE '2024-01-01'`,
/// `-1.5`) as a literal of column `column`'s type `t`.
pub(super) fn default_literal(
    state: &SessionState,
    column: &str,
    t: &Type,
    value: &str,
) -> Result<Literal> {
    let bad = |why: String| DataFusionError::Plan(format!("DEFAULT of column '{column}': {why}"));
    let Type::Primitive(p) = t else {
        return Err(bad(
            "defaults are supported on primitive columns only".into()
        ));
    };
    let target = arrow_type(p);
    let expr = state.create_logical_expr(value, &DFSchema::empty())?;
    if !expr.column_refs().is_empty() {
        return Err(bad(format!("{value} is not a constant")));
    }
    let cast = Expr::Cast(Cast::new(Box::new(expr), target));
    let physical = state.create_physical_expr(cast, &DFSchema::empty())?;
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(ArrowSchema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let array = physical
        .evaluate(&one_row)
        .and_then(|v| v.into_array(1))
        .map_err(|_| bad(format!("{value} is not a value of type {p}")))?;
    let scalar = ScalarValue::try_from_array(&array, 0)?;
    literal(p, &scalar).ok_or_else(|| bad(format!("{value} is not a value of type {p}")))
}

/// `v` as an Iceberg literal of type `t` (`None` for NULL or a value of another type).
pub(crate) fn literal(t: &PrimitiveType, v: &ScalarValue) -> Option<Literal> {
    let p = match (t, v) {
        (_, v) if v.is_null() => return None,
        (PrimitiveType::Boolean, ScalarValue::Boolean(Some(b))) => PrimitiveLiteral::Boolean(*b),
        (PrimitiveType::Int, ScalarValue::Int32(Some(i))) => PrimitiveLiteral::Int(*i),
        (PrimitiveType::Date, ScalarValue::Date32(Some(i))) => PrimitiveLiteral::Int(*i),
        (PrimitiveType::Long, ScalarValue::Int64(Some(i))) => PrimitiveLiteral::Long(*i),
        (PrimitiveType::Time, ScalarValue::Time64Microsecond(Some(i))) => {
            PrimitiveLiteral::Long(*i)
        }
        (
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs,
            ScalarValue::TimestampMicrosecond(Some(i), _)
            | ScalarValue::TimestampNanosecond(Some(i), _),
        ) => PrimitiveLiteral::Long(*i),
        (PrimitiveType::Float, ScalarValue::Float32(Some(f))) => {
            PrimitiveLiteral::Float((*f).into())
        }
        (PrimitiveType::Double, ScalarValue::Float64(Some(f))) => {
            PrimitiveLiteral::Double((*f).into())
        }
        (PrimitiveType::Decimal { .. }, ScalarValue::Decimal128(Some(d), _, _)) => {
            PrimitiveLiteral::Int128(*d)
        }
        (PrimitiveType::String, ScalarValue::Utf8(Some(s))) => PrimitiveLiteral::String(s.clone()),
        (PrimitiveType::Uuid, ScalarValue::Utf8(Some(s))) => {
            PrimitiveLiteral::UInt128(u128::from_be_bytes(crate::uuid_type::parse_uuid(s).ok()?))
        }
        (PrimitiveType::Binary, ScalarValue::Binary(Some(b))) => {
            PrimitiveLiteral::Binary(b.clone())
        }
        (PrimitiveType::Fixed(n), ScalarValue::Binary(Some(b))) if b.len() as u64 == *n => {
            PrimitiveLiteral::Binary(b.clone())
        }
        _ => return None,
    };
    Some(Literal::Primitive(p))
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn ty(sql: &str, version: FormatVersion) -> Result<Type> {
        let dialect = DdlDialect;
        let t = Parser::new(&dialect)
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_data_type())
            .expect(sql);
        iceberg_type(&t, version, &mut FieldIds { last: 10 })
    }

    #[test]
    fn spark_and_sql_type_names_map_to_iceberg_types() {
        use PrimitiveType as P;
        for (sql, want) in [
            ("int", P::Int),
            ("smallint", P::Int),
            ("bigint", P::Long),
            ("long", P::Long),
            ("float", P::Float),
            ("double", P::Double),
            (
                "decimal(12, 3)",
                P::Decimal {
                    precision: 12,
                    scale: 3,
                },
            ),
            (
                "decimal",
                P::Decimal {
                    precision: 10,
                    scale: 0,
                },
            ),
            ("string", P::String),
            ("varchar", P::String),
            ("binary", P::Binary),
            ("date", P::Date),
            ("timestamp", P::Timestamp),
            ("timestamp_ntz", P::Timestamp),
            ("timestamp with time zone", P::Timestamptz),
            ("boolean", P::Boolean),
            ("uuid", P::Uuid),
        ] {
            assert_eq!(
                ty(sql, FormatVersion::V2).unwrap(),
                Type::Primitive(want),
                "{sql}"
            );
        }
        assert_eq!(
            ty("timestamp(9)", FormatVersion::V3).unwrap(),
            Type::Primitive(P::TimestampNs)
        );
        let e = ty("timestamp(9)", FormatVersion::V2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("format version 3"), "{e}");
        assert!(ty("decimal(40, 2)", FormatVersion::V2).is_err());
        assert!(ty("json", FormatVersion::V2)
            .unwrap_err()
            .to_string()
            .contains("no Iceberg type"));
    }

    #[test]
    fn nested_types_number_their_fields_as_java_does() {
        let t = ty(
            "struct<x: double, y: array<int>, z: map<string, bigint>>",
            FormatVersion::V2,
        )
        .unwrap();
        let Type::Struct(s) = t else { panic!("{t:?}") };
        let ids: Vec<i32> = s.fields().iter().map(|f| f.id).collect();
        assert_eq!(ids, [11, 12, 13]);
        let Type::List(l) = s.fields()[1].field_type.as_ref() else {
            panic!()
        };
        assert_eq!(l.element_field.id, 14);
        let Type::Map(m) = s.fields()[2].field_type.as_ref() else {
            panic!()
        };
        assert_eq!((m.key_field.id, m.value_field.id), (15, 16));
        assert!(!m.value_field.required && m.key_field.required);
    }
}
