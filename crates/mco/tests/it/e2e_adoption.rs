//! End-to-end: mco takes over a cluster that upstream's operator ran, without disturbing a node.
//!
//! The stored state is made upstream-shaped while mco is down (rendered configs under
//! `rendered-<pool>-<md5>` names with upstream's annotations and Ignition 3.4.0, pools and node
//! annotations naming them, mco's own renders deleted). When mco starts again it renders each
//! pool to its own name; every node must move there with no update: no reboot, no drain or
//! cordon, no `Working` state and no file rewritten. The base configs are upstream's too
//! (stamped with its commit, and holding the pull secret, which mco's templates do not write),
//! and so is a KubeletConfig's generated config (upstream's JSON bytes for the setting mco
//! writes as YAML): mco keeps them as they are.

use crate::e2e;
use crate::e2e_generated::MAX_PODS;

use e2e::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const STATE_ANN: &str = "machineconfiguration.openshift.io/state";
const DESIRED_DRAIN_ANN: &str = "machineconfiguration.openshift.io/desiredDrain";
const LAST_DRAIN_ANN: &str = "machineconfiguration.openshift.io/lastAppliedDrain";
const VERSION_ANN: &str = "machineconfiguration.openshift.io/generated-by-controller-version";
/// Upstream's controller stamps its git commit.
const UPSTREAM_VERSION: &str = "1d7c5a1e9f2b3c4d5e6f708192a3b4c5d6e7f809";
/// A file upstream's base configs have and mco's templates do not.
const PULL_SECRET: &str = "/var/lib/kubelet/config.json";
const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
const GENERATED_KUBELET: &str = "99-worker-generated-kubelet";

/// Sets the contents of `path` in a MachineConfig's (or rendered config's) files.
fn set_file(mc: &mut Value, path: &str, contents: &str) {
    let files = mc["spec"]["config"]["storage"]["files"]
        .as_array_mut()
        .unwrap();
    let f = files.iter_mut().find(|f| f["path"] == path).unwrap();
    f["contents"] = json!({"source": mco_generate::data_url(contents)});
}

/// A MachineConfig as JSON for `kubectl create`/`replace`, without the server's fields.
fn bare(mut mc: Value) -> Value {
    let meta = mc["metadata"].as_object_mut().unwrap();
    for k in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        meta.remove(k);
    }
    mc
}
const CURRENT_CONFIG_FILE: &str = "etc/machine-config-daemon/currentconfig";

/// `mco apiserver` alone on the cluster's data dir, so the state can be edited with no
/// controller or daemon reacting; stopped on drop.
struct ApiServerOnly(Child);

impl ApiServerOnly {
    fn start(c: &Cluster) -> ApiServerOnly {
        let kc = c.kubeconfig();
        let before = std::fs::metadata(&kc).and_then(|m| m.modified()).ok();
        let log = std::fs::File::create(c.dir.join("apiserver.log")).unwrap();
        let child = Command::new(MCO)
            .args(["apiserver", "--data-dir"])
            .arg(&c.data)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn mco apiserver");
        let me = ApiServerOnly(child);
        wait_for("apiserver kubeconfig written", 60, || {
            let m = std::fs::metadata(&kc).and_then(|m| m.modified()).ok()?;
            (before.is_none() || Some(m) != before).then_some(())
        });
        wait_for("apiserver answers", 60, || {
            c.kubectl_try(&["get", "--raw", "/readyz"]).ok()
        });
        me
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        wait_for("apiserver stopped", 15, || self.0.try_wait().ok().flatten());
    }
}

impl Drop for ApiServerOnly {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A 32-hex suffix shaped like upstream's MD5 names (mco cannot reproduce upstream's hash).
fn md5_like(seed: &str) -> String {
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, seed).hash(&mut h);
        h.finish()
    };
    format!("{:016x}{:016x}", half(1), half(2))
}

