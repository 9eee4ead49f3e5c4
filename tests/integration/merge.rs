//! SQL `MERGE INTO` against an in-memory oracle: random targets carrying position and equality
//! deletes, random change sets and clause lists, both write modes, an unlimited pool and a
//! 4 MiB one (where the source outgrows memory and the join runs as a Grace hash join, spilling).

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::{files_under, metric, rows, session, session_with_limit, sql};
use datafusion::arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use iceberg::spec::{Literal, Operation, Struct};
use iceberg::TableIdent;
use iceberg_exec::commit::MetadataStore;
use iceberg_exec::commit::{commit, SnapshotChanges};
use iceberg_exec::physical_plan::write::write_equality_delete_file;
use iceberg_exec::IcebergSession;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A live row: (id, part, v).
type Row = (Option<i64>, i32, i64);

/// Creates `ns.t (id BIGINT, part INT, v BIGINT)` partitioned by part, fills it with four
/// INSERTs of `n` rows each, then deletes some rows by position (a merge-on-read DELETE) and
/// some by equality (a delete file of ids per partition). Returns the live rows, as read.
async fn random_target(s: &IcebergSession, rng: &mut StdRng, n: i64) -> Vec<Row> {
    sql(s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT, part INT, v BIGINT) STORED AS ICEBERG \
         LOCATION '' PARTITIONED BY (part)",
    )
    .await
    .unwrap();
    for batch in 0..4 {
        // Ids repeat across batches now and then; every 53rd is NULL.
        let offset = batch * n - rng.random_range(0..n / 4);
        sql(
            s,
            &format!(
                "INSERT INTO ns.t SELECT CASE WHEN value % 53 = 0 THEN NULL ELSE value + {offset} \
                 END, CAST(value % 3 AS INT), value * 7 % 1000 FROM generate_series(0, {})",
                n - 1
            ),
        )
        .await
        .unwrap();
    }
    sql(s, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(
        s,
        &format!(
            "DELETE FROM ns.t WHERE id % {} = 1",
            rng.random_range(5..11)
        ),
    )
    .await
    .unwrap();
    sql(s, "SET iceberg.delete_mode = ''").await.unwrap();
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let metadata = table.metadata();
    let id_field = metadata.current_schema().field_by_name("id").unwrap().id;
    let spec_id = metadata.default_partition_spec_id();
    let mut files = vec![];
    for part in 0..3 {
        let ids: Vec<i64> = (0..20).map(|_| rng.random_range(0..4 * n)).collect();
        let k = ids.len();
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            (
                "part",
                Arc::new(Int32Array::from(vec![part; k])) as ArrayRef,
            ),
            ("v", Arc::new(Int64Array::from(vec![0i64; k])) as ArrayRef),
        ])
        .unwrap();
        let partition = Struct::from_iter([Some(Literal::int(part))]);
        files.push(
            write_equality_delete_file(&table, vec![id_field], spec_id, partition, &[batch])
                .await
                .unwrap(),
        );
    }
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let changes = SnapshotChanges {
        operation: Operation::Delete,
        added_delete_files: files,
        ..Default::default()
    };
    commit(store, &ident, changes).await.unwrap();
    live_rows(s).await
}

