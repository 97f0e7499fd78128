//! `mco doctor` against hand-built snapshots: every case names the cause and the exact fix.

use crate::common;
use std::sync::Arc;

use std::collections::BTreeMap;

use common::*;
use mco_cli::doctor::{self, Cause, classify, diagnose};
use mco_cli::local::{self, LocalFacts};
use mco_cli::{Finding, Snapshot};
use serde_json::json;

const OLD: &str = "rendered-worker-00000000000000000000000000000000";
const NEW: &str = "rendered-worker-11111111111111111111111111111111";
const MASTER: &str = "rendered-master-bd1426e1c30cc288379bc4c7dd71c4aa";
const IMAGE_122: &str = "registry.uniontech.com/utccp-components/machine-os-content:1.2.2";
/// Seed 000's daemon error, verbatim.
const SEED000_REASON: &str = "unexpected on-disk state validating against rendered-master-bd1426e1c30cc288379bc4c7dd71c4aa: expected target osImageURL \"registry.uniontech.com/utccp-components/machine-os-content:1.2.2\", have \"\"";

fn no_roots() -> BTreeMap<String, LocalFacts> {
    BTreeMap::new()
}

fn one(findings: &[Finding]) -> &Finding {
    assert_eq!(findings.len(), 1, "{findings:#?}");
    &findings[0]
}

fn commands(f: &Finding) -> Vec<&str> {
    f.fixes.iter().map(|x| x.command.as_str()).collect()
}

fn cluster() -> Snapshot {
    let mut s = snapshot(10_000);
    s.pools.push(pool("worker", NEW, 2, 1).into());
    s.pools.push(pool("master", MASTER, 1, 1).into());
    s.machine_configs.push(mc(
        OLD,
        json!({"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/mco-test", "contents": {"source": "data:,hello%0A"}}
        ]}}}),
    ));
    s.machine_configs.push(mc(NEW, json!({})));
    s.machine_configs
        .push(mc(MASTER, json!({"osImageURL": IMAGE_122})));
    s.nodes
        .push(node("w0", "worker", NEW, NEW, "Done", "").into());
    s.nodes
        .push(node("m0", "master", MASTER, MASTER, "Done", "").into());
    s
}

#[test]
fn healthy_cluster() {
    let s = cluster();
    let findings = diagnose(&s, &no_roots(), None);
    assert!(findings.is_empty(), "{findings:#?}");
    assert_eq!(
        doctor::render(&findings, Some(&s)),
        "No problems found: 2 pools, 2 nodes healthy.\n"
    );
}

#[test]
fn seed000_never_adopted_os() {
    assert_eq!(
        classify(SEED000_REASON, false),
        Cause::NeverAdoptedOs {
            expected: IMAGE_122.into()
        }
    );
    let mut s = cluster();
    s.nodes[1] = node("m0", "master", MASTER, MASTER, "Degraded", SEED000_REASON).into();
    let findings = diagnose(&s, &no_roots(), Some("m0"));
    let f = one(&findings);
    assert_eq!(f.subject, "node m0");
    assert_eq!(
        f.title,
        "OS image never adopted (first boot skipped the OS)"
    );
    assert!(f.cause.contains("never taken over by mco"), "{}", f.cause);
    assert!(f.cause.contains("first boot skipped the OS"), "{}", f.cause);
    assert_eq!(
        commands(f),
        vec![
            "touch /run/machine-config-daemon-force",
            "cp /etc/ignition-machine-config-encapsulated.json.bak /etc/ignition-machine-config-encapsulated.json && mco daemon firstboot-complete-machineconfig",
        ]
    );
    let text = doctor::render(&findings, Some(&s));
    assert!(text.starts_with("1 problem found."), "{text}");
    assert!(
        text.contains("      $ touch /run/machine-config-daemon-force\n"),
        "{text}"
    );
}

#[test]
fn cgroup_v1_is_named_with_the_move_to_v2() {
    use mco_cli::client::ClusterSettings;
    let mut settings = ClusterSettings::default();
    assert!(doctor::deprecated_cluster_settings(&settings).is_empty());
    let node = |mode: &str| {
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Node",
            "metadata": {"name": "cluster"}, "spec": {"cgroupMode": mode},
        }))
        .unwrap()
    };
    settings.node = Some(node("v2"));
    assert!(doctor::deprecated_cluster_settings(&settings).is_empty());
    settings.node = Some(node("v1"));
    let found = doctor::deprecated_cluster_settings(&settings);
    let f = one(&found);
    assert_eq!(f.title, "cgroup v1");
    assert!(
        f.cause.contains("OpenShift 4.19 and newer refuse it"),
        "{}",
        f.cause
    );
    assert_eq!(
        commands(f),
        vec![
            r#"kubectl patch nodes.config.openshift.io cluster --type merge -p '{"spec":{"cgroupMode":"v2"}}'"#
        ]
    );
    // Accepted, so not a refusal as well.
    assert!(doctor::refused_cluster_settings(&settings, &[]).is_empty());
}

const LAYERED: &str =
    "registry.example/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// A `v1` MachineOSConfig for `pool` (named after it, as upstream requires) whose status
