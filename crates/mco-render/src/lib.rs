//! Pure rendering logic: Ignition parsing and validation, merging a pool's MachineConfigs into one
//! rendered config, diffing two rendered configs, reconcilability (and what a node is left
//! without when storage changes are let through), and post-config actions.
//! No I/O: every function takes values and returns values.

pub mod actions;
pub mod diff;
pub mod extensions;
pub mod ignition;
pub mod irreconcilable;
pub mod merge;
pub mod policy;
pub mod reconcile;
pub mod render;
