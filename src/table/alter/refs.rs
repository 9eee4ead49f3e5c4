//! Branches and tags, in Spark's Iceberg SQL:
//!
//! ```sql
//! ALTER TABLE t CREATE [OR REPLACE] BRANCH [IF NOT EXISTS] b [AS OF VERSION n]
//!     [RETAIN n {DAYS | HOURS | MINUTES}]
//!     [WITH SNAPSHOT RETENTION [n SNAPSHOTS] [n {DAYS | HOURS | MINUTES}]]
//! ALTER TABLE t REPLACE BRANCH b [AS OF VERSION n] [RETAIN ..] [WITH SNAPSHOT RETENTION ..]
//! ALTER TABLE t DROP BRANCH [IF EXISTS] b
//! ALTER TABLE t CREATE [OR REPLACE] TAG [IF NOT EXISTS] v [AS OF VERSION n] [RETAIN ..]
//! ALTER TABLE t REPLACE TAG v [AS OF VERSION n] [RETAIN ..]
//! ALTER TABLE t DROP TAG [IF EXISTS] v
//! ```
//!
//! (The grammar is in [`super::parse`].) A ref made without `AS OF VERSION` points at the current snapshot. As in Java: `main` is not
//! dropped, a branch is not replaced by a tag (nor the other way), and a ref needs a snapshot.

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{SnapshotReference, SnapshotRetention, TableMetadata};
use iceberg::table::Table;
use iceberg::TableRequirement;

use crate::commit::Proposal;
use crate::commit::MAIN_BRANCH;
use crate::error::IcebergResultExt;

/// Branch or tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefKind {
    /// A branch: snapshots are committed to it.
    Branch,
    /// A tag: a name for one snapshot.
    Tag,
}

impl RefKind {
    fn name(self) -> &'static str {
        match self {
            Self::Branch => "branch",
            Self::Tag => "tag",
        }
    }
}

/// A change of one ref.
#[derive(Debug, Clone)]
pub(crate) struct RefChange {
    pub(crate) kind: RefKind,
    pub(crate) name: String,
    pub(crate) op: RefOp,
}

#[derive(Debug, Clone)]
pub(crate) enum RefOp {
    /// `CREATE [OR REPLACE]` (`create`) or `REPLACE`.
    Set {
        create: bool,
        replace: bool,
        if_not_exists: bool,
        version: Option<i64>,
        max_ref_age_ms: Option<i64>,
        min_snapshots_to_keep: Option<i32>,
        max_snapshot_age_ms: Option<i64>,
    },
    /// `DROP [IF EXISTS]`.
    Drop { if_exists: bool },
}

/// The ref `name` of `metadata`: its kind and snapshot.
fn existing(metadata: &TableMetadata, name: &str) -> Result<Option<(RefKind, i64)>> {
    Ok(crate::commit::refs::table_ref(metadata, name)?.map(|r| {
        let kind = match r.branch {
            true => RefKind::Branch,
            false => RefKind::Tag,
        };
        (kind, r.snapshot_id)
    }))
}

/// The metadata change `change` makes of `table` (`None`: nothing to change).
pub(crate) fn change(table: &Table, change: &RefChange) -> Result<Option<Proposal>> {
    let md = table.metadata();
    let ident = table.identifier();
    let refuse = |what: String| DataFusionError::Plan(format!("ALTER TABLE {ident}: {what}"));
    let (kind, name) = (change.kind, change.name.as_str());
    let found = existing(md, name)?;
    if let Some((k, _)) = found {
        if k != kind {
            return Err(refuse(format!(
                "'{name}' is a {}, not a {}",
                k.name(),
                kind.name()
            )));
        }
    }
    let requirements = vec![
        TableRequirement::UuidMatch { uuid: md.uuid() },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: name.to_string(),
            snapshot_id: found.map(|(_, id)| id),
        },
    ];
    let builder = md
        .clone()
        .into_builder(table.metadata_location().map(str::to_string));
    let builder = match &change.op {
        RefOp::Drop { if_exists } => {
            if name == MAIN_BRANCH {
                return Err(refuse("the main branch cannot be dropped".into()));
            }
            if found.is_none() {
                return match if_exists {
                    true => Ok(None),
                    false => Err(refuse(format!("there is no {} '{name}'", kind.name()))),
                };
            }
            builder.remove_ref(name)
        }
        RefOp::Set {
            create,
            replace,
            if_not_exists,
            version,
            max_ref_age_ms,
            min_snapshots_to_keep,
            max_snapshot_age_ms,
        } => {
            match (found.is_some(), *create, *replace) {
                (true, true, false) if *if_not_exists => return Ok(None),
                (true, true, false) => {
                    return Err(refuse(format!("{} '{name}' already exists", kind.name())))
                }
                (false, false, true) => {
                    return Err(refuse(format!("there is no {} '{name}'", kind.name())))
                }
                _ => {}
            }
            let snapshot_id = match version {
                Some(v) => *v,
                None => md.current_snapshot_id().ok_or_else(|| {
                    refuse(format!(
                        "the table has no snapshot to make {} '{name}' of",
                        kind.name()
                    ))
                })?,
            };
            if md.snapshot_by_id(snapshot_id).is_none() {
                return Err(refuse(format!("there is no snapshot {snapshot_id}")));
            }
            if name == MAIN_BRANCH && kind == RefKind::Tag {
                return Err(refuse("'main' is the main branch".into()));
            }
            let retention = match kind {
                RefKind::Branch => SnapshotRetention::Branch {
                    min_snapshots_to_keep: *min_snapshots_to_keep,
                    max_snapshot_age_ms: *max_snapshot_age_ms,
                    max_ref_age_ms: *max_ref_age_ms,
                },
                RefKind::Tag => SnapshotRetention::Tag {
                    max_ref_age_ms: *max_ref_age_ms,
                },
            };
            builder
                .set_ref(name, SnapshotReference::new(snapshot_id, retention))
                .df()?
        }
    };
    Proposal::of(builder, requirements)
}
