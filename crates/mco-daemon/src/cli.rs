//! The daemon's command line, shared by `mco daemon …` and the daemon-only `mco-daemon`
//! executable so that the two entry points take the same flags and cannot drift.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::Host;
use crate::agent::sync::{Daemon, Exit, SyncOptions};
use crate::engine::Engine;
use crate::engine::firstboot::{self, FirstbootOutcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HostImpl {
    /// rpm-ostree, systemctl, systemd-run.
    Real,
    /// State files inside the node root.
    Sim,
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<DaemonCommand>,
    /// This node's name (the daemon watches only this Node).
    #[arg(long, required = false)]
    pub node: Option<String>,
    /// The namespace mco is installed in, where the events about this Node are recorded (the
    /// DaemonSet sets $POD_NAMESPACE to its own).
    #[arg(
        long,
        env = mco_api::constants::names::NAMESPACE_ENV,
        default_value = mco_api::constants::names::DEFAULT_NAMESPACE
    )]
    pub namespace: String,
    /// The node's root directory.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Real host tools or a simulated node.
    #[arg(long, value_enum, default_value = "real")]
    pub host: HostImpl,
    /// Kubeconfig; in-cluster or $KUBECONFIG when absent.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How long to wait for the drain controller, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub drain_timeout: u64,
    /// The kubelet's healthz endpoint, checked every 30 s for `mcd_kubelet_state`.
    #[arg(long, default_value = crate::agent::kubelet_health::DEFAULT_ENDPOINT)]
    pub kubelet_healthz_endpoint: String,
    /// Whether to check the kubelet's health; by default only on a real host (a simulated
    /// node has no kubelet on localhost).
    #[arg(long, action = clap::ArgAction::Set)]
    pub kubelet_healthz_enabled: Option<bool>,
    /// Where to serve Prometheus metrics (`/metrics`); empty disables.
    #[arg(long, default_value = "127.0.0.1:8797")]
    pub metrics_listen: String,
    // `--metrics-auth` and the serving certificate of the metrics port.
    #[command(flatten)]
    pub metrics: mco_metrics_auth::cli::Args,
}

impl Args {
    /// Whether the kubelet health monitor runs: as `--kubelet-healthz-enabled` says, else on a
    /// real host only.
    pub fn kubelet_health_checked(&self) -> bool {
        self.kubelet_healthz_enabled
            .unwrap_or(self.host == HostImpl::Real)
    }

    /// The metrics port's `--metrics-auth` and certificate flags.
    pub fn metrics_auth(&self) -> mco_metrics_auth::Settings {
        self.metrics.settings()
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum DaemonCommand {
    /// Apply the provisioning config (files, units, OS, kernel arguments) on first boot.
    FirstbootCompleteMachineconfig(FirstbootArgs),
}

#[derive(Debug, clap::Args)]
pub struct FirstbootArgs {
    /// The node's root directory.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// The MachineConfig to apply.
    #[arg(long)]
    pub machineconfig_file: Option<String>,
    /// Real host tools or a simulated node.
    #[arg(long, value_enum, default_value = "real")]
    pub host: HostImpl,
}

/// The `mco-daemon` executable's command line: [`Args`] at the top level, without the
/// `daemon` word that the multi-call `mco` needs.
#[derive(Debug, clap::Parser)]
#[command(
    name = "mco-daemon",
    version,
    about = "Machine Config Operator node daemon: apply the node's rendered config, or complete first boot"
)]
pub struct Standalone {
    #[command(flatten)]
    pub args: Args,
}

/// How many tokio worker threads the daemon's runtime gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Workers {
    /// tokio's default: one per core.
    #[default]
    PerCore,
    /// A fixed number, for a daemon whose work is mostly waiting on the API server and the host.
    Fixed(usize),
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as every `mco` role does.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
}

fn host(kind: HostImpl, root: &Path) -> anyhow::Result<Host> {
    Ok(match kind {
        HostImpl::Real => Host::real(root)?,
        HostImpl::Sim => Host::sim(root)?,
    })
}

/// Runs the daemon (or first boot) on a runtime with one worker per core.
pub fn run(args: Args) -> anyhow::Result<()> {
    run_with(args, Workers::PerCore)
}

