//! Row lineage (format v3): the `_row_id` and `_last_updated_sequence_number` metadata columns.
//!
//! ```text
//!  file column (field id 2147483540 / 2147483539, NULL where the file does not hold it)
//!     _row_id                       = COALESCE(file value, first_row_id + _pos)
//!     _last_updated_sequence_number = COALESCE(file value, data sequence number)
//! ```
//! `first_row_id` is the data file's (inherited from its manifest when the entry has none), and
//! both inherited values are NULL for a file without one (written before the table had row
//! lineage and not yet given ids by a v3 commit). A rewrite that moves rows to a new file writes
//! both columns out: `_row_id` as read, `_last_updated_sequence_number` as read for rows it
//! copies and NULL for rows it changes (they then inherit the new file's sequence number).

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, Column, IsNotNullExpr, Literal,
};
use datafusion::physical_expr::PhysicalExpr;
use iceberg::metadata_columns::{
    last_updated_sequence_number_field, row_id_field,
    RESERVED_COL_NAME_LAST_UPDATED_SEQUENCE_NUMBER, RESERVED_COL_NAME_ROW_ID,
};
use iceberg::spec::{FormatVersion, NestedField, PrimitiveType, Schema, TableMetadata, Type};

use crate::error::IcebergResultExt;
use crate::physical_plan::positional_delete::POSITION_COLUMN;

/// The `_row_id` column.
pub const ROW_ID: &str = RESERVED_COL_NAME_ROW_ID;
/// The `_last_updated_sequence_number` column.
pub const LAST_UPDATED_SEQUENCE_NUMBER: &str = RESERVED_COL_NAME_LAST_UPDATED_SEQUENCE_NUMBER;

/// Hidden per-file column of a lineage scan: the data file's `first_row_id`.
pub(crate) const FIRST_ROW_ID_COLUMN: &str = "__iceberg_first_row_id";
/// Hidden per-file column of a lineage scan: the data file's data sequence number.
pub(crate) const DATA_SEQ_COLUMN: &str = "__iceberg_data_seq";

/// Whether the table's format has row lineage (v3 and later).
pub(crate) fn has_row_lineage(metadata: &TableMetadata) -> bool {
    metadata.format_version() >= FormatVersion::V3
}

/// The schema a statement reads and writes rows of: the table's current one, with the row
/// lineage columns when the table has row lineage.
pub(crate) fn rows_schema(metadata: &TableMetadata) -> Result<iceberg::spec::SchemaRef> {
    match has_row_lineage(metadata) {
        true => Ok(Arc::new(with_lineage_fields(metadata.current_schema())?)),
        false => Ok(Arc::clone(metadata.current_schema())),
    }
}

/// `schema` with the two row lineage columns appended (optional longs, with their reserved
/// field ids), or an error when the table has a column of either name.
pub(crate) fn with_lineage_fields(schema: &Schema) -> Result<Schema> {
    for name in [ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER] {
        if schema.field_by_name(name).is_some() {
            return Err(DataFusionError::Plan(format!(
                "the table has a column named '{name}', which row lineage reserves"
            )));
        }
    }
    let mut fields: Vec<_> = schema.as_struct().fields().to_vec();
    // Optional: files and rows written before the table had lineage hold none.
    for f in [row_id_field(), last_updated_sequence_number_field()] {
        fields.push(Arc::new(NestedField::optional(
            f.id,
            f.name.clone(),
            Type::Primitive(PrimitiveType::Long),
        )));
    }
    Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()
        .df()
}

/// Where a scan's output holds what the lineage values are computed from.
pub(crate) struct LineageInputs {
    /// The file's `first_row_id` (NULL when it has none).
    pub first_row_id: usize,
    /// The file's data sequence number (NULL when it has no `first_row_id`).
    pub data_seq: usize,
    /// The row's position in its file.
    pub pos: usize,
}

/// `_row_id`: the file's value at `column`, else `first_row_id + _pos`.
pub(crate) fn row_id_expr(
    column: usize,
    name: &str,
    at: &LineageInputs,
) -> Result<Arc<dyn PhysicalExpr>> {
    let inherited: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        Arc::new(Column::new(FIRST_ROW_ID_COLUMN, at.first_row_id)),
        Operator::Plus,
        Arc::new(Column::new(POSITION_COLUMN, at.pos)),
    ));
    coalesce(Arc::new(Column::new(name, column)), inherited)
}

/// `_last_updated_sequence_number`: the file's value at `column`, else the data sequence number.
pub(crate) fn last_updated_expr(
    column: usize,
    name: &str,
    at: &LineageInputs,
) -> Result<Arc<dyn PhysicalExpr>> {
    coalesce(
        Arc::new(Column::new(name, column)),
        Arc::new(Column::new(DATA_SEQ_COLUMN, at.data_seq)),
    )
}

/// `CASE WHEN value IS NOT NULL THEN value ELSE otherwise END`.
fn coalesce(
    value: Arc<dyn PhysicalExpr>,
    otherwise: Arc<dyn PhysicalExpr>,
) -> Result<Arc<dyn PhysicalExpr>> {
    let when: Arc<dyn PhysicalExpr> = Arc::new(IsNotNullExpr::new(Arc::clone(&value)));
    Ok(Arc::new(CaseExpr::try_new(
        None,
        vec![(when, value)],
        Some(otherwise),
    )?))
}

/// A NULL long, the `_last_updated_sequence_number` a changed row is written with.
pub(crate) fn null_sequence_number() -> Arc<dyn PhysicalExpr> {
    Arc::new(Literal::new(ScalarValue::Int64(None)))
}