async fn live_rows(s: &IcebergSession) -> Vec<Row> {
    let mut out: Vec<Row> = rows(s, "SELECT id, part, v FROM ns.t")
        .await
        .iter()
        .map(|line| {
            let cells: Vec<&str> = line.split('|').collect();
            (
                cells[0].parse().ok(),
                cells[1].parse().unwrap(),
                cells[2].parse().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// A change set: source rows (id, part, v, op) with unique ids (and a few NULL ids).
struct Changes {
    rows: Vec<(Option<i64>, i32, i64, char)>,
}

impl Changes {
    fn random(rng: &mut StdRng, target: &[Row], size: usize, id_range: i64) -> Self {
        let mut ids: Vec<i64> = target.iter().filter_map(|r| r.0).collect();
        ids.sort();
        ids.dedup();
        let mut chosen = std::collections::BTreeSet::new();
        while chosen.len() < size {
            // Half existing ids, half anything (new ones mostly).
            let id = match rng.random_bool(0.5) && !ids.is_empty() {
                true => ids[rng.random_range(0..ids.len())],
                false => rng.random_range(0..id_range),
            };
            chosen.insert(id);
        }
        let mut rows: Vec<(Option<i64>, i32, i64, char)> = chosen
            .into_iter()
            .map(|id| {
                let op = ['u', 'u', 'd', 'i'][rng.random_range(0..4)];
                (
                    Some(id),
                    rng.random_range(0..3),
                    rng.random_range(0..1000),
                    op,
                )
            })
            .collect();
        for _ in 0..3 {
            rows.push((None, 0, rng.random_range(0..1000), 'u'));
        }
        Self { rows }
    }

    /// The source as SQL: a VALUES list for small sets, else a new Iceberg table `ns.src<n>`.
    async fn source(&self, s: &IcebergSession) -> String {
        let values: Vec<String> = self
            .rows
            .iter()
            .map(|(id, part, v, op)| {
                let id = id.map_or("CAST(NULL AS BIGINT)".into(), |i| i.to_string());
                format!("({id}, {part}, {v}, '{op}')")
            })
            .collect();
        if self.rows.len() <= 200 {
            return format!("(VALUES {}) AS s(id, part, v, op)", values.join(", "));
        }
        static SOURCES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let name = format!(
            "ns.src{}",
            SOURCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        sql(
            s,
            &format!(
                "CREATE EXTERNAL TABLE {name} (id BIGINT, part INT, v BIGINT, op VARCHAR) \
                 STORED AS ICEBERG LOCATION ''"
            ),
        )
        .await
        .unwrap();
        for chunk in values.chunks(5000) {
            sql(
                s,
                &format!("INSERT INTO {name} VALUES {}", chunk.join(", ")),
            )
            .await
            .unwrap();
        }
        format!("{name} AS s")
    }
}

/// The clauses of one statement, and what they do to the oracle.
#[derive(Clone, Copy, Debug)]
struct Clauses {
    /// `WHEN NOT MATCHED BY SOURCE AND t.v < 100 THEN UPDATE SET v = t.v + 1` (else none).
    by_source: bool,
    /// `WHEN MATCHED AND s.op = 'd' THEN DELETE` before the update.
    delete_first: bool,
}

impl Clauses {
    fn sql(&self) -> String {
        let mut c = vec![];
        if self.delete_first {
            c.push("WHEN MATCHED AND s.op = 'd' THEN DELETE");
        }
        c.push("WHEN MATCHED AND s.v > t.v THEN UPDATE SET v = s.v, part = s.part");
        c.push(
            "WHEN NOT MATCHED AND s.id IS NOT NULL AND s.op <> 'd' THEN INSERT VALUES (s.id, \
             s.part, s.v)",
        );
        if self.by_source {
            c.push("WHEN NOT MATCHED BY SOURCE AND t.v < 100 THEN UPDATE SET v = t.v + 1");
        }
        c.join(" ")
    }

    /// The oracle: the table after the statement, and the rows it counts.
    fn apply(&self, target: &[Row], changes: &Changes) -> (Vec<Row>, u64) {
        let by_id: HashMap<i64, (i32, i64, char)> = changes
            .rows
            .iter()
            .filter_map(|(id, p, v, op)| id.map(|id| (id, (*p, *v, *op))))
            .collect();
        let mut out = vec![];
        let mut count = 0;
        let mut matched_ids = std::collections::HashSet::new();
        for &(id, part, v) in target {
            let source = id.and_then(|id| by_id.get(&id));
            match source {
                Some(&(sp, sv, op)) => {
                    matched_ids.insert(id.unwrap());
                    if self.delete_first && op == 'd' {
                        count += 1;
                    } else if sv > v {
                        count += 1;
                        out.push((id, sp, sv));
                    } else {
                        out.push((id, part, v));
                    }
                }
                None if self.by_source && v < 100 => {
                    count += 1;
                    out.push((id, part, v + 1));
                }
                None => out.push((id, part, v)),
            }
        }
        for (id, p, v, op) in &changes.rows {
            if let Some(id) = id {
                if !matched_ids.contains(id) && *op != 'd' {
                    count += 1;
                    out.push((Some(*id), *p, *v));
                }
            }
        }
        out.sort();
        (out, count)
    }
}

/// Runs `rounds` random MERGEs on a random target, each checked against the oracle.
async fn merges_match_the_oracle(s: &IcebergSession, seed: u64, n: i64, source: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut target = random_target(s, &mut rng, n).await;
    for round in 0..4 {
        let mode = ["copy-on-write", "merge-on-read"][round % 2];
        let clauses = Clauses {
            by_source: rng.random_bool(0.4),
            delete_first: rng.random_bool(0.7),
        };
        let changes = Changes::random(&mut rng, &target, source, 5 * n);
        let using = changes.source(s).await;
        // A bare key column (the key filter is exact on its range) or an expression of it (a
        // Bloom filter), same answer.
        let on = ["t.id = s.id", "t.id * 2 = s.id * 2"][rng.random_range(0..2)];
        let statement = format!(
            "MERGE INTO ns.t AS t USING {using} ON {on} {}",
            clauses.sql()
        );
        sql(s, &format!("SET iceberg.merge_mode = '{mode}'"))
            .await
            .unwrap();
        let out = rows(s, &statement).await;
        let (expected, count) = clauses.apply(&target, &changes);
        let context = format!("seed {seed}, round {round}, {mode}, ON {on}, {clauses:?}");
        assert_eq!(out, vec![count.to_string()], "{context}: count");
        target = live_rows(s).await;
        assert_eq!(target.len(), expected.len(), "{context}: rows");
        assert!(
            target == expected,
            "{context}: table differs from the oracle"
        );
    }
}

#[tokio::test]
async fn random_merges_match_an_oracle() {
    for seed in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        merges_match_the_oracle(&s, seed, 300, 120).await;
    }
}

#[tokio::test]
async fn random_merges_match_an_oracle_under_a_4_mib_pool_spilling_the_join() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 4 << 20).await;
    merges_match_the_oracle(&s, 7, 15_000, 50_000).await;
    assert_eq!(s.memory_pool().reserved(), 0);

    // The same size of change set, now shown: the source outgrew a quarter of the pool, so the
    // join ran as a Grace hash join, which spilled.
    let mut rng = StdRng::seed_from_u64(8);
    let target = live_rows(&s).await;
    let changes = Changes::random(&mut rng, &target, 50_000, 100_000);
    let using = changes.source(&s).await;
    let clauses = Clauses {
        by_source: false,
        delete_first: true,
    };
    let plan = rows(
        &s,
        &format!(
            "EXPLAIN ANALYZE MERGE INTO ns.t AS t USING {using} ON t.id = s.id {}",
            clauses.sql()
        ),
    )
    .await
    .join("\n");
    let metric = |name: &str| -> u64 {
        let at = plan
            .find(&format!("{name}="))
            .unwrap_or_else(|| panic!("no {name} in {plan}"));
        plan[at + name.len() + 1..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .unwrap()
    };
    assert!(metric("grace_partitions") >= 2, "{plan}");
    assert!(metric("spill_count") >= 1, "{plan}");
    let (expected, _) = clauses.apply(&target, &changes);
    assert!(
        live_rows(&s).await == expected,
        "the explained MERGE differs"
    );
    assert_eq!(s.memory_pool().reserved(), 0);
}

/// A source several times the pool: a Grace hash join of many partitions, each with its
/// spillable buffers, so that a fair pool gives each spillable consumer a sliver. The positions
/// the MERGE matched and changed (bitmaps spread over the whole table, which cannot spill) are
/// held beside them all the same, in both write modes.
#[tokio::test]
async fn merge_positions_are_held_beside_a_grace_join_of_many_partitions() {
    for mode in ["copy-on-write", "merge-on-read"] {
        let dir = tempfile::tempdir().unwrap();
        let s = session_with_limit(dir.path(), 4 << 20).await;
        sql(&s, "CREATE SCHEMA ns").await.unwrap();
        sql(
            &s,
            &format!(
                "CREATE EXTERNAL TABLE ns.t (id BIGINT, v BIGINT, s VARCHAR) STORED AS ICEBERG \
                 LOCATION '' OPTIONS ('write.merge.mode' '{mode}')"
            ),
        )
        .await
        .unwrap();
        sql(
            &s,
            "INSERT INTO ns.t SELECT value, value % 1000, 'row ' || value \
             FROM generate_series(0, 599999)",
        )
        .await
        .unwrap();
        // Every other row updated (300,000, spread over the table), as many inserted.
        let merge = "MERGE INTO ns.t AS t USING (SELECT value * 2 AS id, value AS v, \
                     repeat('x', 60) AS s FROM generate_series(0, 599999)) AS s ON t.id = s.id \
                     WHEN MATCHED THEN UPDATE SET v = -1 \
                     WHEN NOT MATCHED THEN INSERT (id, v, s) VALUES (s.id, s.v, s.s)";
        let plan = rows(&s, &format!("EXPLAIN ANALYZE {merge}"))
            .await
            .join("\n");
        // EXPLAIN ANALYZE shows counts such as `1.02 K`.
        let grace = plan
            .split("grace_partitions=")
            .nth(1)
            .and_then(|t| t.split([',', ']']).next())
            .and_then(|n| match n.trim().strip_suffix(" K") {
                Some(k) => k.parse::<f64>().ok().map(|k| k * 1000.0),
                None => n.trim().parse::<f64>().ok(),
            })
            .unwrap_or(0.0);
        assert!(
            grace >= 16.0,
            "{mode}: a Grace join of many partitions: {plan}"
        );
        let got = rows(
            &s,
            "SELECT count(*), sum(CASE WHEN v = -1 THEN 1 ELSE 0 END) FROM ns.t",
        )
        .await;
        assert_eq!(got, vec!["900000|300000".to_string()], "{mode}");
        assert_eq!(s.memory_pool().reserved(), 0, "{mode}");
    }
}

#[tokio::test]
async fn merge_on_read_writes_one_position_delete_file_per_changed_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT, part INT, v BIGINT) STORED AS ICEBERG \
         LOCATION '' PARTITIONED BY (part)",
    )
    .await
    .unwrap();
    // Three INSERTs of three partitions: nine data files.
    for b in 0..3 {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value + {}, CAST(value % 3 AS INT), 0 FROM \
                 generate_series(0, 99)",
                b * 100
            ),
        )
        .await
        .unwrap();
    }
    // Rows of files in partitions 0 and 1 of the first two INSERTs change: four files.
    sql(&s, "SET iceberg.merge_mode = 'merge-on-read'")
        .await
        .unwrap();
    let out = rows(
        &s,
        "MERGE INTO ns.t USING (SELECT value AS id \
         FROM generate_series(0, 199) WHERE value % 3 <> 2) AS s ON ns.t.id = s.id \
         WHEN MATCHED AND s.id % 2 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET v = 1",
    )
    .await;
    assert_eq!(out, vec!["134"]);
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let summary = &t.metadata().current_snapshot().unwrap().summary();
    assert_eq!(summary.operation, Operation::Overwrite);
    let props = &summary.additional_properties;
    assert_eq!(props["added-position-delete-files"], "4", "{props:?}");
    assert_eq!(props["added-position-deletes"], "134", "{props:?}");
    assert_eq!(props["added-records"], "67", "{props:?}");
    assert_eq!(
        rows(&s, "SELECT count(*), sum(v) FROM ns.t").await,
        vec!["233|67"]
    );
}

