//! Benchmarks of the embedded API server and of a whole `mco up` rollout, run as
//! `cargo run --release -p mco-bench -- <bench>`.
//!
//! Speed and memory targets live here rather than in timed tests: a benchmark reports
//! figures (and ratios measured in the same run) and says whether the goal is met, but
//! never fails a build because the machine was busy.

pub mod dashboard;
pub mod fanout;
pub mod floor;
pub mod mcs;
pub mod memory;
pub mod phases;
pub mod procfs;
pub mod rollout;
pub mod servers;
pub mod stats;
mod support;
pub mod writes;

/// Why a benchmark could not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kube client: {0}")]
    Kube(#[from] kube::Error),
    #[error("API server: {0}")]
    Server(#[from] mco_apiserver::Error),
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout { what: String, secs: u64 },
    #[error("{0}")]
    Bench(String),
}

impl Error {
    pub(crate) fn io(what: impl std::fmt::Display, source: std::io::Error) -> Error {
        Error::Io {
            what: what.to_string(),
            source,
        }
    }
}
