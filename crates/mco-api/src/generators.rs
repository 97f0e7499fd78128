//! The inputs of the controllers that write MachineConfigs for users: `KubeletConfig` and
//! `ContainerRuntimeConfig` (machineconfiguration.openshift.io/v1), the image registry policy
//! `Image` and the mirror sets (config.openshift.io/v1), and `ImageContentSourcePolicy`
//! (operator.openshift.io/v1alpha1).
//!
//! Field names follow openshift/api. The free-form parts (`kubeletConfig`) are kept verbatim so
//! that a field mco does not model still reaches the generated file, and so that a refused field
//! reaches the controller and is reported in a condition instead of failing to decode.

// Every `printcolumn(...)` repeats the same keys; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The annotation holding the numeric suffix of a KubeletConfig's or ContainerRuntimeConfig's
/// generated MachineConfig (`""` for none, `"1"` for `-1`, ...), as upstream names it.
pub const MC_NAME_SUFFIX: &str = "machineconfiguration.openshift.io/mc-name-suffix";
/// Upstream's largest suffix: at most ten generators of a kind per pool.
pub const MAX_MC_NAME_SUFFIX: u32 = 9;
/// The name of the one `Image` object read for registry policy.
pub const IMAGE_CONFIG_NAME: &str = "cluster";

/// The status condition of a KubeletConfig or ContainerRuntimeConfig: `Success` or `Failure`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratorCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// What the generating controller last did with an object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratorStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<GeneratorCondition>,
}

/// Kubelet settings for the pools a selector picks, written as `99-<pool>-generated-kubelet`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "KubeletConfig",
    plural = "kubeletconfigs",
    singular = "kubeletconfig",
    status = "GeneratorStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "KubeletConfig describes a customized Kubelet configuration.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfigSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_config_pool_selector: Option<LabelSelector>,
    /// KubeletConfiguration fields merged over the pool's base kubelet config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub kubelet_config: Option<serde_json::Value>,
    /// Let the node size its own system reservation (`/etc/node-sizing-enabled.env`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_sizing_reserved: Option<bool>,
    /// The kubelet's verbosity, 1 to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_security_profile: Option<TlsSecurityProfile>,
}

/// openshift/api's TLS profile: a named one (`Old`, `Intermediate`, `Modern`) or `Custom`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSecurityProfile {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<TlsProfileSpec>,
    /// The named profiles carry no fields; kept so that `old: {}` round-trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub old: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub intermediate: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub modern: Option<serde_json::Value>,
}

/// The ciphers (OpenSSL or IANA names) and minimum version of a `Custom` profile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsProfileSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ciphers: Vec<String>,
    #[serde(
        rename = "minTLSVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub min_tls_version: String,
}

/// CRI-O settings for the pools a selector picks, written as `99-<pool>-generated-containerruntime`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "ContainerRuntimeConfig",
    plural = "containerruntimeconfigs",
    singular = "containerruntimeconfig",
    shortname = "ctrcfg",
    status = "GeneratorStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ContainerRuntimeConfig describes a customized Container Runtime configuration.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntimeConfigSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_config_pool_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime_config: Option<ContainerRuntimeConfiguration>,
}

/// The CRI-O fields upstream lets an administrator set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntimeConfiguration {
    /// The most processes one container may run; `-1` or `0` for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
    /// `fatal`, `panic`, `error`, `warn`, `info`, `debug` or `trace`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_level: String,
    /// The largest a container log may grow; negative for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_size_max: Option<Quantity>,
    /// The largest a container's overlay root may grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay_size: Option<Quantity>,
    /// `runc` or `crun`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub default_runtime: String,
}

/// The cluster's image policy; only `cluster` is read.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "Image",
    plural = "images",
    singular = "image",
    derive = "PartialEq",
    derive = "Default",
    doc = "Image governs policies related to imagestream imports and runtime configuration for external registries."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ImageSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_sources: Option<RegistrySources>,
    /// Fields mco does not read (additionalTrustedCA, allowedRegistriesForImport, ...).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The cluster's API server configuration; only `cluster` is read, for its TLS profile, which
