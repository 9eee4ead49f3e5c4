//! The catalog database layout: databases without Java's `iceberg_type` column (older pyiceberg)
//! work unchanged, and written files carry full column metrics.

use crate::common::{rows, sql};
use iceberg::spec::{Datum, ManifestStatus};
use iceberg::TableIdent;
use iceberg_exec::{IcebergSession, WarehouseConfig};

#[tokio::test]
async fn database_without_iceberg_type_column_works_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("catalog.db");
    // The layout older pyiceberg versions create: no iceberg_type column.
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect('{}'); \
             c.execute('CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), PRIMARY KEY (catalog_name, table_namespace, table_name))'); \
             c.execute('CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255) NOT NULL, property_value VARCHAR(1000) NOT NULL, PRIMARY KEY (catalog_name, namespace, property_key))'); \
             c.commit()",
            db.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());

    let s = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap();
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.t AS SELECT 1 AS a").await.unwrap();
    sql(&s, "INSERT INTO ns.t VALUES (2)").await.unwrap();
    assert_eq!(rows(&s, "SELECT a FROM ns.t ORDER BY a").await, ["1", "2"]);
    sql(&s, "DROP TABLE ns.t").await.unwrap();

    // The schema was left as it was: still no iceberg_type column.
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect('{}'); print([r[1] for r in c.execute('PRAGMA table_info(iceberg_tables)')])",
            db.display()
        ))
        .output()
        .unwrap();
    let columns = String::from_utf8_lossy(&out.stdout);
    assert!(!columns.contains("iceberg_type"), "{columns}");
    assert!(columns.contains("previous_metadata_location"), "{columns}");
}

#[tokio::test]
async fn written_files_carry_column_metrics_and_snapshot_lineage() {
    let dir = tempfile::tempdir().unwrap();
    let s = crate::common::session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE TABLE ns.t (id BIGINT NOT NULL, name VARCHAR, score DOUBLE)",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO ns.t VALUES (5, 'e', 1.0), (-3, NULL, 2.5), (12, 'a', NULL), (7, 'z', NULL)",
    )
    .await
    .unwrap();
    sql(&s, "INSERT INTO ns.t VALUES (100, 'x', 0.5)")
        .await
        .unwrap();

    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let md = table.metadata();
    let schema = md.current_schema();
    let (id, name, score) = (
        schema.field_by_name("id").unwrap().id,
        schema.field_by_name("name").unwrap().id,
        schema.field_by_name("score").unwrap().id,
    );
    let current = md.current_snapshot().unwrap();
    assert_eq!(current.sequence_number(), 2);
    let parent = md
        .snapshot_by_id(current.parent_snapshot_id().unwrap())
        .unwrap();
    assert_eq!(parent.sequence_number(), 1);
    assert_eq!(parent.parent_snapshot_id(), None);
    assert_eq!(
        current.summary().additional_properties["total-records"],
        "5"
    );
    assert_eq!(
        current.summary().additional_properties["total-data-files"],
        "2"
    );
    assert_eq!(
        current.summary().additional_properties["added-records"],
        "1"
    );

    let list = table.manifest_list_reader(current).load().await.unwrap();
    assert_eq!(
        list.entries().len(),
        2,
        "the parent's manifest is carried over"
    );
    let mut first_file = None;
    for m in list.entries() {
        let manifest = m.load_manifest(table.file_io()).await.unwrap();
        for e in manifest.entries() {
            assert_eq!(e.status(), ManifestStatus::Added);
            if e.record_count() == 4 {
                // The inherited sequence number is the snapshot's.
                assert_eq!(e.sequence_number(), Some(1));
                first_file = Some(e.data_file().clone());
            }
        }
    }
    let f = first_file.expect("the first insert's file");
    assert_eq!(f.value_counts()[&id], 4);
    assert_eq!(f.null_value_counts()[&name], 1);
    assert_eq!(f.null_value_counts()[&score], 2);
    assert_eq!(f.lower_bounds()[&id], Datum::long(-3));
    assert_eq!(f.upper_bounds()[&id], Datum::long(12));
    assert_eq!(f.lower_bounds()[&name], Datum::string("a"));
    assert_eq!(f.upper_bounds()[&name], Datum::string("z"));
    assert_eq!(f.lower_bounds()[&score], Datum::double(1.0));
    assert_eq!(f.upper_bounds()[&score], Datum::double(2.5));
}

