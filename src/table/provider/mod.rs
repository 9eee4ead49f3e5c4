//! [`IcebergTableProvider`]: reads a snapshot through DataFusion's parquet machinery and appends
//! through [`DataFileWriterExec`] → [`CommitExec`].

mod versions;

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::DFSchemaRef;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::dml::{InsertOp, MergeIntoClause};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::LexRequirement;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;
use iceberg::table::Table;

use crate::commit::MetadataStore;
use crate::error::IcebergResultExt;
use crate::file_planning::{plan_files_pruned, unprunable_columns, FileFilter};
use crate::physical_plan::commit::CommitExec;
use crate::physical_plan::scan::lineage;
use crate::physical_plan::scan::plan::plan_scan;
use crate::physical_plan::scan::request::ScanRequest;
use crate::physical_plan::scan::schema::arrow_schema;
use crate::physical_plan::scan::{IcebergScanExec, ScanSummary};
use crate::physical_plan::write::{sort_requirement, DataFileWriterExec, WrittenFiles};
use crate::storage::location::LocationMap;
use crate::storage::{ObjectStores, StorageOptions};
use crate::IcebergOptions;

/// An Iceberg table as a DataFusion [`TableProvider`].
///
/// Scans read the snapshot the provider was created with (the table's current snapshot unless a
/// snapshot id is pinned). `INSERT` writes new files and commits an append on top of the table's
/// latest version, through the [`MetadataStore`] the provider was given.
#[derive(Debug, Clone)]
pub struct IcebergTableProvider {
    table: Table,
    snapshot_id: Option<i64>,
    /// Whether the pinned snapshot is read with its own schema (snapshots, tags, times) rather
    /// than the table's current one (branches).
    snapshot_schema: bool,
    store: Option<Arc<dyn MetadataStore>>,
    schema: SchemaRef,
    locations: LocationMap,
    stores: Arc<ObjectStores>,
    /// Whether the schema ends with the row lineage columns.
    row_lineage: bool,
    /// Whether the metadata columns (`_file`, `_pos`, `_spec_id`, `_partition`) follow.
    metadata_columns: bool,
    /// Whether `INSERT` commits once however often its commit runs (a statement id in the
    /// snapshot): for hosts that retry tasks.
    idempotent_commits: bool,
    /// The `write-default` of each top-level column that has one (format v3): what an
    /// `INSERT` that leaves the column out writes.
    write_defaults: std::collections::HashMap<String, datafusion::logical_expr::Expr>,
    /// What `INSERT OVERWRITE` replaces (`None`: as the session's `iceberg.overwrite_mode`
    /// says).
    overwrite: Option<crate::dml::OverwriteScope>,
    /// The branch this provider reads and writes ([`Self::with_branch`]; `None`: `main`, or
    /// the session's write branch on a table with `write.wap.enabled`).
    branch: Option<String>,
}

/// The `write-default` values of `schema`'s top-level columns, as SQL literals.
fn write_defaults(
    schema: &iceberg::spec::Schema,
) -> std::collections::HashMap<String, datafusion::logical_expr::Expr> {
    schema
        .as_struct()
        .fields()
        .iter()
        .filter_map(|f| {
            let (iceberg::spec::Type::Primitive(t), Some(iceberg::spec::Literal::Primitive(v))) =
                (f.field_type.as_ref(), f.write_default.as_ref())
            else {
                return None;
            };
            let value = crate::file_planning::literal::literal_scalar(t, v)?;
            Some((f.name.clone(), datafusion::logical_expr::lit(value)))
        })
        .collect()
}

/// The data file count a snapshot's summary records (0 when it does not say).
fn snapshot_file_count(snapshot: &iceberg::spec::SnapshotRef) -> usize {
    snapshot
        .summary()
        .additional_properties
        .get("total-data-files")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// How an [`IcebergTableProvider`] reads its table beyond the table itself (see
/// [`IcebergTableProvider::pin`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProviderPin {
    /// The pinned snapshot (`None`: the table's current one).
    pub snapshot_id: Option<i64>,
    /// Whether the pinned snapshot is read with its own schema (snapshots, tags, times) rather
    /// than the table's current one (branches).
    pub snapshot_schema: bool,
    /// Whether the row lineage columns follow the table's columns.
    pub row_lineage: bool,
    /// Whether the provider accepts writes (it has the table's metadata store).
    pub writable: bool,
    /// Whether the metadata columns follow (see [`IcebergTableProvider::with_metadata_columns`]).
    #[serde(default)]
    pub metadata_columns: bool,
    /// The branch a writable provider writes ([`IcebergTableProvider::with_branch`]).
    #[serde(default)]
    pub branch: Option<String>,
}