/// the kubelet's serving endpoint follows (upstream's template and kubelet config controllers).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "APIServer",
    plural = "apiservers",
    singular = "apiserver",
    derive = "PartialEq",
    derive = "Default",
    doc = "The cluster-wide settings of the API servers: serving certificates, client CA, encryption, audit and the TLS profile."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct APIServerSpec {
    /// The TLS profile of the cluster's serving endpoints; absent is `Intermediate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_security_profile: Option<TlsSecurityProfile>,
    /// Fields mco does not read (servingCerts, clientCA, encryption, audit, ...).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The name of the one `APIServer` object read.
pub const API_SERVER_CONFIG_NAME: &str = "cluster";

/// The cluster's node settings (`nodes.config.openshift.io`); only `cluster` is read, for the
/// cgroup mode and the worker latency profile (upstream's `97-<pool>-generated-kubelet`). Not
/// shipped: a latency profile also changes the controller manager's and API server's settings,
/// which OpenShift's own operators do; on a cluster without them the kubelet's half alone would
/// make nodes flap NotReady.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "Node",
    root = "NodeConfig",
    plural = "nodes",
    singular = "node",
    derive = "PartialEq",
    derive = "Default",
    doc = "The cluster-wide settings of the nodes: cgroup mode and worker latency profile."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct NodeConfigSpec {
    /// `v2`, `v1` (OpenShift 4.14 to 4.18), or empty for the default, v2.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cgroup_mode: String,
    /// `Default`, `MediumUpdateAverageReaction` or `LowUpdateSlowReaction`; empty leaves the
    /// kubelet's setting alone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub worker_latency_profile: String,
    /// Fields mco does not read (minimumKubeletVersion, ...).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The name of the one cluster-wide config object of each `config.openshift.io` kind read.
pub const CLUSTER_CONFIG_NAME: &str = "cluster";

/// The cluster-wide proxy (`proxies.config.openshift.io`); only `cluster` is read. Its status,
/// written by OpenShift's network operator from the spec once the proxy is checked, is what
/// the nodes use (upstream's operator copies it into the ControllerConfig's `spec.proxy`); its
/// spec names the ConfigMap of the CAs the proxy needs. Not shipped: OpenShift serves it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "Proxy",
    plural = "proxies",
    singular = "proxy",
    status = "ProxyStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "The cluster-wide proxy: the spec an administrator sets, the status in force."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ProxySpec {
    /// The ConfigMap of `openshift-config` holding the CAs the proxy needs, key `ca-bundle.crt`.
    #[serde(default, rename = "trustedCA", skip_serializing_if = "Option::is_none")]
    pub trusted_ca: Option<ConfigMapNameReference>,
    /// Fields mco does not read (httpProxy, httpsProxy, noProxy, readinessEndpoints).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// A ConfigMap named in `openshift-config`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ConfigMapNameReference {
    #[serde(default)]
    pub name: String,
}

/// The proxy in force; empty values are unset.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub http_proxy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub https_proxy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub no_proxy: String,
}

