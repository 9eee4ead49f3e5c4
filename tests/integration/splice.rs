//! Copy-on-write by column splice (`MERGE` and `UPDATE` that only change columns which neither
//! partition nor sort the table): random statements against an in-memory oracle, with files of
//! several row groups, NULL and NaN values; every data file's manifest metrics checked against
//! what its parquet holds; the fallback to the ordinary rewrite under a small pool. Copy-on-write
//! `DELETE` and `MERGE ... THEN DELETE` leave rows out the same way, copying the row groups that
//! keep every row.

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::{metric, rows, run_with_metrics, session, session_with_limit, sql};
use datafusion::arrow::array::RecordBatch;
use iceberg::TableIdent;
use iceberg_exec::IcebergSession;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A live row of the splice test: (id, part, v, f as a code: `f * 4`, -1 for NaN, NULL as
/// `None`; note).
type WideRow = (i64, i32, Option<i64>, Option<i64>, Option<String>);

/// A source row of the splice test: (id, v, f code, note).
type WideSource = (i64, Option<i64>, Option<i64>, Option<String>);

async fn wide_rows(s: &IcebergSession) -> Vec<WideRow> {
    let out = rows(
        s,
        "SELECT id, part, v, CASE WHEN isnan(f) THEN -1 ELSE CAST(f * 4 AS BIGINT) END, note \
         FROM ns.w ORDER BY id",
    )
    .await;
    let opt = |x: &str| (x != "NULL" && !x.is_empty()).then(|| x.to_string());
    out.iter()
        .map(|line| {
            let c: Vec<&str> = line.split('|').collect();
            (
                c[0].parse().unwrap(),
                c[1].parse().unwrap(),
                opt(c[2]).map(|x| x.parse().unwrap()),
                opt(c[3]).map(|x| x.parse().unwrap()),
                opt(c[4]),
            )
        })
        .collect()
}

/// `code` as the SQL value of column `f`.
fn f_sql(code: Option<i64>) -> String {
    match code {
        None => "CAST(NULL AS DOUBLE)".into(),
        Some(-1) => "CAST('NaN' AS DOUBLE)".into(),
        Some(c) => format!("CAST({c} AS DOUBLE) / 4"),
    }
}

/// Every live data file's manifest metrics against what its parquet holds: row, null and NaN
/// counts, and the bounds of `id` and `v`; the page statistics of every chunk. Returns how many
/// files were checked.
async fn metrics_match_the_files(s: &IcebergSession) -> usize {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Float64Type, Int64Type};
    use iceberg::spec::{DataContentType, Datum};
    let ident = TableIdent::from_strs(["ns", "w"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let schema = table.metadata().current_schema().clone();
    let id_of = |name: &str| schema.field_by_name(name).unwrap().id;
    let snapshot = table.metadata().current_snapshot().unwrap();
    let list = table.manifest_list_reader(snapshot).load().await.unwrap();
    let mut checked = 0;
    for m in list.entries() {
        let manifest = m.load_manifest(table.file_io()).await.unwrap();
        for e in manifest.entries() {
            let file = e.data_file();
            // A file another writer made (`add_file_without_note`) carries no metrics.
            if !e.is_alive()
                || file.content_type() != DataContentType::Data
                || file.file_path().contains("/foreign-")
            {
                continue;
            }
            let path = file.file_path().trim_start_matches("file://");
            let options = parquet::arrow::arrow_reader::ArrowReaderOptions::new()
                .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required);
            let builder =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new_with_options(
                    std::fs::File::open(path).unwrap(),
                    options,
                )
                .unwrap();
            // Every chunk keeps its page statistics, copied ones too (but `f`: a page of NaNs
            // alone has no bounds, and the writer then leaves the chunk's column index out).
            let footer = builder.metadata();
            let pages = footer.column_index().expect("a column index");
            assert_eq!(pages.len(), footer.num_row_groups(), "{path}");
            for (g, group) in pages.iter().enumerate() {
                for (c, chunk) in group.iter().enumerate().filter(|(c, _)| *c != 3) {
                    assert!(
                        !matches!(
                            chunk,
                            parquet::file::page_index::column_index::ColumnIndexMetaData::NONE
                        ),
                        "chunk {c} of row group {g} has no page statistics in {path}"
                    );
                }
            }
            let reader = builder.build().unwrap();
            let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
            let n: usize = batches.iter().map(|b| b.num_rows()).sum();
            assert_eq!(file.record_count() as usize, n, "{path}");
            for name in ["id", "part", "v", "f", "note"] {
                let nulls: usize = batches
                    .iter()
                    .map(|b| b.column_by_name(name).unwrap().null_count())
                    .sum();
                assert_eq!(
                    file.value_counts()[&id_of(name)] as usize,
                    n,
                    "{name} {path}"
                );
                assert_eq!(
                    file.null_value_counts()[&id_of(name)] as usize,
                    nulls,
                    "{name} {path}"
                );
            }
            let nans: usize = batches
                .iter()
                .map(|b| {
                    let f = b.column_by_name("f").unwrap().as_primitive::<Float64Type>();
                    f.iter().filter(|x| x.is_some_and(f64::is_nan)).count()
                })
                .sum();
            assert_eq!(
                file.nan_value_counts().get(&id_of("f")).copied(),
                Some(nans as u64),
                "NaN count of {path}"
            );
            for name in ["id", "v"] {
                let values: Vec<i64> = batches
                    .iter()
                    .flat_map(|b| {
                        b.column_by_name(name)
                            .unwrap()
                            .as_primitive::<Int64Type>()
                            .iter()
                            .flatten()
                            .collect::<Vec<_>>()
                    })
                    .collect();
                let id = id_of(name);
                assert_eq!(
                    file.lower_bounds().get(&id).cloned(),
                    values.iter().min().map(|&x| Datum::long(x)),
                    "lower bound of {name} in {path}"
                );
                assert_eq!(
                    file.upper_bounds().get(&id).cloned(),
                    values.iter().max().map(|&x| Datum::long(x)),
                    "upper bound of {name} in {path}"
                );
            }
            checked += 1;
        }
    }
    checked
}

/// Creates `ns.w (id, part, v, f, note)`, partitioned by `part`, row groups of 300 rows, from
/// three INSERTs of `n` rows with NULLs in every nullable column and NaNs in `f`.
async fn wide_table(s: &IcebergSession, n: i64) {
    sql(s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        s,
        "CREATE EXTERNAL TABLE ns.w (id BIGINT NOT NULL, part INT, v BIGINT, f DOUBLE, \
         note VARCHAR) STORED AS ICEBERG LOCATION '' PARTITIONED BY (part) \
         OPTIONS ('write.parquet.row-group-limit' '300')",
    )
    .await
    .unwrap();
    for batch in 0..3 {
        sql(
            s,
            &format!(
                "INSERT INTO ns.w SELECT value, CAST(value % 3 AS INT), \
                 CASE WHEN value % 11 = 0 THEN NULL ELSE value % 500 END, \
                 CASE WHEN value % 13 = 0 THEN CAST('NaN' AS DOUBLE) \
                      WHEN value % 17 = 0 THEN NULL ELSE CAST(value % 40 AS DOUBLE) / 4 END, \
                 CASE WHEN value % 7 = 0 THEN NULL ELSE 'n' || CAST(value AS VARCHAR) END \
                 FROM generate_series({}, {})",
                batch * n,
                batch * n + n - 1
            ),
        )
        .await
        .unwrap();
    }
}

/// Random copy-on-write MERGEs that only update columns neither partitioning nor sorting the
/// table: with files of several row groups and NULL and NaN values, each round equals the
/// oracle and every data file's metrics equal its contents. Returns the splice metrics summed
/// over the rounds: (files spliced, fallbacks to the ordinary rewrite).
async fn splices_match_the_oracle(
    s: &IcebergSession,
    seed: u64,
    n: i64,
    size: usize,
) -> (usize, usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    wide_table(s, n).await;
    sql(s, "SET iceberg.merge_mode = 'copy-on-write'")
        .await
        .unwrap();
    let mut target = wide_rows(s).await;
    assert_eq!(target.len() as i64, 3 * n);
    let (mut spliced, mut fallbacks) = (0, 0);
    for round in 0..4 {
        // (id, v, f code, note): half existing ids, half new ones.
        let mut ids = std::collections::BTreeSet::new();
        while ids.len() < size {
            ids.insert(rng.random_range(0..4 * n));
        }
        let source: Vec<WideSource> = ids
            .into_iter()
            .map(|id| {
                let v = (!rng.random_bool(0.1)).then(|| rng.random_range(0..1000));
                let f = match rng.random_range(0..10) {
                    0 => None,
                    1 => Some(-1),
                    _ => Some(rng.random_range(0..100)),
                };
                let note = (!rng.random_bool(0.1)).then(|| format!("r{round}-{id}"));
                (id, v, f, note)
            })
            .collect();
        let values: Vec<String> = source
            .iter()
            .map(|(id, v, f, note)| {
                let v = v.map_or("CAST(NULL AS BIGINT)".into(), |v| v.to_string());
                let note = note
                    .as_ref()
                    .map_or("CAST(NULL AS VARCHAR)".into(), |n| format!("'{n}'"));
                format!("({id}, {v}, {}, {note})", f_sql(*f))
            })
            .collect();
        let name = format!("ns.s{round}");
        sql(
            s,
            &format!(
                "CREATE EXTERNAL TABLE {name} (id BIGINT, v BIGINT, f DOUBLE, note VARCHAR) \
                 STORED AS ICEBERG LOCATION ''"
            ),
        )
        .await
        .unwrap();
        for chunk in values.chunks(2000) {
            sql(
                s,
                &format!("INSERT INTO {name} VALUES {}", chunk.join(", ")),
            )
            .await
            .unwrap();
        }
        // Round 0 and 2: an updated row keeps its note; 1 and 3: a condition picks which rows
        // take the source's values.
        let (clauses, conditional) = match round % 2 {
            0 => (
                "WHEN MATCHED THEN UPDATE SET v = s.v, f = s.f \
                 WHEN NOT MATCHED THEN INSERT VALUES (s.id, 9, s.v, s.f, s.note)",
                false,
            ),
            _ => (
                "WHEN MATCHED AND (t.v IS NULL OR s.v > t.v) THEN UPDATE SET note = s.note, \
                 v = t.v + 1 WHEN NOT MATCHED THEN INSERT VALUES (s.id, 9, s.v, s.f, s.note)",
                true,
            ),
        };
        let (out, m) = run_with_metrics(
            s,
            &format!("MERGE INTO ns.w AS t USING {name} AS s ON t.id = s.id {clauses}"),
            "MergeExec",
        )
        .await;
        // The oracle.
        let by_id: HashMap<i64, &WideSource> = source.iter().map(|r| (r.0, r)).collect();
        let mut expected = vec![];
        let mut count = 0u64;
        let mut matched = std::collections::HashSet::new();
        for row in &target {
            let (id, part, v, f, note) = row.clone();
            match by_id.get(&id) {
                Some((_, sv, sf, snote)) => {
                    matched.insert(id);
                    if !conditional {
                        count += 1;
                        expected.push((id, part, *sv, *sf, note));
                    } else if v.is_none() || sv.zip(v).is_some_and(|(a, b)| a > b) {
                        count += 1;
                        expected.push((id, part, v.map(|x| x + 1), f, snote.clone()));
                    } else {
                        expected.push((id, part, v, f, note));
                    }
                }
                None => expected.push((id, part, v, f, note)),
            }
        }
        for (id, v, f, note) in &source {
            if !matched.contains(id) {
                count += 1;
                expected.push((*id, 9, *v, *f, note.clone()));
            }
        }
        expected.sort_by_key(|r| r.0);
        let context = format!("seed {seed}, round {round}: {m}");
        assert_eq!(out, vec![count.to_string()], "{context}");
        target = wide_rows(s).await;
        assert!(
            target == expected,
            "{context}: the table differs from the oracle"
        );
        spliced += metric(&m, "files_spliced");
        fallbacks += metric(&m, "splice_fallbacks");
        assert!(metrics_match_the_files(s).await > 0);
    }
    (spliced, fallbacks)
}

#[tokio::test]
async fn splicing_merges_match_an_oracle_and_keep_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let (spliced, fallbacks) = splices_match_the_oracle(&s, 21, 1000, 400).await;
    assert!(spliced >= 4, "{spliced} files spliced");
    assert_eq!(fallbacks, 0);
}

