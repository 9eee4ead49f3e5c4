//! SQL `DELETE` and `UPDATE`: metadata-only removal of whole files, two-pass copy-on-write of
//! the rest, the guards around DataFusion's DML planning, self-checks, and commits that fail
//! cleanly.

use std::collections::HashMap;

use crate::common::{current_snapshot, files_under, render, rows, session, sql};
use iceberg::TableIdent;
use iceberg_exec::IcebergSession;

/// A table of `(id BIGINT, region VARCHAR, v INT)` partitioned by region, written by several
/// INSERTs (so several files per region); `v` is NULL for every 5th id.
async fn regions_table(s: &IcebergSession) -> Vec<(i64, String, Option<i32>)> {
    sql(s, "CREATE SCHEMA IF NOT EXISTS ns").await.unwrap();
    sql(
        s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, region VARCHAR, v INT) \
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (region)",
    )
    .await
    .unwrap();
    let mut all = vec![];
    for batch in 0..3 {
        let mut values = vec![];
        for i in 0..40i64 {
            let id = batch * 100 + i;
            let region = ["eu", "us", "ap"][(i % 3) as usize];
            let v = (id % 5 != 0).then_some((id % 17) as i32);
            values.push(format!(
                "({id}, '{region}', {})",
                v.map_or("NULL".to_string(), |v| v.to_string())
            ));
            all.push((id, region.to_string(), v));
        }
        sql(s, &format!("INSERT INTO ns.t VALUES {}", values.join(", ")))
            .await
            .unwrap();
    }
    all
}

fn render_rows(rows: &[(i64, String, Option<i32>)]) -> Vec<String> {
    let mut sorted = rows.to_vec();
    sorted.sort();
    sorted
        .iter()
        .map(|(id, r, v)| format!("{id}|{r}|{}", v.map_or(String::new(), |v| v.to_string())))
        .collect()
}

async fn table_rows(s: &IcebergSession) -> Vec<String> {
    rows(s, "SELECT id, region, v FROM ns.t ORDER BY id, region").await
}

async fn summary(s: &IcebergSession) -> (String, HashMap<String, String>) {
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let snap = t.metadata().current_snapshot().unwrap();
    (
        snap.summary().operation.as_str().to_string(),
        snap.summary().additional_properties.clone(),
    )
}

async fn delete(s: &IcebergSession, query: &str) -> u64 {
    let out = rows(s, query).await;
    assert_eq!(out.len(), 1, "{query}: {out:?}");
    out[0].parse().unwrap()
}

#[tokio::test]
async fn copy_on_write_and_metadata_only_deletes_match_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let mut oracle = regions_table(&s).await;

    // A whole partition: proven from partition values, files dropped unread.
    let n = delete(&s, "DELETE FROM ns.t WHERE region = 'eu'").await;
    let before = oracle.len();
    oracle.retain(|r| r.1 != "eu");
    assert_eq!(n as usize, before - oracle.len());
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
    let (op, props) = summary(&s).await;
    assert_eq!(op, "delete");
    assert_eq!(props["deleted-data-files"], "3");
    assert!(!props.contains_key("added-data-files"), "{props:?}");
    assert_eq!(props["total-records"], oracle.len().to_string());

    // Some rows of some files: those files are rewritten, the others untouched.
    let n = delete(&s, "DELETE FROM ns.t WHERE id % 7 = 0 AND region = 'us'").await;
    let before = oracle.len();
    oracle.retain(|r| !(r.0 % 7 == 0 && r.1 == "us"));
    assert_eq!(n as usize, before - oracle.len());
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
    let (op, props) = summary(&s).await;
    assert_eq!(op, "overwrite");
    assert_eq!(props["deleted-data-files"], "3", "{props:?}");
    // The rewritten rows of one partition may share files: fewer files, never more.
    let added: usize = props["added-data-files"].parse().unwrap();
    assert!((1..=3).contains(&added), "{props:?}");
    assert_eq!(
        props["deleted-records"].parse::<usize>().unwrap()
            - props["added-records"].parse::<usize>().unwrap(),
        n as usize
    );

    // A NULL condition keeps the row: `v > 10` is NULL where v is NULL.
    let n = delete(&s, "DELETE FROM ns.t WHERE v > 10").await;
    let before = oracle.len();
    oracle.retain(|r| r.2.is_none_or(|v| v <= 10));
    assert_eq!(n as usize, before - oracle.len());
    assert!(oracle.iter().any(|r| r.2.is_none()));
    assert_eq!(table_rows(&s).await, render_rows(&oracle));

    // IS NULL, OR, IN.
    let n = delete(&s, "DELETE FROM ns.t WHERE v IS NULL OR id IN (1, 2, 201)").await;
    let before = oracle.len();
    oracle.retain(|r| !(r.2.is_none() || [1, 2, 201].contains(&r.0)));
    assert_eq!(n as usize, before - oracle.len());
    assert_eq!(table_rows(&s).await, render_rows(&oracle));

    // Nothing matches: no new snapshot.
    let snap = current_snapshot(&s, "ns", "t").await;
    assert_eq!(delete(&s, "DELETE FROM ns.t WHERE id > 100000").await, 0);
    assert_eq!(current_snapshot(&s, "ns", "t").await, snap);

    // No condition: every file goes, from metadata alone.
    let n = delete(&s, "DELETE FROM ns.t").await;
    assert_eq!(n as usize, oracle.len());
    assert!(table_rows(&s).await.is_empty());
    let (op, props) = summary(&s).await;
    assert_eq!(op, "delete");
    assert_eq!(props["total-records"], "0");
    assert_eq!(props["total-data-files"], "0");
}

#[tokio::test]
async fn false_and_null_conditions_delete_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let oracle = regions_table(&s).await;
    let snap = current_snapshot(&s, "ns", "t").await;
    for q in [
        "DELETE FROM ns.t WHERE false",
        "DELETE FROM ns.t WHERE NULL",
        "DELETE FROM ns.t WHERE 1 = 2",
        "DELETE FROM ns.t WHERE id > 5 AND false",
        "DELETE FROM ns.t WHERE v = NULL",
    ] {
        assert_eq!(delete(&s, q).await, 0, "{q}");
        assert_eq!(current_snapshot(&s, "ns", "t").await, snap, "{q}");
    }
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
}

