//! The KubeletConfig generator against the embedded API server: upstream's suffixes for a second
//! object of a pool, finalizers that delete the generated MachineConfig with its object, and a
//! Failure for an object that selects no pool; a ContainerRuntimeConfig's CRI-O drop-in; and
//! upstream's generated config kept after a takeover until its input changes.

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use mco_api::generators::MC_NAME_SUFFIX;
use mco_api::{ContainerRuntimeConfig, KubeletConfig, MachineConfig, MachineConfigPool};
use mco_testkit::MachineConfigBuilder;
use serde_json::json;

use crate::common::*;

const POOL_LABEL: &str = "pools.operator.machineconfiguration.openshift.io/worker";

fn kubelet_config(name: &str, label: &str, max_pods: u32) -> KubeletConfig {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "KubeletConfig",
        "metadata": {"name": name},
        "spec": {
            "machineConfigPoolSelector": {"matchLabels": {label: ""}},
            "kubeletConfig": {"maxPods": max_pods},
        },
    }))
    .unwrap()
}

/// The worker pool labelled as upstream's, with a base kubelet config to merge over.
async fn worker_pool_with_a_kubelet_base(c: &kube::Client) {
    let base = MachineConfigBuilder::new("01-worker-kubelet")
        .role("worker")
        .config(json!({
            "ignition": {"version": "3.4.0"},
            "storage": {"files": [mco_generate::file(
                "/etc/kubernetes/kubelet.conf",
                "kind: KubeletConfiguration\ncgroupDriver: systemd\n",
            )]},
        }))
        .build();
    Api::<MachineConfig>::all(c.clone())
        .create(&PostParams::default(), &base)
        .await
        .unwrap();
    Api::<MachineConfigPool>::all(c.clone())
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {POOL_LABEL: ""}}})),
        )
        .await
        .unwrap();
}

