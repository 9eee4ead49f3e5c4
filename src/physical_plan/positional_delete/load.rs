//! Loading the deleted positions of a partition's data files: position delete files read
//! (whole or by range, a few at once, only the rows naming the files wanted) and deletion
//! vectors, gathered into one sorted list of positions per data file, reserved from the pool.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use datafusion::datasource::physical_plan::parquet::DefaultParquetFileReaderFactory;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::StreamExt;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics as ParquetStatistics;

use super::dv::DeletionVectorRef;
use crate::physical_plan::parquet_files::{fetch_footer, BoxedReader, InMemoryParquet};
use crate::storage::location::file_at;

/// Field id of a position delete file's `file_path` column (Iceberg spec, reserved ids).
pub(super) const FILE_PATH_ID: i32 = 2147483546;

/// Field id of a position delete file's `pos` column.
pub(super) const POS_ID: i32 = 2147483545;

/// A position delete file to read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PositionDeleteFile {
    /// Object store location.
    pub location: String,
    /// File size in bytes.
    pub size: u64,
    /// Delete rows in the file (from its manifest entry; a deletion vector's cardinality).
    pub rows: u64,
    /// When the file is a Puffin file: the deletion vector to read from it.
    pub deletion_vector: Option<DeletionVectorRef>,
    /// The one data file (as recorded) that every delete in the file names, when its manifest
    /// entry says so: its `file_path` column need not be read.
    #[serde(default)]
    pub referenced_data_file: Option<String>,
}

impl PositionDeleteFile {
    /// The planned delete file `d` of the data file recorded as `data_file`, at the object
    /// store location `location`.
    pub fn of(d: &crate::file_planning::DeleteFileRef, location: String, data_file: &str) -> Self {
        Self {
            location,
            size: d.size,
            rows: d.record_count,
            referenced_data_file: d.referenced_data_file.clone(),
            deletion_vector: d.deletion_vector.map(|b| DeletionVectorRef {
                data_file: data_file.to_string(),
                offset: b.offset,
                length: b.length,
            }),
        }
    }
}

/// The position delete files that apply to one data file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FileDeletes {
    /// The data file's location as recorded in the table (what `file_path` holds).
    pub recorded_path: String,
    /// The delete files to read for it.
    pub delete_files: Vec<PositionDeleteFile>,
}

/// Deleted positions by data file location, and the reservation that pays for them.
pub(super) struct Bitmaps {
    pub(super) positions: HashMap<String, Deleted>,
    pub(super) _reservation: MemoryReservation,
}

/// One data file's deleted positions, sorted and distinct. Positions of a data file fit in 32
/// bits (a partition with a larger one takes the anti-join route).
#[derive(Debug, Clone, Default)]
pub(super) struct Deleted(Arc<Vec<u32>>);

impl Deleted {
    pub(super) fn from_sorted(positions: Vec<u32>) -> Self {
        Self(Arc::new(positions))
    }

