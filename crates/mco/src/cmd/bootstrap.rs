//! `mco bootstrap`: render each pool's first config from a directory of manifests with no API
//! server, as the installer's bootstrap does, into the layout `mco server --bootstrap-dir`
//! serves: `<dest>/machine-pools/<pool>.yaml` (with `spec` and `status.configuration` naming
//! the rendered config) and `<dest>/machine-configs/<rendered>.yaml`. The template controller's
//! configs are generated from the directory's ControllerConfig, the generators' from its
//! KubeletConfigs, ContainerRuntimeConfigs, registry objects (mirror sets, `Image/cluster`,
//! image policies) and OpenShift's `Node` and `FeatureGate` settings, and the render is the
//! controller's, so names and contents equal what the cluster renders from the same objects: a
//! disconnected cluster's machines boot with their mirrors.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kube::ResourceExt;
use mco_api::constants::names;
use mco_api::generators::IMAGE_CONFIG_NAME;
use mco_api::{
    ControllerConfigSpec, MachineConfig, MachineConfigPool, MachineConfigPoolStatus,
    PoolConfiguration,
};
use mco_controller::generators::{Generator, pool_mcs};

use super::render::{Inputs, find_pool, load_path};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// MachineConfig, MachineConfigPool and ControllerConfig manifests: a directory (or file) of
    /// YAML or JSON. Pools `master` and `worker` are built in when not given.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    /// Where to write the pools and rendered configs.
    #[arg(long, value_name = "DIR")]
    pub dest_dir: PathBuf,
    /// The value of the generated-by-controller-version annotation.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    pub controller_version: String,
}

fn write(path: &Path, value: serde_json::Value) -> anyhow::Result<()> {
    let text = mco_apimachinery::yaml::to_string(&value)?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut inputs = Inputs::default();
    load_path(&args.manifests, &mut inputs)?;
    let cc: ControllerConfigSpec = inputs
        .controller_configs
        .first()
        .map(|c| c.spec.clone())
        .unwrap_or_default();
    // The template controller's configs, as the cluster's controller writes them from the same
    // ControllerConfig; they replace manifests of the same name, as in the cluster.
    if let Some(cc) = inputs.controller_configs.first() {
        let refused = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!("ControllerConfig {}: {e}", names::CONTROLLER_CONFIG)
        };
        // The pull secret it names and the APIServer's TLS profile, from the same manifests,
        // as the cluster's template controller reads them from the API.
        let pull_secret =
            match mco_generate::template::pull_secret_ref(&cc.spec).map_err(|e| refused(&e))? {
                None => None,
                Some((namespace, name)) => {
                    let secret = inputs
                    .secrets
                    .iter()
                    .find(|s| {
                        s.metadata.namespace.as_deref() == Some(namespace.as_str())
                            && s.metadata.name.as_deref() == Some(name.as_str())
                    })
                    .ok_or_else(|| {
                        refused(&format!(
                            "spec.pullSecret: Secret {namespace}/{name} is not among the manifests"
                        ))
                    })?;
                    Some(
                        mco_generate::template::pull_secret_data(secret)
                            .map_err(|e| refused(&e))?
                            .to_vec(),
                    )
                }
            };
        let tls_profile = inputs
            .api_servers
            .iter()
            .find(|a| {
                a.metadata.name.as_deref() == Some(mco_api::generators::API_SERVER_CONFIG_NAME)
            })
            .and_then(|a| a.spec.tls_security_profile.as_ref());
        let cluster = mco_generate::template::Cluster {
            pull_secret: pull_secret.as_deref(),
            tls_profile,
        };
        let generated = mco_generate::template::generate(cc, &cluster, &args.controller_version)
            .map_err(|e| refused(&e))?;
        replace_by_name(&mut inputs.mcs, generated);
    }
    let mut pool_names: Vec<String> = inputs
        .pools
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    for builtin in [names::MASTER_POOL, names::WORKER_POOL] {
        if !pool_names.iter().any(|n| n == builtin) {
            pool_names.push(builtin.to_string());
        }
    }
    let mut pools = vec![];
    for name in &pool_names {
        if !mco_server::valid_name(name) {
            bail!("MachineConfigPool {name:?}: metadata.name is not a valid object name");
        }
        pools.push(find_pool(name, &inputs.pools)?);
    }
    // The 97- and 98- kubelet configs first: a KubeletConfig's builds over them.
    let kubelet_defaults = kubelet_defaults(&pools, &inputs, &args.controller_version)?;
    replace_by_name(&mut inputs.mcs, kubelet_defaults);
    let generated = generated_configs(&pools, &inputs, &args.controller_version)?;
    replace_by_name(&mut inputs.mcs, generated);
    let pools_dir = args.dest_dir.join("machine-pools");
    let configs_dir = args.dest_dir.join("machine-configs");
    for d in [&pools_dir, &configs_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    for mut pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let rendered =
            mco_render::render::render_pool(&pool, &inputs.mcs, &cc, &args.controller_version)
                .with_context(|| format!("rendering pool {name}"))?;
        let mc = rendered.machine_config;
        let rendered_name = mc.metadata.name.clone().unwrap_or_default();
        let configuration = PoolConfiguration {
            name: rendered_name.clone(),
            source: rendered.source,
        };
        pool.spec.configuration = Some(configuration.clone());
        let status = pool
            .status
            .get_or_insert_with(MachineConfigPoolStatus::default);
        status.configuration = Some(configuration);
        write(
            &configs_dir.join(format!("{rendered_name}.yaml")),
            serde_json::to_value(&mc)?,
        )?;
        write(
            &pools_dir.join(format!("{name}.yaml")),
            serde_json::to_value(&pool)?,
        )?;
        eprintln!("mco bootstrap: pool {name}: {rendered_name}");
    }
    Ok(())
}

