//! Tables as other writers make them: each test writes a real table with this crate, then
//! rewrites its Avro or JSON the way another writer leaves it (BigQuery's manifests without
//! metadata, v1 manifest lists without counts, a version hint naming a file stem, a recorded
//! file size that disagrees with the object, v3 metadata without `next-row-id`), and checks the
//! table still reads the same rows.
//!
//! The process-wide manifest cache is switched off while each test runs (holding
//! `common::MANIFEST_CACHE`): every read decodes the files as they are on disk now.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::{rows, session, sql};
use apache_avro::types::Value;

/// Keys of a manifest's Avro metadata that BigQuery leaves out.
const MANIFEST_KEYS: [&str; 5] = [
    "schema",
    "partition-spec",
    "partition-spec-id",
    "format-version",
    "content",
];

/// The manifest cache off until dropped (then back to its default bound).
struct NoManifestCache {
    _held: tokio::sync::MutexGuard<'static, ()>,
}

impl Drop for NoManifestCache {
    fn drop(&mut self) {
        iceberg_exec::file_planning::set_manifest_cache_capacity(
            iceberg_exec::file_planning::DEFAULT_MANIFEST_CACHE_BYTES,
        );
    }
}

async fn no_manifest_cache() -> NoManifestCache {
    let guard = crate::common::MANIFEST_CACHE.lock().await;
    iceberg_exec::file_planning::set_manifest_cache_capacity(0);
    NoManifestCache { _held: guard }
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
    write_avro_with(
        path,
        schema,
        meta,
        records,
        apache_avro::Codec::Deflate(Default::default()),
    )
}

/// [`write_avro`] with another codec.
fn write_avro_with(
    path: &Path,
    schema: &apache_avro::Schema,
    meta: &HashMap<String, Vec<u8>>,
    records: Vec<Value>,
    codec: apache_avro::Codec,
) {
    let mut writer = apache_avro::Writer::with_codec(schema, Vec::new(), codec);
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
    let _cache = no_manifest_cache().await;
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
    let _cache = no_manifest_cache().await;
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
    let _cache = no_manifest_cache().await;
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
    let _cache = no_manifest_cache().await;
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
    let _cache = no_manifest_cache().await;
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
    let _cache = no_manifest_cache().await;
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

// ---------------------------------------------------------------------------------------------
// Identity partition columns that data files do not store (the spec's "Column Projection").

use std::sync::Arc;

use crate::common::hive_style::{
    append_hive_style, create_typed_table, field_with_id, parquet_entry, partition_columns,
    partition_value, write_parquet,
};
use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Schema as ArrowSchema};
use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Literal, Struct};
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, NewFile, SnapshotChanges};
use iceberg_exec::MetadataStore;

/// Queries whose answers on the Hive-style table must equal the oracle's.
const PROJECTION_QUERIES: &[&str] = &[
    "SELECT * FROM ns.{t} ORDER BY id",
    "SELECT region, count(*), sum(id) FROM ns.{t} GROUP BY region ORDER BY region",
    "SELECT id, s, region FROM ns.{t} WHERE s = 'x' ORDER BY id",
    "SELECT id FROM ns.{t} WHERE i = 2 ORDER BY id",
    "SELECT id FROM ns.{t} WHERE b ORDER BY id",
    "SELECT id FROM ns.{t} WHERE NOT b ORDER BY id",
    "SELECT id FROM ns.{t} WHERE l >= 200 ORDER BY id",
    "SELECT id FROM ns.{t} WHERE f = 2.5 ORDER BY id",
    "SELECT id FROM ns.{t} WHERE d < -3 ORDER BY id",
    "SELECT id FROM ns.{t} WHERE dec_s = 123.46 ORDER BY id",
    "SELECT id, dec_l FROM ns.{t} WHERE dec_l > CAST('1000000000000000000000000' AS DECIMAL(38, 6)) ORDER BY id",
    "SELECT id FROM ns.{t} WHERE dt = DATE '2022-01-08' ORDER BY id",
    "SELECT id FROM ns.{t} WHERE tm > arrow_cast(TIME '01:00:00', 'Time64(Microsecond)') ORDER BY id",
    "SELECT id FROM ns.{t} WHERE ts = TIMESTAMP '2023-11-14 22:13:20.000001' ORDER BY id",
    "SELECT id, tstz FROM ns.{t} WHERE tstz IS NOT NULL ORDER BY id",
    "SELECT id FROM ns.{t} WHERE s IS NULL ORDER BY id",
    "SELECT id, fx, bn FROM ns.{t} WHERE fx IS NOT NULL ORDER BY id",
    "SELECT count(*) FROM ns.{t} WHERE region = 'zz'",
    "SELECT count(*) FROM ns.{t} WHERE region IN ('eu', 'us') AND v LIKE 'v1%'",
    "SELECT region, id FROM ns.{t} WHERE id % 2 = 1 ORDER BY id",
];

async fn answers(
    s: &iceberg_exec::IcebergSession,
    table: &str,
    queries: &[&str],
) -> Vec<Vec<String>> {
    let mut out = vec![];
    for q in queries {
        out.push(rows(s, &q.replace("{t}", table)).await);
    }
    out
}

