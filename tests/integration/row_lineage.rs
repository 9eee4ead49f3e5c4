//! Row lineage (format v3): `_row_id` and `_last_updated_sequence_number` read through
//! `iceberg_scan(.., 'row_lineage', true)`, checked against an oracle through INSERT,
//! copy-on-write and merge-on-read UPDATE and DELETE: rows keep their ids wherever a statement
//! moves them, a changed row takes the sequence number of the commit that changed it, an
//! unchanged one keeps its own, and new rows get ids no row had.

use std::collections::{BTreeMap, HashSet};

use crate::common::{session, sql};
use arrow::array::{Array, Int64Array, StringViewArray};
use iceberg::TableIdent;
use iceberg_exec::IcebergSession;

/// One row as the lineage scan reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    v: String,
    row_id: Option<i64>,
    seq: Option<i64>,
}

/// The table's rows by id, with their lineage.
async fn lineage(s: &IcebergSession) -> BTreeMap<i64, Row> {
    let batches = sql(
        s,
        "SELECT id, v, _row_id, _last_updated_sequence_number \
         FROM iceberg_scan('ns.t', 'row_lineage', true)",
    )
    .await
    .unwrap();
    let mut out = BTreeMap::new();
    for b in batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let vs = b
            .column(1)
            .as_any()
            .downcast_ref::<StringViewArray>()
            .unwrap();
        let row_ids = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        let seqs = b.column(3).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            let row = Row {
                v: vs.value(i).to_string(),
                row_id: row_ids.is_valid(i).then(|| row_ids.value(i)),
                seq: seqs.is_valid(i).then(|| seqs.value(i)),
            };
            assert!(
                out.insert(ids.value(i), row).is_none(),
                "id {} twice",
                ids.value(i)
            );
        }
    }
    out
}

async fn current_seq(s: &IcebergSession) -> i64 {
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    t.metadata().current_snapshot().unwrap().sequence_number()
}

async fn next_row_id(s: &IcebergSession) -> i64 {
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    t.metadata().next_row_id() as i64
}

