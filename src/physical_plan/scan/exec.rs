//! [`IcebergScanExec`]: a transparent node over the parquet scan of an Iceberg snapshot.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::error::Result;
use datafusion::execution::TaskContext;

use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::single_child;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter_pushdown::{
    ChildFilterDescription, ChildPushdownResult, FilterDescription, FilterPushdownPhase,
    FilterPushdownPropagation,
};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

/// What planning decided for one scan, shown in `EXPLAIN`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanSummary {
    /// The table scanned.
    pub table: String,
    /// The snapshot read.
    pub snapshot_id: i64,
    /// Data files the snapshot has.
    pub total_files: usize,
    /// Data files left after pruning by partition values and column bounds.
    pub scanned_files: usize,
    /// Delete files that apply to the scanned data files.
    pub delete_files: usize,
    /// The Iceberg predicate used for pruning, if any.
    pub predicate: Option<String>,
    /// Whether the delete manifests were streamed past the data files instead of indexed
    /// (snapshots above `iceberg.planning_threshold` delete files).
    pub streamed_planning: bool,
}

/// Reads an Iceberg snapshot through its child (DataFusion's parquet scan, with this crate's
/// delete operators above it when deletes apply). It adds nothing at
/// run time: it forwards execution, statistics, filter pushdown and ordering, and exists so that
/// plans say which table and snapshot are read and what pruning kept.
#[derive(Debug)]
pub struct IcebergScanExec {
    input: Arc<dyn ExecutionPlan>,
    summary: ScanSummary,
    /// Baseline metrics (output rows, elapsed compute).
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl IcebergScanExec {
    /// Wraps the parquet scan `input` of the scan described by `summary`.
    pub fn new(input: Arc<dyn ExecutionPlan>, summary: ScanSummary) -> Self {
        Self {
            input,
            summary,
            metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
        }
    }

    /// What planning decided.
    pub fn summary(&self) -> &ScanSummary {
        &self.summary
    }
}

impl DisplayAs for IcebergScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.summary;
        write!(
            f,
            "IcebergScanExec: table={}, snapshot={}, files={} of {}",
            s.table, s.snapshot_id, s.scanned_files, s.total_files
        )?;
        if s.delete_files > 0 {
            write!(f, ", delete_files={}", s.delete_files)?;
        }
        if s.streamed_planning {
            write!(f, ", planning=streamed")?;
        }
        if let Some(p) = &s.predicate {
            write!(f, ", pruning_predicate={p}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for IcebergScanExec {
    fn name(&self) -> &str {
        "IcebergScanExec"
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

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = single_child("IcebergScanExec", children)?;
        Ok(Arc::new(Self::new(input, self.summary.clone())))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let input = baseline.input(self.input.execute(partition, context)?);
        Ok(baseline.output(input))
    }

    fn child_stats_requests(
        &self,
        partition: Option<usize>,
    ) -> Vec<datafusion::physical_plan::ChildStats> {
        vec![datafusion::physical_plan::ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &datafusion::physical_plan::StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(Arc::clone(&input_stats[0]))
    }

    fn gather_filters_for_pushdown(
        &self,
        _phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        _config: &ConfigOptions,
    ) -> Result<FilterDescription> {
        // Parquet leaves NaN out of a float column's min and max, and DataFusion orders NaN
        // above every number: its parquet reader, pruning row groups and pages by those
        // bounds, would drop NaN rows that `x > 10` or `x = 'NaN'` select. Filters on float
        // columns stay above the scan (planning's own pruning counts NaNs).
        let schema = self.input.schema();
        let allowed = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| !holds_floats(f.data_type()))
            .map(|(i, _)| i)
            .collect();
        Ok(FilterDescription::new().with_child(
            ChildFilterDescription::from_child_with_allowed_indices(
                &parent_filters,
                allowed,
                &self.input,
            )?,
        ))
    }

    fn handle_child_pushdown_result(
        &self,
        _phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        Ok(FilterPushdownPropagation::if_all(child_pushdown_result))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Whether values of `ty` are or hold floating-point numbers.
fn holds_floats(ty: &DataType) -> bool {
    match ty {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => true,
        DataType::Struct(fields) => fields.iter().any(|f| holds_floats(f.data_type())),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => holds_floats(f.data_type()),
        DataType::Dictionary(_, v) => holds_floats(v),
        DataType::RunEndEncoded(_, v) => holds_floats(v.data_type()),
        _ => false,
    }
}
