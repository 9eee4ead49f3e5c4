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
//! A ref made without `AS OF VERSION` points at the current snapshot. As in Java: `main` is not
//! dropped, a branch is not replaced by a tag (nor the other way), and a ref needs a snapshot.

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::parser::Parser;
use iceberg::spec::{SnapshotReference, SnapshotRetention, TableMetadata};
use iceberg::table::Table;
use iceberg::TableRequirement;

use super::parse::{sql_err, word, words};
use super::Proposal;
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
    kind: RefKind,
    name: String,
    op: RefOp,
}

#[derive(Debug, Clone)]
enum RefOp {
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

/// The ref statement after `ALTER TABLE name`, when it is one (the parser is left as it was
/// otherwise).
pub(crate) fn parse(p: &mut Parser) -> Option<std::result::Result<RefChange, String>> {
    use RefKind::{Branch, Tag};
    let forms: [(&[&str], bool, bool, RefKind); 6] = [
        (&["create", "or", "replace", "branch"], true, true, Branch),
        (&["create", "or", "replace", "tag"], true, true, Tag),
        (&["create", "branch"], true, false, Branch),
        (&["create", "tag"], true, false, Tag),
        (&["replace", "branch"], false, true, Branch),
        (&["replace", "tag"], false, true, Tag),
    ];
    for (form, create, replace, kind) in forms {
        if words(p, form) {
            return Some(set(p, kind, create, replace));
        }
    }
    for (form, kind) in [(["drop", "branch"], Branch), (["drop", "tag"], Tag)] {
        if words(p, &form) {
            let if_exists = words(p, &["if", "exists"]);
            return Some(ref_name(p).map(|name| RefChange {
                kind,
                name,
                op: RefOp::Drop { if_exists },
            }));
        }
    }
    None
}

fn ref_name(p: &mut Parser) -> std::result::Result<String, String> {
    // Ref names keep their case, as Iceberg records them.
    Ok(p.parse_identifier().map_err(sql_err)?.value)
}

fn number(p: &mut Parser) -> std::result::Result<i64, String> {
    let n = p.parse_literal_uint().map_err(sql_err)?;
    i64::try_from(n).map_err(|_| format!("{n} is too large"))
}

/// A duration: `n DAYS | HOURS | MINUTES`, in milliseconds.
fn duration(p: &mut Parser, n: i64) -> std::result::Result<i64, String> {
    let unit = if word(p, "days") || word(p, "day") {
        86_400_000
    } else if word(p, "hours") || word(p, "hour") {
        3_600_000
    } else if word(p, "minutes") || word(p, "minute") {
        60_000
    } else {
        return Err(format!(
            "expected DAYS, HOURS or MINUTES at '{}'",
            p.peek_token().token
        ));
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("{n} is too long a duration"))
}

fn set(
    p: &mut Parser,
    kind: RefKind,
    create: bool,
    replace: bool,
) -> std::result::Result<RefChange, String> {
    let if_not_exists = create && words(p, &["if", "not", "exists"]);
    let name = ref_name(p)?;
    let mut version = None;
    let (mut max_ref_age_ms, mut min_snapshots_to_keep, mut max_snapshot_age_ms) =
        (None, None, None);
    if words(p, &["as", "of", "version"]) {
        version = Some(number(p)?);
    }
    if word(p, "retain") {
        let n = number(p)?;
        max_ref_age_ms = Some(duration(p, n)?);
    }
    if words(p, &["with", "snapshot", "retention"]) {
        if kind == RefKind::Tag {
            return Err("a tag has no snapshot retention".into());
        }
        let n = number(p)?;
        if word(p, "snapshots") {
            min_snapshots_to_keep =
                Some(i32::try_from(n).map_err(|_| format!("{n} snapshots is too many"))?);
            if let Ok(m) = number(p) {
                max_snapshot_age_ms = Some(duration(p, m)?);
            }
        } else {
            max_snapshot_age_ms = Some(duration(p, n)?);
        }
    }
    Ok(RefChange {
        kind,
        name,
        op: RefOp::Set {
            create,
            replace,
            if_not_exists,
            version,
            max_ref_age_ms,
            min_snapshots_to_keep,
            max_snapshot_age_ms,
        },
    })
}

/// The ref `name` of `metadata`: whether it is a branch, and its snapshot (the iceberg crate
/// keeps refs private; the serialized metadata has them).
fn existing(metadata: &TableMetadata, name: &str) -> Result<Option<(RefKind, i64)>> {
    let json =
        serde_json::to_value(metadata).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let r = &json["refs"][name];
    if r.is_null() {
        return Ok(None);
    }
    let id = r["snapshot-id"]
        .as_i64()
        .or_else(|| r["snapshot-id"].as_u64().map(|u| u as i64))
        .ok_or_else(|| DataFusionError::Internal(format!("ref '{name}' has no snapshot id")))?;
    let kind = match r["type"] == "branch" {
        true => RefKind::Branch,
        false => RefKind::Tag,
    };
    Ok(Some((kind, id)))
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
