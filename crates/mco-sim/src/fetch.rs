//! A joining node's one request: `GET https://<mcs>/config/<pool>` with Ignition's `Accept`
//! header, trusting the machine config server's CA, within a timeout and a size limit.
//!
//! The client half of the stack the workspace serves with (hyper over tokio-rustls), one
//! connection per request, as a booting machine's Ignition makes it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// What Ignition 2.x with spec 3.5 sends (the newest spec the server serves); other entries
/// are what Ignition adds for servers that ignore the version.
pub const ACCEPT: &str = "application/vnd.coreos.ignition+json;version=3.5.0, */*;q=0.1";
/// The largest Ignition a node reads: a rendered config is at most a few MiB (the API server
/// refuses larger objects), and the answer holds it twice plus base64.
pub const MAX_BYTES: usize = 32 << 20;
/// How long one request may take, connection and body included.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The CA given to trust is not a PEM certificate.
    #[error("machine config server CA: {0}")]
    Ca(String),
    /// No connection, a failed handshake, or a broken answer: the server may not be up yet.
    #[error("GET {url}: {message}")]
    Transport { url: String, message: String },
    /// The server answered with an error status (its text names the pool).
    #[error("GET {url}: {status}: {body}")]
    Status {
        url: String,
        status: http::StatusCode,
        body: String,
    },
    /// The answer is larger than the limit.
    #[error("GET {url}: the answer exceeds the limit of {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// Not within the timeout.
    #[error("GET {url}: no complete answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
}

impl FetchError {
    /// Whether a booting machine's Ignition tries again: every failure but a refusal of the
    /// request itself (4xx) and an answer too large to read.
    pub fn retryable(&self) -> bool {
        match self {
            FetchError::Transport { .. } | FetchError::Timeout { .. } => true,
            FetchError::Status { status, .. } => status.is_server_error(),
            FetchError::Ca(_) | FetchError::TooLarge { .. } => false,
        }
    }
}

/// The machine config server a node joins through.
#[derive(Clone)]
pub struct Server {
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    /// Where the CA bundle is kept, read again at each fetch: a bundle with a renewed CA
    /// reaches the next machine, as upstream's pointer Ignition is updated.
    ca_file: Option<std::path::PathBuf>,
    /// The answer's size limit.
    pub max_bytes: usize,
    /// One request's time limit.
    pub timeout: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Server({})", self.url())
    }
}

