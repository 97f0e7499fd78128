//! The dashboard's view model: a pure function of a [`Snapshot`] and recent Events, and the
//! delta between two of them that the page applies live.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mco_api::MachineConfigNode;
use mco_api::constants::states;
use mco_cli::Snapshot;
use mco_cli::drain::{self, BlockedDrain};
use mco_cli::phase::{self, PHASE_ORDER, human_duration};
use mco_cli::snapshot::{NodeFacts, name_of};
use mco_cli::{doctor, status};
use serde::Serialize;

/// Events kept and shown, newest first.
pub const MAX_EVENTS: usize = 100;
/// Longest Event or node message kept, in characters.
pub const MAX_MESSAGE: usize = 1024;
/// Pods of a blocked drain shown (the drain message may name any number); the rest are counted.
pub const MAX_BLOCKED_PODS: usize = 50;
/// `mco doctor` findings shown for one node.
pub const MAX_FINDINGS: usize = 10;
/// Longest text of a finding (cause, fix, command) kept, in characters.
pub const MAX_FINDING_TEXT: usize = 4 * MAX_MESSAGE;
/// Canary nodes named in a pool's rollout; the rest are counted.
pub const MAX_CANARY_NODES: usize = 50;
/// Longest halt message kept, in characters: it carries a failed check's output (up to
/// 4096 bytes).
pub const MAX_HALT_TEXT: usize = 4 * MAX_MESSAGE;
/// A governed pool's rollout phase before the controller reports it.
pub const PENDING: &str = "Pending";

/// One pool, as `mco status` computes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolView {
    pub name: String,
    pub updated: usize,
    pub total: usize,
    pub target: String,
    pub paused: bool,
    pub degraded: bool,
    pub max_unavailable: usize,
    /// `done`, `ETA 3m05s (2 waves of 1)` or `ETA unknown …`: `mco status`'s words.
    pub eta: String,
    /// A RolloutPolicy halted the pool's rollout (its `RolloutHalted` condition, or the
    /// governing policy's halt).
    pub halted: bool,
    /// The governing RolloutPolicy's view of the rollout; `None` for a pool no policy governs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutView>,
    /// `[nodes done, nodes]` while the pool's PinnedImageSets are not pinned everywhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinning: Option<[usize; 2]>,
    /// Why the pool, in on-cluster image mode, waits for its image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_image: Option<String>,
}

/// A pool's rollout under the RolloutPolicy that governs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RolloutView {
    /// The policy's name.
    pub policy: String,
    /// `Canary`, `Soaking`, `RollingOut`, `Halted`, `WaitingForWindow`, `Complete`, or
    /// [`PENDING`] until the controller reports the pool.
    pub phase: String,
    /// The rendered config the rollout moves to; empty until reported.
    pub target: String,
    /// The first [`MAX_CANARY_NODES`] canary nodes.
    pub canary_nodes: Vec<String>,
    /// Canary nodes beyond those.
    pub more_canary: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub halt: Option<HaltView>,
    /// The gates the policy configures, in the order of its spec.
    pub gates: Vec<GateView>,
    /// `window open until …`, `next window …`: `mco status`'s words; `None` without windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// When the next window opens, while the rollout waits for one (the controller's word).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_window: Option<String>,
    /// The pool's `RollbackPinned` message, when a rollback pins it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned: Option<String>,
}

/// Why a rollout is halted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HaltView {
    /// `manual`, `nodeReady`, `podsReady`, `pdbs`, `http`, `nodeChecks`.
    pub gate: String,
    /// The node whose gate failed; empty for a manual halt.
    pub node: String,
    pub message: String,
    /// When, as the controller wrote it (RFC 3339); empty if unknown.
    pub time: String,
}

/// One gate of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateView {
    /// `nodeReady`, `podsReady`, `pdbs`, `http`, `nodeChecks`.
    pub name: String,
    /// `within 10m00s`, `GET https://… expects 200 within 10s`.
    pub detail: String,
}

/// Where a node stands, for its colour and legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// At its desired config, nothing in progress.
    Updated,
    /// Moving to a new config.
    Updating,
    /// Degraded or unreconcilable.
    Degraded,
    /// Nothing reported yet.
    Unknown,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Updated, Kind::Updating, Kind::Degraded, Kind::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Updated => "updated",
            Kind::Updating => "updating",
            Kind::Degraded => "degraded",
            Kind::Unknown => "unknown",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Updated => "Updated",
            Kind::Updating => "Updating",
            Kind::Degraded => "Degraded",
            Kind::Unknown => "Not reported",
        }
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeView {
    pub name: String,
    pub pool: String,
    pub kind: Kind,
    /// The phase as `mco status` names it: `Drained (in progress)`, `Updated (done)`, `waiting`.
    pub phase: String,
    pub current: String,
    pub desired: String,
    /// Why a degraded node is degraded, or the current phase's message.
    pub message: String,
    /// Every update phase the node has entered, in upstream order.
    pub timeline: Vec<PhaseStep>,
    /// Its drain, when pods that cannot be evicted hold it up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainView>,
    /// `mco doctor`'s findings, for a degraded node or a blocked drain only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<FindingView>,
}

/// One phase of a node's update: a MachineConfigNode condition that is `Unknown` (in progress)
/// or `True` (done).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseStep {
    /// The condition type, e.g. `Drained`.
    pub phase: String,
    /// The condition status: `Unknown` or `True`.
    pub status: String,
    /// `in progress` or `done`.
    pub state: String,
    /// When it started, `HH:MM:SSZ`: a phase in progress at its transition, a finished one at
    /// the transition before its own (its own marks its end).
    pub started: String,
    /// How long it took (to now while in progress), `3m05s`.
    pub duration: String,
}

/// A drain held up by pods that cannot be evicted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DrainView {
    /// How long the drain phase has been at it, `3m05s`; empty if unknown.
    pub blocked_for: String,
    /// The first [`MAX_BLOCKED_PODS`] pods, as the drain names them.
    pub pods: Vec<BlockerView>,
    /// Pods named beyond those.
    pub more_pods: usize,
    /// Every budget involved, once each.
    pub budgets: Vec<BudgetView>,
}

/// A pod that cannot be evicted (`namespace/name`) and the budgets that refuse it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockerView {
    pub pod: String,
    pub pdbs: Vec<String>,
}

/// A PodDisruptionBudget and what it allows right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetView {
    /// `namespace/name`.
    pub pdb: String,
    /// `disruptionsAllowed 0, healthy 1/1, minAvailable 1`.
    pub budget: String,
}

/// One of `mco doctor`'s findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindingView {
    pub title: String,
    pub cause: String,
    /// In order of preference.
    pub fixes: Vec<FixView>,
}

/// One way out: what it does and the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FixView {
    pub how: String,
    pub command: String,
}

/// Seed 002's `kubectl get machineconfignodes` table: the CRD's own printer columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct McnTable {
    pub header: Vec<String>,
    /// node name → cells (the first is the name); shared from one view to the next.
    pub rows: BTreeMap<String, Arc<Vec<String>>>,
}

