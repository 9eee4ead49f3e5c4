//! Time travel on tables we write: by snapshot id, by timestamp, with the snapshot's schema.

mod common;

use common::{rows, session, sql};

#[tokio::test]
async fn read_each_snapshot_by_id_and_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.t (id BIGINT)").await.unwrap();
    for batch in ["(1), (2)", "(3)", "(4), (5), (6)"] {
        sql(&s, &format!("INSERT INTO ns.t VALUES {batch}"))
            .await
            .unwrap();
        // Distinct commit timestamps, so reading "as of" a commit time is unambiguous.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let snaps = rows(
        &s,
        "SELECT snapshot_id, CAST(committed_at AS BIGINT) FROM iceberg_snapshots('ns.t') ORDER BY sequence_number",
    )
    .await;
    assert_eq!(snaps.len(), 3);
    let expected_counts = ["2", "3", "6"];
    for (snap, want) in snaps.iter().zip(expected_counts) {
        let (id, ms) = snap.split_once('|').unwrap();
        let by_id =
            format!("SELECT count(*), sum(id) FROM iceberg_scan('ns.t', 'snapshot_id', {id})");
        let got = rows(&s, &by_id).await;
        assert_eq!(got[0].split('|').next().unwrap(), want, "{by_id}");
        let by_time = format!("SELECT count(*) FROM iceberg_scan('ns.t', 'as_of', {ms})");
        assert_eq!(rows(&s, &by_time).await, [want], "{by_time}");
    }
    // A provider pinned to a past snapshot refuses writes.
    let (first, _) = snaps[0].split_once('|').unwrap();
    let ident = iceberg::TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let store: std::sync::Arc<dyn iceberg_exec::MetadataStore> = s.catalog().clone();
    let pinned = iceberg_exec::IcebergTableProvider::try_new(table, Some(store))
        .unwrap()
        .with_snapshot_id(first.parse().unwrap())
        .unwrap();
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_table("pinned", std::sync::Arc::new(pinned))
        .unwrap();
    assert_eq!(
        common::render(
            &ctx.sql("SELECT count(*) FROM pinned")
                .await
                .unwrap()
                .collect()
                .await
                .unwrap()
        ),
        ["2"]
    );
    let e = ctx
        .sql("INSERT INTO pinned VALUES (9)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("read-only"), "{e}");
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["6"]);
}
