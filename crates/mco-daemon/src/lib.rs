//! mco-daemon: the node agent.
//!
//! This crate currently holds the host layer: the primitives the update engine uses to read and
//! change a node, each behind a trait with a real implementation (rpm-ostree, systemctl,
//! systemd-run) and a simulated one that keeps its state inside the node's root directory.
//!
//! - [`fs::HostFs`]: every file access confined to the node root (cap-std); atomic writes with
//!   mode and owner; [`passwd`] resolves owners from the root's own databases; [`backup`] keeps
//!   upstream's `orig`/`noorig` records; [`users`] manages `core`'s SSH keys and password.
//! - [`osrelease::HostOs`]: identity from os-release for reporting; management decided by
//!   `/run/ostree-booted` alone (the fix for hosts like seed 000's `ID="uos"`).
//! - [`ostree::OsUpdater`]: [`ostree::RpmOstree`] / [`ostree::SimOstree`].
//! - [`systemd::Systemd`]: [`systemd::Systemctl`] / [`systemd::SimSystemd`]; [`units`] writes
//!   unit files and dropins the way upstream does.
//! - [`reboot::Rebooter`]: [`reboot::SystemdRunRebooter`] / [`reboot::SimRebooter`].
//! - [`Host`] bundles them: `Host::real(root)` or `Host::sim(root)`.
//!
//! All of it is blocking; an async caller runs it on a blocking thread.

pub mod apply;
pub mod backup;
#[cfg(feature = "cli")]
pub mod cli;
pub mod cmd;
pub mod drift;
pub mod engine;
pub mod error;
pub mod firstboot;
pub mod fs;
pub mod host;
pub mod mcn;
pub mod metrics;
pub mod osrelease;
pub mod ostree;
pub mod passwd;
pub mod paths;
pub mod reboot;
pub mod sync;
pub mod systemd;
pub mod units;
pub mod users;
pub mod validate;

pub use error::{HostError, Result};
pub use host::{Host, HostKind};
