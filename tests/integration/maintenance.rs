//! Table maintenance: `rewrite_data_files` from SQL (`CALL system.rewrite_data_files(..)`) and
//! from Rust, checked against the rows before, the snapshot it commits, and commits made while
//! it runs.

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::{dictionary_pages, files_under, rows, session, sql};
use datafusion::arrow::array::RecordBatch;
use datafusion::error::Result;
use iceberg::spec::Operation;
use iceberg::table::Table;
use iceberg::TableIdent;
use iceberg_exec::maintenance::{RewriteDataFiles, RewriteStrategy};
use iceberg_exec::{IcebergSession, MetadataStore};

/// Runs a statement through the session's own entry point (where `CALL` lives).
async fn call(s: &IcebergSession, statement: &str) -> Result<Vec<RecordBatch>> {
    s.sql(statement).await?.collect().await
}

async fn table(s: &IcebergSession, name: &str) -> Table {
    let ident = TableIdent::from_strs(["ns", name]).unwrap();
    s.catalog().load_table(&ident).await.unwrap()
}

fn summary(t: &Table) -> HashMap<String, String> {
    t.metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties
        .clone()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A table of `inserts` small files (10 rows each), in merge-on-read mode.
async fn small_files(s: &IcebergSession, name: &str, inserts: i64, props: &str) {
    sql(s, "CREATE SCHEMA IF NOT EXISTS ns").await.unwrap();
    sql(
        s,
        &format!(
            "CREATE EXTERNAL TABLE ns.{name} (id BIGINT NOT NULL, part INT NOT NULL, v VARCHAR) \
             STORED AS ICEBERG LOCATION '' OPTIONS ('write.delete.mode' 'merge-on-read', \
             'write.update.mode' 'merge-on-read'{props})"
        ),
    )
    .await
    .unwrap();
    for i in 0..inserts {
        let values: Vec<String> = (0..10)
            .map(|j| {
                let id = i * 10 + j;
                format!("({id}, {}, 'v{id}')", id % 3)
            })
            .collect();
        sql(
            s,
            &format!("INSERT INTO ns.{name} VALUES {}", values.join(", ")),
        )
        .await
        .unwrap();
    }
}

fn store(s: &IcebergSession) -> Arc<dyn MetadataStore> {
    s.catalog().clone()
}

#[tokio::test]
async fn call_bin_packs_small_files_and_applies_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 8, "").await;
    sql(&s, "DELETE FROM ns.t WHERE id % 7 = 0").await.unwrap();
    sql(&s, "UPDATE ns.t SET v = 'changed' WHERE id % 5 = 0")
        .await
        .unwrap();
    let before = sorted(rows(&s, "SELECT id, part, v FROM ns.t").await);
    let t = table(&s, "t").await;
    let files_before = summary(&t)["total-data-files"].parse::<u64>().unwrap();
    let bytes_before = summary(&t)["total-files-size"].parse::<u64>().unwrap();
    let data_bytes_before = data_bytes(&t).await;
    let delete_files_before = summary(&t)["total-delete-files"].clone();
    assert_ne!(delete_files_before, "0");
    let base_seq = t.metadata().current_snapshot().unwrap().sequence_number();

    let out = crate::common::render(
        &call(
            &s,
            "CALL system.rewrite_data_files(table => 'ns.t', options => map('min-input-files', '2'))",
        )
        .await
        .unwrap(),
    );
    let t = table(&s, "t").await;
    let snap = t.metadata().current_snapshot().unwrap();
    assert_eq!(snap.summary().operation, Operation::Replace);
    let after = summary(&t);
    // Every file was small: all were rewritten into one, and every delete file went with them.
    assert_eq!(after["total-data-files"], "1", "{after:?}");
    assert_eq!(after["total-delete-files"], "0", "{after:?}");
    let written = after["total-files-size"].parse::<u64>().unwrap();
    assert_eq!(
        out,
        [format!(
            "{files_before}|1|{data_bytes_before}|0|{delete_files_before}"
        )]
    );
    assert!(written < bytes_before);
    assert_eq!(
        sorted(rows(&s, "SELECT id, part, v FROM ns.t").await),
        before
    );
    // The new file keeps the data sequence number of the snapshot the rewrite read.
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].data_seq, base_seq);
    assert!(files[0].position_deletes.is_empty());

    // Nothing left to do: a second call rewrites nothing and commits nothing.
    let out = crate::common::render(
        &call(
            &s,
            "CALL system.rewrite_data_files('ns.t', 'binpack', NULL, map('min-input-files', '2'))",
        )
        .await
        .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(out, ["0|0|0|0|0"]);
    assert_eq!(
        table(&s, "t").await.metadata().current_snapshot_id(),
        Some(snapshot.snapshot_id())
    );
}

/// Bytes of the table's data files.
async fn data_bytes(t: &Table) -> u64 {
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    iceberg_exec::file_planning::plan_files(t, &snapshot)
        .await
        .unwrap()
        .iter()
        .map(|f| f.size)
        .sum()
}

