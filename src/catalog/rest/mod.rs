//! The Iceberg REST catalog (Polaris, Lakekeeper, Unity, Glue, S3 Tables, Nessie, SeaweedFS):
//! namespaces and tables through the REST spec's routes, and commits sent as the spec's
//! `CommitTableRequest` — this crate's own snapshots (appends, deletes, overwrites, row deltas) as
//! `add-snapshot` + `set-snapshot-ref` updates under `assert-table-uuid` and
//! `assert-ref-snapshot-id` requirements. The server writes the metadata file; manifests and
//! manifest lists go to object storage through the catalog's file I/O.
//!
//! A 409 on commit is a conflict (reload, re-apply, retry); a 5xx or a request that got no reply
//! leaves the outcome unknown, so every file is kept and the error says so.

mod client;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_rest::{
    CommitTableRequest, CommitTableResponse, CreateNamespaceRequest, CreateTableRequest,
    ListNamespaceResponse, ListTablesResponse, LoadTableResult, RegisterTableRequest,
    RenameTableRequest,
};
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use self::client::{no_reply, Failure, Reply, RestClient};
use super::names::{check_namespace, check_table_name};
use super::{table_handle, CommitResult, HandleCache, MetadataChange, MetadataStore};
use crate::commit::CommitStateUnknown;
use crate::storage::location::check_location;
use crate::storage::location::LocationMap;
use crate::storage::{is_shown, table_file_io, ObjectStores, StorageOptions};

/// The catalog's answer to `GET /v1/config`.
#[derive(Deserialize, Default)]
struct ConfigBody {
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    overrides: HashMap<String, String>,
}

/// An Iceberg REST catalog.
pub struct RestCatalog {
    name: String,
    client: RestClient,
    props: BTreeMap<String, String>,
    file_io: FileIO,
    stores: Arc<ObjectStores>,
    handles: HandleCache,
}

impl std::fmt::Debug for RestCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: BTreeMap<&str, &str> = self
            .props
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_shown(k) {
                        v.as_str()
                    } else {
                        "<redacted>"
                    },
                )
            })
            .collect();
        f.debug_struct("RestCatalog")
            .field("name", &self.name)
            .field("client", &self.client)
            .field("properties", &shown)
            .finish_non_exhaustive()
    }
}

fn ns_name(ns: &NamespaceIdent) -> String {
    ns.as_ref().join(".")
}

/// An error for a failed request about `what`.
fn failed(what: &str, f: &Failure) -> DataFusionError {
    let detail = if f.message.is_empty() {
        f.status.to_string()
    } else {
        format!("{}: {}", f.status, f.message)
    };
    match f.status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => DataFusionError::Execution(format!(
            "{what}: the REST catalog refused access ({detail})"
        )),
        _ => DataFusionError::Execution(format!("{what}: {detail}")),
    }
}

impl RestCatalog {
    /// Connects to the catalog at the `uri` property: asks it for its configuration
    /// (`GET /v1/config`, with `warehouse` when given) and merges it with `props` (the server's
    /// defaults below them, its overrides above).
    pub async fn connect(name: &str, props: BTreeMap<String, String>) -> Result<Arc<Self>> {
        let mut client = RestClient::new(&props)?;
        let mut url = client.url(false, &["config"])?;
        if let Some(w) = props.get("warehouse") {
            url.query_pairs_mut().append_pair("warehouse", w);
        }
        let config: ConfigBody = match client
            .send::<(), ConfigBody>(Method::GET, url, None)
            .await?
        {
            Reply::Ok(body) => body.unwrap_or_default(),
            Reply::Failed(f) => return Err(failed("connecting to the REST catalog", &f)),
        };
        let mut merged: BTreeMap<String, String> = config.defaults.into_iter().collect();
        merged.extend(props);
        merged.extend(config.overrides);
        client.set_prefix(merged.get("prefix").cloned());
        let stores = ObjectStores::standalone(StorageOptions::new(merged.clone()));
        Ok(Arc::new(Self {
            name: name.to_string(),
            client,
            file_io: table_file_io(&LocationMap::default(), &stores),
            stores,
            props: merged,
            handles: HandleCache::default(),
        }))
    }

    /// The catalog's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object stores its tables' files are in.
    pub fn object_stores(&self) -> &Arc<ObjectStores> {
        &self.stores
    }

