//! `mco-bench`: benchmarks of the embedded API server and of a whole `mco up` rollout. Build in
//! release mode: `cargo run --release -p mco-bench -- <writes|fanout|memory|mcs|rollout|servers|dashboard> [flags]`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mco_bench::{dashboard, fanout, mcs, memory, rollout, servers, writes};

#[derive(Debug, Parser)]
#[command(
    name = "mco-bench",
    about = "Benchmarks of the API server and of an mco up rollout"
)]
struct Cli {
    /// Directory for the databases (the disk under test); a scratch directory is made inside.
    #[arg(long, global = true, default_value_os_t = std::env::temp_dir())]
    work_dir: PathBuf,
    /// Hard time bound of each phase, in seconds.
    #[arg(long, global = true, default_value_t = 120)]
    max_secs: u64,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Durable write throughput of concurrent ConfigMap creates, against raw SQLite.
    Writes {
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 20_000)]
        count: usize,
        #[arg(long, default_value_t = 256)]
        value_bytes: usize,
        /// Share one kube::Client between the writers instead of one each.
        #[arg(long)]
        shared_client: bool,
        /// Rows per transaction in the batched raw-SQLite ceiling.
        #[arg(long, default_value_t = 256)]
        batch: usize,
    },
    /// Delivery latency to many name-filtered watchers while updates land.
    Fanout {
        #[arg(long, default_value_t = 1000)]
        watchers: usize,
        #[arg(long, default_value_t = 10_000)]
        updates: usize,
        #[arg(long, default_value_t = 32)]
        writers: usize,
    },
    /// RSS of a separate `mco apiserver` process with MachineConfigNodes and watchers.
    Memory {
        /// The mco binary (build it with `cargo build --release -p mco`).
        #[arg(long, default_value = "target/release/mco")]
        server_bin: PathBuf,
        #[arg(long, default_value_t = 10_000)]
        mcns: usize,
        #[arg(long, default_value_t = 1000)]
        watchers: usize,
        /// Skip writing a status on every MachineConfigNode.
        #[arg(long)]
        no_status: bool,
        #[arg(long, default_value_t = 32)]
        writers: usize,
    },
    /// Requests/s and RSS of a separate `mco server` serving /config/worker to many clients.
    Mcs {
        /// The mco binary (build it with `cargo build --release -p mco`).
        #[arg(long, default_value = "target/release/mco")]
        mco_bin: PathBuf,
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// How long the clients run, in seconds.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Files (4 KiB each) in the served rendered config; a quarter as many units.
        #[arg(long, default_value_t = 80)]
        files: usize,
    },
    /// A file MachineConfig rolled out by a separate `mco up` to many simulated nodes.
    Rollout {
        #[command(flatten)]
        rollout: RolloutArgs,
        #[command(flatten)]
        phases: PhasesArg,
    },
    /// The same rollout in pairs, without and with the dashboard open in a headless Chromium:
    /// the page's time to apply each batch of updates, and the RSS the dashboard adds.
    Dashboard {
        #[command(flatten)]
        rollout: RolloutArgs,
        /// Pairs of rollouts (without, with); the RSS added is their median.
        #[arg(long, default_value_t = 3)]
        pairs: usize,
        /// Open no page: what the dashboard's watches and view add alone, without the page's
        /// event stream (the page goal is then not judged).
        #[arg(long)]
        no_page: bool,
    },
    /// The same rollout on the embedded server and on a real kube-apiserver (scripts/real-kube),
    /// each with the controller as its own process: wall time, efficiency, requests per update
    /// and the controller's CPU.
    Servers {
        #[command(flatten)]
        rollout: RolloutArgs,
        /// The idle window before each rollout whose request rate is subtracted, in seconds.
        #[arg(long, default_value_t = 10)]
        idle_seconds: u64,
        #[arg(long, default_value = "scripts/real-kube")]
        real_kube: PathBuf,
        #[command(flatten)]
        phases: PhasesArg,
    },
}

/// Whether the rollout follows every Node to time each update's phases.
#[derive(Debug, clap::Args)]
struct PhasesArg {
    /// Run without the Node watch and its phase tables: what that watch costs the rollout.
    #[arg(long)]
    no_phases: bool,
}

/// The `rollout` bench's flags, shared by the benches that run it.
#[derive(Debug, clap::Args)]
struct RolloutArgs {
    /// The mco binary (build it with `cargo build --release -p mco`).
    #[arg(long, default_value = "target/release/mco")]
    mco_bin: PathBuf,
    /// Worker nodes (the pool rolled out) [default: 1000; 100 for `servers`, which starts a
    /// real control plane beside them].
    #[arg(long)]
    nodes: Option<usize>,
    #[arg(long, default_value_t = 3)]
    masters: usize,
    #[arg(long, default_value_t = 1.0)]
    reboot_seconds: f64,
    /// The worker pool's maxUnavailable, in percent.
    #[arg(long, default_value_t = 10)]
    max_unavailable_percent: u32,
}