#[tokio::test]
async fn identity_partition_columns_missing_from_files_read_as_partition_values() {
    for v3 in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        sql(&s, "CREATE SCHEMA ns").await.unwrap();
        create_typed_table(&s, "hive", v3, true, true).await;
        create_typed_table(&s, "oracle", v3, false, true).await;
        append_hive_style(&s, v3, "hive", "oracle").await;

        let hive = answers(&s, "hive", PROJECTION_QUERIES).await;
        let oracle = answers(&s, "oracle", PROJECTION_QUERIES).await;
        for ((q, h), o) in PROJECTION_QUERIES.iter().zip(&hive).zip(&oracle) {
            assert_eq!(h, o, "v3={v3}: {q}");
        }
        // The answers are the values committed, not NULLs both ways.
        assert_eq!(
            rows(&s, "SELECT id, b, i, s, region, dec_s, dt FROM ns.hive WHERE id IN (1, 12, 23) ORDER BY id").await,
            [
                "1|true|1|x|eu|123.45|2022-01-08",
                "12|false|2|y|us|123.46|2022-01-09",
                "23||||zz||"
            ]
        );
        assert_eq!(hive[2].len(), 3, "s = 'x' matches one file");
        // The filter prunes files by the partition values.
        let explain = rows(&s, "EXPLAIN SELECT id FROM ns.hive WHERE s = 'y'")
            .await
            .join("\n");
        assert!(explain.contains("files=1 of 3"), "{explain}");
        if v3 {
            assert_eq!(
                rows(&s, "SELECT tsn FROM ns.hive WHERE id = 2").await,
                ["2023-11-14T22:13:20.000000123"]
            );
        }
    }
}

/// Statements run on both tables, the answers compared after each.
const DML_ON_HIVE_STYLE: &[&str] = &[
    "SET iceberg.delete_mode = 'merge-on-read'",
    "DELETE FROM ns.{t} WHERE b AND id = 1",
    "SET iceberg.update_mode = 'copy-on-write'",
    "UPDATE ns.{t} SET v = 'up' WHERE s = 'y' OR region = 'zz'",
    "SET iceberg.delete_mode = 'copy-on-write'",
    "DELETE FROM ns.{t} WHERE id = 22",
    "SET iceberg.update_mode = 'merge-on-read'",
    "UPDATE ns.{t} SET v = concat(v, '!') WHERE b",
    "SET iceberg.merge_mode = 'merge-on-read'",
    "MERGE INTO ns.{t} t USING (SELECT 3 AS id UNION ALL SELECT 40) src ON t.id = src.id \
     WHEN MATCHED THEN UPDATE SET v = 'merged' \
     WHEN NOT MATCHED THEN INSERT (id, v, region) VALUES (src.id, 'new', 'eu')",
    "SET iceberg.merge_mode = 'copy-on-write'",
    "MERGE INTO ns.{t} t USING (SELECT 21 AS id) src ON t.id = src.id \
     WHEN MATCHED THEN UPDATE SET v = 'merged-cow'",
];

#[tokio::test]
async fn deletes_and_dml_on_tables_whose_files_lack_identity_columns() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    create_typed_table(&s, "hive", false, true, true).await;
    create_typed_table(&s, "oracle", false, false, true).await;
    append_hive_style(&s, false, "hive", "oracle").await;

    // Equality deletes keyed on identity partition columns, each scoped to its row's partition
    // in the Hive-style table: (s, id) of row 2, and `region` of row 13 (all of partition 1).
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    for (filter, key) in [("id = 2", vec!["s", "id"]), ("id = 13", vec!["region"])] {
        let rows_of = |t: &str| format!("SELECT * FROM ns.{t} WHERE {filter}");
        let batches = sql(&s, &rows_of("oracle")).await.unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        for t in ["hive", "oracle"] {
            let ident = TableIdent::from_strs(["ns", t]).unwrap();
            let table = s.catalog().load_table(&ident).await.unwrap();
            let schema = table.metadata().current_schema().clone();
            let ids: Vec<i32> = key
                .iter()
                .map(|n| schema.field_by_name(n).unwrap().id)
                .collect();
            let spec_id = table.metadata().default_partition_spec_id();
            // The hive table's delete lives in the deleted row's partition.
            let partition = match t {
                "hive" => {
                    let k = if filter == "id = 13" { 1 } else { 0 };
                    Struct::from_iter(
                        partition_columns(false)
                            .iter()
                            .map(|c| partition_value(c.name, k).map(Literal::Primitive)),
                    )
                }
                _ => Struct::empty(),
            };
            let file = iceberg_exec::physical_plan::write::write_equality_delete_file(
                &table, ids, spec_id, partition, &batches,
            )
            .await
            .unwrap();
            let changes = SnapshotChanges {
                operation: iceberg::spec::Operation::Delete,
                added_delete_files: vec![file],
                ..Default::default()
            };
            commit(Arc::clone(&store), &ident, changes).await.unwrap();
        }
    }
    let hive = answers(&s, "hive", PROJECTION_QUERIES).await;
    assert_eq!(hive, answers(&s, "oracle", PROJECTION_QUERIES).await);
    assert_eq!(
        rows(&s, "SELECT id FROM ns.hive ORDER BY id").await,
        ["1", "3", "21", "22", "23"]
    );

    for statement in DML_ON_HIVE_STYLE {
        for t in ["hive", "oracle"] {
            let q = statement.replace("{t}", t);
            sql(&s, &q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
        }
        let hive = answers(&s, "hive", PROJECTION_QUERIES).await;
        let oracle = answers(&s, "oracle", PROJECTION_QUERIES).await;
        for ((q, h), o) in PROJECTION_QUERIES.iter().zip(&hive).zip(&oracle) {
            assert_eq!(h, o, "after {statement}: {q}");
        }
    }
    assert_eq!(
        rows(&s, "SELECT id, v, s, region FROM ns.hive ORDER BY id").await,
        [
            "3|merged|x|eu",
            "21|merged-cow||zz",
            "23|up||zz",
            "40|new||eu"
        ]
    );
}

