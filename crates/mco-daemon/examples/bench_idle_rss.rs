//! Resident memory of an idle node daemon, run both as `mco daemon` (the multi-call executable)
//! and as the daemon-only `mco-daemon`: the real process on a simulated node, against the
//! embedded API server run as its own process, settled to `state=Done`.
//!
//! ```sh
//! cargo build --release -p mco --bin mco
//! cargo build --profile daemon -p mco-daemon --features cli --bin mco-daemon
//! cargo run --release -p mco-daemon --example bench_idle_rss -- [--mco target/release/mco] [--daemon-bin target/daemon/mco-daemon] [--files 200] [--idle-secs 10] [--rounds 1] [--metrics-auth none|delegated]
//! ```
//!
//! With `--metrics-auth delegated` (as the shipped DaemonSet runs) the metrics port serves TLS
//! and reviews its callers; once the node is `Done` it is scraped once with the admin token
//! (one TokenReview and one SubjectAccessReview, their answers cached) before the idle wait.
//!
//! Each round measures both executables, each against a fresh API server and node. The node's
//! root already holds the config (applied by the engine in this process, then a simulated
//! reboot), so the daemon starts, validates the disk, writes its MachineConfigNode and
//! annotations, starts the drift monitor and metrics endpoint, and goes idle.
//! `VmRSS` (with its `RssAnon`/`RssFile` split), `VmHWM` and the thread count are read from
//! `/proc/<pid>/status` after `--idle-secs` of idling.

// A benchmark sets up its temp roots and measures its own process directly.
#![allow(clippy::disallowed_methods)]

use std::error::Error;
use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mco_api::constants::annotations as ann;
use mco_api::{MachineConfig, MachineConfigNode};
use mco_daemon::Host;
use mco_daemon::engine::{Engine, RecordingReporter, UpdateOptions};
use mco_daemon::host::fs::{FileAttrs, HostFs};
use mco_daemon::host::reboot::complete_sim_reboot;
use serde_json::json;

const NODE: &str = "worker-0";
const CONFIG: &str = "rendered-worker-1";

/// Kills a child this program started when dropped, whatever happened.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> Result<String, Box<dyn Error>> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string())
}

async fn poll<T, F, Fut>(what: &str, secs: u64, mut f: F) -> Result<T, Box<dyn Error>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn status_field(pid: u32, key: &str) -> Result<String, Box<dyn Error>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| format!("no {key} in /proc/{pid}/status").into())
}