/// The cluster's feature gates (`featuregates.config.openshift.io`); only `cluster` is read.
/// Its status, written by OpenShift's cluster config operator, lists every gate enabled and
/// disabled for each release version; upstream writes them all into the kubelet config
/// (`98-<pool>-generated-kubelet`). Not shipped.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "FeatureGate",
    plural = "featuregates",
    singular = "featuregate",
    derive = "PartialEq",
    derive = "Default",
    status = "FeatureGateStatus",
    doc = "The feature set the cluster runs, and the gates it turns on and off for each release."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureGateSpec {
    /// Empty (`Default`), `TechPreviewNoUpgrade`, `DevPreviewNoUpgrade`, `CustomNoUpgrade`, `OKD`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub feature_set: String,
    /// Fields mco does not read (customNoUpgrade: the status lists its outcome).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureGateStatus {
    /// One entry per release version the cluster may run.
    #[serde(default)]
    pub feature_gates: Vec<FeatureGateDetails>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureGateDetails {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub enabled: Vec<FeatureGateAttributes>,
    #[serde(default)]
    pub disabled: Vec<FeatureGateAttributes>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureGateAttributes {
    #[serde(default)]
    pub name: String,
}

/// The cluster's release (`clusterversions.config.openshift.io`); only `version` is read, for
/// the release being rolled out, whose feature gates the kubelets get. Not shipped.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "ClusterVersion",
    plural = "clusterversions",
    singular = "clusterversion",
    derive = "PartialEq",
    derive = "Default",
    status = "ClusterVersionStatus",
    doc = "The release the cluster runs and the one it is moving to."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClusterVersionSpec {
    /// Fields mco does not read.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClusterVersionStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<Release>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Release {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
}

/// The name of the one `ClusterVersion` object read.
pub const CLUSTER_VERSION_NAME: &str = "version";

/// Which registries pods may pull from, and which are reached without TLS.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySources {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub insecure_registries: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_registries: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_registries: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_runtime_search_registries: Vec<String>,
}

/// Signature verification for images in the given scopes, cluster-wide: each scope's images
/// must carry a sigstore signature that the root of trust verifies.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "ClusterImagePolicy",
    plural = "clusterimagepolicies",
    singular = "clusterimagepolicy",
    derive = "PartialEq",
    derive = "Default",
    status = "ImagePolicyStatus",
    doc = "Sigstore signature verification that CRI-O enforces on every node for images in the listed scopes."
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterImagePolicySpec {
    /// Registries, repositories or images (`host[:port][/path]`, or `*.domain`) the policy covers.
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub policy: ImageSigstoreVerificationPolicy,
}

/// A namespace's own signature verification: CRI-O applies it to that namespace's pods, over
/// the cluster's policy. A scope a ClusterImagePolicy also covers is left to that one.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "ImagePolicy",
    plural = "imagepolicies",
    singular = "imagepolicy",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    status = "ImagePolicyStatus",
    doc = "Sigstore signature verification that CRI-O enforces for the pods of one namespace, for images in the listed scopes."
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicySpec {
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub policy: ImageSigstoreVerificationPolicy,
}

/// The status of an ImagePolicy or ClusterImagePolicy: conditions. mco writes one on an
/// ImagePolicy, upstream's `Pending` with reason `ConflictScopes`, when some of its scopes are
/// left to ClusterImagePolicies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicyStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// How a scope's signatures are verified.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSigstoreVerificationPolicy {
    #[serde(default)]
    pub root_of_trust: PolicyRootOfTrust,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_identity: Option<PolicyIdentity>,
}

