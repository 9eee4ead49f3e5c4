//! `INSERT OVERWRITE`: new rows written and old ones replaced in one snapshot.
//!
//! ```text
//!  OverwriteExec (a StatementExec)
//!    child 0   input ─► [Filter(iceberg_require(filter))] ─► [sort] ─► DataFileWriterExec
//!    child 1   by filter: pass 1 of a copy-on-write DELETE of the rows the filter selects
//!    run       write the new rows; then
//!              by filter  files whose every row matches go whole, unread; files that match in
//!                         part are rewritten without the matching rows (the DELETE's passes)
//!              dynamic    the files of the current spec in the partitions written go whole
//!                         (every file when the spec is unpartitioned), with the delete files
//!                         that applied only to them
//!    commit    one snapshot (Java's operations: OverwriteFiles / ReplacePartitions), validated
//!              from the snapshot the statement read: a concurrent commit that added rows the
//!              overwrite replaces, or deletes for files it removes, fails the statement and
//!              nothing changes (it does not run again: its input is read once)
//! ```
//!
//! Modes, as Spark's: static replaces the rows a filter selects (every row without one; `INSERT
//! OVERWRITE t PARTITION (c = v)` selects `c = v`), and the rows written must match it; dynamic
//! replaces exactly the partitions (of the current spec) the new rows fall into, so an
//! unpartitioned table is replaced whole.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{lit, Expr};
use datafusion::physical_expr::Distribution;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::ExecutionPlan;
use iceberg::spec::{Operation, Struct, TableMetadata};
use iceberg::table::Table;

use super::rewrite::{plan_removal, prepare, validation, DmlJob, Prepared};
use super::DmlTarget;
use crate::commit::{
    commit_or_clean_up, removed_with_deletes, MetadataStore, NewFile, RemovedDeletes,
    SnapshotChanges, Validation, WriteTo, WrittenFiles,
};
use crate::file_planning::{plan_files_pruned, FileFilter, PlannedFile};
use crate::physical_plan::statement::{Statement, StatementExec, StatementMetrics};
use crate::physical_plan::write::{
    iceberg_require, run_writers, sort_requirement, DataFileWriterExec,
};
use crate::storage::location::LocationMap;
use crate::IcebergOptions;

/// The summary property Java's `ReplacePartitions` sets.
const REPLACE_PARTITIONS: &str = "replace-partitions";

/// What an `INSERT OVERWRITE` replaces.
#[derive(Debug, Clone)]
pub(crate) enum OverwriteScope {
    /// Static: the rows the condition selects (`None`: every row). Every row written must
    /// match it.
    Filter(Option<Expr>),
    /// Dynamic: the partitions of the current spec that the rows written fall into.
    Partitions,
}

impl OverwriteScope {
    /// The scope of an `INSERT OVERWRITE` without a filter in a session: its
    /// `iceberg.overwrite_mode`.
    pub(crate) fn of_session(state: &dyn Session) -> Result<Self> {
        let options = IcebergOptions::from_config(state.config_options());
        match options.overwrite_mode.to_ascii_lowercase().as_str() {
            "static" | "" => Ok(Self::Filter(None)),
            "dynamic" => Ok(Self::Partitions),
            other => Err(DataFusionError::Configuration(format!(
                "iceberg.overwrite_mode must be 'static' or 'dynamic', got '{other}'"
            ))),
        }
    }
}

/// Plans `INSERT OVERWRITE target <input>` replacing `scope` (the input's columns are the
/// table's).
pub(crate) async fn plan_overwrite(
    target: DmlTarget<'_>,
    state: &dyn Session,
    input: Arc<dyn ExecutionPlan>,
    scope: OverwriteScope,
) -> Result<Arc<dyn ExecutionPlan>> {
    let session = state
        .as_any()
        .downcast_ref::<SessionState>()
        .ok_or_else(|| {
            DataFusionError::NotImplemented(
                "INSERT OVERWRITE on Iceberg tables needs DataFusion's SessionState".into(),
            )
        })?
        .clone();
    let table = target.table.clone();
    let filter = match &scope {
        OverwriteScope::Filter(Some(f)) if *f != lit(true) => Some(coerced(f.clone(), &input)?),
        _ => None,
    };
    // Rows written outside the filter stop the statement before anything commits.
    let input: Arc<dyn ExecutionPlan> = match &filter {
        Some(f) => {
            let df_schema = DFSchema::try_from(input.schema().as_ref().clone())?;
            let message = format!(
                "INSERT OVERWRITE on table '{}': a row written does not match the overwrite \
                 filter {f}; nothing was changed",
                table.identifier()
            );
            let check = iceberg_require().call(vec![f.clone(), lit(message)]);
            let check = session.create_physical_expr(check, &df_schema)?;
            Arc::new(FilterExec::try_new(check, input)?)
        }
        None => input,
    };
    let written = WrittenFiles::default();
    let sort = sort_requirement(&table, &input.schema())?;
    let writer: Arc<dyn ExecutionPlan> = Arc::new(DataFileWriterExec::try_new(
        input,
        table.clone(),
        sort,
        written.clone(),
    )?);
    let base_snapshot_id = target.write_to.head_id(table.metadata());
    let (removal, mut children) = match &scope {
        OverwriteScope::Filter(_) => {
            let (job, pass1) = plan_removal(
                target.clone(),
                session.clone(),
                filter.into_iter().collect(),
            )
            .await?;
            (Removal::Filter(Arc::new(job)), pass1.into_iter().collect())
        }
        OverwriteScope::Partitions => (Removal::Partitions, vec![]),
    };
    children.insert(0, writer);
    let statement = OverwriteStatement {
        table,
        store: Arc::clone(&target.store),
        locations: target.locations.clone(),
        threshold: IcebergOptions::from_config(state.config_options()).planning_threshold,
        base_snapshot_id,
        write_to: target.write_to.clone(),
        removal,
        written,
    };
    Ok(Arc::new(StatementExec::new(Arc::new(statement), children)))
}

