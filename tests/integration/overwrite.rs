//! `INSERT OVERWRITE` and overwrite by filter: the Rust API, serializable validation against
//! concurrent commits (nothing lost, nothing left behind), the delete files an overwrite takes
//! along, and bounded memory.

use std::sync::Arc;

use datafusion::logical_expr::{col, lit};
use datafusion::physical_plan::{collect, ExecutionPlan};
use iceberg::TableIdent;
use iceberg_exec::IcebergSession;

use crate::common::{files_under, rows, session, session_with_limit};

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

async fn location(s: &IcebergSession) -> String {
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    t.metadata_location().unwrap().to_string()
}

/// Data files under the table's directory.
fn data_files(dir: &std::path::Path) -> usize {
    files_under(dir)
        .iter()
        .filter(|f| f.contains("/data/") && f.ends_with(".parquet"))
        .count()
}

/// A table `ns.t (id, k, v)` partitioned by `k`, one file per partition: a (1, 2), b (3), c (4).
async fn partitioned(s: &IcebergSession) {
    run(s, "CREATE SCHEMA ns").await;
    run(
        s,
        "CREATE TABLE ns.t (id BIGINT NOT NULL, k STRING, v INT) USING iceberg PARTITIONED BY (k)",
    )
    .await;
    run(
        s,
        "INSERT INTO ns.t VALUES (1, 'a', 10), (2, 'a', 20), (3, 'b', 30), (4, 'c', 40)",
    )
    .await;
}

#[tokio::test]
async fn overwrite_by_filter_from_rust_replaces_the_rows_it_selects() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    partitioned(&s).await;
    // A filter on a partition column and a data column: the files of b go whole, the file
    // of a is rewritten without id 2.
    let data = s
        .context()
        .sql("SELECT 5, 'b', 50 UNION ALL SELECT 6, 'a', 60")
        .await
        .unwrap();
    let filter = col("k")
        .eq(lit("b"))
        .or(col("v").gt_eq(lit(20)).and(col("k").eq(lit("a"))));
    let written = s.overwrite("ns.t", data, Some(filter)).await.unwrap();
    assert_eq!(
        crate::common::render(&written.collect().await.unwrap()),
        ["2"]
    );
    assert_eq!(
        rows(&s, "SELECT id, k, v FROM ns.t ORDER BY id").await,
        ["1|a|10", "4|c|40", "5|b|50", "6|a|60"]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT operation, summary LIKE '%\"deleted-data-files\":\"2\"%' \
             FROM iceberg_snapshots('ns.t') WHERE is_current"
        )
        .await,
        ["overwrite|true"]
    );

    // A row outside the filter: refused, nothing changed, the files it wrote removed.
    let before = (location(&s).await, data_files(dir.path()));
    let data = s
        .context()
        .sql("SELECT 7, 'c', 70 UNION ALL SELECT 8, 'd', 80")
        .await
        .unwrap();
    let e = s
        .overwrite("ns.t", data, Some(col("k").eq(lit("c"))))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not match the overwrite filter"), "{e}");
    assert_eq!((location(&s).await, data_files(dir.path())), before);

    // Without a filter: every row, whatever the session's mode.
    run(&s, "SET iceberg.overwrite_mode = 'dynamic'").await;
    let data = s.context().sql("SELECT 9, 'z', 90").await.unwrap();
    s.overwrite("ns.t", data, None)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows(&s, "SELECT id, k, v FROM ns.t").await, ["9|z|90"]);

    // Columns by position, cast to the table's types; a wrong count is refused.
    let data = s.context().sql("SELECT 10, 'z', '100'").await.unwrap();
    s.dynamic_overwrite("ns.t", data)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows(&s, "SELECT id, k, v FROM ns.t").await, ["10|z|100"]);
    let data = s.context().sql("SELECT 11, 'z'").await.unwrap();
    let e = s
        .overwrite("ns.t", data, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("the data has 2 columns, the table 3"), "{e}");
}

#[tokio::test]
async fn explain_shows_the_overwrite_and_what_it_removes() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    partitioned(&s).await;
    let plan = run(
        &s,
        "EXPLAIN INSERT OVERWRITE ns.t PARTITION (k = 'a') VALUES (9, 90)",
    )
    .await
    .join("\n");
    assert!(
        plan.contains("OverwriteExec: table=ns.t, mode=static, removed_whole=1, checked=0")
            && plan.contains("DataFileWriterExec")
            && plan.contains("iceberg_require"),
        "{plan}"
    );
    run(&s, "SET iceberg.overwrite_mode = 'dynamic'").await;
    let plan = run(&s, "EXPLAIN INSERT OVERWRITE ns.t VALUES (9, 'a', 90)")
        .await
        .join("\n");
    assert!(
        plan.contains("OverwriteExec: table=ns.t, mode=dynamic"),
        "{plan}"
    );
    // Explained, not run.
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["4"]);
}

