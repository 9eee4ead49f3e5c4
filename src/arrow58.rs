//! The iceberg crate's Arrow (58) and DataFusion's (59), bridged through the Arrow C data
//! interface: schemas and record batches cross without their buffers being copied.
//!
//! Both Arrow versions define `FFI_ArrowSchema` and `FFI_ArrowArray` as the `#[repr(C)]` structs
//! the C data interface specifies. A value one version exports is imported by the other exactly
//! as a foreign producer's would be: `from_raw` moves the struct (with its release callback) out
//! and leaves an empty, released one behind, so each buffer is released once, by its owner.
//!
//! Only the writer boundary crosses: the iceberg crate's schema conversion, its partition
//! splitter and its parquet writers. Everything that scans stays on Arrow 59.
//!
//! Public (hidden from the docs) only for `benches/bridge.rs`, which measures a crossing.

use std::sync::Arc;

use arrow::array::{Array, RecordBatch, StructArray};
use arrow::datatypes::{Schema, SchemaRef};
use arrow_array58 as a58;
use arrow_schema58 as s58;
use datafusion::error::{DataFusionError, Result};

use crate::error::IcebergResultExt;

/// An Arrow 58 schema (the iceberg crate's).
pub type Schema58 = s58::Schema;
/// A shared Arrow 58 schema.
pub type SchemaRef58 = s58::SchemaRef;
/// An Arrow 58 record batch (what the iceberg crate's writers take).
pub type RecordBatch58 = a58::RecordBatch;

fn bridge_err(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("arrow 58/59 bridge: {e}"))
}

/// A DataFusion (Arrow 59) schema as the iceberg crate's Arrow 58 schema.
pub fn schema_to_58(schema: &Schema) -> Result<Schema58> {
    let mut exported = arrow::ffi::FFI_ArrowSchema::try_from(schema)?;
    // SAFETY: both types are the C data interface's ArrowSchema (#[repr(C)], same layout);
    // `from_raw` takes the value over and leaves an empty one, so it is released once.
    let imported = unsafe {
        a58::ffi::FFI_ArrowSchema::from_raw(
            &mut exported as *mut arrow::ffi::FFI_ArrowSchema as *mut a58::ffi::FFI_ArrowSchema,
        )
    };
    Schema58::try_from(&imported).map_err(bridge_err)
}

/// The iceberg crate's Arrow 58 schema as a DataFusion (Arrow 59) schema.
pub(crate) fn schema_from_58(schema: &Schema58) -> Result<Schema> {
    let mut exported = a58::ffi::FFI_ArrowSchema::try_from(schema).map_err(bridge_err)?;
    // SAFETY: as in `schema_to_58`.
    let imported = unsafe {
        arrow::ffi::FFI_ArrowSchema::from_raw(
            &mut exported as *mut a58::ffi::FFI_ArrowSchema as *mut arrow::ffi::FFI_ArrowSchema,
        )
    };
    Ok(Schema::try_from(&imported)?)
}

/// The Arrow (59) schema of an Iceberg schema, with field ids, as the iceberg crate maps it.
pub(crate) fn iceberg_to_arrow(schema: &iceberg::spec::Schema) -> Result<Schema> {
    schema_from_58(&iceberg::arrow::schema_to_arrow_schema(schema).df()?)
}

