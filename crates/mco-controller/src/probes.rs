//! The rollout policies' HTTP probes: `GET url` answers `expectStatus` within `timeout`.
//!
//! One client for every probe, on kube's own stack (hyper, rustls with the system's roots).
//! A pool is planned many times a second in a rollout, so each URL's answer is kept for
//! [`FRESH`] and probes are not a load on the service they watch.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mco_rollout::policy::Probe;

/// How long a probe's answer is reused.
pub const FRESH: Duration = Duration::from_secs(5);

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

fn client() -> Option<&'static HttpsClient> {
    static CLIENT: OnceLock<Option<HttpsClient>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_native_roots()
                .ok()?
                .https_or_http()
                .enable_http1()
                .build();
            Some(Client::builder(TokioExecutor::new()).build(https))
        })
        .as_ref()
}

/// Each probe's last answer and when it came.
type Answers = HashMap<String, (Instant, Result<(), String>)>;

static ANSWERS: Mutex<Option<Answers>> = Mutex::new(None);

/// Probe once: `Err` names what was wrong.
async fn probe_now(p: &Probe) -> Result<(), String> {
    let client = client().ok_or("no TLS roots on this system")?;
    let req = http::Request::get(&p.url)
        .body(Empty::new())
        .map_err(|e| format!("GET {}: {e}", p.url))?;
    let timeout = Duration::try_from(p.timeout).unwrap_or(Duration::from_secs(10));
    match tokio::time::timeout(timeout, client.request(req)).await {
        Err(_) => Err(format!("GET {}: no answer within {timeout:?}", p.url)),
        Ok(Err(e)) => Err(format!("GET {}: {e}", p.url)),
        Ok(Ok(resp)) if resp.status().as_u16() == p.expect_status => Ok(()),
        Ok(Ok(resp)) => Err(format!(
            "GET {}: status {}, want {}",
            p.url,
            resp.status().as_u16(),
            p.expect_status
        )),
    }
}

/// The probe's answer, at most [`FRESH`] old.
pub async fn probe(p: &Probe) -> Result<(), String> {
    let key = format!("{} {} {:?}", p.url, p.expect_status, p.timeout);
    if let Some((at, answer)) = ANSWERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(&key)
        && at.elapsed() < FRESH
    {
        return answer.clone();
    }
    let answer = probe_now(p).await;
    let mut answers = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
    let answers = answers.get_or_insert_with(HashMap::new);
    // Probes of policies since changed are dropped with the rest now and then.
    if answers.len() > 256 {
        answers.clear();
    }
    answers.insert(key, (Instant::now(), answer.clone()));
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn serve(status: u16) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let app = axum::Router::new().route(
                "/healthz",
                axum::routing::get(move || async move {
                    axum::http::StatusCode::from_u16(status).unwrap()
                }),
            );
            axum::serve(listener, app).await.unwrap();
        });
        format!("http://{addr}/healthz")
    }

    fn probe_of(url: &str, expect: u16) -> Probe {
        Probe {
            url: url.into(),
            expect_status: expect,
            timeout: jiff::SignedDuration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn the_expected_status_passes_and_another_names_both() {
        let ok = serve(200).await;
        assert_eq!(probe(&probe_of(&ok, 200)).await, Ok(()));
        let down = serve(503).await;
        assert_eq!(
            probe(&probe_of(&down, 200)).await,
            Err(format!("GET {down}: status 503, want 200"))
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_a_failure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let err = probe(&probe_of(&url, 200)).await.unwrap_err();
        assert!(err.starts_with(&format!("GET {url}: ")), "{err}");
    }
}
