//! Iceberg's `uuid` as Arrow's canonical `arrow.uuid` extension type.
//!
//! A uuid column is a `FixedSizeBinary(16)` whose field carries the extension name, so results
//! print as `8-4-4-4-12` text wherever the formatter knows the type (the CLI, `DataFrame::show`'s
//! `to_string`, pyarrow). SQL names it the way users write it:
//!
//! - `UUID` in `CREATE TABLE` ([`IcebergTypePlanner`]);
//! - a uuid compared with text (`id = '1571effb-…'`, `id IN ('…', '…')`, `BETWEEN`), and text
//!   cast to a uuid (`INSERT INTO t VALUES ('…')`, `UPDATE t SET id = '…'`), parse the text
//!   ([`UuidCoercion`], an analyzer rule that runs before DataFusion's type coercion, which has no
//!   common type for the two); constant text folds into a 16-byte literal, which prunes files and
//!   partitions as any literal does;
//! - `CAST(id AS VARCHAR)` is the canonical text;
//! - [`to_uuid`] parses text explicitly.
//!
//! Text that is not a UUID fails the statement with one line naming it, as DuckDB and Trino do.

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeBinaryArray, FixedSizeBinaryBuilder};
use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::expr::{InList, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::logical_expr::{
    Between, BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator,
    ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, DataType as SqlType, Expr as SqlExpr, SetExpr, Statement, TableFactor,
    TableObject, TypedString, Value as SqlValue,
};

/// The canonical extension name Arrow gives uuid fields.
pub const UUID_EXTENSION: &str = "arrow.uuid";
const EXTENSION_KEY: &str = "ARROW:extension:name";

/// `field` (a `FixedSizeBinary(16)`) marked as a uuid.
pub fn uuid_field(field: Field) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.insert(EXTENSION_KEY.to_string(), UUID_EXTENSION.to_string());
    field.with_metadata(metadata)
}

/// Whether `field` is a uuid (`FixedSizeBinary(16)` marked `arrow.uuid`).
pub fn is_uuid(field: &Field) -> bool {
    field.data_type() == &DataType::FixedSizeBinary(16)
        && field.metadata().get(EXTENSION_KEY).map(String::as_str) == Some(UUID_EXTENSION)
}

/// Plans the SQL types DataFusion has no Arrow type for: `UUID` becomes a uuid field.
#[derive(Debug, Default)]
pub struct IcebergTypePlanner;

impl TypePlanner for IcebergTypePlanner {
    fn plan_type_field(&self, sql_type: &SqlType) -> Result<Option<FieldRef>> {
        Ok(match sql_type {
            SqlType::Uuid => Some(Arc::new(uuid_field(Field::new(
                "",
                DataType::FixedSizeBinary(16),
                true,
            )))),
            _ => None,
        })
    }
}

/// The analyzer rule that lets text stand for uuids: comparisons, `IN` lists and `BETWEEN` of a
/// uuid with text parse the text, and text cast to a uuid (`UUID '…'`, `CAST(… AS UUID)`) parses
/// it too; a uuid cast to text is its canonical form.
/// It must run before DataFusion's `TypeCoercion`; [`crate::session_state_builder`] places it so.
#[derive(Debug, Default)]
pub struct UuidCoercion;

impl AnalyzerRule for UuidCoercion {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(coerce_node).data()
    }

    fn name(&self) -> &str {
        "iceberg_uuid_coercion"
    }
}

fn coerce_node(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let mut schema = DFSchema::empty();
    for input in node.inputs() {
        schema.merge(input.schema());
    }
    let names = NamePreserver::new(&node);
    let rewritten = node.map_expressions(|e| {
        let saved = names.save(&e);
        e.transform_up(|e| coerce_expr(e, &schema))
            .map(|t| t.update_data(|e| saved.restore(e)))
    })?;
    if rewritten.transformed {
        rewritten.map_data(|plan| plan.recompute_schema())
    } else {
        Ok(rewritten)
    }
}

