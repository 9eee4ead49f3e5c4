//! `CREATE OR REPLACE TABLE t (...) USING iceberg [PARTITIONED BY ..] [TBLPROPERTIES ..]
//! [AS query]` of a table that exists: a new version of the same table, as Java's
//! `replaceTransaction` makes it (`TableMetadata.buildReplacement`).
//!
//! - Same table: its UUID, its history (snapshots, schemas, specs, the metadata log), its other
//!   branches and tags. Its `main` branch is removed: the table reads empty, or the query's rows.
//! - The new schema reuses the field id of every column (nested fields too) whose full name the
//!   current schema has, and numbers the others from `last-column-id` on.
//! - The new spec reuses the field ids of equal fields of earlier specs (v2 and later; v1 numbers
//!   them from 1000); the sort order is unsorted; the properties given are set over the old ones.
//! - `AS query` is atomic: the rows are written against the replacement first, and one commit
//!   makes both (a failed query, or a table changed meanwhile, changes nothing).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use iceberg::spec::{
    FormatVersion, ListType, MapType, NestedField, NestedFieldRef, Schema, SortOrder, StructType,
    TableMetadata, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};

use super::create::CreateTable;
use crate::commit::{
    CommitResult, MetadataChange, MetadataStore, SnapshotChanges, SnapshotProducer, WrittenFiles,
    MAIN_BRANCH,
};
use crate::error::IcebergResultExt;
use crate::physical_plan::scan::schema::arrow_schema;
use crate::physical_plan::write::{run_writers, sort_requirement, DataFileWriterExec};

/// Replaces the table `ident` of `store` by `create` (its schema: `schema`, when the statement
/// takes it from its query). The rows written (`AS query`), or `None`.
pub(crate) async fn replace(
    ctx: &SessionContext,
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    create: &CreateTable,
    schema: Option<Schema>,
) -> Result<Option<u64>> {
    let table = Arc::clone(&store).load(ident).await?;
    let (metadata, updates) = replacement(&table, create, schema)?;
    let requirements = requirements(table.metadata());
    let Some(query) = &create.query else {
        let change = MetadataChange {
            base: table.clone(),
            metadata,
            updates,
            requirements,
        };
        return match store.commit_metadata(ident, change).await? {
            CommitResult::Committed(_) => Ok(None),
            CommitResult::Conflict => Err(changed_meanwhile(ident)),
        };
    };
    // The rows go into the replacement, staged here; one commit makes both.
    // Without a metadata file of its own: the snapshot's metadata logs none (the replacement
    // logged the table's).
    let staged = Table::builder()
        .identifier(ident.clone())
        .metadata(metadata)
        .file_io(table.file_io().clone())
        .runtime(crate::io_runtime::iceberg_runtime()?)
        .build()
        .df()?;
    let written = WrittenFiles::default();
    let files = match write_rows(ctx, &staged, query, &written).await {
        Ok(files) => files,
        Err(e) => {
            written.remove_all(table.file_io()).await;
            return Err(e);
        }
    };
    let changes = SnapshotChanges::append(files);
    let rows = changes.added_records();
    let mut producer = SnapshotProducer::new(changes);
    let outcome = match producer.apply(&staged, 1).await {
        Ok(snapshot) => {
            let mut all = updates;
            all.extend(snapshot.updates);
            let change = MetadataChange {
                base: table.clone(),
                metadata: snapshot.metadata,
                updates: all,
                requirements,
            };
            store.commit_metadata(ident, change).await
        }
        Err(e) => Err(e),
    };
    match outcome {
        Ok(CommitResult::Committed(_)) => {
            written.take();
            Ok(Some(rows))
        }
        Ok(CommitResult::Conflict) => {
            producer.cleanup_all(table.file_io()).await;
            written.remove_all(table.file_io()).await;
            Err(changed_meanwhile(ident))
        }
        Err(e) if crate::commit::is_commit_state_unknown(&e) => Err(e),
        Err(e) => {
            producer.cleanup_all(table.file_io()).await;
            written.remove_all(table.file_io()).await;
            Err(e)
        }
    }
}

fn changed_meanwhile(ident: &TableIdent) -> DataFusionError {
    DataFusionError::Execution(format!(
        "CREATE OR REPLACE TABLE '{ident}': the table was changed concurrently; nothing was \
         changed, run the statement again"
    ))
}

