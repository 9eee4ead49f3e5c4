//! A ready-to-use DataFusion session over an Iceberg warehouse: the SQL catalog registered as the
//! default catalog, `STORED AS ICEBERG` enabled, and an optional memory limit.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use datafusion::catalog::streaming::StreamingTable;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::dynamic_file::DynamicListTableFactory;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionConfig;
use datafusion_session::SessionStore;

use crate::catalog::prefetch::Prefetched;
use crate::catalog::{
    CatalogUri, IcebergCatalog, IcebergCatalogProvider, RestCatalog, SqlCatalog, SqlCatalogConfig,
};
use crate::table::{IcebergScanFunction, IcebergSnapshotsFunction, IcebergTableFactory};

mod writes;

/// Where the warehouse and its catalog live, and how much memory queries may use.
#[derive(Debug, Clone)]
pub struct WarehouseConfig {
    /// Where new tables go: a local directory (created if missing) or an object-store URI
    /// (`s3://bucket/prefix`).
    pub warehouse: String,
    /// Catalog database URI; the SQLite file `<warehouse>/catalog.db` when `None` (a local
    /// warehouse only).
    pub catalog_uri: Option<String>,
    /// Storage properties in Iceberg's names (`s3.endpoint`, `s3.access-key-id`, ...).
    pub properties: std::collections::BTreeMap<String, String>,
    /// Catalog name (the `catalog_name` column, and the DataFusion catalog).
    pub catalog_name: String,
    /// Memory limit for query execution in bytes; unlimited when `None`.
    pub memory_limit: Option<usize>,
}

impl WarehouseConfig {
    /// A local warehouse in `dir` with the default SQLite catalog named `default`.
    pub fn local(dir: impl AsRef<Path>) -> Self {
        Self {
            warehouse: dir.as_ref().display().to_string(),
            catalog_uri: None,
            properties: Default::default(),
            catalog_name: "default".to_string(),
            memory_limit: None,
        }
    }

    /// The catalog `choice` names, as the CLI's options and the Python `Session` name it: a
    /// catalog of pyiceberg's configuration by name (its `uri` picks a REST or SQL catalog, its
    /// `warehouse` applies unless given), with `properties` and `uri` overriding it; else by
    /// `uri` and `warehouse` (default: `./warehouse` with its SQLite catalog).
    pub fn resolve(choice: &CatalogChoice, memory_limit: Option<usize>) -> Result<Self> {
        let mut properties = BTreeMap::new();
        let mut catalog_name = choice
            .catalog_name
            .clone()
            .unwrap_or_else(|| "default".to_string());
        if let Some(name) = &choice.pyiceberg {
            properties = crate::catalog::pyiceberg_catalog(name)?;
            catalog_name = name.clone();
        }
        properties.extend(choice.properties.iter().cloned());
        let catalog_uri = choice.uri.clone().or_else(|| {
            choice
                .pyiceberg
                .as_ref()
                .and_then(|_| properties.remove("uri"))
        });
        if choice.pyiceberg.is_some() && catalog_uri.is_none() {
            return Err(DataFusionError::Configuration(format!(
                "catalog '{catalog_name}' has no uri"
            )));
        }
        let rest = catalog_uri
            .as_deref()
            .is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"));
        let warehouse = match &choice.warehouse {
            Some(w) => w.clone(),
            None if rest => String::new(),
            None => match properties.get("warehouse") {
                Some(w) if choice.pyiceberg.is_some() => w.clone(),
                _ => "./warehouse".to_string(),
            },
        };
        Ok(WarehouseConfig {
            warehouse,
            catalog_uri,
            catalog_name,
            memory_limit,
            properties,
        })
    }