#[tokio::test]
async fn a_splice_whose_values_outgrow_the_pool_gives_way_to_the_rewrite() {
    // 4 MiB: the new values of some 40K updated rows are over the splice's eighth of the pool,
    // so the statement runs again as the ordinary rewrite, with the same answers.
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 4 << 20).await;
    let (_, fallbacks) = splices_match_the_oracle(&s, 22, 15_000, 55_000).await;
    assert!(fallbacks >= 2, "{fallbacks} fallbacks");
    assert_eq!(s.memory_pool().reserved(), 0);
}

/// What an UPDATE does to a row (`None`: not matched).
type RowUpdate = Box<dyn Fn(&WideRow) -> Option<WideRow>>;

/// One UPDATE of the splice test: its SQL and what it does.
struct Update {
    sql: String,
    apply: RowUpdate,
}

fn random_updates(rng: &mut StdRng, n: i64) -> Vec<Update> {
    let k = rng.random_range(3..9);
    let t = rng.random_range(100..400);
    let x = rng.random_range(0..2 * n);
    vec![
        Update {
            sql: format!("UPDATE ns.w SET v = v + 1 WHERE id % {k} = 0"),
            apply: Box::new(move |r| {
                (r.0 % k == 0).then(|| (r.0, r.1, r.2.map(|v| v + 1), r.3, r.4.clone()))
            }),
        },
        Update {
            sql: format!(
                "UPDATE ns.w SET note = 'u' || CAST(id AS VARCHAR), f = CAST('NaN' AS DOUBLE) \
                 WHERE v IS NULL OR v < {t}"
            ),
            apply: Box::new(move |r| {
                r.2.is_none_or(|v| v < t)
                    .then(|| (r.0, r.1, r.2, Some(-1), Some(format!("u{}", r.0))))
            }),
        },
        Update {
            sql: format!("UPDATE ns.w SET f = NULL, v = NULL WHERE note IS NULL AND id > {x}"),
            apply: Box::new(move |r| {
                (r.4.is_none() && r.0 > x).then_some((r.0, r.1, None, None, None))
            }),
        },
        Update {
            sql: "UPDATE ns.w SET v = CASE WHEN isnan(f) THEN 0 ELSE v END WHERE part = 1".into(),
            apply: Box::new(|r| {
                (r.1 == 1).then(|| {
                    let v = match r.3 {
                        Some(-1) => Some(0),
                        _ => r.2,
                    };
                    (r.0, r.1, v, r.3, r.4.clone())
                })
            }),
        },
    ]
}

