//! `ALTER TABLE` schema evolution: the metadata it writes (schema ids, field ids,
//! `last-column-id`), refusals that change nothing, a write planned before a schema change, and
//! a random sequence of schema and partition changes, writes, overwrites and deletes against an
//! in-memory oracle.

use std::collections::BTreeMap;

use iceberg::spec::{PrimitiveType, Type};
use iceberg::TableIdent;
use iceberg_exec::IcebergSession;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{rows, session, session_with_limit};

async fn run(s: &IcebergSession, sql: &str) {
    s.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn metadata(s: &IcebergSession, table: &str) -> iceberg::table::Table {
    s.catalog()
        .load_table(&TableIdent::from_strs(["ns", table]).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn changes_make_new_schemas_by_field_id() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.t (id BIGINT NOT NULL, n INT, v VARCHAR)",
    )
    .await;
    run(&s, "INSERT INTO ns.t VALUES (1, 10, 'a')").await;
    let before = metadata(&s, "t").await;
    let md = before.metadata();
    assert_eq!((md.current_schema_id(), md.last_column_id()), (0, 3));

    run(
        &s,
        "ALTER TABLE ns.t ADD COLUMNS (p STRUCT<x: DOUBLE, y: DOUBLE> COMMENT 'a point', w INT FIRST)",
    )
    .await;
    let t = metadata(&s, "t").await;
    let md = t.metadata();
    let schema = md.current_schema();
    // The new column first, then the fields of its type; the next column after.
    assert_eq!(md.last_column_id(), 7);
    assert_eq!(schema.field_by_name("p").unwrap().id, 4);
    assert_eq!(schema.field_by_name("p.x").unwrap().id, 5);
    assert_eq!(schema.field_by_name("p.y").unwrap().id, 6);
    assert_eq!(schema.field_by_name("w").unwrap().id, 7);
    assert_eq!(
        schema.field_by_name("p").unwrap().doc.as_deref(),
        Some("a point")
    );
    let names: Vec<&str> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(names, ["w", "id", "n", "v", "p"]);
    // A new schema; the old one is kept.
    assert_eq!(md.current_schema_id(), 1);
    assert!(md.schema_by_id(0).is_some());

    // Rename keeps the id; drop then add of the same name is a new id.
    run(&s, "ALTER TABLE ns.t RENAME COLUMN n TO m").await;
    run(&s, "ALTER TABLE ns.t DROP COLUMN v").await;
    run(&s, "ALTER TABLE ns.t ADD COLUMN v VARCHAR").await;
    run(&s, "ALTER TABLE ns.t ALTER COLUMN m TYPE BIGINT").await;
    let t = metadata(&s, "t").await;
    let schema = t.metadata().current_schema();
    assert_eq!(schema.field_by_name("m").unwrap().id, 2);
    assert_eq!(
        *schema.field_by_name("m").unwrap().field_type,
        Type::Primitive(PrimitiveType::Long)
    );
    assert_eq!(schema.field_by_name("v").unwrap().id, 8);
    assert_eq!(t.metadata().last_column_id(), 8);
    assert_eq!(t.metadata().schemas_iter().count(), 6);
    assert_eq!(
        rows(&s, "SELECT id, m, v, w FROM ns.t").await,
        ["1|10||"],
        "the old value of v is not back"
    );

    // Identifier fields.
    run(&s, "ALTER TABLE ns.t SET IDENTIFIER FIELDS id").await;
    let t = metadata(&s, "t").await;
    let ids: Vec<i32> = t
        .metadata()
        .current_schema()
        .identifier_field_ids()
        .collect();
    assert_eq!(ids, [1]);

    // A statement that changes nothing commits nothing.
    let location = t.metadata_location().unwrap().to_string();
    run(&s, "ALTER TABLE ns.t ALTER COLUMN m TYPE BIGINT").await;
    run(&s, "ALTER TABLE ns.t DROP COLUMN IF EXISTS nope").await;
    let t = metadata(&s, "t").await;
    assert_eq!(t.metadata_location().unwrap(), location);
}

#[tokio::test]
async fn refused_changes_leave_the_table_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, d DATE, f DOUBLE, s STRUCT<a INT>) \
         STORED AS ICEBERG LOCATION '' PARTITIONED BY (d)",
    )
    .await;
    run(&s, "ALTER TABLE ns.t SET IDENTIFIER FIELDS id").await;
    let location = metadata(&s, "t")
        .await
        .metadata_location()
        .unwrap()
        .to_string();
    for (sql, error) in [
        (
            "ALTER TABLE ns.t DROP COLUMN d",
            "partition field 'd' is computed from it",
        ),
        (
            "ALTER TABLE ns.t DROP COLUMN id",
            "it is an identifier field",
        ),
        (
            "ALTER TABLE ns.t ALTER COLUMN f TYPE FLOAT",
            "from double to float",
        ),
        (
            "ALTER TABLE ns.t ALTER COLUMN s TYPE INT",
            "not a primitive column",
        ),
        (
            "ALTER TABLE ns.t ADD COLUMN s.a INT",
            "a column of that name exists",
        ),
        (
            "ALTER TABLE ns.t ADD COLUMN x INT NOT NULL",
            "without a DEFAULT",
        ),
        (
            "ALTER TABLE ns.t SET IDENTIFIER FIELDS f",
            "float and double columns cannot be",
        ),
        (
            "ALTER TABLE ns.t SET IDENTIFIER FIELDS s.a",
            "it is not NOT NULL",
        ),
        (
            "ALTER TABLE ns.t DROP IDENTIFIER FIELDS d",
            "not an identifier field",
        ),
        ("ALTER TABLE ns.t ALTER COLUMN id AFTER id", "after itself"),
        (
            "ALTER TABLE ns.t ALTER COLUMN id AFTER nope",
            "no such column beside it",
        ),
        (
            "ALTER TABLE ns.t RENAME COLUMN f TO d",
            "a column of that name exists",
        ),
        (
            "ALTER TABLE ns.t ADD COLUMN y TIMESTAMP(9)",
            "need format version 3",
        ),
        ("ALTER TABLE ns.nope ADD COLUMN y INT", "nope"),
        ("ALTER TABLE ns.t ADD COLUMN", "ALTER TABLE"),
        (
            "ALTER TABLE ns.t DROP COLUMN id, d",
            "it is an identifier field",
        ),
    ] {
        let e = match s.sql(sql).await {
            Ok(df) => df.collect().await.map(|_| ()).unwrap_err(),
            Err(e) => e,
        }
        .to_string();
        assert!(e.contains(error), "{sql}: {e}");
        assert!(!e.contains('\n'), "{sql}: one line: {e}");
    }
    let after = metadata(&s, "t").await;
    assert_eq!(after.metadata_location().unwrap(), location);
}

