//! Interop with real clients: pyiceberg 0.12 (SqlCatalog on SQLite) and DuckDB's iceberg
//! extension, installed from PyPI into a venv this test creates on first use
//! (`$ICEBERG_EXEC_VENV`, default `~/.cache/iceberg-exec-venv`).

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use crate::common::venv::{python, repo};
use serde_json::Value;

fn tool(args: &[&str]) -> Value {
    let out = Command::new(python())
        .arg(repo().join("tests/interop/pyiceberg_tool.py"))
        .args(args)
        .output()
        .expect("run pyiceberg_tool.py");
    assert!(
        out.status.success(),
        "pyiceberg_tool {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("tool prints JSON")
}

fn ours(warehouse: &Path, sql: &str) -> Vec<serde_json::Map<String, Value>> {
    let out = Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .args(["--warehouse"])
        .arg(warehouse)
        .args(["--format", "json", "sql", sql])
        .output()
        .expect("run iceberg-exec");
    assert!(
        out.status.success(),
        "iceberg-exec {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| match serde_json::from_str(l).expect("json line") {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        })
        .collect()
}

/// The newest metadata file under `dir` (a table's `metadata/` folder).
fn latest_metadata(dir: &Path) -> String {
    let mut metas: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .collect();
    metas.sort();
    metas.last().unwrap().display().to_string()
}

/// Our JSON rows as lists in `columns` order (absent keys are NULL).
fn as_lists(rows: &[serde_json::Map<String, Value>], columns: &[&str]) -> Vec<Vec<Value>> {
    rows.iter()
        .map(|r| {
            columns
                .iter()
                .map(|c| r.get(*c).cloned().unwrap_or(Value::Null))
                .collect()
        })
        .collect()
}

/// Numbers compared as f64 (JSON writers differ in `2` vs `2.0`).
fn normalise(rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    rows.into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| match v {
                    Value::Number(n) => serde_json::json!(n.as_f64()),
                    other => other,
                })
                .collect()
        })
        .collect()
}

