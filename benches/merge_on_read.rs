//! Merge-on-read scan speed, side by side in one run: `SELECT count(*), sum(value)` over a table
//! of `ICEBERG_EXEC_BENCH_ROWS` rows (default 10M) in 20 files with 10% of rows position-deleted,
//! and the same with 100K equality-deleted keys on top (`ICEBERG_EXEC_BENCH_EQ_KEYS`). Peers:
//! DataFusion over the bare data files (ignoring deletes: the physical limit), DuckDB's
//! `iceberg_scan` (from the test venv, when present) and iceberg-datafusion 0.10.1
//! (benches/peers/iceberg-datafusion, when built; `ICEBERG_EXEC_BENCH_PEER_EQ=1` also runs it with
//! equality deletes, killed after `ICEBERG_EXEC_BENCH_CAP_S` seconds, default 300). Prints
//! medians and ratios.
//!
//! `cargo bench --bench merge_on_read`; `ICEBERG_EXEC_BENCH_MEMORY_LIMIT=64M` runs our queries
//! under a memory pool of that size.

#[path = "peers/run.rs"]
mod peers;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use iceberg::spec::{Operation, Struct};
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, SnapshotChanges};
use iceberg_exec::physical_plan::write::{write_equality_delete_file, write_position_delete_file};
use iceberg_exec::{IcebergSession, IcebergTableProvider, MetadataStore, WarehouseConfig};

/// Repetitions per engine (`ICEBERG_EXEC_BENCH_RUNS`, default 5).
fn runs() -> usize {
    env_num("ICEBERG_EXEC_BENCH_RUNS", 5) as usize
}
const QUERY: &str = "SELECT count(*), sum(value) FROM {t}";

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn median(ctx: &SessionContext, table: &str) -> (f64, String) {
    median_of(ctx, QUERY, table).await
}

async fn median_of(ctx: &SessionContext, query: &str, table: &str) -> (f64, String) {
    let q = query.replace("{t}", table);
    let mut times = vec![];
    let mut answer = String::new();
    for _ in 0..runs() {
        let start = Instant::now();
        let batches = ctx.sql(&q).await.unwrap().collect().await.unwrap();
        times.push(start.elapsed().as_secs_f64());
        answer = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
            .lines()
            .nth(3)
            .unwrap_or_default()
            .to_string();
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], answer)
}

fn duckdb(metadata: &str) -> Option<(f64, String)> {
    let py = PathBuf::from(std::env::var_os("HOME")?).join(".cache/iceberg-exec-venv/bin/python");
    if !py.exists() {
        eprintln!(
            "DuckDB skipped: no venv at {} (run cargo test once)",
            py.display()
        );
        return None;
    }
    let out = Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/pyiceberg_tool.py"
        ))
        .args([
            "duckdb-bench",
            "--metadata",
            metadata,
            "--query",
            QUERY,
            "--runs",
        ])
        .arg(runs().to_string())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("DuckDB failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some((v["median_s"].as_f64()?, v["rows"].to_string()))
}

fn iceberg_datafusion(metadata: &str) -> Option<Result<(f64, String), u64>> {
    peers::iceberg_datafusion(
        metadata,
        QUERY,
        runs(),
        env_num("ICEBERG_EXEC_BENCH_CAP_S", 300),
    )
}

