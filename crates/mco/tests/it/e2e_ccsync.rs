//! End-to-end: the ControllerConfig's CA bundles follow the cluster's ConfigMaps, as upstream's
//! operator keeps them, with real processes: `mco up --no-controller`, the shipped `--openshift`
//! RBAC applied, and `mco controller --sync-controller-config` run as the shipped
//! `mco-controller` ServiceAccount (so the RBAC is proven to suffice). A rotated kubelet client
//! CA reaches every node's `/etc/kubernetes/kubelet-ca.crt` without a reboot, a registry CA
//! added to the administrator's ConfigMap reaches `/etc/docker/certs.d`, a missing source
//! leaves its field, a hand edit is undone at the next resync, and a refused source is reported
//! on the ControllerConfig. On a cluster taken over (upstream's base configs kept), the proxy's
//! status and the trusted CAs reach every node's `/etc/mco/proxy.env` and anchors file through
//! those configs, which keep upstream's stamp. A release upgrade's OS image, published in the
//! release's `machine-config-osimageurl` ConfigMap, rebases every node through a new rendered
//! config carrying the release's version, within the pool's `maxUnavailable`; its pause image,
//! published in `machine-config-operator-images`, reaches every node's CRI-O config through
//! the kept `01-<role>-container-runtime`.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::e2e::{self, Group, MCO, Slot, wait_for};

const CC: &str = "machine-config-controller";
const MANAGED: &str = "openshift-config-managed";
const USER: &str = "openshift-config";
const USER_CM: &str = "registry-cas";
const USER_REGISTRY: &str = "registry.example.com..5000";
const USER_DIR: &str = "/etc/docker/certs.d/registry.example.com:5000";
const MANAGED_REGISTRY: &str = "image-registry.openshift-image-registry.svc..5000";
const MANAGED_DIR: &str = "/etc/docker/certs.d/image-registry.openshift-image-registry.svc:5000";
const VERSION_ANN: &str = "machineconfiguration.openshift.io/generated-by-controller-version";
/// Upstream's controller stamps its git commit.
const UPSTREAM_VERSION: &str = "1d7c5a1e9f2b3c4d5e6f708192a3b4c5d6e7f809";
const PROXY_ENV: &str = mco_generate::template::PROXY_FILE;
const ANCHORS: &str = mco_generate::template::TRUST_BUNDLE_FILE;

