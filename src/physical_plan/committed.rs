//! [`CommittedExec`]: above a distributed plan that commits, the statement's answer stands once
//! it has come: an error after it (a worker lost as its tasks wind down) is logged, not
//! returned, so a client never retries a statement that committed (see the planner in
//! `distributed::committed`).

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

use crate::physical_plan::baseline::Baseline;

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
