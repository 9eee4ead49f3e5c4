//! Column statistics of a scan, summed up from its data files' manifest entries: the bounds and
//! null counts Iceberg writers record per file, reported to DataFusion's planner (join sides,
//! selectivity, cardinality estimates), never used for answers.
//!
//! ```text
//!  file 1: id ∈ [1, 40], 0 nulls ─┐
//!  file 2: id ∈ [35, 90], 2 nulls ─┼─► id: min ≥ 1, max ≤ 90, ~2 nulls (inexact: bounds may be
//!  file 3: id all NULL (no bounds) ┘   truncated, deletes remove rows, NaN is not bounded)
//! ```
//! A column's minimum (maximum) is known only when every file either records a lower (upper)
//! bound for it or holds nothing but NULLs in it; its null count only when every file records
//! one; its stored size likewise. Distinct counts come from the table's statistics files (the `ndv` Spark's `ANALYZE`
//! records in a theta sketch's blob metadata) when they describe the snapshot read.

use std::collections::HashMap;

use iceberg::spec::{DataFile, Datum, PrimitiveType, Schema, TableMetadata, Type};

/// What the files of a scan record about one column.
#[derive(Debug, Clone, Default)]
struct Column {
    /// The smallest lower bound, while every file has given one (or held only NULLs).
    lower: Option<Datum>,
    /// The largest upper bound, likewise.
    upper: Option<Datum>,
    /// The sum of the files' null counts, while every file has given one.
    nulls: Option<u64>,
    /// The sum of the files' stored sizes of the column, while every file has given one.
    bytes: Option<u64>,
    /// Whether some file lacked a lower / upper bound / null count / size (the summary is
    /// unknown).
    no_lower: bool,
    no_upper: bool,
    no_nulls: bool,
    no_bytes: bool,
}

/// The summed statistics of the top-level primitive columns of a scan's files, by field id.
#[derive(Debug, Clone, Default)]
pub struct ColumnSummary {
    columns: HashMap<i32, (PrimitiveType, Column)>,
}

impl ColumnSummary {
    /// A summary of no files yet, of `schema`'s top-level primitive columns.
    pub(crate) fn new(schema: &Schema) -> Self {
        let columns = schema
            .as_struct()
            .fields()
            .iter()
            .filter_map(|f| match f.field_type.as_ref() {
                Type::Primitive(ty) => Some((f.id, (ty.clone(), Column::default()))),
                _ => None,
            })
            .collect();
        Self { columns }
    }

    /// Adds what `file`'s manifest entry records (`None`: an entry without statistics).
    pub(crate) fn add(&mut self, file: Option<&DataFile>) {
        for (id, (ty, c)) in self.columns.iter_mut() {
            let Some(file) = file else {
                c.no_lower = true;
                c.no_upper = true;
                c.no_nulls = true;
                c.no_bytes = true;
                continue;
            };
            match file.column_sizes().get(id) {
                Some(n) if !c.no_bytes => c.bytes = Some(c.bytes.unwrap_or(0) + n),
                Some(_) => {}
                None => c.no_bytes = true,
            }
            let nulls = file.null_value_counts().get(id).copied();
            let values = file.value_counts().get(id).copied();
            // A file of NULLs only (by its counts) bounds nothing and needs no bounds.
            let all_null =
                nulls.is_some() && (nulls == values || nulls == Some(file.record_count()));
            match nulls {
                Some(n) if !c.no_nulls => c.nulls = Some(c.nulls.unwrap_or(0) + n),
                Some(_) => {}
                None => c.no_nulls = true,
            }
            let bound = |d: Option<&Datum>| d.filter(|d| d.data_type() == ty).cloned();
            match bound(file.lower_bounds().get(id)) {
                Some(d) if !c.no_lower => {
                    if c.lower.as_ref().is_none_or(|l| d < *l) {
                        c.lower = Some(d);
                    }
                }
                Some(_) => {}
                None if all_null => {}
                None => c.no_lower = true,
            }
            match bound(file.upper_bounds().get(id)) {
                Some(d) if !c.no_upper => {
                    if c.upper.as_ref().is_none_or(|u| d > *u) {
                        c.upper = Some(d);
                    }
                }
                Some(_) => {}
                None if all_null => {}
                None => c.no_upper = true,
            }
        }
    }

    /// The lower bound of every value of column `id` the files hold, when known.
    pub fn lower(&self, id: i32) -> Option<&Datum> {
        self.columns
            .get(&id)
            .filter(|(_, c)| !c.no_lower)
            .and_then(|(_, c)| c.lower.as_ref())
    }

    /// The upper bound of every value of column `id` the files hold, when known.
    pub fn upper(&self, id: i32) -> Option<&Datum> {
        self.columns
            .get(&id)
            .filter(|(_, c)| !c.no_upper)
            .and_then(|(_, c)| c.upper.as_ref())
    }

