//! Seed 000 at node level: an ostree host whose os-release says `ID="uos"` adopts its OS at first
//! boot; a node left un-adopted degrades with the cause and the fix, the force file alone
//! recovers it, and the next upgrade succeeds.

use crate::support;

use mco_daemon::engine::firstboot::{self, FirstbootOutcome};
use mco_daemon::engine::{BootCheck, RecordingReporter, UpdateOptions, UpdateOutcome};
use mco_daemon::host::fs::FileAttrs;
use mco_daemon::host::ostree::Origin;
use mco_daemon::host::paths;
use mco_daemon::host::reboot::{SimRebooter, complete_sim_reboot};
use serde_json::json;
use support::{Node, URL_122, URL_130, ign, mc};

const RENDERED: &str = "rendered-master-bd1426e1c30cc288379bc4c7dd71c4aa";

fn config_122() -> mco_api::MachineConfig {
    let mut m = mc(RENDERED, URL_122, ign(json!([]), json!([])));
    m.spec.kernel_arguments = Some(vec!["systemd.unified_cgroup_hierarchy=0".into()]);
    m
}

fn reboot(node: &Node) {
    assert!(
        SimRebooter::pending(&node.fs).unwrap().is_some(),
        "a reboot was requested"
    );
    complete_sim_reboot(&node.fs).unwrap();
}

#[test]
fn uos_host_adopts_its_os_at_first_boot_and_rerun_is_a_noop() {
    let node = Node::new(true);
    let e = node.engine();
    assert_eq!(e.os.identity.id, "uos");
    assert!(e.managed_os(), "ostree-booted decides, not the ID");
    let data = serde_json::to_vec(&config_122()).unwrap();
    node.fs
        .write_atomic(paths::FIRSTBOOT_CONFIG, &data, &FileAttrs::default())
        .unwrap();

    let out = firstboot::complete_machineconfig(&e, None).unwrap();
    assert_eq!(
        out,
        FirstbootOutcome::Rebooting {
            config: RENDERED.into()
        }
    );
    assert!(!node.fs.exists(paths::FIRSTBOOT_CONFIG).unwrap());
    assert!(
        node.fs
            .exists(&format!("{}.bak", paths::FIRSTBOOT_CONFIG))
            .unwrap()
    );
    let req = SimRebooter::pending(&node.fs).unwrap().unwrap();
    assert_eq!(
        req.rationale,
        format!("Completing firstboot provisioning to {RENDERED}")
    );
    reboot(&node);

    let e = node.engine();
    let st = e.host.os.status().unwrap();
    assert_eq!(st.booted.origin, Origin::Pivot(URL_122.into()));
    assert!(
        e.host
            .os
            .kargs()
            .unwrap()
            .contains(&"systemd.unified_cgroup_hierarchy=0".to_string())
    );
    assert_eq!(e.boot_check(&config_122()).unwrap(), BootCheck::Valid);

    // Again: a clear no-op, never "no such file or directory".
    match firstboot::complete_machineconfig(&e, None).unwrap() {
        FirstbootOutcome::AlreadyCompleted { message } => {
            assert!(message.contains("already completed"), "{message}");
            assert!(!message.contains("no such file"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(SimRebooter::pending(&node.fs).unwrap().is_none());

    // The seed's manual recovery (copy .bak back, run again) also succeeds.
    node.fs
        .copy_preserving(
            &format!("{}.bak", paths::FIRSTBOOT_CONFIG),
            paths::FIRSTBOOT_CONFIG,
        )
        .unwrap();
    let out = firstboot::complete_machineconfig(&e, None).unwrap();
    assert!(matches!(out, FirstbootOutcome::Completed { .. }), "{out:?}");
    assert!(!node.fs.exists(paths::FIRSTBOOT_CONFIG).unwrap());
}

#[test]
fn first_boot_without_config_says_so() {
    let node = Node::new(true);
    match firstboot::complete_machineconfig(&node.engine(), None).unwrap() {
        FirstbootOutcome::NothingToDo { message } => {
            assert!(message.contains(paths::FIRSTBOOT_CONFIG), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn never_adopted_degrades_force_file_recovers_then_upgrade_succeeds() {
    let node = Node::new(true);
    // Seed 000's state: 1.2's first boot skipped the OS but wrote currentconfig.
    let current = config_122();
    node.fs
        .write_atomic(
            paths::CURRENT_CONFIG,
            &serde_json::to_vec(&current).unwrap(),
            &FileAttrs::default(),
        )
        .unwrap();
    let e = node.engine();
    let on_disk = e.on_disk_config().unwrap().unwrap();
    let err = e.boot_check(&on_disk).unwrap_err().to_string();
    let prefix = format!(
        "unexpected on-disk state validating against {RENDERED}: expected target osImageURL \"{URL_122}\", have \"\""
    );
    assert!(err.starts_with(&prefix), "{err}");
    assert!(err.contains("never taken over"), "{err}");
    assert!(err.contains("first boot skipped the OS update"), "{err}");
    assert!(
        err.contains("touch /run/machine-config-daemon-force"),
        "{err}"
    );
    assert!(
        err.contains("mco daemon firstboot-complete-machineconfig"),
        "{err}"
    );

    // One step: the force file.
    node.write(paths::FORCE_FILE, "");
    assert_eq!(e.boot_check(&on_disk).unwrap(), BootCheck::Forced);
    let out = e
        .update(
            &on_disk,
            &on_disk,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
        .unwrap();
    assert_eq!(out, UpdateOutcome::Rebooting);
    assert!(
        !node.fs.exists(paths::FORCE_FILE).unwrap(),
        "force file consumed"
    );
    reboot(&node);
    let e = node.engine();
    assert_eq!(e.boot_check(&on_disk).unwrap(), BootCheck::Valid);

    // The upgrade that failed in the seed.
    node.sim_ostree()
        .register_image(URL_130, "20.20231221.uccps.0")
        .unwrap();
    let mut next = mc(
        "rendered-master-3c364e7f394f757afd319cdb5b0e17c8",
        URL_130,
        ign(json!([]), json!([])),
    );
    next.spec.kernel_arguments = current.spec.kernel_arguments.clone();
    let mut r = RecordingReporter::default();
    let out = e
        .update(&on_disk, &next, UpdateOptions::default(), &mut r)
        .unwrap();
    assert_eq!(out, UpdateOutcome::Rebooting);
    reboot(&node);
    let e = node.engine();
    assert_eq!(e.boot_check(&next).unwrap(), BootCheck::Valid);
    let st = e.host.os.status().unwrap();
    assert_eq!(st.booted.origin.to_string(), format!("pivot://{URL_130}"));
    assert_eq!(
        st.booted.custom_origin.as_ref().map(|c| c.1.as_str()),
        Some("Managed by machine-config-operator")
    );
    assert_eq!(st.booted.version, "20.20231221.uccps.0");
    let shown = st.to_string();
    assert!(shown.contains(&format!("* pivot://{URL_130}")), "{shown}");
    assert!(
        shown.contains("CustomOrigin: Managed by machine-config-operator"),
        "{shown}"
    );
}
