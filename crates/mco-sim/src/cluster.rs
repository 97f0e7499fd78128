//! The embedded cluster behind `mco up`: API server, CRDs and default objects, the controller,
//! the workloads and one supervisor per simulated node.
//!
//! The fleet is the spec directory (`DIR/sim/nodes/*.json`, see [`crate::spec`]): a reconciler
//! polls it, so `mco sim add-node`/`remove-node` take effect on a running cluster and a restart
//! resumes the same nodes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use mco_api::{ControllerConfig, MachineConfig, MachineConfigPool, user_agent};
use mco_apiserver::{Identity, Server, ServerHandle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Result, SimError};
use crate::external::External;
use crate::objects::{self, ensure};
use crate::profile::{OS_IMAGE_1_2_2, OsProfile, OsUpdateMode};
use crate::spec::{NodeSpec, SpecDir, initial_fleet};
use crate::supervisor::{Backend, DaemonMode, NodeEnv, run_node};
use crate::workload::{self, WorkloadTiming};

/// Written once the initial fleet's specs exist, so removing every node is not undone by a
/// restart.
const FLEET_INITIALIZED: &str = "sim/fleet-initialized";
/// In a data dir used with an existing cluster: that cluster's URL. An embedded cluster
/// refuses such a dir, so its nodes never join two clusters.
const ATTACHED: &str = "attached-cluster";
/// The embedded API server's database, in a data dir the embedded cluster uses.
const EMBEDDED_STORE: &str = "state.db";
/// The field manager of the shipped manifests `mco up` applies at every start.
const FIELD_MANAGER: &str = "mco-up";
/// How often the fleet reconciler reads the spec directory.
const FLEET_POLL: Duration = Duration::from_millis(500);
/// The longest the fleet goes without reading every spec and listing its Nodes.
const FLEET_RESCAN: Duration = Duration::from_secs(10);

/// How to start the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Where everything lives.
    pub data_dir: PathBuf,
    /// Master nodes of a fresh cluster.
    pub masters: usize,
    /// Worker nodes of a fresh cluster.
    pub workers: usize,
    /// Their OS.
    pub os: OsProfile,
    /// Pivot or container.
    pub os_update_mode: OsUpdateMode,
    /// How long a node is down when it reboots.
    pub reboot: Duration,
    /// The API server's address (port 0 picks one).
    pub listen: SocketAddr,
    /// What the API server's answered writes survive. The node disks survive a process crash,
    /// not a power cut, so the store's default promises the same.
    pub store_durability: mco_apiserver::Durability,
    /// How each node's daemon runs.
    pub daemon: DaemonMode,
    /// The controller's settings; `None` runs no controller.
    pub controller: Option<mco_controller::Config>,
    /// The workload simulation; `None` creates no workloads.
    pub workloads: Option<WorkloadTiming>,
    /// Run on the existing cluster of this admin kubeconfig instead of the embedded API
    /// server (`listen` and `store_durability` then do not apply, nor `workloads`: the
    /// cluster's own pods are the workload). See [`crate::external`].
    pub kubeconfig: Option<PathBuf>,
    /// CRDs installed in place of mco's own for the same resource (upstream's
    /// MachineConfigNode CRD, say, to run against the schema a cluster already has).
    pub crds: Vec<serde_json::Value>,
    /// Where the machine config server listens (its CA is `<data_dir>/mcs/ca.crt`); new nodes
    /// join through it. `None`, or an address that cannot be had, runs no server: new nodes
    /// then get the same Ignition assembled in this process.
    pub mcs_listen: Option<SocketAddr>,
}

