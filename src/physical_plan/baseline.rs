//! DataFusion's baseline metrics for this crate's nodes: `output_rows`, `output_batches` and
//! `elapsed_compute` beside each node's own counters, so `EXPLAIN ANALYZE` reads the same for our
//! nodes as for DataFusion's.
//!
//! A node wraps the streams of its children ([`Baseline::input`]) and its output stream
//! ([`Baseline::output`]). Output rows and batches are counted as they leave; `elapsed_compute`
//! is the time of the polls of the node's output, and of the tasks it spawns
//! ([`Baseline::timed`]), less the time its wrapped inputs took inside them, so a child's work is
//! not counted twice. A statement node (DELETE, UPDATE, MERGE) runs plans of its own that are not
//! its children: their time is the node's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::Result;
use datafusion::execution::RecordBatchStream;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, Time};
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{Stream, StreamExt};

/// One partition's baseline metrics of a node, and the clock of its inputs.
#[derive(Debug, Clone)]
pub(crate) struct Baseline {
    metrics: BaselineMetrics,
    inputs: Time,
}

impl Baseline {
    /// The baseline metrics of `partition` in `metrics` (registered there now, so they show
    /// even for a partition that produced nothing).
    pub(crate) fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            metrics: BaselineMetrics::new(metrics, partition),
            inputs: Time::new(),
        }
    }

    /// `stream` (a child's) with the time of its polls kept apart from the node's own.
    pub(crate) fn input(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        Box::pin(TimedInput {
            inner: stream,
            time: self.inputs.clone(),
        })
    }

    /// `work` (a task the node spawns) timed as the node's own, less its wrapped inputs' time.
    pub(crate) fn timed<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        let baseline = self.clone();
        let mut work = Box::pin(work);
        futures::future::poll_fn(move |cx| baseline.own(|| work.as_mut().poll(cx)))
    }

    /// Runs `poll`, adding its time less the inputs' time within it to `elapsed_compute`.
    fn own<T>(&self, poll: impl FnOnce() -> T) -> T {
        let inputs_before = self.inputs.value();
        let start = Instant::now();
        let out = poll();
        let total = start.elapsed().as_nanos() as usize;
        let in_inputs = self.inputs.value().saturating_sub(inputs_before);
        self.metrics
            .elapsed_compute()
            .add_duration(Duration::from_nanos(total.saturating_sub(in_inputs) as u64));
        out
    }

    /// `stream` (the node's output) counted and timed.
    pub(crate) fn output(self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        Box::pin(MeasuredOutput {
            inner: stream,
            baseline: self,
        })
    }
}

struct TimedInput {
    inner: SendableRecordBatchStream,
    time: Time,
}

impl Stream for TimedInput {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let start = Instant::now();
        let poll = self.inner.poll_next_unpin(cx);
        self.time.add_elapsed(start);
        poll
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl RecordBatchStream for TimedInput {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

struct MeasuredOutput {
    inner: SendableRecordBatchStream,
    baseline: Baseline,
}

impl Stream for MeasuredOutput {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let poll = this.baseline.own(|| this.inner.poll_next_unpin(cx));
        this.baseline.metrics.record_poll(poll)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl RecordBatchStream for MeasuredOutput {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    fn batches(schema: &SchemaRef, sizes: &[usize]) -> Vec<Result<RecordBatch>> {
        sizes
            .iter()
            .map(|&n| {
                let values = Int64Array::from_iter_values(0..n as i64);
                Ok(RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(values)]).unwrap())
            })
            .collect()
    }

    #[tokio::test]
    async fn output_rows_and_batches_are_counted_and_input_time_is_not_the_nodes() {
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let metrics = ExecutionPlanMetricsSet::new();
        let baseline = Baseline::new(&metrics, 0);
        let inputs = baseline.inputs.clone();
        // A slow child: each batch takes 20 ms to arrive.
        let child = futures::stream::iter(batches(&schema, &[3, 4, 5])).then(|b| async move {
            std::thread::sleep(std::time::Duration::from_millis(20));
            b
        });
        let child = baseline.input(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&schema),
            child,
        )));
        // The node keeps every other batch.
        let mut n = 0;
        let node = child.filter(move |_| {
            n += 1;
            futures::future::ready(n % 2 == 1)
        });
        let out = baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&schema),
            node,
        )));
        let start = Instant::now();
        let got: Vec<RecordBatch> = out.map(|b| b.unwrap()).collect().await;
        let wall = start.elapsed().as_nanos() as usize;
        assert_eq!(got.iter().map(|b| b.num_rows()).sum::<usize>(), 8);
        let set = metrics.clone_inner();
        assert_eq!(set.output_rows(), Some(8));
        let batches: usize = set
            .iter()
            .filter(|m| {
                matches!(
                    m.value(),
                    datafusion::physical_plan::metrics::MetricValue::OutputBatches(_)
                )
            })
            .map(|m| m.value().as_usize())
            .sum();
        assert_eq!(batches, 2);
        // The child's polls (three sleeps of 20 ms) are timed apart, and the node's own time
        // excludes them: the two together never exceed the time it all took.
        let compute = set.elapsed_compute().unwrap();
        assert!(inputs.value() >= 60_000_000, "{}", inputs.value());
        assert!(
            compute + inputs.value() <= wall,
            "compute {compute} + inputs {} > wall {wall}",
            inputs.value()
        );
    }
}
