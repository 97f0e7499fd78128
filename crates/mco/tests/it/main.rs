//! The end-to-end suite: a real `mco up` driven through the real `kubectl` and `mco` CLIs.
//!
//! One test binary for the whole suite (one link instead of one per file), so the
//! `MCO_E2E_CLUSTERS` limit in `e2e` covers every test; each module is a former
//! `tests/<name>.rs` (`e2e` was `tests/e2e/mod.rs`).

mod differential;
mod e2e;
mod e2e_adoption;
mod e2e_ccsync;
mod e2e_certs;
mod e2e_clusteroperator;
mod e2e_dashboard;
mod e2e_disruption;
mod e2e_generated;
mod e2e_image_mode;
mod e2e_join;
mod e2e_pinned;
mod e2e_real;
mod e2e_registries;
mod e2e_resilience;
mod e2e_rollout_policy;
mod e2e_rollouts;
mod e2e_security;
mod e2e_seeds;
mod e2e_server;
mod e2e_upstream_crds;
mod e2e_workloads;
