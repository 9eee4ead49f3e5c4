//! [`MergeRowsExec`]: applies a `MERGE`'s compiled clauses to the rows of its join. The first
//! clause whose kind and condition fit a row decides what happens to it; out come the new rows
//! (updated and inserted, in the table's schema), and the `(_file, _pos)` of every target row
//! updated or deleted go to the shared [`MergePositions`].

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder, RecordBatch,
};
use arrow::buffer::BooleanBuffer;
use arrow::compute::kernels::boolean::{and, and_not};
use arrow::compute::{cast, concat_batches, filter_record_batch};
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    apply_expression_roots, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;

use super::clauses::{Clause, ClauseAction, ClauseKind, RowLayout};
use super::positions::{Change, FilePositions, MergePositions};
use super::splice::SpliceValues;
use crate::physical_plan::baseline::Baseline;
use crate::physical_plan::scan::lineage::LAST_UPDATED_SEQUENCE_NUMBER;
use crate::physical_plan::single_child;

/// Applies the compiled clauses to the join rows (its child): outputs the new rows, and records
/// the positions of the target rows they update or delete in the shared [`MergePositions`]
/// (which also errors on a target row matched twice).
#[derive(Debug)]
pub(crate) struct MergeRowsExec {
    input: Arc<dyn ExecutionPlan>,
    clauses: Arc<[Clause]>,
    layout: Arc<RowLayout>,
    table_schema: SchemaRef,
    positions: Arc<MergePositions>,
    mode: RowsMode,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

/// What [`MergeRowsExec`] makes of the join rows.
#[derive(Debug, Clone)]
pub(crate) enum RowsMode {
    /// The new rows (updated and inserted); the changed positions are recorded.
    NewRows,
    /// Copy-on-write's narrow first pass: positions recorded, only inserted rows out (the
    /// updated rows' new versions come in the rewrite).
    Decide,
    /// Copy-on-write's rewrite: the join rows are the rows pass 1 updated, each with its
    /// source row. Out come their new versions, counted in the given counter.
    Rewrite(Arc<std::sync::atomic::AtomicU64>),
    /// Copy-on-write by column splice: positions recorded, only inserted rows out; the new
    /// values of the updated columns go to the collector.
    Splice(Arc<SpliceValues>),
}

impl MergeRowsExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        clauses: Arc<[Clause]>,
        layout: Arc<RowLayout>,
        table_schema: SchemaRef,
        positions: Arc<MergePositions>,
    ) -> Self {
        let properties = Arc::new(
            input
                .properties()
                .as_ref()
                .clone()
                .with_eq_properties(EquivalenceProperties::new(Arc::clone(&table_schema))),
        );
        Self {
            input,
            clauses,
            layout,
            table_schema,
            positions,
            mode: RowsMode::NewRows,
            metrics: ExecutionPlanMetricsSet::new(),
            properties,
        }
    }

    pub(crate) fn with_mode(mut self, mode: RowsMode) -> Self {
        self.mode = mode;
        self
    }
}

/// What the plan codec carries of the node.
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
impl MergeRowsExec {
    pub(crate) fn clauses(&self) -> &Arc<[Clause]> {
        &self.clauses
    }

    pub(crate) fn layout(&self) -> &Arc<RowLayout> {
        &self.layout
    }

    pub(crate) fn table_schema(&self) -> &SchemaRef {
        &self.table_schema
    }

    pub(crate) fn mode(&self) -> &RowsMode {
        &self.mode
    }

    pub(crate) fn positions(&self) -> &Arc<MergePositions> {
        &self.positions
    }
}

impl DisplayAs for MergeRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let clauses: Vec<&str> = self.clauses.iter().map(|c| c.text.as_str()).collect();
        let mode = match self.mode {
            RowsMode::NewRows => "",
            RowsMode::Decide => "decide, ",
            RowsMode::Rewrite(_) => "rewrite, ",
            RowsMode::Splice(_) => "splice, ",
        };
        write!(f, "MergeRowsExec: {mode}[{}]", clauses.join("; "))
    }
}

