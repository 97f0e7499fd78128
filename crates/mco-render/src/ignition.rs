//! Ignition parsing, up-conversion to the one internal spec (3.5.0), and validation.
//!
//! Every MachineConfig's `spec.config` is converted to [`Ignition`] (`ignition_config::v3_5::Config`)
//! before anything else looks at it, as upstream does with its internal version 3.5.0.
//!
//! Supported input versions:
//! - **3.0.0 – 3.5.0**: read once with the 3.5 types, then every field the declared version does
//!   not define is cleared — the same result as reading the declared version's own types and
//!   translating up (a unit test holds the two together), at a third of the cost. Spec 3.x is
//!   additive with unchanged types, so nothing else differs. `ignition.version` becomes `3.5.0`.
//! - **3.6.0 is refused** with the upstream "unknown version" error: upstream's internal version is
//!   3.5.0, and accepting 3.6 would mean silently dropping 3.6-only fields when down-converting.
//! - **2.2.0 is translated**, as upstream does, because existing clusters still carry 2.2 MachineConfigs
//!   from before OpenShift 4.6. The config is first de-duplicated (last file per path wins, units by
//!   name with dropins unioned, only the `core` user, its SSH keys concatenated and de-duplicated),
//!   then translated: files, directories and links must live on `filesystem: root` (mapped to `/`),
//!   `append: true` becomes a 3.x `append` entry (which validation then rejects), `enable` folds into
//!   `enabled`. Parts of 2.2 with no 3.x equivalent that mco could apply — `networkd` units and
//!   `storage.disks/raid/filesystems` — are refused with an error saying so.
//!
//! An absent config, JSON `null` or `{}` is the valid empty config (an MC with only kernel arguments).
//!
//! Unknown keys are ignored (Ignition itself only warns about them).
//!
//! Decoded sizes are bounded: one file's contents at [`MAX_FILE_BYTES`], all files of one
//! config together at [`MAX_CONFIG_BYTES`]. gzip is inflated by a streaming decoder that
//! stops one byte past the limit, so a small bomb costs at most the limit, never its full size.
//! Render, validation and the daemon's writer all decode through [`decode_data_url`] or
//! [`check_data_url`], so the three agree.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

/// The one internal Ignition version every MachineConfig is converted to (upstream's is 3.5.0).
pub type Ignition = ignition_config::v3_5::Config;

/// The internal spec version written into every converted config.
pub const INTERNAL_VERSION: &str = "3.5.0";

/// Named in every version error, as upstream does, so users know what to write instead.
pub const SUPPORTED_VERSIONS: &str = "2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5";

/// Why an Ignition config could not be parsed, translated or decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum IgnitionError {
    /// `ignition.version` is missing or not a semantic version.
    #[error(
        "parsing Ignition config failed: invalid version. Supported spec versions: 2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5"
    )]
    InvalidVersion(String),
    /// A well-formed version mco does not support (including 3.6.0).
    #[error(
        "parsing Ignition config failed: unknown version. Supported spec versions: 2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5"
    )]
    UnknownVersion(String),
    /// The config text is not JSON (only possible for text not checked by a JSON reader).
    #[error("parsing Ignition config failed: {0}")]
    Json(String),
    /// The config does not match its declared version's schema.
    #[error("parsing Ignition config spec v{version} failed with error: {message}")]
    Schema { version: String, message: String },
    /// A spec 2.2 config uses something that has no spec 3 translation.
    #[error("translating Ignition config spec v2.2 to v3 failed: {0}")]
    Translate(String),
    /// `spec.config` is not a JSON object.
    #[error("Ignition config must be a JSON object, got {0}")]
    NotAnObject(String),
    /// The source is not a decodable `data:` URL.
    #[error("could not decode file content string: {0}")]
    DataUrl(String),
    /// `compression` is something other than absent, `""` or `gzip`.
    #[error("unsupported compression type {0:?}")]
    Compression(String),
    /// The data claims gzip but does not decompress.
    #[error("failed decompressing: {0}")]
    Gzip(String),
    /// The decoded contents are larger than [`MAX_FILE_BYTES`].
    #[error("decoded contents exceed the limit of {limit} bytes")]
    TooLarge { limit: u64 },
}

/// The most one file's decoded (and decompressed) contents may hold: 100 MiB. An object is
/// at most 3 MiB in the API server (1.5 MiB in etcd), and gzip inflates at most about
/// 1,000-fold, so a MachineConfig could otherwise carry gigabytes.
pub const MAX_FILE_BYTES: u64 = 100 * 1024 * 1024;
/// The most all files of one config may hold together, decoded: 256 MiB. It bounds each
/// MachineConfig and the rendered config that merges them.
pub const MAX_CONFIG_BYTES: u64 = 256 * 1024 * 1024;

/// Inflates gzip `data` into `out`, refusing more than `limit` bytes as soon as the decoder
/// produces them. Returns the inflated size.
pub fn gunzip_bounded(
    data: &[u8],
    out: &mut impl std::io::Write,
    limit: u64,
) -> Result<u64, IgnitionError> {
    let mut r = flate2::read::GzDecoder::new(data).take(limit.saturating_add(1));
    let n = std::io::copy(&mut r, out).map_err(|e| IgnitionError::Gzip(e.to_string()))?;
    if n > limit {
        return Err(IgnitionError::TooLarge { limit });
    }
    Ok(n)
}

