//! Distributed execution over datafusion-distributed workers (feature `distributed`): a
//! cluster of workers served on 127.0.0.1 runs the same statements as one session, over a
//! table with position deletes, equality deletes and a renamed column, and gives the same
//! answers.
#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use common::{render, sql};
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryConsumer, MemoryPool, MemoryReservation, UnboundedMemoryPool,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use iceberg::spec::{NestedField, Operation, Schema, Struct, TableMetadataBuilder};
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, SnapshotChanges};
use iceberg_exec::commit::{CommitResult, MetadataChange};
use iceberg_exec::distributed::{serve_worker, worker};
use iceberg_exec::physical_plan::write::write_equality_delete_file;
use iceberg_exec::{IcebergSession, MetadataStore, WarehouseConfig};

/// An unbounded pool that counts the consumers registered with it (what a worker ran), and
/// among them the parquet file writers (data files the worker wrote).
#[derive(Debug, Default)]
struct CountingPool {
    inner: UnboundedMemoryPool,
    registered: AtomicUsize,
    writers: AtomicUsize,
    /// Position delete writers (merge-on-read pass 1 in the worker's tasks).
    delete_writers: AtomicUsize,
    /// Every consumer's name, as registered.
    names: std::sync::Mutex<Vec<String>>,
}

impl CountingPool {
    /// How many consumers named `name` (or `name[...]`) registered.
    fn named(&self, name: &str) -> usize {
        self.names
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n.as_str() == name || n.starts_with(&format!("{name}[")))
            .count()
    }
}

impl std::fmt::Display for CountingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "counting")
    }
}

impl MemoryPool for CountingPool {
    fn name(&self) -> &str {
        "counting"
    }
    fn register(&self, consumer: &MemoryConsumer) {
        self.registered.fetch_add(1, Ordering::Relaxed);
        if consumer.name().starts_with("ParquetFileWriter") {
            self.writers.fetch_add(1, Ordering::Relaxed);
        }
        self.names.lock().unwrap().push(consumer.name().to_string());
        if consumer.name().starts_with("PositionDeleteWriterExec") {
            self.delete_writers.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.register(consumer)
    }
    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }
    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional)
    }
    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink)
    }
    fn try_grow(
        &self,
        reservation: &MemoryReservation,
        additional: usize,
    ) -> datafusion::error::Result<()> {
        self.inner.try_grow(reservation, additional)
    }
    fn reserved(&self) -> usize {
        self.inner.reserved()
    }
}

/// A [`FairSpillPool`] that also keeps the bytes each consumer holds, by consumer name, so a
/// test can tell this crate's reservations from the transport's.
#[derive(Debug)]
struct ByNamePool {
    inner: FairSpillPool,
    held: std::sync::Mutex<std::collections::HashMap<usize, (String, usize)>>,
}

impl ByNamePool {
    fn new(size: usize) -> Self {
        Self {
            inner: FairSpillPool::new(size),
            held: Default::default(),
        }
    }

    fn add(&self, reservation: &MemoryReservation, bytes: isize) {
        let consumer = reservation.consumer();
        let mut held = self.held.lock().unwrap();
        let entry = held
            .entry(consumer.id())
            .or_insert_with(|| (consumer.name().to_string(), 0));
        entry.1 = entry.1.checked_add_signed(bytes).unwrap();
    }

    /// The consumers holding memory now, with their bytes.
    fn holders(&self) -> Vec<(String, usize)> {
        let mut held: Vec<_> = self
            .held
            .lock()
            .unwrap()
            .values()
            .filter(|(_, n)| *n > 0)
            .cloned()
            .collect();
        held.sort();
        held
    }
}

impl std::fmt::Display for ByNamePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "by-name({})", self.inner)
    }
}

impl MemoryPool for ByNamePool {
    fn name(&self) -> &str {
        "by-name"
    }
    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }
    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }
    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.add(reservation, additional as isize);
    }
    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        self.add(reservation, -(shrink as isize));
    }
    fn try_grow(
        &self,
        reservation: &MemoryReservation,
        additional: usize,
    ) -> datafusion::error::Result<()> {
        self.inner.try_grow(reservation, additional)?;
        self.add(reservation, additional as isize);
        Ok(())
    }
    fn reserved(&self) -> usize {
        self.inner.reserved()
    }
}

/// `n` workers on 127.0.0.1, each on its own free port, with the pools they run in.
async fn cluster(n: usize) -> (Vec<url::Url>, Vec<Arc<CountingPool>>) {
    let mut urls = vec![];
    let mut pools = vec![];
    for _ in 0..n {
        let pool = Arc::new(CountingPool::default());
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool) as Arc<dyn MemoryPool>)
            .build_arc()
            .unwrap();
        let (url, _server) = serve_worker(worker(runtime), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        urls.push(url);
        pools.push(pool);
    }
    (urls, pools)
}

/// Renames column `from` to `to` (same field id), as schema evolution does.
async fn rename_column(session: &IcebergSession, ident: &TableIdent, from: &str, to: &str) {
    let table = session.catalog().load_table(ident).await.unwrap();
    let metadata = table.metadata();
    let current = metadata.current_schema();
    let fields: Vec<_> = current
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            let mut f = f.as_ref().clone();
            if f.name == from {
                f.name = to.to_string();
            }
            Arc::new(f)
        })
        .collect::<Vec<Arc<NestedField>>>();
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_fields(fields)
        .build()
        .unwrap();
    let built = TableMetadataBuilder::new_from_metadata(metadata.clone(), None)
        .add_current_schema(schema)
        .unwrap()
        .build()
        .unwrap();
    let store: Arc<dyn MetadataStore> = session.catalog().clone();
    let change = MetadataChange {
        base: table.clone(),
        metadata: built.metadata,
        updates: built.changes,
        requirements: vec![],
    };
    assert!(matches!(
        store.commit_metadata(ident, change).await.unwrap(),
        CommitResult::Committed(_)
    ));
}