    /// The bytes column `id` takes in the files as stored (compressed), when every file records
    /// them.
    pub fn stored_bytes(&self, id: i32) -> Option<u64> {
        self.columns
            .get(&id)
            .filter(|(_, c)| !c.no_bytes)
            .and_then(|(_, c)| c.bytes)
    }

    /// The NULLs column `id` holds in the files (before deletes), when every file counts them.
    pub fn nulls(&self, id: i32) -> Option<u64> {
        self.columns
            .get(&id)
            .filter(|(_, c)| !c.no_nulls)
            .and_then(|(_, c)| c.nulls)
    }
}

/// The distinct counts (by field id) the table's statistics files record for `snapshot_id`:
/// the `ndv` property of each single-field blob.
pub fn distinct_counts(metadata: &TableMetadata, snapshot_id: i64) -> HashMap<i32, u64> {
    let mut out = HashMap::new();
    for stats in metadata.statistics_iter() {
        if stats.snapshot_id != snapshot_id {
            continue;
        }
        for blob in &stats.blob_metadata {
            let ([field], Some(ndv)) = (blob.fields.as_slice(), blob.properties.get("ndv")) else {
                continue;
            };
            if let Ok(ndv) = ndv.parse::<u64>() {
                out.insert(*field, ndv);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, NestedField, Struct};

    use super::*;

    fn file(rows: u64, lower: Option<i64>, upper: Option<i64>, nulls: Option<u64>) -> DataFile {
        let mut b = DataFileBuilder::default();
        b.content(DataContentType::Data)
            .file_path("f".into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(rows)
            .file_size_in_bytes(1)
            .value_counts(HashMap::from([(1, rows)]))
            .lower_bounds(lower.map(|v| (1, Datum::long(v))).into_iter().collect())
            .upper_bounds(upper.map(|v| (1, Datum::long(v))).into_iter().collect())
            .null_value_counts(nulls.map(|n| (1, n)).into_iter().collect())
            .column_sizes(HashMap::from([(1, rows * 3)]));
        b.build().unwrap()
    }

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![NestedField::optional(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            )
            .into()])
            .build()
            .unwrap()
    }

    #[test]
    fn bounds_widen_over_files_and_all_null_files_bound_nothing() {
        let mut s = ColumnSummary::new(&schema());
        s.add(Some(&file(10, Some(5), Some(40), Some(0))));
        s.add(Some(&file(10, Some(1), Some(30), Some(2))));
        s.add(Some(&file(4, None, None, Some(4))));
        assert_eq!(s.lower(1), Some(&Datum::long(1)));
        assert_eq!(s.upper(1), Some(&Datum::long(40)));
        assert_eq!(s.nulls(1), Some(6));
        assert_eq!(s.stored_bytes(1), Some(72));
    }

    #[test]
    fn a_file_without_a_statistic_makes_it_unknown() {
        let mut s = ColumnSummary::new(&schema());
        s.add(Some(&file(10, Some(5), Some(40), Some(0))));
        s.add(Some(&file(10, Some(1), None, None)));
        assert_eq!(s.lower(1), Some(&Datum::long(1)));
        assert_eq!(s.upper(1), None);
        assert_eq!(s.nulls(1), None);
        s.add(None);
        assert_eq!(s.lower(1), None);
    }

    #[test]
    fn distinct_counts_come_from_the_snapshots_statistics_file() {
        use iceberg::spec::{
            BlobMetadata, FormatVersion, SortOrder, StatisticsFile, UnboundPartitionSpec,
        };
        let blob = |fields: Vec<i32>, ndv: &str| BlobMetadata {
            r#type: "apache-datasketches-theta-v1".into(),
            snapshot_id: 7,
            sequence_number: 1,
            fields,
            properties: HashMap::from([("ndv".to_string(), ndv.to_string())]),
        };
        let file = |snapshot_id: i64, blobs: Vec<BlobMetadata>| StatisticsFile {
            snapshot_id,
            statistics_path: format!("file:///t/metadata/{snapshot_id}.stats"),
            file_size_in_bytes: 1,
            file_footer_size_in_bytes: 1,
            key_metadata: None,
            blob_metadata: blobs,
        };
        let metadata = iceberg::spec::TableMetadataBuilder::new(
            schema(),
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "file:///t".to_string(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .set_statistics(file(7, vec![blob(vec![1], "42"), blob(vec![1, 2], "5")]))
        .set_statistics(file(8, vec![blob(vec![1], "99")]))
        .build()
        .unwrap()
        .metadata;
        assert_eq!(distinct_counts(&metadata, 7), HashMap::from([(1, 42)]));
        assert_eq!(distinct_counts(&metadata, 8), HashMap::from([(1, 99)]));
        assert!(distinct_counts(&metadata, 9).is_empty());
    }
}
