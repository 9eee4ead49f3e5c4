//! The snapshot producer beyond appends: removing data files (what DELETE and copy-on-write
//! commit), with summaries, sequence numbers and the removed files' manifest entries.

use std::collections::HashSet;
use std::sync::Arc;

use crate::common::{rows, session, sql};
use iceberg::spec::{ManifestStatus, Operation};
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, SnapshotChanges};
use iceberg_exec::MetadataStore;

#[tokio::test]
async fn delete_snapshot_removes_files_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(&s, "CREATE EXTERNAL TABLE ns.t (id BIGINT, r VARCHAR) STORED AS ICEBERG LOCATION '' PARTITIONED BY (r)")
        .await
        .unwrap();
    sql(&s, "INSERT INTO ns.t VALUES (1, 'a'), (2, 'b'), (3, 'a')")
        .await
        .unwrap();
    sql(&s, "INSERT INTO ns.t VALUES (4, 'b')").await.unwrap();

    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await
        .unwrap();
    assert_eq!(files.len(), 3);
    let removed: Vec<String> = files
        .iter()
        .filter(|f| f.path.contains("r=b"))
        .map(|f| f.path.clone())
        .collect();
    assert_eq!(removed.len(), 2);

    let changes = SnapshotChanges {
        operation: Operation::Delete,
        removed_files: removed.iter().cloned().collect::<HashSet<_>>(),
        ..Default::default()
    };
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let outcome = commit(Arc::clone(&store), &ident, changes).await.unwrap();
    let md = outcome.table.metadata();
    let current = md.current_snapshot().unwrap();
    assert_eq!(current.sequence_number(), 3);
    assert_eq!(current.summary().operation, Operation::Delete);
    let props = &current.summary().additional_properties;
    assert_eq!(props["deleted-data-files"], "2");
    assert_eq!(props["deleted-records"], "2");
    assert_eq!(props["total-records"], "2");
    assert_eq!(props["total-data-files"], "1");

    // The removed files are recorded as DELETED entries, the kept one as EXISTING with its
    // original sequence number.
    let list = outcome
        .table
        .manifest_list_reader(current)
        .load()
        .await
        .unwrap();
    let mut statuses = vec![];
    for m in list.entries() {
        for e in m
            .load_manifest(outcome.table.file_io())
            .await
            .unwrap()
            .entries()
        {
            statuses.push((
                e.status(),
                e.sequence_number(),
                removed.contains(&e.file_path().to_string()),
            ));
        }
    }
    statuses.sort_by_key(|(st, seq, _)| (*st as i32, *seq));
    assert!(statuses.contains(&(ManifestStatus::Deleted, Some(1), true)));
    assert!(statuses.contains(&(ManifestStatus::Deleted, Some(2), true)));
    assert!(statuses.contains(&(ManifestStatus::Existing, Some(1), false)));
    assert_eq!(
        rows(&s, "SELECT id FROM ns.t ORDER BY id").await,
        ["1", "3"]
    );

    // Removing a file that is no longer in the table is a conflict; nothing changes.
    let again = SnapshotChanges {
        operation: Operation::Delete,
        removed_files: removed.iter().cloned().collect(),
        ..Default::default()
    };
    let before = s.catalog().load_table(&ident).await.unwrap();
    let e = commit(store, &ident, again).await.unwrap_err().to_string();
    assert!(e.contains("no longer in the table"), "{e}");
    let after = s.catalog().load_table(&ident).await.unwrap();
    assert_eq!(after.metadata_location(), before.metadata_location());
}

#[tokio::test]
async fn new_manifests_roll_at_the_target_size() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    // 3 KiB per manifest: three entries each.
    sql(&s, "CREATE EXTERNAL TABLE ns.t (id BIGINT, p INT) STORED AS ICEBERG LOCATION '' PARTITIONED BY (p) OPTIONS ('commit.manifest.target-size-bytes' '3072')")
        .await
        .unwrap();
    sql(
        &s,
        "INSERT INTO ns.t SELECT value, CAST(value % 7 AS INT) FROM generate_series(1, 70)",
    )
    .await
    .unwrap();
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let list = table.manifest_list_reader(&snapshot).load().await.unwrap();
    // Seven data files in manifests of at most three.
    let counts: Vec<u32> = list
        .entries()
        .iter()
        .map(|m| m.added_files_count.unwrap_or(0))
        .collect();
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert_eq!(counts.iter().sum::<u32>(), 7);
    assert!(counts.iter().all(|c| *c <= 3));
    assert_eq!(
        rows(&s, "SELECT count(*), sum(id) FROM ns.t").await,
        ["70|2485"]
    );
}

