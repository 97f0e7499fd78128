//! The objects a fresh embedded cluster starts with, and the simulated nodes' Node objects.
//!
//! Builders are pure (JSON in the exact upstream shape); [`ensure`] creates an object unless it
//! exists, so a restarted cluster keeps whatever the user changed.

use std::fmt::Debug;

use kube::api::{Api, PostParams};
use kube::core::NamespaceResourceScope;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use mco_api::constants::{annotations, labels, names, states};

use crate::error::{Result, SimError};
use crate::spec::NodeSpec;

/// Label on every simulated Node, so tools can tell them from real ones.
pub const SIMULATED_LABEL: &str = "mco.sim/simulated";
/// The kubelet version simulated nodes report.
pub const KUBELET_VERSION: &str = "v1.27.6+sim";
/// The role label a pool's nodes carry.
pub fn node_role_label(pool: &str) -> String {
    format!("{}{pool}", labels::NODE_ROLE_PREFIX)
}

/// Turns builder JSON into a typed object.
pub fn typed<K: DeserializeOwned>(what: &str, v: Value) -> Result<K> {
    serde_json::from_value(v).map_err(|e| SimError::Json {
        what: what.to_string(),
        source: e,
    })
}

/// Creates `obj` unless an object of that name exists; returns the stored object.
pub async fn ensure<K>(api: &Api<K>, obj: &K) -> Result<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await? {
        return Ok(existing);
    }
    match api.create(&PostParams::default(), obj).await {
        Ok(o) => Ok(o),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get(&name).await?),
        Err(e) => Err(e.into()),
    }
}

/// Like [`ensure`] for namespaced objects (same behaviour; the bound documents the scope).
pub async fn ensure_namespaced<K>(api: &Api<K>, obj: &K) -> Result<K>
where
    K: kube::Resource<Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug,
{
    ensure(api, obj).await
}

/// The service IP of the simulated cluster's DNS, as OpenShift's default service network has it.
pub const CLUSTER_DNS_IP: &str = "172.30.0.10";
/// The pause image CRI-O is configured with on simulated nodes.
pub const INFRA_IMAGE: &str = "registry.example.com/sim/pause:1";

/// The ControllerConfig `machine-config-controller`: the cluster's default OS image and the
/// inputs of the template controller, which writes each role's base configs from it
/// (platform `None`).
pub fn controller_config(os_image: &str) -> Value {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "ControllerConfig",
        "metadata": {"name": names::CONTROLLER_CONFIG},
        "spec": {
            "osImageURL": os_image,
            "clusterDNSIP": CLUSTER_DNS_IP,
            "images": {"infraImageKey": INFRA_IMAGE},
            "ipFamilies": "IPv4",
            "infra": {"status": {"platformStatus": {"type": "None"}}},
        }
    })
}

/// Upstream's default pool `master` or `worker` (MCO `manifests/<pool>.machineconfigpool.yaml`).
pub fn pool(name: &str) -> Value {
    let mut pool_labels = serde_json::Map::new();
    pool_labels.insert(labels::MCO_BUILT_IN.into(), json!(""));
    pool_labels.insert(
        format!("pools.operator.machineconfiguration.openshift.io/{name}"),
        json!(""),
    );
    if name == names::MASTER_POOL {
        pool_labels.insert(
            "operator.machineconfiguration.openshift.io/required-for-upgrade".into(),
            json!(""),
        );
    }
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": name, "labels": pool_labels},
        "spec": {
            "machineConfigSelector": {"matchLabels": {labels::ROLE: name}},
            "nodeSelector": {"matchLabels": {node_role_label(name): ""}}
        }
    })
}

fn mc(name: &str, role: &str, config: Value) -> Value {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {labels::ROLE: role}},
        "spec": {"config": config}
    })
}

/// `99-<role>-ssh`: the `core` user's SSH key, as the installer creates it.
pub fn ssh_config(role: &str) -> Value {
    mc(
        &format!("99-{role}-ssh"),
        role,
        json!({
            "ignition": {"version": "3.2.0"},
            "passwd": {"users": [{
                "name": "core",
                "sshAuthorizedKeys": [
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMcoSimulatedClusterKey00000000000000000 admin@mco.sim"
                ]
            }]}
        }),
    )
}

/// The annotations a node joins with, as upstream's bootstrap (MCS `node-annotations.json`)
/// writes them: current and desired config are the config it was provisioned with, and in
/// on-cluster image mode current and desired image its image (`image` not empty).
pub fn join_annotations(rendered: &str, image: &str) -> Value {
    let mut a = json!({
        annotations::CURRENT_CONFIG: rendered,
        annotations::DESIRED_CONFIG: rendered,
        annotations::STATE: states::DONE,
    });
    if !image.is_empty() {
        a[annotations::CURRENT_IMAGE] = json!(image);
        a[annotations::DESIRED_IMAGE] = json!(image);
    }
    a
}

