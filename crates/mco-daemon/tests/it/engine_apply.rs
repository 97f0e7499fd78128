//! The update engine over a simulated host: files, units, SSH, kernel arguments, OS, rollback.

use crate::support;

use mco_daemon::engine::image_mode;
use mco_daemon::engine::{
    Phase, RecordingReporter, ReportError, Reporter, UpdateOptions, UpdateOutcome,
};
use mco_daemon::host::fs::running_as_root;
use mco_daemon::host::ostree::{Origin, OsUpdater};
use mco_daemon::host::reboot::{SimRebooter, complete_sim_reboot};
use mco_daemon::host::{paths, users};
use mco_render::actions::PostConfigAction;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{Node, URL_122, file, ign, mc};

fn update(
    node: &Node,
    old: &mco_api::MachineConfig,
    new: &mco_api::MachineConfig,
) -> (UpdateOutcome, RecordingReporter) {
    let mut r = RecordingReporter::default();
    let out = node
        .engine()
        .update(old, new, UpdateOptions::default(), &mut r)
        .unwrap();
    (out, r)
}

/// Upstream TestDontDeleteRPMFiles plus modes, owners and backups.
#[test]
fn files_modes_owners_backups_and_restore() {
    let node = Node::new(false);
    node.write("/etc/motd", "shipped with the OS\n");
    let empty = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut owned = file("/etc/owned/secret", "s3cret", 0o600);
    owned["user"] = json!({"name": "core"});
    owned["group"] = json!({"name": "wheel"});
    let new = mc(
        "rendered-worker-1",
        "",
        ign(
            json!([file("/etc/motd", "managed by mco\n", 0o644), owned]),
            json!([]),
        ),
    );
    let (out, r) = update(&node, &empty, &new);
    assert_eq!(out, UpdateOutcome::Rebooting);
    assert_eq!(r.drains, vec!["rendered-worker-1".to_string()]);
    assert!(SimRebooter::pending(&node.fs).unwrap().is_some());
    assert_eq!(node.read("/etc/motd").unwrap(), "managed by mco\n");
    assert_eq!(node.read("/etc/owned/secret").unwrap(), "s3cret");
    assert_eq!(node.mode("/etc/owned/secret"), 0o600);
    if running_as_root() {
        let st = node.fs.stat("/etc/owned/secret").unwrap().unwrap();
        assert_eq!((st.uid, st.gid), (1000, 10));
    }
    assert_eq!(
        node.read("/etc/machine-config-daemon/orig/etc/motd.mcdorig")
            .unwrap(),
        "shipped with the OS\n"
    );
    assert!(
        node.fs
            .exists("/etc/machine-config-daemon/noorig/etc/owned/secret.mcdnoorig")
            .unwrap()
    );
    let on_disk = node.engine().on_disk_config().unwrap().unwrap();
    assert_eq!(on_disk.metadata.name.as_deref(), Some("rendered-worker-1"));
    node.engine().validate(&new).unwrap();

    // Deleting the MC: the OS file comes back, the created one goes.
    let back = mc("rendered-worker-2", "", ign(json!([]), json!([])));
    update(&node, &new, &back);
    assert_eq!(node.read("/etc/motd").unwrap(), "shipped with the OS\n");
    assert!(!node.fs.exists("/etc/owned/secret").unwrap());
    assert!(
        !node
            .fs
            .exists("/etc/machine-config-daemon/orig/etc/motd.mcdorig")
            .unwrap()
    );
}

