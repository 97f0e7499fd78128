//! mco-daemon: the node agent.
//!
//! Three layers, each using only the ones below it:
//!
//! - [`host`]: the primitives that read and change a node, real or simulated (state kept
//!   inside the node's root directory). [`host::fs::HostFs`] is a struct confining every file
//!   access to the node root (cap-std), with atomic writes carrying mode and owner;
//!   [`host::passwd`] resolves owners from the root's own databases, [`host::backup`] keeps
//!   upstream's `orig`/`noorig` records and [`host::users`] manages `core`'s SSH keys and
//!   password. The parts that differ between a host and a simulation are traits with a real
//!   and a simulated implementation: [`host::ostree::OsUpdater`] (rpm-ostree / sim),
//!   [`host::systemd::Systemd`] (systemctl / sim) and [`host::reboot::Rebooter`] (systemd-run /
//!   sim). [`host::osrelease::HostOs`] reads the identity for reporting; whether the OS is
//!   managed is decided by `/run/ostree-booted` alone (the fix for hosts like seed 000's
//!   `ID="uos"`). [`Host`] bundles them: `Host::real(root)` or `Host::sim(root)`.
//! - [`engine`]: one node, no Kubernetes. It plans an update, validates the disk, applies with
//!   a journal and rollback ([`engine::apply`]), watches for drift ([`engine::drift`]) and runs
//!   the first-boot update ([`engine::firstboot`]). All of it, like the host layer, is
//!   blocking; an async caller runs it on a blocking thread.
//! - [`agent`]: the kube-facing daemon. [`agent::sync::Daemon`] watches its Node, decides
//!   each sync's step, drives the engine and writes annotations and MachineConfigNode status
//!   ([`agent::mcn`]); [`agent::metrics`] exports its state.

pub mod agent;
#[cfg(feature = "cli")]
pub mod cli;
pub mod engine;
pub mod error;
pub mod host;

pub use error::{HostError, Result};
pub use host::{Host, HostKind};
// The old flat paths of the modules that code outside this crate's area still names.
pub use host::{fs, ostree};
