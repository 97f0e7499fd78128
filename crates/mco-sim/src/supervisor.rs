//! One simulated node's life: provisioning and first boot, then the daemon, restarted across
//! simulated reboots.
//!
//! The daemon asks for a reboot the way it does on any simulated host: the host layer's
//! `SimRebooter` writes `/run/mco-sim/reboot-requested` under the node root. The supervisor
//! polls that file (which works the same for an in-process daemon and a child process, and
//! survives a daemon crash), stops the daemon, plays the reboot on the disk and the Node object,
//! and starts the daemon again. A reboot keeps the node NotReady for exactly the reboot time
//! (`--reboot-seconds`), its disk work included, as a real host's shutdown and boot are; the
//! node reports Ready again while its daemon starts.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mco_apiserver::ServerHandle;
use mco_daemon::Host;
use mco_daemon::engine::firstboot::{self, FirstbootOutcome};
use mco_daemon::host::fs::FileAttrs;
use mco_daemon::host::paths;
use mco_daemon::host::reboot::{SimRebooter, complete_sim_reboot};
use tokio::sync::watch;

use crate::error::{Result, SimError};
use crate::external::External;
use crate::objects;
use crate::profile::{OsProfile, OsUpdateMode};
use crate::root::NodeRoot;
use crate::spec::NodeSpec;

/// How often the supervisor looks for a reboot request without being woken. Only a safety net:
/// a daemon, in process or not, ends right after asking for a reboot, and its end wakes the
/// supervisor at once. At 200 ms, a fleet of 1,000 idle nodes spent 2.4 % of a rollout's CPU
/// reading absent files, and still 0.6–0.8 % at 2 s.
const POLL: Duration = Duration::from_secs(10);
/// How long an in-process daemon gets to stop on its own before its API access is cut.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long it then gets to notice the cut (one failed call per poll) before it is aborted.
const CUT_GRACE: Duration = Duration::from_secs(10);

/// What an in-process daemon is given.
pub struct DaemonContext {
    /// The node it runs for.
    pub node: String,
    /// mco's namespace, where the daemon records its events.
    pub namespace: String,
    /// The node's root (`Host::sim(root)`).
    pub root: PathBuf,
    /// A client authenticated as the `mco-daemon` ServiceAccount, bound to the node.
    pub client: kube::Client,
    /// A kubeconfig file for the same identity.
    pub kubeconfig: PathBuf,
    /// The cluster's OS update mode.
    pub os_update_mode: OsUpdateMode,
    /// Becomes `true` when the daemon must stop (reboot or shutdown).
    pub shutdown: watch::Receiver<bool>,
}

/// Runs a node's daemon in process until its context's shutdown fires.
pub type DaemonFn =
    Arc<dyn Fn(DaemonContext) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// How each node's daemon runs.
#[derive(Clone)]
pub enum DaemonMode {
    /// A task in this process.
    InProcess(DaemonFn),
    /// `PROGRAM daemon --node NAME --namespace NS --root ROOT --host sim --kubeconfig FILE
    /// --metrics-listen=` per node (metrics off), so a test can SIGKILL one.
    Process {
        /// The `mco` binary.
        program: PathBuf,
    },
    /// No daemon: nodes join and then stay as they are.
    None,
}

impl std::fmt::Debug for DaemonMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DaemonMode::InProcess(_) => f.write_str("InProcess"),
            DaemonMode::Process { program } => write!(f, "Process({})", program.display()),
            DaemonMode::None => f.write_str("None"),
        }
    }
}

/// The API server the nodes join.
#[derive(Clone)]
pub enum Backend {
    /// The embedded one, which mints its own tokens.
    Embedded(Arc<ServerHandle>),
    /// An existing cluster: tokens from the TokenRequest API (`mco up --kubeconfig`).
    External {
        /// The cluster.
        cluster: Arc<External>,
        /// The install namespace.
        namespace: String,
    },
}

/// What every supervisor shares.
pub struct NodeEnv {
    /// The cluster's data dir.
    pub data_dir: PathBuf,
    /// Where node credentials come from.
    pub backend: Backend,
    /// An admin client with the simulation's User-Agent (plays kubelet and the machine-config
    /// server).
    pub admin: kube::Client,
    /// A client without credentials or User-Agent that calls the server in this process
    /// (`ServerHandle::local_transport`); every in-process daemon sends its requests through
    /// it with its own token and the daemon's User-Agent added.
    pub transport: kube::Client,
    /// How long a node is down during a reboot.
    pub reboot: Duration,
    /// Pivot or container.
    pub os_update_mode: OsUpdateMode,
    /// How daemons run.
    pub daemon: DaemonMode,
    /// mco's namespace, where the daemons record their events.
    pub namespace: String,
    /// Where new nodes get their Ignition.
    pub join: crate::join::Join,
}

