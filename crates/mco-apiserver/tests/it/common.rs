//! Shared helpers of the integration tests: a server in a temp dir and polling.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use mco_apiserver::{Config, Server, ServerHandle};

pub struct TestServer {
    pub handle: ServerHandle,
    pub dir: tempfile::TempDir,
}

pub async fn start() -> TestServer {
    start_with(|c| c).await
}

pub async fn start_with(f: impl FnOnce(Config) -> Config) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = f(Config::new(dir.path(), "127.0.0.1:0".parse().unwrap()));
    let handle = Server::start(cfg).await.expect("server starts");
    TestServer { handle, dir }
}

/// Polls `check` until it returns `Some`, failing after `secs` seconds.
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Status of a failed kube call.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub const MCN_CRD: &str = include_str!("../data/mcn-crd.yaml");
pub const MCN_WORKER_0: &str = include_str!("../data/mcn-worker-0.yaml");
