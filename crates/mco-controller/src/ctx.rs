//! What every controller shares: the caches, this controller's own writes laid over them, the
//! planner's memory of the nodes, and the helpers that read and write through them.
//!
//! The controllers share one overlay of the nodes, pools and MachineConfigNodes they wrote
//! ([`Ctx::fresh_nodes`], [`Ctx::known_pool`], [`Ctx::known_mcn`]): each part reads what the
//! others wrote, so its write does not start from a lagging cache and then meet a conflict and
//! a read. A failed reconcile is retried after [`error_backoff`]: `error_requeue` doubled for
//! each failure in a row before the last, up to five minutes, counted per controller and
//! object ([`Failures`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource};
use mco_api::{ControllerConfig, MachineConfig, MachineConfigNode, MachineConfigPool};
use mco_rollout::plan::{self, EventKind, PlanEvent};

use crate::metrics::Metrics;
use crate::nodeview::{NodeDigests, NodeView};
use crate::written::{caught_up, known, newer, remember};
use crate::{Config, Error};

/// Shared state of every reconciler.
pub struct Ctx {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub nodes: Store<Node>,
    pub pools: Store<MachineConfigPool>,
    pub mcs: Store<MachineConfig>,
    pub mcns: Store<MachineConfigNode>,
    /// MachineConfigNodes at the version and schema the cluster serves.
    pub mcn_api: mco_api::mcn::client::McnApi,
    pub ccs: Store<ControllerConfig>,
    /// Rollout policies; empty where the CRD is not installed.
    pub policies: Store<mco_api::RolloutPolicy>,
    /// What this controller last wrote to each policy's status; see [`crate::policies`].
    pub policy_writes: crate::policies::PolicyWrites,
    /// Per node, the target it was first seen Done on without a node-check result for it, and
    /// when; see [`crate::policies::note_missing_checks`].
    pub missing_checks: crate::policies::MissingChecks,
    /// Per node, the target it was first seen Done on, and when; see
    /// [`crate::policies::note_returns`].
    pub first_done: crate::policies::MissingChecks,
    /// Nodes as this controller last wrote them, until the node cache catches up; see
    /// [`Ctx::fresh_nodes`].
    pub written_nodes: Mutex<HashMap<String, Arc<Node>>>,
    /// Pools as this controller last wrote their status, until the pool cache catches up; see
    /// [`Ctx::known_pool`].
    pub written_pools: Mutex<HashMap<String, Arc<MachineConfigPool>>>,
    /// MachineConfigNodes as this controller last wrote them, until the MCN cache catches up;
    /// see [`Ctx::known_mcn`].
    pub written_mcns: Mutex<HashMap<String, Arc<MachineConfigNode>>>,
    /// What the planner read of each node, kept while the node is unchanged; see
    /// [`Ctx::pass_nodes`].
    pub digests: Mutex<NodeDigests>,
    /// Pool membership as last computed; see [`Ctx::membership`].
    pub membership: MembershipMemo,
    /// Nodes whose pool conflict was already reported, so the warning is not repeated.
    pub warned_conflicts: Mutex<BTreeSet<String>>,
    /// When each node's current drain started; drain state lives in memory, as upstream's.
    pub drains: Mutex<HashMap<String, DrainProgress>>,
    /// When each pool's latest pass starts; see [`PassGate`].
    pub passes: PassGate,
    /// Failed reconciles in a row, per object; see [`error_backoff`].
    pub failures: Failures,
    /// The template controller's last output; see [`crate::templates`].
    pub templates: crate::templates::Templates,
    /// The PinnedImageSets, and what the pools' status says of them; see [`crate::pinned`].
    pub pinned: Arc<crate::pinned::Pinned>,
    /// The MachineOSConfigs and MachineOSBuilds; see [`crate::image_mode`].
    pub image_mode: crate::image_mode::ImageMode,
}

/// Longest wait before a failed reconcile is retried. The resync runs every object sooner.
pub const ERROR_REQUEUE_MAX: Duration = Duration::from_secs(300);