async fn mc_exists(mcs: &Api<MachineConfig>, name: &str) -> bool {
    mcs.get_opt(name).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suffixes_finalizers_and_failures_follow_upstream() {
    let env = env().await;
    let c = &env.client;
    worker_pool_with_a_kubelet_base(c).await;
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    let _controller = start_controller(c, fast_config("generators"));
    let kcs: Api<KubeletConfig> = Api::all(c.clone());

    kcs.create(
        &PostParams::default(),
        &kubelet_config("first", POOL_LABEL, 300),
    )
    .await
    .unwrap();
    eventually("99-worker-generated-kubelet", 30, || {
        let mcs = mcs.clone();
        async move {
            mc_exists(&mcs, "99-worker-generated-kubelet")
                .await
                .then_some(())
        }
    })
    .await;
    let first = kcs.get("first").await.unwrap();
    assert_eq!(
        first.annotations().get(MC_NAME_SUFFIX).map(String::as_str),
        Some("")
    );
    assert_eq!(first.finalizers(), ["99-worker-generated-kubelet"]);

    // A second object of the same pool gets -1, and its own finalizer.
    kcs.create(
        &PostParams::default(),
        &kubelet_config("second", POOL_LABEL, 400),
    )
    .await
    .unwrap();
    eventually("99-worker-generated-kubelet-1", 30, || {
        let mcs = mcs.clone();
        async move {
            mc_exists(&mcs, "99-worker-generated-kubelet-1")
                .await
                .then_some(())
        }
    })
    .await;
    let second = kcs.get("second").await.unwrap();
    assert_eq!(
        second.annotations().get(MC_NAME_SUFFIX).map(String::as_str),
        Some("1")
    );
    let text =
        serde_json::to_string(&mcs.get("99-worker-generated-kubelet-1").await.unwrap()).unwrap();
    assert!(text.contains("maxPods%3A%20400"), "{text}");

    // Deleting the first deletes its MachineConfig, then the object; the second's stays.
    kcs.delete("first", &DeleteParams::default()).await.unwrap();
    eventually("first and its MachineConfig gone", 30, || {
        let (mcs, kcs) = (mcs.clone(), kcs.clone());
        async move {
            (!mc_exists(&mcs, "99-worker-generated-kubelet").await
                && kcs.get_opt("first").await.unwrap().is_none())
            .then_some(())
        }
    })
    .await;
    assert!(mc_exists(&mcs, "99-worker-generated-kubelet-1").await);

    // Selecting no pool is a Failure, and writes nothing.
    kcs.create(
        &PostParams::default(),
        &kubelet_config("nowhere", "no-such-pool-label", 300),
    )
    .await
    .unwrap();
    let message = eventually("nowhere's Failure", 30, || {
        let kcs = kcs.clone();
        async move {
            let o = kcs.get("nowhere").await.ok()?;
            let c = o.status?.conditions.pop()?;
            (c.type_ == "Failure").then_some(c.message)
        }
    })
    .await;
    assert_eq!(
        message,
        "Error: could not find any MachineConfigPool set for KubeletConfig nowhere"
    );
    assert!(kcs.get("nowhere").await.unwrap().finalizers().is_empty());

    // A ContainerRuntimeConfig: its own MachineConfig, with the CRI-O drop-in and the finalizer.
    let crcs: Api<ContainerRuntimeConfig> = Api::all(c.clone());
    let crc: ContainerRuntimeConfig = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "ContainerRuntimeConfig",
        "metadata": {"name": "pids"},
        "spec": {
            "machineConfigPoolSelector": {"matchLabels": {POOL_LABEL: ""}},
            "containerRuntimeConfig": {"pidsLimit": 2048},
        },
    }))
    .unwrap();
    crcs.create(&PostParams::default(), &crc).await.unwrap();
    let mc = eventually("99-worker-generated-containerruntime", 30, || {
        let mcs = mcs.clone();
        async move {
            mcs.get_opt("99-worker-generated-containerruntime")
                .await
                .unwrap()
        }
    })
    .await;
    let text = serde_json::to_string(&mc.spec.config).unwrap();
    assert!(
        text.contains("/etc/crio/crio.conf.d/01-ctrcfg-pidsLimit")
            && text.contains("pids_limit%20%3D%202048"),
        "{text}"
    );
    let status = eventually("pids' Success", 30, || {
        let crcs = crcs.clone();
        async move { crcs.get("pids").await.ok()?.status?.conditions.pop() }
    })
    .await;
    assert_eq!(
        (status.type_.as_str(), status.message.as_str()),
        ("Success", "Success")
    );
    assert_eq!(
        crcs.get("pids").await.unwrap().finalizers(),
        ["99-worker-generated-containerruntime"]
    );
}

/// A rollout writes its pool's status for every node. None of those writes can change a
/// generated MachineConfig, so none may cost the registries controller its reads (a GET of
/// `images` and a LIST of each mirror kind per pool). A later mirror change still reaches the
/// pool's registries config, and is the sync point: by then the status writes before it were
/// seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_status_writes_do_not_wake_the_registries_controller() {
    const IDMS_LISTS: &str = r#"verb="LIST",group="config.openshift.io",resource="imagedigestmirrorsets",subresource="",code="200""#;
    const STATUS_WRITES: u64 = 40;
    let env = env().await;
    let c = &env.client;
    let _controller = start_controller(c, fast_config("registries"));
    let idms: Api<DynamicObject> = Api::all_with(c.clone(), &idms_resource());
    let mirror = |name: &str, to: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "ImageDigestMirrorSet",
            "metadata": {"name": name},
            "spec": {"imageDigestMirrors": [{"source": format!("quay.io/{name}"), "mirrors": [to]}]},
        }))
        .unwrap()
    };
    let registries_has = |text: &'static str| {
        let mcs: Api<MachineConfig> = Api::all(c.clone());
        move || {
            let mcs = mcs.clone();
            async move {
                let mc = mcs.get_opt("99-worker-generated-registries").await.ok()??;
                let body = serde_json::to_string(&mc.spec.config).ok()?;
                body.contains(text).then_some(())
            }
        }
    };
    idms.create(
        &PostParams::default(),
        &mirror("first", "mirror.example.net/first"),
    )
    .await
    .unwrap();
    eventually(
        "the first mirror in registries.conf",
        30,
        registries_has("first"),
    )
    .await;
    let before = requests(c, IDMS_LISTS).await;

    let pools: Api<MachineConfigPool> = Api::all(c.clone());
    for i in 0..STATUS_WRITES {
        // Waiting for each write spaces them out, as a rollout's are.
        pools
            .patch_status(
                "worker",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"poolSynchronizersStatus": [
                    {"poolSynchronizerType": "PinnedImageSets", "machineCount": i,
                     "updatedMachineCount": 0, "readyMachineCount": 0,
                     "unavailableMachineCount": 0, "availableMachineCount": 0}
                ]}})),
            )
            .await
            .unwrap();
    }
    idms.create(
        &PostParams::default(),
        &mirror("second", "mirror.example.net/second"),
    )
    .await
    .unwrap();
    eventually(
        "the second mirror in registries.conf",
        30,
        registries_has("second"),
    )
    .await;
    let lists = requests(c, IDMS_LISTS).await - before;
    // The second mirror and the MachineConfig it rewrites wake each pool a few times; each of
    // the status writes would have woken at least the worker pool.
    assert!(
        lists < STATUS_WRITES / 4,
        "{lists} LISTs of ImageDigestMirrorSets after {STATUS_WRITES} pool status writes and one mirror"
    );
}

