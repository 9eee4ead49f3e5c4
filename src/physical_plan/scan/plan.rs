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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{ScalarValue, Statistics};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use iceberg::spec::{DataContentType, DataFileFormat, Struct};

use crate::file_planning::PlannedFile;
use iceberg::table::Table;

use super::constants::IdentityConstants;
use super::lineage::{self, LineageInputs, DATA_SEQ_COLUMN, FIRST_ROW_ID_COLUMN};
use crate::error::IcebergResultExt;
use crate::file_planning::{group_files, DeleteFileRef, FieldIdAdapterFactory, ScanFiles};
use crate::physical_plan::equality_delete::{
    EqualityDeleteColumns, EqualityDeleteExec, FileGate, GLOBAL_SCOPE, NO_SCOPE,
};
use crate::physical_plan::parquet_files::{parquet_exec, parquet_exec_with_dictionaries};
use crate::physical_plan::positional_delete::{
    FileDeletes, PositionDeleteFile, PositionalDeleteExec,
};
use crate::storage::location::{file_at, LocationMap};
use crate::IcebergOptions;

/// Hidden per-file column: the index of the data file's [`FileGate`] (sequence number and
/// partition scope) for the equality-delete joins.
const GATE_COLUMN: &str = "__iceberg_gate";
/// Per-file column of equality delete files: the partition scope they apply in.
const SCOPE_COLUMN: &str = "__iceberg_delete_scope";
/// Per-file column of equality delete files: their sequence number.
const DELETE_SEQ_COLUMN: &str = "__iceberg_delete_seq";

/// Whether `config` is the scan of an equality delete's rows (the build side of the join,
/// which carries the delete sequence number and scope of each row as per-file columns).
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
pub(crate) fn is_delete_rows_scan(
    config: &datafusion::datasource::physical_plan::FileScanConfig,
) -> bool {
    let names: Vec<&str> = config
        .table_partition_cols()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    names == [DELETE_SEQ_COLUMN, SCOPE_COLUMN]
}
/// Hidden per-file column: the data file's location as recorded in its manifest.
pub(crate) const FILE_COLUMN: &str = "__iceberg_file";

