//! `mco doctor --root` on node roots built with the daemon's own host layer, including the
//! exact host of seed 000.

use std::path::Path;

use mco_cli::doctor;
use mco_cli::local::{self, DriftKind};
use mco_daemon::fs::{FileAttrs, HostFs};
use mco_daemon::ostree::SimOstree;
use serde_json::json;

/// Seed 000's `/etc/os-release`, verbatim.
const UOS_OS_RELEASE: &str = r#"PRETTY_NAME="UOS Server 20"
NAME="UOS Server 20"
VERSION_ID="20"
VERSION="20"
ID="uos"
HOME_URL="https://www.chinauos.com/"
BUG_REPORT_URL="https://bbs.chinauos.com/"
VERSION_CODENAME=mercury
PLATFORM_ID="platform:uelc20"
OSTREE_VERSION='20.20230625.uccps.0'
"#;

const IMAGE_122: &str = "registry.uniontech.com/utccp-components/machine-os-content:1.2.2";
const RENDERED: &str = "rendered-master-bd1426e1c30cc288379bc4c7dd71c4aa";

/// Seed 000's `rpm-ostree status`: one booted deployment from a plain refspec, no custom origin.
fn seed000_deployments() -> String {
    json!({
        "deployments": [{
            "id": "uswift-698a07617e25f715b19b047b27a03d18fd526da4a2cfd56f02f6661ba78be127.0",
            "osname": "uswift",
            "serial": 0,
            "checksum": "698a07617e25f715b19b047b27a03d18fd526da4a2cfd56f02f6661ba78be127",
            "version": "20.20230625.uccps.0",
            "timestamp": 1687680915u64,
            "booted": true,
            "origin": "uswift:uswift/x86_64",
        }],
        "transaction": null
    })
    .to_string()
}

fn pivot_deployments(url: &str) -> String {
    json!({
        "deployments": [{
            "id": "uswift-aaaa.0",
            "osname": "uswift",
            "checksum": "aaaa",
            "version": "20.20230625.uccps.0",
            "booted": true,
            "origin": "aaaa",
            "custom-origin": [format!("pivot://{url}"), "Managed by machine-config-operator"],
        }]
    })
    .to_string()
}

fn write(fs: &HostFs, path: &str, data: &[u8]) {
    fs.write_atomic(path, data, &FileAttrs::default()).unwrap();
}

fn current_config(files: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": RENDERED},
        "spec": {
            "osImageURL": IMAGE_122,
            "config": {"ignition": {"version": "3.2.0"}, "storage": {"files": files}}
        }
    }))
    .unwrap()
}

/// A root as seed 000's worker had it after first boot skipped the OS.
fn seed000_host(root: &Path) {
    let fs = HostFs::open(root).unwrap();
    write(&fs, "/etc/os-release", UOS_OS_RELEASE.as_bytes());
    write(&fs, "/run/ostree-booted", b"");
    write(
        &fs,
        "/etc/machine-config-daemon/currentconfig",
        &current_config(
            json!([{"path": "/etc/mco-test", "contents": {"source": "data:,hello%0A"}, "mode": 420}]),
        ),
    );
    write(&fs, "/etc/mco-test", b"hello\n");
    write(
        &fs,
        "/etc/ignition-machine-config-encapsulated.json.bak",
        b"{}",
    );
    SimOstree::new(fs.try_clone().unwrap())
        .seed_from_json(&seed000_deployments(), &[])
        .unwrap();
}

