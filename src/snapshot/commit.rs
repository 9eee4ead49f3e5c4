//! The commit loop: apply changes on the latest table version, compare-and-swap the metadata
//! pointer, and on conflict reload and retry under the table's `commit.retry.*` properties.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::error::{DataFusionError, Result};
use iceberg::table::Table;
use iceberg::TableIdent;

use super::metadata_file::{new_metadata_location, write_metadata};
use super::producer::{SnapshotChanges, SnapshotProducer};
use crate::catalog::{table_handle, MetadataStore, SwapOutcome};
use crate::error::IcebergResultExt;

/// What a successful commit produced.
#[derive(Debug, Clone)]
pub struct CommitOutcome {
    /// The table as of the new snapshot.
    pub table: Table,
    /// The new snapshot's id.
    pub snapshot_id: i64,
    /// How many compare-and-swap attempts it took (1 = no conflict).
    pub attempts: u32,
}

struct RetryPolicy {
    retries: u32,
    min_wait: Duration,
    max_wait: Duration,
    total: Duration,
}

impl RetryPolicy {
    fn of(table: &Table) -> Result<Self> {
        let p = table.metadata().table_properties().df()?;
        Ok(Self {
            retries: p.commit_num_retries as u32,
            min_wait: Duration::from_millis(p.commit_min_retry_wait_ms),
            max_wait: Duration::from_millis(p.commit_max_retry_wait_ms),
            total: Duration::from_millis(p.commit_total_retry_timeout_ms),
        })
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .min_wait
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max_wait);
        // Jitter spreads competing writers apart.
        let jitter = rand::random::<f64>() * 0.5 + 0.75;
        exp.mul_f64(jitter)
    }
}

/// Commits `changes` to the table `ident` held by `store`.
///
/// On a lost compare-and-swap the table is reloaded, the changes re-applied and the swap retried.
/// When the commit finally fails, every file written for it (manifests, manifest lists, metadata
/// files) is deleted and the table is left as it was. The data files named in `changes` are the
/// caller's to clean up.
pub async fn commit(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    changes: SnapshotChanges,
) -> Result<CommitOutcome> {
    let started = Instant::now();
    let mut producer = SnapshotProducer::new(changes);
    let mut table = Arc::clone(&store).load(ident).await?;
    let policy = RetryPolicy::of(&table)?;
    let file_io = store.file_io().clone();
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let new_metadata = match producer.apply(&table, attempt).await {
            Ok(m) => m,
            Err(e) => {
                producer.cleanup_all(&file_io).await;
                return Err(e);
            }
        };
        let location = new_metadata_location(
            table.metadata().location(),
            table.metadata_location(),
            &new_metadata,
        );
        let new_path = match write_metadata(&file_io, &new_metadata, &location).await {
            Ok(p) => p,
            Err(e) => {
                let _ = file_io.delete(location.to_string()).await;
                producer.cleanup_all(&file_io).await;
                return Err(e.context(format!("writing metadata of table '{ident}'")));
            }
        };
        let expected = table.metadata_location_result().df()?.to_string();
        match Arc::clone(&store).swap(ident, &expected, &new_path).await {
            Ok(SwapOutcome::Swapped) => {
                let snapshot_id = producer.snapshot_id().ok_or_else(|| {
                    DataFusionError::Internal("committed without a snapshot id".into())
                })?;
                let table = table_handle(ident.clone(), new_path, new_metadata, file_io.clone())?;
                return Ok(CommitOutcome {
                    table,
                    snapshot_id,
                    attempts: attempt,
                });
            }
            Ok(SwapOutcome::Conflict) => {
                let _ = file_io.delete(&new_path).await;
                producer.cleanup_attempt(&file_io).await;
                if attempt > policy.retries || started.elapsed() >= policy.total {
                    producer.cleanup_all(&file_io).await;
                    return Err(DataFusionError::Execution(format!(
                        "commit to table '{ident}' failed: the table was changed concurrently \
                         {attempt} time(s) in a row (commit.retry.num-retries = {}); nothing was committed",
                        policy.retries
                    )));
                }
                tokio::time::sleep(policy.backoff(attempt - 1)).await;
                table = Arc::clone(&store).load(ident).await?;
            }
            Err(e) => {
                let _ = file_io.delete(&new_path).await;
                producer.cleanup_all(&file_io).await;
                return Err(e);
            }
        }
    }
}
