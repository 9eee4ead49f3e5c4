//! The columns the node appends to the scan's: row positions, and the live flag that marks
//! densely deleted rows for the equality-delete join above.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use datafusion::error::Result;
use futures::stream::BoxStream;
use futures::StreamExt;

/// Name of the row position column [`PositionalDeleteExec::with_positions`] appends.
pub const POSITION_COLUMN: &str = "__iceberg_pos";

/// A column [`PositionalDeleteExec`] appends to the scan's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Appended {
    /// [`POSITION_COLUMN`].
    Positions,
    /// [`LIVE_COLUMN`].
    Live,
}

/// Name of the column [`PositionalDeleteExec::with_live_column`] appends: `false` on the rows
/// of densely deleted files that are deleted.
pub const LIVE_COLUMN: &str = "__iceberg_live";

/// `schema` with [`POSITION_COLUMN`] appended.
pub(super) fn with_position_field(
    schema: &arrow::datatypes::SchemaRef,
) -> arrow::datatypes::SchemaRef {
    with_field(schema, POSITION_COLUMN, DataType::Int64)
}

/// `schema` with [`LIVE_COLUMN`] appended.
pub(super) fn with_live_field(schema: &arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    with_field(schema, LIVE_COLUMN, DataType::Boolean)
}

pub(super) fn with_field(
    schema: &arrow::datatypes::SchemaRef,
    name: &str,
    data_type: DataType,
) -> arrow::datatypes::SchemaRef {
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new(
        name, data_type, false,
    )));
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// `batches` with every row marked live in `schema`'s [`LIVE_COLUMN`].
pub(super) fn all_live<S>(
    batches: S,
    schema: arrow::datatypes::SchemaRef,
) -> BoxStream<'static, Result<RecordBatch>>
where
    S: futures::Stream<Item = Result<RecordBatch>> + Send + 'static,
{
    Box::pin(batches.map(move |batch| with_live(batch?, None, &schema)))
}

/// `batch` with `keep` (every row when `None`) appended as the [`LIVE_COLUMN`] of `schema`.
pub(super) fn with_live(
    batch: RecordBatch,
    keep: Option<arrow::array::BooleanArray>,
    schema: &arrow::datatypes::SchemaRef,
) -> Result<RecordBatch> {
    let keep = keep.unwrap_or_else(|| {
        arrow::array::BooleanArray::new(
            arrow::buffer::BooleanBuffer::new_set(batch.num_rows()),
            None,
        )
    });
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(keep));
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}
