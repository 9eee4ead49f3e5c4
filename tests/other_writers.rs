//! Tables as other writers make them: each test writes a real table with this crate, then
//! rewrites its Avro or JSON the way another writer leaves it (BigQuery's manifests without
//! metadata, v1 manifest lists without counts, a version hint naming a file stem, a recorded
//! file size that disagrees with the object, v3 metadata without `next-row-id`), and checks the
//! table still reads the same rows.
//!
//! The process-wide manifest cache is switched off in this binary: every read decodes the files
//! as they are on disk now.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use apache_avro::types::Value;
use common::{rows, session, sql};

/// Keys of a manifest's Avro metadata that BigQuery leaves out.
const MANIFEST_KEYS: [&str; 5] = [
    "schema",
    "partition-spec",
    "partition-spec-id",
    "format-version",
    "content",
];

fn no_manifest_cache() {
    iceberg_exec::scan::set_manifest_cache_capacity(0);
}

fn avro_files(table_dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(table_dir.join("metadata"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "avro"))
        .collect();
    out.sort();
    out
}

fn is_manifest_list(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("snap-"))
}

/// An Avro file's writer schema, user metadata and records.
fn read_avro(path: &Path) -> (apache_avro::Schema, HashMap<String, Vec<u8>>, Vec<Value>) {
    let bytes = std::fs::read(path).unwrap();
    let reader = apache_avro::Reader::new(&bytes[..]).unwrap();
    let schema = reader.writer_schema().clone();
    let meta = reader.user_metadata().clone();
    let records = reader.map(|r| r.unwrap()).collect();
    (schema, meta, records)
}

/// Writes an Avro file (deflate, as Java does) with exactly `meta` as user metadata.
fn write_avro(
    path: &Path,
    schema: &apache_avro::Schema,
    meta: &HashMap<String, Vec<u8>>,
    records: Vec<Value>,
) {
    let mut writer = apache_avro::Writer::new(schema, Vec::new());
    for (k, v) in meta {
        writer.add_user_metadata(k.clone(), v).unwrap();
    }
    for r in records {
        writer.append(r).unwrap();
    }
    std::fs::write(path, writer.into_inner().unwrap()).unwrap();
}

fn field_mut<'a>(record: &'a mut Value, name: &str) -> &'a mut Value {
    match record {
        Value::Record(fields) => &mut fields.iter_mut().find(|(n, _)| n == name).unwrap().1,
        Value::Union(_, inner) => field_mut(inner, name),
        other => panic!("not a record: {other:?}"),
    }
}

fn meta_keys(path: &Path) -> Vec<String> {
    let (_, meta, _) = read_avro(path);
    let mut keys: Vec<String> = meta.into_keys().collect();
    keys.sort();
    keys
}

