//! A file MachineConfig rolled out by `mco up` to a large simulated worker pool.
//!
//! `mco up` runs as a child process in a scratch directory, so its peak RSS (`VmHWM`) is the
//! whole embedded cluster's: API server, controller, every node's daemon and the workloads.
//! The rollout is timed from the MachineConfig's create to the worker pool's `Updated=True`
//! with every machine on the new config, and compared with the ideal: the number of waves
//! `maxUnavailable` allows times one node's reboot.

use std::fmt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use mco_api::{MachineConfig, MachineConfigNode, MachineConfigPool};
use serde_json::json;

use crate::Error;
use crate::phases::{NodeFields, NodeFieldsList, Phases, Recorder};
use crate::procfs::{self, Mem};
use crate::stats::{RssTrace, mib};
use crate::support::{client_from_kubeconfig, poll, scratch_dir, typed};

/// Goal: efficiency (ideal / actual) with reboots that take a while.
pub const GOAL_EFFICIENCY: f64 = 0.8;
/// Goal: the whole rollout when reboots are instant.
pub const GOAL_INSTANT_SECS: f64 = 120.0;
/// Goal: peak RSS of the whole `mco up` process.
pub const GOAL_RSS_KIB: u64 = 1536 * 1024;

/// How often `mco up`'s RSS is sampled through the rollout.
pub const RSS_EVERY: Duration = Duration::from_millis(100);

const BENCH_MC: &str = "99-worker-bench-file";

/// The report's line for a run without the Node watch ([`RolloutOpts::phases`] off).
pub const PHASES_OFF: &str = "phases: off (--no-phases): no Node watch, no per-update table";

#[derive(Debug, Clone)]
pub struct RolloutOpts {
    /// The `mco` binary whose `up` subcommand is measured.
    pub mco_bin: PathBuf,
    pub masters: usize,
    pub workers: usize,
    pub reboot_seconds: f64,
    /// The worker pool's `maxUnavailable`, as a percentage.
    pub max_unavailable_percent: u32,
    /// Bound of each phase (join, rollout).
    pub max: Duration,
    pub work_dir: PathBuf,
    /// Run on the existing cluster of this admin kubeconfig (`mco up --kubeconfig`) instead of
    /// the embedded API server; the bench then creates the default workloads there, which the
    /// cluster's own controllers and scheduler run.
    pub kubeconfig: Option<PathBuf>,
    /// Run the controller as its own `mco controller` process (`mco up --no-controller`), with
    /// the embedded cluster's timings, so its CPU is measured apart.
    pub controller_process: bool,
    /// Before the rollout, count the requests of an idle window this long: the cluster's own
    /// background traffic (heartbeats, leases, a real cluster's controllers), subtracted at
    /// that rate from the rollout's count.
    pub idle: Duration,
    /// Whether `mco up` serves the dashboard, and whether a page follows it.
    pub dashboard: Dashboard,
    /// The process group of the cluster's control plane (`scripts/real-kube`'s), whose
    /// kube-apiserver, etcd, controller manager and scheduler CPU is reported; `None`: none is
    /// (the embedded server), whatever else runs on the machine.
    pub control_plane_group: Option<u32>,
    /// Follow every Node with one watch to time each worker update's phases ([`Phases`]);
    /// `false` runs the rollout without that watch, to see what it costs the rollout.
    pub phases: bool,
}

/// What a run does with the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dashboard {
    /// `--dashboard-listen off`.
    Off,
    /// Served to no page: the run measures its watches and view alone.
    Served,
    /// Served and followed by a headless Chromium, which times each batch of updates.
    Watched,
}

