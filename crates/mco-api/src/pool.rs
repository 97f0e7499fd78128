//! `MachineConfigPool` (v1): which MachineConfigs apply to which nodes, and how fast to roll out.

// Every `printcolumn(...)` repeats the same keys; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A group of nodes that share one rendered config.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "MachineConfigPool",
    plural = "machineconfigpools",
    singular = "machineconfigpool",
    shortname = "mcp",
    status = "MachineConfigPoolStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineConfigPool describes a pool of MachineConfigs.",
    label("openshift.io/operator-managed", ""),
    printcolumn(
        name = "Config",
        type_ = "string",
        json_path = ".status.configuration.name"
    ),
    printcolumn(
        name = "Updated",
        type_ = "string",
        description = "When all the machines in the pool are updated to the correct machine config.",
        json_path = r#".status.conditions[?(@.type=="Updated")].status"#
    ),
    printcolumn(
        name = "Updating",
        type_ = "string",
        description = "When at least one of machine is not either not updated or is in the process of updating to the desired machine config.",
        json_path = r#".status.conditions[?(@.type=="Updating")].status"#
    ),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        description = "When progress is blocked on updating one or more nodes or the pool configuration is failing.",
        json_path = r#".status.conditions[?(@.type=="Degraded")].status"#
    ),
    printcolumn(
        name = "MachineCount",
        type_ = "number",
        description = "Total number of machines in the machine config pool",
        json_path = ".status.machineCount"
    ),
    printcolumn(
        name = "ReadyMachineCount",
        type_ = "number",
        description = "Total number of ready machines targeted by the pool",
        json_path = ".status.readyMachineCount"
    ),
    printcolumn(
        name = "UpdatedMachineCount",
        type_ = "number",
        description = "Total number of machines targeted by the pool that have the CurrentMachineConfig as their config",
        json_path = ".status.updatedMachineCount"
    ),
    printcolumn(
        name = "DegradedMachineCount",
        type_ = "number",
        description = "Total number of machines marked degraded (or unreconcilable)",
        json_path = ".status.degradedMachineCount"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigPoolSpec {
    /// Selects the MachineConfigs merged into the pool's rendered config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_config_selector: Option<LabelSelector>,

    /// Selects the pool's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,

    /// A paused pool still renders but moves no node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// How many nodes may be unavailable at once: an integer or a percentage. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// The target rendered config, written by the render controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<PoolConfiguration>,

    /// The PinnedImageSets for the pool's nodes: those whose labels the pool's
    /// `machineConfigSelector` matches, sorted by name, written by the controller (as upstream's
    /// pinned-image-set controller does) for every pool whose selector is not empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub pinned_image_sets: Vec<crate::ObjectName>,
}

/// A rendered config and the MachineConfigs it was rendered from, in merge order.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolConfiguration {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source: Vec<k8s_openapi::api::core::v1::ObjectReference>,
}

/// Upstream's pool status. mco writes the counts, `configuration`, `observedGeneration`,
/// `conditions` and `poolSynchronizersStatus` ([`MachineConfigPoolStatus::OWNED`]) by merge
/// patch; every other field (`certExpirys`, written on its own, `osImageStream`, and any later
/// one) is kept.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MachineConfigPoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The config every node is on; copied from spec only when all nodes are updated and ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<PoolConfiguration>,
    #[serde(default)]
    pub machine_count: i32,
    #[serde(default)]
    pub updated_machine_count: i32,
    #[serde(default)]
    pub ready_machine_count: i32,
    #[serde(default)]
    pub unavailable_machine_count: i32,
    #[serde(default)]
    pub degraded_machine_count: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub conditions: Vec<MachineConfigPoolCondition>,
    /// Certificates of the pool's bundles and when they expire (written by upstream).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub cert_expirys: Vec<CertExpiry>,
    /// The pool synchronizers' counts: one entry, `PinnedImageSets`, with the pool's counts and,
    /// as `updatedMachineCount`, the nodes whose MachineConfigNode has every set it reports
    /// current.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["poolSynchronizerType"]))]
    pub pool_synchronizers_status: Vec<PoolSynchronizerStatus>,
    /// Upstream fields mco does not model, kept as they are.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// One certificate of a pool's CA bundles (upstream's `CertExpiry`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct CertExpiry {
    pub bundle: String,
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry: Option<String>,
}

/// Upstream's `PoolSynchronizerStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSynchronizerStatus {
    pub pool_synchronizer_type: String,
    #[serde(default)]
    pub machine_count: i64,
    #[serde(default)]
    pub updated_machine_count: i64,
    #[serde(default)]
    pub ready_machine_count: i64,
    #[serde(default)]
    pub available_machine_count: i64,
    #[serde(default)]
    pub unavailable_machine_count: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Upstream's pool condition: not `metav1.Condition` (no observedGeneration, reason optional).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigPoolCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl MachineConfigPoolStatus {
    /// The status fields mco computes and writes; the rest belong to other writers.
    pub const OWNED: [&'static str; 9] = [
        "observedGeneration",
        "configuration",
        "machineCount",
        "updatedMachineCount",
        "readyMachineCount",
        "unavailableMachineCount",
        "degradedMachineCount",
        "conditions",
        "poolSynchronizersStatus",
    ];

    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&MachineConfigPoolCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of the given type is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
}
