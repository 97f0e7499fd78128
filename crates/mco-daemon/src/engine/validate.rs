//! On-disk validation: is the node what its current config says? Messages are upstream's, since
//! users and alerts match on them; the never-adopted OS (seed 000) additionally names its cause
//! and the one-step fix.

use std::fmt;

use ignition_config::v3_5::File;

use crate::engine::apply::{ApplyError, file_contents, file_mode};
use crate::engine::plan::ParsedConfig;
use crate::error::HostError;
use crate::host::Host;
use crate::host::fs::EntryKind;
use crate::host::paths;
use crate::host::units;

/// Files upstream never validates (rewritten by other writers).
const SKIPPED_FILES: &[&str] = &[
    "/etc/kubernetes/kubelet-ca.crt",
    "/etc/kubernetes/static-pod-resources/configmaps/cloud-config/ca-bundle.pem",
    paths::INTERNAL_REGISTRY_AUTH_FILE,
];

/// One way the disk differs from the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The booted OS image is not the config's.
    OsImage {
        /// `osImageURL` of the config.
        expected: String,
        /// What the booted deployment carries (`""` when it was never adopted).
        have: String,
        /// The host is ostree but its booted deployment has no mco origin.
        never_adopted: bool,
    },
    /// Kernel arguments of the config not on the host.
    KernelArguments(Vec<String>),
    /// A file's content differs.
    Content(String),
    /// A file's mode differs.
    Mode {
        /// The file.
        path: String,
        /// Wanted.
        expected: u32,
        /// Found.
        received: u32,
    },
    /// A file or unit is missing.
    Missing {
        /// The file.
        path: String,
        /// The stat error.
        error: String,
    },
    /// A file with `append`.
    Append,
    /// A unit should (not) be masked.
    Masked(String),
    /// A dropin that must be absent exists.
    UnexpectedDropin(String),
    /// Enablement differs.
    Enabled {
        /// The unit.
        unit: String,
        /// Wanted.
        expected: bool,
        /// What systemd says.
        reported: &'static str,
    },
}

/// Go's `os.FileMode` `%v` for a regular file: `-rw-r--r--`.
fn mode_string(mode: u32) -> String {
    let mut s = String::from("-");
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::OsImage {
                expected,
                have,
                never_adopted,
            } => {
                write!(f, "expected target osImageURL {expected:?}, have {have:?}")?;
                if *never_adopted {
                    write!(
                        f,
                        "; the booted deployment was never taken over by the machine-config daemon \
                         (first boot skipped the OS update, so it has no pivot:// or container origin). \
                         To adopt it, touch {} or run `mco daemon firstboot-complete-machineconfig`",
                        paths::FORCE_FILE
                    )?;
                }
                Ok(())
            }
            Mismatch::KernelArguments(k) => {
                write!(f, "missing expected kernel arguments: [{}]", k.join(" "))
            }
            Mismatch::Content(p) => write!(f, "content mismatch for file {p:?}"),
            Mismatch::Mode {
                path,
                expected,
                received,
            } => write!(
                f,
                "mode mismatch for file: {path:?}; expected: {}/{expected}/0{expected:o}; received: {}/{received}/0{received:o}",
                mode_string(*expected),
                mode_string(*received)
            ),
            Mismatch::Missing { path, error } => write!(f, "could not stat file {path:?}: {error}"),
            Mismatch::Append => {
                f.write_str("found an append section when checking files. Append is not supported")
            }
            Mismatch::Masked(p) => write!(
                f,
                "state validation: invalid unit masked setting. path: {p}"
            ),
            Mismatch::UnexpectedDropin(p) => write!(
                f,
                "state validation: dropin {p} has no content but exists on disk"
            ),
            Mismatch::Enabled {
                unit,
                expected,
                reported,
            } => write!(
                f,
                "unit {unit:?} expected enabled={expected}, but systemd reports {reported:?}"
            ),
        }
    }
}