/// `generated` in place of the manifests' configs of the same names, as the cluster's
/// controllers overwrite them.
fn replace_by_name(mcs: &mut Vec<MachineConfig>, generated: Vec<MachineConfig>) {
    mcs.retain(|m| !generated.iter().any(|g| g.metadata.name == m.metadata.name));
    mcs.extend(generated);
}

/// Each pool's `97-` and `98-` kubelet configs, from the manifests' `nodes.config.openshift.io`
/// and `FeatureGate` named `cluster` (and the release `ClusterVersion/version` names), as the
/// cluster's controller writes them. A refused input stops the bootstrap, naming it.
fn kubelet_defaults(
    pools: &[MachineConfigPool],
    inputs: &Inputs,
    version: &str,
) -> anyhow::Result<Vec<MachineConfig>> {
    use mco_api::generators::{CLUSTER_CONFIG_NAME, CLUSTER_VERSION_NAME};
    use mco_generate::nodeconfig;
    fn named<'a, K: kube::Resource>(objs: &'a [K], name: &str) -> Option<&'a K> {
        objs.iter().find(|o| o.meta().name.as_deref() == Some(name))
    }
    let node = named(&inputs.node_configs, CLUSTER_CONFIG_NAME);
    let settings = nodeconfig::Settings {
        node: node.map(|n| &n.spec),
        feature_gate: named(&inputs.feature_gates, CLUSTER_CONFIG_NAME),
        cluster_version: named(&inputs.cluster_versions, CLUSTER_VERSION_NAME),
    };
    // The FeatureGate's refusals name it already.
    let gates =
        nodeconfig::judge(settings, &inputs.mcs).map_err(|r| match r.is_feature_gate() {
            true => anyhow::anyhow!("{}", r.error()),
            false => anyhow::anyhow!("nodes.config.openshift.io cluster: {}", r.error()),
        })?;
    let cluster_inputs = nodeconfig::Inputs {
        node: node.map(|n| &n.spec),
        gates: gates.as_ref(),
    };
    let mut out = vec![];
    for pool in pools {
        let pool_name = pool.name_any();
        out.extend(
            nodeconfig::pool_configs(
                &pool_name,
                &pool_mcs(pool, &inputs.mcs),
                cluster_inputs,
                version,
            )
            .with_context(|| format!("the kubelet configs of pool {pool_name}"))?,
        );
    }
    Ok(out)
}

