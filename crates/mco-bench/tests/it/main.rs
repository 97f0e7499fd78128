//! The integration tests of mco-bench: tiny runs of the benchmarks.
//!
//! One test binary for the crate's integration tests, as in the other crates; each module is
//! a former `tests/<name>.rs`.

mod smoke;
