//! The query planner that guards `DELETE` and `UPDATE`.
//!
//! DataFusion hands a DML statement's predicate to [`TableProvider::delete_from`] as the
//! conjuncts it finds in `Filter` and `TableScan` nodes of the statement's (optimized) input.
//! Predicates it cannot express that way are lost silently: a subquery (`IN (SELECT ..)`,
//! `EXISTS`) turns into a join whose condition never reaches the provider, `DELETE .. LIMIT`
//! drops the limit, and `WHERE false` is optimized into an empty relation, which reaches the
//! provider as *no* filter, i.e. "every row". [`IcebergQueryPlanner`] looks at each statement
//! before DataFusion plans it: it rejects inputs the provider would misread, plans statements
//! that provably touch no row as a constant `count = 0`, and marks the planning of the rest so
//! that [`IcebergTableProvider`](crate::IcebergTableProvider) refuses DML planned without it.
//!
//! [`TableProvider::delete_from`]: datafusion::datasource::TableProvider::delete_from

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Column;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::{lit, Expr, LogicalPlan, LogicalPlanBuilder, Projection, WriteOp};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};

tokio::task_local! {
    /// Set while [`IcebergQueryPlanner`] plans a statement it has checked.
    static DML_CHECKED: ();
}

/// Whether the current planning runs under [`IcebergQueryPlanner`].
pub(crate) fn dml_checked() -> bool {
    DML_CHECKED.try_with(|_| ()).is_ok()
}

/// The error for DML planned without [`IcebergQueryPlanner`].
pub(crate) fn unchecked_dml_error(op: &str) -> DataFusionError {
    DataFusionError::Plan(format!(
        "{op} on an Iceberg table needs iceberg_exec::IcebergQueryPlanner as the session's query \
         planner (it stops DataFusion from dropping predicates it cannot hand to the table, which \
         would turn them into 'every row'); IcebergSession and iceberg_exec::session_state_builder \
         install it"
    ))
}

/// A [`QueryPlanner`] that checks `DELETE` and `UPDATE` statements, then delegates to an inner
/// planner (DataFusion's default one unless given).
#[derive(Debug, Clone)]
pub struct IcebergQueryPlanner {
    inner: Option<Arc<dyn QueryPlanner + Send + Sync>>,
}

impl Default for IcebergQueryPlanner {
    fn default() -> Self {
        Self::new()
    }
}

impl IcebergQueryPlanner {
    /// A guard in front of DataFusion's default physical planner.
    pub fn new() -> Self {
        Self { inner: None }
    }

    /// A guard in front of `inner` (an engine's own planner).
    pub fn wrapping(inner: Arc<dyn QueryPlanner + Send + Sync>) -> Self {
        Self { inner: Some(inner) }
    }
}

#[async_trait]
impl QueryPlanner for IcebergQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(planned) = Planned::of(logical_plan) {
            // A plan this crate built: through the physical optimizer, as DataFusion's planner
            // would (the planners around this one, e.g. a distributed one, take it from here).
            let state = session_state
                .as_any()
                .downcast_ref::<datafusion::execution::context::SessionState>()
                .ok_or_else(|| {
                    DataFusionError::NotImplemented(
                        "Iceberg statements need DataFusion's SessionState".into(),
                    )
                })?;
            return crate::physical_plan::optimized(state, Arc::clone(&planned.plan));
        }
        let plan = check_dml(logical_plan.clone())?;
        let planning = async {
            match &self.inner {
                Some(inner) => inner.create_physical_plan(&plan, session_state).await,
                None => {
                    DefaultPhysicalPlanner::default()
                        .create_physical_plan(&plan, session_state)
                        .await
                }
            }
        };
        DML_CHECKED.scope((), planning).await
    }
}

/// A physical plan this crate built while running a statement (a pass of `DELETE`/`UPDATE`),
/// handed to the session's query planner as a logical node: the planner's own steps (the
/// physical optimizer, the distribution over workers of a coordinator) then apply to it as to
/// any query. [`IcebergQueryPlanner`] plans it as the plan itself.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    plan: Arc<dyn ExecutionPlan>,
    schema: datafusion::common::DFSchemaRef,
}

/// `plan` made ready to run by `state`'s query planner: through the physical optimizer rules,
/// and in a distributed session cut into stages over the workers.
pub(crate) async fn through_planner(
    state: &datafusion::execution::context::SessionState,
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let logical = Planned::logical(plan)?;
    state
        .query_planner()
        .create_physical_plan(&logical, state)
        .await
}