    /// The properties in effect (the server's configuration merged with the given ones).
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.props
    }

    fn table_url(&self, ident: &TableIdent) -> Result<url::Url> {
        let ns = ident.namespace().to_url_string();
        self.client
            .url(true, &["namespaces", &ns, "tables", ident.name()])
    }

    /// Every namespace, nested ones included: the top level, then each namespace's children
    /// (`parent=`), as the spec lists them one level at a time. Servers that answer every level
    /// at once are read the same way (children already seen are not listed again).
    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceIdent>> {
        let mut seen: std::collections::BTreeSet<Vec<String>> = Default::default();
        let mut pending: Vec<Option<NamespaceIdent>> = vec![None];
        while let Some(parent) = pending.pop() {
            for ns in self.list_children(parent.as_ref()).await? {
                let deeper = parent
                    .as_ref()
                    .is_none_or(|p| ns.len() > p.len() && ns.as_ref()[..p.len()] == p.as_ref()[..]);
                if deeper && seen.insert(ns.as_ref().clone()) {
                    pending.push(Some(ns));
                }
            }
        }
        seen.into_iter()
            .map(|levels| {
                NamespaceIdent::from_vec(levels).map_err(|e| DataFusionError::External(Box::new(e)))
            })
            .collect()
    }

    /// The namespaces the server lists under `parent` (the top level when `None`), all pages.
    async fn list_children(&self, parent: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        let mut out = vec![];
        let mut page: Option<String> = None;
        loop {
            let mut url = self.client.url(true, &["namespaces"])?;
            if let Some(p) = parent {
                url.query_pairs_mut()
                    .append_pair("parent", &p.to_url_string());
            }
            if let Some(p) = &page {
                url.query_pairs_mut().append_pair("pageToken", p);
            }
            match self
                .client
                .send::<(), ListNamespaceResponse>(Method::GET, url, None)
                .await?
            {
                Reply::Ok(Some(body)) => {
                    out.extend(body.namespaces);
                    match body.next_page_token.filter(|t| !t.is_empty()) {
                        Some(next) => page = Some(next),
                        None => return Ok(out),
                    }
                }
                Reply::Ok(None) => return Ok(out),
                Reply::Failed(f) => return Err(failed("listing namespaces", &f)),
            }
        }
    }

    /// Whether the namespace exists.
    pub async fn namespace_exists(&self, ns: &NamespaceIdent) -> Result<bool> {
        let url = self
            .client
            .url(true, &["namespaces", &ns.to_url_string()])?;
        match self
            .client
            .send::<(), serde_json::Value>(Method::GET, url, None)
            .await?
        {
            Reply::Ok(_) => Ok(true),
            Reply::Failed(f) if f.status == StatusCode::NOT_FOUND => Ok(false),
            Reply::Failed(f) => Err(failed(
                &format!("looking up namespace '{}'", ns_name(ns)),
                &f,
            )),
        }
    }

    /// Creates a namespace.
    pub async fn create_namespace(
        &self,
        ns: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        check_namespace(ns)?;
        let url = self.client.url(true, &["namespaces"])?;
        let body = CreateNamespaceRequest {
            namespace: ns.clone(),
            properties,
        };
        match self
            .client
            .send::<_, serde_json::Value>(Method::POST, url, Some(&body))
            .await?
        {
            Reply::Ok(_) => Ok(()),
            Reply::Failed(f) if f.status == StatusCode::CONFLICT => Err(
                DataFusionError::Execution(format!("namespace '{}' already exists", ns_name(ns))),
            ),
            Reply::Failed(f) => Err(failed(&format!("creating namespace '{}'", ns_name(ns)), &f)),
        }
    }

    /// Drops an empty namespace.
    pub async fn drop_namespace(&self, ns: &NamespaceIdent) -> Result<()> {
        let url = self
            .client
            .url(true, &["namespaces", &ns.to_url_string()])?;
        match self
            .client
            .send::<(), serde_json::Value>(Method::DELETE, url, None)
            .await?
        {
            Reply::Ok(_) => Ok(()),
            Reply::Failed(f) if f.status == StatusCode::NOT_FOUND => Err(DataFusionError::Plan(
                format!("namespace '{}' does not exist", ns_name(ns)),
            )),
            Reply::Failed(f) if f.status == StatusCode::CONFLICT => Err(
                DataFusionError::Execution(format!("namespace '{}' is not empty", ns_name(ns))),
            ),
            Reply::Failed(f) => Err(failed(&format!("dropping namespace '{}'", ns_name(ns)), &f)),
        }
    }

    /// The tables of a namespace.
    pub async fn list_tables(&self, ns: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let mut out = vec![];
        let mut page: Option<String> = None;
        loop {
            let mut url = self
                .client
                .url(true, &["namespaces", &ns.to_url_string(), "tables"])?;
            if let Some(p) = &page {
                url.query_pairs_mut().append_pair("pageToken", p);
            }
            match self
                .client
                .send::<(), ListTablesResponse>(Method::GET, url, None)
                .await?
            {
                Reply::Ok(Some(body)) => {
                    out.extend(body.identifiers);
                    match body.next_page_token.filter(|t| !t.is_empty()) {
                        Some(next) => page = Some(next),
                        None => break,
                    }
                }
                Reply::Ok(None) => break,
                Reply::Failed(f) if f.status == StatusCode::NOT_FOUND => {
                    return Err(DataFusionError::Plan(format!(
                        "namespace '{}' does not exist",
                        ns_name(ns)
                    )))
                }
                Reply::Failed(f) => {
                    return Err(failed(&format!("listing tables of '{}'", ns_name(ns)), &f))
                }
            }
        }
        out.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(out)
    }

    /// Whether the table exists.
    pub async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(self.try_load_table(ident).await?.is_some())
    }

    /// Loads a table.
    pub async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        self.try_load_table(ident)
            .await?
            .ok_or_else(|| DataFusionError::Plan(format!("table '{ident}' does not exist")))
    }

    fn handle(
        &self,
        ident: &TableIdent,
        location: String,
        metadata: iceberg::spec::TableMetadata,
    ) -> Result<Table> {
        if let Some(t) = self.handles.get(ident, &location) {
            return Ok(t);
        }
        let table = table_handle(ident.clone(), location, metadata, self.file_io.clone())?;
        self.handles.put(ident, &table);
        Ok(table)
    }

    /// Loads a table, or `None` when the catalog has no such table.
    pub async fn try_load_table(&self, ident: &TableIdent) -> Result<Option<Table>> {
        let url = self.table_url(ident)?;
        let loaded = match self
            .client
            .send::<(), LoadTableResult>(Method::GET, url, None)
            .await?
        {
            Reply::Ok(Some(body)) => body,
            Reply::Ok(None) => {
                return Err(DataFusionError::Execution(format!(
                    "loading table '{ident}': the REST catalog sent no metadata"
                )))
            }
            Reply::Failed(f) if f.status == StatusCode::NOT_FOUND => return Ok(None),
            Reply::Failed(f) => return Err(failed(&format!("loading table '{ident}'"), &f)),
        };
        let location = loaded.metadata_location.ok_or_else(|| {
            DataFusionError::Execution(format!(
                "loading table '{ident}': the REST catalog gave no metadata location (a staged table)"
            ))
        })?;
        Ok(Some(self.handle(ident, location, loaded.metadata)?))
    }

    /// Creates a table; the server writes its first metadata file.
    pub async fn create_table(
        &self,
        ns: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        check_namespace(ns)?;
        check_table_name(&creation.name)?;
        if let Some(location) = &creation.location {
            check_location("LOCATION", location)?;
        }
        let ident = TableIdent::new(ns.clone(), creation.name.clone());
        let body = CreateTableRequest {
            name: creation.name,
            location: creation.location,
            schema: creation.schema,
            partition_spec: creation.partition_spec,
            write_order: creation.sort_order,
            stage_create: Some(false),
            properties: creation.properties,
        };
        let url = self
            .client
            .url(true, &["namespaces", &ns.to_url_string(), "tables"])?;
        match self
            .client
            .send::<_, LoadTableResult>(Method::POST, url, Some(&body))
            .await?
        {
            Reply::Ok(Some(loaded)) => {
                let location = loaded.metadata_location.ok_or_else(|| {
                    DataFusionError::Execution(format!(
                        "creating table '{ident}': the REST catalog gave no metadata location"
                    ))
                })?;
                self.handle(&ident, location, loaded.metadata)
            }
            Reply::Ok(None) => self.load_table(&ident).await,
            Reply::Failed(f) if f.status == StatusCode::CONFLICT => Err(
                DataFusionError::Execution(format!("table '{ident}' already exists")),
            ),
            Reply::Failed(f) if f.status == StatusCode::NOT_FOUND => Err(DataFusionError::Plan(
                format!("namespace '{}' does not exist", ns_name(ns)),
            )),
            Reply::Failed(f) => Err(failed(&format!("creating table '{ident}'"), &f)),
        }
    }

    /// Removes a table from the catalog (without purging its files).
    pub async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let mut url = self.table_url(ident)?;
        url.query_pairs_mut().append_pair("purgeRequested", "false");
        match self
            .client
            .send::<(), serde_json::Value>(Method::DELETE, url, None)
            .await?
        {
            Reply::Ok(_) => {
                self.handles.remove(ident);
                Ok(())
            }
            Reply::Failed(f) if f.status == StatusCode::NOT_FOUND => Err(DataFusionError::Plan(
                format!("table '{ident}' does not exist"),
            )),
            Reply::Failed(f) => Err(failed(&format!("dropping table '{ident}'"), &f)),
        }
    }

    /// Registers an existing table (by its metadata file) under `ident`.
    pub async fn register_table(
        &self,
        ident: &TableIdent,
        metadata_location: &str,
    ) -> Result<Table> {
        check_namespace(ident.namespace())?;
        check_table_name(ident.name())?;
        let url = self.client.url(
            true,
            &["namespaces", &ident.namespace().to_url_string(), "register"],
        )?;
        let body = RegisterTableRequest {
            name: ident.name().to_string(),
            metadata_location: metadata_location.to_string(),
            overwrite: None,
        };
        match self
            .client
            .send::<_, LoadTableResult>(Method::POST, url, Some(&body))
            .await?
        {
            Reply::Ok(Some(loaded)) => self.handle(
                ident,
                loaded
                    .metadata_location
                    .unwrap_or_else(|| metadata_location.to_string()),
                loaded.metadata,
            ),
            Reply::Ok(None) => self.load_table(ident).await,
            Reply::Failed(f) if f.status == StatusCode::CONFLICT => Err(
                DataFusionError::Execution(format!("table '{ident}' already exists")),
            ),
            Reply::Failed(f) => Err(failed(&format!("registering table '{ident}'"), &f)),
        }
    }

    /// Renames a table.
    pub async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
        check_namespace(to.namespace())?;
        check_table_name(to.name())?;
        let url = self.client.url(true, &["tables", "rename"])?;
        let body = RenameTableRequest {
            source: from.clone(),
            destination: to.clone(),
        };
        match self
            .client
            .send::<_, serde_json::Value>(Method::POST, url, Some(&body))
            .await?
        {
            Reply::Ok(_) => Ok(()),
            Reply::Failed(f) if f.status == StatusCode::NOT_FOUND => Err(DataFusionError::Plan(
                format!("table '{from}' does not exist"),
            )),
            Reply::Failed(f) if f.status == StatusCode::CONFLICT => Err(
                DataFusionError::Execution(format!("table '{to}' already exists")),
            ),
            Reply::Failed(f) => Err(failed(&format!("renaming table '{from}'"), &f)),
        }
    }
}

