//! The SQL catalog: Iceberg tables in a relational database using the JDBC table layout shared by
//! Java's `JdbcCatalog` and pyiceberg's `SqlCatalog`.
//!
//! ```text
//! iceberg_tables(catalog_name, table_namespace, table_name,
//!                metadata_location, previous_metadata_location[, iceberg_type])
//! iceberg_namespace_properties(catalog_name, namespace, property_key, property_value)
//! ```
//! A commit is a compare-and-swap of `metadata_location`, exactly as those catalogs do it.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::spec::TableMetadataBuilder;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableCreation, TableIdent};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use super::names::{check_location_is_free, check_namespace, check_table_name};
use super::uri::CatalogUri;
use super::{table_handle, HandleCache, MetadataPointer, SwapOutcome};
use crate::commit::metadata_file::{new_metadata_location, read_metadata, write_metadata};
use crate::error::{db_err, IcebergResultExt};
use crate::io_runtime;
use crate::storage::location::check_location;
use crate::storage::location::LocationMap;
use crate::storage::{remote_scheme, table_file_io, ObjectStores, StorageOptions};

/// How to reach a SQL catalog.
#[derive(Debug, Clone)]
pub struct SqlCatalogConfig {
    /// The catalog's name: the `catalog_name` column, and the DataFusion catalog name.
    pub name: String,
    /// The catalog database.
    pub uri: CatalogUri,
    /// Where new tables are placed: a directory, a `file://` URI, or an object-store URI such
    /// as `s3://bucket/prefix`.
    pub warehouse: String,
    /// Storage properties (`s3.endpoint`, `s3.access-key-id`, ...) for the tables' files.
    pub properties: std::collections::BTreeMap<String, String>,
}

/// Table properties that place a table's files somewhere other than under its location.
const LOCATION_PROPERTIES: &[&str] = &[
    "write.data.path",
    "write.folder-storage.path",
    "write.metadata.path",
];

/// The namespace property pyiceberg writes to record that a namespace exists.
const EXISTS_PROPERTY: &str = "exists";

/// An Iceberg catalog stored in a SQL database (SQLite by default, PostgreSQL by URI).
#[derive(Debug)]
pub struct SqlCatalog {
    db: Arc<Db>,
    warehouse: String,
    file_io: FileIO,
    stores: Arc<ObjectStores>,
    handles: HandleCache,
}

/// The catalog database.
#[derive(Debug)]
struct Db {
    name: String,
    pool: AnyPool,
    /// Whether `iceberg_tables` has Java's `iceberg_type` column (databases made by pyiceberg do not).
    has_iceberg_type: bool,
}

impl Db {
    fn table_type_filter(&self) -> &'static str {
        if self.has_iceberg_type {
            " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
        } else {
            ""
        }
    }
}

fn ns_key(ns: &NamespaceIdent) -> String {
    ns.as_ref().join(".")
}

fn ns_from_key(key: &str) -> Result<NamespaceIdent> {
    NamespaceIdent::from_strs(key.split('.')).df()
}

/// Normalises a warehouse given as a path or `file://` URI into an absolute `file://` URI,
/// creating the directory when it is missing. Object-store URIs are kept as they are.
fn normalise_warehouse(warehouse: &str) -> Result<String> {
    if remote_scheme(warehouse).is_some() {
        check_location("warehouse", warehouse)?;
        return Ok(warehouse.trim_end_matches('/').to_string());
    }
    let path = warehouse.strip_prefix("file://").unwrap_or(warehouse);
    let path = PathBuf::from(path);
    std::fs::create_dir_all(&path).map_err(|e| {
        DataFusionError::Configuration(format!(
            "cannot create warehouse directory '{}': {e}",
            path.display()
        ))
    })?;
    let abs = path.canonicalize().map_err(|e| {
        DataFusionError::Configuration(format!("warehouse '{}': {e}", path.display()))
    })?;
    Ok(format!("file://{}", abs.display()))
}