impl ClusterOptions {
    /// `mco up`'s defaults for `data_dir`: 3 masters, 3 workers, uos, pivot, 2 s reboots, the
    /// built-in daemon, the controller with timings for a small cluster, workloads.
    pub fn new(data_dir: impl Into<PathBuf>) -> ClusterOptions {
        ClusterOptions {
            data_dir: data_dir.into(),
            masters: 3,
            workers: 3,
            os: OsProfile::Uos,
            os_update_mode: OsUpdateMode::Pivot,
            reboot: Duration::from_secs(2),
            listen: SocketAddr::from(([127, 0, 0, 1], 6443)),
            store_durability: mco_apiserver::Durability::ProcessCrash,
            daemon: crate::daemon::default_mode(),
            controller: Some(controller_config()),
            workloads: Some(WorkloadTiming::default()),
            kubeconfig: None,
            crds: Vec::new(),
            mcs_listen: None,
        }
    }
}

/// The controller's settings in the embedded cluster: upstream's rules with timings sized for
/// one machine, and a fixed lease identity so a restart takes the lease back at once.
pub fn controller_config() -> mco_controller::Config {
    let mut c = mco_controller::Config {
        // The debounce is trailing: it only has to outlast the gap between one client's writes
        // (`kubectl apply -f DIR` sends one object every few milliseconds) to render a burst
        // once, and every MachineConfig change waits for it before anything moves.
        render_debounce: Duration::from_millis(100),
        resync: Duration::from_secs(10),
        error_requeue: Duration::from_secs(1),
        ..Default::default()
    };
    c.drain.evict_retry = Duration::from_secs(1);
    c.drain.requeue = Duration::from_secs(5);
    c.drain.requeue_slow = Duration::from_secs(30);
    c.lease.identity = "mco-up".into();
    // The lease the shipped Deployment uses: its role grants no other.
    c.lease.namespace = mco_manifests::DEFAULT_NAMESPACE.into();
    c.lease.name = mco_manifests::CONTROLLER.into();
    // The machine config server's certificates, kept as the shipped Deployment keeps them
    // (watched, so a deleted one is back at once). The hosts are those nodes reach the server
    // at, filled in at the start ([`server_hosts`]).
    c.server_certs = Some(mco_controller::server_certs::ServerCerts {
        namespace: mco_manifests::DEFAULT_NAMESPACE.into(),
        serving_secret: mco_manifests::SERVER_TLS_SECRET.into(),
        hostnames: vec![],
        period: mco_controller::server_certs::PERIOD,
    });
    c
}

/// The hosts new nodes reach `mco up`'s machine config server at: loopback, and the listen
/// address when it is a specific one.
pub fn server_hosts(listen: Option<SocketAddr>) -> Vec<String> {
    let mut out = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Some(ip) = listen.map(|l| l.ip()).filter(|ip| !ip.is_unspecified()) {
        out.push(ip.to_string());
    }
    out
}

/// The controller's settings with the server's hosts filled in, and whether it keeps the
/// server's certificates (then the server serves them).
fn with_server_hosts(
    cfg: Option<mco_controller::Config>,
    listen: Option<SocketAddr>,
) -> (
    Option<mco_controller::Config>,
    Option<mco_controller::server_certs::ServerCerts>,
) {
    let Some(mut cfg) = cfg else {
        return (None, None);
    };
    if let Some(sc) = cfg.server_certs.as_mut()
        && sc.hostnames.is_empty()
    {
        sc.hostnames = server_hosts(listen);
    }
    let certs = cfg.server_certs.clone();
    (Some(cfg), certs)
}

/// The controller's identity: the shipped `mco-controller` ServiceAccount, so the controller
/// runs under exactly the roles `mco manifests` installs on a real cluster.
pub fn controller_identity() -> Identity {
    Identity::service_account(
        mco_manifests::DEFAULT_NAMESPACE,
        mco_manifests::CONTROLLER,
        None,
    )
}

/// A node daemon's identity: the shipped `mco-daemon` ServiceAccount with a token bound to its
/// node, as the kubelet would mint for the DaemonSet's pod there.
pub fn daemon_identity(node: &str) -> Identity {
    Identity::service_account(
        mco_manifests::DEFAULT_NAMESPACE,
        mco_manifests::DAEMON,
        Some(node),
    )
}

