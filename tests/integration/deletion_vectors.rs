//! Format v3 deletion vectors: merge-on-read writes one vector per data file (merged with what
//! the file had), readers apply them through `PositionalDeleteExec`, damaged ones are refused
//! with the file named, copy-on-write drops only the vectors of the files it rewrites, v2 tables
//! keep one file-scoped delete file per data file, and `ALTER TABLE` upgrades v2 to v3.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::common::{render, session, sql};
use iceberg::spec::{DataFileFormat, Operation};
use iceberg::table::Table;
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, SnapshotChanges};
use iceberg_exec::file_planning::{plan_files, PlannedFile};
use iceberg_exec::physical_plan::write::{write_deletion_vectors, DeletionVector};
use iceberg_exec::{IcebergSession, MetadataStore};

async fn table(s: &IcebergSession) -> Table {
    s.catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap()
}

async fn planned(s: &IcebergSession) -> Vec<PlannedFile> {
    let t = table(s).await;
    let snapshot = t.metadata().current_snapshot().unwrap().clone();
    let mut files = plan_files(&t, &snapshot).await.unwrap();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// A table `ns.t (id BIGINT, v VARCHAR)` of format `version` with three data files of 1000
/// rows each (ids 0..3000); `mode` for its deletes and updates.
async fn three_files(s: &IcebergSession, version: u8, mode: &str) {
    sql(s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        s,
        &format!(
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, v VARCHAR) STORED AS ICEBERG \
             LOCATION '' OPTIONS ('format-version' '{version}', 'write.delete.mode' '{mode}', \
             'write.update.mode' '{mode}')"
        ),
    )
    .await
    .unwrap();
    for i in 0..3 {
        sql(
            s,
            &format!(
                "INSERT INTO ns.t SELECT value, 'v' || CAST(value AS VARCHAR) FROM \
                 generate_series({}, {}) ",
                i * 1000,
                i * 1000 + 999
            ),
        )
        .await
        .unwrap();
    }
}

/// The table's rows as `id|v`, sorted by id.
async fn contents(s: &IcebergSession) -> Vec<String> {
    render(&sql(s, "SELECT id, v FROM ns.t ORDER BY id").await.unwrap())
}

/// The oracle's rows in the same form.
fn expected(rows: &BTreeMap<i64, String>) -> Vec<String> {
    rows.iter().map(|(id, v)| format!("{id}|{v}")).collect()
}

/// What a statement does to a row (`None`: deletes it).
type Change = Box<dyn Fn(i64, &str) -> Option<String>>;

#[tokio::test]
async fn merge_on_read_on_v3_keeps_one_vector_per_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    three_files(&s, 3, "merge-on-read").await;
    let mut oracle: BTreeMap<i64, String> = (0..3000).map(|i| (i, format!("v{i}"))).collect();

    let statements: [(&str, Change); 4] = [
        (
            "DELETE FROM ns.t WHERE id % 7 = 0",
            Box::new(|id, v| (id % 7 != 0).then(|| v.to_string())),
        ),
        (
            "UPDATE ns.t SET v = v || '!' WHERE id % 5 = 1",
            Box::new(|id, v| {
                Some(match id % 5 == 1 {
                    true => format!("{v}!"),
                    false => v.to_string(),
                })
            }),
        ),
        // The first and third files only.
        (
            "DELETE FROM ns.t WHERE id < 1000 AND id % 3 = 2 OR id BETWEEN 2100 AND 2300",
            Box::new(|id, v| {
                (!((id < 1000 && id % 3 == 2) || (2100..=2300).contains(&id)))
                    .then(|| v.to_string())
            }),
        ),
        (
            "DELETE FROM ns.t WHERE id % 7 = 3",
            Box::new(|id, v| (id % 7 != 3).then(|| v.to_string())),
        ),
    ];
    let original: HashSet<String> = planned(&s).await.into_iter().map(|f| f.path).collect();
    assert_eq!(original.len(), 3);
    for (statement, apply) in statements {
        let before = oracle.len();
        let changed = oracle
            .iter()
            .filter(|(id, v)| apply(**id, v).as_deref() != Some(v.as_str()))
            .count();
        oracle = oracle
            .iter()
            .filter_map(|(id, v)| apply(*id, v).map(|v| (*id, v)))
            .collect();
        let out = render(&sql(&s, statement).await.unwrap());
        assert_eq!(out, [changed.to_string()], "{statement}");
        assert!(oracle.len() <= before);
        assert_eq!(contents(&s).await, expected(&oracle), "{statement}");

        // No position delete file goes into a v3 table: one vector per data file with deletes;
        // the vectors' cardinalities account for every row that is gone.
        let mut live = 0;
        for f in planned(&s).await {
            assert!(f.position_deletes.len() <= 1, "{statement}: {f:?}");
            let mut deleted = 0;
            for d in &f.position_deletes {
                let blob = d.deletion_vector.expect("a deletion vector");
                assert_eq!(d.referenced_data_file.as_deref(), Some(f.path.as_str()));
                assert!(d.path.ends_with("-deletes.puffin"), "{}", d.path);
                assert!(blob.offset >= 4 && blob.length > 12);
                deleted += d.record_count;
            }
            live += f.record_count - deleted;
        }
        assert_eq!(live as usize, oracle.len(), "{statement}");
    }
    assert_eq!(s.memory_pool().reserved(), 0);
}

