//! `iceberg_exec._native`: the engine for Python. A [`Session`] runs SQL on an Iceberg catalog
//! through [`IcebergSession`]; a [`QueryResult`] hands its rows to Python through the Arrow
//! PyCapsule interface (`__arrow_c_stream__`), batch by batch, without copies. The Python
//! package (`iceberg_exec/__init__.py`) builds pyiceberg-shaped verbs on these.
//!
//! The engine runs on a Tokio runtime of this module's own, with the GIL released; a statement
//! waited on checks for Ctrl-C ten times a second and is dropped (cancelled) when Python raises
//! `KeyboardInterrupt`.

mod bridge;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion_ffi::catalog_provider::FFI_CatalogProvider;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use futures::StreamExt;
use iceberg::TableIdent;
use iceberg_exec::{
    open_table_at, parse_size, CatalogChoice, IcebergSession, IcebergTableProvider, LocationMap,
    ObjectStores, StorageOptions, WarehouseConfig,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// The runtime every statement runs on.
pub(crate) static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("iceberg-exec")
        .build()
        .expect("a Tokio runtime")
});

/// The catalog and schema where [`Session::register_arrow`] puts Python's data.
const INPUT_CATALOG: &str = "python";
const INPUT_SCHEMA: &str = "input";
/// The schema of that catalog where [`Session::register_metadata`] puts tables read from their
/// metadata file (tables of catalogs the session does not open).
const READ_ONLY_SCHEMA: &str = "readonly";

/// The table whose metadata file is `location`, read-only, its files read through stores of
/// its own built from `properties`, at `snapshot_id` when given.
fn open_metadata(
    py: Python<'_>,
    location: &str,
    properties: Option<BTreeMap<String, String>>,
    snapshot_id: Option<i64>,
) -> PyResult<(IcebergTableProvider, Arc<ObjectStores>)> {
    let stores = ObjectStores::standalone(StorageOptions::new(properties.unwrap_or_default()));
    // A local metadata file is opened by its path.
    let location = location
        .strip_prefix("file://")
        .unwrap_or(location)
        .to_string();
    let table_stores = Arc::clone(&stores);
    let provider = wait(py, async move {
        let table = open_table_at(&location, &LocationMap::default(), &table_stores).await?;
        let provider = IcebergTableProvider::try_new(table, None)?.with_object_stores(table_stores);
        match snapshot_id {
            Some(id) => provider.with_snapshot_id(id),
            None => Ok(provider),
        }
    })?
    .map_err(to_py)?;
    Ok((provider, stores))
}

/// Names of registered inputs and tables: letters, digits and `_` only.
fn check_name(name: &str) -> PyResult<()> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(PyValueError::new_err(format!(
            "input name '{name}': letters, digits and '_' only"
        )));
    }
    Ok(())
}

/// An error as one line: its causes joined.
fn one_line(e: &DataFusionError) -> String {
    e.to_string()
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
}

/// The Python exception for an engine error (classes of `iceberg_exec.errors`): a concurrent
/// change is `CommitConflict`; an unknown table `TableNotFound` (a `KeyError`); bad SQL, bad
/// names and bad settings `InvalidInput` (a `ValueError`); the rest `IcebergExecError`.
fn to_py(e: DataFusionError) -> PyErr {
    let message = one_line(&e);
    let kind = if iceberg_exec::commit::is_concurrent_change(&e)
        || message.contains("was changed concurrently")
    {
        "CommitConflict"
    } else if is_not_found(&message) {
        "TableNotFound"
    } else {
        match e.find_root() {
            DataFusionError::SQL(..)
            | DataFusionError::Plan(_)
            | DataFusionError::Configuration(_)
            | DataFusionError::SchemaError(..) => "InvalidInput",
            _ => "IcebergExecError",
        }
    };
    Python::attach(|py| {
        let class = py
            .import("iceberg_exec.errors")
            .and_then(|m| m.getattr(kind));
        match class {
            Ok(class) => match class.call1((message.clone(),)) {
                Ok(instance) => PyErr::from_value(instance),
                Err(e) => e,
            },
            Err(e) => e,
        }
    })
}

