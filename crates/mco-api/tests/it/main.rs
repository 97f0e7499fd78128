//! The integration tests of mco-api: the generated CRDs.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs`.

mod crds;