/// The local path of a recorded location.
fn local(path: &str) -> String {
    path.strip_prefix("file://").unwrap_or(path).to_string()
}

#[tokio::test]
async fn a_damaged_vector_is_refused_with_its_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    three_files(&s, 3, "merge-on-read").await;
    sql(&s, "DELETE FROM ns.t WHERE id % 10 = 0").await.unwrap();
    let files = planned(&s).await;
    let d = files
        .iter()
        .flat_map(|f| f.position_deletes.iter())
        .next()
        .unwrap()
        .clone();
    let blob = d.deletion_vector.unwrap();
    let path = local(&d.path);
    let name = d.path.rsplit('/').next().unwrap().to_string();
    let good = std::fs::read(&path).unwrap();
    assert_eq!(&good[..4], b"PFA1");
    assert_eq!(&good[good.len() - 4..], b"PFA1");
    // The blob's magic sits after its 4-byte length.
    let at = blob.offset as usize;
    assert_eq!(&good[at + 4..at + 8], [0xD1, 0xD3, 0x39, 0x64]);

    // A flipped bit inside the vector: the checksum catches it.
    let mut bad = good.clone();
    bad[at + 12] ^= 0x10;
    std::fs::write(&path, &bad).unwrap();
    let e = sql(&s, "SELECT count(*) FROM ns.t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("CRC-32") && e.contains(&name), "{e}");
    // A wrong length field.
    let mut bad = good.clone();
    bad[at + 3] ^= 0x01;
    std::fs::write(&path, &bad).unwrap();
    let e = sql(&s, "SELECT count(*) FROM ns.t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("length field") && e.contains(&name), "{e}");
    // Repaired, the table reads again.
    std::fs::write(&path, &good).unwrap();
    assert_eq!(
        render(&sql(&s, "SELECT count(*) FROM ns.t").await.unwrap()),
        ["2700"]
    );
    assert_eq!(s.memory_pool().reserved(), 0);
}

#[tokio::test]
async fn copy_on_write_drops_only_the_vectors_of_the_files_it_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    three_files(&s, 3, "copy-on-write").await;
    let t = table(&s).await;
    let files = planned(&s).await;
    // One Puffin file with a vector for each data file: their first 10 rows (positions).
    let vectors: Vec<DeletionVector> = files
        .iter()
        .map(|f| DeletionVector {
            data_file: f.path.clone(),
            spec_id: f.spec_id,
            partition: f.partition.clone(),
            positions: (0..10u64).collect(),
        })
        .collect();
    let written = write_deletion_vectors(&t, &vectors).await.unwrap();
    assert_eq!(written.len(), 3);
    let puffins: HashSet<String> = written
        .iter()
        .map(|f| f.file.file_path().to_string())
        .collect();
    for f in &written {
        assert_eq!(f.file.file_format(), DataFileFormat::Puffin);
        assert_eq!(f.file.record_count(), 10);
    }
    assert_eq!(puffins.len(), 1, "one Puffin file");
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    commit(
        store,
        &TableIdent::from_strs(["ns", "t"]).unwrap(),
        SnapshotChanges {
            operation: Operation::Delete,
            added_delete_files: written,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        render(&sql(&s, "SELECT count(*) FROM ns.t").await.unwrap()),
        ["2970"]
    );
    // Rows 0..10 of each file are gone; which ids they are is what the files hold first.
    let gone: Vec<String> = render(
        &sql(
            &s,
            "SELECT count(*) FROM ns.t WHERE id IN (0, 1000, 2000) OR id IN (9, 1009, 2009)",
        )
        .await
        .unwrap(),
    );
    assert_eq!(gone, ["0"]);

    // A copy-on-write DELETE in the first file's ids rewrites that file only.
    let out = render(&sql(&s, "DELETE FROM ns.t WHERE id = 500").await.unwrap());
    assert_eq!(out, ["1"]);
    let after = planned(&s).await;
    assert_eq!(after.len(), 3);
    let vectors: Vec<_> = after
        .iter()
        .flat_map(|f| f.position_deletes.iter())
        .collect();
    assert_eq!(vectors.len(), 2, "the rewritten file's vector left with it");
    assert!(vectors.iter().all(|d| puffins.contains(&d.path)));
    // The other files' vectors, in the same Puffin file, still apply.
    assert_eq!(
        render(&sql(&s, "SELECT count(*) FROM ns.t").await.unwrap()),
        ["2969"]
    );
    assert_eq!(
        render(
            &sql(&s, "SELECT count(*) FROM ns.t WHERE id < 10")
                .await
                .unwrap()
        ),
        ["0"]
    );
    let summary = table(&s)
        .await
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties
        .clone();
    assert_eq!(summary["removed-position-deletes"], "10", "{summary:?}");
}

#[tokio::test]
async fn merge_on_read_on_v2_keeps_one_delete_file_per_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    three_files(&s, 2, "merge-on-read").await;
    let mut oracle: BTreeMap<i64, String> = (0..3000).map(|i| (i, format!("v{i}"))).collect();
    for round in 0..10i64 {
        let statement = format!("DELETE FROM ns.t WHERE id % 100 = {round}");
        sql(&s, &statement).await.unwrap();
        oracle.retain(|id, _| id % 100 != round);
        let files = planned(&s).await;
        assert_eq!(files.len(), 3);
        for f in &files {
            assert_eq!(f.position_deletes.len(), 1, "round {round}: {f:?}");
            let d = &f.position_deletes[0];
            assert_eq!(d.referenced_data_file.as_deref(), Some(f.path.as_str()));
            assert!(d.deletion_vector.is_none());
            assert_eq!(d.record_count, 10 * (round as u64 + 1), "round {round}");
        }
    }
    assert_eq!(contents(&s).await, expected(&oracle));
    let summary = table(&s)
        .await
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties
        .clone();
    assert_eq!(summary["total-delete-files"], "3", "{summary:?}");
    assert_eq!(summary["removed-delete-files"], "3", "{summary:?}");
}