/// `PublicKey`, `FulcioCAWithRekor` or `PKI`, with the matching member set. The `*Data` fields
/// are base64, as the API serves `[]byte`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRootOfTrust {
    #[serde(default)]
    pub policy_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<PublicKeyRootOfTrust>,
    #[serde(
        rename = "fulcioCAWithRekor",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub fulcio_ca_with_rekor: Option<FulcioCAWithRekorRootOfTrust>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pki: Option<PkiRootOfTrust>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublicKeyRootOfTrust {
    #[serde(default)]
    pub key_data: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rekor_key_data: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FulcioCAWithRekorRootOfTrust {
    #[serde(rename = "fulcioCAData", default)]
    pub fulcio_ca_data: String,
    #[serde(default)]
    pub rekor_key_data: String,
    #[serde(default)]
    pub fulcio_subject: FulcioSubject,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FulcioSubject {
    #[serde(rename = "oidcIssuer", default)]
    pub oidc_issuer: String,
    #[serde(default)]
    pub signed_email: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PkiRootOfTrust {
    #[serde(default)]
    pub ca_roots_data: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca_intermediates_data: String,
    #[serde(default)]
    pub pki_certificate_subject: PkiCertificateSubject,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PkiCertificateSubject {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub email: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
}

/// Which identity a signature must claim: `MatchRepoDigestOrExact` (the default),
/// `MatchRepository`, `ExactRepository` or `RemapIdentity`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyIdentity {
    #[serde(default)]
    pub match_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_repository: Option<ExactRepository>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remap_identity: Option<RemapIdentity>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExactRepository {
    #[serde(default)]
    pub repository: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemapIdentity {
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub signed_prefix: String,
}

/// Mirrors for pulls by digest.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "ImageDigestMirrorSet",
    plural = "imagedigestmirrorsets",
    singular = "imagedigestmirrorset",
    shortname = "idms",
    derive = "PartialEq",
    derive = "Default",
    doc = "ImageDigestMirrorSet holds cluster-wide information about how to handle registry mirror rules on using digest pull specification."
)]
#[serde(rename_all = "camelCase")]
pub struct ImageDigestMirrorSetSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_digest_mirrors: Vec<ImageMirrors>,
}

/// Mirrors for pulls by tag.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "config.openshift.io",
    version = "v1",
    kind = "ImageTagMirrorSet",
    plural = "imagetagmirrorsets",
    singular = "imagetagmirrorset",
    shortname = "itms",
    derive = "PartialEq",
    derive = "Default",
    doc = "ImageTagMirrorSet holds cluster-wide information about how to handle registry mirror rules on using tag pull specification."
)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagMirrorSetSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_tag_mirrors: Vec<ImageMirrors>,
}

/// One source and its mirrors, tried in order.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageMirrors {
    #[serde(default)]
    pub source: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<String>,
    /// `AllowContactingSource` (the default) or `NeverContactSource`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mirror_source_policy: String,
}

/// The deprecated digest mirror list, still honoured as upstream honours it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operator.openshift.io",
    version = "v1alpha1",
    kind = "ImageContentSourcePolicy",
    plural = "imagecontentsourcepolicies",
    singular = "imagecontentsourcepolicy",
    derive = "PartialEq",
    derive = "Default",
    doc = "ImageContentSourcePolicy holds cluster-wide information about how to handle registry mirror rules."
)]
#[serde(rename_all = "camelCase")]
pub struct ImageContentSourcePolicySpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repository_digest_mirrors: Vec<RepositoryDigestMirrors>,
}

/// One source and its digest mirrors.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryDigestMirrors {
    #[serde(default)]
    pub source: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<String>,
}

#[cfg(test)]
mod proxy_tests {
    use super::*;

    #[test]
    fn an_upstream_proxy_reads_and_round_trips() {
        let upstream = serde_json::json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "Proxy",
            "metadata": {"name": "cluster"},
            "spec": {
                "httpsProxy": "http://proxy.example.com:3128",
                "readinessEndpoints": ["https://example.com"],
                "trustedCA": {"name": "proxy-ca"},
            },
            "status": {
                "httpsProxy": "http://proxy.example.com:3128",
                "noProxy": ".cluster.local,10.0.0.0/16",
            },
        });
        let p: Proxy = serde_json::from_value(upstream.clone()).unwrap();
        assert_eq!(p.spec.trusted_ca.as_ref().unwrap().name, "proxy-ca");
        let status = p.status.clone().unwrap();
        assert_eq!(status.http_proxy, "");
        assert_eq!(status.https_proxy, "http://proxy.example.com:3128");
        assert_eq!(status.no_proxy, ".cluster.local,10.0.0.0/16");
        assert_eq!(serde_json::to_value(&p).unwrap(), upstream);
    }
}

