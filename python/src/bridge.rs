//! What datafusion-python receives across its FFI: the session's catalog, schemas and tables,
//! wrapped so that what they do runs on this module's terms.
//!
//! - datafusion-python polls a foreign catalog's futures (loading a table, planning a scan) on
//!   its own Tokio runtime, where this module's I/O (a REST catalog's HTTP, object storage)
//!   finds no reactor: [`Entered`] polls them inside this module's runtime.
//! - Its physical optimizer would work on our nodes without their requirements, which the FFI
//!   does not carry (it put a repartition between a positional-delete join and the file scan
//!   that join reads): a statement's plan is optimized here, by the session, and handed over as
//!   one node, [`Sealed`], whose only children are the receiver's own inputs (an INSERT's rows).
//! - The task context a foreign plan executes with is rebuilt on the far side with a default
//!   `RuntimeEnv` (an unbounded memory pool, no object stores but the local one): [`Sealed`]
//!   executes with the session's pool, spill directory and caches, and the object stores the
//!   planning registered.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::common::internal_err;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Constraints, Statistics};
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::object_store::ObjectStore;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::physical_planner::DefaultPhysicalPlanner;

use crate::RUNTIME;

/// A future polled inside this module's Tokio runtime, whoever polls it.
struct Entered<F>(F);

impl<F: Future + Unpin> Future for Entered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _runtime = RUNTIME.enter();
        Pin::new(&mut self.0).poll(cx)
    }
}

/// The session's catalog, for datafusion-python.
#[derive(Debug)]
pub(crate) struct BoundCatalog {
    inner: Arc<dyn CatalogProvider>,
    state: Arc<SessionState>,
}

impl BoundCatalog {
    /// `inner`, whose tables' plans are optimized by `state` (the session's) and run with its
    /// runtime.
    pub(crate) fn new(inner: Arc<dyn CatalogProvider>, state: Arc<SessionState>) -> Self {
        Self { inner, state }
    }
}

impl CatalogProvider for BoundCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.inner.schema_names()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let inner = self.inner.schema(name)?;
        Some(Arc::new(BoundSchema {
            inner,
            state: Arc::clone(&self.state),
        }))
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        self.inner.register_schema(name, schema)
    }

    fn deregister_schema(
        &self,
        name: &str,
        cascade: bool,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        self.inner.deregister_schema(name, cascade)
    }
}

/// A schema (namespace) of the session's catalog, for datafusion-python.
#[derive(Debug)]
struct BoundSchema {
    inner: Arc<dyn SchemaProvider>,
    state: Arc<SessionState>,
}

#[async_trait]
impl SchemaProvider for BoundSchema {
    fn owner_name(&self) -> Option<&str> {
        self.inner.owner_name()
    }

    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = Entered(self.inner.table(name)).await?;
        Ok(table.map(|t| Arc::new(BoundTable::new(t, Arc::clone(&self.state))) as _))
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        self.inner.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// A table for datafusion-python: planned by the session inside this module's runtime, its
/// plans handed over sealed (see [`Sealed`]).
#[derive(Debug)]
pub(crate) struct BoundTable {
    inner: Arc<dyn TableProvider>,
    state: Arc<SessionState>,
}

impl BoundTable {
    /// `inner`, whose plans are optimized by `state` (the session's) and run with its runtime.
    pub(crate) fn new(inner: Arc<dyn TableProvider>, state: Arc<SessionState>) -> Self {
        Self { inner, state }
    }
}

#[async_trait]
impl TableProvider for BoundTable {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn constraints(&self) -> Option<&Constraints> {
        self.inner.constraints()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    fn statistics(&self) -> Option<Statistics> {
        self.inner.statistics()
    }

    async fn scan(
        &self,
        _receiver: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Planned by the session (its settings, its object stores), not by the receiver's
        // stand-in for it.
        let ours = self.state.as_ref();
        let plan = Entered(self.inner.scan(ours, projection, filters, limit)).await?;
        Sealed::seal(plan, vec![], ours)
    }

    async fn insert_into(
        &self,
        _receiver: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let ours = self.state.as_ref();
        let rows = Arc::clone(&input);
        let plan = Entered(self.inner.insert_into(ours, input, insert_op)).await?;
        Sealed::seal(plan, vec![rows], ours)
    }
}

/// The runtime `session` (its pool, spill directory and caches) with the object stores of
/// `first`, then its own.
pub(crate) fn runtime_with_stores(
    session: &Arc<RuntimeEnv>,
    first: &Arc<dyn ObjectStoreRegistry>,
) -> Result<Arc<RuntimeEnv>> {
    let stores = Arc::new(Stores {
        planned: Arc::clone(first),
        session: Arc::clone(&session.object_store_registry),
    });
    RuntimeEnvBuilder::from_runtime_env(session)
        .with_object_store_registry(stores)
        .build_arc()
}

/// Object stores: a statement's own (those of a table read from its metadata file, built from
/// its FileIO properties), then the session's.
#[derive(Debug)]
struct Stores {
    planned: Arc<dyn ObjectStoreRegistry>,
    session: Arc<dyn ObjectStoreRegistry>,
}

impl ObjectStoreRegistry for Stores {
    fn register_store(
        &self,
        url: &url::Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.session.register_store(url, store)
    }