impl NodeEnv {
    /// `DATA_DIR/nodes/<name>`.
    pub fn root_of(&self, name: &str) -> NodeRoot {
        NodeRoot::at(self.data_dir.join("nodes").join(name))
    }

    /// `DATA_DIR/kubeconfigs/node-<name>`: outside the node root, as a real node keeps its
    /// credentials out of what mco manages.
    pub fn kubeconfig_of(&self, name: &str) -> PathBuf {
        self.data_dir
            .join("kubeconfigs")
            .join(format!("node-{name}"))
    }
}

/// Runs one node until `stop` becomes true.
pub async fn run_node(env: Arc<NodeEnv>, spec: NodeSpec, mut stop: watch::Receiver<bool>) {
    let name = spec.name.clone();
    loop {
        match supervise(&env, &spec, &mut stop).await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(node = %name, error = %e, "node supervisor failed; retrying");
                if sleep_or_stop(&mut stop, Duration::from_secs(2)).await {
                    return;
                }
            }
        }
    }
}

/// Sleeps `d`; returns true if asked to stop meanwhile.
pub(crate) async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

async fn supervise(env: &NodeEnv, spec: &NodeSpec, stop: &mut watch::Receiver<bool>) -> Result<()> {
    let profile = spec.profile()?;
    let root = env.root_of(&spec.name);
    let root_path = root.path().to_path_buf();
    let mode = env.os_update_mode;
    tokio::task::spawn_blocking(move || NodeRoot::at(root_path).ensure(profile, mode).map(drop))
        .await
        .map_err(|e| SimError::Invalid(format!("node root task: {e}")))??;
    let nodes: Api<Node> = Api::all(env.admin.clone());
    let existing = nodes.get_opt(&spec.name).await?;
    if let Some(n) = &existing
        && matches!(env.backend, Backend::External { .. })
        && !crate::external::is_simulated(n)
    {
        // Never touch a node mco did not create.
        return Err(SimError::Invalid(format!(
            "node {} already exists and is not simulated ({}=true); mco leaves it alone: remove this simulated node (mco sim remove-node {})",
            spec.name,
            objects::SIMULATED_LABEL,
            spec.name
        )));
    }
    if existing.is_none() {
        let Some(joined) =
            crate::join::provision(&env.join, &env.admin, &spec.pool, root.path(), stop).await?
        else {
            return Ok(());
        };
        let rendered = joined.config.clone();
        first_boot(spec, &root).await?;
        let node: Node = objects::typed("node", objects::node(spec, &rendered, &joined.image))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        match &joined.source {
            Some(source) => {
                let message = format!("fetched config {rendered} from {source}");
                tracing::info!(
                    node = %spec.name,
                    files = joined.played.files.len(),
                    units = joined.played.units.len(),
                    "{message}"
                );
                record_join(env, &spec.name, &message).await;
            }
            None => tracing::info!(node = %spec.name, config = %rendered, "node registered again"),
        }
    }
    set_ready(env, spec, profile, &root, true).await?;
    let Some(creds) = Credentials::mint(env, &spec.name, stop).await? else {
        return Ok(());
    };
    let mut rebooted = false;
    loop {
        if pending_reboot(&root)? {
            reboot(env, spec, profile, &root, stop).await?;
            rebooted = true;
            continue;
        }
        if *stop.borrow() {
            return Ok(());
        }
        let mut daemon = Daemon::start(env, spec, &root, &creds).await?;
        if std::mem::take(&mut rebooted) {
            // Back from a reboot, the node reports Ready while its daemon starts, as kubelet's
            // status and the daemon's pod come up together on a host.
            set_ready(env, spec, profile, &root, true).await?;
        }
        let reason = loop {
            tokio::select! {
                _ = stop.changed() => break Wake::Stop,
                // An in-process daemon returns right after asking for a reboot: take it then,
                // not at the next poll (a rollout pays that wait once per node).
                _ = daemon.ended() => {
                    if pending_reboot(&root)? {
                        break Wake::Reboot;
                    }
                    if let Some(status) = daemon.exited() {
                        break Wake::Exited(status);
                    }
                }
                _ = tokio::time::sleep(POLL) => {
                    if pending_reboot(&root)? {
                        break Wake::Reboot;
                    }
                    if let Some(status) = daemon.exited() {
                        break Wake::Exited(status);
                    }
                }
            }
        };
        daemon.stop().await;
        match reason {
            Wake::Stop => return Ok(()),
            Wake::Reboot => {}
            Wake::Exited(status) => {
                tracing::warn!(node = %spec.name, %status, "daemon exited; restarting it");
                if sleep_or_stop(stop, Duration::from_secs(1)).await {
                    return Ok(());
                }
            }
        }
    }
}

