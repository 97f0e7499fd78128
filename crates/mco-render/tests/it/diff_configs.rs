//! ConfigDiff: which files, units, users, OS fields and Ignition sections changed.

use mco_api::MachineConfigSpec;
use mco_render::diff::{
    ChangeSet, ConfigDiff, ConfigView, SectionChanges, canonical_kernel_type,
    split_kernel_arguments,
};
use mco_render::ignition::Ignition;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Cfg {
    spec: MachineConfigSpec,
    ign: Ignition,
}

impl Cfg {
    fn new(spec: Value, ign: Value) -> Self {
        let mut ign_obj = json!({"ignition": {"version": "3.5.0"}});
        for (k, v) in ign.as_object().cloned().unwrap_or_default() {
            ign_obj[k] = v;
        }
        Self {
            spec: serde_json::from_value(spec).expect("spec"),
            ign: serde_json::from_value(ign_obj).expect("ignition"),
        }
    }
    fn ign(ign: Value) -> Self {
        Self::new(json!({}), ign)
    }
    fn spec(spec: Value) -> Self {
        Self::new(spec, json!({}))
    }
    fn view(&self) -> ConfigView<'_> {
        ConfigView::new(&self.spec, &self.ign)
    }
}

fn diff(a: &Cfg, b: &Cfg) -> ConfigDiff {
    ConfigDiff::between(a.view(), b.view())
}

