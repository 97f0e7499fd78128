//! The kubelet health monitor, as upstream's daemon runs it: every [`POLL_INTERVAL`] a `GET` of
//! the kubelet's healthz endpoint (`http://localhost:10248/healthz`; the daemon shares the
//! host's network), and `mcd_kubelet_state` holds the failures in a row, so upstream's
//! `KubeletHealthState` alert (`mcd_kubelet_state > 2`) fires on mco's nodes too.
//!
//! A failure is no answer within [`TIMEOUT`], a refused connection, or (unlike upstream, which
//! counts only those) an answer other than 200: a kubelet whose sync loop is stuck answers 500,
//! and that is the unhealthy kubelet the alert is for. A 200 whose body is not `ok` is healthy
//! and logged, as upstream logs it. Any success resets the count.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prometheus_client::metrics::gauge::Gauge;

/// Upstream's `--kubelet-healthz-endpoint` default.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:10248/healthz";
/// Between two checks (upstream's `kubeletHealthzPollingInterval`).
pub const POLL_INTERVAL: Duration = Duration::from_secs(30);
/// The longest a check waits for the whole answer (upstream's `kubeletHealthzTimeout`).
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// The most of an answer's body read: the kubelet's is `ok`, or a few lines per failing check.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// What one check saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// A 200 with this body.
    Answered(String),
    /// Anything else, in words.
    Failed(String),
}

/// What the monitor does after a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    /// Healthy, but the body is not `ok`: logged as upstream logs it.
    Odd(String),
    /// The failures in a row so far, and the warning.
    Unhealthy(u32, String),
}

/// The failures in a row, the state of `mcd_kubelet_state`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Monitor {
    pub failures: u32,
}

impl Monitor {
    /// Counts one check.
    pub fn observe(&mut self, check: Check) -> Verdict {
        match check {
            Check::Answered(body) => {
                self.failures = 0;
                if body == "ok" {
                    Verdict::Healthy
                } else {
                    Verdict::Odd(format!("Kubelet Healthz Endpoint returned: {body}"))
                }
            }
            Check::Failed(why) => {
                self.failures = self.failures.saturating_add(1);
                Verdict::Unhealthy(
                    self.failures,
                    format!(
                        "kubelet health check has failed {} times: {why}",
                        self.failures
                    ),
                )
            }
        }
    }
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// One check of `endpoint`, bounded by `timeout` and [`MAX_BODY_BYTES`].
pub async fn check(client: &HttpClient, endpoint: &str, timeout: Duration) -> Check {
    let answer = async {
        let req = http::Request::get(endpoint)
            .body(Empty::new())
            .map_err(|e| format!("Get \"{endpoint}\": {e}"))?;
        let resp = client
            .request(req)
            .await
            .map_err(|e| format!("Get \"{endpoint}\": {e}"))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| format!("Get \"{endpoint}\": reading the answer: {e}"))?
            .to_bytes();
        let body = String::from_utf8_lossy(&body).into_owned();
        if status != http::StatusCode::OK {
            return Err(format!(
                "Get \"{endpoint}\": status {}: {}",
                status.as_u16(),
                body.trim()
            ));
        }
        Ok(body)
    };
    match tokio::time::timeout(timeout, answer).await {
        Err(_) => Check::Failed(format!(
            "Get \"{endpoint}\": no answer within {}s",
            timeout.as_secs_f64()
        )),
        Ok(Err(why)) => Check::Failed(why),
        Ok(Ok(body)) => Check::Answered(body),
    }
}

