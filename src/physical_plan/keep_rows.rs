//! [`KeepRowsExec`]: passes the rows a condition does not select, counting both kinds.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, BooleanArray};
use arrow::compute::kernels::boolean::not;
use arrow::compute::{filter_record_batch, prep_null_mask_filter};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

use crate::physical_plan::single_child;

/// Rows seen and rows selected by a [`KeepRowsExec`], over all its partitions.
#[derive(Debug, Default)]
pub struct KeepRowsCounts {
    /// Input rows.
    pub read: AtomicU64,
    /// Rows the condition is TRUE for (not passed on).
    pub selected: AtomicU64,
}

impl KeepRowsCounts {
    /// (read, selected) so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.selected.load(Ordering::Relaxed),
        )
    }
}

/// Keeps the rows for which `condition IS NOT TRUE` (FALSE or NULL): the rows a copy-on-write
/// `DELETE` writes back. It counts the rows it reads and the rows it drops, so the statement can
/// check its two passes against each other.
#[derive(Debug)]
pub struct KeepRowsExec {
    input: Arc<dyn ExecutionPlan>,
    condition: Arc<dyn PhysicalExpr>,
    counts: Arc<KeepRowsCounts>,
    metrics: ExecutionPlanMetricsSet,
}

impl KeepRowsExec {
    /// Keeps `input`'s rows that `condition` (over `input`'s schema) does not select.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        condition: Arc<dyn PhysicalExpr>,
        counts: Arc<KeepRowsCounts>,
    ) -> Result<Self> {
        let ty = condition.data_type(&input.schema())?;
        if ty != arrow::datatypes::DataType::Boolean {
            return Err(DataFusionError::Plan(format!(
                "a DELETE condition must be boolean, got {ty}"
            )));
        }
        Ok(Self {
            input,
            condition,
            counts,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

impl DisplayAs for KeepRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "KeepRowsExec: ({}) IS NOT TRUE", self.condition)
    }
}

impl ExecutionPlan for KeepRowsExec {
    fn name(&self) -> &str {
        "KeepRowsExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::LowerEqual
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::try_new(
            single_child("KeepRowsExec", children)?,
            Arc::clone(&self.condition),
            Arc::clone(&self.counts),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let condition = Arc::clone(&self.condition);
        let counts = Arc::clone(&self.counts);
        let read = MetricBuilder::new(&self.metrics).counter("rows_read", partition);
        let dropped = MetricBuilder::new(&self.metrics).counter("rows_selected", partition);
        let stream = input.map(move |batch| {
            let batch = batch?;
            let value = condition.evaluate(&batch)?.into_array(batch.num_rows())?;
            let selected = value
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| DataFusionError::Internal("condition is not boolean".into()))?;
            // NULL counts as not selected: the row stays.
            let selected = match selected.null_count() {
                0 => selected.clone(),
                _ => prep_null_mask_filter(selected),
            };
            let n = selected.true_count();
            read.add(batch.num_rows());
            dropped.add(n);
            counts
                .read
                .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
            counts.selected.fetch_add(n as u64, Ordering::Relaxed);
            Ok(filter_record_batch(&batch, &not(&selected)?)?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