    /// The catalog URI in effect.
    pub fn effective_catalog_uri(&self) -> Result<String> {
        if let Some(uri) = &self.catalog_uri {
            return Ok(uri.clone());
        }
        if crate::storage::remote_scheme(&self.warehouse).is_some() {
            return Err(DataFusionError::Configuration(format!(
                "warehouse '{}' is in an object store: give the catalog's URI too (a SQL \
                 database, or an Iceberg REST catalog)",
                self.warehouse
            )));
        }
        // SQLAlchemy form: three slashes then the path (a fourth slash when it is absolute).
        let local = self
            .warehouse
            .strip_prefix("file://")
            .unwrap_or(&self.warehouse);
        Ok(format!(
            "sqlite:///{}",
            Path::new(local).join("catalog.db").display()
        ))
    }
}

/// How a catalog is chosen (see [`WarehouseConfig::resolve`]).
#[derive(Debug, Clone, Default)]
pub struct CatalogChoice {
    /// A catalog of pyiceberg's configuration (`.pyiceberg.yaml`, `PYICEBERG_CATALOG__*`).
    pub pyiceberg: Option<String>,
    /// The catalog's name when not chosen by pyiceberg's (default `default`).
    pub catalog_name: Option<String>,
    /// The catalog URI (a database or an Iceberg REST catalog).
    pub uri: Option<String>,
    /// The warehouse: a directory or an object-store URI; a REST catalog's warehouse name.
    pub warehouse: Option<String>,
    /// Catalog and storage properties, in order; later ones win.
    pub properties: Vec<(String, String)>,
}

/// Parses a memory size: plain bytes (`1048576`) or with a unit (`64MiB`, `1GiB`, `512KiB`,
/// `64MB`, `1G`).
pub fn parse_size(text: &str) -> Result<usize> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        DataFusionError::Configuration(format!(
            "invalid size '{text}': expected bytes or a number with KiB/MiB/GiB/TiB (or KB/MB/GB/TB)"
        ))
    };
    let value: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(bad());
    }
    Ok(bytes as usize)
}

/// A [`SessionStateBuilder`] with DataFusion's defaults and what Iceberg tables need in any
/// session: [`IcebergOptions`](crate::IcebergOptions) (`SET iceberg.<key>`), the
/// [`IcebergQueryPlanner`](crate::IcebergQueryPlanner) that `DELETE`/`UPDATE` require, and
/// uuids as SQL writes them ([`UuidCoercion`](crate::UuidCoercion) before type coercion,
/// [`IcebergTypePlanner`](crate::IcebergTypePlanner) for `UUID`, [`to_uuid`](crate::to_uuid)).
/// Engines with a planner of their own wrap it with
/// [`IcebergQueryPlanner::wrapping`](crate::IcebergQueryPlanner::wrapping) instead.
pub fn session_state_builder(config: SessionConfig) -> SessionStateBuilder {
    let config = if config
        .options()
        .extensions
        .get::<crate::IcebergOptions>()
        .is_some()
    {
        config
    } else {
        config.with_option_extension(crate::IcebergOptions::default())
    };
    // Under a memory budget, hash joins that may not fit become sort-merge joins, chosen
    // right after DataFusion's own join selection (before distribution and sorts are added).
    let mut physical_rules =
        datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules;
    let at = physical_rules
        .iter()
        .position(|r| r.name() == "join_selection")
        .map_or(0, |i| i + 1);
    physical_rules.insert(
        at,
        Arc::new(crate::physical_plan::join_choice::SpillingJoins),
    );
    // Sorts' inputs compacted, once EnsureRequirements has added and placed the sorts.
    let at = physical_rules
        .iter()
        .position(|r| r.name() == "EnsureRequirements")
        .map_or(physical_rules.len(), |i| i + 1);
    physical_rules.insert(
        at,
        Arc::new(crate::physical_plan::join_choice::CompactSortInputs),
    );
    let mut analyzer_rules = datafusion::optimizer::Analyzer::new().rules;
    // Text standing for uuids is parsed before DataFusion's type coercion sees the pair.
    analyzer_rules.insert(0, Arc::new(crate::uuid_type::UuidCoercion));
    let builder = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_query_planner(Arc::new(crate::IcebergQueryPlanner::new()))
        .with_type_planner(Arc::new(crate::uuid_type::IcebergTypePlanner))
        .with_analyzer_rules(analyzer_rules)
        .with_physical_optimizer_rules(physical_rules)
        .with_extension_type_registry(Arc::new(
            datafusion::logical_expr::registry::MemoryExtensionTypeRegistry::new_with_canonical_extension_types(),
        ));
    crate::uuid_type::with_functions(builder)
}

