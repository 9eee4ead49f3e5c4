//! What `DELETE`, `UPDATE` and `MERGE` share: the table a statement changes, its write mode,
//! the one-row `count` node's properties, plans run through the session's physical optimizer, the files a commit removes along with data files,
//! and the commit that removes what the statement wrote when it fails.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, UInt16Type};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ExecutionPlan, Partitioning, PlanProperties, SendableRecordBatchStream,
};
use iceberg::spec::TableMetadata;
use iceberg::table::Table;

use crate::catalog::MetadataStore;
use crate::location::LocationMap;
use crate::physical_plan::commit::count_schema;
use crate::physical_plan::write::WrittenFiles;
use crate::scan::{plan_files_pruned, DeleteFileRef, FileFilter, PlannedFile};
use crate::snapshot::{
    commit, is_commit_state_unknown, CommitOutcome, RemovedDeletes, SnapshotChanges,
};

/// The table a statement changes, as the provider holds it.
pub(crate) struct DmlTarget<'a> {
    pub table: &'a Table,
    pub store: Arc<dyn MetadataStore>,
    pub locations: &'a LocationMap,
}

/// How a `DELETE` or `UPDATE` changes rows in files it does not drop whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteMode {
    /// Rewrite the files without the deleted rows.
    CopyOnWrite,
    /// Write position delete files.
    MergeOnRead,
}

impl WriteMode {
    /// The mode a session option (`option`, its value `session`; empty: unset) or else a table
    /// property (`property`) gives; copy-on-write when neither is set.
    pub(crate) fn from_setting(
        metadata: &TableMetadata,
        session: &str,
        property: &str,
        option: &str,
    ) -> Result<Self> {
        let (value, source) = if session.is_empty() {
            match metadata.properties().get(property) {
                Some(v) => (v.as_str(), format!("table property {property}")),
                None => return Ok(Self::CopyOnWrite),
            }
        } else {
            (session, option.to_string())
        };
        match value.to_ascii_lowercase().as_str() {
            "copy-on-write" => Ok(Self::CopyOnWrite),
            "merge-on-read" => Ok(Self::MergeOnRead),
            other => Err(DataFusionError::Configuration(format!(
                "{source} must be 'copy-on-write' or 'merge-on-read', got '{other}'"
            ))),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::CopyOnWrite => "copy-on-write",
            Self::MergeOnRead => "merge-on-read",
        }
    }
}

/// The properties of a statement node: one partition, one final row (`count`).
pub(crate) fn count_properties() -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(count_schema()),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// The file column of a batch: its distinct names and, per row, the index of its name. A
/// dictionary column (what the scan gives, one value per file) is read by its keys, so no string
/// is copied or hashed per row.
pub(crate) struct FileKeys {
    pub names: StringArray,
    pub keys: Vec<usize>,
}

impl FileKeys {
    pub(crate) fn of(column: &ArrayRef) -> Result<Self> {
        if column.null_count() > 0 {
            return Err(DataFusionError::Internal(
                "a MERGE file column holds NULL for a target row".into(),
            ));
        }
        if let Some(dict) = column.as_dictionary_opt::<UInt16Type>() {
            let names = cast(dict.values(), &DataType::Utf8)?
                .as_string::<i32>()
                .clone();
            let keys = dict.keys().values().iter().map(|&k| k as usize).collect();
            return Ok(Self { names, keys });
        }
        let names = cast(column, &DataType::Utf8)?.as_string::<i32>().clone();
        let keys = (0..names.len()).collect();
        Ok(Self { names, keys })
    }
}

/// Errors unless `partition` is 0 (statement nodes have one partition).
pub(crate) fn only_partition(node: &str, partition: usize) -> Result<()> {
    match partition {
        0 => Ok(()),
        p => Err(DataFusionError::Internal(format!(
            "{node} has one partition, asked for {p}"
        ))),
    }
}

/// The output of a statement node: one row, `count`, once `statement` has run.
pub(crate) fn count_stream(
    statement: impl std::future::Future<Output = Result<u64>> + Send + 'static,
) -> SendableRecordBatchStream {
    let stream = futures::stream::once(async move {
        let n = statement.await?;
        let array = Arc::new(UInt64Array::from(vec![n])) as ArrayRef;
        Ok(RecordBatch::try_new(count_schema(), vec![array])?)
    });
    Box::pin(RecordBatchStreamAdapter::new(count_schema(), stream))
}