#[tokio::test]
async fn conditions_that_would_not_reach_the_table_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let oracle = regions_table(&s).await;
    sql(&s, "CREATE TABLE ns.other (id BIGINT)").await.unwrap();
    sql(&s, "INSERT INTO ns.other VALUES (1), (2)")
        .await
        .unwrap();
    let snap = current_snapshot(&s, "ns", "t").await;
    for q in [
        "DELETE FROM ns.t WHERE id IN (SELECT id FROM ns.other)",
        "DELETE FROM ns.t WHERE EXISTS (SELECT 1 FROM ns.other WHERE other.id = t.id)",
        "DELETE FROM ns.t WHERE id = (SELECT max(id) FROM ns.other)",
        "DELETE FROM ns.t WHERE random() < 0.5",
    ] {
        let err = sql(&s, q).await.expect_err(q).to_string();
        assert!(
            err.contains("not supported") && err.contains("nothing was changed"),
            "{q}: {err}"
        );
        assert_eq!(current_snapshot(&s, "ns", "t").await, snap, "{q}");
    }
    // DELETE .. LIMIT is refused by the SQL front end or by the guard; either way nothing goes.
    assert!(sql(&s, "DELETE FROM ns.t WHERE id > 3 LIMIT 1")
        .await
        .is_err());
    // Unknown columns and non-boolean conditions fail at planning.
    assert!(sql(&s, "DELETE FROM ns.t WHERE nope = 1").await.is_err());
    assert!(sql(&s, "DELETE FROM ns.t WHERE id + 1").await.is_err());
    assert_eq!(current_snapshot(&s, "ns", "t").await, snap);
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
}

#[tokio::test]
async fn explain_plans_without_side_effects_and_analyze_reports_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let mut oracle = regions_table(&s).await;
    let snap = current_snapshot(&s, "ns", "t").await;
    let files = files_under(dir.path());

    let plan = render(
        &sql(
            &s,
            "EXPLAIN DELETE FROM ns.t WHERE region = 'eu' OR id = 101",
        )
        .await
        .unwrap(),
    )
    .join("\n");
    assert!(
        plan.contains("DeleteExec: table=ns.t, mode=copy-on-write"),
        "{plan}"
    );
    // The eu files go whole; of the others, bounds leave only the file that may hold id 101.
    assert!(plan.contains("removed_whole=3, checked=1"), "{plan}");
    assert_eq!(current_snapshot(&s, "ns", "t").await, snap);
    assert_eq!(files_under(dir.path()), files);

    let analyzed = render(
        &sql(
            &s,
            "EXPLAIN ANALYZE DELETE FROM ns.t WHERE region = 'eu' OR id = 101",
        )
        .await
        .unwrap(),
    )
    .join("\n");
    assert!(analyzed.contains("files_removed_whole=3"), "{analyzed}");
    assert!(analyzed.contains("files_rewritten=1"), "{analyzed}");
    oracle.retain(|r| !(r.1 == "eu" || r.0 == 101));
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
}

#[tokio::test]
async fn sort_order_is_kept_by_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT, region VARCHAR, v INT) \
         STORED AS ICEBERG LOCATION '' WITH ORDER (v DESC, id)",
    )
    .await
    .unwrap();
    let values: Vec<String> = (0..200)
        .map(|i| format!("({i}, 'r{}', {})", i % 4, (i * 37) % 101))
        .collect();
    sql(
        &s,
        &format!("INSERT INTO ns.t VALUES {}", values.join(", ")),
    )
    .await
    .unwrap();
    assert_eq!(delete(&s, "DELETE FROM ns.t WHERE region = 'r1'").await, 50);
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&t, &snapshot)
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    // The rewritten file, read in file order, is sorted by (v DESC, id).
    let path = files[0].path.trim_start_matches("file://").to_string();
    let batches = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&path).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap()
    .collect::<Result<Vec<_>, _>>()
    .unwrap();
    let mut keys = vec![];
    for b in &batches {
        let id = b.column_by_name("id").unwrap();
        let v = b.column_by_name("v").unwrap();
        let id = id
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        let v = v
            .as_any()
            .downcast_ref::<arrow::array::Int32Array>()
            .unwrap();
        for i in 0..b.num_rows() {
            keys.push((-(v.value(i) as i64), id.value(i)));
        }
    }
    assert_eq!(keys.len(), 150);
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

#[tokio::test]
async fn delete_without_the_guarding_planner_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let oracle = regions_table(&s).await;
    let table = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let store: std::sync::Arc<dyn iceberg_exec::MetadataStore> = s.catalog().clone();
    let provider = iceberg_exec::IcebergTableProvider::try_new(table, Some(store)).unwrap();
    // A bare DataFusion session: its planner would turn `IN (SELECT ..)` into "every row".
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_table("t", std::sync::Arc::new(provider.clone()))
        .unwrap();
    let err = ctx
        .sql("DELETE FROM t WHERE id = 1")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("IcebergQueryPlanner"), "{err}");
    // With the planner installed the same provider deletes.
    let ctx = datafusion::prelude::SessionContext::new_with_state(
        iceberg_exec::session_state_builder(Default::default()).build(),
    );
    ctx.register_table("t", std::sync::Arc::new(provider))
        .unwrap();
    let out = ctx
        .sql("DELETE FROM t WHERE id = 1")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(render(&out), ["1"]);
    assert_eq!(table_rows(&s).await.len(), oracle.len() - 1);
}

/// What a statement of the concurrency test did.
#[derive(Debug, Clone)]
enum Done {
    /// `INSERT` of these `(id, w)` rows.
    Insert(Vec<(i64, i64)>),
    /// `DELETE WHERE id % 10 = r`, with the count it reported.
    Delete(i64, u64),
    /// `UPDATE SET w = w + 1000 WHERE id % 10 = r`, with the count it reported.
    Update(i64, u64),
}

impl Done {
    /// The table after this statement, applied to `state` (sorted `(id, w)` rows).
    fn apply(&self, state: &[(i64, i64)]) -> (Vec<(i64, i64)>, u64) {
        let mut out: Vec<(i64, i64)> = vec![];
        let mut n = 0;
        match self {
            Done::Insert(rows) => {
                out = state.to_vec();
                out.extend(rows);
                n = rows.len() as u64;
            }
            Done::Delete(r, _) => {
                for &(id, w) in state {
                    if id % 10 == *r {
                        n += 1;
                    } else {
                        out.push((id, w));
                    }
                }
            }
            Done::Update(r, _) => {
                for &(id, w) in state {
                    if id % 10 == *r {
                        n += 1;
                        out.push((id, w + 1000));
                    } else {
                        out.push((id, w));
                    }
                }
            }
        }
        out.sort();
        (out, n)
    }

