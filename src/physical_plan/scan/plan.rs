//! The physical plan of a scan of planned data files, with merge-on-read deletes applied.
//!
//! ```text
//!  no deletes:     DataSourceExec (parquet; projection, filters, limit pushed down)
//!
//!  with deletes:   ProjectionExec (back to the requested columns)
//!                    EqualityDeleteExec × one per distinct equality-id set
//!                      ├─ PositionalDeleteExec (row selections per data file; dense deletes
//!                      │    marked in a live column the first join drops them by)
//!                      │    DataSourceExec (requested + key columns, + _gate constant per file)
//!                      └─ DataSourceExec over the set's delete files (key…, delete_seq, scope)
//! ```
//! The hidden `_gate` column is a per-file constant (a DataFusion partition column): the index
//! of the file's data sequence number and partition scope in a table the joins hold, one
//! 4-byte integer per row, and it exists only when equality deletes apply. The last equality
//! join outputs the requested columns itself, so the rows it keeps are copied once, without
//! the hidden ones.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::Statistics;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::Result;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use iceberg::spec::DataFileFormat;

use super::constants::IdentityConstants;
use super::equality::{delete_scan, EqualityDeletes};
use super::layout::ScanLayout;
use super::lineage::{self, LineageInputs};
use super::request::ScanRequest;
use crate::file_planning::{group_files, FieldIdAdapterFactory, PlannedFile, ScanFiles};
use crate::physical_plan::equality_delete::{EqualityDeleteColumns, EqualityDeleteExec};
use crate::physical_plan::parquet_files::parquet_exec_with_dictionaries;
use crate::physical_plan::positional_delete::{
    FileDeletes, PositionDeleteFile, PositionalDeleteExec,
};
use crate::IcebergOptions;

/// [`plan_scan`] under an [`IcebergScanExec`](super::IcebergScanExec), for the scans
/// statements plan themselves (DELETE, UPDATE, MERGE, compaction): like a query's scan, it
/// keeps filters on float columns out of the parquet reader's pruning, which would lose NaN
/// rows a statement's condition selects.
pub(crate) async fn plan_statement_scan(
    state: &dyn Session,
    req: &ScanRequest<'_>,
    scan: &ScanFiles,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = plan_scan(state, req, scan).await?;
    let summary = super::ScanSummary {
        table: req.table.identifier().to_string(),
        snapshot_id: req.table.metadata().current_snapshot_id().unwrap_or(-1),
        total_files: scan.files.len(),
        scanned_files: scan.files.len(),
        delete_files: scan.delete_file_count(),
        predicate: None,
        streamed_planning: scan.streamed,
    };
    Ok(Arc::new(super::IcebergScanExec::new(plan, summary)))
}

/// The plan reading `files`, with their deletes applied.
pub(crate) async fn plan_scan(
    state: &dyn Session,
    req: &ScanRequest<'_>,
    scan: &ScanFiles,
) -> Result<Arc<dyn ExecutionPlan>> {
    let eq = EqualityDeletes::collect(&scan.equality_deletes);
    let layout = ScanLayout::new(req, &eq, &scan.files)?;
    let url = req.locations.store_url(req.table.metadata().location())?;
    crate::storage::register_store(state, req.stores, &url)?;
    let planner = ScanPlanner {
        state,
        req,
        scan,
        eq,
        layout,
        url,
        distinct: req
            .table
            .metadata()
            .current_snapshot_id()
            .map(|id| crate::file_planning::distinct_counts(req.table.metadata(), id))
            .unwrap_or_default(),
    };
    planner.plan().await
}

/// One scan's planning: what it reads, where each column is, and the deletes that apply.
struct ScanPlanner<'a, 'r> {
    state: &'a dyn Session,
    req: &'a ScanRequest<'r>,
    scan: &'a ScanFiles,
    eq: EqualityDeletes<'a>,
    layout: ScanLayout,
    url: ObjectStoreUrl,
    /// Distinct counts of columns by field id, from the table's statistics files.
    distinct: HashMap<i32, u64>,
}

