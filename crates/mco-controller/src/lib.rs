//! The mco controller: renders each pool's MachineConfigs into one rendered config, moves nodes
//! to it no faster than `maxUnavailable` allows, drains them, keeps one MachineConfigNode per
//! node, and reports truthful pool status.
//!
//! The decisions live in pure modules ([`plan`]); the controllers only read the cluster, call
//! them and write the result.

pub mod plan;