fn main() {
    let rows = env_num("ICEBERG_EXEC_BENCH_ROWS", 10_000_000) as i64;
    let eq_keys = env_num("ICEBERG_EXEC_BENCH_EQ_KEYS", 100_000) as i64;
    let files = 20i64;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // `ICEBERG_EXEC_BENCH_MEMORY_LIMIT` (e.g. 64M) puts our queries under a memory pool.
    let mut config = WarehouseConfig::local(dir.path());
    if let Ok(limit) = std::env::var("ICEBERG_EXEC_BENCH_MEMORY_LIMIT") {
        config.memory_limit = Some(iceberg_exec::parse_size(&limit).unwrap());
    }
    let session = rt.block_on(IcebergSession::open(config)).unwrap();
    let ctx = session.context().clone();
    let store: Arc<dyn MetadataStore> = session.catalog().clone();
    let (pos_meta, eq_meta, data_files) = rt.block_on(async {
        ctx.sql("CREATE SCHEMA b").await.unwrap().collect().await.unwrap();
        let mut metas = vec![];
        let mut data_paths: Vec<String> = vec![];
        for name in ["pos", "eq"] {
            ctx.sql(&format!("CREATE TABLE b.{name} (id BIGINT, value BIGINT)"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            for f in 0..files {
                let (lo, hi) = (f * rows / files, (f + 1) * rows / files - 1);
                ctx.sql(&format!(
                    "INSERT INTO b.{name} SELECT value, value % 1000 FROM generate_series({lo}, {hi})"
                ))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            }
            let ident = TableIdent::from_strs(["b", name]).unwrap();
            let table = session.catalog().load_table(&ident).await.unwrap();
            let snapshot = table.metadata().current_snapshot().unwrap().clone();
            let data = iceberg_exec::file_planning::plan_files(&table, &snapshot).await.unwrap();
            if name == "pos" {
                data_paths = data.iter().map(|f| f.path.replace("file://", "")).collect();
            }
            // 10% of each file's positions, one delete file per data file.
            let mut added = vec![];
            for f in &data {
                let deletes: Vec<(String, i64)> = (0..f.record_count as i64)
                    .filter(|p| p % 10 == 3)
                    .map(|p| (f.path.clone(), p))
                    .collect();
                added.push(write_position_delete_file(&table, 0, Struct::empty(), deletes).await.unwrap());
            }
            if name == "eq" {
                // Keys spread over the whole id range; a third of them already position-deleted.
                let ids: Vec<i64> = (0..eq_keys).map(|k| k * (rows / eq_keys.max(1))).collect();
                let n = ids.len();
                let batch = RecordBatch::try_from_iter([
                    ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
                    ("value", Arc::new(Int64Array::from(vec![0i64; n])) as ArrayRef),
                ])
                .unwrap();
                added.push(
                    write_equality_delete_file(&table, vec![1], 0, Struct::empty(), &[batch])
                        .await
                        .unwrap(),
                );
            }
            let changes = SnapshotChanges {
                operation: Operation::Delete,
                added_delete_files: added,
                ..Default::default()
            };
            let out = commit(Arc::clone(&store), &ident, changes).await.unwrap();
            metas.push(out.table.metadata_location().unwrap().to_string());
        }
        (metas[0].clone(), metas[1].clone(), data_paths)
    });
    let peer = SessionContext::new();
    rt.block_on(async {
        // Only the data files (the delete files live next to them).
        let df = peer
            .read_parquet(data_files, ParquetReadOptions::default())
            .await
            .unwrap();
        peer.register_table("bare", df.into_view()).unwrap();
    });

    println!("merge-on-read scan: {rows} rows, {files} files, 10% position-deleted; {eq_keys} equality-deleted keys; query `{QUERY}`; median of {}", runs());
    let embedded = SessionContext::new();
    rt.block_on(async {
        // The same data files through iceberg-exec, at the snapshot before the deletes.
        let ident = TableIdent::from_strs(["b", "pos"]).unwrap();
        let table = session.catalog().load_table(&ident).await.unwrap();
        let before = table
            .metadata()
            .current_snapshot()
            .unwrap()
            .parent_snapshot_id()
            .unwrap();
        let provider = IcebergTableProvider::try_new(table, None)
            .unwrap()
            .with_snapshot_id(before)
            .unwrap();
        // Any DataFusion context takes the provider; a plain one has a default schema.
        embedded
            .register_table("before_deletes", Arc::new(provider))
            .unwrap();
    });
    let (bare, bare_answer) = rt.block_on(median(&peer, "bare"));
    let (clean, clean_answer) = rt.block_on(median(&embedded, "before_deletes"));
    let (pos, pos_answer) = rt.block_on(median(&ctx, "b.pos"));
    let (eq, eq_answer) = rt.block_on(median(&ctx, "b.eq"));
    // The anti-join route of position deletes on the same table (what a partition takes above
    // iceberg.position_delete_join_threshold delete rows).
    let (joined, joined_answer) = rt.block_on(async {
        ctx.sql("SET iceberg.position_delete_join_threshold = 0")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let out = median(&ctx, "b.pos").await;
        ctx.sql("SET iceberg.position_delete_join_threshold = 20000000")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        out
    });
    // What reading the key column costs on its own (the join needs it).
    // The same over the bare files: the physical limit of a scan that reads the key column.
    let (bare_key, bare_key_answer) = rt.block_on(median_of(
        &peer,
        "SELECT count(*), sum(value), max(id) FROM {t}",
        "bare",
    ));
    let (with_key, with_key_answer) = rt.block_on(median_of(
        &ctx,
        "SELECT count(*), sum(value), max(id) FROM {t}",
        "b.pos",
    ));
    println!(
        "{:<48} {:>9} {}",
        "DataFusion, bare data files (deletes ignored)",
        format!("{bare:.3}s"),
        bare_answer
    );
    println!(
        "{:<48} {:>9} {}",
        "iceberg-exec, same files before the deletes",
        format!("{clean:.3}s"),
        clean_answer
    );
    println!(
        "{:<48} {:>9} {}",
        "iceberg-exec, position deletes",
        format!("{pos:.3}s"),
        pos_answer
    );
    println!(
        "{:<48} {:>9} {}  (anti-join / row selection {:.2}x)",
        "iceberg-exec, position deletes, anti-join route",
        format!("{joined:.3}s"),
        joined_answer,
        joined / pos
    );
    println!(
        "{:<48} {:>9} {}",
        "iceberg-exec, position + equality deletes",
        format!("{eq:.3}s"),
        eq_answer
    );
    println!(
        "{:<48} {:>9} {}",
        "iceberg-exec, position deletes, + max(id)",
        format!("{with_key:.3}s"),
        with_key_answer
    );
    println!(
        "{:<48} {:>9} {}",
        "DataFusion, bare data files, + max(id)",
        format!("{bare_key:.3}s"),
        bare_key_answer
    );
    println!(
        "ratios: pos/bare {:.2}x, eq/pos {:.2}x, eq/bare {:.2}x, eq/(bare + max(id)) {:.2}x, eq/(pos + max(id)) {:.2}x",
        pos / bare,
        eq / pos,
        eq / bare,
        eq / bare_key,
        eq / with_key
    );
    if let Some((d, answer)) = duckdb(&pos_meta.replace("file://", "")) {
        println!(
            "{:<48} {:>9} {}",
            "DuckDB iceberg_scan, position deletes",
            format!("{d:.3}s"),
            answer
        );
        println!("ratio: ours/DuckDB (position deletes) {:.2}x", pos / d);
    }
    match iceberg_datafusion(&pos_meta.replace("file://", "")) {
        Some(Ok((d, answer))) => {
            println!(
                "{:<48} {:>9} {}",
                "iceberg-datafusion 0.10.1, position deletes",
                format!("{d:.3}s"),
                answer
            );
            println!(
                "ratio: ours/iceberg-datafusion (position deletes) {:.2}x",
                pos / d
            );
        }
        Some(Err(cap)) => println!(
            "{:<48} {:>9}",
            "iceberg-datafusion 0.10.1, position deletes",
            format!("> {cap}s")
        ),
        None => {}
    }
    if std::env::var_os("ICEBERG_EXEC_BENCH_PEER_EQ").is_some() {
        match iceberg_datafusion(&eq_meta.replace("file://", "")) {
            Some(Ok((d, answer))) => println!(
                "{:<48} {:>9} {}  ratio ours/peer {:.2}x",
                "iceberg-datafusion 0.10.1, position + equality",
                format!("{d:.3}s"),
                answer,
                eq / d
            ),
            Some(Err(cap)) => println!(
                "{:<48} {:>9}",
                "iceberg-datafusion 0.10.1, position + equality",
                format!("> {cap}s")
            ),
            None => {}
        }
    }
    if std::env::var_os("ICEBERG_EXEC_BENCH_DUCKDB_EQ").is_some() {
        if let Some((d, answer)) = duckdb(&eq_meta.replace("file://", "")) {
            println!(
                "{:<48} {:>9} {}",
                "DuckDB iceberg_scan, position + equality",
                format!("{d:.3}s"),
                answer
            );
            println!("ratio: ours/DuckDB (equality deletes) {:.2}x", eq / d);
        }
    }
}
