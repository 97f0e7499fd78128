//! `mco render`: render a pool's MachineConfigs offline, exactly as the render controller would.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use mco_api::constants::names;
use mco_api::generators::v1alpha1;
use mco_api::{
    APIServer, ClusterImagePolicy, ClusterVersion, ContainerRuntimeConfig, ControllerConfig,
    ControllerConfigSpec, FeatureGate, Image, ImageContentSourcePolicy, ImageDigestMirrorSet,
    ImagePolicy, ImageTagMirrorSet, KubeletConfig, MachineConfig, MachineConfigPool, NodeConfig,
};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Output {
    Yaml,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pool to render. `master` and `worker` are built in (they select MCs labelled
    /// `machineconfiguration.openshift.io/role: <pool>`); other pools come from --pool-file or from a
    /// MachineConfigPool among the -f inputs.
    #[arg(long, default_value = names::WORKER_POOL)]
    pub pool: String,
    /// A MachineConfigPool manifest to take the pool (its machineConfigSelector) from.
    #[arg(long, value_name = "FILE")]
    pub pool_file: Option<PathBuf>,
    /// A ControllerConfig manifest carrying the cluster's default OS image.
    #[arg(long, value_name = "FILE")]
    pub controller_config: Option<PathBuf>,
    /// MachineConfig manifests: files (multi-document YAML or JSON) or directories of them.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format of the rendered MachineConfig.
    #[arg(short = 'o', long, value_enum, default_value = "yaml")]
    pub output: Output,
    /// The value of the generated-by-controller-version annotation.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    pub controller_version: String,
}

/// Everything found in the input files, by kind.
#[derive(Default)]
pub(super) struct Inputs {
    pub(super) mcs: Vec<MachineConfig>,
    pub(super) pools: Vec<MachineConfigPool>,
    pub(super) controller_configs: Vec<ControllerConfig>,
    /// Read by `mco bootstrap` only: the pull secret the ControllerConfig names.
    pub(super) secrets: Vec<Secret>,
    /// Read by `mco bootstrap` only: `APIServer/cluster`'s TLS profile.
    pub(super) api_servers: Vec<APIServer>,
    /// Read by `mco bootstrap` only: the generators' inputs.
    pub(super) kubelet_configs: Vec<KubeletConfig>,
    pub(super) runtime_configs: Vec<ContainerRuntimeConfig>,
    pub(super) images: Vec<Image>,
    pub(super) idms: Vec<ImageDigestMirrorSet>,
    pub(super) itms: Vec<ImageTagMirrorSet>,
    pub(super) icsp: Vec<ImageContentSourcePolicy>,
    pub(super) cips: Vec<ClusterImagePolicy>,
    pub(super) ips: Vec<ImagePolicy>,
    /// Read by `mco bootstrap` only: each `v1alpha1` image policy `v1` refuses, named with its
    /// file, object and field. Kept aside so that `mco render`, which does not read them, is
    /// not stopped by one.
    pub(super) unconverted: Vec<String>,
    /// Read by `mco bootstrap` only: the inputs of the 97- and 98- kubelet configs.
    pub(super) node_configs: Vec<NodeConfig>,
    pub(super) feature_gates: Vec<FeatureGate>,
    pub(super) cluster_versions: Vec<ClusterVersion>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut inputs = Inputs::default();
    for path in &args.files {
        load_path(path, &mut inputs)?;
    }
    if let Some(path) = &args.pool_file {
        let mut from_file = Inputs::default();
        load_file(path, &mut from_file)?;
        if from_file.pools.is_empty() {
            bail!("{}: no MachineConfigPool found", path.display());
        }
        inputs.pools.splice(0..0, from_file.pools);
    }
    if let Some(path) = &args.controller_config {
        let mut from_file = Inputs::default();
        load_file(path, &mut from_file)?;
        let Some(cc) = from_file.controller_configs.into_iter().next() else {
            bail!("{}: no ControllerConfig found", path.display());
        };
        inputs.controller_configs.insert(0, cc);
    }

    let pool = find_pool(&args.pool, &inputs.pools)?;
    let cc: ControllerConfigSpec = inputs
        .controller_configs
        .into_iter()
        .next()
        .map(|c| c.spec)
        .unwrap_or_default();
    let rendered =
        mco_render::render::render_pool(&pool, &inputs.mcs, &cc, &args.controller_version)
            .with_context(|| format!("rendering pool {:?}", args.pool))?;
    let sources: Vec<&str> = rendered
        .source
        .iter()
        .filter_map(|r| r.name.as_deref())
        .collect();
    tracing::info!(
        "{} rendered from {} MachineConfigs: {}",
        rendered
            .machine_config
            .metadata
            .name
            .as_deref()
            .unwrap_or(""),
        sources.len(),
        sources.join(", ")
    );
    let out = match args.output {
        Output::Yaml => mco_apimachinery::yaml::to_string(&rendered.machine_config)?,
        Output::Json => serde_json::to_string_pretty(&rendered.machine_config)? + "\n",
    };
    print!("{out}");
    Ok(())
}

/// The named pool: from the inputs first, else upstream's built-in master/worker selectors.
pub(super) fn find_pool(
    name: &str,
    pools: &[MachineConfigPool],
) -> anyhow::Result<MachineConfigPool> {
    if let Some(p) = pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
    {
        return Ok(p.clone());
    }
    // The built-in pools as `mco manifests` installs them: their selectors, and the labels a
    // KubeletConfig's pool selector matches.
    mco_manifests::defaults::pools()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown pool {name:?}: only \"master\" and \"worker\" are built in; pass --pool-file with its MachineConfigPool"
            )
        })
}

