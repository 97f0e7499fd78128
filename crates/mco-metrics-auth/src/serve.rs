//! Serving a router: as given over plain HTTP ([`Mode::None`]: nothing else is built), or over
//! TLS behind a [`Gate`] ([`Mode::Delegated`]), some paths (the probes) left open as kube
//! components leave `/healthz` and `/readyz` open.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::gate::{Gate, Limits, Outcome, Reviewer};
use crate::{Error, Mode, Settings};

/// The server, until dropped or failed.
pub type Serving = Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>;

/// From accept to the end of the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once; further clients wait in the kernel's backlog.
const HANDSHAKES: usize = 64;

/// Serves `router` on `listener` as `settings` say; with [`Mode::Delegated`] callers are
/// reviewed through `client`, except on the `open` paths.
pub fn serve(
    listener: TcpListener,
    router: Router,
    settings: &Settings,
    client: Option<kube::Client>,
    open: &'static [&'static str],
) -> Result<Serving, Error> {
    settings.validate()?;
    match settings.mode {
        Mode::None => Ok(Box::pin(axum::serve(listener, router).into_future())),
        Mode::Delegated => {
            let client = client.ok_or(Error::NoClient)?;
            let files = settings
                .cert_file
                .as_deref()
                .zip(settings.key_file.as_deref());
            let tls = crate::tls::serving(files)?;
            let gate = Gate::new(crate::review::Kube::new(client), Limits::default());
            Ok(serve_gated(listener, router, tls, Arc::new(gate), open))
        }
    }
}

/// Serves `router` over TLS, every path but the `open` ones behind `gate`; certificate files
/// are reloaded for as long as the server runs.
pub fn serve_gated<R: Reviewer>(
    listener: TcpListener,
    router: Router,
    tls: crate::tls::Serving,
    gate: Arc<Gate<R>>,
    open: &'static [&'static str],
) -> Serving {
    let guarded = router.layer(axum::middleware::from_fn_with_state(
        (gate, open),
        guard::<R>,
    ));
    let listener = TlsListener::new(listener, TlsAcceptor::from(tls.config));
    let server = axum::serve(listener, guarded).into_future();
    match tls.reload {
        None => Box::pin(server),
        Some(reload) => Box::pin(async move {
            tokio::select! {
                served = server => served,
                never = reload.run() => match never {},
            }
        }),
    }
}

