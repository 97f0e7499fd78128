//! Which Ignition spec a client gets, from its `Accept` header, as upstream's server decides.
//!
//! Ignition sends `application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1` (2.x and
//! later) or, in the 0.x series that read spec 2, `...;version=2.2.0`. The entries are read
//! in order of their `q` (stable for equal `q`); the first Ignition entry with a version
//! decides:
//! - `3.1.0` up to below `4.0.0`: that spec, capped at the internal 3.5 (a newer Ignition
//!   reads every older 3.x config);
//! - `2.2.0` up to below `3.0.0`: spec 2.2;
//! - any other version (`3.0.0`, `1`, `4.0.0`, ...): an error — upstream answers 400.
//!
//! No header, no Ignition entry, or Ignition entries without a version get spec 2.2, as
//! upstream serves to `curl` and other non-Ignition clients. Entries that are not media types
//! are skipped, as upstream skips them.

use std::fmt;

/// Longest `Accept` header read; longer is refused (the HTTP layer already bounds all headers).
pub const MAX_ACCEPT_BYTES: usize = 4096;

const IGNITION_SUBTYPE: &str = "vnd.coreos.ignition+json";

/// A spec version the server can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecVersion {
    /// Spec 2.2.0, translated down from the internal 3.5.
    V2_2,
    /// Spec 3.`minor`.0, 1 ≤ minor ≤ 5.
    V3(u8),
}

impl SpecVersion {
    /// The newest spec served: the internal one.
    pub const NEWEST: SpecVersion = SpecVersion::V3(5);

    /// The version string written into `ignition.version`.
    pub fn as_str(self) -> &'static str {
        match self {
            SpecVersion::V2_2 => "2.2.0",
            SpecVersion::V3(1) => "3.1.0",
            SpecVersion::V3(2) => "3.2.0",
            SpecVersion::V3(3) => "3.3.0",
            SpecVersion::V3(4) => "3.4.0",
            SpecVersion::V3(_) => "3.5.0",
        }
    }
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why no spec version could be chosen; answered with 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    /// Upstream's wording.
    #[error(
        "unsupported Ignition version in Accept header: {0} (supported: 2.2.0 and 3.1.0 up to 3.5.0)"
    )]
    Unsupported(String),
    #[error("Accept header is longer than {MAX_ACCEPT_BYTES} bytes")]
    TooLong,
    #[error("Accept header is not valid text")]
    NotText,
}

/// A `major.minor.patch` version, with any pre-release or build suffix ignored for ordering
/// as upstream's semver compare does for these ranges.
fn semver(s: &str) -> Option<(u64, u64, u64)> {
    let core = s.split(['-', '+']).next()?;
    let mut it = core.split('.');
    let v = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    it.next().is_none().then_some(v)
}

struct Entry<'a> {
    subtype: &'a str,
    version: Option<(u64, u64, u64)>,
    q: f32,
}

fn entries(header: &str) -> Vec<Entry<'_>> {
    let mut out = Vec::new();
    for value in header.split(',') {
        let mut parts = value.split(';').map(str::trim);
        let Some((_, subtype)) = parts.next().and_then(|t| t.split_once('/')) else {
            continue;
        };
        let (mut version, mut q) = (None, None);
        for ext in parts {
            let Some((k, v)) = ext.split_once('=') else {
                continue;
            };
            match k.trim() {
                "version" if version.is_none() => version = semver(v.trim()),
                "q" if q.is_none() => q = v.trim().parse::<f32>().ok(),
                _ => {}
            }
        }
        out.push(Entry {
            subtype,
            version,
            q: q.unwrap_or(1.0),
        });
    }
    // Stable: equal q keeps the client's order.
    out.sort_by(|a, b| b.q.total_cmp(&a.q));
    out
}