#[test]
fn pyiceberg_warehouse_reads_in_our_cli_and_our_tables_read_in_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    let created = tool(&["create-warehouse", "--warehouse", &whs]);

    // 1. pyiceberg's warehouse lists and reads in our CLI.
    let listed = ours(&wh, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema = 'pyns' ORDER BY table_name");
    let names: Vec<String> = listed
        .iter()
        .map(|r| {
            format!(
                "{}.{}",
                r["table_schema"].as_str().unwrap(),
                r["table_name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["pyns.events", "pyns.simple"]);

    let simple = ours(&wh, "SELECT id, label FROM pyns.simple ORDER BY id");
    let expected = created["tables"]["pyns.simple"].as_array().unwrap().clone();
    let expected: Vec<Vec<Value>> = expected
        .into_iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    assert_eq!(
        normalise(as_lists(&simple, &["id", "label"])),
        normalise(expected)
    );

    let cols = ["id", "name", "ts", "amount", "day"];
    let events = ours(
        &wh,
        "SELECT id, name, ts, amount, day FROM pyns.events ORDER BY id",
    );
    let expected: Vec<Vec<Value>> = created["tables"]["pyns.events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    assert_eq!(events.len(), 100);
    assert_eq!(normalise(as_lists(&events, &cols)), normalise(expected));

    // 2. A table we create and fill (partitioned, sorted) reads identically in pyiceberg.
    let setup = Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .args(["--warehouse"])
        .arg(&wh)
        .args([
            "sql",
            "CREATE SCHEMA ours;
             CREATE EXTERNAL TABLE ours.t (id BIGINT NOT NULL, name VARCHAR, ts TIMESTAMP, amount DOUBLE)
               STORED AS ICEBERG LOCATION '' OPTIONS ('partitioning' 'day(ts), bucket(3, id)', 'sort-order' 'id');
             INSERT INTO ours.t SELECT value, CASE WHEN value % 5 = 0 THEN NULL ELSE 'n' || CAST(value AS VARCHAR) END,
               to_timestamp_seconds(1748736000 + value * 25200), value * 0.5 FROM generate_series(1, 40);
             INSERT INTO ours.t VALUES (100, 'late', NULL, NULL);
             CREATE TABLE ours.copy AS SELECT id, label FROM pyns.simple;
             CREATE EXTERNAL TABLE ours.v1 (id BIGINT, d DATE) STORED AS ICEBERG LOCATION ''
               OPTIONS ('format-version' '1', 'partitioning' 'month(d)');
             INSERT INTO ours.v1 VALUES (1, DATE '2025-01-02'), (2, DATE '2025-02-03');
             INSERT INTO ours.v1 VALUES (3, NULL)",
        ])
        .output()
        .unwrap();
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );

    let theirs = tool(&["read", "--warehouse", &whs, "--table", "ours.t"]);
    let mine = ours(&wh, "SELECT id, name, ts, amount FROM ours.t");
    let mut mine = normalise(as_lists(&mine, &["id", "name", "ts", "amount"]));
    let theirs_rows: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    let theirs_rows = normalise(theirs_rows);
    mine.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
    let mut sorted_theirs = theirs_rows.clone();
    sorted_theirs.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
    assert_eq!(mine.len(), 41);
    assert_eq!(sorted_theirs, mine);

    // Format v1 (no sequence numbers) too.
    let v1 = tool(&["read", "--warehouse", &whs, "--table", "ours.v1"]);
    assert_eq!(
        v1["rows"],
        serde_json::json!([[1, "2025-01-02"], [2, "2025-02-03"], [3, null]])
    );

    let copy = tool(&["read", "--warehouse", &whs, "--table", "ours.copy"]);
    assert_eq!(copy["rows"].as_array().unwrap().len(), 10);

    // pyiceberg still lists everything through the catalog we wrote to.
    let list = tool(&["list", "--warehouse", &whs]);
    let tables: Vec<&str> = list["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for t in ["ours.copy", "ours.t", "pyns.events", "pyns.simple"] {
        assert!(tables.contains(&t), "{t} missing from {tables:?}");
    }

    // 3. DuckDB's iceberg extension reads our metadata too.
    let latest = latest_metadata(&wh.join("ours/t/metadata"));
    let duck = tool(&["duckdb-read", "--metadata", &latest]);
    let duck_rows: Vec<Vec<Value>> = duck["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    let mut duck_rows = normalise(duck_rows);
    duck_rows.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
    assert_eq!(duck_rows, mine);
}

#[test]
fn schema_and_partition_evolution_by_pyiceberg_reads_identically() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let theirs = tool(&["evolve", "--warehouse", &wh.display().to_string()]);
    let columns: Vec<&str> = theirs["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    // Renamed b -> bb, dropped c (float) and re-added c (string, new id), added extra.
    assert_eq!(columns, ["id", "bb", "cat", "c", "extra"]);
    let expected: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    let mine = ours(
        &wh,
        "SELECT id, bb, cat, c, extra FROM pyns.evolved ORDER BY id",
    );
    assert_eq!(normalise(as_lists(&mine, &columns)), normalise(expected));
    // Predicates on renamed and re-added columns resolve by field id too.
    let filtered = ours(
        &wh,
        "SELECT id FROM pyns.evolved WHERE bb = 'w' OR c = 'new-c' ORDER BY id",
    );
    assert_eq!(
        as_lists(&filtered, &["id"]),
        [[serde_json::json!(4)], [serde_json::json!(5)]]
    );
    // id was promoted int -> long: older files' bounds are 4-byte ints and must not prune wrongly.
    let promoted = ours(
        &wh,
        "SELECT id FROM pyns.evolved WHERE id > 1 AND cat = 'p' ORDER BY id",
    );
    assert_eq!(
        as_lists(&promoted, &["id"]),
        [[serde_json::json!(3)], [serde_json::json!(5)]]
    );
    let promoted = ours(&wh, "SELECT count(*) AS n FROM pyns.evolved WHERE id > 1");
    assert_eq!(promoted[0]["n"], serde_json::json!(5));

    // Written here after pyiceberg's changes (into its newest partition spec), then read back
    // by pyiceberg.
    ours(
        &wh,
        "INSERT INTO pyns.evolved (id, bb, cat, c, extra) VALUES (7, 'u', 'q', 'c7', 70); \
         DELETE FROM pyns.evolved WHERE id = 1; \
         ALTER TABLE pyns.evolved ADD COLUMN later INT",
    );
    let mine = ours(
        &wh,
        "SELECT id, bb, cat, c, extra FROM pyns.evolved ORDER BY id",
    );
    assert_eq!(mine.len(), 6);
    let theirs = tool(&[
        "read",
        "--warehouse",
        &wh.display().to_string(),
        "--table",
        "pyns.evolved",
    ]);
    let names: Vec<&str> = theirs["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "bb", "cat", "c", "extra", "later"]);
    let mut expected: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap()[..5].to_vec())
        .collect();
    expected.sort_by_key(|r| r[0].as_i64());
    assert_eq!(normalise(as_lists(&mine, &columns)), normalise(expected));
}

/// One value in a comparable form: timestamps as epoch microseconds, UUIDs without dashes,
/// decimals and numbers as f64.
fn canonical(column: &str, v: &Value) -> Value {
    use chrono::{DateTime, NaiveDateTime};
    match (column, v) {
        (_, Value::Null) => Value::Null,
        ("ts", Value::String(s)) => {
            let t = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").expect("timestamp");
            serde_json::json!(t.and_utc().timestamp_micros())
        }
        ("tstz", Value::String(s)) => {
            let t = DateTime::parse_from_rfc3339(s).expect("timestamptz");
            serde_json::json!(t.timestamp_micros())
        }
        ("u", Value::String(s)) => Value::String(s.replace('-', "")),
        ("dec", Value::String(s)) => serde_json::json!(s.parse::<f64>().expect("decimal")),
        (_, Value::Number(n)) => serde_json::json!(n.as_f64()),
        (_, other) => other.clone(),
    }
}

#[test]
fn every_primitive_type_written_by_pyiceberg_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let theirs = tool(&["types", "--warehouse", &wh.display().to_string()]);
    let columns: Vec<String> = theirs["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mine = ours(&wh, "SELECT * FROM pyns.types ORDER BY id");
    let mine = as_lists(&mine, &cols);
    let theirs: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    assert_eq!(mine.len(), 3);
    for (m, t) in mine.iter().zip(&theirs) {
        for (i, c) in cols.iter().enumerate() {
            assert_eq!(
                canonical(c, &m[i]),
                canonical(c, &t[i]),
                "column {c}: ours {} theirs {}",
                m[i],
                t[i]
            );
        }
    }
    // Predicates on these types prune and filter correctly too.
    let hits = ours(
        &wh,
        "SELECT id FROM pyns.types WHERE dt = DATE '2024-02-29' AND tstz > TIMESTAMP '2024-01-01T00:00:00Z' AND s = 'héllo'",
    );
    assert_eq!(as_lists(&hits, &["id"]), [[serde_json::json!(1)]]);
    // Their uuids print in canonical form and compare with text.
    let u = ours(
        &wh,
        "SELECT id, u FROM pyns.types WHERE u = '12345678-1234-5678-1234-567812345678'",
    );
    assert_eq!(
        as_lists(&u, &["id", "u"]),
        [[
            serde_json::json!(1),
            serde_json::json!("12345678-1234-5678-1234-567812345678")
        ]]
    );
}

#[test]
fn uuids_written_from_text_read_alike_in_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    ours(
        &wh,
        "CREATE SCHEMA ours; \
         CREATE TABLE ours.u (id INT NOT NULL, u UUID); \
         INSERT INTO ours.u VALUES (1, '1571effb-facd-42a3-9e6f-8c3a4b5c6d7e'), \
           (2, '{00000000-0000-0000-0000-000000000001}'), (3, NULL)",
    );
    let mine = ours(&wh, "SELECT id, u FROM ours.u ORDER BY id");
    let mine = as_lists(&mine, &["id", "u"]);
    assert_eq!(
        mine,
        [
            [
                serde_json::json!(1),
                serde_json::json!("1571effb-facd-42a3-9e6f-8c3a4b5c6d7e")
            ],
            [
                serde_json::json!(2),
                serde_json::json!("00000000-0000-0000-0000-000000000001")
            ],
            [serde_json::json!(3), Value::Null],
        ]
    );
    let theirs = tool(&["read", "--warehouse", &whs, "--table", "ours.u"]);
    let mut theirs: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    theirs.sort_by_key(|r| r[0].as_i64());
    let canon = |rows: &[Vec<Value>]| -> Vec<Vec<Value>> {
        rows.iter()
            .map(|r| vec![r[0].clone(), canonical("u", &r[1])])
            .collect()
    };
    assert_eq!(canon(&theirs), canon(&mine), "pyiceberg");
    let latest = latest_metadata(&wh.join("ours/u/metadata"));
    let duck = tool(&["duckdb-read", "--metadata", &latest]);
    let mut duck: Vec<Vec<Value>> = duck["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    duck.sort_by_key(|r| r[0].as_i64());
    assert_eq!(canon(&duck), canon(&mine), "duckdb");
}

#[test]
fn nested_types_read_and_renamed_nested_fields_read_by_field_id() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let theirs = tool(&["nested", "--warehouse", &wh.display().to_string()]);
    let mine = ours(&wh, "SELECT id, s, l FROM pyns.nested ORDER BY id");
    // Structs: a field absent from our JSON is NULL.
    let with_nulls = |v: Option<&Value>| match v {
        Some(Value::Object(o)) => serde_json::json!({
            "x": o.get("x").cloned().unwrap_or(Value::Null),
            "y": o.get("y").cloned().unwrap_or(Value::Null),
        }),
        Some(other) => other.clone(),
        None => Value::Null,
    };
    let mine: Vec<Value> = mine
        .iter()
        .map(|r| {
            serde_json::json!([
                r["id"],
                with_nulls(r.get("s")),
                r.get("l").cloned().unwrap_or(Value::Null)
            ])
        })
        .collect();
    assert_eq!(Value::Array(mine), theirs["rows"]);
    let maps = ours(
        &wh,
        "SELECT id, m['k1'] AS k1, m['k2'] AS k2, cardinality(m) AS n FROM pyns.nested ORDER BY id",
    );
    let maps = as_lists(&maps, &["id", "k1", "k2", "n"]);
    assert_eq!(
        maps,
        [
            [
                serde_json::json!(1),
                serde_json::json!(5),
                Value::Null,
                serde_json::json!(2)
            ],
            [
                serde_json::json!(2),
                Value::Null,
                Value::Null,
                serde_json::json!(0)
            ],
            [serde_json::json!(3), Value::Null, Value::Null, Value::Null],
        ]
    );
    // A struct field renamed after the data was written reads by its field id, as pyiceberg
    // reads it.
    let renamed = ours(
        &wh,
        "SELECT id, s['xx'] AS xx, s['y'] AS y FROM pyns.nested_renamed ORDER BY id",
    );
    let theirs = tool(&[
        "read",
        "--warehouse",
        &wh.display().to_string(),
        "--table",
        "pyns.nested_renamed",
    ]);
    let s_at = theirs["columns"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c == "s")
        .unwrap();
    let expected: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = &r[s_at];
            vec![
                r[0].clone(),
                s.get("xx").cloned().unwrap_or(Value::Null),
                s.get("y").cloned().unwrap_or(Value::Null),
            ]
        })
        .collect();
    assert_eq!(expected[0][1], serde_json::json!(10), "{expected:?}");
    assert_eq!(as_lists(&renamed, &["id", "xx", "y"]), expected);
}

/// Deletes from several writers on one table, read the same by our CLI, DuckDB and the spec:
/// position deletes written by pyarrow (`file_path` as `large_string`, one file with and one
/// without the Arrow schema footer), and position and equality deletes written by this crate.
#[test]
fn merge_on_read_deletes_from_pyarrow_and_ours_read_like_duckdb() {
    use std::sync::Arc;

    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, Literal, Operation, Struct,
    };
    use iceberg_exec::commit::{commit, NewFile, SnapshotChanges};
    use iceberg_exec::physical_plan::write::{
        write_equality_delete_file, write_position_delete_file,
    };
    use iceberg_exec::{IcebergSession, MetadataStore, WarehouseConfig};

    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().to_path_buf();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let metadata = rt.block_on(async {
        let s = IcebergSession::open(WarehouseConfig::local(&wh)).await.unwrap();
        let ctx = s.context();
        for q in [
            "CREATE SCHEMA ns",
            "CREATE EXTERNAL TABLE ns.t (id BIGINT, part INT NOT NULL, v VARCHAR) STORED AS ICEBERG LOCATION '' PARTITIONED BY (part)",
            "INSERT INTO ns.t SELECT value, CAST(value % 2 AS INT), 'first-' || value FROM generate_series(0, 99)",
            "INSERT INTO ns.t SELECT value, CAST(value % 2 AS INT), 'second-' || value FROM generate_series(100, 199)",
        ] {
            ctx.sql(q).await.unwrap().collect().await.unwrap();
        }
        let ident = iceberg::TableIdent::from_strs(["ns", "t"]).unwrap();
        let table = s.catalog().load_table(&ident).await.unwrap();
        let spec_id = table.metadata().default_partition_spec_id();
        let snapshot = table.metadata().current_snapshot().unwrap().clone();
        let files = iceberg_exec::file_planning::plan_files(&table, &snapshot).await.unwrap();
        // The data file of the first insert in partition 0 (even ids 0..98) and in partition 1.
        let first_even = files
            .iter()
            .find(|f| f.data_seq == 1 && f.partition == Struct::from_iter([Some(Literal::int(0))]))
            .unwrap()
            .path
            .clone();
        let first_odd = files
            .iter()
            .find(|f| f.data_seq == 1 && f.partition == Struct::from_iter([Some(Literal::int(1))]))
            .unwrap()
            .path
            .clone();
        let part = |p: i32| Struct::from_iter([Some(Literal::int(p))]);
        let mut added = vec![];
        // pyarrow: positions 0 and 1 of the even file (ids 0, 2), with the Arrow footer
        // (large_string) and positions 5 of the odd file (id 11) without it.
        for (name, target, positions, no_footer, p) in [
            ("pa-large-string.parquet", &first_even, vec![0, 1], false, 0),
            ("pa-no-footer.parquet", &first_odd, vec![5], true, 1),
        ] {
            let out = wh.join(name);
            let deletes: Vec<(String, i64)> =
                positions.iter().map(|pos| (target.clone(), *pos)).collect();
            let json = serde_json::to_string(&deletes).unwrap();
            let out_s = out.display().to_string();
            let mut args = vec!["write-pos-deletes", "--out", &out_s, "--deletes", &json];
            if no_footer {
                args.push("--no-arrow-schema");
            }
            let written = tool(&args);
            let file = DataFileBuilder::default()
                .content(DataContentType::PositionDeletes)
                .file_path(out_s.clone())
                .file_format(DataFileFormat::Parquet)
                .partition(part(p))
                .partition_spec_id(spec_id)
                .record_count(written["rows"].as_u64().unwrap())
                .file_size_in_bytes(written["size"].as_u64().unwrap())
                .referenced_data_file(Some(target.clone()))
                .build()
                .unwrap();
            added.push(NewFile { spec_id, file });
        }
        // Ours: position 10 of the even file (id 20), and an equality delete of ids 40, 42 and
        // 140 in partition 0 (where they live; both inserts are older than the delete).
        added.push(
            write_position_delete_file(&table, spec_id, part(0), vec![(first_even.clone(), 10)])
                .await
                .unwrap(),
        );
        let id_field = table.metadata().current_schema().field_by_name("id").unwrap().id;
        let keys = arrow::array::RecordBatch::try_from_iter([
            ("id", Arc::new(arrow::array::Int64Array::from(vec![40, 42, 140])) as arrow::array::ArrayRef),
            ("part", Arc::new(arrow::array::Int32Array::from(vec![0, 0, 0])) as _),
            ("v", Arc::new(arrow::array::StringArray::from(vec![None::<&str>, None, None])) as _),
        ])
        .unwrap();
        added.push(
            write_equality_delete_file(&table, vec![id_field], spec_id, part(0), &[keys])
                .await
                .unwrap(),
        );
        let store: Arc<dyn MetadataStore> = s.catalog().clone();
        let changes = SnapshotChanges {
            operation: Operation::Delete,
            added_delete_files: added,
            ..Default::default()
        };
        commit(store, &ident, changes).await.unwrap();
        // A later insert re-adds id 40: newer than the equality delete, it stays.
        ctx.sql("INSERT INTO ns.t VALUES (40, 0, 'again-40')")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let table = s.catalog().load_table(&ident).await.unwrap();
        table.metadata_location().unwrap().to_string()
    });

    let deleted = [0i64, 2, 11, 20, 40, 42, 140];
    let mut expected: Vec<Vec<Value>> = (0..200i64)
        .filter(|i| !deleted.contains(i))
        .map(|i| {
            let v = if i < 100 {
                format!("first-{i}")
            } else {
                format!("second-{i}")
            };
            vec![
                serde_json::json!(i),
                serde_json::json!(i % 2),
                serde_json::json!(v),
            ]
        })
        .collect();
    expected.push(vec![
        serde_json::json!(40),
        serde_json::json!(0),
        serde_json::json!("again-40"),
    ]);
    let expected = {
        let mut e = normalise(expected);
        e.sort_by_key(|r| r.sort_key());
        e
    };
    let mine = {
        let rows = ours(&wh, "SELECT id, part, v FROM ns.t");
        let mut m = normalise(as_lists(&rows, &["id", "part", "v"]));
        m.sort_by_key(|r| r.sort_key());
        m
    };
    assert_eq!(mine, expected, "our CLI");
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    let mut duck_rows = normalise(
        duck["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().clone())
            .collect(),
    );
    duck_rows.sort_by_key(|r| r.sort_key());
    assert_eq!(duck_rows, expected, "DuckDB");
}

/// A sort key for JSON rows: the display form of each value.
trait RowKey {
    fn sort_key(&self) -> String;
}

impl RowKey for Vec<Value> {
    fn sort_key(&self) -> String {
        self.iter()
            .map(|v| match v {
                Value::Number(n) => format!("{:>20.3}", n.as_f64().unwrap_or(0.0)),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join("|")
    }
}

/// Rows of a tool answer, numbers normalised, sorted by the first column.
fn tool_rows(answer: &Value) -> Vec<Vec<Value>> {
    let rows: Vec<Vec<Value>> = answer["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    let mut rows = normalise(rows);
    rows.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
    rows
}

#[test]
fn copy_on_write_dml_on_pyiceberg_tables_reads_the_same_in_pyiceberg_and_duckdb() {
    dml_on_pyiceberg_tables("copy-on-write");
}

#[test]
fn merge_on_read_dml_on_pyiceberg_tables_reads_the_same_in_pyiceberg_and_duckdb() {
    dml_on_pyiceberg_tables("merge-on-read");
}

/// DELETEs and UPDATEs through our CLI in `mode` on tables pyiceberg wrote; then pyiceberg,
/// DuckDB and we read exactly the oracle's rows.
fn dml_on_pyiceberg_tables(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    let created = tool(&["create-warehouse", "--warehouse", &whs]);
    let rows_of = |t: &str| -> Vec<Vec<Value>> {
        normalise(
            created["tables"][t]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_array().unwrap().clone())
                .collect(),
        )
    };
    // events: [id, name, ts, amount, day], partitioned by day(ts) and bucket(4, id).
    let mut events = rows_of("pyns.events");
    let mut simple = rows_of("pyns.simple");
    let deleted = |statement: &str| -> u64 {
        let out = ours(
            &wh,
            &format!(
                "SET iceberg.delete_mode = '{mode}'; SET iceberg.update_mode = '{mode}'; {statement}"
            ),
        );
        assert_eq!(out.len(), 1, "{statement}: {out:?}");
        out[0]["count"].as_u64().unwrap()
    };

    let before = events.len();
    let n = deleted("DELETE FROM pyns.events WHERE name = 'name_1'");
    events.retain(|r| r[1] != "name_1");
    assert_eq!(n as usize, before - events.len());
    assert!(n > 0);

    // NULL amounts stay: the condition is NULL there.
    let before = events.len();
    let n = deleted("DELETE FROM pyns.events WHERE amount > 80");
    events.retain(|r| r[3].as_f64().is_none_or(|a| a <= 80.0));
    assert_eq!(n as usize, before - events.len());
    assert!(events.iter().any(|r| r[3].is_null()));

    // The NULL partition of day(ts), proven from null counts.
    let before = events.len();
    let n = deleted("DELETE FROM pyns.events WHERE ts IS NULL");
    events.retain(|r| !r[2].is_null());
    assert_eq!(n as usize, before - events.len());
    assert!(n > 0);

    let n = deleted("DELETE FROM pyns.simple WHERE id % 3 = 0");
    simple.retain(|r| r[0].as_f64().unwrap() as i64 % 3 != 0);
    assert_eq!(n, 3);

    // UPDATE, a string column and one that moves rows between bucket partitions.
    let n = deleted("UPDATE pyns.simple SET label = label || '-x' WHERE id > 6");
    let mut want = 0;
    for r in simple.iter_mut().filter(|r| r[0].as_f64().unwrap() > 6.0) {
        r[1] = Value::from(format!("{}-x", r[1].as_str().unwrap()));
        want += 1;
    }
    assert_eq!(n, want);
    let n = deleted("UPDATE pyns.events SET id = id + 1000, name = 'moved' WHERE id % 10 = 3");
    let mut want = 0;
    for r in events
        .iter_mut()
        .filter(|r| r[0].as_f64().unwrap() as i64 % 10 == 3)
    {
        r[0] = serde_json::json!(r[0].as_f64().unwrap() + 1000.0);
        r[1] = Value::from("moved");
        want += 1;
    }
    assert_eq!(n, want);
    events.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));

    for (table, expected) in [("pyns.events", &events), ("pyns.simple", &simple)] {
        let theirs = tool(&["read", "--warehouse", &whs, "--table", table]);
        assert_eq!(&tool_rows(&theirs), expected, "pyiceberg reads {table}");
        let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
        let duck = tool(&["duckdb-read", "--metadata", &metadata]);
        assert_eq!(&tool_rows(&duck), expected, "DuckDB reads {table}");
    }
    let mine = ours(&wh, "SELECT id, name, ts, amount, day FROM pyns.events");
    let mut mine = normalise(as_lists(&mine, &["id", "name", "ts", "amount", "day"]));
    mine.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
    assert_eq!(mine, events);

    // Compaction through the CLI folds the deletes into new files: pyiceberg and DuckDB read
    // the same rows from them, and no delete file is left.
    for table in ["pyns.events", "pyns.simple"] {
        let out = ours(
            &wh,
            &format!(
                "CALL system.rewrite_data_files(table => '{table}', options => \
                 map('rewrite-all', 'true'))"
            ),
        );
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0]["rewritten_data_files_count"].as_u64().unwrap() > 0);
        if mode == "merge-on-read" {
            assert!(out[0]["removed_delete_files_count"].as_u64().unwrap() > 0);
        }
        let current = ours(
            &wh,
            &format!(
                "SELECT operation, summary FROM iceberg_snapshots('{table}') WHERE is_current"
            ),
        );
        assert_eq!(current[0]["operation"], "replace", "{table}: {current:?}");
        let summary: Value = serde_json::from_str(current[0]["summary"].as_str().unwrap()).unwrap();
        assert_eq!(summary["total-delete-files"], "0", "{table}: {summary}");
    }
    for (table, expected) in [("pyns.events", &events), ("pyns.simple", &simple)] {
        let theirs = tool(&["read", "--warehouse", &whs, "--table", table]);
        assert_eq!(
            &tool_rows(&theirs),
            expected,
            "pyiceberg reads {table} compacted"
        );
        let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
        let duck = tool(&["duckdb-read", "--metadata", &metadata]);
        assert_eq!(
            &tool_rows(&duck),
            expected,
            "DuckDB reads {table} compacted"
        );
    }
}

