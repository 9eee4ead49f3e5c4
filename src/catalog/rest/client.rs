//! HTTP to an Iceberg REST catalog: the base URL and prefix, custom headers, authentication
//! (a bearer `token`, or OAuth2 client credentials exchanged at the token endpoint and renewed
//! before they expire), and the spec's error responses turned into one-line errors.
//!
//! Credentials and tokens never appear in `Debug` output or in errors.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use datafusion::error::{DataFusionError, Result};
use iceberg_catalog_rest::ErrorModel;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// Renew a token when less than this is left of its life (or half its life, when shorter).
const RENEW_BEFORE: Duration = Duration::from_secs(60);

/// How the client authenticates.
enum Auth {
    None,
    /// A bearer token given as it is (`token`).
    Token(String),
    /// OAuth2 client credentials (`credential` = `client_id:client_secret`, or a secret alone).
    ClientCredentials {
        endpoint: String,
        client_id: Option<String>,
        secret: String,
        params: Vec<(String, String)>,
    },
}

/// A token and when to renew it (before it expires).
struct Token {
    value: String,
    renew_at: Option<Instant>,
}

/// A response that is not a success, with what the server said.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The HTTP status.
    pub status: StatusCode,
    /// The server's message (`error.message`), or the start of the body.
    pub message: String,
}

/// The outcome of one request.
pub(crate) enum Reply<T> {
    Ok(T),
    Failed(Failure),
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorModel,
}

#[derive(Deserialize)]
struct TokenBody {
    access_token: String,
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct OAuthErrorBody {
    error: String,
    error_description: Option<String>,
}

/// An HTTP client of one REST catalog.
pub(crate) struct RestClient {
    http: reqwest::Client,
    /// `<uri>/v1`.
    base: String,
    prefix: Option<String>,
    headers: HeaderMap,
    auth: Auth,
    token: Mutex<Option<Token>>,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestClient")
            .field("base", &self.base)
            .field("prefix", &self.prefix)
            .field(
                "auth",
                &match self.auth {
                    Auth::None => "none",
                    Auth::Token(_) => "token",
                    Auth::ClientCredentials { .. } => "oauth2 client credentials",
                },
            )
            .finish_non_exhaustive()
    }
}

fn config_err(message: String) -> DataFusionError {
    DataFusionError::Configuration(message)
}

