//! End-to-end: the MachineConfigs mco writes for users, driven with `kubectl` as an
//! administrator would. A KubeletConfig reaches every worker's kubelet config with a drain and a
//! reboot, and deleting it rolls the setting back; an ImageDigestMirrorSet mirror reaches
//! `registries.conf` with a CRI-O reload and no drain or reboot, and so does a ClusterImagePolicy
//! into `policy.json` and `registries.d`; `Image/cluster`'s search
//! registries reach their drop-in; refused input is reported on
//! its object and nothing is applied, for each kind. The template controller's base configs
//! exist with upstream's annotation and owner, the pools render from them, and a hand edit, a
//! deletion or a refused ControllerConfig leaves them as generated; the pull secret the
//! ControllerConfig names reaches every node without a drain or a reboot. OpenShift's `Node`
//! settings and `FeatureGate` reach the kubelets through upstream's 97- and 98- configs. A
//! two-node cluster's arbiter joins its own pool on the arbiter's base configs. On a cluster
//! serving the image policies in `v1alpha1` only (OpenShift 4.16–4.19), they reach the nodes
//! as the `v1` ones do.

use crate::e2e;

use e2e::*;
use serde_json::Value;

on_both_servers!(
    template_configs_are_generated_and_kept,
    an_arbiter_joins_its_own_pool_on_the_arbiter_configs,
    technology_preview_image_policies_reach_the_nodes,
);

/// A sigstore public key as real OpenShift's `v1` schema takes it: an ECDSA P-256 public key,
/// PEM, base64. A macro, so that the manifest constants can hold it.
macro_rules! pem_key {
    () => {
        "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFZ0dLb2VUb2wwWXYvRURJT21SdHVYdWxPTllXNQpwT2xYa1R0SFZlbnRaR2dpV1ZTc09yUkpZeUQrMWhRaTVOTlpaQTdJZnBwRWJjeXJGbDJwYlU3SExRPT0KLS0tLS1FTkQgUFVCTElDIEtFWS0tLS0tCg=="
    };
}

const TEMPLATE_CONFIGS: [&str; 6] = [
    "00-master",
    "00-worker",
    "01-master-container-runtime",
    "01-master-kubelet",
    "01-worker-container-runtime",
    "01-worker-kubelet",
];
const VERSION_ANN: &str = "machineconfiguration.openshift.io/generated-by-controller-version";

/// Also the adoption test's KubeletConfig.
pub(crate) const MAX_PODS: &str = "apiVersion: machineconfiguration.openshift.io/v1
kind: KubeletConfig
metadata:
  name: max-pods
spec:
  machineConfigPoolSelector:
    matchLabels:
      pools.operator.machineconfiguration.openshift.io/worker: \"\"
  kubeletConfig:
    maxPods: 300
";

const BAD_KUBELET: &str = "apiVersion: machineconfiguration.openshift.io/v1
kind: KubeletConfig
metadata:
  name: bad-cgroups
spec:
  machineConfigPoolSelector:
    matchLabels:
      pools.operator.machineconfiguration.openshift.io/worker: \"\"
  kubeletConfig:
    cgroupDriver: cgroupfs
";

const BAD_RUNTIME: &str = "apiVersion: machineconfiguration.openshift.io/v1
kind: ContainerRuntimeConfig
metadata:
  name: bad-pids
spec:
  machineConfigPoolSelector:
    matchLabels:
      pools.operator.machineconfiguration.openshift.io/worker: \"\"
  containerRuntimeConfig:
    pidsLimit: 5
";

const MIRROR: &str = "apiVersion: config.openshift.io/v1
kind: ImageDigestMirrorSet
metadata:
  name: release-mirror
spec:
  imageDigestMirrors:
  - source: quay.io/openshift-release-dev/ocp-release
    mirrors:
    - mirror.example.net/ocp/release
";

/// Signatures required for the release images, with their mirror.
const RELEASE_SIGNATURES: &str = concat!(
    "apiVersion: config.openshift.io/v1
kind: ClusterImagePolicy
metadata:
  name: release-signatures
spec:
  scopes:
  - quay.io/openshift-release-dev/ocp-release
  policy:
    rootOfTrust:
      policyType: PublicKey
      publicKey:
        keyData: ",
    pem_key!(),
    "\n"
);

