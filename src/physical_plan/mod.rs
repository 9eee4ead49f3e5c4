//! Our physical operators, one folder per family.

pub(crate) mod baseline;
pub mod change_rows;
pub mod commit;
#[cfg(feature = "distributed")]
pub(crate) mod committed;
pub mod equality_delete;
pub(crate) mod file_keys;
pub(crate) mod join_choice;
pub(crate) mod keep_rows;
pub(crate) mod memory_share;
pub(crate) mod merge;
pub(crate) mod orc;
pub(crate) mod parquet_files;
pub mod positional_delete;
pub mod scan;
pub(crate) mod spawned;
pub(crate) mod spill;
pub(crate) mod statement;
pub mod write;

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;

/// `plan` through the physical optimizer rules of `state` (as DataFusion optimizes every plan).
pub(crate) fn optimized(
    state: &datafusion::execution::context::SessionState,
    mut plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    for rule in state.physical_optimizers() {
        plan = rule.optimize(plan, state.config_options())?;
    }
    Ok(plan)
}

/// `context` running with `config` instead of its own session configuration.
pub(crate) fn with_config(
    context: &TaskContext,
    config: datafusion::prelude::SessionConfig,
) -> Arc<TaskContext> {
    Arc::new(TaskContext::new(
        context.task_id(),
        context.session_id(),
        config,
        context.scalar_functions().clone(),
        context.higher_order_functions().clone(),
        context.aggregate_functions().clone(),
        context.window_functions().clone(),
        context.runtime_env(),
    ))
}

/// `context` with DataFusion's file-stream work stealing off, so that partition `p` of a file
/// scan reads exactly file group `p` (nodes that assign deletes or positions by file group need
/// it; a sibling partition stealing a file would read it without them).
pub(crate) fn without_work_stealing(context: Arc<TaskContext>) -> Arc<TaskContext> {
    if !context
        .session_config()
        .options()
        .execution
        .enable_file_stream_work_stealing
    {
        return context;
    }
    let mut config = context.session_config().clone();
    config
        .options_mut()
        .execution
        .enable_file_stream_work_stealing = false;
    with_config(&context, config)
}

/// The file scan configuration of `plan`, if it is a file scan (`DataSourceExec`).
pub(crate) fn file_scan(
    plan: &Arc<dyn ExecutionPlan>,
) -> Option<&datafusion::datasource::physical_plan::FileScanConfig> {
    plan.downcast_ref::<datafusion::datasource::source::DataSourceExec>()?
        .data_source()
        .downcast_ref()
}

/// The plan `leaf` runs as: itself, or for a distributed leaf the scan of the task `context`
/// runs (its original scan when there is no context or one task).
#[cfg_attr(not(feature = "distributed"), allow(unused_variables))]
pub(crate) fn task_leaf<'a>(
    leaf: &'a Arc<dyn ExecutionPlan>,
    context: Option<&Arc<TaskContext>>,
) -> &'a Arc<dyn ExecutionPlan> {
    #[cfg(feature = "distributed")]
    if let Some(d) = leaf.downcast_ref::<datafusion_distributed::DistributedLeafExec>() {
        let task = context.map(datafusion_distributed::DistributedTaskContext::from_ctx);
        return match task {
            // A task past the variants gets the leaf itself, which no caller takes for a scan.
            Some(t) if t.task_count > 1 => d.variants().get(t.task_index).unwrap_or(leaf),
            _ => d.original(),
        };
    }
    leaf
}

/// The one child of a single-input node, for `with_new_children`.
pub(crate) fn single_child(
    node: &str,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let [input] = <[_; 1]>::try_from(children)
        .map_err(|_| DataFusionError::Internal(format!("{node} takes exactly one child")))?;
    Ok(input)
}

/// Whether a session with `config` distributes its plans over workers (the coordinator of a
/// cluster, feature `distributed`).
pub(crate) fn distributes(config: &datafusion::prelude::SessionConfig) -> bool {
    #[cfg(feature = "distributed")]
    {
        datafusion_distributed::get_distributed_worker_resolver(config).is_ok()
    }
    #[cfg(not(feature = "distributed"))]
    {
        let _ = config;
        false
    }
}
