//! The correlation of an `IN`/`EXISTS` subquery with the target: the equalities that join
//! them, found in its `WHERE`.

use std::ops::ControlFlow;

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Query, SetExpr, TableFactor, Visit, Visitor,
};

use super::sql::{conjuncts, name_parts, refuse};
use crate::ident::normalised;

/// A correlated `EXISTS` subquery taken apart: `inner = outer` equalities, the source's own
/// conditions, and its FROM list.
pub(super) struct Correlated {
    pub(super) inner: Vec<Expr>,
    pub(super) outer: Vec<Expr>,
    pub(super) remaining: Vec<Expr>,
    pub(super) from: String,
}

/// Whether `e` names a column of the target (qualified by one of `qualifiers`).
pub(super) fn refers_to_target(e: &Expr, qualifiers: &[Vec<String>]) -> bool {
    struct Finder<'a>(&'a [Vec<String>]);
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if let Expr::CompoundIdentifier(parts) = e {
                let parts: Vec<String> = parts.iter().map(normalised).collect();
                let hit = self
                    .0
                    .iter()
                    .any(|q| parts.len() == q.len() + 1 && parts[..q.len()] == q[..]);
                if hit {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    Visit::visit(e, &mut Finder(qualifiers)).is_break()
}

/// The correlation of an `EXISTS` subquery with the target, `None` when it has none.
pub(super) fn correlation(q: &Query, qualifiers: &[Vec<String>]) -> Result<Option<Correlated>> {
    let SetExpr::Select(select) = q.body.as_ref() else {
        return Err(refuse("an EXISTS subquery that is not a plain SELECT"));
    };
    let plain = q.limit_clause.is_none()
        && q.fetch.is_none()
        && q.with.is_none()
        && select.having.is_none()
        && select.distinct.is_none()
        && matches!(&select.group_by, datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    let mut all = vec![];
    if let Some(s) = select.selection.clone() {
        conjuncts(s, &mut all);
    }
    let (mut inner, mut outer, mut remaining) = (vec![], vec![], vec![]);
    for c in all {
        if !refers_to_target(&c, qualifiers) {
            remaining.push(c);
            continue;
        }
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } = &c
        else {
            return Err(refuse(&format!(
                "a correlated condition other than an equality ({c})"
            )));
        };
        match (
            refers_to_target(left, qualifiers),
            refers_to_target(right, qualifiers),
        ) {
            (true, false) => {
                outer.push(left.as_ref().clone());
                inner.push(right.as_ref().clone());
            }
            (false, true) => {
                outer.push(right.as_ref().clone());
                inner.push(left.as_ref().clone());
            }
            _ => {
                return Err(refuse(&format!(
                    "a correlated condition other than an equality ({c})"
                )))
            }
        }
    }
    // A table of the subquery's own FROM named like the target hides the target's name.
    let mut named = vec![];
    for t in &select.from {
        for factor in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            named.extend(relation_qualifiers(factor));
        }
    }
    if named.iter().any(|n| qualifiers.contains(n)) {
        return Err(refuse(
            "an EXISTS subquery over a table named like the target (give one of them an alias)",
        ));
    }
    if inner.is_empty() {
        return Ok(None);
    }
    // An aggregate without GROUP BY yields a row whatever the keys: not a keyed match.
    if select
        .projection
        .iter()
        .any(|p| Visit::visit(p, &mut FindFunction).is_break())
    {
        return Err(refuse(
            "a correlated EXISTS subquery that selects a function",
        ));
    }
    if !plain {
        return Err(refuse(
            "a correlated EXISTS subquery with GROUP BY, HAVING, DISTINCT, LIMIT or WITH",
        ));
    }
    let from = select
        .from
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Some(Correlated {
        inner,
        outer,
        remaining,
        from,
    }))
}

/// The names a relation of a FROM list is referred to by (its alias, or its name and the
/// name's last parts).
pub(super) fn relation_qualifiers(factor: &TableFactor) -> Vec<Vec<String>> {
    match factor {
        TableFactor::Table { name, alias, .. } => match (alias, name_parts(name)) {
            (Some(a), _) => vec![vec![normalised(&a.name)]],
            (None, Some(parts)) => (0..parts.len()).map(|i| parts[i..].to_vec()).collect(),
            (None, None) => vec![],
        },
        TableFactor::Derived { alias: Some(a), .. } => vec![vec![normalised(&a.name)]],
        _ => vec![],
    }
}

/// Finds a function call.
pub(super) struct FindFunction;

impl Visitor for FindFunction {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        match e {
            Expr::Function(_) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }
}