/// A DataFusion session over an Iceberg warehouse.
#[derive(Clone)]
pub struct IcebergSession {
    ctx: SessionContext,
    catalog: Arc<dyn IcebergCatalog>,
    pool: Arc<dyn MemoryPool>,
    /// Reads files named in place of a table, through the state of `ctx` (pointed at the new
    /// state when the session moves to workers).
    #[cfg_attr(not(feature = "distributed"), allow(dead_code))]
    files: Arc<DynamicListTableFactory>,
}

impl std::fmt::Debug for IcebergSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergSession")
            .field("catalog", &self.catalog)
            .finish()
    }
}

impl IcebergSession {
    /// Connects to the catalog and builds the session: an Iceberg REST catalog when the
    /// catalog URI is `http(s)://` (its settings in `properties`; `warehouse` is sent as the
    /// `warehouse` property unless that is set), else a SQL catalog.
    pub async fn open(config: WarehouseConfig) -> Result<Self> {
        if let Some(uri) = config
            .catalog_uri
            .as_deref()
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        {
            let mut props = config.properties.clone();
            props.insert("uri".to_string(), uri.to_string());
            if !config.warehouse.is_empty() {
                props
                    .entry("warehouse".to_string())
                    .or_insert_with(|| config.warehouse.clone());
            }
            let catalog = RestCatalog::connect(&config.catalog_name, props).await?;
            return Self::with_catalog(catalog, config.memory_limit);
        }
        let uri = CatalogUri::parse(&config.effective_catalog_uri()?)?;
        let catalog = SqlCatalog::connect(SqlCatalogConfig {
            name: config.catalog_name.clone(),
            uri,
            warehouse: config.warehouse.clone(),
            properties: config.properties.clone(),
        })
        .await?;
        Self::with_catalog(catalog, config.memory_limit)
    }

