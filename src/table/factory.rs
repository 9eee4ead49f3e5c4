//! `CREATE EXTERNAL TABLE ... STORED AS ICEBERG`: Iceberg tables with partitioning, sort order and
//! properties, created in the Iceberg catalog the table name resolves to.
//!
//! ```sql
//! CREATE EXTERNAL TABLE ns.events (id BIGINT NOT NULL, ts TIMESTAMP, region VARCHAR)
//! STORED AS ICEBERG LOCATION ''                -- '' = the catalog's default location
//! PARTITIONED BY (region)                      -- identity partitions by column name
//! WITH ORDER (id ASC NULLS FIRST)              -- the table's sort order
//! OPTIONS ('partitioning' 'day(ts), bucket(16, id)',   -- any transforms (appended after PARTITIONED BY)
//!          'sort-order' 'id DESC NULLS LAST',           -- alternative to WITH ORDER, allows transforms
//!          'format-version' '2',
//!          'write.delete.mode' 'merge-on-read');        -- dotted keys become table properties
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{Session, TableProviderFactory};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{CreateExternalTable, Expr, SortExpr};
use iceberg::spec::{NullOrder, SortDirection, Transform};
use iceberg::NamespaceIdent;

use super::spec::{parse_partitioning, parse_sort_order, PartitionTerm, SortTerm, TableDefinition};
use crate::catalog::IcebergCatalogProvider;
use crate::commit::MetadataStore;
use crate::table::IcebergTableProvider;

/// Creates Iceberg tables for `CREATE EXTERNAL TABLE ... STORED AS ICEBERG`.
#[derive(Debug, Default)]
pub struct IcebergTableFactory;

/// Reads an option set with or without DataFusion's `format.` prefix.
fn take_option(
    options: &mut std::collections::HashMap<String, String>,
    key: &str,
) -> Option<String> {
    options
        .remove(&format!("format.{key}"))
        .or_else(|| options.remove(key))
}

fn sort_term_of(sort: &SortExpr) -> Result<SortTerm> {
    let Expr::Column(col) = &sort.expr else {
        return Err(DataFusionError::Plan(format!(
            "WITH ORDER accepts plain columns; use OPTIONS ('sort-order' '...') for transforms, got {}",
            sort.expr
        )));
    };
    Ok(SortTerm {
        transform: Transform::Identity,
        column: col.name.clone(),
        direction: if sort.asc {
            SortDirection::Ascending
        } else {
            SortDirection::Descending
        },
        null_order: if sort.nulls_first {
            NullOrder::First
        } else {
            NullOrder::Last
        },
    })
}

/// The column a `PARTITIONED BY` identifier names: DataFusion hands the identifiers over as
/// written, so a quoted one (`"Cat"`) names its column exactly, and an unquoted one names the
/// column it normalises to (lower case, as the column definitions were normalised).
fn partition_column_name(written: &str, schema: &arrow::datatypes::Schema) -> String {
    let written = written.trim();
    for quote in ['"', '`'] {
        if written.len() >= 2 && written.starts_with(quote) && written.ends_with(quote) {
            let doubled = format!("{quote}{quote}");
            return written[1..written.len() - 1].replace(&doubled, &quote.to_string());
        }
    }
    if schema.field_with_name(written).is_ok() {
        return written.to_string();
    }
    written.to_lowercase()
}

/// Builds the table definition described by a `CREATE EXTERNAL TABLE` statement.
pub(crate) fn definition_from_command(cmd: &CreateExternalTable) -> Result<TableDefinition> {
    let mut options = cmd.options.clone();
    let mut def = TableDefinition::new(Arc::new(cmd.schema.as_arrow().clone()));
    def.partitioning = cmd
        .table_partition_cols
        .iter()
        .map(|c| PartitionTerm {
            transform: Transform::Identity,
            column: partition_column_name(c, cmd.schema.as_arrow()),
        })
        .collect();
    if let Some(text) = take_option(&mut options, "partitioning") {
        def.partitioning.extend(parse_partitioning(&text)?);
    }
    match (
        cmd.order_exprs.as_slice(),
        take_option(&mut options, "sort-order"),
    ) {
        ([], None) => {}
        ([], Some(text)) => def.sort_order = parse_sort_order(&text)?,
        ([order], None) => {
            def.sort_order = order.iter().map(sort_term_of).collect::<Result<_>>()?
        }
        (_, Some(_)) => {
            return Err(DataFusionError::Plan(
                "give the sort order once: WITH ORDER or OPTIONS ('sort-order' ...)".into(),
            ))
        }
        (_, None) => {
            return Err(DataFusionError::Plan(
                "an Iceberg table has one sort order: use a single WITH ORDER clause".into(),
            ))
        }
    }
    if let Some(v) = take_option(&mut options, "format-version") {
        def.format_version = crate::table::alter::format_version(&v)?;
    }
    for (k, v) in options {
        if let Some(unknown) = k.strip_prefix("format.") {
            return Err(DataFusionError::Plan(format!(
                "unknown Iceberg table option '{unknown}' (table properties have dotted names, e.g. 'write.delete.mode')"
            )));
        }
        def.properties.insert(k, v);
    }
    match cmd.locations.as_slice() {
        [] => {}
        [one] if one.trim().is_empty() => {}
        [one] => def.location = Some(one.trim().to_string()),
        several => {
            return Err(DataFusionError::Plan(format!(
                "an Iceberg table has one LOCATION, got {}",
                several.len()
            )))
        }
    }
    Ok(def)
}

#[async_trait]
impl TableProviderFactory for IcebergTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let state = state
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| DataFusionError::Internal("expected a SessionState".into()))?;
        let defaults = &state.config_options().catalog;
        let catalog_name = cmd
            .name
            .catalog()
            .unwrap_or(&defaults.default_catalog)
            .to_string();
        let schema_name = cmd
            .name
            .schema()
            .unwrap_or(&defaults.default_schema)
            .to_string();
        let provider = state.catalog_list().catalog(&catalog_name).ok_or_else(|| {
            DataFusionError::Plan(format!("catalog '{catalog_name}' does not exist"))
        })?;
        let Some(iceberg) = provider.downcast_ref::<IcebergCatalogProvider>() else {
            return Err(DataFusionError::Plan(format!(
                "STORED AS ICEBERG creates tables in an Iceberg catalog; '{catalog_name}' is not one"
            )));
        };
        let catalog = Arc::clone(iceberg.catalog());
        let def = definition_from_command(cmd)?;
        let ns = NamespaceIdent::from_strs(schema_name.split('.'))
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        if schema_name == crate::catalog::DEFAULT_NAMESPACE {
            crate::catalog::ensure_namespace(&catalog, &ns).await?;
        }
        let table = catalog
            .create_table(&ns, def.to_creation(cmd.name.table())?)
            .await?;
        let store: Arc<dyn MetadataStore> = catalog;
        Ok(Arc::new(IcebergTableProvider::try_new(table, Some(store))?))
    }
}