/// Parse a raw Ignition JSON object of any supported spec version into the internal version.
pub fn parse(raw: &Value) -> Result<Ignition, IgnitionError> {
    let obj = match raw {
        Value::Null => return Ok(empty()),
        Value::Object(o) if o.is_empty() => return Ok(empty()),
        Value::Object(o) => o,
        other => return Err(IgnitionError::NotAnObject(json_kind(other).into())),
    };
    let version = obj
        .get("ignition")
        .and_then(|i| i.get("version"))
        .and_then(Value::as_str)
        .ok_or_else(|| IgnitionError::InvalidVersion(String::new()))?;
    if !is_semver(version) {
        return Err(IgnitionError::InvalidVersion(version.to_string()));
    }
    let minor = match minor_3x(version) {
        Some(minor) => minor,
        None if version == "2.2.0" => {
            let mut cfg = v2_2::translate(typed::<v2_2::Config>(raw, version)?)?;
            cfg.ignition.version = INTERNAL_VERSION.to_string();
            return Ok(cfg);
        }
        None => return Err(IgnitionError::UnknownVersion(version.to_string())),
    };
    // One typed pass as 3.5, then drop what the declared version does not define: the same result
    // as reading the declared version's types and translating up (a test checks this), at a third
    // of the cost. 3.x only ever added fields, with unchanged types.
    let mut cfg: Ignition = typed(raw, version)?;
    strip_newer_fields(&mut cfg, minor);
    cfg.ignition.version = INTERNAL_VERSION.to_string();
    Ok(cfg)
}

/// [`parse`] from the config's JSON text. A 3.x config is read straight into the internal types,
/// without building a `serde_json::Value` tree first (that tree costs as much as the typed read).
/// Anything that read does not accept as-is — spec 2.2, other versions, a schema error, `{}` —
/// goes through [`parse`], so results and error texts are exactly [`parse`]'s.
pub fn parse_raw(raw: &serde_json::value::RawValue) -> Result<Ignition, IgnitionError> {
    let text = raw.get();
    // A typed read also accepts a JSON array for a struct; `parse` refuses anything but an object.
    if text.trim_start().starts_with('{')
        && let Ok(mut cfg) = serde_json::from_str::<Ignition>(text)
        && let Some(minor) = minor_3x(&cfg.ignition.version)
    {
        strip_newer_fields(&mut cfg, minor);
        cfg.ignition.version = INTERNAL_VERSION.to_string();
        return Ok(cfg);
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| IgnitionError::Json(e.to_string()))?;
    parse(&value)
}

/// The minor version of a 3.x spec mco reads as 3.5, if `version` is one.
fn minor_3x(version: &str) -> Option<u8> {
    Some(match version {
        "3.0.0" => 0,
        "3.1.0" => 1,
        "3.2.0" => 2,
        "3.3.0" => 3,
        "3.4.0" => 4,
        "3.5.0" => 5,
        _ => return None,
    })
}

/// The empty internal config: what an MC without `spec.config` contributes.
pub fn empty() -> Ignition {
    let mut cfg = Ignition::default();
    cfg.ignition.version = INTERNAL_VERSION.to_string();
    cfg
}

fn typed<'de, T: Deserialize<'de>>(raw: &'de Value, version: &str) -> Result<T, IgnitionError> {
    T::deserialize(raw).map_err(|e| IgnitionError::Schema {
        version: version.to_string(),
        message: e.to_string(),
    })
}

/// Fields Ignition added after spec 3.0, cleared when the config declares an older version.
fn strip_newer_fields(cfg: &mut Ignition, minor: u8) {
    if minor >= 5 {
        return;
    }
    if minor < 1 {
        let ign = &mut cfg.ignition;
        ign.proxy = None;
        let strip = |r: &mut ignition_config::v3_5::Resource| {
            r.compression = None;
            r.http_headers = None;
        };
        if let Some(c) = &mut ign.config {
            c.merge.iter_mut().flatten().for_each(strip);
            c.replace.iter_mut().for_each(strip);
        }
        if let Some(tls) = ign.security.as_mut().and_then(|s| s.tls.as_mut()) {
            tls.certificate_authorities
                .iter_mut()
                .flatten()
                .for_each(strip);
        }
        if let Some(st) = &mut cfg.storage {
            for f in st.files.iter_mut().flatten() {
                f.append
                    .iter_mut()
                    .flatten()
                    .for_each(|r| r.http_headers = None);
                if let Some(c) = &mut f.contents {
                    c.http_headers = None;
                }
            }
            for fs in st.filesystems.iter_mut().flatten() {
                fs.mount_options = None;
            }
        }
    }
    if minor < 2 {
        if let Some(p) = &mut cfg.passwd {
            p.users
                .iter_mut()
                .flatten()
                .for_each(|u| u.should_exist = None);
            p.groups
                .iter_mut()
                .flatten()
                .for_each(|g| g.should_exist = None);
        }
        if let Some(st) = &mut cfg.storage {
            st.luks = None;
            for d in st.disks.iter_mut().flatten() {
                d.partitions
                    .iter_mut()
                    .flatten()
                    .for_each(|p| p.resize = None);
            }
        }
    }
    if minor < 3 {
        cfg.kernel_arguments = None;
    }
    if let Some(luks) = cfg.storage.as_mut().and_then(|s| s.luks.as_mut()) {
        for l in luks {
            if minor < 4 {
                l.discard = None;
                l.open_options = None;
                if let Some(c) = &mut l.clevis {
                    c.tang
                        .iter_mut()
                        .flatten()
                        .for_each(|t| t.advertisement = None);
                }
            }
            l.cex = None;
        }
    }
}

