//! The server driven by the real kubectl (the commands of the kubectl reference).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use mco_apiserver::Identity;
use serde_json::{Value, json};

struct Kubectl {
    bin: String,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Kubectl {
    fn new(bin: &str, kubeconfig: &Path) -> Kubectl {
        Kubectl {
            bin: bin.to_string(),
            kubeconfig: kubeconfig.to_path_buf(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .arg(format!(
                "--cache-dir={}",
                self.home.path().join("cache").display()
            ))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.home.path());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", self.bin))
    }

    /// Runs and expects success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(
            o.status.success(),
            "{} {args:?} failed:\nstdout: {out}\nstderr: {err}",
            self.bin
        );
        out.to_string()
    }

    /// Runs and expects failure; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            !o.status.success(),
            "{} {args:?} unexpectedly succeeded: {}",
            self.bin,
            String::from_utf8_lossy(&o.stdout)
        );
        String::from_utf8_lossy(&o.stderr).to_string()
    }
}

fn data(file: &str) -> String {
    format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"))
}

fn write(dir: &Path, name: &str, contents: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, contents).unwrap();
    p.display().to_string()
}

async fn seed_node(client: &kube::Client, name: &str) -> Node {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/hostname": name}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}],
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "RHCOS", "kernelVersion": "5.14", "containerRuntimeVersion": "cri-o://1.32",
                "architecture": "amd64", "bootID": "b", "kubeProxyVersion": "", "machineID": "m", "operatingSystem": "linux", "systemUUID": "s"}
        }
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reference_commands() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    seed_node(&client, "worker-0").await;
    let k = Kubectl::new("kubectl", &s.handle.kubeconfig_path());
    let tmp = tempfile::tempdir().unwrap();

    // get, with the built-in node printer.
    let out = k.ok(&["get", "nodes"]);
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row[2], row[4]),
        ("worker-0", "Ready", "worker", "v1.32.0")
    );
    assert!(k.ok(&["get", "nodes", "-o", "wide"]).contains("10.0.0.10"));
    assert!(
        k.ok(&["get", "node", "worker-0", "-o", "yaml"])
            .contains("name: worker-0")
    );
    let j: Value = serde_json::from_str(&k.ok(&["get", "nodes", "-o", "json"])).unwrap();
    assert_eq!(j["items"][0]["metadata"]["name"], "worker-0");
    assert!(
        k.ok(&["describe", "node", "worker-0"])
            .contains("Name:               worker-0")
    );

    // CRD and a custom resource: client-side and server-side apply.
    assert!(
        k.ok(&["apply", "-f", &data("mcn-crd.yaml")])
            .contains("created")
    );
    assert!(
        k.ok(&["apply", "-f", &data("mcn-worker-0.yaml")])
            .contains("machineconfignode.machineconfiguration.openshift.io/worker-0 created")
    );
    assert!(
        k.ok(&["apply", "-f", &data("mcn-worker-0.yaml")])
            .contains("unchanged")
    );
    assert!(
        k.ok(&["apply", "--server-side", "-f", &data("mcn-worker-0.yaml")])
            .contains("serverside-applied")
    );
    let out = k.ok(&["get", "mcn"]);
    assert_eq!(
        out.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        "NAME UPDATED UPDATEPREPARED UPDATEEXECUTED UPDATEPOSTACTIONCOMPLETED UPDATECOMPLETED RESUMED"
    );
    assert!(
        k.ok(&["get", "mcn", "-o", "wide"])
            .lines()
            .next()
            .unwrap()
            .contains("UPDATECOMPATIBLE")
    );
    assert!(
        k.ok(&["get", "machineconfignode", "worker-0", "-o", "yaml"])
            .contains("desired: rendered-worker-1")
    );
    assert!(
        k.ok(&["describe", "mcn", "worker-0"])
            .contains("Kind:         MachineConfigNode")
    );
    assert!(k.ok(&["get", "machineconfiguration"]).contains("worker-0"));

    // patch, no-op patch, label, label selectors, the seed's jq pipeline.
    let p = r#"{"spec":{"kernelType":"realtime"}}"#;
    assert!(
        k.ok(&["patch", "mcn", "worker-0", "--type", "merge", "-p", p])
            .trim()
            .ends_with("patched")
    );
    assert!(
        k.ok(&["patch", "mcn", "worker-0", "--type", "merge", "-p", p])
            .contains("patched (no change)")
    );
    assert!(
        k.ok(&["label", "node", "worker-0", "foo=bar"])
            .contains("labeled")
    );
    assert!(
        k.ok(&["get", "nodes", "-l", "foo=bar"])
            .contains("worker-0")
    );
    assert!(
        k.ok(&[
            "get",
            "mcn",
            "-l",
            "machineconfiguration.openshift.io/pool=worker"
        ])
        .contains("worker-0")
    );
    let kc = format!(
        "kubectl --cache-dir={}",
        k.home.path().join("cache").display()
    );
    let names = format!(
        "{kc} get machineconfignodes -o json | jq -r '.items[]|select(.spec.pool.name==\"worker\")|.metadata.name'"
    );
    let sh = |line: &str| {
        Command::new("bash")
            .arg("-c")
            .arg(line)
            .env("KUBECONFIG", &k.kubeconfig)
            .env("HOME", k.home.path())
            .output()
            .unwrap()
    };
    // The filter on its own first: inside `$(...)` a missing jq would leave no names, and
    // `get machineconfignodes` with none lists every MCN, so the pipeline would pass anyway.
    let o = sh(&format!("set -o pipefail; {names}"));
    assert!(
        o.status.success(),
        "the jq filter failed (is jq installed?): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "worker-0\n");
    let o = sh(&format!("{kc} get machineconfignodes $({names})"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("worker-0")
    );

    // kubectl prints 422 causes from the Status.
    let bad = write(
        tmp.path(),
        "bad.yaml",
        &std::fs::read_to_string(data("mcn-worker-0.yaml"))
            .unwrap()
            .replace("name: worker-0\n  labels", "name: bad\n  labels")
            .replace("  configVersion:", "  kernelType: bogus\n  configVersion:"),
    );
    let err = k.fails(&["apply", "-f", &bad]);
    assert!(err.contains("The MachineConfigNode \"bad\" is invalid: spec.kernelType: Unsupported value: \"bogus\""), "{err}");

    // Typed generators send protobuf bodies.
    assert!(
        k.ok(&["create", "configmap", "generated", "--from-literal=a=1"])
            .contains("configmap/generated created")
    );
    assert!(
        k.ok(&["create", "namespace", "team-a"])
            .contains("namespace/team-a created")
    );
    assert!(
        k.ok(&[
            "create",
            "secret",
            "generic",
            "s1",
            "-n",
            "team-a",
            "--from-literal=p=x"
        ])
        .contains("created")
    );
    assert_eq!(
        k.ok(&["get", "configmap", "generated", "-o", "jsonpath={.data.a}"]),
        "1"
    );
    assert!(
        k.ok(&["create", "serviceaccount", "builder", "-n", "team-a"])
            .contains("serviceaccount/builder created")
    );
    k.ok(&[
        "create",
        "poddisruptionbudget",
        "web",
        "-n",
        "team-a",
        "--selector=app=web,tier",
        "--max-unavailable=25%",
    ]);
    k.ok(&[
        "create",
        "pdb",
        "db",
        "-n",
        "team-a",
        "--selector=env in (a,b),!legacy",
        "--min-available=1",
    ]);
    let spec = |name: &str| -> Value {
        serde_json::from_str(&k.ok(&["get", "pdb", name, "-n", "team-a", "-o", "jsonpath={.spec}"]))
            .unwrap()
    };
    assert_eq!(
        spec("web"),
        json!({"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "Exists"}]}})
    );
    assert_eq!(
        spec("db"),
        json!({"minAvailable": 1, "selector": {"matchExpressions": [
            {"key": "env", "operator": "In", "values": ["a", "b"]},
            {"key": "legacy", "operator": "DoesNotExist"}]}})
    );

    // auth whoami: a SelfSubjectReview (protobuf), of the caller and of whom it impersonates.
    let me: Value = serde_json::from_str(&k.ok(&["auth", "whoami", "-o", "json"])).unwrap();
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "admin", "groups": ["system:masters", "system:authenticated"]})
    );
    let out = k.ok(&[
        "auth",
        "whoami",
        "--as=jane",
        "--as-group=devs",
        "--as-uid=u-1",
    ]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["ATTRIBUTE", "VALUE"],
            vec!["Username", "jane"],
            vec!["UID", "u-1"],
            vec!["Groups", "[devs", "system:authenticated]"]
        ]
    );

    // get -w: the list, then one row per event, as a Table.
    let watches_before = s.handle.open_watches();
    let mut watch = k
        .command(&["get", "configmaps", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(watch.stdout.take().unwrap());
    let cm = write(
        tmp.path(),
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\ndata:\n  a: \"1\"\n",
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            let _ = tx.send(std::mem::take(&mut line));
        }
    });
    // Create only once kubectl's watch is registered, or the event could fall between
    // its list and its watch.
    let deadline = Instant::now() + Duration::from_secs(15);
    while s.handle.open_watches() <= watches_before {
        assert!(Instant::now() < deadline, "kubectl get -w opened no watch");
        std::thread::sleep(Duration::from_millis(20));
    }
    k.ok(&["create", "-f", &cm]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = String::new();
    while !seen.contains("watched") {
        let left = deadline
            .checked_duration_since(Instant::now())
            .expect("get -w printed the new ConfigMap in time");
        if let Ok(l) = rx.recv_timeout(left) {
            seen.push_str(&l);
        }
    }
    watch.kill().unwrap();
    watch.wait().unwrap();
    assert!(
        seen.lines()
            .any(|l| l.starts_with("watched") && l.split_whitespace().nth(1) == Some("1")),
        "{seen}"
    );

    // cordon / uncordon.
    assert!(k.ok(&["cordon", "worker-0"]).contains("cordoned"));
    assert!(k.ok(&["get", "nodes"]).contains("Ready,SchedulingDisabled"));
    assert!(k.ok(&["uncordon", "worker-0"]).contains("uncordoned"));

    // drain with a budget that first blocks, then allows.
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})).unwrap();
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &rs)
        .await
        .unwrap();
    let ds: DaemonSet = serde_json::from_value(json!({"metadata": {"name": "dns"}, "spec": {"selector": {"matchLabels": {"app": "dns"}},
        "template": {"metadata": {"labels": {"app": "dns"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})).unwrap();
    let ds = Api::<DaemonSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, app, kind, owner) in [
        ("web-1", "web", "ReplicaSet", &rs.metadata),
        ("dns-1", "dns", "DaemonSet", &ds.metadata),
    ] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}, "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind,
                "name": owner.name, "uid": owner.uid, "controller": true}]},
            "spec": {"nodeName": "worker-0", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let pdb = write(
        tmp.path(),
        "pdb.yaml",
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels:\n      app: web\n",
    );
    k.ok(&["apply", "-f", &pdb]);
    let err = k.fails(&["drain", "worker-0", "--ignore-daemonsets", "--timeout=7s"]);
    assert!(
        err.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{err}"
    );
    assert!(pods.get("web-1").await.is_ok());
    k.ok(&[
        "patch",
        "pdb",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"minAvailable":0}}"#,
    ]);
    let out = k.ok(&["drain", "worker-0", "--ignore-daemonsets", "--timeout=30s"]);
    assert!(
        out.contains("pod/web-1 evicted") && out.contains("drained"),
        "{out}"
    );
    assert!(pods.get("web-1").await.is_err());
    assert!(pods.get("dns-1").await.is_ok());

    // delete, and the NotFound text afterwards.
    assert!(k.ok(&["delete", "mcn", "worker-0"]).contains("deleted"));
    let err = k.fails(&["get", "mcn", "worker-0"]);
    assert!(err.contains("Error from server (NotFound): machineconfignodes.machineconfiguration.openshift.io \"worker-0\" not found"), "{err}");
    s.handle.shutdown().await;
}

