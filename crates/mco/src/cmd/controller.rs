//! `mco controller`: render, roll out, drain and report, against a cluster or the embedded API
//! server. Every timeout is a flag so tests and small clusters can run fast.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use mco_controller::{Config, DrainTimeouts, LeaseConfig, metrics_auth, parse_duration};

#[derive(Debug, clap::Args)]
// This port serves the probes too, which no token guards.
#[command(mut_arg(mco_metrics_auth::cli::Args::MODE_ID, |a| {
    let help = a.get_help().map(ToString::to_string).unwrap_or_default();
    a.help(format!("{help}. /healthz and /readyz stay open"))
}))]
pub struct Args {
    /// Kubeconfig to use (default: in-cluster config, then $KUBECONFIG / ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Rendered configs kept per pool beyond those still referenced by a pool or node.
    #[arg(long, default_value_t = 5)]
    rendered_retain: usize,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "127.0.0.1:9797")]
    metrics_addr: SocketAddr,
    // Boxed: `mco`'s command enum holds every role's flags, and this keeps the controller's
    // variant near the others in size.
    #[command(flatten)]
    metrics_auth: Box<mco_metrics_auth::cli::Args>,
    /// Coalesce bursts of MachineConfig and pool changes into one render.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    render_debounce: Duration,
    /// Reconcile everything at least this often.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    resync: Duration,
    /// A pool's next pass waits this many times the last one's planning time after its start,
    /// so passes over a large pool take at most about 1/N of a thread.
    #[arg(long, default_value_t = 10)]
    pass_spacing: u32,
    /// First retry delay after a failed reconcile; each further failure of the same object doubles it, up to 5 minutes.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    error_requeue: Duration,
    /// One drain attempt gives up after this long.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    drain_attempt_timeout: Duration,
    /// Delay between evictions refused by a PodDisruptionBudget.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    drain_evict_retry: Duration,
    /// A failed drain attempt is retried after this long.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    drain_requeue: Duration,
    /// Retry delay once a drain has been failing for --drain-slow-after.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    drain_requeue_slow: Duration,
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    drain_slow_after: Duration,
    /// After failing this long: DrainFailed event and mcc_drain_err=1 (retries go on).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    drain_failed_after: Duration,
    /// The namespace mco is installed in: Events about cluster-scoped objects (Nodes, pools)
    /// are recorded there (the Deployment sets $POD_NAMESPACE to its own).
    #[arg(
        long,
        env = mco_api::constants::names::NAMESPACE_ENV,
        default_value = mco_api::constants::names::DEFAULT_NAMESPACE
    )]
    namespace: String,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "kube-system")]
    lease_namespace: String,
    #[arg(long, default_value = "machine-config-controller")]
    lease_name: String,
    /// A standby takes over this long after the leader stops renewing.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    lease_renew_interval: Duration,
    /// This replica's identity in the Lease (default: host name and a random suffix).
    #[arg(long)]
    identity: Option<String>,
    /// Generate each role's base configs (`00-<role>`, `01-<role>-kubelet`,
    /// `01-<role>-container-runtime`) from the ControllerConfig; `false` leaves them to
    /// another writer.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    templates: bool,
    /// Keep the machine config server's CA (Secret and ConfigMap `machine-config-server-ca`)
    /// and its serving certificate (--server-tls-secret) in this namespace, and rotate them.
    #[arg(long)]
    server_certs_namespace: Option<String>,
    /// The serving certificate's Secret, which the server mounts.
    #[arg(long, default_value = "mco-server-tls")]
    server_tls_secret: String,
    /// The names and IPs the serving certificate is for (comma-separated); default: the host of
    /// the ControllerConfig's `spec.infra.status.apiServerInternalURI` and the platform's
    /// `apiServerInternalIPs`, as upstream's.
    #[arg(long, value_delimiter = ',')]
    server_cert_hostnames: Vec<String>,
    /// How often the server's certificates are checked.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    server_certs_period: Duration,
    /// Keep the Machine API's user-data Secrets in this namespace (upstream's
    /// `openshift-machine-api`) pointing at the CA bundle of --server-certs-namespace, while
    /// that bundle verifies the certificate in --server-tls-secret.
    #[arg(long, requires = "server_certs_namespace")]
    user_data_namespace: Option<String>,
    /// Keep the ControllerConfig's CA bundles in step with the cluster's, as upstream's
    /// operator does: the kubelet CA from `openshift-config-managed/kube-apiserver-client-ca`,
    /// the registry CAs from `openshift-config-managed/image-registry-ca` and the ConfigMap of
    /// `openshift-config` that `images.config.openshift.io/cluster` names.
    #[arg(long)]
    sync_controller_config: bool,
}

