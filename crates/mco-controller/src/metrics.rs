//! Prometheus metrics and the `/metrics`, `/healthz` and `/readyz` endpoints.
//!
//! Metric names are upstream's (`mco_*_machine_count`, `mcc_drain_err`, `mcc_pool_alert`) so
//! existing alerts and dashboards work unchanged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

/// A failed reconcile: its controller, and the failure's [`crate::Error::kind`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub kind: String,
}

/// A rollout policy's event in a pool: `halt`, `promote`, `window_wait`, `rollback`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutEventLabels {
    pub pool: String,
    pub event: String,
}

/// One of the machine config server's certificate Secrets.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SecretLabels {
    pub secret: String,
}

type HistogramFamily = Family<ControllerLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric the controller exports, plus the readiness flags the probes report.
pub struct Metrics {
    registry: Registry,
    pub machine_count: Family<PoolLabels, Gauge>,
    pub updated_machine_count: Family<PoolLabels, Gauge>,
    pub degraded_machine_count: Family<PoolLabels, Gauge>,
    pub unavailable_machine_count: Family<PoolLabels, Gauge>,
    pub drain_err: Family<NodeLabels, Gauge>,
    pub pool_alert: Family<NodeLabels, Gauge>,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: HistogramFamily,
    pub leader: Gauge,
    pub rollout_events: Family<RolloutEventLabels, Counter>,
    pub server_cert_not_after: Family<SecretLabels, Gauge>,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let machine_count = Family::<PoolLabels, Gauge>::default();
        let updated_machine_count = Family::<PoolLabels, Gauge>::default();
        let degraded_machine_count = Family::<PoolLabels, Gauge>::default();
        let unavailable_machine_count = Family::<PoolLabels, Gauge>::default();
        let drain_err = Family::<NodeLabels, Gauge>::default();
        let pool_alert = Family::<NodeLabels, Gauge>::default();
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration: HistogramFamily =
            Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        let leader = Gauge::default();
        let rollout_events = Family::<RolloutEventLabels, Counter>::default();
        let server_cert_not_after = Family::<SecretLabels, Gauge>::default();
        registry.register(
            "mco_machine_count",
            "Total number of machines in the pool",
            machine_count.clone(),
        );
        registry.register(
            "mco_updated_machine_count",
            "Machines in the pool updated to its target config",
            updated_machine_count.clone(),
        );
        registry.register(
            "mco_degraded_machine_count",
            "Machines in the pool reporting Degraded or Unreconcilable",
            degraded_machine_count.clone(),
        );
        registry.register(
            "mco_unavailable_machine_count",
            "Machines in the pool unavailable for update",
            unavailable_machine_count.clone(),
        );
        registry.register(
            "mcc_drain_err",
            "1 when a node's drain has been failing for longer than the drain timeout",
            drain_err.clone(),
        );
        registry.register(
            "mcc_pool_alert",
            "1 when a node matches the master pool and a custom pool",
            pool_alert.clone(),
        );
        registry.register(
            "mcc_reconcile",
            "Reconciles run, per controller",
            reconciles.clone(),
        );
        registry.register(
            "mcc_reconcile_errors",
            "Reconciles that failed, per controller and kind of error",
            reconcile_errors.clone(),
        );
        registry.register(
            "mcc_reconcile_duration_seconds",
            "Time spent in one reconcile, per controller",
            reconcile_duration.clone(),
        );
        registry.register(
            "mcc_leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        registry.register(
            "mco_rollout_events",
            "Rollout policy events per pool: halt, promote, window_wait, rollback",
            rollout_events.clone(),
        );
        registry.register(
            "mcc_server_certificate_not_after_seconds",
            "When the machine config server's CA and serving certificate expire (Unix seconds)",
            server_cert_not_after.clone(),
        );
        Self {
            registry,
            machine_count,
            updated_machine_count,
            degraded_machine_count,
            unavailable_machine_count,
            drain_err,
            pool_alert,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            leader,
            rollout_events,
            server_cert_not_after,
            ready: AtomicBool::new(false),
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Record one finished reconcile; `error` is the failure's kind when it failed.
    pub fn observe(&self, controller: &str, seconds: f64, error: Option<&str>) {
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        self.reconciles.get_or_create(&labels).inc();
        if let Some(kind) = error {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    controller: controller.to_string(),
                    kind: kind.to_string(),
                })
                .inc();
        }
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// Set the per-pool machine gauges from a pool status.
    pub fn set_pool(&self, pool: &str, status: &mco_api::MachineConfigPoolStatus) {
        let l = PoolLabels { pool: pool.into() };
        self.machine_count
            .get_or_create(&l)
            .set(status.machine_count.into());
        self.updated_machine_count
            .get_or_create(&l)
            .set(status.updated_machine_count.into());
        self.degraded_machine_count
            .get_or_create(&l)
            .set(status.degraded_machine_count.into());
        self.unavailable_machine_count
            .get_or_create(&l)
            .set(status.unavailable_machine_count.into());
    }

    /// Count one rollout policy event of `pool`.
    pub fn rollout_event(&self, pool: &str, event: &str) {
        self.rollout_events
            .get_or_create(&RolloutEventLabels {
                pool: pool.into(),
                event: event.into(),
            })
            .inc();
    }

    /// Ready once the process serves and its caches (or its standby loop) are up.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// The probe and metrics routes.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    m.encode(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(m): State<Arc<Metrics>>| async move {
                if m.is_ready() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .with_state(metrics)
}

/// The paths served without a token, as kube components serve them: the kubelet's probes.
pub const OPEN_PATHS: &[&str] = &["/healthz", "/readyz"];

/// Serve the routes on `addr` as `auth` says until the future is dropped. Returns the bound
/// address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    auth: &mco_metrics_auth::Settings,
    client: kube::Client,
) -> std::io::Result<(SocketAddr, mco_metrics_auth::serve::Serving)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let serving =
        mco_metrics_auth::serve(listener, router(metrics), auth, Some(client), OPEN_PATHS)
            .map_err(std::io::Error::other)?;
    Ok((bound, serving))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_upstream_names() {
        let m = Metrics::new();
        m.set_pool(
            "worker",
            &mco_api::MachineConfigPoolStatus {
                machine_count: 3,
                updated_machine_count: 2,
                degraded_machine_count: 1,
                unavailable_machine_count: 1,
                ..Default::default()
            },
        );
        m.drain_err
            .get_or_create(&NodeLabels { node: "n1".into() })
            .set(1);
        m.pool_alert
            .get_or_create(&NodeLabels { node: "m0".into() })
            .set(1);
        m.observe("node", 0.01, Some("stale"));
        m.server_cert_not_after
            .get_or_create(&SecretLabels {
                secret: "mco-server-tls".into(),
            })
            .set(2_000_000_000);
        let text = m.encode();
        for want in [
            r#"mco_machine_count{pool="worker"} 3"#,
            r#"mco_updated_machine_count{pool="worker"} 2"#,
            r#"mco_degraded_machine_count{pool="worker"} 1"#,
            r#"mco_unavailable_machine_count{pool="worker"} 1"#,
            r#"mcc_drain_err{node="n1"} 1"#,
            r#"mcc_pool_alert{node="m0"} 1"#,
            r#"mcc_reconcile_total{controller="node"} 1"#,
            r#"mcc_reconcile_errors_total{controller="node",kind="stale"} 1"#,
            r#"mcc_reconcile_duration_seconds_count{controller="node"} 1"#,
            r#"mcc_server_certificate_not_after_seconds{secret="mco-server-tls"} 2000000000"#,
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }
}
