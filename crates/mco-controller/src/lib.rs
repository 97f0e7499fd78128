//! The mco controller: renders each pool's MachineConfigs into one rendered config, moves nodes
//! to it no faster than `maxUnavailable` allows, drains them, keeps one MachineConfigNode per
//! node, and reports truthful pool status.
//!
//! The decisions live in the pure crate [`mco_rollout`] (the planner, the drain's choices, the
//! rendered-config GC, the lease takeover rule); the controllers here only read the cluster,
//! call it and write the result.
//! [`run`] is the whole controller, usable from `mco controller` and in-process.
//!
//! Modules, each using only those above it (besides [`Config`] and [`Error`], defined here):
//! - [`metrics`]: the Prometheus metrics and the probe endpoints;
//! - [`certs`]: the certificates of the ControllerConfig's CA bundles (pure);
//! - [`written`]: this controller's own writes laid over caches that lag them;
//! - [`nodeview`]: what a pool pass reads of the nodes, kept from one pass to the next;
//! - [`ctx`]: [`ctx::Ctx`], the state every controller shares, and the helpers on it;
//! - [`leader`]: the Lease elector;
//! - [`templates`]: the template controller's configs (`00-<role>`, `01-<role>-*`), applied
//!   by [`ccstatus`]'s reconcile; the render waits until the cache holds them;
//! - the controllers, which do not use each other: [`render`], [`rollout`] (the node
//!   controller), [`mcn`] (MachineConfigNode lifecycle), [`drain`], [`disruption`] (the
//!   node disruption policy of `MachineConfiguration/cluster`), [`generators`] (the
//!   MachineConfigs written from KubeletConfigs, ContainerRuntimeConfigs and registry policy),
//!   [`pinned`] (the pools' `spec.pinnedImageSets`; the node controller reads its tally of
//!   MachineConfigNodes for the pools' status), [`ccstatus`] (the ControllerConfig's status
//!   and the pools' `certExpirys`), [`server_certs`] (the machine config server's CA and
//!   serving certificate) and [`user_data`] (the Machine API's user-data Secrets, pointed at
//!   that CA's bundle), [`ccsync`] (the ControllerConfig's CA bundles from the cluster's), and
//!   [`clusteroperator`] (the `machine-config` ClusterOperator's status, as upstream's operator
//!   reports it);
//! - [`controllers`]: the wiring of reflectors and kube-runtime `Controller`s, used by [`run`].

mod by_name;
pub mod ccstatus;
pub mod ccsync;
pub mod certs;
pub mod clusteroperator;
pub mod controllers;
pub mod ctx;
pub mod disruption;
pub mod drain;
pub mod generators;
pub mod image_mode;
pub mod leader;
pub mod mcn;
pub mod metrics;
pub mod nodeview;
pub mod pinned;
pub mod policies;
pub mod probes;
pub mod render;
pub mod rollout;
pub mod server_certs;
pub mod templates;
pub mod user_data;
pub mod windows;
pub mod written;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

// The lease settings are part of [`Config`].
pub use mco_rollout::leader::LeaseConfig;
pub use metrics::Metrics;
// Its settings are part of [`Config`]; the command line parses them with its types.
pub use mco_metrics_auth as metrics_auth;

/// Why a reconcile or the controller failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("encoding: {0}")]
    Json(#[from] serde_json::Error),
    #[error("serving metrics: {0}")]
    Io(#[from] std::io::Error),
    /// The cache was behind a write; the reconcile is retried with fresher state.
    #[error("stale state: {0}")]
    Stale(String),
}

impl Error {
    /// What kind of failure this is, as the `kind` label of `mcc_reconcile_errors_total`:
    /// stable snake_case, so alerts can tell a refusing API server from a lagging cache.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "client",
            Error::Json(_) => "encoding",
            Error::Io(_) => "io",
            Error::Stale(_) => "stale",
        }
    }
}

/// Drain timing; every value is a flag so tests can run in seconds (defaults are upstream's).
#[derive(Debug, Clone)]
pub struct DrainTimeouts {
    /// One drain attempt gives up after this long.
    pub attempt_timeout: Duration,
    /// Delay between evictions refused by a PodDisruptionBudget (429).
    pub evict_retry: Duration,
    /// A failed attempt is retried after this long...
    pub requeue: Duration,
    /// ...or after this long once the drain has been failing for `slow_after`.
    pub requeue_slow: Duration,
    pub slow_after: Duration,
    /// After failing this long: a `DrainFailed` event and `mcc_drain_err{node}=1`.
    pub failed_after: Duration,
}

impl Default for DrainTimeouts {
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_secs(90),
            evict_retry: Duration::from_secs(5),
            requeue: Duration::from_secs(60),
            requeue_slow: Duration::from_secs(300),
            slow_after: Duration::from_secs(600),
            failed_after: Duration::from_secs(3600),
        }
    }
}