/// `ClusterImagePolicy` and `ImagePolicy` as OpenShift 4.16–4.19 serve them: Technology Preview,
/// `config.openshift.io/v1alpha1` only. 4.20 replaced that version with `v1` (served alone) of
/// the same fields; `v1` adds checks on their values (PEM markers in the key and certificate
/// data, shortest key data, longest Fulcio subject). [`ClusterImagePolicy::to_v1`] and
/// [`ImagePolicy::to_v1`] give the `v1` object, refusing a value `v1` refuses, so the policy is
/// enforced exactly as the `v1` object would be, or reported. 4.16–4.18 lack `rootOfTrust.pki`
/// (their server prunes it); every other field is the same in both versions. Not shipped.
pub mod v1alpha1 {
    use super::{ImagePolicyStatus, ImageSigstoreVerificationPolicy};
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// A field of a `v1alpha1` object that `config.openshift.io/v1` refuses. `name` is the
    /// object's name, `<namespace>/<name>` for an ImagePolicy.
    #[derive(Debug, Clone, PartialEq, thiserror::Error)]
    #[error("{kind} {name}: {field}: {message}")]
    pub struct ConversionError {
        pub kind: &'static str,
        pub name: String,
        pub field: String,
        pub message: String,
    }

    #[derive(
        CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "config.openshift.io",
        version = "v1alpha1",
        kind = "ClusterImagePolicy",
        plural = "clusterimagepolicies",
        singular = "clusterimagepolicy",
        derive = "PartialEq",
        derive = "Default",
        status = "ImagePolicyStatus",
        doc = "Sigstore signature verification for images in the listed scopes, cluster-wide (Technology Preview)."
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterImagePolicySpec {
        #[serde(default)]
        pub scopes: Vec<String>,
        #[serde(default)]
        pub policy: ImageSigstoreVerificationPolicy,
    }

    #[derive(
        CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "config.openshift.io",
        version = "v1alpha1",
        kind = "ImagePolicy",
        plural = "imagepolicies",
        singular = "imagepolicy",
        namespaced,
        derive = "PartialEq",
        derive = "Default",
        status = "ImagePolicyStatus",
        doc = "Sigstore signature verification for one namespace's pods, for images in the listed scopes (Technology Preview)."
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ImagePolicySpec {
        #[serde(default)]
        pub scopes: Vec<String>,
        #[serde(default)]
        pub policy: ImageSigstoreVerificationPolicy,
    }

    impl ClusterImagePolicy {
        /// The same object in `v1`, or the first field `v1` refuses.
        pub fn to_v1(&self) -> Result<super::ClusterImagePolicy, ConversionError> {
            v1_refuses(&self.spec.policy).map_err(|(field, message)| ConversionError {
                kind: "ClusterImagePolicy",
                name: self.metadata.name.clone().unwrap_or_default(),
                field,
                message,
            })?;
            Ok(super::ClusterImagePolicy {
                metadata: self.metadata.clone(),
                spec: super::ClusterImagePolicySpec {
                    scopes: self.spec.scopes.clone(),
                    policy: self.spec.policy.clone(),
                },
                status: self.status.clone(),
            })
        }
    }

    impl ImagePolicy {
        /// The same object in `v1`, or the first field `v1` refuses.
        pub fn to_v1(&self) -> Result<super::ImagePolicy, ConversionError> {
            v1_refuses(&self.spec.policy).map_err(|(field, message)| ConversionError {
                kind: "ImagePolicy",
                name: format!(
                    "{}/{}",
                    self.metadata.namespace.as_deref().unwrap_or_default(),
                    self.metadata.name.as_deref().unwrap_or_default()
                ),
                field,
                message,
            })?;
            Ok(super::ImagePolicy {
                metadata: self.metadata.clone(),
                spec: super::ImagePolicySpec {
                    scopes: self.spec.scopes.clone(),
                    policy: self.spec.policy.clone(),
                },
                status: self.status.clone(),
            })
        }
    }

    const PUBLIC_KEY: (&str, &str) = ("-----BEGIN PUBLIC KEY-----", "-----END PUBLIC KEY-----");
    const CERTIFICATE: (&str, &str) = ("-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----");