/// A client configuration trusting the CA certificates of `ca_pem`.
fn client_config(ca_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, FetchError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| FetchError::Ca(e.to_string()))?;
        roots.add(cert).map_err(|e| FetchError::Ca(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(FetchError::Ca("no certificate in the PEM".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FetchError::Ca(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(tls))
}

impl Server {
    /// The server at `addr`, trusted through the CA certificates of `ca_pem`.
    pub fn new(addr: SocketAddr, ca_pem: &[u8]) -> Result<Server, FetchError> {
        Ok(Server {
            addr,
            tls: client_config(ca_pem)?,
            ca_file: None,
            max_bytes: MAX_BYTES,
            timeout: TIMEOUT,
        })
    }

    /// The server at `addr`, trusted through the CA certificates of the file `ca`, read at
    /// each fetch.
    pub fn trusting_file(addr: SocketAddr, ca: &std::path::Path) -> Result<Server, FetchError> {
        let pem =
            std::fs::read(ca).map_err(|e| FetchError::Ca(format!("{}: {e}", ca.display())))?;
        Ok(Server {
            ca_file: Some(ca.to_path_buf()),
            ..Server::new(addr, &pem)?
        })
    }

    /// The TLS configuration of this fetch: from the CA file as it is now, when there is one
    /// and it reads; else the one made at the start.
    fn tls_now(&self) -> Arc<rustls::ClientConfig> {
        self.ca_file
            .as_ref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|pem| client_config(&pem).ok())
            .unwrap_or_else(|| self.tls.clone())
    }

    /// `https://<addr>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The URL a node of `pool` fetches.
    pub fn config_url(&self, pool: &str) -> String {
        format!("{}/config/{pool}", self.url())
    }

    /// Fetches `pool`'s Ignition: the body of a 200 answer.
    pub async fn fetch(&self, pool: &str) -> Result<Vec<u8>, FetchError> {
        let url = self.config_url(pool);
        match tokio::time::timeout(self.timeout, self.get(pool, &url)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout {
                url,
                timeout: self.timeout,
            }),
        }
    }

    async fn get(&self, pool: &str, url: &str) -> Result<Vec<u8>, FetchError> {
        let transport = |e: &dyn std::fmt::Display| FetchError::Transport {
            url: url.to_string(),
            message: e.to_string(),
        };
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| transport(&e))?;
        let name = ServerName::from(self.addr.ip());
        let tls = tokio_rustls::TlsConnector::from(self.tls_now())
            .connect(name, tcp)
            .await
            .map_err(|e| transport(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| transport(&e))?;
        let conn = tokio::spawn(conn);
        let req = http::Request::get(format!("/config/{pool}"))
            .header(http::header::HOST, self.addr.to_string())
            .header(http::header::ACCEPT, ACCEPT)
            .body(kube::client::Body::empty())
            .map_err(|e| transport(&e))?;
        let resp = sender.send_request(req).await.map_err(|e| transport(&e));
        let out = match resp {
            Ok(resp) => self.read(url, resp).await,
            Err(e) => Err(e),
        };
        conn.abort();
        out
    }

    /// The body, refusing more than `max_bytes` as soon as it arrives (a declared length
    /// over the limit is refused before reading).
    async fn read(
        &self,
        url: &str,
        resp: http::Response<hyper::body::Incoming>,
    ) -> Result<Vec<u8>, FetchError> {
        use http_body::Body as _;
        let status = resp.status();
        let too_large = || FetchError::TooLarge {
            url: url.to_string(),
            limit: self.max_bytes,
        };
        let declared = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > self.max_bytes) {
            return Err(too_large());
        }
        let mut body = resp.into_body();
        let mut out = Vec::with_capacity(declared.unwrap_or(0));
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|e| FetchError::Transport {
                url: url.to_string(),
                message: e.to_string(),
            })?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > self.max_bytes {
                    return Err(too_large());
                }
                out.extend_from_slice(&data);
            }
        }
        if !status.is_success() {
            return Err(FetchError::Status {
                url: url.to_string(),
                status,
                body: String::from_utf8_lossy(&out).trim().to_string(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_server::tls::Certificate;
    use mco_server::{App, Limits, Source};

    /// A bootstrap directory serving pool `worker` from a rendered config with one file.
    fn bootstrap_dir(dir: &std::path::Path) {
        std::fs::create_dir_all(dir.join("machine-pools")).unwrap();
        std::fs::create_dir_all(dir.join("machine-configs")).unwrap();
        std::fs::write(
            dir.join("machine-pools/worker.yaml"),
            "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfigPool\nmetadata: {name: worker}\nspec: {}\nstatus: {configuration: {name: rendered-worker-1}}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("machine-configs/rendered-worker-1.yaml"),
            "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: rendered-worker-1}\nspec:\n  config:\n    ignition: {version: 3.5.0}\n    storage: {files: [{path: /etc/x, mode: 420, overwrite: true, contents: {source: 'data:,hello'}}]}\n",
        )
        .unwrap();
    }

    async fn serve(dir: &std::path::Path) -> (mco_server::Handle, Vec<u8>) {
        let certs = dir.join("certs");
        let tls = mco_server::tls::server_config(&Certificate::CaDir {
            dir: certs.clone(),
            names: Vec::new(),
        })
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let app = App::new(Source::Dir(dir.join("boot")), None);
        let h = mco_server::start(listener, tls, app, Limits::default()).unwrap();
        (h, std::fs::read(certs.join("ca.crt")).unwrap())
    }

    #[tokio::test]
    async fn fetches_within_the_limit_and_refuses_one_byte_over() {
        let t = tempfile::tempdir().unwrap();
        bootstrap_dir(&t.path().join("boot"));
        let (h, ca) = serve(t.path()).await;
        let mut s = Server::new(h.addr(), &ca).unwrap();
        let body = s.fetch("worker").await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["ignition"]["version"], "3.5.0");
        // Exactly at the limit is read; one byte less is refused, naming the URL.
        s.max_bytes = body.len();
        assert_eq!(s.fetch("worker").await.unwrap(), body);
        s.max_bytes = body.len() - 1;
        let e = s.fetch("worker").await.unwrap_err();
        assert!(!e.retryable());
        assert_eq!(
            e.to_string(),
            format!(
                "GET https://{}/config/worker: the answer exceeds the limit of {} bytes",
                h.addr(),
                body.len() - 1
            )
        );
        // An unknown pool is the server's own answer, and retried only when it is a 5xx.
        let e = s.fetch("infra").await.unwrap_err();
        assert!(
            matches!(&e, FetchError::Status { status, body, .. }
                if *status == http::StatusCode::NOT_FOUND && body.contains("pool infra")),
            "{e}"
        );
        assert!(!e.retryable());
        h.shutdown().await;
    }

    #[tokio::test]
    async fn another_ca_is_not_trusted_and_a_closed_port_is_retried() {
        let t = tempfile::tempdir().unwrap();
        bootstrap_dir(&t.path().join("boot"));
        let (h, _) = serve(t.path()).await;
        let other = tempfile::tempdir().unwrap();
        mco_server::tls::server_config(&Certificate::CaDir {
            dir: other.path().to_path_buf(),
            names: Vec::new(),
        })
        .unwrap();
        let wrong = std::fs::read(other.path().join("ca.crt")).unwrap();
        let e = Server::new(h.addr(), &wrong)
            .unwrap()
            .fetch("worker")
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Transport { .. }), "{e}");
        let addr = h.addr();
        h.shutdown().await;
        let e = Server::new(addr, &wrong)
            .unwrap()
            .fetch("worker")
            .await
            .unwrap_err();
        assert!(e.retryable(), "{e}");
        assert!(matches!(
            Server::new(addr, b"not pem"),
            Err(FetchError::Ca(_))
        ));
    }
}