/// Upstream TestIgn3Cfg: seven unit variants, a file and an SSH key.
#[test]
fn ign3_units_all_variants() {
    let node = Node::new(false);
    let svc = |d: &str| {
        format!(
            "[Unit]\nDescription={d}\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
        )
    };
    let units = json!([
        {"name": "enabled-with-contents.service", "enabled": true, "contents": svc("a")},
        {"name": "disabled-with-contents.service", "enabled": false, "contents": svc("b")},
        {"name": "contents-only.service", "contents": svc("c")},
        {"name": "enabled-no-contents.service", "enabled": true},
        {"name": "dropin-only.service", "dropins": [{"name": "10-a.conf", "contents": "[Service]\nEnvironment=A=1\n"}]},
        {"name": "empty-dropin.service", "contents": svc("e"), "dropins": [{"name": "20-empty.conf"}]},
        {"name": "masked.service", "mask": true},
    ]);
    let mut cfg = ign(json!([file("/etc/testfileconfig", "test", 0o644)]), units);
    cfg["ignition"]["version"] = json!("3.2.0");
    cfg["passwd"] = json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-rsa AAAAtest test@example"]}]});
    let empty = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let new = mc("rendered-worker-1", "", cfg);
    update(&node, &empty, &new);

    let e = node.engine();
    let sd = &e.host.systemd;
    let unit = |n: &str| format!("/etc/systemd/system/{n}");
    assert!(node.read(&unit("enabled-with-contents.service")).is_some());
    assert!(sd.is_enabled("enabled-with-contents.service").unwrap());
    assert!(node.read(&unit("disabled-with-contents.service")).is_some());
    assert!(!sd.is_enabled("disabled-with-contents.service").unwrap());
    assert!(node.read(&unit("contents-only.service")).is_some());
    assert!(
        !node
            .fs
            .exists(&unit("enabled-no-contents.service"))
            .unwrap()
    );
    assert!(!node.fs.exists(&unit("dropin-only.service")).unwrap());
    assert_eq!(
        node.read(&unit("dropin-only.service.d/10-a.conf")).unwrap(),
        "[Service]\nEnvironment=A=1\n"
    );
    assert!(node.read(&unit("empty-dropin.service")).is_some());
    assert!(
        !node
            .fs
            .exists(&unit("empty-dropin.service.d/20-empty.conf"))
            .unwrap()
    );
    assert_eq!(
        node.fs.read_link(&unit("masked.service")).unwrap().unwrap(),
        std::path::PathBuf::from("/dev/null")
    );
    assert_eq!(node.read("/etc/testfileconfig").unwrap(), "test");
    assert_eq!(
        users::read_core_ssh_keys(&node.fs).unwrap(),
        vec!["ssh-rsa AAAAtest test@example".to_string()]
    );
    e.validate(&new).unwrap();

    // Removing the config removes the units and dropins mco wrote.
    let back = mc("rendered-worker-2", "", ign(json!([]), json!([])));
    update(&node, &new, &back);
    assert!(
        !node
            .fs
            .exists(&unit("enabled-with-contents.service"))
            .unwrap()
    );
    assert!(!sd.is_enabled("enabled-with-contents.service").unwrap());
    assert!(
        !node
            .fs
            .exists(&unit("dropin-only.service.d/10-a.conf"))
            .unwrap()
    );
    assert!(!node.fs.exists(&unit("masked.service")).unwrap());
}