/// The default namespace's own signatures: one scope of its own, one the cluster policy covers.
const TEAM_SIGNATURES: &str = concat!(
    "apiVersion: config.openshift.io/v1
kind: ImagePolicy
metadata:
  name: team-signatures
  namespace: default
spec:
  scopes:
  - quay.io/team/app
  - quay.io/openshift-release-dev/ocp-release
  policy:
    rootOfTrust:
      policyType: PublicKey
      publicKey:
        keyData: ",
    pem_key!(),
    "\n"
);

const CONFLICTING_MIRROR: &str = "apiVersion: config.openshift.io/v1
kind: ImageDigestMirrorSet
metadata:
  name: zz-conflicting
spec:
  imageDigestMirrors:
  - source: quay.io/openshift-release-dev/ocp-release
    mirrors:
    - other.example.net/ocp/release
    mirrorSourcePolicy: NeverContactSource
";

const SEARCH_REGISTRIES: &str = "apiVersion: config.openshift.io/v1
kind: Image
metadata:
  name: cluster
spec:
  registrySources:
    containerRuntimeSearchRegistries:
    - quay.io
    - registry.example.com
";

/// The KubeletConfig once the controller has observed its generation.
fn observed(c: &Cluster, name: &str) -> Value {
    wait_for(&format!("KubeletConfig {name} observed"), 60, || {
        let o = c.try_get_json(&["kubeletconfig", name])?;
        let seen = o["status"]["observedGeneration"].as_i64()?;
        (Some(seen) == o["metadata"]["generation"].as_i64()).then_some(o)
    })
}

fn kubelet_conf(c: &Cluster, node: &str) -> String {
    c.read_node_file(node, "/etc/kubernetes/kubelet.conf")
        .unwrap_or_default()
}