    fn reported(&self) -> u64 {
        match self {
            Done::Insert(rows) => rows.len() as u64,
            Done::Delete(_, n) | Done::Update(_, n) => *n,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deletes_updates_and_inserts_are_serializable() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, w BIGINT) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('commit.retry.min-wait-ms' '2', 'commit.retry.num-retries' '40')",
    )
    .await
    .unwrap();
    let seed: Vec<String> = (0..60).map(|i| format!("({i}, -1)")).collect();
    sql(&s, &format!("INSERT INTO ns.t VALUES {}", seed.join(", ")))
        .await
        .unwrap();
    let base = current_snapshot(&s, "ns", "t").await.unwrap();

    let mut tasks = vec![];
    for w in 0..2i64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = vec![];
            for round in 0..5i64 {
                let rows: Vec<(i64, i64)> = (0..8)
                    .map(|i| (1000 + w * 500 + round * 10 + i, w))
                    .collect();
                let values: Vec<String> = rows.iter().map(|(i, w)| format!("({i}, {w})")).collect();
                let q = format!("INSERT INTO ns.t VALUES {}", values.join(", "));
                if sql(&s, &q).await.is_ok() {
                    done.push(Done::Insert(rows));
                }
            }
            done
        }));
    }
    // Deleters and updaters, each statement on its own residue of id % 10, in both modes.
    for d in 0..3i64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = vec![];
            for round in 0..3i64 {
                let r = d * 3 + round;
                let mode = if (d + round) % 2 == 0 {
                    "copy-on-write"
                } else {
                    "merge-on-read"
                };
                let update = d == 2;
                let q = if update {
                    format!("UPDATE ns.t SET w = w + 1000 WHERE id % 10 = {r}")
                } else {
                    format!("DELETE FROM ns.t WHERE id % 10 = {r}")
                };
                // A session of its own: the mode is a session setting.
                let own = IcebergSession::with_catalog(s.catalog().clone(), None).unwrap();
                sql(&own, &format!("SET iceberg.delete_mode = '{mode}'"))
                    .await
                    .unwrap();
                sql(&own, &format!("SET iceberg.update_mode = '{mode}'"))
                    .await
                    .unwrap();
                match sql(&own, &q).await {
                    Ok(b) => {
                        let n = render(&b)[0].parse().unwrap();
                        done.push(if update {
                            Done::Update(r, n)
                        } else {
                            Done::Delete(r, n)
                        });
                    }
                    Err(e) => {
                        let e = e.to_string();
                        assert!(e.contains("conflict") || e.contains("concurrently"), "{e}");
                    }
                }
            }
            done
        }));
    }
    let mut done = vec![];
    for t in tasks {
        done.extend(t.await.unwrap());
    }
    let inserts = done.iter().filter(|d| matches!(d, Done::Insert(_))).count();
    assert_eq!(inserts, 10, "appends are retried, never refused");

    // Replay the history snapshot by snapshot: each one is exactly one successful statement
    // applied to its parent's rows, with the count it reported.
    let table = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let metadata = table.metadata();
    let mut chain = vec![];
    let mut at = metadata.current_snapshot_id();
    while let Some(id) = at {
        if id == base {
            break;
        }
        chain.push(id);
        at = metadata.snapshot_by_id(id).unwrap().parent_snapshot_id();
    }
    chain.reverse();
    let read = |id: i64| {
        let table = table.clone();
        async move {
            let provider = iceberg_exec::IcebergTableProvider::try_new(table, None)
                .unwrap()
                .with_snapshot_id(id)
                .unwrap();
            let ctx = datafusion::prelude::SessionContext::new();
            ctx.register_table("t", std::sync::Arc::new(provider))
                .unwrap();
            let b = ctx
                .sql("SELECT id, w FROM t ORDER BY id, w")
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            render(&b)
                .iter()
                .map(|line| {
                    let (a, b) = line.split_once('|').unwrap();
                    (a.parse::<i64>().unwrap(), b.parse::<i64>().unwrap())
                })
                .collect::<Vec<(i64, i64)>>()
        }
    };
    let mut state: Vec<(i64, i64)> = (0..60).map(|i| (i, -1)).collect();
    let mut unmatched = done.clone();
    for id in chain {
        let rows = read(id).await;
        let position = unmatched.iter().position(|d| {
            let (want, n) = d.apply(&state);
            want == rows && n == d.reported()
        });
        let Some(p) = position else {
            panic!("snapshot {id} is no successful statement applied to {state:?}: {rows:?}");
        };
        unmatched.remove(p);
        state = rows;
    }
    // Statements without a snapshot are the ones that found no row.
    for d in &unmatched {
        assert_eq!(d.reported(), 0, "lost: {d:?}");
    }
    for kind in ["Delete", "Update"] {
        assert!(
            done.iter()
                .any(|d| format!("{d:?}").starts_with(kind) && d.reported() > 0),
            "no {kind} succeeded: {done:?}"
        );
    }
}