/// Plans `statement` in `s`, lets `concurrent` commit from a second session, then runs the
/// statement: its error, if it failed.
async fn race(
    dir: &std::path::Path,
    s: &IcebergSession,
    statement: &str,
    concurrent: &str,
) -> Option<datafusion::error::DataFusionError> {
    let planned = s.sql(statement).await.unwrap();
    let plan = planned.create_physical_plan().await.unwrap();
    let other = session(dir).await;
    run(&other, concurrent).await;
    collect(plan, s.context().task_ctx()).await.err()
}

#[tokio::test]
async fn a_concurrent_append_into_a_replaced_partition_fails_the_overwrite() {
    for (mode, statement) in [
        (
            "static",
            "INSERT OVERWRITE ns.t PARTITION (k = 'a') VALUES (9, 90)",
        ),
        ("dynamic", "INSERT OVERWRITE ns.t VALUES (9, 'a', 90)"),
        (
            "static",
            "INSERT INTO ns.t REPLACE WHERE v >= 20 AND k = 'a' VALUES (9, 'a', 90)",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        partitioned(&s).await;
        run(&s, &format!("SET iceberg.overwrite_mode = '{mode}'")).await;
        let files = data_files(dir.path());
        let e = race(
            dir.path(),
            &s,
            statement,
            "INSERT INTO ns.t VALUES (5, 'a', 50)",
        )
        .await
        .unwrap_or_else(|| panic!("{statement}: committed over a concurrent append"));
        assert!(iceberg_exec::commit::is_concurrent_change(&e), "{e}");
        assert!(e.to_string().contains("commit conflict"), "{e}");
        // Nothing lost: the table is what the concurrent append made it; the files the
        // overwrite wrote are gone.
        assert_eq!(
            rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
            ["1", "2", "3", "4", "5"],
            "{statement}"
        );
        assert_eq!(data_files(dir.path()), files + 1, "{statement}");
    }
}

#[tokio::test]
async fn concurrent_commits_elsewhere_do_not_stop_an_overwrite() {
    for (mode, statement, expected) in [
        (
            "static",
            "INSERT OVERWRITE ns.t PARTITION (k = 'a') VALUES (9, 90)",
            ["3", "4", "5", "9"],
        ),
        (
            "dynamic",
            "INSERT OVERWRITE ns.t VALUES (9, 'a', 90)",
            ["3", "4", "5", "9"],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        partitioned(&s).await;
        run(&s, &format!("SET iceberg.overwrite_mode = '{mode}'")).await;
        // An append into another partition, and a delete there.
        let other = session(dir.path()).await;
        let planned = s.sql(statement).await.unwrap();
        let plan = planned.create_physical_plan().await.unwrap();
        run(&other, "INSERT INTO ns.t VALUES (5, 'c', 50)").await;
        run(&other, "DELETE FROM ns.t WHERE id = 4").await;
        run(&other, "INSERT INTO ns.t VALUES (4, 'c', 40)").await;
        let answer = crate::common::render(&collect(plan, s.context().task_ctx()).await.unwrap());
        assert_eq!(answer, ["1"]);
        assert_eq!(
            rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
            expected,
            "{statement}"
        );
    }
}

#[tokio::test]
async fn a_concurrent_delete_of_a_replaced_file_fails_the_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    partitioned(&s).await;
    let e = race(
        dir.path(),
        &s,
        "INSERT OVERWRITE ns.t SELECT id + 10, k, v FROM ns.t",
        "DELETE FROM ns.t WHERE id = 1",
    )
    .await
    .expect("committed over a concurrent delete");
    assert!(iceberg_exec::commit::is_concurrent_change(&e), "{e}");
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
        ["2", "3", "4"]
    );
}

#[tokio::test]
async fn an_overwrite_takes_the_delete_files_of_what_it_replaces_along() {
    for mode in ["static", "dynamic"] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        run(&s, "CREATE SCHEMA ns").await;
        run(
            &s,
            "CREATE TABLE ns.t (id BIGINT NOT NULL, k STRING, v INT) USING iceberg \
             PARTITIONED BY (k) TBLPROPERTIES ('write.delete.mode' = 'merge-on-read', \
             'format-version' = '2')",
        )
        .await;
        run(
            &s,
            "INSERT INTO ns.t VALUES (1, 'a', 10), (2, 'a', 20), (3, 'b', 30), (4, 'b', 40)",
        )
        .await;
        run(&s, "DELETE FROM ns.t WHERE id IN (1, 3)").await;
        let totals = "SELECT summary LIKE '%\"total-delete-files\":\"2\"%' \
                      FROM iceberg_snapshots('ns.t') WHERE is_current";
        assert_eq!(rows(&s, totals).await, ["true"]);
        run(&s, &format!("SET iceberg.overwrite_mode = '{mode}'")).await;
        let statement = match mode {
            "static" => "INSERT OVERWRITE ns.t PARTITION (k = 'a') VALUES (5, 50)",
            _ => "INSERT OVERWRITE ns.t VALUES (5, 'a', 50)",
        };
        run(&s, statement).await;
        assert_eq!(
            rows(&s, "SELECT id, k FROM ns.t ORDER BY id").await,
            ["4|b", "5|a"]
        );
        let current = "SELECT summary LIKE '%\"total-delete-files\":\"1\"%', \
                       summary LIKE '%\"removed-delete-files\":\"1\"%' \
                       FROM iceberg_snapshots('ns.t') WHERE is_current";
        assert_eq!(rows(&s, current).await, ["true|true"], "{mode}");
    }
}

