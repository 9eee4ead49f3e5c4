//! The versions an [`IcebergTableProvider`] reads and writes: a pinned snapshot, branch, tag or
//! time, a branch written to, and the session's write branch.

use datafusion::catalog::Session;
use datafusion::error::{DataFusionError, Result};

use super::IcebergTableProvider;
use crate::commit::WriteTo;
use crate::error::IcebergResultExt;
use crate::physical_plan::scan::schema::arrow_schema;
use crate::IcebergOptions;

impl IcebergTableProvider {
    /// Pins scans to a snapshot, read with the schema that snapshot was written with.
    /// The provider becomes read-only.
    pub fn with_snapshot_id(mut self, snapshot_id: i64) -> Result<Self> {
        let metadata = self.table.metadata();
        let Some(snapshot) = metadata.snapshot_by_id(snapshot_id) else {
            return Err(DataFusionError::Plan(format!(
                "table '{}' has no snapshot {snapshot_id}",
                self.table.identifier()
            )));
        };
        self.schema = arrow_schema(snapshot.schema(metadata).df()?.as_ref())?;
        self.snapshot_id = Some(snapshot_id);
        self.snapshot_schema = true;
        self.store = None;
        Ok(self)
    }

    /// Pins scans to the snapshot a branch or tag points at.
    ///
    /// A tag is read with the schema of its snapshot; a branch with the table's current schema
    /// (a branch moves on, like the table).
    pub fn with_ref(self, name: &str) -> Result<Self> {
        let metadata = self.table.metadata();
        let Some(snapshot) = metadata.snapshot_for_ref(name) else {
            return Err(DataFusionError::Plan(format!(
                "table '{}' has no branch or tag '{name}'",
                self.table.identifier()
            )));
        };
        let id = snapshot.snapshot_id();
        let branch = crate::commit::refs::table_ref(metadata, name)?.is_some_and(|r| r.branch);
        let mut pinned = self.with_snapshot_id(id)?;
        if branch {
            pinned.schema = arrow_schema(pinned.table.metadata().current_schema())?;
            pinned.snapshot_schema = false;
        }
        Ok(pinned)
    }

    /// Pins scans to the snapshot that was current at `timestamp_ms` (milliseconds since the
    /// epoch), by the table's snapshot log.
    pub fn with_timestamp_ms(self, timestamp_ms: i64) -> Result<Self> {
        let metadata = self.table.metadata();
        let id = metadata
            .history()
            .iter()
            .filter(|entry| entry.timestamp_ms() <= timestamp_ms)
            .max_by_key(|entry| entry.timestamp_ms())
            .map(|entry| entry.snapshot_id)
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "table '{}' has no snapshot at or before timestamp {timestamp_ms} ms",
                    self.table.identifier()
                ))
            })?;
        self.with_snapshot_id(id)
    }

    /// Reads and writes the branch `name` (which must exist): scans read its head with the
    /// table's current schema, and `INSERT`, `DELETE`, `UPDATE`, `MERGE` and `INSERT OVERWRITE`
    /// commit on top of its head, validated against the commits made to it since; `main` is
    /// untouched. Spark's `t.branch_b` names; the provider stays writable when it has a store.
    pub fn with_branch(mut self, name: &str) -> Result<Self> {
        let metadata = self.table.metadata();
        let main = name == crate::commit::MAIN_BRANCH;
        match crate::commit::refs::table_ref(metadata, name)? {
            Some(r) if r.branch => {}
            // `main` of a table without snapshots: nothing to pin, writes go to `main`.
            None if main => {
                self.branch = Some(name.to_string());
                return Ok(self);
            }
            Some(_) => {
                return Err(DataFusionError::Plan(format!(
                    "table '{}': '{name}' is a tag, not a branch",
                    self.table.identifier()
                )))
            }
            None => {
                return Err(DataFusionError::Plan(format!(
                    "table '{}' has no branch '{name}' (ALTER TABLE .. CREATE BRANCH {name})",
                    self.table.identifier()
                )))
            }
        }
        // `main` named explicitly is pinned too: it reads `main` even under the session's
        // `iceberg.write_branch`, and writes to it beside that setting are refused.
        let store = self.store.take();
        let mut pinned = self.with_ref(name)?;
        pinned.store = store;
        pinned.branch = Some(name.to_string());
        Ok(pinned)
    }

    /// The branch this provider reads and writes ([`Self::with_branch`]).
    pub fn branch(&self) -> Option<&str> {
        self.branch.as_deref()
    }
}

impl IcebergTableProvider {
    /// Where a write of the session `state` goes: this provider's branch, or as the session's
    /// `iceberg.write_branch` and `iceberg.wap_id` say ([`WriteTo::of_session`]).
    pub(super) fn write_to(&self, state: &dyn Session) -> Result<WriteTo> {
        let explicit = self.branch.as_deref().map(WriteTo::branch);
        WriteTo::of_session(
            explicit.as_ref(),
            &IcebergOptions::from_config(state.config_options()),
            self.table.metadata(),
            &self.table.identifier().to_string(),
        )
    }

    /// The snapshot an unpinned scan reads: the head of the session's `iceberg.write_branch` on
    /// a table with `write.wap.enabled=true` once that branch exists (as Spark reads under
    /// `spark.wap.branch`), else the current one.
    pub(super) fn unpinned_snapshot(
        &self,
        state: &dyn Session,
    ) -> Option<iceberg::spec::SnapshotRef> {
        let metadata = self.table.metadata();
        let options = IcebergOptions::from_config(state.config_options());
        let branch = options.write_branch.trim();
        let read_branch = !branch.is_empty() && crate::commit::wap_enabled(metadata);
        read_branch
            .then(|| metadata.snapshot_for_ref(branch).cloned())
            .flatten()
            .or_else(|| metadata.current_snapshot().cloned())
    }
}
