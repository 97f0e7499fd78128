//! systemd: the real `systemctl` against a recording fake, the simulated one on disk, and the
//! unit-writing rules of upstream's TestIgn3Cfg.

// Tests set up and inspect their temp roots directly.
#![allow(clippy::disallowed_methods)]

use crate::support;

use std::path::PathBuf;

use mco_daemon::host::cmd::CommandRunner;
use mco_daemon::host::fs::{FileAttrs, HostFs};
use mco_daemon::host::paths;
use mco_daemon::host::systemd::{SimSystemd, Systemctl, Systemd};
use mco_daemon::host::units::{self, DropinSpec, UnitSpec};
use support::{argv, calls, fake_tool};

#[test]
fn systemctl_argv() {
    let t = tempfile::tempdir().unwrap();
    let prog = fake_tool(
        t.path(),
        "systemctl",
        "if [ \"$1\" = is-enabled ] || [ \"$2\" = is-enabled ]; then\n  \
           case \"$(eval echo \\${$#})\" in on.service) echo enabled; exit 0;; *) echo disabled; exit 1;; esac\nfi\nexit 0",
    );
    let s = Systemctl::with_program(&prog);
    s.daemon_reload().unwrap();
    s.enable(&argv(&["a.service", "b.service"])).unwrap();
    s.disable(&argv(&["c.service"])).unwrap();
    s.enable(&[]).unwrap();
    s.mask(&argv(&["m.service"])).unwrap();
    s.unmask(&argv(&["m.service"])).unwrap();
    s.preset("p.service").unwrap();
    s.reload("crio.service").unwrap();
    s.restart("kubelet.service").unwrap();
    assert!(s.is_enabled("on.service").unwrap());
    assert!(!s.is_enabled("off.service").unwrap());
    assert_eq!(
        calls(t.path(), "systemctl"),
        vec![
            argv(&["daemon-reload"]),
            argv(&["enable", "a.service", "b.service"]),
            argv(&["disable", "c.service"]),
            argv(&["mask", "m.service"]),
            argv(&["unmask", "m.service"]),
            argv(&["preset", "p.service"]),
            argv(&["reload", "crio.service"]),
            argv(&["restart", "kubelet.service"]),
            argv(&["is-enabled", "on.service"]),
            argv(&["is-enabled", "off.service"]),
        ]
    );

    // Offline root: enablement edits symlinks under the root; reloads still go to systemd.
    std::fs::remove_file(t.path().join("systemctl.log")).unwrap();
    let s = Systemctl::with_program(&prog).offline_root("/rootfs");
    s.enable(&argv(&["a.service"])).unwrap();
    s.restart("a.service").unwrap();
    assert!(s.is_enabled("on.service").unwrap());
    assert_eq!(
        calls(t.path(), "systemctl"),
        vec![
            argv(&["--root=/rootfs", "enable", "a.service"]),
            argv(&["restart", "a.service"]),
            argv(&["--root=/rootfs", "is-enabled", "on.service"]),
        ]
    );
}

