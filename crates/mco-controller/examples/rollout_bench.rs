//! Rollout overhead: how long the controller itself adds to each wave of a rollout when every
//! daemon finishes instantly, against the embedded API server.
//!
//! `cargo run --release -p mco-controller --example rollout_bench -- [--nodes N] [--pools P]
//! [--runs R] [--controller-bin PATH]`
//!
//! Each run creates one MachineConfig per pool and times MachineConfig creation → every pool
//! `Updated=True` on the new rendered config; the overhead per wave is that time divided by the
//! number of waves (`ceil(nodes per pool / maxUnavailable)`, with `maxUnavailable` 10%). The
//! controller runs in this process with its default timings, unless `--controller-bin` names an
//! `mco` binary: then it runs as `mco controller` in a child process, whose peak and current
//! RSS (`VmHWM`, `VmRSS`) are reported at the end.
//!
//! `--controller-wrap "heaptrack -o /tmp/ctl"` starts that child under a profiler (the words are
//! put before the binary); the figures are then the wrapped controller's, read from the
//! descendant process named `mco`, and the controller is stopped with SIGTERM so the profiler
//! can finish its file.

#[path = "../tests/it/common.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{ann, create_mc, create_pool, env, target_other_than};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use mco_api::MachineConfigPool;
use mco_api::constants::{annotations, states};
use mco_apiserver::Identity;
use serde_json::json;
use tokio_util::task::AbortOnDropHandle;

struct Args {
    nodes: usize,
    pools: usize,
    runs: usize,
    controller_bin: Option<PathBuf>,
    controller_wrap: Vec<String>,
}