fn update_rows(
    oracle: &mut [(i64, String, Option<i32>)],
    matches: impl Fn(&(i64, String, Option<i32>)) -> bool,
    change: impl Fn(&mut (i64, String, Option<i32>)),
) -> u64 {
    let mut n = 0;
    for r in oracle.iter_mut() {
        if matches(r) {
            change(r);
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn copy_on_write_updates_match_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let mut oracle = regions_table(&s).await;

    let want = update_rows(&mut oracle, |r| r.1 == "eu", |r| r.2 = r.2.map(|v| v * 2));
    assert_eq!(
        delete(&s, "UPDATE ns.t SET v = v * 2 WHERE region = 'eu'").await,
        want
    );
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
    let (op, props) = summary(&s).await;
    assert_eq!(op, "overwrite");
    assert_eq!(props["deleted-data-files"], "3", "{props:?}");
    assert_eq!(props["total-records"], oracle.len().to_string());

    // Rows move between partitions.
    let want = update_rows(&mut oracle, |r| r.0 % 4 == 0, |r| r.1 = "ap".into());
    assert_eq!(
        delete(&s, "UPDATE ns.t SET region = 'ap' WHERE id % 4 = 0").await,
        want
    );
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.t WHERE region = 'ap'").await,
        [oracle.iter().filter(|r| r.1 == "ap").count().to_string()]
    );

    // A NULL condition leaves the row alone; values may become NULL and back.
    let want = update_rows(&mut oracle, |r| r.2.is_some_and(|v| v > 12), |r| r.2 = None);
    assert_eq!(
        delete(&s, "UPDATE ns.t SET v = NULL WHERE v > 12").await,
        want
    );
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
    let want = update_rows(
        &mut oracle,
        |r| r.2.is_none(),
        |r| r.2 = Some(-(r.0 as i32)),
    );
    assert_eq!(
        delete(&s, "UPDATE ns.t SET v = -CAST(id AS INT) WHERE v IS NULL").await,
        want
    );
    assert_eq!(table_rows(&s).await, render_rows(&oracle));

    // Every row, several columns at once.
    let want = update_rows(
        &mut oracle,
        |_| true,
        |r| {
            r.1 = format!("{}!", r.1);
            r.2 = r.2.map(|v| v + 1);
        },
    );
    assert_eq!(
        delete(&s, "UPDATE ns.t SET region = region || '!', v = v + 1").await,
        want
    );
    assert_eq!(table_rows(&s).await, render_rows(&oracle));

    // Nothing matches: no snapshot.
    let snap = current_snapshot(&s, "ns", "t").await;
    assert_eq!(delete(&s, "UPDATE ns.t SET v = 1 WHERE id < 0").await, 0);
    assert_eq!(delete(&s, "UPDATE ns.t SET v = 1 WHERE false").await, 0);
    assert_eq!(current_snapshot(&s, "ns", "t").await, snap);
}

#[tokio::test]
async fn failed_updates_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let oracle = regions_table(&s).await;
    sql(&s, "CREATE TABLE ns.other (id BIGINT)").await.unwrap();
    let snap = current_snapshot(&s, "ns", "t").await;
    let files = files_under(dir.path());
    for q in [
        // id is NOT NULL: the rewrite fails after writing, its files are removed.
        "UPDATE ns.t SET id = NULL WHERE id % 2 = 0",
        "UPDATE ns.t SET v = 1 WHERE id IN (SELECT id FROM ns.other)",
        "UPDATE ns.t SET v = (SELECT max(id) FROM ns.other)",
        "UPDATE ns.t SET v = 1 FROM ns.other WHERE ns.other.id = ns.t.id",
        "UPDATE ns.t SET nope = 1",
        "UPDATE ns.t SET v = 1 WHERE random() < 0.5",
    ] {
        assert!(sql(&s, q).await.is_err(), "{q} was accepted");
        assert_eq!(current_snapshot(&s, "ns", "t").await, snap, "{q}");
    }
    // Only the catalog database changes on disk (its journal comes and goes).
    let now: Vec<String> = files_under(dir.path())
        .into_iter()
        .filter(|f| !f.starts_with("catalog.db"))
        .collect();
    let before: Vec<String> = files
        .into_iter()
        .filter(|f| !f.starts_with("catalog.db"))
        .collect();
    assert_eq!(now, before);
    assert_eq!(table_rows(&s).await, render_rows(&oracle));

    // EXPLAIN plans without running.
    let plan = render(
        &sql(&s, "EXPLAIN UPDATE ns.t SET v = 0 WHERE region = 'us'")
            .await
            .unwrap(),
    )
    .join("\n");
    assert!(plan.contains("UpdateExec: table=ns.t, mode=copy-on-write, removed_whole=0, checked=3, set=[v = Int32(0)]"), "{plan}");
    assert_eq!(current_snapshot(&s, "ns", "t").await, snap);
}

#[tokio::test]
async fn merge_on_read_writes_position_deletes_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let mut oracle = regions_table(&s).await;
    // The table's own property chooses the mode.
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.m (id BIGINT NOT NULL, region VARCHAR, v INT) STORED AS ICEBERG \
         LOCATION '' PARTITIONED BY (region) OPTIONS ('write.delete.mode' 'merge-on-read', \
         'write.update.mode' 'merge-on-read')",
    )
    .await
    .unwrap();
    // A fixed layout of six data files (two writer partitions × three regions): without work
    // stealing, each scan partition reads its own file group.
    sql(
        &s,
        "SET datafusion.execution.enable_file_stream_work_stealing = false",
    )
    .await
    .unwrap();
    sql(&s, "INSERT INTO ns.m SELECT * FROM ns.t")
        .await
        .unwrap();
    sql(
        &s,
        "SET datafusion.execution.enable_file_stream_work_stealing = true",
    )
    .await
    .unwrap();
    let m_rows = |s: &IcebergSession| {
        let s = s.clone();
        async move { rows(&s, "SELECT id, region, v FROM ns.m ORDER BY id, region").await }
    };
    let m_summary = |s: &IcebergSession| {
        let s = s.clone();
        async move {
            let t = s
                .catalog()
                .load_table(&TableIdent::from_strs(["ns", "m"]).unwrap())
                .await
                .unwrap();
            let snap = t.metadata().current_snapshot().unwrap();
            (
                snap.summary().operation.as_str().to_string(),
                snap.summary().additional_properties.clone(),
            )
        }
    };
    let plan = render(
        &sql(&s, "EXPLAIN DELETE FROM ns.m WHERE id % 7 = 0")
            .await
            .unwrap(),
    )
    .join("\n");
    assert!(plan.contains("mode=merge-on-read"), "{plan}");
    assert!(plan.contains("positions=__iceberg_pos"), "{plan}");

    let before = oracle.len();
    let n = delete(&s, "DELETE FROM ns.m WHERE id % 7 = 0").await;
    oracle.retain(|r| r.0 % 7 != 0);
    assert_eq!(n as usize, before - oracle.len());
    assert_eq!(m_rows(&s).await, render_rows(&oracle));
    let (op, props) = m_summary(&s).await;
    assert_eq!(op, "delete");
    // One file-scoped delete file per data file with a deleted row (each of the six has one).
    assert_eq!(
        props["added-delete-files"], props["total-data-files"],
        "{props:?}"
    );
    assert_eq!(props["added-delete-files"], "6", "{props:?}");
    assert_eq!(props["added-position-deletes"], n.to_string(), "{props:?}");
    assert!(!props.contains_key("deleted-data-files"), "{props:?}");

    // Deleted rows are not deleted again.
    assert_eq!(delete(&s, "DELETE FROM ns.m WHERE id % 7 = 0").await, 0);

    // UPDATE: position deletes for the old versions, new data files for the new ones.
    let want = update_rows(&mut oracle, |r| r.0 % 5 == 1, |r| r.2 = Some(1000));
    assert_eq!(
        delete(&s, "UPDATE ns.m SET v = 1000 WHERE id % 5 = 1").await,
        want
    );
    assert_eq!(m_rows(&s).await, render_rows(&oracle));
    let (op, props) = m_summary(&s).await;
    assert_eq!(op, "overwrite");
    // Each touched file's new delete file holds its earlier positions too (and replaces its
    // old one): the positions added beyond those removed are the updated rows.
    let count = |k: &str| props.get(k).map_or(0, |v| v.parse::<u64>().unwrap());
    assert_eq!(
        count("added-position-deletes") - count("removed-position-deletes"),
        want,
        "{props:?}"
    );
    assert_eq!(props["added-records"], want.to_string(), "{props:?}");

    // A whole partition still goes from metadata alone, with its position deletes.
    let before = oracle.len();
    let n = delete(&s, "DELETE FROM ns.m WHERE region = 'eu'").await;
    oracle.retain(|r| r.1 != "eu");
    assert_eq!(n as usize, before - oracle.len());
    assert_eq!(m_rows(&s).await, render_rows(&oracle));
    let (_, props) = m_summary(&s).await;
    // The DELETE and UPDATE rounds left one delete file on each of the two eu files (the
    // second took in the first).
    assert_eq!(props["removed-delete-files"], "2", "{props:?}");
    assert!(!props.contains_key("added-delete-files"), "{props:?}");

    // A session setting overrides the table; nonsense is refused before anything runs.
    sql(&s, "SET iceberg.delete_mode = 'copy-on-write'")
        .await
        .unwrap();
    let n = delete(&s, "DELETE FROM ns.m WHERE id % 11 = 0").await;
    oracle.retain(|r| r.0 % 11 != 0);
    assert!(n > 0);
    assert_eq!(m_rows(&s).await, render_rows(&oracle));
    assert_eq!(m_summary(&s).await.0, "overwrite");
    sql(&s, "SET iceberg.delete_mode = 'sometimes'")
        .await
        .unwrap();
    let err = sql(&s, "DELETE FROM ns.m WHERE id = 3").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("copy-on-write' or 'merge-on-read'"),
        "{err}"
    );
    assert_eq!(m_rows(&s).await, render_rows(&oracle));
}

