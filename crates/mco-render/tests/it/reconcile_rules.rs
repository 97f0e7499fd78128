//! Reconcilability: every refused change with upstream's exact message, and what stays allowed.

use mco_api::{MachineConfig, MachineConfigSpec};
use mco_render::diff::ConfigView;
use mco_render::ignition::Ignition;
use mco_render::reconcile::{
    PasswdChange, ReconcileError, StorageOverrides, Unreconcilable, check_machine_configs,
    check_reconcilable,
};
use mco_testkit::MachineConfigBuilder;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Cfg {
    spec: MachineConfigSpec,
    ign: Ignition,
}

fn ignition(fields: Value) -> Value {
    let mut obj = json!({"ignition": {"version": "3.5.0"}});
    for (k, v) in fields.as_object().cloned().unwrap_or_default() {
        obj[k] = v;
    }
    obj
}

impl Cfg {
    fn new(spec: Value, ign: Value) -> Self {
        Self {
            spec: serde_json::from_value(spec).expect("spec"),
            ign: serde_json::from_value(ignition(ign)).expect("ignition"),
        }
    }
    fn ign(ign: Value) -> Self {
        Self::new(json!({}), ign)
    }
    fn view(&self) -> ConfigView<'_> {
        ConfigView::new(&self.spec, &self.ign)
    }
}

fn check(old: &Cfg, new: &Cfg) -> Result<(), Unreconcilable> {
    check_reconcilable(old.view(), new.view(), StorageOverrides::default())
}

/// The base every case starts from: core with one key, one file, one unit.
fn base_ign() -> Value {
    json!({
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA old"]}]},
        "storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:,a"}}]},
        "systemd": {"units": [{"name": "a.service", "contents": "[Unit]", "enabled": true}]}
    })
}

fn base() -> Cfg {
    Cfg::ign(base_ign())
}

/// `base_ign()` with one top-level section replaced.
fn with(section: &str, value: Value) -> Cfg {
    let mut ign = base_ign();
    ign[section] = value;
    Cfg::ign(ign)
}

fn with_storage(extra: Value) -> Cfg {
    let mut ign = base_ign();
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        ign["storage"][k] = v;
    }
    Cfg::ign(ign)
}

fn core_users(users: Value) -> Cfg {
    with("passwd", json!({"users": users}))
}

#[test]
fn every_refused_change_has_upstreams_message() {
    let cases: Vec<(&str, Cfg, &str)> = vec![
        (
            "groups",
            with(
                "passwd",
                json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA old"]}], "groups": [{"name": "wheel2"}]}),
            ),
            "invalid passwd change(s): ignition Passwd Groups section contains changes",
        ),
        (
            "non-core user",
            core_users(json!([
                {"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA old"]},
                {"name": "bob", "sshAuthorizedKeys": ["k"]}
            ])),
            "invalid passwd change(s): ignition passwd user section contains unsupported changes: non-core user",
        ),
        (
            "core user other fields",
            core_users(json!([{"name": "core", "sshAuthorizedKeys": ["k"], "shell": "/bin/zsh"}])),
            "invalid passwd change(s): SSH keys and password hash are not reconcilable",
        ),
        (
            "core user without keys or hash",
            core_users(json!([{"name": "core"}])),
            "invalid passwd change(s): ignition passwd user section contains unsupported changes: user must be core and have 1 or more sshKeys",
        ),
        (
            "core user with an empty key list",
            core_users(json!([{"name": "core", "sshAuthorizedKeys": []}])),
            "invalid passwd change(s): ignition passwd user section contains unsupported changes: user must be core and have 1 or more sshKeys",
        ),
        (
            "ignition kernelArguments",
            with("kernelArguments", json!({"shouldExist": ["nosmt"]})),
            "ignition kargs section contains changes",
        ),
        (
            "ignition kernelArguments shouldNotExist",
            with("kernelArguments", json!({"shouldNotExist": ["quiet"]})),
            "ignition kargs section contains changes",
        ),
        (
            "disks",
            with_storage(json!({"disks": [{"device": "/dev/vdb", "wipeTable": true}]})),
            "ignition disks section contains changes",
        ),
        (
            "filesystems",
            with_storage(
                json!({"filesystems": [{"device": "/dev/vdb1", "format": "xfs", "path": "/var/data"}]}),
            ),
            "ignition filesystems section contains changes",
        ),
        (
            "raid",
            with_storage(
                json!({"raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/vdb", "/dev/vdc"]}]}),
            ),
            "ignition raid section contains changes",
        ),
        (
            "directories",
            with_storage(json!({"directories": [{"path": "/etc/newdir", "mode": 493}]})),
            "ignition directories section contains changes",
        ),
        (
            "links added",
            with_storage(json!({"links": [{"path": "/etc/l", "target": "/etc/a"}]})),
            "ignition links section contains changes",
        ),
        (
            "file append",
            with_storage(json!({"files": [
                {"path": "/etc/a", "contents": {"source": "data:,a"}},
                {"path": "/etc/hosts", "append": [{"source": "data:,10.0.0.1%20x"}]}
            ]})),
            "ignition file /etc/hosts includes append",
        ),
        (
            "force file",
            with_storage(json!({"files": [
                {"path": "/etc/a", "contents": {"source": "data:,a"}},
                {"path": "/run/machine-config-daemon-force", "contents": {"source": "data:,"}}
            ]})),
            "cannot create /run/machine-config-daemon-force via Ignition",
        ),
        (
            "fips",
            Cfg::new(json!({"fips": true}), base_ign()),
            "detected change to FIPS flag; refusing to modify FIPS on a running cluster",
        ),
    ];
    let old = base();
    for (name, new, message) in cases {
        let err = check(&old, &new).expect_err(name);
        assert_eq!(err.to_string(), message, "{name}");
    }
}

