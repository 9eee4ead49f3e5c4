//! The same catalog layout on PostgreSQL: only the URI changes.
//!
//! Runs against the server named by `ICEBERG_EXEC_PG_URI` (e.g.
//! `postgresql://iceberg:iceberg@localhost:5432/iceberg_catalog`); `.ci/run` installs and starts
//! one. Without the variable the test reports that it did not run.

use crate::common::{render, sql};
use iceberg_exec::{IcebergSession, WarehouseConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_catalog_round_trip_and_concurrent_commits() {
    let Ok(uri) = std::env::var("ICEBERG_EXEC_PG_URI") else {
        eprintln!("ICEBERG_EXEC_PG_URI is not set: the PostgreSQL catalog test did not run");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A catalog name of its own per run, so runs against one server do not meet.
    let name = format!("t{}", uuid::Uuid::new_v4().simple());
    let config = WarehouseConfig {
        warehouse: dir.path().display().to_string(),
        catalog_uri: Some(uri.clone()),
        catalog_name: name.clone(),
        memory_limit: None,
        properties: Default::default(),
    };
    let s = IcebergSession::open(config.clone()).await.unwrap();
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT, day DATE) STORED AS ICEBERG LOCATION ''
         OPTIONS ('partitioning' 'month(day)', 'commit.retry.min-wait-ms' '5', 'commit.retry.num-retries' '30')",
    )
    .await
    .unwrap();
    let mut tasks = vec![];
    for w in 0..3 {
        let s = IcebergSession::open(config.clone()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            for r in 0..3 {
                sql(
                    &s,
                    &format!(
                        "INSERT INTO ns.t VALUES ({}, DATE '2025-0{}-01')",
                        w * 10 + r,
                        r + 1
                    ),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let got = render(&sql(&s, "SELECT count(*), sum(id) FROM ns.t").await.unwrap());
    assert_eq!(got, ["9|99"]);
    let tables = render(
        &sql(
            &s,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ns'",
        )
        .await
        .unwrap(),
    );
    assert_eq!(tables, ["t"]);
    sql(&s, "DROP TABLE ns.t").await.unwrap();
    sql(&s, "DROP SCHEMA ns").await.unwrap();
}