impl Default for RolloutOpts {
    fn default() -> Self {
        RolloutOpts {
            mco_bin: PathBuf::from("target/release/mco"),
            masters: 3,
            workers: 1000,
            reboot_seconds: 1.0,
            max_unavailable_percent: 10,
            max: Duration::from_secs(900),
            work_dir: std::env::temp_dir(),
            kubeconfig: None,
            controller_process: false,
            idle: Duration::ZERO,
            dashboard: Dashboard::Off,
            control_plane_group: None,
            phases: true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RolloutReport {
    pub opts: RolloutOpts,
    /// From `mco up`'s start to every node Done on its pool's config and every MachineConfigNode made.
    pub join: Duration,
    /// From the MachineConfig's create to the worker pool Updated.
    pub rollout: Duration,
    /// How many nodes may update at once.
    pub max_unavailable: usize,
    /// The most unavailable machines the worker pool reported while rolling out.
    pub peak_unavailable: usize,
    /// From the MachineConfig's create to the pool's new target (the render).
    pub rendered: Duration,
    /// When the pool first counted each tenth of its machines updated, from the create: the
    /// gaps show whether time is lost at the start, per wave, or at the end.
    pub tenths: Vec<Duration>,
    /// The `mco up` process after the rollout.
    pub mem: Mem,
    /// `mco up`'s RSS through the rollout, sampled every [`RSS_EVERY`].
    pub rss_during: Option<RssTrace>,
    /// CPU time `mco up` spent during the rollout: on a saturated machine the wall time follows
    /// it, and it moves far less from run to run, so it settles A/B comparisons the wall time
    /// cannot.
    pub cpu: Duration,
    /// `/proc/loadavg` when the rollout ended.
    pub load: String,
    /// The machine's CPU during the rollout.
    pub machine: procfs::MachineCpu,
    /// API requests served during the rollout (the server's `apiserver_request_total`): a
    /// figure the machine's load does not move.
    pub requests: u64,
    /// The most frequent kinds of those requests (verb, resource, subresource, code), most
    /// first: where to look for requests to save.
    pub top_requests: Vec<(String, u64)>,
    /// Of `requests`, those a real cluster's own components made (kube-controller-manager,
    /// the scheduler, their leader election), told apart by the API Priority and Fairness
    /// flow schema that served them: 0 on the embedded server, which has none.
    pub component_requests: u64,
    /// Requests per second of the idle window before the rollout (`RolloutOpts::idle`),
    /// components' left out.
    pub idle_rate: Option<f64>,
    /// What the idle window's requests were: its most frequent kinds, then flow schemas.
    pub idle_top: Vec<(String, u64)>,
    /// CPU time of the `mco controller` process during the rollout (`controller_process`).
    pub controller_cpu: Option<Duration>,
    /// CPU time each control plane process (kube-apiserver, etcd, controller manager,
    /// scheduler) spent during the rollout: empty on the embedded server.
    pub control_plane_cpu: Vec<(&'static str, Duration)>,
    /// What the dashboard's page measured while following the rollout (`dashboard`).
    pub page: Option<crate::dashboard::PageStats>,
    /// Where each worker update's time went, from a watch of every Node; `None` when
    /// `opts.phases` is off.
    pub phases: Option<Phases>,
}

impl RolloutReport {
    /// Which API server it ran on.
    pub fn server(&self) -> &'static str {
        if self.opts.kubeconfig.is_some() {
            "kube-apiserver"
        } else {
            "embedded"
        }
    }

    /// Requests per worker update, less the cluster components' and less the idle window's
    /// rate over the rollout's time: what the rollout cost mco.
    pub fn net_requests_per_update(&self) -> f64 {
        let background = self.idle_rate.unwrap_or(0.0) * self.rollout.as_secs_f64();
        let own = self.requests.saturating_sub(self.component_requests) as f64;
        (own - background).max(0.0) / self.opts.workers.max(1) as f64
    }
}

/// Nodes `maxUnavailable: P%` lets update at once: the percentage of the pool rounded down,
/// at least one (upstream's rule).
pub fn max_unavailable(nodes: usize, percent: u32) -> usize {
    (nodes * percent as usize / 100).max(1)
}

/// The ideal rollout: every wave takes exactly one reboot and nothing else.
pub fn ideal(nodes: usize, max_unavailable: usize, reboot: Duration) -> Duration {
    let waves = nodes.div_ceil(max_unavailable.max(1));
    reboot * waves as u32
}

impl RolloutReport {
    pub fn ideal(&self) -> Duration {
        ideal(
            self.opts.workers,
            self.max_unavailable,
            Duration::from_secs_f64(self.opts.reboot_seconds),
        )
    }

    /// Ideal over actual; `None` when the ideal is zero (instant reboots).
    pub fn efficiency(&self) -> Option<f64> {
        let ideal = self.ideal();
        (!ideal.is_zero()).then(|| ideal.as_secs_f64() / self.rollout.as_secs_f64())
    }

    /// Whether the pool never reported more machines unavailable than `maxUnavailable` allows.
    pub fn limit_held(&self) -> bool {
        self.peak_unavailable <= self.max_unavailable
    }

    /// Fast and small enough, and within the limit: a rollout that broke `maxUnavailable`
    /// would otherwise look faster than an honest one.
    pub fn goal_met(&self) -> bool {
        let time_ok = match self.efficiency() {
            Some(e) => e >= GOAL_EFFICIENCY,
            None => self.rollout.as_secs_f64() < GOAL_INSTANT_SECS,
        };
        time_ok && self.mem.hwm_kib <= GOAL_RSS_KIB && self.limit_held()
    }
}

impl fmt::Display for RolloutReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.opts;
        writeln!(
            f,
            "mco up: {} masters + {} workers, --reboot-seconds {}, worker maxUnavailable {}% ({} nodes)",
            o.masters, o.workers, o.reboot_seconds, o.max_unavailable_percent, self.max_unavailable
        )?;
        writeln!(
            f,
            "  join (start to all nodes Done, every MachineConfigNode made): {:.1} s",
            self.join.as_secs_f64()
        )?;
        writeln!(
            f,
            "  rollout (file MC to worker pool Updated): {:.1} s; ideal {:.1} s ({} waves x {} s)",
            self.rollout.as_secs_f64(),
            self.ideal().as_secs_f64(),
            o.workers.div_ceil(self.max_unavailable.max(1)),
            o.reboot_seconds
        )?;
        match self.efficiency() {
            Some(e) => writeln!(
                f,
                "  efficiency (ideal/actual): {e:.2} (goal >= {GOAL_EFFICIENCY})"
            )?,
            None => writeln!(
                f,
                "  instant reboots: {:.1} s (goal < {GOAL_INSTANT_SECS} s)",
                self.rollout.as_secs_f64()
            )?,
        }
        let tenths: Vec<String> = self
            .tenths
            .iter()
            .map(|t| format!("{:.1}", t.as_secs_f64()))
            .collect();
        writeln!(
            f,
            "  new target after {:.2} s; each tenth of the pool updated at (s): {}",
            self.rendered.as_secs_f64(),
            tenths.join(" ")
        )?;
        writeln!(
            f,
            "  peak unavailable workers seen: {} (limit {}{})",
            self.peak_unavailable,
            self.max_unavailable,
            if self.limit_held() { "" } else { ", BROKEN" }
        )?;
        match &self.phases {
            Some(p) => writeln!(f, "{p}")?,
            None if !o.phases => writeln!(f, "  {PHASES_OFF}")?,
            None => {}
        }
        writeln!(
            f,
            "  mco up RSS: {} now, peak (VmHWM) {} (goal <= {})",
            mib(self.mem.rss_kib),
            mib(self.mem.hwm_kib),
            mib(GOAL_RSS_KIB)
        )?;
        if let Some(t) = &self.rss_during {
            writeln!(f, "  mco up RSS through the rollout: {t}")?;
        }
        writeln!(
            f,
            "  mco up CPU during the rollout: {:.1} s ({:.1} ms per worker update)",
            self.cpu.as_secs_f64(),
            self.cpu.as_secs_f64() * 1000.0 / o.workers.max(1) as f64
        )?;
        if let Some(c) = self.controller_cpu {
            writeln!(
                f,
                "  mco controller CPU during the rollout: {:.1} s ({:.1} ms per worker update)",
                c.as_secs_f64(),
                c.as_secs_f64() * 1000.0 / o.workers.max(1) as f64
            )?;
        }
        writeln!(
            f,
            "  API requests during the rollout ({}): {} ({:.1} per worker update)",
            self.server(),
            self.requests,
            self.requests as f64 / o.workers.max(1) as f64
        )?;
        if self.component_requests > 0 {
            writeln!(
                f,
                "  of which the cluster's own components (by APF flow schema): {} ({:.1} per worker update)",
                self.component_requests,
                self.component_requests as f64 / o.workers.max(1) as f64
            )?;
        }
        if let Some(r) = self.idle_rate {
            writeln!(
                f,
                "  idle before the rollout: {r:.1} requests/s; net of it, {:.1} per worker update",
                self.net_requests_per_update()
            )?;
            let secs = self.opts.idle.as_secs_f64().max(f64::MIN_POSITIVE);
            for (kind, n) in &self.idle_top {
                writeln!(f, "    {:>6.1} /s idle  {kind}", *n as f64 / secs)?;
            }
        }
        for (kind, n) in &self.top_requests {
            writeln!(
                f,
                "    {:>6.1} per update  {kind}",
                *n as f64 / o.workers.max(1) as f64
            )?;
        }
        writeln!(f, "  load average at the end: {}", self.load)?;
        if let Some(line) = machine_line(&self.machine, self.cpu) {
            writeln!(f, "  {line}")?;
        }
        if !self.control_plane_cpu.is_empty() {
            let each: Vec<String> = self
                .control_plane_cpu
                .iter()
                .map(|(n, d)| format!("{n} {:.1} s", d.as_secs_f64()))
                .collect();
            writeln!(
                f,
                "  control plane CPU during the rollout: {}",
                each.join(", ")
            )?;
        }
        write!(
            f,
            "  goal: {}",
            if self.goal_met() { "met" } else { "NOT met" }
        )
    }
}

/// Stops the child with SIGINT (a clean `mco up` shutdown), SIGKILL if it lingers.
struct UpProcess(Child);

impl Drop for UpProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn annotation<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Done on `config` (any config when `None`), Ready and schedulable.
fn settled(n: &Node, config: Option<&str>) -> bool {
    let current = annotation(n, mco_api::constants::annotations::CURRENT_CONFIG);
    let desired = annotation(n, mco_api::constants::annotations::DESIRED_CONFIG);
    let state = annotation(n, mco_api::constants::annotations::STATE);
    let drain_asked = annotation(n, mco_api::constants::annotations::DESIRED_DRAIN);
    let drain_done = annotation(n, mco_api::constants::annotations::LAST_APPLIED_DRAIN);
    current.is_some()
        && current == desired
        // A node's first boot ends with an uncordon request: a fleet still waiting for those
        // answers is not settled, and timing a rollout from then would time that backlog too.
        && drain_asked == drain_done
        && config.is_none_or(|c| current == Some(c))
        && state == Some(mco_api::constants::states::DONE)
        && ready(n)
        && !n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
}

fn pool_updated_on(p: &MachineConfigPool, target: &str, machines: usize) -> bool {
    let Some(st) = p.status.as_ref() else {
        return false;
    };
    st.is_true("Updated")
        && st.configuration.as_ref().map(|c| c.name.as_str()) == Some(target)
        && st.machine_count == machines as i32
        && st.updated_machine_count == machines as i32
}

/// A watch of the worker pool, resumed where it ended when the server closes it.
struct PoolWatch<'a> {
    api: &'a Api<MachineConfigPool>,
    version: String,
    events: futures::stream::BoxStream<'a, kube::Result<WatchEvent<MachineConfigPool>>>,
}