#[test]
fn refusals_are_typed() {
    let old = base();
    assert_eq!(
        check(
            &old,
            &core_users(json!([{"name": "root", "passwordHash": "x"}]))
        ),
        Err(Unreconcilable::Passwd(PasswdChange::NonCoreUser))
    );
    assert_eq!(
        check(&old, &Cfg::new(json!({"fips": true}), base_ign())),
        Err(Unreconcilable::Fips)
    );
}

#[test]
fn fips_turned_off_is_refused_too() {
    let old = Cfg::new(json!({"fips": true}), base_ign());
    assert_eq!(check(&old, &base()), Err(Unreconcilable::Fips));
}

#[test]
fn changes_applied_in_place_are_allowed() {
    let cases: Vec<(&str, Cfg)> = vec![
        ("identical", base()),
        (
            "file contents, mode and new file",
            with_storage(json!({"files": [
                {"path": "/etc/a", "mode": 384, "contents": {"source": "data:,changed"}},
                {"path": "/etc/b", "contents": {"source": "data:,b"}}
            ]})),
        ),
        ("file removed", with_storage(json!({"files": []}))),
        (
            "units, dropins, mask",
            with(
                "systemd",
                json!({"units": [
                    {"name": "a.service", "contents": "[Unit]\nX=1", "enabled": false, "dropins": [{"name": "10-x.conf", "contents": "[Service]"}]},
                    {"name": "b.service", "mask": true}
                ]}),
            ),
        ),
        (
            "ssh keys",
            core_users(json!([{"name": "core", "sshAuthorizedKeys": ["k1", "k2"]}])),
        ),
        (
            "password hash only",
            core_users(json!([{"name": "core", "passwordHash": "$6$abc"}])),
        ),
        (
            "keys and password hash",
            core_users(
                json!([{"name": "core", "sshAuthorizedKeys": ["k1"], "passwordHash": "$6$abc"}]),
            ),
        ),
        ("users removed", core_users(json!([]))),
        ("passwd section removed", with("passwd", json!({}))),
        (
            "os image, kernel arguments, kernel type, extensions",
            Cfg::new(
                json!({
                    "osImageURL": "quay.io/os@sha256:2",
                    "kernelArguments": ["nosmt", " baz=test bar=\"hello world\""],
                    "kernelType": "realtime",
                    "extensions": ["usbguard"]
                }),
                base_ign(),
            ),
        ),
        (
            "empty lists instead of absent sections",
            with_storage(
                json!({"directories": [], "links": [], "disks": [], "filesystems": [], "raid": []}),
            ),
        ),
    ];
    let old = base();
    for (name, new) in cases {
        assert_eq!(check(&old, &new), Ok(()), "{name}");
    }
}

#[test]
fn removing_links_is_allowed_but_changing_them_is_not() {
    let old = with_storage(json!({"links": [{"path": "/etc/l", "target": "/etc/a"}]}));
    assert_eq!(check(&old, &base()), Ok(()));
    let changed = with_storage(json!({"links": [{"path": "/etc/l", "target": "/etc/b"}]}));
    assert_eq!(check(&old, &changed), Err(Unreconcilable::Links));
}

