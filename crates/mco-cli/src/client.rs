//! Reading a [`Snapshot`] from the API, building clients, and following changes for `-w`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use mco_api::mcn::client::McnApi;
use mco_api::{MachineConfig, MachineConfigNode, MachineConfigPool};

use crate::local::{self, LocalFacts};
use crate::snapshot::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("connecting to the cluster: {0}")]
    Connect(#[source] kube::Error),
    #[error("listing {what}: {source}")]
    List {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("reading {what} {name}: {source}")]
    Get {
        what: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Local(#[from] local::LocalError),
}

/// A client from `kubeconfig`, or the usual defaults (in-cluster, `$KUBECONFIG`, `~/.kube/config`),
/// with the `mco` command's User-Agent.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, Error> {
    let mut cfg = match kubeconfig {
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Connect(kube::Error::InferConfig(e)))?,
        Some(path) => {
            let err = |message: String| Error::Kubeconfig {
                path: path.to_path_buf(),
                message,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| err(e.to_string()))?
        }
    };
    cfg.headers
        .push(mco_api::user_agent::header(mco_api::user_agent::CLI));
    Client::try_from(cfg).map_err(Error::Connect)
}

async fn list<K>(api: Api<K>, what: &'static str) -> Result<Vec<K>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|source| Error::List { what, source })
}

