//! Where each column of a scan is: the table columns the reader reads (those asked for, then
//! the equality keys the query did not ask for), then the hidden per-file columns (the file's
//! location, its metadata columns, the lineage inputs, the equality-delete gate), then the
//! row position the positional-delete node appends.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};

use super::equality::{top_level_column, EqualityDeletes};
use super::lineage::{DATA_SEQ_COLUMN, FIRST_ROW_ID_COLUMN};
use super::request::{ScanRequest, FILE_COLUMN, GATE_COLUMN};
use crate::file_planning::PlannedFile;
use crate::physical_plan::equality_delete::FileGate;

/// The columns of one scan (see the module's text).
pub(super) struct ScanLayout {
    /// The table columns asked for.
    pub(super) requested: Vec<usize>,
    /// Those, then the equality keys not asked for (projected away at the end).
    pub(super) needed: Vec<usize>,
    /// For each equality-id set, in order, its keys' places in `needed`.
    pub(super) keys_of_set: Vec<Vec<usize>>,
    /// The lineage columns read: their place in `requested`, and whether it is `_row_id`.
    pub(super) lineage: Vec<(usize, bool)>,
    /// Whether rows are numbered (the position column is asked for, or lineage is read).
    pub(super) positions: bool,
    /// The hidden per-file columns, after the table's.
    pub(super) partition_columns: Vec<FieldRef>,
    /// The per-file metadata columns after the file column.
    pub(super) file_metadata_columns: usize,
    /// Where the lineage inputs (first row id, data sequence number) are in the reader's output.
    pub(super) lineage_at: usize,
    /// Where the equality-delete gate is in the reader's output.
    pub(super) gate_at: usize,
    /// The distinct gates of the files, and each one's index among them.
    pub(super) gates: Arc<[FileGate]>,
    gate_index: HashMap<FileGate, u32>,
    /// The reader's projection of the table's columns and the hidden ones.
    pub(super) projection: Option<Vec<usize>>,
    /// How many columns the table has (the hidden ones follow them in the file schema).
    pub(super) file_columns: usize,
}

impl ScanLayout {
    /// The layout of `req`'s scan of `files` under `eq`.
    pub(super) fn new(
        req: &ScanRequest<'_>,
        eq: &EqualityDeletes<'_>,
        files: &[PlannedFile],
    ) -> Result<Self> {
        let requested: Vec<usize> = match req.projection {
            Some(p) => p.clone(),
            None => (0..req.schema.fields().len()).collect(),
        };
        // Key columns the query did not ask for are read too, and projected away at the end.
        let mut needed = requested.clone();
        let mut keys_of_set: Vec<Vec<usize>> = vec![];
        for ids in eq.sets.keys() {
            let mut keys = vec![];
            for id in ids {
                let idx = top_level_column(req.read_schema, *id)?;
                let at = match needed.iter().position(|&n| n == idx) {
                    Some(at) => at,
                    None => {
                        needed.push(idx);
                        needed.len() - 1
                    }
                };
                keys.push(at);
            }
            keys_of_set.push(keys);
        }
        // The hidden per-file columns follow the table's columns: the file's location when
        // asked for, the file's first row id and data sequence number when a lineage column is
        // read, then the equality-delete gate columns when equality deletes apply.
        let file_columns = req.schema.fields().len();
        let lineage: Vec<(usize, bool)> = match req.row_lineage {
            true => requested
                .iter()
                .enumerate()
                .filter(|(_, &c)| c + 2 >= file_columns)
                .map(|(at, &c)| (at, c + 2 == file_columns))
                .collect(),
            false => vec![],
        };
        let positions = req.position_column || !lineage.is_empty();
        let mut partition_columns: Vec<FieldRef> = vec![];
        if req.file_column {
            partition_columns.push(Arc::new(Field::new(
                FILE_COLUMN,
                DataType::Dictionary(Box::new(DataType::UInt16), Box::new(DataType::Utf8)),
                false,
            )));
        }
        if let Some(m) = req.file_metadata {
            if !req.file_column {
                return Err(DataFusionError::Internal(
                    "the per-file metadata columns come with the file column".into(),
                ));
            }
            partition_columns.extend(m.fields());
        }
        let file_metadata_columns = partition_columns.len().saturating_sub(1);
        let lineage_at = needed.len() + partition_columns.len();
        if !lineage.is_empty() {
            partition_columns.push(Arc::new(Field::new(
                FIRST_ROW_ID_COLUMN,
                DataType::Int64,
                true,
            )));
            partition_columns.push(Arc::new(Field::new(DATA_SEQ_COLUMN, DataType::Int64, true)));
        }
        let gate_at = needed.len() + partition_columns.len();
        let mut gates: Vec<FileGate> = vec![];
        let mut gate_index: HashMap<FileGate, u32> = HashMap::new();
        if !eq.sets.is_empty() {
            partition_columns.push(Arc::new(Field::new(GATE_COLUMN, DataType::UInt32, false)));
            for f in files {
                let gate = eq.gate_of(f);
                gate_index.entry(gate).or_insert_with(|| {
                    gates.push(gate);
                    (gates.len() - 1) as u32
                });
            }
        }
        let projection: Option<Vec<usize>> = match partition_columns.is_empty() {
            true => req.projection.cloned(),
            false => {
                let mut projection = needed.clone();
                projection.extend(file_columns..file_columns + partition_columns.len());
                Some(projection)
            }
        };
        Ok(Self {
            requested,
            needed,
            keys_of_set,
            lineage,
            positions,
            partition_columns,
            file_metadata_columns,
            lineage_at,
            gate_at,
            gates: gates.into(),
            gate_index,
            projection,
            file_columns,
        })
    }

    /// The hidden per-file columns.
    pub(super) fn hidden_columns(&self) -> usize {
        self.partition_columns.len()
    }

    /// Where the position column is once appended (after the hidden per-file columns).
    pub(super) fn position_at(&self) -> usize {
        self.needed.len() + self.hidden_columns()
    }

    /// The values of `f`'s hidden per-file columns.
    pub(super) fn partition_values(
        &self,
        req: &ScanRequest<'_>,
        eq: &EqualityDeletes<'_>,
        f: &PlannedFile,
    ) -> Result<Vec<ScalarValue>> {
        let mut values = vec![];
        if req.file_column {
            values.push(ScalarValue::Dictionary(
                Box::new(DataType::UInt16),
                Box::new(ScalarValue::Utf8(Some(f.path.clone()))),
            ));
        }
        if let Some(m) = req.file_metadata {
            values.extend(m.values(f)?);
        }
        if !self.lineage.is_empty() {
            values.push(ScalarValue::Int64(f.first_row_id));
            values.push(ScalarValue::Int64(f.first_row_id.map(|_| f.data_seq)));
        }
        if !eq.sets.is_empty() {
            values.push(ScalarValue::UInt32(
                self.gate_index.get(&eq.gate_of(f)).copied(),
            ));
        }
        Ok(values)
    }
}
