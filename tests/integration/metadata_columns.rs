//! Spark's metadata columns through `IcebergSession::sql`: `_file`, `_pos`, `_spec_id`,
//! `_partition` (and `_row_id`, `_last_updated_sequence_number` on v3) are read by name, stay
//! out of `SELECT *`, filter rows and join, and select the rows `DELETE` and `UPDATE` change in
//! both write modes; checked against what the table's files hold.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{render, session};
use datafusion::error::Result;
use iceberg_exec::IcebergSession;

async fn run(s: &IcebergSession, q: &str) -> Result<Vec<String>> {
    Ok(render(&s.sql(q).await?.collect().await?))
}

async fn rows(s: &IcebergSession, q: &str) -> Vec<String> {
    run(s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"))
}

async fn columns(s: &IcebergSession, q: &str) -> Vec<String> {
    let df = s.sql(q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    df.schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

/// A table of 3 partitions, its rows written in id order within each file.
async fn table(s: &IcebergSession, name: &str, mode: &str) {
    for q in [
        "CREATE SCHEMA IF NOT EXISTS ns".to_string(),
        format!(
            "CREATE EXTERNAL TABLE ns.{name} (id INT NOT NULL, region VARCHAR, v INT) STORED AS \
             ICEBERG LOCATION '' PARTITIONED BY (region) OPTIONS ('write.delete.mode' '{mode}', \
             'write.update.mode' '{mode}')"
        ),
        format!(
            "INSERT INTO ns.{name} SELECT id, CASE WHEN id % 3 = 0 THEN 'a' WHEN id % 3 = 1 \
             THEN 'b' ELSE 'c' END, id * 10 FROM (SELECT CAST(value AS INT) AS id FROM \
             generate_series(1, 30)) ORDER BY id"
        ),
    ] {
        s.sql(&q).await.unwrap().collect().await.unwrap();
    }
}

/// `(id, _file, _pos)` of every row.
async fn positions(s: &IcebergSession, name: &str) -> BTreeMap<i32, (String, i64)> {
    rows(s, &format!("SELECT id, _file, _pos FROM ns.{name}"))
        .await
        .into_iter()
        .map(|r| {
            let parts: Vec<&str> = r.split('|').collect();
            (
                parts[0].parse().unwrap(),
                (parts[1].to_string(), parts[2].parse().unwrap()),
            )
        })
        .collect()
}

#[tokio::test]
async fn metadata_columns_are_read_by_name_and_stay_out_of_select_star() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    table(&s, "t", "copy-on-write").await;

    // SELECT * is the table's columns, with or without metadata columns named beside it.
    assert_eq!(
        columns(&s, "SELECT * FROM ns.t").await,
        ["id", "region", "v"]
    );
    assert_eq!(
        columns(&s, "SELECT *, _pos FROM ns.t").await,
        ["id", "region", "v", "_pos"]
    );
    assert_eq!(
        columns(&s, "SELECT t.*, _spec_id FROM ns.t t WHERE _pos = 0").await,
        ["id", "region", "v", "_spec_id"]
    );
    assert_eq!(
        columns(&s, "SELECT * EXCLUDE (v), _file FROM ns.t").await,
        ["id", "region", "_file"]
    );

    // _file is each row's data file, _pos its place there (rows were written in id order).
    let by_id = positions(&s, "t").await;
    assert_eq!(by_id.len(), 30);
    let mut files: BTreeMap<String, Vec<(i64, i32)>> = BTreeMap::new();
    for (id, (file, pos)) in &by_id {
        files.entry(file.clone()).or_default().push((*pos, *id));
    }
    assert_eq!(files.len(), 3);
    for (file, mut at) in files.clone() {
        let path = file.strip_prefix("file://").unwrap_or(&file);
        assert!(std::path::Path::new(path).is_file(), "{file}");
        at.sort();
        let expected: Vec<i64> = (0..at.len() as i64).collect();
        assert_eq!(at.iter().map(|(p, _)| *p).collect::<Vec<_>>(), expected);
        let ids: Vec<i32> = at.iter().map(|(_, id)| *id).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted, "rows of {file} in write order");
    }
    // _partition and _spec_id.
    assert_eq!(
        rows(
            &s,
            "SELECT DISTINCT region, _partition.region, _spec_id FROM ns.t ORDER BY 1"
        )
        .await,
        ["a|a|0", "b|b|0", "c|c|0"]
    );
    // Filters and joins on them; a qualified name; an EXPLAIN.
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.t WHERE _pos < 2").await,
        ["6"]
    );
    let one_file = files.keys().next().unwrap().clone();
    assert_eq!(
        rows(
            &s,
            &format!("SELECT count(*) FROM ns.t x WHERE x._file = '{one_file}'")
        )
        .await,
        ["10"]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT a.id, b._pos FROM ns.t a JOIN ns.t b ON a.id = b.id + 3 \
             WHERE a._pos = 0 ORDER BY a.id"
        )
        .await
        .len(),
        0,
        "the first row of each file has no row 3 ids below it"
    );
    assert_eq!(
        rows(
            &s,
            "SELECT a.id, b._pos FROM ns.t a JOIN ns.t b ON a.id = b.id WHERE a._pos = 0 \
             ORDER BY a.id"
        )
        .await,
        ["1|0", "2|0", "3|0"]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT * FROM ns.t a JOIN ns.t b ON a.id = b.id WHERE b._pos = 9 ORDER BY a.id"
        )
        .await,
        [
            "28|b|280|28|b|280",
            "29|c|290|29|c|290",
            "30|a|300|30|a|300"
        ]
    );
    let plan = rows(&s, "EXPLAIN SELECT _file FROM ns.t WHERE _pos = 3")
        .await
        .join("\n");
    assert!(plan.contains("IcebergScanExec"), "{plan}");
    // In subqueries of a statement that changes another table.
    s.sql("CREATE TABLE ns.ids (id INT)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        rows(
            &s,
            "INSERT INTO ns.ids SELECT id FROM ns.t WHERE _pos = 0 AND _partition.region <> 'a'"
        )
        .await,
        ["2"]
    );
    assert_eq!(
        rows(&s, "SELECT id FROM ns.ids ORDER BY id").await,
        ["1", "2"]
    );

    // A table of the default schema, named without it (the provider the name resolves to is
    // read with the columns, not looked up again).
    for q in [
        "CREATE SCHEMA IF NOT EXISTS default",
        "CREATE TABLE plain (id INT)",
        "INSERT INTO plain VALUES (5), (6)",
    ] {
        s.sql(q).await.unwrap().collect().await.unwrap();
    }
    assert_eq!(
        rows(&s, "SELECT id, _pos FROM plain ORDER BY id").await,
        ["5|0", "6|1"]
    );
    // Values may read metadata columns too.
    rows(&s, "UPDATE plain SET id = _pos + 100 WHERE id = 6").await;
    assert_eq!(
        rows(&s, "SELECT id FROM plain ORDER BY id").await,
        ["5", "101"]
    );

    // An unpartitioned table: _spec_id 0, no _partition.
    s.sql("CREATE TABLE ns.u (id INT)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    s.sql("INSERT INTO ns.u VALUES (7), (8)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        rows(&s, "SELECT id, _spec_id, _pos FROM ns.u ORDER BY id").await,
        ["7|0|0", "8|0|1"]
    );
    assert!(run(&s, "SELECT _partition FROM ns.u").await.is_err());

    // A table with a column of a metadata name keeps its own.
    s.sql("CREATE TABLE ns.own (id INT, _file VARCHAR)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    s.sql("INSERT INTO ns.own VALUES (1, 'mine')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows(&s, "SELECT _file FROM ns.own").await, ["mine"]);
    // A statement reading such a table reads every table as it is: `_file` in a subquery over
    // another table still means the outer table's column.
    assert_eq!(
        rows(
            &s,
            "SELECT id FROM ns.own o WHERE EXISTS \
             (SELECT 1 FROM ns.u x WHERE x.id = 7 AND _file = 'mine')"
        )
        .await,
        ["1"]
    );
    // ... in statements that change it too.
    rows(&s, "DELETE FROM ns.own WHERE _file = 'mine'").await;
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.own").await, ["0"]);
}