#[tokio::test]
async fn alter_table_upgrades_v2_to_v3_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    three_files(&s, 2, "merge-on-read").await;
    let run = |q: &'static str| {
        let s = &s;
        async move { s.sql(q).await?.collect().await }
    };
    run("DELETE FROM ns.t WHERE id % 4 = 0").await.unwrap();
    let v2_deletes: Vec<String> = planned(&s)
        .await
        .iter()
        .flat_map(|f| f.position_deletes.iter().map(|d| d.path.clone()))
        .collect();
    assert_eq!(v2_deletes.len(), 3);

    // Refusals change nothing.
    let location = table(&s).await.metadata_location().map(str::to_string);
    for (bad, message) in [
        (
            "ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '1')",
            "cannot go back",
        ),
        (
            "ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '4')",
            "must be 1, 2 or 3",
        ),
        (
            "ALTER TABLE ns.t SET TBLPROPERTIES ('write.delete.mode' = 'sometimes')",
            "'copy-on-write' or 'merge-on-read'",
        ),
        (
            "ALTER TABLE ns.t UNSET TBLPROPERTIES ('no.such.key')",
            "no property 'no.such.key'",
        ),
        (
            "ALTER TABLE ns.t SET TBLPROPERTIES (x)",
            "expected ALTER TABLE",
        ),
        (
            "ALTER TABLE ns.missing SET TBLPROPERTIES ('a' = 'b')",
            "missing",
        ),
    ] {
        let e = run(bad).await.unwrap_err().to_string();
        assert!(e.contains(message), "{bad}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
        assert_eq!(
            table(&s).await.metadata_location().map(str::to_string),
            location,
            "{bad} changed the table"
        );
    }

    run("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3', 'owner' = 'me')")
        .await
        .unwrap();
    let t = table(&s).await;
    assert_eq!(t.metadata().format_version() as u8, 3);
    assert_eq!(t.metadata().properties()["owner"], "me");
    run("ALTER TABLE ns.t UNSET TBLPROPERTIES IF EXISTS ('owner', 'nothing')")
        .await
        .unwrap();
    assert!(!table(&s)
        .await
        .metadata()
        .properties()
        .contains_key("owner"));
    // Setting the same version again is a no-op.
    run("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3')")
        .await
        .unwrap();

    // The v2 position deletes still apply; the next delete merges them into vectors.
    let mut oracle: BTreeMap<i64, String> = (0..3000)
        .filter(|i| i % 4 != 0)
        .map(|i| (i, format!("v{i}")))
        .collect();
    assert_eq!(contents(&s).await, expected(&oracle));
    run("DELETE FROM ns.t WHERE id % 4 = 1 AND id < 1500")
        .await
        .unwrap();
    oracle.retain(|id, _| !(id % 4 == 1 && *id < 1500));
    assert_eq!(contents(&s).await, expected(&oracle));
    let files = planned(&s).await;
    let mut vectors = 0;
    for f in &files {
        for d in &f.position_deletes {
            if d.deletion_vector.is_some() {
                vectors += 1;
            } else {
                // Files the statement did not touch keep their v2 delete file.
                assert!(v2_deletes.contains(&d.path));
            }
        }
    }
    assert!(vectors >= 1);
    // Every v2 delete file of a file that got a vector is gone from the snapshot.
    let live_v2: usize = files
        .iter()
        .flat_map(|f| f.position_deletes.iter())
        .filter(|d| d.deletion_vector.is_none())
        .count();
    assert_eq!(live_v2 + vectors, 3);
    // The rows got row ids on the first v3 commit: the table's next row id moved.
    let t = table(&s).await;
    assert!(
        t.metadata().next_row_id() >= 3000,
        "{}",
        t.metadata().next_row_id()
    );
}

