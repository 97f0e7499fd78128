//! Shared harness for the end-to-end suite: a real `mco up` in a temp dir, driven through the
//! real `kubectl` and `mco` CLIs, on either server ([`Server`]): its embedded API server on an
//! ephemeral port, or (`mco up --kubeconfig`) a real control plane started by
//! `scripts/real-kube` in the same temp dir. [`on_both_servers!`] turns a scenario into a test
//! for each.
//!
//! `scripts/real-kube` builds Kubernetes from Go modules on first use (slow cold, cached in
//! `target/real-kube/`). `MCO_SKIP_REAL_KUBE=1` skips the real variants with a line saying so;
//! CI never sets it. A missing Go toolchain on a cold build fails the test with the script's
//! message, never a silent skip.
//!
//! Every wait polls with a deadline; a `Cluster` is stopped (SIGINT, then
//! SIGKILL) when dropped so a failing test never leaks a process.
//!
//! The deadlines assume a cluster does not share the machine with many others: at most
//! `MCO_E2E_CLUSTERS` (default 2) clusters run at once. The whole suite is one test binary,
//! so the limit covers all of it. A test waits for its turn in `Cluster::up` before any of
//! its clocks start, and holds one cluster at a time, so tests cannot deadlock on turns.
#![allow(dead_code)]

use serde_json::Value;
use std::io::BufReader;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const MCO: &str = env!("CARGO_BIN_EXE_mco");
pub const IMAGE_122: &str = "registry.example.com/mco/machine-os-content:1.2.2";
pub const IMAGE_130: &str = "registry.example.com/mco/machine-os-content:1.3.0";
pub const DESIRED_ANN: &str = "machineconfiguration.openshift.io/desiredConfig";
pub const CURRENT_ANN: &str = "machineconfiguration.openshift.io/currentConfig";
pub const STATE_ANN: &str = "machineconfiguration.openshift.io/state";
pub const DESIRED_IMAGE_ANN: &str = "machineconfiguration.openshift.io/desiredImage";
pub const CURRENT_IMAGE_ANN: &str = "machineconfiguration.openshift.io/currentImage";

/// A cold build of Kubernetes by `scripts/real-kube` takes 15-45 minutes on 2 busy cores.
const REAL_KUBE_READY_SECS: u64 = 3600;

/// The API server a cluster runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// `mco up`'s own.
    Embedded,
    /// kube-apiserver with etcd, started by `scripts/real-kube`; `mco up --kubeconfig`.
    Real,
}

/// Options for one `mco up`.
#[derive(Clone, Debug)]
pub struct Opts {
    pub masters: u32,
    pub workers: u32,
    pub reboot_seconds: u32,
    pub node_processes: bool,
    pub server: Server,
    /// `mco up --crd` files: CRDs installed in place of mco's own.
    pub crds: Vec<PathBuf>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            masters: 1,
            workers: 2,
            reboot_seconds: 0,
            node_processes: false,
            server: Server::Embedded,
            crds: crds_from_env(),
        }
    }
}

