//! Building an object store for a URL from [`StorageOptions`]: S3 (feature `s3`, on by default),
//! GCS (`gcs`) and Azure (`azure`) through object_store's backends.

use std::sync::Arc;
#[cfg(feature = "s3")]
use std::time::Duration;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use object_store::ObjectStore;

use super::StorageOptions;

/// Builds the store that serves `url`.
pub(super) fn build(
    url: &ObjectStoreUrl,
    options: &StorageOptions,
) -> Result<Arc<dyn ObjectStore>> {
    let parsed = url::Url::parse(url.as_str())
        .map_err(|e| DataFusionError::Plan(format!("bad object store URL '{url}': {e}")))?;
    let bucket = parsed.host_str().unwrap_or_default().to_string();
    match parsed.scheme() {
        "file" => Ok(Arc::new(object_store::local::LocalFileSystem::new())),
        "s3" | "s3a" | "s3n" => s3(&bucket, options),
        "gs" | "gcs" => gcs(&bucket, options),
        "abfs" | "abfss" | "az" | "adl" | "wasb" | "wasbs" => azure(url.as_str(), options),
        other => Err(DataFusionError::Plan(format!(
            "no object store for '{other}://' locations (supported: file://, s3://{}{})",
            if cfg!(feature = "gcs") { ", gs://" } else { "" },
            if cfg!(feature = "azure") {
                ", abfss://"
            } else {
                ""
            },
        ))),
    }
}

/// A property read as a boolean.
#[cfg(feature = "s3")]
fn flag(options: &StorageOptions, key: &str) -> Result<Option<bool>> {
    match options.get(key) {
        None => Ok(None),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(Some(true)),
            "false" | "0" | "no" => Ok(Some(false)),
            _ => Err(DataFusionError::Configuration(format!(
                "property '{key}' must be true or false, got '{v}'"
            ))),
        },
    }
}

/// A property read as a number of seconds.
#[cfg(feature = "s3")]
fn seconds(options: &StorageOptions, key: &str) -> Result<Option<Duration>> {
    options
        .get(key)
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    DataFusionError::Configuration(format!(
                        "property '{key}' must be a positive number of seconds, got '{v}'"
                    ))
                })
        })
        .transpose()
}

/// Retries: object_store's backoff, bounded so that an unreachable store fails within seconds
/// rather than minutes (`s3.max-retries`, `s3.retry-timeout` change it).
#[cfg(feature = "s3")]
fn retry(options: &StorageOptions) -> Result<object_store::RetryConfig> {
    let mut retry = object_store::RetryConfig {
        max_retries: 4,
        retry_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    if let Some(n) = options.get("s3.max-retries") {
        retry.max_retries = n.trim().parse().map_err(|_| {
            DataFusionError::Configuration(format!(
                "property 's3.max-retries' must be a whole number, got '{n}'"
            ))
        })?;
    }
    if let Some(t) = seconds(options, "s3.retry-timeout")? {
        retry.retry_timeout = t;
    }
    Ok(retry)
}

#[cfg(feature = "s3")]
fn s3(bucket: &str, options: &StorageOptions) -> Result<Arc<dyn ObjectStore>> {
    use object_store::aws::AmazonS3Builder;
    use object_store::ClientOptions;

    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    let mut client = ClientOptions::new();
    if let Some(endpoint) = options.first(&["s3.endpoint"]) {
        if endpoint.starts_with("http://") {
            client = client.with_allow_http(true);
        }
        b = b.with_endpoint(endpoint);
    }
    if let Some(region) = options.first(&["s3.region", "client.region"]) {
        b = b.with_region(region);
    }
    if let Some(id) = options.first(&["s3.access-key-id", "client.access-key-id"]) {
        b = b.with_access_key_id(id);
    }
    if let Some(secret) = options.first(&["s3.secret-access-key", "client.secret-access-key"]) {
        b = b.with_secret_access_key(secret);
    }
    if let Some(token) = options.first(&["s3.session-token", "client.session-token"]) {
        b = b.with_token(token);
    }
    // Iceberg Java's `s3.path-style-access`, or pyiceberg's `s3.force-virtual-addressing`.
    match (
        flag(options, "s3.path-style-access")?,
        flag(options, "s3.force-virtual-addressing")?,
    ) {
        (Some(path_style), _) => b = b.with_virtual_hosted_style_request(!path_style),
        (None, Some(virtual_hosted)) => b = b.with_virtual_hosted_style_request(virtual_hosted),
        (None, None) => {}
    }
    if flag(options, "s3.anonymous")? == Some(true) {
        b = b.with_skip_signature(true);
    }
    if let Some(t) = seconds(options, "s3.connect-timeout")? {
        client = client.with_connect_timeout(t);
    }
    if let Some(t) = seconds(options, "s3.request-timeout")? {
        client = client.with_timeout(t);
    }
    if let Some(proxy) = options.get("s3.proxy-uri") {
        client = client.with_proxy_url(proxy);
    }
    let store = b
        .with_client_options(client)
        .with_retry(retry(options)?)
        .build()
        .map_err(|e| {
            DataFusionError::Configuration(format!("cannot set up S3 bucket '{bucket}': {e}"))
        })?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "s3"))]
fn s3(_bucket: &str, _options: &StorageOptions) -> Result<Arc<dyn ObjectStore>> {
    Err(DataFusionError::Plan(
        "s3:// locations need iceberg-exec built with the `s3` feature".into(),
    ))
}

#[cfg(feature = "gcs")]
fn gcs(bucket: &str, options: &StorageOptions) -> Result<Arc<dyn ObjectStore>> {
    use object_store::gcp::GoogleCloudStorageBuilder;
    let mut b = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
    if let Some(path) = options.get("gcs.service-account-path") {
        b = b.with_service_account_path(path);
    }
    if let Some(key) = options.get("gcs.service-account-key") {
        b = b.with_service_account_key(key);
    }
    let store = b.build().map_err(|e| {
        DataFusionError::Configuration(format!("cannot set up GCS bucket '{bucket}': {e}"))
    })?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "gcs"))]
fn gcs(_bucket: &str, _options: &StorageOptions) -> Result<Arc<dyn ObjectStore>> {
    Err(DataFusionError::Plan(
        "gs:// locations need iceberg-exec built with the `gcs` feature".into(),
    ))
}

#[cfg(feature = "azure")]
fn azure(url: &str, options: &StorageOptions) -> Result<Arc<dyn ObjectStore>> {
    use object_store::azure::MicrosoftAzureBuilder;
    let mut b = MicrosoftAzureBuilder::from_env().with_url(url);
    if let Some(name) = options.get("adls.account-name") {
        b = b.with_account(name);
    }
    if let Some(key) = options.get("adls.account-key") {
        b = b.with_access_key(key);
    }
    let store = b.build().map_err(|e| {
        DataFusionError::Configuration(format!("cannot set up Azure storage for '{url}': {e}"))
    })?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "azure"))]
fn azure(_url: &str, _options: &StorageOptions) -> Result<Arc<dyn ObjectStore>> {
    Err(DataFusionError::Plan(
        "Azure locations need iceberg-exec built with the `azure` feature".into(),
    ))
}