/// names `image`.
fn mosc(pool: &str, image: &str) -> mco_api::MachineOSConfig {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSConfig",
        "metadata": {"name": pool},
        "spec": {
            "machineConfigPool": {"name": pool},
            "imageBuilder": {"imageBuilderType": "Job"},
            "renderedImagePushSecret": {"name": "push"},
            "renderedImagePushSpec": "registry.example/os:latest",
        },
        "status": {"currentImagePullSpec": image},
    }))
    .unwrap()
}

/// A MachineOSBuild of `rendered` for MachineOSConfig `config`, its condition `cond` True.
fn mosb(
    name: &str,
    config: &str,
    rendered: &str,
    cond: &str,
    image: &str,
) -> mco_api::MachineOSBuild {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSBuild",
        "metadata": {"name": name},
        "spec": {
            "machineConfig": {"name": rendered},
            "machineOSConfig": {"name": config},
            "renderedImagePushSpec": "registry.example/os:latest",
        },
        "status": {
            "conditions": [{"type": cond, "status": "True", "reason": cond, "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "digestedImagePushSpec": image,
        },
    }))
    .unwrap()
}

fn image_mode(
    configs: Vec<mco_api::MachineOSConfig>,
    builds: Vec<mco_api::MachineOSBuild>,
) -> Vec<Finding> {
    let objects = mco_cli::client::ImageModeObjects {
        configs,
        builds,
        tech_preview: vec![],
    };
    doctor::image_mode(&objects, &cluster().pools)
}

/// A pool in image mode whose rendered config has no ready image: its rollout waits, named
/// with upstream's words for why, the builds to look at and the way out of image mode.
#[test]
fn a_pool_waiting_for_its_image_is_named_with_why() {
    // The pool's earlier config was built; its target (NEW) is being built.
    let found = image_mode(
        vec![mosc("worker", LAYERED)],
        vec![
            mosb("worker-old", "worker", OLD, "Succeeded", LAYERED),
            mosb("worker-new", "worker", NEW, "Building", ""),
        ],
    );
    let f = one(&found);
    assert_eq!(f.subject, "machineosconfig worker");
    assert_eq!(f.title, "image build awaited");
    assert_eq!(
        f.cause,
        format!(
            "Pool worker is in on-cluster image mode and its rollout waits for the image of \
             MachineConfig {NEW} (Image build in progress): none of its nodes is moved until it \
             is ready. mco rolls out the images a builder (upstream's build controller, a \
             pipeline) records in a MachineOSBuild and in the MachineOSConfig's \
             status.currentImagePullSpec, and builds none itself."
        )
    );
    assert_eq!(
        commands(f),
        vec![
            "kubectl get machineosbuilds",
            "kubectl delete machineosconfig worker",
        ]
    );
    assert!(
        f.fixes[1]
            .how
            .contains("the nodes of pool worker go back to the rendered config's OS image"),
        "{:?}",
        f.fixes[1]
    );
    // No build of the target at all: upstream's words say so.
    let found = image_mode(
        vec![mosc("worker", LAYERED)],
        vec![mosb("worker-old", "worker", OLD, "Succeeded", LAYERED)],
    );
    let f = one(&found);
    assert!(
        f.cause.contains(&format!(
            "the image of MachineConfig {NEW} (No MachineOSBuild for MachineOSConfig worker and \
             MachineConfig {NEW}): "
        )),
        "{}",
        f.cause
    );
    // A failed build is named.
    let found = image_mode(
        vec![mosc("worker", LAYERED)],
        vec![mosb("worker-new", "worker", NEW, "Failed", "")],
    );
    assert!(
        one(&found)
            .cause
            .contains("(Image build failed: MachineOSBuild worker-new)"),
        "{found:#?}"
    );
}

/// The image of the pool's target built and recorded: the rollout goes on, nothing to say.
#[test]
fn a_pool_whose_image_is_ready_is_not_named() {
    let built = || mosb("worker-new", "worker", NEW, "Succeeded", LAYERED);
    let found = image_mode(vec![mosc("worker", LAYERED)], vec![built()]);
    assert!(found.is_empty(), "{found:#?}");
    // Built, but the MachineOSConfig does not name the image yet: still waiting.
    let found = image_mode(vec![mosc("worker", "")], vec![built()]);
    assert_eq!(one(&found).title, "image build awaited");
}

