//! The anti-join route of [`PositionalDeleteExec`](super::PositionalDeleteExec): for position
//! delete sets too large to hold as bitmaps.
//!
//! ```text
//!  delete files ─► (index of file_path among this partition's data files, pos)
//!                    ─► SortExec (spills)                              │ sorted stream
//!  data files of the partition, by path ─► each read whole, rows numbered ─► merge ─► live rows
//! ```
//! The merge walks both sides in (path, position) order, holding one batch of each. Paths are
//! replaced by their index in the partition's sorted path list before sorting: 12 bytes a row.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, UInt32Type};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::ColumnarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{col, is_not_null, BinaryExpr};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::metrics::Count;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;

use super::load::PositionDeleteFile;
use crate::physical_plan::parquet_files::with_recorded_size_reader;
use crate::storage::location::file_at;

/// Rows per batch of the delete side.
const DELETE_BATCH_ROWS: usize = 1024;

/// The sorted `(file_path, pos)` rows of `files` that name one of `paths` (recorded data file
/// locations), read and sorted under the task's memory pool.
pub(crate) fn sorted_deletes(
    url: &ObjectStoreUrl,
    files: &[PositionDeleteFile],
    paths: &[String],
    context: Arc<TaskContext>,
) -> Result<(Arc<dyn ExecutionPlan>, SendableRecordBatchStream)> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("file_path", DataType::Utf8, true),
        Field::new("pos", DataType::Int64, true),
    ]));
    let group: Vec<PartitionedFile> = files
        .iter()
        .map(|f| file_at(&f.location, f.size))
        .collect::<Result<_>>()?;
    let source = with_recorded_size_reader(
        ParquetSource::new(TableSchema::from(Arc::clone(&schema))),
        context.runtime_env().as_ref(),
        url,
    )?;
    let config = FileScanConfigBuilder::new(url.clone(), Arc::new(source))
        .with_file_groups(vec![FileGroup::new(group)])
        .with_batch_size(Some(DELETE_BATCH_ROWS))
        .build();
    let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
    // (path index, pos) for the rows naming one of `paths`.
    let index: Arc<dyn PhysicalExpr> = Arc::new(PathIndex {
        paths: Arc::new(paths.to_vec()),
        child: col("file_path", &schema)?,
    });
    let projected: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(
        vec![
            (index, "path_index".to_string()),
            (col("pos", &schema)?, "pos".to_string()),
        ],
        scan,
    )?);
    let indexed = projected.schema();
    // Rows whose file_path or pos is NULL delete nothing (see `exec::without_null_rows`).
    let keep = Arc::new(BinaryExpr::new(
        is_not_null(col("path_index", &indexed)?)?,
        Operator::And,
        is_not_null(col("pos", &indexed)?)?,
    ));
    let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(keep, projected)?);
    let ordering = LexOrdering::new(vec![
        PhysicalSortExpr::new_default(col("path_index", &indexed)?),
        PhysicalSortExpr::new_default(col("pos", &indexed)?),
    ])
    .ok_or_else(|| DataFusionError::Internal("empty delete ordering".into()))?;
    let sort: Arc<dyn ExecutionPlan> = Arc::new(SortExec::new(ordering, filtered));
    // Delete rows repeat long paths: small batches keep each sorted run well within a share of
    // a small pool.
    let config = context.session_config().clone();
    let batch_size = config.batch_size().min(DELETE_BATCH_ROWS);
    let context = crate::physical_plan::with_config(&context, config.with_batch_size(batch_size));
    let stream = sort.execute(0, context)?;
    Ok((sort, stream))
}

/// Reads a sorted `(file_path, pos)` stream forward, file by file.
pub(crate) struct DeleteCursor {
    stream: SendableRecordBatchStream,
    batch: Option<(UInt32Array, Int64Array)>,
    row: usize,
    done: bool,
}

impl DeleteCursor {
    pub(crate) fn new(stream: SendableRecordBatchStream) -> Self {
        Self {
            stream,
            batch: None,
            row: 0,
            done: false,
        }
    }

