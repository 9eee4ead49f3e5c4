//! Distributed execution on [datafusion-distributed](https://github.com/datafusion-contrib/datafusion-distributed)
//! (feature `distributed`).
//!
//! ```text
//!  coordinator (IcebergSession::with_workers)          workers (serve_worker)
//!  ─────────────────────────────────────────          ──────────────────────
//!  catalog, planning, scan planning (manifests)        decode the stage's plan with
//!  DistributedExec: head stage ◄── Arrow batches ───   IcebergPhysicalCodec, read parquet and
//!    split into stages, leaves scaled up per task ──►  delete files from the same storage,
//!    (whole data files per task; the deleted keys      run the stage's tasks
//!     of an equality delete go whole to every task)
//! ```
//!
//! The coordinator plans as a single session does, then cuts the plan into stages at its
//! repartitions. Each stage's leaves are scaled up to its task count here, not by the built-in
//! file-scan rule: a data file is never split into byte ranges across tasks (the delete
//! operators above it count row positions from the start of each file), and the delete rows
//! an equality-delete join builds from go whole to every task (a task that saw only some would
//! keep rows that another task's keys delete).

#[cfg(feature = "ballista")]
mod ballista;
mod codec;
mod committed;
mod planned;

use std::net::SocketAddr;
use std::sync::Arc;

use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_distributed::{
    DistributedExt, DistributedLeafExec, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
    SessionStateBuilderExt, Worker, WorkerQueryContext, WorkerResolver,
};
use url::Url;

pub use crate::physical_plan::committed::CommittedExec;
#[cfg(feature = "ballista")]
pub use ballista::{ballista_config, BallistaIcebergLogicalCodec, BallistaIcebergPhysicalCodec};
pub use codec::{IcebergLogicalCodec, IcebergPhysicalCodec};

use crate::file_planning::FieldIdAdapterFactory;
use crate::physical_plan::scan::equality::is_delete_rows_scan;

/// A fixed list of workers.
#[derive(Debug, Clone)]
pub struct StaticWorkers(pub Vec<Url>);

impl WorkerResolver for StaticWorkers {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.clone())
    }
}

/// `builder` (a session's, with its query planner set) made the coordinator of a cluster of
/// `workers`: plans are distributed over them, this crate's nodes travel with
/// [`IcebergPhysicalCodec`], `SET iceberg.*` options travel with every task, and scans are
/// split over tasks by whole data files.
pub fn coordinator(builder: SessionStateBuilder, workers: Vec<Url>) -> SessionStateBuilder {
    let mut builder = builder;
    let options = builder
        .config()
        .get_or_insert_default()
        .options()
        .extensions
        .get::<crate::IcebergOptions>()
        .cloned()
        .unwrap_or_default();
    let mut builder = builder
        .with_distributed_planner()
        .with_distributed_worker_resolver(StaticWorkers(workers))
        .with_distributed_user_codec(IcebergPhysicalCodec)
        .with_distributed_option_extension(options)
        .with_distributed_scale_up_leaf_node_handler(scale_up_iceberg_leaf);
    // Statements that commit answer once committed (see `committed.rs`).
    match builder.query_planner().take() {
        Some(inner) => {
            builder.with_query_planner(Arc::new(committed::CommitAwarePlanner { inner }))
        }
        None => builder,
    }
}

/// Whether a session with `config` is a coordinator (has workers to send plans to).
pub(crate) fn is_coordinator(config: &datafusion::prelude::SessionConfig) -> bool {
    datafusion_distributed::get_distributed_worker_resolver(config).is_ok()
}

/// A worker whose tasks run this crate's nodes, reading through `runtime` (its object stores
/// and memory pool).
pub fn worker(runtime: Arc<RuntimeEnv>) -> Worker {
    Worker::from_session_builder(|ctx: WorkerQueryContext| async move {
        let builder = crate::uuid_type::with_functions(ctx.builder)
            .with_distributed_user_codec(IcebergPhysicalCodec)
            .with_distributed_option_extension_from_headers::<crate::IcebergOptions>(
                &ctx.headers,
            )?;
        Ok(builder.build())
    })
    .with_runtime_env(runtime)
}

/// Serves `worker` over gRPC on `addr` (port 0: any free port) until the returned task is
/// aborted or the process ends; returns the worker's URL.
pub async fn serve_worker(
    worker: Worker,
    addr: SocketAddr,
) -> Result<(Url, tokio::task::JoinHandle<Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| DataFusionError::Execution(format!("worker cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr()?;
    let url = Url::parse(&format!("http://{local}"))
        .map_err(|e| DataFusionError::Execution(format!("worker address {local}: {e}")))?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let handle = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(worker.into_worker_server())
            .serve_with_incoming(incoming)
            .await
            .map_err(|e| DataFusionError::Execution(format!("worker on {local}: {e}")))
    });
    Ok((url, handle))
}

/// Scales up the leaves of this crate's scans (see the module docs); other leaves are left
/// to the built-in rules.
fn scale_up_iceberg_leaf(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let config = crate::physical_plan::file_scan(ev.plan)?;
    if is_delete_rows_scan(config) {
        // Every task joins against all the deleted keys.
        return Some(Ok(ScaleUpLeafNodeEventResponse::new(Arc::clone(ev.plan))));
    }
    config
        .expr_adapter_factory
        .as_ref()
        .and_then(FieldIdAdapterFactory::of)?;
    Some(split_by_whole_files(ev.plan, config, ev.task_count))
}

/// `plan` split over `tasks` tasks, each a copy of the scan with a share of its data files,
/// every file whole; the biggest files are dealt first, each to the task with the fewest bytes.
fn split_by_whole_files(
    plan: &Arc<dyn ExecutionPlan>,
    config: &FileScanConfig,
    tasks: usize,
) -> Result<ScaleUpLeafNodeEventResponse> {
    let partitions = plan.output_partitioning().partition_count().max(1);
    let mut files: Vec<_> = config
        .file_groups
        .iter()
        .flat_map(|g| g.iter().cloned())
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.object_meta.size));
    // tasks × partitions groups; each file goes to the lightest group.
    let mut groups = vec![(0u64, vec![]); tasks.max(1) * partitions];
    for file in files {
        let lightest = groups
            .iter_mut()
            .min_by_key(|(bytes, _)| *bytes)
            .expect("at least one group");
        lightest.0 += file.object_meta.size;
        lightest.1.push(file);
    }
    let mut variants = vec![];
    for task in 0..tasks.max(1) {
        let mut scan = config.clone();
        scan.file_groups = groups[task * partitions..(task + 1) * partitions]
            .iter()
            .map(|(_, files)| FileGroup::new(files.clone()))
            .collect();
        variants.push(DataSourceExec::from_data_source(scan) as Arc<dyn ExecutionPlan>);
    }
    Ok(ScaleUpLeafNodeEventResponse::new(Arc::new(
        DistributedLeafExec::try_new(Arc::clone(plan), variants)?,
    )))
}