/// `filter` with the casts its comparisons need over `input`'s columns (the table's), as
/// DataFusion's analyzer adds them to a query's conditions.
fn coerced(filter: Expr, input: &Arc<dyn ExecutionPlan>) -> Result<Expr> {
    use datafusion::common::tree_node::TreeNode;
    let schema = DFSchema::try_from(input.schema().as_ref().clone())?;
    let mut rewriter =
        datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter::new(&schema);
    Ok(filter.rewrite(&mut rewriter)?.data)
}

/// How the statement finds the rows it replaces.
#[derive(Debug)]
enum Removal {
    /// A copy-on-write `DELETE` by the filter, planned with the statement.
    Filter(Arc<DmlJob>),
    /// The partitions written, found once the rows are written.
    Partitions,
}

/// A planned `INSERT OVERWRITE`, run by a [`StatementExec`] (shown as `OverwriteExec`) whose
/// children are the writer and, by filter, the removal's pass 1. One output row: `count`, the
/// rows written.
#[derive(Debug)]
struct OverwriteStatement {
    table: Table,
    store: Arc<dyn MetadataStore>,
    locations: LocationMap,
    threshold: u64,
    /// The snapshot the statement read (`None`: the table was empty).
    base_snapshot_id: Option<i64>,
    /// Where the snapshot goes (the branch whose head it read).
    write_to: WriteTo,
    removal: Removal,
    /// The files the writer writes in this process.
    written: WrittenFiles,
}

impl OverwriteStatement {
    /// Writes the new rows, finds what they replace and commits both.
    async fn run(
        &self,
        children: &[Arc<dyn ExecutionPlan>],
        context: &Arc<TaskContext>,
        m: &StatementMetrics,
    ) -> Result<u64> {
        let metadata = self.table.metadata();
        let added = run_writers(
            Arc::clone(&children[0]),
            context,
            metadata,
            &self.written,
            |_| Ok(()),
        )
        .await?;
        let rows: u64 = added.iter().map(|f| f.file.record_count()).sum();
        m.add("rows_written", rows as usize);
        m.add("files_written", added.len());
        let mut changes = match &self.removal {
            Removal::Filter(job) => {
                let pass1 = children.get(1).cloned();
                match prepare(job, pass1, context, m, &self.written).await? {
                    Prepared::Changes(changes, _) => *changes,
                    Prepared::Nothing(_) => SnapshotChanges {
                        validation: Some(validation(job, &[])),
                        ..Default::default()
                    },
                }
            }
            Removal::Partitions => self.replaced_partitions(&added, m).await?,
        };
        let removes =
            !changes.removed_files.is_empty() || !changes.removed_deletion_vectors.is_empty();
        // Java's OverwriteFiles and ReplacePartitions: an `overwrite` whatever it changed.
        changes.operation = Operation::Overwrite;
        if matches!(self.removal, Removal::Partitions) {
            changes
                .summary_properties
                .insert(REPLACE_PARTITIONS.to_string(), "true".to_string());
        }
        changes.added_data_files.extend(added);
        changes.write_to = self.write_to.clone();
        if changes.added_data_files.is_empty() && !removes {
            // Nothing written, nothing replaced: no snapshot.
            self.written.take();
            return Ok(0);
        }
        let outcome = commit_or_clean_up(&self.store, &self.table, changes, &self.written).await?;
        m.add("commit_attempts", outcome.attempts as usize);
        Ok(rows)
    }