#[tokio::test]
async fn a_write_planned_before_a_schema_change_commits_after_it() {
    // As Java: appends are not validated against schema changes. The files are written with
    // the schema the write was planned with and read through the new one by field id; the
    // commit keeps the new schema.
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(&s, "CREATE TABLE ns.t (id BIGINT, n INT, v VARCHAR)").await;
    run(&s, "INSERT INTO ns.t VALUES (1, 10, 'a')").await;
    let planned = s.sql("INSERT INTO ns.t VALUES (2, 20, 'b')").await.unwrap();
    run(&s, "ALTER TABLE ns.t DROP COLUMN v").await;
    run(&s, "ALTER TABLE ns.t ALTER COLUMN n TYPE BIGINT").await;
    run(&s, "ALTER TABLE ns.t ADD COLUMN v INT").await;
    planned.collect().await.unwrap();
    let t = metadata(&s, "t").await;
    let schema = t.metadata().current_schema();
    assert_eq!(schema.field_by_name("v").unwrap().id, 4);
    assert_eq!(
        *schema.field_by_name("n").unwrap().field_type,
        Type::Primitive(PrimitiveType::Long)
    );
    assert_eq!(
        rows(&s, "SELECT id, n, v FROM ns.t ORDER BY id").await,
        ["1|10|", "2|20|"]
    );
}

/// A value of the oracle: what the table should read.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(i64),
    Text(String),
}

/// A column of the oracle, by the name it has now.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    text: bool,
    /// INT that may be promoted to BIGINT.
    narrow: bool,
}