async fn run(s: &IcebergSession, statement: &str) {
    s.sql(statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

async fn set_modes(s: &IcebergSession, mode: &str) {
    run(
        s,
        &format!(
            "ALTER TABLE ns.t SET TBLPROPERTIES ('write.delete.mode' = '{mode}', \
             'write.update.mode' = '{mode}')"
        ),
    )
    .await;
}

/// Every row has an id, and no two rows share one.
fn assert_ids_unique(rows: &BTreeMap<i64, Row>) {
    let mut seen = HashSet::new();
    for (id, r) in rows {
        let row_id = r
            .row_id
            .unwrap_or_else(|| panic!("row {id} has no _row_id"));
        assert!(seen.insert(row_id), "_row_id {row_id} twice");
        assert!(r.seq.is_some(), "row {id} has no sequence number");
    }
}

/// The oracle after `statement` ran as sequence number `seq`: rows `changed` selects take
/// `value` and `seq`, rows `deleted` selects go, every other row stays as it was.
fn apply(
    oracle: &BTreeMap<i64, Row>,
    seq: i64,
    changed: impl Fn(i64) -> bool,
    value: impl Fn(i64, &str) -> String,
    deleted: impl Fn(i64) -> bool,
) -> BTreeMap<i64, Row> {
    oracle
        .iter()
        .filter(|(id, _)| !deleted(**id))
        .map(|(id, r)| {
            let r = match changed(*id) {
                true => Row {
                    v: value(*id, &r.v),
                    row_id: r.row_id,
                    seq: Some(seq),
                },
                false => r.clone(),
            };
            (*id, r)
        })
        .collect()
}

#[tokio::test]
async fn row_ids_survive_updates_and_deletes_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, v VARCHAR) STORED AS ICEBERG \
         LOCATION '' OPTIONS ('format-version' '3')",
    )
    .await
    .unwrap();
    for i in 0..3 {
        run(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value, 'v' || CAST(value AS VARCHAR) FROM \
                 generate_series({}, {})",
                i * 1000,
                i * 1000 + 999
            ),
        )
        .await;
    }
    let mut oracle = lineage(&s).await;
    assert_eq!(oracle.len(), 3000);
    assert_ids_unique(&oracle);
    // Ids tile [0, 3000), each insert's rows carrying its own sequence number.
    let ids: HashSet<i64> = oracle.values().filter_map(|r| r.row_id).collect();
    assert_eq!(ids, (0..3000).collect::<HashSet<_>>());
    assert_eq!(next_row_id(&s).await, 3000);
    for (id, r) in &oracle {
        assert_eq!(r.seq, Some(id / 1000 + 1), "row {id}");
    }

    // Copy-on-write: the rewritten file's rows keep their ids; the changed ones take the new
    // sequence number, the others keep theirs.
    set_modes(&s, "copy-on-write").await;
    run(
        &s,
        "UPDATE ns.t SET v = 'cow' WHERE id % 10 = 0 AND id < 1000",
    )
    .await;
    let seq = current_seq(&s).await;
    oracle = apply(
        &oracle,
        seq,
        |id| id % 10 == 0 && id < 1000,
        |_, _| "cow".into(),
        |_| false,
    );
    assert_eq!(lineage(&s).await, oracle);
    run(&s, "DELETE FROM ns.t WHERE id % 7 = 0 AND id < 2000").await;
    oracle = apply(
        &oracle,
        0,
        |_| false,
        |_, v| v.into(),
        |id| id % 7 == 0 && id < 2000,
    );
    assert_eq!(lineage(&s).await, oracle);

    // Merge-on-read: updated rows move to a new file with their ids.
    set_modes(&s, "merge-on-read").await;
    run(
        &s,
        "UPDATE ns.t SET v = v || '-mor' WHERE id BETWEEN 1500 AND 2500",
    )
    .await;
    let seq = current_seq(&s).await;
    oracle = apply(
        &oracle,
        seq,
        |id| (1500..=2500).contains(&id),
        |_, v| format!("{v}-mor"),
        |_| false,
    );
    assert_eq!(lineage(&s).await, oracle);
    run(&s, "DELETE FROM ns.t WHERE id % 3 = 0").await;
    oracle = apply(&oracle, 0, |_| false, |_, v| v.into(), |id| id % 3 == 0);
    assert_eq!(lineage(&s).await, oracle);
    // An updated row updated again (now in a file that holds its id) keeps it too.
    run(&s, "UPDATE ns.t SET v = 'again' WHERE id = 1501").await;
    let seq = current_seq(&s).await;
    oracle = apply(
        &oracle,
        seq,
        |id| id == 1501,
        |_, _| "again".into(),
        |_| false,
    );
    assert_eq!(lineage(&s).await, oracle);

    // Compaction moves every row into new files, deletes applied: ids and sequence numbers
    // stay as they are.
    let next = next_row_id(&s).await;
    run(
        &s,
        "CALL system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))",
    )
    .await;
    let t = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let summary = &t.metadata().current_snapshot().unwrap().summary();
    assert_eq!(summary.operation, iceberg::spec::Operation::Replace);
    assert_eq!(summary.additional_properties["total-delete-files"], "0");
    assert_eq!(lineage(&s).await, oracle);
    // The new files took a range of ids (the spec's rule for added files) that no row uses.
    assert!(next_row_id(&s).await > next);

    // New rows: ids no row had, from the table's next row id on.
    let next = next_row_id(&s).await;
    run(&s, "INSERT INTO ns.t VALUES (5000, 'new'), (5001, 'new')").await;
    let now = lineage(&s).await;
    let seq = current_seq(&s).await;
    for id in [5000, 5001] {
        let r = &now[&id];
        assert!(r.row_id.unwrap() >= next, "{r:?}");
        assert_eq!(r.seq, Some(seq));
    }
    assert_ids_unique(&now);
    let without_new: BTreeMap<i64, Row> = now.into_iter().filter(|(id, _)| *id < 5000).collect();
    assert_eq!(without_new, oracle);

    // A filter on _row_id finds the row wherever its id is stored.
    let moved = oracle[&1501].row_id.unwrap();
    let found = crate::common::rows(
        &s,
        &format!(
            "SELECT id, v FROM iceberg_scan('ns.t', 'row_lineage', true) WHERE _row_id = {moved}"
        ),
    )
    .await;
    assert_eq!(found, ["1501|again"]);
}

#[tokio::test]
async fn an_upgraded_table_has_row_ids_from_its_first_v3_commit() {
    upgraded_table(false).await;
}

#[tokio::test]
async fn an_upgraded_table_compacted_gives_its_rows_ids() {
    upgraded_table(true).await;
}