/// A simulated node's Node object (metadata and spec; status is written separately through
/// the status subresource, as kubelet does).
pub fn node(spec: &NodeSpec, rendered: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": {
                "kubernetes.io/hostname": spec.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                node_role_label(&spec.pool): "",
                labels::ZONE: zone_label(&spec.zone),
                "topology.kubernetes.io/region": "sim",
                SIMULATED_LABEL: "true",
            },
            "annotations": join_annotations(rendered, image),
        },
        "spec": {}
    })
}

/// `topology.kubernetes.io/zone` value for zone suffix `a`.
pub fn zone_label(zone: &str) -> String {
    format!("sim-{zone}")
}

/// A node's status as kubelet posts it: the Ready condition and nodeInfo.
pub fn node_status(ready: bool, os_image: &str, boot_id: &str, now: &str) -> Value {
    let (status, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        (
            "False",
            "KubeletNotReady",
            "node is rebooting: container runtime network not ready",
        )
    };
    json!({
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }],
            // A real scheduler places pods only where they fit; the daemon pins images only
            // where 16Gi of ephemeral storage are allocatable.
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "120Gi"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "110Gi"},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": boot_id,
                "containerRuntimeVersion": "cri-o://1.27.1-sim",
                "kernelVersion": "5.14.0-284.sim.x86_64",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": boot_id.replace('-', ""),
                "operatingSystem": "linux",
                "osImage": os_image,
                "systemUUID": boot_id,
            }
        }
    })
}

/// Now, as Kubernetes writes a `MicroTime` (a Lease's `renewTime`).
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Now, as Kubernetes writes times.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use mco_api::{ControllerConfig, MachineConfig, MachineConfigPool};

    #[test]
    fn builders_are_valid_typed_objects() {
        let cc: ControllerConfig = typed("cc", controller_config("img:1")).unwrap();
        assert_eq!(cc.spec.default_os_image(), "img:1");
        // The templates take it: the simulated cluster's base configs come from it.
        let base = mco_generate::template::generate(&cc, &Default::default(), "v").unwrap();
        assert_eq!(base.len(), 6);
        for role in ["master", "worker"] {
            let p: MachineConfigPool = typed("pool", pool(role)).unwrap();
            let sel = p.spec.node_selector.unwrap().match_labels.unwrap();
            assert!(sel.contains_key(&format!("node-role.kubernetes.io/{role}")));
            let ssh: MachineConfig = typed("mc", ssh_config(role)).unwrap();
            assert_eq!(ssh.metadata.labels.unwrap()[labels::ROLE], role);
        }
        let master: MachineConfigPool = typed("pool", pool("master")).unwrap();
        assert!(
            master
                .metadata
                .labels
                .unwrap()
                .contains_key("operator.machineconfiguration.openshift.io/required-for-upgrade")
        );
    }

    #[test]
    fn node_joins_done_with_role_and_zone() {
        let spec = NodeSpec {
            name: "worker-1".into(),
            pool: "worker".into(),
            os: "uos".into(),
            skip_firstboot_os: false,
            zone: "b".into(),
        };
        let n: Node = typed("node", node(&spec, "rendered-worker-abc", "")).unwrap();
        let l = n.metadata.labels.unwrap();
        assert_eq!(l["node-role.kubernetes.io/worker"], "");
        assert_eq!(l["topology.kubernetes.io/zone"], "sim-b");
        let a = n.metadata.annotations.unwrap();
        assert_eq!(a[annotations::STATE], "Done");
        assert_eq!(a[annotations::DESIRED_CONFIG], "rendered-worker-abc");
        assert!(!a.contains_key(annotations::CURRENT_IMAGE));
        // Provisioned in image mode: on its image from the start, as upstream's server says.
        let n: Node = typed(
            "node",
            node(&spec, "rendered-worker-abc", "registry.example/os@sha256:1"),
        )
        .unwrap();
        let a = n.metadata.annotations.unwrap();
        assert_eq!(
            a[annotations::CURRENT_IMAGE],
            "registry.example/os@sha256:1"
        );
        assert_eq!(
            a[annotations::DESIRED_IMAGE],
            "registry.example/os@sha256:1"
        );
        let st = node_status(false, "UOS Server 20", "id-1", "2026-01-01T00:00:00Z");
        assert_eq!(st["status"]["conditions"][0]["status"], "False");
        assert_eq!(st["status"]["nodeInfo"]["osImage"], "UOS Server 20");
    }
}
