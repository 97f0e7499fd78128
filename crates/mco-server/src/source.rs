//! Where the served configs come from: the cluster (pools and rendered configs, watched), or a
//! bootstrap directory written by `mco bootstrap` before any API server exists.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use mco_api::image_mode::PoolBuild;
use mco_api::{
    ControllerConfig, MachineConfig, MachineConfigPool, MachineOSBuild, MachineOSConfig,
};

/// Why a pool's config could not be found; the status codes are upstream's.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// 404: the bootstrap directory has no such pool or config (upstream's bootstrap server).
    #[error("{0}")]
    NotFound(String),
    /// 500: anything else, including an unknown pool on a cluster (upstream's cluster server
    /// fails the lookup and answers 500).
    #[error("{0}")]
    Failed(String),
}

impl LookupError {
    pub fn status(&self) -> http::StatusCode {
        match self {
            LookupError::NotFound(_) => http::StatusCode::NOT_FOUND,
            LookupError::Failed(_) => http::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The rendered config a new machine of `pool` gets, as upstream chooses it: the pool's target
/// (`spec.configuration`) once at least one machine has updated to it, else the config every
/// machine is on (`status.configuration`). So a new machine neither starts on a config that
/// may not work nor boots only to update at once.
pub fn config_for(pool: &MachineConfigPool) -> Option<&str> {
    let status = pool.status.as_ref();
    let updated = status.is_some_and(|s| s.updated_machine_count > 0);
    let name = if updated {
        pool.spec.configuration.as_ref().map(|c| c.name.as_str())
    } else {
        status
            .and_then(|s| s.configuration.as_ref())
            .map(|c| c.name.as_str())
    };
    name.filter(|n| !n.is_empty())
}

/// The image a new machine of `pool`, served `config`, boots in on-cluster image mode, as
/// upstream's server chooses it: the pool's build of that config, once it succeeded and the
/// MachineOSConfig names its image, and once a machine of the pool has updated (as for the
/// config itself). An image in the cluster's own registry (a `.svc` host) is not served: the
/// machine cannot resolve it before it has joined, and takes it after, as any node does.
pub fn image_for<'a>(
    pool: &MachineConfigPool,
    config: &str,
    configs: impl IntoIterator<Item = &'a MachineOSConfig>,
    builds: impl IntoIterator<Item = &'a MachineOSBuild> + Clone,
) -> Option<String> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    if pool
        .status
        .as_ref()
        .is_none_or(|s| s.updated_machine_count <= 0)
    {
        return None;
    }
    let PoolBuild::Ready { image, .. } =
        mco_api::image_mode::pool_build(name, config, configs, builds)
    else {
        return None;
    };
    let host = image.split('/').next().unwrap_or_default();
    let host = host.split(':').next().unwrap_or_default();
    (!host.ends_with(".svc")).then_some(image)
}

/// One source of pools and rendered configs.
pub enum Source {
    /// Watched pools, MachineConfigs and ControllerConfigs of a cluster, served from memory as
    /// upstream's informers.
    Cluster {
        pools: Store<MachineConfigPool>,
        configs: Store<MachineConfig>,
        controller_configs: Store<ControllerConfig>,
        /// MachineOSConfigs and MachineOSBuilds (empty where not served).
        image_mode: (Store<MachineOSConfig>, Store<MachineOSBuild>),
    },
    /// `<dir>/machine-pools/<pool>.yaml` and `<dir>/machine-configs/<config>.yaml`.
    Dir(PathBuf),
}

impl Source {
    /// Starts watching `client`'s pools, MachineConfigs and ControllerConfigs (for the CA
    /// bundles appended); returns once all are listed.
    pub async fn cluster(client: Client) -> Result<Source, kube::runtime::watcher::Error> {
        let (pools, pw) = reflector::store::<MachineConfigPool>();
        let (configs, cw) = reflector::store::<MachineConfig>();
        let (controller_configs, ccw) = reflector::store::<ControllerConfig>();
        let papi: Api<MachineConfigPool> = Api::all(client.clone());
        let ccapi: Api<ControllerConfig> = Api::all(client.clone());
        let capi: Api<MachineConfig> = Api::all(client.clone());
        // Optional kinds (OpenShift 4.19 and newer): looked up again every minute while absent,
        // and not waited for.
        let (moscs, moscw) = reflector::store::<MachineOSConfig>();
        let (mosbs, mosbw) = reflector::store::<MachineOSBuild>();
        const ABSENT: &str = "new machines get no image-mode image";
        let retry = std::time::Duration::from_secs(60);
        tokio::spawn(mco_api::watch::optional::watch(
            Api::<MachineOSConfig>::all(client.clone()),
            moscw,
            "MachineOSConfig",
            ABSENT,
            retry,
            |_| {},
        ));
        tokio::spawn(mco_api::watch::optional::watch(
            Api::<MachineOSBuild>::all(client),
            mosbw,
            "MachineOSBuild",
            ABSENT,
            retry,
            |_| {},
        ));
        tokio::spawn(
            watcher(papi, watcher::Config::default())
                .default_backoff()
                .reflect(pw)
                .for_each(|_| futures::future::ready(())),
        );
        tokio::spawn(
            watcher(capi, watcher::Config::default())
                .default_backoff()
                .reflect(cw)
                .for_each(|_| futures::future::ready(())),
        );
        tokio::spawn(
            watcher(ccapi, watcher::Config::default())
                .default_backoff()
                .reflect(ccw)
                .for_each(|_| futures::future::ready(())),
        );
        // Without the CRDs the watches retry for ever: say what is being waited for.
        tracing::info!("listing MachineConfigPools, MachineConfigs and ControllerConfigs");
        let (a, b, c) = tokio::join!(
            pools.wait_until_ready(),
            configs.wait_until_ready(),
            controller_configs.wait_until_ready()
        );
        if a.is_err() || b.is_err() || c.is_err() {
            tracing::warn!("a watch stopped before its first list");
        }
        Ok(Source::Cluster {
            pools,
            configs,
            controller_configs,
            image_mode: (moscs, mosbs),
        })
    }

