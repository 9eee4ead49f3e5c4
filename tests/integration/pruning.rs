//! Scan planning prunes files by partition values and column bounds, and never changes answers:
//! every predicate gives what plain DataFusion gives over the same rows held in memory.

use std::sync::Arc;

use crate::common::{render, rows, session, sql};
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

/// A table partitioned by a DOUBLE and a REAL column holding NaN, NULL and numbers records NaN
/// partition values as NaN (not as null, which JSON would make of them on their way from the
/// writers to the commit), through INSERT, a copy-on-write UPDATE and compaction. Every query
/// and DELETE answers as the same rows in an unpartitioned table do: `DELETE ... WHERE f IS
/// NULL` drops whole null partitions by their metadata, so a NaN file recorded as null would
/// lose its rows.
#[tokio::test]
async fn nan_partition_values_stay_nan() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    for (table, partitioning) in [("p", "PARTITIONED BY (f, r)"), ("u", "")] {
        sql(
            &s,
            &format!(
                "CREATE EXTERNAL TABLE ns.{table} (id BIGINT, f DOUBLE, r REAL) STORED AS ICEBERG \
                 LOCATION '' {partitioning}"
            ),
        )
        .await
        .unwrap();
        sql(
            &s,
            &format!(
                "INSERT INTO ns.{table} SELECT value AS id, \
                 CASE value % 4 WHEN 0 THEN CAST('NaN' AS DOUBLE) WHEN 1 THEN NULL \
                   ELSE CAST(value % 3 AS DOUBLE) END AS f, \
                 CASE value % 5 WHEN 0 THEN CAST('NaN' AS REAL) WHEN 1 THEN NULL \
                   ELSE CAST(value % 2 AS REAL) END AS r \
                 FROM generate_series(1, 200)"
            ),
        )
        .await
        .unwrap();
        for statement in [
            "UPDATE ns.{t} SET id = id + 1000 WHERE id % 7 = 0",
            "CALL system.rewrite_data_files(table => 'ns.{t}', options => map('rewrite-all', 'true'))",
        ] {
            // Through the session's own entry point: CALL runs there.
            s.sql(&statement.replace("{t}", table))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
        }
    }
    // Every file's partition tuple holds NaN exactly where its rows do.
    let ident = iceberg::TableIdent::from_strs(["ns", "p"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await
        .unwrap();
    let is_nan = |v: Option<&iceberg::spec::Literal>| matches!(v, Some(iceberg::spec::Literal::Primitive(p)) if p.is_nan());
    let mut nan_files = 0;
    for file in &files {
        let values: Vec<_> = file.partition.iter().collect();
        for (i, column) in ["f", "r"].iter().enumerate() {
            let where_ = match (values[i], is_nan(values[i])) {
                (None, _) => format!("{column} IS NULL"),
                (Some(_), true) => format!("isnan({column})"),
                (Some(_), false) => format!("{column} IS NOT NULL AND NOT isnan({column})"),
            };
            nan_files += is_nan(values[i]) as usize;
            // The file's own rows, read as plain parquet.
            let plain = SessionContext::new();
            let path = file.path.trim_start_matches("file://");
            plain
                .register_parquet("x", path, Default::default())
                .await
                .unwrap();
            let count = |q: String| {
                let plain = plain.clone();
                async move { render(&plain.sql(&q).await.unwrap().collect().await.unwrap()) }
            };
            assert_eq!(
                count(format!("SELECT count(*) FROM x WHERE {where_}")).await,
                count("SELECT count(*) FROM x".to_string()).await,
                "{}: {where_}",
                file.path
            );
        }
    }
    assert!(nan_files >= 2, "{files:?}");
    // The oracle: the same rows held in memory by plain DataFusion. Both tables, partitioned
    // and not, must answer as it does (parquet keeps NaN out of min/max: a reader pruning row
    // groups by them would lose the NaN rows of `r > 1.0` or `r = 'NaN'`).
    let batches = sql(&s, "SELECT id, f, r FROM ns.u").await.unwrap();
    let oracle = SessionContext::new();
    oracle
        .register_table(
            "o",
            Arc::new(MemTable::try_new(batches[0].schema(), vec![batches]).unwrap()),
        )
        .unwrap();
    for query in [
        "SELECT count(*), sum(id) FROM {t} WHERE isnan(f)",
        "SELECT count(*), sum(id) FROM {t} WHERE f IS NULL",
        "SELECT count(*), sum(id) FROM {t} WHERE f > 1.0",
        "SELECT count(*), sum(id) FROM {t} WHERE r > 1.0",
        "SELECT count(*), sum(id) FROM {t} WHERE f = CAST('NaN' AS DOUBLE)",
        "SELECT count(*), sum(id) FROM {t} WHERE r = CAST('NaN' AS REAL)",
        "SELECT count(*), sum(id) FROM {t} WHERE NOT (r < 1.0)",
        "SELECT count(*), sum(id) FROM {t} WHERE r >= 1.0 AND id > 10",
    ] {
        let want = render(
            &oracle
                .sql(&query.replace("{t}", "o"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap(),
        );
        assert_ne!(want, ["0|"], "{query}: the oracle selects rows");
        for table in ["ns.p", "ns.u"] {
            assert_eq!(
                rows(&s, &query.replace("{t}", table)).await,
                want,
                "{table}: {query}"
            );
        }
    }
    // Statements plan their own scans: their conditions on float columns must not prune the
    // NaN rows they select either (in these files `r` is at most 1 and `f` at most 2 but for
    // NaN, which orders above every number).
    for (statement, selects) in [
        (
            "UPDATE {t} SET id = id + 5000 WHERE f > 2.0",
            "SELECT count(*) FROM o WHERE f > 2.0",
        ),
        (
            "DELETE FROM {t} WHERE r > 1.0 AND id % 2 = 0",
            "SELECT count(*) FROM o WHERE r > 1.0 AND id % 2 = 0",
        ),
    ] {
        let want = render(&oracle.sql(selects).await.unwrap().collect().await.unwrap());
        assert_ne!(want, ["0"], "{selects}");
        for table in ["ns.p", "ns.u"] {
            assert_eq!(
                rows(&s, &statement.replace("{t}", table)).await,
                want,
                "{table}: {statement}"
            );
        }
    }
    for statement in [
        "DELETE FROM ns.{t} WHERE f IS NULL",
        "DELETE FROM ns.{t} WHERE r IS NULL",
        "DELETE FROM ns.{t} WHERE isnan(r)",
    ] {
        assert_eq!(
            rows(&s, &statement.replace("{t}", "p")).await,
            rows(&s, &statement.replace("{t}", "u")).await,
            "{statement}"
        );
        let all = "SELECT count(*), sum(id), count(f), count(r) FROM ns.{t}";
        assert_eq!(
            rows(&s, &all.replace("{t}", "p")).await,
            rows(&s, &all.replace("{t}", "u")).await,
            "after {statement}"
        );
    }
}

/// Manifests and manifest lists are read once: a second plan of the same snapshot comes from
/// the cache (the files can even be gone), and a new snapshot is planned from its own files.
#[tokio::test]
async fn planning_reads_manifests_once_per_process() {
    // The cache stays on while this test runs (other tests of this process may switch it off).
    let _cache = crate::common::MANIFEST_CACHE.lock().await;
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
    let stats = iceberg_exec::file_planning::manifest_cache_stats();
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
    let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
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

/// The scan reports what the manifests record about its columns to DataFusion's planner (min,
/// max, null counts, sizes), inexact since deletes and bound truncation make them so, and the
/// row count exactly only when nothing filters or deletes rows; estimates never change answers.
#[tokio::test]
async fn scans_report_the_manifests_column_statistics() {
    use datafusion::common::stats::Precision;
    use datafusion::common::ScalarValue;
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.t (id BIGINT, name VARCHAR, v DOUBLE, d DATE) STORED AS ICEBERG \
         LOCATION '' OPTIONS ('write.delete.mode' 'merge-on-read')",
        "INSERT INTO ns.t VALUES (5, 'b', NULL, DATE '2024-01-02'), (9, NULL, 1.5, NULL)",
        "INSERT INTO ns.t VALUES (-3, 'zz', NULL, DATE '2023-12-31'), (7, 'a', NULL, NULL)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let stats = |q: &'static str| {
        let s = s.clone();
        async move {
            let plan = s
                .context()
                .sql(q)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap();
            let mut node = plan;
            // The scan under whatever DataFusion put on top of it.
            while !node.name().contains("IcebergScan") {
                node = Arc::clone(node.children()[0]);
            }
            datafusion::physical_plan::StatisticsContext::new()
                .compute(
                    node.as_ref(),
                    &datafusion::physical_plan::StatisticsArgs::new(),
                )
                .unwrap()
        }
    };
    let all = stats("SELECT id, name, v, d FROM ns.t").await;
    assert_eq!(all.num_rows, Precision::Exact(4));
    let c = &all.column_statistics;
    assert_eq!(
        c[0].min_value,
        Precision::Inexact(ScalarValue::Int64(Some(-3)))
    );
    assert_eq!(
        c[0].max_value,
        Precision::Inexact(ScalarValue::Int64(Some(9)))
    );
    assert_eq!(c[0].null_count, Precision::Inexact(0));
    assert_eq!(c[0].byte_size, Precision::Inexact(32));
    assert_eq!(c[1].null_count, Precision::Inexact(1));
    let text = |p: &Precision<ScalarValue>| match p {
        Precision::Inexact(v) => v.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(text(&c[1].min_value), "a");
    assert_eq!(text(&c[1].max_value), "zz");
    assert!(matches!(c[1].byte_size, Precision::Inexact(n) if n > 0));
    // A file of NULLs only bounds nothing; the other file bounds the column.
    assert_eq!(
        c[2].min_value,
        Precision::Inexact(ScalarValue::Float64(Some(1.5)))
    );
    assert_eq!(c[2].null_count, Precision::Inexact(3));
    assert_eq!(text(&c[3].min_value), "2023-12-31");
    assert_eq!(all.total_byte_size, Precision::Absent);

    // A filter or a delete leaves the row count an estimate; answers stay right.
    let filtered = stats("SELECT id FROM ns.t WHERE id > 6").await;
    assert_eq!(filtered.num_rows, Precision::Inexact(4));
    sql(&s, "DELETE FROM ns.t WHERE id = 9").await.unwrap();
    let deleted = stats("SELECT id FROM ns.t").await;
    assert_eq!(deleted.num_rows, Precision::Inexact(4));
    assert_eq!(
        deleted.column_statistics[0].max_value,
        Precision::Inexact(ScalarValue::Int64(Some(9)))
    );
    assert_eq!(
        rows(&s, "SELECT count(*), max(id), count(v) FROM ns.t").await,
        ["3|7|0"]
    );
    assert_eq!(rows(&s, "SELECT count(name) FROM ns.t").await, ["3"]);
}
