//! The MachineConfigs mco writes for users, as pure functions of their inputs:
//! - [`kubelet`]: a `KubeletConfig` over the pool's base kubelet config →
//!   `99-<pool>-generated-kubelet[-N]`;
//! - [`nodeconfig`]: `nodes.config.openshift.io/cluster` and `FeatureGate/cluster` over the
//!   pool's base kubelet config → `97-<pool>-generated-kubelet` and `98-<pool>-generated-kubelet`;
//! - [`crio`]: a `ContainerRuntimeConfig` → CRI-O drop-ins in `99-<pool>-generated-containerruntime[-N]`;
//! - [`registries`]: the mirror sets and `Image/cluster` over the pool's base `registries.conf`
//!   and `policy.json` → `99-<pool>-generated-registries`;
//! - [`template`]: the ControllerConfig and mco's templates → each role's `00-<role>`,
//!   `01-<role>-kubelet` and `01-<role>-container-runtime`.
//!
//! Nothing here reads the cluster; the controllers in `mco-controller` gather the inputs, call
//! these and write the result. Each generator's output for a set of inputs is a golden file
//! under `golden/`, checked by `cargo test -p mco-generate` and rewritten by
//! `MCO_BLESS=1 cargo test -p mco-generate`.

pub mod crio;
pub mod kubelet;
pub mod nodeconfig;
pub mod registries;
pub mod sigstore;
pub mod template;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use mco_api::constants::annotations;
use mco_api::{MachineConfig, MachineConfigPool, MachineConfigSpec};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Value, json};

/// The role label every generated MachineConfig carries: the pool's name, as upstream sets it.
pub const ROLE_LABEL: &str = "machineconfiguration.openshift.io/role";
/// The Ignition version of generated configs.
pub const IGNITION_VERSION: &str = "3.5.0";

/// Why an input was refused. The message is what the source object's status says.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A field upstream refuses, in upstream's words.
    #[error("{0}")]
    Refused(String),
    /// Two inputs contradict each other; names the objects.
    #[error("{0}")]
    Conflict(String),
    /// A base file of the pool could not be read.
    #[error("{0}")]
    Base(String),
}

/// The version stamp of another controller that generated `have`, when one did: its
/// `generated-by-controller-version` annotation, unless that is `ours` or any mco release's
/// (a semantic version, which is what mco stamps). Upstream's controller stamps its git commit,
/// so on a cluster mco took over, upstream's base configs carry one; they hold far more than
/// mco's platform-`None` templates (the pull secret, networking units, ...), and replacing them
/// would roll a different OS configuration to every node. The template controller keeps them;
/// the generators keep theirs while [`kept`] says so.
pub fn generated_elsewhere<'a>(have: &'a MachineConfig, ours: &str) -> Option<&'a str> {
    let stamp = have
        .metadata
        .annotations
        .as_ref()?
        .get(annotations::GENERATED_BY_CONTROLLER_VERSION)?;
    (stamp != ours && semver::Version::parse(stamp).is_err()).then_some(stamp.as_str())
}

/// Annotation on a MachineConfig another controller generated and a generator of mco keeps:
/// the hash of the spec mco would have written in its place when it first kept it.
pub const KEPT_FOR: &str = "mco.dev/kept-for";

/// What a generator does with a stored config in place of the one it generated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// Write `want` over it (mco's own, a hand-made one, or one kept until the inputs changed).
    No,
    /// Leave it: another controller generated it from the inputs mco still sees.
    Yes,
    /// Leave it, and record on it [`KEPT_FOR`] with this value: first seen.
    Mark(String),
}