/// Equality deletes of `k` in `keys`, committed as their own snapshot.
async fn delete_keys(session: &IcebergSession, ident: &TableIdent, keys: &[i64]) {
    let table = session.catalog().load_table(ident).await.unwrap();
    let schema = table.metadata().current_schema().clone();
    let k = schema.field_by_name("k").unwrap().id;
    let n = keys.len();
    let batch = RecordBatch::try_from_iter(
        schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| {
                let values: Vec<i64> = match f.name.as_str() {
                    "k" => keys.to_vec(),
                    _ => vec![0; n],
                };
                (
                    f.name.clone(),
                    Arc::new(Int64Array::from(values)) as ArrayRef,
                )
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let spec_id = table.metadata().default_partition_spec_id();
    let file = write_equality_delete_file(&table, vec![k], spec_id, Struct::empty(), &[batch])
        .await
        .unwrap();
    let store: Arc<dyn MetadataStore> = session.catalog().clone();
    commit(
        store,
        ident,
        SnapshotChanges {
            operation: Operation::Delete,
            added_delete_files: vec![file],
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A session on a fresh warehouse in `dir` with the table `ns.t (id, k, v)`: ids
/// `1..=inserts * rows` appended by `inserts` statements, `k = id % modulus`, `v = id * scale`.
async fn table(
    dir: &std::path::Path,
    inserts: i64,
    rows: i64,
    modulus: i64,
    scale: i64,
) -> IcebergSession {
    let s = common::session(dir).await;
    sql(&s, "CREATE SCHEMA ns").await.unwrap();
    sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, k BIGINT, v BIGINT) STORED AS ICEBERG \
         LOCATION ''",
    )
    .await
    .unwrap();
    for part in 0..inserts {
        sql(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value AS id, value % {modulus} AS k, value * {scale} AS v \
                 FROM generate_series({}, {})",
                part * rows + 1,
                (part + 1) * rows
            ),
        )
        .await
        .unwrap();
    }
    s
}

/// The data files of `ns.t`'s current snapshot, with the deletes that apply to them.
async fn planned_files(session: &IcebergSession) -> Vec<iceberg_exec::file_planning::PlannedFile> {
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = session.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await
        .unwrap()
}

/// Asserts that each of `files` has at most one position delete file, which names it.
fn one_delete_file_each(files: &[iceberg_exec::file_planning::PlannedFile], context: &str) {
    for f in files {
        assert!(f.position_deletes.len() <= 1, "{context}: {f:?}");
        for d in &f.position_deletes {
            assert_eq!(d.referenced_data_file.as_deref(), Some(f.path.as_str()));
            assert_eq!(d.partition, f.partition, "{context}");
        }
    }
}

async fn rows(session: &IcebergSession, query: &str) -> Vec<String> {
    render(
        &sql(session, query)
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}")),
    )
}

/// A session on a fresh warehouse in `dir` with `ns.t` (ids 1..=120000 in 6 files, `k = id %
/// 97`, `v = 3 id`) after a merge-on-read DELETE of the multiples of 7, equality deletes of keys
/// 3, 50 and 96, and `v` renamed `w`.
async fn table_with_deletes(dir: &std::path::Path) -> IcebergSession {
    let single = table(dir, 6, 20_000, 97, 3).await;
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    sql(&single, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&single, "DELETE FROM ns.t WHERE id % 7 = 0")
        .await
        .unwrap();
    delete_keys(&single, &ident, &[3, 50, 96]).await;
    rename_column(&single, &ident, "v", "w").await;
    single
}

/// Reads of [`table_with_deletes`]: count, group by, order by, the renamed column.
const READS: [&str; 4] = [
    "SELECT count(*), sum(w) FROM ns.t",
    "SELECT k, count(*), sum(w) FROM ns.t GROUP BY k ORDER BY k",
    "SELECT id, k, w FROM ns.t WHERE id > 1000 ORDER BY w DESC LIMIT 5",
    "SELECT count(*) FROM ns.t WHERE k IN (3, 50, 96) OR id % 7 = 0",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_two_workers_reads_like_one_session() {
    let dir = tempfile::tempdir().unwrap();
    let single = table_with_deletes(dir.path()).await;

    let (urls, pools) = cluster(2).await;
    let distributed = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap()
        .with_workers(urls);
    // Small tables: a task per 64 KiB of data files, so that stages run on both workers.
    sql(
        &distributed,
        "SET distributed.file_scan_config_bytes_per_partition = 65536",
    )
    .await
    .unwrap();

    // Oracle: ids 1..=120000, without multiples of 7 and keys 3, 50, 96.
    let live = (1..=120_000i64).filter(|id| id % 7 != 0 && ![3, 50, 96].contains(&(id % 97)));
    let (count, sum) = live.fold((0i64, 0i64), |(c, s), id| (c + 1, s + id * 3));
    let queries = READS;
    for q in queries {
        assert_eq!(rows(&distributed, q).await, rows(&single, q).await, "{q}");
    }
    assert_eq!(rows(&single, queries[0]).await, [format!("{count}|{sum}")]);
    assert_eq!(rows(&single, queries[3]).await, ["0"]);

    // The plan (as the session's query planner makes it: EXPLAIN shows the local plan) has
    // its scan in a stage of more than one task.
    for q in queries {
        let plan = distributed
            .context()
            .sql(q)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let shown = datafusion_distributed::display_plan_ascii(plan.as_ref(), false);
        assert!(
            shown.contains("PositionalDeleteExec") && shown.contains("EqualityDeleteExec"),
            "{q}:\n{shown}"
        );
        // Dense position deletes (1 in 7) are marked for the join, on the workers too (the
        // codec carries the live column).
        assert!(
            shown.contains("marks dense deletes in __iceberg_live"),
            "{q}:\n{shown}"
        );
        assert!(
            stage_of_tasks(&shown),
            "{q}: expected a stage of several tasks:\n{shown}"
        );
        // EXPLAIN through the session shows the same distributed plan, without running it.
        let explained = distributed
            .sql(&format!("EXPLAIN {q}"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = render(&explained).join("\n");
        assert!(text.contains("distributed_plan"), "{q}:\n{text}");
        assert!(
            stage_of_tasks(&text),
            "{q}: EXPLAIN shows no stage of tasks:\n{text}"
        );
    }
    // Metadata tables answer in a distributed session as in one session.
    for q in [
        "SELECT content, count(*), sum(record_count) FROM ns.t$files GROUP BY content ORDER BY content",
        "SELECT count(*) FROM ns.t$snapshots",
        "SELECT sum(added_data_files_count) FROM ns.t$all_manifests",
    ] {
        assert_eq!(rows(&distributed, q).await, rows(&single, q).await, "{q}");
    }
    // Both workers ran tasks of the stages (their operators reserved memory there).
    for (i, pool) in pools.iter().enumerate() {
        assert!(
            pool.registered.load(Ordering::Relaxed) > 0,
            "worker {i} ran nothing"
        );
        assert_eq!(pool.reserved(), 0, "worker {i}");
    }
}

/// Whether the plan shows a stage of more than one task.
fn stage_of_tasks(plan: &str) -> bool {
    plan.split("tasks=").skip(1).any(|rest| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            > Some(1)
    })
}

/// A plan through bytes and back with the codec: it displays the same and returns the same
/// rows as before.
async fn round_trip(session: &IcebergSession, query: &str) {
    use datafusion::physical_plan::{collect, displayable};
    use datafusion_proto::bytes::{
        physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
    };
    use iceberg_exec::distributed::IcebergPhysicalCodec;

    let plan = session
        .context()
        .sql(query)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let codec = IcebergPhysicalCodec;
    let bytes = physical_plan_to_bytes_with_extension_codec(Arc::clone(&plan), &codec).unwrap();
    let task = session.context().task_ctx();
    let decoded = physical_plan_from_bytes_with_extension_codec(&bytes, &task, &codec).unwrap();
    let shown = |p: &Arc<dyn datafusion::physical_plan::ExecutionPlan>| {
        displayable(p.as_ref()).indent(false).to_string()
    };
    assert_eq!(shown(&decoded), shown(&plan), "{query}");
    let before = render(&collect(plan, Arc::clone(&task)).await.unwrap());
    let after = render(&collect(decoded, task).await.unwrap());
    assert!(!before.is_empty(), "{query}");
    assert_eq!(after, before, "{query}");
}

#[tokio::test]
async fn plans_with_deletes_and_a_renamed_column_survive_the_codec() {
    let dir = tempfile::tempdir().unwrap();
    let s = table(dir.path(), 3, 1000, 11, 1).await;
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    // Plain files first: the scan's own parquet child.
    round_trip(&s, "SELECT k, sum(v) FROM ns.t GROUP BY k ORDER BY k").await;
    sql(&s, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&s, "DELETE FROM ns.t WHERE id % 5 = 0").await.unwrap();
    delete_keys(&s, &ident, &[4]).await;
    rename_column(&s, &ident, "v", "w").await;
    // The renamed column reads by field id: without the adapter it would be NULL.
    round_trip(
        &s,
        "SELECT k, count(*), sum(w) FROM ns.t GROUP BY k ORDER BY k",
    )
    .await;
    round_trip(&s, "SELECT id, w FROM ns.t WHERE w > 2990 ORDER BY id").await;
    assert_eq!(
        rows(&s, "SELECT count(*), count(w) FROM ns.t WHERE k = 4").await,
        ["0|0"]
    );
}

#[tokio::test]
async fn a_change_and_its_writer_survive_the_codec_and_report_their_counts() {
    use datafusion::common::DFSchema;
    use datafusion::physical_plan::{collect, displayable, ExecutionPlan};
    use datafusion::prelude::{col, lit};
    use datafusion_proto::bytes::{
        physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
    };
    use iceberg_exec::distributed::IcebergPhysicalCodec;
    use iceberg_exec::physical_plan::change_rows::{ChangeCounts, ChangeRowsExec, RowChange};
    use iceberg_exec::physical_plan::write::{DataFileWriterExec, WrittenFiles};

    let dir = tempfile::tempdir().unwrap();
    let s = table(dir.path(), 3, 1000, 11, 1).await;
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let scan = s
        .context()
        .sql("SELECT id, k, v FROM ns.t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let df_schema = DFSchema::try_from(scan.schema().as_ref().clone()).unwrap();
    let state = s.context().state();
    let expr = |e| state.create_physical_expr(e, &df_schema).unwrap();
    let condition = expr((col("id") % lit(3i64)).eq(lit(0i64)));
    for (change, written_rows) in [
        (RowChange::Delete, 2000usize),
        (RowChange::Update(vec![(2, expr(-col("v")))]), 3000),
        (
            RowChange::UpdateSelected(vec![(2, expr(col("v") + lit(1i64)))]),
            1000,
        ),
    ] {
        let counts = Arc::new(ChangeCounts::default());
        let change = Arc::new(
            ChangeRowsExec::try_new(
                Arc::clone(&scan),
                Arc::clone(&condition),
                change,
                Arc::clone(&counts),
            )
            .unwrap(),
        );
        let plan: Arc<dyn ExecutionPlan> = Arc::new(
            DataFileWriterExec::try_new(change, table.clone(), None, WrittenFiles::default())
                .unwrap()
                .with_local_sort(true)
                .with_tally(counts),
        );
        let codec = IcebergPhysicalCodec;
        let bytes = physical_plan_to_bytes_with_extension_codec(Arc::clone(&plan), &codec).unwrap();
        let task = s.context().task_ctx();
        let decoded = physical_plan_from_bytes_with_extension_codec(&bytes, &task, &codec).unwrap();
        let shown = |p: &Arc<dyn ExecutionPlan>| displayable(p.as_ref()).indent(false).to_string();
        assert_eq!(shown(&decoded), shown(&plan));
        // The decoded writer reports the counts of the decoded change below it: one tally row
        // (spec id -1) among the data file rows, of every row read and the third selected.
        let out = collect(decoded, task).await.unwrap();
        let mut tallies = vec![];
        let mut files_rows = 0;
        for batch in &out {
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int32Array>()
                .unwrap();
            let json = batch
                .column(1)
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .unwrap();
            for i in 0..batch.num_rows() {
                let value: serde_json::Value = serde_json::from_str(json.value(i)).unwrap();
                match ids.value(i) {
                    -1 => {
                        tallies.push((value["rows_read"].as_u64(), value["rows_selected"].as_u64()))
                    }
                    _ => {
                        // A file: its manifest entry's JSON, beside its NaN partition fields.
                        let entry: serde_json::Value =
                            serde_json::from_str(value["file"].as_str().unwrap()).unwrap();
                        files_rows += entry["record_count"].as_u64().unwrap() as usize
                    }
                }
            }
        }
        assert_eq!(tallies, [(Some(3000), Some(1000))]);
        assert_eq!(files_rows, written_rows);
    }
}

#[tokio::test]
async fn logical_plans_over_iceberg_tables_survive_the_logical_codec() {
    use datafusion::logical_expr::LogicalPlan;
    use datafusion_proto::bytes::{
        logical_plan_from_bytes_with_extension_codec, logical_plan_to_bytes_with_extension_codec,
    };
    use iceberg_exec::distributed::IcebergLogicalCodec;

    let dir = tempfile::tempdir().unwrap();
    let s = table(dir.path(), 3, 1000, 11, 1).await;
    let first = rows(
        &s,
        "SELECT snapshot_id FROM iceberg_snapshots('ns.t') ORDER BY sequence_number LIMIT 1",
    )
    .await
    .remove(0);
    sql(&s, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&s, "DELETE FROM ns.t WHERE id % 5 = 0").await.unwrap();
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let codec = IcebergLogicalCodec::with_store(store);
    let plan_of = |q: String| {
        let s = s.clone();
        async move { s.context().sql(&q).await.unwrap().logical_plan().clone() }
    };
    let through = |plan: &LogicalPlan, codec: &IcebergLogicalCodec| {
        let bytes = logical_plan_to_bytes_with_extension_codec(plan, codec).unwrap();
        logical_plan_from_bytes_with_extension_codec(&bytes, &s.context().task_ctx(), codec)
            .unwrap()
    };
    let run = |plan: LogicalPlan| {
        let s = s.clone();
        async move {
            render(
                &s.context()
                    .execute_logical_plan(plan)
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap(),
            )
        }
    };
    // The current table (with its position deletes) and a pinned past snapshot (one insert,
    // no deletes) read the same after decoding, and differently from each other.
    let current = "SELECT k, count(*), sum(v) FROM ns.t GROUP BY k ORDER BY k".to_string();
    let pinned =
        format!("SELECT count(*), sum(v) FROM iceberg_scan('ns.t', 'snapshot_id', {first})");
    for q in [current.clone(), pinned.clone()] {
        let plan = plan_of(q.clone()).await;
        let decoded = through(&plan, &codec);
        assert_eq!(
            format!("{}", decoded.display_indent()),
            format!("{}", plan.display_indent())
        );
        assert_eq!(run(decoded).await, run(plan).await, "{q}");
    }
    assert_eq!(rows(&s, &pinned).await, ["1000|500500"]);
    assert_eq!(rows(&s, "SELECT count(*) FROM ns.t").await, ["2400"]);

    // A DELETE shipped as a logical plan commits through the receiving side's catalog.
    let delete = plan_of("DELETE FROM ns.t WHERE k = 3".to_string()).await;
    assert_eq!(run(through(&delete, &codec)).await, ["218"]);
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.t WHERE k = 3").await,
        ["0"]
    );
    // Without a catalog there, the decoded table is read-only: the DELETE fails, nothing
    // changes.
    let delete = plan_of("DELETE FROM ns.t WHERE k = 4".to_string()).await;
    let decoded = through(&delete, &IcebergLogicalCodec::default());
    let err = s
        .context()
        .execute_logical_plan(decoded)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("read-only"), "{err}");
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.t WHERE k = 4").await,
        ["218"]
    );
    // Other crates' tables are refused.
    let mem = datafusion::datasource::MemTable::try_new(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![vec![]],
    )
    .unwrap();
    let plan = datafusion::logical_expr::LogicalPlanBuilder::scan(
        "mem",
        datafusion::datasource::provider_as_source(Arc::new(mem)),
        None,
    )
    .unwrap()
    .build()
    .unwrap();
    let err = logical_plan_to_bytes_with_extension_codec(&plan, &codec).unwrap_err();
    assert!(err.to_string().contains("does not encode table"), "{err}");
}

#[test]
fn the_codec_refuses_nodes_it_does_not_know() {
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion_proto::physical_plan::{DefaultPhysicalProtoConverter, PhysicalExtensionCodec};
    use iceberg_exec::distributed::IcebergPhysicalCodec;

    let node = Arc::new(EmptyExec::new(Arc::new(arrow::datatypes::Schema::empty())));
    let err = IcebergPhysicalCodec
        .try_encode(node, &mut vec![], &DefaultPhysicalProtoConverter {})
        .unwrap_err();
    assert!(
        matches!(err, datafusion::error::DataFusionError::NotImplemented(_)),
        "{err}"
    );
    let task = datafusion::execution::TaskContext::default();
    let err = IcebergPhysicalCodec
        .try_decode(b"{}", &[], &task, &DefaultPhysicalProtoConverter {})
        .unwrap_err();
    assert!(
        matches!(err, datafusion::error::DataFusionError::NotImplemented(_)),
        "{err}"
    );
}

/// A worker process, killed when dropped.
struct WorkerProcess(std::process::Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `iceberg-exec worker` on a free port of 127.0.0.1; returns it and its URL.
fn worker_process(warehouse: &std::path::Path) -> (WorkerProcess, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .args(["--warehouse", warehouse.to_str().unwrap()])
        .args(["worker", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let process = WorkerProcess(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line of a worker: {line:?}"))
        .to_string();
    (process, url)
}

/// `iceberg-exec sql` on `warehouse` (over `workers` when given): stdout, or the failure.
fn cli_sql(warehouse: &std::path::Path, workers: Option<&str>, statements: &str) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_iceberg-exec"));
    cmd.args([
        "--warehouse",
        warehouse.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    if let Some(w) = workers {
        cmd.args(["--workers", w]);
    }
    let out = cmd.args(["sql", statements]).output().unwrap();
    assert!(
        out.status.success(),
        "{statements}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_cli_over_two_worker_processes_answers_like_the_cli_alone() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path();
    let setup = "CREATE SCHEMA ns; \
         CREATE TABLE ns.t AS SELECT value AS id, value % 13 AS k FROM generate_series(1, 50000); \
         INSERT INTO ns.t SELECT value AS id, value % 13 AS k FROM generate_series(50001, 90000); \
         SET iceberg.delete_mode = 'merge-on-read'; \
         DELETE FROM ns.t WHERE id % 9 = 0";
    cli_sql(warehouse, None, setup);
    let (_w1, u1) = worker_process(warehouse);
    let (_w2, u2) = worker_process(warehouse);
    let workers = format!("{u1},{u2}");
    let query = "SELECT k, count(*) AS n, sum(id) AS s FROM ns.t GROUP BY k ORDER BY k; \
                 SELECT count(*) AS n FROM ns.t WHERE id % 9 = 0";
    let alone = cli_sql(warehouse, None, query);
    // Small tasks, so that both workers get some.
    let over = cli_sql(
        warehouse,
        Some(&workers),
        &format!("SET distributed.file_scan_config_bytes_per_partition = 4096; {query}"),
    );
    assert_eq!(over, alone);
    // 13 groups, and the deleted rows stay deleted.
    assert!(alone.contains("n\n0\n"), "{alone}");
    assert_eq!(
        alone.lines().filter(|l| l.contains(',')).count(),
        14,
        "{alone}"
    );

    // Writes: the same statements on a second warehouse made the same way, alone and over
    // the workers, answer the same and leave the same table.
    let copy = tempfile::tempdir().unwrap();
    cli_sql(copy.path(), None, setup);
    let writes = "SET iceberg.delete_mode = 'copy-on-write'; \
                  DELETE FROM ns.t WHERE id % 11 = 0; \
                  SET iceberg.update_mode = 'merge-on-read'; \
                  UPDATE ns.t SET k = k + 100 WHERE id % 4 = 0; \
                  INSERT INTO ns.t SELECT id + 100000 AS id, k FROM ns.t WHERE k = 5";
    let alone = cli_sql(warehouse, None, &format!("{writes}; {query}"));
    let over = cli_sql(
        copy.path(),
        Some(&workers),
        &format!("SET distributed.file_scan_config_bytes_per_partition = 4096; {writes}; {query}"),
    );
    assert_eq!(over, alone);
    // 13 old groups and 13 updated ones.
    assert_eq!(
        alone.lines().filter(|l| l.contains(',')).count(),
        27,
        "{alone}"
    );
}

/// The summary of the current snapshot, without sizes, times and counts of written files.
async fn summary(session: &IcebergSession) -> Vec<(String, String)> {
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = session.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let mut out: Vec<(String, String)> = snapshot
        .summary()
        .additional_properties
        .iter()
        // How many files the writers split new rows into depends on the parallel writers'
        // timing and on how many writers there are (one session's or the workers' tasks):
        // the data file counts, and so those a later statement removes, are not compared.
        .filter(|(k, _)| !k.contains("size") && !k.contains("time") && !k.ends_with("data-files"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.push((
        "operation".into(),
        format!("{:?}", snapshot.summary().operation),
    ));
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_in_a_distributed_session_commit_what_one_session_commits() {
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let single = table(one.path(), 4, 10_000, 31, 2).await;
    drop(table(many.path(), 4, 10_000, 31, 2).await);
    let (urls, pools) = cluster(2).await;
    let distributed = IcebergSession::open(WarehouseConfig::local(many.path()))
        .await
        .unwrap()
        .with_workers(urls);
    sql(
        &distributed,
        "SET distributed.file_scan_config_bytes_per_partition = 16384",
    )
    .await
    .unwrap();
    // Each statement, whether it writes data files from the table's rows and whether it writes
    // position deletes, which the workers then write.
    let steps = [
        ("SET iceberg.delete_mode = 'merge-on-read'", false, false),
        ("DELETE FROM ns.t WHERE id % 5 = 0", false, true),
        ("SET iceberg.update_mode = 'merge-on-read'", false, false),
        ("UPDATE ns.t SET v = v + 1 WHERE k = 3", true, true),
        // Its rows are in files with deletes of the two statements before: merged into one.
        ("DELETE FROM ns.t WHERE id % 3 = 0", false, true),
        ("SET iceberg.delete_mode = 'copy-on-write'", false, false),
        ("DELETE FROM ns.t WHERE id % 7 = 0", true, false),
        ("SET iceberg.update_mode = 'copy-on-write'", false, false),
        ("UPDATE ns.t SET v = -v WHERE k = 4", true, false),
        ("INSERT INTO ns.t SELECT value AS id, value % 31 AS k, 1 AS v FROM generate_series(40001, 45000)", false, false),
        // Rows read from the table itself: the scan below the writer has several tasks.
        ("INSERT INTO ns.t SELECT id + 100000 AS id, k, v FROM ns.t WHERE k < 10", true, false),
        // MERGE's first pass (join, clauses, writers) runs in the workers' tasks.
        ("MERGE INTO ns.t AS t USING (SELECT value AS id, 7 AS v FROM generate_series(39001, 41000)) AS s \
          ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v \
          WHEN NOT MATCHED THEN INSERT (id, k, v) VALUES (s.id, 0, s.v)", true, false),
        // The table replaced by its own rows, read and written in the workers' tasks.
        ("INSERT OVERWRITE ns.t SELECT id, k, v + 1 FROM ns.t WHERE k <> 2", true, false),
    ];
    let statements: Vec<&str> = steps.iter().map(|(s, _, _)| *s).collect();
    let check = "SELECT count(*), sum(v), sum(k), min(v), max(id) FROM ns.t";
    let written = || -> usize {
        pools
            .iter()
            .map(|p| p.writers.load(Ordering::Relaxed))
            .sum()
    };
    let delete_writers = || -> usize {
        pools
            .iter()
            .map(|p| p.delete_writers.load(Ordering::Relaxed))
            .sum()
    };
    for (statement, writes_data, writes_deletes) in steps {
        let before = written();
        let deletes_before = delete_writers();
        assert_eq!(
            rows(&distributed, statement).await,
            rows(&single, statement).await,
            "{statement}"
        );
        if writes_data {
            assert!(written() > before, "no worker wrote a file for {statement}");
        }
        if writes_deletes {
            assert!(
                delete_writers() > deletes_before,
                "no worker wrote position deletes for {statement}"
            );
            // However the tasks received the positions: one delete file per data file, which
            // names it, holding all of its deletes.
            let files = planned_files(&distributed).await;
            assert!(files.iter().any(|f| !f.position_deletes.is_empty()));
            one_delete_file_each(&files, statement);
        }
        assert_eq!(
            rows(&distributed, check).await,
            rows(&single, check).await,
            "after {statement}"
        );
        if !statement.starts_with("SET") {
            // A copy-on-write MERGE rewrites the files its matches fall in: how many rows those
            // hold depends on how earlier writers split rows into files.
            // Likewise, how many delete files a statement adds and removes depends on how many
            // data files its matches fall in (one delete file each, checked above).
            let layout_free = |mut summary: Vec<(String, String)>| {
                if statement.starts_with("MERGE") {
                    summary.retain(|(k, _)| k != "added-records" && k != "deleted-records");
                }
                summary.retain(|(k, _)| !k.ends_with("delete-files"));
                summary
            };
            assert_eq!(
                layout_free(summary(&distributed).await),
                layout_free(summary(&single).await),
                "{statement}"
            );
        }
    }
    // An overwrite by filter: its removal reads and rewrites the files the filter matches in
    // part, and its new rows are written, in the workers' tasks.
    let before = written();
    for s in [&distributed, &single] {
        let data = s
            .context()
            .sql("SELECT id + 300000 AS id, k, v FROM ns.t WHERE k = 6 AND id % 2 = 0")
            .await
            .unwrap();
        let filter = datafusion::prelude::col("k").eq(datafusion::prelude::lit(6i64));
        let answer = s.overwrite("ns.t", data, Some(filter)).await.unwrap();
        answer.collect().await.unwrap();
    }
    assert!(
        written() > before,
        "no worker wrote a file for the overwrite"
    );
    assert_eq!(rows(&distributed, check).await, rows(&single, check).await);
    assert_eq!(summary(&distributed).await, summary(&single).await);
    // The checks ran on the workers.
    assert!(pools
        .iter()
        .all(|p| p.registered.load(Ordering::Relaxed) > 0));
    // An INSERT from a table writes its files in the workers' tasks; the commit stays here.
    let plan = distributed
        .context()
        .sql(
            statements
                .iter()
                .find(|s| s.contains("FROM ns.t WHERE k < 10"))
                .unwrap(),
        )
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    // The committing plan answers once committed.
    assert_eq!(plan.name(), "CommittedExec");
    let shown = datafusion_distributed::display_plan_ascii(plan.children()[0].as_ref(), false);
    let head = shown.split("Stage 1").next().unwrap();
    let stage = shown.split("Stage 1 ── tasks=2").nth(1).unwrap_or_default();
    assert!(
        head.contains("CommitExec") && !head.contains("DataFileWriterExec"),
        "{shown}"
    );
    assert!(stage.contains("DataFileWriterExec"), "{shown}");
    // A DELETE: the statement node here, its first pass read in a stage of two tasks.
    let plan = distributed
        .context()
        .sql("DELETE FROM ns.t WHERE id % 11 = 0")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    assert_eq!(plan.name(), "CommittedExec");
    let shown = datafusion_distributed::display_plan_ascii(plan.children()[0].as_ref(), false);
    let head = shown.split("Stage 1").next().unwrap();
    let stage = shown.split("Stage 1 ── tasks=2").nth(1).unwrap_or_default();
    assert!(head.contains("DeleteExec"), "{shown}");
    assert!(stage.contains("DataSourceExec"), "{shown}");
    // Merge-on-read: the delete files are written in a stage of tasks, after a shuffle that
    // brings each data file's positions to one task.
    sql(&distributed, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    let plan = distributed
        .context()
        .sql("DELETE FROM ns.t WHERE id % 11 = 0")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let shown = datafusion_distributed::display_plan_ascii(plan.children()[0].as_ref(), false);
    let head = shown.split("[Stage").next().unwrap();
    assert!(
        head.contains("DeleteExec") && !head.contains("PositionDeleteWriterExec"),
        "{shown}"
    );
    let writer_stage = shown
        .split("Stage ")
        .skip(1)
        .find(|s| s.contains("PositionDeleteWriterExec"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(writer_stage.contains("tasks=2"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sorted_table_is_rewritten_on_the_workers_in_sorted_files() {
    let sorted = |dir: std::path::PathBuf| async move {
        let s = common::session(&dir).await;
        sql(&s, "CREATE SCHEMA ns").await.unwrap();
        sql(
            &s,
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, k BIGINT, v BIGINT) STORED AS \
             ICEBERG LOCATION '' WITH ORDER (v DESC NULLS LAST)",
        )
        .await
        .unwrap();
        for part in 0..4i64 {
            sql(
                &s,
                &format!(
                    "INSERT INTO ns.t SELECT value AS id, value % 13 AS k, value * 7919 % 100003 \
                     AS v FROM generate_series({}, {})",
                    part * 10_000 + 1,
                    (part + 1) * 10_000
                ),
            )
            .await
            .unwrap();
        }
        s
    };
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let single = sorted(one.path().to_path_buf()).await;
    drop(sorted(many.path().to_path_buf()).await);
    let (urls, pools) = cluster(2).await;
    let distributed = IcebergSession::open(WarehouseConfig::local(many.path()))
        .await
        .unwrap()
        .with_workers(urls);
    sql(
        &distributed,
        "SET distributed.file_scan_config_bytes_per_partition = 16384",
    )
    .await
    .unwrap();
    let check = "SELECT count(*), sum(v), sum(k), min(v), max(v) FROM ns.t";
    for statement in [
        "DELETE FROM ns.t WHERE id % 3 = 0",
        // The sort key changes: the rewritten files are sorted by the new values.
        "UPDATE ns.t SET v = 100003 - v WHERE k = 4",
        // MERGE's new rows are written, sorted, in the workers' tasks.
        "MERGE INTO ns.t AS t USING (SELECT value AS id, value % 1000 AS v FROM generate_series(1, 30000)) AS s \
         ON t.id = s.id AND t.k = 5 \
         WHEN MATCHED THEN UPDATE SET v = s.v \
         WHEN NOT MATCHED AND s.id > 29000 THEN INSERT (id, k, v) VALUES (s.id, 0, s.v)",
    ] {
        let before: usize = pools
            .iter()
            .map(|p| p.writers.load(Ordering::Relaxed))
            .sum();
        assert_eq!(
            rows(&distributed, statement).await,
            rows(&single, statement).await,
            "{statement}"
        );
        assert_eq!(
            rows(&distributed, check).await,
            rows(&single, check).await,
            "after {statement}"
        );
        let after: usize = pools
            .iter()
            .map(|p| p.writers.load(Ordering::Relaxed))
            .sum();
        assert!(after > before, "no worker wrote a file for {statement}");
    }
    // Every file of the table (each task sorts its own rows) is in the table's order.
    let files = planned_files(&distributed).await;
    assert!(files.len() > 1);
    for f in &files {
        assert!(
            common::non_increasing(&f.path, "v"),
            "{} is not sorted",
            f.path
        );
    }
    // And one session's (one sorted stream) likewise.
    for f in planned_files(&single).await {
        assert!(
            common::non_increasing(&f.path, "v"),
            "{} is not sorted",
            f.path
        );
    }
}

#[tokio::test]
async fn a_task_plan_carries_only_the_deletes_of_its_own_files() {
    use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::physical_plan::{
        ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions,
    };
    use datafusion_proto::bytes::{
        physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
    };
    use iceberg_exec::distributed::IcebergPhysicalCodec;
    use iceberg_exec::physical_plan::positional_delete::PositionalDeleteExec;

    let dir = tempfile::tempdir().unwrap();
    let s = table(dir.path(), 4, 1000, 10, 1).await;
    sql(&s, "SET iceberg.delete_mode = 'merge-on-read'")
        .await
        .unwrap();
    sql(&s, "DELETE FROM ns.t WHERE id % 3 = 0").await.unwrap();
    let plan = s
        .context()
        .sql("SELECT id FROM ns.t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    // The positional delete node and its scan, wherever they are in the plan.
    fn find(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        if plan.downcast_ref::<PositionalDeleteExec>().is_some() {
            return Some(Arc::clone(plan));
        }
        plan.children().into_iter().find_map(find)
    }
    let node = find(&plan).expect("a PositionalDeleteExec");
    let all = node
        .downcast_ref::<PositionalDeleteExec>()
        .unwrap()
        .deletes()
        .clone();
    assert!(all.len() >= 4, "{all:?}");
    // A task's variant: the scan with only the first file.
    let scan = Arc::clone(node.children()[0]);
    let mut config = scan
        .downcast_ref::<DataSourceExec>()
        .unwrap()
        .data_source()
        .downcast_ref::<FileScanConfig>()
        .unwrap()
        .clone();
    let first = config.file_groups[0].files()[0].clone();
    let kept = first.object_meta.location.to_string();
    config.file_groups = vec![FileGroup::new(vec![first])];
    let task = Arc::clone(&node)
        .replace_children(
            vec![DataSourceExec::from_data_source(config)],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
        .unwrap();
    let codec = IcebergPhysicalCodec;
    let bytes = physical_plan_to_bytes_with_extension_codec(task, &codec).unwrap();
    let decoded =
        physical_plan_from_bytes_with_extension_codec(&bytes, &s.context().task_ctx(), &codec)
            .unwrap();
    let carried = decoded
        .downcast_ref::<PositionalDeleteExec>()
        .unwrap()
        .deletes()
        .clone();
    assert_eq!(carried.keys().collect::<Vec<_>>(), [&kept]);
    assert_eq!(
        carried[&kept].delete_files.len(),
        all[&kept].delete_files.len()
    );
}

/// A session on the warehouse in `dir` coordinating the workers at `urls`, a task per 16 KiB
/// of data files.
async fn coordinator(dir: &std::path::Path, urls: Vec<String>) -> IcebergSession {
    let s = IcebergSession::open(WarehouseConfig::local(dir))
        .await
        .unwrap()
        .with_workers(urls.iter().map(|u| u.parse().unwrap()).collect());
    sql(
        &s,
        "SET distributed.file_scan_config_bytes_per_partition = 16384",
    )
    .await
    .unwrap();
    s
}

/// The current snapshot id and row count of `ns.t`.
async fn state_of(session: &IcebergSession) -> (Option<i64>, Vec<String>) {
    (
        common::current_snapshot(session, "ns", "t").await,
        rows(session, "SELECT count(*) FROM ns.t").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_worker_fails_the_insert_without_a_commit_and_a_retry_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let single = table(dir.path(), 4, 250_000, 31, 1).await;
    let (w1, u1) = worker_process(dir.path());
    let (w2, u2) = worker_process(dir.path());
    let insert = "INSERT INTO ns.t SELECT id + 1000000 AS id, k, v FROM ns.t";
    let before = state_of(&single).await;
    assert_eq!(before.1, ["1000000"]);

    // A worker killed while the statement runs: it fails and commits nothing, or it had
    // finished first and committed everything.
    let cluster = coordinator(dir.path(), vec![u1.clone(), u2.clone()]).await;
    let running = tokio::spawn({
        let cluster = cluster.clone();
        async move { sql(&cluster, insert).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    drop(w1);
    let first = running.await.unwrap();
    let after_first = state_of(&single).await;
    match &first {
        Err(_) => assert_eq!(after_first, before),
        Ok(_) => assert_eq!(after_first.1, ["2000000"]),
    }

    // With the worker gone, the statement fails with an error and changes nothing.
    let err = sql(&cluster, insert).await.unwrap_err().to_string();
    assert!(!err.is_empty());
    assert_eq!(state_of(&single).await, after_first);

    // Over live workers the same statement succeeds.
    let (_w3, u3) = worker_process(dir.path());
    let retry = coordinator(dir.path(), vec![u2, u3]).await;
    sql(&retry, insert).await.unwrap();
    let rows_before: i64 = after_first.1[0].parse().unwrap();
    assert_eq!(state_of(&single).await.1, [(rows_before * 2).to_string()]);
    drop(w2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_worker_fails_a_delete_or_merge_without_a_commit_and_a_retry_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let single = table(dir.path(), 4, 250_000, 31, 1).await;
    let data_files = |s: &IcebergSession| {
        let s = s.clone();
        async move {
            let mut paths: Vec<String> = planned_files(&s)
                .await
                .into_iter()
                .map(|f| f.path)
                .collect();
            paths.sort();
            paths
        }
    };
    // A worker killed at several moments of a copy-on-write DELETE (every file has a matching
    // row: each is read twice and rewritten): the statement fails and changes nothing (the
    // same snapshot, the same files), or it had finished first and deleted exactly its rows.
    // Then the same for a MERGE that deletes (its join and its rewrite run in the tasks).
    let mut failed = 0;
    let mut merge_failed = 0;
    for (delay, divisor, merge) in [
        (0u64, 2, false),
        (100, 3, false),
        (250, 5, false),
        (0, 7, true),
        (150, 11, true),
    ] {
        let delete = match merge {
            false => format!("DELETE FROM ns.t WHERE id % {divisor} = 0"),
            true => format!(
                "MERGE INTO ns.t AS t USING (SELECT value AS id FROM generate_series(1, 1000000) \
                 WHERE value % {divisor} = 0) AS s ON t.id = s.id WHEN MATCHED THEN DELETE"
            ),
        };
        let matching = format!("SELECT count(*) FROM ns.t WHERE id % {divisor} = 0");
        let before = state_of(&single).await;
        let files_before = data_files(&single).await;
        let gone: i64 = rows(&single, &matching).await[0].parse().unwrap();
        let (w1, u1) = worker_process(dir.path());
        let (w2, u2) = worker_process(dir.path());
        let cluster = coordinator(dir.path(), vec![u1, u2.clone()]).await;
        let running = tokio::spawn({
            let cluster = cluster.clone();
            let delete = delete.clone();
            async move { sql(&cluster, &delete).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        drop(w1);
        match running.await.unwrap() {
            Err(e) => {
                assert!(!e.to_string().is_empty());
                assert_eq!(state_of(&single).await, before, "after {delay} ms");
                assert_eq!(data_files(&single).await, files_before, "after {delay} ms");
                failed += 1;
                if merge {
                    merge_failed += 1;
                }
                // With the worker gone, the statement fails again and changes nothing.
                sql(&cluster, &delete).await.unwrap_err();
                assert_eq!(state_of(&single).await, before);
            }
            Ok(_) => {
                let left: i64 = before.1[0].parse::<i64>().unwrap() - gone;
                assert_eq!(state_of(&single).await.1, [left.to_string()]);
            }
        }
        // Over live workers the same statement succeeds.
        let (_w3, u3) = worker_process(dir.path());
        let retry = coordinator(dir.path(), vec![u2, u3]).await;
        sql(&retry, &delete).await.unwrap();
        assert_eq!(rows(&single, &matching).await, ["0"]);
        let left: i64 = before.1[0].parse::<i64>().unwrap() - gone;
        assert_eq!(state_of(&single).await.1, [left.to_string()]);
        drop(w2);
    }
    // A worker dead before its tasks arrive fails the statement at least.
    assert!(failed >= 1);
    assert!(merge_failed >= 1);
}

#[tokio::test]
async fn after_a_committed_answer_a_late_error_is_logged_not_returned() {
    use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion::execution::{SendableRecordBatchStream, TaskContext};
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
    use datafusion::physical_plan::{collect, ExecutionPlan};
    use iceberg_exec::distributed::CommittedExec;

    /// Yields `before` errors or not, then a batch, then an error.
    #[derive(Debug)]
    struct Script(SchemaRef, bool);
    impl PartitionStream for Script {
        fn schema(&self) -> &SchemaRef {
            &self.0
        }
        fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
            let batch = RecordBatch::try_new(
                Arc::clone(&self.0),
                vec![Arc::new(Int64Array::from(vec![7])) as ArrayRef],
            )
            .unwrap();
            let late = || datafusion::error::DataFusionError::Execution("worker gone".into());
            let items = match self.1 {
                true => vec![Err(late())],
                false => vec![Ok(batch), Err(late())],
            };
            Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.0),
                futures::stream::iter(items),
            ))
        }
    }
    let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::Int64,
        false,
    )]));
    let plan = |fail_first| -> Arc<dyn ExecutionPlan> {
        let source = StreamingTableExec::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Script(Arc::clone(&schema), fail_first)) as _],
            None,
            vec![],
            false,
            None,
        )
        .unwrap();
        Arc::new(CommittedExec::new(Arc::new(source)))
    };
    let task = Arc::new(TaskContext::default());
    // The answer stands; the error after it does not fail the statement.
    let answer = collect(plan(false), Arc::clone(&task)).await.unwrap();
    assert_eq!(render(&answer), ["7"]);
    // An error before any answer still fails it.
    let err = collect(plan(true), task).await.unwrap_err().to_string();
    assert!(err.contains("worker gone"), "{err}");
}

/// Ballista as the host: a standalone cluster (scheduler and executor in this process) built
/// from a session's state with this crate's codecs in front of Ballista's.
#[cfg(feature = "ballista")]
async fn ballista_context(session: &IcebergSession) -> datafusion::prelude::SessionContext {
    use ballista::prelude::SessionContextExt;
    use datafusion::execution::SessionStateBuilder;
    use iceberg_exec::distributed::ballista_config;

    let state = session.context().state();
    let store: Arc<dyn MetadataStore> = session.catalog().clone();
    let config = ballista_config(state.config().clone(), Some(store));
    let state = SessionStateBuilder::new_from_existing(state)
        .with_config(config)
        .build();
    datafusion::prelude::SessionContext::standalone_with_state(state)
        .await
        .unwrap()
}

#[cfg(feature = "ballista")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ballista_reads_and_inserts_like_one_session_and_refuses_other_writes() {
    let dir = tempfile::tempdir().unwrap();
    let single = table_with_deletes(dir.path()).await;

    let host = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap();
    let ctx = ballista_context(&host).await;
    let run = |q: &'static str| {
        let ctx = ctx.clone();
        async move {
            match ctx.sql(q).await {
                Ok(df) => df.collect().await.map(|b| render(&b)),
                Err(e) => Err(e),
            }
        }
    };
    let queries = READS;
    for q in queries {
        assert_eq!(run(q).await.unwrap(), rows(&single, q).await, "{q}");
    }
    // The queries ran on Ballista (its client plan hands the query to the scheduler).
    let plan = ctx
        .sql(queries[1])
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string();
    assert!(shown.contains("DistributedQueryExec"), "{shown}");

    // An INSERT writes on the executors and commits once, recording its statement id.
    let twin = tempfile::tempdir().unwrap();
    let oracle = table_with_deletes(twin.path()).await;
    let insert = "INSERT INTO ns.t SELECT id + 1000000 AS id, k, w FROM ns.t WHERE k = 1";
    let before = common::current_snapshot(&single, "ns", "t").await;
    assert_eq!(run(insert).await.unwrap(), rows(&oracle, insert).await);
    for q in READS {
        assert_eq!(rows(&single, q).await, rows(&oracle, q).await, "{q}");
    }
    let table = single
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.parent_snapshot_id(), before);
    assert!(snapshot
        .summary()
        .additional_properties
        .contains_key(iceberg_exec::commit::STATEMENT_ID_PROPERTY));

    // Other writes are refused before anything is written, with an error that says why.
    let before = state_of(&single).await;
    let err = run("DELETE FROM ns.t WHERE k = 2")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not supported on Ballista"), "{err}");
    let err = run("INSERT OVERWRITE ns.t SELECT id, k, w FROM ns.t WHERE k = 2")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("OverwriteExec is not supported on Ballista"),
        "{err}"
    );
    assert_eq!(state_of(&single).await, before);
}

/// An INSERT planned with idempotent commits (as on Ballista, whose retried task may run the
/// commit again) commits once: run again, the same plan answers with the first run's count,
/// adds no snapshot and removes the files it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_insert_run_twice_commits_once() {
    use datafusion::catalog::TableProvider;
    use datafusion::logical_expr::dml::InsertOp;
    let dir = tempfile::tempdir().unwrap();
    let s = table(dir.path(), 2, 1000, 7, 1).await;
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let provider = iceberg_exec::IcebergTableProvider::try_new(
        s.catalog().load_table(&ident).await.unwrap(),
        Some(s.catalog().clone()),
    )
    .unwrap()
    .with_idempotent_commits();
    let input = || async {
        s.context()
            .sql("SELECT value + 5000 AS id, value % 7 AS k, value AS v FROM generate_series(1, 300)")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap()
    };
    let state = s.context().state();
    let plan = provider
        .insert_into(&state, input().await, InsertOp::Append)
        .await
        .unwrap();
    assert_eq!(plan.name(), "CommitExec");
    // A run is the commit node over a fresh input (as a retried task decodes the same node).
    use datafusion::physical_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
    let run = || async {
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let writer = Arc::clone(plan.children()[0])
            .replace_children(vec![input().await], options)
            .unwrap();
        let attempt = Arc::clone(&plan)
            .replace_children(vec![writer], options)
            .unwrap();
        render(
            &datafusion::physical_plan::collect(attempt, s.context().task_ctx())
                .await
                .unwrap(),
        )
    };
    assert_eq!(run().await, ["300"]);
    let after_first = (state_of(&s).await, common::files_under(dir.path()));
    assert_eq!(after_first.0 .1, ["2300"]);
    // The same statement again (a retried task): nothing more is committed or left behind.
    assert_eq!(run().await, ["300"]);
    assert_eq!(
        (state_of(&s).await, common::files_under(dir.path())),
        after_first
    );
    // A host that retries only the commit task hands it the files the first run committed:
    // the repeated commit answers the same and removes none of them.
    let written = Arc::clone(plan.children()[0])
        .replace_children(
            vec![input().await],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
        .unwrap();
    let files = datafusion::physical_plan::collect(written, s.context().task_ctx())
        .await
        .unwrap();
    let schema = files[0].schema();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let commit = |id: &str| {
        let source = datafusion::datasource::memory::MemorySourceConfig::try_new_exec(
            std::slice::from_ref(&files),
            Arc::clone(&schema),
            None,
        )
        .unwrap();
        let store: Arc<dyn MetadataStore> = s.catalog().clone();
        let table = table.clone();
        Arc::new(
            iceberg_exec::physical_plan::commit::CommitExec::new(
                source,
                store,
                table,
                iceberg_exec::physical_plan::write::WrittenFiles::default(),
            )
            .with_statement_id(id),
        ) as Arc<dyn datafusion::physical_plan::ExecutionPlan>
    };
    for _ in 0..2 {
        let answer = datafusion::physical_plan::collect(commit("retried"), s.context().task_ctx())
            .await
            .unwrap();
        assert_eq!(render(&answer), ["300"]);
        // Every file the table references is still there (a missing one fails the read).
        assert_eq!(state_of(&s).await.1, ["2600"]);
        assert_eq!(
            rows(&s, "SELECT count(*), sum(v) FROM ns.t WHERE id > 5000").await,
            // The first statement's 300 rows and this one's (the same ids again).
            rows(
                &s,
                "SELECT 600, 2 * sum(value) FROM generate_series(1, 300)"
            )
            .await
        );
    }
    // A new statement gets a new id and commits.
    let input = s
        .context()
        .sql("SELECT 9999 AS id, 1 AS k, 1 AS v")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let provider = iceberg_exec::IcebergTableProvider::try_new(
        s.catalog().load_table(&ident).await.unwrap(),
        Some(s.catalog().clone()),
    )
    .unwrap()
    .with_idempotent_commits();
    let plan = provider
        .insert_into(&state, input, InsertOp::Append)
        .await
        .unwrap();
    datafusion::physical_plan::collect(plan, s.context().task_ctx())
        .await
        .unwrap();
    assert_eq!(state_of(&s).await.1, ["2601"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributed_delete_planned_before_a_concurrent_commit_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let single = table(dir.path(), 4, 10_000, 31, 1).await;
    let (urls, pools) = cluster(2).await;
    let distributed = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap()
        .with_workers(urls);
    sql(
        &distributed,
        "SET distributed.file_scan_config_bytes_per_partition = 16384",
    )
    .await
    .unwrap();
    sql(&distributed, "SET iceberg.delete_mode = 'copy-on-write'")
        .await
        .unwrap();
    // Planned against the table as it is ...
    let ctx = distributed.context();
    let plan = ctx
        .sql("DELETE FROM ns.t WHERE id % 10 = 0")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    // ... then another session rewrites the files of ids 1..=10000 (ids <= 5000 go): the
    // statement sees the conflict, plans again on the new state (its first pass distributed
    // again) and runs.
    sql(&single, "SET iceberg.delete_mode = 'copy-on-write'")
        .await
        .unwrap();
    assert_eq!(
        rows(&single, "DELETE FROM ns.t WHERE id <= 5000").await,
        ["5000"]
    );
    let written_before: usize = pools
        .iter()
        .map(|p| p.writers.load(Ordering::Relaxed))
        .sum();
    let out = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap();
    // The multiples of 10 above 5000.
    assert_eq!(render(&out), ["3500"]);
    assert_eq!(
        rows(
            &single,
            "SELECT count(*), min(id), count(*) FILTER (WHERE id % 10 = 0) FROM ns.t"
        )
        .await,
        ["31500|5001|0"]
    );
    let written_after: usize = pools
        .iter()
        .map(|p| p.writers.load(Ordering::Relaxed))
        .sum();
    assert!(written_after > written_before);
}

/// Workers whose pools cannot hold the positions their delete writers collect: on format v2
/// each task writes what it holds and goes on (a data file then gets several delete files),
/// and the table reads as one session's, and the workers' pools are left empty; on format v3
/// (one deletion vector per data file) the statement fails and changes nothing, and none of
/// this crate's reservations outlive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn position_deletes_on_workers_with_a_small_pool() {
    for version in [2, 3] {
        let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut sessions = vec![];
        for dir in [one.path(), many.path()] {
            // Files of about 100 000 rows: half of one file's positions take more memory than
            // the pool has, so its task must write some of them before it has seen the rest.
            let s = table(dir, 2, 200_000, 31, 2).await;
            if version == 3 {
                s.sql("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3')")
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
            }
            sql(&s, "SET iceberg.delete_mode = 'merge-on-read'")
                .await
                .unwrap();
            sessions.push(s);
        }
        let single = sessions.remove(0);
        drop(sessions);
        let mut urls = vec![];
        let mut pools = vec![];
        for _ in 0..2 {
            let pool = Arc::new(ByNamePool::new(12 << 10));
            let runtime = RuntimeEnvBuilder::new()
                .with_memory_pool(Arc::clone(&pool) as Arc<dyn MemoryPool>)
                .build_arc()
                .unwrap();
            let (url, _server) = serve_worker(worker(runtime), "127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            urls.push(url.to_string());
            pools.push(pool);
        }
        let distributed = coordinator(many.path(), urls).await;
        sql(&distributed, "SET iceberg.delete_mode = 'merge-on-read'")
            .await
            .unwrap();
        let statement = "DELETE FROM ns.t WHERE id % 2 = 0";
        let check = "SELECT count(*), sum(v), min(id), max(id) FROM ns.t";
        let before = state_of(&distributed).await;
        let files_before = common::files_under(many.path());
        let result = sql(&distributed, statement).await;
        if version == 3 {
            let e = result.expect_err("v3 cannot write a data file's vector in parts");
            assert!(e.to_string().contains("PositionDeleteWriterExec"), "{e}");
            assert_eq!(state_of(&distributed).await, before);
            assert_eq!(common::files_under(many.path()), files_before);
            // The error can come before every task has wound down (a failed statement does
            // not wait for the others): once they have, nothing of this crate holds memory.
            // The transport's receive buffer ("WorkerConnection") of a partition whose task
            // ended before reading it stays reserved until the worker drops the failed
            // query's task (datafusion-distributed 4.0.0 evicts it after 10 idle minutes).
            let ours = || {
                pools
                    .iter()
                    .flat_map(|p| p.holders())
                    .filter(|(name, _)| name != "WorkerConnection")
                    .collect::<Vec<_>>()
            };
            let mut waited = 0;
            while !ours().is_empty() && waited < 500 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                waited += 1;
            }
            assert_eq!(ours(), [], "v3");
            continue;
        }
        // A statement that succeeded has read everything it asked for: every pool is empty.
        let mut waited = 0;
        while pools.iter().any(|p| p.reserved() > 0) && waited < 500 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            waited += 1;
        }
        for pool in &pools {
            assert_eq!(pool.reserved(), 0, "v{version}: {:?}", pool.holders());
        }
        assert_eq!(
            render(&result.unwrap()),
            rows(&single, statement).await,
            "v{version}"
        );
        // (Read in a session of its own: the workers' pools are for the statement.)
        let reader = common::session(many.path()).await;
        assert_eq!(rows(&reader, check).await, rows(&single, check).await);
        // The pool made tasks write early: some data file has more than one delete file.
        let files = planned_files(&distributed).await;
        assert!(
            files.iter().any(|f| f.position_deletes.len() > 1),
            "{files:?}"
        );
        let deleted: u64 = files
            .iter()
            .flat_map(|f| f.position_deletes.iter())
            .map(|d| d.record_count)
            .sum();
        assert_eq!(deleted, 200_000);
    }
}

/// Merge-on-read deletes written on the workers for a table partitioned by identity, day and
/// bucket, with null partition values: the plan carries each data file's partition tuple and
/// earlier deletes to the tasks, and the table reads as one session's, one delete file per
/// data file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn position_deletes_of_a_partitioned_table_are_written_on_the_workers() {
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut sessions = vec![];
    for dir in [one.path(), many.path()] {
        let s = common::session(dir).await;
        for statement in [
            "CREATE SCHEMA ns",
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, ts TIMESTAMP, region VARCHAR, v BIGINT) \
             STORED AS ICEBERG LOCATION '' PARTITIONED BY (region) \
             OPTIONS ('partitioning' 'day(ts), bucket(4, id)', 'write.delete.mode' 'merge-on-read')",
            "INSERT INTO ns.t SELECT value AS id, \
               CAST(1700000000 + value * 60 AS TIMESTAMP) AS ts, \
               CASE value % 3 WHEN 0 THEN 'eu' WHEN 1 THEN 'us' ELSE NULL END AS region, \
               value AS v FROM generate_series(1, 3000)",
        ] {
            sql(&s, statement).await.unwrap();
        }
        sessions.push(s);
    }
    let single = sessions.remove(0);
    drop(sessions);
    let (urls, pools) = cluster(2).await;
    let distributed = coordinator(many.path(), urls.iter().map(|u| u.to_string()).collect()).await;
    let check =
        "SELECT region, count(*), sum(v), min(ts) FROM ns.t GROUP BY region ORDER BY region";
    for statement in [
        "DELETE FROM ns.t WHERE id % 4 = 0",
        // Files with deletes of the statement before: merged into one delete file each.
        "DELETE FROM ns.t WHERE id % 5 = 0 AND region IS NULL",
        "DELETE FROM ns.t WHERE id % 6 = 1",
    ] {
        assert_eq!(
            rows(&distributed, statement).await,
            rows(&single, statement).await,
            "{statement}"
        );
        assert_eq!(
            rows(&distributed, check).await,
            rows(&single, check).await,
            "{statement}"
        );
        assert_eq!(
            summary(&distributed).await,
            summary(&single).await,
            "{statement}"
        );
        one_delete_file_each(&planned_files(&distributed).await, statement);
    }
    assert!(pools
        .iter()
        .all(|p| p.delete_writers.load(Ordering::Relaxed) > 0));
}

/// A table partitioned by a DOUBLE holding NaN, NULL and numbers, written and changed over
/// workers: files written in the workers' tasks (an INSERT from another table) and the delete
/// files written there keep NaN partition values NaN on their way through plans and writer
/// rows (JSON alone has no NaN: they would come back null), so `DELETE ... WHERE f IS NULL`
/// removes only the null partition and every answer equals one session's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nan_partition_values_survive_the_workers() {
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut sessions = vec![];
    for dir in [one.path(), many.path()] {
        let s = common::session(dir).await;
        for statement in [
            "CREATE SCHEMA ns",
            "CREATE EXTERNAL TABLE ns.src (id BIGINT NOT NULL, f DOUBLE) STORED AS ICEBERG \
             LOCATION ''",
            "INSERT INTO ns.src SELECT value AS id, CASE value % 4 WHEN 0 THEN CAST('NaN' AS DOUBLE) \
               WHEN 1 THEN NULL ELSE CAST(value % 3 AS DOUBLE) END AS f FROM generate_series(1, 25000)",
            "INSERT INTO ns.src SELECT value AS id, CASE value % 4 WHEN 0 THEN CAST('NaN' AS DOUBLE) \
               WHEN 1 THEN NULL ELSE CAST(value % 3 AS DOUBLE) END AS f FROM generate_series(25001, 50000)",
            "INSERT INTO ns.src SELECT value AS id, CASE value % 4 WHEN 0 THEN CAST('NaN' AS DOUBLE) \
               WHEN 1 THEN NULL ELSE CAST(value % 3 AS DOUBLE) END AS f FROM generate_series(50001, 75000)",
            "INSERT INTO ns.src SELECT value AS id, CASE value % 4 WHEN 0 THEN CAST('NaN' AS DOUBLE) \
               WHEN 1 THEN NULL ELSE CAST(value % 3 AS DOUBLE) END AS f FROM generate_series(75001, 100000)",
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, f DOUBLE) STORED AS ICEBERG \
             LOCATION '' PARTITIONED BY (f) OPTIONS ('write.delete.mode' 'merge-on-read')",
        ] {
            sql(&s, statement).await.unwrap();
        }
        sessions.push(s);
    }
    let single = sessions.remove(0);
    drop(sessions);
    let (urls, pools) = cluster(2).await;
    let distributed = coordinator(many.path(), urls.iter().map(|u| u.to_string()).collect()).await;
    let check = "SELECT count(*), sum(id), count(f), count(*) FILTER (WHERE isnan(f)) FROM ns.t";
    for statement in [
        "INSERT INTO ns.t SELECT * FROM ns.src",
        "DELETE FROM ns.t WHERE id % 5 = 0",
        "DELETE FROM ns.t WHERE id % 7 = 0 AND isnan(f)",
        "DELETE FROM ns.t WHERE f IS NULL",
    ] {
        assert_eq!(
            rows(&distributed, statement).await,
            rows(&single, statement).await,
            "{statement}"
        );
        assert_eq!(
            rows(&distributed, check).await,
            rows(&single, check).await,
            "{statement}"
        );
        let files = planned_files(&distributed).await;
        one_delete_file_each(&files, statement);
        let nan = files
            .iter()
            .filter(|f| {
                matches!(f.partition.iter().next().flatten(),
                    Some(iceberg::spec::Literal::Primitive(p)) if p.is_nan())
            })
            .count();
        assert!(
            nan > 0,
            "{statement}: no file in the NaN partition: {files:?}"
        );
    }
    // The NaN rows are all there; the null ones are gone.
    assert_eq!(
        rows(&distributed, "SELECT count(*) FROM ns.t WHERE isnan(f)").await,
        rows(&single, "SELECT count(*) FROM ns.t WHERE isnan(f)").await
    );
    assert_eq!(
        rows(&distributed, "SELECT count(*) FROM ns.t WHERE f IS NULL").await,
        ["0"]
    );
    // Data files and delete files were written on the workers (which worker gets which file
    // is the shuffle's hash of its path).
    let on_workers =
        |count: fn(&CountingPool) -> usize| pools.iter().map(|p| count(p)).sum::<usize>();
    assert!(on_workers(|p| p.writers.load(Ordering::Relaxed)) > 0);
    assert!(on_workers(|p| p.delete_writers.load(Ordering::Relaxed)) > 0);
}

/// A session on the S3 warehouse `warehouse` of `server`, its catalog in `dir`.
async fn s3_session(
    server: &common::seaweed::SeaweedFs,
    dir: &std::path::Path,
    warehouse: &str,
) -> IcebergSession {
    let mut config = WarehouseConfig::local(dir);
    config.warehouse = warehouse.to_string();
    config.catalog_uri = Some(format!("sqlite:///{}/catalog.db", dir.display()));
    config.properties = server.properties().into_iter().collect();
    IcebergSession::open(config).await.unwrap()
}

/// A table in S3 (SeaweedFS on loopback): workers that read and write the bucket through their
/// own stores (built from the same catalog options, as `iceberg-exec worker` does) run reads,
/// both delete modes, an UPDATE and an INSERT, and every answer and the final table equal one
/// session's on a twin table in the same bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_in_object_storage_is_read_and_written_on_the_workers() {
    use common::seaweed::{SeaweedFs, BUCKET};
    let server = SeaweedFs::start().await;
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let single = s3_session(&server, one.path(), &format!("s3://{BUCKET}/one")).await;
    let many_warehouse = format!("s3://{BUCKET}/many");
    let plain = s3_session(&server, many.path(), &many_warehouse).await;
    let setup = [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, k BIGINT, v BIGINT) STORED AS ICEBERG \
         LOCATION '' PARTITIONED BY (k) OPTIONS ('format-version' '2')",
        "INSERT INTO ns.t SELECT value AS id, value % 3 AS k, value * 2 AS v \
         FROM generate_series(1, 20000)",
        "INSERT INTO ns.t SELECT value AS id, value % 3 AS k, value * 2 AS v \
         FROM generate_series(20001, 40000)",
    ];
    for statement in setup {
        sql(&single, statement).await.unwrap();
        sql(&plain, statement).await.unwrap();
    }
    drop(plain);
    // Each worker with the runtime of a session on the warehouse: the bucket's store.
    let mut urls = vec![];
    let mut worker_sessions = vec![];
    for _ in 0..2 {
        let w = s3_session(&server, many.path(), &many_warehouse).await;
        let (url, _server) = serve_worker(
            worker(w.context().runtime_env()),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        urls.push(url);
        worker_sessions.push(w);
    }
    let distributed = s3_session(&server, many.path(), &many_warehouse)
        .await
        .with_workers(urls);
    sql(
        &distributed,
        "SET distributed.file_scan_config_bytes_per_partition = 16384",
    )
    .await
    .unwrap();
    let check = "SELECT k, count(*), sum(v), min(id), max(id) FROM ns.t GROUP BY k ORDER BY k";
    for statement in [
        "SET iceberg.delete_mode = 'merge-on-read'",
        "DELETE FROM ns.t WHERE id % 5 = 0",
        "SET iceberg.delete_mode = 'copy-on-write'",
        "DELETE FROM ns.t WHERE id % 7 = 0",
        "UPDATE ns.t SET v = -v WHERE id % 11 = 0",
        "INSERT INTO ns.t SELECT id + 100000 AS id, k, v FROM ns.t WHERE id < 3000",
    ] {
        assert_eq!(
            rows(&distributed, statement).await,
            rows(&single, statement).await,
            "{statement}"
        );
        assert_eq!(
            rows(&distributed, check).await,
            rows(&single, check).await,
            "after {statement}"
        );
        if !statement.starts_with("SET") {
            assert_eq!(
                summary(&distributed).await,
                summary(&single).await,
                "{statement}"
            );
        }
    }
    // The reads and the writes were planned over the workers' tasks.
    for statement in [check, "DELETE FROM ns.t WHERE id % 13 = 0"] {
        let plan = distributed
            .context()
            .sql(statement)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let shown = datafusion_distributed::display_plan_ascii(
            match plan.name() {
                "CommittedExec" => plan.children()[0].as_ref(),
                _ => plan.as_ref(),
            },
            false,
        );
        assert!(stage_of_tasks(&shown), "{statement}: {shown}");
    }
    // Every file is in the bucket, none on the local disk.
    let table = distributed
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap();
    let files = planned_files(&distributed).await;
    assert!(
        files.iter().all(|f| f.path.starts_with("s3://")),
        "{files:?}"
    );
    assert!(table.metadata().location().starts_with("s3://"));
    assert!(!common::files_under(many.path())
        .iter()
        .any(|f| f.ends_with(".parquet")));
    drop(worker_sessions);
}

/// `MERGE` in a distributed session: its first pass (the join of the source with the target,
/// the clauses, the writers) runs in the workers' tasks, which report the target rows they
/// changed. Both write modes, matched updates and deletes, inserts and NOT MATCHED BY SOURCE
/// give one session's answers and table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_runs_its_first_pass_on_the_workers() {
    merge_over_workers(2).await;
}

/// The same on format v3: each row's last-updated sequence number is one session's, and row
/// ids stay unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_on_the_workers_keeps_row_lineage() {
    merge_over_workers(3).await;
}

async fn merge_over_workers(version: u8) {
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let single = table(one.path(), 4, 10_000, 31, 2).await;
    let other = table(many.path(), 4, 10_000, 31, 2).await;
    if version == 3 {
        for s in [&single, &other] {
            s.sql("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3')")
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
        }
    }
    drop(other);
    let (urls, pools) = cluster(2).await;
    let distributed = coordinator(many.path(), urls.iter().map(|u| u.to_string()).collect()).await;
    let merges = |consumer: &str| -> usize { pools.iter().map(|p| p.named(consumer)).sum() };
    let check = "SELECT count(*), sum(v), sum(k), min(v), max(id) FROM ns.t";
    let steps = [
        "SET iceberg.merge_mode = 'merge-on-read'",
        "MERGE INTO ns.t AS t USING (SELECT value AS id, value % 4 AS op FROM generate_series(38001, 42000)) AS s \
         ON t.id = s.id \
         WHEN MATCHED AND s.op = 0 THEN DELETE \
         WHEN MATCHED THEN UPDATE SET v = -s.id \
         WHEN NOT MATCHED THEN INSERT (id, k, v) VALUES (s.id, s.op, 1)",
        "SET iceberg.merge_mode = 'copy-on-write'",
        "MERGE INTO ns.t AS t USING (SELECT value * 3 AS id FROM generate_series(1, 3000)) AS s \
         ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET v = v + 1000000",
        "MERGE INTO ns.t AS t USING (SELECT value AS id FROM generate_series(1, 20000)) AS s \
         ON t.id = s.id AND t.k < 20 \
         WHEN MATCHED THEN UPDATE SET k = 99 \
         WHEN NOT MATCHED BY SOURCE AND t.id % 97 = 0 THEN DELETE",
        // No new rows: every file written is the rewrite's, which runs in the tasks too.
        "MERGE INTO ns.t AS t USING (SELECT value * 5 AS id FROM generate_series(1, 2000)) AS s \
         ON t.id = s.id WHEN MATCHED THEN DELETE",
    ];
    let writers = || -> usize {
        pools
            .iter()
            .map(|p| p.writers.load(Ordering::Relaxed))
            .sum()
    };
    for statement in steps {
        let before = merges("MergePositions");
        let writers_before = writers();
        assert_eq!(
            rows(&distributed, statement).await,
            rows(&single, statement).await,
            "{statement}"
        );
        assert_eq!(
            rows(&distributed, check).await,
            rows(&single, check).await,
            "after {statement}"
        );
        if !statement.starts_with("SET") {
            assert!(merges("MergePositions") > before, "{statement} ran no task");
            assert!(
                writers() > writers_before,
                "{statement} wrote no file on a worker"
            );
            let layout_free = |mut summary: Vec<(String, String)>| {
                summary.retain(|(k, _)| {
                    !k.ends_with("delete-files") && k != "added-records" && k != "deleted-records"
                });
                summary
            };
            assert_eq!(
                layout_free(summary(&distributed).await),
                layout_free(summary(&single).await),
                "{statement}"
            );
            one_delete_file_each(&planned_files(&distributed).await, statement);
        }
    }
    // Row ids a row inherits from its file's position depend on how writers split rows into
    // files: the sequence number that last changed each row does not, and ids stay unique.
    let everything = match version {
        3 => {
            let ids = "SELECT count(DISTINCT _row_id) = count(*), count(_row_id) \
                       FROM iceberg_scan('ns.t', 'row_lineage', true)";
            assert_eq!(rows(&distributed, ids).await, rows(&single, ids).await);
            assert!(rows(&distributed, ids).await[0].starts_with("true|"));
            "SELECT id, k, v, _last_updated_sequence_number \
             FROM iceberg_scan('ns.t', 'row_lineage', true) ORDER BY id"
        }
        _ => "SELECT id, k, v FROM ns.t ORDER BY id",
    };
    let (ours, theirs) = (
        rows(&distributed, everything).await,
        rows(&single, everything).await,
    );
    let first = ours.iter().zip(&theirs).position(|(a, b)| a != b);
    assert!(
        first.is_none() && ours.len() == theirs.len(),
        "{} rows against {}; first difference: {:?}",
        ours.len(),
        theirs.len(),
        first.map(|i| (&ours[i], &theirs[i]))
    );
}

/// ORC data files with position deletes (and a parquet file beside them) survive the codec and
/// read on two workers as in one session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orc_data_files_with_deletes_read_on_workers_like_one_session() {
    use common::hive_style::add_orc_file;
    let dir = tempfile::tempdir().unwrap();
    let single = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap();
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.o (id BIGINT NOT NULL, name VARCHAR, ts TIMESTAMP, \
         d DECIMAL(10, 2), region VARCHAR) STORED AS ICEBERG LOCATION '' \
         PARTITIONED BY (region) OPTIONS ('write.delete.mode' 'merge-on-read')",
        "INSERT INTO ns.o VALUES (100, 'p', TIMESTAMP '2020-02-02 02:02:02', 1.00, 'eu')",
    ] {
        sql(&single, q).await.unwrap();
    }
    add_orc_file(&single, "o", "with_ids.orc", "eu").await;
    add_orc_file(&single, "o", "without_ids.orc", "us").await;
    add_orc_file(&single, "o", "with_ids.orc", "us").await;
    sql(&single, "DELETE FROM ns.o WHERE id IN (2, 4, 12)")
        .await
        .unwrap();
    round_trip(
        &single,
        "SELECT count(*), sum(id), min(name), max(d), count(DISTINCT region) FROM ns.o",
    )
    .await;
    let query = "SELECT region, id, name, d FROM ns.o ORDER BY region, id";
    let expected = rows(&single, query).await;
    assert_eq!(expected.len(), 9, "{expected:?}");

    let (urls, _pools) = cluster(2).await;
    let distributed = IcebergSession::open(WarehouseConfig::local(dir.path()))
        .await
        .unwrap()
        .with_workers(urls);
    assert_eq!(rows(&distributed, query).await, expected);
    assert_eq!(
        rows(
            &distributed,
            "SELECT count(*), sum(id) FROM ns.o WHERE d > 2"
        )
        .await,
        rows(&single, "SELECT count(*), sum(id) FROM ns.o WHERE d > 2").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_branch_in_a_distributed_session_commit_what_one_session_commits() {
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let single = table(one.path(), 2, 10_000, 31, 2).await;
    drop(table(many.path(), 2, 10_000, 31, 2).await);
    let (urls, pools) = cluster(2).await;
    let distributed = coordinator(many.path(), urls.iter().map(|u| u.to_string()).collect()).await;
    let main_before = rows(&single, "SELECT count(*), sum(v) FROM ns.t").await;
    // The branch named as DataFusion's own SQL reads it (one identifier, `t.branch_b`).
    let steps = [
        "ALTER TABLE ns.t CREATE BRANCH b",
        "SET iceberg.delete_mode = 'merge-on-read'",
        "DELETE FROM ns.\"t.branch_b\" WHERE id % 5 = 0",
        "UPDATE ns.\"t.branch_b\" SET v = v + 1 WHERE k = 3",
        "INSERT INTO ns.\"t.branch_b\" SELECT id + 100000 AS id, k, v FROM ns.\"t.branch_b\" WHERE k < 10",
        "MERGE INTO ns.\"t.branch_b\" AS t USING (SELECT value AS id, 7 AS v FROM generate_series(19001, 21000)) AS s \
         ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v \
         WHEN NOT MATCHED THEN INSERT (id, k, v) VALUES (s.id, 0, s.v)",
    ];
    let written = || -> usize {
        pools
            .iter()
            .map(|p| p.writers.load(Ordering::Relaxed))
            .sum()
    };
    let before = written();
    for statement in steps {
        let mine = distributed
            .sql(statement)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let theirs = single
            .sql(statement)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(render(&mine), render(&theirs), "{statement}");
    }
    assert!(written() > before, "no worker wrote a file for the branch");
    let check = "SELECT count(*), sum(v), sum(k), max(id) FROM ns.\"t.branch_b\"";
    assert_eq!(rows(&distributed, check).await, rows(&single, check).await);
    // main is untouched in both.
    let main = "SELECT count(*), sum(v) FROM ns.t";
    assert_eq!(rows(&distributed, main).await, main_before);
    assert_eq!(rows(&single, main).await, main_before);
}
