//! `mco up`: the embedded cluster on one machine — API server, controller and simulated nodes
//! running the real daemon — until Ctrl-C. Starting it again on the same data dir resumes it.
//!
//! It bounds tokio's blocking pool at 8 threads per core (16 at least): no blocking task waits
//! on another, and tokio's default of 512 let a thousand joining nodes leave 512 threads taking
//! turns for the rest of the run. Its store does not fsync each commit (`--store-durability
//! process-crash`): like the simulated node disks, it survives a crash of the process, not a
//! power cut.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use mco_sim::{Cluster, ClusterOptions, DaemonMode, OsProfile, OsUpdateMode};

/// How long blocking work (node disks) may take to finish once the cluster has stopped.
const RUNTIME_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the cluster lives: database, certificates, kubeconfig, node roots.
    #[arg(long, default_value = ".mco")]
    pub data_dir: PathBuf,
    /// Master nodes of a new cluster (a resumed cluster keeps its nodes).
    #[arg(long, default_value_t = 3)]
    pub masters: usize,
    /// Worker nodes of a new cluster.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// The nodes' OS: uos (seed 000's fleet), rhcos, fcos or rhel (not ostree).
    #[arg(long, default_value = "uos")]
    pub os: OsProfile,
    /// How nodes follow osImageURL: pivot (legacy custom origin) or container.
    #[arg(long, default_value = "pivot")]
    pub os_update_mode: OsUpdateMode,
    /// How long a node is down when it reboots.
    #[arg(long, default_value_t = 2.0)]
    pub reboot_seconds: f64,
    /// Address of the API server.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Run each node's daemon as its own `mco daemon` process instead of in this one.
    #[arg(long)]
    pub node_processes: bool,
    /// Run no controller: start `mco controller --kubeconfig <kubeconfig>` yourself, for
    /// example to profile it or measure its CPU apart from the cluster.
    #[arg(long)]
    pub no_controller: bool,
    /// What the API server's answered writes survive: process-crash (the default; like the
    /// simulated node disks, a power cut may lose the last moments) or power-loss (each commit
    /// fsynced, as etcd does, at a cost to every write).
    #[arg(long, default_value_t = mco_apiserver::Durability::ProcessCrash)]
    pub store_durability: mco_apiserver::Durability,
    /// Run the controller and the simulated nodes on the existing cluster of this kubeconfig
    /// instead of the embedded API server (docs/deploy.md). It needs rights to install mco
    /// there; it refuses a cluster another machine-config operator runs, and never touches a
    /// node it did not create.
    #[arg(long, conflicts_with_all = ["listen", "store_durability"])]
    pub kubeconfig: Option<PathBuf>,
    /// A CRD (YAML) to install in place of mco's own for the same resource, e.g. upstream's
    /// MachineConfigNode CRD, to run against the schema an OpenShift release has. Repeatable.
    #[arg(long = "crd", value_name = "FILE")]
    pub crds: Vec<PathBuf>,
    /// Address of the machine config server (docs/server.md); its CA is `<data-dir>/mcs/ca.crt`.
    /// New simulated nodes join through it. If the address is taken, the cluster runs without
    /// it and says so.
    #[arg(long, default_value = "127.0.0.1:22623")]
    pub mcs_listen: SocketAddr,
    /// Address of the live web dashboard (docs/dashboard.md), or `off`. Any address other than
    /// loopback needs --dashboard-token-file. If the address is taken, the cluster runs
    /// without it and says so.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = super::dashboard::parse_listen)]
    pub dashboard_listen: super::dashboard::Listen,
    /// A file holding the bearer token every dashboard request must present.
    #[arg(long)]
    pub dashboard_token_file: Option<PathBuf>,
}

/// Threads for the nodes' blocking host work (disk writes, the daemon's engine). Tokio's default
/// of 512 is for work that waits; this work computes, and a thousand nodes joining at once grew
/// the pool to 512 threads that then took turns for the rest of the run: a rollout after it ran
/// about 10 % slower in CPU and held some 200 MiB more. None of it waits on another blocking
/// task (a daemon awaits its drain outside them), so a bound cannot deadlock.
fn blocking_threads(cores: usize) -> usize {
    (8 * cores).max(16)
}

pub(crate) async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// The largest `--crd` file read: upstream's biggest CRDs are a few hundred KiB.
const MAX_CRD_BYTES: u64 = 4 << 20;

/// One `--crd` file: a CustomResourceDefinition with a name, at most [`MAX_CRD_BYTES`].
fn read_crd(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CRD_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| anyhow::anyhow!("reading --crd {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_CRD_BYTES {
        anyhow::bail!(
            "--crd {}: larger than {MAX_CRD_BYTES} bytes",
            path.display()
        );
    }
    let crd: serde_json::Value = mco_apimachinery::yaml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("--crd {}: {e}", path.display()))?;
    if crd["kind"] != "CustomResourceDefinition" || crd.pointer("/metadata/name").is_none() {
        anyhow::bail!(
            "--crd {}: not a CustomResourceDefinition with a metadata.name",
            path.display()
        );
    }
    Ok(crd)
}

