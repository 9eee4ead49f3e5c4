//! DELETE on a table whose data is one parquet file of more than 1 GiB, under a 64 MiB memory
//! pool: merge-on-read (0.1% of rows) and copy-on-write (1% of rows), side by side with the
//! physical limit of a rewrite — DataFusion's `COPY` of the same file, under the same pool.
//! Each statement runs in a fresh child process, so its peak RSS is its own.
//!
//! `cargo bench --bench dml` (release build). `ICEBERG_EXEC_BENCH_DML_ROWS` sets the row count
//! (default 56M rows, one file of about 1.1 GiB).

use std::process::Command;
use std::time::Instant;

use iceberg_exec::{IcebergSession, WarehouseConfig};

const POOL: usize = 64 << 20;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

async fn session(dir: &std::path::Path, limit: Option<usize>) -> IcebergSession {
    let mut config = WarehouseConfig::local(dir);
    config.memory_limit = limit;
    IcebergSession::open(config).await.unwrap()
}

async fn run(s: &IcebergSession, sql: &str) -> Vec<arrow::array::RecordBatch> {
    s.context()
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// One table `b.t`, one data file: writers rolled at 8 GiB, one writer partition.
async fn generate(dir: &std::path::Path, rows: u64) -> (String, u64) {
    let s = session(dir, None).await;
    run(&s, "SET datafusion.execution.target_partitions = 1").await;
    run(&s, "CREATE SCHEMA b").await;
    run(
        &s,
        "CREATE EXTERNAL TABLE b.t (id BIGINT NOT NULL, k BIGINT, payload VARCHAR) STORED AS \
         ICEBERG LOCATION '' OPTIONS ('write.target-file-size-bytes' '8589934592')",
    )
    .await;
    run(
        &s,
        &format!(
            "INSERT INTO b.t SELECT value, value * 7919 % 1000003, \
             to_hex(value * 2654435761 % 1000000007) || to_hex(value * 40503 % 998244353) || \
             to_hex(value * 69069 % 2147483647) || to_hex(value * 1103515245 % 4294967291) \
             FROM generate_series(1, {rows})"
        ),
    )
    .await;
    let mut files = vec![];
    let data = dir.join("b/t/data");
    for e in std::fs::read_dir(&data).unwrap().flatten() {
        files.push((e.path(), e.metadata().unwrap().len()));
    }
    assert_eq!(files.len(), 1, "expected one data file: {files:?}");
    let (path, size) = files.remove(0);
    (path.display().to_string(), size)
}

/// Runs `sql` under the 64 MiB pool in this (child) process and prints seconds, peak RSS (KiB)
/// and the statement's answer.
async fn child(dir: &std::path::Path, sql: &str) {
    if let Some(file) = sql.strip_prefix("copy:") {
        return copy(dir, file).await;
    }
    let s = session(dir, Some(POOL)).await;
    let start = Instant::now();
    let mut batches = vec![];
    for statement in sql.split(';').filter(|q| !q.trim().is_empty()) {
        batches = run(&s, statement).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let answer = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string()
        .lines()
        .filter(|l| l.starts_with('|'))
        .nth(1)
        .unwrap_or("")
        .trim_matches(|c| c == '|' || c == ' ')
        .to_string();
    assert_eq!(s.memory_pool().reserved(), 0);
    println!("{secs:.2} {} {answer}", peak_rss_kib());
}

/// The physical limit of a rewrite: plain DataFusion copies the parquet file, same pool.
async fn copy(dir: &std::path::Path, file: &str) {
    use datafusion::execution::memory_pool::FairSpillPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(std::sync::Arc::new(FairSpillPool::new(POOL)))
        .build_arc()
        .unwrap();
    let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
    ctx.register_parquet("src", file, ParquetReadOptions::default())
        .await
        .unwrap();
    let out = dir.join("copy.parquet");
    let start = Instant::now();
    let batches = ctx
        .sql(&format!(
            "COPY (SELECT * FROM src) TO '{}' STORED AS PARQUET",
            out.display()
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let secs = start.elapsed().as_secs_f64();
    let rows = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string()
        .lines()
        .filter(|l| l.starts_with('|'))
        .nth(1)
        .unwrap_or("")
        .trim_matches(|c| c == '|' || c == ' ')
        .to_string();
    println!("{secs:.2} {} {rows}", peak_rss_kib());
}

fn measure(dir: &std::path::Path, label: &str, sql: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .arg(dir)
        .arg(sql)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut parts = line.splitn(3, ' ');
    let secs = parts.next().unwrap_or("");
    let rss = parts.next().unwrap_or("0").parse::<f64>().unwrap_or(0.0) / 1024.0;
    let answer = parts.next().unwrap_or("");
    println!("{label:<48} {secs:>8} s  peak RSS {rss:>6.0} MiB  answer {answer}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        rt.block_on(child(std::path::Path::new(&args[i + 1]), &args[i + 2]));
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let rows: u64 = std::env::var("ICEBERG_EXEC_BENCH_DML_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(56_000_000);
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let (file, size) = rt.block_on(generate(dir.path(), rows));
    println!(
        "generated {rows} rows in one data file of {:.2} GiB in {:.0} s",
        size as f64 / (1u64 << 30) as f64,
        start.elapsed().as_secs_f64()
    );
    measure(
        dir.path(),
        "DataFusion COPY of the data file (limit), 64 MiB",
        &format!("copy:{file}"),
    );
    measure(
        dir.path(),
        "DELETE 0.1% merge-on-read, 64 MiB pool",
        "SET iceberg.delete_mode = 'merge-on-read'; DELETE FROM b.t WHERE id % 1000 = 0",
    );
    measure(
        dir.path(),
        "DELETE 1% copy-on-write, 64 MiB pool",
        "DELETE FROM b.t WHERE id % 100 = 7",
    );
}