    /// Dynamic overwrite: the files of the base snapshot in the partitions `added` were written
    /// for (same spec, same partition values; every file when written unpartitioned), with the
    /// delete files that applied only to them; validated against concurrent commits into those
    /// partitions.
    async fn replaced_partitions(
        &self,
        added: &[NewFile],
        m: &StatementMetrics,
    ) -> Result<SnapshotChanges> {
        let mut partitions: HashMap<i32, HashSet<Struct>> = HashMap::new();
        for f in added {
            partitions
                .entry(f.spec_id)
                .or_default()
                .insert(f.file.partition().clone());
        }
        let metadata = self.table.metadata();
        // Rows written for an unpartitioned spec replace the whole table, files of every spec
        // (as Java's ReplacePartitions).
        let everything = partitions.keys().any(|id| {
            metadata
                .partition_spec_by_id(*id)
                .is_some_and(|spec| spec.fields().is_empty())
        });
        let partitions = Arc::new(partitions);
        let replaced = {
            let partitions = Arc::clone(&partitions);
            move |spec_id: i32, partition: &Struct| {
                everything
                    || partitions
                        .get(&spec_id)
                        .is_some_and(|set| set.contains(partition))
            }
        };
        let mut removed: Vec<PlannedFile> = vec![];
        let mut equality_deletes = vec![];
        if let Some(snapshot) = self.write_to.head(metadata) {
            let files = plan_files_pruned(
                &self.table,
                &self.locations,
                snapshot,
                &FileFilter::default(),
                self.threshold,
            )
            .await?;
            equality_deletes = files.equality_deletes;
            removed = files
                .files
                .into_iter()
                .filter(|f| replaced(f.spec_id, &f.partition))
                .collect();
        }
        let refs: Vec<&PlannedFile> = removed.iter().collect();
        let (removed_files, removed_vectors, delete_files_removed) = removed_with_deletes(
            &self.table,
            &self.write_to,
            &self.locations,
            self.threshold,
            &refs,
            &equality_deletes,
            RemovedDeletes::default(),
        )
        .await?;
        m.add("files_removed_whole", removed.len());
        m.add("delete_files_removed", delete_files_removed);
        let read_files = removed.iter().map(|f| f.path.clone()).collect();
        let may_match: crate::commit::MayMatch =
            Arc::new(move |_: &TableMetadata, spec_id, file| replaced(spec_id, file.partition()));
        Ok(SnapshotChanges {
            removed_files,
            removed_deletion_vectors: removed_vectors,
            validation: Some(Validation {
                base_snapshot_id: self.base_snapshot_id,
                may_match,
                read_files,
                equality_deletes_carry_over: false,
            }),
            ..Default::default()
        })
    }
}

#[async_trait::async_trait]
impl Statement for OverwriteStatement {
    fn name(&self) -> &'static str {
        "OverwriteExec"
    }

    fn describe(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "table={}", self.table.identifier())?;
        match &self.removal {
            Removal::Partitions => write!(f, ", mode=dynamic"),
            Removal::Filter(job) => {
                write!(
                    f,
                    ", mode=static, removed_whole={}, checked={}",
                    job.removed_whole.len(),
                    job.checked.files.len()
                )?;
                match job.condition() {
                    Some(c) => write!(f, ", filter={c}"),
                    None => Ok(()),
                }
            }
        }
    }

    fn counters(&self) -> &'static [&'static str] {
        &[
            "rows_written",
            "files_written",
            "rows_deleted",
            "files_removed_whole",
            "files_rewritten",
            "rows_rewritten",
            "files_spliced",
            "row_groups_copied",
            "splice_fallbacks",
            "delete_files_removed",
            "delete_files_written",
            "commit_attempts",
        ]
    }

    fn child_distribution(&self) -> Distribution {
        Distribution::SinglePartition
    }

    fn reruns(&self) -> bool {
        false
    }

    fn table(&self) -> &Table {
        &self.table
    }

    fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.store
    }

    async fn run_once(
        &self,
        children: &[Arc<dyn ExecutionPlan>],
        context: &Arc<TaskContext>,
        metrics: &StatementMetrics,
    ) -> Result<u64> {
        match self.run(children, context, metrics).await {
            Ok(rows) => Ok(rows),
            // The commit may have landed: its files stay (orphans at worst).
            Err(e) if crate::commit::is_commit_state_unknown(&e) => Err(e),
            Err(e) => {
                self.written.remove_all(self.table.file_io()).await;
                Err(e)
            }
        }
    }

    async fn again(
        &self,
        _table: Table,
        _children: &[Arc<dyn ExecutionPlan>],
    ) -> Result<(Arc<dyn Statement>, Vec<Arc<dyn ExecutionPlan>>)> {
        Err(DataFusionError::Internal(
            "INSERT OVERWRITE does not run again".into(),
        ))
    }
}
