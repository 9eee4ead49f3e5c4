//! Scalar subqueries of a statement, evaluated once to their values before it runs.

use std::ops::ControlFlow;

use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::sql::sqlparser::ast::{Expr, Query, Visitor, VisitorMut};

/// The scalar subqueries of the statement (outside other subqueries), in visiting order.
pub(super) struct ScalarSubqueries {
    pub(super) depth: usize,
    pub(super) found: Vec<Query>,
}

impl Visitor for ScalarSubqueries {
    type Break = ();
    fn pre_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if let (Expr::Subquery(q), 0) = (e, self.depth) {
            self.found.push(q.as_ref().clone());
        }
        ControlFlow::Continue(())
    }
}

/// Replaces the scalar subqueries outside other subqueries by `values`, in visiting order.
pub(super) struct ReplaceScalars {
    pub(super) depth: usize,
    pub(super) values: std::vec::IntoIter<Expr>,
}

impl VisitorMut for ReplaceScalars {
    type Break = ();
    fn pre_visit_query(&mut self, _q: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _q: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if matches!(e, Expr::Subquery(_)) && self.depth == 0 {
            if let Some(v) = self.values.next() {
                // The value replaces the node before its query is entered.
                *e = v;
            }
        }
        ControlFlow::Continue(())
    }
}

/// The value of an uncorrelated scalar subquery, as a SQL literal of its type.
pub(super) async fn scalar_value(ctx: &SessionContext, q: &Query) -> Result<Expr> {
    let refused = |e: DataFusionError| {
        DataFusionError::Plan(format!(
            "a scalar subquery in DELETE/UPDATE must not refer to the target table's row \
             (correlated scalar subqueries are not supported; nothing was changed): {e}"
        ))
    };
    let frame = ctx.sql(&q.to_string()).await.map_err(refused)?;
    let fields = frame.schema().fields().clone();
    let [field] = fields.as_ref() else {
        return Err(DataFusionError::Plan(format!(
            "a scalar subquery must return one column, not {}",
            fields.len()
        )));
    };
    let batches = frame.collect().await?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows > 1 {
        return Err(DataFusionError::Execution(format!(
            "a scalar subquery in DELETE/UPDATE returned {rows} rows; nothing was changed"
        )));
    }
    // No row: NULL of the column's type.
    let value = match batches.iter().find(|b| b.num_rows() == 1) {
        Some(b) => ScalarValue::try_from_array(b.column(0), 0)?,
        None => ScalarValue::try_new_null(field.data_type())?,
    };
    literal(&value)
}

/// `value` as a SQL expression of its exact type.
pub(super) fn literal(value: &ScalarValue) -> Result<Expr> {
    let ty = value.data_type().to_string().replace('\'', "''");
    let binary = match value {
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b))
        | ScalarValue::FixedSizeBinary(_, Some(b)) => Some(b),
        _ => None,
    };
    let text = match (value.is_null(), binary) {
        (true, _) => "NULL".to_string(),
        // Bytes as a hex literal (their display is hex, which a cast would read as text).
        (false, Some(b)) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("X'{hex}'")
        }
        (false, None) => {
            let array = value.to_array()?;
            let text = arrow::util::display::array_value_to_string(&array, 0)?;
            format!("'{}'", text.replace('\'', "''"))
        }
    };
    parse_expr(&format!("arrow_cast({text}, '{ty}')"))
}

pub(super) fn parse_expr(text: &str) -> Result<Expr> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| DataFusionError::Internal(format!("re-parsing '{text}': {e}")))
}