fn coerce_expr(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let uuid = |e: &Expr| e.to_field(schema).is_ok_and(|(_, f)| is_uuid(&f));
    let text = |e: &Expr| {
        e.get_type(schema)
            .is_ok_and(|t| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
    };
    Ok(match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(op) => {
            if uuid(&left) && text(&right) {
                Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    left,
                    op,
                    Box::new(parsed(*right)),
                )))
            } else if text(&left) && uuid(&right) {
                Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(parsed(*left)),
                    op,
                    right,
                )))
            } else {
                Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right }))
            }
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) if uuid(&expr) && list.iter().any(&text) => {
            let list = list
                .into_iter()
                .map(|e| if text(&e) { parsed(e) } else { e })
                .collect();
            Transformed::yes(Expr::InList(InList::new(expr, list, negated)))
        }
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) if uuid(&expr) && (text(&low) || text(&high)) => {
            let low = if text(&low) { parsed(*low) } else { *low };
            let high = if text(&high) { parsed(*high) } else { *high };
            Transformed::yes(Expr::Between(Between::new(
                expr,
                negated,
                Box::new(low),
                Box::new(high),
            )))
        }
        // Text cast to a uuid (`UUID '…'`, `CAST(… AS UUID)`); other 16-byte fixed types are
        // not uuids.
        Expr::Cast(cast) if is_uuid(&cast.field) && text(&cast.expr) => {
            Transformed::yes(parsed(*cast.expr))
        }
        Expr::Cast(cast)
            if matches!(
                cast.field.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) && uuid(&cast.expr) =>
        {
            let target = cast.field.data_type().clone();
            let text =
                Expr::ScalarFunction(ScalarFunction::new_udf(uuid_to_string(), vec![*cast.expr]));
            Transformed::yes(match target {
                DataType::Utf8 => text,
                other => Expr::Cast(datafusion::logical_expr::Cast::new(Box::new(text), other)),
            })
        }
        other => Transformed::no(other),
    })
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

fn parsed(text: Expr) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(to_uuid(), vec![text]))
}

/// `builder` with [`to_uuid`], [`uuid_to_string`] and `iceberg_bucket` (Iceberg's bucket
/// transform) among its functions (DataFusion's own
/// functions stay): plans that call them decode wherever they run.
pub(crate) fn with_functions(mut builder: SessionStateBuilder) -> SessionStateBuilder {
    let functions = builder.scalar_functions().get_or_insert_with(|| {
        datafusion::execution::SessionStateDefaults::default_scalar_functions()
    });
    functions.extend([
        to_uuid(),
        uuid_to_string(),
        crate::file_planning::bucket::iceberg_bucket(),
        crate::physical_plan::write::iceberg_require(),
    ]);
    builder
}

/// `to_uuid(text)`: the uuid a text names (hyphenated, 32 hex digits, braced or `urn:uuid:`),
/// NULL for NULL; other text fails the statement.
pub fn to_uuid() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(ToUuid::new())));
    Arc::clone(&UDF)
}

/// `uuid_to_string(uuid)`: the canonical `8-4-4-4-12` text of a uuid (what `CAST(u AS VARCHAR)`
/// becomes).
pub fn uuid_to_string() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(UuidToString::new())));
    Arc::clone(&UDF)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToUuid {
    signature: Signature,
}

impl ToUuid {
    fn new() -> Self {
        Self {
            signature: Signature::string(1, Volatility::Immutable),
        }
    }
}

/// The uuid `text` names, or a one-line error.
pub(crate) fn parse_uuid(text: &str) -> Result<[u8; 16]> {
    uuid::Uuid::parse_str(text.trim())
        .map(|u| u.into_bytes())
        .map_err(|_| DataFusionError::Execution(format!("invalid UUID '{text}'")))
}

