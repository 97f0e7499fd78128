//! The machine config server driven as machines and users reach it: `curl` over HTTPS against
//! `mco up`'s server and a separate `mco server`, for each `Accept` version, an unknown pool,
//! a pool with no rendered config, and `--require-token`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::e2e::{Cluster, Group, MCO, Opts, wait_for};
use mco_server::SpecVersion;

/// `curl` status and body for `url`; `accept: None` sends no `Accept` header at all.
fn curl(ca: &Path, url: &str, accept: Option<&str>, extra: &[&str]) -> (u16, String) {
    let accept = format!("Accept: {}", accept.unwrap_or(""));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--cacert"])
        .arg(ca)
        .args(["-H", &accept, "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The address a log line `... https://ADDR/config/<pool> ...` names.
fn served_addr(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let rest = text.split("https://").nth(1)?;
    Some(rest.split("/config/").next()?.to_string())
}

/// A file of the served Ignition, decoded.
fn served_file(cfg: &Value, path: &str) -> Vec<u8> {
    let files = cfg["storage"]["files"].as_array().expect("files");
    let f = files.iter().find(|f| f["path"] == path).expect(path);
    mco_render::ignition::decode_data_url(f["contents"]["source"].as_str().unwrap(), None).unwrap()
}

fn check_answer(body: &str, version: SpecVersion, rendered: &str) {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(v["ignition"]["version"], version.as_str());
    match version {
        SpecVersion::V2_2 => mco_server::assemble::check_2_2(&v).unwrap(),
        SpecVersion::V3(_) => mco_server::assemble::check_3x(body.as_bytes(), version).unwrap(),
    }
    let ann: Value = serde_json::from_slice(&served_file(
        &v,
        "/etc/machine-config-daemon/node-annotations.json",
    ))
    .unwrap();
    assert_eq!(
        ann["machineconfiguration.openshift.io/currentConfig"],
        rendered
    );
    assert_eq!(
        ann["machineconfiguration.openshift.io/desiredConfig"],
        rendered
    );
    let enc: Value = serde_json::from_slice(&served_file(
        &v,
        "/etc/ignition-machine-config-encapsulated.json",
    ))
    .unwrap();
    assert_eq!(enc["metadata"]["name"], rendered);
    assert_eq!(
        enc["spec"]["config"]["ignition"]["version"],
        version.as_str()
    );
    let units = v["systemd"]["units"].as_array().unwrap();
    assert!(
        units
            .iter()
            .any(|u| u["name"] == "machine-config-daemon-firstboot.service")
    );
}

/// `mco server` against `c`, with `extra` flags; returns its process and base URL.
fn spawn_server(c: &Cluster, name: &str, extra: &[&str]) -> (Group, String, PathBuf) {
    let certs = c.dir.join(format!("{name}-certs"));
    let log = c.dir.join(format!("{name}.log"));
    let mut cmd = Command::new(MCO);
    cmd.arg("server")
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .args(["--listen", "127.0.0.1:0", "--cert-dir"])
        .arg(&certs)
        .args(extra);
    let group = Group::spawn(cmd, &log, "mco server");
    let addr = wait_for("mco server serving", 60, || served_addr(&log));
    (group, format!("https://{addr}"), certs.join("ca.crt"))
}

#[test]
fn the_server_answers_each_version_and_names_the_pool_in_errors() {
    let c = Cluster::up(Opts {
        masters: 1,
        workers: 1,
        ..Opts::default()
    });
    let rendered = c.pool("worker")["status"]["configuration"]["name"]
        .as_str()
        .unwrap()
        .to_string();

    // `mco up`'s own server, on the port its log names, with its CA in the data dir.
    let addr = wait_for("mco up prints its server", 30, || {
        let text = std::fs::read_to_string(c.dir.join("up-0.log")).ok()?;
        let line = text
            .lines()
            .find(|l| l.contains("machine config server on https://"))?;
        Some(line.to_string())
    });
    let base = {
        let rest = addr.split("https://").nth(1).unwrap();
        format!("https://{}", rest.split("/config/").next().unwrap())
    };
    let ca = c.data.join("mcs/ca.crt");
    let url = format!("{base}/config/worker");

    for (accept, want) in [
        (None, SpecVersion::V2_2),
        (Some("*/*"), SpecVersion::V2_2),
        (
            Some("application/vnd.coreos.ignition+json;version=2.2.0"),
            SpecVersion::V2_2,
        ),
        (
            Some("application/vnd.coreos.ignition+json;version=3.1.0, */*;q=0.1"),
            SpecVersion::V3(1),
        ),
        (
            Some("application/vnd.coreos.ignition+json;version=3.2.0, */*;q=0.1"),
            SpecVersion::V3(2),
        ),
        (
            Some("application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1"),
            SpecVersion::V3(3),
        ),
        (
            Some("application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"),
            SpecVersion::V3(4),
        ),
        (
            Some("application/vnd.coreos.ignition+json;version=3.5.0, */*;q=0.1"),
            SpecVersion::V3(5),
        ),
    ] {
        let (code, body) = curl(&ca, &url, accept, &[]);
        assert_eq!(code, 200, "{accept:?}: {body}");
        check_answer(&body, want, &rendered);
    }

    // An Ignition version the server cannot serve: 400, naming the pool and the header.
    let (code, body) = curl(
        &ca,
        &url,
        Some("application/vnd.coreos.ignition+json;version=3.0.0"),
        &[],
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("pool worker: unsupported Ignition version in Accept header"),
        "{body}"
    );

    // An unknown pool: upstream's cluster server fails the lookup with 500.
    let (code, body) = curl(&ca, &format!("{base}/config/nosuch"), None, &[]);
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("could not fetch pool nosuch"), "{body}");

    // A pool whose selector matches no MachineConfig never gets a rendered config.
    c.apply(
        "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata:
  name: infra
spec:
  machineConfigSelector:
    matchLabels:
      mco-e2e/matches: nothing
  nodeSelector:
    matchLabels:
      node-role.kubernetes.io/infra: \"\"
",
    );
    wait_for("the server sees pool infra", 30, || {
        let (code, body) = curl(&ca, &format!("{base}/config/infra"), None, &[]);
        (code == 500 && body.contains("pool infra")).then_some(())
    });
    let (_, body) = curl(&ca, &format!("{base}/config/infra"), None, &[]);
    assert!(body.contains("no rendered config"), "{body}");

    // Not a pool name at all.
    let (code, _) = curl(&ca, &format!("{base}/config/Bad_Name"), None, &[]);
    assert_eq!(code, 400);
    let (code, _) = curl(&ca, &format!("{base}/healthz"), None, &[]);
    assert_eq!(code, 200);

    // `mco server --require-token`: a separate process on the same cluster, which also appends
    // the machines' bootstrap kubeconfig from a ServiceAccount token Secret's files.
    let tokens = c.dir.join("tokens");
    std::fs::write(&tokens, "0123456789abcdef0123456789abcdef\n").unwrap();
    let token_file = tokens.to_string_lossy().into_owned();
    let bootstrap = c.dir.join("bootstrap-token");
    std::fs::create_dir_all(&bootstrap).unwrap();
    std::fs::write(bootstrap.join("token"), "node-bootstrap-token-e2e\n").unwrap();
    std::fs::copy(&ca, bootstrap.join("ca.crt")).unwrap();
    let bootstrap_dir = bootstrap.to_string_lossy().into_owned();
    let (_server, tbase, tca) = spawn_server(
        &c,
        "token-server",
        &[
            "--require-token",
            "--token-file",
            &token_file,
            "--apiserver-url",
            "https://api-int.example:6443",
            "--bootstrap-token-dir",
            &bootstrap_dir,
        ],
    );
    let turl = format!("{tbase}/config/worker");
    let (code, body) = curl(&tca, &turl, None, &[]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("pool worker: this server requires a bootstrap token"));
    let (code, _) = curl(
        &tca,
        &turl,
        None,
        &[
            "-H",
            "Authorization: Bearer 0123456789abcdef0123456789abcdeX",
        ],
    );
    assert_eq!(code, 403);
    let (code, body) = curl(
        &tca,
        &turl,
        Some("application/vnd.coreos.ignition+json;version=3.4.0"),
        &[
            "-H",
            "Authorization: Bearer 0123456789abcdef0123456789abcdef",
        ],
    );
    assert_eq!(code, 200, "{body}");
    check_answer(&body, SpecVersion::V3(4), &rendered);
    let served: Value = serde_json::from_str(&body).unwrap();
    let kc = String::from_utf8(served_file(&served, "/etc/kubernetes/kubeconfig")).unwrap();
    assert!(
        kc.contains("server: https://api-int.example:6443\n")
            && kc.contains("token: node-bootstrap-token-e2e\n"),
        "{kc}"
    );
    let content: Value = serde_json::from_slice(&served_file(
        &served,
        "/etc/mcs-machine-config-content.json",
    ))
    .unwrap();
    assert_eq!(content["metadata"]["name"], rendered.as_str());
}

#[test]
fn bootstrap_renders_what_the_cluster_renders_and_the_server_serves_it() {
    let c = Cluster::up(Opts::default());
    let before = c.pool_target("worker");
    c.apply(
        "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 50-e2e-bootstrap
  labels:
    machineconfiguration.openshift.io/role: worker
spec:
  kernelArguments: [nosmt]
  config:
    ignition: {version: 3.4.0}
    storage:
      files:
      - path: /etc/e2e-bootstrap.conf
        mode: 420
        contents: {source: \"data:,bootstrap%0A\"}
",
    );
    // The template controller's inputs outside the ControllerConfig: a pull secret and the
    // APIServer's TLS profile, which bootstrap reads from the manifests too.
    c.set_pull_secret();
    c.apply(
        "apiVersion: config.openshift.io/v1
kind: APIServer
metadata: {name: cluster}
spec:
  tlsSecurityProfile: {type: Modern, modern: {}}
",
    );
    // The generators' inputs: bootstrap generates their configs too.
    c.apply(
        "apiVersion: machineconfiguration.openshift.io/v1
kind: KubeletConfig
metadata: {name: max-pods}
spec:
  machineConfigPoolSelector:
    matchLabels:
      pools.operator.machineconfiguration.openshift.io/worker: \"\"
  kubeletConfig: {maxPods: 300}
---
apiVersion: config.openshift.io/v1
kind: ImageDigestMirrorSet
metadata: {name: release-mirror}
spec:
  imageDigestMirrors:
  - source: quay.io/openshift-release-dev/ocp-release
    mirrors: [mirror.example.net/ocp/release]
",
    );
    // Both pools on a render holding every change.
    let holds_all = |rendered: &str, worker: bool| {
        let mc = c.try_get_json(&["mc", rendered])?;
        let text = mc.to_string();
        let all = text.contains("/var/lib/kubelet/config.json")
            && text.contains("VersionTLS13")
            && text.contains("mirror.example.net")
            && (!worker
                || (text.contains("/etc/e2e-bootstrap.conf") && text.contains("maxPods%3A%20300")));
        all.then_some(())
    };
    let target = wait_for("worker renders all the changes", 120, || {
        let t = c.pool_target("worker");
        (t != before && !t.is_empty() && holds_all(&t, true).is_some()).then_some(t)
    });
    wait_for(
        "master renders the pull secret and the profile",
        120,
        || holds_all(&c.pool_target("master"), false),
    );

    // The cluster's objects, as a directory of manifests; no API server from here on.
    let manifests = c.dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, args) in [
        (
            "pull-secret.json",
            &["secret", "pull-secret", "-n", "mco-system"][..],
        ),
        (
            "apiserver.json",
            &["apiserver.config.openshift.io", "cluster"][..],
        ),
        ("kubeletconfigs.json", &["kubeletconfig"][..]),
        ("mirrors.json", &["imagedigestmirrorset"][..]),
    ] {
        std::fs::write(manifests.join(name), c.get_json(args).to_string()).unwrap();
    }
    let mut objects = c.get_json(&["mc,mcp,controllerconfig"]);
    // The template controller's configs are left out: bootstrap generates them from the
    // ControllerConfig, as the cluster's controller did.
    let items = objects["items"].as_array_mut().unwrap();
    let before_filter = items.len();
    items.retain(|o| o["metadata"]["ownerReferences"][0]["kind"] != "ControllerConfig");
    assert_eq!(before_filter - items.len(), 6, "the template configs");
    // The generators' configs too: bootstrap generates them from their inputs.
    let before_filter = items.len();
    items.retain(|o| {
        !o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .contains("-generated-")
    });
    assert_eq!(
        before_filter - items.len(),
        3,
        "the worker's kubelet config and each pool's registries config"
    );
    std::fs::write(manifests.join("objects.json"), objects.to_string()).unwrap();
    let out = c.dir.join("bootstrap");
    let (ok, text) = c.mco(&[
        "bootstrap",
        "--manifests",
        manifests.to_str().unwrap(),
        "--dest-dir",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");

    for pool in ["master", "worker"] {
        let in_cluster = c.pool_target(pool);
        let p: Value = mco_apimachinery::yaml::from_str(
            &std::fs::read_to_string(out.join(format!("machine-pools/{pool}.yaml"))).unwrap(),
        )
        .unwrap();
        assert_eq!(p["status"]["configuration"]["name"], in_cluster.as_str());
        let boot: Value = mco_apimachinery::yaml::from_str(
            &std::fs::read_to_string(out.join(format!("machine-configs/{in_cluster}.yaml")))
                .unwrap(),
        )
        .unwrap();
        let cluster = c.get_json(&["mc", &in_cluster]);
        assert_eq!(boot["spec"], cluster["spec"], "{pool}: contents differ");
    }
    assert_eq!(c.pool_target("worker"), target);

    // `mco server --bootstrap-dir` serves them; a pool it has no file for is upstream's 404.
    let log = c.dir.join("boot-server.log");
    let certs = c.dir.join("boot-certs");
    let mut cmd = Command::new(MCO);
    cmd.args(["server", "--listen", "127.0.0.1:0", "--bootstrap-dir"])
        .arg(&out)
        .arg("--cert-dir")
        .arg(&certs);
    let _server = Group::spawn(cmd, &log, "mco server --bootstrap-dir");
    let addr = wait_for("mco server serving", 60, || served_addr(&log));
    let ca = certs.join("ca.crt");
    let (code, body) = curl(
        &ca,
        &format!("https://{addr}/config/worker"),
        Some("application/vnd.coreos.ignition+json;version=3.4.0"),
        &[],
    );
    assert_eq!(code, 200, "{body}");
    check_answer(&body, SpecVersion::V3(4), &target);
    let (code, body) = curl(&ca, &format!("https://{addr}/config/infra"), None, &[]);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("pool infra"), "{body}");
}