async fn guard<R: Reviewer>(
    State((gate, open)): State<(Arc<Gate<R>>, &'static [&'static str])>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if open.contains(&path) {
        return next.run(req).await;
    }
    let verb = req.method().as_str().to_ascii_lowercase();
    let outcome = gate
        .decide(
            req.headers()
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes),
            &verb,
            path,
            Instant::now(),
        )
        .await;
    match &outcome {
        Outcome::Allowed => return next.run(req).await,
        Outcome::Unauthenticated => tracing::debug!(path, "metrics: unauthenticated request"),
        Outcome::Denied { user, reason } => {
            tracing::debug!(path, user, reason, "metrics: request denied")
        }
        Outcome::AuthenticationFailed(e) => {
            tracing::warn!(error = %e, "metrics: token review failed")
        }
        Outcome::AuthorizationFailed { user, error } => {
            tracing::warn!(user, %error, "metrics: access review failed")
        }
        Outcome::Busy => tracing::debug!(path, "metrics: too many reviews under way"),
    }
    let status = StatusCode::from_u16(outcome.status()).unwrap_or(StatusCode::FORBIDDEN);
    let mut response = (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        outcome.body(),
    )
        .into_response();
    if outcome == Outcome::Busy {
        // The API server's answer past its in-flight limit: try again in a second.
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// TLS connections, handshaken off the accept loop so a slow client holds up nobody.
struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: std::io::Result<SocketAddr>,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn new(listener: TcpListener, acceptor: TlsAcceptor) -> TlsListener {
        let local = listener.local_addr();
        let (tx, ready) = mpsc::channel(HANDSHAKES);
        let accepting = tokio::spawn(async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES));
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of descriptors or similar: wait a little instead of spinning.
                        tracing::warn!(error = %e, "metrics: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    {
                        let _ = tx.send((tls, peer)).await;
                    }
                });
            }
        });
        TlsListener {
            ready,
            local,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept loop only ends with this listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.local {
            Ok(a) => Ok(*a),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{Access, ReviewError};
    use k8s_openapi::api::authentication::v1::UserInfo;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct OneReader;

    impl Reviewer for OneReader {
        async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
            Ok(["reader", "nobody"].contains(&token).then(|| UserInfo {
                username: Some(token.to_string()),
                ..Default::default()
            }))
        }

        async fn authorize(
            &self,
            user: &UserInfo,
            _: &str,
            _: &str,
        ) -> Result<Access, ReviewError> {
            Ok(Access {
                allowed: user.username.as_deref() == Some("reader"),
                reason: String::new(),
            })
        }
    }

    fn router() -> Router {
        Router::new()
            .route("/metrics", axum::routing::get(|| async { "mcd_state 1\n" }))
            .route("/healthz", axum::routing::get(|| async { "ok" }))
    }

    /// A GET over TLS, trusting only `cert` for `localhost`; the whole response.
    async fn get(
        addr: SocketAddr,
        cert: &rustls::pki_types::CertificateDer<'static>,
        path: &str,
        token: Option<&str>,
    ) -> String {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut tls = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .expect("the handshake verifies the self-signed certificate");
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        tls.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        tls.read_to_string(&mut out).await.unwrap_or_default();
        out
    }

    #[tokio::test]
    async fn tls_with_the_self_signed_certificate_and_only_the_probes_open() {
        let tls = crate::tls::serving(None).unwrap();
        let cert = tls.certificate.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Arc::new(Gate::new(OneReader, Limits::default()));
        let task = tokio::spawn(serve_gated(listener, router(), tls, gate, &["/healthz"]));

        let anonymous = get(addr, &cert, "/metrics", None).await;
        assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
        assert!(anonymous.ends_with("\r\n\r\nUnauthorized\n"), "{anonymous}");
        assert!(!anonymous.contains("mcd_state"), "{anonymous}");

        let probe = get(addr, &cert, "/healthz", None).await;
        assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
        assert!(probe.ends_with("ok"), "{probe}");

        let denied = get(addr, &cert, "/metrics", Some("nobody")).await;
        assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
        assert!(
            denied.ends_with("Authorization denied for user nobody\n"),
            "{denied}"
        );

        let allowed = get(addr, &cert, "/metrics", Some("reader")).await;
        assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
        assert!(allowed.ends_with("mcd_state 1\n"), "{allowed}");
        task.abort();
    }

    #[tokio::test]
    async fn a_client_that_never_handshakes_holds_up_nobody() {
        let tls = crate::tls::serving(None).unwrap();
        let cert = tls.certificate.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Arc::new(Gate::new(OneReader, Limits::default()));
        let task = tokio::spawn(serve_gated(listener, router(), tls, gate, &["/healthz"]));
        let _silent = TcpStream::connect(addr).await.unwrap();
        // A deadline, not a wait: a handshake on the accept loop would block here for good.
        let probe =
            tokio::time::timeout(Duration::from_secs(5), get(addr, &cert, "/healthz", None))
                .await
                .expect("served while another client's handshake is pending");
        assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
        task.abort();
    }

    #[tokio::test]
    async fn none_serves_plain_http_and_delegated_needs_a_client() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fut = serve(listener, router(), &Settings::default(), None, &[]).unwrap();
        let task = tokio::spawn(fut);
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        task.abort();

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let delegated = Settings {
            mode: Mode::Delegated,
            ..Default::default()
        };
        let e = serve(listener, router(), &delegated, None, &[])
            .err()
            .unwrap();
        assert!(matches!(e, Error::NoClient), "{e}");
    }

    /// The leaf certificate a handshake presents, the client trusting any of `roots`.
    async fn presented(
        addr: SocketAddr,
        roots: &[rustls::pki_types::CertificateDer<'static>],
    ) -> rustls::pki_types::CertificateDer<'static> {
        let mut store = rustls::RootCertStore::empty();
        for r in roots {
            store.add(r.clone()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(store)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let tls = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .expect("a certificate the client trusts");
        tls.get_ref().1.peer_certificates().unwrap()[0].clone()
    }

    /// Replaces `path` at once, as the kubelet updates a mounted Secret.
    fn put(path: &std::path::Path, content: &[u8]) {
        let new = path.with_extension("new");
        std::fs::write(&new, content).unwrap();
        std::fs::rename(&new, path).unwrap();
    }

    /// Polls `done` every few milliseconds until it holds, failing past a deadline.
    async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done().await {
            assert!(Instant::now() < deadline, "{what}: not within 10 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn rewritten_certificate_files_are_served_without_a_restart() {
        let dir = std::env::temp_dir().join(format!("mco-metrics-auth-r-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
        let pairs: Vec<_> = (0..3)
            .map(|_| rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap())
            .collect();
        let roots: Vec<_> = pairs.iter().map(|p| p.cert.der().clone()).collect();
        let write = |i: usize| {
            put(&cert_file, pairs[i].cert.pem().as_bytes());
            put(&key_file, pairs[i].signing_key.serialize_pem().as_bytes());
        };
        write(0);

        let mut tls = crate::tls::serving(Some((&cert_file, &key_file))).unwrap();
        let reload = tls.reload.as_mut().expect("files are reloaded");
        reload.interval = Duration::from_millis(20);
        let current = reload.current().clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Arc::new(Gate::new(OneReader, Limits::default()));
        let task = tokio::spawn(serve_gated(listener, router(), tls, gate, &[]));
        assert_eq!(presented(addr, &roots).await, roots[0]);

        write(1);
        until("the rewritten pair served", async || {
            presented(addr, &roots).await == roots[1]
        })
        .await;

        // A certificate file that is no PEM: the pair before serves on.
        let rejected = current.rejected();
        put(&cert_file, b"not a certificate\n");
        until("the broken file read", async || {
            current.rejected() > rejected
        })
        .await;
        assert_eq!(presented(addr, &roots).await, roots[1]);

        // A new certificate whose key has not come yet: likewise.
        let rejected = current.rejected();
        put(&cert_file, pairs[2].cert.pem().as_bytes());
        until("the unmatched pair read", async || {
            current.rejected() > rejected
        })
        .await;
        assert_eq!(presented(addr, &roots).await, roots[1]);
        assert_eq!(current.certificate(), roots[1]);

        // Its key completes the pair.
        put(&key_file, pairs[2].signing_key.serialize_pem().as_bytes());
        until("the completed pair served", async || {
            presented(addr, &roots).await == roots[2]
        })
        .await;
        task.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_self_signed_certificate_is_not_reloaded() {
        assert!(crate::tls::serving(None).unwrap().reload.is_none());
    }

    /// Holds every review until `release` closes.
    struct Holding {
        in_flight: std::sync::atomic::AtomicUsize,
        release: tokio::sync::Semaphore,
    }

    impl Reviewer for Holding {
        async fn authenticate(&self, _: &str) -> Result<Option<UserInfo>, ReviewError> {
            self.in_flight
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = self.release.acquire().await;
            Ok(None)
        }

        async fn authorize(&self, _: &UserInfo, _: &str, _: &str) -> Result<Access, ReviewError> {
            Ok(Access {
                allowed: false,
                reason: String::new(),
            })
        }
    }

    #[tokio::test]
    async fn past_the_reviews_under_way_the_answer_is_429_with_retry_after() {
        let tls = crate::tls::serving(None).unwrap();
        let cert = tls.certificate.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            reviews: 1,
            queue_wait: Duration::from_millis(50),
            ..Limits::default()
        };
        let gate = Arc::new(Gate::new(
            Holding {
                in_flight: Default::default(),
                release: tokio::sync::Semaphore::new(0),
            },
            limits,
        ));
        let task = tokio::spawn(serve_gated(listener, router(), tls, gate.clone(), &[]));
        let first = {
            let cert = cert.clone();
            tokio::spawn(async move { get(addr, &cert, "/metrics", Some("first")).await })
        };
        let in_flight = || {
            gate.reviewer()
                .in_flight
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        until("the first review under way", async || in_flight() == 1).await;

        let busy = get(addr, &cert, "/metrics", Some("second")).await;
        assert!(busy.starts_with("HTTP/1.1 429"), "{busy}");
        assert!(busy.contains("\r\nretry-after: 1\r\n"), "{busy}");
        assert!(
            busy.ends_with("Too many requests, please try again later.\n"),
            "{busy}"
        );
        assert_eq!(in_flight(), 1, "the second token was not reviewed");

        gate.reviewer().release.close();
        let first = first.await.unwrap();
        assert!(first.starts_with("HTTP/1.1 401"), "{first}");
        task.abort();
    }
}