#[tokio::test]
async fn a_delete_committed_meanwhile_fails_the_rewrite_and_an_append_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 6, "").await;
    sql(&s, "DELETE FROM ns.t WHERE id = 3").await.unwrap();
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let state = s.context().state();

    // A merge-on-read DELETE of rows in files the rewrite read: the rewrite must not commit
    // (it would bring the deleted rows back), and leaves nothing behind.
    let planned = RewriteDataFiles::new(store(&s), ident.clone())
        .option("min-input-files", "2")
        .plan(&state)
        .await
        .unwrap();
    assert_eq!(planned.file_count(), 6);
    sql(&s, "DELETE FROM ns.t WHERE id IN (11, 12)")
        .await
        .unwrap();
    let after_delete = sorted(rows(&s, "SELECT id, v FROM ns.t").await);
    let snapshot = table(&s, "t").await.metadata().current_snapshot_id();
    let files = files_under(dir.path());
    let err = planned.execute(&state).await.unwrap_err().to_string();
    assert!(err.contains("commit conflict"), "{err}");
    assert!(err.contains("did not commit"), "{err}");
    assert_eq!(
        table(&s, "t").await.metadata().current_snapshot_id(),
        snapshot
    );
    assert_eq!(
        files_under(dir.path()),
        files,
        "the rewrite's files were removed"
    );
    assert_eq!(
        sorted(rows(&s, "SELECT id, v FROM ns.t").await),
        after_delete
    );

    // An append meanwhile does not conflict: its file stays as it is, next to the new one.
    let planned = RewriteDataFiles::new(store(&s), ident.clone())
        .option("min-input-files", "2")
        .plan(&state)
        .await
        .unwrap();
    sql(&s, "INSERT INTO ns.t VALUES (1000, 1, 'late')")
        .await
        .unwrap();
    let expected = sorted(rows(&s, "SELECT id, v FROM ns.t").await);
    let result = planned.execute(&state).await.unwrap();
    assert_eq!(result.rewritten_data_files_count, 6);
    assert_eq!(result.added_data_files_count, 1);
    assert_eq!(result.rewritten_rows_count, 57);
    let t = table(&s, "t").await;
    assert_eq!(summary(&t)["total-data-files"], "2");
    assert_eq!(summary(&t)["total-delete-files"], "0");
    assert_eq!(sorted(rows(&s, "SELECT id, v FROM ns.t").await), expected);
}

#[tokio::test]
async fn bad_calls_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 3, "").await;
    let snapshot = table(&s, "t").await.metadata().current_snapshot_id();
    let files = files_under(dir.path());
    for (statement, message) in [
        (
            "CALL system.rewrite_data_files(table => 'ns.t', options => map('min-input-file', '2'))",
            "no option 'min-input-file'",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.nope')",
            "nope",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', where => 'nope > 1')",
            "bad where 'nope > 1'",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', where => 'id + 1')",
            "must be boolean",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', strategy => 'zorder')",
            "'binpack' or 'sort'",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', strategy => 'sort')",
            "has no sort order",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', strategy => 'sort', sort_order => 'nope')",
            "no column 'nope'",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', strategy => 'sort', sort_order => 'zorder(id, nope)')",
            "no column 'nope'",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', strategy => 'sort', sort_order => 'zorder(id', \
             options => map('min-input-files', '2'))",
            "write zorder(c1, c2, ...)",
        ),
        (
            "CALL system.rewrite_data_files(table => 'ns.t', strategy => 'sort', sort_order => 'zorder(id)', \
             options => map('var-length-contribution', '0'))",
            "'var-length-contribution' must be greater than 0",
        ),
        ("CALL system.rewrite_data_files()", "'table' is required"),
        ("CALL system.expire_everything(table => 'ns.t')", "no procedure"),
        ("CALL other.rewrite_data_files(table => 'ns.t')", "unknown procedure"),
    ] {
        let err = call(&s, statement).await.unwrap_err().to_string();
        assert!(err.contains(message), "{statement}: {err}");
        assert!(!err.trim().contains('\n'), "{statement}: one line: {err}");
    }
    assert_eq!(
        table(&s, "t").await.metadata().current_snapshot_id(),
        snapshot
    );
    assert_eq!(files_under(dir.path()), files);
}

#[tokio::test]
async fn sort_strategy_where_filter_and_partial_progress() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.p (id BIGINT NOT NULL, part INT NOT NULL, v VARCHAR) \
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (part)",
    )
    .await
    .unwrap();
    for i in 0..4 {
        let values: Vec<String> = (0..30)
            .map(|j| {
                let id = i * 30 + j;
                format!("({id}, {}, 'v{id}')", id % 3)
            })
            .collect();
        sql(
            &s,
            &format!("INSERT INTO ns.p VALUES {}", values.join(", ")),
        )
        .await
        .unwrap();
    }
    let before = sorted(rows(&s, "SELECT id, part, v FROM ns.p").await);
    // Only partition 1 (the filter prunes the others by partition value), sorted by id
    // descending.
    let out = crate::common::render(
        &call(
            &s,
            "CALL system.rewrite_data_files(table => 'ns.p', strategy => 'sort', \
             sort_order => 'id DESC NULLS LAST', where => 'part = 1', \
             options => map('min-input-files', '2'))",
        )
        .await
        .unwrap(),
    );
    assert!(out[0].starts_with("4|1|"), "{out:?}");
    let t = table(&s, "p").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
    assert_eq!(files.len(), 9);
    let new: Vec<_> = files
        .iter()
        .filter(|f| f.data_seq == snapshot.sequence_number() - 1 && f.record_count == 40)
        .collect();
    assert_eq!(new.len(), 1, "{files:?}");
    let ids = read_ids(&new[0].path);
    let mut want: Vec<i64> = (0..120).filter(|i| i % 3 == 1).collect();
    want.reverse();
    assert_eq!(ids, want);
    assert_eq!(
        sorted(rows(&s, "SELECT id, part, v FROM ns.p").await),
        before
    );

    // The rest with partial progress: one commit per partition's group.
    let snapshots = t.metadata().snapshots().count();
    let out = crate::common::render(
        &call(
            &s,
            "CALL system.rewrite_data_files(table => 'ns.p', options => map('min-input-files', \
             '2', 'partial-progress.enabled', 'true', 'partial-progress.max-commits', '5'))",
        )
        .await
        .unwrap(),
    );
    assert!(out[0].starts_with("8|2|"), "{out:?}");
    let t = table(&s, "p").await;
    assert_eq!(t.metadata().snapshots().count(), snapshots + 2);
    assert_eq!(summary(&t)["total-data-files"], "3");
    assert_eq!(
        sorted(rows(&s, "SELECT id, part, v FROM ns.p").await),
        before
    );
}

