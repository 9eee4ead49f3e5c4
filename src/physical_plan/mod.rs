//! Our physical operators, one folder per family.

pub mod change_rows;
pub mod commit;
pub mod equality_delete;
pub(crate) mod parquet_files;
pub mod positional_delete;
pub mod scan;
mod spill;
pub mod write;

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;

/// The one child of a single-input node, for `with_new_children`.
pub(crate) fn single_child(
    node: &str,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let [input] = <[_; 1]>::try_from(children)
        .map_err(|_| DataFusionError::Internal(format!("{node} takes exactly one child")))?;
    Ok(input)
}
