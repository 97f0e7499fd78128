//! Workloads, so that drains are real: a DaemonSet pod on every node (drains skip it), and a
//! `web` Deployment of 3 replicas behind a PodDisruptionBudget of `minAvailable: 2` (drains
//! must evict them one at a time and wait for replacements).
//!
//! There is no scheduler or kubelet in the embedded cluster, so [`run`] plays both for these
//! objects: it keeps one DaemonSet pod per node, keeps each web ReplicaSet's pods on
//! schedulable nodes, and marks new pods Running and Ready after a short start-up delay. It
//! also plays kube-controller-manager's deployment, replicaset and daemonset controllers
//! ([`replicaset_status`], [`deployment_status`], [`daemonset_status`], and
//! [`crate::web_rollout`]): the web pods follow the Deployment's `spec.replicas` (at most
//! [`MAX_WEB_PODS`]), and a changed pod template rolls out through a ReplicaSet of its own,
//! so `kubectl scale`, `kubectl get`, `kubectl rollout status|history|undo` work, and drains
//! show as a dip and a recovery. The PDB stays `minAvailable: 2`, so with fewer than 2
//! replicas a drain waits on it, as on a real cluster.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{FutureExt, StreamExt, future, stream};
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetStatus, Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet,
    ReplicaSetStatus,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::error::Result;
use crate::objects::{self, ensure};
use crate::web_rollout::{self, RsCount};

/// Namespace of the DaemonSet.
pub const DS_NAMESPACE: &str = "kube-system";
/// The DaemonSet.
pub const DS_NAME: &str = "node-agent";
/// Namespace of the Deployment and its PDB.
pub const WEB_NAMESPACE: &str = "default";
/// The Deployment.
pub const WEB_NAME: &str = "web";
/// Its replicas as created (`kubectl scale` changes them).
pub const WEB_REPLICAS: usize = 3;
/// Its first ReplicaSet, created with it (a fixed name; later templates get
/// [`web_rollout::template_hash`]'s).
pub const WEB_RS: &str = "web-5d8f7c9b6";
/// Its PDB's `minAvailable`.
pub const WEB_MIN_AVAILABLE: i32 = 2;
/// The most web pods the simulation runs, whatever the Deployment asks: each is a pod object
/// the API server stores and a pass lists, so an unbounded `kubectl scale` could exhaust the
/// machine. Beyond it a warning is logged and the count stays at the limit.
pub const MAX_WEB_PODS: usize = 1000;

/// How many web pods run for a Deployment of `replicas`: none below zero, at most
/// [`MAX_WEB_PODS`].
pub fn web_target(replicas: i32) -> usize {
    usize::try_from(replicas).unwrap_or(0).min(MAX_WEB_PODS)
}

/// Writes (creates, deletes, status patches) a pass keeps in flight: one at a time cannot keep
/// up with a thousand nodes joining.
const IN_FLIGHT: usize = 32;

/// The longest pause a slow pass adds after itself: it gives the API server room on a large
/// fleet without letting pods wait minutes for their node's pass.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Timing of the simulated kubelet and scheduler.
#[derive(Debug, Clone, Copy)]
pub struct WorkloadTiming {
    /// Between two reconciles.
    pub tick: Duration,
    /// From a pod's creation to Ready.
    pub start_delay: Duration,
}

impl Default for WorkloadTiming {
    fn default() -> Self {
        WorkloadTiming {
            tick: Duration::from_millis(300),
            start_delay: Duration::from_secs(1),
        }
    }
}

fn owner_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true
    })
}

/// The DaemonSet object.
pub fn daemonset() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DS_NAME, "namespace": DS_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": DS_NAME}},
            "template": {
                "metadata": {"labels": {"app": DS_NAME}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": "registry.example.com/sim/node-agent:1"}]
                }
            }
        }
    })
}

/// The `web` Deployment.
pub fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": WEB_NAME, "namespace": WEB_NAMESPACE},
        "spec": {
            "replicas": WEB_REPLICAS,
            "selector": {"matchLabels": {"app": WEB_NAME}},
            "template": {
                "metadata": {"labels": {"app": WEB_NAME}},
                "spec": {"containers": [{"name": "web", "image": "registry.example.com/sim/web:1"}]}
            }
        }
    })
}

/// The `web` ReplicaSet, owned by the Deployment.
pub fn replicaset(deploy_uid: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": WEB_RS,
            "namespace": WEB_NAMESPACE,
            "labels": {"app": WEB_NAME, "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [owner_ref("apps/v1", "Deployment", WEB_NAME, deploy_uid)]
        },
        "spec": {
            "replicas": WEB_REPLICAS,
            "selector": {"matchLabels": {"app": WEB_NAME, "pod-template-hash": "5d8f7c9b6"}},
            "template": {
                "metadata": {"labels": {"app": WEB_NAME, "pod-template-hash": "5d8f7c9b6"}},
                "spec": {"containers": [{"name": "web", "image": "registry.example.com/sim/web:1"}]}
            }
        }
    })
}

/// The `web` PodDisruptionBudget.
pub fn pdb() -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": WEB_NAME, "namespace": WEB_NAMESPACE},
        "spec": {"minAvailable": WEB_MIN_AVAILABLE, "selector": {"matchLabels": {"app": WEB_NAME}}}
    })
}

/// The DaemonSet pod of `node`.
pub fn ds_pod(node: &str, ds_uid: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{DS_NAME}-{node}"),
            "namespace": DS_NAMESPACE,
            "labels": {"app": DS_NAME},
            "ownerReferences": [owner_ref("apps/v1", "DaemonSet", DS_NAME, ds_uid)]
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": "registry.example.com/sim/node-agent:1"}]
        }
    })
}

/// A `web` pod on `node`.
pub fn web_pod(name: &str, node: &str, rs_uid: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": WEB_NAMESPACE,
            "labels": {"app": WEB_NAME, "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [owner_ref("apps/v1", "ReplicaSet", WEB_RS, rs_uid)]
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "web", "image": "registry.example.com/sim/web:1"}]
        }
    })
}

/// Running and Ready, as kubelet reports a started pod (kubectl's READY column counts the
/// ready container statuses).
pub fn running_status(container: &str, image: &str, now: &str) -> Value {
    json!({"status": {
        "phase": "Running",
        "startTime": now,
        "containerStatuses": [{
            "name": container,
            "image": image,
            "imageID": "",
            "ready": true,
            "started": true,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}}
        }],
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
        ]
    }})
}

/// A schedulable node as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Name.
    pub name: String,
    /// Whether it carries the worker role (web pods prefer workers, like OpenShift's
    /// masters refusing workloads).
    pub worker: bool,
    /// Whether it carries a `PreferNoSchedule` taint, which the scheduler avoids when it can:
    /// the controller's `UpdateInProgress` taint steers pods to nodes already updated, so a
    /// pod evicted by one drain is not placed where the next wave drains it again.
    pub avoid: bool,
}

/// Where a new web pod goes: a schedulable worker (a master only when no worker is
/// schedulable), untainted before `PreferNoSchedule`-tainted, with the fewest web pods, first
/// by name on ties. `None` when no node can take it.
pub fn pick_node(candidates: &[Candidate], load: &BTreeMap<String, usize>) -> Option<String> {
    let any_worker = candidates.iter().any(|c| c.worker);
    candidates
        .iter()
        .filter(|c| c.worker || !any_worker)
        .min_by_key(|c| {
            (
                c.avoid,
                load.get(&c.name).copied().unwrap_or(0),
                c.name.clone(),
            )
        })
        .map(|c| c.name.clone())
}

