//! `mco sim ...`: act on the simulated nodes of an `mco up` cluster through its data dir.
//! A running `mco up` follows the node specs under `DIR/sim/nodes/`, so adding or removing a
//! node takes effect within a second.

use std::path::PathBuf;

use mco_sim::root::NodeRoot;
use mco_sim::{NodeSpec, OsProfile, SpecDir};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The cluster's data dir.
    #[arg(long, global = true, default_value = ".mco")]
    pub data_dir: PathBuf,
    #[command(subcommand)]
    pub command: SimCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SimCommand {
    /// Add a node; it joins through first boot.
    AddNode {
        name: String,
        /// The pool (role) it joins.
        #[arg(long, default_value = "worker")]
        pool: String,
        /// Its OS.
        #[arg(long, default_value = "uos")]
        os: OsProfile,
        /// Reproduce seed 000: first boot applies files but never adopts the OS.
        #[arg(long)]
        skip_firstboot_os: bool,
    },
    /// Remove a node: its Node object and disk.
    RemoveNode { name: String },
    /// Run rpm-ostree on a simulated node.
    RpmOstree {
        node: String,
        #[command(subcommand)]
        command: RpmOstreeCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum RpmOstreeCommand {
    /// The booted, staged and rollback deployments.
    Status {
        /// `rpm-ostree status --json`.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let specs = SpecDir::of(&args.data_dir);
    match args.command {
        SimCommand::AddNode {
            name,
            pool,
            os,
            skip_firstboot_os,
        } => {
            let spec = NodeSpec {
                zone: specs.next_zone()?,
                name,
                pool,
                os: os.to_string(),
                skip_firstboot_os,
            };
            specs.add(&spec)?;
            println!(
                "node/{} added to pool {} ({}); a running `mco up` boots it",
                spec.name, spec.pool, spec.os
            );
        }
        SimCommand::RemoveNode { name } => {
            if !specs.remove(&name)? {
                anyhow::bail!("no simulated node {name} in {}", args.data_dir.display());
            }
            println!("node/{name} removed; a running `mco up` deletes it");
        }
        SimCommand::RpmOstree {
            node,
            command: RpmOstreeCommand::Status { json },
        } => {
            let root = NodeRoot::at(args.data_dir.join("nodes").join(&node));
            if !root.exists() {
                anyhow::bail!("no simulated node {node} in {}", args.data_dir.display());
            }
            if json {
                let Some(state) = root.os_status_json()? else {
                    anyhow::bail!("error: {node} is not booted via ostree");
                };
                println!("{}", serde_json::to_string_pretty(&state)?);
            } else {
                let Some(status) = root.os_status()? else {
                    anyhow::bail!("error: {node} is not booted via ostree");
                };
                print!("{status}");
            }
        }
    }
    Ok(())
}