    /// The cluster's ControllerConfig, whose CA bundles are appended; none for a bootstrap
    /// directory, whose rendered configs carry their own.
    pub fn controller_config(&self) -> Option<Arc<ControllerConfig>> {
        match self {
            Source::Cluster {
                controller_configs, ..
            } => controller_configs.get(&reflector::ObjectRef::new(
                mco_api::constants::names::CONTROLLER_CONFIG,
            )),
            Source::Dir(_) => None,
        }
    }

    /// The rendered config to serve to a new machine of `pool`; in image mode, with the pool's
    /// image embedded ([`image_for`], [`mco_api::image_mode::embed::embed`]).
    pub async fn lookup(&self, pool: &str) -> Result<Arc<MachineConfig>, LookupError> {
        match self {
            Source::Cluster {
                pools,
                configs,
                image_mode: (moscs, mosbs),
                ..
            } => {
                let p = pools
                    .get(&reflector::ObjectRef::new(pool))
                    .ok_or_else(|| {
                        LookupError::Failed(format!(
                            "could not fetch pool {pool}: machineconfigpools.machineconfiguration.openshift.io \"{pool}\" not found"
                        ))
                    })?;
                let name = config_for(&p).ok_or_else(|| {
                    LookupError::Failed(format!(
                        "could not fetch config for pool {pool}: it has no rendered config yet"
                    ))
                })?;
                let mc = configs
                    .get(&reflector::ObjectRef::new(name))
                    .ok_or_else(|| {
                        LookupError::Failed(format!(
                            "could not fetch config {name} of pool {pool}: machineconfigs.machineconfiguration.openshift.io \"{name}\" not found"
                        ))
                    })?;
                let (moscs, mosbs) = (moscs.state(), mosbs.state());
                let image = image_for(
                    &p,
                    name,
                    moscs.iter().map(|c| &**c),
                    mosbs.iter().map(|b| &**b),
                );
                Ok(match image {
                    Some(image) => {
                        tracing::info!(pool, config = name, %image, "serving the pool's image-mode image");
                        Arc::new(mco_api::image_mode::embed::embed(&mc, &image))
                    }
                    None => mc,
                })
            }
            Source::Dir(dir) => {
                let dir = dir.clone();
                let pool = pool.to_string();
                tokio::task::spawn_blocking(move || lookup_dir(&dir, &pool))
                    .await
                    .map_err(|e| LookupError::Failed(e.to_string()))?
            }
        }
    }
}

/// Largest pool or config file read from a bootstrap directory.
const MAX_FILE: u64 = 16 * 1024 * 1024;

fn read_yaml<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    pool: &str,
) -> Result<T, LookupError> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LookupError::NotFound(format!(
                "pool {pool}: could not find file {}",
                path.display()
            )));
        }
        Err(e) => {
            return Err(LookupError::Failed(format!(
                "pool {pool}: could not read file {}: {e}",
                path.display()
            )));
        }
    };
    let mut buf = Vec::new();
    f.take(MAX_FILE + 1)
        .read_to_end(&mut buf)
        .map_err(|e| LookupError::Failed(format!("could not read {}: {e}", path.display())))?;
    if buf.len() as u64 > MAX_FILE {
        return Err(LookupError::Failed(format!(
            "{} is larger than {MAX_FILE} bytes",
            path.display()
        )));
    }
    mco_apimachinery::yaml::from_slice(&buf).map_err(|e| {
        LookupError::Failed(format!(
            "pool {pool}: could not unmarshal file {}: {e}",
            path.display()
        ))
    })
}