impl ScalarUDFImpl for ToUuid {
    fn name(&self) -> &str {
        "to_uuid"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::FixedSizeBinary(16))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(uuid_field(Field::new(
            self.name(),
            DataType::FixedSizeBinary(16),
            nullable,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(
                "to_uuid takes one argument".to_string(),
            ));
        };
        match arg {
            ColumnarValue::Scalar(s) => {
                let text = match s {
                    ScalarValue::Utf8(t) | ScalarValue::LargeUtf8(t) | ScalarValue::Utf8View(t) => {
                        t
                    }
                    other => {
                        return Err(DataFusionError::Plan(format!(
                            "to_uuid takes text, not {}",
                            other.data_type()
                        )))
                    }
                };
                let bytes = text.as_deref().map(parse_uuid).transpose()?;
                Ok(ColumnarValue::Scalar(ScalarValue::FixedSizeBinary(
                    16,
                    bytes.map(|b| b.to_vec()),
                )))
            }
            ColumnarValue::Array(array) => Ok(ColumnarValue::Array(parse_array(array)?)),
        }
    }
}

fn parse_array(array: &ArrayRef) -> Result<ArrayRef> {
    let mut out = FixedSizeBinaryBuilder::with_capacity(array.len(), 16);
    let mut push = |v: Option<&str>| -> Result<()> {
        match v {
            Some(t) => out.append_value(parse_uuid(t)?)?,
            None => out.append_null(),
        }
        Ok(())
    };
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().iter().try_for_each(&mut push)?,
        DataType::LargeUtf8 => array.as_string::<i64>().iter().try_for_each(&mut push)?,
        DataType::Utf8View => array.as_string_view().iter().try_for_each(&mut push)?,
        other => {
            return Err(DataFusionError::Plan(format!(
                "to_uuid takes text, not {other}"
            )))
        }
    }
    Ok(Arc::new(out.finish()))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct UuidToString {
    signature: Signature,
}

