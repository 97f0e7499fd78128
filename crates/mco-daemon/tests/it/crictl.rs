//! The container image store against a fake `crictl` that records argv and serves a fixture.

use std::time::Duration;

use mco_daemon::host::images::{CRIO_ENDPOINT, ContainerImages, Crictl, parse_inspecti};

use crate::support::{argv, calls, fake_tool, fixture, fixture_path};

const IMAGE: &str =
    "quay.io/example/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A fake whose `inspecti` answers from a state file (present once `pull` created it), as
/// crictl does: the image's JSON, or `no such image` and exit 1.
fn fake(dir: &std::path::Path, pull_body: &str) -> Crictl {
    let state = dir.join("pulled");
    let body = format!(
        "case \"$3\" in\n  inspecti) if [ -e '{state}' ]; then cat '{fixture}'; else echo \"time=\\\"2026-12-06T07:00:00Z\\\" level=fatal msg=\\\"no such image \\\\\\\"$6\\\\\\\" present\\\"\" >&2; exit 1; fi ;;\n  pull) {pull_body} ;;\nesac\nexit 0",
        state = state.display(),
        fixture = fixture_path("crictl/inspecti.json").display(),
    );
    Crictl::with_program(fake_tool(dir, "crictl", &body))
}

#[test]
fn inspecti_output_names_the_image_id() {
    assert_eq!(
        parse_inspecti(&fixture("crictl/inspecti.json"))
            .unwrap()
            .as_deref(),
        Some("6c1f5b4b3a0e7b2d8c9a1f0e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c")
    );
    assert_eq!(parse_inspecti(r#"{"status": {}}"#).unwrap(), None);
    assert!(parse_inspecti("not json").is_err());
}

#[test]
fn an_absent_image_is_pulled_through_crio_and_a_present_one_is_not() {
    let t = tempfile::tempdir().unwrap();
    let state = t.path().join("pulled");
    let c = fake(
        t.path(),
        &format!(
            "echo 'Image is up to date for sha256:6c1f'; touch '{}'",
            state.display()
        ),
    );
    assert!(!c.present(IMAGE).unwrap());
    c.pull(IMAGE).unwrap();
    assert!(c.present(IMAGE).unwrap());
    c.pull(IMAGE).unwrap();
    let inspect = argv(&[
        "--image-endpoint",
        CRIO_ENDPOINT,
        "inspecti",
        "-o",
        "json",
        IMAGE,
    ]);
    assert_eq!(
        calls(t.path(), "crictl"),
        vec![
            inspect.clone(),
            inspect.clone(),
            argv(&["--image-endpoint", CRIO_ENDPOINT, "pull", IMAGE]),
            inspect.clone(),
            inspect,
        ]
    );
}

#[test]
fn a_failed_pull_carries_crictls_error() {
    let t = tempfile::tempdir().unwrap();
    let c = fake(
        t.path(),
        "echo 'time=\"2026-12-06T07:00:00Z\" level=fatal msg=\"pulling image: rpc error: code = Unknown desc = unauthorized\"' >&2; exit 1",
    );
    let err = c.pull(IMAGE).unwrap_err().to_string();
    assert!(err.contains("pull"), "{err}");
    assert!(err.contains("unauthorized"), "{err}");
    assert!(err.ends_with("exit status 1"), "{err}");
}

#[test]
fn a_pull_past_its_timeout_is_killed() {
    let t = tempfile::tempdir().unwrap();
    let c = fake(t.path(), "exec sleep 30").timeout(Duration::from_millis(300));
    let err = c.pull(IMAGE).unwrap_err().to_string();
    assert!(err.ends_with("timed out after 300ms"), "{err}");
}
