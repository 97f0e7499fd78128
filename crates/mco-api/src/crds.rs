//! The CustomResourceDefinitions mco installs, generated from the Rust types so they cannot drift.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use mco_apimachinery::yaml;

use crate::{
    APIServer, ClusterImagePolicy, ContainerRuntimeConfig, ControllerConfig, Image,
    ImageContentSourcePolicy, ImageDigestMirrorSet, ImagePolicy, ImageTagMirrorSet, KubeletConfig,
    MachineConfig, MachineConfigPool, MachineConfiguration, RolloutPolicy,
};

/// Every CRD, in a stable order. The config.openshift.io and operator.openshift.io kinds are
/// OpenShift's own; they are shipped for clusters that lack them, as MachineConfiguration is.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        MachineConfig::crd(),
        MachineConfigPool::crd(),
        crate::mcn::crd(),
        ControllerConfig::crd(),
        MachineConfiguration::crd(),
        KubeletConfig::crd(),
        ContainerRuntimeConfig::crd(),
        Image::crd(),
        ImageDigestMirrorSet::crd(),
        ImageTagMirrorSet::crd(),
        ImageContentSourcePolicy::crd(),
        APIServer::crd(),
        ClusterImagePolicy::crd(),
        ImagePolicy::crd(),
        RolloutPolicy::crd(),
        crate::PinnedImageSet::crd(),
        crate::MachineOSConfig::crd(),
        crate::MachineOSBuild::crd(),
    ]
}

/// One CRD as YAML, as committed under `manifests/crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, yaml::EncodeError> {
    yaml::to_string(crd)
}

/// The file name a CRD is committed under: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or_default())
}

/// Every CRD as one multi-document YAML stream.
pub fn all_yaml() -> Result<String, yaml::EncodeError> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}