#[test]
fn storage_overrides_allow_disks_filesystems_and_raid() {
    let old = base();
    let disks = with_storage(json!({"disks": [{"device": "/dev/vdb"}]}));
    let filesystems =
        with_storage(json!({"filesystems": [{"device": "/dev/vdb1", "format": "xfs"}]}));
    let raid = with_storage(json!({"raid": [{"name": "md0", "level": "raid1"}]}));

    let all = StorageOverrides::from_names(&["Disks", "FileSystems", "Raid"]);
    assert_eq!(
        all,
        StorageOverrides {
            disks: true,
            filesystems: true,
            raid: true
        }
    );
    for new in [&disks, &filesystems, &raid] {
        assert_eq!(check_reconcilable(old.view(), new.view(), all), Ok(()));
    }

    let only_disks = StorageOverrides::from_names(&["Disks", "Bogus"]);
    assert_eq!(
        check_reconcilable(old.view(), disks.view(), only_disks),
        Ok(())
    );
    assert_eq!(
        check_reconcilable(old.view(), filesystems.view(), only_disks),
        Err(Unreconcilable::Filesystems)
    );
    assert_eq!(
        check_reconcilable(old.view(), raid.view(), only_disks),
        Err(Unreconcilable::Raid)
    );
    // Overrides never cover directories.
    let dirs = with_storage(json!({"directories": [{"path": "/etc/d"}]}));
    assert_eq!(
        check_reconcilable(old.view(), dirs.view(), all),
        Err(Unreconcilable::Directories)
    );
}

#[test]
fn rules_are_checked_in_upstreams_order() {
    let old = base();
    let mut ign = base_ign();
    ign["passwd"]["groups"] = json!([{"name": "g"}]);
    ign["kernelArguments"] = json!({"shouldExist": ["x"]});
    ign["storage"]["disks"] = json!([{"device": "/dev/vdb"}]);
    let all = Cfg::new(json!({"fips": true}), ign.clone());
    assert_eq!(
        check(&old, &all),
        Err(Unreconcilable::Passwd(PasswdChange::Groups))
    );

    ign["passwd"] = base_ign()["passwd"].clone();
    let kargs_first = Cfg::new(json!({"fips": true}), ign.clone());
    assert_eq!(
        check(&old, &kargs_first),
        Err(Unreconcilable::IgnitionKernelArguments)
    );

    ign.as_object_mut().unwrap().remove("kernelArguments");
    let disks_first = Cfg::new(json!({"fips": true}), ign);
    assert_eq!(check(&old, &disks_first), Err(Unreconcilable::Disks));
}

fn mc(name: &str, spec: Value) -> MachineConfig {
    MachineConfigBuilder::new(name).spec(spec).build()
}

#[test]
fn machine_config_wrapper_names_old_config_first_as_upstream() {
    let old = mc(
        "rendered-worker-aaa",
        json!({"config": ignition(base_ign())}),
    );
    let mut ign = base_ign();
    ign["storage"]["disks"] = json!([{"device": "/dev/vdb"}]);
    let new = mc("rendered-worker-bbb", json!({"config": ignition(ign)}));
    let err = check_machine_configs(&old, &new, StorageOverrides::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "new machineconfig \"rendered-worker-aaa\" is not reconcilable against \"rendered-worker-bbb\": ignition disks section contains changes"
    );
    assert!(matches!(
        err,
        ReconcileError::NotReconcilable {
            reason: Unreconcilable::Disks,
            ..
        }
    ));
}

#[test]
fn machine_config_wrapper_accepts_reconcilable_and_absent_configs() {
    let old = mc("old", json!({}));
    let new = mc("new", json!({"config": ignition(base_ign())}));
    assert_eq!(
        check_machine_configs(&old, &new, StorageOverrides::default()),
        Ok(())
    );
}

#[test]
fn machine_config_wrapper_reports_parse_and_validation_failures() {
    let good = mc("good", json!({"config": ignition(base_ign())}));
    let unparsable = mc(
        "broken",
        json!({"config": {"ignition": {"version": "9.9.9"}}}),
    );
    let err = check_machine_configs(&good, &unparsable, StorageOverrides::default()).unwrap_err();
    assert!(matches!(err, ReconcileError::ParseNew { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("parsing new Ignition config from machineconfig \"broken\" failed: "),
        "{err}"
    );

    let err = check_machine_configs(&unparsable, &good, StorageOverrides::default()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("parsing old Ignition config from machineconfig \"broken\" failed: "),
        "{err}"
    );

    let mut ign = base_ign();
    ign["storage"]["files"][0]["mode"] = json!(0o4755);
    let setuid = mc("setuid", json!({"config": ignition(ign)}));
    let err = check_machine_configs(&good, &setuid, StorageOverrides::default()).unwrap_err();
    assert!(matches!(err, ReconcileError::ValidateNew { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("validating new Ignition config from machineconfig \"setuid\" failed: "),
        "{err}"
    );
}
