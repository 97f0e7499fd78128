//! `mco up --kubeconfig` on a real Kubernetes control plane (`scripts/real-kube`): the
//! controller and simulated nodes roll out a MachineConfig applied with the real kubectl,
//! and the shipped admission policy, fed by the real API server's node-name claim, denies a
//! daemon another node's MachineConfigNode.
//!
//! `scripts/real-kube` builds Kubernetes from Go modules on first use (slow cold, cached in
//! `target/real-kube/`). `MCO_SKIP_REAL_KUBE=1` skips this test with a line saying so; CI
//! never sets it. A missing Go toolchain on a cold build fails the test with the script's
//! message, never a silent skip.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::e2e::{Slot, wait_for};

const MCO: &str = env!("CARGO_BIN_EXE_mco");
/// A cold build of Kubernetes takes 15-45 minutes on 2 busy cores.
const REAL_KUBE_READY_SECS: u64 = 3600;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// A child in its own process group, stopped as a group on drop: SIGTERM (real-kube stops its
/// components on it; mco up stops its nodes), then SIGKILL after a deadline.
struct Group {
    child: Child,
    what: &'static str,
}

impl Group {
    fn spawn(mut cmd: Command, log: &Path, what: &'static str) -> Group {
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

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
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

struct Env {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Env {
    fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("kubectl on PATH");
        if let Some(text) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn get_json(&self, args: &[&str]) -> Option<Value> {
        let mut full = vec!["get"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["-o", "json"]);
        let out = self.kubectl_as(&self.kubeconfig, &full, None);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }
}

fn condition_status(obj: &Value, ty: &str) -> String {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The pool's target when it is Updated with every machine on it.
fn pool_settled(p: &Value) -> Option<String> {
    let target = p["spec"]["configuration"]["name"].as_str()?.to_owned();
    let st = &p["status"];
    let ok = condition_status(p, "Updated") == "True"
        && st["configuration"]["name"].as_str() == Some(target.as_str())
        && st["machineCount"].as_u64().is_some_and(|n| n > 0)
        && st["updatedMachineCount"] == st["machineCount"]
        && st["readyMachineCount"] == st["machineCount"];
    ok.then_some(target)
}

/// Starts `scripts/real-kube` in `dir`, waiting until it is ready; panics with its log if it
/// ends first (a missing Go toolchain on a cold build, for one).
fn real_kube(dir: &Path) -> (Group, PathBuf) {
    let state = dir.join("kube");
    std::fs::create_dir_all(&state).unwrap();
    let log = dir.join("real-kube.log");
    let mut cmd = Command::new(repo_root().join("scripts/real-kube"));
    cmd.arg(&state);
    let mut g = Group::spawn(cmd, &log, "real-kube");
    let kubeconfig = state.join("kubeconfig");
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
    (g, kubeconfig)
}

#[test]
fn up_on_a_real_cluster_rolls_out_and_confines_daemons() {
    // A real control plane and a simulated fleet: one of the suite's cluster places.
    let _slot = Slot::take();
    if std::env::var_os("MCO_SKIP_REAL_KUBE").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED: MCO_SKIP_REAL_KUBE=1, not starting scripts/real-kube");
        return;
    }
    let dir = tempdir();
    let (_kube, kubeconfig) = real_kube(&dir);
    let env = Env {
        dir: dir.clone(),
        kubeconfig: kubeconfig.clone(),
    };
    refuses_bad_input_and_changes_nothing(&env);

    let data = dir.join(".mco");
    let mut up = Command::new(MCO);
    up.current_dir(&dir)
        .args(["up", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--data-dir")
        .arg(&data)
        .args(["--masters", "1", "--workers", "2", "--reboot-seconds", "0"])
        .env("RUST_LOG", "info");
    let up_log = dir.join("up.log");
    let mut up = Group::spawn(up, &up_log, "mco up");
    let log = || std::fs::read_to_string(&up_log).unwrap_or_default();

    wait_for("3 simulated nodes Ready", 120, || {
        if let Some(status) = up.exited() {
            panic!("mco up ended ({status}):\n{}", log());
        }
        let nodes = env.get_json(&["nodes", "-l", "mco.sim/simulated=true"])?;
        let items = nodes["items"].as_array()?;
        let ready = items
            .iter()
            .filter(|n| condition_status(n, "Ready") == "True")
            .count();
        (items.len() == 3 && ready == 3).then_some(())
    });
    let old = wait_for("pools updated", 120, || {
        let m = env.get_json(&["mcp", "master"])?;
        pool_settled(&m)?;
        pool_settled(&env.get_json(&["mcp", "worker"])?)
    });

    let out = env.kubectl_as(
        &kubeconfig,
        &[
            "apply",
            "-f",
            repo_root()
                .join("examples/99-worker-motd.yaml")
                .to_str()
                .unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "kubectl apply: {:?}", out);
    let new = wait_for("worker pool targets a new config", 60, || {
        let p = env.get_json(&["mcp", "worker"])?;
        let t = p["spec"]["configuration"]["name"].as_str()?.to_owned();
        (t != old).then_some(t)
    });
    for node in ["worker-0", "worker-1"] {
        wait_for(&format!("{node}'s MachineConfigNode on {new}"), 120, || {
            let mcn = env.get_json(&["machineconfignode", node])?;
            (mcn["status"]["configVersion"]["current"].as_str() == Some(new.as_str())
                && condition_status(&mcn, "Updated") == "True")
                .then_some(())
        });
        let motd = std::fs::read_to_string(data.join("nodes").join(node).join("etc/motd"))
            .unwrap_or_else(|e| panic!("{node}'s /etc/motd: {e}\n{}", log()));
        assert!(motd.contains("Managed by mco."), "{node}'s motd: {motd:?}");
    }
    wait_for("worker pool settled on the new config", 60, || {
        let p = env.get_json(&["mcp", "worker"])?;
        (pool_settled(&p)? == new).then_some(())
    });

    // worker-0's daemon identity writes worker-1's MachineConfigNode: the real server's
    // node-name claim and the shipped policy refuse it.
    let daemon_kc = data.join("kubeconfigs/node-worker-0");
    let patch = r#"{"metadata":{"labels":{"mco-e2e/probe":"x"}}}"#;
    let other = env.kubectl_as(
        &daemon_kc,
        &[
            "patch",
            "machineconfignode",
            "worker-1",
            "--type",
            "merge",
            "-p",
            patch,
        ],
        None,
    );
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success(), "worker-0 wrote worker-1's MCN");
    // The shipped validations name no `reason`, so the real server answers 422 Invalid
    // (the embedded server answers 403); either way the policy's message says why.
    assert!(
        err.contains("ValidatingAdmissionPolicy 'mco-mcn-guards'")
            && err.contains("can only be done from the MCN's owner node"),
        "unexpected refusal: {err}"
    );
    // Its own is allowed, so the refusal above is the policy's, not RBAC's.
    let own = env.kubectl_as(
        &daemon_kc,
        &[
            "patch",
            "machineconfignode",
            "worker-0",
            "--type",
            "merge",
            "-p",
            patch,
        ],
        None,
    );
    assert!(
        own.status.success(),
        "worker-0 could not write its own MCN: {}",
        String::from_utf8_lossy(&own.stderr)
    );
    drop(up);
    let _ = std::fs::remove_dir_all(&env.dir);
}

/// `mco up --kubeconfig` fails with a clear error, and nothing is written: neither the
/// cluster (no `mco-system` namespace) nor the data dir.
fn refuses_bad_input_and_changes_nothing(env: &Env) {
    let data = env.dir.join("refused");
    let try_up = |kubeconfig: &Path| -> String {
        let out = Command::new(MCO)
            .args(["up", "--kubeconfig"])
            .arg(kubeconfig)
            .arg("--data-dir")
            .arg(&data)
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "mco up accepted bad input: {err}");
        assert!(!data.exists(), "a refused mco up created its data dir");
        let ns = env.kubectl_as(&env.kubeconfig, &["get", "namespace", "mco-system"], None);
        assert!(
            !ns.status.success(),
            "a refused mco up created its namespace"
        );
        err
    };
    let admin = std::fs::read_to_string(&env.kubeconfig).unwrap();
    let kc = |name: &str, text: String| {
        let p = env.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let apply = |yaml: &str| {
        let out = env.kubectl_as(&env.kubeconfig, &["apply", "-f", "-"], Some(yaml));
        assert!(out.status.success(), "kubectl apply: {out:?}");
    };

    // An unreachable server: the same kubeconfig on a port nothing listens on.
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    let err = try_up(&kc(
        "unreachable",
        admin.replace(&server, "https://127.0.0.1:1"),
    ));
    assert!(err.contains("did not answer"), "{err}");

    // An identity without the rights to install.
    apply("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: nobody, namespace: default}\n");
    let out = env.kubectl_as(
        &env.kubeconfig,
        &["create", "token", "nobody", "-n", "default"],
        None,
    );
    assert!(out.status.success(), "kubectl create token: {out:?}");
    let token = String::from_utf8(out.stdout).unwrap();
    let nobody = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: nobody\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: nobody}}\ncurrent-context: c\n",
        token.trim()
    );
    let err = try_up(&kc("nobody", nobody));
    assert!(
        err.contains("lacks rights")
            && err.contains("create apiextensions.k8s.io/customresourcedefinitions"),
        "{err}"
    );

    // Another machine-config operator.
    apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: openshift-machine-config-operator}\n");
    let upstream = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: machine-config-operator, namespace: openshift-machine-config-operator}\nspec:\n  replicas: 0\n  selector: {matchLabels: {k8s-app: machine-config-operator}}\n  template:\n    metadata: {labels: {k8s-app: machine-config-operator}}\n    spec: {containers: [{name: operator, image: quay.io/openshift/mco:none}]}\n";
    apply(upstream);
    let err = try_up(&env.kubeconfig);
    assert!(
        err.contains("another machine-config operator")
            && err.contains("openshift-machine-config-operator/machine-config-operator"),
        "{err}"
    );
    let out = env.kubectl_as(
        &env.kubeconfig,
        &[
            "delete",
            "deployment",
            "machine-config-operator",
            "-n",
            "openshift-machine-config-operator",
        ],
        None,
    );
    assert!(out.status.success(), "{out:?}");

    // A real node with a simulated node's name.
    apply("apiVersion: v1\nkind: Node\nmetadata: {name: worker-1}\n");
    let err = try_up(&env.kubeconfig);
    assert!(
        err.contains("real nodes") && err.contains("worker-1"),
        "{err}"
    );
    let out = env.kubectl_as(&env.kubeconfig, &["delete", "node", "worker-1"], None);
    assert!(out.status.success(), "{out:?}");
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mco-e2e-real-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
