//! The container image store against a fake `crictl` that records argv and serves a fixture,
//! and what pinning costs in `crictl` runs.

// Tests read their fakes' logs and look at their processes directly.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mco_daemon::Host;
use mco_daemon::engine::Engine;
use mco_daemon::host::images::{CRIO_ENDPOINT, ContainerImages, Crictl, parse_inspecti};

use crate::support::{Node as SimNode, argv, calls, fake_tool, fixture, fixture_path};

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
fn a_pull_goes_through_crio_without_asking_first() {
    let t = tempfile::tempdir().unwrap();
    let state = t.path().join("pulled");
    let c = fake(
        t.path(),
        &format!(
            "echo 'Image is up to date for sha256:6c1f'; touch '{}'",
            state.display()
        ),
    );
    assert!(!c.present(IMAGE, &AtomicBool::new(false)).unwrap());
    c.pull(IMAGE, &AtomicBool::new(false)).unwrap();
    assert!(c.present(IMAGE, &AtomicBool::new(false)).unwrap());
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
            argv(&["--image-endpoint", CRIO_ENDPOINT, "pull", IMAGE]),
            inspect,
        ]
    );
}

/// A fake holding any number of images, one state file each under `<dir>/images`. As its runs
/// overlap, each also logs its argv, space-separated, in one write to `<dir>/runs.log`.
fn fake_store(dir: &Path) -> Crictl {
    let images = dir.join("images");
    let body = format!(
        "printf '%s\\n' \"$*\" >> '{runs}'\ncase \"$3\" in\n  inspecti) f='{images}'/$(printf '%s' \"$6\" | tr '/:@' '___'); if [ -e \"$f\" ]; then cat '{fixture}'; else echo \"level=fatal msg=\\\"no such image $6 present\\\"\" >&2; exit 1; fi ;;\n  pull) mkdir -p '{images}' && touch '{images}'/$(printf '%s' \"$4\" | tr '/:@' '___') ;;\nesac\nexit 0",
        images = images.display(),
        fixture = fixture_path("crictl/inspecti.json").display(),
        runs = dir.join("runs.log").display(),
    );
    Crictl::with_program(fake_tool(dir, "crictl", &body))
}

/// The runs [`fake_store`] logged, each as its argv.
fn runs(dir: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(dir.join("runs.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect()
}

/// On a real node every question is a `crictl` run: pinning asks once about each image (several
/// at once, so in any order), pulls those absent, and asks once more about each pulled.
#[test]
fn a_new_pinned_image_costs_one_inspecti_before_one_pull_one_after_and_a_held_one_inspecti() {
    let t = tempfile::tempdir().unwrap();
    let node = SimNode::new(false);
    let mut host = Host::sim(node.dir.path()).unwrap();
    host.images = Box::new(fake_store(t.path()));
    let engine = Engine::new(host).unwrap();
    let held = IMAGE.replace("/app@", "/held@");
    engine
        .host
        .images
        .pull(&held, &AtomicBool::new(false))
        .unwrap();
    let images = vec![IMAGE.to_string(), held.clone()];
    let before = runs(t.path()).len();

    let found = engine
        .pinned_held(&images, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(found.absent, [IMAGE]);
    assert!(
        engine
            .pin_images(&images, &found, &AtomicBool::new(false))
            .unwrap()
    );

    let inspect = |image: &str| {
        argv(&[
            "--image-endpoint",
            CRIO_ENDPOINT,
            "inspecti",
            "-o",
            "json",
            image,
        ])
    };
    let mut ran = runs(t.path())[before..].to_vec();
    ran[..2].sort();
    let mut asked = [inspect(IMAGE), inspect(&held)];
    asked.sort();
    assert_eq!(ran[..2], asked);
    assert_eq!(
        ran[2..],
        [
            argv(&["--image-endpoint", CRIO_ENDPOINT, "pull", IMAGE]),
            inspect(IMAGE),
        ]
    );
    assert!(
        engine
            .pinned_held(&images, &AtomicBool::new(false))
            .unwrap()
            .up_to_date()
    );
}

#[test]
fn a_failed_pull_carries_crictls_error() {
    let t = tempfile::tempdir().unwrap();
    let c = fake(
        t.path(),
        "echo 'time=\"2026-12-06T07:00:00Z\" level=fatal msg=\"pulling image: rpc error: code = Unknown desc = unauthorized\"' >&2; exit 1",
    );
    let err = c
        .pull(IMAGE, &AtomicBool::new(false))
        .unwrap_err()
        .to_string();
    assert!(err.contains("pull"), "{err}");
    assert!(err.contains("unauthorized"), "{err}");
    assert!(err.ends_with("exit status 1"), "{err}");
}

#[test]
fn a_pull_past_its_timeout_is_killed() {
    let t = tempfile::tempdir().unwrap();
    let c = fake(t.path(), "exec sleep 30").timeout(Duration::from_millis(300));
    let err = c
        .pull(IMAGE, &AtomicBool::new(false))
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("timed out after 300ms"), "{err}");
}

/// A pull the pass no longer needs is killed once the flag is set, as upstream's cancelled
/// context ends its CRI pull: the call returns within a second, not when the pull would have.
#[test]
fn a_pull_in_flight_is_killed_once_stopped() {
    killed_once_stopped("pull", |c, stop| c.pull(IMAGE, stop).map(drop));
}

#[test]
fn a_presence_check_in_flight_is_killed_once_stopped() {
    killed_once_stopped("inspecti", |c, stop| c.present(IMAGE, stop).map(drop));
}

/// `crictl <verb>` hangs (its pid recorded); `call` runs it, the stop is set, and the call must
/// end within seconds with the stop's error and the process gone.
fn killed_once_stopped(
    verb: &str,
    call: impl FnOnce(&Crictl, &AtomicBool) -> mco_daemon::Result<()> + Send + 'static,
) {
    let t = tempfile::tempdir().unwrap();
    let pid_file = t.path().join("crictl.pid");
    let body = format!(
        "case \"$3\" in\n  {verb}) echo $$ > '{}'; exec sleep 60 ;;\nesac\nexit 1",
        pid_file.display()
    );
    let c = Crictl::with_program(fake_tool(t.path(), "crictl", &body));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let _ = tx.send(call(&c, &stop));
        });
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
        if !pid.trim().is_empty() {
            break pid.trim().to_string();
        }
        assert!(Instant::now() < deadline, "crictl {verb} never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    let alive = |pid: &str| {
        std::process::Command::new("kill")
            .args(["-0", pid])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    assert!(alive(&pid), "crictl {verb} runs");
    let stopped = Instant::now();
    stop.store(true, Ordering::SeqCst);
    let err = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("crictl returned soon after the stop")
        .unwrap_err()
        .to_string();
    assert!(stopped.elapsed() < Duration::from_secs(5));
    assert!(err.ends_with(mco_daemon::host::cmd::STOPPED), "{err}");
    assert!(!err.contains("timed out"), "{err}");
    assert!(!alive(&pid), "crictl {verb} {pid} is gone");
}