#[tokio::test]
async fn zorder_sort_interleaves_the_columns() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.g (x BIGINT NOT NULL, y BIGINT NOT NULL, v VARCHAR) \
         STORED AS ICEBERG LOCATION ''",
    )
    .await
    .unwrap();
    // A 32 x 32 grid in four inserts, rows in neither column's order.
    for part in 0..4i64 {
        let values: Vec<String> = (0..256i64)
            .map(|i| {
                let n = (i * 97 + part * 256) % 1024;
                format!("({}, {}, 'v{n}')", n % 32, n / 32)
            })
            .collect();
        sql(
            &s,
            &format!("INSERT INTO ns.g VALUES {}", values.join(", ")),
        )
        .await
        .unwrap();
    }
    let before = sorted(rows(&s, "SELECT x, y, v FROM ns.g").await);
    assert_eq!(before.len(), 1024);
    let out = crate::common::render(
        &call(
            &s,
            "CALL system.rewrite_data_files(table => 'ns.g', strategy => 'sort', \
             sort_order => 'zorder(x, y)', options => map('min-input-files', '2'))",
        )
        .await
        .unwrap(),
    );
    assert!(out[0].starts_with("4|1|"), "{out:?}");
    let t = table(&s, "g").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    let got = read_longs(&files[0].path, &["x", "y"]);

    // The oracle: Morton order with x's bit above y's at every level.
    let morton = |x: i64, y: i64| {
        (0..5).fold(0u64, |m, k| {
            m | ((((x >> k) & 1) as u64) << (2 * k + 1)) | ((((y >> k) & 1) as u64) << (2 * k))
        })
    };
    let mut want: Vec<(i64, i64)> = (0..32).flat_map(|x| (0..32).map(move |y| (x, y))).collect();
    want.sort_by_key(|(x, y)| morton(*x, *y));
    let got: Vec<(i64, i64)> = got.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(got, want);
    // Each quarter of the file is one quadrant of the grid.
    for (q, rows) in got.chunks(256).enumerate() {
        let xs = rows
            .iter()
            .map(|r| r.0 / 16)
            .collect::<std::collections::HashSet<_>>();
        let ys = rows
            .iter()
            .map(|r| r.1 / 16)
            .collect::<std::collections::HashSet<_>>();
        assert_eq!((xs.len(), ys.len()), (1, 1), "quarter {q}");
    }
    assert_eq!(sorted(rows(&s, "SELECT x, y, v FROM ns.g").await), before);
}

#[tokio::test]
async fn zorder_sort_of_more_rows_than_the_pool_holds() {
    let dir = tempfile::tempdir().unwrap();
    // About 12 MB of rows as Arrow arrays against a 6 MiB pool: the sort below the writer
    // cannot hold them and must spill (or fail with the pool exhausted).
    let s = crate::common::session_with_limit(dir.path(), 6 << 20).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.big (x BIGINT NOT NULL, y BIGINT NOT NULL, v VARCHAR) \
         STORED AS ICEBERG LOCATION ''",
    )
    .await
    .unwrap();
    for part in 0..2i64 {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.big SELECT (value * 7919) % 1024, value % 250, \
                 concat('value-number-', value) FROM generate_series({}, {})",
                part * 125_000,
                part * 125_000 + 124_999
            ),
        )
        .await
        .unwrap();
    }
    let oracle = rows(
        &s,
        "SELECT count(*), sum(x), sum(y), sum(length(v)), min(v), max(v) FROM ns.big",
    )
    .await;
    let t = table(&s, "big").await;
    let before = t.metadata().current_snapshot().unwrap().clone();
    let inputs = iceberg_exec::file_planning::plan_files(&t, &before)
        .await
        .unwrap()
        .len();
    assert!(inputs >= 2);
    let statement = "CALL system.rewrite_data_files(table => 'ns.big', strategy => 'sort', \
                     sort_order => 'zorder(x, y)', options => map('min-input-files', '2'))";
    // With no room to spill, the rewrite fails and changes nothing: it needs to spill.
    let disk = std::sync::Arc::clone(&s.context().runtime_env().disk_manager);
    let room = disk.max_temp_directory_size();
    disk.set_max_temp_directory_size(1).unwrap();
    let e = call(&s, statement).await.unwrap_err().to_string();
    assert!(e.contains("disk space"), "{e}");
    assert_eq!(
        table(&s, "big").await.metadata().current_snapshot_id(),
        Some(before.snapshot_id())
    );
    assert_eq!(s.memory_pool().reserved(), 0);
    disk.set_max_temp_directory_size(room).unwrap();
    let out = crate::common::render(&call(&s, statement).await.unwrap());
    assert!(out[0].starts_with(&format!("{inputs}|")), "{out:?}");
    assert_eq!(
        rows(
            &s,
            "SELECT count(*), sum(x), sum(y), sum(length(v)), min(v), max(v) FROM ns.big"
        )
        .await,
        oracle
    );
    // Every new file is in z-order, and they follow each other in it.
    let morton = |x: i64, y: i64| {
        (0..10).fold(0u64, |m, k| {
            m | ((((x >> k) & 1) as u64) << (2 * k + 1)) | ((((y >> k) & 1) as u64) << (2 * k))
        })
    };
    let t = table(&s, "big").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
    let mut total = 0;
    for f in &files {
        let keys: Vec<u64> = read_longs(&f.path, &["x", "y"])
            .iter()
            .map(|r| morton(r[0], r[1]))
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "{} is in z-order",
            f.path
        );
        total += keys.len();
    }
    assert_eq!(total, 250_000);
    assert_eq!(s.memory_pool().reserved(), 0);
}

