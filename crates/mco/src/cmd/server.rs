//! `mco server`: the Machine Config Server. Serves `GET /config/<pool>` over HTTPS (port 22623
//! as upstream's) from a cluster's pools and rendered configs, or from a bootstrap directory
//! written by `mco bootstrap` before any API server exists (docs/server.md).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use mco_controller::parse_duration;
use mco_server::tls::Certificate;
use mco_server::{App, Limits, Source};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig to use (default: in-cluster config, then $KUBECONFIG / ~/.kube/config).
    #[arg(long, conflicts_with = "bootstrap_dir")]
    pub kubeconfig: Option<PathBuf>,
    /// Serve the pools and rendered configs of this directory (`mco bootstrap --dest-dir`)
    /// instead of a cluster's.
    #[arg(long)]
    pub bootstrap_dir: Option<PathBuf>,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "0.0.0.0:22623")]
    pub listen: SocketAddr,
    /// The serving certificate chain (PEM); with --tls-key. Both files are read again when they
    /// change (a rotated Secret): new connections get the new pair within about a second.
    #[arg(long, requires = "tls_key", conflicts_with = "cert_dir")]
    pub tls_cert: Option<PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A directory holding the server's CA (`ca.crt`, `ca.key`; created if missing); a serving
    /// certificate is issued from it at each start. Machines trust `ca.crt`.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Names and addresses the issued certificate covers besides localhost (repeatable).
    #[arg(long = "tls-name")]
    pub tls_names: Vec<String>,
    /// Serve only clients presenting one of the tokens of --token-file as
    /// `Authorization: Bearer <token>`.
    #[arg(long, requires = "token_file")]
    pub require_token: bool,
    /// Bootstrap tokens, one per line.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The API server URL new machines' kubelets bootstrap against (such as
    /// `https://api-int.<domain>:6443`): with --bootstrap-token-dir, the served Ignition holds
    /// the bootstrap kubeconfig `/etc/kubernetes/kubeconfig`.
    #[arg(long, requires = "bootstrap_token_dir")]
    pub apiserver_url: Option<String>,
    /// A directory with a ServiceAccount token Secret's `token` and `ca.crt`, mounted from the
    /// `node-bootstrapper-token` Secret (docs/server.md); read at start.
    #[arg(long, requires = "apiserver_url")]
    pub bootstrap_token_dir: Option<PathBuf>,
    /// Connections open at once; further clients wait.
    #[arg(long, default_value_t = Limits::default().max_connections)]
    pub max_connections: usize,
    /// Time a client has for the TLS handshake, and then for each request's headers.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub client_timeout: Duration,
}

/// Threads for blocking work.
const BLOCKING_THREADS: usize = 4;

/// Most bytes of a token file.
const MAX_TOKEN_FILE: u64 = 64 * 1024;

/// The tokens of `path`: one per line, blank lines ignored.
pub fn read_tokens(path: &Path) -> anyhow::Result<Vec<String>> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("--token-file {}", path.display()))?;
    if meta.len() > MAX_TOKEN_FILE {
        anyhow::bail!(
            "--token-file {}: larger than {MAX_TOKEN_FILE} bytes",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--token-file {}", path.display()))?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    if tokens.is_empty() {
        anyhow::bail!("--token-file {}: holds no token", path.display());
    }
    if let Some(t) = tokens
        .iter()
        .find(|t| t.len() < 16 || t.contains(char::is_whitespace))
    {
        anyhow::bail!(
            "--token-file {}: a token must be at least 16 characters without spaces, got one of {}",
            path.display(),
            t.len()
        );
    }
    Ok(tokens)
}

/// Most bytes of the bootstrap token and of its CA bundle.
const MAX_BOOTSTRAP_FILE: u64 = 1 << 20;

fn read_bounded(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_BOOTSTRAP_FILE + 1).read_to_end(&mut buf))
        .with_context(|| format!("--bootstrap-token-dir: reading {}", path.display()))?;
    if buf.len() as u64 > MAX_BOOTSTRAP_FILE {
        anyhow::bail!(
            "--bootstrap-token-dir: {} is larger than {MAX_BOOTSTRAP_FILE} bytes",
            path.display()
        );
    }
    Ok(buf)
}

/// The machines' bootstrap kubeconfig: `url`, and the `token` and `ca.crt` of `dir` (a
/// ServiceAccount token Secret's keys), as upstream's server builds it.
pub fn bootstrap_kubeconfig(url: &str, dir: &Path) -> anyhow::Result<Vec<u8>> {
    if !url.starts_with("https://") || url.len() <= "https://".len() {
        anyhow::bail!("--apiserver-url {url:?}: must be an https:// URL");
    }
    let token = String::from_utf8(read_bounded(&dir.join("token"))?)
        .map_err(|_| anyhow::anyhow!("--bootstrap-token-dir: token is not UTF-8"))?;
    let token = token.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        anyhow::bail!(
            "--bootstrap-token-dir {}: token must be one word",
            dir.display()
        );
    }
    let ca = read_bounded(&dir.join("ca.crt"))?;
    if !String::from_utf8_lossy(&ca).contains("-----BEGIN CERTIFICATE-----") {
        anyhow::bail!(
            "--bootstrap-token-dir {}: ca.crt holds no PEM certificate",
            dir.display()
        );
    }
    Ok(mco_server::assemble::bootstrap_kubeconfig(url, &ca, token).into_bytes())
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let mut cfg = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    cfg.headers
        .push(mco_api::user_agent::header(mco_api::user_agent::SERVER));
    Ok(kube::Client::try_from(cfg)?)
}

