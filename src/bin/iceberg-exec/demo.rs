//! `iceberg-exec demo`: a tour of what the engine is for, on a sample table, in seconds. Each
//! step prints its statement, its answer, its time and one line on what happened.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::error::{DataFusionError, Result};
use iceberg::TableIdent;
use iceberg_exec::commit::MetadataStore;
use iceberg_exec::commit::{commit, SnapshotChanges};
use iceberg_exec::file_planning::plan_files;
use iceberg_exec::physical_plan::write::write_equality_delete_file;
use iceberg_exec::IcebergSession;

use crate::{print_batches, Format};

/// Memory limit of the steps that show spilling.
const SMALL_POOL: usize = 16 << 20;

fn external(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Runs the tour; builds `demo.trips` first when the warehouse has none.
pub(crate) async fn tour(session: &IcebergSession, rows: u64) -> Result<()> {
    let ident = TableIdent::from_strs(["demo", "trips"]).map_err(external)?;
    if session.catalog().table_exists(&ident).await? {
        println!(
            "demo.trips exists (from an earlier demo): the tour goes on from its current state"
        );
    } else {
        build(session, rows).await?;
    }
    let small = IcebergSession::with_catalog(session.catalog().clone(), Some(SMALL_POOL))?;
    let before = session
        .catalog()
        .load_table(&ident)
        .await?
        .metadata()
        .current_snapshot_id();

    step(
        session,
        "1. A partitioned, sorted Iceberg table",
        "SELECT region, count(*) AS trips, round(avg(fare), 2) AS avg_fare FROM demo.trips GROUP BY region ORDER BY region",
        "partitioned by region and month(pickup_ts), written sorted by pickup_ts through a spilling sort",
    )
    .await?;

    let deleted = equality_deletes(session, &ident).await?;
    step(
        session,
        &format!("2. Equality deletes as a streaming writer (Flink) commits them: {deleted} ids"),
        "SELECT count(*) AS live_trips FROM demo.trips",
        "one delete file per partition; applied by a sequence-gated hash join that spills when its keys outgrow memory",
    )
    .await?;

    run(session, "SET iceberg.delete_mode = 'merge-on-read'").await?;
    run(session, "SET iceberg.update_mode = 'merge-on-read'").await?;
    run(session, "SET iceberg.merge_mode = 'merge-on-read'").await?;
    step(
        session,
        "3. A merge-on-read DELETE",
        "DELETE FROM demo.trips WHERE fare > 92.5",
        "no data file rewritten: one position delete file per data file with deleted rows",
    )
    .await?;
    step(
        session,
        "4. A merge-on-read UPDATE",
        "UPDATE demo.trips SET fare = round(fare * 1.1, 2) WHERE passengers = 4 AND distance_km < 2",
        "old versions deleted by position, new versions appended in new files",
    )
    .await?;
    let changes = (rows / 20).max(10);
    let merge = format!(
        "MERGE INTO demo.trips AS t USING (
           SELECT CASE WHEN value % 2 = 0 THEN value * 61 % {rows} + 1 ELSE {rows} + value END AS id,
                  value FROM generate_series(0, {last})) AS s
         ON t.id = s.id
         WHEN MATCHED AND s.value % 10 = 0 THEN DELETE
         WHEN MATCHED THEN UPDATE SET fare = t.fare + 1
         WHEN NOT MATCHED THEN INSERT VALUES
           (s.id, to_timestamp_seconds(1767225599), 'north', 10.0, 1.0, 1)",
        last = changes - 1
    );
    step(
        session,
        &format!("5. MERGE of a change set of {changes} rows (updates, deletes, inserts)"),
        &merge,
        "one join of change set and table; deletes by position, new rows appended; a row matched twice would be an error",
    )
    .await?;
    if let Some(id) = before {
        step(
            session,
            "6. Time travel to before the deletes",
            &format!(
                "SELECT (SELECT count(*) FROM iceberg_scan('demo.trips', 'snapshot_id', {id})) AS trips_then, \
                 (SELECT count(*) FROM demo.trips) AS trips_now"
            ),
            "every change above is a snapshot; the old one still reads as it was",
        )
        .await?;
    }
    plan_step(
        &small,
        "7. EXPLAIN ANALYZE of the merge-on-read scan, 16 MiB pool",
        "EXPLAIN ANALYZE SELECT count(*), round(sum(fare), 2) FROM demo.trips",
        "position deletes (PositionalDeleteExec) and equality deletes (EqualityDeleteExec) applied while scanning",
    )
    .await?;
    plan_step(
        &small,
        "8. EXPLAIN ANALYZE of a sort-on-write INSERT, 16 MiB pool",
        &format!(
            "EXPLAIN ANALYZE INSERT INTO demo.trips SELECT {rows} * 2 + value, \
             to_timestamp_seconds(1735689600 + value * 7919 % 31536000), 'east', 5.0, 1.0, 2 \
             FROM generate_series(1, {})",
            (rows / 3).max(10)
        ),
        "the sort the table's order needs spilled to disk: memory stays within the pool",
    )
    .await?;
    Ok(())
}

