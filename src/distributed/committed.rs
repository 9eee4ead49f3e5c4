//! A distributed statement that has committed is a statement that succeeded.
//!
//! When a distributed plan's head stage has streamed its last batch, datafusion-distributed
//! still waits for the workers' tasks to wind down (their metrics come back then). A worker
//! lost at that moment turns into an error at the end of the stream. For a write that has
//! already committed, that error would tell the client a committed statement failed, and a
//! client that retries would write the rows twice. So above a distributed plan that commits
//! (its head holds `CommitExec` or a DML node), an error that comes after the statement's
//! answer is logged as a warning and the answer stands; errors before it fail the statement
//! as always.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use datafusion_distributed::DistributedExec;
use futures::StreamExt;

use crate::physical_plan::baseline::Baseline;

/// The nodes that commit a statement and then answer it.
const COMMITTING: [&str; 4] = ["CommitExec", "DeleteExec", "UpdateExec", "MergeExec"];

/// Whether `node` is one that commits a statement.
pub(crate) fn commits(node: &Arc<dyn ExecutionPlan>) -> bool {
    COMMITTING.contains(&node.name())
}

/// Wraps the distributed query planner: distributed plans that commit get [`CommittedExec`]
/// above them.
#[derive(Debug)]
pub(crate) struct CommitAwarePlanner {
    pub(crate) inner: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for CommitAwarePlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self
            .inner
            .create_physical_plan(logical_plan, session)
            .await?;
        if !plan.is::<DistributedExec>() {
            return Ok(plan);
        }
        let committing = plan.exists(|p| Ok(commits(p)))?;
        Ok(match committing {
            true => Arc::new(CommittedExec::new(plan)),
            false => plan,
        })
    }
}

/// Passes its input's batches; after the first one (a committing statement's answer), an
/// error is logged and ends the stream instead of failing it.
#[derive(Debug)]
pub struct CommittedExec {
    input: Arc<dyn ExecutionPlan>,
    /// Baseline metrics (output rows, elapsed compute).
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl CommittedExec {
    /// `input`, whose first batch is the answer of a committed statement.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            input,
            metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for CommittedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CommittedExec")
    }
}

impl ExecutionPlan for CommittedExec {
    fn name(&self) -> &str {
        "CommittedExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(crate::physical_plan::single_child(
            "CommittedExec",
            children,
        )?)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let input = baseline.input(self.input.execute(partition, context)?);
        let mut answered = false;
        let stream = input
            .map(move |item| match item {
                Ok(batch) => {
                    answered = true;
                    Some(Ok(batch))
                }
                Err(e) if answered => {
                    log::warn!("the statement committed; a worker failed as it ended: {e}");
                    None
                }
                Err(e) => Some(Err(e)),
            })
            .take_while(|item| futures::future::ready(item.is_some()))
            .filter_map(futures::future::ready);
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            self.input.schema(),
            stream,
        ))))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
