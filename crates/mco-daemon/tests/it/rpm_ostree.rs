//! The real OS updater against a fake `rpm-ostree` that records argv and serves fixtures.

// Tests set up and inspect their temp roots directly.
#![allow(clippy::disallowed_methods)]

use crate::support;

use std::time::Duration;

use mco_daemon::host::cmd::CommandRunner;
use mco_daemon::host::ostree::{
    KernelType, Origin, OsStatus, OsUpdater, RebaseMode, RetryPolicy, RpmOstree,
};
use support::{argv, calls, fake_tool, fixture, fixture_path};

const SEED_URL_122: &str = "registry.uniontech.com/utccp-components/machine-os-content:1.2.2";

/// A fake whose `status --json` prints `fixture` and whose `kargs` prints `kargs_line`.
fn fake(dir: &std::path::Path, status_fixture: &str, kargs_line: &str) -> RpmOstree {
    let body = format!(
        "case \"$1\" in\n  status) cat '{}' ;;\n  kargs) [ $# -eq 1 ] && echo '{kargs_line}' ;;\nesac\nexit 0",
        fixture_path(&format!("rpm-ostree/{status_fixture}")).display()
    );
    RpmOstree::with_program(fake_tool(dir, "rpm-ostree", &body))
}

#[test]
fn seed_000_unpivoted_status() {
    let t = tempfile::tempdir().unwrap();
    let r = fake(t.path(), "seed-unpivoted.json", "");
    let st = r.status().unwrap();
    assert_eq!(
        st.booted.origin,
        Origin::Ostree("uswift:uswift/x86_64".into())
    );
    assert_eq!(st.booted.version, "20.20230625.uccps.0");
    assert_eq!(
        st.booted.checksum,
        "698a07617e25f715b19b047b27a03d18fd526da4a2cfd56f02f6661ba78be127"
    );
    assert!(!st.booted.is_mco_managed());
    assert!(st.staged.is_none() && st.rollback.is_none());
    // Upstream reported "" here; the engine gets an explicit "never adopted".
    assert_eq!(r.booted_os_image_url().unwrap(), None);
    assert_eq!(
        calls(t.path(), "rpm-ostree"),
        vec![argv(&["status", "--json"]); 2]
    );
}

#[test]
fn pivot_era_status() {
    let st = OsStatus::parse(&fixture("rpm-ostree/pivot-era.json")).unwrap();
    assert_eq!(
        st.booted.os_image_url().as_deref(),
        Some("registry.uniontech.com/uccps-components/machine-os-content:1.3.0")
    );
    assert_eq!(
        st.booted.custom_origin,
        Some((
            "pivot://registry.uniontech.com/uccps-components/machine-os-content:1.3.0".into(),
            "Managed by machine-config-operator".into()
        ))
    );
    assert_eq!(
        st.booted.origin.to_string(),
        "pivot://registry.uniontech.com/uccps-components/machine-os-content:1.3.0"
    );
    let rb = st.rollback.unwrap();
    assert_eq!(rb.os_image_url().as_deref(), Some(SEED_URL_122));
    assert_eq!(rb.timestamp, Some(1687664411));
    assert!(st.staged.is_none());
}

#[test]
fn container_era_status() {
    let st = OsStatus::parse(&fixture("rpm-ostree/container-era.json")).unwrap();
    assert!(matches!(st.booted.origin, Origin::Container(_)));
    assert_eq!(
        st.booted.os_image_url().as_deref(),
        Some(
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:69c5f4de029778b03dd6283eea6a583c7d877d05f3885d28fefedd9e58a07d54"
        )
    );
    assert_eq!(st.booted.version, "418.94.202501221327-0");
    assert!(matches!(st.rollback.unwrap().origin, Origin::Pivot(_)));
}

#[test]
fn staged_update_status() {
    let st = OsStatus::parse(&fixture("rpm-ostree/staged-update.json")).unwrap();
    let staged = st.staged.clone().unwrap();
    assert!(staged.staged && !staged.booted);
    assert_eq!(
        staged.base_checksum,
        "062a2a92960af9991630c66522312da1330e8280cece435c9645adbff4f2988f"
    );
    assert_eq!(staged.requested_packages, vec!["usbguard"]);
    assert_eq!(staged.version, "418.94.202502041215-0");
    assert_eq!(st.default_deployment().id, staged.id);
    assert_eq!(
        st.booted.id,
        "rhcos-2e33438e5050f9ac018a1561e27e819691833421472c9bcf739f3fcf25b33ba5.1"
    );
    assert_eq!(st.booted.base_checksum, st.booted.checksum);
    assert_eq!(
        st.rollback.unwrap().os_image_url().as_deref(),
        Some(
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0f9830e7c196b74c8386a997fe56f249ce466787a2516740b8b742897f9fc842"
        )
    );
    assert_eq!(st.deployments.len(), 3);
}

