//! Running host tools, optionally inside the host root.
//!
//! On a real cluster the daemon runs in a container with the host's root mounted at `/rootfs`
//! and runs host tools as `chroot /rootfs <tool> ...`, so they act on the host (its D-Bus,
//! its rpm-ostree daemon, its systemd). With root `/` the tools run directly.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{HostError, Result};

/// What a successful tool run printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmdOutput {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs host tools, with an optional chroot prefix and extra environment.
#[derive(Debug, Clone, Default)]
pub struct CommandRunner {
    chroot: Option<PathBuf>,
    chroot_program: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
}

/// Upstream's rendering of an exit status (`exit status 1`, `signal: killed`).
fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal: {s}"),
        _ => status.to_string(),
    }
}

/// The command line as one string, for logs and errors.
pub fn command_line(program: &Path, args: &[String]) -> String {
    let mut s = program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Keeps the first `max` bytes of a stream and drains the rest, so a chatty tool neither
/// blocks on a full pipe nor costs memory.
pub fn capture(mut r: impl Read + Send + 'static, max: usize) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut r).take(max as u64).read_to_end(&mut kept);
        let _ = std::io::copy(&mut r, &mut std::io::sink());
        kept
    })
}

/// Waits for `child` up to `timeout`, polling (callers run on a blocking thread); past it the
/// child is killed.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Result<ExitStatus, String> {
    wait_cancellable(child, timeout, &AtomicBool::new(false))
}

/// What [`wait_cancellable`] and [`CommandRunner::run_cancellable`] say of a child killed
/// because `stop` was set.
pub const STOPPED: &str = "stopped: killed at its caller's request";

