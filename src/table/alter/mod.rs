//! `ALTER TABLE`: table properties and schema evolution, in Spark's Iceberg SQL.
//! DataFusion's SQL planner has no `ALTER TABLE`: [`crate::IcebergSession::sql`] runs these
//! (see [`parse`] for the forms) and hands every other statement to DataFusion.
//!
//! ```text
//!  statement ─► parse ─► Action ─► the table's metadata, changed (properties / schema)
//!                                   └─► one compare-and-swap commit (retried on conflict:
//!                                       the change is made again on the new version)
//! ```
//! A statement is checked whole before anything is committed: a refused one changes nothing.

pub(crate) mod parse;
mod partition;
mod properties;
mod refs;
mod schema;
pub(crate) mod types;

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;

use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement};

use crate::commit::{commit_proposal, MetadataStore, Proposal};
use parse::ColumnEdit;
pub(crate) use parse::{key_values, listed, path, sql_err, term, word, words};
pub(crate) use parse::{parse, Action};
pub(crate) use partition::Term;
use partition::{PartitionChange, WriteOrder};
pub(crate) use properties::format_version;
use schema::{ColumnChange, NewColumn};
pub(crate) use types::{arrow_type, iceberg_type, literal, normalised, DdlDialect, FieldIds};

use crate::error::IcebergResultExt;

/// Applies `action` to the table `ident` of `store` in one commit, made again on the new
/// version when another commit wins meanwhile (under the table's `commit.retry.*` properties,
/// with backoff, as data commits retry).
pub(crate) async fn apply(
    state: &SessionState,
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    action: &Action,
) -> Result<()> {
    commit_proposal(store, ident, "ALTER TABLE", |table| {
        let proposal = match action {
            Action::Properties(change) => properties::change(table, change)?,
            Action::Columns(edits) => columns(state, table, edits)?,
            Action::Partition(changes) => partition_spec(table, changes)?,
            Action::Write(order) => write_order(table, order)?,
            Action::Ref(change) => refs::change(table, change)?,
            Action::RenameTo(_) => {
                return Err(DataFusionError::Internal(
                    "RENAME TO is the catalog's, not a metadata change".into(),
                ))
            }
        };
        Ok((proposal, ()))
    })
    .await
}

/// The new default partition spec `changes` make of `table`'s.
fn partition_spec(table: &Table, changes: &[PartitionChange]) -> Result<Option<Proposal>> {
    let metadata = table.metadata();
    let spec = partition::evolve(metadata, changes)?;
    let same = spec.fields().len() == metadata.default_partition_spec().fields().len()
        && spec
            .fields()
            .iter()
            .zip(metadata.default_partition_spec().fields())
            .all(|(a, b)| {
                a.field_id == Some(b.field_id)
                    && a.source_id == b.source_id
                    && a.name == b.name
                    && a.transform == b.transform
            });
    if same {
        return Ok(None);
    }
    let builder = metadata
        .clone()
        .into_builder(table.metadata_location().map(str::to_string))
        .add_default_partition_spec(spec)
        .map_err(|e| DataFusionError::Plan(format!("ALTER TABLE: {e}")))?;
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::DefaultSpecIdMatch {
            default_spec_id: metadata.default_partition_spec_id(),
        },
        TableRequirement::LastAssignedPartitionIdMatch {
            last_assigned_partition_id: metadata.last_partition_id(),
        },
    ];
    Proposal::of(builder, requirements)
}

/// The sort order and distribution mode of `WRITE ...`.
fn write_order(table: &Table, order: &WriteOrder) -> Result<Option<Proposal>> {
    let metadata = table.metadata();
    let mut builder = metadata
        .clone()
        .into_builder(table.metadata_location().map(str::to_string));
    if let Some(keys) = &order.order {
        let sort_order = partition::sort_order(metadata, keys)?;
        builder = builder
            .add_sort_order(sort_order)
            .df()?
            .set_default_sort_order(-1)
            .df()?;
    }
    let mode = [(
        "write.distribution-mode".to_string(),
        order.distribution.to_string(),
    )];
    builder = builder.set_properties(mode.into_iter().collect()).df()?;
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::DefaultSortOrderIdMatch {
            default_sort_order_id: metadata.default_sort_order_id(),
        },
    ];
    Proposal::of(builder, requirements)
}

/// The new current schema `edits` make of `table`'s.
fn columns(state: &SessionState, table: &Table, edits: &[ColumnEdit]) -> Result<Option<Proposal>> {
    let metadata = table.metadata();
    let version = metadata.format_version();
    let schema = metadata.current_schema();
    let mut changes = Vec::with_capacity(edits.len());
    for edit in edits {
        let change = match edit {
            ColumnEdit::Add(def) => {
                let name = def.path.join(".");
                let mut ids = types::FieldIds { last: 0 };
                let field_type = types::iceberg_type(&def.data_type, version, &mut ids)?;
                let default = def
                    .default
                    .as_deref()
                    .map(|v| types::default_literal(state, &name, &field_type, v))
                    .transpose()?;
                ColumnChange::Add(NewColumn {
                    path: def.path.clone(),
                    field_type,
                    required: def.not_null,
                    default,
                    doc: def.comment.clone(),
                    position: def.position.clone(),
                })
            }
            ColumnEdit::Retype { path, to } => ColumnChange::Retype {
                path: path.clone(),
                to: types::primitive(to, version)?,
            },
            ColumnEdit::WriteDefault { path, value } => {
                let name = path.join(".");
                let field = schema.field_by_name(&name).ok_or_else(|| {
                    DataFusionError::Plan(format!("no column '{name}' in the table"))
                })?;
                let value = value
                    .as_deref()
                    .map(|v| types::default_literal(state, &name, &field.field_type, v))
                    .transpose()?;
                ColumnChange::WriteDefault {
                    path: path.clone(),
                    value,
                }
            }
            ColumnEdit::DropIfExists(path) => match schema.field_by_name(&path.join(".")) {
                Some(_) => ColumnChange::Drop(path.clone()),
                None => continue,
            },
            ColumnEdit::Change(change) => change.clone(),
        };
        changes.push(change);
    }
    let evolved = schema::evolve(metadata, &changes)?;
    let same_ids = evolved
        .identifier_field_ids()
        .eq(schema.identifier_field_ids());
    if evolved.as_struct() == schema.as_struct() && same_ids {
        return Ok(None);
    }
    let builder = metadata
        .clone()
        .into_builder(table.metadata_location().map(str::to_string))
        .add_current_schema(evolved)
        .df()?;
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: metadata.current_schema_id(),
        },
        TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id: metadata.last_column_id(),
        },
    ];
    Proposal::of(builder, requirements)
}