/// Whether `message` says a table does not exist (DataFusion's and the catalogs' words).
fn is_not_found(message: &str) -> bool {
    let m = message.to_lowercase();
    m.contains("table '") && (m.contains("' not found") || m.contains("does not exist"))
        || m.contains("no such table")
}

/// Runs `fut` to completion with the GIL released, checking for Ctrl-C (and any other signal
/// Python handles) every 100 ms; the future is dropped, which cancels the statement, when a
/// handler raises.
fn wait<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let mut fut = std::pin::pin!(fut);
    loop {
        let step = py.detach(|| {
            RUNTIME.block_on(async {
                tokio::time::timeout(Duration::from_millis(100), &mut fut).await
            })
        });
        match step {
            Ok(out) => return Ok(out),
            Err(_elapsed) => py.check_signals()?,
        }
    }
}

/// A memory size from Python: bytes as an int, or text such as `"64MiB"`.
fn memory_size(value: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(n) = value.extract::<i64>() {
        return usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
            PyValueError::new_err(format!("memory_limit must be positive, got {n}"))
        });
    }
    let text: String = value.extract().map_err(|_| {
        PyValueError::new_err("memory_limit must be bytes (int) or a size such as '64MiB'")
    })?;
    parse_size(&text).map_err(|e| PyValueError::new_err(format!("memory_limit: {}", plain(&e))))
}

/// The message of a configuration error, without DataFusion's prefix.
fn plain(e: &DataFusionError) -> String {
    match e {
        DataFusionError::Configuration(m) => m.clone(),
        other => one_line(other),
    }
}

/// A session on one Iceberg catalog: SQL in, Arrow out, in bounded memory.
#[pyclass(module = "iceberg_exec._native", name = "Session", frozen)]
struct Session {
    inner: IcebergSession,
    /// Python data registered for statements to read (`python.input.<name>`).
    inputs: Arc<MemorySchemaProvider>,
    /// Tables opened read-only from their metadata file (`python.readonly.<name>`).
    read_only: Arc<MemorySchemaProvider>,
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (catalog=None, *, uri=None, warehouse=None, properties=None, memory_limit=None, catalog_name=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        catalog: Option<String>,
        uri: Option<String>,
        warehouse: Option<String>,
        properties: Option<BTreeMap<String, String>>,
        memory_limit: Option<Bound<'_, PyAny>>,
        catalog_name: Option<String>,
    ) -> PyResult<Self> {
        let limit = match &memory_limit {
            Some(v) if !v.is_none() => Some(memory_size(v)?),
            _ => iceberg_exec::catalog::pyiceberg_execution()
                .map_err(to_py)?
                .get("memory-limit")
                .map(|v| parse_size(v))
                .transpose()
                .map_err(|e| {
                    PyValueError::new_err(format!(
                        "execution: memory-limit of .pyiceberg.yaml: {}",
                        plain(&e)
                    ))
                })?,
        };
        let choice = CatalogChoice {
            pyiceberg: catalog,
            catalog_name,
            uri,
            warehouse,
            properties: properties.unwrap_or_default().into_iter().collect(),
        };
        let config = WarehouseConfig::resolve(&choice, limit).map_err(to_py)?;
        let inner = wait(py, IcebergSession::open(config))?.map_err(to_py)?;
        let inputs = Arc::new(MemorySchemaProvider::new());
        let read_only = Arc::new(MemorySchemaProvider::new());
        let catalog = MemoryCatalogProvider::new();
        catalog
            .register_schema(INPUT_SCHEMA, Arc::clone(&inputs) as _)
            .map_err(to_py)?;
        catalog
            .register_schema(READ_ONLY_SCHEMA, Arc::clone(&read_only) as _)
            .map_err(to_py)?;
        inner
            .context()
            .register_catalog(INPUT_CATALOG, Arc::new(catalog));
        Ok(Self {
            inner,
            inputs,
            read_only,
        })
    }

    /// The UUID of the table `ident` (namespace parts, then the name) in the session's
    /// catalog, or `None` when the catalog has no such table.
    fn table_uuid(&self, py: Python<'_>, ident: Vec<String>) -> PyResult<Option<String>> {
        let ident = TableIdent::from_strs(&ident)
            .map_err(|e| PyValueError::new_err(format!("not a table identifier: {e}")))?;
        let catalog = Arc::clone(self.inner.catalog());
        let table =
            wait(py, async move { catalog.try_load_table(&ident).await })?.map_err(to_py)?;
        Ok(table.map(|t| t.metadata().uuid().to_string()))
    }

