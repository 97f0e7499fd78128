//! Well-known paths on a node's disk, the same on a real host and under a simulated node's root.
//!
//! Kept in one place so they can later move into the shared API crate without hunting through
//! the host layer. Names match the shared crate's where they overlap.

/// Present iff the host booted an ostree deployment: this alone decides whether mco manages the
/// OS (never the os-release ID, which is what left `ID="uos"` hosts un-adopted).
pub const OSTREE_BOOTED: &str = "/run/ostree-booted";
/// OS identity, for reporting only.
pub const OS_RELEASE: &str = "/etc/os-release";
/// Fallback OS identity.
pub const OS_RELEASE_FALLBACK: &str = "/usr/lib/os-release";
/// The kernel's id of the current boot (a simulated node keeps its own at the same path).
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// The config a reboot was requested for and the boot it was requested in: while the boot id
/// is unchanged, that reboot has not happened yet, however complete the disk looks.
pub const PENDING_REBOOT: &str = "/etc/machine-config-daemon/pending-reboot.json";
/// The full rendered MachineConfig last applied, written before any reboot.
pub const CURRENT_CONFIG: &str = "/etc/machine-config-daemon/currentconfig";
/// Backups of files that existed before mco first wrote them (`<path>.mcdorig`).
pub const ORIG_DIR: &str = "/etc/machine-config-daemon/orig";
/// Stamps for files that did not exist before mco first wrote them (`<path>.mcdnoorig`).
pub const NOORIG_DIR: &str = "/etc/machine-config-daemon/noorig";
/// Suffix of a backup under [`ORIG_DIR`].
pub const ORIG_SUFFIX: &str = ".mcdorig";
/// Suffix of a stamp under [`NOORIG_DIR`].
pub const NOORIG_SUFFIX: &str = ".mcdnoorig";
/// The config to apply on first boot.
pub const FIRSTBOOT_CONFIG: &str = "/etc/ignition-machine-config-encapsulated.json";
/// Touch to force a full re-apply (with reboot) of the current config.
pub const FORCE_FILE: &str = "/run/machine-config-daemon-force";
/// The `core` user's home `.ssh` directory.
pub const CORE_SSH_DIR: &str = "/home/core/.ssh";
/// The directory holding the `core` user's key fragments.
pub const CORE_SSH_KEYS_DIR: &str = "/home/core/.ssh/authorized_keys.d";
/// The `core` user's SSH keys, as Ignition writes them.
pub const CORE_SSH_KEYS: &str = "/home/core/.ssh/authorized_keys.d/ignition";
/// The only user whose keys and password mco manages.
pub const CORE_USER: &str = "core";
/// The `core` user's primary group.
pub const CORE_GROUP: &str = "core";
/// User database, read to resolve owners by name inside the root (never the daemon's own).
pub const PASSWD: &str = "/etc/passwd";
/// Group database, read to resolve owners by name inside the root.
pub const GROUP: &str = "/etc/group";
/// Password hashes.
pub const SHADOW: &str = "/etc/shadow";
/// systemd units written by mco.
pub const SYSTEMD_UNIT_DIR: &str = "/etc/systemd/system";
/// Units shipped with the OS; the source of a unit's `.mcdorig` backup.
pub const SYSTEMD_VENDOR_UNIT_DIR: &str = "/usr/lib/systemd/system";
/// Admin preset files, consulted before the vendor ones.
pub const SYSTEMD_PRESET_DIR: &str = "/etc/systemd/system-preset";
/// Vendor preset files.
pub const SYSTEMD_VENDOR_PRESET_DIR: &str = "/usr/lib/systemd/system-preset";
/// Target of a masked unit's symlink.
pub const DEV_NULL: &str = "/dev/null";
/// The simulated ostree's deployments, in `rpm-ostree status --json` shape.
pub const SIM_OSTREE_STATE: &str = "/var/lib/mco-sim/ostree.json";
/// Every simulated systemd action, one line each, so tests can assert them.
pub const SIM_SYSTEMD_LOG: &str = "/var/log/mco-sim/systemd.log";
/// Written by the simulated rebooter; the node's supervisor restarts the node when it appears.
pub const SIM_REBOOT_REQUEST: &str = "/run/mco-sim/reboot-requested";
