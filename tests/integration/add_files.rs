//! Bringing parquet files in from Rust: many files through rolled manifests, a bad file among
//! good ones changes nothing (and never touches the source), `register_table` of a table's
//! metadata file.

use std::sync::Arc;

use iceberg::TableIdent;
use iceberg_exec::maintenance::{self, AddFiles};
use iceberg_exec::{IcebergSession, MetadataStore};

use crate::common::{files_under, session};

async fn run(s: &IcebergSession, sql: &str) -> Vec<String> {
    let batches = s
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    crate::common::render(&batches)
}

fn store(s: &IcebergSession) -> Arc<dyn MetadataStore> {
    s.catalog().clone()
}

/// Writes `n` parquet files of two rows each under `dir`/k=<i % 3>/ through DataFusion's COPY.
async fn source(s: &IcebergSession, dir: &std::path::Path, n: usize) {
    for i in 0..n {
        run(
            s,
            &format!(
                "COPY (SELECT CAST({a} AS BIGINT) AS id, 'v{i}' AS v UNION ALL \
                 SELECT CAST({b} AS BIGINT), NULL) TO '{}/k={}/f{i}.parquet'",
                dir.display(),
                i % 3,
                a = 2 * i,
                b = 2 * i + 1
            ),
        )
        .await;
    }
}

#[tokio::test]
async fn many_files_roll_into_several_manifests_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let src = dir.path().join("src");
    source(&s, &src, 60).await;
    run(&s, "CREATE SCHEMA ns").await;
    // About 10 entries a manifest.
    run(
        &s,
        "CREATE TABLE ns.t (id bigint, v string, k int) USING iceberg PARTITIONED BY (k) \
         TBLPROPERTIES ('commit.manifest.target-size-bytes' = '10240')",
    )
    .await;
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let added = AddFiles::new(store(&s), ident.clone(), src.display().to_string())
        .execute()
        .await
        .unwrap();
    assert_eq!(added.added_files_count, 60);
    assert_eq!(added.changed_partition_count, 3);
    assert_eq!(
        run(&s, "SELECT count(*), count(v), sum(id) FROM ns.t").await,
        ["120|60|7140"]
    );
    assert_eq!(
        run(&s, "SELECT k, count(*) FROM ns.t GROUP BY k ORDER BY k").await,
        ["0|40", "1|40", "2|40"]
    );
    let manifests = run(&s, "SELECT count(*) FROM ns.t$manifests").await;
    let manifests: usize = manifests[0].parse().unwrap();
    assert!(manifests >= 6, "{manifests} manifests");
    // Pruned by the bounds read from the footers: one file holds ids 10 and 11.
    let plan = run(&s, "EXPLAIN ANALYZE SELECT v FROM ns.t WHERE id = 10")
        .await
        .join("\n");
    assert!(
        plan.contains("scanned_files=1") || plan.contains("files=1"),
        "{plan}"
    );
    assert_eq!(run(&s, "SELECT v FROM ns.t WHERE id = 10").await, ["v5"]);
}

#[tokio::test]
async fn a_bad_file_among_good_ones_adds_nothing_and_leaves_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let src = dir.path().join("src");
    source(&s, &src, 40).await;
    run(
        &s,
        &format!(
            "COPY (SELECT 'x' AS id) TO '{}/k=1/zz-bad.parquet'",
            src.display()
        ),
    )
    .await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.t (id bigint, v string, k int) USING iceberg PARTITIONED BY (k) \
         TBLPROPERTIES ('commit.manifest.target-size-bytes' = '10240')",
    )
    .await;
    let sources = files_under(&src);
    let metadata = files_under(&dir.path().join("ns/t"));
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let e = AddFiles::new(store(&s), ident, src.display().to_string())
        .execute()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("zz-bad.parquet: column 'id'"), "{e}");
    assert_eq!(files_under(&src), sources, "the source is untouched");
    assert_eq!(
        files_under(&dir.path().join("ns/t")),
        metadata,
        "no manifest is left behind"
    );
    assert_eq!(run(&s, "SELECT count(*) FROM ns.t").await, ["0"]);
}

#[tokio::test]
async fn register_table_makes_a_metadata_file_a_catalog_table() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(&s, "CREATE TABLE ns.t (id bigint) USING iceberg").await;
    run(&s, "INSERT INTO ns.t VALUES (1), (2), (3)").await;
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let location = t.metadata_location().unwrap().to_string();
    let copy = TableIdent::from_strs(["ns", "copy"]).unwrap();
    let registered = maintenance::register_table(s.catalog(), &copy, &location)
        .await
        .unwrap();
    assert_eq!(
        registered.current_snapshot_id,
        t.metadata().current_snapshot_id()
    );
    assert_eq!(
        (
            registered.total_records_count,
            registered.total_data_files_count
        ),
        (3, 1)
    );
    assert_eq!(run(&s, "SELECT sum(id) FROM ns.copy").await, ["6"]);
    let e = maintenance::register_table(s.catalog(), &copy, &location)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
}
