//! `CALL <catalog>.system.<procedure>(..)`: the maintenance procedures in the SQL form Spark
//! users type, with named (`table => 'ns.t'`) or positional arguments, `map('k', 'v', ..)`
//! for options, and Spark's result columns.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use futures::TryStreamExt;

use super::args::{arguments, boolean, number, table_arg, text, timestamp_ms, Arg};
use super::expire_snapshots::ExpireSnapshots;
use super::orphan_files::{orphans_schema, RemoveOrphanFiles};
use super::position_deletes::RewritePositionDeleteFiles;
use super::rewrite_data_files::{RewriteDataFiles, RewriteStrategy};
use super::rewrite_manifests::RewriteManifests;
use super::snapshot_procedures;
use crate::commit::MetadataStore;

/// Whether `sql` is a `CALL` statement (checked without parsing; comments before it are
/// skipped).
pub fn is_call(sql: &str) -> bool {
    let sql = without_leading_comments(sql);
    sql.len() > 4
        && sql[..4].eq_ignore_ascii_case("call")
        && sql[4..].starts_with(|c: char| c.is_whitespace())
}

/// `sql` from its first token on: leading whitespace, `-- line` and `/* block */` comments
/// skipped.
fn without_leading_comments(sql: &str) -> &str {
    let mut rest = sql.trim_start();
    loop {
        if let Some(line) = rest.strip_prefix("--") {
            rest = line
                .split_once('\n')
                .map_or("", |(_, after)| after)
                .trim_start();
        } else if let Some(block) = rest.strip_prefix("/*") {
            rest = block
                .split_once("*/")
                .map_or("", |(_, after)| after)
                .trim_start();
        } else {
            return rest;
        }
    }
}

/// What a `CALL` returns.
#[derive(Debug)]
pub enum CallOutput {
    /// The result rows of a procedure that has run.
    Rows(RecordBatch),
    /// The result rows of a procedure that runs as they are read: `remove_orphan_files`, whose
    /// orphans are deleted a batch at a time as they stream out, so none waits in memory however
    /// many there are. Its arguments are checked by the time it is returned; each execution
    /// runs the procedure (a second finds what the first left).
    Stream(Arc<dyn PartitionStream>),
}

/// Runs `CALL [catalog.]system.<procedure>(args)` against the tables of `iceberg`: its result,
/// or `None` when `sql` is not a `CALL`.
pub async fn call(
    state: &SessionState,
    iceberg: &Arc<dyn crate::catalog::IcebergCatalog>,
    sql: &str,
) -> Result<Option<CallOutput>> {
    if !is_call(sql) {
        return Ok(None);
    }
    let store: Arc<dyn MetadataStore> = iceberg.clone();
    let catalog = iceberg.name();
    let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {})
        .map_err(|e| DataFusionError::Plan(format!("CALL: {e}")))?;
    if statements.len() != 1 {
        return Err(DataFusionError::Plan(
            "CALL: give one statement at a time".into(),
        ));
    }
    let Some(DFStatement::Statement(statement)) = statements.pop_front() else {
        return Ok(None);
    };
    let Statement::Call(function) = *statement else {
        return Ok(None);
    };
    let parts: Vec<String> = function.name.0.iter().map(|p| p.to_string()).collect();
    let procedure = match parts.as_slice() {
        [system, name] if system.eq_ignore_ascii_case("system") => name.to_ascii_lowercase(),
        [c, system, name] if system.eq_ignore_ascii_case("system") && c == catalog => {
            name.to_ascii_lowercase()
        }
        _ => {
            return Err(DataFusionError::Plan(format!(
                "CALL: unknown procedure '{}'; call system.<procedure> (procedures: {})",
                function.name,
                procedure_names()
            )))
        }
    };
    let params: &[&str] = match procedure.as_str() {
        "rewrite_data_files" => &["table", "strategy", "sort_order", "options", "where"],
        "expire_snapshots" => &[
            "table",
            "older_than",
            "retain_last",
            "max_concurrent_deletes",
            "snapshot_ids",
        ],
        "rewrite_position_delete_files" => &["table", "options"],
        "rewrite_manifests" => &["table"],
        "remove_orphan_files" => &[
            "table",
            "older_than",
            "location",
            "dry_run",
            "max_concurrent_deletes",
        ],
        other => match snapshot_procedures::PROCEDURES
            .iter()
            .chain(super::add_files::PROCEDURES)
            .find(|(n, _)| *n == other)
        {
            Some((_, params)) => params,
            None => {
                return Err(DataFusionError::Plan(format!(
                    "CALL: no procedure system.{other} (procedures: {})",
                    procedure_names()
                )))
            }
        },
    };
    let args = arguments(&procedure, params, &function.args)?;
    let default_namespace = state.config().options().catalog.default_schema.clone();
    let rows = match procedure.as_str() {
        "rewrite_data_files" => {
            rewrite_data_files(state, store, catalog, &default_namespace, args).await
        }
        "expire_snapshots" => {
            expire_snapshots(state, store, catalog, &default_namespace, args).await
        }
        "remove_orphan_files" => {
            return remove_orphan_files(store, catalog, &default_namespace, args)
                .await
                .map(|s| Some(CallOutput::Stream(s)));
        }
        "rewrite_position_delete_files" => {
            rewrite_position_delete_files(state, store, catalog, &default_namespace, args).await
        }
        "rewrite_manifests" => {
            let ident = table_arg("rewrite_manifests", &args, catalog, &default_namespace)?;
            let r = RewriteManifests::new(store, ident).execute(state).await?;
            counts_row(&[
                ("rewritten_manifests_count", r.rewritten_manifests_count),
                ("added_manifests_count", r.added_manifests_count),
            ])
        }
        other
            if super::add_files::PROCEDURES
                .iter()
                .any(|(n, _)| *n == other) =>
        {
            super::add_files::call(other, iceberg, &default_namespace, &args).await
        }
        other => {
            let ident = table_arg(other, &args, catalog, &default_namespace)?;
            snapshot_procedures::call(other, store, &ident, &args).await
        }
    };
    rows.map(|rows| Some(CallOutput::Rows(rows)))
}

