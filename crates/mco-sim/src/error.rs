//! Why a simulated node or the embedded cluster failed.

use std::path::PathBuf;

/// Errors of the simulated cluster.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A file under the data dir could not be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The node's host layer failed.
    #[error(transparent)]
    Host(#[from] mco_daemon::HostError),
    /// First boot failed.
    #[error("first boot: {0}")]
    Firstboot(#[from] mco_daemon::engine::firstboot::FirstbootError),
    /// The daemon's engine failed.
    #[error(transparent)]
    Engine(#[from] mco_daemon::engine::EngineError),
    /// The API refused a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The embedded API server failed.
    #[error("API server: {0}")]
    Server(#[from] mco_apiserver::Error),
    /// The controller failed.
    #[error("controller: {0}")]
    Controller(#[from] mco_controller::Error),
    /// The shipped install manifests could not be built.
    #[error("install manifests: {0}")]
    Manifests(#[from] mco_manifests::Error),
    /// A stored document does not parse.
    #[error("{what}: {source}")]
    Json {
        /// Which document.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A request that cannot be carried out as asked.
    #[error("{0}")]
    Invalid(String),
}

impl SimError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SimError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// Result of the simulated cluster.
pub type Result<T, E = SimError> = std::result::Result<T, E>;
