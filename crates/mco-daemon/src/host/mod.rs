//! The host layer: the primitives the update engine uses to read and change a node, and
//! [`Host`], one handle on a node (its files, OS updater, systemd and rebooter, real or
//! simulated) so the update engine is written once.

// The host layer is where host effects belong; clippy.toml keeps them out of the rest.
#![allow(clippy::disallowed_methods)]

pub mod backup;
pub mod cmd;
pub mod extensions;
pub mod fs;
pub mod images;
pub mod osrelease;
pub mod ostree;
pub mod passwd;
pub mod paths;
pub mod podman;
pub mod reboot;
pub mod retry;
pub mod systemd;
pub mod units;
pub mod users;

use std::path::Path;

use crate::error::{HostError, Result};
use crate::host::cmd::CommandRunner;
use crate::host::extensions::{ExtensionsRepo, PodmanExtensions, SimExtensions};
use crate::host::fs::{Durability, FileAttrs, HostFs};
use crate::host::images::{ContainerImages, Crictl, SimImages};
use crate::host::osrelease::HostOs;
use crate::host::ostree::{OsUpdater, RpmOstree, SimOstree};
use crate::host::reboot::{Rebooter, SimRebooter, SystemdRunRebooter};
use crate::host::systemd::{SimSystemd, Systemctl, Systemd};

/// Which implementation a [`Host`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// rpm-ostree, systemctl, systemd-run.
    Real,
    /// State files inside the node's root.
    Sim,
}

/// A node as the update engine sees it.
pub struct Host {
    /// The node's files.
    pub fs: HostFs,
    /// Its OS updater.
    pub os: Box<dyn OsUpdater>,
    /// Its systemd.
    pub systemd: Box<dyn Systemd>,
    /// Its rebooter.
    pub rebooter: Box<dyn Rebooter>,
    /// Its container images (CRI-O's), for PinnedImageSets.
    pub images: Box<dyn ContainerImages>,
    /// How the extensions image's packages reach rpm-ostree (podman, or simulated).
    pub extensions: Box<dyn ExtensionsRepo>,
    /// Waits between retries of a failed pull: the thread sleeps; tests record.
    pub pause: retry::Pause,
    kind: HostKind,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("root", &self.fs.root())
            .field("kind", &self.kind)
            .finish()
    }
}

impl Host {
    /// A real host whose root is `root`: `/` when the daemon runs on the host, or the host's
    /// mount (e.g. `/rootfs`) when it runs in a container, in which case host tools run via
    /// `chroot <root>`.
    pub fn real(root: impl AsRef<Path>) -> Result<Host> {
        let root = root.as_ref();
        let fs = HostFs::open(root)?;
        let runner = CommandRunner::in_root(root);
        let ostree_booted = fs.exists(paths::OSTREE_BOOTED)?;
        Ok(Host {
            os: Box::new(RpmOstree::new(runner.clone())),
            images: Box::new(Crictl::new(runner.clone())),
            extensions: Box::new(PodmanExtensions::new(fs.try_clone()?, runner.clone())),
            systemd: Box::new(Systemctl::new(runner.clone())),
            rebooter: Box::new(
                SystemdRunRebooter::new(runner).after_ostree_finalize(ostree_booted),
            ),
            pause: retry::Pause::sleeping(),
            fs,
            kind: HostKind::Real,
        })
    }

    /// A simulated node whose whole state lives under `root`.
    pub fn sim(root: impl AsRef<Path>) -> Result<Host> {
        let fs = HostFs::open(root)?.with_durability(Durability::ProcessCrash);
        Ok(Host {
            os: Box::new(SimOstree::new(fs.try_clone()?)),
            images: Box::new(SimImages::new(fs.try_clone()?)),
            extensions: Box::new(SimExtensions::new(fs.try_clone()?)),
            systemd: Box::new(SimSystemd::new(fs.try_clone()?)),
            rebooter: Box::new(SimRebooter::new(fs.try_clone()?)),
            pause: retry::Pause::sleeping(),
            fs,
            kind: HostKind::Sim,
        })
    }

    /// Replaces the rebooter (a simulated node's supervisor plugs in its notifier).
    pub fn with_rebooter(mut self, rebooter: Box<dyn Rebooter>) -> Host {
        self.rebooter = rebooter;
        self
    }

    /// Replaces the extensions repo provider (tests plug in a podman fake).
    pub fn with_extensions(mut self, extensions: Box<dyn ExtensionsRepo>) -> Host {
        self.extensions = extensions;
        self
    }

    /// Which implementation this is.
    pub fn kind(&self) -> HostKind {
        self.kind
    }

    /// The id of the current boot: the root's `/proc/sys/kernel/random/boot_id`. A simulated
    /// node without one gets a fresh id (its first boot); a real host whose root is not `/`
    /// falls back to the running kernel's, which is the host's own.
    pub fn boot_id(&self) -> Result<String> {
        if let Some(id) = self.fs.read_optional(paths::BOOT_ID)? {
            return Ok(String::from_utf8_lossy(&id).trim().to_string());
        }
        match self.kind {
            HostKind::Sim => {
                let id = crate::host::reboot::new_boot_id();
                self.fs
                    .write_atomic(paths::BOOT_ID, id.as_bytes(), &FileAttrs::mode(0o444))?;
                Ok(id)
            }
            HostKind::Real => std::fs::read_to_string(paths::BOOT_ID)
                .map(|s| s.trim().to_string())
                .map_err(|e| HostError::io(format!("reading {}", paths::BOOT_ID), e)),
        }
    }

    /// Reads the OS identity and whether the OS is managed.
    pub fn detect_os(&self) -> Result<HostOs> {
        HostOs::detect(&self.fs)
    }
}
