//! [`StatementExec`]: the node of a statement that changes a table's rows (`DELETE`, `UPDATE`,
//! `MERGE`). It runs the statement its planner (`dml`) hands it, once per execution, and answers
//! one row (`count`). What the statements share lives here: the retry loop (a concurrent commit
//! that changed what the statement read makes it run again on the new table state, up to the
//! table's `commit.retry.num-retries` times), one set of counters, and the node's properties.
//!
//! ```text
//!  StatementExec ── execute ──► run: loop { statement.run_once(children) }
//!       │                            concurrent change? ─► statement.again(new table state)
//!       └ children: the plans the statement reads (pass 1 of DELETE/UPDATE, MERGE's source)
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{Distribution, EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, SpillMetrics,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use iceberg::table::Table;

use crate::commit::{is_concurrent_change, MetadataStore};
use crate::error::IcebergResultExt;
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::commit::{count_batch, count_schema};

/// A statement a [`StatementExec`] runs: what `dml` plans for `DELETE`, `UPDATE` and `MERGE`.
#[async_trait::async_trait]
pub(crate) trait Statement: fmt::Debug + Send + Sync {
    /// The node's name in plans (`DeleteExec`, `UpdateExec`, `MergeExec`).
    fn name(&self) -> &'static str;

    /// What the node shows after its name in `EXPLAIN`.
    fn describe(&self, f: &mut fmt::Formatter) -> fmt::Result;

    /// The counters it reports (each shown by `EXPLAIN ANALYZE`, zero when nothing was counted);
    /// `statement_attempts` is the node's own.
    fn counters(&self) -> &'static [&'static str];

    /// Whether it reports spill metrics.
    fn spills(&self) -> bool {
        false
    }

    /// The distribution it needs of each child.
    fn child_distribution(&self) -> Distribution {
        Distribution::UnspecifiedDistribution
    }

    /// The context it runs in, from the one the node is executed with.
    fn context(&self, context: Arc<TaskContext>) -> Arc<TaskContext> {
        context
    }

    /// Whether it runs again, planned on the new table state, when a concurrent commit changed
    /// what it read (`false`: the conflict fails it, as when its input cannot be read twice).
    fn reruns(&self) -> bool {
        true
    }

    /// The table it changes, as it was planned against.
    fn table(&self) -> &Table;

    /// The store the table commits to.
    fn store(&self) -> &Arc<dyn MetadataStore>;

    /// One run against the table state it was planned on, reading `children`: the rows it
    /// changed, once committed.
    async fn run_once(
        &self,
        children: &[Arc<dyn ExecutionPlan>],
        context: &Arc<TaskContext>,
        metrics: &StatementMetrics,
    ) -> Result<u64>;

    /// The same statement planned again on `table` (a concurrent commit changed what it read),
    /// with the children it reads then.
    async fn again(
        &self,
        table: Table,
        children: &[Arc<dyn ExecutionPlan>],
    ) -> Result<(Arc<dyn Statement>, Vec<Arc<dyn ExecutionPlan>>)>;
}

/// The counters of one statement node, by name.
#[derive(Debug)]
pub(crate) struct StatementMetrics {
    counts: HashMap<&'static str, Count>,
    spill: Option<SpillMetrics>,
}

impl StatementMetrics {
    fn new(statement: &dyn Statement, metrics: &ExecutionPlanMetricsSet) -> Self {
        let counts = statement
            .counters()
            .iter()
            .chain(std::iter::once(&"statement_attempts"))
            .map(|&name| (name, MetricBuilder::new(metrics).counter(name, 0)))
            .collect();
        let spill = statement.spills().then(|| SpillMetrics::new(metrics, 0));
        Self { counts, spill }
    }

    /// Adds `n` to the counter `name` (one the statement declared).
    pub(crate) fn add(&self, name: &str, n: usize) {
        match self.counts.get(name) {
            Some(c) => c.add(n),
            None => debug_assert!(false, "the statement did not declare the counter {name}"),
        }
    }

    /// The value of the counter `name` so far (0 for one the statement did not declare).
    pub(crate) fn value(&self, name: &str) -> usize {
        self.counts.get(name).map_or(0, Count::value)
    }

    /// The spill metrics (a statement that declared none gets a set of its own, not shown).
    pub(crate) fn spill(&self) -> SpillMetrics {
        match &self.spill {
            Some(s) => s.clone(),
            None => SpillMetrics::new(&ExecutionPlanMetricsSet::new(), 0),
        }
    }
}

/// Runs a [`Statement`]: its children are the plans the statement reads. One partition, one
/// output row: `count`.
#[derive(Debug)]
pub(crate) struct StatementExec {
    statement: Arc<dyn Statement>,
    children: Vec<Arc<dyn ExecutionPlan>>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl StatementExec {
    /// The node of `statement`, reading `children`.
    pub(crate) fn new(
        statement: Arc<dyn Statement>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Self {
        Self {
            statement,
            children,
            metrics: ExecutionPlanMetricsSet::new(),
            properties: count_properties(),
        }
    }
}

/// The properties of a statement node: one partition, one final row (`count`).
pub(crate) fn count_properties() -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(count_schema()),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// Runs `statement` until it commits; when a concurrent commit changed what it read, plans and
/// runs it again on the new table state, up to the table's `commit.retry.num-retries` times.
async fn run(
    mut statement: Arc<dyn Statement>,
    mut children: Vec<Arc<dyn ExecutionPlan>>,
    context: Arc<TaskContext>,
    metrics: StatementMetrics,
) -> Result<u64> {
    let retries = statement
        .table()
        .metadata()
        .table_properties()
        .df()?
        .commit_num_retries;
    let context = statement.context(context);
    let mut attempt = 0;
    loop {
        attempt += 1;
        metrics.add("statement_attempts", 1);
        match statement.run_once(&children, &context, &metrics).await {
            Err(e) if is_concurrent_change(&e) && attempt <= retries && statement.reruns() => {
                log::info!(
                    "{} on '{}' runs again: {e}",
                    statement.name(),
                    statement.table().identifier()
                );
                let ident = statement.table().identifier().clone();
                let table = Arc::clone(statement.store()).load(&ident).await?;
                (statement, children) = statement.again(table, &children).await?;
            }
            other => return other,
        }
    }
}

impl DisplayAs for StatementExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: ", self.statement.name())?;
        self.statement.describe(f)
    }
}

impl ExecutionPlan for StatementExec {
    fn name(&self) -> &str {
        self.statement.name()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.children.iter().collect()
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.children.len()]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![self.statement.child_distribution(); self.children.len()]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != self.children.len() {
            return Err(DataFusionError::Internal(format!(
                "{} has {} children, got {}",
                self.statement.name(),
                self.children.len(),
                children.len()
            )));
        }
        Ok(Arc::new(Self::new(Arc::clone(&self.statement), children)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "{} has one partition, asked for {partition}",
                self.statement.name()
            )));
        }
        let baseline = Baseline::new(&self.metrics, 0);
        let metrics = StatementMetrics::new(self.statement.as_ref(), &self.metrics);
        let statement = Arc::clone(&self.statement);
        let children = self.children.clone();
        let stream = futures::stream::once(async move {
            count_batch(run(statement, children, context, metrics).await?)
        });
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            stream,
        ))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
