//! The kube-facing sync loop: watch this node only (field selector), fetch the rendered configs
//! it needs, drive the [`Engine`] and write the node annotations and MachineConfigNode status
//! the way upstream's daemon does.
//!
//! MachineConfigNode status is written under upstream's field manager `machine-config-daemon`,
//! starting from the MCN as last read or written, so the drain controller's conditions are
//! carried over rather than dropped. A write is a JSON patch that tests what it relies on (see
//! [`crate::agent::mcn::status_patch`]); where a condition is added, it is the whole status carrying the
//! `resourceVersion` it was computed from, as upstream's `UpdateStatus`. A refused write reads
//! the MCN and tries again, so a concurrent controller write is never overwritten with stale
//! values.
//! Rendered MachineConfigs are immutable, so they are fetched when needed instead of watched.
//!
//! The engine is blocking and runs on a blocking thread; SIGTERM is only observed between
//! syncs, so an update in progress always reaches a safe point (done, rolled back, or reboot
//! requested) before the daemon exits. So is everything else that touches the host (reading
//! `currentconfig`, the force file, starting the drift monitor), through [`blocking`], one trip
//! per step: a sync reads what it decides on in one call, and the boot check starts the drift
//! monitor in its own. The force file's poll is the [`force`] module's thread, shared by the
//! daemons of a process.
//!
//! Each sync asks [`decide()`] what to do; [`boot`] is the start-up sync, [`update`] holds the
//! steps that change the node, and [`outbox`] the status writes they make. [`certs`] runs
//! beside the syncs and writes the ControllerConfig's CA bundles; [`pinned`] runs beside them
//! and pulls and pins the node's PinnedImageSets.
//!
//! Only a change to the Node's annotations wakes a sync: they carry everything a sync and a
//! drain wait read, and the other changes (the taint a rollout puts on every member, the
//! node's conditions) would wake every daemon for nothing. The watches start with a streaming
//! list ([`stream`]), one request each at every start. At start the daemon takes its Node
//! from the node watch's initial state instead of reading it, and it reads its MachineConfigNode
//! only where no copy it holds can serve (at start, such as a new process after a reboot). A
//! sync with nothing to write sends nothing.

mod boot;
mod certs;
pub mod decide;
mod force;
mod outbox;
pub mod pinned;
mod policy;
mod update;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::task::AbortOnDropHandle;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;
use kube::{Api, Client};
use mco_api::constants::{MAX_REASON_LEN, annotations as ann, mcn_conditions as c, states};
use mco_api::{ControllerConfig, MachineConfig, MachineConfigNode, MachineConfiguration};
use tracing::Instrument;

use crate::agent::events::{EventSink, EventTask};
use crate::agent::mcn::{Status, Write};
use crate::agent::metrics::{Metrics, OsLabels};
use crate::engine::drift::DriftMonitor;
use crate::engine::image_mode;
use crate::engine::{Engine, EngineError, NodeEvent};
use crate::error::HostError;
use crate::host::paths;
use decide::Change;

pub use decide::{Step, decide, semantically_equal};
pub use outbox::{FIELD_MANAGER, phase_write};

/// Tunables of the loop.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// This node.
    pub node: String,
    /// mco's namespace, where the events about this Node are recorded.
    pub namespace: String,
    /// How long to wait for the drain controller (upstream: 1 hour).
    pub drain_timeout: Duration,
    /// How often to re-read the node while waiting for the drain controller, in case the node
    /// watch (which ends the wait as soon as the answer is written) is broken. Every waiting
    /// node reads at this pace, so a fleet's first boot or a wave of drains multiplies it.
    pub poll_interval: Duration,
    /// Longest retry delay after a failed sync (upstream: 1 s doubling to 60 s).
    pub max_backoff: Duration,
}