/// The names of the procedures `CALL` runs.
fn procedure_names() -> String {
    PROCEDURES
        .iter()
        .copied()
        .chain(snapshot_procedures::PROCEDURES.iter().map(|(n, _)| *n))
        .chain(super::add_files::PROCEDURES.iter().map(|(n, _)| *n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The maintenance procedures `CALL` runs (the snapshot procedures are listed in their module).
const PROCEDURES: &[&str] = &[
    "rewrite_data_files",
    "expire_snapshots",
    "rewrite_position_delete_files",
    "rewrite_manifests",
    "remove_orphan_files",
];

async fn rewrite_data_files(
    state: &SessionState,
    store: Arc<dyn MetadataStore>,
    catalog: &str,
    default_namespace: &str,
    args: BTreeMap<String, Arg>,
) -> Result<RecordBatch> {
    const P: &str = "rewrite_data_files";
    let ident = table_arg(P, &args, catalog, default_namespace)?;
    let sort_order = text(P, &args, "sort_order")?;
    let strategy = match text(P, &args, "strategy")?.map(|s| s.to_ascii_lowercase()) {
        None if sort_order.is_some() => RewriteStrategy::Sort(sort_order),
        None => RewriteStrategy::BinPack,
        Some(s) if s == "binpack" => {
            if sort_order.is_some() {
                return Err(DataFusionError::Plan(format!(
                    "CALL {P}: sort_order needs strategy => 'sort'"
                )));
            }
            RewriteStrategy::BinPack
        }
        Some(s) if s == "sort" => RewriteStrategy::Sort(sort_order),
        Some(other) => {
            return Err(DataFusionError::Plan(format!(
                "CALL {P}: strategy must be 'binpack' or 'sort', got '{other}'"
            )))
        }
    };
    let mut rewrite = RewriteDataFiles::new(store, ident).strategy(strategy);
    for (k, v) in options_of(P, &args)? {
        rewrite = rewrite.option(k, v);
    }
    if let Some(filter) = text(P, &args, "where")? {
        rewrite = rewrite.filter_sql(filter);
    }
    let r = rewrite.execute(state).await?;
    let int = |n: u64, what: &str| {
        i32::try_from(n).map_err(|_| {
            DataFusionError::Execution(format!("CALL {P}: {what} ({n}) exceeds the INT column"))
        })
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("rewritten_data_files_count", DataType::Int32, false),
        Field::new("added_data_files_count", DataType::Int32, false),
        Field::new("rewritten_bytes_count", DataType::Int64, false),
        Field::new("failed_data_files_count", DataType::Int32, false),
        Field::new("removed_delete_files_count", DataType::Int32, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![int(
            r.rewritten_data_files_count,
            "rewritten files",
        )?])),
        Arc::new(Int32Array::from(vec![int(
            r.added_data_files_count,
            "added files",
        )?])),
        Arc::new(Int64Array::from(vec![r.rewritten_bytes_count as i64])),
        Arc::new(Int32Array::from(vec![int(
            r.failed_data_files_count,
            "failed files",
        )?])),
        Arc::new(Int32Array::from(vec![int(
            r.removed_delete_files_count,
            "removed delete files",
        )?])),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// The `options` argument: `map('key', 'value', ..)`, none when absent.
fn options_of(procedure: &str, args: &BTreeMap<String, Arg>) -> Result<BTreeMap<String, String>> {
    match args.get("options") {
        None => Ok(BTreeMap::new()),
        Some(Arg::Map(options)) => Ok(options.clone()),
        Some(_) => Err(DataFusionError::Plan(format!(
            "CALL {procedure}: 'options' must be map('key', 'value', ..)"
        ))),
    }
}

/// One result row of BIGINT columns.
fn counts_row(columns: &[(&str, u64)]) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, _)| Field::new(*n, DataType::Int64, false))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, v)| Arc::new(Int64Array::from(vec![*v as i64])) as ArrayRef)
        .collect();
    Ok(RecordBatch::try_new(schema, arrays)?)
}

