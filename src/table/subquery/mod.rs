//! `DELETE` and `UPDATE` whose conditions hold subqueries, and `UPDATE ... FROM`, run as the
//! `MERGE` each one equals: MERGE's machinery then does the work (one join of the target's live
//! rows with a source, spilling under the memory pool, both write modes, the cardinality rule,
//! the self-check and serializable validation).
//!
//! ```text
//!  DELETE FROM t WHERE k IN (SELECT x FROM s) AND c
//!    → MERGE INTO t USING (SELECT DISTINCT x FROM s) src ON t.k = src.x
//!      WHEN MATCHED AND c THEN DELETE
//!  DELETE FROM t WHERE k NOT IN (SELECT x FROM s) AND c          (s has rows, no NULL x)
//!    → ... WHEN NOT MATCHED BY SOURCE AND t.k IS NOT NULL AND c THEN DELETE
//!  DELETE FROM t WHERE [NOT] EXISTS (SELECT .. FROM s WHERE s.x = t.k AND p) AND c
//!    → MERGE INTO t USING (SELECT DISTINCT s.x FROM s WHERE p) src ON t.k = src.x
//!      WHEN [NOT] MATCHED [BY SOURCE] AND c THEN DELETE
//!  UPDATE t SET a = s.b FROM s WHERE t.k = s.k
//!    → MERGE INTO t USING s ON t.k = s.k WHEN MATCHED THEN UPDATE SET a = s.b
//! ```
//! SQL's three-valued logic holds: `k NOT IN (subquery)` is never true when the subquery yields
//! a NULL (nothing changes), and true for every row, NULL keys too, when it yields no row;
//! both are settled by one count over the subquery before the statement runs. Uncorrelated
//! scalar subqueries and `EXISTS` are evaluated once, to their value. The distinct source keys
//! match a target row at most once; an `UPDATE ... FROM` whose target row matches two source
//! rows fails as MERGE does, and nothing is changed.
//!
//! Refused with one line (nothing changed): a subquery inside `OR` or `NOT` of a larger
//! condition, two `IN`/`EXISTS` subqueries in one condition, correlated conditions other than
//! equalities, and correlated scalar subqueries.

mod correlation;
mod scalar;
mod sql;

use std::ops::ControlFlow;

use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    Assignment, AssignmentTarget, Expr, FromTable, Query, Statement, TableFactor, TableWithJoins,
    UnaryOperator, UpdateTableFromKind, Visit, VisitMut, Visitor,
};

use crate::ident::normalised;

use correlation::correlation;
use scalar::{scalar_value, ReplaceScalars, ScalarSubqueries};
use sql::{conjuncts, name_parts, refuse};

/// The source's key columns, named apart from any column of the target.
const KEY: &str = "__iceberg_key";

/// The source's alias in the MERGE.
const SOURCE: &str = "__iceberg_src";

/// What the statement does to the rows its condition selects.
enum Action {
    Delete,
    Update(Vec<Assignment>),
}

/// A `DELETE` or `UPDATE` of one table.
struct Dml {
    /// The target as written (name and alias), for `MERGE INTO`.
    target: String,
    /// The names the target's columns are qualified by inside the statement: its alias, or
    /// its name and the name's last part.
    qualifiers: Vec<Vec<String>>,
    /// Whether DataFusion's `DELETE`, which ignores an alias, reads the statement's column
    /// references as written (no alias, or the alias is the table's own name).
    plain_delete: bool,
    action: Action,
    selection: Option<Expr>,
}

