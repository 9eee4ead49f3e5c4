//! Copy-on-write by column splice (`MERGE` and `UPDATE` that only change columns which neither
//! partition nor sort the table): random statements against an in-memory oracle, with files of
//! several row groups, NULL and NaN values; every data file's manifest metrics checked against
//! what its parquet holds; the fallback to the ordinary rewrite under a small pool.

mod common;

use std::collections::HashMap;

use common::{metric, rows, run_with_metrics, session, session_with_limit, sql};
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
/// counts, and the bounds of `id` and `v`. Returns how many files were checked.
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
            if !e.is_alive() || file.content_type() != DataContentType::Data {
                continue;
            }
            let path = file.file_path().trim_start_matches("file://");
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(path).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap();
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
