//! Branches as write targets and the snapshot procedures, from Rust: a branch write is validated
//! against its branch only, a refused procedure changes nothing, a cherry-pick applies a
//! branch's append to `main`, and `expire_snapshots` keeps what branches and tags reach.

use std::sync::Arc;

use datafusion::physical_plan::collect;
use iceberg::TableIdent;
use iceberg_exec::maintenance::{self, SnapshotOrRef};
use iceberg_exec::{IcebergSession, MetadataStore};

use crate::common::session;

async fn run(s: &IcebergSession, sql: &str) -> Vec<String> {
    let batches = s
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    crate::common::render(&batches)
}

/// Runs a query through the session's SQL (which reads Spark's `t.branch_b` names).
async fn rows(s: &IcebergSession, sql: &str) -> Vec<String> {
    run(s, sql).await
}

fn ident() -> TableIdent {
    TableIdent::from_strs(["ns", "t"]).unwrap()
}

fn store(s: &IcebergSession) -> Arc<dyn MetadataStore> {
    s.catalog().clone()
}

async fn metadata_location(s: &IcebergSession) -> String {
    let t = s.catalog().load_table(&ident()).await.unwrap();
    t.metadata_location().unwrap().to_string()
}

async fn head(s: &IcebergSession, reference: &str) -> i64 {
    let t = s.catalog().load_table(&ident()).await.unwrap();
    let snapshot = t.metadata().snapshot_for_ref(reference).unwrap();
    snapshot.snapshot_id()
}

/// `ns.t (id int, k string)` with rows 1..=4 in one file, and a branch `b` at that snapshot.
async fn table_with_branch(s: &IcebergSession) {
    run(s, "CREATE SCHEMA ns").await;
    run(
        s,
        "CREATE TABLE ns.t (id int, k string) USING iceberg \
         TBLPROPERTIES ('commit.retry.min-wait-ms' = '1')",
    )
    .await;
    run(
        s,
        "INSERT INTO ns.t VALUES (1, 'a'), (2, 'a'), (3, 'b'), (4, 'b')",
    )
    .await;
    run(s, "ALTER TABLE ns.t CREATE BRANCH b").await;
}

#[tokio::test]
async fn a_branch_write_is_validated_against_its_branch_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    table_with_branch(&s).await;
    let other = session(dir.path()).await;

    // An overwrite of the branch planned, then an append to the branch's replaced rows: the
    // overwrite fails (it does not run again), and nothing of it is left.
    let planned = s
        .sql("INSERT OVERWRITE ns.t.branch_b SELECT 9, 'z'")
        .await
        .unwrap();
    let plan = planned.create_physical_plan().await.unwrap();
    run(&other, "INSERT INTO ns.t.branch_b VALUES (5, 'c')").await;
    let e = collect(plan, s.context().task_ctx()).await.unwrap_err();
    assert!(iceberg_exec::commit::is_concurrent_change(&e), "{e}");
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t.branch_b ORDER BY id").await,
        ["1", "2", "3", "4", "5"]
    );

    // The same overwrite with an append to main meanwhile: main's commits do not touch it.
    let planned = s
        .sql("INSERT OVERWRITE ns.t.branch_b SELECT 9, 'z'")
        .await
        .unwrap();
    let plan = planned.create_physical_plan().await.unwrap();
    run(&other, "INSERT INTO ns.t VALUES (6, 'c')").await;
    collect(plan, s.context().task_ctx()).await.unwrap();
    assert_eq!(rows(&s, "SELECT id FROM ns.t.branch_b").await, ["9"]);
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
        ["1", "2", "3", "4", "6"]
    );

    // A DELETE of the branch planned, an UPDATE of the same row committed to the branch: the
    // DELETE runs again on the branch's new head, so the row is gone (serializable).
    run(&s, "INSERT INTO ns.t.branch_b VALUES (7, 'y')").await;
    let planned = s
        .sql("DELETE FROM ns.t.branch_b WHERE id = 7")
        .await
        .unwrap();
    let plan = planned.create_physical_plan().await.unwrap();
    run(&other, "UPDATE ns.t.branch_b SET k = 'w' WHERE id = 7").await;
    collect(plan, s.context().task_ctx()).await.unwrap();
    assert_eq!(rows(&s, "SELECT id FROM ns.t.branch_b").await, ["9"]);

    // Each branch's history is its own line; main's log has main's commits only.
    let t = s.catalog().load_table(&ident()).await.unwrap();
    let md = t.metadata();
    let main_head = md.snapshot_for_ref("main").unwrap();
    let branch_head = md.snapshot_for_ref("b").unwrap();
    assert_ne!(main_head.snapshot_id(), branch_head.snapshot_id());
    let log: Vec<i64> = md.history().iter().map(|e| e.snapshot_id).collect();
    assert!(!log.contains(&branch_head.snapshot_id()), "{log:?}");
    assert_eq!(md.current_snapshot_id(), Some(main_head.snapshot_id()));
}