/// A running cluster: the embedded one, or simulated nodes on an existing one.
pub struct Cluster {
    /// The embedded API server; `None` on an existing cluster.
    server: Option<Arc<ServerHandle>>,
    kubeconfig: PathBuf,
    server_url: String,
    admin: kube::Client,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    data_dir: PathBuf,
    /// The machine config server, or why it is not running.
    mcs: std::result::Result<mco_server::Handle, String>,
}

impl Cluster {
    /// Starts everything; returns once the API server serves and the default objects exist
    /// (nodes join in the background).
    pub async fn start(opts: ClusterOptions) -> Result<Cluster> {
        if let Some(kubeconfig) = opts.kubeconfig.clone() {
            return Cluster::attach(opts, &kubeconfig).await;
        }
        let data_dir = make_data_dir(&opts.data_dir)?;
        if data_dir.join(ATTACHED).exists() {
            return Err(SimError::Invalid(format!(
                "{} holds simulated nodes of an existing cluster (mco up --kubeconfig); use another --data-dir for the embedded one",
                data_dir.display()
            )));
        }
        let mut server_cfg = mco_apiserver::Config::new(data_dir.clone(), opts.listen);
        server_cfg.durability = opts.store_durability;
        let server = Arc::new(Server::start(server_cfg).await?);
        // Shared by the installer, the simulated kubelet and workloads, and the machine config
        // server, which only reads: its writes are the simulation's.
        let admin = server
            .local_client_as(Identity::Admin, user_agent::header(user_agent::SIM).1)
            .await?;
        install(&admin, &opts.crds).await?;
        init_fleet(&data_dir, &opts)?;

        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let (controller, certs) = with_server_hosts(opts.controller.clone(), opts.mcs_listen);
        if let Some(cfg) = controller {
            let client = server
                .local_client_as(
                    controller_identity(),
                    user_agent::header(user_agent::CONTROLLER).1,
                )
                .await?;
            let mut rx = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = rx.wait_for(|s| *s).await;
                };
                if let Err(e) = mco_controller::run(client, cfg, shutdown).await {
                    tracing::error!(error = %e, "controller stopped");
                }
            }));
        }
        if let Some(timing) = opts.workloads {
            tasks.push(tokio::spawn(workload::run(
                admin.clone(),
                timing,
                stop_rx.clone(),
            )));
        }
        // A bootstrap token for new machines' kubelets, as upstream's node-bootstrapper's.
        let bootstrapper = Identity::service_account(
            mco_manifests::DEFAULT_NAMESPACE,
            mco_manifests::NODE_BOOTSTRAPPER,
            None,
        );
        let node_kubeconfig = mco_server::assemble::bootstrap_kubeconfig(
            &format!("https://{}", server.addr()),
            server.ca_pem().as_bytes(),
            &server.mint_token(bootstrapper).await?,
        );
        let (mcs, join, follower) = start_mcs(
            &data_dir,
            opts.mcs_listen,
            admin.clone(),
            Some(node_kubeconfig.into_bytes()),
            certs,
        )
        .await;
        tasks.extend(follower);
        let env = Arc::new(NodeEnv {
            data_dir: data_dir.clone(),
            backend: Backend::Embedded(server.clone()),
            admin: admin.clone(),
            transport: server.local_transport(None),
            reboot: opts.reboot,
            os_update_mode: opts.os_update_mode,
            daemon: opts.daemon.clone(),
            namespace: mco_manifests::DEFAULT_NAMESPACE.into(),
            join,
        });
        tasks.push(tokio::spawn(run_fleet(env, stop_rx)));
        Ok(Cluster {
            kubeconfig: server.kubeconfig_path(),
            server_url: format!("https://{}", server.addr()),
            server: Some(server),
            admin,
            stop,
            tasks,
            data_dir,
            mcs,
        })
    }

    /// Simulated nodes and the controller on the existing cluster of `kubeconfig`: checks
    /// first (nothing is written unless all pass), then the install, then the same fleet as
    /// the embedded cluster's.
    async fn attach(opts: ClusterOptions, kubeconfig: &Path) -> Result<Cluster> {
        let ext = Arc::new(External::connect(kubeconfig).await?);
        if opts.data_dir.join(EMBEDDED_STORE).exists() {
            return Err(SimError::Invalid(format!(
                "{} holds an embedded cluster (mco up without --kubeconfig); use another --data-dir",
                opts.data_dir.display()
            )));
        }
        let namespace = mco_manifests::DEFAULT_NAMESPACE.to_string();
        // The fleet a first start would create, to check its names before anything is
        // written (the data dir included).
        let mut fleet = SpecDir::of(&opts.data_dir).list()?;
        if fleet.is_empty() && !opts.data_dir.join(FLEET_INITIALIZED).exists() {
            fleet = initial_fleet(opts.masters, opts.workers, opts.os);
        }
        ext.preflight(&namespace, &fleet).await?;
        let data_dir = make_data_dir(&opts.data_dir)?;
        ext.install(&mco_manifests::Options::default(), &opts.crds)
            .await?;
        // As the embedded cluster's: the simulation's client, which the machine config server
        // shares for its reads.
        let admin = ext.admin();
        install_defaults(&admin).await?;
        let marker = data_dir.join(ATTACHED);
        std::fs::write(&marker, ext.server()).map_err(|e| SimError::io("writing", &marker, e))?;
        init_fleet(&data_dir, &opts)?;

        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let (controller, certs) = with_server_hosts(opts.controller.clone(), opts.mcs_listen);
        if let Some(cfg) = controller {
            let token = ext
                .token(&namespace, mco_manifests::CONTROLLER, None)
                .await?;
            let client = ext.client_for_token(&token, user_agent::CONTROLLER)?;
            let mut rx = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = rx.wait_for(|s| *s).await;
                };
                if let Err(e) = mco_controller::run(client, cfg, shutdown).await {
                    tracing::error!(error = %e, "controller stopped");
                }
            }));
        }
        tasks.push(tokio::spawn(crate::kubelet::run(
            admin.clone(),
            stop_rx.clone(),
        )));
        // A bootstrap token for new machines' kubelets, as upstream's node-bootstrapper's.
        let node_kubeconfig = match ext
            .token(&namespace, mco_manifests::NODE_BOOTSTRAPPER, None)
            .await
        {
            Ok(token) => Some(ext.kubeconfig_for_token("kubelet", &token).into_bytes()),
            Err(e) => {
                tracing::warn!(error = %e, "no bootstrap kubeconfig for new nodes");
                None
            }
        };
        let (mcs, join, follower) = start_mcs(
            &data_dir,
            opts.mcs_listen,
            admin.clone(),
            node_kubeconfig,
            certs,
        )
        .await;
        tasks.extend(follower);
        let env = Arc::new(NodeEnv {
            data_dir: data_dir.clone(),
            backend: Backend::External {
                cluster: ext.clone(),
                namespace,
            },
            admin: admin.clone(),
            transport: ext.transport()?,
            reboot: opts.reboot,
            os_update_mode: opts.os_update_mode,
            daemon: opts.daemon.clone(),
            namespace: mco_manifests::DEFAULT_NAMESPACE.into(),
            join,
        });
        tasks.push(tokio::spawn(run_fleet(env, stop_rx)));
        Ok(Cluster {
            server: None,
            kubeconfig: ext.kubeconfig().to_path_buf(),
            server_url: ext.server().to_string(),
            admin,
            stop,
            tasks,
            data_dir,
            mcs,
        })
    }

    /// The admin kubeconfig (absolute).
    pub fn kubeconfig(&self) -> PathBuf {
        self.kubeconfig.clone()
    }

    /// The API server's URL.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// Whether this is an existing cluster (`--kubeconfig`), not the embedded one.
    pub fn is_external(&self) -> bool {
        self.server.is_none()
    }

    /// The (absolute) data dir.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// An admin client.
    pub fn admin(&self) -> kube::Client {
        self.admin.clone()
    }

    /// The machine config server's address, or why it is not running.
    pub fn mcs_addr(&self) -> std::result::Result<SocketAddr, &str> {
        self.mcs.as_ref().map(|h| h.addr()).map_err(String::as_str)
    }

    /// Stops nodes, workloads and the controller, then the API server.
    pub async fn shutdown(self) {
        if let Ok(mcs) = self.mcs {
            mcs.shutdown().await;
        }
        let _ = self.stop.send(true);
        for t in self.tasks {
            if tokio::time::timeout(Duration::from_secs(15), t)
                .await
                .is_err()
            {
                tracing::warn!("a cluster task did not stop in time");
            }
        }
        drop(self.admin);
        let Some(server) = self.server else {
            return;
        };
        match Arc::try_unwrap(server) {
            Ok(server) => server.shutdown().await,
            Err(_) => tracing::warn!("API server still referenced; not waiting for it"),
        }
    }
}

