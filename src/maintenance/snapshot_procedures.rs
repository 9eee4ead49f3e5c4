//! The procedures that move a table between its snapshots, as Spark's Iceberg procedures do:
//! `rollback_to_snapshot`, `rollback_to_timestamp`, `set_current_snapshot` (the head of
//! `main`), `fast_forward` (a branch to a ref ahead of it), `cherrypick_snapshot` and
//! `publish_changes` (a snapshot, a staged one included, applied to `main`). Each refuses what
//! Java refuses, with one line and nothing changed.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{
    DataContentType, ManifestStatus, Operation, SnapshotReference, SnapshotRetention, TableMetadata,
};
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement};

use crate::commit::{
    commit_proposal, MetadataStore, NewFile, Proposal, SnapshotChanges, Validation, MAIN_BRANCH,
    PUBLISHED_WAP_ID, STAGED_WAP_ID,
};
use crate::storage::location::LocationMap;

/// The summary property of a snapshot made by cherry-picking another (Java's
/// `SOURCE_SNAPSHOT_ID_PROP`).
pub const SOURCE_SNAPSHOT_ID: &str = "source-snapshot-id";

/// `main`'s head before and after a procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadChange {
    /// The snapshot `main` had (`None`: the table had no current snapshot).
    pub previous: Option<i64>,
    /// The snapshot it has now.
    pub current: i64,
}

/// Makes `main` of `ident` point at `snapshot_id`, which must be an ancestor of its head
/// (`rollback_to_snapshot`).
pub async fn rollback_to_snapshot(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    snapshot_id: i64,
) -> Result<HeadChange> {
    commit_proposal(store, ident, "rollback_to_snapshot", |table| {
        let metadata = table.metadata();
        if metadata.snapshot_by_id(snapshot_id).is_none() {
            return Err(refuse(
                table,
                format!("cannot roll back to unknown snapshot id {snapshot_id}"),
            ));
        }
        if !ancestors(metadata, metadata.current_snapshot_id()).any(|id| id == snapshot_id) {
            return Err(refuse(
                table,
                format!(
                    "cannot roll back to snapshot {snapshot_id}: it is not an ancestor of the \
                     current state"
                ),
            ));
        }
        set_main(table, snapshot_id)
    })
    .await
}

/// Makes `main` of `ident` point at the latest of its ancestors older than `timestamp_ms`
/// (`rollback_to_timestamp`).
pub async fn rollback_to_timestamp(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    timestamp_ms: i64,
) -> Result<HeadChange> {
    commit_proposal(store, ident, "rollback_to_timestamp", |table| {
        let metadata = table.metadata();
        // The newest such ancestor: of two with the same time, the nearer to the head (Java's).
        let mut target: Option<(i64, i64)> = None;
        for s in ancestors(metadata, metadata.current_snapshot_id())
            .filter_map(|id| metadata.snapshot_by_id(id))
            .filter(|s| s.timestamp_ms() < timestamp_ms)
        {
            if target.is_none_or(|(_, at)| s.timestamp_ms() > at) {
                target = Some((s.snapshot_id(), s.timestamp_ms()));
            }
        }
        let target = target.map(|(id, _)| id);
        let Some(target) = target else {
            return Err(refuse(
                table,
                format!("cannot roll back: no snapshot of main is older than {timestamp_ms} ms"),
            ));
        };
        set_main(table, target)
    })
    .await
}

/// Makes `main` of `ident` point at `snapshot_id`, any snapshot of the table
/// (`set_current_snapshot`).
pub async fn set_current_snapshot(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    target: SnapshotOrRef,
) -> Result<HeadChange> {
    commit_proposal(store, ident, "set_current_snapshot", |table| {
        let metadata = table.metadata();
        let id = match &target {
            SnapshotOrRef::Snapshot(id) => {
                if metadata.snapshot_by_id(*id).is_none() {
                    return Err(refuse(table, format!("there is no snapshot {id}")));
                }
                *id
            }
            SnapshotOrRef::Ref(name) => match metadata.snapshot_for_ref(name) {
                Some(s) => s.snapshot_id(),
                None => return Err(refuse(table, format!("there is no branch or tag '{name}'"))),
            },
        };
        set_main(table, id)
    })
    .await
}

/// A snapshot by id, or the snapshot a branch or tag points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotOrRef {
    /// A snapshot id.
    Snapshot(i64),
    /// A branch or tag name.
    Ref(String),
}

/// A branch moved by `fast_forward`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastForward {
    /// The branch moved.
    pub branch: String,
    /// Its snapshot before.
    pub previous: i64,
    /// Its snapshot now.
    pub updated: i64,
}

