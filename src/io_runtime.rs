//! A small dedicated Tokio runtime for catalog I/O.
//!
//! DataFusion's catalog traits are partly synchronous (`SchemaProvider::table_names`,
//! `register_table`, ...), while the catalog database and file I/O are asynchronous. All catalog
//! I/O runs on this runtime, so it can be awaited from any runtime and waited for from
//! synchronous code without deadlocking the caller's executor.

use std::future::Future;
use std::sync::OnceLock;

use datafusion::error::{DataFusionError, Result};

fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("iceberg-exec-io")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| DataFusionError::Execution(format!("cannot start the catalog I/O runtime: {e}")))
}

/// Runs `fut` on the I/O runtime and awaits its result from any async context.
pub(crate) async fn spawn<T, F>(fut: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    runtime()?
        .spawn(fut)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
}

/// Runs `fut` on the I/O runtime and blocks the calling thread until it finishes.
///
/// For DataFusion's synchronous catalog methods. Must not be called from a task that runs on the
/// I/O runtime itself.
pub(crate) fn block_on<T, F>(fut: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let handle = runtime()?.spawn(fut);
    let joined = match tokio::runtime::Handle::try_current() {
        // Inside a multi-threaded runtime, tell the scheduler this worker is about to block.
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| futures::executor::block_on(handle))
        }
        _ => futures::executor::block_on(handle),
    };
    joined.map_err(|e| DataFusionError::External(Box::new(e)))?
}

/// The iceberg crate's runtime handle, backed by the I/O runtime.
pub(crate) fn iceberg_runtime() -> Result<iceberg::Runtime> {
    Ok(iceberg::Runtime::new(runtime()?))
}