/// Lists a type that may not be served (CRDs not installed yet): empty instead of an error.
async fn list_optional<K>(api: Api<K>, what: &'static str) -> Result<Vec<K>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match list(api, what).await {
        Err(Error::List {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 404 => Ok(Vec::new()),
        other => other,
    }
}

/// MachineConfigNodes at whichever version the cluster serves (mco's CRD or upstream's); none
/// where no version serves them.
async fn list_mcns(client: &Client) -> Result<Vec<MachineConfigNode>, Error> {
    const WHAT: &str = "machineconfignodes";
    let api = match McnApi::new(client.clone()).dynamic().await {
        Ok(api) => api,
        Err(kube::Error::Discovery(_)) => return Ok(Vec::new()),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
        Err(source) => return Err(Error::List { what: WHAT, source }),
    };
    list_optional(api, WHAT)
        .await?
        .into_iter()
        .map(|o| {
            mco_api::mcn::client::typed(o).map_err(|source| Error::List { what: WHAT, source })
        })
        .collect()
}

/// Lists a type whose check is optional: empty where it is not served or the caller may not
/// list it, so a user with narrower rights still gets the rest of a report.
async fn list_if_readable<K>(api: Api<K>, what: &'static str) -> Result<Vec<K>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match list_optional(api, what).await {
        Err(Error::List {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 403 => Ok(Vec::new()),
        other => other,
    }
}

/// The inputs `mco doctor` checks for refusals: the ControllerConfig, the KubeletConfigs and
/// the ContainerRuntimeConfigs (none where their CRDs are not installed or the caller may not
/// list them).
pub async fn fetch_inputs(
    client: &Client,
) -> Result<
    (
        Option<mco_api::ControllerConfig>,
        Vec<mco_api::KubeletConfig>,
        Vec<mco_api::ContainerRuntimeConfig>,
    ),
    Error,
> {
    let c = client.clone();
    let (ccs, kcs, crcs) = futures::try_join!(
        list_if_readable(
            Api::<mco_api::ControllerConfig>::all(c.clone()),
            "controllerconfigs"
        ),
        list_if_readable(
            Api::<mco_api::KubeletConfig>::all(c.clone()),
            "kubeletconfigs"
        ),
        list_if_readable(
            Api::<mco_api::ContainerRuntimeConfig>::all(c.clone()),
            "containerruntimeconfigs"
        ),
    )?;
    let cc = ccs.into_iter().find(|cc| {
        cc.metadata.name.as_deref() == Some(mco_api::constants::names::CONTROLLER_CONFIG)
    });
    Ok((cc, kcs, crcs))
}

/// The registries generator's inputs, as the controller reads them.
#[derive(Debug, Default, Clone)]
pub struct RegistryInputs {
    pub image: Option<mco_api::Image>,
    pub idms: Vec<mco_api::ImageDigestMirrorSet>,
    pub itms: Vec<mco_api::ImageTagMirrorSet>,
    pub icsp: Vec<mco_api::ImageContentSourcePolicy>,
    pub cips: Vec<mco_api::ClusterImagePolicy>,
    pub ips: Vec<mco_api::ImagePolicy>,
    /// The ControllerConfig's `spec.releaseImage` (empty without one).
    pub release_image: String,
    /// The first `v1alpha1` image policy `v1` refuses, as the controller names it: with one,
    /// the controller writes no registries config at all.
    pub unconverted: Option<mco_generate::registries::Refused>,
}

impl RegistryInputs {
    /// Borrowed, as `mco_generate::registries` takes them.
    pub fn as_inputs(&self) -> mco_generate::registries::Inputs<'_> {
        mco_generate::registries::Inputs {
            image: self.image.as_ref(),
            idms: &self.idms,
            itms: &self.itms,
            icsp: &self.icsp,
            cips: &self.cips,
            ips: &self.ips,
            release_image: Some(self.release_image.as_str()),
        }
    }
}

/// The registries generator's inputs (none of a kind whose CRD is not installed or that the
/// caller may not list), for `mco doctor` to check as the controller does.
pub async fn fetch_registry_inputs(client: &Client) -> Result<RegistryInputs, Error> {
    let c = client.clone();
    let (images, idms, itms, icsp, policies, ccs) = futures::try_join!(
        list_if_readable(Api::<mco_api::Image>::all(c.clone()), "images"),
        list_if_readable(
            Api::<mco_api::ImageDigestMirrorSet>::all(c.clone()),
            "imagedigestmirrorsets"
        ),
        list_if_readable(
            Api::<mco_api::ImageTagMirrorSet>::all(c.clone()),
            "imagetagmirrorsets"
        ),
        list_if_readable(
            Api::<mco_api::ImageContentSourcePolicy>::all(c.clone()),
            "imagecontentsourcepolicies"
        ),
        fetch_image_policies(&c),
        list_if_readable(
            Api::<mco_api::ControllerConfig>::all(c.clone()),
            "controllerconfigs"
        ),
    )?;
    let (cips, ips, unconverted) = match policies {
        Ok((cips, ips)) => (cips, ips, None),
        Err(refused) => (vec![], vec![], Some(refused)),
    };
    let release_image = ccs
        .into_iter()
        .find(|cc| {
            cc.metadata.name.as_deref() == Some(mco_api::constants::names::CONTROLLER_CONFIG)
        })
        .map(|cc| cc.spec.release_image)
        .unwrap_or_default();
    let image = images
        .into_iter()
        .find(|i| i.metadata.name.as_deref() == Some(mco_api::generators::IMAGE_CONFIG_NAME));
    Ok(RegistryInputs {
        image,
        idms,
        itms,
        icsp,
        cips,
        ips,
        release_image,
        unconverted,
    })
}

/// The image policies as the controller reads them: in `config.openshift.io/v1` where it is
/// served (OpenShift 4.20 and newer), else in `v1alpha1` (4.16–4.19, Technology Preview)
/// converted to `v1`, or the first object `v1` refuses; none where neither is served or the
/// caller may not list them.
pub async fn fetch_image_policies(
    client: &Client,
) -> Result<
    Result<
        (Vec<mco_api::ClusterImagePolicy>, Vec<mco_api::ImagePolicy>),
        mco_generate::registries::Refused,
    >,
    Error,
> {
    use mco_api::generators::v1alpha1;
    /// `None` where the version is not served.
    async fn list_served<K>(api: Api<K>, what: &'static str) -> Result<Option<Vec<K>>, Error>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        match api.list(&ListParams::default()).await {
            Ok(l) => Ok(Some(l.items)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(Some(vec![])),
            Err(source) => Err(Error::List { what, source }),
        }
    }
    // The controller's words for a refusal: the field, then why.
    fn refused(e: v1alpha1::ConversionError) -> mco_generate::registries::Refused {
        mco_generate::registries::Refused {
            kind: e.kind,
            name: e.name,
            message: format!("{}: {}", e.field, e.message),
        }
    }
    let c = client.clone();
    const CIPS: &str = "clusterimagepolicies";
    const IPS: &str = "imagepolicies";
    if let Some(cips) =
        list_served(Api::<mco_api::ClusterImagePolicy>::all(c.clone()), CIPS).await?
    {
        let ips = list_served(Api::<mco_api::ImagePolicy>::all(c), IPS).await?;
        return Ok(Ok((cips, ips.unwrap_or_default())));
    }
    let Some(cips) = list_served(Api::<v1alpha1::ClusterImagePolicy>::all(c.clone()), CIPS).await?
    else {
        return Ok(Ok((vec![], vec![])));
    };
    let ips = list_served(Api::<v1alpha1::ImagePolicy>::all(c), IPS)
        .await?
        .unwrap_or_default();
    let converted = (|| {
        let cips = cips
            .iter()
            .map(|o| o.to_v1())
            .collect::<Result<Vec<_>, _>>()?;
        let ips = ips
            .iter()
            .map(|o| o.to_v1())
            .collect::<Result<Vec<_>, _>>()?;
        Ok((cips, ips))
    })();
    Ok(converted.map_err(refused))
}

/// OpenShift's cluster settings the `97-` and `98-` kubelet configs come from:
/// `nodes.config.openshift.io/cluster`, `FeatureGate/cluster` and `ClusterVersion/version`
/// (each `None` where it, or its CRD, is missing or the caller may not read it).
#[derive(Debug, Default)]
pub struct ClusterSettings {
    pub node: Option<mco_api::NodeConfig>,
    pub feature_gate: Option<mco_api::FeatureGate>,
    pub cluster_version: Option<mco_api::ClusterVersion>,
}

pub async fn fetch_cluster_settings(client: &Client) -> Result<ClusterSettings, Error> {
    use mco_api::generators::{CLUSTER_CONFIG_NAME, CLUSTER_VERSION_NAME};
    let c = client.clone();
    fn named<K: kube::Resource>(items: Vec<K>, name: &str) -> Option<K> {
        items
            .into_iter()
            .find(|o| o.meta().name.as_deref() == Some(name))
    }
    let (nodes, gates, versions) = futures::try_join!(
        list_if_readable(
            Api::<mco_api::NodeConfig>::all(c.clone()),
            "nodes.config.openshift.io"
        ),
        list_if_readable(Api::<mco_api::FeatureGate>::all(c.clone()), "featuregates"),
        list_if_readable(
            Api::<mco_api::ClusterVersion>::all(c.clone()),
            "clusterversions"
        ),
    )?;
    Ok(ClusterSettings {
        node: named(nodes, CLUSTER_CONFIG_NAME),
        feature_gate: named(gates, CLUSTER_CONFIG_NAME),
        cluster_version: named(versions, CLUSTER_VERSION_NAME),
    })
}

/// Upstream's on-cluster image mode objects, as `mco doctor` reads them: the `v1` kinds
/// (OpenShift 4.19 and newer) the node controller goes by, or, on a cluster that serves only the
/// Technology Preview's `v1alpha1` MachineOSConfig (4.16 to 4.18), those as (name, pool).
#[derive(Debug, Default, Clone)]
pub struct ImageModeObjects {
    pub configs: Vec<mco_api::MachineOSConfig>,
    pub builds: Vec<mco_api::MachineOSBuild>,
    /// `v1alpha1` MachineOSConfigs as (name, pool); read only where no `v1` one is listed.
    pub tech_preview: Vec<(String, String)>,
}

/// Upstream's MachineOSConfigs and MachineOSBuilds: `v1`, else the Technology Preview's
/// `v1alpha1` MachineOSConfigs; none where neither is served or the caller may not list them.
pub async fn fetch_machine_os_configs(client: &Client) -> Result<ImageModeObjects, Error> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let c = client.clone();
    let (configs, builds) = futures::try_join!(
        list_if_readable(
            Api::<mco_api::MachineOSConfig>::all(c.clone()),
            "machineosconfigs"
        ),
        list_if_readable(
            Api::<mco_api::MachineOSBuild>::all(c.clone()),
            "machineosbuilds"
        ),
    )?;
    if !configs.is_empty() {
        return Ok(ImageModeObjects {
            configs,
            builds,
            tech_preview: Vec::new(),
        });
    }
    let gvk = GroupVersionKind::gvk(mco_api::constants::PREFIX, "v1alpha1", "MachineOSConfig");
    let api: Api<DynamicObject> = Api::all_with(c, &ApiResource::from_gvk(&gvk));
    let tech_preview = list_if_readable(api, "machineosconfigs")
        .await?
        .into_iter()
        .map(|o| {
            let pool = o.data["spec"]["machineConfigPool"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (o.metadata.name.unwrap_or_default(), pool)
        })
        .collect();
    Ok(ImageModeObjects {
        configs,
        builds,
        tech_preview,
    })
}

/// Upstream's PinnedImageSets (`v1`, OpenShift 4.19 and newer); none where the kind is not
/// served or the caller may not list it.
pub async fn fetch_pinned_image_sets(
    client: &Client,
) -> Result<Vec<crate::doctor::PinnedImageSet>, Error> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let gvk = GroupVersionKind::gvk(mco_api::constants::PREFIX, "v1", "PinnedImageSet");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    Ok(list_if_readable(api, "pinnedimagesets")
        .await?
        .into_iter()
        .map(|o| crate::doctor::PinnedImageSet {
            images: o.data["spec"]["pinnedImages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["name"].as_str().map(str::to_owned))
                .collect(),
            name: o.metadata.name.unwrap_or_default(),
            labels: o.metadata.labels.unwrap_or_default(),
        })
        .collect())
}

/// Reads one object whose check is optional: `None` where it is absent or the caller may not
/// read it.
async fn get_if_readable<K>(api: Api<K>, what: &'static str, name: &str) -> Result<Option<K>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
        other => other.map_err(|source| Error::Get {
            what,
            name: name.to_string(),
            source,
        }),
    }
}