/// Ten appends: ten single-file manifests, in the table's order.
async fn ten_manifests(
    dir: &std::path::Path,
) -> (iceberg_exec::IcebergSession, TableIdent, Vec<String>) {
    let s = session(dir).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT) STORED AS ICEBERG LOCATION ''",
    )
    .await
    .unwrap();
    for i in 0..10 {
        sql(&s, &format!("INSERT INTO ns.t VALUES ({i}), ({})", i + 100))
            .await
            .unwrap();
    }
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let list = table.manifest_list_reader(&snapshot).load().await.unwrap();
    let paths = list
        .entries()
        .iter()
        .map(|m| m.manifest_path.clone())
        .collect::<Vec<_>>();
    assert_eq!(paths.len(), 10);
    (s, ident, paths)
}

/// The data file each of `manifests` lists (one each).
async fn file_of(table: &iceberg::table::Table, manifest: &str) -> String {
    let snapshot = table.metadata().current_snapshot().unwrap();
    let list = table.manifest_list_reader(snapshot).load().await.unwrap();
    let m = list
        .entries()
        .iter()
        .find(|m| m.manifest_path == manifest)
        .unwrap();
    let loaded = m.load_manifest(table.file_io()).await.unwrap();
    assert_eq!(loaded.entries().len(), 1);
    loaded.entries()[0].file_path().to_string()
}

#[tokio::test]
async fn removals_spread_over_many_manifests_rewrite_each_in_the_parents_order() {
    let dir = tempfile::tempdir().unwrap();
    let (s, ident, parents) = ten_manifests(dir.path()).await;
    let table = s.catalog().load_table(&ident).await.unwrap();
    // More manifests to rewrite than are rewritten at a time, with kept ones between them.
    let hit = [0usize, 2, 3, 5, 6, 9];
    let mut removed = HashSet::new();
    for i in hit {
        removed.insert(file_of(&table, &parents[i]).await);
    }
    let changes = SnapshotChanges {
        operation: Operation::Delete,
        removed_files: removed.clone(),
        ..Default::default()
    };
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let outcome = commit(store, &ident, changes).await.unwrap();
    let current = outcome.table.metadata().current_snapshot().unwrap();
    let props = &current.summary().additional_properties;
    assert_eq!(props["deleted-data-files"], "6");
    assert_eq!(props["deleted-records"], "12");
    assert_eq!(props["total-data-files"], "4");

    let list = outcome
        .table
        .manifest_list_reader(current)
        .load()
        .await
        .unwrap();
    assert_eq!(list.entries().len(), 10);
    for (i, m) in list.entries().iter().enumerate() {
        let entries = m.load_manifest(outcome.table.file_io()).await.unwrap();
        let entry = &entries.entries()[0];
        if hit.contains(&i) {
            // Rewritten in place of the parent's manifest: its file, now deleted.
            assert_ne!(m.manifest_path, parents[i], "manifest {i}");
            assert_eq!(entry.status(), ManifestStatus::Deleted, "manifest {i}");
            assert!(removed.contains(entry.file_path()), "manifest {i}");
        } else {
            assert_eq!(
                m.manifest_path, parents[i],
                "manifest {i} is carried as it is"
            );
            assert!(!removed.contains(entry.file_path()), "manifest {i}");
        }
    }
    // The kept manifests' appends (the n-th append has sequence number n) are what remains.
    let parent_list = table
        .manifest_list_reader(table.metadata().current_snapshot().unwrap())
        .load()
        .await
        .unwrap();
    let mut kept: Vec<i64> = (0..10)
        .filter(|i| !hit.contains(i))
        .flat_map(|i| {
            let n = parent_list.entries()[i].sequence_number - 1;
            [n, n + 100]
        })
        .collect();
    kept.sort();
    let kept: Vec<String> = kept.iter().map(|v| v.to_string()).collect();
    assert_eq!(rows(&s, "SELECT id FROM ns.t ORDER BY id").await, kept);
}

#[tokio::test]
async fn a_manifest_that_cannot_be_read_fails_the_commit_and_leaves_no_rewritten_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let (s, ident, parents) = ten_manifests(dir.path()).await;
    let table = s.catalog().load_table(&ident).await.unwrap();
    let mut removed = HashSet::new();
    for m in &parents {
        removed.insert(file_of(&table, m).await);
    }
    // The sixth manifest is lost: the rewrites around it succeed, its own fails.
    let lost = parents[5].strip_prefix("file://").unwrap_or(&parents[5]);
    std::fs::remove_file(lost).unwrap();
    let metadata_dir = std::path::Path::new(lost).parent().unwrap().to_path_buf();
    let listing = || {
        let mut names = std::fs::read_dir(&metadata_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>();
        names.sort();
        names
    };
    let before = listing();

    let changes = SnapshotChanges {
        operation: Operation::Delete,
        removed_files: removed,
        ..Default::default()
    };
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let e = commit(store, &ident, changes)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&parents[5]) || e.contains(lost), "{e}");
    assert_eq!(listing(), before, "every file the commit wrote is removed");
    let after = s.catalog().load_table(&ident).await.unwrap();
    assert_eq!(after.metadata_location(), table.metadata_location());
}