/// Starts a cluster-backed server.
pub async fn start_cluster(
    kubeconfig: Option<&PathBuf>,
    listen: SocketAddr,
    cert: &Certificate,
    tokens: Option<Vec<String>>,
    node_kubeconfig: Option<Vec<u8>>,
    limits: Limits,
) -> anyhow::Result<mco_server::Handle> {
    let tls = mco_server::tls::server_config(cert)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let source = Source::cluster(client(kubeconfig).await?).await?;
    Ok(mco_server::start(
        listener,
        tls,
        App::with_kubeconfig(source, tokens, node_kubeconfig),
        limits,
    )?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let cert = match (&args.tls_cert, &args.tls_key, &args.cert_dir) {
        (Some(cert), Some(key), _) => Certificate::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        (_, _, Some(dir)) => {
            let mut names = args.tls_names.clone();
            if !args.listen.ip().is_unspecified() {
                names.push(args.listen.ip().to_string());
            }
            Certificate::CaDir {
                dir: dir.clone(),
                names,
            }
        }
        _ => anyhow::bail!("give the serving certificate: --tls-cert and --tls-key, or --cert-dir"),
    };
    let tokens = match (&args.token_file, args.require_token) {
        (Some(path), true) => Some(read_tokens(path)?),
        _ => None,
    };
    let node_kubeconfig = match (&args.apiserver_url, &args.bootstrap_token_dir) {
        (Some(url), Some(dir)) => Some(bootstrap_kubeconfig(url, dir)?),
        _ => None,
    };
    let limits = Limits {
        max_connections: args.max_connections.max(1),
        handshake_timeout: args.client_timeout,
        header_timeout: args.client_timeout,
        ..Limits::default()
    };
    // Blocking work (reading a bootstrap directory, assembling an answer) is short and
    // CPU-bound: a few threads do it, where tokio's default of 512 would each keep a heap
    // under a boot storm.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()?;
    rt.block_on(async move {
        let handle = match &args.bootstrap_dir {
            Some(dir) => {
                if !dir.join("machine-pools").is_dir() {
                    anyhow::bail!(
                        "--bootstrap-dir {}: no machine-pools directory (write one with `mco bootstrap`)",
                        dir.display()
                    );
                }
                let tls = mco_server::tls::server_config(&cert)?;
                let listener = tokio::net::TcpListener::bind(args.listen)
                    .await
                    .with_context(|| format!("listening on {}", args.listen))?;
                let app = App::with_kubeconfig(Source::Dir(dir.clone()), tokens, node_kubeconfig);
                mco_server::start(listener, tls, app, limits)?
            }
            None => {
                start_cluster(
                    args.kubeconfig.as_ref(),
                    args.listen,
                    &cert,
                    tokens,
                    node_kubeconfig,
                    limits,
                )
                .await?
            }
        };
        eprintln!("mco server: serving https://{}/config/<pool>", handle.addr());
        super::up::shutdown_signal().await;
        handle.shutdown().await;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::{MAX_BOOTSTRAP_FILE, bootstrap_kubeconfig};

    #[test]
    fn the_bootstrap_kubeconfig_is_read_within_limits_and_checked() {
        let path = std::env::temp_dir().join(format!("mco-server-kc-{}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        struct Dir(std::path::PathBuf);
        impl Dir {
            fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = Dir(path);
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        std::fs::write(dir.path().join("token"), "tok-abc\n").unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca).unwrap();
        let url = "https://api-int.example:6443";
        let kc = String::from_utf8(bootstrap_kubeconfig(url, dir.path()).unwrap()).unwrap();
        assert!(
            kc.contains("server: https://api-int.example:6443\n"),
            "{kc}"
        );
        assert!(kc.contains("token: tok-abc\n"), "{kc}");
        let e = bootstrap_kubeconfig("http://x", dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be an https:// URL"), "{e}");
        // A CA bundle of exactly the limit is read; one byte more is refused.
        let pad = MAX_BOOTSTRAP_FILE as usize - ca.len();
        std::fs::write(
            dir.path().join("ca.crt"),
            format!("{ca}{}", "#".repeat(pad)),
        )
        .unwrap();
        bootstrap_kubeconfig(url, dir.path()).unwrap();
        std::fs::write(
            dir.path().join("ca.crt"),
            format!("{ca}{}", "#".repeat(pad + 1)),
        )
        .unwrap();
        let e = bootstrap_kubeconfig(url, dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is larger than 1048576 bytes"), "{e}");
        std::fs::write(dir.path().join("ca.crt"), ca).unwrap();
        std::fs::write(dir.path().join("token"), "two words").unwrap();
        let e = bootstrap_kubeconfig(url, dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("token must be one word"), "{e}");
    }
}
