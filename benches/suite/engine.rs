//! The Rust side of the benchmark suite (`benches/compare.py` drives it): generates the tables
//! the scenarios read and runs one statement per process, so each run's wall time and peak RSS
//! are its own. Every command prints one JSON document on stdout.
//!
//! ```text
//! bench-engine generate CATALOG [--table NAME] --rows N --files F [--pos-every M] [--eq-keys K]
//!     [--format-version 2|3] [--partitioning 'bucket(16, k)']
//! bench-engine generate-planning --warehouse DIR --delete-files N
//! bench-engine generate-orphans --warehouse DIR --listed N --orphans M
//! bench-engine sql CATALOG --sql SQL [--memory-limit 64M] [--set KEY=VALUE].. [--repeat N]
//!     [--parquet NAME=LISTFILE]..           (parquet files as table bare.public.NAME)
//!     [--workers URL,URL..]                 (feature distributed: run over these workers)
//! bench-engine worker CATALOG [--listen ADDR] (feature distributed: prints {"listening": URL},
//!     then serves until killed)
//! bench-engine datafusion --sql SQL [--parquet NAME=LISTFILE].. [--memory-limit 64M] [--repeat N]
//!     [--set KEY=VALUE]..
//!     [--catalog-prop KEY=VALUE].. [--store s3://BUCKET].. [--cold]
//! ```
//!
//! `CATALOG` is `--warehouse DIR` (a local warehouse with its SQLite catalog) or
//! `--catalog-uri URI [--warehouse URI] [--catalog-prop KEY=VALUE]..` (any catalog the session
//! opens, e.g. an Iceberg REST catalog with its tables on S3; the properties in Iceberg's names).
//! `datafusion` takes the same storage properties for `s3://` files.
//!
//! Tables have the columns `id BIGINT, k BIGINT, value BIGINT, s VARCHAR`; row `g` (0-based) holds
//! `id = g`, `k = g * 7919 % 1000003`, `value = g % 1000`, `s = 'str-' || g % 5000`, one append
//! per data file in id order. Which rows are deleted follows formulas of `id`, so `generate`
//! also prints the SQL condition that keeps exactly the live rows (`live_where`): the oracle
//! evaluates it with plain DataFusion over the bare data files.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::util::display::array_value_to_string;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Literal, Operation, Struct};
use iceberg::TableIdent;
use iceberg_exec::commit::{commit, NewFile, SnapshotChanges};
use iceberg_exec::physical_plan::write::{
    write_deletion_vectors, write_equality_delete_file, write_position_delete_file, DeletionVector,
};
use iceberg_exec::{IcebergSession, MetadataStore, ObjectStores, StorageOptions, WarehouseConfig};
use serde_json::{json, Value};

/// The namespace of every table; the table is `t` unless `--table` names another.
const NAMESPACE: &str = "bench";
/// The table of `generate-planning`.
const TABLE: &str = "bench.t";

struct Args(Vec<String>);

impl Args {
    fn one(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .map(String::as_str)
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .windows(2)
            .filter(|w| w[0] == name)
            .map(|w| w[1].as_str())
            .collect()
    }

    fn need(&self, name: &str) -> Result<&str> {
        self.one(name)
            .ok_or_else(|| DataFusionError::Plan(format!("{name} is required")))
    }

    fn num(&self, name: &str, default: u64) -> Result<u64> {
        self.one(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|e| DataFusionError::Plan(format!("{name} {v}: {e}")))
        })
    }
}

/// Every row of the answer, each value as text.
fn rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>> {
    let mut out = vec![];
    for b in batches {
        for r in 0..b.num_rows() {
            let row = b
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, r))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            out.push(row);
        }
    }
    Ok(out)
}

/// `--catalog-prop KEY=VALUE` pairs.
fn catalog_props(args: &Args) -> Result<BTreeMap<String, String>> {
    args.all("--catalog-prop")
        .into_iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| {
                    DataFusionError::Plan(format!("--catalog-prop {kv}: expected KEY=VALUE"))
                })
        })
        .collect()
}