impl ExecutionPlan for MergeRowsExec {
    fn name(&self) -> &str {
        "MergeRowsExec"
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let mut exprs: Vec<&Arc<dyn PhysicalExpr>> = vec![];
        for c in self.clauses.iter() {
            exprs.extend(c.predicate.iter());
            match &c.action {
                ClauseAction::Update(a) => exprs.extend(a.iter().map(|(_, e)| e)),
                ClauseAction::Insert(v) => exprs.extend(v.iter().flatten()),
                ClauseAction::Delete => {}
            }
        }
        apply_expression_roots(exprs, f)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::LowerEqual
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(
            Self::new(
                single_child("MergeRowsExec", children)?,
                Arc::clone(&self.clauses),
                Arc::clone(&self.layout),
                Arc::clone(&self.table_schema),
                Arc::clone(&self.positions),
            )
            .with_mode(self.mode.clone()),
        ))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let baseline = Baseline::new(&self.metrics, partition);
        let input = baseline.input(self.input.execute(partition, context)?);
        let counter =
            |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, partition);
        let apply = Apply {
            clauses: Arc::clone(&self.clauses),
            layout: Arc::clone(&self.layout),
            table_schema: Arc::clone(&self.table_schema),
            positions: Arc::clone(&self.positions),
            mode: self.mode.clone(),
            cardinality: self.clauses.iter().any(|c| c.kind == ClauseKind::Matched),
            rows_read: counter("join_rows"),
            rows_matched: counter("rows_matched"),
        };
        let stream = input
            .map(move |batch| apply.batch(&batch?))
            .filter_map(|r| async move {
                match r {
                    Ok(Some(b)) => Some(Ok(b)),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                }
            });
        Ok(baseline.output(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.table_schema),
            stream,
        ))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One partition's application of the clauses.
struct Apply {
    clauses: Arc<[Clause]>,
    layout: Arc<RowLayout>,
    table_schema: SchemaRef,
    positions: Arc<MergePositions>,
    mode: RowsMode,
    /// Whether a target row matched twice is an error (the statement has WHEN MATCHED
    /// clauses).
    cardinality: bool,
    rows_read: datafusion::physical_plan::metrics::Count,
    rows_matched: datafusion::physical_plan::metrics::Count,
}

impl Apply {
    fn batch(&self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = batch.num_rows();
        self.rows_read.add(n);
        if n == 0 {
            return Ok(None);
        }
        if let RowsMode::Rewrite(updated) = &self.mode {
            return self.rewritten(batch, updated);
        }
        let layout = &self.layout;
        let has_source = present(batch.column(layout.source_marker()));
        let has_target = present(batch.column(layout.file()));
        let matched = and(&has_source, &has_target)?;
        let source_only = and_not(&has_source, &has_target)?;
        let target_only = and_not(&has_target, &has_source)?;
        if matched.true_count() > 0 {
            self.rows_matched.add(matched.true_count());
            if self.cardinality {
                let rows = filter_record_batch(batch, &matched)?;
                self.positions.matched(&file_positions(&rows, layout)?)?;
            }
        }
        let mut undecided = BooleanArray::from(vec![true; n]);
        let mut out = vec![];
        for clause in self.clauses.iter() {
            let kind = match clause.kind {
                ClauseKind::Matched => &matched,
                ClauseKind::NotMatchedByTarget => &source_only,
                ClauseKind::NotMatchedBySource => &target_only,
            };
            let candidates = and(kind, &undecided)?;
            if candidates.true_count() == 0 {
                continue;
            }
            let fires = match &clause.predicate {
                None => candidates,
                Some(p) => selected_by(batch, &candidates, p)?,
            };
            if fires.true_count() == 0 {
                continue;
            }
            undecided = and_not(&undecided, &fires)?;
            let rows = filter_record_batch(batch, &fires)?;
            match &clause.action {
                ClauseAction::Update(assignments) => {
                    self.positions
                        .changed(&file_positions(&rows, layout)?, Change::Update)?;
                    match &self.mode {
                        RowsMode::NewRows => out.push(self.updated(&rows, assignments)?),
                        RowsMode::Splice(values) => {
                            let new = self.spliced(&rows, assignments, values.columns())?;
                            let positions = rows.column(layout.pos()).as_primitive::<Int64Type>();
                            values.add(rows.column(layout.file()), positions, new)?;
                        }
                        RowsMode::Decide | RowsMode::Rewrite(_) => {}
                    }
                }
                ClauseAction::Delete => {
                    self.positions
                        .changed(&file_positions(&rows, layout)?, Change::Delete)?;
                }
                ClauseAction::Insert(values) => {
                    self.positions.inserted(rows.num_rows() as u64);
                    out.push(self.inserted(&rows, values)?);
                }
            }
        }
        match out.len() {
            0 => Ok(None),
            1 => Ok(out.pop()),
            _ => Ok(Some(concat_batches(&self.table_schema, &out)?)),
        }
    }

