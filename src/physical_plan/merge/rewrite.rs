//! Copy-on-write's rewrite when the first pass read only the deciding columns: the rows of the
//! rewritten files are split as they are read; those pass 1 updated go through a join with the
//! source (their new versions are made there), every other row but the deleted ones is kept
//! as it is.
//!
//! ```text
//!  scan(rewritten files: every column, _file, _pos), partition i
//!    └─► RewriteExec[i] ── kept rows ───────────────────────────────────────────► out
//!              └── updated rows ─► channel i ─► HashJoinExec(CollectLeft: source ⋈ ON)
//!                                               ─► MergeRowsExec(rewrite): new versions ─► out
//! ```
//! The join is DataFusion's, built once from a copy of the source and probed in every partition
//! by the rows the partition sends it; a partition's output interleaves its kept rows with the
//! join's output, and the channel is bounded, so rows wait neither unread nor unaccounted. The
//! conditions are not volatile (see `decide_plan`): the same source row and the same UPDATE
//! clause make the new version as they decided it in pass 1, and both are checked again.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use arrow::array::{AsArray, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};

use super::positions::{positions_in, DropCounts, PositionMap};
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::file_keys::FileKeys;
use crate::physical_plan::keep_rows::keep_rows;

/// The receiving ends of the channels, one per partition, each taken once.
type Receivers = Arc<Mutex<Vec<Option<mpsc::Receiver<Result<RecordBatch>>>>>>;

/// The rows each partition of a [`RewriteExec`] sends to the join, as that partition's stream.
#[derive(Debug)]
struct ChannelExec {
    receivers: Receivers,
    properties: Arc<PlanProperties>,
    /// Baseline metrics (output rows, elapsed compute).
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl DisplayAs for ChannelExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ChannelExec: updated rows of the rewrite")
    }
}

impl ExecutionPlan for ChannelExec {
    fn name(&self) -> &str {
        "ChannelExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let receiver = self
            .receivers
            .lock()
            .map_err(|_| DataFusionError::Internal("rewrite channels poisoned".into()))?
            .get_mut(partition)
            .and_then(Option::take)
            .ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "the rewrite's channel {partition} is gone (executed twice?)"
                ))
            })?;
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            receiver,
        ))))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Copy-on-write's rewrite (see the module's text). Output: the table's columns.
#[derive(Debug)]
pub(crate) struct RewriteExec {
    scan: Arc<dyn ExecutionPlan>,
    /// The new versions of the updated rows: `MergeRowsExec(rewrite)` over the join of the
    /// source with a [`ChannelExec`].
    versions: Arc<dyn ExecutionPlan>,
    senders: Mutex<Vec<Option<mpsc::Sender<Result<RecordBatch>>>>>,
    /// Every changed position (updated or deleted).
    changed: Arc<PositionMap>,
    /// The deleted ones among them.
    deleted: Arc<PositionMap>,
    counts: Arc<DropCounts>,
    table_schema: SchemaRef,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl RewriteExec {
    /// `versions` makes the new versions of the rows it reads from the probe side it is given
    /// (`make_versions(probe)`, where `probe` streams the updated rows, as `scan` has them).
    pub(crate) fn try_new(
        scan: Arc<dyn ExecutionPlan>,
        make_versions: impl FnOnce(Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
        changed: Arc<PositionMap>,
        deleted: Arc<PositionMap>,
        counts: Arc<DropCounts>,
        table_schema: SchemaRef,
    ) -> Result<Self> {
        let partitions = scan.output_partitioning().partition_count();
        let (mut senders, mut receivers) = (vec![], vec![]);
        for _ in 0..partitions {
            let (tx, rx) = mpsc::channel(2);
            senders.push(Some(tx));
            receivers.push(Some(rx));
        }
        let probe = Arc::new(ChannelExec {
            metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
            receivers: Arc::new(Mutex::new(receivers)),
            properties: Arc::new(PlanProperties::new(
                EquivalenceProperties::new(scan.schema()),
                Partitioning::UnknownPartitioning(partitions),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )),
        });
        let versions = make_versions(probe)?;
        if versions.output_partitioning().partition_count() != partitions {
            return Err(DataFusionError::Internal(
                "the rewrite's join changed the partitioning".into(),
            ));
        }
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&table_schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Self {
            scan,
            versions,
            senders: Mutex::new(senders),
            changed,
            deleted,
            counts,
            table_schema,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        })
    }
}

impl DisplayAs for RewriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let count = |m: &PositionMap| m.values().map(|b| b.len()).sum::<u64>();
        write!(
            f,
            "RewriteExec: files={}, updated={}, deleted={}",
            self.changed.len(),
            count(&self.changed) - count(&self.deleted),
            count(&self.deleted)
        )
    }
}