/// Checks `endpoint` every `interval` until dropped, keeping `gauge` at the failures in a row.
pub async fn run(endpoint: String, interval: Duration, timeout: Duration, gauge: Gauge) {
    tracing::info!(%endpoint, "Enabling Kubelet Healthz Monitor");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut monitor = Monitor::default();
    gauge.set(0);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match monitor.observe(check(&client, &endpoint, timeout).await) {
            Verdict::Healthy => tracing::debug!("Kubelet health ok"),
            Verdict::Odd(message) => tracing::warn!("{message}"),
            Verdict::Unhealthy(_, message) => tracing::warn!("{message}"),
        }
        gauge.set(i64::from(monitor.failures));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU16, Ordering};

    #[test]
    fn failures_count_in_a_row_and_any_answer_resets_them() {
        let mut m = Monitor::default();
        assert_eq!(m.observe(Check::Answered("ok".into())), Verdict::Healthy);
        for n in 1..=3 {
            assert_eq!(
                m.observe(Check::Failed("refused".into())),
                Verdict::Unhealthy(
                    n,
                    format!("kubelet health check has failed {n} times: refused")
                )
            );
        }
        assert_eq!(m.failures, 3);
        assert_eq!(
            m.observe(Check::Answered("[+]ping ok".into())),
            Verdict::Odd("Kubelet Healthz Endpoint returned: [+]ping ok".into())
        );
        assert_eq!(m.failures, 0);
        m.failures = u32::MAX;
        m.observe(Check::Failed("x".into()));
        assert_eq!(m.failures, u32::MAX);
    }

    /// A kubelet stand-in answering `status` with `body`, changeable while it runs.
    async fn kubelet(status: Arc<AtomicU16>, body: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let app = axum::Router::new().route(
                "/healthz",
                axum::routing::get(move || {
                    let status = status.load(Ordering::SeqCst);
                    async move {
                        if status == 0 {
                            // Never answers.
                            std::future::pending::<()>().await;
                        }
                        (axum::http::StatusCode::from_u16(status).unwrap(), body)
                    }
                }),
            );
            axum::serve(listener, app).await.unwrap();
        });
        format!("http://{addr}/healthz")
    }

    #[tokio::test]
    async fn checks_see_ok_a_500_silence_and_no_listener() {
        let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
        let status = Arc::new(AtomicU16::new(200));
        let url = kubelet(Arc::clone(&status), "ok").await;
        let short = Duration::from_millis(300);
        assert_eq!(
            check(&client, &url, short).await,
            Check::Answered("ok".into())
        );
        status.store(500, Ordering::SeqCst);
        assert_eq!(
            check(&client, &url, short).await,
            Check::Failed(format!("Get \"{url}\": status 500: ok"))
        );
        status.store(0, Ordering::SeqCst);
        assert_eq!(
            check(&client, &url, short).await,
            Check::Failed(format!("Get \"{url}\": no answer within 0.3s"))
        );
        let gone = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/healthz", l.local_addr().unwrap())
        };
        match check(&client, &gone, short).await {
            Check::Failed(why) => assert!(why.starts_with(&format!("Get \"{gone}\": ")), "{why}"),
            c => panic!("{c:?}"),
        }
    }

    #[tokio::test]
    async fn a_body_is_read_up_to_the_limit() {
        let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
        let at: &'static str = Box::leak("x".repeat(MAX_BODY_BYTES).into_boxed_str());
        let over: &'static str = Box::leak("x".repeat(MAX_BODY_BYTES + 1).into_boxed_str());
        let ok = Arc::new(AtomicU16::new(200));
        let url = kubelet(Arc::clone(&ok), at).await;
        assert_eq!(
            check(&client, &url, TIMEOUT).await,
            Check::Answered(at.to_owned())
        );
        let url = kubelet(ok, over).await;
        match check(&client, &url, TIMEOUT).await {
            Check::Failed(why) => assert!(why.contains("reading the answer"), "{why}"),
            c => panic!("{c:?}"),
        }
    }

    #[tokio::test]
    async fn the_gauge_follows_the_checks() {
        let status = Arc::new(AtomicU16::new(503));
        let url = kubelet(Arc::clone(&status), "down").await;
        let gauge = Gauge::default();
        let task = tokio::spawn(run(
            url,
            Duration::from_millis(20),
            Duration::from_secs(5),
            gauge.clone(),
        ));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let wait_for = |want: fn(i64) -> bool| {
            let gauge = gauge.clone();
            async move {
                while !want(gauge.get()) {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "gauge at {}",
                        gauge.get()
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        wait_for(|g| g >= 3).await;
        status.store(200, Ordering::SeqCst);
        wait_for(|g| g == 0).await;
        task.abort();
    }
}
