//! Container image references by distribution's grammar (what `podman pull` and rpm-ostree
//! parse): `[host[:port]/]path[:tag][@algorithm:hex]`.
//!
//! The grammar alone: whether a reference is in a canonical form (a registry host present,
//! `docker.io`'s `library/` namespace) is its callers' rule.

/// A repository's longest path (distribution's `RepositoryNameTotalLengthMax`).
pub const MAX_REPOSITORY_PATH: usize = 255;

/// The parts of a reference, each as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference<'a> {
    /// `[host[:port]/]path`: the reference without its tag and digest.
    pub repository: &'a str,
    /// `host[:port]`, when the name's first component is one and the rest a path (the
    /// grammar takes a host whenever it can, so `os/x` has the host `os`).
    pub host: Option<&'a str>,
    /// The repository after its host.
    pub path: &'a str,
    /// The tag, without its `:`.
    pub tag: Option<&'a str>,
    /// `algorithm:hex`, without its `@`.
    pub digest: Option<&'a str>,
}

/// Why a string is no image reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("its digest is not <algorithm>:<hex, at least 32 digits>")]
    Digest,
    #[error("its tag is not 1 to 128 letters, digits, '_', '.' or '-' (not first)")]
    Tag,
    #[error("its name is not [host[:port]/]path, with lower case path components")]
    Name,
    #[error("its repository path is longer than 255 characters")]
    PathTooLong,
}