/// One Event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventView {
    pub key: String,
    pub time: String,
    pub type_: String,
    pub object: String,
    pub reason: String,
    pub message: String,
}

/// Everything the page shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Fleet {
    pub pools: Vec<PoolView>,
    /// By name. Shared: a rebuild keeps the previous view of each node that did not change,
    /// so the view being sent and the one being built hold one copy of it.
    pub nodes: BTreeMap<String, Arc<NodeView>>,
    pub table: McnTable,
    pub events: Vec<EventView>,
}

/// What changed between two [`Fleet`]s; the page applies it in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Delta {
    /// The first message on a stream: everything; nodes and rows it lacks are gone.
    pub reset: bool,
    /// Pools are few: all of them, when any changed.
    pub pools: Option<Vec<PoolView>>,
    pub nodes: Vec<NodeView>,
    pub removed: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub events: Option<Vec<EventView>>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.pools.is_none()
            && self.nodes.is_empty()
            && self.removed.is_empty()
            && self.rows.is_empty()
            && self.events.is_none()
    }

    /// The delta from nothing: every pool, node, row and Event.
    pub fn full(f: &Fleet) -> Delta {
        Delta {
            reset: true,
            ..delta(&Fleet::default(), f)
        }
    }
}

fn cut(text: &str) -> String {
    status::ellipsize(text, MAX_MESSAGE)
}

fn at(t: jiff::Timestamp) -> String {
    t.strftime("%H:%M:%SZ").to_string()
}

fn span(from: jiff::Timestamp, to: jiff::Timestamp) -> String {
    human_duration(Duration::from_secs(
        (to.as_second() - from.as_second()).max(0) as u64,
    ))
}

/// Every phase `mcn` has entered, in upstream order. A condition keeps only its last
/// transition, so a finished phase is timed from the latest earlier transition of another
/// phase (when the step before it ended) to its own; one in progress from its own to `now`.
pub fn timeline(mcn: &MachineConfigNode, now: jiff::Timestamp) -> Vec<PhaseStep> {
    let Some(status) = mcn.status.as_ref() else {
        return Vec::new();
    };
    let entered: Vec<_> = PHASE_ORDER
        .iter()
        .filter_map(|t| status.condition(t))
        .filter(|c| c.status == "True" || c.status == "Unknown")
        .collect();
    entered
        .iter()
        .map(|c| {
            let own = c.last_transition_time.0;
            let in_progress = c.status == "Unknown";
            let (from, to) = if in_progress {
                (own, now)
            } else {
                let before = entered
                    .iter()
                    .map(|o| o.last_transition_time.0)
                    .filter(|t| *t < own)
                    .max();
                (before.unwrap_or(own), own)
            };
            PhaseStep {
                phase: c.type_.clone(),
                status: c.status.clone(),
                state: if in_progress { "in progress" } else { "done" }.to_string(),
                started: at(from),
                duration: span(from, to),
            }
        })
        .collect()
}

/// `minAvailable 1`, `maxUnavailable 10%`, or nothing.
fn rule(pdb: &PodDisruptionBudget) -> Option<String> {
    let s = pdb.spec.as_ref()?;
    let v = |v: &IntOrString| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    match (&s.min_available, &s.max_unavailable) {
        (Some(m), _) => Some(format!("minAvailable {}", v(m))),
        (_, Some(m)) => Some(format!("maxUnavailable {}", v(m))),
        _ => None,
    }
}

/// What `pdb_ref` (`namespace/name`) allows, from the watched budgets.
pub fn budget(pdbs: &[Arc<PodDisruptionBudget>], pdb_ref: &str) -> BudgetView {
    let (ns, name) = pdb_ref.split_once('/').unwrap_or(("", pdb_ref));
    let found = pdbs.iter().find(|p| {
        p.metadata.namespace.as_deref().unwrap_or_default() == ns
            && p.metadata.name.as_deref() == Some(name)
    });
    let text = match found {
        None => "not found".to_string(),
        Some(p) => {
            let mut parts = Vec::new();
            match &p.status {
                Some(s) => {
                    parts.push(format!("disruptionsAllowed {}", s.disruptions_allowed));
                    parts.push(format!(
                        "healthy {}/{}",
                        s.current_healthy, s.desired_healthy
                    ));
                }
                None => parts.push("no status yet".to_string()),
            }
            parts.extend(rule(p));
            parts.join(", ")
        }
    };
    BudgetView {
        pdb: cut(pdb_ref),
        budget: text,
    }
}

fn drain_view(snap: &Snapshot, b: &BlockedDrain) -> DrainView {
    DrainView {
        blocked_for: b.since.map(|s| span(s, snap.now)).unwrap_or_default(),
        pods: b
            .blockers
            .iter()
            .take(MAX_BLOCKED_PODS)
            .map(|x| BlockerView {
                pod: cut(&x.pod),
                pdbs: x.pdbs.iter().map(|p| cut(p)).collect(),
            })
            .collect(),
        more_pods: b.blockers.len().saturating_sub(MAX_BLOCKED_PODS),
        budgets: b
            .pdbs()
            .iter()
            .take(MAX_BLOCKED_PODS)
            .map(|p| budget(&snap.pdbs, p))
            .collect(),
    }
}

/// `mco doctor`'s findings for one node. Run on a snapshot of that node alone (with every pool
/// and budget): what `diagnose` says of a node depends on nothing else, and a fleet-wide
/// snapshot would make each call cost as much as the whole fleet.
fn findings(
    snap: &Snapshot,
    node: &Arc<Node>,
    mcn: Option<&Arc<MachineConfigNode>>,
) -> Vec<FindingView> {
    let one = Snapshot {
        now: snap.now,
        pools: snap.pools.clone(),
        nodes: vec![Arc::clone(node)],
        mcns: mcn.cloned().into_iter().collect(),
        pdbs: snap.pdbs.clone(),
        ..Snapshot::default()
    };
    let long = |t: &str| status::ellipsize(t, MAX_FINDING_TEXT);
    doctor::diagnose(&one, &BTreeMap::new(), Some(name_of(node.as_ref())))
        .into_iter()
        .take(MAX_FINDINGS)
        .map(|f| FindingView {
            title: long(&f.title),
            cause: long(&f.cause),
            fixes: f
                .fixes
                .iter()
                .map(|x| FixView {
                    how: long(&x.how),
                    command: long(&x.command),
                })
                .collect(),
        })
        .collect()
}