/// Runs `sql` when it is a `DELETE`/`UPDATE` whose condition holds a subquery, or an
/// `UPDATE ... FROM`, as the MERGE it equals (see the module docs); `None` for every other
/// statement.
pub(crate) async fn run(ctx: &SessionContext, sql: &str) -> Result<Option<DataFrame>> {
    match one_statement(sql) {
        Some(DFStatement::Statement(statement)) => match translate(ctx, *statement).await? {
            Some(sql) => {
                log::debug!("running as: {sql}");
                Ok(Some(ctx.sql(&sql).await?))
            }
            None => Ok(None),
        },
        // `EXPLAIN [ANALYZE]` of such a statement explains the MERGE it runs as.
        Some(DFStatement::Explain(mut explain)) => {
            let DFStatement::Statement(inner) = explain.statement.as_ref() else {
                return Ok(None);
            };
            let Some(sql) = translate(ctx, inner.as_ref().clone()).await? else {
                return Ok(None);
            };
            let Some(statement) = one_statement(&sql) else {
                return Err(DataFusionError::Internal(format!("re-parsing {sql}")));
            };
            *explain.statement = statement;
            Ok(Some(ctx.sql(&explain.to_string()).await?))
        }
        _ => Ok(None),
    }
}

/// The statement a `DELETE`/`UPDATE` with subqueries, or an `UPDATE ... FROM`, runs as (see the
/// module docs); `None` for every other statement.
async fn translate(ctx: &SessionContext, statement: Statement) -> Result<Option<String>> {
    let (dml, from) = match statement {
        Statement::Delete(d) => {
            let plain = d.tables.is_empty()
                && d.using.is_none()
                && d.returning.is_none()
                && d.output.is_none()
                && d.order_by.is_empty()
                && d.limit.is_none();
            let tables = match d.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            if !plain || !d.selection.as_ref().is_some_and(has_subquery) {
                return Ok(None);
            }
            let Some((target, qualifiers, plain_delete)) = target_of(&tables) else {
                return Ok(None);
            };
            let dml = Dml {
                target,
                qualifiers,
                plain_delete,
                action: Action::Delete,
                selection: d.selection,
            };
            (dml, None)
        }
        Statement::Update(u) => {
            let plain = u.returning.is_none()
                && u.output.is_none()
                && u.or.is_none()
                && u.order_by.is_empty()
                && u.limit.is_none();
            let with_subquery = u.selection.as_ref().is_some_and(has_subquery)
                || u.assignments.iter().any(|a| has_subquery(&a.value));
            if !plain || (u.from.is_none() && !with_subquery) {
                return Ok(None);
            }
            let Some((target, qualifiers, plain_delete)) =
                target_of(std::slice::from_ref(&u.table))
            else {
                return Ok(None);
            };
            let from = match u.from {
                Some(UpdateTableFromKind::BeforeSet(f) | UpdateTableFromKind::AfterSet(f)) => {
                    Some(f)
                }
                None => None,
            };
            let dml = Dml {
                target,
                qualifiers,
                plain_delete,
                action: Action::Update(u.assignments),
                selection: u.selection,
            };
            (dml, from)
        }
        _ => return Ok(None),
    };
    let dml = with_scalar_values(ctx, dml).await?;
    Ok(Some(match from {
        Some(from) => update_from(&dml, &from)?,
        None => match as_merge(ctx, &dml).await? {
            Planned::Sql(sql) => sql,
            Planned::NoRows => "SELECT arrow_cast(0, 'UInt64') AS count".to_string(),
        },
    }))
}

/// Whether `statement` is one [`crate::IcebergSession::sql`] runs itself rather than hand to
/// DataFusion as it is: `DELETE`/`UPDATE` with subqueries, `UPDATE ... FROM`, `DROP TABLE`,
/// `CREATE OR REPLACE [EXTERNAL] TABLE`, `EXPLAIN` (distributed plans), and `EXPLAIN ANALYZE` of the
/// others.
pub(crate) fn runs_in_session(statement: &DFStatement) -> bool {
    if crate::table::metadata_columns::names_metadata_column(statement) {
        return true;
    }
    match statement {
        // A session with workers explains queries as they are distributed.
        DFStatement::Explain(e) => !e.options.analyze || runs_in_session(&e.statement),
        DFStatement::CreateExternalTable(c) => c.or_replace,
        DFStatement::Statement(s) => match s.as_ref() {
            Statement::Delete(d) => d.selection.as_ref().is_some_and(has_subquery),
            Statement::Update(u) => {
                crate::uuid_type::writes_text(statement)
                    || u.from.is_some()
                    || u.selection.as_ref().is_some_and(has_subquery)
                    || u.assignments.iter().any(|a| has_subquery(&a.value))
            }
            Statement::Drop {
                object_type: datafusion::sql::sqlparser::ast::ObjectType::Table,
                ..
            } => true,
            Statement::CreateTable(c) => c.or_replace,
            // Text written into uuid columns is typed first.
            Statement::Insert(_) => crate::uuid_type::writes_text(statement),
            _ => false,
        },
        _ => false,
    }
}