/// Builds `demo.trips` (partitioned by region and month, sorted by pickup time).
async fn build(session: &IcebergSession, rows: u64) -> Result<()> {
    println!(
        "Building demo.trips with {rows} rows in catalog '{}' ...",
        session.catalog().name()
    );
    run(session, "CREATE SCHEMA IF NOT EXISTS demo").await?;
    run(
        session,
        "CREATE EXTERNAL TABLE demo.trips (
            id BIGINT NOT NULL, pickup_ts TIMESTAMP, region VARCHAR,
            fare DOUBLE, distance_km DOUBLE, passengers INT)
         STORED AS ICEBERG LOCATION ''
         PARTITIONED BY (region)
         OPTIONS ('partitioning' 'month(pickup_ts)', 'sort-order' 'pickup_ts ASC NULLS LAST')",
    )
    .await?;
    let chunks = rows.div_ceil(500_000).max(1);
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(rows);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} rows  {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let started = Instant::now();
    for chunk in 0..chunks {
        let lo = chunk * rows / chunks + 1;
        let hi = (chunk + 1) * rows / chunks;
        let sql = format!(
            "INSERT INTO demo.trips
             SELECT value AS id,
                    to_timestamp_seconds(1735689600 + value * 7919 % 31536000) AS pickup_ts,
                    CASE value % 4 WHEN 0 THEN 'north' WHEN 1 THEN 'south' WHEN 2 THEN 'east' ELSE 'west' END AS region,
                    CAST(value * 37 % 9000 AS DOUBLE) / 100.0 + 3.0 AS fare,
                    CAST(value * 13 % 4000 AS DOUBLE) / 100.0 AS distance_km,
                    CAST(value % 4 + 1 AS INT) AS passengers
             FROM generate_series({lo}, {hi})"
        );
        run(session, &sql).await?;
        if let Some(b) = &bar {
            b.set_position(hi);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    println!("built in {:.2}s", started.elapsed().as_secs_f64());
    Ok(())
}

async fn run(session: &IcebergSession, sql: &str) -> Result<Vec<RecordBatch>> {
    session.context().sql(sql).await?.collect().await
}

/// Prints a step: its title, statement, answer and time.
async fn step(session: &IcebergSession, title: &str, sql: &str, what: &str) -> Result<()> {
    println!("\n== {title}\n{}", indent(sql));
    let started = Instant::now();
    let df = session.context().sql(sql).await?;
    let schema = df.schema().inner().clone();
    let batches = df.collect().await?;
    let seconds = started.elapsed().as_secs_f64();
    print_batches(&schema, &batches, Format::Table)?;
    println!("({seconds:.3}s) {what}");
    Ok(())
}

/// Like [`step`] for `EXPLAIN ANALYZE`: each plan node with the metrics that tell the story.
async fn plan_step(session: &IcebergSession, title: &str, sql: &str, what: &str) -> Result<()> {
    println!("\n== {title}\n{}", indent(sql));
    let started = Instant::now();
    let batches = run(session, sql).await?;
    let seconds = started.elapsed().as_secs_f64();
    for batch in &batches {
        let plans = batch.column(1).as_string::<i32>();
        for i in 0..plans.len() {
            for line in plans.value(i).lines() {
                println!("  {}", plan_line(line));
            }
        }
    }
    println!("({seconds:.3}s) {what}");
    Ok(())
}

/// A plan line cut to its node name and the metrics worth reading here.
fn plan_line(line: &str) -> String {
    const SHOWN: [&str; 9] = [
        "output_rows",
        "position_deleted_rows",
        "equality_deleted_rows",
        "spill_count",
        "spilled_bytes",
        "rows_written",
        "files_written",
        "bytes_scanned",
        "build_keys",
    ];
    let depth = line.len() - line.trim_start().len();
    let body = line.trim_start();
    let name = body.split([':', ',']).next().unwrap_or(body);
    let metrics: Vec<&str> = body
        .split("metrics=[")
        .nth(1)
        .map(|m| {
            m.trim_end_matches(']')
                .split(", ")
                .filter(|kv| SHOWN.iter().any(|k| kv.starts_with(&format!("{k}="))))
                .collect()
        })
        .unwrap_or_default();
    format!("{}{name} {}", " ".repeat(depth), metrics.join(", "))
}

fn indent(sql: &str) -> String {
    sql.lines()
        .map(|l| format!("  {}", l.trim()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Commits one equality delete file per partition of `demo.trips` deleting the ids divisible
/// by 997 (a global list: each file deletes the listed rows of its own partition). Returns how
/// many rows they delete.
async fn equality_deletes(session: &IcebergSession, ident: &TableIdent) -> Result<usize> {
    let table = session.catalog().load_table(ident).await?;
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(0);
    };
    let keys = run(session, "SELECT * FROM demo.trips WHERE id % 997 = 0").await?;
    let deleted: usize = keys.iter().map(|b| b.num_rows()).sum();
    if deleted == 0 {
        return Ok(0);
    }
    let id = table
        .metadata()
        .current_schema()
        .field_by_name("id")
        .ok_or_else(|| DataFusionError::Plan("demo.trips has no id".into()))?
        .id;
    let mut partitions = vec![];
    for f in plan_files(&table, snapshot).await? {
        if !partitions.contains(&(f.spec_id, f.partition.clone())) {
            partitions.push((f.spec_id, f.partition));
        }
    }
    let mut files = vec![];
    for (spec_id, partition) in partitions {
        files.push(write_equality_delete_file(&table, vec![id], spec_id, partition, &keys).await?);
    }
    let changes = SnapshotChanges {
        operation: iceberg::spec::Operation::Delete,
        added_delete_files: files,
        ..Default::default()
    };
    let store: Arc<dyn MetadataStore> = session.catalog().clone();
    commit(store, ident, changes).await?;
    Ok(deleted)
}
