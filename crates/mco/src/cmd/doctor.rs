//! `mco doctor [NODE] [--root DIR]`: the cause of every problem and the exact command that
//! fixes it, from the API and, with `--root`, from a node's own disk.

use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this node.
    node: Option<String>,
    /// Diagnose the node whose root filesystem is DIR (`/` on the host itself) from its disk.
    /// Without NODE and without a reachable cluster, only the disk is examined.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Data directory of `mco up`; simulated nodes' disks under DIR/nodes/ are examined too.
    #[arg(long, default_value = ".mco")]
    data_dir: PathBuf,
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The namespace mco is installed in. The machine config server's certificates are read
    /// where the controller Deployment there keeps them (its --server-certs-namespace), else here.
    #[arg(long, default_value = mco_manifests::DEFAULT_NAMESPACE)]
    namespace: String,
    /// The machine config server's serving Secret (on OpenShift, upstream's
    /// `machine-config-server-tls`). Default: the one the controller Deployment's
    /// --server-tls-secret names, where readable, else `mco-server-tls`.
    #[arg(long)]
    server_tls_secret: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let local = match &args.root {
        Some(root) => Some(mco_cli::local::gather(root)?),
        None => None,
    };
    // On a host without NODE: the disk is the whole story.
    if let (Some(facts), None) = (&local, &args.node) {
        let findings = mco_cli::local::diagnose(facts);
        print!("{}", mco_cli::doctor::render_local(facts, &findings));
        if !findings.is_empty() {
            std::process::exit(1);
        }
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (snap, inputs, mut roots) = rt.block_on(async {
        let client = mco_cli::client::client(args.kubeconfig.as_deref()).await?;
        // The refused inputs are cluster-wide: read beside the snapshot, only without NODE.
        let inputs = async {
            match &args.node {
                None => {
                    let (generators, registries, settings, image_mode, pinned, certs) = tokio::try_join!(
                        mco_cli::client::fetch_inputs(&client),
                        mco_cli::client::fetch_registry_inputs(&client),
                        mco_cli::client::fetch_cluster_settings(&client),
                        mco_cli::client::fetch_machine_os_configs(&client),
                        mco_cli::client::fetch_pinned_image_sets(&client),
                        mco_cli::client::fetch_server_certs(
                            &client,
                            &args.namespace,
                            args.server_tls_secret.as_deref(),
                        ),
                    )?;
                    Ok(Some((generators, registries, settings, image_mode, pinned, certs)))
                }
                Some(_) => Ok(None),
            }
        };
        let (snap, inputs) = tokio::try_join!(mco_cli::fetch(&client), inputs)?;
        let mut wanted = mco_cli::doctor::nodes_in_trouble(&snap);
        wanted.extend(args.node.iter().cloned());
        let roots = if args.root.is_none() {
            mco_cli::client::gather_sim_roots(&args.data_dir, &wanted)
        } else {
            BTreeMap::new()
        };
        anyhow::Ok((snap, inputs, roots))
    })?;
    if let (Some(facts), Some(node)) = (&local, &args.node) {
        roots.insert(node.clone(), facts.clone());
    }
    let mut findings = mco_cli::doctor::diagnose(&snap, &roots, args.node.as_deref());
    if let Some(((cc, kcs, crcs), registries, settings, image_mode, pinned, certs)) = &inputs {
        findings.extend(mco_cli::doctor::image_mode(image_mode, &snap.pools));
        findings.extend(mco_cli::doctor::pinned_image_sets(
            pinned,
            &snap.pools,
            &snap.mcns,
        ));
        findings.extend(mco_cli::doctor::refused_inputs(cc.as_ref(), kcs, crcs));
        findings.extend(mco_cli::doctor::registries(registries));
        findings.extend(mco_cli::doctor::refused_cluster_settings(
            settings,
            &snap.machine_configs,
        ));
        findings.extend(mco_cli::doctor::deprecated_cluster_settings(settings));
        findings.extend(mco_cli::doctor::server_certificates(
            certs,
            cc.as_ref(),
            snap.now,
        ));
    }
    if let (Some(facts), Some(_)) = (&local, &args.node) {
        // The disk may know more than the API (e.g. a never-adopted OS before any update).
        mco_cli::doctor::merge_local(&mut findings, mco_cli::local::diagnose(facts));
    }
    print!("{}", mco_cli::doctor::render(&findings, Some(&snap)));
    if !findings.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