/// Upstream TestNoReboot: SSH keys and password hash apply without a reboot.
#[test]
fn ssh_keys_and_password_without_reboot() {
    let node = Node::new(true);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut cfg = ign(json!([]), json!([]));
    cfg["passwd"] = json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAkey"], "passwordHash": "$6$abc$def"}]});
    let new = mc("rendered-worker-1", "", cfg);
    let (out, r) = update(&node, &old, &new);
    assert_eq!(
        out,
        UpdateOutcome::Rebootless {
            actions: vec![PostConfigAction::None]
        }
    );
    assert!(r.drains.is_empty());
    assert!(r.phases.contains(&Phase::DrainNotRequired));
    assert!(SimRebooter::pending(&node.fs).unwrap().is_none());
    assert_eq!(
        node.read(paths::CORE_SSH_KEYS).unwrap(),
        "ssh-ed25519 AAAAkey\n"
    );
    assert_eq!(node.mode(paths::CORE_SSH_KEYS), 0o600);
    assert_eq!(node.mode(paths::CORE_SSH_KEYS_DIR), 0o700);
    assert_eq!(node.mode(paths::CORE_SSH_DIR), 0o700);
    assert_eq!(
        users::password_hash(&node.fs, "core").unwrap(),
        "$6$abc$def"
    );
    let applied = r
        .phases
        .iter()
        .find_map(|p| match p {
            Phase::Applied { message, .. } => Some(message.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        applied,
        "Applied files and new OS config to node. OS did not need an update. SSH Keys did need an update"
    );

    let (out, _) = update(&node, &new, &old);
    assert!(matches!(out, UpdateOutcome::Rebootless { .. }));
    assert_eq!(
        node.read(paths::CORE_SSH_KEYS).unwrap(),
        "",
        "file stays, key goes"
    );
    assert_eq!(
        users::password_hash(&node.fs, "core").unwrap(),
        users::LOCKED_PASSWORD_HASH,
        "a removed hash locks the password, never leaves it empty"
    );
}

/// Upstream TestKernelArguments, including `bar="hello world"` as one argument.
#[test]
fn kernel_arguments_applied_and_removed() {
    let node = Node::new(true);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut new = mc("rendered-worker-1", "", ign(json!([]), json!([])));
    new.spec.kernel_arguments = Some(vec![
        "nosmt".into(),
        "foo=bar".into(),
        "foo=baz".into(),
        " baz=test bar=\"hello world\"".into(),
    ]);
    let (out, _) = update(&node, &old, &new);
    assert_eq!(out, UpdateOutcome::Rebooting);
    let e = node.engine();
    let kargs = e.host.os.kargs().unwrap();
    for k in [
        "nosmt",
        "foo=bar",
        "foo=baz",
        "baz=test",
        "bar=\"hello world\"",
    ] {
        assert!(kargs.contains(&k.to_string()), "{k} missing from {kargs:?}");
    }
    assert!(kargs.contains(&"rw".to_string()), "existing arguments kept");
    node.sim_ostree().finalize_reboot().unwrap();
    assert!(
        node.sim_ostree()
            .booted_kargs()
            .unwrap()
            .contains(&"bar=\"hello world\"".to_string())
    );

    // A missing argument is upstream's validation error.
    node.sim_ostree()
        .set_kargs(&["nosmt".to_string()], &[])
        .unwrap();
    let err = e.validate(&new).unwrap_err().to_string();
    assert_eq!(
        err,
        "unexpected on-disk state validating against rendered-worker-1: missing expected kernel arguments: [nosmt]"
    );
    node.sim_ostree().cleanup_pending().unwrap();

    let back = mc("rendered-worker-2", "", ign(json!([]), json!([])));
    update(&node, &new, &back);
    let kargs = e.host.os.kargs().unwrap();
    assert_eq!(kargs, vec!["rw".to_string(), "root=UUID=1".to_string()]);
}

/// A never-adopted or pivot-era deployment rebases with the legacy pivot origin; a
/// container-era one with a container reference.
#[test]
fn os_rebase_pivot_and_container() {
    let node = Node::new(true);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let new = mc("rendered-worker-1", URL_122, ign(json!([]), json!([])));
    let (out, r) = update(&node, &old, &new);
    assert_eq!(out, UpdateOutcome::Rebooting);
    assert!(r.phases.iter().any(
        |p| matches!(p, Phase::Applying { message, .. } if message.contains("OS will need an update"))
    ));
    let st = node.engine().host.os.status().unwrap();
    assert_eq!(st.staged.unwrap().origin, Origin::Pivot(URL_122.into()));
    // Upstream's events around the OS part, in its order.
    let reasons: Vec<&str> = r.events.iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons,
        [
            "InClusterUpgrade",
            "OSUpdateStarted",
            "OSUpgradeApplied",
            "OSUpdateStaged"
        ]
    );

    let node = Node::new(true);
    node.sim_ostree()
        .seed_from_json(&support::fixture("rpm-ostree/container-era.json"), &[])
        .unwrap();
    let target = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0000000000000000000000000000000000000000000000000000000000000001";
    let new = mc("rendered-worker-1", target, ign(json!([]), json!([])));
    update(&node, &old, &new);
    let st = node.engine().host.os.status().unwrap();
    assert_eq!(
        st.staged.unwrap().origin,
        Origin::Container(format!("ostree-unverified-registry:{target}"))
    );
}

/// The pull secret the config writes is linked where rpm-ostree reads credentials before the
/// OS is pulled; without the link the rebase does not go ahead.
#[test]
fn os_rebase_links_the_pull_secret_first() {
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let secret = file(paths::KUBELET_AUTH_FILE, r#"{"auths":{}}"#, 0o600);
    let new = mc(
        "rendered-worker-1",
        URL_122,
        ign(json!([secret]), json!([])),
    );

    let node = Node::new(true);
    update(&node, &old, &new);
    assert_eq!(
        node.fs.read_link(paths::OSTREE_AUTH_FILE).unwrap(),
        Some(paths::KUBELET_AUTH_FILE.into())
    );
    assert!(node.engine().host.os.status().unwrap().staged.is_some());

    let node = Node::new(true);
    node.write("/run/ostree", "not a directory");
    let err = node
        .engine()
        .update(
            &old,
            &new,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "failed to update OS to {URL_122}: linking the pull secret at {}: ",
            paths::OSTREE_AUTH_FILE
        )),
        "{err}"
    );
    assert!(node.engine().host.os.status().unwrap().staged.is_none());
    assert!(!node.fs.exists(paths::KUBELET_AUTH_FILE).unwrap());
}

/// A host without /run/ostree-booted: OS skipped with an explicit message, files still apply.
#[test]
fn non_ostree_host_skips_os_explicitly() {
    let node = Node::new(false);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let new = mc(
        "rendered-worker-1",
        URL_122,
        ign(json!([file("/etc/x", "x", 0o644)]), json!([])),
    );
    let (_, r) = update(&node, &old, &new);
    let applied = r
        .phases
        .iter()
        .find_map(|p| match p {
            Phase::Applied { message, .. } => Some(message.clone()),
            _ => None,
        })
        .unwrap();
    assert!(applied.contains("OS did not need an update"), "{applied}");
    assert!(applied.contains("skipping OS update"), "{applied}");
    // Nothing is said of an OS left alone.
    assert!(r.events.is_empty(), "{:?}", r.events);
    assert_eq!(node.read("/etc/x").unwrap(), "x");
    node.engine().validate(&new).unwrap();
}

