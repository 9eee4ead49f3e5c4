//! The ordering a table's sort order asks of the rows written to it.

use arrow::compute::SortOptions;
use arrow::datatypes::Schema;
use datafusion::error::{DataFusionError, Result};
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{LexRequirement, PhysicalSortRequirement};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use iceberg::spec::{NullOrder, SortDirection, Transform};
use iceberg::table::Table;

/// The per-file ordering required by the table's default sort order, over `input` columns.
///
/// Identity, truncate and the time transforms are monotonic in their source column, so ordering by
/// the source column orders by the transformed value too; `bucket[N]` keys sort by the bucket
/// number (`iceberg_bucket(N, column)`); `void` fields are constant and skipped.
/// Returns `None` for unsorted tables.
pub fn sort_requirement(table: &Table, input: &Schema) -> Result<Option<LexRequirement>> {
    let metadata = table.metadata();
    let order = metadata.default_sort_order();
    if order.is_unsorted() {
        return Ok(None);
    }
    let schema = metadata.current_schema();
    let mut reqs = vec![];
    for field in &order.fields {
        match field.transform {
            Transform::Identity
            | Transform::Truncate(_)
            | Transform::Year
            | Transform::Month
            | Transform::Day
            | Transform::Hour => {}
            Transform::Bucket(_) => {}
            Transform::Void => continue,
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "sort order transform {other} is not supported for writing yet"
                )))
            }
        }
        let name = schema.name_by_field_id(field.source_id).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "sort order refers to unknown field id {}",
                field.source_id
            ))
        })?;
        if name.contains('.') && input.index_of(name).is_err() {
            return Err(DataFusionError::NotImplemented(format!(
                "sorting by nested field '{name}' is not supported yet"
            )));
        }
        let index = input.index_of(name)?;
        let options = SortOptions {
            descending: field.direction == SortDirection::Descending,
            nulls_first: field.null_order == NullOrder::First,
        };
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(name, index));
        let key = match field.transform {
            // Sorted by the bucket number (`iceberg_bucket(N, column)`).
            Transform::Bucket(n) => Arc::new(ScalarFunctionExpr::try_new(
                crate::file_planning::bucket::iceberg_bucket(),
                vec![
                    Arc::new(Literal::new(ScalarValue::Int64(Some(n as i64)))),
                    column,
                ],
                input,
                Arc::new(ConfigOptions::default()),
            )?) as Arc<dyn PhysicalExpr>,
            _ => column,
        };
        reqs.push(PhysicalSortRequirement::new(key, Some(options)));
    }
    Ok(LexRequirement::new(reqs))
}
