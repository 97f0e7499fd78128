//! `mco`: one binary for every role. Each subcommand lives in its own module under `cmd/`.

use clap::{Parser, Subcommand};

mod alloc;
mod cmd;

#[derive(Debug, Parser)]
#[command(
    name = "mco",
    version,
    about = "Machine Config Operator: render, roll out and apply node OS configuration"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Render a pool's MachineConfigs into one rendered config, offline.
    Render(cmd::render::Args),
    /// Print install manifests (CRDs, ...).
    Manifests(cmd::manifests::Args),
    /// Run the embedded Kubernetes-compatible API server.
    Apiserver(cmd::apiserver::Args),
    /// Run the controller: render, roll out within maxUnavailable, drain, report.
    Controller(cmd::controller::Args),
    /// Run the node daemon, or complete first boot.
    Daemon(cmd::daemon::Args),
    /// Render each pool's first config from manifests, with no API server, for `mco server`.
    Bootstrap(cmd::bootstrap::Args),
    /// Serve each pool's rendered config as Ignition to joining machines (port 22623).
    Server(cmd::server::Args),
    /// Start the embedded cluster: API server, controller and simulated nodes.
    Up(cmd::up::Args),
    /// Act on the simulated nodes of an `mco up` cluster.
    Sim(cmd::sim::Args),
    /// Show each pool's rollout: progress, phases of updating nodes, trouble and an ETA.
    Status(cmd::status::Args),
    /// Explain every node or pool in trouble, with the exact command that fixes it.
    Doctor(cmd::doctor::Args),
    /// Serve a live, read-only web dashboard of the fleet (loopback by default).
    Dashboard(cmd::dashboard::Args),
    /// Steer a pool's rollout under its RolloutPolicy: promote, halt, resume.
    Rollout(cmd::rollout::Args),
    /// Roll a pool back to its previous (or the named) rendered config, under the same gates.
    Rollback(cmd::rollout::RollbackArgs),
}

fn main() -> std::process::ExitCode {
    alloc::disable_huge_pages();
    // One logging setup for every role, shared with the daemon-only executable.
    mco_daemon::cli::init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Render(args) => cmd::render::run(args),
        Command::Manifests(args) => cmd::manifests::run(args),
        Command::Apiserver(args) => cmd::apiserver::run(args),
        Command::Controller(args) => cmd::controller::run(args),
        Command::Daemon(args) => cmd::daemon::run(args),
        Command::Status(args) => cmd::status::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Dashboard(args) => cmd::dashboard::run(args),
        Command::Bootstrap(args) => cmd::bootstrap::run(args),
        Command::Server(args) => cmd::server::run(args),
        Command::Up(args) => cmd::up::run(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Rollout(args) => cmd::rollout::run(args),
        Command::Rollback(args) => cmd::rollout::run_rollback(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The chain of causes on one line: these errors say what to do, and the backtrace
        // anyhow's Debug adds under RUST_BACKTRACE would bury that under 30 frames.
        Err(e) => {
            eprintln!("Error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `: `-joined, leaving out a cause its wrapper already shows
/// (`#[error("API server: {0}")]` with `#[from]` both prints and chains it).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !line.ends_with(&c) {
            line.push_str(": ");
            line.push_str(&c);
        }
    }
    line
}