impl ExecutionPlan for RewriteExec {
    fn name(&self) -> &str {
        "RewriteExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.scan, &self.versions]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match &children[..] {
            [scan, versions]
                if Arc::ptr_eq(scan, &self.scan) && Arc::ptr_eq(versions, &self.versions) =>
            {
                Ok(self)
            }
            _ => Err(DataFusionError::Internal(
                "RewriteExec is built at run time and not rewritten".into(),
            )),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let mut sender = self
            .senders
            .lock()
            .map_err(|_| DataFusionError::Internal("rewrite channels poisoned".into()))?
            .get_mut(partition)
            .and_then(Option::take)
            .ok_or_else(|| {
                DataFusionError::Internal(format!("RewriteExec partition {partition} ran twice"))
            })?;
        let scan = baseline.input(self.scan.execute(partition, Arc::clone(&context))?);
        let versions = baseline.input(self.versions.execute(partition, context)?);
        let file_at = scan.schema().fields().len() - 2;
        let columns = self.table_schema.fields().len();
        let (changed, deleted) = (Arc::clone(&self.changed), Arc::clone(&self.deleted));
        let counts = Arc::clone(&self.counts);
        let schema = Arc::clone(&self.table_schema);
        let metric = |name| MetricBuilder::new(&self.metrics).counter(name, partition);
        let (dropped, sent) = (metric("rows_deleted"), metric("rows_to_join"));
        let tx = sender.clone();
        let kept = scan
            .then(move |batch| {
                let changed = Arc::clone(&changed);
                let deleted = Arc::clone(&deleted);
                let counts = Arc::clone(&counts);
                let schema = Arc::clone(&schema);
                let (dropped, sent) = (dropped.clone(), sent.clone());
                let mut sender = tx.clone();
                async move {
                    let batch = batch?;
                    let files = FileKeys::of(batch.column(file_at))?;
                    let pos = batch
                        .column(file_at + 1)
                        .as_primitive_opt::<Int64Type>()
                        .ok_or_else(|| {
                            DataFusionError::Internal("position column is not Int64".into())
                        })?;
                    let is_changed = positions_in(&files, pos, |f| changed.get(f));
                    let kept = BooleanArray::new(!&is_changed, None);
                    if kept.true_count() < batch.num_rows() {
                        let is_deleted = positions_in(&files, pos, |f| deleted.get(f));
                        let updated = BooleanArray::new(&is_changed & &!&is_deleted, None);
                        let gone = is_deleted.count_set_bits();
                        counts.dropped.fetch_add(gone as u64, Ordering::Relaxed);
                        dropped.add(gone);
                        if updated.true_count() > 0 {
                            sent.add(updated.true_count());
                            sender
                                .send(Ok(filter_record_batch(&batch, &updated)?))
                                .await
                                .map_err(|_| {
                                    DataFusionError::Internal(
                                        "the rewrite's join stopped reading".into(),
                                    )
                                })?;
                        }
                    }
                    counts
                        .read
                        .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                    let (_, mut data, _) = batch.into_parts();
                    data.truncate(columns);
                    keep_rows(RecordBatch::try_new(schema, data)?, kept.values())
                }
            })
            // The last batch read, the channel closes and the join's probe side ends.
            .chain(futures::stream::once(async move {
                sender.close_channel();
                Ok(RecordBatch::new_empty(Arc::new(
                    arrow::datatypes::Schema::empty(),
                )))
            }))
            .filter(|b| {
                let keep = !matches!(b, Ok(b) if b.num_columns() == 0);
                async move { keep }
            });
        let out = futures::stream::select(kept, versions);
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.table_schema),
            out,
        ))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
