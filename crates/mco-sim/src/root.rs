//! A simulated node's disk: `DIR/nodes/<name>/` is that node's `/`.
//!
//! Besides what a real host has (os-release, `/run/ostree-booted`, the user databases), the
//! root keeps the simulated ostree (`/var/lib/mco-sim/ostree.json`, owned by the daemon's host
//! layer) and the boot id at `/proc/sys/kernel/random/boot_id`, where a real kernel shows it,
//! so tools reading either kind of host find it at the same path.
//!
//! `DIR/nodes` carries ext2/3/4's TOPDIR flag (`chattr +T`), so each node's root and its files
//! sit in block groups of their own: an ext4 without a journal otherwise scans, on every inode
//! allocation, the inodes its group freed lately, and every atomic write frees one.

use std::path::{Path, PathBuf};

use mco_daemon::host::fs::{Durability, FileAttrs, HostFs};
use mco_daemon::host::ostree::{DeploymentJson, OsStatus, SimOstree, StatusJson};
use mco_daemon::host::paths;

use crate::error::{Result, SimError};
use crate::profile::{OsProfile, OsUpdateMode};

/// The kernel's boot id, under the node root.
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// Written last when a root is laid out, so a half-created root is laid out again.
pub const SIM_ROOT_MARKER: &str = "/var/lib/mco-sim/root-created";

const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:CoreOS Admin:/home/core:/bin/bash\n";
const GROUP: &str = "root:x:0:\nwheel:x:10:core\ncore:x:1000:\n";
const SHADOW: &str = "root:*:19000:0:99999:7:::\ncore:*:19000:0:99999:7:::\n";

/// Asks ext2/3/4 to spread the directories made in `dir` over the filesystem's block groups, as
/// it does top-level directories (`chattr +T`), so that each node's files live near its own
/// root rather than every node's in the same few groups.
///
/// An ext4 without a journal skips every inode of a group freed in the last minute (five, while
/// the inode table is unwritten) when it allocates one, and reads each from the inode table to
/// know. Every atomic write frees an inode, so with a thousand nodes' writes in one group that
/// scan was up to a sixth of a rollout's CPU. Filesystems without the flag refuse it, which
/// changes nothing.
fn spread_subdirs(dir: &Path) {
    use rustix::fs::{IFlags, ioctl_getflags, ioctl_setflags};
    let Ok(d) = std::fs::File::open(dir) else {
        return;
    };
    match ioctl_getflags(&d) {
        Ok(flags) if !flags.contains(IFlags::TOPDIR) => {
            if let Err(e) = ioctl_setflags(&d, flags | IFlags::TOPDIR) {
                tracing::debug!(dir = %dir.display(), error = %e, "node roots not spread");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "node roots not spread"),
    }
}

/// A simulated node's root directory.
#[derive(Debug, Clone)]
pub struct NodeRoot {
    path: PathBuf,
}

impl NodeRoot {
    /// The root at `path` (which may not exist yet).
    pub fn at(path: impl Into<PathBuf>) -> NodeRoot {
        NodeRoot { path: path.into() }
    }

    /// The root's directory on this machine.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the root was fully laid out.
    pub fn exists(&self) -> bool {
        self.path.join(rel(SIM_ROOT_MARKER)).exists()
    }

    /// Lays the root out for `profile` unless it already was: a restarted cluster keeps its
    /// nodes' disks and OS deployments.
    pub fn ensure(&self, profile: OsProfile, mode: OsUpdateMode) -> Result<HostFs> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| SimError::io("creating node roots", parent, e))?;
            spread_subdirs(parent);
        }
        std::fs::create_dir_all(&self.path)
            .map_err(|e| SimError::io("creating node root", &self.path, e))?;
        let fs = self.fs()?;
        if self.exists() {
            return Ok(fs);
        }
        let attrs = FileAttrs::mode(0o644);
        fs.write_atomic(paths::OS_RELEASE, profile.os_release().as_bytes(), &attrs)?;
        fs.write_atomic(paths::PASSWD, PASSWD.as_bytes(), &attrs)?;
        fs.write_atomic(paths::GROUP, GROUP.as_bytes(), &attrs)?;
        fs.write_atomic(paths::SHADOW, SHADOW.as_bytes(), &FileAttrs::mode(0o600))?;
        fs.create_dir_all("/home/core", 0o700, None, None)?;
        if profile.ostree_booted() {
            fs.write_atomic(paths::OSTREE_BOOTED, b"", &attrs)?;
        }
        if let Some(state) = initial_ostree(profile, mode) {
            let sim = SimOstree::new(fs.try_clone()?);
            sim.seed(&state)?;
            for (url, version) in profile.images() {
                sim.register_image(url, version)?;
            }
        }
        fs.write_atomic(BOOT_ID, new_boot_id().as_bytes(), &attrs)?;
        fs.write_atomic(SIM_ROOT_MARKER, profile.as_str().as_bytes(), &attrs)?;
        Ok(fs)
    }

    /// The node's file access.
    pub fn fs(&self) -> Result<HostFs> {
        Ok(HostFs::open(&self.path)?.with_durability(Durability::ProcessCrash))
    }

    /// The current boot id.
    pub fn boot_id(&self) -> Result<String> {
        Ok(self.fs()?.read_to_string(BOOT_ID)?.trim().to_string())
    }

    /// The simulated ostree's deployments; `None` on a non-ostree host.
    pub fn os_status(&self) -> Result<Option<OsStatus>> {
        let fs = self.fs()?;
        if !fs.exists(paths::SIM_OSTREE_STATE)? {
            return Ok(None);
        }
        let Some(state) = self.os_status_json()? else {
            return Ok(None);
        };
        Ok(Some(OsStatus::from_json(&state)?))
    }

    /// The `rpm-ostree status --json` document; `None` on a non-ostree host. Rebased
    /// deployments show their image's version and build time ([`crate::image`]).
    pub fn os_status_json(&self) -> Result<Option<StatusJson>> {
        let fs = self.fs()?;
        if !fs.exists(paths::SIM_OSTREE_STATE)? {
            return Ok(None);
        }
        let profile = match fs.exists(SIM_ROOT_MARKER)? {
            true => fs.read_to_string(SIM_ROOT_MARKER)?.trim().parse().ok(),
            false => None,
        };
        let mut state = SimOstree::new(fs).state()?;
        crate::image::normalize(profile, &mut state);
        Ok(Some(state))
    }
}