/// `MCO_E2E_CRDS=FILE[:FILE…]` runs every cluster of the suite on these CRDs (e.g. upstream's
/// MachineConfigNode schema of an OpenShift release) instead of mco's own.
fn crds_from_env() -> Vec<PathBuf> {
    std::env::var_os("MCO_E2E_CRDS")
        .map(|v| {
            std::env::split_paths(&v)
                .map(|p| repo_root().join(p))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `MCO_SKIP_REAL_KUBE=1` asks to skip the real-server tests; says so when it does.
pub fn skip_real() -> bool {
    let skip = std::env::var_os("MCO_SKIP_REAL_KUBE").is_some_and(|v| v == "1");
    if skip {
        eprintln!("SKIPPED: MCO_SKIP_REAL_KUBE=1, not starting scripts/real-kube");
    }
    skip
}

/// Two tests for each scenario `fn NAME(server: Server)`: `NAME::embedded` and `NAME::real`
/// (skipped, saying so, with `MCO_SKIP_REAL_KUBE=1`).
macro_rules! on_both_servers {
    ($($scenario:ident),+ $(,)?) => {$(
        mod $scenario {
            #[test]
            fn embedded() {
                super::$scenario($crate::e2e::Server::Embedded)
            }

            #[test]
            fn real() {
                if $crate::e2e::skip_real() {
                    return;
                }
                super::$scenario($crate::e2e::Server::Real)
            }
        }
    )+};
}
pub(crate) use on_both_servers;

/// A running `mco up` in its own temp dir.
/// A worker MachineConfig the render refuses (an unknown extension): the pool turns
/// `RenderDegraded` and keeps its target.
pub const BAD_WORKER_MC: &str = "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 60-worker-bad
  labels:
    machineconfiguration.openshift.io/role: worker
spec:
  extensions: [bogus]
  config:
    ignition:
      version: 3.2.0
";

pub struct Cluster {
    pub dir: PathBuf,
    pub data: PathBuf,
    pub opts: Opts,
    child: Option<Child>,
    starts: u32,
    // The real control plane, stopped in `Drop` after `mco up` and before the dir is removed.
    kube: Option<RealKube>,
    // Released after `Drop` has stopped the process (fields drop after `drop`).
    _slot: Slot,
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// How many clusters may run at once in the suite: `MCO_E2E_CLUSTERS`, default 2.
pub fn max_clusters() -> usize {
    std::env::var("MCO_E2E_CLUSTERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2)
}

/// Clusters running now, against `max_clusters()`.
static RUNNING: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// One cluster's place among the `max_clusters()`; given back on drop. A test that runs a
/// cluster of its own outside [`Cluster::up`] (the real-server test) takes one too.
pub struct Slot;

impl Slot {
    pub fn take() -> Slot {
        let max = max_clusters();
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= max {
            running = FREED.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        *running += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        FREED.notify_one();
    }
}

/// A fresh temp dir for one test's cluster.
pub fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mco-e2e-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Cluster {
    /// Waits for a slot (see `max_clusters`), starts the real control plane if asked,
    /// starts `mco up` and waits until every node is Ready and every pool is Updated.
    pub fn up(opts: Opts) -> Cluster {
        let slot = Slot::take();
        let dir = tempdir();
        let data = dir.join(".mco");
        let kube = (opts.server == Server::Real).then(|| RealKube::start(&dir));
        let mut c = Cluster {
            dir,
            data,
            opts,
            child: None,
            starts: 0,
            kube,
            _slot: slot,
        };
        if c.kube.is_some() {
            // The embedded cluster's own workload; the real cluster's controllers run it.
            c.apply(&web_workload());
        }
        c.start();
        let n = (c.opts.masters + c.opts.workers) as usize;
        c.wait_nodes_ready(n, 120);
        c.wait_pool_settled("master", 120);
        c.wait_pool_settled("worker", 120);
        // Every daemon has reported: on the real server a daemon starts once its token's pod
        // is scheduled, which may be after the pools settled on the nodes' first boot.
        wait_for(&format!("{n} MachineConfigNodes Updated"), 60, || {
            let mcns = c.try_get_json(&["machineconfignodes"])?;
            let items = mcns["items"].as_array()?;
            let updated = items
                .iter()
                .filter(|m| condition_status(m, "Updated") == "True")
                .count();
            (items.len() == n && updated == n).then_some(())
        });
        c
    }

    pub fn server(&self) -> Server {
        self.opts.server
    }

    /// Starts (or restarts) the `mco up` process on the same data dir.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("up-{}.log", self.starts)))
            .unwrap();
        self.starts += 1;
        let mut cmd = Command::new(MCO);
        cmd.current_dir(&self.dir)
            .args(["up", "--data-dir"])
            .arg(&self.data)
            .args(["--masters", &self.opts.masters.to_string()])
            .args(["--workers", &self.opts.workers.to_string()])
            .args(["--reboot-seconds", &self.opts.reboot_seconds.to_string()])
            // Clusters run side by side: each machine config server on a port of its own.
            .args(["--mcs-listen", "127.0.0.1:0"])
            // … and each dashboard too.
            .args(["--dashboard-listen", "127.0.0.1:0"]);
        match &self.kube {
            Some(kube) => cmd.arg("--kubeconfig").arg(&kube.kubeconfig),
            None => cmd.args(["--listen", "127.0.0.1:0"]),
        };
        cmd.env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if self.opts.node_processes {
            cmd.arg("--node-processes");
        }
        for crd in &self.opts.crds {
            cmd.arg("--crd").arg(crd);
        }
        let kc = self.kubeconfig();
        let before = std::fs::metadata(&kc).and_then(|m| m.modified()).ok();
        self.child = Some(cmd.spawn().expect("spawn mco up"));
        if self.kube.is_none() {
            // The kubeconfig of a previous run names the old port: wait for a fresh one.
            wait_for("kubeconfig written", 60, || {
                self.check_running();
                let m = std::fs::metadata(&kc).and_then(|m| m.modified()).ok()?;
                (before.is_none() || Some(m) != before).then_some(())
            });
        }
        wait_for("API server answers", 60, || {
            self.kubectl_try(&["get", "--raw", "/readyz"]).ok()
        });
    }

    /// Stops `mco up`: SIGINT, then SIGKILL after a deadline.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Panics with its log if `mco up` has ended on its own.
    pub fn check_running(&self) {
        let Some(child) = &self.child else { return };
        // `try_wait` needs `&mut`; a process that has exited but is not reaped is a zombie,
        // whose /proc stat state is `Z`.
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next());
        if state == Some("Z") || stat.is_empty() {
            let log = self.dir.join(format!("up-{}.log", self.starts - 1));
            panic!(
                "mco up ended on its own:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }

    /// The dashboard's `http://ADDR/` as the running `mco up` printed it.
    pub fn dashboard_url(&self) -> String {
        let log = self.dir.join(format!("up-{}.log", self.starts - 1));
        wait_for("mco up to print the dashboard's URL", 30, || {
            mco_testkit::browser::dashboard_url(&std::fs::read_to_string(&log).ok()?)
        })
    }

    /// GET `path` from the dashboard: the status code and body.
    pub fn dashboard_get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let url = self.dashboard_url();
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (code, body)
    }

    /// The pid of the running `mco up`.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILLs `mco up` (a crash, not a clean stop).
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// kubectl's discovery cache for this cluster. The default one is shared and keyed by
    /// host and port: a later cluster on a reused port, serving other versions (an upstream
    /// CRD's), would be read through the earlier one's resources.
    pub fn kube_cache(&self) -> PathBuf {
        self.dir.join("kube-cache")
    }

    /// The admin kubeconfig: the embedded cluster's in its data dir, or real-kube's.
    pub fn kubeconfig(&self) -> PathBuf {
        match &self.kube {
            Some(kube) => kube.kubeconfig.clone(),
            None => self.data.join("kubeconfig"),
        }
    }

    /// The kubeconfig a node's daemon runs with: its identity, bound to its node. Waits for
    /// it: on the real server the token is bound to a DaemonSet pod, which may be scheduled
    /// after the pools settled.
    pub fn daemon_kubeconfig(&self, node: &str) -> PathBuf {
        let path = self.data.join("kubeconfigs").join(format!("node-{node}"));
        wait_for(&format!("{node}'s daemon kubeconfig"), 60, || {
            let len = std::fs::metadata(&path).ok()?.len();
            (len > 0).then_some(())
        });
        path
    }

    pub fn node_root(&self, node: &str) -> PathBuf {
        self.data.join("nodes").join(node)
    }

    pub fn workers(&self) -> Vec<String> {
        (0..self.opts.workers)
            .map(|i| format!("worker-{i}"))
            .collect()
    }

    /// Sets the sim's `web` budget to `minAvailable` (3 holds every drain that meets a web pod,
    /// 2 is the sim's own and lets drains go on). Holding waits for the three web pods to be
    /// Ready first: an unready pod may always be evicted, and a cluster just up may still be
    /// starting them.
    pub fn set_web_budget(&self, min_available: u32) {
        let patch = format!(r#"{{"spec":{{"minAvailable":{min_available}}}}}"#);
        self.kubectl(&[
            "patch",
            "pdb",
            "web",
            "-n",
            "default",
            "--type=merge",
            "-p",
            &patch,
        ]);
        if min_available < 3 {
            return;
        }
        // Ready pods, by the node each runs on.
        let ready_on = || -> Option<Vec<String>> {
            let pods = self.try_get_json(&["pods", "-n", "default", "-l", "app=web"])?;
            Some(
                pods["items"]
                    .as_array()?
                    .iter()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .filter(|p| condition_status(p, "Ready") == "True")
                    .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_owned))
                    .collect(),
            )
        };
        let nodes = wait_for("the three web pods Ready", 60, || {
            ready_on().filter(|n| n.len() == 3)
        });
        // A drain can only be held where a web pod runs. Pods scheduled while the workers were
        // cordoned for their first boot all run on masters; moved, they prefer the workers.
        if !nodes.iter().any(|n| n.starts_with("worker")) {
            self.kubectl(&[
                "delete",
                "pods",
                "-n",
                "default",
                "-l",
                "app=web",
                "--wait=false",
            ]);
            wait_for("three web pods Ready, one on a worker", 60, || {
                ready_on()
                    .filter(|n| n.len() == 3 && n.iter().any(|n| n.starts_with("worker")))
                    .map(drop)
            });
        }
    }

    /// Runs kubectl; Err carries stderr.
    pub fn kubectl_try(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_as(&self.kubeconfig(), args)
    }

    /// Runs kubectl with another kubeconfig (identity); Err carries stderr.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .env("KUBECACHEDIR", self.kube_cache())
            .args(args)
            .output()
            .expect("kubectl on PATH");
        to_result(out)
    }

    /// Runs kubectl and panics with its stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_try(args)
            .unwrap_or_else(|e| panic!("kubectl {args:?} failed: {e}"))
    }

    /// Pipes YAML (or JSON) into `kubectl apply -f -`.
    pub fn apply(&self, manifest: &str) -> String {
        self.apply_try(manifest)
            .unwrap_or_else(|e| panic!("kubectl apply failed: {e}\n{manifest}"))
    }

    /// Pipes YAML (or JSON) into `kubectl apply -f -`; Err carries stderr.
    pub fn apply_try(&self, manifest: &str) -> Result<String, String> {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .env("KUBECONFIG", self.kubeconfig())
            .env("KUBECACHEDIR", self.kube_cache())
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.as_bytes())
            .unwrap();
        to_result(child.wait_with_output().unwrap())
    }

    /// Runs a shell line with KUBECONFIG set (for pipelines such as the seed's `jq` filter).
    pub fn sh(&self, line: &str) -> String {
        let out = Command::new("bash")
            .env("KUBECONFIG", self.kubeconfig())
            .env("KUBECACHEDIR", self.kube_cache())
            .args(["-c", line])
            .output()
            .unwrap();
        to_result(out).unwrap_or_else(|e| panic!("bash -c {line:?} failed: {e}"))
    }

    /// Runs `mco ARGS`; returns (success, stdout + stderr).
    pub fn mco(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(MCO)
            .current_dir(&self.dir)
            .env("KUBECONFIG", self.kubeconfig())
            .args(args)
            .output()
            .unwrap();
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), s)
    }

    /// Runs `mco sim ARGS --data-dir DATA`, panicking on failure.
    pub fn sim(&self, args: &[&str]) -> String {
        let data = self.data.to_string_lossy().into_owned();
        let mut all = vec!["sim", "--data-dir", &data];
        all.extend_from_slice(args);
        let (ok, out) = self.mco(&all);
        assert!(ok, "mco {all:?} failed: {out}");
        out
    }

    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).unwrap()
    }

    pub fn try_get_json(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl_try(&a).ok()?).ok()
    }

    pub fn pool(&self, name: &str) -> Value {
        self.get_json(&["mcp", name])
    }

    /// The rendered config the pool targets now.
    pub fn pool_target(&self, name: &str) -> String {
        self.pool(name)["spec"]["configuration"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Pauses or unpauses a pool as an administrator would (`kubectl patch mcp`); the pool's
    /// `metadata.generation` after the patch, which a status that saw it has observed.
    pub fn set_paused(&self, pool: &str, paused: bool) -> i64 {
        let patch = serde_json::json!({"spec": {"paused": paused}}).to_string();
        let generation = self.kubectl(&[
            "patch",
            "mcp",
            pool,
            "--type=merge",
            "-p",
            &patch,
            "-o",
            "jsonpath={.metadata.generation}",
        ]);
        generation
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("pool {pool}'s generation {generation:?}: {e}"))
    }

    pub fn wait_nodes_ready(&self, n: usize, secs: u64) {
        wait_for(&format!("{n} nodes Ready"), secs, || {
            self.check_running();
            let nodes = self.try_get_json(&["nodes"])?;
            let items = nodes["items"].as_array()?;
            let ready = items.iter().filter(|n| node_ready(n)).count();
            (items.len() == n && ready == n).then_some(())
        });
    }

    /// Waits until the pool is Updated with every machine on its target.
    pub fn wait_pool_settled(&self, name: &str, secs: u64) -> String {
        wait_for(&format!("pool {name} settled"), secs, || {
            let p = self.try_get_json(&["mcp", name])?;
            pool_settled(&p)
        })
    }

    /// Waits until the pool targets a rendered config other than `old`, then until it has rolled out.
    pub fn wait_rollout(&self, name: &str, old: &str, secs: u64) -> String {
        let start = Instant::now();
        let new = wait_for(&format!("pool {name} leaves {old}"), secs, || {
            let t = self.pool_target(name);
            (!t.is_empty() && t != old).then_some(t)
        });
        let left = secs.saturating_sub(start.elapsed().as_secs()).max(5);
        let done = self.wait_pool_settled(name, left);
        assert_eq!(done, new, "pool {name} settled on another config");
        new
    }

    pub fn node(&self, name: &str) -> Value {
        self.get_json(&["node", name])
    }

    pub fn mcn(&self, name: &str) -> Value {
        self.get_json(&["machineconfignode", name])
    }

    pub fn boot_id(&self, node: &str) -> String {
        std::fs::read_to_string(self.node_root(node).join("proc/sys/kernel/random/boot_id"))
            .unwrap()
            .trim()
            .to_owned()
    }

    pub fn read_node_file(&self, node: &str, path: &str) -> Option<String> {
        std::fs::read_to_string(self.node_root(node).join(path.trim_start_matches('/'))).ok()
    }

    /// The simulated ostree's state of a node.
    pub fn ostree(&self, node: &str) -> Value {
        let s = std::fs::read_to_string(self.node_root(node).join("var/lib/mco-sim/ostree.json"))
            .unwrap();
        serde_json::from_str(&s).unwrap()
    }

    /// The simulated ostree's booted deployment of a node (`null` when there is none).
    pub fn booted_deployment(&self, node: &str) -> Value {
        let v = self.ostree(node);
        v["deployments"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["booted"] == true)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Merge-patches the ControllerConfig's spec with `spec`, as an administrator would.
    pub fn patch_controller_config(&self, spec: serde_json::Value) {
        let patch = serde_json::json!({ "spec": spec }).to_string();
        self.kubectl(&[
            "patch",
            "controllerconfig",
            "machine-config-controller",
            "--type=merge",
            "-p",
            &patch,
        ]);
    }

    /// Sets the ControllerConfig's OS image (both fields, as a release would).
    pub fn set_os_image(&self, image: &str) {
        self.patch_controller_config(
            serde_json::json!({"osImageURL": image, "baseOSContainerImage": image}),
        );
    }

    /// An administrator's pull secret for `quay.example.com` (user `ops`, password `s3cret`:
    /// `b3BzOnMzY3JldA==` in the file) in the install namespace, named by the ControllerConfig.
    pub fn set_pull_secret(&self) {
        self.kubectl(&[
            "create",
            "secret",
            "docker-registry",
            "pull-secret",
            "-n",
            "mco-system",
            "--docker-server=quay.example.com",
            "--docker-username=ops",
            "--docker-password=s3cret",
        ]);
        self.patch_controller_config(
            serde_json::json!({"pullSecret": {"namespace": "mco-system", "name": "pull-secret"}}),
        );
    }

    /// Starts `kubectl get RESOURCE -w -o json` and collects every object it prints.
    pub fn watch(&self, resource: &str) -> Watch {
        let mut child = Command::new("kubectl")
            .env("KUBECONFIG", self.kubeconfig())
            .env("KUBECACHEDIR", self.kube_cache())
            .args(["get", resource, "-w", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            let de = serde_json::Deserializer::from_reader(BufReader::new(out));
            for v in de.into_iter::<Value>() {
                let Ok(v) = v else { break };
                let mut s = sink.lock().unwrap();
                match v["items"].as_array() {
                    Some(items) if v["kind"] == "List" => s.extend(items.iter().cloned()),
                    _ => s.push(v),
                }
            }
        });
        Watch { child, events }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        // Before the dir goes: etcd and the API server write into it.
        drop(self.kube.take());
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("cluster dir kept for inspection: {}", self.dir.display());
        }
    }
}