/// The table as it should read: columns in order, rows by id (values by column index; a
/// column's values are dropped with it).
struct Oracle {
    columns: Vec<(u32, Column)>,
    rows: BTreeMap<i64, BTreeMap<u32, Value>>,
    next_column: u32,
    next_id: i64,
    /// Partition fields of the current spec: (name, source column key).
    partition_fields: Vec<(String, u32)>,
    /// Columns any spec was computed from (they cannot be dropped).
    ever_partitioned: std::collections::BTreeSet<u32>,
}

impl Oracle {
    fn render(&self) -> Vec<String> {
        self.rows
            .iter()
            .map(|(id, values)| {
                let mut cells = vec![id.to_string()];
                for (key, _) in &self.columns {
                    cells.push(match values.get(key) {
                        Some(Value::Int(i)) => i.to_string(),
                        Some(Value::Text(t)) => t.clone(),
                        None => String::new(),
                    });
                }
                cells.join("|")
            })
            .collect()
    }

    fn select(&self) -> String {
        let mut names = vec!["id".to_string()];
        names.extend(self.columns.iter().map(|(_, c)| format!("\"{}\"", c.name)));
        format!("SELECT {} FROM ns.t ORDER BY id", names.join(", "))
    }
}

/// `n` new random rows with ids `ids` (the column `fixed`, when given, takes its value): added
/// to the oracle, and their `VALUES` list (without the fixed column).
fn new_rows(
    rng: &mut StdRng,
    o: &mut Oracle,
    ids: Vec<i64>,
    fixed: Option<(u32, &Value)>,
) -> String {
    let mut values = vec![];
    for id in ids {
        let mut row = BTreeMap::new();
        let mut cells = vec![id.to_string()];
        for (key, c) in &o.columns {
            if let Some((k, v)) = fixed {
                if k == *key {
                    row.insert(*key, v.clone());
                    continue;
                }
            }
            if rng.random_bool(0.2) {
                cells.push("NULL".into());
                continue;
            }
            let v = match c.text {
                true => Value::Text(format!("s{}", rng.random_range(0..1000))),
                false => Value::Int(rng.random_range(-1000..1000)),
            };
            cells.push(match &v {
                Value::Int(i) => i.to_string(),
                Value::Text(t) => format!("'{t}'"),
            });
            row.insert(*key, v);
        }
        o.rows.insert(id, row);
        values.push(format!("({})", cells.join(", ")));
    }
    format!("VALUES {}", values.join(", "))
}

/// The next `n` ids (`id % m == r`, when given).
fn next_ids(o: &mut Oracle, n: usize, class: Option<(i64, i64)>) -> Vec<i64> {
    let mut ids = vec![];
    while ids.len() < n {
        let id = o.next_id;
        o.next_id += 1;
        if class.is_none_or(|(m, r)| id % m == r) {
            ids.push(id);
        }
    }
    ids
}

