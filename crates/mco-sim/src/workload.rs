//! Workloads, so that drains are real: a DaemonSet pod on every node (drains skip it), and a
//! `web` Deployment of 3 replicas behind a PodDisruptionBudget of `minAvailable: 2` (drains
//! must evict them one at a time and wait for replacements).
//!
//! There is no scheduler or kubelet in the embedded cluster, so [`run`] plays both for these
//! objects: it keeps one DaemonSet pod per node, recreates missing web pods on schedulable
//! nodes, and marks new pods Running and Ready after a short start-up delay.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

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
}

/// Where a new web pod goes: a schedulable worker with the fewest web pods (a master only when
/// no worker is schedulable), first by name on ties. `None` when no node can take it.
pub fn pick_node(candidates: &[Candidate], load: &BTreeMap<String, usize>) -> Option<String> {
    let any_worker = candidates.iter().any(|c| c.worker);
    candidates
        .iter()
        .filter(|c| c.worker || !any_worker)
        .min_by_key(|c| (load.get(&c.name).copied().unwrap_or(0), c.name.clone()))
        .map(|c| c.name.clone())
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn schedulable(n: &Node) -> bool {
    node_ready(n)
        && !n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
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
pub async fn run(client: kube::Client, timing: WorkloadTiming, mut stop: watch::Receiver<bool>) {
    let mut owners = None;
    loop {
        if owners.is_none() {
            match ensure_objects(&client).await {
                Ok(o) => owners = Some(o),
                Err(e) => tracing::warn!(error = %e, "creating workloads"),
            }
        }
        let started = tokio::time::Instant::now();
        if let Some(o) = &owners
            && let Err(e) = reconcile(&client, o, timing).await
        {
            tracing::debug!(error = %e, "workload reconcile");
        }
        // A pass lists every node and pod once: on a large fleet it takes a while, and ticking
        // right away would keep the API server busy with little else.
        let pause = timing.tick.max(started.elapsed().min(MAX_BACKOFF));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
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

/// One pass: every list is read once, then the writes it calls for go out concurrently.
async fn reconcile(client: &kube::Client, owners: &Owners, timing: WorkloadTiming) -> Result<()> {
    let lp = ListParams::default();
    let ds_pods: Api<Pod> = Api::namespaced(client.clone(), DS_NAMESPACE);
    let web: Api<Pod> = Api::namespaced(client.clone(), WEB_NAMESPACE);
    let ds_lp = ListParams::default().labels(&format!("app={DS_NAME}"));
    let web_lp = ListParams::default().labels(&format!("app={WEB_NAME}"));
    let nodes_api = Api::<Node>::all(client.clone());
    let (nodes, existing, web_pods) =
        tokio::try_join!(nodes_api.list(&lp), ds_pods.list(&ds_lp), web.list(&web_lp),)?;
    let nodes = nodes.items;
    let existing = existing.items;
    let web_pods = web_pods.items;
    let names: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    let ready_nodes: BTreeSet<String> = nodes
        .iter()
        .filter(|n| node_ready(n))
        .map(|n| n.name_any())
        .collect();
    let pp = PostParams::default();
    let dp = DeleteParams::default();

    // One DaemonSet pod per node; pods of vanished nodes go.
    let have: BTreeSet<String> = existing.iter().map(node_of).collect();
    let mut creates = Vec::new();
    for n in names.difference(&have) {
        let pod: Pod = objects::typed("pod", ds_pod(n, &owners.ds_uid))?;
        creates.push((ds_pods.clone(), pod));
    }
    let mut deletes = Vec::new();
    for p in &existing {
        if !names.contains(&node_of(p)) {
            deletes.push((ds_pods.clone(), p.name_any()));
        }
    }

    // Web pods: replace the missing ones, drop those on vanished nodes.
    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    let mut live = 0;
    for p in &web_pods {
        let on = node_of(p);
        if !names.contains(&on) {
            deletes.push((web.clone(), p.name_any()));
            continue;
        }
        if terminating(p) {
            continue;
        }
        live += 1;
        *load.entry(on).or_default() += 1;
    }
    let candidates: Vec<Candidate> = nodes
        .iter()
        .filter(|n| schedulable(n))
        .map(|n| Candidate {
            name: n.name_any(),
            worker: n.labels().contains_key(&objects::node_role_label("worker")),
        })
        .collect();
    for _ in live..WEB_REPLICAS {
        let Some(node) = pick_node(&candidates, &load) else {
            break;
        };
        let name = format!("{WEB_RS}-{}", suffix());
        let pod: Pod = objects::typed("pod", web_pod(&name, &node, &owners.rs_uid))?;
        creates.push((web.clone(), pod));
        *load.entry(node).or_default() += 1;
    }

    // The kubelet part: pods become Running and Ready once started.
    let now = jiff::Timestamp::now();
    let mut patches = Vec::new();
    for p in existing.iter().chain(&web_pods) {
        if pod_ready(p) || terminating(p) {
            continue;
        }
        let created = p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0);
        if now.as_second() - created < timing.start_delay.as_secs() as i64 {
            continue;
        }
        if !ready_nodes.contains(&node_of(p)) {
            continue;
        }
        let (container, image) = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
            .unwrap_or_default();
        let ns = p.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        patches.push((api, p.name_any(), container, image));
    }
    let stamp = objects::now_rfc3339();
    let (pp, dp) = (&pp, &dp);

    let create_results = run_bounded(
        creates
            .iter()
            .map(|(api, pod)| async move {
                match api.create(pp, pod).await {
                    // Already there (a racing pass) or refused: the next pass sees it.
                    Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .collect(),
    );
    let delete_results = run_bounded(
        deletes
            .iter()
            .map(|(api, name)| async move {
                let _ = api.delete(name, dp).await;
                Ok(())
            })
            .collect(),
    );
    let patch_results = run_bounded(
        patches
            .iter()
            .map(|(api, name, container, image)| {
                let stamp = &stamp;
                async move {
                    api.patch_status(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(&running_status(container, image, stamp)),
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
        }
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