/// The spec version to serve for this `Accept` header (`None`: no header).
pub fn negotiate(header: Option<&[u8]>) -> Result<SpecVersion, AcceptError> {
    let Some(raw) = header else {
        return Ok(SpecVersion::V2_2);
    };
    if raw.len() > MAX_ACCEPT_BYTES {
        return Err(AcceptError::TooLong);
    }
    let text = std::str::from_utf8(raw).map_err(|_| AcceptError::NotText)?;
    let mut unsupported = false;
    for e in entries(text) {
        if e.subtype != IGNITION_SUBTYPE {
            continue;
        }
        let Some(v) = e.version else { continue };
        match v {
            (3, minor, _) if minor >= 1 => {
                return Ok(SpecVersion::V3(minor.min(5) as u8));
            }
            (2, minor, _) if minor >= 2 => return Ok(SpecVersion::V2_2),
            _ => unsupported = true,
        }
    }
    if unsupported {
        return Err(AcceptError::Unsupported(text.to_string()));
    }
    Ok(SpecVersion::V2_2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(h: &str) -> Result<SpecVersion, AcceptError> {
        negotiate(Some(h.as_bytes()))
    }

    #[test]
    fn no_header_and_non_ignition_clients_get_2_2() {
        assert_eq!(negotiate(None), Ok(SpecVersion::V2_2));
        assert_eq!(n("*/*"), Ok(SpecVersion::V2_2));
        assert_eq!(n(""), Ok(SpecVersion::V2_2));
        assert_eq!(n("garbage"), Ok(SpecVersion::V2_2));
        assert_eq!(
            n("application/vnd.coreos.ignition+json"),
            Ok(SpecVersion::V2_2)
        );
    }

    #[test]
    fn ignition_2x_and_later_get_the_3x_they_ask_for() {
        for (h, want) in [
            (
                "application/vnd.coreos.ignition+json;version=3.1.0, */*;q=0.1",
                SpecVersion::V3(1),
            ),
            (
                "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1",
                SpecVersion::V3(4),
            ),
            (
                "application/vnd.coreos.ignition+json; version=3.5.0",
                SpecVersion::V3(5),
            ),
            // A newer Ignition reads 3.5.
            (
                "application/vnd.coreos.ignition+json;version=3.6.0-experimental",
                SpecVersion::V3(5),
            ),
        ] {
            assert_eq!(n(h), Ok(want), "{h}");
        }
    }

    #[test]
    fn ignition_0x_gets_2_2() {
        let h = "application/vnd.coreos.ignition+json; version=2.4.0, application/vnd.coreos.ignition+json; version=1; q=0.5, */*; q=0.1";
        assert_eq!(n(h), Ok(SpecVersion::V2_2));
        assert_eq!(
            n("application/vnd.coreos.ignition+json;version=2.2.0"),
            Ok(SpecVersion::V2_2)
        );
    }

    #[test]
    fn the_highest_q_decides() {
        let h = "application/vnd.coreos.ignition+json;version=2.2.0;q=0.5, application/vnd.coreos.ignition+json;version=3.2.0";
        assert_eq!(n(h), Ok(SpecVersion::V3(2)));
    }

    #[test]
    fn unsupported_versions_are_refused_naming_the_header() {
        for h in [
            "application/vnd.coreos.ignition+json;version=3.0.0",
            "application/vnd.coreos.ignition+json;version=4.0.0",
            "application/vnd.coreos.ignition+json;version=2.1.0",
        ] {
            let e = n(h).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("unsupported Ignition version in Accept header: "),
                "{e}"
            );
            assert!(e.to_string().contains(h));
        }
    }

    #[test]
    fn the_header_length_is_bounded() {
        let at = format!(
            "application/vnd.coreos.ignition+json;version=3.2.0,{}",
            "x".repeat(MAX_ACCEPT_BYTES - 51)
        );
        assert_eq!(at.len(), MAX_ACCEPT_BYTES);
        assert_eq!(n(&at), Ok(SpecVersion::V3(2)));
        let over = format!("{at}x");
        assert_eq!(n(&over), Err(AcceptError::TooLong));
        assert_eq!(negotiate(Some(b"\xff")), Err(AcceptError::NotText));
    }
}
