//! What `DELETE`, `UPDATE` and `MERGE` share: the one-row `count` node's properties, plans run
//! through the session's physical optimizer, the files a commit removes along with data files,
//! and the commit that removes what the statement wrote when it fails.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::context::SessionState;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{ExecutionPlan, Partitioning, PlanProperties};
use iceberg::spec::DataContentType;
use iceberg::table::Table;

use crate::catalog::MetadataStore;
use crate::location::LocationMap;
use crate::physical_plan::commit::count_schema;
use crate::physical_plan::write::WrittenFiles;
use crate::scan::{plan_files_pruned, DeleteFileRef, FileFilter, PlannedFile};
use crate::snapshot::{commit, is_commit_state_unknown, CommitOutcome, SnapshotChanges};

/// The properties of a statement node: one partition, one final row (`count`).
pub(crate) fn count_properties() -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(count_schema()),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
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
/// files that reference exactly one of them, and the delete files (`equality_deletes` of the
/// scan, partition-scoped position deletes of removed files) that may apply to no data file
/// that stays. Also returns how many delete files go. (Files the commit adds are newer than
/// every existing delete: none applies to them.)
pub(crate) async fn removed_with_deletes(
    table: &Table,
    locations: &LocationMap,
    planning_threshold: u64,
    removed: &[&PlannedFile],
    equality_deletes: &[Arc<DeleteFileRef>],
) -> Result<(HashSet<String>, usize)> {
    let removed_paths: HashSet<&str> = removed.iter().map(|f| f.path.as_str()).collect();
    let mut removed_files: HashSet<String> = removed_paths.iter().map(|p| p.to_string()).collect();
    let mut delete_files_removed = 0;
    for f in removed {
        for d in &f.position_deletes {
            if d.referenced_data_file.as_deref() == Some(f.path.as_str())
                && removed_files.insert(d.path.clone())
            {
                delete_files_removed += 1;
            }
        }
    }
    let mut candidates: Vec<Arc<DeleteFileRef>> = equality_deletes.to_vec();
    for f in removed {
        candidates.extend(
            f.position_deletes
                .iter()
                .filter(|d| d.referenced_data_file.is_none())
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
    Ok((removed_files, delete_files_removed))
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
        let used = remaining.iter().any(|f| {
            let newer = match d.content {
                DataContentType::EqualityDeletes => f.data_seq < d.data_seq,
                _ => f.data_seq <= d.data_seq,
            };
            newer
                && (d.spec_unpartitioned || (d.spec_id == f.spec_id && d.partition == f.partition))
        });
        if !used && !out.contains(&d.path) {
            out.push(d.path.clone());
        }
    }
    Ok(out)
}
