//! Tables in S3: a real S3 server (SeaweedFS on loopback, started per test) holds the tables'
//! data, delete, manifest and metadata files; the catalog is SQLite. Every statement family runs
//! there and is checked against an in-memory oracle, and pyiceberg and DuckDB read the result.

use std::collections::BTreeMap;

use crate::common::s3_tool::{by_id, ours, tool, write_and_compare};
use crate::common::seaweed::{SeaweedFs, BUCKET};
use crate::common::{files_under, render, sql};
use futures::TryStreamExt;
use iceberg_exec::{IcebergSession, WarehouseConfig};
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;

async fn open(server: &SeaweedFs, dir: &std::path::Path, warehouse: &str) -> IcebergSession {
    IcebergSession::open(config(server, dir, warehouse))
        .await
        .expect("open session")
}

fn config(server: &SeaweedFs, dir: &std::path::Path, warehouse: &str) -> WarehouseConfig {
    let mut config = WarehouseConfig::local(dir);
    config.warehouse = warehouse.to_string();
    config.catalog_uri = Some(format!("sqlite:///{}/catalog.db", dir.display()));
    config.properties = server.properties().into_iter().collect();
    config
}

/// Every key under `prefix` in the bucket.
async fn keys(server: &SeaweedFs, prefix: &str) -> Vec<String> {
    let store = server.bucket(BUCKET);
    let prefix = object_store::path::Path::from(prefix);
    let mut keys: Vec<String> = store
        .list(Some(&prefix))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    keys.sort();
    keys
}

/// `id|region|v` lines of the oracle's rows, sorted by id.
fn lines(rows: &BTreeMap<i64, (String, i64)>) -> Vec<String> {
    rows.iter()
        .map(|(id, (region, v))| format!("{id}|{region}|{v}"))
        .collect()
}

