//! Ostree container image references (`ostree-unverified-registry:quay.io/...`), following the
//! grammar of ostree-rs-ext: `<sigverify>:<transport>:<image>` plus the registry shorthands.

use std::fmt;
use std::str::FromStr;

use crate::error::HostError;

/// How the image's signature is verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureSource {
    /// `ostree-remote-image:<remote>:` / `ostree-remote-registry:<remote>:`.
    OstreeRemote(String),
    /// `ostree-image-signed:` (containers-policy.json).
    ContainerPolicy,
    /// `ostree-unverified-image:` / `ostree-unverified-registry:`.
    Unverified,
}

/// Where the image is fetched from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A registry (`registry:` or `docker://`).
    Registry,
    /// `oci:` layout directory.
    Oci,
    /// `oci-archive:`.
    OciArchive,
    /// `containers-storage:` (pre-pulled by podman).
    ContainersStorage,
    /// `dir:`.
    Dir,
}

impl Transport {
    fn prefix(self) -> &'static str {
        match self {
            Transport::Registry => "registry:",
            Transport::Oci => "oci:",
            Transport::OciArchive => "oci-archive:",
            Transport::ContainersStorage => "containers-storage:",
            Transport::Dir => "dir:",
        }
    }

    fn split(s: &str) -> Option<(Transport, &str)> {
        if let Some(rest) = s.strip_prefix("docker://") {
            return Some((Transport::Registry, rest));
        }
        [
            Transport::Registry,
            Transport::OciArchive,
            Transport::Oci,
            Transport::ContainersStorage,
            Transport::Dir,
        ]
        .into_iter()
        .find_map(|t| s.strip_prefix(t.prefix()).map(|rest| (t, rest)))
    }
}

/// A parsed ostree image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference {
    /// Signature verification.
    pub sigverify: SignatureSource,
    /// Transport.
    pub transport: Transport,
    /// The image itself (a pullspec for registries), which is what mco calls the OS image URL.
    pub image: String,
}

impl ImageReference {
    /// The reference mco rebases to in container mode.
    pub fn unverified_registry(image: &str) -> ImageReference {
        ImageReference {
            sigverify: SignatureSource::Unverified,
            transport: Transport::Registry,
            image: image.to_string(),
        }
    }
}

fn invalid(s: &str, why: &str) -> HostError {
    HostError::State(format!("invalid ostree image reference {s:?}: {why}"))
}

impl FromStr for ImageReference {
    type Err = HostError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (sigverify, rest) = if let Some(img) = s.strip_prefix("ostree-unverified-registry:") {
            return non_empty(s, img).map(|_| ImageReference::unverified_registry(img));
        } else if let Some(rest) = s.strip_prefix("ostree-remote-registry:") {
            let (remote, img) = rest
                .split_once(':')
                .ok_or_else(|| invalid(s, "missing remote"))?;
            non_empty(s, img)?;
            return Ok(ImageReference {
                sigverify: SignatureSource::OstreeRemote(remote.to_string()),
                transport: Transport::Registry,
                image: img.to_string(),
            });
        } else if let Some(rest) = s.strip_prefix("ostree-unverified-image:") {
            (SignatureSource::Unverified, rest)
        } else if let Some(rest) = s.strip_prefix("ostree-image-signed:") {
            (SignatureSource::ContainerPolicy, rest)
        } else if let Some(rest) = s.strip_prefix("ostree-remote-image:") {
            let (remote, rest) = rest
                .split_once(':')
                .ok_or_else(|| invalid(s, "missing remote"))?;
            (SignatureSource::OstreeRemote(remote.to_string()), rest)
        } else {
            return Err(invalid(s, "unknown signature verification prefix"));
        };
        let (transport, image) =
            Transport::split(rest).ok_or_else(|| invalid(s, "unknown transport"))?;
        non_empty(s, image)?;
        Ok(ImageReference {
            sigverify,
            transport,
            image: image.to_string(),
        })
    }
}

fn non_empty<'a>(s: &str, image: &'a str) -> Result<&'a str, HostError> {
    if image.is_empty() {
        Err(invalid(s, "empty image"))
    } else {
        Ok(image)
    }
}

impl fmt::Display for ImageReference {
    /// Canonical form, using the registry shorthands.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.sigverify, self.transport) {
            (SignatureSource::Unverified, Transport::Registry) => {
                write!(f, "ostree-unverified-registry:{}", self.image)
            }
            (SignatureSource::OstreeRemote(r), Transport::Registry) => {
                write!(f, "ostree-remote-registry:{r}:{}", self.image)
            }
            (SignatureSource::Unverified, t) => {
                write!(f, "ostree-unverified-image:{}{}", t.prefix(), self.image)
            }
            (SignatureSource::ContainerPolicy, t) => {
                write!(f, "ostree-image-signed:{}{}", t.prefix(), self.image)
            }
            (SignatureSource::OstreeRemote(r), t) => {
                write!(f, "ostree-remote-image:{r}:{}{}", t.prefix(), self.image)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        let cases = [
            (
                "ostree-unverified-registry:quay.io/a/b@sha256:12",
                SignatureSource::Unverified,
                Transport::Registry,
                "quay.io/a/b@sha256:12",
            ),
            (
                "ostree-unverified-image:docker://quay.io/a/b:1",
                SignatureSource::Unverified,
                Transport::Registry,
                "quay.io/a/b:1",
            ),
            (
                "ostree-unverified-image:containers-storage:sha256:ab",
                SignatureSource::Unverified,
                Transport::ContainersStorage,
                "sha256:ab",
            ),
            (
                "ostree-image-signed:oci-archive:/x.ociarchive",
                SignatureSource::ContainerPolicy,
                Transport::OciArchive,
                "/x.ociarchive",
            ),
            (
                "ostree-remote-image:fedora:registry:quay.io/fedora/fcos:stable",
                SignatureSource::OstreeRemote("fedora".into()),
                Transport::Registry,
                "quay.io/fedora/fcos:stable",
            ),
            (
                "ostree-remote-registry:fedora:quay.io/fedora/fcos:stable",
                SignatureSource::OstreeRemote("fedora".into()),
                Transport::Registry,
                "quay.io/fedora/fcos:stable",
            ),
            (
                "ostree-unverified-image:oci:/srv/layout",
                SignatureSource::Unverified,
                Transport::Oci,
                "/srv/layout",
            ),
            (
                "ostree-unverified-image:dir:/srv/d",
                SignatureSource::Unverified,
                Transport::Dir,
                "/srv/d",
            ),
        ];
        for (s, sig, transport, image) in cases {
            let r: ImageReference = s.parse().unwrap();
            assert_eq!(r.sigverify, sig, "{s}");
            assert_eq!(r.transport, transport, "{s}");
            assert_eq!(r.image, image, "{s}");
            // Canonical forms parse back to the same value.
            assert_eq!(r.to_string().parse::<ImageReference>().unwrap(), r, "{s}");
        }
        for bad in [
            "quay.io/x",
            "ostree-unverified-registry:",
            "ostree-unverified-image:ftp:x",
            "ostree-remote-registry:noimage",
        ] {
            assert!(bad.parse::<ImageReference>().is_err(), "{bad}");
        }
    }
}
