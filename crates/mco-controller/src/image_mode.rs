//! On-cluster image mode, as the node controller needs it: the MachineOSConfigs and
//! MachineOSBuilds, and for each pool the image its nodes go to with its rendered config
//! ([`mco_api::image_mode::pool_build`]).
//!
//! mco builds no image: whoever builds (upstream's build controller, a pipeline) records a
//! finished build in the MachineOSBuild and the MachineOSConfig's status, and the node
//! controller rolls the image out within the pool's `maxUnavailable`, as it rolls out a config.
//! Both kinds may be missing (before OpenShift 4.19): every pool is then outside image mode.

use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use mco_api::image_mode::{PoolBuild, pool_build, rollback_build};
use mco_api::{MachineOSBuild, MachineOSConfig};

use mco_api::watch::optional::{self, Seen};

/// The MachineOSConfigs and MachineOSBuilds, as watched.
pub struct ImageMode {
    configs: Store<MachineOSConfig>,
    builds: Store<MachineOSBuild>,
}

impl ImageMode {
    /// Reads from these stores.
    pub fn new(configs: Store<MachineOSConfig>, builds: Store<MachineOSBuild>) -> Self {
        ImageMode { configs, builds }
    }

    /// Where `pool`, on the rendered config `rendered`, stands in image mode; `rollback`: the
    /// config is an earlier one a RolloutPolicy's rollback pins, whose own build's image it
    /// goes back to ([`rollback_build`]).
    pub fn pool_build(&self, pool: &str, rendered: &str, rollback: bool) -> PoolBuild {
        let configs = self.configs.state();
        if configs.is_empty() {
            return PoolBuild::NotLayered;
        }
        let builds = self.builds.state();
        let (configs, builds) = (configs.iter().map(|c| &**c), builds.iter().map(|b| &**b));
        if rollback {
            rollback_build(pool, rendered, configs, builds)
        } else {
            pool_build(pool, rendered, configs, builds)
        }
    }
}

/// Watches both kinds; each change wakes every pool's node controller (`wake` gets `""`).
pub async fn watch(
    configs: (
        Api<MachineOSConfig>,
        reflector::store::Writer<MachineOSConfig>,
    ),
    builds: (
        Api<MachineOSBuild>,
        reflector::store::Writer<MachineOSBuild>,
    ),
    wake: UnboundedSender<String>,
    retry: Duration,
) {
    const ABSENT: &str = "no pool is in on-cluster image mode";
    let on = |seen: Seen| {
        // An absent kind stays absent: its store was empty already after the first time.
        if seen != Seen::Absent {
            let _ = wake.unbounded_send(String::new());
        }
    };
    futures::future::join(
        optional::watch(configs.0, configs.1, "MachineOSConfig", ABSENT, retry, on),
        optional::watch(builds.0, builds.1, "MachineOSBuild", ABSENT, retry, on),
    )
    .await;
}
