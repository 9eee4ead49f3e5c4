//! Copy-on-write by splice, shared by `MERGE`, `UPDATE` and `DELETE`: when a statement only
//! updates columns that neither partition nor sort the table and no delete applies to the files
//! it rewrites, each file is written again with its other columns' chunks copied as they are;
//! when it only leaves rows out, the row groups that keep every row are copied as they are
//! (see [`crate::physical_plan::write::Splicer`]).

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use futures::StreamExt;
use iceberg::spec::TableMetadata;

use crate::commit::NewFile;
use crate::file_planning::{PlannedFile, ScanFiles};
use crate::physical_plan::write::{NewValues, Spliced, Splicer, WrittenFiles};

/// Whether updating table columns `columns` may move a row to another partition or out of the
/// table's sort order (then a file cannot be rewritten in place).
pub(crate) fn moves_rows(metadata: &TableMetadata, columns: &[usize]) -> bool {
    let schema = metadata.current_schema();
    let mut ids = HashSet::new();
    for &c in columns {
        if let Some(field) = schema.as_struct().fields().get(c) {
            field_ids(field, &mut ids);
        }
    }
    let partitioned = metadata
        .default_partition_spec()
        .fields()
        .iter()
        .any(|f| ids.contains(&f.source_id));
    let sorted = metadata
        .default_sort_order()
        .fields
        .iter()
        .any(|f| ids.contains(&f.source_id));
    partitioned || sorted
}

/// The field id of `field` and of every field nested in it.
fn field_ids(field: &iceberg::spec::NestedField, ids: &mut HashSet<i32>) {
    use iceberg::spec::Type;
    ids.insert(field.id);
    match field.field_type.as_ref() {
        Type::Struct(s) => s.fields().iter().for_each(|f| field_ids(f, ids)),
        Type::List(l) => field_ids(&l.element_field, ids),
        Type::Map(m) => {
            field_ids(&m.key_field, ids);
            field_ids(&m.value_field, ids);
        }
        Type::Primitive(_) => {}
    }
}

/// Whether the planned `files` can all be spliced as the manifests describe them: no delete
/// applies to them and they are in the table's current partition spec.
pub(crate) fn files_allow_splice(files: &ScanFiles, metadata: &TableMetadata) -> bool {
    let spec = metadata.default_partition_spec_id();
    !files.streamed
        && files.equality_deletes.is_empty()
        && files.files.iter().all(|f| {
            f.position_deletes.is_empty()
                && !f.equality_deletes
                && f.spec_id == spec
                && f.format == iceberg::spec::DataFileFormat::Parquet
        })
}

/// What [`splice_files`] did: the new files and the values they took, or `None` when a file
/// could not be spliced (every file it wrote is in `written`, for the caller to remove).
pub(crate) type SpliceOutcome = Option<(Vec<NewFile>, u64)>;

/// Splices every touched file, a few at a time on the runtime's threads.
pub(crate) async fn splice_files<F>(
    splicer: Arc<Splicer>,
    values: F,
    touched: &[PlannedFile],
    written: &WrittenFiles,
) -> Result<SpliceOutcome>
where
    F: Fn(&str) -> Result<NewValues> + Send + Sync + 'static,
{
    let mut files = vec![];
    let mut spliced = 0;
    for (_, outcome) in splice_each(splicer, values, touched, written).await? {
        match outcome {
            Some(s) => {
                spliced += s.spliced;
                files.extend(s.file);
            }
            None => return Ok(None),
        }
    }
    Ok(Some((files, spliced)))
}

/// What [`drop_rows`] did.
#[derive(Debug, Default)]
pub(crate) struct DroppedRows {
    /// The files written in place of the spliced ones (none for a file that lost every row).
    pub files: Vec<NewFile>,
    /// The rows left out.
    pub dropped: u64,
    /// The rows the spliced files had.
    pub read: u64,
    /// The row groups copied as they are.
    pub groups_copied: usize,
    /// The files that could not be spliced (nothing was written for them): the caller
    /// rewrites them the ordinary way.
    pub refused: Vec<PlannedFile>,
}

/// Writes every touched file again without the rows `drops` names, copying the row groups that
/// keep all their rows as they are (see [`Splicer`]).
pub(crate) async fn drop_rows<F>(
    splicer: Arc<Splicer>,
    drops: F,
    touched: &[PlannedFile],
    written: &WrittenFiles,
) -> Result<DroppedRows>
where
    F: Fn(&str) -> Result<NewValues> + Send + Sync + 'static,
{
    let mut out = DroppedRows::default();
    for (file, outcome) in splice_each(splicer, drops, touched, written).await? {
        match outcome {
            Some(s) => {
                out.dropped += s.spliced;
                out.read += file.record_count;
                out.groups_copied += s.groups_copied;
                out.files.extend(s.file);
            }
            None => out.refused.push(file),
        }
    }
    Ok(out)
}

/// Splices each touched file (once per path), a few at a time on the runtime's threads; every
/// task started runs to its end (and records its file), also after another failed.
async fn splice_each<F>(
    splicer: Arc<Splicer>,
    values: F,
    touched: &[PlannedFile],
    written: &WrittenFiles,
) -> Result<Vec<(PlannedFile, Option<Spliced>)>>
where
    F: Fn(&str) -> Result<NewValues> + Send + Sync + 'static,
{
    let values = Arc::new(values);
    let mut tasks = vec![];
    let mut seen = HashSet::new();
    for f in touched {
        if !seen.insert(f.path.clone()) {
            continue;
        }
        let (splicer, values) = (Arc::clone(&splicer), Arc::clone(&values));
        let (written, file) = (written.clone(), f.clone());
        tasks.push(async move {
            SpawnedTask::spawn(async move {
                let file_values = values(&file.path)?;
                let outcome = splicer.splice(&file, file_values, &written).await?;
                Ok::<_, DataFusionError>((file, outcome))
            })
            .join_unwind()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
        });
    }
    let parallel = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results: Vec<_> = futures::stream::iter(tasks)
        .buffered(parallel)
        .collect()
        .await;
    results.into_iter().collect()
}
