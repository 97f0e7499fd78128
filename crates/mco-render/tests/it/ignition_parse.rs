//! Parsing every supported Ignition version into the internal 3.5.0, translating 2.2, and decoding
//! `data:` URLs.

use std::io::Write;

use base64::Engine;
use mco_render::ignition::{self, IgnitionError, decode_data_url, parse};
use pretty_assertions::assert_eq;
use serde_json::json;

const UNKNOWN: &str = "parsing Ignition config failed: unknown version. Supported spec versions: 2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5";
const INVALID: &str = "parsing Ignition config failed: invalid version. Supported spec versions: 2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5";

fn with_file(version: &str) -> serde_json::Value {
    json!({
        "ignition": {"version": version},
        "storage": {"files": [{"path": "/etc/x", "mode": 420, "contents": {"source": "data:,x"}}]},
        "systemd": {"units": [{"name": "x.service", "enabled": true}]}
    })
}

#[test]
fn every_3x_version_converts_to_3_5_0() {
    for v in ["3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"] {
        let cfg = parse(&with_file(v)).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(cfg.ignition.version, "3.5.0", "{v}");
        let files = cfg.storage.unwrap().files.unwrap();
        assert_eq!(files[0].path, "/etc/x", "{v}");
        assert_eq!(files[0].mode, Some(420), "{v}");
        assert_eq!(
            cfg.systemd.unwrap().units.unwrap()[0].enabled,
            Some(true),
            "{v}"
        );
    }
}

#[test]
fn fields_the_declared_version_lacks_are_dropped() {
    // kernelArguments arrived in 3.3: a 3.2 config cannot carry them.
    let raw = |v: &str| json!({"ignition": {"version": v}, "kernelArguments": {"shouldExist": ["nosmt"]}});
    assert_eq!(parse(&raw("3.2.0")).unwrap().kernel_arguments, None);
    assert_eq!(
        parse(&raw("3.3.0"))
            .unwrap()
            .kernel_arguments
            .unwrap()
            .should_exist,
        Some(vec!["nosmt".to_string()])
    );
}

#[test]
fn version_errors_use_upstream_text() {
    let cases: &[(serde_json::Value, &str)] = &[
        (json!({"ignition": {"version": "3.6.0"}}), UNKNOWN),
        (json!({"ignition": {"version": "2.3.0"}}), UNKNOWN),
        (json!({"ignition": {"version": "4.0.0"}}), UNKNOWN),
        (
            json!({"ignition": {"version": "3.0.0-experimental"}}),
            UNKNOWN,
        ),
        (json!({"ignition": {"version": "three"}}), INVALID),
        (json!({"ignition": {"version": "3.2"}}), INVALID),
        (json!({"ignition": {}}), INVALID),
        (json!({"storage": {}}), INVALID),
    ];
    for (raw, want) in cases {
        assert_eq!(parse(raw).unwrap_err().to_string(), *want, "{raw}");
    }
}

#[test]
fn empty_configs_are_valid() {
    for raw in [json!(null), json!({})] {
        let cfg = parse(&raw).unwrap();
        assert_eq!(cfg, ignition::empty());
        assert_eq!(cfg.ignition.version, "3.5.0");
    }
}