/// Rewrites every manifest of an unpartitioned table the way BigQuery writes them: the entries'
/// `partition` null in every entry, typed as an optional record (or, when `null_type`, as
/// Avro's `null`), and (when `strip`) no metadata keys, compressed by `codec`.
fn null_partitions_in_manifests(
    table_dir: &Path,
    strip: bool,
    null_type: bool,
    codec: apache_avro::Codec,
) -> usize {
    let mut rewritten = 0;
    for path in avro_files(table_dir) {
        if is_manifest_list(&path) {
            continue;
        }
        let (schema, mut meta, mut records) = read_avro(&path);
        let mut json: serde_json::Value = serde_json::to_value(&schema).unwrap();
        let data_file = json["fields"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|f| f["name"] == "data_file")
            .unwrap();
        let partition = data_file["type"]["fields"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|f| f["name"] == "partition")
            .unwrap();
        let record = partition["type"].take();
        assert_eq!(record["fields"], serde_json::json!([]), "unpartitioned");
        partition["type"] = match null_type {
            true => serde_json::json!("null"),
            false => serde_json::json!(["null", record]),
        };
        let schema = apache_avro::Schema::parse_str(&json.to_string()).unwrap();
        for r in &mut records {
            *field_mut(field_mut(r, "data_file"), "partition") = match null_type {
                true => Value::Null,
                false => Value::Union(0, Box::new(Value::Null)),
            };
        }
        if strip {
            for k in MANIFEST_KEYS.iter().chain(&["schema-id"]) {
                meta.remove(*k);
            }
        }
        write_avro_with(&path, &schema, &meta, records, codec);
        rewritten += 1;
    }
    rewritten
}

#[tokio::test]
async fn null_partitions_of_an_unpartitioned_spec_read_as_the_empty_tuple() {
    let _cache = no_manifest_cache().await;
    use apache_avro::Codec;
    for (strip, null_type, codec) in [
        (false, false, Codec::Deflate(Default::default())),
        (true, false, Codec::Snappy),
        (false, true, Codec::Zstandard(Default::default())),
        (true, true, Codec::Null),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        for q in [
            "CREATE SCHEMA ns",
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, region VARCHAR, v INT) STORED AS ICEBERG \
             LOCATION '' OPTIONS ('format-version' '2', 'write.delete.mode' 'merge-on-read')",
            "INSERT INTO ns.t VALUES (1, 'eu', 10), (2, 'eu', 20), (3, 'us', 30), (4, 'us', 40), (5, 'ap', 50)",
            "INSERT INTO ns.t VALUES (6, 'eu', 60), (7, 'ap', 70)",
            "DELETE FROM ns.t WHERE v IN (20, 70)",
        ] {
            sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
        }
        let table_dir = dir.path().join("ns/t");
        assert!(null_partitions_in_manifests(&table_dir, strip, null_type, codec) >= 3);
        assert_eq!(
            rows(&s, ALL).await,
            LIVE,
            "strip={strip} null_type={null_type}"
        );
        // Commits read the parent's manifests and write them on.
        sql(&s, "SET iceberg.delete_mode = 'copy-on-write'")
            .await
            .unwrap();
        assert_eq!(rows(&s, "DELETE FROM ns.t WHERE id = 3").await, ["1"]);
        sql(&s, "INSERT INTO ns.t VALUES (8, 'us', 80)")
            .await
            .unwrap();
        assert_eq!(
            rows(&s, ALL).await,
            ["1|eu|10", "4|us|40", "5|ap|50", "6|eu|60", "8|us|80"]
        );
        let compacted = s
            .sql("CALL system.rewrite_data_files(table => 'ns.t')")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(compacted.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert_eq!(rows(&s, "SELECT sum(v) FROM ns.t").await, ["240"]);
    }
}

