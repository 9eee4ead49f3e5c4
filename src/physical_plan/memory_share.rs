//! A share of the memory pool that a subtree may hold, so that what it buffers cannot crowd out
//! an unspillable neighbour that asks later.
//!
//! ```text
//!   HashJoinExec (build side: unspillable, reserves partition by partition)
//!     ├─ MemoryShareExec ─► RepartitionExec (source)   ┐ together at most pool / divisor;
//!     └─ MemoryShareExec ─► RepartitionExec (target)   ┘ past it they spill
//! ```
//!
//! A fair pool lets its spillable consumers together take whatever the unspillable ones do not
//! hold yet. Repartition channels that wait for their turn (a Grace join runs its partitions
//! one after another) would then fill the pool with batches, and the join's build side, which
//! asks later and cannot spill, would find nothing left. Under a [`MemoryShareExec`] every
//! reservation goes through a [`CappedPool`] view of the session's pool: it counts what the
//! subtree holds and refuses growth past its share, which makes the subtree spill early while
//! the rest of the pool stays free. Unbounded pools are not capped.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{human_readable_size, resources_datafusion_err};
use datafusion::error::Result;
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use crate::physical_plan::baseline::Baseline;

/// One share of the pool, which every [`MemoryShareExec`] built with it draws on together.
#[derive(Debug)]
pub(crate) struct MemoryShare {
    /// The share is the pool's limit divided by this.
    divisor: usize,
    /// The capped runtime made for the last pool seen (a plan runs under one pool).
    runtime: Mutex<Option<CappedRuntime>>,
}

/// A pool, and the runtime that sees it through a share's cap.
type CappedRuntime = (Arc<dyn MemoryPool>, Arc<RuntimeEnv>);

impl MemoryShare {
    /// A share of `1 / divisor` of a bounded pool.
    pub(crate) fn new(divisor: usize) -> Arc<Self> {
        Arc::new(Self {
            divisor: divisor.max(1),
            runtime: Mutex::new(None),
        })
    }

    /// `context` with its pool seen through this share's cap (unchanged if the pool has none).
    fn context(&self, context: Arc<TaskContext>) -> Arc<TaskContext> {
        let parent = context.runtime_env();
        let MemoryLimit::Finite(limit) = parent.memory_pool.memory_limit() else {
            return context;
        };
        let runtime = {
            let mut slot = self
                .runtime
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match slot.as_ref() {
                Some((pool, runtime)) if Arc::ptr_eq(pool, &parent.memory_pool) => {
                    Arc::clone(runtime)
                }
                _ => {
                    let capped = Arc::new(CappedPool::new(
                        Arc::clone(&parent.memory_pool),
                        (limit / self.divisor).max(1),
                    ));
                    let mut runtime = parent.as_ref().clone();
                    runtime.memory_pool = capped;
                    let runtime = Arc::new(runtime);
                    *slot = Some((Arc::clone(&parent.memory_pool), Arc::clone(&runtime)));
                    runtime
                }
            }
        };
        Arc::new(TaskContext::new(
            context.task_id(),
            context.session_id(),
            context.session_config().clone(),
            context.scalar_functions().clone(),
            context.higher_order_functions().clone(),
            context.aggregate_functions().clone(),
            context.window_functions().clone(),
            runtime,
        ))
    }
}

/// A view of a pool that lets what is reserved through it grow to at most `cap` bytes; every
/// reservation is also made in the pool beneath, under that pool's own rules.
#[derive(Debug)]
pub(crate) struct CappedPool {
    parent: Arc<dyn MemoryPool>,
    cap: usize,
    used: AtomicUsize,
}

impl CappedPool {
    /// A view of `parent` capped at `cap` bytes.
    pub(crate) fn new(parent: Arc<dyn MemoryPool>, cap: usize) -> Self {
        Self {
            parent,
            cap,
            used: AtomicUsize::new(0),
        }
    }
}

impl fmt::Display for CappedPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a share of {} of {}",
            human_readable_size(self.cap),
            self.parent
        )
    }
}

