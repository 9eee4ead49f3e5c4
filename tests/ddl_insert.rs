//! DDL and INSERT through DataFusion: plain DataFusion DDL creates Iceberg tables, the
//! `STORED AS ICEBERG` extension adds partitioning, sort order and properties.

mod common;

use common::{rows, session, sql};
use iceberg::spec::Transform;
use iceberg::TableIdent;

#[tokio::test]
async fn plain_datafusion_ddl_creates_iceberg_tables() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.t (id BIGINT NOT NULL, name VARCHAR)")
        .await
        .unwrap();
    let counts = rows(&s, "INSERT INTO ns.t VALUES (2, 'b'), (1, 'a'), (3, NULL)").await;
    assert_eq!(counts, ["3"]);
    assert_eq!(
        rows(&s, "SELECT id, name FROM ns.t ORDER BY id").await,
        ["1|a", "2|b", "3|"]
    );

    // CREATE TABLE AS SELECT copies rows and types.
    sql(
        &s,
        "CREATE TABLE ns.t2 AS SELECT id * 10 AS id10, name FROM ns.t WHERE id > 1",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&s, "SELECT id10, name FROM ns.t2 ORDER BY id10").await,
        ["20|b", "30|"]
    );

    // The catalog holds Iceberg tables with the right schema.
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let schema = t.metadata().current_schema();
    let id = schema.field_by_name("id").unwrap();
    assert!(id.required);
    assert_eq!(id.field_type.to_string(), "long");
    let summary = t.metadata().current_snapshot().unwrap().summary();
    assert_eq!(summary.additional_properties["total-records"], "3");
    assert_eq!(summary.additional_properties["added-data-files"], "1");

    let listed = rows(
        &s,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ns' ORDER BY 1",
    )
    .await;
    assert_eq!(listed, ["t", "t2"]);

    sql(&s, "DROP TABLE ns.t2").await.unwrap();
    let err = sql(&s, "SELECT * FROM ns.t2")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("t2"), "{err}");
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["3"]);
}

#[tokio::test]
async fn null_into_required_column_is_rejected_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.t (id BIGINT NOT NULL, name VARCHAR)")
        .await
        .unwrap();
    sql(&s, "INSERT INTO ns.t VALUES (1, 'a')").await.unwrap();
    let before = common::current_snapshot(&s, "ns", "t").await;
    let data_dir = dir.path().join("ns/t/data");
    let files_before = common::files_under(&data_dir);
    let err = sql(&s, "INSERT INTO ns.t SELECT CASE WHEN value = 2 THEN NULL ELSE value END, 'x' FROM generate_series(2, 3)")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("column 'id' is required (NOT NULL)"),
        "{err}"
    );
    assert_eq!(common::current_snapshot(&s, "ns", "t").await, before);
    assert_eq!(
        common::files_under(&data_dir),
        files_before,
        "no file left behind"
    );
    assert_eq!(rows(&s, "SELECT id, name FROM ns.t").await, ["1|a"]);
}

#[tokio::test]
async fn stored_as_iceberg_with_partitions_sort_order_and_properties() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.events (id BIGINT NOT NULL, ts TIMESTAMP, region VARCHAR, amount DOUBLE)
         STORED AS ICEBERG LOCATION ''
         PARTITIONED BY (region)
         OPTIONS ('partitioning' 'day(ts), bucket(4, id)', 'sort-order' 'amount DESC NULLS LAST',
                  'write.delete.mode' 'merge-on-read')",
    )
    .await
    .unwrap();
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "events"]).unwrap())
        .await
        .unwrap();
    let md = t.metadata();
    let transforms: Vec<(String, Transform)> = md
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| (f.name.clone(), f.transform))
        .collect();
    assert_eq!(
        transforms,
        [
            ("region".to_string(), Transform::Identity),
            ("ts_day".to_string(), Transform::Day),
            ("id_bucket".to_string(), Transform::Bucket(4)),
        ]
    );
    assert_eq!(md.default_sort_order().fields.len(), 1);
    assert_eq!(md.properties()["write.delete.mode"], "merge-on-read");

    sql(
        &s,
        "INSERT INTO ns.events VALUES
           (1, TIMESTAMP '2025-01-01 10:00:00', 'eu', 5.0),
           (2, TIMESTAMP '2025-01-01 11:00:00', 'eu', 7.5),
           (3, TIMESTAMP '2025-01-02 09:00:00', 'us', NULL),
           (4, NULL, 'us', 1.0),
           (5, TIMESTAMP '2025-01-02 09:30:00', NULL, 2.0)",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&s, "SELECT id, region, amount FROM ns.events ORDER BY id").await,
        ["1|eu|5.0", "2|eu|7.5", "3|us|", "4|us|1.0", "5||2.0"]
    );
    // One file per (region, day, bucket) combination, in partition directories.
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "events"]).unwrap())
        .await
        .unwrap();
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::scan::plan_files(&t, &snapshot).await.unwrap();
    assert!(files.len() >= 4, "{files:?}");
    assert!(
        files
            .iter()
            .any(|f| f.path.contains("region=eu/ts_day=2025-01-01")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|f| f.path.contains("region=null")),
        "{files:?}"
    );
    assert_eq!(files.iter().map(|f| f.record_count).sum::<u64>(), 5);
}

#[tokio::test]
async fn unknown_objects_and_bad_sql_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    let e = sql(&s, "SELECT * FROM ns.missing")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing") && e.contains("not found"), "{e}");
    let e = sql(&s, "SELECT * FROM nope.t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    let e = sql(&s, "CREATE TABLE nope.t (a INT)")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    let e = sql(&s, "SELEC 1").await.unwrap_err().to_string();
    assert!(e.to_lowercase().contains("sql"), "{e}");
    let e = sql(&s, "CREATE EXTERNAL TABLE ns.x (a INT) STORED AS ICEBERG LOCATION '' OPTIONS ('partitioning' 'frob(a)')")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown transform"), "{e}");
    let e = sql(
        &s,
        "CREATE EXTERNAL TABLE ns.x (a INT) STORED AS ICEBERG LOCATION '' OPTIONS ('colour' 'red')",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown Iceberg table option 'colour'"), "{e}");
    // None of the failed statements created anything.
    assert!(rows(
        &s,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ns'"
    )
    .await
    .is_empty());
}
