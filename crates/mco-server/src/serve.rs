//! HTTPS: `GET|HEAD /config/<pool>`, `/healthz`, and 404/405 for anything else, as upstream's
//! mux answers; within [`Limits`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use crate::accept::{SpecVersion, negotiate};
use crate::assemble::{Appended, assemble};
use crate::source::Source;

/// Bounds on what clients may cost the server.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once; further clients wait in the kernel's backlog.
    pub max_connections: usize,
    /// Bytes of request line and headers; more gets 431 (hyper's minimum is 8 KiB).
    pub max_header_bytes: usize,
    /// From accept to the end of the TLS handshake.
    pub handshake_timeout: Duration,
    /// From the connection's start (or its previous response) to a request's complete headers.
    pub header_timeout: Duration,
    /// The longest a connection stays open; it is closed after its request in flight.
    pub max_connection_age: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_header_bytes: 16 * 1024,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(120),
        }
    }
}

/// Most answers kept; the cache is emptied when full (there are a few pools and versions).
const CACHE_ENTRIES: usize = 64;

/// What the handlers share.
pub struct App {
    pub source: Source,
    /// Bootstrap tokens a client must present (`Authorization: Bearer <token>`); `None`: open.
    pub tokens: Option<Vec<String>>,
    /// The kubelet's bootstrap kubeconfig appended as `/etc/kubernetes/kubeconfig`; `None`:
    /// none.
    pub kubeconfig: Option<Vec<u8>>,
    /// Answers by (config name, its resourceVersion, its image-mode image, the
    /// ControllerConfig's resourceVersion, spec): a config
    /// is assembled once.
    cache: Mutex<HashMap<CacheKey, Bytes>>,
}

type CacheKey = (String, String, String, String, SpecVersion);

impl App {
    pub fn new(source: Source, tokens: Option<Vec<String>>) -> Arc<App> {
        App::with_kubeconfig(source, tokens, None)
    }

    /// [`App::new`], appending `kubeconfig` as the machines' bootstrap kubeconfig.
    pub fn with_kubeconfig(
        source: Source,
        tokens: Option<Vec<String>>,
        kubeconfig: Option<Vec<u8>>,
    ) -> Arc<App> {
        Arc::new(App {
            source,
            tokens,
            kubeconfig,
            cache: Mutex::new(HashMap::new()),
        })
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Response {
    let mut m = message.into();
    m.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        m,
    )
        .into_response()
}

/// Equal in time independent of where the strings differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(app: &App, headers: &HeaderMap) -> bool {
    let Some(tokens) = &app.tokens else {
        return true;
    };
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return false;
    };
    tokens
        .iter()
        .fold(false, |ok, t| same(t.as_bytes(), given) | ok)
}

async fn config(
    State(app): State<Arc<App>>,
    method: Method,
    Path(pool): Path<String>,
    headers: HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD");
    }
    if !crate::valid_name(&pool) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("invalid pool name {pool:?}: must be a lowercase RFC 1123 subdomain"),
        );
    }
    let accept = headers.get(header::ACCEPT).map(|v| v.as_bytes());
    let version = match negotiate(accept) {
        Ok(v) => v,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("pool {pool}: {e}")),
    };
    if !authorized(&app, &headers) {
        tracing::info!(pool, "denying a request without a valid bootstrap token");
        return text(
            StatusCode::FORBIDDEN,
            format!(
                "pool {pool}: this server requires a bootstrap token (Authorization: Bearer <token>)"
            ),
        );
    }
    let mc = match app.source.lookup(&pool).await {
        Ok(mc) => mc,
        Err(e) => {
            tracing::warn!(pool, error = %e, "could not get config");
            return text(e.status(), e.to_string());
        }
    };
    let cc = app.source.controller_config();
    // The image is part of the key: in image mode the same config is served with one.
    let key = (
        mc.metadata.name.clone().unwrap_or_default(),
        mc.metadata.resource_version.clone().unwrap_or_default(),
        mco_api::image_mode::embed::image_of(&mc).to_string(),
        cc.as_ref()
            .and_then(|c| c.metadata.resource_version.clone())
            .unwrap_or_default(),
        version,
    );
    let cached = app
        .cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    let body = match cached {
        Some(b) => b,
        None => {
            let appended =
                match Appended::from_controller_config(cc.as_deref(), app.kubeconfig.clone()) {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::error!(pool, error = %e, "could not assemble config");
                        return text(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!("pool {pool}: {e}"),
                        );
                    }
                };
            let built =
                tokio::task::spawn_blocking(move || assemble(&mc, version, &appended)).await;
            let b = match built {
                Ok(Ok(b)) => Bytes::from(b),
                Ok(Err(e)) => {
                    tracing::error!(pool, error = %e, "could not assemble config");
                    return text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("pool {pool}: {e}"),
                    );
                }
                Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            };
            let mut cache = app.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key, b.clone());
            b
        }
    };
    let len = body.len();
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(body)
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, len)
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn healthz(method: Method) -> StatusCode {
    if method == Method::GET || method == Method::HEAD {
        StatusCode::OK
    } else {
        StatusCode::METHOD_NOT_ALLOWED
    }
}

async fn fallback(method: Method) -> StatusCode {
    if method == Method::GET || method == Method::HEAD {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::METHOD_NOT_ALLOWED
    }
}

/// The routes.
pub fn router(app: Arc<App>) -> axum::Router {
    use axum::routing::any;
    axum::Router::new()
        .route("/config/{pool}", any(config))
        .route("/healthz", any(healthz))
        .fallback(fallback)
        .with_state(app)
}

/// A running server.
pub struct Handle {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Handle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; open connections finish their request in flight.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Serves `app` over TLS on `listener` within `limits`.
pub fn start(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Arc<App>,
    limits: Limits,
) -> std::io::Result<Handle> {
    let addr = listener.local_addr()?;
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(accept_loop(
        listener,
        TlsAcceptor::from(tls),
        router(app),
        limits,
        stop_rx,
    ));
    Ok(Handle { addr, stop, task })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // At the cap, wait for a slot before accepting: clients queue in the backlog.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            _ = stop.changed() => return,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors or similar: wait a little instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let (acceptor, router, limits, mut stop) = (
            acceptor.clone(),
            router.clone(),
            limits.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tcp.set_nodelay(true);
            let Ok(Ok(tls)) =
                tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await
            else {
                return;
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(limits.max_header_bytes.max(8192));
            let conn = http.serve_connection(TokioIo::new(tls), TowerToHyperService::new(router));
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = tokio::time::sleep(limits.max_connection_age) => {}
                _ = stop.changed() => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        let app = App {
            source: Source::Dir("/nonexistent".into()),
            tokens: Some(vec!["abc".into(), "xyz".into()]),
            kubeconfig: None,
            cache: Mutex::new(HashMap::new()),
        };
        let mut h = HeaderMap::new();
        assert!(!authorized(&app, &h));
        for (v, ok) in [
            ("Bearer xyz", true),
            ("Bearer abc", true),
            ("Bearer ab", false),
            ("Bearer abcd", false),
            ("bearer abc", false),
            ("abc", false),
        ] {
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert_eq!(authorized(&app, &h), ok, "{v}");
        }
    }
}