/// The reference up-conversion: read as the declared version's own types, then re-read as 3.5.
/// Slower than [`strip_newer_fields`]; kept to prove the two agree.
#[cfg(test)]
fn up<T: for<'de> Deserialize<'de> + serde::Serialize>(
    raw: &Value,
    version: &str,
) -> Result<Ignition, IgnitionError> {
    let old: T = typed(raw, version)?;
    let v = serde_json::to_value(old).map_err(|e| IgnitionError::Schema {
        version: version.to_string(),
        message: e.to_string(),
    })?;
    let mut cfg: Ignition = typed(&v, version)?;
    cfg.ignition.version = INTERNAL_VERSION.to_string();
    Ok(cfg)
}

fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Decode a `data:` URL (RFC 2397: percent-encoded or `;base64`), then apply `compression`
/// (absent, `""` or `gzip`). An empty source is an empty file.
pub fn decode_data_url(source: &str, compression: Option<&str>) -> Result<Vec<u8>, IgnitionError> {
    let data = if source.is_empty() {
        Vec::new()
    } else {
        let (is_base64, payload) = split_data_url(source)?;
        let bytes = Cow::from(percent_encoding::percent_decode_str(payload));
        if is_base64 {
            decode_base64(&bytes)?
        } else {
            bytes.into_owned()
        }
    };
    match compression {
        None | Some("") if data.len() as u64 > MAX_FILE_BYTES => Err(IgnitionError::TooLarge {
            limit: MAX_FILE_BYTES,
        }),
        None | Some("") => Ok(data),
        Some("gzip") => {
            let mut out = Vec::new();
            gunzip_bounded(&data, &mut out, MAX_FILE_BYTES)?;
            Ok(out)
        }
        Some(other) => Err(IgnitionError::Compression(other.to_string())),
    }
}

/// The same verdict as [`decode_data_url`] without materialising uncompressed contents, since
/// validation runs over every file of every MachineConfig. Returns the decoded size.
pub fn check_data_url(source: &str, compression: Option<&str>) -> Result<u64, IgnitionError> {
    check_data_url_into(source, compression, &mut Vec::new())
}