#[test]
fn schema_errors_name_the_version() {
    let raw = json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "/x", "mode": "0644"}]}});
    let err = parse(&raw).unwrap_err();
    assert!(matches!(err, IgnitionError::Schema { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("parsing Ignition config spec v3.2.0 failed with error: invalid type"),
        "{err}"
    );
    assert_eq!(
        parse(&json!("text")).unwrap_err().to_string(),
        "Ignition config must be a JSON object, got a string"
    );
}

#[test]
fn spec_2_2_is_translated() {
    let raw = json!({
        "ignition": {"version": "2.2.0", "config": {}, "security": {"tls": {}}, "timeouts": {}},
        "networkd": {},
        "passwd": {"users": [
            {"name": "core", "sshAuthorizedKeys": ["key-a", "key-b"]},
            {"name": "core", "sshAuthorizedKeys": ["key-c", "key-a"]}
        ]},
        "storage": {
            "files": [
                {"filesystem": "root", "path": "/etc/a", "mode": 420, "contents": {"source": "data:,one", "verification": {}}},
                {"filesystem": "root", "path": "/etc/b", "contents": {"source": "data:,b"}, "user": {"name": "core"}},
                {"filesystem": "root", "path": "/etc/a", "mode": 384, "contents": {"source": "data:,two"}},
                {"filesystem": "root", "path": "/etc/log", "append": true, "contents": {"source": "data:,line"}}
            ],
            "directories": [{"filesystem": "root", "path": "/etc/d", "mode": 493}],
            "links": [{"filesystem": "root", "path": "/etc/l", "target": "/etc/a"}]
        },
        "systemd": {"units": [
            {"name": "u.service", "contents": "[Service]\n", "dropins": [{"name": "a.conf", "contents": "A"}, {"name": "c.conf", "contents": "C"}]},
            {"name": "u.service", "enable": true, "dropins": [{"name": "b.conf", "contents": "B"}, {"name": "a.conf", "contents": "A2"}]}
        ]}
    });
    let cfg = parse(&raw).unwrap();
    assert_eq!(cfg.ignition.version, "3.5.0");
    let storage = cfg.storage.unwrap();
    let files = storage.files.unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/etc/b", "/etc/a", "/etc/log"]);
    let a = &files[1];
    assert_eq!(a.mode, Some(384), "the last /etc/a wins");
    assert_eq!(
        a.contents.as_ref().unwrap().source.as_deref(),
        Some("data:,two")
    );
    assert_eq!(
        files[0].user.as_ref().unwrap().name.as_deref(),
        Some("core")
    );
    assert!(files[2].contents.is_none());
    assert_eq!(
        files[2].append.as_ref().unwrap()[0].source.as_deref(),
        Some("data:,line")
    );
    assert_eq!(storage.directories.unwrap()[0].mode, Some(493));
    assert_eq!(storage.links.unwrap()[0].target.as_deref(), Some("/etc/a"));

    let units = cfg.systemd.unwrap().units.unwrap();
    assert_eq!(units.len(), 1);
    assert_eq!(
        units[0].enabled,
        Some(true),
        "`enable` folds into `enabled`"
    );
    assert_eq!(
        units[0].contents, None,
        "the last entry of a unit wins, as upstream"
    );
    let dropins: Vec<(&str, Option<&str>)> = units[0]
        .dropins
        .iter()
        .flatten()
        .map(|d| (d.name.as_str(), d.contents.as_deref()))
        .collect();
    // The later unit entry wins; earlier dropins with new names are added.
    assert_eq!(
        dropins,
        [
            ("b.conf", Some("B")),
            ("a.conf", Some("A2")),
            ("c.conf", Some("C"))
        ]
    );

    let users = cfg.passwd.unwrap().users.unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(
        users[0].ssh_authorized_keys.as_deref().unwrap(),
        ["key-c", "key-a", "key-b"]
    );
}

#[test]
fn spec_2_2_refusals_say_why() {
    let cases = [
        (
            json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"filesystem": "data", "path": "/x"}]}}),
            "translating Ignition config spec v2.2 to v3 failed: file \"/x\" is on filesystem \"data\"; only \"root\" can be translated",
        ),
        (
            json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"path": "/x"}]}}),
            "translating Ignition config spec v2.2 to v3 failed: file \"/x\" has no filesystem; spec 2.2 requires one (use \"root\")",
        ),
        (
            json!({"ignition": {"version": "2.2.0"}, "passwd": {"users": [{"name": "admin"}]}}),
            "translating Ignition config spec v2.2 to v3 failed: unexpected user with name: admin. Only core user is supported",
        ),
        (
            json!({"ignition": {"version": "2.2.0"}, "networkd": {"units": [{"name": "x.network"}]}}),
            "translating Ignition config spec v2.2 to v3 failed: networkd units have no spec 3 equivalent; write NetworkManager files instead",
        ),
        (
            json!({"ignition": {"version": "2.2.0"}, "storage": {"filesystems": [{"name": "data"}]}}),
            "translating Ignition config spec v2.2 to v3 failed: storage.filesystems cannot be translated; rewrite this MachineConfig in spec 3",
        ),
    ];
    for (raw, want) in cases {
        assert_eq!(parse(&raw).unwrap_err().to_string(), want);
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

#[test]
fn data_urls_decode() {
    let b64 = base64::engine::general_purpose::STANDARD;
    let gz = format!("data:;base64,{}", b64.encode(gzip(b"zipped\n")));
    let cases: Vec<(&str, Option<&str>, &[u8])> = vec![
        ("data:,hello%20world%0A", None, b"hello world\n"),
        ("data:,", None, b""),
        ("", None, b""),
        ("", Some(""), b""),
        ("data:;base64,aGVsbG8=", None, b"hello"),
        ("data:;base64,aGVsbG8", None, b"hello"),
        (
            "data:text/plain;charset=utf-8;base64,aGVsbG8=",
            Some(""),
            b"hello",
        ),
        ("data:text/plain;charset=utf-8,a%3Db", None, b"a=b"),
        ("data:,plain;base64", None, b"plain;base64"),
        (gz.as_str(), Some("gzip"), b"zipped\n"),
    ];
    for (src, comp, want) in cases {
        assert_eq!(
            decode_data_url(src, comp).unwrap_or_else(|e| panic!("{src}: {e}")),
            want,
            "{src}"
        );
    }
}

#[test]
fn bad_data_urls_fail() {
    let cases = [
        (
            "https://example.com/x",
            None,
            "could not decode file content string: only data: URLs are supported, got \"https://example.com/x\"",
        ),
        (
            "data:nocomma",
            None,
            "could not decode file content string: data URL has no ',' separator",
        ),
        (
            "data:;base64,***",
            None,
            "could not decode file content string: invalid base64 data: Invalid symbol 42, offset 0.",
        ),
        ("data:,x", Some("xz"), "unsupported compression type \"xz\""),
        (
            "data:,this%20is%20not%20gzip%20data",
            Some("gzip"),
            "failed decompressing: invalid gzip header",
        ),
    ];
    for (src, comp, want) in cases {
        assert_eq!(
            decode_data_url(src, comp).unwrap_err().to_string(),
            want,
            "{src}"
        );
    }
}
