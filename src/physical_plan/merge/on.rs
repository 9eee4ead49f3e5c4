//! A `MERGE`'s `ON` condition, compiled: equalities between a target and a source expression
//! become hash join keys, the rest the join filter.

use std::sync::Arc;

use datafusion::common::{DFSchema, JoinType};
use datafusion::error::Result;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use datafusion::physical_expr::PhysicalExpr;

use super::clauses::{RowLayout, Side, Sides};

/// The `ON` condition taken apart.
#[derive(Debug, Clone, Default)]
pub(crate) struct SplitOn {
    /// `(source, target)` expressions an equality pairs.
    pub pairs: Vec<(Expr, Expr)>,
    /// Every other conjunct (the join filter).
    pub rest: Vec<Expr>,
    /// Those of `rest` that name only target columns.
    pub target_only: Vec<Expr>,
}

/// Splits `on` into hash keys and a filter.
pub(crate) fn split_on(on: &Expr, sides: &Sides<'_>) -> Result<SplitOn> {
    let mut out = SplitOn::default();
    let mut unused = Default::default();
    for conjunct in split_conjunction(on) {
        if let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) = conjunct
        {
            let l = sides.used(left, &mut unused)?;
            let r = sides.used(right, &mut unused)?;
            let one = |s: &std::collections::HashSet<Side>, side| s.len() == 1 && s.contains(&side);
            if one(&l, Side::Target) && one(&r, Side::Source) {
                out.pairs
                    .push((right.as_ref().clone(), left.as_ref().clone()));
                continue;
            }
            if one(&l, Side::Source) && one(&r, Side::Target) {
                out.pairs
                    .push((left.as_ref().clone(), right.as_ref().clone()));
                continue;
            }
        }
        let used = sides.used(conjunct, &mut unused)?;
        if used.len() == 1 && used.contains(&Side::Target) {
            out.target_only.push(conjunct.clone());
        }
        out.rest.push(conjunct.clone());
    }
    Ok(out)
}

/// The join, compiled: keys over each side's rows, the filter over the join rows.
#[derive(Debug, Clone)]
pub(crate) struct JoinSpec {
    pub source_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub target_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    pub join_type: JoinType,
    /// For each key that is a bare target column: (key index, table column name).
    pub bounded_columns: Vec<(usize, String)>,
    /// The `ON` condition as written (for EXPLAIN).
    pub text: String,
}

impl JoinSpec {
    pub(crate) fn try_new(
        split: &SplitOn,
        layout: &RowLayout,
        join_type: JoinType,
        state: &SessionState,
        text: String,
    ) -> Result<Self> {
        let (source_schema, target_schema) = side_schemas(layout)?;
        let mut source_keys = vec![];
        let mut target_keys = vec![];
        let mut bounded_columns = vec![];
        for (k, (s, t)) in split.pairs.iter().enumerate() {
            source_keys.push(state.create_physical_expr(s.clone(), &source_schema)?);
            target_keys.push(state.create_physical_expr(t.clone(), &target_schema)?);
            if let Expr::Column(c) = t {
                bounded_columns.push((k, c.name.clone()));
            }
        }
        let filter = match datafusion::logical_expr::utils::conjunction(split.rest.clone()) {
            Some(f) => Some(state.create_physical_expr(f, &layout.schema)?),
            None => None,
        };
        Ok(Self {
            source_keys,
            target_keys,
            filter,
            join_type,
            bounded_columns,
            text,
        })
    }
}

/// The DataFusion schemas of the source side (source columns and marker) and the target side
/// (table columns read, file, position) of the join rows.
fn side_schemas(layout: &RowLayout) -> Result<(DFSchema, DFSchema)> {
    let fields: Vec<_> = layout
        .schema
        .iter()
        .map(|(q, f)| (q.cloned(), Arc::clone(f)))
        .collect();
    let split = layout.target_start();
    let source = DFSchema::new_with_metadata(fields[..split].to_vec(), Default::default())?;
    let target = DFSchema::new_with_metadata(fields[split..].to_vec(), Default::default())?;
    Ok((source, target))
}
