//! Where files live: local directories and object stores (S3 and S3-compatible servers; GCS and
//! Azure behind features), reached the same way by DataFusion's readers and by the iceberg crate's
//! `FileIO`.
//!
//! One [`ObjectStores`] serves a catalog or a session. It holds DataFusion's object-store registry
//! (the session's, so a store an embedding engine registered itself is used as it is) and the
//! [`StorageOptions`] new stores are built from, in Iceberg's property names (`s3.endpoint`,
//! `s3.access-key-id`, ...). Manifests, metadata and the files this crate writes go through a
//! `FileIO` whose storage ([`TableStorage`]) asks the same registry for the same store, so
//! there is one HTTP client per bucket and one place credentials are configured.

mod cloud;
mod file_io;
pub(crate) mod location;
mod tidy;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::{
    DefaultObjectStoreRegistry, ObjectStoreRegistry, ObjectStoreUrl,
};
use datafusion::execution::runtime_env::RuntimeEnv;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

pub(crate) use file_io::table_file_io;
pub use file_io::{TableStorage, TableStorageFactory};
pub use location::LocationMap;

/// Property keys whose values may be shown (in `Debug`, errors and logs); every other value is
/// redacted, so a secret under a key this list does not know is never printed.
const SHOWN_KEYS: &[&str] = &[
    "s3.endpoint",
    "s3.region",
    "client.region",
    "s3.path-style-access",
    "s3.force-virtual-addressing",
    "s3.anonymous",
    "s3.connect-timeout",
    "s3.request-timeout",
    "s3.max-retries",
    "s3.retry-timeout",
    "s3.access-key-id",
    "client.access-key-id",
    "adls.account-name",
    "gcs.project-id",
    "uri",
    "warehouse",
    "prefix",
    "type",
];

/// Storage settings, in the property names Iceberg's Java and Python clients use.
///
/// S3: `s3.endpoint`, `s3.region` (or `client.region`), `s3.access-key-id`,
/// `s3.secret-access-key`, `s3.session-token`, `s3.path-style-access` (or pyiceberg's
/// `s3.force-virtual-addressing`), `s3.anonymous`, `s3.connect-timeout` and
/// `s3.request-timeout` (seconds), `s3.max-retries`, `s3.retry-timeout` (seconds). What is not
/// set comes from the standard AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_REGION`,
/// `AWS_ENDPOINT_URL`, web identity, container and instance credentials).
///
/// `Debug` shows only values known not to be secret; the rest print as `<redacted>`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StorageOptions {
    props: BTreeMap<String, String>,
}

impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.props {
            if is_shown(k) {
                m.entry(k, v);
            } else {
                m.entry(k, &"<redacted>");
            }
        }
        m.finish()
    }
}

/// Whether the value of property `key` may be printed.
pub(crate) fn is_shown(key: &str) -> bool {
    SHOWN_KEYS.contains(&key)
}

impl StorageOptions {
    /// Options from `(key, value)` properties (a catalog's, or a table's).
    pub fn new<K: Into<String>, V: Into<String>>(props: impl IntoIterator<Item = (K, V)>) -> Self {
        Self {
            props: props
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key).map(String::as_str)
    }

    /// The first of `keys` that is set.
    pub(crate) fn first(&self, keys: &[&str]) -> Option<&str> {
        keys.iter().find_map(|k| self.get(k))
    }

    /// Every property.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.props
    }
}

/// The object stores of a catalog or session: DataFusion's registry, which builds a store it
/// is missing from the options (in Iceberg's property names) the first time anything asks for it.
pub struct ObjectStores {
    registry: Arc<dyn ObjectStoreRegistry>,
    options: StorageOptions,
}