/// The embedded cluster's `web` workload (mco-sim's `workload` module), for the real server:
/// a Deployment of 3 replicas behind a PodDisruptionBudget of `minAvailable: 2`, so drains
/// meet pods they must evict one at a time. Like the embedded one it prefers workers, spread
/// across them, and goes to a master when no worker is schedulable: a node forcing its own
/// update (seed 000) may drain while another worker does.
pub fn web_workload() -> String {
    "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference: {matchExpressions: [{key: node-role.kubernetes.io/worker, operator: Exists}]}
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers: [{name: web, image: registry.example.com/sim/web:1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
"
    .to_owned()
}

/// A child in its own process group, stopped as a group on drop: SIGTERM (real-kube stops its
/// components on it), then SIGKILL after a deadline.
pub struct Group {
    child: Child,
    what: &'static str,
}

impl Group {
    pub fn spawn(mut cmd: Command, log: &Path, what: &'static str) -> Group {
        let out = std::fs::File::create(log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
        Group { child, what }
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        signal("TERM", &group);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.exited().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.exited().is_none() {
            eprintln!("{} did not stop on SIGTERM; killing its group", self.what);
        }
        // The group's stragglers too.
        signal("KILL", &group);
        let _ = self.child.wait();
    }
}

/// `kill -SIG -- -PGID`: our child's whole group, by its id (no unsafe code in this crate).
fn signal(sig: &str, group: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", group])
        .stderr(Stdio::null())
        .status();
}

/// The workspace root (scripts, docs).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// A running `scripts/real-kube` (etcd, kube-apiserver, controller manager, scheduler) with
/// its state in `DIR/kube`; stopped, with every component, on drop.
pub struct RealKube {
    pub kubeconfig: PathBuf,
    _group: Group,
}

impl RealKube {
    /// Starts it in `dir`, waiting until it is ready; panics with its log if it ends first
    /// (a missing Go toolchain on a cold build, for one).
    pub fn start(dir: &Path) -> RealKube {
        let state = dir.join("kube");
        std::fs::create_dir_all(&state).unwrap();
        let log = dir.join("real-kube.log");
        let mut cmd = Command::new(repo_root().join("scripts/real-kube"));
        cmd.arg(&state);
        let mut g = Group::spawn(cmd, &log, "real-kube");
        wait_for("real-kube ready", REAL_KUBE_READY_SECS, || {
            if let Some(status) = g.exited() {
                panic!(
                    "scripts/real-kube ended ({status}) before it was ready:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            let text = std::fs::read_to_string(&log).ok()?;
            text.contains("real-kube: ready, KUBECONFIG=").then_some(())
        });
        RealKube {
            kubeconfig: state.join("kubeconfig"),
            _group: g,
        }
    }
}

/// A running `kubectl get -w -o json`; killed on drop.
pub struct Watch {
    child: Child,
    events: Arc<Mutex<Vec<Value>>>,
}

impl Watch {
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until at least `n` objects were printed (the initial listing).
    pub fn wait_initial(&self, n: usize) {
        wait_for("watch initial listing", 30, || {
            (self.events.lock().unwrap().len() >= n).then_some(())
        });
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn to_result(out: Output) -> Result<String, String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Polls `f` every 100 ms until it returns Some, or panics after `secs`.
pub fn wait_for<T>(what: &str, secs: u64, f: impl FnMut() -> Option<T>) -> T {
    mco_testkit::eventually_blocking(
        what,
        Duration::from_secs(secs),
        Duration::from_millis(100),
        f,
    )
}

pub fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

pub fn condition_status(obj: &Value, ty: &str) -> String {
    condition(obj, ty)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_owned()
}

pub fn condition_message(obj: &Value, ty: &str) -> String {
    condition(obj, ty)
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_owned()
}

pub fn node_ready(n: &Value) -> bool {
    condition_status(n, "Ready") == "True"
}

pub fn annotation(obj: &Value, key: &str) -> String {
    obj["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// A node counts as unavailable when it is cordoned, not Ready, or not on its desired config
/// or (in on-cluster image mode) its desired image.
pub fn node_unavailable(n: &Value) -> bool {
    n["spec"]["unschedulable"].as_bool().unwrap_or(false)
        || !node_ready(n)
        || annotation(n, DESIRED_ANN) != annotation(n, CURRENT_ANN)
        || annotation(n, DESIRED_IMAGE_ANN) != annotation(n, CURRENT_IMAGE_ANN)
}

/// The most nodes `counted` unavailable at once over a node watch's `events`.
pub fn most_unavailable(events: &[Value], counted: impl Fn(&Value) -> bool) -> usize {
    let mut state: std::collections::BTreeMap<String, bool> = Default::default();
    let mut worst = 0;
    for ev in events.iter().filter(|ev| counted(ev)) {
        let name = ev["metadata"]["name"].as_str().unwrap_or_default();
        state.insert(name.to_owned(), node_unavailable(ev));
        worst = worst.max(state.values().filter(|u| **u).count());
    }
    worst
}

/// The pool's target when it is Updated with every machine on it.
pub fn pool_settled(p: &Value) -> Option<String> {
    let target = p["spec"]["configuration"]["name"].as_str()?.to_owned();
    let st = &p["status"];
    let ok = condition_status(p, "Updated") == "True"
        && st["configuration"]["name"].as_str() == Some(target.as_str())
        && st["machineCount"].as_u64().is_some()
        && st["updatedMachineCount"] == st["machineCount"]
        && st["readyMachineCount"] == st["machineCount"];
    ok.then_some(target)
}

/// A MachineConfig holding one file, as YAML for `kubectl apply`.
pub fn file_mc(name: &str, role: &str, path: &str, contents: &str) -> String {
    let enc: String = contents
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!(
        "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: {name}
  labels:
    machineconfiguration.openshift.io/role: {role}
spec:
  config:
    ignition:
      version: 3.2.0
    storage:
      files:
      - path: {path}
        mode: 420
        overwrite: true
        contents:
          source: data:,{enc}
"
    )
}

/// The repository's `examples/` directory.
pub fn example(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
