//! Criterion micro-benchmarks of the delete operators, each route against the other on the same
//! table in the same run (writer throughput is in `benches/write.rs`):
//!
//! - `PositionalDeleteExec`: row selections from in-memory bitmaps against the spilling
//!   anti-join (`iceberg.position_delete_join_threshold = 0`);
//! - `EqualityDeleteExec`: the hash join with its keys in memory against the same join under a
//!   4 MiB pool, where it partitions both sides into spill files.
//!
//! `cargo bench --bench operators` (rows: `ICEBERG_EXEC_BENCH_ROWS`, default 2M in 8 files).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use datafusion::prelude::SessionContext;
use iceberg::spec::{Operation, Struct};
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, SnapshotChanges};
use iceberg_exec::physical_plan::write::{write_equality_delete_file, write_position_delete_file};
use iceberg_exec::{IcebergSession, MetadataStore, WarehouseConfig};

const QUERY: &str = "SELECT count(*), sum(value) FROM b.t";

fn rows() -> i64 {
    std::env::var("ICEBERG_EXEC_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000)
}

/// Two tables of `rows` rows in 8 files: `b.p` with every 10th position deleted, `b.t` with
/// `rows / 8` keys equality-deleted.
async fn setup(dir: &std::path::Path, rows: i64) -> datafusion::error::Result<()> {
    let s = IcebergSession::open(WarehouseConfig::local(dir)).await?;
    let ctx = s.context();
    ctx.sql("CREATE SCHEMA b").await?.collect().await?;
    for name in ["t", "p"] {
        ctx.sql(&format!("CREATE TABLE b.{name} (id BIGINT, value BIGINT)"))
            .await?
            .collect()
            .await?;
        let files = 8;
        for f in 0..files {
            let (lo, hi) = (f * rows / files, (f + 1) * rows / files - 1);
            ctx.sql(&format!(
                "INSERT INTO b.{name} SELECT value, value % 1000 FROM generate_series({lo}, {hi})"
            ))
            .await?
            .collect()
            .await?;
        }
    }
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    // b.p: position deletes only; b.t: equality deletes only.
    let ident = TableIdent::from_strs(["b", "p"]).expect("ident");
    let table = s.catalog().load_table(&ident).await?;
    let snapshot = table
        .metadata()
        .current_snapshot()
        .cloned()
        .expect("snapshot");
    let mut added = vec![];
    for f in iceberg_exec::file_planning::plan_files(&table, &snapshot).await? {
        let positions = (0..f.record_count as i64)
            .filter(|p| p % 10 == 3)
            .map(|p| (f.path.clone(), p))
            .collect();
        added.push(write_position_delete_file(&table, 0, Struct::empty(), positions).await?);
    }
    let changes = SnapshotChanges {
        operation: Operation::Delete,
        added_delete_files: added,
        ..Default::default()
    };
    commit(Arc::clone(&store), &ident, changes).await?;

    let ident = TableIdent::from_strs(["b", "t"]).expect("ident");
    let table = s.catalog().load_table(&ident).await?;
    let keys: Vec<i64> = (0..rows / 8).map(|k| k * 8 + 7).collect();
    let n = keys.len();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(keys)) as ArrayRef),
        (
            "value",
            Arc::new(Int64Array::from(vec![0i64; n])) as ArrayRef,
        ),
    ])?;
    let file = write_equality_delete_file(&table, vec![1], 0, Struct::empty(), &[batch]).await?;
    let changes = SnapshotChanges {
        operation: Operation::Delete,
        added_delete_files: vec![file],
        ..Default::default()
    };
    commit(store, &ident, changes).await?;
    Ok(())
}

async fn answer(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx
        .sql(sql)
        .await
        .expect("sql")
        .collect()
        .await
        .expect("run");
    arrow::util::pretty::pretty_format_batches(&batches)
        .expect("format")
        .to_string()
}

fn bench_operators(c: &mut Criterion) {
    let rows = rows();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    rt.block_on(setup(dir.path(), rows)).expect("setup");
    let open = |limit: Option<usize>| {
        let mut config = WarehouseConfig::local(dir.path());
        config.memory_limit = limit;
        rt.block_on(IcebergSession::open(config)).expect("session")
    };
    let free = open(None);
    let small = open(Some(4 << 20));
    let joined = open(None);
    rt.block_on(async {
        joined
            .context()
            .sql("SET iceberg.position_delete_join_threshold = 0")
            .await?
            .collect()
            .await
    })
    .expect("set");

    let mut group = c.benchmark_group(format!("delete_operators_{rows}_rows"));
    group.sample_size(10);
    group.throughput(Throughput::Elements(rows as u64));
    let pos_query = QUERY.replace("b.t", "b.p");
    let routes = [
        ("positional/bitmap_row_selection", &free, pos_query.as_str()),
        ("positional/anti_join", &joined, pos_query.as_str()),
        ("equality/hash_join_in_memory", &free, QUERY),
        ("equality/hash_join_spilling_4mib", &small, QUERY),
    ];
    // Each pair of routes must agree before it is timed.
    let answers: Vec<String> = routes
        .iter()
        .map(|(_, s, q)| rt.block_on(answer(s.context(), q)))
        .collect();
    assert_eq!(answers[0], answers[1], "position delete routes agree");
    assert_eq!(answers[2], answers[3], "equality delete routes agree");
    let analyzed = rt.block_on(answer(small.context(), &format!("EXPLAIN ANALYZE {QUERY}")));
    let spilled = analyzed
        .lines()
        .filter(|l| l.contains("EqualityDeleteExec"))
        .any(|l| l.contains("spill_count=") && !l.contains("spill_count=0"));
    assert!(spilled, "the join spills under 4 MiB: {analyzed}");
    for (name, session, query) in routes {
        let ctx = session.context().clone();
        group.bench_function(name, |b| {
            b.iter(|| rt.block_on(answer(&ctx, query)));
        });
    }
    group.finish();
    let reserved = small.context().runtime_env().memory_pool.reserved();
    assert_eq!(reserved, 0, "the 4 MiB pool is empty after the runs");
}

criterion_group!(benches, bench_operators);
criterion_main!(benches);