/// One random step: its SQL, applied to the oracle.
fn step(rng: &mut StdRng, o: &mut Oracle) -> String {
    loop {
        match rng.random_range(0..12) {
            0 | 1 => {
                let n = rng.random_range(1..20);
                let ids = next_ids(o, n, None);
                return format!("INSERT INTO ns.t {}", new_rows(rng, o, ids, None));
            }
            // Overwrite by filter: the rows of one id class replaced by new ones of that class.
            9 if !o.rows.is_empty() => {
                let m = rng.random_range(2..5);
                let r = rng.random_range(0..m);
                o.rows.retain(|id, _| id % m != r);
                let n = rng.random_range(1..8);
                let ids = next_ids(o, n, Some((m, r)));
                let values = new_rows(rng, o, ids, None);
                return format!("INSERT INTO ns.t REPLACE WHERE id % {m} = {r} {values}");
            }
            // Static overwrite of the whole table, now and then.
            10 if o.rows.len() > 30 => {
                o.rows.clear();
                let n = rng.random_range(1..20);
                let ids = next_ids(o, n, None);
                return format!("INSERT OVERWRITE ns.t {}", new_rows(rng, o, ids, None));
            }
            // Static overwrite of the rows with one value of a text column.
            11 => {
                let texts: Vec<(u32, String)> = o
                    .columns
                    .iter()
                    .filter(|(_, c)| c.text)
                    .map(|(k, c)| (*k, c.name.clone()))
                    .collect();
                if texts.is_empty() {
                    continue;
                }
                let (key, name) = texts[rng.random_range(0..texts.len())].clone();
                // A value some rows have, when there is one.
                let held: Vec<Value> = o
                    .rows
                    .values()
                    .filter_map(|r| r.get(&key).cloned())
                    .collect();
                let value = match held.is_empty() {
                    true => Value::Text("s0".into()),
                    false => held[rng.random_range(0..held.len())].clone(),
                };
                o.rows.retain(|_, r| r.get(&key) != Some(&value));
                let n = rng.random_range(1..6);
                let ids = next_ids(o, n, None);
                let values = new_rows(rng, o, ids, Some((key, &value)));
                let Value::Text(text) = &value else {
                    unreachable!("a text column")
                };
                return format!("INSERT OVERWRITE ns.t PARTITION (\"{name}\" = '{text}') {values}");
            }
            2 => {
                let key = o.next_column;
                o.next_column += 1;
                let text = rng.random_bool(0.5);
                let c = Column {
                    name: format!("c{key}"),
                    text,
                    narrow: !text,
                };
                let ty = if text { "VARCHAR" } else { "INT" };
                let sql = format!("ALTER TABLE ns.t ADD COLUMN {} {ty}", c.name);
                o.columns.push((key, c));
                return sql;
            }
            3 if o
                .columns
                .iter()
                .any(|(k, _)| !o.ever_partitioned.contains(k)) =>
            {
                let free: Vec<usize> = (0..o.columns.len())
                    .filter(|i| !o.ever_partitioned.contains(&o.columns[*i].0))
                    .collect();
                let at = free[rng.random_range(0..free.len())];
                let (key, c) = o.columns.remove(at);
                for row in o.rows.values_mut() {
                    row.remove(&key);
                }
                return format!("ALTER TABLE ns.t DROP COLUMN \"{}\"", c.name);
            }
            4 if !o.columns.is_empty() => {
                let at = rng.random_range(0..o.columns.len());
                let old = o.columns[at].1.name.clone();
                // Sometimes a name a dropped column had: still a different column.
                let new = format!("r{}", rng.random_range(0..o.next_column + 3));
                let field_name = o.partition_fields.iter().any(|(n, _)| *n == new);
                if o.columns.iter().any(|(_, c)| c.name == new) || new == "id" || field_name {
                    continue;
                }
                o.columns[at].1.name = new.clone();
                return format!("ALTER TABLE ns.t RENAME COLUMN \"{old}\" TO \"{new}\"");
            }
            5 => {
                let Some((_, c)) = o.columns.iter_mut().find(|(_, c)| c.narrow) else {
                    continue;
                };
                c.narrow = false;
                return format!("ALTER TABLE ns.t ALTER COLUMN \"{}\" TYPE BIGINT", c.name);
            }
            7 if !o.columns.is_empty() => {
                let (key, c) = &o.columns[rng.random_range(0..o.columns.len())];
                if o.partition_fields.iter().any(|(_, k)| k == key) {
                    continue;
                }
                let (term, name) = match (c.text, rng.random_bool(0.5)) {
                    (false, true) => (
                        format!("bucket(3, \"{}\")", c.name),
                        format!("{}_bucket_3", c.name),
                    ),
                    (true, true) => (
                        format!("truncate(2, \"{}\")", c.name),
                        format!("{}_trunc_2", c.name),
                    ),
                    _ => (format!("\"{}\"", c.name), c.name.clone()),
                };
                if o.columns.iter().any(|(k, c)| c.name == name && k != key) {
                    continue;
                }
                o.partition_fields.push((name, *key));
                o.ever_partitioned.insert(*key);
                return format!("ALTER TABLE ns.t ADD PARTITION FIELD {term}");
            }
            8 if !o.partition_fields.is_empty() => {
                let at = rng.random_range(0..o.partition_fields.len());
                let (name, _) = o.partition_fields.remove(at);
                return format!("ALTER TABLE ns.t DROP PARTITION FIELD \"{name}\"");
            }
            6 if !o.rows.is_empty() => {
                let m = rng.random_range(2..5);
                let r = rng.random_range(0..m);
                o.rows.retain(|id, _| id % m != r);
                return format!("DELETE FROM ns.t WHERE id % {m} = {r}");
            }
            _ => continue,
        }
    }
}