/// The directory of the machine config server's CA under the data dir.
pub const MCS_DIR: &str = "mcs";

/// Starts `mco up`'s machine config server on `listen` (none: not started), serving
/// `node_kubeconfig` as the machines' bootstrap kubeconfig, and says how new nodes join:
/// through it, or, without it, from Ignition assembled here. With `certs` (the controller
/// keeps the server's certificates) it serves the controller's Secret, projected as the
/// kubelet projects it, and new nodes trust the CA bundle; the task that follows both is
/// returned. Without, it issues its own from a CA kept in `<data-dir>/mcs`.
async fn start_mcs(
    data_dir: &Path,
    listen: Option<SocketAddr>,
    client: kube::Client,
    node_kubeconfig: Option<Vec<u8>>,
    certs: Option<mco_controller::server_certs::ServerCerts>,
) -> (
    std::result::Result<mco_server::Handle, String>,
    crate::join::Join,
    Option<tokio::task::JoinHandle<()>>,
) {
    use crate::join::Join;
    let Some(listen) = listen else {
        return (
            Err("not asked for".into()),
            Join::Local(node_kubeconfig),
            None,
        );
    };
    let dir = data_dir.join(MCS_DIR);
    let started = async {
        let mut follower = None;
        let cert = match &certs {
            Some(sc) => {
                let projector = crate::mcs_certs::Projector::new(
                    client.clone(),
                    &sc.namespace,
                    &sc.serving_secret,
                    &dir.join("tls"),
                    &dir.join("ca.crt"),
                );
                let mut seen = crate::mcs_certs::Seen::default();
                let files = projector.first(&mut seen).await?;
                follower = Some(tokio::spawn(projector.follow(seen)));
                mco_server::tls::Certificate::Files {
                    cert: files.cert,
                    key: files.key,
                }
            }
            None => mco_server::tls::Certificate::CaDir {
                dir: dir.clone(),
                names: Vec::new(),
            },
        };
        let tls = mco_server::tls::server_config(&cert).map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("listening on {listen}: {e}"))?;
        let source = mco_server::Source::cluster(client)
            .await
            .map_err(|e| e.to_string())?;
        let app = mco_server::App::with_kubeconfig(source, None, node_kubeconfig.clone());
        let handle = mco_server::start(listener, tls, app, mco_server::Limits::default())
            .map_err(|e| e.to_string())?;
        // Nodes connect where the server listens; on a wildcard address, over loopback.
        let mut addr = handle.addr();
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let server = crate::fetch::Server::trusting_file(addr, &dir.join("ca.crt"))
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((handle, server, follower))
    };
    match started.await {
        Ok((handle, server, follower)) => (Ok(handle), Join::Server(server), follower),
        Err(e) => {
            tracing::warn!(error = %e, "machine config server not started; new nodes get their Ignition without it");
            (Err(e), Join::Local(node_kubeconfig), None)
        }
    }
}

