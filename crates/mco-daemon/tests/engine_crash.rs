//! Crash safety: the engine killed at every failpoint (a panic stands in for the kill: nothing
//! after it runs, no rollback) and restarted always converges — the node is consistent with its
//! `currentconfig`, and re-running the update completes it. Run with `--features failpoints`.
#![cfg(feature = "failpoints")]

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};

use mco_daemon::engine::image_mode;
use mco_daemon::engine::{BootCheck, RecordingReporter, UpdateOptions, UpdateOutcome};
use mco_daemon::host::reboot::{PendingReboot, SimRebooter, complete_sim_reboot};
use mco_daemon::host::{paths, users};
use serde_json::json;
use support::{Node, file, ign, mc};

const POINTS: &[&str] = &[
    "apply::after-one-file",
    "apply::after-files",
    "apply::after-units",
    "apply::after-stale",
    "apply::after-ssh",
    "apply::after-os",
    "apply::after-currentconfig",
    "engine::after-pending-reboot",
    "engine::before-reboot",
];

fn configs() -> (mco_api::MachineConfig, mco_api::MachineConfig) {
    let svc = "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";
    let old = mc(
        "rendered-worker-0",
        "",
        ign(
            json!([
                file("/etc/old-only", "old", 0o644),
                file("/etc/motd", "old motd\n", 0o644)
            ]),
            json!([{"name": "old.service", "enabled": true, "contents": svc}]),
        ),
    );
    let mut cfg = ign(
        json!([
            file("/etc/motd", "new motd\n", 0o644),
            file("/etc/a", "a", 0o600),
            file("/etc/b", "b", 0o644),
        ]),
        json!([{"name": "new.service", "enabled": true, "contents": svc}]),
    );
    cfg["passwd"] = json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 NEW"]}]});
    let mut new = mc("rendered-worker-1", support::URL_122, cfg);
    new.spec.kernel_arguments = Some(vec!["nosmt".into()]);
    (old, new)
}

