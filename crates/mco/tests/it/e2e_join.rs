//! End-to-end: simulated nodes join as machines do, fetching their pool's Ignition from
//! `mco up`'s machine config server over HTTPS, and their disks hold what it served.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::e2e::*;

on_both_servers!(a_node_holds_what_the_server_served_and_is_updated);

/// `mco up`'s machine config server: its base URL (from the line `mco up` prints) and CA.
fn mcs(c: &Cluster) -> (String, PathBuf) {
    let line = wait_for("mco up prints its machine config server", 30, || {
        let text = std::fs::read_to_string(c.dir.join("up-0.log")).ok()?;
        text.lines()
            .find(|l| l.contains("machine config server on https://"))
            .map(str::to_string)
    });
    let rest = line.split("https://").nth(1).unwrap();
    let base = format!("https://{}", rest.split("/config/").next().unwrap());
    (base, c.data.join("mcs/ca.crt"))
}

/// The Ignition a machine of `pool` gets now, as Ignition asks for it.
fn fetch(c: &Cluster, pool: &str) -> Value {
    let (base, ca) = mcs(c);
    let out = Command::new("curl")
        .args(["-sSf", "--max-time", "30", "--cacert"])
        .arg(&ca)
        .args([
            "-H",
            "Accept: application/vnd.coreos.ignition+json;version=3.5.0, */*;q=0.1",
        ])
        .arg(format!("{base}/config/{pool}"))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the served Ignition")
}

fn decoded(f: &Value) -> Vec<u8> {
    mco_render::ignition::decode_data_url(
        f["contents"]["source"].as_str().unwrap_or_default(),
        f["contents"]["compression"]
            .as_str()
            .filter(|c| !c.is_empty()),
    )
    .unwrap()
}

/// `path` under the node's root, or its `.bak`: first boot and the daemon's first start rename
/// the encapsulated config and the initial annotations once they have used them.
fn on_disk(root: &Path, path: &str) -> Option<(Vec<u8>, u32)> {
    let p = root.join(path.trim_start_matches('/'));
    let bak = PathBuf::from(format!("{}.bak", p.display()));
    [p, bak].into_iter().find_map(|p| {
        let data = std::fs::read(&p).ok()?;
        let mode = std::fs::metadata(&p).ok()?.permissions().mode() & 0o7777;
        Some((data, mode))
    })
}

