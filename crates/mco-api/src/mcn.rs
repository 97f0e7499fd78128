//! `MachineConfigNode` (v1alpha1): per-node update progress, in the shape operators read with
//! `kubectl get machineconfignodes`.

// Every `printcolumn(...)` repeats the same keys; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One per Node, with the same name, owned by the Node.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1alpha1",
    kind = "MachineConfigNode",
    plural = "machineconfignodes",
    singular = "machineconfignode",
    shortname = "mcn",
    status = "MachineConfigNodeStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineConfigNode describes the health of the Machines on the system",
    label("openshift.io/operator-managed", ""),
    selectable = ".spec.pool.name",
    selectable = ".spec.nodeRef.name",
    printcolumn(
        name = "Updated",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Updated")].status"#
    ),
    printcolumn(
        name = "UpdatePrepared",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="UpdatePrepared")].status"#
    ),
    printcolumn(
        name = "UpdateExecuted",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="UpdateExecuted")].status"#
    ),
    printcolumn(
        name = "UpdatePostActionCompleted",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="UpdatePostActionComplete")].status"#
    ),
    printcolumn(
        name = "UpdateCompleted",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="UpdateComplete")].status"#
    ),
    printcolumn(
        name = "Resumed",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Resumed")].status"#
    ),
    printcolumn(
        name = "UpdateCompatible",
        type_ = "string",
        priority = 1,
        json_path = r#".status.conditions[?(@.type=="UpdateCompatible")].status"#
    ),
    printcolumn(
        name = "UpdateFilesAndOS",
        type_ = "string",
        priority = 1,
        json_path = r#".status.conditions[?(@.type=="AppliedFilesAndOS")].status"#
    ),
    printcolumn(
        name = "DrainedNode",
        type_ = "string",
        priority = 1,
        json_path = r#".status.conditions[?(@.type=="Drained")].status"#
    ),
    printcolumn(
        name = "CordonedNode",
        type_ = "string",
        priority = 1,
        json_path = r#".status.conditions[?(@.type=="Cordoned")].status"#
    ),
    printcolumn(
        name = "RebootNode",
        type_ = "string",
        priority = 1,
        json_path = r#".status.conditions[?(@.type=="RebootedNode")].status"#
    ),
    printcolumn(
        name = "ReloadedCRIO",
        type_ = "string",
        priority = 1,
        json_path = r#".status.conditions[?(@.type=="ReloadedCRIO")].status"#
    ),
    printcolumn(
        name = "Uncordoned",
        type_ = "string",
        priority = 1,
        json_path = r#".status.conditions[?(@.type=="Uncordoned")].status"#
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigNodeSpec {
    /// The Node this object reports on.
    pub node_ref: ObjectName,
    /// The pool the node belongs to.
    pub pool: ObjectName,
    /// The config the controller targets; set before the daemon validates it.
    pub config_version: MachineConfigNodeSpecConfigVersion,
}

/// A reference by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ObjectName {
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct MachineConfigNodeSpecConfigVersion {
    pub desired: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigNodeStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_version: Option<MachineConfigNodeStatusConfigVersion>,
    /// `Healthy` or `Unhealthy`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub health: String,
    /// The last error the daemon hit, empty when healthy.
    #[serde(default)]
    pub most_recent_error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `desired` is only set once the daemon has validated the new config (UpdatePrepared=True).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct MachineConfigNodeStatusConfigVersion {
    #[serde(default)]
    pub current: String,
    #[serde(default)]
    pub desired: String,
}

impl MachineConfigNodeStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}
