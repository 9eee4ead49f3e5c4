//! The commit loop: apply changes on the latest table version, hand the new metadata to the
//! table's [`MetadataStore`] (a pointer swap, or a REST catalog's commit), and on conflict reload
//! and retry under the table's `commit.retry.*` properties.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::error::{DataFusionError, Result};
use iceberg::table::Table;
use iceberg::TableIdent;

use super::changes::SnapshotChanges;
use super::producer::SnapshotProducer;
use super::store::{CommitResult, MetadataStore};
use super::written::WrittenFiles;
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
    /// Whether the statement had committed already (see [`STATEMENT_ID_PROPERTY`]): nothing
    /// was committed now, and `snapshot_id` is that earlier commit's snapshot.
    pub duplicate: bool,
}

/// The snapshot summary property naming the statement a snapshot commits, set by statements a
/// host may run more than once (Ballista retries the task that commits). A commit whose changes
/// carry it looks for it among the table's snapshots before every attempt, and commits nothing
/// when it is there: the statement commits once however often it runs.
pub const STATEMENT_ID_PROPERTY: &str = "iceberg-exec.statement-id";

/// The snapshot of `table` that committed `statement`, if one did.
fn committed_by(table: &Table, statement: &str) -> Option<i64> {
    table
        .metadata()
        .snapshots()
        .find(|s| {
            s.summary()
                .additional_properties
                .get(STATEMENT_ID_PROPERTY)
                .is_some_and(|id| id == statement)
        })
        .map(|s| s.snapshot_id())
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

/// How often and how patiently a commit that lost to another is tried again: the table's
/// `commit.retry.*` properties (Java's defaults when unset).
pub(crate) struct RetryPolicy {
    /// Attempts after the first.
    pub(crate) retries: u32,
    min_wait: Duration,
    max_wait: Duration,
    /// Time after which no attempt starts.
    pub(crate) total: Duration,
}

impl RetryPolicy {
    /// The policy of `table`.
    pub(crate) fn of(table: &Table) -> Result<Self> {
        let p = table.metadata().table_properties().df()?;
        Ok(Self {
            retries: p.commit_num_retries as u32,
            min_wait: Duration::from_millis(p.commit_min_retry_wait_ms),
            max_wait: Duration::from_millis(p.commit_max_retry_wait_ms),
            total: Duration::from_millis(p.commit_total_retry_timeout_ms),
        })
    }

    /// The wait before attempt `attempt + 2` (exponential from `min-wait-ms`, jittered).
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
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
/// On a conflict (the table moved on) the table is reloaded, the changes re-applied and the
/// commit retried. When the commit finally fails, every file written for it (manifests,
/// manifest lists, metadata files) is deleted and the table is left as it was, unless the
/// outcome is unknown ([`CommitStateUnknown`]): then every file is kept. The data files named in
/// `changes` are the caller's to clean up.
pub async fn commit(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    changes: SnapshotChanges,
) -> Result<CommitOutcome> {
    let started = Instant::now();
    let statement = changes
        .summary_properties
        .get(STATEMENT_ID_PROPERTY)
        .cloned();
    let mut producer = SnapshotProducer::new(changes);
    let mut table = Arc::clone(&store).load(ident).await?;
    super::metadata_file::refuse_inline_manifests(table.metadata())?;
    let policy = RetryPolicy::of(&table)?;
    let file_io = store.file_io().clone();
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        if let Some(snapshot_id) = statement.as_deref().and_then(|id| committed_by(&table, id)) {
            producer.cleanup_all(&file_io).await;
            return Ok(CommitOutcome {
                table,
                snapshot_id,
                attempts: attempt - 1,
                duplicate: true,
            });
        }
        let change = match producer.apply(&table, attempt).await {
            Ok(c) => c,
            Err(e) => {
                producer.cleanup_all(&file_io).await;
                return Err(e);
            }
        };
        match Arc::clone(&store).commit_metadata(ident, change).await {
            Ok(CommitResult::Committed(table)) => {
                let snapshot_id = producer.snapshot_id().ok_or_else(|| {
                    DataFusionError::External(Box::new(CommitStateUnknown(format!(
                        "table '{ident}' was committed, but its snapshot id is missing"
                    ))))
                })?;
                return Ok(CommitOutcome {
                    table: *table,
                    snapshot_id,
                    attempts: attempt,
                    duplicate: false,
                });
            }
            Ok(CommitResult::Conflict) => {
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
            Err(e) if is_commit_state_unknown(&e) => return Err(e),
            Err(e) => {
                producer.cleanup_all(&file_io).await;
                return Err(e);
            }
        }
    }
}

/// Commits `changes` to `table`; when the commit fails for sure (not "state unknown"), the files
/// the statement wrote are removed. When an earlier run of the same statement had committed
/// (a duplicate, see [`STATEMENT_ID_PROPERTY`]), the files of this run that its snapshot does not
/// reference are removed: a host that retries only the committing task hands it the files the
/// first run committed, and those stay.
pub(crate) async fn commit_or_clean_up(
    store: &Arc<dyn MetadataStore>,
    table: &Table,
    changes: SnapshotChanges,
    written: &WrittenFiles,
) -> Result<CommitOutcome> {
    match commit(Arc::clone(store), table.identifier(), changes).await {
        Ok(outcome) if outcome.duplicate => {
            remove_unreferenced(&outcome.table, outcome.snapshot_id, written).await;
            Ok(outcome)
        }
        Ok(outcome) => {
            written.take();
            Ok(outcome)
        }
        Err(e) => {
            if !is_commit_state_unknown(&e) {
                written.remove_all(table.file_io()).await;
            }
            Err(e)
        }
    }
}

/// Removes the files recorded in `written` that the snapshot `snapshot_id` of `table` does
/// not reference. When the snapshot cannot be read, none is removed (orphans at worst).
async fn remove_unreferenced(table: &Table, snapshot_id: i64, written: &WrittenFiles) {
    let file_io = table.file_io();
    let recorded = written.take();
    let Some(snapshot) = table.metadata().snapshot_by_id(snapshot_id) else {
        return;
    };
    let referenced: std::collections::HashSet<String> =
        match crate::file_planning::plan_files(table, snapshot).await {
            Ok(files) => files.into_iter().map(|f| f.path).collect(),
            Err(e) => {
                log::warn!("kept the files of a repeated commit (cannot list the table: {e})");
                return;
            }
        };
    for f in recorded.iter().filter(|f| !referenced.contains(*f)) {
        if let Err(e) = file_io.delete(f).await {
            log::warn!("could not remove {f} after a repeated commit: {e}");
        }
    }
}