fn idms_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("config.openshift.io", "v1", "ImageDigestMirrorSet"),
        "imagedigestmirrorsets",
    )
}

/// After a takeover: upstream's generated kubelet config, stamped with its commit and with its
/// own bytes for the same setting, stays (marked) until the KubeletConfig changes; then mco's
/// replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_generated_config_stays_until_its_input_changes() {
    const COMMIT: &str = "1d7c5a1e9f2b3c4d5e6f708192a3b4c5d6e7f809";
    let env = env().await;
    let c = &env.client;
    worker_pool_with_a_kubelet_base(c).await;
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    // As upstream left them: the object with its suffix and finalizer, and its output.
    let upstream_bytes =
        "{\"kind\":\"KubeletConfiguration\",\"cgroupDriver\":\"systemd\",\"maxPods\":300}";
    let mut kc = kubelet_config("max-pods", POOL_LABEL, 300);
    kc.metadata.annotations = Some([(MC_NAME_SUFFIX.to_string(), String::new())].into());
    kc.metadata.finalizers = Some(vec!["99-worker-generated-kubelet".into()]);
    let kcs: Api<KubeletConfig> = Api::all(c.clone());
    kcs.create(&PostParams::default(), &kc).await.unwrap();
    let upstreams = mco_generate::machine_config(
        "99-worker-generated-kubelet",
        "worker",
        COMMIT,
        vec![mco_generate::file(
            "/etc/kubernetes/kubelet.conf",
            upstream_bytes,
        )],
    );
    let upstreams = mcs
        .create(&PostParams::default(), &upstreams)
        .await
        .unwrap();

    let _controller = start_controller(c, fast_config("generators-kept"));
    let marked = eventually("upstream's config marked kept", 30, || {
        let mcs = mcs.clone();
        async move {
            let mc = mcs.get("99-worker-generated-kubelet").await.ok()?;
            mc.annotations()
                .contains_key(mco_generate::KEPT_FOR)
                .then_some(mc)
        }
    })
    .await;
    assert_eq!(marked.spec, upstreams.spec);
    let target = target_other_than(c, "worker", None).await;
    let rendered = mcs.get(&target).await.unwrap();
    assert_eq!(
        mco_generate::base_file(&[&rendered], "/etc/kubernetes/kubelet.conf")
            .unwrap()
            .as_deref(),
        Some(upstream_bytes)
    );
    eventually("the KubeletConfig reported Success", 30, || {
        let kcs = kcs.clone();
        async move {
            let kc = kcs.get("max-pods").await.ok()?;
            (kc.status?.conditions.last()?.type_ == "Success").then_some(())
        }
    })
    .await;
    let still = mcs.get("99-worker-generated-kubelet").await.unwrap();
    assert_eq!(still.resource_version(), marked.resource_version());

    // A changed setting: mco's own config replaces upstream's.
    kcs.patch(
        "max-pods",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"kubeletConfig": {"maxPods": 250}}})),
    )
    .await
    .unwrap();
    let replaced = eventually("mco's config in its place", 30, || {
        let mcs = mcs.clone();
        async move {
            let mc = mcs.get("99-worker-generated-kubelet").await.ok()?;
            (mc.annotations()
                .get(mco_api::constants::annotations::GENERATED_BY_CONTROLLER_VERSION)
                == Some(&"test".to_string()))
            .then_some(mc)
        }
    })
    .await;
    assert!(!replaced.annotations().contains_key(mco_generate::KEPT_FOR));
    let next = target_other_than(c, "worker", Some(&target)).await;
    let rendered = mcs.get(&next).await.unwrap();
    let conf = mco_generate::base_file(&[&rendered], "/etc/kubernetes/kubelet.conf")
        .unwrap()
        .unwrap();
    assert!(conf.contains("maxPods: 250"), "{conf}");
}