/// `sql` parsed, when it is one statement DataFusion's parser reads.
pub(crate) fn one_statement(sql: &str) -> Option<DFStatement> {
    let mut statements = DFParser::parse_sql(sql).ok()?;
    match statements.len() {
        1 => statements.pop_front(),
        _ => None,
    }
}

/// The target of a single-table statement, and the qualifiers of its columns.
fn target_of(tables: &[TableWithJoins]) -> Option<(String, Vec<Vec<String>>, bool)> {
    let [table] = tables else { return None };
    if !table.joins.is_empty() {
        return None;
    }
    let TableFactor::Table { name, alias, .. } = &table.relation else {
        return None;
    };
    let parts = name_parts(name)?;
    let qualifiers = match alias {
        Some(a) => vec![vec![normalised(&a.name)]],
        None => (0..parts.len()).map(|i| parts[i..].to_vec()).collect(),
    };
    let target = match alias {
        Some(a) => format!("{name} AS {}", a.name),
        None => name.to_string(),
    };
    let plain_delete = alias
        .as_ref()
        .is_none_or(|a| parts.last() == Some(&normalised(&a.name)));
    Some((target, qualifiers, plain_delete))
}

/// Whether `e` holds a subquery of any kind.
fn has_subquery(e: &Expr) -> bool {
    Visit::visit(e, &mut FindSubquery).is_break()
}

struct FindSubquery;

impl Visitor for FindSubquery {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        match e {
            Expr::Subquery(_) | Expr::InSubquery { .. } | Expr::Exists { .. } => {
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        }
    }
}

/// `dml` with each uncorrelated scalar subquery replaced by its value.
async fn with_scalar_values(ctx: &SessionContext, mut dml: Dml) -> Result<Dml> {
    let mut finder = ScalarSubqueries {
        depth: 0,
        found: vec![],
    };
    if let Some(s) = &dml.selection {
        let _ = Visit::visit(s, &mut finder);
    }
    if let Action::Update(assignments) = &dml.action {
        for a in assignments {
            let _ = Visit::visit(&a.value, &mut finder);
        }
    }
    if finder.found.is_empty() {
        return Ok(dml);
    }
    let mut values = vec![];
    for q in &finder.found {
        values.push(scalar_value(ctx, q).await?);
    }
    let mut replace = ReplaceScalars {
        depth: 0,
        values: values.into_iter(),
    };
    if let Some(s) = &mut dml.selection {
        let _ = VisitMut::visit(s, &mut replace);
    }
    if let Action::Update(assignments) = &mut dml.action {
        for a in assignments {
            let _ = VisitMut::visit(&mut a.value, &mut replace);
        }
    }
    Ok(dml)
}

/// What a statement with a set subquery becomes.
enum Planned {
    /// The statement to run instead.
    Sql(String),
    /// Its condition is true for no row.
    NoRows,
}

/// A set subquery conjunct: `[NOT] IN (subquery)` or `[NOT] EXISTS (subquery)`.
enum SetCondition {
    In {
        expr: Box<Expr>,
        subquery: Query,
        negated: bool,
    },
    Exists {
        subquery: Query,
        negated: bool,
    },
}

