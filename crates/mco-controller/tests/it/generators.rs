//! The KubeletConfig generator against the embedded API server: upstream's suffixes for a second
//! object of a pool, finalizers that delete the generated MachineConfig with its object, and a
//! Failure for an object that selects no pool; and a ContainerRuntimeConfig's CRI-O drop-in.

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
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

async fn mc_exists(mcs: &Api<MachineConfig>, name: &str) -> bool {
    mcs.get_opt(name).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suffixes_finalizers_and_failures_follow_upstream() {
    let env = env().await;
    let c = &env.client;
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
    let mcs: Api<MachineConfig> = Api::all(c.clone());
    mcs.create(&PostParams::default(), &base).await.unwrap();
    Api::<MachineConfigPool>::all(c.clone())
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {POOL_LABEL: ""}}})),
        )
        .await
        .unwrap();
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
