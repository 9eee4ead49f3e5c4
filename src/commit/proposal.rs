//! Commits of metadata alone (schema, properties, specs, refs: no new snapshot), made again on
//! the table's new version when another commit wins meanwhile.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};

use super::{CommitResult, MetadataChange, MetadataStore, RetryPolicy};
use crate::error::IcebergResultExt;

/// A metadata change to commit: the new metadata, its updates, and what the table must still
/// be for them to apply.
pub(crate) struct Proposal {
    pub(crate) metadata: TableMetadata,
    pub(crate) updates: Vec<TableUpdate>,
    pub(crate) requirements: Vec<TableRequirement>,
}

impl Proposal {
    /// What `builder` built (`None` when it changes nothing).
    pub(crate) fn of(
        builder: TableMetadataBuilder,
        requirements: Vec<TableRequirement>,
    ) -> Result<Option<Self>> {
        let built = builder.build().df()?;
        Ok((!built.changes.is_empty()).then_some(Self {
            metadata: built.metadata,
            updates: built.changes,
            requirements,
        }))
    }
}

/// Commits the metadata change `decide` makes of the table `ident` of `store` (none: nothing
/// to commit), deciding again on the new version when another commit wins meanwhile (under the
/// table's `commit.retry.*` properties, with backoff, as data commits retry). Returns what
/// `decide` answered with the change that committed. `what` names the statement in errors.
pub(crate) async fn commit_proposal<R>(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    what: &str,
    mut decide: impl FnMut(&Table) -> Result<(Option<Proposal>, R)>,
) -> Result<R> {
    let started = std::time::Instant::now();
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let table = Arc::clone(&store).load(ident).await?;
        let policy = RetryPolicy::of(&table)?;
        let (proposal, answer) = decide(&table)?;
        let Some(proposal) = proposal else {
            return Ok(answer);
        };
        let proposed = MetadataChange {
            base: table.clone(),
            metadata: proposal.metadata,
            updates: proposal.updates,
            requirements: proposal.requirements,
        };
        match Arc::clone(&store).commit_metadata(ident, proposed).await? {
            CommitResult::Committed(_) => return Ok(answer),
            CommitResult::Conflict => {
                if attempt > policy.retries || started.elapsed() >= policy.total {
                    return Err(DataFusionError::Execution(format!(
                        "{what} on '{ident}' lost to concurrent commits {attempt} times \
                         (commit.retry.num-retries = {}); nothing was changed",
                        policy.retries
                    )));
                }
                tokio::time::sleep(policy.backoff(attempt - 1)).await;
            }
        }
    }
}
