//! How a new simulated node gets its first config, as a real machine does: Ignition fetches
//! `/config/<pool>` from the machine config server (retrying, with backoff, while the pool
//! has no rendered config or the server is not up), and the simulator plays what it got onto
//! the node's root ([`crate::ignition`]). First boot then applies the encapsulated config it
//! holds, and the node reports with the config named in its `node-annotations.json`.

use std::time::Duration;

use kube::Api;
use mco_api::{ControllerConfig, MachineConfig, MachineConfigPool};
use mco_daemon::Host;
use mco_server::assemble::Appended;
use tokio::sync::watch;

use crate::error::{Result, SimError};
use crate::fetch;
use crate::ignition::{self, Played};

/// The first wait after a failed attempt; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait between attempts: a new fleet's nodes all wait for the first render.
const MAX_RETRY: Duration = Duration::from_secs(2);

/// Where new nodes get their Ignition.
#[derive(Debug, Clone)]
pub enum Join {
    /// The machine config server `mco up` runs.
    Server(fetch::Server),
    /// No server (it could not start): the same Ignition, assembled in this process from the
    /// pool's config as the server would serve it, with this bootstrap kubeconfig.
    Local(Option<Vec<u8>>),
}

/// A node's join.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The rendered config it was provisioned with (`node-annotations.json`).
    pub config: String,
    /// The image it was provisioned with in on-cluster image mode (`node-annotations.json`),
    /// `""` outside it.
    pub image: String,
    /// Where the Ignition came from: the URL, or a note that no server was used; `None` when
    /// the node was provisioned by an earlier start.
    pub source: Option<String>,
    /// What was played onto its root.
    pub played: Played,
}

enum Attempt {
    /// Not yet: the pool has no rendered config, or the server is not answering.
    Retry(String),
    Fail(SimError),
}

impl From<kube::Error> for Attempt {
    fn from(e: kube::Error) -> Self {
        Attempt::Fail(e.into())
    }
}

/// One attempt at the pool's Ignition: its bytes and where they came from.
async fn attempt(
    join: &Join,
    admin: &kube::Client,
    pool: &str,
) -> Result<(Vec<u8>, String), Attempt> {
    match join {
        Join::Server(server) => match server.fetch(pool).await {
            Ok(body) => Ok((body, server.config_url(pool))),
            Err(e) if e.retryable() => Err(Attempt::Retry(e.to_string())),
            Err(e) => Err(Attempt::Fail(SimError::Invalid(e.to_string()))),
        },
        Join::Local(kubeconfig) => {
            let pools: Api<MachineConfigPool> = Api::all(admin.clone());
            let Some(p) = pools.get_opt(pool).await? else {
                return Err(Attempt::Retry(format!("pool {pool} not found")));
            };
            let Some(name) = mco_server::source::config_for(&p).map(str::to_string) else {
                return Err(Attempt::Retry(format!(
                    "pool {pool} has no rendered config yet"
                )));
            };
            let mcs: Api<MachineConfig> = Api::all(admin.clone());
            let mc = mcs.get(&name).await?;
            let ccs: Api<ControllerConfig> = Api::all(admin.clone());
            let cc = ccs
                .get_opt(mco_api::constants::names::CONTROLLER_CONFIG)
                .await?;
            let appended = Appended::from_controller_config(cc.as_ref(), kubeconfig.clone())
                .map_err(|e| Attempt::Fail(SimError::Invalid(e)))?;
            let body =
                mco_server::assemble::assemble(&mc, mco_server::SpecVersion::NEWEST, &appended)
                    .map_err(|e| Attempt::Fail(SimError::Invalid(e.to_string())))?;
            Ok((body, format!("pool {pool} (no machine config server)")))
        }
    }
}

/// The config and image (`""` outside image mode) named in the node's `node-annotations.json`,
/// which the served Ignition wrote (or its `.bak`, once the daemon has started: a node whose
/// Node object was deleted registers again with it).
fn provisioned_config(host: &Host) -> Result<(String, String)> {
    let path = mco_server::assemble::NODE_ANNOTATIONS;
    let bak = format!("{path}.bak");
    let data = match host.fs.read_optional(path)? {
        Some(d) => d,
        None => host.fs.read(&bak)?,
    };
    let v: serde_json::Value = serde_json::from_slice(&data).map_err(|source| SimError::Json {
        what: path.to_string(),
        source,
    })?;
    let image = v[mco_api::constants::annotations::CURRENT_IMAGE]
        .as_str()
        .unwrap_or_default()
        .to_string();
    v[mco_api::constants::annotations::CURRENT_CONFIG]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(|c| (c.to_string(), image))
        .ok_or_else(|| {
            SimError::Invalid(format!(
                "{path}: no {}",
                mco_api::constants::annotations::CURRENT_CONFIG
            ))
        })
}

/// Provisions the node at `root` of `pool` unless Ignition already did; `None` if asked to
/// stop first. A node provisioned before (its supervisor restarted before the Node was
/// created) keeps what it got.
pub async fn provision(
    join: &Join,
    admin: &kube::Client,
    pool: &str,
    root: &std::path::Path,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Joined>> {
    let path = root.to_path_buf();
    let done = blocking(move || {
        let host = Host::sim(&path)?;
        if ignition::provisioned(&host)? {
            return Ok(Some(provisioned_config(&host)?));
        }
        Ok(None)
    })
    .await?;
    if let Some((config, image)) = done {
        return Ok(Some(Joined {
            config,
            image,
            source: None,
            played: Played::default(),
        }));
    }
    let mut delay = FIRST_RETRY;
    let mut waited = false;
    loop {
        match attempt(join, admin, pool).await {
            Ok((body, source)) => {
                let value: serde_json::Value =
                    serde_json::from_slice(&body).map_err(|e| SimError::Json {
                        what: format!("the Ignition from {source}"),
                        source: e,
                    })?;
                let cfg = mco_render::ignition::parse(&value)
                    .map_err(|e| SimError::Invalid(format!("the Ignition from {source}: {e}")))?;
                let path = root.to_path_buf();
                let (played, (config, image)) = blocking(move || {
                    let host = Host::sim(&path)?;
                    let played = ignition::play(&host, &cfg)
                        .map_err(|e| SimError::Invalid(format!("playing Ignition: {e}")))?;
                    let config = provisioned_config(&host)?;
                    ignition::record_result(&host, &crate::objects::now_rfc3339())
                        .map_err(|e| SimError::Invalid(e.to_string()))?;
                    Ok((played, config))
                })
                .await?;
                if !played.skipped.is_empty() {
                    tracing::warn!(skipped = ?played.skipped, "parts of the Ignition a simulated node does not play");
                }
                return Ok(Some(Joined {
                    config,
                    image,
                    source: Some(source),
                    played,
                }));
            }
            Err(Attempt::Retry(why)) => {
                // As Ignition does: say it once, then keep trying quietly.
                if !std::mem::replace(&mut waited, true) {
                    tracing::info!(pool, reason = %why, "waiting for the pool's Ignition");
                } else {
                    tracing::debug!(pool, reason = %why, "waiting for the pool's Ignition");
                }
                if crate::supervisor::sleep_or_stop(stop, delay).await {
                    return Ok(None);
                }
                delay = (delay * 2).min(MAX_RETRY);
            }
            Err(Attempt::Fail(e)) => return Err(e),
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SimError::Invalid(format!("provisioning task: {e}")))?
}