/// The controller's Deployment and the machine config server's DaemonSet, as mco-manifests
/// names them.
const CONTROLLER_DEPLOYMENT: &str = "mco-controller";
const SERVER_DAEMONSET: &str = "mco-server";

/// The value of `--<flag>=` among a Deployment's container arguments.
fn deployment_arg(d: &k8s_openapi::api::apps::v1::Deployment, flag: &str) -> Option<String> {
    let prefix = format!("--{flag}=");
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.args.iter().flatten())
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

/// The machine config server's CA Secret, bundle ConfigMap, serving Secret and DaemonSet, one
/// GET each; each `None` where it is absent or the caller may not read it. They are read in the
/// namespace the controller Deployment in `namespace` (the install namespace) keeps them in
/// (`--server-certs-namespace`: upstream's `openshift-machine-config-operator` on OpenShift),
/// else in `namespace`. The serving Secret is `serving_name`, else the one the Deployment's
/// `--server-tls-secret` names, else `mco-server-tls`.
pub async fn fetch_server_certs(
    client: &Client,
    namespace: &str,
    serving_name: Option<&str>,
) -> Result<crate::doctor::ServerCertObjects, Error> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use mco_api::constants::names::{SERVER_CA, SERVER_TLS_SECRET};
    let controller = get_if_readable(
        Api::<Deployment>::namespaced(client.clone(), namespace),
        "deployment",
        CONTROLLER_DEPLOYMENT,
    )
    .await?;
    let arg = |name: &str| deployment_arg(controller.as_ref()?, name);
    let install_namespace = namespace;
    let namespace = arg("server-certs-namespace").unwrap_or_else(|| namespace.to_string());
    let namespace = namespace.as_str();
    let serving_name = serving_name
        .map(str::to_owned)
        .or_else(|| arg("server-tls-secret"))
        .unwrap_or_else(|| SERVER_TLS_SECRET.to_string());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let (ca, bundle, daemonset) = futures::try_join!(
        get_if_readable(secrets.clone(), "secret", SERVER_CA),
        get_if_readable(maps, "configmap", SERVER_CA),
        get_if_readable(
            Api::<DaemonSet>::namespaced(client.clone(), namespace),
            "daemonset",
            SERVER_DAEMONSET
        ),
    )?;
    // Absent and unreadable differ here: only a Secret known to be absent is a finding.
    let (serving, serving_missing) = match secrets.get_opt(&serving_name).await {
        Ok(s) => {
            let missing = s.is_none();
            (s, missing)
        }
        Err(kube::Error::Api(s)) if s.code == 403 => (None, false),
        Err(source) => {
            return Err(Error::Get {
                what: "secret",
                name: serving_name,
                source,
            });
        }
    };
    Ok(crate::doctor::ServerCertObjects {
        namespace: namespace.to_string(),
        controller_namespace: (namespace != install_namespace)
            .then(|| install_namespace.to_string()),
        ca,
        bundle,
        serving,
        serving_name,
        serving_missing,
        server_daemonset: daemonset.map(|_| SERVER_DAEMONSET.to_string()),
    })
}