#[tokio::test]
async fn merge_on_read_writes_one_delete_file_per_data_file_read_by_several_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL) STORED AS ICEBERG LOCATION '' OPTIONS \
         ('write.parquet.row-group-limit' '1000', 'write.delete.mode' 'merge-on-read', \
         'write.update.mode' 'merge-on-read')",
    )
    .await
    .unwrap();
    // One data file of 20 row groups, which DataFusion splits over four partitions.
    sql(
        &s,
        "INSERT INTO ns.t SELECT value FROM generate_series(0, 19999)",
    )
    .await
    .unwrap();
    for set in [
        "SET datafusion.execution.target_partitions = 4",
        "SET datafusion.optimizer.repartition_file_min_size = 0",
    ] {
        sql(&s, set).await.unwrap();
    }
    let plan = render(
        &sql(&s, "EXPLAIN DELETE FROM ns.t WHERE id % 7 = 0")
            .await
            .unwrap(),
    )
    .join("\n");
    assert!(plan.contains("4 groups"), "the file is not split: {plan}");
    let sum = |s: &IcebergSession| {
        let s = s.clone();
        async move { rows(&s, "SELECT count(*), sum(id) FROM ns.t").await }
    };
    let mut ids: Vec<i64> = (0..20_000).collect();

    let n = delete(&s, "DELETE FROM ns.t WHERE id % 7 = 0").await;
    ids.retain(|i| i % 7 != 0);
    assert_eq!(n, 20_000 - ids.len() as u64);
    let (_, props) = summary(&s).await;
    assert_eq!(props["added-delete-files"], "1", "{props:?}");
    assert_eq!(props["added-position-deletes"], n.to_string(), "{props:?}");
    let want = format!("{}|{}", ids.len(), ids.iter().sum::<i64>());
    assert_eq!(sum(&s).await, [want]);

    let plan = render(
        &sql(
            &s,
            "EXPLAIN UPDATE ns.t SET id = id + 100000 WHERE id % 5 = 1",
        )
        .await
        .unwrap(),
    )
    .join("\n");
    assert!(plan.contains("4 groups"), "the file is not split: {plan}");
    let n = delete(&s, "UPDATE ns.t SET id = id + 100000 WHERE id % 5 = 1").await;
    let updated = ids.iter().filter(|i| *i % 5 == 1).count();
    assert_eq!(n as usize, updated);
    for i in ids.iter_mut().filter(|i| **i % 5 == 1) {
        *i += 100_000;
    }
    let (_, props) = summary(&s).await;
    assert_eq!(props["added-delete-files"], "1", "{props:?}");
    // The file's new delete file takes in the one before and replaces it.
    let count = |k: &str| props.get(k).map_or(0, |v| v.parse::<u64>().unwrap());
    assert_eq!(props["removed-delete-files"], "1", "{props:?}");
    assert_eq!(
        count("added-position-deletes") - count("removed-position-deletes"),
        n,
        "{props:?}"
    );
    let want = format!("{}|{}", ids.len(), ids.iter().sum::<i64>());
    assert_eq!(sum(&s).await, [want]);

    // A small file (below the default minimum size for splitting) is not split but dealt
    // round-robin over the partitions above the scan: still one delete file.
    sql(
        &s,
        "SET datafusion.optimizer.repartition_file_min_size = 10485760",
    )
    .await
    .unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.small (id BIGINT NOT NULL) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('write.delete.mode' 'merge-on-read')",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO ns.small SELECT value FROM generate_series(0, 99999)",
    )
    .await
    .unwrap();
    let plan = render(
        &sql(&s, "EXPLAIN DELETE FROM ns.small WHERE id % 7 = 0")
            .await
            .unwrap(),
    )
    .join("\n");
    assert!(plan.contains("RoundRobinBatch(4)"), "{plan}");
    let n = delete(&s, "DELETE FROM ns.small WHERE id % 7 = 0").await;
    assert_eq!(n, 14_286);
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "small"]).unwrap())
        .await
        .unwrap();
    let props = &t
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(props["added-delete-files"], "1", "{props:?}");
    assert_eq!(props["added-position-deletes"], n.to_string(), "{props:?}");
    assert_eq!(
        rows(&s, "SELECT count(*), sum(id) FROM ns.small").await,
        [format!(
            "{}|{}",
            100_000 - n,
            (0..100_000i64).filter(|i| i % 7 != 0).sum::<i64>()
        )]
    );
}