/// As [`wait_bounded`], and the child is also killed once `stop` is set, seen within one
/// 20-ms poll; the error is then [`STOPPED`], not a timeout.
pub fn wait_cancellable(
    child: &mut Child,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<ExitStatus, String> {
    let started = Instant::now();
    let kill = |child: &mut Child| {
        let _ = child.kill();
        let _ = child.wait();
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if stop.load(Ordering::SeqCst) => {
                kill(child);
                return Err(STOPPED.to_string());
            }
            Ok(None) if started.elapsed() >= timeout => {
                kill(child);
                return Err(format!("timed out after {timeout:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting: {e}")),
        }
    }
}

impl CommandRunner {
    /// Runs tools directly on the daemon's own root.
    pub fn direct() -> CommandRunner {
        CommandRunner::default()
    }

    /// Runs tools as `chroot <root> <tool>`; with root `/` this is the same as [`direct`].
    ///
    /// [`direct`]: CommandRunner::direct
    pub fn in_root(root: impl AsRef<Path>) -> CommandRunner {
        let root = root.as_ref();
        CommandRunner {
            chroot: (root != Path::new("/")).then(|| root.to_path_buf()),
            ..CommandRunner::default()
        }
    }

    /// Uses a specific `chroot` binary (tests use a recording fake).
    pub fn with_chroot_program(mut self, program: impl Into<PathBuf>) -> CommandRunner {
        self.chroot_program = Some(program.into());
        self
    }

    /// Adds an environment variable to every tool run.
    pub fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The root tools run in, when not `/`.
    pub fn chroot(&self) -> Option<&Path> {
        self.chroot.as_deref()
    }

    fn command(&self, program: &Path, args: &[String]) -> Command {
        let mut cmd = match &self.chroot {
            Some(root) => {
                let mut c = Command::new(
                    self.chroot_program
                        .as_deref()
                        .unwrap_or(Path::new("chroot")),
                );
                c.arg(root).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.args(args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the tool with stdin closed and stdout and stderr piped, for a caller that bounds
    /// its time and its output itself (the node health checks).
    pub fn spawn(&self, program: &Path, args: &[String]) -> Result<std::process::Child> {
        use std::process::Stdio;
        self.command(program, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| HostError::Spawn {
                command: command_line(program, args),
                source: e,
            })
    }

    /// Runs the tool for at most `timeout`, keeping at most `max_output` bytes of each stream:
    /// for tools that talk to the network (a registry pull), whose time and output the daemon
    /// does not control. Past the timeout the tool is killed and the error says so.
    pub fn run_bounded(
        &self,
        program: &Path,
        args: &[String],
        timeout: Duration,
        max_output: usize,
    ) -> Result<CmdOutput> {
        self.run_cancellable(program, args, timeout, max_output, &AtomicBool::new(false))
    }

    /// As [`run_bounded`](CommandRunner::run_bounded), and the tool is also killed once `stop`
    /// is set (within one 20-ms poll), as a cancelled context ends a call: the error's status
    /// is then [`STOPPED`].
    pub fn run_cancellable(
        &self,
        program: &Path,
        args: &[String],
        timeout: Duration,
        max_output: usize,
        stop: &AtomicBool,
    ) -> Result<CmdOutput> {
        let mut child = self.spawn(program, args)?;
        let out = child.stdout.take().map(|r| capture(r, max_output));
        let err = child.stderr.take().map(|r| capture(r, max_output));
        let status = wait_cancellable(&mut child, timeout, stop);
        let text = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
            String::from_utf8_lossy(&h.and_then(|h| h.join().ok()).unwrap_or_default()).into_owned()
        };
        let (stdout, stderr) = (text(out), text(err));
        match status {
            Ok(s) if s.success() => Ok(CmdOutput { stdout, stderr }),
            Ok(s) => Err(HostError::Command {
                command: command_line(program, args),
                stderr: stderr.trim().to_string(),
                status: describe_status(s),
            }),
            Err(why) => Err(HostError::Command {
                command: command_line(program, args),
                stderr: stderr.trim().to_string(),
                status: why,
            }),
        }
    }

    /// Runs the tool; any non-zero exit is an error carrying its stderr.
    pub fn run(&self, program: &Path, args: &[String]) -> Result<CmdOutput> {
        let (status, out) = self.run_unchecked(program, args)?;
        if status.success() {
            Ok(out)
        } else {
            Err(HostError::Command {
                command: command_line(program, args),
                stderr: out.stderr.trim().to_string(),
                status: describe_status(status),
            })
        }
    }

    /// Runs the tool and returns its status, for tools whose exit code is an answer
    /// (`systemctl is-enabled`).
    pub fn run_unchecked(
        &self,
        program: &Path,
        args: &[String],
    ) -> Result<(ExitStatus, CmdOutput)> {
        tracing::debug!(command = %command_line(program, args), chroot = ?self.chroot, "running");
        // ETXTBSY: an executable that was just written (a tool dropped in place, or a test's
        // fake) can still be open for writing in a child another thread is forking; that
        // window closes at the child's exec, so a short bounded retry always gets through.
        const ETXTBSY: i32 = 26;
        let mut attempts = 0;
        let out = loop {
            match self.command(program, args).output() {
                Err(e) if e.raw_os_error() == Some(ETXTBSY) && attempts < 100 => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => {
                    break other.map_err(|e| HostError::Spawn {
                        command: command_line(program, args),
                        source: e,
                    })?;
                }
            }
        };
        Ok((
            out.status,
            CmdOutput {
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            },
        ))
    }
}

#[cfg(test)]
#[path = "../../tests/support/fake_tools.rs"]
pub(crate) mod testutil;

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn direct_run_and_failure_shape() {
        let t = tempfile::tempdir().unwrap();
        let ok = fake_tool(t.path(), "ok", "echo out; echo err >&2");
        let out = CommandRunner::direct()
            .run(&ok, &argv(&["a b", "c"]))
            .unwrap();
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(calls(t.path(), "ok"), vec![argv(&["a b", "c"])]);

        let bad = fake_tool(t.path(), "bad", "echo 'error: nope' >&2; exit 3");
        let err = CommandRunner::direct()
            .run(&bad, &argv(&["x"]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "error running {} x: error: nope: exit status 3",
                bad.display()
            )
        );
        let missing = CommandRunner::direct()
            .run(&t.path().join("missing"), &[])
            .unwrap_err();
        assert!(matches!(missing, HostError::Spawn { .. }));
    }

    #[test]
    fn chroot_prefix_and_env() {
        let t = tempfile::tempdir().unwrap();
        let chroot = fake_tool(t.path(), "chroot", "echo \"$MCO_TEST\"");
        let runner = CommandRunner::in_root("/rootfs")
            .with_chroot_program(&chroot)
            .with_env("MCO_TEST", "v");
        assert_eq!(runner.chroot(), Some(Path::new("/rootfs")));
        let out = runner
            .run(Path::new("rpm-ostree"), &argv(&["status", "--json"]))
            .unwrap();
        assert_eq!(out.stdout, "v\n");
        assert_eq!(
            calls(t.path(), "chroot"),
            vec![argv(&["/rootfs", "rpm-ostree", "status", "--json"])]
        );
        assert_eq!(CommandRunner::in_root("/").chroot(), None);
    }
}
