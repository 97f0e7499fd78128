//! `ControllerConfig` (v1): the cluster-wide inputs to rendering. mco needs only the default OS
//! image; every other upstream field is kept verbatim so an upstream object round-trips.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The singleton `machine-config-controller`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "ControllerConfig",
    plural = "controllerconfigs",
    singular = "controllerconfig",
    status = "ControllerConfigStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ControllerConfig describes configuration for MachineConfigController.",
    label("openshift.io/operator-managed", "")
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ControllerConfigSpec {
    /// Old-format OS image; used when `baseOSContainerImage` is empty.
    #[serde(
        rename = "osImageURL",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub os_image_url: String,
    /// New-format OS image: the default `osImageURL` of rendered configs.
    #[serde(
        rename = "baseOSContainerImage",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub base_os_container_image: String,
    #[serde(
        rename = "baseOSExtensionsContainerImage",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub base_os_extensions_container_image: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_image: String,
    /// Upstream fields mco does not use, kept as they are.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

impl ControllerConfigSpec {
    /// The OS image rendering injects: the new-format image, else the old-format one.
    pub fn default_os_image(&self) -> &str {
        if self.base_os_container_image.is_empty() {
            &self.os_image_url
        } else {
            &self.base_os_container_image
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ControllerConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}
