//! The kube-facing sync loop: watch this node only (field selector), fetch the rendered configs
//! it needs, drive the [`Engine`] and write the node annotations and MachineConfigNode status
//! the way upstream's daemon does.
//!
//! MachineConfigNode status is written under upstream's field manager `machine-config-daemon`,
//! starting from the MCN as last read or written, so the drain controller's conditions are
//! carried over rather than dropped. A write is a JSON patch that tests what it relies on (see
//! [`mcn::status_patch`]); where a condition is added, it is the whole status carrying the
//! `resourceVersion` it was computed from, as upstream's `UpdateStatus`. A refused write reads
//! the MCN and tries again, so a concurrent controller write is never overwritten with stale
//! values.
//! Rendered MachineConfigs are immutable, so they are fetched when needed instead of watched.
//!
//! The engine is blocking and runs on a blocking thread; SIGTERM is only observed between
//! syncs, so an update in progress always reaches a safe point (done, rolled back, or reboot
//! requested) before the daemon exits.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use mco_api::constants::{MAX_REASON_LEN, annotations as ann, drain, mcn_conditions as c, states};
use mco_api::{MachineConfig, MachineConfigNode};
use mco_render::actions::PostConfigAction;
use mco_render::diff::ConfigDiff;
use serde_json::json;
use tokio::runtime::Handle;
use tracing::Instrument;

use crate::agent::mcn::{self, NodeFacts, Status, Write};
use crate::agent::metrics::{Metrics, OsLabels};
use crate::engine::apply::ApplyError;
use crate::engine::drift::{self, DriftMonitor};
use crate::engine::plan::ParsedConfig;
use crate::engine::{
    BootCheck, Engine, EngineError, Phase, Reporter, UpdateOptions, UpdateOutcome,
};

/// The field manager of every daemon write.
pub const FIELD_MANAGER: &str = "machine-config-daemon";

