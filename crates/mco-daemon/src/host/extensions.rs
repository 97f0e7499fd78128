//! The extensions repo: the RPMs of the cluster's extensions image
//! (`spec.baseOSExtensionsContainerImage`) made available to rpm-ostree as the
//! `coreos-extensions` yum repo for the one OS update that installs extensions or a kernel
//! flavour from it, then withdrawn.
//!
//! [`PodmanExtensions`] does what upstream's daemon does on a host: pull the image with podman
//! unless it is there, copy its files out under [`CONTENT_BASE_DIR`], relabel them for
//! rpm-ostree, and write [`REPO_FILE`] pointing at them. [`SimExtensions`] writes the same repo
//! file over an empty directory, with no container runtime, and logs each call. The engine sees
//! only the [`ExtensionsRepo`] trait.

use std::path::PathBuf;

use crate::error::{HostError, Result};
use crate::host::cmd::CommandRunner;
use crate::host::fs::{FileAttrs, HostFs};
use crate::host::paths;
use crate::host::podman::{CONTAINER_NAME_PREFIX, Podman};
use crate::host::retry::{self, Pause};

/// The yum repo file rpm-ostree reads, as upstream names it.
pub const REPO_FILE: &str = "/etc/yum.repos.d/coreos-extensions.repo";
/// Where the extensions image's files are copied, one directory per update.
pub const CONTENT_BASE_DIR: &str = "/run/mco-extensions";
/// Retries of a podman pull or copy after a failure, as upstream's (`numRetriesNetCommands`).
pub const PODMAN_RETRIES: u32 = 5;
/// A simulated node's record of provided and withdrawn repos, one line each.
pub const SIM_LOG: &str = "/var/log/mco-sim/extensions.log";

/// The repo file for the image content copied to `content_dir` (upstream's `addExtensionsRepo`,
/// byte for byte).
pub fn repo_file(content_dir: &str) -> String {
    format!(
        "[coreos-extensions]\nenabled=1\nmetadata_expire=1m\nbaseurl={content_dir}/usr/share/rpm-ostree/extensions/\ngpgcheck=0\nskip_if_unavailable=False\n"
    )
}

/// A fresh content directory under [`CONTENT_BASE_DIR`], named as upstream's `MkdirTemp` names it.
fn new_content_dir() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{CONTENT_BASE_DIR}/os-extensions-content-{}", &id[..10])
}

/// Makes an extensions image's packages available to rpm-ostree.
pub trait ExtensionsRepo: Send + Sync {
    /// Provides the `coreos-extensions` repo from `image`: its files under a directory of
    /// [`CONTENT_BASE_DIR`] (returned, as a host path) and [`REPO_FILE`] pointing at them.
    /// On error nothing is left behind.
    fn provide(&self, image: &str) -> Result<String>;

    /// Removes [`REPO_FILE`] and the content directory `provide` returned.
    fn withdraw(&self, content_dir: &str) -> Result<()>;
}

/// What [`ExtensionsRepo::withdraw`] removes, on either kind of node.
fn remove_repo(fs: &HostFs, content_dir: &str) -> Result<()> {
    fs.remove_file(REPO_FILE)?;
    fs.remove_all(content_dir).map(drop)
}

/// The real host's: podman copies the image's files out.
#[derive(Debug)]
pub struct PodmanExtensions {
    fs: HostFs,
    podman: Podman,
    chcon: PathBuf,
    runner: CommandRunner,
    pause: Pause,
}

impl PodmanExtensions {
    /// `podman` and `chcon` from `PATH`, run through `runner` (see [`CommandRunner::in_root`]);
    /// files under `fs`, the same root.
    pub fn new(fs: HostFs, runner: CommandRunner) -> PodmanExtensions {
        PodmanExtensions {
            fs,
            podman: Podman::new(runner.clone()),
            chcon: PathBuf::from("chcon"),
            runner,
            pause: retry::Pause::sleeping(),
        }
    }

    /// Replaces the waits between retries (tests record them).
    pub fn with_pause(mut self, pause: Pause) -> PodmanExtensions {
        self.pause = pause;
        self
    }

