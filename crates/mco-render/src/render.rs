//! Rendering a pool: validate its MachineConfigs, merge them, and name the result by its content.
//!
//! The rendered spec is canonical — Ignition entries sorted by path/name (see [`crate::merge`]),
//! object keys sorted, `null`s dropped — so the name `rendered-<pool>-<32 hex>` depends on the
//! merged spec alone, never on the order MCs with distinct names were listed in.
//!
//! The hash is the first 16 bytes of SHA-256 over the canonical JSON of the spec (every field,
//! sorted keys, behind a format tag so a future change of encoding changes every name). Upstream uses MD5
//! over a fixed salt and Go's YAML encoding of the spec; mco's names are equally opaque and
//! deterministic but do not match upstream's byte for byte (nothing depends on that).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use mco_api::constants::annotations;
use mco_api::{ControllerConfigSpec, MachineConfig, MachineConfigPool, MachineConfigSpec};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::ignition::{self, Ignition, IgnitionError, Violation};
use crate::merge::{self, KERNEL_TYPE_64K_PAGES, KERNEL_TYPE_DEFAULT, KERNEL_TYPE_REALTIME};

/// Upstream's supported extensions with their packages; the names are validated against it.
pub use crate::extensions::SUPPORTED_EXTENSIONS;

/// The API version of every object mco renders or references.
pub const API_VERSION: &str = "machineconfiguration.openshift.io/v1";

/// A MachineConfig spec field outside Ignition that breaks a rule. Texts are upstream's.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SpecViolation {
    #[error("kernelType={0} is invalid")]
    KernelType(String),
    #[error("invalid extensions found: [{}]", .0.join(" "))]
    Extensions(Vec<String>),
    #[error("installing kernel-devel extension is not supported with kernelType: {0}")]
    KernelDevel(String),
}

/// Why a pool could not be rendered. MachineConfig errors name the MC and the field.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RenderError {
    /// `spec.config` could not be parsed or translated.
    #[error("MachineConfig {mc:?}: {field}: {error}")]
    Parse {
        mc: String,
        field: String,
        error: IgnitionError,
    },
    /// `spec.config` parsed but breaks a rule.
    #[error("MachineConfig {mc:?}: {field}: {violation}")]
    Config {
        mc: String,
        field: String,
        violation: Violation,
    },
    /// A field outside `spec.config` breaks a rule.
    #[error("MachineConfig {mc:?}: {field}: {violation}")]
    Spec {
        mc: String,
        field: String,
        violation: SpecViolation,
    },
    #[error("MachineConfigPool {pool:?}: {error}")]
    Selector {
        pool: String,
        error: merge::SelectError,
    },
    #[error("MachineConfigPool {pool:?}: no MachineConfigs found matching selector {selector}")]
    NoneSelected { pool: String, selector: String },
    #[error("MachineConfigPool {pool:?}: encoding the rendered config: {message}")]
    Encode { pool: String, message: String },
}

impl RenderError {
    /// The MachineConfig the error is about, if it is about one.
    pub fn machine_config(&self) -> Option<&str> {
        match self {
            Self::Parse { mc, .. } | Self::Config { mc, .. } | Self::Spec { mc, .. } => Some(mc),
            _ => None,
        }
    }
}

/// A rendered config and what it was rendered from.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Named `rendered-<pool>-<hash>`; no owner reference (see [`owner_reference`]).
    pub machine_config: MachineConfig,
    /// The input MCs in merge order: the pool's `spec.configuration.source`.
    pub source: Vec<ObjectReference>,
}

fn mc_name(mc: &MachineConfig) -> String {
    mc.metadata.name.clone().unwrap_or_default()
}

/// Validate one MachineConfig and return its Ignition in the internal version.
pub fn validate_machine_config(mc: &MachineConfig) -> Result<Ignition, RenderError> {
    validate_sized(mc).map(|(cfg, _)| cfg)
}

/// [`validate_machine_config`] for a MachineConfig whose `spec.config` is still JSON text.
pub fn validate_raw_machine_config(mc: &RawMachineConfig<'_>) -> Result<Ignition, RenderError> {
    validate_raw_sized(mc).map(|(cfg, _)| cfg)
}

/// A validated Ignition with the decoded size of each of its `storage.files`.
type Checked = (Ignition, Vec<u64>);

fn validate_sized(mc: &MachineConfig) -> Result<Checked, RenderError> {
    let name = mc_name(mc);
    check_spec(&name, &mc.spec)?;
    let cfg = match &mc.spec.config {
        None => ignition::empty(),
        Some(raw) => ignition::parse(raw).map_err(|e| parse_error(&name, e))?,
    };
    check_config(&name, cfg)
}