#[test]
fn copy_on_write_merge_on_a_pyiceberg_table_reads_the_same_in_pyiceberg_and_duckdb() {
    merge_into_pyiceberg_table("copy-on-write");
}

#[test]
fn merge_on_read_merge_on_a_pyiceberg_table_reads_the_same_in_pyiceberg_and_duckdb() {
    merge_into_pyiceberg_table("merge-on-read");
}

/// A MERGE of a change set (updates, deletes, inserts, NULL keys) through our CLI in `mode`
/// into pyns.events (4 pyiceberg appends, NULLs; partitioned by day(ts) and bucket(4, id));
/// pyiceberg, DuckDB and we then read exactly the oracle's rows. A change set matching a row
/// twice fails and changes nothing.
fn merge_into_pyiceberg_table(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    let created = tool(&["create-warehouse", "--warehouse", &whs]);
    // events: [id, name, ts, amount, day]
    let mut events: Vec<Vec<Value>> = normalise(
        created["tables"]["pyns.events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().clone())
            .collect(),
    );
    let id_of = |r: &Vec<Value>| r[0].as_f64().unwrap() as i64;
    // (id, name, amount, op): 'u' updates name and amount (an amount of NULL too), 'd' deletes,
    // a new id is inserted, a NULL id matches nothing and is not inserted.
    let changes: Vec<(Option<i64>, &str, Option<f64>, &str)> = vec![
        (Some(2), "upd-2", Some(2.5), "u"),
        (Some(3), "upd-3", None, "u"),
        (Some(25), "upd-25", Some(7.0), "u"),
        (Some(4), "x", None, "d"),
        (Some(9), "x", None, "d"),
        (Some(5000), "new-5000", Some(50.0), "u"),
        (Some(5001), "new-5001", None, "d"),
        (None, "null-key", Some(1.0), "u"),
    ];
    let values: Vec<String> = changes
        .iter()
        .map(|(id, name, amount, op)| {
            let id = id.map_or("CAST(NULL AS BIGINT)".to_string(), |i| i.to_string());
            let amount = amount.map_or("CAST(NULL AS DOUBLE)".to_string(), |a| format!("{a:?}"));
            format!("({id}, '{name}', {amount}, '{op}')")
        })
        .collect();
    let statement = format!(
        "SET iceberg.merge_mode = '{mode}'; \
         MERGE INTO pyns.events AS t USING (VALUES {}) AS s(id, name, amount, op) ON t.id = s.id \
         WHEN MATCHED AND s.op = 'd' THEN DELETE \
         WHEN MATCHED THEN UPDATE SET name = s.name, amount = s.amount \
         WHEN NOT MATCHED AND s.id IS NOT NULL AND s.op = 'u' THEN \
           INSERT (id, name, ts, amount, day) VALUES (s.id, s.name, NULL, s.amount, DATE '2024-03-01')",
        values.join(", ")
    );
    let out = ours(&wh, &statement);
    assert_eq!(out.len(), 1, "{out:?}");
    let mut want = 0u64;
    for (id, name, amount, op) in &changes {
        let Some(id) = id else { continue };
        let amount = amount.map_or(Value::Null, |a| serde_json::json!(a));
        match events.iter().position(|r| id_of(r) == *id) {
            Some(i) if *op == "d" => {
                events.remove(i);
                want += 1;
            }
            Some(i) => {
                events[i][1] = Value::from(*name);
                events[i][3] = amount;
                want += 1;
            }
            None if *op == "u" => {
                events.push(vec![
                    serde_json::json!(*id as f64),
                    Value::from(*name),
                    Value::Null,
                    amount,
                    Value::from("2024-03-01"),
                ]);
                want += 1;
            }
            None => {}
        }
    }
    assert_eq!(out[0]["count"].as_u64().unwrap(), want);
    events.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));

    let check = |what: &str, events: &Vec<Vec<Value>>| {
        let theirs = tool(&["read", "--warehouse", &whs, "--table", "pyns.events"]);
        assert_eq!(
            &tool_rows(&theirs),
            events,
            "pyiceberg reads pyns.events {what}"
        );
        let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
        let duck = tool(&["duckdb-read", "--metadata", &metadata]);
        assert_eq!(&tool_rows(&duck), events, "DuckDB reads pyns.events {what}");
        let mine = ours(&wh, "SELECT id, name, ts, amount, day FROM pyns.events");
        let mut mine = normalise(as_lists(&mine, &["id", "name", "ts", "amount", "day"]));
        mine.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
        assert_eq!(&mine, events, "we read pyns.events {what}");
        metadata
    };
    let after_merge = check("after the MERGE", &events);

    // Two source rows for target row 2: an error, and the table as it was.
    let failed = Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .arg("--warehouse")
        .arg(&wh)
        .args([
            "sql",
            &format!(
                "SET iceberg.merge_mode = '{mode}'; MERGE INTO pyns.events USING \
                 (VALUES (2, 'a'), (2, 'b')) AS s(id, name) ON pyns.events.id = s.id \
                 WHEN MATCHED THEN UPDATE SET name = s.name"
            ),
        ])
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("MERGE matched a target row more than once"),
        "{stderr}"
    );
    assert_eq!(check("after the failed MERGE", &events), after_merge);

    // Copy-on-write again, updating only columns that place no row (name, amount) in files the
    // first MERGE wrote: the rewrite splices the new values into copies of the other columns'
    // chunks, and the three readers still agree with the oracle.
    if mode == "copy-on-write" {
        let out = ours(
            &wh,
            "EXPLAIN ANALYZE MERGE INTO pyns.events AS t USING (VALUES (2, 'again-2', 9.5), \
             (3, NULL, 1.25), (7000, 'new-7000', NULL)) AS s(id, name, amount) ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET name = s.name, amount = s.amount \
             WHEN NOT MATCHED THEN INSERT (id, name, ts, amount, day) \
               VALUES (s.id, s.name, NULL, s.amount, DATE '2024-03-02')",
        );
        let plan: String = out
            .iter()
            .filter_map(|r| r.get("plan").and_then(Value::as_str))
            .collect();
        assert!(plan.contains("splice=[name, amount]"), "{plan}");
        assert!(plan.contains("splice_fallbacks=0"), "{plan}");
        assert!(!plan.contains("files_spliced=0"), "{plan}");
        for (id, name, amount) in [
            (2, Value::from("again-2"), serde_json::json!(9.5)),
            (3, Value::Null, serde_json::json!(1.25)),
        ] {
            let row = events.iter_mut().find(|r| id_of(r) == id).unwrap();
            row[1] = name;
            row[3] = amount;
        }
        events.push(vec![
            serde_json::json!(7000.0),
            Value::from("new-7000"),
            Value::Null,
            Value::Null,
            Value::from("2024-03-02"),
        ]);
        events.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
        check("after the spliced MERGE", &events);
    }
}

