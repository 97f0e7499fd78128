//! Rebooting the node: a transient systemd unit on a real host, a request to the node's
//! supervisor in simulation.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{HostError, Result};
use crate::host::cmd::CommandRunner;
use crate::host::fs::{FileAttrs, HostFs};
use crate::host::ostree::SimOstree;
use crate::host::paths;

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

/// A fresh boot id in the kernel's format.
pub fn new_boot_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A reboot requested for `config` during boot `boot_id` ([`paths::PENDING_REBOOT`]). Written
/// before the reboot is requested and kept until a start-up sees another boot id, so a daemon
/// that died in between knows the reboot is still owed even when the disk already matches
/// `config` (a file-only update stages no OS that would tell).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingReboot {
    /// The rendered config the node reboots into.
    pub config: String,
    /// The boot the reboot was requested in.
    pub boot_id: String,
}

impl PendingReboot {
    /// The record on `fs`, if any. An unreadable record is treated as absent (and logged): it
    /// can only come from a torn write, which `write_atomic` rules out, or tampering.
    pub fn read(fs: &HostFs) -> Result<Option<PendingReboot>> {
        let Some(data) = fs.read_optional(paths::PENDING_REBOOT)? else {
            return Ok(None);
        };
        match serde_json::from_slice(&data) {
            Ok(p) => Ok(Some(p)),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring unreadable {}", paths::PENDING_REBOOT);
                Ok(None)
            }
        }
    }

    /// Writes the record durably.
    pub fn write(&self, fs: &HostFs) -> Result<()> {
        let data = serde_json::to_vec(self).map_err(|e| HostError::Json {
            what: paths::PENDING_REBOOT.into(),
            source: e,
        })?;
        fs.write_atomic(paths::PENDING_REBOOT, &data, &FileAttrs::default())
    }

    /// Removes the record durably; `false` when there was none.
    pub fn clear(fs: &HostFs) -> Result<bool> {
        let removed = fs.remove_file(paths::PENDING_REBOOT)?;
        if removed {
            fs.sync_parent(paths::PENDING_REBOOT)?;
        }
        Ok(removed)
    }

    /// Whether this reboot is still owed: requested for `config` in the current boot.
    pub fn is_owed(&self, config: &str, current_boot_id: &str) -> bool {
        self.config == config && self.boot_id == current_boot_id
    }
}

/// What a reboot does to a simulated node's disk, for its supervisor to call while the daemon
/// is stopped: the staged deployment boots, `/run` (a tmpfs) starts empty except for the
/// `ostree-booted` marker that the boot recreates, and the boot id changes. Returns whether a
/// staged deployment booted.
pub fn complete_sim_reboot(fs: &HostFs) -> Result<bool> {
    let ostree_booted = fs.exists(paths::OSTREE_BOOTED)?;
    let sim = SimOstree::new(fs.try_clone()?);
    let booted_new = if fs.exists(paths::SIM_OSTREE_STATE)? {
        sim.finalize_reboot()?
    } else {
        false
    };
    // The marker the boot would recreate is kept instead: the same empty file, without a
    // file deleted and another created on every simulated reboot.
    let marker = Path::new(paths::OSTREE_BOOTED)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    for name in fs.list_dir("/run")? {
        if ostree_booted && name == marker {
            continue;
        }
        fs.remove_all(&format!("/run/{name}"))?;
    }
    fs.write_atomic(
        paths::BOOT_ID,
        new_boot_id().as_bytes(),
        &FileAttrs::mode(0o444),
    )?;
    Ok(booted_new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_reboot_is_owed_only_in_the_same_boot_for_the_same_config() {
        let p = PendingReboot {
            config: "rendered-worker-1".into(),
            boot_id: "b1".into(),
        };
        assert!(p.is_owed("rendered-worker-1", "b1"));
        assert!(!p.is_owed("rendered-worker-1", "b2"), "rebooted since");
        assert!(!p.is_owed("rendered-worker-0", "b1"), "stale record");
    }

    #[test]
    fn pending_reboot_round_trip_and_sim_reboot_changes_the_boot_id() {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        assert_eq!(PendingReboot::read(&fs).unwrap(), None);
        let p = PendingReboot {
            config: "c".into(),
            boot_id: "b".into(),
        };
        p.write(&fs).unwrap();
        assert_eq!(PendingReboot::read(&fs).unwrap(), Some(p));
        assert!(PendingReboot::clear(&fs).unwrap());
        assert!(!PendingReboot::clear(&fs).unwrap());

        complete_sim_reboot(&fs).unwrap();
        let first = fs.read_to_string(paths::BOOT_ID).unwrap();
        complete_sim_reboot(&fs).unwrap();
        let second = fs.read_to_string(paths::BOOT_ID).unwrap();
        assert_eq!(first.len(), 36);
        assert_ne!(first, second);
    }
}
