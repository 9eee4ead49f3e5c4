//! Files that are not Iceberg tables, as a session reads them: DataFusion's listing tables
//! (`CREATE EXTERNAL TABLE x STORED AS PARQUET | CSV | JSON LOCATION '..'`) and files named in
//! place of a table (`SELECT * FROM 'data/f.parquet'`, as `datafusion-cli` reads them). They are
//! read in place and read-only: writes go to Iceberg tables, and importing is explicit
//! (`CREATE TABLE ns.t USING iceberg AS SELECT * FROM x`).

use std::borrow::Cow;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{ScanArgs, ScanResult, Session};
use datafusion::common::{Constraints, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

/// The file extensions a name in place of a table is read as a file by.
const FILE_EXTENSIONS: [&str; 6] = [".parquet", ".csv", ".json", ".ndjson", ".avro", ".arrow"];

/// Whether a table name as written names a file or a directory (a path or URL) rather than a
/// table: it holds a `/` or ends in a file extension DataFusion reads.
pub(crate) fn names_a_file(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    name.contains('/') || FILE_EXTENSIONS.iter().any(|e| lower.ends_with(e))
}

/// A table over files read in place ([`TableProvider`] of DataFusion's listing tables), which
/// refuses writes.
#[derive(Debug)]
pub(crate) struct FilesInPlace {
    inner: Arc<dyn TableProvider>,
    name: String,
}

impl FilesInPlace {
    /// `inner` (a listing table), known as `name`, read-only.
    pub(crate) fn new(inner: Arc<dyn TableProvider>, name: impl Into<String>) -> Self {
        Self {
            inner,
            name: name.into(),
        }
    }
}

#[async_trait]
impl TableProvider for FilesInPlace {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn constraints(&self) -> Option<&Constraints> {
        self.inner.constraints()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn get_table_definition(&self) -> Option<&str> {
        self.inner.get_table_definition()
    }

    fn get_logical_plan(&'_ self) -> Option<Cow<'_, LogicalPlan>> {
        self.inner.get_logical_plan()
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.inner.get_column_default(column)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner.scan(state, projection, filters, limit).await
    }

    async fn scan_with_args<'a>(
        &self,
        state: &dyn Session,
        args: ScanArgs<'a>,
    ) -> Result<ScanResult> {
        self.inner.scan_with_args(state, args).await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    fn statistics(&self) -> Option<Statistics> {
        self.inner.statistics()
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        _input: Arc<dyn ExecutionPlan>,
        _insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::Plan(format!(
            "'{}' reads files in place and is read-only; to copy its rows into an Iceberg \
             table: CREATE TABLE ns.t USING iceberg AS SELECT * FROM ...",
            self.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::names_a_file;

    #[test]
    fn paths_and_file_names_name_files_and_table_names_do_not() {
        for name in [
            "data/f.parquet",
            "f.parquet",
            "F.CSV",
            "s3://bucket/prefix/",
            "/tmp/x",
        ] {
            assert!(names_a_file(name), "{name}");
        }
        for name in ["events", "parquet", "my_csv", "t.v2"] {
            assert!(!names_a_file(name), "{name}");
        }
    }
}