impl Planned {
    /// `plan` as a logical plan.
    pub(crate) fn logical(plan: Arc<dyn ExecutionPlan>) -> Result<LogicalPlan> {
        let schema = Arc::new(datafusion::common::DFSchema::try_from(
            plan.schema().as_ref().clone(),
        )?);
        Ok(LogicalPlan::Extension(
            datafusion::logical_expr::Extension {
                node: Arc::new(Self { plan, schema }),
            },
        ))
    }

    fn of(plan: &LogicalPlan) -> Option<&Self> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<Self>(),
            _ => None,
        }
    }
}

impl PartialEq for Planned {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.plan, &other.plan)
    }
}

impl Eq for Planned {}

impl std::hash::Hash for Planned {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.plan) as *const u8, state)
    }
}

impl PartialOrd for Planned {
    fn partial_cmp(&self, _other: &Self) -> Option<std::cmp::Ordering> {
        None
    }
}

impl datafusion::logical_expr::UserDefinedLogicalNodeCore for Planned {
    fn name(&self) -> &str {
        "Planned"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![]
    }

    fn schema(&self) -> &datafusion::common::DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Planned: {}", self.plan.name())
    }

    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        if !exprs.is_empty() || !inputs.is_empty() {
            return Err(DataFusionError::Internal(
                "a Planned node has no expressions or inputs".into(),
            ));
        }
        Ok(self.clone())
    }
}

fn op_name(op: &WriteOp) -> Option<&'static str> {
    match op {
        WriteOp::Delete => Some("DELETE"),
        WriteOp::Update => Some("UPDATE"),
        _ => None,
    }
}

/// Checks every `DELETE`/`UPDATE` in `plan` (also under `EXPLAIN`), replacing those that touch
/// no row by a constant `count = 0`.
fn check_dml(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|node| {
        let LogicalPlan::Dml(dml) = &node else {
            return Ok(Transformed::no(node));
        };
        let Some(op) = op_name(&dml.op) else {
            return Ok(Transformed::no(node));
        };
        let table = dml.table_name.to_string();
        // DataFusion finds a statement's condition in the Filter nodes over the table's scan:
        // one the optimizer left above a projection (of struct fields it extracted, say)
        // goes below it, in terms of the projection's input.
        let dml = {
            let mut dml = dml.clone();
            dml.input = Arc::new(filters_below_projections(dml.input.as_ref().clone())?);
            dml
        };
        let node = LogicalPlan::Dml(dml.clone());
        match check_input(&dml.input, op, &table)? {
            Input::Rows if dml.op == WriteOp::Update => {
                // DataFusion reads the assignments from the top projection only: expressions
                // the optimizer moved into a projection below (common subexpressions) are
                // put back.
                let mut dml = dml.clone();
                dml.input = Arc::new(inline_projections(dml.input.as_ref().clone())?);
                Ok(Transformed::yes(LogicalPlan::Dml(dml)))
            }
            Input::Rows => Ok(Transformed::yes(node)),
            Input::NoRows => {
                let none = LogicalPlanBuilder::empty(true)
                    .project(vec![lit(0u64).alias("count")])?
                    .build()?;
                Ok(Transformed::yes(none))
            }
        }
    })
    .map(|t| t.data)
}

/// `plan` with each Filter over a projection moved below it, its predicate in terms of the
/// projection's input (the projection's expressions are deterministic: the optimizer placed
/// them there).
fn filters_below_projections(plan: LogicalPlan) -> Result<LogicalPlan> {
    // Filters stacked over a projection reach it one at a time.
    let mut plan = plan;
    for _ in 0..16 {
        let moved = filter_below_projection(plan)?;
        plan = moved.data;
        if !moved.transformed {
            break;
        }
    }
    Ok(plan)
}