/// Where the Google Cloud SDK keeps its versioned kubectl binaries: its `bin/`, which also
/// holds the `kubectl` on `PATH` when that comes from the SDK.
fn versioned_kubectl(minor: u32) -> Option<String> {
    let mut dirs = vec![PathBuf::from("/usr/lib/google-cloud-sdk/bin")];
    for tool in ["kubectl", "gcloud"] {
        if let Ok(bin) = std::fs::canonicalize(
            Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {tool}"))
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default(),
        ) {
            dirs.extend(bin.parent().map(Path::to_path_buf));
        }
    }
    dirs.into_iter()
        .map(|d| d.join(format!("kubectl.1.{minor}")))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_kubectl_get_and_apply() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    seed_node(&client, "worker-0").await;
    let tmp = tempfile::tempdir().unwrap();
    let admin = Kubectl::new("kubectl", &s.handle.kubeconfig_path());
    admin.ok(&["apply", "-f", &data("mcn-crd.yaml")]);
    // Outside CI a missing client is skipped with a note; in CI it fails, or this test would
    // pass having exercised no client at all.
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let mut ran = 0;
    for minor in 29..=33 {
        let Some(bin) = versioned_kubectl(minor) else {
            assert!(
                !in_ci,
                "kubectl.1.{minor} not found (CI is set): install the Google Cloud SDK's versioned kubectls"
            );
            println!("note: kubectl.1.{minor} not installed; skipped");
            continue;
        };
        let k = Kubectl::new(&bin, &s.handle.kubeconfig_path());
        assert!(
            k.ok(&["get", "nodes"]).contains("worker-0"),
            "kubectl 1.{minor} get nodes"
        );
        let cm = write(
            tmp.path(),
            &format!("cm{minor}.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{minor}\ndata:\n  a: \"1\"\n"
            ),
        );
        assert!(
            k.ok(&["apply", "-f", &cm]).contains("created"),
            "kubectl 1.{minor} apply"
        );
        let cm2 = std::fs::read_to_string(&cm)
            .unwrap()
            .replace("\"1\"", "\"2\"");
        std::fs::write(&cm, cm2).unwrap();
        assert!(
            k.ok(&["apply", "-f", &cm]).contains("configured"),
            "kubectl 1.{minor} apply (modify)"
        );
        let mcn = std::fs::read_to_string(data("mcn-worker-0.yaml"))
            .unwrap()
            .replace(
                "name: worker-0\n  labels",
                &format!("name: mcn-{minor}\n  labels"),
            );
        let f = write(tmp.path(), &format!("mcn{minor}.yaml"), &mcn);
        assert!(
            k.ok(&["apply", "--server-side", "-f", &f])
                .contains("serverside-applied"),
            "kubectl 1.{minor} apply --server-side"
        );
        assert!(
            k.ok(&["get", "mcn", &format!("mcn-{minor}")])
                .contains(&format!("mcn-{minor}"))
        );
        ran += 1;
    }
    println!("versioned kubectl clients exercised: {ran}");
    s.handle.shutdown().await;
}

