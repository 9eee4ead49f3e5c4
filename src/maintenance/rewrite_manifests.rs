//! `rewrite_manifests`: the data manifests of the current snapshot rewritten with their live
//! entries clustered by partition, so planning a partition reads few manifests.
//!
//! ```text
//!  parent's manifest list ─┬─ data manifests ─► live entries (snapshot ids, sequence numbers
//!                          │                    and row ids kept) ─► sorted by partition
//!                          │                    (their keys, spilling; the entries read back a
//!                          │                    window at a time, see snapshot/cluster.rs)
//!                          │                    ─► manifests of commit.manifest.target-size-bytes
//!                          └─ delete manifests ─► carried as they are
//!  commit  `replace`, no file added or removed; on a concurrent commit it is done again on top
//! ```

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::context::SessionState;
use iceberg::spec::{ManifestContentType, Operation};
use iceberg::TableIdent;

use crate::commit::MetadataStore;
use crate::commit::{commit, SnapshotChanges};
use crate::storage::location::LocationMap;

/// What a manifest rewrite did, in Spark's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewriteManifestsResult {
    /// Data manifests replaced.
    pub rewritten_manifests_count: u64,
    /// Data manifests written.
    pub added_manifests_count: u64,
}

/// Rewrites a table's data manifests clustered by partition: Spark's `rewrite_manifests`.
#[derive(Debug, Clone)]
pub struct RewriteManifests {
    store: Arc<dyn MetadataStore>,
    ident: TableIdent,
}

impl RewriteManifests {
    /// A rewrite of the manifests of the table `ident` in `store`.
    pub fn new(store: Arc<dyn MetadataStore>, ident: TableIdent) -> Self {
        Self { store, ident }
    }

    /// Rewrites and commits (nothing when the snapshot has fewer than two data manifests). The
    /// entries are sorted by partition in `state`'s memory pool, spilling, and held a window at
    /// a time: millions of entries in bounded memory.
    pub async fn execute(self, state: &SessionState) -> Result<RewriteManifestsResult> {
        let table = Arc::clone(&self.store).load(&self.ident).await?;
        let Some(snapshot) = table.metadata().current_snapshot() else {
            return Ok(RewriteManifestsResult::default());
        };
        let list =
            crate::file_planning::manifest_list(&table, &LocationMap::default(), snapshot).await?;
        let data = list
            .iter()
            .filter(|m| m.content == ManifestContentType::Data)
            .count();
        if data < 2 {
            return Ok(RewriteManifestsResult::default());
        }
        let changes = SnapshotChanges {
            operation: Operation::Replace,
            rewrite_data_manifests: true,
            task_context: Some(state.task_ctx()),
            ..Default::default()
        };
        let outcome = commit(Arc::clone(&self.store), &self.ident, changes).await?;
        let summary = &outcome
            .table
            .metadata()
            .snapshot_by_id(outcome.snapshot_id)
            .map(|s| s.summary().additional_properties.clone())
            .unwrap_or_default();
        let count = |key: &str| summary.get(key).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(RewriteManifestsResult {
            rewritten_manifests_count: count("manifests-replaced"),
            added_manifests_count: count("manifests-created"),
        })
    }
}