impl Args {
    fn metrics_auth(&self) -> metrics_auth::Settings {
        self.metrics_auth.settings()
    }

    fn config(&self) -> Config {
        let mut lease = LeaseConfig {
            namespace: self.lease_namespace.clone(),
            name: self.lease_name.clone(),
            duration: self.lease_duration,
            renew_interval: self.lease_renew_interval,
            ..Default::default()
        };
        if let Some(id) = &self.identity {
            lease.identity = id.clone();
        }
        Config {
            controller_version: env!("CARGO_PKG_VERSION").to_string(),
            rendered_retain: self.rendered_retain,
            render_debounce: self.render_debounce,
            resync: self.resync,
            pass_spacing: self.pass_spacing,
            error_requeue: self.error_requeue,
            drain: DrainTimeouts {
                attempt_timeout: self.drain_attempt_timeout,
                evict_retry: self.drain_evict_retry,
                requeue: self.drain_requeue,
                requeue_slow: self.drain_requeue_slow,
                slow_after: self.drain_slow_after,
                failed_after: self.drain_failed_after,
            },
            lease,
            metrics_addr: Some(self.metrics_addr),
            metrics_auth: self.metrics_auth(),
            // Taken from $NODE_NAME (the Deployment's downward API) when the controller starts.
            own_node: None,
            templates: self.templates,
            lend_caches: None,
            server_certs: self.server_certs_namespace.as_ref().map(|ns| {
                mco_controller::server_certs::ServerCerts {
                    namespace: ns.clone(),
                    serving_secret: self.server_tls_secret.clone(),
                    hostnames: self.server_cert_hostnames.clone(),
                    period: self.server_certs_period,
                }
            }),
            user_data: self
                .user_data_namespace
                .as_ref()
                .zip(self.server_certs_namespace.as_ref())
                .map(|(ns, certs_ns)| mco_controller::user_data::UserData {
                    namespace: ns.clone(),
                    certs_namespace: certs_ns.clone(),
                    serving_secret: self.server_tls_secret.clone(),
                    resync: self.server_certs_period,
                }),
            sync_controller_config: self.sync_controller_config,
            namespace: self.namespace.clone(),
        }
    }
}

/// The client. kube-rs retries 429s by default; the drain controller must see them, because a
/// 429 on an eviction is a PodDisruptionBudget's "no", which it reports and retries itself.
async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let mut cfg = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    cfg.default_retry = false;
    cfg.headers
        .push(mco_api::user_agent::header(mco_api::user_agent::CONTROLLER));
    Ok(kube::Client::try_from(cfg)?)
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Bad flags fail before any connection is made.
    args.metrics_auth().validate()?;
    rt.block_on(async {
        let client = client(args.kubeconfig.as_ref()).await?;
        mco_controller::run(client, args.config(), shutdown_signal()).await?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn metrics_auth_flags_parse_and_say_the_probes_stay_open() {
        let cmd = <Cli as clap::CommandFactory>::command();
        let help = cmd
            .get_arguments()
            .find(|a| a.get_id() == "metrics_auth")
            .and_then(|a| a.get_help())
            .unwrap()
            .to_string();
        assert!(
            help.ends_with("with a SubjectAccessReview). /healthz and /readyz stay open"),
            "{help}"
        );

        let cli = Cli::try_parse_from([
            "mco",
            "--metrics-auth=delegated",
            "--metrics-tls-cert-file=/tls/tls.crt",
            "--metrics-tls-key-file=/tls/tls.key",
        ])
        .unwrap();
        assert_eq!(
            cli.args.metrics_auth(),
            metrics_auth::Settings {
                mode: metrics_auth::Mode::Delegated,
                cert_file: Some("/tls/tls.crt".into()),
                key_file: Some("/tls/tls.key".into()),
            }
        );
        assert!(Cli::try_parse_from(["mco", "--metrics-tls-key-file=/k"]).is_err());
    }
}