/// The shipped namespace, CRDs and RBAC (applied on every start, so a resumed cluster gets
/// this release's roles), then the objects a fresh cluster has; those are left as they are.
async fn install(admin: &kube::Client, crds: &[serde_json::Value]) -> Result<()> {
    apply_shipped(admin, crds).await?;
    install_defaults(admin).await
}

/// The ControllerConfig, default pools and the installer's SSH MachineConfigs of a fresh
/// cluster, created where absent. Each role's base configs (`00-<role>`, `01-<role>-kubelet`,
/// `01-<role>-container-runtime`) are the controller's template controller's, from the
/// ControllerConfig.
async fn install_defaults(admin: &kube::Client) -> Result<()> {
    // A CRD serves once registered; retry the first write until it does.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let cc: ControllerConfig = objects::typed(
        "controllerconfig",
        objects::controller_config(OS_IMAGE_1_2_2),
    )?;
    let ccs: Api<ControllerConfig> = Api::all(admin.clone());
    loop {
        match ensure(&ccs, &cc).await {
            Ok(_) => break,
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "waiting for the CRDs to serve");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
    let pools: Api<MachineConfigPool> = Api::all(admin.clone());
    let mcs: Api<MachineConfig> = Api::all(admin.clone());
    for role in ["master", "worker"] {
        let p: MachineConfigPool = objects::typed("pool", objects::pool(role))?;
        ensure(&pools, &p).await?;
        let mc: MachineConfig = objects::typed("machineconfig", objects::ssh_config(role))?;
        ensure(&mcs, &mc).await?;
    }
    Ok(())
}