/// A pyiceberg table (v2, partitioned, NULLs) deleted from by position, upgraded to v3 with
/// `ALTER TABLE`, then changed again by merge-on-read DELETE and UPDATE (deletion vectors): pyiceberg
/// and DuckDB read exactly the oracle's rows, and pyiceberg finds one vector per data file.
#[test]
fn deletion_vectors_after_an_upgrade_to_v3_read_the_same_in_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    let created = tool(&["create-warehouse", "--warehouse", &whs]);
    let mut events: Vec<Vec<Value>> = normalise(
        created["tables"]["pyns.events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().clone())
            .collect(),
    );
    let run = |statement: &str| -> Vec<serde_json::Map<String, Value>> {
        ours(
            &wh,
            &format!(
                "SET iceberg.delete_mode = 'merge-on-read'; \
                 SET iceberg.update_mode = 'merge-on-read'; {statement}"
            ),
        )
    };
    let count = |out: Vec<serde_json::Map<String, Value>>| out[0]["count"].as_u64().unwrap();
    let before = events.len();
    let n = count(run("DELETE FROM pyns.events WHERE name = 'name_1'"));
    events.retain(|r| r[1] != "name_1");
    assert_eq!(n as usize, before - events.len());
    let v2 = tool(&[
        "delete-files",
        "--warehouse",
        &whs,
        "--table",
        "pyns.events",
    ]);
    assert_eq!(v2["format_version"], 2);
    assert!(v2["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["file_format"] == "parquet"));

    run("ALTER TABLE pyns.events SET TBLPROPERTIES ('format-version' = '3')");
    let before = events.len();
    let n = count(run("DELETE FROM pyns.events WHERE amount > 80"));
    events.retain(|r| r[3].as_f64().is_none_or(|a| a <= 80.0));
    assert_eq!(n as usize, before - events.len());
    let n = count(run(
        "UPDATE pyns.events SET name = 'changed' WHERE id % 10 = 3 OR name IS NULL",
    ));
    let mut want = 0;
    for r in events
        .iter_mut()
        .filter(|r| r[0].as_f64().unwrap() as i64 % 10 == 3 || r[1].is_null())
    {
        r[1] = Value::from("changed");
        want += 1;
    }
    assert_eq!(n, want);
    events.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));

    let theirs = tool(&["read", "--warehouse", &whs, "--table", "pyns.events"]);
    assert_eq!(tool_rows(&theirs), events, "pyiceberg reads the v3 table");
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    assert_eq!(tool_rows(&duck), events, "DuckDB reads the v3 table");
    let mine = ours(&wh, "SELECT id, name, ts, amount, day FROM pyns.events");
    let mut mine = normalise(as_lists(&mine, &["id", "name", "ts", "amount", "day"]));
    mine.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
    assert_eq!(mine, events);

    // pyiceberg sees a v3 table whose deleted-from files each have one deletion vector, the
    // position delete files they replaced gone, and row ids handed out.
    let v3 = tool(&[
        "delete-files",
        "--warehouse",
        &whs,
        "--table",
        "pyns.events",
    ]);
    assert_eq!(v3["format_version"], 3);
    assert!(v3["next_row_id"].as_u64().unwrap() >= created_rows(&created));
    let entries = v3["entries"].as_array().unwrap();
    let vectors: Vec<&Value> = entries
        .iter()
        .filter(|e| e["file_format"] == "puffin")
        .collect();
    assert!(!vectors.is_empty());
    let mut targets: Vec<&str> = vectors
        .iter()
        .map(|e| e["referenced_data_file"].as_str().unwrap())
        .collect();
    let n = targets.len();
    targets.sort();
    targets.dedup();
    assert_eq!(
        targets.len(),
        n,
        "one deletion vector per data file: {vectors:?}"
    );
    for v in &vectors {
        assert!(v["content_offset"].as_i64().unwrap() >= 4);
        assert!(v["content_size_in_bytes"].as_i64().unwrap() > 12);
    }
    // A position delete file that stays names a data file no vector covers.
    for e in entries.iter().filter(|e| e["file_format"] == "parquet") {
        if let Some(target) = e["referenced_data_file"].as_str() {
            assert!(!targets.contains(&target), "{e}");
        }
    }

    // Row lineage: a copy-on-write UPDATE moves rows into new files with their ids written
    // out; DuckDB reads the same `_row_id` and `_last_updated_sequence_number` as we do.
    ours(
        &wh,
        "SET iceberg.update_mode = 'copy-on-write'; \
         UPDATE pyns.events SET name = 'cow' WHERE id % 10 = 5",
    );
    let columns = ["id", "_row_id", "_last_updated_sequence_number"];
    let mine = ours(
        &wh,
        "SELECT id, _row_id, _last_updated_sequence_number \
         FROM iceberg_scan('pyns.events', 'row_lineage', true)",
    );
    let mut mine = normalise(as_lists(&mine, &columns));
    mine.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
    assert_eq!(mine.len(), events.len());
    let ids: HashSet<i64> = mine
        .iter()
        .map(|r| r[1].as_f64().expect("every row has an id") as i64)
        .collect();
    assert_eq!(ids.len(), mine.len(), "row ids are unique");
    let theirs = tool(&["read", "--warehouse", &whs, "--table", "pyns.events"]);
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&[
        "duckdb-read",
        "--metadata",
        &metadata,
        "--select",
        &columns.join(", "),
    ]);
    assert_eq!(tool_rows(&duck), mine, "DuckDB reads the same row lineage");
}

fn created_rows(created: &Value) -> u64 {
    created["tables"]
        .as_object()
        .unwrap()
        .get("pyns.events")
        .unwrap()
        .as_array()
        .unwrap()
        .len() as u64
}