async fn random_sequence(seed: u64, s: &IcebergSession, mode: &str) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed);
    run(s, "CREATE SCHEMA ns").await;
    run(
        s,
        &format!(
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL) STORED AS ICEBERG LOCATION '' \
             OPTIONS ('write.delete.mode' '{mode}')"
        ),
    )
    .await;
    let mut o = Oracle {
        columns: vec![],
        rows: BTreeMap::new(),
        next_column: 0,
        next_id: 0,
        partition_fields: vec![],
        ever_partitioned: Default::default(),
    };
    let mut done = vec![];
    for _ in 0..60 {
        let sql = step(&mut rng, &mut o);
        run(s, &sql).await;
        done.push(sql);
        let query = o.select();
        assert_eq!(
            rows(s, &query).await,
            o.render(),
            "seed {seed}, after:\n{}",
            done.join(";\n")
        );
    }
    done
}

/// Checks the statements ran cover every kind of step.
fn covers_every_step(done: &[String]) {
    for kind in [
        "INSERT INTO",
        "ADD COLUMN",
        "DROP COLUMN",
        "RENAME COLUMN",
        "TYPE BIGINT",
        "ADD PARTITION FIELD",
        "DROP PARTITION FIELD",
        "DELETE FROM",
        "REPLACE WHERE",
        "INSERT OVERWRITE ns.t PARTITION",
    ] {
        assert!(done.iter().any(|d| d.contains(kind)), "no {kind} ran");
    }
}

#[tokio::test]
async fn random_schema_and_partition_changes_writes_overwrites_and_deletes_match_an_oracle() {
    for (seed, mode) in [
        (1, "copy-on-write"),
        (2, "merge-on-read"),
        (3, "copy-on-write"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        random_sequence(seed, &s, mode).await;
    }
}

#[tokio::test]
async fn random_schema_changes_under_a_small_pool() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 4 << 20).await;
    let done = random_sequence(4, &s, "merge-on-read").await;
    covers_every_step(&done);
}