fn file(path: &str, data: &str) -> Value {
    json!({"path": path, "contents": {"source": format!("data:,{data}")}})
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn set(added: &[&str], changed: &[&str], removed: &[&str]) -> ChangeSet {
    ChangeSet {
        added: strings(added),
        changed: strings(changed),
        removed: strings(removed),
    }
}

#[test]
fn identical_configs_have_an_empty_diff() {
    let a = Cfg::new(
        json!({"osImageURL": "img@sha256:1", "kernelArguments": ["a"], "extensions": ["usbguard"]}),
        json!({"storage": {"files": [file("/etc/a", "x")]}, "systemd": {"units": [{"name": "a.service", "enabled": true}]}}),
    );
    let b = Cfg::new(
        json!({"osImageURL": "img@sha256:1", "kernelArguments": ["a"], "extensions": ["usbguard"]}),
        json!({"storage": {"files": [file("/etc/a", "x")]}, "systemd": {"units": [{"name": "a.service", "enabled": true}]}}),
    );
    let d = diff(&a, &b);
    assert!(d.is_empty(), "{d:?}");
    assert!(!d.needs_os_update());
}

#[test]
fn absent_and_empty_lists_are_the_same_config() {
    let a = Cfg::ign(json!({}));
    let b = Cfg::new(
        json!({"kernelArguments": [], "extensions": []}),
        json!({
            "storage": {"files": [], "directories": [], "links": [], "disks": [], "filesystems": [], "raid": []},
            "systemd": {"units": []},
            "passwd": {"users": [], "groups": []},
            "kernelArguments": {"shouldExist": []}
        }),
    );
    let d = diff(&a, &b);
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn files_are_added_changed_and_removed_by_path() {
    let old = Cfg::ign(json!({"storage": {"files": [
        file("/etc/same", "s"),
        file("/etc/content", "1"),
        {"path": "/etc/mode", "mode": 420, "contents": {"source": "data:,m"}},
        {"path": "/etc/owner", "user": {"name": "root"}, "contents": {"source": "data:,o"}},
        file("/etc/gone", "g"),
    ]}}));
    let new = Cfg::ign(json!({"storage": {"files": [
        file("/etc/same", "s"),
        file("/etc/content", "2"),
        {"path": "/etc/mode", "mode": 384, "contents": {"source": "data:,m"}},
        {"path": "/etc/owner", "user": {"name": "core"}, "contents": {"source": "data:,o"}},
        file("/etc/new", "n"),
    ]}}));
    let d = diff(&old, &new);
    assert_eq!(
        d.files,
        set(
            &["/etc/new"],
            &["/etc/content", "/etc/mode", "/etc/owner"],
            &["/etc/gone"]
        )
    );
    assert_eq!(
        d.files.all(),
        vec![
            "/etc/content",
            "/etc/gone",
            "/etc/mode",
            "/etc/new",
            "/etc/owner"
        ]
    );
    assert!(d.units.is_empty());
    assert!(d.registries_conf.is_none());
    assert!(!d.sections.any());
}

#[test]
fn a_later_duplicate_path_wins() {
    let old = Cfg::ign(json!({"storage": {"files": [file("/etc/a", "1"), file("/etc/a", "2")]}}));
    let new = Cfg::ign(json!({"storage": {"files": [file("/etc/a", "2")]}}));
    assert!(diff(&old, &new).files.is_empty());
}

#[test]
fn units_change_by_contents_dropins_enabled_and_mask() {
    let old = Cfg::ign(json!({"systemd": {"units": [
        {"name": "contents.service", "contents": "[Unit]\nA=1"},
        {"name": "dropins.service", "dropins": [{"name": "10-a.conf", "contents": "x"}]},
        {"name": "enabled.service", "enabled": true},
        {"name": "mask.service"},
        {"name": "same.service", "contents": "s"},
        {"name": "gone.service", "contents": "g"},
    ]}}));
    let new = Cfg::ign(json!({"systemd": {"units": [
        {"name": "contents.service", "contents": "[Unit]\nA=2"},
        {"name": "dropins.service", "dropins": [{"name": "10-a.conf", "contents": "y"}]},
        {"name": "enabled.service", "enabled": false},
        {"name": "mask.service", "mask": true},
        {"name": "same.service", "contents": "s"},
        {"name": "added.service", "contents": "n"},
    ]}}));
    let d = diff(&old, &new);
    assert_eq!(
        d.units,
        set(
            &["added.service"],
            &[
                "contents.service",
                "dropins.service",
                "enabled.service",
                "mask.service"
            ],
            &["gone.service"]
        )
    );
    assert!(d.files.is_empty());
    assert!(!d.needs_os_update());
}

#[test]
fn core_ssh_keys_and_password_hash_are_tracked_separately() {
    let base =
        Cfg::ign(json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1"]}]}}));
    let keys = Cfg::ign(
        json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2"]}]}}),
    );
    let hash = Cfg::ign(
        json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1"], "passwordHash": "$6$x"}]}}),
    );

    let d = diff(&base, &keys);
    assert!(d.passwd_changed && d.ssh_keys_changed && !d.password_hash_changed);
    assert!(!d.sections.any());

    let d = diff(&base, &hash);
    assert!(d.passwd_changed && !d.ssh_keys_changed && d.password_hash_changed);
    assert!(!d.sections.any());

    let d = diff(&base, &Cfg::ign(json!({})));
    assert!(d.passwd_changed && d.ssh_keys_changed);
}

type SetFlag = fn(&mut SectionChanges);

#[test]
fn other_passwd_and_storage_sections_are_reported() {
    let core = json!([{"name": "core", "sshAuthorizedKeys": ["k"]}]);
    let base = Cfg::ign(json!({"passwd": {"users": core}}));
    let with_storage = |storage: Value| json!({"passwd": {"users": core}, "storage": storage});
    let cases: Vec<(&str, Value, SetFlag)> = vec![
        (
            "groups",
            json!({"passwd": {"users": core, "groups": [{"name": "g"}]}}),
            |s| s.passwd_groups = true,
        ),
        (
            "other user",
            json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k"]}, {"name": "bob"}]}}),
            |s| s.passwd_other_users = true,
        ),
        (
            "core shell",
            json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k"], "shell": "/bin/zsh"}]}}),
            |s| s.core_user_other_fields = true,
        ),
        (
            "ignition kargs",
            json!({"passwd": {"users": core}, "kernelArguments": {"shouldExist": ["x"]}}),
            |s| s.ignition_kernel_arguments = true,
        ),
        (
            "disks",
            with_storage(json!({"disks": [{"device": "/dev/vdb"}]})),
            |s| s.disks = true,
        ),
        (
            "filesystems",
            with_storage(json!({"filesystems": [{"device": "/dev/vdb1", "format": "xfs"}]})),
            |s| s.filesystems = true,
        ),
        (
            "raid",
            with_storage(
                json!({"raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/a", "/dev/b"]}]}),
            ),
            |s| s.raid = true,
        ),
        (
            "luks",
            with_storage(json!({"luks": [{"name": "root", "device": "/dev/vda4"}]})),
            |s| s.luks = true,
        ),
        (
            "directories",
            with_storage(json!({"directories": [{"path": "/etc/d"}]})),
            |s| s.directories = true,
        ),
        (
            "links",
            with_storage(json!({"links": [{"path": "/etc/l", "target": "/etc/t"}]})),
            |s| s.links = true,
        ),
    ];
    for (name, ign, set_flag) in cases {
        let d = diff(&base, &Cfg::ign(ign));
        let mut want = SectionChanges::default();
        set_flag(&mut want);
        assert_eq!(d.sections, want, "{name}");
        assert!(d.sections.any(), "{name}");
    }
}

#[test]
fn os_image_kernel_type_extensions_and_fips() {
    let base = Cfg::spec(
        json!({"osImageURL": "quay.io/os@sha256:1", "extensions": ["usbguard", "kerberos"]}),
    );

    let d = diff(
        &base,
        &Cfg::spec(
            json!({"osImageURL": "quay.io/os@sha256:2", "extensions": ["usbguard", "kerberos"]}),
        ),
    );
    assert!(d.os_image_changed && d.needs_os_update());
    assert!(!d.extensions_changed);

    let d = diff(
        &base,
        &Cfg::spec(
            json!({"osImageURL": "quay.io/os@sha256:1", "extensions": ["usbguard", "sysstat"]}),
        ),
    );
    assert!(d.extensions_changed && d.needs_os_update());
    assert_eq!(d.extensions_added, strings(&["sysstat"]));
    assert_eq!(d.extensions_removed, strings(&["kerberos"]));
    assert!(!d.os_image_changed);

    let d = diff(
        &base,
        &Cfg::spec(
            json!({"osImageURL": "quay.io/os@sha256:1", "extensions": ["usbguard", "kerberos"], "kernelType": "realtime"}),
        ),
    );
    assert!(d.kernel_type_changed && d.needs_os_update());

    let d = diff(
        &base,
        &Cfg::spec(
            json!({"osImageURL": "quay.io/os@sha256:1", "extensions": ["usbguard", "kerberos"], "kernelType": "default"}),
        ),
    );
    assert!(
        !d.kernel_type_changed,
        "\"\" and \"default\" are the same kernel"
    );

    let d = diff(
        &base,
        &Cfg::spec(
            json!({"osImageURL": "quay.io/os@sha256:1", "extensions": ["usbguard", "kerberos"], "fips": true}),
        ),
    );
    assert!(d.fips_changed && d.needs_os_update());
}