fn filter_below_projection(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    plan.transform_down(|node| {
        let LogicalPlan::Filter(filter) = &node else {
            return Ok(Transformed::no(node));
        };
        let LogicalPlan::Projection(projection) = filter.input.as_ref() else {
            return Ok(Transformed::no(node));
        };
        if projection.expr.iter().any(|e| e.is_volatile()) {
            return Ok(Transformed::no(node));
        }
        let outputs: HashMap<Column, Expr> = projection
            .schema
            .columns()
            .into_iter()
            .zip(projection.expr.iter().map(|e| e.clone().unalias()))
            .collect();
        let predicate = filter
            .predicate
            .clone()
            .transform(|x| match &x {
                Expr::Column(c) => match outputs.get(c) {
                    Some(inlined) => Ok(Transformed::yes(inlined.clone())),
                    None => Ok(Transformed::no(x)),
                },
                _ => Ok(Transformed::no(x)),
            })?
            .data;
        let below = LogicalPlan::Filter(datafusion::logical_expr::Filter::try_new(
            predicate,
            Arc::clone(&projection.input),
        )?);
        let moved = Projection::try_new(projection.expr.clone(), Arc::new(below))?;
        Ok(Transformed::yes(LogicalPlan::Projection(moved)))
    })
}

/// Merges a projection over projections into one projection over their input, replacing
/// references to the lower projections' outputs by their expressions.
fn inline_projections(plan: LogicalPlan) -> Result<LogicalPlan> {
    let LogicalPlan::Projection(top) = &plan else {
        return Ok(plan);
    };
    let LogicalPlan::Projection(inner) = top.input.as_ref() else {
        return Ok(plan);
    };
    let outputs: HashMap<Column, Expr> = inner
        .schema
        .columns()
        .into_iter()
        .zip(inner.expr.iter().map(|e| e.clone().unalias()))
        .collect();
    let exprs = top
        .expr
        .iter()
        .map(|e| {
            e.clone()
                .transform(|x| match &x {
                    Expr::Column(c) => match outputs.get(c) {
                        Some(inlined) => Ok(Transformed::yes(inlined.clone())),
                        None => Ok(Transformed::no(x)),
                    },
                    _ => Ok(Transformed::no(x)),
                })
                .map(|t| t.data)
        })
        .collect::<Result<Vec<_>>>()?;
    let merged = Projection::try_new(exprs, Arc::clone(&inner.input))?;
    inline_projections(LogicalPlan::Projection(merged))
}

enum Input {
    /// The statement reads the table through filters the provider receives.
    Rows,
    /// The optimizer proved the statement touches no row.
    NoRows,
}

fn check_input(input: &LogicalPlan, op: &str, table: &str) -> Result<Input> {
    let mut outcome = Input::Rows;
    let mut error: Option<DataFusionError> = None;
    input.apply(|node| {
        let reject = |what: &str| {
            DataFusionError::Plan(format!(
                "{op} on table '{table}' with {what} is not supported: its condition would not \
                 reach the table; nothing was changed"
            ))
        };
        match node {
            LogicalPlan::Filter(f) => {
                if let Some(e) = check_expr(&f.predicate, op, table) {
                    error = Some(e);
                }
            }
            LogicalPlan::TableScan(scan) => {
                if let Some(e) = scan.filters.iter().find_map(|f| check_expr(f, op, table)) {
                    error = Some(e);
                }
            }
            LogicalPlan::Projection(p) => {
                if let Some(e) = p.expr.iter().find_map(|x| check_subquery(x, op, table)) {
                    error = Some(e);
                }
            }
            LogicalPlan::SubqueryAlias(_) => {}
            LogicalPlan::EmptyRelation(e) if !e.produce_one_row => outcome = Input::NoRows,
            LogicalPlan::Limit(_) => error = Some(reject("LIMIT")),
            LogicalPlan::Join(_) | LogicalPlan::Subquery(_) => {
                error = Some(reject("a subquery or join"))
            }
            other => error = Some(reject(&format!("a '{}' step", other.display()))),
        }
        Ok(match error {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match error {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

/// An error when `e` holds a subquery, or a volatile function (a condition that would differ
/// between the passes of a statement).
fn check_expr(e: &Expr, op: &str, table: &str) -> Option<DataFusionError> {
    if let Some(err) = check_subquery(e, op, table) {
        return Some(err);
    }
    if e.is_volatile() {
        return Some(DataFusionError::Plan(format!(
            "{op} on table '{table}' with a non-deterministic condition ({e}) is not supported; \
             nothing was changed"
        )));
    }
    None
}

fn check_subquery(e: &Expr, op: &str, table: &str) -> Option<DataFusionError> {
    let mut found = false;
    let _ = e.apply(|x| {
        if matches!(
            x,
            Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::ScalarSubquery(_)
                | Expr::OuterReferenceColumn(..)
        ) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found.then(|| {
        DataFusionError::Plan(format!(
            "{op} on table '{table}' with a subquery is not supported: its condition would not \
             reach the table; nothing was changed"
        ))
    })
}