/// Serves the dashboard and prints its URL; a dashboard that cannot start is reported and the
/// cluster runs on without it.
async fn start_dashboard(
    kubeconfig: &std::path::Path,
    cfg: mco_dashboard::Config,
) -> Option<mco_dashboard::Dashboard> {
    let started = match mco_cli::client::client(Some(kubeconfig)).await {
        Ok(client) => mco_dashboard::serve(client, cfg)
            .await
            .map_err(anyhow::Error::from),
        Err(e) => Err(e.into()),
    };
    match started {
        Ok(d) => {
            eprintln!("mco up: dashboard on {}", d.url());
            Some(d)
        }
        Err(e) => {
            eprintln!("mco up: dashboard not started: {e}; pass --dashboard-listen");
            None
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.reboot_seconds.is_finite() || args.reboot_seconds < 0.0 {
        anyhow::bail!("--reboot-seconds must be a non-negative number");
    }
    // Refuse a dashboard without its token before anything starts.
    let dashboard = args
        .dashboard_listen
        .0
        .map(|listen| super::dashboard::config(listen, args.dashboard_token_file.as_deref()))
        .transpose()?;
    let mut opts = ClusterOptions::new(&args.data_dir);
    opts.masters = args.masters;
    opts.workers = args.workers;
    opts.os = args.os;
    opts.os_update_mode = args.os_update_mode;
    opts.reboot = Duration::from_secs_f64(args.reboot_seconds);
    opts.listen = args.listen;
    opts.store_durability = args.store_durability;
    opts.mcs_listen = Some(args.mcs_listen);
    for path in &args.crds {
        opts.crds.push(read_crd(path)?);
    }
    if let Some(kc) = args.kubeconfig {
        opts.kubeconfig = Some(kc);
        // The cluster's own pods are the workload; its scheduler and controllers run them.
        opts.workloads = None;
    }
    if args.no_controller {
        opts.controller = None;
    }
    // The dashboard reads the controller's caches rather than watching the fleet again.
    let dashboard = match (dashboard, opts.controller.as_mut()) {
        (Some(mut cfg), Some(controller)) => {
            let (lender, borrower) = mco_api::caches::channel();
            controller.lend_caches = Some(lender);
            cfg.caches = Some(borrower);
            Some(cfg)
        }
        (dashboard, _) => dashboard,
    };
    if args.node_processes {
        opts.daemon = DaemonMode::Process {
            program: std::env::current_exe()?,
        };
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(blocking_threads(cores))
        .build()?;
    let result: anyhow::Result<()> = rt.block_on(async move {
        let cluster = Cluster::start(opts).await?;
        println!("export KUBECONFIG={}", cluster.kubeconfig().display());
        if cluster.is_external() {
            eprintln!(
                "mco up: controller and simulated nodes on {}, data in {}; Ctrl-C stops them",
                cluster.server_url(),
                cluster.data_dir().display()
            );
        } else {
            eprintln!(
                "mco up: API server on {}, data in {}; Ctrl-C stops the cluster",
                cluster.server_url(),
                cluster.data_dir().display()
            );
        }
        match cluster.mcs_addr() {
            Ok(addr) => eprintln!(
                "mco up: machine config server on https://{addr}/config/<pool>, CA {}; new nodes join through it",
                cluster.data_dir().join("mcs/ca.crt").display()
            ),
            Err(e) => {
                eprintln!("mco up: machine config server not started: {e}; pass --mcs-listen")
            }
        }
        let _dashboard = match dashboard {
            Some(cfg) => start_dashboard(&cluster.kubeconfig(), cfg).await,
            None => None,
        };
        shutdown_signal().await;
        eprintln!("mco up: stopping");
        cluster.shutdown().await;
        Ok(())
    });
    // The cluster's shutdown has stopped every node daemon, so no blocking task is left
    // calling into the runtime; the bound only keeps a stuck disk from holding the exit.
    rt.shutdown_timeout(RUNTIME_GRACE);
    result
}

#[cfg(test)]
mod tests {
    use super::{MAX_CRD_BYTES, blocking_threads, read_crd};

    #[test]
    fn a_crd_file_is_read_up_to_its_limit() {
        let dir = std::env::temp_dir().join(format!("mco-up-crd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let head = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x.example.com}\n";
        // Padded with a comment to exactly the limit, then one byte over.
        let at = dir.join("at.yaml");
        let pad = MAX_CRD_BYTES as usize - head.len() - 2;
        std::fs::write(&at, format!("{head}#{}\n", "x".repeat(pad))).unwrap();
        assert_eq!(std::fs::metadata(&at).unwrap().len(), MAX_CRD_BYTES);
        assert_eq!(read_crd(&at).unwrap()["metadata"]["name"], "x.example.com");
        let over = dir.join("over.yaml");
        std::fs::write(&over, format!("{head}#{}\n", "x".repeat(pad + 1))).unwrap();
        let err = read_crd(&over).unwrap_err().to_string();
        assert!(err.contains("larger than 4194304 bytes"), "{err}");
        let not = dir.join("not.yaml");
        std::fs::write(
            &not,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        )
        .unwrap();
        let err = read_crd(&not).unwrap_err().to_string();
        assert!(err.contains("not a CustomResourceDefinition"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_blocking_pool_scales_with_cores_from_a_floor() {
        assert_eq!(blocking_threads(1), 16);
        assert_eq!(blocking_threads(2), 16);
        assert_eq!(blocking_threads(8), 64);
    }
}
