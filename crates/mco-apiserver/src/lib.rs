//! An embedded Kubernetes-compatible API server on SQLite, so that kube-rs clients and
//! the real kubectl work against a single machine without a cluster.
//!
//! Start it with [`Server::start`]; the returned [`ServerHandle`] gives the bound
//! address, the CA, kubeconfig files and ready `kube::Client`s for named identities.
//! [`ServerHandle::local_client`] gives a client whose transport calls the request handler
//! in the same process: the same API, authentication and RBAC without a socket or TLS (which
//! was about a tenth of a large `mco up` rollout's CPU). Its responses and watch events leave
//! out `metadata.managedFields`, which the embedded controller and daemons never read and which
//! is the largest part of a much-written Node or MachineConfigNode; writes still record it, and
//! HTTP clients see it as kube-apiserver serves it.
//!
//! The modules form layers, each using only the layers listed before it:
//!
//! 1. [`error`], [`registry`], `strategy`, [`objects`] with `machinery` (these two use each other),
//!    [`tables`], [`discovery`], [`rbac`], [`admission`], [`metrics`], `protobuf`, `tls`: what a resource
//!    is, how its objects are checked, changed and shown, and the server's plumbing;
//! 2. [`store`]: objects on SQLite, the writer thread, watches (it knows nothing of HTTP,
//!    identities or the controllers);
//! 3. [`auth`]: identities and their tokens (persisted by the store), RBAC decisions on the
//!    policy read from the store, the node guard; `client_cert`: client certificates verified
//!    against the data directory's CA; `impersonation`: `Impersonate-*` headers, authorized on
//!    that policy;
//! 4. `disruption`: what PodDisruptionBudgets allow, read from the store;
//! 5. `rest`: the HTTP surface, routing each request to a verb's handler;
//! 6. `controllers`: the server's own loops, writing through the REST verbs.

pub mod admission;
pub mod auth;
mod client_cert;
mod controllers;
mod datadir;
pub mod discovery;
mod disruption;
pub mod error;
mod event;
mod impersonation;
mod listen;
mod machinery;
pub mod metrics;
pub mod objects;
pub mod openapi_v2;
mod protobuf;
pub mod rbac;
pub mod registry;
mod rest;
mod secret;
pub mod store;
mod strategy;
pub mod tables;
mod tls;
pub mod token_request;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tokio_util::task::AbortOnDropHandle;

pub use auth::Identity;
pub use error::{ApiError, Error};
pub use store::Durability;
pub use tls::{ClientCertificate, issue_client_certificate};

/// Largest accepted request body (kube-apiserver's limit for JSON bodies is 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Namespaces that exist from the first start.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Where the server keeps its state and where it listens.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    /// Port 0 picks a free port; the handle reports the real one.
    pub listen: SocketAddr,
    /// How many past events a watch can resume across before it gets 410 Gone.
    pub retained_events: u64,
    /// What an answered write survives.
    pub durability: Durability,
    /// What one client may cost the server (`docs/apiserver.md`, "Limits").
    pub limits: Limits,
}

/// Bounds on what clients may hold of the server. The defaults suit production; tests
/// set small ones to reach them in seconds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most; further clients wait in the listen backlog. Default: half
    /// the soft `RLIMIT_NOFILE` (at least 64), leaving the rest for the store and the process.
    pub max_connections: usize,
    /// A connection that has not finished its TLS handshake by then is closed (default
    /// 10 s; kube-apiserver's Go server allows its `ReadHeaderTimeout`, 32 s).
    pub tls_handshake_timeout: Duration,
    /// A connection with no request in flight for this long is closed; a watch is in flight
    /// while it streams (default 90 s, kube-apiserver's `IdleTimeout`).
    pub idle_timeout: Duration,
    /// Bytes the in-memory event log (the watch cache) may hold besides its count limit,
    /// `Config::retained_events`; older events expire and watches resuming from them get 410
    /// Gone (default 256 MiB).
    pub watch_cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: listen::default_max_connections(),
            tls_handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            watch_cache_bytes: store::RETAINED_BYTES,
        }
    }
}

impl Config {
    pub fn new(data_dir: impl Into<PathBuf>, listen: SocketAddr) -> Config {
        Config {
            data_dir: data_dir.into(),
            listen,
            retained_events: store::RETAINED_EVENTS,
            durability: Durability::default(),
            limits: Limits::default(),
        }
    }
}

pub struct Server;

/// A running server.
pub struct ServerHandle {
    addr: SocketAddr,
    data_dir: PathBuf,
    ca_pem: String,
    app: Arc<rest::App>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// One permit per connection that may still open.
    slots: Arc<Semaphore>,
    max_connections: usize,
}