    /// The current row, loading the next batch when needed (`None` at the end).
    async fn current(&mut self) -> Result<Option<(u32, i64)>> {
        loop {
            if let Some((paths, pos)) = &self.batch {
                if self.row < pos.len() {
                    return Ok(Some((paths.value(self.row), pos.value(self.row))));
                }
            }
            if self.done {
                return Ok(None);
            }
            match self.stream.next().await {
                Some(batch) => {
                    let batch = batch?;
                    let paths = batch.column(0).as_primitive::<UInt32Type>().clone();
                    let pos = batch.column(1).as_primitive::<Int64Type>().clone();
                    if paths.null_count() > 0 || pos.null_count() > 0 {
                        return Err(DataFusionError::Execution(
                            "a position delete file has a NULL file_path or pos".into(),
                        ));
                    }
                    self.batch = Some((paths, pos));
                    self.row = 0;
                }
                None => {
                    self.done = true;
                    self.batch = None;
                }
            }
        }
    }

    /// The deleted positions of the data file with path index `path` below `end` (positions
    /// below earlier calls' `end` have been taken already; files before `path` are skipped).
    pub(crate) async fn take(&mut self, path: u32, end: u64) -> Result<Vec<u64>> {
        let mut out = vec![];
        while let Some((p, pos)) = self.current().await? {
            match p.cmp(&path) {
                std::cmp::Ordering::Less => self.row += 1,
                std::cmp::Ordering::Equal if (pos as u64) < end => {
                    if pos < 0 {
                        return Err(DataFusionError::Execution(format!(
                            "a position delete file deletes negative position {pos}"
                        )));
                    }
                    out.push(pos as u64);
                    self.row += 1;
                }
                _ => break,
            }
        }
        Ok(out)
    }
}

/// Removes the deleted rows of one batch of `path` whose first row is at position `start`
/// (batches of a file come in order): those of the sorted delete stream and of the file's
/// deletion vector `vector`. With `positions`, appends the surviving rows' positions.
pub(crate) async fn filter_batch(
    batch: RecordBatch,
    start: u64,
    path: Option<u32>,
    vector: Option<&roaring::RoaringTreemap>,
    cursor: &mut DeleteCursor,
    positions: Option<&Arc<Schema>>,
    removed: &Count,
) -> Result<RecordBatch> {
    let n = batch.num_rows() as u64;
    let mut deleted = match path {
        Some(path) => cursor.take(path, start + n).await?,
        None => vec![],
    };
    if let Some(vector) = vector {
        let mut iter = vector.iter();
        iter.advance_to(start);
        deleted.extend(iter.take_while(|p| *p < start + n));
    }
    let mut keep = vec![true; n as usize];
    let mut hits = 0;
    for p in deleted {
        if p >= start {
            let i = (p - start) as usize;
            if keep[i] {
                keep[i] = false;
                hits += 1;
            }
        }
    }
    removed.add(hits);
    let batch = match positions {
        Some(schema) => {
            let mut columns = batch.columns().to_vec();
            columns.push(Arc::new(Int64Array::from_iter_values(
                (start..start + n).map(|p| p as i64),
            )));
            RecordBatch::try_new(Arc::clone(schema), columns)?
        }
        None => batch,
    };
    if hits == 0 {
        return Ok(batch);
    }
    crate::physical_plan::keep_rows::keep_rows(batch, &BooleanBuffer::from(keep))
}

/// The index of a path in a sorted list of paths (NULL when it is not there).
#[derive(Debug)]
struct PathIndex {
    paths: Arc<Vec<String>>,
    child: Arc<dyn PhysicalExpr>,
}

impl PartialEq for PathIndex {
    fn eq(&self, other: &Self) -> bool {
        self.paths == other.paths && self.child.as_ref() == other.child.as_ref()
    }
}

impl Eq for PathIndex {}

impl std::hash::Hash for PathIndex {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.paths.hash(state);
        self.child.hash(state);
    }
}

impl std::fmt::Display for PathIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "path_index({}, {} paths)", self.child, self.paths.len())
    }
}

impl PhysicalExpr for PathIndex {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::UInt32)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(true)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let values = self.child.evaluate(batch)?.into_array(batch.num_rows())?;
        let strings = arrow::compute::cast(&values, &DataType::Utf8)?;
        let strings = strings.as_string::<i32>();
        let out: UInt32Array = strings
            .iter()
            .map(|v| {
                v.and_then(|v| {
                    self.paths
                        .binary_search_by(|p| p.as_str().cmp(v))
                        .ok()
                        .map(|i| i as u32)
                })
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.child]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let child = children
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal("path_index takes one child".into()))?;
        Ok(Arc::new(Self {
            paths: Arc::clone(&self.paths),
            child,
        }))
    }

    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}
