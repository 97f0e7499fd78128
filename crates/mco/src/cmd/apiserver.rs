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
    /// What an answered write survives: power-loss (each commit fsynced, as etcd does) or
    /// process-crash (commits reach the OS; a power cut may roll back the last ones).
    #[arg(long, default_value_t = mco_apiserver::Durability::PowerLoss)]
    pub store_durability: mco_apiserver::Durability,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut cfg = mco_apiserver::Config::new(args.data_dir, args.listen);
        cfg.durability = args.store_durability;
        let handle = mco_apiserver::Server::start(cfg).await?;
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