enum Wake {
    Stop,
    Reboot,
    Exited(String),
}

/// A node daemon's credentials: one token per supervisor, not per daemon start, since each
/// token is a durable write and a large fleet restarts its daemons at every reboot.
pub(crate) struct Credentials {
    /// `DATA_DIR/kubeconfigs/node-<name>`, for a daemon in its own process.
    kubeconfig: PathBuf,
    /// The same token as an `Authorization` header, for a daemon in this process.
    bearer: Option<http::HeaderValue>,
}

impl Credentials {
    /// `None` if asked to stop while waiting for them.
    async fn mint(
        env: &NodeEnv,
        node: &str,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<Credentials>> {
        let kubeconfig = env.kubeconfig_of(node);
        if matches!(env.daemon, DaemonMode::None) {
            return Ok(Some(Credentials {
                kubeconfig,
                bearer: None,
            }));
        }
        let id = crate::cluster::daemon_identity(node);
        let (token, doc) = match &env.backend {
            Backend::Embedded(server) => {
                let token = server.mint_token(id.clone()).await?;
                let doc = server.kubeconfig_for_token(&id.user_name(), &token);
                (token, doc)
            }
            Backend::External { cluster, namespace } => {
                let Some(token) = cluster.daemon_token(namespace, node, stop).await? else {
                    return Ok(None);
                };
                let doc = cluster.kubeconfig_for_token(&id.user_name(), &token);
                (token, doc)
            }
        };
        write_private(&kubeconfig, &doc)?;
        let bearer = http::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| SimError::Invalid(format!("node token: {e}")))?;
        Ok(Some(Credentials {
            kubeconfig,
            bearer: Some(bearer),
        }))
    }
}

/// The token is a credential: the file is readable by its owner only.
fn write_private(path: &std::path::Path, doc: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SimError::io("creating", dir, e))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| SimError::io("writing", path, e))?;
    // `mode` applies only to a new file: one an older version left open to others is closed.
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| SimError::io("writing", path, e))?;
    f.write_all(doc.as_bytes())
        .map_err(|e| SimError::io("writing", path, e))
}

/// A node daemon's client over the shared transport: its own token, the daemon's User-Agent,
/// and every request fails once `cut` is set.
fn cuttable_client(
    env: &NodeEnv,
    creds: &Credentials,
    cut: Arc<AtomicBool>,
) -> Result<kube::Client> {
    let bearer = creds
        .bearer
        .clone()
        .ok_or_else(|| SimError::Invalid("no in-process daemon credentials".into()))?;
    let transport = env.transport.clone();
    let (ua_name, ua) = mco_api::user_agent::header(mco_api::user_agent::DAEMON);
    let svc = tower::service_fn(move |mut req: http::Request<kube::client::Body>| {
        req.headers_mut()
            .insert(http::header::AUTHORIZATION, bearer.clone());
        req.headers_mut().insert(ua_name.clone(), ua.clone());
        let transport = transport.clone();
        let call = async move { transport.send(req).await.map_err(tower::BoxError::from) };
        fail_if_cut(cut.load(Ordering::Relaxed), call)
    });
    Ok(kube::Client::new(svc, "default"))
}

async fn fail_if_cut<T>(
    cut: bool,
    call: impl Future<Output = Result<T, tower::BoxError>>,
) -> Result<T, tower::BoxError> {
    if cut {
        return Err("the node daemon is stopping: its API access is cut".into());
    }
    call.await
}

