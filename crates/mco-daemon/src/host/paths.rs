//! Well-known paths on a node's disk, the same on a real host and under a simulated node's root.
//!
//! The paths other crates also name live in [`mco_api::paths`] and are re-exported here, so the
//! host layer names every path through this one module; only the host layer's own are defined
//! below.

pub use mco_api::paths::*;

/// The kernel's id of the current boot (a simulated node keeps its own at the same path).
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// The config a reboot was requested for and the boot it was requested in: while the boot id
/// is unchanged, that reboot has not happened yet, however complete the disk looks.
pub const PENDING_REBOOT: &str = "/etc/machine-config-daemon/pending-reboot.json";
/// Suffix of a backup under [`ORIG_DIR`].
pub const ORIG_SUFFIX: &str = ".mcdorig";
/// Suffix of a stamp under [`NOORIG_DIR`].
pub const NOORIG_SUFFIX: &str = ".mcdnoorig";
/// The `core` user's home `.ssh` directory.
pub const CORE_SSH_DIR: &str = "/home/core/.ssh";
/// The directory holding the `core` user's key fragments.
pub const CORE_SSH_KEYS_DIR: &str = "/home/core/.ssh/authorized_keys.d";
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
/// A place rpm-ostree looks for registry credentials when it pulls an OS image (beside
/// `/etc/ostree/auth.json`, which is the admin's); the daemon links the cluster's pull secret
/// here.
pub const OSTREE_AUTH_FILE: &str = "/run/ostree/auth.json";
/// The cluster pull secret, written by the MachineConfigs (mode 0600).
pub const KUBELET_AUTH_FILE: &str = "/var/lib/kubelet/config.json";
/// The global pull secret merged with the internal registry's, written by the operator.
pub const INTERNAL_REGISTRY_AUTH_FILE: &str = "/etc/mco/internal-registry-pull-secret.json";
