//! The daemon a simulated node runs in process: `mco-daemon`'s sync loop over the node's
//! simulated host, exactly as `mco daemon --host sim` runs it in a process.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use mco_daemon::Host;
use mco_daemon::agent::sync::{Daemon, Exit, SyncOptions};
use mco_daemon::engine::Engine;
use tracing::Instrument;

use crate::supervisor::{DaemonContext, DaemonFn, DaemonMode};

/// How often a daemon waiting for the drain controller re-reads its node when the watch has
/// not answered: a thousand nodes booting at once each wait for their first uncordon, and
/// polling every 200 ms was five thousand GETs a second that starved the controller.
const POLL: Duration = Duration::from_secs(10);

/// The in-process daemon every simulated node runs by default.
pub fn default_mode() -> DaemonMode {
    let f: DaemonFn = Arc::new(|ctx| run(ctx).boxed());
    DaemonMode::InProcess(f)
}

/// Runs the node's daemon until it requests a reboot or the context's shutdown fires.
pub async fn run(ctx: DaemonContext) -> Result<(), String> {
    let root = ctx.root.clone();
    let engine = tokio::task::spawn_blocking(move || Host::sim(&root).and_then(Engine::new))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let mut opts = SyncOptions::new(&ctx.node);
    opts.namespace = ctx.namespace;
    opts.poll_interval = POLL;
    let mut shutdown = ctx.shutdown;
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    // Many daemons share this process's log: each one's lines carry its node.
    let span = tracing::info_span!("daemon", node = %ctx.node);
    match Daemon::new(ctx.client, engine, opts)
        .run(stop)
        .instrument(span)
        .await
    {
        Ok(Exit::Rebooting) => {
            tracing::info!(node = %ctx.node, "daemon waits for the reboot");
            Ok(())
        }
        Ok(Exit::Shutdown) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}