impl<'a> PoolWatch<'a> {
    fn params() -> WatchParams {
        WatchParams::default().fields("metadata.name=worker")
    }

    /// From the pool as it is now.
    async fn start(api: &'a Api<MachineConfigPool>) -> Result<PoolWatch<'a>, Error> {
        let pool = api.get("worker").await?;
        let version = pool.resource_version().unwrap_or_default();
        let events = api.watch(&Self::params(), &version).await?.boxed();
        Ok(PoolWatch {
            api,
            version,
            events,
        })
    }

    /// The pool's next version; `None` once `deadline` has passed.
    async fn next(&mut self, deadline: Instant) -> Result<Option<MachineConfigPool>, Error> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(ev) = tokio::time::timeout(left, self.events.next()).await else {
                return Ok(None);
            };
            match ev {
                Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p))) => {
                    self.version = p.resource_version().unwrap_or_default();
                    return Ok(Some(p));
                }
                Some(Ok(WatchEvent::Bookmark(b))) => self.version = b.metadata.resource_version,
                Some(Ok(WatchEvent::Deleted(_))) => {
                    return Err(Error::Bench("the worker pool was deleted".into()));
                }
                // The version fell out of the server's window: start again from the pool as
                // it is now, as a watcher relists.
                Some(Ok(WatchEvent::Error(e))) if e.code == 410 => {
                    let pool = self.api.get("worker").await?;
                    self.version = pool.resource_version().unwrap_or_default();
                    self.events = self
                        .api
                        .watch(&Self::params(), &self.version)
                        .await?
                        .boxed();
                    return Ok(Some(pool));
                }
                Some(Ok(WatchEvent::Error(e))) => {
                    return Err(Error::Bench(format!("watching the worker pool: {e}")));
                }
                Some(Err(e)) => return Err(e.into()),
                // The server ended the watch (its timeout): resume.
                None => {
                    self.events = self
                        .api
                        .watch(&Self::params(), &self.version)
                        .await?
                        .boxed();
                }
            }
        }
    }
}

/// Every Node followed by one watch from before the MachineConfig's create, each version
/// noted in a [`Recorder`] as it arrives. Its list and its watch request are made before the
/// rollout's requests are counted, so none of its own is counted (on kube-apiserver a watch
/// counts when it ends: one resumed after the server's timeout, 290 s, would be one). It reads
/// only the fields the phases need, on a task of its own so that the pool's watch never waits
/// for it.
struct NodeWatch {
    stop: tokio::sync::oneshot::Sender<String>,
    task: tokio::task::JoinHandle<Result<Recorder, Error>>,
}

/// How long the node watch may take, once the pool is Updated, to deliver the last `Done`s.
const NODE_WATCH_TAIL: Duration = Duration::from_secs(10);

impl NodeWatch {
    fn request() -> kube::core::Request {
        kube::core::Request::new("/api/v1/nodes")
    }

    async fn list(client: &kube::Client) -> Result<NodeFieldsList, Error> {
        let req = Self::request()
            .list(&ListParams::default())
            .map_err(kube::Error::BuildRequest)?;
        Ok(client.request(req).await?)
    }

