//! Runs every `sqllogictest/*.slt` file against a fresh warehouse.
//!
//! `cargo test --test sqllogictests` runs all files; an argument filters by file name.
//! Cell values print as DataFusion displays them, NULL as `NULL`, the empty string as `(empty)`;
//! the warehouse directory prints as `WAREHOUSE` and `$WAREHOUSE` in SQL stands for it;
//! `$FIXTURES` stands for the Spark-written tables of tests/data/duckdb-iceberg.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use iceberg_exec::{IcebergSession, WarehouseConfig};
use sqllogictest::{DBOutput, DefaultColumnType};

struct Db {
    session: IcebergSession,
    warehouse: String,
}

/// The repository root: the clone cargo runs the test in (a binary built from another clone
/// sharing the target directory still reads this clone's files).
fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The Spark-written tables vendored in tests/data (`$FIXTURES` in SQL).
fn fixtures() -> String {
    let dir = repo().join("tests/data/duckdb-iceberg");
    dir.canonicalize().unwrap_or(dir).display().to_string()
}

#[derive(Debug)]
struct DbError(String);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DbError {}

impl From<DataFusionError> for DbError {
    fn from(e: DataFusionError) -> Self {
        DbError(e.to_string())
    }
}

fn cells(batches: &[RecordBatch], warehouse: &str) -> Result<Vec<Vec<String>>, DbError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = vec![];
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DbError(e.to_string()))?;
        for row in 0..batch.num_rows() {
            let values: Vec<String> = formatters
                .iter()
                .map(|f| {
                    let v = f.value(row).to_string().replace(warehouse, "WAREHOUSE");
                    if v.is_empty() {
                        "(empty)".to_string()
                    } else {
                        v
                    }
                })
                .collect();
            // A multi-line cell (a plan) continues on rows of its own, one per line.
            let mut first = vec![];
            let mut more = vec![];
            for v in values {
                let mut lines = v.lines();
                first.push(lines.next().unwrap_or_default().to_string());
                more.extend(lines.map(|l| vec![l.to_string()]));
            }
            rows.push(first);
            rows.extend(more);
        }
    }
    Ok(rows)
}

#[async_trait]
impl sqllogictest::AsyncDB for Db {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        let sql = sql
            .replace("$WAREHOUSE", &self.warehouse)
            .replace("$FIXTURES", &fixtures());
        let df = self.session.sql(&sql).await?;
        let width = df.schema().fields().len();
        let batches = df.collect().await?;
        if width == 0 {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows: cells(&batches, &self.warehouse)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "iceberg-exec"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }
}

async fn run_file(path: &Path) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let warehouse = dir.path().canonicalize().map_err(|e| e.to_string())?;
    let session = IcebergSession::open(WarehouseConfig::local(&warehouse))
        .await
        .map_err(|e| e.to_string())?;
    let warehouse = warehouse.display().to_string();
    let mut runner = sqllogictest::Runner::new(move || {
        let session = session.clone();
        let warehouse = warehouse.clone();
        async move { Ok(Db { session, warehouse }) }
    });
    runner.with_column_validator(|_, _| true);
    runner
        .run_file_async(path)
        .await
        .map_err(|e| e.display(true).to_string())
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let dir = repo().join("sqllogictest");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sqllogictest directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| {
            filter
                .as_ref()
                .is_none_or(|f| p.display().to_string().contains(f.as_str()))
        })
        .collect();
    files.sort();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (mut passed, mut failed) = (0, 0);
    for f in &files {
        match runtime.block_on(run_file(f)) {
            Ok(()) => {
                passed += 1;
                println!("ok   {}", f.display());
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {}\n{e}", f.display());
            }
        }
    }
    println!("sqllogictests: {passed} passed, {failed} failed");
    if failed > 0 || files.is_empty() {
        std::process::exit(1);
    }
}