/// What the replacement requires of the table: the version it was built on.
fn requirements(metadata: &TableMetadata) -> Vec<TableRequirement> {
    vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: metadata.current_schema_id(),
        },
        TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id: metadata.last_column_id(),
        },
        TableRequirement::DefaultSpecIdMatch {
            default_spec_id: metadata.default_partition_spec_id(),
        },
        TableRequirement::LastAssignedPartitionIdMatch {
            last_assigned_partition_id: metadata.last_partition_id(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: metadata.current_snapshot_id(),
        },
    ]
}

/// The replacement of `table` by `create`, and its updates.
fn replacement(
    table: &Table,
    create: &CreateTable,
    schema: Option<Schema>,
) -> Result<(TableMetadata, Vec<TableUpdate>)> {
    let current = table.metadata();
    let location = table.metadata_location().map(str::to_string);
    let given = create;
    let create = &create.replacing(current.format_version());
    let name = &table.identifier().name;
    let fresh = create.creation(name, schema)?.schema;
    let schema = reassigned(&fresh, current.current_schema(), current.last_column_id())?;
    // Bound to the ids the replacement gives the columns.
    let creation = create.creation(name, Some(schema.clone()))?;
    let version = creation.format_version;
    if version < current.format_version() {
        return Err(DataFusionError::Plan(format!(
            "CREATE OR REPLACE TABLE '{}': cannot go back from format version {} to {}",
            table.identifier(),
            current.format_version() as u8,
            version as u8
        )));
    }
    let mut builder = current.clone().into_builder(location);
    if version > current.format_version() {
        builder = builder.upgrade_format_version(version).df()?;
    }
    // The properties the statement gives (not the defaults of a new table), over the old ones.
    let mut properties: HashMap<String, String> = creation.properties.clone();
    properties.remove("format-version");
    properties.retain(|k, _| k == "comment" || given.sets(k));
    builder = builder.add_current_schema(schema).df()?;
    if let Some(location) = &creation.location {
        if location.trim_end_matches('/') != current.location().trim_end_matches('/') {
            builder = builder.set_location(location.clone());
        }
    }
    builder = builder
        .set_default_sort_order(SortOrder::unsorted_order().order_id)
        .df()?
        .remove_ref(MAIN_BRANCH);
    if !properties.is_empty() {
        builder = builder.set_properties(properties).df()?;
    }
    // The spec is bound to the new schema: added once the schema is current.
    let staged = builder.build().df()?;
    let mut updates = staged.changes;
    let spec = numbered(creation.partition_spec.unwrap_or_default(), version);
    // (The first stage logged the metadata file it replaces: the second logs nothing.)
    let built = staged
        .metadata
        .into_builder(None)
        .add_default_partition_spec(spec)
        .map_err(|e| DataFusionError::Plan(format!("CREATE OR REPLACE TABLE: {e}")))?
        .build()
        .df()?;
    updates.extend(built.changes);
    Ok((built.metadata, updates))
}

/// `spec` with the field ids format v1 requires (1000 on, in order); later versions' ids are
/// the metadata builder's to give (it reuses those of equal fields of earlier specs).
fn numbered(spec: UnboundPartitionSpec, version: FormatVersion) -> UnboundPartitionSpec {
    if version != FormatVersion::V1 {
        return spec;
    }
    let mut builder = UnboundPartitionSpec::builder();
    for (i, f) in spec.fields().iter().enumerate() {
        let mut field = f.clone();
        field.field_id = Some(1000 + i as i32);
        builder = match builder.add_partition_fields(std::iter::once(field)) {
            Ok(b) => b,
            Err(_) => return spec,
        };
    }
    builder.build()
}

/// `new` with the ids of `current`'s fields of the same full name, the others numbered from
/// `last` on (Java's `TypeUtil.assignFreshIds(schema, baseSchema, nextId)`).
fn reassigned(new: &Schema, current: &Schema, last: i32) -> Result<Schema> {
    let mut next = last;
    let mut id_of = |full: &str| -> i32 {
        match current.field_by_name(full) {
            Some(f) => f.id,
            None => {
                next += 1;
                next
            }
        }
    };
    let fields = struct_fields(new.as_struct().fields(), "", &mut id_of);
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| DataFusionError::Plan(format!("CREATE OR REPLACE TABLE: {e}")))
}