async fn table_rows(s: &IcebergSession, table: &str) -> Vec<String> {
    let batches = sql(s, &format!("SELECT id, region, v FROM {table} ORDER BY id"))
        .await
        .unwrap_or_else(|e| panic!("reading {table}: {e}"));
    render(&batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_works_on_tables_in_s3() {
    let server = SeaweedFs::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = open(&server, dir.path(), &format!("s3://{BUCKET}/wh")).await;
    let mut oracle: BTreeMap<i64, (String, i64)> = BTreeMap::new();

    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, region VARCHAR NOT NULL, v BIGINT NOT NULL) \
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (region) OPTIONS ('format-version' '2')",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO ns.t SELECT value, CASE WHEN value % 3 = 0 THEN 'eu' ELSE 'us' END, value * 10 \
         FROM generate_series(1, 300)",
    )
    .await
    .unwrap();
    for id in 1..=300i64 {
        let region = if id % 3 == 0 { "eu" } else { "us" };
        oracle.insert(id, (region.to_string(), id * 10));
    }
    assert_eq!(table_rows(&s, "ns.t").await, lines(&oracle));
    let first_snapshot = crate::common::current_snapshot(&s, "ns", "t")
        .await
        .unwrap();

    // Merge-on-read DELETE: position delete files land in S3 beside the data.
    sql(&s, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&s, "DELETE FROM ns.t WHERE id % 7 = 0").await.unwrap();
    oracle.retain(|id, _| id % 7 != 0);
    assert_eq!(table_rows(&s, "ns.t").await, lines(&oracle));

    // Copy-on-write UPDATE rewrites the touched files in S3.
    sql(&s, "UPDATE ns.t SET v = v + 1 WHERE id % 5 = 0")
        .await
        .unwrap();
    for (id, (_, v)) in oracle.iter_mut() {
        if id % 5 == 0 {
            *v += 1;
        }
    }
    assert_eq!(table_rows(&s, "ns.t").await, lines(&oracle));

    // Merge-on-read UPDATE and copy-on-write DELETE.
    sql(&s, "SET iceberg.update_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&s, "SET iceberg.delete_mode = 'copy-on-write'")
        .await
        .unwrap();
    sql(&s, "UPDATE ns.t SET v = 0 WHERE id < 20")
        .await
        .unwrap();
    sql(&s, "DELETE FROM ns.t WHERE id > 290").await.unwrap();
    for (id, (_, v)) in oracle.iter_mut() {
        if *id < 20 {
            *v = 0;
        }
    }
    oracle.retain(|id, _| *id <= 290);
    assert_eq!(table_rows(&s, "ns.t").await, lines(&oracle));

    // MERGE in both modes.
    for (mode, base) in [("copy-on-write", 1000), ("merge-on-read", 2000)] {
        sql(&s, &format!("SET iceberg.merge_mode = '{mode}'"))
            .await
            .unwrap();
        sql(
            &s,
            &format!(
                "MERGE INTO ns.t AS t USING (SELECT value AS id, value + {base} AS v FROM \
                 generate_series(280, 320)) AS s ON t.id = s.id \
                 WHEN MATCHED AND s.id % 2 = 0 THEN UPDATE SET v = s.v \
                 WHEN MATCHED THEN DELETE \
                 WHEN NOT MATCHED THEN INSERT (id, region, v) VALUES (s.id, 'new', s.v)"
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("MERGE ({mode}): {e}"));
        for id in 280..=320i64 {
            match oracle.get_mut(&id) {
                Some((_, v)) if id % 2 == 0 => *v = id + base,
                Some(_) => {
                    oracle.remove(&id);
                }
                None => {
                    oracle.insert(id, ("new".to_string(), id + base));
                }
            }
        }
        assert_eq!(table_rows(&s, "ns.t").await, lines(&oracle), "{mode}");
    }

    // CTAS into S3.
    sql(
        &s,
        "CREATE TABLE ns.copy AS SELECT id, region, v FROM ns.t WHERE region = 'eu'",
    )
    .await
    .unwrap();
    let eu: BTreeMap<i64, (String, i64)> = oracle
        .iter()
        .filter(|(_, (r, _))| r == "eu")
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    assert_eq!(table_rows(&s, "ns.copy").await, lines(&eu));

    // Time travel to the first snapshot, and the table read by its S3 path.
    let travelled = sql(
        &s,
        &format!(
            "SELECT count(*), sum(v) FROM iceberg_scan('ns.t', 'snapshot_id', {first_snapshot})"
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        render(&travelled),
        vec![format!("300|{}", (1..=300).sum::<i64>() * 10)]
    );
    let by_path = sql(
        &s,
        &format!("SELECT count(*) FROM iceberg_scan('s3://{BUCKET}/wh/ns/t')"),
    )
    .await
    .unwrap();
    assert_eq!(render(&by_path), vec![oracle.len().to_string()]);

    // Everything but the catalog database is in the bucket.
    let stored = keys(&server, "wh/ns/t").await;
    let count = |what: &str| stored.iter().filter(|k| k.contains(what)).count();
    assert!(count("/data/region=eu/") > 0, "{stored:?}");
    assert!(count("/data/region=us/") > 0, "{stored:?}");
    assert!(count(".metadata.json") >= 8, "{stored:?}");
    assert!(count("/metadata/snap-") >= 7, "{stored:?}");
    assert_eq!(files_under(dir.path()), vec!["catalog.db".to_string()]);

    // A second session (a new process would do the same) reads the same rows.
    drop(s);
    let again = open(&server, dir.path(), &format!("s3://{BUCKET}/wh")).await;
    // EXPLAIN ANALYZE counts the scan's requests; footers are fetched once per session, so the
    // same scan again needs fewer.
    let requests = |plan: &[String]| -> (u64, u64) {
        let text = plan.join("\n");
        let value = |name: &str| -> u64 {
            text.split(&format!("{name}="))
                .skip(1)
                .map(|rest| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<u64>().unwrap_or(0)
                })
                .sum()
        };
        (value("object_store_requests"), value("bytes_fetched"))
    };
    let query = "EXPLAIN ANALYZE SELECT sum(v) FROM ns.t WHERE region = 'us'";
    let (first, first_bytes) = requests(&render(&sql(&again, query).await.unwrap()));
    let (warm, _) = requests(&render(&sql(&again, query).await.unwrap()));
    assert!(
        first > 0 && first_bytes > 0,
        "{first} requests, {first_bytes} bytes"
    );
    assert!(
        warm < first,
        "footers fetched again: {first} then {warm} requests"
    );
    assert_eq!(table_rows(&again, "ns.t").await, lines(&oracle));
}

const ALL: &str = "SELECT id, region, name, amount FROM pyns.events";

/// The catalog properties pyiceberg is given for the same warehouse and catalog database.
fn pyiceberg_catalog(server: &SeaweedFs, dir: &std::path::Path, warehouse: &str) -> String {
    let mut props: serde_json::Map<String, Value> = server
        .properties()
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    props.insert("type".into(), "sql".into());
    props.insert(
        "uri".into(),
        format!("sqlite:///{}/catalog.db", dir.display()).into(),
    );
    props.insert("warehouse".into(), warehouse.into());
    Value::Object(props).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_and_duckdb_read_what_we_write_in_s3_and_we_read_theirs() {
    let server = SeaweedFs::start().await;
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("s3://{BUCKET}/py");
    let catalog = pyiceberg_catalog(&server, dir.path(), &warehouse);

    // pyiceberg writes a partitioned table with NULLs in four appends; we read the same rows.
    let created = tool(&["create", "--catalog", &catalog, "--table", "pyns.events"]);
    assert_eq!(created["rows"].as_array().unwrap().len(), 40);
    let mut config = config(&server, dir.path(), &warehouse);
    config.catalog_name = "test".into();
    let s = IcebergSession::open(config).await.unwrap();
    assert_eq!(ours(&s, ALL).await, by_id(&created));

    // Our INSERT, DELETE (both modes) and UPDATE; pyiceberg and DuckDB read the same rows.
    let mine = write_and_compare(&s, &catalog).await;

    // A pyiceberg append after our commits lands on top of them.
    tool(&[
        "append",
        "--catalog",
        &catalog,
        "--table",
        "pyns.events",
        "--ids",
        "200,201",
    ]);
    let after = ours(&s, ALL).await;
    assert_eq!(after.len(), mine.len() + 2);
}

/// The error of `statement` in a session of `config`, or of opening it.
async fn failure(config: WarehouseConfig, statement: &str) -> String {
    let s = match IcebergSession::open(config).await {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    match sql(&s, statement).await {
        Ok(rows) => panic!("{statement} succeeded: {:?}", render(&rows)),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_storage_settings_fail_in_one_line_and_change_nothing() {
    let server = SeaweedFs::start().await;
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("s3://{BUCKET}/bad");
    let good = open(&server, dir.path(), &warehouse).await;
    sql(&good, "CREATE SCHEMA ns").await.unwrap();
    sql(&good, "CREATE TABLE ns.t AS SELECT 1 AS id")
        .await
        .unwrap();
    let before = keys(&server, "bad").await;

    let one_line = |e: &str| {
        assert!(!e.trim().contains('\n'), "one line: {e}");
    };
    // Wrong secret: the server refuses the signature.
    let mut wrong = config(&server, dir.path(), &warehouse);
    wrong
        .properties
        .insert("s3.secret-access-key".into(), "not-the-secret".into());
    let e = failure(wrong.clone(), "INSERT INTO ns.t VALUES (2)").await;
    one_line(&e);
    assert!(!e.contains("not-the-secret"), "{e}");
    assert!(
        e.contains("403") || e.to_lowercase().contains("denied") || e.contains("Signature"),
        "{e}"
    );
    // Unreachable endpoint.
    let mut unreachable = config(&server, dir.path(), &warehouse);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    unreachable
        .properties
        .insert("s3.endpoint".into(), format!("http://127.0.0.1:{port}"));
    unreachable
        .properties
        .insert("s3.max-retries".into(), "1".into());
    let e = failure(unreachable, "SELECT * FROM ns.t").await;
    one_line(&e);
    assert!(
        e.contains(&port.to_string()) || e.contains("connect"),
        "{e}"
    );
    // A bucket that does not exist.
    let e = failure(
        config(&server, dir.path(), "s3://no-such-bucket/wh"),
        "CREATE TABLE ns.elsewhere AS SELECT 1 AS id",
    )
    .await;
    one_line(&e);
    assert!(e.contains("no-such-bucket"), "{e}");
    assert!(sql(&good, "SELECT * FROM ns.elsewhere").await.is_err());

    assert_eq!(keys(&server, "bad").await, before, "nothing changed");
    assert_eq!(
        render(&sql(&good, "SELECT * FROM ns.t").await.unwrap()),
        vec!["1"]
    );

    // A table whose metadata names an object that is gone: the error names it.
    let data = before
        .iter()
        .find(|k| k.ends_with(".parquet"))
        .expect("a data file")
        .clone();
    server
        .bucket(BUCKET)
        .delete(&object_store::path::Path::from(data.as_str()))
        .await
        .unwrap();
    let e = sql(&good, "SELECT * FROM ns.t")
        .await
        .unwrap_err()
        .to_string();
    one_line(&e);
    let file = data.rsplit('/').next().unwrap();
    assert!(e.contains(file), "{e}");
}

/// The sum of one metric over an `EXPLAIN ANALYZE` plan.
fn metric(plan: &[String], name: &str) -> u64 {
    plan.join("\n")
        .split(&format!("{name}="))
        .skip(1)
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().unwrap_or(0)
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_scan_reads_each_footer_page_index_and_delete_file_in_one_request() {
    let server = SeaweedFs::start().await;
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("s3://{BUCKET}/pages");
    let s = open(&server, dir.path(), &warehouse).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.p (id BIGINT NOT NULL, v BIGINT NOT NULL) STORED AS ICEBERG \
         LOCATION ''",
    )
    .await
    .unwrap();
    for part in 0..3 {
        let (lo, hi) = (part * 1000, part * 1000 + 999);
        sql(
            &s,
            &format!("INSERT INTO ns.p SELECT value, value * 2 FROM generate_series({lo}, {hi})"),
        )
        .await
        .unwrap();
    }
    drop(s);
    // A new session has no footer cached: each file it opens costs its footer and page index
    // (one request, from the end of the file), then its rows (one more).
    let cold = open(&server, dir.path(), &warehouse).await;
    let query = "SELECT count(*), sum(v) FROM ns.p WHERE id BETWEEN 1100 AND 1199";
    let plan = render(
        &sql(&cold, &format!("EXPLAIN ANALYZE {query}"))
            .await
            .unwrap(),
    );
    let (requests, opened) = (
        metric(&plan, "object_store_requests"),
        metric(&plan, "files_opened"),
    );
    assert!(opened >= 1, "no file opened: {plan:?}");
    assert_eq!(requests, 2 * opened, "{plan:?}");
    let sum: i64 = (1100..1200).map(|v| v * 2).sum();
    assert_eq!(
        render(&sql(&cold, query).await.unwrap()),
        vec![format!("100|{sum}")]
    );

    // Merge-on-read deletes in every file: a new session reads each (small) position delete
    // file in one request, and each data file's footer once, for the scan too.
    sql(&cold, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&cold, "DELETE FROM ns.p WHERE id % 10 = 0")
        .await
        .unwrap();
    drop(cold);
    let cold = open(&server, dir.path(), &warehouse).await;
    let plan = render(
        &sql(&cold, "EXPLAIN ANALYZE SELECT count(*), sum(v) FROM ns.p")
            .await
            .unwrap(),
    );
    let delete_files = metric(&plan, "position_delete_files_read");
    assert_eq!(delete_files, 3, "{plan:?}");
    // One request per delete file, one per footer of a file with deletes.
    assert_eq!(metric(&plan, "delete_load_requests"), 6, "{plan:?}");
    // The scan then reads each file's rows in one request, its footer already known.
    assert_eq!(metric(&plan, "object_store_requests"), 3, "{plan:?}");
    let kept: i64 = (0..3000).filter(|v| v % 10 != 0).map(|v| v * 2).sum();
    assert_eq!(
        render(
            &sql(&cold, "SELECT count(*), sum(v) FROM ns.p")
                .await
                .unwrap()
        ),
        vec![format!("2700|{kept}")]
    );
}