/// How long to wait before retrying an object whose last `failures` reconciles in a row failed:
/// `base`, doubled for each failure before the last, up to [`ERROR_REQUEUE_MAX`] (never below
/// `base`). One object that keeps failing (a pool whose status keeps conflicting, an API server
/// that refuses one node) then stops costing a reconcile every `base`, and the others are not
/// held back.
pub fn error_backoff(base: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    base.saturating_mul(1 << doublings)
        .min(ERROR_REQUEUE_MAX.max(base))
}

/// Failed reconciles in a row, by controller and object name; an object's count is dropped at
/// its first success.
#[derive(Default)]
pub struct Failures(Mutex<HashMap<(&'static str, String), u32>>);

impl Failures {
    /// Counts a failure of `name` in `controller`; returns how many in a row.
    pub fn failed(&self, controller: &'static str, name: &str) -> u32 {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry((controller, name.to_string())).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// `name` reconciled in `controller`: its next failure waits `base` again.
    pub fn succeeded(&self, controller: &'static str, name: &str) {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !counts.is_empty() {
            counts.remove(&(controller, name.to_string()));
        }
    }
}

/// What a memoised [`plan::Membership`] was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MembershipKey {
    pools: u64,
    /// A node come or gone moves it too, so the node count is not part of the key.
    labels_epoch: u64,
}

/// Pool membership, computed again only when a pool's selector or a node's labels changed, or
/// a node came or went. In a rollout nodes change ten times each and their labels never:
/// assigning every node to a pool on every pass was half of the pass's planning.
#[derive(Default)]
pub struct MembershipMemo {
    /// Moves with every node change that can move a node between pools; changed and read only
    /// under the digests' lock ([`Ctx::pass_nodes`]).
    pub(crate) labels_epoch: std::sync::atomic::AtomicU64,
    memo: Mutex<Option<(MembershipKey, Arc<plan::Membership>)>>,
}

impl MembershipMemo {
    /// The membership of the nodes `nodes` gives, whose digests left the label epoch at
    /// `labels_epoch`; `nodes` is called only when it is computed again.
    pub fn get<N: std::borrow::Borrow<Node>>(
        &self,
        labels_epoch: u64,
        nodes: impl FnOnce() -> Vec<N>,
        pools: &[Arc<MachineConfigPool>],
    ) -> Arc<plan::Membership> {
        let key = MembershipKey {
            pools: plan::selectors_fingerprint(pools),
            labels_epoch,
        };
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, m)) = memo.as_ref()
            && *k == key
        {
            return Arc::clone(m);
        }
        let membership = Arc::new(plan::assign_pools(&nodes(), pools));
        *memo = Some((key, Arc::clone(&membership)));
        membership
    }
}

/// Spaces the passes over one pool by what the last one cost: the next starts no sooner than
/// [`Config::pass_spacing`] times the last one's planning time after it started.
///
/// A pass reads every member of its pool, and a rollout makes about ten node events per node.
/// Where events come too sparsely to fold by themselves, one pass per event took a fifth of the
/// whole process's CPU in a thousand-node rollout, and held a runtime thread for milliseconds
/// each time. A pass that waits for its turn keeps the controller runtime from starting another
/// for that pool, so the events that arrive meanwhile fold into the one pass that follows. At a
/// handful of nodes the wait is microseconds.
#[derive(Default)]
pub struct PassGate {
    passes: Mutex<HashMap<String, (Instant, Duration)>>,
}

impl PassGate {
    /// Books the next pass over `pool` and returns when it may start.
    pub fn book(&self, pool: &str, now: Instant, spacing: u32) -> Instant {
        let mut passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        let at = passes
            .get(pool)
            .map_or(now, |(last, busy)| (*last + *busy * spacing).max(now));
        passes.insert(pool.to_string(), (at, Duration::ZERO));
        at
    }

    /// Records how long the pass booked last over `pool` spent planning.
    pub fn planned(&self, pool: &str, busy: Duration) {
        let mut passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pass) = passes.get_mut(pool) {
            pass.1 = busy;
        }
    }
}

