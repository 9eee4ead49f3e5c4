//! The Iceberg column metrics of a written parquet file, from its footer: sizes, value, null and
//! NaN counts, lower and upper bounds per field id (a bound only when every row group with values
//! gives one).

use std::collections::{HashMap, HashSet};

use arrow::array::{Array, AsArray, BooleanBufferBuilder, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Field, Float32Type, Float64Type};
use datafusion::error::Result;
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, PrimitiveType,
    Schema as IcebergSchema, Struct, Type,
};
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::statistics::{Statistics, ValueStatistics};

use crate::physical_plan::parquet_files::field_id;

/// Adds the NaN values of every float column of `batch` (nested ones too) to `counts`. Only
/// values that exist count: a value under a null struct, list or map is not in the file.
pub(super) fn count_nans(batch: &RecordBatch, counts: &mut HashMap<i32, u64>) {
    for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
        count_array_nans(field, array.as_ref(), None, counts);
    }
}

/// `present`: which slots of `array` its parents let exist (`None`: all).
pub(super) fn count_array_nans(
    field: &Field,
    array: &dyn Array,
    present: Option<&BooleanBuffer>,
    counts: &mut HashMap<i32, u64>,
) {
    // Most columns hold no float at any depth: nothing to walk.
    if !holds_floats(array.data_type()) {
        return;
    }
    // The slots that exist and are not null themselves.
    let valid = match (present, array.logical_nulls()) {
        (None, None) => None,
        (Some(p), None) => Some(p.clone()),
        (None, Some(n)) => Some(n.into_inner()),
        (Some(p), Some(n)) => Some(p & n.inner()),
    };
    fn nans<T: arrow::datatypes::ArrowPrimitiveType>(
        array: &dyn Array,
        valid: Option<&BooleanBuffer>,
        is_nan: impl Fn(T::Native) -> bool,
    ) -> u64 {
        let values = array.as_primitive::<T>().values();
        match valid {
            None => values.iter().filter(|v| is_nan(**v)).count() as u64,
            Some(valid) => valid.set_indices().filter(|i| is_nan(values[*i])).count() as u64,
        }
    }
    let id = field_id(field);
    match array.data_type() {
        DataType::Float32 | DataType::Float64 => {
            if let Some(id) = id {
                let n = match array.data_type() {
                    DataType::Float32 => nans::<Float32Type>(array, valid.as_ref(), f32::is_nan),
                    _ => nans::<Float64Type>(array, valid.as_ref(), f64::is_nan),
                };
                *counts.entry(id).or_insert(0) += n;
            }
        }
        DataType::Struct(fields) => {
            for (child_field, child) in fields.iter().zip(array.as_struct().columns()) {
                count_array_nans(child_field, child.as_ref(), valid.as_ref(), counts);
            }
        }
        DataType::List(child_field) => {
            list_nans(child_field, array.as_list::<i32>(), valid.as_ref(), counts)
        }
        DataType::LargeList(child_field) => {
            list_nans(child_field, array.as_list::<i64>(), valid.as_ref(), counts)
        }
        DataType::FixedSizeList(child_field, size) => {
            let list = array.as_fixed_size_list();
            let size = *size as usize;
            let present = present_children(list.values().len(), list.len(), valid.as_ref(), |i| {
                (i * size, (i + 1) * size)
            });
            count_array_nans(child_field, list.values().as_ref(), Some(&present), counts);
        }
        DataType::Map(entries_field, _) => {
            let map = array.as_map();
            let offsets = map.value_offsets();
            let present = present_children(map.entries().len(), map.len(), valid.as_ref(), |i| {
                (offsets[i] as usize, offsets[i + 1] as usize)
            });
            count_array_nans(entries_field, map.entries(), Some(&present), counts);
        }
        _ => {}
    }
}

/// Whether values of `ty` are, or hold, floats.
pub(super) fn holds_floats(ty: &DataType) -> bool {
    match ty {
        DataType::Float32 | DataType::Float64 => true,
        DataType::Struct(fields) => fields.iter().any(|f| holds_floats(f.data_type())),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => holds_floats(f.data_type()),
        _ => false,
    }
}