#[tokio::test]
async fn partition_evolution_writes_specs_as_java_does() {
    use iceberg::spec::{NullOrder, SortDirection, Transform};
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    for version in [1, 2] {
        let t = format!("ns.v{version}");
        run(
            &s,
            &format!(
                "CREATE EXTERNAL TABLE {t} (id BIGINT, ts TIMESTAMP, s VARCHAR) STORED AS \
                 ICEBERG LOCATION '' OPTIONS ('format-version' '{version}')"
            ),
        )
        .await;
        run(
            &s,
            &format!("ALTER TABLE {t} ADD PARTITION FIELD bucket(16, id)"),
        )
        .await;
        run(
            &s,
            &format!("ALTER TABLE {t} ADD PARTITION FIELD truncate(s, 4)"),
        )
        .await;
        run(
            &s,
            &format!("ALTER TABLE {t} ADD PARTITION FIELD hours(ts) AS h"),
        )
        .await;
        run(
            &s,
            &format!("ALTER TABLE {t} DROP PARTITION FIELD id_bucket_16"),
        )
        .await;
        run(
            &s,
            &format!("ALTER TABLE {t} ADD PARTITION FIELD bucket(16, id) AS b"),
        )
        .await;
        let table = metadata(&s, &format!("v{version}")).await;
        let md = table.metadata();
        let fields: Vec<(i32, String, Transform)> = md
            .default_partition_spec()
            .fields()
            .iter()
            .map(|f| (f.field_id, f.name.clone(), f.transform))
            .collect();
        let want: Vec<(i32, &str, Transform)> = match version {
            // v1: the dropped field stays as void, and the bucket comes back with a new id.
            1 => vec![
                (1000, "id_bucket_16", Transform::Void),
                (1001, "s_trunc_4", Transform::Truncate(4)),
                (1002, "h", Transform::Hour),
                (1003, "b", Transform::Bucket(16)),
            ],
            // v2: the dropped field leaves; added again, it has its old id.
            _ => vec![
                (1001, "s_trunc_4", Transform::Truncate(4)),
                (1002, "h", Transform::Hour),
                (1000, "b", Transform::Bucket(16)),
            ],
        };
        let want: Vec<(i32, String, Transform)> = want
            .into_iter()
            .map(|(i, n, t)| (i, n.to_string(), t))
            .collect();
        assert_eq!(fields, want, "v{version}");
        assert_eq!(md.partition_specs_iter().count(), 6, "v{version}");
        run(
            &s,
            &format!("INSERT INTO {t} VALUES (1, TIMESTAMP '2024-01-01 10:00:00', 'abcdef')"),
        )
        .await;
        assert_eq!(
            rows(&s, &format!("SELECT id, s FROM {t} WHERE s = 'abcdef'")).await,
            ["1|abcdef"]
        );
    }

    // Write order: the table's sort order and its distribution mode.
    run(
        &s,
        "ALTER TABLE ns.v2 WRITE ORDERED BY s DESC, id NULLS LAST",
    )
    .await;
    let table = metadata(&s, "v2").await;
    let md = table.metadata();
    let order: Vec<(i32, SortDirection, NullOrder)> = md
        .default_sort_order()
        .fields
        .iter()
        .map(|f| (f.source_id, f.direction, f.null_order))
        .collect();
    assert_eq!(
        order,
        [
            (3, SortDirection::Descending, NullOrder::Last),
            (1, SortDirection::Ascending, NullOrder::Last)
        ]
    );
    assert_eq!(md.properties()["write.distribution-mode"], "range");
    // An unpartitioned table writes one file, in the table's order.
    run(&s, "CREATE TABLE ns.o (id BIGINT, s VARCHAR)").await;
    run(&s, "ALTER TABLE ns.o WRITE LOCALLY ORDERED BY s DESC").await;
    run(
        &s,
        "INSERT INTO ns.o VALUES (2, 'b'), (3, 'c'), (4, 'a'), (5, NULL)",
    )
    .await;
    assert_eq!(rows(&s, "SELECT id FROM ns.o").await, ["3", "2", "4", "5"]);
    run(&s, "ALTER TABLE ns.v2 WRITE DISTRIBUTED BY PARTITION").await;
    let table = metadata(&s, "v2").await;
    assert_eq!(
        table.metadata().default_sort_order().fields.len(),
        2,
        "kept"
    );
    assert_eq!(
        table.metadata().properties()["write.distribution-mode"],
        "hash"
    );
    run(&s, "ALTER TABLE ns.v2 WRITE UNORDERED").await;
    let table = metadata(&s, "v2").await;
    assert!(table.metadata().default_sort_order().is_unsorted());
    assert_eq!(
        table.metadata().properties()["write.distribution-mode"],
        "none"
    );
}

#[tokio::test]
async fn describe_extended_shows_the_table_s_details() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, ts TIMESTAMP) STORED AS ICEBERG \
         LOCATION '' OPTIONS ('custom.key' 'v1')",
    )
    .await;
    run(&s, "INSERT INTO ns.t VALUES (1, NULL)").await;
    run(&s, "ALTER TABLE ns.t WRITE ORDERED BY id DESC").await;
    run(&s, "ALTER TABLE ns.t SET IDENTIFIER FIELDS id").await;
    let table = metadata(&s, "t").await;
    let snapshot = table.metadata().current_snapshot_id().unwrap().to_string();
    let described = s
        .sql("DESCRIBE TABLE EXTENDED ns.t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let lines = crate::common::render(&described);
    let value = |key: &str| -> String {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{key}|")))
            .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
            .trim_end_matches('|')
            .to_string()
    };
    assert_eq!(lines[0], "id|long not null|");
    assert_eq!(
        value("Name"),
        "iceberg.ns.t".replace("iceberg", s.catalog().name())
    );
    assert_eq!(value("Location"), table.metadata().location());
    assert_eq!(value("Format Version"), "2");
    assert_eq!(value("Current Snapshot"), snapshot);
    assert_eq!(value("Sort Order"), "id DESC NULLS LAST");
    assert_eq!(value("Identifier Fields"), "id");
    assert!(
        value("Table Properties").contains("custom.key=v1"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "Not partitioned||"), "{lines:?}");
    // DataFusion's own DESCRIBE stays DataFusion's.
    let plain = crate::common::rows(&s, "DESCRIBE ns.t").await;
    assert_eq!(plain[0], "id|Int64|NO");
}