async fn table_with_deletes(s: &iceberg_exec::IcebergSession) {
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, region VARCHAR, v INT) STORED AS ICEBERG \
         LOCATION '' PARTITIONED BY (region) \
         OPTIONS ('format-version' '2', 'write.delete.mode' 'merge-on-read')",
        "INSERT INTO ns.t VALUES (1, 'eu', 10), (2, 'eu', 20), (3, 'us', 30), (4, 'us', 40), (5, 'ap', 50)",
        "INSERT INTO ns.t VALUES (6, 'eu', 60), (7, 'ap', 70)",
        "DELETE FROM ns.t WHERE v IN (20, 70)",
    ] {
        sql(s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
}

const ALL: &str = "SELECT id, region, v FROM ns.t ORDER BY id";
const LIVE: [&str; 5] = ["1|eu|10", "3|us|30", "4|us|40", "5|ap|50", "6|eu|60"];

#[tokio::test]
async fn manifests_without_metadata_are_read_by_the_table_metadata() {
    no_manifest_cache();
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    table_with_deletes(&s).await;
    assert_eq!(rows(&s, ALL).await, LIVE);

    // Strip the manifests' metadata (manifest lists keep theirs).
    let table_dir = dir.path().join("ns/t");
    let mut stripped = 0;
    for path in avro_files(&table_dir) {
        if is_manifest_list(&path) {
            continue;
        }
        let (schema, mut meta, records) = read_avro(&path);
        assert!(meta.contains_key("partition-spec"), "{}", path.display());
        for k in MANIFEST_KEYS.iter().chain(&["schema-id"]) {
            meta.remove(*k);
        }
        write_avro(&path, &schema, &meta, records);
        stripped += 1;
    }
    assert!(stripped >= 3, "data and delete manifests: {stripped}");

    // The same live rows: the delete manifest is still read as deletes of format v2.
    assert_eq!(rows(&s, ALL).await, LIVE);
    assert_eq!(
        rows(&s, "SELECT count(*), sum(v) FROM ns.t WHERE region = 'eu'").await,
        ["2|70"]
    );
    let by_path = format!(
        "SELECT count(*) FROM iceberg_scan('{}')",
        table_dir.display()
    );
    assert_eq!(rows(&s, &by_path).await, ["5"]);

    // Writing to it works, and what this crate writes carries the metadata again.
    let before = avro_files(&table_dir);
    assert_eq!(
        rows(&s, "DELETE FROM ns.t WHERE id = 3").await,
        ["1"],
        "one row deleted"
    );
    assert_eq!(
        rows(&s, ALL).await,
        ["1|eu|10", "4|us|40", "5|ap|50", "6|eu|60"]
    );
    let written: Vec<PathBuf> = avro_files(&table_dir)
        .into_iter()
        .filter(|p| !before.contains(p) && !is_manifest_list(p))
        .collect();
    assert!(!written.is_empty());
    for path in written {
        let keys = meta_keys(&path);
        for k in MANIFEST_KEYS {
            assert!(keys.iter().any(|x| x == k), "{}: {keys:?}", path.display());
        }
    }
}

/// Rewrites the table's current manifest list with every file and row count null.
fn null_counts_in_manifest_list(table_dir: &Path) -> usize {
    let lists: Vec<PathBuf> = avro_files(table_dir)
        .into_iter()
        .filter(|p| is_manifest_list(p))
        .collect();
    let mut rewritten = 0;
    for path in lists {
        let (schema, meta, records) = read_avro(&path);
        // Make the count fields optional in the writer schema, as format v1 declares them.
        let mut json: serde_json::Value = serde_json::from_str(&schema.canonical_form()).unwrap();
        let mut counts = vec![];
        for field in json["fields"].as_array_mut().unwrap() {
            let name = field["name"].as_str().unwrap().to_string();
            if name.ends_with("_count") {
                let ty = field["type"].clone();
                if !ty.is_array() {
                    field["type"] = serde_json::json!(["null", ty]);
                }
                counts.push(name);
            }
        }
        assert!(counts.len() >= 6, "{counts:?}");
        let schema = apache_avro::Schema::parse(&json).unwrap();
        let records = records
            .into_iter()
            .map(|mut r| {
                for name in &counts {
                    *field_mut(&mut r, name) = Value::Union(0, Box::new(Value::Null));
                }
                r
            })
            .collect();
        write_avro(&path, &schema, &meta, records);
        rewritten += 1;
    }
    rewritten
}

#[tokio::test]
async fn manifest_lists_whose_counts_are_null() {
    no_manifest_cache();
    for version in ["1", "2"] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        for q in [
            "CREATE SCHEMA ns".to_string(),
            format!(
                "CREATE EXTERNAL TABLE ns.c (id BIGINT, v INT) STORED AS ICEBERG LOCATION '' \
                 OPTIONS ('format-version' '{version}')"
            ),
            "INSERT INTO ns.c VALUES (1, 10), (2, 20)".to_string(),
            "INSERT INTO ns.c VALUES (3, 30)".to_string(),
        ] {
            sql(&s, &q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
        }
        assert!(null_counts_in_manifest_list(&dir.path().join("ns/c")) >= 2);
        assert_eq!(
            rows(&s, "SELECT count(*), sum(v) FROM ns.c").await,
            ["3|60"],
            "format v{version}"
        );
        assert_eq!(
            rows(&s, "SELECT id FROM ns.c WHERE v > 15 ORDER BY id").await,
            ["2", "3"],
            "format v{version}"
        );
    }
}

#[tokio::test]
async fn a_version_hint_naming_a_metadata_file_stem() {
    no_manifest_cache();
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE TABLE ns.h (id BIGINT)",
        "INSERT INTO ns.h VALUES (1), (2)",
        "INSERT INTO ns.h VALUES (3)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let metadata = dir.path().join("ns/h/metadata");
    let mut stems: Vec<String> = std::fs::read_dir(&metadata)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".metadata.json").map(str::to_string)
        })
        .collect();
    stems.sort();
    assert_eq!(stems.len(), 3, "{stems:?}");
    assert!(stems[1].starts_with("00001-"), "{stems:?}");
    let scan = format!(
        "SELECT count(*) FROM iceberg_scan('{}')",
        dir.path().join("ns/h").display()
    );
    // The hint names the middle version (one insert), not the newest.
    std::fs::write(
        metadata.join("version-hint.text"),
        format!("{}\n", stems[1]),
    )
    .unwrap();
    assert_eq!(rows(&s, &scan).await, ["2"]);
    std::fs::write(metadata.join("version-hint.text"), &stems[2]).unwrap();
    assert_eq!(rows(&s, &scan).await, ["3"]);
    std::fs::write(
        metadata.join("version-hint.text"),
        format!("{}.metadata.json", stems[1]),
    )
    .unwrap();
    assert_eq!(rows(&s, &scan).await, ["2"]);
    std::fs::write(metadata.join("version-hint.text"), "00009-nope").unwrap();
    let e = sql(&s, &scan).await.unwrap_err().to_string();
    assert!(e.contains("version '00009-nope'"), "{e}");
}

