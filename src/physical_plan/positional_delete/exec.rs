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

use crate::physical_plan::baseline::Baseline;
use arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::appended::{
    all_live, with_live_field, with_position_field, Appended, LIVE_COLUMN, POSITION_COLUMN,
};
use super::load::{FileDeletes, PositionDeleteFile};
use super::opener::{eager, without_predicate, FileOpener, SpillCounters};
use crate::physical_plan::{single_child, without_work_stealing};

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

impl PositionalDeleteExec {
    /// The rows of `partition`: the scan's as they are when no delete applies to its files,
    /// else its files read with their deletes applied.
    fn open_partition(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
        baseline: &Baseline,
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
            let stream = baseline.input(
                self.input
                    .execute(partition, without_work_stealing(context))?,
            );
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
        let baseline = Baseline::new(&self.metrics, partition);
        let stream = self.open_partition(partition, context, &baseline)?;
        Ok(baseline.output(stream))
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