/// What a scan reads.
pub(crate) struct ScanRequest<'a> {
    pub table: &'a Table,
    /// The schema rows are read into (the snapshot's or the table's current one).
    pub read_schema: &'a iceberg::spec::Schema,
    /// Its Arrow form.
    pub schema: &'a SchemaRef,
    pub projection: Option<&'a Vec<usize>>,
    /// Whether the query filters rows (then row counts are upper bounds).
    pub filtered: bool,
    pub limit: Option<usize>,
    pub locations: &'a LocationMap,
    /// The object stores the files are read from.
    pub stores: &'a Arc<crate::storage::ObjectStores>,
    /// Whether the output ends with [`FILE_COLUMN`] (dictionary-encoded, one value per file).
    pub file_column: bool,
    /// Whether the output ends with [`POSITION_COLUMN`], each row's position in its file (after
    /// the file column when both are asked for). No filter reaches the reader then.
    pub position_column: bool,
    /// Whether the last two columns of `schema` and `read_schema` are `_row_id` and
    /// `_last_updated_sequence_number` (see [`super::lineage`]): read from the files where
    /// they hold them, inherited otherwise. No filter reaches the reader when either is read.
    pub row_lineage: bool,
    /// The per-file metadata columns (`_spec_id`, `_partition`) to give right after
    /// [`FILE_COLUMN`], which must be asked for too.
    pub file_metadata: Option<&'a super::metadata::FileMetadataColumns>,
}

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
    let files = &scan.files;
    let has_deletes = scan.has_deletes();
    // Manifest row counts are exact only without filters and without deletes.
    let exact = !(req.filtered || has_deletes);
    let distinct = req
        .table
        .metadata()
        .current_snapshot_id()
        .map(|id| crate::file_planning::distinct_counts(req.table.metadata(), id))
        .unwrap_or_default();
    let statistics_of = |schema: &SchemaRef, files: &[PlannedFile]| {
        let rows = files.iter().map(|f| f.record_count).sum::<u64>() as usize;
        // No total byte size: the files' sizes hold every column, compressed, and DataFusion's
        // join planning would take them for the projected rows' size; the columns' sizes below
        // are what it sizes parquet scans by.
        let mut statistics = Statistics::new_unknown(schema).with_num_rows(match exact {
            true => Precision::Exact(rows),
            false => Precision::Inexact(rows),
        });
        // What the manifests record about the columns (bounds, null counts) and the table's
        // statistics files (distinct counts), for the planner's estimates: inexact, since
        // bounds may be truncated and deletes remove rows.
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
            if let Some(summary) = scan.columns.as_deref() {
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
            if let Some(n) = distinct.get(&f.id) {
                column.distinct_count = Precision::Inexact(*n as usize);
            }
        }
        statistics
    };
    let eq = EqualityDeletes::collect(&scan.equality_deletes);
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
    // The hidden per-file columns follow the table's columns: the file's location when asked
    // for, the file's first row id and data sequence number when a lineage column is read,
    // then the equality-delete gate columns when equality deletes apply.
    let file_columns = req.schema.fields().len();
    // The lineage columns read (index in `requested`, whether it is `_row_id`).
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
    // The gate of each file equality deletes may apply to. A file no equality delete applies
    // to reads as newest of all: the join passes its batches without looking keys up (same
    // answer by the gating rule).
    let gate_of = |f: &crate::file_planning::PlannedFile| FileGate {
        data_seq: if f.equality_deletes {
            f.data_seq
        } else {
            i64::MAX
        },
        scope: eq.scope_of(f.spec_id, &f.partition),
    };
    let mut gates: Vec<FileGate> = vec![];
    let mut gate_index: HashMap<FileGate, u32> = HashMap::new();
    if !eq.sets.is_empty() {
        partition_columns.push(Arc::new(Field::new(GATE_COLUMN, DataType::UInt32, false)));
        for f in files {
            let gate = gate_of(f);
            gate_index.entry(gate).or_insert_with(|| {
                gates.push(gate);
                (gates.len() - 1) as u32
            });
        }
    }
    let gates: Arc<[FileGate]> = gates.into();
    let projection: Option<Vec<usize>> = if partition_columns.is_empty() {
        req.projection.cloned()
    } else {
        let mut projection = needed.clone();
        projection.extend(file_columns..file_columns + partition_columns.len());
        Some(projection)
    };
    let url = req.locations.store_url(req.table.metadata().location())?;
    crate::storage::register_store(state, req.stores, &url)?;
    // A data file's position delete files, by its object store location.
    let deletes_of = |f: &PlannedFile| -> Result<Option<(String, FileDeletes)>> {
        if f.position_deletes.is_empty() {
            return Ok(None);
        }
        let delete_files = f
            .position_deletes
            .iter()
            .map(|d| {
                Ok(PositionDeleteFile::of(
                    d,
                    req.locations.object_path_in(&url, &d.path)?.to_string(),
                    &f.path,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some((
            req.locations.object_path_in(&url, &f.path)?.to_string(),
            FileDeletes {
                recorded_path: f.path.clone(),
                delete_files,
            },
        )))
    };
    // ORC data files are read by their own source (see `orc`), beside the parquet scan.
    let (orc_files, parquet_files): (Vec<PlannedFile>, Vec<PlannedFile>) = files
        .iter()
        .cloned()
        .partition(|f| f.format == DataFileFormat::Orc);
    let files = &parquet_files;
    // Identity partition sources read as each file's partition value (see `constants`).
    let mut constants = IdentityConstants::new(req.table.metadata(), req.read_schema, req.schema);
    let mut decorate = |f: &PlannedFile, mut file: PartitionedFile| -> Result<PartitionedFile> {
        if !constants.is_empty() {
            file.statistics = constants.statistics(f)?;
        }
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
        if !lineage.is_empty() {
            values.push(ScalarValue::Int64(f.first_row_id));
            values.push(ScalarValue::Int64(f.first_row_id.map(|_| f.data_seq)));
        }
        if !eq.sets.is_empty() {
            values.push(ScalarValue::UInt32(gate_index.get(&gate_of(f)).copied()));
        }
        Ok(file.with_partition_values(values))
    };
    let target_partitions = state.config().target_partitions();
    let groups = group_files(files, target_partitions, req.locations, &url, &mut decorate)?;
    let orc_groups = match orc_files.is_empty() {
        true => vec![],
        false => group_files(
            &orc_files,
            target_partitions,
            req.locations,
            &url,
            &mut decorate,
        )?,
    };
    let hidden_columns = partition_columns.len();
    let table_schema = TableSchema::builder(Arc::clone(req.schema))
        .with_table_partition_cols(partition_columns)
        .build();
    let statistics = statistics_of(table_schema.table_schema(), files);
    let adapter = FieldIdAdapterFactory::new(req.read_schema, req.table.metadata().properties());
    let orc_plan = match orc_groups.is_empty() {
        true => None,
        false => {
            use super::super::orc::{OrcSource, POSITION_ID};
            let mut field_ids: Vec<i32> = req
                .read_schema
                .as_struct()
                .fields()
                .iter()
                .map(|f| f.id)
                .collect();
            // Row positions are a column of the file (numbered as read), after the table's:
            // the output puts them last, where the parquet side's position deletes put them.
            let (orc_schema, orc_projection) = match positions {
                false => (table_schema.clone(), projection.clone()),
                true => {
                    field_ids.push(POSITION_ID);
                    let mut fields: Vec<FieldRef> = req.schema.fields().iter().cloned().collect();
                    fields.push(Arc::new(Field::new(
                        crate::physical_plan::positional_delete::POSITION_COLUMN,
                        DataType::Int64,
                        false,
                    )));
                    let schema =
                        TableSchema::builder(Arc::new(arrow::datatypes::Schema::new(fields)))
                            .with_table_partition_cols(table_schema.table_partition_cols().clone())
                            .build();
                    let mut p = needed.clone();
                    p.extend(file_columns + 1..file_columns + 1 + hidden_columns);
                    p.push(file_columns);
                    (schema, Some(p))
                }
            };
            let mut deletes = HashMap::new();
            for f in &orc_files {
                if let Some((location, file_deletes)) = deletes_of(f)? {
                    deletes.insert(location, file_deletes);
                }
            }
            let statistics = statistics_of(orc_schema.table_schema(), &orc_files);
            let source = OrcSource::new(
                orc_schema,
                field_ids.into(),
                deletes,
                Arc::new(adapter.clone()),
            );
            let config = FileScanConfigBuilder::new(url.clone(), Arc::new(source))
                .with_file_groups(orc_groups)
                .with_statistics(statistics)
                .with_projection_indices(orc_projection)?
                .with_limit(req.limit.filter(|_| !has_deletes))
                .build();
            Some(
                datafusion::datasource::source::DataSourceExec::from_data_source(config)
                    as Arc<dyn ExecutionPlan>,
            )
        }
    };
    let config =
        FileScanConfigBuilder::new(url.clone(), Arc::new(ParquetSource::new(table_schema)))
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_expr_adapter(Some(adapter.shared()))
            .with_projection_indices(projection)?
            // Deletes remove rows after the read: a limit cannot go to the reader then.
            .with_limit(req.limit.filter(|_| !has_deletes))
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
    let mut plan = parquet_exec_with_dictionaries(state, config, req.filtered, dictionaries)?;
    // Both read the same columns: parquet files' position deletes apply below the union.
    let with_orc = |plan: Arc<dyn ExecutionPlan>| -> Result<Arc<dyn ExecutionPlan>> {
        match &orc_plan {
            None => Ok(plan),
            Some(orc) if files.is_empty() => Ok(Arc::clone(orc)),
            Some(orc) => {
                datafusion::physical_plan::union::UnionExec::try_new(vec![plan, Arc::clone(orc)])
            }
        }
    };
    if !has_deletes && hidden_columns == 0 && !positions {
        return with_orc(plan);
    }

    let mut positional = HashMap::new();
    for f in files {
        if let Some((location, file_deletes)) = deletes_of(f)? {
            positional.insert(location, file_deletes);
        }
    }
    let threshold =
        IcebergOptions::from_config(state.config_options()).position_delete_join_threshold;
    // Under equality deletes, the position-deleted rows of densely deleted files are marked
    // rather than dropped: the first join drops them with its own, copying the rows once.
    let mut live_at = None;
    if positions {
        plan = Arc::new(
            PositionalDeleteExec::try_new(plan, positional)?
                .with_join_threshold(threshold)
                .with_positions()?,
        );
    } else if !positional.is_empty() {
        let node = PositionalDeleteExec::try_new(plan, positional)?.with_join_threshold(threshold);
        plan = Arc::new(match eq.sets.is_empty() || orc_plan.is_some() {
            true => node,
            false => {
                // Appended after the scan's columns, as the position column would be.
                live_at = Some(needed.len() + hidden_columns);
                node.with_live_column()
            }
        });
    }

    let mut plan = with_orc(plan)?;

    // Back to the requested columns (and the file column when asked for).
    let mut columns: Vec<usize> = (0..requested.len()).collect();
    if req.file_column {
        columns.push(needed.len());
        columns.extend((1..=file_metadata_columns).map(|i| needed.len() + i));
    }
    if req.position_column {
        // Appended after the scan's columns (the hidden per-file ones included).
        columns.push(needed.len() + hidden_columns);
    }
    // What the lineage columns are computed from, at the end of the joins' output.
    let lineage_inputs = (!lineage.is_empty()).then(|| {
        let at = columns.len();
        columns.extend([lineage_at, lineage_at + 1]);
        // The position column once, wherever it already is.
        let pos = match req.position_column {
            true => at - 1,
            false => {
                columns.push(needed.len() + hidden_columns);
                at + 2
            }
        };
        LineageInputs {
            first_row_id: at,
            data_seq: at + 1,
            pos,
        }
    });
    let mut output = Some(columns);
    let sets = eq.sets.len();
    for (n, ((ids, deletes), keys)) in eq.sets.iter().zip(keys_of_set).enumerate() {
        let build = delete_scan(state, req, ids, deletes, &eq).await?;
        let columns = EqualityDeleteColumns {
            keys,
            gate: gate_at,
            gates: Arc::clone(&gates),
            live: live_at,
        };
        let join = EqualityDeleteExec::try_new(
            plan,
            build,
            columns,
            ids.clone(),
            IcebergOptions::from_config(state.config_options()).equality_delete_fanout,
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
        plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
    }
    if let Some(inputs) = lineage_inputs {
        plan = with_lineage_values(plan, &lineage, &inputs)?;
    }
    Ok(plan)
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

/// The index of the top-level column with field id `id` in `schema`.
fn top_level_column(schema: &iceberg::spec::Schema, id: i32) -> Result<usize> {
    if let Some(i) = schema.as_struct().fields().iter().position(|f| f.id == id) {
        return Ok(i);
    }
    Err(match schema.field_by_id(id) {
        Some(f) => DataFusionError::NotImplemented(format!(
            "equality deletes on nested field '{}' (id {id}) are not supported yet",
            f.name
        )),
        None => DataFusionError::NotImplemented(format!(
            "equality deletes on field id {id}, which the schema read no longer has, are not supported yet"
        )),
    })
}

/// The equality delete files that apply to a scan, by equality-id set, and the partition
/// scopes they are confined to.
struct EqualityDeletes<'a> {
    /// Sorted equality ids → delete files.
    sets: BTreeMap<Vec<i32>, Vec<&'a DeleteFileRef>>,
    /// (spec, partition) of partition-scoped deletes → scope id.
    scopes: HashMap<(i32, Struct), i32>,
}

impl<'a> EqualityDeletes<'a> {
    fn collect(deletes: &'a [Arc<DeleteFileRef>]) -> Self {
        let mut sets: BTreeMap<Vec<i32>, Vec<&DeleteFileRef>> = BTreeMap::new();
        let mut scopes = HashMap::new();
        let mut seen = HashSet::new();
        for d in deletes {
            if d.content != DataContentType::EqualityDeletes || !seen.insert(d.path.as_str()) {
                continue;
            }
            let mut ids = d.equality_ids.clone();
            ids.sort_unstable();
            ids.dedup();
            sets.entry(ids).or_default().push(d);
            if !d.spec_unpartitioned {
                let next = scopes.len() as i32;
                scopes
                    .entry((d.spec_id, d.partition.clone()))
                    .or_insert(next);
            }
        }
        Self { sets, scopes }
    }

    /// The scope of a data file of `spec_id` in `partition`.
    fn scope_of(&self, spec_id: i32, partition: &Struct) -> i32 {
        self.scopes
            .get(&(spec_id, partition.clone()))
            .copied()
            .unwrap_or(NO_SCOPE)
    }

    /// The scope a delete file's rows apply in.
    fn delete_scope(&self, d: &DeleteFileRef) -> i32 {
        if d.spec_unpartitioned {
            GLOBAL_SCOPE
        } else {
            self.scope_of(d.spec_id, &d.partition)
        }
    }
}

/// Reads the key columns of one equality-id set's delete files (by field id, into the read
/// schema's types), with each file's sequence number and scope.
async fn delete_scan(
    state: &dyn Session,
    req: &ScanRequest<'_>,
    ids: &[i32],
    deletes: &[&DeleteFileRef],
    eq: &EqualityDeletes<'_>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let fields = ids
        .iter()
        .map(|id| {
            req.read_schema.field_by_id(*id).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("field id {id} is not in the schema"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let keys = iceberg::spec::Schema::builder()
        .with_fields(fields)
        .build()
        .df()?;
    // The key columns as the rows' own columns are read (string views, or plain strings for a
    // rewrite): the join compares them as they are.
    let file_schema: SchemaRef = Arc::new(arrow::datatypes::Schema::new(
        ids.iter()
            .map(|id| {
                Ok(Arc::clone(
                    &req.schema.fields()[top_level_column(req.read_schema, *id)?],
                ))
            })
            .collect::<Result<Vec<FieldRef>>>()?,
    ));
    let partition_columns: Vec<FieldRef> = vec![
        Arc::new(Field::new(DELETE_SEQ_COLUMN, DataType::Int64, false)),
        Arc::new(Field::new(SCOPE_COLUMN, DataType::Int32, false)),
    ];
    let url = req.locations.store_url(req.table.metadata().location())?;
    let target = state.config().target_partitions().max(1).min(deletes.len());
    let mut groups: Vec<Vec<PartitionedFile>> = vec![vec![]; target];
    for (i, d) in deletes.iter().enumerate() {
        groups[i % target].push(
            file_at(
                req.locations.object_path_in(&url, &d.path)?.as_ref(),
                d.size,
            )?
            .with_partition_values(vec![
                ScalarValue::Int64(Some(d.data_seq)),
                ScalarValue::Int32(Some(eq.delete_scope(d))),
            ]),
        );
    }
    let adapter = FieldIdAdapterFactory::new(&keys, req.table.metadata().properties());
    let source = ParquetSource::new(
        TableSchema::builder(file_schema)
            .with_table_partition_cols(partition_columns)
            .build(),
    );
    let config = FileScanConfigBuilder::new(url, Arc::new(source))
        .with_file_groups(groups.into_iter().map(FileGroup::new).collect())
        .with_expr_adapter(Some(adapter.shared()))
        .build();
    parquet_exec(state, config, false)
}