    /// The first value the `v1` schema refuses that `v1alpha1`'s accepts: `(field, why)`, in
    /// `v1`'s words. Empty values are left to the generator, which requires them as `v1` does.
    fn v1_refuses(policy: &ImageSigstoreVerificationPolicy) -> Result<(), (String, String)> {
        let root = &policy.root_of_trust;
        let at = "spec.policy.rootOfTrust";
        if let Some(k) = &root.public_key {
            let g = format!("{at}.publicKey");
            min_length(&g, "keyData", &k.key_data, 68)?;
            pem(&g, "keyData", &k.key_data, PUBLIC_KEY)?;
            pem(&g, "rekorKeyData", &k.rekor_key_data, PUBLIC_KEY)?;
        }
        if let Some(f) = &root.fulcio_ca_with_rekor {
            let g = format!("{at}.fulcioCAWithRekor");
            pem(&g, "fulcioCAData", &f.fulcio_ca_data, CERTIFICATE)?;
            pem(&g, "rekorKeyData", &f.rekor_key_data, PUBLIC_KEY)?;
            let s = format!("{g}.fulcioSubject");
            max_length(&s, "oidcIssuer", &f.fulcio_subject.oidc_issuer, 2048)?;
            max_length(&s, "signedEmail", &f.fulcio_subject.signed_email, 320)?;
        }
        if let Some(p) = &root.pki {
            let g = format!("{at}.pki");
            min_length(&g, "caRootsData", &p.ca_roots_data, 72)?;
            min_length(&g, "caIntermediatesData", &p.ca_intermediates_data, 72)?;
        }
        Ok(())
    }

    /// `minLength` counts the characters of the base64 text, as the API server counts them.
    fn min_length(at: &str, field: &str, v: &str, min: usize) -> Result<(), (String, String)> {
        if !v.is_empty() && v.chars().count() < min {
            return Err((
                format!("{at}.{field}"),
                format!("should be at least {min} chars long in config.openshift.io/v1"),
            ));
        }
        Ok(())
    }

    fn max_length(at: &str, field: &str, v: &str, max: usize) -> Result<(), (String, String)> {
        if v.chars().count() > max {
            return Err((
                format!("{at}.{field}"),
                format!("may not be more than {max} characters in config.openshift.io/v1"),
            ));
        }
        Ok(())
    }

