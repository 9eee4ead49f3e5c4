//! Merge-on-read reads against an in-memory oracle of the spec's rules: randomly generated
//! tables (several appends, position and equality deletes at interleaved sequence numbers, NULL
//! keys, one- and two-column keys, partitioned and not), read unconstrained and under a small
//! `FairSpillPool` where the equality-delete join must spill.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::common::{render, session, session_with_limit, sql};
use arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{Int32Type, Int64Type};
use datafusion::physical_plan::{collect, ExecutionPlan};
use iceberg::spec::{Literal, Operation, Struct};
use iceberg::table::Table;
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, NewFile, SnapshotChanges};
use iceberg_exec::physical_plan::write::{
    write_deletion_vectors, write_equality_delete_file, write_position_delete_file, DeletionVector,
};
use iceberg_exec::{IcebergSession, MetadataStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Row = (Option<i64>, Option<String>, i32, i64);
type Key = (Option<i64>, Option<String>);

struct DataFile {
    path: String,
    seq: i64,
    part: i32,
    rows: Vec<Row>,
}

struct EqDelete {
    /// Whether the key is (id, k2) rather than (id).
    two_columns: bool,
    keys: HashSet<Key>,
    seq: i64,
    /// `None`: applies in every partition.
    part: Option<i32>,
}

/// The table as the spec says it reads.
#[derive(Default)]
struct Oracle {
    files: Vec<DataFile>,
    positions: HashMap<(String, i64), i64>,
    eq: Vec<EqDelete>,
}

impl Oracle {
    fn live(&self) -> Vec<Row> {
        self.live_at().into_iter().map(|(_, _, r)| r).collect()
    }

    /// Live rows with their file and position.
    fn live_at(&self) -> Vec<(String, i64, Row)> {
        let mut out = vec![];
        for f in &self.files {
            for (i, row) in f.rows.iter().enumerate() {
                let pos_deleted = self
                    .positions
                    .get(&(f.path.clone(), i as i64))
                    .is_some_and(|&seq| seq >= f.seq);
                let eq_deleted = self.eq.iter().any(|e| {
                    e.seq > f.seq
                        && e.part.is_none_or(|p| p == f.part)
                        && e.keys
                            .contains(&(row.0, if e.two_columns { row.1.clone() } else { None }))
                });
                if !pos_deleted && !eq_deleted {
                    out.push((f.path.clone(), i as i64, row.clone()));
                }
            }
        }
        out
    }
}

fn line(r: &Row) -> String {
    format!(
        "{}|{}|{}|{}",
        r.0.map(|v| v.to_string()).unwrap_or_default(),
        r.1.clone().unwrap_or_default(),
        r.2,
        r.3
    )
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

struct Harness {
    session: IcebergSession,
    ident: TableIdent,
    partitioned: bool,
    oracle: Oracle,
    next_v: i64,
    /// The session's `iceberg.planning_threshold` (0: every plan streams its delete manifests).
    planning_threshold: u64,
    /// The table's format version (3: position deletes are deletion vectors).
    version: u8,
}

fn local(path: &str) -> String {
    path.strip_prefix("file://").unwrap_or(path).to_string()
}

fn read_rows(path: &str) -> Vec<Row> {
    let file = std::fs::File::open(local(path)).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut out = vec![];
    for batch in reader {
        let b = batch.unwrap();
        let id = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let k2 = arrow::compute::cast(
            b.column_by_name("k2").unwrap(),
            &arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let k2 = k2.as_string::<i32>();
        let part = b
            .column_by_name("part")
            .unwrap()
            .as_primitive::<Int32Type>();
        let v = b.column_by_name("v").unwrap().as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.push((
                (!id.is_null(i)).then(|| id.value(i)),
                (!k2.is_null(i)).then(|| k2.value(i).to_string()),
                part.value(i),
                v.value(i),
            ));
        }
    }
    out
}

impl Harness {
    async fn new(dir: &std::path::Path, partitioned: bool, limit: Option<usize>) -> Self {
        Self::with_version(dir, partitioned, limit, 2).await
    }

    async fn with_version(
        dir: &std::path::Path,
        partitioned: bool,
        limit: Option<usize>,
        version: u8,
    ) -> Self {
        let session = match limit {
            Some(l) => session_with_limit(dir, l).await,
            None => session(dir).await,
        };
        sql(&session, "CREATE SCHEMA ns").await.unwrap();
        let by = if partitioned {
            " PARTITIONED BY (part)"
        } else {
            ""
        };
        sql(
            &session,
            &format!(
                "CREATE EXTERNAL TABLE ns.t (id BIGINT, k2 VARCHAR, part INT NOT NULL, v BIGINT NOT NULL) \
                 STORED AS ICEBERG LOCATION ''{by} OPTIONS ('write.parquet.row-group-limit' '100', \
                 'format-version' '{version}')"
            ),
        )
        .await
        .unwrap();
        Self {
            session,
            ident: TableIdent::from_strs(["ns", "t"]).unwrap(),
            partitioned,
            oracle: Oracle::default(),
            next_v: 0,
            planning_threshold: iceberg_exec::file_planning::DEFAULT_PLANNING_THRESHOLD,
            version,
        }
    }

    /// Upgrades the table to format v3 in SQL: its position delete files keep applying, new
    /// position deletes are deletion vectors.
    async fn upgrade(&mut self) {
        self.session
            .sql("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3')")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let table = self.table().await;
        assert_eq!(table.metadata().format_version() as u8, 3);
        self.version = 3;
    }

    async fn table(&self) -> Table {
        self.session
            .catalog()
            .load_table(&self.ident)
            .await
            .unwrap()
    }

    fn partition(&self, part: i32) -> Struct {
        if self.partitioned {
            Struct::from_iter([Some(Literal::int(part))])
        } else {
            Struct::empty()
        }
    }

    async fn append(&mut self, rng: &mut StdRng, n: usize, id_domain: i64) {
        let mut values = vec![];
        for _ in 0..n {
            let id = if rng.random_bool(0.1) {
                "NULL".to_string()
            } else {
                rng.random_range(0..id_domain).to_string()
            };
            let k2 = match rng.random_range(0..4) {
                0 => "NULL".to_string(),
                k => format!("'k{k}'"),
            };
            let part = rng.random_range(0..3);
            values.push(format!("({id}, {k2}, {part}, {})", self.next_v));
            self.next_v += 1;
        }
        for chunk in values.chunks(2000) {
            let before: HashSet<String> =
                self.oracle.files.iter().map(|f| f.path.clone()).collect();
            sql(
                &self.session,
                &format!("INSERT INTO ns.t VALUES {}", chunk.join(", ")),
            )
            .await
            .unwrap();
            let table = self.table().await;
            let snapshot = table.metadata().current_snapshot().unwrap().clone();
            let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
                .await
                .unwrap();
            for f in files.into_iter().filter(|f| !before.contains(&f.path)) {
                let rows = read_rows(&f.path);
                let part = rows[0].2;
                assert!(rows.iter().all(|r| !self.partitioned || r.2 == part));
                self.oracle.files.push(DataFile {
                    path: f.path,
                    seq: snapshot.sequence_number(),
                    part,
                    rows,
                });
            }
        }
    }

    /// Appends `n` generated rows in one statement (large tables, quickly).
    async fn append_series(&mut self, n: usize) {
        let before: HashSet<String> = self.oracle.files.iter().map(|f| f.path.clone()).collect();
        let offset = self.next_v;
        sql(
            &self.session,
            &format!(
                "INSERT INTO ns.t SELECT CASE WHEN value % 10 = 0 THEN NULL ELSE value % 5000 END, \
                 CASE WHEN value % 4 = 0 THEN NULL ELSE 'k' || CAST(value % 4 AS VARCHAR) END, \
                 CAST(value % 3 AS INT), value + {offset} FROM generate_series(1, {n})"
            ),
        )
        .await
        .unwrap();
        self.next_v += n as i64 + 1;
        let table = self.table().await;
        let snapshot = table.metadata().current_snapshot().unwrap().clone();
        let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
            .await
            .unwrap();
        for f in files.into_iter().filter(|f| !before.contains(&f.path)) {
            let rows = read_rows(&f.path);
            self.oracle.files.push(DataFile {
                path: f.path,
                seq: snapshot.sequence_number(),
                part: rows[0].2,
                rows,
            });
        }
    }

    async fn commit_deletes(&self, files: Vec<NewFile>) -> i64 {
        let store: Arc<dyn MetadataStore> = self.session.catalog().clone();
        let changes = SnapshotChanges {
            operation: Operation::Delete,
            added_delete_files: files,
            ..Default::default()
        };
        let outcome = commit(store, &self.ident, changes).await.unwrap();
        outcome
            .table
            .metadata()
            .current_snapshot()
            .unwrap()
            .sequence_number()
    }

    /// Deletes a random `fraction` of positions (deleted or not) of random files.
    async fn delete_positions(&mut self, rng: &mut StdRng, fraction: f64) {
        let table = self.table().await;
        let spec_id = table.metadata().default_partition_spec_id();
        let mut by_file: Vec<(i32, String, Vec<i64>)> = vec![];
        for f in &self.oracle.files {
            if !rng.random_bool(0.6) {
                continue;
            }
            let pos: Vec<i64> = (0..f.rows.len() as i64)
                .filter(|_| rng.random_bool(fraction))
                .collect();
            if !pos.is_empty() {
                by_file.push((f.part, f.path.clone(), pos));
            }
        }
        if by_file.is_empty() {
            return;
        }
        if self.version >= 3 {
            return self.delete_with_vectors(rng, by_file).await;
        }
        // Some delete files cover one data file, others every touched file of a partition.
        let mut groups: HashMap<(i32, usize), Vec<(String, i64)>> = HashMap::new();
        for (i, (part, path, pos)) in by_file.iter().enumerate() {
            let scope_part = if self.partitioned { *part } else { 0 };
            let slot = if rng.random_bool(0.5) { i + 1 } else { 0 };
            groups
                .entry((scope_part, slot))
                .or_default()
                .extend(pos.iter().map(|p| (path.clone(), *p)));
        }
        let mut files = vec![];
        for ((part, _), deletes) in groups {
            files.push(
                write_position_delete_file(&table, spec_id, self.partition(part), deletes)
                    .await
                    .unwrap(),
            );
        }
        let seq = self.commit_deletes(files).await;
        for (_, path, pos) in by_file {
            for p in pos {
                self.oracle
                    .positions
                    .entry((path.clone(), p))
                    .or_insert(seq);
            }
        }
    }

    /// Format v3: one deletion vector per touched file, holding its earlier deletes too and
    /// replacing its vector, several vectors to a Puffin file.
    async fn delete_with_vectors(
        &mut self,
        rng: &mut StdRng,
        by_file: Vec<(i32, String, Vec<i64>)>,
    ) {
        let table = self.table().await;
        let spec_id = table.metadata().default_partition_spec_id();
        let snapshot = table.metadata().current_snapshot().unwrap().clone();
        let planned: HashMap<String, iceberg_exec::file_planning::PlannedFile> =
            iceberg_exec::file_planning::plan_files(&table, &snapshot)
                .await
                .unwrap()
                .into_iter()
                .map(|f| (f.path.clone(), f))
                .collect();
        let mut vectors = vec![];
        let mut removed = HashSet::new();
        for (part, path, pos) in &by_file {
            let mut positions: roaring::RoaringTreemap = self
                .oracle
                .positions
                .keys()
                .filter(|(p, _)| p == path)
                .map(|(_, i)| *i as u64)
                .collect();
            positions.extend(pos.iter().map(|p| *p as u64));
            for d in &planned[path].position_deletes {
                if let Some(blob) = d.deletion_vector {
                    removed.insert((d.path.clone(), blob.offset));
                }
            }
            vectors.push(DeletionVector {
                data_file: path.clone(),
                spec_id,
                partition: self.partition(*part),
                positions,
            });
        }
        let split = rng.random_range(0..=vectors.len());
        let mut files = vec![];
        for chunk in [&vectors[..split], &vectors[split..]] {
            files.extend(write_deletion_vectors(&table, chunk).await.unwrap());
        }
        let store: Arc<dyn MetadataStore> = self.session.catalog().clone();
        let changes = SnapshotChanges {
            operation: Operation::Delete,
            added_delete_files: files,
            removed_deletion_vectors: removed,
            ..Default::default()
        };
        let outcome = commit(store, &self.ident, changes).await.unwrap();
        let seq = outcome
            .table
            .metadata()
            .current_snapshot()
            .unwrap()
            .sequence_number();
        for v in vectors {
            for p in v.positions.iter() {
                self.oracle
                    .positions
                    .insert((v.data_file.clone(), p as i64), seq);
            }
        }
    }

    /// Equality-deletes random keys seen in the data (NULLs included) plus `extra` keys that
    /// match nothing.
    async fn delete_keys(
        &mut self,
        rng: &mut StdRng,
        two_columns: bool,
        count: usize,
        extra: usize,
    ) {
        let table = self.table().await;
        let schema = table.metadata().current_schema().clone();
        let id_field = schema.field_by_name("id").unwrap().id;
        let k2_field = schema.field_by_name("k2").unwrap().id;
        let spec_id = table.metadata().default_partition_spec_id();
        let all: Vec<&Row> = self
            .oracle
            .files
            .iter()
            .flat_map(|f| f.rows.iter())
            .collect();
        let mut keys: HashSet<Key> = HashSet::new();
        for _ in 0..count {
            let r = all[rng.random_range(0..all.len())];
            keys.insert((r.0, if two_columns { r.1.clone() } else { None }));
        }
        // Keys no row has: far from the ids (a few single integer keys then spread too wide for
        // an exact key range, and the join probes a hash table) or just below them (a range).
        let far = rng.random_bool(0.5);
        for i in 0..extra {
            let id = if far {
                1_000_000 + i as i64
            } else {
                -1 - i as i64
            };
            keys.insert((Some(id), two_columns.then(|| "zz".to_string())));
        }
        let part = if self.partitioned {
            Some(rng.random_range(0..3))
        } else {
            None
        };
        let keys_vec: Vec<&Key> = keys.iter().collect();
        let n = keys_vec.len();
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter(keys_vec.iter().map(|k| k.0))) as ArrayRef,
            ),
            (
                "k2",
                Arc::new(StringArray::from_iter(keys_vec.iter().map(|k| k.1.clone()))) as ArrayRef,
            ),
            (
                "part",
                Arc::new(Int32Array::from(vec![part.unwrap_or(0); n])) as ArrayRef,
            ),
            ("v", Arc::new(Int64Array::from(vec![0i64; n])) as ArrayRef),
        ])
        .unwrap();
        let ids = if two_columns {
            vec![id_field, k2_field]
        } else {
            vec![id_field]
        };
        let file = write_equality_delete_file(
            &table,
            ids,
            spec_id,
            self.partition(part.unwrap_or(0)),
            &[batch],
        )
        .await
        .unwrap();
        let seq = self.commit_deletes(vec![file]).await;
        self.oracle.eq.push(EqDelete {
            two_columns,
            keys,
            seq,
            part,
        });
    }

    /// A SQL `DELETE` on top of the deletes so far: the rows it removes and the table after it
    /// must be what the spec's reading minus the condition gives. The oracle then follows the
    /// commit: removed files leave it, rewritten ones join with the new sequence number.
    async fn sql_delete(&mut self, rng: &mut StdRng, context: &str) {
        self.sql_change(rng, context, false).await
    }

    /// Like [`Self::sql_delete`], with `UPDATE .. SET v = v + 1000` instead when `update`.
    async fn sql_change(&mut self, rng: &mut StdRng, context: &str, update: bool) {
        type Cond = Box<dyn Fn(&Row) -> bool>;
        let x = rng.random_range(0..40i64);
        let p = rng.random_range(0..3i32);
        let (condition, matches): (String, Cond) = match rng.random_range(0..4) {
            0 => (
                format!("id < {x}"),
                Box::new(move |r: &Row| r.0.is_some_and(|id| id < x)),
            ),
            1 => (format!("part = {p}"), Box::new(move |r: &Row| r.2 == p)),
            2 => (
                "k2 IS NULL OR v % 3 = 0".to_string(),
                Box::new(|r: &Row| r.1.is_none() || r.3 % 3 == 0),
            ),
            _ => (
                format!("id = {x} AND part <> {p}"),
                Box::new(move |r: &Row| r.0 == Some(x) && r.2 != p),
            ),
        };
        // Half of the statements run merge-on-read.
        let mor = rng.random_bool(0.5);
        let mode = if mor {
            "merge-on-read"
        } else {
            "copy-on-write"
        };
        let option = if update { "update_mode" } else { "delete_mode" };
        sql(&self.session, &format!("SET iceberg.{option} = '{mode}'"))
            .await
            .unwrap();
        let doomed: Vec<(String, i64)> = self
            .oracle
            .live_at()
            .into_iter()
            .filter(|(_, _, r)| matches(r))
            .map(|(p, i, _)| (p, i))
            .collect();
        let snapshot_before = self.table().await.metadata().current_snapshot_id();
        let touched: HashSet<String> = doomed.iter().map(|(p, _)| p.clone()).collect();
        let before = self.oracle.live();
        let (statement, expected): (String, Vec<Row>) = if update {
            (
                format!("UPDATE ns.t SET v = v + 1000 WHERE {condition}"),
                before
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        if matches(&r) {
                            r.3 += 1000;
                        }
                        r
                    })
                    .collect(),
            )
        } else {
            (
                format!("DELETE FROM ns.t WHERE {condition}"),
                before.iter().filter(|r| !matches(r)).cloned().collect(),
            )
        };
        let changed = before.iter().filter(|r| matches(r)).count();
        let out = render(&sql(&self.session, &statement).await.unwrap());
        assert_eq!(out, [changed.to_string()], "{context}: {statement} count");
        let statement = format!("{statement} ({mode})");
        let table = self.table().await;
        if let Some(snapshot) = table.metadata().current_snapshot().cloned() {
            if mor && Some(snapshot.snapshot_id()) != snapshot_before {
                // Rows of files that stay are deleted by position.
                for key in doomed {
                    self.oracle
                        .positions
                        .insert(key, snapshot.sequence_number());
                }
            }
            let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
                .await
                .unwrap();
            if mor && Some(snapshot.snapshot_id()) != snapshot_before {
                // Each data file deleted from holds one delete file of its own after the
                // statement (its earlier ones merged in): a deletion vector on v3, a file-scoped
                // position delete file on v2.
                for f in files.iter().filter(|f| touched.contains(&f.path)) {
                    let own: Vec<_> = f
                        .position_deletes
                        .iter()
                        .filter(|d| d.referenced_data_file.as_deref() == Some(f.path.as_str()))
                        .collect();
                    assert_eq!(own.len(), 1, "{context}: {statement}: {}", f.path);
                    assert_eq!(own[0].data_seq, snapshot.sequence_number());
                    if self.version >= 3 {
                        assert!(own[0].deletion_vector.is_some(), "{context}: {statement}");
                        assert_eq!(f.position_deletes.len(), 1, "{context}: {statement}");
                    }
                }
            }
            let live: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
            self.oracle.files.retain(|f| live.contains(f.path.as_str()));
            let known: HashSet<String> = self.oracle.files.iter().map(|f| f.path.clone()).collect();
            for f in files.iter().filter(|f| !known.contains(&f.path)) {
                let rows = read_rows(&f.path);
                self.oracle.files.push(DataFile {
                    path: f.path.clone(),
                    seq: snapshot.sequence_number(),
                    part: rows.first().map_or(0, |r| r.2),
                    rows,
                });
            }
        }
        assert_eq!(
            sorted(self.oracle.live().iter().map(line).collect()),
            sorted(expected.iter().map(line).collect()),
            "{context}: files after {statement}"
        );
    }

    /// Runs `rewrite_data_files` with `options` (`'k', 'v', ..`) in SQL and brings the oracle up
    /// to date: same live rows, the rewritten files replaced by new ones at the data sequence
    /// number of the snapshot the rewrite read.
    async fn compact(&mut self, context: &str, options: &str) {
        let table = self.table().await;
        let Some(base) = table.metadata().current_snapshot().cloned() else {
            return;
        };
        let out = self
            .session
            .sql(&format!(
                "CALL system.rewrite_data_files(table => 'ns.t', options => map({options}))"
            ))
            .await
            .unwrap_or_else(|e| panic!("{context}: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        let out = render(&out);
        let rewritten: usize = out[0].split('|').next().unwrap().parse().unwrap();
        self.resync_after_compaction(context, base.sequence_number(), rewritten > 0)
            .await;
    }

    /// Brings the oracle up to date after a compaction of the table as of a snapshot with
    /// sequence number `base_seq`.
    async fn resync_after_compaction(&mut self, context: &str, base_seq: i64, committed: bool) {
        let before = sorted(self.oracle.live().iter().map(line).collect());
        let table = self.table().await;
        let snapshot = table.metadata().current_snapshot().unwrap().clone();
        if committed {
            assert_eq!(
                snapshot.summary().operation,
                Operation::Replace,
                "{context}"
            );
        }
        let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
            .await
            .unwrap();
        let live: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        self.oracle.files.retain(|f| live.contains(f.path.as_str()));
        let known: HashSet<String> = self.oracle.files.iter().map(|f| f.path.clone()).collect();
        for f in files.iter().filter(|f| !known.contains(&f.path)) {
            assert_eq!(f.data_seq, base_seq, "{context}: {}", f.path);
            // No delete of the table applies to a rewritten file.
            assert!(f.position_deletes.is_empty(), "{context}: {}", f.path);
            let rows = read_rows(&f.path);
            if self.partitioned {
                assert!(rows.iter().all(|r| r.2 == rows[0].2), "{context}");
            }
            self.oracle.files.push(DataFile {
                path: f.path.clone(),
                seq: base_seq,
                part: rows.first().map_or(0, |r| r.2),
                rows,
            });
        }
        assert_eq!(
            sorted(self.oracle.live().iter().map(line).collect()),
            before,
            "{context}: the compaction changed rows"
        );
    }

    /// Runs `rewrite_position_delete_files` in SQL: afterwards each data file has at most one
    /// delete file of its own (a vector on v3) and no delete file applies to nothing.
    async fn rewrite_position_deletes(&self, context: &str) {
        self.session
            .sql("CALL system.rewrite_position_delete_files(table => 'ns.t')")
            .await
            .unwrap_or_else(|e| panic!("{context}: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        let table = self.table().await;
        let snapshot = table.metadata().current_snapshot().unwrap().clone();
        for f in iceberg_exec::file_planning::plan_files(&table, &snapshot)
            .await
            .unwrap()
        {
            assert!(f.position_deletes.len() <= 1, "{context}: {}", f.path);
            for d in &f.position_deletes {
                assert_eq!(
                    d.referenced_data_file.as_deref(),
                    Some(f.path.as_str()),
                    "{context}"
                );
                assert_eq!(d.deletion_vector.is_some(), self.version >= 3, "{context}");
            }
        }
        let (total, applying) = self.delete_files().await;
        assert_eq!(total, applying, "{context}: dangling delete files left");
    }

    /// Delete files in the table, and those of them that apply to some data file.
    async fn delete_files(&self) -> (usize, usize) {
        let table = self.table().await;
        let snapshot = table.metadata().current_snapshot().unwrap();
        let total = snapshot.summary().additional_properties["total-delete-files"]
            .parse()
            .unwrap();
        let scan = iceberg_exec::file_planning::plan_files_pruned(
            &table,
            &iceberg_exec::LocationMap::default(),
            snapshot,
            &iceberg_exec::file_planning::FileFilter::default(),
            u64::MAX,
        )
        .await
        .unwrap();
        (total, scan.delete_file_count())
    }

    /// Checks the whole table, a projection without the key columns, a filter and count(*).
    async fn check(&self, context: &str) {
        let expected: Vec<Row> = self.oracle.live();
        if self.version >= 3 {
            // At most one deletion vector applies to a data file.
            let table = self.table().await;
            if let Some(snapshot) = table.metadata().current_snapshot().cloned() {
                for f in iceberg_exec::file_planning::plan_files(&table, &snapshot)
                    .await
                    .unwrap()
                {
                    let vectors = f
                        .position_deletes
                        .iter()
                        .filter(|d| d.deletion_vector.is_some())
                        .count();
                    assert!(vectors <= 1, "{context}: {} has {vectors} vectors", f.path);
                }
            }
        }
        let got = sorted(render(
            &sql(&self.session, "SELECT id, k2, part, v FROM ns.t")
                .await
                .unwrap(),
        ));
        assert_eq!(
            got,
            sorted(expected.iter().map(line).collect()),
            "{context}"
        );
        let got = sorted(render(
            &sql(&self.session, "SELECT v FROM ns.t WHERE part = 1")
                .await
                .unwrap(),
        ));
        let want = sorted(
            expected
                .iter()
                .filter(|r| r.2 == 1)
                .map(|r| r.3.to_string())
                .collect(),
        );
        assert_eq!(got, want, "{context}: filtered projection");
        let count = render(
            &sql(&self.session, "SELECT count(*) FROM ns.t")
                .await
                .unwrap(),
        );
        assert_eq!(count, [expected.len().to_string()], "{context}: count(*)");
        // The anti-join route of position deletes gives the same rows.
        sql(
            &self.session,
            "SET iceberg.position_delete_join_threshold = 0",
        )
        .await
        .unwrap();
        let joined = sorted(render(
            &sql(&self.session, "SELECT id, k2, part, v FROM ns.t")
                .await
                .unwrap(),
        ));
        sql(
            &self.session,
            "SET iceberg.position_delete_join_threshold = 20000000",
        )
        .await
        .unwrap();
        assert_eq!(
            joined,
            sorted(expected.iter().map(line).collect()),
            "{context}: anti-join route"
        );
        // Both planners plan the same files with the same deletes, with and without a filter,
        // and the bounded one answers as the oracle does.
        self.check_planners(context).await;
        sql(&self.session, "SET iceberg.planning_threshold = 0")
            .await
            .unwrap();
        let streamed = sorted(render(
            &sql(
                &self.session,
                "SELECT id, k2, part, v FROM ns.t WHERE part <> 2",
            )
            .await
            .unwrap(),
        ));
        sql(
            &self.session,
            &format!(
                "SET iceberg.planning_threshold = {}",
                self.planning_threshold
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            streamed,
            sorted(expected.iter().filter(|r| r.2 != 2).map(line).collect()),
            "{context}: bounded planning"
        );
        assert_eq!(
            self.session.memory_pool().reserved(),
            0,
            "{context}: memory released"
        );
    }

    /// Plans the current snapshot in memory and bounded, unfiltered and filtered, and compares
    /// every data file's delete files and the equality deletes of the scan.
    async fn check_planners(&self, context: &str) {
        use datafusion::prelude::{col, lit};
        use iceberg_exec::file_planning::{plan_files_pruned, FileFilter, ScanFiles};
        fn normal(s: ScanFiles) -> (Vec<String>, Vec<String>) {
            let mut files: Vec<String> = s
                .files
                .iter()
                .map(|f| {
                    let mut pos: Vec<&str> =
                        f.position_deletes.iter().map(|d| d.path.as_str()).collect();
                    pos.sort();
                    format!(
                        "{} seq={} rows={} eq={} pos={pos:?}",
                        f.path, f.data_seq, f.record_count, f.equality_deletes
                    )
                })
                .collect();
            files.sort();
            let mut eq: Vec<String> = s.equality_deletes.iter().map(|d| d.path.clone()).collect();
            eq.sort();
            (files, eq)
        }
        let table = self.table().await;
        let Some(snapshot) = table.metadata().current_snapshot().cloned() else {
            return;
        };
        let locations = iceberg_exec::LocationMap::default();
        let schema = table.metadata().current_schema().clone();
        let filters = [
            FileFilter::default(),
            FileFilter::new(&[col("part").eq(lit(1))], &HashSet::new(), schema.clone()),
            FileFilter::new(
                &[col("id").lt(lit(10i64)).or(col("v").gt(lit(400i64)))],
                &HashSet::new(),
                schema,
            ),
        ];
        for filter in filters {
            let in_memory = plan_files_pruned(&table, &locations, &snapshot, &filter, u64::MAX)
                .await
                .unwrap();
            let bounded = plan_files_pruned(&table, &locations, &snapshot, &filter, 0)
                .await
                .unwrap();
            let (bounded, in_memory) = (normal(bounded), normal(in_memory));
            // Identity partition values and column bounds prune the same files in both.
            assert_eq!(
                bounded, in_memory,
                "{context}: planners differ under {:?}",
                filter.exprs
            );
        }
    }
}

async fn random_history(seed: u64, partitioned: bool) {
    random_history_of(seed, partitioned, History::V2, None).await
}

/// The format versions a random history runs through.
#[derive(Debug, Clone, Copy, PartialEq)]
enum History {
    V2,
    V3,
    /// Starts on v2 and is upgraded to v3 halfway.
    Upgraded,
}

async fn random_history_of(seed: u64, partitioned: bool, history: History, limit: Option<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let version = if history == History::V3 { 3 } else { 2 };
    let mut h = Harness::with_version(dir.path(), partitioned, limit, version).await;
    if seed % 2 == 1 {
        // Odd seeds plan everything, DML included, by streaming delete manifests.
        h.planning_threshold = 0;
        sql(&h.session, "SET iceberg.planning_threshold = 0")
            .await
            .unwrap();
    }
    if seed % 3 != 2 {
        // DataFusion splits files (of several row groups each) into byte ranges read by
        // different partitions (scans of more rows than a batch): positions must still count
        // from each file's first row.
        for set in [
            "SET datafusion.optimizer.repartition_file_min_size = 0",
            "SET datafusion.execution.batch_size = 64",
            "SET datafusion.execution.target_partitions = 3",
        ] {
            sql(&h.session, set).await.unwrap();
        }
    }
    let mut rng = StdRng::seed_from_u64(seed);
    h.append(&mut rng, 300, 40).await;
    h.check("first append").await;
    for step in 0..8 {
        let context = format!("seed {seed} partitioned {partitioned} {history:?} step {step}");
        if history == History::Upgraded && step == 4 {
            h.upgrade().await;
            h.check(&format!("{context}: upgraded")).await;
        }
        // Every history ends with a SQL DELETE over all its deletes (UPDATEs come at random).
        let kind = if step == 7 { 4 } else { rng.random_range(0..6) };
        match kind {
            4 => h.sql_delete(&mut rng, &context).await,
            5 => h.sql_change(&mut rng, &context, true).await,
            0 => h.append(&mut rng, 150, 40).await,
            1 => h.delete_positions(&mut rng, 0.15).await,
            2 => h.delete_keys(&mut rng, false, 4, 3).await,
            _ => h.delete_keys(&mut rng, true, 6, 2).await,
        }
        h.check(&context).await;
        if step == 3 {
            // A compaction halfway, with options drawn from a generator of its own.
            let mut options = StdRng::seed_from_u64(seed + 1000);
            let options = [
                "'min-input-files', '2'",
                "'rewrite-all', 'true'",
                "'delete-file-threshold', '1', 'target-file-size-bytes', '4000'",
                "'delete-ratio-threshold', '0.05', 'partial-progress.enabled', 'true', \
                 'max-concurrent-file-group-rewrites', '1'",
                "'min-input-files', '2', 'remove-dangling-deletes', 'true'",
            ][options.random_range(0..5)];
            h.compact(&format!("{context}: compaction ({options})"), options)
                .await;
            if options.contains("remove-dangling-deletes") {
                let (total, applying) = h.delete_files().await;
                assert_eq!(total, applying, "{context}: dangling delete files left");
            }
            h.check(&format!("{context}: compacted")).await;
        }
    }
    // Everything compacted: no delete is left, and the rows are the same.
    let context = format!("seed {seed} partitioned {partitioned} {history:?}: full compaction");
    h.rewrite_position_deletes(&format!("{context}: position deletes rewritten"))
        .await;
    h.check(&format!("{context}: position deletes rewritten"))
        .await;
    let (total, applying) = h.delete_files().await;
    h.compact(&context, "'rewrite-all', 'true'").await;
    // Every delete file that applied went with its data files. (One that applied to nothing
    // stays: e.g. on an upgraded table a v2 position delete file of a data file that also has a
    // deletion vector, which readers then ignore, as the spec says.)
    assert_eq!(h.delete_files().await, (total - applying, 0), "{context}");
    h.check(&context).await;
}

#[tokio::test]
async fn positions_beyond_32_bits_take_the_anti_join_route() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(dir.path(), false, None).await;
    let mut rng = StdRng::seed_from_u64(21);
    h.append(&mut rng, 300, 40).await;
    h.delete_positions(&mut rng, 0.2).await;
    // A delete file naming one real position and one beyond any 32-bit position (legal: it
    // removes nothing). The in-memory lists hold 32-bit positions, so its partition is joined.
    let table = h.table().await;
    let spec_id = table.metadata().default_partition_spec_id();
    let path = h.oracle.files[0].path.clone();
    let file = write_position_delete_file(
        &table,
        spec_id,
        h.partition(0),
        vec![(path.clone(), 2), (path.clone(), (1i64 << 32) + 5)],
    )
    .await
    .unwrap();
    let seq = h.commit_deletes(vec![file]).await;
    h.oracle.positions.entry((path, 2)).or_insert(seq);
    let ctx = h.session.context();
    let plan = ctx
        .sql("SELECT id, k2, part, v FROM ns.t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
    assert_eq!(
        sorted(render(&batches)),
        sorted(h.oracle.live().iter().map(line).collect())
    );
    let mut nodes = vec![];
    find_all(&plan, "PositionalDeleteExec", &mut nodes);
    let m = nodes[0].metrics().unwrap();
    let sum = |name: &str| m.sum_by_name(name).map_or(0, |v| v.as_usize());
    assert!(sum("anti_join_route") > 0, "{m:?}");
    assert_eq!(h.session.memory_pool().reserved(), 0);
    h.check("a position beyond 32 bits").await;
}

#[tokio::test]
async fn deleting_a_partition_drops_its_equality_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(dir.path(), true, None).await;
    let mut rng = StdRng::seed_from_u64(5);
    h.append(&mut rng, 300, 40).await;
    // Partition-scoped equality deletes until one lands in a partition other than 0.
    let mut part = None;
    while part.is_none_or(|p| p == 0) {
        h.delete_keys(&mut rng, false, 4, 3).await;
        part = h.oracle.eq.last().and_then(|e| e.part);
    }
    let part = part.unwrap();
    h.check("before").await;
    let summary = |t: &Table| {
        t.metadata()
            .current_snapshot()
            .unwrap()
            .summary()
            .additional_properties
            .clone()
    };
    let before = summary(&h.table().await);
    let out = render(
        &sql(&h.session, &format!("DELETE FROM ns.t WHERE part = {part}"))
            .await
            .unwrap(),
    );
    let expected: Vec<Row> = h
        .oracle
        .live()
        .into_iter()
        .filter(|r| r.2 != part)
        .collect();
    assert_eq!(out, [(h.oracle.live().len() - expected.len()).to_string()]);
    let after = summary(&h.table().await);
    // Every equality delete file scoped to that partition left with its data files.
    let scoped = h.oracle.eq.iter().filter(|e| e.part == Some(part)).count();
    assert!(scoped >= 1);
    assert_eq!(
        after["removed-equality-delete-files"],
        scoped.to_string(),
        "{after:?}"
    );
    let total = |m: &HashMap<String, String>| m["total-delete-files"].parse::<usize>().unwrap();
    assert_eq!(total(&after), total(&before) - scoped, "{after:?}");
    h.oracle.files.retain(|f| f.part != part);
    h.oracle.eq.retain(|e| e.part != Some(part));
    h.check("after").await;
}

#[tokio::test]
async fn random_histories_unpartitioned() {
    for seed in [1, 2, 3] {
        random_history(seed, false).await;
    }
}

#[tokio::test]
async fn random_histories_v3_with_deletion_vectors() {
    for (seed, partitioned) in [(31, false), (32, true), (33, false)] {
        random_history_of(seed, partitioned, History::V3, None).await;
    }
}

#[tokio::test]
async fn random_histories_upgraded_from_v2_to_v3() {
    for (seed, partitioned) in [(41, true), (42, false)] {
        random_history_of(seed, partitioned, History::Upgraded, None).await;
    }
}

#[tokio::test]
async fn random_histories_v3_under_a_small_pool() {
    for (seed, history) in [(51, History::V3), (52, History::Upgraded)] {
        random_history_of(seed, true, history, Some(4 * 1024 * 1024)).await;
    }
}

#[tokio::test]
async fn random_histories_partitioned() {
    for seed in [11, 12, 13] {
        random_history(seed, true).await;
    }
}

fn find_all<'a>(
    plan: &'a Arc<dyn ExecutionPlan>,
    name: &str,
    out: &mut Vec<&'a Arc<dyn ExecutionPlan>>,
) {
    if plan.name() == name {
        out.push(plan);
    }
    for c in plan.children() {
        find_all(c, name, out);
    }
}

#[tokio::test]
async fn equality_delete_join_spills_under_a_small_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(dir.path(), false, Some(4 * 1024 * 1024)).await;
    let mut rng = StdRng::seed_from_u64(7);
    h.append(&mut rng, 6000, 5000).await;
    h.delete_positions(&mut rng, 0.1).await;
    // 150K deleted keys do not fit in 4 MiB next to everything else: the join goes to disk.
    h.delete_keys(&mut rng, false, 500, 150_000).await;
    h.append(&mut rng, 2000, 5000).await;
    h.delete_keys(&mut rng, true, 300, 20_000).await;

    let ctx = h.session.context();
    // The Grace fanout is a session setting; nonsense is refused.
    for bad in [
        "SET iceberg.equality_delete_fanout = 1",
        "SET iceberg.no_such_option = 1",
    ] {
        let refused = match ctx.sql(bad).await {
            Ok(df) => match df.collect().await {
                Ok(_) => ctx
                    .sql("SELECT count(*) FROM ns.t")
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .err(),
                Err(e) => Some(e),
            },
            Err(e) => Some(e),
        };
        assert!(refused.is_some(), "{bad} was accepted");
    }
    sql(&h.session, "SET iceberg.equality_delete_fanout = 4")
        .await
        .unwrap();
    let plan = ctx
        .sql("SELECT id, k2, part, v FROM ns.t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
    let expected = sorted(h.oracle.live().iter().map(line).collect());
    assert_eq!(sorted(render(&batches)), expected);
    let mut joins = vec![];
    find_all(&plan, "EqualityDeleteExec", &mut joins);
    // One join per equality-id set: (id) and (id, k2).
    assert_eq!(joins.len(), 2);
    let metrics: Vec<_> = joins.iter().map(|j| j.metrics().unwrap()).collect();
    let spills: usize = metrics.iter().map(|m| m.spill_count().unwrap_or(0)).sum();
    let spilled_rows: usize = metrics.iter().map(|m| m.spilled_rows().unwrap_or(0)).sum();
    assert!(spills > 0 && spilled_rows > 0, "no spill: {metrics:?}");
    // Spilled partitions were joined one by one (recursively split when still too large).
    let grace: usize = metrics
        .iter()
        .filter_map(|m| m.sum_by_name("grace_partitions"))
        .map(|v| v.as_usize())
        .sum();
    assert!(grace > 0, "grace partitions: {grace}");
    // The dense position deletes (10%) were marked below the joins, not dropped there: the
    // first join dropped them with its own rows (the answer above is the oracle's).
    let mut positional = vec![];
    find_all(&plan, "PositionalDeleteExec", &mut positional);
    let dense: usize = positional
        .iter()
        .filter_map(|p| p.metrics().unwrap().sum_by_name("dense_delete_files"))
        .map(|v| v.as_usize())
        .sum();
    assert!(dense > 0, "no densely deleted file");
    let explain = render(&sql(&h.session, "EXPLAIN SELECT v FROM ns.t").await.unwrap()).join("\n");
    assert_eq!(explain.matches("fanout=4").count(), 2, "{explain}");
    assert!(
        explain.contains("marks dense deletes in __iceberg_live"),
        "{explain}"
    );
    assert_eq!(h.session.memory_pool().reserved(), 0);
    // The same answers in the other shapes of the query.
    h.check("under 4 MiB").await;
    // A copy-on-write DELETE over these deletes runs in the same pool.
    h.sql_delete(&mut rng, "under 4 MiB").await;
    h.sql_change(&mut rng, "under 4 MiB", true).await;
    h.check("under 4 MiB, after DELETE and UPDATE").await;
}

/// The partitions of a scan with equality deletes, executed one after another (as a receiver
/// across datafusion-ffi, or a worker, may run them): the key table built for the first is
/// let go when it ends, and the second builds it again from the same plan. The delete files are
/// read whole the second time too (a file scan shares a queue of files between its partitions
/// within one execution; it must not be drained by the first build).
#[tokio::test]
async fn equality_deletes_apply_when_partitions_run_one_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(dir.path(), false, None).await;
    let mut rng = StdRng::seed_from_u64(11);
    h.append(&mut rng, 3000, 5000).await;
    h.append(&mut rng, 3000, 5000).await;
    // Position deletes too: the join's input then keeps each partition's own files (a
    // partition run alone does not take its siblings' files), so the later partitions have
    // rows of their own to join.
    h.delete_positions(&mut rng, 0.1).await;
    h.delete_keys(&mut rng, false, 200, 2_000).await;
    h.append(&mut rng, 1000, 5000).await;
    let ctx = h.session.context();
    let plan = ctx
        .sql("SELECT id, k2, part, v FROM ns.t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let partitions = plan.properties().partitioning.partition_count();
    assert!(partitions > 1, "one partition: nothing runs after another");
    let mut batches = vec![];
    for p in 0..partitions {
        let stream = plan.execute(p, ctx.task_ctx()).unwrap();
        batches.extend(
            datafusion::physical_plan::common::collect(stream)
                .await
                .unwrap(),
        );
    }
    let expected = sorted(h.oracle.live().iter().map(line).collect());
    let got = sorted(render(&batches));
    assert_eq!(got.len(), expected.len(), "rows");
    assert!(got == expected, "the rows differ from the oracle's");
}

#[tokio::test]
async fn position_delete_anti_join_spills_under_a_small_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(dir.path(), false, Some(4 * 1024 * 1024)).await;
    let mut rng = StdRng::seed_from_u64(9);
    h.append_series(400_000).await;
    h.delete_positions(&mut rng, 0.9).await;
    h.delete_positions(&mut rng, 0.3).await;
    let deleted = h.oracle.positions.len();
    assert!(deleted > 150_000, "{deleted}");
    let ctx = h.session.context();
    // Every partition takes the anti-join route.
    sql(&h.session, "SET iceberg.position_delete_join_threshold = 0")
        .await
        .unwrap();
    let plan = ctx
        .sql("SELECT id, k2, part, v FROM ns.t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
    assert_eq!(
        sorted(render(&batches)),
        sorted(h.oracle.live().iter().map(line).collect())
    );
    let mut nodes = vec![];
    find_all(&plan, "PositionalDeleteExec", &mut nodes);
    let m = nodes[0].metrics().unwrap();
    let sum = |name: &str| m.sum_by_name(name).map_or(0, |v| v.as_usize());
    assert!(sum("anti_join_route") > 0, "{m:?}");
    assert_eq!(sum("bitmap_route"), 0, "{m:?}");
    assert!(
        sum("anti_join_spill_count") > 0,
        "the sort of deletes did not spill: {m:?}"
    );
    assert_eq!(
        sum("position_deleted_rows") + h.oracle.live().len(),
        h.oracle.files.iter().map(|f| f.rows.len()).sum::<usize>()
    );
    assert_eq!(h.session.memory_pool().reserved(), 0);
    // The default routes the same table through bitmaps, same answer.
    sql(
        &h.session,
        "SET iceberg.position_delete_join_threshold = 20000000",
    )
    .await
    .unwrap();
    h.check("bitmap route under 4 MiB").await;
}

#[tokio::test]
async fn equality_deletes_committed_during_a_compaction_still_apply() {
    use iceberg_exec::maintenance::RewriteDataFiles;
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(dir.path(), true, None).await;
    let mut rng = StdRng::seed_from_u64(77);
    h.append(&mut rng, 300, 40).await;
    h.append(&mut rng, 300, 40).await;
    h.delete_positions(&mut rng, 0.2).await;
    h.delete_keys(&mut rng, false, 4, 3).await;
    h.check("before").await;
    let state = h.session.context().state();
    let store: Arc<dyn MetadataStore> = h.session.catalog().clone();

    // The rewrite reads the table; equality deletes land before it commits. Its files keep the
    // data sequence number of the snapshot it read, so those deletes still apply to them.
    let base_seq = h
        .table()
        .await
        .metadata()
        .current_snapshot()
        .unwrap()
        .sequence_number();
    let planned = RewriteDataFiles::new(Arc::clone(&store), h.ident.clone())
        .option("rewrite-all", "true")
        .plan(&state)
        .await
        .unwrap();
    let live_before = h.oracle.live().len();
    h.delete_keys(&mut rng, true, 6, 2).await;
    h.delete_keys(&mut rng, false, 4, 0).await;
    assert!(h.oracle.live().len() < live_before, "the deletes hit rows");
    let result = planned.execute(&state).await.unwrap();
    assert!(result.rewritten_data_files_count > 0);
    h.resync_after_compaction("compacted", base_seq, true).await;
    h.check("equality deletes from during the compaction").await;
    // Both kept: they apply to the new files.
    let t = h.table().await;
    let summary = &t
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_ne!(summary["total-equality-deletes"], "0", "{summary:?}");

    // Without the starting sequence number the new files would be newer than such deletes:
    // the rewrite must fail instead, and change nothing.
    let planned = RewriteDataFiles::new(Arc::clone(&store), h.ident.clone())
        .option("rewrite-all", "true")
        .option("use-starting-sequence-number", "false")
        .plan(&state)
        .await
        .unwrap();
    h.delete_keys(&mut rng, false, 4, 1).await;
    let snapshot = h.table().await.metadata().current_snapshot_id();
    let err = planned.execute(&state).await.unwrap_err().to_string();
    assert!(err.contains("commit conflict"), "{err}");
    assert_eq!(h.table().await.metadata().current_snapshot_id(), snapshot);
    h.check("after the refused compaction").await;

    // Position deletes for the files it read conflict too.
    let planned = RewriteDataFiles::new(Arc::clone(&store), h.ident.clone())
        .option("rewrite-all", "true")
        .plan(&state)
        .await
        .unwrap();
    h.delete_positions(&mut rng, 0.3).await;
    let err = planned.execute(&state).await.unwrap_err().to_string();
    assert!(err.contains("commit conflict"), "{err}");
    h.check("after a second refused compaction").await;
    assert_eq!(h.session.memory_pool().reserved(), 0);
}

#[tokio::test]
async fn position_deletes_load_before_the_first_batch_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(dir.path(), false, None).await;
    let mut rng = StdRng::seed_from_u64(22);
    h.append(&mut rng, 300, 40).await;
    h.append(&mut rng, 300, 40).await;
    h.delete_positions(&mut rng, 0.2).await;
    assert!(!h.oracle.positions.is_empty());
    let ctx = h.session.context();
    let plan = ctx
        .sql("SELECT id, k2, part, v FROM ns.t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let mut nodes = vec![];
    find_all(&plan, "PositionalDeleteExec", &mut nodes);
    let node = Arc::clone(nodes[0]);
    let read = |node: &Arc<dyn ExecutionPlan>| {
        node.metrics()
            .unwrap()
            .sum_by_name("position_delete_files_read")
            .map_or(0, |v| v.as_usize())
    };
    // Executed, never polled: the delete files are read all the same (as they are while an
    // equality-delete join above reads its keys first).
    let streams: Vec<_> = (0..node.properties().output_partitioning().partition_count())
        .map(|p| node.execute(p, ctx.task_ctx()).unwrap())
        .collect();
    let mut waited = 0;
    while read(&node) == 0 {
        assert!(waited < 2_000, "no delete file read in 20 s without a poll");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 1;
    }
    // Then the rows are the oracle's, and dropping streams leaves nothing reserved.
    let mut batches = vec![];
    for mut s in streams {
        use futures::StreamExt;
        while let Some(b) = s.next().await {
            batches.push(b.unwrap());
        }
    }
    assert_eq!(
        sorted(render(&batches)),
        sorted(h.oracle.live().iter().map(line).collect())
    );
    assert_eq!(h.session.memory_pool().reserved(), 0);
}

#[tokio::test]
async fn position_delete_files_store_positions_delta_encoded() {
    use parquet::basic::Encoding;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE TABLE ns.t (id BIGINT, v VARCHAR)",
        "INSERT INTO ns.t SELECT value AS id, CAST(value AS VARCHAR) AS v FROM generate_series(0, 99999)",
        "SET iceberg.delete_mode = 'merge-on-read'",
        "DELETE FROM ns.t WHERE id % 7 = 2 OR id BETWEEN 500 AND 40000",
    ] {
        sql(&s, q).await.unwrap();
    }
    let deleted = (0..100_000i64)
        .filter(|i| i % 7 == 2 || (500..=40_000).contains(i))
        .count();
    let files: Vec<String> = crate::common::files_under(dir.path())
        .into_iter()
        .filter(|f| f.contains("pos-deletes") && f.ends_with(".parquet"))
        .map(|f| dir.path().join(f).display().to_string())
        .collect();
    assert!(!files.is_empty());
    let (mut rows, mut size) = (0, 0);
    for file in &files {
        size += std::fs::metadata(file).unwrap().len() as usize;
        let reader = SerializedFileReader::new(std::fs::File::open(file).unwrap()).unwrap();
        for group in reader.metadata().row_groups() {
            rows += group.num_rows() as usize;
            for chunk in group.columns() {
                let name = chunk.column_path().string();
                let delta = chunk
                    .encodings()
                    .any(|e| e == Encoding::DELTA_BINARY_PACKED);
                match name.as_str() {
                    // Sorted positions: deltas, no dictionary of values seen once.
                    "pos" => assert!(delta && chunk.dictionary_page_offset().is_none()),
                    // One path repeated: a dictionary.
                    "file_path" => assert!(!delta && chunk.dictionary_page_offset().is_some()),
                    other => panic!("unexpected column {other}"),
                }
            }
        }
    }
    assert_eq!(rows, deleted);
    // Runs of deleted positions cost next to nothing: far below the 8 bytes of a plain position.
    assert!(size < deleted, "{size} bytes for {deleted} positions");
    // Read back (the delete file names its one data file, so its paths are not decoded).
    let want = (100_000 - deleted).to_string();
    assert_eq!(
        crate::common::rows(&s, "SELECT count(*) FROM ns.t").await,
        vec![want.clone()]
    );
    let kept = (0..100_000i64)
        .filter(|i| !(i % 7 == 2 || (500..=40_000).contains(i)))
        .sum::<i64>()
        .to_string();
    assert_eq!(
        crate::common::rows(&s, "SELECT sum(id) FROM ns.t WHERE id % 7 <> 2").await,
        vec![kept]
    );
}
