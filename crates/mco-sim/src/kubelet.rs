//! The kubelet of the simulated nodes on an existing cluster (`mco up --kubeconfig`), for
//! those nodes only (Nodes with [`SIMULATED_LABEL`]): their heartbeat Leases, Running and
//! Ready status for the pods bound to them, and the confirmation of a graceful deletion (a
//! pod being deleted is deleted with `gracePeriodSeconds: 0` once its containers "stopped"),
//! so drains finish as they do with a real kubelet. The Nodes' status itself is the
//! supervisor's (`set_ready`), as on the embedded cluster.

//!
//! Nodes and pods are followed by watches (a reflector each) rather than listed at every pass:
//! two LISTs a second, of every simulated Node and of every pod, were a steady load on the
//! control plane the rollout shares two cores with. A pod acted on is not acted on again until
//! the watch delivers a newer version of it.
//!
//! A pass runs when the watches bring a change, as a kubelet's pod workers act on what its
//! watch brings, at most every [`MIN_SPACING`], and at least every [`TICK`] for the Leases. A
//! pod being deleted is confirmed in the next pass (its containers "stop" at once); a new pod
//! is Running and Ready [`START_DELAY`] after its creation, as on the embedded cluster
//! ([`crate::workload::WorkloadTiming`]). On a one-second tick, an evicted pod waited half a
//! second on average for its confirmation, and the drain behind it as long.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::AbortOnDropHandle;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::error::Result;
use crate::external::External;
use crate::objects::{self, SIMULATED_LABEL};

/// The longest time between two passes.
const TICK: Duration = Duration::from_secs(1);
/// The shortest: a burst of watch events makes one pass, not one each.
const MIN_SPACING: Duration = Duration::from_millis(50);
/// From a pod's creation to its Running and Ready status.
const START_DELAY: Duration = Duration::from_secs(1);
/// How often a node's Lease is renewed (kubelet's default: a quarter of its 40 s duration).
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The Lease's duration, as kubelet sets it.
const LEASE_SECONDS: i32 = 40;
/// Where node Leases live.
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// A store of `api`'s objects (those `cfg` selects), kept by a watch in its own task, which
/// wakes `changed` on every event.
fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    changed: Arc<Notify>,
) -> (Store<K>, AbortOnDropHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher::watcher(api, cfg).default_backoff());
    let task = tokio::spawn(stream.for_each(move |ev| {
        match ev {
            Ok(_) => changed.notify_one(),
            Err(e) => tracing::warn!(error = %e, "simulated kubelet: watch"),
        }
        futures::future::ready(())
    }));
    (store, AbortOnDropHandle::new(task))
}

/// Runs until `stop` becomes true.
pub async fn run(admin: kube::Client, mut stop: watch::Receiver<bool>) {
    let changed = Arc::new(Notify::new());
    let (nodes, _nodes_task) = reflect(
        Api::<Node>::all(admin.clone()),
        watcher::Config::default().labels(&format!("{SIMULATED_LABEL}=true")),
        Arc::clone(&changed),
    );
    let (pods, _pods_task) = reflect(
        Api::<Pod>::all(admin.clone()),
        watcher::Config::default(),
        Arc::clone(&changed),
    );
    let mut renewed: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
    let mut acted: Acted = BTreeMap::new();
    let ready = async {
        let _ = nodes.wait_until_ready().await;
        let _ = pods.wait_until_ready().await;
    };
    tokio::select! {
        _ = ready => {}
        _ = stop.wait_for(|s| *s) => return,
    }
    loop {
        let started = tokio::time::Instant::now();
        let next = match pass(&admin, &nodes, &pods, &mut renewed, &mut acted).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(error = %e, "simulated kubelet");
                None
            }
        };
        let latest = started + next.map_or(TICK, |d| d.clamp(MIN_SPACING, TICK));
        tokio::select! {
            _ = tokio::time::sleep_until(started + MIN_SPACING) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(latest) => {}
            _ = changed.notified() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// The version of each pod (by uid) the kubelet last acted on: the watch may not have
/// delivered that write yet, and the same version is not acted on twice.
type Acted = BTreeMap<String, String>;

/// Whether `pod` is one to act on: a version not acted on yet.
fn due(pod: &Pod, acted: &Acted) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    acted.get(uid).map(String::as_str) != pod.metadata.resource_version.as_deref()
}