impl IcebergTableProvider {
    /// A provider over `table`. With a `store`, the table accepts `INSERT`.
    pub fn try_new(table: Table, store: Option<Arc<dyn MetadataStore>>) -> Result<Self> {
        let schema = arrow_schema(table.metadata().current_schema())?;
        let write_defaults = write_defaults(table.metadata().current_schema());
        let stores = match &store {
            Some(store) => Arc::clone(store.object_stores()),
            None => ObjectStores::standalone(StorageOptions::default()),
        };
        Ok(Self {
            table,
            snapshot_id: None,
            snapshot_schema: false,
            store,
            schema,
            locations: LocationMap::default(),
            stores,
            row_lineage: false,
            metadata_columns: false,
            idempotent_commits: false,
            write_defaults,
            overwrite: None,
            branch: None,
        })
    }

    /// Makes `INSERT OVERWRITE` into this provider replace the rows `filter` (a condition on
    /// the table's columns) selects, as pyiceberg's `overwrite(df, overwrite_filter)` and
    /// Delta's `INSERT INTO t REPLACE WHERE filter`: files whose every row matches go whole,
    /// files that match in part are rewritten without the matching rows (copy-on-write), and
    /// the new rows, which must all match `filter`, are added, in one snapshot.
    ///
    /// ```no_run
    /// # async fn f(provider: iceberg_exec::IcebergTableProvider, ctx: datafusion::prelude::SessionContext) -> datafusion::error::Result<()> {
    /// use std::sync::Arc;
    /// use datafusion::datasource::provider_as_source;
    /// use datafusion::logical_expr::{col, dml::InsertOp, lit, LogicalPlanBuilder};
    /// let rows = ctx.sql("SELECT 1 AS id, 'a' AS k").await?.into_unoptimized_plan();
    /// let target = provider_as_source(Arc::new(provider.with_overwrite_filter(col("k").eq(lit("a")))));
    /// let plan = LogicalPlanBuilder::insert_into(rows, "ns.t", target, InsertOp::Overwrite)?.build()?;
    /// ctx.execute_logical_plan(plan).await?.collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_overwrite_filter(mut self, filter: Expr) -> Self {
        self.overwrite = Some(crate::dml::OverwriteScope::Filter(Some(filter)));
        self
    }

    /// Makes `INSERT OVERWRITE` into this provider replace the partitions its rows fall into
    /// (of the table's current spec; an unpartitioned table is replaced whole), whatever the
    /// session's `iceberg.overwrite_mode` says: pyiceberg's `dynamic_partition_overwrite` and
    /// Spark's dynamic mode.
    pub fn with_dynamic_overwrite(mut self) -> Self {
        self.overwrite = Some(crate::dml::OverwriteScope::Partitions);
        self
    }

    /// Makes `INSERT` commit once however often its commit runs: each statement gets an id,
    /// recorded in its snapshot, and a commit that finds it commits nothing more. For hosts
    /// that run the committing task again after a failure (Ballista).
    pub fn with_idempotent_commits(mut self) -> Self {
        self.idempotent_commits = true;
        self
    }

    /// Reads files through `stores` (the table's metadata store brings its own; a table opened
    /// by path uses the environment's S3 settings unless given these).
    pub fn with_object_stores(mut self, stores: Arc<ObjectStores>) -> Self {
        self.stores = stores;
        self
    }

    /// Resolves recorded file locations through `locations` (tables whose files moved).
    pub fn with_locations(mut self, locations: LocationMap) -> Self {
        self.locations = locations;
        self
    }

    /// Adds the row lineage columns of a format v3 table after the table's columns:
    /// `_row_id` (the row's id, kept when a rewrite moves the row) and
    /// `_last_updated_sequence_number` (the sequence number of the commit that added or last
    /// changed it). Both are NULL for rows written before the table had row lineage that no v3
    /// commit has given ids yet. The provider becomes read-only; call this after pinning a
    /// snapshot, branch or time.
    pub fn with_row_lineage(mut self) -> Result<Self> {
        let metadata = self.table.metadata();
        if !lineage::has_row_lineage(metadata) {
            return Err(DataFusionError::Plan(format!(
                "table '{}' has no row lineage: it is format version {}, and row lineage needs 3 \
                 (ALTER TABLE .. SET TBLPROPERTIES ('format-version' = '3'))",
                self.table.identifier(),
                metadata.format_version() as u8
            )));
        }
        if !self.row_lineage {
            self.schema =
                arrow_schema(&lineage::with_lineage_fields(self.read_schema()?.as_ref())?)?;
            self.row_lineage = true;
        }
        self.store = None;
        Ok(self)
    }

    /// Adds Spark's metadata columns after the table's columns (and after the row lineage
    /// columns, which a format v3 table gets too): `_file` (the data file's location as
    /// recorded), `_pos` (the row's position in it), `_spec_id` (the partition spec the file was
    /// written for) and `_partition` (its partition tuple: a struct of every partition field the
    /// table's specs have had, NULL where the file's spec lacks one; only on tables with
    /// partition fields). The provider becomes read-only; call this after pinning a snapshot,
    /// branch or time. SQL through [`IcebergSession::sql`](crate::IcebergSession::sql) reads a
    /// table this way only in statements that name a metadata column.
    pub fn with_metadata_columns(mut self) -> Result<Self> {
        if self.metadata_columns {
            return Ok(self);
        }
        if lineage::has_row_lineage(self.table.metadata()) && !self.row_lineage {
            self = self.with_row_lineage()?;
        }
        let appended =
            crate::physical_plan::scan::metadata::appended_fields(self.table.metadata())?;
        for f in &appended {
            if self.schema.field_with_name(f.name()).is_ok() {
                return Err(DataFusionError::Plan(format!(
                    "table '{}' has a column named '{}', which the metadata columns reserve",
                    self.table.identifier(),
                    f.name()
                )));
            }
        }
        let mut fields: Vec<FieldRef> = self.schema.fields().iter().cloned().collect();
        fields.extend(appended);
        self.schema = Arc::new(arrow::datatypes::Schema::new(fields));
        self.metadata_columns = true;
        self.store = None;
        Ok(self)
    }

    /// The provider `DELETE`/`UPDATE` change through when their condition names metadata
    /// columns: writable, the table's columns (with the row lineage ones on v3) then `_file`,
    /// `_pos`, `_spec_id`, `_partition`, for conditions only (no `INSERT`, no `MERGE`).
    pub(crate) fn for_conditions_on_metadata_columns(mut self) -> Result<Self> {
        let pinned = self.snapshot_id.is_some() && self.branch.is_none();
        if pinned || self.row_lineage || self.metadata_columns {
            return Err(DataFusionError::Plan(format!(
                "table '{}' is read-only here",
                self.table.identifier()
            )));
        }
        let metadata = self.table.metadata();
        let mut fields: Vec<FieldRef> = match lineage::has_row_lineage(metadata) {
            // Conditions may name the row lineage columns too.
            true => arrow_schema(&lineage::with_lineage_fields(metadata.current_schema())?)?
                .fields()
                .iter()
                .cloned()
                .collect(),
            false => self.schema.fields().iter().cloned().collect(),
        };
        fields.extend(crate::physical_plan::scan::metadata::appended_fields(
            metadata,
        )?);
        self.schema = Arc::new(arrow::datatypes::Schema::new(fields));
        self.metadata_columns = true;
        Ok(self)
    }

    /// The schema rows are read into: the pinned snapshot's, or the table's current one.
    fn read_schema(&self) -> Result<iceberg::spec::SchemaRef> {
        let metadata = self.table.metadata();
        match (self.snapshot_schema, self.snapshot_id) {
            (true, Some(id)) => match metadata.snapshot_by_id(id) {
                Some(s) => s.schema(metadata).df(),
                None => Err(DataFusionError::Plan(format!(
                    "table '{}' has no snapshot {id}",
                    self.table.identifier()
                ))),
            },
            _ => Ok(metadata.current_schema().clone()),
        }
    }

    /// How this provider reads its table beyond the table itself: what a plan codec carries
    /// to rebuild it elsewhere ([`Self::with_pin`]).
    pub fn pin(&self) -> ProviderPin {
        ProviderPin {
            snapshot_id: self.snapshot_id,
            snapshot_schema: self.snapshot_schema,
            row_lineage: self.row_lineage,
            writable: self.store.is_some(),
            metadata_columns: self.metadata_columns,
            branch: self.branch.clone(),
        }
    }

    /// This provider (of the same table, as [`Self::try_new`] made it) reading as `pin` says:
    /// the same snapshot with the same schema, the row lineage columns, read-only unless
    /// `pin.writable`.
    pub fn with_pin(mut self, pin: &ProviderPin) -> Result<Self> {
        if let Some(branch) = &pin.branch {
            self = self.with_branch(branch)?;
            // Its head as the pin saw it.
            if pin.snapshot_id.is_some() {
                self.snapshot_id = pin.snapshot_id;
            }
        } else if let Some(id) = pin.snapshot_id {
            self = self.with_snapshot_id(id)?;
            if !pin.snapshot_schema {
                // A branch: read with the table's current schema.
                self.schema = arrow_schema(self.table.metadata().current_schema())?;
                self.snapshot_schema = false;
            }
        }
        if pin.row_lineage {
            self = self.with_row_lineage()?;
        }
        if pin.metadata_columns {
            self = self.with_metadata_columns()?;
        }
        if !pin.writable {
            self.store = None;
        }
        Ok(self)
    }

    /// The snapshot scans read (`None`: the table has no snapshot yet).
    pub fn snapshot_id(&self) -> Option<i64> {
        self.snapshot_id
            .or_else(|| self.table.metadata().current_snapshot_id())
    }

    /// The table as loaded.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The scan of a provider with metadata columns: the table's (and lineage) columns asked
    /// for are read as usual, with the file's location, its per-file metadata and the row
    /// positions after them when asked for, then put in the order asked for.
    async fn scan_with_metadata(
        &self,
        state: &dyn Session,
        read_schema: &iceberg::spec::SchemaRef,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
        files: &crate::file_planning::ScanFiles,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        use crate::physical_plan::positional_delete::POSITION_COLUMN;
        use crate::physical_plan::scan::metadata::{
            FileMetadataColumns, FILE, PARTITION, POS, SPEC_ID,
        };
        use crate::physical_plan::scan::request::FILE_COLUMN;
        use datafusion::physical_expr::expressions::{CastExpr, Column};
        use datafusion::physical_expr::PhysicalExpr;
        use datafusion::physical_plan::projection::ProjectionExec;

        let metadata = self.table.metadata();
        let file_metadata = FileMetadataColumns::of(metadata)?;
        // `_file`, `_pos`, then the per-file columns.
        let appended = 2 + file_metadata.fields().len();
        let base_len = self.schema.fields().len() - appended;
        let base: SchemaRef = Arc::new(self.schema.project(&(0..base_len).collect::<Vec<_>>())?);
        let requested: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let mut base_projection: Vec<usize> = vec![];
        for &i in requested.iter().filter(|&&i| i < base_len) {
            if !base_projection.contains(&i) {
                base_projection.push(i);
            }
        }
        let names: Vec<&str> = requested
            .iter()
            .filter(|&&i| i >= base_len)
            .map(|&i| self.schema.field(i).name().as_str())
            .collect();
        let per_file = names.iter().any(|n| *n == SPEC_ID || *n == PARTITION);
        let request = ScanRequest {
            table: &self.table,
            read_schema,
            schema: &base,
            projection: Some(&base_projection),
            filtered: !filters.is_empty(),
            limit,
            locations: &self.locations,
            stores: &self.stores,
            file_column: per_file || names.contains(&FILE),
            position_column: names.contains(&POS),
            row_lineage: self.row_lineage,
            file_metadata: per_file.then_some(&file_metadata),
        };
        let plan = plan_scan(state, &request, files).await?;
        let schema = plan.schema();
        let exprs = requested
            .iter()
            .map(|&i| {
                let name = self.schema.field(i).name().clone();
                let expr: Arc<dyn PhysicalExpr> = if i < base_len {
                    let at = base_projection.iter().position(|&b| b == i).unwrap_or(0);
                    Arc::new(Column::new(&name, at))
                } else {
                    let source = match name.as_str() {
                        FILE => FILE_COLUMN,
                        POS => POSITION_COLUMN,
                        other => other,
                    };
                    let column = Arc::new(Column::new(source, schema.index_of(source)?));
                    match name.as_str() {
                        FILE => Arc::new(CastExpr::new(column, DataType::Utf8, None)),
                        _ => column,
                    }
                };
                Ok((expr, name))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }

    /// The table a `DELETE`/`UPDATE` changes (an error when the provider is read-only).
    /// Checks an overwrite filter: a boolean condition on the table's own columns.
    fn check_overwrite_filter(&self, filter: &Expr) -> Result<()> {
        use datafusion::logical_expr::ExprSchemable;
        let schema = datafusion::common::DFSchema::try_from(self.schema.as_ref().clone())?;
        let ty = filter.get_type(&schema).map_err(|e| {
            DataFusionError::Plan(format!(
                "the overwrite filter {filter} is not a condition on table '{}': {e}",
                self.table.identifier()
            ))
        })?;
        if ty != arrow::datatypes::DataType::Boolean {
            return Err(DataFusionError::Plan(format!(
                "the overwrite filter must be a condition, got {ty} for {filter}"
            )));
        }
        Ok(())
    }

    fn dml_target(&self, op: &str, state: &dyn Session) -> Result<crate::dml::DmlTarget<'_>> {
        let Some(store) = &self.store else {
            return Err(DataFusionError::Plan(format!(
                "{op} on table '{}' is not possible: it is read-only here (opened by path or at a \
                 past snapshot)",
                self.table.identifier()
            )));
        };
        crate::commit::metadata_file::refuse_inline_manifests(self.table.metadata())?;
        Ok(crate::dml::DmlTarget {
            table: &self.table,
            store: Arc::clone(store),
            locations: &self.locations,
            write_to: self.write_to(state)?,
        })
    }
}