/// Random copy-on-write UPDATEs of columns that neither partition nor sort the table splice;
/// each equals the oracle and leaves every file's metrics equal to its contents. An UPDATE of
/// the partition column then rewrites the ordinary way, with the same answer.
#[tokio::test]
async fn splicing_updates_match_an_oracle_and_keep_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let n = 1000;
    wide_table(&s, n).await;
    sql(&s, "SET iceberg.update_mode = 'copy-on-write'")
        .await
        .unwrap();
    let mut target = wide_rows(&s).await;
    let mut rng = StdRng::seed_from_u64(31);
    let mut spliced = 0;
    for round in 0..2 {
        for update in random_updates(&mut rng, n) {
            let (out, m) = run_with_metrics(&s, &update.sql, "UpdateExec").await;
            let mut count = 0;
            let expected: Vec<WideRow> = target
                .iter()
                .map(|r| match (update.apply)(r) {
                    Some(new) => {
                        count += 1;
                        new
                    }
                    None => r.clone(),
                })
                .collect();
            let context = format!("round {round}, {}: {m}", update.sql);
            assert_eq!(out, vec![count.to_string()], "{context}");
            assert_eq!(metric(&m, "files_spliced") > 0, count > 0, "{context}");
            assert_eq!(metric(&m, "splice_fallbacks"), 0, "{context}");
            spliced += metric(&m, "files_spliced");
            target = wide_rows(&s).await;
            assert!(
                target == expected,
                "{context}: the table differs from the oracle"
            );
            assert!(metrics_match_the_files(&s).await > 0);
        }
    }
    assert!(spliced >= 8, "{spliced} files spliced");
    // The partition column moves rows: the ordinary rewrite.
    let (out, m) = run_with_metrics(
        &s,
        "UPDATE ns.w SET part = 2 WHERE id % 5 = 0",
        "UpdateExec",
    )
    .await;
    let expected: Vec<WideRow> = target
        .iter()
        .map(|r| match r.0 % 5 {
            0 => (r.0, 2, r.2, r.3, r.4.clone()),
            _ => r.clone(),
        })
        .collect();
    let moved = target.iter().filter(|r| r.0 % 5 == 0).count();
    assert_eq!(out, vec![moved.to_string()]);
    assert_eq!(metric(&m, "files_spliced"), 0, "{m}");
    assert!(wide_rows(&s).await == expected);
    assert!(metrics_match_the_files(&s).await > 0);
    // A required column set to NULL by a spliced UPDATE: an error, and the table as it was.
    let before = wide_rows(&s).await;
    let err = sql(&s, "UPDATE ns.w SET id = NULL WHERE v = 3")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("non-nullable"), "{err}");
    assert!(wide_rows(&s).await == before);
}

