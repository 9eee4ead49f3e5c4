//! Parquet footers read by the size the manifest records, and once more by the object's real
//! size when that read fails.
//!
//! Readers locate a parquet footer from the end of the file, and the end is the
//! `file_size_in_bytes` of the file's manifest entry (no request is spent asking the store).
//! Some writers record a wrong size; the footer read then fails ("metadata requires N bytes,
//! but could only read M"). Java and DuckDB ask the store for the size and read such files:
//! here, a footer read that fails asks the store for the object's size, and when it differs
//! from the recorded one, warns and reads the footer again by the real size.
//!
//! One case stays an error: a file recorded smaller than it is and split by DataFusion into
//! byte ranges of the recorded size. Row groups past the recorded end belong to no range, so
//! reading on would silently skip rows.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::catalog::Session;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{
    FileScanConfig, FileScanConfigBuilder, ParquetFileReaderFactory, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricValue,
};
use datafusion::physical_plan::ExecutionPlan;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::ParquetMetaData;

/// The object's metadata with its real size, when the store reports a size other than the
/// recorded one (`None` when they agree: the failed read had another cause).
async fn real_size(store: &dyn ObjectStore, recorded: &ObjectMeta) -> Result<Option<ObjectMeta>> {
    let head = store.head(&recorded.location).await?;
    if head.size == recorded.size {
        return Ok(None);
    }
    log::warn!(
        "data file {} is {} bytes but its manifest records {}: reading it by its real size",
        recorded.location,
        head.size,
        recorded.size
    );
    Ok(Some(ObjectMeta {
        size: head.size,
        ..recorded.clone()
    }))
}

/// A failed read by the real size, naming the file and both sizes (a truncated file shows here).
fn by_real_size(real: &ObjectMeta, recorded: u64, e: DataFusionError) -> DataFusionError {
    DataFusionError::Execution(format!(
        "file {} could not be read by its real size of {} bytes (its manifest records {recorded}): {e}",
        real.location, real.size
    ))
}

/// Refuses to read on when a split file is larger than recorded (see the module docs).
fn check_split(file: &PartitionedFile, real: &ObjectMeta) -> Result<()> {
    if file.range.is_some() && real.size > file.object_meta.size {
        return Err(DataFusionError::Execution(format!(
            "data file {} is {} bytes but its manifest records {}, and it was split into byte \
             ranges by the recorded size (rows past it would be missed): read it whole with \
             SET datafusion.optimizer.repartition_file_scans = false",
            real.location, real.size, file.object_meta.size
        )));
    }
    Ok(())
}

/// After a failed footer read by the recorded size: the footer read by the object's real size
/// with it (`None` when the sizes agree, so the failure had another cause). `split` is the file
/// being scanned, when it may be a byte range of one (see [`check_split`]).
async fn footer_by_real_size(
    store: &dyn ObjectStore,
    recorded: &ObjectMeta,
    cache: Option<Arc<FileMetadataCache>>,
    split: Option<&PartitionedFile>,
) -> Result<Option<(Arc<ParquetMetaData>, ObjectMeta)>> {
    let Some(real) = real_size(store, recorded).await? else {
        return Ok(None);
    };
    if let Some(file) = split {
        check_split(file, &real)?;
    }
    let footer = DFParquetMetadata::new(store, &real)
        .with_file_metadata_cache(cache)
        .fetch_metadata()
        .await
        .map_err(|e| by_real_size(&real, recorded.size, e))?;
    Ok(Some((footer, real)))
}

/// The footer of the object `meta` describes, read through DataFusion's metadata cache; by the
/// object's real size when reading by the recorded one fails and the sizes differ. Returns the
/// metadata and the object's metadata as read (with the real size when it was corrected).
/// `hint` is how many bytes the first read takes from the end of the object (DataFusion's
/// `metadata_size_hint`): footers and page indexes that fit are read in one request. With
/// `page_index`, the page indexes are loaded too (a scan of the same file that can use them then
/// finds them in the cache rather than reading the footer again).
pub(crate) async fn fetch_footer(
    store: &dyn ObjectStore,
    meta: &ObjectMeta,
    cache: Option<Arc<FileMetadataCache>>,
    hint: Option<usize>,
    page_index: bool,
) -> Result<(Arc<ParquetMetaData>, ObjectMeta)> {
    let policy = page_index.then_some(parquet::file::metadata::PageIndexPolicy::Optional);
    let first = DFParquetMetadata::new(store, meta)
        .with_file_metadata_cache(cache.clone())
        .with_metadata_size_hint(hint)
        .with_page_index_policy(policy)
        .fetch_metadata()
        .await;
    match first {
        Ok(footer) => Ok((footer, meta.clone())),
        Err(e) => footer_by_real_size(store, meta, cache, None)
            .await?
            .ok_or(e),
    }
}

