//! The order a sort or z-order rewrite writes rows in.

use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::Schema;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexRequirement, PhysicalSortRequirement};

use iceberg::spec::Transform;
use iceberg::table::Table;

use crate::maintenance::options::RewriteStrategy;
use crate::maintenance::zorder::{parse_zorder, zorder_requirement, ZOrderOptions};
use crate::physical_plan::write::sort_requirement;

/// The order the new files are written in.
pub(super) fn sort_of(
    table: &Table,
    strategy: &RewriteStrategy,
    input: &Schema,
    zorder: ZOrderOptions,
) -> Result<Option<LexRequirement>> {
    match strategy {
        // As Spark's bin-pack: files are combined as they are, not sorted.
        RewriteStrategy::BinPack => Ok(None),
        RewriteStrategy::Sort(None) => match sort_requirement(table, input)? {
            Some(order) => Ok(Some(order)),
            None => Err(DataFusionError::Plan(format!(
                "rewrite_data_files: table '{}' has no sort order; give one with sort_order",
                table.identifier()
            ))),
        },
        RewriteStrategy::Sort(Some(order)) => match parse_zorder(order)? {
            Some(columns) => {
                let columns = without_identity_partition_columns(table, columns)?;
                let key = zorder_requirement(&columns, input, zorder)?;
                Ok(LexRequirement::new([key]))
            }
            None => parse_sort_order(order, input).map(Some),
        },
    }
}

/// The z-order columns less the table's identity partition columns, as Spark has them: their
/// value is the same throughout a partition, so they would only take bits from the others. A
/// z-order of nothing else is an error.
pub(super) fn without_identity_partition_columns(
    table: &Table,
    columns: Vec<String>,
) -> Result<Vec<String>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    let identity: Vec<&str> = metadata
        .default_partition_spec()
        .fields()
        .iter()
        .filter(|f| f.transform == Transform::Identity)
        .filter_map(|f| schema.name_by_field_id(f.source_id))
        .collect();
    let (dropped, kept): (Vec<String>, Vec<String>) = columns
        .into_iter()
        .partition(|c| identity.contains(&c.as_str()));
    if kept.is_empty() {
        return Err(DataFusionError::Plan(format!(
            "rewrite_data_files sort_order: cannot z-order table '{}' only by identity partition \
             columns ({}): their value is the same throughout a partition",
            table.identifier(),
            dropped.join(", ")
        )));
    }
    if !dropped.is_empty() {
        log::warn!(
            "rewrite_data_files: identity partition columns ({}) of table '{}' left out of the \
             z-order: their value is the same throughout a partition",
            dropped.join(", "),
            table.identifier()
        );
    }
    Ok(kept)
}

/// `"c1 DESC NULLS LAST, c2"` over `input` (Iceberg's defaults: ASC, nulls first when
/// ascending and last when descending).
pub(super) fn parse_sort_order(text: &str, input: &Schema) -> Result<LexRequirement> {
    let bad = |why: String| DataFusionError::Plan(format!("rewrite_data_files sort_order: {why}"));
    let mut reqs = vec![];
    for item in text.split(',') {
        let words: Vec<String> = item.split_whitespace().map(str::to_string).collect();
        let Some(name) = words.first() else {
            return Err(bad(format!("empty item in '{text}'")));
        };
        let name = name.trim_matches('"');
        let upper: Vec<String> = words[1..].iter().map(|w| w.to_ascii_uppercase()).collect();
        let (descending, rest) = match upper.first().map(String::as_str) {
            Some("DESC") => (true, &upper[1..]),
            Some("ASC") => (false, &upper[1..]),
            _ => (false, &upper[..]),
        };
        let nulls_first = match rest.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            [] => !descending,
            ["NULLS", "FIRST"] => true,
            ["NULLS", "LAST"] => false,
            _ => return Err(bad(format!("cannot read '{}'", item.trim()))),
        };
        let index = input
            .index_of(name)
            .map_err(|_| bad(format!("no column '{name}'")))?;
        reqs.push(PhysicalSortRequirement::new(
            Arc::new(Column::new(name, index)),
            Some(SortOptions {
                descending,
                nulls_first,
            }),
        ));
    }
    LexRequirement::new(reqs).ok_or_else(|| bad("no columns given".into()))
}
