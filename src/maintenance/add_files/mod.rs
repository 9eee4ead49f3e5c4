//! `add_files`: existing parquet files registered in a table as they are, in one `append`
//! snapshot, without reading or rewriting their rows.
//!
//! ```text
//!  list the source (a file, or every visible file under a directory or prefix)
//!    └─ Hive-style k=v/ directories ─► identity partition values (filtered by partition_filter)
//!  duplicates: the table's live data files, a manifest at a time, against the paths to add
//!  footers, 16 at a time ─► field ids (the file's, else the name mapping) ─► schema check
//!    ─► counts, sizes, bounds ─► manifest entries, written as they come (rolled by size)
//!  one append commit: those manifests, the name mapping when the table had none
//! ```
//! Nothing is committed until every footer has been read and checked; the manifests written
//! are removed when the statement fails. The files stay where they are and become the table's
//! (a later `expire_snapshots` may delete them once no snapshot reaches them, as in Java).

mod footer;
mod procedures;
mod tables;

pub(crate) use procedures::{call, PROCEDURES};
pub use tables::{register_table, snapshot, Registered, GC_ENABLED};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataFile, ManifestFile, ManifestStatus, Operation, PrimitiveType, Struct, Transform, Type,
};
use iceberg::table::Table;
use iceberg::TableIdent;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

use crate::commit::{MetadataStore, SnapshotChanges, Validation, WrittenFiles};
use crate::error::IcebergResultExt;
use crate::storage::location::LocationMap;

/// How many footers are read at a time.
const FOOTER_CONCURRENCY: usize = 16;

/// Registers the parquet files of a directory, prefix or file in a table (Spark's
/// `add_files`).
#[derive(Debug)]
pub struct AddFiles {
    store: Arc<dyn MetadataStore>,
    ident: TableIdent,
    source: String,
    partition_filter: BTreeMap<String, String>,
    check_duplicate_files: bool,
    /// Whether files must carry no field ids (their columns matched by name): a `snapshot`'s
    /// table numbers its columns afresh.
    by_name: bool,
}

/// What [`AddFiles`] added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddFilesResult {
    /// Files added.
    pub added_files_count: u64,
    /// Partitions they were added to.
    pub changed_partition_count: u64,
}

/// One file to add.
struct Candidate {
    meta: ObjectMeta,
    /// Its location as the table records it.
    location: String,
    /// Its value of each partition column (`None`: the Hive null partition).
    partition: Vec<Option<String>>,
}

/// A partition column of the table: an identity field of its spec.
struct PartitionColumn {
    name: String,
    source_id: i32,
    ty: PrimitiveType,
}

impl AddFiles {
    /// Adds the files at `source`: a parquet file, or a directory or object-store prefix
    /// (every file under it whose path has no part starting with `_` or `.`).
    pub fn new(
        store: Arc<dyn MetadataStore>,
        ident: TableIdent,
        source: impl Into<String>,
    ) -> Self {
        Self {
            store,
            ident,
            source: source.into(),
            partition_filter: BTreeMap::new(),
            check_duplicate_files: true,
            by_name: false,
        }
    }

    /// Adds only the files of partitions where `column` is `value` (Spark's
    /// `partition_filter`).
    pub fn partition_filter(mut self, column: impl Into<String>, value: impl Into<String>) -> Self {
        self.partition_filter.insert(column.into(), value.into());
        self
    }

    /// Whether files the table has already are refused (the default) or added again.
    pub fn check_duplicate_files(mut self, check: bool) -> Self {
        self.check_duplicate_files = check;
        self
    }

    /// Refuses files that carry field ids: their columns are matched by name (the name
    /// mapping) only.
    pub(crate) fn by_name(mut self) -> Self {
        self.by_name = true;
        self
    }

