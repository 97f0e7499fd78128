//! The integration tests of mco-manifests: the Containerfile and the install manifests.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs`.

mod containerfile;
mod install;
