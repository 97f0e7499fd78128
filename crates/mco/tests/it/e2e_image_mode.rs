//! End-to-end: on-cluster image mode, driven with `kubectl` as an administrator and a builder
//! would. A MachineOSConfig puts the worker pool in image mode; the pool waits, moving nobody,
//! until a build of its rendered config is recorded (a MachineOSBuild that Succeeded, and the
//! MachineOSConfig's `currentImagePullSpec`); its nodes then boot the image within
//! `maxUnavailable`, the daemon writing the rendered config's files too, and a machine that
//! joins boots it from the start, as the machine config server serves it. A new MachineConfig
//! waits for its own build, and deleting the MachineOSConfig takes every node back to the
//! rendered config's OS image.

use crate::e2e;

use e2e::*;
use serde_json::{Value, json};

on_both_servers!(a_pool_in_image_mode_boots_each_recorded_build_and_leaves_it);

const DESIRED_IMAGE: &str = DESIRED_IMAGE_ANN;
const CURRENT_IMAGE: &str = CURRENT_IMAGE_ANN;
const CURRENT_BUILD: &str = "machineconfiguration.openshift.io/current-machine-os-build";

fn image(digit: char) -> String {
    format!(
        "registry.example/ocp/os-worker@sha256:{}",
        digit.to_string().repeat(64)
    )
}

/// The image the node's booted deployment came from, and whether it was rebased as a container
/// (an image-mode image is; a pivot-era node keeps its `pivot://` custom origin otherwise).
fn booted_image(c: &Cluster, node: &str) -> (String, bool) {
    let booted = c.booted_deployment(node);
    if let Some(r) = booted["container-image-reference"].as_str() {
        return (
            r.trim_start_matches("ostree-unverified-registry:").into(),
            true,
        );
    }
    let pivot = booted["custom-origin"][0].as_str().unwrap_or_default();
    (pivot.trim_start_matches("pivot://").into(), false)
}

/// Records the build of `rendered` as a builder does: the MachineOSBuild, its `Succeeded`
/// status, and the MachineOSConfig pointing at it.
fn record_build(c: &Cluster, rendered: &str, image: &str) {
    let name = format!("worker-{rendered}");
    c.apply(
        &json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSBuild",
            "metadata": {"name": name},
            "spec": {"machineConfig": {"name": rendered},
                     "machineOSConfig": {"name": "worker"},
                     "renderedImagePushSpec": "registry.example/ocp/os-worker:latest"}
        })
        .to_string(),
    );
    let status = json!({"status": {
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                        "message": "built", "lastTransitionTime": "2026-12-01T00:00:00Z"}],
        "digestedImagePushSpec": image,
    }})
    .to_string();
    c.kubectl(&[
        "patch",
        "machineosbuild",
        &name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ]);
    c.kubectl(&[
        "annotate",
        "machineosconfig",
        "worker",
        "--overwrite",
        &format!("{CURRENT_BUILD}={name}"),
    ]);
    let status = json!({"status": {"currentImagePullSpec": image}}).to_string();
    c.kubectl(&[
        "patch",
        "machineosconfig",
        "worker",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ]);
}