impl std::fmt::Debug for ObjectStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStores")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl ObjectStores {
    /// Stores found in (and added to) `registry`, built with `options` when missing. Anything
    /// that reads through [`Self::registry`] (a session built on it, a worker's tasks) gets a
    /// missing bucket's store built, before any table there was opened.
    pub fn new(registry: Arc<dyn ObjectStoreRegistry>, options: StorageOptions) -> Arc<Self> {
        let registry = Arc::new(BuildingRegistry {
            inner: registry,
            options: options.clone(),
            building: Mutex::new(()),
        });
        Arc::new(Self { registry, options })
    }

    /// Stores of their own (a registry no session shares yet), built with `options`.
    pub fn standalone(options: StorageOptions) -> Arc<Self> {
        Self::new(Arc::new(DefaultObjectStoreRegistry::new()), options)
    }

    /// The options new stores are built with.
    pub fn options(&self) -> &StorageOptions {
        &self.options
    }

    /// The registry stores are kept in.
    pub fn registry(&self) -> &Arc<dyn ObjectStoreRegistry> {
        &self.registry
    }

    /// The store of `url`: the registry's, else one built from the options (and registered).
    pub fn store(&self, url: &ObjectStoreUrl) -> Result<Arc<dyn ObjectStore>> {
        self.registry.get_store(url.as_ref())
    }

    /// Makes the store of `url` known to `runtime` unless it has one already (a session other
    /// than the one these stores came from, or one whose registry was replaced).
    pub fn register_in(&self, runtime: &RuntimeEnv, url: &ObjectStoreUrl) -> Result<()> {
        if runtime.object_store(url).is_ok() {
            return Ok(());
        }
        runtime.register_object_store(url.as_ref(), self.store(url)?);
        Ok(())
    }
}

/// A registry (`inner`) that builds a store it does not have from its options and keeps it
/// (a scheme no store is built for stays an error).
struct BuildingRegistry {
    inner: Arc<dyn ObjectStoreRegistry>,
    options: StorageOptions,
    building: Mutex<()>,
}

impl std::fmt::Debug for BuildingRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildingRegistry")
            .field("stores", &self.inner)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl ObjectStoreRegistry for BuildingRegistry {
    fn register_store(
        &self,
        url: &url::Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.inner.register_store(url, store)
    }

    fn deregister_store(&self, url: &url::Url) -> Result<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &url::Url) -> Result<Arc<dyn ObjectStore>> {
        if let Ok(store) = self.inner.get_store(url) {
            return Ok(store);
        }
        let _one_at_a_time = self.building.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(store) = self.inner.get_store(url) {
            return Ok(store);
        }
        let key = ObjectStoreUrl::parse(&url[..url::Position::BeforePath])?;
        let store: Arc<dyn ObjectStore> =
            Arc::new(tidy::TidyStore::new(cloud::build(&key, &self.options)?));
        self.inner.register_store(url, Arc::clone(&store));
        Ok(store)
    }
}

/// A location split into the object store that holds it and the path inside that store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// The store: `file:///` for local files, `s3://bucket` and the like otherwise.
    pub url: ObjectStoreUrl,
    /// The path inside the store.
    pub path: ObjectPath,
}

/// The scheme of `location` when it is a URI other than `file://`.
pub(crate) fn remote_scheme(location: &str) -> Option<&str> {
    let (scheme, _) = location.split_once("://")?;
    let valid = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (valid && !scheme.eq_ignore_ascii_case("file")).then_some(scheme)
}

/// Splits a location (already resolved through any location map) into store and path.
///
/// Local locations (`file://` URIs, absolute and relative paths) are in the local store; URIs
/// such as `s3://bucket/key` are in the store of `scheme://authority`, at the key as written:
/// keys are not percent-decoded, so a key Java wrote as `part=a%2Fb` is found as it is.
pub(crate) fn locate(location: &str) -> Result<Located> {
    let Some(scheme) = remote_scheme(location) else {
        return Ok(Located {
            url: ObjectStoreUrl::local_filesystem(),
            path: to_object_path(location)?,
        });
    };
    let rest = &location[scheme.len() + 3..];
    let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return Err(DataFusionError::Plan(format!(
            "location '{location}' names no bucket"
        )));
    }
    let url = ObjectStoreUrl::parse(format!("{}://{authority}", scheme.to_ascii_lowercase()))
        .map_err(|e| DataFusionError::Plan(format!("bad location '{location}': {e}")))?;
    let path = ObjectPath::parse(key)
        .map_err(|e| DataFusionError::Plan(format!("bad location '{location}': {e}")))?;
    Ok(Located { url, path })
}

