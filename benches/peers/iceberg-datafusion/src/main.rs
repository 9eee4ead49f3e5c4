//! Runs a query over an Iceberg table with iceberg-datafusion 0.10.1 (the comparison peer of
//! iceberg-exec's benchmarks) and prints one JSON line: the median wall time of the runs, every
//! run's time, and the answer's first row.
//!
//! `iceberg-datafusion-peer <metadata.json> "<SQL with {t} for the table>" [runs]`

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::util::display::array_value_to_string;
use datafusion::prelude::{SessionConfig, SessionContext};
use iceberg::io::FileIO;
use iceberg::table::StaticTable;
use iceberg::TableIdent;
use iceberg_datafusion::IcebergStaticTableProvider;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: iceberg-datafusion-peer <metadata.json> <sql with {t}> [runs]".into());
    }
    let metadata = args[1].trim_start_matches("file://").to_string();
    let runs: usize = args.get(3).map(|r| r.parse()).transpose()?.unwrap_or(3);
    let file_io = FileIO::new_with_fs();
    let table =
        StaticTable::from_metadata_file(&metadata, TableIdent::from_strs(["bench", "t"])?, file_io)
            .await?
            .into_table();
    let provider = IcebergStaticTableProvider::try_new_from_table(table).await?;
    let config = SessionConfig::new().with_target_partitions(2);
    let ctx = SessionContext::new_with_config(config);
    ctx.register_table("t", Arc::new(provider))?;
    let sql = args[2].replace("{t}", "t");
    let mut times = vec![];
    let mut answer = vec![];
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let batches = ctx.sql(&sql).await?.collect().await?;
        times.push(start.elapsed().as_secs_f64());
        answer = match batches.iter().find(|b| b.num_rows() > 0) {
            Some(b) => (0..b.num_columns())
                .map(|c| array_value_to_string(b.column(c), 0))
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![],
        };
    }
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[sorted.len() / 2];
    println!(
        "{}",
        serde_json::json!({"median_s": median, "times_s": times, "answer": answer})
    );
    Ok(())
}