/// DataFusion's cached parquet reader factory, with readers that retry a failed footer read
/// by the object's real size, over a store that counts the requests the scan makes
/// (`object_store_requests` and `bytes_fetched` in `EXPLAIN ANALYZE`).
#[derive(Debug)]
pub(crate) struct RecordedSizeReaderFactory {
    inner: CachedParquetFileReaderFactory,
    store: Arc<dyn ObjectStore>,
    cache: Arc<FileMetadataCache>,
    counts: RequestCounts,
    /// Whether the counts are in the plan's metrics yet (they are added once per scan).
    registered: std::sync::atomic::AtomicBool,
    /// Whether footers are read with their page indexes (see [`parquet_exec`]).
    page_index: bool,
    /// Top-level string and binary columns (field ids) decoded as dictionaries.
    dictionaries: Arc<[i32]>,
}

impl RecordedSizeReaderFactory {
    /// Readers of `store`'s objects, footers cached in `cache`.
    pub(crate) fn new(store: Arc<dyn ObjectStore>, cache: Arc<FileMetadataCache>) -> Self {
        let counts = RequestCounts::default();
        let store: Arc<dyn ObjectStore> = Arc::new(CountedStore {
            inner: store,
            counts: counts.clone(),
        });
        Self {
            inner: CachedParquetFileReaderFactory::new(Arc::clone(&store), Arc::clone(&cache)),
            store,
            cache,
            counts,
            registered: std::sync::atomic::AtomicBool::new(false),
            page_index: false,
            dictionaries: Arc::new([]),
        }
    }

    /// Readers that decode the top-level string and binary columns of these field ids as
    /// dictionaries (see [`with_dictionaries`]).
    pub(crate) fn with_dictionaries(mut self, field_ids: Arc<[i32]>) -> Self {
        self.dictionaries = field_ids;
        self
    }

    /// Readers that load each footer with its page indexes, from the same read when they fit
    /// in the metadata size hint (DataFusion otherwise reads them by a second request when a
    /// filter can use them).
    pub(crate) fn with_page_index(mut self, page_index: bool) -> Self {
        self.page_index = page_index;
        self
    }
}

/// `store`, counting the requests made through it into `requests` and the bytes they return
/// into `bytes` (metrics of the caller's plan node).
pub(crate) fn counted_store(
    store: Arc<dyn ObjectStore>,
    requests: Count,
    bytes: Count,
) -> Arc<dyn ObjectStore> {
    Arc::new(CountedStore {
        inner: store,
        counts: RequestCounts { requests, bytes },
    })
}

/// Requests a scan made of its object store, and the bytes they returned.
#[derive(Debug, Clone, Default)]
struct RequestCounts {
    requests: Count,
    bytes: Count,
}

/// How many requests `ranges` take when ranges less than `gap` apart share one, and the bytes
/// those requests fetch.
fn coalesced(ranges: &[Range<u64>], gap: u64) -> (usize, u64) {
    let mut sorted: Vec<&Range<u64>> = ranges.iter().filter(|r| r.end > r.start).collect();
    sorted.sort_by_key(|r| r.start);
    let mut requests = 0;
    let mut bytes = 0;
    let mut current: Option<Range<u64>> = None;
    for r in sorted {
        match &mut current {
            Some(c) if r.start <= c.end.saturating_add(gap) => c.end = c.end.max(r.end),
            _ => {
                if let Some(c) = current.take() {
                    requests += 1;
                    bytes += c.end - c.start;
                }
                current = Some(r.clone());
            }
        }
    }
    if let Some(c) = current {
        requests += 1;
        bytes += c.end - c.start;
    }
    (requests, bytes)
}

