//! Memory of the server process alone: `mco apiserver` runs as a child process, this
//! process stores MachineConfigNodes and holds the watches, and `/proc/<pid>/status`
//! gives the child's RSS after each phase.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchParams};
use mco_api::MachineConfigNode;
use serde_json::json;

use crate::Error;
use crate::procfs::{self, Mem};
use crate::stats::mib;
use crate::support::{client_from_kubeconfig, poll, scratch_dir, typed};

/// Goal: RSS with the objects stored and the watchers open.
pub const GOAL_RSS_KIB: u64 = 300 * 1024;

#[derive(Debug, Clone)]
pub struct MemoryOpts {
    /// The `mco` binary whose `apiserver` subcommand is measured.
    pub server_bin: PathBuf,
    pub mcns: usize,
    pub watchers: usize,
    /// Also write a status (13 conditions, as a daemon reports them) on every object.
    pub with_status: bool,
    pub writers: usize,
    pub max: Duration,
    pub work_dir: PathBuf,
}

impl Default for MemoryOpts {
    fn default() -> Self {
        MemoryOpts {
            server_bin: PathBuf::from("target/release/mco"),
            mcns: 10_000,
            watchers: 1000,
            with_status: true,
            writers: 32,
            max: Duration::from_secs(180),
            work_dir: std::env::temp_dir(),
        }
    }
}

/// RSS after one phase.
#[derive(Debug, Clone)]
pub struct Phase {
    pub what: String,
    pub mem: Mem,
    pub took: Duration,
}

#[derive(Debug, Clone)]
pub struct MemoryReport {
    pub opts: MemoryOpts,
    pub object_bytes: usize,
    pub phases: Vec<Phase>,
}

/// RSS growth between two phases, divided over `n` things.
fn per(phases: &[Phase], from: usize, to: usize, n: usize) -> Option<u64> {
    let (a, b) = (phases.get(from)?, phases.get(to)?);
    (n > 0).then(|| b.mem.rss_kib.saturating_sub(a.mem.rss_kib) * 1024 / n as u64)
}

impl MemoryReport {
    /// The largest RSS seen once everything is stored and watched (either run).
    pub fn worst_rss_kib(&self) -> u64 {
        self.phases
            .iter()
            .filter(|p| p.what.contains("watchers"))
            .map(|p| p.mem.rss_kib)
            .max()
            .unwrap_or(0)
    }

    pub fn goal_met(&self) -> bool {
        let w = self.worst_rss_kib();
        w > 0 && w <= GOAL_RSS_KIB
    }
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.opts;
        writeln!(
            f,
            "server memory: `{} apiserver` as a child process, {} MachineConfigNodes ({} bytes of JSON each{}), {} watchers (metadata.name=<own>)",
            o.server_bin.display(),
            o.mcns,
            self.object_bytes,
            if o.with_status { ", with status" } else { "" },
            o.watchers
        )?;
        for p in &self.phases {
            writeln!(
                f,
                "  {:<48} VmRSS {:>10}  VmHWM {:>10}  ({:.2} s)",
                p.what,
                mib(p.mem.rss_kib),
                mib(p.mem.hwm_kib),
                p.took.as_secs_f64()
            )?;
        }
        // Phases: 1 = CRD established, then the stored ones, then watchers open.
        let stored = if o.with_status { 3 } else { 2 };
        if let (Some(obj), Some(w)) = (
            per(&self.phases, 1, stored, o.mcns),
            per(&self.phases, stored, stored + 1, o.watchers),
        ) {
            writeln!(
                f,
                "  RSS growth per stored object {obj} bytes ({:.1}x its JSON); per open watch {w} bytes",
                crate::stats::ratio(obj as f64, self.object_bytes as f64)
            )?;
        }
        write!(
            f,
            "  goal (RSS <= {} with objects and watchers): {} at {}",
            mib(GOAL_RSS_KIB),
            if self.goal_met() { "MET" } else { "MISSED" },
            mib(self.worst_rss_kib())
        )
    }
}

/// The server child; killed when dropped so a failed run leaves nothing behind.
struct ServerProcess {
    child: Child,
    kubeconfig: PathBuf,
}

impl ServerProcess {
    fn spawn(bin: &Path, dir: &Path) -> Result<ServerProcess, Error> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| Error::io("picking a loopback port", e))?
            .port();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .map_err(|e| Error::io("server log", e))?;
        let child = Command::new(bin)
            .arg("apiserver")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Error::io(bin.display(), e))?;
        Ok(ServerProcess {
            child,
            kubeconfig: dir.join("data").join("kubeconfig"),
        })
    }

    fn mem(&self) -> Result<Mem, Error> {
        procfs::read_mem(self.child.id())
    }

    /// Waits until the server answers `/version` with its own kubeconfig.
    async fn client(&mut self, secs: u64) -> Result<kube::Client, Error> {
        let path = self.kubeconfig.clone();
        let child = &mut self.child;
        poll("the server to answer", secs, || {
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            let path = path.clone();
            async move {
                if exited {
                    return Some(Err(Error::Bench("server process exited".into())));
                }
                let c = client_from_kubeconfig(&path).await.ok()?;
                c.apiserver_version().await.ok()?;
                Some(Ok(c))
            }
        })
        .await?
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node(i: usize) -> String {
    format!("worker-{i:05}")
}

const RENDERED: &str = "rendered-worker-5f1c2b9d0e7a4c3b8f6d2e1a0b9c8d7e";

fn mcn(i: usize) -> Result<MachineConfigNode, Error> {
    typed(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1",
        "kind": "MachineConfigNode",
        "metadata": {"name": node(i), "labels": {"machineconfiguration.openshift.io/pool": "worker"}},
        "spec": {"nodeRef": {"name": node(i)}, "pool": {"name": "worker"}, "configVersion": {"desired": RENDERED}}
    }))
}