/// Which child values exist, given which parent slots do (`None`: all) and each slot's range.
pub(super) fn present_children(
    children: usize,
    slots: usize,
    valid: Option<&BooleanBuffer>,
    range: impl Fn(usize) -> (usize, usize),
) -> BooleanBuffer {
    let mut present = BooleanBufferBuilder::new(children);
    present.append_n(children, false);
    for slot in 0..slots {
        if valid.is_none_or(|v| v.value(slot)) {
            let (start, end) = range(slot);
            for i in start..end {
                present.set_bit(i, true);
            }
        }
    }
    present.finish()
}

pub(super) fn list_nans<O: arrow::array::OffsetSizeTrait>(
    child_field: &Field,
    list: &arrow::array::GenericListArray<O>,
    valid: Option<&BooleanBuffer>,
    counts: &mut HashMap<i32, u64>,
) {
    let offsets = list.value_offsets();
    let present = present_children(list.values().len(), list.len(), valid, |i| {
        (offsets[i].as_usize(), offsets[i + 1].as_usize())
    });
    count_array_nans(child_field, list.values().as_ref(), Some(&present), counts);
}

pub(super) enum Side {
    Lower,
    Upper,
}

/// One side of a row group's statistics as an Iceberg value of `ty`; `None` when the
/// statistics do not give that side (or give it in a form `ty` cannot take).
pub(super) fn bound(ty: &PrimitiveType, stats: &Statistics, side: Side) -> Option<Datum> {
    fn pick<T: Copy>(s: &ValueStatistics<T>, side: &Side) -> Option<T> {
        match side {
            Side::Lower => s.min_opt().copied(),
            Side::Upper => s.max_opt().copied(),
        }
    }
    let decimal = |v: i128| Datum::try_from_bytes(&v.to_be_bytes(), ty.clone()).ok();
    match (ty, stats) {
        (PrimitiveType::Boolean, Statistics::Boolean(s)) => pick(s, &side).map(Datum::bool),
        (PrimitiveType::Int, Statistics::Int32(s)) => pick(s, &side).map(Datum::int),
        (PrimitiveType::Date, Statistics::Int32(s)) => pick(s, &side).map(Datum::date),
        (PrimitiveType::Long, Statistics::Int64(s)) => pick(s, &side).map(Datum::long),
        (PrimitiveType::Time, Statistics::Int64(s)) => {
            pick(s, &side).and_then(|v| Datum::time_micros(v).ok())
        }
        (PrimitiveType::Timestamp, Statistics::Int64(s)) => {
            pick(s, &side).map(Datum::timestamp_micros)
        }
        (PrimitiveType::Timestamptz, Statistics::Int64(s)) => {
            pick(s, &side).map(Datum::timestamptz_micros)
        }
        (PrimitiveType::TimestampNs, Statistics::Int64(s)) => {
            pick(s, &side).map(Datum::timestamp_nanos)
        }
        (PrimitiveType::TimestamptzNs, Statistics::Int64(s)) => {
            pick(s, &side).map(Datum::timestamptz_nanos)
        }
        (PrimitiveType::Float, Statistics::Float(s)) => pick(s, &side).map(Datum::float),
        (PrimitiveType::Double, Statistics::Double(s)) => pick(s, &side).map(Datum::double),
        (PrimitiveType::Decimal { .. }, Statistics::Int32(s)) => {
            pick(s, &side).and_then(|v| decimal(v.into()))
        }
        (PrimitiveType::Decimal { .. }, Statistics::Int64(s)) => {
            pick(s, &side).and_then(|v| decimal(v.into()))
        }
        (
            PrimitiveType::String
            | PrimitiveType::Binary
            | PrimitiveType::Decimal { .. }
            | PrimitiveType::Uuid
            | PrimitiveType::Fixed(_),
            Statistics::ByteArray(_) | Statistics::FixedLenByteArray(_),
        ) => {
            let bytes = match side {
                Side::Lower => stats.min_bytes_opt(),
                Side::Upper => stats.max_bytes_opt(),
            }?;
            if let PrimitiveType::Fixed(len) = ty {
                if bytes.len() as u64 != *len {
                    return None;
                }
            }
            Datum::try_from_bytes(bytes, ty.clone()).ok()
        }
        _ => None,
    }
}

