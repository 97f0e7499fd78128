//! The operator's views of mco: `mco status` (rollout progress, phases, trouble, ETA) and
//! `mco doctor` (cause and exact fix for every node or pool in trouble, from the API and, with
//! `--root`, from a node's own disk).
//!
//! Report builders are pure functions of a [`snapshot::Snapshot`] (or of
//! [`local::LocalFacts`]); [`client`] is the thin layer that reads them from a cluster.

pub mod client;
pub mod doctor;
pub mod drain;
pub mod local;
pub mod phase;
pub mod rollout;
pub mod snapshot;
pub mod status;

pub use client::{Error, fetch};
pub use doctor::{Finding, Fix};
pub use snapshot::Snapshot;
pub use status::StatusReport;