/// `/a/b` as a path relative to a root.
fn rel(p: &str) -> &str {
    p.trim_start_matches('/')
}

/// A random boot id in the kernel's format.
pub fn new_boot_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The ostree a node boots before adoption. In container mode the node boots the base image
/// as an ostree native container, so the daemon rebases by container reference; in pivot mode
/// it boots a plain refspec, as seed 000's hosts did.
pub fn initial_ostree(profile: OsProfile, mode: OsUpdateMode) -> Option<StatusJson> {
    let d = profile.initial_deployment()?;
    let mut dep = DeploymentJson {
        id: format!("{}-{}.0", d.osname, d.checksum),
        osname: d.osname.clone(),
        serial: 0,
        checksum: d.checksum.clone(),
        version: Some(d.version.clone()),
        timestamp: Some(d.timestamp),
        booted: true,
        origin: Some(d.refspec.clone()),
        ..DeploymentJson::default()
    };
    if mode == OsUpdateMode::Container {
        dep.origin = None;
        dep.container_image_reference = Some(format!(
            "ostree-unverified-registry:registry.example.com/mco/{}-base:{}",
            profile.as_str(),
            d.version
        ));
        dep.container_image_reference_digest = Some(format!("sha256:{}", d.checksum));
    }
    Some(StatusJson {
        deployments: vec![dep],
        ..StatusJson::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pivot_mode_boots_the_plain_refspec() {
        let s = initial_ostree(OsProfile::Uos, OsUpdateMode::Pivot).unwrap();
        let st = OsStatus::from_json(&s).unwrap();
        assert_eq!(st.booted.os_image_url(), None);
        assert!(!st.booted.is_mco_managed());
        assert!(st.to_string().contains("* uswift:uswift/x86_64\n"));
    }

    #[test]
    fn container_mode_boots_a_container_reference() {
        let s = initial_ostree(OsProfile::Rhcos, OsUpdateMode::Container).unwrap();
        let st = OsStatus::from_json(&s).unwrap();
        assert!(st.booted.is_mco_managed());
    }

    #[test]
    fn rhel_has_no_ostree() {
        assert!(initial_ostree(OsProfile::Rhel, OsUpdateMode::Pivot).is_none());
    }

    #[test]
    fn node_roots_are_spread_where_the_filesystem_can() {
        use rustix::fs::{IFlags, ioctl_getflags, ioctl_setflags};
        let topdir = |p: &Path| {
            let d = std::fs::File::open(p).unwrap();
            ioctl_getflags(&d).is_ok_and(|f| f.contains(IFlags::TOPDIR))
        };
        let tmp = tempfile::tempdir().unwrap();
        // Whether this filesystem takes the flag at all (ext2/3/4 do; tmpfs does not).
        let probe = tmp.path().join("probe");
        std::fs::create_dir(&probe).unwrap();
        let d = std::fs::File::open(&probe).unwrap();
        let takes_it = ioctl_getflags(&d)
            .and_then(|f| ioctl_setflags(&d, f | IFlags::TOPDIR))
            .is_ok()
            && topdir(&probe);

        let nodes = tmp.path().join("nodes");
        NodeRoot::at(nodes.join("worker-0"))
            .ensure(OsProfile::Uos, OsUpdateMode::Pivot)
            .unwrap();
        assert_eq!(topdir(&nodes), takes_it);
        // The roots themselves are ordinary directories.
        assert!(!topdir(&nodes.join("worker-0")));
    }
}