#[test]
fn seed000_host_says_what_happened_and_what_to_run() {
    let dir = tempfile::tempdir().unwrap();
    seed000_host(dir.path());
    let facts = local::gather(dir.path()).unwrap();
    assert!(facts.simulated);
    assert!(facts.os.ostree_booted);
    assert_eq!(facts.os.identity.id, "uos");
    assert!(facts.file_drift.is_empty(), "{:?}", facts.file_drift);

    let findings = local::diagnose(&facts);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(f.title, "first boot never adopted the OS image");
    assert!(
        f.cause.contains(&format!("Config {RENDERED} was applied")),
        "{}",
        f.cause
    );
    assert!(
        f.cause
            .contains("`uswift:uswift/x86_64` has no mco-managed origin"),
        "{}",
        f.cause
    );
    assert!(f.cause.contains(r#"os-release ID="uos""#), "{}", f.cause);
    assert!(
        f.cause.contains(&format!(
            r#"expected target osImageURL "{IMAGE_122}", have """#
        )),
        "{}",
        f.cause
    );
    let force = format!(
        "touch {}/run/machine-config-daemon-force",
        dir.path().display()
    );
    assert_eq!(f.fixes[0].command, force);
    let r = dir.path().display();
    assert_eq!(
        f.fixes[1].command,
        format!(
            "cp {r}/etc/ignition-machine-config-encapsulated.json.bak {r}/etc/ignition-machine-config-encapsulated.json && mco daemon firstboot-complete-machineconfig --root {r} --host sim"
        )
    );

    let text = doctor::render_local(&facts, &findings);
    assert!(
        text.contains(r#"os-release: ID="uos" VERSION_ID="20" (UOS Server 20)"#),
        "{text}"
    );
    assert!(text.contains("/run/ostree-booted: present"), "{text}");
    assert!(
        text.contains("booted deployment: uswift:uswift/x86_64 [plain ostree refspec (not mco-managed)], version 20.20230625.uccps.0"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "currentconfig: {RENDERED} (osImageURL \"{IMAGE_122}\")"
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "first boot: completed (/etc/ignition-machine-config-encapsulated.json.bak present)"
        ),
        "{text}"
    );
    assert!(text.contains(&format!("$ {force}")), "{text}");
    assert!(!text.contains("Healthy"), "{text}");
}

#[test]
fn on_a_real_host_the_force_file_is_the_host_path() {
    let dir = tempfile::tempdir().unwrap();
    seed000_host(dir.path());
    let mut facts = local::gather(dir.path()).unwrap();
    // As `gather` reports a real host (deployments read through rpm-ostree).
    facts.simulated = false;
    let findings = local::diagnose(&facts);
    assert_eq!(
        findings[0].fixes[0].command,
        "touch /run/machine-config-daemon-force"
    );
    assert_eq!(
        findings[0].fixes[1].command,
        "cp /etc/ignition-machine-config-encapsulated.json.bak /etc/ignition-machine-config-encapsulated.json && mco daemon firstboot-complete-machineconfig"
    );
    assert!(findings[0].subject.starts_with("host "));

    // Without the saved first-boot config, first boot is re-run from the cluster's copy.
    std::fs::remove_file(
        dir.path()
            .join("etc/ignition-machine-config-encapsulated.json.bak"),
    )
    .unwrap();
    let mut facts = local::gather(dir.path()).unwrap();
    facts.simulated = false;
    let findings = local::diagnose(&facts);
    assert_eq!(
        findings[0].fixes[1].command,
        format!(
            "kubectl get machineconfig {RENDERED} -o json > /etc/ignition-machine-config-encapsulated.json && mco daemon firstboot-complete-machineconfig"
        )
    );
}

#[test]
fn adopted_host_is_healthy() {
    let dir = tempfile::tempdir().unwrap();
    seed000_host(dir.path());
    let fs = HostFs::open(dir.path()).unwrap();
    SimOstree::new(fs.try_clone().unwrap())
        .seed_from_json(&pivot_deployments(IMAGE_122), &[])
        .unwrap();
    let facts = local::gather(dir.path()).unwrap();
    let findings = local::diagnose(&facts);
    assert!(findings.is_empty(), "{findings:#?}");
    let text = doctor::render_local(&facts, &findings);
    assert!(
        text.contains(&format!(
            "Healthy: the node is on {RENDERED} and matches it."
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("pivot://{IMAGE_122} [pivot (mco-managed)]")),
        "{text}"
    );
}

#[test]
fn drifted_file_reports_expected_and_actual_size() {
    let dir = tempfile::tempdir().unwrap();
    seed000_host(dir.path());
    let fs = HostFs::open(dir.path()).unwrap();
    SimOstree::new(fs.try_clone().unwrap())
        .seed_from_json(&pivot_deployments(IMAGE_122), &[])
        .unwrap();
    write(&fs, "/etc/mco-test", b"hello world\n");
    let facts = local::gather(dir.path()).unwrap();
    assert_eq!(facts.file_drift.len(), 1);
    assert_eq!(facts.file_drift[0].kind, DriftKind::Content);
    assert_eq!(facts.file_drift[0].expected_size, 6);
    assert_eq!(facts.file_drift[0].actual_size, Some(12));
    let findings = local::diagnose(&facts);
    assert_eq!(findings.len(), 1);
    assert_eq!(
        findings[0].title,
        "content mismatch for file \"/etc/mco-test\""
    );
    assert!(
        findings[0].cause.contains("expected 6 bytes"),
        "{}",
        findings[0].cause
    );
    assert!(
        findings[0].cause.contains("found 12 bytes"),
        "{}",
        findings[0].cause
    );
    assert!(
        findings[0].fixes[1]
            .command
            .ends_with("/run/machine-config-daemon-force")
    );
}

#[test]
fn pending_first_boot_and_non_ostree_host() {
    let dir = tempfile::tempdir().unwrap();
    let fs = HostFs::open(dir.path()).unwrap();
    write(&fs, "/etc/os-release", b"ID=rhel\nVERSION_ID=9.4\n");
    write(&fs, "/etc/ignition-machine-config-encapsulated.json", b"{}");
    let facts = local::gather(dir.path()).unwrap();
    assert!(!facts.simulated && !facts.os.ostree_booted);
    assert!(facts.booted.is_none() && facts.os_error.is_none());
    let findings = local::diagnose(&facts);
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].title, "first boot not completed");
    assert_eq!(
        findings[0].fixes[0].command,
        "mco daemon firstboot-complete-machineconfig"
    );
    let text = doctor::render_local(&facts, &findings);
    assert!(text.contains("/run/ostree-booted: absent"), "{text}");
    assert!(text.contains("currentconfig: absent"), "{text}");
}
