//! DataFusion's catalog traits over the SQL catalog: namespaces are schemas, Iceberg tables are
//! tables. DDL that DataFusion runs itself (`CREATE SCHEMA`, `CREATE TABLE`, `CREATE TABLE AS`,
//! `DROP TABLE`, `DROP SCHEMA`) lands here and creates or drops Iceberg objects.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, UrlTableFactory};
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::dml::InsertOp;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};

use super::files::{names_a_file, FilesInPlace};
use super::{IcebergCatalog, MetadataStore};
use crate::io_runtime;
use crate::table::{IcebergTableProvider, TableDefinition};

fn namespace(name: &str) -> Result<NamespaceIdent> {
    NamespaceIdent::from_strs(name.split('.')).map_err(|e| DataFusionError::External(Box::new(e)))
}

/// A DataFusion catalog backed by an Iceberg catalog ([`SqlCatalog`](super::SqlCatalog) or
/// [`RestCatalog`](super::RestCatalog)).
///
/// Tables over files that are not Iceberg tables (`CREATE EXTERNAL TABLE x STORED AS PARQUET |
/// CSV | JSON LOCATION '..'`, DataFusion's listing tables) are kept by this provider, not the
/// catalog: they live as long as the session that made them, under the name given, as
/// `datafusion-cli` keeps them.
#[derive(Debug, Clone)]
pub struct IcebergCatalogProvider {
    catalog: Arc<dyn IcebergCatalog>,
    local: LocalTables,
    /// Reads a file named in place of a table (`SELECT * FROM 'data/f.parquet'`).
    files: Option<Arc<dyn UrlTableFactory>>,
}

/// Session-local tables by namespace and name.
type LocalTables =
    Arc<std::sync::Mutex<HashMap<NamespaceIdent, HashMap<String, Arc<dyn TableProvider>>>>>;

impl IcebergCatalogProvider {
    /// Wraps a catalog.
    pub fn new(catalog: Arc<dyn IcebergCatalog>) -> Self {
        Self {
            catalog,
            local: LocalTables::default(),
            files: None,
        }
    }

    /// Reads a file or directory named in place of a table (`SELECT * FROM 'data/f.parquet'`,
    /// as `datafusion-cli` does) through `files` (DataFusion's `DynamicListTableFactory` of the
    /// session), read-only.
    pub fn with_files(mut self, files: Arc<dyn UrlTableFactory>) -> Self {
        self.files = Some(files);
        self
    }

    fn schema_provider(
        &self,
        namespace: NamespaceIdent,
        created_on_use: bool,
    ) -> Arc<IcebergSchemaProvider> {
        Arc::new(IcebergSchemaProvider {
            catalog: Arc::clone(&self.catalog),
            namespace,
            created_on_use,
            local: Arc::clone(&self.local),
            files: self.files.clone(),
        })
    }

    /// The underlying catalog.
    pub fn catalog(&self) -> &Arc<dyn IcebergCatalog> {
        &self.catalog
    }
}

impl CatalogProvider for IcebergCatalogProvider {
    fn schema_names(&self) -> Vec<String> {
        let catalog = Arc::clone(&self.catalog);
        match io_runtime::block_on(async move { catalog.list_namespaces().await }) {
            Ok(list) => list.iter().map(|ns| ns.as_ref().join(".")).collect(),
            Err(e) => {
                log::error!("listing namespaces failed: {e}");
                vec![]
            }
        }
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let ns = namespace(name).ok()?;
        // A table of the namespace loaded for the statement being planned: it exists.
        if super::prefetch::holds_namespace(&self.catalog, &ns) {
            return Some(self.schema_provider(ns, false));
        }
        let catalog = Arc::clone(&self.catalog);
        let probe = ns.clone();
        match io_runtime::block_on(async move { catalog.namespace_exists(&probe).await }) {
            Ok(true) => Some(self.schema_provider(ns, false)),
            // The session's default namespace is there before anything is in it (as Spark's
            // `default`): created with its first table.
            Ok(false) if name == DEFAULT_NAMESPACE => Some(self.schema_provider(ns, true)),
            Ok(false) => None,
            Err(e) => {
                log::error!("looking up namespace '{name}' failed: {e}");
                None
            }
        }
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        if !schema.table_names().is_empty() {
            return Err(DataFusionError::NotImplemented(
                "registering a schema that already holds tables in an Iceberg catalog".into(),
            ));
        }
        let ns = namespace(name)?;
        let catalog = Arc::clone(&self.catalog);
        io_runtime::block_on(async move { catalog.create_namespace(&ns, HashMap::new()).await })?;
        Ok(None)
    }