/// Every regular file under `root` with its contents, but the on-disk `currentconfig`, which
/// adoption may rewrite to name the adopted config, and the simulated node's swap files (where
/// its writes keep old inodes for reuse; not a file of the host it simulates).
fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if p == root.join(mco_daemon::fs::SWAP_DIR) {
                continue;
            }
            if ft.is_dir() {
                walk(root, &p, out);
            } else if ft.is_file() {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                if rel != CURRENT_CONFIG_FILE {
                    out.insert(rel, std::fs::read(&p).unwrap_or_default());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn create(c: &Cluster, obj: &Value, file: &str) {
    let path = c.dir.join(file);
    std::fs::write(&path, obj.to_string()).unwrap();
    c.kubectl(&["create", "-f", path.to_str().unwrap()]);
}

/// Copies `mco_name` under an upstream name, as upstream's controller would have written it,
/// with `files` (path, contents) as upstream wrote them.
fn upstream_copy(c: &Cluster, pool: &str, mco_name: &str, files: &[(&str, &str)]) -> String {
    let name = format!("rendered-{pool}-{}", md5_like(mco_name));
    let mut mc = bare(c.get_json(&["mc", mco_name]));
    for (path, contents) in files {
        set_file(&mut mc, path, contents);
    }
    let meta = mc["metadata"].as_object_mut().unwrap();
    meta.insert("name".into(), json!(name));
    meta.insert("annotations".into(), json!({VERSION_ANN: UPSTREAM_VERSION}));
    mc["spec"]["config"]["ignition"]["version"] = json!("3.4.0");
    create(c, &mc, &format!("{name}.json"));
    name
}

fn nodes(c: &Cluster) -> Vec<String> {
    let mut out = vec!["master-0".to_owned()];
    out.extend(c.workers());
    out
}

/// Every node event since `rv`, replayed by the API server from its retained history.
fn node_history(c: &Cluster, rv: &str) -> Vec<Value> {
    let raw = c.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
    ]);
    serde_json::Deserializer::from_str(&raw)
        .into_iter::<Value>()
        .map(|v| v.unwrap())
        .collect()
}

