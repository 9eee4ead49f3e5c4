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

pub use by_path::{find_metadata_file, open_table_at};
pub use factory::IcebergTableFactory;
pub use function::IcebergScanFunction;
pub use provider::{IcebergTableProvider, ProviderPin};
pub use snapshots::IcebergSnapshotsFunction;
pub use spec::{parse_partitioning, parse_sort_order, TableDefinition};

/// Makes the store of `url` known to the session that plans a scan reading from it.
pub(crate) fn register_store(
    state: &dyn datafusion::catalog::Session,
    stores: &std::sync::Arc<crate::storage::ObjectStores>,
    url: &datafusion::execution::object_store::ObjectStoreUrl,
) -> datafusion::error::Result<()> {
    if url.as_str() == "file:///" {
        return Ok(());
    }
    stores.register_in(state.runtime_env(), url)
}

/// Whether `sql` is a statement [`crate::IcebergSession::sql`] runs itself rather than handing
/// to DataFusion as it is (`ALTER TABLE ... SET|UNSET TBLPROPERTIES`, `CALL system.<procedure>(..)`,
/// `DELETE`/`UPDATE` with subqueries, `UPDATE ... FROM`, `DROP TABLE`, `CREATE OR REPLACE`).
pub fn is_session_statement(sql: &str) -> bool {
    alter::parse(sql).is_some()
        || crate::maintenance::is_call(sql)
        || crate::dml::subquery::one_statement(sql)
            .is_some_and(|s| crate::dml::subquery::runs_in_session(&s))
}