/// Moves `branch` of `ident` to the snapshot of the ref `to`, which must descend from the
/// branch's head (`fast_forward`).
pub async fn fast_forward(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    branch: &str,
    to: &str,
) -> Result<FastForward> {
    commit_proposal(store, ident, "fast_forward", |table| {
        let metadata = table.metadata();
        let from = match crate::commit::refs::table_ref(metadata, branch)? {
            Some(r) if r.branch => r,
            Some(_) => return Err(refuse(table, format!("'{branch}' is a tag, not a branch"))),
            None => return Err(refuse(table, format!("there is no branch '{branch}'"))),
        };
        let Some(target) = metadata.snapshot_for_ref(to).map(|s| s.snapshot_id()) else {
            return Err(refuse(table, format!("there is no branch or tag '{to}'")));
        };
        let answer = FastForward {
            branch: branch.to_string(),
            previous: from.snapshot_id,
            updated: target,
        };
        if !ancestors(metadata, Some(target)).any(|id| id == from.snapshot_id) {
            return Err(refuse(
                table,
                format!(
                    "cannot fast-forward: '{branch}' (snapshot {}) is not an ancestor of '{to}' \
                     (snapshot {target})",
                    from.snapshot_id
                ),
            ));
        }
        if target == from.snapshot_id {
            return Ok((None, answer));
        }
        let proposal = move_ref(
            table,
            branch,
            Some(from.snapshot_id),
            target,
            from.retention(),
        )?;
        Ok((proposal, answer))
    })
    .await
}

/// `main` moved to `snapshot_id`, its retention kept.
fn set_main(table: &Table, snapshot_id: i64) -> Result<(Option<Proposal>, HeadChange)> {
    let metadata = table.metadata();
    let previous = metadata.current_snapshot_id();
    let answer = HeadChange {
        previous,
        current: snapshot_id,
    };
    if previous == Some(snapshot_id) {
        return Ok((None, answer));
    }
    let retention = match crate::commit::refs::table_ref(metadata, MAIN_BRANCH)? {
        Some(r) => r.retention(),
        None => SnapshotRetention::branch(None, None, None),
    };
    let proposal = move_ref(table, MAIN_BRANCH, previous, snapshot_id, retention)?;
    Ok((proposal, answer))
}

/// The change that moves the ref `name` from `from` to `to`.
fn move_ref(
    table: &Table,
    name: &str,
    from: Option<i64>,
    to: i64,
    retention: SnapshotRetention,
) -> Result<Option<Proposal>> {
    use crate::error::IcebergResultExt;
    let metadata = table.metadata();
    let builder = metadata
        .clone()
        .into_builder(table.metadata_location().map(str::to_string))
        .set_ref(name, SnapshotReference::new(to, retention))
        .df()?;
    Proposal::of(
        builder,
        vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: name.to_string(),
                snapshot_id: from,
            },
        ],
    )
}

/// The snapshot ids from `head` back through its parents.
fn ancestors(metadata: &TableMetadata, head: Option<i64>) -> impl Iterator<Item = i64> + '_ {
    crate::commit::refs::ancestors(metadata, head).map(|s| s.snapshot_id())
}

fn refuse(table: &Table, what: String) -> DataFusionError {
    DataFusionError::Plan(format!(
        "table '{}': {what}; nothing was changed",
        table.identifier()
    ))
}

/// What `cherrypick_snapshot` and `publish_changes` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picked {
    /// The snapshot applied.
    pub source: i64,
    /// `main`'s head before.
    pub previous: Option<i64>,
    /// `main`'s head now: the source itself when it was a fast-forward, else a new snapshot.
    pub current: i64,
}

