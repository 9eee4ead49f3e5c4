//! Scan planning prunes files by partition values and column bounds, and never changes answers:
//! every predicate gives what plain DataFusion gives over the same rows held in memory.

mod common;

use std::sync::Arc;

use common::{render, rows, session, sql};
use datafusion::datasource::memory::MemTable;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

fn scanned_files(plan: &Arc<dyn ExecutionPlan>) -> usize {
    if let Some(ds) = plan.downcast_ref::<DataSourceExec>() {
        if let Some(conf) = ds.data_source().downcast_ref::<FileScanConfig>() {
            return conf.file_groups.iter().map(|g| g.len()).sum();
        }
    }
    plan.children().iter().map(|c| scanned_files(c)).sum()
}

#[tokio::test]
async fn partition_and_bounds_pruning_with_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT, region VARCHAR, day DATE, v DOUBLE)
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (region) OPTIONS ('partitioning' 'month(day)')",
    )
    .await
    .unwrap();
    // Four appends with disjoint id ranges; three regions (one NULL) and three months each.
    for chunk in 0..4 {
        let lo = chunk * 100 + 1;
        let hi = lo + 99;
        sql(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value,
                   CASE value % 3 WHEN 0 THEN 'eu' WHEN 1 THEN 'us' ELSE NULL END,
                   CASE value % 3 WHEN 0 THEN DATE '2025-01-15' WHEN 1 THEN DATE '2025-02-15' ELSE DATE '2025-03-15' END,
                   CASE WHEN value % 7 = 0 THEN NULL ELSE value / 10.0 END
                 FROM generate_series({lo}, {hi})"
            ),
        )
        .await
        .unwrap();
    }
    let all = s.context().sql("SELECT * FROM ns.t").await.unwrap();
    let total_files = scanned_files(&all.clone().create_physical_plan().await.unwrap());
    assert!(total_files >= 12, "{total_files}");
    let oracle = SessionContext::new();
    let schema = all.schema().inner().clone();
    let batches = all.collect().await.unwrap();
    oracle
        .register_table(
            "t",
            Arc::new(MemTable::try_new(schema, vec![batches]).unwrap()),
        )
        .unwrap();

    let cases: [(&str, Option<usize>); 12] = [
        ("region = 'eu'", Some(total_files / 3)),
        ("region IS NULL", Some(total_files / 3)),
        ("region IN ('eu', 'us')", Some(2 * total_files / 3)),
        ("id > 350", Some(total_files / 4)),
        (
            "id BETWEEN 150 AND 180 AND region = 'us'",
            Some(total_files / 12),
        ),
        ("day >= DATE '2025-03-01'", Some(total_files / 3)),
        ("NOT (region = 'eu')", None),
        ("region = 'eu' OR id < 50", None),
        ("v IS NULL", None),
        ("v > 30.5", None),
        ("id + 1 > 390", None),
        ("region <> 'us'", None),
    ];
    for (predicate, expected_files) in cases {
        let q = format!("SELECT id, region, day, v FROM ns.t WHERE {predicate} ORDER BY id");
        let df = s.context().sql(&q).await.unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        let files = scanned_files(&plan);
        if let Some(want) = expected_files {
            assert_eq!(files, want, "{predicate}: files scanned");
        }
        assert!(files <= total_files);
        let ours = render(&df.collect().await.unwrap());
        let q = format!("SELECT id, region, day, v FROM t WHERE {predicate} ORDER BY id");
        let expected = render(&oracle.sql(&q).await.unwrap().collect().await.unwrap());
        assert_eq!(ours, expected, "{predicate}");
        assert!(!ours.is_empty(), "{predicate} selects something");
    }
}

#[tokio::test]
async fn files_with_nan_values_are_never_pruned_by_planning() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.f (id BIGINT, v DOUBLE)")
        .await
        .unwrap();
    // A file of NaNs only: Iceberg's metrics evaluation would call it unable to match `v > 1`,
    // while DataFusion orders NaN above every number.
    sql(
        &s,
        "INSERT INTO ns.f VALUES (1, CAST('NaN' AS DOUBLE)), (2, CAST('NaN' AS DOUBLE))",
    )
    .await
    .unwrap();
    sql(&s, "INSERT INTO ns.f VALUES (5, 7.0)").await.unwrap();
    for predicate in ["v > 1.0", "NOT (v < 1.0)", "v = CAST('NaN' AS DOUBLE)"] {
        let df = s
            .context()
            .sql(&format!("SELECT id FROM ns.f WHERE {predicate}"))
            .await
            .unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        assert_eq!(
            scanned_files(&plan),
            2,
            "{predicate}: planning must keep both files"
        );
    }
    let ids = render(
        &sql(&s, "SELECT id FROM ns.f WHERE v > 1.0 ORDER BY id")
            .await
            .unwrap(),
    );
    assert_eq!(ids, ["1", "2", "5"]);
}

