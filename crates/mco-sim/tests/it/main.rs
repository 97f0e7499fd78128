//! The integration tests of mco-sim: the embedded cluster end to end.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs`.

mod cluster;
mod mcs_certs;