#[test]
fn rebase_both_modes_exact_argv() {
    let t = tempfile::tempdir().unwrap();
    let r = fake(t.path(), "seed-unpivoted.json", "");
    r.rebase(
        SEED_URL_122,
        &RebaseMode::Pivot {
            refspec: "/run/mco-machine-os-content/os-content-1/srv/repo:abc123".into(),
        },
    )
    .unwrap();
    r.rebase("quay.io/x/y@sha256:1", &RebaseMode::Container)
        .unwrap();
    assert_eq!(
        calls(t.path(), "rpm-ostree"),
        vec![
            argv(&[
                "rebase",
                "--experimental",
                "/run/mco-machine-os-content/os-content-1/srv/repo:abc123",
                "--custom-origin-url",
                "pivot://registry.uniontech.com/utccp-components/machine-os-content:1.2.2",
                "--custom-origin-description",
                "Managed by machine-config-operator",
            ]),
            argv(&[
                "rebase",
                "--experimental",
                "ostree-unverified-registry:quay.io/x/y@sha256:1"
            ]),
        ]
    );
}

/// TestKernelArguments: `bar="hello world"` travels as one argument both ways.
#[test]
fn kargs_round_trip_keeps_quoted_argument_whole() {
    let t = tempfile::tempdir().unwrap();
    let r = fake(
        t.path(),
        "seed-unpivoted.json",
        "rw nosmt foo=bar foo=baz baz=test bar=\"hello world\"",
    );
    assert_eq!(
        r.kargs().unwrap(),
        argv(&[
            "rw",
            "nosmt",
            "foo=bar",
            "foo=baz",
            "baz=test",
            "bar=\"hello world\""
        ])
    );
    r.set_kargs(
        &argv(&["nosmt", "bar=\"hello world\""]),
        &argv(&["foo=bar", "bar=\"hello world\""]),
    )
    .unwrap();
    // Nothing to do runs nothing.
    r.set_kargs(&[], &[]).unwrap();
    assert_eq!(
        calls(t.path(), "rpm-ostree"),
        vec![
            argv(&["kargs"]),
            argv(&[
                "kargs",
                "--delete-if-present=nosmt",
                "--delete-if-present=bar=\"hello world\"",
                "--append=foo=bar",
                "--append=bar=\"hello world\"",
            ]),
        ]
    );
}

#[test]
fn cleanup_and_kernel_type() {
    let t = tempfile::tempdir().unwrap();
    let r = fake(t.path(), "staged-update.json", "");
    r.cleanup_pending().unwrap();
    r.cleanup_rollback().unwrap();
    r.set_kernel_type(KernelType::Realtime).unwrap();
    let c = calls(t.path(), "rpm-ostree");
    assert_eq!(c[0], argv(&["cleanup", "-p"]));
    assert_eq!(c[1], argv(&["cleanup", "-r"]));
    assert_eq!(c[2], argv(&["status", "--json"]));
    assert_eq!(
        c[3],
        argv(&[
            "override",
            "remove",
            "kernel",
            "kernel-core",
            "kernel-modules",
            "kernel-modules-core",
            "kernel-modules-extra",
            "--install",
            "kernel-rt-core",
            "--install",
            "kernel-rt-modules",
            "--install",
            "kernel-rt-modules-core",
            "--install",
            "kernel-rt-modules-extra",
            "--install",
            "kernel-rt-kvm",
        ])
    );
    assert_eq!(c.len(), 4);
    // Already default: only the status query.
    r.set_kernel_type(KernelType::Default).unwrap();
    assert_eq!(calls(t.path(), "rpm-ostree").len(), 5);
}

#[test]
fn kernel_switch_goes_through_default() {
    let cmds = RpmOstree::kernel_type_commands(KernelType::Realtime, KernelType::SixtyFourK);
    assert_eq!(cmds.len(), 2);
    assert_eq!(&cmds[0][..2], &argv(&["override", "reset"])[..]);
    assert!(cmds[0].contains(&"--uninstall".to_string()));
    assert!(cmds[0].contains(&"kernel-rt-core".to_string()));
    assert_eq!(&cmds[1][..2], &argv(&["override", "remove"])[..]);
    assert!(cmds[1].contains(&"kernel-64k-core".to_string()));
    assert!(RpmOstree::kernel_type_commands(KernelType::Default, KernelType::Default).is_empty());
}

