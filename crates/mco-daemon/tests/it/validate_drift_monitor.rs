//! The config drift monitor over a simulated node: inotify on managed paths, re-validation, the
//! most recently drifted path named, masked units never degrading.

// Tests set up and inspect their temp roots directly.
#![allow(clippy::disallowed_methods)]

use crate::support;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use mco_daemon::engine::drift;
use mco_daemon::engine::plan::ParsedConfig;
use mco_daemon::engine::{RecordingReporter, UpdateOptions};
use mco_daemon::host::fs::FileAttrs;
use serde_json::json;
use support::{Node, file, ign, mc};

const SVC: &str = "[Unit]\nDescription=e2e\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";

fn node_with_config() -> (Node, mco_api::MachineConfig) {
    let node = Node::new(false);
    let cfg = ign(
        json!([
            file("/etc/etc-file", "one", 0o644),
            file("/etc/etc-file-two", "two", 0o644),
        ]),
        json!([
            {"name": "e2etest.service", "contents": SVC, "dropins": [
                {"name": "10-e2etest-service.conf", "contents": "[Service]\nEnvironment=A=1\n"},
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
    (node, new)
}

fn monitor(
    node: &Node,
    mc: &mco_api::MachineConfig,
) -> (drift::DriftMonitor, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    let m = drift::start(
        Arc::new(node.engine()),
        ParsedConfig::new(mc).unwrap(),
        move |e| {
            let _ = tx.send(e.to_string());
        },
    )
    .unwrap();
    (m, rx)
}

fn drift(node: &Node, path: &str) {
    node.fs
        .write_atomic(path, b"not-the-data", &FileAttrs::default())
        .unwrap();
}

#[test]
fn drift_in_a_file_or_dropin_is_reported() {
    let (node, mc) = node_with_config();
    for path in [
        "/etc/etc-file",
        "/etc/systemd/system/e2etest.service.d/10-e2etest-service.conf",
    ] {
        let orig = node.fs.read(path).unwrap();
        let (_m, rx) = monitor(&node, &mc);
        drift(&node, path);
        let reason = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(
            reason,
            format!(
                "unexpected on-disk state validating against rendered-infra-1: content mismatch for file \"{path}\""
            )
        );
        node.fs
            .write_atomic(path, &orig, &FileAttrs::default())
            .unwrap();
        node.engine().validate(&mc).unwrap();
    }
}

/// Reading managed files (validation itself does) is not a change. A rewrite with the same
/// content validates and finds nothing; the drift after it validates once more.
#[test]
fn reads_do_not_trigger_validation() {
    let (node, mc) = node_with_config();
    let (m, rx) = monitor(&node, &mc);
    for _ in 0..5 {
        node.fs.read("/etc/etc-file").unwrap();
        node.fs.read("/etc/etc-file-two").unwrap();
    }
    node.fs
        .write_atomic("/etc/etc-file", b"one", &FileAttrs::default())
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while m.validations() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no validation after a rewrite"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..5 {
        node.fs.read("/etc/etc-file").unwrap();
    }
    drift(&node, "/etc/etc-file-two");
    let reason = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(reason.ends_with("\"/etc/etc-file-two\""), "{reason}");
    // The rewrite may reach the monitor as two bursts (the rename, then its attributes): one
    // or two validations for it, one for the drift. Reads acting as changes would make each
    // validation set off the next, and the count would run far past that.
    let n = m.validations();
    assert!((2..=3).contains(&n), "{n} validations");
}

/// BZ 2104978: with an older drift still present, the reason names the newest one.
#[test]
fn reason_names_the_most_recent_drift() {
    let (node, mc) = node_with_config();
    drift(&node, "/etc/etc-file");
    let (_m, rx) = monitor(&node, &mc);
    drift(&node, "/etc/etc-file-two");
    let reason = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(
        reason.ends_with("content mismatch for file \"/etc/etc-file-two\""),
        "{reason}"
    );
}

/// OCPBUGS-3909: writing to a masked unit lands in /dev/null and never degrades.
#[test]
fn masked_unit_never_degrades() {
    let (node, mc) = node_with_config();
    let (_m, rx) = monitor(&node, &mc);
    let masked = node
        .dir
        .path()
        .join("etc/systemd/system/mask-and-contents.service");
    std::fs::write(&masked, "not-the-data").unwrap();
    // Touch a managed path without changing it, then drift another: only that one is reported.
    node.fs
        .write_atomic("/etc/etc-file", b"one", &FileAttrs::default())
        .unwrap();
    drift(&node, "/etc/etc-file-two");
    let reason = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(
        reason.ends_with("content mismatch for file \"/etc/etc-file-two\""),
        "{reason}"
    );
    assert!(
        node.fs
            .read_link("/etc/systemd/system/mask-and-contents.service")
            .unwrap()
            .is_some()
    );
}

/// Monitors of one process share an inotify instance: each hears its own node's drift only.
#[test]
fn two_monitors_in_one_process_see_only_their_own_drift() {
    let (a, mc_a) = node_with_config();
    let (b, mc_b) = node_with_config();
    let (ma, rx_a) = monitor(&a, &mc_a);
    let (mb, rx_b) = monitor(&b, &mc_b);
    assert!(!ma.is_periodic() && !mb.is_periodic());
    drift(&a, "/etc/etc-file");
    let reason = rx_a.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(
        reason.ends_with("content mismatch for file \"/etc/etc-file\""),
        "{reason}"
    );
    // Node b is untouched: its monitor must still be silent, and still alive.
    assert!(rx_b.try_recv().is_err());
    drift(&b, "/etc/etc-file-two");
    let reason = rx_b.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(
        reason.ends_with("content mismatch for file \"/etc/etc-file-two\""),
        "{reason}"
    );
    assert!(rx_a.try_recv().is_err());
}

#[test]
fn a_monitor_watches_its_own_config_until_it_reports() {
    let (node, mc) = node_with_config();
    let (m, rx) = monitor(&node, &mc);
    assert!(m.watches("rendered-infra-1"));
    assert!(!m.watches("rendered-infra-0"));
    drift(&node, "/etc/etc-file");
    rx.recv_timeout(Duration::from_secs(20)).unwrap();
    // Spent: the daemon must start a new one rather than keep it.
    assert!(!m.watches("rendered-infra-1"));
}