/// A crio-reload file change is rebootless and reloads crio.
#[test]
fn rebootless_reload() {
    let node = Node::new(true);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let new = mc(
        "rendered-worker-1",
        "",
        ign(
            json!([file(
                "/etc/containers/registries.d/mirror.yaml",
                "docker: {}",
                0o644
            )]),
            json!([]),
        ),
    );
    let (out, r) = update(&node, &old, &new);
    assert_eq!(
        out,
        UpdateOutcome::Rebootless {
            actions: vec![PostConfigAction::reload("crio.service")]
        }
    );
    assert!(
        node.systemd_log()
            .iter()
            .any(|l| l == "reload crio.service")
    );
    assert!(matches!(
        r.phases.last().unwrap(),
        Phase::PostActionComplete { .. }
    ));
}

/// A failure midway (the OS step) rolls back files, units, SSH keys and the on-disk config.
#[test]
fn failure_midway_rolls_everything_back() {
    let node = Node::new(true);
    node.write("/etc/motd", "os\n");
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    // Establish an on-disk config first.
    update(&node, &old, &old);
    let before_cc = node.read(paths::CURRENT_CONFIG).unwrap();
    let mut cfg = ign(
        json!([
            file("/etc/motd", "mco\n", 0o644),
            file("/etc/new", "n", 0o644)
        ]),
        json!([{"name": "a.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]),
    );
    cfg["passwd"] = json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 K"]}]});
    let new = mc("rendered-worker-1", URL_122, cfg);
    // Break the OS updater: its state disappears.
    node.fs.remove_file(paths::SIM_OSTREE_STATE).unwrap();
    let mut r = RecordingReporter::default();
    let err = node
        .engine()
        .update(&old, &new, UpdateOptions::default(), &mut r)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("failed to update OS to {URL_122}")),
        "{err}"
    );
    assert_eq!(node.read("/etc/motd").unwrap(), "os\n");
    assert!(!node.fs.exists("/etc/new").unwrap());
    assert!(
        !node
            .fs
            .exists("/etc/machine-config-daemon/orig/etc/motd.mcdorig")
            .unwrap()
    );
    assert!(
        !node
            .fs
            .exists("/etc/machine-config-daemon/noorig/etc/new.mcdnoorig")
            .unwrap()
    );
    assert!(!node.fs.exists("/etc/systemd/system/a.service").unwrap());
    assert!(!node.engine().host.systemd.is_enabled("a.service").unwrap());
    assert!(!node.fs.exists(paths::CORE_SSH_KEYS).unwrap());
    assert_eq!(node.read(paths::CURRENT_CONFIG).unwrap(), before_cc);
    assert!(SimRebooter::pending(&node.fs).unwrap().is_none());
    assert!(!r.phases.iter().any(|p| matches!(p, Phase::Applied { .. })));
}

/// An owner that does not exist fails with upstream's message, and nothing stays written.
#[test]
fn unknown_owner_fails_and_rolls_back() {
    let node = Node::new(false);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut bad = file("/etc/b", "b", 0o644);
    bad["user"] = json!({"name": "nosuchuser"});
    let new = mc(
        "rendered-worker-1",
        "",
        ign(json!([file("/etc/a", "a", 0o644), bad]), json!([])),
    );
    let mut r = RecordingReporter::default();
    let err = node
        .engine()
        .update(&old, &new, UpdateOptions::default(), &mut r)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "failed to retrieve UserID for username: nosuchuser");
    assert!(!node.fs.exists("/etc/a").unwrap());
}