/// One DELETE of the splice test: its SQL and which rows it takes.
struct Delete {
    sql: String,
    takes: Box<dyn Fn(&WideRow) -> bool>,
}

fn random_deletes(rng: &mut StdRng, n: i64) -> Vec<Delete> {
    let x = rng.random_range(0..3 * n - 30);
    let y = rng.random_range(0..3 * n);
    let z = rng.random_range(0..3 * n);
    // 1,800 consecutive ids: whole row groups of 300 rows (ids step by 3 in a file) go.
    let a = rng.random_range(0..2 * n);
    vec![
        Delete {
            sql: format!("DELETE FROM ns.w WHERE id BETWEEN {x} AND {}", x + 20),
            takes: Box::new(move |r| r.0 >= x && r.0 <= x + 20),
        },
        Delete {
            sql: format!("DELETE FROM ns.w WHERE v IS NULL AND id < {y}"),
            takes: Box::new(move |r| r.2.is_none() && r.0 < y),
        },
        Delete {
            sql: format!("DELETE FROM ns.w WHERE note = 'n{z}' OR (isnan(f) AND id % 7 = 1)"),
            takes: Box::new(move |r| {
                r.4.as_deref() == Some(format!("n{z}").as_str())
                    || (r.3 == Some(-1) && r.0 % 7 == 1)
            }),
        },
        Delete {
            sql: format!(
                "DELETE FROM ns.w WHERE id >= {a} AND id < {} AND v >= 0",
                a + 1800
            ),
            takes: Box::new(move |r| r.0 >= a && r.0 < a + 1800 && r.2.is_some_and(|v| v >= 0)),
        },
    ]
}

