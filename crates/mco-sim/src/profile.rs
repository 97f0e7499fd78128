//! The operating systems a simulated node can run, and what each looks like on disk.
//!
//! Pure data: the os-release text, whether the host is ostree-booted, the deployment it boots
//! before mco adopts it and the versions the cluster's OS images carry.

use std::fmt;
use std::str::FromStr;

/// The default OS image of the embedded cluster (seed 000's 1.2.2 release).
pub const OS_IMAGE_1_2_2: &str = "registry.example.com/mco/machine-os-content:1.2.2";
/// The upgrade target of seed 000's story.
pub const OS_IMAGE_1_3_0: &str = "registry.example.com/mco/machine-os-content:1.3.0";

/// seed 000's `/etc/os-release`, byte for byte: `ID="uos"` is what upstream's ID check missed.
const UOS_OS_RELEASE: &str = r#"PRETTY_NAME="UOS Server 20"
NAME="UOS Server 20"
VERSION_ID="20"
VERSION="20"
ID="uos"
HOME_URL="https://www.chinauos.com/"
BUG_REPORT_URL="https://bbs.chinauos.com/"
VERSION_CODENAME=mercury
PLATFORM_ID="platform:uelc20"
OSTREE_VERSION='20.20230625.uccps.0'
"#;

const RHCOS_OS_RELEASE: &str = r#"NAME="Red Hat Enterprise Linux CoreOS"
ID="rhcos"
ID_LIKE="rhel fedora"
VERSION="413.92.202307260246-0"
VERSION_ID="4.13"
VARIANT="CoreOS"
VARIANT_ID=coreos
PLATFORM_ID="platform:el9"
PRETTY_NAME="Red Hat Enterprise Linux CoreOS 413.92.202307260246-0 (Plow)"
ANSI_COLOR="0;31"
HOME_URL="https://www.redhat.com/"
OPENSHIFT_VERSION="4.13"
RHEL_VERSION="9.2"
OSTREE_VERSION="413.92.202307260246-0"
"#;

const FCOS_OS_RELEASE: &str = r#"NAME="Fedora Linux"
VERSION="38.20230709.3.0 (CoreOS)"
ID=fedora
VERSION_ID=38
VERSION_CODENAME=""
PLATFORM_ID="platform:f38"
PRETTY_NAME="Fedora CoreOS 38.20230709.3.0"
ANSI_COLOR="0;38;2;60;110;180"
HOME_URL="https://getfedora.org/coreos/"
VARIANT="CoreOS"
VARIANT_ID=coreos
OSTREE_VERSION='38.20230709.3.0'
"#;

const RHEL_OS_RELEASE: &str = r#"NAME="Red Hat Enterprise Linux"
VERSION="8.8 (Ootpa)"
ID="rhel"
ID_LIKE="fedora"
VERSION_ID="8.8"
PLATFORM_ID="platform:el8"
PRETTY_NAME="Red Hat Enterprise Linux 8.8 (Ootpa)"
ANSI_COLOR="0;31"
HOME_URL="https://www.redhat.com/"
"#;

/// A simulated node's operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OsProfile {
    /// UOS Server 20 / USwift, seed 000's fleet: ostree-booted, `ID="uos"`.
    #[default]
    Uos,
    /// Red Hat Enterprise Linux CoreOS.
    Rhcos,
    /// Fedora CoreOS (`ID=fedora`, `VARIANT_ID=coreos`).
    Fcos,
    /// Plain RHEL: not ostree, so mco manages files and units but never the OS.
    Rhel,
}

/// The deployment a node boots before mco adopts its OS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialDeployment {
    /// Stateroot.
    pub osname: String,
    /// The plain ostree refspec, e.g. `uswift:uswift/x86_64`.
    pub refspec: String,
    /// Commit version.
    pub version: String,
    /// Commit time, unix seconds.
    pub timestamp: u64,
    /// Commit checksum.
    pub checksum: String,
}

impl OsProfile {
    /// Every profile, in `--os` order.
    pub const ALL: [OsProfile; 4] = [
        OsProfile::Uos,
        OsProfile::Rhcos,
        OsProfile::Fcos,
        OsProfile::Rhel,
    ];