/// The phase label and kind of a node, with `mco status`'s mapping from MCN conditions, and
/// its detail.
fn node_view(
    snap: &Snapshot,
    shared: &Arc<Node>,
    shared_mcn: Option<&Arc<MachineConfigNode>>,
    blocked: Option<&BlockedDrain>,
    pool: String,
) -> NodeView {
    let (node, mcn) = (shared.as_ref(), shared_mcn.map(Arc::as_ref));
    let name = name_of(node).to_string();
    let facts = NodeFacts::of(node);
    let current_phase = mcn.and_then(phase::current_phase);
    let phase = match &current_phase {
        Some(p) if p.in_progress() => format!("{} (in progress)", p.name),
        Some(p) => format!("{} (done)", p.name),
        None => "waiting".to_string(),
    };
    let degraded = status::is_degraded(&facts);
    let mcn_updated = mcn.is_some_and(status::mcn_updated);
    let kind = if degraded {
        Kind::Degraded
    } else if status::is_moving(&facts, mcn) {
        Kind::Updating
    } else if mcn_updated || (!facts.current.is_empty() && facts.state == states::DONE) {
        Kind::Updated
    } else {
        Kind::Unknown
    };
    let message = if degraded {
        status::degraded_reason(&facts, mcn)
    } else {
        current_phase.map(|p| p.message).unwrap_or_default()
    };
    // Only for nodes in trouble: diagnosing every node on every rebuild would cost too much.
    let findings = if degraded || blocked.is_some() {
        findings(snap, shared, shared_mcn)
    } else {
        Vec::new()
    };
    NodeView {
        name,
        pool,
        kind,
        phase,
        current: facts.current,
        desired: facts.desired,
        message: cut(&message),
        timeline: mcn.map(|m| timeline(m, snap.now)).unwrap_or_default(),
        drain: blocked.map(|b| drain_view(snap, b)),
        findings,
    }
}