/// Every file of `cfg` is on the node's disk with its contents and mode.
fn assert_files_on_disk(root: &Path, cfg: &Value, what: &str) -> usize {
    let files = cfg["storage"]["files"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for f in &files {
        let path = f["path"].as_str().unwrap();
        let (data, mode) =
            on_disk(root, path).unwrap_or_else(|| panic!("{what}: {path} is not on the node"));
        assert_eq!(data, decoded(f), "{what}: contents of {path}");
        let want = f["mode"].as_u64().unwrap_or(0o644) as u32;
        assert_eq!(mode, want, "{what}: mode of {path}");
    }
    files.len()
}

fn a_node_holds_what_the_server_served_and_is_updated(server: Server) {
    let c = Cluster::up(Opts {
        server,
        masters: 1,
        workers: 1,
        ..Opts::default()
    });
    let rendered = c.wait_pool_settled("worker", 120);
    let node = "worker-0";
    assert_eq!(annotation(&c.node(node), CURRENT_ANN), rendered);
    wait_for("worker-0's MachineConfigNode Updated", 60, || {
        (condition_status(&c.mcn(node), "Updated") == "True").then_some(())
    });
    let root = c.node_root(node);

    // What the server serves a worker now (the pool is settled: the config worker-0 got).
    let served = fetch(&c, "worker");
    let ann: Value = serde_json::from_slice(&decoded(
        served["storage"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == "/etc/machine-config-daemon/node-annotations.json")
            .unwrap(),
    ))
    .unwrap();
    assert_eq!(ann[CURRENT_ANN], rendered.as_str());
    let n = assert_files_on_disk(&root, &served, "served");
    assert!(n >= 3, "{served}");
    // The rendered config's own files, units and SSH keys, as the daemon would write them.
    let mc = c.get_json(&["mc", &rendered]);
    assert_files_on_disk(&root, &mc["spec"]["config"], "rendered");
    for u in served["systemd"]["units"].as_array().unwrap() {
        if let Some(contents) = u["contents"].as_str() {
            let name = u["name"].as_str().unwrap();
            let path = root.join("etc/systemd/system").join(name);
            assert_eq!(
                std::fs::read_to_string(&path).unwrap_or_default(),
                contents,
                "unit {name}"
            );
        }
    }
    let keys =
        std::fs::read_to_string(root.join("home/core/.ssh/authorized_keys.d/ignition")).unwrap();
    for user in mc["spec"]["config"]["passwd"]["users"].as_array().unwrap() {
        for k in user["sshAuthorizedKeys"].as_array().unwrap() {
            assert!(keys.contains(k.as_str().unwrap()), "{keys}");
        }
    }
    // What the server appends besides the node's annotations and first boot: the served
    // config whole, and a bootstrap kubeconfig whose token authenticates as node-bootstrapper
    // (which may not list nodes).
    let content: Value = serde_json::from_slice(
        &on_disk(&root, "/etc/mcs-machine-config-content.json")
            .unwrap()
            .0,
    )
    .unwrap();
    assert_eq!(content["metadata"]["name"], rendered.as_str());
    assert_eq!(content["spec"]["config"], mc["spec"]["config"]);
    let kubelet = root.join("etc/kubernetes/kubeconfig");
    let err = c
        .kubectl_as(&kubelet, &["get", "nodes"])
        .expect_err("node-bootstrapper listed nodes");
    assert!(
        err.contains("system:serviceaccount:mco-system:node-bootstrapper"),
        "{err}"
    );

    // The kube-apiserver CA of the ControllerConfig, as it is now: a machine joining a paused
    // pool still trusts today's CA.
    let ca = {
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    };
    use base64::Engine as _;
    c.patch_controller_config(serde_json::json!({"kubeAPIServerServingCAData":
        base64::engine::general_purpose::STANDARD.encode(&ca)}));
    wait_for("the server serves the new kubelet CA", 30, || {
        let served = fetch(&c, "worker");
        let f = served["storage"]["files"]
            .as_array()?
            .iter()
            .find(|f| f["path"] == "/etc/kubernetes/kubelet-ca.crt")
            .cloned()?;
        (decoded(&f) == ca.as_bytes() && f["mode"] == 420).then_some(())
    });

    // Ignition ran once, first boot consumed its config, and the daemon took over.
    assert!(root.join("etc/.ignition-result.json").exists());
    assert!(
        !root
            .join("etc/ignition-machine-config-encapsulated.json")
            .exists()
    );
    let current: Value = serde_json::from_slice(
        &std::fs::read(root.join("etc/machine-config-daemon/currentconfig")).unwrap(),
    )
    .unwrap();
    assert_eq!(current["spec"]["config"], mc["spec"]["config"]);

    // The join is on record, naming the config and the URL.
    let (base, _) = mcs(&c);
    let events = c.kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        &format!("involvedObject.name={node},reason=Provisioned"),
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(&format!(
            "fetched config {rendered} from {base}/config/worker"
        )),
        "{events}"
    );
}

/// Worker nodes the rollout is working on: cordoned, or not on their desired config.
fn in_update(nodes: &BTreeMap<String, Value>) -> Vec<String> {
    nodes
        .iter()
        .filter(|(_, n)| {
            n["metadata"]["labels"]
                .get("node-role.kubernetes.io/worker")
                .is_some()
        })
        .filter(|(_, n)| {
            n["spec"]["unschedulable"].as_bool().unwrap_or(false)
                || annotation(n, DESIRED_ANN) != annotation(n, CURRENT_ANN)
        })
        .map(|(k, _)| k.clone())
        .collect()
}