#[tokio::test]
async fn each_format_takes_its_own_kind_of_position_deletes() {
    use iceberg_exec::physical_plan::write::write_position_delete_file;
    for version in [2u8, 3] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        three_files(&s, version, "merge-on-read").await;
        let t = table(&s).await;
        let f = planned(&s).await.remove(0);
        let file = match version {
            // A position delete file into a v3 table.
            3 => write_position_delete_file(
                &t,
                f.spec_id,
                f.partition.clone(),
                vec![(f.path.clone(), 0)],
            )
            .await
            .unwrap(),
            // A deletion vector into a v2 table.
            _ => write_deletion_vectors(
                &t,
                &[DeletionVector {
                    data_file: f.path.clone(),
                    spec_id: f.spec_id,
                    partition: f.partition.clone(),
                    positions: [0u64].into_iter().collect(),
                }],
            )
            .await
            .unwrap()
            .remove(0),
        };
        let store: Arc<dyn MetadataStore> = s.catalog().clone();
        let e = commit(
            store,
            &TableIdent::from_strs(["ns", "t"]).unwrap(),
            SnapshotChanges {
                operation: Operation::Delete,
                added_delete_files: vec![file],
                ..Default::default()
            },
        )
        .await
        .unwrap_err()
        .to_string();
        let wanted = match version {
            3 => "must be deletion vectors",
            _ => "must be position delete files",
        };
        assert!(e.contains(wanted), "v{version}: {e}");
        assert_eq!(
            table(&s).await.metadata_location(),
            t.metadata_location(),
            "v{version}: nothing committed"
        );
        assert_eq!(
            render(&sql(&s, "SELECT count(*) FROM ns.t").await.unwrap()),
            ["3000"]
        );
    }
}