#[tokio::test]
async fn a_failing_merge_leaves_no_file_and_no_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, v BIGINT) STORED AS ICEBERG LOCATION ''",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO ns.t SELECT value, value * 2 FROM generate_series(0, 9999)",
    )
    .await
    .unwrap();
    let before = files_under(dir.path());
    let snapshot = crate::common::current_snapshot(&s, "ns", "t").await;
    for mode in ["copy-on-write", "merge-on-read"] {
        // Inserts are written before the duplicate match shows (the last source rows): the
        // files written by then must go.
        sql(&s, &format!("SET iceberg.merge_mode = '{mode}'"))
            .await
            .unwrap();
        let e = sql(
            &s,
            "MERGE INTO ns.t USING (SELECT value + 5000 \
                 AS id FROM generate_series(0, 9999) UNION ALL SELECT 6000 AS id) AS s \
                 ON ns.t.id = s.id WHEN MATCHED THEN UPDATE SET v = -1 \
                 WHEN NOT MATCHED THEN INSERT VALUES (s.id, 0)",
        )
        .await;
        let e = e.expect_err("a row matched twice");
        assert!(
            e.to_string()
                .contains("MERGE matched a target row more than once"),
            "{e}"
        );
        // A NULL into a required column, found while writing.
        let e = sql(
            &s,
            "MERGE INTO ns.t USING (SELECT CAST(NULL AS BIGINT) AS id) AS s ON ns.t.id = s.id \
             WHEN NOT MATCHED THEN INSERT VALUES (s.id, 1)",
        )
        .await
        .expect_err("NULL id");
        assert!(e.to_string().contains("required column 'id'"), "{e}");
    }
    assert_eq!(files_under(dir.path()), before);
    assert_eq!(
        crate::common::current_snapshot(&s, "ns", "t").await,
        snapshot
    );
}

