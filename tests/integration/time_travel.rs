//! Time travel on tables we write: by snapshot id, by timestamp, with the snapshot's schema.

use crate::common::{rows, session, sql};

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
        crate::common::render(
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

/// Format v1 snapshots written before manifest lists existed name their manifests inline
/// (`manifests` instead of `manifest-list`). They read like any other snapshot, also at a past
/// snapshot and with filters; writes to such a table are refused and change nothing.
#[tokio::test]
async fn v1_snapshots_without_manifest_lists() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT, part VARCHAR) STORED AS ICEBERG LOCATION ''
         PARTITIONED BY (part) OPTIONS ('format-version' '1')",
    )
    .await
    .unwrap();
    for batch in ["(1, 'a'), (2, 'b')", "(3, 'a')", "(4, 'c'), (5, 'b')"] {
        sql(&s, &format!("INSERT INTO ns.t VALUES {batch}"))
            .await
            .unwrap();
    }
    // The same metadata with every snapshot's manifests inline.
    let ident = iceberg::TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let current = table
        .metadata_location()
        .unwrap()
        .trim_start_matches("file://");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(current).unwrap()).unwrap();
    assert_eq!(json["format-version"], 1);
    let mut first = None;
    for snap in json["snapshots"].as_array_mut().unwrap() {
        let id = snap["snapshot-id"].as_i64().unwrap();
        if snap.get("parent-snapshot-id").is_none_or(|p| p.is_null()) {
            first = Some(id);
        }
        let snapshot = table.metadata().snapshot_by_id(id).unwrap();
        let list = table.manifest_list_reader(snapshot).load().await.unwrap();
        let paths: Vec<String> = list
            .entries()
            .iter()
            .map(|m| m.manifest_path.clone())
            .collect();
        let obj = snap.as_object_mut().unwrap();
        obj.remove("manifest-list");
        obj.insert("manifests".into(), serde_json::json!(paths));
    }
    let inline = dir.path().join("ns/t/metadata/inline.metadata.json");
    std::fs::write(&inline, serde_json::to_string(&json).unwrap()).unwrap();
    let inline = inline.display();

    for (query, by_path) in [
        (
            "SELECT count(*), sum(id) FROM ns.t".to_string(),
            format!("SELECT count(*), sum(id) FROM iceberg_scan('{inline}')"),
        ),
        (
            "SELECT id FROM ns.t WHERE part = 'b' AND id > 1 ORDER BY id".to_string(),
            format!(
                "SELECT id FROM iceberg_scan('{inline}') WHERE part = 'b' AND id > 1 ORDER BY id"
            ),
        ),
    ] {
        assert_eq!(
            rows(&s, &by_path).await,
            rows(&s, &query).await,
            "{by_path}"
        );
    }
    assert_eq!(
        rows(&s, "SELECT count(*), sum(id) FROM ns.t").await,
        ["5|15"]
    );
    let first = first.unwrap();
    assert_eq!(
        rows(
            &s,
            &format!("SELECT count(*) FROM iceberg_scan('ns.t', 'snapshot_id', {first})")
        )
        .await,
        ["2"]
    );
    assert_eq!(
        rows(
            &s,
            &format!("SELECT count(*) FROM iceberg_scan('{inline}', 'snapshot_id', {first})")
        )
        .await,
        ["2"]
    );

    // Registered in the catalog, the table reads and refuses writes.
    s.catalog()
        .register_table(
            &iceberg::TableIdent::from_strs(["ns", "old"]).unwrap(),
            &inline.to_string(),
        )
        .await
        .unwrap();
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.old").await, ["5"]);
    for write in [
        "INSERT INTO ns.old VALUES (9, 'z')",
        "DELETE FROM ns.old WHERE id = 1",
        "UPDATE ns.old SET id = 0 WHERE id = 2",
    ] {
        let err = sql(&s, write).await.unwrap_err().to_string();
        assert!(err.contains("lists its manifests inline"), "{write}: {err}");
    }
    assert_eq!(
        rows(&s, "SELECT count(*), sum(id) FROM ns.old").await,
        ["5|15"]
    );
    let ident_old = iceberg::TableIdent::from_strs(["ns", "old"]).unwrap();
    let old = s.catalog().load_table(&ident_old).await.unwrap();
    assert!(old
        .metadata_location()
        .unwrap()
        .ends_with("inline.metadata.json"));
}

/// A column added with an `initial-default` (format v3) reads as that value in files written
/// before it existed, in projections and in filters, and as written in newer files.
#[tokio::test]
async fn added_columns_read_their_initial_default() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.d (id BIGINT) STORED AS ICEBERG LOCATION ''
         OPTIONS ('format-version' '3')",
    )
    .await
    .unwrap();
    sql(&s, "INSERT INTO ns.d VALUES (1), (2)").await.unwrap();
    // Evolve the schema as a v3 writer does: two optional columns with initial defaults.
    let ident = iceberg::TableIdent::from_strs(["ns", "d"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let current = table
        .metadata_location()
        .unwrap()
        .trim_start_matches("file://");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(current).unwrap()).unwrap();
    let last = json["last-column-id"].as_i64().unwrap();
    let schema_id = json["current-schema-id"].as_i64().unwrap() + 1;
    let mut schema = json["schemas"][0].clone();
    schema["schema-id"] = schema_id.into();
    let fields = schema["fields"].as_array_mut().unwrap();
    fields.push(serde_json::json!({"id": last + 1, "name": "flag", "required": false, "type": "int", "initial-default": 7}));
    fields.push(serde_json::json!({"id": last + 2, "name": "note", "required": false, "type": "string", "initial-default": "n/a"}));
    json["schemas"].as_array_mut().unwrap().push(schema);
    json["current-schema-id"] = schema_id.into();
    json["last-column-id"] = (last + 2).into();
    let evolved = dir.path().join("ns/d/metadata/evolved.metadata.json");
    std::fs::write(&evolved, serde_json::to_string(&json).unwrap()).unwrap();
    s.catalog()
        .register_table(
            &iceberg::TableIdent::from_strs(["ns", "e"]).unwrap(),
            &evolved.display().to_string(),
        )
        .await
        .unwrap();
    sql(&s, "INSERT INTO ns.e VALUES (3, 1, 'x'), (4, NULL, NULL)")
        .await
        .unwrap();
    assert_eq!(
        rows(&s, "SELECT id, flag, note FROM ns.e ORDER BY id").await,
        ["1|7|n/a", "2|7|n/a", "3|1|x", "4||"]
    );
    assert_eq!(
        rows(&s, "SELECT id FROM ns.e WHERE flag = 7 ORDER BY id").await,
        ["1", "2"]
    );
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.e WHERE note <> 'x'").await,
        ["2"]
    );
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.e WHERE flag IS NULL").await,
        ["1"]
    );
    // Without the default, the old rows would be NULL: the by-path read agrees.
    let by_path = format!(
        "SELECT sum(flag) FROM iceberg_scan('{}')",
        evolved.display()
    );
    assert_eq!(rows(&s, &by_path).await, ["14"]);
}
