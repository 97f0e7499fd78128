//! `mco bootstrap`: render each pool's first config from a directory of manifests with no API
//! server, as the installer's bootstrap does, into the layout `mco server --bootstrap-dir`
//! serves: `<dest>/machine-pools/<pool>.yaml` (with `spec` and `status.configuration` naming
//! the rendered config) and `<dest>/machine-configs/<rendered>.yaml`. The template controller's
//! configs are generated from the directory's ControllerConfig and the render is the
//! controller's, so names and contents equal what the cluster renders from the same objects.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use mco_api::constants::names;
use mco_api::{ControllerConfigSpec, MachineConfigPoolStatus, PoolConfiguration};

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
        inputs
            .mcs
            .retain(|m| !generated.iter().any(|g| g.metadata.name == m.metadata.name));
        inputs.mcs.extend(generated);
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
    let pools_dir = args.dest_dir.join("machine-pools");
    let configs_dir = args.dest_dir.join("machine-configs");
    for d in [&pools_dir, &configs_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    for name in &pool_names {
        if !mco_server::valid_name(name) {
            bail!("MachineConfigPool {name:?}: metadata.name is not a valid object name");
        }
        let mut pool = find_pool(name, &inputs.pools)?;
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