    async fn watch(
        client: &kube::Client,
        version: &str,
    ) -> Result<futures::stream::BoxStream<'static, kube::Result<WatchEvent<NodeFields>>>, Error>
    {
        let req = Self::request()
            .watch(&WatchParams::default(), version)
            .map_err(kube::Error::BuildRequest)?;
        Ok(client.request_events::<NodeFields>(req).await?.boxed())
    }

    /// From every Node as it is now; the watch is open when this returns.
    async fn start(client: kube::Client) -> Result<NodeWatch, Error> {
        let origin = Instant::now();
        let mut rec = Recorder::default();
        let list = Self::list(&client).await?;
        for n in &list.items {
            rec.observe(n.name(), n.state(), origin.elapsed());
        }
        let mut version = list.metadata.resource_version.unwrap_or_default();
        let mut events = Self::watch(&client, &version).await?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<String>();
        let task = tokio::spawn(async move {
            // Once told the target, only until every node given it is seen Done.
            let mut target: Option<(String, Instant)> = None;
            loop {
                let ev = match &target {
                    Some((t, _)) if rec.complete(t) => return Ok(rec),
                    Some((_, deadline)) => {
                        match tokio::time::timeout_at((*deadline).into(), events.next()).await {
                            Ok(ev) => ev,
                            Err(_) => return Ok(rec),
                        }
                    }
                    None => tokio::select! {
                        t = &mut stopped => {
                            let t = t.map_err(|_| Error::Bench("the node watch was dropped".into()))?;
                            target = Some((t, Instant::now() + NODE_WATCH_TAIL));
                            continue;
                        }
                        ev = events.next() => ev,
                    },
                };
                match ev {
                    Some(Ok(WatchEvent::Added(n) | WatchEvent::Modified(n))) => {
                        version = n.resource_version().unwrap_or_default().to_string();
                        rec.observe(n.name(), n.state(), origin.elapsed());
                    }
                    Some(Ok(WatchEvent::Deleted(n))) => {
                        version = n.resource_version().unwrap_or_default().to_string();
                        rec.forget(n.name());
                    }
                    Some(Ok(WatchEvent::Bookmark(b))) => version = b.metadata.resource_version,
                    // The version fell out of the server's window: every node as it is now,
                    // its steps since stamped late, as a watcher relists.
                    Some(Ok(WatchEvent::Error(e))) if e.code == 410 => {
                        let list = Self::list(&client).await?;
                        for n in &list.items {
                            rec.observe(n.name(), n.state(), origin.elapsed());
                        }
                        version = list.metadata.resource_version.unwrap_or_default();
                        events = Self::watch(&client, &version).await?;
                    }
                    Some(Ok(WatchEvent::Error(e))) => {
                        return Err(Error::Bench(format!("watching the nodes: {e}")));
                    }
                    Some(Err(e)) => return Err(e.into()),
                    // The server ended the watch (its timeout): resume.
                    None => events = Self::watch(&client, &version).await?,
                }
            }
        });
        Ok(NodeWatch { stop, task })
    }

    /// The steps seen, once every node given `target` is seen Done on it (or after
    /// [`NODE_WATCH_TAIL`]).
    async fn finish(self, target: &str) -> Result<Recorder, Error> {
        // An ended task has its error to tell.
        let _ = self.stop.send(target.to_string());
        self.task
            .await
            .map_err(|e| Error::Bench(format!("the node watch: {e}")))?
    }
}

