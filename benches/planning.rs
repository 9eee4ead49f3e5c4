//! Planning memory with many delete files: a partitioned table whose manifests list
//! `ICEBERG_EXEC_BENCH_DELETE_FILES` delete files (default 200K: three quarters position deletes
//! naming one data file each, a quarter partition-scoped equality deletes) over 2,000 data files.
//! The files themselves are never opened: planning reads manifests only, and `EXPLAIN` plans
//! without executing. A child process plans, so its peak RSS is planning's alone.
//!
//! `cargo bench --bench planning`

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Literal, Operation, Struct};
use iceberg::TableIdent;
use iceberg_exec::snapshot::{commit, NewFile, SnapshotChanges};
use iceberg_exec::{IcebergSession, MetadataStore, WarehouseConfig};

const DATA_FILES: usize = 2000;
const PARTITIONS: i32 = 50;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn file(content: DataContentType, path: String, part: i32, referenced: Option<String>) -> NewFile {
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
    NewFile {
        spec_id: 0,
        file: b.build().expect("data file"),
    }
}

async fn generate(dir: &std::path::Path, deletes: usize) {
    let s = IcebergSession::open(WarehouseConfig::local(dir))
        .await
        .unwrap();
    for q in [
        "CREATE SCHEMA b",
        "CREATE EXTERNAL TABLE b.t (id BIGINT, part INT NOT NULL) STORED AS ICEBERG LOCATION '' PARTITIONED BY (part)",
    ] {
        s.context().sql(q).await.unwrap().collect().await.unwrap();
    }
    let ident = TableIdent::from_strs(["b", "t"]).unwrap();
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    let base = dir.join("b/t/data").display().to_string();
    let data: Vec<NewFile> = (0..DATA_FILES)
        .map(|i| {
            let part = (i % PARTITIONS as usize) as i32;
            file(
                DataContentType::Data,
                format!("{base}/part={part}/d{i}.parquet"),
                part,
                None,
            )
        })
        .collect();
    let paths: Vec<String> = data
        .iter()
        .map(|f| f.file.file_path().to_string())
        .collect();
    commit(Arc::clone(&store), &ident, SnapshotChanges::append(data))
        .await
        .unwrap();
    let added = (0..deletes)
        .map(|i| {
            let target = i % DATA_FILES;
            let part = (target % PARTITIONS as usize) as i32;
            if i % 4 == 3 {
                file(
                    DataContentType::EqualityDeletes,
                    format!("{base}/part={part}/eq{i}.parquet"),
                    part,
                    None,
                )
            } else {
                file(
                    DataContentType::PositionDeletes,
                    format!("{base}/part={part}/pos{i}.parquet"),
                    part,
                    Some(paths[target].clone()),
                )
            }
        })
        .collect();
    let changes = SnapshotChanges {
        operation: Operation::Delete,
        added_delete_files: added,
        ..Default::default()
    };
    commit(store, &ident, changes).await.unwrap();
}

async fn plan(dir: &std::path::Path) {
    let s = IcebergSession::open(WarehouseConfig::local(dir))
        .await
        .unwrap();
    let start = Instant::now();
    let batches = s
        .context()
        .sql("EXPLAIN SELECT count(*) FROM b.t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let scan = text
        .lines()
        .find(|l| l.contains("IcebergScanExec"))
        .unwrap_or_default()
        .trim_matches(|c| c == '|' || c == ' ')
        .to_string();
    println!("{elapsed:.3} {} {scan}", peak_rss_kib());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    if let Some(i) = args.iter().position(|a| a == "--plan") {
        rt.block_on(plan(std::path::Path::new(&args[i + 1])));
        return;
    }
    let deletes: usize = std::env::var("ICEBERG_EXEC_BENCH_DELETE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    rt.block_on(generate(dir.path(), deletes));
    println!(
        "generated {DATA_FILES} data files and {deletes} delete files in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--plan")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut parts = line.splitn(3, ' ');
    let (secs, rss, scan) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("0"),
        parts.next().unwrap_or(""),
    );
    let rss_mib = rss.parse::<f64>().unwrap_or(0.0) / 1024.0;
    println!(
        "planning (EXPLAIN, new process): {secs}s, peak RSS {rss_mib:.0} MiB (target 512 MiB)"
    );
    println!("{scan}");
}