/// Random copy-on-write DELETEs leave their rows out by splice: each equals the oracle, leaves
/// every file's metrics equal to its contents, and copies the row groups that keep every row.
#[tokio::test]
async fn splicing_deletes_match_an_oracle_and_copy_untouched_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 64 << 20).await;
    let n = 3000;
    wide_table(&s, n).await;
    sql(&s, "SET iceberg.delete_mode = 'copy-on-write'")
        .await
        .unwrap();
    let mut target = wide_rows(&s).await;
    let mut rng = StdRng::seed_from_u64(41);
    let (mut spliced, mut copied) = (0, 0);
    for round in 0..2 {
        for delete in random_deletes(&mut rng, n) {
            let (out, m) = run_with_metrics(&s, &delete.sql, "DeleteExec").await;
            let before = target.len();
            let expected: Vec<WideRow> = target
                .iter()
                .filter(|r| !(delete.takes)(r))
                .cloned()
                .collect();
            let context = format!("round {round}, {}: {m}", delete.sql);
            assert_eq!(
                out,
                vec![(before - expected.len()).to_string()],
                "{context}"
            );
            assert_eq!(metric(&m, "splice_fallbacks"), 0, "{context}");
            spliced += metric(&m, "files_spliced");
            copied += metric(&m, "row_groups_copied");
            target = wide_rows(&s).await;
            assert!(
                target == expected,
                "{context}: the table differs from the oracle"
            );
            assert!(metrics_match_the_files(&s).await > 0);
        }
    }
    assert!(spliced >= 8, "{spliced} files spliced");
    assert!(copied >= 8, "{copied} row groups copied");
    // Splicing off: every touched file is decoded and encoded whole, with the same answer.
    sql(&s, "SET iceberg.copy_on_write_splice = false")
        .await
        .unwrap();
    let delete = "DELETE FROM ns.w WHERE id % 50 = 7";
    let (out, m) = run_with_metrics(&s, delete, "DeleteExec").await;
    let expected: Vec<WideRow> = target.iter().filter(|r| r.0 % 50 != 7).cloned().collect();
    assert_eq!(
        out,
        vec![(target.len() - expected.len()).to_string()],
        "{m}"
    );
    assert_eq!(metric(&m, "files_spliced"), 0, "{m}");
    assert!(
        wide_rows(&s).await == expected,
        "{delete}: the table differs"
    );
    assert!(metrics_match_the_files(&s).await > 0);
    assert_eq!(s.memory_pool().reserved(), 0);
}