#[tokio::test]
async fn a_merge_planned_before_concurrent_commits_runs_again_on_the_new_state() {
    for mode in ["copy-on-write", "merge-on-read"] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        sql(&s, "CREATE SCHEMA ns").await.unwrap();
        sql(&s, "CREATE TABLE ns.t (id BIGINT NOT NULL, w BIGINT) ")
            .await
            .unwrap();
        sql(
            &s,
            "INSERT INTO ns.t SELECT value, 0 FROM generate_series(0, 59)",
        )
        .await
        .unwrap();
        sql(&s, &format!("SET iceberg.merge_mode = '{mode}'"))
            .await
            .unwrap();
        let ctx = s.context();
        // Planned while id 5 exists and id 70 does not ...
        let plan = ctx
            .sql(
                "MERGE INTO ns.t USING (VALUES (5, 100), (70, 1)) AS s(id, w) ON ns.t.id = s.id \
                 WHEN MATCHED THEN UPDATE SET w = s.w WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.w)",
            )
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        // ... then another writer deletes id 5 and inserts id 70.
        let other = session(dir.path()).await;
        sql(&other, "DELETE FROM ns.t WHERE id = 5").await.unwrap();
        sql(&other, "INSERT INTO ns.t VALUES (70, 9)")
            .await
            .unwrap();
        // Run as planned, the MERGE would update a row that is gone and insert a second id
        // 70: it sees the conflict, runs again, inserts 5 (no longer there) and updates the 70
        // that now is.
        let out = datafusion::physical_plan::collect(plan, ctx.task_ctx())
            .await
            .unwrap();
        assert_eq!(crate::common::render(&out), ["2"], "{mode}");
        assert_eq!(
            rows(&s, "SELECT count(*), count(DISTINCT id), sum(w) FROM ns.t").await,
            ["61|61|101"],
            "{mode}"
        );
        assert_eq!(
            rows(&s, "SELECT id, w FROM ns.t WHERE id IN (5, 70) ORDER BY id").await,
            ["5|100", "70|1"],
            "{mode}"
        );
    }
}

