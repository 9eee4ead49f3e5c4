//! `CALL system.add_files | register_table | snapshot(..)`: arguments in Spark's names and
//! order, results in Spark's columns.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};

use super::{register_table, snapshot, source_path, AddFiles};
use crate::catalog::IcebergCatalog;
use crate::commit::MetadataStore;
use crate::maintenance::args::{boolean, table_arg, table_ident, text, Arg};

/// The procedures of this module, with their parameters in Spark's order.
pub(crate) const PROCEDURES: &[(&str, &[&str])] = &[
    (
        "add_files",
        &[
            "table",
            "source_table",
            "partition_filter",
            "check_duplicate_files",
        ],
    ),
    ("register_table", &["table", "metadata_file"]),
    (
        "snapshot",
        &["source_table", "table", "location", "properties"],
    ),
];

/// Runs the procedure `name` with `args` (checked against its parameters) on `catalog`.
pub(crate) async fn call(
    name: &str,
    catalog: &Arc<dyn IcebergCatalog>,
    default_namespace: &str,
    args: &BTreeMap<String, Arg>,
) -> Result<RecordBatch> {
    let required =
        |param: &str| DataFusionError::Plan(format!("CALL {name}: '{param}' is required"));
    let map = |param: &str| -> Result<BTreeMap<String, String>> {
        match args.get(param) {
            None => Ok(BTreeMap::new()),
            Some(Arg::Map(m)) => Ok(m.clone()),
            Some(_) => Err(DataFusionError::Plan(format!(
                "CALL {name}: '{param}' must be map('key', 'value', ..)"
            ))),
        }
    };
    let catalog_name = catalog.name().to_string();
    match name {
        "add_files" => {
            let ident = table_arg(name, args, &catalog_name, default_namespace)?;
            let source =
                text(name, args, "source_table")?.ok_or_else(|| required("source_table"))?;
            let store: Arc<dyn MetadataStore> = catalog.clone();
            let mut add = AddFiles::new(store, ident, source_path(&source)?).check_duplicate_files(
                boolean(name, args, "check_duplicate_files")?.unwrap_or(true),
            );
            for (k, v) in map("partition_filter")? {
                add = add.partition_filter(k, v);
            }
            let added = add.execute().await?;
            super::super::longs_row(&[
                ("added_files_count", Some(added.added_files_count as i64)),
                (
                    "changed_partition_count",
                    Some(added.changed_partition_count as i64),
                ),
            ])
        }
        "register_table" => {
            let ident = table_arg(name, args, &catalog_name, default_namespace)?;
            let file =
                text(name, args, "metadata_file")?.ok_or_else(|| required("metadata_file"))?;
            let r = register_table(catalog, &ident, &file).await?;
            super::super::longs_row(&[
                ("current_snapshot_id", r.current_snapshot_id),
                ("total_records_count", Some(r.total_records_count as i64)),
                (
                    "total_data_files_count",
                    Some(r.total_data_files_count as i64),
                ),
            ])
        }
        "snapshot" => {
            let source =
                text(name, args, "source_table")?.ok_or_else(|| required("source_table"))?;
            let target = text(name, args, "table")?.ok_or_else(|| required("table"))?;
            let ident = table_ident(&catalog_name, default_namespace, &target)?;
            let properties = map("properties")?.into_iter().collect();
            let location = text(name, args, "location")?;
            let n = snapshot(
                catalog,
                &source_path(&source)?,
                &ident,
                location,
                properties,
            )
            .await?;
            super::super::longs_row(&[("imported_files_count", Some(n as i64))])
        }
        other => Err(DataFusionError::Internal(format!(
            "CALL: {other} is not an import procedure"
        ))),
    }
}