    /// The `--os` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OsProfile::Uos => "uos",
            OsProfile::Rhcos => "rhcos",
            OsProfile::Fcos => "fcos",
            OsProfile::Rhel => "rhel",
        }
    }

    /// `/etc/os-release`.
    pub fn os_release(self) -> &'static str {
        match self {
            OsProfile::Uos => UOS_OS_RELEASE,
            OsProfile::Rhcos => RHCOS_OS_RELEASE,
            OsProfile::Fcos => FCOS_OS_RELEASE,
            OsProfile::Rhel => RHEL_OS_RELEASE,
        }
    }

    /// `PRETTY_NAME`, which kubelet reports as the Node's `osImage`.
    pub fn pretty_name(self) -> String {
        os_release_value(self.os_release(), "PRETTY_NAME").unwrap_or_default()
    }

    /// Whether `/run/ostree-booted` exists: the one thing that makes mco manage the OS.
    pub fn ostree_booted(self) -> bool {
        !matches!(self, OsProfile::Rhel)
    }

    /// The deployment booted before adoption; `None` for a non-ostree host.
    pub fn initial_deployment(self) -> Option<InitialDeployment> {
        let (osname, refspec, version, timestamp, checksum) = match self {
            // 2023-06-25T08:15:06Z and the commit from seed 000's `rpm-ostree status`.
            OsProfile::Uos => (
                "uswift",
                "uswift:uswift/x86_64",
                "20.20230625.uccps.0",
                1_687_680_906,
                "698a07617e25f715b19b047b27a03d18fd526da4a2cfd56f02f6661ba78be127",
            ),
            OsProfile::Rhcos => (
                "rhcos",
                "rhcos:rhcos/x86_64",
                "413.92.202307260246-0",
                1_690_338_360,
                "3c1f0e9fa7f1e2d36e47d8c4b5e3b71c2c3dcbca0a8e8f0f3e8cbbf0c2d1e4a7",
            ),
            OsProfile::Fcos => (
                "fedora-coreos",
                "fedora:fedora/x86_64/coreos/stable",
                "38.20230709.3.0",
                1_688_947_200,
                "b8f3a5e1d07c2f4a9c6e5d4b3a2918f7e6d5c4b3a29180f7e6d5c4b3a2918f7e",
            ),
            OsProfile::Rhel => return None,
        };
        Some(InitialDeployment {
            osname: osname.into(),
            refspec: refspec.into(),
            version: version.into(),
            timestamp,
            checksum: checksum.into(),
        })
    }

    /// The OS images the cluster can roll out, with the version each carries on this OS.
    pub fn images(self) -> Vec<(&'static str, &'static str)> {
        let (old, new) = match self {
            OsProfile::Uos => ("20.20230625.uccps.0", "20.20231221.uccps.0"),
            OsProfile::Rhcos => ("413.92.202307260246-0", "414.92.202310170514-0"),
            OsProfile::Fcos => ("38.20230709.3.0", "38.20231027.3.2"),
            OsProfile::Rhel => ("8.8", "8.9"),
        };
        vec![(OS_IMAGE_1_2_2, old), (OS_IMAGE_1_3_0, new)]
    }
}

impl fmt::Display for OsProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An `--os` value that names no profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown OS profile {0:?} (expected uos, rhcos, fcos or rhel)")]
pub struct UnknownProfile(pub String);

impl FromStr for OsProfile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OsProfile::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownProfile(s.to_string()))
    }
}

/// How a simulated node's OS follows `osImageURL`: the booted origin decides which rebase the
/// daemon performs, so the mode is realised by what the node boots before adoption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OsUpdateMode {
    /// Legacy `pivot://` custom origins (seed 000's fleet).
    #[default]
    Pivot,
    /// Ostree native containers (`ostree-unverified-registry:<image>`).
    Container,
}

impl OsUpdateMode {
    /// The `--os-update-mode` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OsUpdateMode::Pivot => "pivot",
            OsUpdateMode::Container => "container",
        }
    }
}

impl fmt::Display for OsUpdateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An `--os-update-mode` value that names no mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown OS update mode {0:?} (expected pivot or container)")]
pub struct UnknownMode(pub String);

impl FromStr for OsUpdateMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pivot" => Ok(OsUpdateMode::Pivot),
            "container" => Ok(OsUpdateMode::Container),
            _ => Err(UnknownMode(s.to_string())),
        }
    }
}

/// The unquoted value of `key` in os-release text.
pub fn os_release_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches(['"', '\'']).to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uos_is_seed_000_verbatim() {
        let t = OsProfile::Uos.os_release();
        assert!(t.contains("ID=\"uos\"\n"));
        assert!(t.contains("OSTREE_VERSION='20.20230625.uccps.0'\n"));
        assert_eq!(OsProfile::Uos.pretty_name(), "UOS Server 20");
        let d = OsProfile::Uos.initial_deployment().unwrap();
        assert_eq!(d.refspec, "uswift:uswift/x86_64");
        assert_eq!(d.version, "20.20230625.uccps.0");
    }

    #[test]
    fn only_rhel_is_not_ostree() {
        for p in OsProfile::ALL {
            assert_eq!(p.ostree_booted(), p != OsProfile::Rhel, "{p}");
            assert_eq!(p.initial_deployment().is_some(), p.ostree_booted(), "{p}");
        }
    }

    #[test]
    fn fcos_is_a_coreos_variant_of_fedora() {
        let t = OsProfile::Fcos.os_release();
        assert_eq!(os_release_value(t, "ID").as_deref(), Some("fedora"));
        assert_eq!(os_release_value(t, "VARIANT_ID").as_deref(), Some("coreos"));
    }

    #[test]
    fn parse_round_trips_and_rejects_unknown() {
        for p in OsProfile::ALL {
            assert_eq!(p.as_str().parse::<OsProfile>().unwrap(), p);
        }
        assert!("windows".parse::<OsProfile>().is_err());
        assert_eq!(
            "container".parse::<OsUpdateMode>().unwrap(),
            OsUpdateMode::Container
        );
        assert!("rsync".parse::<OsUpdateMode>().is_err());
    }
}
