//! What `DELETE`, `UPDATE` and `MERGE` share: the table a statement changes, its write mode,
//! the one-row `count` node's properties, plans run through the session's physical optimizer, the files a commit removes along with data files,
//! and the commit that removes what the statement wrote when it fails.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{Partitioning, PlanProperties, SendableRecordBatchStream};
use iceberg::spec::TableMetadata;
use iceberg::table::Table;

use crate::commit::MetadataStore;
use crate::physical_plan::commit::count_schema;
use crate::storage::location::LocationMap;

/// The table a statement changes, as the provider holds it.
pub(crate) struct DmlTarget<'a> {
    pub table: &'a Table,
    pub store: Arc<dyn MetadataStore>,
    pub locations: &'a LocationMap,
}

/// How a `DELETE` or `UPDATE` changes rows in files it does not drop whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteMode {
    /// Rewrite the files without the deleted rows.
    CopyOnWrite,
    /// Write position delete files.
    MergeOnRead,
}

impl WriteMode {
    /// The mode a session option (`option`, its value `session`; empty: unset) or else a table
    /// property (`property`) gives; copy-on-write when neither is set.
    pub(crate) fn from_setting(
        metadata: &TableMetadata,
        session: &str,
        property: &str,
        option: &str,
    ) -> Result<Self> {
        let (value, source) = if session.is_empty() {
            match metadata.properties().get(property) {
                Some(v) => (v.as_str(), format!("table property {property}")),
                None => return Ok(Self::CopyOnWrite),
            }
        } else {
            (session, option.to_string())
        };
        match value.to_ascii_lowercase().as_str() {
            "copy-on-write" => Ok(Self::CopyOnWrite),
            "merge-on-read" => Ok(Self::MergeOnRead),
            other => Err(DataFusionError::Configuration(format!(
                "{source} must be 'copy-on-write' or 'merge-on-read', got '{other}'"
            ))),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::CopyOnWrite => "copy-on-write",
            Self::MergeOnRead => "merge-on-read",
        }
    }
}

/// The properties of a statement node: one partition, one final row (`count`).
pub(crate) fn count_properties() -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(count_schema()),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// Errors unless `partition` is 0 (statement nodes have one partition).
pub(crate) fn only_partition(node: &str, partition: usize) -> Result<()> {
    match partition {
        0 => Ok(()),
        p => Err(DataFusionError::Internal(format!(
            "{node} has one partition, asked for {p}"
        ))),
    }
}

/// The output of a statement node: one row, `count`, once `statement` has run.
pub(crate) fn count_stream(
    statement: impl std::future::Future<Output = Result<u64>> + Send + 'static,
) -> SendableRecordBatchStream {
    let stream = futures::stream::once(async move {
        let n = statement.await?;
        let array = Arc::new(UInt64Array::from(vec![n])) as ArrayRef;
        Ok(RecordBatch::try_new(count_schema(), vec![array])?)
    });
    Box::pin(RecordBatchStreamAdapter::new(count_schema(), stream))
}