impl Server {
    /// Creates the data directory on first use, opens the store and starts serving HTTPS.
    pub async fn start(cfg: Config) -> Result<ServerHandle, Error> {
        datadir::create(&cfg.data_dir)?;
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| Error::io(cfg.listen, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io(cfg.listen, e))?;
        let certs = tls::ensure_certs(&cfg.data_dir, &addr)?;
        let client_ca = client_cert::ClientCa::new(&certs.ca_pem)?;
        let tls_cfg = tls::server_config(&certs, client_ca.handshake_verifier())?;
        let store = store::Store::open(
            &cfg.data_dir.join("state.db"),
            cfg.retained_events,
            cfg.durability,
        )?;
        datadir::tighten_files(&cfg.data_dir)?;
        store.set_retained_bytes(cfg.limits.watch_cache_bytes);
        let tokens = auth::Tokens::load(&store);
        let app = Arc::new(rest::App {
            store,
            registry: registry::Registry::new(),
            evict_lock: tokio::sync::Mutex::new(()),
            addr,
            metrics: Default::default(),
            rbac: Default::default(),
            tokens,
            client_ca,
        });
        for ns in INITIAL_NAMESPACES {
            if app.store.get("/namespaces", "", ns).is_none() {
                let info = app
                    .registry
                    .lookup("", "v1", "namespaces")
                    .ok_or_else(|| Error::Data("namespaces missing".into()))?;
                let obj = json!({"metadata": {"name": ns}});
                if let Err(e) =
                    rest::create(&app, &info, "v1", "", obj, &rest::WriteCtx::default()).await
                    && e.code != 409
                {
                    return Err(Error::Data(e.message));
                }
            }
        }
        // Serve stored CRDs before accepting the first request.
        let (_, crds, _) = app.store.list(
            "apiextensions.k8s.io/customresourcedefinitions",
            None,
            None,
            None,
            &|_| true,
        );
        for v in crds {
            app.registry.upsert_crd(&v);
        }
        // Keep the token users already hold in DIR/kubeconfig, for people whose shells still
        // export it; the store holds only digests, so that file is the one place it is read
        // back from. Without it, a new admin token replaces the old ones.
        let kept = kubeconfig_token(&cfg.data_dir.join("kubeconfig"))
            .filter(|t| app.tokens.identity_for(t) == Some(Identity::Admin));
        let admin = match kept {
            Some(t) => {
                app.tokens.keep(&app.store, &t).await?;
                t
            }
            None => app.tokens.mint(&app.store, Identity::Admin).await?,
        };
        tls::write_private(
            &cfg.data_dir.join("kubeconfig"),
            &tls::kubeconfig(&addr, &certs.ca_pem, "admin", &admin),
        )?;
        // Every namespace has its CA ConfigMap before the first request, as on a settled cluster.
        controllers::publish_root_ca_everywhere(&app, &certs.ca_pem).await;
        tokio::spawn(controllers::run(app.clone(), certs.ca_pem.clone()));
        let (shutdown, rx) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(cfg.limits.max_connections));
        let router = axum::Router::new()
            .fallback(rest::handle)
            .with_state(app.clone());
        let task = tokio::spawn(listen::serve(
            listener,
            TlsAcceptor::from(tls_cfg),
            router,
            cfg.limits.clone(),
            slots.clone(),
            rx,
        ));
        tracing::info!(%addr, dir = %cfg.data_dir.display(), "API server listening");
        Ok(ServerHandle {
            addr,
            data_dir: cfg.data_dir,
            ca_pem: certs.ca_pem,
            app,
            shutdown,
            task,
            slots,
            max_connections: cfg.limits.max_connections,
        })
    }
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// How many client watches are open now (a test can wait for one to start
    /// instead of guessing how long that takes).
    pub fn open_watches(&self) -> usize {
        self.app.store.open_watches()
    }

    /// What the in-memory event log holds, in bytes (at most `Limits::watch_cache_bytes`).
    pub fn watch_cache_bytes(&self) -> usize {
        self.app.store.event_log_bytes()
    }

    /// How many client connections are open now (at most `Limits::max_connections`).
    pub fn open_connections(&self) -> usize {
        self.max_connections - self.slots.available_permits()
    }

    /// PEM of the CA that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The admin kubeconfig, `DIR/kubeconfig`.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.data_dir.join("kubeconfig")
    }

    /// Creates a durable bearer token for `id`.
    pub async fn mint_token(&self, id: Identity) -> Result<String, Error> {
        self.app.tokens.mint(&self.app.store, id).await
    }

    /// A kubeconfig document for `token` against this server.
    pub fn kubeconfig_for_token(&self, user: &str, token: &str) -> String {
        tls::kubeconfig(&self.addr, &self.ca_pem, user, token)
    }

    /// A kubeconfig document for a client certificate against this server (one issued by
    /// [`issue_client_certificate`] from this data directory's CA authenticates).
    pub fn kubeconfig_for_certificate(&self, user: &str, cert: &ClientCertificate) -> String {
        tls::kubeconfig_for_certificate(&self.addr, &self.ca_pem, user, cert)
    }

    /// Mints a token for `id` and writes a kubeconfig using it to `path`.
    pub async fn write_kubeconfig(&self, id: Identity, path: &Path) -> Result<(), Error> {
        let token = self.mint_token(id.clone()).await?;
        tls::write_private(path, &self.kubeconfig_for_token(&id.user_name(), &token))
    }

    /// A kube client authenticated as `id` (a fresh token each call).
    ///
    /// kube's default retry layer is off: it retries 429 for up to 15 rounds of
    /// exponential backoff, which turns a PodDisruptionBudget refusal of an eviction
    /// into a minutes-long wait instead of an answer the caller can act on.
    pub async fn client_for(&self, id: Identity) -> Result<kube::Client, Error> {
        Ok(kube::Client::try_from(self.config_for(id).await?)?)
    }

    /// A kube client authenticated as `id` that calls this server's handler in the same
    /// process: the same requests, authentication, authorization and responses as over
    /// the network, without a socket or TLS. For the embedded cluster's own controller and
    /// simulated nodes, whose TLS over loopback (both ends in this process) was about a
    /// tenth of a large rollout's CPU. Its requests fail once the server is shut down.
    pub async fn local_client(&self, id: Identity) -> Result<kube::Client, Error> {
        let bearer = self.bearer_for(id).await?;
        Ok(self.local_service(http::HeaderMap::from_iter([(
            http::header::AUTHORIZATION,
            bearer,
        )])))
    }

    /// [`ServerHandle::local_client`] whose requests carry `user_agent`: the field manager of
    /// its writes without `fieldManager`, as over the network.
    pub async fn local_client_as(
        &self,
        id: Identity,
        user_agent: http::HeaderValue,
    ) -> Result<kube::Client, Error> {
        let bearer = self.bearer_for(id).await?;
        Ok(self.local_service(http::HeaderMap::from_iter([
            (http::header::AUTHORIZATION, bearer),
            (http::header::USER_AGENT, user_agent),
        ])))
    }

    /// `Authorization: Bearer <a new token for id>`.
    async fn bearer_for(&self, id: Identity) -> Result<http::HeaderValue, Error> {
        let token = self.mint_token(id).await?;
        http::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| Error::Data(format!("token header: {e}")))
    }

    /// [`ServerHandle::local_client`] without credentials unless `bearer` is given, and without
    /// a User-Agent: for callers that set `Authorization` and `User-Agent` on each request
    /// themselves.
    pub fn local_transport(&self, bearer: Option<http::HeaderValue>) -> kube::Client {
        self.local_service(
            bearer
                .map(|b| (http::header::AUTHORIZATION, b))
                .into_iter()
                .collect(),
        )
    }

    /// An in-process client that sets `headers` on every request.
    fn local_service(&self, headers: http::HeaderMap) -> kube::Client {
        let app = Arc::downgrade(&self.app);
        let stopped = self.shutdown.subscribe();
        let svc = tower::service_fn(move |mut req: http::Request<kube::client::Body>| {
            for (name, value) in &headers {
                req.headers_mut().insert(name, value.clone());
            }
            req.extensions_mut().insert(rest::InProcess);
            let app = app.upgrade().filter(|_| !*stopped.borrow());
            async move {
                let app = app.ok_or("the API server has shut down")?;
                let req = req.map(axum::body::Body::new);
                // On a task of its own, as a request over the network is: handled inline, the
                // server's frames would sit on top of the caller's, and a caller deep in nested
                // joins (the controllers) overflows a debug build's 2 MiB worker stack. Dropped
                // with the caller's future, as a server drops a request whose client went away.
                let handler = AbortOnDropHandle::new(tokio::spawn(rest::handle(
                    axum::extract::State(app),
                    req,
                )));
                Ok::<_, tower::BoxError>(handler.await?)
            }
        });
        kube::Client::new(svc, "default")
    }

    /// The kube client configuration behind [`ServerHandle::client_for`].
    pub async fn config_for(&self, id: Identity) -> Result<kube::Config, Error> {
        let token = self.mint_token(id.clone()).await?;
        let doc = self.kubeconfig_for_token(&id.user_name(), &token);
        let kc = kube::config::Kubeconfig::from_yaml(&doc)
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let mut cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        cfg.default_retry = false;
        Ok(cfg)
    }

    /// Stops accepting connections, lets open ones finish briefly, and waits.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}

/// The bearer token of an existing kubeconfig, if it has one.
fn kubeconfig_token(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let doc: serde_json::Value = mco_apimachinery::yaml::from_str(&text).ok()?;
    doc.get("users")?
        .get(0)?
        .get("user")?
        .get("token")?
        .as_str()
        .map(str::to_owned)
}