    fn deregister_schema(
        &self,
        name: &str,
        cascade: bool,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        let ns = namespace(name)?;
        let catalog = Arc::clone(&self.catalog);
        let target = ns.clone();
        io_runtime::block_on(async move {
            if cascade {
                for t in catalog.list_tables(&target).await? {
                    catalog.drop_table(&t).await?;
                }
            }
            catalog.drop_namespace(&target).await
        })?;
        Ok(Some(Arc::new(IcebergSchemaProvider::new(
            Arc::clone(&self.catalog),
            ns,
        ))))
    }
}

/// The tables of one Iceberg namespace, as a DataFusion schema.
#[derive(Debug, Clone)]
pub struct IcebergSchemaProvider {
    catalog: Arc<dyn IcebergCatalog>,
    namespace: NamespaceIdent,
    /// The namespace does not exist yet: the first table created in it creates it (the
    /// session's default namespace, [`DEFAULT_NAMESPACE`]).
    created_on_use: bool,
    /// The session's tables over other files (see [`IcebergCatalogProvider`]).
    local: LocalTables,
    /// Reads a file named in place of a table.
    files: Option<Arc<dyn UrlTableFactory>>,
}

/// The namespace unqualified table names resolve to (DataFusion's and Spark's `default`). On a
/// catalog without it, it is created with the first table created in it.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Creates `namespace` in `catalog` unless it is there.
pub(crate) async fn ensure_namespace(
    catalog: &Arc<dyn IcebergCatalog>,
    namespace: &NamespaceIdent,
) -> Result<()> {
    if !catalog.namespace_exists(namespace).await? {
        catalog.create_namespace(namespace, HashMap::new()).await?;
    }
    Ok(())
}

impl IcebergSchemaProvider {
    /// The schema for `namespace` of `catalog`.
    pub fn new(catalog: Arc<dyn IcebergCatalog>, namespace: NamespaceIdent) -> Self {
        Self {
            catalog,
            namespace,
            created_on_use: false,
            local: LocalTables::default(),
            files: None,
        }
    }

    fn ident(&self, name: &str) -> TableIdent {
        TableIdent::new(self.namespace.clone(), name.to_string())
    }

    /// The session-local table `name` of this namespace, if there is one.
    fn local(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        local.get(&self.namespace)?.get(name).cloned()
    }
}

/// Creates an Iceberg table shaped like `source` and appends `source`'s rows (plain DataFusion
/// `CREATE TABLE` / `CREATE TABLE AS`, which hand over an in-memory table).
async fn create_from_provider(
    catalog: Arc<dyn IcebergCatalog>,
    ident: TableIdent,
    source: Arc<dyn TableProvider>,
) -> Result<()> {
    let def = TableDefinition::new(source.schema());
    let table = catalog
        .create_table(ident.namespace(), def.to_creation(ident.name())?)
        .await?;
    let metadata_file = table.metadata_location().map(str::to_string);
    let filled = fill(Arc::clone(&catalog), table, source).await;
    if let Err(e) = filled {
        // The table was created but not filled: remove it, so the statement has no effect.
        let _ = catalog.drop_table(&ident).await;
        if let Some(f) = metadata_file {
            let _ = catalog.file_io().delete(&f).await;
        }
        return Err(e);
    }
    Ok(())
}

