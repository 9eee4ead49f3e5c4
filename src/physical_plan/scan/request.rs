//! What a scan is asked for ([`ScanRequest`]), and the hidden per-file columns it may add.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use iceberg::table::Table;

use crate::storage::location::LocationMap;

/// Hidden per-file column: the index of the data file's
/// [`FileGate`](crate::physical_plan::equality_delete::FileGate) (sequence number and
/// partition scope) for the equality-delete joins.
pub(super) const GATE_COLUMN: &str = "__iceberg_gate";
/// Hidden per-file column: the data file's location as recorded in its manifest.
pub(crate) const FILE_COLUMN: &str = "__iceberg_file";

/// What a scan reads.
pub(crate) struct ScanRequest<'a> {
    pub table: &'a Table,
    /// The schema rows are read into (the snapshot's or the table's current one).
    pub read_schema: &'a iceberg::spec::Schema,
    /// Its Arrow form.
    pub schema: &'a SchemaRef,
    pub projection: Option<&'a Vec<usize>>,
    /// Whether the query filters rows (then row counts are upper bounds).
    pub filtered: bool,
    pub limit: Option<usize>,
    pub locations: &'a LocationMap,
    /// The object stores the files are read from.
    pub stores: &'a Arc<crate::storage::ObjectStores>,
    /// Whether the output ends with [`FILE_COLUMN`] (dictionary-encoded, one value per file).
    pub file_column: bool,
    /// Whether the output ends with [`POSITION_COLUMN`](crate::physical_plan::positional_delete::POSITION_COLUMN), each row's position in its file (after
    /// the file column when both are asked for). No filter reaches the reader then.
    pub position_column: bool,
    /// Whether the last two columns of `schema` and `read_schema` are `_row_id` and
    /// `_last_updated_sequence_number` (see [`super::lineage`]): read from the files where
    /// they hold them, inherited otherwise. No filter reaches the reader when either is read.
    pub row_lineage: bool,
    /// The per-file metadata columns (`_spec_id`, `_partition`) to give right after
    /// [`FILE_COLUMN`], which must be asked for too.
    pub file_metadata: Option<&'a super::metadata::FileMetadataColumns>,
}