impl UuidToString {
    fn new() -> Self {
        Self {
            signature: Signature::exact(vec![DataType::FixedSizeBinary(16)], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for UuidToString {
    fn name(&self) -> &str {
        "uuid_to_string"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(
                "uuid_to_string takes one argument".to_string(),
            ));
        };
        let text = |b: &[u8]| -> Result<String> {
            let bytes: [u8; 16] = b.try_into().map_err(|_| {
                DataFusionError::Execution(format!("a uuid has 16 bytes, not {}", b.len()))
            })?;
            Ok(uuid::Uuid::from_bytes(bytes).to_string())
        };
        match arg {
            ColumnarValue::Scalar(ScalarValue::FixedSizeBinary(16, v)) => Ok(
                ColumnarValue::Scalar(ScalarValue::Utf8(v.as_deref().map(text).transpose()?)),
            ),
            ColumnarValue::Scalar(other) => Err(DataFusionError::Plan(format!(
                "uuid_to_string takes a uuid, not {}",
                other.data_type()
            ))),
            ColumnarValue::Array(array) => {
                let array = array
                    .as_any()
                    .downcast_ref::<FixedSizeBinaryArray>()
                    .ok_or_else(|| {
                        DataFusionError::Plan(format!(
                            "uuid_to_string takes a uuid, not {}",
                            array.data_type()
                        ))
                    })?;
                let strings = array
                    .iter()
                    .map(|v| v.map(text).transpose())
                    .collect::<Result<arrow::array::StringArray>>()?;
                Ok(ColumnarValue::Array(Arc::new(strings)))
            }
        }
    }
}

/// Whether `statement` writes text literals that may be headed for uuid columns (`INSERT ...
/// VALUES`, `UPDATE ... SET`): DataFusion's SQL planner checks those against the column types
/// before any analyzer runs, so [`text_for_uuids`] types them first.
pub(crate) fn writes_text(statement: &DFStatement) -> bool {
    let DFStatement::Statement(s) = statement else {
        return false;
    };
    match s.as_ref() {
        Statement::Insert(insert) => {
            insert
                .source
                .as_ref()
                .is_some_and(|q| match q.body.as_ref() {
                    SetExpr::Values(values) => values.rows.iter().any(|r| r.iter().any(is_text)),
                    _ => false,
                })
        }
        Statement::Update(update) => update.assignments.iter().any(|a| is_text(&a.value)),
        _ => false,
    }
}

fn is_text(e: &SqlExpr) -> bool {
    matches!(e, SqlExpr::Value(v) if matches!(v.value, SqlValue::SingleQuotedString(_)))
}

/// `statement` with the text literals written into uuid columns of its target typed as `UUID
/// '...'`, or `None` when it writes none. The target's columns come from `ctx`'s catalog.
pub(crate) async fn text_for_uuids(
    ctx: &SessionContext,
    statement: &DFStatement,
) -> Result<Option<String>> {
    if !writes_text(statement) {
        return Ok(None);
    }
    let DFStatement::Statement(s) = statement else {
        return Ok(None);
    };
    let mut s = s.as_ref().clone();
    let uuid_columns = |schema: SchemaRef| -> Vec<String> {
        schema
            .fields()
            .iter()
            .filter(|f| is_uuid(f))
            .map(|f| f.name().clone())
            .collect()
    };
    let mut changed = false;
    let mut type_it = |e: &mut SqlExpr| {
        if let SqlExpr::Value(v) = e {
            if matches!(v.value, SqlValue::SingleQuotedString(_)) {
                *e = SqlExpr::TypedString(TypedString {
                    data_type: SqlType::Uuid,
                    value: v.clone(),
                    uses_odbc_syntax: false,
                });
                changed = true;
            }
        }
    };
    match &mut s {
        Statement::Insert(insert) => {
            let TableObject::TableName(name) = &insert.table else {
                return Ok(None);
            };
            let Ok(table) = ctx.table_provider(name.to_string()).await else {
                return Ok(None);
            };
            let schema = table.schema();
            let uuids = uuid_columns(Arc::clone(&schema));
            if uuids.is_empty() {
                return Ok(None);
            }
            let targets: Vec<String> = if insert.columns.is_empty() {
                schema.fields().iter().map(|f| f.name().clone()).collect()
            } else {
                insert
                    .columns
                    .iter()
                    .map(|c| {
                        c.0.last()
                            .and_then(|p| p.as_ident())
                            .map(crate::ident::normalised)
                    })
                    .collect::<Option<_>>()
                    .unwrap_or_default()
            };
            let Some(SetExpr::Values(values)) = insert.source.as_mut().map(|q| q.body.as_mut())
            else {
                return Ok(None);
            };
            for row in values.rows.iter_mut() {
                for (value, target) in row.iter_mut().zip(&targets) {
                    if uuids.contains(target) {
                        type_it(value);
                    }
                }
            }
        }
        Statement::Update(update) => {
            let TableFactor::Table { name, .. } = &update.table.relation else {
                return Ok(None);
            };
            let Ok(table) = ctx.table_provider(name.to_string()).await else {
                return Ok(None);
            };
            let uuids = uuid_columns(table.schema());
            for a in update.assignments.iter_mut() {
                let AssignmentTarget::ColumnName(column) = &a.target else {
                    continue;
                };
                let column = column
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .map(crate::ident::normalised);
                if column.is_some_and(|c| uuids.contains(&c)) {
                    type_it(&mut a.value);
                }
            }
        }
        _ => return Ok(None),
    }
    Ok(changed.then(|| s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_and_refuses_the_rest() {
        let canonical = "1571effb-facd-42a3-9e6f-8c3a4b5c6d7e";
        let bytes = parse_uuid(canonical).unwrap();
        assert_eq!(
            parse_uuid("1571EFFBFACD42A39E6F8C3A4B5C6D7E").unwrap(),
            bytes
        );
        assert_eq!(parse_uuid(&format!("{{{canonical}}}")).unwrap(), bytes);
        assert_eq!(parse_uuid(&format!("urn:uuid:{canonical}")).unwrap(), bytes);
        let err = parse_uuid("1571effb").unwrap_err().to_string();
        assert!(err.contains("invalid UUID '1571effb'"), "{err}");
    }

    #[test]
    fn arrays_parse_with_nulls() {
        let input: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![
            Some("00000000-0000-0000-0000-000000000001"),
            None,
        ]));
        let out = parse_array(&input).unwrap();
        let out = out.as_any().downcast_ref::<FixedSizeBinaryArray>().unwrap();
        assert_eq!(out.value(0)[15], 1);
        assert!(out.is_null(1));
        let bad: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["nope"]));
        assert!(parse_array(&bad).is_err());
    }
}
