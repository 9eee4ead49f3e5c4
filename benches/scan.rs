//! Scan speed against the physical limit: the same parquet files read by DataFusion's own
//! `ListingTable`, in the same run. Ours / ListingTable is the cost of reading through Iceberg
//! metadata (target: within 1.1x). After criterion's groups, the same queries run with
//! iceberg-datafusion 0.10.1 (benches/peers/iceberg-datafusion, when built) and print as medians
//! with ratios.
//!
//! `cargo bench --bench scan` (rows: `ICEBERG_EXEC_BENCH_ROWS`, default 10M in 20 files).

#[path = "peers/run.rs"]
mod peers;

use criterion::{criterion_group, criterion_main, Criterion};
use datafusion::prelude::ParquetReadOptions;
use iceberg_exec::{IcebergSession, WarehouseConfig};

fn rows() -> u64 {
    std::env::var("ICEBERG_EXEC_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000)
}

fn bench_scan(c: &mut Criterion) {
    let rows = rows();
    let files = 20;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let session = rt
        .block_on(IcebergSession::open(WarehouseConfig::local(dir.path())))
        .expect("session");
    let ctx = session.context().clone();
    // DataFusion alone, same defaults, over the same files.
    let peer = datafusion::prelude::SessionContext::new();
    rt.block_on(async {
        ctx.sql("CREATE SCHEMA b").await?.collect().await?;
        ctx.sql("CREATE TABLE b.t (id BIGINT, k BIGINT, v DOUBLE, s VARCHAR)")
            .await?
            .collect()
            .await?;
        // One append per file: ids ascend across files, so a range predicate can prune.
        for f in 0..files {
            let lo = f * rows / files + 1;
            let hi = (f + 1) * rows / files;
            ctx.sql(&format!(
                "INSERT INTO b.t SELECT value, value * 7919 % 1000003, CAST(value % 1000 AS DOUBLE) / 7.0,
                        'str-' || CAST(value % 5000 AS VARCHAR) FROM generate_series({lo}, {hi})"
            ))
            .await?
            .collect()
            .await?;
        }
        peer.register_parquet(
            "peer",
            &format!("{}/b/t/data/", dir.path().canonicalize()?.display()),
            ParquetReadOptions::default(),
        )
        .await?;
        Ok::<_, datafusion::error::DataFusionError>(())
    })
    .expect("setup");

    let queries = [
        (
            "full_scan",
            "SELECT round(sum(v), 3) AS sv, max(s) AS ms, min(k) AS mk FROM {t}",
        ),
        (
            "full_scan_numeric",
            "SELECT round(sum(v), 3) AS sv, min(k) AS mk FROM {t}",
        ),
        (
            "selective",
            "SELECT count(*) AS n, round(sum(v), 3) AS sv FROM {t} WHERE id BETWEEN 2000000 AND 2100000",
        ),
    ];
    let mut peer_runs = vec![];
    let mut group = c.benchmark_group(format!("scan_{rows}_rows_{files}_files"));
    group.sample_size(10);
    for (name, sql) in queries {
        let mut answers = vec![];
        for (engine, context, table) in [
            ("iceberg_exec", &ctx, "b.t"),
            ("datafusion_listing_table", &peer, "peer"),
        ] {
            let q = sql.replace("{t}", table);
            let answer = rt
                .block_on(async { context.sql(&q).await?.collect().await })
                .expect("query");
            answers.push(
                datafusion::arrow::util::pretty::pretty_format_batches(&answer)
                    .expect("format")
                    .to_string(),
            );
            // Planning alone (catalog lookup, metadata, manifests, physical plan).
            group.bench_function(format!("{name}/plan/{engine}"), |b| {
                b.iter(|| {
                    rt.block_on(async { context.sql(&q).await?.create_physical_plan().await })
                        .expect("plan")
                })
            });
            group.bench_function(format!("{name}/{engine}"), |b| {
                b.iter(|| {
                    rt.block_on(async { context.sql(&q).await?.collect().await })
                        .expect("query")
                })
            });
        }
        assert_eq!(
            answers[0], answers[1],
            "{name}: both engines give the same answer"
        );
        peer_runs.push((name, sql));
    }
    group.finish();

    // iceberg-datafusion, side by side with our median over the same runs.
    let metadata = latest_metadata(&dir.path().join("b/t/metadata"));
    for (name, sql) in peer_runs {
        let q = sql.replace("{t}", "b.t");
        let mut ours = vec![];
        for _ in 0..5 {
            let start = std::time::Instant::now();
            rt.block_on(async { ctx.sql(&q).await?.collect().await })
                .expect("query");
            ours.push(start.elapsed().as_secs_f64());
        }
        ours.sort_by(f64::total_cmp);
        let ours = ours[ours.len() / 2];
        match peers::iceberg_datafusion(&metadata, sql, 5, 300) {
            Some(Ok((peer, answer))) => println!(
                "{name}: iceberg-exec {ours:.3}s, iceberg-datafusion 0.10.1 {peer:.3}s \
                 (answer {answer}); iceberg-datafusion / ours = {:.2}x",
                peer / ours
            ),
            Some(Err(cap)) => {
                println!("{name}: iceberg-exec {ours:.3}s, iceberg-datafusion > {cap}s")
            }
            None => {}
        }
    }
}

/// The newest metadata file in `dir`.
fn latest_metadata(dir: &std::path::Path) -> String {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .expect("metadata dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .collect();
    files.sort();
    files.last().expect("a metadata file").display().to_string()
}

criterion_group!(benches, bench_scan);
criterion_main!(benches);
