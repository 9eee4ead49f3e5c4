//! The Python venv the interop tests run real clients from (pyiceberg, DuckDB, SeaweedFS),
//! created and filled from tests/interop/requirements.txt on first use
//! (`$ICEBERG_EXEC_VENV`, default `~/.cache/iceberg-exec-venv`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root: the one cargo runs the test in (a test binary built from another
/// clone sharing the target directory still reads this clone's files).
pub fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The venv directory, created and filled when missing or stale.
pub fn venv() -> &'static Path {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let venv = std::env::var_os("ICEBERG_EXEC_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                    .join(".cache/iceberg-exec-venv")
            });
        let py = venv.join("bin/python");
        let reqs = repo().join("tests/interop/requirements.txt");
        let wanted = std::fs::read_to_string(&reqs).expect("requirements.txt");
        let stamp = venv.join("requirements.installed");
        if !py.exists() || std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str())
        {
            let ok = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 -m venv")
                .success();
            assert!(ok, "creating the venv failed");
            let ok = Command::new(&py)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "-r",
                ])
                .arg(&reqs)
                .status()
                .expect("pip install")
                .success();
            assert!(ok, "pip install -r {} failed", reqs.display());
            std::fs::write(&stamp, wanted).expect("stamp");
        }
        venv
    })
}

/// The venv's python.
pub fn python() -> PathBuf {
    venv().join("bin/python")
}