#[tokio::test]
async fn position_delete_rows_whose_file_path_or_pos_is_null_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, v INT) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('format-version' '2')",
        "INSERT INTO ns.t VALUES (0, 0), (1, 10), (2, 20), (3, 30), (4, 40)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let data = iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await
        .unwrap();
    assert_eq!(data.len(), 1);
    let data_path = data[0].path.clone();
    // Impala's rows: a NULL file_path (with and without a pos) and a NULL pos among real
    // deletes of positions 1 and 3.
    let paths: Vec<Option<&str>> = vec![
        Some(&data_path),
        None,
        Some(&data_path),
        None,
        Some(&data_path),
    ];
    let positions: Vec<Option<i64>> = vec![Some(1), Some(2), None, None, Some(3)];
    let batch = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(vec![
            field_with_id("file_path", DataType::Utf8, true, 2147483546),
            field_with_id("pos", DataType::Int64, true, 2147483545),
        ])),
        vec![
            Arc::new(StringArray::from(paths)),
            Arc::new(Int64Array::from(positions)),
        ],
    )
    .unwrap();
    let path = dir.path().join("ns/t/data/impala-deletes.parquet");
    let size = write_parquet(&path, &batch);
    let file = parquet_entry(
        DataContentType::PositionDeletes,
        &path,
        Struct::empty(),
        0,
        5,
        size,
    );
    let changes = SnapshotChanges {
        operation: iceberg::spec::Operation::Delete,
        added_delete_files: vec![NewFile { spec_id: 0, file }],
        ..Default::default()
    };
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    commit(store, &ident, changes).await.unwrap();
    // Both routes: position bitmaps, and the sorted anti-join.
    for threshold in ["20000000", "0"] {
        sql(
            &s,
            &format!("SET iceberg.position_delete_join_threshold = {threshold}"),
        )
        .await
        .unwrap();
        assert_eq!(
            rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
            ["0", "2", "4"],
            "threshold {threshold}"
        );
    }
    // Statements read the table as queries do.
    assert_eq!(rows(&s, "DELETE FROM ns.t WHERE id = 4").await, ["1"]);
    assert_eq!(rows(&s, "SELECT sum(v) FROM ns.t").await, ["20"]);
}

// ---------------------------------------------------------------------------------------------
// `initial-default` values of fields a file lacks, nested at any depth.