fn updating_message(c: &Cluster) -> String {
    let p = c.pool("worker");
    p["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Updating")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Every worker Done on `config` and `image` ("" outside image mode), booted into `booted`.
fn wait_workers_on(c: &Cluster, workers: &[String], config: &str, image: &str, booted: &str) {
    wait_for(
        &format!("every worker on {config} / {image:?}"),
        180,
        || {
            workers
                .iter()
                .all(|w| {
                    let n = c.node(w);
                    annotation(&n, CURRENT_ANN) == config
                        && annotation(&n, STATE_ANN) == "Done"
                        && annotation(&n, DESIRED_IMAGE) == image
                        && annotation(&n, CURRENT_IMAGE) == image
                        && booted_image(c, w).0 == booted
                })
                .then_some(())
        },
    );
}

fn a_pool_in_image_mode_boots_each_recorded_build_and_leaves_it(server: Server) {
    let c = Cluster::up(Opts {
        server,
        reboot_seconds: 1,
        ..Opts::default()
    });
    let r0 = c.wait_pool_settled("worker", 120);
    let workers = c.workers();
    assert!(workers.len() >= 2, "{workers:?}");
    // The rendered config's own OS image, which a node out of image mode boots.
    let base = c.kubectl(&["get", "mc", &r0, "-o", "jsonpath={.spec.osImageURL}"]);
    assert!(!base.is_empty());

    // In image mode with nothing built: the rollout waits and says why; no node moves.
    c.apply(
        &json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSConfig",
            "metadata": {"name": "worker"},
            "spec": {"machineConfigPool": {"name": "worker"},
                     "imageBuilder": {"imageBuilderType": "Job"},
                     "renderedImagePushSecret": {"name": "push-secret"},
                     "renderedImagePushSpec": "registry.example/ocp/os-worker:latest"}
        })
        .to_string(),
    );
    wait_for("the pool waiting for its image", 60, || {
        updating_message(&c)
            .starts_with(&format!("Waiting for the image of MachineConfig {r0}: "))
            .then_some(())
    });
    for w in &workers {
        assert_eq!(annotation(&c.node(w), DESIRED_IMAGE), "", "{w}");
    }

    // The first build: every worker boots it, one at a time, and keeps its rendered config.
    let watch = c.watch("nodes");
    watch.wait_initial(workers.len());
    let img1 = image('1');
    record_build(&c, &r0, &img1);
    wait_workers_on(&c, &workers, &r0, &img1, &img1);
    c.wait_pool_settled("worker", 60);
    for w in &workers {
        assert!(
            booted_image(&c, w).1,
            "{w}: an image-mode image is booted as a container"
        );
    }
    let of_workers = |ev: &Value| workers.iter().any(|w| ev["metadata"]["name"] == w.as_str());
    assert_eq!(
        most_unavailable(&watch.events(), of_workers),
        1,
        "maxUnavailable 1"
    );
    for w in &workers {
        assert_eq!(
            c.read_node_file(w, "/etc/machine-config-daemon/currentimage")
                .map(|s| s.trim().to_string()),
            Some(img1.clone()),
            "{w}"
        );
    }
    let mcn = c.mcn(&workers[0]);
    assert_eq!(mcn["spec"]["configVersion"]["desired"], r0.as_str());

    // A machine joining the pool now gets the image from the machine config server and boots
    // it at first boot: it is never a candidate of the rollout.
    let joined = c.watch("nodes");
    c.sim(&["add-node", "w9", "--pool", "worker"]);
    wait_for("w9 Done on the image", 180, || {
        let n = c.try_get_json(&["node", "w9"])?;
        (annotation(&n, CURRENT_ANN) == r0
            && annotation(&n, STATE_ANN) == "Done"
            && annotation(&n, CURRENT_IMAGE) == img1
            && booted_image(&c, "w9") == (img1.clone(), true))
            .then_some(())
    });
    // Its daemon found it on the image at its first start: it never had an update to make.
    for ev in joined.events() {
        if ev["metadata"]["name"] == "w9" {
            assert_ne!(
                annotation(&ev, STATE_ANN),
                "Working",
                "w9 updated after it joined"
            );
        }
    }
    let mut workers = workers;
    workers.push("w9".to_string());

    // A new MachineConfig in image mode waits for its own build: nobody moves meanwhile.
    c.apply(&file_mc(
        "99-worker-layered",
        "worker",
        "/etc/layered",
        "l\n",
    ));
    let r1 = wait_for("a new rendered config", 60, || {
        let t = c.pool_target("worker");
        (t != r0).then_some(t)
    });
    wait_for("the pool waiting for the new config's image", 60, || {
        updating_message(&c)
            .starts_with(&format!("Waiting for the image of MachineConfig {r1}: "))
            .then_some(())
    });
    for w in &workers {
        let n = c.node(w);
        assert_eq!(
            annotation(&n, "machineconfiguration.openshift.io/desiredConfig"),
            r0,
            "{w}"
        );
        assert_eq!(c.read_node_file(w, "/etc/layered"), None, "{w}");
    }
    let img2 = image('2');
    record_build(&c, &r1, &img2);
    wait_workers_on(&c, &workers, &r1, &img2, &img2);
    for w in &workers {
        assert_eq!(
            c.read_node_file(w, "/etc/layered").as_deref(),
            Some("l\n"),
            "{w}"
        );
    }

    // Out of image mode: back to the rendered config's own OS image, the config kept.
    c.kubectl(&["delete", "machineosconfig", "worker"]);
    wait_workers_on(&c, &workers, &r1, "", &base);
    c.wait_pool_settled("worker", 60);
    for w in &workers {
        let n = c.node(w);
        assert!(
            n["metadata"]["annotations"].get(CURRENT_IMAGE).is_none(),
            "{w}"
        );
        assert!(
            n["metadata"]["annotations"].get(DESIRED_IMAGE).is_none(),
            "{w}"
        );
        assert_eq!(
            c.read_node_file(w, "/etc/machine-config-daemon/currentimage"),
            None,
            "{w}"
        );
        assert_eq!(
            c.read_node_file(w, "/etc/layered").as_deref(),
            Some("l\n"),
            "{w}"
        );
    }
}