fn validate_raw_sized(mc: &RawMachineConfig<'_>) -> Result<Checked, RenderError> {
    let name = mc_name(&mc.machine_config);
    check_spec(&name, &mc.machine_config.spec)?;
    let cfg = match mc.config {
        None => ignition::empty(),
        Some(raw) => ignition::parse_raw(raw).map_err(|e| parse_error(&name, e))?,
    };
    check_config(&name, cfg)
}

/// The rules on the spec fields outside `spec.config`.
fn check_spec(name: &str, spec: &MachineConfigSpec) -> Result<(), RenderError> {
    let spec_err = |field: &str, violation| RenderError::Spec {
        mc: name.to_string(),
        field: field.into(),
        violation,
    };
    let kt = spec.kernel_type.as_str();
    if ![
        "",
        KERNEL_TYPE_DEFAULT,
        KERNEL_TYPE_REALTIME,
        KERNEL_TYPE_64K_PAGES,
    ]
    .contains(&kt)
    {
        return Err(spec_err(
            "spec.kernelType",
            SpecViolation::KernelType(kt.into()),
        ));
    }
    let exts = spec.extensions.as_deref().unwrap_or_default();
    let bad: Vec<String> = exts
        .iter()
        .filter(|e| !crate::extensions::is_supported(e))
        .cloned()
        .collect();
    if !bad.is_empty() {
        return Err(spec_err("spec.extensions", SpecViolation::Extensions(bad)));
    }
    if exts.iter().any(|e| e == "kernel-devel") && !matches!(kt, "" | KERNEL_TYPE_DEFAULT) {
        return Err(spec_err(
            "spec.extensions",
            SpecViolation::KernelDevel(kt.into()),
        ));
    }
    Ok(())
}

fn parse_error(name: &str, error: IgnitionError) -> RenderError {
    let field = match error {
        IgnitionError::InvalidVersion(_) | IgnitionError::UnknownVersion(_) => {
            "spec.config.ignition.version"
        }
        _ => "spec.config",
    };
    RenderError::Parse {
        mc: name.to_string(),
        field: field.into(),
        error,
    }
}

fn check_config(name: &str, cfg: Ignition) -> Result<Checked, RenderError> {
    let sizes = ignition::validate_sized(&cfg).map_err(|e| RenderError::Config {
        mc: name.to_string(),
        field: format!("spec.config.{}", e.field),
        violation: e.violation,
    })?;
    Ok((cfg, sizes))
}

/// Render a pool from all MachineConfigs known (the pool's selector picks its own).
pub fn render_pool(
    pool: &MachineConfigPool,
    mcs: &[MachineConfig],
    cc: &ControllerConfigSpec,
    controller_version: &str,
) -> Result<Rendered, RenderError> {
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let mut selected = select(pool, &pool_name, mcs, |mc| mc)?;
    merge::order(&mut selected);
    render_ordered(&pool_name, &selected, cc, controller_version)
}

/// A MachineConfig read from its JSON text with `spec.config` kept as text, so that rendering
/// reads each config once, straight into typed Ignition, rather than into a `Value` tree and then
/// again into typed Ignition. For callers that hold the objects' JSON (files, stored objects).
#[derive(Debug, Clone)]
pub struct RawMachineConfig<'a> {
    /// The object without its config: `spec.config` is always `None` here.
    pub machine_config: MachineConfig,
    /// `spec.config` as it appears in the text; `None` when absent or `null`.
    pub config: Option<&'a RawValue>,
}

/// The wire form of a MachineConfig with the config left unread. Field names and defaults mirror
/// `mco_api::MachineConfigSpec` (a test holds the two together).
#[derive(Deserialize)]
struct RawDoc<'a> {
    metadata: ObjectMeta,
    #[serde(borrow)]
    spec: RawSpec<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpec<'a> {
    #[serde(rename = "osImageURL", default)]
    os_image_url: String,
    #[serde(rename = "baseOSExtensionsContainerImage", default)]
    base_os_extensions_container_image: String,
    #[serde(default, borrow)]
    config: Option<&'a RawValue>,
    #[serde(default)]
    kernel_arguments: Option<Vec<String>>,
    #[serde(default)]
    extensions: Option<Vec<String>>,
    #[serde(default)]
    fips: bool,
    #[serde(default)]
    kernel_type: String,
}

