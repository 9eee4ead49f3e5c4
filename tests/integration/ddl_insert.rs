//! DDL and INSERT through DataFusion: plain DataFusion DDL creates Iceberg tables, the
//! `STORED AS ICEBERG` extension adds partitioning, sort order and properties.

use crate::common::{rows, session, sql};
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
    let before = crate::common::current_snapshot(&s, "ns", "t").await;
    let data_dir = dir.path().join("ns/t/data");
    let files_before = crate::common::files_under(&data_dir);
    let err = sql(&s, "INSERT INTO ns.t SELECT CASE WHEN value = 2 THEN NULL ELSE value END, 'x' FROM generate_series(2, 3)")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("column 'id' is required (NOT NULL)"),
        "{err}"
    );
    assert_eq!(crate::common::current_snapshot(&s, "ns", "t").await, before);
    assert_eq!(
        crate::common::files_under(&data_dir),
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
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
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

/// Iceberg uuids are Arrow's `arrow.uuid`: `UUID` in DDL (nested too), text written into them and
/// compared with them, canonical text out, and bad text refused with one line. Columns are
/// marked; uuids nested in structs and lists keep their Iceberg type and take typed text.
#[tokio::test]
async fn uuid_columns_take_and_show_canonical_text() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let run = |q: &'static str| {
        let s = s.clone();
        async move { s.sql(q).await?.collect().await }
    };
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE TABLE ns.u (id UUID NOT NULL, n INT, s STRUCT<x UUID>, l ARRAY<UUID>)",
    )
    .await
    .unwrap();
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "u"]).unwrap())
        .await
        .unwrap();
    let schema = t.metadata().current_schema();
    assert_eq!(
        schema.field_by_name("id").unwrap().field_type.to_string(),
        "uuid"
    );
    assert_eq!(
        schema.field_by_name("s.x").unwrap().field_type.to_string(),
        "uuid"
    );
    assert_eq!(
        schema
            .field_by_name("l.element")
            .unwrap()
            .field_type
            .to_string(),
        "uuid"
    );

    // uuid partition values cannot be written (docs/limitations.md): refused before anything exists.
    let err = sql(
        &s,
        "CREATE EXTERNAL TABLE ns.p (id UUID) STORED AS ICEBERG LOCATION '' PARTITIONED BY (id)",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("partitioning by identity(id)"), "{err}");
    assert!(sql(&s, "SELECT * FROM ns.p").await.is_err());

    // Plain text (typed by the session), a cast, a typed literal and to_uuid all write uuids.
    run("INSERT INTO ns.u VALUES \
         ('1571effb-facd-42a3-9e6f-8c3a4b5c6d7e', 1, NULL, NULL), \
         (CAST('00000000-0000-0000-0000-000000000001' AS UUID), 2, \
          {x: UUID '00000000-0000-0000-0000-0000000000aa'}, [to_uuid('{00000000-0000-0000-0000-0000000000bb}')])")
        .await
        .unwrap();
    sql(
        &s,
        "INSERT INTO ns.u (n, id) VALUES (3, 'FFFFFFFF-0000-0000-0000-000000000000')",
    )
    .await
    .unwrap_err(); // plain text needs the session's typing, as the CLI gives it
    run("INSERT INTO ns.u (n, id) VALUES (3, 'FFFFFFFF-0000-0000-0000-000000000000')")
        .await
        .unwrap();

    let df = s
        .context()
        .sql("SELECT id, s, l FROM ns.u ORDER BY n")
        .await
        .unwrap();
    let field = df.schema().field(0).clone();
    assert!(iceberg_exec::is_uuid(&field), "{field:?}");
    let text = df.to_string().await.unwrap();
    for expected in [
        "1571effb-facd-42a3-9e6f-8c3a4b5c6d7e",
        "00000000-0000-0000-0000-000000000001",
        "ffffffff-0000-0000-0000-000000000000",
    ] {
        assert!(text.contains(expected), "{expected} missing from\n{text}");
    }

    // Comparisons, IN lists, BETWEEN and inequality against text; text in any case and form.
    let ns = |q: &'static str| {
        let s = s.clone();
        async move { rows(&s, q).await }
    };
    assert_eq!(
        ns("SELECT n FROM ns.u WHERE id = '1571EFFB-FACD-42A3-9E6F-8C3A4B5C6D7E'").await,
        ["1"]
    );
    assert_eq!(
        ns("SELECT n FROM ns.u WHERE '00000000000000000000000000000001' = id").await,
        ["2"]
    );
    assert_eq!(
        ns(
            "SELECT n FROM ns.u WHERE id IN ('00000000-0000-0000-0000-000000000001', \
            'ffffffff-0000-0000-0000-000000000000') ORDER BY n"
        )
        .await,
        ["2", "3"]
    );
    assert_eq!(
        ns(
            "SELECT n FROM ns.u WHERE id BETWEEN '00000000-0000-0000-0000-000000000000' \
            AND '20000000-0000-0000-0000-000000000000' ORDER BY n"
        )
        .await,
        ["1", "2"]
    );
    assert_eq!(
        ns("SELECT n FROM ns.u WHERE id <> '1571effb-facd-42a3-9e6f-8c3a4b5c6d7e' ORDER BY n")
            .await,
        ["2", "3"]
    );
    assert_eq!(
        ns("SELECT n FROM ns.u WHERE s.x = UUID '00000000-0000-0000-0000-0000000000aa'").await,
        ["2"]
    );
    assert_eq!(
        ns("SELECT CAST(id AS VARCHAR) FROM ns.u WHERE n = 1").await,
        ["1571effb-facd-42a3-9e6f-8c3a4b5c6d7e"]
    );
    // A comparison with constant text folds into a 16-byte literal, so files prune by it.
    let plan = ns("EXPLAIN SELECT n FROM ns.u WHERE id = 'ffffffff-0000-0000-0000-000000000000'")
        .await
        .join("\n");
    assert!(plan.contains("files=1 of 2"), "{plan}");

    // UPDATE and DELETE take text too.
    run("UPDATE ns.u SET id = '00000000-0000-0000-0000-000000000002' WHERE n = 2")
        .await
        .unwrap();
    sql(
        &s,
        "DELETE FROM ns.u WHERE id = 'ffffffff-0000-0000-0000-000000000000'",
    )
    .await
    .unwrap();
    assert_eq!(
        ns("SELECT CAST(id AS VARCHAR), n FROM ns.u ORDER BY n").await,
        [
            "1571effb-facd-42a3-9e6f-8c3a4b5c6d7e|1",
            "00000000-0000-0000-0000-000000000002|2"
        ]
    );

    // Text that is no UUID fails with one line and changes nothing.
    let before = crate::common::current_snapshot(&s, "ns", "u").await;
    for bad in [
        "SELECT n FROM ns.u WHERE id = 'not-a-uuid'",
        "DELETE FROM ns.u WHERE id IN ('1571effb', '00000000-0000-0000-0000-000000000002')",
    ] {
        let err = sql(&s, bad).await.unwrap_err().to_string();
        assert!(err.contains("invalid UUID '"), "{bad}: {err}");
        assert!(!err.contains('\n'), "{err}");
    }
    let err = run("INSERT INTO ns.u (n, id) VALUES (9, 'nope')")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid UUID 'nope'"), "{err}");
    assert_eq!(crate::common::current_snapshot(&s, "ns", "u").await, before);
}