    /// Plans the query `query`, in which `python.readonly.<name>` is the table whose metadata
    /// file is `location`, read-only (a table of a catalog the session does not open), at
    /// `snapshot_id` when given. Its files are read with the FileIO `properties` (Iceberg's
    /// names: `s3.endpoint`, ...): the statement runs with the table's object stores first, then
    /// the session's.
    #[pyo3(signature = (query, name, location, properties=None, snapshot_id=None))]
    fn sql_on_metadata(
        &self,
        py: Python<'_>,
        query: &str,
        name: &str,
        location: &str,
        properties: Option<BTreeMap<String, String>>,
        snapshot_id: Option<i64>,
    ) -> PyResult<QueryResult> {
        check_name(name)?;
        let (provider, stores) = open_metadata(py, location, properties, snapshot_id)?;
        let ctx = SessionContext::new_with_state(self.state_with_stores(&stores)?);
        datafusion::catalog::SchemaProvider::register_table(
            self.read_only.as_ref(),
            name.to_string(),
            Arc::new(provider),
        )
        .map_err(to_py)?;
        let query = query.to_string();
        let planned = wait(py, async move { ctx.sql(&query).await });
        // The plan holds the table: its name is not needed past planning.
        let removed =
            datafusion::catalog::SchemaProvider::deregister_table(self.read_only.as_ref(), name);
        let df = planned?.map_err(to_py)?;
        removed.map_err(to_py)?;
        if !matches!(
            df.logical_plan(),
            LogicalPlan::Dml(_)
                | LogicalPlan::Ddl(_)
                | LogicalPlan::Copy(_)
                | LogicalPlan::Statement(_)
        ) {
            return Ok(QueryResult::lazy(df));
        }
        Err(PyValueError::new_err(format!(
            "table at '{location}' is read-only here: only queries read it"
        )))
    }

    /// The table whose metadata file is `location`, read-only, for datafusion-python's
    /// `register_table` (see [`Session::sql_on_metadata`]).
    #[pyo3(signature = (location, properties=None, snapshot_id=None))]
    fn metadata_table_provider(
        &self,
        py: Python<'_>,
        location: &str,
        properties: Option<BTreeMap<String, String>>,
        snapshot_id: Option<i64>,
    ) -> PyResult<TableProviderExport> {
        let (provider, stores) = open_metadata(py, location, properties, snapshot_id)?;
        // Planned and run with the table's own stores first (its credentials, not the session's).
        let state = Arc::new(self.state_with_stores(&stores)?);
        Ok(TableProviderExport {
            provider: Arc::new(bridge::BoundTable::new(Arc::new(provider), state)),
        })
    }

    /// Runs `query`. Statements that change something (DML, DDL, CALL) run now; a query runs
    /// when its rows are read.
    fn sql(&self, py: Python<'_>, query: &str) -> PyResult<QueryResult> {
        let session = self.inner.clone();
        let query = query.to_string();
        let df = wait(py, async move { session.sql(&query).await })?.map_err(to_py)?;
        let eager = matches!(
            df.logical_plan(),
            LogicalPlan::Dml(_)
                | LogicalPlan::Ddl(_)
                | LogicalPlan::Copy(_)
                | LogicalPlan::Statement(_)
        );
        if !eager {
            return Ok(QueryResult::lazy(df));
        }
        let schema = Arc::new(df.schema().as_arrow().clone());
        let batches = wait(py, async move { df.collect().await })?.map_err(to_py)?;
        Ok(QueryResult::done(schema, batches))
    }