/// Runs the benchmark once.
pub async fn run(opts: RolloutOpts) -> Result<RolloutReport, Error> {
    let dir = scratch_dir(&opts.work_dir, "rollout")?;
    let data = dir.path().join(".mco");
    let log_path = dir.path().join("up.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io(log_path.display(), e))?;
    let err = log
        .try_clone()
        .map_err(|e| Error::io(log_path.display(), e))?;
    let started = Instant::now();
    let mut cmd = Command::new(&opts.mco_bin);
    cmd.arg("up")
        .arg("--data-dir")
        .arg(&data)
        .args(["--masters", &opts.masters.to_string()])
        .args(["--workers", &opts.workers.to_string()])
        .args(["--reboot-seconds", &opts.reboot_seconds.to_string()])
        .args(["--mcs-listen", "127.0.0.1:0"])
        .args([
            "--dashboard-listen",
            if opts.dashboard == Dashboard::Off {
                "off"
            } else {
                "127.0.0.1:0"
            },
        ]);
    match &opts.kubeconfig {
        Some(kc) => cmd.arg("--kubeconfig").arg(kc),
        None => cmd.args(["--listen", "127.0.0.1:0"]),
    };
    if opts.controller_process {
        cmd.arg("--no-controller");
    }
    let child = cmd
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| Error::io(opts.mco_bin.display(), e))?;
    let up = UpProcess(child);
    let pid = up.0.id();
    let secs = opts.max.as_secs();

    let kubeconfig = opts
        .kubeconfig
        .clone()
        .unwrap_or_else(|| data.join("kubeconfig"));
    poll("the kubeconfig", 60, || async {
        kubeconfig.exists().then_some(())
    })
    .await?;
    let client = poll("the API server", 60, || async {
        let c = client_from_kubeconfig(&kubeconfig).await.ok()?;
        c.apiserver_version().await.ok().map(|_| c)
    })
    .await?;
    let controller = if opts.controller_process {
        let log = dir.path().join("controller.log");
        let out = std::fs::File::create(&log).map_err(|e| Error::io(log.display(), e))?;
        let err = out.try_clone().map_err(|e| Error::io(log.display(), e))?;
        // The embedded cluster's controller timings (mco_sim::cluster::controller_config).
        let child = Command::new(&opts.mco_bin)
            .arg("controller")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args([
                "--render-debounce",
                "100ms",
                "--resync",
                "10s",
                "--error-requeue",
                "1s",
            ])
            .args(["--drain-evict-retry", "1s", "--drain-requeue", "5s"])
            .args(["--drain-requeue-slow", "30s", "--identity", "mco-bench"])
            .args(["--lease-namespace", "mco-system"])
            .args(["--lease-name", "machine-config-controller"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::io(opts.mco_bin.display(), e))?;
        Some(UpProcess(child))
    } else {
        None
    };
    if opts.kubeconfig.is_some() {
        create_workloads(&client).await?;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    let mcs: Api<MachineConfig> = Api::all(client.clone());

    // The pool exists before any node joins, so the limit is in place for the rollout.
    let percent = format!("{}%", opts.max_unavailable_percent);
    poll("the worker pool", 60, || async {
        pools
            .patch(
                "worker",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"maxUnavailable": percent}})),
            )
            .await
            .ok()
    })
    .await?;

    // Listing every node is heavy at this size: once a second, not at `poll`'s pace.
    let total = opts.masters + opts.workers;
    let deadline = Instant::now() + opts.max;
    // A node without its MachineConfigNode yet would roll out with its status writes skipped.
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    loop {
        let list = nodes.list(&ListParams::default()).await?;
        let done = list.items.iter().filter(|n| settled(n, None)).count();
        let with_mcn = if done == total {
            mcns.list_metadata(&ListParams::default())
                .await?
                .items
                .len()
        } else {
            0
        };
        if list.items.len() == total && done == total && with_mcn == total {
            break;
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!(
                    "every node Done ({done} of {total}) with its MachineConfigNode ({with_mcn})"
                ),
                secs,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let join = started.elapsed();
    let old_target = poll(
        "the worker pool's status to count every node",
        secs,
        || async {
            let p = pools.get("worker").await.ok()?;
            let t = p.spec.configuration.as_ref()?.name.clone();
            pool_updated_on(&p, &t, opts.workers).then_some(t)
        },
    )
    .await?;

    let mc: MachineConfig = typed(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {
            "name": BENCH_MC,
            "labels": {"machineconfiguration.openshift.io/role": "worker"}
        },
        "spec": {"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": [{
            "path": "/etc/mco-bench.conf",
            "mode": 420,
            "overwrite": true,
            "contents": {"source": "data:,rolled%20out%20by%20mco-bench%0A"}
        }]}}}
    }))?;
    // The workloads settle before anything is counted: on a real cluster its controllers
    // and scheduler are still creating, binding and starting a pod per node.
    poll("every workload pod Ready", secs, || async {
        let pods: Api<Pod> = Api::all(client.clone());
        let list = pods.list(&ListParams::default()).await.ok()?;
        let ready = |app: &str| {
            list.items
                .iter()
                .filter(|p| p.labels().get("app").is_some_and(|a| a == app))
                .filter(|p| pod_ready(p))
                .count()
        };
        (ready(mco_sim::workload::DS_NAME) >= total
            && ready(mco_sim::workload::WEB_NAME) >= mco_sim::workload::WEB_REPLICAS)
            .then_some(())
    })
    .await?;
    let (idle_rate, idle_top) = if opts.idle.is_zero() {
        (None, Vec::new())
    } else {
        until_quiet(&client, opts.max).await?;
        let before = Requests::read(&client).await?;
        let t = Instant::now();
        // A measuring window, not a wait for a state: its length is the measurement.
        tokio::time::sleep(opts.idle).await;
        let idle = Requests::read(&client).await?.since(&before);
        let mut top = idle.top_kinds(6);
        top.extend(top_of(&idle.by_schema, 4, "flow_schema="));
        (Some(idle.own() as f64 / t.elapsed().as_secs_f64()), top)
    };
    // The page is open from before the rollout to its end, as someone watching it would be.
    let page = if opts.dashboard == Dashboard::Watched {
        let log = log_path.clone();
        Some(
            tokio::task::spawn_blocking(move || crate::dashboard::Page::open(&log, total))
                .await
                .map_err(|e| Error::Bench(format!("the dashboard's page: {e}")))??,
        )
    } else {
        None
    };
    let controller_pid = controller.as_ref().map(|c| c.0.id());
    let controller_before = match controller_pid {
        Some(p) => Some(procfs::read_cpu(p)?),
        None => None,
    };
    // The pool is followed by a watch started before anything is counted: polling it was the
    // bench's own requests, two per worker update, counted as the rollout's.
    let mut pool_watch = PoolWatch::start(&pools).await?;
    let node_watch = if opts.phases {
        Some(NodeWatch::start(client.clone()).await?)
    } else {
        None
    };
    let requests_before = Requests::read(&client).await?;
    let control_plane: Vec<(&'static str, u32, Duration)> = opts
        .control_plane_group
        .map(procfs::control_plane_pids)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(n, p)| Some((n, p, procfs::read_cpu(p).ok()?)))
        .collect();
    let cpu_before = procfs::read_cpu(pid)?;
    let machine_before = procfs::read_machine_cpu()?;
    let sampler = procfs::RssSampler::start(pid, RSS_EVERY)?;
    let rollout_start = Instant::now();
    mcs.create(&PostParams::default(), &mc).await?;
    // Every status the pool goes through is seen: the most unavailable machines it reported
    // is the check on `maxUnavailable`.
    let mut new_target: Option<(String, Duration)> = None;
    let mut peak_unavailable = 0;
    let mut tenths = Vec::with_capacity(10);
    let deadline = Instant::now() + opts.max;
    loop {
        let Some(p) = pool_watch.next(deadline).await? else {
            return Err(Error::Timeout {
                what: match &new_target {
                    Some((t, _)) => format!("the worker pool Updated on {t}"),
                    None => "a new worker config".into(),
                },
                secs,
            });
        };
        if new_target.is_none() {
            match p.spec.configuration.as_ref().map(|c| c.name.clone()) {
                Some(t) if t != old_target => new_target = Some((t, rollout_start.elapsed())),
                _ => continue,
            }
        }
        let Some((target, _)) = &new_target else {
            continue;
        };
        // Counts from before the status caught up with the new target are the old config's.
        let current = p.status.as_ref().filter(|s| {
            s.observed_generation.is_some() && s.observed_generation == p.metadata.generation
        });
        let updated = current.map_or(0, |s| s.updated_machine_count);
        let updated = usize::try_from(updated).unwrap_or(0);
        while tenths.len() < 10 && updated * 10 >= opts.workers * (tenths.len() + 1) {
            tenths.push(rollout_start.elapsed());
        }
        if pool_updated_on(&p, target, opts.workers) {
            break;
        }
        let unavailable = p.status.as_ref().map_or(0, |s| s.unavailable_machine_count);
        peak_unavailable = peak_unavailable.max(usize::try_from(unavailable).unwrap_or(0));
    }
    let rollout = rollout_start.elapsed();
    let (target, rendered) = new_target.unwrap_or_default();
    let rss_during = RssTrace::of(&sampler.stop());
    let cpu = procfs::read_cpu(pid)?.saturating_sub(cpu_before);
    let controller_cpu = match (controller_pid, controller_before) {
        (Some(p), Some(before)) => Some(procfs::read_cpu(p)?.saturating_sub(before)),
        _ => None,
    };
    let machine = procfs::read_machine_cpu()?.since(machine_before);
    let control_plane_cpu = control_plane
        .into_iter()
        .filter_map(|(n, p, before)| Some((n, procfs::read_cpu(p).ok()?.saturating_sub(before))))
        .collect();
    let during = Requests::read(&client).await?.since(&requests_before);
    let component_requests = during.components();
    let requests = during.total();
    let top_requests = during.top_kinds(12);
    let mem = procfs::read_mem(pid)?;
    let phases = match node_watch {
        Some(w) => Some(Phases::of(
            w.finish(&target).await?.transitions(),
            &target,
            Duration::from_secs_f64(opts.reboot_seconds),
        )),
        None => None,
    };
    let page = match page {
        // The browser blocks (and its drop too): off the runtime.
        Some(p) => Some(
            tokio::task::spawn_blocking(move || p.stats())
                .await
                .map_err(|e| Error::Bench(format!("the dashboard's page: {e}")))?,
        ),
        None => None,
    };
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    drop(controller);
    drop(up);
    Ok(RolloutReport {
        max_unavailable: max_unavailable(opts.workers, opts.max_unavailable_percent),
        opts,
        join,
        rollout,
        rendered,
        tenths,
        peak_unavailable,
        mem,
        rss_during,
        cpu,
        load,
        machine,
        requests,
        top_requests,
        component_requests,
        idle_rate,
        idle_top,
        controller_cpu,
        control_plane_cpu,
        page,
        phases,
    })
}

