//! `mco status [-w]`: rollout progress of every pool, read from the API only.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Follow the rollout live, re-rendering on every change.
    #[arg(short, long)]
    watch: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = mco_cli::client::client(args.kubeconfig.as_deref()).await?;
        if !args.watch {
            let snap = mco_cli::fetch(&client).await?;
            print!(
                "{}",
                mco_cli::status::render(&mco_cli::status::build(&snap))
            );
            return Ok(());
        }
        let tty = std::io::stdout().is_terminal();
        let follow = mco_cli::client::follow(
            &client,
            Duration::from_millis(500),
            Duration::from_secs(2),
            |snap| {
                let text = mco_cli::status::render(&mco_cli::status::build(snap));
                let mut out = std::io::stdout().lock();
                let header = format!(
                    "mco status -w   {} (Ctrl-C to stop)",
                    snap.now.strftime("%H:%M:%SZ")
                );
                let written = if tty {
                    // Clear the screen and home the cursor, like `watch`.
                    write!(out, "\x1b[2J\x1b[H{header}\n\n{text}")
                } else {
                    write!(out, "--- {header}\n{text}")
                };
                written.and_then(|_| out.flush()).is_ok()
            },
        );
        tokio::select! {
            r = follow => r?,
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}