/// The named BIGINT columns of the parquet file at `path`, row by row.
/// Identity partition columns leave a z-order, as in Spark (constant within a partition, they
/// would only take bits from the others); a z-order of nothing else is refused.
#[tokio::test]
async fn zorder_leaves_out_identity_partition_columns() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.z (id BIGINT NOT NULL, part BIGINT NOT NULL) \
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (part)",
    )
    .await
    .unwrap();
    for round in 0..3i64 {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.z SELECT (value * 37 + {round}) % 300, value % 2 \
                 FROM generate_series(0, 99)"
            ),
        )
        .await
        .unwrap();
    }
    let before = sorted(rows(&s, "SELECT id, part FROM ns.z").await);
    let snapshot = table(&s, "z").await.metadata().current_snapshot_id();
    let err = call(
        &s,
        "CALL system.rewrite_data_files(table => 'ns.z', strategy => 'sort', \
         sort_order => 'zorder(part)', options => map('min-input-files', '2'))",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("only by identity partition columns (part)"),
        "{err}"
    );
    assert_eq!(
        table(&s, "z").await.metadata().current_snapshot_id(),
        snapshot
    );

    // zorder(part, id) is zorder(id): each partition's file in id order.
    call(
        &s,
        "CALL system.rewrite_data_files(table => 'ns.z', strategy => 'sort', \
         sort_order => 'zorder(part, id)', options => map('min-input-files', '2'))",
    )
    .await
    .unwrap();
    let t = table(&s, "z").await;
    let current = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &current)
        .await
        .unwrap();
    assert_eq!(files.len(), 2);
    for f in &files {
        let got = read_longs(&f.path, &["id", "part"]);
        assert_eq!(got.len(), 150);
        assert!(got.iter().all(|r| r[1] == got[0][1]));
        let ids: Vec<i64> = got.iter().map(|r| r[0]).collect();
        let mut want = ids.clone();
        want.sort();
        assert_eq!(ids, want);
    }
    assert_eq!(sorted(rows(&s, "SELECT id, part FROM ns.z").await), before);
}

fn read_longs(path: &str, columns: &[&str]) -> Vec<Vec<i64>> {
    use datafusion::arrow::array::{AsArray, Int64Array};
    let path = path.strip_prefix("file://").unwrap_or(path);
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut out = vec![];
    for b in reader {
        let b = b.unwrap();
        let arrays: Vec<&Int64Array> = columns
            .iter()
            .map(|c| b.column_by_name(c).unwrap().as_primitive())
            .collect();
        for i in 0..b.num_rows() {
            out.push(arrays.iter().map(|a| a.value(i)).collect());
        }
    }
    out
}

fn read_ids(path: &str) -> Vec<i64> {
    use datafusion::arrow::array::{AsArray, Int64Array};
    let path = path.strip_prefix("file://").unwrap_or(path);
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut out = vec![];
    for b in reader {
        let b = b.unwrap();
        let ids: &Int64Array = b.column_by_name("id").unwrap().as_primitive();
        out.extend(ids.values().iter().copied());
    }
    out
}

#[tokio::test]
async fn rust_builder_with_a_filter_expression() {
    use datafusion::prelude::{col, lit};
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 4, "").await;
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    // Files whose ids are all below 20 (the first two inserts), by column bounds.
    let result = RewriteDataFiles::new(store(&s), ident)
        .filter(col("id").lt(lit(20i64)))
        .strategy(RewriteStrategy::BinPack)
        .option("min-input-files", "2")
        .execute(&s.context().state())
        .await
        .unwrap();
    assert_eq!(result.rewritten_data_files_count, 2);
    assert_eq!(result.added_data_files_count, 1);
    assert_eq!(result.rewritten_rows_count, 20);
    assert_eq!(summary(&table(&s, "t").await)["total-data-files"], "3");
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["40"]);
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Files of the table on disk, relative to the warehouse.
fn table_files(dir: &std::path::Path, sub: &str) -> Vec<String> {
    files_under(dir)
        .into_iter()
        .filter(|f| f.starts_with(sub))
        .collect()
}

/// Every file the table's snapshots reach (manifest lists, manifests, live data and delete
/// files), each checked to exist.
async fn assert_reachable_files_exist(s: &IcebergSession, name: &str) -> usize {
    let t = table(s, name).await;
    let mut n = 0;
    for snapshot in t.metadata().snapshots() {
        let list = t.manifest_list_reader(snapshot).load().await.unwrap();
        let local = |p: &str| p.strip_prefix("file://").unwrap_or(p).to_string();
        assert!(std::path::Path::new(&local(snapshot.manifest_list())).exists());
        for m in list.entries() {
            assert!(std::path::Path::new(&local(&m.manifest_path)).exists());
            for e in m.load_manifest(t.file_io()).await.unwrap().entries() {
                if e.is_alive() {
                    assert!(
                        std::path::Path::new(&local(e.file_path())).exists(),
                        "{} is gone",
                        e.file_path()
                    );
                    n += 1;
                }
            }
        }
    }
    n
}