impl SyncOptions {
    /// Upstream's defaults for `node`, in mco's default namespace.
    pub fn new(node: impl Into<String>) -> SyncOptions {
        SyncOptions {
            node: node.into(),
            namespace: mco_api::constants::names::DEFAULT_NAMESPACE.into(),
            drain_timeout: Duration::from_secs(3600),
            poll_interval: Duration::from_secs(10),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The API server refused or failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The blocking host work's thread died.
    #[error("update task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The drain controller did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// The drift monitor saw the disk leave the current config.
    #[error("{0}")]
    Drift(String),
    /// A Degraded node still does not match; its reason (naming the most recent drift) is kept.
    #[error("still degraded: {0}")]
    StillDegraded(String),
    /// Shutdown was asked for while waiting on the cluster; not the node's fault.
    #[error("shutting down")]
    Shutdown,
    /// Its PinnedImageSets could not be pulled or pinned ([`pinned`]).
    #[error("{0}")]
    Pinned(String),
}

impl From<HostError> for SyncError {
    fn from(e: HostError) -> Self {
        SyncError::Engine(EngineError::Host(e))
    }
}

impl SyncError {
    fn is_unreconcilable(&self) -> bool {
        matches!(self, SyncError::Engine(e) if e.is_unreconcilable())
    }
}

/// What a sync reads from the host, in one blocking call: a sync used to pay a trip to the
/// blocking pool for each read.
struct OnHost {
    /// The on-disk `currentconfig`, with the image of `currentimage` embedded.
    on_disk: Option<MachineConfig>,
    /// Whether the force file is present.
    force: bool,
}

impl OnHost {
    fn read(engine: &Engine) -> Result<OnHost, HostError> {
        Ok(OnHost {
            on_disk: engine.on_disk_config()?,
            force: engine.force_requested()?,
        })
    }
}

/// How [`Daemon::run`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// A reboot was requested; the next start completes the update.
    Rebooting,
    /// Asked to stop, at a safe point.
    Shutdown,
}

/// How long a reboot request waits for the events queued before it (the `Reboot` one last).
const REBOOT_FLUSH: Duration = Duration::from_secs(2);
/// How long a daemon that stops waits for its queued events.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

struct Inner {
    opts: SyncOptions,
    engine: Arc<Engine>,
    metrics: Metrics,
    drift: Mutex<Option<DriftMonitor>>,
    drift_tx: tokio::sync::mpsc::UnboundedSender<String>,
    /// Upstream's Node events, queued for [`Daemon::run`]'s sending task.
    events: EventSink,
    nodes: Api<Node>,
    mcs: Api<MachineConfig>,
    mcns: mco_api::mcn::client::McnApi,
    /// `MachineConfiguration/cluster`, whose status holds the merged node disruption policy.
    machine_configurations: Api<MachineConfiguration>,
    /// The ControllerConfig, whose CA bundles [`certs`] writes.
    controller_configs: Api<ControllerConfig>,
    /// The PinnedImageSets and pools [`pinned`] reads.
    pinned_sets: Api<mco_api::PinnedImageSet>,
    pools: Api<mco_api::MachineConfigPool>,
    /// Set once [`Daemon::run`]'s shutdown fires, so that waits inside a sync give up.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// Whether an update holds SIGTERM off (upstream's `updateActive`): set as it starts, cleared
    /// as it requests its reboot or otherwise ends ([`Inner::update_node`]). The events that tell
    /// so hang on its changes.
    update_active: AtomicBool,
    /// This Node as last seen by [`Daemon::run`]'s watch, so that a drain wait wakes on the
    /// controller's answer instead of polling for it. Closed when the watch ends.
    watched: tokio::sync::watch::Receiver<Option<Arc<Node>>>,
    /// This Node's labels as the same watch last delivered them (`None` before its first
    /// list), changed only when they change: the pinned image worker's cue that the node may
    /// now be another pool's, which the annotation-only wake-up above does not give.
    labels: tokio::sync::watch::Sender<Option<Labels>>,
    /// This Node as our last annotation write returned it: newer than the watch until the
    /// watch delivers that write.
    written: Mutex<Option<Arc<Node>>>,
    /// This node's MCN as our last status write returned it, the base of the next write.
    mcn_written: Mutex<Option<MachineConfigNode>>,
    /// Phases that another phase follows at once, held to ride in that phase's write: an
    /// update's phases cost one MCN write each otherwise, most of them microseconds apart.
    mcn_pending: Mutex<Vec<Write>>,
    /// Annotation changes held, likewise, for the next Node write.
    annotations_pending: Mutex<Vec<(&'static str, Option<String>)>>,
    /// The last config's irreconcilable changes ([`Inner::irreconcilable`]).
    irreconcilable: Mutex<Option<(String, Option<Vec<mco_api::IrreconcilableChangeDiff>>)>>,
}

/// One node's daemon.
pub struct Daemon {
    inner: Arc<Inner>,
    booted: bool,
    drift_rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Taken by [`Daemon::run`] for the task that feeds `Inner::watched`.
    watched_tx: Option<tokio::sync::watch::Sender<Option<Arc<Node>>>>,
    /// Taken by [`Daemon::run`]: the task that sends `Inner::events`.
    event_task: Option<EventTask>,
}

/// A Node's labels.
type Labels = Option<std::collections::BTreeMap<String, String>>;

/// Feeds the node watch into `tx` until the watch ends. Annotation changes notify (they are
/// what triggers a sync); a relist notifies once, at its end, and a deletion only clears the
/// value. A change of the labels notifies `labels`.
async fn forward_node_watch(
    nodes: Api<Node>,
    cfg: watcher::Config,
    tx: tokio::sync::watch::Sender<Option<Arc<Node>>>,
    labels: tokio::sync::watch::Sender<Option<Labels>>,
) {
    let relabelled = |n: &Node| {
        labels.send_if_modified(|l| {
            let moved = l.as_ref() != Some(&n.metadata.labels);
            if moved {
                *l = Some(n.metadata.labels.clone());
            }
            moved
        });
    };
    let mut events = std::pin::pin!(mco_api::watch::watch(nodes, cfg));
    let mut listed: Option<Arc<Node>> = None;
    while let Some(ev) = events.next().await {
        match ev {
            // The daemon acts on its annotations alone. Other changes (the controller's taint,
            // the node's conditions) replace the value without waking a sync: at thousands of
            // nodes, the taint put on every member when a rollout starts woke every daemon to
            // reread its on-disk config for nothing.
            Ok(watcher::Event::Apply(n)) => {
                relabelled(&n);
                tx.send_if_modified(|v| {
                    let wake = wakes_sync(v.as_deref(), &n);
                    *v = Some(Arc::new(n));
                    wake
                });
            }
            Ok(watcher::Event::Init) => listed = None,
            Ok(watcher::Event::InitApply(n)) => listed = Some(Arc::new(n)),
            Ok(watcher::Event::InitDone) => {
                if let Some(n) = &listed {
                    relabelled(n);
                }
                tx.send_modify(|v| *v = listed.take());
            }
            Ok(watcher::Event::Delete(_)) => {
                tx.send_if_modified(|v| {
                    *v = None;
                    false
                });
            }
            Err(e) => tracing::warn!(error = %e, "node watch error"),
        }
    }
}

/// Whether a watched change of this Node is one the daemon acts on: its annotations carry
/// everything a sync and a drain wait read.
fn wakes_sync(old: Option<&Node>, new: &Node) -> bool {
    old.is_none_or(|old| old.metadata.annotations != new.metadata.annotations)
}

/// A resourceVersion as a number, when it is one (etcd's and the embedded server's are); only
/// used to tell whether a watched Node is at least as new as a write's response.
fn rv(node: &Node) -> Option<u64> {
    node.metadata.resource_version.as_deref()?.parse().ok()
}

fn annotation(node: &Node, key: &str) -> String {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_default()
}

/// Upstream's `%.2000s` on the reason annotation.
pub fn truncate_reason(s: &str) -> String {
    s.chars().take(MAX_REASON_LEN).collect()
}

impl Inner {
    fn name(&self) -> &str {
        &self.opts.node
    }