fn prefers_no_schedule(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.effect == "PreferNoSchedule"))
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn schedulable(n: &Node) -> bool {
    node_ready(n) && !cordoned(n)
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn suffix() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Go's `omitempty` on a number: zero is not written.
fn nonzero<T: Default + PartialEq>(v: T) -> Option<T> {
    (v != T::default()).then_some(v)
}

/// Whether a pod has finished (Succeeded or Failed): controllers count it as neither active
/// nor terminating.
fn terminal(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether `labels` carry every pair of `want`.
fn has_labels(labels: &BTreeMap<String, String>, want: Option<&BTreeMap<String, String>>) -> bool {
    want.into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// The status the replicaset controller writes for `rs` over the pods its selector matches:
/// active pods (neither deleting nor finished) are its replicas, and the pods being deleted its
/// `terminatingReplicas` (on by default since 1.35). The sim's pods have no `minReadySeconds`
/// to wait out, so a Ready pod is available. Conditions are kept as they are: the only one,
/// ReplicaFailure, is about failed creates, which the sim retries silently.
pub fn replicaset_status(rs: &ReplicaSet, pods: &[Pod]) -> ReplicaSetStatus {
    let spec = rs.spec.as_ref();
    let selector = spec.and_then(|s| s.selector.match_labels.as_ref());
    let template = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    let ours = pods.iter().filter(|p| has_labels(p.labels(), selector));
    let (mut active, mut deleting, mut labelled, mut ready) = (0, 0, 0, 0);
    for p in ours.filter(|p| !terminal(p)) {
        if terminating(p) {
            deleting += 1;
            continue;
        }
        active += 1;
        labelled += i32::from(has_labels(p.labels(), template));
        ready += i32::from(pod_ready(p));
    }
    let old = rs.status.clone().unwrap_or_default();
    ReplicaSetStatus {
        replicas: active,
        fully_labeled_replicas: nonzero(labelled),
        ready_replicas: nonzero(ready),
        available_replicas: nonzero(ready),
        terminating_replicas: Some(deleting),
        observed_generation: nonzero(rs.metadata.generation.unwrap_or(0)),
        conditions: old.conditions,
    }
}

/// `intstr.GetScaledValueFromIntOrPercent`: a percentage of `total`, rounded up or down.
fn scaled(v: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match v {
        None => 0,
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let scaled = pct * i64::from(total);
            let v = if round_up {
                (scaled + 99).div_euclid(100)
            } else {
                scaled.div_euclid(100)
            };
            i32::try_from(v).unwrap_or(i32::MAX)
        }
    }
}

/// `deploymentutil.MaxUnavailable`: how many of `replicas` a rolling update may take down
/// (never more than all; one when both surge and unavailability resolve to zero). A Recreate
/// deployment has none to spare.
fn max_unavailable(d: &Deployment, replicas: i32) -> i32 {
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) != Some("RollingUpdate") || replicas == 0 {
        return 0;
    }
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    let surge = scaled(ru.and_then(|r| r.max_surge.as_ref()), replicas, true);
    let mut unavailable = scaled(ru.and_then(|r| r.max_unavailable.as_ref()), replicas, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    unavailable.min(replicas)
}

/// `deploymentutil.MaxSurge`: how many pods over `replicas` a rolling update may add; none
/// for a Recreate deployment.
fn max_surge(d: &Deployment, replicas: i32) -> i32 {
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) != Some("RollingUpdate") {
        return 0;
    }
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    scaled(ru.and_then(|r| r.max_surge.as_ref()), replicas, true)
}

/// Annotations the deployment controller keeps on its ReplicaSets.
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// The deployment's `spec.replicas` (1 when unset, as apps/v1 defaults it).
fn deployment_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// What the deployment controller (and the replicaset controller's status) writes for the web
/// Deployment in one sync, decided without I/O.
#[derive(Debug, Default)]
struct WebSync {
    /// The ReplicaSet to create for the Deployment's template, when none runs it.
    create: Option<Value>,
    /// Merge patches of ReplicaSets (replicas, annotations), by name.
    rs_patches: Vec<(String, Value)>,
    /// Old ReplicaSets beyond `revisionHistoryLimit`, to delete.
    rs_deletes: Vec<String>,
    /// The Deployment's `deployment.kubernetes.io/revision`, when it changes.
    revision: Option<String>,
    /// The ReplicaSets whose pods the replicaset controller keeps, the new one first.
    sets: Vec<WebSet>,
    /// The ReplicaSets' statuses that changed, by name.
    rs_statuses: Vec<(String, ReplicaSetStatus)>,
    /// The Deployment's status.
    status: Option<DeploymentStatus>,
}

/// One sync of the web Deployment `d` over the ReplicaSets it owns among `rss` and the web
/// `pods`: the ReplicaSet of its template found or created (with the next revision, a
/// rolled-back one keeping its old revisions in `revision-history`), one rolling step
/// ([`web_rollout::rolling_step`]: a Recreate Deployment as one with no surge and everything
/// unavailable), old ReplicaSets cleaned up once complete, and the statuses. Nothing is done
/// while no owned ReplicaSet is known: the sim creates the first with the Deployment, and a
/// cache that has not seen it yet must not make a second.
fn web_sync(d: &Deployment, rss: &[&ReplicaSet], pods: &[Pod], now: &Time) -> WebSync {
    let mut out = WebSync::default();
    let uid = d.uid().unwrap_or_default();
    let mut owned: Vec<&ReplicaSet> = rss
        .iter()
        .copied()
        .filter(|rs| {
            rs.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    if owned.is_empty() {
        return out;
    }
    // Oldest first: the order old ReplicaSets are scaled down in.
    owned.sort_by_key(|rs| {
        (
            rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
            rs.name_any(),
        )
    });
    let statuses: Vec<ReplicaSetStatus> =
        owned.iter().map(|rs| replicaset_status(rs, pods)).collect();
    for (rs, st) in owned.iter().zip(&statuses) {
        if rs.status.as_ref() != Some(st) {
            out.rs_statuses.push((rs.name_any(), st.clone()));
        }
    }
    let want = deployment_replicas(d);
    let recreate = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate");
    let (surge, unavailable) = if recreate {
        (0, want)
    } else {
        (max_surge(d, want), max_unavailable(d, want))
    };
    let count = |i: usize| RsCount {
        spec: spec_replicas(owned[i]),
        available: statuses[i].available_replicas.unwrap_or(0),
    };
    let new = web_rollout::find_new(d, &owned)
        .and_then(|n| owned.iter().position(|r| std::ptr::eq(*r, n)));
    let olds: Vec<usize> = (0..owned.len()).filter(|i| Some(*i) != new).collect();
    let old_counts: Vec<RsCount> = olds.iter().map(|i| count(*i)).collect();
    let revision = web_rollout::next_revision(olds.iter().map(|i| owned[*i]));
    let desired = want.to_string();
    let max = want.saturating_add(surge).to_string();
    let old_statuses: Vec<(&ReplicaSet, ReplicaSetStatus)> = olds
        .iter()
        .map(|i| (owned[*i], statuses[*i].clone()))
        .collect();
    let set = |rs: &ReplicaSet, replicas: i32| WebSet {
        name: rs.name_any(),
        hash: rs
            .labels()
            .get(web_rollout::HASH_LABEL)
            .cloned()
            .unwrap_or_default(),
        want: usize::try_from(replicas).unwrap_or(0),
    };
    let Some(i) = new else {
        let (replicas, _) =
            web_rollout::rolling_step(want, surge, unavailable, RsCount::default(), &old_counts);
        let ann = json!({DESIRED_REPLICAS: desired, MAX_REPLICAS: max});
        let v = web_rollout::new_replicaset(d, revision, replicas, ann);
        let Ok(created) = serde_json::from_value::<ReplicaSet>(v.clone()) else {
            return out;
        };
        out.create = Some(v);
        out.revision = Some(revision.to_string());
        out.sets = olds
            .iter()
            .map(|i| set(owned[*i], spec_replicas(owned[*i])))
            .collect();
        let st = ReplicaSetStatus::default();
        out.status = Some(rollout_status(d, &created, &st, &old_statuses, true, now));
        return out;
    };
    let rs = owned[i];
    let (replicas, old_specs) =
        web_rollout::rolling_step(want, surge, unavailable, count(i), &old_counts);
    let mut ann = Map::new();
    let have = rs.annotations();
    if have.get(DESIRED_REPLICAS) != Some(&desired) || have.get(MAX_REPLICAS) != Some(&max) {
        ann.insert(DESIRED_REPLICAS.into(), json!(desired));
        ann.insert(MAX_REPLICAS.into(), json!(max));
    }
    let mut rs_revision = web_rollout::revision(rs);
    if let Some(Value::Object(r)) = web_rollout::revision_annotations(rs, revision) {
        ann.extend(r);
        rs_revision = revision;
    }
    let mut patch = Map::new();
    if !ann.is_empty() {
        patch.insert("metadata".into(), json!({ "annotations": ann }));
    }
    if replicas != spec_replicas(rs) {
        patch.insert("spec".into(), json!({ "replicas": replicas }));
    }
    if !patch.is_empty() {
        out.rs_patches.push((rs.name_any(), Value::Object(patch)));
    }
    if d.annotations().get(web_rollout::REVISION) != Some(&rs_revision.to_string()) {
        out.revision = Some(rs_revision.to_string());
    }
    out.sets.push(set(rs, replicas));
    for (j, spec) in olds.iter().zip(&old_specs) {
        if *spec != spec_replicas(owned[*j]) {
            let p = json!({"spec": {"replicas": spec}});
            out.rs_patches.push((owned[*j].name_any(), p));
        }
        out.sets.push(set(owned[*j], *spec));
    }
    let status = rollout_status(d, rs, &statuses[i], &old_statuses, false, now);
    let complete = replicas == want
        && old_specs.iter().all(|s| *s == 0)
        && statuses[i].available_replicas.unwrap_or(0) == want;
    if complete {
        let limit = d
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10);
        let with_pods: Vec<(&ReplicaSet, i32)> = old_statuses
            .iter()
            .map(|(rs, st)| (*rs, st.replicas + st.terminating_replicas.unwrap_or(0)))
            .collect();
        out.rs_deletes = web_rollout::to_clean_up(&with_pods, limit)
            .iter()
            .map(|rs| rs.name_any())
            .collect();
    }
    out.status = Some(status);
    out
}

fn deployment_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: &Time,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// `deploymentutil.SetDeploymentCondition`: the same status and reason change nothing; the
/// same status keeps its transition time; the condition moves to the end of the list.
fn set_condition(conds: &mut Vec<DeploymentCondition>, mut c: DeploymentCondition) {
    if let Some(cur) = conds.iter().find(|x| x.type_ == c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    conds.retain(|x| x.type_ != c.type_);
    conds.push(c);
}

/// Reasons and messages of the deployment controller's conditions.
const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
const RS_UPDATED: &str = "ReplicaSetUpdated";

/// The status the deployment controller writes for `d`, whose only ReplicaSet is `rs`, now
/// reporting `rs_status`: counts summed over the ReplicaSet, `Available` while at least
/// `replicas - maxUnavailable` pods are available, and `Progressing` as `syncRolloutStatus`
/// keeps it (created, updated on each step of progress, then `NewReplicaSetAvailable` for good;
/// once there a drain only flips `Available`). The sim never lets a rollout time out.
pub fn deployment_status(
    d: &Deployment,
    rs: &ReplicaSet,
    rs_status: &ReplicaSetStatus,
    now: &Time,
) -> DeploymentStatus {
    rollout_status(d, rs, rs_status, &[], false, now)
}

/// [`deployment_status`] during a rollout: `rs` is the new ReplicaSet (`created` in this sync),
/// `olds` the others with their status; the counts are summed over all of them, the
/// updated ones are the new ReplicaSet's, and a created ReplicaSet sets `Progressing` to
/// `NewReplicaSetCreated`.
pub fn rollout_status(
    d: &Deployment,
    rs: &ReplicaSet,
    rs_status: &ReplicaSetStatus,
    olds: &[(&ReplicaSet, ReplicaSetStatus)],
    created: bool,
    now: &Time,
) -> DeploymentStatus {
    let spec = d.spec.as_ref();
    let want = spec.and_then(|s| s.replicas).unwrap_or(1);
    let spec_of = |rs: &ReplicaSet| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let rs_want = spec_of(rs) + olds.iter().map(|(r, _)| spec_of(r)).sum::<i32>();
    let sum = |f: &dyn Fn(&ReplicaSetStatus) -> i32| {
        f(rs_status) + olds.iter().map(|(_, s)| f(s)).sum::<i32>()
    };
    let available = sum(&|s| s.available_replicas.unwrap_or(0));
    let terminating = |s: &ReplicaSetStatus| match (s.observed_generation, s.terminating_replicas) {
        (None, None) => Some(0),
        (_, t) => t,
    };
    let old = d.status.clone().unwrap_or_default();
    let mut conds = old.conditions.clone().unwrap_or_default();
    let deadline = spec
        .and_then(|s| s.progress_deadline_seconds)
        .is_some_and(|s| s != i32::MAX);
    let rs_name = rs.name_any();
    // The sim created the first ReplicaSet with the Deployment, as the controller would have.
    if deadline && (created || !conds.iter().any(|c| c.type_ == "Progressing")) {
        let msg = format!("Created new replica set {rs_name:?}");
        set_condition(
            &mut conds,
            deployment_condition("Progressing", "True", NEW_RS_CREATED, msg, now),
        );
    }
    let terminating = std::iter::once(rs_status)
        .chain(olds.iter().map(|(_, s)| s))
        .map(terminating)
        .try_fold(0, |n, t| t.map(|t| n + t));
    let mut status = DeploymentStatus {
        observed_generation: nonzero(d.metadata.generation.unwrap_or(0)),
        replicas: nonzero(sum(&|s| s.replicas)),
        updated_replicas: nonzero(rs_status.replicas),
        ready_replicas: nonzero(sum(&|s| s.ready_replicas.unwrap_or(0))),
        available_replicas: nonzero(available),
        unavailable_replicas: nonzero((rs_want - available).max(0)),
        terminating_replicas: terminating,
        collision_count: old.collision_count,
        conditions: None,
    };
    let (type_, state, reason, msg) = if available >= want - max_unavailable(d, want) {
        (
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
        )
    } else {
        (
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
    };
    set_condition(
        &mut conds,
        deployment_condition(type_, state, reason, msg.into(), now),
    );

    if !deadline {
        conds.retain(|c| c.type_ != "Progressing");
    }
    let current = conds.iter().find(|c| c.type_ == "Progressing").cloned();
    let get = |v: Option<i32>| v.unwrap_or(0);
    let complete_already = status.replicas == status.updated_replicas
        && current.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
    let complete = get(status.updated_replicas) == want
        && get(status.replicas) == want
        && available == want
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0);
    let progressing = get(status.updated_replicas) > get(old.updated_replicas)
        || get(status.replicas) - get(status.updated_replicas)
            < get(old.replicas) - get(old.updated_replicas)
        || get(status.ready_replicas) > get(old.ready_replicas)
        || available > get(old.available_replicas);
    if deadline && !complete_already {
        if complete {
            let msg = format!("ReplicaSet {rs_name:?} has successfully progressed.");
            set_condition(
                &mut conds,
                deployment_condition("Progressing", "True", NEW_RS_AVAILABLE, msg, now),
            );
        } else if progressing {
            // Progress refreshes the condition's update time, keeping its transition time.
            let msg = format!("ReplicaSet {rs_name:?} is progressing.");
            let mut c = deployment_condition("Progressing", "True", RS_UPDATED, msg, now);
            if let Some(cur) = current.filter(|c| c.status == "True") {
                c.last_transition_time = cur.last_transition_time;
            }
            conds.retain(|x| x.type_ != "Progressing");
            conds.push(c);
        }
    }
    status.conditions = (!conds.is_empty()).then_some(conds);
    status
}

/// The status the daemonset controller writes for `ds` over `nodes` and its `pods`. The sim's
/// DaemonSet tolerates every taint and selects no nodes, so every node should run it; a node's
/// oldest pod is the one counted, and every pod is of the one template there is, so updated.
pub fn daemonset_status<N: Borrow<Node>, P: Borrow<Pod>>(
    ds: &DaemonSet,
    nodes: &[N],
    pods: &[P],
) -> DaemonSetStatus {
    let mut by_node: BTreeMap<String, &Pod> = BTreeMap::new();
    for p in pods.iter().map(Borrow::borrow) {
        if terminating(p) && terminal(p) {
            continue;
        }
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        by_node
            .entry(node_of(p))
            .and_modify(|q| {
                if created(p) < created(q) {
                    *q = p;
                }
            })
            .or_insert(p);
    }
    let names: BTreeSet<String> = nodes.iter().map(|n| n.borrow().name_any()).collect();
    let desired = names.len() as i32;
    let mut current = 0;
    let mut ready = 0;
    for pod in names.iter().filter_map(|n| by_node.get(n)) {
        current += 1;
        ready += i32::from(pod_ready(pod));
    }
    let old = ds.status.clone().unwrap_or_default();
    DaemonSetStatus {
        desired_number_scheduled: desired,
        current_number_scheduled: current,
        // Only an existing node that should not run the pod counts; every node should.
        number_misscheduled: 0,
        number_ready: ready,
        updated_number_scheduled: nonzero(current),
        number_available: nonzero(ready),
        number_unavailable: nonzero(desired - ready),
        observed_generation: nonzero(ds.metadata.generation.unwrap_or(0)),
        collision_count: old.collision_count,
        conditions: old.conditions,
    }
}

/// The watch-fed caches a pass reads.
struct Stores {
    nodes: Store<Node>,
    ds_pods: Store<Pod>,
    deploys: Store<Deployment>,
    rss: Store<ReplicaSet>,
    dss: Store<DaemonSet>,
}

/// The workload objects' owners, created once.
struct Owners {
    ds_uid: String,
    /// The replicas last warned about as over [`MAX_WEB_PODS`] (0: none), so the warning is
    /// logged once per scale rather than once per pass.
    warned: std::sync::atomic::AtomicI32,
}

async fn ensure_objects(client: &kube::Client) -> Result<Owners> {
    let ds: DaemonSet = objects::typed("daemonset", daemonset())?;
    let ds = ensure(&Api::namespaced(client.clone(), DS_NAMESPACE), &ds).await?;
    let dep: Deployment = objects::typed("deployment", deployment())?;
    let dep = ensure(&Api::namespaced(client.clone(), WEB_NAMESPACE), &dep).await?;
    // The first ReplicaSet, only while the Deployment has none: after a rollout its old
    // ones may have been cleaned up.
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), WEB_NAMESPACE);
    let lp = ListParams::default().labels(&format!("app={WEB_NAME}"));
    if rs_api.list(&lp).await?.items.is_empty() {
        let rs: ReplicaSet =
            objects::typed("replicaset", replicaset(&dep.uid().unwrap_or_default()))?;
        ensure(&rs_api, &rs).await?;
    }
    let pdb: PodDisruptionBudget = objects::typed("pdb", pdb())?;
    ensure(&Api::namespaced(client.clone(), WEB_NAMESPACE), &pdb).await?;
    Ok(Owners {
        ds_uid: ds.meta().uid.clone().unwrap_or_default(),
        warned: std::sync::atomic::AtomicI32::new(0),
    })
}

/// Keeps the workloads until `stop` becomes true.
///
/// Nodes and DaemonSet pods come from watch-fed caches rather than a LIST per pass: with a
/// thousand nodes, listing them every pass made list handling about a third of the API
/// server's CPU. Web pods are still listed each pass (a handful, in one namespace) because
/// their creates are not idempotent: a cache that has not yet seen a create could add a 4th.
/// The Deployment and the DaemonSet are cached too (one watch each, by name), and the web
/// ReplicaSets (one watch, by label), so a pass compares what it computes with them without a
/// request, and writes only what changed.
pub async fn run(client: kube::Client, timing: WorkloadTiming, mut stop: watch::Receiver<bool>) {
    let (nodes, nodes_w) = reflector::store::<Node>();
    let (ds_pods, ds_pods_w) = reflector::store::<Pod>();
    let (deploys, deploys_w) = reflector::store::<Deployment>();
    let (rss, rss_w) = reflector::store::<ReplicaSet>();
    let (dss, dss_w) = reflector::store::<DaemonSet>();
    let changed = Notify::new();
    // The owners' own changes (mostly our status writes) need no early pass.
    let quiet = Notify::new();
    let ds_cfg = watcher::Config::default().labels(&format!("app={DS_NAME}"));
    let web_cfg = watcher::Config::default().labels(&format!("app={WEB_NAME}"));
    let name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
    let stores = Stores {
        nodes,
        ds_pods,
        deploys,
        rss,
        dss,
    };
    tokio::select! {
        _ = reflect(Api::all(client.clone()), watcher::Config::default(), nodes_w, &changed) => {}
        _ = reflect(Api::namespaced(client.clone(), DS_NAMESPACE), ds_cfg, ds_pods_w, &changed) => {}
        _ = reflect(Api::namespaced(client.clone(), WEB_NAMESPACE), name(WEB_NAME), deploys_w, &quiet) => {}
        _ = reflect(Api::namespaced(client.clone(), WEB_NAMESPACE), web_cfg, rss_w, &quiet) => {}
        _ = reflect(Api::namespaced(client.clone(), DS_NAMESPACE), name(DS_NAME), dss_w, &quiet) => {}
        _ = passes(&client, timing, &stores, &changed) => {}
        // A dropped sender means nobody can stop us any more: end as if told to.
        _ = stop.wait_for(|s| *s) => {}
    }
}

/// A watch feeding `writer`, waking the pass loop on every event; runs until dropped.
/// managedFields are dropped on the way in: nothing here reads them, and on Nodes they are
/// most of the cache's memory.
async fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    writer: reflector::store::Writer<K>,
    changed: &Notify,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    watcher(api, cfg)
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .for_each(|ev| {
            match ev {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::debug!(error = %e, "workload watch"),
            }
            future::ready(())
        })
        .await;
}

