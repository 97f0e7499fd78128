//! The integration tests of mco-controller against the embedded API server: render, rollout and
//! the node side.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs` (`common` was `tests/common/mod.rs`).

mod common;
mod generators;
mod image_mode;
mod metrics_auth;
mod nodes;
mod pinned;
mod render;
mod rollout;
mod server_certs;
mod templates;
mod user_data;
