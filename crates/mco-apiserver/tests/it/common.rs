//! Shared helpers of the integration tests: the kit's server in a temp dir and polling, and
//! this crate's test data.
#![allow(dead_code)]

pub use mco_testkit::eventually;
pub use mco_testkit::server::{TestServer, start, start_with, status};

pub const MCN_CRD: &str = include_str!("../data/mcn-crd.yaml");
pub const MCN_WORKER_0: &str = include_str!("../data/mcn-worker-0.yaml");