/// After merge-on-read changes, a compaction, `expire_snapshots` and `remove_orphan_files`
/// (through our CLI) on a table pyiceberg wrote: every file pyiceberg's `inspect` says the table
/// references exists, every other file under the table is gone (a dry run first removes
/// nothing), and pyiceberg and DuckDB read the same rows.
#[test]
fn expire_and_orphan_removal_keep_what_pyiceberg_says_the_table_references() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    tool(&["create-warehouse", "--warehouse", &whs]);
    for statement in [
        "SET iceberg.delete_mode = 'merge-on-read'; DELETE FROM pyns.simple WHERE id % 3 = 0",
        "SET iceberg.update_mode = 'merge-on-read'; UPDATE pyns.simple SET label = 'x' WHERE id > 7",
        "CALL system.rewrite_data_files(table => 'pyns.simple', options => map('rewrite-all', 'true'))",
        "INSERT INTO pyns.simple VALUES (100, 'late')",
    ] {
        ours(&wh, statement);
    }
    let expected = tool_rows(&tool(&[
        "read",
        "--warehouse",
        &whs,
        "--table",
        "pyns.simple",
    ]));
    let before = tool(&[
        "inspect-files",
        "--warehouse",
        &whs,
        "--table",
        "pyns.simple",
    ]);
    let snapshots = before["manifest_lists"].as_array().unwrap().len();
    assert!(snapshots >= 5, "{before}");

    // Keep the last two snapshots (the compaction and the insert).
    let cutoff = chrono::Utc::now().timestamp_millis() + 1000;
    let out = ours(
        &wh,
        &format!(
            "CALL system.expire_snapshots(table => 'pyns.simple', older_than => {cutoff}, \
             retain_last => 2)"
        ),
    );
    assert!(
        out[0]["deleted_data_files_count"].as_u64().unwrap() > 0,
        "{out:?}"
    );
    assert!(
        out[0]["deleted_manifest_lists_count"].as_u64().unwrap() > 0,
        "{out:?}"
    );

    // A stray file, and one a failed writer left.
    let table_dir = {
        let listed = tool(&[
            "inspect-files",
            "--warehouse",
            &whs,
            "--table",
            "pyns.simple",
        ]);
        let first = listed["files"][0].as_str().unwrap().to_string();
        let local = first.strip_prefix("file://").unwrap_or(&first).to_string();
        let data_dir = Path::new(&local).parent().unwrap().to_path_buf();
        let mut d = data_dir.clone();
        while !d.join("metadata").exists() {
            d = d.parent().unwrap().to_path_buf();
        }
        d
    };
    let strays = [
        table_dir.join("data/stray.parquet"),
        table_dir.join("metadata/stray-manifest.avro"),
    ];
    for p in &strays {
        std::fs::write(p, b"not a table file").unwrap();
    }
    let cutoff = chrono::Utc::now().timestamp_millis() + 60_000;
    let dry = ours(
        &wh,
        &format!(
            "CALL system.remove_orphan_files(table => 'pyns.simple', older_than => {cutoff}, \
             dry_run => true)"
        ),
    );
    let found: HashSet<String> = dry
        .iter()
        .map(|r| r["orphan_file_location"].as_str().unwrap().to_string())
        .collect();
    let want: HashSet<String> = strays
        .iter()
        .map(|p| format!("file://{}", p.display()))
        .collect();
    assert_eq!(found, want, "the dry run finds exactly the strays");
    assert!(
        strays.iter().all(|p| p.exists()),
        "a dry run deletes nothing"
    );
    let removed = ours(
        &wh,
        &format!("CALL system.remove_orphan_files(table => 'pyns.simple', older_than => {cutoff})"),
    );
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(strays.iter().all(|p| !p.exists()));

    // What pyiceberg says the table references is exactly what is left under it.
    let after = tool(&[
        "inspect-files",
        "--warehouse",
        &whs,
        "--table",
        "pyns.simple",
    ]);
    assert_eq!(
        after["manifest_lists"].as_array().unwrap().len(),
        2,
        "{after}"
    );
    let local = |v: &Value| -> String {
        let s = v.as_str().unwrap();
        s.strip_prefix("file://").unwrap_or(s).to_string()
    };
    let mut referenced: HashSet<String> = HashSet::new();
    for key in ["all_files", "all_manifests", "manifest_lists", "metadata"] {
        for v in after[key].as_array().unwrap() {
            let p = local(v);
            assert!(Path::new(&p).exists(), "{key}: {p} is referenced but gone");
            referenced.insert(p);
        }
    }
    for v in after["files"].as_array().unwrap() {
        assert!(referenced.contains(&local(v)), "{v}");
    }
    let on_disk: HashSet<String> = crate::common::files_under(&table_dir)
        .into_iter()
        .map(|rel| table_dir.join(rel).display().to_string())
        .filter(|p| !p.ends_with("version-hint.text"))
        .collect();
    let unreferenced: Vec<&String> = on_disk.difference(&referenced).collect();
    assert!(unreferenced.is_empty(), "left behind: {unreferenced:?}");

    let theirs = tool(&["read", "--warehouse", &whs, "--table", "pyns.simple"]);
    assert_eq!(tool_rows(&theirs), expected, "pyiceberg reads the table");
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    assert_eq!(tool_rows(&duck), expected, "DuckDB reads the table");
}

/// A table whose data files do not store their identity partition columns (Hive-style files
/// brought in by `add_files`) reads the same in pyiceberg, DuckDB and here: the partition values
/// from the manifest entries, NULL where the partition value is NULL.
#[tokio::test]
async fn identity_partition_columns_missing_from_files_read_like_pyiceberg_and_duckdb() {
    use crate::common::hive_style::{append_hive_style, create_typed_table};
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    {
        let s = iceberg_exec::IcebergSession::open(iceberg_exec::WarehouseConfig::local(&wh))
            .await
            .unwrap();
        s.sql("CREATE SCHEMA ns")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        // pyiceberg 0.12 refuses a required column a file lacks, partition value or not: the
        // table it reads has an optional `region`; DuckDB reads the required one as well.
        create_typed_table(&s, "hive", false, true, false).await;
        create_typed_table(&s, "oracle", false, false, false).await;
        append_hive_style(&s, false, "hive", "oracle").await;
        create_typed_table(&s, "hive_required", false, true, true).await;
        create_typed_table(&s, "oracle_required", false, false, true).await;
        append_hive_style(&s, false, "hive_required", "oracle_required").await;
    }
    let columns = ["id", "v", "b", "i", "l", "dt", "s", "region"];
    let select = columns.join(", ");
    let mine = normalise(as_lists(
        &ours(&wh, &format!("SELECT {select} FROM ns.hive ORDER BY id")),
        &columns,
    ));
    assert_eq!(mine.len(), 9);
    // Not NULLs everywhere: the first row's partition values.
    assert_eq!(mine[0][6], serde_json::json!("x"));
    assert_eq!(mine[0][7], serde_json::json!("eu"));
    let whs = wh.display().to_string();
    let read = tool(&["read", "--warehouse", &whs, "--table", "ns.hive"]);
    let names: Vec<&str> = read["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let picked = |rows: Vec<Vec<Value>>, names: &[&str]| -> Vec<Vec<Value>> {
        let at: Vec<usize> = columns
            .iter()
            .map(|c| names.iter().position(|n| n == c).unwrap())
            .collect();
        let mut out: Vec<Vec<Value>> = rows
            .into_iter()
            .map(|r| at.iter().map(|&i| r[i].clone()).collect())
            .collect();
        out.sort_by_key(|r| r[0].as_f64().unwrap() as i64);
        normalise(out)
    };
    assert_eq!(picked(tool_rows(&read), &names), mine, "pyiceberg");
    let metadata = read["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata, "--select", &select]);
    assert_eq!(picked(tool_rows(&duck), &columns), mine, "DuckDB");
    let required = normalise(as_lists(
        &ours(
            &wh,
            &format!("SELECT {select} FROM ns.hive_required ORDER BY id"),
        ),
        &columns,
    ));
    assert_eq!(required, mine);
    let table = s_metadata(&wh, "hive_required").await;
    let duck = tool(&["duckdb-read", "--metadata", &table, "--select", &select]);
    assert_eq!(
        picked(tool_rows(&duck), &columns),
        mine,
        "DuckDB, required region"
    );
}

/// The metadata location of `ns.<table>` in the warehouse `wh`.
async fn s_metadata(wh: &Path, table: &str) -> String {
    let s = iceberg_exec::IcebergSession::open(iceberg_exec::WarehouseConfig::local(wh))
        .await
        .unwrap();
    let ident = iceberg::TableIdent::from_strs(["ns", table]).unwrap();
    let t = s.catalog().load_table(&ident).await.unwrap();
    t.metadata_location().unwrap().to_string()
}

/// A decimal partition column widened after files were written (older manifests hold 3-byte
/// values of decimal(6, 2), newer ones 4-byte values of decimal(8, 2)): read, filtered and
/// changed as pyiceberg reads it.
#[test]
fn widened_decimal_partitions_read_filter_and_change() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    let theirs = tool(&["decimal-evolve", "--warehouse", &whs]);
    let mine = ours(&wh, "SELECT id, d FROM pyns.dec ORDER BY id");
    let mine = normalise(as_lists(&mine, &["id", "d"]));
    let theirs: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect();
    let canon = |rows: Vec<Vec<Value>>| -> Vec<Vec<Value>> {
        let mut rows: Vec<Vec<Value>> = rows
            .into_iter()
            .map(|r| vec![r[0].clone(), canonical("dec", &r[1])])
            .collect();
        rows.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
        rows
    };
    assert_eq!(canon(mine), canon(normalise(theirs)));
    let hit = ours(&wh, "SELECT id FROM pyns.dec WHERE d = 1234.56");
    assert_eq!(as_lists(&hit, &["id"]), [[serde_json::json!(1)]]);
    ours(&wh, "DELETE FROM pyns.dec WHERE d = -0.01");
    ours(&wh, "UPDATE pyns.dec SET id = 10 WHERE d = 1234.56");
    let after = tool(&["read", "--warehouse", &whs, "--table", "pyns.dec"]);
    let ids: Vec<i64> = after["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_i64().unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(ids, [3, 4, 10]);
}

/// Tables changed by DELETE/UPDATE with subqueries and UPDATE ... FROM (which run as MERGE), in
/// both write modes, read the same in pyiceberg and DuckDB as in our CLI.
#[test]
fn subquery_dml_tables_read_alike_in_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    ours(&wh, "CREATE SCHEMA ours");
    for mode in ["copy-on-write", "merge-on-read"] {
        let t = mode.replace('-', "_");
        ours(
            &wh,
            &format!(
                "CREATE EXTERNAL TABLE ours.{t} (k BIGINT, g INT, v INT) STORED AS ICEBERG \
                 LOCATION '' PARTITIONED BY (g) OPTIONS ('write.delete.mode' '{mode}', \
                 'write.update.mode' '{mode}', 'write.merge.mode' '{mode}'); \
                 CREATE TABLE ours.src_{t} (k BIGINT, w INT); \
                 INSERT INTO ours.{t} SELECT value, value % 3, value * 10 FROM generate_series(1, 40); \
                 INSERT INTO ours.src_{t} SELECT value * 2, value FROM generate_series(1, 10)"
            ),
        );
        for statement in [
            format!("DELETE FROM ours.{t} WHERE k IN (SELECT k FROM ours.src_{t} WHERE w > 7)"),
            format!(
                "UPDATE ours.{t} SET v = (SELECT max(w) FROM ours.src_{t}) WHERE NOT EXISTS \
                 (SELECT 1 FROM ours.src_{t} s WHERE s.k = ours.{t}.k) AND g = 1"
            ),
            format!("UPDATE ours.{t} SET v = s.w FROM ours.src_{t} s WHERE ours.{t}.k = s.k"),
            format!(
                "DELETE FROM ours.{t} WHERE k NOT IN (SELECT k + 30 FROM ours.src_{t}) AND g = 2"
            ),
        ] {
            ours(&wh, &statement);
        }
        let mine = ours(&wh, &format!("SELECT k, g, v FROM ours.{t} ORDER BY k"));
        let mine = normalise(as_lists(&mine, &["k", "g", "v"]));
        assert!(mine.len() > 10 && mine.len() < 40, "{mine:?}");
        let theirs = tool(&["read", "--warehouse", &whs, "--table", &format!("ours.{t}")]);
        let mut theirs = normalise(
            theirs["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_array().unwrap().clone())
                .collect(),
        );
        theirs.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
        assert_eq!(theirs, mine, "pyiceberg, {mode}");
        let latest = latest_metadata(&wh.join(format!("ours/{t}/metadata")));
        let duck = tool(&["duckdb-read", "--metadata", &latest]);
        let mut duck = normalise(
            duck["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_array().unwrap().clone())
                .collect(),
        );
        duck.sort_by_key(|r| r[0].as_f64().map(|f| f as i64));
        assert_eq!(duck, mine, "duckdb, {mode}");
    }
}

/// A table partitioned by `identity(u)` on a uuid column, written by pyiceberg: read with its
/// uuids in canonical form, filtered by text, and pruned by the partition values.
#[test]
fn uuid_partitions_written_by_pyiceberg_filter_and_prune_by_text() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let theirs = tool(&["uuid-partitioned", "--warehouse", &wh.display().to_string()]);
    let mine = ours(&wh, "SELECT id, u FROM pyns.up ORDER BY id");
    let mine: Vec<Vec<Value>> = as_lists(&mine, &["id", "u"])
        .into_iter()
        .map(|r| vec![r[0].clone(), canonical("u", &r[1])])
        .collect();
    let mut theirs: Vec<Vec<Value>> = theirs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = r.as_array().unwrap();
            vec![r[0].clone(), canonical("u", &r[1])]
        })
        .collect();
    theirs.sort_by_key(|r| r[0].as_i64());
    assert_eq!(mine, theirs);
    let hit = ours(
        &wh,
        "SELECT id FROM pyns.up WHERE u = '12345678-1234-5678-1234-567812345678' ORDER BY id",
    );
    assert_eq!(
        as_lists(&hit, &["id"]),
        [[serde_json::json!(1)], [serde_json::json!(3)]]
    );
    let plan = ours(
        &wh,
        "EXPLAIN SELECT id FROM pyns.up WHERE u = '00000000-0000-0000-0000-000000000001'",
    );
    let plan: String = plan
        .iter()
        .filter_map(|r| r.get("plan").and_then(|p| p.as_str()))
        .collect();
    assert!(plan.contains("files=1 of 2"), "{plan}");
}

