//! `MachineConfig` (v1): an Ignition config plus kernel arguments, extensions and an OS image.

// Every `printcolumn(...)` repeats the same keys; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired configuration of a set of machines.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "MachineConfig",
    plural = "machineconfigs",
    singular = "machineconfig",
    shortname = "mc",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineConfig defines the configuration for a machine",
    label("openshift.io/operator-managed", ""),
    printcolumn(
        name = "GeneratedByController",
        type_ = "string",
        description = "Version of the controller that generated the machineconfig. This will be empty if the machineconfig is not managed by a controller.",
        json_path = r".metadata.annotations.machineconfiguration\.openshift\.io/generated-by-controller-version"
    ),
    printcolumn(
        name = "IgnitionVersion",
        type_ = "string",
        description = "Version of the Ignition Config defined in the machineconfig.",
        json_path = ".spec.config.ignition.version"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigSpec {
    /// The OS image to boot. Users should not set it; rendering injects the cluster default.
    /// Upstream serialises it even when empty, so mco does too.
    #[serde(rename = "osImageURL", default)]
    pub os_image_url: String,

    /// The extensions container matching the OS image.
    #[serde(
        rename = "baseOSExtensionsContainerImage",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub base_os_extensions_container_image: String,

    /// A raw Ignition config (spec 2.2 or 3.x), kept verbatim: unknown fields survive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub config: Option<serde_json::Value>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("nullable" = true, "x-kubernetes-list-type" = "atomic"))]
    pub kernel_arguments: Option<Vec<String>>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("nullable" = true, "x-kubernetes-list-type" = "atomic"))]
    pub extensions: Option<Vec<String>>,

    /// FIPS mode; day-1 only, so any change is unreconcilable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fips: bool,

    /// `""`/`default`, `realtime` or `64k-pages`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "default", "realtime", "64k-pages"]))]
    pub kernel_type: String,
}

impl MachineConfig {
    /// The Ignition spec version the config declares, if any.
    pub fn ignition_version(&self) -> Option<&str> {
        self.spec
            .config
            .as_ref()?
            .get("ignition")?
            .get("version")?
            .as_str()
    }
}