impl ScanPlanner<'_, '_> {
    async fn plan(&self) -> Result<Arc<dyn ExecutionPlan>> {
        let (req, layout) = (self.req, &self.layout);
        // ORC data files are read by their own source (see `orc`), beside the parquet scan.
        let (orc_files, files): (Vec<PlannedFile>, Vec<PlannedFile>) = self
            .scan
            .files
            .iter()
            .cloned()
            .partition(|f| f.format == DataFileFormat::Orc);
        // Identity partition sources read as each file's partition value (see `constants`).
        let mut constants =
            IdentityConstants::new(req.table.metadata(), req.read_schema, req.schema);
        let mut decorate =
            |f: &PlannedFile, mut file: PartitionedFile| -> Result<PartitionedFile> {
                if !constants.is_empty() {
                    file.statistics = constants.statistics(f)?;
                }
                Ok(file.with_partition_values(layout.partition_values(req, &self.eq, f)?))
            };
        let target_partitions = self.state.config().target_partitions();
        let groups = group_files(
            &files,
            target_partitions,
            req.locations,
            &self.url,
            &mut decorate,
        )?;
        let orc_groups = match orc_files.is_empty() {
            true => vec![],
            false => group_files(
                &orc_files,
                target_partitions,
                req.locations,
                &self.url,
                &mut decorate,
            )?,
        };
        let table_schema = TableSchema::builder(Arc::clone(req.schema))
            .with_table_partition_cols(layout.partition_columns.clone())
            .build();
        let adapter =
            FieldIdAdapterFactory::new(req.read_schema, req.table.metadata().properties());
        let orc_plan = match orc_groups.is_empty() {
            true => None,
            false => Some(self.orc_scan(&table_schema, &orc_files, orc_groups, &adapter)?),
        };
        let plan = self.parquet_scan(table_schema, &files, groups, adapter)?;
        // Both read the same columns: parquet files' position deletes apply below the union.
        let with_orc = |plan: Arc<dyn ExecutionPlan>| -> Result<Arc<dyn ExecutionPlan>> {
            match &orc_plan {
                None => Ok(plan),
                Some(orc) if files.is_empty() => Ok(Arc::clone(orc)),
                Some(orc) => datafusion::physical_plan::union::UnionExec::try_new(vec![
                    plan,
                    Arc::clone(orc),
                ]),
            }
        };
        if !self.scan.has_deletes() && layout.hidden_columns() == 0 && !layout.positions {
            return with_orc(plan);
        }
        let plan = self.with_position_deletes(plan, &files, orc_plan.is_some())?;
        let plan = with_orc(plan)?;
        self.with_equality_deletes(plan).await
    }

    /// Statistics of a scan of `files` into `schema`, from the manifests: row counts (exact
    /// only without filters and deletes), and what they record about the columns (bounds, null
    /// counts) and the table's statistics files (distinct counts), for the planner's estimates:
    /// inexact, since bounds may be truncated and deletes remove rows.
    fn statistics(&self, schema: &SchemaRef, files: &[PlannedFile]) -> Statistics {
        let req = self.req;
        let exact = !(req.filtered || self.scan.has_deletes());
        let rows = files.iter().map(|f| f.record_count).sum::<u64>() as usize;
        // No total byte size: the files' sizes hold every column, compressed, and DataFusion's
        // join planning would take them for the projected rows' size; the columns' sizes below
        // are what it sizes parquet scans by.
        let mut statistics = Statistics::new_unknown(schema).with_num_rows(match exact {
            true => Precision::Exact(rows),
            false => Precision::Inexact(rows),
        });
        for (field, column) in schema
            .fields()
            .iter()
            .zip(statistics.column_statistics.iter_mut())
        {
            let Some(f) = req.read_schema.as_struct().field_by_name(field.name()) else {
                continue;
            };
            let iceberg::spec::Type::Primitive(ty) = f.field_type.as_ref() else {
                continue;
            };
            let value = |d: Option<&iceberg::spec::Datum>| {
                d.and_then(|d| crate::file_planning::literal::literal_scalar(ty, d.literal()))
                    .and_then(|v| match v.data_type() == *field.data_type() {
                        true => Some(v),
                        false => v.cast_to(field.data_type()).ok(),
                    })
                    .map(Precision::Inexact)
                    .unwrap_or(Precision::Absent)
            };
            if let Some(summary) = self.scan.columns.as_deref() {
                column.min_value = value(summary.lower(f.id));
                column.max_value = value(summary.upper(f.id));
                if let Some(n) = summary.nulls(f.id) {
                    column.null_count = Precision::Inexact(n as usize);
                }
                // As DataFusion sizes parquet columns: fixed-width values by their width,
                // others by what the files store.
                column.byte_size = match field.data_type().primitive_width() {
                    Some(width) => Precision::Inexact(width * rows),
                    None => summary
                        .stored_bytes(f.id)
                        .map_or(Precision::Absent, |n| Precision::Inexact(n as usize)),
                };
            }
            if let Some(n) = self.distinct.get(&f.id) {
                column.distinct_count = Precision::Inexact(*n as usize);
            }
        }
        statistics
    }