    /// `v1`'s rules on base64 PEM data: the decoded text starts with the begin marker and ends
    /// with the end marker, or with it and one newline.
    fn pem(
        at: &str,
        field: &str,
        v: &str,
        (begin, end): (&str, &str),
    ) -> Result<(), (String, String)> {
        if v.is_empty() {
            return Ok(());
        }
        let refuse = |why: String| Err((format!("{at}.{field}"), why));
        // The same decoding the API server applies to a `format: byte` string.
        let Ok(k8s_openapi::ByteString(bytes)) =
            serde_json::from_value(serde_json::Value::String(v.to_owned()))
        else {
            return refuse("not base64-encoded data".into());
        };
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return refuse("the decoded data is not UTF-8 text".into());
        };
        if !text.starts_with(begin) {
            return refuse(format!(
                "the {field} must start with base64 encoding of '{begin}'."
            ));
        }
        if !(text.ends_with(end) || text.strip_suffix('\n').is_some_and(|t| t.ends_with(end))) {
            return refuse(format!(
                "the {field} must end with base64 encoding of '{end}'."
            ));
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use serde_json::{Value, json};

        fn b64(s: &str) -> String {
            let v = serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec())).unwrap();
            v.as_str().unwrap().to_owned()
        }

        const KEY: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n";
        const CERT: &str =
            "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----";

        fn cip(root_of_trust: Value) -> ClusterImagePolicy {
            serde_json::from_value(json!({
                "apiVersion": "config.openshift.io/v1alpha1",
                "kind": "ClusterImagePolicy",
                "metadata": {"name": "release", "uid": "u1", "resourceVersion": "7"},
                "spec": {
                    "scopes": ["quay.io/openshift-release-dev/ocp-release"],
                    "policy": {"rootOfTrust": root_of_trust},
                },
            }))
            .unwrap()
        }

        fn refused(root_of_trust: Value) -> String {
            cip(root_of_trust).to_v1().unwrap_err().to_string()
        }

        #[test]
        fn an_upstream_object_converts_with_every_field_kept() {
            let upstream = json!({
                "apiVersion": "config.openshift.io/v1alpha1",
                "kind": "ImagePolicy",
                "metadata": {"name": "apps", "namespace": "team-a", "uid": "u2", "generation": 3},
                "spec": {
                    "scopes": ["quay.io/team/app", "*.example.com"],
                    "policy": {
                        "rootOfTrust": {
                            "policyType": "FulcioCAWithRekor",
                            "fulcioCAWithRekor": {
                                "fulcioCAData": b64(CERT),
                                "rekorKeyData": b64(KEY),
                                "fulcioSubject": {
                                    "oidcIssuer": "https://oidc.example.com",
                                    "signedEmail": "signer@example.com",
                                },
                            },
                        },
                        "signedIdentity": {
                            "matchPolicy": "RemapIdentity",
                            "remapIdentity": {"prefix": "mirror.example.com/team", "signedPrefix": "quay.io/team"},
                        },
                    },
                },
                "status": {"conditions": [{
                    "type": "Pending", "status": "False", "reason": "ConflictScopes",
                    "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]},
            });
            let ip: ImagePolicy = serde_json::from_value(upstream.clone()).unwrap();
            let v1 = serde_json::to_value(ip.to_v1().unwrap()).unwrap();
            let mut want = upstream;
            want["apiVersion"] = json!("config.openshift.io/v1");
            assert_eq!(v1, want);
        }

        #[test]
        fn values_v1_accepts_convert_at_its_limits() {
            // The shortest data `v1` takes: the markers alone, 68 and 72 characters of base64.
            let key = b64("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----");
            assert_eq!(key.len(), 68);
            let c = cip(
                json!({"policyType": "PublicKey", "publicKey": {"keyData": key, "rekorKeyData": b64(KEY)}}),
            );
            assert_eq!(c.to_v1().unwrap().spec.policy, c.spec.policy);
            let roots = b64("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----");
            assert_eq!(roots.len(), 72);
            let pki = json!({"policyType": "PKI", "pki": {
                "caRootsData": roots, "caIntermediatesData": roots,
                "pkiCertificateSubject": {"email": "a@example.com"},
            }});
            assert!(cip(pki).to_v1().is_ok());
            let fulcio = json!({"policyType": "FulcioCAWithRekor", "fulcioCAWithRekor": {
                "fulcioCAData": b64(CERT), "rekorKeyData": b64(KEY),
                "fulcioSubject": {"oidcIssuer": format!("https://{}", "a".repeat(2040)), "signedEmail": format!("{}@example.com", "a".repeat(308))},
            }});
            assert!(cip(fulcio).to_v1().is_ok());
        }

        #[test]
        fn each_value_v1_refuses_is_named_with_its_object_and_field() {
            let f = "ClusterImagePolicy release: spec.policy.rootOfTrust";
            let short = b64("-----BEGIN PUBLIC KEY-----\n");
            assert_eq!(
                refused(json!({"policyType": "PublicKey", "publicKey": {"keyData": short}})),
                format!(
                    "{f}.publicKey.keyData: should be at least 68 chars long in config.openshift.io/v1"
                )
            );
            assert_eq!(
                refused(
                    json!({"policyType": "PublicKey", "publicKey": {"keyData": b64(&format!("x{KEY}"))}})
                ),
                format!(
                    "{f}.publicKey.keyData: the keyData must start with base64 encoding of '-----BEGIN PUBLIC KEY-----'."
                )
            );
            assert_eq!(
                refused(
                    json!({"policyType": "PublicKey", "publicKey": {"keyData": b64(&format!("{KEY}\n"))}})
                ),
                format!(
                    "{f}.publicKey.keyData: the keyData must end with base64 encoding of '-----END PUBLIC KEY-----'."
                )
            );
            assert_eq!(
                refused(
                    json!({"policyType": "PublicKey", "publicKey": {"keyData": b64(KEY), "rekorKeyData": b64(CERT)}})
                ),
                format!(
                    "{f}.publicKey.rekorKeyData: the rekorKeyData must start with base64 encoding of '-----BEGIN PUBLIC KEY-----'."
                )
            );
            let bad_utf8 = serde_json::to_value(k8s_openapi::ByteString(vec![0xff; 60])).unwrap();
            assert_eq!(
                refused(json!({"policyType": "PublicKey", "publicKey": {"keyData": bad_utf8}})),
                format!("{f}.publicKey.keyData: the decoded data is not UTF-8 text")
            );
            let fulcio = |ca: &str, rekor: &str, issuer: String, email: String| {
                json!({"policyType": "FulcioCAWithRekor", "fulcioCAWithRekor": {
                    "fulcioCAData": b64(ca), "rekorKeyData": b64(rekor),
                    "fulcioSubject": {"oidcIssuer": issuer, "signedEmail": email},
                }})
            };
            let issuer = || "https://oidc.example.com".to_owned();
            let email = || "a@example.com".to_owned();
            assert_eq!(
                refused(fulcio(KEY, KEY, issuer(), email())),
                format!(
                    "{f}.fulcioCAWithRekor.fulcioCAData: the fulcioCAData must start with base64 encoding of '-----BEGIN CERTIFICATE-----'."
                )
            );
            assert_eq!(
                refused(fulcio(CERT, CERT, issuer(), email())),
                format!(
                    "{f}.fulcioCAWithRekor.rekorKeyData: the rekorKeyData must start with base64 encoding of '-----BEGIN PUBLIC KEY-----'."
                )
            );
            assert_eq!(
                refused(fulcio(
                    CERT,
                    KEY,
                    format!("https://{}", "a".repeat(2041)),
                    email()
                )),
                format!(
                    "{f}.fulcioCAWithRekor.fulcioSubject.oidcIssuer: may not be more than 2048 characters in config.openshift.io/v1"
                )
            );
            assert_eq!(
                refused(fulcio(
                    CERT,
                    KEY,
                    issuer(),
                    format!("{}@example.com", "a".repeat(309))
                )),
                format!(
                    "{f}.fulcioCAWithRekor.fulcioSubject.signedEmail: may not be more than 320 characters in config.openshift.io/v1"
                )
            );
            let roots = b64("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----");
            let pki = |roots: &str, intermediates: &str| {
                json!({"policyType": "PKI", "pki": {
                    "caRootsData": roots, "caIntermediatesData": intermediates,
                    "pkiCertificateSubject": {"hostname": "example.com"},
                }})
            };
            assert_eq!(
                refused(pki(&roots[..68], "")),
                format!(
                    "{f}.pki.caRootsData: should be at least 72 chars long in config.openshift.io/v1"
                )
            );
            assert_eq!(
                refused(pki(&roots, &roots[..68])),
                format!(
                    "{f}.pki.caIntermediatesData: should be at least 72 chars long in config.openshift.io/v1"
                )
            );
        }

        #[test]
        fn a_refused_image_policy_is_named_with_its_namespace() {
            let ip: ImagePolicy = serde_json::from_value(json!({
                "apiVersion": "config.openshift.io/v1alpha1",
                "kind": "ImagePolicy",
                "metadata": {"name": "apps", "namespace": "team-a"},
                "spec": {"scopes": ["quay.io/team/app"], "policy": {"rootOfTrust": {
                    "policyType": "PublicKey", "publicKey": {"keyData": b64("-----BEGIN PUBLIC KEY-----\n")},
                }}},
            }))
            .unwrap();
            let e = ip.to_v1().unwrap_err();
            assert_eq!((e.kind, e.name.as_str()), ("ImagePolicy", "team-a/apps"));
            assert_eq!(e.field, "spec.policy.rootOfTrust.publicKey.keyData");
        }
    }
}