/// `batch` (Arrow 59) as an Arrow 58 batch of `schema`, which must describe the same columns
/// (the batch was aligned to [`schema_from_58`] of it).
pub fn batch_to_58(batch: &RecordBatch, schema: &SchemaRef58) -> Result<RecordBatch58> {
    let rows = batch.num_rows();
    let data = StructArray::from(batch.clone()).into_data();
    let (mut array, mut array_schema) = arrow::ffi::to_ffi(&data)?;
    // SAFETY: as in `schema_to_58`, for the ArrowArray and its ArrowSchema.
    let data58 = unsafe {
        let array58 = a58::ffi::FFI_ArrowArray::from_raw(
            &mut array as *mut arrow::ffi::FFI_ArrowArray as *mut a58::ffi::FFI_ArrowArray,
        );
        let schema58 = a58::ffi::FFI_ArrowSchema::from_raw(
            &mut array_schema as *mut arrow::ffi::FFI_ArrowSchema as *mut a58::ffi::FFI_ArrowSchema,
        );
        a58::ffi::from_ffi(array58, &schema58).map_err(bridge_err)?
    };
    let columns = a58::StructArray::from(data58).into_parts().1;
    RecordBatch58::try_new_with_options(
        Arc::clone(schema),
        columns,
        &a58::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(bridge_err)
}

/// An Arrow 58 batch (from the iceberg crate's partition splitter) as a DataFusion (Arrow 59)
/// batch of `schema`, which must describe the same columns; the buffers are not copied.
pub(crate) fn batch_from_58(batch: &RecordBatch58, schema: &SchemaRef) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let data = a58::Array::into_data(a58::StructArray::from(batch.clone()));
    let (mut array, mut array_schema) = a58::ffi::to_ffi(&data).map_err(bridge_err)?;
    // SAFETY: as in `schema_to_58`, for the ArrowArray and its ArrowSchema.
    let data59 = unsafe {
        let array59 = arrow::ffi::FFI_ArrowArray::from_raw(
            &mut array as *mut a58::ffi::FFI_ArrowArray as *mut arrow::ffi::FFI_ArrowArray,
        );
        let schema59 = arrow::ffi::FFI_ArrowSchema::from_raw(
            &mut array_schema as *mut a58::ffi::FFI_ArrowSchema as *mut arrow::ffi::FFI_ArrowSchema,
        );
        arrow::ffi::from_ffi(array59, &schema59)?
    };
    let columns = StructArray::from(data59).into_parts().1;
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, ListArray, StringArray};
    use arrow::buffer::{NullBuffer, OffsetBuffer};
    use arrow::datatypes::{DataType, Field};
    use arrow_array58::Array as _;
    use std::collections::HashMap;

    fn with_id(field: Field, id: i32) -> Field {
        field.with_metadata(HashMap::from([(
            "PARQUET:field_id".to_string(),
            id.to_string(),
        )]))
    }

    #[test]
    fn schemas_and_batches_cross_without_copies() {
        let item = Arc::new(with_id(Field::new("element", DataType::Int64, true), 3));
        let schema = Arc::new(Schema::new(vec![
            with_id(Field::new("id", DataType::Int64, false), 1),
            with_id(Field::new("name", DataType::Utf8, true), 2),
            with_id(
                Field::new("tags", DataType::List(Arc::clone(&item)), true),
                4,
            ),
        ]));
        let schema58 = Arc::new(schema_to_58(&schema).unwrap());
        assert_eq!(schema_from_58(&schema58).unwrap(), *schema);
        assert_eq!(
            schema58
                .field(2)
                .metadata()
                .get("PARQUET:field_id")
                .unwrap(),
            "4"
        );

        let ids = Int64Array::from(vec![1, 2, 3]);
        let names = StringArray::from(vec![Some("a"), None, Some("c")]);
        let tags = ListArray::try_new(
            Arc::clone(&item),
            OffsetBuffer::new(vec![0, 2, 2, 2].into()),
            Arc::new(Int64Array::from(vec![Some(1), None])),
            Some(NullBuffer::from(vec![true, false, true])),
        )
        .unwrap();
        let id_buffer = ids.values().inner().as_ptr();
        let columns: Vec<ArrayRef> = vec![Arc::new(ids), Arc::new(names), Arc::new(tags)];
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
        let batch58 = batch_to_58(&batch, &schema58).unwrap();
        assert_eq!(batch58.num_rows(), 3);
        let ids58 = batch58
            .column(0)
            .as_any()
            .downcast_ref::<a58::Int64Array>()
            .unwrap();
        assert_eq!(ids58.values().to_vec(), [1, 2, 3]);
        // The very same buffer: nothing was copied.
        assert_eq!(ids58.values().inner().as_ptr(), id_buffer);
        let names58 = batch58
            .column(1)
            .as_any()
            .downcast_ref::<a58::StringArray>()
            .unwrap();
        assert!(names58.is_null(1));
        assert_eq!(names58.value(2), "c");
        assert_eq!(batch58.column(2).null_count(), 1);
        let back = batch_from_58(&batch58, &schema).unwrap();
        assert_eq!(back, batch);
        let ids59 = back
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids59.values().inner().as_ptr(), id_buffer);

        // Zero columns keep their row count.
        let empty = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(5)),
        )
        .unwrap();
        let empty58 = batch_to_58(&empty, &Arc::new(Schema58::empty())).unwrap();
        assert_eq!(empty58.num_rows(), 5);
    }
}