/// Why validation failed.
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// The disk differs from the config: upstream's wrapper around the first difference.
    #[error("unexpected on-disk state validating against {config}: {mismatch}")]
    Drift {
        /// The config validated against.
        config: String,
        /// What differs.
        mismatch: Box<Mismatch>,
    },
    /// The host could not be read.
    #[error("validating against {config}: {source}")]
    Host {
        /// The config.
        config: String,
        /// Why.
        #[source]
        source: HostError,
    },
    /// The config itself is unusable.
    #[error("validating against {config}: {source}")]
    Config {
        /// The config.
        config: String,
        /// Why.
        #[source]
        source: Box<ApplyError>,
    },
}

impl ValidationError {
    /// The difference, when there is one.
    pub fn mismatch(&self) -> Option<&Mismatch> {
        match self {
            ValidationError::Drift { mismatch, .. } => Some(mismatch.as_ref()),
            _ => None,
        }
    }
}

/// What to check.
#[derive(Debug, Clone, Copy)]
pub struct ValidateOptions {
    /// Check the OS image and kernel arguments (the host is ostree-booted).
    pub managed_os: bool,
}

/// Like [`validate_on_disk`], but the file or unit at `changed` is checked first, so that after
/// several drifts the reason names the most recently drifted path (BZ 2104978).
pub fn validate_on_disk_preferring(
    host: &Host,
    cfg: &ParsedConfig,
    opts: ValidateOptions,
    changed: &str,
) -> Result<(), ValidationError> {
    let mut only = cfg.clone();
    if let Some(storage) = only.ignition.storage.as_mut()
        && let Some(files) = storage.files.as_mut()
    {
        files.retain(|f| f.path == changed);
    }
    if let Some(systemd) = only.ignition.systemd.as_mut()
        && let Some(list) = systemd.units.as_mut()
    {
        list.retain(|u| {
            units::unit_path(&u.name) == changed
                || u.dropins
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|d| units::dropin_path(&u.name, &d.name) == changed)
        });
    }
    validate_on_disk(host, &only, ValidateOptions { managed_os: false })?;
    validate_on_disk(host, cfg, opts)
}

/// Every host path the drift monitor watches for `cfg`: its files, unit files and dropins.
pub fn managed_paths(cfg: &ParsedConfig) -> Vec<String> {
    let mut out: Vec<String> = cfg
        .ignition
        .storage
        .as_ref()
        .and_then(|s| s.files.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|f| f.path.clone())
        .collect();
    for u in cfg
        .ignition
        .systemd
        .as_ref()
        .and_then(|s| s.units.as_deref())
        .unwrap_or_default()
    {
        out.push(units::unit_path(&u.name));
        for d in u.dropins.as_deref().unwrap_or_default() {
            out.push(units::dropin_path(&u.name, &d.name));
        }
    }
    out
}

/// Validates the node against `cfg`: OS image, kernel arguments, files, units — upstream's order,
/// first difference wins.
pub fn validate_on_disk(
    host: &Host,
    cfg: &ParsedConfig,
    opts: ValidateOptions,
) -> Result<(), ValidationError> {
    let config = cfg.name.clone();
    let host_err = |source| ValidationError::Host {
        config: config.clone(),
        source,
    };
    let drift = |mismatch| ValidationError::Drift {
        config: config.clone(),
        mismatch: Box::new(mismatch),
    };
    if opts.managed_os {
        let expected = &cfg.mc.spec.os_image_url;
        let status = host.os.status().map_err(host_err)?;
        let have = status.booted.os_image_url();
        if !expected.is_empty() && have.as_deref() != Some(expected.as_str()) {
            return Err(drift(Mismatch::OsImage {
                expected: expected.clone(),
                have: have.unwrap_or_default(),
                never_adopted: !status.booted.is_mco_managed(),
            }));
        }
        let on_host = host.os.kargs().map_err(host_err)?;
        let missing: Vec<String> = cfg
            .kernel_arguments()
            .into_iter()
            .filter(|k| !on_host.contains(k))
            .collect();
        if !missing.is_empty() {
            return Err(drift(Mismatch::KernelArguments(missing)));
        }
    }
    check_files(host, cfg).map_err(|e| match e {
        Check::Host(e) => host_err(e),
        Check::Config(source) => ValidationError::Config {
            config: config.clone(),
            source: Box::new(source),
        },
        Check::Drift(m) => drift(m),
    })?;
    check_units(host, cfg).map_err(|e| match e {
        Check::Host(e) => host_err(e),
        Check::Config(source) => ValidationError::Config {
            config: config.clone(),
            source: Box::new(source),
        },
        Check::Drift(m) => drift(m),
    })
}

