//! The integration tests of mco-cli: status and doctor, on snapshots, node roots and the API server.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs` (`common` was `tests/common/mod.rs`).

mod api;
mod common;
mod doctor_report;
mod local_root;
mod server_certs;
mod status_report;