fn config(files: usize) -> MachineConfig {
    let entries: Vec<_> = (0..files)
        .map(|i| {
            json!({
                "path": format!("/etc/mco-bench/f{i:04}.conf"),
                "contents": {"source": format!("data:,setting-{i}%3Dvalue%0A")},
                "mode": 0o644,
            })
        })
        .collect();
    let mut mc = MachineConfig::new(CONFIG, Default::default());
    mc.spec.config = Some(json!({
        "ignition": {"version": "3.2.0"},
        "storage": {"files": entries},
        "systemd": {"units": [{"name": "bench.service", "enabled": true,
            "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]},
    }));
    mc
}

/// A simulated node (not ostree-booted) already in `mc`.
fn prepare_node(root: &Path, mc: &MachineConfig) -> Result<(), Box<dyn Error>> {
    let fs = HostFs::open(root)?;
    let a = FileAttrs::default();
    fs.write_atomic(
        "/etc/passwd",
        b"root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000::/home/core:/bin/bash\n",
        &a,
    )?;
    fs.write_atomic("/etc/group", b"root:x:0:\ncore:x:1000:\n", &a)?;
    fs.write_atomic(
        "/etc/shadow",
        b"root:*:19000::::::\ncore:*:19000::::::\n",
        &FileAttrs::mode(0o600),
    )?;
    fs.write_atomic(
        "/etc/os-release",
        b"ID=\"rhcos\"\nVERSION_ID=\"4.16\"\nVARIANT_ID=coreos\n",
        &a,
    )?;
    let engine = Engine::new(Host::sim(root)?)?;
    let mut empty = MachineConfig::new("rendered-worker-0", Default::default());
    empty.spec.config = Some(json!({"ignition": {"version": "3.2.0"}}));
    engine.update(
        &empty,
        mc,
        UpdateOptions::default(),
        &mut RecordingReporter::default(),
    )?;
    complete_sim_reboot(&fs)?;
    Ok(())
}

struct Args {
    mco: PathBuf,
    daemon_bin: PathBuf,
    files: usize,
    idle_secs: u64,
    rounds: usize,
    metrics_auth: String,
}

fn args() -> Result<Args, Box<dyn Error>> {
    let mut a = Args {
        mco: PathBuf::from("target/release/mco"),
        daemon_bin: PathBuf::from("target/daemon/mco-daemon"),
        files: 200,
        idle_secs: 10,
        rounds: 1,
        metrics_auth: "none".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--mco" => a.mco = v.into(),
            "--daemon-bin" => a.daemon_bin = v.into(),
            "--rounds" => a.rounds = v.parse()?,
            "--files" => a.files = v.parse()?,
            "--idle-secs" => a.idle_secs = v.parse()?,
            "--metrics-auth" => a.metrics_auth = v,
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    Ok(a)
}

/// What `/proc/<pid>/status` says about one idle daemon, in kB.
struct Sample {
    settled: Duration,
    at_done: u64,
    rss: u64,
    anon: u64,
    file: u64,
    hwm: u64,
    threads: String,
}

fn kb(pid: u32, key: &str) -> Result<u64, Box<dyn Error>> {
    let v = status_field(pid, key)?;
    Ok(v.trim_end_matches("kB").trim().parse()?)
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// One idle daemon started as `daemon` (executable and leading arguments), against a fresh
/// API server and node.
async fn measure(a: &Args, daemon: &[OsString]) -> Result<Sample, Box<dyn Error>> {
    let work = tempfile::tempdir()?;
    let api_dir = work.path().join("api");
    let api_log = std::fs::File::create(work.path().join("apiserver.log"))?;
    let _api = Reaped(
        Command::new(&a.mco)
            .arg("apiserver")
            .arg("--data-dir")
            .arg(&api_dir)
            .args(["--listen", &free_addr()?])
            .stdout(Stdio::null())
            .stderr(api_log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", a.mco.display()))?,
    );
    let kubeconfig = api_dir.join("kubeconfig");
    let client = poll("the API server", 60, || async {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).ok()?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .ok()?;
        let client = Client::try_from(cfg).ok()?;
        client.apiserver_version().await.ok()?;
        Some(client)
    })
    .await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in mco_api::crds::all() {
        crds.create(&PostParams::default(), &crd).await?;
    }
    let mcs: Api<MachineConfig> = Api::all(client.clone());
    poll("the MachineConfig API", 30, || async {
        mcs.list(&Default::default()).await.ok()
    })
    .await?;
    let mc = config(a.files);
    mcs.create(&PostParams::default(), &mc).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "annotations": {
            ann::CURRENT_CONFIG: CONFIG,
            ann::DESIRED_CONFIG: CONFIG,
        }},
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    let mcn: MachineConfigNode = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1", "kind": "MachineConfigNode",
        "metadata": {"name": NODE},
        "spec": {"nodeRef": {"name": NODE}, "pool": {"name": "worker"}, "configVersion": {"desired": CONFIG}},
    }))?;
    mcns.create(&PostParams::default(), &mcn).await?;

    // Play the drain controller: the daemon uncordons before it reports Done.
    let drainer = nodes.clone();
    tokio::spawn(async move {
        loop {
            if let Ok(n) = drainer.get(NODE).await {
                let a = n.metadata.annotations.unwrap_or_default();
                let want = a.get(ann::DESIRED_DRAIN).cloned().unwrap_or_default();
                if !want.is_empty() && a.get(ann::LAST_APPLIED_DRAIN) != Some(&want) {
                    let patch =
                        json!({"metadata": {"annotations": {ann::LAST_APPLIED_DRAIN: want}}});
                    let _ = drainer
                        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    let root = work.path().join("node");
    std::fs::create_dir_all(&root)?;
    prepare_node(&root, &mc)?;
    let daemon_log = std::fs::File::create(work.path().join("daemon.log"))?;
    let started = Instant::now();
    let metrics_addr = free_addr()?;
    let daemon = Reaped(
        Command::new(&daemon[0])
            .args(&daemon[1..])
            .args(["--node", NODE, "--host", "sim"])
            .arg("--root")
            .arg(&root)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--metrics-listen", &metrics_addr])
            .arg(format!("--metrics-auth={}", a.metrics_auth))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(daemon_log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", daemon[0].display()))?,
    );
    let pid = daemon.0.id();
    let done = poll("the node to be Done", 60, || async {
        let n = nodes.get(NODE).await.ok()?;
        let a = n.metadata.annotations?;
        (a.get(ann::STATE).map(String::as_str) == Some("Done")).then_some(())
    })
    .await;
    if let Err(e) = done {
        let log = std::fs::read_to_string(work.path().join("daemon.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        for l in tail.into_iter().rev() {
            eprintln!("daemon: {l}");
        }
        return Err(e);
    }
    let settled = started.elapsed();
    if a.metrics_auth == "delegated" {
        scrape(&kubeconfig, &metrics_addr)?;
    }
    let at_done = kb(pid, "VmRSS")?;
    tokio::time::sleep(Duration::from_secs(a.idle_secs)).await;
    let sample = Sample {
        settled,
        at_done,
        rss: kb(pid, "VmRSS")?,
        anon: kb(pid, "RssAnon")?,
        file: kb(pid, "RssFile")?,
        hwm: kb(pid, "VmHWM")?,
        threads: status_field(pid, "Threads")?,
    };
    drop(daemon);
    Ok(sample)
}

/// One scrape of the TLS metrics port with the kubeconfig's token, which must be let in.
fn scrape(kubeconfig: &Path, addr: &str) -> Result<(), Box<dyn Error>> {
    // The embedded server writes its admin kubeconfig with one `token:` line.
    let text = std::fs::read_to_string(kubeconfig)?;
    let token = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .ok_or("no token in the kubeconfig")?;
    let out = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "20",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["-H", &format!("Authorization: Bearer {}", token)])
        .arg(format!("https://{addr}/metrics"))
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    let code = String::from_utf8_lossy(&out.stdout).into_owned();
    if code != "200" {
        return Err(format!("scraping https://{addr}/metrics: {code}").into());
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let a = args()?;
    let multi = vec![a.mco.clone().into_os_string(), "daemon".into()];
    let single = vec![a.daemon_bin.clone().into_os_string()];
    for round in 1..=a.rounds {
        let mut rss = vec![];
        for (label, cmd) in [("mco daemon", &multi), ("mco-daemon", &single)] {
            let s = measure(&a, cmd).await?;
            println!(
                "round {round} {label:<10} ({} files, 1 unit): Done after {:.2} s; VmRSS at Done {:.1} MiB; \
                 after {} s idle VmRSS {:.1} MiB (RssAnon {:.1}, RssFile {:.1}), VmHWM {:.1} MiB, threads {}",
                a.files,
                s.settled.as_secs_f64(),
                mib(s.at_done),
                a.idle_secs,
                mib(s.rss),
                mib(s.anon),
                mib(s.file),
                mib(s.hwm),
                s.threads,
            );
            rss.push(s.rss);
        }
        println!(
            "round {round}: mco-daemon / mco daemon idle VmRSS = {:.2}",
            rss[1] as f64 / rss[0] as f64
        );
    }
    Ok(())
}
