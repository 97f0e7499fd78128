//! Simulated nodes for mco's embedded cluster (`mco up`).
//!
//! A simulated node is a Node object plus a root directory, `DIR/nodes/<name>/`, that is the
//! node's `/`: os-release for its [`profile::OsProfile`], `/run/ostree-booted` on ostree
//! profiles, user databases, the simulated ostree and the boot id ([`root`]). Its
//! [`supervisor`] provisions it through a real first boot, runs the daemon against
//! `Host::sim(root)` and plays its reboots. [`workload`] keeps pods on the nodes so drains are
//! real, and [`cluster::Cluster`] ties it all to the embedded API server and the controller.
//!
//! The fleet is a directory of specs ([`spec`]) that `mco sim add-node`/`remove-node` edit and
//! a running cluster follows.

pub mod cluster;
pub mod daemon;
pub mod error;
pub mod external;
pub mod fetch;
pub mod ignition;
pub mod image;
pub mod join;
pub mod kubelet;
pub mod mcs_certs;
pub mod objects;
pub mod profile;
pub mod root;
pub mod spec;
pub mod supervisor;
pub mod web_rollout;
pub mod workload;

pub use cluster::{Cluster, ClusterOptions};
pub use error::{Result, SimError};
pub use profile::{OsProfile, OsUpdateMode};
pub use spec::{NodeSpec, SpecDir};
pub use supervisor::{DaemonContext, DaemonFn, DaemonMode};