    /// Adds the files in one commit.
    pub async fn execute(self) -> Result<AddFilesResult> {
        let table = Arc::clone(&self.store).load(&self.ident).await?;
        let metadata = table.metadata();
        crate::commit::metadata_file::refuse_inline_manifests(metadata)?;
        let columns = partition_columns(&table)?;
        for key in self.partition_filter.keys() {
            if !columns.iter().any(|c| &c.name == key) {
                return Err(plan(format!(
                    "partition_filter names '{key}', which is not a partition column of table \
                     '{}'",
                    self.ident
                )));
            }
        }
        let located = crate::storage::locate(&self.source)?;
        let object_store = self.store.object_stores().store(&located.url)?;
        let listed = list(object_store.as_ref(), &located.path).await?;
        if listed.is_empty() {
            return Err(plan(format!("no files found at '{}'", self.source)));
        }
        // `file:///` for local files, `s3://bucket/` and the like: the object's path follows.
        let base = located.url.as_str().to_string();
        let mut candidates = vec![];
        for (meta, relative) in listed {
            let location = format!("{base}{}", meta.location);
            let partition = partition_values(&columns, &relative, &location)?;
            let keep = self.partition_filter.iter().all(|(k, v)| {
                let at = columns.iter().position(|c| &c.name == k);
                at.is_some_and(|i| partition[i].as_deref() == Some(v.as_str()))
            });
            if keep {
                candidates.push(Candidate {
                    meta,
                    location,
                    partition,
                });
            }
        }
        if candidates.is_empty() {
            return Err(plan(format!(
                "no files at '{}' match the partition filter",
                self.source
            )));
        }
        let paths: Arc<HashSet<String>> =
            Arc::new(candidates.iter().map(|c| c.location.clone()).collect());
        if self.check_duplicate_files {
            refuse_duplicates(&table, &paths).await?;
        }
        let (mapping, made) =
            footer::name_mapping(metadata.current_schema(), metadata.properties())?;
        let written = WrittenFiles::default();
        let added = match write_manifests(
            &table,
            &columns,
            (&mapping, self.by_name),
            object_store,
            candidates,
            &written,
        )
        .await
        {
            Ok(added) => added,
            Err(e) => {
                written.remove_all(table.file_io()).await;
                return Err(e);
            }
        };
        let mut changes = SnapshotChanges {
            operation: Operation::Append,
            summary_properties: HashMap::from([
                ("added-data-files".to_string(), added.files.to_string()),
                ("added-records".to_string(), added.records.to_string()),
                ("added-files-size".to_string(), added.bytes.to_string()),
                (
                    "changed-partition-count".to_string(),
                    added.partitions.to_string(),
                ),
            ]),
            added_manifests: added.manifests,
            snapshot_id: Some(added.snapshot_id),
            ..Default::default()
        };
        if made {
            let json = serde_json::to_string(&mapping)
                .map_err(|e| DataFusionError::Internal(format!("name mapping: {e}")))?;
            changes
                .set_properties
                .insert(iceberg::spec::DEFAULT_SCHEMA_NAME_MAPPING.to_string(), json);
        }
        // The same files added by a concurrent commit conflict.
        let picked = Arc::clone(&paths);
        changes.validation = Some(Validation {
            base_snapshot_id: metadata.current_snapshot_id(),
            may_match: Arc::new(move |_, _, file| picked.contains(file.file_path())),
            read_files: HashSet::new(),
            equality_deletes_carry_over: true,
        });
        crate::commit::commit_or_clean_up(&self.store, &table, changes, &written).await?;
        Ok(AddFilesResult {
            added_files_count: added.files,
            changed_partition_count: added.partitions,
        })
    }
}

fn plan(what: String) -> DataFusionError {
    DataFusionError::Plan(format!("add_files: {what}; nothing was added"))
}