impl<'a> RawMachineConfig<'a> {
    /// Read a MachineConfig's JSON text; the config stays borrowed from `json`.
    pub fn from_slice(json: &'a [u8]) -> Result<Self, serde_json::Error> {
        let doc: RawDoc<'a> = serde_json::from_slice(json)?;
        let s = doc.spec;
        Ok(Self {
            machine_config: MachineConfig {
                metadata: doc.metadata,
                spec: MachineConfigSpec {
                    os_image_url: s.os_image_url,
                    base_os_extensions_container_image: s.base_os_extensions_container_image,
                    config: None,
                    kernel_arguments: s.kernel_arguments,
                    extensions: s.extensions,
                    fips: s.fips,
                    kernel_type: s.kernel_type,
                },
            },
            config: s.config,
        })
    }
}

/// [`render_pool`] over MachineConfigs read from JSON text: the same selection, order, rules,
/// errors and rendered config (and so the same name), with each config parsed only once.
pub fn render_pool_raw(
    pool: &MachineConfigPool,
    mcs: &[RawMachineConfig<'_>],
    cc: &ControllerConfigSpec,
    controller_version: &str,
) -> Result<Rendered, RenderError> {
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let mut selected = select(pool, &pool_name, mcs, |mc| &mc.machine_config)?;
    merge::order_by(&mut selected, |mc| &mc.machine_config);
    let ordered: Vec<&MachineConfig> = selected.iter().map(|mc| &mc.machine_config).collect();
    render_with(&pool_name, &ordered, cc, controller_version, |i| {
        validate_raw_sized(selected[i])
    })
}

/// The path (and its MC's index) of the merged file at which the decoded total passes
/// [`ignition::MAX_CONFIG_BYTES`]: each MC stays under it, their merge may not.
fn first_past_total(
    merged: &Ignition,
    owner: &HashMap<String, (usize, u64)>,
) -> Option<(String, usize)> {
    let mut total = 0u64;
    let files = merged.storage.as_ref().and_then(|s| s.files.as_ref());
    for f in files.into_iter().flatten() {
        // Every merged file came from some MC.
        let Some(&(i, size)) = owner.get(&f.path) else {
            continue;
        };
        total += size;
        if total > ignition::MAX_CONFIG_BYTES {
            return Some((f.path.clone(), i));
        }
    }
    None
}

/// The pool's MachineConfigs; none at all is an error.
fn select<'a, T>(
    pool: &MachineConfigPool,
    pool_name: &str,
    mcs: &'a [T],
    mc: impl Fn(&T) -> &MachineConfig,
) -> Result<Vec<&'a T>, RenderError> {
    let selector = pool.spec.machine_config_selector.as_ref();
    let selected = merge::select_by(selector, mcs, mc).map_err(|error| RenderError::Selector {
        pool: pool_name.to_string(),
        error,
    })?;
    if selected.is_empty() {
        return Err(RenderError::NoneSelected {
            pool: pool_name.to_string(),
            selector: describe_selector(selector),
        });
    }
    Ok(selected)
}

/// Render MCs that are already selected and in merge order.
pub fn render_ordered(
    pool_name: &str,
    ordered: &[&MachineConfig],
    cc: &ControllerConfigSpec,
    controller_version: &str,
) -> Result<Rendered, RenderError> {
    render_with(pool_name, ordered, cc, controller_version, |i| {
        validate_sized(ordered[i])
    })
}

