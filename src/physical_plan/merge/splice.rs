//! Copy-on-write `MERGE` by column splice, when its clauses only update (no DELETE) columns
//! that neither partition nor sort the table: the first pass computes the new values of the
//! updated columns where it decides the update ([`SpliceValues`] keeps them by file and
//! position), and the rewrite copies every other column of the touched files as it is
//! ([`crate::physical_plan::write::Splicer`]).
//!
//! ```text
//!  pass 1  source ⋈ target(ON and clause columns + updated columns, _file, _pos)
//!            ─► MergeRowsExec(splice): inserted rows ─► writer
//!                                      updated rows' new values ─► SpliceValues (by file)
//!  pass 2  per touched file: Splicer (copied chunks + updated columns encoded again)
//! ```
//! The values are reserved from the pool, within a quarter of a bounded one. When they do not
//! fit, or a touched file cannot be spliced (another writer's parquet schema), the statement
//! runs again the ordinary way (the rows read first are written by nothing that stays).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, sort_to_indices, take, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::TaskContext;

use crate::physical_plan::file_keys::FileKeys;
use crate::physical_plan::write::FileValues;

/// The most of a bounded pool the new values may take (within their fair share of it).
const POOL_SHARE_DIVISOR: usize = 8;

/// The new values of the updated columns, by data file, as pass 1 computes them.
#[derive(Debug)]
pub(crate) struct SpliceValues {
    /// Table columns updated (ascending).
    columns: Vec<usize>,
    /// `_pos`, then the updated columns.
    schema: SchemaRef,
    cap: usize,
    held: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    by_file: HashMap<String, Vec<RecordBatch>>,
    bytes: HashMap<String, usize>,
    /// The values did not fit: nothing is kept, the statement runs again without a splice.
    refused: bool,
    reservation: MemoryReservation,
}

impl Held {
    /// Gives up: nothing is kept, the statement runs again without a splice.
    fn refuse(&mut self) {
        self.refused = true;
        self.by_file = HashMap::new();
        self.bytes = HashMap::new();
        self.reservation.free();
    }
}

impl SpliceValues {
    /// A collector of `columns` (ascending indices into `table_schema`) reserving from
    /// `context`'s pool.
    pub(crate) fn new(
        columns: Vec<usize>,
        table_schema: &SchemaRef,
        context: &TaskContext,
    ) -> Self {
        let mut fields = vec![Field::new("_pos", DataType::UInt32, false)];
        fields.extend(columns.iter().map(|&c| table_schema.field(c).clone()));
        let pool = context.memory_pool();
        let cap = match pool.memory_limit() {
            MemoryLimit::Finite(limit) => limit / POOL_SHARE_DIVISOR,
            _ => usize::MAX,
        };
        Self {
            columns,
            schema: Arc::new(Schema::new(fields)),
            cap,
            held: Mutex::new(Held {
                by_file: HashMap::new(),
                bytes: HashMap::new(),
                refused: false,
                // A spiller in the pool's sense: held to a fair share beside the operators
                // that spill, its "spill" is to give up (the statement runs again without it).
                reservation: MemoryConsumer::new("MergeSpliceValues")
                    .with_can_spill(true)
                    .register(pool),
            }),
        }
    }

    /// Table columns whose new values are kept.
    pub(crate) fn columns(&self) -> &[usize] {
        &self.columns
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Held>> {
        self.held
            .lock()
            .map_err(|_| DataFusionError::Internal("MERGE splice values lock poisoned".into()))
    }

    /// Keeps the new values `values` (one array per column, as [`Self::columns`]) of the rows
    /// at (`files`, `positions`).
    pub(crate) fn add(
        &self,
        files: &ArrayRef,
        positions: &Int64Array,
        values: Vec<ArrayRef>,
    ) -> Result<()> {
        if self.lock()?.refused {
            return Ok(());
        }
        // Positions are kept in 32 bits (no data file holds 4G rows; one that did would not
        // be spliced).
        let Ok(positions) = arrow::compute::cast_with_options(
            positions,
            &DataType::UInt32,
            &arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            },
        ) else {
            self.lock()?.refuse();
            return Ok(());
        };
        let keys = FileKeys::of(files)?;
        let mut rows: Vec<Vec<u32>> = vec![vec![]; keys.names.len()];
        for (i, &k) in keys.keys.iter().enumerate() {
            rows[k].push(i as u32);
        }
        let mut columns: Vec<ArrayRef> = vec![positions];
        columns.extend(values);
        let all = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let mut parts = vec![];
        for (k, rows) in rows.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let part = take_record_batch(&all, &UInt32Array::from(rows))?;
            parts.push((keys.names.value(k).to_string(), part));
        }
        let mut held = self.lock()?;
        if held.refused {
            return Ok(());
        }
        let size: usize = parts.iter().map(|(_, b)| b.get_array_memory_size()).sum();
        let total = held.reservation.size() + size;
        if total > self.cap || held.reservation.try_grow(size).is_err() {
            held.refuse();
            return Ok(());
        }
        for (file, part) in parts {
            *held.bytes.entry(file.clone()).or_default() += part.get_array_memory_size();
            held.by_file.entry(file).or_default().push(part);
        }
        Ok(())
    }

    /// Whether the values did not fit (none are kept then).
    pub(crate) fn refused(&self) -> Result<bool> {
        Ok(self.lock()?.refused)
    }

    /// Takes `file`'s values, in position order (its memory goes with them).
    pub(crate) fn take(&self, file: &str) -> Result<FileValues> {
        let (batches, bytes) = {
            let mut held = self.lock()?;
            let batches = held.by_file.remove(file).unwrap_or_default();
            let bytes = held.bytes.remove(file).unwrap_or(0);
            (batches, bytes)
        };
        let all = concat_batches(&self.schema, &batches)?;
        drop(batches);
        let order = sort_to_indices(all.column(0), None, None)?;
        let positions = take(all.column(0), &order, None)?;
        let positions: Vec<u64> = positions
            .as_primitive::<UInt32Type>()
            .values()
            .iter()
            .map(|&p| u64::from(p))
            .collect();
        let columns = all.columns()[1..]
            .iter()
            .map(|c| take(c, &order, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let fields: Vec<_> = self.schema.fields()[1..].to_vec();
        let values = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        let held = self.lock()?;
        let bytes = bytes.min(held.reservation.size());
        held.reservation.shrink(bytes);
        Ok(FileValues { positions, values })
    }
}
