//! Write throughput: INSERT into Iceberg tables (unpartitioned, bucket-partitioned, sorted),
//! side by side with the physical limit — DataFusion writing the same rows as plain parquet with
//! `COPY ... TO` — in the same run. Compare the medians: ours / COPY is the overhead of Iceberg
//! (metrics, manifests, commit) plus partitioning or sorting.
//!
//! `cargo bench --bench write` (release build).

use criterion::{criterion_group, criterion_main, Criterion};
use iceberg_exec::{IcebergSession, WarehouseConfig};

const ROWS: u64 = 1_000_000;

fn source() -> String {
    format!(
        "SELECT value AS id, value * 7919 % 1000003 AS k, 'name-' || CAST(value % 1000 AS VARCHAR) AS name,
                CAST(value % 97 AS DOUBLE) / 3.0 AS score
         FROM generate_series(1, {ROWS})"
    )
}

fn bench_write(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let session = rt
        .block_on(IcebergSession::open(WarehouseConfig::local(dir.path())))
        .expect("session");
    let ctx = session.context().clone();
    rt.block_on(async {
        for ddl in [
            "CREATE SCHEMA b",
            "CREATE TABLE b.plain (id BIGINT, k BIGINT, name VARCHAR, score DOUBLE)",
            "CREATE EXTERNAL TABLE b.bucketed (id BIGINT, k BIGINT, name VARCHAR, score DOUBLE)
               STORED AS ICEBERG LOCATION '' OPTIONS ('partitioning' 'bucket(8, id)')",
            "CREATE EXTERNAL TABLE b.sorted (id BIGINT, k BIGINT, name VARCHAR, score DOUBLE)
               STORED AS ICEBERG LOCATION '' WITH ORDER (k ASC)",
        ] {
            ctx.sql(ddl).await?.collect().await?;
        }
        Ok::<_, datafusion::error::DataFusionError>(())
    })
    .expect("setup");

    let mut group = c.benchmark_group(format!("write_{ROWS}_rows"));
    group.sample_size(10);
    let copy_dir = dir.path().join("copy");
    let mut n = 0;
    group.bench_function("datafusion_copy_parquet (limit)", |b| {
        b.iter(|| {
            n += 1;
            let sql = format!(
                "COPY ({}) TO '{}/{n}.parquet' STORED AS PARQUET OPTIONS ('format.compression' 'zstd(3)')",
                source(),
                copy_dir.display()
            );
            rt.block_on(async { ctx.sql(&sql).await?.collect().await })
                .expect("copy")
        })
    });
    for table in ["plain", "bucketed", "sorted"] {
        group.bench_function(format!("iceberg_exec_insert_{table}"), |b| {
            let sql = format!("INSERT INTO b.{table} {}", source());
            b.iter(|| {
                rt.block_on(async { ctx.sql(&sql).await?.collect().await })
                    .expect("insert")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_write);
criterion_main!(benches);
