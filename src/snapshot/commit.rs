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

/// A commit whose effect is unknown: the files it wrote may be part of the table now, so
/// nothing may be deleted.
#[derive(Debug)]
pub struct CommitStateUnknown(pub String);

impl std::fmt::Display for CommitStateUnknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommitStateUnknown {}

/// Whether `e` (or a cause of it) says the commit's outcome is unknown.
pub fn is_commit_state_unknown(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::External(inner) => inner.is::<CommitStateUnknown>(),
        DataFusionError::Context(_, inner) => is_commit_state_unknown(inner),
        _ => false,
    }
}

/// The outcome of a swap that took effect. Nothing after this point may delete files.
fn committed(
    ident: &TableIdent,
    producer: &SnapshotProducer,
    new_path: String,
    new_metadata: iceberg::spec::TableMetadata,
    file_io: &iceberg::io::FileIO,
    attempts: u32,
) -> Result<CommitOutcome> {
    let unknown = |what: String| {
        DataFusionError::External(Box::new(CommitStateUnknown(format!(
            "table '{ident}' was committed, but {what}"
        ))))
    };
    let snapshot_id = producer
        .snapshot_id()
        .ok_or_else(|| unknown("its snapshot id is missing".into()))?;
    let table = table_handle(ident.clone(), new_path, new_metadata, file_io.clone())
        .map_err(|e| unknown(format!("its handle could not be built: {e}")))?;
    Ok(CommitOutcome {
        table,
        snapshot_id,
        attempts,
    })
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
            .min(self.max_wait)
            .min(Duration::from_secs(3600));
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
    crate::snapshot::metadata_file::refuse_inline_manifests(table.metadata())?;
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
                return committed(ident, &producer, new_path, new_metadata, &file_io, attempt)
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
                table = match Arc::clone(&store).load(ident).await {
                    Ok(t) => t,
                    Err(e) => {
                        producer.cleanup_all(&file_io).await;
                        return Err(e);
                    }
                };
            }
            Err(e) => {
                // The swap may have happened even though it reported an error (say, the
                // connection dropped after the UPDATE ran): look before deleting anything.
                match Arc::clone(&store).load(ident).await {
                    Ok(now) if now.metadata_location() == Some(new_path.as_str()) => {
                        return committed(ident, &producer, new_path, new_metadata, &file_io, attempt)
                    }
                    Ok(_) => {
                        let _ = file_io.delete(&new_path).await;
                        producer.cleanup_all(&file_io).await;
                        return Err(e);
                    }
                    Err(reload) => {
                        return Err(DataFusionError::External(Box::new(CommitStateUnknown(format!(
                            "commit to table '{ident}' failed ({e}) and the table could not be                              reloaded to check whether it took effect ({reload}); files are kept"
                        )))))
                    }
                }
            }
        }
    }
}