#[tokio::test]
async fn expire_snapshots_deletes_what_only_expired_snapshots_reach() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 3, "").await;
    sql(&s, "DELETE FROM ns.t WHERE id % 4 = 0").await.unwrap();
    call(
        &s,
        "CALL system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))",
    )
    .await
    .unwrap();
    sql(&s, "INSERT INTO ns.t VALUES (500, 1, 'last')")
        .await
        .unwrap();
    let rows_before = sorted(rows(&s, "SELECT id, v FROM ns.t").await);
    let t = table(&s, "t").await;
    let mut snapshots: Vec<_> = t.metadata().snapshots().cloned().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    assert_eq!(snapshots.len(), 6);
    let data_before = table_files(dir.path(), "ns/t/data");

    // Asking to expire the current snapshot is refused, and changes nothing.
    let current = t.metadata().current_snapshot_id().unwrap();
    let err = call(
        &s,
        &format!("CALL system.expire_snapshots(table => 'ns.t', snapshot_ids => array({current}))"),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("head of a branch"), "{err}");
    assert_eq!(table(&s, "t").await.metadata().snapshots().count(), 6);

    // Nothing is old enough by default (5 days).
    let out = crate::common::render(
        &call(&s, "CALL system.expire_snapshots(table => 'ns.t')")
            .await
            .unwrap(),
    );
    assert_eq!(out, ["0|0|0|0|0|0"]);

    // Keep the last two: the compaction and the insert after it.
    let out = crate::common::render(
        &call(
            &s,
            &format!(
                "CALL system.expire_snapshots(table => 'ns.t', older_than => {}, retain_last => 2)",
                now_ms() + 1000
            ),
        )
        .await
        .unwrap(),
    );
    // The three inserts' files and their delete files (one per data file) went: the compaction
    // replaced them. Four manifest lists; the manifests only they listed.
    let fields: Vec<u64> = out[0].split('|').map(|v| v.parse().unwrap()).collect();
    assert_eq!(fields[..3], [3, 3, 0], "{out:?}");
    assert!(fields[3] >= 3, "{out:?}");
    assert_eq!(fields[4], 4, "{out:?}");
    let t = table(&s, "t").await;
    let left: Vec<i64> = {
        let mut v: Vec<i64> = t.metadata().snapshots().map(|s| s.snapshot_id()).collect();
        v.sort();
        v
    };
    let mut want = vec![snapshots[4].snapshot_id(), snapshots[5].snapshot_id()];
    want.sort();
    assert_eq!(left, want);
    assert_eq!(
        sorted(rows(&s, "SELECT id, v FROM ns.t").await),
        rows_before
    );
    assert_eq!(assert_reachable_files_exist(&s, "t").await, 3);
    let data_after = table_files(dir.path(), "ns/t/data");
    assert_eq!(data_after.len(), 2, "{data_after:?}");
    assert!(data_before.len() > data_after.len());
    // The compacted snapshot still reads as it did.
    let id = snapshots[4].snapshot_id();
    assert_eq!(
        rows(
            &s,
            &format!("SELECT count(*) FROM iceberg_scan('ns.t', 'snapshot_id', {id})")
        )
        .await,
        [(rows_before.len() - 1).to_string()]
    );
    let gone = snapshots[0].snapshot_id();
    assert!(sql(
        &s,
        &format!("SELECT count(*) FROM iceberg_scan('ns.t', 'snapshot_id', {gone})")
    )
    .await
    .is_err());
}

#[tokio::test]
async fn remove_orphan_files_deletes_only_old_files_nothing_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 3, "").await;
    small_files(&s, "t2", 1, "").await;
    sql(&s, "DELETE FROM ns.t WHERE id % 4 = 0").await.unwrap();
    let t = table(&s, "t").await;
    let location = t.metadata().location().to_string();
    let local = location
        .strip_prefix("file://")
        .unwrap_or(&location)
        .to_string();
    // Strays: a data file and a manifest no snapshot lists, a file of a failed write.
    let data = table_files(dir.path(), "ns/t/data");
    let any = dir.path().join(&data[0]);
    let strays = [
        format!("{local}/data/stray-00000.parquet"),
        format!("{local}/metadata/stray-m0.avro"),
        format!("{local}/data/part=9/tmp-write.parquet"),
    ];
    for p in &strays {
        std::fs::create_dir_all(std::path::Path::new(p).parent().unwrap()).unwrap();
        std::fs::copy(&any, p).unwrap();
    }
    let other_table = table_files(dir.path(), "ns/t2");
    let before = files_under(dir.path());

    // New files are never orphans by default (3 days): nothing is found.
    let out = crate::common::render(
        &call(
            &s,
            "CALL system.remove_orphan_files(table => 'ns.t', dry_run => true)",
        )
        .await
        .unwrap(),
    );
    assert!(out.is_empty(), "{out:?}");

    // A dry run with a later cut-off lists exactly the strays, and deletes nothing.
    let cutoff = now_ms() + 60_000;
    let out = crate::common::render(
        &call(
            &s,
            &format!(
                "CALL system.remove_orphan_files(table => 'ns.t', older_than => {cutoff}, \
                 dry_run => true)"
            ),
        )
        .await
        .unwrap(),
    );
    let mut want: Vec<String> = strays.iter().map(|p| format!("file://{p}")).collect();
    want.sort();
    assert_eq!(sorted(out), want);
    assert_eq!(files_under(dir.path()), before);

    // Outside the table: refused.
    let err = call(
        &s,
        &format!(
            "CALL system.remove_orphan_files(table => 'ns.t', older_than => {cutoff}, \
             location => '{}')",
            dir.path().display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("not inside the location"), "{err}");

    // For real: the strays go, everything the table reaches stays, the other table is
    // untouched.
    let out = crate::common::render(
        &call(
            &s,
            &format!(
                "CALL system.remove_orphan_files('ns.t', TIMESTAMP '{}')",
                chrono::DateTime::from_timestamp_millis(cutoff)
                    .unwrap()
                    .format("%Y-%m-%d %H:%M:%S")
            ),
        )
        .await
        .unwrap(),
    );
    assert_eq!(sorted(out), want);
    for p in &strays {
        assert!(!std::path::Path::new(p).exists(), "{p}");
    }
    assert_eq!(files_under(dir.path()).len(), before.len() - strays.len());
    assert_eq!(table_files(dir.path(), "ns/t2"), other_table);
    assert!(assert_reachable_files_exist(&s, "t").await > 0);
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["22"]);
}