/// The pass loop: never returns; [`run`] drops it on stop.
///
/// Passes start at least `tick` apart. After a slow pass (a burst of writes on a large fleet)
/// the next one waits up to [`MAX_BACKOFF`] to give the API server room, unless a cache change
/// calls for it sooner; when nothing changes, a pass still runs once the wait is over, since
/// web pods are polled and pods become Ready on a timer.
async fn passes(client: &kube::Client, timing: WorkloadTiming, stores: &Stores, changed: &Notify) {
    // The stores fail only when their writer is gone, which ends `run` anyway. The owners'
    // stores are not waited for: a pass without them only skips the status writes.
    let _ = tokio::join!(
        stores.nodes.wait_until_ready(),
        stores.ds_pods.wait_until_ready()
    );
    let mut owners = None;
    loop {
        let started = Instant::now();
        if owners.is_none() {
            match ensure_objects(client).await {
                Ok(o) => owners = Some(o),
                Err(e) => tracing::warn!(error = %e, "creating workloads"),
            }
        }
        if let Some(o) = &owners
            && let Err(e) = reconcile(client, o, timing, stores).await
        {
            tracing::debug!(error = %e, "workload reconcile");
        }
        let pause = timing.tick.max(started.elapsed().min(MAX_BACKOFF));
        tokio::time::sleep_until(started + timing.tick).await;
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep_until(started + pause) => {}
        }
    }
}