async fn expire_snapshots(
    state: &SessionState,
    store: Arc<dyn MetadataStore>,
    catalog: &str,
    default_namespace: &str,
    args: BTreeMap<String, Arg>,
) -> Result<RecordBatch> {
    const P: &str = "expire_snapshots";
    let ident = table_arg(P, &args, catalog, default_namespace)?;
    let mut expire = ExpireSnapshots::new(store, ident);
    if let Some(ms) = timestamp_ms(P, &args, "older_than")? {
        expire = expire.older_than_ms(ms);
    }
    if let Some(n) = number::<usize>(P, &args, "retain_last")? {
        if n == 0 {
            return Err(DataFusionError::Plan(format!(
                "CALL {P}: retain_last must be at least 1"
            )));
        }
        expire = expire.retain_last(n);
    }
    if let Some(n) = number::<usize>(P, &args, "max_concurrent_deletes")? {
        expire = expire.max_concurrent_deletes(n);
    }
    match args.get("snapshot_ids") {
        None => {}
        Some(Arg::List(ids)) => {
            for id in ids {
                let id: i64 = id.parse().map_err(|_| {
                    DataFusionError::Plan(format!(
                        "CALL {P}: snapshot_ids must be numbers, got '{id}'"
                    ))
                })?;
                expire = expire.expire_snapshot_id(id);
            }
        }
        Some(_) => {
            return Err(DataFusionError::Plan(format!(
                "CALL {P}: snapshot_ids must be array(id, ..)"
            )))
        }
    }
    let r = expire.execute(state).await?;
    counts_row(&[
        ("deleted_data_files_count", r.deleted_data_files_count),
        (
            "deleted_position_delete_files_count",
            r.deleted_position_delete_files_count,
        ),
        (
            "deleted_equality_delete_files_count",
            r.deleted_equality_delete_files_count,
        ),
        (
            "deleted_manifest_files_count",
            r.deleted_manifest_files_count,
        ),
        (
            "deleted_manifest_lists_count",
            r.deleted_manifest_lists_count,
        ),
        (
            "deleted_statistics_files_count",
            r.deleted_statistics_files_count,
        ),
    ])
}

async fn remove_orphan_files(
    store: Arc<dyn MetadataStore>,
    catalog: &str,
    default_namespace: &str,
    args: BTreeMap<String, Arg>,
) -> Result<Arc<dyn PartitionStream>> {
    const P: &str = "remove_orphan_files";
    let ident = table_arg(P, &args, catalog, default_namespace)?;
    let mut remove = RemoveOrphanFiles::new(store, ident);
    if let Some(ms) = timestamp_ms(P, &args, "older_than")? {
        remove = remove.older_than_ms(ms);
    }
    if let Some(location) = text(P, &args, "location")? {
        remove = remove.location(location);
    }
    if let Some(dry_run) = boolean(P, &args, "dry_run")? {
        remove = remove.dry_run(dry_run);
    }
    if let Some(n) = number::<usize>(P, &args, "max_concurrent_deletes")? {
        remove = remove.max_concurrent_deletes(n);
    }
    remove.validate().await?;
    Ok(Arc::new(OrphanRemoval {
        remove,
        schema: orphans_schema(),
    }))
}

/// An orphan removal that runs each time it is executed, its orphans streaming out.
#[derive(Debug)]
struct OrphanRemoval {
    remove: RemoveOrphanFiles,
    schema: SchemaRef,
}