/// Rewrites every manifest so that data files are recorded `data_delta` bytes off their real
/// size and delete files `delete_delta`.
fn wrong_sizes_in_manifests(table_dir: &Path, data_delta: i64, delete_delta: i64) {
    for path in avro_files(table_dir) {
        if is_manifest_list(&path) {
            continue;
        }
        let (schema, meta, records) = read_avro(&path);
        let deletes = meta.get("content").is_some_and(|c| c == b"deletes");
        let delta = if deletes { delete_delta } else { data_delta };
        let records = records
            .into_iter()
            .map(|mut r| {
                let size = field_mut(field_mut(&mut r, "data_file"), "file_size_in_bytes");
                let Value::Long(n) = size else {
                    panic!("file_size_in_bytes: {size:?}")
                };
                *size = Value::Long(*n + delta);
                r
            })
            .collect();
        write_avro(&path, &schema, &meta, records);
    }
}

#[tokio::test]
async fn data_and_delete_files_whose_recorded_size_is_wrong() {
    no_manifest_cache();
    for (data_delta, delete_delta) in [(-7, 13), (501, -3)] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        table_with_deletes(&s).await;
        wrong_sizes_in_manifests(&dir.path().join("ns/t"), data_delta, delete_delta);
        assert_eq!(rows(&s, ALL).await, LIVE, "{data_delta}/{delete_delta}");
        assert_eq!(
            rows(&s, "SELECT sum(v) FROM ns.t WHERE v >= 30").await,
            ["180"]
        );
        // Through the anti-join route for position deletes as well.
        sql(&s, "SET iceberg.position_delete_join_threshold = 0")
            .await
            .unwrap();
        assert_eq!(rows(&s, ALL).await, LIVE, "{data_delta}/{delete_delta}");
    }
}

#[tokio::test]
async fn a_file_recorded_smaller_than_it_is_is_not_read_in_ranges() {
    no_manifest_cache();
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE TABLE ns.big (id BIGINT, v BIGINT)",
        "INSERT INTO ns.big SELECT value, value * 3 FROM generate_series(1, 200000)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    for q in [
        "SET datafusion.execution.target_partitions = 4",
        "SET datafusion.optimizer.repartition_file_min_size = 1",
    ] {
        sql(&s, q).await.unwrap();
    }
    let q = "SELECT count(*), sum(v) FROM ns.big WHERE v % 2 = 0";
    assert_eq!(rows(&s, q).await, ["100000|30000300000"]);
    // Recorded larger than it is: ranges past the end hold no row groups; same answer.
    wrong_sizes_in_manifests(&dir.path().join("ns/big"), 4096, 0);
    assert_eq!(rows(&s, q).await, ["100000|30000300000"]);
    // Recorded smaller: a range would miss row groups, so the read stops with a clear error.
    wrong_sizes_in_manifests(&dir.path().join("ns/big"), -4096 - 100, 0);
    let e = sql(&s, q).await.unwrap_err().to_string();
    assert!(e.contains("split into byte ranges"), "{e}");
    sql(
        &s,
        "SET datafusion.optimizer.repartition_file_scans = false",
    )
    .await
    .unwrap();
    assert_eq!(rows(&s, q).await, ["100000|30000300000"]);
}

#[tokio::test]
async fn format_v3_metadata_without_next_row_id() {
    no_manifest_cache();
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.v3 (id BIGINT) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('format-version' '3')",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let metadata = dir.path().join("ns/v3/metadata");
    let files: Vec<PathBuf> = std::fs::read_dir(&metadata)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(json["format-version"], 3);
    assert!(json
        .as_object_mut()
        .unwrap()
        .remove("next-row-id")
        .is_some());
    std::fs::write(&files[0], serde_json::to_vec(&json).unwrap()).unwrap();

    let by_path = format!(
        "SELECT count(*) FROM iceberg_scan('{}')",
        files[0].display()
    );
    assert_eq!(rows(&s, &by_path).await, ["0"]);
    // A fresh session loads it from the catalog and writes to it.
    let s = session(dir.path()).await;
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.v3").await, ["0"]);
    sql(&s, "INSERT INTO ns.v3 VALUES (1), (2)").await.unwrap();
    assert_eq!(rows(&s, "SELECT sum(id) FROM ns.v3").await, ["3"]);
    let newest = std::fs::read_dir(&metadata)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .max()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(newest).unwrap()).unwrap();
    assert_eq!(json["next-row-id"], 2, "the written metadata is complete");
}
