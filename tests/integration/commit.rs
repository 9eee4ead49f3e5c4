//! The commit path: concurrent writers retry and lose nothing; a failed commit leaves the table
//! and its directories exactly as they were.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::{files_under, rows, session, sql};
use async_trait::async_trait;
use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::TableIdent;
use iceberg_exec::catalog::{MetadataPointer, SwapOutcome};
use iceberg_exec::{IcebergTableProvider, MetadataStore, ObjectStores, SqlCatalog};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let setup = session(dir.path()).await;
    sql(&setup, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &setup,
        "CREATE EXTERNAL TABLE ns.t (writer INT, n INT) STORED AS ICEBERG LOCATION ''
         OPTIONS ('commit.retry.min-wait-ms' '5', 'commit.retry.num-retries' '50')",
    )
    .await
    .unwrap();

    const WRITERS: i32 = 4;
    const ROUNDS: i32 = 5;
    let mut tasks = vec![];
    for w in 0..WRITERS {
        // Separate sessions and catalog connections, like separate processes.
        let s = session(dir.path()).await;
        tasks.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                sql(
                    &s,
                    &format!("INSERT INTO ns.t VALUES ({w}, {r}), ({w}, {})", r + 100),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let total = WRITERS * ROUNDS * 2;
    assert_eq!(
        rows(&setup, "SELECT count(*) FROM ns.t").await,
        [total.to_string()]
    );
    assert_eq!(
        rows(&setup, "SELECT count(DISTINCT (writer, n)) FROM ns.t").await,
        [total.to_string()]
    );
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = setup.catalog().load_table(&ident).await.unwrap();
    let md = table.metadata();
    assert_eq!(md.snapshots().len() as i32, WRITERS * ROUNDS);
    assert_eq!(md.last_sequence_number() as i32, WRITERS * ROUNDS);
    assert_eq!(
        md.current_snapshot()
            .unwrap()
            .summary()
            .additional_properties["total-records"],
        total.to_string()
    );
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    AlwaysConflict,
    SwapFails,
    /// The swap takes effect, then the reply is lost (a dropped connection).
    SwapAppliesThenFails,
}

#[derive(Debug)]
struct FaultyStore {
    inner: Arc<SqlCatalog>,
    fault: Fault,
    swaps: AtomicUsize,
}

/// The warehouse's SQL catalog, opened on its own (like another process would).
async fn sql_catalog(dir: &std::path::Path) -> Arc<SqlCatalog> {
    let config = iceberg_exec::WarehouseConfig::local(dir);
    SqlCatalog::connect(iceberg_exec::SqlCatalogConfig {
        name: config.catalog_name.clone(),
        uri: iceberg_exec::CatalogUri::parse(&config.effective_catalog_uri().unwrap()).unwrap(),
        warehouse: config.warehouse.clone(),
        properties: Default::default(),
    })
    .await
    .unwrap()
}

#[async_trait]
impl MetadataPointer for FaultyStore {
    async fn load_current(self: Arc<Self>, ident: &TableIdent) -> Result<Table> {
        self.inner.load_table(ident).await
    }

    async fn swap(
        self: Arc<Self>,
        ident: &TableIdent,
        expected: &str,
        new: &str,
    ) -> Result<SwapOutcome> {
        self.swaps.fetch_add(1, Ordering::SeqCst);
        match self.fault {
            Fault::SwapAppliesThenFails => {
                Arc::clone(&self.inner).swap(ident, expected, new).await?;
                Err(DataFusionError::IoError(std::io::Error::other(
                    "connection reset (simulated)",
                )))
            }
            Fault::AlwaysConflict => Ok(SwapOutcome::Conflict),
            Fault::SwapFails => Err(DataFusionError::IoError(std::io::Error::other(
                "disk full (simulated)",
            ))),
        }
    }

    fn pointer_file_io(&self) -> &FileIO {
        self.inner.file_io()
    }

    fn pointer_object_stores(&self) -> &Arc<ObjectStores> {
        self.inner.object_stores()
    }
}

async fn failing_commit_leaves_table_unchanged(fault: Fault, statement: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id INT, day DATE) STORED AS ICEBERG LOCATION ''
         OPTIONS ('partitioning' 'month(day)', 'commit.retry.min-wait-ms' '1', 'commit.retry.num-retries' '3')",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO ns.t VALUES (1, DATE '2025-01-01'), (4, DATE '2025-01-02'), (5, DATE '2025-02-01')",
    )
    .await
    .unwrap();

    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let before = s.catalog().load_table(&ident).await.unwrap();
    let table_dir = dir.path().join("ns/t");
    let files_before = files_under(&table_dir);

    let store = Arc::new(FaultyStore {
        inner: sql_catalog(dir.path()).await,
        fault,
        swaps: AtomicUsize::new(0),
    });
    let ctx = datafusion::prelude::SessionContext::new_with_state(
        iceberg_exec::session_state_builder(Default::default()).build(),
    );
    ctx.register_table(
        "faulty",
        Arc::new(
            IcebergTableProvider::try_new(
                before.clone(),
                Some(store.clone() as Arc<dyn MetadataStore>),
            )
            .unwrap(),
        ),
    )
    .unwrap();
    let err = ctx
        .sql(statement)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();

    let after = s.catalog().load_table(&ident).await.unwrap();
    assert_eq!(after.metadata_location(), before.metadata_location());
    assert_eq!(
        after.metadata().current_snapshot_id(),
        before.metadata().current_snapshot_id()
    );
    assert_eq!(
        files_under(&table_dir),
        files_before,
        "files of the failed commit were left behind"
    );
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
        ["1", "4", "5"]
    );
    let swaps = store.swaps.load(Ordering::SeqCst);
    match fault {
        Fault::AlwaysConflict => assert_eq!(swaps, 4, "1 attempt + 3 retries"),
        Fault::SwapFails | Fault::SwapAppliesThenFails => assert_eq!(swaps, 1),
    }
    err
}

