//! One consistent-enough read of every object the views need, so that report builders are pure
//! functions of it and tests can build one by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

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
}

impl Snapshot {
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .map(Arc::as_ref)
    }

    pub fn mcn(&self, name: &str) -> Option<&MachineConfigNode> {
        self.mcns
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .map(Arc::as_ref)
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