/// `plan` through the physical optimizer rules of `state` (as DataFusion optimizes every plan).
pub(crate) fn optimized(
    state: &SessionState,
    mut plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    for rule in state.physical_optimizers() {
        plan = rule.optimize(plan, state.config_options())?;
    }
    Ok(plan)
}

/// Commits `changes` to `table`; when the commit fails for sure (not "state unknown"), the files
/// the statement wrote are removed.
pub(crate) async fn commit_or_clean_up(
    store: &Arc<dyn MetadataStore>,
    table: &Table,
    changes: SnapshotChanges,
    written: &WrittenFiles,
) -> Result<CommitOutcome> {
    match commit(Arc::clone(store), table.identifier(), changes).await {
        Ok(outcome) => {
            written.take();
            Ok(outcome)
        }
        Err(e) => {
            if !is_commit_state_unknown(&e) {
                written.remove_all(table.file_io()).await;
            }
            Err(e)
        }
    }
}

/// Every file a commit removing the data files `removed` removes: those, the position delete
/// files and deletion vectors that reference exactly one of them, and the delete files
/// (`equality_deletes` of the scan, partition-scoped position deletes of removed files) that
/// may apply to no data file that stays, plus `replaced` (the delete files the statement's new
/// ones take in). Also returns the deletion vectors that go and how many delete files (vectors
/// included) go. (Files the commit adds are newer than every existing delete: none applies to
/// them.)
pub(crate) async fn removed_with_deletes(
    table: &Table,
    locations: &LocationMap,
    planning_threshold: u64,
    removed: &[&PlannedFile],
    equality_deletes: &[Arc<DeleteFileRef>],
    replaced: RemovedDeletes,
) -> Result<(HashSet<String>, HashSet<(String, u64)>, usize)> {
    let removed_paths: HashSet<&str> = removed.iter().map(|f| f.path.as_str()).collect();
    let mut delete_files_removed = replaced.len();
    let mut gone = replaced;
    for f in removed {
        for d in &f.position_deletes {
            if d.referenced_data_file.as_deref() == Some(f.path.as_str()) && gone.insert(d) {
                delete_files_removed += 1;
            }
        }
    }
    let RemovedDeletes {
        files: mut removed_files,
        vectors,
    } = gone;
    removed_files.extend(removed_paths.iter().map(|p| p.to_string()));
    let mut candidates: Vec<Arc<DeleteFileRef>> = equality_deletes.to_vec();
    for f in removed {
        candidates.extend(
            f.position_deletes
                .iter()
                .filter(|d| d.referenced_data_file.is_none() && d.deletion_vector.is_none())
                .cloned(),
        );
    }
    if !removed.is_empty() && !candidates.is_empty() {
        for path in orphan_deletes(
            table,
            locations,
            planning_threshold,
            &removed_paths,
            &candidates,
        )
        .await?
        {
            if removed_files.insert(path) {
                delete_files_removed += 1;
            }
        }
    }
    Ok((removed_files, vectors, delete_files_removed))
}

/// Those of `deletes` that may apply to no data file of the base snapshot except `removed` ones
/// (by scope and sequence number: a position delete file without `referenced_data_file` is
/// kept while any file of its partition may still be its target).
async fn orphan_deletes(
    table: &Table,
    locations: &LocationMap,
    planning_threshold: u64,
    removed: &HashSet<&str>,
    deletes: &[Arc<DeleteFileRef>],
) -> Result<Vec<String>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(vec![]);
    };
    // Only the data files are needed: above the planning threshold the delete manifests stream
    // past them, as in the statement's own planning.
    let remaining: Vec<PlannedFile> = plan_files_pruned(
        table,
        locations,
        snapshot,
        &FileFilter::default(),
        planning_threshold,
    )
    .await?
    .files
    .into_iter()
    .filter(|f| !removed.contains(f.path.as_str()))
    .collect();
    let mut out: Vec<String> = vec![];
    for d in deletes {
        let used = remaining.iter().any(|f| d.may_apply_to(f));
        if !used && !out.contains(&d.path) {
            out.push(d.path.clone());
        }
    }
    Ok(out)
}
