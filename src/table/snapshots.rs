//! `iceberg_snapshots('<table or path>')`: a table's snapshots, for choosing what to time-travel to.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::catalog::TableFunctionImpl;
use datafusion::datasource::{MemTable, TableProvider};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use iceberg::table::Table;
use iceberg::TableIdent;

use super::by_path::open_table_at;
use crate::catalog::IcebergCatalog;
use crate::io_runtime;
use crate::storage::location::LocationMap;
use crate::storage::ObjectStores;

/// The `iceberg_snapshots` table function: one row per snapshot, oldest first.
#[derive(Debug, Default)]
pub struct IcebergSnapshotsFunction {
    catalog: Option<Arc<dyn IcebergCatalog>>,
}

impl IcebergSnapshotsFunction {
    /// A function that resolves catalog table names through `catalog` (paths always work).
    pub fn new(catalog: Option<Arc<dyn IcebergCatalog>>) -> Self {
        Self { catalog }
    }
}

/// Loads a table named by a path or a catalog identifier.
pub(crate) async fn load_target(
    target: &str,
    catalog: Option<Arc<dyn IcebergCatalog>>,
    locations: &LocationMap,
) -> Result<(Table, Arc<ObjectStores>)> {
    let looks_like_path =
        target.contains('/') || target.ends_with(".json") || std::path::Path::new(target).exists();
    if looks_like_path {
        let stores = match &catalog {
            Some(c) => Arc::clone(c.object_stores()),
            None => ObjectStores::standalone(Default::default()),
        };
        let table = open_table_at(target, locations, &stores).await?;
        return Ok((table, stores));
    }
    let Some(catalog) = catalog else {
        return Err(DataFusionError::Plan(format!(
            "'{target}' is not a path and no catalog is attached"
        )));
    };
    let ident = TableIdent::from_strs(target.split('.'))
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let table = catalog.load_table(&ident).await?;
    Ok((table, Arc::clone(catalog.object_stores())))
}

impl TableFunctionImpl for IcebergSnapshotsFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let target = match args {
            [Expr::Literal(datafusion::common::ScalarValue::Utf8(Some(s)), _)] => s.clone(),
            _ => {
                return Err(DataFusionError::Plan(
                    "iceberg_snapshots('<table or path>')".into(),
                ))
            }
        };
        let catalog = self.catalog.clone();
        let (table, _) = io_runtime::block_on(async move {
            load_target(&target, catalog, &LocationMap::default()).await
        })?;
        let md = table.metadata();
        let mut snapshots: Vec<_> = md.snapshots().collect();
        snapshots.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms()));
        let current = md.current_snapshot_id();
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                "committed_at",
                DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into())),
                false,
            ),
            Field::new("snapshot_id", DataType::Int64, false),
            Field::new("parent_id", DataType::Int64, true),
            Field::new("sequence_number", DataType::Int64, false),
            Field::new("operation", DataType::Utf8, false),
            Field::new("is_current", DataType::Boolean, false),
            Field::new("summary", DataType::Utf8, false),
        ]));
        let summary = |s: &&iceberg::spec::SnapshotRef| -> Result<String> {
            let props: std::collections::BTreeMap<_, _> =
                s.summary().additional_properties.iter().collect();
            serde_json::to_string(&props).map_err(|e| DataFusionError::External(Box::new(e)))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(
                TimestampMillisecondArray::from(
                    snapshots
                        .iter()
                        .map(|s| s.timestamp_ms())
                        .collect::<Vec<_>>(),
                )
                .with_timezone("+00:00"),
            ),
            Arc::new(Int64Array::from(
                snapshots
                    .iter()
                    .map(|s| s.snapshot_id())
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                snapshots
                    .iter()
                    .map(|s| s.parent_snapshot_id())
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                snapshots
                    .iter()
                    .map(|s| s.sequence_number())
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                snapshots
                    .iter()
                    .map(|s| s.summary().operation.as_str().to_string())
                    .collect::<Vec<_>>(),
            )),
            Arc::new(arrow::array::BooleanArray::from(
                snapshots
                    .iter()
                    .map(|s| Some(s.snapshot_id()) == current)
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                snapshots.iter().map(summary).collect::<Result<Vec<_>>>()?,
            )),
        ];
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}
