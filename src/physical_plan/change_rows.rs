//! [`ChangeRowsExec`]: the row change of a copy-on-write `DELETE` or `UPDATE`, applied to the
//! rows of the files it rewrites.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::compute::kernels::zip::zip;
use arrow::compute::{filter_record_batch, prep_null_mask_filter};
use arrow::datatypes::DataType;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::apply_expression_roots;
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::keep_rows::keep_rows;
use crate::physical_plan::single_child;

/// Rows seen and rows selected by a [`ChangeRowsExec`], over all its partitions.
#[derive(Debug, Default)]
pub struct ChangeCounts {
    /// Input rows.
    pub read: AtomicU64,
    /// Rows the condition is TRUE for (not passed on).
    pub selected: AtomicU64,
}

impl ChangeCounts {
    /// (read, selected) so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.selected.load(Ordering::Relaxed),
        )
    }
}

/// What happens to the rows a condition selects.
#[derive(Debug, Clone)]
pub enum RowChange {
    /// They are dropped: the output holds the rows for which `condition IS NOT TRUE`.
    Delete,
    /// Columns (by index) take new values (expressions over the input, of the column's type);
    /// every row is passed on.
    Update(Vec<(usize, Arc<dyn PhysicalExpr>)>),
    /// Like `Update`, passing on only the selected rows (the new rows of a merge-on-read
    /// `UPDATE`, whose old versions are deleted by position).
    UpdateSelected(Vec<(usize, Arc<dyn PhysicalExpr>)>),
}

/// Applies a `DELETE`'s or `UPDATE`'s change to the rows its condition selects (TRUE; a NULL
/// condition selects nothing) and passes the rest through unchanged. It counts the rows it reads
/// and the rows it selects, so the statement can check its two passes against each other.
#[derive(Debug)]
pub struct ChangeRowsExec {
    input: Arc<dyn ExecutionPlan>,
    condition: Arc<dyn PhysicalExpr>,
    change: RowChange,
    counts: Arc<ChangeCounts>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl ChangeRowsExec {
    /// Changes `input`'s rows that `condition` (over `input`'s schema) selects.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        condition: Arc<dyn PhysicalExpr>,
        change: RowChange,
        counts: Arc<ChangeCounts>,
    ) -> Result<Self> {
        let schema = input.schema();
        let ty = condition.data_type(&schema)?;
        if ty != DataType::Boolean {
            return Err(DataFusionError::Plan(format!(
                "a condition must be boolean, got {ty}"
            )));
        }
        if let RowChange::Update(assignments) | RowChange::UpdateSelected(assignments) = &change {
            for (i, e) in assignments {
                let field = schema
                    .fields()
                    .get(*i)
                    .ok_or_else(|| DataFusionError::Internal(format!("no column {i} to update")))?;
                let ty = e.data_type(&schema)?;
                if &ty != field.data_type() {
                    return Err(DataFusionError::Plan(format!(
                        "cannot assign a value of type {ty} to column '{}' of type {}",
                        field.name(),
                        field.data_type()
                    )));
                }
            }
        }
        // An update may change the columns the input is ordered by: its output claims no order
        // (so a sort the plan needs above it stays above it).
        let properties = match &change {
            RowChange::Delete => Arc::clone(input.properties()),
            RowChange::Update(_) | RowChange::UpdateSelected(_) => {
                let p = input.properties();
                Arc::new(PlanProperties::new(
                    EquivalenceProperties::new(Arc::clone(&schema)),
                    p.output_partitioning().clone(),
                    p.emission_type,
                    p.boundedness,
                ))
            }
        };
        Ok(Self {
            input,
            condition,
            change,
            counts,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        })
    }

    /// The condition that selects rows.
    pub fn condition(&self) -> &Arc<dyn PhysicalExpr> {
        &self.condition
    }

    /// What happens to the selected rows.
    pub fn change(&self) -> &RowChange {
        &self.change
    }

    /// The counts this node adds to.
    pub fn counts(&self) -> &Arc<ChangeCounts> {
        &self.counts
    }
}

impl DisplayAs for ChangeRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.change {
            RowChange::Delete => write!(f, "ChangeRowsExec: delete where {}", self.condition),
            RowChange::Update(a) | RowChange::UpdateSelected(a) => {
                let schema = self.input.schema();
                let set: Vec<String> = a
                    .iter()
                    .map(|(i, e)| format!("{} = {e}", schema.field(*i).name()))
                    .collect();
                write!(
                    f,
                    "ChangeRowsExec: update set {} where {}",
                    set.join(", "),
                    self.condition
                )
            }
        }
    }
}

impl ExecutionPlan for ChangeRowsExec {
    fn name(&self) -> &str {
        "ChangeRowsExec"
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let assigned = match &self.change {
            RowChange::Delete => vec![],
            RowChange::Update(a) | RowChange::UpdateSelected(a) => {
                a.iter().map(|(_, e)| e).collect()
            }
        };
        apply_expression_roots(std::iter::once(&self.condition).chain(assigned), f)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![matches!(self.change, RowChange::Delete)]
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        match self.change {
            RowChange::Delete => CardinalityEffect::LowerEqual,
            RowChange::Update(_) => CardinalityEffect::Equal,
            RowChange::UpdateSelected(_) => CardinalityEffect::LowerEqual,
        }
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::try_new(
            single_child("ChangeRowsExec", children)?,
            Arc::clone(&self.condition),
            self.change.clone(),
            Arc::clone(&self.counts),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let input = baseline.input(self.input.execute(partition, context)?);
        let schema = input.schema();
        let condition = Arc::clone(&self.condition);
        let counts = Arc::clone(&self.counts);
        let change = self.change.clone();
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
            match &change {
                RowChange::Delete => keep_rows(batch, &!selected.values()),
                RowChange::Update(assignments) => {
                    let mut columns = batch.columns().to_vec();
                    if n > 0 {
                        for (i, e) in assignments {
                            let new = e.evaluate(&batch)?.into_array(batch.num_rows())?;
                            columns[*i] = zip(&selected, &new, &columns[*i])?;
                        }
                    }
                    Ok(RecordBatch::try_new(batch.schema(), columns)?)
                }
                RowChange::UpdateSelected(assignments) => {
                    let batch = filter_record_batch(&batch, &selected)?;
                    let mut columns = batch.columns().to_vec();
                    for (i, e) in assignments {
                        columns[*i] = e.evaluate(&batch)?.into_array(batch.num_rows())?;
                    }
                    Ok(RecordBatch::try_new(batch.schema(), columns)?)
                }
            }
        });
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(schema, stream))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
