//! On-disk validation with upstream's messages: files (plain and compressed), modes, dropins,
//! units, masks, enablement, OS image and kernel arguments.

use crate::support;

use std::io::Write;

use base64::Engine as _;
use mco_daemon::engine::{RecordingReporter, UpdateOptions};
use mco_daemon::host::fs::FileAttrs;
use serde_json::json;
use support::{Node, URL_122, file, ign, mc};

const SVC: &str = "[Unit]\nDescription=e2e\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";

fn gz_file(path: &str, content: &str) -> serde_json::Value {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(content.as_bytes()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(enc.finish().unwrap());
    json!({
        "path": path,
        "contents": {"source": format!("data:;base64,{b64}"), "compression": "gzip"},
        "mode": 420,
    })
}

/// The drift suite's config, applied to a fresh node.
fn drift_node() -> (Node, mco_api::MachineConfig) {
    let node = Node::new(false);
    let cfg = ign(
        json!([
            file("/etc/etc-file", "etc-file data", 0o644),
            file("/etc/etc-file-two", "etc-file-two data", 0o644),
            gz_file("/etc/compressed-file", "compressed data"),
        ]),
        json!([
            {"name": "e2etest.service", "enabled": true, "contents": SVC, "dropins": [
                {"name": "10-e2etest-service.conf", "contents": "[Service]\nEnvironment=A=1\n"},
                {"name": "20-e2etest-service.conf"},
            ]},
            {"name": "mask-and-contents.service", "mask": true, "contents": SVC},
        ]),
    );
    let old = mc("rendered-infra-0", "", ign(json!([]), json!([])));
    let new = mc("rendered-infra-1", "", cfg);
    node.engine()
        .update(
            &old,
            &new,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
        .unwrap();
    node.engine().validate(&new).unwrap();
    (node, new)
}

fn err(node: &Node, mc: &mco_api::MachineConfig) -> String {
    node.engine().validate(mc).unwrap_err().to_string()
}

#[test]
fn content_drift_plain_compressed_dropin_unit() {
    let (node, mc) = drift_node();
    for path in [
        "/etc/etc-file",
        "/etc/compressed-file",
        "/etc/systemd/system/e2etest.service.d/10-e2etest-service.conf",
        "/etc/systemd/system/e2etest.service",
    ] {
        let orig = node.fs.read(path).unwrap();
        let mode = node.mode(path);
        node.fs
            .write_atomic(path, b"not-the-data", &FileAttrs::mode(mode))
            .unwrap();
        assert_eq!(
            err(&node, &mc),
            format!(
                "unexpected on-disk state validating against rendered-infra-1: content mismatch for file \"{path}\""
            )
        );
        node.fs
            .write_atomic(path, &orig, &FileAttrs::mode(mode))
            .unwrap();
        node.engine().validate(&mc).unwrap();
    }
}

#[test]
fn mode_drift() {
    let (node, mc) = drift_node();
    node.fs
        .write_atomic("/etc/etc-file", b"etc-file data", &FileAttrs::mode(0o600))
        .unwrap();
    assert_eq!(
        err(&node, &mc),
        "unexpected on-disk state validating against rendered-infra-1: mode mismatch for file: \"/etc/etc-file\"; expected: -rw-r--r--/420/0644; received: -rw-------/384/0600"
    );
}

#[test]
fn missing_file_and_unexpected_empty_dropin() {
    let (node, mc) = drift_node();
    node.fs
        .write_atomic(
            "/etc/systemd/system/e2etest.service.d/20-e2etest-service.conf",
            b"x",
            &FileAttrs::default(),
        )
        .unwrap();
    assert!(err(&node, &mc).contains("20-e2etest-service.conf has no content but exists"));
    node.fs
        .remove_file("/etc/systemd/system/e2etest.service.d/20-e2etest-service.conf")
        .unwrap();
    node.fs.remove_file("/etc/etc-file-two").unwrap();
    assert!(
        err(&node, &mc).ends_with("could not stat file \"/etc/etc-file-two\": stat /etc/etc-file-two: no such file or directory"),
        "{}",
        err(&node, &mc)
    );
}

/// OCPBUGS-3909: a masked unit is judged by its mask only.
#[test]
fn masked_unit_never_degrades_but_unmasking_does() {
    let (node, mc) = drift_node();
    // Writing through the mask lands in the link target, never in a unit file.
    assert!(
        node.fs
            .read_link("/etc/systemd/system/mask-and-contents.service")
            .unwrap()
            .is_some()
    );
    node.engine().validate(&mc).unwrap();
    node.fs
        .remove_file("/etc/systemd/system/mask-and-contents.service")
        .unwrap();
    assert_eq!(
        err(&node, &mc),
        "unexpected on-disk state validating against rendered-infra-1: state validation: invalid unit masked setting. path: /etc/systemd/system/mask-and-contents.service"
    );
}

#[test]
fn enablement_drift() {
    let (node, mc) = drift_node();
    node.engine()
        .host
        .systemd
        .disable(&["e2etest.service".to_string()])
        .unwrap();
    assert_eq!(
        err(&node, &mc),
        "unexpected on-disk state validating against rendered-infra-1: unit \"e2etest.service\" expected enabled=true, but systemd reports \"disabled\""
    );
}

#[test]
fn os_image_mismatch_on_adopted_host_has_no_adoption_hint() {
    let node = Node::new(true);
    let m = mc("rendered-worker-1", URL_122, ign(json!([]), json!([])));
    let old = mc("rendered-worker-0", "", ign(json!([]), json!([])));
    node.engine()
        .update(
            &old,
            &m,
            UpdateOptions::default(),
            &mut RecordingReporter::default(),
        )
        .unwrap();
    node.sim_ostree().finalize_reboot().unwrap();
    node.engine().validate(&m).unwrap();
    let other = mc(
        "rendered-worker-1",
        "example.com/os:2",
        ign(json!([]), json!([])),
    );
    assert_eq!(
        err(&node, &other),
        format!(
            "unexpected on-disk state validating against rendered-worker-1: expected target osImageURL \"example.com/os:2\", have \"{URL_122}\""
        )
    );
}