/// The error for a commit whose outcome the catalog did not make known.
fn unknown(ident: &TableIdent, why: String) -> DataFusionError {
    DataFusionError::External(Box::new(CommitStateUnknown(format!(
        "commit to table '{ident}': the outcome is unknown ({why}); every file it wrote is kept \
         — check the table's snapshots before retrying"
    ))))
}

#[async_trait::async_trait]
impl MetadataStore for RestCatalog {
    async fn load(self: Arc<Self>, ident: &TableIdent) -> Result<Table> {
        self.load_table(ident).await
    }

    async fn commit_metadata(
        self: Arc<Self>,
        ident: &TableIdent,
        change: MetadataChange,
    ) -> Result<CommitResult> {
        let url = self.table_url(ident)?;
        let body = CommitTableRequest {
            identifier: Some(ident.clone()),
            requirements: change.requirements,
            updates: change.updates,
        };
        let reply = match self
            .client
            .send::<_, CommitTableResponse>(Method::POST, url, Some(&body))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                return match no_reply(&e) {
                    Some(n) if n.maybe_received => Err(unknown(ident, n.to_string())),
                    _ => Err(e),
                }
            }
        };
        match reply {
            Reply::Ok(Some(done)) => Ok(CommitResult::Committed(Box::new(self.handle(
                ident,
                done.metadata_location,
                done.metadata,
            )?))),
            Reply::Ok(None) => Err(unknown(ident, "the catalog sent no new metadata".into())),
            Reply::Failed(f) if f.status == StatusCode::CONFLICT => Ok(CommitResult::Conflict),
            Reply::Failed(f) if f.status.is_server_error() => {
                Err(unknown(ident, format!("{}: {}", f.status, f.message)))
            }
            Reply::Failed(f) => Err(failed(&format!("commit to table '{ident}' refused"), &f)),
        }
    }

    fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    fn object_stores(&self) -> &Arc<ObjectStores> {
        &self.stores
    }
}
