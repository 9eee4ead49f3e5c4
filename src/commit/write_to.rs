//! Where a write's snapshot goes: the head of `main`, the head of another branch, or staged for
//! write-audit-publish (added to the table's snapshots, no ref moved), and the snapshot the
//! statement reads there.

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{SnapshotRef, TableMetadata};

use super::changes::MAIN_BRANCH;

/// The summary property of a staged snapshot: its write-audit-publish id (Java's
/// `SnapshotSummary.STAGED_WAP_ID_PROP`).
pub const STAGED_WAP_ID: &str = "wap.id";

/// The summary property of a snapshot that published a staged one (Java's
/// `PUBLISHED_WAP_ID_PROP`).
pub const PUBLISHED_WAP_ID: &str = "published-wap-id";

/// The table property that lets writes be staged or go to the session's write branch
/// (`iceberg.wap_id`, `iceberg.write_branch`), as Spark's `spark.wap.id` and `spark.wap.branch`.
pub const WAP_ENABLED: &str = "write.wap.enabled";

/// Where a commit puts its snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WriteTo {
    /// The head of `main`: the table's current snapshot.
    #[default]
    Main,
    /// The head of this branch. A branch that does not exist yet is made at the new snapshot,
    /// whose parent is `main`'s head (Java's `SnapshotProducer.toBranch`).
    Branch(String),
    /// Staged with this write-audit-publish id: the snapshot is added on top of `main`'s head
    /// with `wap.id` in its summary, and no ref moves (Java's `stageOnly`); it is published with
    /// `cherrypick_snapshot` or `publish_changes`.
    Staged(String),
}

impl WriteTo {
    /// The target a branch name gives (`main` is [`WriteTo::Main`]).
    pub fn branch(name: &str) -> Self {
        match name {
            MAIN_BRANCH => Self::Main,
            _ => Self::Branch(name.to_string()),
        }
    }

    /// The branch whose head the snapshot becomes (`main` for a staged one's parent).
    pub fn branch_name(&self) -> &str {
        match self {
            Self::Branch(b) => b,
            Self::Main | Self::Staged(_) => MAIN_BRANCH,
        }
    }

    /// The snapshot a statement writing here reads and commits on top of: the branch's head, or
    /// `main`'s while the branch does not exist (`None`: neither has a snapshot).
    pub fn head<'a>(&self, metadata: &'a TableMetadata) -> Option<&'a SnapshotRef> {
        match metadata.snapshot_for_ref(self.branch_name()) {
            Some(s) => Some(s),
            None => metadata.current_snapshot(),
        }
    }

    /// The id of [`Self::head`].
    pub fn head_id(&self, metadata: &TableMetadata) -> Option<i64> {
        self.head(metadata).map(|s| s.snapshot_id())
    }

    /// Fails when `metadata` has a tag by the branch's name: a tag's snapshot cannot move.
    pub fn check(&self, metadata: &TableMetadata, table: &str) -> Result<()> {
        let Self::Branch(name) = self else {
            return Ok(());
        };
        match super::refs::table_ref(metadata, name)? {
            Some(r) if !r.branch => Err(DataFusionError::Plan(format!(
                "table '{table}': '{name}' is a tag, and writes go to branches only"
            ))),
            _ => Ok(()),
        }
    }

    /// Where a write of a session goes: an explicit branch (a `t.branch_b` name), else the
    /// session's `iceberg.write_branch` or `iceberg.wap_id` on a table with
    /// `write.wap.enabled=true`, else `main`. Refused: both session settings at once, a session
    /// setting beside an explicit branch, and a session setting on a table without
    /// `write.wap.enabled` (Spark writes such a table's `main`; here the setting is not
    /// dropped silently).
    pub fn of_session(
        explicit: Option<&WriteTo>,
        options: &crate::IcebergOptions,
        metadata: &TableMetadata,
        table: &str,
    ) -> Result<Self> {
        let branch = options.write_branch.trim();
        let wap_id = options.wap_id.trim();
        if branch.is_empty() && wap_id.is_empty() {
            let to = explicit.cloned().unwrap_or_default();
            to.check(metadata, table)?;
            return Ok(to);
        }
        if !branch.is_empty() && !wap_id.is_empty() {
            return Err(DataFusionError::Plan(format!(
                "iceberg.wap_id ('{wap_id}') and iceberg.write_branch ('{branch}') are both set: \
                 set one of them"
            )));
        }
        let setting = match branch.is_empty() {
            true => "iceberg.wap_id",
            false => "iceberg.write_branch",
        };
        if let Some(to) = explicit {
            return Err(DataFusionError::Plan(format!(
                "table '{table}' is named at branch '{}' while {setting} is set: write to one \
                 of them (RESET {setting})",
                to.branch_name()
            )));
        }
        if !wap_enabled(metadata) {
            return Err(DataFusionError::Plan(format!(
                "{setting} is set, and table '{table}' does not have {WAP_ENABLED}=true: set \
                 the property (ALTER TABLE .. SET TBLPROPERTIES ('{WAP_ENABLED}' = 'true')) or \
                 RESET {setting}"
            )));
        }
        let to = match branch.is_empty() {
            true => Self::Staged(wap_id.to_string()),
            false => Self::branch(branch),
        };
        to.check(metadata, table)?;
        Ok(to)
    }
}

/// Whether the table has `write.wap.enabled=true`.
pub(crate) fn wap_enabled(metadata: &TableMetadata) -> bool {
    metadata
        .properties()
        .get(WAP_ENABLED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