/// Orphans stream out a batch at a time, and a batch is deleted only when it is asked for: a
/// removal that finds tens of thousands of orphans holds one batch of them, never the list. The
/// same holds through `CALL`, which runs when its rows are read.
#[tokio::test]
async fn orphans_stream_out_and_are_deleted_a_batch_at_a_time() {
    use futures::StreamExt;
    use iceberg_exec::maintenance::RemoveOrphanFiles;

    let dir = tempfile::tempdir().unwrap();
    let s = crate::common::session_with_limit(dir.path(), 4 << 20).await;
    small_files(&s, "t", 2, "").await;
    sql(&s, "DELETE FROM ns.t WHERE id % 3 = 0").await.unwrap();
    let rows_before = sorted(rows(&s, "SELECT id, part, v FROM ns.t").await);
    let location = table(&s, "t").await.metadata().location().to_string();
    let local = location
        .strip_prefix("file://")
        .unwrap_or(&location)
        .to_string();
    // Files of failed writes, spread over directories.
    let orphans = 20_000;
    let mut want = Vec::with_capacity(orphans);
    for i in 0..orphans {
        let path = format!("{local}/data/failed-{:02}/o-{i:06}.parquet", i % 16);
        std::fs::create_dir_all(std::path::Path::new(&path).parent().unwrap()).unwrap();
        std::fs::write(&path, b"x").unwrap();
        want.push(format!("file://{path}"));
    }
    want.sort();
    let left = |want: &[String]| {
        want.iter()
            .filter(|p| std::path::Path::new(p.strip_prefix("file://").unwrap()).exists())
            .count()
    };
    let listed = files_under(std::path::Path::new(&local)).len() as u64;
    let paths = |batch: &RecordBatch| -> Vec<String> {
        use datafusion::arrow::array::{Array, AsArray};
        let column = batch.column(0).as_string::<i32>();
        (0..column.len())
            .map(|i| column.value(i).to_string())
            .collect()
    };

    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let mut stream = RemoveOrphanFiles::new(store, ident)
        .older_than_ms(now_ms() + 60_000)
        .execute_stream(s.context().task_ctx())
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.schema().field(0).name(), "orphan_file_location");
    assert!(first.num_rows() > 0 && first.num_rows() < orphans / 2);
    // Only the batch handed over is gone; the rest waits for the reader.
    assert_eq!(left(&want), orphans - first.num_rows());
    assert_eq!(stream.listed_files_count(), listed);
    let mut got = paths(&first);
    let mut batches = 1;
    while let Some(batch) = stream.next().await {
        got.extend(paths(&batch.unwrap()));
        batches += 1;
    }
    assert!(batches >= 3, "{batches} batches");
    // In path order, each orphan once, every one deleted.
    assert_eq!(got, want);
    assert_eq!(left(&want), 0);
    assert_eq!(stream.failed_deletes_count(), 0);
    drop(stream);
    assert_eq!(s.memory_pool().reserved(), 0);
    assert!(assert_reachable_files_exist(&s, "t").await > 0);
    assert_eq!(
        sorted(rows(&s, "SELECT id, part, v FROM ns.t").await),
        rows_before
    );

    // Through CALL: the arguments are checked at once, the files deleted as the rows are read.
    let strays: Vec<String> = (0..3)
        .map(|i| format!("{local}/data/failed-00/late-{i}.parquet"))
        .collect();
    for p in &strays {
        std::fs::write(p, b"x").unwrap();
    }
    let statement = format!(
        "CALL system.remove_orphan_files(table => 'ns.t', older_than => {})",
        now_ms() + 60_000
    );
    let err = s
        .sql(&format!(
            "{} , location => '/elsewhere')",
            statement.trim_end_matches(')')
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not inside the location"), "{err}");
    let mut want: Vec<String> = strays.iter().map(|p| format!("file://{p}")).collect();
    want.sort();
    let df = s.sql(&statement).await.unwrap();
    assert_eq!(left(&want), strays.len());
    let out = sorted(crate::common::render(&df.collect().await.unwrap()));
    assert_eq!(out, want);
    assert_eq!(left(&want), 0);
    assert_eq!(s.memory_pool().reserved(), 0);
}

#[tokio::test]
async fn rewrite_position_delete_files_in_sql() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 3, "").await;
    sql(&s, "DELETE FROM ns.t WHERE id % 4 = 0").await.unwrap();
    sql(&s, "DELETE FROM ns.t WHERE id % 5 = 0").await.unwrap();
    let before = sorted(rows(&s, "SELECT id, v FROM ns.t").await);
    // Our own merge-on-read keeps one delete file per data file: nothing to merge.
    let out = crate::common::render(
        &call(&s, "CALL system.rewrite_position_delete_files('ns.t')")
            .await
            .unwrap(),
    );
    assert_eq!(out, ["0|0|0|0"]);
    // rewrite-all writes each again.
    let out = crate::common::render(
        &call(
            &s,
            "CALL system.rewrite_position_delete_files(table => 'ns.t', options => \
             map('rewrite-all', 'true'))",
        )
        .await
        .unwrap(),
    );
    let fields: Vec<u64> = out[0].split('|').map(|v| v.parse().unwrap()).collect();
    assert_eq!(fields[..2], [3, 3], "{out:?}");
    assert!(fields[2] > 0 && fields[3] > 0, "{out:?}");
    let t = table(&s, "t").await;
    assert_eq!(
        t.metadata().current_snapshot().unwrap().summary().operation,
        Operation::Replace
    );
    assert_eq!(summary(&t)["total-delete-files"], "3");
    assert_eq!(sorted(rows(&s, "SELECT id, v FROM ns.t").await), before);
    let err = call(
        &s,
        "CALL system.rewrite_position_delete_files(table => 'ns.t', options => map('x', '1'))",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("no option 'x'"), "{err}");
}

