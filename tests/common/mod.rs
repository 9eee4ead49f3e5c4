//! Shared helpers for integration tests.
#![allow(dead_code)]

pub mod hive_style;
pub mod s3_tool;
pub mod seaweed;
pub mod venv;

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::error::Result;
use iceberg_exec::{IcebergSession, WarehouseConfig};

/// Held by tests that switch the process-wide manifest cache off or that depend on it being on:
/// the local tests share one process.
pub static MANIFEST_CACHE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A session on a fresh warehouse in `dir`.
pub async fn session(dir: &Path) -> IcebergSession {
    IcebergSession::open(WarehouseConfig::local(dir))
        .await
        .expect("open session")
}

/// A session with a memory limit.
pub async fn session_with_limit(dir: &Path, limit: usize) -> IcebergSession {
    let mut config = WarehouseConfig::local(dir);
    config.memory_limit = Some(limit);
    IcebergSession::open(config).await.expect("open session")
}

/// Runs SQL and collects the result.
pub async fn sql(session: &IcebergSession, sql: &str) -> Result<Vec<RecordBatch>> {
    session.context().sql(sql).await?.collect().await
}

/// Runs SQL and renders the result as text lines (header and rows, without borders).
pub async fn rows(session: &IcebergSession, query: &str) -> Vec<String> {
    let batches = sql(session, query)
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    render(&batches)
}

/// Renders batches as `a|b|c` lines (no header).
pub fn render(batches: &[RecordBatch]) -> Vec<String> {
    let text = pretty_format_batches(batches).expect("format").to_string();
    text.lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

/// Every file under `dir`, relative, sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(base, &p, out);
                } else if let Ok(rel) = p.strip_prefix(base) {
                    out.push(rel.display().to_string());
                }
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The current snapshot id of a table, if any.
pub async fn current_snapshot(session: &IcebergSession, ns: &str, table: &str) -> Option<i64> {
    let ident = iceberg::TableIdent::from_strs([ns, table]).expect("ident");
    let t = session.catalog().load_table(&ident).await.expect("load");
    t.metadata().current_snapshot_id()
}

/// Arc helper.
pub fn arc<T>(t: T) -> Arc<T> {
    Arc::new(t)
}

/// Whether the values of the BIGINT `column` never increase over the rows of the parquet file
/// at `path` (a `file://` location or a plain path; NULLs skipped).
pub fn non_increasing(path: &str, column: &str) -> bool {
    use datafusion::arrow::array::Int64Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let path = path.strip_prefix("file://").unwrap_or(path);
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let mut prev = i64::MAX;
    for batch in reader {
        let batch = batch.unwrap();
        let values = batch
            .column_by_name(column)
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .clone();
        for v in values.iter().flatten() {
            if v > prev {
                return false;
            }
            prev = v;
        }
    }
    true
}

/// Runs `statement` and returns its result and the metrics of its node `node` (a statement's
/// own node: `MergeExec`, `UpdateExec`, ...), the root or under single-child wrappers.
pub async fn run_with_metrics(
    session: &IcebergSession,
    statement: &str,
    node: &str,
) -> (Vec<String>, datafusion::physical_plan::metrics::MetricsSet) {
    let df = session.context().sql(statement).await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let task = session.context().task_ctx();
    let batches = datafusion::physical_plan::collect(Arc::clone(&plan), task)
        .await
        .unwrap();
    // The statement's node, under the wrappers DataFusion may put above it.
    let mut at = Arc::clone(&plan);
    while at.name() != node {
        let child = match at.children().as_slice() {
            [child] => Arc::clone(child),
            _ => panic!("no {node} in the plan of {statement}"),
        };
        at = child;
    }
    (render(&batches), at.metrics().unwrap())
}

/// The sum of metric `name` over a node's partitions.
pub fn metric(metrics: &datafusion::physical_plan::metrics::MetricsSet, name: &str) -> usize {
    metrics
        .sum_by_name(name)
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
        .as_usize()
}

/// Whether each column chunk of the parquet file at `path` has a dictionary page: by column
/// path, one entry per row group.
pub fn dictionary_pages(path: &str) -> std::collections::HashMap<String, Vec<bool>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let path = path.strip_prefix("file://").unwrap_or(path);
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out: std::collections::HashMap<String, Vec<bool>> = Default::default();
    for group in reader.metadata().row_groups() {
        for chunk in group.columns() {
            out.entry(chunk.column_path().string())
                .or_default()
                .push(chunk.dictionary_page_offset().is_some());
        }
    }
    out
}