impl SqlCatalog {
    /// Connects to (and, when empty, initialises) the catalog database.
    pub async fn connect(config: SqlCatalogConfig) -> Result<Arc<Self>> {
        let warehouse = normalise_warehouse(&config.warehouse)?;
        if let CatalogUri::Sqlite(path) = &config.uri {
            check_sqlite_parent(path)?;
        }
        let name = config.name.clone();
        let uri = config.uri.clone();
        let stores = ObjectStores::standalone(StorageOptions::new(config.properties.clone()));
        io_runtime::spawn(async move {
            sqlx::any::install_default_drivers();
            let mut opts = AnyPoolOptions::new();
            opts = match uri {
                // One connection keeps a private in-memory database alive for the pool's lifetime.
                CatalogUri::SqliteMemory => opts
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None),
                _ => opts.max_connections(4),
            };
            let pool = opts
                .connect(&uri.driver_url())
                .await
                .map_err(|e| db_err(&format!("cannot open {uri:?}"), e))?;
            init_schema(&pool).await?;
            let has_iceberg_type =
                sqlx::query("SELECT iceberg_type FROM iceberg_tables WHERE 1 = 0")
                    .fetch_all(&pool)
                    .await
                    .is_ok();
            Ok(Arc::new(SqlCatalog {
                handles: Default::default(),
                db: Arc::new(Db {
                    name,
                    pool,
                    has_iceberg_type,
                }),
                warehouse,
                file_io: table_file_io(&LocationMap::default(), &stores),
                stores,
            }))
        })
        .await
    }

    /// The catalog's name.
    pub fn name(&self) -> &str {
        &self.db.name
    }

    /// The object stores its tables' files are in.
    pub fn object_stores(&self) -> &Arc<ObjectStores> {
        &self.stores
    }

    /// The warehouse root as a `file://` (or object-store) URI.
    pub fn warehouse(&self) -> &str {
        &self.warehouse
    }

    /// The file I/O used for metadata and data files.
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    /// Lists every namespace: those with properties and those that hold tables.
    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceIdent>> {
        let this = Arc::clone(&self.db);
        io_runtime::spawn(async move {
            let rows: Vec<AnyRow> = sqlx::query(
                "SELECT table_namespace FROM iceberg_tables WHERE catalog_name = $1 \
                 UNION SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = $2",
            )
            .bind(&this.name)
            .bind(&this.name)
            .fetch_all(&this.pool)
            .await
            .map_err(|e| db_err("list namespaces", e))?;
            let mut keys = BTreeSet::new();
            for row in rows {
                keys.insert(
                    row.try_get::<String, _>(0)
                        .map_err(|e| db_err("read namespace", e))?,
                );
            }
            keys.iter().map(|k| ns_from_key(k)).collect()
        })
        .await
    }

    /// Whether the namespace exists (has properties or tables).
    pub async fn namespace_exists(&self, ns: &NamespaceIdent) -> Result<bool> {
        let this = Arc::clone(&self.db);
        let key = ns_key(ns);
        io_runtime::spawn(async move {
            let row = sqlx::query(
                "SELECT 1 FROM iceberg_namespace_properties WHERE catalog_name = $1 AND namespace = $2 \
                 UNION SELECT 1 FROM iceberg_tables WHERE catalog_name = $3 AND table_namespace = $4",
            )
            .bind(&this.name)
            .bind(&key)
            .bind(&this.name)
            .bind(&key)
            .fetch_optional(&this.pool)
            .await
            .map_err(|e| db_err("look up namespace", e))?;
            Ok(row.is_some())
        })
        .await
    }

    /// Creates a namespace with properties. Fails if it exists.
    pub async fn create_namespace(
        &self,
        ns: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        check_namespace(ns)?;
        if self.namespace_exists(ns).await? {
            return Err(DataFusionError::Execution(format!(
                "namespace '{}' already exists",
                ns_key(ns)
            )));
        }
        let this = Arc::clone(&self.db);
        let key = ns_key(ns);
        io_runtime::spawn(async move {
            let mut props: Vec<(String, String)> = properties.into_iter().collect();
            if !props.iter().any(|(k, _)| k == EXISTS_PROPERTY) {
                props.push((EXISTS_PROPERTY.to_string(), "true".to_string()));
            }
            let mut tx = this.pool.begin().await.map_err(|e| db_err("begin", e))?;
            for (k, v) in props {
                sqlx::query(
                    "INSERT INTO iceberg_namespace_properties \
                     (catalog_name, namespace, property_key, property_value) VALUES ($1, $2, $3, $4)",
                )
                .bind(&this.name)
                .bind(&key)
                .bind(k)
                .bind(v)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_err("create namespace", e))?;
            }
            tx.commit().await.map_err(|e| db_err("commit namespace", e))
        })
        .await
    }

    /// Drops an empty namespace.
    pub async fn drop_namespace(&self, ns: &NamespaceIdent) -> Result<()> {
        if !self.namespace_exists(ns).await? {
            return Err(DataFusionError::Plan(format!(
                "namespace '{}' does not exist",
                ns_key(ns)
            )));
        }
        if !self.list_tables(ns).await?.is_empty() {
            return Err(DataFusionError::Execution(format!(
                "namespace '{}' is not empty",
                ns_key(ns)
            )));
        }
        let this = Arc::clone(&self.db);
        let key = ns_key(ns);
        io_runtime::spawn(async move {
            sqlx::query(
                "DELETE FROM iceberg_namespace_properties WHERE catalog_name = $1 AND namespace = $2",
            )
            .bind(&this.name)
            .bind(&key)
            .execute(&this.pool)
            .await
            .map_err(|e| db_err("drop namespace", e))?;
            Ok(())
        })
        .await
    }

    /// Lists the tables of a namespace.
    pub async fn list_tables(&self, ns: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let this = Arc::clone(&self.db);
        let ns = ns.clone();
        io_runtime::spawn(async move {
            let sql = format!(
                "SELECT table_name FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2{} \
                 ORDER BY table_name",
                this.table_type_filter()
            );
            let rows = sqlx::query(&sql)
                .bind(&this.name)
                .bind(ns_key(&ns))
                .fetch_all(&this.pool)
                .await
                .map_err(|e| db_err("list tables", e))?;
            rows.into_iter()
                .map(|r| {
                    let name: String = r.try_get(0).map_err(|e| db_err("read table name", e))?;
                    Ok(TableIdent::new(ns.clone(), name))
                })
                .collect()
        })
        .await
    }

    async fn metadata_location(&self, ident: &TableIdent) -> Result<Option<String>> {
        let this = Arc::clone(&self.db);
        let ident = ident.clone();
        io_runtime::spawn(async move {
            let sql = format!(
                "SELECT metadata_location FROM iceberg_tables \
                 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3{}",
                this.table_type_filter()
            );
            let row = sqlx::query(&sql)
                .bind(&this.name)
                .bind(ns_key(ident.namespace()))
                .bind(ident.name())
                .fetch_optional(&this.pool)
                .await
                .map_err(|e| db_err("look up table", e))?;
            match row {
                None => Ok(None),
                Some(r) => {
                    let loc: Option<String> = r
                        .try_get(0)
                        .map_err(|e| db_err("read metadata_location", e))?;
                    loc.map(Some).ok_or_else(|| {
                        DataFusionError::Execution(format!(
                            "table '{ident}' has no metadata_location in the catalog"
                        ))
                    })
                }
            }
        })
        .await
    }

    /// Whether the table exists.
    pub async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(self.metadata_location(ident).await?.is_some())
    }

    /// Loads a table's current metadata.
    pub async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        self.try_load_table(ident)
            .await?
            .ok_or_else(|| table_not_found(ident))
    }

    /// Loads a table's current metadata, or `None` when the catalog has no such table.
    pub async fn try_load_table(&self, ident: &TableIdent) -> Result<Option<Table>> {
        let Some(location) = self.metadata_location(ident).await? else {
            return Ok(None);
        };
        if let Some(table) = self.handles.get(ident, &location) {
            return Ok(Some(table));
        }
        let metadata = read_metadata(&self.file_io, &location)
            .await
            .map_err(|e| DataFusionError::Execution(format!("loading table '{ident}': {e}")))?;
        let table = table_handle(ident.clone(), location, metadata, self.file_io.clone())?;
        self.handles.put(ident, &table);
        Ok(Some(table))
    }

    /// The location a new table gets when the caller gives none.
    pub fn default_table_location(&self, ident: &TableIdent) -> String {
        let mut loc = self.warehouse.trim_end_matches('/').to_string();
        for part in ident.namespace().as_ref() {
            loc.push('/');
            loc.push_str(part);
        }
        loc.push('/');
        loc.push_str(ident.name());
        loc
    }

    /// Creates a table: writes its first metadata file, then records it in the catalog.
    pub async fn create_table(
        &self,
        ns: &NamespaceIdent,
        mut creation: TableCreation,
    ) -> Result<Table> {
        check_namespace(ns)?;
        check_table_name(&creation.name)?;
        let ident = TableIdent::new(ns.clone(), creation.name.clone());
        if let Some(location) = &creation.location {
            check_location("LOCATION", location)?;
        }
        for key in LOCATION_PROPERTIES {
            if let Some(location) = creation.properties.get(*key) {
                check_location(key, location)?;
            }
        }
        if !self.namespace_exists(ns).await? {
            return Err(DataFusionError::Plan(format!(
                "namespace '{}' does not exist",
                ns_key(ns)
            )));
        }
        if self.table_exists(&ident).await? {
            return Err(DataFusionError::Execution(format!(
                "table '{ident}' already exists"
            )));
        }
        let location = creation
            .location
            .take()
            .unwrap_or_else(|| self.default_table_location(&ident));
        check_location_is_free(&self.stores, &location).await?;
        creation.location = Some(location.clone());
        let metadata = TableMetadataBuilder::from_table_creation(creation)
            .df()?
            .build()
            .df()?
            .metadata;
        let metadata_location = write_metadata(
            &self.file_io,
            &metadata,
            &new_metadata_location(&location, None, &metadata),
        )
        .await?;

        let inserted = self.insert_table_row(&ident, &metadata_location).await;
        if let Err(e) = inserted {
            // The table was not recorded: its metadata file must not linger.
            let _ = self.file_io.delete(&metadata_location).await;
            return Err(e);
        }
        table_handle(
            ident,
            metadata_location.to_string(),
            metadata,
            self.file_io.clone(),
        )
    }

    /// Records a table in the catalog (`iceberg_type = 'TABLE'` where the column exists).
    async fn insert_table_row(&self, ident: &TableIdent, metadata_location: &str) -> Result<()> {
        let this = Arc::clone(&self.db);
        let id = ident.clone();
        let loc = metadata_location.to_string();
        io_runtime::spawn(async move {
            let sql = if this.has_iceberg_type {
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, \
                 metadata_location, previous_metadata_location, iceberg_type) \
                 VALUES ($1, $2, $3, $4, NULL, 'TABLE')"
            } else {
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, \
                 metadata_location, previous_metadata_location) VALUES ($1, $2, $3, $4, NULL)"
            };
            sqlx::query(sql)
                .bind(&this.name)
                .bind(ns_key(id.namespace()))
                .bind(id.name())
                .bind(&loc)
                .execute(&this.pool)
                .await
                .map_err(|e| db_err(&format!("record table '{id}'"), e))?;
            Ok(())
        })
        .await
    }

    /// Registers an existing table (by its metadata file) under a new identifier.
    pub async fn register_table(
        &self,
        ident: &TableIdent,
        metadata_location: &str,
    ) -> Result<Table> {
        check_namespace(ident.namespace())?;
        check_table_name(ident.name())?;
        // Read first: only valid metadata gets registered.
        let metadata = read_metadata(&self.file_io, metadata_location).await?;
        if self.table_exists(ident).await? {
            return Err(DataFusionError::Execution(format!(
                "table '{ident}' already exists"
            )));
        }
        if !self.namespace_exists(ident.namespace()).await? {
            return Err(DataFusionError::Plan(format!(
                "namespace '{}' does not exist",
                ns_key(ident.namespace())
            )));
        }
        self.insert_table_row(ident, metadata_location).await?;
        table_handle(
            ident.clone(),
            metadata_location.to_string(),
            metadata,
            self.file_io.clone(),
        )
    }

    /// Gives the table `from` the name `to`, in the same or another namespace of this catalog.
    /// Its files stay where they are.
    pub async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
        check_namespace(to.namespace())?;
        check_table_name(to.name())?;
        if !self.table_exists(from).await? {
            return Err(table_not_found(from));
        }
        if self.table_exists(to).await? {
            return Err(DataFusionError::Execution(format!(
                "table '{to}' already exists"
            )));
        }
        if !self.namespace_exists(to.namespace()).await? {
            return Err(DataFusionError::Plan(format!(
                "namespace '{}' does not exist",
                ns_key(to.namespace())
            )));
        }
        let this = Arc::clone(&self.db);
        let (old, new) = (from.clone(), to.clone());
        let affected = io_runtime::spawn(async move {
            let sql = format!(
                "UPDATE iceberg_tables SET table_namespace = $1, table_name = $2 \
                 WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5{}",
                this.table_type_filter()
            );
            let r = sqlx::query(&sql)
                .bind(ns_key(new.namespace()))
                .bind(new.name())
                .bind(&this.name)
                .bind(ns_key(old.namespace()))
                .bind(old.name())
                .execute(&this.pool)
                .await
                .map_err(|e| db_err("rename table", e))?;
            Ok(r.rows_affected())
        })
        .await?;
        if affected == 0 {
            return Err(table_not_found(from));
        }
        Ok(())
    }

    /// Removes a table from the catalog. Its files stay where they are.
    pub async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let this = Arc::clone(&self.db);
        let id = ident.clone();
        let affected = io_runtime::spawn(async move {
            let sql = format!(
                "DELETE FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 \
                 AND table_name = $3{}",
                this.table_type_filter()
            );
            let r = sqlx::query(&sql)
                .bind(&this.name)
                .bind(ns_key(id.namespace()))
                .bind(id.name())
                .execute(&this.pool)
                .await
                .map_err(|e| db_err("drop table", e))?;
            Ok(r.rows_affected())
        })
        .await?;
        if affected == 0 {
            return Err(table_not_found(ident));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl MetadataPointer for SqlCatalog {
    async fn load_current(self: Arc<Self>, ident: &TableIdent) -> Result<Table> {
        self.load_table(ident).await
    }

    async fn swap(
        self: Arc<Self>,
        ident: &TableIdent,
        expected: &str,
        new_location: &str,
    ) -> Result<SwapOutcome> {
        let this = Arc::clone(&self.db);
        let id = ident.clone();
        let expected = expected.to_string();
        let new_location = new_location.to_string();
        io_runtime::spawn(async move {
            let r = sqlx::query(
                "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
                 WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 \
                 AND metadata_location = $6",
            )
            .bind(&new_location)
            .bind(&expected)
            .bind(&this.name)
            .bind(ns_key(id.namespace()))
            .bind(id.name())
            .bind(&expected)
            .execute(&this.pool)
            .await
            .map_err(|e| db_err(&format!("commit to table '{id}'"), e))?;
            Ok(if r.rows_affected() == 1 {
                SwapOutcome::Swapped
            } else {
                SwapOutcome::Conflict
            })
        })
        .await
    }

    fn pointer_file_io(&self) -> &FileIO {
        &self.file_io
    }

    fn pointer_object_stores(&self) -> &Arc<ObjectStores> {
        &self.stores
    }
}

fn table_not_found(ident: &TableIdent) -> DataFusionError {
    DataFusionError::Plan(format!("table '{ident}' does not exist"))
}

fn check_sqlite_parent(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| {
        DataFusionError::Configuration(format!(
            "cannot create catalog directory '{}': {e}",
            parent.display()
        ))
    })?;
    let meta = std::fs::metadata(&parent).map_err(|e| {
        DataFusionError::Configuration(format!("catalog directory '{}': {e}", parent.display()))
    })?;
    if meta.permissions().readonly() && !path.exists() {
        return Err(DataFusionError::Configuration(format!(
            "catalog directory '{}' is not writable",
            parent.display()
        )));
    }
    Ok(())
}

async fn init_schema(pool: &AnyPool) -> Result<()> {
    for ddl in [
        "CREATE TABLE IF NOT EXISTS iceberg_tables (\
           catalog_name VARCHAR(255) NOT NULL, \
           table_namespace VARCHAR(255) NOT NULL, \
           table_name VARCHAR(255) NOT NULL, \
           metadata_location VARCHAR(1000), \
           previous_metadata_location VARCHAR(1000), \
           iceberg_type VARCHAR(5), \
           PRIMARY KEY (catalog_name, table_namespace, table_name))",
        "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (\
           catalog_name VARCHAR(255) NOT NULL, \
           namespace VARCHAR(255) NOT NULL, \
           property_key VARCHAR(255) NOT NULL, \
           property_value VARCHAR(1000), \
           PRIMARY KEY (catalog_name, namespace, property_key))",
    ] {
        sqlx::query(ddl)
            .execute(pool)
            .await
            .map_err(|e| db_err("initialise catalog tables", e))?;
    }
    Ok(())
}
