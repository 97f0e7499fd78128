//! `mco rollout promote|halt|resume POOL` and `mco rollback POOL [--to rendered-…]`: annotate
//! the pool; the controller's rollout policy acts on it (see docs/rollouts.md).

use std::path::PathBuf;

use anyhow::Context;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use mco_api::{MachineConfig, MachineConfigPool};
use mco_cli::rollout::{self, Control};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Skip the canary and soak of the pool's current target.
    Promote { pool: String },
    /// Target no new node of the pool until `resume`.
    Halt { pool: String },
    /// Undo a halt, and forgive the gate failures seen so far.
    Resume { pool: String },
}

#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    pool: String,
    /// The rendered config to return to (default: the pool's previous one).
    #[arg(long)]
    to: Option<String>,
}

async fn patch_pool(
    pools: &Api<MachineConfigPool>,
    name: &str,
    patch: &serde_json::Value,
) -> anyhow::Result<()> {
    pools
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("annotating MachineConfigPool {name}"))?;
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let client = mco_cli::client::client(args.kubeconfig.as_deref()).await?;
        let pools: Api<MachineConfigPool> = Api::all(client);
        let (control, name, done) = match &args.action {
            Action::Promote { pool } => (Control::Promote, pool, "promoted"),
            Action::Halt { pool } => (Control::Halt, pool, "halted"),
            Action::Resume { pool } => (Control::Resume, pool, "resumed"),
        };
        let pool = pools
            .get(name)
            .await
            .with_context(|| format!("reading MachineConfigPool {name}"))?;
        let now = rollout::now();
        let patch = rollout::control_patch(&pool, control, &now).map_err(anyhow::Error::msg)?;
        patch_pool(&pools, name, &patch).await?;
        println!("machineconfigpool/{name} {done}");
        Ok(())
    })
}

pub fn run_rollback(args: RollbackArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let client = mco_cli::client::client(args.kubeconfig.as_deref()).await?;
        let pools: Api<MachineConfigPool> = Api::all(client.clone());
        let mcs: Api<MachineConfig> = Api::all(client);
        let name = &args.pool;
        let pool = pools
            .get(name)
            .await
            .with_context(|| format!("reading MachineConfigPool {name}"))?;
        let rendered = mcs
            .list(&ListParams::default())
            .await
            .context("listing MachineConfigs")?
            .items;
        let to = rollout::rollback_target(&pool, &rendered, args.to.as_deref())
            .map_err(anyhow::Error::msg)?;
        let now = rollout::now();
        patch_pool(&pools, name, &rollout::rollback_patch(&to, &now)).await?;
        println!("machineconfigpool/{name} rolling back to {to}");
        Ok(())
    })
}
