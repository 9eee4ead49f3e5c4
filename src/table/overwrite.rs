//! The insert forms DataFusion's planner refuses, planned here as DataFusion plans `INSERT`:
//!
//! - Spark's partition clause, `INSERT {INTO | OVERWRITE} [TABLE] t PARTITION (c = v, d) query`:
//!   the query gives the other columns, in the table's order; `c` takes the value `v`. A static
//!   `INSERT OVERWRITE` replaces the rows where every `c = v` (`c IS NULL` for a NULL); in
//!   dynamic mode it replaces the partitions written, as without the clause. A column named
//!   without a value (`d`) comes from the query, as Spark reads it.
//! - Delta's `INSERT {INTO | OVERWRITE} [TABLE] t REPLACE WHERE condition query`: the rows the
//!   condition selects are replaced by the query's, which must all match it.
//!
//! Both become DataFusion's `INSERT` plan with an Iceberg table provider that carries the
//! overwrite filter ([`IcebergTableProvider::with_overwrite_filter`]).

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::Schema;
use datafusion::common::{DFSchema, ScalarValue, TableReference};
use datafusion::datasource::provider_as_source;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    col, lit, DmlStatement, Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, WriteOp,
};
use datafusion::physical_plan::ColumnarValue;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{self, Ident, ObjectName, Statement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::alter::parse::{path, sql_err, word};
use super::IcebergTableProvider;

/// An insert with a partition clause or a `REPLACE WHERE` condition.
pub(crate) struct FilteredInsert {
    /// The table's name, as written (case folded).
    pub(crate) name: Vec<String>,
    /// `INSERT OVERWRITE` (rather than `INSERT INTO`).
    overwrite: bool,
    form: Form,
    /// `EXPLAIN [ANALYZE] [VERBOSE]` in front.
    explain: Option<Explain>,
}

enum Form {
    /// `PARTITION (c = v, d)`: the insert without the clause, and the clause's columns with
    /// their values.
    Partition {
        insert: Box<ast::Insert>,
        values: Vec<(Ident, Option<ast::Expr>)>,
    },
    /// `REPLACE WHERE condition query`.
    ReplaceWhere {
        condition: String,
        query: Box<ast::Query>,
    },
}

/// `sql` when it is an insert with a partition clause or `REPLACE WHERE` (`None` for every
/// other statement).
pub(crate) fn parse(sql: &str) -> Option<Result<FilteredInsert>> {
    let (explain, sql) = strip_explain(sql);
    let found = match replace_where(sql) {
        Some(found) => found,
        None => {
            let Some(DFStatement::Statement(statement)) = super::subquery::one_statement(sql)
            else {
                return None;
            };
            let Statement::Insert(mut insert) = *statement else {
                return None;
            };
            let clause = insert.partitioned.take()?;
            partition_form(&mut insert, clause)
        }
    };
    Some(found.map(|f| FilteredInsert { explain, ..f }))
}

fn partition_form(insert: &mut ast::Insert, clause: Vec<ast::Expr>) -> Result<FilteredInsert> {
    let refuse = |what: &str| {
        DataFusionError::Plan(format!(
            "INSERT ... PARTITION (..): {what}; the clause takes `column = value` or `column` \
             items"
        ))
    };
    let ast::TableObject::TableName(name) = &insert.table else {
        return Err(refuse("the target is not a table name"));
    };
    let name = object_name(name)?;
    if insert.source.is_none() || !insert.after_columns.is_empty() {
        return Err(refuse("the statement needs a query after the clause"));
    }
    let mut values = vec![];
    for item in clause {
        match item {
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } => match *left {
                ast::Expr::Identifier(c) => values.push((c, Some(*right))),
                other => return Err(refuse(&format!("'{other}' is not a column"))),
            },
            ast::Expr::Identifier(c) => values.push((c, None)),
            other => return Err(refuse(&format!("'{other}' is not an item"))),
        }
    }
    Ok(FilteredInsert {
        name,
        overwrite: insert.overwrite,
        form: Form::Partition {
            insert: Box::new(insert.clone()),
            values,
        },
        explain: None,
    })
}

fn object_name(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(super::alter::types::normalised)
                .ok_or_else(|| DataFusionError::Plan(format!("'{name}' is not a table name")))
        })
        .collect()
}