/// Runs `writes` with at most [`IN_FLIGHT`] in flight; the first error is returned once all
/// have finished.
async fn run_bounded<F>(writes: Vec<F>) -> std::result::Result<(), kube::Error>
where
    F: std::future::Future<Output = std::result::Result<(), kube::Error>>,
{
    let results: Vec<_> = stream::iter(writes)
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// A pod to report Running and Ready.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReadyPatch {
    namespace: String,
    name: String,
    container: String,
    image: String,
}

/// The writes one pass calls for, decided without I/O.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Nodes lacking their DaemonSet pod.
    ds_creates: Vec<String>,
    /// Nodes that get one new web pod each (a node may appear more than once).
    web_creates: Vec<String>,
    /// The ReplicaSet of each of `web_creates`, in the same order.
    web_create_sets: Vec<String>,
    /// `(namespace, name)` of pods whose node is gone.
    deletes: Vec<(String, String)>,
    /// Pods started long enough ago on a Ready node.
    ready: Vec<ReadyPatch>,
}

/// Which `n` of the live web `pods` go when too many run, in the order kube's replicaset
/// controller prefers (`ActivePodsWithRanks`), without pod phases, deletion costs, ready times
/// or restart counts: unscheduled first, then not Ready, then those sharing their node with
/// more web pods, then the newest, then by name.
fn surplus<'a>(pods: &[&'a Pod], n: usize) -> Vec<&'a Pod> {
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods {
        *per_node.entry(node_of(p)).or_default() += 1;
    }
    let mut sorted = pods.to_vec();
    sorted.sort_by_key(|p| {
        let node = node_of(p);
        let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (
            !node.is_empty(),
            pod_ready(p),
            std::cmp::Reverse(per_node.get(&node).copied().unwrap_or(0)),
            // No creation time sorts as the newest, as kube has it.
            created.is_some(),
            std::cmp::Reverse(created),
            p.name_any(),
        )
    });
    sorted.truncate(n);
    sorted
}

/// A web ReplicaSet as the simulated replicaset controller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WebSet {
    /// Its name.
    name: String,
    /// Its pods' `pod-template-hash`.
    hash: String,
    /// Its `spec.replicas`.
    want: usize,
}

/// Decides a pass: one DaemonSet pod per node; for each of the web `sets` its `want` live
/// pods on schedulable nodes (the [`surplus`] deleted when there are more), at most
/// [`MAX_WEB_PODS`] in all; pods of vanished nodes deleted; and pods older than `start_delay`
/// on Ready nodes marked Ready (the kubelet's part).
fn plan<N: Borrow<Node>, P: Borrow<Pod>>(
    nodes: &[N],
    ds_pods: &[P],
    web_pods: &[Pod],
    sets: &[WebSet],
    now: jiff::Timestamp,
    start_delay: Duration,
) -> Plan {
    let nodes = || nodes.iter().map(Borrow::borrow);
    let ds_pods = || ds_pods.iter().map(Borrow::borrow);
    let names: BTreeSet<String> = nodes().map(|n| n.name_any()).collect();
    let ready_nodes: BTreeSet<String> = nodes()
        .filter(|n| node_ready(n))
        .map(|n| n.name_any())
        .collect();
    let mut out = Plan::default();
    let delete = |p: &Pod| (p.namespace().unwrap_or_default(), p.name_any());

    let have: BTreeSet<String> = ds_pods().map(node_of).collect();
    out.ds_creates = names.difference(&have).cloned().collect();
    out.deletes = ds_pods()
        .filter(|p| !names.contains(&node_of(p)))
        .map(delete)
        .collect();

    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    // Live web pods by their template hash: each ReplicaSet's.
    let mut live: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in web_pods {
        let on = node_of(p);
        if !names.contains(&on) {
            out.deletes.push(delete(p));
            continue;
        }
        if terminating(p) {
            continue;
        }
        let hash = p.labels().get(web_rollout::HASH_LABEL).cloned();
        live.entry(hash.unwrap_or_default()).or_default().push(p);
        *load.entry(on).or_default() += 1;
    }
    let is_worker = |n: &Node| n.labels().contains_key(&objects::node_role_label("worker"));
    let candidates: Vec<Candidate> = nodes()
        .filter(|n| schedulable(n))
        .map(|n| Candidate {
            name: n.name_any(),
            worker: is_worker(n),
            avoid: prefers_no_schedule(n),
        })
        .collect();
    // A worker still starting (not Ready, not cordoned) is worth waiting for: at start-up the
    // master is often Ready a moment before the workers, and pods put there would stay there,
    // out of every worker drain. A cordoned worker is not: a drain needs the replacement now.
    let worker_starting = nodes().any(|n| is_worker(n) && !node_ready(n) && !cordoned(n));
    let no_worker_yet = !candidates.iter().any(|c| c.worker);
    // The ReplicaSets in order (the new one first) share the bound on web pods.
    let mut budget = MAX_WEB_PODS;
    for set in sets {
        let want = set.want.min(budget);
        budget -= want;
        let pods = live.get(&set.hash).map(Vec::as_slice).unwrap_or_default();
        if pods.len() > want {
            let extra = surplus(pods, pods.len() - want);
            out.deletes.extend(extra.into_iter().map(delete));
        }
        for _ in pods.len()..want {
            if worker_starting && no_worker_yet {
                break;
            }
            let Some(node) = pick_node(&candidates, &load) else {
                break;
            };
            *load.entry(node.clone()).or_default() += 1;
            out.web_creates.push(node);
            out.web_create_sets.push(set.name.clone());
        }
    }

    for p in ds_pods().chain(web_pods) {
        if pod_ready(p) || terminating(p) || !ready_nodes.contains(&node_of(p)) {
            continue;
        }
        let created = p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0);
        if now.as_second() - created < start_delay.as_secs() as i64 {
            continue;
        }
        let (container, image) = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
            .unwrap_or_default();
        out.ready.push(ReadyPatch {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
            container,
            image,
        });
    }
    out
}

