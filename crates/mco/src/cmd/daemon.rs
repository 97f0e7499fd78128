//! `mco daemon`: the per-node daemon, and `mco daemon firstboot-complete-machineconfig`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use mco_daemon::Host;
use mco_daemon::engine::Engine;
use mco_daemon::firstboot::{self, FirstbootOutcome};
use mco_daemon::sync::{Daemon, Exit, SyncOptions};

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
    /// Where to serve Prometheus metrics (`/metrics`); empty disables.
    #[arg(long, default_value = "127.0.0.1:8797")]
    pub metrics_listen: String,
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

fn host(kind: HostImpl, root: &PathBuf) -> anyhow::Result<Host> {
    Ok(match kind {
        HostImpl::Real => Host::real(root)?,
        HostImpl::Sim => Host::sim(root)?,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(DaemonCommand::FirstbootCompleteMachineconfig(f)) = args.command {
        let engine = Engine::new(host(f.host, &f.root)?)?;
        return match firstboot::complete_machineconfig(&engine, f.machineconfig_file.as_deref())? {
            FirstbootOutcome::Rebooting { config } => {
                eprintln!("applied {config}; rebooting");
                Ok(())
            }
            FirstbootOutcome::Completed { config } => {
                eprintln!("applied {config}; no reboot needed");
                Ok(())
            }
            FirstbootOutcome::AlreadyCompleted { message }
            | FirstbootOutcome::NothingToDo { message } => {
                eprintln!("{message}");
                Ok(())
            }
        };
    }
    let node = args
        .node
        .context("--node is required (the name of the Node this daemon runs on)")?;
    let engine = Engine::new(host(args.host, &args.root)?)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let config = match &args.kubeconfig {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path)?;
                kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
            }
            None => kube::Config::infer().await?,
        };
        let client = kube::Client::try_from(config)?;
        let mut opts = SyncOptions::new(node);
        opts.drain_timeout = Duration::from_secs(args.drain_timeout);
        let daemon = Daemon::new(client, engine, opts);
        if !args.metrics_listen.is_empty() {
            let listener = tokio::net::TcpListener::bind(&args.metrics_listen)
                .await
                .with_context(|| format!("binding metrics on {}", args.metrics_listen))?;
            let metrics = daemon.metrics();
            tokio::spawn(async move {
                if let Err(e) = mco_daemon::metrics::serve(listener, metrics).await {
                    tracing::error!(error = %e, "metrics server stopped");
                }
            });
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
