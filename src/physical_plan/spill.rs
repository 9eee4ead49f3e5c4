//! Spill files in DataFusion's format (Arrow IPC streams in the runtime's temp directories),
//! written incrementally and read back through DataFusion's `SpillManager`.

use std::io::BufWriter;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use arrow::ipc::writer::StreamWriter;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SpillFile, SpillWriter as FileWriter};
use datafusion::physical_plan::metrics::SpillMetrics;

/// One spill file being written through the disk manager (which counts it against the disk
/// limit); counts into the operator's spill metrics.
pub(crate) struct SpillWriter {
    file: Arc<dyn SpillFile>,
    writer: StreamWriter<BufWriter<Box<dyn FileWriter>>>,
    metrics: SpillMetrics,
}

impl SpillWriter {
    /// A new temp file of the runtime's disk manager for batches of `schema`.
    pub(crate) fn create(
        env: &RuntimeEnv,
        schema: &Schema,
        metrics: SpillMetrics,
        what: &str,
    ) -> Result<Self> {
        let file = env.disk_manager.create_tmp_file(what)?;
        let writer = StreamWriter::try_new(BufWriter::new(file.open_writer()?), schema)?;
        metrics.spill_file_count.add(1);
        Ok(Self {
            file,
            writer,
            metrics,
        })
    }

    /// Appends a batch.
    pub(crate) fn append(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch)?;
        self.metrics.spilled_rows.add(batch.num_rows());
        Ok(())
    }

    /// Finishes the file; it is deleted when the last handle is dropped.
    pub(crate) fn finish(mut self) -> Result<Arc<dyn SpillFile>> {
        self.writer.finish()?;
        let mut inner = self
            .writer
            .into_inner()?
            .into_inner()
            .map_err(|e| DataFusionError::Execution(format!("spill file: {}", e.error())))?;
        inner.finish()?;
        self.metrics
            .spilled_bytes
            .add(self.file.size().unwrap_or(0) as usize);
        Ok(self.file)
    }
}