#[tokio::test]
async fn a_sorted_partitioned_target_keeps_its_order_and_partitions_under_an_8_mib_pool() {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{Int32Type, Int64Type};

    for mode in ["copy-on-write", "merge-on-read"] {
        let dir = tempfile::tempdir().unwrap();
        let s = session_with_limit(dir.path(), 8 << 20).await;
        sql(&s, "CREATE SCHEMA ns").await.unwrap();
        sql(
            &s,
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, part INT, v BIGINT) STORED AS \
             ICEBERG LOCATION '' PARTITIONED BY (part) WITH ORDER (v)",
        )
        .await
        .unwrap();
        sql(
            &s,
            "INSERT INTO ns.t SELECT value, CAST(value % 3 AS INT), value % 1000 FROM \
             generate_series(1, 300000)",
        )
        .await
        .unwrap();
        sql(&s, &format!("SET iceberg.merge_mode = '{mode}'"))
            .await
            .unwrap();
        // Updates move rows between partitions (part = k % 3 of the source row).
        let out = rows(
            &s,
            "MERGE INTO ns.t AS t USING (SELECT value * 3 AS id, CAST(value % 2 AS INT) AS part, \
             value % 777 AS v FROM generate_series(1, 200000)) AS s ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = s.v, part = s.part \
             WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.part, s.v)",
        )
        .await;
        assert_eq!(out, ["200000"], "{mode}");
        // Oracle: ids 1..=300000; k = 1..=200000 sets id 3k to (k % 2, k % 777).
        let mut count = 0u64;
        let mut sum = 0u64;
        let mut by_part = [0u64; 3];
        for id in 1..=300_000u64 {
            if id % 3 != 0 {
                count += 1;
                sum += id % 1000;
                by_part[(id % 3) as usize] += 1;
            }
        }
        for k in 1..=200_000u64 {
            count += 1;
            sum += k % 777;
            by_part[(k % 2) as usize] += 1;
        }
        assert_eq!(
            rows(&s, "SELECT count(*), sum(v) FROM ns.t").await,
            [format!("{count}|{sum}")],
            "{mode}"
        );
        assert_eq!(
            rows(
                &s,
                "SELECT part, count(*) FROM ns.t GROUP BY part ORDER BY part"
            )
            .await,
            (0..3)
                .map(|p| format!("{p}|{}", by_part[p]))
                .collect::<Vec<_>>(),
            "{mode}"
        );
        // Every data file holds one partition's rows, sorted by v.
        let t = s
            .catalog()
            .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
            .await
            .unwrap();
        let snapshot = t.metadata().current_snapshot().unwrap().clone();
        for f in iceberg_exec::file_planning::plan_files(&t, &snapshot)
            .await
            .unwrap()
        {
            let file = std::fs::File::open(f.path.trim_start_matches("file://")).unwrap();
            let batches =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .build()
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
            let mut last = i64::MIN;
            let partition = format!("{:?}", f.partition);
            for b in &batches {
                let part = b
                    .column_by_name("part")
                    .unwrap()
                    .as_primitive::<Int32Type>();
                let v = b.column_by_name("v").unwrap().as_primitive::<Int64Type>();
                for i in 0..b.num_rows() {
                    assert!(v.value(i) >= last, "{mode}: {} is not sorted by v", f.path);
                    last = v.value(i);
                    assert!(
                        partition.contains(&format!("Int({})", part.value(i))),
                        "{mode}: row of part {} in {} ({partition})",
                        part.value(i),
                        f.path
                    );
                }
            }
        }
        assert_eq!(s.memory_pool().reserved(), 0);
    }
}