/// A v3 table whose fields (nested in structs, list elements and map values, and top-level)
/// were added with defaults after its one data file was written: the file stores `id`, `s.x`,
/// `l.element.a` and `m.value.c` only.
async fn table_with_nested_defaults(s: &iceberg_exec::IcebergSession) {
    use iceberg::spec::{
        FormatVersion, ListType, MapType, NestedField, PrimitiveLiteral, PrimitiveType,
        Schema as IcebergSchema, StructType, Type,
    };
    use iceberg::{NamespaceIdent, TableCreation};
    let p = |t: PrimitiveType| Type::Primitive(t);
    let d = |v: PrimitiveLiteral| Literal::Primitive(v);
    let inner = Type::Struct(StructType::new(vec![NestedField::optional(
        10,
        "q",
        p(PrimitiveType::String),
    )
    .with_initial_default(d(PrimitiveLiteral::String("q".into())))
    .into()]));
    let s_type = Type::Struct(StructType::new(vec![
        NestedField::optional(3, "x", p(PrimitiveType::Int)).into(),
        NestedField::optional(4, "z", p(PrimitiveType::Int))
            .with_initial_default(d(PrimitiveLiteral::Int(7)))
            .into(),
        NestedField::optional(5, "str", p(PrimitiveType::String))
            .with_initial_default(d(PrimitiveLiteral::String("dflt".into())))
            .into(),
        NestedField::optional(
            6,
            "dec",
            p(PrimitiveType::Decimal {
                precision: 9,
                scale: 2,
            }),
        )
        .with_initial_default(d(PrimitiveLiteral::Int128(150)))
        .into(),
        NestedField::optional(7, "bin", p(PrimitiveType::Binary))
            .with_initial_default(d(PrimitiveLiteral::Binary(vec![0xca, 0xfe])))
            .into(),
        NestedField::optional(8, "ts", p(PrimitiveType::Timestamp))
            .with_initial_default(d(PrimitiveLiteral::Long(1_700_000_000_000_000)))
            .into(),
        NestedField::optional(24, "u", p(PrimitiveType::Uuid))
            .with_initial_default(d(PrimitiveLiteral::UInt128(0xff)))
            .into(),
        NestedField::optional(9, "inner", inner)
            .with_initial_default(Literal::Struct(Struct::from_iter([None])))
            .into(),
    ]));
    let element = Type::Struct(StructType::new(vec![
        NestedField::optional(13, "a", p(PrimitiveType::Int)).into(),
        NestedField::optional(14, "b", p(PrimitiveType::String))
            .with_initial_default(d(PrimitiveLiteral::String("lb".into())))
            .into(),
    ]));
    let value = Type::Struct(StructType::new(vec![
        NestedField::optional(18, "c", p(PrimitiveType::Int)).into(),
        NestedField::optional(19, "d", p(PrimitiveType::Long))
            .with_initial_default(d(PrimitiveLiteral::Long(9)))
            .into(),
    ]));
    let t_type = Type::Struct(StructType::new(vec![
        NestedField::optional(21, "p", p(PrimitiveType::Int))
            .with_initial_default(d(PrimitiveLiteral::Int(1)))
            .into(),
        NestedField::optional(22, "r", p(PrimitiveType::String)).into(),
    ]));
    let schema = IcebergSchema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", p(PrimitiveType::Long)).into(),
            NestedField::optional(2, "s", s_type).into(),
            NestedField::optional(
                11,
                "l",
                Type::List(ListType::new(
                    NestedField::list_element(12, element, false).into(),
                )),
            )
            .into(),
            NestedField::optional(
                15,
                "m",
                Type::Map(MapType::new(
                    NestedField::map_key_element(16, p(PrimitiveType::String)).into(),
                    NestedField::map_value_element(17, value, false).into(),
                )),
            )
            .into(),
            NestedField::optional(20, "t", t_type)
                .with_initial_default(Literal::Struct(Struct::from_iter([None, None])))
                .into(),
            NestedField::optional(23, "top", p(PrimitiveType::Int))
                .with_initial_default(d(PrimitiveLiteral::Int(42)))
                .into(),
        ])
        .build()
        .unwrap();
    let creation = TableCreation::builder()
        .name("defaults".to_string())
        .schema(schema)
        .format_version(FormatVersion::V3)
        .build();
    let table = s
        .catalog()
        .create_table(&NamespaceIdent::new("ns".into()), creation)
        .await
        .unwrap();

    // The old file: rows 1 (everything set), 2 (NULL struct, list and map), 3 (an empty list,
    // a NULL map value). Field ids as the catalog assigned them.
    let created = table.metadata().current_schema().clone();
    let id = |name: &str| created.field_by_name(name).unwrap().id;
    use arrow::array::{Array, ArrayRef, Int32Array, ListArray, MapArray, StructArray};
    use arrow::buffer::{NullBuffer, OffsetBuffer};
    use arrow::datatypes::{Field, Fields};
    let s_fields = Fields::from(vec![field_with_id("x", DataType::Int32, true, id("s.x"))]);
    let s_array = StructArray::new(
        s_fields.clone(),
        vec![Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])) as ArrayRef],
        Some(NullBuffer::from(vec![true, false, true])),
    );
    let element_fields = Fields::from(vec![field_with_id(
        "a",
        DataType::Int32,
        true,
        id("l.element.a"),
    )]);
    let element_field = Arc::new(field_with_id(
        "element",
        DataType::Struct(element_fields.clone()),
        true,
        id("l.element"),
    ));
    let elements = StructArray::new(
        element_fields,
        vec![Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef],
        None,
    );
    let l_array = ListArray::new(
        Arc::clone(&element_field),
        OffsetBuffer::new(vec![0, 2, 2, 2].into()),
        Arc::new(elements),
        Some(NullBuffer::from(vec![true, false, true])),
    );
    let value_fields = Fields::from(vec![field_with_id(
        "c",
        DataType::Int32,
        true,
        id("m.value.c"),
    )]);
    let entry_fields = Fields::from(vec![
        field_with_id("key", DataType::Utf8, false, id("m.key")),
        field_with_id(
            "value",
            DataType::Struct(value_fields.clone()),
            true,
            id("m.value"),
        ),
    ]);
    let entries = StructArray::new(
        entry_fields.clone(),
        vec![
            Arc::new(StringArray::from(vec!["k1", "k3"])) as ArrayRef,
            Arc::new(StructArray::new(
                value_fields,
                vec![Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef],
                Some(NullBuffer::from(vec![true, false])),
            )),
        ],
        None,
    );
    let m_array = MapArray::new(
        Arc::new(Field::new(
            "key_value",
            DataType::Struct(entry_fields),
            false,
        )),
        OffsetBuffer::new(vec![0, 1, 1, 2].into()),
        entries,
        Some(NullBuffer::from(vec![true, false, true])),
        false,
    );
    let batch = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(vec![
            field_with_id("id", DataType::Int64, false, id("id")),
            field_with_id("s", s_array.data_type().clone(), true, id("s")),
            field_with_id("l", l_array.data_type().clone(), true, id("l")),
            field_with_id("m", m_array.data_type().clone(), true, id("m")),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(s_array),
            Arc::new(l_array),
            Arc::new(m_array),
        ],
    )
    .unwrap();
    let location = table.metadata().location().trim_start_matches("file://");
    let data_dir = PathBuf::from(location).join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let path = data_dir.join("old.parquet");
    let size = write_parquet(&path, &batch);
    let file = parquet_entry(DataContentType::Data, &path, Struct::empty(), 0, 3, size);
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let ident = TableIdent::from_strs(["ns", "defaults"]).unwrap();
    commit(
        store,
        &ident,
        SnapshotChanges::append(vec![NewFile { spec_id: 0, file }]),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn nested_fields_a_file_lacks_read_as_their_initial_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    table_with_nested_defaults(&s).await;
    let q = |select: &str| format!("SELECT {select} FROM ns.defaults ORDER BY id");
    assert_eq!(
        rows(
            &s,
            &q("id, s['x'], s['z'], s['str'], s['dec'], s['bin'], s['ts'], s['inner']['q']")
        )
        .await,
        [
            "1|1|7|dflt|1.50|cafe|2023-11-14T22:13:20|q",
            "2|||||||",
            "3|3|7|dflt|1.50|cafe|2023-11-14T22:13:20|q",
        ]
    );
    // Inside list elements and map values; a NULL map value stays NULL.
    assert_eq!(
        rows(
            &s,
            &q("id, l[1]['a'], l[1]['b'], l[2]['b'], cardinality(l), m['k1']['d'], m['k3']")
        )
        .await,
        ["1|1|lb|lb|2|9|", "2||||||", "3||||0||"]
    );
    // Columns the file lacks entirely: `{}` is a struct of its fields' defaults.
    assert_eq!(
        rows(&s, &q("id, t['p'], t['r'], t IS NULL, \"top\"")).await,
        ["1|1||false|42", "2|1||false|42", "3|1||false|42"]
    );
    // Whole structs carry the defaults too, and filters see them.
    let whole = rows(&s, &q("s, l")).await;
    assert!(
        whole[0].contains("z: 7") && whole[0].contains("b: lb"),
        "{whole:?}"
    );
    assert_eq!(
        rows(
            &s,
            "SELECT id FROM ns.defaults WHERE s['z'] = 7 AND \"top\" = 42 ORDER BY id"
        )
        .await,
        ["1", "3"]
    );
    // The UUID default, as the column is read.
    assert_eq!(
        rows(
            &s,
            "SELECT count(*) FROM ns.defaults WHERE s['u'] IS NOT NULL"
        )
        .await,
        ["2"]
    );
}

