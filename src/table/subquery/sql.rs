//! Small helpers over SQL expressions: conjuncts, name parts, and the one-line refusal.

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, ObjectName};

use crate::ident::normalised;

pub(super) fn name_parts(name: &ObjectName) -> Option<Vec<String>> {
    name.0
        .iter()
        .map(|p| p.as_ident().map(normalised))
        .collect()
}

/// The conjuncts of `e` (through AND and parentheses).
pub(super) fn conjuncts(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjuncts(*left, out);
            conjuncts(*right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner, out)
        }
        other => out.push(other),
    }
}

pub(super) fn refuse(what: &str) -> DataFusionError {
    DataFusionError::NotImplemented(format!(
        "DELETE/UPDATE with {what} is not supported; nothing was changed"
    ))
}