#[tokio::test]
async fn concurrent_schema_changes_both_land() {
    // Two sessions on one warehouse: the second ALTER finds the table changed under it, and
    // its change is made again on the new version (the compare-and-swap retry).
    let dir = tempfile::tempdir().unwrap();
    let a = session(dir.path()).await;
    let b = session(dir.path()).await;
    run(&a, "CREATE SCHEMA ns").await;
    run(&a, "CREATE TABLE ns.t (id BIGINT)").await;
    let mut tasks = vec![];
    for (i, s) in [a, b].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for j in 0..5 {
                run(&s, &format!("ALTER TABLE ns.t ADD COLUMN c{i}_{j} INT")).await;
            }
            s
        }));
    }
    let mut sessions = vec![];
    for t in tasks {
        sessions.push(t.await.unwrap());
    }
    let table = metadata(&sessions[0], "t").await;
    let schema = table.metadata().current_schema();
    let mut names: Vec<String> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.clone())
        .collect();
    names.sort();
    assert_eq!(names.len(), 11, "{names:?}");
    let ids: std::collections::HashSet<i32> =
        schema.as_struct().fields().iter().map(|f| f.id).collect();
    assert_eq!(ids.len(), 11, "every column its own id");
    assert_eq!(table.metadata().last_column_id(), 11);
}

#[tokio::test]
async fn show_create_table_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.src (id bigint NOT NULL COMMENT 'the ''key''', `Mixed Case` string, \
         point struct<x: double, y: double>, tags array<string>, attrs map<string, bigint>, \
         amount decimal(12, 2), ts timestamp, tz timestamp with time zone, d date, u uuid) \
         USING iceberg PARTITIONED BY (bucket(8, id), days(ts), truncate(3, `Mixed Case`)) \
         TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read', 'k' = 'v')",
    )
    .await;
    let shown = s
        .sql("SHOW CREATE TABLE ns.src")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = shown[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::StringArray>()
        .unwrap()
        .value(0)
        .to_string();
    assert!(text.starts_with("CREATE TABLE ns.src ("), "{text}");
    assert!(text.contains("`Mixed Case` string"), "{text}");
    // The same statement, under another name and at the catalog's default location.
    let copy: String = text
        .replacen("CREATE TABLE ns.src", "CREATE TABLE ns.copy", 1)
        .lines()
        .filter(|l| !l.starts_with("LOCATION "))
        .collect::<Vec<_>>()
        .join("\n");
    run(&s, &copy).await;
    let (a, b) = (metadata(&s, "src").await, metadata(&s, "copy").await);
    let (a, b) = (a.metadata(), b.metadata());
    assert_eq!(
        a.current_schema().as_struct(),
        b.current_schema().as_struct()
    );
    let spec = |m: &iceberg::spec::TableMetadata| -> Vec<(i32, String, String)> {
        m.default_partition_spec()
            .fields()
            .iter()
            .map(|f| (f.source_id, f.name.clone(), f.transform.to_string()))
            .collect()
    };
    assert_eq!(spec(a), spec(b));
    assert_eq!(a.format_version(), b.format_version());
    assert_eq!(a.properties(), b.properties());
}