/// What the cluster's generators write from the same objects: for each KubeletConfig and
/// ContainerRuntimeConfig (in manifest order; the first of a kind without a suffix, as on a
/// fresh cluster, then `-1`, `-2`...) one config per pool it selects, and each pool's registries
/// config while there are registry inputs. A refused object stops the bootstrap, naming it.
fn generated_configs(
    pools: &[MachineConfigPool],
    inputs: &Inputs,
    version: &str,
) -> anyhow::Result<Vec<MachineConfig>> {
    fn of_kind<K: Generator>(
        objs: &[K],
        pools: &[MachineConfigPool],
        mcs: &[MachineConfig],
        version: &str,
        out: &mut Vec<MachineConfig>,
    ) -> anyhow::Result<()> {
        for (i, obj) in objs.iter().enumerate() {
            let what = format!("{} {}", K::kind(&()), obj.name_any());
            let mut selected = vec![];
            for p in pools {
                if mco_generate::selects(obj.selector(), p).with_context(|| what.clone())? {
                    selected.push(p);
                }
            }
            if selected.is_empty() {
                bail!("{what}: could not find any MachineConfigPool set for {what}");
            }
            let suffix = if i == 0 { String::new() } else { i.to_string() };
            for pool in selected {
                let pool_name = pool.name_any();
                let files = obj
                    .files(&pool_mcs(pool, mcs))
                    .with_context(|| format!("{what}, pool {pool_name}"))?;
                let name = mco_generate::managed_name(&pool_name, K::KIND, &suffix);
                out.push(mco_generate::machine_config(
                    &name, &pool_name, version, files,
                ));
            }
        }
        Ok(())
    }
    let mut out = vec![];
    of_kind(
        &inputs.kubelet_configs,
        pools,
        &inputs.mcs,
        version,
        &mut out,
    )?;
    of_kind(
        &inputs.runtime_configs,
        pools,
        &inputs.mcs,
        version,
        &mut out,
    )?;
    // As the controller: one image policy `v1` refuses leaves every registries config unwritten.
    if let Some(refused) = inputs.unconverted.first() {
        bail!("{refused}");
    }
    let registries = mco_generate::registries::Inputs {
        image: inputs
            .images
            .iter()
            .find(|i| i.metadata.name.as_deref() == Some(IMAGE_CONFIG_NAME)),
        idms: &inputs.idms,
        itms: &inputs.itms,
        icsp: &inputs.icsp,
        cips: &inputs.cips,
        ips: &inputs.ips,
        release_image: inputs
            .controller_configs
            .first()
            .map(|cc| cc.spec.release_image.as_str()),
    };
    if !registries.is_empty() {
        for pool in pools {
            let pool_name = pool.name_any();
            let files =
                mco_generate::registries::pool_files(&registries, &pool_mcs(pool, &inputs.mcs))
                    .with_context(|| format!("the registries config of pool {pool_name}"))?;
            let name = mco_generate::managed_name(&pool_name, "registries", "");
            out.push(mco_generate::machine_config(
                &name, &pool_name, version, files,
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kubelet_config(name: &str, kubelet: serde_json::Value) -> mco_api::KubeletConfig {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "KubeletConfig",
            "metadata": {"name": name},
            "spec": {
                "machineConfigPoolSelector": {"matchLabels": {"pools.operator.machineconfiguration.openshift.io/worker": ""}},
                "kubeletConfig": kubelet,
            },
        }))
        .unwrap()
    }

    /// A fresh cluster's template configs, and its built-in pools.
    fn fresh_cluster() -> (Inputs, Vec<MachineConfigPool>) {
        let cc = mco_api::ControllerConfig::new("machine-config-controller", Default::default());
        let inputs = Inputs {
            mcs: mco_generate::template::generate(&cc, &Default::default(), "v").unwrap(),
            ..Default::default()
        };
        let pools = vec![
            find_pool("master", &[]).unwrap(),
            find_pool("worker", &[]).unwrap(),
        ];
        (inputs, pools)
    }

    #[test]
    fn generators_name_their_configs_as_a_fresh_cluster_does_and_refusals_name_the_object() {
        let (mut inputs, pools) = fresh_cluster();
        inputs.kubelet_configs = vec![
            kubelet_config("a", json!({"maxPods": 300})),
            kubelet_config("b", json!({"podPidsLimit": 8192})),
        ];
        let names: Vec<String> = generated_configs(&pools, &inputs, "v")
            .unwrap()
            .iter()
            .map(|m| m.name_any())
            .collect();
        assert_eq!(
            names,
            [
                "99-worker-generated-kubelet",
                "99-worker-generated-kubelet-1"
            ]
        );
        inputs.kubelet_configs = vec![kubelet_config("bad", json!({"cgroupDriver": "cgroupfs"}))];
        let err = format!("{:#}", generated_configs(&pools, &inputs, "v").unwrap_err());
        assert!(
            err.starts_with("KubeletConfig bad, pool worker: ") && err.contains("cgroupDriver"),
            "{err}"
        );
    }

    /// A `v1alpha1` ClusterImagePolicy (OpenShift 4.16–4.19) writes each pool's registries
    /// config as the `v1` one does; one `v1` refuses stops the bootstrap, naming its field.
    #[test]
    fn v1alpha1_image_policies_write_the_registries_configs_or_stop_the_bootstrap() {
        // An ECDSA P-256 public key, PEM, base64.
        const KEY: &str = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFZ0dLb2VUb2wwWXYvRURJT21SdHVYdWxPTllXNQpwT2xYa1R0SFZlbnRaR2dpV1ZTc09yUkpZeUQrMWhRaTVOTlpaQTdJZnBwRWJjeXJGbDJwYlU3SExRPT0KLS0tLS1FTkQgUFVCTElDIEtFWS0tLS0tCg==";
        let (mut inputs, pools) = fresh_cluster();
        let cip = json!({
            "apiVersion": "config.openshift.io/v1alpha1", "kind": "ClusterImagePolicy",
            "metadata": {"name": "release"},
            "spec": {
                "scopes": ["quay.io/openshift-release-dev/ocp-release"],
                "policy": {"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": KEY}}},
            },
        });
        super::super::render::add_object(cip, &mut inputs).unwrap();
        let got = generated_configs(&pools, &inputs, "v").unwrap();
        let names: Vec<String> = got.iter().map(|m| m.name_any()).collect();
        assert_eq!(
            names,
            [
                "99-master-generated-registries",
                "99-worker-generated-registries"
            ]
        );
        let files = &got[1].spec.config.as_ref().unwrap()["storage"]["files"];
        let policy = files
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == "/etc/containers/policy.json")
            .unwrap_or_else(|| panic!("no policy.json in {files}"));
        let source = policy["contents"]["source"].as_str().unwrap();
        let json = mco_render::ignition::decode_data_url(source, None).unwrap();
        let policy: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let req = &policy["transports"]["docker"]["quay.io/openshift-release-dev/ocp-release"][0];
        assert_eq!(req["type"], "sigstoreSigned", "{policy}");
        assert_eq!(req["keyData"], KEY, "{policy}");

        let short = json!({
            "apiVersion": "config.openshift.io/v1alpha1", "kind": "ImagePolicy",
            "metadata": {"name": "short", "namespace": "team"},
            "spec": {
                "scopes": ["quay.io/team"],
                "policy": {"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": "a2V5"}}},
            },
        });
        super::super::render::add_object(short, &mut inputs).unwrap();
        let err = format!("{:#}", generated_configs(&pools, &inputs, "v").unwrap_err());
        assert_eq!(
            err,
            "ImagePolicy team/short: spec.policy.rootOfTrust.publicKey.keyData: should be at least 68 chars long in config.openshift.io/v1"
        );
    }

    #[test]
    fn node_settings_and_feature_gates_give_each_pool_its_97_and_98_configs() {
        let (mut inputs, pools) = fresh_cluster();
        for doc in [
            json!({"apiVersion": "config.openshift.io/v1", "kind": "Node",
                   "metadata": {"name": "cluster"},
                   "spec": {"workerLatencyProfile": "MediumUpdateAverageReaction"}}),
            json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
                   "metadata": {"name": "version"}, "spec": {},
                   "status": {"desired": {"version": "4.20.1"}}}),
            json!({"apiVersion": "config.openshift.io/v1", "kind": "FeatureGate",
            "metadata": {"name": "cluster"}, "spec": {},
            "status": {"featureGates": [
                {"version": "4.20.1", "enabled": [{"name": "NewThing"}], "disabled": []},
                {"version": "4.19.0", "enabled": [], "disabled": [{"name": "NewThing"}]},
            ]}}),
            // A node, not the cluster's settings.
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cluster"}}),
        ] {
            super::super::render::add_object(doc, &mut inputs).unwrap();
        }
        assert_eq!(inputs.node_configs.len(), 1);
        let got = kubelet_defaults(&pools, &inputs, "v").unwrap();
        let names: Vec<String> = got.iter().map(|m| m.name_any()).collect();
        assert_eq!(
            names,
            [
                "97-master-generated-kubelet",
                "98-master-generated-kubelet",
                "97-worker-generated-kubelet",
                "98-worker-generated-kubelet"
            ]
        );
        let text = serde_json::to_string(&got[3]).unwrap();
        assert!(text.contains("NewThing%3A%20true"), "{text}");
        assert!(
            text.contains("nodeStatusUpdateFrequency%3A%2020s"),
            "{text}"
        );
        let master = serde_json::to_string(&got[1]).unwrap();
        assert!(
            master.contains("nodeStatusUpdateFrequency%3A%2010s"),
            "{master}"
        );

        inputs.cluster_versions.clear();
        let err = format!("{:#}", kubelet_defaults(&pools, &inputs, "v").unwrap_err());
        assert_eq!(
            err,
            "FeatureGate cluster: status.featureGates lists 2 releases, and no ClusterVersion version names the one to use"
        );
        inputs.feature_gates.clear();
        inputs.node_configs[0].spec.cgroup_mode = "v3".into();
        let err = format!("{:#}", kubelet_defaults(&pools, &inputs, "v").unwrap_err());
        assert_eq!(
            err,
            "nodes.config.openshift.io cluster: unknown cgroup mode found v3, failed to update the machine config resource"
        );
    }
}