/// `INSERT {INTO | OVERWRITE} [TABLE] t REPLACE WHERE condition query`.
fn replace_where(sql: &str) -> Option<Result<FilteredInsert>> {
    let dialect = GenericDialect {};
    let mut p = Parser::new(&dialect).try_with_sql(sql).ok()?;
    if !word(&mut p, "insert") {
        return None;
    }
    let overwrite = match (word(&mut p, "into"), word(&mut p, "overwrite")) {
        (true, false) => false,
        (false, true) => true,
        _ => return None,
    };
    word(&mut p, "table");
    let name = path(&mut p).ok()?;
    if !(word(&mut p, "replace") && word(&mut p, "where")) {
        return None;
    }
    let parsed = (|| {
        let condition = p.parse_expr().map_err(sql_err)?;
        let query = p.parse_query().map_err(sql_err)?;
        // A trailing semicolon is optional.
        let _ = p.consume_token(&datafusion::sql::sqlparser::tokenizer::Token::SemiColon);
        if p.peek_token().token != datafusion::sql::sqlparser::tokenizer::Token::EOF {
            return Err(format!(
                "unexpected '{}' after the query",
                p.peek_token().token
            ));
        }
        Ok((condition.to_string(), query))
    })();
    Some(match parsed {
        Ok((condition, query)) => Ok(FilteredInsert {
            name,
            overwrite,
            form: Form::ReplaceWhere { condition, query },
            explain: None,
        }),
        Err(e) => Err(DataFusionError::Plan(format!(
            "INSERT ... REPLACE WHERE condition query: {e}"
        ))),
    })
}

impl FilteredInsert {
    /// The table reference of the target.
    pub(crate) fn table_reference(&self) -> TableReference {
        match self.name.as_slice() {
            [t] => TableReference::bare(t.as_str()),
            [s, t] => TableReference::partial(s.as_str(), t.as_str()),
            [c, s, t] => TableReference::full(c.as_str(), s.as_str(), t.as_str()),
            _ => TableReference::bare(self.name.join(".")),
        }
    }

    /// DataFusion's plan of the statement into `provider` (the target's).
    pub(crate) async fn plan(
        self,
        state: &SessionState,
        provider: &IcebergTableProvider,
    ) -> Result<LogicalPlan> {
        let schema = datafusion::catalog::TableProvider::schema(provider);
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let replace = matches!(self.form, Form::ReplaceWhere { .. });
        let reference = self.table_reference();
        let explain = self.explain;
        let (plan, filter) = match self.form {
            Form::ReplaceWhere { condition, query } => {
                // DataFusion's INSERT of the query (its casts and checks), built from a
                // template with the query's own syntax tree in place.
                let template = format!("INSERT INTO {} SELECT 1", quoted(&reference));
                let Some(DFStatement::Statement(statement)) =
                    super::subquery::one_statement(&template)
                else {
                    return Err(DataFusionError::Internal(format!(
                        "the INSERT template {template} does not parse"
                    )));
                };
                let Statement::Insert(mut insert) = *statement else {
                    return Err(DataFusionError::Internal(format!(
                        "the INSERT template {template} parses as something else"
                    )));
                };
                insert.source = Some(query);
                let statement = DFStatement::Statement(Box::new(Statement::Insert(insert)));
                let plan = state.statement_to_plan(statement).await?;
                let filter = state.create_logical_expr(&condition, &df_schema)?;
                (plan, Some(filter))
            }
            Form::Partition { mut insert, values } => {
                let fold = state
                    .config()
                    .options()
                    .sql_parser
                    .enable_ident_normalization;
                let mut statics: Vec<(usize, ScalarValue)> = vec![];
                let mut named = vec![];
                for (ident, value) in values {
                    let name = match (fold, ident.quote_style) {
                        (true, None) => ident.value.to_lowercase(),
                        _ => ident.value.clone(),
                    };
                    let index = schema.index_of(&name).map_err(|_| {
                        DataFusionError::Plan(format!(
                            "INSERT ... PARTITION (..): table '{}' has no column '{name}'",
                            self.name.join(".")
                        ))
                    })?;
                    if named.contains(&index) {
                        return Err(DataFusionError::Plan(format!(
                            "INSERT ... PARTITION (..): column '{name}' is named twice"
                        )));
                    }
                    named.push(index);
                    if let Some(v) = value {
                        let ty = schema.field(index).data_type();
                        statics.push((index, constant(state, &v, ty)?));
                    }
                }
                let static_name = |n: &str| {
                    statics
                        .iter()
                        .any(|(i, _)| schema.field(*i).name().as_str() == n)
                };
                if insert.columns.is_empty() {
                    // The query gives every column without a value, in the table's order.
                    insert.columns = schema
                        .fields()
                        .iter()
                        .filter(|f| !static_name(f.name()))
                        .map(|f| ObjectName::from(vec![Ident::with_quote('"', f.name())]))
                        .collect();
                } else if let Some(c) = insert.columns.iter().find(|c| {
                    let name = c.0.last().and_then(|p| p.as_ident());
                    name.is_some_and(|i| match (fold, i.quote_style) {
                        (true, None) => static_name(&i.value.to_lowercase()),
                        _ => static_name(&i.value),
                    })
                }) {
                    return Err(DataFusionError::Plan(format!(
                        "INSERT ... PARTITION (..): column {c} has a value in the clause and \
                         is in the column list too"
                    )));
                }
                insert.overwrite = false;
                let statement = DFStatement::Statement(Box::new(Statement::Insert(*insert)));
                let plan = with_values(state.statement_to_plan(statement).await?, &statics)?;
                let filter = conjunction(statics.iter().map(|(i, v)| {
                    let c = col(datafusion::common::Column::from_name(
                        schema.field(*i).name(),
                    ));
                    match v.is_null() {
                        true => c.is_null(),
                        false => c.eq(lit(v.clone())),
                    }
                }));
                (plan, filter)
            }
        };
        let LogicalPlan::Dml(dml) = plan else {
            return Err(DataFusionError::Internal(
                "an INSERT planned as something else".into(),
            ));
        };
        if !self.overwrite && !replace {
            return explained(explain, LogicalPlan::Dml(dml));
        }
        // `REPLACE WHERE` and a static overwrite replace the rows of the filter; a dynamic one
        // the partitions written (the clause's values only narrow the rows written).
        let target = match filter {
            Some(f) if replace || !dynamic(state)? => provider.clone().with_overwrite_filter(f),
            _ => provider.clone(),
        };
        explained(
            explain,
            LogicalPlan::Dml(DmlStatement::new(
                dml.table_name,
                provider_as_source(Arc::new(target)),
                WriteOp::Insert(InsertOp::Overwrite),
                dml.input,
            )),
        )
    }
}

