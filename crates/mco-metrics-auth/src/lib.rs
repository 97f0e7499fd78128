//! The metrics endpoints of the controller and the daemon, protected as kube components and
//! controller-runtime's `WithAuthenticationAndAuthorization` protect theirs: TLS, the caller's
//! bearer token checked with a TokenReview, then a SubjectAccessReview for `get` on the
//! non-resource path (`/metrics`). Answers, cache lifetimes and timeouts are theirs.
//!
//! - [`gate`]: the decision, pure but for the [`gate::Reviewer`] it asks, and its caches;
//! - [`review`]: that reviewer against the API server;
//! - [`tls`]: the serving certificate, from files (reloaded when they change) or generated at
//!   start;
//! - [`serve`]: plain HTTP ([`Mode::None`]) or all of the above ([`Mode::Delegated`]);
//! - `cli` (feature `cli`): the flags that choose among them, for clap command lines.

#[cfg(feature = "cli")]
pub mod cli;
pub mod gate;
pub mod review;
pub mod serve;
pub mod tls;

use std::path::PathBuf;

pub use serve::serve;

/// `--metrics-auth`: who may read the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Plain HTTP, open to anyone who reaches the port.
    #[default]
    None,
    /// TLS; the API server authenticates each caller's token and authorizes `get` on the path.
    Delegated,
}

impl std::str::FromStr for Mode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Mode, Error> {
        match s {
            "none" => Ok(Mode::None),
            "delegated" => Ok(Mode::Delegated),
            other => Err(Error::Mode(other.to_string())),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::None => "none",
            Mode::Delegated => "delegated",
        })
    }
}

/// How the metrics port is served: `--metrics-auth`, `--metrics-tls-cert-file` and
/// `--metrics-tls-key-file`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    /// The serving certificate (PEM, chain first) and its key; without them a self-signed
    /// certificate is generated at start.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl Settings {
    /// Certificate files only come in pairs, and only where TLS is served.
    pub fn validate(&self) -> Result<(), Error> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err(Error::Flags(
                "--metrics-tls-cert-file needs --metrics-tls-key-file",
            )),
            (None, Some(_)) => Err(Error::Flags(
                "--metrics-tls-key-file needs --metrics-tls-cert-file",
            )),
            (Some(_), Some(_)) if self.mode == Mode::None => Err(Error::Flags(
                "--metrics-tls-cert-file and --metrics-tls-key-file need --metrics-auth=delegated",
            )),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Worded for clap, which names the flag before it.
    #[error("{0:?} is neither \"none\" nor \"delegated\"")]
    Mode(String),
    #[error("{0}")]
    Flags(&'static str),
    #[error("{path}: {error}")]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    #[error("{key}: not the key of the certificate in {cert}")]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    #[error("metrics serving certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("metrics TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("metrics: {0}")]
    Io(#[from] std::io::Error),
    #[error("--metrics-auth=delegated needs a client of the API server")]
    NoClient,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [Mode::None, Mode::Delegated] {
            assert_eq!(m.to_string().parse::<Mode>().unwrap(), m);
        }
        let e = "tls".parse::<Mode>().unwrap_err().to_string();
        assert_eq!(e, "\"tls\" is neither \"none\" nor \"delegated\"");
    }

    #[test]
    fn certificate_files_come_in_pairs_and_only_with_delegation() {
        let s = |mode, cert: Option<&str>, key: Option<&str>| Settings {
            mode,
            cert_file: cert.map(Into::into),
            key_file: key.map(Into::into),
        };
        assert!(s(Mode::None, None, None).validate().is_ok());
        assert!(s(Mode::Delegated, None, None).validate().is_ok());
        assert!(s(Mode::Delegated, Some("c"), Some("k")).validate().is_ok());
        let e = |s: Settings| s.validate().unwrap_err().to_string();
        assert!(e(s(Mode::Delegated, Some("c"), None)).contains("needs --metrics-tls-key-file"));
        assert!(e(s(Mode::Delegated, None, Some("k"))).contains("needs --metrics-tls-cert-file"));
        assert!(e(s(Mode::None, Some("c"), Some("k"))).contains("need --metrics-auth=delegated"));
    }
}