    /// Replaces the partitions of table `target` (its SQL name) that the rows of `query` fall
    /// into with those rows, whatever the session's overwrite mode: the rows written.
    fn dynamic_overwrite(&self, py: Python<'_>, target: &str, query: &str) -> PyResult<u64> {
        let session = self.inner.clone();
        let (target, query) = (target.to_string(), query.to_string());
        let batches = wait(py, async move {
            let data = session.context().sql(&query).await?;
            session
                .dynamic_overwrite(&target, data)
                .await?
                .collect()
                .await
        })?
        .map_err(to_py)?;
        let count = batches
            .first()
            .filter(|b| b.num_rows() == 1 && b.num_columns() == 1)
            .and_then(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<arrow::array::UInt64Array>()
                    .map(|a| a.value(0))
            });
        count.ok_or_else(|| {
            to_py(DataFusionError::Internal(
                "an overwrite answered without its count".into(),
            ))
        })
    }

    /// Registers `data` (anything with `__arrow_c_stream__`: a pyarrow Table or
    /// RecordBatchReader, a polars or pandas frame through pyarrow, ...) as the table
    /// `python.input.<name>`. With `once` the stream is read as a statement scans it, once and
    /// in bounded memory; otherwise it is read now and kept, for statements that scan it more
    /// than once.
    #[pyo3(signature = (name, data, once=true))]
    fn register_arrow(
        &self,
        py: Python<'_>,
        name: &str,
        data: &Bound<'_, PyAny>,
        once: bool,
    ) -> PyResult<()> {
        check_name(name)?;
        let capsule = data.call_method0("__arrow_c_stream__").map_err(|_| {
            PyValueError::new_err(
                "data must support the Arrow PyCapsule interface (__arrow_c_stream__)",
            )
        })?;
        let capsule = capsule.cast_into::<PyCapsule>()?;
        let reader = unsafe {
            // The capsule holds an ArrowArrayStream (its producer's contract); it is moved out
            // and the capsule left with a released one.
            let pointer = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
            let stream =
                FFI_ArrowArrayStream::from_raw(pointer.as_ptr() as *mut FFI_ArrowArrayStream);
            ArrowArrayStreamReader::try_new(stream)
                .map_err(|e| PyValueError::new_err(e.to_string()))?
        };
        let schema = reader.schema();
        let table: Arc<dyn datafusion::catalog::TableProvider> = if once {
            let partition = OneShot {
                schema: Arc::clone(&schema),
                reader: Mutex::new(Some(Box::new(reader))),
                name: name.to_string(),
            };
            Arc::new(
                StreamingTable::try_new(Arc::clone(&schema), vec![Arc::new(partition)])
                    .map_err(to_py)?,
            )
        } else {
            let batches = py
                .detach(|| reader.collect::<Result<Vec<RecordBatch>, ArrowError>>())
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            Arc::new(MemTable::try_new(schema, vec![batches]).map_err(to_py)?)
        };
        datafusion::catalog::SchemaProvider::register_table(
            self.inputs.as_ref(),
            name.to_string(),
            table,
        )
        .map_err(to_py)?;
        Ok(())
    }

    /// Removes the input `name` registered by [`Session::register_arrow`].
    fn deregister_arrow(&self, name: &str) -> PyResult<()> {
        datafusion::catalog::SchemaProvider::deregister_table(self.inputs.as_ref(), name)
            .map_err(to_py)?;
        Ok(())
    }

    /// The session's Iceberg catalog, for datafusion-python's `register_catalog_provider`.
    fn catalog_provider(&self) -> PyResult<CatalogProviderExport> {
        let name = self.inner.catalog().name().to_string();
        let provider =
            self.inner.context().catalog(&name).ok_or_else(|| {
                PyValueError::new_err(format!("catalog '{name}' is not registered"))
            })?;
        let state = Arc::new(self.inner.context().state());
        Ok(CatalogProviderExport {
            provider: Arc::new(bridge::BoundCatalog::new(provider, state)),
        })
    }

    /// The table `name` (`ns.table`), for datafusion-python's `register_table`.
    fn table_provider(&self, py: Python<'_>, name: &str) -> PyResult<TableProviderExport> {
        let ctx = self.inner.context().clone();
        let name = name.to_string();
        let provider =
            wait(py, async move { ctx.table_provider(name.as_str()).await })?.map_err(to_py)?;
        let state = Arc::new(self.inner.context().state());
        Ok(TableProviderExport {
            provider: Arc::new(bridge::BoundTable::new(provider, state)),
        })
    }

    /// Bytes the session's memory pool holds now (0 between statements).
    fn reserved_memory(&self) -> usize {
        self.inner.memory_pool().reserved()
    }

    /// The catalog's name.
    #[getter]
    fn catalog_name(&self) -> String {
        self.inner.catalog().name().to_string()
    }

    fn __repr__(&self) -> String {
        format!("Session(catalog={:?})", self.inner.catalog().name())
    }
}