    /// Builds a session around an existing catalog.
    pub fn with_catalog(
        catalog: Arc<dyn IcebergCatalog>,
        memory_limit: Option<usize>,
    ) -> Result<Self> {
        let pool: Arc<dyn MemoryPool> = match memory_limit {
            Some(limit) => Arc::new(TrackConsumersPool::new(
                FairSpillPool::new(limit),
                std::num::NonZeroUsize::new(5).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            None => Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default()),
        };
        // DataFusion's readers and the catalog's file I/O share one object-store registry.
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool))
            .with_object_store_registry(Arc::clone(catalog.object_stores().registry()))
            .build_arc()?;
        let mut config = SessionConfig::new();
        if let Some(limit) = memory_limit {
            let options = crate::IcebergOptions {
                join_memory_budget: limit as u64,
                ..Default::default()
            };
            config = config.with_option_extension(options);
            // Each sort holds this much back for its final merge; DataFusion's 10 MiB default
            // would not leave room for two parallel sorts under a small limit.
            let options = config.options_mut();
            options.execution.sort_spill_reservation_bytes = options
                .execution
                .sort_spill_reservation_bytes
                .min(limit / 8);
            // Parallel sorts merge their spill files concurrently, and a merge takes all the
            // memory it can get: under a limit the first merge can starve the others. One sort
            // per sorted stream keeps bounded-memory sorts from failing.
            options.optimizer.repartition_sorts = false;
        }
        let config = config
            .with_information_schema(true)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(catalog.name(), "default");
        let mut state = session_state_builder(config)
            .with_runtime_env(runtime)
            .build();
        state
            .table_factories_mut()
            .insert("ICEBERG".to_string(), Arc::new(IcebergTableFactory));
        let ctx = SessionContext::new_with_state(state);
        // Files named in place of a table are read through the session's state.
        let files = Arc::new(DynamicListTableFactory::new(SessionStore::new()));
        files.session_store().with_state(ctx.state_weak_ref());
        ctx.register_catalog(
            catalog.name(),
            Arc::new(
                IcebergCatalogProvider::new(Arc::clone(&catalog))
                    .with_files(Arc::clone(&files) as Arc<dyn datafusion::catalog::UrlTableFactory>),
            ),
        );
        ctx.register_udtf(
            "iceberg_scan",
            Arc::new(IcebergScanFunction::new(Some(Arc::clone(&catalog)))),
        );
        ctx.register_udtf(
            "iceberg_metadata",
            Arc::new(crate::table::IcebergMetadataFunction::new(Some(
                Arc::clone(&catalog),
            ))),
        );
        ctx.register_udtf(
            "iceberg_snapshots",
            Arc::new(IcebergSnapshotsFunction::new(Some(Arc::clone(&catalog)))),
        );
        Ok(Self {
            ctx,
            catalog,
            pool,
            files,
        })
    }

    /// This session, running its queries over the datafusion-distributed `workers` (see
    /// [`crate::distributed`]): planning, the catalog and commits stay here; stages run on the
    /// workers, which read the tables' files from the same storage.
    #[cfg(feature = "distributed")]
    pub fn with_workers(self, workers: Vec<url::Url>) -> Self {
        let builder =
            datafusion::execution::SessionStateBuilder::new_from_existing(self.ctx.state());
        let state = crate::distributed::coordinator(builder, workers).build();
        let ctx = SessionContext::new_with_state(state);
        self.files.session_store().with_state(ctx.state_weak_ref());
        Self {
            ctx,
            catalog: self.catalog,
            pool: self.pool,
            files: self.files,
        }
    }

    /// The DataFusion context: run SQL or DataFrames here.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs one SQL statement: `ALTER TABLE` here (schema evolution, table properties and
    /// `'format-version'` upgrades, see [`crate::table`]), `CALL system.<procedure>(..)` here (table
    /// maintenance, see [`crate::maintenance`]), every other statement through DataFusion
    /// ([`SessionContext::sql`]).
    pub async fn sql(&self, sql: &str) -> Result<DataFrame> {
        if crate::maintenance::is_call(sql) {
            let state = self.ctx.state();
            match crate::maintenance::call(&state, &self.catalog, sql).await? {
                Some(crate::maintenance::CallOutput::Rows(batch)) => {
                    return self.ctx.read_batch(batch)
                }
                Some(crate::maintenance::CallOutput::Stream(stream)) => {
                    let table = StreamingTable::try_new(Arc::clone(stream.schema()), vec![stream])?;
                    return self.ctx.read_table(Arc::new(table));
                }
                None => {}
            }
        }
        if let Some(key) = crate::config::reset_statement(sql) {
            crate::config::reset(
                self.ctx.state_ref().write().config_mut().options_mut(),
                &key,
            )?;
            return self.ctx.read_empty();
        }
        // Spark's names of a table's versions (`t.branch_b`, `t VERSION AS OF ..`) in the form
        // the catalog resolves.
        let versioned = self.versions(sql).await?;
        let sql = versioned.as_deref().unwrap_or(sql);
        if let Some(dropped) = self.drop_table(sql).await? {
            return Ok(dropped);
        }
        if let Some(described) = self.describe(sql).await? {
            return Ok(described);
        }
        if let Some(create) = crate::table::create::parse(sql) {
            return self.create_table(create?).await;
        }
        if let Some(insert) = crate::table::overwrite::parse(sql) {
            return self.filtered_insert(insert?).await;
        }
        #[cfg(feature = "distributed")]
        if let Some(explained) = self.explain_distributed(sql).await? {
            return Ok(explained);
        }
        let typed = match crate::table::subquery::one_statement(sql) {
            Some(statement) => crate::uuid_type::text_for_uuids(&self.ctx, &statement).await?,
            None => None,
        };
        let sql = typed.as_deref().unwrap_or(sql);
        // Statements naming metadata columns read their tables with them.
        let with_metadata = match crate::table::subquery::one_statement(sql) {
            Some(statement) => {
                crate::table::metadata_columns::rewrite(&self.ctx, &statement).await?
            }
            None => None,
        };
        let sql = with_metadata
            .as_ref()
            .map(|r| r.sql.as_str())
            .unwrap_or(sql);
        if let Some(merged) = crate::table::subquery::run(&self.ctx, sql).await? {
            return Ok(merged);
        }
        if let Some(ident) = self.replaced_table(sql) {
            return self.replace_or_restore(sql, &ident).await;
        }
        let Some(alter) = crate::table::alter::parse(sql) else {
            return match &with_metadata {
                Some(rewritten) => self
                    .ctx
                    .sql(sql)
                    .await
                    .map_err(|e| rewritten.named_as_written(e)),
                None => {
                    // The statement's tables load together before DataFusion plans it.
                    let prefetched = match crate::table::subquery::one_statement(sql) {
                        Some(statement) => {
                            Prefetched::load(
                                &self.ctx.state(),
                                &self.catalog,
                                self.catalog.name(),
                                &statement,
                            )
                            .await
                        }
                        None => Prefetched::default(),
                    };
                    prefetched.scope(self.ctx.sql(sql)).await
                }
            };
        };
        let alter = alter?;
        let ident = self.own_table(&alter.name, "ALTER TABLE")?;
        if let crate::table::alter::Action::RenameTo(to) = &alter.action {
            let mut to = to.clone();
            if to.len() >= 3 && to[0] == self.catalog.name() {
                to.remove(0);
            }
            let to = match to.len() {
                // A bare name stays in the table's namespace (as Spark renames).
                1 => iceberg::TableIdent::new(ident.namespace().clone(), to.remove(0)),
                _ => iceberg::TableIdent::from_strs(&to)
                    .map_err(|e| DataFusionError::Plan(format!("ALTER TABLE: {e}")))?,
            };
            self.catalog.rename_table(&ident, &to).await?;
            return self.ctx.read_empty();
        }
        let store: Arc<dyn crate::MetadataStore> = self.catalog.clone();
        crate::table::alter::apply(&self.ctx.state(), store, &ident, &alter.action).await?;
        self.ctx.read_empty()
    }

    /// `EXPLAIN <query>` in a session with workers: the distributed plan, its stages and the
    /// tasks of each, as it would run (DataFusion's own EXPLAIN shows the plan before it is cut
    /// into stages). Planned, not run. `None` elsewhere.
    #[cfg(feature = "distributed")]
    async fn explain_distributed(&self, sql: &str) -> Result<Option<DataFrame>> {
        use datafusion::sql::parser::Statement as DFStatement;
        use datafusion::sql::sqlparser::ast::Statement;
        if !crate::distributed::is_coordinator(self.ctx.state().config()) {
            return Ok(None);
        }
        let Some(DFStatement::Explain(explain)) = crate::table::subquery::one_statement(sql) else {
            return Ok(None);
        };
        // Queries only: planning other statements may run them (DDL runs as it is planned).
        let query = match explain.statement.as_ref() {
            DFStatement::Statement(s) if matches!(s.as_ref(), Statement::Query(_)) => s.to_string(),
            _ => return Ok(None),
        };
        if explain.options.analyze || explain.options.format.is_some() {
            return Ok(None);
        }
        let plan = self.ctx.sql(&query).await?.create_physical_plan().await?;
        let text = datafusion_distributed::display_plan_ascii(plan.as_ref(), false);
        let batch = arrow::array::RecordBatch::try_from_iter([
            (
                "plan_type",
                Arc::new(arrow::array::StringArray::from(vec!["distributed_plan"]))
                    as arrow::array::ArrayRef,
            ),
            (
                "plan",
                Arc::new(arrow::array::StringArray::from(vec![text])) as arrow::array::ArrayRef,
            ),
        ])?;
        Ok(Some(self.ctx.read_batch(batch)?))
    }

    /// `sql` with Spark's names of table versions rewritten (see [`crate::table::version`]), or
    /// `None` when it has none.
    async fn versions(&self, sql: &str) -> Result<Option<String>> {
        if !crate::table::version::mentions(sql) {
            return Ok(None);
        }
        let ident_of = |parts: Vec<String>| self.ident_of(parts);
        let names = crate::table::version::Names {
            catalog: &self.catalog,
            ident_of: &ident_of,
            normalize: self
                .ctx
                .state()
                .config_options()
                .sql_parser
                .enable_ident_normalization,
            ctx: &self.ctx,
        };
        crate::table::version::rewrite(&names, sql).await
    }

    /// `DESCRIBE [TABLE] [EXTENDED] t` and `SHOW TBLPROPERTIES t` of a table of this catalog, in
    /// Spark's layout (see [`crate::table`]); `None` for other statements and other tables.
    async fn describe(&self, sql: &str) -> Result<Option<DataFrame>> {
        let Some(statement) = crate::table::describe::parse(sql) else {
            return Ok(None);
        };
        let Some(ident) = self.ident_of(statement.name().to_vec()) else {
            return Ok(None);
        };
        let Some(table) = self.catalog.try_load_table(&ident).await? else {
            return Ok(None);
        };
        let batch = crate::table::describe::answer(&statement, &table, self.catalog.name())?;
        Ok(Some(self.ctx.read_batch(batch)?))
    }

    /// The table of this catalog a `CREATE OR REPLACE [EXTERNAL] TABLE` statement names.
    fn replaced_table(&self, sql: &str) -> Option<iceberg::TableIdent> {
        use datafusion::sql::parser::Statement as DFStatement;
        use datafusion::sql::sqlparser::ast::Statement;
        let name = match crate::table::subquery::one_statement(sql)? {
            DFStatement::CreateExternalTable(c) if c.or_replace => c.name,
            DFStatement::Statement(s) => match *s {
                Statement::CreateTable(c) if c.or_replace => c.name,
                _ => return None,
            },
            _ => return None,
        };
        self.table_ident(&name)
    }

    /// The identifier of `name` in this session's catalog (`None` for another catalog's).
    fn table_ident(
        &self,
        name: &datafusion::sql::sqlparser::ast::ObjectName,
    ) -> Option<iceberg::TableIdent> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| {
                p.as_ident().map(|i| match i.quote_style {
                    Some(_) => i.value.clone(),
                    None => i.value.to_lowercase(),
                })
            })
            .collect::<Option<_>>()?;
        self.ident_of(parts)
    }

    /// The identifier of the table `parts` names (as written, case already folded) in this
    /// session's catalog: a bare name is in the default namespace; `None` for another
    /// catalog's.
    fn ident_of(&self, mut parts: Vec<String>) -> Option<iceberg::TableIdent> {
        let options = self.ctx.state().config_options().catalog.clone();
        match parts.len() {
            _ if parts.len() < 3 && options.default_catalog != self.catalog.name() => return None,
            1 => parts.insert(0, options.default_schema.clone()),
            2 => {}
            _ if parts[0] == self.catalog.name() => {
                parts.remove(0);
            }
            _ => return None,
        }
        iceberg::TableIdent::from_strs(&parts).ok()
    }

    /// The identifier of the table `parts` names, for `statement`: an error when it is not a
    /// name of a table of this catalog.
    fn own_table(&self, parts: &[String], statement: &str) -> Result<iceberg::TableIdent> {
        self.ident_of(parts.to_vec()).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "{statement}: '{}' is not a table name of catalog '{}'",
                parts.join("."),
                self.catalog.name()
            ))
        })
    }

    /// Runs a `CREATE OR REPLACE` of `ident`. DataFusion drops the old table before it builds
    /// the new one: when the statement fails, the old table's catalog entry is registered again
    /// at the metadata file it had, so a failed statement leaves the catalog as it was.
    async fn replace_or_restore(
        &self,
        sql: &str,
        ident: &iceberg::TableIdent,
    ) -> Result<DataFrame> {
        let before = match self.catalog.try_load_table(ident).await {
            Ok(table) => table.and_then(|t| t.metadata_location().map(str::to_string)),
            Err(e) => {
                log::warn!(
                    "table '{ident}' cannot be loaded ({e}): it is replaced without a way back"
                );
                None
            }
        };
        // DataFusion runs DDL (and a CREATE .. AS SELECT's query) when it plans the statement.
        let outcome = self.ctx.sql(sql).await;
        let Err(e) = outcome else {
            return outcome;
        };
        if let Some(location) = before {
            let now = match self.catalog.try_load_table(ident).await {
                Ok(table) => table.and_then(|t| t.metadata_location().map(str::to_string)),
                // Something is registered that does not load: not the old table.
                Err(_) => Some(String::new()),
            };
            if now.as_deref() != Some(location.as_str()) {
                if now.is_some() {
                    // A new table the failed statement left behind.
                    self.catalog.drop_table(ident).await?;
                }
                self.catalog.register_table(ident, &location).await?;
                log::warn!("{sql}: failed; table '{ident}' restored at {location}");
            }
        }
        Err(e)
    }

    /// `DROP TABLE [IF EXISTS] name` of a table in this session's Iceberg catalog, dropped by
    /// name: DataFusion loads a table before it drops it, and a table whose metadata cannot be
    /// read (a crashed writer, a bad copy) must still be droppable. `None` for every other
    /// statement, and for names of other catalogs or of no table (DataFusion answers those).
    async fn drop_table(&self, sql: &str) -> Result<Option<DataFrame>> {
        use datafusion::sql::parser::Statement as DFStatement;
        use datafusion::sql::sqlparser::ast::{ObjectType, Statement};
        let Some(DFStatement::Statement(statement)) = crate::table::subquery::one_statement(sql)
        else {
            return Ok(None);
        };
        let Statement::Drop {
            object_type: ObjectType::Table,
            names,
            ..
        } = statement.as_ref()
        else {
            return Ok(None);
        };
        let [name] = names.as_slice() else {
            return Ok(None);
        };
        let Some(ident) = self.table_ident(name) else {
            return Ok(None);
        };
        match self.catalog.table_exists(&ident).await {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            // A REST catalog answers existence by loading the table: one it lists but cannot
            // load is dropped by name, and a name it does not know fails the drop below.
            Err(e) => log::warn!("table '{ident}' cannot be loaded ({e}): dropping it by name"),
        }
        self.catalog.drop_table(&ident).await?;
        Ok(Some(self.ctx.read_empty()?))
    }

    /// The Iceberg catalog.
    pub fn catalog(&self) -> &Arc<dyn IcebergCatalog> {
        &self.catalog
    }

    /// The memory pool queries reserve from.
    pub fn memory_pool(&self) -> &Arc<dyn MemoryPool> {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn default_catalog_lives_in_the_warehouse() {
        use crate::catalog::CatalogUri;
        let abs = WarehouseConfig::local("/data/wh")
            .effective_catalog_uri()
            .unwrap();
        assert_eq!(
            CatalogUri::parse(&abs).unwrap(),
            CatalogUri::Sqlite(PathBuf::from("/data/wh/catalog.db"))
        );
        let rel = WarehouseConfig::local("./warehouse")
            .effective_catalog_uri()
            .unwrap();
        assert_eq!(
            CatalogUri::parse(&rel).unwrap(),
            CatalogUri::Sqlite(PathBuf::from("./warehouse/catalog.db"))
        );
        let remote = WarehouseConfig::local("s3://bucket/wh").effective_catalog_uri();
        assert!(remote.unwrap_err().to_string().contains("catalog's URI"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("16mb").unwrap(), 16 << 20);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("0").is_err());
    }
}