/// Each live data file's first row id, by path.
async fn row_ids(s: &IcebergSession) -> BTreeMap<String, (i64, u64)> {
    planned(s)
        .await
        .into_iter()
        .map(|f| {
            let first = f
                .first_row_id
                .unwrap_or_else(|| panic!("{} has no first row id", f.path));
            (f.path, (first, f.record_count))
        })
        .collect()
}

#[tokio::test]
async fn row_ids_are_handed_out_once_and_kept_by_rewritten_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, region VARCHAR) STORED AS ICEBERG \
         LOCATION '' PARTITIONED BY (region) OPTIONS ('format-version' '3')",
    )
    .await
    .unwrap();
    // One statement, three partitions: one manifest listing three files.
    sql(
        &s,
        "INSERT INTO ns.t SELECT value, CASE value % 3 WHEN 0 THEN 'eu' WHEN 1 THEN 'us' \
         ELSE 'ap' END FROM generate_series(1, 300)",
    )
    .await
    .unwrap();
    let first = row_ids(&s).await;
    assert_eq!(first.len(), 3);
    // The files' ranges tile [0, 300): inherited from the manifest in file order.
    let mut ranges: Vec<(i64, u64)> = first.values().copied().collect();
    ranges.sort();
    assert_eq!(ranges[0].0, 0);
    for w in ranges.windows(2) {
        assert_eq!(w[0].0 + w[0].1 as i64, w[1].0, "{ranges:?}");
    }
    assert_eq!(table(&s).await.metadata().next_row_id(), 300);

    // Dropping a whole partition rewrites that manifest: the other files keep their ids.
    sql(&s, "DELETE FROM ns.t WHERE region = 'eu'")
        .await
        .unwrap();
    let after = row_ids(&s).await;
    assert_eq!(after.len(), 2);
    for (path, ids) in &after {
        assert_eq!(first.get(path), Some(ids), "{path} changed its row ids");
    }
    // New rows get ids no file had.
    let before_insert = table(&s).await.metadata().next_row_id();
    sql(&s, "INSERT INTO ns.t VALUES (1000, 'eu')")
        .await
        .unwrap();
    let now = row_ids(&s).await;
    let new: Vec<_> = now
        .iter()
        .filter(|(p, _)| !after.contains_key(*p))
        .collect();
    assert_eq!(new.len(), 1);
    assert!(new[0].1 .0 as u64 >= before_insert, "{new:?}");
    for (path, ids) in &after {
        assert_eq!(now.get(path), Some(ids), "{path} changed its row ids");
    }
}

#[tokio::test]
async fn an_upgraded_table_hands_out_row_ids_on_its_first_v3_commit() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    three_files(&s, 2, "merge-on-read").await;
    assert!(planned(&s).await.iter().all(|f| f.first_row_id.is_none()));
    s.sql("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    sql(&s, "DELETE FROM ns.t WHERE id = 5").await.unwrap();
    let ids = row_ids(&s).await;
    let mut ranges: Vec<(i64, u64)> = ids.values().copied().collect();
    ranges.sort();
    assert_eq!(ranges, [(0, 1000), (1000, 1000), (2000, 1000)]);
    assert_eq!(table(&s).await.metadata().next_row_id(), 3000);
    // Later commits keep them (a cached listing of those manifests is not reused stale).
    sql(&s, "DELETE FROM ns.t WHERE id = 6").await.unwrap();
    assert_eq!(row_ids(&s).await, ids);
}
