//! The certificate writer: the ControllerConfig's CA bundles onto the node, as upstream's
//! daemon writes them (`pkg/daemon/certificate_writer.go`), outside any update: no drain, no
//! reboot, whatever the node's pool (paused or not).
//!
//! - `kubeAPIServerServingCAData` → `/etc/kubernetes/kubelet-ca.crt` (newline-terminated);
//! - each of `imageRegistryBundleData` and `imageRegistryBundleUserData` →
//!   `/etc/docker/certs.d/<file>/ca.crt`, `..` in `file` standing for `:` (`host..5000` is
//!   `host:5000`); a directory there that no bundle names is removed, as upstream removes it;
//! - `internalRegistryPullSecret` → `/etc/mco/internal-registry-pull-secret.json` (mode 0600):
//!   the global pull secret merged with the internal image registry's, which the daemon hands
//!   rpm-ostree before a rebase when it is valid JSON.
//!
//! Unlike upstream, an absent or empty `kubeAPIServerServingCAData` leaves the kubelet CA
//! alone rather than writing an empty file over it, an absent or empty
//! `internalRegistryPullSecret` removes its file rather than leaving it empty, and an
//! unchanged file is not rewritten.
//! A bundle that cannot be written (not base64, too large, a `file` that is not one directory
//! name) is skipped and reported; the others are still written.

use std::collections::BTreeMap;

use base64::Engine as _;
use mco_api::ControllerConfigSpec;

use crate::error::HostError;
use crate::host::fs::{EntryKind, FileAttrs, HostFs};

/// The kubelet's copy of the kube-apiserver serving CA.
pub const KUBELET_CA: &str = "/etc/kubernetes/kubelet-ca.crt";
/// One directory per registry host, each holding `ca.crt`.
pub const REGISTRY_CERTS_DIR: &str = "/etc/docker/certs.d";
/// Bytes one bundle may hold (decoded), as the controller reads them.
pub const MAX_BUNDLE_BYTES: usize = mco_api::controllerconfig::MAX_BUNDLE_BYTES;
/// Registry bundles written; more are reported and skipped.
pub const MAX_REGISTRY_BUNDLES: usize = 500;
/// The merged pull secret for OS image pulls.
pub const INTERNAL_REGISTRY_PULL_SECRET: &str = crate::host::paths::INTERNAL_REGISTRY_AUTH_FILE;

/// What the node's files should hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertFiles {
    /// The kubelet CA; `None` leaves the file as it is.
    pub kubelet_ca: Option<Vec<u8>>,
    /// Registry directory name (`host:port`) → `ca.crt` contents.
    pub registries: BTreeMap<String, Vec<u8>>,
    /// The merged pull secret; `None` removes the file.
    pub internal_registry_pull_secret: Option<Vec<u8>>,
    /// Each bundle skipped, and why, naming its spec field.
    pub problems: Vec<String>,
}

