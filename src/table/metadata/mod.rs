//! Metadata tables, in Spark's names and columns: what a table's metadata says about its
//! snapshots, history, refs, manifests and files, as rows.
//!
//! ```sql
//! SELECT * FROM ns.events$snapshots;                      -- or "events$snapshots"
//! SELECT file_path, record_count FROM ns.events$files WHERE content = 0;
//! SELECT * FROM iceberg_metadata('ns.events', 'manifests');
//! SELECT * FROM iceberg_metadata('ns.events', 'files', 'snapshot_id', 3051729675574597004);
//! ```
//!
//! The tables over the metadata file (`snapshots`, `history`, `metadata_log_entries`, `refs`)
//! are built whole; those over manifests (`manifests`, `all_manifests`, `files`, `data_files`,
//! `delete_files`, `all_*files`, `entries`, `all_entries`) stream one manifest at a time, a few
//! read in parallel, so a table of millions of files is answered in bounded memory;
//! `position_deletes` reads the delete files themselves, one at a time.

mod files;
mod history;
mod partitions;
mod position_deletes;
mod prune;

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableFunctionImpl};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use iceberg::table::Table;

use super::snapshots::load_target;
use crate::catalog::IcebergCatalog;
use crate::io_runtime;
use crate::storage::location::LocationMap;

/// The metadata tables there are, by Spark's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataKind {
    /// Every snapshot of the table.
    Snapshots,
    /// The snapshot log: which snapshot was current when.
    History,
    /// The metadata files the table has had, the current one last.
    MetadataLogEntries,
    /// Branches and tags.
    Refs,
    /// The manifests of a snapshot.
    Manifests,
    /// The manifests of every snapshot.
    AllManifests,
    /// The live data and delete files of a snapshot.
    Files,
    /// The live data files of a snapshot.
    DataFiles,
    /// The live delete files of a snapshot.
    DeleteFiles,
    /// The live files of every snapshot's manifests.
    AllFiles,
    /// The live data files of every snapshot's manifests.
    AllDataFiles,
    /// The live delete files of every snapshot's manifests.
    AllDeleteFiles,
    /// The manifest entries of a snapshot (added, existing and deleted).
    Entries,
    /// The manifest entries of every snapshot's manifests.
    AllEntries,
    /// Per partition, the live files of a snapshot counted.
    Partitions,
    /// Every position the live position delete files and deletion vectors of a snapshot
    /// delete.
    PositionDeletes,
}

const KINDS: [(&str, MetadataKind); 16] = [
    ("snapshots", MetadataKind::Snapshots),
    ("history", MetadataKind::History),
    ("metadata_log_entries", MetadataKind::MetadataLogEntries),
    ("refs", MetadataKind::Refs),
    ("manifests", MetadataKind::Manifests),
    ("all_manifests", MetadataKind::AllManifests),
    ("files", MetadataKind::Files),
    ("data_files", MetadataKind::DataFiles),
    ("delete_files", MetadataKind::DeleteFiles),
    ("all_files", MetadataKind::AllFiles),
    ("all_data_files", MetadataKind::AllDataFiles),
    ("all_delete_files", MetadataKind::AllDeleteFiles),
    ("entries", MetadataKind::Entries),
    ("all_entries", MetadataKind::AllEntries),
    ("partitions", MetadataKind::Partitions),
    ("position_deletes", MetadataKind::PositionDeletes),
];

impl MetadataKind {
    /// The kind Spark names `name` (any case).
    pub fn parse(name: &str) -> Option<Self> {
        let lower = name.to_ascii_lowercase();
        KINDS.iter().find(|(n, _)| *n == lower).map(|(_, k)| *k)
    }

    /// Spark's name of the table.
    pub fn name(self) -> &'static str {
        KINDS
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .unwrap_or("unknown")
    }

    /// Whether the table reads the manifests of every snapshot (rather than one's).
    fn every_snapshot(self) -> bool {
        matches!(
            self,
            Self::AllManifests
                | Self::AllFiles
                | Self::AllDataFiles
                | Self::AllDeleteFiles
                | Self::AllEntries
        )
    }

    /// The names there are, for messages.
    fn names() -> String {
        KINDS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    }
}

/// `table$kind`: the table name and the metadata table a name with a `$` asks for (`None` for
/// other names).
pub(crate) fn split_name(name: &str) -> Option<(&str, Result<MetadataKind>)> {
    let (table, kind) = name.rsplit_once('$')?;
    if table.is_empty() {
        return None;
    }
    let parsed = MetadataKind::parse(kind).ok_or_else(|| {
        DataFusionError::Plan(format!(
            "'{kind}' is not a metadata table (there are: {})",
            MetadataKind::names()
        ))
    });
    Some((table, parsed))
}