/// Manifests and manifest lists are read once: a second plan of the same snapshot comes from
/// the cache (the files can even be gone), and a new snapshot is planned from its own files.
#[tokio::test]
async fn planning_reads_manifests_once_per_process() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.c (id BIGINT, v BIGINT)")
        .await
        .unwrap();
    for lo in [0, 100, 200] {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.c SELECT value, value % 7 FROM generate_series({lo}, {lo} + 99)"
            ),
        )
        .await
        .unwrap();
    }
    let count = "SELECT count(*), sum(v) FROM ns.c";
    let filtered = "SELECT count(*) FROM ns.c WHERE id >= 150";
    let first = rows(&s, count).await;
    assert_eq!(rows(&s, filtered).await, rows(&s, filtered).await);
    // Every manifest and manifest list of the table is moved away: planning the same snapshot
    // again, unfiltered or filtered, never opens them.
    let metadata = dir.path().join("ns/c/metadata");
    let moved = dir.path().join("moved");
    std::fs::create_dir(&moved).unwrap();
    let mut avro = 0;
    for e in std::fs::read_dir(&metadata).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "avro") {
            std::fs::rename(e.path(), moved.join(e.file_name())).unwrap();
            avro += 1;
        }
    }
    assert!(avro >= 6, "{avro} manifest files");
    assert_eq!(rows(&s, count).await, first);
    assert!(rows(&s, filtered).await.join(" ").contains("150"));
    let stats = iceberg_exec::scan::manifest_cache_stats();
    assert!(stats.hits > 0 && stats.entries > 0 && stats.bytes <= stats.capacity);
    // Back in place, a new snapshot adds files the cache has never seen.
    for e in std::fs::read_dir(&moved).unwrap().flatten() {
        std::fs::rename(e.path(), metadata.join(e.file_name())).unwrap();
    }
    sql(&s, "INSERT INTO ns.c VALUES (1000, 1)").await.unwrap();
    let after = rows(&s, count).await;
    assert_ne!(after, first);
    assert!(after.join(" ").contains("301"), "{after:?}");
}

/// Broken files give errors that name them: a manifest that does not parse (with and without a
/// filter), a truncated data file, a missing data file.
#[tokio::test]
async fn broken_files_are_named_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.bad (id BIGINT, v VARCHAR)")
        .await
        .unwrap();
    for lo in [0, 1000] {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.bad SELECT value, 'v' || CAST(value AS VARCHAR) FROM generate_series({lo}, {lo} + 999)"
            ),
        )
        .await
        .unwrap();
    }
    let ident = iceberg::TableIdent::from_strs(["ns", "bad"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let list = table.manifest_list_reader(&snapshot).load().await.unwrap();
    let manifest = list.entries()[0]
        .manifest_path
        .trim_start_matches("file://")
        .to_string();
    let name = |p: &str| {
        std::path::Path::new(p)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string()
    };

    // A manifest that does not parse (same length, so nothing else gives it away).
    let good = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, vec![b'x'; good.len()]).unwrap();
    for query in [
        "SELECT count(*) FROM ns.bad",
        "SELECT count(*) FROM ns.bad WHERE id > 10",
    ] {
        let err = sql(&s, query).await.unwrap_err().to_string();
        assert!(err.contains(&name(&manifest)), "{query}: {err}");
    }
    std::fs::write(&manifest, &good).unwrap();
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.bad").await, ["2000"]);

    // A truncated data file, then a missing one.
    let files = iceberg_exec::scan::plan_files(&table, &snapshot)
        .await
        .unwrap();
    let data = files[0].path.trim_start_matches("file://").to_string();
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() / 2]).unwrap();
    let err = sql(&s, "SELECT * FROM ns.bad")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&name(&data)), "truncated: {err}");
    std::fs::remove_file(&data).unwrap();
    let err = sql(&s, "SELECT * FROM ns.bad")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&name(&data)), "missing: {err}");
}