/// One pass: nodes and DaemonSet pods from the caches, web pods listed, then the writes the
/// plan calls for go out concurrently.
async fn reconcile(
    client: &kube::Client,
    owners: &Owners,
    timing: WorkloadTiming,
    stores: &Stores,
) -> Result<()> {
    let web: Api<Pod> = Api::namespaced(client.clone(), WEB_NAMESPACE);
    let web_pods = web
        .list(&ListParams::default().labels(&format!("app={WEB_NAME}")))
        .await?
        .items;
    let (nodes, ds_pods) = (stores.nodes.state(), stores.ds_pods.state());
    // The Deployment's count drives the pods (until its cache fills, the count it was
    // created with).
    let deploy = stores
        .deploys
        .get(&ObjectRef::new(WEB_NAME).within(WEB_NAMESPACE));
    let replicas = deploy.as_deref().map_or(0, deployment_replicas);
    if replicas > MAX_WEB_PODS as i32 {
        if owners.warned.swap(replicas, Ordering::Relaxed) != replicas {
            tracing::warn!(
                replicas,
                limit = MAX_WEB_PODS,
                "deploy/{WEB_NAME} asks for more pods than the simulation runs; running the limit"
            );
        }
    } else {
        owners.warned.store(0, Ordering::Relaxed);
    }
    let now = Time(
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| jiff::Timestamp::now()),
    );
    let all_rs = stores.rss.state();
    let rs_refs: Vec<&ReplicaSet> = all_rs.iter().map(|r| r.as_ref()).collect();
    let sync = deploy
        .as_deref()
        .map(|d| web_sync(d, &rs_refs, &web_pods, &now))
        .unwrap_or_default();
    let plan = plan(
        &nodes,
        &ds_pods,
        &web_pods,
        &sync.sets,
        jiff::Timestamp::now(),
        timing.start_delay,
    );
    let mut statuses = status_writes(client, stores, &nodes, &ds_pods);
    statuses.extend(web_writes(client, deploy.as_deref(), sync));

    let ds_api: Api<Pod> = Api::namespaced(client.clone(), DS_NAMESPACE);
    let mut creates = Vec::new();
    for n in &plan.ds_creates {
        let pod: Pod = objects::typed("pod", ds_pod(n, &owners.ds_uid))?;
        creates.push((&ds_api, pod));
    }
    for (n, set) in plan.web_creates.iter().zip(&plan.web_create_sets) {
        let Some(rs) = rs_refs.iter().find(|r| r.name_any() == *set) else {
            continue;
        };
        let name = format!("{set}-{}", suffix());
        let pod: Pod = objects::typed("pod", pod_of(rs, &name, n))?;
        creates.push((&web, pod));
    }
    let pods_in = |ns: &str| Api::<Pod>::namespaced(client.clone(), ns);
    let pp = &PostParams::default();
    let dp = &DeleteParams::default();
    let stamp = &objects::now_rfc3339();

    let create_results = run_bounded(
        creates
            .iter()
            .map(|(api, pod)| async move {
                match api.create(pp, pod).await {
                    // Already there (a create the cache has not shown yet) or refused: the
                    // next pass sees it.
                    Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .collect(),
    );
    let delete_results = run_bounded(
        plan.deletes
            .iter()
            .map(|(ns, name)| {
                let api = pods_in(ns);
                async move {
                    // Gone already (a delete the cache has not shown yet) is fine.
                    let _ = api.delete(name, dp).await;
                    Ok(())
                }
            })
            .collect(),
    );
    let patch_results = run_bounded(
        plan.ready
            .iter()
            .map(|r| {
                let api = pods_in(&r.namespace);
                async move {
                    api.patch_status(
                        &r.name,
                        &PatchParams::default(),
                        &Patch::Merge(&running_status(&r.container, &r.image, stamp)),
                    )
                    .await
                    .map(|_| ())
                }
            })
            .collect(),
    );
    let (c, d, p, s) = tokio::join!(
        create_results,
        delete_results,
        patch_results,
        run_bounded(statuses)
    );
    c?;
    d?;
    p?;
    s?;
    Ok(())
}

/// A status write, boxed: the three owners are of three types.
type StatusWrite = future::BoxFuture<'static, std::result::Result<(), kube::Error>>;

/// The owners' statuses that differ from what their caches hold, as writes: at most one per
/// owner per pass, none while nothing changes. Each is a merge patch of the whole status
/// with `null` for the fields Go would leave out, so a count dropping to zero is removed.
fn status_writes(
    client: &kube::Client,
    stores: &Stores,
    nodes: &[std::sync::Arc<Node>],
    ds_pods: &[std::sync::Arc<Pod>],
) -> Vec<StatusWrite> {
    let mut out = Vec::new();
    if let Some(ds) = stores
        .dss
        .get(&ObjectRef::new(DS_NAME).within(DS_NAMESPACE))
    {
        let new = daemonset_status(&ds, nodes, ds_pods);
        if ds.status.as_ref() != Some(&new) {
            let api: Api<DaemonSet> = Api::namespaced(client.clone(), DS_NAMESPACE);
            out.push(write_status(&api, DS_NAME, status_patch(&new, DS_FIELDS)));
        }
    }
    out
}

/// The web Deployment's sync as writes: the new ReplicaSet created, ReplicaSets scaled and
/// annotated, old ones deleted, the Deployment's revision annotated, and the statuses that
/// changed.
fn web_writes(client: &kube::Client, d: Option<&Deployment>, sync: WebSync) -> Vec<StatusWrite> {
    let mut out: Vec<StatusWrite> = Vec::new();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), WEB_NAMESPACE);
    if let Some(v) = sync.create
        && let Ok(rs) = objects::typed::<ReplicaSet>("replicaset", v)
    {
        out.push(pass_write(&rs_api, move |api| async move {
            api.create(&PostParams::default(), &rs).await
        }));
    }
    for (name, patch) in sync.rs_patches {
        out.push(pass_write(&rs_api, move |api| async move {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }));
    }
    for name in sync.rs_deletes {
        out.push(pass_write(&rs_api, move |api| async move {
            api.delete(&name, &DeleteParams::default()).await
        }));
    }
    for (name, st) in sync.rs_statuses {
        out.push(write_status(&rs_api, name, status_patch(&st, RS_FIELDS)));
    }
    let d_api: Api<Deployment> = Api::namespaced(client.clone(), WEB_NAMESPACE);
    if let Some(rev) = sync.revision {
        let patch = json!({"metadata": {"annotations": {web_rollout::REVISION: rev}}});
        out.push(pass_write(&d_api, move |api| async move {
            api.patch(WEB_NAME, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }));
    }
    if let (Some(d), Some(st)) = (d, sync.status)
        && d.status.as_ref() != Some(&st)
    {
        out.push(write_status(
            &d_api,
            WEB_NAME,
            status_patch(&st, DEPLOY_FIELDS),
        ));
    }
    out
}

/// A pod of `rs` named `name` on `node`, as the replicaset controller makes it from the
/// ReplicaSet's template (the scheduler's node set at once).
fn pod_of(rs: &ReplicaSet, name: &str, node: &str) -> Value {
    let t = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| json!({}));
    let mut spec = t.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["nodeName"] = json!(node);
    let uid = rs.uid().unwrap_or_default();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": WEB_NAMESPACE,
            "labels": t.pointer("/metadata/labels"),
            "annotations": t.pointer("/metadata/annotations"),
            "ownerReferences": [owner_ref("apps/v1", "ReplicaSet", &rs.name_any(), &uid)]
        },
        "spec": spec
    })
}

/// The status fields the controllers own, by kind: a merge patch nulls the absent ones.
const RS_FIELDS: &[&str] = &[
    "replicas",
    "fullyLabeledReplicas",
    "readyReplicas",
    "availableReplicas",
    "terminatingReplicas",
    "observedGeneration",
    "conditions",
];
const DEPLOY_FIELDS: &[&str] = &[
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
    "terminatingReplicas",
    "conditions",
    "collisionCount",
];
const DS_FIELDS: &[&str] = &[
    "currentNumberScheduled",
    "numberMisscheduled",
    "desiredNumberScheduled",
    "numberReady",
    "observedGeneration",
    "updatedNumberScheduled",
    "numberAvailable",
    "numberUnavailable",
    "collisionCount",
    "conditions",
];

/// `{"status": status}` with `null` for each of `fields` the status leaves out.
fn status_patch<S: serde::Serialize>(status: &S, fields: &[&str]) -> Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(m) = v.as_object_mut() {
        for f in fields {
            m.entry(*f).or_insert(Value::Null);
        }
    }
    json!({ "status": v })
}

