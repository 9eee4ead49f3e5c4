//! Local integration tests: one module per command or capability (tests/README.md says where a
//! test goes). Everything runs in this process against temporary warehouses on the local file
//! system; nothing outside the repository is read.

#[path = "../common/mod.rs"]
mod common;

mod add_files;
mod bounded_joins;
mod branches;
mod catalog_layout;
mod commit;
mod ddl_insert;
mod delete_update;
mod deletion_vectors;
mod embedding;
mod fixtures;
mod guide;
mod maintenance;
mod merge;
mod merge_on_read;
mod metadata_columns;
mod metadata_tables;
mod names;
mod other_writers;
mod overwrite;
mod producer;
mod pruning;
mod row_lineage;
mod schema_evolution;
mod sort_on_write;
mod splice;
mod time_travel;
