//! `ClusterOperator` (config.openshift.io/v1): the status an OpenShift operator reports to the
//! cluster version operator. mco reads and writes only the status of `machine-config`, on a
//! cluster taken over from upstream's operator; the CVO creates the object and owns its spec.
//! Field names follow openshift/api `config/v1/types_cluster_operator.go`. Not shipped:
//! OpenShift serves it.

// Every `printcolumn(...)` repeats the same keys; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The name of the ClusterOperator upstream's Machine Config Operator reports on.
pub const MACHINE_CONFIG: &str = "machine-config";

/// An operator's report to the cluster version operator: an empty spec, and the status.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "ClusterOperator",
    plural = "clusteroperators",
    singular = "clusteroperator",
    shortname = "co",
    status = "ClusterOperatorStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ClusterOperator holds the status of a core or optional OpenShift component.",
    printcolumn(
        name = "Version",
        type_ = "string",
        description = "The version the operator is at.",
        json_path = r#".status.versions[?(@.name=="operator")].version"#
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        description = "Whether the operator is running and stable.",
        json_path = r#".status.conditions[?(@.type=="Available")].status"#
    ),
    printcolumn(
        name = "Progressing",
        type_ = "string",
        description = "Whether the operator is processing changes.",
        json_path = r#".status.conditions[?(@.type=="Progressing")].status"#
    ),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        description = "Whether the operator is degraded.",
        json_path = r#".status.conditions[?(@.type=="Degraded")].status"#
    ),
    printcolumn(
        name = "Since",
        type_ = "date",
        description = "The time the operator's Available status last changed.",
        json_path = r#".status.conditions[?(@.type=="Available")].lastTransitionTime"#
    )
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClusterOperatorSpec {
    /// Fields mco does not read (upstream's spec is empty).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// What an operator reports: its conditions, the versions it has reached, the objects that
/// matter for debugging it, and operator-specific data.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOperatorStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ClusterOperatorStatusCondition>,
    /// The versions reached: `operator` is the release the CVO waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<OperandVersion>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_objects: Vec<ObjectReference>,
    /// Free-form; upstream's Machine Config Operator writes each pool's status there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub extension: Option<serde_json::Value>,
}

/// One of `Available`, `Progressing`, `Degraded`, `Upgradeable`, ...
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOperatorStatusCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A named version: `operator` (the release), `operator-image`, an operand's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct OperandVersion {
    pub name: String,
    pub version: String,
}

/// An object related to the operator, gathered by must-gather.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ObjectReference {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::CustomResourceExt;

    #[test]
    fn upstream_clusteroperator_round_trips() {
        let upstream = serde_json::json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "ClusterOperator",
            "metadata": {"name": "machine-config"},
            "spec": {},
            "status": {
                "conditions": [{
                    "type": "Available",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "reason": "AsExpected",
                    "message": "Cluster has deployed [{operator 4.18.1}]"
                }],
                "versions": [{"name": "operator", "version": "4.18.1"}],
                "relatedObjects": [
                    {"group": "", "resource": "namespaces", "name": "openshift-machine-config-operator"},
                    {"group": "machineconfiguration.openshift.io", "resource": "machineconfigpools"}
                ],
                "extension": {"master": "all 3 nodes are at latest configuration rendered-master-1"}
            }
        });
        let co: ClusterOperator = serde_json::from_value(upstream.clone()).unwrap();
        assert_eq!(co.status.as_ref().unwrap().versions[0].version, "4.18.1");
        assert_eq!(serde_json::to_value(&co).unwrap(), upstream);
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_upstreams_columns() {
        let crd = ClusterOperator::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["co".to_string()]));
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            ["Version", "Available", "Progressing", "Degraded", "Since"]
        );
    }
}