fn set_condition(e: &Expr) -> Option<SetCondition> {
    match e {
        Expr::InSubquery {
            expr,
            subquery,
            negated,
        } => Some(SetCondition::In {
            expr: expr.clone(),
            subquery: subquery.as_ref().clone(),
            negated: *negated,
        }),
        Expr::Exists { subquery, negated } => Some(SetCondition::Exists {
            subquery: subquery.as_ref().clone(),
            negated: *negated,
        }),
        Expr::Nested(inner) => set_condition(inner),
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr,
        } => match set_condition(expr)? {
            SetCondition::In {
                expr,
                subquery,
                negated,
            } => Some(SetCondition::In {
                expr,
                subquery,
                negated: !negated,
            }),
            SetCondition::Exists { subquery, negated } => Some(SetCondition::Exists {
                subquery,
                negated: !negated,
            }),
        },
        _ => None,
    }
}

/// `AND`-joined conditions.
fn and_all(exprs: &[Expr]) -> Option<String> {
    (!exprs.is_empty()).then(|| {
        exprs
            .iter()
            .map(|e| format!("({e})"))
            .collect::<Vec<_>>()
            .join(" AND ")
    })
}

/// The MERGE clause's action.
fn action_sql(action: &Action) -> String {
    match action {
        Action::Delete => "DELETE".to_string(),
        Action::Update(assignments) => format!("UPDATE SET {}", set_list(assignments)),
    }
}