/// Data files of a format this reader does not read (Avro), or that do not read (a broken ORC
/// file), fail the scan with one line naming the file and its format, not as a corrupt parquet
/// file.
#[tokio::test]
async fn data_files_of_other_formats_are_named_not_read_as_corrupt_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.t (id BIGINT) STORED AS ICEBERG LOCATION ''",
        "INSERT INTO ns.t VALUES (1), (2)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    for (format, magic, name) in [
        (DataFileFormat::Orc, &b"ORC"[..], "hive.orc"),
        (DataFileFormat::Avro, &b"Obj\x01"[..], "old.avro"),
    ] {
        let path = dir.path().join("ns/t/data").join(name);
        let mut bytes = magic.to_vec();
        bytes.resize(512, 7);
        std::fs::write(&path, &bytes).unwrap();
        let file = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path.display().to_string())
            .file_format(format)
            .partition(Struct::empty())
            .partition_spec_id(0)
            .record_count(3)
            .file_size_in_bytes(bytes.len() as u64)
            .build()
            .unwrap();
        commit(
            Arc::clone(&store),
            &ident,
            SnapshotChanges::append(vec![NewFile { spec_id: 0, file }]),
        )
        .await
        .unwrap();
        let e = sql(&s, "SELECT sum(id) FROM ns.t")
            .await
            .unwrap_err()
            .to_string();
        // An ORC file goes to the ORC reader (this one is no real ORC file); Avro is named.
        let expected = if name.ends_with("orc") {
            "ORC data file".to_string()
        } else {
            "is an Avro file".to_string()
        };
        assert!(e.contains(&expected) && e.contains(name), "{e}");
        assert!(!e.contains("Corrupt footer"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        // Taken out again, the table reads.
        let changes = SnapshotChanges {
            operation: iceberg::spec::Operation::Delete,
            removed_files: [path.display().to_string()].into_iter().collect(),
            ..Default::default()
        };
        commit(Arc::clone(&store), &ident, changes).await.unwrap();
        assert_eq!(rows(&s, "SELECT sum(id) FROM ns.t").await, ["3"]);
    }
}