/// Labels and annotations are validated for every kind and every kind of write, with
/// kube-apiserver's messages reaching the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_metadata_validation() {
    let s = common::start().await;
    let k = Kubectl::new("kubectl", &s.handle.kubeconfig_path());
    let tmp = tempfile::tempdir().unwrap();
    let bad_value = "metadata.labels: Invalid value: \"-bad value-\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    let cm = |name: &str, meta: Value| {
        let mut m = json!({"name": name});
        m.as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m}).to_string()
    };
    let f = write(
        tmp.path(),
        "bad.json",
        &cm("bad", json!({"labels": {"x": "-bad value-"}})),
    );
    let err = k.fails(&["create", "-f", &f]);
    assert!(err.contains(bad_value), "{err}");
    let err = k.fails(&["apply", "--server-side", "-f", &f]);
    assert!(err.contains(bad_value), "{err}");

    let long = "k".repeat(64);
    let f = write(
        tmp.path(),
        "long.json",
        &cm("long", json!({"labels": {&long: "v"}})),
    );
    let err = k.fails(&["create", "-f", &f]);
    assert!(
        err.contains(&format!(
            "metadata.labels: Invalid value: \"{long}\": name part must be no more than 63 bytes"
        )),
        "{err}"
    );

    let f = write(
        tmp.path(),
        "big.json",
        &cm("big", json!({"annotations": {"a": "x".repeat(300_000)}})),
    );
    let err = k.fails(&["create", "-f", &f]);
    assert!(
        err.contains("metadata.annotations: Too long: must have at most 262144 bytes"),
        "{err}"
    );

    // At the limits it is accepted; a patch past them is refused as a create is.
    let at = "v".repeat(63);
    let f = write(
        tmp.path(),
        "ok.json",
        &cm(
            "ok",
            json!({"labels": {"x": at}, "annotations": {"a": "x".repeat(262_143)}}),
        ),
    );
    k.ok(&["create", "-f", &f]);
    let err = k.fails(&[
        "patch",
        "configmap",
        "ok",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"x":"-bad value-"}}}"#,
    ]);
    assert!(err.contains(bad_value), "{err}");
    s.handle.shutdown().await;
}