impl PartitionStream for OrphanRemoval {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, context: Arc<TaskContext>) -> SendableRecordBatchStream {
        let remove = self.remove.clone();
        let orphans = futures::stream::once(async move { remove.execute_stream(context).await })
            .try_flatten();
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            orphans,
        ))
    }
}

async fn rewrite_position_delete_files(
    state: &SessionState,
    store: Arc<dyn MetadataStore>,
    catalog: &str,
    default_namespace: &str,
    args: BTreeMap<String, Arg>,
) -> Result<RecordBatch> {
    const P: &str = "rewrite_position_delete_files";
    let ident = table_arg(P, &args, catalog, default_namespace)?;
    let mut rewrite = RewritePositionDeleteFiles::new(store, ident);
    for (k, v) in options_of(P, &args)? {
        rewrite = rewrite.option(k, v);
    }
    let r = rewrite.execute(state).await?;
    counts_row(&[
        (
            "rewritten_delete_files_count",
            r.rewritten_delete_files_count,
        ),
        ("added_delete_files_count", r.added_delete_files_count),
        ("rewritten_bytes_count", r.rewritten_bytes_count),
        ("added_bytes_count", r.added_bytes_count),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maintenance::args::table_ident;
    use iceberg::TableIdent;

    fn parse_args(sql: &str) -> Result<BTreeMap<String, Arg>> {
        let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {}).unwrap();
        let Some(DFStatement::Statement(s)) = statements.pop_front() else {
            panic!("not a statement")
        };
        let Statement::Call(f) = *s else {
            panic!("not a CALL")
        };
        arguments(
            "rewrite_data_files",
            &["table", "strategy", "sort_order", "options", "where"],
            &f.args,
        )
    }

    #[test]
    fn a_call_is_found_after_comments_and_only_then() {
        assert!(is_call("  call system.rewrite_manifests('ns.t')"));
        assert!(is_call(
            "-- compact\n/* all of it */ CALL system.rewrite_manifests('ns.t')"
        ));
        assert!(!is_call("-- CALL system.rewrite_manifests('ns.t')"));
        assert!(!is_call("/* CALL x */ SELECT 1"));
        assert!(!is_call("SELECT 'CALL system.x()'"));
        assert!(!is_call("/* never closed CALL x"));
    }

    #[test]
    fn named_and_positional_arguments() {
        let named = parse_args(
            "CALL system.rewrite_data_files(table => 'ns.t', options => map('min-input-files', \
             '2', 'rewrite-all', true), where => 'id > 5')",
        )
        .unwrap();
        assert_eq!(named["table"], Arg::Text("ns.t".into()));
        assert_eq!(named["where"], Arg::Text("id > 5".into()));
        let Arg::Map(options) = &named["options"] else {
            panic!("{named:?}")
        };
        assert_eq!(options["min-input-files"], "2");
        assert_eq!(options["rewrite-all"], "true");
        let positional =
            parse_args("CALL cat.system.rewrite_data_files('ns.t', 'sort', 'id DESC')").unwrap();
        assert_eq!(positional["strategy"], Arg::Text("sort".into()));
        assert_eq!(positional["sort_order"], Arg::Text("id DESC".into()));
        let err = |sql: &str| parse_args(sql).unwrap_err().to_string();
        assert!(
            err("CALL system.rewrite_data_files(tabel => 't')").contains("no parameter 'tabel'")
        );
        assert!(
            err("CALL system.rewrite_data_files(table => 't', 'binpack')")
                .contains("positional argument follows")
        );
        assert!(
            err("CALL system.rewrite_data_files(table => 't', table => 'u')")
                .contains("given twice")
        );
        assert!(
            err("CALL system.rewrite_data_files('t', 'a', 'b', map(), 'w', 'x')")
                .contains("too many arguments")
        );
        assert!(err("CALL system.rewrite_data_files(options => map('k'))")
            .contains("map('key', 'value'"));
        assert!(err("CALL system.rewrite_data_files(table => now())").contains("literal"));
    }

    #[test]
    fn calls_are_recognised_and_names_resolved() {
        assert!(is_call("  call system.x()"));
        assert!(is_call("CALL\nsystem.x()"));
        assert!(!is_call("CALLED"));
        assert!(!is_call("SELECT 1"));
        let id = table_ident("cat", "default", "cat.ns.t").unwrap();
        assert_eq!(id, TableIdent::from_strs(["ns", "t"]).unwrap());
        let id = table_ident("cat", "default", "t").unwrap();
        assert_eq!(id, TableIdent::from_strs(["default", "t"]).unwrap());
        assert!(table_ident("cat", "default", "ns..t").is_err());
    }
}