impl Session {
    /// The session's state with `stores` (a table's own, see [`open_metadata`]) asked first for
    /// object stores.
    fn state_with_stores(&self, stores: &ObjectStores) -> PyResult<SessionState> {
        let state = self.inner.context().state();
        let env =
            bridge::runtime_with_stores(state.runtime_env(), stores.registry()).map_err(to_py)?;
        Ok(SessionStateBuilder::new_from_existing(state)
            .with_runtime_env(env)
            .build())
    }
}

/// The logical-extension codec datafusion-python hands a provider: `obj` is the codec's
/// capsule, or its `SessionContext` (asked for one). A codec of another DataFusion major is
/// refused: structures differ across majors.
fn foreign_codec(obj: &Bound<'_, PyAny>) -> PyResult<FFI_LogicalExtensionCodec> {
    let capsule = match obj.hasattr("__datafusion_logical_extension_codec__")? {
        true => obj.call_method0("__datafusion_logical_extension_codec__")?,
        false => obj.clone(),
    };
    let capsule = capsule.cast_into::<PyCapsule>().map_err(|_| {
        PyValueError::new_err(
            "expected a datafusion SessionContext or its logical extension codec capsule",
        )
    })?;
    let pointer = capsule.pointer_checked(Some(c"datafusion_logical_extension_codec"))?;
    // The capsule holds an FFI_LogicalExtensionCodec (datafusion-python's contract); it stays
    // the capsule's, and the provider keeps a clone.
    let codec = unsafe { &*(pointer.as_ptr() as *const FFI_LogicalExtensionCodec) };
    let theirs = unsafe { (codec.version)() };
    let ours = datafusion_ffi::version();
    if theirs != ours {
        return Err(PyValueError::new_err(format!(
            "datafusion-python is built on DataFusion {theirs}, iceberg-exec on DataFusion {ours}: \
             install the datafusion package of major {ours}"
        )));
    }
    Ok(codec.clone())
}

/// The session's Iceberg catalog for datafusion-python:
/// `ctx.register_catalog_provider(name, session.catalog_provider())`.
#[pyclass(
    module = "iceberg_exec._native",
    name = "CatalogProviderExport",
    frozen
)]
struct CatalogProviderExport {
    provider: Arc<dyn CatalogProvider>,
}

#[pymethods]
impl CatalogProviderExport {
    fn __datafusion_catalog_provider__<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let codec = foreign_codec(&session)?;
        let ffi = FFI_CatalogProvider::new_with_ffi_codec(
            Arc::clone(&self.provider),
            Some(RUNTIME.handle().clone()),
            codec,
        );
        PyCapsule::new_with_value(py, ffi, c"datafusion_catalog_provider")
    }
}

/// One Iceberg table for datafusion-python: `ctx.register_table(name, session.table_provider(..))`.
#[pyclass(module = "iceberg_exec._native", name = "TableProviderExport", frozen)]
struct TableProviderExport {
    provider: Arc<dyn datafusion::catalog::TableProvider>,
}

#[pymethods]
impl TableProviderExport {
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let codec = foreign_codec(&session)?;
        let ffi = FFI_TableProvider::new_with_ffi_codec(
            Arc::clone(&self.provider),
            true,
            Some(RUNTIME.handle().clone()),
            codec,
        );
        PyCapsule::new_with_value(py, ffi, c"datafusion_table_provider")
    }
}

/// A Python stream read once, when a statement scans it.
struct OneShot {
    schema: SchemaRef,
    reader: Mutex<Option<Box<dyn RecordBatchReader + Send>>>,
    name: String,
}

impl std::fmt::Debug for OneShot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OneShot({})", self.name)
    }
}

