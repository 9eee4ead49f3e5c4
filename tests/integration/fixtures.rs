//! The Spark-written tables vendored in tests/data (see its README), read by path with their recorded relative
//! locations mapped explicitly. Expected answers come from the fixtures' README.

use std::path::PathBuf;

use crate::common::{rows, session, sql};

fn fixtures() -> PathBuf {
    crate::common::venv::repo()
        .join("tests/data/duckdb-iceberg")
        .canonicalize()
        .expect("tests/data/duckdb-iceberg")
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

fn scan_of(table: &str, extra: &str) -> String {
    let root = fixtures();
    format!(
        "iceberg_scan('{}', 'base_dir', '{}'{extra})",
        root.join("data/persistent").join(table).display(),
        root.display()
    )
}

#[tokio::test]
async fn equality_deletes_unpartitioned() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let t = scan_of("equality_deletes/warehouse/mydb/mytable", "");
    assert_eq!(
        rows(&s, &format!("SELECT * FROM {t} ORDER BY 1")).await,
        ["4|d|2025-01-04", "5|e|2025-01-05"]
    );
    assert_eq!(rows(&s, &format!("SELECT count(*) FROM {t}")).await, ["2"]);
    assert_eq!(
        rows(&s, &format!("SELECT bir FROM {t} WHERE id = 4")).await,
        ["2025-01-04"]
    );
    assert_eq!(
        rows(
            &s,
            &format!("SELECT count(*) FROM {t} WHERE bir >= DATE '2025-01-01'")
        )
        .await,
        ["2"]
    );
    // EXPLAIN shows the join and the delete files it reads.
    let plan = rows(&s, &format!("EXPLAIN SELECT name FROM {t}"))
        .await
        .join("\n");
    assert!(plan.contains("EqualityDeleteExec"), "{plan}");
    assert!(plan.contains("delete_files=4"), "{plan}");
    // EXPLAIN ANALYZE counts the rows each join removed: b (name), 1 (id), (3, c) (id, name).
    let analyzed = rows(&s, &format!("EXPLAIN ANALYZE SELECT name FROM {t}"))
        .await
        .join("\n");
    let removed: usize = analyzed
        .match_indices("equality_deleted_rows=")
        .map(|(i, m)| {
            analyzed[i + m.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    // Four rows 1..4 and two appended ones (5, 6): b, 1, (3, c) and f removed.
    assert_eq!(removed, 4, "{analyzed}");
}

#[tokio::test]
async fn equality_deletes_partitioned() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let t = scan_of("equality_deletes/warehouse/mydb/mytable_partitioned", "");
    assert_eq!(
        rows(&s, &format!("SELECT name FROM {t} ORDER BY 1")).await,
        ["a", "d", "e"]
    );
    assert_eq!(rows(&s, &format!("SELECT count(*) FROM {t}")).await, ["3"]);
}

#[tokio::test]
async fn equality_delete_stays_in_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let t = scan_of(
        "equality_delete_cross_partition/warehouse/ns/t/metadata/vfinal.metadata.json",
        "",
    );
    assert_eq!(
        rows(
            &s,
            &format!("SELECT part, key, val FROM {t} ORDER BY part, key")
        )
        .await,
        ["0|999|p0-k999", "1|100|p1-k100", "1|888|p1-k888"]
    );
}

#[tokio::test]
async fn equality_delete_file_with_an_extra_column() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let t = scan_of(
        "equality_delete_extra_column/warehouse/ns/t/metadata/vfinal.metadata.json",
        "",
    );
    assert_eq!(
        rows(&s, &format!("SELECT id, val FROM {t} ORDER BY id")).await,
        ["1|a", "3|c"]
    );
    assert_eq!(rows(&s, &format!("SELECT count(*) FROM {t}")).await, ["2"]);
}

#[tokio::test]
async fn deletes_apply_by_sequence_number_at_every_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let t = |extra: &str| scan_of("equality_deletes/warehouse/mydb/mytable", extra);
    // Before the first equality delete (sequence 1): all four rows.
    assert_eq!(
        rows(
            &s,
            &format!(
                "SELECT id, name FROM {} ORDER BY id",
                t(", 'snapshot_id', 853766660775201079")
            )
        )
        .await,
        ["1|a", "2|b", "3|c", "4|d"]
    );
    // Sequence 5: the deletes of sequences 2..4 removed b, 1 and (3, c); the rows appended at
    // sequence 5 are older than no delete yet.
    let at5 = t(", 'snapshot_id', 3340507003387467420");
    assert_eq!(
        rows(&s, &format!("SELECT id, name FROM {at5} ORDER BY id")).await,
        ["4|d", "5|e", "6|f"]
    );
    // Pruned to the second file, the filter and the deletes compose.
    assert_eq!(
        rows(
            &s,
            &format!(
                "SELECT id, name, bir FROM {} WHERE id >= 5 ORDER BY id",
                t("")
            )
        )
        .await,
        ["5|e|2025-01-05"]
    );
}

/// Partitions of a scan with equality deletes run one after the other: each must apply every
/// delete, also when the first has already finished with the shared delete table (the second
/// then builds it again, from a delete scan that has been run once).
#[tokio::test]
async fn equality_deletes_apply_in_partitions_run_one_after_another() {
    use datafusion::physical_plan::ExecutionPlanProperties;
    use futures::TryStreamExt;
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "SET datafusion.execution.target_partitions = 2")
        .await
        .unwrap();
    let query = format!(
        "SELECT id FROM iceberg_scan('{}', 'base_dir', '{}')",
        fixtures()
            .join("data/persistent/equality_deletes/warehouse/mydb/mytable")
            .display(),
        fixtures().display()
    );
    let plan = s
        .context()
        .sql(&query)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let partitions = plan.output_partitioning().partition_count();
    assert!(
        partitions > 1,
        "the fixture's two data files in one partition"
    );
    let mut ids = vec![];
    for p in 0..partitions {
        let stream = plan.execute(p, s.context().task_ctx()).unwrap();
        let batches: Vec<_> = stream.try_collect().await.unwrap();
        for b in &batches {
            let col = b.column(0);
            let col = col
                .as_any()
                .downcast_ref::<arrow::array::Int32Array>()
                .map(|a| a.values().iter().map(|v| *v as i64).collect::<Vec<_>>())
                .or_else(|| {
                    col.as_any()
                        .downcast_ref::<arrow::array::Int64Array>()
                        .map(|a| a.values().to_vec())
                })
                .expect("integer ids");
            ids.extend(col);
        }
    }
    ids.sort();
    assert_eq!(ids, vec![4, 5]);
}