/// The timestamps of metadata tables: milliseconds, UTC (Iceberg records milliseconds).
pub(crate) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
}

/// A metadata table of an Iceberg table, as a DataFusion table.
#[derive(Clone)]
pub struct IcebergMetadataTable {
    table: Table,
    kind: MetadataKind,
    /// The snapshot the snapshot-scoped tables read (`None`: the current one).
    snapshot_id: Option<i64>,
    locations: LocationMap,
    schema: SchemaRef,
    /// The plan of a table that is a view over others (`partitions`).
    view: Option<LogicalPlan>,
}

impl fmt::Debug for IcebergMetadataTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IcebergMetadataTable")
            .field("table", self.table.identifier())
            .field("kind", &self.kind)
            .field("snapshot_id", &self.snapshot_id)
            .finish()
    }
}

impl IcebergMetadataTable {
    /// The metadata table `kind` of `table`, for its current snapshot.
    pub fn try_new(table: Table, kind: MetadataKind) -> Result<Self> {
        let schema = match kind {
            MetadataKind::Snapshots
            | MetadataKind::History
            | MetadataKind::MetadataLogEntries
            | MetadataKind::Refs => history::schema(kind),
            MetadataKind::Partitions => Arc::new(arrow::datatypes::Schema::empty()),
            MetadataKind::PositionDeletes => position_deletes::schema(&table)?,
            _ => files::schema(table.metadata(), kind)?,
        };
        let mut out = Self {
            table,
            kind,
            snapshot_id: None,
            locations: LocationMap::default(),
            schema,
            view: None,
        };
        out.plan_view()?;
        Ok(out)
    }

    /// Plans the view `kind` is (none for the others).
    fn plan_view(&mut self) -> Result<()> {
        if self.kind != MetadataKind::Partitions {
            return Ok(());
        }
        let partitioned =
            crate::physical_plan::scan::metadata::FileMetadataColumns::of(self.table.metadata())?
                .partition_type()
                .is_some();
        let plan = partitions::plan(&self.table, &self.locations, self.snapshot_id, partitioned)?;
        self.schema = Arc::new(plan.schema().as_arrow().clone());
        self.view = Some(plan);
        Ok(())
    }

    /// Reads the snapshot `snapshot_id` (the tables of one snapshot: `manifests`, `files`,
    /// `entries` and their kin).
    pub fn with_snapshot_id(mut self, snapshot_id: i64) -> Result<Self> {
        if self.table.metadata().snapshot_by_id(snapshot_id).is_none() {
            return Err(DataFusionError::Plan(format!(
                "table '{}' has no snapshot {snapshot_id}",
                self.table.identifier()
            )));
        }
        self.snapshot_id = Some(snapshot_id);
        self.plan_view()?;
        Ok(self)
    }

    /// Reads the table's files through `locations` (a table opened by path).
    pub fn with_locations(mut self, locations: LocationMap) -> Result<Self> {
        self.locations = locations;
        self.plan_view()?;
        Ok(self)
    }

    /// The metadata table's kind.
    pub fn kind(&self) -> MetadataKind {
        self.kind
    }
}

#[async_trait]
impl TableProvider for IcebergMetadataTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn get_logical_plan(&'_ self) -> Option<std::borrow::Cow<'_, LogicalPlan>> {
        self.view.as_ref().map(std::borrow::Cow::Borrowed)
    }

    /// Filters reach the scan of the file tables, which skips the manifests they rule out by
    /// content and partition summaries (DataFusion still applies them to the rows).
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<datafusion::logical_expr::TableProviderFilterPushDown>> {
        Ok(vec![
            datafusion::logical_expr::TableProviderFilterPushDown::Inexact;
            filters.len()
        ])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(view) = &self.view {
            // (DataFusion inlines the view's plan; this is for callers that scan it.)
            let mut plan = LogicalPlanBuilder::from(view.clone());
            if let Some(p) = projection {
                let columns: Vec<Expr> = p
                    .iter()
                    .map(|i| {
                        Expr::Column(datafusion::common::Column::from(
                            view.schema().qualified_field(*i),
                        ))
                    })
                    .collect();
                plan = plan.project(columns)?;
            }
            if let Some(n) = limit {
                plan = plan.limit(0, Some(n))?;
            }
            return state.create_physical_plan(&plan.build()?).await;
        }
        // `readable_metrics` is built only when read (it is the costly column).
        let readable = match (self.schema.index_of("readable_metrics"), projection) {
            (Ok(at), Some(p)) => p.contains(&at),
            (Ok(_), None) => true,
            (Err(_), _) => false,
        };
        let filter = prune::ManifestFilter::new(filters);
        let stream: Arc<dyn PartitionStream> = Arc::new(Rows(self.clone(), readable, filter));
        Ok(Arc::new(StreamingTableExec::try_new(
            Arc::clone(&self.schema),
            vec![stream],
            projection,
            vec![],
            false,
            limit,
        )?))
    }
}

