//! `mco apiserver`: the embedded Kubernetes-compatible API server as a process.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory holding the database, certificates and kubeconfig (created if missing).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let handle =
            mco_apiserver::Server::start(mco_apiserver::Config::new(args.data_dir, args.listen))
                .await?;
        eprintln!(
            "serving on https://{}; KUBECONFIG={}",
            handle.addr(),
            handle.kubeconfig_path().display()
        );
        tokio::signal::ctrl_c().await?;
        handle.shutdown().await;
        Ok(())
    })
}
