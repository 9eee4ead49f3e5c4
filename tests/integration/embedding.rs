//! Embedding: the catalog registered in a plain DataFusion `SessionContext` of the caller's own,
//! on a current-thread runtime (the catalog's I/O runs on its own runtime).

use std::sync::Arc;

use crate::common::render;
use datafusion::prelude::SessionContext;
use iceberg_exec::{
    CatalogUri, IcebergCatalogProvider, IcebergTableFactory, SqlCatalog, SqlCatalogConfig,
};

#[tokio::test(flavor = "current_thread")]
async fn catalog_in_a_plain_session_context() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = SqlCatalog::connect(SqlCatalogConfig {
        name: "lake".into(),
        uri: CatalogUri::parse(&format!("sqlite:///{}/cat.db", dir.path().display())).unwrap(),
        warehouse: dir.path().display().to_string(),
        properties: Default::default(),
    })
    .await
    .unwrap();
    let ctx = SessionContext::new();
    ctx.register_catalog("lake", Arc::new(IcebergCatalogProvider::new(catalog)));
    ctx.state_ref()
        .write()
        .table_factories_mut()
        .insert("ICEBERG".into(), Arc::new(IcebergTableFactory));
    let run = |q: &'static str| {
        let ctx = ctx.clone();
        async move { render(&ctx.sql(q).await.unwrap().collect().await.unwrap()) }
    };
    run("CREATE SCHEMA lake.ns").await;
    run("CREATE TABLE lake.ns.t AS SELECT value AS id FROM generate_series(1, 5)").await;
    run("CREATE EXTERNAL TABLE lake.ns.s (id BIGINT) STORED AS ICEBERG LOCATION '' WITH ORDER (id DESC)").await;
    assert_eq!(
        run("INSERT INTO lake.ns.s SELECT id FROM lake.ns.t").await,
        ["5"]
    );
    assert_eq!(run("SELECT sum(id) FROM lake.ns.s").await, ["15"]);
    // A table in the session's own in-memory catalog and an Iceberg table, joined.
    run("CREATE TABLE datafusion.public.m AS SELECT 3 AS id").await;
    assert_eq!(
        run("SELECT s.id FROM lake.ns.s s JOIN datafusion.public.m m ON s.id = m.id").await,
        ["3"]
    );
    run("DROP TABLE lake.ns.t").await;
    let names = ctx
        .catalog("lake")
        .unwrap()
        .schema("ns")
        .unwrap()
        .table_names();
    assert_eq!(names, ["s"]);
}

/// Paths published before the commit layer and file planning got their own modules still name
/// the same items (deprecated): an embedder's code keeps compiling.
#[test]
#[allow(deprecated)]
fn moved_modules_keep_their_old_paths() {
    assert_eq!(
        iceberg_exec::snapshot::MAIN_BRANCH,
        iceberg_exec::commit::MAIN_BRANCH
    );
    assert_eq!(
        iceberg_exec::scan::DEFAULT_MANIFEST_CACHE_BYTES,
        iceberg_exec::file_planning::DEFAULT_MANIFEST_CACHE_BYTES
    );
    let old: fn(&iceberg_exec::snapshot::SnapshotChanges) -> u64 =
        iceberg_exec::snapshot::SnapshotChanges::added_records;
    let new: fn(&iceberg_exec::commit::SnapshotChanges) -> u64 =
        iceberg_exec::commit::SnapshotChanges::added_records;
    assert_eq!(old as usize, new as usize);
    fn store(_: &dyn iceberg_exec::catalog::MetadataStore) {}
    let _: fn(&dyn iceberg_exec::commit::MetadataStore) = store;
    let _: Option<iceberg_exec::physical_plan::write::WrittenFiles> =
        Some(iceberg_exec::commit::WrittenFiles::default());
}