    pub(super) fn positions(&self) -> &[u32] {
        &self.0
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Positions gathered for one data file while its delete files are read.
#[derive(Debug, Default)]
pub(super) struct Gathered {
    pub(super) positions: Vec<u32>,
    /// Whether `positions` is strictly increasing so far (else sorted and deduplicated at the
    /// end).
    pub(super) sorted: bool,
}

impl Gathered {
    /// Adds a run of positions; `false` when one does not fit in 32 bits.
    pub(super) fn extend(&mut self, run: &[i64]) -> bool {
        if run.iter().any(|p| *p > i64::from(u32::MAX)) {
            return false;
        }
        let increasing = run.windows(2).all(|w| w[0] < w[1]);
        let after = match (self.positions.last(), run.first()) {
            (Some(last), Some(first)) => i64::from(*last) < *first,
            _ => true,
        };
        self.sorted = (self.sorted || self.positions.is_empty()) && increasing && after;
        self.positions.extend(run.iter().map(|p| *p as u32));
        true
    }

    /// Adds the positions another delete file gathered for the same data file.
    pub(super) fn append(&mut self, other: Gathered) {
        if self.positions.is_empty() {
            *self = other;
            return;
        }
        let after = match (self.positions.last(), other.positions.first()) {
            (Some(last), Some(first)) => last < first,
            _ => true,
        };
        self.sorted = self.sorted && other.sorted && after;
        self.positions.extend(other.positions);
    }

    pub(super) fn finish(mut self) -> Deleted {
        if !self.sorted {
            self.positions.sort_unstable();
            self.positions.dedup();
        }
        Deleted::from_sorted(self.positions)
    }
}

/// Position delete files read at once by one partition.
pub(super) const DELETE_FILES_IN_FLIGHT: usize = 4;

/// Position delete files up to this size are fetched whole, in one request (on object storage a
/// footer read and a row read are two round trips); larger ones are read by range.
pub(super) const WHOLE_DELETE_FILE_BYTES: u64 = 4 << 20;

/// The first footer read of a larger position delete file: its last 64 KiB.
pub(super) const DELETE_FOOTER_HINT: usize = 64 << 10;

/// How `file_path` of position delete files is read.
pub(super) fn path_dictionary() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// The top-level column of a position delete file with field id `id` (by name `name` when the
/// file carries no ids).
pub(super) fn column_index(
    schema: &arrow::datatypes::Schema,
    id: i32,
    name: &str,
) -> Option<usize> {
    let by_id = schema.fields().iter().position(|f| {
        f.metadata()
            .get("PARQUET:field_id")
            .and_then(|v| v.parse::<i32>().ok())
            == Some(id)
    });
    by_id.or_else(|| schema.fields().iter().position(|f| f.name() == name))
}

/// Adds the positions of the deletion vector `dv` of `file` to `gathered` when its data file
/// is one of `wanted` (recorded path → location); `false` when one does not fit in 32 bits.
pub(super) async fn read_deletion_vector(
    store: &Arc<dyn ObjectStore>,
    file: &PositionDeleteFile,
    dv: &DeletionVectorRef,
    wanted: &HashMap<String, String>,
    gathered: &mut impl PositionSink,
) -> Result<bool> {
    let Some(location) = wanted.get(&dv.data_file) else {
        return Ok(true);
    };
    let positions = super::dv::read(store.as_ref(), &file.location, dv, file.rows).await?;
    let mut iter = positions.iter();
    loop {
        let run: Vec<i64> = iter.by_ref().take(64 * 1024).map(|p| p as i64).collect();
        if run.is_empty() {
            return Ok(true);
        }
        if !gathered.add(location, &run) {
            return Ok(false);
        }
    }
}

/// Where the positions read from delete files go.
pub(super) trait PositionSink {
    /// Adds a run of non-negative positions of the data file at `location`; `false` when the
    /// sink cannot hold them (the reading stops).
    fn add(&mut self, location: &str, run: &[i64]) -> bool;

    /// Makes room for `rows` more positions of the data file at `location`.
    fn reserve(&mut self, _location: &str, _rows: usize) {}
}

/// `f` applied to the positions gathered for the data file at `location` (its key allocated
/// once, when first seen).
pub(super) fn with_gathered<R>(
    lists: &mut HashMap<String, Gathered>,
    location: &str,
    f: impl FnOnce(&mut Gathered) -> R,
) -> R {
    match lists.get_mut(location) {
        Some(g) => f(g),
        None => f(lists.entry(location.to_string()).or_default()),
    }
}

impl PositionSink for HashMap<String, Gathered> {
    fn reserve(&mut self, location: &str, rows: usize) {
        with_gathered(self, location, |g| g.positions.reserve(rows));
    }

    fn add(&mut self, location: &str, run: &[i64]) -> bool {
        with_gathered(self, location, |g| g.extend(run))
    }
}

/// Positions of one data file, any width.
impl PositionSink for roaring::RoaringTreemap {
    fn add(&mut self, _location: &str, run: &[i64]) -> bool {
        self.extend(run.iter().map(|p| *p as u64));
        true
    }
}

/// Every position that the delete files `files` (position delete files and deletion vectors,
/// at object store locations of `store`) delete in the data file recorded as `data_file`.
pub(crate) async fn positions_in(
    store: &Arc<dyn ObjectStore>,
    files: &[PositionDeleteFile],
    data_file: &str,
) -> Result<roaring::RoaringTreemap> {
    let wanted = HashMap::from([(data_file.to_string(), data_file.to_string())]);
    let mut out = roaring::RoaringTreemap::new();
    for file in files {
        match &file.deletion_vector {
            Some(dv) => read_deletion_vector(store, file, dv, &wanted, &mut out).await?,
            None => {
                let whole = file.size <= WHOLE_DELETE_FILE_BYTES;
                read_position_deletes(store, file, whole, &wanted, &mut out).await?
            }
        };
    }
    Ok(out)
}

/// Adds the positions `file` deletes in the data files of `wanted` (recorded path → location)
/// to `gathered` (by location); `false` when one does not fit in 32 bits. Row groups whose
/// `file_path` bounds exclude every wanted path are not read.
/// `whole`: the file is fetched in one request and read from memory (small files); otherwise its
/// footer, then the row groups it needs, are read by range.
pub(super) async fn read_position_deletes(
    store: &Arc<dyn ObjectStore>,
    file: &PositionDeleteFile,
    whole: bool,
    wanted: &HashMap<String, String>,
    gathered: &mut impl PositionSink,
) -> Result<bool> {
    let recorded = file_at(&file.location, file.size)?.object_meta;
    let (footer, reader) =
        match whole {
            true => {
                let file = InMemoryParquet::fetch(store.as_ref(), &recorded.location).await?;
                (file.footer(), BoxedReader(Box::new(file)))
            }
            false => {
                let (footer, meta) = fetch_footer(
                    store.as_ref(),
                    &recorded,
                    None,
                    Some(DELETE_FOOTER_HINT),
                    false,
                )
                .await?;
                let reader = DefaultParquetFileReaderFactory::new(Arc::clone(store))
                    .create_reader(0, meta.into(), None, &ExecutionPlanMetricsSet::new())?;
                (footer, BoxedReader(reader))
            }
        };
    let metadata = ArrowReaderMetadata::try_new(footer, ArrowReaderOptions::new())?;
    let schema = Arc::clone(metadata.schema());
    let (Some(path_col), Some(pos_col)) = (
        column_index(&schema, FILE_PATH_ID, "file_path"),
        column_index(&schema, POS_ID, "pos"),
    ) else {
        return Err(DataFusionError::Execution(format!(
            "position delete file {} has no file_path and pos columns (schema: {schema})",
            file.location
        )));
    };
    // `file_path` repeats one path over long runs: read as a dictionary, each distinct path is
    // decoded and looked up once instead of once per row.
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    if matches!(
        fields[path_col].data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        let field = fields[path_col].as_ref().clone();
        fields[path_col] = Arc::new(field.with_data_type(path_dictionary()));
    }
    let hinted = Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ));
    let metadata = ArrowReaderMetadata::try_new(
        Arc::clone(metadata.metadata()),
        ArrowReaderOptions::new().with_schema(hinted),
    )?;
    let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, metadata);
    let descr = builder.parquet_schema();
    let path_leaf = descr
        .columns()
        .iter()
        .position(|c| c.path().parts() == [schema.field(path_col).name().as_str()]);
    // Row groups whose `file_path` bounds exclude every wanted path are not read.
    let row_groups = row_groups_naming(builder.metadata(), path_leaf, wanted);
    if row_groups.is_empty() {
        return Ok(true);
    }
    // A file whose manifest entry names its one data file: `file_path` is not decoded.
    let single = file
        .referenced_data_file
        .as_ref()
        .and_then(|referenced| wanted.get(referenced));
    if let Some(location) = single {
        let rows = row_groups
            .iter()
            .map(|&i| builder.metadata().row_group(i).num_rows().max(0) as usize)
            .sum();
        gathered.reserve(location, rows);
        let mask = ProjectionMask::roots(descr, [pos_col]);
        let mut stream = builder
            .with_projection(mask)
            .with_row_groups(row_groups)
            .build()?;
        while let Some(batch) = stream.next().await {
            let pos = arrow::compute::cast(batch?.column(0), &DataType::Int64)?;
            let (_, pos) = without_null_rows(None, pos, &file.location)?;
            let pos = pos.as_primitive::<Int64Type>();
            if !gather_run(gathered, location, pos, &file.location)? {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    let mask = ProjectionMask::roots(descr, [path_col, pos_col]);
    let mut stream = builder
        .with_projection(mask)
        .with_row_groups(row_groups)
        .build()?;
    // Projected columns keep file order.
    let (path_idx, pos_idx) = if path_col < pos_col { (0, 1) } else { (1, 0) };
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let paths = arrow::compute::cast(batch.column(path_idx), &path_dictionary())?;
        let pos = arrow::compute::cast(batch.column(pos_idx), &DataType::Int64)?;
        let (paths, pos) = without_null_rows(Some(paths), pos, &file.location)?;
        let paths = match &paths {
            Some(paths) => paths.as_dictionary::<Int32Type>(),
            None => return Err(DataFusionError::Internal("file_path column lost".into())),
        };
        if !gather_paths(
            paths,
            pos.as_primitive::<Int64Type>(),
            wanted,
            gathered,
            file,
        )? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The row groups of a position delete file whose `file_path` bounds (leaf `path_leaf`) may
/// hold one of the `wanted` paths.
fn row_groups_naming(
    metadata: &ParquetMetaData,
    path_leaf: Option<usize>,
    wanted: &HashMap<String, String>,
) -> Vec<usize> {
    metadata
        .row_groups()
        .iter()
        .enumerate()
        .filter(|(_, rg)| {
            let Some(leaf) = path_leaf else { return true };
            match rg.column(leaf).statistics() {
                Some(ParquetStatistics::ByteArray(s)) => match (s.min_opt(), s.max_opt()) {
                    (Some(min), Some(max)) => wanted
                        .keys()
                        .any(|p| p.as_bytes() >= min.data() && p.as_bytes() <= max.data()),
                    _ => true,
                },
                _ => true,
            }
        })
        .map(|(i, _)| i)
        .collect()
}

/// Adds the positions of a batch of `file` (`paths` and `pos`, no NULLs) that name a data
/// file of `wanted` to `gathered`; `false` when `gathered` cannot hold them.
fn gather_paths(
    paths: &arrow::array::DictionaryArray<Int32Type>,
    pos: &arrow::array::Int64Array,
    wanted: &HashMap<String, String>,
    gathered: &mut impl PositionSink,
    file: &PositionDeleteFile,
) -> Result<bool> {
    // The data file each distinct path names, when it is one of `wanted`: looked up when a
    // run first names it (the dictionary may hold the paths of a whole shared file).
    let names = paths.values().as_string::<i32>();
    let mut targets: Vec<Option<Option<&String>>> = vec![None; names.len()];
    let keys = paths.keys().values();
    // Delete files are sorted by path: positions are gathered per run of one path and added
    // to that file's list at once.
    let mut run_start = 0;
    for i in 1..=keys.len() {
        if i < keys.len() && keys[i] == keys[run_start] {
            continue;
        }
        let key = keys[run_start] as usize;
        let target = match targets.get(key).copied().flatten() {
            Some(t) => t,
            None => {
                let t = wanted.get(names.value(key));
                targets[key] = Some(t);
                t
            }
        };
        if let Some(location) = target {
            let run = pos.slice(run_start, i - run_start);
            if !gather_run(gathered, location, &run, &file.location)? {
                return Ok(false);
            }
        }
        run_start = i;
    }
    Ok(true)
}

/// Adds `run`, positions of the data file at `location` read from the delete file `file`, to
/// `gathered`; an error for a NULL or negative position, `false` when `gathered` cannot hold them.
/// The rows of a position delete file's `file_path` and `pos` columns (or `pos` alone) without
/// those where either is NULL. Such rows delete nothing: Impala writes them, and Java,
/// pyiceberg and DuckDB skip them; so do we, with a warning naming the file.
pub(super) fn without_null_rows(
    paths: Option<ArrayRef>,
    pos: ArrayRef,
    file: &str,
) -> Result<(Option<ArrayRef>, ArrayRef)> {
    let null_paths = paths.as_ref().is_some_and(|p| p.logical_null_count() > 0);
    if !null_paths && pos.null_count() == 0 {
        return Ok((paths, pos));
    }
    let mut valid = arrow::compute::is_not_null(&pos)?;
    if let Some(paths) = &paths {
        valid = arrow::compute::and(&valid, &arrow::compute::is_not_null(paths)?)?;
    }
    log::warn!(
        "position delete file {file}: {} rows whose file_path or pos is NULL are skipped",
        valid.len() - valid.true_count()
    );
    let paths = paths
        .map(|p| arrow::compute::filter(&p, &valid))
        .transpose()?;
    Ok((paths, arrow::compute::filter(&pos, &valid)?))
}

pub(super) fn gather_run(
    gathered: &mut impl PositionSink,
    location: &str,
    run: &arrow::array::Int64Array,
    file: &str,
) -> Result<bool> {
    if run.null_count() > 0 {
        return Err(DataFusionError::Execution(format!(
            "position delete file {file} has a NULL pos"
        )));
    }
    if let Some(negative) = run.values().iter().find(|p| **p < 0) {
        return Err(DataFusionError::Execution(format!(
            "position delete file {file} deletes negative position {negative}"
        )));
    }
    Ok(gathered.add(location, run.values()))
}