/// Builds without a MachineOSConfig put no pool in image mode: no finding.
#[test]
fn a_pool_not_in_image_mode_is_not_named() {
    assert!(image_mode(vec![], vec![]).is_empty());
    let found = image_mode(
        vec![],
        vec![mosb("worker-new", "worker", NEW, "Building", "")],
    );
    assert!(found.is_empty(), "{found:#?}");
    // A MachineOSConfig for master leaves worker out of image mode.
    let found = image_mode(
        vec![mosc("master", LAYERED)],
        vec![
            mosb("worker-new", "worker", NEW, "Building", ""),
            mosb("master-1", "master", MASTER, "Succeeded", LAYERED),
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
}

/// A MachineOSConfig whose spec.machineConfigPool names no pool.
#[test]
fn a_machine_os_config_for_no_pool_is_named() {
    let found = image_mode(vec![mosc("infra", LAYERED)], vec![]);
    let f = one(&found);
    assert_eq!(f.subject, "machineosconfig infra");
    assert_eq!(f.title, "image mode for no pool");
    assert_eq!(
        f.cause,
        "MachineOSConfig infra is for pool infra, which does not exist \
         (spec.machineConfigPool.name): no node runs an image built for it."
    );
    assert_eq!(
        commands(f),
        vec!["kubectl get mcp", "kubectl delete machineosconfig infra"]
    );
}

/// A Technology Preview (`v1alpha1`) MachineOSConfig: mco applies none of its builds.
#[test]
fn a_tech_preview_machine_os_config_is_named() {
    let objects = mco_cli::client::ImageModeObjects {
        tech_preview: vec![("layered".into(), "worker".into())],
        ..Default::default()
    };
    let found = doctor::image_mode(&objects, &cluster().pools);
    let f = one(&found);
    assert_eq!(f.subject, "machineosconfig layered");
    assert_eq!(f.title, "Technology Preview image mode");
    assert!(
        f.cause.starts_with(
            "MachineOSConfig layered (pool worker) is the Technology Preview's \
             machineconfiguration.openshift.io/v1alpha1 (OpenShift 4.16 to 4.18). mco applies \
             only v1 image-mode builds (OpenShift 4.19 and newer): the nodes of pool worker are \
             rolled out as any pool's, to the rendered config's OS image"
        ),
        "{}",
        f.cause
    );
    assert_eq!(
        commands(f),
        vec!["oc adm upgrade", "kubectl delete machineosconfig layered"]
    );
}

/// The daemon no longer refuses a node in image mode: its old reason is no cause of its own.
#[test]
fn the_old_image_mode_refusal_is_no_cause_of_its_own() {
    let reason = "node w1 is in on-cluster image mode (machineconfiguration.openshift.io/desiredImage=registry.example/os@sha256:1): mco does not apply images a MachineOSConfig builds, and leaves the node as it is";
    assert_eq!(classify(reason, false), Cause::Other);
}

/// A PinnedImageSet that reaches no node is named: one no pool selects (by upstream's rule,
/// the pool's machineConfigSelector matching its labels), and one some nodes failed to pull,
/// with those nodes and the first error. A set pinned everywhere, or in progress, is not.
#[test]
fn a_pinned_image_set_that_reaches_no_node_is_named() {
    assert!(doctor::pinned_image_sets(&[], &[], &[]).is_empty());
    let pools = vec![
        Arc::new(pool("worker", "rendered-worker-1", 3, 3)),
        Arc::new(pool("master", "rendered-master-1", 3, 3)),
    ];
    let role = |r: &str| {
        [(
            "machineconfiguration.openshift.io/role".to_string(),
            r.to_string(),
        )]
        .into()
    };
    let set =
        |name: &str, labels: BTreeMap<String, String>, images: &[&str]| doctor::PinnedImageSet {
            name: name.into(),
            labels,
            images: images.iter().map(|i| i.to_string()).collect(),
        };
    let sets = [
        set(
            "upgrade",
            role("worker"),
            &["quay.io/a@sha256:1", "quay.io/b@sha256:2"],
        ),
        set("spare", role("infra"), &["quay.io/c@sha256:3"]),
        set("fine", role("master"), &["quay.io/d@sha256:4"]),
    ];
    let mcn = |node: &str, entries: serde_json::Value| {
        Arc::new(
            serde_json::from_value::<mco_api::MachineConfigNode>(json!({
                "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
                "metadata": {"name": node},
                "spec": {"node": {"name": node}, "pool": {"name": "worker"},
                         "configVersion": {"desired": "rendered-worker-1"}},
                "status": {"pinnedImageSets": entries}
            }))
            .unwrap(),
        )
    };
    let err = "failed to pull image \"quay.io/a@sha256:1\": unauthorized";
    let mcns = vec![
        mcn(
            "w-0",
            json!([{"name": "upgrade", "desiredGeneration": 2, "currentGeneration": 1,
                           "lastFailedGeneration": 2, "lastFailedGenerationError": err}]),
        ),
        mcn(
            "w-1",
            json!([{"name": "upgrade", "desiredGeneration": 2, "currentGeneration": 2}]),
        ),
        // An earlier generation failed; this one is in progress: not a failure now.
        mcn(
            "w-2",
            json!([{"name": "upgrade", "desiredGeneration": 3,
                           "lastFailedGeneration": 2, "lastFailedGenerationError": err}]),
        ),
        mcn(
            "m-0",
            json!([{"name": "fine", "desiredGeneration": 1, "currentGeneration": 1}]),
        ),
    ];
    let found = doctor::pinned_image_sets(&sets, &pools, &mcns);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(found[0].subject, "pinnedimageset upgrade");
    assert_eq!(found[0].title, "pinned images not pulled");
    assert!(
        found[0].cause.starts_with(&format!(
            "PinnedImageSet upgrade (2 images) is not pinned on 1 node (w-0): {err}."
        )),
        "{}",
        found[0].cause
    );
    assert_eq!(
        commands(&found[0]),
        vec![
            "kubectl get machineconfignodes -o custom-columns=NODE:.metadata.name,SETS:.status.pinnedImageSets[*].name,ERROR:.status.pinnedImageSets[*].lastFailedGenerationError",
            "kubectl edit pinnedimageset upgrade",
        ]
    );
    assert_eq!(found[1].subject, "pinnedimageset spare");
    assert_eq!(found[1].title, "pinned image set for no pool");
    assert!(
        found[1].cause.starts_with(
            "PinnedImageSet spare (1 image) is for no pool: no pool's machineConfigSelector \
             matches its labels (machineconfiguration.openshift.io/role=infra)"
        ),
        "{}",
        found[1].cause
    );
}

/// A simulated node of `mco up` whose root is at `<data-dir>/nodes/<n>`.
fn sim_root(data_dir: &std::path::Path, node: &str, file: &[u8]) -> LocalFacts {
    let root = data_dir.join("nodes").join(node);
    let fs = mco_daemon::fs::HostFs::open({
        std::fs::create_dir_all(&root).unwrap();
        &root
    })
    .unwrap();
    let attrs = mco_daemon::fs::FileAttrs::default();
    let cfg = serde_json::to_vec(&mc(
        OLD,
        json!({"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/mco-test", "contents": {"source": "data:,hello%0A"}}
        ]}}}),
    ))
    .unwrap();
    fs.write_atomic("/etc/machine-config-daemon/currentconfig", &cfg, &attrs)
        .unwrap();
    fs.write_atomic("/etc/mco-test", file, &attrs).unwrap();
    mco_daemon::ostree::SimOstree::new(fs.try_clone().unwrap())
        .seed_from_json(
            r#"{"deployments":[{"id":"a","osname":"x","checksum":"c","booted":true,"origin":"x:x"}]}"#,
            &[],
        )
        .unwrap();
    local::gather(&root).unwrap()
}