/// A store that counts its reads (one request per GET, and per group of nearby ranges).
#[derive(Debug)]
struct CountedStore {
    inner: Arc<dyn ObjectStore>,
    counts: RequestCounts,
}

impl std::fmt::Display for CountedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait::async_trait]
impl ObjectStore for CountedStore {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.counts.requests.add(1);
        let got = self.inner.get_opts(location, options).await?;
        self.counts
            .bytes
            .add((got.range.end - got.range.start) as usize);
        Ok(got)
    }

    async fn get_ranges(
        &self,
        location: &object_store::path::Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        // Object stores serve nearby ranges with one request (object_store coalesces ranges
        // less than this apart): count those requests, and read as the store reads.
        let (requests, bytes) = coalesced(ranges, object_store::OBJECT_STORE_COALESCE_DEFAULT);
        self.counts.requests.add(requests);
        self.counts.bytes.add(bytes as usize);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

impl ParquetFileReaderFactory for RecordedSizeReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Result<Box<dyn AsyncFileReader + Send>> {
        if !self
            .registered
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            for (name, count) in [
                ("object_store_requests", &self.counts.requests),
                ("bytes_fetched", &self.counts.bytes),
            ] {
                MetricBuilder::new(metrics).build(MetricValue::Count {
                    name: name.into(),
                    count: count.clone(),
                });
            }
        }
        let inner = self.inner.create_reader(
            partition_index,
            partitioned_file.clone(),
            metadata_size_hint,
            metrics,
        )?;
        Ok(Box::new(RecordedSizeReader {
            inner,
            store: Arc::clone(&self.store),
            cache: Arc::clone(&self.cache),
            file: partitioned_file,
            page_index: self.page_index,
            dictionaries: Arc::clone(&self.dictionaries),
        }))
    }
}

/// A parquet reader whose footer read is retried by the object's real size.
struct RecordedSizeReader {
    inner: Box<dyn AsyncFileReader + Send>,
    store: Arc<dyn ObjectStore>,
    cache: Arc<FileMetadataCache>,
    file: PartitionedFile,
    page_index: bool,
    dictionaries: Arc<[i32]>,
}

impl AsyncFileReader for RecordedSizeReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.inner.get_bytes(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.inner.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let with_index = match (self.page_index, options) {
                (true, Some(o)) => Some(
                    o.clone()
                        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional),
                ),
                _ => None,
            };
            let first = self
                .inner
                .get_metadata(with_index.as_ref().or(options))
                .await;
            let footer = match first {
                Ok(footer) => footer,
                Err(e) => {
                    let retry = footer_by_real_size(
                        self.store.as_ref(),
                        &self.file.object_meta,
                        Some(Arc::clone(&self.cache)),
                        Some(&self.file),
                    );
                    match retry.await {
                        Ok(Some((footer, _))) => footer,
                        Ok(None) => {
                            let location = &self.file.object_meta.location;
                            return Err(match other_format(self.store.as_ref(), location).await {
                                Some(format) => parquet::errors::ParquetError::External(Box::new(
                                    not_parquet(location, format),
                                )),
                                None => e,
                            });
                        }
                        Err(retry) => {
                            return Err(parquet::errors::ParquetError::External(Box::new(retry)))
                        }
                    }
                }
            };
            with_dictionaries(footer, &self.dictionaries)
        }
        .boxed()
    }
}

/// The format of a file whose parquet footer cannot be read, when its first bytes are another
/// format's magic (ORC or Avro): Iceberg tables may hold such data files (Hive, Impala and
/// Trino write ORC).
async fn other_format(
    store: &dyn ObjectStore,
    location: &object_store::path::Path,
) -> Option<&'static str> {
    let head = store.get_range(location, 0..4).await.ok()?;
    if head.starts_with(b"ORC") {
        Some("ORC")
    } else if head.starts_with(b"Obj\x01") {
        Some("Avro")
    } else {
        None
    }
}

