//! `iceberg_scan(...)`: a SQL table function reading a table by path or by catalog name, at any
//! snapshot, branch, tag or point in time.
//!
//! ```sql
//! SELECT * FROM iceberg_scan('/data/tables/events');                        -- directory or metadata.json
//! SELECT * FROM iceberg_scan('ns.events', 'snapshot_id', 3051729675574597004);
//! SELECT * FROM iceberg_scan('ns.events', 'as_of', '2025-01-01 00:00:00');   -- or epoch milliseconds
//! SELECT * FROM iceberg_scan('ns.events', 'ref', 'audit-branch');            -- branch or tag
//! SELECT * FROM iceberg_scan('ns.events', 'row_lineage', true);  -- + _row_id, _last_updated_sequence_number (v3)
//! SELECT * FROM iceberg_scan('ns.events', 'metadata_columns', true);  -- + _file, _pos, _spec_id, _partition
//! SELECT * FROM iceberg_scan('lineitem_iceberg', 'base_dir', '/restore/iceberg',  -- relative paths
//!                            'map', 's3://bucket/wh=/restore/wh');             -- moved prefixes
//! ```

use std::sync::Arc;

use datafusion::catalog::TableFunctionImpl;
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;

use super::snapshots::load_target;
use super::IcebergTableProvider;
use crate::catalog::IcebergCatalog;
use crate::io_runtime;
use crate::storage::location::LocationMap;

/// The `iceberg_scan` table function.
#[derive(Debug, Default)]
pub struct IcebergScanFunction {
    catalog: Option<Arc<dyn IcebergCatalog>>,
}

impl IcebergScanFunction {
    /// A function that also resolves catalog table names (`ns.t`) through `catalog`.
    pub fn new(catalog: Option<Arc<dyn IcebergCatalog>>) -> Self {
        Self { catalog }
    }
}

#[derive(Debug)]
enum Pin {
    Snapshot(i64),
    Ref(String),
    AsOf(i64),
}

/// The literal argument `e` of the table function `function`.
fn literal_of(e: &Expr, function: &str) -> Result<ScalarValue> {
    match e {
        Expr::Literal(v, _) => Ok(v.clone()),
        other => Err(DataFusionError::Plan(format!(
            "{function} takes literal arguments, got {other}"
        ))),
    }
}

/// The string argument `e` (`what`, in messages) of the table function `function`.
pub(super) fn string_of(e: &Expr, function: &str, what: &str) -> Result<String> {
    match literal_of(e, function)? {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Ok(s),
        other => Err(DataFusionError::Plan(format!(
            "{function}: {what} must be a string, got {other}"
        ))),
    }
}

/// The integer argument `e` (`what`, in messages) of the table function `function`.
pub(super) fn integer_of(e: &Expr, function: &str, what: &str) -> Result<i64> {
    literal_of(e, function)?
        .cast_to(&arrow::datatypes::DataType::Int64)
        .ok()
        .and_then(|v| match v {
            ScalarValue::Int64(Some(i)) => Some(i),
            _ => None,
        })
        .ok_or_else(|| DataFusionError::Plan(format!("{function}: {what} must be an integer")))
}

fn literal(e: &Expr) -> Result<ScalarValue> {
    literal_of(e, "iceberg_scan")
}

fn string(e: &Expr, what: &str) -> Result<String> {
    string_of(e, "iceberg_scan", what)
}

fn integer(e: &Expr, what: &str) -> Result<i64> {
    integer_of(e, "iceberg_scan", what)
}

fn boolean(e: &Expr, what: &str) -> Result<bool> {
    match literal(e)? {
        ScalarValue::Boolean(Some(b)) => Ok(b),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
            if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") =>
        {
            Ok(s.eq_ignore_ascii_case("true"))
        }
        other => Err(DataFusionError::Plan(format!(
            "iceberg_scan: {what} must be true or false, got {other}"
        ))),
    }
}