/// In-memory state of one node's drain, as upstream keeps it.
#[derive(Debug, Clone)]
pub struct DrainProgress {
    pub desired: String,
    pub started: Instant,
    pub threshold_reported: bool,
    pub failed_reported: bool,
    /// What blocked the last attempt, for the condition message.
    pub blockers: String,
}

impl Ctx {
    /// Every node, with this controller's own recent writes laid over a cache that has not seen
    /// them yet. Without this, a reconcile that runs before the watch delivers its own
    /// `desiredConfig` write would not count that node as busy and could exceed the budget.
    /// Shared, not copied: each pool's reconcile takes this list, and copying every Node for
    /// every pool was most of the controller's memory at thousands of nodes.
    pub fn fresh_nodes(&self) -> Vec<Arc<Node>> {
        let mut written = self.written_nodes.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for cached in self.nodes.state() {
            let name = cached.metadata.name.as_deref().unwrap_or_default();
            match written.get(name) {
                Some(w) => {
                    if caught_up(&cached, w) {
                        written.remove(name);
                        out.push(cached);
                    } else {
                        out.push(Arc::clone(w));
                    }
                }
                None => out.push(cached),
            }
        }
        out
    }

    /// Every node as this controller last knows it, digested for the planner; where the
    /// members of `pool` stand among them (see [`NodeView::pick`]); and where
    /// every node belongs (see [`MembershipMemo`]). Only nodes that changed since the last pass
    /// are read again.
    pub fn pass_nodes(
        &self,
        pool: &str,
        pools: &[Arc<MachineConfigPool>],
    ) -> (NodeView, Arc<[usize]>, Arc<plan::Membership>) {
        let mut digests = self.digests.lock().unwrap_or_else(|e| e.into_inner());
        let view = {
            let mut written = self.written_nodes.lock().unwrap_or_else(|e| e.into_inner());
            digests.read(&self.nodes, &mut written, &self.membership.labels_epoch)
        };
        let membership = self
            .membership
            .get(view.epoch, || view.cached_nodes(), pools);
        let members = digests.members(pool, &view, &membership);
        (view, members, membership)
    }

    /// `digest` read again from its node as this controller last wrote it, or as the cache now
    /// holds it once the cache has caught up with that write.
    pub fn rewritten(&self, digest: &Arc<plan::Digest>) -> Arc<plan::Digest> {
        use plan::Member;
        let name = digest.name();
        let node = self
            .written_node(name)
            .or_else(|| self.nodes.get(&ObjectRef::new(name)));
        match node {
            Some(n) if !digest.reads(&n) => Arc::new(plan::Digest::new(n)),
            _ => Arc::clone(digest),
        }
    }