fn spills(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let own = match plan.name() {
        "SortExec" => plan
            .metrics()
            .and_then(|m| m.spill_count())
            .unwrap_or_default(),
        _ => 0,
    };
    own + plan.children().into_iter().map(spills).sum::<usize>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sorted_overwrite_spills_under_a_small_pool_and_frees_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 8 << 20).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, k BIGINT, payload VARCHAR)
         STORED AS ICEBERG LOCATION '' WITH ORDER (k DESC NULLS LAST)",
    )
    .await;
    run(
        &s,
        "INSERT INTO ns.t SELECT value, value % 7, 'old' FROM generate_series(1, 1000)",
    )
    .await;
    const N: i64 = 400_000;
    // Replaces the rows with k < 3 (a file that matches in part: rewritten) by N new rows.
    let statement = format!(
        "INSERT INTO ns.t REPLACE WHERE k < 3 SELECT value + 1000, value * 7919 % 3, \
         'payload-' || CAST(value AS VARCHAR) FROM generate_series(1, {N})"
    );
    let plan = s
        .sql(&statement)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let answer = collect(Arc::clone(&plan), s.context().task_ctx())
        .await
        .unwrap();
    assert_eq!(crate::common::render(&answer), [N.to_string()]);
    assert!(
        spills(&plan) > 0,
        "expected the sort below the writer to spill"
    );
    drop(plan);
    assert_eq!(s.memory_pool().reserved(), 0);
    // The oracle: the old rows with k >= 3 stay, the new ones all have k < 3.
    let kept: i64 = (1..=1000).filter(|v| v % 7 >= 3).count() as i64;
    let kept_sum: i64 = (1..=1000).filter(|v| v % 7 >= 3).sum();
    let new_sum: i64 = (1..=N).map(|v| v + 1000).sum();
    assert_eq!(
        rows(
            &s,
            "SELECT count(*), sum(id), sum(CASE WHEN k < 3 THEN 1 ELSE 0 END) FROM ns.t"
        )
        .await,
        [format!("{}|{}|{N}", kept + N, kept_sum + new_sum)]
    );
}

#[tokio::test]
async fn a_dynamic_overwrite_written_unpartitioned_replaces_files_of_every_spec() {
    // As Java's ReplacePartitions: rows written for an unpartitioned spec replace the table,
    // the files of older, partitioned specs too.
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    partitioned(&s).await;
    run(&s, "ALTER TABLE ns.t DROP PARTITION FIELD k").await;
    run(&s, "INSERT INTO ns.t VALUES (5, 'e', 50)").await;
    run(&s, "SET iceberg.overwrite_mode = 'dynamic'").await;
    run(&s, "INSERT OVERWRITE ns.t VALUES (9, 'z', 90)").await;
    assert_eq!(rows(&s, "SELECT id, k FROM ns.t").await, ["9|z"]);
}

#[tokio::test]
async fn a_concurrent_delete_for_a_file_the_overwrite_removes_whole_fails_it() {
    // Serializable: a position delete committed meanwhile for a file the overwrite removes
    // unread would stay behind, pointing at a file the table no longer has.
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    partitioned(&s).await;
    run(&s, "SET iceberg.delete_mode = 'merge-on-read'").await;
    let other = session(dir.path()).await;
    run(&other, "SET iceberg.delete_mode = 'merge-on-read'").await;
    let planned = s
        .sql("INSERT OVERWRITE ns.t PARTITION (k = 'a') VALUES (9, 90)")
        .await
        .unwrap();
    let plan = planned.create_physical_plan().await.unwrap();
    run(&other, "DELETE FROM ns.t WHERE id = 1").await;
    let e = collect(plan, s.context().task_ctx()).await.unwrap_err();
    assert!(iceberg_exec::commit::is_concurrent_change(&e), "{e}");
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
        ["2", "3", "4"]
    );
}