/// Tunables of the loop.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// This node.
    pub node: String,
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
    /// Upstream's defaults for `node`.
    pub fn new(node: impl Into<String>) -> SyncOptions {
        SyncOptions {
            node: node.into(),
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
    /// The engine's thread died.
    #[error("update task failed: {0}")]
    Join(String),
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
}

impl SyncError {
    fn is_unreconcilable(&self) -> bool {
        matches!(self, SyncError::Engine(e) if e.is_unreconcilable())
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

struct Inner {
    opts: SyncOptions,
    engine: Arc<Engine>,
    metrics: Metrics,
    drift: Mutex<Option<DriftMonitor>>,
    drift_tx: tokio::sync::mpsc::UnboundedSender<String>,
    events: Api<Event>,
    nodes: Api<Node>,
    mcs: Api<MachineConfig>,
    mcns: Api<MachineConfigNode>,
    /// Set once [`Daemon::run`]'s shutdown fires, so that waits inside a sync give up.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// This Node as last seen by [`Daemon::run`]'s watch, so that a drain wait wakes on the
    /// controller's answer instead of polling for it. Closed when the watch ends.
    watched: tokio::sync::watch::Receiver<Option<Arc<Node>>>,
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
}

/// One node's daemon.
pub struct Daemon {
    inner: Arc<Inner>,
    booted: bool,
    drift_rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Taken by [`Daemon::run`] for the task that feeds `Inner::watched`.
    watched_tx: Option<tokio::sync::watch::Sender<Option<Arc<Node>>>>,
}

/// Aborts the node-watch task when [`Daemon::run`] returns, however it returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Feeds the node watch into `tx` until the watch ends. Annotation changes notify (they are
/// what triggers a sync); a relist notifies once, at its end, and a deletion only clears the
/// value.
async fn forward_node_watch(
    nodes: Api<Node>,
    cfg: watcher::Config,
    tx: tokio::sync::watch::Sender<Option<Arc<Node>>>,
) {
    let mut events = std::pin::pin!(watcher::watcher(nodes, cfg));
    let mut listed: Option<Arc<Node>> = None;
    while let Some(ev) = events.next().await {
        match ev {
            // The daemon acts on its annotations alone. Other changes (the controller's taint,
            // the node's conditions) replace the value without waking a sync: at thousands of
            // nodes, the taint put on every member when a rollout starts woke every daemon to
            // reread its on-disk config for nothing.
            Ok(watcher::Event::Apply(n)) => {
                tx.send_if_modified(|v| {
                    let wake = wakes_sync(v.as_deref(), &n);
                    *v = Some(Arc::new(n));
                    wake
                });
            }
            Ok(watcher::Event::Init) => listed = None,
            Ok(watcher::Event::InitApply(n)) => listed = Some(Arc::new(n)),
            Ok(watcher::Event::InitDone) => tx.send_modify(|v| *v = listed.take()),
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

/// Whether a node on `old` already is on `new`: their mco diff is empty (files, units, SSH keys,
/// password, OS image, kernel arguments and type, extensions, FIPS). The Ignition version and the
/// metadata (name, annotations, owner) do not count, so a config another controller rendered
/// under its own name is recognised. A config that does not parse is never equal.
pub fn semantically_equal(old: &MachineConfig, new: &MachineConfig) -> bool {
    match (ParsedConfig::new(old), ParsedConfig::new(new)) {
        (Ok(o), Ok(n)) => ConfigDiff::between(o.view(), n.view()).is_empty(),
        _ => false,
    }
}

fn human(d: Duration) -> String {
    match d.as_secs() {
        3600 => "1 hour".into(),
        s if s % 60 == 0 && s > 0 => format!("{} minutes", s / 60),
        _ => format!("{:?}", d),
    }
}

/// The MachineConfigNode write for an engine phase.
pub fn phase_write(phase: &Phase) -> Option<Write> {
    Some(match phase {
        Phase::PrepareFailed { message } => {
            Write::parent(c::UPDATE_PREPARED, Status::Unknown, message.clone())
        }
        Phase::Prepared { message, .. } => Write::parent(
            c::UPDATE_PREPARED,
            Status::True,
            message.clone(),
        )
        .child(c::UPDATE_COMPATIBLE, Status::True, message.clone()),
        Phase::DrainNotRequired => {
            let m = "Node Drain Not required for this update.";
            Write::parent(c::UPDATE_EXECUTED, Status::Unknown, m).child(
                c::DRAINED,
                Status::False,
                m,
            )
        }
        Phase::Applying { message, .. } => Write::parent(
            c::UPDATE_EXECUTED,
            Status::Unknown,
            "Updating the Files and OS on disk as a part of the in progress phase",
        )
        .child(c::APPLIED_FILES_AND_OS, Status::Unknown, message.clone()),
        Phase::Applied { message, .. } => Write::parent(
            c::UPDATE_EXECUTED,
            Status::True,
            "Updated the Files and OS on disk as a part of the in progress phase",
        )
        .child(c::APPLIED_FILES_AND_OS, Status::True, message.clone()),
        Phase::Rebooting { .. } => {
            let m = "Upgrade requires a reboot.";
            Write::parent(c::UPDATE_POST_ACTION_COMPLETE, Status::Unknown, m).child(
                c::REBOOTED_NODE,
                Status::Unknown,
                m,
            )
        }
        Phase::PostActionComplete { actions } => post_action_write(actions),
    })
}

/// Empties a held list, keeping its allocation out of the way.
fn take<T>(m: &Mutex<Vec<T>>) -> Vec<T> {
    m.lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default()
}

/// Puts back what a failed write took, ahead of anything held since.
fn restore<T>(m: &Mutex<Vec<T>>, mut held: Vec<T>) {
    if held.is_empty() {
        return;
    }
    if let Ok(mut v) = m.lock() {
        held.append(&mut v);
        *v = held;
    }
}

fn post_action_write(actions: &[PostConfigAction]) -> Write {
    let crio = actions.iter().any(|a| {
        matches!(a, PostConfigAction::Special)
            || matches!(a, PostConfigAction::Reload(u) if u == "crio.service")
    });
    if crio {
        let m = "Node has reloaded CRIO";
        return Write::parent(c::UPDATE_POST_ACTION_COMPLETE, Status::True, m).child(
            c::RELOADED_CRIO,
            Status::True,
            m,
        );
    }
    let service = actions.iter().find_map(|a| match a {
        PostConfigAction::Reload(u) | PostConfigAction::Restart(u) => Some(u.clone()),
        PostConfigAction::DaemonReload => Some("daemon-reload".into()),
        _ => None,
    });
    match service {
        Some(s) => Write::parent(
            c::UPDATE_POST_ACTION_COMPLETE,
            Status::True,
            format!("Node has reloaded service {s}"),
        ),
        None => Write::parent(
            c::UPDATE_POST_ACTION_COMPLETE,
            Status::True,
            "Changes do not require a reboot",
        )
        .reason("None"),
    }
}

impl Inner {
    fn name(&self) -> &str {
        &self.opts.node
    }

    /// Emits a core/v1 Event on this Node; best effort, as upstream's recorder is.
    async fn event(&self, type_: &str, reason: &str, message: &str) {
        let now = k8s_openapi::jiff::Timestamp::now();
        let ev: Result<Event, _> = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{}.", self.opts.node)},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.opts.node},
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": "machineconfigdaemon", "host": self.opts.node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }));
        if let Ok(ev) = ev
            && let Err(e) = self.events.create(&PostParams::default(), &ev).await
        {
            tracing::debug!(error = %e, reason, "event not recorded");
        }
    }

    fn stop_drift(&self) {
        if let Ok(mut d) = self.drift.lock()
            && d.take().is_some()
        {
            tracing::info!("Config Drift Monitor stopped");
        }
    }

    /// Whether a live drift monitor already watches against `config`.
    fn drift_watches(&self, config: &str) -> bool {
        self.drift
            .lock()
            .is_ok_and(|d| d.as_ref().is_some_and(|m| m.watches(config)))
    }

    /// (Re)starts the drift monitor against `mc`. A live monitor for the same config is kept:
    /// a boot into Done reaches here twice, and each start parses the config and re-registers
    /// every managed path.
    fn start_drift(&self, mc: &MachineConfig) {
        if self.drift_watches(mc.metadata.name.as_deref().unwrap_or_default()) {
            return;
        }
        self.stop_drift();
        let Ok(cfg) = ParsedConfig::new(mc) else {
            return;
        };
        let tx = self.drift_tx.clone();
        match drift::start(Arc::clone(&self.engine), cfg, move |e| {
            let _ = tx.send(e.to_string());
        }) {
            Ok(m) => {
                if let Ok(mut d) = self.drift.lock() {
                    *d = Some(m);
                }
            }
            Err(e) => tracing::warn!(error = %e, "config drift monitor not started"),
        }
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

    /// Merge-patches annotations, after any held ones, and returns the Node as written.
    async fn annotate(&self, pairs: &[(&str, Option<&str>)]) -> Result<Node, SyncError> {
        let held = take(&self.annotations_pending);
        let mut map = serde_json::Map::new();
        let held_pairs = held.iter().map(|(k, v)| (*k, v.as_deref()));
        for (k, v) in held_pairs.chain(pairs.iter().copied()) {
            map.insert(k.into(), v.map(|v| json!(v)).unwrap_or(json!(null)));
        }
        let patch = json!({"metadata": {"annotations": map}});
        let node = match self
            .nodes
            .patch(
                &self.opts.node,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(n) => n,
            Err(e) => {
                restore(&self.annotations_pending, held);
                return Err(e.into());
            }
        };
        if let Ok(mut w) = self.written.lock() {
            *w = Some(Arc::new(node.clone()));
        }
        Ok(node)
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

    /// Writes one MCN phase. A missing MCN (created by the controller) is logged and skipped.
    ///
    /// An update writes several phases in a row: each write starts from the MCN our previous
    /// write returned, instead of reading it again. The Node facts come from the newest Node
    /// we hold (the watch keeps it current); it is read only when we hold none.
    /// From a held copy the write is a JSON patch that tests what it relies on
    /// ([`mcn::status_patch`]): the controller's writes in between (its spec, the drain
    /// conditions) leave it valid, and a failed test sends it to read. A read copy, or one a
    /// patch cannot express, is written whole, conditional on its resourceVersion. An uncordon
    /// answer sets on the copy the conditions the drain controller wrote before it (see
    /// [`Inner::answered`]).
    async fn mcn(&self, w: &Write) -> Result<(), SyncError> {
        self.mcn_all(std::slice::from_ref(w)).await
    }

    /// Holds `w` for the next MCN write, which the caller knows follows at once. Whatever path
    /// the sync takes, it ends with [`Inner::flush`], so a held phase is never lost.
    fn mcn_later(&self, w: Write) {
        if let Ok(mut p) = self.mcn_pending.lock() {
            p.push(w);
        }
    }

    /// Holds an annotation change for the next Node write (see [`Inner::mcn_later`]).
    fn annotate_later(&self, key: &'static str, value: Option<&str>) {
        if let Ok(mut p) = self.annotations_pending.lock() {
            p.push((key, value.map(str::to_string)));
        }
    }

    /// Writes the held annotation changes, if any.
    async fn flush_annotations(&self) -> Result<(), SyncError> {
        if !self.annotations_pending.lock().is_ok_and(|p| p.is_empty()) {
            self.annotate(&[]).await?;
        }
        Ok(())
    }

    /// Writes the held phases, if any.
    async fn flush_mcn(&self) -> Result<(), SyncError> {
        if !self.mcn_pending.lock().is_ok_and(|p| p.is_empty()) {
            self.mcn_all(&[]).await?;
        }
        Ok(())
    }

    /// Writes whatever is still held.
    async fn flush(&self) -> Result<(), SyncError> {
        self.flush_annotations().await?;
        self.flush_mcn().await
    }

    /// Writes the held phases and then `ws`, in order, as one MCN status write.
    async fn mcn_all(&self, ws: &[Write]) -> Result<(), SyncError> {
        let held = take(&self.mcn_pending);
        let res = self.write_mcn(&held, ws).await;
        if res.is_err() {
            restore(&self.mcn_pending, held);
        }
        res
    }

    async fn write_mcn(&self, held: &[Write], ws: &[Write]) -> Result<(), SyncError> {
        let mut remembered = self.mcn_written.lock().ok().and_then(|mut m| m.take());
        // A patch tests all it relies on, so it suits a copy just read as well as a remembered
        // one, at a fraction of a whole-status write's cost to the server. Should one be
        // refused on a copy just read, the whole status is written instead.
        let mut patch_fresh = true;
        for _ in 0..5 {
            let (obj, from_memory) = match remembered.take() {
                Some(obj) => (obj, true),
                None => match self.mcns.get_opt(&self.opts.node).await? {
                    Some(obj) => (obj, false),
                    None => {
                        tracing::warn!(node = %self.opts.node, "no MachineConfigNode yet; status not written");
                        return Ok(());
                    }
                },
            };
            let node = match self.known_node() {
                Some(n) => n,
                None => Arc::new(self.node().await?),
            };
            let facts = NodeFacts {
                current: annotation(&node, ann::CURRENT_CONFIG),
                desired: annotation(&node, ann::DESIRED_CONFIG),
                generation: obj.metadata.generation,
            };
            // The controller moves the MCN's spec (and generation) when it moves the node's
            // desiredConfig: a remembered copy from before that is behind.
            let spec_moved = from_memory
                && !facts.desired.is_empty()
                && obj.spec.config_version.desired != facts.desired;
            let base = obj.status.clone().unwrap_or_default();
            let mut status = base.clone();
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let mut changed = false;
            let mut reset = false;
            for w in held.iter().chain(ws) {
                changed |= mcn::apply(&mut status, w, &facts, &now);
                reset |= w.parent == c::UPDATED;
            }
            if !changed {
                if spec_moved {
                    // Only a read can tell whether its observedGeneration moved.
                    continue;
                }
                // Nothing to write. The copy is kept for the next write: a read one is the
                // freshest there is, and a remembered one can only be behind the controller,
                // which patches leave valid.
                if let Ok(mut m) = self.mcn_written.lock() {
                    *m = Some(obj);
                }
                return Ok(());
            }
            if (from_memory || patch_fresh)
                && let Some(ops) = mcn::status_patch(&base, &status, reset)
                && let Ok(patch) = serde_json::from_value::<json_patch::Patch>(ops.into())
            {
                let pp = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                match self
                    .mcns
                    .patch_status(&self.opts.node, &pp, &Patch::<()>::Json(patch))
                    .await
                {
                    Ok(written) => {
                        if let Ok(mut m) = self.mcn_written.lock() {
                            *m = Some(written);
                        }
                        return Ok(());
                    }
                    // A failed test: the copy was behind on something the write relies on.
                    Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => {
                        patch_fresh &= from_memory;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if spec_moved {
                // A whole-status write on it would only meet a 409.
                continue;
            }
            // The whole status, conditional on the base's resourceVersion, as upstream's
            // `UpdateStatus`: a server-side apply of the same content cost the server several
            // times as much, and the precondition already settles who wins.
            let mut body = obj.clone();
            body.metadata.managed_fields = None;
            body.status = Some(status);
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match self.mcns.replace_status(&self.opts.node, &pp, &body).await {
                Ok(written) => {
                    if let Ok(mut m) = self.mcn_written.lock() {
                        *m = Some(written);
                    }
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SyncError::Timeout(format!(
            "MachineConfigNode {} kept changing; status not written",
            self.opts.node
        )))
    }

    /// The drain controller writes its uncordon conditions before its answer, and the
    /// `Updated` reset that follows tests every condition it changes or leaves False: the copy
    /// our last status write returned takes those conditions as the drain controller writes
    /// them, so that the reset is not refused and read again. Should they differ on the server
    /// (the drain controller failed to write them), the test fails and the daemon reads. A
    /// drain answer changes nothing in the copy: the phases after it replace only the daemon's
    /// own conditions.
    fn answered(&self, value: &str) {
        if value.starts_with(drain::UNCORDON_PREFIX)
            && let Ok(mut m) = self.mcn_written.lock()
            && let Some(status) = m.as_mut().and_then(|o| o.status.as_mut())
        {
            mcn::uncordoned(status);
        }
    }

    /// Sets `desiredDrain` and waits for the drain controller's `lastAppliedDrain`.
    ///
    /// The node watch wakes the wait as soon as the answer is written. A watched Node counts
    /// only when it is at least as new as our own write (by resourceVersion), so an old event
    /// from a lagging watch cannot answer a repeated request; otherwise it is confirmed with a
    /// GET. A GET every `poll_interval` remains, so a broken watch only slows the wait down.
    async fn request_drain(&self, value: &str, what: &str) -> Result<(), SyncError> {
        // The watched value is checked before every wait, so an answer that arrives between
        // the write and the wait is not missed.
        let mut watched = self.watched.clone();
        let mut watch_open = true;
        // Writing the request returns the Node as it is now: no read first. A request already
        // made leaves the Node unchanged. The phases held for it go to the MCN alongside: the
        // drain controller writes only its own conditions there, so neither write can undo the
        // other, and the answer is awaited only once both are in.
        let (written, held) = futures::future::join(
            self.annotate(&[(ann::DESIRED_DRAIN, Some(value))]),
            self.flush_mcn(),
        )
        .await;
        let written = written?;
        held?;
        if annotation(&written, ann::LAST_APPLIED_DRAIN) == value {
            tracing::info!("{what} is already completed on this node");
            return Ok(());
        }
        let written_rv = rv(&written);
        let deadline = Instant::now() + self.opts.drain_timeout;
        let mut next_get = Instant::now() + self.opts.poll_interval;
        let mut shutdown = self.shutdown.subscribe();
        loop {
            if *shutdown.borrow_and_update() {
                return Err(SyncError::Shutdown);
            }
            let seen = watched.borrow_and_update().clone();
            let answered = seen
                .as_deref()
                .filter(|n| annotation(n, ann::LAST_APPLIED_DRAIN) == value);
            if answered.is_some_and(|n| matches!((rv(n), written_rv), (Some(a), Some(b)) if a >= b))
            {
                self.answered(value);
                return Ok(());
            }
            if answered.is_some() || Instant::now() >= next_get {
                if annotation(&self.node().await?, ann::LAST_APPLIED_DRAIN) == value {
                    self.answered(value);
                    return Ok(());
                }
                next_get = Instant::now() + self.opts.poll_interval;
            }
            if Instant::now() >= deadline {
                return Err(SyncError::Timeout(format!(
                    "failed to {what} node: {} after {}. Please see machine-config-controller logs for more information",
                    self.opts.node,
                    human(self.opts.drain_timeout)
                )));
            }
            let wake = tokio::time::Instant::from_std(next_get.min(deadline));
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = shutdown.changed() => {}
                r = watched.changed(), if watch_open => watch_open = r.is_ok(),
            }
        }
    }

    async fn report(&self, phase: &Phase) -> Result<(), SyncError> {
        let Some(w) = phase_write(phase) else {
            return Ok(());
        };
        match phase {
            // The drain request, or the write saying none is needed, follows at once and
            // carries it.
            Phase::Prepared { .. } => self.mcn_later(w),
            // Files alone are written in milliseconds: the Applied write follows and carries
            // it. An OS change takes minutes on a host, and the MCN says so while it lasts.
            Phase::Applying { os: false, .. } => self.mcn_later(w),
            // The Rebooting phase follows at once and carries it.
            Phase::Applied { reboot: true, .. } => self.mcn_later(w),
            Phase::Rebooting { .. } => {
                // The update has succeeded once the reboot is requested, which is next: the
                // same write says so, rather than a write racing the reboot. A failed request
                // is written over with its error. The Node and its MCN are separate objects,
                // so the two writes go together: each is a round trip before the reboot.
                let degraded = mcn::degraded(self.name(), None);
                let (node, status) = futures::future::join(
                    self.annotate(&[(ann::POST_CONFIG_ACTION, Some(states::REBOOTING))]),
                    self.mcn_all(&[w, degraded]),
                )
                .await;
                node?;
                status?;
            }
            Phase::DrainNotRequired => {
                // `Working` waited for the drain request, and none comes. Separate objects:
                // the two writes go together.
                let (node, status) =
                    futures::future::join(self.flush_annotations(), self.mcn(&w)).await;
                node?;
                status?;
            }
            _ => self.mcn(&w).await?,
        }
        Ok(())
    }

    async fn config(&self, name: &str) -> Result<MachineConfig, SyncError> {
        if let Some(on_disk) = self.engine.on_disk_config().map_err(EngineError::from)?
            && on_disk.metadata.name.as_deref() == Some(name)
        {
            return Ok(on_disk);
        }
        Ok(self.mcs.get(name).await?)
    }

    /// Uncordon, then Done with `currentConfig`, then `Updated=True`.
    async fn complete(&self, config: &str) -> Result<(), SyncError> {
        self.request_drain(&drain::uncordon(config), "uncordon")
            .await?;
        tracing::info!(
            "Update completed for config {config} and node has been successfully uncordoned"
        );
        self.annotate(&[
            (ann::CURRENT_CONFIG, Some(config)),
            (ann::STATE, Some(states::DONE)),
            (ann::REASON, Some("")),
        ])
        .await?;
        self.metrics.set_state(states::DONE, "");
        if !self.drift_watches(config)
            && let Ok(mc) = self.config(config).await
        {
            self.start_drift(&mc);
        }
        self.mcn(&Write::parent(
            c::UPDATED,
            Status::True,
            format!("Node {} Updated", self.name()),
        ))
        .await
    }

    async fn run_update(
        self: &Arc<Self>,
        old: MachineConfig,
        new: MachineConfig,
        force: bool,
    ) -> Result<UpdateOutcome, SyncError> {
        self.stop_drift();
        let target = new.metadata.name.clone().unwrap_or_default();
        let res = self.update_in_steps(old, new, force).await?;
        let err = res.as_ref().err().map(|e| e.to_string());
        match &res {
            Err(EngineError::Apply(ApplyError::Os { .. })) => self.metrics.pivot_errors.inc(),
            Err(EngineError::Reboot(_)) => self.metrics.reboots_failed.inc(),
            _ => 0,
        };
        self.metrics
            .set_update(&target, err.as_deref().unwrap_or_default());
        self.mcn(&mcn::degraded(self.name(), err.as_deref()))
            .await?;
        Ok(res?)
    }

    /// [`Engine::update`] with the drain awaited here, between two pieces of blocking host work:
    /// waiting on a thread of the blocking pool for every draining node grew the pool to a
    /// thread per node in a large wave.
    async fn update_in_steps(
        self: &Arc<Self>,
        old: MachineConfig,
        new: MachineConfig,
        force: bool,
    ) -> Result<Result<UpdateOutcome, EngineError>, SyncError> {
        let join = |e: tokio::task::JoinError| SyncError::Join(e.to_string());
        let engine = Arc::clone(&self.engine);
        let mut reporter = KubeReporter::new(self);
        let opts = UpdateOptions {
            force,
            ..UpdateOptions::default()
        };
        let prepared = blocking(move || {
            let prepared = engine.prepare_update(&old, &new, opts, &mut reporter);
            prepared.map(|p| (p, engine, reporter))
        })
        .await
        .map_err(join)?;
        let (prepared, engine, mut reporter) = match prepared {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        if prepared.drains()
            && let Err(e) = self
                .request_drain(&drain::drain(prepared.config()), "drain")
                .await
        {
            return Ok(Err(EngineError::Drain(e.to_string())));
        }
        blocking(move || engine.apply_update(prepared, &mut reporter))
            .await
            .map_err(join)
    }

    /// After a rebootless update: Resumed, then complete.
    async fn finish_rebootless(&self, config: &str) -> Result<(), SyncError> {
        self.mcn(&Write::parent(
            c::RESUMED,
            Status::True,
            format!(
                "In desired config {config}. Resumed normal operations. Applying proper annotations."
            ),
        ))
        .await?;
        self.complete(config).await
    }

    /// Records `new` as current without an update, because the node already runs its
    /// equivalent `old` (a config rendered under another controller's name, e.g. upstream's
    /// `rendered-<pool>-<md5>` when mco takes over a cluster). The disk is validated against
    /// `new` first, so Done is never reported over a disk that does not match; nothing is
    /// drained, written (beyond the on-disk `currentconfig`) or rebooted, and the state never
    /// passes through `Working`.
    async fn adopt(&self, old: &MachineConfig, new: MachineConfig) -> Result<(), SyncError> {
        let old_name = old.metadata.name.clone().unwrap_or_default();
        let new_name = new.metadata.name.clone().unwrap_or_default();
        let engine = Arc::clone(&self.engine);
        let cfg = new.clone();
        blocking(move || -> Result<(), EngineError> {
            engine.validate(&cfg)?;
            // The on-disk config is the source of truth after a restart: keep it naming the
            // config the node is now reported on, when the node keeps one at all.
            if engine.on_disk_config()?.is_some() {
                let data = serde_json::to_vec(&cfg).map_err(|source| {
                    EngineError::Apply(ApplyError::Serialize {
                        name: cfg.metadata.name.clone().unwrap_or_default(),
                        source,
                    })
                })?;
                engine.host.fs.write_atomic(
                    crate::host::paths::CURRENT_CONFIG,
                    &data,
                    &crate::host::fs::FileAttrs::default(),
                )?;
            }
            Ok(())
        })
        .await
        .map_err(|e| SyncError::Join(e.to_string()))??;
        self.annotate(&[
            (ann::CURRENT_CONFIG, Some(new_name.as_str())),
            (ann::STATE, Some(states::DONE)),
            (ann::REASON, Some("")),
        ])
        .await?;
        let message = format!("adopted {new_name} (equal to {old_name}) without an update");
        tracing::info!("{message}");
        self.metrics.set_state(states::DONE, "");
        self.metrics.set_update(&new_name, "");
        self.event("Normal", "ConfigAdopted", &message).await;
        self.start_drift(&new);
        self.mcn(&Write::parent(
            c::UPDATED,
            Status::True,
            format!("Node {} Updated", self.name()),
        ))
        .await
    }

    async fn mark_failed(&self, e: &SyncError) {
        let state = if e.is_unreconcilable() {
            states::UNRECONCILABLE
        } else {
            states::DEGRADED
        };
        let reason = truncate_reason(&e.to_string());
        tracing::error!("Marking {state} due to: {reason:?}");
        self.metrics.set_state(state, &reason);
        if let Err(w) = self
            .annotate(&[(ann::STATE, Some(state)), (ann::REASON, Some(&reason))])
            .await
        {
            tracing::error!(error = %w, "could not mark the node");
        }
        if let Err(w) = self.mcn(&mcn::degraded(self.name(), Some(&reason))).await {
            tracing::error!(error = %w, "could not write NodeDegraded");
        }
    }
}

/// Bridges the blocking engine to the async API writes.
struct KubeReporter {
    inner: Arc<Inner>,
    rt: Handle,
}

impl KubeReporter {
    /// A reporter for blocking work started from `inner`'s runtime.
    fn new(inner: &Arc<Inner>) -> KubeReporter {
        KubeReporter {
            inner: Arc::clone(inner),
            rt: Handle::current(),
        }
    }
}

impl Reporter for KubeReporter {
    fn report(&mut self, phase: &Phase) -> Result<(), String> {
        self.rt
            .block_on(self.inner.report(phase))
            .map_err(|e| e.to_string())
    }

    fn drain(&mut self, config: &str) -> Result<(), String> {
        self.rt
            .block_on(self.inner.request_drain(&drain::drain(config), "drain"))
            .map_err(|e| e.to_string())
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
        Daemon {
            inner: Arc::new(Inner {
                nodes: Api::all(client.clone()),
                mcs: Api::all(client.clone()),
                mcns: Api::all(client.clone()),
                events: Api::namespaced(client, "default"),
                engine: Arc::new(engine),
                metrics,
                drift: Mutex::new(None),
                drift_tx,
                opts,
                shutdown: tokio::sync::watch::Sender::new(false),
                watched,
                written: Mutex::new(None),
                mcn_written: Mutex::new(None),
                mcn_pending: Mutex::new(Vec::new()),
                annotations_pending: Mutex::new(Vec::new()),
            }),
            booted: false,
            drift_rx,
            watched_tx: Some(watched_tx),
        }
    }

    /// The daemon's metrics, for an exporter.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics.clone()
    }

    /// The start-up sync: finish a reboot, validate, resume, complete.
    async fn boot(&mut self) -> Result<Option<Exit>, SyncError> {
        let inner = Arc::clone(&self.inner);
        let node = inner.first_node().await?;
        // A reboot still owed (requested in this very boot) has not happened: the start-up
        // check below requests it again, and only the next boot may say "rebooted".
        if annotation(&node, ann::POST_CONFIG_ACTION) == states::REBOOTING
            && !inner.engine.reboot_owed().map_err(EngineError::from)?
        {
            // Both ride with the boot's next write (with Resumed, the uncordon request).
            let m = "Node has rebooted";
            inner.mcn_later(
                Write::parent(c::UPDATE_POST_ACTION_COMPLETE, Status::True, m).child(
                    c::REBOOTED_NODE,
                    Status::True,
                    m,
                ),
            );
            inner.annotate_later(ann::POST_CONFIG_ACTION, None);
        }
        let on_disk = inner.engine.on_disk_config().map_err(EngineError::from)?;
        let annotated = annotation(&node, ann::CURRENT_CONFIG);
        let desired = annotation(&node, ann::DESIRED_CONFIG);
        let current = match on_disk {
            Some(mc) => {
                let name = mc.metadata.name.clone().unwrap_or_default();
                if !annotated.is_empty() && annotated != name {
                    tracing::info!(
                        "Disk currentConfig {name} overrides node's currentConfig annotation {annotated}"
                    );
                }
                mc
            }
            None if !annotated.is_empty() => inner.mcs.get(&annotated).await?,
            None if !desired.is_empty() => inner.mcs.get(&desired).await?,
            None => {
                tracing::info!("no current or desired config yet; waiting");
                return Ok(None);
            }
        };
        let current_name = current.metadata.name.clone().unwrap_or_default();
        let engine = Arc::clone(&inner.engine);
        let check_cfg = current.clone();
        let check = match blocking(move || engine.boot_check(&check_cfg))
            .await
            .map_err(|e| SyncError::Join(e.to_string()))?
        {
            Ok(c) => c,
            Err(e) => {
                inner
                    .event("Warning", "OnDiskStateValidationFailed", &e.to_string())
                    .await;
                return Err(e.into());
            }
        };
        self.booted = true;
        if check == BootCheck::RebootPending {
            let rationale = format!("Node will reboot into config {current_name}");
            inner
                .annotate(&[(ann::POST_CONFIG_ACTION, Some(states::REBOOTING))])
                .await?;
            let engine = Arc::clone(&inner.engine);
            blocking(move || engine.host.rebooter.reboot(&rationale))
                .await
                .map_err(|e| SyncError::Join(e.to_string()))?
                .map_err(EngineError::Reboot)?;
            return Ok(Some(Exit::Rebooting));
        }
        if check == BootCheck::Forced {
            let target = if desired.is_empty() {
                current.clone()
            } else {
                inner.config(&desired).await?
            };
            return match inner.run_update(current, target.clone(), true).await? {
                UpdateOutcome::Rebooting | UpdateOutcome::RebootDeferred => {
                    Ok(Some(Exit::Rebooting))
                }
                UpdateOutcome::Rebootless { .. } => {
                    let n = target.metadata.name.unwrap_or_default();
                    inner.finish_rebootless(&n).await?;
                    Ok(None)
                }
            };
        }
        // Rides with the uncordon request, or with whatever this sync writes next.
        inner.mcn_later(Write::parent(
            c::RESUMED,
            Status::True,
            format!("In desired config {current_name}. Resumed normal operations."),
        ));
        inner.start_drift(&current);
        if desired.is_empty() || desired == current_name {
            inner.complete(&current_name).await?;
        }
        Ok(None)
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
        let desired = annotation(&node, ann::DESIRED_CONFIG);
        if desired.is_empty() {
            return Ok(None);
        }
        let on_disk = inner.engine.on_disk_config().map_err(EngineError::from)?;
        let current = on_disk
            .as_ref()
            .and_then(|m| m.metadata.name.clone())
            .unwrap_or_else(|| annotation(&node, ann::CURRENT_CONFIG));
        let state = annotation(&node, ann::STATE);
        if current == desired && inner.engine.force_requested().map_err(EngineError::from)? {
            // The force file re-applies the current config completely, whatever the state:
            // it is the one-step recovery from drift and from a never-adopted OS.
            tracing::info!(
                "{} present: re-applying {desired}",
                crate::host::paths::FORCE_FILE
            );
            let cfg = inner.config(&desired).await?;
            return match inner.run_update(cfg.clone(), cfg, true).await? {
                UpdateOutcome::Rebooting | UpdateOutcome::RebootDeferred => {
                    Ok(Some(Exit::Rebooting))
                }
                UpdateOutcome::Rebootless { .. } => {
                    inner.finish_rebootless(&desired).await?;
                    Ok(None)
                }
            };
        }
        if current == desired {
            if state != states::DONE || annotation(&node, ann::CURRENT_CONFIG) != desired {
                // A Degraded node (e.g. after drift) is only cleared once the disk matches.
                let engine = Arc::clone(&inner.engine);
                let cfg = inner.config(&desired).await?;
                let valid = blocking(move || engine.validate(&cfg))
                    .await
                    .map_err(|e| SyncError::Join(e.to_string()))?;
                match valid {
                    Err(e) if state == states::DEGRADED => {
                        return Err(SyncError::StillDegraded(e.to_string()));
                    }
                    other => other?,
                }
                inner.complete(&desired).await?;
            } else {
                inner
                    .mcn(&Write::parent(
                        c::UPDATED,
                        Status::True,
                        format!("Node {} Updated", inner.name()),
                    ))
                    .await?;
            }
            return Ok(None);
        }
        let old = inner.config(&current).await?;
        let new = inner.mcs.get(&desired).await?;
        if !inner.engine.force_requested().map_err(EngineError::from)?
            && semantically_equal(&old, &new)
        {
            inner.adopt(&old, new).await?;
            return Ok(None);
        }
        // Both ride with the update's first writes: the Prepared phase and the drain request.
        inner.mcn_later(Write::parent(
            c::UPDATED,
            Status::False,
            format!("Node {} needs an update", inner.name()),
        ));
        if state != states::DEGRADED && state != states::UNRECONCILABLE {
            inner.annotate_later(ann::STATE, Some(states::WORKING));
        }
        let engine = Arc::clone(&inner.engine);
        let pre = old.clone();
        // Preflight drift check, skipped when the force file asks for a re-apply.
        blocking(move || {
            if engine.force_requested()? {
                Ok(())
            } else {
                engine.validate(&pre)
            }
        })
        .await
        .map_err(|e| SyncError::Join(e.to_string()))??;
        match inner.run_update(old, new, false).await? {
            UpdateOutcome::Rebooting | UpdateOutcome::RebootDeferred => Ok(Some(Exit::Rebooting)),
            UpdateOutcome::Rebootless { .. } => {
                inner.finish_rebootless(&desired).await?;
                Ok(None)
            }
        }
    }

    /// Runs until a reboot is requested or `shutdown` resolves. A sync in progress is not cut
    /// short, except that a wait on the drain controller gives up.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<Exit, SyncError> {
        let inner = Arc::clone(&self.inner);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", inner.name()));
        // The watch runs in its own task so that it is also consumed while a sync (and so a
        // drain wait) is in progress; the loop below triggers syncs from what it publishes.
        let Some(watched_tx) = self.watched_tx.take() else {
            return Ok(Exit::Shutdown);
        };
        let _watch_task = AbortOnDrop(tokio::spawn(
            forward_node_watch(inner.nodes.clone(), cfg, watched_tx).in_current_span(),
        ));
        let mut node_changes = inner.watched.clone();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut backoff = Duration::from_secs(1);
        let mut retry_at: Option<tokio::time::Instant> = Some(tokio::time::Instant::now());
        // Nothing watches /run, so a touched force file is noticed by a cheap poll rather than
        // after a degraded node's backoff, which may be a minute.
        let mut force_poll = tokio::time::interval(Duration::from_secs(1));
        force_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let due = async {
                match retry_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => {
                    tracing::info!("shutting down at a safe point");
                    return Ok(Exit::Shutdown);
                }
                Some(reason) = self.drift_rx.recv() => {
                    inner.metrics.config_drift.set(
                        k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0,
                    );
                    inner.event("Warning", "ConfigDriftDetected", &reason).await;
                    inner.mark_failed(&SyncError::Drift(reason)).await;
                    retry_at = Some(tokio::time::Instant::now() + backoff);
                    backoff = (backoff * 2).min(inner.opts.max_backoff);
                }
                _ = force_poll.tick() => {
                    let soon = tokio::time::Instant::now() + Duration::from_secs(1);
                    if retry_at.is_none_or(|t| t > soon)
                        && inner.engine.force_requested().unwrap_or(false)
                    {
                        retry_at = Some(tokio::time::Instant::now());
                        backoff = Duration::from_secs(1);
                    }
                }
                changed = node_changes.changed() => match changed {
                    Ok(()) => {
                        if retry_at.is_none() {
                            retry_at = Some(tokio::time::Instant::now());
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

/// Blocking host work on tokio's blocking pool, inside the caller's tracing span: a process
/// hosting many daemons (the embedded cluster) tells their logs apart by the span's node.
fn blocking<F, R>(f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mc(name: &str, version: &str, file: &str, image: &str) -> MachineConfig {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "metadata": {"name": name, "annotations": {
                "machineconfiguration.openshift.io/generated-by-controller-version": name,
            }},
            "spec": {
                "osImageURL": image,
                "kernelArguments": ["nosmt"],
                "config": {
                    "ignition": {"version": version},
                    "storage": {"files": [{
                        "path": "/etc/a", "mode": 420,
                        "contents": {"source": format!("data:,{file}")},
                    }]},
                    "systemd": {"units": [{"name": "a.service", "enabled": true,
                        "contents": "[Unit]\n"}]},
                },
            },
        }))
        .unwrap()
    }

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

    #[test]
    fn an_upstream_render_of_the_same_config_is_equal() {
        let ours = mc("rendered-worker-0123", "3.5.0", "x", "img:1");
        let theirs = mc(
            "rendered-worker-5d41402abc4b2a76b9719d911017c592",
            "3.4.0",
            "x",
            "img:1",
        );
        assert!(semantically_equal(&theirs, &ours));
        assert!(semantically_equal(&ours, &theirs));
    }

    #[test]
    fn any_node_visible_difference_is_not_equal() {
        let ours = mc("a", "3.5.0", "x", "img:1");
        assert!(!semantically_equal(&mc("b", "3.4.0", "y", "img:1"), &ours));
        assert!(!semantically_equal(&mc("b", "3.4.0", "x", "img:2"), &ours));
        let mut kargs = mc("b", "3.4.0", "x", "img:1");
        kargs.spec.kernel_arguments = Some(vec![]);
        assert!(!semantically_equal(&kargs, &ours));
    }

    #[test]
    fn an_unparsable_config_is_never_equal() {
        let ours = mc("a", "3.5.0", "x", "img:1");
        let bad = mc("b", "9.9.9", "x", "img:1");
        assert!(!semantically_equal(&bad, &ours));
    }
}
