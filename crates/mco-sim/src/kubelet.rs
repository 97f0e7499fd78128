//! The kubelet of the simulated nodes on an existing cluster (`mco up --kubeconfig`), for
//! those nodes only (Nodes with [`SIMULATED_LABEL`]): their heartbeat Leases, Running and
//! Ready status for the pods bound to them, and the confirmation of a graceful deletion (a
//! pod being deleted is deleted with `gracePeriodSeconds: 0` once its containers "stopped"),
//! so drains finish as they do with a real kubelet. The Nodes' status itself is the
//! supervisor's (`set_ready`), as on the embedded cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::error::Result;
use crate::external::External;
use crate::objects::{self, SIMULATED_LABEL};

/// Between two passes.
const TICK: Duration = Duration::from_secs(1);
/// How often a node's Lease is renewed (kubelet's default: a quarter of its 40 s duration).
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The Lease's duration, as kubelet sets it.
const LEASE_SECONDS: i32 = 40;
/// Where node Leases live.
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Runs until `stop` becomes true.
pub async fn run(admin: kube::Client, mut stop: watch::Receiver<bool>) {
    let mut renewed: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
    loop {
        if let Err(e) = pass(&admin, &mut renewed).await {
            tracing::warn!(error = %e, "simulated kubelet");
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
    }
}

async fn pass(
    admin: &kube::Client,
    renewed: &mut BTreeMap<String, tokio::time::Instant>,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(admin.clone());
    let sim = nodes
        .list(&ListParams::default().labels(&format!("{SIMULATED_LABEL}=true")))
        .await?;
    renewed.retain(|name, _| sim.items.iter().any(|n| n.name_any() == *name));
    for node in &sim.items {
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
    let pods: Api<Pod> = Api::all(admin.clone());
    for pod in pods.list(&ListParams::default()).await?.items {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if !sim.items.iter().any(|n| n.name_any() == node) {
            continue;
        }
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
        } else if !is_running_ready(&pod) {
            let status = running_status(&pod, &objects::now_rfc3339());
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
    }
    Ok(())
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
