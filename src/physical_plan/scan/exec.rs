//! [`IcebergScanExec`]: a transparent node over the parquet scan of an Iceberg snapshot.

use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::error::Result;
use datafusion::execution::TaskContext;

use crate::physical_plan::single_child;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
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
}

impl IcebergScanExec {
    /// Wraps the parquet scan `input` of the scan described by `summary`.
    pub fn new(input: Arc<dyn ExecutionPlan>, summary: ScanSummary) -> Self {
        Self { input, summary }
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
        self.input.execute(partition, context)
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
        FilterDescription::from_children(parent_filters, &self.children())
    }

    fn handle_child_pushdown_result(
        &self,
        _phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        Ok(FilterPushdownPropagation::if_all(child_pushdown_result))
    }
}
