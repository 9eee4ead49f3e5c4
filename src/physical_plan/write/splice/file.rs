//! The two files of a splice: the old one (its footer, page offsets and readers of its row
//! groups) and the new one (the parquet writer its row groups go through, and where its bytes
//! go).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{DataFile, PartitionKey};
use iceberg::writer::file_writer::location_generator::LocationGenerator;
use object_store::path::Path as ObjectPath;
use object_store::ObjectMeta;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::arrow_writer::{ArrowRowGroupWriterFactory, ArrowWriterOptions};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use parquet::arrow::{ArrowWriter, ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::file::metadata::{ParquetMetaData, ParquetOffsetIndex};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnDescPtr;

use super::super::column_metrics::file_metrics;
use super::super::dictionary::columns_of_file;
use super::super::dictionary_chunk;
use super::super::parquet_file::SharedBuffer;
use super::super::writer::with_plain_columns;
use super::super::WrittenFiles;
use super::io::{dictionary_reader, same_columns, StoreReader};
use super::{Splicer, BATCH_ROWS};
use crate::error::IcebergResultExt;
use crate::file_planning::PlannedFile;

/// The data file a splice reads.
pub(super) struct OldFile {
    pub(super) path: ObjectPath,
    pub(super) footer: Arc<ParquetMetaData>,
    /// Page offsets of every chunk (copied chunks keep them, moved).
    pub(super) offsets: ParquetOffsetIndex,
    reader: StoreReader,
    /// How a row group is read when some of its columns are copied.
    plain: ArrowReaderMetadata,
    /// How a row group encoded whole is read: kept dictionaries read as dictionaries.
    whole: ArrowReaderMetadata,
}

impl OldFile {
    /// The row group `index`'s table columns `columns`, in batches.
    pub(super) fn group_batches(
        &self,
        index: usize,
        columns: &[usize],
        whole: bool,
    ) -> Result<ParquetRecordBatchStream<StoreReader>> {
        let metadata = match whole {
            true => self.whole.clone(),
            false => self.plain.clone(),
        };
        Ok(
            ParquetRecordBatchStreamBuilder::new_with_metadata(self.reader.clone(), metadata)
                .with_projection(ProjectionMask::roots(
                    self.footer.file_metadata().schema_descr(),
                    columns.iter().copied(),
                ))
                .with_row_groups(vec![index])
                .with_batch_size(BATCH_ROWS)
                .build()?,
        )
    }

    /// The page statistics of a leaf's chunk in a row group, when the file has them for every
    /// chunk.
    pub(super) fn page_stats(&self, index: usize, leaf: usize) -> Option<ColumnIndexMetaData> {
        let columns = self.footer.file_metadata().schema_descr().num_columns();
        self.footer
            .column_index()
            .filter(|c| {
                c.len() == self.footer.num_row_groups() && c.iter().all(|g| g.len() == columns)
            })
            .and_then(|c| c[index].get(leaf))
            .cloned()
    }
}

/// The data file a splice writes: its row groups go through the parquet writer into a shared
/// buffer, and from there to the file once the first row group is done.
pub(super) struct NewParquet {
    pub(super) out: SerializedFileWriter<SharedBuffer>,
    pub(super) factory: ArrowRowGroupWriterFactory,
    buffer: SharedBuffer,
    pub(super) props: Arc<WriterProperties>,
    /// For each leaf column, how the dictionary encoder would encode it, if it can.
    pub(super) own: Vec<Option<(ColumnDescPtr, dictionary_chunk::Codec)>>,
    /// The table column of each leaf column.
    pub(super) root_of: Vec<usize>,
    location: String,
    sink: Option<Box<dyn iceberg::io::FileWrite>>,
    flushed: usize,
    pub(super) groups_written: usize,
}

impl NewParquet {
    /// Writes out what the writer buffered since the last call; the file is created (and its
    /// location recorded in `written`) on the first.
    pub(super) async fn flush(&mut self, splicer: &Splicer, written: &WrittenFiles) -> Result<()> {
        self.out.flush()?;
        let bytes = self.buffer.take();
        self.flushed += bytes.len();
        self.sink(splicer, written)
            .await?
            .write(Bytes::from(bytes))
            .await
            .df()
    }

    async fn sink(
        &mut self,
        splicer: &Splicer,
        written: &WrittenFiles,
    ) -> Result<&mut Box<dyn iceberg::io::FileWrite>> {
        if self.sink.is_none() {
            written.record(self.location.clone());
            let output = splicer.table.file_io().new_output(&self.location).df()?;
            self.sink = Some(output.writer().await.df()?);
        }
        Ok(self.sink.as_mut().expect("created above"))
    }

    /// Closes the file and gives its data file, with metrics from its footer.
    pub(super) async fn finish(
        mut self,
        splicer: &Splicer,
        file: &PlannedFile,
        written: &WrittenFiles,
        nan_counts: HashMap<i32, u64>,
    ) -> Result<DataFile> {
        let metadata = self.out.finish()?;
        let tail = self.buffer.take();
        self.flushed += tail.len();
        let sink = self.sink(splicer, written).await?;
        sink.write(Bytes::from(tail)).await.df()?;
        sink.close().await.df()?;
        let mut builder = file_metrics(
            &splicer.schema,
            &metadata,
            self.flushed,
            &self.location,
            nan_counts,
        )?;
        builder
            .partition(file.partition.clone())
            .partition_spec_id(file.spec_id);
        builder
            .build()
            .map_err(|e| DataFusionError::Internal(format!("spliced data file: {e}")))
    }
}

impl Splicer {
    /// Reads `file`'s footer and starts the file that takes its place; `None` when the file
    /// cannot be spliced (no page offsets, or not the columns this crate writes).
    pub(super) async fn open(&self, file: &PlannedFile) -> Result<Option<(OldFile, NewParquet)>> {
        let path = self.locations.object_path_in(&self.url, &file.path)?;
        let recorded = ObjectMeta {
            location: path.clone(),
            last_modified: chrono::Utc::now(),
            size: file.size,
            e_tag: None,
            version: None,
        };
        let (footer, _) = crate::physical_plan::parquet_files::fetch_footer(
            self.store.as_ref(),
            &recorded,
            None,
            None,
            true,
        )
        .await?;
        // Copied chunks keep their page offsets (the writer needs them for every chunk once
        // its own have them).
        let Some(offsets) = footer.offset_index().cloned() else {
            return Ok(None);
        };
        let columns = footer.file_metadata().schema_descr().num_columns();
        if offsets.len() != footer.num_row_groups() || offsets.iter().any(|g| g.len() != columns) {
            return Ok(None);
        }
        // Columns whose dictionaries overflowed in the file are encoded plain, as a rewrite
        // of the file would (copied chunks stay as they are).
        let dictionaries = columns_of_file(&footer);
        let props = Arc::new(with_plain_columns(
            self.props.clone(),
            &self.schema,
            &dictionaries.plain,
        ));
        let options = ArrowWriterOptions::new().with_properties(props.as_ref().clone());
        let buffer = SharedBuffer::default();
        let writer =
            ArrowWriter::try_new_with_options(buffer.clone(), Arc::clone(&self.arrow), options)?;
        let (out, factory) = writer.into_serialized_writer()?;
        if !same_columns(&footer, out.schema_descr()) {
            return Ok(None);
        }
        let reader = StoreReader {
            store: Arc::clone(&self.store),
            path: path.clone(),
            footer: Arc::clone(&footer),
        };
        let plain = ArrowReaderMetadata::try_new(Arc::clone(&footer), ArrowReaderOptions::new())?;
        // A row group encoded whole reads the strings whose dictionaries held in the file as
        // dictionaries, which the file writer's dictionary encoder takes as they are (no
        // value decoded and interned again).
        let descr = out.schema_descr();
        let own: Vec<_> = descr
            .columns()
            .iter()
            .map(|d| dictionary_chunk::supported(d, &props).map(|codec| (Arc::clone(d), codec)))
            .collect();
        let whole = dictionary_reader(&footer, &plain, descr, &own, &dictionaries.kept)?;
        let root_of = (0..descr.num_columns())
            .map(|l| descr.get_column_root_idx(l))
            .collect();
        let location = self.new_location(file)?;
        let old = OldFile {
            path,
            footer,
            offsets,
            reader,
            plain,
            whole,
        };
        let new = NewParquet {
            out,
            factory,
            buffer,
            props,
            own,
            root_of,
            location,
            sink: None,
            flushed: 0,
            groups_written: 0,
        };
        Ok(Some((old, new)))
    }

    /// A new data file's location in `file`'s partition.
    fn new_location(&self, file: &PlannedFile) -> Result<String> {
        let spec = self
            .table
            .metadata()
            .partition_spec_by_id(file.spec_id)
            .ok_or_else(|| {
                DataFusionError::Internal(format!("no partition spec {}", file.spec_id))
            })?;
        let key = PartitionKey::new(
            spec.as_ref().clone(),
            Arc::clone(&self.schema),
            file.partition.clone(),
        );
        let name = format!("{}-spliced.parquet", uuid::Uuid::new_v4());
        Ok(self.files.generate_location(Some(&key), &name))
    }
}