/// The session of `CATALOG` (see the module documentation).
async fn session(args: &Args, memory_limit: Option<&str>) -> Result<IcebergSession> {
    let mut config = match args.one("--catalog-uri") {
        Some(uri) => WarehouseConfig {
            warehouse: args.one("--warehouse").unwrap_or_default().to_string(),
            catalog_uri: Some(uri.to_string()),
            ..WarehouseConfig::local("")
        },
        None => WarehouseConfig::local(args.need("--warehouse")?),
    };
    config.properties = catalog_props(args)?;
    if let Some(limit) = memory_limit {
        config.memory_limit = Some(iceberg_exec::parse_size(limit)?);
    }
    IcebergSession::open(config).await
}

async fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

/// `generate`: the data table, position deletes every `--pos-every` rows of each file (a
/// position delete file per data file on format 2, a deletion vector per data file in one
/// Puffin file on format 3), and
/// `--eq-keys` equality-deleted ids in two waves: the first committed after half of the appends
/// (so it cannot delete rows appended later), the second after all of them.
async fn generate(args: &Args) -> Result<Value> {
    let rows = args.num("--rows", 10_000_000)?;
    let files = args.num("--files", 20)?.max(1);
    let pos_every = args.num("--pos-every", 0)?;
    let eq_keys = args.num("--eq-keys", 0)?;
    let version = args.num("--format-version", 2)?;
    if !(2..=3).contains(&version) {
        return Err(DataFusionError::Plan(format!(
            "--format-version {version}: 2 or 3"
        )));
    }
    if rows % files != 0 || rows == 0 {
        return Err(DataFusionError::Plan(format!(
            "--rows ({rows}) must be a positive multiple of --files ({files})"
        )));
    }
    let per_file = rows / files;
    let name = args.one("--table").unwrap_or("t");
    let table_name = format!("{NAMESPACE}.{name}");
    let s = session(args, None).await?;
    let ctx = s.context().clone();
    run(&ctx, &format!("CREATE SCHEMA IF NOT EXISTS {NAMESPACE}")).await?;
    let columns = "(id BIGINT, k BIGINT, value BIGINT, s VARCHAR)";
    let create = match args.one("--partitioning") {
        Some(p) => format!(
            "CREATE EXTERNAL TABLE {table_name} {columns} STORED AS ICEBERG LOCATION '' \
             OPTIONS ('partitioning' '{}')",
            p.replace('\'', "''")
        ),
        None => format!("CREATE TABLE {table_name} {columns}"),
    };
    run(&ctx, &create).await?;
    if version == 3 {
        s.sql(&format!(
            "ALTER TABLE {table_name} SET TBLPROPERTIES ('format-version' = '3')"
        ))
        .await?
        .collect()
        .await?;
    }
    let ident = TableIdent::from_strs([NAMESPACE, name])
        .map_err(|e| DataFusionError::External(e.into()))?;
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let (k1, k2) = (eq_keys / 2, eq_keys - eq_keys / 2);
    let half = files / 2;
    let mut dead = vec![];
    for f in 0..files {
        if f == half && k1 > 0 {
            dead.push(equality_wave(&s, &store, &ident, rows, k1, 1, Some(half * per_file)).await?);
        }
        let (lo, hi) = (f * per_file, (f + 1) * per_file - 1);
        run(
            &ctx,
            &format!(
                "INSERT INTO {table_name} SELECT value, value * 7919 % 1000003, value % 1000, \
                 'str-' || CAST(value % 5000 AS VARCHAR) FROM generate_series({lo}, {hi})"
            ),
        )
        .await?;
    }
    if k2 > 0 {
        dead.push(equality_wave(&s, &store, &ident, rows, k2, 2, None).await?);
    }
    if pos_every > 0 {
        let table = s.catalog().load_table(&ident).await?;
        let snapshot = table
            .metadata()
            .current_snapshot()
            .cloned()
            .ok_or_else(|| DataFusionError::Internal("no snapshot".into()))?;
        let mut added = vec![];
        let mut vectors = vec![];
        let r = 3 % pos_every;
        for file in iceberg_exec::file_planning::plan_files(&table, &snapshot).await? {
            // Positions are where the deleted ids sit in the file, read from the file itself.
            let positions: Vec<(String, i64)> = file_ids(&table, &file.path)
                .await?
                .into_iter()
                .enumerate()
                .filter(|(_, id)| id.rem_euclid(pos_every as i64) == r as i64)
                .map(|(p, _)| (file.path.clone(), p as i64))
                .collect();
            if positions.is_empty() {
                continue;
            }
            if version == 3 {
                vectors.push(DeletionVector {
                    data_file: file.path.clone(),
                    spec_id: 0,
                    partition: Struct::empty(),
                    positions: positions.iter().map(|(_, p)| *p as u64).collect(),
                });
            } else {
                added
                    .push(write_position_delete_file(&table, 0, Struct::empty(), positions).await?);
            }
        }
        added.extend(write_deletion_vectors(&table, &vectors).await?);
        let changes = SnapshotChanges {
            operation: Operation::Delete,
            added_delete_files: added,
            ..Default::default()
        };
        commit(Arc::clone(&store), &ident, changes).await?;
        dead.push(format!("id % {pos_every} = {}", 3 % pos_every));
    }
    let table = s.catalog().load_table(&ident).await?;
    let snapshot = table
        .metadata()
        .current_snapshot()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal("no snapshot".into()))?;
    let data_files: Vec<String> = iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await?
        .into_iter()
        .map(|f| local_path(&f.path))
        .collect();
    let live_where = match dead.is_empty() {
        true => "true".to_string(),
        false => format!("NOT ({})", dead.join(" OR ")),
    };
    Ok(json!({
        "table": table_name,
        "snapshot_id": snapshot.snapshot_id(),
        "metadata": local_path(table.metadata_location().unwrap_or_default()),
        "data_files": data_files,
        "rows": rows,
        "live_where": live_where,
    }))
}