/// `s` as an image reference: the path's components lower case alphanumerics joined by `.`,
/// `_`, `__` or dashes, at most [`MAX_REPOSITORY_PATH`] bytes; an optional tag; an optional
/// digest. Checked in that order from the end: digest, tag, name, length.
pub fn parse(s: &str) -> Result<Reference<'_>, Error> {
    let (rest, digest) = match s.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (s, None),
    };
    if digest.is_some_and(|d| !is_digest(d)) {
        return Err(Error::Digest);
    }
    // A tag's colon is after the last slash; a port's is before it.
    let (repository, tag) = match rest.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, Some(t)),
        _ => (rest, None),
    };
    if tag.is_some_and(|t| !is_tag(t)) {
        return Err(Error::Tag);
    }
    let (first, after) = match repository.split_once('/') {
        Some((first, after)) => (first, Some(after)),
        None => (repository, None),
    };
    let all_path = |p: &str| p.split('/').all(is_path_component);
    let (host, path) = match after {
        Some(after) if is_host(first) && all_path(after) => (Some(first), after),
        _ if all_path(repository) => (None, repository),
        _ => return Err(Error::Name),
    };
    if path.len() > MAX_REPOSITORY_PATH {
        return Err(Error::PathTooLong);
    }
    Ok(Reference {
        repository,
        host,
        path,
        tag,
        digest,
    })
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or a run of `-`.
fn is_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = matches!(sep, "." | "_" | "__") || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// A domain name (components of letters, digits and inner `-`, joined by `.`) or a bracketed
/// IPv6 address, with an optional `:port`.
fn is_host(h: &str) -> bool {
    let (host, port) = match h.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (h, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|x| x.is_ascii_digit())) {
        return false;
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return !inner.is_empty() && inner.bytes().all(|x| x.is_ascii_hexdigit() || x == b':');
    }
    host.split('.').all(|c| {
        let b = c.as_bytes();
        !b.is_empty()
            && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

/// `[\w][\w.-]{0,127}`.
fn is_tag(t: &str) -> bool {
    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|x| word(*x) || *x == b'.' || *x == b'-')
}

/// `<algorithm>:<hex>`: the algorithm's parts `[A-Za-z][A-Za-z0-9]*` joined by one of `-_+.`,
/// at least 32 hex digits.
fn is_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else {
        return false;
    };
    let part = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    };
    alg.split(['-', '_', '+', '.']).all(part)
        && hex.len() >= 32
        && hex.bytes().all(|x| x.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn image_references_are_parsed_by_distributions_grammar() {
        let hex = "0123456789abcdef".repeat(4);
        for ok in [
            format!("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:{hex}"),
            "registry.example.com:5000/mco/machine-os-content:1.3.0".into(),
            format!("registry.example.com/os:4.17@sha256:{hex}"),
            "localhost:5000/os".into(),
            "[::1]:5000/os:latest".into(),
            "Registry.Example.com/os".into(),
            "os".into(),
            "os:tag".into(),
            "a__b/c--d/e.f_g".into(),
            format!("r.example/{}", "a".repeat(MAX_REPOSITORY_PATH)),
            format!("os:{}", "t".repeat(128)),
            format!("os@sha256:{}", &hex[..32]),
            format!("os@sha256+b64u.v1:{hex}"),
        ] {
            assert!(parse(&ok).is_ok(), "{ok}");
        }
        for bad in [
            "".to_string(),
            "quay.io/OS".into(),
            "quay.io/os:".into(),
            "quay.io/os:-tag".into(),
            format!("os:{}", "t".repeat(129)),
            "quay.io/os@sha256:abc".into(),
            format!("os@sha256:{}", &hex[..31]),
            format!("quay.io/os@{hex}"),
            format!("quay.io/os@1sha:{hex}"),
            "quay.io//os".into(),
            "quay.io/os/".into(),
            "/os".into(),
            ":tag".into(),
            "a:b/c".into(),
            "host:port/os".into(),
            "-host.example/os".into(),
            "host.example/-os".into(),
            "host.example/a___b".into(),
            "docker://quay.io/os".into(),
            "[zz]:5000/os".into(),
            format!("r.example/{}", "a".repeat(MAX_REPOSITORY_PATH + 1)),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_refusal_says_which_part_is_wrong() {
        let hex = "0".repeat(32);
        assert_eq!(parse(&format!("quay.io/OS@sha256:{hex}")), Err(Error::Name));
        assert_eq!(parse("quay.io/OS@sha256:abc"), Err(Error::Digest));
        assert_eq!(parse("quay.io/OS:-tag"), Err(Error::Tag));
        assert_eq!(parse("quay.io/os:"), Err(Error::Tag));
        assert_eq!(parse("quay.io/OS:1"), Err(Error::Name));
        // The longest path is the path after the host.
        let path = "a".repeat(MAX_REPOSITORY_PATH);
        assert!(parse(&format!("r.example/{path}")).is_ok());
        assert_eq!(parse(&format!("{path}a")), Err(Error::PathTooLong));
        assert_eq!(
            Error::Digest.to_string(),
            "its digest is not <algorithm>:<hex, at least 32 digits>"
        );
        assert_eq!(
            Error::Tag.to_string(),
            "its tag is not 1 to 128 letters, digits, '_', '.' or '-' (not first)"
        );
        assert_eq!(
            Error::Name.to_string(),
            "its name is not [host[:port]/]path, with lower case path components"
        );
        assert_eq!(
            Error::PathTooLong.to_string(),
            "its repository path is longer than 255 characters"
        );
    }

    #[test]
    fn a_reference_is_split_as_written() {
        let hex = "0123456789abcdef".repeat(4);
        let digest = format!("sha256:{hex}");
        let s = format!("registry.example.com:5000/ocp/release:4.18.0@{digest}");
        assert_eq!(
            parse(&s),
            Ok(Reference {
                repository: "registry.example.com:5000/ocp/release",
                host: Some("registry.example.com:5000"),
                path: "ocp/release",
                tag: Some("4.18.0"),
                digest: Some(&digest),
            })
        );
        assert_eq!(
            parse("[::1]:5000/os"),
            Ok(Reference {
                repository: "[::1]:5000/os",
                host: Some("[::1]:5000"),
                path: "os",
                tag: None,
                digest: None,
            })
        );
        assert_eq!(
            parse("os:tag"),
            Ok(Reference {
                repository: "os",
                host: None,
                path: "os",
                tag: Some("tag"),
                digest: None,
            })
        );
        // A first component that is a host is taken as one, as distribution's grammar does.
        assert_eq!(
            parse("os/x").map(|r| (r.host, r.path)),
            Ok((Some("os"), "x"))
        );
        assert_eq!(
            parse("Registry.Example.com/os").map(|r| r.host),
            Ok(Some("Registry.Example.com"))
        );
        // Not a host (`_`), so all of it is the path.
        assert_eq!(
            parse("a_b/c").map(|r| (r.host, r.path)),
            Ok((None, "a_b/c"))
        );
    }
}
