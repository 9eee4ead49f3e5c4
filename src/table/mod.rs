//! The DataFusion face of one Iceberg table: [`IcebergTableProvider`] (scan, INSERT) and the
//! `CREATE EXTERNAL TABLE ... STORED AS ICEBERG` factory.

mod factory;
mod provider;
pub(crate) mod spec;

pub use factory::IcebergTableFactory;
pub use provider::IcebergTableProvider;
pub use spec::{parse_partitioning, parse_sort_order, TableDefinition};
