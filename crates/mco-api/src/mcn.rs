//! `MachineConfigNode`: per-node update progress, in the shape operators read with
//! `kubectl get machineconfignodes`.
//!
//! mco's CRD serves `v1` (storage) and `v1alpha1` with one schema and no conversion, so the API
//! server only rewrites `apiVersion`: a stored object carries the fields of both shapes. The
//! node is named in upstream's `spec.node` and again in `spec.nodeRef`, the field the first
//! documented `v1alpha1` showed, and status keeps `health` and `mostRecentError` next to
//! upstream's fields. On a cluster with upstream's own CRD, [`served`] fits writes to
//! the schema installed there.

// Every `printcolumn(...)` repeats the same keys; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

#[cfg(feature = "client")]
pub mod client;
pub mod served;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One per Node, with the same name, owned by the Node.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
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
    selectable = ".spec.node.name",
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
    /// The Node this object reports on. Empty when read from an object that names it only in
    /// `nodeRef`, and then not written back (an empty name would name another node); not
    /// required by mco's CRD, so objects stored in that shape stay valid.
    #[serde(default, skip_serializing_if = "ObjectName::is_empty")]
    pub node: ObjectName,
    /// The same Node, under the name the first documented `v1alpha1` used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<ObjectName>,
    /// The pool the node belongs to.
    pub pool: ObjectName,
    /// The config the controller targets; set before the daemon validates it.
    pub config_version: MachineConfigNodeSpecConfigVersion,
    /// Upstream's image-mode target, which mco does not fill; kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub config_image: Option<serde_json::Value>,
}

impl MachineConfigNodeSpec {
    /// The node named by `spec.node`, else by `spec.nodeRef`.
    pub fn node_name(&self) -> &str {
        match (&self.node.name, &self.node_ref) {
            (n, Some(r)) if n.is_empty() => &r.name,
            (n, _) => n,
        }
    }
}

/// A reference by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ObjectName {
    pub name: String,
}

impl ObjectName {
    /// Whether it names nothing.
    pub fn is_empty(&self) -> bool {
        self.name.is_empty()
    }
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
    /// Each PinnedImageSet of the node's pools: the generation wanted, pulled and pinned, and
    /// the last that failed. Written by the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub pinned_image_sets: Option<Vec<crate::pinned::MachineConfigNodeStatusPinnedImageSet>>,
    /// Upstream's field mco does not fill, kept verbatim through mco's whole-status writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub config_image: Option<serde_json::Value>,
    /// How the storage sections this node never applies (disks, RAID, filesystems, LUKS)
    /// differ between the config it was provisioned with and its target: what only a new
    /// machine gets. Written by the daemon; absent when nothing differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["fieldPath"])
    )]
    pub irreconcilable_changes: Option<Vec<IrreconcilableChangeDiff>>,
}

/// One difference a node reports in `status.irreconcilableChanges`, with upstream `v1`'s limits.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IrreconcilableChangeDiff {
    /// Where the target differs, e.g. `spec.config.storage.filesystems[0].format`.
    #[schemars(
        length(min = 1, max = 70),
        regex(pattern = r"^spec\.[\da-zA-Z\.\[\]]+$")
    )]
    pub field_path: String,
    /// The difference: `- ` and the provisioned value, `+ ` and the target's, as JSON.
    #[schemars(length(min = 1, max = 4096))]
    pub diff: String,
}

/// `desired` is only set once the daemon has validated the new config (UpdatePrepared=True).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct MachineConfigNodeStatusConfigVersion {
    /// Left out while empty: upstream's schemas require a DNS-1123 name here.
    #[serde(default, skip_serializing_if = "String::is_empty")]
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

/// mco's CRD: `v1` (storage) and `v1alpha1` served from one schema with the same printer
/// columns, so `kubectl get machineconfignodes` prints the documented view whichever version
/// it picks.
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    let mut crd = MachineConfigNode::crd();
    let mut alpha = crd.spec.versions[0].clone();
    alpha.name = "v1alpha1".into();
    alpha.storage = false;
    crd.spec.versions.push(alpha);
    crd
}
