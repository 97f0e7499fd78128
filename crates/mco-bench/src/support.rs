//! Shared plumbing: an in-process server in a scratch directory, clients, polling.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use mco_apiserver::{Config, Identity, Server, ServerHandle};

use crate::Error;

/// An in-process server whose data directory disappears with it.
pub(crate) struct LocalServer {
    pub handle: ServerHandle,
    _dir: tempfile::TempDir,
}

impl LocalServer {
    /// Starts a server on an ephemeral loopback port with its database under `work_dir`,
    /// so the benchmark measures the disk the caller chose.
    pub async fn start(work_dir: &Path) -> Result<LocalServer, Error> {
        let dir = scratch_dir(work_dir, "server")?;
        let cfg = Config::new(dir.path(), "127.0.0.1:0".parse().expect("loopback address"));
        let handle = Server::start(cfg).await?;
        Ok(LocalServer { handle, _dir: dir })
    }

    pub async fn admin(&self) -> Result<kube::Client, Error> {
        let mut cfg = self.handle.config_for(Identity::Admin).await?;
        cfg.headers
            .push(mco_api::user_agent::header(mco_api::user_agent::BENCH));
        Ok(kube::Client::try_from(cfg)?)
    }
}

pub(crate) fn scratch_dir(work_dir: &Path, prefix: &str) -> Result<tempfile::TempDir, Error> {
    std::fs::create_dir_all(work_dir).map_err(|e| Error::io(work_dir.display(), e))?;
    tempfile::Builder::new()
        .prefix(&format!("mco-bench-{prefix}-"))
        .tempdir_in(work_dir)
        .map_err(|e| Error::io(work_dir.display(), e))
}

/// A client for the kubeconfig at `path`.
pub(crate) async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, Error> {
    let kc =
        kube::config::Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    cfg.headers
        .push(mco_api::user_agent::header(mco_api::user_agent::BENCH));
    Ok(kube::Client::try_from(cfg)?)
}

/// Polls `check` until it yields a value, failing after `secs`.
pub(crate) async fn poll<T, F, Fut>(what: &str, secs: u64, mut check: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.into(),
                secs,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Parses a JSON literal into a typed object (the literals are the benchmark's own).
pub(crate) fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, Error> {
    serde_json::from_value(v).map_err(|e| Error::Bench(format!("bench object: {e}")))
}