#[test]
fn drift_names_file_sizes_and_the_sim_force_file() {
    let reason = format!(
        "unexpected on-disk state validating against {OLD}: content mismatch for file \"/etc/mco-test\""
    );
    let mut s = cluster();
    s.nodes
        .push(node("w1", "worker", OLD, NEW, "Degraded", &reason).into());

    // From the API alone: expected size from the rendered config, host force file.
    let f = one(&diagnose(&s, &no_roots(), Some("w1"))).clone();
    assert_eq!(f.title, "config drift: /etc/mco-test");
    assert!(f.cause.contains("Expected 6 bytes"), "{}", f.cause);
    assert_eq!(
        commands(&f),
        vec![
            format!("kubectl get machineconfig {OLD} -o jsonpath='{{.spec.config.storage.files[?(@.path==\"/etc/mco-test\")].contents.source}}'").as_str(),
            "touch /run/machine-config-daemon-force",
        ]
    );

    // With the simulated node's disk: the actual size, and the force file under its root.
    let data = tempfile::tempdir().unwrap();
    let mut roots = BTreeMap::new();
    roots.insert(
        "w1".to_string(),
        sim_root(data.path(), "w1", b"tampered with!\n"),
    );
    let f = one(&diagnose(&s, &roots, None)).clone();
    assert!(
        f.cause.contains("Expected 6 bytes, found 15 bytes."),
        "{}",
        f.cause
    );
    assert_eq!(
        f.fixes[1].command,
        format!(
            "touch {}/nodes/w1/run/machine-config-daemon-force",
            data.path().display()
        )
    );
}

#[test]
fn drain_blocked_by_pdb() {
    let mut s = cluster();
    s.nodes.push(
        cordon(
            node("w1", "worker", OLD, NEW, "Working", ""),
            &format!("drain-{NEW}"),
            &format!("uncordon-{OLD}"),
        )
        .into(),
    );
    s.mcns.push(mcn("w1", "worker", OLD, NEW, &[
        ("UpdatePrepared", "True", "", 9000),
        ("Drained", "Unknown", &format!("Draining node. The drain will not be complete until desired drainer drain-{NEW} matches current drainer uncordon-{OLD}. Blocked by: pod default/web-1 (PodDisruptionBudget default/web-pdb: Cannot evict pod as it would violate the pod's disruption budget.); pod default/web-2 (PodDisruptionBudget default/web-pdb: Cannot evict pod as it would violate the pod's disruption budget.)"), 9400),
    ]).into());
    s.pods.push(pod("default", "web-1", "w1", "web"));
    s.pods.push(pod("default", "web-2", "w1", "web"));
    s.pdbs.push(pdb("default", "web-pdb", "web", 0).into());
    let findings = diagnose(&s, &no_roots(), None);
    let f = one(&findings);
    assert_eq!(f.subject, "node w1");
    assert_eq!(f.title, "drain blocked by a PodDisruptionBudget");
    assert!(
        f.cause.contains("cannot evict pod default/web-1 (PDB default/web-pdb), pod default/web-2 (PDB default/web-pdb)"),
        "{}",
        f.cause
    );
    assert!(
        f.cause.contains("PodDisruptionBudget default/web-pdb (minAvailable 2) allows 0 disruptions: 2 of 3 pods healthy, 2 required."),
        "{}",
        f.cause
    );
    assert!(f.cause.contains("Blocked for 10m00s."), "{}", f.cause);
    assert_eq!(
        commands(f),
        vec![
            "kubectl get pdb -n default web-pdb",
            "kubectl get pods -n default -o wide"
        ]
    );
}

