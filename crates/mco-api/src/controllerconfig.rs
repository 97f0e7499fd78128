//! `ControllerConfig` (v1): the cluster-wide inputs to rendering. mco reads the default OS image
//! and the CA bundles (written to nodes by the daemon, reported in status by the controller);
//! every other upstream field is kept verbatim so an upstream object round-trips.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bytes of PEM one CA bundle may hold (decoded), for the controller that reads them and the
/// daemon that writes them. A public trust store is about 200 KiB; a ControllerConfig must fit in
/// one etcd object (1.5 MiB) anyway.
pub const MAX_BUNDLE_BYTES: usize = 1024 * 1024;

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
    /// The kube-apiserver serving CA (base64 PEM, as Go's `[]byte`): the daemon writes it to
    /// `/etc/kubernetes/kubelet-ca.crt`.
    #[serde(
        rename = "kubeAPIServerServingCAData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("format" = "byte"))]
    pub kube_api_server_serving_ca_data: Option<String>,
    /// The cluster's root CA (base64 PEM).
    #[serde(
        rename = "rootCAData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("format" = "byte"))]
    pub root_ca_data: Option<String>,
    /// The cloud provider's CA (base64 PEM).
    #[serde(
        rename = "cloudProviderCAData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("format" = "byte"))]
    pub cloud_provider_ca_data: Option<String>,
    /// Extra CAs for the nodes' trust store (base64 PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub additional_trust_bundle: Option<String>,
    /// Image registry CAs from the cluster's image config, one per registry host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub image_registry_bundle_data: Option<Vec<ImageRegistryBundle>>,
    /// Image registry CAs the administrator added, one per registry host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub image_registry_bundle_user_data: Option<Vec<ImageRegistryBundle>>,
    /// Upstream fields mco does not use, kept as they are.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// One registry's CA bundle: written to `/etc/docker/certs.d/<file>/ca.crt`, where `..` in
/// `file` stands for the `:` before a port (`host..5000` is `host:5000`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ImageRegistryBundle {
    pub file: String,
    /// Base64 PEM, as Go's `[]byte`.
    #[schemars(extend("format" = "byte"))]
    pub data: String,
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
    /// `TemplateControllerRunning`, `TemplateControllerCompleted`, `TemplateControllerFailing`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub conditions: Vec<ControllerConfigStatusCondition>,
    /// Every certificate of the spec's CA bundles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub controller_certificates: Vec<ControllerCertificate>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// Upstream's `ControllerConfigStatusCondition` (not `metav1.Condition`: no observedGeneration).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerConfigStatusCondition {
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

/// One certificate of a CA bundle (upstream's `ControllerCertificate`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerCertificate {
    /// The subject, as Go's `pkix.Name.String()` prints it (`CN=x,OU=y`).
    pub subject: String,
    /// The issuer, likewise.
    pub signer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    /// The bundle it came from: a spec field's Go name (`KubeAPIServerServingCAData`) or a
    /// registry bundle's `file`.
    pub bundle_file: String,
}

impl ControllerConfigStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&ControllerConfigStatusCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The host machines reach the machine config server at, upstream's rule, and the URI it is
/// read from: the host of `spec.infra.status.apiServerInternalURI` (an IPv6 one without its
/// brackets), where upstream's operator copies the Infrastructure's. `spec_other` is
/// [`ControllerConfigSpec::other`].
pub fn api_server_internal_host(
    spec_other: &serde_json::Map<String, serde_json::Value>,
) -> Result<(String, String), String> {
    let uri = spec_other
        .get("infra")
        .and_then(|i| i.get("status"))
        .and_then(|s| s.get("apiServerInternalURI"))
        .and_then(|u| u.as_str())
        .filter(|u| !u.is_empty())
        .ok_or("no APIServerInternalURL found in cluster infrastructure resource")?;
    let host = uri
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(|h| h.trim_matches(['[', ']']).to_string()))
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            format!("spec.infra.status.apiServerInternalURI: {uri:?} is not a URL with a host")
        })?;
    Ok((host, uri.to_string()))
}