/// `plan`, explained when the statement was `EXPLAIN [ANALYZE] [VERBOSE]`.
fn explained(explain: Option<Explain>, plan: LogicalPlan) -> Result<LogicalPlan> {
    match explain {
        None => Ok(plan),
        Some(Explain { analyze, verbose }) => LogicalPlanBuilder::from(plan)
            .explain(verbose, analyze)?
            .build(),
    }
}

/// The options of an `EXPLAIN` in front of the statement.
#[derive(Clone, Copy)]
struct Explain {
    analyze: bool,
    verbose: bool,
}

/// `sql` without a leading `EXPLAIN [ANALYZE] [VERBOSE]`, and those options.
fn strip_explain(sql: &str) -> (Option<Explain>, &str) {
    fn word<'a>(s: &'a str, w: &str) -> Option<&'a str> {
        let s = s.trim_start();
        let head = s.get(..w.len())?;
        let rest = &s[w.len()..];
        (head.eq_ignore_ascii_case(w) && rest.starts_with(char::is_whitespace)).then_some(rest)
    }
    let Some(mut rest) = word(sql, "explain") else {
        return (None, sql);
    };
    let mut options = Explain {
        analyze: false,
        verbose: false,
    };
    if let Some(r) = word(rest, "analyze") {
        (options.analyze, rest) = (true, r);
    }
    if let Some(r) = word(rest, "verbose") {
        (options.verbose, rest) = (true, r);
    }
    (Some(options), rest)
}

/// Whether the session's `INSERT OVERWRITE` replaces the partitions written.
fn dynamic(state: &SessionState) -> Result<bool> {
    Ok(matches!(
        crate::dml::OverwriteScope::of_session(state)?,
        crate::dml::OverwriteScope::Partitions
    ))
}

/// `reference` as SQL, each part quoted.
pub(crate) fn quoted(reference: &TableReference) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    match reference {
        TableReference::Bare { table } => q(table),
        TableReference::Partial { schema, table } => format!("{}.{}", q(schema), q(table)),
        TableReference::Full {
            catalog,
            schema,
            table,
        } => format!("{}.{}.{}", q(catalog), q(schema), q(table)),
    }
}

/// The value of the constant expression `value`, as type `ty`.
fn constant(
    state: &SessionState,
    value: &ast::Expr,
    ty: &arrow::datatypes::DataType,
) -> Result<ScalarValue> {
    let empty = DFSchema::empty();
    let not_constant = |e: DataFusionError| {
        DataFusionError::Plan(format!(
            "INSERT ... PARTITION (..): '{value}' is not a constant of type {ty}: {}",
            e.strip_backtrace()
        ))
    };
    let expr = state
        .create_logical_expr(&value.to_string(), &empty)
        .and_then(|e| e.cast_to(ty, &empty))
        .map_err(not_constant)?;
    let physical = state
        .create_physical_expr(expr, &empty)
        .map_err(not_constant)?;
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let value = match physical.evaluate(&batch).map_err(not_constant)? {
        ColumnarValue::Scalar(s) => s,
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
    };
    Ok(value)
}

/// The insert `plan` with the columns at `statics` given their values.
fn with_values(plan: LogicalPlan, statics: &[(usize, ScalarValue)]) -> Result<LogicalPlan> {
    let LogicalPlan::Dml(dml) = plan else {
        return Ok(plan);
    };
    let input = dml.input.as_ref().clone();
    let exprs: Vec<Expr> = input
        .schema()
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| match statics.iter().find(|(s, _)| *s == i) {
            Some((_, v)) => lit(v.clone()).alias(f.name()),
            None => col(datafusion::common::Column::from_name(f.name())),
        })
        .collect();
    let input = LogicalPlanBuilder::from(input).project(exprs)?.build()?;
    Ok(LogicalPlan::Dml(DmlStatement::new(
        dml.table_name,
        dml.target,
        dml.op,
        Arc::new(input),
    )))
}
