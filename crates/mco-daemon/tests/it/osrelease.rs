//! OS detection over fixture roots: identity from os-release, management from /run/ostree-booted.

// Tests set up and inspect their temp roots directly.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;

use mco_daemon::host::fs::{FileAttrs, HostFs};
use mco_daemon::host::osrelease::{HostOs, OsKind, OsRelease};
use mco_daemon::host::paths;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/os-release")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn node(os_release: Option<(&str, &str)>, ostree_booted: bool) -> (tempfile::TempDir, HostFs) {
    let t = tempfile::tempdir().unwrap();
    let fs = HostFs::open(t.path()).unwrap();
    if let Some((path, fixture_name)) = os_release {
        fs.write_atomic(
            path,
            fixture(fixture_name).as_bytes(),
            &FileAttrs::default(),
        )
        .unwrap();
    }
    if ostree_booted {
        fs.write_atomic(paths::OSTREE_BOOTED, b"", &FileAttrs::default())
            .unwrap();
    }
    (t, fs)
}

#[test]
fn every_fixture_classifies() {
    let cases = [
        ("uos", OsKind::Uos, "uos", "20.20230625.uccps.0"),
        ("uswift", OsKind::USwift, "USwift", "20.20231221.uccps.0"),
        ("uswift-lower", OsKind::USwift, "Uswift", "20"),
        ("rhcos", OsKind::Rhcos, "rhcos", "418.94.202501221327-0"),
        ("scos", OsKind::Scos, "scos", "418.9.202502040000-0"),
        (
            "fedora-coreos",
            OsKind::FedoraCoreos,
            "fedora",
            "41.20250117.3.0",
        ),
        ("rhel-coreos", OsKind::ElCoreos, "rhel", "9.6.20250601-0"),
        ("centos-coreos", OsKind::ElCoreos, "centos", "10.20260801.0"),
        ("rhel", OsKind::Rhel, "rhel", "8.10"),
        ("unknown", OsKind::Unknown, "debian", "12"),
    ];
    for (name, kind, id, version) in cases {
        let r = OsRelease::parse(&fixture(name));
        assert_eq!(r.kind(), kind, "{name}");
        assert_eq!(r.id, id, "{name}");
        assert_eq!(r.display_version(), version, "{name}");
    }
}

/// Seed 000: `ID="uos"` plus /run/ostree-booted is an ostree host that mco must manage.
#[test]
fn seed_000_uos_host_is_managed() {
    let (_t, fs) = node(Some((paths::OS_RELEASE, "uos")), true);
    let os = HostOs::detect(&fs).unwrap();
    assert!(os.is_managed_ostree());
    assert_eq!(os.kind(), OsKind::Uos);
    assert_eq!(os.identity.pretty_name, "UOS Server 20");
    assert_eq!(os.identity.ostree_version, "20.20230625.uccps.0");
    assert_eq!(os.identity.fields["PLATFORM_ID"], "platform:uelc20");
    assert_eq!(
        os.describe(),
        "uos 20.20230625.uccps.0 (UOS Server 20), ostree"
    );
}

/// The ID never decides: RHCOS without the marker is not managed, anything with it is.
#[test]
fn marker_alone_decides() {
    for name in ["rhcos", "fedora-coreos", "uswift", "unknown", "rhel"] {
        let (_t, fs) = node(Some((paths::OS_RELEASE, name)), false);
        assert!(!HostOs::detect(&fs).unwrap().is_managed_ostree(), "{name}");
        let (_t, fs) = node(Some((paths::OS_RELEASE, name)), true);
        assert!(HostOs::detect(&fs).unwrap().is_managed_ostree(), "{name}");
    }
    // No os-release at all still honours the marker.
    let (_t, fs) = node(None, true);
    let os = HostOs::detect(&fs).unwrap();
    assert!(os.is_managed_ostree());
    assert_eq!(os.kind(), OsKind::Unknown);
}

#[test]
fn falls_back_to_usr_lib_os_release() {
    let (_t, fs) = node(Some((paths::OS_RELEASE_FALLBACK, "scos")), true);
    assert_eq!(HostOs::detect(&fs).unwrap().kind(), OsKind::Scos);
    // /etc wins when both exist.
    fs.write_atomic(
        paths::OS_RELEASE,
        fixture("uos").as_bytes(),
        &FileAttrs::default(),
    )
    .unwrap();
    assert_eq!(HostOs::detect(&fs).unwrap().kind(), OsKind::Uos);
}

#[test]
fn relative_symlinked_os_release_is_followed() {
    let (_t, fs) = node(Some((paths::OS_RELEASE_FALLBACK, "rhcos")), false);
    fs.symlink("../usr/lib/os-release", paths::OS_RELEASE)
        .unwrap();
    assert_eq!(HostOs::detect(&fs).unwrap().kind(), OsKind::Rhcos);
}
