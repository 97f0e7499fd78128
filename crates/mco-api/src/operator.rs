//! `MachineConfiguration` (`operator.openshift.io/v1`), the singleton named `cluster` that carries
//! the administrator's node disruption policy. mco models only what it reads and writes; every
//! other upstream field (boot images, skew enforcement, the legacy operator fields) is kept as it
//! is.
//!
//! Policy actions are read loosely (any `type` string, optional service) so that an invalid
//! policy reaches the controller and is reported in a condition naming the field, instead of
//! failing to decode the whole object. Upstream's own CRD rejects such input at admission.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the operator configuration objects.
pub const OPERATOR_GROUP: &str = "operator.openshift.io";
/// The name of the one `MachineConfiguration` mco reads.
pub const MACHINE_CONFIGURATION_NAME: &str = "cluster";
/// Upstream's limit on user file and unit policies (each).
pub const MAX_SPEC_POLICIES: usize = 50;
/// Upstream's limit on merged file and unit policies (each).
pub const MAX_STATUS_POLICIES: usize = 100;
/// Upstream's limit on the actions of one policy.
pub const MAX_POLICY_ACTIONS: usize = 10;
/// Upstream's limit on a service name.
pub const MAX_SERVICE_NAME_LEN: usize = 255;

/// Operator configuration for machine configuration: the node disruption policy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operator.openshift.io",
    version = "v1",
    kind = "MachineConfiguration",
    plural = "machineconfigurations",
    singular = "machineconfiguration",
    status = "MachineConfigurationStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineConfiguration provides information to configure an operator to manage Machine Configuration."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MachineConfigurationSpec {
    /// `Managed` (or empty), `Unmanaged` or `Removed`; the last two stop the controller from
    /// publishing a new merged policy.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub management_state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_disruption_policy: Option<NodeDisruptionPolicyConfig>,
    /// Changes the daemon accepts on existing nodes although upstream calls them irreconcilable
    /// (4.20+, feature gate `IrreconcilableMachineConfig`). Never applied on first boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irreconcilable_validation_overrides: Option<IrreconcilableValidationOverrides>,
    /// Upstream fields mco does not use, kept as they are.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// `spec.irreconcilableValidationOverrides`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct IrreconcilableValidationOverrides {
    /// `Disks`, `FileSystems` and/or `Raid`: the `spec.config.storage` sections whose changes an
    /// existing node accepts (and leaves as they are on its disk).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "items" = {"type": "string", "enum": ["Disks", "FileSystems", "Raid"]},
        "x-kubernetes-list-type" = "set"
    ))]
    pub storage: Vec<String>,
}

/// The administrator's policies: files by path, units by name, and one for SSH keys.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDisruptionPolicyConfig {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub files: Vec<PolicyFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub units: Vec<PolicyUnit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sshkey: Option<PolicySshKey>,
}

/// Actions for changes to a file at, or under, `path`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PolicyFile {
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub path: String,
    #[serde(default)]
    #[schemars(length(max = 10))]
    pub actions: Vec<PolicyAction>,
}

/// Actions for changes to the systemd unit `name`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PolicyUnit {
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub name: String,
    #[serde(default)]
    #[schemars(length(max = 10))]
    pub actions: Vec<PolicyAction>,
}

/// Actions for any change of the core user's SSH keys.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PolicySshKey {
    #[serde(default)]
    #[schemars(length(max = 10))]
    pub actions: Vec<PolicyAction>,
}

/// One action as written: `{type: Restart, restart: {serviceName: chronyd.service}}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PolicyAction {
    #[serde(rename = "type", default)]
    #[schemars(length(max = 64))]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload: Option<PolicyService>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<PolicyService>,
}

/// The service a Reload or Restart acts on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyService {
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub service_name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MachineConfigurationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_disruption_policy_status: Option<NodeDisruptionPolicyStatus>,
    /// Upstream fields mco does not write, kept as they are.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDisruptionPolicyStatus {
    #[serde(default)]
    pub cluster_policies: NodeDisruptionPolicyClusterStatus,
}

/// The merged policies the daemons act on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NodeDisruptionPolicyClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub files: Vec<PolicyFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub units: Vec<PolicyUnit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sshkey: Option<PolicySshKey>,
}

impl MachineConfigurationSpec {
    /// Whether the controller may publish policies (`Managed`, or the field unset).
    pub fn managed(&self) -> bool {
        matches!(self.management_state.as_str(), "" | "Managed")
    }
}
