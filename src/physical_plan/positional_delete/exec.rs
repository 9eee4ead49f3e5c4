//! [`PositionalDeleteExec`]: removes position-deleted rows while DataFusion's parquet reader
//! reads each data file, by turning the file's deleted positions into a row selection.
//!
//! ```text
//!   position delete files (file_path, pos)        data file D (row groups g0 g1 g2)
//!        │ rows whose file_path = D                     │
//!        ▼                                              ▼
//!   D's deleted positions (sorted) ──► per row group: scan | skip | RowSelection
//!                                        ──► ParquetAccessPlan on D's PartitionedFile
//!                                        ──► DataFusion's parquet scan of D alone
//! ```
//! Sparse deletes are never decoded. Dense ones (1 row in 64 or more, in a scan without a
//! predicate) are dropped right after decoding instead: a selection of such short runs costs
//! more to build and follow than the rows it saves. Under equality deletes
//! ([`PositionalDeleteExec::with_live_column`]) they are only marked, and the equality-delete
//! join above drops them with its own rows: one copy of the rows kept instead of two. The
//! deleted positions of one partition's files are held at once (4 bytes per deleted row, reserved from the memory pool); access plans
//! are built for one file at a time, just before it is read.
//!
//! With [`PositionalDeleteExec::with_positions`] the node also appends each row's position in
//! its data file (`_pos`, what a merge-on-read `DELETE` writes into new position delete files).
//! Every file is then read whole apart from its deleted rows, with no predicate inside the
//! reader, so the k-th row read is the k-th live position of the file.
//!
//! DataFusion may split a large file into byte ranges read by different partitions. Files whose
//! rows are numbered (deletes apply, or positions are asked for) are then read here by row group:
//! a range reads the groups whose first page starts inside it, and numbers rows from the first
//! of them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::physical_plan::keep_rows::keep_rows;
use arrow::array::RecordBatch;
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::DefaultParquetFileReaderFactory;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::statistics::Statistics as ParquetStatistics;

use super::dv::DeletionVectorRef;
use crate::location::file_at;
use crate::physical_plan::parquet_files::{fetch_footer, BoxedReader, InMemoryParquet};
use crate::physical_plan::{single_child, without_work_stealing};

/// Field id of a position delete file's `file_path` column (Iceberg spec, reserved ids).
const FILE_PATH_ID: i32 = 2147483546;
/// Field id of a position delete file's `pos` column.
const POS_ID: i32 = 2147483545;

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
    pub fn of(d: &crate::scan::DeleteFileRef, location: String, data_file: &str) -> Self {
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

/// Name of the row position column [`PositionalDeleteExec::with_positions`] appends.
pub const POSITION_COLUMN: &str = "__iceberg_pos";

/// A column [`PositionalDeleteExec`] appends to the scan's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Appended {
    /// [`POSITION_COLUMN`].
    Positions,
    /// [`LIVE_COLUMN`].
    Live,
}

/// Name of the column [`PositionalDeleteExec::with_live_column`] appends: `false` on the rows
/// of densely deleted files that are deleted.
pub const LIVE_COLUMN: &str = "__iceberg_live";

/// Removes position-deleted rows from a parquet scan (its child, a [`DataSourceExec`] over a
/// [`FileScanConfig`]) by handing DataFusion's reader a row selection per data file.
#[derive(Debug)]
pub struct PositionalDeleteExec {
    input: Arc<dyn ExecutionPlan>,
    /// By object store location of the data file.
    deletes: Arc<HashMap<String, FileDeletes>>,
    /// The column appended to the scan's, if any, and the output's properties with it.
    appended: Option<(Appended, Arc<PlanProperties>)>,
    /// Delete rows per partition above which the partition takes the anti-join route.
    join_threshold: u64,
    metrics: ExecutionPlanMetricsSet,
}

/// The default of [`PositionalDeleteExec::with_join_threshold`]: delete rows per partition.
pub const DEFAULT_JOIN_THRESHOLD: u64 = 20_000_000;

impl PositionalDeleteExec {
    /// Applies `deletes` (keyed by data file object location) to the parquet scan `input`.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        deletes: HashMap<String, FileDeletes>,
    ) -> Result<Self> {
        scan_config(&input, None)?;
        Ok(Self {
            input,
            deletes: Arc::new(deletes),
            appended: None,
            join_threshold: DEFAULT_JOIN_THRESHOLD,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// Routes a partition whose applicable position delete files hold more than `rows` rows to
    /// the anti-join (a sorted, spilling merge) instead of in-memory bitmaps. A partition whose
    /// bitmaps do not fit in the memory pool takes the anti-join too.
    pub fn with_join_threshold(mut self, rows: u64) -> Self {
        self.join_threshold = rows;
        self
    }

    /// Also appends [`POSITION_COLUMN`] (Int64): each row's position in its data file. Filters
    /// are then kept out of the scan below (they would hide rows from the count).
    pub fn with_positions(self) -> Result<Self> {
        scan_config(&self.input, None)?;
        Ok(self.appending(Appended::Positions))
    }

    /// Also appends [`LIVE_COLUMN`] (Boolean, non-null), and marks the deleted rows of files
    /// whose deletes are dense `false` there instead of dropping them: the node above (an
    /// [`EqualityDeleteExec`](crate::physical_plan::equality_delete::EqualityDeleteExec)) drops
    /// them together with its own, so the rows kept are copied once, not twice. Rows removed
    /// otherwise (by a row selection, or on the anti-join route) are not read at all and every
    /// row output is marked `true`. Replaces [`Self::with_positions`] (one column is appended).
    pub fn with_live_column(self) -> Self {
        self.appending(Appended::Live)
    }

    /// Whether [`LIVE_COLUMN`] is appended.
    pub fn has_live_column(&self) -> bool {
        self.appends(Appended::Live)
    }

    fn appends(&self, column: Appended) -> bool {
        self.appended.as_ref().is_some_and(|(c, _)| *c == column)
    }

    fn appending(mut self, column: Appended) -> Self {
        let schema = match column {
            Appended::Positions => with_position_field(&self.input.schema()),
            Appended::Live => with_live_field(&self.input.schema()),
        };
        let props = self.input.properties();
        let props = Arc::new(PlanProperties::new(
            datafusion::physical_expr::EquivalenceProperties::new(schema),
            props.partitioning.clone(),
            props.emission_type,
            props.boundedness,
        ));
        self.appended = Some((column, props));
        self
    }

    /// The deletes, by object store location of the data file.
    pub fn deletes(&self) -> &HashMap<String, FileDeletes> {
        &self.deletes
    }

    /// Whether [`POSITION_COLUMN`] is appended.
    pub fn has_positions(&self) -> bool {
        self.appends(Appended::Positions)
    }

    /// See [`PositionalDeleteExec::with_join_threshold`].
    pub fn join_threshold(&self) -> u64 {
        self.join_threshold
    }

    fn delete_file_count(&self) -> usize {
        let mut all: Vec<&PositionDeleteFile> = self
            .deletes
            .values()
            .flat_map(|d| d.delete_files.iter())
            .collect();
        all.sort_by(|a, b| a.location.cmp(&b.location));
        all.dedup();
        all.len()
    }
}

/// The file scan configuration of a parquet `DataSourceExec` (or of the scan a distributed
/// leaf runs in the task of `context`; its original scan without one).
fn scan_config<'a>(
    plan: &'a Arc<dyn ExecutionPlan>,
    context: Option<&Arc<TaskContext>>,
) -> Result<&'a FileScanConfig> {
    let plan = crate::physical_plan::task_leaf(plan, context);
    crate::physical_plan::file_scan(plan).ok_or_else(|| {
        DataFusionError::Internal(format!(
            "PositionalDeleteExec needs a file scan as its input, got {}",
            plan.name()
        ))
    })
}