/// A `file://` location as a path; any other location as it is.
fn local_path(location: &str) -> String {
    location
        .strip_prefix("file://")
        .unwrap_or(location)
        .to_string()
}

/// The `id` column of a data file, in row order, read through the table's storage.
async fn file_ids(table: &iceberg::table::Table, path: &str) -> Result<Vec<i64>> {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    let external = |e: iceberg::Error| DataFusionError::External(e.into());
    let bytes = table
        .file_io()
        .new_input(path)
        .map_err(external)?
        .read()
        .await
        .map_err(external)?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), [0]);
    let mut ids = vec![];
    for batch in builder.with_projection(mask).build()? {
        ids.extend(
            batch?
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .copied(),
        );
    }
    Ok(ids)
}

/// One wave of `keys` equality-deleted ids, `id = j * (rows / keys) + offset`; with `below`, only
/// rows with smaller ids are in files older than the wave. Returns the condition of the rows it
/// deletes.
async fn equality_wave(
    s: &IcebergSession,
    store: &Arc<dyn MetadataStore>,
    ident: &TableIdent,
    rows: u64,
    keys: u64,
    offset: u64,
    below: Option<u64>,
) -> Result<String> {
    let step = (rows / keys).max(1);
    let table = s.catalog().load_table(ident).await?;
    let ids: Vec<i64> = (0..keys).map(|j| (j * step + offset) as i64).collect();
    let n = ids.len();
    // Delete files carry the whole row shape; only `id` (field 1) is the key.
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        ("k", Arc::new(Int64Array::from(vec![0i64; n])) as ArrayRef),
        (
            "value",
            Arc::new(Int64Array::from(vec![0i64; n])) as ArrayRef,
        ),
        (
            "s",
            Arc::new(arrow::array::StringArray::from(vec!["x"; n])) as ArrayRef,
        ),
    ])?;
    let file = write_equality_delete_file(&table, vec![1], 0, Struct::empty(), &[batch]).await?;
    let changes = SnapshotChanges {
        operation: Operation::Delete,
        added_delete_files: vec![file],
        ..Default::default()
    };
    commit(Arc::clone(store), ident, changes).await?;
    let last = (keys - 1) * step + offset;
    let mut cond = format!("(id % {step} = {offset} AND id <= {last}");
    if let Some(below) = below {
        cond.push_str(&format!(" AND id < {below}"));
    }
    cond.push(')');
    Ok(cond)
}

fn planning_file(
    content: DataContentType,
    path: String,
    part: i32,
    referenced: Option<String>,
) -> Result<NewFile> {
    let mut b = DataFileBuilder::default();
    b.content(content)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::from_iter([Some(Literal::int(part))]))
        .partition_spec_id(0)
        .record_count(1000)
        .file_size_in_bytes(50_000)
        .referenced_data_file(referenced);
    if content == DataContentType::EqualityDeletes {
        b.equality_ids(Some(vec![1]));
    }
    Ok(NewFile {
        spec_id: 0,
        file: b.build().map_err(|e| DataFusionError::External(e.into()))?,
    })
}