    /// Copy-on-write's rewrite of one batch of join rows (see [`RowsMode::Rewrite`]): every
    /// row is matched, and the first clause to fire on it must be an UPDATE (as in pass 1).
    fn rewritten(
        &self,
        batch: &RecordBatch,
        updated: &std::sync::atomic::AtomicU64,
    ) -> Result<Option<RecordBatch>> {
        let changed_decision = || {
            DataFusionError::Execution(
                "MERGE came to a different decision for a row in its rewrite than in its first \
                 pass; nothing was changed"
                    .into(),
            )
        };
        let mut undecided = present(batch.column(self.layout.source_marker()));
        if undecided.true_count() != batch.num_rows() {
            return Err(changed_decision());
        }
        let mut out = vec![];
        for clause in self.clauses.iter() {
            if clause.kind != ClauseKind::Matched || undecided.true_count() == 0 {
                continue;
            }
            let fires = match &clause.predicate {
                None => undecided.clone(),
                Some(p) => selected_by(batch, &undecided, p)?,
            };
            if fires.true_count() == 0 {
                continue;
            }
            let ClauseAction::Update(assignments) = &clause.action else {
                return Err(changed_decision());
            };
            undecided = and_not(&undecided, &fires)?;
            let rows = filter_record_batch(batch, &fires)?;
            updated.fetch_add(rows.num_rows() as u64, std::sync::atomic::Ordering::Relaxed);
            out.push(self.updated(&rows, assignments)?);
        }
        if undecided.true_count() > 0 {
            return Err(changed_decision());
        }
        match out.len() {
            0 => Ok(None),
            1 => Ok(out.pop()),
            _ => Ok(Some(concat_batches(&self.table_schema, &out)?)),
        }
    }

    /// The new versions of the target rows in `rows`.
    fn updated(
        &self,
        rows: &RecordBatch,
        assignments: &[(usize, Arc<dyn PhysicalExpr>)],
    ) -> Result<RecordBatch> {
        let mut columns = vec![];
        for c in 0..self.table_schema.fields().len() {
            let at = self.layout.target_column(c).ok_or_else(|| {
                DataFusionError::Internal(format!("MERGE UPDATE did not read column {c}"))
            })?;
            columns.push(Arc::clone(rows.column(at)));
        }
        for (c, value) in assignments {
            columns[*c] = value.evaluate(rows)?.into_array(rows.num_rows())?;
        }
        // A changed row keeps its id and takes the new commit's sequence number.
        if let Ok(seq) = self.table_schema.index_of(LAST_UPDATED_SEQUENCE_NUMBER) {
            columns[seq] = new_null_array(&DataType::Int64, rows.num_rows());
        }
        self.output(columns, "UPDATE")
    }