/// Whether `have`, stored where a generator wants `want` (`None`: where it wants no config,
/// as the registries generator without inputs), is kept. A config another
/// controller generated ([`generated_elsewhere`]: upstream's, after a takeover) stays until
/// what mco would generate changes, that is until an input does (the object's spec, the
/// pool's base file, a mirror set): upstream's generators and mco's implement the same
/// settings, but their files may differ in bytes, and writing mco's over upstream's output
/// for the same settings would roll an update (a drain and a reboot for the kubelet) to every
/// node of the pool.
pub fn kept(have: &MachineConfig, want: Option<&MachineConfig>, ours: &str) -> Kept {
    use sha2::{Digest, Sha256};
    if generated_elsewhere(have, ours).is_none() {
        return Kept::No;
    }
    let spec = serde_json::to_vec(&want.map(|w| &w.spec)).unwrap_or_default();
    let hash = format!("{:x}", Sha256::digest(&spec));
    match have
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(KEPT_FOR))
    {
        None => Kept::Mark(hash),
        Some(h) if *h == hash => Kept::Yes,
        Some(_) => Kept::No,
    }
}

/// Whether `selector` picks `pool`. An absent or empty selector picks nothing, as upstream's
/// generators skip it (it would otherwise select every pool by accident).
pub fn selects(selector: Option<&LabelSelector>, pool: &MachineConfigPool) -> Result<bool, Error> {
    let Some(sel) = selector else {
        return Ok(false);
    };
    let parsed = mco_api::select::parse(Some(sel))
        .map_err(|e| Error::Refused(format!("invalid label selector: {e}")))?;
    let labels = pool.metadata.labels.clone().unwrap_or_default();
    Ok(match parsed {
        Some(s) if !s.is_empty() => s.matches(&labels),
        _ => false,
    })
}

/// `99-<pool>-generated-<kind>`, with `-<suffix>` when the suffix is not empty.
pub fn managed_name(pool: &str, kind: &str, suffix: &str) -> String {
    if suffix.is_empty() {
        format!("99-{pool}-generated-{kind}")
    } else {
        format!("99-{pool}-generated-{kind}-{suffix}")
    }
}

/// The suffix a new generator object of a pool gets, from the suffixes its siblings (the other
/// objects of the same kind selecting the pool) already hold: none for the first, then one more
/// than the largest, up to upstream's nine.
pub fn next_suffix<'a>(
    siblings: impl IntoIterator<Item = Option<&'a str>>,
    kind: &str,
) -> Result<String, Error> {
    let mut any = false;
    let mut max = 0u32;
    for s in siblings {
        any = true;
        if let Some(n) = s.and_then(|s| s.parse::<u32>().ok()) {
            max = max.max(n);
        }
    }
    if !any {
        return Ok(String::new());
    }
    if max + 1 > mco_api::generators::MAX_MC_NAME_SUFFIX {
        return Err(Error::Refused(format!(
            "max number of supported {kind} (10) has been reached. Please delete old {kind}s before retrying"
        )));
    }
    Ok((max + 1).to_string())
}

const DATA_URL_ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// A `data:,` URL of `contents`, percent-encoded so golden files stay readable.
pub fn data_url(contents: &str) -> String {
    format!(
        "data:,{}",
        percent_encoding::utf8_percent_encode(contents, DATA_URL_ESCAPE)
    )
}

/// An Ignition file entry that replaces whatever is at `path`, mode 0644.
pub fn file(path: &str, contents: &str) -> Value {
    json!({
        "path": path,
        "mode": 0o644,
        "overwrite": true,
        "contents": {"source": data_url(contents)},
    })
}

/// A generated MachineConfig for `pool` holding `files`.
pub fn machine_config(
    name: &str,
    pool: &str,
    controller_version: &str,
    files: Vec<Value>,
) -> MachineConfig {
    MachineConfig {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(ROLE_LABEL.to_owned(), pool.to_owned())])),
            annotations: Some(BTreeMap::from([(
                annotations::GENERATED_BY_CONTROLLER_VERSION.to_owned(),
                controller_version.to_owned(),
            )])),
            ..Default::default()
        },
        spec: MachineConfigSpec {
            config: Some(json!({
                "ignition": {"version": IGNITION_VERSION},
                "storage": {"files": files},
            })),
            ..Default::default()
        },
    }
}