    /// `node` as a watch delivered it, or this controller's own later write of it while the
    /// watch has not caught up: a reconcile woken by an older event then acts on what it wrote
    /// (the drain controller would otherwise drain again a node it has just answered).
    pub fn known_node(&self, node: Arc<Node>) -> Arc<Node> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let written = self.written_node(name);
        newer(Some(Arc::clone(&node)), written).unwrap_or(node)
    }

    /// This controller's own last write of the node `name`, while the cache lags it.
    fn written_node(&self, name: &str) -> Option<Arc<Node>> {
        self.written_nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Remember a node as returned by a write.
    pub fn wrote_node(&self, node: Node) {
        remember(&self.written_nodes, node);
    }

    /// The newest copy of a pool this controller holds: the cache, or its own last status write
    /// while the cache lags it. Pool status has no other writer, so a status computed against
    /// this copy is computed against the truth; a stale spec or resourceVersion is refused by the
    /// server's optimistic concurrency.
    pub fn known_pool(&self, name: &str) -> Option<Arc<MachineConfigPool>> {
        known(
            self.pools.get(&ObjectRef::new(name)),
            &self.written_pools,
            name,
        )
    }

    /// Remember a pool as returned by a status write.
    pub fn wrote_pool(&self, pool: &MachineConfigPool) {
        remember(&self.written_pools, pool.clone());
    }

    /// The newest copy of a node's MCN this controller holds: the cache, or its own last write
    /// while the cache lags it. Three parts write MCNs (the rollout sets the spec with the
    /// node's desiredConfig, this MCN controller, the drain conditions); each reads what the
    /// others wrote, so a write does not meet a stale cache and then a read. A copy that the
    /// daemon has moved past is refused by the server's optimistic concurrency.
    pub fn known_mcn(&self, name: &str) -> Option<Arc<MachineConfigNode>> {
        known(
            self.mcns.get(&ObjectRef::new(name)),
            &self.written_mcns,
            name,
        )
    }

    /// Remember an MCN as returned by a write.
    pub fn wrote_mcn(&self, mcn: MachineConfigNode) {
        remember(&self.written_mcns, mcn);
    }

    /// Publish an event; failures are logged, never fatal (events are best effort). One about
    /// a cluster-scoped object is recorded in mco's namespace ([`in_namespace`]).
    pub async fn publish(
        &self,
        reference: &ObjectReference,
        kind: EventKind,
        reason: &str,
        message: &str,
    ) {
        let ev = Event {
            type_: match kind {
                EventKind::Normal => EventType::Normal,
                EventKind::Warning => EventType::Warning,
            },
            reason: reason.into(),
            note: Some(message.into()),
            action: reason.into(),
            secondary: None,
        };
        match kind {
            EventKind::Normal => tracing::info!(object = ?reference.name, reason, message),
            EventKind::Warning => tracing::warn!(object = ?reference.name, reason, message),
        }
        let reference = in_namespace(reference, &self.config.namespace);
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::debug!(error = %e, reason, "publishing event");
        }
    }

    /// Publish a planner event about a pool or a node.
    pub async fn publish_plan_event(&self, ev: &PlanEvent) {
        let reference = match &ev.subject {
            plan::EventSubject::Pool(name) => self
                .pools
                .get(&ObjectRef::new(name))
                .map(|p| p.object_ref(&()))
                .unwrap_or_else(|| ObjectReference {
                    api_version: Some("machineconfiguration.openshift.io/v1".into()),
                    kind: Some("MachineConfigPool".into()),
                    name: Some(name.clone()),
                    ..Default::default()
                }),
            plan::EventSubject::Node(name) => node_ref(self, name),
        };
        self.publish(&reference, ev.kind, ev.reason, &ev.message)
            .await;
    }
}

/// `reference` as events record it: a cluster-scoped object's (no namespace) names `namespace`,
/// so that its Event is created there rather than in `default`, as upstream's
/// `ensureEventNamespace` does; a namespaced object's is kept, and its Event stays in its
/// namespace.
pub fn in_namespace(reference: &ObjectReference, namespace: &str) -> ObjectReference {
    let mut out = reference.clone();
    if out.namespace.as_deref().is_none_or(str::is_empty) {
        out.namespace = Some(namespace.to_string());
    }
    out
}

/// A reference to a node, with its uid when the cache has it.
pub fn node_ref(ctx: &Ctx, name: &str) -> ObjectReference {
    ctx.nodes
        .get(&ObjectRef::new(name))
        .map(|n| n.object_ref(&()))
        .unwrap_or_else(|| ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.into()),
            ..Default::default()
        })
}