impl MemoryPool for CappedPool {
    fn name(&self) -> &str {
        "capped"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.parent.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.parent.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.parent.grow(reservation, additional)
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.parent.shrink(reservation, shrink)
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(additional).filter(|&n| n <= self.cap)
            })
            .map_err(|used| {
                resources_datafusion_err!(
                    "Failed to allocate additional {} for {}: {} of its share of {} in use",
                    human_readable_size(additional),
                    reservation.consumer().name(),
                    human_readable_size(used),
                    human_readable_size(self.cap)
                )
            })?;
        self.parent
            .try_grow(reservation, additional)
            .inspect_err(|_| {
                self.used.fetch_sub(additional, Ordering::Relaxed);
            })
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.cap)
    }
}

/// Runs its input with the session's pool seen through a [`MemoryShare`].
#[derive(Debug)]
pub(crate) struct MemoryShareExec {
    input: Arc<dyn ExecutionPlan>,
    share: Arc<MemoryShare>,
    /// Baseline metrics (output rows, elapsed compute).
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl MemoryShareExec {
    /// `input`, holding at most `share` of the pool together with the share's other users.
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>, share: Arc<MemoryShare>) -> Self {
        Self {
            input,
            share,
            metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for MemoryShareExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MemoryShareExec: share=1/{}", self.share.divisor)
    }
}

impl ExecutionPlan for MemoryShareExec {
    fn name(&self) -> &str {
        "MemoryShareExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(
            super::single_child("MemoryShareExec", children)?,
            Arc::clone(&self.share),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let input = baseline.input(self.input.execute(partition, self.share.context(context))?);
        Ok(baseline.output(input))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::FairSpillPool;

    #[test]
    fn a_capped_view_refuses_past_its_share_and_gives_everything_back() {
        let parent: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(1000));
        let view: Arc<dyn MemoryPool> = Arc::new(CappedPool::new(Arc::clone(&parent), 300));
        let a = MemoryConsumer::new("a")
            .with_can_spill(true)
            .register(&view);
        let b = MemoryConsumer::new("b")
            .with_can_spill(true)
            .register(&view);
        a.try_grow(200).unwrap();
        let err = b.try_grow(200).unwrap_err().to_string();
        assert!(err.contains("share of 300.0 B"), "{err}");
        assert_eq!((view.reserved(), parent.reserved()), (200, 200));
        b.try_grow(100).unwrap();
        // Outside the view, an unspillable consumer still finds the rest of the pool.
        let c = MemoryConsumer::new("c").register(&parent);
        c.try_grow(700).unwrap();
        assert!(c.try_grow(1).is_err());
        // A refusal by the pool beneath leaves the view's count as it was.
        a.shrink(100);
        assert!(b.try_grow(60).is_err());
        assert_eq!(view.reserved(), 200);
        drop((a, b, c));
        assert_eq!((view.reserved(), parent.reserved()), (0, 0));
    }

    #[test]
    fn a_share_sees_a_bounded_pool_through_one_view() {
        use datafusion::execution::runtime_env::RuntimeEnvBuilder;

        let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(1 << 20));
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool))
            .build_arc()
            .unwrap();
        let context = Arc::new(TaskContext::default().with_runtime(runtime));
        let share = MemoryShare::new(4);
        let seen = share.context(Arc::clone(&context));
        assert!(matches!(
            seen.memory_pool().memory_limit(),
            MemoryLimit::Finite(n) if n == 256 << 10
        ));
        // The same pool gives the same view (both sides of a join share one count).
        let again = share.context(Arc::clone(&context));
        assert!(Arc::ptr_eq(seen.memory_pool(), again.memory_pool()));
        // An unbounded pool is left as it is.
        let unbounded = Arc::new(TaskContext::default());
        let view = MemoryShare::new(4).context(Arc::clone(&unbounded));
        assert!(Arc::ptr_eq(&view, &unbounded));
    }
}