/// Reads everything the views need.
pub async fn fetch(client: &Client) -> Result<Snapshot, Error> {
    let c = client.clone();
    let (pools, nodes, mcns, mcs, pods, pdbs, policies) = futures::try_join!(
        list_optional(
            Api::<MachineConfigPool>::all(c.clone()),
            "machineconfigpools"
        ),
        list(Api::<Node>::all(c.clone()), "nodes"),
        list_mcns(&c),
        list_optional(Api::<MachineConfig>::all(c.clone()), "machineconfigs"),
        list(Api::<Pod>::all(c.clone()), "pods"),
        list_optional(
            Api::<PodDisruptionBudget>::all(c.clone()),
            "poddisruptionbudgets"
        ),
        list_optional(
            Api::<mco_api::RolloutPolicy>::all(c.clone()),
            "rolloutpolicies"
        ),
    )?;
    Ok(Snapshot {
        now: jiff::Timestamp::now(),
        pools: shared(pools),
        nodes: shared(nodes),
        mcns: shared(mcns),
        machine_configs: mcs,
        pods,
        pdbs: shared(pdbs),
        policies: shared(policies),
        index: Default::default(),
    })
}

fn shared<K>(items: Vec<K>) -> Vec<Arc<K>> {
    items.into_iter().map(Arc::new).collect()
}