#[test]
fn generated_configs_reach_the_nodes_with_the_right_disruption() {
    let c = Cluster::up(Opts::default());
    let workers = c.workers();
    let r0 = c.pool_target("worker");

    // Refused input: a Failure condition in upstream's words, and nothing generated.
    c.apply(BAD_KUBELET);
    let bad = observed(&c, "bad-cgroups");
    assert_eq!(bad["status"]["conditions"][0]["type"], "Failure", "{bad}");
    assert_eq!(
        bad["status"]["conditions"][0]["message"],
        "Error: KubeletConfiguration: cgroupDriver is not allowed to be set, but contains: cgroupfs"
    );
    assert!(
        c.try_get_json(&["mc", "99-worker-generated-kubelet"])
            .is_none(),
        "a refused KubeletConfig generated a MachineConfig"
    );
    // `mco doctor` names it, with the message and the edit.
    let (_, doc) = c.mco(&["doctor"]);
    assert!(
        doc.contains("kubeletconfig bad-cgroups: KubeletConfig refused")
            && doc.contains("cgroupDriver is not allowed to be set, but contains: cgroupfs")
            && doc.contains("$ kubectl edit kubeletconfig bad-cgroups"),
        "{doc}"
    );
    c.kubectl(&["delete", "kubeletconfig", "bad-cgroups", "--wait=true"]);
    c.apply(BAD_RUNTIME);
    let bad = wait_for("ContainerRuntimeConfig bad-pids observed", 60, || {
        let o = c.try_get_json(&["containerruntimeconfig", "bad-pids"])?;
        let seen = o["status"]["observedGeneration"].as_i64()?;
        (Some(seen) == o["metadata"]["generation"].as_i64()).then_some(o)
    });
    assert_eq!(bad["status"]["conditions"][0]["type"], "Failure", "{bad}");
    assert_eq!(
        bad["status"]["conditions"][0]["message"],
        "Error: invalid PidsLimit 5"
    );
    assert!(
        c.try_get_json(&["mc", "99-worker-generated-containerruntime"])
            .is_none(),
        "a refused ContainerRuntimeConfig generated a MachineConfig"
    );
    c.kubectl(&[
        "delete",
        "containerruntimeconfig",
        "bad-pids",
        "--wait=true",
    ]);
    assert_eq!(
        c.pool_target("worker"),
        r0,
        "refused input started a rollout"
    );

    // maxPods: every worker's kubelet config, with a drain and a reboot.
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    c.apply(MAX_PODS);
    let kc = observed(&c, "max-pods");
    assert_eq!(kc["status"]["conditions"][0]["type"], "Success", "{kc}");
    assert_eq!(kc["status"]["conditions"][0]["message"], "Success");
    assert_eq!(
        kc["metadata"]["finalizers"],
        serde_json::json!(["99-worker-generated-kubelet"])
    );
    let mc = c.get_json(&["mc", "99-worker-generated-kubelet"]);
    assert_eq!(
        mc["metadata"]["ownerReferences"][0]["kind"],
        "KubeletConfig"
    );
    let r1 = c.wait_rollout("worker", &r0, 240);
    for (w, b) in workers.iter().zip(&boots) {
        let conf = kubelet_conf(&c, w);
        assert!(conf.contains("maxPods: 300"), "{w}: {conf}");
        // The base settings stay under the merged field.
        assert!(conf.contains("cgroupDriver: systemd"), "{w}: {conf}");
        assert_ne!(&c.boot_id(w), b, "{w} did not reboot");
        let prepared = condition_message(&c.mcn(w), "UpdatePrepared");
        assert!(prepared.contains("Drain Required: true"), "{w}: {prepared}");
    }

    // A mirror: registries.conf and a CRI-O reload, no drain, no reboot.
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    c.apply(MIRROR);
    let r2 = c.wait_rollout("worker", &r1, 240);
    for (w, b) in workers.iter().zip(&boots) {
        let conf = c
            .read_node_file(w, "/etc/containers/registries.conf")
            .unwrap_or_default();
        assert!(
            conf.contains("location = \"mirror.example.net/ocp/release\"")
                && conf.contains("pull-from-mirror = \"digest-only\""),
            "{w}: {conf}"
        );
        // The base's search registries are kept.
        assert!(conf.contains("registry.access.redhat.com"), "{w}: {conf}");
        assert_eq!(&c.boot_id(w), b, "{w} rebooted for a mirror");
        let mcn = c.mcn(w);
        let prepared = condition_message(&mcn, "UpdatePrepared");
        assert!(
            prepared.contains("Drain Required: false"),
            "{w}: {prepared}"
        );
        let log = c
            .read_node_file(w, "/var/log/mco-sim/systemd.log")
            .unwrap_or_default();
        assert!(
            log.lines().any(|l| l.contains("reload crio.service")),
            "{w}: no CRI-O reload recorded:\n{log}"
        );
        let post = condition_message(&mcn, "UpdatePostActionComplete");
        assert!(post.contains("Node has reloaded CRIO"), "{w}: {post}");
    }

    // Signature verification for the release images: policy.json and the attachments for the
    // scope and its mirror, with a CRI-O reload and no drain or reboot.
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    c.apply(RELEASE_SIGNATURES);
    let r2 = c.wait_rollout("worker", &r2, 240);
    for (w, b) in workers.iter().zip(&boots) {
        let policy: Value = serde_json::from_str(
            &c.read_node_file(w, "/etc/containers/policy.json")
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        let req = &policy["transports"]["docker"]["quay.io/openshift-release-dev/ocp-release"][0];
        assert_eq!(req["type"], "sigstoreSigned", "{w}: {policy}");
        assert_eq!(req["keyData"], PEM_KEY, "{w}");
        let attachments = c
            .read_node_file(w, "/etc/containers/registries.d/sigstore-registries.yaml")
            .unwrap_or_default();
        for endpoint in [
            "quay.io/openshift-release-dev/ocp-release:",
            "mirror.example.net/ocp/release:",
        ] {
            assert!(attachments.contains(endpoint), "{w}: {attachments}");
        }
        assert_eq!(&c.boot_id(w), b, "{w} rebooted for a signature policy");
        let post = condition_message(&c.mcn(w), "UpdatePostActionComplete");
        assert!(post.contains("Node has reloaded CRIO"), "{w}: {post}");
    }

    // A namespace's own policy: CRI-O's file for it, and upstream's status naming the scope
    // the cluster policy already covers.
    c.apply(TEAM_SIGNATURES);
    let r2 = c.wait_rollout("worker", &r2, 240);
    for w in &workers {
        let ns: Value = serde_json::from_str(
            &c.read_node_file(w, "/etc/crio/policies/default.json")
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        let docker = &ns["transports"]["docker"];
        assert_eq!(
            docker["quay.io/team/app"][0]["type"], "sigstoreSigned",
            "{w}: {ns}"
        );
        assert!(
            docker
                .get("quay.io/openshift-release-dev/ocp-release")
                .is_some(),
            "{w}: the cluster's scope: {ns}"
        );
    }
    let (status, message) = wait_for("the ImagePolicy's Pending condition", 60, || {
        let ip = c.try_get_json(&["imagepolicy", "team-signatures", "-n", "default"])?;
        let cond = ip["status"]["conditions"].as_array()?.first()?.clone();
        (cond["reason"] == "ConflictScopes").then(|| {
            (
                cond["status"].as_str().unwrap_or_default().to_owned(),
                cond["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
    });
    assert_eq!(status, "False");
    assert!(
        message.starts_with(
            "has conflicting scope(s) [\"quay.io/openshift-release-dev/ocp-release\"]"
        ),
        "{message}"
    );

    // A conflicting mirror set: a Warning event on it, and the last good config stays.
    let before = c.get_json(&["mc", "99-worker-generated-registries"]);
    c.apply(CONFLICTING_MIRROR);
    wait_for("InvalidRegistriesConfig event", 60, || {
        // The mirror set is cluster-scoped: its event is in mco's namespace.
        let events = c.get_json(&["events.events.k8s.io", "-n", "mco-system"]);
        events["items"].as_array()?.iter().find_map(|e| {
            (e["reason"] == "InvalidRegistriesConfig"
                && e["regarding"]["kind"] == "ImageDigestMirrorSet"
                && e["regarding"]["name"] == "zz-conflicting")
                .then(|| e["note"].as_str().unwrap_or_default().to_owned())
                .filter(|m| m.contains("conflicting mirrorSourcePolicy"))
        })
    });
    let after = c.get_json(&["mc", "99-worker-generated-registries"]);
    assert_eq!(
        before["spec"], after["spec"],
        "a refused input changed the config"
    );
    assert_eq!(c.pool_target("worker"), r2);
    // `mco doctor` names it too, checking the inputs as the controller does.
    let (_, doc) = c.mco(&["doctor"]);
    assert!(
        doc.contains("imagedigestmirrorset zz-conflicting")
            && doc.contains("ImageDigestMirrorSet refused")
            && doc.contains("kubectl edit imagedigestmirrorset zz-conflicting"),
        "{doc}"
    );
    c.kubectl(&["delete", "imagedigestmirrorset", "zz-conflicting"]);

    // Search registries for short names: their own drop-in, read after registries.conf.
    c.apply(SEARCH_REGISTRIES);
    let r3 = c.wait_rollout("worker", &r2, 240);
    for w in &workers {
        let dropin = c
            .read_node_file(
                w,
                "/etc/containers/registries.conf.d/01-image-searchRegistries.conf",
            )
            .unwrap_or_default();
        assert_eq!(
            dropin, "unqualified-search-registries = [\"quay.io\", \"registry.example.com\"]\n",
            "{w}"
        );
    }

    // Deleting the KubeletConfig deletes its MachineConfig and rolls maxPods back.
    c.kubectl(&["delete", "kubeletconfig", "max-pods", "--wait=true"]);
    assert!(
        c.try_get_json(&["mc", "99-worker-generated-kubelet"])
            .is_none()
    );
    c.wait_rollout("worker", &r3, 240);
    for w in &workers {
        let conf = kubelet_conf(&c, w);
        assert!(conf.contains("maxPods: 250"), "{w}: {conf}");
        assert!(conf.contains("cgroupDriver: systemd"), "{w}: {conf}");
    }
}

/// OpenShift's cluster settings, as its cluster config operator leaves them: the release the
/// cluster moves to and that release's feature gates.
const RELEASE: &str = "apiVersion: config.openshift.io/v1
kind: ClusterVersion
metadata:
  name: version
spec:
  clusterID: 6f1c9e8a-6b41-4f6c-9d1e-2f7f4b0a6c11
---
apiVersion: config.openshift.io/v1
kind: FeatureGate
metadata:
  name: cluster
spec:
  featureSet: TechPreviewNoUpgrade
";

const MEDIUM_LATENCY: &str = "apiVersion: config.openshift.io/v1
kind: Node
metadata:
  name: cluster
spec:
  workerLatencyProfile: MediumUpdateAverageReaction
";

/// The workers' kubelets follow `nodes.config.openshift.io/cluster` and `FeatureGate/cluster`
/// through upstream's 97- and 98- configs, applied with `kubectl`: the release's gates, the
/// worker latency profile and the cgroup v2 kernel arguments reach every worker (masters keep
/// their status frequency), and a jump from Low to Default is refused with upstream's event
/// and changes nothing.
#[test]
fn openshift_node_settings_and_feature_gates_reach_the_kubelets() {
    use kube::CustomResourceExt;
    let c = Cluster::up(Opts::default());
    let workers = c.workers();
    // OpenShift's CRDs, which mco does not ship.
    let mut crds = String::new();
    for crd in [
        mco_api::NodeConfig::crd(),
        mco_api::FeatureGate::crd(),
        mco_api::ClusterVersion::crd(),
    ] {
        crds.push_str("---\n");
        crds.push_str(&mco_apimachinery::yaml::to_string(&crd).unwrap());
    }
    c.apply(&crds);
    for crd in [
        "nodes.config.openshift.io",
        "featuregates.config.openshift.io",
        "clusterversions.config.openshift.io",
    ] {
        c.kubectl(&["wait", "--for=condition=Established", &format!("crd/{crd}")]);
    }
    let r0 = c.pool_target("worker");
    wait_for("the config kinds served", 60, || {
        c.try_get_json(&["featuregates.config.openshift.io"])
            .map(|_| ())
    });
    c.apply(RELEASE);
    c.kubectl(&[
        "patch",
        "clusterversion",
        "version",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"desired":{"version":"4.20.1"}}}"#,
    ]);
    c.kubectl(&[
        "patch", "featuregate", "cluster", "--subresource=status", "--type=merge",
        "-p", r#"{"status":{"featureGates":[
            {"version":"4.19.9","enabled":[],"disabled":[{"name":"NewThing"}]},
            {"version":"4.20.1","enabled":[{"name":"NewThing"}],"disabled":[{"name":"OldThing"}]}]}}"#,
    ]);
    let r1 = c.wait_rollout("worker", &r0, 240);
    for w in &workers {
        let conf = kubelet_conf(&c, w);
        assert!(
            conf.contains("NewThing: true") && conf.contains("OldThing: false"),
            "{w}: {conf}"
        );
    }
    let mc = c.get_json(&["mc", "98-worker-generated-kubelet"]);
    assert_eq!(
        mc["metadata"]["ownerReferences"][0]["kind"],
        "MachineConfigPool"
    );

    c.apply(MEDIUM_LATENCY);
    let r2 = c.wait_rollout("worker", &r1, 240);
    for w in &workers {
        let conf = kubelet_conf(&c, w);
        assert!(
            conf.contains("nodeStatusUpdateFrequency: 20s"),
            "{w}: {conf}"
        );
        assert!(conf.contains("NewThing: true"), "{w}: {conf}");
        let args = crate::e2e_rollouts::kargs(&c, w);
        assert!(
            args.contains(&"systemd.unified_cgroup_hierarchy=1".to_owned())
                && args.contains(&"cgroup_no_v1=\"all\"".to_owned()),
            "{w}: {args:?}"
        );
    }
    let master = kubelet_conf(&c, "master-0");
    assert!(
        master.contains("nodeStatusUpdateFrequency: 10s"),
        "{master}"
    );

    let latency = |p: &str| {
        c.kubectl(&[
            "patch",
            "nodes.config.openshift.io",
            "cluster",
            "--type=merge",
            "-p",
            &format!(r#"{{"spec":{{"workerLatencyProfile":"{p}"}}}}"#),
        ]);
    };
    latency("LowUpdateSlowReaction");
    let r3 = c.wait_rollout("worker", &r2, 240);
    for w in &workers {
        let conf = kubelet_conf(&c, w);
        assert!(
            conf.contains("nodeStatusUpdateFrequency: 1m0s"),
            "{w}: {conf}"
        );
    }
    latency("Default");
    wait_for("the ActionProhibited event", 60, || {
        let events = c.get_json(&["events.events.k8s.io", "-n", "mco-system"]);
        events["items"].as_array()?.iter().find_map(|e| {
            (e["reason"] == "ActionProhibited" && e["regarding"]["kind"] == "Node")
                .then(|| e["note"].as_str().unwrap_or_default().to_owned())
                .filter(|m| m.contains("transition not allowed from old WorkerLatencyProfile: \"LowUpdateSlowReaction\" to new WorkerLatencyProfile: \"Default\""))
        })
    });
    assert_eq!(
        c.pool_target("worker"),
        r3,
        "a refused step started a rollout"
    );
    // `mco doctor` names it, as the controller judges it.
    let (_, doc) = c.mco(&["doctor"]);
    assert!(
        doc.contains("nodes.config.openshift.io cluster")
            && doc.contains("Node settings refused")
            && doc.contains("kubectl edit nodes.config.openshift.io cluster"),
        "{doc}"
    );
}

/// The ControllerConfig's condition of `type_`: status and message.
fn cc_condition(c: &Cluster, type_: &str) -> Option<(String, String)> {
    let cc = c.try_get_json(&["controllerconfig", "machine-config-controller"])?;
    let cond = cc["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == type_)?;
    Some((
        cond["status"].as_str()?.to_owned(),
        cond["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

fn template_configs_are_generated_and_kept(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let r0 = c.pool_target("worker");
    let cc = c.get_json(&["controllerconfig", "machine-config-controller"]);
    let cc_uid = cc["metadata"]["uid"].as_str().unwrap().to_owned();

    // Each role's three configs, with upstream's annotation and the ControllerConfig as owner.
    for name in TEMPLATE_CONFIGS {
        let mc = c.get_json(&["mc", name]);
        assert!(
            mc["metadata"]["annotations"][VERSION_ANN]
                .as_str()
                .is_some_and(|v| !v.is_empty()),
            "{name}: {mc}"
        );
        let owner = &mc["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "ControllerConfig", "{name}: {mc}");
        assert_eq!(owner["name"], "machine-config-controller", "{name}");
        assert_eq!(owner["uid"], cc_uid.as_str(), "{name}");
        assert_eq!(owner["controller"], true, "{name}");
    }
    let listed = c.kubectl(&["get", "mc", "01-worker-kubelet"]);
    assert!(listed.contains(env!("CARGO_PKG_VERSION")), "{listed}");

    // The pools render from them, and the nodes have their files.
    let sources = c.kubectl(&[
        "get",
        "mcp",
        "worker",
        "-o",
        "jsonpath={.spec.configuration.source[*].name}",
    ]);
    assert_eq!(
        sources,
        "00-worker 01-worker-container-runtime 01-worker-kubelet 99-worker-ssh"
    );
    for w in c.workers() {
        let conf = kubelet_conf(&c, &w);
        assert!(conf.contains("clusterDNS: [172.30.0.10]"), "{w}: {conf}");
        let crio = c
            .read_node_file(&w, "/etc/crio/crio.conf.d/00-default")
            .unwrap_or_default();
        assert!(
            crio.contains("pause_image = \"registry.example.com/sim/pause:1\""),
            "{w}: {crio}"
        );
    }

    // A hand edit is reverted.
    let generated = c.get_json(&["mc", "01-worker-kubelet"]);
    c.kubectl(&[
        "patch",
        "mc",
        "01-worker-kubelet",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"kernelArguments":["nosmt"],"config":{"storage":{"files":[]}}}}"#,
    ]);
    wait_for("the edit of 01-worker-kubelet reverted", 60, || {
        let mc = c.try_get_json(&["mc", "01-worker-kubelet"])?;
        (mc["spec"] == generated["spec"]).then_some(())
    });

    // A deleted config comes back.
    let base = c.get_json(&["mc", "00-worker"]);
    c.kubectl(&["delete", "mc", "00-worker"]);
    wait_for("00-worker back", 60, || {
        let mc = c.try_get_json(&["mc", "00-worker"])?;
        (mc["metadata"]["uid"] != base["metadata"]["uid"] && mc["spec"] == base["spec"])
            .then_some(())
    });

    // A refused ControllerConfig: Failing names the field, and the configs stay.
    c.patch_controller_config(serde_json::json!({"clusterDNSIP": "dns.example.com"}));
    let (_, message) = wait_for("TemplateControllerFailing", 60, || {
        cc_condition(&c, "TemplateControllerFailing").filter(|(s, _)| s == "True")
    });
    assert!(
        message.ends_with("spec.clusterDNSIP: \"dns.example.com\" is not an IP address"),
        "{message}"
    );
    let kept = c.get_json(&["mc", "01-worker-kubelet"]);
    assert_eq!(kept["spec"], generated["spec"]);
    assert_eq!(
        cc_condition(&c, "TemplateControllerCompleted").map(|(s, _)| s),
        Some("False".to_owned())
    );

    // Fixed: Completed again, and nothing rolled out throughout.
    c.patch_controller_config(serde_json::json!({"clusterDNSIP": "172.30.0.10"}));
    wait_for("TemplateControllerCompleted", 60, || {
        cc_condition(&c, "TemplateControllerCompleted").filter(|(s, _)| s == "True")
    });
    assert_eq!(c.pool_target("worker"), r0);

    // A pull secret, created and named as an administrator would: on every worker, readable by
    // root only, with no drain and no reboot (upstream's policy for the file). On the real
    // server the controller reads it as `mco-controller`, through its Role for that one Secret.
    let workers = c.workers();
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    c.set_pull_secret();
    c.wait_rollout("worker", &r0, 240);
    for (w, b) in workers.iter().zip(&boots) {
        let auth = c
            .read_node_file(w, "/var/lib/kubelet/config.json")
            .unwrap_or_default();
        // base64("ops:s3cret"), as kubectl writes it.
        assert!(
            auth.contains("\"quay.example.com\"") && auth.contains("b3BzOnMzY3JldA=="),
            "{w}: {auth}"
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(c.node_root(w).join("var/lib/kubelet/config.json"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{w}");
        assert_eq!(&c.boot_id(w), b, "{w} rebooted for a pull secret");
        let prepared = condition_message(&c.mcn(w), "UpdatePrepared");
        assert!(
            prepared.contains("Drain Required: false"),
            "{w}: {prepared}"
        );
    }
}

/// OpenShift's `HighlyAvailableArbiter` topology: once the ControllerConfig names it, the
/// arbiter's three base configs exist, the installer's `arbiter` pool renders on them, and an
/// arbiter node joins through first boot with a kubelet that registers it with its own role and
/// taint; the masters and workers are not touched.
fn an_arbiter_joins_its_own_pool_on_the_arbiter_configs(server: Server) {
    let c = Cluster::up(Opts {
        server,
        reboot_seconds: 1,
        ..Opts::default()
    });
    let (master, worker) = (c.pool_target("master"), c.pool_target("worker"));
    c.patch_controller_config(serde_json::json!(
        {"infra": {"status": {"controlPlaneTopology": "HighlyAvailableArbiter"}}}
    ));
    c.apply(
        r#"{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "arbiter"},
            "spec": {
              "machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "arbiter"}},
              "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/arbiter": ""}}}}"#,
    );
    let sources = wait_for("the arbiter pool rendered on its base configs", 60, || {
        let p = c.try_get_json(&["mcp", "arbiter"])?;
        let names: Vec<String> = p["spec"]["configuration"]["source"]
            .as_array()?
            .iter()
            .filter_map(|s| s["name"].as_str().map(str::to_owned))
            .collect();
        names.contains(&"00-arbiter".to_owned()).then_some(names)
    });
    for want in ["01-arbiter-container-runtime", "01-arbiter-kubelet"] {
        assert!(
            sources.iter().any(|s| s == want),
            "{want} not in {sources:?}"
        );
    }
    let target = c.pool_target("arbiter");
    c.sim(&["add-node", "arbiter-0", "--pool", "arbiter"]);
    let nodes = 1 + c.opts.masters as usize + c.opts.workers as usize;
    c.wait_nodes_ready(nodes, 120);
    assert_eq!(c.wait_pool_settled("arbiter", 120), target);
    assert_eq!(c.pool("arbiter")["status"]["machineCount"], 1);
    let unit = c
        .read_node_file("arbiter-0", "/etc/systemd/system/kubelet.service")
        .expect("the arbiter's kubelet unit");
    for want in [
        "--node-labels=node-role.kubernetes.io/arbiter,",
        "--register-with-taints=node-role.kubernetes.io/arbiter=:NoSchedule",
    ] {
        assert!(unit.contains(want), "{want:?} not in:\n{unit}");
    }
    assert_eq!(c.pool_target("master"), master);
    assert_eq!(c.pool_target("worker"), worker);
}

/// A sigstore public key as `v1` takes it: PEM, at least 68 characters of base64.
const PEM_KEY: &str = pem_key!();

/// OpenShift 4.16–4.19 with the Technology Preview on: the image policies are served in
/// `v1alpha1` alone. A ClusterImagePolicy there writes the same policy.json requirement and
/// attachments as in `v1`; an ImagePolicy gets its namespace file and upstream's `Pending`
/// status in `v1alpha1`; a value `v1` refuses is reported on the `v1alpha1` object, naming the
/// field, and changes nothing.
fn technology_preview_image_policies_reach_the_nodes(server: Server) {
    use kube::CustomResourceExt;
    use mco_api::generators::v1alpha1;
    let crds = tempdir();
    let mut files = vec![];
    for crd in [
        v1alpha1::ClusterImagePolicy::crd(),
        v1alpha1::ImagePolicy::crd(),
    ] {
        let path = crds.join(format!("{}.yaml", crd.metadata.name.as_deref().unwrap()));
        std::fs::write(&path, mco_apimachinery::yaml::to_string(&crd).unwrap()).unwrap();
        files.push(path);
    }
    let c = Cluster::up(Opts {
        server,
        crds: files,
        ..Opts::default()
    });
    let workers = c.workers();
    assert!(
        c.kubectl_try(&[
            "get",
            "--raw",
            "/apis/config.openshift.io/v1/clusterimagepolicies"
        ])
        .is_err(),
        "v1 is served"
    );
    let r0 = c.pool_target("worker");
    c.apply(&format!(
        "apiVersion: config.openshift.io/v1alpha1
kind: ClusterImagePolicy
metadata:
  name: release-signatures
spec:
  scopes:
  - quay.io/openshift-release-dev/ocp-release
  policy:
    rootOfTrust:
      policyType: PublicKey
      publicKey:
        keyData: {PEM_KEY}
"
    ));
    let r1 = c.wait_rollout("worker", &r0, 240);
    for w in &workers {
        let policy: Value = serde_json::from_str(
            &c.read_node_file(w, "/etc/containers/policy.json")
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        assert_eq!(
            policy["transports"]["docker"]["quay.io/openshift-release-dev/ocp-release"],
            serde_json::json!([{
                "type": "sigstoreSigned",
                "keyData": PEM_KEY,
                "signedIdentity": {"type": "matchRepoDigestOrExact"},
            }]),
            "{w}: {policy}"
        );
        let attachments = c
            .read_node_file(w, "/etc/containers/registries.d/sigstore-registries.yaml")
            .unwrap_or_default();
        assert!(
            attachments.contains("quay.io/openshift-release-dev/ocp-release:"),
            "{w}: {attachments}"
        );
    }

    // A namespace's policy: its file, and the status written in the version it was read in.
    c.apply(&format!(
        "apiVersion: config.openshift.io/v1alpha1
kind: ImagePolicy
metadata:
  name: team-signatures
  namespace: default
spec:
  scopes:
  - quay.io/team/app
  - quay.io/openshift-release-dev/ocp-release
  policy:
    rootOfTrust:
      policyType: PublicKey
      publicKey:
        keyData: {PEM_KEY}
"
    ));
    let r2 = c.wait_rollout("worker", &r1, 240);
    for w in &workers {
        let ns: Value = serde_json::from_str(
            &c.read_node_file(w, "/etc/crio/policies/default.json")
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        assert_eq!(
            ns["transports"]["docker"]["quay.io/team/app"][0]["keyData"], PEM_KEY,
            "{w}: {ns}"
        );
    }
    let message = wait_for("the v1alpha1 ImagePolicy's Pending condition", 60, || {
        let ip = c.try_get_json(&[
            "imagepolicies.v1alpha1.config.openshift.io",
            "team-signatures",
            "-n",
            "default",
        ])?;
        let cond = ip["status"]["conditions"].as_array()?.first()?.clone();
        (cond["reason"] == "ConflictScopes" && cond["status"] == "False")
            .then(|| cond["message"].as_str().unwrap_or_default().to_owned())
    });
    assert!(
        message.starts_with(
            "has conflicting scope(s) [\"quay.io/openshift-release-dev/ocp-release\"]"
        ),
        "{message}"
    );

    // A key `v1` refuses (too short, no end marker): a Warning on the v1alpha1 object naming
    // the field, and the last good config stays.
    let before = c.get_json(&["mc", "99-worker-generated-registries"]);
    c.apply(
        "apiVersion: config.openshift.io/v1alpha1
kind: ClusterImagePolicy
metadata:
  name: zz-short-key
spec:
  scopes:
  - quay.io/other
  policy:
    rootOfTrust:
      policyType: PublicKey
      publicKey:
        keyData: LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K
",
    );
    let (api_version, note) = wait_for("the refused key's event", 60, || {
        let events = c.get_json(&["events.events.k8s.io", "-n", "mco-system"]);
        events["items"].as_array()?.iter().find_map(|e| {
            (e["reason"] == "InvalidRegistriesConfig"
                && e["regarding"]["kind"] == "ClusterImagePolicy"
                && e["regarding"]["name"] == "zz-short-key")
                .then(|| {
                    (
                        e["regarding"]["apiVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        e["note"].as_str().unwrap_or_default().to_owned(),
                    )
                })
        })
    });
    assert_eq!(api_version, "config.openshift.io/v1alpha1");
    assert!(
        note.starts_with(
            "ClusterImagePolicy zz-short-key: spec.policy.rootOfTrust.publicKey.keyData: should be at least 68 chars long"
        ),
        "{note}"
    );
    let after = c.get_json(&["mc", "99-worker-generated-registries"]);
    assert_eq!(
        before["spec"], after["spec"],
        "a refused policy changed the config"
    );
    assert_eq!(c.pool_target("worker"), r2);
    drop(c);
    let _ = std::fs::remove_dir_all(&crds);
}
