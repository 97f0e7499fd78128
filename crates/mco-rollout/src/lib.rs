//! The rules of an mco rollout, as pure functions over Kubernetes objects: which pool each node
//! belongs to and which nodes may move to the pool's target now ([`plan`]), what a drain evicts
//! and what it writes to a MachineConfigNode ([`drain`]), which rendered configs nothing needs
//! any more ([`gc`]), when a replica may take the leader lease ([`leader`]), and which
//! PinnedImageSets a pool lists and what its status says of them ([`pinned`]).
//!
//! Pure: no API client, no async runtime, no I/O. The controller (`mco-controller`) reads the
//! cluster, calls these and writes the result; `mco status` and `mco doctor` (`mco-cli`) call
//! the same rules over a snapshot. Every rule that bounds disruption is therefore tested here
//! without an API server.

pub mod condition;
pub mod drain;
pub mod gc;
pub mod leader;
pub mod pinned;
pub mod plan;
pub mod policy;