    async fn node(&self) -> Result<Node, SyncError> {
        Ok(self.nodes.get(&self.opts.node).await?)
    }

    /// This Node at start-up: the node watch lists it as the daemon starts, so a read of our
    /// own would only repeat that list. Read after all if the watch has not delivered within
    /// `poll_interval`.
    async fn first_node(&self) -> Result<Arc<Node>, SyncError> {
        let mut watched = self.watched.clone();
        let listed =
            tokio::time::timeout(self.opts.poll_interval, watched.wait_for(Option::is_some))
                .await
                .ok()
                .and_then(|r| r.ok().and_then(|n| n.clone()));
        match listed {
            Some(n) => Ok(n),
            None => Ok(Arc::new(self.node().await?)),
        }
    }
    /// The newest copy of this Node we hold, from the watch or our own last write; `None` when
    /// there is none or their versions are not comparable.
    fn known_node(&self) -> Option<Arc<Node>> {
        let watched = self.watched.borrow().clone();
        let written = self.written.lock().ok().and_then(|w| w.clone());
        match (watched, written) {
            (Some(a), Some(b)) => match (rv(&a), rv(&b)) {
                (Some(x), Some(y)) => Some(if x >= y { a } else { b }),
                _ => None,
            },
            (a, b) => a.or(b),
        }
    }
}

impl Daemon {
    /// A daemon for `opts.node` over `engine`.
    pub fn new(client: Client, engine: Engine, opts: SyncOptions) -> Daemon {
        let metrics = Metrics::new();
        metrics
            .host_os
            .get_or_create(&OsLabels {
                os: engine.os.identity.metrics_label(),
                version: engine.os.identity.display_version().to_string(),
            })
            .set(1);
        let (drift_tx, drift_rx) = tokio::sync::mpsc::unbounded_channel();
        let (watched_tx, watched) = tokio::sync::watch::channel(None);
        let (events, event_task) = EventSink::new(client.clone(), &opts.namespace, &opts.node);
        Daemon {
            inner: Arc::new(Inner {
                nodes: Api::all(client.clone()),
                mcs: Api::all(client.clone()),
                mcns: mco_api::mcn::client::McnApi::new(client.clone()),
                machine_configurations: Api::all(client.clone()),
                controller_configs: Api::all(client.clone()),
                pinned_sets: Api::all(client.clone()),
                pools: Api::all(client.clone()),
                events,
                engine: Arc::new(engine),
                metrics,
                drift: Mutex::new(None),
                drift_tx,
                opts,
                shutdown: tokio::sync::watch::Sender::new(false),
                update_active: AtomicBool::new(false),
                watched,
                labels: tokio::sync::watch::Sender::new(None),
                written: Mutex::new(None),
                mcn_written: Mutex::new(None),
                mcn_pending: Mutex::new(Vec::new()),
                annotations_pending: Mutex::new(Vec::new()),
                irreconcilable: Mutex::new(None),
            }),
            booted: false,
            drift_rx,
            watched_tx: Some(watched_tx),
            event_task: Some(event_task),
        }
    }