/// `bench.t (id BIGINT, part INT NOT NULL)` partitioned by `part`.
async fn create_partitioned_table(s: &IcebergSession) -> Result<()> {
    run(s.context(), "CREATE SCHEMA bench").await?;
    run(
        s.context(),
        &format!(
            "CREATE EXTERNAL TABLE {TABLE} (id BIGINT, part INT NOT NULL) STORED AS ICEBERG \
             LOCATION '' PARTITIONED BY (part)"
        ),
    )
    .await?;
    Ok(())
}

/// `generate-planning`: a partitioned table whose manifests list `--data-files` data files and
/// `--delete-files` delete files (three quarters position deletes naming one data file, a
/// quarter partition-scoped equality deletes). The files are never written: planning reads
/// manifests only, and the scenario plans with `EXPLAIN`.
async fn generate_planning(args: &Args) -> Result<Value> {
    let warehouse = args.need("--warehouse")?;
    let deletes = args.num("--delete-files", 200_000)? as usize;
    let data_files = args.num("--data-files", 2000)?.max(1) as usize;
    let partitions = 50usize;
    let s = session(args, None).await?;
    create_partitioned_table(&s).await?;
    let ident =
        TableIdent::from_strs(["bench", "t"]).map_err(|e| DataFusionError::External(e.into()))?;
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let base = format!("{warehouse}/bench/t/data");
    let data = (0..data_files)
        .map(|i| {
            let part = (i % partitions) as i32;
            planning_file(
                DataContentType::Data,
                format!("{base}/part={part}/d{i}.parquet"),
                part,
                None,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let paths: Vec<String> = data
        .iter()
        .map(|f| f.file.file_path().to_string())
        .collect();
    commit(Arc::clone(&store), &ident, SnapshotChanges::append(data)).await?;
    let added = (0..deletes)
        .map(|i| {
            let target = i % data_files;
            let part = (target % partitions) as i32;
            match i % 4 == 3 {
                true => planning_file(
                    DataContentType::EqualityDeletes,
                    format!("{base}/part={part}/eq{i}.parquet"),
                    part,
                    None,
                ),
                false => planning_file(
                    DataContentType::PositionDeletes,
                    format!("{base}/part={part}/pos{i}.parquet"),
                    part,
                    Some(paths[target].clone()),
                ),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let changes = SnapshotChanges {
        operation: Operation::Delete,
        added_delete_files: added,
        ..Default::default()
    };
    let out = commit(store, &ident, changes).await?;
    Ok(json!({
        "table": TABLE,
        "metadata": out.table.metadata_location().unwrap_or_default().trim_start_matches("file://"),
        "data_files": [],
        "rows": 0,
        "live_where": "true",
    }))
}

/// `sql`: runs `--sql` through iceberg-exec (after `--set` options), timed, and reports the
/// pool's reservation afterwards.
async fn sql(args: &Args) -> Result<Value> {
    let s = session(args, args.one("--memory-limit")).await?;
    #[cfg(feature = "distributed")]
    let s = match args.one("--workers") {
        Some(list) => s.with_workers(
            list.split(',')
                .map(|u| {
                    u.parse()
                        .map_err(|e| DataFusionError::Plan(format!("--workers {u}: {e}")))
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        None => s,
    };
    #[cfg(not(feature = "distributed"))]
    if args.one("--workers").is_some() {
        return Err(DataFusionError::Plan(
            "--workers needs bench-engine built with the distributed feature".into(),
        ));
    }
    let ctx = s.context();
    // Parquet files to load from, as tables of the catalog `bare` (schema `public`).
    if !args.all("--parquet").is_empty() {
        use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
        let bare = Arc::new(MemoryCatalogProvider::new());
        let public = Arc::new(MemorySchemaProvider::new());
        for (name, files) in parquet_tables(args)? {
            let df = ctx
                .read_parquet(files, ParquetReadOptions::default())
                .await?;
            datafusion::catalog::SchemaProvider::register_table(
                public.as_ref(),
                name.to_string(),
                df.into_view(),
            )?;
        }
        bare.register_schema("public", public)?;
        ctx.register_catalog("bare", bare);
    }
    for kv in args.all("--set") {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| DataFusionError::Plan(format!("--set {kv}: expected KEY=VALUE")))?;
        run(ctx, &format!("SET {k} = '{v}'")).await?;
    }
    // The phases of the timed statement: the logical plan (the table's metadata loaded from
    // the catalog), the physical plan (its files planned from the manifests), the execution.
    let started = Instant::now();
    // Through the session's own entry point: CALL and ALTER TABLE run there (eagerly).
    let df = s.sql(args.need("--sql")?).await?;
    let logical = started.elapsed().as_secs_f64();
    let plan = df.create_physical_plan().await?;
    let physical = started.elapsed().as_secs_f64();
    let answer = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await?;
    let seconds = started.elapsed().as_secs_f64();
    let warm = warm_runs(args, &answer, || async {
        s.sql(args.need("--sql")?).await?.collect().await
    })
    .await?;
    let reserved = ctx.runtime_env().memory_pool.reserved();
    let all = rows(&answer)?;
    Ok(json!({
        "seconds": seconds,
        "warm_s": warm,
        "phases_s": {"logical": logical, "physical": physical - logical, "execute": seconds - physical},
        "answer": all.first(),
        "rows": all,
        "reserved_after": reserved,
    }))
}

/// `--repeat N`: the seconds of N - 1 more runs of the same (read-only) statement in this
/// process, warm (what an embedding engine sees on its second query); each must answer as the
/// first did.
async fn warm_runs<F, Fut>(args: &Args, answer: &[RecordBatch], mut again: F) -> Result<Vec<f64>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<RecordBatch>>>,
{
    let mut warm = vec![];
    for _ in 1..args.num("--repeat", 1)? {
        let started = Instant::now();
        let batches = again().await?;
        warm.push(started.elapsed().as_secs_f64());
        if rows(&batches)? != rows(answer)? {
            return Err(DataFusionError::Execution(
                "--repeat: a repeated run answered differently".into(),
            ));
        }
    }
    Ok(warm)
}

/// `worker`: a worker of distributed queries over `CATALOG`'s storage; prints its URL as JSON,
/// then serves until the process is killed.
#[cfg(feature = "distributed")]
async fn worker(args: &Args) -> Result<Value> {
    use std::io::Write;
    let s = session(args, args.one("--memory-limit")).await?;
    let listen = args.one("--listen").unwrap_or("127.0.0.1:0");
    let addr = listen
        .parse()
        .map_err(|e| DataFusionError::Plan(format!("--listen {listen}: {e}")))?;
    let worker = iceberg_exec::distributed::worker(s.context().runtime_env());
    let (url, server) = iceberg_exec::distributed::serve_worker(worker, addr).await?;
    println!("{}", json!({ "listening": url.as_str() }));
    std::io::stdout().flush()?;
    server
        .await
        .map_err(|e| DataFusionError::Execution(format!("worker stopped: {e}")))??;
    Ok(json!({ "stopped": url.as_str() }))
}

/// The `--parquet NAME=LISTFILE` options: each table's name and its files (one per line of
/// the list file).
fn parquet_tables(args: &Args) -> Result<Vec<(String, Vec<String>)>> {
    args.all("--parquet")
        .into_iter()
        .map(|spec| {
            let (name, list) = spec.split_once('=').ok_or_else(|| {
                DataFusionError::Plan(format!("--parquet {spec}: expected NAME=LISTFILE"))
            })?;
            let files = std::fs::read_to_string(list)?
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            Ok((name.to_string(), files))
        })
        .collect()
}

/// `datafusion`: plain DataFusion (the physical limit), parquet files registered as tables.
async fn datafusion_sql(args: &Args) -> Result<Value> {
    let mut config = SessionConfig::new();
    config.options_mut().execution.target_partitions = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = args.one("--memory-limit") {
        runtime = runtime.with_memory_pool(Arc::new(FairSpillPool::new(iceberg_exec::parse_size(
            limit,
        )?)));
    }
    let runtime = runtime.build_arc()?;
    let ctx = SessionContext::new_with_config_rt(config, Arc::clone(&runtime));
    for kv in args.all("--set") {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| DataFusionError::Plan(format!("--set {kv}: expected KEY=VALUE")))?;
        run(&ctx, &format!("SET {k} = '{v}'")).await?;
    }
    // With --cold the clock covers registering the files too (DataFusion reads every footer
    // then, for the schema): what a first query over the files costs.
    let registration = Instant::now();
    let stores = ObjectStores::new(
        Arc::clone(&runtime.object_store_registry),
        StorageOptions::new(catalog_props(args)?),
    );
    // Stores written to (a COPY's target) or read without a file list.
    for url in args.all("--store") {
        stores.register_in(&runtime, &ObjectStoreUrl::parse(url)?)?;
    }
    for (name, files) in parquet_tables(args)? {
        for file in files.iter().filter(|f| f.contains("://")) {
            let url = ObjectStoreUrl::parse(file.split('/').take(3).collect::<Vec<_>>().join("/"))?;
            stores.register_in(&runtime, &url)?;
        }
        let df = ctx
            .read_parquet(files, ParquetReadOptions::default())
            .await?;
        ctx.register_table(name, df.into_view())?;
    }
    let started = match args.0.iter().any(|a| a == "--cold") {
        true => registration,
        false => Instant::now(),
    };
    let answer = run(&ctx, args.need("--sql")?).await?;
    let seconds = started.elapsed().as_secs_f64();
    let sql = args.need("--sql")?;
    let warm = warm_runs(args, &answer, || run(&ctx, sql)).await?;
    let all = rows(&answer)?;
    Ok(json!({
        "seconds": seconds,
        "warm_s": warm,
        "answer": all.first(),
        "rows": all,
    }))
}

/// `generate-orphans`: a table whose manifests list `--listed` minus `--orphans` data files,
/// all created (empty) under its data directory, next to `--orphans` files no snapshot lists:
/// the `remove_orphan_files` scenario lists them all and reads every manifest entry.
async fn generate_orphans(args: &Args) -> Result<Value> {
    let warehouse = args.need("--warehouse")?;
    let listed = args.num("--listed", 2_000_000)? as usize;
    let orphans = args.num("--orphans", 10_000)? as usize;
    let referenced = listed.saturating_sub(orphans);
    let partitions = 50usize;
    let s = session(args, None).await?;
    create_partitioned_table(&s).await?;
    let ident =
        TableIdent::from_strs(["bench", "t"]).map_err(|e| DataFusionError::External(e.into()))?;
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let base = format!("{warehouse}/bench/t/data");
    for part in 0..partitions {
        std::fs::create_dir_all(format!("{base}/part={part}"))?;
    }
    // Ten appends, so the listing meets ten manifests' worth of entries.
    let per_commit = referenced.div_ceil(10).max(1);
    let mut i = 0;
    while i < referenced {
        let end = (i + per_commit).min(referenced);
        let mut files = Vec::with_capacity(end - i);
        for j in i..end {
            let part = (j % partitions) as i32;
            let path = format!("{base}/part={part}/d{j}.parquet");
            std::fs::File::create(&path)?;
            files.push(planning_file(DataContentType::Data, path, part, None)?);
        }
        commit(Arc::clone(&store), &ident, SnapshotChanges::append(files)).await?;
        i = end;
    }
    for j in 0..orphans {
        let part = j % partitions;
        std::fs::File::create(format!("{base}/part={part}/orphan-{j}.parquet"))?;
    }
    Ok(json!({
        "table": TABLE,
        "data_files": [],
        "rows": 0,
        "live_where": "true",
        "listed": listed,
        "orphans": orphans,
    }))
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = argv.first().cloned() else {
        eprintln!("usage: bench-engine generate|generate-planning|sql|datafusion [options]");
        std::process::exit(2);
    };
    let args = Args(argv);
    let out = match command.as_str() {
        "generate" => generate(&args).await,
        "generate-planning" => generate_planning(&args).await,
        "generate-orphans" => generate_orphans(&args).await,
        "sql" => sql(&args).await,
        "datafusion" => datafusion_sql(&args).await,
        #[cfg(feature = "distributed")]
        "worker" => worker(&args).await,
        other => Err(DataFusionError::Plan(format!("unknown command {other}"))),
    };
    match out {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("bench-engine {command}: {e}");
            std::process::exit(1);
        }
    }
}