/// The rows of a metadata table, produced when the scan runs; whether `readable_metrics` is
/// read (else it is NULL); the manifests the filters let a file table skip.
#[derive(Debug)]
struct Rows(IcebergMetadataTable, bool, prune::ManifestFilter);

impl PartitionStream for Rows {
    fn schema(&self) -> &SchemaRef {
        &self.0.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let t = &self.0;
        let schema = Arc::clone(&t.schema);
        match t.kind {
            MetadataKind::Snapshots
            | MetadataKind::History
            | MetadataKind::MetadataLogEntries
            | MetadataKind::Refs => {
                let batch = history::batch(&t.table, t.kind, &schema);
                Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::once(async move { batch }),
                ))
            }
            MetadataKind::PositionDeletes => {
                let stream = position_deletes::stream(
                    t.table.clone(),
                    t.locations.clone(),
                    t.snapshot_id,
                    Arc::clone(&schema),
                );
                Box::pin(RecordBatchStreamAdapter::new(schema, stream))
            }
            kind => {
                let stream = files::stream(
                    t.table.clone(),
                    t.locations.clone(),
                    kind,
                    t.snapshot_id,
                    Arc::clone(&schema),
                    self.1,
                    self.2.clone(),
                );
                Box::pin(RecordBatchStreamAdapter::new(schema, stream))
            }
        }
    }
}

/// The `iceberg_metadata('<table or path>', '<kind>' [, 'snapshot_id', id | 'ref', name])`
/// table function.
#[derive(Debug, Default)]
pub struct IcebergMetadataFunction {
    catalog: Option<Arc<dyn IcebergCatalog>>,
}

impl IcebergMetadataFunction {
    /// A function that resolves catalog table names through `catalog` (paths always work).
    pub fn new(catalog: Option<Arc<dyn IcebergCatalog>>) -> Self {
        Self { catalog }
    }
}

fn text(e: &Expr, what: &str) -> Result<String> {
    super::function::string_of(e, "iceberg_metadata", what)
}

impl TableFunctionImpl for IcebergMetadataFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        const USAGE: &str = "iceberg_metadata('<table or path>', '<metadata table>' \
                             [, 'snapshot_id', <id> | 'ref', '<branch or tag>'])";
        let (target, kind, pin) = match args {
            [t, k] => (t, k, None),
            [t, k, key, value] => (t, k, Some((key, value))),
            _ => return Err(DataFusionError::Plan(USAGE.into())),
        };
        let target = text(target, "the table")?;
        let name = text(kind, "the metadata table")?;
        let kind = MetadataKind::parse(&name).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "'{name}' is not a metadata table (there are: {})",
                MetadataKind::names()
            ))
        })?;
        let catalog = self.catalog.clone();
        let locations = LocationMap::default();
        let (table, _) = {
            let locations = locations.clone();
            io_runtime::block_on(async move { load_target(&target, catalog, &locations).await })?
        };
        let snapshot_id = match pin {
            None => None,
            Some((key, value)) => {
                let key = text(key, "an option name")?.to_ascii_lowercase();
                let md = table.metadata();
                match key.as_str() {
                    "snapshot_id" | "snapshot-id" => Some(super::function::integer_of(
                        value,
                        "iceberg_metadata",
                        "snapshot_id",
                    )?),
                    "ref" | "branch" | "tag" => {
                        let name = text(value, "ref")?;
                        let snapshot = md.snapshot_for_ref(&name).ok_or_else(|| {
                            DataFusionError::Plan(format!(
                                "table '{}' has no branch or tag '{name}'",
                                table.identifier()
                            ))
                        })?;
                        Some(snapshot.snapshot_id())
                    }
                    other => {
                        return Err(DataFusionError::Plan(format!(
                            "iceberg_metadata: unknown option '{other}' ({USAGE})"
                        )))
                    }
                }
            }
        };
        let mut provider = IcebergMetadataTable::try_new(table, kind)?.with_locations(locations)?;
        if let Some(id) = snapshot_id {
            provider = provider.with_snapshot_id(id)?;
        }
        Ok(Arc::new(provider))
    }
}