#[tokio::test]
async fn a_statement_planned_before_a_concurrent_rewrite_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE TABLE ns.t (id BIGINT NOT NULL, w INT)")
        .await
        .unwrap();
    let values: Vec<String> = (0..60).map(|i| format!("({i}, 0)")).collect();
    sql(
        &s,
        &format!("INSERT INTO ns.t VALUES {}", values.join(", ")),
    )
    .await
    .unwrap();
    let ctx = s.context();
    sql(&s, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    // Planned while the file holds id 5 ...
    let plan = ctx
        .sql("DELETE FROM ns.t WHERE id = 5")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    // ... which a concurrent copy-on-write DELETE removes, rewriting the file as ids 6..59
    // (bounds that rule out id 5).
    let other = crate::common::session(dir.path()).await;
    assert_eq!(delete(&other, "DELETE FROM ns.t WHERE id <= 5").await, 6);
    let after_other = current_snapshot(&s, "ns", "t").await;
    // Deleting by position from the removed file would count a row that is already gone: the
    // statement sees the conflict, runs again on the new state and finds nothing.
    let out = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap();
    assert_eq!(render(&out), ["0"]);
    assert_eq!(current_snapshot(&s, "ns", "t").await, after_other);
    assert_eq!(
        rows(&s, "SELECT count(*), min(id) FROM ns.t").await,
        ["54|6"]
    );
}

#[tokio::test]
async fn passes_that_disagree_abort_the_statement() {
    use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array};
    use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let oracle = regions_table(&s).await;
    // A function that claims to be immutable but answers differently on every call: the two
    // passes of a copy-on-write DELETE see different rows.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let flaky = create_udf(
        "flaky",
        vec![datafusion::arrow::datatypes::DataType::Int64],
        datafusion::arrow::datatypes::DataType::Boolean,
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let parity = (counter.fetch_add(1, Ordering::SeqCst) % 2) as i64;
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let ids = arrays[0].as_any().downcast_ref::<Int64Array>().unwrap();
            let out: BooleanArray = ids.iter().map(|v| v.map(|v| v % 2 == parity)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    );
    s.context().register_udf(flaky);
    let snap = current_snapshot(&s, "ns", "t").await;
    let files = files_under(&dir.path().join("ns/t/data"));
    let err = sql(&s, "DELETE FROM ns.t WHERE region = 'us' AND flaky(id)")
        .await
        .unwrap_err()
        .to_string();
    assert!(calls.load(Ordering::SeqCst) >= 2);
    assert!(err.contains("does not add up"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(current_snapshot(&s, "ns", "t").await, snap);
    assert_eq!(files_under(&dir.path().join("ns/t/data")), files);
    assert_eq!(table_rows(&s).await, render_rows(&oracle));
}

/// DataFusion lets idle scan partitions steal files from their siblings. A partition of the
/// position-delete operator whose files have no deletes hands its scan through; if that scan
/// stole a sibling's file with deletes, it would read it without them (rows back from the dead,
/// and read twice). Only one of eight files has deletes here, so most partitions are idle early.
#[tokio::test]
async fn partitions_without_deletes_never_read_a_file_with_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns".to_string(),
        "CREATE EXTERNAL TABLE ns.w (id BIGINT, v BIGINT) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('write.delete.mode' 'merge-on-read')"
            .to_string(),
    ] {
        sql(&s, &q).await.unwrap();
    }
    for f in 0..8 {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.w SELECT value AS id, value AS v FROM generate_series({}, {})",
                f * 10_000,
                f * 10_000 + 9_999
            ),
        )
        .await
        .unwrap();
    }
    // Every other row of the first file.
    assert_eq!(
        rows(&s, "DELETE FROM ns.w WHERE id < 10000 AND id % 2 = 0").await,
        ["5000"]
    );
    sql(&s, "SET datafusion.execution.target_partitions = 4")
        .await
        .unwrap();
    let live: i64 = (0..80_000).filter(|i| *i >= 10_000 || i % 2 == 1).sum();
    for _ in 0..10 {
        assert_eq!(
            rows(&s, "SELECT count(*), sum(v), count(DISTINCT id) FROM ns.w").await,
            [format!("75000|{live}|75000")]
        );
    }
}

#[tokio::test]
async fn copy_on_write_writes_plain_the_keys_whose_dictionaries_overflowed() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    // Dictionaries of 512 bytes: 64 distinct ids fill one (the writer looks every 1,024
    // values); the three values of `part` never do.
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.k (id BIGINT NOT NULL, part INT NOT NULL) STORED AS ICEBERG \
         LOCATION '' OPTIONS ('write.parquet.dict-size-bytes' '512')",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO ns.k SELECT value, CAST(value % 3 AS INT) FROM generate_series(0, 9999)",
    )
    .await
    .unwrap();
    let ident = TableIdent::from_strs(["ns", "k"]).unwrap();
    let data_files = |s: &IcebergSession| {
        let (s, ident) = (s.clone(), ident.clone());
        async move {
            let t = s.catalog().load_table(&ident).await.unwrap();
            let snapshot = t.metadata().current_snapshot().unwrap().clone();
            iceberg_exec::file_planning::plan_files(&t, &snapshot)
                .await
                .unwrap()
        }
    };
    let before = data_files(&s).await;
    for f in &before {
        assert!(crate::common::dictionary_pages(&f.path)["id"]
            .iter()
            .all(|d| *d));
    }
    assert_eq!(delete(&s, "DELETE FROM ns.k WHERE id % 10 = 3").await, 1000);
    let after = data_files(&s).await;
    assert!(!after.is_empty());
    for f in &after {
        assert!(before.iter().all(|b| b.path != f.path));
        let pages = crate::common::dictionary_pages(&f.path);
        assert!(pages["id"].iter().all(|d| !d), "{pages:?}");
        assert!(pages["part"].iter().all(|d| *d), "{pages:?}");
    }
    assert_eq!(
        rows(&s, "SELECT count(*), sum(id) FROM ns.k").await,
        [format!(
            "9000|{}",
            (0..10_000i64).filter(|i| i % 10 != 3).sum::<i64>()
        )]
    );
}

/// Runs a statement through `IcebergSession::sql` (where DELETE/UPDATE with subqueries and
/// UPDATE ... FROM run as MERGE) and returns its count.
async fn run_counted(s: &IcebergSession, q: &str) -> datafusion::error::Result<u64> {
    let batches = s.sql(q).await?.collect().await?;
    let text = render(&batches);
    Ok(text.first().and_then(|l| l.parse().ok()).unwrap_or(0))
}

