//! The simulated OS updater: same JSON shape as rpm-ostree, state inside the node root.

// Tests set up and inspect their temp roots directly.
#![allow(clippy::disallowed_methods)]

use crate::support;

use mco_daemon::host::fs::HostFs;
use mco_daemon::host::ostree::{KernelType, Origin, OsStatus, OsUpdater, RebaseMode, SimOstree};
use mco_daemon::host::paths;
use support::{argv, fixture};

const URL_122: &str = "registry.uniontech.com/utccp-components/machine-os-content:1.2.2";
const URL_130: &str = "registry.uniontech.com/uccps-components/machine-os-content:1.3.0";

fn sim(status_fixture: &str) -> (tempfile::TempDir, SimOstree) {
    let t = tempfile::tempdir().unwrap();
    let s = SimOstree::new(HostFs::open(t.path()).unwrap());
    s.seed_from_json(
        &fixture(&format!("rpm-ostree/{status_fixture}")),
        &argv(&["rw", "root=UUID=1"]),
    )
    .unwrap();
    (t, s)
}

fn pivot() -> RebaseMode {
    RebaseMode::Pivot {
        refspec: "/run/mco-machine-os-content/repo:0".into(),
    }
}

/// Seed 000 end to end at the OS level: adopt the un-pivoted OS at 1.2.2, then upgrade to 1.3.0.
#[test]
fn seed_000_adopt_then_upgrade() {
    let (t, s) = sim("seed-unpivoted.json");
    assert_eq!(s.booted_os_image_url().unwrap(), None);
    s.register_image(URL_130, "20.20231221.uccps.0").unwrap();

    s.rebase(URL_122, &pivot()).unwrap();
    let st = s.status().unwrap();
    let staged = st.staged.clone().unwrap();
    assert_eq!(staged.origin, Origin::Pivot(URL_122.into()));
    assert_eq!(staged.version, "20.20230625.uccps.0");
    assert_eq!(
        st.booted.origin,
        Origin::Ostree("uswift:uswift/x86_64".into())
    );
    // Not booted yet.
    assert_eq!(s.booted_os_image_url().unwrap(), None);

    assert!(s.finalize_reboot().unwrap());
    assert_eq!(s.booted_os_image_url().unwrap().as_deref(), Some(URL_122));
    let st = s.status().unwrap();
    assert_eq!(
        st.rollback.unwrap().origin,
        Origin::Ostree("uswift:uswift/x86_64".into())
    );
    let raw = std::fs::read_to_string(
        t.path()
            .join(paths::SIM_OSTREE_STATE.trim_start_matches('/')),
    )
    .unwrap();
    assert!(raw.contains("\"gpg-enabled\""), "unknown keys survive");

    s.rebase(URL_130, &pivot()).unwrap();
    assert!(s.finalize_reboot().unwrap());
    let st = s.status().unwrap();
    assert_eq!(st.booted.origin.to_string(), format!("pivot://{URL_130}"));
    assert_eq!(
        st.booted.custom_origin.as_ref().unwrap().1,
        "Managed by machine-config-operator"
    );
    assert_eq!(st.booted.version, "20.20231221.uccps.0");
    assert_eq!(
        st.rollback.unwrap().os_image_url().as_deref(),
        Some(URL_122)
    );
    assert_eq!(st.deployments.len(), 2);
    // Nothing staged: a reboot changes nothing.
    assert!(!s.finalize_reboot().unwrap());

    // The state file has rpm-ostree's field names and parses with the real parser.
    let raw = std::fs::read_to_string(
        t.path()
            .join(paths::SIM_OSTREE_STATE.trim_start_matches('/')),
    )
    .unwrap();
    assert!(raw.contains("\"custom-origin\""));
    assert!(raw.contains("\"base-commit-meta\""));
    assert_eq!(OsStatus::parse(&raw).unwrap(), s.status().unwrap());
}

#[test]
fn container_mode_rebase() {
    let (_t, s) = sim("pivot-era.json");
    s.rebase("quay.io/x/os@sha256:aa", &RebaseMode::Container)
        .unwrap();
    let staged = s.status().unwrap().staged.unwrap();
    assert_eq!(
        staged.origin,
        Origin::Container("ostree-unverified-registry:quay.io/x/os@sha256:aa".into())
    );
    assert_eq!(
        staged.os_image_url().as_deref(),
        Some("quay.io/x/os@sha256:aa")
    );
    // A second rebase replaces the pending one.
    s.rebase("quay.io/x/os@sha256:bb", &RebaseMode::Container)
        .unwrap();
    let st = s.status().unwrap();
    assert_eq!(st.deployments.len(), 3);
    assert_eq!(
        st.staged.unwrap().os_image_url().as_deref(),
        Some("quay.io/x/os@sha256:bb")
    );
    s.cleanup_pending().unwrap();
    let st = s.status().unwrap();
    assert!(st.staged.is_none());
    assert_eq!(st.deployments.len(), 2);
    s.cleanup_rollback().unwrap();
    assert_eq!(s.status().unwrap().deployments.len(), 1);
}

