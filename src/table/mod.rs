//! The DataFusion face of one Iceberg table: [`IcebergTableProvider`] (scan, INSERT) and the
//! `CREATE EXTERNAL TABLE ... STORED AS ICEBERG` factory.

pub(crate) mod alter;
mod by_path;
mod factory;
mod function;
pub(crate) mod metadata_columns;
pub(crate) mod provider;
mod snapshots;
pub(crate) mod spec;
pub(crate) mod subquery;

pub use by_path::{find_metadata_file, open_table_at};
pub use factory::IcebergTableFactory;
pub use function::IcebergScanFunction;
pub use provider::{IcebergTableProvider, ProviderPin};
pub use snapshots::IcebergSnapshotsFunction;
pub use spec::{parse_partitioning, parse_sort_order, TableDefinition};

/// Whether `sql` is a statement [`crate::IcebergSession::sql`] runs itself rather than handing
/// to DataFusion as it is (`ALTER TABLE`, `CALL system.<procedure>(..)`,
/// `DELETE`/`UPDATE` with subqueries, `UPDATE ... FROM`, `DROP TABLE`, `CREATE OR REPLACE`).
pub fn is_session_statement(sql: &str) -> bool {
    alter::parse(sql).is_some()
        || crate::maintenance::is_call(sql)
        || crate::table::subquery::one_statement(sql)
            .is_some_and(|s| crate::table::subquery::runs_in_session(&s))
}
