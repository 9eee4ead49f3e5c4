//! The Python side of the object-storage tests (tests/interop/s3_tool.py: pyiceberg and DuckDB
//! on tables in S3), and rows of the tool's test table in the tool's JSON form.

use std::process::Command;

use iceberg_exec::IcebergSession;
use serde_json::Value;

use super::venv::{python, repo};

/// Runs s3_tool.py with `args`; its JSON output.
pub fn tool(args: &[&str]) -> Value {
    let out = Command::new(python())
        .arg(repo().join("tests/interop/s3_tool.py"))
        .args(args)
        .output()
        .expect("run s3_tool.py");
    assert!(
        out.status.success(),
        "s3_tool {:?} failed: {}",
        &args[..1],
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("tool prints JSON")
}

/// The tool's rows (`id, region, name, amount`), sorted by id, numbers other than integers as
/// floats.
pub fn by_id(v: &Value) -> Vec<Vec<Value>> {
    let mut rows: Vec<Vec<Value>> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("a row")
                .iter()
                .map(|x| match x {
                    Value::Number(n) if !n.is_i64() => serde_json::json!(n.as_f64()),
                    other => other.clone(),
                })
                .collect()
        })
        .collect();
    rows.sort_by_key(|r| r[0].as_i64());
    rows
}

/// Our rows of `query` (columns `id, region, name, amount`) in the same form.
pub async fn ours(s: &IcebergSession, query: &str) -> Vec<Vec<Value>> {
    let batches = super::sql(s, query)
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    let mut writer = arrow::json::ArrayWriter::new(Vec::new());
    for b in &batches {
        writer.write(b).expect("json");
    }
    writer.finish().expect("json");
    let rows: Vec<serde_json::Map<String, Value>> =
        serde_json::from_slice(&writer.into_inner()).unwrap_or_default();
    let mut out: Vec<Vec<Value>> = rows
        .into_iter()
        .map(|r| {
            ["id", "region", "name", "amount"]
                .iter()
                .map(|c| match r.get(*c).cloned().unwrap_or(Value::Null) {
                    Value::Number(n) if *c == "amount" => serde_json::json!(n.as_f64()),
                    other => other,
                })
                .collect()
        })
        .collect();
    out.sort_by_key(|r| r[0].as_i64());
    out
}

/// On the tool's table `pyns.events` (ids 1..=40): our INSERT, DELETE in both modes, UPDATE and
/// MERGE;
/// then pyiceberg (through `catalog`) and DuckDB (on the metadata file) must read exactly our
/// rows, which are returned.
pub async fn write_and_compare(s: &IcebergSession, catalog: &str) -> Vec<Vec<Value>> {
    for statement in [
        "INSERT INTO pyns.events VALUES (100, 'eu', NULL, 1.5), (101, NULL, 'x', NULL)",
        "SET iceberg.delete_mode = 'merge-on-read'",
        "DELETE FROM pyns.events WHERE id % 6 = 0",
        "SET iceberg.delete_mode = 'copy-on-write'",
        "DELETE FROM pyns.events WHERE id = 1",
        "UPDATE pyns.events SET name = 'updated' WHERE region IS NULL",
        "MERGE INTO pyns.events AS t USING (SELECT 5 AS id, 'merged' AS name UNION ALL \
         SELECT 150, 'inserted') AS s ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET name = s.name \
         WHEN NOT MATCHED THEN INSERT (id, region, name, amount) VALUES (s.id, 'eu', s.name, 0.5)",
    ] {
        super::sql(s, statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let mine = ours(s, "SELECT id, region, name, amount FROM pyns.events").await;
    assert_eq!(mine.len(), 42 - 6 - 1 + 1);
    assert!(
        mine.iter().any(|r| r[0] == 5 && r[2] == "merged"),
        "{mine:?}"
    );
    let theirs = tool(&["read", "--catalog", catalog, "--table", "pyns.events"]);
    assert_eq!(by_id(&theirs), mine, "pyiceberg");
    let meta = tool(&["metadata", "--catalog", catalog, "--table", "pyns.events"]);
    let metadata = meta["metadata"].as_str().expect("metadata location");
    assert!(metadata.starts_with("s3://"), "{metadata}");
    let duck = tool(&["duckdb-read", "--catalog", catalog, "--metadata", metadata]);
    assert_eq!(by_id(&duck), mine, "DuckDB");
    mine
}
