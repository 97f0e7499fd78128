//! The host layer's single error type, so one update engine can handle real and simulated hosts
//! alike.

use std::io;

/// Anything that can go wrong while touching the host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A filesystem operation under the root failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the host path.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A host path that cannot be confined to the root.
    #[error("invalid host path {path:?}: {reason}")]
    InvalidPath {
        /// The offending path.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// Upstream's wording, kept because users grep for it.
    #[error("failed to retrieve UserID for username: {0}")]
    UnknownUser(String),
    /// Upstream's wording, kept because users grep for it.
    #[error("failed to retrieve GroupID for group: {0}")]
    UnknownGroup(String),
    /// A host tool could not be started at all.
    #[error("failed to run {command}: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A host tool ran and failed; upstream's `error running <cmd>: <stderr>: <status>` shape.
    #[error("error running {command}: {stderr}: {status}")]
    Command {
        /// The command line.
        command: String,
        /// Trimmed standard error.
        stderr: String,
        /// e.g. `exit status 1`.
        status: String,
    },
    /// Structured output that did not parse.
    #[error("failed to parse {what}: {source}")]
    Json {
        /// What was being parsed.
        what: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// Host state the operation cannot work with (e.g. no booted deployment).
    #[error("{0}")]
    State(String),
    /// The pull secret could not be linked where rpm-ostree reads it; pulling without it
    /// would only fail later at the registry, with a less telling error.
    #[error("linking the pull secret at {path}: {source}")]
    PullSecret {
        /// The link, e.g. `/run/ostree/auth.json`.
        path: String,
        /// Why.
        #[source]
        source: Box<HostError>,
    },
}

impl HostError {
    /// Wraps an I/O error with the operation and path it belongs to.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        HostError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias for the host layer.
pub type Result<T, E = HostError> = std::result::Result<T, E>;