#[tokio::test]
async fn rewrite_manifests_clusters_entries_and_changes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.p (id BIGINT NOT NULL, part INT NOT NULL, v VARCHAR) \
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (part) OPTIONS ('format-version' '3', \
         'write.delete.mode' 'merge-on-read')",
    )
    .await
    .unwrap();
    for i in 0..6 {
        let values: Vec<String> = (0..9)
            .map(|j| {
                let id = i * 9 + j;
                format!("({id}, {}, 'v{id}')", id % 3)
            })
            .collect();
        sql(
            &s,
            &format!("INSERT INTO ns.p VALUES {}", values.join(", ")),
        )
        .await
        .unwrap();
    }
    sql(&s, "DELETE FROM ns.p WHERE id % 4 = 0").await.unwrap();
    let lineage = "SELECT id, v, _row_id, _last_updated_sequence_number \
                   FROM iceberg_scan('ns.p', 'row_lineage', true)";
    let rows_before = sorted(rows(&s, lineage).await);
    let t = table(&s, "p").await;
    let before_snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files_of = |t: &Table| {
        let t = t.clone();
        async move {
            let snapshot = t.metadata().current_snapshot().unwrap().clone();
            let mut files: Vec<(String, i64, Option<i64>, usize)> =
                iceberg_exec::file_planning::plan_files(&t, &snapshot)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|f| (f.path, f.data_seq, f.first_row_id, f.position_deletes.len()))
                    .collect();
            files.sort();
            files
        }
    };
    let files_before = files_of(&t).await;
    let manifests_before = t
        .manifest_list_reader(&before_snapshot)
        .load()
        .await
        .unwrap()
        .entries()
        .len();

    let out = crate::common::render(
        &call(&s, "CALL system.rewrite_manifests('ns.p')")
            .await
            .unwrap(),
    );
    let t = table(&s, "p").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    assert_eq!(snapshot.summary().operation, Operation::Replace);
    let list = t.manifest_list_reader(&snapshot).load().await.unwrap();
    let data: Vec<_> = list
        .entries()
        .iter()
        .filter(|m| m.content == iceberg::spec::ManifestContentType::Data)
        .collect();
    assert_eq!(out, [format!("6|{}", data.len())]);
    assert!(list.entries().len() < manifests_before);
    // Clustered: each of the three partitions' entries sit together, here in one manifest.
    assert_eq!(data.len(), 1);
    // The same files with the same sequence numbers, row ids and deletes; the same rows and ids.
    assert_eq!(files_of(&t).await, files_before);
    assert_eq!(sorted(rows(&s, lineage).await), rows_before);
    // The snapshot before still reads.
    let id = before_snapshot.snapshot_id();
    assert_eq!(
        rows(
            &s,
            &format!("SELECT count(*) FROM iceberg_scan('ns.p', 'snapshot_id', {id})")
        )
        .await,
        [rows_before.len().to_string()]
    );
    // And the table takes changes after it.
    sql(&s, "DELETE FROM ns.p WHERE id = 1").await.unwrap();
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.p").await,
        [(rows_before.len() - 1).to_string()]
    );
    // Once clustered into one data manifest, again: nothing to do, no snapshot.
    call(&s, "CALL system.rewrite_manifests('ns.p')")
        .await
        .unwrap();
    let snapshot = table(&s, "p").await.metadata().current_snapshot_id();
    let out = crate::common::render(
        &call(&s, "CALL system.rewrite_manifests(table => 'ns.p')")
            .await
            .unwrap(),
    );
    assert_eq!(out, ["0|0"]);
    assert_eq!(
        table(&s, "p").await.metadata().current_snapshot_id(),
        snapshot
    );
}

/// A manifest rewrite whose entries outgrow its memory pool: their keys are sorted, the entries
/// read back a window at a time, and the result is the same as with memory to spare.
#[tokio::test]
async fn rewrite_manifests_under_a_small_pool() {
    use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionConfig;
    use iceberg_exec::maintenance::RewriteManifests;

    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.p (id BIGINT NOT NULL, part INT NOT NULL, v VARCHAR) \
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (part) OPTIONS ('format-version' '3', \
         'commit.manifest.target-size-bytes' '6144')",
    )
    .await
    .unwrap();
    for round in 0..24 {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.p SELECT value, CAST(value % 4 AS INT), 'v' || CAST(value AS \
                 VARCHAR) FROM generate_series({}, {})",
                round * 8,
                round * 8 + 7
            ),
        )
        .await
        .unwrap();
    }
    let lineage = "SELECT id, part, v, _row_id, _last_updated_sequence_number \
                   FROM iceberg_scan('ns.p', 'row_lineage', true)";
    let rows_before = sorted(rows(&s, lineage).await);
    let files_of = |t: Table| async move {
        let snapshot = t.metadata().current_snapshot().unwrap().clone();
        let mut files: Vec<(String, i64, Option<i64>)> =
            iceberg_exec::file_planning::plan_files(&t, &snapshot)
                .await
                .unwrap()
                .into_iter()
                .map(|f| (f.path, f.data_seq, f.first_row_id))
                .collect();
        files.sort();
        files
    };
    let files_before = files_of(table(&s, "p").await).await;
    assert_eq!(files_before.len(), 96);

    // A pool of 64 KiB: about a third of what the 96 entries take in memory.
    let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(64 << 10));
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::clone(&pool))
        .build_arc()
        .unwrap();
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_sort_spill_reservation_bytes(8 << 10))
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let ident = TableIdent::from_strs(["ns", "p"]).unwrap();
    let r = RewriteManifests::new(store, ident)
        .execute(&state)
        .await
        .unwrap();
    assert_eq!(r.rewritten_manifests_count, 24);
    // Six entries a manifest (6 KiB of 1 KiB entries), 24 entries a partition.
    assert_eq!(r.added_manifests_count, 16);
    assert_eq!(pool.reserved(), 0);

    let t = table(&s, "p").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    assert_eq!(snapshot.summary().operation, Operation::Replace);
    let list = t.manifest_list_reader(&snapshot).load().await.unwrap();
    assert_eq!(list.entries().len(), 16);
    // Each manifest holds one partition.
    let mut parts = vec![];
    for m in list.entries() {
        let entries = m.load_manifest(t.file_io()).await.unwrap();
        let mut values: Vec<String> = entries
            .entries()
            .iter()
            .map(|e| format!("{:?}", e.data_file().partition()))
            .collect();
        values.dedup();
        assert_eq!(values.len(), 1, "{values:?}");
        parts.push(values.remove(0));
    }
    parts.sort();
    parts.dedup();
    assert_eq!(parts.len(), 4);
    assert_eq!(files_of(t).await, files_before);
    assert_eq!(sorted(rows(&s, lineage).await), rows_before);
}