/// Appends the rows of `source` to the new `table`.
async fn fill(
    catalog: Arc<dyn IcebergCatalog>,
    table: Table,
    source: Arc<dyn TableProvider>,
) -> Result<()> {
    let store: Arc<dyn MetadataStore> = catalog.clone();
    let provider = IcebergTableProvider::try_new(table, Some(store))?;
    let ctx = SessionContext::new();
    let state = ctx.state();
    let input = source.scan(&state, None, &[], None).await?;
    let has_rows = !matches!(
        datafusion::physical_plan::StatisticsContext::new()
            .compute(
                input.as_ref(),
                &datafusion::physical_plan::StatisticsArgs::new()
            )?
            .num_rows
            .get_value(),
        Some(0)
    );
    if has_rows {
        let plan = provider
            .insert_into(&state, input, InsertOp::Append)
            .await?;
        let optimized = optimize(&state, plan)?;
        datafusion::physical_plan::collect(optimized, ctx.task_ctx()).await?;
    }
    Ok(())
}

/// Runs DataFusion's physical optimizer over a hand-built plan (to add sorts and coalescing).
fn optimize(
    state: &datafusion::execution::SessionState,
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    let mut plan = plan;
    for rule in state.physical_optimizers() {
        plan = rule.optimize(plan, state.config_options())?;
    }
    Ok(plan)
}

#[async_trait]
impl SchemaProvider for IcebergSchemaProvider {
    fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = {
            let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
            local
                .get(&self.namespace)
                .map(|t| t.keys().cloned().collect())
                .unwrap_or_default()
        };
        if self.created_on_use {
            return names;
        }
        names.extend(self.catalog_table_names());
        names
    }

    /// Listing a namespace's tables (`SHOW TABLES`, `information_schema.tables`) asks each
    /// table's type: every table of an Iceberg catalog is a base table, answered from the
    /// catalog's listing without loading metadata, so one table whose metadata cannot be read
    /// does not take the listing down.
    async fn table_type(&self, name: &str) -> Result<Option<datafusion::datasource::TableType>> {
        if let Some(local) = self.local(name) {
            return Ok(Some(local.table_type()));
        }
        self.catalog_table_type(name).await
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(local) = self.local(name) {
            return Ok(Some(local));
        }
        // `t$files`: a metadata table of the table `t`.
        if let Some((base, kind)) = crate::table::metadata::split_name(name) {
            if let Some(table) = self.catalog_table(base).await? {
                let kind = match kind {
                    Ok(kind) => kind,
                    // A table whose own name holds a `$`, else the unknown kind.
                    Err(e) => return self.catalog_table(name).await?.map(Some).ok_or(e),
                };
                let Some(iceberg) = table.downcast_ref::<IcebergTableProvider>() else {
                    return Ok(None);
                };
                let metadata =
                    crate::table::IcebergMetadataTable::try_new(iceberg.table().clone(), kind)?;
                return Ok(Some(Arc::new(metadata)));
            }
        }
        // `t.branch_b`, `t.tag_x`, `t.snapshot_id_1`, `t.at_timestamp_1700000000000`: a
        // version of the table `t` (as Spark's catalog names them), unless a table has the name.
        for (base, version) in crate::table::version::split_name(name) {
            let Some(table) = self.catalog_table(base).await? else {
                continue;
            };
            if let Some(exact) = self.catalog_table(name).await? {
                return Ok(Some(exact));
            }
            let Some(iceberg) = table.downcast_ref::<IcebergTableProvider>() else {
                return Ok(None);
            };
            return Ok(Some(Arc::new(version.apply(iceberg.clone())?)));
        }
        if let Some(files) = self.files.as_ref().filter(|_| names_a_file(name)) {
            if let Some(table) = files.try_new(name).await? {
                return Ok(Some(Arc::new(FilesInPlace::new(table, name))));
            }
        }
        self.catalog_table(name).await
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if table.downcast_ref::<ListingTable>().is_some() {
            if self.local(&name).is_some() || self.catalog_table_exist(&name) {
                return Err(DataFusionError::Plan(format!(
                    "table '{}' already exists",
                    self.ident(&name)
                )));
            }
            let read_only = Arc::new(FilesInPlace::new(table, self.ident(&name).to_string()));
            let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
            local
                .entry(self.namespace.clone())
                .or_default()
                .insert(name, read_only);
            return Ok(None);
        }
        self.register_catalog_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        {
            let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(t) = local.get_mut(&self.namespace).and_then(|t| t.remove(name)) {
                return Ok(Some(t));
            }
        }
        self.deregister_catalog_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.local(name).is_some() || self.catalog_table_exist(name)
    }
}