#[test]
fn a_node_added_mid_rollout_joins_through_the_server_within_max_unavailable() {
    let c = Cluster::up(Opts {
        masters: 1,
        workers: 2,
        reboot_seconds: 2,
        ..Opts::default()
    });
    let old = c.wait_pool_settled("worker", 120);
    let watch = c.watch("nodes");
    c.apply(&file_mc(
        "99-worker-joined",
        "worker",
        "/etc/joined",
        "through the server\n",
    ));
    wait_for("the rollout started", 60, || {
        let nodes = c.try_get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"])?;
        nodes["items"]
            .as_array()?
            .iter()
            .any(|n| annotation(n, DESIRED_ANN) != old)
            .then_some(())
    });
    assert!(
        pool_settled(&c.pool("worker")).is_none(),
        "the rollout ended before the node was added"
    );
    c.sim(&["add-node", "w9", "--pool", "worker"]);
    let new = wait_for("the pool settled on the new config with w9", 180, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (p["status"]["machineCount"] == 3)
            .then(|| pool_settled(&p))
            .flatten()
            .filter(|t| *t != old)
    });
    let w9 = c.node("w9");
    assert_eq!(annotation(&w9, CURRENT_ANN), new);
    assert_eq!(
        c.read_node_file("w9", "/etc/joined").as_deref(),
        Some("through the server\n")
    );
    assert!(c.node_root("w9").join("etc/.ignition-result.json").exists());
    let (base, _) = mcs(&c);
    let events = c.kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        "involvedObject.name=w9,reason=Provisioned",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(&format!("from {base}/config/worker")),
        "{events}"
    );

    // maxUnavailable (1): never two workers in update at once, w9 included.
    let mut nodes = BTreeMap::new();
    let mut most = Vec::new();
    for n in &watch.events() {
        let name = n["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        nodes.insert(name, n.clone());
        let now = in_update(&nodes);
        if now.len() > most.len() {
            most = now;
        }
    }
    assert!(nodes.contains_key("w9"), "the watch never saw w9");
    assert!(most.len() <= 1, "workers in update at once: {most:?}");
    assert_eq!(most.len(), 1, "the watch never saw the rollout");
}

on_both_servers!(the_server_serves_the_controllers_certificate_and_a_new_one_at_once);

/// The serial of the certificate `pem` (one or more PEM blocks; the first), as openssl prints it.
fn serial_of(pem: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), pem).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The serial of the certificate a new connection to `base` (`https://host:port`) is shown.
fn served_serial(base: &str) -> Option<String> {
    let addr = base.trim_start_matches("https://");
    let out = Command::new("openssl")
        .args(["s_client", "-connect", addr])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text.find("-----END CERTIFICATE-----")? + "-----END CERTIFICATE-----".len();
    Some(serial_of(text[begin..end].as_bytes()))
}

/// The Secret `mco-server-tls` as the controller keeps it: its serial, once it exists.
fn secret_serial(c: &Cluster) -> Option<(String, Value)> {
    let s = c.try_get_json(&["secret", "-n", "mco-system", "mco-server-tls"])?;
    let crt = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        s["data"]["tls.crt"].as_str()?,
    )
    .ok()?;
    Some((serial_of(&crt), s))
}

/// `mco up`'s machine config server serves the certificate the controller keeps, for the hosts
/// nodes reach it at; deleted, the controller makes another, the server serves it without a
/// restart, and a machine trusting the bundle joins through it.
fn the_server_serves_the_controllers_certificate_and_a_new_one_at_once(server: Server) {
    let c = Cluster::up(Opts {
        server,
        masters: 1,
        workers: 1,
        ..Opts::default()
    });
    c.wait_pool_settled("worker", 120);
    let (base, ca) = mcs(&c);
    let (first, secret) = wait_for("the controller's serving certificate", 60, || {
        secret_serial(&c)
    });
    assert_eq!(
        secret["metadata"]["labels"]["auth.openshift.io/managed-certificate-type"],
        "target"
    );
    assert_eq!(
        secret["metadata"]["annotations"]["auth.openshift.io/certificate-hostnames"],
        "127.0.0.1,::1,localhost"
    );
    wait_for("the server serving it", 30, || {
        (served_serial(&base)? == first).then_some(())
    });
    // The bundle nodes trust is the controller's.
    let bundle = c.kubectl(&[
        "get",
        "configmap",
        "-n",
        "mco-system",
        "machine-config-server-ca",
        "-o",
        "jsonpath={.data.ca-bundle\\.crt}",
    ]);
    assert_eq!(std::fs::read_to_string(&ca).unwrap().trim(), bundle.trim());

    c.kubectl(&["delete", "secret", "-n", "mco-system", "mco-server-tls"]);
    let second = wait_for("a new serving certificate", 60, || {
        secret_serial(&c).map(|(s, _)| s).filter(|s| *s != first)
    });
    wait_for("the server serving the new one", 30, || {
        (served_serial(&base)? == second).then_some(())
    });
    c.sim(&["add-node", "w9", "--pool", "worker"]);
    wait_for("w9 joined through the server", 120, || {
        let n = c.try_get_json(&["node", "w9"])?;
        (!annotation(&n, CURRENT_ANN).is_empty()).then_some(())
    });
    // And curl trusting the same bundle is served.
    let served = fetch(&c, "worker");
    assert!(served["ignition"]["version"].is_string(), "{served}");
}