/// The files `spec` asks for. Pure.
pub fn plan(spec: &ControllerConfigSpec) -> CertFiles {
    let mut out = CertFiles::default();
    if let Some(data) = spec
        .kube_api_server_serving_ca_data
        .as_deref()
        .filter(|d| !d.is_empty())
    {
        match decode("spec.kubeAPIServerServingCAData", data) {
            Ok(mut pem) => {
                if !pem.ends_with(b"\n") {
                    pem.push(b'\n');
                }
                out.kubelet_ca = Some(pem);
            }
            Err(p) => out.problems.push(p),
        }
    }
    if let Some(data) = spec
        .other
        .get("internalRegistryPullSecret")
        .and_then(|v| v.as_str())
        .filter(|d| !d.is_empty())
    {
        match decode("spec.internalRegistryPullSecret", data) {
            Ok(secret) => out.internal_registry_pull_secret = Some(secret),
            Err(p) => out.problems.push(p),
        }
    }
    let lists = [
        ("imageRegistryBundleData", &spec.image_registry_bundle_data),
        (
            "imageRegistryBundleUserData",
            &spec.image_registry_bundle_user_data,
        ),
    ];
    let mut seen = 0;
    for (list, bundles) in lists {
        for (i, b) in bundles.iter().flatten().enumerate() {
            let field = format!("spec.{list}[{i}]");
            seen += 1;
            if seen > MAX_REGISTRY_BUNDLES {
                out.problems.push(format!(
                    "{field}: more than {MAX_REGISTRY_BUNDLES} registry bundles; skipped"
                ));
                continue;
            }
            let dir = match registry_dir(&b.file) {
                Ok(d) => d,
                Err(why) => {
                    out.problems
                        .push(format!("{field}.file {:?}: {why}", b.file));
                    continue;
                }
            };
            match decode(&field, &b.data) {
                // The user's bundle for a host comes last and wins, as upstream writes it last.
                Ok(pem) => {
                    out.registries.insert(dir, pem);
                }
                Err(p) => out.problems.push(p),
            }
        }
    }
    out
}

/// The directory of a registry bundle: `file` with `..` read as `:`, which must be one
/// directory name.
pub fn registry_dir(file: &str) -> Result<String, &'static str> {
    let dir = file.replace("..", ":");
    if dir.is_empty() {
        return Err("empty");
    }
    if dir.len() > 255 {
        return Err("longer than 255 bytes");
    }
    if dir.contains('/') || dir.contains('\0') || dir == "." {
        return Err("not a single directory name");
    }
    Ok(dir)
}

fn decode(field: &str, data: &str) -> Result<Vec<u8>, String> {
    // Base64 of n bytes is 4n/3 characters: refuse before decoding anything large.
    if data.len() / 4 * 3 > MAX_BUNDLE_BYTES + 2 {
        return Err(format!(
            "{field}: more than the limit of {MAX_BUNDLE_BYTES} bytes; skipped"
        ));
    }
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("{field}: not base64: {e}; skipped"))?;
    if pem.len() > MAX_BUNDLE_BYTES {
        return Err(format!(
            "{field}: {} bytes, more than the limit of {MAX_BUNDLE_BYTES}; skipped",
            pem.len()
        ));
    }
    Ok(pem)
}