/// Runs the daemon (or first boot) on a runtime with `workers` worker threads.
pub fn run_with(args: Args, workers: Workers) -> anyhow::Result<()> {
    if let Some(DaemonCommand::FirstbootCompleteMachineconfig(f)) = args.command {
        return firstboot(f);
    }
    let metrics_auth = args.metrics_auth();
    metrics_auth.validate()?;
    let kubelet_health = args
        .kubelet_health_checked()
        .then(|| args.kubelet_healthz_endpoint.clone());
    let node = args
        .node
        .context("--node is required (the name of the Node this daemon runs on)")?;
    let engine = Engine::new(host(args.host, &args.root)?)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Workers::Fixed(n) = workers {
        builder.worker_threads(n.max(1));
    }
    let rt = builder.enable_all().build()?;
    rt.block_on(async move {
        let mut config = match &args.kubeconfig {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path)?;
                kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
            }
            None => kube::Config::infer().await?,
        };
        config
            .headers
            .push(mco_api::user_agent::header(mco_api::user_agent::DAEMON));
        let client = kube::Client::try_from(config)?;
        let mut opts = SyncOptions::new(node);
        opts.namespace = args.namespace.clone();
        opts.drain_timeout = Duration::from_secs(args.drain_timeout);
        // Only a delegating metrics port asks the API server about its callers.
        let reviews = (metrics_auth.mode == mco_metrics_auth::Mode::Delegated).then(|| client.clone());
        let daemon = Daemon::new(client, engine, opts);
        if !args.metrics_listen.is_empty() {
            let listener = tokio::net::TcpListener::bind(&args.metrics_listen)
                .await
                .with_context(|| format!("binding metrics on {}", args.metrics_listen))?;
            let router = crate::agent::metrics::router(daemon.metrics());
            let serving = mco_metrics_auth::serve(listener, router, &metrics_auth, reviews, &[])
                .context("serving metrics")?;
            tracing::info!(addr = %args.metrics_listen, auth = %metrics_auth.mode, "serving /metrics");
            tokio::spawn(async move {
                if let Err(e) = serving.await {
                    tracing::error!(error = %e, "metrics server stopped");
                }
            });
        }
        // Ends with the runtime, when the process does.
        if let Some(endpoint) = kubelet_health {
            tokio::spawn(crate::agent::kubelet_health::run(
                endpoint,
                crate::agent::kubelet_health::POLL_INTERVAL,
                crate::agent::kubelet_health::TIMEOUT,
                daemon.metrics().kubelet_state,
            ));
        }
        match daemon.run(shutdown_signal()).await? {
            Exit::Rebooting if args.host == HostImpl::Real => {
                // Stay up until the reboot stops us: a restart before it would take the
                // pending reboot for a completed one.
                tracing::info!("reboot requested; waiting for it");
                shutdown_signal().await;
            }
            Exit::Rebooting => tracing::info!("reboot requested; exiting for the node supervisor"),
            Exit::Shutdown => {}
        }
        Ok(())
    })
}

fn firstboot(f: FirstbootArgs) -> anyhow::Result<()> {
    let engine = Engine::new(host(f.host, &f.root)?)?;
    match firstboot::complete_machineconfig(&engine, f.machineconfig_file.as_deref())? {
        FirstbootOutcome::Rebooting { config } => eprintln!("applied {config}; rebooting"),
        FirstbootOutcome::Completed { config } => eprintln!("applied {config}; no reboot needed"),
        FirstbootOutcome::AlreadyCompleted { message }
        | FirstbootOutcome::NothingToDo { message } => eprintln!("{message}"),
    }
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn standalone_takes_the_daemon_flags_without_the_daemon_word() {
        let cli = Standalone::try_parse_from([
            "mco-daemon",
            "--node",
            "worker-0",
            "--root",
            "/rootfs",
            "--host",
            "sim",
            "--metrics-listen=",
        ])
        .unwrap();
        assert_eq!(cli.args.node.as_deref(), Some("worker-0"));
        assert_eq!(cli.args.root, PathBuf::from("/rootfs"));
        assert_eq!(cli.args.host, HostImpl::Sim);
        assert_eq!(cli.args.metrics_listen, "");
        assert_eq!(cli.args.metrics.metrics_auth, mco_metrics_auth::Mode::None);
        assert!(cli.args.command.is_none());
        let cli = Standalone::try_parse_from(["mco-daemon", "--namespace", "ops"]).unwrap();
        assert_eq!(cli.args.namespace, "ops");
    }

    #[test]
    fn standalone_has_the_firstboot_subcommand() {
        let cli = Standalone::try_parse_from([
            "mco-daemon",
            "firstboot-complete-machineconfig",
            "--machineconfig-file",
            "/etc/mc.json",
        ])
        .unwrap();
        match cli.args.command {
            Some(DaemonCommand::FirstbootCompleteMachineconfig(f)) => {
                assert_eq!(f.machineconfig_file.as_deref(), Some("/etc/mc.json"));
                assert_eq!(f.root, PathBuf::from("/"));
            }
            None => panic!("subcommand not parsed"),
        }
    }

    #[test]
    fn metrics_auth_flags_parse_and_pair() {
        let cli = Standalone::try_parse_from([
            "mco-daemon",
            "--metrics-auth=delegated",
            "--metrics-tls-cert-file=/tls/tls.crt",
            "--metrics-tls-key-file=/tls/tls.key",
        ])
        .unwrap();
        let s = cli.args.metrics_auth();
        assert_eq!(s.mode, mco_metrics_auth::Mode::Delegated);
        assert_eq!(s.cert_file, Some(PathBuf::from("/tls/tls.crt")));
        assert_eq!(s.key_file, Some(PathBuf::from("/tls/tls.key")));
        let e = Standalone::try_parse_from(["mco-daemon", "--metrics-auth=tls"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither \"none\" nor \"delegated\""), "{e}");
        assert!(
            Standalone::try_parse_from(["mco-daemon", "--metrics-tls-cert-file=/c"]).is_err(),
            "a certificate without its key"
        );
    }

    #[test]
    fn the_kubelet_is_checked_on_real_hosts_unless_told() {
        let parse = |a: &[&str]| {
            let mut argv = vec!["mco-daemon"];
            argv.extend_from_slice(a);
            Standalone::try_parse_from(argv).unwrap().args
        };
        let real = parse(&[]);
        assert!(real.kubelet_health_checked());
        assert_eq!(
            real.kubelet_healthz_endpoint,
            "http://localhost:10248/healthz"
        );
        assert!(!parse(&["--host=sim"]).kubelet_health_checked());
        assert!(parse(&["--host=sim", "--kubelet-healthz-enabled=true"]).kubelet_health_checked());
        assert!(!parse(&["--kubelet-healthz-enabled=false"]).kubelet_health_checked());
    }

    #[test]
    fn daemon_flags_and_the_subcommand_conflict() {
        assert!(
            Standalone::try_parse_from([
                "mco-daemon",
                "--node",
                "n",
                "firstboot-complete-machineconfig"
            ])
            .is_err()
        );
    }
}