/// TestKernelArguments in simulation: arguments follow the staged deployment and boot with it.
#[test]
fn kargs_are_per_deployment() {
    let (_t, s) = sim("container-era.json");
    let new = argv(&[
        "nosmt",
        "foo=bar",
        "foo=baz",
        "baz=test",
        "bar=\"hello world\"",
    ]);
    s.set_kargs(&[], &new).unwrap();
    let mut want = argv(&["rw", "root=UUID=1"]);
    want.extend(new.clone());
    assert_eq!(s.kargs().unwrap(), want);
    assert_eq!(s.booted_kargs().unwrap(), argv(&["rw", "root=UUID=1"]));
    // A rebase on top keeps the staged arguments.
    s.rebase("quay.io/x:2", &RebaseMode::Container).unwrap();
    assert_eq!(s.kargs().unwrap(), want);
    s.finalize_reboot().unwrap();
    assert_eq!(s.booted_kargs().unwrap(), want);
    // Rollback of the MC: delete all old, append nothing; absent ones are ignored.
    s.set_kargs(&[new.clone(), argv(&["not-there"])].concat(), &[])
        .unwrap();
    s.finalize_reboot().unwrap();
    assert_eq!(s.booted_kargs().unwrap(), argv(&["rw", "root=UUID=1"]));
}

#[test]
fn kernel_type_switches_through_overrides() {
    let (_t, s) = sim("container-era.json");
    s.set_kernel_type(KernelType::Realtime).unwrap();
    assert_eq!(
        s.status().unwrap().default_deployment().kernel_type(),
        KernelType::Realtime
    );
    s.finalize_reboot().unwrap();
    assert_eq!(
        s.status().unwrap().booted.kernel_type(),
        KernelType::Realtime
    );
    assert!(
        s.status()
            .unwrap()
            .booted
            .requested_base_removals
            .contains(&"kernel-core".to_string())
    );
    s.set_kernel_type(KernelType::Default).unwrap();
    s.finalize_reboot().unwrap();
    let booted = s.status().unwrap().booted;
    assert_eq!(booted.kernel_type(), KernelType::Default);
    assert!(booted.requested_packages.is_empty());
    assert!(booted.requested_base_removals.is_empty());
}

#[test]
fn unseeded_node_reports_missing_state() {
    let t = tempfile::tempdir().unwrap();
    let s = SimOstree::new(HostFs::open(t.path()).unwrap());
    let err = s.status().unwrap_err().to_string();
    assert!(err.contains("/var/lib/mco-sim/ostree.json"), "{err}");
}

/// `rpm-ostree update --install/--uninstall` stages a deployment requesting the new set, booted
/// at the next reboot; rpm-ostree's refusals are the simulation's too.
#[test]
fn package_updates_stage_then_boot() {
    let (t, s) = sim("seed-unpivoted.json");
    s.update_packages(&argv(&["--install", "usbguard", "--install", "sysstat"]))
        .unwrap();
    let st = s.status().unwrap();
    assert_eq!(
        st.staged.unwrap().requested_packages,
        argv(&["usbguard", "sysstat"])
    );
    assert!(st.booted.requested_packages.is_empty());
    s.update_packages(&[]).unwrap();
    assert!(s.finalize_reboot().unwrap());
    assert_eq!(
        s.status().unwrap().booted.requested_packages,
        argv(&["usbguard", "sysstat"])
    );
    s.update_packages(&argv(&["--uninstall", "usbguard"]))
        .unwrap();
    assert_eq!(
        s.status().unwrap().staged.unwrap().requested_packages,
        argv(&["sysstat"])
    );
    let err = s
        .update_packages(&argv(&["--install", "sysstat"]))
        .unwrap_err()
        .to_string();
    assert_eq!(err, "error: Package 'sysstat' is already requested");
    let err = s
        .update_packages(&argv(&["--uninstall", "usbguard"]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "error: Package/capability 'usbguard' is not currently requested"
    );
    drop(t);
}