#[tokio::test]
async fn create_or_replace_makes_a_new_version_of_the_same_table() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.t (id bigint, name string, p struct<x: int>, tags array<struct<a: int>>) \
         USING iceberg PARTITIONED BY (name)",
    )
    .await;
    run(
        &s,
        "INSERT INTO ns.t VALUES (1, 'a', named_struct('x', 10), [named_struct('a', 1)])",
    )
    .await;
    let before = metadata(&s, "t").await;
    let old = before.metadata();
    let first = old.current_snapshot_id().unwrap();
    run(
        &s,
        "CREATE OR REPLACE TABLE ns.t (name string, id bigint, extra double, \
         p struct<y: int, x: int>, tags array<struct<a: int, b: int>>) USING iceberg \
         PARTITIONED BY (bucket(4, id))",
    )
    .await;
    let after = metadata(&s, "t").await;
    let md = after.metadata();
    // The same table, its history kept, main reset.
    assert_eq!(md.uuid(), old.uuid());
    assert_eq!(md.snapshots().count(), 1);
    assert!(md.current_snapshot().is_none());
    assert!(md.snapshot_for_ref("main").is_none());
    assert_eq!(md.schemas_iter().count(), 2);
    assert_eq!(md.metadata_log().len(), old.metadata_log().len() + 1);
    // Ids by name: old names keep theirs, new ones count on from last-column-id.
    let id = |n: &str| md.current_schema().field_by_name(n).unwrap().id;
    let old_id = |n: &str| old.current_schema().field_by_name(n).unwrap().id;
    for kept in [
        "id",
        "name",
        "p",
        "p.x",
        "tags",
        "tags.element",
        "tags.element.a",
    ] {
        assert_eq!(id(kept), old_id(kept), "{kept}");
    }
    let last = old.last_column_id();
    let mut fresh = vec![id("extra"), id("p.y"), id("tags.element.b")];
    fresh.sort();
    assert_eq!(fresh, [last + 1, last + 2, last + 3]);
    assert_eq!(md.last_column_id(), last + 3);
    let spec = md.default_partition_spec();
    assert_eq!(spec.fields().len(), 1);
    assert_eq!(spec.fields()[0].source_id, id("id"));
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["0"]);
    // The old snapshot reads as it was, with its own schema.
    assert_eq!(
        rows(
            &s,
            &format!("SELECT id, name FROM iceberg_scan('ns.t', 'snapshot_id', {first})")
        )
        .await,
        ["1|a"]
    );

    // AS query, failing: nothing changes, nothing is left behind.
    let location = after.metadata_location().unwrap().to_string();
    let files = crate::common::files_under(dir.path()).len();
    let e = s
        .sql("CREATE OR REPLACE TABLE ns.t USING iceberg AS SELECT CAST(v AS INT) AS id FROM (VALUES ('1'), ('x')) AS v(v)")
        .await;
    let failed = match e {
        Ok(df) => df.collect().await.is_err(),
        Err(_) => true,
    };
    assert!(failed);
    assert_eq!(
        metadata(&s, "t").await.metadata_location().unwrap(),
        location
    );
    assert_eq!(crate::common::files_under(dir.path()).len(), files);

    // AS query: the replacement and its rows in one commit; the metadata log records the file
    // replaced with its own time.
    run(
        &s,
        "CREATE OR REPLACE TABLE ns.t USING iceberg AS SELECT 7 AS id, 'z' AS name",
    )
    .await;
    let replaced = metadata(&s, "t").await;
    assert_eq!(
        replaced.metadata().metadata_log().len(),
        md.metadata_log().len() + 1
    );
    let logged = replaced.metadata().metadata_log().last().unwrap();
    assert_eq!(logged.metadata_file, location);
    assert_eq!(logged.timestamp_ms, md.last_updated_ms());
    assert_eq!(rows(&s, "SELECT id, name FROM ns.t").await, ["7|z"]);
    assert_eq!(
        replaced
            .metadata()
            .current_schema()
            .field_by_name("id")
            .unwrap()
            .id,
        id("id")
    );
}

#[tokio::test]
async fn a_replacement_keeps_the_format_version_and_properties_it_does_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.t (id bigint) USING iceberg TBLPROPERTIES ('format-version' = '3', \
         'write.parquet.compression-codec' = 'snappy')",
    )
    .await;
    // A v3 type: accepted because the table stays v3.
    run(
        &s,
        "CREATE OR REPLACE TABLE ns.t (id bigint, ts timestamp_ntz) USING iceberg \
         TBLPROPERTIES ('k' = 'v')",
    )
    .await;
    let t = metadata(&s, "t").await;
    let md = t.metadata();
    assert_eq!(md.format_version(), iceberg::spec::FormatVersion::V3);
    assert_eq!(
        md.properties()
            .get("write.parquet.compression-codec")
            .map(String::as_str),
        Some("snappy")
    );
    assert_eq!(md.properties().get("k").map(String::as_str), Some("v"));
}
