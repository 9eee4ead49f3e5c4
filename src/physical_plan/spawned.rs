//! [`SpawnedExec`]: its input run on a task of its own, so a consumer that polls one input after
//! another still has all of them computed at once.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;

use crate::physical_plan::baseline::Baseline;

/// Runs its input in a task of its own from the moment it is executed, passing batches on
/// through a channel of two: a consumer that polls one input after another (a merge join) still
/// has both computed at once.
#[derive(Debug)]
pub(crate) struct SpawnedExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<datafusion::physical_plan::PlanProperties>,
    /// Baseline metrics (output rows, elapsed compute).
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl SpawnedExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::clone(input.properties());
        Self {
            input,
            properties,
            metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
        }
    }
}

impl datafusion::physical_plan::DisplayAs for SpawnedExec {
    fn fmt_as(
        &self,
        _t: datafusion::physical_plan::DisplayFormatType,
        f: &mut std::fmt::Formatter,
    ) -> std::fmt::Result {
        f.write_str("SpawnedExec")
    }
}

impl ExecutionPlan for SpawnedExec {
    fn name(&self) -> &str {
        "SpawnedExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<datafusion::physical_plan::PlanProperties> {
        &self.properties
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match <[_; 1]>::try_from(children) {
            Ok([input]) => Ok(Arc::new(Self::new(input))),
            Err(_) => Err(DataFusionError::Internal(
                "SpawnedExec takes one child".into(),
            )),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let mut builder = RecordBatchReceiverStream::builder(self.input.schema(), 2);
        let tx = builder.tx();
        let input = Arc::clone(&self.input);
        let baseline = Baseline::new(&self.metrics, partition);
        let task = baseline.clone();
        builder.spawn(baseline.timed(async move {
            let mut stream = task.input(input.execute(partition, context)?);
            while let Some(batch) = stream.next().await {
                // The receiver gone means the consumer stopped: so does this task.
                if tx.send(batch).await.is_err() {
                    break;
                }
            }
            Ok(())
        }));
        Ok(baseline.output(builder.build()))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
