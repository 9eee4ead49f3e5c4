//! The Iceberg REST catalog with tables in S3: SeaweedFS (its REST catalog and S3 server, on
//! loopback, one per test) against pyiceberg, DuckDB and this crate, including the commit's
//! conflict (409) and unknown-outcome (5xx) paths.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::s3_tool::{by_id, ours, tool, write_and_compare};
use crate::common::seaweed::{SeaweedFs, ACCESS_KEY, SECRET_KEY, TABLE_BUCKET};
use crate::common::venv::{python, repo};
use crate::common::{render, sql};
use async_trait::async_trait;
use datafusion::error::Result;
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::TableIdent;
use iceberg_exec::commit::is_commit_state_unknown;
use iceberg_exec::commit::{CommitResult, MetadataChange};
use iceberg_exec::{
    IcebergSession, IcebergTableProvider, MetadataStore, ObjectStores, WarehouseConfig,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Catalog properties for the server's REST catalog, as pyiceberg takes them.
fn rest_props(server: &SeaweedFs, uri: &str) -> BTreeMap<String, String> {
    let mut props: BTreeMap<String, String> = server.properties().into_iter().collect();
    props.insert("uri".into(), uri.into());
    props.insert("warehouse".into(), format!("s3://{TABLE_BUCKET}/"));
    props.insert("credential".into(), format!("{ACCESS_KEY}:{SECRET_KEY}"));
    props
}

fn pyiceberg_catalog(props: &BTreeMap<String, String>) -> String {
    let mut m: serde_json::Map<String, Value> = props
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    m.insert("type".into(), "rest".into());
    Value::Object(m).to_string()
}

async fn open(props: &BTreeMap<String, String>) -> Result<IcebergSession> {
    let mut props = props.clone();
    let uri = props.remove("uri").unwrap();
    IcebergSession::open(WarehouseConfig {
        warehouse: String::new(),
        catalog_uri: Some(uri),
        catalog_name: "lake".into(),
        memory_limit: None,
        properties: props,
    })
    .await
}

const ALL: &str = "SELECT id, region, name, amount FROM pyns.events";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_catalog_tables_read_and_write_like_pyiceberg() {
    let server = SeaweedFs::start().await;
    let props = rest_props(&server, &server.rest_uri);
    let catalog = pyiceberg_catalog(&props);

    // pyiceberg creates a partitioned table with NULLs in four appends through the catalog.
    let created = tool(&["create", "--catalog", &catalog, "--table", "pyns.events"]);
    let s = open(&props).await.unwrap();
    assert_eq!(ours(&s, ALL).await, by_id(&created));
    assert_eq!(
        render(&sql(&s, "SHOW TABLES").await.unwrap())
            .iter()
            .filter(|l| l.contains("|pyns|events|"))
            .count(),
        1
    );

    // Nested namespaces are listed with the top level, each once.
    for levels in [vec!["org"], vec!["org", "team"]] {
        let ns = iceberg::NamespaceIdent::from_strs(levels).unwrap();
        s.catalog()
            .create_namespace(&ns, Default::default())
            .await
            .unwrap();
    }
    let mut listed: Vec<String> = s
        .catalog()
        .list_namespaces()
        .await
        .unwrap()
        .iter()
        .map(|ns| ns.as_ref().join("."))
        .collect();
    listed.sort();
    assert_eq!(listed, ["org", "org.team", "pyns"]);

    // INSERT, DELETE in both modes, UPDATE: pyiceberg and DuckDB read what we read.
    write_and_compare(&s, &catalog).await;

    // CTAS through the catalog; pyiceberg reads it.
    sql(
        &s,
        "CREATE TABLE pyns.copy AS SELECT id, region, name, amount FROM pyns.events WHERE id < 20",
    )
    .await
    .unwrap();
    let copied = tool(&["read", "--catalog", &catalog, "--table", "pyns.copy"]);
    assert_eq!(by_id(&copied), ours(&s, "SELECT * FROM pyns.copy").await);

    // A pyiceberg append between our statements lands, and so does ours after it.
    tool(&[
        "append",
        "--catalog",
        &catalog,
        "--table",
        "pyns.events",
        "--ids",
        "300,301",
    ]);
    sql(&s, "INSERT INTO pyns.events VALUES (302, 'us', 'z', 2.0)")
        .await
        .unwrap();
    let ids: Vec<i64> = ours(&s, ALL)
        .await
        .iter()
        .filter_map(|r| r[0].as_i64())
        .collect();
    for id in [300, 301, 302, 100, 101] {
        assert!(ids.contains(&id), "{id} is missing: {ids:?}");
    }
    let theirs = tool(&["read", "--catalog", &catalog, "--table", "pyns.events"]);
    assert_eq!(by_id(&theirs), ours(&s, ALL).await);

    // Time travel to pyiceberg's first snapshot.
    let snapshots = sql(
        &s,
        "SELECT snapshot_id FROM iceberg_snapshots('pyns.events') ORDER BY committed_at LIMIT 1",
    )
    .await
    .unwrap();
    let first = render(&snapshots)[0].clone();
    let first_rows = sql(
        &s,
        &format!("SELECT count(*) FROM iceberg_scan('pyns.events', 'snapshot_id', {first})"),
    )
    .await
    .unwrap();
    assert_eq!(render(&first_rows), vec!["10"]);
}

/// A store that lets another writer commit just before its first commit, so that the catalog
/// answers 409.
struct Raced {
    inner: Arc<dyn MetadataStore>,
    race: Box<dyn Fn() + Send + Sync>,
    commits: AtomicUsize,
    conflicts: AtomicUsize,
}

impl std::fmt::Debug for Raced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Raced").finish_non_exhaustive()
    }
}