/// Schema changes made here (the CLI's `ALTER TABLE`) read the same in pyiceberg and DuckDB,
/// and pyiceberg sees the schema this crate wrote: ids, names, types, docs, identifier fields.
#[test]
fn schema_changes_made_here_read_the_same_in_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    ours(
        &wh,
        "CREATE SCHEMA ns; \
         CREATE TABLE ns.ev (id BIGINT NOT NULL, name VARCHAR, qty INT, price FLOAT, gone VARCHAR, p STRUCT<x DOUBLE>); \
         INSERT INTO ns.ev VALUES (1, 'a', 10, 1.5, 'g1', named_struct('x', 1.0)), (2, 'b', 20, 2.5, 'g2', named_struct('x', 2.0))",
    );
    ours(
        &wh,
        "ALTER TABLE ns.ev ADD COLUMN note STRING COMMENT 'free text' AFTER id; \
         ALTER TABLE ns.ev RENAME COLUMN name TO label; \
         ALTER TABLE ns.ev ALTER COLUMN qty TYPE BIGINT; \
         ALTER TABLE ns.ev ALTER COLUMN price TYPE DOUBLE; \
         ALTER TABLE ns.ev ADD COLUMN p.z DOUBLE; \
         ALTER TABLE ns.ev RENAME COLUMN p.x TO px; \
         ALTER TABLE ns.ev DROP COLUMN gone; \
         ALTER TABLE ns.ev ADD COLUMN gone INT; \
         ALTER TABLE ns.ev SET IDENTIFIER FIELDS id",
    );
    ours(
        &wh,
        "INSERT INTO ns.ev VALUES (3, 'n3', 'c', 30, 3.25, named_struct('px', 3.0, 'z', 4.0), 7); \
         ALTER TABLE ns.ev ADD PARTITION FIELD bucket(4, id); \
         ALTER TABLE ns.ev ADD PARTITION FIELD truncate(1, label) AS l; \
         ALTER TABLE ns.ev WRITE ORDERED BY qty DESC; \
         INSERT INTO ns.ev VALUES (4, NULL, 'd', 40, NULL, NULL, NULL), (5, 'n5', 'e', 50, 5.5, NULL, 9); \
         UPDATE ns.ev SET qty = qty + 1 WHERE id = 1",
    );
    let schema = tool(&["schema", "--warehouse", &whs, "--table", "ns.ev"]);
    assert_eq!(
        schema["spec"],
        serde_json::json!([
            [1000, "id_bucket_4", 1, "bucket[4]"],
            [1001, "l", 2, "truncate[1]"]
        ]),
        "{schema}"
    );
    assert_eq!(
        schema["sort_order"],
        serde_json::json!([[3, "identity", "DESC", "NULLS LAST"]]),
        "{schema}"
    );
    let fields: Vec<(i64, String, String, bool)> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f[0].as_i64().unwrap(),
                f[1].as_str().unwrap().to_string(),
                f[2].as_str().unwrap().to_string(),
                f[3].as_bool().unwrap(),
            )
        })
        .collect();
    let want = [
        (1, "id", "long", true),
        (2, "label", "string", false),
        (3, "qty", "long", false),
        (4, "price", "double", false),
        (
            6,
            "p",
            "struct<7: px: optional double, 9: z: optional double>",
            false,
        ),
        (7, "p.px", "double", false),
        (8, "note", "string", false),
        (9, "p.z", "double", false),
        (10, "gone", "int", false),
    ];
    let want: Vec<(i64, String, String, bool)> = want
        .iter()
        .map(|(i, n, t, r)| (*i, n.to_string(), t.to_string(), *r))
        .collect();
    assert_eq!(fields, want, "{schema}");
    assert_eq!(schema["identifier_field_ids"], serde_json::json!([1]));
    assert_eq!(schema["last_column_id"], serde_json::json!(10));
    let note = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f[1] == "note")
        .unwrap();
    assert_eq!(note[4], "free text");

    // Rows: ours, pyiceberg's and DuckDB's, top-level columns.
    let columns = ["id", "note", "label", "qty", "price", "gone"];
    let mine = ours(
        &wh,
        "SELECT id, note, label, qty, price, gone FROM ns.ev ORDER BY id",
    );
    let mine = normalise(as_lists(&mine, &columns));
    assert_eq!(mine.len(), 5);
    assert_eq!(
        mine[0][5],
        Value::Null,
        "the dropped column's values are not back"
    );
    let pick = |answer: &Value| -> Vec<Vec<Value>> {
        let names: Vec<&str> = answer["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let at: Vec<usize> = columns
            .iter()
            .map(|c| names.iter().position(|n| n == c).unwrap())
            .collect();
        let mut rows: Vec<Vec<Value>> = answer["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| at.iter().map(|i| r[*i].clone()).collect())
            .collect();
        rows.sort_by_key(|r| r[0].as_i64());
        normalise(rows)
    };
    let theirs = tool(&["read", "--warehouse", &whs, "--table", "ns.ev"]);
    assert_eq!(pick(&theirs), mine, "pyiceberg");
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    assert_eq!(pick(&duck), mine, "DuckDB");
}

/// A table made by Spark's `CREATE TABLE` here reads in pyiceberg with the ids, docs and
/// partition fields Java would give it, and its rows read the same in pyiceberg and DuckDB.
#[test]
fn spark_create_table_made_here_reads_the_same_in_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    ours(
        &wh,
        "CREATE SCHEMA db; \
         CREATE TABLE db.sample (id bigint NOT NULL COMMENT 'unique id', data string, \
           point struct<x: double, y: double>, ts timestamp) USING iceberg \
           PARTITIONED BY (bucket(4, id), days(ts)) COMMENT 'a sample' \
           TBLPROPERTIES ('write.delete.mode' = 'merge-on-read'); \
         INSERT INTO db.sample VALUES (1, 'a', named_struct('x', 1.0, 'y', 2.0), TIMESTAMP '2024-01-01 10:00:00'), \
           (2, 'b', NULL, TIMESTAMP '2024-01-02 11:00:00'), (3, NULL, NULL, NULL); \
         DELETE FROM db.sample WHERE id = 2",
    );
    let schema = tool(&["schema", "--warehouse", &whs, "--table", "db.sample"]);
    let fields: Vec<(i64, String)> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f[0].as_i64().unwrap(), f[1].as_str().unwrap().to_string()))
        .collect();
    let want: Vec<(i64, String)> = [
        (1, "id"),
        (2, "data"),
        (3, "point"),
        (4, "ts"),
        (5, "point.x"),
        (6, "point.y"),
    ]
    .iter()
    .map(|(i, n)| (*i, n.to_string()))
    .collect();
    assert_eq!(fields, want, "{schema}");
    assert_eq!(schema["fields"][0][4], "unique id");
    assert_eq!(
        schema["spec"],
        serde_json::json!([
            [1000, "id_bucket", 1, "bucket[4]"],
            [1001, "ts_day", 4, "day"]
        ]),
        "{schema}"
    );
    let columns = ["id", "data", "ts"];
    let mine = normalise(as_lists(
        &ours(&wh, "SELECT id, data, ts FROM db.sample ORDER BY id"),
        &columns,
    ));
    assert_eq!(mine.len(), 2);
    let pick = |answer: &Value| -> Vec<Vec<Value>> {
        let names: Vec<&str> = answer["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let at: Vec<usize> = columns
            .iter()
            .map(|c| names.iter().position(|n| n == c).unwrap())
            .collect();
        let mut rows: Vec<Vec<Value>> = answer["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| at.iter().map(|i| r[*i].clone()).collect())
            .collect();
        rows.sort_by_key(|r| r[0].as_i64());
        normalise(rows)
    };
    let theirs = tool(&["read", "--warehouse", &whs, "--table", "db.sample"]);
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    // Timestamps: our JSON and the tool's ISO text differ in form; compare ids and data, and
    // the timestamps between the two readers.
    let strip = |rows: Vec<Vec<Value>>| -> Vec<Vec<Value>> {
        rows.into_iter().map(|r| r[..2].to_vec()).collect()
    };
    assert_eq!(strip(pick(&theirs)), strip(mine.clone()), "pyiceberg");
    assert_eq!(pick(&duck), pick(&theirs), "DuckDB and pyiceberg");
}

#[test]
fn overwrites_made_here_read_the_same_in_pyiceberg_and_duckdb() {
    // Static by PARTITION, by REPLACE WHERE (whole files of two partitions), and dynamic (a
    // partition with a position delete file, and the NULL partition).
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    ours(
        &wh,
        "CREATE SCHEMA db; \
         CREATE TABLE db.o (id bigint NOT NULL, k string, v int) USING iceberg \
           PARTITIONED BY (k) TBLPROPERTIES ('write.delete.mode' = 'merge-on-read'); \
         INSERT INTO db.o VALUES (1, 'a', 10), (2, 'a', 20), (3, 'b', 30), (4, 'c', 40), (5, NULL, 50); \
         DELETE FROM db.o WHERE id = 2; \
         INSERT OVERWRITE db.o PARTITION (k = 'b') VALUES (6, 60); \
         INSERT INTO db.o REPLACE WHERE v >= 40 AND v < 60 VALUES (7, 'c', 45); \
         SET iceberg.overwrite_mode = 'dynamic'; \
         INSERT OVERWRITE db.o VALUES (8, 'a', 80), (9, NULL, 90)",
    );
    let columns = ["id", "k", "v"];
    let mine = normalise(as_lists(
        &ours(&wh, "SELECT id, k, v FROM db.o ORDER BY id"),
        &columns,
    ));
    let want: Vec<Vec<Value>> = serde_json::from_value(serde_json::json!([
        [6, "b", 60],
        [7, "c", 45],
        [8, "a", 80],
        [9, null, 90]
    ]))
    .unwrap();
    assert_eq!(mine, normalise(want));
    let theirs = tool(&["read", "--warehouse", &whs, "--table", "db.o"]);
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    let pick = |answer: &Value| -> Vec<Vec<Value>> {
        let names: Vec<&str> = answer["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let at: Vec<usize> = columns
            .iter()
            .map(|c| names.iter().position(|n| n == c).unwrap())
            .collect();
        let mut rows: Vec<Vec<Value>> = answer["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| at.iter().map(|i| r[*i].clone()).collect())
            .collect();
        rows.sort_by_key(|r| r[0].as_i64());
        normalise(rows)
    };
    assert_eq!(pick(&theirs), mine, "pyiceberg");
    assert_eq!(pick(&duck), mine, "DuckDB");
    // The delete file of partition a went with the files it applied to.
    let deletes = tool(&["delete-files", "--warehouse", &whs, "--table", "db.o"]);
    assert_eq!(deletes["entries"], serde_json::json!([]), "{deletes}");
}

#[test]
fn create_or_replace_made_here_reads_the_same_in_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    ours(
        &wh,
        "CREATE SCHEMA db; \
         CREATE TABLE db.r (id bigint, name string) USING iceberg PARTITIONED BY (name); \
         INSERT INTO db.r VALUES (1, 'a'), (2, 'b'); \
         CREATE OR REPLACE TABLE db.r (name string, id bigint, extra double) USING iceberg \
           PARTITIONED BY (bucket(4, id)); \
         INSERT INTO db.r VALUES ('c', 3, 1.5)",
    );
    let schema = tool(&["schema", "--warehouse", &whs, "--table", "db.r"]);
    let fields: Vec<(i64, String)> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f[0].as_i64().unwrap(), f[1].as_str().unwrap().to_string()))
        .collect();
    // (The tool lists fields by id.)
    let want: Vec<(i64, String)> = [(1, "id"), (2, "name"), (3, "extra")]
        .iter()
        .map(|(i, n)| (*i, n.to_string()))
        .collect();
    assert_eq!(fields, want, "{schema}");
    assert_eq!(
        schema["spec"],
        serde_json::json!([[1001, "id_bucket", 1, "bucket[4]"]]),
        "{schema}"
    );
    let read = |columns: &[&str]| -> (Vec<Vec<Value>>, Vec<Vec<Value>>) {
        let theirs = tool(&["read", "--warehouse", &whs, "--table", "db.r"]);
        let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
        let duck = tool(&["duckdb-read", "--metadata", &metadata]);
        let pick = |answer: &Value| -> Vec<Vec<Value>> {
            let names: Vec<&str> = answer["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            let at: Vec<usize> = columns
                .iter()
                .map(|c| names.iter().position(|n| n == c).unwrap())
                .collect();
            let rows: Vec<Vec<Value>> = answer["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| at.iter().map(|i| r[*i].clone()).collect())
                .collect();
            normalise(rows)
        };
        (pick(&theirs), pick(&duck))
    };
    let mine = normalise(as_lists(
        &ours(&wh, "SELECT name, id, extra FROM db.r"),
        &["name", "id", "extra"],
    ));
    let (theirs, duck) = read(&["name", "id", "extra"]);
    assert_eq!(theirs, mine, "pyiceberg");
    assert_eq!(duck, mine, "DuckDB");
    // AS query: one commit, read alike.
    ours(
        &wh,
        "CREATE OR REPLACE TABLE db.r USING iceberg AS SELECT 'd' AS name, CAST(4 AS BIGINT) AS id",
    );
    let mine = normalise(as_lists(
        &ours(&wh, "SELECT name, id FROM db.r"),
        &["name", "id"],
    ));
    assert_eq!(mine.len(), 1);
    let (theirs, duck) = read(&["name", "id"]);
    assert_eq!(theirs, mine, "pyiceberg");
    assert_eq!(duck, mine, "DuckDB");
}

/// `value` without the members of its objects that are null, at any depth (our JSON lines leave
/// them out, pyiceberg's rows hold them).
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[test]
fn metadata_tables_answer_as_pyiceberg_inspects() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    ours(
        &wh,
        "CREATE SCHEMA db; \
         CREATE TABLE db.m (id bigint NOT NULL, k string, d date, v double) USING iceberg \
           PARTITIONED BY (k, days(d)) TBLPROPERTIES ('write.delete.mode' = 'merge-on-read'); \
         INSERT INTO db.m VALUES (1, 'a', DATE '2024-01-01', 1.5), (2, 'a', DATE '2024-01-01', NULL), \
           (3, 'b', DATE '2024-01-02', CAST('NaN' AS DOUBLE)); \
         INSERT INTO db.m VALUES (4, NULL, NULL, 2.0); \
         DELETE FROM db.m WHERE id = 2; \
         INSERT OVERWRITE db.m PARTITION (k = 'b') VALUES (5, DATE '2024-01-03', 5.0); \
         ALTER TABLE db.m CREATE BRANCH audit RETAIN 3 DAYS WITH SNAPSHOT RETENTION 5 SNAPSHOTS 2 DAYS; \
         ALTER TABLE db.m CREATE TAG v1 RETAIN 7 DAYS",
    );
    let map =
        |c: &str| format!("named_struct('keys', map_keys({c}), 'values', map_values({c})) AS {c}");
    let files = format!(
        "content, file_path, file_format, spec_id, partition, record_count, file_size_in_bytes, \
         {}, {}, {}, {}, {}, {}, split_offsets, equality_ids, sort_order_id, readable_metrics",
        map("column_sizes"),
        map("value_counts"),
        map("null_value_counts"),
        map("nan_value_counts"),
        map("lower_bounds"),
        map("upper_bounds"),
    );
    let manifests = "content, path, length, partition_spec_id, added_snapshot_id, \
         added_data_files_count, existing_data_files_count, deleted_data_files_count, \
         added_delete_files_count, existing_delete_files_count, deleted_delete_files_count, \
         partition_summaries";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "snapshots",
            format!(
                "CAST(committed_at AS BIGINT) AS committed_at, snapshot_id, parent_id, operation, \
                 manifest_list, {}",
                map("summary")
            ),
            "snapshot_id",
        ),
        (
            "history",
            "CAST(made_current_at AS BIGINT) AS made_current_at, snapshot_id, parent_id, \
             is_current_ancestor"
                .into(),
            "snapshot_id",
        ),
        (
            "metadata_log_entries",
            "CAST(timestamp AS BIGINT) AS timestamp, file, latest_snapshot_id, latest_schema_id, \
             latest_sequence_number"
                .into(),
            "file",
        ),
        (
            "refs",
            "name, type, snapshot_id, max_reference_age_in_ms, min_snapshots_to_keep, \
             max_snapshot_age_in_ms"
                .into(),
            "name",
        ),
        ("manifests", manifests.into(), "path"),
        (
            "all_manifests",
            format!("{manifests}, reference_snapshot_id"),
            "path",
        ),
        ("files", files.clone(), "file_path"),
        ("data_files", files.clone(), "file_path"),
        ("delete_files", files.clone(), "file_path"),
        ("all_files", files.clone(), "file_path"),
        ("all_data_files", files.clone(), "file_path"),
        ("all_delete_files", files, "file_path"),
        (
            "partitions",
            "partition, spec_id, record_count, file_count, total_data_file_size_in_bytes, \
             position_delete_record_count, position_delete_file_count, \
             equality_delete_record_count, equality_delete_file_count, \
             CAST(last_updated_at AS BIGINT) AS last_updated_at, last_updated_snapshot_id"
                .into(),
            "partition",
        ),
    ];
    for (kind, columns, key) in cases {
        let query = format!("SELECT {columns} FROM db.\"m${kind}\"");
        let mut mine: Vec<Value> = ours(&wh, &query)
            .into_iter()
            .map(|m| without_nulls(Value::Object(m)))
            .collect();
        let theirs = tool(&[
            "inspect",
            "--warehouse",
            &whs,
            "--table",
            "db.m",
            "--kind",
            kind,
        ]);
        // The columns asked for: those any of our rows has (null ones are left out of both).
        let names: std::collections::BTreeSet<String> = mine
            .iter()
            .filter_map(|r| r.as_object())
            .flat_map(|r| r.keys().cloned())
            .collect();
        let mut theirs: Vec<Value> = theirs["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let picked: serde_json::Map<String, Value> = r
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| names.is_empty() || names.contains(k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                without_nulls(Value::Object(picked))
            })
            .collect();
        let order = |a: &Value, b: &Value| {
            let key = |v: &Value| v[key].to_string();
            (key(a), a.to_string()).cmp(&(key(b), b.to_string()))
        };
        mine.sort_by(order);
        theirs.sort_by(order);
        assert!(
            !mine.is_empty() || kind.contains("delete"),
            "{kind}: no rows"
        );
        assert_eq!(mine, theirs, "{kind}");
    }
}

