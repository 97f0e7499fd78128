//! Rebooting the node: a transient systemd unit on a real host, a request to the node's
//! supervisor in simulation.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::cmd::CommandRunner;
use crate::error::{HostError, Result};
use crate::fs::{FileAttrs, HostFs};
use crate::ostree::SimOstree;
use crate::paths;

/// The transient unit upstream uses, so operators find it with `systemctl status`.
pub const REBOOT_UNIT: &str = "machine-config-daemon-reboot";
/// Upstream's error when the reboot could not even be queued.
pub const REBOOT_FAILED: &str = "reboot command failed, something is seriously wrong";

/// Asks for a reboot. Returns once the reboot is queued; the caller must then stop acting.
pub trait Rebooter: Send + Sync {
    /// Queues a reboot with a human-readable reason.
    fn reboot(&self, rationale: &str) -> Result<()>;
}

/// Reboots through `systemd-run`, leaving kubelet's graceful node shutdown to drain pods.
#[derive(Debug, Clone)]
pub struct SystemdRunRebooter {
    program: PathBuf,
    runner: CommandRunner,
    after_finalize: bool,
}

impl SystemdRunRebooter {
    /// `systemd-run` from `PATH`, through `runner`.
    pub fn new(runner: CommandRunner) -> SystemdRunRebooter {
        SystemdRunRebooter {
            program: PathBuf::from("systemd-run"),
            runner,
            after_finalize: false,
        }
    }

    /// A specific executable, run directly (tests pass a recording fake).
    pub fn with_program(program: impl Into<PathBuf>) -> SystemdRunRebooter {
        SystemdRunRebooter {
            program: program.into(),
            runner: CommandRunner::direct(),
            after_finalize: false,
        }
    }

    /// On ostree hosts, order the reboot after `ostree-finalize-staged.service` so the staged
    /// deployment is finalized first (upstream's OCPBUGS-51150 workaround).
    pub fn after_ostree_finalize(mut self, yes: bool) -> SystemdRunRebooter {
        self.after_finalize = yes;
        self
    }

    /// The argv passed to `systemd-run`.
    pub fn args(&self, rationale: &str) -> Vec<String> {
        let mut args = vec![
            "--unit".to_string(),
            REBOOT_UNIT.to_string(),
            "--description".to_string(),
            format!("machine-config-daemon: {rationale}"),
        ];
        if self.after_finalize {
            for p in [
                "Requires=ostree-finalize-staged.service",
                "After=ostree-finalize-staged.service",
            ] {
                args.push("-p".into());
                args.push(p.into());
            }
        }
        args.extend(["/bin/sh", "-c", "systemctl reboot"].map(String::from));
        args
    }
}

impl Rebooter for SystemdRunRebooter {
    fn reboot(&self, rationale: &str) -> Result<()> {
        self.runner
            .run(&self.program, &self.args(rationale))
            .map(drop)
            .map_err(|e| HostError::State(format!("{REBOOT_FAILED}: {e}")))
    }
}

/// A simulated node's reboot request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebootRequest {
    /// Why the daemon reboots.
    pub rationale: String,
    /// Unix seconds.
    pub requested_at: u64,
}

/// Called when the simulated node asks for a reboot (an in-process supervisor forwards it to
/// its own channel, e.g. a tokio `mpsc::Sender`).
pub type RebootNotifier = Arc<dyn Fn(&RebootRequest) + Send + Sync>;

/// Asks the node's supervisor to reboot the node: writes `<root>/run/mco-sim/reboot-requested`
/// (survives a daemon crash, so a supervisor polling the file cannot miss it) and calls the
/// notifier when one is set.
pub struct SimRebooter {
    fs: HostFs,
    notify: Option<RebootNotifier>,
}

impl std::fmt::Debug for SimRebooter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRebooter")
            .field("root", &self.fs.root())
            .field("notify", &self.notify.is_some())
            .finish()
    }
}

impl SimRebooter {
    /// A rebooter for the node at `fs`.
    pub fn new(fs: HostFs) -> SimRebooter {
        SimRebooter { fs, notify: None }
    }

    /// Also calls `notify` on every request.
    pub fn with_notifier(mut self, notify: RebootNotifier) -> SimRebooter {
        self.notify = Some(notify);
        self
    }

    /// The pending request of the node at `fs`, if any.
    pub fn pending(fs: &HostFs) -> Result<Option<RebootRequest>> {
        match fs.read_optional(paths::SIM_REBOOT_REQUEST)? {
            None => Ok(None),
            Some(data) => serde_json::from_slice(&data)
                .map(Some)
                .map_err(|e| HostError::Json {
                    what: paths::SIM_REBOOT_REQUEST.into(),
                    source: e,
                }),
        }
    }
}

impl Rebooter for SimRebooter {
    fn reboot(&self, rationale: &str) -> Result<()> {
        let req = RebootRequest {
            rationale: rationale.to_string(),
            requested_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        let data = serde_json::to_vec(&req).map_err(|e| HostError::Json {
            what: paths::SIM_REBOOT_REQUEST.into(),
            source: e,
        })?;
        self.fs
            .write_atomic(paths::SIM_REBOOT_REQUEST, &data, &FileAttrs::default())?;
        if let Some(n) = &self.notify {
            n(&req);
        }
        Ok(())
    }
}

/// What a reboot does to a simulated node's disk, for its supervisor to call while the daemon
/// is stopped: the staged deployment boots, and `/run` (a tmpfs) starts empty except for the
/// `ostree-booted` marker that the boot recreates. Returns whether a staged deployment booted.
pub fn complete_sim_reboot(fs: &HostFs) -> Result<bool> {
    let ostree_booted = fs.exists(paths::OSTREE_BOOTED)?;
    let sim = SimOstree::new(fs.try_clone()?);
    let booted_new = if fs.exists(paths::SIM_OSTREE_STATE)? {
        sim.finalize_reboot()?
    } else {
        false
    };
    for name in fs.list_dir("/run")? {
        fs.remove_all(&format!("/run/{name}"))?;
    }
    if ostree_booted {
        fs.write_atomic(paths::OSTREE_BOOTED, b"", &FileAttrs::default())?;
    }
    Ok(booted_new)
}
