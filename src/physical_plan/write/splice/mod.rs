//! Copy-on-write's splice: the rewrite of a data file whose changed rows stay where they are and
//! change only some columns (an `UPDATE SET c = ..` that neither deletes rows nor moves them to
//! another partition), or whose rows only go.
//!
//! The new file has the old file's row groups, row for row. The chunks of the columns that do
//! not change are copied byte for byte, statistics and all; the changed columns are decoded a
//! batch at a time, take their new values at the changed positions and are encoded again with
//! the table's writer properties. Float columns are always encoded again, changed or not: their
//! NaN counts (an Iceberg metric the parquet footer does not keep) come from the values.
//!
//! ```text
//!  old file  row group 0: [id][k][value][s]   row group 1: [id][k][value][s] ...
//!                           │  │    │     │
//!                           │  │    └ decode ─ new values at the changed positions ─ encode
//!                           ▼  ▼    ▼     ▼
//!  new file  row group 0: [id][k][value'][s]  ...   (copied chunks in place, offsets moved)
//! ```
//!
//! A copy-on-write `DELETE`, and a `MERGE` whose rewrite only leaves rows out, splice the same
//! way: a row group that keeps every row is copied chunk for chunk (float columns aside), one
//! that loses rows is decoded whole, filtered and encoded again, one that loses every row is
//! left out. Deleting a few rows from a large file then costs the row groups that held them.
//!
//! ```text
//!  old file  row group 0 (no row goes)   row group 1 (rows 7, 9 go)   row group 2 (all go)
//!                     │ copied                   │ decode, filter, encode       ✗
//!  new file  row group 0                 row group 1'
//! ```
//!
//! A file is spliced only when its parquet schema is, leaf column for leaf column, the one this
//! crate writes for the table's schema (names, field ids, physical and logical types): the copied
//! chunks are then what a rewrite would have encoded from the same values. Otherwise, or when a
//! row group's chunks do not fit in the memory the pool grants, [`Splicer::splice`] answers
//! `None` and changes nothing: the caller rewrites the file the ordinary way.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::{cast, prep_null_mask_filter};
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use iceberg::spec::Schema as IcebergSchema;
use iceberg::table::Table;
use object_store::ObjectStore;
use parquet::file::properties::WriterProperties;
use roaring::RoaringTreemap;

use super::column_metrics::holds_floats;
use super::locations::FileLocations;
use super::writer::writer_properties;
use super::WrittenFiles;
use crate::commit::NewFile;
use crate::file_planning::PlannedFile;
use crate::storage::location::LocationMap;
use group::{FileSplice, Group};

mod file;
mod group;
mod io;

/// Rows decoded at a time from a changed column.
const BATCH_ROWS: usize = 8192;

/// The new values of one data file's changed columns.
#[derive(Debug)]
pub(crate) struct FileValues {
    /// Positions in the file, strictly ascending.
    pub positions: Vec<u64>,
    /// One row per position: the new values, one column per [`Splicer`] spliced column.
    pub values: RecordBatch,
}

/// New values computed from each row's own columns, as an `UPDATE SET c = e WHERE cond` does.
#[derive(Debug)]
pub(crate) struct Computed {
    /// The table's columns (all nullable): what `condition` and the values are compiled over.
    /// Columns the splicer does not read are NULL in the rows they see.
    pub schema: SchemaRef,
    /// Which rows change (NULL: they do not).
    pub condition: Arc<dyn PhysicalExpr>,
    /// (table column, its new value), one per spliced column, in the splicer's order.
    pub values: Vec<(usize, Arc<dyn PhysicalExpr>)>,
}

/// Where a file's new values come from, or which of its rows go.
#[derive(Debug)]
pub(crate) enum NewValues {
    /// Given, by position (a `MERGE`'s first pass computed them).
    At(FileValues),
    /// Computed from the rows as they are read.
    Computed(Arc<Computed>),
    /// The rows at these positions go; the others stay as they are (a copy-on-write `MERGE`
    /// whose first pass found the rows it deletes or writes anew).
    Dropped(RoaringTreemap),
    /// The rows the condition selects go (a copy-on-write `DELETE`); `values` is empty.
    DroppedWhere(Arc<Computed>),
}

/// A file written by [`Splicer::splice`].
#[derive(Debug)]
pub(crate) struct Spliced {
    /// The new file, in the old one's partition; `None` when every row was dropped (then no
    /// file was written).
    pub file: Option<NewFile>,
    /// The rows that took new values, or that were dropped.
    pub spliced: u64,
    /// The row groups whose chunks were copied as they are (all but float columns'), not
    /// decoded and encoded again.
    pub groups_copied: usize,
}