/// [`check_data_url`] decoding base64 into `scratch`, so one buffer serves every file.
fn check_data_url_into(
    source: &str,
    compression: Option<&str>,
    scratch: &mut Vec<u8>,
) -> Result<u64, IgnitionError> {
    if source.is_empty() {
        return decode_data_url(source, compression).map(|d| d.len() as u64);
    }
    let (is_base64, payload) = split_data_url(source)?;
    let gzip = match compression {
        None | Some("") => false,
        Some("gzip") => true,
        _ => return decode_data_url(source, compression).map(|d| d.len() as u64),
    };
    scratch.clear();
    let len = if is_base64 {
        // Base64 payloads rarely carry `%`; finding none is one fast scan.
        let bytes = if payload.contains('%') {
            Cow::from(percent_encoding::percent_decode_str(payload))
        } else {
            Cow::Borrowed(payload.as_bytes())
        };
        // Whitespace is rare too: only a failed strict decode pays for the lenient one,
        // which gives the same verdict and message as decoding up front.
        if BASE64.decode_vec(&*bytes, scratch).is_err() {
            *scratch = decode_base64(&bytes)?;
        }
        scratch.len() as u64
    } else if gzip {
        scratch.extend(percent_encoding::percent_decode_str(payload));
        scratch.len() as u64
    } else {
        percent_encoding::percent_decode_str(payload).count() as u64
    };
    if gzip {
        return gunzip_bounded(scratch, &mut std::io::sink(), MAX_FILE_BYTES);
    }
    if len > MAX_FILE_BYTES {
        return Err(IgnitionError::TooLarge {
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(len)
}

/// `data:[<mediatype>][;base64],<data>` → (is base64, raw data part).
fn split_data_url(source: &str) -> Result<(bool, &str), IgnitionError> {
    let rest = source.strip_prefix("data:").ok_or_else(|| {
        IgnitionError::DataUrl(format!("only data: URLs are supported, got {source:?}"))
    })?;
    let (header, payload) = rest
        .split_once(',')
        .ok_or_else(|| IgnitionError::DataUrl("data URL has no ',' separator".into()))?;
    let is_base64 = header
        .rsplit(';')
        .next()
        .is_some_and(|p| p.eq_ignore_ascii_case("base64"));
    Ok((is_base64, payload))
}

fn decode_base64(bytes: &[u8]) -> Result<Vec<u8>, IgnitionError> {
    let result = if bytes.iter().any(u8::is_ascii_whitespace) {
        let clean: Vec<u8> = bytes
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        BASE64.decode(clean)
    } else {
        BASE64.decode(bytes)
    };
    result.map_err(|e| IgnitionError::DataUrl(format!("invalid base64 data: {e}")))
}

/// Padding is optional in practice (hand-written MCs often drop it), so accept both.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// A rule a config breaks. The message is the part after the field path.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Violation {
    #[error("must be absolute and normalised: {0:?}")]
    PathNotNormalised(String),
    /// Upstream's text (bug 2038240: setuid/setgid/sticky bits are refused).
    #[error("invalid mode {} for {path}, cannot exceed 0777", go_octal(*.mode))]
    Mode { mode: i64, path: String },
    #[error("append is not supported: {0:?}")]
    Append(String),
    #[error("{0:?} is reserved for forcing a re-apply and may not be written by a MachineConfig")]
    ForceFile(String),
    #[error("{0}")]
    Source(IgnitionError),
    #[error("invalid unit name {name:?}: {reason}")]
    UnitName { name: String, reason: &'static str },
    #[error("invalid dropin name {0:?}: must end with \".conf\" and contain no '/'")]
    DropinName(String),
    #[error("duplicate entry {key:?}, already defined at {first}")]
    Duplicate { key: String, first: String },
    #[error("the decoded contents of {path} exceed the limit of {limit} bytes")]
    FileTooLarge { path: String, limit: u64 },
    /// The files decoded so far, this one included, exceed [`MAX_CONFIG_BYTES`].
    #[error("the decoded files of the config exceed the limit of {limit} bytes at {path}")]
    ConfigTooLarge { path: String, limit: u64 },
    /// The same for the rendered config that merges a pool's MachineConfigs.
    #[error("the decoded files of the rendered config exceed the limit of {limit} bytes at {path}")]
    RenderedTooLarge { path: String, limit: u64 },
}

/// `%#o` as Go prints it: a leading 0 for non-zero values.
fn go_octal(mode: i64) -> String {
    match mode {
        0 => "0".into(),
        m if m < 0 => format!("-0{:o}", m.unsigned_abs()),
        m => format!("0{m:o}"),
    }
}

/// A violation and where: `field` is relative to `spec.config`, e.g. `storage.files[2].path`.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{field}: {violation}")]
pub struct FieldError {
    pub field: String,
    pub violation: Violation,
}

fn fail<T>(field: String, violation: Violation) -> Result<T, FieldError> {
    Err(FieldError { field, violation })
}

/// Unit types systemd knows; anything else cannot be a unit file name.
pub const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".target",
    ".timer",
    ".path",
    ".mount",
    ".automount",
    ".swap",
    ".slice",
    ".scope",
    ".device",
];

/// Check the rules mco enforces on top of the schema. Returns the first violation, in document order.
pub fn validate(cfg: &Ignition) -> Result<(), FieldError> {
    validate_sized(cfg).map(drop)
}

/// [`validate`], returning the decoded size of each of `storage.files` (0 for a file without
/// contents), so a render can total the merged config without decoding every file again.
pub fn validate_sized(cfg: &Ignition) -> Result<Vec<u64>, FieldError> {
    let mut sizes = Vec::new();
    // Field paths are only formatted on failure: validation runs over every file of every MC.
    let dup = |list: &str, i: usize, key: &str, first: (&str, usize)| FieldError {
        field: format!(
            "{list}[{i}].{}",
            if list.starts_with("storage") {
                "path"
            } else {
                "name"
            }
        ),
        violation: Violation::Duplicate {
            key: key.to_string(),
            first: format!("{}[{}]", first.0, first.1),
        },
    };
    if let Some(storage) = &cfg.storage {
        // Files, links and directories share one namespace, as in Ignition's merge.
        let mut seen: HashMap<&str, (&str, usize)> = HashMap::with_capacity(
            storage.files.as_ref().map_or(0, Vec::len)
                + storage.links.as_ref().map_or(0, Vec::len)
                + storage.directories.as_ref().map_or(0, Vec::len),
        );
        let mut scratch = Vec::new();
        let mut total = 0u64;
        const FILES: &str = "storage.files";
        for (i, f) in storage.files.iter().flatten().enumerate() {
            check_path(FILES, i, &f.path)?;
            if let Some(first) = seen.insert(&f.path, (FILES, i)) {
                return Err(dup(FILES, i, &f.path, first));
            }
            if let Some(mode) = f.mode
                && !(0..=0o777).contains(&mode)
            {
                return fail(
                    format!("{FILES}[{i}].mode"),
                    Violation::Mode {
                        mode,
                        path: f.path.clone(),
                    },
                );
            }
            if f.append.as_ref().is_some_and(|a| !a.is_empty()) {
                return fail(
                    format!("{FILES}[{i}].append"),
                    Violation::Append(f.path.clone()),
                );
            }
            let Some(c) = &f.contents else {
                sizes.push(0);
                continue;
            };
            match check_data_url_into(
                c.source.as_deref().unwrap_or(""),
                c.compression.as_deref(),
                &mut scratch,
            ) {
                Ok(n) => {
                    sizes.push(n);
                    total += n;
                    if total > MAX_CONFIG_BYTES {
                        return fail(
                            format!("{FILES}[{i}].contents.source"),
                            Violation::ConfigTooLarge {
                                path: f.path.clone(),
                                limit: MAX_CONFIG_BYTES,
                            },
                        );
                    }
                }
                Err(IgnitionError::TooLarge { limit }) => {
                    return fail(
                        format!("{FILES}[{i}].contents.source"),
                        Violation::FileTooLarge {
                            path: f.path.clone(),
                            limit,
                        },
                    );
                }
                Err(e) => {
                    let field = match e {
                        IgnitionError::Compression(_) => "compression",
                        _ => "source",
                    };
                    return fail(
                        format!("{FILES}[{i}].contents.{field}"),
                        Violation::Source(e),
                    );
                }
            }
        }
        const LINKS: &str = "storage.links";
        for (i, l) in storage.links.iter().flatten().enumerate() {
            check_path(LINKS, i, &l.path)?;
            if let Some(first) = seen.insert(&l.path, (LINKS, i)) {
                return Err(dup(LINKS, i, &l.path, first));
            }
        }
        const DIRS: &str = "storage.directories";
        for (i, d) in storage.directories.iter().flatten().enumerate() {
            check_path(DIRS, i, &d.path)?;
            if let Some(first) = seen.insert(&d.path, (DIRS, i)) {
                return Err(dup(DIRS, i, &d.path, first));
            }
        }
    }
    if let Some(systemd) = &cfg.systemd {
        const UNITS: &str = "systemd.units";
        let mut seen: HashMap<&str, (&str, usize)> = HashMap::new();
        for (i, u) in systemd.units.iter().flatten().enumerate() {
            if let Err(reason) = check_unit_name(&u.name) {
                return fail(
                    format!("{UNITS}[{i}].name"),
                    Violation::UnitName {
                        name: u.name.clone(),
                        reason,
                    },
                );
            }
            if let Some(first) = seen.insert(&u.name, (UNITS, i)) {
                return Err(dup(UNITS, i, &u.name, first));
            }
            let mut dropins: HashMap<&str, usize> = HashMap::new();
            for (j, d) in u.dropins.iter().flatten().enumerate() {
                if !d.name.ends_with(".conf") || d.name.len() <= 5 || d.name.contains('/') {
                    return fail(
                        format!("{UNITS}[{i}].dropins[{j}].name"),
                        Violation::DropinName(d.name.clone()),
                    );
                }
                if let Some(first) = dropins.insert(&d.name, j) {
                    return fail(
                        format!("{UNITS}[{i}].dropins[{j}].name"),
                        Violation::Duplicate {
                            key: d.name.clone(),
                            first: format!("{UNITS}[{i}].dropins[{first}]"),
                        },
                    );
                }
            }
        }
    }
    if let Some(passwd) = &cfg.passwd {
        const USERS: &str = "passwd.users";
        let mut seen: HashMap<&str, (&str, usize)> = HashMap::new();
        for (i, u) in passwd.users.iter().flatten().enumerate() {
            if let Some(first) = seen.insert(&u.name, (USERS, i)) {
                return Err(dup(USERS, i, &u.name, first));
            }
        }
    }
    Ok(sizes)
}

fn check_path(list: &str, i: usize, path: &str) -> Result<(), FieldError> {
    if !is_normalised_absolute(path) {
        return fail(
            format!("{list}[{i}].path"),
            Violation::PathNotNormalised(path.to_string()),
        );
    }
    if path == mco_api::paths::FORCE_FILE {
        return fail(
            format!("{list}[{i}].path"),
            Violation::ForceFile(path.to_string()),
        );
    }
    Ok(())
}

/// Absolute, and equal to its own lexical clean form: no `.`/`..` components, no `//`, no trailing `/`.
pub fn is_normalised_absolute(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    rest.is_empty()
        || rest
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// systemd's unit name rules: a known type suffix, a non-empty prefix of `[A-Za-z0-9:_.\-@\\]`,
/// at most one `@` (template/instance), at most 255 bytes.
pub fn check_unit_name(name: &str) -> Result<(), &'static str> {
    if name.len() > 255 {
        return Err("longer than 255 characters");
    }
    let Some(dot) = name.rfind('.') else {
        return Err("missing unit type suffix");
    };
    if !UNIT_SUFFIXES.contains(&&name[dot..]) {
        return Err(
            "unknown unit type suffix (want .service, .socket, .target, .timer, .path, .mount, .automount, .swap, .slice, .scope or .device)",
        );
    }
    let prefix = &name[..dot];
    if prefix.is_empty() {
        return Err("empty name before the type suffix");
    }
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b":_.-@\\".contains(&b))
    {
        return Err("contains characters other than [A-Za-z0-9:_.-@\\]");
    }
    if prefix.starts_with('@') || prefix.matches('@').count() > 1 {
        return Err("misplaced '@'");
    }
    Ok(())
}

/// Spec 2.2, just enough of it to translate what mco can apply.
mod v2_2 {
    use super::{Ignition, IgnitionError};
    use ignition_config::v3_5 as v3;
    use serde::Deserialize;

    #[derive(Deserialize, Default)]
    #[serde(default)]
    pub struct Config {
        ignition: IgnitionSection,
        storage: Storage,
        systemd: Systemd,
        passwd: Passwd,
        networkd: Networkd,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct IgnitionSection {
        config: IgnConfig,
        timeouts: Timeouts,
        security: Security,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct IgnConfig {
        append: Vec<Reference>,
        replace: Option<Reference>,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default)]
    struct Reference {
        source: Option<String>,
        verification: Verification,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default)]
    struct Verification {
        hash: Option<String>,
    }

    #[derive(Deserialize, Default)]
    #[serde(default, rename_all = "camelCase")]
    struct Timeouts {
        http_response_headers: Option<i64>,
        http_total: Option<i64>,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Security {
        tls: Tls,
    }

    #[derive(Deserialize, Default)]
    #[serde(default, rename_all = "camelCase")]
    struct Tls {
        certificate_authorities: Vec<Reference>,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Storage {
        files: Vec<File>,
        directories: Vec<Directory>,
        links: Vec<Link>,
        disks: Vec<serde_json::Value>,
        raid: Vec<serde_json::Value>,
        filesystems: Vec<serde_json::Value>,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default)]
    struct Owner {
        id: Option<i64>,
        name: Option<String>,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default)]
    struct File {
        filesystem: Option<String>,
        path: String,
        contents: Contents,
        mode: Option<i64>,
        user: Option<Owner>,
        group: Option<Owner>,
        overwrite: Option<bool>,
        append: bool,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default)]
    struct Contents {
        compression: Option<String>,
        source: Option<String>,
        verification: Verification,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Directory {
        filesystem: Option<String>,
        path: String,
        mode: Option<i64>,
        user: Option<Owner>,
        group: Option<Owner>,
        overwrite: Option<bool>,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Link {
        filesystem: Option<String>,
        path: String,
        target: Option<String>,
        hard: Option<bool>,
        user: Option<Owner>,
        group: Option<Owner>,
        overwrite: Option<bool>,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Systemd {
        units: Vec<Unit>,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default)]
    struct Unit {
        name: String,
        enabled: Option<bool>,
        enable: Option<bool>,
        mask: Option<bool>,
        contents: Option<String>,
        dropins: Vec<Dropin>,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default)]
    struct Dropin {
        name: String,
        contents: Option<String>,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Passwd {
        users: Vec<User>,
        groups: Vec<serde_json::Value>,
    }

    #[derive(Deserialize, Default, Clone)]
    #[serde(default, rename_all = "camelCase")]
    struct User {
        name: String,
        password_hash: Option<String>,
        ssh_authorized_keys: Vec<String>,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Networkd {
        units: Vec<serde_json::Value>,
    }

    fn err(msg: impl Into<String>) -> IgnitionError {
        IgnitionError::Translate(msg.into())
    }

    /// Upstream maps only the `root` filesystem (to `/`); anything else has no spec 3 meaning here.
    fn on_root(kind: &str, path: &str, fs: Option<&str>) -> Result<(), IgnitionError> {
        match fs {
            Some("root") => Ok(()),
            Some(other) => Err(err(format!(
                "{kind} {path:?} is on filesystem {other:?}; only \"root\" can be translated"
            ))),
            None => Err(err(format!(
                "{kind} {path:?} has no filesystem; spec 2.2 requires one (use \"root\")"
            ))),
        }
    }

    fn resource(r: Reference) -> v3::Resource {
        v3::Resource {
            compression: None,
            http_headers: None,
            source: r.source,
            verification: r
                .verification
                .hash
                .map(|h| v3::Verification { hash: Some(h) }),
        }
    }

    fn node_user(o: Option<Owner>) -> Option<v3::NodeUser> {
        o.filter(|o| o.id.is_some() || o.name.is_some())
            .map(|o| v3::NodeUser {
                id: o.id,
                name: o.name,
            })
    }

    fn node_group(o: Option<Owner>) -> Option<v3::NodeGroup> {
        o.filter(|o| o.id.is_some() || o.name.is_some())
            .map(|o| v3::NodeGroup {
                id: o.id,
                name: o.name,
            })
    }

    /// Spec 3 forbids the duplicates spec 2 allowed; collapse them the way upstream does.
    fn dedupe(cfg: &mut Config) -> Result<(), IgnitionError> {
        let mut files: Vec<File> = Vec::new();
        for f in cfg.storage.files.drain(..).rev() {
            if !files.iter().any(|x| x.path == f.path) {
                files.push(f);
            }
        }
        files.reverse();
        cfg.storage.files = files;

        let mut units: Vec<Unit> = Vec::new();
        for u in cfg.systemd.units.drain(..).rev() {
            if let Some(kept) = units.iter_mut().find(|x| x.name == u.name) {
                for d in u.dropins {
                    if !kept.dropins.iter().any(|x| x.name == d.name) {
                        kept.dropins.push(d);
                    }
                }
            } else {
                units.push(u);
            }
        }
        units.reverse();
        cfg.systemd.units = units;

        if let Some(bad) = cfg.passwd.users.iter().find(|u| u.name != "core") {
            return Err(err(format!(
                "unexpected user with name: {}. Only core user is supported",
                bad.name
            )));
        }
        if let Some(mut core) = cfg.passwd.users.last().cloned() {
            let mut keys: Vec<String> = Vec::new();
            for u in cfg.passwd.users.iter().rev() {
                for k in &u.ssh_authorized_keys {
                    if !keys.contains(k) {
                        keys.push(k.clone());
                    }
                }
            }
            core.ssh_authorized_keys = keys;
            cfg.passwd.users = vec![core];
        }
        Ok(())
    }

    pub fn translate(mut cfg: Config) -> Result<Ignition, IgnitionError> {
        if !cfg.networkd.units.is_empty() {
            return Err(err(
                "networkd units have no spec 3 equivalent; write NetworkManager files instead",
            ));
        }
        for (what, list) in [
            ("disks", &cfg.storage.disks),
            ("raid", &cfg.storage.raid),
            ("filesystems", &cfg.storage.filesystems),
        ] {
            if !list.is_empty() {
                return Err(err(format!(
                    "storage.{what} cannot be translated; rewrite this MachineConfig in spec 3"
                )));
            }
        }
        if !cfg.passwd.groups.is_empty() {
            return Err(err(
                "passwd.groups cannot be translated; rewrite this MachineConfig in spec 3",
            ));
        }
        dedupe(&mut cfg)?;

        let mut out = super::empty();
        let ign = &mut out.ignition;
        if !cfg.ignition.config.append.is_empty() || cfg.ignition.config.replace.is_some() {
            ign.config = Some(v3::IgnitionConfig {
                merge: Some(
                    cfg.ignition
                        .config
                        .append
                        .into_iter()
                        .map(resource)
                        .collect(),
                )
                .filter(|v: &Vec<_>| !v.is_empty()),
                replace: cfg.ignition.config.replace.map(resource),
            });
        }
        let t = cfg.ignition.timeouts;
        if t.http_response_headers.is_some() || t.http_total.is_some() {
            ign.timeouts = Some(v3::Timeouts {
                http_response_headers: t.http_response_headers,
                http_total: t.http_total,
            });
        }
        let cas = cfg.ignition.security.tls.certificate_authorities;
        if !cas.is_empty() {
            ign.security = Some(v3::Security {
                tls: Some(v3::SecurityTls {
                    certificate_authorities: Some(cas.into_iter().map(resource).collect()),
                }),
            });
        }

        let mut storage = v3::Storage::default();
        let mut files = Vec::new();
        for f in cfg.storage.files {
            on_root("file", &f.path, f.filesystem.as_deref())?;
            let contents = v3::Resource {
                compression: f.contents.compression.filter(|c| !c.is_empty()),
                http_headers: None,
                source: f.contents.source,
                verification: f
                    .contents
                    .verification
                    .hash
                    .map(|h| v3::Verification { hash: Some(h) }),
            };
            let (contents, append) = if f.append {
                (None, Some(vec![contents]))
            } else {
                (Some(contents), None)
            };
            files.push(v3::File {
                append,
                contents,
                group: node_group(f.group),
                mode: f.mode,
                overwrite: f.overwrite,
                path: f.path,
                user: node_user(f.user),
            });
        }
        let mut dirs = Vec::new();
        for d in cfg.storage.directories {
            on_root("directory", &d.path, d.filesystem.as_deref())?;
            dirs.push(v3::Directory {
                group: node_group(d.group),
                mode: d.mode,
                overwrite: d.overwrite,
                path: d.path,
                user: node_user(d.user),
            });
        }
        let mut links = Vec::new();
        for l in cfg.storage.links {
            on_root("link", &l.path, l.filesystem.as_deref())?;
            links.push(v3::Link {
                group: node_group(l.group),
                hard: l.hard,
                overwrite: l.overwrite,
                path: l.path,
                target: l.target,
                user: node_user(l.user),
            });
        }
        if !files.is_empty() {
            storage.files = Some(files);
        }
        if !dirs.is_empty() {
            storage.directories = Some(dirs);
        }
        if !links.is_empty() {
            storage.links = Some(links);
        }
        if storage != v3::Storage::default() {
            out.storage = Some(storage);
        }

        if !cfg.systemd.units.is_empty() {
            let units = cfg
                .systemd
                .units
                .into_iter()
                .map(|u| v3::Unit {
                    contents: u.contents,
                    dropins: Some(
                        u.dropins
                            .into_iter()
                            .map(|d| v3::Dropin {
                                contents: d.contents,
                                name: d.name,
                            })
                            .collect(),
                    )
                    .filter(|v: &Vec<_>| !v.is_empty()),
                    enabled: u.enabled.or(u.enable),
                    mask: u.mask,
                    name: u.name,
                })
                .collect();
            out.systemd = Some(v3::Systemd { units: Some(units) });
        }

        if !cfg.passwd.users.is_empty() {
            let users = cfg
                .passwd
                .users
                .into_iter()
                .map(|u| {
                    let mut user = v3::User::new(u.name);
                    user.password_hash = u.password_hash;
                    user.ssh_authorized_keys =
                        Some(u.ssh_authorized_keys).filter(|k| !k.is_empty());
                    user
                })
                .collect();
            out.passwd = Some(v3::Passwd {
                groups: None,
                users: Some(users),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_octal_matches_go() {
        assert_eq!(go_octal(0o4755), "04755");
        assert_eq!(go_octal(0), "0");
    }

    #[test]
    fn semver_shape() {
        assert!(is_semver("3.2.0"));
        assert!(is_semver("3.0.0-experimental"));
        assert!(!is_semver("3.2"));
        assert!(!is_semver("x"));
    }

    /// A 3.5 config using every field added since 3.0.
    fn everything() -> Value {
        let res = json!({"source": "data:,x", "compression": "", "httpHeaders": [{"name": "a", "value": "b"}], "verification": {"hash": "sha512-00"}});
        json!({
            "ignition": {
                "version": "3.5.0",
                "config": {"merge": [res.clone()], "replace": res.clone()},
                "proxy": {"httpProxy": "http://p", "httpsProxy": "https://p", "noProxy": ["x"]},
                "security": {"tls": {"certificateAuthorities": [res.clone()]}},
                "timeouts": {"httpTotal": 5}
            },
            "kernelArguments": {"shouldExist": ["a"], "shouldNotExist": ["b"]},
            "passwd": {
                "users": [{"name": "core", "shouldExist": true, "sshAuthorizedKeys": ["k"]}],
                "groups": [{"name": "g", "shouldExist": true}]
            },
            "storage": {
                "disks": [{"device": "/dev/sda", "partitions": [{"label": "p", "resize": true}]}],
                "filesystems": [{"device": "/dev/sda1", "mountOptions": ["ro"], "format": "xfs"}],
                "files": [{"path": "/f", "contents": res.clone(), "append": [res.clone()]}],
                "luks": [{"name": "l", "device": "/dev/sdb", "discard": true, "openOptions": ["o"],
                    "cex": {"enabled": true},
                    "clevis": {"tang": [{"url": "http://t", "thumbprint": "x", "advertisement": "{}"}]},
                    "keyFile": res}]
            },
            "systemd": {"units": [{"name": "u.service", "enabled": true}]}
        })
    }

    #[test]
    fn stripping_matches_reading_the_declared_version() {
        use ignition_config as ic;
        for (version, reference) in [
            ("3.0.0", up::<ic::v3_0::Config> as fn(&Value, &str) -> _),
            ("3.1.0", up::<ic::v3_1::Config>),
            ("3.2.0", up::<ic::v3_2::Config>),
            ("3.3.0", up::<ic::v3_3::Config>),
            ("3.4.0", up::<ic::v3_4::Config>),
            ("3.5.0", up::<ic::v3_5::Config>),
        ] {
            let mut raw = everything();
            raw["ignition"]["version"] = json!(version);
            assert_eq!(
                parse(&raw).unwrap(),
                reference(&raw, version).unwrap(),
                "{version}"
            );
        }
    }

    #[test]
    fn reading_text_matches_reading_the_value() {
        for version in ["3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"] {
            let mut raw = everything();
            raw["ignition"]["version"] = json!(version);
            let text = serde_json::value::to_raw_value(&raw).unwrap();
            assert_eq!(parse_raw(&text).unwrap(), parse(&raw).unwrap(), "{version}");
        }
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn gunzip_stops_at_the_limit() {
        let data = gzip(&[7u8; 4096]);
        let mut out = Vec::new();
        assert_eq!(gunzip_bounded(&data, &mut out, 4096).unwrap(), 4096);
        assert_eq!(out, [7u8; 4096]);
        let mut out = Vec::new();
        assert_eq!(
            gunzip_bounded(&data, &mut out, 4095).unwrap_err(),
            IgnitionError::TooLarge { limit: 4095 }
        );
        // It stopped one byte past the limit instead of inflating everything.
        assert_eq!(out.len(), 4096);
    }

    #[test]
    fn a_gzip_bomb_is_refused_by_every_decoder() {
        // 100 MiB + 1 of zeros is about 100 KiB of gzip.
        let mut zeros = vec![0u8; MAX_FILE_BYTES as usize + 1];
        let bomb = gzip(&zeros);
        use base64::Engine as _;
        let src = format!(
            "data:;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&bomb)
        );
        let over = IgnitionError::TooLarge {
            limit: MAX_FILE_BYTES,
        };
        assert_eq!(decode_data_url(&src, Some("gzip")).unwrap_err(), over);
        assert_eq!(check_data_url(&src, Some("gzip")).unwrap_err(), over);
        zeros.pop();
        let at = gzip(&zeros);
        let src = format!(
            "data:;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&at)
        );
        assert_eq!(check_data_url(&src, Some("gzip")).unwrap(), MAX_FILE_BYTES);
    }

    #[test]
    fn checking_a_data_url_gives_decodings_verdict() {
        for source in [
            "data:;base64,aGVsbG8=",
            "data:;base64,aGVsbG8",
            "data:;base64,aGVs%20bG8=",
            "data:;base64,aGVsbG8%3D",
            "data:;base64,aGVs bG8=",
            "data:;base64,aGVs\nbG8=",
            "data:;base64,aGV sb!G8=",
            "data:;base64,%%%",
            "data:;base64,a",
            "data:,a%20b",
            "data:text/plain,%zz",
            "",
            "https://example.com/x",
        ] {
            let decoded = decode_data_url(source, None).map(|d| d.len() as u64);
            assert_eq!(check_data_url(source, None), decoded, "{source:?}");
        }
        assert!(check_data_url("data:;base64,aGVs bG8=", None).is_ok());
        assert!(check_data_url("data:;base64,aGV sb!G8=", None).is_err());
    }

    #[test]
    fn empty_is_valid() {
        assert_eq!(parse(&Value::Null).unwrap(), empty());
        assert_eq!(parse(&json!({})).unwrap(), empty());
    }
}