impl IcebergSchemaProvider {
    fn catalog_table_names(&self) -> Vec<String> {
        let catalog = Arc::clone(&self.catalog);
        let ns = self.namespace.clone();
        match io_runtime::block_on(async move { catalog.list_tables(&ns).await }) {
            Ok(list) => list.into_iter().map(|t| t.name().to_string()).collect(),
            Err(e) => {
                log::error!("listing tables failed: {e}");
                vec![]
            }
        }
    }

    /// Every table of an Iceberg catalog is a base table, answered from the catalog's listing
    /// without loading metadata, so one table whose metadata cannot be read does not take a
    /// listing down.
    async fn catalog_table_type(
        &self,
        name: &str,
    ) -> Result<Option<datafusion::datasource::TableType>> {
        let exists = match self.catalog.table_exists(&self.ident(name)).await {
            Ok(exists) => exists,
            Err(e) => {
                // A REST catalog answers existence by loading: the name was listed, so the
                // table is there, and reading it will name the failure.
                log::warn!(
                    "table '{}.{name}' cannot be loaded: {e}",
                    self.namespace.to_url_string()
                );
                true
            }
        };
        Ok(exists.then_some(datafusion::datasource::TableType::Base))
    }

    async fn catalog_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let ident = self.ident(name);
        let table = match super::prefetch::table(&self.catalog, &ident) {
            Some(table) => table,
            None => match self.catalog.try_load_table(&ident).await? {
                Some(table) => table,
                None => return Ok(None),
            },
        };
        let store: Arc<dyn MetadataStore> = self.catalog.clone();
        Ok(Some(Arc::new(IcebergTableProvider::try_new(
            table,
            Some(store),
        )?)))
    }

    fn register_catalog_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        let ident = self.ident(&name);
        if let Some(iceberg) = table.downcast_ref::<IcebergTableProvider>() {
            // Created by `CREATE EXTERNAL TABLE ... STORED AS ICEBERG`: already in the catalog.
            if iceberg.table().identifier() == &ident {
                return Ok(None);
            }
            return Err(DataFusionError::NotImplemented(
                "registering an Iceberg table under another name".into(),
            ));
        }
        if table.table_type() != datafusion::datasource::TableType::Base {
            return Err(DataFusionError::NotImplemented(format!(
                "an Iceberg catalog holds tables only; cannot register a {} named '{name}'",
                table.table_type()
            )));
        }
        let catalog = Arc::clone(&self.catalog);
        let create = self.created_on_use;
        io_runtime::block_on(async move {
            if create {
                ensure_namespace(&catalog, ident.namespace()).await?;
            }
            create_from_provider(catalog, ident, table).await
        })?;
        Ok(None)
    }

    fn deregister_catalog_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let ident = self.ident(name);
        let catalog = Arc::clone(&self.catalog);
        io_runtime::block_on(async move {
            if !catalog.table_exists(&ident).await? {
                return Ok(None);
            }
            let table = catalog.load_table(&ident).await?;
            catalog.drop_table(&ident).await?;
            let store: Arc<dyn MetadataStore> = catalog.clone();
            let provider: Arc<dyn TableProvider> =
                Arc::new(IcebergTableProvider::try_new(table, Some(store))?);
            Ok(Some(provider))
        })
    }

    fn catalog_table_exist(&self, name: &str) -> bool {
        let ident = self.ident(name);
        let catalog = Arc::clone(&self.catalog);
        match io_runtime::block_on(async move { catalog.table_exists(&ident).await }) {
            Ok(b) => b,
            Err(e) => {
                log::error!("looking up table '{name}' failed: {e}");
                false
            }
        }
    }
}