#[test]
fn unreconcilable_names_the_machine_config_and_field() {
    let reason =
        format!("can't reconcile config {OLD} with {NEW}: ignition disks section contains changes");
    let mut s = cluster();
    s.pools[0] = with_sources(
        pool("worker", NEW, 2, 1),
        &["00-worker", "50-worker-disks", "99-worker-ssh"],
        &["00-worker", "99-worker-ssh"],
    )
    .into();
    s.machine_configs.push(mc(
        "00-worker",
        json!({"config": {"ignition": {"version": "3.4.0"}}}),
    ));
    s.machine_configs.push(mc(
        "50-worker-disks",
        json!({"config": {"ignition": {"version": "3.4.0"},
        "storage": {"disks": [{"device": "/dev/sdb", "wipeTable": true}]}}}),
    ));
    s.machine_configs.push(mc("99-worker-ssh", json!({})));
    s.nodes
        .push(node("w1", "worker", OLD, NEW, "Unreconcilable", &reason).into());
    let f = one(&diagnose(&s, &no_roots(), Some("w1"))).clone();
    assert_eq!(f.title, "unreconcilable change");
    assert!(
        f.cause.contains("changes spec.config.storage.disks"),
        "{}",
        f.cause
    );
    assert!(
        f.cause
            .contains("Introduced by MachineConfig 50-worker-disks."),
        "{}",
        f.cause
    );
    assert_eq!(
        commands(&f),
        vec![
            "kubectl edit machineconfig 50-worker-disks   # or: kubectl delete machineconfig 50-worker-disks"
        ]
    );
    assert_eq!(
        doctor::unreconcilable_field(
            "detected change to FIPS flag; refusing to modify FIPS on a running cluster"
        )
        .as_deref(),
        Some("spec.fips")
    );
}

#[test]
fn node_in_two_custom_pools() {
    let mut s = cluster();
    s.pools.push(pool("infra", "rendered-infra-1", 0, 0).into());
    s.pools.push(pool("gpu", "rendered-gpu-1", 0, 0).into());
    s.nodes.push(
        label(
            node("w2", "infra", OLD, OLD, "Done", ""),
            "node-role.kubernetes.io/gpu",
        )
        .into(),
    );
    let f = one(&diagnose(&s, &no_roots(), Some("w2"))).clone();
    assert_eq!(f.title, "in more than one custom pool");
    assert!(
        f.cause.contains("custom pools infra, gpu") || f.cause.contains("custom pools gpu, infra"),
        "{}",
        f.cause
    );
    let cmds = commands(&f);
    assert!(
        cmds.contains(&"kubectl label node w2 node-role.kubernetes.io/gpu-"),
        "{cmds:?}"
    );
    assert!(
        cmds.contains(&"kubectl label node w2 node-role.kubernetes.io/infra-"),
        "{cmds:?}"
    );
}