/// Brings the node's files to `want`; returns the paths changed (written or removed).
pub fn apply(fs: &HostFs, want: &CertFiles) -> Result<Vec<String>, HostError> {
    let mut changed = vec![];
    let attrs = FileAttrs::mode(0o644);
    let mut write = |path: String, data: &[u8]| -> Result<(), HostError> {
        if fs.read_optional(&path)?.as_deref() != Some(data) {
            fs.write_atomic(&path, data, &attrs)?;
            changed.push(path);
        }
        Ok(())
    };
    if let Some(ca) = &want.kubelet_ca {
        write(KUBELET_CA.to_owned(), ca)?;
    }
    for (dir, pem) in &want.registries {
        write(format!("{REGISTRY_CERTS_DIR}/{dir}/ca.crt"), pem)?;
    }
    // Credentials: only root may read them.
    match &want.internal_registry_pull_secret {
        Some(secret) => {
            let path = INTERNAL_REGISTRY_PULL_SECRET;
            let same = fs.read_optional(path)?.as_deref() == Some(secret.as_slice())
                && fs.stat(path)?.is_some_and(|s| s.mode == 0o600);
            if !same {
                fs.write_atomic(path, secret, &FileAttrs::mode(0o600))?;
                changed.push(path.to_owned());
            }
        }
        None => {
            if fs.remove_file(INTERNAL_REGISTRY_PULL_SECRET)? {
                changed.push(INTERNAL_REGISTRY_PULL_SECRET.to_owned());
            }
        }
    }
    for name in fs.list_dir(REGISTRY_CERTS_DIR)? {
        let path = format!("{REGISTRY_CERTS_DIR}/{name}");
        let is_dir = fs.stat(&path)?.is_some_and(|s| s.kind == EntryKind::Dir);
        if is_dir && !want.registries.contains_key(&name) {
            fs.remove_all(&path)?;
            changed.push(path);
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_api::ImageRegistryBundle;
    use pretty_assertions::assert_eq;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn reg(file: &str, data: &str) -> ImageRegistryBundle {
        ImageRegistryBundle {
            file: file.into(),
            data: b64(data),
        }
    }

    #[test]
    fn the_kubelet_ca_and_each_registry_get_their_file() {
        let spec = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some(b64("KUBE")),
            image_registry_bundle_data: Some(vec![reg("image-registry.svc..5000", "IR")]),
            image_registry_bundle_user_data: Some(vec![
                reg("quay.io", "Q"),
                reg("image-registry.svc..5000", "USER"),
            ]),
            ..Default::default()
        };
        let want = plan(&spec);
        assert_eq!(want.kubelet_ca.as_deref(), Some(&b"KUBE\n"[..]));
        let regs: Vec<(&str, &[u8])> = want
            .registries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect();
        assert_eq!(
            regs,
            vec![
                ("image-registry.svc:5000", &b"USER"[..]),
                ("quay.io", &b"Q"[..])
            ]
        );
        assert_eq!(want.problems, Vec::<String>::new());
    }

    #[test]
    fn no_kube_ca_leaves_the_kubelet_ca_alone() {
        assert_eq!(plan(&ControllerConfigSpec::default()), CertFiles::default());
        let empty = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(plan(&empty).kubelet_ca, None);
    }

    #[test]
    fn bad_bundles_are_skipped_naming_their_field_and_the_rest_is_written() {
        let spec = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some("%%%".into()),
            image_registry_bundle_user_data: Some(vec![
                reg("../../etc", "X"),
                reg("a/b", "X"),
                reg("", "X"),
                reg("ok.example", "OK"),
            ]),
            ..Default::default()
        };
        let want = plan(&spec);
        assert_eq!(want.kubelet_ca, None);
        assert_eq!(
            want.registries.keys().collect::<Vec<_>>(),
            vec!["ok.example"]
        );
        assert_eq!(want.problems.len(), 4, "{:?}", want.problems);
        assert!(want.problems[0].starts_with("spec.kubeAPIServerServingCAData: not base64"));
        assert_eq!(
            want.problems[1],
            "spec.imageRegistryBundleUserData[0].file \"../../etc\": not a single directory name"
        );
        assert_eq!(
            want.problems[3],
            "spec.imageRegistryBundleUserData[2].file \"\": empty"
        );
    }

    #[test]
    fn bundles_at_the_limits_are_written_and_beyond_them_skipped() {
        let at = "x".repeat(MAX_BUNDLE_BYTES);
        let over = "x".repeat(MAX_BUNDLE_BYTES + 1);
        let mut many: Vec<ImageRegistryBundle> = (0..MAX_REGISTRY_BUNDLES - 1)
            .map(|i| reg(&format!("r{i}"), "C"))
            .collect();
        many.push(reg("big", &at));
        let spec = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some(b64(&over)),
            image_registry_bundle_data: Some(many),
            ..Default::default()
        };
        let want = plan(&spec);
        assert_eq!(want.registries.len(), MAX_REGISTRY_BUNDLES);
        assert_eq!(want.registries["big"].len(), MAX_BUNDLE_BYTES);
        assert_eq!(want.kubelet_ca, None);
        assert_eq!(want.problems.len(), 1, "{:?}", want.problems);

        let one_more = ControllerConfigSpec {
            image_registry_bundle_user_data: Some(vec![reg("extra", "C")]),
            ..spec
        };
        let want = plan(&one_more);
        assert!(!want.registries.contains_key("extra"));
        assert_eq!(
            want.problems[1],
            format!(
                "spec.imageRegistryBundleUserData[0]: more than {MAX_REGISTRY_BUNDLES} registry bundles; skipped"
            )
        );
    }

    #[test]
    fn apply_writes_changes_only_and_removes_registries_no_longer_named() {
        let root = tempfile::tempdir().unwrap();
        let fs = HostFs::open(root.path()).unwrap();
        // An old registry's directory, and a stray file (not a directory: left alone).
        fs.write_atomic(
            "/etc/docker/certs.d/old.example/ca.crt",
            b"OLD",
            &FileAttrs::mode(0o644),
        )
        .unwrap();
        fs.write_atomic("/etc/docker/certs.d/README", b"", &FileAttrs::mode(0o644))
            .unwrap();
        let mut want = CertFiles {
            kubelet_ca: Some(b"KUBE\n".to_vec()),
            ..Default::default()
        };
        want.registries.insert("quay.io:443".into(), b"Q".to_vec());
        let changed = apply(&fs, &want).unwrap();
        assert_eq!(
            changed,
            vec![
                "/etc/kubernetes/kubelet-ca.crt",
                "/etc/docker/certs.d/quay.io:443/ca.crt",
                "/etc/docker/certs.d/old.example",
            ]
        );
        assert_eq!(fs.read(KUBELET_CA).unwrap(), b"KUBE\n");
        assert_eq!(
            fs.stat(KUBELET_CA).unwrap().unwrap().mode,
            0o644,
            "as upstream's default file mode"
        );
        assert!(!fs.exists("/etc/docker/certs.d/old.example").unwrap());
        assert!(fs.exists("/etc/docker/certs.d/README").unwrap());
        assert_eq!(
            apply(&fs, &want).unwrap(),
            Vec::<String>::new(),
            "nothing to do"
        );
    }

    #[test]
    fn the_merged_pull_secret_is_written_private_and_removed_when_unset() {
        let spec = |v: Option<&str>| {
            let mut spec = ControllerConfigSpec::default();
            if let Some(v) = v {
                spec.other
                    .insert("internalRegistryPullSecret".into(), v.into());
            }
            spec
        };
        let secret =
            r#"{"auths":{"image-registry.openshift-image-registry.svc:5000":{"auth":"dTpw"}}}"#;
        let want = plan(&spec(Some(&b64(secret))));
        assert_eq!(
            want.internal_registry_pull_secret.as_deref(),
            Some(secret.as_bytes())
        );
        let bad = plan(&spec(Some("%%%")));
        assert_eq!(bad.internal_registry_pull_secret, None);
        assert!(
            bad.problems[0].starts_with("spec.internalRegistryPullSecret: not base64"),
            "{:?}",
            bad.problems
        );

        let root = tempfile::tempdir().unwrap();
        let fs = HostFs::open(root.path()).unwrap();
        let changed = apply(&fs, &want).unwrap();
        assert_eq!(changed, vec![INTERNAL_REGISTRY_PULL_SECRET]);
        assert_eq!(
            fs.read(INTERNAL_REGISTRY_PULL_SECRET).unwrap(),
            secret.as_bytes()
        );
        assert_eq!(
            fs.stat(INTERNAL_REGISTRY_PULL_SECRET)
                .unwrap()
                .unwrap()
                .mode,
            0o600
        );
        assert_eq!(apply(&fs, &want).unwrap(), Vec::<String>::new());
        // Unset (or empty): removed, so the daemon falls back to the kubelet's pull secret.
        assert_eq!(
            apply(&fs, &plan(&spec(Some("")))).unwrap(),
            vec![INTERNAL_REGISTRY_PULL_SECRET]
        );
        assert!(!fs.exists(INTERNAL_REGISTRY_PULL_SECRET).unwrap());
        assert_eq!(
            apply(&fs, &plan(&spec(None))).unwrap(),
            Vec::<String>::new()
        );
    }
}