/// ORC data files (Hive, Impala and Trino write them) read beside parquet ones: columns by the
/// Iceberg field ids in the files' type attributes (or by name in a file without them), types
/// promoted, the identity partition value for the column the files do not store; filters,
/// EXPLAIN, copy-on-write DML (which rewrites them as parquet), and a one-line refusal where
/// row positions are needed.
#[tokio::test]
async fn orc_data_files_read_beside_parquet_ones() {
    use crate::common::hive_style::add_orc_file;
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.o (id BIGINT NOT NULL, name VARCHAR, ts TIMESTAMP, \
         d DECIMAL(10, 2), region VARCHAR) STORED AS ICEBERG LOCATION '' \
         PARTITIONED BY (region) OPTIONS ('write.delete.mode' 'copy-on-write', \
         'write.update.mode' 'copy-on-write')",
        "INSERT INTO ns.o VALUES (100, 'p', TIMESTAMP '2020-02-02 02:02:02', 1.00, 'eu')",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    // The vendored files carry ids 1..4 for id, name, ts, d.
    let t = s
        .catalog()
        .load_table(&iceberg::TableIdent::from_strs(["ns", "o"]).unwrap())
        .await
        .unwrap();
    for (name, id) in [("id", 1), ("name", 2), ("ts", 3), ("d", 4)] {
        assert_eq!(
            t.metadata()
                .current_schema()
                .field_by_name(name)
                .unwrap()
                .id,
            id
        );
    }
    add_orc_file(&s, "o", "with_ids.orc", "eu").await;
    add_orc_file(&s, "o", "without_ids.orc", "us").await;

    assert_eq!(
        rows(&s, "SELECT * FROM ns.o ORDER BY id").await,
        [
            "1|a|2024-01-01T12:30:00.000250|1.25|eu",
            "2||2024-01-02T12:30:00.000250|2.25|eu",
            "3|c||3.25|eu",
            "4|d|2024-01-04T12:30:00.000250|4.25|eu",
            "5|e|2024-01-05T12:30:00.000250|5.25|eu",
            "11|x|1999-12-31T23:59:59|-1.50|us",
            "12|y|||us",
            "13||2000-01-01T00:00:00|99999999.99|us",
            "100|p|2020-02-02T02:02:02|1.00|eu",
        ]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT id, region FROM ns.o WHERE region = 'us' AND d > 0 ORDER BY id"
        )
        .await,
        ["13|us"]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT count(*), sum(id) FROM ns.o WHERE name IS NOT NULL"
        )
        .await,
        ["7|136"]
    );
    let plan = rows(&s, "EXPLAIN SELECT * FROM ns.o WHERE id > 2")
        .await
        .join("\n");
    assert!(plan.contains("file_type=orc"), "{plan}");
    assert!(plan.contains("file_type=parquet"), "{plan}");

    // Copy-on-write rewrites the ORC files it changes as parquet files.
    sql(&s, "DELETE FROM ns.o WHERE id IN (2, 12)")
        .await
        .unwrap();
    sql(&s, "UPDATE ns.o SET name = 'z' WHERE id = 13")
        .await
        .unwrap();
    assert_eq!(
        rows(&s, "SELECT id, name, region FROM ns.o ORDER BY id").await,
        ["1|a|eu", "3|c|eu", "4|d|eu", "5|e|eu", "11|x|us", "13|z|us", "100|p|eu"]
    );
    // Merge-on-read deletes rows of ORC files by position; their positions read as `_pos`.
    add_orc_file(&s, "o", "with_ids.orc", "us").await;
    // (metadata columns are named through the session's SQL)
    let session_rows = |q: &'static str| {
        let s = s.clone();
        async move { crate::common::render(&s.sql(q).await.unwrap().collect().await.unwrap()) }
    };
    assert_eq!(
        session_rows("SELECT id, _pos FROM ns.o WHERE region = 'us' AND id < 10 ORDER BY id").await,
        ["1|0", "2|1", "3|2", "4|3", "5|4"]
    );
    for q in [
        "SET iceberg.delete_mode = 'merge-on-read'",
        "SET iceberg.update_mode = 'merge-on-read'",
        "DELETE FROM ns.o WHERE region = 'us' AND id IN (2, 4)",
        "UPDATE ns.o SET name = 'u' WHERE region = 'us' AND id = 5",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    assert_eq!(
        session_rows("SELECT id, name, _pos FROM ns.o WHERE region = 'us' AND id < 10 ORDER BY id")
            .await,
        ["1|a|0", "3|c|2", "5|u|0"]
    );
    sql(
        &s,
        "MERGE INTO ns.o t USING (SELECT 3 AS id, 'us' AS region) src \
         ON t.id = src.id AND t.region = src.region WHEN MATCHED THEN DELETE",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&s, "SELECT id FROM ns.o WHERE region = 'us' ORDER BY id").await,
        ["1", "5", "11", "13"]
    );
}

/// An ORC file whose first column is a struct: the columns after it are found by their ORC
/// type ids (a nested column's children take ids too), not by their positions.
#[tokio::test]
async fn orc_columns_after_a_struct_read_by_their_type_ids() {
    use crate::common::hive_style::add_orc_file;
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.n (s STRUCT<a INT>, id BIGINT NOT NULL, name VARCHAR, \
         region VARCHAR) STORED AS ICEBERG LOCATION '' PARTITIONED BY (region)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let t = s
        .catalog()
        .load_table(&iceberg::TableIdent::from_strs(["ns", "n"]).unwrap())
        .await
        .unwrap();
    let ids: Vec<i32> = ["s", "id", "name", "region", "s.a"]
        .iter()
        .map(|n| t.metadata().current_schema().field_by_name(n).unwrap().id)
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5], "the ids nested.orc carries");
    add_orc_file(&s, "n", "nested.orc", "eu").await;
    assert_eq!(
        rows(&s, "SELECT id, name, region FROM ns.n ORDER BY id").await,
        ["1|n1|eu", "2|n2|eu", "3||eu"]
    );
    assert_eq!(rows(&s, "SELECT name FROM ns.n WHERE id = 2").await, ["n2"]);
    assert_eq!(
        rows(&s, "SELECT id, s.a FROM ns.n ORDER BY id").await,
        ["1|10", "2|", "3|30"]
    );
}