/// The install manifests with each CRD of `crds` in place of the shipped one of its name (or
/// added, if none has it).
pub(crate) fn with_crds(
    mut manifests: Vec<mco_manifests::Manifest>,
    crds: &[serde_json::Value],
) -> Vec<mco_manifests::Manifest> {
    for crd in crds {
        let name = crd.pointer("/metadata/name");
        let m = mco_manifests::Manifest {
            part: mco_manifests::Part::Crds,
            object: crd.clone(),
        };
        match manifests.iter_mut().find(|s| {
            s.kind() == Some("CustomResourceDefinition")
                && s.object.pointer("/metadata/name") == name
        }) {
            Some(shipped) => *shipped = m,
            None => manifests.push(m),
        }
    }
    manifests
}

/// Server-side applies the install manifests' namespace, CRDs and RBAC as admin.
async fn apply_shipped(admin: &kube::Client, crds: &[serde_json::Value]) -> Result<()> {
    use mco_manifests::Part;
    let opts = mco_manifests::Options::default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let shipped = mco_manifests::generate(&opts, &[Part::Namespace, Part::Crds, Part::Rbac])?;
    for m in with_crds(shipped, crds) {
        let (api, _, name) = manifest_api(admin, &m)?;
        api.patch(name, &params, &Patch::Apply(&m.object)).await?;
    }
    Ok(())
}

/// The dynamic API for an install manifest's kind (in its namespace, if any), with the kind
/// and the object's name.
pub(crate) fn manifest_api<'m>(
    client: &kube::Client,
    m: &'m mco_manifests::Manifest,
) -> Result<(Api<DynamicObject>, &'m str, &'m str)> {
    let (Some(api_version), Some(kind), Some(name)) = (m.api_version(), m.kind(), m.name()) else {
        return Err(SimError::Invalid(format!(
            "install manifest without apiVersion, kind or name: {}",
            m.object
        )));
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api = match m.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    Ok((api, kind, name))
}

/// Creates the data dir; its absolute path.
fn make_data_dir(dir: &Path) -> Result<PathBuf> {
    // Owner only: it holds the cluster's credentials (the API server checks it on start).
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| SimError::io("creating", dir, e))?;
    dir.canonicalize()
        .map_err(|e| SimError::io("resolving", dir, e))
}

/// Writes the initial fleet's specs on the very first start.
fn init_fleet(data_dir: &Path, opts: &ClusterOptions) -> Result<()> {
    let marker = data_dir.join(FLEET_INITIALIZED);
    if marker.exists() {
        return Ok(());
    }
    let specs = SpecDir::of(data_dir);
    if specs.list()?.is_empty() {
        for s in initial_fleet(opts.masters, opts.workers, opts.os) {
            specs.add(&s)?;
        }
    }
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SimError::io("creating", dir, e))?;
    }
    std::fs::write(&marker, b"").map_err(|e| SimError::io("writing", &marker, e))
}