/// The kubelet config a generated MachineConfig writes, parsed.
async fn generated_kubelet_conf(mcs: &Api<MachineConfig>, name: &str) -> Option<serde_json::Value> {
    let mc = mcs.get_opt(name).await.ok()??;
    let text = mco_generate::file_contents(&mc, "/etc/kubernetes/kubelet.conf").ok()??;
    mco_apimachinery::yaml::from_str(&text).ok()
}

/// OpenShift's cluster config objects reach the kubelets through upstream's 97- and 98-
/// configs at once (the resync here is ten minutes: only the watches can bring them): the
/// feature gates of the release ClusterVersion names, the worker latency profile one step at a
/// time (a jump from Default to Low refused with upstream's event, the config kept), the cgroup
/// v2 kernel arguments; a KubeletConfig's config builds over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_config_and_feature_gates_reach_the_kubelet_configs() {
    use kube::CustomResourceExt;
    use mco_api::{ClusterVersion, FeatureGate, NodeConfig};
    let env = env().await;
    let c = &env.client;
    worker_pool_with_a_kubelet_base(c).await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(c.clone());
    for crd in [NodeConfig::crd(), FeatureGate::crd(), ClusterVersion::crd()] {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let nodes: Api<NodeConfig> = Api::all(c.clone());
    let gates: Api<FeatureGate> = Api::all(c.clone());
    let versions: Api<ClusterVersion> = Api::all(c.clone());
    eventually("the config CRDs served", 20, || {
        let (n, g, v) = (nodes.clone(), gates.clone(), versions.clone());
        async move {
            let ok = n.list(&Default::default()).await.is_ok()
                && g.list(&Default::default()).await.is_ok()
                && v.list(&Default::default()).await.is_ok();
            ok.then_some(())
        }
    })
    .await;
    let config = mco_controller::Config {
        resync: std::time::Duration::from_secs(600),
        ..fast_config("kubelet-defaults")
    };
    let _controller = start_controller(c, config);
    let mcs: Api<MachineConfig> = Api::all(c.clone());

    // The feature gates of the release the cluster moves to, not those of the one it leaves.
    versions
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
                "metadata": {"name": "version"}, "spec": {"clusterID": "x"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    versions
        .patch_status(
            "version",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"desired": {"version": "4.20.1"}}})),
        )
        .await
        .unwrap();
    gates
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "config.openshift.io/v1", "kind": "FeatureGate",
                "metadata": {"name": "cluster"}, "spec": {"featureSet": "TechPreviewNoUpgrade"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    gates
        .patch_status(
            "cluster",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"featureGates": [
                {"version": "4.19.9", "enabled": [{"name": "Old"}], "disabled": []},
                {"version": "4.20.1", "enabled": [{"name": "NewThing"}], "disabled": [{"name": "Old"}]},
            ]}})),
        )
        .await
        .unwrap();
    let conf_has = |name: &'static str, pointer: &'static str, want: serde_json::Value| {
        let mcs = mcs.clone();
        move || {
            let (mcs, want) = (mcs.clone(), want.clone());
            async move {
                let conf = generated_kubelet_conf(&mcs, name).await?;
                (conf.pointer(pointer) == Some(&want)).then_some(conf)
            }
        }
    };
    let conf = eventually(
        "the release's gates in 98-worker-generated-kubelet",
        30,
        conf_has(
            "98-worker-generated-kubelet",
            "/featureGates",
            json!({"NewThing": true, "Old": false}),
        ),
    )
    .await;
    assert_eq!(
        conf["cgroupDriver"], "systemd",
        "built on the pool's template"
    );
    assert!(!mc_exists(&mcs, "97-worker-generated-kubelet").await);
    // Settled: the pool's render takes the new config, so that what follows is woken by the
    // Node config's watch alone.
    let pools: Api<MachineConfigPool> = Api::all(c.clone());
    eventually(
        "the worker render from 98-worker-generated-kubelet",
        30,
        || {
            let pools = pools.clone();
            async move {
                let pool = pools.get("worker").await.ok()?;
                let text = serde_json::to_string(&pool.spec.configuration).ok()?;
                text.contains("98-worker-generated-kubelet").then_some(())
            }
        },
    )
    .await;

    // The worker latency profile, and the cgroup mode's kernel arguments.
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "config.openshift.io/v1", "kind": "Node",
                "metadata": {"name": "cluster"},
                "spec": {"workerLatencyProfile": "MediumUpdateAverageReaction"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    for name in ["97-worker-generated-kubelet", "98-worker-generated-kubelet"] {
        eventually(
            &format!("20s in {name}"),
            30,
            conf_has(name, "/nodeStatusUpdateFrequency", json!("20s")),
        )
        .await;
    }
    let node97 = mcs.get("97-worker-generated-kubelet").await.unwrap();
    assert_eq!(
        node97.spec.kernel_arguments.as_deref().unwrap(),
        ["systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=\"all\""]
    );
    assert_eq!(
        generated_kubelet_conf(&mcs, "97-worker-generated-kubelet")
            .await
            .unwrap()["featureGates"],
        json!({"NewThing": true, "Old": false})
    );
    let profile = |p: &'static str| {
        let nodes = nodes.clone();
        async move {
            nodes
                .patch(
                    "cluster",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"workerLatencyProfile": p}})),
                )
                .await
                .unwrap();
        }
    };
    profile("LowUpdateSlowReaction").await;
    eventually(
        "1m0s in 97-worker-generated-kubelet",
        30,
        conf_has(
            "97-worker-generated-kubelet",
            "/nodeStatusUpdateFrequency",
            json!("1m0s"),
        ),
    )
    .await;

    // Low to Default in one step: refused in upstream's words, the configs kept.
    let before = mcs.get("97-worker-generated-kubelet").await.unwrap();
    profile("Default").await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(c.clone());
    eventually("the ActionProhibited event", 30, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("ActionProhibited")
                    && e.note.as_deref() == Some("Skipping the Update Node event, name: cluster, transition not allowed from old WorkerLatencyProfile: \"LowUpdateSlowReaction\" to new WorkerLatencyProfile: \"Default\"")
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Node")
            })
        }
    })
    .await;
    let after = mcs.get("97-worker-generated-kubelet").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());

    // A KubeletConfig's config builds over them.
    let kcs: Api<KubeletConfig> = Api::all(c.clone());
    kcs.create(
        &PostParams::default(),
        &kubelet_config("max-pods", POOL_LABEL, 300),
    )
    .await
    .unwrap();
    let conf = eventually(
        "99-worker-generated-kubelet",
        30,
        conf_has("99-worker-generated-kubelet", "/maxPods", json!(300)),
    )
    .await;
    assert_eq!(conf["nodeStatusUpdateFrequency"], "1m0s");
    assert_eq!(
        conf["featureGates"],
        json!({"NewThing": true, "Old": false})
    );
}