fn args() -> Args {
    let mut out = Args {
        nodes: 1000,
        pools: 1,
        runs: 5,
        controller_bin: None,
        controller_wrap: vec![],
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let value = it.next().unwrap_or_default();
        match a.as_str() {
            "--nodes" => out.nodes = value.parse().expect("--nodes N"),
            "--pools" => out.pools = value.parse().expect("--pools P"),
            "--runs" => out.runs = value.parse().expect("--runs R"),
            "--controller-bin" => out.controller_bin = Some(value.into()),
            "--controller-wrap" => {
                out.controller_wrap = value.split_whitespace().map(String::from).collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    out
}

fn pool_name(p: usize) -> String {
    if p == 0 {
        "worker".into()
    } else {
        format!("pool{p}")
    }
}

/// Daemons that finish at once: whenever a node's desiredConfig differs from its currentConfig,
/// set currentConfig to it and the state to Done, in one write. The controller drives no drain
/// here (it drains only when a daemon asks for one), so there is no drain protocol to honour.
fn instant_daemons(client: &Client) -> tokio::task::JoinHandle<()> {
    let api: Api<Node> = Api::all(client.clone());
    tokio::spawn(async move {
        watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .for_each_concurrent(32, |n| {
                let api = api.clone();
                async move {
                    let Ok(n) = n else { return };
                    let desired = ann(&n, annotations::DESIRED_CONFIG);
                    if desired.is_empty()
                        || (desired == ann(&n, annotations::CURRENT_CONFIG)
                            && ann(&n, annotations::STATE) == states::DONE)
                    {
                        return;
                    }
                    let patch = json!({"metadata": {"annotations": {
                        annotations::CURRENT_CONFIG: desired,
                        annotations::STATE: states::DONE,
                    }}});
                    let name = n.metadata.name.clone().unwrap_or_default();
                    if let Err(e) = api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        eprintln!("daemon {name}: {e}");
                    }
                }
            })
            .await;
    })
}

fn node(name: &str, role: &str, config: &str, zone: usize) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                format!("node-role.kubernetes.io/{role}"): "",
                "topology.kubernetes.io/zone": format!("zone-{zone}"),
            },
            "annotations": {
                annotations::CURRENT_CONFIG: config,
                annotations::DESIRED_CONFIG: config,
                annotations::STATE: states::DONE,
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("node")
}

/// Whether the pool reports `Updated=True` on `target` for `count` machines.
async fn is_updated(client: &Client, pool: &str, target: &str, count: usize) -> bool {
    let Ok(p) = Api::<MachineConfigPool>::all(client.clone())
        .get(pool)
        .await
    else {
        return false;
    };
    p.status.is_some_and(|s| {
        s.is_true("Updated")
            && s.machine_count as usize == count
            && s.configuration.as_ref().map(|c| c.name.as_str()) == Some(target)
    })
}

/// Poll every pool until each is Updated on its target; a tight interval keeps the
/// measurement's resolution well below the figures it measures.
async fn wait_all_updated(client: &Client, targets: &[(String, String)], per_pool: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut pending: Vec<&(String, String)> = targets.iter().collect();
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "rollout did not finish in 600 s");
        let mut still = vec![];
        for t in pending {
            if !is_updated(client, &t.0, &t.1, per_pool).await {
                still.push(t);
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The process under `pid` (itself included) whose command name is `mco`: the controller, when a
/// profiler's wrapper script started it.
fn controller_pid(pid: u32) -> Option<u32> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() == "mco" {
        return Some(pid);
    }
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find_map(controller_pid)
}

/// Start `mco controller` as a child process with its default timings, under `wrap` if given.
fn spawn_controller(bin: &Path, kubeconfig: &Path, wrap: &[String]) -> tokio::process::Child {
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = tokio::process::Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => tokio::process::Command::new(bin),
    };
    cmd.arg("controller")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--metrics-addr", "127.0.0.1:0", "--identity", "bench"])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("start the controller binary")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    let env = env().await;
    let c = &env.client;
    let per_pool = args.nodes / args.pools;
    let budget =
        mco_rollout::plan::max_unavailable(Some(&IntOrString::String("10%".into())), per_pool);
    let waves = per_pool.div_ceil(budget);
    Api::<MachineConfigPool>::all(c.clone())
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"maxUnavailable": "10%"}})),
        )
        .await
        .expect("set maxUnavailable");
    for p in 1..args.pools {
        let name = pool_name(p);
        create_pool(c, &name, &name, Some(IntOrString::String("10%".into()))).await;
        create_mc(c, &format!("00-{name}"), &name, "/etc/base", "base").await;
    }

    let mut child = None;
    let _in_process = match &args.controller_bin {
        Some(bin) => {
            let kubeconfig = env.dir.path().join("bench-kubeconfig");
            env.server
                .write_kubeconfig(Identity::Admin, &kubeconfig)
                .await
                .expect("kubeconfig");
            child = Some(spawn_controller(bin, &kubeconfig, &args.controller_wrap));
            None
        }
        None => {
            let config = mco_controller::Config {
                lease: mco_controller::LeaseConfig {
                    identity: "bench".into(),
                    ..Default::default()
                },
                ..Default::default()
            };
            let client = c.clone();
            Some(AbortOnDropHandle::new(tokio::spawn(async move {
                mco_controller::run(client, config, std::future::pending())
                    .await
                    .expect("controller");
            })))
        }
    };

    let mut targets = vec![];
    for p in 0..args.pools {
        let name = pool_name(p);
        let t = target_other_than(c, &name, None).await;
        targets.push((name, t));
    }
    let start = Instant::now();
    futures::stream::iter(0..args.nodes)
        .for_each_concurrent(16, |i| {
            let p = i % args.pools;
            let n = node(&format!("node-{i:05}"), &pool_name(p), &targets[p].1, i % 3);
            async move {
                Api::<Node>::all(c.clone())
                    .create(&PostParams::default(), &n)
                    .await
                    .expect("create node");
            }
        })
        .await;
    wait_all_updated(c, &targets, per_pool).await;
    eprintln!(
        "{} nodes in {} pools created and counted in {:.1} s",
        args.nodes,
        args.pools,
        start.elapsed().as_secs_f64()
    );
    // Background tasks end with the benchmark.
    let _daemons = AbortOnDropHandle::new(instant_daemons(c));

    let mut per_wave = vec![];
    let mut after_render = vec![];
    for run in 0..args.runs {
        let start = Instant::now();
        for p in 0..args.pools {
            let name = pool_name(p);
            create_mc(
                c,
                &format!("50-{name}-bench-{run}"),
                &name,
                "/etc/bench",
                &run.to_string(),
            )
            .await;
        }
        let mut next = vec![];
        for (name, old) in &targets {
            let t = target_other_than(c, name, Some(old)).await;
            next.push((name.clone(), t));
        }
        let rendered = start.elapsed();
        targets = next;
        wait_all_updated(c, &targets, per_pool).await;
        let total = start.elapsed();
        let wave = total.as_secs_f64() * 1000.0 / waves as f64;
        let rollout = (total - rendered).as_secs_f64() * 1000.0 / waves as f64;
        println!(
            "run {run}: {:.2} s total ({:.2} s to render), {waves} waves of {budget}: \
             {wave:.0} ms per wave ({rollout:.0} ms per wave after render)",
            total.as_secs_f64(),
            rendered.as_secs_f64(),
        );
        per_wave.push(wave);
        after_render.push(rollout);
    }
    println!(
        "{} nodes, {} pools, maxUnavailable 10%: median {:.0} ms per wave ({:.0} ms after render) over {} runs",
        args.nodes,
        args.pools,
        median(&mut per_wave),
        median(&mut after_render),
        args.runs
    );

    if let Some(child) = &mut child {
        let outer = child.id().expect("controller pid");
        let pid = controller_pid(outer).unwrap_or(outer);
        let hwm = proc_status_kib(pid, "VmHWM").unwrap_or_default();
        let rss = proc_status_kib(pid, "VmRSS").unwrap_or_default();
        println!(
            "controller process: VmHWM {:.1} MiB, VmRSS {:.1} MiB",
            hwm as f64 / 1024.0,
            rss as f64 / 1024.0
        );
        if pid != outer {
            // Let the profiler see the controller end and close its file.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let _ = tokio::time::timeout(Duration::from_secs(120), child.wait()).await;
        }
        let _ = child.kill().await;
    }
}
