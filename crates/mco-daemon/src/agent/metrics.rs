//! The daemon's Prometheus metrics, named as upstream's so existing alerts and dashboards work.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `{state, reason}` of `mcd_state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// Node state.
    pub state: String,
    /// Degraded reason.
    pub reason: String,
}

/// `{config, err}` of `mcd_update_state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdateLabels {
    /// Target config.
    pub config: String,
    /// Error, empty on success.
    pub err: String,
}

/// `{os, version}` of `mcd_host_os_and_version`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OsLabels {
    /// Uppercased os-release ID.
    pub os: String,
    /// OS version.
    pub version: String,
}

/// Every daemon metric.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// `mcd_state`: 1 for the current state.
    pub state: Family<StateLabels, Gauge>,
    /// `mcd_update_state`: 1 for the last update attempt.
    pub update_state: Family<UpdateLabels, Gauge>,
    /// `mcd_config_drift`: unix time of the last drift detected.
    pub config_drift: Gauge<f64, AtomicU64>,
    /// `mcd_pivot_errors_total`.
    pub pivot_errors: Counter,
    /// `mcd_reboots_failed_total`.
    pub reboots_failed: Counter,
    /// `mcd_host_os_and_version`.
    pub host_os: Family<OsLabels, Gauge>,
    /// `mcd_kubelet_state`: the kubelet health checks failed in a row
    /// ([`crate::agent::kubelet_health`]).
    pub kubelet_state: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry holding every metric.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let state = Family::<StateLabels, Gauge>::default();
        let update_state = Family::<UpdateLabels, Gauge>::default();
        let config_drift = Gauge::<f64, AtomicU64>::default();
        let pivot_errors = Counter::default();
        let reboots_failed = Counter::default();
        let host_os = Family::<OsLabels, Gauge>::default();
        let kubelet_state = Gauge::default();
        r.register(
            "mcd_state",
            "state of daemon on specified node",
            state.clone(),
        );
        r.register(
            "mcd_update_state",
            "completed update config or error",
            update_state.clone(),
        );
        r.register(
            "mcd_config_drift",
            "timestamp of the last config drift detected",
            config_drift.clone(),
        );
        r.register(
            "mcd_pivot_errors",
            "errors encountered during pivot",
            pivot_errors.clone(),
        );
        r.register(
            "mcd_reboots_failed",
            "reboots that failed",
            reboots_failed.clone(),
        );
        r.register(
            "mcd_host_os_and_version",
            "os that MCD is running on and version if RHCOS",
            host_os.clone(),
        );
        r.register(
            "mcd_kubelet_state",
            "state of kubelet health monitor",
            kubelet_state.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            state,
            update_state,
            config_drift,
            pivot_errors,
            reboots_failed,
            host_os,
            kubelet_state,
        }
    }

    /// Records the node state (only one state series is kept).
    pub fn set_state(&self, state: &str, reason: &str) {
        self.state.clear();
        self.state
            .get_or_create(&StateLabels {
                state: state.into(),
                reason: reason.into(),
            })
            .set(1);
    }

    /// Records the last update attempt.
    pub fn set_update(&self, config: &str, err: &str) {
        self.update_state.clear();
        self.update_state
            .get_or_create(&UpdateLabels {
                config: config.into(),
                err: err.into(),
            })
            .set(1);
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// `GET /metrics`.
pub fn router(metrics: Metrics) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    m.encode(),
                )
            }
        }),
    )
}

/// Serves [`router`] over plain HTTP on `listener` (upstream: `127.0.0.1:8797`) until the
/// task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Metrics) -> std::io::Result<()> {
    axum::serve(listener, router(metrics)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream() {
        let m = Metrics::new();
        m.set_state("Degraded", "boom");
        m.set_state("Done", "");
        m.pivot_errors.inc();
        m.config_drift.set(5.0);
        m.host_os
            .get_or_create(&OsLabels {
                os: "UOS".into(),
                version: "20".into(),
            })
            .set(1);
        let text = m.encode();
        assert!(
            text.contains("mcd_state{state=\"Done\",reason=\"\"} 1"),
            "{text}"
        );
        assert!(!text.contains("Degraded"), "{text}");
        assert!(text.contains("mcd_pivot_errors_total 1"), "{text}");
        assert!(text.contains("mcd_config_drift 5.0"), "{text}");
        assert!(
            text.contains("mcd_host_os_and_version{os=\"UOS\",version=\"20\"} 1"),
            "{text}"
        );
        assert!(text.contains("mcd_reboots_failed_total 0"), "{text}");
        m.kubelet_state.set(3);
        assert!(m.encode().contains("# HELP mcd_kubelet_state state of kubelet health monitor.\n# TYPE mcd_kubelet_state gauge\nmcd_kubelet_state 3\n"));
    }

    #[tokio::test]
    async fn served_over_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let m = Metrics::new();
        m.set_state("Done", "");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(serve(listener, m));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        assert!(
            body.contains("mcd_state{state=\"Done\",reason=\"\"} 1"),
            "{body}"
        );
        task.abort();
    }
}
