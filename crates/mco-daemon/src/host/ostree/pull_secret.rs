//! Registry credentials for rpm-ostree. It reads them from [`paths::OSTREE_AUTH_FILE`], not from
//! where the cluster's pull secret is written, so the pull secret is linked there before each
//! pull of an OS image (upstream's `useMergedPullSecrets`).

use crate::error::{HostError, Result};
use crate::host::fs::{EntryKind, HostFs};
use crate::host::paths;

/// The pull secret rpm-ostree should use: the internal registry's (it also carries the global
/// one) when its contents (`None` when absent or unreadable) are valid JSON, else the kubelet's
/// when present, else none. A corrupt merged file would fail every pull, hence the check.
pub fn choose_pull_secret(
    internal_registry: Option<&[u8]>,
    kubelet_present: bool,
) -> Option<&'static str> {
    let valid = |d: &[u8]| serde_json::from_slice::<serde::de::IgnoredAny>(d).is_ok();
    if internal_registry.is_some_and(valid) {
        return Some(paths::INTERNAL_REGISTRY_AUTH_FILE);
    }
    kubelet_present.then_some(paths::KUBELET_AUTH_FILE)
}

/// Points [`paths::OSTREE_AUTH_FILE`] at the chosen pull secret and returns it.
///
/// Whatever is at the link is replaced, a regular file included: the path is the daemon's, and an
/// admin's own credentials belong in `/etc/ostree/auth.json`, which rpm-ostree also reads. With
/// no pull secret at all, a link left from before is removed rather than left dangling, but a
/// regular file is kept: it is then the only credentials there are.
pub fn link_pull_secret(fs: &HostFs) -> Result<Option<&'static str>> {
    link(fs).map_err(|e| HostError::PullSecret {
        path: paths::OSTREE_AUTH_FILE.into(),
        source: Box::new(e),
    })
}

fn link(fs: &HostFs) -> Result<Option<&'static str>> {
    let internal = fs
        .read_optional(paths::INTERNAL_REGISTRY_AUTH_FILE)
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "internal registry pull secret unreadable; ignoring it");
            None
        });
    let kubelet = fs.exists(paths::KUBELET_AUTH_FILE)?;
    let chosen = choose_pull_secret(internal.as_deref(), kubelet);
    match chosen {
        // Absolute, so it resolves on the host, where rpm-ostree runs; the replacement is one
        // rename, so a concurrent pull never finds the file missing.
        Some(target) => {
            tracing::info!(
                link = paths::OSTREE_AUTH_FILE,
                target,
                "linking pull secret"
            );
            fs.symlink(target, paths::OSTREE_AUTH_FILE)?;
        }
        None => {
            tracing::warn!(
                "no pull secret at {} or {}; rpm-ostree pulls without credentials",
                paths::INTERNAL_REGISTRY_AUTH_FILE,
                paths::KUBELET_AUTH_FILE
            );
            if fs
                .stat(paths::OSTREE_AUTH_FILE)?
                .is_some_and(|st| st.kind == EntryKind::Symlink)
            {
                fs.remove_file(paths::OSTREE_AUTH_FILE)?;
            }
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::host::fs::FileAttrs;

    const INTERNAL: &str = paths::INTERNAL_REGISTRY_AUTH_FILE;
    const KUBELET: &str = paths::KUBELET_AUTH_FILE;
    const LINK: &str = paths::OSTREE_AUTH_FILE;

    #[test]
    fn choice() {
        let valid: &[u8] = br#"{"auths":{}}"#;
        assert_eq!(choose_pull_secret(None, true), Some(KUBELET));
        assert_eq!(choose_pull_secret(Some(valid), true), Some(INTERNAL));
        assert_eq!(choose_pull_secret(Some(valid), false), Some(INTERNAL));
        for invalid in [&b"{\"auths\":"[..], b"", b"not json"] {
            assert_eq!(choose_pull_secret(Some(invalid), true), Some(KUBELET));
            assert_eq!(choose_pull_secret(Some(invalid), false), None);
        }
        assert_eq!(choose_pull_secret(None, false), None);
    }

    fn root() -> (tempfile::TempDir, HostFs) {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        (t, fs)
    }

    fn write(fs: &HostFs, path: &str, data: &str) {
        fs.write_atomic(path, data.as_bytes(), &FileAttrs::mode(0o600))
            .unwrap();
    }

    fn target(fs: &HostFs) -> Option<PathBuf> {
        fs.read_link(LINK).unwrap()
    }

    #[test]
    fn links_kubelet_pull_secret_creating_the_directory() {
        let (_t, fs) = root();
        write(&fs, KUBELET, r#"{"auths":{}}"#);
        assert_eq!(link_pull_secret(&fs).unwrap(), Some(KUBELET));
        assert_eq!(target(&fs), Some(PathBuf::from(KUBELET)));
    }

    #[test]
    fn prefers_a_valid_internal_registry_pull_secret() {
        let (_t, fs) = root();
        write(&fs, KUBELET, r#"{"auths":{}}"#);
        write(&fs, INTERNAL, r#"{"auths":{"image-registry":{}}}"#);
        assert_eq!(link_pull_secret(&fs).unwrap(), Some(INTERNAL));
        assert_eq!(target(&fs), Some(PathBuf::from(INTERNAL)));

        // Corrupted later: the next pull goes back to the kubelet's, replacing the older link.
        write(&fs, INTERNAL, "{\"auths\":");
        assert_eq!(link_pull_secret(&fs).unwrap(), Some(KUBELET));
        assert_eq!(target(&fs), Some(PathBuf::from(KUBELET)));
        assert_eq!(fs.list_dir("/run/ostree").unwrap(), vec!["auth.json"]);
    }

    #[test]
    fn no_pull_secret_removes_a_stale_link_and_creates_nothing() {
        let (_t, fs) = root();
        assert_eq!(link_pull_secret(&fs).unwrap(), None);
        assert!(!fs.exists("/run/ostree").unwrap());

        fs.symlink(KUBELET, LINK).unwrap();
        write(&fs, INTERNAL, "not json");
        assert_eq!(link_pull_secret(&fs).unwrap(), None);
        assert!(!fs.exists(LINK).unwrap());
    }

    #[test]
    fn a_regular_file_is_replaced_but_kept_without_a_pull_secret() {
        let (_t, fs) = root();
        write(&fs, LINK, r#"{"auths":{"admin":{}}}"#);
        assert_eq!(link_pull_secret(&fs).unwrap(), None);
        assert_eq!(fs.read(LINK).unwrap(), br#"{"auths":{"admin":{}}}"#);

        write(&fs, KUBELET, r#"{"auths":{}}"#);
        assert_eq!(link_pull_secret(&fs).unwrap(), Some(KUBELET));
        assert_eq!(target(&fs), Some(PathBuf::from(KUBELET)));
    }

    #[test]
    fn failure_names_the_link() {
        let (_t, fs) = root();
        write(&fs, KUBELET, r#"{"auths":{}}"#);
        // A file where the directory should be.
        write(&fs, "/run/ostree", "");
        let err = link_pull_secret(&fs).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("linking the pull secret at {LINK}: ")),
            "{err}"
        );
    }
}