pub(super) fn load_path(path: &Path, inputs: &mut Inputs) -> anyhow::Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        return load_file(path, inputs);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("listing {}", path.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("listing {}", path.display()))?;
    entries.sort();
    for entry in entries {
        let manifest = matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        );
        if manifest && entry.is_file() {
            load_file(&entry, inputs)?;
        }
    }
    Ok(())
}

/// Reads every document of a YAML (or JSON, which is YAML) file; `kind: List` is unpacked.
fn load_file(path: &Path, inputs: &mut Inputs) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    for (i, doc) in split_documents(&text).into_iter().enumerate() {
        let value: serde_json::Value = mco_apimachinery::yaml::from_str(doc)
            .with_context(|| format!("{}: document {}: invalid YAML", path.display(), i + 1))?;
        let refused = inputs.unconverted.len();
        add_object(value, inputs)
            .with_context(|| format!("{}: document {}", path.display(), i + 1))?;
        for e in &mut inputs.unconverted[refused..] {
            *e = format!("{}: document {}: {e}", path.display(), i + 1);
        }
    }
    Ok(())
}

/// Splits a multi-document stream at `---` lines, dropping documents with no content.
fn split_documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") || trimmed.starts_with("---#") {
            docs.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&text[start..]);
    docs.into_iter()
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .collect()
}