    /// The new values of table columns `columns` of the target rows in `rows`: the clause's
    /// value where it assigns one, the row's own elsewhere.
    fn spliced(
        &self,
        rows: &RecordBatch,
        assignments: &[(usize, Arc<dyn PhysicalExpr>)],
        columns: &[usize],
    ) -> Result<Vec<ArrayRef>> {
        let mut out = Vec::with_capacity(columns.len());
        for &c in columns {
            let field = self.table_schema.field(c);
            let array = match assignments.iter().find(|(a, _)| *a == c) {
                Some((_, value)) => value.evaluate(rows)?.into_array(rows.num_rows())?,
                None => {
                    let at = self.layout.target_column(c).ok_or_else(|| {
                        DataFusionError::Internal(format!("MERGE UPDATE did not read column {c}"))
                    })?;
                    Arc::clone(rows.column(at))
                }
            };
            if !field.is_nullable() && array.null_count() > 0 {
                return Err(DataFusionError::Execution(format!(
                    "MERGE UPDATE would write NULL into required column '{}'; nothing was \
                     changed",
                    field.name()
                )));
            }
            out.push(match array.data_type() == field.data_type() {
                true => array,
                false => cast(&array, field.data_type())?,
            });
        }
        Ok(out)
    }

    /// The rows an INSERT clause makes of the source rows in `rows`.
    fn inserted(
        &self,
        rows: &RecordBatch,
        values: &[Option<Arc<dyn PhysicalExpr>>],
    ) -> Result<RecordBatch> {
        // Columns after the statement's (the row lineage ones) are NULL: new ids are inherited.
        let columns = self
            .table_schema
            .fields()
            .iter()
            .enumerate()
            .map(|(c, field)| match values.get(c).and_then(Option::as_ref) {
                Some(v) => v.evaluate(rows)?.into_array(rows.num_rows()),
                None => Ok(new_null_array(field.data_type(), rows.num_rows())),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        self.output(columns, "INSERT")
    }

    fn output(&self, columns: Vec<ArrayRef>, action: &str) -> Result<RecordBatch> {
        let mut cast_columns = vec![];
        for (array, field) in columns.into_iter().zip(self.table_schema.fields()) {
            if !field.is_nullable() && array.null_count() > 0 {
                return Err(DataFusionError::Execution(format!(
                    "MERGE {action} would write NULL into required column '{}'; nothing was \
                     changed",
                    field.name()
                )));
            }
            cast_columns.push(match array.data_type() == field.data_type() {
                true => array,
                false => cast(&array, field.data_type())?,
            });
        }
        Ok(RecordBatch::try_new(
            Arc::clone(&self.table_schema),
            cast_columns,
        )?)
    }
}

/// The rows among `candidates` for which `predicate` is TRUE, evaluated on those rows only (a
/// condition meant for matched rows never sees the NULLs of unmatched ones).
fn selected_by(
    batch: &RecordBatch,
    candidates: &BooleanArray,
    predicate: &Arc<dyn PhysicalExpr>,
) -> Result<BooleanArray> {
    let rows = filter_record_batch(batch, candidates)?;
    let value = predicate.evaluate(&rows)?.into_array(rows.num_rows())?;
    let value = value
        .as_boolean_opt()
        .ok_or_else(|| DataFusionError::Internal("MERGE condition is not boolean".into()))?;
    let mut bits = BooleanBufferBuilder::new(batch.num_rows());
    bits.append_n(batch.num_rows(), false);
    let mut k = 0;
    for i in 0..batch.num_rows() {
        if candidates.value(i) && candidates.is_valid(i) {
            if value.is_valid(k) && value.value(k) {
                bits.set_bit(i, true);
            }
            k += 1;
        }
    }
    Ok(BooleanArray::new(bits.finish(), None))
}

/// Which rows of `array` are not NULL, as a mask without offset. (Arrow's `is_not_null` hands
/// back the array's own null buffer, at its offset; the join's output can carry buffers at
/// offsets that arrow 59's `and_not` then reads out of bounds.)
fn present(array: &ArrayRef) -> BooleanArray {
    let n = array.len();
    match array.logical_nulls() {
        None => BooleanArray::new(BooleanBuffer::new_set(n), None),
        Some(nulls) => {
            BooleanArray::new(BooleanBuffer::collect_bool(n, |i| nulls.is_valid(i)), None)
        }
    }
}

/// The (file, position) of each row of `rows` (all with a target row).
fn file_positions(rows: &RecordBatch, layout: &RowLayout) -> Result<FilePositions> {
    let positions = rows
        .column(layout.pos())
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| DataFusionError::Internal("position column is not Int64".into()))?;
    FilePositions::of(rows.column(layout.file()), positions)
}