/// The error for a data file of a format this reader does not read: one line naming it.
fn not_parquet(location: &object_store::path::Path, format: &str) -> DataFusionError {
    DataFusionError::NotImplemented(format!(
        "data file {location} is an {format} file; iceberg-exec reads Parquet data files only \
         ({format} data files are not supported yet)"
    ))
}

/// The field id Iceberg gave an Arrow field (`PARQUET:field_id` metadata).
pub(crate) fn field_id(field: &arrow::datatypes::Field) -> Option<i32> {
    field
        .metadata()
        .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
        .and_then(|id| id.parse().ok())
}

/// The dictionary a string or binary column of type `ty` is decoded into when read as its
/// files' dictionaries (`Dictionary(Int32, Utf8)` or `Dictionary(Int32, Binary)`); `None` for
/// other types.
pub(crate) fn byte_dictionary_type(
    ty: &arrow::datatypes::DataType,
) -> Option<arrow::datatypes::DataType> {
    use arrow::datatypes::DataType;
    let value = match ty {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        _ => return None,
    };
    Some(DataType::Dictionary(
        Box::new(DataType::Int32),
        Box::new(value),
    ))
}

/// `footer` as the parquet reader should see it to decode the top-level string and binary
/// columns of `field_ids` as dictionaries: its embedded Arrow schema (`ARROW:schema`, which the
/// reader takes as the types to decode into) says so for those columns. Each column chunk then
/// comes out as keys into its own dictionary page, one dictionary shared by every batch of the
/// chunk, instead of every value copied out. The cached footer is left as it is: only this
/// scan reads the hint.
fn with_dictionaries(
    footer: Arc<ParquetMetaData>,
    field_ids: &[i32],
) -> parquet::errors::Result<Arc<ParquetMetaData>> {
    use arrow::datatypes::Schema;
    use parquet::file::metadata::{FileMetaData, KeyValue, ParquetMetaDataBuilder};
    if field_ids.is_empty() {
        return Ok(footer);
    }
    let file = footer.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())?;
    let mut changed = false;
    let fields: Vec<arrow::datatypes::FieldRef> = schema
        .fields()
        .iter()
        .map(|f| match byte_dictionary_type(f.data_type()) {
            Some(dictionary) if field_id(f).is_some_and(|id| field_ids.contains(&id)) => {
                changed = true;
                Arc::new(f.as_ref().clone().with_data_type(dictionary))
            }
            _ => Arc::clone(f),
        })
        .collect();
    if !changed {
        return Ok(footer);
    }
    let hint = Schema::new_with_metadata(fields, schema.metadata().clone());
    let mut metadata: Vec<KeyValue> = file
        .key_value_metadata()
        .into_iter()
        .flatten()
        .filter(|kv| kv.key != parquet::arrow::ARROW_SCHEMA_META_KEY)
        .cloned()
        .collect();
    metadata.push(KeyValue::new(
        parquet::arrow::ARROW_SCHEMA_META_KEY.to_string(),
        parquet::arrow::encode_arrow_schema(&hint),
    ));
    let file = FileMetaData::new(
        file.version(),
        file.num_rows(),
        file.created_by().map(str::to_string),
        Some(metadata),
        file.schema_descr_ptr(),
        file.column_orders().cloned(),
    );
    Ok(Arc::new(
        ParquetMetaDataBuilder::new(file)
            .set_row_groups(footer.row_groups().to_vec())
            .set_column_index(footer.column_index().cloned())
            .set_offset_index(footer.offset_index().cloned())
            .build(),
    ))
}

/// `source` reading through [`RecordedSizeReaderFactory`] over the store of `url`.
pub(crate) fn with_recorded_size_reader(
    source: ParquetSource,
    runtime: &RuntimeEnv,
    url: &ObjectStoreUrl,
) -> Result<ParquetSource> {
    with_recorded_size_reader_indexed(source, runtime, url, false)
}

/// [`with_recorded_size_reader`], loading page indexes with footers when `page_index`.
pub(crate) fn with_recorded_size_reader_indexed(
    source: ParquetSource,
    runtime: &RuntimeEnv,
    url: &ObjectStoreUrl,
    page_index: bool,
) -> Result<ParquetSource> {
    let store = runtime.object_store(url)?;
    let cache = runtime.cache_manager.get_file_metadata_cache();
    let factory = RecordedSizeReaderFactory::new(store, cache).with_page_index(page_index);
    Ok(source.with_parquet_file_reader_factory(Arc::new(factory)))
}

