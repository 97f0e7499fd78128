//! `mco dashboard`: the live web dashboard of any cluster (docs/dashboard.md). Read-only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Address to serve on. Any address other than loopback needs --token-file.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A file holding the bearer token every request must present.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// The dashboard's config, checked before anything starts: a non-loopback address without a
/// token is refused with the reason.
pub fn config(
    listen: SocketAddr,
    token_file: Option<&Path>,
) -> anyhow::Result<mco_dashboard::Config> {
    let token = token_file
        .map(mco_dashboard::server::read_token)
        .transpose()?;
    let cfg = mco_dashboard::Config {
        listen,
        token,
        caches: None,
    };
    cfg.check()?;
    Ok(cfg)
}

/// `--dashboard-listen`: an address, or `None` for `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen(pub Option<SocketAddr>);

/// `off`, or an address.
pub fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "off" {
        return Ok(Listen(None));
    }
    s.parse()
        .map(|a| Listen(Some(a)))
        .map_err(|e| format!("{e}: expected ADDR:PORT or `off`"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = config(args.listen, args.token_file.as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = mco_cli::client::client(args.kubeconfig.as_deref()).await?;
        let dash = mco_dashboard::serve(client, cfg).await?;
        eprintln!("mco dashboard: on {}; Ctrl-C stops it", dash.url());
        super::up::shutdown_signal().await;
        drop(dash);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_is_an_address_or_off() {
        assert_eq!(parse_listen("off"), Ok(Listen(None)));
        assert_eq!(
            parse_listen("127.0.0.1:0"),
            Ok(Listen(Some("127.0.0.1:0".parse().unwrap())))
        );
        assert!(parse_listen("8080").unwrap_err().contains("`off`"));
    }

    #[test]
    fn a_non_loopback_address_without_a_token_is_refused() {
        let e = config("0.0.0.0:8080".parse().unwrap(), None).unwrap_err();
        assert!(e.to_string().contains("--token-file"), "{e}");
        assert!(config("127.0.0.1:8080".parse().unwrap(), None).is_ok());
    }
}