/// `col = value, ...` with the columns unqualified (MERGE assigns the target's columns).
fn set_list(assignments: &[Assignment]) -> String {
    assignments
        .iter()
        .map(|a| {
            let column = match &a.target {
                AssignmentTarget::ColumnName(n) => {
                    n.0.last()
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| n.to_string())
                }
                AssignmentTarget::Tuple(_) => a.target.to_string(),
            };
            format!("{column} = {}", a.value)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statement without its set condition: the other conjuncts, run as written.
fn without_condition(dml: &Dml, rest: &[Expr]) -> String {
    let filter = and_all(rest)
        .map(|w| format!(" WHERE {w}"))
        .unwrap_or_default();
    match &dml.action {
        // DataFusion's DELETE ignores an alias: a one-row source matched by every row keeps it.
        Action::Delete if !dml.plain_delete => format!(
            "MERGE INTO {} USING (SELECT 1 AS {KEY}0) AS {SOURCE} ON TRUE WHEN MATCHED{} THEN DELETE",
            dml.target,
            and_all(rest).map(|w| format!(" AND {w}")).unwrap_or_default()
        ),
        Action::Delete => format!("DELETE FROM {}{filter}", dml.target),
        Action::Update(a) => format!("UPDATE {} SET {}{filter}", dml.target, a_list(a)),
    }
}

fn a_list(assignments: &[Assignment]) -> String {
    assignments
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The MERGE a statement with one set subquery condition equals.
async fn as_merge(ctx: &SessionContext, dml: &Dml) -> Result<Planned> {
    let mut all = vec![];
    if let Some(s) = dml.selection.clone() {
        conjuncts(s, &mut all);
    }
    let mut set = None;
    let mut rest = vec![];
    for c in all {
        match set_condition(&c) {
            Some(s) if set.is_none() => set = Some(s),
            Some(_) => return Err(refuse("two IN or EXISTS subqueries in one condition")),
            None if has_subquery(&c) => {
                return Err(refuse(&format!(
                    "a subquery inside a larger condition ({c})"
                )))
            }
            None => rest.push(c),
        }
    }
    let Some(set) = set else {
        // Only scalar subqueries, now values: the statement as it reads.
        return Ok(Planned::Sql(without_condition(dml, &rest)));
    };
    let action = action_sql(&dml.action);
    let when = |extra: Option<String>| {
        let mut conditions: Vec<String> = extra.into_iter().collect();
        conditions.extend(and_all(&rest));
        match conditions.is_empty() {
            true => String::new(),
            false => format!(" AND {}", conditions.join(" AND ")),
        }
    };
    match set {
        SetCondition::In {
            expr,
            subquery,
            negated,
        } => {
            let keys = format!("({subquery}) AS __iceberg_in({KEY}0)");
            if negated {
                // NOT IN: true for every row when the subquery is empty, never when it yields
                // a NULL.
                let counts = ctx
                    .sql(&format!("SELECT count(*), count({KEY}0) FROM {keys}"))
                    .await?
                    .collect()
                    .await?;
                let count = |i: usize| -> Result<i64> {
                    let b = counts.first().ok_or_else(|| {
                        DataFusionError::Internal("no count of the subquery".into())
                    })?;
                    match ScalarValue::try_from_array(b.column(i), 0)? {
                        ScalarValue::Int64(Some(n)) => Ok(n),
                        other => Err(DataFusionError::Internal(format!("a count of {other}"))),
                    }
                };
                let (rows, non_null) = (count(0)?, count(1)?);
                if rows == 0 {
                    return Ok(Planned::Sql(without_condition(dml, &rest)));
                }
                if non_null < rows {
                    return Ok(Planned::NoRows);
                }
                return Ok(Planned::Sql(format!(
                    "MERGE INTO {} USING (SELECT DISTINCT {KEY}0 FROM {keys}) AS {SOURCE} \
                     ON ({expr}) = {SOURCE}.{KEY}0 \
                     WHEN NOT MATCHED BY SOURCE{} THEN {action}",
                    dml.target,
                    when(Some(format!("({expr}) IS NOT NULL"))),
                )));
            }
            Ok(Planned::Sql(format!(
                "MERGE INTO {} USING (SELECT DISTINCT {KEY}0 FROM {keys}) AS {SOURCE} \
                 ON ({expr}) = {SOURCE}.{KEY}0 WHEN MATCHED{} THEN {action}",
                dml.target,
                when(None),
            )))
        }
        SetCondition::Exists { subquery, negated } => {
            let Some(correlated) = correlation(&subquery, &dml.qualifiers)? else {
                // Uncorrelated: one value for every row.
                let any = ctx
                    .sql(&format!(
                        "SELECT 1 FROM ({subquery}) AS __iceberg_exists LIMIT 1"
                    ))
                    .await?
                    .collect()
                    .await?;
                let exists = any.iter().any(|b| b.num_rows() > 0);
                return Ok(match exists != negated {
                    true => Planned::Sql(without_condition(dml, &rest)),
                    false => Planned::NoRows,
                });
            };
            let keys = correlated
                .inner
                .iter()
                .enumerate()
                .map(|(i, e)| format!("{e} AS {KEY}{i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let on = correlated
                .outer
                .iter()
                .enumerate()
                .map(|(i, e)| format!("({e}) = {SOURCE}.{KEY}{i}"))
                .collect::<Vec<_>>()
                .join(" AND ");
            let filter = and_all(&correlated.remaining)
                .map(|w| format!(" WHERE {w}"))
                .unwrap_or_default();
            let clause = match negated {
                false => "WHEN MATCHED",
                true => "WHEN NOT MATCHED BY SOURCE",
            };
            Ok(Planned::Sql(format!(
                "MERGE INTO {} USING (SELECT DISTINCT {keys} FROM {}{filter}) AS {SOURCE} \
                 ON {on} {clause}{} THEN {action}",
                dml.target,
                correlated.from,
                when(None),
            )))
        }
    }
}

/// `UPDATE target SET .. FROM source WHERE c` as `MERGE INTO target USING source ON c WHEN
/// MATCHED THEN UPDATE SET ..`.
fn update_from(dml: &Dml, from: &[TableWithJoins]) -> Result<String> {
    let [source] = from else {
        return Err(refuse(
            "UPDATE ... FROM of several tables (join them in a subquery)",
        ));
    };
    if !source.joins.is_empty() {
        return Err(refuse("UPDATE ... FROM a join (join them in a subquery)"));
    }
    let Action::Update(assignments) = &dml.action else {
        return Err(DataFusionError::Internal("FROM without SET".into()));
    };
    if let Some(s) = &dml.selection {
        if has_subquery(s) {
            return Err(refuse("UPDATE ... FROM with a subquery in its condition"));
        }
    }
    let on = dml
        .selection
        .as_ref()
        .map(|s| s.to_string())
        .unwrap_or_else(|| "TRUE".to_string());
    Ok(format!(
        "MERGE INTO {} USING {} ON {on} WHEN MATCHED THEN UPDATE SET {}",
        dml.target,
        source.relation,
        set_list(assignments)
    ))
}