/// The render proper; `config(i)` validates the `i`th MC of `ordered` and returns its Ignition
/// with its files' decoded sizes.
fn render_with(
    pool_name: &str,
    ordered: &[&MachineConfig],
    cc: &ControllerConfigSpec,
    controller_version: &str,
    config: impl Fn(usize) -> Result<Checked, RenderError>,
) -> Result<Rendered, RenderError> {
    let mut merger = merge::Merger::default();
    // Which MC a path's file comes from and its decoded size (the last one wins, as in the
    // merge): the merged total is summed from these, not by decoding every file again.
    let mut owner: HashMap<String, (usize, u64)> = HashMap::new();
    for i in 0..ordered.len() {
        let (cfg, sizes) = config(i)?;
        let files = cfg.storage.as_ref().and_then(|s| s.files.as_ref());
        for (f, size) in files.into_iter().flatten().zip(sizes) {
            owner.insert(f.path.clone(), (i, size));
        }
        merger.add(cfg);
    }
    let merged = merger.finish();
    if let Some((path, i)) = first_past_total(&merged, &owner) {
        return Err(RenderError::Config {
            mc: mc_name(ordered[i]),
            field: "spec.config.storage.files".into(),
            violation: Violation::RenderedTooLarge {
                path,
                limit: ignition::MAX_CONFIG_BYTES,
            },
        });
    }
    let fields = merge::merge_fields(ordered, cc);
    if fields.kernel_type != KERNEL_TYPE_DEFAULT
        && let Some(mc) = ordered.iter().find(|mc| {
            mc.spec
                .extensions
                .iter()
                .flatten()
                .any(|e| e == "kernel-devel")
        })
    {
        return Err(RenderError::Spec {
            mc: mc_name(mc),
            field: "spec.extensions".into(),
            violation: SpecViolation::KernelDevel(fields.kernel_type),
        });
    }
    let encode = |e: serde_json::Error| RenderError::Encode {
        pool: pool_name.to_string(),
        message: e.to_string(),
    };
    let spec = MachineConfigSpec {
        os_image_url: fields.os_image_url,
        base_os_extensions_container_image: fields.base_os_extensions_container_image,
        config: Some(into_canonical_config(merged).map_err(encode)?),
        kernel_arguments: Some(fields.kernel_arguments),
        extensions: Some(fields.extensions),
        fips: fields.fips,
        kernel_type: fields.kernel_type,
    };
    // Built canonical just above, so the name skips re-checking it.
    let name = digest_name(pool_name, &spec, true).map_err(encode)?;
    let mut annots = BTreeMap::new();
    annots.insert(
        annotations::GENERATED_BY_CONTROLLER_VERSION.to_string(),
        controller_version.to_string(),
    );
    if fields.os_image_url_overridden {
        annots.insert(
            annotations::OS_IMAGE_URL_OVERRIDDEN.to_string(),
            "true".to_string(),
        );
    }
    let machine_config = MachineConfig {
        metadata: ObjectMeta {
            name: Some(name),
            annotations: Some(annots),
            ..Default::default()
        },
        spec,
    };
    let source = ordered.iter().map(|mc| source_reference(mc)).collect();
    Ok(Rendered {
        machine_config,
        source,
    })
}

/// `{apiVersion, kind: MachineConfig, name}`, as upstream lists inputs in `spec.configuration.source`.
pub fn source_reference(mc: &MachineConfig) -> ObjectReference {
    ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some("MachineConfig".into()),
        name: Some(mc_name(mc)),
        ..Default::default()
    }
}

/// The controller reference a rendered MC carries to its pool, so deleting the pool collects it.
pub fn owner_reference(pool: &MachineConfigPool) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.into(),
        kind: "MachineConfigPool".into(),
        name: pool.metadata.name.clone().unwrap_or_default(),
        uid: pool.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The merged Ignition as the canonical JSON object stored in the rendered spec.
pub fn canonical_config(cfg: &Ignition) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(cfg)?;
    canonicalize(&mut v);
    Ok(v)
}

/// [`canonical_config`], consuming the config: files — nearly all of a big config — are moved into
/// the JSON tree in canonical form instead of copied and then cleaned.
pub fn into_canonical_config(mut cfg: Ignition) -> Result<Value, serde_json::Error> {
    let files = cfg.storage.as_mut().and_then(|s| s.files.take());
    let mut v = serde_json::to_value(&cfg)?;
    canonicalize(&mut v);
    if let Some(files) = files {
        let Some(storage) = v.get_mut("storage").and_then(Value::as_object_mut) else {
            return Ok(v);
        };
        storage.insert(
            "files".into(),
            Value::Array(files.into_iter().map(file_value).collect()),
        );
        storage.sort_keys();
    }
    Ok(v)
}

/// Builds an object from members given in key order, skipping absent ones.
fn object<const N: usize>(members: [(&str, Option<Value>); N]) -> Value {
    // Sized up front: collecting from a filter grows the map (and its index) several times, once
    // per file of the rendered config.
    let mut map =
        serde_json::Map::with_capacity(members.iter().filter(|(_, v)| v.is_some()).count());
    for (k, v) in members {
        if let Some(v) = v {
            map.insert(k.to_string(), v);
        }
    }
    Value::Object(map)
}

fn file_value(f: ignition_config::v3_5::File) -> Value {
    object([
        (
            "append",
            f.append
                .map(|a| Value::Array(a.into_iter().map(resource_value).collect())),
        ),
        ("contents", f.contents.map(resource_value)),
        (
            "group",
            f.group.map(|g| {
                object([
                    ("id", g.id.map(Value::from)),
                    ("name", g.name.map(Value::String)),
                ])
            }),
        ),
        ("mode", f.mode.map(Value::from)),
        ("overwrite", f.overwrite.map(Value::Bool)),
        ("path", Some(Value::String(f.path))),
        (
            "user",
            f.user.map(|u| {
                object([
                    ("id", u.id.map(Value::from)),
                    ("name", u.name.map(Value::String)),
                ])
            }),
        ),
    ])
}