    /// The daemon's metrics, for an exporter.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics.clone()
    }

    /// One sync of this node, then whatever it still holds is written. A failed sync leaves
    /// that to [`Inner::mark_failed`], whose writes carry it.
    async fn sync(&mut self) -> Result<Option<Exit>, SyncError> {
        let result = self.sync_once().await;
        if matches!(
            result,
            Ok(_) | Err(SyncError::StillDegraded(_) | SyncError::Shutdown)
        ) && let Err(e) = self.inner.flush().await
        {
            tracing::warn!(error = %e, "held status not written");
        }
        result
    }

    async fn sync_once(&mut self) -> Result<Option<Exit>, SyncError> {
        if !self.booted {
            let r = self.boot().await?;
            if r.is_some() || !self.booted {
                return Ok(r);
            }
        }
        let inner = Arc::clone(&self.inner);
        // Syncs follow the node watch, so the Node it delivered is the one to act on (as
        // upstream's daemon reads its informer's cache); a newer change triggers another sync.
        let node = match inner.known_node() {
            Some(n) => n,
            None => Arc::new(inner.node().await?),
        };
        if annotation(&node, ann::DESIRED_CONFIG).is_empty() {
            return Ok(None);
        }
        let engine = Arc::clone(&inner.engine);
        let host = blocking(move || OnHost::read(&engine)).await?;
        let on_disk = host.on_disk.as_ref().map(|m| decide::OnDisk {
            config: m.metadata.name.as_deref().unwrap_or_default(),
            image: image_mode::image_of(m),
        });
        match decide(&node, on_disk, host.force) {
            Step::Nothing => Ok(None),
            Step::Force { target } => {
                tracing::info!("{} present: re-applying {target}", paths::FORCE_FILE);
                let (cfg, settings) = futures::future::join(
                    inner.config_known(&target, host.on_disk),
                    inner.cluster_settings(),
                )
                .await;
                let cfg = cfg?;
                inner
                    .update_node(cfg.clone(), cfg, true, settings, &target)
                    .await
            }
            Step::Complete { target, degraded } => {
                // A Degraded node (e.g. after drift) is only cleared once the disk matches.
                let engine = Arc::clone(&inner.engine);
                let cfg = inner.config_known(&target, host.on_disk).await?;
                let checked = cfg.clone();
                match blocking(move || engine.validate(&checked)).await {
                    Err(SyncError::Engine(e)) if degraded => {
                        return Err(SyncError::StillDegraded(e.to_string()));
                    }
                    other => other?,
                }
                inner.complete(&target, Some(cfg)).await?;
                Ok(None)
            }
            Step::InSync => {
                let checks = annotation(&node, mco_api::rollouts::annotations::NODE_CHECKS);
                let current = annotation(&node, ann::CURRENT_CONFIG);
                inner
                    .mcn(&Write::parent(
                        c::UPDATED,
                        Status::True,
                        update::updated_message(inner.name(), &current, &checks),
                    ))
                    .await?;
                Ok(None)
            }
            Step::Change {
                from,
                to,
                force,
                working,
            } => {
                // Three reads between the new target and the drain request, so they go
                // together; the settings are unused only when the config is adopted. Both
                // configs come with their images embedded: a new image alone is an update.
                let (old, new, settings) = futures::future::join3(
                    inner.config_known(&from, host.on_disk),
                    inner.config_known(&to, None),
                    inner.cluster_settings(),
                )
                .await;
                let (old, new) = (old?, new?);
                if decide::change(&old, &new, force) == Change::Adopt {
                    inner.adopt(&old, new).await?;
                    return Ok(None);
                }
                if from.image != to.image {
                    // The engine logs config names alone.
                    tracing::info!("On-cluster image mode: updating from {from} to {to}");
                }
                // Both ride with the update's first writes: the Prepared phase and the drain
                // request.
                inner.mcn_later(Write::parent(
                    c::UPDATED,
                    Status::False,
                    format!("Node {} needs an update", inner.name()),
                ));
                if working {
                    inner.annotate_later(ann::STATE, Some(states::WORKING));
                }
                // Preflight drift check, skipped when the force file asks for a re-apply.
                if !force {
                    let engine = Arc::clone(&inner.engine);
                    let pre = old.clone();
                    blocking(move || engine.validate(&pre)).await?;
                }
                inner.update_node(old, new, false, settings, &to).await
            }
        }
    }

