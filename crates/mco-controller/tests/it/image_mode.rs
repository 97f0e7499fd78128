//! On-cluster image mode against the embedded API server: a pool with a MachineOSConfig waits,
//! moving nobody, until the build of its rendered config is recorded; then its nodes go to the
//! config and the image together within `maxUnavailable`; a rollback pin takes them back to the
//! image the pinned config's build recorded; without the MachineOSConfig they go back to the
//! rendered config alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use mco_api::constants::{annotations, states};
use mco_api::{MachineConfigPool, MachineOSBuild, MachineOSConfig};
use serde_json::json;

use crate::common::*;

const IMG: &str = "registry.example/ocp/os@sha256:4444444444444444444444444444444444444444444444444444444444444444";

fn mosc() -> MachineOSConfig {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineOSConfig",
        "metadata": {"name": "worker"},
        "spec": {
            "machineConfigPool": {"name": "worker"},
            "imageBuilder": {"imageBuilderType": "Job"},
            "renderedImagePushSecret": {"name": "push"},
            "renderedImagePushSpec": "registry.example/ocp/os:worker",
        },
    }))
    .unwrap()
}

fn mosb(rendered: &str) -> MachineOSBuild {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineOSBuild",
        "metadata": {"name": format!("worker-{rendered}")},
        "spec": {
            "machineConfig": {"name": rendered},
            "machineOSConfig": {"name": "worker"},
            "renderedImagePushSpec": "registry.example/ocp/os:worker",
        },
    }))
    .unwrap()
}

/// A builder's record of the build of `rendered`: the MachineOSBuild, `Succeeded` with `image`.
/// Returns its name.
async fn build_succeeded(c: &kube::Client, rendered: &str, image: &str) -> String {
    let mosbs: Api<MachineOSBuild> = Api::all(c.clone());
    let build = mosbs
        .create(&PostParams::default(), &mosb(rendered))
        .await
        .unwrap();
    let name = build.metadata.name.clone().unwrap();
    mosbs
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "digestedImagePushSpec": image,
            }})),
        )
        .await
        .unwrap();
    name
}

/// The builder's record on the MachineOSConfig: its current build and that build's image.
async fn name_build(c: &kube::Client, build: &str, image: &str) {
    let moscs: Api<MachineOSConfig> = Api::all(c.clone());
    moscs
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                mco_api::image_mode::CURRENT_BUILD_ANNOTATION: build}}})),
        )
        .await
        .unwrap();
    moscs
        .patch_status(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentImagePullSpec": image}})),
        )
        .await
        .unwrap();
}

/// Plays each node's daemon in image mode: a node pointed at another config or image goes
/// Working, then Done on both (the image annotation removed once it has none), one step per
/// tick. Returns the most nodes ever Working at once.
fn image_daemons(c: &kube::Client) -> (tokio::task::JoinHandle<()>, Arc<AtomicUsize>) {
    let api: Api<Node> = Api::all(c.clone());
    let most = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&most);
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(40)).await;
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            let working = list
                .items
                .iter()
                .filter(|n| ann(n, annotations::STATE) == states::WORKING)
                .count();
            seen.fetch_max(working, Ordering::Relaxed);
            for n in list.items {
                let name = n.metadata.name.clone().unwrap_or_default();
                let (cur, des) = (
                    ann(&n, annotations::CURRENT_CONFIG),
                    ann(&n, annotations::DESIRED_CONFIG),
                );
                let (cur_img, des_img) = (
                    ann(&n, annotations::CURRENT_IMAGE),
                    ann(&n, annotations::DESIRED_IMAGE),
                );
                let values = match ann(&n, annotations::STATE) {
                    states::DONE if cur != des || cur_img != des_img => {
                        json!({annotations::STATE: states::WORKING})
                    }
                    states::WORKING => json!({
                        annotations::CURRENT_CONFIG: des,
                        annotations::CURRENT_IMAGE: (!des_img.is_empty()).then_some(des_img),
                        annotations::STATE: states::DONE,
                    }),
                    _ => continue,
                };
                let patch = json!({"metadata": {"annotations": values}});
                let _ = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        }
    });
    (task, most)
}