#[async_trait]
impl MetadataStore for Raced {
    async fn load(self: Arc<Self>, ident: &TableIdent) -> Result<Table> {
        Arc::clone(&self.inner).load(ident).await
    }

    async fn commit_metadata(
        self: Arc<Self>,
        ident: &TableIdent,
        change: MetadataChange,
    ) -> Result<CommitResult> {
        if self.commits.fetch_add(1, Ordering::SeqCst) == 0 {
            (self.race)();
        }
        let result = Arc::clone(&self.inner)
            .commit_metadata(ident, change)
            .await?;
        if matches!(result, CommitResult::Conflict) {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        Ok(result)
    }

    fn file_io(&self) -> &FileIO {
        self.inner.file_io()
    }

    fn object_stores(&self) -> &Arc<ObjectStores> {
        self.inner.object_stores()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_commit_is_retried_and_both_writes_land() {
    let server = SeaweedFs::start().await;
    let props = rest_props(&server, &server.rest_uri);
    let catalog = pyiceberg_catalog(&props);
    tool(&["create", "--catalog", &catalog, "--table", "pyns.events"]);
    let s = open(&props).await.unwrap();
    let ident = TableIdent::from_strs(["pyns", "events"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let raced_catalog = catalog.clone();
    let store = Arc::new(Raced {
        inner: s.catalog().clone(),
        race: Box::new(move || {
            tool(&[
                "append",
                "--catalog",
                &raced_catalog,
                "--table",
                "pyns.events",
                "--ids",
                "500",
            ]);
        }),
        commits: AtomicUsize::new(0),
        conflicts: AtomicUsize::new(0),
    });
    let provider =
        IcebergTableProvider::try_new(table, Some(store.clone() as Arc<dyn MetadataStore>))
            .unwrap();
    let ctx = datafusion::prelude::SessionContext::new_with_state(
        iceberg_exec::session_state_builder(Default::default()).build(),
    );
    ctx.register_table("raced", Arc::new(provider)).unwrap();
    ctx.sql("INSERT INTO raced VALUES (600, 'eu', 'ours', 6.0)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        store.conflicts.load(Ordering::SeqCst),
        1,
        "the catalog said 409 once"
    );
    assert_eq!(store.commits.load(Ordering::SeqCst), 2);
    let theirs = tool(&["read", "--catalog", &catalog, "--table", "pyns.events"]);
    let ids: Vec<i64> = by_id(&theirs)
        .iter()
        .filter_map(|r| r[0].as_i64())
        .collect();
    assert!(ids.contains(&500) && ids.contains(&600), "{ids:?}");
    assert_eq!(ids.len(), 42);
}

/// What the proxy in front of the catalog does besides forwarding.
#[derive(Default)]
struct Faults {
    /// Answer table commits with 503 after the catalog applied them (the reply lost).
    fail_commits: AtomicBool,
    /// Give tokens this lifetime in seconds instead of the catalog's.
    token_lifetime: Option<u64>,
    /// Token requests seen.
    token_requests: AtomicUsize,
}

/// An HTTP proxy in front of the catalog at `target` that forwards every request, with `faults`.
async fn proxy(target: String, faults: Arc<Faults>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let http = reqwest::Client::new();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let http = http.clone();
            let target = target.clone();
            let faults = Arc::clone(&faults);
            tokio::spawn(async move {
                let mut buf = vec![];
                let mut chunk = [0u8; 8192];
                let head_end = loop {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let mut lines = head.split("\r\n");
                let mut first = lines.next().unwrap_or_default().split(' ');
                let method = first.next().unwrap_or_default().to_string();
                let path = first.next().unwrap_or_default().to_string();
                let mut headers = reqwest::header::HeaderMap::new();
                let mut length = 0usize;
                for l in lines {
                    if let Some((k, v)) = l.split_once(':') {
                        let (k, v) = (k.trim(), v.trim());
                        if k.eq_ignore_ascii_case("content-length") {
                            length = v.parse().unwrap_or(0);
                        } else if !k.eq_ignore_ascii_case("host")
                            && !k.eq_ignore_ascii_case("connection")
                        {
                            headers.insert(
                                reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                                v.parse().unwrap(),
                            );
                        }
                    }
                }
                while buf.len() < head_end + length {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body = buf[head_end..].to_vec();
                let response = http
                    .request(method.parse().unwrap(), format!("{target}{path}"))
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let is_commit = method == "POST"
                    && path.contains("/namespaces/")
                    && path.split('/').rev().nth(1) == Some("tables");
                let is_token = path.ends_with("/oauth/tokens");
                if is_token {
                    faults.token_requests.fetch_add(1, Ordering::SeqCst);
                }
                let status = response.status();
                let mut bytes = response.bytes().await.unwrap().to_vec();
                let mut status = format!(
                    "{} {}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or("")
                );
                if is_commit && faults.fail_commits.load(Ordering::SeqCst) {
                    status = "503 Service Unavailable".to_string();
                    bytes = br#"{"error":{"message":"upstream gone","type":"ServiceUnavailableException","code":503}}"#.to_vec();
                } else if let (true, Some(lifetime)) = (is_token, faults.token_lifetime) {
                    let mut token: Value = serde_json::from_slice(&bytes).unwrap();
                    token["expires_in"] = lifetime.into();
                    bytes = token.to_string().into_bytes();
                }
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    bytes.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.write_all(&bytes).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_on_commit_keeps_every_file_and_says_the_outcome_is_unknown() {
    let server = SeaweedFs::start().await;
    let faults = Arc::new(Faults::default());
    let proxied = proxy(server.rest_uri.clone(), Arc::clone(&faults)).await;
    let props = rest_props(&server, &proxied);
    let catalog = pyiceberg_catalog(&rest_props(&server, &server.rest_uri));
    tool(&["create", "--catalog", &catalog, "--table", "pyns.events"]);
    let s = open(&props).await.unwrap();

    faults.fail_commits.store(true, Ordering::SeqCst);
    let e = sql(
        &s,
        "INSERT INTO pyns.events VALUES (700, 'eu', 'lost reply', 7.0)",
    )
    .await
    .unwrap_err();
    faults.fail_commits.store(false, Ordering::SeqCst);
    assert!(is_commit_state_unknown(&e), "{e}");
    let text = e.to_string();
    assert!(text.contains("unknown") && text.contains("kept"), "{text}");
    assert!(!text.contains(SECRET_KEY), "{text}");

    // The catalog did apply it: the files must all still be there, and they are.
    let theirs = tool(&["read", "--catalog", &catalog, "--table", "pyns.events"]);
    let ids: Vec<i64> = by_id(&theirs)
        .iter()
        .filter_map(|r| r[0].as_i64())
        .collect();
    assert!(ids.contains(&700), "{ids:?}");
    assert_eq!(ours(&s, ALL).await, by_id(&theirs));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_catalog_settings_fail_in_one_line() {
    let server = SeaweedFs::start().await;
    let mut wrong = rest_props(&server, &server.rest_uri);
    wrong.insert("credential".into(), format!("{ACCESS_KEY}:wrong-secret"));
    let e = match open(&wrong).await {
        Ok(s) => sql(&s, "SHOW TABLES").await.map(|_| ()).unwrap_err(),
        Err(e) => e,
    }
    .to_string();
    assert!(!e.trim().contains('\n'), "{e}");
    assert!(!e.contains("wrong-secret"), "{e}");
    assert!(e.contains("refused"), "{e}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = rest_props(&server, &format!("http://127.0.0.1:{port}"));
    let e = open(&unreachable).await.unwrap_err().to_string();
    assert!(!e.trim().contains('\n'), "{e}");
    assert!(e.contains("did not answer"), "{e}");

    let s = open(&rest_props(&server, &server.rest_uri)).await.unwrap();
    let e = sql(&s, "SELECT * FROM nosuch.table")
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.trim().contains('\n'), "{e}");
}

/// `iceberg-exec --catalog NAME` with `$PYICEBERG_HOME/.pyiceberg.yaml`, its credential in a
/// `PYICEBERG_CATALOG__*` variable.
fn cli_with_pyiceberg_config(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .env("PYICEBERG_HOME", home)
        .env(
            "PYICEBERG_CATALOG__LAKE__CREDENTIAL",
            format!("{ACCESS_KEY}:{SECRET_KEY}"),
        )
        .args(args)
        .output()
        .expect("run iceberg-exec")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_opens_the_catalog_pyiceberg_is_configured_with() {
    let server = SeaweedFs::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut yaml = String::from("catalog:\n  lake:\n    type: rest\n");
    for (k, v) in rest_props(&server, &server.rest_uri) {
        if k != "credential" {
            yaml.push_str(&format!("    {k}: \"{v}\"\n"));
        }
    }
    std::fs::write(home.path().join(".pyiceberg.yaml"), yaml).unwrap();

    // pyiceberg, configured by that file, creates the table.
    let out = Command::new(python())
        .env("PYICEBERG_HOME", home.path())
        .env(
            "PYICEBERG_CATALOG__LAKE__CREDENTIAL",
            format!("{ACCESS_KEY}:{SECRET_KEY}"),
        )
        .arg(repo().join("tests/interop/s3_tool.py"))
        .args(["create", "--catalog", "@lake", "--table", "pyns.events"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Our CLI, configured by the same file, reads and writes it.
    let out = cli_with_pyiceberg_config(
        home.path(),
        &[
            "--catalog",
            "lake",
            "--format",
            "csv",
            "sql",
            "INSERT INTO pyns.events VALUES (900, 'eu', 'cli', 9.0); \
             SELECT count(*) AS n, max(id) AS top FROM pyns.events",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("41,900"), "{stdout}");

    // An unknown catalog name, and a wrong credential: one line each, no secret shown.
    let out = cli_with_pyiceberg_config(home.path(), &["--catalog", "nope", "sql", "SELECT 1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("configured: lake"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .env("PYICEBERG_HOME", home.path())
        .env(
            "PYICEBERG_CATALOG__LAKE__CREDENTIAL",
            "intruder:not-the-secret",
        )
        .args([
            "--catalog",
            "lake",
            "sql",
            "SELECT count(*) FROM pyns.events",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!err.contains("not-the-secret"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_renewed_before_they_expire() {
    let server = SeaweedFs::start().await;
    for (lifetime, expected) in [(None, 1), (Some(2), 2)] {
        let faults = Arc::new(Faults {
            token_lifetime: lifetime,
            ..Faults::default()
        });
        let proxied = proxy(server.rest_uri.clone(), Arc::clone(&faults)).await;
        let s = open(&rest_props(&server, &proxied)).await.unwrap();
        sql(&s, "CREATE SCHEMA IF NOT EXISTS ns").await.unwrap();
        // A token given 2 s is renewed once half of it has passed; the catalog's own (an hour)
        // lasts the whole test.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        sql(&s, "SHOW TABLES").await.unwrap();
        assert_eq!(
            faults.token_requests.load(Ordering::SeqCst),
            expected,
            "token lifetime {lifetime:?}"
        );
    }
}

/// Each live data file of `dv.t` with the Puffin files of the deletion vectors that apply to it
/// (and whether every delete that applies is one).
async fn vectors_of(s: &IcebergSession) -> BTreeMap<String, Vec<String>> {
    let table = s
        .catalog()
        .load_table(&TableIdent::from_strs(["dv", "t"]).unwrap())
        .await
        .unwrap();
    assert_eq!(
        table.metadata().format_version(),
        iceberg::spec::FormatVersion::V3
    );
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await
        .unwrap()
        .into_iter()
        .map(|f| {
            let vectors = f
                .position_deletes
                .iter()
                .map(|d| {
                    assert!(d.deletion_vector.is_some(), "{} is not a vector", d.path);
                    d.path.clone()
                })
                .collect();
            (f.path, vectors)
        })
        .collect()
}

/// Our rows of `dv.t` (`id`, `name`), sorted by id.
async fn dv_ours(s: &IcebergSession) -> Vec<Vec<Value>> {
    render(
        &sql(s, "SELECT id, name FROM dv.t ORDER BY id")
            .await
            .unwrap(),
    )
    .into_iter()
    .map(|line| {
        let (id, name) = line.split_once('|').unwrap();
        vec![Value::from(id.parse::<i64>().unwrap()), Value::from(name)]
    })
    .collect()
}

/// `dv.t`'s rows (`id`, `name`) as the oracle holds them.
fn dv_rows(oracle: &BTreeMap<i64, String>) -> Vec<Vec<Value>> {
    oracle
        .iter()
        .map(|(id, name)| vec![Value::from(*id), Value::from(name.as_str())])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_vectors_duckdb_writes_read_here_and_ours_read_in_duckdb_and_pyiceberg() {
    let server = SeaweedFs::start().await;
    let props = rest_props(&server, &server.rest_uri);
    let catalog = pyiceberg_catalog(&props);
    // SeaweedFS's table buckets take only the file names of its Iceberg layout rules: a Puffin
    // file under `data/` is refused (403), one under a `_`-prefixed directory is taken. DuckDB
    // (like this crate) writes a vector beside its data files, so the table's data path is one.
    let data_path = format!("s3://{TABLE_BUCKET}/dv/t/_data");
    tool(&[
        "duckdb-rest",
        "--catalog",
        &catalog,
        "--sql",
        "CREATE SCHEMA lake.dv",
        "--sql",
        &format!(
            "CREATE TABLE lake.dv.t (id BIGINT, name VARCHAR) \
             WITH ('format-version' = '3', 'write.data.path' = '{data_path}')"
        ),
        "--sql",
        "INSERT INTO lake.dv.t SELECT i, 'n' || i FROM range(0, 500) r(i)",
        "--sql",
        "INSERT INTO lake.dv.t SELECT i, 'n' || i FROM range(500, 1000) r(i)",
        "--sql",
        "DELETE FROM lake.dv.t WHERE id % 10 = 3",
    ]);
    let mut oracle: BTreeMap<i64, String> = (0..1000)
        .filter(|i| i % 10 != 3)
        .map(|i| (i, format!("n{i}")))
        .collect();
    let s = open(&props).await.unwrap();
    let ours_sorted = |rows: Vec<Vec<Value>>| {
        let mut rows = rows;
        rows.sort_by_key(|r| r[0].as_i64());
        rows
    };
    // DuckDB's deletes are deletion vectors, one per data file; we apply them.
    let theirs = vectors_of(&s).await;
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    assert!(theirs.values().all(|v| v.len() == 1), "{theirs:?}");
    assert_eq!(dv_ours(&s).await, dv_rows(&oracle));

    // Our merge-on-read DELETE and UPDATE: each touched file's vector now holds DuckDB's
    // positions and ours, in a Puffin file of ours; DuckDB's vectors are gone.
    sql(&s, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&s, "SET iceberg.update_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&s, "DELETE FROM dv.t WHERE id % 10 = 7").await.unwrap();
    oracle.retain(|id, _| id % 10 != 7);
    sql(
        &s,
        "UPDATE dv.t SET name = 'changed' WHERE id < 100 OR id >= 950",
    )
    .await
    .unwrap();
    for (id, name) in oracle.iter_mut() {
        if *id < 100 || *id >= 950 {
            *name = "changed".into();
        }
    }
    let now = vectors_of(&s).await;
    for (file, vectors) in &theirs {
        let mine = &now[file];
        assert_eq!(mine.len(), 1, "{file}: {mine:?}");
        assert_ne!(mine, vectors, "{file} still has DuckDB's vector");
        assert!(mine[0].starts_with(&data_path), "{mine:?}");
    }
    assert_eq!(dv_ours(&s).await, dv_rows(&oracle));

    // DuckDB (through the catalog) and pyiceberg read what we read.
    let duck = tool(&[
        "duckdb-rest",
        "--catalog",
        &catalog,
        "--sql",
        "SELECT id, name FROM lake.dv.t",
    ]);
    assert_eq!(ours_sorted(by_id(&duck)), dv_rows(&oracle));
    let py = tool(&["read", "--catalog", &catalog, "--table", "dv.t"]);
    assert_eq!(ours_sorted(by_id(&py)), dv_rows(&oracle));
}
