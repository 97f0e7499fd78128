//! The CustomResourceDefinitions mco installs, generated from the Rust types so they cannot drift.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use mco_apimachinery::yaml;

use crate::{
    ControllerConfig, MachineConfig, MachineConfigNode, MachineConfigPool, MachineConfiguration,
};

/// Every CRD, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        MachineConfig::crd(),
        MachineConfigPool::crd(),
        MachineConfigNode::crd(),
        ControllerConfig::crd(),
        MachineConfiguration::crd(),
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