/// The table's partition columns: its default spec must have identity fields only.
fn partition_columns(table: &Table) -> Result<Vec<PartitionColumn>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    let mut out = vec![];
    for field in metadata.default_partition_spec().fields() {
        let source = schema.field_by_id(field.source_id).ok_or_else(|| {
            plan(format!(
                "partition field '{}' has no source column",
                field.name
            ))
        })?;
        let Type::Primitive(ty) = source.field_type.as_ref() else {
            return Err(plan(format!(
                "partition column '{}' is not primitive",
                source.name
            )));
        };
        if field.transform != Transform::Identity {
            return Err(plan(format!(
                "table '{}' is partitioned by {}({}); files can be added to tables partitioned \
                 by identity only",
                table.identifier(),
                field.transform,
                source.name
            )));
        }
        out.push(PartitionColumn {
            name: source.name.clone(),
            source_id: source.id,
            ty: ty.clone(),
        });
    }
    Ok(out)
}

/// Every visible object at `root` (the object itself, or those under it), with its path
/// relative to `root`. Parts starting with `_` or `.` are hidden (Spark's rule).
async fn list(
    store: &dyn ObjectStore,
    root: &object_store::path::Path,
) -> Result<Vec<(ObjectMeta, Vec<String>)>> {
    if let Ok(meta) = store.head(root).await {
        return Ok(vec![(meta, vec![])]);
    }
    let prefix = root.as_ref().trim_end_matches('/').to_string();
    let mut out = vec![];
    let mut listing = store.list(Some(root));
    while let Some(meta) = listing
        .try_next()
        .await
        .map_err(|e| DataFusionError::Execution(format!("add_files: listing '{root}': {e}")))?
    {
        let rest = meta.location.as_ref()[prefix.len()..].trim_start_matches('/');
        let parts: Vec<String> = rest.split('/').map(str::to_string).collect();
        if parts
            .iter()
            .any(|p| p.starts_with('_') || p.starts_with('.'))
        {
            continue;
        }
        out.push((meta, parts));
    }
    out.sort_by(|a, b| a.0.location.cmp(&b.0.location));
    Ok(out)
}

/// The partition values a file's directories give (`k=v/` parts before its name).
fn partition_values(
    columns: &[PartitionColumn],
    relative: &[String],
    location: &str,
) -> Result<Vec<Option<String>>> {
    let mut values: Vec<Option<Option<String>>> = vec![None; columns.len()];
    let dirs = relative.split_last().map(|(_, d)| d).unwrap_or(&[]);
    for dir in dirs {
        let Some((key, value)) = dir.split_once('=') else {
            continue;
        };
        let key = decode(key);
        let Some(at) = columns.iter().position(|c| c.name == key) else {
            return Err(plan(match columns.is_empty() {
                true => format!("the table is unpartitioned, and {location} is in a partition directory ('{dir}')"),
                false => format!("{location} is in a directory of '{key}', which is not a partition column"),
            }));
        };
        let value = decode(value);
        values[at] = Some((value != "__HIVE_DEFAULT_PARTITION__").then_some(value));
    }
    values
        .into_iter()
        .zip(columns)
        .map(|(v, c)| {
            v.ok_or_else(|| {
                plan(format!(
                    "{location} is not under a directory of partition column '{}' ({}=value/)",
                    c.name, c.name
                ))
            })
        })
        .collect()
}

/// The path a `source_table` argument names: Spark's ``'`parquet`.`/path`'`` (or
/// ``parquet.`/path` ``), or a plain path or URI.
pub(crate) fn source_path(text: &str) -> Result<String> {
    let text = text.trim();
    let rest = text
        .strip_prefix("`parquet`.")
        .or_else(|| text.strip_prefix("parquet."))
        .or_else(|| text.strip_prefix("PARQUET."));
    let Some(rest) = rest else {
        if text.starts_with('`') || text.contains("`.") {
            return Err(DataFusionError::Plan(format!(
                "source_table must be `parquet`.`<path>` (parquet files are the only source), \
                 got {text}"
            )));
        }
        return Ok(text.to_string());
    };
    let path = rest
        .strip_prefix('`')
        .and_then(|r| r.strip_suffix('`'))
        .unwrap_or(rest);
    if path.is_empty() {
        return Err(DataFusionError::Plan("source_table names no path".into()));
    }
    Ok(path.to_string())
}

