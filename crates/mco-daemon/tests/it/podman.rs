//! The real extensions repo against fake `podman` and `chcon` on the child's `PATH`: upstream's
//! command lines, the repo file under the node root, and nothing left behind.

// Tests set up and inspect their temp roots directly.
#![allow(clippy::disallowed_methods)]

use crate::support;

use mco_daemon::host::cmd::CommandRunner;
use mco_daemon::host::extensions::{ExtensionsRepo, PodmanExtensions, REPO_FILE, repo_file};
use mco_daemon::host::fs::{FileAttrs, HostFs};
use mco_daemon::host::paths;
use mco_daemon::host::retry::Pause;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{argv, calls, fake_tool, fixture_path};

const IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:e7";

/// The waits between retries, as recorded instead of slept.
type Waits = Arc<Mutex<Vec<Duration>>>;

/// A node root, a directory of fakes whose `podman images` prints `images` and whose `podman
/// pull` runs `pull`, and the repo over them, recording its waits.
fn setup(
    images: &str,
    pull: &str,
) -> (
    tempfile::TempDir,
    tempfile::TempDir,
    PodmanExtensions,
    Waits,
) {
    let root = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let body = format!(
        "case \"$1\" in\n  images) {images} ;;\n  pull) {pull} ;;\n  create) echo 9f2c1e0d7b6a ;;\nesac\nexit 0"
    );
    fake_tool(bin.path(), "podman", &body);
    fake_tool(bin.path(), "chcon", "exit 0");
    // They log their arguments and run the rest of them, as the real ones do.
    fake_tool(bin.path(), "nice", "shift; exec \"$@\"");
    fake_tool(bin.path(), "ionice", "shift 2; exec \"$@\"");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let fs = HostFs::open(root.path()).unwrap();
    let waits: Waits = Arc::default();
    let recorded = Arc::clone(&waits);
    let ext = PodmanExtensions::new(fs, CommandRunner::direct().with_env("PATH", path))
        .with_pause(Pause::new(move |d| recorded.lock().unwrap().push(d)));
    (root, bin, ext, waits)
}

#[test]
fn an_absent_image_is_pulled_with_the_pull_secret_and_copied_out() {
    let (root, bin, ext, _) = setup("echo '[]'", "exit 0");
    let fs = HostFs::open(root.path()).unwrap();
    fs.write_atomic(
        paths::KUBELET_AUTH_FILE,
        br#"{"auths":{}}"#,
        &FileAttrs::mode(0o600),
    )
    .unwrap();
    let dir = ext.provide(IMAGE).unwrap();
    assert!(dir.starts_with("/run/mco-extensions/os-extensions-content-"));
    let c = calls(bin.path(), "podman");
    assert_eq!(c.len(), 5, "{c:?}");
    assert_eq!(
        c[0],
        argv(&[
            "images",
            "--format=json",
            "--filter",
            &format!("reference={IMAGE}")
        ])
    );
    assert_eq!(
        c[1],
        argv(&[
            "pull",
            "-q",
            "--authfile",
            "/var/lib/kubelet/config.json",
            IMAGE
        ])
    );
    let name = &c[2][4];
    assert!(name.starts_with("ostree-container-pivot-"), "{name}");
    assert_eq!(
        c[2],
        argv(&[
            "create",
            "--net=none",
            "--annotation=org.openshift.machineconfigoperator.pivot=true",
            "--name",
            name,
            IMAGE
        ])
    );
    assert_eq!(c[3], argv(&["cp", "9f2c1e0d7b6a:/", &dir]));
    // The pull and the copy at idle CPU and I/O priority, as upstream's.
    let idle = |rest: &[&str]| argv(&[&["--", "ionice", "-c", "3", "podman"], rest].concat());
    assert_eq!(
        calls(bin.path(), "nice"),
        vec![
            idle(&[
                "pull",
                "-q",
                "--authfile",
                "/var/lib/kubelet/config.json",
                IMAGE
            ]),
            idle(&["cp", "9f2c1e0d7b6a:/", &dir]),
        ]
    );
    assert_eq!(calls(bin.path(), "ionice").len(), 2);
    assert_eq!(c[4], argv(&["rm", "-f", name]));
    assert_eq!(
        calls(bin.path(), "chcon"),
        vec![argv(&["-R", "-t", "var_run_t", &dir])]
    );
    // Under the node root, byte for byte upstream's.
    assert_eq!(fs.read_to_string(REPO_FILE).unwrap(), repo_file(&dir));
    fs.create_dir_all(&format!("{dir}/usr/share"), 0o755, None, None)
        .unwrap();
    ext.withdraw(&dir).unwrap();
    assert!(!fs.exists(REPO_FILE).unwrap());
    assert!(!fs.exists(&dir).unwrap());
}

#[test]
fn a_present_image_is_not_pulled_and_no_secret_means_no_authfile() {
    let listing = fixture_path("podman/images-extensions.json");
    let (_root, bin, ext, _) = setup(&format!("cat '{}'", listing.display()), "exit 0");
    ext.provide(IMAGE).unwrap();
    let verbs: Vec<String> = calls(bin.path(), "podman")
        .into_iter()
        .map(|c| c[0].clone())
        .collect();
    assert_eq!(verbs, ["images", "create", "cp", "rm"]);

    let (_root, bin, ext, _) = setup("echo '[]'", "exit 0");
    ext.provide(IMAGE).unwrap();
    assert_eq!(calls(bin.path(), "podman")[1], argv(&["pull", "-q", IMAGE]));
}

/// A pull that keeps failing is tried six times, 5 s doubling between, as upstream's
/// `RunExtBackground` does; then the update fails in upstream's words and leaves nothing.
#[test]
fn a_failed_pull_says_so_and_leaves_nothing() {
    let (root, bin, ext, waits) = setup("echo '[]'", "echo 'Error: unauthorized' >&2; exit 125");
    let err = ext.provide(IMAGE).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "error pulling extensions image {IMAGE}: failed to run command podman (6 tries): \
             [timed out waiting for the condition, "
        )),
        "{err}"
    );
    assert!(err.contains("Error: unauthorized"), "{err}");
    assert_eq!(calls(bin.path(), "podman").len(), 7);
    let s = Duration::from_secs;
    assert_eq!(*waits.lock().unwrap(), [s(5), s(10), s(20), s(40), s(80)]);
    let fs = HostFs::open(root.path()).unwrap();
    assert!(!fs.exists(REPO_FILE).unwrap());
    assert!(
        fs.list_dir("/run/mco-extensions").unwrap().is_empty(),
        "the content directory is removed"
    );
}

/// A pull that fails once (a registry hiccup) succeeds on its retry 5 s later.
#[test]
fn a_pull_failing_once_succeeds_on_its_retry() {
    let (_root, bin, ext, waits) = setup(
        "echo '[]'",
        "if [ -e \"$0.failed\" ]; then exit 0; fi; touch \"$0.failed\"; echo 'Error: i/o timeout' >&2; exit 125",
    );
    ext.provide(IMAGE).unwrap();
    let verbs: Vec<String> = calls(bin.path(), "podman")
        .into_iter()
        .map(|c| c[0].clone())
        .collect();
    assert_eq!(verbs, ["images", "pull", "pull", "create", "cp", "rm"]);
    assert_eq!(*waits.lock().unwrap(), [Duration::from_secs(5)]);
}