    fn deregister_store(&self, url: &url::Url) -> Result<Arc<dyn ObjectStore>> {
        self.session.deregister_store(url)
    }

    fn get_store(&self, url: &url::Url) -> Result<Arc<dyn ObjectStore>> {
        self.planned
            .get_store(url)
            .or_else(|_| self.session.get_store(url))
    }
}

/// A stand-in for one of the receiver's inputs (an INSERT's rows) while our plan is optimized:
/// a leaf with the input's properties.
#[derive(Debug)]
struct Placeholder {
    index: usize,
    properties: Arc<PlanProperties>,
}

impl DisplayAs for Placeholder {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Input {}", self.index)
    }
}

impl ExecutionPlan for Placeholder {
    fn name(&self) -> &str {
        "Input"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        internal_err!("input {} was not put back in the plan", self.index)
    }
}

/// `template` with each placeholder replaced by its input.
fn substitute(
    template: &Arc<dyn ExecutionPlan>,
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(Arc::clone(template)
        .transform_up(|node| match node.downcast_ref::<Placeholder>() {
            Some(p) => match inputs.get(p.index) {
                Some(input) => Ok(Transformed::yes(Arc::clone(input))),
                None => internal_err!("no input {}", p.index),
            },
            None => Ok(Transformed::no(node)),
        })?
        .data)
}

/// Our plan for a statement, optimized by the session, as one node for the receiver: its
/// optimizer sees our inputs (`inputs`: an INSERT's rows, the receiver's own plan) and not our
/// nodes, whose needs (a positional-delete join's file scan right below it, one partition for
/// a commit) do not cross the FFI. It executes with the session's runtime.
#[derive(Debug)]
struct Sealed {
    /// The optimized plan, with a [`Placeholder`] where each input goes.
    template: Arc<dyn ExecutionPlan>,
    inputs: Vec<Arc<dyn ExecutionPlan>>,
    /// `template` with the inputs in place: what executes.
    runnable: Arc<dyn ExecutionPlan>,
    /// The session's, for every partition.
    task: Arc<TaskContext>,
}

impl Sealed {
    /// `plan`, in which the nodes `inputs` (the receiver's) are found by identity, optimized by
    /// `state` (the session's) with the inputs standing aside.
    fn seal(
        plan: Arc<dyn ExecutionPlan>,
        inputs: Vec<Arc<dyn ExecutionPlan>>,
        state: &SessionState,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut found = vec![false; inputs.len()];
        let template = plan
            .transform_down(
                |node| match inputs.iter().position(|i| Arc::ptr_eq(i, &node)) {
                    Some(index) => {
                        found[index] = true;
                        let properties = Arc::clone(node.properties());
                        let stand_in = Placeholder { index, properties };
                        Ok(Transformed::new(
                            Arc::new(stand_in) as _,
                            true,
                            TreeNodeRecursion::Jump,
                        ))
                    }
                    None => Ok(Transformed::no(node)),
                },
            )?
            .data;
        if found.contains(&false) {
            return internal_err!("an input of the statement is not in its plan");
        }
        let template =
            DefaultPhysicalPlanner::default().optimize_physical_plan(template, state, |_, _| {})?;
        let runnable = substitute(&template, &inputs)?;
        Ok(Arc::new(Self {
            template,
            inputs,
            runnable,
            task: state.task_ctx(),
        }))
    }
}

impl DisplayAs for Sealed {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let shown = datafusion::physical_plan::displayable(self.template.as_ref()).indent(false);
        write!(
            f,
            "IcebergExec: [{}]",
            shown.to_string().trim_end().replace('\n', "; ")
        )
    }
}

impl ExecutionPlan for Sealed {
    fn name(&self) -> &str {
        "IcebergExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.runnable.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.inputs.iter().collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != self.inputs.len() {
            return internal_err!("IcebergExec has {} inputs", self.inputs.len());
        }
        let runnable = substitute(&self.template, &children)?;
        Ok(Arc::new(Sealed {
            template: Arc::clone(&self.template),
            inputs: children,
            runnable,
            task: Arc::clone(&self.task),
        }))
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // Our expressions are evaluated inside; the receiver rewrites none of them.
        Ok(TreeNodeRecursion::Continue)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.runnable.metrics()
    }

    #[allow(deprecated)] // the FFI asks for statistics this way
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        self.runnable.partition_statistics(partition)
    }

    fn execute(
        &self,
        partition: usize,
        _receiver: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        // The session's task context: its settings (as the plan was planned with), functions
        // and runtime, not the receiver's rebuilt stand-in.
        let _runtime = RUNTIME.enter();
        self.runnable.execute(partition, Arc::clone(&self.task))
    }
}