impl PartitionStream for OneShot {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self.reader.lock().map(|mut r| r.take()).unwrap_or(None);
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), 2);
        let tx = builder.tx();
        let name = self.name.clone();
        builder.spawn_blocking(move || {
            let Some(reader) = taken else {
                return Err(DataFusionError::Execution(format!(
                    "input '{name}' is a stream and was read already: register it with once=False \
                     to scan it more than once"
                )));
            };
            // Reading may call into Python (a generator behind the stream): that thread takes
            // the GIL itself; the caller waits with it released.
            for batch in reader {
                if tx
                    .blocking_send(batch.map_err(DataFusionError::from))
                    .is_err()
                {
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}

/// What a statement gives back: rows to read (a query, run when read) or the rows a
/// statement that changed something returned.
#[pyclass(module = "iceberg_exec._native", name = "Result", frozen)]
struct QueryResult {
    df: Option<DataFrame>,
    batches: Vec<RecordBatch>,
    schema: SchemaRef,
}

impl QueryResult {
    fn lazy(df: DataFrame) -> Self {
        let schema = python_schema(&Arc::new(df.schema().as_arrow().clone()));
        Self {
            df: Some(in_python_types(df)),
            batches: vec![],
            schema,
        }
    }

    fn done(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self {
            df: None,
            batches,
            schema: python_schema(&schema),
        }
    }
}

/// `data_type` with string and binary views as large strings and binaries, at any depth: what
/// pyiceberg hands its users, and what every pyarrow kernel takes (not all take views).
fn without_views(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Utf8View => DataType::LargeUtf8,
        DataType::BinaryView => DataType::LargeBinary,
        DataType::List(f) => DataType::List(Arc::new(field_without_views(f))),
        DataType::LargeList(f) => DataType::LargeList(Arc::new(field_without_views(f))),
        DataType::FixedSizeList(f, n) => {
            DataType::FixedSizeList(Arc::new(field_without_views(f)), *n)
        }
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(|f| field_without_views(f)).collect())
        }
        DataType::Map(f, sorted) => DataType::Map(Arc::new(field_without_views(f)), *sorted),
        other => other.clone(),
    }
}

fn field_without_views(field: &Field) -> Field {
    field
        .clone()
        .with_data_type(without_views(field.data_type()))
}

/// The schema Python sees (see [`without_views`]).
fn python_schema(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| field_without_views(f))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ))
}

/// `df` with its top-level string and binary views cast to what Python sees inside the plan:
/// the casts run beside the scan, a task per partition, instead of one batch at a time on the
/// thread that reads the stream. Nested views are left to [`to_python`]; so is a plan the
/// projection cannot be put on.
fn in_python_types(df: DataFrame) -> DataFrame {
    use datafusion::common::Column;
    use datafusion::logical_expr::{cast, Expr};
    let fields: Vec<_> = df.schema().iter().collect();
    if !fields
        .iter()
        .any(|(_, f)| matches!(f.data_type(), DataType::Utf8View | DataType::BinaryView))
    {
        return df;
    }
    let exprs: Vec<Expr> = fields
        .iter()
        .map(|(qualifier, f)| {
            let column = Expr::Column(Column::new(qualifier.cloned(), f.name()));
            match f.data_type() {
                DataType::Utf8View | DataType::BinaryView => {
                    cast(column, without_views(f.data_type()))
                        .alias_qualified(qualifier.cloned(), f.name())
                }
                _ => column,
            }
        })
        .collect();
    df.clone().select(exprs).unwrap_or(df)
}

