//! The integration tests of mco-daemon: the engine on simulated nodes, the host tools against
//! fakes and fixtures, and the daemon against the embedded API server.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs`. The crash tests stay apart in
//! `tests/engine_crash.rs`: they need the `failpoints` feature, whose failpoints are
//! process-wide. `tests/support/` stays where both binaries (and `src/host/cmd.rs`) include it.

mod crictl;
mod engine_apply;
mod firstboot_seed000;
mod host;
mod osrelease;
mod podman;
mod rpm_ostree;
mod sim_ostree;
#[path = "../support/mod.rs"]
mod support;
mod sync_apiserver;
mod systemd;
mod validate_disk;
mod validate_drift_monitor;