/// Everything the controller can be told (named `Config` in the public API; not to be confused
/// with the `ControllerConfig` object, which is cluster input to rendering).
#[derive(Debug, Clone)]
pub struct Config {
    /// Written to rendered configs as `generated-by-controller-version`.
    pub controller_version: String,
    /// Rendered configs kept per pool beyond those still referenced.
    pub rendered_retain: usize,
    /// Bursts of MachineConfig/pool changes within this window render once.
    pub render_debounce: Duration,
    /// Every object is reconciled again at least this often, so missed deletes heal.
    pub resync: Duration,
    /// A pool's next pass starts no sooner than this many times the last one's planning time
    /// after it started, so planning takes at most about 1/N of a thread; node events that
    /// arrive meanwhile fold into one pass. See [`ctx::PassGate`].
    pub pass_spacing: u32,
    /// First retry delay after a failed reconcile; each further failure of the same object doubles it, up to 5 minutes.
    pub error_requeue: Duration,
    pub drain: DrainTimeouts,
    pub lease: LeaseConfig,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// Who may read `/metrics` (the probes stay open): anyone over plain HTTP, or over TLS
    /// whoever the API server authenticates and authorizes.
    pub metrics_auth: metrics_auth::Settings,
    /// The node this controller runs on, updated last in its pool so a rollout does not drain
    /// the controller midway. `None`: taken from [`OWN_NODE_ENV`] when [`run`] starts.
    pub own_node: Option<String>,
    /// Run the template controller (`00-<role>`, `01-<role>-kubelet`,
    /// `01-<role>-container-runtime`); off, another writer owns those configs and the render
    /// does not wait for them.
    pub templates: bool,
    /// Where the caches are lent, while this controller leads, to a reader in the same process
    /// (the dashboard of `mco up`); `None` lends them to nobody.
    pub lend_caches: Option<mco_api::caches::Lender>,
    /// Keep the machine config server's CA and serving certificate ([`server_certs`]); `None`
    /// leaves them to someone else (upstream's operator, or an installer).
    pub server_certs: Option<server_certs::ServerCerts>,
    /// Keep the Machine API's user-data Secrets pointing at the server's CA bundle
    /// ([`user_data`]); `None` leaves them alone.
    pub user_data: Option<user_data::UserData>,
    /// Keep the ControllerConfig's CA bundles in step with the cluster's ConfigMaps
    /// ([`ccsync`]), as upstream's operator does, and report the `machine-config`
    /// ClusterOperator's status ([`clusteroperator`]); off, both are left to it.
    pub sync_controller_config: bool,
    /// mco's namespace: Events about cluster-scoped objects (Nodes, pools, MachineConfigs)
    /// are recorded there, with their reference naming it, as upstream's
    /// `NamespacedEventRecorder` records them in its own; never in `default`.
    pub namespace: String,
}

/// Environment variable naming the node the controller runs on; a Deployment sets it from the
/// downward API (`spec.nodeName`).
pub const OWN_NODE_ENV: &str = "NODE_NAME";

impl Default for Config {
    fn default() -> Self {
        Self {
            controller_version: env!("CARGO_PKG_VERSION").to_string(),
            rendered_retain: 5,
            render_debounce: Duration::from_secs(1),
            resync: Duration::from_secs(30),
            pass_spacing: 10,
            error_requeue: Duration::from_secs(2),
            drain: DrainTimeouts::default(),
            lease: LeaseConfig::default(),
            metrics_addr: None,
            metrics_auth: Default::default(),
            own_node: None,
            templates: true,
            lend_caches: None,
            server_certs: None,
            user_data: None,
            sync_controller_config: false,
            namespace: mco_api::constants::names::DEFAULT_NAMESPACE.into(),
        }
    }
}

/// Run the controller until `shutdown` resolves: serve metrics, wait for the leader lease,
/// reconcile while holding it, and fall back to standby if it is lost.
pub async fn run(
    client: kube::Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    run_with_metrics(client, config, Arc::new(Metrics::new()), shutdown).await
}

/// Like [`run`], with metrics the caller can read (tests and the embedded cluster).
pub async fn run_with_metrics(
    client: kube::Client,
    config: Config,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let mut config = config;
    if config.own_node.is_none() {
        config.own_node = std::env::var(OWN_NODE_ENV).ok().filter(|n| !n.is_empty());
    }
    if let Some(node) = &config.own_node {
        tracing::info!(%node, "running on this node; it is updated last in its pool");
    }
    let mut server = None;
    if let Some(addr) = config.metrics_addr {
        let (bound, fut) =
            metrics::serve(addr, metrics.clone(), &config.metrics_auth, client.clone()).await?;
        tracing::info!(%bound, auth = %config.metrics_auth.mode, "serving /metrics, /healthz and /readyz");
        server = Some(tokio_util::task::AbortOnDropHandle::new(tokio::spawn(fut)));
    }
    // The metrics server ends with the controller, as a shutdown or an error returns.
    let _server = server;
    metrics.set_ready(true);
    let elector = leader::Elector::new(client.clone(), config.lease.clone());
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = elector.acquire() => {}
        }
        metrics.leader.set(1);
        let outcome = tokio::select! {
            _ = &mut shutdown => {
                metrics.leader.set(0);
                elector.release().await;
                return Ok(());
            }
            r = controllers::run_all(client.clone(), config.clone(), metrics.clone(), elector.identity().to_string()) => r,
            _ = elector.hold() => Ok(()),
        };
        metrics.leader.set(0);
        if let Err(e) = outcome {
            tracing::error!(error = %e, "controllers stopped");
            elector.release().await;
            return Err(e);
        }
        tracing::warn!("lost the leader lease; standing by");
    }
}

/// Parse a duration flag: a number with a unit (`250ms`, `5s`, `10m`, `1h`), or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 500ms, 5s, 10m, 1h"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!(
            "invalid duration {s:?}: unit must be ms, s, m or h"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn error_kinds_are_stable_labels() {
        let api = kube::Error::Api(Box::new(kube::core::Status::failure("no", "Conflict")));
        let json = serde_json::from_str::<u8>("x").unwrap_err();
        let kinds: Vec<&str> = [
            Error::Kube(api),
            Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Json(json),
            Error::Io(std::io::Error::other("bind")),
            Error::Stale("behind".into()),
        ]
        .iter()
        .map(Error::kind)
        .collect();
        assert_eq!(kinds, ["api", "client", "encoding", "io", "stale"]);
    }
}