#[async_trait]
impl TableProvider for IcebergTableProvider {
    fn get_column_default(&self, column: &str) -> Option<&datafusion::logical_expr::Expr> {
        self.write_defaults.get(column)
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // DataFusion keeps a filter above the scan and pushes it into the parquet source, where
        // it prunes row groups and pages; the scan itself does not promise exactness.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let metadata = self.table.metadata();
        let snapshot = match self.snapshot_id {
            Some(id) => metadata.snapshot_by_id(id).cloned(),
            None => self.unpinned_snapshot(state),
        };
        let projected = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => Arc::clone(&self.schema),
        };
        let Some(snapshot) = snapshot else {
            return Ok(Arc::new(EmptyExec::new(projected)));
        };
        let snapshot_schema = snapshot.schema(metadata).df()?;
        let read_schema = match self.snapshot_schema {
            true => snapshot_schema.clone(),
            false => metadata.current_schema().clone(),
        };
        // Filters on the lineage columns do not prune: files hold them for some rows only.
        let mut unprunable = unprunable_columns(metadata, &read_schema, &snapshot_schema);
        if self.metadata_columns {
            unprunable.extend(
                crate::physical_plan::scan::metadata::NAMES
                    .iter()
                    .map(|n| n.to_string()),
            );
        }
        if self.row_lineage {
            unprunable.insert(lineage::ROW_ID.to_string());
            unprunable.insert(lineage::LAST_UPDATED_SEQUENCE_NUMBER.to_string());
        }
        let filter = FileFilter::new(filters, &unprunable, read_schema.clone());
        let summary = ScanSummary {
            table: self.table.identifier().to_string(),
            snapshot_id: snapshot.snapshot_id(),
            total_files: snapshot_file_count(&snapshot),
            scanned_files: 0,
            delete_files: 0,
            predicate: filter.predicate.as_ref().map(|p| p.to_string()),
            streamed_planning: false,
        };
        let threshold = IcebergOptions::from_config(state.config_options()).planning_threshold;
        let files =
            plan_files_pruned(&self.table, &self.locations, &snapshot, &filter, threshold).await?;
        let summary = ScanSummary {
            scanned_files: files.files.len(),
            delete_files: files.delete_file_count(),
            total_files: summary.total_files.max(files.files.len()),
            streamed_planning: files.streamed,
            ..summary
        };
        if files.files.is_empty() {
            return Ok(Arc::new(IcebergScanExec::new(
                Arc::new(EmptyExec::new(projected)),
                summary,
            )));
        }
        let read_schema = match self.row_lineage {
            true => Arc::new(lineage::with_lineage_fields(&read_schema)?),
            false => read_schema,
        };
        if self.metadata_columns {
            let plan = self
                .scan_with_metadata(state, &read_schema, projection, filters, limit, &files)
                .await?;
            return Ok(Arc::new(IcebergScanExec::new(plan, summary)));
        }
        let request = ScanRequest {
            table: &self.table,
            read_schema: &read_schema,
            schema: &self.schema,
            projection,
            filtered: !filters.is_empty(),
            limit,
            locations: &self.locations,
            stores: &self.stores,
            file_column: false,
            position_column: false,
            row_lineage: self.row_lineage,
            file_metadata: None,
        };
        let parquet = plan_scan(state, &request, &files).await?;
        Ok(Arc::new(IcebergScanExec::new(parquet, summary)))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let target = self.dml_target("DELETE", state)?;
        crate::dml::delete::plan_delete(target, state, filters).await
    }

    /// `TRUNCATE [TABLE] t`: a `delete` snapshot that removes every data and delete file from
    /// the manifests, unread (a `DELETE` without a condition).
    async fn truncate(&self, state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        let target = self.dml_target("TRUNCATE", state)?;
        crate::dml::delete::plan_delete(target, state, vec![]).await
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let target = self.dml_target("UPDATE", state)?;
        crate::dml::update::plan_update(target, state, assignments, filters).await
    }

    async fn merge_into(
        &self,
        state: &dyn Session,
        source: Arc<dyn ExecutionPlan>,
        merge_schema: DFSchemaRef,
        on: Expr,
        clauses: Vec<MergeIntoClause>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if self.metadata_columns {
            return Err(DataFusionError::NotImplemented(
                "MERGE with metadata columns in its condition is not supported yet".into(),
            ));
        }
        let target = self.dml_target("MERGE", state)?;
        crate::dml::merge::plan_merge(target, state, source, merge_schema, on, clauses).await
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if self.metadata_columns {
            return Err(DataFusionError::Plan(format!(
                "INSERT into table '{}' read with its metadata columns is not possible",
                self.table.identifier()
            )));
        }
        match insert_op {
            InsertOp::Append => {}
            InsertOp::Overwrite => {
                let scope = match &self.overwrite {
                    Some(crate::dml::OverwriteScope::Filter(Some(f))) => {
                        self.check_overwrite_filter(f)?;
                        crate::dml::OverwriteScope::Filter(Some(f.clone()))
                    }
                    Some(scope) => scope.clone(),
                    None => crate::dml::OverwriteScope::of_session(state)?,
                };
                let target = self.dml_target("INSERT OVERWRITE", state)?;
                return crate::dml::overwrite::plan_overwrite(target, state, input, scope).await;
            }
            InsertOp::Replace => {
                return Err(DataFusionError::NotImplemented(
                    "REPLACE INTO is not supported for Iceberg tables; use MERGE INTO, or \
                     INSERT OVERWRITE"
                        .into(),
                ))
            }
        }
        let Some(store) = &self.store else {
            return Err(DataFusionError::Plan(format!(
                "table '{}' is read-only here (opened by path or at a past snapshot)",
                self.table.identifier()
            )));
        };
        crate::commit::metadata_file::refuse_inline_manifests(self.table.metadata())?;
        let write_to = self.write_to(state)?;
        let sort: Option<LexRequirement> = sort_requirement(&self.table, &input.schema())?;
        let written = WrittenFiles::default();
        let writer = Arc::new(DataFileWriterExec::try_new(
            input,
            self.table.clone(),
            sort,
            written.clone(),
        )?);
        let commit = CommitExec::new(writer, Arc::clone(store), self.table.clone(), written)
            .with_write_to(write_to);
        Ok(Arc::new(match self.idempotent_commits {
            true => commit.with_statement_id(uuid::Uuid::new_v4().to_string()),
            false => commit,
        }))
    }
}
