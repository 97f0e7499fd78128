//! The kube-facing agent: the sync loop that drives the engine from the node's annotations,
//! the MachineConfigNode status it writes, and the daemon's metrics.

pub mod correlate;
pub mod events;
pub mod kubelet_health;
pub mod mcn;
pub mod metrics;
pub mod sync;