/// Runs `statement` (a MERGE) and returns its result and the metrics of its `MergeExec`, exact.
async fn run_with_metrics(
    s: &IcebergSession,
    statement: &str,
) -> (Vec<String>, datafusion::physical_plan::metrics::MetricsSet) {
    crate::common::run_with_metrics(s, statement, "MergeExec").await
}

#[tokio::test]
async fn target_rows_no_source_key_can_match_skip_the_join() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.k (id BIGINT, name VARCHAR, v BIGINT) STORED AS ICEBERG \
         LOCATION ''",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO ns.k SELECT value, 'n' || CAST(value AS VARCHAR), 0 FROM \
         generate_series(0, 1999)",
    )
    .await
    .unwrap();
    // Per ON form: an integer column (an exact filter of the key's range), an expression and
    // a string column (a Bloom filter). Each source holds 40 keys: 20 present, 20 new (all
    // within a range the exact filter takes), and a NULL key, which matches nothing and
    // inserts nothing.
    let forms = [
        ("t.id = s.id", "id"),
        ("t.id + 1 = s.id + 1", "id"),
        ("t.name = s.name", "name"),
    ];
    let mut total = 2_000u64;
    for (round, (on, key)) in forms.iter().enumerate() {
        // Present keys spread over every data file (none is pruned by the keys' bounds).
        let base = 3 * round as i64;
        let mut values: Vec<String> = (0..20)
            .map(|i| base + i * 97)
            .chain((0..20).map(|i| -(100 * base + i + 1)))
            .map(|id| format!("({id}, 'n{id}')"))
            .collect();
        values.push("(NULL, NULL)".into());
        let source = format!("(VALUES {}) AS s(id, name)", values.join(", "));
        let mode = ["copy-on-write", "merge-on-read"][round % 2];
        sql(&s, &format!("SET iceberg.merge_mode = '{mode}'"))
            .await
            .unwrap();
        let (out, m) = run_with_metrics(
            &s,
            &format!(
                "MERGE INTO ns.k AS t USING {source} ON {on} \
                 WHEN MATCHED THEN UPDATE SET v = {} \
                 WHEN NOT MATCHED AND s.{key} IS NOT NULL THEN INSERT VALUES (s.id, s.name, -1)",
                round + 1
            ),
        )
        .await;
        let context = format!("ON {on}: {m}");
        assert_eq!(out, vec!["40"], "{context}");
        assert_eq!(metric(&m, "rows_updated"), 20, "{context}");
        assert_eq!(metric(&m, "rows_inserted"), 20, "{context}");
        // Every target row but the 20 matched ones is skipped, but for a few false positives
        // of the Bloom filter.
        let skipped = metric(&m, "target_rows_skipped_by_key_filter") as u64;
        assert!(
            skipped <= total - 20 && skipped >= (total - 20) * 95 / 100,
            "{skipped} skipped of {total}; {context}"
        );
        if round == 0 {
            assert_eq!(
                skipped,
                total - 20,
                "the integer filter is exact; {context}"
            );
        }
        // Copy-on-write's first pass reads the key and the updated column (the rewrite splices
        // the new values into files copied otherwise); merge-on-read's reads whole rows, since
        // it writes the new versions right away. After that, files with deletes are not
        // spliced: the first pass reads the key alone and the rewrite makes the new versions.
        let first_pass = metric(&m, "first_pass_target_columns");
        assert_eq!(first_pass, [2, 3, 1][round], "{context}");
        assert_eq!(metric(&m, "files_spliced") > 0, round == 0, "{context}");
        total += 20;
        let updated = rows(
            &s,
            &format!(
                "SELECT count(*), min(id), max(id) FROM ns.k WHERE v = {}",
                round + 1
            ),
        )
        .await;
        assert_eq!(
            updated,
            vec![format!("20|{base}|{}", base + 19 * 97)],
            "{context}"
        );
    }
    assert_eq!(
        rows(&s, "SELECT count(*), count(DISTINCT id), sum(CASE WHEN v = -1 THEN 1 ELSE 0 END) FROM ns.k").await,
        vec![format!("{total}|{total}|60")]
    );
    // With WHEN NOT MATCHED BY SOURCE every target row may change: no filter.
    let (out, m) = run_with_metrics(
        &s,
        "MERGE INTO ns.k AS t USING (VALUES (1)) AS s(id) ON t.id = s.id \
         WHEN NOT MATCHED BY SOURCE AND t.v = -1 THEN DELETE",
    )
    .await;
    assert_eq!(out, vec!["60"]);
    assert_eq!(metric(&m, "target_rows_skipped_by_key_filter"), 0, "{m}");
    assert_eq!(metric(&m, "rows_deleted"), 60, "{m}");
}

