//! Columns a data file holds as one value recorded in its manifest entry: the sources of
//! identity partition fields, read as the file's partition value (the spec's "Column
//! Projection").
//!
//! A file need not store a column its partition fixes: Hive-style files brought in by
//! `migrate`, `snapshot` or `add_files` keep their partition columns in directory names only,
//! and some writers drop constant columns. Such a column reads as the identity partition value
//! of the file's manifest entry, as Java's readers read it (they take the partition value for
//! every file of a spec with an identity field on the column, stored or not; a stored column
//! holds that value in every row by the definition of the partition).
//!
//! ```text
//!  manifest entry: spec 0 (identity(region)), partition {region = 'eu'}
//!        │
//!        ▼  per-file statistics: region min = max = 'eu', null count 0
//!  DataFusion's parquet opener: `region` in the projection and the predicate → literal 'eu'
//!        (never decoded; a file without the column reads the value, not NULL)
//! ```
//! The opener replaces every column whose per-file statistics make it constant (exact min =
//! max and no NULLs, or exactly as many NULLs as rows) by that literal before it reads the
//! file, and prunes the file by them: the mechanism DataFusion gives file sources for
//! per-file constants. The statistics are shared by the files of one partition and stop at
//! the last identity source column, so a scan of many files holds one short vector per
//! distinct partition.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{
    Literal, PrimitiveLiteral, PrimitiveType, Struct, TableMetadata, Transform, Type,
};

use crate::file_planning::PlannedFile;

/// An identity partition field whose source is a top-level column of the scan.
#[derive(Debug, Clone)]
struct IdentitySource {
    /// The field's position in the spec's partition tuple.
    position: usize,
    /// The source column's index in the scan's table schema.
    column: usize,
    /// The column's Iceberg type in the schema rows are read into.
    ty: PrimitiveType,
    /// The column's Arrow type in the scan.
    arrow: DataType,
}

/// The per-file statistics that make identity partition sources constant (see the module
/// docs), shared by the files of one partition.
#[derive(Debug, Default)]
pub(crate) struct IdentityConstants {
    /// The identity sources of each partition spec that has some.
    by_spec: HashMap<i32, Vec<IdentitySource>>,
    /// Statistics made so far, by spec, partition and (when a value is NULL) row count.
    made: HashMap<(i32, Struct, Option<u64>), Arc<Statistics>>,
}