/// A status as a settled daemon reports it: every condition type, all timestamps set.
fn status() -> serde_json::Value {
    const TYPES: &[&str] = &[
        "UpdatePrepared",
        "UpdateExecuted",
        "UpdatePostActionComplete",
        "UpdateComplete",
        "Resumed",
        "UpdateCompatible",
        "AppliedFilesAndOS",
        "Drained",
        "Cordoned",
        "RebootedNode",
        "ReloadedCRIO",
        "Uncordoned",
        "Updated",
    ];
    let conditions: Vec<_> = TYPES
        .iter()
        .map(|t| {
            json!({
                "type": t,
                "status": if *t == "Updated" { "True" } else { "False" },
                "reason": "NotYetOccured",
                "message": "This node has not yet entered the update phase",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1
            })
        })
        .collect();
    json!({"status": {
        "conditions": conditions,
        "configVersion": {"current": RENDERED, "desired": RENDERED},
        "health": "Healthy",
        "mostRecentError": "",
        "observedGeneration": 1
    }})
}

async fn install_crd(client: &kube::Client, secs: u64) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = MachineConfigNode::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.create(&PostParams::default(), &crd).await?;
    poll("the MachineConfigNode CRD to be established", secs, || {
        let (crds, name) = (crds.clone(), name.clone());
        async move {
            let c = crds.get(&name).await.ok()?;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        }
    })
    .await?;
    // Established first, then served: wait until a list answers.
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    poll("MachineConfigNodes to be served", secs, || {
        let mcns = mcns.clone();
        async move {
            mcns.list(&ListParams::default().limit(1))
                .await
                .ok()
                .map(|_| ())
        }
    })
    .await
}

/// Opens one watch per object, each with its own name selector, and returns the tasks
/// that keep them open (abort them to close).
async fn open_watchers(
    client: &kube::Client,
    n: usize,
    secs: u64,
) -> Result<Vec<tokio::task::JoinHandle<()>>, Error> {
    let api: Api<MachineConfigNode> = Api::all(client.clone());
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let timeout = (secs + 60).min(290) as u32;
    let streams: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let (api, rv) = (api.clone(), rv.clone());
            async move {
                let wp = WatchParams::default()
                    .fields(&format!("metadata.name={}", node(i)))
                    .timeout(timeout);
                api.watch(&wp, &rv).await.map(|s| s.boxed())
            }
        })
        .buffer_unordered(64)
        .try_collect()
        .await?;
    Ok(streams
        .into_iter()
        .map(|mut s| tokio::spawn(async move { while s.next().await.is_some() {} }))
        .collect())
}

pub async fn run(opts: MemoryOpts) -> Result<MemoryReport, Error> {
    let secs = opts.max.as_secs().max(1);
    let dir = scratch_dir(&opts.work_dir, "memory")?;
    let mut phases = Vec::new();
    let mut server = ServerProcess::spawn(&opts.server_bin, dir.path())?;
    let mut t = Instant::now();
    let client = server.client(secs).await?;
    let mut record = |what: &str, server: &ServerProcess, t: &mut Instant| -> Result<(), Error> {
        phases.push(Phase {
            what: what.into(),
            mem: server.mem()?,
            took: t.elapsed(),
        });
        *t = Instant::now();
        Ok(())
    };
    record("started, empty", &server, &mut t)?;
    install_crd(&client, secs).await?;
    record("MachineConfigNode CRD established", &server, &mut t)?;

    let api: Api<MachineConfigNode> = Api::all(client.clone());
    let writers = opts.writers.max(1);
    futures::stream::iter(0..opts.mcns)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &mcn(i)?).await?;
                Ok::<_, Error>(())
            }
        })
        .buffer_unordered(writers)
        .try_collect::<Vec<()>>()
        .await?;
    record(
        &format!("{} MachineConfigNodes created", opts.mcns),
        &server,
        &mut t,
    )?;
    if opts.with_status {
        let st = status();
        futures::stream::iter(0..opts.mcns)
            .map(|i| {
                let (api, st) = (api.clone(), st.clone());
                async move {
                    api.patch_status(&node(i), &PatchParams::default(), &Patch::Merge(&st))
                        .await?;
                    Ok::<_, Error>(())
                }
            })
            .buffer_unordered(writers)
            .try_collect::<Vec<()>>()
            .await?;
        record("status written on each", &server, &mut t)?;
    }
    let object_bytes = match opts.mcns {
        0 => 0,
        _ => serde_json::to_string(&api.get(&node(0)).await?)
            .map(|s| s.len())
            .unwrap_or(0),
    };
    let watchers = open_watchers(&client, opts.watchers, secs).await?;
    record(&format!("{} watchers open", opts.watchers), &server, &mut t)?;
    for w in &watchers {
        w.abort();
    }
    drop(client);

    // A restart loads everything from SQLite: the steady state of a long-lived server.
    drop(server);
    t = Instant::now();
    let mut server = ServerProcess::spawn(&opts.server_bin, dir.path())?;
    let client = server.client(secs).await?;
    record("restarted on the same data", &server, &mut t)?;
    let watchers = open_watchers(&client, opts.watchers, secs).await?;
    record(
        &format!("restarted, {} watchers open", opts.watchers),
        &server,
        &mut t,
    )?;
    for w in &watchers {
        w.abort();
    }
    Ok(MemoryReport {
        opts,
        object_bytes,
        phases,
    })
}