/// Splices new values of some columns of a table into its data files (see the module's text).
pub(crate) struct Splicer {
    table: Table,
    schema: Arc<IcebergSchema>,
    /// The table's rows in Arrow, with field ids: the layout of the new files.
    arrow: SchemaRef,
    props: WriterProperties,
    /// Table columns that take new values.
    spliced: Vec<usize>,
    /// Table columns decoded and encoded again: the spliced ones and those holding floats.
    encoded: Vec<usize>,
    /// Table columns decoded: the encoded ones and those the new values are computed from.
    read: Vec<usize>,
    /// Table columns the new values or the dropping condition are computed from.
    inputs: Vec<usize>,
    store: Arc<dyn ObjectStore>,
    url: datafusion::execution::object_store::ObjectStoreUrl,
    locations: LocationMap,
    files: FileLocations,
    pool: Arc<dyn MemoryPool>,
}

impl Splicer {
    /// A splicer of `spliced` (table columns, ascending) into `table`'s files, also reading
    /// `inputs` (the columns computed values need), reading and reserving through `context`.
    pub(crate) fn new(
        table: &Table,
        locations: &LocationMap,
        spliced: Vec<usize>,
        inputs: &[usize],
        context: &TaskContext,
    ) -> Result<Self> {
        let metadata = table.metadata();
        let schema = metadata.current_schema().clone();
        let arrow: SchemaRef = Arc::new(crate::arrow58::iceberg_to_arrow(&schema)?);
        let encoded: Vec<usize> = (0..arrow.fields().len())
            .filter(|c| spliced.contains(c) || holds_floats(arrow.field(*c).data_type()))
            .collect();
        let mut read: Vec<usize> = encoded.iter().chain(inputs).copied().collect();
        read.sort();
        read.dedup();
        let mut inputs = inputs.to_vec();
        inputs.sort();
        inputs.dedup();
        let url = locations.store_url(metadata.location())?;
        let store = context.runtime_env().object_store(&url)?;
        Ok(Self {
            table: table.clone(),
            schema,
            arrow,
            props: writer_properties(metadata)?,
            spliced,
            encoded,
            read,
            inputs,
            store,
            url,
            locations: locations.clone(),
            files: FileLocations::new(metadata)?,
            pool: Arc::clone(context.memory_pool()),
        })
    }

    /// Writes `file` again with `values` spliced in (or its dropped rows left out); `None`
    /// when the file cannot be spliced (then nothing was written). The new file's location is
    /// recorded in `written` before it is created.
    pub(crate) async fn splice(
        &self,
        file: &PlannedFile,
        values: NewValues,
        written: &WrittenFiles,
    ) -> Result<Option<Spliced>> {
        let no_positions = || FileValues {
            positions: vec![],
            values: RecordBatch::new_empty(Arc::new(Schema::empty())),
        };
        let (values, computed, drops) = match values {
            NewValues::At(v) => {
                check_values(file, &v, self.spliced.len())?;
                (v, None, Drops::None)
            }
            NewValues::Computed(c) => (no_positions(), Some(c), Drops::None),
            NewValues::Dropped(p) => (no_positions(), None, Drops::At(p)),
            NewValues::DroppedWhere(c) => (no_positions(), None, Drops::Where(c)),
        };
        let Some((old, new)) = self.open(file).await? else {
            return Ok(None);
        };
        let footer = Arc::clone(&old.footer);
        let mut run = FileSplice {
            splicer: self,
            file,
            old,
            new,
            spliced: values.positions.len() as u64,
            values,
            computed,
            reservation: MemoryConsumer::new(format!("ColumnSplice[{}]", file.path))
                .register(&self.pool),
            written,
            next: 0,
            start: 0,
            nan_counts: HashMap::new(),
            groups_copied: 0,
        };
        let dropping = !matches!(drops, Drops::None);
        let mut dropped = match &drops {
            Drops::At(positions) => Some(positions.iter()),
            _ => None,
        }
        .into_iter()
        .flatten()
        .peekable();
        for (index, meta) in footer.row_groups().iter().enumerate() {
            let (start, rows) = (run.start, meta.num_rows() as u64);
            // The rows of this group that go, by their offset in it (ascending).
            let gone: Vec<u32> = match &drops {
                Drops::None => vec![],
                Drops::At(_) => std::iter::from_fn(|| dropped.next_if(|&p| p < start + rows))
                    .map(|p| (p - start) as u32)
                    .collect(),
                Drops::Where(c) => self.rows_where(&run.old, c, index).await?,
            };
            if dropping {
                run.spliced += gone.len() as u64;
            }
            let group = Group {
                index,
                meta,
                gone: &gone,
                dropping,
            };
            let every_row_goes = dropping && gone.len() as u64 == rows;
            if !every_row_goes && !run.write_group(&group).await? {
                return Ok(None);
            }
            run.start += rows;
        }
        check_consumed(&run, &drops)?;
        let (spliced, groups_copied) = (run.spliced, run.groups_copied);
        let file = match dropping && run.new.groups_written == 0 {
            // Every row went: no file takes this one's place.
            true => None,
            false => Some(NewFile {
                spec_id: file.spec_id,
                file: run.new.finish(self, file, written, run.nan_counts).await?,
            }),
        };
        Ok(Some(Spliced {
            file,
            spliced,
            groups_copied,
        }))
    }