async fn upgraded_table(compact_first: bool) {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, v VARCHAR) STORED AS ICEBERG \
         LOCATION '' OPTIONS ('format-version' '2')",
    )
    .await
    .unwrap();
    run(
        &s,
        "INSERT INTO ns.t SELECT value, 'a' FROM generate_series(1, 100)",
    )
    .await;
    let err = sql(
        &s,
        "SELECT _row_id FROM iceberg_scan('ns.t', 'row_lineage', true)",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("format version 2"), "{err}");

    run(
        &s,
        "ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3')",
    )
    .await;
    // The upgrade itself hands out no ids: the rows have none yet.
    let before = lineage(&s).await;
    assert_eq!(before.len(), 100);
    assert!(before
        .values()
        .all(|r| r.row_id.is_none() && r.seq.is_none()));
    if compact_first {
        // A compaction is the first v3 commit: the rows it moves take ids from its new file's
        // range, and the sequence number of the snapshot it read.
        run(
            &s,
            "CALL system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))",
        )
        .await;
        let after = lineage(&s).await;
        assert_ids_unique(&after);
        let all: HashSet<i64> = after.values().filter_map(|r| r.row_id).collect();
        assert_eq!(all, (0..100).collect::<HashSet<_>>());
        assert!(after.values().all(|r| r.seq == Some(1)));
        return;
    }
    // The first v3 commit gives the existing file its range.
    run(&s, "INSERT INTO ns.t VALUES (1000, 'b')").await;
    let after = lineage(&s).await;
    assert_ids_unique(&after);
    // The commit lists the new manifest and the old one in some order; together they take
    // ids 0..=100, the old file's rows one range of 100.
    let all: HashSet<i64> = after.values().filter_map(|r| r.row_id).collect();
    assert_eq!(all, (0..=100).collect::<HashSet<_>>());
    let new = after[&1000].row_id.unwrap();
    assert!(new == 0 || new == 100, "{new}");
    assert_eq!(after[&1].seq, Some(1));
    assert_eq!(after[&1000].seq, Some(current_seq(&s).await));
}

#[tokio::test]
async fn merge_carries_row_ids_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, v VARCHAR) STORED AS ICEBERG \
         LOCATION '' OPTIONS ('format-version' '3')",
    )
    .await
    .unwrap();
    for i in 0..2 {
        run(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value, 'v' || CAST(value AS VARCHAR) FROM \
                 generate_series({}, {})",
                i * 1000,
                i * 1000 + 999
            ),
        )
        .await;
    }
    let mut oracle = lineage(&s).await;
    for (round, mode) in ["copy-on-write", "merge-on-read"].into_iter().enumerate() {
        run(
            &s,
            &format!("ALTER TABLE ns.t SET TBLPROPERTIES ('write.merge.mode' = '{mode}')"),
        )
        .await;
        let next = next_row_id(&s).await;
        // Round 0 updates 1990..=1999, deletes nothing, inserts 2000..=2010; round 1 updates
        // ids 1990..=2010 that are even and deletes the odd ones.
        let statement = match round {
            0 => {
                "MERGE INTO ns.t USING (SELECT value AS id, 'm' || CAST(value AS VARCHAR) AS v \
                  FROM generate_series(1990, 2010)) AS src ON ns.t.id = src.id \
                  WHEN MATCHED THEN UPDATE SET v = src.v \
                  WHEN NOT MATCHED THEN INSERT (id, v) VALUES (src.id, src.v)"
            }
            _ => {
                "MERGE INTO ns.t USING (SELECT value AS id, 'm' || CAST(value AS VARCHAR) AS v \
                  FROM generate_series(1990, 2010)) AS src ON ns.t.id = src.id \
                  WHEN MATCHED AND src.id % 2 = 1 THEN DELETE \
                  WHEN MATCHED THEN UPDATE SET v = ns.t.v || '+'"
            }
        };
        run(&s, statement).await;
        let seq = current_seq(&s).await;
        let now = lineage(&s).await;
        assert_ids_unique(&now);
        oracle = match round {
            0 => {
                let mut o = apply(
                    &oracle,
                    seq,
                    |id| (1990..2000).contains(&id),
                    |id, _| format!("m{id}"),
                    |_| false,
                );
                for id in 2000..=2010 {
                    let r = &now[&id];
                    assert!(r.row_id.unwrap() >= next, "{id}: {r:?}");
                    assert_eq!(r.seq, Some(seq));
                    o.insert(id, r.clone());
                }
                o
            }
            _ => apply(
                &oracle,
                seq,
                |id| (1990..=2010).contains(&id) && id % 2 == 0,
                |_, v| format!("{v}+"),
                |id| (1990..=2010).contains(&id) && id % 2 == 1,
            ),
        };
        assert_eq!(now, oracle, "after the {mode} MERGE");
    }
}