impl RestClient {
    /// A client from catalog properties: `uri` (required), `token`, `credential`, `scope`,
    /// `oauth2-server-uri`, `audience`, `resource`, `header.<name>`, `prefix`.
    pub fn new(props: &BTreeMap<String, String>) -> Result<Self> {
        let uri = props
            .get("uri")
            .map(|u| u.trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .ok_or_else(|| config_err("a REST catalog needs its 'uri'".into()))?;
        let parsed = url::Url::parse(&uri)
            .map_err(|e| config_err(format!("REST catalog uri '{uri}' is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(config_err(format!(
                "REST catalog uri '{uri}' must be http:// or https://"
            )));
        }
        let base = format!("{uri}/v1");
        let mut headers = HeaderMap::new();
        for (k, v) in props {
            if let Some(name) = k.strip_prefix("header.") {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| config_err(format!("property '{k}': not a header name")))?;
                let value = HeaderValue::from_str(v)
                    .map_err(|_| config_err(format!("property '{k}': not a header value")))?;
                headers.insert(name, value);
            }
        }
        let auth = match (props.get("token"), props.get("credential")) {
            (Some(token), _) if !token.is_empty() => Auth::Token(token.clone()),
            (_, Some(credential)) if !credential.is_empty() => {
                let (client_id, secret) = match credential.split_once(':') {
                    Some((id, secret)) => (Some(id.to_string()), secret.to_string()),
                    None => (None, credential.clone()),
                };
                let endpoint = props
                    .get("oauth2-server-uri")
                    .cloned()
                    .unwrap_or_else(|| format!("{base}/oauth/tokens"));
                let mut params = vec![(
                    "scope".to_string(),
                    props
                        .get("scope")
                        .cloned()
                        .unwrap_or_else(|| "catalog".to_string()),
                )];
                for key in ["audience", "resource"] {
                    if let Some(v) = props.get(key) {
                        params.push((key.to_string(), v.clone()));
                    }
                }
                Auth::ClientCredentials {
                    endpoint,
                    client_id,
                    secret,
                    params,
                }
            }
            _ => Auth::None,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| config_err(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            prefix: props.get("prefix").cloned().filter(|p| !p.is_empty()),
            headers,
            auth,
            token: Mutex::new(None),
        })
    }

    /// Uses `prefix` for the catalog's routes (from the server's config).
    pub fn set_prefix(&mut self, prefix: Option<String>) {
        self.prefix = prefix.filter(|p| !p.is_empty());
    }

    /// The URL of `segments` under the catalog's base, each segment percent-encoded; with
    /// `prefixed`, after the catalog's prefix.
    pub fn url(&self, prefixed: bool, segments: &[&str]) -> Result<url::Url> {
        let mut url = url::Url::parse(&self.base)
            .map_err(|e| DataFusionError::Internal(format!("REST base URL: {e}")))?;
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|_| DataFusionError::Internal("REST base URL has no path".into()))?;
            if prefixed {
                if let Some(prefix) = &self.prefix {
                    for part in prefix.split('/').filter(|p| !p.is_empty()) {
                        path.push(part);
                    }
                }
            }
            for s in segments {
                path.push(s);
            }
        }
        Ok(url)
    }

    /// A token for the next request: the given one, or a cached one not about to expire, or a
    /// new one from the token endpoint.
    async fn bearer(&self, renew: bool) -> Result<Option<String>> {
        let (endpoint, client_id, secret, params) = match &self.auth {
            Auth::None => return Ok(None),
            Auth::Token(t) => return Ok(Some(t.clone())),
            Auth::ClientCredentials {
                endpoint,
                client_id,
                secret,
                params,
            } => (endpoint, client_id, secret, params),
        };
        let mut cached = self.token.lock().await;
        if let Some(t) = cached.as_ref() {
            let fresh = t.renew_at.is_none_or(|at| Instant::now() < at);
            if fresh && !renew {
                return Ok(Some(t.value.clone()));
            }
        }
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        if let Some(id) = client_id {
            form.push(("client_id", id));
        }
        form.push(("client_secret", secret));
        for (k, v) in params {
            form.push((k, v));
        }
        let started = Instant::now();
        let response = self
            .http
            .post(endpoint)
            .headers(self.headers.clone())
            .form(&form)
            .send()
            .await
            .map_err(|e| unreachable(endpoint, &e))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| unreachable(endpoint, &e))?;
        if !status.is_success() {
            let why = match serde_json::from_slice::<OAuthErrorBody>(&body) {
                Ok(e) => match e.error_description {
                    Some(d) => format!("{}: {d}", e.error),
                    None => e.error,
                },
                Err(_) => match serde_json::from_slice::<ErrorBody>(&body) {
                    Ok(e) => e.error.message,
                    Err(_) => status.to_string(),
                },
            };
            return Err(DataFusionError::Execution(format!(
                "the REST catalog refused its credential ({status}, {why}) at {endpoint}"
            )));
        }
        let token: TokenBody = serde_json::from_slice(&body).map_err(|_| {
            DataFusionError::Execution(format!("the token endpoint {endpoint} sent no token"))
        })?;
        *cached = Some(Token {
            value: token.access_token.clone(),
            renew_at: token.expires_in.map(|s| {
                let life = Duration::from_secs(s);
                started + life - RENEW_BEFORE.min(life / 2)
            }),
        });
        Ok(Some(token.access_token))
    }

    /// Sends a request with an optional JSON body; the reply's JSON on success. A 401 from a
    /// server whose token came from client credentials renews the token and tries once more.
    pub async fn send<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        url: url::Url,
        body: Option<&B>,
    ) -> Result<Reply<Option<T>>> {
        let mut renewed = false;
        loop {
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .headers(self.headers.clone());
            if let Some(token) = self.bearer(renewed).await? {
                let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    DataFusionError::Execution(
                        "the REST catalog's token is not a header value".into(),
                    )
                })?;
                request = request.header(AUTHORIZATION, value);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(r) => r,
                Err(e) => return Err(unreachable(url.as_str(), &e)),
            };
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED
                && !renewed
                && matches!(self.auth, Auth::ClientCredentials { .. })
            {
                renewed = true;
                continue;
            }
            let bytes = response
                .bytes()
                .await
                .map_err(|e| unreachable(url.as_str(), &e))?;
            if status.is_success() {
                if bytes.is_empty() || status == StatusCode::NO_CONTENT {
                    return Ok(Reply::Ok(None));
                }
                return serde_json::from_slice(&bytes)
                    .map(|v| Reply::Ok(Some(v)))
                    .map_err(|e| {
                        DataFusionError::Execution(format!(
                            "the REST catalog's reply to {method} {} is not what the spec says: {e}",
                            url.path()
                        ))
                    });
            }
            let message = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(e) => e.error.message,
                Err(_) => String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            return Ok(Reply::Failed(Failure { status, message }));
        }
    }
}

/// A request that got no reply. Unless the connection was never made, the server may have
/// received and acted on it.
#[derive(Debug)]
pub(crate) struct NoReply {
    message: String,
    /// Whether the request may have reached the server.
    pub maybe_received: bool,
}

impl std::fmt::Display for NoReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NoReply {}

/// The [`NoReply`] `e` is, if it is one.
pub(crate) fn no_reply(e: &DataFusionError) -> Option<&NoReply> {
    match e {
        DataFusionError::External(inner) => inner.downcast_ref::<NoReply>(),
        _ => None,
    }
}

/// An error for a request that got no reply.
fn unreachable(url: &str, e: &reqwest::Error) -> DataFusionError {
    let why = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        text
    };
    DataFusionError::External(Box::new(NoReply {
        message: format!("REST catalog at {url} did not answer: {why}"),
        maybe_received: !e.is_connect(),
    }))
}