/// The rows of a tool answer (`read`, `duckdb-read`) in the columns `columns`, sorted by the
/// first.
fn picked(answer: &Value, columns: &[&str]) -> Vec<Vec<Value>> {
    let names: Vec<&str> = answer["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let at: Vec<usize> = columns
        .iter()
        .map(|c| names.iter().position(|n| n == c).unwrap())
        .collect();
    let mut rows: Vec<Vec<Value>> = answer["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| at.iter().map(|i| r[*i].clone()).collect())
        .collect();
    rows.sort_by_key(|r| r[0].as_i64());
    normalise(rows)
}

#[test]
fn branches_written_here_and_by_pyiceberg_read_alike() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    let columns = ["id", "v"];
    // Here: a branch written by every DML verb, a staged write published on top of a moved main.
    ours(
        &wh,
        "CREATE SCHEMA db; \
         CREATE TABLE db.b (id bigint, v string) USING iceberg \
           TBLPROPERTIES ('write.delete.mode' = 'merge-on-read', 'write.wap.enabled' = 'true'); \
         INSERT INTO db.b VALUES (1, 'a'), (2, 'b'), (3, 'c'); \
         ALTER TABLE db.b CREATE BRANCH audit; \
         INSERT INTO db.b.branch_audit VALUES (4, 'd'); \
         DELETE FROM db.b.branch_audit WHERE id = 1; \
         UPDATE db.b.branch_audit SET v = 'C' WHERE id = 3; \
         SET iceberg.wap_id = 'w1'; \
         INSERT INTO db.b VALUES (10, 'staged'); \
         RESET iceberg.wap_id; \
         INSERT INTO db.b VALUES (5, 'e'); \
         CALL system.publish_changes('db.b', 'w1')",
    );
    let rows = |v: Value| -> Vec<Vec<Value>> { normalise(serde_json::from_value(v).unwrap()) };
    let main = normalise(as_lists(
        &ours(&wh, "SELECT id, v FROM db.b ORDER BY id"),
        &columns,
    ));
    assert_eq!(
        main,
        rows(serde_json::json!([
            [1, "a"],
            [2, "b"],
            [3, "c"],
            [5, "e"],
            [10, "staged"]
        ]))
    );
    let audit = normalise(as_lists(
        &ours(
            &wh,
            "SELECT id, v FROM db.b VERSION AS OF 'audit' ORDER BY id",
        ),
        &columns,
    ));
    assert_eq!(
        audit,
        rows(serde_json::json!([[2, "b"], [3, "C"], [4, "d"]]))
    );
    let theirs = tool(&["read", "--warehouse", &whs, "--table", "db.b"]);
    assert_eq!(picked(&theirs, &columns), main, "pyiceberg main");
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    assert_eq!(picked(&duck, &columns), main, "DuckDB main");
    let theirs = tool(&[
        "read",
        "--warehouse",
        &whs,
        "--table",
        "db.b",
        "--ref",
        "audit",
    ]);
    assert_eq!(picked(&theirs, &columns), audit, "pyiceberg audit");

    // pyiceberg: a branch with its own append, and a tag; read here, then written here.
    let managed = tool(&[
        "manage",
        "--warehouse",
        &whs,
        "--table",
        "db.b",
        "--action",
        "branch",
        "--name",
        "py",
        "--rows",
        "[[100, \"py\"]]",
    ]);
    tool(&[
        "manage",
        "--warehouse",
        &whs,
        "--table",
        "db.b",
        "--action",
        "tag",
        "--name",
        "py_tag",
    ]);
    let py = normalise(as_lists(
        &ours(&wh, "SELECT id, v FROM db.b.branch_py ORDER BY id"),
        &columns,
    ));
    let mut want = main.clone();
    want.push(vec![serde_json::json!(100), serde_json::json!("py")]);
    assert_eq!(py, normalise(want));
    let tagged = normalise(as_lists(
        &ours(&wh, "SELECT id, v FROM db.b.tag_py_tag ORDER BY id"),
        &columns,
    ));
    assert_eq!(tagged, main);
    let refs = ours(&wh, "SELECT name, snapshot_id FROM db.b$refs ORDER BY name");
    let py_head = refs
        .iter()
        .find(|r| r["name"] == "py")
        .map(|r| r["snapshot_id"].clone())
        .unwrap();
    assert_eq!(managed["refs"]["py"], py_head);
    ours(&wh, "DELETE FROM db.b.branch_py WHERE id < 3");
    let py = normalise(as_lists(
        &ours(&wh, "SELECT id, v FROM db.b.branch_py ORDER BY id"),
        &columns,
    ));
    let theirs = tool(&[
        "read",
        "--warehouse",
        &whs,
        "--table",
        "db.b",
        "--ref",
        "py",
    ]);
    assert_eq!(
        picked(&theirs, &columns),
        py,
        "pyiceberg reads our write to its branch"
    );
    assert_eq!(
        py,
        rows(serde_json::json!([
            [3, "c"],
            [5, "e"],
            [10, "staged"],
            [100, "py"]
        ]))
    );

    // pyiceberg rolls main back to the first snapshot; read here.
    let first = ours(
        &wh,
        "SELECT snapshot_id FROM db.b$history ORDER BY made_current_at LIMIT 1",
    )[0]["snapshot_id"]
        .to_string();
    tool(&[
        "manage",
        "--warehouse",
        &whs,
        "--table",
        "db.b",
        "--action",
        "rollback",
        "--snapshot-id",
        &first,
    ]);
    let main = normalise(as_lists(
        &ours(&wh, "SELECT id, v FROM db.b ORDER BY id"),
        &columns,
    ));
    assert_eq!(
        main,
        rows(serde_json::json!([[1, "a"], [2, "b"], [3, "c"]]))
    );
}

#[test]
fn files_added_here_read_alike_and_describe_as_pyiceberg_adds_them() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().canonicalize().unwrap();
    let whs = wh.display().to_string();
    let src = wh.join("src");
    let srcs = src.display().to_string();
    tool(&["write-parquet", "--out", &srcs]);
    ours(
        &wh,
        &format!(
            "CREATE SCHEMA db; \
             CREATE TABLE db.h (id bigint, v string, x double, k string) USING iceberg PARTITIONED BY (k); \
             CALL system.add_files(table => 'db.h', source_table => '`parquet`.`{srcs}/hive`'); \
             CREATE TABLE db.f (id bigint, v string, x double) USING iceberg; \
             CALL system.add_files(table => 'db.f', source_table => '`parquet`.`{srcs}/flat`'); \
             CREATE TABLE db.pyf (id bigint, v string, x double) USING iceberg"
        ),
    );
    // The Hive-partitioned files read alike here, in pyiceberg and in DuckDB.
    let columns = ["id", "v", "x", "k"];
    let mine = normalise(as_lists(
        &ours(&wh, "SELECT id, v, x, k FROM db.h ORDER BY id"),
        &columns,
    ));
    let want: Vec<Vec<Value>> = serde_json::from_value(serde_json::json!([
        [1, "p", 1.5, "a"],
        [2, null, -2.0, "a"],
        [3, "q", 0.25, "b"]
    ]))
    .unwrap();
    assert_eq!(mine, normalise(want));
    let theirs = tool(&["read", "--warehouse", &whs, "--table", "db.h"]);
    assert_eq!(picked(&theirs, &columns), mine, "pyiceberg");
    let metadata = theirs["metadata_location"].as_str().unwrap().to_string();
    let duck = tool(&["duckdb-read", "--metadata", &metadata]);
    assert_eq!(picked(&duck, &columns), mine, "DuckDB");

    // The same flat files added by pyiceberg to a twin table: the descriptions agree.
    let flat: Vec<String> = ["one.parquet", "two.parquet"]
        .iter()
        .map(|f| format!("{srcs}/flat/{f}"))
        .collect();
    tool(&[
        "add-files",
        "--warehouse",
        &whs,
        "--table",
        "db.pyf",
        "--files",
        &serde_json::to_string(&flat).unwrap(),
    ]);
    let described = |table: &str| -> Vec<Value> {
        let answer = tool(&[
            "inspect",
            "--warehouse",
            &whs,
            "--table",
            table,
            "--kind",
            "files",
        ]);
        let mut rows: Vec<Value> = answer["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let name = r["file_path"].as_str().unwrap().rsplit('/').next().unwrap();
                serde_json::json!({
                    "file": name,
                    "record_count": r["record_count"],
                    "file_size_in_bytes": r["file_size_in_bytes"],
                    "column_sizes": r["column_sizes"],
                    "value_counts": r["value_counts"],
                    "null_value_counts": r["null_value_counts"],
                    "lower_bounds": r["lower_bounds"],
                    "upper_bounds": r["upper_bounds"],
                })
            })
            .collect();
        rows.sort_by_key(|r| r["file"].to_string());
        rows
    };
    let here = described("db.f");
    assert_eq!(here.len(), 2);
    assert_eq!(here, described("db.pyf"));
    let rows = |t: &str| ours(&wh, &format!("SELECT id, v, x FROM db.{t} ORDER BY id"));
    assert_eq!(rows("f"), rows("pyf"));
}
