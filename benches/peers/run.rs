//! Runs the comparison peers that live outside this crate (shared by the benchmarks).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The iceberg-datafusion 0.10.1 peer (benches/peers/iceberg-datafusion), when built.
pub fn peer_binary() -> Option<PathBuf> {
    let path = match std::env::var_os("ICEBERG_EXEC_PEER_ICEBERG_DATAFUSION") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache/iceberg-exec-peers-target/release/iceberg-datafusion-peer"),
    };
    if path.exists() {
        return Some(path);
    }
    eprintln!(
        "iceberg-datafusion skipped: build it with CARGO_TARGET_DIR=~/.cache/iceberg-exec-peers-target \
         cargo build --release --manifest-path benches/peers/iceberg-datafusion/Cargo.toml"
    );
    None
}

/// Runs `query` (`{t}` for the table) `runs` times with iceberg-datafusion over the table of
/// `metadata`, killed after `cap_s` seconds per run: `Err(cap_s)` then, else the median time and
/// the answer's first row.
pub fn iceberg_datafusion(
    metadata: &str,
    query: &str,
    runs: usize,
    cap_s: u64,
) -> Option<Result<(f64, String), u64>> {
    let binary = peer_binary()?;
    let mut child = Command::new(binary)
        .args([metadata, query])
        .arg(runs.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed().as_secs() >= cap_s * runs as u64 => {
                let _ = child.kill();
                let _ = child.wait();
                return Some(Err(cap_s));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(_) => return None,
        }
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        eprintln!(
            "iceberg-datafusion failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(Ok((v["median_s"].as_f64()?, v["answer"].to_string())))
}