/// How long no Node and no MachineConfigNode may change before the idle window opens.
const QUIET: Duration = Duration::from_secs(3);

/// Follows the versions of a set of objects: quiet once none has changed for [`QUIET`].
#[derive(Debug, Default)]
struct Quiet {
    last: Option<std::collections::BTreeMap<String, String>>,
    since: Option<Instant>,
}

impl Quiet {
    /// Takes the versions seen at `now` (object to resourceVersion); whether they have stood
    /// still for [`QUIET`].
    fn observe(
        &mut self,
        versions: std::collections::BTreeMap<String, String>,
        now: Instant,
    ) -> bool {
        if self.last.as_ref() != Some(&versions) {
            self.last = Some(versions);
            self.since = Some(now);
            return false;
        }
        self.since
            .is_some_and(|t| now.saturating_duration_since(t) >= QUIET)
    }
}

/// Waits until no Node and no MachineConfigNode has changed for [`QUIET`], so that the idle
/// window measures the cluster at rest and not the tail of the join: on kube-apiserver a run
/// once counted 49 requests/s there, Node PATCHes and MachineConfigNode status writes among
/// them, against 12/s at rest, and taking that rate off the rollout's count made it 18 % short.
async fn until_quiet(client: &kube::Client, max: Duration) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    let deadline = Instant::now() + max;
    let mut quiet = Quiet::default();
    loop {
        let lp = ListParams::default();
        let mut versions = std::collections::BTreeMap::new();
        let metas = nodes
            .list_metadata(&lp)
            .await?
            .items
            .into_iter()
            .map(|o| ("node", o.metadata));
        let metas = metas.chain(
            mcns.list_metadata(&lp)
                .await?
                .items
                .into_iter()
                .map(|o| ("mcn", o.metadata)),
        );
        for (kind, m) in metas {
            versions.insert(
                format!("{kind}/{}", m.name.unwrap_or_default()),
                m.resource_version.unwrap_or_default(),
            );
        }
        if quiet.observe(versions, Instant::now()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!(
                    "no Node or MachineConfigNode written for {} s before the idle window",
                    QUIET.as_secs()
                ),
                secs: max.as_secs(),
            });
        }
        // A pace of its own, not a wait for an answer: two small lists a second.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The embedded cluster's default workloads (a DaemonSet, the `web` Deployment and its
/// PodDisruptionBudget), created on a real cluster, whose own controllers and scheduler run
/// them; the simulated kubelet runs their pods.
async fn create_workloads(client: &kube::Client) -> Result<(), Error> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use mco_sim::workload;
    let pp = PostParams::default();
    let ok = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        other => other,
    };
    let ds: DaemonSet = typed(workload::daemonset())?;
    ok(Api::namespaced(client.clone(), workload::DS_NAMESPACE)
        .create(&pp, &ds)
        .await
        .map(drop))?;
    let dep: Deployment = typed(workload::deployment())?;
    ok(Api::namespaced(client.clone(), workload::WEB_NAMESPACE)
        .create(&pp, &dep)
        .await
        .map(drop))?;
    let pdb: PodDisruptionBudget = typed(workload::pdb())?;
    ok(Api::namespaced(client.clone(), workload::WEB_NAMESPACE)
        .create(&pp, &pdb)
        .await
        .map(drop))?;
    Ok(())
}

/// The flow schemas of API Priority and Fairness that only a cluster's own components match
/// (kube-apiserver's defaults): their requests are not mco's.
pub const COMPONENT_FLOW_SCHEMAS: &[&str] = &[
    "kube-controller-manager",
    "kube-scheduler",
    "kube-system-service-accounts",
    "system-leader-election",
    "endpoint-controller",
    "workload-leader-election",
    "system-nodes",
    "probes",
];

/// Every request the API server has counted so far, or in a window ([`Requests::since`]).
struct Requests {
    /// `apiserver_request_total` by kind.
    by_kind: std::collections::BTreeMap<String, u64>,
    /// `apiserver_flowcontrol_dispatched_requests_total` by flow schema: who sent them, roughly
    /// (none on the embedded server, which has no API Priority and Fairness).
    by_schema: std::collections::BTreeMap<String, u64>,
}

