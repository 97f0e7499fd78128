//! End-to-end: mco on a cluster whose MachineConfigNode CRD is upstream's, not mco's. Each
//! fixture under `tests/fixtures/upstream-crds/` replaces mco's CRD (`mco up --crd`), and a
//! file MachineConfig rolls out to the workers with every MCN written in that schema's
//! shape: no field the schema lacks, and fields mco does not fill kept.

use crate::e2e;

use e2e::*;
use serde_json::{Value, json};

on_both_servers!(
    rollout_on_the_documented_noderef_v1alpha1,
    rollout_on_openshift_4_16_v1alpha1,
    rollout_on_openshift_4_20_v1,
);

const CRD: &str = "machineconfignodes.machineconfiguration.openshift.io";

/// What one fixture serves and how it names the node.
struct Shape {
    file: &'static str,
    version: &'static str,
    node_field: &'static str,
    /// Fields mco writes on its own CRD that this schema lacks: never written here.
    absent: &'static [&'static str],
    /// Whether it has upstream's `status.pinnedImageSets`, which mco must keep.
    pinned_image_sets: bool,
}

fn rollout_on_the_documented_noderef_v1alpha1(server: Server) {
    rollout_on(
        server,
        Shape {
            file: "machineconfignodes-v1alpha1-noderef.yaml",
            version: "v1alpha1",
            node_field: "nodeRef",
            absent: &["/spec/node"],
            pinned_image_sets: false,
        },
    )
}

fn rollout_on_openshift_4_16_v1alpha1(server: Server) {
    rollout_on(
        server,
        Shape {
            file: "machineconfignodes-4.16-v1alpha1.yaml",
            version: "v1alpha1",
            node_field: "node",
            absent: &["/spec/nodeRef", "/status/health", "/status/mostRecentError"],
            pinned_image_sets: true,
        },
    )
}

fn rollout_on_openshift_4_20_v1(server: Server) {
    rollout_on(
        server,
        Shape {
            file: "machineconfignodes-4.20-v1.yaml",
            version: "v1",
            node_field: "node",
            absent: &["/spec/nodeRef", "/status/health", "/status/mostRecentError"],
            pinned_image_sets: true,
        },
    )
}

fn rollout_on(server: Server, shape: Shape) {
    let fixture = repo_root()
        .join("crates/mco/tests/fixtures/upstream-crds")
        .join(shape.file);
    let c = Cluster::up(Opts {
        server,
        workers: 2,
        crds: vec![fixture],
        ..Opts::default()
    });
    let versions = c.kubectl(&["get", "crd", CRD, "-o", "jsonpath={.spec.versions[*].name}"]);
    assert_eq!(
        versions.trim(),
        shape.version,
        "the fixture's CRD is installed"
    );

    let workers = c.workers();
    // A field mco does not fill, as upstream's daemon would write it.
    let pinned = json!([{"name": "pinned-set", "desiredGeneration": 1}]);
    if shape.pinned_image_sets {
        let patch = json!({"status": {"pinnedImageSets": pinned}}).to_string();
        c.kubectl(&[
            "patch",
            "machineconfignode",
            &workers[0],
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ]);
    }

    let old = c.pool_target("worker");
    c.apply(&example("99-worker-motd.yaml"));
    let new = c.wait_rollout("worker", &old, 180);

    for w in &workers {
        assert_eq!(
            c.read_node_file(w, "/etc/motd").as_deref(),
            Some("Managed by mco. Local changes are reverted.\n"),
            "{w}"
        );
        let mcn: Value = wait_for(&format!("{w}'s MachineConfigNode at {new}"), 60, || {
            let m = c.try_get_json(&["machineconfignode", w])?;
            (condition_status(&m, "Updated") == "True"
                && m["status"]["configVersion"]["current"] == new.as_str())
            .then_some(m)
        });
        assert_eq!(
            mcn["apiVersion"],
            format!("machineconfiguration.openshift.io/{}", shape.version)
        );
        assert_eq!(mcn["spec"][shape.node_field]["name"], w.as_str(), "{mcn}");
        assert_eq!(mcn["spec"]["configVersion"]["desired"], new.as_str());
        for path in shape.absent {
            assert!(mcn.pointer(path).is_none(), "{w}: {path} written: {mcn}");
        }
        for phase in ["UpdatePrepared", "UpdateExecuted", "UpdateComplete"] {
            assert!(
                e2e::condition(&mcn, phase).is_some(),
                "{w}: no {phase} condition: {mcn}"
            );
        }
        if shape.pinned_image_sets && w == &workers[0] {
            assert_eq!(mcn["status"]["pinnedImageSets"], pinned, "kept: {mcn}");
        }
    }

    // docs/deploy.md's line for upstream v1's view, on whichever schema is installed.
    let view = c.kubectl(&[
        "get",
        "machineconfignodes",
        "--no-headers",
        "-o",
        UPSTREAM_V1_VIEW,
    ]);
    let row = view
        .lines()
        .find(|l| l.starts_with(&format!("{} ", workers[0])))
        .unwrap_or_else(|| panic!("no row for {}:\n{view}", workers[0]));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, [workers[0].as_str(), "worker", &new, &new, "True"]);
}

/// The `-o custom-columns` line docs/deploy.md gives for upstream `v1`'s view.
const UPSTREAM_V1_VIEW: &str = r#"custom-columns=NAME:.metadata.name,POOLNAME:.spec.pool.name,DESIREDCONFIG:.spec.configVersion.desired,CURRENTCONFIG:.status.configVersion.current,UPDATED:.status.conditions[?(@.type=="Updated")].status"#;