    /// Replaces podman (tests bound its time).
    pub fn with_podman(mut self, podman: Podman) -> PodmanExtensions {
        self.podman = podman;
        self
    }

    fn extract(&self, image: &str, dir: &str) -> Result<()> {
        // Upstream pulls unless podman already has the image, with the cluster pull secret
        // when there is one.
        if !self.podman.image_present(image)? {
            let auth = self
                .fs
                .exists(paths::KUBELET_AUTH_FILE)?
                .then_some(paths::KUBELET_AUTH_FILE);
            tracing::info!(image, "pulling the extensions image");
            retry::retry(
                &retry::command_waits(PODMAN_RETRIES),
                &self.pause,
                "podman pull",
                || self.podman.pull(image, auth),
            )
            .map_err(|e| {
                let e = e.command_error("podman");
                HostError::State(format!("error pulling extensions image {image}: {e}"))
            })?;
        }
        let name = format!("{CONTAINER_NAME_PREFIX}{}", uuid::Uuid::new_v4());
        let id = self.podman.create(&name, image)?;
        let copied = retry::retry(
            &retry::command_waits(PODMAN_RETRIES),
            &self.pause,
            "podman cp",
            || self.podman.copy_out(&id, dir),
        )
        .map_err(|e| e.command_error("podman"));
        if let Err(e) = self.podman.remove(&name) {
            tracing::warn!(container = %name, error = %e, "could not remove the extraction container");
        }
        copied?;
        // rpm-ostreed reads the files; as upstream, label them as /run's own.
        let args: Vec<String> = ["-R", "-t", "var_run_t", dir]
            .iter()
            .map(|s| s.to_string())
            .collect();
        self.runner.run(&self.chcon, &args).map(drop)
    }
}

impl ExtensionsRepo for PodmanExtensions {
    fn provide(&self, image: &str) -> Result<String> {
        self.fs
            .create_dir_all(CONTENT_BASE_DIR, 0o755, None, None)?;
        let dir = new_content_dir();
        let provided = self.extract(image, &dir).and_then(|()| {
            self.fs
                .write_atomic(REPO_FILE, repo_file(&dir).as_bytes(), &FileAttrs::default())
        });
        match provided {
            Ok(()) => Ok(dir),
            Err(e) => {
                if let Err(c) = self.withdraw(&dir) {
                    tracing::warn!(error = %c, "could not clean up the extensions content");
                }
                Err(e)
            }
        }
    }

    fn withdraw(&self, content_dir: &str) -> Result<()> {
        remove_repo(&self.fs, content_dir)
    }
}

/// A simulated node's: no container runtime, so the content directory stays empty; the repo
/// file is written as on a host, and every call is logged to [`SIM_LOG`] for tests.
#[derive(Debug)]
pub struct SimExtensions {
    fs: HostFs,
}

impl SimExtensions {
    /// The simulated node at `fs`.
    pub fn new(fs: HostFs) -> SimExtensions {
        SimExtensions { fs }
    }
}

impl ExtensionsRepo for SimExtensions {
    fn provide(&self, image: &str) -> Result<String> {
        let dir = new_content_dir();
        self.fs.create_dir_all(&dir, 0o755, None, None)?;
        self.fs
            .write_atomic(REPO_FILE, repo_file(&dir).as_bytes(), &FileAttrs::default())?;
        self.fs
            .append(SIM_LOG, format!("provide {image} {dir}\n").as_bytes())?;
        Ok(dir)
    }

    fn withdraw(&self, content_dir: &str) -> Result<()> {
        remove_repo(&self.fs, content_dir)?;
        self.fs
            .append(SIM_LOG, format!("withdraw {content_dir}\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_file_is_upstreams() {
        assert_eq!(
            repo_file("/run/mco-extensions/os-extensions-content-1"),
            "[coreos-extensions]\nenabled=1\nmetadata_expire=1m\nbaseurl=/run/mco-extensions/os-extensions-content-1/usr/share/rpm-ostree/extensions/\ngpgcheck=0\nskip_if_unavailable=False\n"
        );
        let d = new_content_dir();
        assert!(
            d.starts_with("/run/mco-extensions/os-extensions-content-"),
            "{d}"
        );
    }
}