fn struct_fields(
    fields: &[NestedFieldRef],
    prefix: &str,
    id_of: &mut dyn FnMut(&str) -> i32,
) -> Vec<NestedFieldRef> {
    // Ids go to a struct's fields first, then into their types (as Java numbers them).
    let names: Vec<String> = fields
        .iter()
        .map(|f| format!("{prefix}{}", f.name))
        .collect();
    let ids: Vec<i32> = names.iter().map(|n| id_of(n)).collect();
    fields
        .iter()
        .zip(names)
        .zip(ids)
        .map(|((f, name), id)| {
            let ty = reassigned_type(&f.field_type, &name, id_of);
            let mut field = NestedField::new(id, &f.name, ty, f.required);
            field.doc = f.doc.clone();
            field.initial_default = f.initial_default.clone();
            field.write_default = f.write_default.clone();
            Arc::new(field)
        })
        .collect()
}

fn reassigned_type(ty: &Type, name: &str, id_of: &mut dyn FnMut(&str) -> i32) -> Type {
    match ty {
        Type::Primitive(_) => ty.clone(),
        Type::Struct(s) => Type::Struct(StructType::new(struct_fields(
            s.fields(),
            &format!("{name}."),
            id_of,
        ))),
        Type::List(l) => {
            let element = format!("{name}.element");
            let id = id_of(&element);
            let inner = reassigned_type(&l.element_field.field_type, &element, id_of);
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id,
                inner,
                l.element_field.required,
            ))))
        }
        Type::Map(m) => {
            let (key, value) = (format!("{name}.key"), format!("{name}.value"));
            let (key_id, value_id) = (id_of(&key), id_of(&value));
            let key_type = reassigned_type(&m.key_field.field_type, &key, id_of);
            let value_type = reassigned_type(&m.value_field.field_type, &value, id_of);
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(key_id, key_type)),
                Arc::new(NestedField::map_value_element(
                    value_id,
                    value_type,
                    m.value_field.required,
                )),
            ))
        }
    }
}

/// Writes the rows of `query` as data files of `staged` (its columns by position, cast to the
/// table's types, as `INSERT` casts them).
async fn write_rows(
    ctx: &SessionContext,
    staged: &Table,
    query: &str,
    written: &WrittenFiles,
) -> Result<Vec<crate::commit::NewFile>> {
    let schema = arrow_schema(staged.metadata().current_schema())?;
    let (state, plan) = ctx.sql(query).await?.into_parts();
    let plan = super::by_position(plan, &schema, "CREATE OR REPLACE TABLE .. AS")?;
    let input = state.create_physical_plan(&plan).await?;
    let sort = sort_requirement(staged, &input.schema())?;
    let writer = Arc::new(DataFileWriterExec::try_new(
        input,
        staged.clone(),
        sort,
        written.clone(),
    )?);
    let plan = crate::physical_plan::optimized(&state, writer)?;
    run_writers(
        plan,
        &ctx.task_ctx(),
        staged.metadata(),
        written,
        |_| Ok(()),
    )
    .await
}

#[cfg(test)]
mod tests {
    use iceberg::spec::PrimitiveType;

    use super::*;

    fn field(id: i32, name: &str, ty: Type) -> NestedFieldRef {
        Arc::new(NestedField::optional(id, name, ty))
    }

    #[test]
    fn fields_keep_the_ids_of_their_names_and_new_ones_count_on() {
        let long = || Type::Primitive(PrimitiveType::Long);
        let current = Schema::builder()
            .with_fields(vec![
                field(1, "id", long()),
                field(2, "gone", long()),
                field(
                    3,
                    "p",
                    Type::Struct(StructType::new(vec![field(4, "x", long())])),
                ),
            ])
            .build()
            .unwrap();
        let new = Schema::builder()
            .with_fields(vec![
                field(1, "fresh", long()),
                field(
                    2,
                    "p",
                    Type::Struct(StructType::new(vec![
                        field(3, "y", long()),
                        field(4, "x", long()),
                    ])),
                ),
                field(5, "id", Type::Primitive(PrimitiveType::String)),
            ])
            .build()
            .unwrap();
        let got = reassigned(&new, &current, 4).unwrap();
        let id = |n: &str| got.field_by_name(n).unwrap().id;
        assert_eq!(
            (id("fresh"), id("p"), id("p.y"), id("p.x"), id("id")),
            (5, 3, 6, 4, 1)
        );
        assert_eq!(got.highest_field_id(), 6);
    }
}