fn event_view(e: &Event) -> EventView {
    let time = event_time(e)
        .map(|t| t.strftime("%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let o = &e.involved_object;
    EventView {
        key: format!(
            "{}/{}",
            e.metadata.namespace.as_deref().unwrap_or_default(),
            e.metadata.name.as_deref().unwrap_or_default()
        ),
        time,
        type_: e.type_.clone().unwrap_or_default(),
        object: format!(
            "{}/{}",
            o.kind.as_deref().unwrap_or_default(),
            o.name.as_deref().unwrap_or_default()
        ),
        reason: e.reason.clone().unwrap_or_default(),
        message: cut(e.message.as_deref().unwrap_or_default()),
    }
}

/// The newest [`MAX_EVENTS`] of `events`, newest first; of two as new, the earlier in `events`.
pub fn newest<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<&'a Event> {
    let mut events: Vec<&Event> = events.into_iter().collect();
    events.sort_by_key(|e| std::cmp::Reverse(event_time(e)));
    events.truncate(MAX_EVENTS);
    events
}

/// When an Event last happened.
pub fn event_time(e: &Event) -> Option<jiff::Timestamp> {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn span_text(d: jiff::SignedDuration) -> String {
    human_duration(Duration::try_from(d).unwrap_or_default())
}

/// The gates `spec` configures, with the timeouts the controller applies (defaults included).
fn gates(spec: &mco_api::rollouts::RolloutPolicySpec) -> Vec<GateView> {
    use mco_rollout::policy::{self, gates as g};
    let Ok(v) = policy::validate(spec) else {
        return Vec::new();
    };
    let gate = |name: &str, detail: String| GateView {
        name: name.to_string(),
        detail: cut(&detail),
    };
    let mut out = Vec::new();
    if let Some(t) = v.node_ready {
        out.push(gate(g::NODE_READY, format!("within {}", span_text(t))));
    }
    if let Some(t) = v.pods_ready {
        out.push(gate(g::PODS_READY, format!("within {}", span_text(t))));
    }
    if v.pdbs {
        out.push(gate(g::PDBS, "budgets allow disruptions".to_string()));
    }
    for p in &v.http {
        out.push(gate(
            g::HTTP,
            format!(
                "GET {} expects {} within {}",
                p.url,
                p.expect_status,
                span_text(p.timeout)
            ),
        ));
    }
    if let Some(t) = v.node_checks {
        out.push(gate(
            g::NODE_CHECKS,
            format!("each check within {}", span_text(t)),
        ));
    }
    out
}

/// The rollout of `pool` under its governing policy, if one governs it.
fn rollout_view(
    snap: &Snapshot,
    report: &status::StatusReport,
    p: &status::PoolProgress,
) -> Option<RolloutView> {
    let pool = snap.pool(&p.name)?;
    let policy = status::governing_policy(snap, pool)?;
    let entry = policy
        .status
        .as_ref()
        .and_then(|s| s.pools.iter().find(|e| e.pool == p.name));
    let of = |list: &[(String, String)]| {
        list.iter()
            .find(|(pool, _)| *pool == p.name)
            .map(|(_, m)| status::ellipsize(m, MAX_HALT_TEXT))
    };
    let halt = entry
        .and_then(|e| e.halt.as_ref())
        .map(|h| HaltView {
            gate: cut(&h.gate),
            node: cut(&h.node),
            message: status::ellipsize(&h.message, MAX_HALT_TEXT),
            time: cut(h.time.as_deref().unwrap_or_default()),
        })
        // Halted on the pool before the policy's status says by what.
        .or_else(|| {
            of(&report.halted).map(|message| HaltView {
                gate: String::new(),
                node: String::new(),
                message,
                time: String::new(),
            })
        });
    let canary = entry.map(|e| e.canary_nodes.as_slice()).unwrap_or_default();
    Some(RolloutView {
        policy: cut(name_of(policy)),
        phase: entry
            .map(|e| cut(&e.phase))
            .filter(|ph| !ph.is_empty())
            .unwrap_or_else(|| PENDING.to_string()),
        target: entry.map(|e| cut(&e.target)).unwrap_or_default(),
        canary_nodes: canary
            .iter()
            .take(MAX_CANARY_NODES)
            .map(|n| cut(n))
            .collect(),
        more_canary: canary.len().saturating_sub(MAX_CANARY_NODES),
        halt,
        gates: gates(&policy.spec),
        window: p.window.clone(),
        next_window: entry.and_then(|e| e.next_window.as_deref()).map(cut),
        pinned: of(&report.pinned),
    })
}

/// The view of `snap` and `events` (any order; the newest [`MAX_EVENTS`] are kept).
pub fn build(snap: &Snapshot, events: &[Event]) -> Fleet {
    Builder::default().build(snap, events).as_ref().clone()
}

/// What a node's view was built from.
struct Source {
    node: Arc<Node>,
    mcn: Option<Arc<MachineConfigNode>>,
    /// The view runs with the clock or reads more than its own objects: a phase in
    /// progress, a blocked drain, a degraded node's findings.
    live: bool,
    /// The rebuild that last saw the node.
    seen: u64,
}

/// Sets `name`'s entry, allocating its key only when it is new.
fn put<V>(map: &mut HashMap<String, V>, name: &str, v: V) {
    match map.get_mut(name) {
        Some(e) => *e = v,
        None => {
            map.insert(name.to_string(), v);
        }
    }
}

/// A MachineConfigNode's table row and what it was built from.
struct Row {
    mcn: Arc<MachineConfigNode>,
    cells: Arc<Vec<String>>,
    /// The rebuild that last saw the MachineConfigNode.
    seen: u64,
}

/// Builds successive views of a cluster, each after the last. A node's view is built again
/// only when its Node or MachineConfigNode is a different object than last time (a watch
/// replaces an object when it changes), its pool changed, or its view runs with the clock;
/// otherwise the last view stands, shared. A table row follows its MachineConfigNode the same
/// way. In a rollout of a thousand nodes most are waiting or done at any moment, so a rebuild
/// costs the nodes that move, not the fleet.
#[derive(Default)]
pub struct Builder {
    last: Option<Arc<Fleet>>,
    /// Counts the rebuilds. The caches below are updated in place and an entry not seen by the
    /// current rebuild is dropped, so a rebuild allocates a key only for a new node.
    epoch: u64,
    sources: HashMap<String, Source>,
    rows: HashMap<String, Row>,
    /// Seed 002's columns and their header, from the CRD once rather than on every rebuild.
    columns: Option<(mco_apimachinery::table::TableConvertor, Vec<String>)>,
}

impl Builder {
    /// The view of `snap` and `events` now.
    pub fn build(&mut self, snap: &Snapshot, events: &[Event]) -> Arc<Fleet> {
        self.epoch += 1;
        let epoch = self.epoch;
        let report = status::build(snap);
        let pools = report
            .pools
            .iter()
            .map(|p| {
                let rollout = rollout_view(snap, &report, p);
                PoolView {
                    name: p.name.clone(),
                    updated: p.updated,
                    total: p.total,
                    target: p.target.clone(),
                    paused: p.paused,
                    degraded: p.degraded,
                    max_unavailable: p.max_unavailable,
                    eta: status::pool_line(p)[4].clone(),
                    halted: report.halted.iter().any(|(pool, _)| *pool == p.name)
                        || rollout.as_ref().is_some_and(|r| {
                            r.halt.is_some() || r.phase == mco_rollout::policy::phases::HALTED
                        }),
                    rollout,
                    pinning: p.pinning.map(|(done, of)| [done, of]),
                    waiting_image: p.waiting_image.clone(),
                }
            })
            .collect();
        let membership = snap.membership();
        let mcns: HashMap<&str, &Arc<MachineConfigNode>> =
            snap.mcns.iter().map(|m| (name_of(m.as_ref()), m)).collect();
        let blocked = drain::blocked_drains(snap);
        let blocked: HashMap<&str, &BlockedDrain> =
            blocked.iter().map(|b| (b.node.as_str(), b)).collect();
        let last = self.last.take();
        let mut nodes = BTreeMap::new();
        for n in &snap.nodes {
            let name = name_of(n.as_ref());
            let pool = membership.primary.get(name).cloned().unwrap_or_default();
            let mcn = mcns.get(name).copied();
            let block = blocked.get(name).copied();
            let old = last.as_ref().and_then(|f| f.nodes.get(name));
            let standing = self.sources.get(name).filter(|src| {
                !src.live
                    && block.is_none()
                    && Arc::ptr_eq(&src.node, n)
                    && match (&src.mcn, mcn) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        (None, None) => true,
                        _ => false,
                    }
            });
            let view = match old {
                Some(v) if standing.is_some() && v.pool == pool => Arc::clone(v),
                _ => {
                    let v = node_view(snap, n, mcn, block, pool);
                    match old {
                        Some(o) if **o == v => Arc::clone(o),
                        _ => Arc::new(v),
                    }
                }
            };
            let live = view.drain.is_some()
                || !view.findings.is_empty()
                || view.kind == Kind::Degraded
                || view.timeline.iter().any(|t| t.status == "Unknown");
            let source = Source {
                node: Arc::clone(n),
                mcn: mcn.cloned(),
                live,
                seen: epoch,
            };
            put(&mut self.sources, name, source);
            nodes.insert(name.to_string(), view);
        }
        self.sources.retain(|_, s| s.seen == epoch);
        let fleet = Arc::new(Fleet {
            pools,
            nodes,
            table: self.table(snap),
            events: newest(events).into_iter().map(event_view).collect(),
        });
        self.last = Some(Arc::clone(&fleet));
        fleet
    }

    /// Seed 002's table from the MachineConfigNode CRD's printer columns (those `kubectl get`
    /// shows without `-o wide`), through the API server's own table code. Its columns read
    /// the object alone, so a row stands while its MachineConfigNode does.
    fn table(&mut self, snap: &Snapshot) -> McnTable {
        use mco_apimachinery::table::{PrinterColumn, TableConvertor};
        if self.columns.is_none() {
            let crd = serde_json::to_value(mco_api::mcn::crd()).unwrap_or_default();
            let columns: Vec<PrinterColumn> = PrinterColumn::from_crd(&crd, "v1")
                .into_iter()
                .filter(|c| c.priority == 0)
                .collect();
            let Ok(conv) = TableConvertor::for_crd(&columns) else {
                return McnTable::default();
            };
            let header = conv
                .column_definitions()
                .iter()
                .map(|c| c.name.to_uppercase())
                .collect();
            self.columns = Some((conv, header));
        }
        let Some((conv, header)) = &self.columns else {
            return McnTable::default();
        };
        let header = header.clone();
        let epoch = self.epoch;
        let mut rows = BTreeMap::new();
        for m in &snap.mcns {
            let name = name_of(m.as_ref());
            let cells = match self.rows.get(name) {
                Some(r) if Arc::ptr_eq(&r.mcn, m) => Arc::clone(&r.cells),
                _ => {
                    let Ok(obj) = serde_json::to_value(m.as_ref()) else {
                        continue;
                    };
                    Arc::new(
                        conv.cells(&obj, snap.now)
                            .into_iter()
                            .map(|v| match v {
                                serde_json::Value::String(s) => s,
                                serde_json::Value::Null => String::new(),
                                other => other.to_string(),
                            })
                            .collect(),
                    )
                }
            };
            rows.insert(name.to_string(), Arc::clone(&cells));
            let row = Row {
                mcn: Arc::clone(m),
                cells,
                seen: epoch,
            };
            put(&mut self.rows, name, row);
        }
        self.rows.retain(|_, r| r.seen == epoch);
        McnTable { header, rows }
    }
}

/// What changed from `old` to `new`.
pub fn delta(old: &Fleet, new: &Fleet) -> Delta {
    Delta {
        reset: false,
        pools: (old.pools != new.pools).then(|| new.pools.clone()),
        nodes: new
            .nodes
            .values()
            .filter(|n| {
                !old.nodes
                    .get(&n.name)
                    .is_some_and(|o| Arc::ptr_eq(o, n) || o == *n)
            })
            .map(|n| (**n).clone())
            .collect(),
        removed: old
            .nodes
            .keys()
            .filter(|k| !new.nodes.contains_key(*k))
            .cloned()
            .collect(),
        rows: new
            .table
            .rows
            .iter()
            .filter(|(k, v)| {
                !old.table
                    .rows
                    .get(*k)
                    .is_some_and(|o| Arc::ptr_eq(o, v) || o == *v)
            })
            .map(|(_, v)| (**v).clone())
            .collect(),
        events: (old.events != new.events).then(|| new.events.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_testkit::{NodeBuilder, PoolBuilder};

    fn arcs<T>(v: Vec<T>) -> Vec<Arc<T>> {
        v.into_iter().map(Arc::new).collect()
    }

    fn mcn(node: &str, conds: &[(&str, &str, &str)]) -> mco_api::MachineConfigNode {
        let conditions: Vec<serde_json::Value> = conds
            .iter()
            .map(|(t, s, m)| {
                serde_json::json!({"type": t, "status": s, "message": m, "reason": "r",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigNode",
            "metadata": {"name": node},
            "spec": {"node": {"name": node}, "pool": {"name": "worker"},
                     "configVersion": {"desired": "rendered-worker-b"}},
            "status": {"conditions": conditions, "observedGeneration": 1,
                       "configVersion": {"current": "rendered-worker-a", "desired": "rendered-worker-b"}},
        }))
        .unwrap()
    }

    fn snap() -> Snapshot {
        let pool = PoolBuilder::new("worker")
            .role("worker")
            .target("rendered-worker-b")
            .max_unavailable(2)
            .build();
        let n = |name: &str, cur: &str, des: &str, state: &str| {
            NodeBuilder::new(name)
                .role("worker")
                .current_config(cur)
                .desired_config(des)
                .state(state)
                .build()
        };
        Snapshot {
            now: "2026-01-01T00:05:00Z".parse().unwrap(),
            pools: vec![pool.into()],
            nodes: arcs(vec![
                n("w0", "rendered-worker-b", "rendered-worker-b", "Done"),
                n("w1", "rendered-worker-a", "rendered-worker-b", "Working"),
                NodeBuilder::new("w2")
                    .role("worker")
                    .current_config("rendered-worker-a")
                    .desired_config("rendered-worker-a")
                    .state("Degraded")
                    .reason("<script>alert(1)</script> content mismatch")
                    .build(),
                NodeBuilder::new("w3").role("worker").build(),
            ]),
            mcns: arcs(vec![
                mcn("w0", &[("Updated", "True", "")]),
                mcn(
                    "w1",
                    &[
                        ("Updated", "False", ""),
                        ("UpdatePrepared", "True", ""),
                        ("Drained", "Unknown", "Draining node"),
                    ],
                ),
            ]),
            ..Snapshot::default()
        }
    }

    #[test]
    fn pools_come_from_mco_status() {
        let f = build(&snap(), &[]);
        assert_eq!(f.pools.len(), 1);
        let p = &f.pools[0];
        assert_eq!(p.name, "worker");
        assert_eq!(p.target, "rendered-worker-b");
        assert_eq!(p.max_unavailable, 2);
        assert!(!p.paused);
        let line = status::pool_line(&status::build(&snap()).pools[0]);
        assert_eq!(p.eta, line[4]);
        assert_eq!((p.updated, p.total), (1, 4), "{p:?}");
    }

    #[test]
    fn nodes_get_status_phase_and_kind() {
        let f = build(&snap(), &[]);
        let w0 = &f.nodes["w0"];
        assert_eq!(
            (w0.kind, w0.phase.as_str()),
            (Kind::Updated, "Updated (done)")
        );
        let w1 = &f.nodes["w1"];
        assert_eq!(w1.kind, Kind::Updating);
        assert_eq!(w1.phase, "Drained (in progress)");
        assert_eq!(w1.message, "Draining node");
        assert_eq!(
            (w1.current.as_str(), w1.desired.as_str()),
            ("rendered-worker-a", "rendered-worker-b")
        );
        let w2 = &f.nodes["w2"];
        assert_eq!(w2.kind, Kind::Degraded);
        assert!(w2.message.contains("content mismatch"), "{w2:?}");
        assert_eq!(f.nodes["w3"].kind, Kind::Unknown);
        assert_eq!(f.nodes["w3"].phase, "waiting");
    }

    #[test]
    fn table_is_seed_002s() {
        let f = build(&snap(), &[]);
        assert_eq!(
            f.table.header,
            [
                "NAME",
                "UPDATED",
                "UPDATEPREPARED",
                "UPDATEEXECUTED",
                "UPDATEPOSTACTIONCOMPLETED",
                "UPDATECOMPLETED",
                "RESUMED"
            ]
        );
        assert_eq!(f.table.rows["w1"][..3], ["w1", "False", "True"]);
        assert_eq!(f.table.rows.len(), 2);
    }

    #[test]
    fn messages_are_cut_at_the_limit() {
        let mut s = snap();
        let long = "x".repeat(MAX_MESSAGE + 10);
        s.nodes[2] = NodeBuilder::new("w2")
            .role("worker")
            .state("Degraded")
            .reason(&long)
            .build()
            .into();
        let m = &build(&s, &[]).nodes["w2"].message;
        assert_eq!(m.chars().count(), MAX_MESSAGE);
        let exact = "y".repeat(MAX_MESSAGE);
        s.nodes[2] = NodeBuilder::new("w2")
            .role("worker")
            .state("Degraded")
            .reason(&exact)
            .build()
            .into();
        assert_eq!(build(&s, &[]).nodes["w2"].message, exact);
    }

    fn event(name: &str, secs: i64) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "w1"},
            "reason": "Drain", "message": "m", "type": "Normal",
            "lastTimestamp": jiff::Timestamp::from_second(secs).unwrap().to_string(),
        }))
        .unwrap()
    }

    #[test]
    fn events_are_newest_first_and_capped() {
        let events: Vec<Event> = (0..MAX_EVENTS as i64 + 5)
            .map(|i| event(&format!("e{i}"), 1_700_000_000 + i))
            .collect();
        let f = build(&snap(), &events);
        assert_eq!(f.events.len(), MAX_EVENTS);
        assert_eq!(f.events[0].key, format!("default/e{}", MAX_EVENTS + 4));
        assert_eq!(f.events[0].object, "Node/w1");
    }

    #[test]
    fn delta_carries_only_changes() {
        let s = snap();
        let a = build(&s, &[]);
        assert!(delta(&a, &a).is_empty());
        let full = Delta::full(&a);
        assert_eq!(full.nodes.len(), 4);
        assert_eq!(full.rows.len(), 2);
        let mut s2 = s.clone();
        s2.mcns[1] = mcn(
            "w1",
            &[
                ("Updated", "False", ""),
                ("UpdatePrepared", "True", ""),
                ("RebootedNode", "Unknown", "rebooting"),
            ],
        )
        .into();
        s2.nodes.remove(3);
        let b = build(&s2, &[]);
        let d = delta(&a, &b);
        assert_eq!(d.nodes.len(), 1);
        assert_eq!(d.nodes[0].phase, "RebootedNode (in progress)");
        assert_eq!(d.removed, ["w3"]);
        assert_eq!(d.pools.unwrap()[0].total, 3, "w3 left the pool");
        assert_eq!(
            d.rows.len(),
            0,
            "seed 002's columns do not show RebootedNode"
        );
        assert!(d.events.is_none());
        // Built after `a`, the unchanged nodes' views are `a`'s own; the changed one is new.
        let mut builder = Builder::default();
        let a = builder.build(&s, &[]);
        assert_eq!(
            (builder.sources.len(), builder.rows.len()),
            (s.nodes.len(), s.mcns.len())
        );
        let c = builder.build(&s2, &[]);
        assert_eq!(*c, b);
        assert!(
            !builder.sources.contains_key("w3") && !builder.rows.contains_key("w3"),
            "a node gone leaves the builder's caches"
        );
        assert_eq!(
            (builder.sources.len(), builder.rows.len()),
            (s2.nodes.len(), s2.mcns.len())
        );
        assert!(Arc::ptr_eq(&c.nodes["w0"], &a.nodes["w0"]));
        assert!(Arc::ptr_eq(&c.nodes["w2"], &a.nodes["w2"]));
        assert!(!Arc::ptr_eq(&c.nodes["w1"], &a.nodes["w1"]));
        let d2 = delta(&a, &c);
        assert_eq!((d2.nodes.len(), d2.removed), (1, vec!["w3".to_string()]));
        let mut s3 = s2.clone();
        s3.mcns.clear();
        builder.build(&s3, &[]);
        assert!(
            builder.rows.is_empty(),
            "a MachineConfigNode gone leaves its row"
        );
    }

    #[test]
    fn a_builder_builds_again_only_the_nodes_that_changed_or_run_with_the_clock() {
        let s = snap();
        let mut b = Builder::default();
        let f1 = b.build(&s, &[]);
        let mut s2 = s.clone();
        s2.now = "2026-01-01T00:06:00Z".parse().unwrap();
        let f2 = b.build(&s2, &[]);
        // w0 is done and w3 waits: their objects are the same, so their views stand.
        assert!(Arc::ptr_eq(&f1.nodes["w0"], &f2.nodes["w0"]));
        assert!(Arc::ptr_eq(&f1.nodes["w3"], &f2.nodes["w3"]));
        assert!(Arc::ptr_eq(&f1.table.rows["w0"], &f2.table.rows["w0"]));
        // w1 drains: its phase runs with the clock, a minute more than before.
        let drained = |f: &Fleet| f.nodes["w1"].timeline.last().unwrap().duration.clone();
        assert_eq!(
            (drained(&f1), drained(&f2)),
            ("5m00s".to_string(), "6m00s".to_string())
        );
        // A changed Node is built again, whatever the clock.
        let mut s3 = s2.clone();
        s3.nodes[0] = NodeBuilder::new("w0")
            .role("worker")
            .current_config("rendered-worker-b")
            .desired_config("rendered-worker-b")
            .state("Working")
            .build()
            .into();
        let f3 = b.build(&s3, &[]);
        assert_eq!(f3.nodes["w0"].kind, Kind::Updating);
        assert!(Arc::ptr_eq(&f2.nodes["w3"], &f3.nodes["w3"]));
        // Each view equals one built from nothing.
        assert_eq!(*f3, build(&s3, &[]));
        // A node gone is gone from the view and from what the builder keeps.
        s3.nodes.remove(3);
        assert!(!b.build(&s3, &[]).nodes.contains_key("w3"));
        assert!(!b.sources.contains_key("w3"));
    }

    /// A MachineConfigNode whose conditions changed at the given `HH:MM:SS` of 2026-01-01.
    fn mcn_at(node: &str, conds: &[(&str, &str, &str, &str)]) -> mco_api::MachineConfigNode {
        let mut m = mcn(node, &[]);
        let status = m.status.as_mut().unwrap();
        status.conditions = conds
            .iter()
            .map(|(t, s, at, msg)| {
                serde_json::from_value(serde_json::json!({"type": t, "status": s, "message": msg,
                    "reason": "r", "lastTransitionTime": format!("2026-01-01T{at}Z")}))
                .unwrap()
            })
            .collect();
        m
    }

    #[test]
    fn timeline_lists_entered_phases_in_upstream_order_with_durations() {
        let m = mcn_at(
            "w1",
            &[
                // Out of upstream order on purpose, and one not entered.
                ("Drained", "Unknown", "00:01:00", "Draining node"),
                ("Updated", "False", "00:00:00", ""),
                ("UpdateExecuted", "Unknown", "00:00:10", ""),
                ("Cordoned", "True", "00:00:20", ""),
                ("UpdateCompatible", "True", "00:00:10", ""),
                ("UpdatePrepared", "True", "00:00:00", ""),
            ],
        );
        let now = "2026-01-01T00:05:00Z".parse().unwrap();
        let t = timeline(&m, now);
        let got: Vec<(&str, &str, &str, &str)> = t
            .iter()
            .map(|s| {
                (
                    s.phase.as_str(),
                    s.state.as_str(),
                    s.started.as_str(),
                    s.duration.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("UpdatePrepared", "done", "00:00:00Z", "0s"),
                ("UpdateCompatible", "done", "00:00:00Z", "10s"),
                ("UpdateExecuted", "in progress", "00:00:10Z", "4m50s"),
                ("Cordoned", "done", "00:00:10Z", "10s"),
                ("Drained", "in progress", "00:01:00Z", "4m00s"),
            ]
        );
        assert_eq!(t[4].status, "Unknown");
        assert_eq!(t[0].status, "True");

        // Once the drain is done it is timed from the cordon to its own end.
        let m = mcn_at(
            "w1",
            &[
                ("Cordoned", "True", "00:00:20", ""),
                ("Drained", "True", "00:03:00", ""),
            ],
        );
        let t = timeline(&m, now);
        assert_eq!(
            (t[1].started.as_str(), t[1].duration.as_str()),
            ("00:00:20Z", "2m40s")
        );
        // A phase that started in the future (clock skew) takes no time rather than a negative.
        let m = mcn_at("w1", &[("Drained", "Unknown", "00:09:00", "")]);
        assert_eq!(timeline(&m, now)[0].duration, "0s");
    }

    #[test]
    fn timeline_travels_with_the_node() {
        let mut s = snap();
        s.mcns[1] = mcn_at(
            "w1",
            &[
                ("UpdatePrepared", "True", "00:00:00", ""),
                ("Drained", "Unknown", "00:02:00", "Draining node"),
            ],
        )
        .into();
        let f = build(&s, &[]);
        let phases: Vec<&str> = f.nodes["w1"]
            .timeline
            .iter()
            .map(|p| p.phase.as_str())
            .collect();
        assert_eq!(phases, ["UpdatePrepared", "Drained"]);
        assert_eq!(f.nodes["w1"].timeline[1].duration, "3m00s");
        assert!(f.nodes["w3"].timeline.is_empty(), "w3 has no MCN");
        // Time passing is a change the page is sent.
        s.now = "2026-01-01T00:06:00Z".parse().unwrap();
        let d = delta(&f, &build(&s, &[]));
        assert!(d.nodes.iter().any(|n| n.name == "w1"), "{d:?}");
    }

    fn pdb(ns: &str, name: &str, allowed: i32, healthy: (i32, i32)) -> PodDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": healthy.0,
                       "desiredHealthy": healthy.1, "expectedPods": healthy.0},
        }))
        .unwrap()
    }

    fn blocked_message(pods: &[(&str, &str)]) -> String {
        let blockers: Vec<String> = pods
            .iter()
            .map(|(pod, pdb)| {
                format!(
                    "pod {pod} (PodDisruptionBudget {pdb}: Cannot evict pod as it would violate the pod's disruption budget.)"
                )
            })
            .collect();
        format!(
            "Draining node. The drain will not be complete until desired drainer drain-rendered-worker-b matches current drainer uncordon-rendered-worker-a. Blocked by: {}",
            blockers.join("; ")
        )
    }

    #[test]
    fn a_blocked_drain_names_pods_budgets_and_doctors_cause() {
        let mut s = snap();
        s.mcns[1] = mcn_at(
            "w1",
            &[
                ("Cordoned", "True", "00:00:00", ""),
                (
                    "Drained",
                    "Unknown",
                    "00:01:00",
                    &blocked_message(&[
                        ("shop/web-1", "shop/web-pdb"),
                        ("shop/db-0", "shop/db-pdb"),
                    ]),
                ),
            ],
        )
        .into();
        s.pdbs = vec![pdb("shop", "web-pdb", 0, (1, 1)).into()];
        let f = build(&s, &[]);
        let d = f.nodes["w1"].drain.as_ref().expect("w1's drain is blocked");
        assert_eq!(d.blocked_for, "4m00s");
        let pods: Vec<(&str, &[String])> = d
            .pods
            .iter()
            .map(|b| (b.pod.as_str(), b.pdbs.as_slice()))
            .collect();
        assert_eq!(
            pods,
            [
                ("shop/db-0", &["shop/db-pdb".to_string()][..]),
                ("shop/web-1", &["shop/web-pdb".to_string()][..]),
            ]
        );
        assert_eq!(d.more_pods, 0);
        let budgets: Vec<(&str, &str)> = d
            .budgets
            .iter()
            .map(|b| (b.pdb.as_str(), b.budget.as_str()))
            .collect();
        assert_eq!(
            budgets,
            [
                ("shop/db-pdb", "not found"),
                (
                    "shop/web-pdb",
                    "disruptionsAllowed 0, healthy 1/1, minAvailable 1"
                ),
            ]
        );
        let finding = f.nodes["w1"]
            .findings
            .iter()
            .find(|x| x.title == "drain blocked by a PodDisruptionBudget")
            .expect("doctor's finding for the drain");
        assert!(
            finding
                .cause
                .contains("PodDisruptionBudget shop/web-pdb (minAvailable 1) allows 0"),
            "{finding:?}"
        );
        assert!(
            finding
                .fixes
                .iter()
                .any(|x| x.command == "kubectl get pdb -n shop web-pdb"),
            "{finding:?}"
        );
        // A node updating without trouble gets neither.
        assert!(f.nodes["w0"].drain.is_none() && f.nodes["w0"].findings.is_empty());
        // Not blocked, not degraded: no doctor run, even when an update is under way.
        let plain = build(&snap(), &[]);
        assert!(plain.nodes["w1"].findings.is_empty() && plain.nodes["w1"].drain.is_none());
    }

    #[test]
    fn blocked_pods_are_capped_and_counted() {
        let pods: Vec<(String, String)> = (0..MAX_BLOCKED_PODS + 3)
            .map(|i| (format!("ns/p{i:03}"), "ns/pdb".to_string()))
            .collect();
        let refs = |n: usize| -> Vec<(&str, &str)> {
            pods[..n]
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect()
        };
        for (n, shown, more) in [
            (MAX_BLOCKED_PODS, MAX_BLOCKED_PODS, 0),
            (MAX_BLOCKED_PODS + 3, MAX_BLOCKED_PODS, 3),
        ] {
            let mut s = snap();
            s.mcns[1] = mcn_at(
                "w1",
                &[("Drained", "Unknown", "00:01:00", &blocked_message(&refs(n)))],
            )
            .into();
            let d = build(&s, &[]).nodes["w1"].drain.clone().unwrap();
            assert_eq!((d.pods.len(), d.more_pods), (shown, more));
            assert_eq!(d.budgets.len(), 1);
        }
    }

    #[test]
    fn a_degraded_node_gets_doctors_cause_and_fix() {
        let mut s = snap();
        s.nodes[2] = NodeBuilder::new("w2")
            .role("worker")
            .current_config("rendered-worker-a")
            .desired_config("rendered-worker-a")
            .state("Degraded")
            .reason(r#"unexpected on-disk state validating against rendered-worker-a: content mismatch for file "/etc/motd""#)
            .build().into();
        let f = build(&s, &[]);
        let w2 = &f.nodes["w2"];
        assert_eq!(w2.findings.len(), 1, "{w2:?}");
        let x = &w2.findings[0];
        assert_eq!(x.title, "config drift: /etc/motd");
        assert!(
            x.cause.contains("/etc/motd was changed on the node"),
            "{x:?}"
        );
        assert!(
            x.fixes.iter().any(|fix| fix
                .command
                .starts_with("kubectl get machineconfig rendered-worker-a")),
            "{x:?}"
        );
        assert!(w2.drain.is_none());
    }

    #[test]
    fn finding_texts_are_cut_at_the_limit() {
        for (len, want) in [
            (MAX_FINDING_TEXT, MAX_FINDING_TEXT),
            (MAX_FINDING_TEXT + 10, MAX_FINDING_TEXT),
        ] {
            let mut s = snap();
            s.nodes[2] = NodeBuilder::new("w2")
                .role("worker")
                .state("Degraded")
                .reason(&"z".repeat(len))
                .build()
                .into();
            let f = build(&s, &[]);
            let x = &f.nodes["w2"].findings[0];
            assert_eq!(x.title, "degraded");
            assert_eq!(x.cause.chars().count(), want);
        }
    }

    /// `snap()` with its pool labelled `tier: a` and a policy `canary-first` selecting it.
    fn governed(spec: serde_json::Value, status: serde_json::Value) -> Snapshot {
        let mut s = snap();
        Arc::make_mut(&mut s.pools[0]).metadata.labels =
            Some([("tier".to_string(), "a".to_string())].into());
        let mut spec = spec;
        spec["poolSelector"] = serde_json::json!({"matchLabels": {"tier": "a"}});
        s.policies.push(Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "rollouts.mco.dev/v1alpha1", "kind": "RolloutPolicy",
                "metadata": {"name": "canary-first"},
                "spec": spec, "status": status,
            }))
            .unwrap(),
        ));
        s
    }

    #[test]
    fn a_governed_pool_shows_its_policy_phase_canary_and_gates() {
        let s = governed(
            serde_json::json!({
                "canary": {"nodes": 1},
                "gates": {"nodeReady": {}, "podsReady": {"timeout": "5m"}, "pdbs": true,
                          "http": [{"url": "https://svc.example/healthz"}],
                          "nodeChecks": {"timeout": "90s"}},
            }),
            serde_json::json!({"pools": [{"pool": "worker", "target": "rendered-worker-b",
                "phase": "Canary", "canaryNodes": ["w1"]}]}),
        );
        let p = &build(&s, &[]).pools[0];
        let r = p.rollout.as_ref().expect("the policy governs worker");
        assert_eq!(
            (r.policy.as_str(), r.phase.as_str(), r.target.as_str()),
            ("canary-first", "Canary", "rendered-worker-b")
        );
        assert_eq!(r.canary_nodes, ["w1"]);
        assert_eq!(r.more_canary, 0);
        assert!(r.halt.is_none() && !p.halted);
        let gates: Vec<(&str, &str)> = r
            .gates
            .iter()
            .map(|g| (g.name.as_str(), g.detail.as_str()))
            .collect();
        assert_eq!(
            gates,
            [
                ("nodeReady", "within 10m00s"),
                ("podsReady", "within 5m00s"),
                ("pdbs", "budgets allow disruptions"),
                (
                    "http",
                    "GET https://svc.example/healthz expects 200 within 10s"
                ),
                ("nodeChecks", "each check within 1m30s"),
            ]
        );
        assert!(r.window.is_none() && r.next_window.is_none() && r.pinned.is_none());
    }

    #[test]
    fn a_halted_pool_names_the_gate_node_and_message() {
        let mut s = governed(
            serde_json::json!({"gates": {"nodeChecks": {}}}),
            serde_json::json!({"pools": [{"pool": "worker", "phase": "Halted",
                "halt": {"node": "w1", "gate": "nodeChecks",
                         "message": "check 10-fail failed: disk <full>",
                         "time": "2026-01-01T00:04:00Z"}}]}),
        );
        let p = &build(&s, &[]).pools[0];
        assert!(p.halted, "halted is a pool flag");
        let r = p.rollout.as_ref().unwrap();
        assert_eq!(r.phase, "Halted");
        let h = r.halt.as_ref().unwrap();
        assert_eq!(
            (
                h.gate.as_str(),
                h.node.as_str(),
                h.message.as_str(),
                h.time.as_str()
            ),
            (
                "nodeChecks",
                "w1",
                "check 10-fail failed: disk <full>",
                "2026-01-01T00:04:00Z"
            )
        );
        // A halt message is cut at its limit; one at the limit is kept whole.
        for (len, want) in [
            (MAX_HALT_TEXT, MAX_HALT_TEXT),
            (MAX_HALT_TEXT + 1, MAX_HALT_TEXT),
        ] {
            Arc::make_mut(&mut s.policies[0])
                .status
                .as_mut()
                .unwrap()
                .pools[0]
                .halt
                .as_mut()
                .unwrap()
                .message = "o".repeat(len);
            let f = build(&s, &[]);
            let m = &f.pools[0]
                .rollout
                .as_ref()
                .unwrap()
                .halt
                .as_ref()
                .unwrap()
                .message;
            assert_eq!(m.chars().count(), want);
        }
    }

    #[test]
    fn the_pools_halted_and_pinned_conditions_come_from_mco_status() {
        let mut s = governed(serde_json::json!({}), serde_json::json!({}));
        let cond = |t: &str, m: &str| {
            serde_json::from_value(serde_json::json!({"type": t, "status": "True", "message": m}))
                .unwrap()
        };
        Arc::make_mut(&mut s.pools[0])
            .status
            .get_or_insert_default()
            .conditions = vec![
            cond("RolloutHalted", "halted by mco rollout halt"),
            cond("RollbackPinned", "pinned to rendered-worker-a"),
        ];
        let p = &build(&s, &[]).pools[0];
        let r = p.rollout.as_ref().unwrap();
        assert_eq!(r.phase, PENDING, "no status for the pool yet");
        assert!(p.halted);
        assert_eq!(
            r.halt
                .as_ref()
                .map(|h| (h.gate.as_str(), h.message.as_str())),
            Some(("", "halted by mco rollout halt"))
        );
        assert_eq!(r.pinned.as_deref(), Some("pinned to rendered-worker-a"));
        assert!(r.gates.is_empty());
    }

    #[test]
    fn a_window_is_mco_status_words_and_the_next_one_the_controllers() {
        let s = governed(
            serde_json::json!({"windows": [{"schedule": "0 2 * * *", "duration": "1h"}]}),
            serde_json::json!({"pools": [{"pool": "worker", "phase": "WaitingForWindow",
                "nextWindow": "2026-01-01T02:00:00Z"}]}),
        );
        let p = &build(&s, &[]).pools[0];
        let r = p.rollout.as_ref().unwrap();
        let words = status::build(&s).pools[0].window.clone();
        assert_eq!(words.as_deref(), Some("next window 2026-01-01 02:00Z"));
        assert_eq!(r.window, words);
        assert_eq!(r.next_window.as_deref(), Some("2026-01-01T02:00:00Z"));
        assert_eq!(r.phase, "WaitingForWindow");
        assert!(!p.halted);
    }

    #[test]
    fn canary_nodes_are_capped_and_counted() {
        for (n, shown, more) in [
            (MAX_CANARY_NODES, MAX_CANARY_NODES, 0),
            (MAX_CANARY_NODES + 2, MAX_CANARY_NODES, 2),
        ] {
            let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let s = governed(
                serde_json::json!({"canary": {"nodes": 1}}),
                serde_json::json!({"pools": [{"pool": "worker", "phase": "Canary",
                    "canaryNodes": names}]}),
            );
            let r = build(&s, &[]).pools[0].rollout.clone().unwrap();
            assert_eq!((r.canary_nodes.len(), r.more_canary), (shown, more));
        }
    }

    #[test]
    fn a_pool_no_policy_governs_has_no_rollout() {
        assert!(build(&snap(), &[]).pools[0].rollout.is_none());
        // A policy selecting other pools governs nothing here.
        let mut s = governed(serde_json::json!({}), serde_json::json!({}));
        Arc::make_mut(&mut s.pools[0]).metadata.labels = None;
        assert!(build(&s, &[]).pools[0].rollout.is_none());
        // Two policies selecting the pool conflict: neither governs it.
        let mut s = governed(serde_json::json!({}), serde_json::json!({}));
        let mut other = (*s.policies[0]).clone();
        other.metadata.name = Some("other".into());
        s.policies.push(other.into());
        assert!(build(&s, &[]).pools[0].rollout.is_none());
    }
}