#[test]
fn paused_pool_with_pending_update() {
    let mut s = cluster();
    Arc::make_mut(&mut s.pools[0]).spec.paused = true;
    let f = one(&diagnose(&s, &no_roots(), None)).clone();
    assert_eq!(f.subject, "pool worker");
    assert_eq!(f.title, "paused with a pending update");
    assert!(f.cause.contains(&format!("rendered {NEW}")), "{}", f.cause);
    assert_eq!(
        commands(&f),
        vec![r#"kubectl patch mcp worker --type merge -p '{"spec":{"paused":false}}'"#]
    );
    // A paused pool with nothing pending is fine.
    s.pools[0] = pool("worker", NEW, 2, 2).into();
    Arc::make_mut(&mut s.pools[0])
        .status
        .as_mut()
        .unwrap()
        .configuration
        .as_mut()
        .unwrap()
        .name = NEW.into();
    Arc::make_mut(&mut s.pools[0]).spec.paused = true;
    assert!(diagnose(&s, &no_roots(), None).is_empty());
}

#[test]
fn missing_rendered_config() {
    let gone = "rendered-worker-99999999999999999999999999999999";
    let reason = format!("machineconfig.machineconfiguration.openshift.io \"{gone}\" not found");
    assert_eq!(
        classify(&reason, false),
        Cause::MissingConfig { name: gone.into() }
    );
    let mut s = cluster();
    s.nodes
        .push(node("w1", "worker", gone, gone, "Degraded", &reason).into());
    let f = one(&diagnose(&s, &no_roots(), Some("w1"))).clone();
    assert_eq!(f.title, "missing rendered config");
    assert!(f.cause.contains(gone), "{}", f.cause);
    assert_eq!(
        commands(&f),
        vec![
            format!("kubectl annotate node w1 --overwrite machineconfiguration.openshift.io/currentConfig={NEW} machineconfiguration.openshift.io/desiredConfig={NEW}").as_str(),
            "touch /run/machine-config-daemon-force",
        ]
    );
    // Also found when the node is not (yet) degraded.
    Arc::make_mut(s.nodes.last_mut().unwrap())
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(
            "machineconfiguration.openshift.io/state".into(),
            "Done".into(),
        );
    Arc::make_mut(s.nodes.last_mut().unwrap())
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(
            "machineconfiguration.openshift.io/reason".into(),
            String::new(),
        );
    assert_eq!(
        one(&diagnose(&s, &no_roots(), Some("w1"))).title,
        "missing rendered config"
    );
}

#[test]
fn stuck_in_a_phase_and_render_failure() {
    let mut s = cluster();
    s.nodes
        .push(node("w1", "worker", OLD, NEW, "Working", "").into());
    s.mcns.push(
        mcn(
            "w1",
            "worker",
            OLD,
            NEW,
            &[
                ("UpdatePrepared", "True", "", 1000),
                (
                    "AppliedFilesAndOS",
                    "Unknown",
                    "Applying files and new OS config to node.",
                    1000,
                ),
            ],
        )
        .into(),
    );
    s.pools[0] = pool_condition(
        (*s.pools[0]).clone(),
        "RenderDegraded",
        "True",
        "Failed to render configuration for pool worker: parsing Ignition config failed: unknown version",
    ).into();
    let findings = diagnose(&s, &no_roots(), None);
    assert_eq!(findings.len(), 2, "{findings:#?}");
    assert_eq!(findings[0].title, "cannot render its configuration");
    assert_eq!(findings[1].title, "stuck in AppliedFilesAndOS");
    assert!(
        findings[1].cause.contains("for 2h30m"),
        "{}",
        findings[1].cause
    );
    assert_eq!(
        commands(&findings[1]),
        vec!["kubectl describe machineconfignode w1"]
    );
}

#[test]
fn unknown_node() {
    let s = cluster();
    let f = one(&diagnose(&s, &no_roots(), Some("nope"))).clone();
    assert_eq!(f.title, "no such node");
}

#[test]
fn seed000_on_a_simulated_node_gives_commands_for_its_root() {
    let data = tempfile::tempdir().unwrap();
    sim_root(data.path(), "m0", b"hello\n");
    let roots = mco_cli::client::gather_sim_roots(data.path(), &["m0".into(), "absent".into()]);
    assert_eq!(roots.keys().collect::<Vec<_>>(), vec!["m0"]);
    let mut s = cluster();
    s.nodes[1] = node("m0", "master", MASTER, MASTER, "Degraded", SEED000_REASON).into();
    let f = one(&diagnose(&s, &roots, Some("m0"))).clone();
    let r = std::fs::canonicalize(data.path().join("nodes/m0")).unwrap();
    let r = r.display();
    assert!(
        f.cause.contains("On disk: booted deployment `x:x`"),
        "{}",
        f.cause
    );
    assert_eq!(
        commands(&f),
        vec![
            format!("touch {r}/run/machine-config-daemon-force"),
            format!(
                "kubectl get machineconfig {MASTER} -o json > {r}/etc/ignition-machine-config-encapsulated.json && mco daemon firstboot-complete-machineconfig --root {r} --host sim"
            ),
        ]
    );
}

#[test]
fn disk_findings_do_not_repeat_what_the_api_explained() {
    let data = tempfile::tempdir().unwrap();
    let facts = sim_root(data.path(), "w1", b"tampered with!\n");
    let reason = format!(
        "unexpected on-disk state validating against {OLD}: content mismatch for file \"/etc/mco-test\""
    );
    let mut s = cluster();
    s.nodes
        .push(node("w1", "worker", OLD, NEW, "Degraded", &reason).into());
    let mut roots = BTreeMap::new();
    roots.insert("w1".to_string(), facts.clone());
    let mut findings = diagnose(&s, &roots, Some("w1"));
    let local = local::diagnose(&facts);
    assert_eq!(local.len(), 1, "{local:#?}");
    assert_eq!(
        local[0].title,
        "content mismatch for file \"/etc/mco-test\""
    );
    doctor::merge_local(&mut findings, local);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].title, "config drift: /etc/mco-test");

    // The never-adopted OS from both sides is one problem; anything else is added.
    let api = Finding::new(
        "node w1",
        "OS image never adopted (first boot skipped the OS)",
        "",
        vec![],
    );
    let disk = Finding::new(
        "host /",
        "first boot never adopted the OS image",
        "",
        vec![],
    );
    let other = Finding::new("host /", "first boot not completed", "", vec![]);
    let mut findings = vec![api];
    doctor::merge_local(&mut findings, vec![disk, other]);
    assert_eq!(findings.len(), 2);
    assert_eq!(findings[1].title, "first boot not completed");
}

/// A pool listing the kube-apiserver CA `subject`, expiring `secs` after the snapshot (taken at
/// 10,000 s).
fn with_cert(
    mut p: mco_api::MachineConfigPool,
    subject: &str,
    secs: i64,
) -> mco_api::MachineConfigPool {
    p.status
        .as_mut()
        .unwrap()
        .cert_expirys
        .push(mco_api::pool::CertExpiry {
            bundle: "KubeAPIServerServingCAData".into(),
            subject: subject.into(),
            expiry: Some(ts(10_000 + secs)),
        });
    p
}