pub(super) fn add_object(value: serde_json::Value, inputs: &mut Inputs) -> anyhow::Result<()> {
    if value.is_null() {
        return Ok(());
    }
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default()
        .to_string();
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    let alpha = api_version == "config.openshift.io/v1alpha1";
    // OpenShift's cluster-wide `Node` settings, not a node.
    let config_group = api_version.starts_with("config.openshift.io/");
    match kind.as_str() {
        "Node" if config_group => inputs
            .node_configs
            .push(serde_json::from_value(value).context("invalid Node (config.openshift.io)")?),
        "FeatureGate" => inputs
            .feature_gates
            .push(serde_json::from_value(value).context("invalid FeatureGate")?),
        "ClusterVersion" => inputs
            .cluster_versions
            .push(serde_json::from_value(value).context("invalid ClusterVersion")?),
        "MachineConfig" => inputs
            .mcs
            .push(serde_json::from_value(value).context("invalid MachineConfig")?),
        "MachineConfigPool" => inputs
            .pools
            .push(serde_json::from_value(value).context("invalid MachineConfigPool")?),
        "ControllerConfig" => inputs
            .controller_configs
            .push(serde_json::from_value(value).context("invalid ControllerConfig")?),
        "Secret" => inputs
            .secrets
            .push(serde_json::from_value(value).context("invalid Secret")?),
        "APIServer" => inputs
            .api_servers
            .push(serde_json::from_value(value).context("invalid APIServer")?),
        "KubeletConfig" => inputs
            .kubelet_configs
            .push(serde_json::from_value(value).context("invalid KubeletConfig")?),
        "ContainerRuntimeConfig" => inputs
            .runtime_configs
            .push(serde_json::from_value(value).context("invalid ContainerRuntimeConfig")?),
        "Image" => inputs
            .images
            .push(serde_json::from_value(value).context("invalid Image")?),
        "ImageDigestMirrorSet" => inputs
            .idms
            .push(serde_json::from_value(value).context("invalid ImageDigestMirrorSet")?),
        "ImageTagMirrorSet" => inputs
            .itms
            .push(serde_json::from_value(value).context("invalid ImageTagMirrorSet")?),
        "ImageContentSourcePolicy" => inputs
            .icsp
            .push(serde_json::from_value(value).context("invalid ImageContentSourcePolicy")?),
        // OpenShift 4.16–4.19 serve them in `v1alpha1` alone (Technology Preview): taken as
        // `v1`, as the controller takes them there, or refused naming the field `v1` refuses.
        "ClusterImagePolicy" if alpha => {
            match serde_json::from_value::<v1alpha1::ClusterImagePolicy>(value)
                .context("invalid ClusterImagePolicy")?
                .to_v1()
            {
                Ok(cip) => inputs.cips.push(cip),
                Err(e) => inputs.unconverted.push(e.to_string()),
            }
        }
        "ImagePolicy" if alpha => {
            match serde_json::from_value::<v1alpha1::ImagePolicy>(value)
                .context("invalid ImagePolicy")?
                .to_v1()
            {
                Ok(ip) => inputs.ips.push(ip),
                Err(e) => inputs.unconverted.push(e.to_string()),
            }
        }
        "ClusterImagePolicy" => inputs
            .cips
            .push(serde_json::from_value(value).context("invalid ClusterImagePolicy")?),
        "ImagePolicy" => inputs
            .ips
            .push(serde_json::from_value(value).context("invalid ImagePolicy")?),
        "List" | "MachineConfigList" => {
            if let Some(serde_json::Value::Array(items)) = value.get("items").cloned() {
                for item in items {
                    add_object(item, inputs)?;
                }
            }
        }
        "" => bail!("object has no kind"),
        other => tracing::warn!(
            "skipping a {other}: render reads only MachineConfig, MachineConfigPool and ControllerConfig, bootstrap also the templates' and generators' inputs"
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_split_at_separator_lines_only() {
        let text = "# leading comment\n---\na: 1\n---\n# only a comment\n--- # trailing\nb: \"---\"\n---\n";
        assert_eq!(split_documents(text), ["a: 1\n", "b: \"---\"\n"]);
        assert_eq!(split_documents("kind: X\n"), ["kind: X\n"]);
        assert!(split_documents("\n---\n").is_empty());
    }

    #[test]
    fn built_in_pools_select_by_role() {
        let worker = find_pool("worker", &[]).unwrap();
        assert_eq!(
            serde_json::to_value(worker.spec.machine_config_selector).unwrap(),
            serde_json::json!({"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}})
        );
        assert!(find_pool("master", &[]).is_ok());
        let err = find_pool("infra", &[]).unwrap_err().to_string();
        assert!(err.contains("pass --pool-file"), "{err}");
    }

    /// OpenShift 4.16–4.19's image policies, in `v1alpha1`: taken as `v1`; a value `v1`
    /// refuses is kept aside for `mco bootstrap`, naming the file, the object and the field.
    #[test]
    fn v1alpha1_image_policies_are_taken_as_v1_or_kept_aside_naming_the_field() {
        // An ECDSA P-256 public key, PEM, base64.
        const KEY: &str = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFZ0dLb2VUb2wwWXYvRURJT21SdHVYdWxPTllXNQpwT2xYa1R0SFZlbnRaR2dpV1ZTc09yUkpZeUQrMWhRaTVOTlpaQTdJZnBwRWJjeXJGbDJwYlU3SExRPT0KLS0tLS1FTkQgUFVCTElDIEtFWS0tLS0tCg==";
        let manifest = |kind: &str, name: &str, key: &str| {
            format!(
                "apiVersion: config.openshift.io/v1alpha1
kind: {kind}
metadata:
  name: {name}
  namespace: default
spec:
  scopes:
  - quay.io/openshift-release-dev/ocp-release
  policy:
    rootOfTrust:
      policyType: PublicKey
      publicKey:
        keyData: {key}
"
            )
        };
        let dir = std::env::temp_dir().join(format!("mco-render-v1alpha1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.yaml");
        let text = manifest("ClusterImagePolicy", "release", KEY)
            + "---\n"
            + &manifest("ImagePolicy", "team", KEY);
        std::fs::write(&good, text).unwrap();
        let mut inputs = Inputs::default();
        load_path(&good, &mut inputs).unwrap();
        assert_eq!(inputs.cips.len(), 1);
        assert_eq!(inputs.ips.len(), 1);
        let key = |p: &mco_api::generators::ImageSigstoreVerificationPolicy| {
            p.root_of_trust
                .public_key
                .as_ref()
                .unwrap()
                .key_data
                .clone()
        };
        assert_eq!(key(&inputs.cips[0].spec.policy), KEY);
        assert_eq!(key(&inputs.ips[0].spec.policy), KEY);
        assert_eq!(inputs.ips[0].metadata.namespace.as_deref(), Some("default"));

        let bad = dir.join("bad.yaml");
        let short = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K";
        let text = manifest("ClusterImagePolicy", "release", KEY)
            + "---\n"
            + &manifest("ImagePolicy", "short", short);
        std::fs::write(&bad, text).unwrap();
        // `mco render` reads on; `mco bootstrap` stops on it.
        let mut inputs = Inputs::default();
        let loaded = load_path(&bad, &mut inputs);
        std::fs::remove_dir_all(&dir).unwrap();
        loaded.unwrap();
        assert_eq!(inputs.cips.len(), 1);
        assert!(inputs.ips.is_empty());
        assert_eq!(
            inputs.unconverted,
            [format!(
                "{}: document 2: ImagePolicy default/short: spec.policy.rootOfTrust.publicKey.keyData: should be at least 68 chars long in config.openshift.io/v1",
                bad.display()
            )]
        );
    }

    #[test]
    fn inputs_are_sorted_by_kind() {
        let mut inputs = Inputs::default();
        for doc in [
            serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "metadata": {"name": "a"}, "spec": {}}),
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool", "metadata": {"name": "p"}, "spec": {}}
            ]}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}}),
        ] {
            add_object(doc, &mut inputs).unwrap();
        }
        assert_eq!(inputs.mcs.len(), 1);
        assert_eq!(inputs.pools.len(), 1);
        assert!(add_object(serde_json::json!({"metadata": {}}), &mut inputs).is_err());
    }
}