/// One write of a pass. A refusal (already there, gone, a conflict) is left to the next pass,
/// which decides again from the caches.
fn pass_write<K: Clone, T, F, Fut>(api: &Api<K>, op: F) -> StatusWrite
where
    F: FnOnce(Api<K>) -> Fut,
    Fut: Future<Output = kube::Result<T>> + Send + 'static,
{
    let write = op(api.clone());
    async move {
        match write.await {
            Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
    .boxed()
}

fn write_status<K>(api: &Api<K>, name: impl Into<String>, patch: Value) -> StatusWrite
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let name = name.into();
    pass_write(api, move |api| async move {
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, worker: bool) -> Candidate {
        Candidate {
            name: name.into(),
            worker,
            avoid: false,
        }
    }

    #[test]
    fn web_pods_avoid_prefer_no_schedule_taints_while_they_can() {
        let tainted = |name: &str| Candidate {
            avoid: true,
            ..c(name, true)
        };
        let mut load = BTreeMap::new();
        load.insert("worker-9".to_string(), 1);
        // An updated (untainted) worker wins over emptier ones still to be updated.
        let cands = [
            tainted("worker-0"),
            tainted("worker-1"),
            c("worker-9", true),
        ];
        assert_eq!(pick_node(&cands, &load).as_deref(), Some("worker-9"));
        // With every worker tainted, the least loaded one still takes it, before any master.
        let cands = [
            c("master-0", false),
            tainted("worker-0"),
            tainted("worker-1"),
        ];
        load.insert("worker-0".to_string(), 1);
        assert_eq!(pick_node(&cands, &load).as_deref(), Some("worker-1"));
    }

    #[test]
    fn web_pods_prefer_the_least_loaded_worker() {
        let cands = [
            c("master-0", false),
            c("worker-0", true),
            c("worker-1", true),
        ];
        let mut load = BTreeMap::new();
        load.insert("worker-0".to_string(), 2);
        assert_eq!(pick_node(&cands, &load).as_deref(), Some("worker-1"));
        load.insert("worker-1".to_string(), 2);
        assert_eq!(pick_node(&cands, &load).as_deref(), Some("worker-0"));
    }

    #[test]
    fn masters_only_when_no_worker_and_none_when_nothing() {
        let cands = [c("master-0", false)];
        assert_eq!(
            pick_node(&cands, &BTreeMap::new()).as_deref(),
            Some("master-0")
        );
        assert_eq!(pick_node(&[], &BTreeMap::new()), None);
    }

    fn node(name: &str, worker: bool, ready: bool, unschedulable: bool) -> Node {
        let role = if worker { "worker" } else { "master" };
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {objects::node_role_label(role): ""}},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}
        }))
        .unwrap()
    }

    /// A pod built from `template`, created at `created`, optionally Ready or terminating.
    fn pod(mut template: Value, created: &str, ready: bool, deleting: bool) -> Pod {
        template["metadata"]["creationTimestamp"] = json!(created);
        if deleting {
            template["metadata"]["deletionTimestamp"] = json!(created);
        }
        if ready {
            template["status"] = running_status("c", "i", created)["status"].clone();
        }
        serde_json::from_value(template).unwrap()
    }

    const T0: &str = "2026-01-01T00:00:00Z";

    /// The first ReplicaSet at `want` replicas.
    fn fixed(want: usize) -> Vec<WebSet> {
        vec![WebSet {
            name: WEB_RS.into(),
            hash: "5d8f7c9b6".into(),
            want,
        }]
    }
    const T1: &str = "2026-01-01T00:00:01Z";

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn plan_keeps_one_daemonset_pod_per_node() {
        let nodes = [
            node("worker-0", true, true, false),
            node("worker-1", true, true, false),
        ];
        let ds = [
            pod(ds_pod("worker-0", "u"), T0, true, false),
            pod(ds_pod("gone", "u"), T0, true, false),
        ];
        let webs: Vec<Pod> = (0..3)
            .map(|i| pod(web_pod(&format!("w{i}"), "worker-0", "u"), T0, true, false))
            .collect();
        let p = plan(
            &nodes,
            &ds,
            &webs,
            &fixed(WEB_REPLICAS),
            at(T0),
            Duration::from_secs(1),
        );
        assert_eq!(p.ds_creates, ["worker-1"]);
        assert_eq!(
            p.deletes,
            [(DS_NAMESPACE.to_string(), format!("{DS_NAME}-gone"))]
        );
        assert!(p.web_creates.is_empty());
        assert!(p.ready.is_empty());
    }

    #[test]
    fn plan_replaces_web_pods_on_least_loaded_schedulable_workers() {
        let nodes = [
            node("master-0", false, true, false),
            node("worker-0", true, true, false),
            node("worker-1", true, true, true),
            node("worker-2", true, false, false),
            node("worker-3", true, true, false),
        ];
        let webs = [
            pod(web_pod("a", "worker-0", "u"), T0, true, false),
            // Terminating: counts for nothing, so a replacement is due.
            pod(web_pod("b", "worker-3", "u"), T0, true, true),
            // Its node is gone: deleted and replaced.
            pod(web_pod("c", "vanished", "u"), T0, true, false),
        ];
        let p = plan(
            &nodes,
            &[] as &[Pod],
            &webs,
            &fixed(WEB_REPLICAS),
            at(T0),
            Duration::from_secs(1),
        );
        // worker-1 is cordoned, worker-2 not Ready, the master only as a last resort.
        assert_eq!(p.web_creates, ["worker-3", "worker-0"]);
        assert_eq!(p.deletes, [(WEB_NAMESPACE.to_string(), "c".to_string())]);
    }

    #[test]
    fn plan_waits_for_starting_workers_but_not_for_cordoned_ones() {
        let master = node("master-0", false, true, false);
        let starting = [master.clone(), node("worker-0", true, false, false)];
        let p = plan(
            &starting,
            &[] as &[Pod],
            &[],
            &fixed(WEB_REPLICAS),
            at(T0),
            Duration::from_secs(1),
        );
        assert!(p.web_creates.is_empty(), "{:?}", p.web_creates);

        let cordoned = [master.clone(), node("worker-0", true, false, true)];
        let p = plan(
            &cordoned,
            &[] as &[Pod],
            &[],
            &fixed(WEB_REPLICAS),
            at(T0),
            Duration::from_secs(1),
        );
        assert_eq!(p.web_creates, ["master-0"; 3]);

        let p = plan(
            &[master],
            &[] as &[Pod],
            &[],
            &fixed(WEB_REPLICAS),
            at(T0),
            Duration::from_secs(1),
        );
        assert_eq!(p.web_creates.len(), WEB_REPLICAS);
    }

    #[test]
    fn plan_marks_pods_ready_after_the_start_delay_on_ready_nodes() {
        let nodes = [
            node("worker-0", true, true, false),
            node("worker-1", true, false, false),
        ];
        let ds = [
            pod(ds_pod("worker-0", "u"), T0, false, false),
            // Its node is not Ready: no kubelet to start it.
            pod(ds_pod("worker-1", "u"), T0, false, false),
        ];
        let webs = [
            pod(web_pod("old", "worker-0", "u"), T0, false, false),
            pod(
                web_pod("young", "worker-0", "u"),
                "2026-01-01T00:00:09Z",
                false,
                false,
            ),
            pod(web_pod("done", "worker-0", "u"), T0, true, false),
        ];
        let p = plan(
            &nodes,
            &ds,
            &webs,
            &fixed(WEB_REPLICAS),
            at("2026-01-01T00:00:10Z"),
            Duration::from_secs(2),
        );
        let ready: Vec<(&str, &str)> = p
            .ready
            .iter()
            .map(|r| (r.namespace.as_str(), r.name.as_str()))
            .collect();
        assert_eq!(
            ready,
            [
                (DS_NAMESPACE, "node-agent-worker-0"),
                (WEB_NAMESPACE, "old")
            ]
        );
        assert_eq!(p.ready[1].container, "web");
        assert_eq!(p.ready[1].image, "registry.example.com/sim/web:1");
    }

    #[test]
    fn web_target_follows_replicas_up_to_the_limit() {
        assert_eq!(web_target(0), 0);
        assert_eq!(web_target(-1), 0);
        assert_eq!(web_target(5), 5);
        assert_eq!(web_target(MAX_WEB_PODS as i32), MAX_WEB_PODS);
        assert_eq!(web_target(MAX_WEB_PODS as i32 + 1), MAX_WEB_PODS);
        assert_eq!(web_target(i32::MAX), MAX_WEB_PODS);
    }

    fn workers(n: usize) -> Vec<Node> {
        (0..n)
            .map(|i| node(&format!("worker-{i}"), true, true, false))
            .collect()
    }

    #[test]
    fn plan_scales_web_pods_up_to_the_limit_and_no_further() {
        let nodes = workers(3);
        let webs: Vec<Pod> = (0..3)
            .map(|i| pod(web_pod(&format!("w{i}"), "worker-0", "u"), T0, true, false))
            .collect();
        let p = plan(
            &nodes,
            &[] as &[Pod],
            &webs,
            &fixed(5),
            at(T0),
            Duration::ZERO,
        );
        assert_eq!(p.web_creates, ["worker-1", "worker-2"]);
        assert!(p.deletes.is_empty());
        // Asked for more than the limit: exactly the limit, spread over the workers.
        let want = web_target(MAX_WEB_PODS as i32 * 3);
        let p = plan(
            &nodes,
            &[] as &[Pod],
            &[],
            &fixed(want),
            at(T0),
            Duration::ZERO,
        );
        assert_eq!(p.web_creates.len(), MAX_WEB_PODS);
        let on_0 = p.web_creates.iter().filter(|n| *n == "worker-0").count();
        assert_eq!(on_0, MAX_WEB_PODS.div_ceil(3));
        // At the limit already: nothing more.
        let full: Vec<Pod> = (0..MAX_WEB_PODS)
            .map(|i| pod(web_pod(&format!("w{i}"), "worker-1", "u"), T0, true, false))
            .collect();
        let p = plan(
            &nodes,
            &[] as &[Pod],
            &full,
            &fixed(want),
            at(T0),
            Duration::ZERO,
        );
        assert!(p.web_creates.is_empty());
        assert!(p.deletes.is_empty());
    }

    #[test]
    fn plan_scales_down_not_ready_then_crowded_then_newest() {
        let nodes = workers(3);
        let webs = [
            pod(web_pod("old-0", "worker-0", "u"), T0, true, false),
            pod(
                web_pod("new-0", "worker-0", "u"),
                "2026-01-01T00:00:05Z",
                true,
                false,
            ),
            pod(
                web_pod("new-1", "worker-1", "u"),
                "2026-01-01T00:00:09Z",
                true,
                false,
            ),
            pod(web_pod("starting", "worker-2", "u"), T0, false, false),
            // Already going: neither counted nor chosen.
            pod(web_pod("going", "worker-1", "u"), T0, true, true),
        ];
        let names = |want| {
            let p = plan(
                &nodes,
                &[] as &[Pod],
                &webs,
                &fixed(want),
                at(T0),
                Duration::from_secs(60),
            );
            assert!(p.web_creates.is_empty());
            p.deletes.into_iter().map(|(_, n)| n).collect::<Vec<_>>()
        };
        assert_eq!(names(4), Vec::<String>::new());
        assert_eq!(names(3), ["starting"]);
        // Of the Ready ones, worker-0's two go before worker-1's newer one, newest first.
        assert_eq!(names(2), ["starting", "new-0"]);
        assert_eq!(names(1), ["starting", "new-0", "old-0"]);
        assert_eq!(names(0).len(), 4);
    }

    #[test]
    fn surplus_takes_an_unscheduled_pod_first() {
        let mut unscheduled = pod(web_pod("unscheduled", "", "u"), T0, true, false);
        unscheduled.spec.as_mut().unwrap().node_name = None;
        let starting = pod(web_pod("starting", "worker-0", "u"), T0, false, false);
        let ready = pod(web_pod("ready", "worker-1", "u"), T1, true, false);
        let pods = [&ready, &starting, &unscheduled];
        let names = |n| -> Vec<String> { surplus(&pods, n).iter().map(|p| p.name_any()).collect() };
        assert_eq!(names(1), ["unscheduled"]);
        assert_eq!(names(2), ["unscheduled", "starting"]);
        assert_eq!(names(9), ["unscheduled", "starting", "ready"]);
        assert!(names(0).is_empty());
    }

    /// The Deployment at `replicas` with `image`, uid `uid-d`, generation 1.
    fn web_deploy(replicas: i32, image: &str) -> Deployment {
        let mut d = deploy_object(rolling(json!("25%"), json!("25%")), None);
        d.metadata.uid = Some("uid-d".into());
        let spec = d.spec.as_mut().unwrap();
        spec.replicas = Some(replicas);
        spec.template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
        d
    }

    fn owned_rs(v: Value, created: &str, rev: &str) -> ReplicaSet {
        let mut rs: ReplicaSet = serde_json::from_value(v).unwrap();
        rs.metadata.generation = Some(1);
        rs.metadata.creation_timestamp = Some(time(created));
        rs.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-d".into();
        rs.metadata.annotations = Some(
            [
                (DESIRED_REPLICAS.to_string(), "3".to_string()),
                (MAX_REPLICAS.to_string(), "4".to_string()),
                (web_rollout::REVISION.to_string(), rev.to_string()),
            ]
            .into(),
        );
        rs
    }

    fn patches(s: &WebSync) -> Vec<(String, Value)> {
        s.rs_patches.clone()
    }

    #[test]
    fn the_replicaset_follows_the_deployment_even_when_scaled_by_hand() {
        let now = time(T0);
        let first = || owned_rs(replicaset("uid-d"), T0, "1");
        let img = "registry.example.com/sim/web:1";
        // Nothing owned known yet: nothing done, no second ReplicaSet.
        let s = web_sync(&web_deploy(3, img), &[], &[], &now);
        assert!(s.create.is_none() && s.sets.is_empty() && s.status.is_none());
        // Steady: the revision goes onto the Deployment, nothing else changes.
        let rs = first();
        let s = web_sync(&web_deploy(3, img), &[&rs], &[], &now);
        assert!(s.create.is_none());
        assert!(patches(&s).is_empty(), "{:?}", s.rs_patches);
        assert_eq!(s.revision.as_deref(), Some("1"));
        assert_eq!(s.sets, fixed(3));
        // Scaled to 5: so is the ReplicaSet (25% of 5 surges by 2).
        let s = web_sync(&web_deploy(5, img), &[&rs], &[], &now);
        assert_eq!(
            patches(&s),
            [(
                WEB_RS.to_string(),
                json!({"metadata": {"annotations": {DESIRED_REPLICAS: "5", MAX_REPLICAS: "7"}},
                       "spec": {"replicas": 5}})
            )]
        );
        assert_eq!(s.sets, fixed(5));
        // The ReplicaSet scaled by hand: back to the Deployment's count.
        let mut rs = first();
        rs.spec.as_mut().unwrap().replicas = Some(9);
        let s = web_sync(&web_deploy(3, img), &[&rs], &[], &now);
        assert_eq!(patches(&s)[0].1, json!({"spec": {"replicas": 3}}));
        assert_eq!(s.sets, fixed(3));
    }

    #[test]
    fn a_new_template_gets_a_replicaset_and_rolls_over_to_it() {
        let now = time(T0);
        let old = owned_rs(replicaset("uid-d"), T0, "1");
        let webs: Vec<Pod> = (0..3)
            .map(|i| pod(web_pod(&format!("w{i}"), "worker-0", "u"), T0, true, false))
            .collect();
        // From the steady state of the first template.
        let steady = web_sync(
            &web_deploy(3, "registry.example.com/sim/web:1"),
            &[&old],
            &webs,
            &now,
        );
        let mut d = web_deploy(3, "registry.example.com/sim/web:2");
        d.status = steady.status;
        let s = web_sync(&d, &[&old], &webs, &now);
        let created = s.create.clone().expect("a new ReplicaSet");
        let name = created["metadata"]["name"].as_str().unwrap().to_owned();
        assert!(name.starts_with("web-") && name != WEB_RS, "{name}");
        assert_eq!(
            created["metadata"]["annotations"][web_rollout::REVISION],
            "2"
        );
        // 25% of 3: one surges at once.
        assert_eq!(created["spec"]["replicas"], 1);
        assert_eq!(s.revision.as_deref(), Some("2"));
        let st = s.status.unwrap();
        let p = cond(&st, "Progressing");
        assert_eq!(p.reason.as_deref(), Some(NEW_RS_CREATED));
        assert_eq!(
            p.message.as_deref(),
            Some(format!("Created new replica set {name:?}").as_str())
        );
        assert_eq!((st.replicas, st.updated_replicas), (Some(3), None));

        // Created, with its surge pod available: the old one gives one up.
        let mut new: ReplicaSet = serde_json::from_value(created).unwrap();
        new.metadata.uid = Some("uid-new".into());
        new.metadata.generation = Some(1);
        new.metadata.creation_timestamp = Some(time("2026-01-01T00:00:05Z"));
        let hash = new.labels()[web_rollout::HASH_LABEL].clone();
        let mut surge = pod(web_pod("n0", "worker-1", "u"), T0, true, false);
        surge
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(web_rollout::HASH_LABEL.into(), hash.clone());
        let mut pods = webs.clone();
        pods.push(surge);
        let mut d2 = d.clone();
        d2.metadata.annotations = Some([(web_rollout::REVISION.to_string(), "2".into())].into());
        let s = web_sync(&d2, &[&new, &old], &pods, &now);
        assert!(s.create.is_none());
        assert_eq!(s.revision, None);
        assert_eq!(
            patches(&s),
            [(WEB_RS.to_string(), json!({"spec": {"replicas": 2}}))]
        );
        assert_eq!(s.sets[0].hash, hash);
        assert_eq!((s.sets[0].want, s.sets[1].want), (1, 2));
        let st = s.status.unwrap();
        assert_eq!(
            (st.replicas, st.updated_replicas, st.available_replicas),
            (Some(4), Some(1), Some(4))
        );

        // Rolled back to the first template: the old ReplicaSet is the new one again, at
        // revision 3, remembering 1.
        let mut new2 = new.clone();
        new2.spec.as_mut().unwrap().replicas = Some(3);
        let mut old2 = old.clone();
        old2.spec.as_mut().unwrap().replicas = Some(0);
        let back = web_deploy(3, "registry.example.com/sim/web:1");
        let s = web_sync(&back, &[&new2, &old2], &[], &now);
        assert!(s.create.is_none());
        let (name, p) = &patches(&s)[0];
        assert_eq!(name, WEB_RS);
        assert_eq!(p["metadata"]["annotations"][web_rollout::REVISION], "3");
        assert_eq!(
            p["metadata"]["annotations"][web_rollout::REVISION_HISTORY],
            "1"
        );
        assert_eq!(s.revision.as_deref(), Some("3"));
    }

    #[test]
    fn plan_bounds_web_pods_over_all_replicasets() {
        let nodes = workers(2);
        let sets = [
            WebSet {
                name: "web-new".into(),
                hash: "new".into(),
                want: MAX_WEB_PODS - 1,
            },
            WebSet {
                name: WEB_RS.into(),
                hash: "5d8f7c9b6".into(),
                want: 3,
            },
        ];
        let p = plan(&nodes, &[] as &[Pod], &[], &sets, at(T0), Duration::ZERO);
        assert_eq!(p.web_creates.len(), MAX_WEB_PODS);
        let old = p.web_create_sets.iter().filter(|s| *s == WEB_RS).count();
        assert_eq!(old, 1);
    }

    fn rs_object(status: Option<Value>) -> ReplicaSet {
        let mut v = replicaset("uid-d");
        v["metadata"]["generation"] = json!(1);
        if let Some(st) = status {
            v["status"] = st;
        }
        serde_json::from_value(v).unwrap()
    }

    fn web(name: &str, ready: bool, deleting: bool) -> Pod {
        pod(web_pod(name, "worker-0", "u"), T0, ready, deleting)
    }

    #[test]
    fn replicaset_status_counts_active_ready_and_terminating_pods() {
        let rs = rs_object(None);
        let mut stranger = web("other", true, false);
        stranger.metadata.labels = Some([("app".to_string(), WEB_NAME.to_string())].into());
        let pods = [
            web("a", true, false),
            web("b", true, false),
            web("c", false, false),
            web("d", true, true),
            // Not matching the ReplicaSet's selector (no pod-template-hash): not its pod.
            stranger,
        ];
        let s = replicaset_status(&rs, &pods);
        assert_eq!(s.replicas, 3);
        assert_eq!(s.fully_labeled_replicas, Some(3));
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.available_replicas, Some(2));
        assert_eq!(s.terminating_replicas, Some(1));
        assert_eq!(s.observed_generation, Some(1));
        // Zeros are left out as Go's omitempty does, but replicas and terminatingReplicas
        // (a pointer) are written.
        let s = replicaset_status(&rs, &[]);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            json!({"replicas": 0, "terminatingReplicas": 0, "observedGeneration": 1})
        );
    }

    fn deploy_object(strategy: Value, status: Option<DeploymentStatus>) -> Deployment {
        let mut v = deployment();
        v["metadata"]["generation"] = json!(1);
        v["spec"]["strategy"] = strategy;
        v["spec"]["progressDeadlineSeconds"] = json!(600);
        let mut d: Deployment = serde_json::from_value(v).unwrap();
        d.status = status;
        d
    }

    fn rolling(surge: Value, unavailable: Value) -> Value {
        json!({"type": "RollingUpdate",
               "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
    }

    fn rs_status(replicas: i32, available: i32, deleting: i32) -> ReplicaSetStatus {
        ReplicaSetStatus {
            replicas,
            ready_replicas: nonzero(available),
            available_replicas: nonzero(available),
            fully_labeled_replicas: nonzero(replicas),
            terminating_replicas: Some(deleting),
            observed_generation: Some(1),
            conditions: None,
        }
    }

    fn time(s: &str) -> Time {
        Time(at(s))
    }

    fn cond<'a>(s: &'a DeploymentStatus, t: &str) -> &'a DeploymentCondition {
        let conds = s.conditions.as_ref().unwrap();
        conds.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn max_unavailable_resolves_fenceposts_as_kube_does() {
        let d = |s| deploy_object(s, None);
        let pct = rolling(json!("25%"), json!("25%"));
        // 25% of 3: surge rounds up to 1, unavailable down to 0.
        assert_eq!(max_unavailable(&d(pct.clone()), 3), 0);
        assert_eq!(max_unavailable(&d(pct.clone()), 4), 1);
        assert_eq!(max_unavailable(&d(pct), 0), 0);
        // Both zero: one may go.
        assert_eq!(max_unavailable(&d(rolling(json!(0), json!(0))), 3), 1);
        // Never more than all.
        assert_eq!(max_unavailable(&d(rolling(json!(0), json!(5))), 3), 3);
        assert_eq!(max_unavailable(&d(rolling(json!(1), json!("100%"))), 3), 3);
        assert_eq!(max_unavailable(&d(json!({"type": "Recreate"})), 3), 0);
    }

    #[test]
    fn deployment_status_follows_a_rollout_then_a_drain() {
        let rs = rs_object(None);
        let pct = rolling(json!("25%"), json!("25%"));
        let t1 = time("2026-01-01T00:00:01Z");
        // Created, no pod yet: Progressing as created, not Available.
        let d = deploy_object(pct.clone(), None);
        let s1 = deployment_status(&d, &rs, &rs_status(0, 0, 0), &t1);
        assert_eq!(s1.observed_generation, Some(1));
        assert_eq!(s1.replicas, None);
        assert_eq!(s1.unavailable_replicas, Some(3));
        assert_eq!(s1.terminating_replicas, Some(0));
        let types: Vec<_> = s1
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.reason.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            types,
            [
                ("Progressing", "True", NEW_RS_CREATED.to_string()),
                (
                    "Available",
                    "False",
                    "MinimumReplicasUnavailable".to_string()
                )
            ]
        );
        assert_eq!(
            cond(&s1, "Progressing").message.as_deref(),
            Some("Created new replica set \"web-5d8f7c9b6\"")
        );
        // The same inputs again: the same status, so nothing to write.
        let again = deployment_status(
            &deploy_object(pct.clone(), Some(s1.clone())),
            &rs,
            &rs_status(0, 0, 0),
            &time("2026-01-01T00:00:09Z"),
        );
        assert_eq!(again, s1);

        // Pods run, two Ready: progressing, transition time kept, update time moved.
        let t2 = time("2026-01-01T00:00:02Z");
        let d = deploy_object(pct.clone(), Some(s1));
        let s2 = deployment_status(&d, &rs, &rs_status(3, 2, 0), &t2);
        let p = cond(&s2, "Progressing");
        assert_eq!(p.reason.as_deref(), Some(RS_UPDATED));
        assert_eq!(
            p.message.as_deref(),
            Some("ReplicaSet \"web-5d8f7c9b6\" is progressing.")
        );
        assert_eq!(p.last_transition_time, Some(t1.clone()));
        assert_eq!(p.last_update_time, Some(t2.clone()));
        assert_eq!(cond(&s2, "Available").status, "False");

        // All three available: complete and available.
        let t3 = time("2026-01-01T00:00:03Z");
        let d = deploy_object(pct.clone(), Some(s2));
        let s3 = deployment_status(&d, &rs, &rs_status(3, 3, 0), &t3);
        assert_eq!(
            (
                s3.replicas,
                s3.updated_replicas,
                s3.ready_replicas,
                s3.available_replicas
            ),
            (Some(3), Some(3), Some(3), Some(3))
        );
        assert_eq!(s3.unavailable_replicas, None);
        let p = cond(&s3, "Progressing");
        assert_eq!(p.reason.as_deref(), Some(NEW_RS_AVAILABLE));
        assert_eq!(
            p.message.as_deref(),
            Some("ReplicaSet \"web-5d8f7c9b6\" has successfully progressed.")
        );
        let a = cond(&s3, "Available");
        assert_eq!(
            (a.status.as_str(), a.reason.as_deref(), a.message.as_deref()),
            (
                "True",
                Some("MinimumReplicasAvailable"),
                Some("Deployment has minimum availability.")
            )
        );
        assert_eq!(a.last_transition_time, Some(t3.clone()));
        // Kube's order: Available, then the Progressing condition set last.
        assert_eq!(s3.conditions.as_ref().unwrap()[1].type_, "Progressing");

        // A drain evicts one: the dip shows in the counts and in Available only (with 3
        // replicas at 25%, none may be unavailable).
        let t4 = time("2026-01-01T00:00:04Z");
        let d = deploy_object(pct.clone(), Some(s3.clone()));
        let s4 = deployment_status(&d, &rs, &rs_status(2, 2, 1), &t4);
        assert_eq!(s4.available_replicas, Some(2));
        assert_eq!(s4.unavailable_replicas, Some(1));
        assert_eq!(s4.terminating_replicas, Some(1));
        assert_eq!(cond(&s4, "Available").status, "False");
        assert_eq!(cond(&s4, "Progressing"), cond(&s3, "Progressing"));
        // With 25% of 4 allowed down, the same dip keeps it Available.
        let mut d4 = deploy_object(pct.clone(), Some(s3));
        d4.spec.as_mut().unwrap().replicas = Some(4);
        let s = deployment_status(&d4, &rs, &rs_status(4, 3, 0), &t4);
        assert_eq!(cond(&s, "Available").status, "True");

        // The replacement is Ready: recovered.
        let t5 = time("2026-01-01T00:00:05Z");
        let d = deploy_object(pct.clone(), Some(s4));
        let s5 = deployment_status(&d, &rs, &rs_status(3, 3, 0), &t5);
        assert_eq!(s5.unavailable_replicas, None);
        assert_eq!(cond(&s5, "Available").status, "True");
        assert_eq!(cond(&s5, "Available").last_transition_time, Some(t5));
        assert_eq!(
            cond(&s5, "Progressing").reason.as_deref(),
            Some(NEW_RS_AVAILABLE)
        );
    }

    #[test]
    fn deployment_status_without_a_deadline_has_no_progressing_condition() {
        let rs = rs_object(None);
        let mut d = deploy_object(rolling(json!("25%"), json!("25%")), None);
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(i32::MAX);
        let s = deployment_status(&d, &rs, &rs_status(3, 3, 0), &time(T0));
        let types: Vec<_> = s.conditions.unwrap().into_iter().map(|c| c.type_).collect();
        assert_eq!(types, ["Available"]);
        // A ReplicaSet never synced by a controller counts no terminating replicas.
        let mut unsynced = rs_status(3, 3, 0);
        unsynced.observed_generation = None;
        unsynced.terminating_replicas = None;
        let s = deployment_status(&d, &rs, &unsynced, &time(T0));
        assert_eq!(s.terminating_replicas, Some(0));
        unsynced.observed_generation = Some(1);
        let s = deployment_status(&d, &rs, &unsynced, &time(T0));
        assert_eq!(s.terminating_replicas, None);
    }

    #[test]
    fn daemonset_status_counts_nodes_pods_and_readiness() {
        let mut ds: DaemonSet = objects::typed("ds", daemonset()).unwrap();
        ds.metadata.generation = Some(2);
        let nodes = [
            node("worker-0", true, true, false),
            node("worker-1", true, true, true),
            node("worker-2", true, false, false),
        ];
        let pods = [
            pod(ds_pod("worker-0", "u"), T0, true, false),
            // Cordoned: still runs its daemon pod.
            pod(ds_pod("worker-1", "u"), T0, false, false),
            // Its node is gone: not counted at all.
            pod(ds_pod("vanished", "u"), T0, true, false),
        ];
        let s = daemonset_status(&ds, &nodes, &pods);
        assert_eq!(s.desired_number_scheduled, 3);
        assert_eq!(s.current_number_scheduled, 2);
        assert_eq!(s.number_ready, 1);
        assert_eq!(s.number_available, Some(1));
        assert_eq!(s.number_unavailable, Some(2));
        assert_eq!(s.updated_number_scheduled, Some(2));
        assert_eq!(s.number_misscheduled, 0);
        assert_eq!(s.observed_generation, Some(2));
        // All there and Ready: nothing unavailable, left out as Go leaves a zero out; the
        // four required counts are always written.
        let s = daemonset_status(&ds, &nodes[..1], &pods[..1]);
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                   "numberMisscheduled": 0, "numberReady": 1, "numberAvailable": 1,
                   "updatedNumberScheduled": 1, "observedGeneration": 2})
        );
        let s = daemonset_status(&ds, &[] as &[Node], &[] as &[Pod]);
        assert_eq!(s.desired_number_scheduled, 0);
        assert_eq!(s.number_unavailable, None);
    }

    #[test]
    fn status_patches_null_the_fields_left_out() {
        let p = status_patch(&rs_status(2, 0, 0), RS_FIELDS);
        assert_eq!(p["status"]["replicas"], json!(2));
        assert_eq!(p["status"]["readyReplicas"], Value::Null);
        assert!(
            p["status"]
                .as_object()
                .unwrap()
                .contains_key("availableReplicas")
        );
        assert_eq!(p["status"].as_object().unwrap().len(), RS_FIELDS.len());
    }

    #[test]
    fn objects_are_typed_and_owned() {
        let p: Pod = objects::typed("pod", web_pod("web-x", "worker-0", "uid-1")).unwrap();
        let owner = &p.metadata.owner_references.unwrap()[0];
        assert_eq!(owner.kind, "ReplicaSet");
        assert_eq!(owner.uid, "uid-1");
        let b: PodDisruptionBudget = objects::typed("pdb", pdb()).unwrap();
        assert_eq!(
            b.spec.unwrap().min_available,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
        );
        let d: DaemonSet = objects::typed("ds", daemonset()).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some(DS_NAME));
        let s = running_status("web", "img", "2026-01-01T00:00:00Z");
        assert_eq!(s["status"]["phase"], "Running");
        assert_eq!(s["status"]["containerStatuses"][0]["ready"], true);
    }
}
