//! The Spark-written tables in ../shared/fixtures, read by path with their recorded relative
//! locations mapped explicitly. Expected answers come from the fixtures' README.

mod common;

use std::path::PathBuf;

use common::{rows, session, sql};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/duckdb-iceberg")
        .canonicalize()
        .expect("../shared/fixtures/duckdb-iceberg")
}

fn lineitem_scan(extra: &str) -> String {
    let base = fixtures().join("data/persistent/iceberg");
    format!(
        "iceberg_scan('{}', 'base_dir', '{}'{extra})",
        base.join("lineitem_iceberg").display(),
        base.display()
    )
}

#[tokio::test]
async fn lineitem_before_and_after_copy_on_write_delete() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    // The directory opens at version-hint.text (v2: after the delete).
    assert_eq!(
        rows(&s, &format!("SELECT count(*) FROM {}", lineitem_scan(""))).await,
        ["51793"]
    );
    // v1 metadata: before the delete.
    let base = fixtures().join("data/persistent/iceberg");
    let v1 = format!(
        "SELECT count(*) FROM iceberg_scan('{}', 'base_dir', '{}')",
        base.join("lineitem_iceberg/metadata/v1.metadata.json")
            .display(),
        base.display()
    );
    assert_eq!(rows(&s, &v1).await, ["60175"]);
    // Time travel on v2 to the first snapshot.
    assert_eq!(
        rows(
            &s,
            &format!(
                "SELECT count(*) FROM {}",
                lineitem_scan(", 'snapshot_id', 7817332053627255703")
            )
        )
        .await,
        ["60175"]
    );
    // TPC-H Q6 on v2.
    let q6 = format!(
        "SELECT sum(l_extendedprice * l_discount) AS revenue FROM {}
         WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
           AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
        lineitem_scan("")
    );
    assert_eq!(rows(&s, &q6).await, ["1077536.9101"]);
}

#[tokio::test]
async fn without_the_location_mapping_the_error_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let q = format!(
        "SELECT count(*) FROM iceberg_scan('{}')",
        fixtures()
            .join("data/persistent/iceberg/lineitem_iceberg")
            .display()
    );
    let e = sql(&s, &q).await.unwrap_err().to_string();
    assert!(e.contains("lineitem_iceberg/metadata/snap-"), "{e}");
}

#[tokio::test]
async fn tables_with_delete_files_are_refused_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let root = fixtures();
    for table in [
        "data/persistent/equality_deletes/warehouse/mydb/mytable",
        "data/persistent/equality_deletes/warehouse/mydb/mytable_partitioned",
        "data/persistent/equality_delete_cross_partition/warehouse/ns/t/metadata/vfinal.metadata.json",
        "data/persistent/equality_delete_extra_column/warehouse/ns/t/metadata/vfinal.metadata.json",
    ] {
        let q = format!(
            "SELECT * FROM iceberg_scan('{}', 'base_dir', '{}')",
            root.join(table).display(),
            root.display()
        );
        let e = sql(&s, &q).await.unwrap_err().to_string();
        assert!(e.contains("has delete files"), "{table}: {e}");
    }
}

#[tokio::test]
async fn delete_files_are_refused_only_where_they_apply() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let root = fixtures();
    let table = root.join("data/persistent/equality_deletes/warehouse/mydb/mytable");
    let scan = |extra: &str| {
        format!(
            "iceberg_scan('{}', 'base_dir', '{}'{extra})",
            table.display(),
            root.display()
        )
    };
    // Before the first equality delete (sequence 1): all four rows.
    assert_eq!(
        rows(
            &s,
            &format!(
                "SELECT id, name FROM {} ORDER BY id",
                scan(", 'snapshot_id', 853766660775201079")
            )
        )
        .await,
        ["1|a", "2|b", "3|c", "4|d"]
    );
    // Sequence 5: the deletes of sequences 2..4 apply to the first file only. Pruned to the
    // second file (ids 5 and 6, data sequence 5), nothing applies and the rows are exact.
    let at5 = scan(", 'snapshot_id', 3340507003387467420");
    assert_eq!(
        rows(
            &s,
            &format!("SELECT id, name, bir FROM {at5} WHERE id >= 5 ORDER BY id")
        )
        .await,
        ["5|e|2025-01-05", "6|f|2025-01-06"]
    );
    let e = sql(&s, &format!("SELECT * FROM {at5}"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("delete files that apply to"), "{e}");
    // Latest: the delete of name = 'f' (sequence 6) applies to the second file as well.
    let e = sql(&s, &format!("SELECT * FROM {} WHERE id >= 5", scan("")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("delete files that apply to"), "{e}");
}