/// First boot: the daemon's `firstboot-complete-machineconfig` over the encapsulated config
/// Ignition wrote, and the reboot that follows.
async fn first_boot(spec: &NodeSpec, root: &NodeRoot) -> Result<()> {
    let skip_os = spec.skip_firstboot_os;
    let path = root.path().to_path_buf();
    let node = spec.name.clone();
    let outcome = tokio::task::spawn_blocking(move || -> Result<FirstbootOutcome> {
        let host = Host::sim(&path)?;
        // Seed 000: a 1.2 daemon that keyed OS management off `ID` saw `ID="uos"` and skipped
        // the OS; hiding the ostree marker during first boot reproduces exactly that decision.
        let had_marker = host.fs.exists(paths::OSTREE_BOOTED)?;
        if skip_os && had_marker {
            host.fs.remove_file(paths::OSTREE_BOOTED)?;
        }
        let engine = mco_daemon::engine::Engine::new(host)?;
        let r = firstboot::complete_machineconfig(&engine, None);
        if skip_os && had_marker {
            engine
                .host
                .fs
                .write_atomic(paths::OSTREE_BOOTED, b"", &FileAttrs::mode(0o644))?;
        }
        Ok(r?)
    })
    .await
    .map_err(|e| SimError::Invalid(format!("first boot task: {e}")))??;
    tracing::info!(node = %node, ?outcome, "first boot");
    if pending_reboot(root)? {
        boot(root)?;
    }
    Ok(())
}

/// The join as a Normal Event on the Node (`kubectl describe node` shows it). Best effort: an
/// Event is a record, not a step of the join.
async fn record_join(env: &NodeEnv, node: &str, message: &str) {
    use k8s_openapi::api::core::v1::Event;
    let now = objects::now_rfc3339();
    let event = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{node}.")},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": "Provisioned",
        "message": message,
        "type": "Normal",
        "source": {"component": "ignition", "host": node},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let events: Api<Event> = Api::namespaced(env.admin.clone(), "default");
    let r = match serde_json::from_value::<Event>(event) {
        Ok(e) => events.create(&PostParams::default(), &e).await.map(drop),
        Err(e) => {
            tracing::debug!(error = %e, "join event");
            return;
        }
    };
    if let Err(e) = r {
        tracing::debug!(node, error = %e, "could not record the join event");
    }
}

fn pending_reboot(root: &NodeRoot) -> Result<bool> {
    Ok(SimRebooter::pending(&root.fs()?)?.is_some())
}

/// What a reboot does to the disk: staged deployment booted, `/run` fresh, new boot id.
fn boot(root: &NodeRoot) -> Result<String> {
    complete_sim_reboot(&root.fs()?)?;
    root.boot_id()
}

/// A reboot, leaving the node NotReady: it reports Ready again as its daemon starts.
async fn reboot(
    env: &NodeEnv,
    spec: &NodeSpec,
    profile: OsProfile,
    root: &NodeRoot,
    stop: &mut watch::Receiver<bool>,
) -> Result<()> {
    let rationale = SimRebooter::pending(&root.fs()?)?
        .map(|r| r.rationale)
        .unwrap_or_default();
    tracing::info!(node = %spec.name, %rationale, "rebooting");
    // The node is down for `env.reboot` in all: its NotReady write and the disk's part of the
    // reboot happen within that time, as a real host's shutdown and boot do, not after it.
    let up_at = tokio::time::Instant::now() + env.reboot;
    set_ready(env, spec, profile, root, false).await?;
    let id = boot(root)?;
    sleep_or_stop(
        stop,
        up_at.saturating_duration_since(tokio::time::Instant::now()),
    )
    .await;
    tracing::info!(node = %spec.name, boot_id = %id, "rebooted");
    Ok(())
}