/// Applies the snapshot `snapshot_id` of `ident` to `main` (`cherrypick_snapshot`): a snapshot
/// whose parent is `main`'s head becomes its head (a fast-forward); an `append` elsewhere is
/// committed again on top of `main` (the same data files, `source-snapshot-id` and a staged
/// snapshot's `published-wap-id` in its summary). Refused as Java refuses: a snapshot already
/// in `main`'s history or picked into it, a write-audit-publish id published already, and any
/// other operation that is not a fast-forward.
pub async fn cherrypick_snapshot(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    snapshot_id: i64,
) -> Result<Picked> {
    let table = Arc::clone(&store).load(ident).await?;
    let metadata = table.metadata();
    let Some(source) = metadata.snapshot_by_id(snapshot_id).cloned() else {
        return Err(refuse(
            &table,
            format!("cannot cherry-pick unknown snapshot id {snapshot_id}"),
        ));
    };
    let previous = metadata.current_snapshot_id();
    if source.parent_snapshot_id() == previous {
        // A fast-forward: the snapshot itself becomes the head (validated as a ref move). When
        // `main` moved meanwhile, an append is applied anew below, as Java decides again.
        let change = commit_proposal(store.clone(), ident, "cherrypick_snapshot", |table| {
            let metadata = table.metadata();
            if source.parent_snapshot_id() != metadata.current_snapshot_id() {
                return Ok((None, None));
            }
            check_not_picked(table, snapshot_id)?;
            let (proposal, change) = set_main(table, snapshot_id)?;
            Ok((proposal, Some(change)))
        })
        .await?;
        if let Some(change) = change {
            return Ok(Picked {
                source: snapshot_id,
                previous: change.previous,
                current: change.current,
            });
        }
    }
    let table = Arc::clone(&store).load(ident).await?;
    let previous = table.metadata().current_snapshot_id();
    check_not_picked(&table, snapshot_id)?;
    if source.summary().operation != Operation::Append {
        return Err(refuse(
            &table,
            format!(
                "cannot cherry-pick snapshot {snapshot_id}: it is a {} that is not a \
                 fast-forward of main (only appends are applied anew)",
                source.summary().operation.as_str()
            ),
        ));
    }
    let added = added_data_files(&table, &source).await?;
    let paths: Arc<HashSet<String>> = Arc::new(
        added
            .iter()
            .map(|f| f.file.file_path().to_string())
            .collect(),
    );
    let mut changes = SnapshotChanges::append(added);
    changes
        .summary_properties
        .insert(SOURCE_SNAPSHOT_ID.to_string(), snapshot_id.to_string());
    if let Some(wap_id) = source.summary().additional_properties.get(STAGED_WAP_ID) {
        changes
            .summary_properties
            .insert(PUBLISHED_WAP_ID.to_string(), wap_id.clone());
    }
    // A concurrent pick of the same snapshot adds the same files: that conflicts.
    let picked = Arc::clone(&paths);
    changes.validation = Some(Validation {
        base_snapshot_id: previous,
        may_match: Arc::new(move |_, _, file| picked.contains(file.file_path())),
        read_files: HashSet::new(),
        equality_deletes_carry_over: true,
    });
    let outcome = crate::commit::commit(store, ident, changes).await?;
    Ok(Picked {
        source: snapshot_id,
        previous,
        current: outcome.snapshot_id,
    })
}

/// Publishes the snapshot staged under the write-audit-publish id `wap_id`
/// (`publish_changes`): a cherry-pick of it.
pub async fn publish_changes(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    wap_id: &str,
) -> Result<Picked> {
    let table = Arc::clone(&store).load(ident).await?;
    let mut staged: Vec<&iceberg::spec::SnapshotRef> = table
        .metadata()
        .snapshots()
        .filter(|s| {
            s.summary()
                .additional_properties
                .get(STAGED_WAP_ID)
                .map(String::as_str)
                == Some(wap_id)
        })
        .collect();
    staged.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms()));
    let staged: Vec<i64> = staged.iter().map(|s| s.snapshot_id()).collect();
    // The first staged under the id, in the order of the table's snapshots (Java's).
    match staged.first() {
        Some(id) => cherrypick_snapshot(store, ident, *id).await,
        None => Err(refuse(
            &table,
            format!("cannot apply unknown WAP ID '{wap_id}'"),
        )),
    }
}

