//! The HTTP side: GET endpoints only, loopback by default, a bearer token anywhere else.
//!
//! | path | what |
//! |---|---|
//! | `/` | the page |
//! | `/api/fleet` | the view model as JSON |
//! | `/events` | server-sent `fleet` events: the whole view first, then what changed |
//! | `/assets/app.js`, `/assets/style.css` | the page's script and style |
//! | `/healthz` | `ok` |

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use futures::Stream;
use kube::Client;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::html;
use crate::view::{self, Fleet};

/// Clients following `/events` at once; more get 503.
pub const MAX_SSE_CLIENTS: usize = 64;
/// A request must be answered within this (an `/events` stream only has to start).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest token file read.
pub const MAX_TOKEN_BYTES: u64 = 4096;
/// The cookie that carries the token for a browser after `/?token=…`.
pub const COOKIE: &str = "mco_dashboard_token";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the dashboard listens on {0}, which is not a loopback address: give it a bearer token file (--token-file; --dashboard-token-file for `mco up`), or listen on 127.0.0.1"
    )]
    TokenRequired(SocketAddr),
    #[error("token file {path}: {message}")]
    TokenFile { path: String, message: String },
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Where to listen, the token required of every request, and the caches to read.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub token: Option<String>,
    /// The caches of a controller in the same process, read instead of watching what they hold;
    /// see [`mco_api::caches`].
    pub caches: Option<mco_api::caches::Borrower>,
}

impl Config {
    /// Loopback without a token, or any address with one.
    pub fn check(&self) -> Result<(), Error> {
        if self.token.is_none() && !self.listen.ip().is_loopback() {
            return Err(Error::TokenRequired(self.listen));
        }
        Ok(())
    }
}

/// A token file: one line, at most [`MAX_TOKEN_BYTES`], surrounding whitespace ignored.
pub fn read_token(path: &Path) -> Result<String, Error> {
    use std::io::Read;
    let err = |message: String| Error::TokenFile {
        path: path.display().to_string(),
        message,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > MAX_TOKEN_BYTES {
        return Err(err(format!("larger than {MAX_TOKEN_BYTES} bytes")));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(err("empty".into()));
    }
    if token
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == ';')
    {
        return Err(err("the token must be one word".into()));
    }
    Ok(token.to_string())
}

/// Equal bytes, in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

#[derive(Clone)]
struct AppState {
    fleet: watch::Receiver<Arc<Fleet>>,
    token: Option<Arc<str>>,
    sse: Arc<Semaphore>,
}

/// The token a request presents: `Authorization: Bearer …`, else the cookie.
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(v.trim());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

async fn guard(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = &s.token {
        let ok = presented(req.headers())
            .is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes()));
        // A browser cannot send a header with the first page: `/?token=…` sets the cookie.
        let login = req.uri().path() == "/"
            && req
                .uri()
                .query()
                .and_then(|q| {
                    q.split('&')
                        .find_map(|kv| kv.strip_prefix("token="))
                        .map(str::to_string)
                })
                .is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes()));
        if login {
            let mut r = Redirect::to("/").into_response();
            if let Ok(v) = HeaderValue::from_str(&format!(
                "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
            )) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            return r;
        }
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is required\n",
            )
                .into_response();
        }
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "timed out\n").into_response(),
    }
}

/// The longest node name `/?node=` takes (a DNS subdomain's).
pub const MAX_NODE_NAME: usize = 253;

/// `/?node=NAME` renders that node's detail on the server (the page without its script).
#[derive(serde::Deserialize)]
struct IndexQuery {
    node: Option<String>,
}

async fn index(
    State(s): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<IndexQuery>,
) -> Html<String> {
    let fleet = s.fleet.borrow().clone();
    Html(html::page(&fleet, selected(q.node.as_deref())))
}

/// The node `/?node=` asks for, if its name could be one.
fn selected(node: Option<&str>) -> Option<&str> {
    node.filter(|n| n.len() <= MAX_NODE_NAME)
}

async fn api_fleet(State(s): State<AppState>) -> Response {
    let fleet = s.fleet.borrow().clone();
    axum::Json(&*fleet).into_response()
}

fn sse_event(d: &view::Delta) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default()
        .event("fleet")
        .data(serde_json::to_string(d).unwrap_or_default()))
}

