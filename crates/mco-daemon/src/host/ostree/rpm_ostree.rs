//! The real OS updater: the host's `rpm-ostree`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{
    DEFAULT_KERNEL_PACKAGES, KernelType, OsStatus, OsUpdater, PIVOT_DESCRIPTION, PIVOT_SCHEME,
    RebaseMode, split_kernel_arguments,
};
use crate::error::{HostError, Result};
use crate::host::cmd::{CmdOutput, CommandRunner};

/// rpm-ostree's answer while another client holds the daemon; worth waiting for.
const TRANSACTION_IN_PROGRESS: &str = "Transaction in progress";

/// Backoff for retrying while another rpm-ostree transaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts (at least 1).
    pub attempts: u32,
    /// First delay.
    pub initial: Duration,
    /// Delay cap; each retry doubles the delay up to this.
    pub max: Duration,
}

impl Default for RetryPolicy {
    /// Upstream's pivot retry shape: 10 s doubling, capped at 60 s, 7 attempts.
    fn default() -> Self {
        RetryPolicy {
            attempts: 7,
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
        }
    }
}

/// Drives `rpm-ostree` on the host.
#[derive(Debug, Clone)]
pub struct RpmOstree {
    program: PathBuf,
    runner: CommandRunner,
    retry: RetryPolicy,
}

impl RpmOstree {
    /// `rpm-ostree` from `PATH`, run through `runner` (see [`CommandRunner::in_root`]).
    pub fn new(runner: CommandRunner) -> RpmOstree {
        RpmOstree {
            program: PathBuf::from("rpm-ostree"),
            runner,
            retry: RetryPolicy::default(),
        }
    }

    /// A specific executable, run directly (tests pass a fake here rather than touching the
    /// process-wide `PATH`).
    pub fn with_program(program: impl Into<PathBuf>) -> RpmOstree {
        RpmOstree {
            program: program.into(),
            runner: CommandRunner::direct(),
            retry: RetryPolicy::default(),
        }
    }

    /// Replaces the command runner.
    pub fn runner(mut self, runner: CommandRunner) -> RpmOstree {
        self.runner = runner;
        self
    }

    /// Replaces the retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> RpmOstree {
        self.retry = retry;
        self
    }

    /// The executable in use.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Runs `rpm-ostree <args>`, retrying with backoff while another transaction is running.
    pub fn run(&self, args: &[String]) -> Result<CmdOutput> {
        let mut delay = self.retry.initial;
        let attempts = self.retry.attempts.max(1);
        for attempt in 1..=attempts {
            match self.runner.run(&self.program, args) {
                Err(HostError::Command { stderr, .. })
                    if stderr.contains(TRANSACTION_IN_PROGRESS) && attempt < attempts =>
                {
                    tracing::warn!(
                        attempt,
                        ?delay,
                        "rpm-ostree busy with another transaction; retrying"
                    );
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(self.retry.max);
                }
                other => return other,
            }
        }
        unreachable!("the last attempt always returns")
    }

    fn run_strs(&self, args: &[&str]) -> Result<CmdOutput> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.run(&args)
    }

    /// The argv of a rebase, exposed for logging and tests.
    pub fn rebase_args(url: &str, mode: &RebaseMode) -> Vec<String> {
        match mode {
            RebaseMode::Pivot { refspec } => vec![
                "rebase".into(),
                "--experimental".into(),
                refspec.clone(),
                "--custom-origin-url".into(),
                format!("{PIVOT_SCHEME}{url}"),
                "--custom-origin-description".into(),
                PIVOT_DESCRIPTION.into(),
            ],
            RebaseMode::Container => vec![
                "rebase".into(),
                "--experimental".into(),
                format!("ostree-unverified-registry:{url}"),
            ],
        }
    }

    /// The argv of a kernel-argument change. Deletions use `--delete-if-present` so that
    /// re-running an interrupted update (old arguments already gone) converges instead of
    /// failing, as upstream switched to for OCPBUGS-75894.
    pub fn kargs_args(delete: &[String], append: &[String]) -> Vec<String> {
        let mut args = vec!["kargs".to_string()];
        args.extend(delete.iter().map(|a| format!("--delete-if-present={a}")));
        args.extend(append.iter().map(|a| format!("--append={a}")));
        args
    }

    /// The argv applying extension arguments: `update --install P ... --uninstall Q ...`.
    pub fn update_packages_args(args: &[String]) -> Vec<String> {
        let mut argv = vec!["update".to_string()];
        argv.extend(args.iter().cloned());
        argv
    }

    /// The argv sequence switching kernels: back to the default first when leaving a
    /// non-default kernel, then to the target.
    pub fn kernel_type_commands(from: KernelType, to: KernelType) -> Vec<Vec<String>> {
        let mut cmds = Vec::new();
        if from == to {
            return cmds;
        }
        if from != KernelType::Default {
            let mut c: Vec<String> = vec!["override".into(), "reset".into()];
            c.extend(DEFAULT_KERNEL_PACKAGES.iter().map(|p| p.to_string()));
            for p in from.packages() {
                c.push("--uninstall".into());
                c.push(p.to_string());
            }
            cmds.push(c);
        }
        if to != KernelType::Default {
            let mut c: Vec<String> = vec!["override".into(), "remove".into()];
            c.extend(DEFAULT_KERNEL_PACKAGES.iter().map(|p| p.to_string()));
            for p in to.packages() {
                c.push("--install".into());
                c.push(p.to_string());
            }
            cmds.push(c);
        }
        cmds
    }
}

impl OsUpdater for RpmOstree {
    fn status(&self) -> Result<OsStatus> {
        let out = self.run_strs(&["status", "--json"])?;
        OsStatus::parse(&out.stdout)
    }

    fn rebase(&self, url: &str, mode: &RebaseMode) -> Result<()> {
        self.run(&Self::rebase_args(url, mode)).map(drop)
    }

    fn kargs(&self) -> Result<Vec<String>> {
        let out = self.run_strs(&["kargs"])?;
        Ok(split_kernel_arguments(&out.stdout))
    }

    fn set_kargs(&self, delete: &[String], append: &[String]) -> Result<()> {
        if delete.is_empty() && append.is_empty() {
            return Ok(());
        }
        self.run(&Self::kargs_args(delete, append)).map(drop)
    }

    fn set_kernel_type(&self, kernel: KernelType) -> Result<()> {
        let from = self.status()?.default_deployment().kernel_type();
        for cmd in Self::kernel_type_commands(from, kernel) {
            self.run(&cmd)?;
        }
        Ok(())
    }

    fn update_packages(&self, args: &[String]) -> Result<()> {
        if args.is_empty() {
            return Ok(());
        }
        self.run(&Self::update_packages_args(args)).map(drop)
    }

    fn cleanup_pending(&self) -> Result<()> {
        self.run_strs(&["cleanup", "-p"]).map(drop)
    }

    fn cleanup_rollback(&self) -> Result<()> {
        self.run_strs(&["cleanup", "-r"]).map(drop)
    }
}