struct Running {
    spec: NodeSpec,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Starts and stops supervisors as specs come and go.
async fn run_fleet(env: Arc<NodeEnv>, mut stop: watch::Receiver<bool>) {
    let specs = SpecDir::of(&env.data_dir);
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    // Reading every spec and listing every Node twice a second cost a thousand-node fleet more
    // CPU than its rollouts: look again only when the spec directory changed (every add and
    // remove renames or unlinks in it), and in any case every FLEET_RESCAN.
    let mut seen: Option<(Option<std::time::SystemTime>, tokio::time::Instant)> = None;
    loop {
        let stamp = specs.changed_at();
        // A change within the timestamp's granularity of the last read may not have moved it:
        // a directory changed in the last second is read regardless.
        let settled = stamp
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(1));
        let fresh =
            seen.is_some_and(|(at, when)| settled && at == stamp && when.elapsed() < FLEET_RESCAN);
        if !fresh {
            seen = Some((stamp, tokio::time::Instant::now()));
        }
        match if fresh {
            Ok(None)
        } else {
            specs.list().map(Some)
        } {
            Ok(None) => {}
            Ok(Some(list)) => {
                let wanted: BTreeMap<String, NodeSpec> =
                    list.into_iter().map(|s| (s.name.clone(), s)).collect();
                let gone: Vec<String> = running
                    .keys()
                    .filter(|n| !wanted.contains_key(*n))
                    .cloned()
                    .collect();
                for name in gone {
                    if let Some(r) = running.remove(&name) {
                        stop_node(r).await;
                    }
                }
                if let Err(e) = remove_orphans(&env, &wanted).await {
                    tracing::warn!(error = %e, "removing nodes");
                }
                for (name, spec) in wanted {
                    if running.get(&name).is_some_and(|r| r.spec == spec) {
                        continue;
                    }
                    if let Some(r) = running.remove(&name) {
                        stop_node(r).await;
                    }
                    let (tx, rx) = watch::channel(false);
                    tracing::info!(node = %name, pool = %spec.pool, os = %spec.os, "starting node");
                    let task = tokio::spawn(run_node(env.clone(), spec.clone(), rx));
                    running.insert(
                        name,
                        Running {
                            spec,
                            stop: tx,
                            task,
                        },
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading node specs"),
        }
        tokio::select! {
            _ = tokio::time::sleep(FLEET_POLL) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            break;
        }
    }
    let all: Vec<Running> = std::mem::take(&mut running).into_values().collect();
    for r in &all {
        let _ = r.stop.send(true);
    }
    for r in all {
        let _ = r.task.await;
    }
}

async fn stop_node(r: Running) {
    let _ = r.stop.send(true);
    let _ = r.task.await;
}

/// Deletes the Node objects and roots of simulated nodes that have no spec any more.
async fn remove_orphans(env: &NodeEnv, wanted: &BTreeMap<String, NodeSpec>) -> Result<()> {
    let nodes: Api<Node> = Api::all(env.admin.clone());
    let sim = nodes
        .list(&ListParams::default().labels(&format!("{}=true", objects::SIMULATED_LABEL)))
        .await?;
    for n in sim.items {
        let name = n.name_any();
        if !wanted.contains_key(&name) {
            tracing::info!(node = %name, "removing node");
            match nodes.delete(&name, &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let roots = env.data_dir.join("nodes");
    if let Ok(rd) = std::fs::read_dir(&roots) {
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if !wanted.contains_key(&name) {
                let p = entry.path();
                std::fs::remove_dir_all(&p).map_err(|e| SimError::io("removing", &p, e))?;
                let _ = std::fs::remove_file(env.kubeconfig_of(&name));
            }
        }
    }
    Ok(())
}