async fn set_ready(
    env: &NodeEnv,
    spec: &NodeSpec,
    profile: OsProfile,
    root: &NodeRoot,
    ready: bool,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(env.admin.clone());
    let status = objects::node_status(
        ready,
        &profile.pretty_name(),
        &root.boot_id()?,
        &objects::now_rfc3339(),
    );
    nodes
        .patch_status(&spec.name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// A running daemon.
enum Daemon {
    Task {
        stop: watch::Sender<bool>,
        /// Set to fail every API call of the daemon's client.
        cut: Arc<AtomicBool>,
        task: tokio::task::JoinHandle<Result<(), String>>,
        /// Becomes `true` when the task's daemon has returned.
        done: watch::Receiver<bool>,
    },
    Child(tokio::process::Child),
    None,
}

impl Daemon {
    async fn start(
        env: &NodeEnv,
        spec: &NodeSpec,
        root: &NodeRoot,
        creds: &Credentials,
    ) -> Result<Daemon> {
        let kubeconfig = creds.kubeconfig.clone();
        match &env.daemon {
            DaemonMode::None => Ok(Daemon::None),
            DaemonMode::InProcess(run) => {
                let cut = Arc::new(AtomicBool::new(false));
                let client = cuttable_client(env, creds, cut.clone())?;
                let (tx, rx) = watch::channel(false);
                let ctx = DaemonContext {
                    node: spec.name.clone(),
                    namespace: env.namespace.clone(),
                    root: root.path().to_path_buf(),
                    client,
                    kubeconfig,
                    os_update_mode: env.os_update_mode,
                    shutdown: rx,
                };
                let (done_tx, done) = watch::channel(false);
                let daemon = run(ctx);
                let task = tokio::spawn(async move {
                    let r = daemon.await;
                    let _ = done_tx.send(true);
                    r
                });
                Ok(Daemon::Task {
                    stop: tx,
                    cut,
                    task,
                    done,
                })
            }
            DaemonMode::Process { program } => {
                let log_dir = env.data_dir.join("logs");
                std::fs::create_dir_all(&log_dir)
                    .map_err(|e| SimError::io("creating", &log_dir, e))?;
                let log_path = log_dir.join(format!("daemon-{}.log", spec.name));
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log_path)
                    .map_err(|e| SimError::io("opening", &log_path, e))?;
                let err = log
                    .try_clone()
                    .map_err(|e| SimError::io("opening", &log_path, e))?;
                let child = tokio::process::Command::new(program)
                    .arg("daemon")
                    .arg("--node")
                    .arg(&spec.name)
                    .arg("--namespace")
                    .arg(&env.namespace)
                    .arg("--root")
                    .arg(root.path())
                    .arg("--host")
                    .arg("sim")
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    // Every node shares the loopback: one fixed metrics port would let only
                    // the first daemon start.
                    .arg("--metrics-listen=")
                    .stdin(std::process::Stdio::null())
                    .stdout(log)
                    .stderr(err)
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| SimError::io("spawning", program, e))?;
                Ok(Daemon::Child(child))
            }
        }
    }

    /// Resolves once the daemon has ended on its own; never for no daemon. Cancel safe.
    async fn ended(&mut self) {
        match self {
            Daemon::Task { done, .. } => {
                let _ = done.wait_for(|d| *d).await;
            }
            Daemon::Child(child) => {
                let _ = child.wait().await;
            }
            Daemon::None => std::future::pending().await,
        }
    }

    /// `Some(how)` once the daemon has ended on its own.
    fn exited(&mut self) -> Option<String> {
        match self {
            Daemon::Task { task, done, .. } if *done.borrow() || task.is_finished() => {
                Some("task ended".into())
            }
            Daemon::Child(child) => match child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(e) => Some(e.to_string()),
            },
            _ => None,
        }
    }

    /// Stops it: a reboot does not wait for anyone, so a child is killed; a task gets a short
    /// grace to notice its shutdown signal.
    ///
    /// A task busy in an update (say, waiting for a drain a budget blocks) does not look at
    /// its shutdown signal, and its engine runs on a blocking thread that aborting the task
    /// would leave behind, still calling into the runtime while it shuts down. So after the
    /// grace its API access is cut: every call fails at once, the update returns, and the
    /// task ends on its own with no thread left over.
    async fn stop(self) {
        match self {
            Daemon::Task {
                stop,
                cut,
                mut task,
                ..
            } => {
                let _ = stop.send(true);
                let ended = match tokio::time::timeout(STOP_GRACE, &mut task).await {
                    Ok(r) => Some(r),
                    Err(_) => {
                        cut.store(true, Ordering::Relaxed);
                        tokio::time::timeout(CUT_GRACE, &mut task).await.ok()
                    }
                };
                match ended {
                    Some(Ok(Err(e))) => tracing::debug!(error = %e, "daemon stopped with an error"),
                    Some(_) => {}
                    None => {
                        tracing::warn!("daemon did not stop after its API access was cut");
                        task.abort();
                    }
                }
            }
            Daemon::Child(mut child) => {
                let _ = child.kill().await;
            }
            Daemon::None => {}
        }
    }
}