impl Requests {
    async fn read(client: &kube::Client) -> Result<Requests, Error> {
        let req = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|e| Error::Bench(e.to_string()))?;
        let text = client.request_text(req).await?;
        Ok(Requests {
            by_kind: count_requests(&text),
            by_schema: schema_requests(&text),
        })
    }

    /// The requests counted after `before`.
    fn since(&self, before: &Requests) -> Requests {
        let diff = |now: &std::collections::BTreeMap<String, u64>,
                    then: &std::collections::BTreeMap<String, u64>| {
            now.iter()
                .map(|(k, n)| {
                    (
                        k.clone(),
                        n.saturating_sub(then.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect()
        };
        Requests {
            by_kind: diff(&self.by_kind, &before.by_kind),
            by_schema: diff(&self.by_schema, &before.by_schema),
        }
    }

    fn total(&self) -> u64 {
        self.by_kind.values().sum()
    }

    /// Dispatched under [`COMPONENT_FLOW_SCHEMAS`].
    fn components(&self) -> u64 {
        components_of(&self.by_schema)
    }

    /// All but the components'.
    fn own(&self) -> u64 {
        self.total().saturating_sub(self.components())
    }

    /// The `n` most frequent kinds, most first.
    fn top_kinds(&self, n: usize) -> Vec<(String, u64)> {
        top_of(&self.by_kind, n, "")
    }
}

/// The `n` largest counts, most first, each key behind `prefix`.
fn top_of(
    counts: &std::collections::BTreeMap<String, u64>,
    n: usize,
    prefix: &str,
) -> Vec<(String, u64)> {
    let mut all: Vec<(String, u64)> = counts
        .iter()
        .filter(|(_, c)| **c > 0)
        .map(|(k, c)| (format!("{prefix}{k}"), *c))
        .collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(n);
    all
}

/// Requests dispatched under [`COMPONENT_FLOW_SCHEMAS`]
/// (`apiserver_flowcontrol_dispatched_requests_total`).
pub fn component_requests(metrics: &str) -> u64 {
    components_of(&schema_requests(metrics))
}

/// Of requests by flow schema, those under [`COMPONENT_FLOW_SCHEMAS`].
fn components_of(by_schema: &std::collections::BTreeMap<String, u64>) -> u64 {
    by_schema
        .iter()
        .filter(|(s, _)| COMPONENT_FLOW_SCHEMAS.contains(&s.as_str()))
        .map(|(_, n)| n)
        .sum()
}

/// `apiserver_flowcontrol_dispatched_requests_total` by flow schema.
pub fn schema_requests(metrics: &str) -> std::collections::BTreeMap<String, u64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("apiserver_flowcontrol_dispatched_requests_total{"))
        .filter_map(|l| {
            let (labels, n) = l.rsplit_once("} ")?;
            let schema = labels
                .split(',')
                .find_map(|kv| kv.strip_prefix("flow_schema="))?
                .trim_matches('"');
            Some((schema.to_string(), n.trim().parse::<u64>().ok()?))
        })
        .fold(Default::default(), |mut m, (k, n)| {
            *m.entry(k).or_default() += n;
            m
        })
}

/// `apiserver_request_total` by label set (the text between the braces).
pub fn count_requests(metrics: &str) -> std::collections::BTreeMap<String, u64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("apiserver_request_total{"))
        .filter_map(|l| {
            let (labels, n) = l.rsplit_once("} ")?;
            Some((labels.to_string(), n.trim().parse::<u64>().ok()?))
        })
        .fold(Default::default(), |mut m, (k, n)| {
            *m.entry(k).or_default() += n;
            m
        })
}

