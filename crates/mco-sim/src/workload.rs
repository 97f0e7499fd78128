//! Workloads, so that drains are real: a DaemonSet pod on every node (drains skip it), and a
//! `web` Deployment of 3 replicas behind a PodDisruptionBudget of `minAvailable: 2` (drains
//! must evict them one at a time and wait for replacements).
//!
//! There is no scheduler or kubelet in the embedded cluster, so [`run`] plays both for these
//! objects: it keeps one DaemonSet pod per node, recreates missing web pods on schedulable
//! nodes, and marks new pods Running and Ready after a short start-up delay.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, future, stream};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::error::Result;
use crate::objects::{self, ensure};

/// Namespace of the DaemonSet.
pub const DS_NAMESPACE: &str = "kube-system";
/// The DaemonSet.
pub const DS_NAME: &str = "node-agent";
/// Namespace of the Deployment and its PDB.
pub const WEB_NAMESPACE: &str = "default";
/// The Deployment.
pub const WEB_NAME: &str = "web";
/// Its replicas.
pub const WEB_REPLICAS: usize = 3;
/// Its ReplicaSet (a fixed template hash: the template never changes).
pub const WEB_RS: &str = "web-5d8f7c9b6";
/// Its PDB's `minAvailable`.
pub const WEB_MIN_AVAILABLE: i32 = 2;

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

/// The workload objects' owners, created once.
struct Owners {
    ds_uid: String,
    rs_uid: String,
}

async fn ensure_objects(client: &kube::Client) -> Result<Owners> {
    let ds: DaemonSet = objects::typed("daemonset", daemonset())?;
    let ds = ensure(&Api::namespaced(client.clone(), DS_NAMESPACE), &ds).await?;
    let dep: Deployment = objects::typed("deployment", deployment())?;
    let dep = ensure(&Api::namespaced(client.clone(), WEB_NAMESPACE), &dep).await?;
    let rs: ReplicaSet = objects::typed("replicaset", replicaset(&dep.uid().unwrap_or_default()))?;
    let rs = ensure(&Api::namespaced(client.clone(), WEB_NAMESPACE), &rs).await?;
    let pdb: PodDisruptionBudget = objects::typed("pdb", pdb())?;
    ensure(&Api::namespaced(client.clone(), WEB_NAMESPACE), &pdb).await?;
    Ok(Owners {
        ds_uid: ds.meta().uid.clone().unwrap_or_default(),
        rs_uid: rs.meta().uid.clone().unwrap_or_default(),
    })
}

/// Keeps the workloads until `stop` becomes true.
///
/// Nodes and DaemonSet pods come from watch-fed caches rather than a LIST per pass: with a
/// thousand nodes, listing them every pass made list handling about a third of the API
/// server's CPU. Web pods are still listed each pass (a handful, in one namespace) because
/// their creates are not idempotent: a cache that has not yet seen a create could add a 4th.
pub async fn run(client: kube::Client, timing: WorkloadTiming, mut stop: watch::Receiver<bool>) {
    let (nodes, nodes_w) = reflector::store::<Node>();
    let (ds_pods, ds_pods_w) = reflector::store::<Pod>();
    let changed = Notify::new();
    let ds_cfg = watcher::Config::default().labels(&format!("app={DS_NAME}"));
    tokio::select! {
        _ = reflect(Api::all(client.clone()), watcher::Config::default(), nodes_w, &changed) => {}
        _ = reflect(Api::namespaced(client.clone(), DS_NAMESPACE), ds_cfg, ds_pods_w, &changed) => {}
        _ = passes(&client, timing, &nodes, &ds_pods, &changed) => {}
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
async fn passes(
    client: &kube::Client,
    timing: WorkloadTiming,
    nodes: &Store<Node>,
    ds_pods: &Store<Pod>,
    changed: &Notify,
) {
    // Both stores fail only when their writer is gone, which ends `run` anyway.
    let _ = tokio::join!(nodes.wait_until_ready(), ds_pods.wait_until_ready());
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
            && let Err(e) = reconcile(client, o, timing, nodes, ds_pods).await
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
    /// `(namespace, name)` of pods whose node is gone.
    deletes: Vec<(String, String)>,
    /// Pods started long enough ago on a Ready node.
    ready: Vec<ReadyPatch>,
}

/// Decides a pass: one DaemonSet pod per node, [`WEB_REPLICAS`] live web pods on schedulable
/// nodes, pods of vanished nodes deleted, and pods older than `start_delay` on Ready nodes
/// marked Ready (the kubelet's part).
fn plan<N: Borrow<Node>, P: Borrow<Pod>>(
    nodes: &[N],
    ds_pods: &[P],
    web_pods: &[Pod],
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
    let mut live = 0;
    for p in web_pods {
        let on = node_of(p);
        if !names.contains(&on) {
            out.deletes.push(delete(p));
            continue;
        }
        if terminating(p) {
            continue;
        }
        live += 1;
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
    for _ in live..WEB_REPLICAS {
        if worker_starting && no_worker_yet {
            break;
        }
        let Some(node) = pick_node(&candidates, &load) else {
            break;
        };
        *load.entry(node.clone()).or_default() += 1;
        out.web_creates.push(node);
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
    nodes: &Store<Node>,
    ds_pods: &Store<Pod>,
) -> Result<()> {
    let web: Api<Pod> = Api::namespaced(client.clone(), WEB_NAMESPACE);
    let web_pods = web
        .list(&ListParams::default().labels(&format!("app={WEB_NAME}")))
        .await?
        .items;
    let plan = plan(
        &nodes.state(),
        &ds_pods.state(),
        &web_pods,
        jiff::Timestamp::now(),
        timing.start_delay,
    );

    let ds_api: Api<Pod> = Api::namespaced(client.clone(), DS_NAMESPACE);
    let mut creates = Vec::new();
    for n in &plan.ds_creates {
        let pod: Pod = objects::typed("pod", ds_pod(n, &owners.ds_uid))?;
        creates.push((&ds_api, pod));
    }
    for n in &plan.web_creates {
        let name = format!("{WEB_RS}-{}", suffix());
        let pod: Pod = objects::typed("pod", web_pod(&name, n, &owners.rs_uid))?;
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
    let (c, d, p) = tokio::join!(create_results, delete_results, patch_results);
    c?;
    d?;
    p?;
    Ok(())
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
        let p = plan(&nodes, &ds, &webs, at(T0), Duration::from_secs(1));
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
        let p = plan(&nodes, &[] as &[Pod], &webs, at(T0), Duration::from_secs(1));
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
            at(T0),
            Duration::from_secs(1),
        );
        assert!(p.web_creates.is_empty(), "{:?}", p.web_creates);

        let cordoned = [master.clone(), node("worker-0", true, false, true)];
        let p = plan(
            &cordoned,
            &[] as &[Pod],
            &[],
            at(T0),
            Duration::from_secs(1),
        );
        assert_eq!(p.web_creates, ["master-0"; 3]);

        let p = plan(
            &[master],
            &[] as &[Pod],
            &[],
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
