//! mco-daemon: the node agent.
//!
//! This crate currently holds the host layer: the primitives the update engine uses to read and
//! change a node, each behind a trait with a real implementation (rpm-ostree, systemctl,
//! systemd-run) and a simulated one that keeps its state inside the node's root directory.

pub mod backup;
pub mod cmd;
pub mod error;
pub mod fs;
pub mod host;
pub mod osrelease;
pub mod ostree;
pub mod passwd;
pub mod paths;
pub mod reboot;
pub mod systemd;
pub mod units;
pub mod users;

pub use error::{HostError, Result};
pub use host::{Host, HostKind};