/// The parquet scan `config` describes, with the session's parquet options, as
/// `ParquetFormat` plans it but reading through [`RecordedSizeReaderFactory`]. `filtered`: the
/// query has filters that reach the reader, so page indexes (when enabled) are read with the
/// footers, in the same request.
pub(crate) fn parquet_exec(
    state: &dyn Session,
    config: FileScanConfig,
    filtered: bool,
) -> Result<Arc<dyn ExecutionPlan>> {
    parquet_exec_with_dictionaries(state, config, filtered, Arc::new([]))
}

/// [`parquet_exec`], decoding the top-level string and binary columns of `dictionaries` (field
/// ids), which the scan's schema gives as dictionaries, as the files' own dictionaries.
pub(crate) fn parquet_exec_with_dictionaries(
    state: &dyn Session,
    config: FileScanConfig,
    filtered: bool,
    dictionaries: Arc<[i32]>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let source = config
        .file_source()
        .downcast_ref::<ParquetSource>()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal("expected a ParquetSource".into()))?;
    let options = state.table_options().parquet.clone();
    let hint = options.global.metadata_size_hint;
    let page_index = filtered && options.global.enable_page_index;
    let mut source = source.with_table_parquet_options(options);
    if let Some(hint) = hint {
        source = source.with_metadata_size_hint(hint);
    }
    let store = state.runtime_env().object_store(&config.object_store_url)?;
    let cache = state.runtime_env().cache_manager.get_file_metadata_cache();
    let factory = RecordedSizeReaderFactory::new(store, cache)
        .with_page_index(page_index)
        .with_dictionaries(dictionaries);
    let source = source.with_parquet_file_reader_factory(Arc::new(factory));
    let config = FileScanConfigBuilder::from(config)
        .with_source(Arc::new(source))
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

/// A parquet file fetched whole in one request (small files: its footer and rows together),
/// read from memory. The object is fetched without a range, so a size recorded wrongly in a
/// manifest does not matter.
pub(crate) struct InMemoryParquet {
    bytes: Bytes,
    footer: Arc<ParquetMetaData>,
}

impl InMemoryParquet {
    /// Fetches `location` from `store` and parses its footer.
    pub(crate) async fn fetch(
        store: &dyn ObjectStore,
        location: &object_store::path::Path,
    ) -> Result<Self> {
        let bytes = store.get(location).await?.bytes().await?;
        let footer = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .map_err(|e| DataFusionError::Execution(format!("parquet file {location}: {e}")))?;
        Ok(Self {
            bytes,
            footer: Arc::new(footer),
        })
    }

    /// The file's footer.
    pub(crate) fn footer(&self) -> Arc<ParquetMetaData> {
        Arc::clone(&self.footer)
    }
}

impl AsyncFileReader for InMemoryParquet {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        let len = self.bytes.len() as u64;
        let out = match range.start <= range.end && range.end <= len {
            true => Ok(self.bytes.slice(range.start as usize..range.end as usize)),
            false => Err(parquet::errors::ParquetError::EOF(format!(
                "range {range:?} is outside the file's {len} bytes"
            ))),
        };
        futures::future::ready(out).boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        futures::future::ready(Ok(Arc::clone(&self.footer))).boxed()
    }
}

/// A boxed reader as a sized one (what parquet's stream builder takes); reads pass through.
pub(crate) struct BoxedReader(pub(crate) Box<dyn AsyncFileReader + Send>);

impl AsyncFileReader for BoxedReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.0.get_bytes(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.0.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        self.0.get_metadata(options)
    }
}

#[cfg(test)]
mod tests {
    use super::coalesced;

    #[test]
    fn nearby_ranges_share_a_request() {
        assert_eq!(coalesced(&[0..10, 15..20, 100..110], 10), (2, 30));
        assert_eq!(coalesced(&[100..110, 0..10], 1000), (1, 110));
        assert_eq!(coalesced(&[], 10), (0, 0));
        assert_eq!(coalesced(&[5..5, 0..4], 0), (1, 4));
    }
}