async fn nodes_on(c: &kube::Client, config: &str, image: &str) {
    eventually(
        &format!("every worker on {config} / {image:?}"),
        60,
        || async {
            let nodes = Api::<Node>::all(c.clone())
                .list(&ListParams::default())
                .await
                .ok()?;
            nodes
                .items
                .iter()
                .all(|n| {
                    ann(n, annotations::CURRENT_CONFIG) == config
                        && ann(n, annotations::DESIRED_IMAGE) == image
                        && ann(n, annotations::CURRENT_IMAGE) == image
                        && ann(n, annotations::STATE) == states::DONE
                })
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_in_image_mode_waits_for_its_build_then_rolls_the_image_out_and_back() {
    let env = env().await;
    let c = &env.client;
    let _ctl = start_controller(c, fast_config("a"));
    let r0 = target_other_than(c, "worker", None).await;
    for n in ["w0", "w1", "w2"] {
        create_node(c, &node(n, "worker", &r0)).await;
    }
    wait_updated(c, "worker", &r0, 30).await;
    let (_daemons, most_working) = image_daemons(c);

    // In image mode with no build recorded: nobody moves, and the pool says what it waits for.
    let moscs: Api<MachineOSConfig> = Api::all(c.clone());
    moscs.create(&PostParams::default(), &mosc()).await.unwrap();
    let waiting = format!(
        "Waiting for the image of MachineConfig {r0}: No MachineOSBuild for MachineOSConfig worker and MachineConfig {r0}"
    );
    eventually("the pool waits for its image", 30, || async {
        let s = pool(c, "worker").await.status?;
        let updating = s.condition("Updating")?;
        (updating.status == "True" && updating.message == waiting).then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(c.clone());
    for n in nodes.list(&ListParams::default()).await.unwrap().items {
        assert_eq!(ann(&n, annotations::DESIRED_IMAGE), "", "{n:?}");
    }
    assert_eq!(most_working.load(Ordering::Relaxed), 0);

    // The build succeeds, but the MachineOSConfig does not name the image yet: still waiting.
    let build_name = build_succeeded(c, &r0, IMG).await;
    eventually("still waiting, for the MachineOSConfig", 30, || async {
        let s = pool(c, "worker").await.status?;
        s.condition("Updating")?
            .message
            .contains("Desired image not set in MachineOSConfig")
            .then_some(())
    })
    .await;

    // Named: every worker goes to the config and the image, one at a time (maxUnavailable 1).
    name_build(c, &build_name, IMG).await;
    nodes_on(c, &r0, IMG).await;
    wait_updated(c, "worker", &r0, 30).await;
    assert_eq!(
        most_working.load(Ordering::Relaxed),
        1,
        "one node at a time, and at least one moved"
    );

    // A new config and its build, then a rollback pin to the first config: the nodes go back
    // to the image the first config's build recorded, which the MachineOSConfig no longer names.
    create_mc(c, "99-worker-layer", "worker", "/etc/layer", "l").await;
    let r1 = target_other_than(c, "worker", Some(&r0)).await;
    let img2 = IMG.replace("sha256:4", "sha256:5");
    let build2 = build_succeeded(c, &r1, &img2).await;
    name_build(c, &build2, &img2).await;
    nodes_on(c, &r1, &img2).await;
    Api::<MachineConfigPool>::all(c.clone())
        .patch(
            "worker",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                mco_api::rollouts::annotations::ROLLBACK_TO: r0}}})),
        )
        .await
        .unwrap();
    nodes_on(c, &r0, IMG).await;

    // Out of image mode: back to the rendered config's own OS image, again one at a time.
    moscs
        .delete("worker", &DeleteParams::default())
        .await
        .unwrap();
    nodes_on(c, &r0, "").await;
    wait_updated(c, "worker", &r0, 30).await;
    assert_eq!(most_working.load(Ordering::Relaxed), 1);
    let p: MachineConfigPool = pool(c, "worker").await;
    assert_eq!(p.status.unwrap().updated_machine_count, 3);
}
