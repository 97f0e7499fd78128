//! What an OS image says about itself: its version and build time.
//!
//! A real `rpm-ostree status` shows the commit's version and build time, both properties of
//! the image, so every node booted into one image shows the same `Version:` line. The
//! simulated ostree stamps a deployment with the moment it was staged; [`normalize`] replaces
//! that with the image's own build, derived deterministically from the URL when the profile
//! does not know the image.

use jiff::civil::Date;
use mco_daemon::host::ostree::{DeploymentJson, PIVOT_SCHEME, StatusJson};

use crate::profile::OsProfile;

/// Where derived build times start when a version carries no date: 2024-01-01T00:00:00Z.
const FALLBACK_EPOCH: u64 = 1_704_067_200;
const DAY: u64 = 86_400;

/// An image's version and build time (seconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageBuild {
    pub version: String,
    pub timestamp: u64,
}

/// The image a deployment was rebased to: the pivot URL or the container reference without
/// its transport; `None` for the plain refspec a node was installed with.
pub fn image_url(d: &DeploymentJson) -> Option<String> {
    if let Some(r) = d
        .container_image_reference
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        let image = match r.split_once("docker://") {
            Some((_, image)) => image,
            None if r.starts_with("ostree-") => r.split_once(':').map_or(r, |(_, i)| i),
            None => r,
        };
        return Some(image.to_string());
    }
    d.custom_origin
        .as_ref()
        .and_then(|c| c.first())
        .and_then(|u| u.strip_prefix(PIVOT_SCHEME))
        .map(str::to_string)
}

/// The build of the image at `url` on `profile`'s OS: the profile's version when it knows the
/// image, else the image's tag (or digest). The time comes from a date in the version, else
/// from the URL, so it is the same on every node and every run.
pub fn build_of(profile: Option<OsProfile>, url: &str) -> ImageBuild {
    let known = profile.and_then(|p| {
        p.images()
            .into_iter()
            .find(|(u, _)| *u == url)
            .map(|(_, v)| v)
    });
    let version = known.map_or_else(|| tag_of(url).to_string(), str::to_string);
    let seconds_of_day = fnv1a(url.as_bytes()) % DAY;
    let timestamp = match date_in(&version) {
        Some(day) => day + seconds_of_day,
        None => FALLBACK_EPOCH + (fnv1a(url.as_bytes()) >> 20) % (365 * DAY),
    };
    ImageBuild { version, timestamp }
}

/// Gives every rebased deployment its image's version and build time, in place.
pub fn normalize(profile: Option<OsProfile>, state: &mut StatusJson) {
    for d in &mut state.deployments {
        if let Some(url) = image_url(d) {
            let build = build_of(profile, &url);
            d.version = Some(build.version);
            d.timestamp = Some(build.timestamp);
        }
    }
}

/// `repo:tag` → `tag`, `repo@sha256:…` → the digest, anything else → `latest`.
fn tag_of(url: &str) -> &str {
    if let Some((_, digest)) = url.split_once('@') {
        return digest;
    }
    let name = url.rsplit('/').next().unwrap_or(url);
    match name.split_once(':') {
        Some((_, tag)) if !tag.is_empty() => tag,
        _ => "latest",
    }
}

/// Midnight UTC of the first `YYYYMMDD` run of digits in `version` that is a real date
/// (`20.20231221.uccps.0`, `414.92.202310170514-0`).
fn date_in(version: &str) -> Option<u64> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|run| run.len() >= 8)
        .find_map(|run| {
            let year: i16 = run[0..4].parse().ok()?;
            let month: i8 = run[4..6].parse().ok()?;
            let day: i8 = run[6..8].parse().ok()?;
            let date = Date::new(year, month, day).ok()?;
            let ts = date.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
            u64::try_from(ts.as_second()).ok()
        })
}

/// A hash that stays the same across builds and platforms (std's hasher does not promise to).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{OS_IMAGE_1_2_2, OS_IMAGE_1_3_0};

    fn pivot(url: &str, version: &str, timestamp: u64) -> DeploymentJson {
        DeploymentJson {
            version: Some(version.into()),
            timestamp: Some(timestamp),
            custom_origin: Some(vec![format!("{PIVOT_SCHEME}{url}"), "Managed".into()]),
            ..DeploymentJson::default()
        }
    }

    #[test]
    fn known_image_takes_the_profile_version_and_its_date() {
        let b = build_of(Some(OsProfile::Uos), OS_IMAGE_1_3_0);
        assert_eq!(b.version, "20.20231221.uccps.0");
        let day = 1_703_116_800; // 2023-12-21T00:00:00Z
        assert!((day..day + DAY).contains(&b.timestamp), "{b:?}");
    }

    #[test]
    fn unknown_image_is_versioned_by_its_tag() {
        let url = "quay.io/example/os:4.15.0";
        let b = build_of(Some(OsProfile::Uos), url);
        assert_eq!(b.version, "4.15.0");
        assert_eq!(b, build_of(Some(OsProfile::Uos), url));
        assert_ne!(
            b.timestamp,
            build_of(None, "quay.io/example/os:4.16.0").timestamp
        );
        assert_eq!(tag_of("r.example.com:5000/os@sha256:abc"), "sha256:abc");
        assert_eq!(tag_of("r.example.com:5000/os"), "latest");
    }

    #[test]
    fn normalize_replaces_the_staging_time_and_keeps_the_install_deployment() {
        let base = DeploymentJson {
            version: Some("20.20230625.uccps.0".into()),
            timestamp: Some(1_687_680_906),
            origin: Some("uswift:uswift/x86_64".into()),
            ..DeploymentJson::default()
        };
        let mut a = StatusJson {
            deployments: vec![pivot(OS_IMAGE_1_3_0, "x", 1_800_000_000), base.clone()],
            ..StatusJson::default()
        };
        let mut b = StatusJson {
            deployments: vec![pivot(OS_IMAGE_1_3_0, "y", 1_800_000_777)],
            ..StatusJson::default()
        };
        normalize(Some(OsProfile::Uos), &mut a);
        normalize(Some(OsProfile::Uos), &mut b);
        assert_eq!(a.deployments[0].version, b.deployments[0].version);
        assert_eq!(a.deployments[0].timestamp, b.deployments[0].timestamp);
        assert_eq!(a.deployments[1].timestamp, base.timestamp);
        assert_eq!(a.deployments[1].version, base.version);
    }

    #[test]
    fn container_references_lose_their_transport() {
        let d = DeploymentJson {
            container_image_reference: Some(format!("ostree-unverified-registry:{OS_IMAGE_1_2_2}")),
            ..DeploymentJson::default()
        };
        assert_eq!(image_url(&d).as_deref(), Some(OS_IMAGE_1_2_2));
        let d = DeploymentJson {
            container_image_reference: Some(format!(
                "ostree-image-signed:docker://{OS_IMAGE_1_2_2}"
            )),
            ..DeploymentJson::default()
        };
        assert_eq!(image_url(&d).as_deref(), Some(OS_IMAGE_1_2_2));
    }
}
