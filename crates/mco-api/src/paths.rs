//! Well-known paths on a node's disk. They are the same on a real host and under a simulated node's
//! root; callers join them onto their root directory.

/// Present iff the host booted an ostree deployment: this alone decides whether mco manages the OS
/// (never the os-release ID, which is what left `ID="uos"` hosts un-adopted).
pub const OSTREE_BOOTED: &str = "/run/ostree-booted";
/// OS identity, for reporting only.
pub const OS_RELEASE: &str = "/etc/os-release";
/// Fallback OS identity.
pub const OS_RELEASE_FALLBACK: &str = "/usr/lib/os-release";
/// The full rendered MachineConfig last applied, written before any reboot.
pub const CURRENT_CONFIG: &str = "/etc/machine-config-daemon/currentconfig";
/// The image-mode image the node runs (empty or absent outside image mode), written with
/// [`CURRENT_CONFIG`], whose `osImageURL` stays the rendered config's own, as upstream's daemon
/// keeps them.
pub const CURRENT_IMAGE: &str = "/etc/machine-config-daemon/currentimage";
/// Backups of files that existed before mco first wrote them.
pub const ORIG_DIR: &str = "/etc/machine-config-daemon/orig";
/// Markers for files that did not exist before mco first wrote them.
pub const NOORIG_DIR: &str = "/etc/machine-config-daemon/noorig";
/// The config to apply on first boot.
pub const FIRSTBOOT_CONFIG: &str = "/etc/ignition-machine-config-encapsulated.json";
/// A new machine's initial node annotations, written by the machine config server's Ignition;
/// the daemon's first start takes it as the sign of a bootstrapping node and renames it `.bak`.
pub const INITIAL_NODE_ANNOTATIONS: &str = "/etc/machine-config-daemon/node-annotations.json";
/// The MachineConfig a machine was provisioned with, whole, as the machine config server served
/// it: what the daemon compares a target's storage sections with.
pub const PROVISIONED_CONFIG: &str = "/etc/mcs-machine-config-content.json";
/// Where the first-boot config goes once it has been applied.
pub const FIRSTBOOT_CONFIG_DONE: &str = "/etc/ignition-machine-config-encapsulated.json.bak";
/// Touch to force a full re-apply (with reboot) of the current config.
pub const FORCE_FILE: &str = "/run/machine-config-daemon-force";
/// The `core` user's SSH keys, as Ignition writes them.
pub const CORE_SSH_KEYS: &str = "/home/core/.ssh/authorized_keys.d/ignition";
/// systemd units written by mco.
pub const SYSTEMD_UNIT_DIR: &str = "/etc/systemd/system";
/// The container-runtime registries file; a change to it only reloads crio.
pub const REGISTRIES_CONF: &str = "/etc/containers/registries.conf";