#[tokio::test]
async fn bin_packing_writes_one_file_per_bin_of_the_target_size() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 8, "").await;
    let before = sorted(rows(&s, "SELECT id, part, v FROM ns.t").await);
    let t = table(&s, "t").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let sizes: Vec<u64> = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap()
        .iter()
        .map(|f| f.size)
        .collect();
    // A target of about two files: four bins, four writers, four files.
    let target = sizes.iter().max().unwrap() * 2 + 10;
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let result = RewriteDataFiles::new(store(&s), ident)
        .option("rewrite-all", "true")
        .option("target-file-size-bytes", target.to_string())
        .execute(&s.context().state())
        .await
        .unwrap();
    assert_eq!(result.rewritten_data_files_count, 8);
    assert_eq!(result.added_data_files_count, 4, "{result:?}");
    assert_eq!(summary(&table(&s, "t").await)["total-data-files"], "4");
    assert_eq!(
        sorted(rows(&s, "SELECT id, part, v FROM ns.t").await),
        before
    );
}

#[tokio::test]
async fn a_rewrite_reports_its_progress_to_the_session() {
    use iceberg_exec::maintenance::{MaintenanceProgress, ProgressEvent};
    use std::sync::Mutex;
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    small_files(&s, "t", 6, "").await;
    let events: Arc<Mutex<Vec<ProgressEvent>>> = Arc::default();
    let seen = Arc::clone(&events);
    s.context()
        .state_ref()
        .write()
        .config_mut()
        .set_extension(Arc::new(MaintenanceProgress::new(move |e| {
            seen.lock().unwrap().push(e.clone())
        })));
    call(
        &s,
        "CALL system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true', \
         'partial-progress.enabled', 'true', 'target-file-size-bytes', '1'))",
    )
    .await
    .unwrap();
    let events = events.lock().unwrap().clone();
    // From 0 to all 6 files, never backwards.
    assert!(events.len() >= 2, "{events:?}");
    assert_eq!(events.first().unwrap().done, 0);
    assert!(events
        .iter()
        .all(|e| e.total == 6 && e.procedure == "rewrite_data_files"));
    assert!(events.windows(2).all(|w| w[0].done <= w[1].done));
    assert_eq!(events.last().unwrap().done, 6);
}

#[tokio::test]
async fn a_column_whose_dictionaries_overflowed_is_rewritten_plain() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    // Dictionaries of 512 bytes: 64 distinct ids fill one (the writer looks every 1,024
    // values), the few values of `part` and `v` never do.
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, part INT NOT NULL, v VARCHAR) \
         STORED AS ICEBERG LOCATION '' OPTIONS ('write.delete.mode' 'merge-on-read', \
         'write.parquet.dict-size-bytes' '512')",
    )
    .await
    .unwrap();
    for i in 0..4 {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value, CAST(value % 3 AS INT), 'v' || CAST(value % 10 AS \
                 VARCHAR) FROM generate_series({}, {})",
                i * 5000,
                i * 5000 + 4999
            ),
        )
        .await
        .unwrap();
    }
    sql(&s, "DELETE FROM ns.t WHERE id % 7 = 0").await.unwrap();
    let before = sorted(rows(&s, "SELECT id, part, v FROM ns.t").await);
    let t = table(&s, "t").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    // The files written so far tried a dictionary for every column; the ids' overflowed.
    for f in iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap()
    {
        let pages = dictionary_pages(&f.path);
        for column in ["id", "part", "v"] {
            assert!(pages[column].iter().all(|d| *d), "{column}: {pages:?}");
        }
    }

    call(
        &s,
        "CALL system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))",
    )
    .await
    .unwrap();
    let t = table(&s, "t").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    let pages = dictionary_pages(&files[0].path);
    assert!(pages["id"].iter().all(|d| !d), "{pages:?}");
    assert!(pages["part"].iter().all(|d| *d), "{pages:?}");
    assert!(pages["v"].iter().all(|d| *d), "{pages:?}");
    assert_eq!(
        sorted(rows(&s, "SELECT id, part, v FROM ns.t").await),
        before
    );
    // The compacted file's own dictionaries did not overflow: a second rewrite keeps them.
    call(
        &s,
        "CALL system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))",
    )
    .await
    .unwrap();
    let t = table(&s, "t").await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
    let pages = dictionary_pages(&files[0].path);
    assert!(pages["id"].iter().all(|d| !d), "{pages:?}");
    assert!(pages["part"].iter().all(|d| *d), "{pages:?}");
}