/// Milliseconds since the epoch from an integer or a `YYYY-MM-DD[ HH:MM:SS[.fff]]` string (UTC).
fn timestamp_ms(e: &Expr) -> Result<i64> {
    let text = match literal(e)? {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s,
        _ => return integer(e, "as_of"),
    };
    let parsed = chrono::NaiveDateTime::parse_from_str(&text, "%Y-%m-%d %H:%M:%S%.f")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M:%S%.f"))
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default())
        })
        .map_err(|_| {
            DataFusionError::Plan(format!(
                "iceberg_scan: as_of '{text}' is not a timestamp (YYYY-MM-DD HH:MM:SS) or epoch milliseconds"
            ))
        })?;
    Ok(parsed.and_utc().timestamp_millis())
}

impl TableFunctionImpl for IcebergScanFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let Some((target, options)) = args.split_first() else {
            return Err(DataFusionError::Plan(
                "iceberg_scan('<table or path>' [, '<option>', <value>]...)".into(),
            ));
        };
        let target = string(target, "the first argument")?;
        if options.len() % 2 != 0 {
            return Err(DataFusionError::Plan(
                "iceberg_scan: options come in pairs: '<option>', <value>".into(),
            ));
        }
        let mut pin = None;
        let mut row_lineage = false;
        let mut metadata_columns = false;
        let mut locations = LocationMap::default();
        for pair in options.chunks(2) {
            let key = string(&pair[0], "an option name")?.to_ascii_lowercase();
            let value = &pair[1];
            let next = match key.as_str() {
                "snapshot_id" | "snapshot-id" => Some(Pin::Snapshot(integer(value, "snapshot_id")?)),
                "ref" | "branch" | "tag" => Some(Pin::Ref(string(value, "ref")?)),
                "as_of" | "as_of_timestamp" | "timestamp" => Some(Pin::AsOf(timestamp_ms(value)?)),
                "row_lineage" => {
                    row_lineage = boolean(value, "row_lineage")?;
                    None
                }
                "metadata_columns" => {
                    metadata_columns = boolean(value, "metadata_columns")?;
                    None
                }
                "base_dir" => {
                    locations = locations.with_base_dir(string(value, "base_dir")?);
                    None
                }
                "map" => {
                    let m = string(value, "map")?;
                    let (from, to) = m.split_once('=').ok_or_else(|| {
                        DataFusionError::Plan(format!("iceberg_scan: map '{m}' must be '<recorded prefix>=<new prefix>'"))
                    })?;
                    locations = locations.with_prefix(from, to);
                    None
                }
                other => {
                    return Err(DataFusionError::Plan(format!(
                        "iceberg_scan: unknown option '{other}' (snapshot_id, ref, as_of, row_lineage, metadata_columns, base_dir, map)"
                    )))
                }
            };
            if let Some(p) = next {
                if pin.is_some() {
                    return Err(DataFusionError::Plan(
                        "iceberg_scan: give one of snapshot_id, ref, as_of".into(),
                    ));
                }
                pin = Some(p);
            }
        }

        let catalog = self.catalog.clone();
        let provider = io_runtime::block_on(async move {
            let (table, stores) = load_target(&target, catalog, &locations).await?;
            // Tables opened through iceberg_scan are read-only: writes go through the catalog.
            Ok(IcebergTableProvider::try_new(table, None)?
                .with_locations(locations)
                .with_object_stores(stores))
        })?;
        let provider = match pin {
            None => provider,
            Some(Pin::Snapshot(id)) => provider.with_snapshot_id(id)?,
            Some(Pin::Ref(name)) => provider.with_ref(&name)?,
            Some(Pin::AsOf(ms)) => provider.with_timestamp_ms(ms)?,
        };
        let provider = match row_lineage {
            true => provider.with_row_lineage()?,
            false => provider,
        };
        let provider = match metadata_columns {
            true => provider.with_metadata_columns()?,
            false => provider,
        };
        Ok(Arc::new(provider))
    }
}