enum Check {
    Host(HostError),
    Config(ApplyError),
    Drift(Mismatch),
}

impl From<HostError> for Check {
    fn from(e: HostError) -> Self {
        Check::Host(e)
    }
}

/// Compares one path's content and mode.
fn check_file(host: &Host, path: &str, want: &[u8], mode: Option<u32>) -> Result<(), Check> {
    check_file_with(host, path, want, mode, &mut Vec::new())
}

/// [`check_file`] reading into `scratch`, so one buffer serves every file of a config.
fn check_file_with(
    host: &Host,
    path: &str,
    want: &[u8],
    mode: Option<u32>,
    scratch: &mut Vec<u8>,
) -> Result<(), Check> {
    let st = match host.fs.stat(path)? {
        Some(st) => st,
        None => {
            return Err(Check::Drift(Mismatch::Missing {
                path: path.into(),
                error: format!("stat {path}: no such file or directory"),
            }));
        }
    };
    if let Some(mode) = mode {
        let got = st.mode & 0o7777;
        if st.kind == EntryKind::File && got != mode {
            return Err(Check::Drift(Mismatch::Mode {
                path: path.into(),
                expected: mode,
                received: got,
            }));
        }
    }
    if st.len != want.len() as u64 && st.kind == EntryKind::File {
        return Err(Check::Drift(Mismatch::Content(path.into())));
    }
    host.fs.read_into(path, scratch)?;
    if scratch.as_slice() != want {
        return Err(Check::Drift(Mismatch::Content(path.into())));
    }
    Ok(())
}

/// Ignition's base64 (padding optional), as the renderer decodes it.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The expected contents of `f`. Rendered configs carry plain base64 or plain text `data:` URLs
/// without compression or percent-escapes; those are decoded straight into `scratch` (or
/// borrowed from the config) instead of through the general decoder's extra passes and
/// allocations. Anything else, or anything the fast path rejects, takes the general decoder,
/// so the result and the errors are the same.
fn expected_contents<'a>(f: &'a File, scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ApplyError> {
    let c = f.contents.as_ref();
    let uncompressed = c
        .and_then(|c| c.compression.as_deref())
        .is_none_or(str::is_empty);
    if let Some(src) = c.and_then(|c| c.source.as_deref())
        && uncompressed
        && let Some((header, payload)) = src.strip_prefix("data:").and_then(|r| r.split_once(','))
        && !payload.as_bytes().contains(&b'%')
    {
        let base64 = header
            .rsplit(';')
            .next()
            .is_some_and(|p| p.eq_ignore_ascii_case("base64"));
        if !base64 {
            return Ok(payload.as_bytes());
        }
        scratch.clear();
        if base64::Engine::decode_vec(&BASE64, payload, scratch).is_ok() {
            return Ok(scratch.as_slice());
        }
    }
    *scratch = file_contents(f)?;
    Ok(scratch.as_slice())
}

fn check_files(host: &Host, cfg: &ParsedConfig) -> Result<(), Check> {
    let files = cfg
        .ignition
        .storage
        .as_ref()
        .and_then(|s| s.files.as_deref())
        .unwrap_or_default();
    let (mut want, mut on_disk) = (Vec::new(), Vec::new());
    for f in files {
        if SKIPPED_FILES.contains(&f.path.as_str()) {
            continue;
        }
        if f.append.as_ref().is_some_and(|a| !a.is_empty()) {
            return Err(Check::Drift(Mismatch::Append));
        }
        let want = expected_contents(f, &mut want).map_err(Check::Config)?;
        check_file_with(host, &f.path, want, Some(file_mode(f)), &mut on_disk)?;
    }
    Ok(())
}

