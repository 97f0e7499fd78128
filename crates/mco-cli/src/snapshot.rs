//! One consistent-enough read of every object the views need, so that report builders are pure
//! functions of it and tests can build one by hand.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use mco_api::constants::annotations;
use mco_api::{MachineConfig, MachineConfigNode, MachineConfigPool};

/// The objects `mco status` and `mco doctor` look at, and the time they were read.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When the objects were read; every "time spent" is measured against it.
    pub now: Timestamp,
    pub pools: Vec<Arc<MachineConfigPool>>,
    pub nodes: Vec<Arc<Node>>,
    pub mcns: Vec<Arc<MachineConfigNode>>,
    pub machine_configs: Vec<MachineConfig>,
    pub pods: Vec<Pod>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// Rollout policies; empty where the CRD is not installed.
    pub policies: Vec<Arc<mco_api::RolloutPolicy>>,
    /// Where each node and MachineConfigNode is, built at the first lookup: reports look every
    /// node up by name, and scans would make a fleet's report cost its size squared.
    pub index: NameIndex,
}

/// Positions in [`Snapshot::nodes`] and [`Snapshot::mcns`] by name. A lookup checks the name
/// at the position it gets and scans when that fails, so a snapshot changed after its first
/// lookup is still read right. A clone starts empty: the clone may be changed.
#[derive(Default)]
pub struct NameIndex {
    nodes: OnceLock<HashMap<String, usize>>,
    mcns: OnceLock<HashMap<String, usize>>,
}

impl Clone for NameIndex {
    fn clone(&self) -> Self {
        NameIndex::default()
    }
}

impl std::fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameIndex")
    }
}

/// `items`' element named `name`, through `index`.
fn find<'a, K: kube::Resource>(
    items: &'a [Arc<K>],
    index: &OnceLock<HashMap<String, usize>>,
    name: &str,
) -> Option<&'a K> {
    let at = index.get_or_init(|| {
        items
            .iter()
            .enumerate()
            .map(|(i, o)| (name_of(o.as_ref()).to_string(), i))
            .collect()
    });
    let named = |o: &&Arc<K>| o.meta().name.as_deref() == Some(name);
    at.get(name)
        .and_then(|i| items.get(*i))
        .filter(named)
        .or_else(|| items.iter().find(named))
        .map(Arc::as_ref)
}

impl Snapshot {
    pub fn node(&self, name: &str) -> Option<&Node> {
        find(&self.nodes, &self.index.nodes, name)
    }

    pub fn mcn(&self, name: &str) -> Option<&MachineConfigNode> {
        find(&self.mcns, &self.index.mcns, name)
    }

    pub fn pool(&self, name: &str) -> Option<&MachineConfigPool> {
        self.pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(Arc::as_ref)
    }

    pub fn machine_config(&self, name: &str) -> Option<&MachineConfig> {
        self.machine_configs
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(name))
    }

    /// Pods scheduled on `node`.
    pub fn pods_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
        self.pods
            .iter()
            .filter(move |p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
    }

    /// node name → primary pool, with upstream's rules (see `mco_rollout::plan`).
    pub fn membership(&self) -> mco_rollout::plan::Membership {
        mco_rollout::plan::assign_pools(&self.nodes, &self.pools)
    }
}

/// The name of any object.
pub fn name_of<K: kube::Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or_default()
}

/// A node annotation, `""` when absent.
pub fn annotation<'a>(node: &'a Node, key: &str) -> &'a str {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .unwrap_or_default()
}

/// The facts about a node the views use, read from its annotations and spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub current: String,
    pub desired: String,
    /// The image-mode image the node runs and the one it goes to (empty outside image mode).
    pub current_image: String,
    pub desired_image: String,
    pub state: String,
    pub reason: String,
    pub unschedulable: bool,
    pub ready: bool,
}

impl NodeFacts {
    pub fn of(node: &Node) -> NodeFacts {
        NodeFacts {
            current: annotation(node, annotations::CURRENT_CONFIG).to_string(),
            desired: annotation(node, annotations::DESIRED_CONFIG).to_string(),
            current_image: annotation(node, annotations::CURRENT_IMAGE).to_string(),
            desired_image: annotation(node, annotations::DESIRED_IMAGE).to_string(),
            state: annotation(node, annotations::STATE).to_string(),
            reason: annotation(node, annotations::REASON).to_string(),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            ready: node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True"),
        }
    }
}

/// An MCN condition by type.
pub fn mcn_condition<'a>(mcn: &'a MachineConfigNode, type_: &str) -> Option<&'a Condition> {
    mcn.status.as_ref().and_then(|s| s.condition(type_))
}

/// Labels of a node, empty when it has none.
pub fn labels_of(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, state: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "annotations": {annotations::STATE: state}},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn lookups_by_name_stay_right_when_the_snapshot_changes_after_them() {
        let mut snap = Snapshot {
            nodes: vec![node("a", "Done"), node("b", "Done")],
            ..Snapshot::default()
        };
        assert_eq!(
            annotation(snap.node("b").unwrap(), annotations::STATE),
            "Done"
        );
        assert!(snap.node("c").is_none());
        assert!(snap.mcn("a").is_none());
        // Changed after the index was built: moved, replaced and added.
        snap.nodes.insert(0, node("c", "Working"));
        snap.nodes[2] = node("b", "Degraded");
        assert_eq!(
            annotation(snap.node("b").unwrap(), annotations::STATE),
            "Degraded"
        );
        assert_eq!(
            annotation(snap.node("c").unwrap(), annotations::STATE),
            "Working"
        );
        assert_eq!(name_of(snap.node("a").unwrap()), "a");
        // A clone indexes afresh.
        let mut copy = snap.clone();
        copy.nodes.retain(|n| name_of(n.as_ref()) != "c");
        assert!(copy.node("c").is_none());
        assert_eq!(name_of(copy.node("b").unwrap()), "b");
    }
}