    /// Which rows of `batch` (the table columns `read`) change, and the new values of the
    /// spliced columns for every row (in the writer's types).
    fn computed(
        &self,
        computed: &Computed,
        batch: &RecordBatch,
        read: &[usize],
    ) -> Result<(BooleanArray, Vec<ArrayRef>)> {
        let n = batch.num_rows();
        let mut columns = Vec::with_capacity(computed.schema.fields().len());
        for (c, field) in computed.schema.fields().iter().enumerate() {
            columns.push(match read.iter().position(|&r| r == c) {
                Some(k) if batch.column(k).data_type() == field.data_type() => {
                    Arc::clone(batch.column(k))
                }
                Some(k) => cast(batch.column(k), field.data_type())?,
                None => new_null_array(field.data_type(), n),
            });
        }
        let rows = RecordBatch::try_new(Arc::clone(&computed.schema), columns)?;
        let mask = computed.condition.evaluate(&rows)?.into_array(n)?;
        let mask = mask.as_boolean_opt().ok_or_else(|| {
            DataFusionError::Internal("an UPDATE condition is not boolean".into())
        })?;
        let mask = match mask.null_count() {
            0 => mask.clone(),
            _ => prep_null_mask_filter(mask),
        };
        let mut values = Vec::with_capacity(computed.values.len());
        for (c, value) in &computed.values {
            let field = self.arrow.field(*c);
            let mut array = value.evaluate(&rows)?.into_array(n)?;
            if array.data_type() != field.data_type() {
                array = cast(&array, field.data_type())?;
            }
            if !field.is_nullable() && array.null_count() > 0 {
                let nulls_taken = match array.logical_nulls() {
                    Some(nulls) => (0..n).any(|i| mask.value(i) && nulls.is_null(i)),
                    None => false,
                };
                if nulls_taken {
                    return Err(DataFusionError::Execution(format!(
                        "UPDATE would write NULL into required (non-nullable) column '{}'",
                        field.name()
                    )));
                }
            }
            values.push(array);
        }
        Ok((mask, values))
    }
}

/// The rows a splice leaves out.
enum Drops {
    /// None: the file keeps every row.
    None,
    /// The rows at these positions.
    At(RoaringTreemap),
    /// The rows the condition selects.
    Where(Arc<Computed>),
}

/// The values must be one row per position, positions strictly ascending.
fn check_values(file: &PlannedFile, values: &FileValues, columns: usize) -> Result<()> {
    let ascending = values.positions.windows(2).all(|w| w[0] < w[1]);
    if !ascending
        || values.values.num_rows() != values.positions.len()
        || values.values.num_columns() != columns
    {
        return Err(DataFusionError::Internal(format!(
            "the new values for {} are not one row per ascending position",
            file.path
        )));
    }
    Ok(())
}

/// Every new value and every dropped position must have met its row.
fn check_consumed(run: &FileSplice<'_>, drops: &Drops) -> Result<()> {
    let (file, start) = (&run.file.path, run.start);
    if run.next != run.values.positions.len() {
        return Err(DataFusionError::Execution(format!(
            "{} changed positions of data file {file} are past its {start} rows",
            run.values.positions.len() - run.next,
        )));
    }
    if let Drops::At(positions) = drops {
        if positions.len() != run.spliced {
            return Err(DataFusionError::Execution(format!(
                "{} dropped positions of data file {file} are past its {start} rows",
                positions.len() - run.spliced,
            )));
        }
    }
    Ok(())
}