/// Reads the disks of the given nodes that live under `data_dir/nodes/<name>` (simulated nodes
/// of `mco up`). Nodes without a directory there, or whose disk cannot be read, are left out:
/// the API alone still explains them.
pub fn gather_sim_roots(data_dir: &Path, nodes: &[String]) -> BTreeMap<String, LocalFacts> {
    nodes
        .iter()
        .filter_map(|n| {
            // Absolute, so the commands printed work from any directory.
            let root = std::fs::canonicalize(data_dir.join("nodes").join(n)).ok()?;
            if !root.is_dir() {
                return None;
            }
            local::gather(&root).ok().map(|f| (n.clone(), f))
        })
        .collect()
}

/// Calls `render` with a fresh snapshot now and after every change to pools, nodes, MCNs or
/// PDBs, at most once per `min_interval`, and at least every `max_interval` (so durations
/// advance). Returns when a watch ends or `render` returns `false`.
pub async fn follow(
    client: &Client,
    min_interval: Duration,
    max_interval: Duration,
    mut render: impl FnMut(&Snapshot) -> bool,
) -> Result<(), Error> {
    let cfg = watcher::Config::default();
    let mcns = McnApi::new(client.clone()).dynamic().await.ok();
    let mut watches = vec![
        watcher(Api::<MachineConfigPool>::all(client.clone()), cfg.clone())
            .default_backoff()
            .map_ok(|_| ())
            .boxed(),
        watcher(Api::<Node>::all(client.clone()), cfg.clone())
            .default_backoff()
            .map_ok(|_| ())
            .boxed(),
        watcher(Api::<PodDisruptionBudget>::all(client.clone()), cfg.clone())
            .default_backoff()
            .map_ok(|_| ())
            .boxed(),
    ];
    if let Some(mcns) = mcns {
        watches.push(watcher(mcns, cfg).default_backoff().map_ok(|_| ()).boxed());
    }
    let events = futures::stream::select_all(watches);
    tokio::pin!(events);
    loop {
        let snap = fetch(client).await?;
        if !render(&snap) {
            return Ok(());
        }
        let started = tokio::time::Instant::now();
        // Wait for a change (or the refresh tick), then let a burst settle.
        tokio::select! {
            ev = events.next() => {
                if ev.is_none() {
                    return Ok(());
                }
            }
            _ = tokio::time::sleep(max_interval) => {}
        }
        let wait = min_interval.saturating_sub(started.elapsed());
        tokio::time::sleep(wait).await;
        // Drain what piled up meanwhile so one render covers it.
        while let Some(Some(_)) = futures::FutureExt::now_or_never(events.next()) {}
    }
}