#[test]
fn systemctl_failure_and_chroot() {
    let t = tempfile::tempdir().unwrap();
    let prog = fake_tool(
        t.path(),
        "systemctl",
        "echo 'Failed to enable unit: Unit file x.service does not exist.' >&2; exit 1",
    );
    let err = Systemctl::with_program(&prog)
        .enable(&argv(&["x.service"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("Unit file x.service does not exist."), "{err}");
    // No answer at all from is-enabled is an error, not "disabled".
    assert!(
        Systemctl::with_program(&prog)
            .is_enabled("x.service")
            .is_err()
    );

    let chroot = fake_tool(t.path(), "chroot", "exit 0");
    Systemctl::new(CommandRunner::in_root("/rootfs").with_chroot_program(&chroot))
        .daemon_reload()
        .unwrap();
    assert_eq!(
        calls(t.path(), "chroot"),
        vec![argv(&["/rootfs", "systemctl", "daemon-reload"])]
    );
}

fn sim() -> (tempfile::TempDir, HostFs, SimSystemd) {
    let t = tempfile::tempdir().unwrap();
    let fs = HostFs::open(t.path()).unwrap();
    let s = SimSystemd::new(HostFs::open(t.path()).unwrap());
    (t, fs, s)
}

const SERVICE: &str = "[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";

#[test]
fn sim_enablement_is_the_real_symlink_layout() {
    let (_t, fs, s) = sim();
    units::write_unit(&fs, "a.service", SERVICE).unwrap();
    fs.write_atomic(
        "/usr/lib/systemd/system/v.service",
        b"[Install]\nWantedBy=multi-user.target\nRequiredBy=x.target\nAlias=valias.service\n",
        &FileAttrs::default(),
    )
    .unwrap();
    s.enable(&argv(&["a.service", "v.service"])).unwrap();
    assert_eq!(
        fs.read_link("/etc/systemd/system/multi-user.target.wants/a.service")
            .unwrap(),
        Some(PathBuf::from("/etc/systemd/system/a.service"))
    );
    assert_eq!(
        fs.read_link("/etc/systemd/system/x.target.requires/v.service")
            .unwrap(),
        Some(PathBuf::from("/usr/lib/systemd/system/v.service"))
    );
    assert!(
        fs.read_link("/etc/systemd/system/valias.service")
            .unwrap()
            .is_some()
    );
    assert!(s.is_enabled("a.service").unwrap());
    assert!(s.is_enabled("v.service").unwrap());

    s.disable(&argv(&["v.service"])).unwrap();
    assert!(!s.is_enabled("v.service").unwrap());
    assert!(!fs.exists("/etc/systemd/system/valias.service").unwrap());
    assert!(s.is_enabled("a.service").unwrap());

    // Unknown units fail like systemctl does.
    let err = s.enable(&argv(&["nope.service"])).unwrap_err().to_string();
    assert_eq!(err, "Unit file nope.service does not exist.");

    // Masks are /dev/null links; a masked unit is not enabled and cannot be enabled.
    s.mask(&argv(&["a.service"])).unwrap();
    assert!(units::is_masked(&fs, "a.service").unwrap());
    assert!(!s.is_enabled("a.service").unwrap());
    assert!(s.enable(&argv(&["a.service"])).is_err());
    s.unmask(&argv(&["a.service"])).unwrap();
    assert!(!units::is_masked(&fs, "a.service").unwrap());

    assert_eq!(
        s.log_lines().unwrap(),
        vec![
            "enable a.service v.service",
            "disable v.service",
            "mask a.service",
            "unmask a.service",
        ]
    );
}

#[test]
fn sim_reloads_restarts_and_presets_are_logged() {
    let (_t, fs, s) = sim();
    units::write_unit(&fs, "on.service", SERVICE).unwrap();
    units::write_unit(&fs, "off.service", SERVICE).unwrap();
    fs.write_atomic(
        "/usr/lib/systemd/system-preset/90-default.preset",
        b"enable on.service\ndisable *\n",
        &FileAttrs::default(),
    )
    .unwrap();
    fs.write_atomic(
        "/etc/systemd/system-preset/10-admin.preset",
        b"# admin\nenable off.serv?ce\n",
        &FileAttrs::default(),
    )
    .unwrap();
    s.preset("on.service").unwrap();
    s.preset("off.service").unwrap();
    assert!(s.is_enabled("on.service").unwrap());
    assert!(s.is_enabled("off.service").unwrap());
    fs.remove_file("/etc/systemd/system-preset/10-admin.preset")
        .unwrap();
    s.preset("off.service").unwrap();
    assert!(!s.is_enabled("off.service").unwrap());

    s.daemon_reload().unwrap();
    s.reload("crio.service").unwrap();
    s.restart("kubelet.service").unwrap();
    let log = fs.read_to_string(paths::SIM_SYSTEMD_LOG).unwrap();
    assert_eq!(
        log,
        "preset on.service\npreset off.service\npreset off.service\n\
         daemon-reload\nreload crio.service\nrestart kubelet.service\n"
    );
}

fn unit(
    name: &str,
    contents: Option<&str>,
    enabled: Option<bool>,
    dropins: &[(&str, &str)],
) -> UnitSpec {
    UnitSpec {
        name: name.into(),
        contents: contents.map(str::to_string),
        enabled,
        mask: None,
        dropins: dropins
            .iter()
            .map(|(n, c)| DropinSpec {
                name: n.to_string(),
                contents: Some(c.to_string()),
            })
            .collect(),
    }
}

/// TestIgn3Cfg's seven units: with or without contents, dropins, empty dropins, enabled or
/// disabled. Units with contents are written and enabled/disabled as asked; units without
/// contents get no unit file; only dropins with contents are written.
#[test]
fn ign3cfg_seven_unit_variants() {
    let (_t, fs, s) = sim();
    let specs = vec![
        unit(
            "enabled-with-contents.service",
            Some(SERVICE),
            Some(true),
            &[],
        ),
        unit(
            "disabled-with-contents.service",
            Some(SERVICE),
            Some(false),
            &[],
        ),
        unit("preset-with-contents.service", Some(SERVICE), None, &[]),
        unit(
            "dropin-only.service",
            None,
            Some(true),
            &[("10-a.conf", "[Service]\nX=1\n")],
        ),
        unit("empty-dropin.service", None, None, &[("10-empty.conf", "")]),
        unit(
            "contents-and-dropins.service",
            Some(SERVICE),
            Some(true),
            &[("10-full.conf", "[Service]\nY=1\n"), ("20-empty.conf", "")],
        ),
        unit("nothing.service", None, Some(false), &[]),
    ];
    units::write_units(&fs, &s, &specs, true).unwrap();

    for name in [
        "enabled-with-contents.service",
        "disabled-with-contents.service",
        "preset-with-contents.service",
        "contents-and-dropins.service",
    ] {
        assert_eq!(
            fs.read_to_string(&units::unit_path(name)).unwrap(),
            SERVICE,
            "{name}"
        );
    }
    for name in [
        "dropin-only.service",
        "empty-dropin.service",
        "nothing.service",
    ] {
        assert!(!fs.exists(&units::unit_path(name)).unwrap(), "{name}");
    }
    assert!(
        fs.exists(&units::dropin_path("dropin-only.service", "10-a.conf"))
            .unwrap()
    );
    assert!(
        fs.exists(&units::dropin_path(
            "contents-and-dropins.service",
            "10-full.conf"
        ))
        .unwrap()
    );
    assert!(
        !fs.exists(&units::dropin_path("empty-dropin.service", "10-empty.conf"))
            .unwrap()
    );
    assert!(
        !fs.exists(&units::dropin_path(
            "contents-and-dropins.service",
            "20-empty.conf"
        ))
        .unwrap()
    );

    assert!(s.is_enabled("enabled-with-contents.service").unwrap());
    assert!(s.is_enabled("contents-and-dropins.service").unwrap());
    assert!(!s.is_enabled("disabled-with-contents.service").unwrap());
    // No presets installed: systemd's default policy enables.
    assert!(s.is_enabled("preset-with-contents.service").unwrap());
    assert_eq!(
        s.log_lines().unwrap(),
        vec![
            "preset preset-with-contents.service",
            "enable enabled-with-contents.service contents-and-dropins.service",
            "disable disabled-with-contents.service",
        ],
        "the empty-dropin preset failed (no unit file) and was only logged"
    );
}

#[test]
fn mask_then_unmask_through_unit_specs() {
    let (_t, fs, s) = sim();
    let mut spec = unit("mask-and-contents.service", Some(SERVICE), None, &[]);
    spec.mask = Some(true);
    units::write_units(&fs, &s, std::slice::from_ref(&spec), false).unwrap();
    assert!(units::is_masked(&fs, "mask-and-contents.service").unwrap());
    spec.mask = Some(false);
    units::write_units(&fs, &s, std::slice::from_ref(&spec), false).unwrap();
    assert!(!units::is_masked(&fs, "mask-and-contents.service").unwrap());
    assert!(units::has_unit_file(&fs, "mask-and-contents.service").unwrap());
}

#[test]
fn vendor_unit_copy_is_backed_up_on_ostree() {
    let (_t, fs, s) = sim();
    fs.write_atomic(
        "/usr/etc/systemd/system/k.service",
        b"vendor",
        &FileAttrs::default(),
    )
    .unwrap();
    fs.write_atomic(
        "/etc/systemd/system/k.service",
        b"vendor",
        &FileAttrs::default(),
    )
    .unwrap();
    units::write_units(
        &fs,
        &s,
        &[unit("k.service", Some(SERVICE), None, &[])],
        true,
    )
    .unwrap();
    assert_eq!(
        fs.read("/etc/machine-config-daemon/orig/etc/systemd/system/k.service.mcdorig")
            .unwrap(),
        b"vendor"
    );
    assert_eq!(
        mco_daemon::host::backup::release(&fs, "/etc/systemd/system/k.service").unwrap(),
        mco_daemon::host::backup::Released::Restored
    );
    assert_eq!(fs.read("/etc/systemd/system/k.service").unwrap(), b"vendor");
}

#[test]
fn systemctl_found_first_on_child_path() {
    let t = tempfile::tempdir().unwrap();
    fake_tool(t.path(), "systemctl", "exit 0");
    let path = format!(
        "{}:{}",
        t.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Systemctl::new(CommandRunner::direct().with_env("PATH", path))
        .restart("crio.service")
        .unwrap();
    assert_eq!(
        calls(t.path(), "systemctl"),
        vec![argv(&["restart", "crio.service"])]
    );
}