#[tokio::test]
async fn register_an_existing_table_under_another_name() {
    let dir = tempfile::tempdir().unwrap();
    let s = crate::common::session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE TABLE ns.t AS SELECT value AS id FROM generate_series(1, 3)",
    )
    .await
    .unwrap();
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let location = t.metadata_location().unwrap().to_string();
    let copy = TableIdent::from_strs(["ns", "t_again"]).unwrap();
    s.catalog().register_table(&copy, &location).await.unwrap();
    assert_eq!(rows(&s, "SELECT sum(id) FROM ns.t_again").await, ["6"]);
    let e = s
        .catalog()
        .register_table(&copy, &location)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
    let nowhere = TableIdent::from_strs(["nope", "t"]).unwrap();
    let e = s
        .catalog()
        .register_table(&nowhere, &location)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("namespace 'nope' does not exist"), "{e}");
    let e = s
        .catalog()
        .register_table(
            &TableIdent::from_strs(["ns", "bad"]).unwrap(),
            "/no/such/v1.metadata.json",
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.is_empty());
    assert!(!s
        .catalog()
        .table_exists(&TableIdent::from_strs(["ns", "bad"]).unwrap())
        .await
        .unwrap());
}

/// A table whose metadata file cannot be read fails alone: the catalog lists it, every other
/// table reads, reading it names it in one line, and it can be dropped.
#[tokio::test]
async fn one_unreadable_table_does_not_take_the_catalog_down() {
    let dir = tempfile::tempdir().unwrap();
    let s = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap();
    for q in [
        "CREATE SCHEMA ns",
        "CREATE TABLE ns.good (id BIGINT)",
        "INSERT INTO ns.good VALUES (1), (2)",
        "CREATE TABLE ns.broken (id BIGINT)",
        "INSERT INTO ns.broken VALUES (3)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let ident = TableIdent::from_strs(["ns", "broken"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let metadata = table
        .metadata_location()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    // Another engine crashed mid-write: half a JSON document.
    let text = std::fs::read_to_string(&metadata).unwrap();
    std::fs::write(&metadata, &text[..text.len() / 2]).unwrap();

    // A fresh session (no table handles cached) on the same warehouse.
    let s = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap();
    let listed = rows(
        &s,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ns' ORDER BY 1",
    )
    .await;
    assert_eq!(listed, ["broken", "good"]);
    let shown = rows(&s, "SHOW TABLES").await;
    assert!(shown.iter().any(|r| r.contains("|ns|broken|")), "{shown:?}");
    assert_eq!(rows(&s, "SELECT sum(id) FROM ns.good").await, ["3"]);
    let e = sql(&s, "SELECT * FROM ns.broken")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("ns.broken"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");

    s.sql("DROP TABLE ns.broken")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let listed = rows(
        &s,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ns' ORDER BY 1",
    )
    .await;
    assert_eq!(listed, ["good"]);
    // A name that was never a table is DataFusion's to refuse, and IF EXISTS tolerates it.
    assert!(s.sql("DROP TABLE ns.broken").await.is_err());
    s.sql("DROP TABLE IF EXISTS ns.broken")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.good").await, ["2"]);
}

/// A `CREATE OR REPLACE` that fails leaves the old table as it was (DataFusion drops it before
/// it builds the new one; the session registers it again).
#[tokio::test]
async fn a_failed_create_or_replace_leaves_the_old_table() {
    let dir = tempfile::tempdir().unwrap();
    let s = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap();
    for q in [
        "CREATE SCHEMA ns",
        "CREATE TABLE ns.t (id BIGINT, v VARCHAR)",
        "INSERT INTO ns.t VALUES (1, 'a'), (2, 'b')",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let location = |t: iceberg::table::Table| t.metadata_location().unwrap().to_string();
    let before = location(s.catalog().load_table(&ident).await.unwrap());
    for q in [
        // The query fails while DataFusion fills the new table.
        "CREATE OR REPLACE TABLE ns.t AS SELECT CAST('x' AS INT) AS id",
        "CREATE OR REPLACE EXTERNAL TABLE ns.t (id BIGINT) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('partitioning' 'frob(id)')",
    ] {
        assert!(s.sql(q).await.is_err(), "{q} was accepted");
        let now = location(s.catalog().load_table(&ident).await.unwrap());
        assert_eq!(now, before, "{q}");
        assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["2"], "{q}");
    }
}

/// `DROP TABLE name` with another catalog as the default drops that catalog's table, never the
/// Iceberg table of the same name.
#[tokio::test]
async fn drop_table_follows_the_default_catalog() {
    use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
    let dir = tempfile::tempdir().unwrap();
    let s = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap();
    for q in [
        "CREATE SCHEMA ns",
        "SET datafusion.catalog.default_schema = 'ns'",
        "CREATE TABLE t (id BIGINT)",
        "INSERT INTO t VALUES (1)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let mem = std::sync::Arc::new(MemoryCatalogProvider::new());
    mem.register_schema("ns", std::sync::Arc::new(MemorySchemaProvider::new()))
        .unwrap();
    s.context().register_catalog("mem", mem);
    for q in [
        "SET datafusion.catalog.default_catalog = 'mem'",
        "CREATE TABLE t (x INT)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    s.sql("DROP TABLE t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert!(sql(&s, "SELECT * FROM mem.ns.t").await.is_err());
    let iceberg = s.catalog().name().to_string();
    assert_eq!(
        rows(&s, &format!("SELECT count(*) FROM {iceberg}.ns.t")).await,
        ["1"]
    );
}