#[test]
fn a_ca_expiring_within_30_days_is_named_once_with_its_bundle_subject_and_expiry() {
    const DAY: i64 = 24 * 3600;
    let mut s = cluster();
    // Listed by both pools, as the controller lists it; a later CA beside it is fine.
    s.pools[0] = with_cert(
        (*s.pools[0]).clone(),
        "CN=kube-apiserver-lb-signer,OU=openshift",
        30 * DAY,
    )
    .into();
    s.pools[0] = with_cert((*s.pools[0]).clone(), "CN=next-signer", 30 * DAY + 1).into();
    s.pools[1] = with_cert(
        (*s.pools[1]).clone(),
        "CN=kube-apiserver-lb-signer,OU=openshift",
        30 * DAY,
    )
    .into();
    let findings = diagnose(&s, &no_roots(), None);
    let f = one(&findings);
    assert_eq!(f.subject, "pools worker, master");
    assert_eq!(f.title, "CA certificate expires soon");
    let expiry = ts(10_000 + 30 * DAY);
    assert!(
        f.cause.starts_with(&format!(
            "The CA CN=kube-apiserver-lb-signer,OU=openshift in bundle KubeAPIServerServingCAData expires at {expiry}, in "
        )),
        "{}",
        f.cause
    );
    assert!(commands(f)[0].starts_with("kubectl get controllerconfig machine-config-controller"));
    // Asking about one node does not repeat cluster-wide findings.
    assert!(diagnose(&s, &no_roots(), Some("w0")).is_empty());
}

#[test]
fn an_expired_ca_is_reported_as_expired() {
    let mut s = cluster();
    s.pools[0] = with_cert((*s.pools[0]).clone(), "CN=old", -60).into();
    let findings = diagnose(&s, &no_roots(), None);
    let f = one(&findings);
    assert_eq!(
        (f.subject.as_str(), f.title.as_str()),
        ("pool worker", "CA certificate expired")
    );
    assert!(
        f.cause
            .contains(&format!("expired at {}, 1m00s ago", ts(10_000 - 60))),
        "{}",
        f.cause
    );
}

#[test]
fn refused_inputs_name_the_object_the_message_and_the_edit() {
    let cc: mco_api::ControllerConfig = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "ControllerConfig",
        "metadata": {"name": "machine-config-controller", "generation": 3},
        "spec": {},
        "status": {"observedGeneration": 3, "conditions": [
            {"type": "TemplateControllerFailing", "status": "True",
             "message": "failed to syncing towards (3) generation using controller version 0.1.0: spec.clusterDNSIP: \"dns.example.com\" is not an IP address"},
        ]},
    }))
    .unwrap();
    let generator = |kind: &str, name: &str, generation: i64, observed: i64, type_: &str| {
        json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": kind,
            "metadata": {"name": name, "generation": generation},
            "spec": {},
            "status": {"observedGeneration": observed, "conditions": [
                {"type": type_, "status": "True", "message": format!("Error: {name} is wrong")},
            ]},
        })
    };
    let kcs: Vec<mco_api::KubeletConfig> = [
        generator("KubeletConfig", "bad-cgroups", 1, 1, "Failure"),
        // A newer spec the controller has not looked at yet: not reported.
        generator("KubeletConfig", "being-fixed", 2, 1, "Failure"),
        generator("KubeletConfig", "fine", 1, 1, "Success"),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let crcs: Vec<mco_api::ContainerRuntimeConfig> = vec![
        serde_json::from_value(generator(
            "ContainerRuntimeConfig",
            "bad-pids",
            4,
            4,
            "Failure",
        ))
        .unwrap(),
    ];

    let found = doctor::refused_inputs(Some(&cc), &kcs, &crcs);
    let subjects: Vec<&str> = found.iter().map(|f| f.subject.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "controllerconfig machine-config-controller",
            "kubeletconfig bad-cgroups",
            "containerruntimeconfig bad-pids"
        ]
    );
    assert_eq!(found[0].title, "ControllerConfig refused");
    assert!(
        found[0]
            .cause
            .contains("spec.clusterDNSIP: \"dns.example.com\" is not an IP address"),
        "{}",
        found[0].cause
    );
    assert_eq!(
        commands(&found[0]),
        ["kubectl edit controllerconfig machine-config-controller"]
    );
    assert_eq!(found[1].title, "KubeletConfig refused");
    assert!(
        found[1].cause.starts_with("Error: bad-cgroups is wrong."),
        "{}",
        found[1].cause
    );
    assert_eq!(
        commands(&found[1]),
        [
            "kubectl edit kubeletconfig bad-cgroups",
            "kubectl delete kubeletconfig bad-cgroups"
        ]
    );
    assert_eq!(
        commands(&found[2]),
        [
            "kubectl edit containerruntimeconfig bad-pids",
            "kubectl delete containerruntimeconfig bad-pids"
        ]
    );

    // Nothing refused, nothing reported.
    assert!(doctor::refused_inputs(None, &kcs[2..], &[]).is_empty());
}

#[test]
fn a_refused_registry_input_names_the_object_the_message_and_the_edit() {
    let mut inputs = mco_cli::client::RegistryInputs::default();
    assert!(
        doctor::refused_registries(&inputs.as_inputs()).is_none(),
        "no inputs"
    );
    inputs.idms = vec![serde_json::from_value(json!({
        "apiVersion": "config.openshift.io/v1", "kind": "ImageDigestMirrorSet",
        "metadata": {"name": "release"},
        "spec": {"imageDigestMirrors": [{"source": "quay.io/ocp", "mirrors": ["mirror.example.net/ocp"]}]},
    }))
    .unwrap()];
    assert!(
        doctor::refused_registries(&inputs.as_inputs()).is_none(),
        "a good mirror set"
    );
    inputs.ips = vec![
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ImagePolicy",
            "metadata": {"name": "apps", "namespace": "team-a"},
            "spec": {"scopes": ["quay.io/app:v1"], "policy": {"rootOfTrust": {
                "policyType": "PublicKey", "publicKey": {"keyData": "a2V5"}}}},
        }))
        .unwrap(),
    ];
    let found = doctor::refused_registries(&inputs.as_inputs()).unwrap();
    let text = doctor::render(&[found], None);
    for want in [
        "imagepolicy apps -n team-a",
        "ImagePolicy refused",
        "spec.scopes[0]: invalid image scope \"quay.io/app:v1\": a scope can't have a tag or digest",
        "kubectl edit imagepolicy apps -n team-a",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
}

