//! Every validation rule, with the exact message users see (MC name, field path, reason).

use mco_api::MachineConfig;
use mco_render::ignition::{Violation, check_unit_name, is_normalised_absolute};
use mco_render::render::{RenderError, validate_machine_config};
use mco_testkit::MachineConfigBuilder;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn mc(name: &str, spec: Value) -> MachineConfig {
    MachineConfigBuilder::new(name)
        .role("worker")
        .spec(spec)
        .build()
}

fn files(list: Value) -> Value {
    json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": list}}})
}

fn units(list: Value) -> Value {
    json!({"config": {"ignition": {"version": "3.4.0"}, "systemd": {"units": list}}})
}

fn err(spec: Value) -> String {
    validate_machine_config(&mc("99-bad", spec))
        .unwrap_err()
        .to_string()
}

#[test]
fn each_rule_has_its_message() {
    let cases: Vec<(Value, &str)> = vec![
        (
            files(json!([{"path": "/a"}, {"path": "/b"}, {"path": "etc/../x"}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[2].path: must be absolute and normalised: "etc/../x""#,
        ),
        (
            files(json!([{"path": "/etc/../x"}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].path: must be absolute and normalised: "/etc/../x""#,
        ),
        (
            files(json!([{"path": "/etc//x"}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].path: must be absolute and normalised: "/etc//x""#,
        ),
        (
            files(json!([{"path": "/etc/x/"}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].path: must be absolute and normalised: "/etc/x/""#,
        ),
        (
            files(json!([{"path": "/etc/./x"}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].path: must be absolute and normalised: "/etc/./x""#,
        ),
        (
            json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"directories": [{"path": "var/x"}]}}}),
            r#"MachineConfig "99-bad": spec.config.storage.directories[0].path: must be absolute and normalised: "var/x""#,
        ),
        (
            json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"links": [{"path": "/l/../m", "target": "/x"}]}}}),
            r#"MachineConfig "99-bad": spec.config.storage.links[0].path: must be absolute and normalised: "/l/../m""#,
        ),
        (
            files(json!([{"path": "/usr/bin/tool", "mode": 0o4755}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].mode: invalid mode 04755 for /usr/bin/tool, cannot exceed 0777"#,
        ),
        (
            files(json!([{"path": "/tmp/x", "mode": 0o1777}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].mode: invalid mode 01777 for /tmp/x, cannot exceed 0777"#,
        ),
        (
            files(json!([{"path": "/etc/hosts", "append": [{"source": "data:,x"}]}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].append: append is not supported: "/etc/hosts""#,
        ),
        (
            files(json!([{"path": "/run/machine-config-daemon-force"}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].path: "/run/machine-config-daemon-force" is reserved for forcing a re-apply and may not be written by a MachineConfig"#,
        ),
        (
            json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"links": [{"path": "/run/machine-config-daemon-force", "target": "/x"}]}}}),
            r#"MachineConfig "99-bad": spec.config.storage.links[0].path: "/run/machine-config-daemon-force" is reserved for forcing a re-apply and may not be written by a MachineConfig"#,
        ),
        (
            files(json!([{"path": "/x", "contents": {"source": "https://example.com/x"}}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].contents.source: could not decode file content string: only data: URLs are supported, got "https://example.com/x""#,
        ),
        (
            files(json!([{"path": "/x", "contents": {"source": "data:;base64,%%%"}}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].contents.source: could not decode file content string: invalid base64 data: Invalid symbol 37, offset 0."#,
        ),
        (
            files(
                json!([{"path": "/x", "contents": {"compression": "gzip", "source": "data:,x"}}]),
            ),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].contents.source: failed decompressing: unexpected end of file"#,
        ),
        (
            files(
                json!([{"path": "/x", "contents": {"compression": "bzip2", "source": "data:,x"}}]),
            ),
            r#"MachineConfig "99-bad": spec.config.storage.files[0].contents.compression: unsupported compression type "bzip2""#,
        ),
        (
            files(json!([{"path": "/x"}, {"path": "/y"}, {"path": "/x"}])),
            r#"MachineConfig "99-bad": spec.config.storage.files[2].path: duplicate entry "/x", already defined at storage.files[0]"#,
        ),
        (
            json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "/x"}], "directories": [{"path": "/x"}]}}}),
            r#"MachineConfig "99-bad": spec.config.storage.directories[0].path: duplicate entry "/x", already defined at storage.files[0]"#,
        ),
        (
            units(json!([{"name": "mydaemon"}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[0].name: invalid unit name "mydaemon": missing unit type suffix"#,
        ),
        (
            units(json!([{"name": "ok.service"}, {"name": "x.conf"}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[1].name: invalid unit name "x.conf": unknown unit type suffix (want .service, .socket, .target, .timer, .path, .mount, .automount, .swap, .slice, .scope or .device)"#,
        ),
        (
            units(json!([{"name": "my daemon.service"}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[0].name: invalid unit name "my daemon.service": contains characters other than [A-Za-z0-9:_.-@\]"#,
        ),
        (
            units(json!([{"name": ".service"}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[0].name: invalid unit name ".service": empty name before the type suffix"#,
        ),
        (
            units(json!([{"name": "a@b@c.service"}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[0].name: invalid unit name "a@b@c.service": misplaced '@'"#,
        ),
        (
            units(json!([{"name": "a.service"}, {"name": "a.service"}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[1].name: duplicate entry "a.service", already defined at systemd.units[0]"#,
        ),
        (
            units(json!([{"name": "crio.service", "dropins": [{"name": "10-x"}]}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[0].dropins[0].name: invalid dropin name "10-x": must end with ".conf" and contain no '/'"#,
        ),
        (
            units(json!([{"name": "crio.service", "dropins": [{"name": "../x.conf"}]}])),
            r#"MachineConfig "99-bad": spec.config.systemd.units[0].dropins[0].name: invalid dropin name "../x.conf": must end with ".conf" and contain no '/'"#,
        ),
        (
            json!({"config": {"ignition": {"version": "3.2.0"}, "passwd": {"users": [{"name": "core"}, {"name": "core"}]}}}),
            r#"MachineConfig "99-bad": spec.config.passwd.users[1].name: duplicate entry "core", already defined at passwd.users[0]"#,
        ),
        (
            json!({"kernelType": "lowlatency"}),
            r#"MachineConfig "99-bad": spec.kernelType: kernelType=lowlatency is invalid"#,
        ),
        (
            json!({"extensions": ["usbguard", "wasm", "vim"]}),
            r#"MachineConfig "99-bad": spec.extensions: invalid extensions found: [wasm vim]"#,
        ),
        (
            json!({"kernelType": "64k-pages", "extensions": ["kernel-devel"]}),
            r#"MachineConfig "99-bad": spec.extensions: installing kernel-devel extension is not supported with kernelType: 64k-pages"#,
        ),
        (
            json!({"config": {"ignition": {"version": "3.6.0"}}}),
            r#"MachineConfig "99-bad": spec.config.ignition.version: parsing Ignition config failed: unknown version. Supported spec versions: 2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5"#,
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(err(spec.clone()), want, "spec: {spec}");
    }
}

#[test]
fn valid_configs_pass() {
    let ok = [
        json!({}),
        json!({"kernelArguments": ["nosmt"]}),
        json!({"config": null}),
        json!({"config": {}}),
        json!({"kernelType": "realtime"}),
        json!({"kernelType": "default", "extensions": ["kernel-devel", "sysstat"]}),
        json!({"kernelType": "", "extensions": ["two-node-ha", "ipsec", "usbguard", "kerberos", "sandboxed-containers"]}),
        files(json!([
            {"path": "/etc/mode-ok", "mode": 0o755},
            {"path": "/etc/empty"},
            {"path": "/etc/empty-source", "contents": {}},
            {"path": "/etc/empty-string", "contents": {"source": ""}},
            {"path": "/etc/ok", "mode": 0o777, "contents": {"source": "data:,ok", "compression": ""}}
        ])),
        units(json!([
            {"name": "getty@.service"},
            {"name": "getty@tty1.service"},
            {"name": "var-lib-x.mount"},
            {"name": "dev-disk-by\\x2dlabel.device"},
            {"name": "a.socket"}, {"name": "a.target"}, {"name": "a.timer"}, {"name": "a.path"},
            {"name": "a.automount"}, {"name": "a.swap"}, {"name": "a.slice"}, {"name": "a.scope"},
            {"name": "crio.service", "dropins": [{"name": "10-x.conf"}]}
        ])),
    ];
    for spec in ok {
        validate_machine_config(&mc("99-ok", spec.clone()))
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

#[test]
fn errors_carry_mc_and_field() {
    let e = validate_machine_config(&mc("99-x", files(json!([{"path": "/x", "mode": 0o2755}]))))
        .unwrap_err();
    assert_eq!(e.machine_config(), Some("99-x"));
    match e {
        RenderError::Config {
            mc,
            field,
            violation,
        } => {
            assert_eq!(mc, "99-x");
            assert_eq!(field, "spec.config.storage.files[0].mode");
            assert_eq!(
                violation,
                Violation::Mode {
                    mode: 0o2755,
                    path: "/x".into()
                }
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn path_and_unit_name_helpers() {
    for (p, ok) in [
        ("/", true),
        ("/etc", true),
        ("/etc/a.b/c", true),
        ("", false),
        ("etc", false),
        ("//etc", false),
        ("/etc/", false),
        ("/..", false),
        ("/.", false),
        ("/a/../b", false),
    ] {
        assert_eq!(is_normalised_absolute(p), ok, "{p}");
    }
    assert!(check_unit_name(&format!("{}.service", "a".repeat(247))).is_ok());
    assert_eq!(
        check_unit_name(&format!("{}.service", "a".repeat(248))),
        Err("longer than 255 characters")
    );
}