#[tokio::test]
async fn the_narrow_copy_on_write_first_pass_agrees_with_merge_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    for t in ["cow", "mor"] {
        sql(
            &s,
            &format!(
                "CREATE EXTERNAL TABLE ns.{t} (id BIGINT, part INT, v BIGINT, note VARCHAR) \
                 STORED AS ICEBERG LOCATION '' PARTITIONED BY (part)"
            ),
        )
        .await
        .unwrap();
        for b in 0..3 {
            sql(
                &s,
                &format!(
                    "INSERT INTO ns.{t} SELECT value, CAST(value % 4 AS INT), value % 50, \
                     'n' || CAST(value AS VARCHAR) FROM generate_series({}, {})",
                    b * 1000,
                    b * 1000 + 999
                ),
            )
            .await
            .unwrap();
        }
    }
    let source = "(SELECT value * 7 % 4000 AS id, value % 60 AS v, CAST(value % 5 AS INT) AS p \
                  FROM generate_series(0, 499)) AS s";
    // (ON, clauses, the columns copy-on-write's first pass reads: 4 = all, whether it splices)
    let statements = [
        (
            "t.id = s.id AND t.v <= s.v",
            "WHEN MATCHED AND s.v % 3 = 0 THEN DELETE \
             WHEN MATCHED AND t.part = 1 THEN UPDATE SET note = 'one', part = s.p \
             WHEN MATCHED THEN UPDATE SET v = t.v + s.v \
             WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.p, s.v, 'new')",
            3,
            false,
        ),
        (
            "t.id = s.id",
            "WHEN MATCHED AND random() < 2 THEN UPDATE SET v = s.v",
            2,
            true,
        ),
        (
            "t.id = s.id",
            "WHEN MATCHED THEN UPDATE SET note = t.note || '!', v = s.v",
            3,
            true,
        ),
    ];
    for (on, clauses, columns, spliced) in statements {
        let mut counts = vec![];
        for (t, mode) in [("cow", "copy-on-write"), ("mor", "merge-on-read")] {
            sql(&s, &format!("SET iceberg.merge_mode = '{mode}'"))
                .await
                .unwrap();
            let (out, m) = run_with_metrics(
                &s,
                &format!("MERGE INTO ns.{t} AS t USING {source} ON {on} {clauses}"),
            )
            .await;
            if t == "cow" {
                assert_eq!(
                    metric(&m, "first_pass_target_columns"),
                    columns,
                    "ON {on} {clauses}: {m}"
                );
                assert_eq!(metric(&m, "files_spliced") > 0, spliced, "{m}");
            }
            counts.push(out);
        }
        assert_eq!(counts[0], counts[1], "ON {on} {clauses}");
        assert_ne!(counts[0], vec!["0"], "ON {on} {clauses}");
        let all =
            |t: &str| format!("SELECT id, part, v, note FROM ns.{t} ORDER BY id, part, v, note");
        assert_eq!(
            rows(&s, &all("cow")).await,
            rows(&s, &all("mor")).await,
            "ON {on} {clauses}"
        );
    }
}