async fn pass(
    admin: &kube::Client,
    nodes: &Store<Node>,
    pods: &Store<Pod>,
    renewed: &mut BTreeMap<String, tokio::time::Instant>,
    acted: &mut Acted,
) -> Result<Option<Duration>> {
    let sim = nodes.state();
    let names: HashSet<String> = sim.iter().map(|n| n.name_any()).collect();
    renewed.retain(|name, _| names.contains(name));
    for node in &sim {
        let name = node.name_any();
        if renewed
            .get(&name)
            .is_some_and(|at| at.elapsed() < LEASE_RENEW)
        {
            continue;
        }
        renew_lease(admin, node).await?;
        renewed.insert(name, tokio::time::Instant::now());
    }
    let all = pods.state();
    let uids: HashSet<&str> = all
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    acted.retain(|uid, _| uids.contains(uid.as_str()));
    let (todo, next) = plan(&names, &all, acted, jiff::Timestamp::now());
    for pod in todo {
        let ns = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(admin.clone(), &ns);
        if pod.metadata.deletion_timestamp.is_some() {
            // Its containers have stopped: confirm the deletion, as kubelet does.
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.uid(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&pod.name_any(), &dp).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        } else {
            let status = running_status(pod, &objects::now_rfc3339());
            match api
                .patch_status(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let (Some(uid), Some(rv)) = (&pod.metadata.uid, &pod.metadata.resource_version) {
            acted.insert(uid.clone(), rv.clone());
        }
    }
    Ok(next)
}

/// What a pass does to the pods bound to the simulated nodes `names`, at `now`: confirm each
/// deletion, report each pod [`START_DELAY`] old Running and Ready; and how long until the
/// next pod comes of that age, if any waits.
fn plan<'a>(
    names: &HashSet<String>,
    pods: &'a [Arc<Pod>],
    acted: &Acted,
    now: jiff::Timestamp,
) -> (Vec<&'a Pod>, Option<Duration>) {
    let mut todo = Vec::new();
    let mut next: Option<Duration> = None;
    for pod in pods {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if !names.contains(node) || !due(pod, acted) {
            continue;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            todo.push(&**pod);
            continue;
        }
        if is_running_ready(pod) {
            continue;
        }
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let age = now.duration_since(created).unsigned_abs();
        match START_DELAY.checked_sub(age) {
            Some(wait) if !wait.is_zero() => {
                next = Some(next.map_or(wait, |n| n.min(wait)));
            }
            _ => todo.push(&**pod),
        }
    }
    (todo, next)
}

/// Renews a node's Lease with one PATCH, creating it when the PATCH finds none: reading it
/// first doubled the heartbeat traffic a real control plane serves (a GET and a PATCH per node
/// every 10 s).
async fn renew_lease(admin: &kube::Client, node: &Node) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), LEASE_NAMESPACE);
    let name = node.name_any();
    let now = objects::now_micro();
    let patch = json!({"spec": {"renewTime": now, "holderIdentity": name}});
    match leases
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    let lease: Lease = objects::typed(
        "lease",
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": LEASE_NAMESPACE,
                         "ownerReferences": [External::node_owner(node)]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS,
                     "renewTime": now}
        }),
    )?;
    match leases.create(&PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn is_running_ready(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// A pod's status once its containers run and pass readiness.
pub fn running_status(pod: &Pod, now: &str) -> Value {
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": "",
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    json!({
        "status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
            "containerStatuses": containers,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_pod_version_acted_on_is_not_due_again() {
        let at = |rv: &str| -> Pod {
            objects::typed(
                "pod",
                json!({"metadata": {"name": "p", "uid": "u", "resourceVersion": rv}}),
            )
            .unwrap()
        };
        let mut acted = Acted::new();
        assert!(due(&at("1"), &acted));
        acted.insert("u".into(), "1".into());
        assert!(
            !due(&at("1"), &acted),
            "the watch has not delivered the write yet"
        );
        assert!(due(&at("2"), &acted), "a newer version");
    }

    fn pod(name: &str, node: &str, created: &str) -> Arc<Pod> {
        Arc::new(
            objects::typed(
                "pod",
                json!({"metadata": {"name": name, "uid": name, "resourceVersion": "1",
                                    "creationTimestamp": created},
                       "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn a_pass_confirms_deletions_at_once_and_starts_pods_a_second_after_creation() {
        let names: HashSet<String> = ["sim-1".to_string()].into();
        let now: jiff::Timestamp = "2026-01-01T00:00:10.250Z".parse().unwrap();
        let deleting = {
            let mut p = (*pod("deleting", "sim-1", "2026-01-01T00:00:09Z")).clone();
            p.metadata.deletion_timestamp = Some(Time(now));
            Arc::new(p)
        };
        let pods = vec![
            pod("old", "sim-1", "2026-01-01T00:00:09Z"),
            // Created 1 s before now, to the second: due.
            pod("at-the-limit", "sim-1", "2026-01-01T00:00:09.250Z"),
            pod("young", "sim-1", "2026-01-01T00:00:10Z"),
            pod("other-node", "real-1", "2026-01-01T00:00:00Z"),
            deleting,
        ];
        let (todo, next) = plan(&names, &pods, &Acted::new(), now);
        let todo: Vec<&str> = todo
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(todo, ["old", "at-the-limit", "deleting"]);
        // The young pod is a second old 750 ms from now.
        assert_eq!(next, Some(Duration::from_millis(750)));

        // Acted on, not again until a newer version.
        let acted: Acted = todo
            .iter()
            .map(|n| (n.to_string(), "1".to_string()))
            .collect();
        let (todo, _) = plan(&names, &pods, &acted, now);
        assert!(todo.is_empty(), "{:?}", todo.len());
    }

    #[test]
    fn a_running_status_is_ready() {
        let pod: Pod = objects::typed(
            "pod",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .unwrap();
        assert!(!is_running_ready(&pod));
        let mut patched = serde_json::to_value(&pod).unwrap();
        patched["status"] = running_status(&pod, "2026-01-01T00:00:00Z")["status"].clone();
        let pod: Pod = serde_json::from_value(patched).unwrap();
        assert!(is_running_ready(&pod));
        assert!(pod.status.unwrap().container_statuses.unwrap()[0].ready);
    }
}
