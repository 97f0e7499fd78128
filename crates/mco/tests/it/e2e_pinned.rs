//! End-to-end: a PinnedImageSet, driven with `kubectl` as an administrator would. The
//! controller lists it in the spec of the pool its labels select; every node of that pool pulls
//! its images and pins them in CRI-O's drop-in, with no drain or reboot, and says so in its
//! MachineConfigNode and the pool's synchronizer status; an image that cannot be pulled is
//! reported on each node, named by `mco doctor`, and the pins already made stay; a reference
//! not by digest is refused by the API server naming the field; deleting the set unpins.

use crate::e2e;

use e2e::*;
use serde_json::{Value, json};

on_both_servers!(a_pinned_image_set_reaches_its_pools_nodes_and_leaves_with_it);

const DROPIN: &str = "/etc/crio/crio.conf.d/50-pinned-images";
/// The `-o custom-columns` line docs/deploy.md gives for each node's progress.
const PROGRESS_VIEW: &str = "custom-columns=NODE:.metadata.name,SETS:.status.pinnedImageSets[*].name,CURRENT:.status.pinnedImageSets[*].currentGeneration,DESIRED:.status.pinnedImageSets[*].desiredGeneration,ERROR:.status.pinnedImageSets[*].lastFailedGenerationError";

fn image(name: &str, digit: char) -> String {
    format!(
        "quay.io/example/{name}@sha256:{}",
        digit.to_string().repeat(64)
    )
}

fn set_manifest(images: &[String]) -> String {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "PinnedImageSet",
        "metadata": {"name": "upgrade",
                     "labels": {"machineconfiguration.openshift.io/role": "worker"}},
        "spec": {"pinnedImages": images.iter().map(|i| json!({"name": i})).collect::<Vec<_>>()}
    })
    .to_string()
}

