//! `mco-daemon`: the node daemon alone, with `mco daemon`'s flags. A separate, smaller executable
//! keeps the idle daemon's resident memory down: the multi-call `mco` carries the API server,
//! controller, simulator and CLI, whose pages the kernel maps in around the daemon's.

use clap::Parser;
use mco_daemon::cli::{self, Standalone};

fn main() -> anyhow::Result<()> {
    cli::init_logging();
    cli::run(Standalone::parse().args)
}