/// `batch` in the schema Python sees.
fn to_python(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| match c.data_type() == f.data_type() {
            true => Ok(Arc::clone(c)),
            false => arrow::compute::cast(c, f.data_type()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

/// Batches a query's stream may run ahead of its reader: the engine decodes the next ones
/// while Python works on the last (a few MiB beside the pool's bound).
const READ_AHEAD: usize = 8;

/// `stream` polled by a task of its own into a channel of [`READ_AHEAD`] batches; dropping
/// the result stops the task (and the query). Must be called on the runtime.
fn read_ahead(mut stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
    let mut builder = RecordBatchReceiverStreamBuilder::new(stream.schema(), READ_AHEAD);
    let tx = builder.tx();
    builder.spawn(async move {
        while let Some(batch) = stream.next().await {
            if tx.send(batch).await.is_err() {
                break;
            }
        }
        Ok(())
    });
    builder.build()
}

/// The rows of a running query for a reader on another thread (the Arrow C stream's consumer):
/// each batch is waited for on the runtime.
struct Streamed {
    schema: SchemaRef,
    stream: SendableRecordBatchStream,
}

impl Iterator for Streamed {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = match tokio::runtime::Handle::try_current() {
            // Read on one of the runtime's blocking threads (a result registered as another
            // statement's input): block right here, without entering the runtime again.
            Ok(_) => futures::executor::block_on(self.stream.next()),
            // Waited for 100 ms at a time, checking for Ctrl-C in between (the reader is
            // pyarrow's C code: an interrupted read fails, naming the KeyboardInterrupt).
            Err(_) => loop {
                let step = RUNTIME.block_on(async {
                    tokio::time::timeout(Duration::from_millis(100), self.stream.next()).await
                });
                match step {
                    Ok(next) => break next,
                    Err(_elapsed) => {
                        if let Err(e) = Python::attach(|py| py.check_signals()) {
                            return Some(Err(ArrowError::ExternalError(
                                format!("interrupted: {e}").into(),
                            )));
                        }
                    }
                }
            },
        };
        next.map(|r| {
            r.map_err(|e| ArrowError::ExternalError(Box::new(e)))
                .and_then(|b| to_python(b, &self.schema))
        })
    }
}

impl RecordBatchReader for Streamed {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

#[pymethods]
impl QueryResult {
    /// The Arrow PyCapsule stream of the rows: a query is run now and streamed batch by batch
    /// (memory bounded by the session's pool, not the result's size).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // A requested schema is a hint (the interface lets producers ignore it): rows come in
        // the schema the statement gives them.
        let _ = requested_schema;
        let reader: Box<dyn RecordBatchReader + Send> = match &self.df {
            Some(df) => {
                let df = df.clone();
                let stream = wait(py, async move {
                    let stream = df.execute_stream().await?;
                    Ok::<_, DataFusionError>(read_ahead(stream))
                })?
                .map_err(to_py)?;
                Box::new(Streamed {
                    schema: Arc::clone(&self.schema),
                    stream,
                })
            }
            None => {
                let schema = Arc::clone(&self.schema);
                let batches = self
                    .batches
                    .clone()
                    .into_iter()
                    .map(move |b| to_python(b, &schema));
                Box::new(arrow::array::RecordBatchIterator::new(
                    batches,
                    Arc::clone(&self.schema),
                ))
            }
        };
        let stream = FFI_ArrowArrayStream::new(reader);
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }

    /// The plan of a query (`analyze`: run it and show what each operator did), as text.
    #[pyo3(signature = (analyze=false))]
    fn explain(&self, py: Python<'_>, analyze: bool) -> PyResult<String> {
        let Some(df) = &self.df else {
            return Err(PyValueError::new_err(
                "explain: this statement has run already (only a query's plan can be shown)",
            ));
        };
        let df = df.clone();
        let batches = wait(
            py,
            async move { df.explain(false, analyze)?.collect().await },
        )?
        .map_err(to_py)?;
        let mut out = String::new();
        for batch in &batches {
            let kinds = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::StringArray>();
            let plans = batch
                .column(1)
                .as_any()
                .downcast_ref::<arrow::array::StringArray>();
            let (Some(kinds), Some(plans)) = (kinds, plans) else {
                continue;
            };
            for i in 0..batch.num_rows() {
                out.push_str(kinds.value(i));
                out.push_str(":\n");
                out.push_str(plans.value(i));
                out.push('\n');
            }
        }
        Ok(out)
    }

    /// Whether the statement ran already (it changed something); a query runs when read.
    #[getter]
    fn executed(&self) -> bool {
        self.df.is_none()
    }

    /// The names of the result's columns.
    #[getter]
    fn column_names(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "Result(columns={:?}, executed={})",
            self.column_names(),
            self.df.is_none()
        )
    }
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add_class::<QueryResult>()?;
    m.add_class::<CatalogProviderExport>()?;
    m.add_class::<TableProviderExport>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DATAFUSION_MAJOR", datafusion_ffi::version())?;
    // Benchmarks check they time an optimized build.
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    m.add("BUILD", build)?;
    Ok(())
}