#[test]
fn refused_cluster_settings_name_the_object_the_message_and_the_edit() {
    use mco_cli::client::ClusterSettings;
    let mut settings = ClusterSettings::default();
    assert!(doctor::refused_cluster_settings(&settings, &[]).is_empty());
    settings.node = Some(
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Node",
            "metadata": {"name": "cluster"},
            "spec": {"workerLatencyProfile": "LowUpdateSlowReaction"},
        }))
        .unwrap(),
    );
    // A first profile goes; from the workers' Default config it is one step too far.
    assert!(doctor::refused_cluster_settings(&settings, &[]).is_empty());
    let workers97 = mco_generate::machine_config(
        "97-worker-generated-kubelet",
        "worker",
        "1.0.0",
        vec![mco_generate::file(
            "/etc/kubernetes/kubelet.conf",
            "nodeStatusUpdateFrequency: 10s\n",
        )],
    );
    settings.feature_gate = Some(
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "FeatureGate",
            "metadata": {"name": "cluster"}, "spec": {},
            "status": {"featureGates": [{"version": "4.20.1", "enabled": [], "disabled": []}]},
        }))
        .unwrap(),
    );
    settings.cluster_version = Some(
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
            "metadata": {"name": "version"}, "spec": {},
            "status": {"desired": {"version": "4.21.0"}},
        }))
        .unwrap(),
    );
    let found = doctor::refused_cluster_settings(&settings, &[workers97]);
    let text = doctor::render(&found, None);
    for want in [
        "featuregate cluster",
        "FeatureGate refused",
        "status.featureGates has no entry for version \"4.21.0\"",
        "nodes.config.openshift.io cluster",
        "Node settings refused",
        "transition not allowed from old WorkerLatencyProfile: \"Default\" to new WorkerLatencyProfile: \"LowUpdateSlowReaction\"",
        "kubectl edit nodes.config.openshift.io cluster",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
}

#[test]
fn a_blocked_payload_registry_is_named_with_upstreams_message_and_both_fixes() {
    let release = format!(
        "quay.io/openshift-release-dev/ocp-release@sha256:{}",
        "a".repeat(64)
    );
    let mut inputs = mco_cli::client::RegistryInputs {
        release_image: release,
        ..Default::default()
    };
    inputs.image = Some(
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Image",
            "metadata": {"name": "cluster"},
            "spec": {"registrySources": {"blockedRegistries": ["quay.io", "bad.example.com"]}},
        }))
        .unwrap(),
    );
    let found = doctor::registries(&inputs);
    let text = doctor::render(&found, None);
    assert_eq!(found.len(), 1, "{text}");
    for want in [
        "images.config.openshift.io cluster",
        "error adding [\"quay.io\"] to blocked registries, cannot block the repository being used by the payload",
        "remove it from spec.registrySources.blockedRegistries",
        "kubectl edit images.config.openshift.io cluster",
        "mirror the payload with an ImageDigestMirrorSet",
        "source quay.io/openshift-release-dev/ocp-release and a mirror not itself blocked",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }

    // Mirrored, the payload's repository stays blocked: nothing dropped, nothing said.
    inputs.idms = vec![
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ImageDigestMirrorSet",
            "metadata": {"name": "release"},
            "spec": {"imageDigestMirrors": [{
                "source": "quay.io/openshift-release-dev/ocp-release",
                "mirrors": ["mirror.example.net/ocp/release"]}]},
        }))
        .unwrap(),
    ];
    assert!(doctor::registries(&inputs).is_empty());
    // Without a payload nothing is guarded.
    inputs.idms.clear();
    inputs.release_image.clear();
    assert!(doctor::registries(&inputs).is_empty());
}

#[test]
fn a_v1alpha1_image_policy_v1_refuses_is_named_as_the_controller_names_it() {
    let inputs = mco_cli::client::RegistryInputs {
        unconverted: Some(mco_generate::registries::Refused {
            kind: "ClusterImagePolicy",
            name: "short".into(),
            message: "spec.policy.rootOfTrust.publicKey.keyData: should be at least 68 chars long in config.openshift.io/v1".into(),
        }),
        ..Default::default()
    };
    let found = doctor::registries(&inputs);
    let text = doctor::render(&found, None);
    assert_eq!(found.len(), 1, "{text}");
    for want in [
        "clusterimagepolicy short",
        "ClusterImagePolicy refused",
        "spec.policy.rootOfTrust.publicKey.keyData: should be at least 68 chars long in config.openshift.io/v1",
        "No pool's registries config changes until it is fixed",
        "kubectl edit clusterimagepolicy short",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
}