/// The contents of `path` as the pool's own configs set it: the last of `mcs` (in merge order)
/// that writes it, skipping configs generated by mco's own generators (`99-*-generated-*`), so
/// a generator reads the base it overrides and never its own output.
pub fn base_file(mcs: &[&MachineConfig], path: &str) -> Result<Option<String>, Error> {
    let mut out = None;
    for mc in mcs {
        let name = mc.metadata.name.as_deref().unwrap_or_default();
        if name.starts_with("99-") && name.contains("-generated-") {
            continue;
        }
        if let Some(text) = file_contents(mc, path)? {
            out = Some(text);
        }
    }
    Ok(out)
}

/// Each entry of `storage.files` in one config, as JSON, in order.
pub fn storage_files(mc: &MachineConfig) -> impl Iterator<Item = &Value> {
    mc.spec
        .config
        .as_ref()
        .and_then(|c| c.pointer("/storage/files"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The contents of `path` as one config writes it (the last entry for it, as Ignition merges
/// them), whoever generated the config.
pub fn file_contents(mc: &MachineConfig, path: &str) -> Result<Option<String>, Error> {
    let name = mc.metadata.name.as_deref().unwrap_or_default();
    let mut out = None;
    for f in storage_files(mc) {
        if f["path"] != path {
            continue;
        }
        let Some(source) = f.pointer("/contents/source").and_then(Value::as_str) else {
            continue;
        };
        out = Some(decode_data_url(source).ok_or_else(|| {
            Error::Base(format!(
                "MachineConfig {name}: cannot decode the contents of {path}"
            ))
        })?);
    }
    Ok(out)
}

/// Decodes the `data:` URLs Ignition configs carry (plain or base64); `None` for other schemes.
fn decode_data_url(source: &str) -> Option<String> {
    let rest = source.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let bytes: Vec<u8> = if meta.ends_with(";base64") {
        base64_decode(data)?
    } else {
        percent_encoding::percent_decode_str(data).collect()
    };
    String::from_utf8(bytes).ok()
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod golden {
    //! Golden files: `golden/<name>`, compared byte for byte; `MCO_BLESS=1` rewrites them.
    use std::path::PathBuf;

    pub fn check(name: &str, actual: &str) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("golden")
            .join(name);
        if std::env::var_os("MCO_BLESS").is_some() {
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; create it with MCO_BLESS=1 cargo test -p mco-generate",
                path.display()
            )
        });
        pretty_assertions::assert_eq!(
            want,
            actual,
            "{} differs; if the change is intended, run MCO_BLESS=1 cargo test -p mco-generate",
            path.display()
        );
    }

    /// A MachineConfig as YAML, then each file's decoded contents, so a reviewer reads both.
    pub fn render(mc: &mco_api::MachineConfig) -> String {
        let mut out = mco_apimachinery::yaml::to_string(mc).unwrap();
        let files = mc
            .spec
            .config
            .as_ref()
            .and_then(|c| c.pointer("/storage/files"))
            .and_then(|f| f.as_array())
            .cloned()
            .unwrap_or_default();
        for f in files {
            let source = f
                .pointer("/contents/source")
                .and_then(|s| s.as_str())
                .unwrap();
            out.push_str(&format!(
                "# ---- {} ----\n{}",
                f["path"].as_str().unwrap(),
                super::decode_data_url(source).unwrap()
            ));
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_count_up_to_nine() {
        assert_eq!(next_suffix([], "kubelet config").unwrap(), "");
        assert_eq!(next_suffix([Some("")], "kubelet config").unwrap(), "1");
        assert_eq!(
            next_suffix([Some(""), Some("3"), None], "kubelet config").unwrap(),
            "4"
        );
        assert_eq!(next_suffix([Some("8")], "kubelet config").unwrap(), "9");
        let e = next_suffix([Some("9")], "kubelet config").unwrap_err();
        assert!(e.to_string().contains("(10) has been reached"), "{e}");
    }

    #[test]
    fn data_urls_round_trip() {
        let s = "a = \"b\"\n[x]\n100%";
        assert_eq!(decode_data_url(&data_url(s)).unwrap(), s);
        assert_eq!(decode_data_url("data:;base64,aGk=").unwrap(), "hi");
    }

    #[test]
    fn a_config_stamped_by_upstreams_controller_is_generated_elsewhere_and_mcos_never() {
        let mine = machine_config("00-worker", "worker", "0.4.1", vec![file("/etc/a", "a")]);
        let stamped = |stamp: Option<&str>| {
            let mut mc = mine.clone();
            let ann = mc.metadata.annotations.get_or_insert_default();
            match stamp {
                Some(s) => ann.insert(
                    annotations::GENERATED_BY_CONTROLLER_VERSION.into(),
                    s.into(),
                ),
                None => ann.remove(annotations::GENERATED_BY_CONTROLLER_VERSION),
            };
            mc
        };
        // Upstream's controller stamps its git commit; a dev build of it, a fixed word.
        let commit = "1d7c5a1e9f2b3c4d5e6f708192a3b4c5d6e7f809";
        assert_eq!(
            generated_elsewhere(&stamped(Some(commit)), "0.4.1"),
            Some(commit)
        );
        assert_eq!(
            generated_elsewhere(&stamped(Some("was-not-built-properly")), "0.4.1"),
            Some("was-not-built-properly")
        );
        // mco's own stamp, an older or newer mco's, and a config with no stamp (hand-written:
        // the template controller takes it over, as before) are not.
        assert_eq!(generated_elsewhere(&mine, "0.4.1"), None);
        for release in ["0.3.0", "1.0.0-rc.1", "0.5.0+build.7"] {
            assert_eq!(generated_elsewhere(&stamped(Some(release)), "0.4.1"), None);
        }
        assert_eq!(generated_elsewhere(&stamped(None), "0.4.1"), None);
        // A controller running under a non-release version (tests) owns what it stamped.
        assert_eq!(generated_elsewhere(&stamped(Some("test")), "test"), None);
    }

    #[test]
    fn an_upstream_generated_config_is_kept_until_what_mco_would_write_changes() {
        let want = machine_config(
            "99-worker-generated-kubelet",
            "worker",
            "0.4.1",
            vec![file("/etc/kubernetes/kubelet.conf", "maxPods: 300")],
        );
        let mut upstreams = machine_config(
            "99-worker-generated-kubelet",
            "worker",
            "1d7c5a1e9f2b3c4d5e6f708192a3b4c5d6e7f809",
            vec![file("/etc/kubernetes/kubelet.conf", "{\"maxPods\":300}")],
        );
        // mco's own and a hand-made config are written over as before.
        assert_eq!(kept(&want, Some(&want), "0.4.1"), Kept::No);
        let mut hand = upstreams.clone();
        hand.metadata.annotations = None;
        assert_eq!(kept(&hand, Some(&want), "0.4.1"), Kept::No);

        // Upstream's: marked on first sight, kept while mco would write the same.
        let unmarked = upstreams.clone();
        let Kept::Mark(hash) = kept(&upstreams, Some(&want), "0.4.1") else {
            panic!("not marked");
        };
        upstreams
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(KEPT_FOR.into(), hash);
        assert_eq!(kept(&upstreams, Some(&want), "0.4.1"), Kept::Yes);
        // Kept for no config (inputs absent), it goes once they are there, and the other way.
        let Kept::Mark(none) = kept(&unmarked, None, "0.4.1") else {
            panic!("not marked");
        };
        let mut for_none = unmarked;
        for_none
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(KEPT_FOR.into(), none);
        assert_eq!(kept(&for_none, None, "0.4.1"), Kept::Yes);
        assert_eq!(kept(&for_none, Some(&want), "0.4.1"), Kept::No);
        assert_eq!(kept(&upstreams, None, "0.4.1"), Kept::No);
        // An input changed (here the object's spec): mco's config replaces it.
        let changed = machine_config(
            "99-worker-generated-kubelet",
            "worker",
            "0.4.1",
            vec![file("/etc/kubernetes/kubelet.conf", "maxPods: 250")],
        );
        assert_eq!(kept(&upstreams, Some(&changed), "0.4.1"), Kept::No);
    }
}