/// An ORC file written before its table evolved is read by field id at every depth, as parquet
/// files are: a struct's fields in another order and renamed since, a column the table dropped
/// left out, columns and nested fields added with an `initial-default` since read as it,
/// nanosecond timestamps at full precision.
#[tokio::test]
async fn orc_files_of_an_evolved_table_read_by_field_id() {
    use crate::common::hive_style::add_orc_file;
    use iceberg::spec::{
        FormatVersion, NestedField, PrimitiveLiteral, PrimitiveType, Schema as IcebergSchema,
        StructType, Transform, Type, UnboundPartitionSpec,
    };
    use iceberg::{NamespaceIdent, TableCreation};
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    let p = |t: PrimitiveType| Type::Primitive(t);
    let s_type = Type::Struct(StructType::new(vec![
        NestedField::optional(7, "a", p(PrimitiveType::Int)).into(),
        NestedField::optional(8, "b", p(PrimitiveType::String)).into(),
        NestedField::optional(9, "c", p(PrimitiveType::String))
            .with_initial_default(Literal::Primitive(PrimitiveLiteral::String("dflt".into())))
            .into(),
    ]));
    let schema = IcebergSchema::builder()
        .with_fields(vec![
            NestedField::optional(1, "s", s_type).into(),
            NestedField::required(2, "id", p(PrimitiveType::Long)).into(),
            NestedField::optional(3, "tsn", p(PrimitiveType::TimestampNs)).into(),
            NestedField::optional(4, "tsz", p(PrimitiveType::TimestamptzNs)).into(),
            NestedField::optional(5, "extra", p(PrimitiveType::Int))
                .with_initial_default(Literal::Primitive(PrimitiveLiteral::Int(42)))
                .into(),
            NestedField::optional(6, "region", p(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap();
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(6, "region", Transform::Identity)
        .unwrap()
        .build();
    let creation = TableCreation::builder()
        .name("e".to_string())
        .schema(schema)
        .partition_spec(spec)
        .format_version(FormatVersion::V3)
        .build();
    let table = s
        .catalog()
        .create_table(&NamespaceIdent::new("ns".into()), creation)
        .await
        .unwrap();
    let created = table.metadata().current_schema();
    let ids: Vec<i32> = [
        "s", "id", "tsn", "tsz", "extra", "region", "s.a", "s.b", "s.c",
    ]
    .iter()
    .map(|n| created.field_by_name(n).unwrap().id)
    .collect();
    assert_eq!(
        ids,
        [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "the ids evolved.orc carries"
    );
    add_orc_file(&s, "e", "evolved.orc", "eu").await;

    assert_eq!(
        rows(
            &s,
            "SELECT id, s.a, s.b, s.c, extra, region FROM ns.e ORDER BY id"
        )
        .await,
        ["1|1|x|dflt|42|eu", "2||||42|eu", "3|3||dflt|42|eu"]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT id, CAST(tsn AS BIGINT), CAST(tsz AS BIGINT) FROM ns.e ORDER BY id"
        )
        .await,
        [
            "1|1700000000123456789|1700000000000000001",
            "2||5",
            "3|-86400000000000|",
        ]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT id FROM ns.e WHERE s.b = 'x' OR s.a = 3 ORDER BY id"
        )
        .await,
        ["1", "3"]
    );
    // The dropped column is not the table's, by any name.
    let err = sql(&s, "SELECT gone FROM ns.e")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("gone"), "{err}");
    // A row-changing statement rewrites the file with the values as read.
    sql(&s, "DELETE FROM ns.e WHERE id = 2").await.unwrap();
    assert_eq!(
        rows(
            &s,
            "SELECT id, s.b, s.c, extra, CAST(tsn AS BIGINT) FROM ns.e ORDER BY id"
        )
        .await,
        [
            "1|x|dflt|42|1700000000123456789",
            "3||dflt|42|-86400000000000"
        ]
    );
}

/// An ORC file without field ids (written before the table had them) is read through the
/// table's `schema.name-mapping.default`, as parquet files without ids are.
#[tokio::test]
async fn orc_files_without_ids_read_through_the_name_mapping() {
    use crate::common::hive_style::add_orc_file;
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let mapping = r#"[{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["name"]},
        {"field-id": 3, "names": ["ts"]}, {"field-id": 4, "names": ["d"]}]"#;
    for q in [
        "CREATE SCHEMA ns".to_string(),
        format!(
            "CREATE EXTERNAL TABLE ns.m (k BIGINT, label VARCHAR, moment TIMESTAMP,              amount DECIMAL(10, 2), region VARCHAR) STORED AS ICEBERG LOCATION ''              PARTITIONED BY (region) OPTIONS ('schema.name-mapping.default' '{}')",
            mapping.replace('\n', " ")
        ),
    ] {
        sql(&s, &q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    add_orc_file(&s, "m", "without_ids.orc", "us").await;
    assert_eq!(
        rows(
            &s,
            "SELECT k, label, moment, amount, region FROM ns.m ORDER BY k"
        )
        .await,
        [
            "11|x|1999-12-31T23:59:59|-1.50|us",
            "12|y|||us",
            "13||2000-01-01T00:00:00|99999999.99|us",
        ]
    );
    assert_eq!(rows(&s, "SELECT label FROM ns.m WHERE k = 12").await, ["y"]);
}
