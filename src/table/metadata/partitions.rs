//! The `partitions` metadata table: per partition, the live data and delete files of a snapshot
//! counted, and when the partition last changed. A view: DataFusion's aggregation over the
//! `entries` table (joined with `snapshots` for the commit times), which streams the manifests
//! and spills its groups under a memory limit.

use std::sync::Arc;

use datafusion::common::JoinType;
use datafusion::datasource::provider_as_source;
use datafusion::error::Result;
use datafusion::functions::core::expr_fn::get_field;
use datafusion::functions_aggregate::expr_fn::{count, last_value, max, sum};
use datafusion::logical_expr::{col, lit, when, Expr, LogicalPlan, LogicalPlanBuilder};
use iceberg::table::Table;

use super::{IcebergMetadataTable, MetadataKind};
use crate::storage::location::LocationMap;

/// The plan of the `partitions` table of `table` at `snapshot_id` (`None`: the current one).
pub(super) fn plan(
    table: &Table,
    locations: &LocationMap,
    snapshot_id: Option<i64>,
    partitioned: bool,
) -> Result<LogicalPlan> {
    let mut entries = IcebergMetadataTable::try_new(table.clone(), MetadataKind::Entries)?
        .with_locations(locations.clone())?;
    if let Some(id) = snapshot_id {
        entries = entries.with_snapshot_id(id)?;
    }
    let snapshots = IcebergMetadataTable::try_new(table.clone(), MetadataKind::Snapshots)?;
    let file = |name: &str| get_field(col("e.data_file"), name);
    let mut columns = vec![
        file("content").alias("content"),
        file("record_count").alias("record_count"),
        file("file_size_in_bytes").alias("size"),
        file("spec_id").alias("spec_id"),
        col("e.snapshot_id").alias("added_by"),
    ];
    if partitioned {
        columns.push(file("partition").alias("partition"));
    }
    let live = LogicalPlanBuilder::scan("e", provider_as_source(Arc::new(entries)), None)?
        // 0 existing, 1 added: the live files.
        .filter(col("e.status").lt(lit(2)))?
        .project(columns)?;
    let commits = LogicalPlanBuilder::scan("s", provider_as_source(Arc::new(snapshots)), None)?
        .project(vec![col("s.snapshot_id"), col("s.committed_at")])?
        .build()?;
    let joined = live.join(
        commits,
        JoinType::Left,
        (vec!["added_by"], vec!["snapshot_id"]),
        None,
    )?;
    let of = |content: i32, value: Expr| {
        when(col("content").eq(lit(content)), value)
            .otherwise(lit(0i64))
            .unwrap_or_else(|_| lit(0i64))
    };
    let files_of = |content: i32| {
        count(
            when(col("content").eq(lit(content)), lit(1))
                .otherwise(Expr::Literal(
                    datafusion::common::ScalarValue::Int32(None),
                    None,
                ))
                .unwrap_or_else(|_| lit(1)),
        )
    };
    let aggregates = vec![
        sum(of(0, col("record_count"))).alias("record_count"),
        files_of(0).alias("file_count"),
        sum(of(0, col("size"))).alias("total_data_file_size_in_bytes"),
        sum(of(1, col("record_count"))).alias("position_delete_record_count"),
        files_of(1).alias("position_delete_file_count"),
        sum(of(2, col("record_count"))).alias("equality_delete_record_count"),
        files_of(2).alias("equality_delete_file_count"),
        max(col("committed_at")).alias("last_updated_at"),
        last_value(col("added_by"), vec![col("committed_at").sort(true, true)])
            .alias("last_updated_snapshot_id"),
        max(col("spec_id")).alias("spec_id"),
    ];
    let group: Vec<Expr> = match partitioned {
        true => vec![col("partition")],
        false => vec![],
    };
    let grouped = joined.aggregate(group, aggregates)?;
    // An unpartitioned table without files has no row (an aggregate without groups has one).
    let grouped = match partitioned {
        true => grouped,
        false => grouped.filter(
            col("file_count")
                .gt(lit(0i64))
                .or(col("position_delete_file_count")
                    .gt(lit(0i64))
                    .or(col("equality_delete_file_count").gt(lit(0i64)))),
        )?,
    };
    let int = |name: &str| {
        Expr::Cast(datafusion::logical_expr::Cast::new(
            Box::new(col(name)),
            arrow::datatypes::DataType::Int32,
        ))
        .alias(name)
    };
    let zero = |name: &str| {
        datafusion::functions::core::expr_fn::coalesce(vec![col(name), lit(0i64)]).alias(name)
    };
    let mut out = vec![];
    if partitioned {
        out.push(col("partition"));
        out.push(col("spec_id"));
    }
    out.extend([
        zero("record_count"),
        int("file_count"),
        zero("total_data_file_size_in_bytes"),
        zero("position_delete_record_count"),
        int("position_delete_file_count"),
        zero("equality_delete_record_count"),
        int("equality_delete_file_count"),
        col("last_updated_at"),
        col("last_updated_snapshot_id"),
    ]);
    grouped.project(out)?.build()
}
