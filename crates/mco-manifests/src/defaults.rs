//! The default pools and the ControllerConfig, shaped as upstream's so an existing cluster's
//! objects and a fresh install look the same.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use mco_api::constants::{labels, names};
use mco_api::{
    ControllerConfig, ControllerConfigSpec, MachineConfigPool, MachineConfigPoolSpec,
    MachineConfiguration, MachineConfigurationSpec,
};

use crate::Options;

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..Default::default()
    }
}

/// Upstream's pool: MachineConfigs with `role: <name>`, nodes with `node-role.kubernetes.io/<name>`.
fn pool(name: &str, required_for_upgrade: bool) -> MachineConfigPool {
    let mut pool = MachineConfigPool::new(
        name,
        MachineConfigPoolSpec {
            machine_config_selector: Some(selector(labels::ROLE, name)),
            node_selector: Some(selector(&format!("{}{name}", labels::NODE_ROLE_PREFIX), "")),
            ..Default::default()
        },
    );
    let mut pool_labels = BTreeMap::from([
        (labels::MCO_BUILT_IN.to_string(), String::new()),
        (
            format!("pools.operator.machineconfiguration.openshift.io/{name}"),
            String::new(),
        ),
    ]);
    if required_for_upgrade {
        pool_labels.insert(
            "operator.machineconfiguration.openshift.io/required-for-upgrade".to_string(),
            String::new(),
        );
    }
    pool.metadata.labels = Some(pool_labels);
    pool
}

/// `master` and `worker`.
pub fn pools() -> Vec<MachineConfigPool> {
    vec![
        pool(names::MASTER_POOL, true),
        pool(names::WORKER_POOL, false),
    ]
}

/// The singleton ControllerConfig: the OS image and, with `--apiserver-url`, the URL machines
/// reach the API server at, where upstream's operator copies it from the Infrastructure (the
/// machine config server's certificate is for its host).
pub fn controller_config(opts: &Options) -> ControllerConfig {
    let mut other = serde_json::Map::new();
    if let Some(url) = &opts.apiserver_url {
        other.insert(
            "infra".into(),
            serde_json::json!({"status": {"apiServerInternalURI": url}}),
        );
    }
    ControllerConfig::new(
        names::CONTROLLER_CONFIG,
        ControllerConfigSpec {
            os_image_url: opts.os_image.clone(),
            base_os_container_image: opts.os_image.clone(),
            other,
            ..Default::default()
        },
    )
}

/// `MachineConfiguration/cluster` with no policy of its own, as upstream's operator creates it:
/// the node disruption policy is upstream's defaults until an administrator adds to it.
pub fn machine_configuration() -> MachineConfiguration {
    MachineConfiguration::new(
        mco_api::operator::MACHINE_CONFIGURATION_NAME,
        MachineConfigurationSpec {
            management_state: "Managed".into(),
            ..Default::default()
        },
    )
}