/// Updates `node` from `from` to `to`, killed at `point`, and restarts it: what the disk then
/// says it is on, and the start-up check of that. The journal is gone either way.
fn crash_at(
    node: &Node,
    point: &str,
    from: &mco_api::MachineConfig,
    to: &mco_api::MachineConfig,
) -> (mco_api::MachineConfig, BootCheck) {
    let e = node.engine();
    fail::cfg(point, "panic").unwrap();
    let crashed = catch_unwind(AssertUnwindSafe(|| {
        e.update(
            from,
            to,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
    }));
    fail::remove(point);
    assert!(crashed.is_err(), "{point}: the failpoint fired");
    drop(e);
    let e = node.engine();
    let current = e.on_disk_config().unwrap().unwrap();
    let check = e.boot_check(&current).unwrap();
    assert!(
        !node
            .fs
            .exists("/etc/machine-config-daemon/update-journal.jsonl")
            .unwrap(),
        "{point}: the journal is replayed and gone"
    );
    (current, check)
}

/// After [`crash_at`]: an update rolled back (valid on `from`, its staged OS dropped) is run
/// again to its reboot; one past the point of no return (`to` on disk, the reboot owed and
/// not yet requested, as the start-up check says) only requests the reboot.
fn resume(
    node: &Node,
    e: &mco_daemon::engine::Engine,
    point: &str,
    rolled_back: bool,
    check: BootCheck,
    from: &mco_api::MachineConfig,
    to: &mco_api::MachineConfig,
) {
    if rolled_back {
        assert_eq!(check, BootCheck::Valid, "{point}");
        assert!(
            e.host.os.status().unwrap().staged.is_none(),
            "{point}: staged OS dropped"
        );
        let out = e
            .update(
                from,
                to,
                UpdateOptions::default(),
                &mut RecordingReporter::default(),
            )
            .unwrap();
        assert_eq!(out, UpdateOutcome::Rebooting, "{point}");
    } else {
        assert_eq!(check, BootCheck::RebootPending, "{point}");
        assert!(SimRebooter::pending(&node.fs).unwrap().is_none());
        e.host.rebooter.reboot("resumed after a crash").unwrap();
    }
}

#[test]
fn killed_at_any_failpoint_converges() {
    let scenario = fail::FailScenario::setup();
    for point in POINTS {
        let node = Node::new(true);
        node.write("/etc/motd", "shipped\n");
        let (old, new) = configs();
        let e = node.engine();
        let empty = mc("rendered-worker-empty", "", ign(json!([]), json!([])));
        e.update(
            &empty,
            &old,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
        .unwrap();
        complete_sim_reboot(&node.fs).unwrap();
        node.engine().validate(&old).unwrap();

        // Restart: an interrupted update is rolled back from its journal.
        let (current, check) = crash_at(&node, point, &old, &new);
        let e = node.engine();
        let name = current.metadata.name.clone().unwrap();
        let rolled_back = name == "rendered-worker-0";
        if rolled_back {
            // Consistent with the old config, nothing half-applied.
            assert_eq!(node.read("/etc/motd").unwrap(), "old motd\n", "{point}");
            assert!(!node.fs.exists("/etc/a").unwrap(), "{point}");
            assert!(!node.fs.exists(paths::CORE_SSH_KEYS).unwrap(), "{point}");
        } else {
            assert_eq!(name, "rendered-worker-1", "{point}");
        }
        resume(&node, &e, point, rolled_back, check, &old, &new);
        complete_sim_reboot(&node.fs).unwrap();
        let e = node.engine();
        e.validate(&new)
            .unwrap_or_else(|err| panic!("{point}: {err}"));
        assert_eq!(node.read("/etc/motd").unwrap(), "new motd\n");
        assert!(!node.fs.exists("/etc/old-only").unwrap(), "{point}");
        assert_eq!(
            users::read_core_ssh_keys(&node.fs).unwrap(),
            vec!["ssh-ed25519 NEW".to_string()]
        );
        assert!(
            !e.host.systemd.is_enabled("old.service").unwrap(),
            "{point}"
        );
    }
    scenario.teardown();
}

/// A file-only update that needs a reboot stages no OS, so the disk alone looks finished once
/// `currentconfig` is written. Killed before the reboot request, the restarted daemon must
/// still reboot (the boot id recorded with the request is unchanged), and only the next boot
/// completes the update.
#[test]
fn file_only_update_killed_before_reboot_still_reboots() {
    let scenario = fail::FailScenario::setup();
    for point in ["engine::before-reboot", "engine::after-pending-reboot"] {
        let node = Node::new(false);
        let empty = mc("rendered-worker-empty", "", ign(json!([]), json!([])));
        let old = mc(
            "rendered-worker-0",
            "",
            ign(json!([file("/etc/a", "old", 0o644)]), json!([])),
        );
        let new = mc(
            "rendered-worker-1",
            "",
            ign(json!([file("/etc/a", "new", 0o644)]), json!([])),
        );
        let e = node.engine();
        let first = e
            .update(
                &empty,
                &old,
                UpdateOptions::default(),
                &mut RecordingReporter::default(),
            )
            .unwrap();
        assert_eq!(
            first,
            UpdateOutcome::Rebooting,
            "a plain file needs a reboot"
        );
        complete_sim_reboot(&node.fs).unwrap();
        let e = node.engine();
        assert_eq!(e.boot_check(&old).unwrap(), BootCheck::Valid);
        assert!(!e.reboot_owed().unwrap());
        assert_eq!(
            PendingReboot::read(&node.fs).unwrap(),
            None,
            "cleared once rebooted"
        );

        fail::cfg(point, "panic").unwrap();
        let crashed = catch_unwind(AssertUnwindSafe(|| {
            e.update(
                &old,
                &new,
                UpdateOptions::default(),
                &mut RecordingReporter::default(),
            )
        }));
        fail::remove(point);
        assert!(crashed.is_err(), "{point}: the failpoint fired");
        drop(e);

        let e = node.engine();
        let current = e.on_disk_config().unwrap().unwrap();
        let name = current.metadata.name.clone().unwrap();
        if point == "engine::after-pending-reboot" {
            // Before the point of no return: rolled back, record and all.
            assert_eq!(name, "rendered-worker-0", "{point}");
            assert_eq!(node.read("/etc/a").unwrap(), "old");
            assert!(!e.reboot_owed().unwrap(), "{point}");
            assert_eq!(e.boot_check(&current).unwrap(), BootCheck::Valid);
            continue;
        }
        assert_eq!(name, "rendered-worker-1", "{point}");
        e.validate(&current)
            .expect("the disk already matches the new config");
        assert!(SimRebooter::pending(&node.fs).unwrap().is_none());
        assert!(e.reboot_owed().unwrap(), "{point}");
        // Restarting again in the same boot still owes the reboot.
        assert_eq!(e.boot_check(&current).unwrap(), BootCheck::RebootPending);
        let e = node.engine();
        assert_eq!(e.boot_check(&current).unwrap(), BootCheck::RebootPending);

        e.host.rebooter.reboot("resumed after a crash").unwrap();
        complete_sim_reboot(&node.fs).unwrap();
        let e = node.engine();
        assert!(!e.reboot_owed().unwrap());
        assert_eq!(e.boot_check(&current).unwrap(), BootCheck::Valid);
        assert_eq!(PendingReboot::read(&node.fs).unwrap(), None);
    }
    scenario.teardown();
}

/// An on-cluster image mode update (the same config, a new image: an OS rebase and nothing
/// else) killed at every failpoint it passes converges as any update: rolled back to the
/// rendered config's OS image with no `currentimage`, or past the point of no return with the
/// image stored and the reboot owed.
#[test]
fn an_image_update_killed_at_any_failpoint_converges() {
    const IMAGE: &str = "registry.example/os@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let scenario = fail::FailScenario::setup();
    // No file changes, so no file is written one by one.
    for point in POINTS.iter().filter(|p| **p != "apply::after-one-file") {
        let node = Node::new(true);
        let empty = mc("rendered-worker-empty", "", ign(json!([]), json!([])));
        let rendered = mc(
            "rendered-worker-0",
            support::URL_122,
            ign(json!([file("/etc/a", "a", 0o644)]), json!([])),
        );
        let e = node.engine();
        e.update(
            &empty,
            &rendered,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
        .unwrap();
        complete_sim_reboot(&node.fs).unwrap();
        node.engine().validate(&rendered).unwrap();
        let target = image_mode::embed(&rendered, IMAGE);

        let (current, check) = crash_at(&node, point, &rendered, &target);
        let e = node.engine();
        assert_eq!(current.metadata.name.as_deref(), Some("rendered-worker-0"));
        let rolled_back = image_mode::image_of(&current).is_empty();
        if rolled_back {
            assert_eq!(current.spec.os_image_url, support::URL_122, "{point}");
            assert_eq!(node.read(paths::CURRENT_IMAGE), None, "{point}");
        } else {
            assert_eq!(image_mode::image_of(&current), IMAGE, "{point}");
            assert_eq!(current.spec.os_image_url, IMAGE, "{point}");
        }
        resume(&node, &e, point, rolled_back, check, &current, &target);
        complete_sim_reboot(&node.fs).unwrap();
        let e = node.engine();
        e.validate(&target)
            .unwrap_or_else(|err| panic!("{point}: {err}"));
        assert_eq!(e.boot_check(&target).unwrap(), BootCheck::Valid, "{point}");
        assert_eq!(
            e.host.os.booted_os_image_url().unwrap().as_deref(),
            Some(IMAGE),
            "{point}"
        );
        let stored: mco_api::MachineConfig =
            serde_json::from_str(&node.read(paths::CURRENT_CONFIG).unwrap()).unwrap();
        assert_eq!(stored.spec.os_image_url, support::URL_122, "{point}");
        assert_eq!(node.read(paths::CURRENT_IMAGE).as_deref(), Some(IMAGE));
    }
    scenario.teardown();
}