/// Read-modify-write of a pool's status with optimistic concurrency: `f` sees the pool and
/// returns the new status, or `None` for no change. The first attempt starts from the pool this
/// controller already holds ([`Ctx::known_pool`]): most reconciles change nothing, and reading
/// the pool for each one was several GETs per node update. Conflicts are retried on a fresh read.
pub async fn update_pool_status(
    ctx: &Ctx,
    name: &str,
    f: impl Fn(&MachineConfigPool) -> Option<mco_api::MachineConfigPoolStatus>,
) -> Result<Option<MachineConfigPool>, Error> {
    let api: Api<MachineConfigPool> = Api::all(ctx.client.clone());
    let mut held = ctx.known_pool(name);
    for _ in 0..5 {
        let pool = match held.take() {
            Some(p) => (*p).clone(),
            None => match api.get_opt(name).await? {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        let Some(status) = f(&pool) else {
            return Ok(None);
        };
        if pool.status.as_ref() == Some(&status) {
            return Ok(None);
        }
        // Only the fields mco owns, under the resourceVersion they were computed from: other
        // writers' fields (certExpirys, upstream's osImageStream) are never touched.
        let computed = serde_json::to_value(&status)?;
        let owned: serde_json::Map<String, serde_json::Value> =
            mco_api::MachineConfigPoolStatus::OWNED
                .iter()
                .map(|k| {
                    let v = computed.get(*k).cloned().unwrap_or(serde_json::Value::Null);
                    ((*k).to_owned(), v)
                })
                .collect();
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": pool.metadata.resource_version},
            "status": owned,
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(p) => {
                ctx.wrote_pool(&p);
                return Ok(Some(p));
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Stale(format!(
        "pool {name}: status kept conflicting"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_about_cluster_scoped_objects_are_recorded_in_mcos_namespace() {
        let node = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some("worker-0".into()),
            uid: Some("u".into()),
            ..Default::default()
        };
        let moved = in_namespace(&node, "mco-system");
        assert_eq!(moved.namespace.as_deref(), Some("mco-system"));
        assert_eq!(
            ObjectReference {
                namespace: None,
                ..moved
            },
            node,
            "nothing else changes"
        );
        let empty = ObjectReference {
            namespace: Some(String::new()),
            ..node
        };
        assert_eq!(
            in_namespace(&empty, "mco-system").namespace.as_deref(),
            Some("mco-system")
        );
        let secret = ObjectReference {
            kind: Some("Secret".into()),
            name: Some("mco-server-tls".into()),
            namespace: Some("openshift-machine-config-operator".into()),
            ..Default::default()
        };
        assert_eq!(in_namespace(&secret, "mco-system"), secret);
    }

    #[test]
    fn failed_reconciles_back_off_per_object_and_reset_on_success() {
        let s = Duration::from_secs;
        let waits: Vec<Duration> = (1..=10).map(|n| error_backoff(s(2), n)).collect();
        assert_eq!(
            waits,
            [
                s(2),
                s(4),
                s(8),
                s(16),
                s(32),
                s(64),
                s(128),
                s(256),
                s(300),
                s(300)
            ]
        );
        // A base above the cap is kept; a huge count does not overflow.
        assert_eq!(error_backoff(s(600), 3), s(600));
        assert_eq!(error_backoff(s(2), u32::MAX), s(300));

        let f = Failures::default();
        assert_eq!(f.failed("render", "worker"), 1);
        assert_eq!(f.failed("render", "worker"), 2);
        // Another object, or the same name in another controller, counts apart.
        assert_eq!(f.failed("node", "worker"), 1);
        assert_eq!(f.failed("render", "master"), 1);
        f.succeeded("render", "worker");
        assert_eq!(f.failed("render", "worker"), 1);
        assert_eq!(f.failed("node", "worker"), 2);
    }

    #[test]
    fn a_pass_waits_for_its_turn_by_what_the_last_one_cost() {
        let gate = PassGate::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // The first pass starts at once.
        assert_eq!(gate.book("worker", t0, 10), t0);
        // It planned for 5 ms: the next starts 50 ms after it, however soon it is asked for.
        gate.planned("worker", Duration::from_millis(5));
        assert_eq!(gate.book("worker", ms(1), 10), ms(50));
        // A pass that has not reported yet holds nobody back.
        assert_eq!(gate.book("worker", ms(60), 10), ms(60));
        // One asked for after its turn starts at once.
        gate.planned("worker", Duration::from_millis(2));
        assert_eq!(gate.book("worker", ms(200), 10), ms(200));
        // Pools do not wait for each other.
        gate.planned("worker", Duration::from_millis(30));
        assert_eq!(gate.book("master", ms(201), 10), ms(201));
        assert_eq!(gate.book("worker", ms(201), 10), ms(500));
    }
}