#[tokio::test]
async fn snapshot_procedures_move_main_and_refuse_with_nothing_changed() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    table_with_branch(&s).await;
    let s1 = head(&s, "main").await;
    run(&s, "INSERT INTO ns.t VALUES (5, 'c')").await;
    let s2 = head(&s, "main").await;
    run(&s, "INSERT INTO ns.t VALUES (6, 'c')").await;
    let s3 = head(&s, "main").await;

    let back = maintenance::rollback_to_snapshot(store(&s), &ident(), s1)
        .await
        .unwrap();
    assert_eq!((back.previous, back.current), (Some(s3), s1));
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["4"]);
    // s3 is no longer an ancestor of main: refused, nothing changed.
    let before = metadata_location(&s).await;
    let e = maintenance::rollback_to_snapshot(store(&s), &ident(), s3)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an ancestor of the current state"), "{e}");
    assert_eq!(metadata_location(&s).await, before);
    // set_current_snapshot takes any snapshot.
    maintenance::set_current_snapshot(store(&s), &ident(), SnapshotOrRef::Snapshot(s3))
        .await
        .unwrap();
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["6"]);
    // The latest ancestor older than a time.
    let t = s.catalog().load_table(&ident()).await.unwrap();
    let at = t.metadata().snapshot_by_id(s2).unwrap().timestamp_ms();
    let back = maintenance::rollback_to_timestamp(store(&s), &ident(), at + 1)
        .await
        .unwrap();
    assert_eq!(back.current, s2);

    // An append on branch b (whose parent is s1) applied to main at s2: a new snapshot with the
    // same files.
    run(&s, "INSERT INTO ns.t.branch_b VALUES (10, 'b')").await;
    let x = head(&s, "b").await;
    let picked = maintenance::cherrypick_snapshot(store(&s), &ident(), x)
        .await
        .unwrap();
    assert_eq!((picked.source, picked.previous), (x, Some(s2)));
    assert_ne!(picked.current, x);
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
        ["1", "2", "3", "4", "5", "10"]
    );
    let t = s.catalog().load_table(&ident()).await.unwrap();
    let summary = t
        .metadata()
        .snapshot_by_id(picked.current)
        .unwrap()
        .summary()
        .clone();
    assert_eq!(
        summary.additional_properties[maintenance::SOURCE_SNAPSHOT_ID],
        x.to_string()
    );
    let before = metadata_location(&s).await;
    let e = maintenance::cherrypick_snapshot(store(&s), &ident(), x)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("already picked to create ancestor"), "{e}");
    assert_eq!(metadata_location(&s).await, before);

    // A delete on the branch is not an append: applied only as a fast-forward.
    run(&s, "DELETE FROM ns.t.branch_b WHERE id = 1").await;
    let y = head(&s, "b").await;
    let before = metadata_location(&s).await;
    let e = maintenance::cherrypick_snapshot(store(&s), &ident(), y)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("only appends are applied anew"), "{e}");
    assert_eq!(metadata_location(&s).await, before);
    maintenance::set_current_snapshot(store(&s), &ident(), SnapshotOrRef::Snapshot(x))
        .await
        .unwrap();
    let ff = maintenance::cherrypick_snapshot(store(&s), &ident(), y)
        .await
        .unwrap();
    assert_eq!(
        ff.current, y,
        "a fast-forward makes the snapshot itself the head"
    );
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
        ["2", "3", "4", "10"]
    );

    // fast_forward: a branch moves to a ref ahead of it, and not back.
    let moved = maintenance::fast_forward(store(&s), &ident(), "b", "main")
        .await
        .unwrap();
    assert_eq!((moved.previous, moved.updated), (y, y));
    run(&s, "INSERT INTO ns.t VALUES (11, 'd')").await;
    let moved = maintenance::fast_forward(store(&s), &ident(), "b", "main")
        .await
        .unwrap();
    assert_eq!(moved.updated, head(&s, "main").await);
    assert_eq!(head(&s, "b").await, head(&s, "main").await);
}

#[tokio::test]
async fn expiring_snapshots_keeps_what_branches_and_tags_reach() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    table_with_branch(&s).await;
    run(
        &s,
        "ALTER TABLE ns.t REPLACE BRANCH b WITH SNAPSHOT RETENTION 2 SNAPSHOTS",
    )
    .await;
    for id in 20..23 {
        run(&s, &format!("INSERT INTO ns.t.branch_b VALUES ({id}, 'b')")).await;
    }
    run(&s, "ALTER TABLE ns.t CREATE TAG keep").await;
    for id in 30..33 {
        run(&s, &format!("INSERT INTO ns.t VALUES ({id}, 'm')")).await;
    }
    let branch_rows = rows(&s, "SELECT id FROM ns.t.branch_b ORDER BY id").await;
    let branch_parent = {
        let t = s.catalog().load_table(&ident()).await.unwrap();
        t.metadata()
            .snapshot_for_ref("b")
            .unwrap()
            .parent_snapshot_id()
            .unwrap()
    };
    let far = chrono::Utc::now().timestamp_millis() + 60_000;
    run(
        &s,
        &format!(
            "CALL system.expire_snapshots(table => 'ns.t', older_than => {far}, retain_last => 1)"
        ),
    )
    .await;
    let t = s.catalog().load_table(&ident()).await.unwrap();
    let md = t.metadata();
    // main's head, the tag, the branch's head and its parent (2 snapshots retained on it).
    assert!(md.snapshot_by_id(branch_parent).is_some());
    assert!(md.snapshot_for_ref("keep").is_some());
    assert_eq!(
        md.snapshots().count(),
        4,
        "{:?}",
        md.snapshots().collect::<Vec<_>>()
    );
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t.branch_b ORDER BY id").await,
        branch_rows
    );
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t.tag_keep").await, ["4"]);
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["7"]);
}