#[test]
fn kernel_type_canonicalisation() {
    for (input, want) in [
        ("", "default"),
        ("default", "default"),
        ("realtime", "realtime"),
        ("64k-pages", "64k-pages"),
        ("bogus", "default"),
    ] {
        assert_eq!(canonical_kernel_type(input), want, "{input:?}");
    }
}

#[test]
fn kernel_arguments_split_like_the_kernel() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["nosmt", "foo=bar", "foo=baz"],
            &["nosmt", "foo=bar", "foo=baz"],
        ),
        (
            &[" baz=test bar=\"hello world\""],
            &["baz=test", "bar=\"hello world\""],
        ),
        (
            &["bar=1 hello=world", "baz"],
            &["bar=1", "hello=world", "baz"],
        ),
        (&["  a\tb\n"], &["a", "b"]),
        (&["", "   "], &[]),
    ];
    for (input, want) in cases {
        assert_eq!(
            split_kernel_arguments(&strings(input)),
            strings(want),
            "{input:?}"
        );
    }
}

#[test]
fn kernel_arguments_diff_as_multisets() {
    let old = Cfg::spec(
        json!({"kernelArguments": ["nosmt", "foo=bar", "foo=bar", "hugepagesz=2M hugepages=4"]}),
    );
    let new = Cfg::spec(
        json!({"kernelArguments": ["nosmt", "foo=bar", "hugepagesz=2M hugepages=6", " baz=test bar=\"hello world\""]}),
    );
    let d = diff(&old, &new);
    assert!(d.kernel_arguments_changed && d.needs_os_update());
    assert_eq!(
        d.kernel_arguments_added,
        strings(&["hugepages=6", "baz=test", "bar=\"hello world\""])
    );
    assert_eq!(
        d.kernel_arguments_removed,
        strings(&["foo=bar", "hugepages=4"])
    );
}

#[test]
fn kernel_arguments_regrouped_into_entries_are_unchanged() {
    let old = Cfg::spec(json!({"kernelArguments": ["a b", "c"]}));
    let new = Cfg::spec(json!({"kernelArguments": ["a", "b c"]}));
    let d = diff(&old, &new);
    assert!(!d.kernel_arguments_changed, "{d:?}");
    assert!(d.is_empty());
}

#[test]
fn reordered_kernel_arguments_change_without_additions() {
    let old = Cfg::spec(json!({"kernelArguments": ["a", "b"]}));
    let new = Cfg::spec(json!({"kernelArguments": ["b", "a"]}));
    let d = diff(&old, &new);
    assert!(d.kernel_arguments_changed);
    assert!(d.kernel_arguments_added.is_empty() && d.kernel_arguments_removed.is_empty());
}

#[test]
fn registries_conf_entries_are_kept_for_the_drain_decision() {
    let old =
        Cfg::ign(json!({"storage": {"files": [file("/etc/containers/registries.conf", "a")]}}));
    let new =
        Cfg::ign(json!({"storage": {"files": [file("/etc/containers/registries.conf", "b")]}}));
    let d = diff(&old, &new);
    let change = d.registries_conf.expect("registries.conf changed");
    assert_eq!(
        change.old.unwrap().contents.unwrap().source.as_deref(),
        Some("data:,a")
    );
    assert_eq!(
        change.new.unwrap().contents.unwrap().source.as_deref(),
        Some("data:,b")
    );

    let removed = diff(&old, &Cfg::ign(json!({})));
    let change = removed.registries_conf.expect("registries.conf removed");
    assert!(change.old.is_some() && change.new.is_none());
}

/// Upstream TestKernelArguments' input: unquoted, `bar=hello world` is split as the kernel splits
/// it, but order is kept, so the resulting command line still reads `bar=hello world`.
#[test]
fn upstream_e2e_kernel_arguments_keep_their_order_on_the_command_line() {
    let input = strings(&["nosmt", "foo=bar", "foo=baz", " baz=test bar=hello world"]);
    let split = split_kernel_arguments(&input);
    assert_eq!(
        split,
        strings(&[
            "nosmt",
            "foo=bar",
            "foo=baz",
            "baz=test",
            "bar=hello",
            "world"
        ])
    );
    let cmdline = split.join(" ");
    for expected in ["nosmt", "foo=bar", "foo=baz", "baz=test", "bar=hello world"] {
        assert!(cmdline.contains(expected), "{expected:?} in {cmdline:?}");
    }
}