    /// A data file's position delete files, by its object store location.
    fn file_deletes(&self, f: &PlannedFile) -> Result<Option<(String, FileDeletes)>> {
        if f.position_deletes.is_empty() {
            return Ok(None);
        }
        let locations = self.req.locations;
        let delete_files = f
            .position_deletes
            .iter()
            .map(|d| {
                Ok(PositionDeleteFile::of(
                    d,
                    locations.object_path_in(&self.url, &d.path)?.to_string(),
                    &f.path,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some((
            locations.object_path_in(&self.url, &f.path)?.to_string(),
            FileDeletes {
                recorded_path: f.path.clone(),
                delete_files,
            },
        )))
    }

    /// The position deletes of `files`, by location.
    fn position_deletes(&self, files: &[PlannedFile]) -> Result<HashMap<String, FileDeletes>> {
        let mut deletes = HashMap::new();
        for f in files {
            if let Some((location, file_deletes)) = self.file_deletes(f)? {
                deletes.insert(location, file_deletes);
            }
        }
        Ok(deletes)
    }

    /// The scan of the parquet data files.
    fn parquet_scan(
        &self,
        table_schema: TableSchema,
        files: &[PlannedFile],
        groups: Vec<FileGroup>,
        adapter: FieldIdAdapterFactory,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let req = self.req;
        let statistics = self.statistics(table_schema.table_schema(), files);
        let config = FileScanConfigBuilder::new(
            self.url.clone(),
            Arc::new(ParquetSource::new(table_schema)),
        )
        .with_file_groups(groups)
        .with_statistics(statistics)
        .with_expr_adapter(Some(adapter.shared()))
        .with_projection_indices(self.layout.projection.clone())?
        // Deletes remove rows after the read: a limit cannot go to the reader then.
        .with_limit(req.limit.filter(|_| !self.scan.has_deletes()))
        .build();
        // Columns the scan gives as dictionaries are decoded as the files' own (see
        // [`with_dictionaries`]).
        let dictionaries: Arc<[i32]> = req
            .schema
            .fields()
            .iter()
            .zip(req.read_schema.as_struct().fields())
            .filter(|(f, _)| matches!(f.data_type(), DataType::Dictionary(..)))
            .map(|(_, field)| field.id)
            .collect();
        parquet_exec_with_dictionaries(self.state, config, req.filtered, dictionaries)
    }

    /// The scan of the ORC data files, giving the parquet scan's columns. Row positions are a
    /// column of the file (numbered as read), after the table's: the output puts them last,
    /// where the parquet side's position deletes put them.
    fn orc_scan(
        &self,
        table_schema: &TableSchema,
        files: &[PlannedFile],
        groups: Vec<FileGroup>,
        adapter: &FieldIdAdapterFactory,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        use super::super::orc::{OrcSource, POSITION_ID};
        let (req, layout) = (self.req, &self.layout);
        let mut field_ids: Vec<i32> = req
            .read_schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.id)
            .collect();
        let (orc_schema, orc_projection) = match layout.positions {
            false => (table_schema.clone(), layout.projection.clone()),
            true => {
                field_ids.push(POSITION_ID);
                let mut fields: Vec<FieldRef> = req.schema.fields().iter().cloned().collect();
                fields.push(Arc::new(Field::new(
                    crate::physical_plan::positional_delete::POSITION_COLUMN,
                    DataType::Int64,
                    false,
                )));
                let schema = TableSchema::builder(Arc::new(arrow::datatypes::Schema::new(fields)))
                    .with_table_partition_cols(table_schema.table_partition_cols().clone())
                    .build();
                let file_columns = layout.file_columns;
                let mut p = layout.needed.clone();
                p.extend(file_columns + 1..file_columns + 1 + layout.hidden_columns());
                p.push(file_columns);
                (schema, Some(p))
            }
        };
        let statistics = self.statistics(orc_schema.table_schema(), files);
        let source = OrcSource::new(
            orc_schema,
            field_ids.into(),
            self.position_deletes(files)?,
            Arc::new(adapter.clone()),
        );
        let config = FileScanConfigBuilder::new(self.url.clone(), Arc::new(source))
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_projection_indices(orc_projection)?
            .with_limit(req.limit.filter(|_| !self.scan.has_deletes()))
            .build();
        Ok(datafusion::datasource::source::DataSourceExec::from_data_source(config))
    }

    /// `plan` (the parquet scan) with the position deletes of `files` applied, numbering rows
    /// when positions are asked for. Under equality deletes, the position-deleted rows of
    /// densely deleted files are marked rather than dropped: the first join drops them with its
    /// own, copying the rows once.
    fn with_position_deletes(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        files: &[PlannedFile],
        with_orc: bool,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let positional = self.position_deletes(files)?;
        let threshold =
            IcebergOptions::from_config(self.state.config_options()).position_delete_join_threshold;
        if self.layout.positions {
            return Ok(Arc::new(
                PositionalDeleteExec::try_new(plan, positional)?
                    .with_join_threshold(threshold)
                    .with_positions()?,
            ));
        }
        if positional.is_empty() {
            return Ok(plan);
        }
        let node = PositionalDeleteExec::try_new(plan, positional)?.with_join_threshold(threshold);
        Ok(Arc::new(match self.live_at(with_orc) {
            None => node,
            // Appended after the scan's columns, as the position column would be.
            Some(_) => node.with_live_column(),
        }))
    }

    /// Where the live column of marked position deletes is, when rows are marked (see
    /// [`Self::with_position_deletes`]).
    fn live_at(&self, with_orc: bool) -> Option<usize> {
        let marked = !self.layout.positions
            && !self.eq.sets.is_empty()
            && !with_orc
            && self
                .scan
                .files
                .iter()
                .any(|f| !f.position_deletes.is_empty());
        marked.then(|| self.layout.position_at())
    }

    /// `plan` with the equality deletes applied, one join per equality-id set, and projected
    /// back to the requested columns (and the file, position and lineage columns asked for).
    async fn with_equality_deletes(
        &self,
        mut plan: Arc<dyn ExecutionPlan>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (req, layout) = (self.req, &self.layout);
        let with_orc = self
            .scan
            .files
            .iter()
            .any(|f| f.format == DataFileFormat::Orc);
        let (columns, lineage_inputs) = self.output_columns();
        let mut output = Some(columns);
        let sets = self.eq.sets.len();
        let options = IcebergOptions::from_config(self.state.config_options());
        for (n, ((ids, deletes), keys)) in self.eq.sets.iter().zip(&layout.keys_of_set).enumerate()
        {
            let build = delete_scan(self.state, req, ids, deletes, &self.eq).await?;
            let columns = EqualityDeleteColumns {
                keys: keys.clone(),
                gate: layout.gate_at,
                gates: Arc::clone(&layout.gates),
                live: self.live_at(with_orc),
            };
            let join = EqualityDeleteExec::try_new(
                plan,
                build,
                columns,
                ids.clone(),
                options.equality_delete_fanout,
            )?;
            // The last join outputs the requested columns.
            plan = Arc::new(match output.take_if(|_| n + 1 == sets) {
                Some(output) => join.with_projection(output)?,
                None => join,
            });
        }
        if let Some(output) = output.filter(|o| {
            // Unless it is the plan's own columns in order.
            plan.schema().fields().len() != o.len() || o.iter().enumerate().any(|(i, &c)| i != c)
        }) {
            plan = project(plan, output)?;
        }
        if let Some(inputs) = lineage_inputs {
            plan = with_lineage_values(plan, &layout.lineage, &inputs)?;
        }
        Ok(plan)
    }

    /// The columns the scan gives, by their place after the deletes: the requested ones, the
    /// file column (and its metadata columns) and the position column when asked for, then
    /// what the lineage columns are computed from.
    fn output_columns(&self) -> (Vec<usize>, Option<LineageInputs>) {
        let (req, layout) = (self.req, &self.layout);
        let needed = layout.needed.len();
        let mut columns: Vec<usize> = (0..layout.requested.len()).collect();
        if req.file_column {
            columns.push(needed);
            columns.extend((1..=layout.file_metadata_columns).map(|i| needed + i));
        }
        if req.position_column {
            // Appended after the scan's columns (the hidden per-file ones included).
            columns.push(layout.position_at());
        }
        let lineage_inputs = (!layout.lineage.is_empty()).then(|| {
            let at = columns.len();
            columns.extend([layout.lineage_at, layout.lineage_at + 1]);
            // The position column once, wherever it already is.
            let pos = match req.position_column {
                true => at - 1,
                false => {
                    columns.push(layout.position_at());
                    at + 2
                }
            };
            LineageInputs {
                first_row_id: at,
                data_seq: at + 1,
                pos,
            }
        });
        (columns, lineage_inputs)
    }
}

/// `plan`'s columns `output`, in that order.
fn project(plan: Arc<dyn ExecutionPlan>, output: Vec<usize>) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = output
        .into_iter()
        .map(|i| {
            let name = schema.field(i).name().clone();
            (
                Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
                name,
            )
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}

/// `plan` (requested columns, then the file and position columns when asked for, then the
/// [`LineageInputs`]) with the lineage columns among the requested ones computed, and the inputs
/// dropped.
fn with_lineage_values(
    plan: Arc<dyn ExecutionPlan>,
    lineage: &[(usize, bool)],
    inputs: &LineageInputs,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let exprs = (0..inputs.first_row_id)
        .map(|i| {
            let name = schema.field(i).name().clone();
            let expr = match lineage.iter().find(|(at, _)| *at == i) {
                Some((_, true)) => lineage::row_id_expr(i, &name, inputs)?,
                Some((_, false)) => lineage::last_updated_expr(i, &name, inputs)?,
                None => Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
            };
            Ok((expr, name))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}
