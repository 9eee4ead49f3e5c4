//! The equality deletes of a scan: the delete files by equality-id set, the partition scopes
//! they apply in, the gate of each data file, and the scan of a set's delete rows (the build
//! side of [`EqualityDeleteExec`](crate::physical_plan::equality_delete::EqualityDeleteExec)).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;
use iceberg::spec::{DataContentType, Struct};

use super::request::ScanRequest;
use crate::error::IcebergResultExt;
use crate::file_planning::{DeleteFileRef, FieldIdAdapterFactory, PlannedFile};
use crate::physical_plan::equality_delete::{FileGate, GLOBAL_SCOPE, NO_SCOPE};
use crate::physical_plan::parquet_files::parquet_exec;
use crate::storage::location::file_at;

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
/// The index of the top-level column with field id `id` in `schema`.
pub(super) fn top_level_column(schema: &iceberg::spec::Schema, id: i32) -> Result<usize> {
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
pub(super) struct EqualityDeletes<'a> {
    /// Sorted equality ids → delete files.
    pub(super) sets: BTreeMap<Vec<i32>, Vec<&'a DeleteFileRef>>,
    /// (spec, partition) of partition-scoped deletes → scope id.
    scopes: HashMap<(i32, Struct), i32>,
}

impl<'a> EqualityDeletes<'a> {
    pub(super) fn collect(deletes: &'a [Arc<DeleteFileRef>]) -> Self {
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

    /// The gate of a data file equality deletes may apply to. A file no equality delete applies
    /// to reads as newest of all: the join passes its batches without looking keys up (same
    /// answer by the gating rule).
    pub(super) fn gate_of(&self, f: &PlannedFile) -> FileGate {
        FileGate {
            data_seq: match f.equality_deletes {
                true => f.data_seq,
                false => i64::MAX,
            },
            scope: self.scope_of(f.spec_id, &f.partition),
        }
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
pub(super) async fn delete_scan(
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
