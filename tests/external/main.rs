//! Tests against real services and clients, started on 127.0.0.1 or installed from PyPI:
//! PostgreSQL, SeaweedFS (S3 and its REST catalog), pyiceberg and DuckDB, and the `iceberg-exec`
//! command line (tests/README.md says where a test goes).

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod interop_pyiceberg;
mod object_storage;
mod postgres_catalog;
mod rest_catalog;