/// The rows of `SELECT k, g, v FROM <from> ORDER BY ...` in `ctx`, as text.
async fn ordered(ctx: &datafusion::prelude::SessionContext, from: &str) -> Vec<String> {
    let q = format!("SELECT k, g, v FROM {from} ORDER BY k NULLS FIRST, g, v NULLS FIRST");
    render(&ctx.sql(&q).await.unwrap().collect().await.unwrap())
}

/// Copies `ns.<name>` into `oracle` as an in-memory table `<name>`.
async fn copy_into(s: &IcebergSession, oracle: &datafusion::prelude::SessionContext, name: &str) {
    let frame = s.context().table(format!("ns.{name}")).await.unwrap();
    let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
    let batches = frame.collect().await.unwrap();
    let table = datafusion::datasource::MemTable::try_new(schema, vec![batches]).unwrap();
    let copy = format!("{name}_copy");
    let _ = oracle.deregister_table(&copy);
    oracle
        .register_table(&copy, std::sync::Arc::new(table))
        .unwrap();
    // Numbered rows (`rid`), for telling equal rows apart.
    let _ = oracle.deregister_table(name);
    let numbered = oracle
        .sql(&format!(
            "SELECT *, row_number() OVER () AS rid FROM {copy}"
        ))
        .await
        .unwrap();
    oracle.register_table(name, numbered.into_view()).unwrap();
}

/// DELETE and UPDATE with IN, NOT IN, EXISTS, NOT EXISTS and scalar subqueries, and UPDATE ...
/// FROM, on random tables with NULL keys, in both write modes (and under a 4 MiB pool): each
/// statement must change exactly what DataFusion's own evaluation of the same condition over
/// an in-memory copy of the rows selects.
#[tokio::test]
async fn subquery_dml_matches_an_in_memory_oracle() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    for (seed, mode, limit) in [
        (1u64, "copy-on-write", None),
        (2, "merge-on-read", None),
        (3, "merge-on-read", Some(4 << 20)),
        (4, "copy-on-write", Some(4 << 20)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = match limit {
            Some(l) => crate::common::session_with_limit(dir.path(), l).await,
            None => session(dir.path()).await,
        };
        let mut rng = StdRng::seed_from_u64(seed);
        for q in [
            "CREATE SCHEMA ns".to_string(),
            format!(
                "CREATE EXTERNAL TABLE ns.t (k BIGINT, g INT, v INT) STORED AS ICEBERG LOCATION '' \
                 PARTITIONED BY (g) OPTIONS ('write.delete.mode' '{mode}', 'write.update.mode' \
                 '{mode}', 'write.merge.mode' '{mode}')"
            ),
            "CREATE EXTERNAL TABLE ns.s (k BIGINT, w INT) STORED AS ICEBERG LOCATION ''"
                .to_string(),
        ] {
            sql(&s, &q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
        }
        let key = |rng: &mut StdRng| match rng.random_range(0..10) {
            0 => "NULL".to_string(),
            _ => rng.random_range(0..60).to_string(),
        };
        let oracle = datafusion::prelude::SessionContext::new();
        for round in 0..12 {
            if round % 4 == 0 {
                // Fresh rows in both tables (the source's NULL keys come and go).
                let rows: Vec<String> = (0..120)
                    .map(|_| {
                        format!(
                            "({}, {}, {})",
                            key(&mut rng),
                            rng.random_range(0..3),
                            rng.random_range(0..100)
                        )
                    })
                    .collect();
                sql(&s, &format!("INSERT INTO ns.t VALUES {}", rows.join(", ")))
                    .await
                    .unwrap();
                sql(&s, "DELETE FROM ns.s").await.unwrap();
                let with_null = rng.random_bool(0.5);
                let rows: Vec<String> = (0..25)
                    .map(|_| {
                        let k = match with_null {
                            true => key(&mut rng),
                            false => rng.random_range(0..60).to_string(),
                        };
                        format!("({k}, {})", rng.random_range(0..100))
                    })
                    .collect();
                sql(&s, &format!("INSERT INTO ns.s VALUES {}", rows.join(", ")))
                    .await
                    .unwrap();
            }
            copy_into(&s, &oracle, "t").await;
            copy_into(&s, &oracle, "s").await;
            let x = rng.random_range(0..110);
            let p = rng.random_range(0..3);
            let condition = match rng.random_range(0..8) {
                0 => format!("t.k IN (SELECT k FROM s WHERE w < {x})"),
                1 => format!("t.k NOT IN (SELECT k FROM s WHERE w < {x})"),
                2 => format!("EXISTS (SELECT 1 FROM s WHERE s.k = t.k AND s.w > {x})"),
                3 => format!("NOT EXISTS (SELECT 1 FROM s WHERE s.k = t.k AND s.w > {x})"),
                4 => format!("t.v > (SELECT avg(w) FROM s WHERE w < {x})"),
                5 => format!("t.k IN (SELECT k FROM s) AND t.g = {p}"),
                6 => format!(
                    "t.g = {p} AND t.k NOT IN (SELECT k FROM s WHERE k IS NOT NULL AND w > {x})"
                ),
                _ => format!("t.v < {x} AND EXISTS (SELECT 1 FROM s WHERE s.k = t.k)"),
            };
            let ours = |table: &str| table.replace("FROM s", "FROM ns.s");
            // The rows the condition selects, by DataFusion's own query over the copy (each
            // row numbered: the table may hold equal rows).
            let matched = render(
                &oracle
                    .sql(&format!("SELECT rid FROM t WHERE {condition}"))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap(),
            );
            let hit = match matched.is_empty() {
                true => "false".to_string(),
                false => format!("rid IN ({})", matched.join(", ")),
            };
            let (statement, expected) = match rng.random_bool(0.4) {
                false => (
                    format!("DELETE FROM ns.t AS t WHERE {}", ours(&condition)),
                    format!("(SELECT k, g, v FROM t WHERE NOT ({hit}))"),
                ),
                true => (
                    format!(
                        "UPDATE ns.t AS t SET v = v + 1000 WHERE {}",
                        ours(&condition)
                    ),
                    format!("(SELECT k, g, CASE WHEN {hit} THEN v + 1000 ELSE v END AS v FROM t)"),
                ),
            };
            let want = ordered(&oracle, &expected).await;
            let got = run_counted(&s, &statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
            let context = format!("seed {seed} round {round}: {statement}");
            assert_eq!(got as usize, matched.len(), "{context}");
            assert_eq!(ordered(s.context(), "ns.t").await, want, "{context}");
        }
        // UPDATE ... FROM with one source row per key, then with two: refused, nothing changed.
        copy_into(&s, &oracle, "t").await;
        copy_into(&s, &oracle, "s").await;
        let source = "(SELECT k, max(w) AS w FROM s WHERE k IS NOT NULL GROUP BY k)";
        let want = ordered(
            &oracle,
            &format!(
                "(SELECT t.k, t.g, CASE WHEN u.k IS NULL THEN t.v ELSE u.w END AS v \
                 FROM t LEFT JOIN {source} AS u ON t.k = u.k)"
            ),
        )
        .await;
        let statement = format!(
            "UPDATE ns.t AS t SET v = u.w FROM {} AS u WHERE t.k = u.k",
            source.replace("FROM s", "FROM ns.s")
        );
        run_counted(&s, &statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        assert_eq!(
            ordered(s.context(), "ns.t").await,
            want,
            "seed {seed}: {statement}"
        );
        sql(&s, "INSERT INTO ns.s VALUES (7, 1), (7, 2)")
            .await
            .unwrap();
        sql(&s, "INSERT INTO ns.t VALUES (7, 0, 0)").await.unwrap();
        let before = ordered(s.context(), "ns.t").await;
        let e = run_counted(
            &s,
            "UPDATE ns.t AS t SET v = s.w FROM ns.s AS s WHERE t.k = s.k",
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("more than once"), "{e}");
        assert_eq!(ordered(s.context(), "ns.t").await, before);
        // Refused forms change nothing either.
        for q in [
            "DELETE FROM ns.t AS t WHERE t.k IN (SELECT k FROM ns.s) OR t.v > 5",
            "DELETE FROM ns.t AS t WHERE t.k IN (SELECT k FROM ns.s) AND t.g IN (SELECT w FROM ns.s)",
            "DELETE FROM ns.t AS t WHERE EXISTS (SELECT 1 FROM ns.s AS s WHERE s.k > t.k)",
            "DELETE FROM ns.t AS t WHERE t.v > (SELECT w FROM ns.s AS s WHERE s.k = t.k)",
            // The subquery's own `t` hides the target's name.
            "DELETE FROM ns.t AS t WHERE EXISTS (SELECT 1 FROM ns.t WHERE t.v > 50)",
            // An aggregate yields a row for every key: not a keyed match.
            "DELETE FROM ns.t AS t WHERE NOT EXISTS (SELECT max(w) FROM ns.s AS s WHERE s.k = t.k)",
        ] {
            assert!(run_counted(&s, q).await.is_err(), "{q} was accepted");
            assert_eq!(ordered(s.context(), "ns.t").await, before, "{q}");
        }
        if limit.is_some() {
            assert_eq!(s.memory_pool().reserved(), 0);
        }
    }
}

/// A scalar subquery's value is used as the value it is, bytes included (not their display).
#[tokio::test]
async fn scalar_subquery_values_keep_their_type() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE TABLE ns.t (id BIGINT, h BYTEA, d DATE, x DOUBLE)",
        "INSERT INTO ns.t VALUES (1, X'cafe', DATE '2024-02-29', 0.1), (2, X'beef', DATE '2024-03-01', 0.2)",
        "CREATE TABLE ns.s (id BIGINT, h BYTEA, d DATE, x DOUBLE)",
        "INSERT INTO ns.s VALUES (1, X'cafe', DATE '2024-02-29', 0.1)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    for (q, deleted) in [
        (
            "DELETE FROM ns.t WHERE h = (SELECT h FROM ns.s WHERE id = 1)",
            1,
        ),
        (
            "DELETE FROM ns.t WHERE d = (SELECT d + INTERVAL '1 day' FROM ns.s)",
            1,
        ),
        (
            "DELETE FROM ns.t WHERE x = (SELECT x FROM ns.s WHERE id = 7)",
            0,
        ),
    ] {
        assert_eq!(run_counted(&s, q).await.unwrap(), deleted, "{q}");
    }
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["0"]);
}