const INSERT: &str = "INSERT INTO faulty VALUES (2, DATE '2025-02-01'), (3, DATE '2025-03-01')";
/// Rewrites the January file (copy-on-write) and drops the February one whole.
const DELETE: &str = "DELETE FROM faulty WHERE id = 4 OR day >= DATE '2025-02-01'";

#[tokio::test]
async fn conflict_exhaustion_cleans_up() {
    for statement in [INSERT, DELETE] {
        let err = failing_commit_leaves_table_unchanged(Fault::AlwaysConflict, statement).await;
        assert!(err.contains("changed concurrently 4 time(s)"), "{err}");
    }
}

#[tokio::test]
async fn swap_error_cleans_up() {
    for statement in [INSERT, DELETE] {
        let err = failing_commit_leaves_table_unchanged(Fault::SwapFails, statement).await;
        assert!(err.contains("disk full (simulated)"), "{err}");
    }
}

#[tokio::test]
async fn a_swap_that_took_effect_is_a_success_even_if_it_reported_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.t (id INT)").await.unwrap();
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let before = s.catalog().load_table(&ident).await.unwrap();
    let store = Arc::new(FaultyStore {
        inner: sql_catalog(dir.path()).await,
        fault: Fault::SwapAppliesThenFails,
        swaps: AtomicUsize::new(0),
    });
    let ctx = datafusion::prelude::SessionContext::new();
    let provider =
        IcebergTableProvider::try_new(before, Some(store.clone() as Arc<dyn MetadataStore>))
            .unwrap();
    ctx.register_table("t", Arc::new(provider)).unwrap();
    let out = ctx
        .sql("INSERT INTO t VALUES (1), (2)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(crate::common::render(&out), ["2"]);
    // The files the commit references are all still there.
    assert_eq!(rows(&s, "SELECT sum(id) FROM ns.t").await, ["3"]);
}