fn resource_value(r: ignition_config::v3_5::Resource) -> Value {
    object([
        ("compression", r.compression.map(Value::String)),
        (
            "httpHeaders",
            r.http_headers.map(|hs| {
                Value::Array(
                    hs.into_iter()
                        .map(|h| {
                            object([
                                ("name", Some(Value::String(h.name))),
                                ("value", h.value.map(Value::String)),
                            ])
                        })
                        .collect(),
                )
            }),
        ),
        ("source", r.source.map(Value::String)),
        (
            "verification",
            r.verification
                .map(|v| object([("hash", v.hash.map(Value::String))])),
        ),
    ])
}

/// Sort object keys and drop `null` members, recursively, so equal content has one encoding.
pub fn canonicalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, x| !x.is_null());
            map.values_mut().for_each(canonicalize);
            // Typed Ignition structs already serialise in key order; re-sorting costs a rehash.
            if !map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b) {
                map.sort_keys();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(canonicalize),
        _ => {}
    }
}

/// Whether [`canonicalize`] would leave `v` unchanged.
pub fn is_canonical(v: &Value) -> bool {
    match v {
        Value::Object(map) => {
            map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b)
                && map.values().all(|x| !x.is_null() && is_canonical(x))
        }
        Value::Array(items) => items.iter().all(is_canonical),
        _ => true,
    }
}

/// The spec as hashed: every field, keys in sorted order, `config` canonical.
#[derive(serde::Serialize)]
struct HashedSpec<'a> {
    #[serde(rename = "baseOSExtensionsContainerImage")]
    base_os_extensions_container_image: &'a str,
    config: &'a Value,
    extensions: &'a [String],
    fips: bool,
    #[serde(rename = "kernelArguments")]
    kernel_arguments: &'a [String],
    #[serde(rename = "kernelType")]
    kernel_type: &'a str,
    #[serde(rename = "osImageURL")]
    os_image_url: &'a str,
}

/// Feeds serialised bytes straight into the digest, so the spec is never copied.
struct DigestWriter(Sha256);

impl std::io::Write for DigestWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `rendered-<pool>-<32 lowercase hex>`: a digest of the canonical spec alone.
pub fn rendered_name(pool: &str, spec: &MachineConfigSpec) -> Result<String, serde_json::Error> {
    digest_name(pool, spec, false)
}

/// [`rendered_name`]; `canonical` says the config is known to be canonical already.
fn digest_name(
    pool: &str,
    spec: &MachineConfigSpec,
    canonical: bool,
) -> Result<String, serde_json::Error> {
    let null = Value::Null;
    let raw = spec.config.as_ref().unwrap_or(&null);
    debug_assert!(
        !canonical || is_canonical(raw),
        "config claimed canonical is not"
    );
    let owned;
    let config = if canonical || is_canonical(raw) {
        raw
    } else {
        let mut v = raw.clone();
        canonicalize(&mut v);
        owned = v;
        &owned
    };
    let hashed = HashedSpec {
        base_os_extensions_container_image: &spec.base_os_extensions_container_image,
        config,
        extensions: spec.extensions.as_deref().unwrap_or_default(),
        fips: spec.fips,
        kernel_arguments: spec.kernel_arguments.as_deref().unwrap_or_default(),
        kernel_type: &spec.kernel_type,
        os_image_url: &spec.os_image_url,
    };
    let mut w = DigestWriter(Sha256::new());
    w.0.update(b"mco rendered spec v1\n");
    // serde_json writes token by token; batching them saves most of the per-call digest overhead.
    let mut buffered = std::io::BufWriter::with_capacity(64 * 1024, w);
    serde_json::to_writer(&mut buffered, &hashed)?;
    let w = buffered
        .into_inner()
        .map_err(|e| serde_json::Error::io(e.into_error()))?;
    let digest = w.0.finalize();
    Ok(format!(
        "{}{pool}-{}",
        mco_api::constants::names::RENDERED_PREFIX,
        hex::encode(&digest[..16])
    ))
}

fn describe_selector(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> String {
    let Some(sel) = selector else {
        return "<none>".into();
    };
    mco_api::select::parse(Some(sel))
        .ok()
        .flatten()
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("{sel:?}"))
}