/// The metric `name` of the first plan line naming `node` in an `EXPLAIN ANALYZE` text.
fn node_metric(analyzed: &str, node: &str, name: &str) -> Option<String> {
    let line = analyzed.lines().find(|l| l.contains(node))?;
    let at = line.find(&format!("{name}="))? + name.len() + 1;
    Some(
        line[at..]
            .split([',', ']', ' '])
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}

/// `EXPLAIN ANALYZE` shows DataFusion's baseline metrics (`output_rows`, `elapsed_compute`) for
/// this crate's nodes as for DataFusion's own: the scan with its position deletes, the writer,
/// the commit and the statement node.
#[tokio::test]
async fn explain_analyze_shows_baseline_metrics_of_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.b (id BIGINT NOT NULL, v INT) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('write.delete.mode' 'merge-on-read')",
    )
    .await
    .unwrap();
    let insert = render(
        &sql(
            &s,
            "EXPLAIN ANALYZE INSERT INTO ns.b SELECT value, 1 FROM generate_series(1, 100)",
        )
        .await
        .unwrap(),
    )
    .join("\n");
    // The writer hands the commit one row per file; the commit answers one row (the count).
    assert!(
        node_metric(&insert, "DataFileWriterExec", "output_rows").is_some(),
        "{insert}"
    );
    assert_eq!(
        node_metric(&insert, "CommitExec", "output_rows").as_deref(),
        Some("1"),
        "{insert}"
    );
    assert!(
        node_metric(&insert, "CommitExec", "elapsed_compute").is_some(),
        "{insert}"
    );
    let delete = render(
        &sql(&s, "EXPLAIN ANALYZE DELETE FROM ns.b WHERE id <= 10")
            .await
            .unwrap(),
    )
    .join("\n");
    assert_eq!(
        node_metric(&delete, "DeleteExec", "output_rows").as_deref(),
        Some("1"),
        "{delete}"
    );
    let scan = render(&sql(&s, "EXPLAIN ANALYZE SELECT * FROM ns.b").await.unwrap()).join("\n");
    // 100 rows written, 10 deleted by position: the node hands on 90.
    assert_eq!(
        node_metric(&scan, "PositionalDeleteExec", "output_rows").as_deref(),
        Some("90"),
        "{scan}"
    );
    assert_eq!(
        node_metric(&scan, "PositionalDeleteExec", "position_deleted_rows").as_deref(),
        Some("10"),
        "{scan}"
    );
    assert!(
        node_metric(&scan, "PositionalDeleteExec", "elapsed_compute").is_some(),
        "{scan}"
    );
    assert_eq!(
        node_metric(&scan, "IcebergScanExec", "output_rows").as_deref(),
        Some("90"),
        "{scan}"
    );
}