/// A Hive-escaped path part, `%XX` decoded.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Refuses paths the table's current snapshot has among its live data files (read a manifest
/// at a time).
async fn refuse_duplicates(table: &Table, paths: &HashSet<String>) -> Result<()> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(());
    };
    let list =
        crate::file_planning::manifest_list(table, &LocationMap::default(), snapshot).await?;
    let mut found = vec![];
    for manifest in list.iter() {
        let entries =
            crate::file_planning::load_entries(manifest, table.metadata(), table.file_io()).await?;
        for e in &entries {
            if e.status() != ManifestStatus::Deleted && paths.contains(e.data_file().file_path()) {
                found.push(e.data_file().file_path().to_string());
            }
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    found.sort();
    Err(plan(format!(
        "{} file(s) are in the table already (e.g. {}); pass check_duplicate_files => false to \
         add them again",
        found.len(),
        found[0]
    )))
}

/// What the manifests written hold.
struct Added {
    manifests: Vec<ManifestFile>,
    snapshot_id: i64,
    files: u64,
    records: u64,
    bytes: u64,
    partitions: u64,
}

/// Reads the candidates' footers (several at a time), checks each, and writes their entries
/// into manifests for a new snapshot id as they come.
async fn write_manifests(
    table: &Table,
    columns: &[PartitionColumn],
    (mapping, by_name): (&iceberg::spec::NameMapping, bool),
    object_store: Arc<dyn ObjectStore>,
    candidates: Vec<Candidate>,
    written: &WrittenFiles,
) -> Result<Added> {
    let metadata = table.metadata();
    let snapshot_id = crate::commit::new_snapshot_id(metadata);
    let spec_id = metadata.default_partition_spec_id();
    let schema = metadata.current_schema().clone();
    let table_arrow = crate::physical_plan::scan::schema::arrow_schema(&schema)?;
    let given: Vec<i32> = columns.iter().map(|c| c.source_id).collect();
    let per_manifest = crate::commit::manifest_entries_target(metadata)?;
    let described = futures::stream::iter(candidates.into_iter().map(|c| {
        let store = Arc::clone(&object_store);
        let (schema, table_arrow, given) =
            (schema.clone(), Arc::clone(&table_arrow), given.clone());
        async move {
            let (footer, meta) = crate::physical_plan::parquet_files::fetch_footer(
                store.as_ref(),
                &c.meta,
                None,
                None,
                false,
            )
            .await
            .map_err(|e| {
                plan(format!(
                    "{} is not a readable parquet file: {e}",
                    c.location
                ))
            })?;
            let ids = footer::Ids::of(&footer, mapping);
            if by_name && matches!(ids, footer::Ids::Embedded) {
                return Err(plan(footer::carries_ids_refused(&c.location)));
            }
            footer::check_schema(&c.location, &footer, &ids, &schema, &table_arrow, &given)?;
            let mut builder = crate::physical_plan::write::column_metrics::footer_metrics(
                &schema,
                &footer,
                meta.size as usize,
                &c.location,
                HashMap::new(),
                &|column| ids.leaf(column),
            )?;
            builder
                .partition(partition_struct(columns, &c.partition)?)
                .partition_spec_id(spec_id);
            builder
                .build()
                .map_err(|e| DataFusionError::Internal(format!("data file {}: {e}", c.location)))
        }
    }))
    .buffered(FOOTER_CONCURRENCY);
    let mut described = std::pin::pin!(described);
    let mut added = Added {
        manifests: vec![],
        snapshot_id,
        files: 0,
        records: 0,
        bytes: 0,
        partitions: 0,
    };
    let mut partitions: HashSet<Struct> = HashSet::new();
    let mut batch: Vec<DataFile> = vec![];
    while let Some(file) = described.next().await {
        let file = file?;
        added.files += 1;
        added.records += file.record_count();
        added.bytes += file.file_size_in_bytes();
        partitions.insert(file.partition().clone());
        batch.push(file);
        if batch.len() >= per_manifest {
            let manifest = write_one(
                table,
                snapshot_id,
                spec_id,
                std::mem::take(&mut batch),
                written,
            )
            .await?;
            added.manifests.push(manifest);
        }
    }
    if !batch.is_empty() {
        added
            .manifests
            .push(write_one(table, snapshot_id, spec_id, batch, written).await?);
    }
    added.partitions = partitions.len() as u64;
    Ok(added)
}

/// One manifest of added entries.
async fn write_one(
    table: &Table,
    snapshot_id: i64,
    spec_id: i32,
    files: Vec<DataFile>,
    written: &WrittenFiles,
) -> Result<ManifestFile> {
    let path = format!(
        "{}/metadata/{}-add-files.avro",
        table.metadata().location().trim_end_matches('/'),
        uuid::Uuid::new_v4()
    );
    written.record(path.clone());
    let mut writer = crate::commit::manifest_writer(table, &path, snapshot_id, spec_id, false)?;
    for f in files {
        writer.add_file(f, -1).df()?;
    }
    writer.write_manifest_file().await.df()
}

/// The partition tuple of a file's values, each cast to its column's type.
fn partition_struct(columns: &[PartitionColumn], values: &[Option<String>]) -> Result<Struct> {
    let mut out = vec![];
    for (c, v) in columns.iter().zip(values) {
        let Some(v) = v else {
            out.push(None);
            continue;
        };
        let bad = || {
            plan(format!(
                "'{v}' is not a value of partition column '{}' ({})",
                c.name, c.ty
            ))
        };
        let target = crate::table::alter::arrow_type(&c.ty);
        let scalar = ScalarValue::Utf8(Some(v.clone()))
            .cast_to(&target)
            .map_err(|_| bad())?;
        out.push(Some(
            crate::table::alter::literal(&c.ty, &scalar).ok_or_else(bad)?,
        ));
    }
    Ok(Struct::from_iter(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_name_parquet_paths() {
        assert_eq!(source_path("`parquet`.`/data/x`").unwrap(), "/data/x");
        assert_eq!(source_path("parquet.`s3://b/p`").unwrap(), "s3://b/p");
        assert_eq!(source_path("/plain/path").unwrap(), "/plain/path");
        let e = source_path("`orc`.`/data/x`").unwrap_err().to_string();
        assert!(e.contains("parquet files are the only source"), "{e}");
    }

    #[test]
    fn hive_parts_decode() {
        assert_eq!(decode("a%2Fb"), "a/b");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("x%zz"), "x%zz");
        assert_eq!(decode("caf%C3%A9"), "café");
    }

    #[test]
    fn directories_give_partition_values() {
        let columns = vec![PartitionColumn {
            name: "k".into(),
            source_id: 2,
            ty: PrimitiveType::String,
        }];
        let parts = |p: &str| p.split('/').map(str::to_string).collect::<Vec<_>>();
        let got = partition_values(&columns, &parts("k=a%20b/f.parquet"), "f").unwrap();
        assert_eq!(got, vec![Some("a b".to_string())]);
        let got = partition_values(
            &columns,
            &parts("k=__HIVE_DEFAULT_PARTITION__/f.parquet"),
            "f",
        )
        .unwrap();
        assert_eq!(got, vec![None]);
        let e = partition_values(&columns, &parts("f.parquet"), "f")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not under a directory of partition column 'k'"),
            "{e}"
        );
        let e = partition_values(&columns, &parts("j=1/f.parquet"), "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'j', which is not a partition column"), "{e}");
        let e = partition_values(&[], &parts("j=1/f.parquet"), "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("the table is unpartitioned"), "{e}");
    }
}