async fn events(State(s): State<AppState>) -> Response {
    let Ok(permit) = s.sse.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "10")],
            "too many clients follow /events\n",
        )
            .into_response();
    };
    let mut rx = s.fleet.clone();
    let first = rx.borrow_and_update().clone();
    let stream = futures::stream::unfold(
        (rx, first, true, permit),
        |(mut rx, last, start, permit)| async move {
            if start {
                let d = view::Delta::full(&last);
                return Some((sse_event(&d), (rx, last, false, permit)));
            }
            loop {
                rx.changed().await.ok()?;
                let new = rx.borrow_and_update().clone();
                // Each client diffs against what it last got, so a slow one skips states
                // instead of piling them up.
                let d = view::delta(&last, &new);
                if !d.is_empty() {
                    return Some((sse_event(&d), (rx, new, false, permit)));
                }
            }
        },
    );
    sse_response(stream)
}

fn sse_response(
    stream: impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The router over a view that `fleet` keeps current.
pub fn router(fleet: watch::Receiver<Arc<Fleet>>, token: Option<String>) -> Router {
    let state = AppState {
        fleet,
        token: token.map(Arc::from),
        sse: Arc::new(Semaphore::new(MAX_SSE_CLIENTS)),
    };
    Router::new()
        .route("/", get(index))
        .route("/api/fleet", get(api_fleet))
        .route("/events", get(events))
        .route(
            "/assets/app.js",
            get(|| async { asset(html::APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/style.css",
            get(|| async { asset(html::STYLE_CSS, "text/css; charset=utf-8") }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(middleware::map_response(|mut r: Response| async move {
            let h = r.headers_mut();
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
            );
            r
        }))
        .with_state(state)
}

/// A running dashboard; dropping it stops it.
pub struct Dashboard {
    pub addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Dashboard {
    /// `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Checks `cfg`, binds, and serves the dashboard of `client`'s cluster in the background.
pub async fn serve(client: Client, cfg: Config) -> Result<Dashboard, Error> {
    cfg.check()?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| Error::Bind {
            addr: cfg.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: cfg.listen,
        source,
    })?;
    let (tx, rx) = watch::channel(Arc::new(Fleet::default()));
    let live = tokio::spawn(crate::live::run(client, cfg.caches, tx));
    let app = router(rx, cfg.token);
    let http = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("dashboard: {e}");
        }
    });
    Ok(Dashboard {
        addr,
        tasks: vec![live, http],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_needs_a_token() {
        let c = |listen: &str, token: Option<&str>| Config {
            listen: listen.parse().unwrap(),
            token: token.map(str::to_string),
            caches: None,
        };
        assert!(c("127.0.0.1:8080", None).check().is_ok());
        assert!(c("[::1]:8080", None).check().is_ok());
        let e = c("0.0.0.0:8080", None).check().unwrap_err();
        assert!(e.to_string().contains("--token-file"), "{e}");
        assert!(c("0.0.0.0:8080", Some("t")).check().is_ok());
    }

    #[test]
    fn a_selected_node_name_is_at_most_a_dns_subdomain() {
        let at = "a".repeat(MAX_NODE_NAME);
        assert_eq!(selected(Some(&at)), Some(at.as_str()));
        assert_eq!(selected(Some(&format!("{at}a"))), None);
        assert_eq!(selected(None), None);
    }

    #[test]
    fn constant_time_eq_compares_whole_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn token_files_are_read_up_to_their_limit() {
        let dir = std::env::temp_dir().join(format!("mco-dash-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t");
        std::fs::write(
            &f,
            format!("{}\n", "a".repeat(MAX_TOKEN_BYTES as usize - 1)),
        )
        .unwrap();
        assert_eq!(read_token(&f).unwrap().len(), MAX_TOKEN_BYTES as usize - 1);
        std::fs::write(&f, "a".repeat(MAX_TOKEN_BYTES as usize + 1)).unwrap();
        assert!(read_token(&f).unwrap_err().to_string().contains("larger"));
        std::fs::write(&f, " \n").unwrap();
        assert!(read_token(&f).unwrap_err().to_string().contains("empty"));
        std::fs::write(&f, "two words").unwrap();
        assert!(read_token(&f).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; mco_dashboard_token=c"),
        );
        assert_eq!(presented(&h), Some("c"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        assert_eq!(presented(&h), Some("t"));
    }
}