impl DisplayAs for PositionalDeleteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PositionalDeleteExec: data_files={}, delete_files={}, route=row_selection or \
             anti_join above {} delete rows per partition",
            self.deletes.len(),
            self.delete_file_count(),
            self.join_threshold
        )?;
        match self.appended.as_ref().map(|(c, _)| c) {
            Some(Appended::Positions) => write!(f, ", positions={POSITION_COLUMN}")?,
            Some(Appended::Live) => write!(f, ", marks dense deletes in {LIVE_COLUMN}")?,
            None => {}
        }
        Ok(())
    }
}

impl ExecutionPlan for PositionalDeleteExec {
    fn name(&self) -> &str {
        "PositionalDeleteExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        match &self.appended {
            Some((_, p)) => p,
            None => self.input.properties(),
        }
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        // Rows do keep their order (the output properties say so), but the input must stay the
        // file scan: answering `true` would let sort pushdown put a `SortExec` below this node.
        vec![false]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = single_child("PositionalDeleteExec", children)?;
        scan_config(&input, None)?;
        let node = Self {
            input,
            deletes: Arc::clone(&self.deletes),
            appended: None,
            join_threshold: self.join_threshold,
            metrics: ExecutionPlanMetricsSet::new(),
        };
        Ok(Arc::new(match &self.appended {
            Some((column, _)) => node.appending(*column),
            None => node,
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let config = scan_config(&self.input, Some(&context))?;
        let files: Vec<PartitionedFile> = config
            .file_groups
            .get(partition)
            .map(|g| g.files().to_vec())
            .unwrap_or_default();
        let positions = self.has_positions();
        let live = self.has_live_column();
        if !positions
            && !files
                .iter()
                .any(|f| self.deletes.contains_key(f.object_meta.location.as_ref()))
        {
            let stream = self
                .input
                .execute(partition, without_work_stealing(context))?;
            if !live {
                return Ok(stream);
            }
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                self.schema(),
                all_live(stream, self.schema()),
            )));
        }
        // What this node reads itself (delete files, footers of the files they apply to) is
        // counted apart from the scan below it.
        let store = crate::physical_plan::parquet_files::counted_store(
            context
                .runtime_env()
                .object_store(&config.object_store_url)?,
            MetricBuilder::new(&self.metrics).counter("delete_load_requests", partition),
            MetricBuilder::new(&self.metrics).counter("delete_load_bytes", partition),
        );
        let reservation = MemoryConsumer::new(format!("PositionalDeleteExec[{partition}]"))
            .register(context.memory_pool());
        let opener = Arc::new(FileOpener {
            config: config.clone(),
            unfiltered: without_predicate(config)?,
            store,
            deletes: Arc::clone(&self.deletes),
            context,
            removed: MetricBuilder::new(&self.metrics).counter("position_deleted_rows", partition),
            files_read: MetricBuilder::new(&self.metrics)
                .counter("position_delete_files_read", partition),
            dense_files: MetricBuilder::new(&self.metrics).counter("dense_delete_files", partition),
            filter_free: config.file_source().filter().is_none(),
        });
        let schema = self.schema();
        let threshold = self.join_threshold;
        let metric =
            |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, partition);
        let (bitmap_route, join_route) = (metric("bitmap_route"), metric("anti_join_route"));
        let load_time =
            MetricBuilder::new(&self.metrics).subset_time("position_delete_load_time", partition);
        let spill = SpillCounters {
            count: metric("anti_join_spill_count"),
            bytes: metric("anti_join_spilled_bytes"),
            rows: metric("anti_join_spilled_rows"),
        };
        let out_schema = Arc::clone(&schema);
        // The bitmaps start loading now, not when the first batch is asked for: a node above
        // that reads first (the equality-delete join's keys) does not wait for them after.
        let delete_rows: u64 = opener.delete_files(&files).iter().map(|f| f.rows).sum();
        let load = (delete_rows <= threshold).then(|| {
            let (opener, files) = (Arc::clone(&opener), files.clone());
            eager(async move {
                let _timer = load_time.timer();
                opener.load_bitmaps(&files, reservation).await
            })
        });
        let stream = futures::stream::once(async move {
            let bitmaps = match load {
                None => None,
                Some(load) => match load.await {
                    // `None`: a position beyond 32 bits; the anti-join takes any.
                    Ok(b) => b,
                    // Too large for memory after all: the anti-join needs only a batch.
                    Err(DataFusionError::ResourcesExhausted(_)) => None,
                    Err(e) => return Err(e),
                },
            };
            let stream: BoxStream<'static, Result<RecordBatch>> = match bitmaps {
                Some(bitmaps) => {
                    bitmap_route.add(1);
                    let bitmaps = Arc::new(bitmaps);
                    let per_file = futures::stream::iter(files).then(move |file| {
                        let opener = Arc::clone(&opener);
                        let bitmaps = Arc::clone(&bitmaps);
                        async move {
                            Ok::<_, DataFusionError>(
                                opener
                                    .open(file, &bitmaps.positions, positions, false, live)
                                    .await?
                                    .0,
                            )
                        }
                    });
                    Box::pin(per_file.try_flatten())
                }
                None => {
                    join_route.add(1);
                    let with_positions = positions.then(|| Arc::clone(&out_schema));
                    let joined = opener.anti_join(files, with_positions, spill)?;
                    match live {
                        true => all_live(joined, out_schema),
                        false => joined,
                    }
                }
            };
            Ok::<_, DataFusionError>(stream)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(
        &self,
        partition: Option<usize>,
    ) -> Vec<datafusion::physical_plan::ChildStats> {
        vec![datafusion::physical_plan::ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &datafusion::physical_plan::StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        // Deleted rows make every count an upper bound.
        let mut stats = input_stats[0].as_ref().clone().to_inexact();
        if self.appended.is_some() {
            stats
                .column_statistics
                .push(datafusion::common::ColumnStatistics::new_unknown());
        }
        Ok(Arc::new(stats))
    }

    fn gather_filters_for_pushdown(
        &self,
        _phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        _config: &ConfigOptions,
    ) -> Result<FilterDescription> {
        if self.has_positions() {
            // Every live row must be read for the positions to count right.
            return Ok(FilterDescription::all_unsupported(
                &parent_filters,
                &self.children(),
            ));
        }
        // Filters judge each row on its own: reading fewer rows never changes which positions
        // are deleted, so the scan may prune by them on the row selection route.
        FilterDescription::from_children(parent_filters, &self.children())
    }

    fn handle_child_pushdown_result(
        &self,
        _phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        // The scan uses the filters to prune, but the parents keep applying them: a partition
        // on the anti-join route reads its files without them (see `without_predicate`).
        Ok(FilterPushdownPropagation::all_unsupported(
            child_pushdown_result,
        ))
    }
}

/// Deleted positions by data file location, and the reservation that pays for them.
struct Bitmaps {
    positions: HashMap<String, Deleted>,
    _reservation: MemoryReservation,
}

/// One data file's deleted positions, sorted and distinct. Positions of a data file fit in 32
/// bits (a partition with a larger one takes the anti-join route).
#[derive(Debug, Clone, Default)]
struct Deleted(Arc<Vec<u32>>);

impl Deleted {
    fn from_sorted(positions: Vec<u32>) -> Self {
        Self(Arc::new(positions))
    }

    fn positions(&self) -> &[u32] {
        &self.0
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Positions gathered for one data file while its delete files are read.
#[derive(Debug, Default)]
struct Gathered {
    positions: Vec<u32>,
    /// Whether `positions` is strictly increasing so far (else sorted and deduplicated at the
    /// end).
    sorted: bool,
}

impl Gathered {
    /// Adds a run of positions; `false` when one does not fit in 32 bits.
    fn extend(&mut self, run: &[i64]) -> bool {
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
    fn append(&mut self, other: Gathered) {
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

    fn finish(mut self) -> Deleted {
        if !self.sorted {
            self.positions.sort_unstable();
            self.positions.dedup();
        }
        Deleted::from_sorted(self.positions)
    }
}

/// Position delete files read at once by one partition.
const DELETE_FILES_IN_FLIGHT: usize = 4;

/// Position delete files up to this size are fetched whole, in one request (on object storage a
/// footer read and a row read are two round trips); larger ones are read by range.
const WHOLE_DELETE_FILE_BYTES: u64 = 4 << 20;

/// The first footer read of a larger position delete file: its last 64 KiB.
const DELETE_FOOTER_HINT: usize = 64 << 10;

/// Spill metrics of the anti-join's sort.
struct SpillCounters {
    count: Count,
    bytes: Count,
    rows: Count,
}

/// State of the anti-join route of one partition.
struct JoinState {
    opener: Arc<FileOpener>,
    /// Data files left, with the index of their recorded path when deletes apply to them.
    files: std::collections::VecDeque<(PartitionedFile, Option<u32>)>,
    /// The file being read: its stream, path index, next row position and deletion vector.
    current: Option<(
        SendableRecordBatchStream,
        Option<u32>,
        u64,
        Option<roaring::RoaringTreemap>,
    )>,
    /// Memory of the deletion vector of the file being read.
    vector_memory: MemoryReservation,
    cursor: super::join::DeleteCursor,
    positions: Option<arrow::datatypes::SchemaRef>,
    sort: Arc<dyn ExecutionPlan>,
    spill: SpillCounters,
}

/// Reads one partition's data files with their deletes applied.
struct FileOpener {
    config: FileScanConfig,
    /// `config` without the pushed-down predicate: the anti-join numbers the rows it reads, so
    /// the reader must not skip any.
    unfiltered: FileScanConfig,
    store: Arc<dyn ObjectStore>,
    deletes: Arc<HashMap<String, FileDeletes>>,
    context: Arc<TaskContext>,
    removed: Count,
    files_read: Count,
    /// Files whose deleted rows were dropped after decoding whole row groups.
    dense_files: Count,
    /// Whether the scan hands the parquet reader no predicate, so that it reads every row of
    /// the row groups it is given (the k-th row read is then the k-th position read).
    filter_free: bool,
}

impl FileOpener {
    /// The distinct delete files that apply to some of `files`.
    fn delete_files(&self, files: &[PartitionedFile]) -> Vec<PositionDeleteFile> {
        let mut out: Vec<PositionDeleteFile> = files
            .iter()
            .filter_map(|f| self.deletes.get(f.object_meta.location.as_ref()))
            .flat_map(|d| d.delete_files.iter().cloned())
            .collect();
        out.sort_by(|a, b| a.location.cmp(&b.location));
        out.dedup();
        out
    }

    /// The anti-join route: this partition's deletes sorted by (path, position) under the pool
    /// (spilling), merged with its data files read whole in path order.
    fn anti_join(
        self: Arc<Self>,
        files: Vec<PartitionedFile>,
        positions: Option<arrow::datatypes::SchemaRef>,
        spill: SpillCounters,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let mut ordered: Vec<(PartitionedFile, Option<String>)> = files
            .into_iter()
            .map(|f| {
                let path = self
                    .deletes
                    .get(f.object_meta.location.as_ref())
                    .map(|d| d.recorded_path.clone());
                (f, path)
            })
            .collect();
        // The deletes come sorted by recorded path: files with deletes are read in that order.
        ordered.sort_by(|a, b| a.1.cmp(&b.1));
        let paths: Vec<String> = ordered.iter().filter_map(|(_, p)| p.clone()).collect();
        // Files with deletes, in path order, are numbered as their paths are in `paths`.
        let mut next = 0u32;
        let numbered: Vec<(PartitionedFile, Option<u32>)> = ordered
            .iter()
            .map(|(f, p)| {
                let index = p.as_ref().map(|_| {
                    next += 1;
                    next - 1
                });
                (f.clone(), index)
            })
            .collect();
        let delete_files =
            self.delete_files(&ordered.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>());
        // Deletion vectors are read file by file as each data file is (one bitmap at a time);
        // position delete files are sorted together.
        let position_files: Vec<PositionDeleteFile> = delete_files
            .iter()
            .filter(|f| f.deletion_vector.is_none())
            .cloned()
            .collect();
        let (sort, stream) = super::join::sorted_deletes(
            &self.config.object_store_url,
            &position_files,
            &paths,
            Arc::clone(&self.context),
        )?;
        self.files_read.add(delete_files.len());
        let vector_memory = MemoryConsumer::new("PositionalDeleteExec[deletion vector]")
            .register(self.context.memory_pool());
        let state = JoinState {
            opener: self,
            files: numbered.into(),
            current: None,
            vector_memory,
            cursor: super::join::DeleteCursor::new(stream),
            positions,
            sort,
            spill,
        };
        let stream = futures::stream::try_unfold(state, |mut st| async move {
            loop {
                if st.current.is_none() {
                    let Some((file, path)) = st.files.pop_front() else {
                        if let Some(m) = st.sort.metrics() {
                            st.spill.count.add(m.spill_count().unwrap_or(0));
                            st.spill.bytes.add(m.spilled_bytes().unwrap_or(0));
                            st.spill.rows.add(m.spilled_rows().unwrap_or(0));
                        }
                        return Ok(None);
                    };
                    let vector = match path {
                        Some(_) => st.opener.deletion_vector_of(&file).await?,
                        None => None,
                    };
                    let size = vector.as_ref().map_or(0, |v| v.serialized_size());
                    st.vector_memory.try_resize(size).map_err(|e| {
                        DataFusionError::ResourcesExhausted(format!(
                            "the deletion vector of {} does not fit in memory: {e}",
                            file.object_meta.location
                        ))
                    })?;
                    let (stream, first) = st
                        .opener
                        .open(file, &HashMap::new(), false, true, false)
                        .await?;
                    st.current = Some((stream, path, first, vector));
                }
                let Some((stream, path, start, vector)) = st.current.as_mut() else {
                    continue;
                };
                let Some(batch) = stream.next().await else {
                    st.current = None;
                    continue;
                };
                let batch = batch?;
                let n = batch.num_rows() as u64;
                let at = *start;
                *start += n;
                let path = *path;
                let out = super::join::filter_batch(
                    batch,
                    at,
                    path,
                    vector.as_ref(),
                    &mut st.cursor,
                    st.positions.as_ref(),
                    &st.opener.removed,
                )
                .await?;
                if out.num_rows() > 0 {
                    return Ok(Some((out, st)));
                }
            }
        });
        Ok(Box::pin(stream))
    }

    /// The deletion vectors that apply to `file`, as one set (`None` when it has none).
    async fn deletion_vector_of(
        &self,
        file: &PartitionedFile,
    ) -> Result<Option<roaring::RoaringTreemap>> {
        let Some(deletes) = self.deletes.get(file.object_meta.location.as_ref()) else {
            return Ok(None);
        };
        let mut out: Option<roaring::RoaringTreemap> = None;
        for d in &deletes.delete_files {
            if let Some(dv) = &d.deletion_vector {
                let positions =
                    super::dv::read(self.store.as_ref(), &d.location, dv, d.rows).await?;
                *out.get_or_insert_with(Default::default) |= positions;
            }
        }
        Ok(out)
    }

    /// Reads every delete file that applies to one of `files` once, keeping the positions of
    /// those files (`None` when one of them does not fit in 32 bits).
    async fn load_bitmaps(
        &self,
        files: &[PartitionedFile],
        reservation: MemoryReservation,
    ) -> Result<Option<Bitmaps>> {
        // recorded path -> object location, for the files of this partition that have deletes
        let mut wanted: HashMap<String, String> = HashMap::new();
        let mut delete_files: Vec<PositionDeleteFile> = vec![];
        for f in files {
            let location = f.object_meta.location.to_string();
            if let Some(d) = self.deletes.get(&location) {
                wanted.insert(d.recorded_path.clone(), location);
                delete_files.extend(d.delete_files.iter().cloned());
            }
        }
        delete_files.sort_by(|a, b| a.location.cmp(&b.location));
        delete_files.dedup();
        let reserve = |size: usize| {
            reservation.try_resize(size).map_err(|e| {
                DataFusionError::ResourcesExhausted(format!(
                    "position deletes of {} data files do not fit in memory: {e}",
                    wanted.len()
                ))
            })
        };
        let mut gathered: HashMap<String, Gathered> = HashMap::new();
        // A few delete files in flight at once: on object stores each costs several requests.
        let wanted_paths = &wanted;
        let mut reads = futures::stream::iter(delete_files)
            .map(|file| {
                let store = Arc::clone(&self.store);
                // A small file is fetched whole, its bytes held (and reserved) while it is read;
                // a deletion vector is one ranged read of its blob.
                let whole = reservation.new_empty();
                let whole = (file.deletion_vector.is_none()
                    && file.size <= WHOLE_DELETE_FILE_BYTES
                    && whole.try_grow(file.size as usize).is_ok())
                .then_some(whole);
                async move {
                    let mut local: HashMap<String, Gathered> = HashMap::new();
                    let fits = match &file.deletion_vector {
                        Some(dv) => {
                            read_deletion_vector(&store, &file, dv, wanted_paths, &mut local)
                                .await?
                        }
                        None => {
                            read_position_deletes(
                                &store,
                                &file,
                                whole.is_some(),
                                wanted_paths,
                                &mut local,
                            )
                            .await?
                        }
                    };
                    drop(whole);
                    Ok::<_, DataFusionError>(fits.then_some(local))
                }
            })
            .buffered(DELETE_FILES_IN_FLIGHT);
        while let Some(read) = reads.next().await {
            let Some(local) = read? else {
                return Ok(None);
            };
            for (location, g) in local {
                gathered.entry(location).or_default().append(g);
            }
            self.files_read.add(1);
            reserve(
                gathered
                    .values()
                    .map(|g| g.positions.capacity() * size_of::<u32>())
                    .sum(),
            )?;
        }
        drop(reads);
        let positions: HashMap<String, Deleted> = gathered
            .into_iter()
            .map(|(location, g)| (location, g.finish()))
            .collect();
        reserve(positions.values().map(|d| size_of_val(d.positions())).sum())?;
        Ok(Some(Bitmaps {
            positions,
            _reservation: reservation,
        }))
    }

    /// Reads one data file, skipping its deleted positions (and numbering the rest when
    /// `positions`). Also answers the position in the file of the first row read: a file that
    /// DataFusion split into byte ranges over several partitions is read here only in the row
    /// groups of its range (see [`row_groups_in_range`]).
    async fn open(
        &self,
        mut file: PartitionedFile,
        bitmaps: &HashMap<String, Deleted>,
        positions: bool,
        unfiltered: bool,
        live: bool,
    ) -> Result<(SendableRecordBatchStream, u64)> {
        let location = file.object_meta.location.to_string();
        let deleted = bitmaps.get(&location).filter(|d| !d.is_empty());
        // Rows are numbered by their position (here or by the anti-join) when positions are
        // asked for or deletes apply: those files are read by this crate's range rule.
        let numbered = positions || self.deletes.contains_key(&location);
        let none = Deleted::default();
        let deleted = deleted.unwrap_or(&none);
        // Position spans of the row groups read (all of the file unless split into ranges).
        let mut spans = vec![(0, u64::MAX)];
        let mut dense: Option<ReadPositions> = None;
        if !deleted.is_empty() || (numbered && file.range.is_some()) {
            // Through DataFusion's metadata cache: the scan of this file reuses the footer.
            let cache = self
                .context
                .runtime_env()
                .cache_manager
                .get_file_metadata_cache();
            let hint = self
                .context
                .session_config()
                .options()
                .execution
                .parquet
                .metadata_size_hint;
            let (metadata, _) = fetch_footer(
                self.store.as_ref(),
                &file.object_meta,
                Some(cache),
                hint,
                true,
            )
            .await?;
            let groups = metadata.row_groups();
            let rows: Vec<u64> = groups
                .iter()
                .map(|rg| rg.num_rows().max(0) as u64)
                .collect();
            let read = match file.range.take() {
                Some(range) => row_groups_in_range(groups, range.start, range.end, &location)?,
                None => vec![true; groups.len()],
            };
            let per_group = deleted_per_group(&rows, deleted.positions());
            spans = whole_groups(&rows, &read, &vec![0; rows.len()]).1;
            let (read_rows, read_deleted) = rows
                .iter()
                .zip(&per_group)
                .zip(&read)
                .filter(|(_, r)| **r)
                .fold((0, 0), |(n, d), ((rn, rd), _)| (n + rn, d + rd));
            let plan = if !positions
                && self.filter_free
                && read_deleted > 0
                && read_deleted * DENSE_DELETES_PER_ROW >= read_rows
            {
                // Dense deletes: the row groups are read whole and the deleted rows dropped
                // after decoding, where a selection of short runs would cost more to build and
                // follow than the rows it saves decoding.
                let (plan, spans) = whole_groups(&rows, &read, &per_group);
                dense = Some(ReadPositions::new(spans, deleted.clone(), location.clone()));
                self.removed.add(read_deleted as usize);
                self.dense_files.add(1);
                plan
            } else {
                let (plan, removed) = access_plan(&rows, &read, deleted.positions());
                self.removed.add(removed as usize);
                plan
            };
            file = file.with_extension(plan);
        }
        // The position of the first row read.
        let first = spans.first().map_or(0, |s| s.0);
        let config = match unfiltered {
            true => &self.unfiltered,
            false => &self.config,
        };
        let config = FileScanConfigBuilder::from(config.clone())
            .with_file_groups(vec![FileGroup::new(vec![file])])
            .build();
        let stream =
            DataSourceExec::from_data_source(config).execute(0, Arc::clone(&self.context))?;
        if live {
            // Dense deletes marked for the node above; every other row read is live.
            let schema = with_live_field(&stream.schema());
            let out = Arc::clone(&schema);
            let marked = stream.map(move |batch| {
                let batch = batch?;
                let keep = match dense.as_mut() {
                    Some(dense) => dense.mask(batch.num_rows())?,
                    None => None,
                };
                with_live(batch, keep, &out)
            });
            let marked = Box::pin(RecordBatchStreamAdapter::new(schema, marked));
            return Ok((marked, first));
        }
        if let Some(mut dense) = dense {
            let schema = stream.schema();
            let filtered = stream.map(move |batch| {
                let batch = batch?;
                match dense.mask(batch.num_rows())? {
                    Some(keep) => keep_rows(batch, keep.values()),
                    None => Ok(batch),
                }
            });
            let filtered = Box::pin(RecordBatchStreamAdapter::new(schema, filtered));
            return Ok((filtered, first));
        }
        if !positions {
            return Ok((stream, first));
        }
        let schema = with_position_field(&stream.schema());
        let mut cursor = ReadPositions::new(spans, deleted.clone(), location);
        let out = Arc::clone(&schema);
        let numbered = stream.map(move |batch| {
            let batch = batch?;
            let pos = cursor.live(batch.num_rows())?;
            let mut columns = batch.columns().to_vec();
            columns.push(Arc::new(pos));
            Ok(arrow::array::RecordBatch::try_new(
                Arc::clone(&out),
                columns,
            )?)
        });
        Ok((
            Box::pin(RecordBatchStreamAdapter::new(schema, numbered)),
            first,
        ))
    }
}

/// `work` running from now on as a task of its own (inside a Tokio runtime; otherwise when
/// awaited), its result awaited by the future returned. Dropping that future stops it.
fn eager<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> futures::future::BoxFuture<'static, Result<T>> {
    use futures::FutureExt;
    if tokio::runtime::Handle::try_current().is_err() {
        return work.boxed();
    }
    let task = datafusion::common::runtime::SpawnedTask::spawn(work);
    async move {
        task.join_unwind()
            .await
            .map_err(|e| DataFusionError::ExecutionJoin(Box::new(e)))?
    }
    .boxed()
}

/// Deleted rows per row in a file's row groups at or above which (1 in 64) the groups are read
/// whole and deleted rows dropped after decoding: a row selection then has runs too short for
/// the parquet reader to skip anything (it too decodes everything below runs of 32 rows).
const DENSE_DELETES_PER_ROW: u64 = 64;

/// How many of `deleted` (sorted) fall into each row group of a file whose groups hold `rows`
/// rows.
fn deleted_per_group(rows: &[u64], deleted: &[u32]) -> Vec<u64> {
    let mut out = Vec::with_capacity(rows.len());
    let (mut start, mut below) = (0u64, 0usize);
    for &n in rows {
        let end = start + n;
        let upto = deleted.partition_point(|p| u64::from(*p) < end);
        out.push((upto - below) as u64);
        (start, below) = (end, upto);
    }
    out
}

/// The access plan that reads the groups marked in `read` whole, skipping those whose rows are
/// all deleted (`deleted` per group), and the position spans `[start, end)` it reads, in order.
fn whole_groups(
    rows: &[u64],
    read: &[bool],
    deleted: &[u64],
) -> (ParquetAccessPlan, Vec<(u64, u64)>) {
    let mut groups = Vec::with_capacity(rows.len());
    let mut spans: Vec<(u64, u64)> = vec![];
    let mut start = 0u64;
    for ((&n, &read), &d) in rows.iter().zip(read).zip(deleted) {
        let end = start + n;
        if read && d < n {
            groups.push(RowGroupAccess::Scan);
            match spans.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => spans.push((start, end)),
            }
        } else {
            groups.push(RowGroupAccess::Skip);
        }
        start = end;
    }
    (ParquetAccessPlan::new(groups), spans)
}

/// `config` with its parquet source's predicate replaced by `true` and row filtering off: the
/// reader then skips no row of the row groups it is given (pruning by statistics, bloom filters,
/// the page index and row filters all need a predicate).
fn without_predicate(config: &FileScanConfig) -> Result<FileScanConfig> {
    let source = config.file_source();
    if source.filter().is_none() {
        return Ok(config.clone());
    }
    let parquet = source.downcast_ref::<ParquetSource>().ok_or_else(|| {
        DataFusionError::Internal(format!(
            "PositionalDeleteExec reads parquet, got a {} source",
            source.file_type()
        ))
    })?;
    let always: Arc<dyn PhysicalExpr> =
        Arc::new(datafusion::physical_expr::expressions::Literal::new(
            datafusion::common::ScalarValue::Boolean(Some(true)),
        ));
    let source = parquet.with_predicate(always).with_pushdown_filters(false);
    Ok(FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source))
        .build())
}

/// Which row groups a scan of the byte range `start..end` of a file reads: those whose first page
/// starts inside it. DataFusion splits large files into ranges that tile the file, so every row
/// group is read by exactly one of them; this is the rule of DataFusion's parquet reader, applied
/// here so that positions can be counted (the range itself is then not handed to the reader).
fn row_groups_in_range(
    groups: &[parquet::file::metadata::RowGroupMetaData],
    start: i64,
    end: i64,
    location: &str,
) -> Result<Vec<bool>> {
    let offsets: Vec<i64> = groups
        .iter()
        .map(|rg| {
            let col = rg.column(0);
            col.dictionary_page_offset()
                .unwrap_or_else(|| col.data_page_offset())
        })
        .collect();
    // Groups without rows may share an offset: they read nothing, whichever range takes them.
    let with_rows: Vec<i64> = offsets
        .iter()
        .zip(groups)
        .filter(|(_, rg)| rg.num_rows() > 0)
        .map(|(o, _)| *o)
        .collect();
    if with_rows.windows(2).any(|w| w[0] >= w[1]) {
        // Positions within a range are counted from its first row group on.
        return Err(DataFusionError::Execution(format!(
            "data file {location} has row groups out of file order, so a byte range of it \
             cannot be numbered by position; SET datafusion.optimizer.repartition_file_scans = \
             false reads it whole"
        )));
    }
    Ok(offsets.iter().map(|o| (start..end).contains(o)).collect())
}

/// `schema` with [`POSITION_COLUMN`] appended.
fn with_position_field(schema: &arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    with_field(schema, POSITION_COLUMN, DataType::Int64)
}

/// `schema` with [`LIVE_COLUMN`] appended.
fn with_live_field(schema: &arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    with_field(schema, LIVE_COLUMN, DataType::Boolean)
}

fn with_field(
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
fn all_live<S>(
    batches: S,
    schema: arrow::datatypes::SchemaRef,
) -> BoxStream<'static, Result<RecordBatch>>
where
    S: futures::Stream<Item = Result<RecordBatch>> + Send + 'static,
{
    Box::pin(batches.map(move |batch| with_live(batch?, None, &schema)))
}

/// `batch` with `keep` (every row when `None`) appended as the [`LIVE_COLUMN`] of `schema`.
fn with_live(
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

/// Where the rows a scan of some of a file's row groups reads lie in the file: the position
/// spans of those groups, in order, and which positions are deleted. Numbers the live rows of a
/// scan that skipped the deleted ones ([`ReadPositions::live`]), or says which rows of a scan of
/// whole groups to drop ([`ReadPositions::mask`]).
struct ReadPositions {
    spans: std::collections::VecDeque<(u64, u64)>,
    deleted: Deleted,
    /// Index of the first deleted position not passed yet.
    next: usize,
    location: String,
}

impl ReadPositions {
    fn new(spans: Vec<(u64, u64)>, deleted: Deleted, location: String) -> Self {
        Self {
            spans: spans.into(),
            deleted,
            next: 0,
            location,
        }
    }

    /// The positions of the next `n` rows read, deleted ones never read.
    fn live(&mut self, n: usize) -> Result<arrow::array::Int64Array> {
        let deleted = self.deleted.positions();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(span) = self.spans.front_mut() else {
                return Err(DataFusionError::Internal(format!(
                    "the scan of {} returned more rows than it has live positions",
                    self.location
                )));
            };
            if span.0 >= span.1 {
                self.spans.pop_front();
                continue;
            }
            // Deleted positions before the span's next one no longer matter.
            while deleted
                .get(self.next)
                .is_some_and(|d| u64::from(*d) < span.0)
            {
                self.next += 1;
            }
            let until = match deleted.get(self.next) {
                Some(&d) if u64::from(d) == span.0 => {
                    span.0 += 1;
                    self.next += 1;
                    continue;
                }
                Some(&d) => u64::from(d).min(span.1),
                None => span.1,
            };
            // Up to the next deleted position, every position is live.
            let run = (until - span.0).min((n - out.len()) as u64);
            out.extend((span.0..span.0 + run).map(|p| p as i64));
            span.0 += run;
        }
        Ok(arrow::array::Int64Array::from(out))
    }

    /// Which of the next `n` rows read to keep (`None`: all of them).
    fn mask(&mut self, n: usize) -> Result<Option<arrow::array::BooleanArray>> {
        let deleted = self.deleted.positions();
        let mut keep: Option<arrow::array::BooleanBufferBuilder> = None;
        let mut at = 0usize;
        while at < n {
            let Some(span) = self.spans.front_mut() else {
                return Err(DataFusionError::Internal(format!(
                    "the scan of {} returned more rows than its row groups hold",
                    self.location
                )));
            };
            let len = (span.1 - span.0).min((n - at) as u64);
            let (lo, hi) = (span.0, span.0 + len);
            while let Some(&d) = deleted.get(self.next) {
                let d = u64::from(d);
                if d >= hi {
                    break;
                }
                self.next += 1;
                if d >= lo {
                    let keep = keep.get_or_insert_with(|| {
                        let mut b = arrow::array::BooleanBufferBuilder::new(n);
                        b.append_n(n, true);
                        b
                    });
                    keep.set_bit(at + (d - lo) as usize, false);
                }
            }
            span.0 = hi;
            if span.0 == span.1 {
                self.spans.pop_front();
            }
            at += len as usize;
        }
        Ok(keep.map(|mut k| arrow::array::BooleanArray::new(k.finish(), None)))
    }
}

/// The access plan that reads the row groups marked in `read` of a file whose row groups hold
/// `rows` rows, skipping their `deleted` positions, and how many rows it removes from them.
pub(crate) fn access_plan(
    rows: &[u64],
    read: &[bool],
    deleted: &[u32],
) -> (ParquetAccessPlan, u64) {
    let mut groups = Vec::with_capacity(rows.len());
    let mut positions = deleted.iter().map(|p| u64::from(*p)).peekable();
    let mut start = 0u64;
    let mut removed = 0u64;
    for (&n, &read) in rows.iter().zip(read) {
        let end = start + n;
        let mut selectors: Vec<RowSelector> = vec![];
        let mut cursor = start;
        let mut skipped = 0u64;
        while let Some(&p) = positions.peek() {
            if p >= end {
                break;
            }
            positions.next();
            if p < cursor || !read {
                continue;
            }
            if p > cursor {
                selectors.push(RowSelector::select((p - cursor) as usize));
            }
            match selectors.last_mut() {
                Some(last) if last.skip => last.row_count += 1,
                _ => selectors.push(RowSelector::skip(1)),
            }
            skipped += 1;
            cursor = p + 1;
        }
        if cursor < end {
            selectors.push(RowSelector::select((end - cursor) as usize));
        }
        removed += skipped;
        groups.push(if !read || skipped == n {
            RowGroupAccess::Skip
        } else if skipped == 0 {
            RowGroupAccess::Scan
        } else {
            RowGroupAccess::Selection(RowSelection::from(selectors))
        });
        start = end;
    }
    (ParquetAccessPlan::new(groups), removed)
}

/// How `file_path` of position delete files is read.
fn path_dictionary() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// The top-level column of a position delete file with field id `id` (by name `name` when the
/// file carries no ids).
fn column_index(schema: &arrow::datatypes::Schema, id: i32, name: &str) -> Option<usize> {
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
async fn read_deletion_vector(
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
trait PositionSink {
    /// Adds a run of non-negative positions of the data file at `location`; `false` when the
    /// sink cannot hold them (the reading stops).
    fn add(&mut self, location: &str, run: &[i64]) -> bool;

    /// Makes room for `rows` more positions of the data file at `location`.
    fn reserve(&mut self, _location: &str, _rows: usize) {}
}

/// `f` applied to the positions gathered for the data file at `location` (its key allocated
/// once, when first seen).
fn with_gathered<R>(
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
async fn read_position_deletes(
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
    let row_groups: Vec<usize> = builder
        .metadata()
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
        .collect();
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
        let pos = pos.as_primitive::<Int64Type>();
        // The data file each distinct path names, when it is one of `wanted`: looked up when a
        // run first names it (the dictionary may hold the paths of a whole shared file).
        let names = paths.values().as_string::<i32>();
        let mut targets: Vec<Option<Option<&String>>> = vec![None; names.len()];
        let keys = paths.keys().values();
        // Delete files are sorted by path: positions are gathered per run of one path and
        // added to that file's list at once.
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
    }
    Ok(true)
}

/// Adds `run`, positions of the data file at `location` read from the delete file `file`, to
/// `gathered`; an error for a NULL or negative position, `false` when `gathered` cannot hold them.
/// The rows of a position delete file's `file_path` and `pos` columns (or `pos` alone) without
/// those where either is NULL. Such rows delete nothing: Impala writes them, and Java,
/// pyiceberg and DuckDB skip them; so do we, with a warning naming the file.
fn without_null_rows(
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

fn gather_run(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(plan: &ParquetAccessPlan) -> Vec<String> {
        plan.inner()
            .iter()
            .map(|g| match g {
                RowGroupAccess::Scan => "scan".to_string(),
                RowGroupAccess::Skip => "skip".to_string(),
                RowGroupAccess::Selection(s) => s
                    .iter()
                    .map(|r| format!("{}{}", if r.skip { "-" } else { "+" }, r.row_count))
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect()
    }

    #[test]
    fn live_positions_skip_deleted_ones() {
        let deleted = Deleted::from_sorted(vec![0, 3, 4, 9]);
        let all = vec![(0, u64::MAX)];
        let mut live = ReadPositions::new(all.clone(), deleted.clone(), "f".into());
        let take = |live: &mut ReadPositions, n| live.live(n).unwrap().values().to_vec();
        assert_eq!(take(&mut live, 3), vec![1, 2, 5]);
        assert_eq!(take(&mut live, 4), vec![6, 7, 8, 10]);
        assert_eq!(take(&mut live, 0), Vec::<i64>::new());
        assert_eq!(take(&mut live, 2), vec![11, 12]);
        let mut none = ReadPositions::new(all, Deleted::default(), "f".into());
        assert_eq!(take(&mut none, 3), vec![0, 1, 2]);
        // Only some row groups read (a byte range): earlier deletes are passed over, and the
        // rows between spans never come.
        let mut ranged = ReadPositions::new(vec![(4, 6), (8, 11)], deleted, "f".into());
        assert_eq!(take(&mut ranged, 3), vec![5, 8, 10]);
        assert!(ranged.live(1).is_err());
    }

    #[test]
    fn gathered_positions_end_sorted_and_distinct() {
        let mut sorted = Gathered::default();
        assert!(sorted.extend(&[1, 5, 9]) && sorted.extend(&[12, 40]));
        assert!(sorted.sorted);
        assert_eq!(sorted.finish().positions(), [1, 5, 9, 12, 40]);
        // Two delete files for one data file: overlapping, out of order, repeated.
        let mut mixed = Gathered::default();
        assert!(mixed.extend(&[3, 8, 20]) && mixed.extend(&[1, 8, 9]) && mixed.extend(&[2, 2]));
        assert!(!mixed.sorted);
        assert_eq!(mixed.finish().positions(), [1, 2, 3, 8, 9, 20]);
        // A run that is not increasing by itself.
        let mut unsorted = Gathered::default();
        assert!(unsorted.extend(&[7, 4]));
        assert_eq!(unsorted.finish().positions(), [4, 7]);
        // Gathered from two delete files, merged in the order they were read.
        let (mut a, mut b) = (Gathered::default(), Gathered::default());
        assert!(a.extend(&[1, 4]) && b.extend(&[6, 9]));
        a.append(b);
        assert!(a.sorted);
        let (mut c, mut d) = (Gathered::default(), Gathered::default());
        assert!(c.extend(&[5, 8]) && d.extend(&[2, 8]));
        c.append(d);
        assert!(!c.sorted);
        assert_eq!(c.finish().positions(), [2, 5, 8]);
        let mut empty = Gathered::default();
        let mut e = Gathered::default();
        assert!(e.extend(&[3, 1]));
        empty.append(e);
        assert_eq!(empty.finish().positions(), [1, 3]);
        // Beyond 32 bits: refused (the partition takes the anti-join route).
        assert!(!Gathered::default().extend(&[1, 1 << 32]));
        assert!(Gathered::default().extend(&[u32::MAX as i64]));
    }

    #[test]
    fn dense_deletes_drop_rows_after_decoding() {
        // Row groups of 4, 3 and 5 rows: positions 0..4, 4..7, 7..12.
        let deleted = Deleted::from_sorted(vec![1, 2, 4, 5, 6, 11, 40]);
        let per_group = deleted_per_group(&[4, 3, 5], deleted.positions());
        assert_eq!(per_group, [2, 3, 1]);
        // The second group is all deleted: skipped, the others read whole.
        let (plan, spans) = whole_groups(&[4, 3, 5], &[true; 3], &per_group);
        assert_eq!(describe(&plan), ["scan", "skip", "scan"]);
        assert_eq!(spans, [(0, 4), (7, 12)]);
        let (plan, spans) = whole_groups(&[4, 3, 5], &[false, true, true], &per_group);
        assert_eq!(describe(&plan), ["skip", "skip", "scan"]);
        assert_eq!(spans, [(7, 12)]);
        let (_, spans) = whole_groups(&[4, 3, 5], &[true; 3], &[0, 0, 0]);
        assert_eq!(spans, [(0, 12)]);

        // Rows read: positions 0 1 2 3 7 8 9 10 11, in batches of 3, 4 and 2.
        let mut dense = ReadPositions::new(vec![(0, 4), (7, 12)], deleted, "f".into());
        let mask = |m: Option<arrow::array::BooleanArray>| {
            m.map(|m| m.iter().map(|b| b.unwrap()).collect::<Vec<_>>())
        };
        assert_eq!(mask(dense.mask(3).unwrap()), Some(vec![true, false, false]));
        assert_eq!(mask(dense.mask(4).unwrap()), None);
        assert_eq!(mask(dense.mask(2).unwrap()), Some(vec![true, false]));
        assert_eq!(mask(dense.mask(0).unwrap()), None);
        // More rows than the spans hold is an error, not a guess.
        assert!(dense.mask(1).is_err());
    }

    #[test]
    fn positions_become_row_group_selections() {
        // Row groups of 4, 3 and 5 rows: positions 0..4, 4..7, 7..12.
        let deleted = [1u32, 2, 4, 5, 6, 11, 40];
        let (plan, removed) = access_plan(&[4, 3, 5], &[true; 3], &deleted);
        assert_eq!(describe(&plan), ["+1 -2 +1", "skip", "+4 -1"]);
        // Position 40 lies beyond the file and removes nothing.
        assert_eq!(removed, 6);
        let (plan, removed) = access_plan(&[4, 3], &[true; 2], &[]);
        assert_eq!(describe(&plan), ["scan", "scan"]);
        assert_eq!(removed, 0);
        // Row groups outside the scan's byte range: skipped, their deletes not counted.
        let (plan, removed) = access_plan(&[4, 3, 5], &[false, true, true], &deleted);
        assert_eq!(describe(&plan), ["skip", "skip", "+4 -1"]);
        assert_eq!(removed, 4);
        let (plan, removed) = access_plan(&[4, 3, 5], &[true, false, false], &deleted);
        assert_eq!(describe(&plan), ["+1 -2 +1", "skip", "skip"]);
        assert_eq!(removed, 2);
    }
}
