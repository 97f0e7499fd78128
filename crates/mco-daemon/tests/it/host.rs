//! Rebooters and the `Host` bundle, real and simulated.

// Tests set up and inspect their temp roots directly.
#![allow(clippy::disallowed_methods)]

use crate::support;

use std::sync::{Arc, mpsc};

use mco_daemon::host::fs::{Durability, FileAttrs, HostFs};
use mco_daemon::host::ostree::{OsUpdater, RebaseMode, SimOstree};
use mco_daemon::host::reboot::{
    RebootRequest, Rebooter, SimRebooter, SystemdRunRebooter, complete_sim_reboot,
};
use mco_daemon::host::{paths, units};
use mco_daemon::{Host, HostKind};
use support::{argv, calls, fake_tool, fixture};

#[test]
fn systemd_run_reboot_argv() {
    let t = tempfile::tempdir().unwrap();
    let prog = fake_tool(t.path(), "systemd-run", "exit 0");
    SystemdRunRebooter::with_program(&prog)
        .reboot("Node will reboot into config rendered-worker-1")
        .unwrap();
    SystemdRunRebooter::with_program(&prog)
        .after_ostree_finalize(true)
        .reboot("x")
        .unwrap();
    assert_eq!(
        calls(t.path(), "systemd-run"),
        vec![
            argv(&[
                "--unit",
                "machine-config-daemon-reboot",
                "--description",
                "machine-config-daemon: Node will reboot into config rendered-worker-1",
                "/bin/sh",
                "-c",
                "systemctl reboot",
            ]),
            argv(&[
                "--unit",
                "machine-config-daemon-reboot",
                "--description",
                "machine-config-daemon: x",
                "-p",
                "Requires=ostree-finalize-staged.service",
                "-p",
                "After=ostree-finalize-staged.service",
                "/bin/sh",
                "-c",
                "systemctl reboot",
            ]),
        ]
    );
    let bad = fake_tool(t.path(), "bad-run", "exit 1");
    let err = SystemdRunRebooter::with_program(&bad)
        .reboot("x")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("reboot command failed, something is seriously wrong"),
        "{err}"
    );
}

#[test]
fn sim_reboot_reaches_the_supervisor() {
    let t = tempfile::tempdir().unwrap();
    let fs = HostFs::open(t.path()).unwrap();
    assert_eq!(SimRebooter::pending(&fs).unwrap(), None);
    let (tx, rx) = mpsc::channel::<RebootRequest>();
    let tx = std::sync::Mutex::new(tx);
    let r = SimRebooter::new(fs.try_clone().unwrap()).with_notifier(Arc::new(move |req| {
        tx.lock().unwrap().send(req.clone()).unwrap();
    }));
    r.reboot("Node will reboot into config rendered-worker-2")
        .unwrap();
    let got = rx.try_recv().unwrap();
    assert_eq!(
        got.rationale,
        "Node will reboot into config rendered-worker-2"
    );
    assert_eq!(SimRebooter::pending(&fs).unwrap(), Some(got));
}

/// What the supervisor does between stopping and restarting the daemon.
#[test]
fn completing_a_sim_reboot_boots_staged_and_clears_run() {
    let t = tempfile::tempdir().unwrap();
    let fs = HostFs::open(t.path()).unwrap();
    fs.write_atomic(paths::OSTREE_BOOTED, b"", &FileAttrs::default())
        .unwrap();
    fs.write_atomic(paths::FORCE_FILE, b"", &FileAttrs::default())
        .unwrap();
    let os = SimOstree::new(fs.try_clone().unwrap());
    os.seed_from_json(&fixture("rpm-ostree/seed-unpivoted.json"), &[])
        .unwrap();
    os.rebase("registry.example/os:1", &RebaseMode::Container)
        .unwrap();
    SimRebooter::new(fs.try_clone().unwrap())
        .reboot("x")
        .unwrap();
    let inode = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(t.path().join(p.trim_start_matches('/')))
            .unwrap()
            .ino()
    };
    let (marker, boot_id) = (inode(paths::OSTREE_BOOTED), fs.read(paths::BOOT_ID).ok());

    assert!(complete_sim_reboot(&fs).unwrap());
    // The marker the boot recreates is kept as it was; the boot id is new.
    assert_eq!(inode(paths::OSTREE_BOOTED), marker);
    assert_ne!(fs.read(paths::BOOT_ID).ok(), boot_id);
    assert_eq!(
        os.booted_os_image_url().unwrap().as_deref(),
        Some("registry.example/os:1")
    );
    assert!(fs.exists(paths::OSTREE_BOOTED).unwrap());
    assert!(!fs.exists(paths::FORCE_FILE).unwrap());
    assert_eq!(SimRebooter::pending(&fs).unwrap(), None);
    // Nothing staged the second time.
    assert!(!complete_sim_reboot(&fs).unwrap());
}

/// Seed 000 on a simulated node through the `Host` bundle: a `uos` ostree host is detected as
/// managed, its never-adopted OS is rebased in pivot mode, and the reboot makes it adopted.
#[test]
fn sim_host_seed_000() {
    let t = tempfile::tempdir().unwrap();
    let host = Host::sim(t.path()).unwrap();
    assert_eq!(host.kind(), HostKind::Sim);
    // A simulated reboot stops the daemon, not a kernel: no fsync is owed.
    assert_eq!(host.fs.durability(), Durability::ProcessCrash);
    host.fs
        .write_atomic(
            paths::OS_RELEASE,
            fixture("os-release/uos").as_bytes(),
            &FileAttrs::default(),
        )
        .unwrap();
    host.fs
        .write_atomic(paths::OSTREE_BOOTED, b"", &FileAttrs::default())
        .unwrap();
    SimOstree::new(host.fs.try_clone().unwrap())
        .seed_from_json(&fixture("rpm-ostree/seed-unpivoted.json"), &[])
        .unwrap();

    let os = host.detect_os().unwrap();
    assert!(os.is_managed_ostree());
    let st = host.os.status().unwrap();
    assert!(!st.booted.is_mco_managed(), "never adopted");

    let url = "registry.uniontech.com/utccp-components/machine-os-content:1.2.2";
    host.os
        .rebase(
            url,
            &RebaseMode::Pivot {
                refspec: "repo:commit".into(),
            },
        )
        .unwrap();
    units::write_unit(
        &host.fs,
        "a.service",
        "[Install]\nWantedBy=multi-user.target\n",
    )
    .unwrap();
    host.systemd.enable(&argv(&["a.service"])).unwrap();
    host.rebooter
        .reboot("Completing firstboot provisioning")
        .unwrap();
    assert!(complete_sim_reboot(&host.fs).unwrap());

    let st = host.os.status().unwrap();
    assert!(st.booted.is_mco_managed());
    assert_eq!(host.os.booted_os_image_url().unwrap().as_deref(), Some(url));
    assert!(host.systemd.is_enabled("a.service").unwrap());
}

#[test]
fn real_host_builds_without_running_tools() {
    let t = tempfile::tempdir().unwrap();
    let host = Host::real(t.path()).unwrap();
    assert_eq!(host.kind(), HostKind::Real);
    assert_eq!(host.fs.durability(), Durability::PowerLoss);
    assert_eq!(host.fs.root(), t.path());
    assert!(!host.detect_os().unwrap().is_managed_ostree());
    assert!(format!("{host:?}").contains("Real"));
}