/// The local object-store path of a location (`file:///abs`, `/abs`, or relative to the working
/// directory).
pub(crate) fn to_object_path(location: &str) -> Result<ObjectPath> {
    if location.contains("://") && !location.starts_with("file://") {
        return Err(DataFusionError::NotImplemented(format!(
            "only local files are supported, got '{location}'"
        )));
    }
    let raw = location.strip_prefix("file://").unwrap_or(location);
    let path = std::path::absolute(raw)
        .map_err(|e| DataFusionError::Execution(format!("bad file location '{location}': {e}")))?;
    ObjectPath::from_absolute_path(&path)
        .map_err(|e| DataFusionError::Execution(format!("bad file location '{location}': {e}")))
}

/// Makes the store of `url` known to the session that plans a scan reading from it.
pub(crate) fn register_store(
    state: &dyn datafusion::catalog::Session,
    stores: &Arc<ObjectStores>,
    url: &datafusion::execution::object_store::ObjectStoreUrl,
) -> datafusion::error::Result<()> {
    if url.as_str() == "file:///" {
        return Ok(());
    }
    stores.register_in(state.runtime_env(), url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_and_paths_agree() {
        let a = to_object_path("file:///tmp/wh/t/data/a.parquet").unwrap();
        let b = to_object_path("/tmp/wh/t/data/a.parquet").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_ref(), "tmp/wh/t/data/a.parquet");
        assert!(to_object_path("s3://bucket/a.parquet").is_err());
    }

    #[test]
    fn locations_split_into_store_and_key() {
        let s3 = locate("s3://bucket/ns/t/data/part=a%2Fb/f.parquet").unwrap();
        assert_eq!(s3.url.as_str(), "s3://bucket/");
        assert_eq!(s3.path.as_ref(), "ns/t/data/part=a%2Fb/f.parquet");
        let s3a = locate("S3A://b/k").unwrap();
        assert_eq!(s3a.url.as_str(), "s3a://b/");
        let local = locate("file:///tmp/wh/t/a.parquet").unwrap();
        assert_eq!(local.url, ObjectStoreUrl::local_filesystem());
        assert_eq!(local.path.as_ref(), "tmp/wh/t/a.parquet");
        assert_eq!(locate("/tmp/wh/t/a.parquet").unwrap(), local);
        assert!(locate("s3:///key").is_err());
        assert!(locate("s3://bucket/a//b").is_err());
    }

    #[test]
    fn a_standalone_registry_builds_a_missing_store_once_and_keeps_it() {
        let options = StorageOptions::new([
            ("s3.endpoint", "http://127.0.0.1:9"),
            ("s3.access-key-id", "key"),
            ("s3.secret-access-key", "hunter2"),
            ("s3.region", "us-east-1"),
        ]);
        let stores = ObjectStores::standalone(options);
        let registry = Arc::clone(stores.registry());
        let url = url::Url::parse("s3://lake/wh/ns/t/data/a.parquet").unwrap();
        let first = registry.get_store(&url).unwrap();
        let again = registry
            .get_store(&url::Url::parse("s3://lake/other").unwrap())
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other = registry
            .get_store(&url::Url::parse("s3://another/x").unwrap())
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        // Local files are always there; a scheme no store is built for stays an error.
        assert!(registry
            .get_store(&url::Url::parse("file:///tmp/x").unwrap())
            .is_ok());
        let e = registry
            .get_store(&url::Url::parse("nosuch://bucket/x").unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nosuch"), "{e}");
        assert!(!format!("{registry:?}").contains("hunter2"));
    }

    #[test]
    fn secrets_never_print() {
        let o = StorageOptions::new([
            ("s3.endpoint", "http://127.0.0.1:9000"),
            ("s3.secret-access-key", "hunter2"),
            ("s3.session-token", "tok-123"),
            ("some.future.password", "pw-456"),
        ]);
        let shown = format!("{o:?} {:?}", ObjectStores::standalone(o.clone()));
        assert!(shown.contains("http://127.0.0.1:9000"), "{shown}");
        for secret in ["hunter2", "tok-123", "pw-456"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