fn condition<'a>(mcn: &'a Value, type_: &str) -> Option<&'a Value> {
    mcn["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The node's entry for the set, when its conditions say `degraded`.
fn entry(c: &Cluster, node: &str, degraded: &str) -> Option<Value> {
    let mcn = c.mcn(node);
    (condition(&mcn, "PinnedImageSetsDegraded")?["status"] == degraded).then_some(())?;
    let sets = mcn["status"]["pinnedImageSets"].as_array()?;
    (sets.len() == 1 && sets[0]["name"] == "upgrade").then(|| sets[0].clone())
}

fn a_pinned_image_set_reaches_its_pools_nodes_and_leaves_with_it(server: Server) {
    let c = Cluster::up(Opts {
        server,
        reboot_seconds: 1,
        ..Opts::default()
    });
    let target = c.pool_target("worker");
    let workers = c.workers();
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    let good = [image("app", 'a'), image("db", 'b')];

    // A reference by tag is refused, naming the field.
    let refused = c
        .apply_try(&set_manifest(&["quay.io/example/app:latest".into()]))
        .unwrap_err();
    assert!(
        refused.contains("spec.pinnedImages[0].name") && refused.contains("should match"),
        "{refused}"
    );
    assert!(
        c.kubectl_try(&["get", "pinnedimageset", "upgrade"])
            .is_err(),
        "nothing of the refused set was stored"
    );

    c.apply(&set_manifest(&good));
    wait_for("the worker pool lists the set", 60, || {
        (c.pool("worker")["spec"]["pinnedImageSets"] == json!([{"name": "upgrade"}])).then_some(())
    });
    assert_eq!(c.pool("master")["spec"]["pinnedImageSets"], Value::Null);

    wait_for("every worker pinned generation 1", 120, || {
        workers
            .iter()
            .all(|w| {
                entry(&c, w, "False")
                    .is_some_and(|e| e["currentGeneration"] == 1 && e["desiredGeneration"] == 1)
                    && c.read_node_file(w, DROPIN)
                        .is_some_and(|d| good.iter().all(|i| d.contains(i.as_str())))
            })
            .then_some(())
    });
    let mcn = c.mcn(&workers[0]);
    let progressing = condition(&mcn, "PinnedImageSetsProgressing").unwrap();
    assert_eq!(progressing["status"], "False");
    assert_eq!(progressing["reason"], "AsExpected");
    assert_eq!(progressing["message"], "All pinned image sets complete");
    // The pool counts its nodes pinned.
    wait_for("the pool's synchronizer counts every worker", 60, || {
        let pool = c.pool("worker");
        let sync = pool["status"]["poolSynchronizersStatus"]
            .as_array()?
            .iter()
            .find(|s| s["poolSynchronizerType"] == "PinnedImageSets")?
            .clone();
        (sync["machineCount"] == workers.len() && sync["updatedMachineCount"] == workers.len())
            .then_some(())
    });
    // Each node's progress, as docs/deploy.md lists it.
    let table = c.kubectl(&["get", "machineconfignodes", "-o", PROGRESS_VIEW]);
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let want = if workers.iter().any(|w| w == cols[0]) {
            ["upgrade", "1", "1", "<none>"]
        } else {
            ["<none>"; 4]
        };
        assert_eq!(cols[1..], want, "{table}");
    }
    let docs = std::fs::read_to_string(repo_root().join("docs/deploy.md")).unwrap();
    assert!(
        docs.contains(PROGRESS_VIEW),
        "docs/deploy.md lacks {PROGRESS_VIEW}"
    );
    // Pinning takes no rollout, drain or reboot, and masters pin nothing.
    assert_eq!(c.pool_target("worker"), target);
    for (w, boot) in workers.iter().zip(&boots) {
        assert_eq!(&c.boot_id(w), boot, "{w} rebooted");
        assert_ne!(c.node(w)["spec"]["unschedulable"], true, "{w} cordoned");
    }
    let masters = c.kubectl(&[
        "get",
        "nodes",
        "-l",
        "node-role.kubernetes.io/master",
        "-o",
        "name",
    ]);
    for m in masters.lines() {
        let m = m.trim_start_matches("node/");
        assert_eq!(c.read_node_file(m, DROPIN), None, "{m} pinned");
    }

    // An image no registry serves: each worker reports it and keeps what it pinned.
    let bad = image("app", 'c').replace("quay.io", "registry.invalid");
    let mut with_bad = good.to_vec();
    with_bad.push(bad.clone());
    c.apply(&set_manifest(&with_bad));
    wait_for("every worker reports generation 2 failed", 120, || {
        workers
            .iter()
            .all(|w| {
                entry(&c, w, "True").is_some_and(|e| {
                    e["lastFailedGeneration"] == 2
                        && e["desiredGeneration"] == 2
                        && e["currentGeneration"] == 1
                        && e["lastFailedGenerationError"]
                            .as_str()
                            .is_some_and(|m| m.contains(&bad) && m.contains("no such host"))
                })
            })
            .then_some(())
    });
    let degraded = condition(&c.mcn(&workers[0]), "PinnedImageSetsDegraded")
        .unwrap()
        .clone();
    assert_eq!(degraded["reason"], "PrefetchFailed");
    assert_eq!(
        degraded["message"],
        "One or more PinnedImageSet is experiencing an error. See PinnedImageSet list for more details."
    );
    for w in &workers {
        let d = c.read_node_file(w, DROPIN).unwrap();
        assert!(!d.contains(&bad), "{w} pinned an image it does not hold");
    }
    // The dashboard shows the pool's progress while the workers are not all pinned.
    wait_for("the dashboard's pool flags say pinning", 30, || {
        let (_, page) = c.dashboard_get("/");
        page.contains(&format!("pinning images 0/{}", workers.len()))
            .then_some(())
    });
    let (_, out) = c.mco(&["status"]);
    assert!(
        out.contains("pinning failed") && out.contains(&format!("node {}", workers[0])),
        "{out}"
    );
    let (ok, out) = c.mco(&["doctor"]);
    assert!(!ok, "{out}");
    for want in [
        "pinnedimageset upgrade",
        "pinned images not pulled",
        &format!("is not pinned on {} nodes", workers.len()),
    ] {
        assert!(out.contains(want), "{want:?} not in:\n{out}");
    }

    // Corrected, it is pinned at once.
    c.apply(&set_manifest(&good));
    wait_for("every worker pinned generation 3", 120, || {
        workers
            .iter()
            .all(|w| {
                entry(&c, w, "False")
                    .is_some_and(|e| e["currentGeneration"] == 3 && e["desiredGeneration"] == 3)
            })
            .then_some(())
    });

    // Deleted, it is unpinned everywhere.
    c.kubectl(&["delete", "pinnedimageset", "upgrade"]);
    wait_for("the pins removed", 120, || {
        workers
            .iter()
            .all(|w| {
                c.read_node_file(w, DROPIN).is_none()
                    && c.mcn(w)["status"]["pinnedImageSets"].is_null()
            })
            .then_some(())
    });
    wait_for("the pool lists no set", 60, || {
        c.pool("worker")["spec"]["pinnedImageSets"]
            .is_null()
            .then_some(())
    });
}
