//! MachineConfigNode lifecycle: one v1alpha1 MCN per Node, named after it and owned by it, whose
//! `spec` follows the node's pool and desired config. The daemon owns `status` (except the drain
//! conditions, see the drain controller).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource};
use mco_api::constants::names;
use mco_api::mcn::served::Served;
use mco_api::{
    MachineConfigNode, MachineConfigNodeSpec, MachineConfigNodeSpecConfigVersion,
    MachineConfigPool, ObjectName,
};
use mco_rollout::plan;
use serde_json::json;

use crate::Error;
use crate::ctx::Ctx;

/// The MCN spec a node should have: its primary pool (or `not-yet-set`) and its desired config
/// (or `not-yet-set` until the controller targets it).
pub fn desired_spec<P: std::borrow::Borrow<MachineConfigPool>>(
    node: &Node,
    pools: &[P],
) -> MachineConfigNodeSpec {
    let name = node.metadata.name.clone().unwrap_or_default();
    let membership = plan::assign_pools(std::slice::from_ref(node), pools);
    let pool = membership
        .primary
        .get(&name)
        .cloned()
        .unwrap_or_else(|| names::NOT_YET_SET.to_string());
    let desired = match plan::desired_config(node) {
        "" => names::NOT_YET_SET.to_string(),
        d => d.to_string(),
    };
    MachineConfigNodeSpec {
        node: ObjectName { name: name.clone() },
        node_ref: Some(ObjectName { name }),
        pool: ObjectName { name: pool },
        config_version: MachineConfigNodeSpecConfigVersion { desired },
        config_image: None,
    }
}

fn owner(node: &Node) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

fn owned_by(mcn: &MachineConfigNode, node: &Node) -> bool {
    mcn.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.kind == "Node" && Some(&o.uid) == node.metadata.uid.as_ref())
}

/// Whether the MCN's spec or owner differ from what the node calls for. A `not-yet-set` desired
/// config never overrides one already set. Only the fields the served schema has count: on a
/// CRD without `nodeRef` (or `node`), its absence is no difference.
fn needs_write(
    mcn: &MachineConfigNode,
    node: &Node,
    spec: &MachineConfigNodeSpec,
    served: &Served,
) -> bool {
    let mut spec = spec.clone();
    if spec.config_version.desired == names::NOT_YET_SET {
        spec.config_version.desired = mcn.spec.config_version.desired.clone();
    }
    // Fields mco does not fill are the object's own.
    spec.config_image = mcn.spec.config_image.clone();
    if !served.has(&["spec", "nodeRef"]) {
        spec.node_ref = mcn.spec.node_ref.clone();
    }
    if !served.has(&["spec", "node"]) {
        spec.node = mcn.spec.node.clone();
    }
    mcn.spec != spec || !owned_by(mcn, node)
}

/// Create or update one node's MCN.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = desired_spec(&node, &ctx.pools.state());
    let api = &ctx.mcn_api;
    let served = api.served().await?.clone();
    let current = match ctx.known_mcn(&name) {
        Some(m) => Some(m),
        None => api.get_opt(&name).await?.map(Arc::new),
    };
    match current {
        None => {
            let mcn = MachineConfigNode {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    owner_references: Some(vec![owner(&node)]),
                    ..Default::default()
                },
                spec,
                status: None,
            };
            match api.create(&PostParams::default(), &mcn).await {
                Ok(_) => tracing::debug!(node = %name, "created MachineConfigNode"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Some(mcn) => {
            // The cache often lags the rollout controller's own MCN write for the same change;
            // confirm a difference against the server (a read is far cheaper than a write and
            // its watch event) before writing.
            let mcn = if needs_write(&mcn, &node, &spec, &served) {
                match api.get_opt(&name).await? {
                    Some(live) => Arc::new(live),
                    None => return Ok(Action::requeue(ctx.config.error_requeue)),
                }
            } else {
                mcn
            };
            if needs_write(&mcn, &node, &spec, &served) {
                let mut spec = spec;
                // Keep a desired config the rollout controller set but the node cache has not
                // shown yet.
                if spec.config_version.desired == names::NOT_YET_SET {
                    spec.config_version.desired = mcn.spec.config_version.desired.clone();
                }
                // The spec fields mco owns: upstream's `configImage` is left as it is.
                spec.config_image = None;
                let mut patch = json!({"spec": spec});
                if !owned_by(&mcn, &node) {
                    patch["metadata"] = json!({"ownerReferences": [owner(&node)]});
                }
                let written = api
                    .merge_patch(&name, &PatchParams::default(), patch)
                    .await?;
                ctx.wrote_mcn(written);
            }
        }
    }
    Ok(Action::requeue(ctx.config.resync))
}

/// Delete MCNs whose node is gone (a real cluster's garbage collector would too, through the
/// ownerReference; the embedded one may not).
pub async fn sweep_orphans(ctx: Arc<Ctx>) {
    let api = &ctx.mcn_api;
    loop {
        tokio::time::sleep(ctx.config.resync.min(std::time::Duration::from_secs(10))).await;
        for mcn in ctx.mcns.state() {
            let name = mcn.meta().name.clone().unwrap_or_default();
            if ctx.nodes.get(&ObjectRef::new(&name)).is_some() {
                continue;
            }
            // Confirm against the server: the node cache may lag a node just created.
            match Api::<Node>::all(ctx.client.clone()).get_opt(&name).await {
                Ok(None) => {
                    tracing::info!(node = %name, "deleting MachineConfigNode of a deleted node");
                    if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
                        tracing::warn!(node = %name, error = %e, "deleting MachineConfigNode");
                    }
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!(error = %e, "checking node of MachineConfigNode"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use mco_api::MachineConfigPoolSpec;
    use mco_api::constants::annotations;

    fn pool(name: &str) -> MachineConfigPool {
        MachineConfigPool::new(
            name,
            MachineConfigPoolSpec {
                node_selector: Some(LabelSelector {
                    match_labels: Some(
                        [(format!("node-role.kubernetes.io/{name}"), String::new())].into(),
                    ),
                    match_expressions: None,
                }),
                ..Default::default()
            },
        )
    }

    fn node(role: &str, desired: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels =
            Some([(format!("node-role.kubernetes.io/{role}"), String::new())].into());
        if let Some(d) = desired {
            n.metadata.annotations =
                Some([(annotations::DESIRED_CONFIG.to_string(), d.to_string())].into());
        }
        n
    }

    #[test]
    fn new_node_gets_not_yet_set() {
        let s = desired_spec(&node("worker", None), &[pool("worker")]);
        assert_eq!(s.node.name, "n1");
        assert_eq!(s.node_ref.unwrap().name, "n1");
        assert_eq!(s.pool.name, "worker");
        assert_eq!(s.config_version.desired, names::NOT_YET_SET);
    }

    #[test]
    fn pool_follows_the_node() {
        let pools = [pool("worker"), pool("infra")];
        let mut n = node("worker", Some("rendered-worker-1"));
        assert_eq!(desired_spec(&n, &pools).pool.name, "worker");
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("node-role.kubernetes.io/infra".into(), String::new());
        let s = desired_spec(&n, &pools);
        assert_eq!(s.pool.name, "infra");
        assert_eq!(s.config_version.desired, "rendered-worker-1");
    }

    #[test]
    fn node_in_no_pool_says_not_yet_set() {
        let s = desired_spec(&node("gpu", None), &[pool("worker")]);
        assert_eq!(s.pool.name, names::NOT_YET_SET);
    }
}
