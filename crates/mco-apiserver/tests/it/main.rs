//! The integration tests of mco-apiserver: kube-rs, kubectl, RBAC and crash durability.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs` (`common` was `tests/common/mod.rs`).

mod api;
mod apply_yaml;
mod apps_defaults;
mod client_cert;
mod common;
mod crash;
mod event_storage;
mod events;
mod generators;
mod kubectl;
mod kubectl_crds;
mod limits;
mod managed_fields;
mod openapi_v2;
mod orphan;
mod paging;
mod rbac;
mod reviews;
mod scale;
mod secrets;
mod security;
mod token_request;