/// Refuses a snapshot that is in `main`'s history already, or that a snapshot there picked,
/// or whose write-audit-publish id a snapshot there published.
fn check_not_picked(table: &Table, snapshot_id: i64) -> Result<()> {
    let metadata = table.metadata();
    let wap_id = metadata.snapshot_by_id(snapshot_id).and_then(|s| {
        s.summary()
            .additional_properties
            .get(STAGED_WAP_ID)
            .cloned()
    });
    for id in ancestors(metadata, metadata.current_snapshot_id()) {
        if id == snapshot_id {
            return Err(refuse(
                table,
                format!(
                    "cannot cherry-pick snapshot {snapshot_id}: it is already an ancestor of main"
                ),
            ));
        }
        let Some(s) = metadata.snapshot_by_id(id) else {
            continue;
        };
        let props = &s.summary().additional_properties;
        if props.get(SOURCE_SNAPSHOT_ID).map(String::as_str) == Some(&snapshot_id.to_string()) {
            return Err(refuse(
                table,
                format!(
                    "cannot cherry-pick snapshot {snapshot_id}: already picked to create \
                     ancestor {id}"
                ),
            ));
        }
        if let Some(wap) = &wap_id {
            if props.get(PUBLISHED_WAP_ID) == Some(wap) {
                return Err(refuse(
                    table,
                    format!(
                        "duplicate request to cherry-pick WAP ID '{wap}': snapshot {id} \
                         published it already"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The data files `snapshot` added (its manifests' entries added by it).
async fn added_data_files(
    table: &Table,
    snapshot: &iceberg::spec::SnapshotRef,
) -> Result<Vec<NewFile>> {
    let list =
        crate::file_planning::manifest_list(table, &LocationMap::default(), snapshot).await?;
    let mut out = vec![];
    for manifest in list.iter() {
        if manifest.added_snapshot_id != snapshot.snapshot_id() {
            continue;
        }
        let entries =
            crate::file_planning::load_entries(manifest, table.metadata(), table.file_io()).await?;
        for entry in &entries {
            if entry.status() == ManifestStatus::Added
                && entry.content_type() == DataContentType::Data
            {
                out.push(NewFile {
                    spec_id: manifest.partition_spec_id,
                    file: entry.data_file().clone(),
                });
            }
        }
    }
    Ok(out)
}

/// The procedures of this module, with their parameters in Spark's order.
pub(super) const PROCEDURES: &[(&str, &[&str])] = &[
    ("rollback_to_snapshot", &["table", "snapshot_id"]),
    ("rollback_to_timestamp", &["table", "timestamp"]),
    ("set_current_snapshot", &["table", "snapshot_id", "ref"]),
    ("cherrypick_snapshot", &["table", "snapshot_id"]),
    ("publish_changes", &["table", "wap_id"]),
    ("fast_forward", &["table", "branch", "to"]),
];

/// Runs the procedure `name` on `ident` with `args` (checked against its parameters): its
/// result row in Spark's columns.
pub(super) async fn call(
    name: &str,
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    args: &std::collections::BTreeMap<String, super::args::Arg>,
) -> Result<arrow::array::RecordBatch> {
    use super::args::{number, text, timestamp_ms};
    let required =
        |param: &str| DataFusionError::Plan(format!("CALL {name}: '{param}' is required"));
    match name {
        "rollback_to_snapshot" => {
            let id = number(name, args, "snapshot_id")?.ok_or_else(|| required("snapshot_id"))?;
            head_row(rollback_to_snapshot(store, ident, id).await?)
        }
        "rollback_to_timestamp" => {
            let ms = timestamp_ms(name, args, "timestamp")?.ok_or_else(|| required("timestamp"))?;
            head_row(rollback_to_timestamp(store, ident, ms).await?)
        }
        "set_current_snapshot" => {
            let target = match (number(name, args, "snapshot_id")?, text(name, args, "ref")?) {
                (Some(id), None) => SnapshotOrRef::Snapshot(id),
                (None, Some(r)) => SnapshotOrRef::Ref(r),
                _ => {
                    return Err(DataFusionError::Plan(format!(
                        "CALL {name}: give either snapshot_id or ref"
                    )))
                }
            };
            head_row(set_current_snapshot(store, ident, target).await?)
        }
        "cherrypick_snapshot" | "publish_changes" => {
            let picked = match name {
                "cherrypick_snapshot" => {
                    let id = number(name, args, "snapshot_id")?
                        .ok_or_else(|| required("snapshot_id"))?;
                    cherrypick_snapshot(store, ident, id).await?
                }
                _ => {
                    let wap_id = text(name, args, "wap_id")?.ok_or_else(|| required("wap_id"))?;
                    publish_changes(store, ident, &wap_id).await?
                }
            };
            let first = match name {
                "cherrypick_snapshot" => ("source_snapshot_id", Some(picked.source)),
                _ => ("previous_snapshot_id", picked.previous),
            };
            super::longs_row(&[first, ("current_snapshot_id", Some(picked.current))])
        }
        "fast_forward" => {
            let branch = text(name, args, "branch")?.ok_or_else(|| required("branch"))?;
            let to = text(name, args, "to")?.ok_or_else(|| required("to"))?;
            let moved = fast_forward(store, ident, &branch, &to).await?;
            let schema = Arc::new(arrow::datatypes::Schema::new(vec![
                arrow::datatypes::Field::new(
                    "branch_updated",
                    arrow::datatypes::DataType::Utf8,
                    false,
                ),
                arrow::datatypes::Field::new(
                    "previous_ref",
                    arrow::datatypes::DataType::Int64,
                    true,
                ),
                arrow::datatypes::Field::new(
                    "updated_ref",
                    arrow::datatypes::DataType::Int64,
                    false,
                ),
            ]));
            Ok(arrow::array::RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(arrow::array::StringArray::from(vec![moved.branch])),
                    Arc::new(arrow::array::Int64Array::from(vec![moved.previous])),
                    Arc::new(arrow::array::Int64Array::from(vec![moved.updated])),
                ],
            )?)
        }
        other => Err(DataFusionError::Internal(format!(
            "CALL: {other} is not a snapshot procedure"
        ))),
    }
}

fn head_row(change: HeadChange) -> Result<arrow::array::RecordBatch> {
    super::longs_row(&[
        ("previous_snapshot_id", change.previous),
        ("current_snapshot_id", Some(change.current)),
    ])
}