fn lookup_dir(dir: &std::path::Path, pool: &str) -> Result<Arc<MachineConfig>, LookupError> {
    let p: MachineConfigPool = read_yaml(
        &dir.join("machine-pools").join(format!("{pool}.yaml")),
        pool,
    )?;
    let name = config_for(&p).ok_or_else(|| {
        LookupError::NotFound(format!(
            "pool {pool}: status.configuration.name is empty, no rendered config"
        ))
    })?;
    if !crate::valid_name(name) {
        return Err(LookupError::Failed(format!(
            "pool {pool}: status.configuration.name {name:?} is not a valid object name"
        )));
    }
    let path = dir.join("machine-configs").join(format!("{name}.yaml"));
    // The file's identity: the parsed config is reused (and the answer cache keyed) while it holds.
    let stamp = std::fs::metadata(&path)
        .ok()
        .map(|m| (m.modified().ok(), m.len()));
    let mut cache = DIR_CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let (Some(stamp), Some((p, s, mc))) = (stamp, cache.as_ref())
        && *p == path
        && *s == stamp
    {
        return Ok(mc.clone());
    }
    let mut mc: MachineConfig = read_yaml(&path, pool)?;
    if let Some(stamp) = stamp {
        mc.metadata.resource_version = Some(format!("{stamp:?}"));
    }
    let mc = Arc::new(mc);
    if let Some(stamp) = stamp {
        *cache = Some((path, stamp, mc.clone()));
    }
    Ok(mc)
}

type Stamp = (Option<std::time::SystemTime>, u64);

/// The last config read from a bootstrap directory (a bootstrap serves one or two pools).
static DIR_CACHE: std::sync::Mutex<Option<(PathBuf, Stamp, Arc<MachineConfig>)>> =
    std::sync::Mutex::new(None);

#[cfg(test)]
mod tests {
    use super::*;
    use mco_api::{MachineConfigPoolStatus, PoolConfiguration};

    fn pool(spec: &str, status: &str, updated: i32) -> MachineConfigPool {
        let mut p = MachineConfigPool::new("worker", Default::default());
        p.spec.configuration = Some(PoolConfiguration {
            name: spec.into(),
            ..Default::default()
        });
        p.status = Some(MachineConfigPoolStatus {
            configuration: Some(PoolConfiguration {
                name: status.into(),
                ..Default::default()
            }),
            updated_machine_count: updated,
            ..Default::default()
        });
        p
    }

    fn mosc(image: &str) -> MachineOSConfig {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "worker"},
            "spec": {"machineConfigPool": {"name": "worker"},
                     "imageBuilder": {"imageBuilderType": "Job"},
                     "renderedImagePushSecret": {"name": "push"},
                     "renderedImagePushSpec": "registry.example/os:latest"},
            "status": {"currentImagePullSpec": image},
        }))
        .unwrap()
    }

    fn mosb(config: &str, image: &str) -> MachineOSBuild {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("worker-{config}")},
            "spec": {"machineConfig": {"name": config}, "machineOSConfig": {"name": "worker"},
                     "renderedImagePushSpec": "registry.example/os:latest"},
            "status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "digestedImagePushSpec": image},
        }))
        .unwrap()
    }

    #[test]
    fn a_new_machine_of_a_pool_in_image_mode_gets_its_image_as_upstreams_server_gives_it() {
        let img = "registry.example/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";
        let (c, b) = ([mosc(img)], [mosb("new", img)]);
        assert_eq!(
            image_for(&pool("new", "old", 1), "new", &c, &b).as_deref(),
            Some(img)
        );
        // No machine updated yet, another config's build, no MachineOSConfig: no image.
        assert_eq!(image_for(&pool("new", "old", 0), "new", &c, &b), None);
        assert_eq!(image_for(&pool("new", "old", 1), "old", &c, &b), None);
        assert_eq!(image_for(&pool("new", "old", 1), "new", &[], &b), None);
        // The cluster's own registry cannot be reached before the machine joins.
        let internal = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";
        let (c, b) = ([mosc(internal)], [mosb("new", internal)]);
        assert_eq!(image_for(&pool("new", "old", 1), "new", &c, &b), None);
    }

    #[test]
    fn a_new_machine_gets_the_target_once_one_machine_has_it() {
        assert_eq!(config_for(&pool("new", "old", 0)), Some("old"));
        assert_eq!(config_for(&pool("new", "old", 1)), Some("new"));
        assert_eq!(config_for(&pool("new", "", 0)), None);
        let bare = MachineConfigPool::new("worker", Default::default());
        assert_eq!(config_for(&bare), None);
    }

    #[test]
    fn a_bootstrap_dir_without_the_pool_is_a_404_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = lookup_dir(dir.path(), "infra").unwrap_err();
        assert_eq!(e.status(), http::StatusCode::NOT_FOUND);
        assert!(e.to_string().starts_with("pool infra: could not find file"));
    }
}