#[tokio::test]
async fn row_lineage_columns_are_read_by_name_on_v3_tables() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.l (id INT) STORED AS ICEBERG LOCATION '' \
         OPTIONS ('format-version' '3')",
        "INSERT INTO ns.l VALUES (1), (2), (3)",
    ] {
        s.sql(q).await.unwrap().collect().await.unwrap();
    }
    assert_eq!(
        rows(
            &s,
            "SELECT id, _row_id, _last_updated_sequence_number, _pos FROM ns.l ORDER BY id"
        )
        .await,
        ["1|0|1|0", "2|1|1|1", "3|2|1|2"]
    );
    assert_eq!(columns(&s, "SELECT * FROM ns.l").await, ["id"]);
    // Statements by metadata columns keep the rows' lineage.
    rows(&s, "UPDATE ns.l SET id = 20 WHERE _pos = 1").await;
    rows(&s, "DELETE FROM ns.l WHERE _row_id = 0 OR id = 3").await;
    assert_eq!(
        rows(
            &s,
            "SELECT id, _row_id, _last_updated_sequence_number FROM ns.l"
        )
        .await,
        ["20|1|2"]
    );
}

/// DELETE and UPDATE by conditions on metadata columns, in both modes: what changes is exactly
/// the rows the condition picks out from the positions read before.
#[tokio::test]
async fn delete_and_update_by_metadata_columns_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for (name, mode) in [("cow", "copy-on-write"), ("mor", "merge-on-read")] {
        table(&s, name, mode).await;
        let before = positions(&s, name).await;
        let files: BTreeSet<String> = before.values().map(|(f, _)| f.clone()).collect();
        let victim = files.iter().next().unwrap().clone();

        // DELETE every row of one file, and the second row of each file of partition 'b'.
        assert_eq!(
            rows(
                &s,
                &format!("DELETE FROM ns.{name} WHERE _file = '{victim}'")
            )
            .await,
            ["10"]
        );
        assert_eq!(
            rows(
                &s,
                &format!("DELETE FROM ns.{name} WHERE _partition.region = 'b' AND _pos = 1")
            )
            .await,
            if before
                .values()
                .any(|(f, p)| *p == 1 && f != &victim && f.contains("region=b"))
            {
                ["1"]
            } else {
                ["0"]
            }
        );
        let expected: BTreeSet<i32> = before
            .iter()
            .filter(|(_, (f, p))| f != &victim && !(f.contains("region=b") && *p == 1))
            .map(|(id, _)| *id)
            .collect();
        let left: BTreeSet<i32> = rows(&s, &format!("SELECT id FROM ns.{name}"))
            .await
            .iter()
            .map(|r| r.parse().unwrap())
            .collect();
        assert_eq!(left, expected, "{mode}");

        // UPDATE the first row of every file still there.
        let now = positions(&s, name).await;
        let firsts: BTreeSet<i32> = now
            .iter()
            .filter(|(_, (_, p))| *p == 0)
            .map(|(id, _)| *id)
            .collect();
        rows(
            &s,
            &format!("UPDATE ns.{name} SET v = -v WHERE _pos = 0 AND _spec_id = 0"),
        )
        .await;
        let negative: BTreeSet<i32> = rows(&s, &format!("SELECT id FROM ns.{name} WHERE v < 0"))
            .await
            .iter()
            .map(|r| r.parse().unwrap())
            .collect();
        assert_eq!(negative, firsts, "{mode}");
        assert_eq!(
            rows(&s, &format!("SELECT count(*) FROM ns.{name}")).await,
            [expected.len().to_string()]
        );
        // A condition that matches nothing changes nothing.
        assert_eq!(
            rows(&s, &format!("DELETE FROM ns.{name} WHERE _spec_id = 7")).await,
            ["0"]
        );
    }

    // What is not supported yet is refused with one line, and changes nothing.
    let before = positions(&s, "cow").await;
    for refused in [
        "DELETE FROM ns.cow WHERE _pos = 0 AND id IN (SELECT id FROM ns.mor)",
        "MERGE INTO ns.cow t USING ns.mor s ON t.id = s.id AND t._pos = 0 \
         WHEN MATCHED THEN DELETE",
    ] {
        let err = run(&s, refused).await.unwrap_err().to_string();
        assert!(!err.contains('\n'), "{refused}: {err}");
    }
    // Metadata columns are not assigned.
    let err = run(&s, "UPDATE ns.cow SET _pos = 3")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("No field named _pos"), "{err}");
    assert_eq!(positions(&s, "cow").await, before);
}

/// Conditions on struct fields reach DELETE and UPDATE (the optimizer moves the field access
/// into a projection below the condition).
#[tokio::test]
async fn delete_and_update_by_struct_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE TABLE ns.s (id INT, st STRUCT<x INT, y VARCHAR>)",
        "INSERT INTO ns.s VALUES (1, {x: 1, y: 'a'}), (2, {x: 2, y: 'b'}), (3, {x: 3, y: 'c'})",
    ] {
        s.sql(q).await.unwrap().collect().await.unwrap();
    }
    let ctx = s.context();
    ctx.sql("DELETE FROM ns.s WHERE st.x = 1")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    ctx.sql("UPDATE ns.s SET id = 5 WHERE st['y'] = 'b' AND id > 0")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        rows(&s, "SELECT id, st.x FROM ns.s ORDER BY id").await,
        ["3|3", "5|2"]
    );
}
