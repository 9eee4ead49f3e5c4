//! What the planning of `DELETE`, `UPDATE` and `MERGE` shares: the table a statement changes and
//! its write mode. (Their node, its retry loop and counters: `physical_plan::statement`; the
//! commit with clean-up and the files a removal takes along: `commit`.)

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::TableMetadata;
use iceberg::table::Table;

use crate::commit::{MetadataStore, WriteTo};
use crate::storage::location::LocationMap;

/// The table a statement changes, as the provider holds it.
#[derive(Clone)]
pub(crate) struct DmlTarget<'a> {
    pub table: &'a Table,
    pub store: Arc<dyn MetadataStore>,
    pub locations: &'a LocationMap,
    /// Where its snapshot goes (and so which head it reads).
    pub write_to: WriteTo,
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
