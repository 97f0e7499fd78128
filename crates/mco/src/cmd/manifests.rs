//! `mco manifests`: print what an install needs.
//!
//! Without a subcommand: everything (namespace, CRDs, RBAC, admission policies, the controller
//! Deployment, the daemon DaemonSet, the default pools and ControllerConfig) as one YAML stream,
//! or one file per part with `--out-dir` (as committed under `manifests/install/`).

use std::io::Write;
use std::path::{Path, PathBuf};

use mco_manifests::{Options, Part};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    #[command(flatten)]
    install: InstallArgs,
}

#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// Namespace of the workloads, ServiceAccounts and leader-election Lease.
    #[arg(long, default_value = mco_manifests::DEFAULT_NAMESPACE)]
    namespace: String,
    /// The mco image the controller and daemon run (default: this release's image).
    #[arg(long)]
    image: Option<String>,
    /// OS image for the ControllerConfig. Empty: rendered configs carry no OS image and nodes are
    /// never rebased.
    #[arg(long, default_value = "")]
    os_image: String,
    /// Add what OpenShift, OKD and UCCPS need (the `privileged` SCC for the daemon).
    #[arg(long)]
    openshift: bool,
    /// The API server URL new machines' kubelets bootstrap against (such as
    /// `https://api-int.<domain>:6443`): the machine config server then appends their bootstrap
    /// kubeconfig, with the `node-bootstrapper` token.
    #[arg(long)]
    apiserver_url: Option<String>,
    /// Print only these parts (comma-separated): namespace, crds, rbac, admission, controller,
    /// daemon, defaults.
    #[arg(long, value_delimiter = ',', value_parser = parse_part)]
    only: Vec<Part>,
    /// Leave these parts out (comma-separated), e.g. `crds,defaults` when replacing the upstream
    /// operator, whose CRDs, pools and ControllerConfig stay.
    #[arg(long, value_delimiter = ',', value_parser = parse_part)]
    skip: Vec<Part>,
    /// Write one file per part into this directory instead of printing.
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// The CustomResourceDefinitions, as one YAML stream.
    Crds {
        /// Write one file per CRD into this directory instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

fn parse_part(s: &str) -> Result<Part, mco_manifests::Error> {
    s.parse()
}

fn write(path: &Path, content: &str) -> anyhow::Result<()> {
    std::fs::write(path, content).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}

fn install(args: InstallArgs) -> anyhow::Result<()> {
    if let Some(url) = &args.apiserver_url
        && (!url.starts_with("https://") || url.len() <= "https://".len())
    {
        anyhow::bail!("--apiserver-url {url:?}: must be an https:// URL");
    }
    let opts = Options {
        namespace: args.namespace,
        image: args.image.unwrap_or_else(mco_manifests::default_image),
        os_image: args.os_image,
        openshift: args.openshift,
        apiserver_url: args.apiserver_url,
    };
    let parts: Vec<Part> = Part::ALL
        .into_iter()
        .filter(|p| args.only.is_empty() || args.only.contains(p))
        .filter(|p| !args.skip.contains(p))
        .collect();
    match args.out_dir {
        None => {
            let manifests = mco_manifests::generate(&opts, &parts)?;
            std::io::stdout().write_all(mco_manifests::to_yaml(&manifests)?.as_bytes())?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            for (part, yaml) in mco_manifests::files(&opts)? {
                if parts.contains(&part) {
                    write(&dir.join(part.file_name()), &yaml)?;
                }
            }
        }
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        None => install(args.install)?,
        Some(What::Crds { out_dir: None }) => {
            std::io::stdout().write_all(mco_api::crds::all_yaml()?.as_bytes())?;
        }
        Some(What::Crds { out_dir: Some(dir) }) => {
            std::fs::create_dir_all(&dir)?;
            for crd in mco_api::crds::all() {
                write(
                    &dir.join(mco_api::crds::file_name(&crd)),
                    &mco_api::crds::to_yaml(&crd)?,
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use mco_manifests::Manifest;

    /// The container args of the workload of the given kind, as the pod would pass them.
    fn args(manifests: &[Manifest], kind: &str) -> Vec<String> {
        let m = manifests.iter().find(|m| m.kind() == Some(kind)).unwrap();
        let args = &m.object["spec"]["template"]["spec"]["containers"][0]["args"];
        serde_json::from_value(args.clone()).unwrap()
    }

    /// A flag the binary does not know would crash-loop every pod: parse the shipped args with
    /// the real command line.
    #[test]
    fn shipped_workload_args_parse_with_this_binary() {
        let manifests = mco_manifests::generate(
            &mco_manifests::Options::default(),
            &mco_manifests::Part::ALL,
        )
        .unwrap();
        let controller = args(&manifests, "Deployment");
        assert!(!controller.is_empty());
        let argv = std::iter::once("mco".to_string()).chain(controller.iter().cloned());
        if let Err(e) = crate::Cli::try_parse_from(argv) {
            panic!("Deployment args {controller:?} rejected by `mco`: {e}");
        }
        // The DaemonSet runs the daemon-only executable, whose command line is shared with
        // `mco daemon`.
        let args = args(&manifests, "DaemonSet");
        assert!(!args.is_empty());
        let argv = std::iter::once("mco-daemon".to_string()).chain(args.iter().cloned());
        if let Err(e) = mco_daemon::cli::Standalone::try_parse_from(argv) {
            panic!("DaemonSet args {args:?} rejected by `mco-daemon`: {e}");
        }
        let argv = ["mco", "daemon"]
            .map(String::from)
            .into_iter()
            .chain(args.iter().cloned());
        if let Err(e) = crate::Cli::try_parse_from(argv) {
            panic!("DaemonSet args {args:?} rejected by `mco daemon`: {e}");
        }
    }

    #[test]
    fn parts_parse_from_the_command_line() {
        let cli = crate::Cli::try_parse_from([
            "mco",
            "manifests",
            "--only",
            "rbac,admission",
            "--skip",
            "crds",
        ])
        .unwrap();
        let crate::Command::Manifests(args) = cli.command else {
            panic!("not the manifests command");
        };
        assert_eq!(
            args.install.only,
            [mco_manifests::Part::Rbac, mco_manifests::Part::Admission]
        );
        assert_eq!(args.install.skip, [mco_manifests::Part::Crds]);
        assert!(crate::Cli::try_parse_from(["mco", "manifests", "--only", "secrets"]).is_err());
        let crds = crate::Cli::try_parse_from(["mco", "manifests", "crds", "--out-dir", "x"]);
        assert!(crds.is_ok(), "`mco manifests crds --out-dir` keeps working");
    }
}