#[test]
fn retries_while_a_transaction_is_in_progress() {
    let t = tempfile::tempdir().unwrap();
    let counter = t.path().join("count");
    let body = format!(
        "n=$(cat '{c}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{c}'\n\
         if [ $n -lt 3 ]; then echo 'error: Transaction in progress: deploy' >&2; exit 1; fi\nexit 0",
        c = counter.display()
    );
    let r = RpmOstree::with_program(fake_tool(t.path(), "rpm-ostree", &body)).retry(RetryPolicy {
        attempts: 5,
        initial: Duration::ZERO,
        max: Duration::ZERO,
    });
    r.cleanup_pending().unwrap();
    assert_eq!(calls(t.path(), "rpm-ostree").len(), 3);

    // Out of attempts: the last error surfaces with upstream's shape.
    std::fs::remove_file(&counter).unwrap();
    let r = r.retry(RetryPolicy {
        attempts: 2,
        initial: Duration::ZERO,
        max: Duration::ZERO,
    });
    let err = r.cleanup_pending().unwrap_err().to_string();
    assert!(
        err.ends_with("cleanup -p: error: Transaction in progress: deploy: exit status 1"),
        "{err}"
    );
}

#[test]
fn other_failures_are_not_retried() {
    let t = tempfile::tempdir().unwrap();
    let r = RpmOstree::with_program(fake_tool(
        t.path(),
        "rpm-ostree",
        "echo 'error: Timeout was reached' >&2; exit 1",
    ));
    let err = r
        .rebase("quay.io/x:1", &RebaseMode::Container)
        .unwrap_err()
        .to_string();
    assert!(err.contains("rebase --experimental ostree-unverified-registry:quay.io/x:1"));
    assert!(err.contains("error: Timeout was reached"), "{err}");
    assert_eq!(calls(t.path(), "rpm-ostree").len(), 1);
}

#[test]
fn runs_through_chroot_when_root_is_not_slash() {
    let t = tempfile::tempdir().unwrap();
    let chroot = fake_tool(t.path(), "chroot", "exit 0");
    let r = RpmOstree::new(CommandRunner::in_root("/rootfs").with_chroot_program(&chroot));
    r.cleanup_pending().unwrap();
    assert_eq!(
        calls(t.path(), "chroot"),
        vec![argv(&["/rootfs", "rpm-ostree", "cleanup", "-p"])]
    );
}

/// The log rendering matches what operators saw in seed 000, so the two can be compared.
#[test]
fn human_rendering_matches_rpm_ostree_status() {
    let st = OsStatus::parse(&fixture("rpm-ostree/seed-unpivoted.json")).unwrap();
    assert_eq!(
        st.to_string(),
        "State: idle\nDeployments:\n\
         * uswift:uswift/x86_64\n\
         \x20                  Version: 20.20230625.uccps.0 (2023-06-25T08:15:06Z)\n\
         \x20                   Commit: 698a07617e25f715b19b047b27a03d18fd526da4a2cfd56f02f6661ba78be127\n"
    );
    let st = OsStatus::parse(&fixture("rpm-ostree/pivot-era.json")).unwrap();
    let text = st.to_string();
    assert!(
        text.starts_with(
            "State: idle\nDeployments:\n\
             * pivot://registry.uniontech.com/uccps-components/machine-os-content:1.3.0\n\
             \x20             CustomOrigin: Managed by machine-config-operator\n\
             \x20                  Version: 20.20231221.uccps.0 (2023-12-21T07:35:25Z)\n\n\
             \x20 pivot://registry.uniontech.com/utccp-components/machine-os-content:1.2.2\n"
        ),
        "{text}"
    );
}

/// The fake found first on the child's `PATH` (set on the command only, never on this test
/// process), exactly as the real host resolves `rpm-ostree`.
#[test]
fn fake_first_on_child_path() {
    let t = tempfile::tempdir().unwrap();
    fake_tool(t.path(), "rpm-ostree", "exit 0");
    let path = format!(
        "{}:{}",
        t.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let r = RpmOstree::new(CommandRunner::direct().with_env("PATH", path));
    r.cleanup_pending().unwrap();
    assert_eq!(
        calls(t.path(), "rpm-ostree"),
        vec![argv(&["cleanup", "-p"])]
    );
}

/// Extensions go in one `rpm-ostree update` transaction; nothing to do runs nothing.
#[test]
fn extensions_update_exact_argv() {
    let t = tempfile::tempdir().unwrap();
    let r = fake(t.path(), "staged-update.json", "");
    let installed = r.status().unwrap().booted.requested_packages;
    let args =
        mco_render::extensions::extension_args(&installed, &argv(&["usbguard", "kernel-devel"]));
    r.update_packages(&args).unwrap();
    r.update_packages(&[]).unwrap();
    // The staged deployment of the capture requests usbguard, which verification accepts.
    let staged = r.status().unwrap().staged.unwrap();
    assert_eq!(
        mco_render::extensions::verify_staged(&staged.requested_packages, &argv(&["usbguard"])),
        Ok(())
    );
    assert_eq!(
        calls(t.path(), "rpm-ostree"),
        vec![
            argv(&["status", "--json"]),
            argv(&[
                "update",
                "--install",
                "kernel-devel",
                "--install",
                "kernel-headers",
                "--install",
                "usbguard"
            ]),
            argv(&["status", "--json"]),
        ]
    );
}