/// Where a row group starts in the file, for the data file's split offsets.
pub(super) fn row_group_offset(group: &RowGroupMetaData) -> Option<i64> {
    group.file_offset().or_else(|| {
        (group.num_columns() > 0).then(|| {
            let first = group.column(0);
            first
                .dictionary_page_offset()
                .unwrap_or_else(|| first.data_page_offset())
        })
    })
}

/// The Iceberg description of a written parquet file (content, partition and spec are the
/// caller's): counts, sizes and bounds per field id, from the file's footer.
pub(super) fn file_metrics(
    schema: &IcebergSchema,
    metadata: &ParquetMetaData,
    file_size: usize,
    location: &str,
    nan_counts: HashMap<i32, u64>,
) -> Result<DataFileBuilder> {
    footer_metrics(
        schema,
        metadata,
        file_size,
        location,
        nan_counts,
        &embedded_id,
    )
}

/// The field id a parquet column carries.
pub(crate) fn embedded_id(column: &parquet::schema::types::ColumnDescriptor) -> Option<i32> {
    let info = column.self_type().get_basic_info();
    info.has_id().then(|| info.id())
}

/// [`file_metrics`] of any parquet file, its columns' field ids given by `id_of` (a file another
/// writer made may carry none: the table's name mapping gives them). A NaN bound (older writers
/// left them in) leaves that side of the column unbounded.
pub(crate) fn footer_metrics(
    schema: &IcebergSchema,
    metadata: &ParquetMetaData,
    file_size: usize,
    location: &str,
    nan_counts: HashMap<i32, u64>,
    id_of: &dyn Fn(&parquet::schema::types::ColumnDescriptor) -> Option<i32>,
) -> Result<DataFileBuilder> {
    let mut sizes: HashMap<i32, u64> = HashMap::new();
    let mut values: HashMap<i32, u64> = HashMap::new();
    let mut nulls: HashMap<i32, u64> = HashMap::new();
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    // Ids whose null count, lower or upper bound some row group leaves unknown.
    let mut unknown_nulls: HashSet<i32> = HashSet::new();
    let mut unbounded_lower: HashSet<i32> = HashSet::new();
    let mut unbounded_upper: HashSet<i32> = HashSet::new();

    for group in metadata.row_groups() {
        for column in group.columns() {
            let Some(id) = id_of(column.column_descr()) else {
                continue;
            };
            *sizes.entry(id).or_insert(0) += column.compressed_size() as u64;
            *values.entry(id).or_insert(0) += column.num_values() as u64;
            let ty = match schema.field_by_id(id).map(|f| f.field_type.as_ref()) {
                Some(Type::Primitive(ty)) => ty,
                _ => continue,
            };
            let Some(stats) = column.statistics() else {
                unknown_nulls.insert(id);
                unbounded_lower.insert(id);
                unbounded_upper.insert(id);
                continue;
            };
            let null_count = stats.null_count_opt();
            match null_count {
                Some(n) => *nulls.entry(id).or_insert(0) += n,
                None => {
                    unknown_nulls.insert(id);
                }
            }
            // Bounds no reader can trust: byte arrays in the deprecated signed order (older
            // writers), and times in another unit than the column's type.
            let signed_bytes = stats.is_min_max_deprecated()
                && matches!(
                    stats,
                    Statistics::ByteArray(_) | Statistics::FixedLenByteArray(_)
                );
            if signed_bytes || !unit_matches(column.column_descr(), ty) {
                unbounded_lower.insert(id);
                unbounded_upper.insert(id);
                continue;
            }
            // A row group of only nulls (or only NaNs) has no bounds and needs none.
            let only_nulls = null_count == Some(column.num_values() as u64);
            let nan = |v: &Datum| match v.literal() {
                iceberg::spec::PrimitiveLiteral::Float(f) => f.is_nan(),
                iceberg::spec::PrimitiveLiteral::Double(f) => f.is_nan(),
                _ => false,
            };
            let lower_bound = bound(ty, stats, Side::Lower).filter(|v| !nan(v));
            // A truncated maximum (not exact) is still an upper bound: writers round it up.
            let upper_bound = bound(ty, stats, Side::Upper).filter(|v| !nan(v));
            let lower_given = stats.min_bytes_opt().is_some();
            let upper_given = stats.max_bytes_opt().is_some();
            match lower_bound {
                Some(v) => {
                    if lower.get(&id).is_none_or(|cur| v < *cur) {
                        lower.insert(id, v);
                    }
                }
                None if only_nulls || (is_float(ty) && !lower_given) => {}
                None => {
                    unbounded_lower.insert(id);
                }
            }
            match upper_bound {
                Some(v) => {
                    if upper.get(&id).is_none_or(|cur| v > *cur) {
                        upper.insert(id, v);
                    }
                }
                None if only_nulls || (is_float(ty) && !upper_given) => {}
                None => {
                    unbounded_upper.insert(id);
                }
            }
        }
    }
    for id in &unknown_nulls {
        nulls.remove(id);
    }
    for id in &unbounded_lower {
        lower.remove(id);
    }
    for id in &unbounded_upper {
        upper.remove(id);
    }

    let mut builder = DataFileBuilder::default();
    builder
        .content(DataContentType::Data)
        .file_path(location.to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .record_count(metadata.file_metadata().num_rows() as u64)
        .file_size_in_bytes(file_size as u64)
        .column_sizes(sizes)
        .value_counts(values)
        .null_value_counts(nulls)
        .nan_value_counts(nan_counts)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(Some(
            metadata
                .row_groups()
                .iter()
                .filter_map(row_group_offset)
                .collect(),
        ));
    Ok(builder)
}

/// Whether the time unit of a parquet column (its logical or converted type) is the one the
/// Iceberg type `ty` stores (microseconds, nanoseconds for the `_ns` types); `true` for other
/// types and for columns that say nothing.
fn unit_matches(column: &parquet::schema::types::ColumnDescriptor, ty: &PrimitiveType) -> bool {
    use parquet::basic::{ConvertedType, LogicalType, TimeUnit};
    #[derive(PartialEq)]
    enum Unit {
        Millis,
        Micros,
        Nanos,
    }
    let expected = match ty {
        PrimitiveType::Time | PrimitiveType::Timestamp | PrimitiveType::Timestamptz => Unit::Micros,
        PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs => Unit::Nanos,
        _ => return true,
    };
    let of = |u: &TimeUnit| match u {
        TimeUnit::MILLIS => Unit::Millis,
        TimeUnit::MICROS => Unit::Micros,
        TimeUnit::NANOS => Unit::Nanos,
    };
    let found = match column.logical_type_ref() {
        Some(LogicalType::Timestamp(t)) => of(&t.unit),
        Some(LogicalType::Time(t)) => of(&t.unit),
        _ => match column.converted_type() {
            ConvertedType::TIMESTAMP_MILLIS | ConvertedType::TIME_MILLIS => Unit::Millis,
            ConvertedType::TIMESTAMP_MICROS | ConvertedType::TIME_MICROS => Unit::Micros,
            _ => return true,
        },
    };
    found == expected
}

/// Float columns leave a row group's bounds out when all its values are NaN: bounds cover the
/// non-NaN values, so such a row group constrains nothing.
pub(super) fn is_float(ty: &PrimitiveType) -> bool {
    matches!(ty, PrimitiveType::Float | PrimitiveType::Double)
}