#[tokio::test]
async fn unqualified_names_use_a_default_namespace_created_with_its_first_table() {
    let dir = tempfile::tempdir().unwrap();
    let s = crate::common::session(dir.path()).await;
    let namespaces = |s: &iceberg_exec::IcebergSession| {
        let catalog = s.catalog().clone();
        async move { catalog.list_namespaces().await.unwrap().len() }
    };
    // Reading a missing table names it; nothing is created.
    let e = s.sql("SELECT * FROM t").await.unwrap_err().to_string();
    assert!(e.contains("default.t' not found"), "{e}");
    assert_eq!(namespaces(&s).await, 0);
    for sql in [
        "CREATE TABLE t (id INT)",
        "INSERT INTO t VALUES (1), (2)",
        "CREATE EXTERNAL TABLE u (id INT) STORED AS ICEBERG LOCATION ''",
        "INSERT INTO u SELECT id + 10 FROM t",
        "ALTER TABLE t ADD COLUMN v VARCHAR",
    ] {
        s.sql(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert_eq!(
        crate::common::rows(&s, "SELECT id FROM default.u ORDER BY id").await,
        ["11", "12"]
    );
    assert_eq!(
        crate::common::rows(&s, "SELECT id, v FROM t ORDER BY id").await,
        ["1|", "2|"]
    );
    assert_eq!(namespaces(&s).await, 1);
}