#[test]
fn an_upstream_run_cluster_is_adopted_without_touching_a_node() {
    let mut c = Cluster::up(Opts::default());
    let pools = ["master", "worker"];
    let first: BTreeMap<&str, String> = pools.iter().map(|p| (*p, c.pool_target(p))).collect();

    // The base configs as upstream's template controller leaves them: its stamp, and the pull
    // secret in `00-<role>`. mco keeps them and rolls the pull secret out (rebootless).
    for name in mco_generate::template::names(&Default::default()) {
        c.kubectl(&[
            "annotate",
            "mc",
            &name,
            &format!("{VERSION_ANN}={UPSTREAM_VERSION}"),
            "--overwrite",
        ]);
    }
    let file = json!({"path": PULL_SECRET, "mode": 384, "contents": {"source": "data:,%7B%7D"}});
    for pool in pools {
        let add = json!([{"op": "add", "path": "/spec/config/storage/files/-", "value": file}]);
        c.kubectl(&[
            "patch",
            "mc",
            &format!("00-{pool}"),
            "--type=json",
            "-p",
            &add.to_string(),
        ]);
    }
    c.apply(MAX_PODS);
    let ours: BTreeMap<&str, String> = pools
        .iter()
        .map(|p| {
            let t = wait_for(&format!("pool {p} on upstream's base"), 120, || {
                let pool = c.try_get_json(&["mcp", p])?;
                let t = pool_settled(&pool).filter(|t| *t != first[p])?;
                let mc = c.try_get_json(&["mc", &t])?;
                // The worker pool's render with the KubeletConfig's output in it.
                let done = *p == "master" || mc.to_string().contains("maxPods");
                done.then_some(t)
            });
            (*p, t)
        })
        .collect();
    // Upstream's generator writes kubelet.conf as JSON: other bytes for the same setting.
    let generated = c.get_json(&["mc", GENERATED_KUBELET]);
    let upstream_kubelet = {
        let ours = mco_generate::base_file(
            &[&serde_json::from_value(c.get_json(&["mc", &ours["worker"]])).unwrap()],
            KUBELET_CONF,
        )
        .unwrap()
        .unwrap();
        assert!(ours.contains("maxPods: 300"), "{ours}");
        let v: Value = mco_apimachinery::yaml::from_str(&ours).unwrap();
        serde_json::to_string(&v).unwrap()
    };
    let all = nodes(&c);
    let boot_ids: BTreeMap<String, String> =
        all.iter().map(|n| (n.clone(), c.boot_id(n))).collect();
    c.stop();
    for node in all.iter().filter(|n| n.starts_with("worker")) {
        let path = c.node_root(node).join(KUBELET_CONF.trim_start_matches('/'));
        std::fs::write(path, &upstream_kubelet).unwrap();
    }
    let disks: BTreeMap<String, _> = all
        .iter()
        .map(|n| (n.clone(), snapshot(&c.node_root(n))))
        .collect();

    // Make the stored state look upstream-made.
    let api = ApiServerOnly::start(&c);
    let mut kubelet = bare(generated);
    kubelet["metadata"]["annotations"][VERSION_ANN] = json!(UPSTREAM_VERSION);
    set_file(&mut kubelet, KUBELET_CONF, &upstream_kubelet);
    let path = c.dir.join("generated-kubelet.json");
    std::fs::write(&path, kubelet.to_string()).unwrap();
    c.kubectl(&["replace", "-f", path.to_str().unwrap()]);
    let mut upstream = BTreeMap::new();
    for pool in pools {
        let files: &[(&str, &str)] = if pool == "worker" {
            &[(KUBELET_CONF, &upstream_kubelet)]
        } else {
            &[]
        };
        let name = upstream_copy(&c, pool, &ours[pool], files);
        let cfg = json!({"configuration": {"name": name}});
        c.kubectl(&[
            "patch",
            "mcp",
            pool,
            "--type=merge",
            "-p",
            &json!({ "spec": cfg }).to_string(),
        ]);
        c.kubectl(&[
            "patch",
            "mcp",
            pool,
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({ "status": cfg }).to_string(),
        ]);
        upstream.insert(pool, name);
    }
    for node in &all {
        let pool = if node.starts_with("master") {
            "master"
        } else {
            "worker"
        };
        let name = &upstream[pool];
        let uncordon = format!("uncordon-{name}");
        let patch = json!({"metadata": {"annotations": {
            CURRENT_ANN: name, DESIRED_ANN: name, STATE_ANN: "Done",
            DESIRED_DRAIN_ANN: uncordon, LAST_DRAIN_ANN: uncordon,
        }}});
        c.kubectl(&[
            "patch",
            "node",
            node,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
        // The daemon trusts its on-disk config over the annotation: upstream's names it too.
        let file = c.node_root(node).join(CURRENT_CONFIG_FILE);
        if file.exists() {
            std::fs::write(&file, c.get_json(&["mc", name]).to_string()).unwrap();
        }
    }
    let mcs = c.get_json(&["mc"]);
    for mc in mcs["items"].as_array().unwrap() {
        let name = mc["metadata"]["name"].as_str().unwrap();
        if name.starts_with("rendered-") && !upstream.values().any(|u| u == name) {
            c.kubectl(&["delete", "mc", name]);
        }
    }
    // The server's own list (kubectl's `-o json` List carries no resourceVersion).
    let list: Value = serde_json::from_str(&c.kubectl(&["get", "--raw", "/api/v1/nodes"])).unwrap();
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!from.is_empty(), "node list without a resourceVersion");
    api.stop();

    c.start();
    // The master pool's render is mco's as before; the worker pool's holds upstream's
    // kubelet.conf, kept, so its name is new.
    let ours: BTreeMap<&str, String> = pools
        .iter()
        .map(|pool| {
            let t = wait_for(&format!("pool {pool} settled on mco's render"), 120, || {
                let p = c.try_get_json(&["mcp", pool])?;
                pool_settled(&p).filter(|t| *t != upstream[pool])
            });
            if *pool == "master" {
                assert_eq!(t, ours[pool]);
            }
            let rendered = serde_json::from_value(c.get_json(&["mc", &t])).unwrap();
            let kubelet = mco_generate::base_file(&[&rendered], KUBELET_CONF).unwrap();
            if *pool == "worker" {
                assert_eq!(kubelet.as_deref(), Some(upstream_kubelet.as_str()), "{t}");
            }
            (*pool, t)
        })
        .collect();
    let kept = c.get_json(&["mc", GENERATED_KUBELET]);
    assert_eq!(annotation(&kept, VERSION_ANN), UPSTREAM_VERSION);
    assert!(!annotation(&kept, "mco.dev/kept-for").is_empty());
    for node in &all {
        let n = c.node(node);
        let pool = if node.starts_with("master") {
            "master"
        } else {
            "worker"
        };
        assert_eq!(annotation(&n, CURRENT_ANN), ours[pool], "{node}");
        assert_eq!(annotation(&n, DESIRED_ANN), ours[pool], "{node}");
        assert_eq!(annotation(&n, STATE_ANN), "Done", "{node}");
        assert_eq!(c.boot_id(node), boot_ids[node], "{node} rebooted");
    }

    // Each node was adopted (not updated), and said so.
    let events = c.get_json(&["events", "-A"]);
    let adopted: Vec<String> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "ConfigAdopted")
        .map(|e| e["involvedObject"]["name"].as_str().unwrap().to_owned())
        .collect();
    for node in &all {
        assert!(adopted.contains(node), "{node} not adopted: {adopted:?}");
    }

    // Every node write since the upstream state: never Working, cordoned or asked to drain.
    let history = node_history(&c, &from);
    assert!(
        history.iter().any(|e| e["type"] == "MODIFIED"),
        "no node history replayed"
    );
    for e in &history {
        let n = &e["object"];
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        assert_ne!(annotation(n, STATE_ANN), "Working", "{name} went Working");
        assert_ne!(n["spec"]["unschedulable"], json!(true), "{name} cordoned");
        let drain = annotation(n, DESIRED_DRAIN_ANN);
        assert!(drain.starts_with("uncordon-rendered-"), "{name}: {drain}");
        let pool = if name.starts_with("master") {
            "master"
        } else {
            "worker"
        };
        assert_eq!(drain, format!("uncordon-{}", upstream[pool]), "{name}");
    }

    // Upstream's base configs are as they were.
    for name in mco_generate::template::names(&Default::default()) {
        let mc = c.get_json(&["mc", &name]);
        assert_eq!(annotation(&mc, VERSION_ANN), UPSTREAM_VERSION, "{name}");
    }
    for node in &all {
        let on_disk = c.node_root(node).join(PULL_SECRET.trim_start_matches('/'));
        assert_eq!(std::fs::read_to_string(&on_disk).unwrap(), "{}", "{node}");
    }

    // Nothing on any disk changed but the record of the current config.
    for node in &all {
        let root = c.node_root(node);
        let after = snapshot(&root);
        let before = &disks[node];
        let changed: Vec<&String> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .collect();
        assert!(changed.is_empty(), "{node}: files changed: {changed:?}");
        if let Ok(s) = std::fs::read_to_string(root.join(CURRENT_CONFIG_FILE)) {
            let on_disk: Value = serde_json::from_str(&s).unwrap();
            let pool = if node.starts_with("master") {
                "master"
            } else {
                "worker"
            };
            assert_eq!(on_disk["metadata"]["name"], json!(ours[pool]), "{node}");
        }
    }

    // A rotated pull secret reaches the nodes through upstream's kept base configs: only their
    // pull secret file changes, they keep upstream's stamp, and no node reboots.
    c.set_pull_secret();
    let secret = r#"{"auths":{"quay.example.com":{"username":"ops","password":"s3cret","auth":"b3BzOnMzY3JldA=="}}}"#;
    for pool in pools {
        let name = format!("00-{pool}");
        let mc = wait_for(&format!("{name} following the pull secret"), 60, || {
            let mc = c.try_get_json(&["mc", &name])?;
            let mc: mco_api::MachineConfig = serde_json::from_value(mc).ok()?;
            let file = mco_generate::file_contents(&mc, PULL_SECRET).ok()??;
            (file == format!("{secret}\n")).then_some(mc)
        });
        let ann = mc.metadata.annotations.unwrap_or_default();
        assert_eq!(ann[VERSION_ANN], UPSTREAM_VERSION, "{name}");
        assert_eq!(ann["mco.dev/pull-secret-sha256"].len(), 64, "{name}");
    }
    for pool in pools {
        wait_for(
            &format!("pool {pool} rolled the pull secret out"),
            120,
            || {
                let p = c.try_get_json(&["mcp", pool])?;
                pool_settled(&p).filter(|t| *t != ours[pool])
            },
        );
    }
    for node in &all {
        let on_disk = c.node_root(node).join(PULL_SECRET.trim_start_matches('/'));
        assert_eq!(
            std::fs::read_to_string(&on_disk).unwrap(),
            format!("{secret}\n"),
            "{node}"
        );
        assert_eq!(c.boot_id(node), boot_ids[node], "{node} rebooted");
    }
    // A changed TLS profile reaches them too: the kubelet's configuration in upstream's
    // `01-<role>-kubelet`, upstream's other settings in it kept.
    let settled: BTreeMap<&str, String> = pools
        .iter()
        .map(|p| (*p, pool_settled(&c.get_json(&["mcp", p])).unwrap()))
        .collect();
    c.apply(
        "apiVersion: config.openshift.io/v1
kind: APIServer
metadata: {name: cluster}
spec:
  tlsSecurityProfile: {type: Modern, modern: {}}
",
    );
    for pool in pools {
        let name = format!("01-{pool}-kubelet");
        let mc = wait_for(&format!("{name} following the TLS profile"), 60, || {
            let mc = c.try_get_json(&["mc", &name])?;
            let mc: mco_api::MachineConfig = serde_json::from_value(mc).ok()?;
            let file = mco_generate::file_contents(&mc, KUBELET_CONF).ok()??;
            file.contains("tlsMinVersion: VersionTLS13\n").then_some(mc)
        });
        let ann = mc.metadata.annotations.unwrap_or_default();
        assert_eq!(ann[VERSION_ANN], UPSTREAM_VERSION, "{name}");
        wait_for(
            &format!("pool {pool} rolled the TLS profile out"),
            120,
            || {
                let p = c.try_get_json(&["mcp", pool])?;
                pool_settled(&p).filter(|t| *t != settled[pool])
            },
        );
    }
    for node in &all {
        let on_disk = c.node_root(node).join(KUBELET_CONF.trim_start_matches('/'));
        let conf = std::fs::read_to_string(&on_disk).unwrap();
        assert!(
            conf.contains("tlsMinVersion: VersionTLS13\n"),
            "{node}: {conf}"
        );
    }
    // The worker's KubeletConfig output (upstream's, kept) is regenerated by mco for the new
    // profile, and keeps the KubeletConfig's setting.
    let worker = mco_generate::file_contents(
        &serde_json::from_value(c.get_json(&["mc", GENERATED_KUBELET])).unwrap(),
        KUBELET_CONF,
    )
    .unwrap()
    .unwrap();
    assert!(
        worker.contains("VersionTLS13") && worker.contains("maxPods: 300"),
        "{worker}"
    );

    // Each rewrite is on record, on the config, in the events users read.
    for (reason, config, said) in [
        (
            "PullSecretFollowed",
            "00",
            format!("{PULL_SECRET} now holds the pull secret of Secret mco-system/pull-secret"),
        ),
        (
            "TLSProfileFollowed",
            "01",
            format!("{KUBELET_CONF} now has the TLS settings of APIServer cluster's profile"),
        ),
    ] {
        for pool in pools {
            let name = if config == "00" {
                format!("00-{pool}")
            } else {
                format!("01-{pool}-kubelet")
            };
            let messages = c.kubectl(&[
                "get",
                "events",
                "-A",
                "--field-selector",
                &format!("involvedObject.name={name},reason={reason}"),
                "-o",
                "jsonpath={.items[*].message}",
            ]);
            assert_eq!(
                messages,
                format!("kept as another controller generated it: {said}"),
                "{name}"
            );
        }
    }
}