fn ca(cn: &str) -> String {
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationalUnitName, "openshift");
    dn.push(rcgen::DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().pem()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// `mco up --no-controller` in a temp dir, with the admin kubeconfig.
pub(crate) struct Up {
    dir: PathBuf,
    data: PathBuf,
    _up: Group,
    _slot: Slot,
}

impl Up {
    pub(crate) fn kubeconfig(&self) -> PathBuf {
        self.data.join("kubeconfig")
    }

    pub(crate) fn kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, String> {
        use std::io::Write as _;
        let mut child = Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .env("KUBECACHEDIR", self.dir.join("kube-cache"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl on PATH");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_as(&self.kubeconfig(), args, None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub(crate) fn apply(&self, manifest: &str) {
        self.kubectl_as(
            &self.kubeconfig(),
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(manifest),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    fn get_json(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).unwrap()
    }

    fn node_root(&self, node: &str) -> PathBuf {
        self.data.join("nodes").join(node)
    }

    fn read_node_file(&self, node: &str, path: &str) -> Option<String> {
        std::fs::read_to_string(self.node_root(node).join(path.trim_start_matches('/'))).ok()
    }

    fn boot_id(&self, node: &str) -> String {
        std::fs::read_to_string(self.node_root(node).join("proc/sys/kernel/random/boot_id"))
            .unwrap()
            .trim()
            .to_owned()
    }

    fn spec(&self) -> Value {
        self.get_json(&["controllerconfig", CC])["spec"].clone()
    }

    /// Waits until every node's `path` holds `want`, `alive` checking the controller between
    /// reads.
    fn wait_nodes_file(
        &self,
        nodes: &[&str],
        what: &str,
        path: &str,
        want: &str,
        alive: &mut dyn FnMut(),
    ) {
        for n in nodes {
            wait_for(&format!("{n}: {what}"), 120, || {
                alive();
                (self.read_node_file(n, path)? == want).then_some(())
            });
        }
    }
}

impl Up {
    /// `mco up --no-controller` with a master and a worker, the namespaces the shipped
    /// `--openshift` RBAC names, and that RBAC applied.
    pub(crate) fn start() -> Up {
        Up::start_with_workers(1)
    }

    /// [`Up::start`] with `workers` workers.
    fn start_with_workers(workers: u32) -> Up {
        let workers = workers.to_string();
        let slot = Slot::take();
        let dir = e2e::tempdir();
        let data = dir.join(".mco");
        let mut cmd = Command::new(MCO);
        cmd.current_dir(&dir)
            .args(["up", "--no-controller", "--data-dir"])
            .arg(&data)
            .args([
                "--masters",
                "1",
                "--workers",
                &workers,
                "--reboot-seconds",
                "0",
            ])
            .args(["--listen", "127.0.0.1:0"])
            .args(["--mcs-listen", "127.0.0.1:0"])
            .args(["--dashboard-listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info");
        let up_log = dir.join("up.log");
        let up = Group::spawn(cmd, &up_log, "mco up");
        let c = Up {
            dir: dir.clone(),
            data,
            _up: up,
            _slot: slot,
        };
        wait_for("the API server", 90, || {
            c.kubectl_as(&c.kubeconfig(), &["get", "--raw", "/readyz"], None)
                .ok()
        });
        wait_for("the ControllerConfig", 60, || {
            c.kubectl_as(&c.kubeconfig(), &["get", "controllerconfig", CC], None)
                .ok()
        });
        wait_for("the pools", 60, || {
            c.kubectl_as(&c.kubeconfig(), &["get", "mcp", "master", "worker"], None)
                .ok()
        });

        // The shipped OpenShift RBAC, in the namespaces it names.
        for ns in [
            MANAGED,
            USER,
            "openshift-machine-config-operator",
            "openshift-machine-api",
        ] {
            c.kubectl(&["create", "namespace", ns]);
        }
        let out = Command::new(MCO)
            .args(["manifests", "--openshift", "--only", "rbac"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        c.apply(&String::from_utf8(out.stdout).unwrap());
        c
    }

    /// `mco controller --sync-controller-config` as the shipped `mco-controller`
    /// ServiceAccount, and its log.
    pub(crate) fn controller(&self) -> (Group, PathBuf) {
        self.controller_with(&[])
    }

    /// [`Up::controller`] with `flags` (`--name=value`) in place of its own of the same names.
    pub(crate) fn controller_with(&self, flags: &[&str]) -> (Group, PathBuf) {
        let token = self.kubectl(&["create", "token", "mco-controller", "-n", "mco-system"]);
        let as_controller = self.dir.join("controller.kubeconfig");
        std::fs::copy(self.kubeconfig(), &as_controller).unwrap();
        let user = format!("--token={}", token.trim());
        self.kubectl_as(
            &as_controller,
            &["config", "set-credentials", "mco-controller", &user],
            None,
        )
        .unwrap();
        self.kubectl_as(
            &as_controller,
            &[
                "config",
                "set-context",
                "--current",
                "--user=mco-controller",
            ],
            None,
        )
        .unwrap();
        let log = self.dir.join("controller.log");
        let name = |f: &str| f.split('=').next().unwrap_or_default().to_owned();
        let mut args = vec![
            "--sync-controller-config",
            "--metrics-addr=127.0.0.1:0",
            "--namespace=mco-system",
            "--lease-namespace=mco-system",
            "--lease-name=mco-controller",
            "--resync=5s",
            "--error-requeue=1s",
        ];
        args.retain(|a| flags.iter().all(|f| name(f) != name(a)));
        args.extend_from_slice(flags);
        let mut cmd = Command::new(MCO);
        cmd.args(["controller", "--kubeconfig"])
            .arg(&as_controller)
            .args(args)
            .env("RUST_LOG", "info");
        (Group::spawn(cmd, &log, "mco controller"), log)
    }
}

/// Panics with the controller's log once it has ended: called between reads while waiting.
pub(crate) fn alive<'a>(controller: &'a mut Group, log: &'a Path) -> impl FnMut() + 'a {
    move || {
        if let Some(s) = controller.exited() {
            let logs = std::fs::read_to_string(log).unwrap_or_default();
            panic!("mco controller ended ({s}):\n{logs}");
        }
    }
}

/// Ends a test that passed: the controller still running, then stopped, and the test's
/// directory removed (a failed test keeps it, with the logs).
fn finish(c: Up, mut controller: Group, log: &Path) {
    alive(&mut controller, log)();
    drop(controller);
    let dir = c.dir.clone();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

fn configmap(namespace: &str, name: &str, data: Value) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    })
    .to_string()
}

#[test]
fn controller_config_ca_bundles_follow_the_clusters_configmaps() {
    // The controller's bound is the daemon's: what it takes, every node writes.
    assert_eq!(
        mco_controller::ccsync::MAX_REGISTRY_BUNDLES,
        mco_daemon::engine::certs::MAX_REGISTRY_BUNDLES
    );

    let c = Up::start();

    // The sources: the kubelet's client CA; no image-registry-ca yet, whose field is set by
    // hand and must stay.
    let first = ca("kube-apiserver-to-kubelet-signer-1");
    c.apply(&configmap(
        MANAGED,
        "kube-apiserver-client-ca",
        json!({"ca-bundle.crt": first}),
    ));
    let kept = ca("kept-registry");
    let kept_list = json!([{"file": "kept.example", "data": b64(&kept)}]);
    c.kubectl(&[
        "patch",
        "controllerconfig",
        CC,
        "--type=merge",
        "-p",
        &json!({"spec": {"imageRegistryBundleData": kept_list}}).to_string(),
    ]);

    let (mut controller, log) = c.controller();
    let mut alive = alive(&mut controller, &log);

    // The kubelet CA taken from its ConfigMap; the field without a source left as it was.
    wait_for("kubeAPIServerServingCAData from the ConfigMap", 120, || {
        alive();
        (c.spec()["kubeAPIServerServingCAData"] == b64(&first)).then_some(())
    });
    assert_eq!(c.spec()["imageRegistryBundleData"], kept_list);
    assert!(
        c.spec()
            .get("imageRegistryBundleUserData")
            .is_none_or(|v| v.as_array().is_none_or(Vec::is_empty)),
        "{}",
        c.spec()
    );
    let nodes = ["master-0", "worker-0"];
    c.wait_nodes_file(
        &nodes,
        "the first kubelet CA",
        "/etc/kubernetes/kubelet-ca.crt",
        &first,
        &mut alive,
    );
    // The first rollout of the rendered configs over (it may reboot), every node Done on it.
    wait_settled(&c, &[("master", 1), ("worker", 1)], &nodes, &mut alive);
    let boots: Vec<String> = nodes.iter().map(|n| c.boot_id(n)).collect();

    // The cluster rotates its signer: the new CA beside the old one.
    let second = ca("kube-apiserver-to-kubelet-signer-2");
    let rotated = format!("{second}{first}");
    c.apply(&configmap(
        MANAGED,
        "kube-apiserver-client-ca",
        json!({"ca-bundle.crt": rotated}),
    ));
    c.wait_nodes_file(
        &nodes,
        "the rotated kubelet CA",
        "/etc/kubernetes/kubelet-ca.crt",
        &rotated,
        &mut alive,
    );
    let after: Vec<String> = nodes.iter().map(|n| c.boot_id(n)).collect();
    assert_eq!(after, boots, "a node rebooted for the kubelet CA");

    // The administrator's registry CA: the ConfigMap, then the Image config naming it.
    let registry = ca("registry-ca");
    c.apply(&configmap(USER, USER_CM, json!({USER_REGISTRY: registry})));
    c.apply(
        &json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "Image",
            "metadata": {"name": "cluster"},
            "spec": {"additionalTrustedCA": {"name": USER_CM}},
        })
        .to_string(),
    );
    c.wait_nodes_file(
        &nodes,
        "the user's registry CA",
        &format!("{USER_DIR}/ca.crt"),
        &registry,
        &mut alive,
    );
    assert_eq!(
        c.spec()["imageRegistryBundleUserData"],
        json!([{"file": USER_REGISTRY, "data": b64(&registry)}])
    );
    // A registry CA added later to the same ConfigMap reaches the nodes too.
    let another = ca("another-registry-ca");
    c.apply(&configmap(
        USER,
        USER_CM,
        json!({USER_REGISTRY: registry, "quay.example.com": another}),
    ));
    c.wait_nodes_file(
        &nodes,
        "the added registry CA",
        "/etc/docker/certs.d/quay.example.com/ca.crt",
        &another,
        &mut alive,
    );

    // The cluster's registry CAs, once published, replace the hand-set list.
    let internal = ca("image-registry-ca");
    c.apply(&configmap(
        MANAGED,
        "image-registry-ca",
        json!({MANAGED_REGISTRY: internal}),
    ));
    c.wait_nodes_file(
        &nodes,
        "the cluster's registry CA",
        &format!("{MANAGED_DIR}/ca.crt"),
        &internal,
        &mut alive,
    );
    assert_eq!(
        c.spec()["imageRegistryBundleData"],
        json!([{"file": MANAGED_REGISTRY, "data": b64(&internal)}])
    );

    // A hand edit of a kept field is undone at the next resync (5 s here).
    let edit = ca("hand-edit");
    c.kubectl(&[
        "patch",
        "controllerconfig",
        CC,
        "--type=merge",
        "-p",
        &json!({"spec": {"kubeAPIServerServingCAData": b64(&edit)}}).to_string(),
    ]);
    wait_for("the hand edit undone", 60, || {
        alive();
        (c.spec()["kubeAPIServerServingCAData"] == b64(&rotated)).then_some(())
    });

    // A source refused (the key gone): nothing patched, and a Warning on the ControllerConfig
    // naming the ConfigMap and the key.
    c.apply(&configmap(
        MANAGED,
        "kube-apiserver-client-ca",
        json!({"other.crt": first}),
    ));
    let event = sync_failed_event(&c, &mut alive);
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("openshift-config-managed/kube-apiserver-client-ca")
            && message.contains("ca-bundle.crt"),
        "{event}"
    );
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["kind"], "ControllerConfig");
    assert_eq!(c.spec()["kubeAPIServerServingCAData"], b64(&rotated));
    for n in nodes {
        assert_eq!(
            c.read_node_file(n, "/etc/kubernetes/kubelet-ca.crt")
                .as_deref(),
            Some(rotated.as_str())
        );
    }

    drop(alive);
    finish(c, controller, &log);
}

/// The first `ControllerConfigSyncFailed` Event, once there is one.
fn sync_failed_event(c: &Up, alive: &mut dyn FnMut()) -> Value {
    wait_for("a ControllerConfigSyncFailed event", 60, || {
        alive();
        let events = c.get_json(&[
            "events",
            "-n",
            "mco-system",
            "--field-selector",
            "reason=ControllerConfigSyncFailed",
        ]);
        events["items"].as_array()?.first().cloned()
    })
}

/// The assignments of `/etc/mco/proxy.env`, comments left out.
fn proxy_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

/// Every Event on `object` with `reason`: its messages.
fn event_messages(c: &Up, object: &str, reason: &str) -> Vec<String> {
    let events = c.get_json(&[
        "events",
        "-A",
        "--field-selector",
        &format!("involvedObject.name={object},reason={reason}"),
    ]);
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_taken_over_cluster_follows_its_proxy_and_trust_bundle() {
    let c = Up::start();
    // The Proxy kind, as OpenShift serves it.
    let crd = <mco_api::Proxy as kube::CustomResourceExt>::crd();
    c.apply(&serde_json::to_string(&crd).unwrap());
    wait_for("the Proxy kind served", 60, || {
        c.kubectl_as(&c.kubeconfig(), &["get", "proxies"], None)
            .ok()
    });

    let (mut controller, log) = c.controller();
    let mut alive = alive(&mut controller, &log);

    // The base configs as upstream's template controller leaves them: its stamp, and the
    // (empty) additional trust bundle in `00-<role>`, which mco's templates do not write.
    let templates = stamp_templates_as_upstreams(&c, &mut alive);
    let file = json!({"path": ANCHORS, "mode": 384, "contents": {"source": "data:,"}});
    let add = json!([{"op": "add", "path": "/spec/config/storage/files/-", "value": file}]);
    let pools = ["master", "worker"];
    for pool in pools {
        c.kubectl(&[
            "patch",
            "mc",
            &format!("00-{pool}"),
            "--type=json",
            "-p",
            &add.to_string(),
        ]);
    }
    let nodes = ["master-0", "worker-0"];
    c.wait_nodes_file(
        &nodes,
        "upstream's empty trust bundle",
        ANCHORS,
        "",
        &mut alive,
    );
    wait_settled(&c, &[("master", 1), ("worker", 1)], &nodes, &mut alive);
    // Taken over in step: each kept base config only marked.
    for pool in pools {
        let name = format!("00-{pool}");
        wait_for(&format!("{name} marked"), 30, || {
            let mc = c.get_json(&["mc", &name]);
            ["mco.dev/proxy-sha256", "mco.dev/trust-bundle-sha256"]
                .iter()
                .all(|mark| e2e::annotation(&mc, mark).len() == 64)
                .then_some(())
        });
        assert!(event_messages(&c, &name, "TrustBundleFollowed").is_empty());
        assert!(event_messages(&c, &name, "ProxyFollowed").is_empty());
    }
    let boots: Vec<String> = nodes.iter().map(|n| c.boot_id(n)).collect();

    // A corporate CA in user-ca-bundle: the anchors file, with no reboot (the daemon runs
    // update-ca-trust and restarts CRI-O).
    let corporate = ca("corporate-root");
    c.apply(&configmap(
        USER,
        "user-ca-bundle",
        json!({"ca-bundle.crt": corporate}),
    ));
    c.wait_nodes_file(&nodes, "the corporate CA", ANCHORS, &corporate, &mut alive);
    assert_eq!(c.spec()["additionalTrustBundle"], b64(&corporate));
    let after: Vec<String> = nodes.iter().map(|n| c.boot_id(n)).collect();
    assert_eq!(after, boots, "a node rebooted for the trust bundle");

    // The proxy, with a CA of its own: its status reaches proxy.env, its CA the anchors file
    // after user-ca-bundle's.
    let proxy_ca = ca("corporate-proxy");
    c.apply(&configmap(
        USER,
        "proxy-ca",
        json!({"ca-bundle.crt": proxy_ca}),
    ));
    c.apply(
        &json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "Proxy",
            "metadata": {"name": "cluster"},
            "spec": {
                "httpProxy": "http://proxy.example.com:3128",
                "trustedCA": {"name": "proxy-ca"},
            },
        })
        .to_string(),
    );
    let status = json!({"status": {
        "httpProxy": "http://proxy.example.com:3128",
        "httpsProxy": "http://proxy.example.com:3128",
        "noProxy": ".cluster.local,.svc,10.0.0.0/16",
    }});
    c.kubectl(&[
        "patch",
        "proxy",
        "cluster",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    let want = [
        "HTTP_PROXY=http://proxy.example.com:3128",
        "HTTPS_PROXY=http://proxy.example.com:3128",
        "NO_PROXY=.cluster.local,.svc,10.0.0.0/16",
    ];
    for n in nodes {
        let text = wait_for(&format!("{n}: the proxy"), 180, || {
            alive();
            let text = c.read_node_file(n, PROXY_ENV)?;
            (proxy_lines(&text) == want).then_some(text)
        });
        assert!(
            text.starts_with("# Proxy environment variables"),
            "{n}: {text}"
        );
    }
    let both = format!("{corporate}{proxy_ca}");
    c.wait_nodes_file(&nodes, "both CAs", ANCHORS, &both, &mut alive);
    assert_eq!(
        c.spec()["proxy"],
        json!({
            "httpProxy": "http://proxy.example.com:3128",
            "httpsProxy": "http://proxy.example.com:3128",
            "noProxy": ".cluster.local,.svc,10.0.0.0/16",
        })
    );

    // Upstream's stamps stay; each rewrite is on record, on the config.
    for pool in pools {
        let name = format!("00-{pool}");
        let mc = c.get_json(&["mc", &name]);
        assert_eq!(
            e2e::annotation(&mc, VERSION_ANN),
            UPSTREAM_VERSION,
            "{name}"
        );
        for (reason, said) in [
            (
                "ProxyFollowed",
                format!("{PROXY_ENV} now holds the ControllerConfig's spec.proxy"),
            ),
            (
                "TrustBundleFollowed",
                format!("{ANCHORS} now holds the ControllerConfig's spec.additionalTrustBundle"),
            ),
        ] {
            let messages = wait_for(&format!("{name}: {reason}"), 30, || {
                let m = event_messages(&c, &name, reason);
                (!m.is_empty()).then_some(m)
            });
            for m in messages {
                assert_eq!(
                    m,
                    format!("kept as another controller generated it: {said}"),
                    "{name}"
                );
            }
        }
    }
    for name in templates.iter().filter(|n| !n.starts_with("00-")) {
        let mc = c.get_json(&["mc", name]);
        assert_eq!(
            e2e::annotation(&mc, VERSION_ANN),
            UPSTREAM_VERSION,
            "{name}"
        );
    }

    drop(alive);
    finish(c, controller, &log);
}

const OPERATOR_NS: &str = "openshift-machine-config-operator";
const OS_IMAGE_URLS: &str = "machine-config-osimageurl";
const RELEASE_ANN: &str = mco_api::constants::annotations::RELEASE_IMAGE_VERSION;
const EXT_A: &str = "registry.example.com/mco/machine-os-extensions:1.2.2";
const EXT_B: &str = "registry.example.com/mco/machine-os-extensions:1.3.0";

/// The release's `machine-config-operator-images`, its `images.json` as the CVO writes it.
fn apply_release_images(c: &Up, images: &Value) {
    c.apply(&configmap(
        OPERATOR_NS,
        RELEASE_IMAGES,
        json!({"images.json": images.to_string()}),
    ));
}

/// The release's OS images ConfigMap, as the CVO writes it.
fn release(version: &str, base: &str, extensions: &str) -> String {
    configmap(
        OPERATOR_NS,
        OS_IMAGE_URLS,
        json!({
            "releaseVersion": version,
            "baseOSContainerImage": base,
            "baseOSExtensionsContainerImage": extensions,
            "osImageURL": "",
        }),
    )
}

/// The rendered configs' names, sorted.
fn rendered_names(c: &Up) -> Vec<String> {
    let mut names: Vec<String> = c.get_json(&["mc"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["metadata"]["name"].as_str())
        .filter(|n| n.starts_with("rendered-"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// Each pool's target.
fn targets(c: &Up, pools: &[&str]) -> Vec<String> {
    pools
        .iter()
        .map(|p| {
            c.get_json(&["mcp", p])["spec"]["configuration"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// The line of `rpm-ostree status` (simulated) marking the booted deployment.
fn booted_line(c: &Up, node: &str) -> String {
    let out = Command::new(MCO)
        .arg("sim")
        .arg("--data-dir")
        .arg(&c.data)
        .args(["rpm-ostree", node, "status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let st = String::from_utf8_lossy(&out.stdout).into_owned();
    st.lines()
        .find(|l| l.trim_start().starts_with("* "))
        .unwrap_or_else(|| panic!("{node}: no booted deployment:\n{st}"))
        .to_owned()
}

/// The base configs as upstream's template controller leaves them: once each is generated, its
/// stamp. Their names.
fn stamp_templates_as_upstreams(c: &Up, alive: &mut dyn FnMut()) -> Vec<String> {
    let templates = mco_generate::template::names(&Default::default());
    for name in &templates {
        wait_for(&format!("{name} generated"), 120, || {
            alive();
            c.kubectl_as(&c.kubeconfig(), &["get", "mc", name], None)
                .ok()
        });
    }
    for name in &templates {
        c.kubectl(&[
            "annotate",
            "mc",
            name,
            &format!("{VERSION_ANN}={UPSTREAM_VERSION}"),
            "--overwrite",
        ]);
    }
    templates
}

/// Every pool settled with its count of machines, then every node Done on its target.
fn wait_settled(c: &Up, pools: &[(&str, u64)], nodes: &[&str], alive: &mut dyn FnMut()) {
    for &(pool, count) in pools {
        wait_for(&format!("pool {pool} settled"), 180, || {
            alive();
            let p = c.get_json(&["mcp", pool]);
            (p["status"]["machineCount"] == count).then_some(())?;
            e2e::pool_settled(&p)
        });
    }
    wait_nodes_done(c, nodes, alive);
}

/// Every node Done on its pool's target.
fn wait_nodes_done(c: &Up, nodes: &[&str], alive: &mut dyn FnMut()) {
    for n in nodes {
        wait_for(&format!("{n} Done on its target"), 120, || {
            alive();
            let node = c.get_json(&["node", n]);
            let done = e2e::annotation(&node, e2e::STATE_ANN) == "Done"
                && e2e::annotation(&node, e2e::CURRENT_ANN)
                    == e2e::annotation(&node, e2e::DESIRED_ANN);
            done.then_some(())
        });
    }
}

#[test]
fn a_release_upgrade_rebases_every_node_onto_the_releases_os_image() {
    let c = Up::start_with_workers(2);
    // The ControllerConfig as upstream's operator left it: release A's images (the legacy
    // osImageURL the same).
    assert_eq!(c.spec()["osImageURL"], e2e::IMAGE_122);
    let images = json!({"spec": {
        "baseOSContainerImage": e2e::IMAGE_122,
        "baseOSExtensionsContainerImage": EXT_A,
    }});
    c.kubectl(&[
        "patch",
        "controllerconfig",
        CC,
        "--type=merge",
        "-p",
        &images.to_string(),
    ]);
    let (mut controller, log) = c.controller();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut alive = alive(&mut controller, &log);
    let pools = ["master", "worker"];
    let nodes = ["master-0", "worker-0", "worker-1"];
    wait_settled(&c, &[("master", 1), ("worker", 2)], &nodes, &mut alive);
    let before = targets(&c, &pools);
    let rendered = rendered_names(&c);
    let boots: Vec<String> = nodes.iter().map(|n| c.boot_id(n)).collect();

    // Release A's ConfigMap, as the ControllerConfig already is: the version is taken and
    // stamped on the rendered configs in place; nothing is rendered anew and no node moves.
    c.apply(&release("4.16.8", e2e::IMAGE_122, EXT_A));
    wait_for("release A's version on the ControllerConfig", 60, || {
        alive();
        let cc = c.get_json(&["controllerconfig", CC]);
        (e2e::annotation(&cc, RELEASE_ANN) == "4.16.8").then_some(())
    });
    for name in &before {
        wait_for(&format!("{name} stamped with release A"), 60, || {
            alive();
            let mc = c.get_json(&["mc", name]);
            (e2e::annotation(&mc, RELEASE_ANN) == "4.16.8").then_some(())
        });
    }
    assert_eq!(targets(&c, &pools), before);
    assert_eq!(rendered_names(&c), rendered);
    let after: Vec<String> = nodes.iter().map(|n| c.boot_id(n)).collect();
    assert_eq!(after, boots, "a node rebooted for release A");
    assert!(event_messages(&c, CC, "OSImageFollowed").is_empty());

    // The CVO moves to release B, writing its images.json before its OS images (the order
    // of its manifests). Alone, images.json is held: a pause image taken now would start a
    // rollout of its own, and the first nodes would reboot twice.
    let pause_b = "quay.example.com/release/pod:4.17.2";
    let images_b = json!({"releaseVersion": "4.17.2", "infraImage": pause_b});
    apply_release_images(&c, &images_b);
    wait_for("images.json of release B held", 60, || {
        alive();
        logs()
            .contains("the release's images wait until both name one release")
            .then_some(())
    });
    assert_ne!(c.spec()["images"]["infraImageKey"], pause_b);
    assert_eq!(targets(&c, &pools), before);
    // Then its OS images: both are taken at once, and every node is rebased onto B's OS
    // image, one worker at a time (maxUnavailable 1), through one new rendered config per
    // pool.
    c.apply(&release("4.17.2", e2e::IMAGE_130, EXT_B));
    let mut most_unavailable = 0;
    let new: Vec<String> = pools
        .iter()
        .zip(&before)
        .map(|(pool, old)| {
            wait_for(&format!("pool {pool} on release B, settled"), 240, || {
                alive();
                let workers = c.get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"]);
                let unavailable = workers["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|n| e2e::node_unavailable(n))
                    .count();
                most_unavailable = most_unavailable.max(unavailable);
                let p = c.get_json(&["mcp", pool]);
                let target = e2e::pool_settled(&p)?;
                (target != *old).then_some(target)
            })
        })
        .collect();
    assert!(
        most_unavailable <= 1,
        "{most_unavailable} workers unavailable at once"
    );
    wait_nodes_done(&c, &nodes, &mut alive);
    assert_eq!(c.spec()["images"]["infraImageKey"], pause_b);
    assert_eq!(
        rendered_names(&c).len(),
        rendered.len() + pools.len(),
        "one new rendered config per pool: {:?} before, {:?} after",
        rendered,
        rendered_names(&c)
    );
    for name in &new {
        let mc = c.get_json(&["mc", name]);
        assert_eq!(mc["spec"]["osImageURL"], e2e::IMAGE_130, "{name}");
        assert_eq!(
            mc["spec"]["baseOSExtensionsContainerImage"], EXT_B,
            "{name}"
        );
        assert_eq!(e2e::annotation(&mc, RELEASE_ANN), "4.17.2", "{name}");
    }
    for (n, boot) in nodes.iter().zip(&boots) {
        assert_ne!(&c.boot_id(n), boot, "{n} did not reboot");
        let line = booted_line(&c, n);
        assert!(line.contains(e2e::IMAGE_130), "{n}: {line}");
    }
    let cc = c.get_json(&["controllerconfig", CC]);
    assert_eq!(cc["spec"]["baseOSContainerImage"], e2e::IMAGE_130);
    assert_eq!(e2e::annotation(&cc, RELEASE_ANN), "4.17.2");
    // Why the rollout started, on the ControllerConfig, as `kubectl get events` shows it.
    let messages = event_messages(&c, CC, "OSImageFollowed");
    assert_eq!(
        messages,
        [format!(
            "OS images of release 4.17.2 from ConfigMap {OPERATOR_NS}/{OS_IMAGE_URLS}: \
             baseOSContainerImage \"{}\" -> \"{}\", \
             baseOSExtensionsContainerImage \"{EXT_A}\" -> \"{EXT_B}\"",
            e2e::IMAGE_122,
            e2e::IMAGE_130
        )]
    );
    let table = c.kubectl(&["get", "events", "-n", "mco-system"]);
    assert!(
        table
            .lines()
            .any(|l| l.contains("OSImageFollowed") && l.contains("controllerconfig/")),
        "{table}"
    );

    // A refused value (a space in the image): the sync fails naming the ConfigMap and the
    // key; nothing is taken, nothing is rendered.
    let rendered = rendered_names(&c);
    let images_c = json!({"releaseVersion": "4.17.3", "infraImage": pause_b});
    apply_release_images(&c, &images_c);
    c.apply(&release(
        "4.17.3",
        "registry.example.com/mco/machine-os-content:1.3.1 x",
        EXT_B,
    ));
    let event = sync_failed_event(&c, &mut alive);
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "ConfigMap {OPERATOR_NS}/{OS_IMAGE_URLS} key baseOSContainerImage: contains whitespace"
        )),
        "{event}"
    );
    assert_eq!(event["involvedObject"]["kind"], "ControllerConfig");
    let cc = c.get_json(&["controllerconfig", CC]);
    assert_eq!(cc["spec"]["baseOSContainerImage"], e2e::IMAGE_130);
    assert_eq!(e2e::annotation(&cc, RELEASE_ANN), "4.17.2");
    assert_eq!(targets(&c, &pools), new);
    assert_eq!(rendered_names(&c), rendered);
    assert_eq!(event_messages(&c, CC, "OSImageFollowed").len(), 1);

    drop(alive);
    finish(c, controller, &log);
}

const RELEASE_IMAGES: &str = "machine-config-operator-images";
const CRIO_CONF: &str = mco_generate::template::CRIO_CONF;
const PAUSE_B: &str = "quay.example.com/release/pod:4.17.2";

#[test]
fn a_taken_over_cluster_follows_the_releases_pause_image() {
    let c = Up::start();
    let pause_a = c.spec()["images"]["infraImageKey"]
        .as_str()
        .expect("the ControllerConfig names a pause image")
        .to_owned();
    let (mut controller, log) = c.controller();
    let mut alive = alive(&mut controller, &log);

    // The base configs as upstream's template controller leaves them: its stamp.
    let templates = stamp_templates_as_upstreams(&c, &mut alive);
    let pools = ["master", "worker"];
    let nodes = ["master-0", "worker-0"];
    wait_settled(&c, &[("master", 1), ("worker", 1)], &nodes, &mut alive);
    // Taken over in step: each kept CRI-O config only marked.
    let line_a = format!("pause_image = \"{pause_a}\"");
    for pool in pools {
        let name = format!("01-{pool}-container-runtime");
        wait_for(&format!("{name} marked"), 30, || {
            alive();
            let mc = c.get_json(&["mc", &name]);
            (e2e::annotation(&mc, "mco.dev/pause-image-sha256").len() == 64).then_some(())
        });
        assert!(event_messages(&c, &name, "PauseImageFollowed").is_empty());
    }
    let before: Vec<String> = nodes
        .iter()
        .map(|n| {
            let text = c.read_node_file(n, CRIO_CONF).unwrap();
            assert!(text.lines().any(|l| l == line_a), "{n}: {text}");
            text
        })
        .collect();

    // The CVO writes release B's images: the pause image reaches every node's CRI-O config,
    // that line alone.
    let images = json!({
        "releaseVersion": "4.17.2",
        "infraImage": PAUSE_B,
        "kubeRbacProxy": "quay.example.com/release/kube-rbac-proxy:4.17.2",
    });
    apply_release_images(&c, &images);
    wait_for("spec.images from the release", 60, || {
        alive();
        let spec = c.spec();
        (spec["images"]["infraImageKey"] == PAUSE_B
            && spec["images"]["kubeRbacProxyImage"]
                == "quay.example.com/release/kube-rbac-proxy:4.17.2")
            .then_some(())
    });
    let line_b = format!("pause_image = \"{PAUSE_B}\"");
    for (n, old) in nodes.iter().zip(&before) {
        let want = old.replace(&line_a, &line_b);
        assert_ne!(&want, old);
        c.wait_nodes_file(
            &[n],
            "release B's pause image",
            CRIO_CONF,
            &want,
            &mut alive,
        );
    }
    for pool in pools {
        wait_for(
            &format!("pool {pool} settled on release B's pause image"),
            180,
            || {
                alive();
                e2e::pool_settled(&c.get_json(&["mcp", pool]))
            },
        );
    }
    wait_nodes_done(&c, &nodes, &mut alive);

    // Upstream's stamps stay; each rewrite is on record on its config, as `kubectl get events`
    // shows it.
    for pool in pools {
        let name = format!("01-{pool}-container-runtime");
        let mc = c.get_json(&["mc", &name]);
        assert_eq!(
            e2e::annotation(&mc, VERSION_ANN),
            UPSTREAM_VERSION,
            "{name}"
        );
        let messages = wait_for(&format!("{name}: PauseImageFollowed"), 30, || {
            let m = event_messages(&c, &name, "PauseImageFollowed");
            (!m.is_empty()).then_some(m)
        });
        assert_eq!(
            messages,
            [format!(
                "kept as another controller generated it: {CRIO_CONF}'s pause_image is now the ControllerConfig's spec.images.infraImageKey, \"{PAUSE_B}\""
            )],
            "{name}"
        );
    }
    for name in templates
        .iter()
        .filter(|n| !n.contains("container-runtime"))
    {
        let mc = c.get_json(&["mc", name]);
        assert_eq!(
            e2e::annotation(&mc, VERSION_ANN),
            UPSTREAM_VERSION,
            "{name}"
        );
        assert!(event_messages(&c, name, "PauseImageFollowed").is_empty());
    }
    let table = c.kubectl(&["get", "events", "-A"]);
    for pool in pools {
        assert!(
            table.lines().any(|l| l.contains("PauseImageFollowed")
                && l.contains(&format!("machineconfig/01-{pool}-container-runtime"))),
            "{table}"
        );
    }

    drop(alive);
    finish(c, controller, &log);
}
