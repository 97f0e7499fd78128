//! Node health checks: after an update, the executables in `/etc/mco/health.d/` (under the
//! node's root) run in name order, each with a timeout; exit 0 is healthy. The first failure
//! stops the run. Its output (stdout then stderr, cut to [`MAX_OUTPUT_BYTES`]) goes into the
//! result the daemon records on its Node (`rollouts.mco.dev/node-checks`) and into the
//! MachineConfigNode's `Updated` message, where a `RolloutPolicy`'s `nodeChecks` gate reads it.
//!
//! On a real host whose root is not `/` a check runs as `chroot <root> <check>`, so it sees
//! the host as its own; on a simulated node it runs directly with `MCO_ROOT` set to the root.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mco_api::rollouts::limits::MAX_OUTPUT_BYTES;

use crate::host::cmd::{CommandRunner, capture, wait_bounded};
use crate::host::fs::EntryKind;
use crate::host::{Host, HostKind};

/// Where the checks live, relative to the node's root.
pub const HEALTH_DIR: &str = "/etc/mco/health.d";
/// Longest a check may run before it is killed and counted as failed, unless the Node names
/// another ([`mco_api::rollouts::check_timeout`]).
pub const CHECK_TIMEOUT: Duration =
    Duration::from_secs(mco_api::rollouts::limits::DEFAULT_CHECK_TIMEOUT_SECS);
/// Checks run at most; the rest are ignored, named in the output.
pub const MAX_CHECKS: usize = 64;

/// The result of one run of the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub passed: bool,
    /// The failing check's file name; empty when all passed.
    pub check: String,
    pub output: String,
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_OUTPUT_BYTES {
        let mut end = MAX_OUTPUT_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn run_one(root: &Path, chroot: bool, name: &str, timeout: Duration) -> Result<(), String> {
    let inside = format!("{HEALTH_DIR}/{name}");
    let (runner, program) = if chroot {
        (CommandRunner::in_root(root), PathBuf::from(&inside))
    } else {
        (
            CommandRunner::direct().with_env("MCO_ROOT", root),
            root.join(inside.trim_start_matches('/')),
        )
    };
    let mut child = runner
        .spawn(&program, &[])
        .map_err(|e| format!("cannot run: {e}"))?;
    let out = child.stdout.take().map(|r| capture(r, MAX_OUTPUT_BYTES));
    let err = child.stderr.take().map(|r| capture(r, MAX_OUTPUT_BYTES));
    let status = wait_bounded(&mut child, timeout);
    let mut text = out.and_then(|h| h.join().ok()).unwrap_or_default();
    text.extend(err.and_then(|h| h.join().ok()).unwrap_or_default());
    let text = cut(String::from_utf8_lossy(&text).into_owned());
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(cut(format!("{s}: {text}"))),
        Err(e) => Err(cut(format!("{e}: {text}"))),
    }
}

/// Run every check under `host`'s root.
pub fn run(host: &Host, timeout: Duration) -> Outcome {
    let root = host.fs.root().to_path_buf();
    let chroot = host.kind() == HostKind::Real && root != Path::new("/");
    let names = match host.fs.list_dir(HEALTH_DIR) {
        Ok(n) => n,
        Err(e) => {
            return Outcome {
                passed: false,
                check: HEALTH_DIR.into(),
                output: cut(e.to_string()),
            };
        }
    };
    let mut ran = 0;
    for name in &names {
        let path = format!("{HEALTH_DIR}/{name}");
        let runnable = host
            .fs
            .stat(&path)
            .ok()
            .flatten()
            .is_some_and(|s| s.kind == EntryKind::File && s.mode & 0o111 != 0);
        if !runnable || name.starts_with('.') {
            continue;
        }
        if ran == MAX_CHECKS {
            return Outcome {
                passed: false,
                check: name.clone(),
                output: format!("more than {MAX_CHECKS} checks in {HEALTH_DIR}"),
            };
        }
        ran += 1;
        if let Err(output) = run_one(&root, chroot, name, timeout) {
            return Outcome {
                passed: false,
                check: name.clone(),
                output,
            };
        }
    }
    Outcome {
        passed: true,
        check: String::new(),
        output: format!("{ran} checks passed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fs::FileAttrs;

    fn host_with(checks: &[(&str, &str, u32)]) -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::sim(dir.path()).unwrap();
        host.fs
            .create_dir_all(HEALTH_DIR, 0o755, None, None)
            .unwrap();
        for (name, body, mode) in checks {
            let path = format!("{HEALTH_DIR}/{name}");
            host.fs
                .write_atomic(&path, body.as_bytes(), &FileAttrs::mode(*mode))
                .unwrap();
        }
        (dir, host)
    }

    #[test]
    fn all_passing_checks_pass_and_non_executables_are_skipped() {
        let (_d, host) = host_with(&[
            ("10-ok", "#!/bin/sh\nexit 0\n", 0o755),
            ("README", "not a check\n", 0o644),
            (
                "20-root",
                "#!/bin/sh\ntest -d \"$MCO_ROOT/etc/mco\"\n",
                0o755,
            ),
        ]);
        assert_eq!(
            run(&host, CHECK_TIMEOUT),
            Outcome {
                passed: true,
                check: String::new(),
                output: "2 checks passed".into()
            }
        );
    }

    #[test]
    fn the_first_failure_is_named_with_its_output() {
        let (_d, host) = host_with(&[
            (
                "10-app",
                "#!/bin/sh\necho app down; echo detail >&2; exit 3\n",
                0o755,
            ),
            ("20-never", "#!/bin/sh\nexit 1\n", 0o755),
        ]);
        let o = run(&host, CHECK_TIMEOUT);
        assert!(!o.passed);
        assert_eq!(o.check, "10-app");
        assert_eq!(o.output, "exit status: 3: app down\ndetail\n");
    }

    #[test]
    fn output_is_cut_at_the_limit() {
        let (_d, host) = host_with(&[(
            "10-loud",
            "#!/bin/sh\nhead -c 100000 /dev/zero | tr '\\0' x\nexit 1\n",
            0o755,
        )]);
        let o = run(&host, CHECK_TIMEOUT);
        assert!(!o.passed);
        assert_eq!(o.output.len(), MAX_OUTPUT_BYTES);
        assert!(o.output.starts_with("exit status: 1: xxx"));
    }

    #[test]
    fn a_check_past_its_timeout_is_killed_and_fails() {
        let (_d, host) = host_with(&[("10-slow", "#!/bin/sh\nexec sleep 30\n", 0o755)]);
        let o = run(&host, Duration::from_millis(200));
        assert!(!o.passed);
        assert!(
            o.output.starts_with("timed out after 200ms"),
            "{}",
            o.output
        );
    }

    #[test]
    fn no_directory_passes() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::sim(dir.path()).unwrap();
        assert!(run(&host, CHECK_TIMEOUT).passed);
    }
}