/// An unreconcilable change is refused before anything is touched, with upstream's message.
#[test]
fn unreconcilable_is_reported_and_refused() {
    let node = Node::new(false);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut cfg = ign(json!([file("/etc/a", "a", 0o644)]), json!([]));
    cfg["storage"]["directories"] = json!([{"path": "/etc/d"}]);
    let new = mc("rendered-worker-1", "", cfg);
    let mut r = RecordingReporter::default();
    let err = node
        .engine()
        .update(&old, &new, UpdateOptions::default(), &mut r)
        .unwrap_err();
    assert!(err.is_unreconcilable());
    assert!(
        err.to_string()
            .starts_with("can't reconcile config rendered-worker-0 with rendered-worker-1: "),
        "{err}"
    );
    match &r.phases[..] {
        [Phase::PrepareFailed { message }] => assert!(
            message.starts_with("Update Failed compatibility validation. MachineConfigs rendered-worker-0 and rendered-worker-1 are not compatible. Err: "),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!node.fs.exists("/etc/a").unwrap());
}

/// The daemon drains between `prepare_update` and `apply_update`: preparing writes nothing and
/// reports only `Prepared`, and the two parts report what one `update` does.
#[test]
fn an_update_in_two_parts_writes_nothing_before_its_drain_and_reports_as_one() {
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let new = mc(
        "rendered-worker-1",
        "",
        ign(
            json!([file("/etc/split", "after the drain\n", 0o644)]),
            json!([]),
        ),
    );
    let whole_node = Node::new(false);
    let (whole_out, whole) = update(&whole_node, &old, &new);

    let node = Node::new(false);
    let engine = node.engine();
    let mut r = RecordingReporter::default();
    let prepared = engine
        .prepare_update(&old, &new, UpdateOptions::default(), &mut r)
        .unwrap();
    assert!(prepared.drains());
    assert_eq!(prepared.config(), "rendered-worker-1");
    assert!(matches!(
        r.phases.as_slice(),
        [Phase::Prepared { drain: true, .. }]
    ));
    assert!(r.drains.is_empty(), "the caller drains, not the engine");
    assert_eq!(
        node.read("/etc/split"),
        None,
        "nothing is written before the drain"
    );
    assert!(SimRebooter::pending(&node.fs).unwrap().is_none());

    let out = engine.apply_update(prepared, &mut r).unwrap();
    assert_eq!(out, whole_out);
    assert_eq!(
        node.read("/etc/split").as_deref(),
        Some("after the drain\n")
    );
    let names = |phases: &[Phase]| -> Vec<String> {
        phases
            .iter()
            .map(|p| {
                format!("{p:?}")
                    .split([' ', '{', '('])
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(names(&r.phases), names(&whole.phases));
    assert_eq!(whole.drains, vec!["rendered-worker-1".to_string()]);
}

/// What the node is left without is measured against the record the machine was provisioned
/// with, read only when present, a MachineConfig and within its size limit.
#[test]
fn irreconcilable_changes_against_the_provisioning_record() {
    use mco_daemon::engine::MAX_PROVISIONED_BYTES;
    let node = Node::new(true);
    let engine = node.engine();
    let provisioned = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    let mut target = mc("rendered-worker-1", "", ign(json!([]), json!([])));
    target.spec.config.as_mut().unwrap()["storage"]["filesystems"] =
        json!([{"device": "/dev/vdb1", "format": "xfs", "path": "/var/lib/data"}]);

    // No record: a machine no machine config server provisioned reports nothing.
    assert_eq!(engine.irreconcilable_changes(&target), None);

    let record = serde_json::to_string(&provisioned).unwrap();
    node.write(mco_api::paths::PROVISIONED_CONFIG, &record);
    let report = engine.irreconcilable_changes(&target).unwrap();
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].field_path, "spec.config.storage.filesystems");
    assert!(report[0].diff.starts_with("+ [{"), "{}", report[0].diff);
    assert_eq!(engine.irreconcilable_changes(&provisioned), Some(vec![]));

    // At the limit it is read; one byte over, it is not.
    let padded = |len: u64| format!("{record}{}", " ".repeat(len as usize - record.len()));
    node.write(
        mco_api::paths::PROVISIONED_CONFIG,
        &padded(MAX_PROVISIONED_BYTES),
    );
    assert_eq!(
        engine.irreconcilable_changes(&target).map(|r| r.len()),
        Some(1)
    );
    node.write(
        mco_api::paths::PROVISIONED_CONFIG,
        &padded(MAX_PROVISIONED_BYTES + 1),
    );
    assert_eq!(engine.irreconcilable_changes(&target), None);

    // Not a MachineConfig: nothing, rather than a report against nothing.
    node.write(mco_api::paths::PROVISIONED_CONFIG, "{\"spec\": 1}");
    assert_eq!(engine.irreconcilable_changes(&target), None);
}

/// Refuses the Rebooting phase, so an update fails after it has written everything.
struct RefusesReboot;

impl Reporter for RefusesReboot {
    fn report(&mut self, phase: &Phase) -> Result<(), ReportError> {
        match phase {
            Phase::Rebooting { .. } => Err(ReportError::new(std::io::Error::other(
                "the API server is gone",
            ))),
            _ => Ok(()),
        }
    }

    fn drain(&mut self, _: &str) -> Result<(), ReportError> {
        Ok(())
    }
}

const IMAGE_1: &str =
    "registry.example/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";
const IMAGE_2: &str =
    "registry.example/os@sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// An on-cluster image mode update rebases to the image and stores upstream's pair of files:
/// `currentconfig` with the rendered OS image and no annotations, `currentimage` with the
/// image. Read back, the pair is the config as applied; a failure after writing restores both
/// files as they were, an absent `currentimage` included.
#[test]
fn an_image_update_stores_both_files_and_a_failure_restores_them() {
    let node = Node::new(true);
    let rendered = mc("rendered-worker-0", URL_122, ign(json!([]), json!([])));
    let on_image_1 = image_mode::embed(&rendered, IMAGE_1);
    let (out, _) = update(&node, &rendered, &on_image_1);
    assert_eq!(out, UpdateOutcome::Rebooting);
    let staged = node.engine().host.os.status().unwrap().staged.unwrap();
    assert_eq!(staged.os_image_url().as_deref(), Some(IMAGE_1));
    let stored: mco_api::MachineConfig =
        serde_json::from_str(&node.read(paths::CURRENT_CONFIG).unwrap()).unwrap();
    assert_eq!(stored.spec.os_image_url, URL_122);
    assert_eq!(image_mode::image_of(&stored), "");
    assert_eq!(node.read(paths::CURRENT_IMAGE).as_deref(), Some(IMAGE_1));
    complete_sim_reboot(&node.fs).unwrap();
    let e = node.engine();
    let on_disk = e.on_disk_config().unwrap().unwrap();
    assert_eq!(on_disk.spec.os_image_url, IMAGE_1);
    assert_eq!(image_mode::image_of(&on_disk), IMAGE_1);
    e.validate(&on_disk).unwrap();
    let err = e.validate(&rendered).unwrap_err().to_string();
    assert!(
        err.ends_with(&format!(
            "expected target osImageURL {URL_122:?}, have {IMAGE_1:?}"
        )),
        "{err}"
    );

    // Failing after the writes: another image, then no image at all.
    let before = node.read(paths::CURRENT_CONFIG).unwrap();
    for target in [image_mode::embed(&rendered, IMAGE_2), rendered.clone()] {
        let err = e
            .update(
                &on_image_1,
                &target,
                UpdateOptions::default(),
                &mut RefusesReboot,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("the API server is gone"), "{err}");
        assert_eq!(node.read(paths::CURRENT_CONFIG).unwrap(), before);
        assert_eq!(node.read(paths::CURRENT_IMAGE).as_deref(), Some(IMAGE_1));
        assert!(e.host.os.status().unwrap().staged.is_none());
    }

    // Leaving image mode: back to the rendered OS image, `currentimage` gone.
    let (out, _) = update(&node, &on_image_1, &rendered);
    assert_eq!(out, UpdateOutcome::Rebooting);
    assert_eq!(node.read(paths::CURRENT_IMAGE), None);
    complete_sim_reboot(&node.fs).unwrap();
    let e = node.engine();
    assert_eq!(
        e.host.os.booted_os_image_url().unwrap().as_deref(),
        Some(URL_122)
    );
    let on_disk = e.on_disk_config().unwrap().unwrap();
    assert_eq!(image_mode::image_of(&on_disk), "");
    e.validate(&on_disk).unwrap();

    // A failed update into image mode leaves no `currentimage` behind.
    e.update(
        &rendered,
        &on_image_1,
        UpdateOptions::default(),
        &mut RefusesReboot,
    )
    .unwrap_err();
    assert_eq!(node.read(paths::CURRENT_IMAGE), None);
}

const EXTENSIONS_IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:e7";

/// A rendered config with `extensions` and the cluster's extensions image.
fn with_extensions(name: &str, extensions: &[&str]) -> mco_api::MachineConfig {
    let mut m = mc(name, "", ign(json!([]), json!([])));
    m.spec.extensions = Some(extensions.iter().map(|e| e.to_string()).collect());
    m.spec.base_os_extensions_container_image = EXTENSIONS_IMAGE.into();
    m
}

/// An ostree-booted simulated node that says it is RHCOS.
fn el_node() -> Node {
    let node = Node::new(true);
    node.write("/etc/os-release", &support::fixture("os-release/rhcos"));
    node
}

fn extensions_log(node: &Node) -> Vec<String> {
    node.read(mco_daemon::host::extensions::SIM_LOG)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// upstream's applyExtensions on RHCOS: the extensions repo is provided for the update and
/// withdrawn after it, `usbguard` is layered in a staged deployment booted at the reboot, the
/// events say so, and removing the extension uninstalls it.
#[test]
fn extensions_are_installed_and_removed_on_an_el_node() {
    let node = el_node();
    let old = with_extensions("rendered-worker-0", &[]);
    let new = with_extensions("rendered-worker-1", &["usbguard"]);
    let (out, r) = update(&node, &old, &new);
    assert_eq!(out, UpdateOutcome::Rebooting);
    let staged = node.engine().host.os.status().unwrap().staged.unwrap();
    assert_eq!(staged.requested_packages, vec!["usbguard"]);
    let events: Vec<(&str, &str)> = r
        .events
        .iter()
        .map(|e| (e.reason, e.message.as_str()))
        .collect();
    assert_eq!(
        &events[..2],
        &[
            ("InClusterUpgrade", "Updating from oscontainer "),
            ("OSUpdateStarted", "Installing extensions"),
        ]
    );
    assert!(r.phases.iter().any(
        |p| matches!(p, Phase::Applied { message, .. } if message.contains("OS did need an update"))
    ));
    // Provided from the image, then withdrawn: neither the repo nor the content is left.
    let log = extensions_log(&node);
    assert_eq!(log.len(), 2, "{log:?}");
    let dir = log[0]
        .strip_prefix(&format!("provide {EXTENSIONS_IMAGE} "))
        .unwrap();
    assert!(dir.starts_with("/run/mco-extensions/os-extensions-content-"));
    assert_eq!(log[1], format!("withdraw {dir}"));
    assert!(
        !node
            .fs
            .exists(mco_daemon::host::extensions::REPO_FILE)
            .unwrap()
    );
    assert!(!node.fs.exists(dir).unwrap());

    // Booted into it, the node's check passes; the extension is in the booted deployment.
    complete_sim_reboot(&node.fs).unwrap();
    let e = node.engine();
    assert_eq!(
        e.host.os.status().unwrap().booted.requested_packages,
        vec!["usbguard"]
    );
    assert_eq!(
        e.boot_check(&new).unwrap(),
        mco_daemon::engine::BootCheck::Valid
    );

    // Removed: uninstalled, other extensions installed in the same transaction.
    let next = with_extensions("rendered-worker-2", &["sysstat"]);
    update(&node, &new, &next);
    let staged = node.engine().host.os.status().unwrap().staged.unwrap();
    assert_eq!(staged.requested_packages, vec!["sysstat"]);
    complete_sim_reboot(&node.fs).unwrap();
    let none = with_extensions("rendered-worker-3", &[]);
    let (_, r) = update(&node, &next, &none);
    let staged = node.engine().host.os.status().unwrap().staged.unwrap();
    assert!(staged.requested_packages.is_empty());
    assert!(
        r.events
            .iter()
            .any(|e| e.reason == "OSUpdateStarted" && e.message == "Installing extensions")
    );
}

/// A node that booted into a config whose extensions are not installed is not Done: the boot
/// check fails in upstream's words; one that has them passes.
#[test]
fn an_el_node_booted_without_its_extensions_fails_its_boot_check() {
    let node = el_node();
    let cfg = with_extensions("rendered-worker-1", &["usbguard", "kerberos"]);
    // The disk matches: the packages are what is missing.
    assert_eq!(
        node.engine().boot_check(&cfg).unwrap(),
        mco_daemon::engine::BootCheck::Valid
    );
    let err = node
        .engine()
        .verify_extensions(&cfg)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "extension package verification failed: extension \"usbguard\" verification failed: no valid package set is fully installed. Tried 1 package set(s), missing packages per set: [[usbguard]]"
    );
    // The same disk on a host that does not install extensions is valid.
    let node = Node::new(true);
    node.engine().verify_extensions(&cfg).unwrap();
}

/// Not an EL host (the seed's UOS): extensions are neither provided nor installed, though the
/// events still name the change, as upstream's do.
#[test]
fn a_non_el_node_installs_no_extensions() {
    let node = Node::new(true);
    let old = with_extensions("rendered-worker-0", &[]);
    let new = with_extensions("rendered-worker-1", &["usbguard"]);
    let (out, r) = update(&node, &old, &new);
    assert_eq!(out, UpdateOutcome::Rebooting);
    let st = node.engine().host.os.status().unwrap();
    assert!(st.staged.is_none(), "{st:?}");
    assert!(extensions_log(&node).is_empty());
    assert!(
        r.events
            .iter()
            .any(|e| e.reason == "OSUpdateStarted" && e.message == "Installing extensions")
    );
}

/// The simulated OS updater with faults: its first `failing_rebases` rebases fail as a pull
/// does (each counted in `rebases`), and with `drops_packages` its `rpm-ostree update` stages a
/// deployment without the packages, as the upstream bug behind `verifyExtensionsStaged`
/// (OCPBUGS-65645) did.
struct Faulty {
    inner: mco_daemon::host::ostree::SimOstree,
    failing_rebases: usize,
    rebases: Arc<AtomicUsize>,
    drops_packages: bool,
}

impl Faulty {
    fn new(node: &Node) -> Faulty {
        Faulty {
            inner: node.sim_ostree(),
            failing_rebases: 0,
            rebases: Arc::default(),
            drops_packages: false,
        }
    }
}

impl OsUpdater for Faulty {
    fn status(&self) -> mco_daemon::error::Result<mco_daemon::host::ostree::OsStatus> {
        self.inner.status()
    }
    fn rebase(
        &self,
        url: &str,
        mode: &mco_daemon::host::ostree::RebaseMode,
    ) -> mco_daemon::error::Result<()> {
        if self.rebases.fetch_add(1, Ordering::SeqCst) < self.failing_rebases {
            return Err(mco_daemon::error::HostError::State(format!(
                "pulling {url}: dial tcp: lookup registry.example: no such host"
            )));
        }
        self.inner.rebase(url, mode)
    }
    fn kargs(&self) -> mco_daemon::error::Result<Vec<String>> {
        self.inner.kargs()
    }
    fn set_kargs(&self, delete: &[String], append: &[String]) -> mco_daemon::error::Result<()> {
        self.inner.set_kargs(delete, append)
    }
    fn set_kernel_type(
        &self,
        kernel: mco_daemon::host::ostree::KernelType,
    ) -> mco_daemon::error::Result<()> {
        self.inner.set_kernel_type(kernel)
    }
    fn update_packages(&self, args: &[String]) -> mco_daemon::error::Result<()> {
        if self.drops_packages {
            // Stages something, but not the packages.
            return self.inner.set_kargs(&[], &["quiet".into()]);
        }
        self.inner.update_packages(args)
    }
    fn cleanup_pending(&self) -> mco_daemon::error::Result<()> {
        self.inner.cleanup_pending()
    }
    fn cleanup_rollback(&self) -> mco_daemon::error::Result<()> {
        self.inner.cleanup_rollback()
    }
}

/// An engine on `node` whose OS updater is `os`, and the waits its retries took.
fn faulty_engine(
    node: &Node,
    os: Faulty,
) -> (mco_daemon::engine::Engine, Arc<Mutex<Vec<Duration>>>) {
    let waits: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut host = mco_daemon::Host::sim(node.dir.path()).unwrap();
    host.os = Box::new(os);
    let recorded = Arc::clone(&waits);
    host.pause = mco_daemon::host::retry::Pause::new(move |d| recorded.lock().unwrap().push(d));
    (mco_daemon::engine::Engine::new(host).unwrap(), waits)
}

/// An update by `engine`, its error as text.
fn update_on(
    engine: &mco_daemon::engine::Engine,
    old: &mco_api::MachineConfig,
    new: &mco_api::MachineConfig,
) -> Result<UpdateOutcome, String> {
    engine
        .update(
            old,
            new,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
        .map_err(|e| e.to_string())
}

/// A pull that fails is tried again after upstream's backoff (10 s, then 20 s), and the update
/// goes on to the reboot.
#[test]
fn a_failed_pull_is_retried_after_upstreams_backoff() {
    let node = Node::new(true);
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    update(&node, &old, &old);
    let new = mc("rendered-worker-1", URL_122, ign(json!([]), json!([])));
    let os = Faulty {
        failing_rebases: 2,
        ..Faulty::new(&node)
    };
    let rebases = Arc::clone(&os.rebases);
    let (engine, waits) = faulty_engine(&node, os);
    let out = update_on(&engine, &old, &new).unwrap();
    assert_eq!(out, UpdateOutcome::Rebooting);
    assert_eq!(rebases.load(Ordering::SeqCst), 3);
    let s = Duration::from_secs;
    assert_eq!(*waits.lock().unwrap(), vec![s(10), s(20)]);
    assert!(node.engine().host.os.status().unwrap().staged.is_some());
}

/// A pull failing at every attempt (four, over 70 s) fails the update in upstream's words with
/// the last attempt's error, and the update is rolled back.
#[test]
fn a_pull_failing_at_every_attempt_fails_the_update() {
    let node = Node::new(true);
    node.write("/etc/motd", "os\n");
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    update(&node, &old, &old);
    let new = mc(
        "rendered-worker-1",
        URL_122,
        ign(json!([file("/etc/motd", "mco\n", 0o644)]), json!([])),
    );
    let os = Faulty {
        failing_rebases: usize::MAX,
        ..Faulty::new(&node)
    };
    let rebases = Arc::clone(&os.rebases);
    let (engine, waits) = faulty_engine(&node, os);
    let err = update_on(&engine, &old, &new).unwrap_err();
    assert_eq!(
        err,
        format!(
            "failed to update OS to {URL_122} after retries: pulling {URL_122}: dial tcp: lookup \
             registry.example: no such host: timed out waiting for the condition"
        )
    );
    assert_eq!(rebases.load(Ordering::SeqCst), 4);
    let s = Duration::from_secs;
    assert_eq!(*waits.lock().unwrap(), vec![s(10), s(20), s(40)]);
    assert_eq!(node.read("/etc/motd").unwrap(), "os\n");
    assert!(node.engine().host.os.status().unwrap().staged.is_none());
}

/// The staged deployment is checked before the reboot: missing packages fail the update in
/// upstream's words, and the rollback drops the staged deployment.
#[test]
fn packages_missing_from_the_staged_deployment_fail_the_update() {
    let node = el_node();
    let os = Faulty {
        drops_packages: true,
        ..Faulty::new(&node)
    };
    let (engine, _) = faulty_engine(&node, os);
    let old = with_extensions("rendered-worker-0", &[]);
    let new = with_extensions("rendered-worker-1", &["kernel-devel"]);
    let err = update_on(&engine, &old, &new).unwrap_err();
    assert_eq!(
        err,
        "failed to update OS to : the following extension packages are missing from the staged deployment: [kernel-devel kernel-headers]"
    );
    assert!(node.engine().host.os.status().unwrap().staged.is_none());
    assert!(
        !node
            .fs
            .exists(mco_daemon::host::extensions::REPO_FILE)
            .unwrap()
    );
}
