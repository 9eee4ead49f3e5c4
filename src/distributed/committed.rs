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

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNode;
use datafusion::error::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::DistributedExec;

use crate::physical_plan::committed::CommittedExec;

/// The nodes that commit a statement and then answer it.
const COMMITTING: [&str; 5] = [
    "CommitExec",
    "DeleteExec",
    "UpdateExec",
    "MergeExec",
    "OverwriteExec",
];

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
