//! Spill files in DataFusion's format (Arrow IPC streams in the runtime's temp directories),
//! written incrementally and read back through DataFusion's `SpillManager`.

use std::fs::File;
use std::io::BufWriter;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use arrow::ipc::writer::StreamWriter;
use datafusion::error::Result;
use datafusion::execution::disk_manager::RefCountedTempFile;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::metrics::SpillMetrics;

/// One spill file being written; counts into the operator's spill metrics.
pub(crate) struct SpillWriter {
    file: RefCountedTempFile,
    writer: StreamWriter<BufWriter<File>>,
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
        let writer = StreamWriter::try_new(BufWriter::new(File::create(file.path())?), schema)?;
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
    pub(crate) fn finish(mut self) -> Result<RefCountedTempFile> {
        self.writer.finish()?;
        drop(self.writer);
        self.file.update_disk_usage()?;
        self.metrics
            .spilled_bytes
            .add(self.file.current_disk_usage() as usize);
        Ok(self.file)
    }
}