impl RolloutArgs {
    fn opts(self, nodes: usize, max_secs: u64, work_dir: PathBuf) -> rollout::RolloutOpts {
        rollout::RolloutOpts {
            mco_bin: self.mco_bin,
            masters: self.masters,
            workers: self.nodes.unwrap_or(nodes),
            reboot_seconds: self.reboot_seconds,
            max_unavailable_percent: self.max_unavailable_percent,
            max: Duration::from_secs(max_secs.max(900)),
            work_dir,
            ..Default::default()
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let max = Duration::from_secs(cli.max_secs);
    match cli.bench {
        Bench::Writes {
            clients,
            count,
            value_bytes,
            shared_client,
            batch,
        } => {
            let r = writes::run(writes::WritesOpts {
                clients,
                count,
                value_bytes,
                shared_client,
                batch,
                max,
                work_dir: cli.work_dir,
            })
            .await?;
            println!("{r}");
        }
        Bench::Fanout {
            watchers,
            updates,
            writers,
        } => {
            let r = fanout::run(fanout::FanoutOpts {
                watchers,
                updates,
                writers,
                max,
                work_dir: cli.work_dir,
            })
            .await?;
            println!("{r}");
        }
        Bench::Memory {
            server_bin,
            mcns,
            watchers,
            no_status,
            writers,
        } => {
            let r = memory::run(memory::MemoryOpts {
                server_bin,
                mcns,
                watchers,
                with_status: !no_status,
                writers,
                max,
                work_dir: cli.work_dir,
            })
            .await?;
            println!("{r}");
        }
        Bench::Mcs {
            mco_bin,
            clients,
            seconds,
            files,
        } => {
            let r = mcs::run(mcs::McsOpts {
                mco_bin,
                clients,
                duration: Duration::from_secs(seconds.min(cli.max_secs)),
                files,
                work_dir: cli.work_dir,
            })
            .await?;
            println!("{r}");
        }
        Bench::Rollout { rollout, phases } => {
            let r = rollout::run(rollout::RolloutOpts {
                phases: !phases.no_phases,
                ..rollout.opts(1000, cli.max_secs, cli.work_dir)
            })
            .await?;
            println!("{r}");
        }
        Bench::Dashboard {
            rollout,
            pairs,
            no_page,
        } => {
            let opts = rollout::RolloutOpts {
                dashboard: if no_page {
                    rollout::Dashboard::Served
                } else {
                    rollout::Dashboard::Watched
                },
                ..rollout.opts(1000, cli.max_secs, cli.work_dir)
            };
            let r = dashboard::run(opts, pairs).await?;
            println!("{r}");
        }
        Bench::Servers {
            rollout,
            idle_seconds,
            real_kube,
            phases,
        } => {
            let r = servers::run(servers::ServersOpts {
                rollout: rollout::RolloutOpts {
                    controller_process: true,
                    idle: Duration::from_secs(idle_seconds),
                    phases: !phases.no_phases,
                    ..rollout.opts(100, cli.max_secs, cli.work_dir)
                },
                real_kube,
            })
            .await?;
            println!("{r}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(argv: &[&str]) -> Result<Bench, clap::Error> {
        Cli::try_parse_from(std::iter::once("mco-bench").chain(argv.iter().copied()))
            .map(|c| c.bench)
    }

    #[test]
    fn no_phases_is_a_flag_of_rollout_and_servers_only() {
        let no_phases = |argv: &[&str]| match bench(argv).unwrap() {
            Bench::Rollout { phases, .. } | Bench::Servers { phases, .. } => phases.no_phases,
            other => panic!("{other:?}"),
        };
        assert!(!no_phases(&["rollout"]));
        assert!(no_phases(&["rollout", "--no-phases"]));
        assert!(no_phases(&["rollout", "--nodes", "10", "--no-phases"]));
        assert!(!no_phases(&["servers"]));
        assert!(no_phases(&[
            "servers",
            "--no-phases",
            "--idle-seconds",
            "3"
        ]));
        // It takes no value, and the other benches have no such flag.
        assert!(bench(&["rollout", "--no-phases=true"]).is_err());
        assert!(bench(&["dashboard", "--no-phases"]).is_err());
        assert!(bench(&["writes", "--no-phases"]).is_err());
    }

    #[test]
    fn phases_are_on_unless_asked_off() {
        assert!(rollout::RolloutOpts::default().phases);
    }
}