fn check_units(host: &Host, cfg: &ParsedConfig) -> Result<(), Check> {
    let list = cfg
        .ignition
        .systemd
        .as_ref()
        .and_then(|s| s.units.as_deref())
        .unwrap_or_default();
    for u in list {
        for d in u.dropins.as_deref().unwrap_or_default() {
            let path = units::dropin_path(&u.name, &d.name);
            match d.contents.as_deref().filter(|c| !c.is_empty()) {
                Some(c) => check_file(host, &path, c.as_bytes(), None)?,
                None => {
                    if host.fs.exists(&path)? {
                        return Err(Check::Drift(Mismatch::UnexpectedDropin(path)));
                    }
                }
            }
        }
        let path = units::unit_path(&u.name);
        if u.mask == Some(true) {
            // A masked unit is judged by its mask only: drift in its contents never degrades
            // (OCPBUGS-3909).
            if !units::is_masked(&host.fs, &u.name)? {
                return Err(Check::Drift(Mismatch::Masked(path)));
            }
            continue;
        }
        if let Some(c) = u.contents.as_deref().filter(|c| !c.is_empty()) {
            if units::is_masked(&host.fs, &u.name)? {
                return Err(Check::Drift(Mismatch::Masked(path)));
            }
            check_file(host, &path, c.as_bytes(), None)?;
        }
        if let Some(expected) = u.enabled
            && (u.contents.as_deref().is_some_and(|c| !c.is_empty())
                || units::unit_file_exists(&host.fs, &u.name)?)
        {
            let on = host.systemd.is_enabled(&u.name)?;
            if on != expected {
                return Err(Check::Drift(Mismatch::Enabled {
                    unit: u.name.clone(),
                    expected,
                    reported: if on { "enabled" } else { "disabled" },
                }));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path decodes exactly what the general decoder does, and defers to it for
    /// everything else (escapes, whitespace, compression, bad data).
    #[test]
    fn expected_contents_matches_the_general_decoder() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"a\0binary\nfile");
        let unpadded = b64.trim_end_matches('=').to_string();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, b"zipped").unwrap();
        let gz = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        let cases = [
            (format!("data:;base64,{b64}"), None),
            (
                format!("data:text/plain;charset=utf-8;base64,{unpadded}"),
                None,
            ),
            (format!("data:;base64,{}\n{}", &b64[..4], &b64[4..]), None),
            ("data:,plain%20text%0A".to_string(), None),
            ("data:,plain-text".to_string(), None),
            (String::new(), None),
            (format!("data:;base64,{gz}"), Some("gzip")),
        ];
        for (source, compression) in cases {
            let f: File = serde_json::from_value(serde_json::json!({
                "path": "/etc/x",
                "contents": {"source": source, "compression": compression},
            }))
            .unwrap();
            let mut scratch = vec![b'x'; 3];
            let got = expected_contents(&f, &mut scratch).unwrap().to_vec();
            assert_eq!(got, file_contents(&f).unwrap(), "{source:?}");
        }
        let bad: File = serde_json::from_value(serde_json::json!({
            "path": "/etc/x", "contents": {"source": "data:;base64,@@@"},
        }))
        .unwrap();
        assert!(expected_contents(&bad, &mut Vec::new()).is_err());
    }

    #[test]
    fn messages_follow_upstream() {
        assert_eq!(
            Mismatch::Mode {
                path: "/etc/a".into(),
                expected: 0o644,
                received: 0o600
            }
            .to_string(),
            "mode mismatch for file: \"/etc/a\"; expected: -rw-r--r--/420/0644; received: -rw-------/384/0600"
        );
        assert_eq!(
            Mismatch::KernelArguments(vec!["nosmt".into(), "foo=bar".into()]).to_string(),
            "missing expected kernel arguments: [nosmt foo=bar]"
        );
        let e = ValidationError::Drift {
            config: "rendered-master-1".into(),
            mismatch: Box::new(Mismatch::Content("/etc/x".into())),
        };
        assert_eq!(
            e.to_string(),
            "unexpected on-disk state validating against rendered-master-1: content mismatch for file \"/etc/x\""
        );
        let os = Mismatch::OsImage {
            expected: "a".into(),
            have: String::new(),
            never_adopted: true,
        }
        .to_string();
        assert!(
            os.starts_with("expected target osImageURL \"a\", have \"\"; "),
            "{os}"
        );
        assert!(os.contains("/run/machine-config-daemon-force"), "{os}");
        assert!(
            os.contains("mco daemon firstboot-complete-machineconfig"),
            "{os}"
        );
    }
}
