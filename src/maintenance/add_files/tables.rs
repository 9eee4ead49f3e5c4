//! Whole tables brought in: `register_table` (a table's metadata file, made a catalog entry) and
//! `snapshot` (a new table over a directory of parquet files it does not own).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::{DataFusionError, Result};
use iceberg::TableIdent;

use super::AddFiles;
use crate::catalog::IcebergCatalog;
use crate::commit::MetadataStore;

/// The table property that, `false`, keeps maintenance from deleting a table's files (Java's
/// `gc.enabled`): a snapshot's files belong to the source.
pub const GC_ENABLED: &str = "gc.enabled";

/// A table registered by `register_table`: its state, in Spark's result columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// Its current snapshot (`None`: it has none).
    pub current_snapshot_id: Option<i64>,
    /// Rows of its current snapshot, by its summary.
    pub total_records_count: u64,
    /// Data files of its current snapshot, by its summary.
    pub total_data_files_count: u64,
}

/// Makes the table whose metadata file is `metadata_file` the catalog's table `ident`.
pub async fn register_table(
    catalog: &Arc<dyn IcebergCatalog>,
    ident: &TableIdent,
    metadata_file: &str,
) -> Result<Registered> {
    if catalog.table_exists(ident).await? {
        return Err(DataFusionError::Plan(format!(
            "register_table: table '{ident}' already exists; nothing was changed"
        )));
    }
    let table = catalog.register_table(ident, metadata_file).await?;
    let current = table.metadata().current_snapshot();
    let total = |key: &str| {
        current
            .and_then(|s| s.summary().additional_properties.get(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Registered {
        current_snapshot_id: current.map(|s| s.snapshot_id()),
        total_records_count: total("total-records"),
        total_data_files_count: total("total-data-files"),
    })
}

/// Creates the table `ident` over the parquet files at `source` (a directory or prefix; Hive
/// `k=v/` directories become identity partition columns) without copying them: its schema is
/// the first file's (with the partition columns after it when the files lack them), its files
/// are added as `add_files` adds them, and it has `gc.enabled=false`, so its maintenance never
/// deletes them. New rows go to the table's own location. When adding the files fails, the
/// table is dropped again. Returns how many files it has.
pub async fn snapshot(
    catalog: &Arc<dyn IcebergCatalog>,
    source: &str,
    ident: &TableIdent,
    location: Option<String>,
    properties: HashMap<String, String>,
) -> Result<u64> {
    if catalog.table_exists(ident).await? {
        return Err(DataFusionError::Plan(format!(
            "snapshot: table '{ident}' already exists; nothing was changed"
        )));
    }
    let store: Arc<dyn MetadataStore> = catalog.clone();
    let located = crate::storage::locate(source)?;
    let object_store = store.object_stores().store(&located.url)?;
    let listed = super::list(object_store.as_ref(), &located.path).await?;
    let Some((first, relative)) = listed.first() else {
        return Err(DataFusionError::Plan(format!(
            "snapshot: no files found at '{source}'; nothing was changed"
        )));
    };
    let (footer, _) = crate::physical_plan::parquet_files::fetch_footer(
        object_store.as_ref(),
        first,
        None,
        None,
        false,
    )
    .await?;
    // The new table numbers its columns afresh: files that carry another table's ids are
    // refused (before anything is made).
    if super::footer::carries_ids(&footer) {
        return Err(DataFusionError::Plan(format!(
            "snapshot: {}; nothing was changed",
            super::footer::carries_ids_refused(first.location.as_ref())
        )));
    }
    let file_schema = parquet::arrow::parquet_to_arrow_schema(
        footer.file_metadata().schema_descr(),
        footer.file_metadata().key_value_metadata(),
    )
    .map_err(|e| DataFusionError::Plan(format!("snapshot: {}: {e}", first.location)))?;
    // The partition columns, in the order of the first file's directories.
    let keys: Vec<String> = relative
        .split_last()
        .map(|(_, dirs)| dirs)
        .unwrap_or(&[])
        .iter()
        .filter_map(|d| d.split_once('=').map(|(k, _)| super::decode(k)))
        .collect();
    let mut fields: Vec<Field> = file_schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for key in &keys {
        if !fields.iter().any(|f| f.name() == key) {
            fields.push(Field::new(key, partition_type(&listed, key), true));
        }
    }
    let mut definition = crate::TableDefinition::new(Arc::new(Schema::new(fields)));
    definition.partitioning = keys
        .iter()
        .map(|k| crate::table::spec::PartitionTerm {
            transform: iceberg::spec::Transform::Identity,
            column: k.clone(),
        })
        .collect();
    definition.properties = properties;
    definition
        .properties
        .insert(GC_ENABLED.to_string(), "false".to_string());
    definition.location = location;
    let creation = definition.to_creation(ident.name())?;
    catalog.create_table(ident.namespace(), creation).await?;
    // The table numbers its columns afresh: files that carry another table's ids are refused
    // (readers would match them by those ids).
    match AddFiles::new(store, ident.clone(), source)
        .by_name()
        .execute()
        .await
    {
        Ok(added) => Ok(added.added_files_count),
        Err(e) => {
            if let Err(dropped) = catalog.drop_table(ident).await {
                log::warn!("snapshot: could not drop '{ident}' after a failed import: {dropped}");
            }
            Err(e)
        }
    }
}

/// The type of a partition column the files lack, from its directories' values (as Spark
/// infers it): `bigint` when every value is an integer, `date` when every one is a date, else
/// `string`.
fn partition_type(listed: &[(object_store::ObjectMeta, Vec<String>)], key: &str) -> DataType {
    let values: Vec<String> = listed
        .iter()
        .flat_map(|(_, parts)| parts.iter())
        .filter_map(|d| d.split_once('='))
        .filter(|(k, _)| super::decode(k) == key)
        .map(|(_, v)| super::decode(v))
        .filter(|v| v != "__HIVE_DEFAULT_PARTITION__")
        .collect();
    if values.is_empty() {
        return DataType::Utf8;
    }
    if values.iter().all(|v| v.parse::<i64>().is_ok()) {
        return DataType::Int64;
    }
    if values
        .iter()
        .all(|v| chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").is_ok())
    {
        return DataType::Date32;
    }
    DataType::Utf8
}
