//! The objects mco reads and writes, wire-compatible with the upstream Machine Config Operator
//! (group `machineconfiguration.openshift.io`), and the constants of the controller/daemon protocol.
//!
//! Field JSON names follow upstream exactly so that existing YAML works unchanged.

#[cfg(feature = "client")]
pub mod caches;
pub mod clusteroperator;
pub mod constants;
pub mod controllerconfig;
pub mod crds;
pub mod generators;
pub mod image_mode;
pub mod image_ref;
pub mod machineconfig;
pub mod mcn;
pub mod operator;
pub mod paths;
pub mod pinned;
pub mod pool;
pub mod rollouts;
pub mod select;
pub mod user_agent;
#[cfg(feature = "client")]
pub mod watch;

pub use clusteroperator::{
    ClusterOperator, ClusterOperatorSpec, ClusterOperatorStatus, ClusterOperatorStatusCondition,
    OperandVersion,
};
pub use controllerconfig::{
    ControllerCertificate, ControllerConfig, ControllerConfigSpec, ControllerConfigStatus,
    ControllerConfigStatusCondition, ImageRegistryBundle,
};
pub use generators::{
    APIServer, APIServerSpec, ClusterImagePolicy, ClusterImagePolicySpec, ClusterVersion,
    ContainerRuntimeConfig, ContainerRuntimeConfigSpec, FeatureGate, FeatureGateSpec,
    FeatureGateStatus, GeneratorStatus, Image, ImageContentSourcePolicy, ImageDigestMirrorSet,
    ImagePolicy, ImagePolicySpec, ImageTagMirrorSet, KubeletConfig, KubeletConfigSpec, NodeConfig,
    NodeConfigSpec, Proxy, ProxySpec, ProxyStatus,
};
pub use image_mode::{MachineOSBuild, MachineOSBuildSpec, MachineOSConfig, MachineOSConfigSpec};
pub use machineconfig::{MachineConfig, MachineConfigSpec};
pub use mcn::{
    IrreconcilableChangeDiff, MachineConfigNode, MachineConfigNodeSpec,
    MachineConfigNodeSpecConfigVersion, MachineConfigNodeStatus,
    MachineConfigNodeStatusConfigVersion, ObjectName,
};
pub use operator::{MachineConfiguration, MachineConfigurationSpec, MachineConfigurationStatus};
pub use pinned::{PinnedImageRef, PinnedImageSet, PinnedImageSetSpec};
pub use pool::{
    MachineConfigPool, MachineConfigPoolCondition, MachineConfigPoolSpec, MachineConfigPoolStatus,
    PoolConfiguration,
};
pub use rollouts::{RolloutPolicy, RolloutPolicySpec, RolloutPolicyStatus};

/// The API group of every mco object.
pub const GROUP: &str = "machineconfiguration.openshift.io";

pub(crate) mod schema {
    //! Schema overrides where the derived schema cannot say what upstream's CRDs say.
    use schemars::{Schema, SchemaGenerator, json_schema};

    /// A raw embedded object (an Ignition config, or upstream fields mco does not model) kept verbatim.
    pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "nullable": true,
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}