impl IdentityConstants {
    /// The identity sources of every spec of `metadata`, as columns of `schema` (the Arrow
    /// form of `read_schema`, the schema rows are read into).
    pub(crate) fn new(
        metadata: &TableMetadata,
        read_schema: &iceberg::spec::Schema,
        schema: &SchemaRef,
    ) -> Self {
        let columns = read_schema.as_struct().fields();
        let mut by_spec = HashMap::new();
        for spec in metadata.partition_specs_iter() {
            let sources: Vec<IdentitySource> = spec
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, p)| p.transform == Transform::Identity)
                .filter_map(|(position, p)| {
                    // Nested sources are left to the reader (docs/limitations.md).
                    let column = columns.iter().position(|c| c.id == p.source_id)?;
                    let Type::Primitive(ty) = columns[column].field_type.as_ref() else {
                        return None;
                    };
                    Some(IdentitySource {
                        position,
                        column,
                        ty: ty.clone(),
                        arrow: schema.fields().get(column)?.data_type().clone(),
                    })
                })
                .collect();
            if !sources.is_empty() {
                by_spec.insert(spec.spec_id(), sources);
            }
        }
        Self {
            by_spec,
            made: HashMap::new(),
        }
    }

    /// Whether no file of any spec has an identity source among the scan's columns.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_spec.is_empty()
    }

    /// The statistics of `file` that make its identity sources constant, `None` when its spec
    /// has none.
    pub(crate) fn statistics(&mut self, file: &PlannedFile) -> Result<Option<Arc<Statistics>>> {
        let Some(sources) = self.by_spec.get(&file.spec_id) else {
            return Ok(None);
        };
        let values = sources
            .iter()
            .map(|s| match file.partition.fields().get(s.position) {
                Some(Some(Literal::Primitive(v))) => {
                    partition_scalar(&s.ty, v, &s.arrow).map(Some)
                }
                Some(None) => Ok(None),
                Some(Some(other)) => Err(DataFusionError::Execution(format!(
                    "data file {}: identity partition value {other:?} is not a primitive value",
                    file.path
                ))),
                None => Err(DataFusionError::Execution(format!(
                    "data file {}: its partition has {} values, but spec {} has a field at position {}",
                    file.path,
                    file.partition.fields().len(),
                    file.spec_id,
                    s.position
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        // A NULL value is constant by its count: as many NULLs as the file has rows.
        let rows = values
            .iter()
            .any(Option::is_none)
            .then_some(file.record_count);
        let key = (file.spec_id, file.partition.clone(), rows);
        if let Some(made) = self.made.get(&key) {
            return Ok(Some(Arc::clone(made)));
        }
        // The vector stops at the last identity column: readers of per-file statistics look
        // columns up by index and take a missing one as unknown. (DataFusion's ordering of
        // files by statistics would read past it as partition values, but only for a scan
        // that declares an output ordering, which these scans never do.)
        let width = sources.iter().map(|s| s.column + 1).max().unwrap_or(0);
        let mut columns = vec![ColumnStatistics::new_unknown(); width];
        for (s, value) in sources.iter().zip(values) {
            columns[s.column] = match value {
                Some(v) => ColumnStatistics {
                    null_count: Precision::Exact(0),
                    min_value: Precision::Exact(v.clone()),
                    max_value: Precision::Exact(v),
                    distinct_count: Precision::Exact(1),
                    ..ColumnStatistics::new_unknown()
                },
                None => ColumnStatistics {
                    null_count: Precision::Exact(file.record_count as usize),
                    ..ColumnStatistics::new_unknown()
                },
            };
        }
        let statistics = Arc::new(Statistics {
            num_rows: rows.map_or(Precision::Absent, |r| Precision::Exact(r as usize)),
            total_byte_size: Precision::Absent,
            column_statistics: columns,
        });
        self.made.insert(key, Arc::clone(&statistics));
        Ok(Some(statistics))
    }
}

/// The value of an identity partition field as the scan reads its source column: of the
/// source's type in the schema read (a value written before a type promotion is promoted),
/// cast to the column's Arrow type.
pub(crate) fn partition_scalar(
    ty: &PrimitiveType,
    v: &PrimitiveLiteral,
    arrow: &DataType,
) -> Result<ScalarValue> {
    const MICROS_PER_DAY: i64 = 86_400_000_000;
    let utc = || Some("+00:00".into());
    let value = match (ty, v) {
        // Promotions: int → long, float → double, date → timestamp (v3).
        (PrimitiveType::Long, PrimitiveLiteral::Int(v)) => {
            Some(ScalarValue::Int64(Some(*v as i64)))
        }
        (PrimitiveType::Double, PrimitiveLiteral::Float(v)) => {
            Some(ScalarValue::Float64(Some(v.0 as f64)))
        }
        (PrimitiveType::Timestamp, PrimitiveLiteral::Int(days)) => Some(
            ScalarValue::TimestampMicrosecond(Some(*days as i64 * MICROS_PER_DAY), None),
        ),
        (PrimitiveType::Timestamptz, PrimitiveLiteral::Int(days)) => Some(
            ScalarValue::TimestampMicrosecond(Some(*days as i64 * MICROS_PER_DAY), utc()),
        ),
        (PrimitiveType::TimestampNs, PrimitiveLiteral::Int(days)) => Some(
            ScalarValue::TimestampNanosecond(Some(*days as i64 * MICROS_PER_DAY * 1000), None),
        ),
        (PrimitiveType::TimestamptzNs, PrimitiveLiteral::Int(days)) => Some(
            ScalarValue::TimestampNanosecond(Some(*days as i64 * MICROS_PER_DAY * 1000), utc()),
        ),
        _ => crate::file_planning::literal::literal_scalar(ty, v),
    };
    let value = value.ok_or_else(|| {
        DataFusionError::Execution(format!(
            "an identity partition value {v:?} does not fit its source column's type {ty}"
        ))
    })?;
    if &value.data_type() == arrow {
        return Ok(value);
    }
    value.cast_to(arrow)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap as Map;

    use arrow::datatypes::{Field, Schema};
    use iceberg::spec::{
        FormatVersion, NestedField, SortOrder, TableMetadataBuilder, UnboundPartitionSpec,
    };

    use super::*;
    use crate::file_planning::DataFileRef;

    fn metadata() -> TableMetadata {
        let schema = iceberg::spec::Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "region", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(3, "n", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(2, "region", Transform::Identity)
            .unwrap()
            .add_partition_field(3, "n", Transform::Identity)
            .unwrap()
            .build();
        TableMetadataBuilder::new(
            schema,
            spec,
            SortOrder::unsorted_order(),
            "memory:///t".to_string(),
            FormatVersion::V2,
            Map::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn file(partition: Vec<Option<Literal>>, rows: u64) -> PlannedFile {
        PlannedFile::new(
            DataFileRef {
                path: "f.parquet".into(),
                data_seq: 1,
                spec_id: 0,
                partition: Struct::from_iter(partition),
            },
            100,
            rows,
        )
    }

    #[test]
    fn identity_values_become_exact_statistics_shared_per_partition() {
        let md = metadata();
        let arrow: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("region", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let mut constants = IdentityConstants::new(&md, md.current_schema(), &arrow);
        assert!(!constants.is_empty());
        let eu = file(
            vec![Some(Literal::string("eu")), Some(Literal::long(7))],
            10,
        );
        let stats = constants.statistics(&eu).unwrap().unwrap();
        assert_eq!(stats.column_statistics.len(), 3);
        assert_eq!(stats.column_statistics[0], ColumnStatistics::new_unknown());
        assert_eq!(
            stats.column_statistics[1].min_value,
            Precision::Exact(ScalarValue::Utf8View(Some("eu".into())))
        );
        assert_eq!(
            stats.column_statistics[2].max_value,
            Precision::Exact(ScalarValue::Int64(Some(7)))
        );
        assert_eq!(stats.num_rows, Precision::Absent);
        // Another file of the partition shares them.
        let again = constants.statistics(&file(
            vec![Some(Literal::string("eu")), Some(Literal::long(7))],
            99,
        ));
        assert!(Arc::ptr_eq(&stats, &again.unwrap().unwrap()));
        // A NULL value is constant by its count of NULLs, which is the file's row count.
        let null = constants
            .statistics(&file(vec![None, Some(Literal::long(7))], 4))
            .unwrap()
            .unwrap();
        assert_eq!(null.num_rows, Precision::Exact(4));
        assert_eq!(null.column_statistics[1].null_count, Precision::Exact(4));
        assert_eq!(null.column_statistics[1].min_value, Precision::Absent);
    }

    #[test]
    fn values_are_promoted_and_cast_to_the_scan_type() {
        let long = partition_scalar(
            &PrimitiveType::Long,
            &PrimitiveLiteral::Int(3),
            &DataType::Int64,
        )
        .unwrap();
        assert_eq!(long, ScalarValue::Int64(Some(3)));
        let day = partition_scalar(
            &PrimitiveType::Timestamp,
            &PrimitiveLiteral::Int(1),
            &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
        )
        .unwrap();
        assert_eq!(
            day,
            ScalarValue::TimestampMicrosecond(Some(86_400_000_000), None)
        );
        let text = partition_scalar(
            &PrimitiveType::String,
            &PrimitiveLiteral::String("x".into()),
            &DataType::Utf8,
        )
        .unwrap();
        assert_eq!(text, ScalarValue::Utf8(Some("x".into())));
        let e = partition_scalar(
            &PrimitiveType::Int,
            &PrimitiveLiteral::String("x".into()),
            &DataType::Int32,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not fit"), "{e}");
    }

    #[test]
    fn specs_without_identity_fields_have_no_constants() {
        let md = metadata();
        let arrow: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("region", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let mut constants = IdentityConstants::new(&md, md.current_schema(), &arrow);
        let mut other = file(vec![], 1);
        other.spec_id = 5;
        assert!(constants.statistics(&other).unwrap().is_none());
    }
}
