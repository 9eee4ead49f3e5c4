//! A `MERGE`'s source, read once: buffered under a budget or spilled to one file, with the
//! min/max of each join key (what the key filter and the target's pruning use).

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::{SpillFile, TaskContext};
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::metrics::SpillMetrics;
use datafusion::physical_plan::spill::SpillManager;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    execute_stream, ExecutionPlan, ExecutionPlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

use super::on::JoinSpec;
use crate::physical_plan::spill::SpillWriter;

/// The smallest and largest value of one source key (`None`: no non-NULL value).
#[derive(Debug, Clone)]
pub(crate) struct KeyBounds {
    pub min: ScalarValue,
    pub max: ScalarValue,
}

/// The source, read once.
pub(crate) enum BufferedSource {
    /// All of it in memory (reserved).
    Memory(Vec<RecordBatch>, MemoryReservation),
    /// Spilled to a file, with its size in memory.
    Spilled(Arc<dyn SpillFile>, usize),
}

/// What reading the source found.
pub(crate) struct SourceRead {
    pub buffered: BufferedSource,
    pub schema: SchemaRef,
    pub rows: u64,
    /// Per key of `JoinSpec::bounded_columns`, in that order.
    pub bounds: Vec<Option<KeyBounds>>,
}

/// The memory the source may hold: an eighth of a finite pool (`None`: no limit).
pub(crate) fn source_budget(context: &TaskContext) -> Option<usize> {
    // The in-memory join's build side holds about three times the source's bytes (the
    // repartitioned batches and the hash table), and the writers and the position bitmaps
    // need their part of the pool beside it.
    match context.memory_pool().memory_limit() {
        MemoryLimit::Finite(n) => Some(n / 8),
        _ => None,
    }
}

/// Reads `source` (one stream of all its partitions), keeping it in memory while it fits in an
/// eighth of a finite pool, spilling it to one file when it does not.
pub(crate) async fn read_source(
    source: Arc<dyn ExecutionPlan>,
    spec: &JoinSpec,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<SourceRead> {
    let schema = source.schema();
    let budget = source_budget(context).unwrap_or(usize::MAX);
    let reservation = MemoryConsumer::new("MergeSource")
        .with_can_spill(true)
        .register(context.memory_pool());
    let mut mins = vec![];
    let mut maxs = vec![];
    for (k, _) in &spec.bounded_columns {
        let ty = spec.source_keys[*k].data_type(&schema)?;
        mins.push(MinAccumulator::try_new(&ty)?);
        maxs.push(MaxAccumulator::try_new(&ty)?);
    }
    let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(source));
    let mut stream = execute_stream(plan, Arc::clone(context))?;
    let mut batches = vec![];
    let mut spilled: Option<SpillWriter> = None;
    let mut rows = 0u64;
    let mut bytes = 0usize;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        for (i, (k, _)) in spec.bounded_columns.iter().enumerate() {
            let key = spec.source_keys[*k]
                .evaluate(&batch)?
                .into_array(batch.num_rows())?;
            mins[i].update_batch(&[Arc::clone(&key)])?;
            maxs[i].update_batch(&[key])?;
        }
        let size = batch.get_array_memory_size();
        bytes += size;
        if let Some(file) = spilled.as_mut() {
            file.append(&batch)?;
            continue;
        }
        if bytes <= budget && reservation.try_grow(size).is_ok() {
            batches.push(batch);
            continue;
        }
        let mut file = SpillWriter::create(
            &context.runtime_env(),
            &schema,
            spill.clone(),
            "MERGE source",
        )?;
        for b in batches.drain(..) {
            file.append(&b)?;
        }
        file.append(&batch)?;
        reservation.free();
        spilled = Some(file);
    }
    let mut bounds = vec![];
    for (min, max) in mins.iter_mut().zip(maxs.iter_mut()) {
        let (min, max) = (min.evaluate()?, max.evaluate()?);
        bounds.push((!min.is_null() && !max.is_null()).then_some(KeyBounds { min, max }));
    }
    let buffered = match spilled {
        Some(file) => BufferedSource::Spilled(file.finish()?, bytes),
        None => BufferedSource::Memory(batches, reservation),
    };
    Ok(SourceRead {
        buffered,
        schema,
        rows,
        bounds,
    })
}

/// A spill file read as a stream, as often as asked.
struct SpilledStream {
    file: Arc<dyn SpillFile>,
    schema: SchemaRef,
    spill: SpillManager,
}

impl fmt::Debug for SpilledStream {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("SpilledStream")
            .field("schema", &self.schema)
            .finish()
    }
}

impl PartitionStream for SpilledStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        match self
            .spill
            .read_spill_as_stream(Arc::clone(&self.file), None)
        {
            Ok(stream) => stream,
            Err(e) => Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                futures::stream::once(async move { Err(e) }),
            )),
        }
    }
}

/// A plan reading the batches of spill `file` (of `schema`), as often as executed.
pub(crate) fn spilled_exec(
    file: Arc<dyn SpillFile>,
    schema: SchemaRef,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<Arc<dyn ExecutionPlan>> {
    let stream = SpilledStream {
        file,
        schema: Arc::clone(&schema),
        spill: SpillManager::new(context.runtime_env(), spill, Arc::clone(&schema)),
    };
    Ok(Arc::new(StreamingTableExec::try_new(
        schema,
        vec![Arc::new(stream)],
        None,
        vec![],
        false,
        None,
    )?))
}

/// `plan`'s rows written to one spill file and read back from it: a pipeline break, so what
/// produced them (and the memory it holds) is gone before the next operator starts.
pub(crate) async fn spill_through(
    plan: Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    spill: SpillMetrics,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let mut file =
        SpillWriter::create(&context.runtime_env(), &schema, spill.clone(), "MERGE rows")?;
    let plan: Arc<dyn ExecutionPlan> = match plan.output_partitioning().partition_count() {
        1 => plan,
        _ => Arc::new(CoalescePartitionsExec::new(plan)),
    };
    let mut stream = execute_stream(plan, Arc::clone(context))?;
    while let Some(batch) = stream.next().await {
        file.append(&batch?)?;
    }
    drop(stream);
    spilled_exec(file.finish()?, schema, context, spill)
}
