//! Error conversions between the iceberg crate, sqlx and DataFusion.

use datafusion::error::DataFusionError;

/// Wraps an [`iceberg::Error`] as a DataFusion error, keeping the cause.
pub(crate) fn iceberg_err(e: iceberg::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Wraps a catalog database error, naming what was being done.
pub(crate) fn db_err(what: &str, e: sqlx::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e)).context(format!("catalog database: {what}"))
}

/// Extension to turn `iceberg::Result` into `datafusion::Result`.
pub(crate) trait IcebergResultExt<T> {
    /// Converts the error, keeping the cause.
    fn df(self) -> datafusion::error::Result<T>;
}

impl<T> IcebergResultExt<T> for iceberg::Result<T> {
    fn df(self) -> datafusion::error::Result<T> {
        self.map_err(iceberg_err)
    }
}