/// What the machine did during the rollout beside `mco up`: how busy it was, the CPU other
/// processes took, and the share the hypervisor stole. `None` without a reading.
pub fn machine_line(m: &procfs::MachineCpu, mco: Duration) -> Option<String> {
    let total = m.total() as f64;
    if total == 0.0 {
        return None;
    }
    // `/proc/stat` counts in USER_HZ, 100 on every Linux architecture this runs on.
    let others = (m.busy as f64 / 100.0 - mco.as_secs_f64()).max(0.0);
    Some(format!(
        "machine during the rollout: {:.0} % busy, {:.1} s of CPU in other processes, {:.1} % stolen by the hypervisor",
        100.0 * m.busy as f64 / total,
        others,
        100.0 * m.steal as f64 / total
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_machine_line_shares_out_the_ticks() {
        let m = procfs::MachineCpu {
            busy: 150,
            idle: 40,
            steal: 10,
        };
        assert_eq!(
            machine_line(&m, Duration::from_millis(1200)).as_deref(),
            Some(
                "machine during the rollout: 75 % busy, 0.3 s of CPU in other processes, 5.0 % stolen by the hypervisor"
            )
        );
        assert_eq!(
            machine_line(&procfs::MachineCpu::default(), Duration::ZERO),
            None
        );
    }

    #[test]
    fn waves_and_ideal() {
        assert_eq!(max_unavailable(1000, 10), 100);
        assert_eq!(max_unavailable(5, 10), 1);
        assert_eq!(
            ideal(1000, 100, Duration::from_secs(1)),
            Duration::from_secs(10)
        );
        assert_eq!(
            ideal(1001, 100, Duration::from_secs(2)),
            Duration::from_secs(22)
        );
        assert_eq!(ideal(1000, 100, Duration::ZERO), Duration::ZERO);
    }

    pub(crate) fn report(rollout_secs: u64, peak_unavailable: usize) -> RolloutReport {
        let opts = RolloutOpts {
            workers: 10,
            reboot_seconds: 1.0,
            ..RolloutOpts::default()
        };
        RolloutReport {
            opts,
            join: Duration::from_secs(5),
            rollout: Duration::from_secs(rollout_secs),
            max_unavailable: 1,
            peak_unavailable,
            rendered: Duration::from_secs(1),
            tenths: vec![],
            mem: procfs::Mem {
                rss_kib: 1024,
                hwm_kib: 1024,
            },
            rss_during: None,
            cpu: Duration::from_secs(1),
            load: String::new(),
            machine: procfs::MachineCpu::default(),
            requests: 0,
            top_requests: vec![],
            component_requests: 0,
            idle_rate: None,
            idle_top: Vec::new(),
            controller_cpu: None,
            control_plane_cpu: vec![],
            page: None,
            phases: None,
        }
    }

    #[test]
    fn the_idle_rate_is_taken_off_the_rollouts_requests() {
        let mut r = report(20, 1);
        r.requests = 500;
        assert_eq!(r.net_requests_per_update(), 50.0);
        // 5 requests/s of background over 20 s: 100 of the 500 were not the rollout's.
        r.idle_rate = Some(5.0);
        assert_eq!(r.net_requests_per_update(), 40.0);
        // Never below zero, whatever the background did.
        r.idle_rate = Some(100.0);
        assert_eq!(r.net_requests_per_update(), 0.0);
        // A real cluster's components' requests are not mco's.
        r.idle_rate = Some(5.0);
        r.component_requests = 200;
        assert_eq!(r.net_requests_per_update(), 20.0);
        assert_eq!(r.server(), "embedded");
        r.opts.kubeconfig = Some("kc".into());
        assert_eq!(r.server(), "kube-apiserver");
    }

    #[test]
    fn the_control_plane_line_names_each_process_and_only_on_a_real_cluster() {
        let mut r = report(10, 1);
        assert!(!r.to_string().contains("control plane CPU"));
        r.control_plane_cpu = vec![
            ("kube-apiserver", Duration::from_millis(15_300)),
            ("etcd", Duration::from_millis(2_000)),
        ];
        assert!(
            r.to_string().contains(
                "  control plane CPU during the rollout: kube-apiserver 15.3 s, etcd 2.0 s\n"
            ),
            "{r}"
        );
    }

    #[test]
    fn a_run_without_phases_says_so_and_reports_the_rest_alike() {
        let on = report(10, 1);
        let mut off = on.clone();
        off.opts.phases = false;
        let (on, off) = (on.to_string(), off.to_string());
        assert!(!on.contains(PHASES_OFF), "{on}");
        let line = format!("  {PHASES_OFF}\n");
        assert_eq!(off.matches(&line).count(), 1, "{off}");
        // Where the phase table would be: after the peak, before the RSS.
        assert!(
            off.contains(&format!("(limit 1)\n{line}  mco up RSS")),
            "{off}"
        );
        assert_eq!(off.replacen(&line, "", 1), on);
        // With phases on, the table takes that place and the line is absent.
        let mut with = report(10, 1);
        with.phases = Some(Phases::of(
            &[],
            "rendered-worker-new",
            Duration::from_secs(1),
        ));
        let text = with.to_string();
        assert!(
            text.contains("per worker update, from a Node watch"),
            "{text}"
        );
        assert!(!text.contains(PHASES_OFF), "{text}");
    }

    #[test]
    fn the_goal_needs_max_unavailable_held() {
        // Ten one-second waves in ten seconds: efficient, within the limit.
        let honest = report(10, 1);
        assert!(honest.limit_held());
        assert!(honest.goal_met(), "{honest}");
        assert!(honest.to_string().ends_with("goal: met"));
        // Faster by updating two at once where one was allowed: not a goal met.
        let broke = report(5, 2);
        assert!(!broke.limit_held());
        assert!(!broke.goal_met());
        let text = broke.to_string();
        assert!(text.contains("(limit 1, BROKEN)"), "{text}");
        assert!(text.ends_with("goal: NOT met"), "{text}");
    }

    #[test]
    fn component_requests_are_told_apart_by_flow_schema() {
        let m = "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"exempt\",priority_level=\"exempt\"} 495\n\
            apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"kube-controller-manager\",priority_level=\"workload-high\"} 215\n\
            apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"service-accounts\",priority_level=\"workload-low\"} 7\n\
            apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"kube-scheduler\",priority_level=\"workload-high\"} 25\n";
        assert_eq!(component_requests(m), 240);
        assert_eq!(
            component_requests("apiserver_request_total{verb=\"GET\"} 3\n"),
            0
        );
    }

    #[test]
    fn the_cluster_is_quiet_once_nothing_changed_for_a_while() {
        let v = |rv: &str| {
            [("node/a".to_string(), rv.to_string())]
                .into_iter()
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let t0 = Instant::now();
        let mut q = Quiet::default();
        assert!(!q.observe(v("1"), t0), "a first look proves nothing");
        assert!(!q.observe(v("1"), t0 + QUIET / 2));
        assert!(
            !q.observe(v("2"), t0 + QUIET),
            "a write starts the wait again"
        );
        assert!(!q.observe(v("2"), t0 + QUIET + QUIET / 2));
        assert!(q.observe(v("2"), t0 + QUIET * 2));
        assert!(
            !q.observe(std::collections::BTreeMap::new(), t0 + QUIET * 3),
            "a deletion is a change"
        );
    }

    #[test]
    fn a_window_counts_only_what_came_after_its_start() {
        let map = |kv: &[(&str, u64)]| kv.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        let before = Requests {
            by_kind: map(&[("a", 3), ("b", 1)]),
            by_schema: map(&[("kube-scheduler", 2), ("exempt", 2)]),
        };
        let after = Requests {
            by_kind: map(&[("a", 5), ("b", 1), ("c", 4)]),
            by_schema: map(&[("kube-scheduler", 3), ("exempt", 7)]),
        };
        let w = after.since(&before);
        assert_eq!(w.total(), 6);
        assert_eq!(w.components(), 1);
        assert_eq!(w.own(), 5);
        assert_eq!(w.top_kinds(1), vec![("c".to_string(), 4)]);
        assert!(
            !w.by_kind.contains_key("b"),
            "a kind with no new requests is left out"
        );
        assert_eq!(
            top_of(&w.by_schema, 4, "flow_schema="),
            vec![
                ("flow_schema=exempt".to_string(), 5),
                ("flow_schema=kube-scheduler".to_string(), 1)
            ]
        );
    }

    #[test]
    fn request_counters_are_summed() {
        let text = "# HELP apiserver_request Resource requests.\n\
            # TYPE apiserver_request counter\n\
            apiserver_request_total{verb=\"GET\",group=\"\",resource=\"nodes\",subresource=\"\",code=\"200\"} 12\n\
            apiserver_request_total{verb=\"LIST\",group=\"\",resource=\"pods\",subresource=\"\",code=\"200\"} 3\n\
            # EOF\n";
        let counts = count_requests(text);
        assert_eq!(counts.values().sum::<u64>(), 15);
        assert_eq!(
            counts["verb=\"GET\",group=\"\",resource=\"nodes\",subresource=\"\",code=\"200\""],
            12
        );
    }
}