    /// Runs until a reboot is requested or `shutdown` resolves. A sync in progress is not cut
    /// short, except that a wait on the drain controller gives up. The events queued by then
    /// are sent before it returns, for at most [`EXIT_FLUSH`].
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<Exit, SyncError> {
        let inner = Arc::clone(&self.inner);
        let _event_task = self
            .event_task
            .take()
            .map(|t| AbortOnDropHandle::new(tokio::spawn(t.run().in_current_span())));
        let exit = self.run_syncs(shutdown).await;
        inner.events.flush(EXIT_FLUSH).await;
        exit
    }

    async fn run_syncs(&mut self, shutdown: impl Future<Output = ()>) -> Result<Exit, SyncError> {
        let inner = Arc::clone(&self.inner);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", inner.name()));
        // The watch runs in its own task so that it is also consumed while a sync (and so a
        // drain wait) is in progress; the loop below triggers syncs from what it publishes.
        let Some(watched_tx) = self.watched_tx.take() else {
            return Ok(Exit::Shutdown);
        };
        let _watch_task = AbortOnDropHandle::new(tokio::spawn(
            forward_node_watch(inner.nodes.clone(), cfg, watched_tx, inner.labels.clone())
                .in_current_span(),
        ));
        let _cert_task = AbortOnDropHandle::new(tokio::spawn(
            certs::run(Arc::clone(&inner)).in_current_span(),
        ));
        let _pinned_task = AbortOnDropHandle::new(tokio::spawn(
            pinned::run(Arc::clone(&inner)).in_current_span(),
        ));
        let mut node_changes = inner.watched.clone();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut backoff = Duration::from_secs(1);
        let mut retry_at: Option<tokio::time::Instant> = Some(tokio::time::Instant::now());
        // Nothing watches /run, so a touched force file is noticed by a cheap poll rather than
        // after a degraded node's backoff, which may be a minute.
        let force_poll = force::subscribe(Arc::clone(&inner.engine));
        loop {
            let due = due(retry_at);
            tokio::select! {
                _ = &mut shutdown => {
                    tracing::info!("shutting down at a safe point");
                    return Ok(Exit::Shutdown);
                }
                Some(reason) = self.drift_rx.recv() => {
                    inner.metrics.config_drift.set(
                        k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0,
                    );
                    inner.event(NodeEvent::warning("ConfigDriftDetected", reason.clone()));
                    inner.mark_failed(&SyncError::Drift(reason)).await;
                    retry_at = Some(tokio::time::Instant::now() + backoff);
                    backoff = (backoff * 2).min(inner.opts.max_backoff);
                }
                _ = force_poll.present() => {
                    let soon = tokio::time::Instant::now() + force::PERIOD;
                    if retry_at.is_none_or(|t| t > soon) {
                        retry_at = Some(tokio::time::Instant::now());
                        backoff = Duration::from_secs(1);
                    }
                }
                changed = node_changes.changed() => match changed {
                    Ok(()) => {
                        // A failed sync waits out its backoff, but a change of the Node (a new
                        // target, an annotation removed by hand) is tried again within a second:
                        // at most once a second, since the daemon's own identical writes bring
                        // no change.
                        let soon = tokio::time::Instant::now()
                            + match retry_at {
                                None => Duration::ZERO,
                                Some(_) => Duration::from_secs(1),
                            };
                        if retry_at.is_none_or(|t| t > soon) {
                            retry_at = Some(soon);
                        }
                    }
                    // The watch ended.
                    Err(_) => return Ok(Exit::Shutdown),
                },
                _ = due => {
                    retry_at = None;
                    let mut stopping = false;
                    let result = {
                        let sync = self.sync();
                        tokio::pin!(sync);
                        tokio::select! {
                            r = &mut sync => r,
                            _ = &mut shutdown => {
                                stopping = true;
                                if inner.update_active() {
                                    // Upstream's words; the update goes on to a safe point.
                                    tracing::info!("Got SIGTERM, but actively updating");
                                    inner.event(NodeEvent::warning(
                                        "GotSigtermDuringUpdate",
                                        "Got SIGTERM but actively updating",
                                    ));
                                }
                                inner.shutdown.send_replace(true);
                                sync.await
                            }
                        }
                    };
                    match result {
                        Ok(Some(exit)) => return Ok(exit),
                        _ if stopping => {
                            tracing::info!("shutting down at a safe point");
                            return Ok(Exit::Shutdown);
                        }
                        Err(SyncError::Shutdown) => return Ok(Exit::Shutdown),
                        // A status write found no MachineConfigNode yet, or the last one
                        // failed: a later sync carries what is held.
                        Ok(None) if inner.mcn_held() => {
                            retry_at = Some(tokio::time::Instant::now() + backoff);
                            backoff = (backoff * 2).min(inner.opts.max_backoff);
                        }
                        Ok(None) => backoff = Duration::from_secs(1),
                        Err(SyncError::StillDegraded(e)) => {
                            tracing::info!("node still degraded: {e}");
                            retry_at = Some(tokio::time::Instant::now() + backoff);
                            backoff = (backoff * 2).min(inner.opts.max_backoff);
                        }
                        Err(e) => {
                            inner.mark_failed(&e).await;
                            retry_at = Some(tokio::time::Instant::now() + backoff);
                            backoff = (backoff * 2).min(inner.opts.max_backoff);
                        }
                    }
                }
            }
        }
    }
}

/// Resolves at `at`, or never without one: the retry timer of the loops here.
async fn due(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Blocking host work on tokio's blocking pool, inside the caller's tracing span: a process
/// hosting many daemons (the embedded cluster) tells their logs apart by the span's node. The
/// work's own error and a task that died both come back as a [`SyncError`].
async fn blocking<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, SyncError>
where
    T: Send + 'static,
    E: Into<SyncError> + Send + 'static,
{
    let span = tracing::Span::current();
    match tokio::task::spawn_blocking(move || span.in_scope(f)).await {
        Ok(r) => r.map_err(Into::into),
        Err(e) => Err(SyncError::Task(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_annotation_changes_wake_a_sync() {
        let done = node(json!({"metadata": {"name": "w", "resourceVersion": "1",
            "annotations": {ann::DESIRED_CONFIG: "a", ann::STATE: "Done"}}}));
        let tainted = node(json!({"metadata": {"name": "w", "resourceVersion": "2",
            "annotations": {ann::DESIRED_CONFIG: "a", ann::STATE: "Done"}},
            "spec": {"taints": [{"key": "UpdateInProgress", "effect": "PreferNoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
        let retargeted = node(json!({"metadata": {"name": "w", "resourceVersion": "3",
            "annotations": {ann::DESIRED_CONFIG: "b", ann::STATE: "Done"}}}));
        assert!(wakes_sync(None, &done), "the first sight of the node");
        assert!(!wakes_sync(Some(&done), &tainted));
        assert!(wakes_sync(Some(&tainted), &retargeted));
    }
}