/// Adds to `ns.w` a data file another writer made, in partition `part = 1`, without the
/// optional column `note` (its rows read NULL there): ids `from..from + 10`, `v = id % 500`,
/// `f = 0.5`.
async fn add_file_without_note(s: &IcebergSession, from: i64) {
    use crate::common::hive_style::{field_with_id, parquet_entry, write_parquet};
    use datafusion::arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Schema};
    use iceberg::spec::{DataContentType, Literal, PrimitiveLiteral, Struct};
    use iceberg_exec::commit::{commit, NewFile, SnapshotChanges};
    let ident = TableIdent::from_strs(["ns", "w"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let location = table.metadata().location().trim_start_matches("file://");
    let path = std::path::PathBuf::from(location)
        .join("data")
        .join(format!("foreign-{from}.parquet"));
    let ids: Vec<i64> = (from..from + 10).collect();
    let schema = Schema::new(vec![
        field_with_id("id", DataType::Int64, false, 1),
        field_with_id("part", DataType::Int32, true, 2),
        field_with_id("v", DataType::Int64, true, 3),
        field_with_id("f", DataType::Float64, true, 4),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(Int32Array::from(vec![1; 10])),
        Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| i % 500))),
        Arc::new(Float64Array::from(vec![0.5; 10])),
    ];
    let batch = RecordBatch::try_new(Arc::new(schema), columns).unwrap();
    let size = write_parquet(&path, &batch);
    let spec_id = table.metadata().default_partition_spec_id();
    let partition = Struct::from_iter([Some(Literal::Primitive(PrimitiveLiteral::Int(1)))]);
    let file = parquet_entry(DataContentType::Data, &path, partition, spec_id, 10, size);
    let store: Arc<dyn iceberg_exec::MetadataStore> = s.catalog().clone();
    commit(
        store,
        &ident,
        SnapshotChanges::append(vec![NewFile { spec_id, file }]),
    )
    .await
    .unwrap();
}

/// A copy-on-write `MERGE` that only deletes (TPC-H's second refresh function, for one) leaves
/// the matched rows out by splice, copying the row groups that keep every row; a file another
/// writer made without one of the columns cannot be spliced and alone takes the ordinary
/// rewrite, in the same statement.
#[tokio::test]
async fn merges_that_delete_splice_and_fall_back_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 64 << 20).await;
    wide_table(&s, 3000).await;
    add_file_without_note(&s, 100_000).await;
    sql(&s, "SET iceberg.merge_mode = 'copy-on-write'")
        .await
        .unwrap();
    let mut target = wide_rows(&s).await;
    assert_eq!(target.len(), 9010);
    assert!(target.iter().any(|r| r.0 == 100_003 && r.4.is_none()));
    for (round, foreign) in [(0, false), (1, true)] {
        let gone = format!("ns.gone{round}");
        sql(
            &s,
            &format!("CREATE EXTERNAL TABLE {gone} (id BIGINT) STORED AS ICEBERG LOCATION ''"),
        )
        .await
        .unwrap();
        sql(
            &s,
            &format!("INSERT INTO {gone} SELECT value * 37 + {round} FROM generate_series(0, 60)"),
        )
        .await
        .unwrap();
        if foreign {
            sql(
                &s,
                &format!("INSERT INTO {gone} VALUES (0), (100003), (100007)"),
            )
            .await
            .unwrap();
        }
        let taken = |id: i64| {
            (id % 37 == round && id <= 60 * 37 + round)
                || (foreign && (id == 0 || id == 100_003 || id == 100_007))
        };
        let (out, m) = run_with_metrics(
            &s,
            &format!(
                "MERGE INTO ns.w t USING {gone} g ON t.id = g.id \
                 WHEN MATCHED AND t.v IS NOT NULL THEN DELETE"
            ),
            "MergeExec",
        )
        .await;
        let expected: Vec<WideRow> = target
            .iter()
            .filter(|r| !(taken(r.0) && r.2.is_some()))
            .cloned()
            .collect();
        let context = format!("round {round}: {m}");
        assert_eq!(
            out,
            vec![(target.len() - expected.len()).to_string()],
            "{context}"
        );
        target = wide_rows(&s).await;
        assert!(target == expected, "{context}: the table differs");
        assert!(metrics_match_the_files(&s).await > 0);
        assert!(metric(&m, "files_spliced") >= 3, "{context}");
        assert!(metric(&m, "row_groups_copied") >= 3, "{context}");
        assert_eq!(
            metric(&m, "splice_fallbacks"),
            usize::from(foreign),
            "{context}"
        );
        assert_eq!(s.memory_pool().reserved(), 0);
    }
}
