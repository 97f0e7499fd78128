//! The ControllerConfig's CA bundles kept in step with the cluster's, as upstream's operator
//! keeps them on every sync (`syncRenderConfig`, `getImageRegistryBundles`): with upstream's
//! operator scaled to 0 nothing else would, and a rotated kube-apiserver-to-kubelet signer
//! would never reach the kubelets.
//!
//! - `spec.kubeAPIServerServingCAData` ← ConfigMap `openshift-config-managed/kube-apiserver-client-ca`,
//!   key `ca-bundle.crt` (the daemon writes it to `/etc/kubernetes/kubelet-ca.crt`);
//! - `spec.imageRegistryBundleData` ← every key of `openshift-config-managed/image-registry-ca`;
//! - `spec.imageRegistryBundleUserData` ← every key of `openshift-config/<name>`, `<name>` being
//!   `images.config.openshift.io/cluster`'s `spec.additionalTrustedCA.name` (the daemon writes
//!   each registry bundle to `/etc/docker/certs.d/<key>/ca.crt`);
//! - `spec.proxy` ← `proxies.config.openshift.io/cluster`'s status (upstream's
//!   `createDiscoveredControllerConfigSpec`): its set values, no field when it has none;
//! - `spec.additionalTrustBundle` ← key `ca-bundle.crt` of `openshift-config/user-ca-bundle`,
//!   then of the ConfigMap of `openshift-config` the proxy's `spec.trustedCA.name` names when it
//!   is another, each a PEM bundle, concatenated (upstream's `getTrustedBundle`); no field when
//!   empty. A kept `00-<role>` writes both to the nodes ([`crate::templates`]);
//! - `spec.baseOSContainerImage`, `spec.baseOSExtensionsContainerImage` and `spec.osImageURL`
//!   ← the keys of the same names of the release's ConfigMap
//!   `openshift-machine-config-operator/machine-config-osimageurl`, which the CVO rewrites in an
//!   upgrade, and the annotation [`RELEASE_IMAGE_VERSION`] ← its `releaseVersion` (upstream's
//!   `syncRenderConfig`): the render takes the OS image from the spec, so an upgrade makes a new
//!   rendered config and rolls the nodes onto the release's OS. A key absent or empty leaves
//!   its field: a set OS image is never blanked.
//! - `spec.images` ← key `images.json` of the release's ConfigMap
//!   `openshift-machine-config-operator/machine-config-operator-images`, also rewritten by the
//!   CVO in an upgrade: each of its images into the key upstream's operator copies it to
//!   ([`RELEASE_IMAGE_KEYS`]; `infraImage`, CRI-O's pause image, into `infraImageKey`, which a
//!   kept `01-<role>-container-runtime` follows). An image absent or empty leaves its key; the
//!   other keys of `spec.images` are left as they are.
//!
//! As upstream reads a ConfigMap: a `binaryData` entry as it is; a `data` entry base64-decoded
//! when it decodes (newlines ignored, as Go's decoder ignores them), else its bytes; registry
//! bundles in key order, `data` keys first. As upstream, an Image config naming no ConfigMap,
//! or one that does not exist (said as a warning), leaves no user bundles.
//!
//! Unlike upstream, a source that does not exist leaves its field as it is (a cluster that is not
//! OpenShift), where upstream fails its sync without the Image config: without the Proxy and
//! `user-ca-bundle` the trust bundle is left too, and a missing ConfigMap the proxy names adds
//! nothing (said as a warning) where upstream fails; and the kubelet CA is
//! taken as published from the start, as mco takes over a cluster long past its bootstrap.
//! A bundle over [`MAX_BUNDLE_BYTES`] (the trust bundle's two parts together), a trusted CA
//! ConfigMap without a certificate, a proxy value over [`MAX_PROXY_VALUE_BYTES`] or holding a
//! control character, more registry bundles than the daemon writes ([`MAX_REGISTRY_BUNDLES`]),
//! an OS image over [`MAX_IMAGE_REF_BYTES`] or that is no image reference, or a release version
//! over [`MAX_RELEASE_VERSION_BYTES`] (either holding whitespace or a control character), an
//! `images.json` over [`MAX_RELEASE_IMAGES_BYTES`] or that is no JSON object, or an image of it
//! that is no string or fails as the OS images do, is refused, naming its object, and nothing
//! is changed.
//!
//! [`plan`] is the pure decision: the JSON merge patch of the spec fields and the annotation
//! that differ. [`run`] watches the sources by name and patches the ControllerConfig when the
//! plan says so, with an `OSImageFollowed` event when the OS images change.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use mco_api::constants::annotations::RELEASE_IMAGE_VERSION;
use mco_api::controllerconfig::MAX_BUNDLE_BYTES;
use mco_api::generators::{CLUSTER_CONFIG_NAME as PROXY_NAME, IMAGE_CONFIG_NAME, Image};
use mco_api::{ControllerConfig, ControllerConfigSpec, ImageRegistryBundle};
use mco_api::{Proxy, ProxyStatus};
use mco_rollout::plan::EventKind;
use serde_json::{Map, Value, json};
use tokio_util::task::AbortOnDropHandle;

use crate::Error;
use crate::by_name::{Slot, follow, forward, seen, slot, wait_to_sync};
use crate::ctx::{Ctx, error_backoff};

/// The namespace of the cluster's published CAs.
pub const MANAGED_NAMESPACE: &str = "openshift-config-managed";
/// The namespace of the administrator's ConfigMaps.
pub const USER_NAMESPACE: &str = "openshift-config";
/// The kube-apiserver's client CA bundle: the CAs the kubelet trusts for client certificates.
pub const CLIENT_CA: &str = "kube-apiserver-client-ca";
/// Its key.
pub const CLIENT_CA_KEY: &str = "ca-bundle.crt";
/// The cluster's image registry CAs, one key per registry.
pub const REGISTRY_CA: &str = "image-registry-ca";
/// The administrator's additional trust bundle, in `openshift-config`, key [`TRUSTED_CA_KEY`].
pub const USER_CA_BUNDLE: &str = "user-ca-bundle";
/// The key of a trusted CA ConfigMap: [`USER_CA_BUNDLE`]'s and the one the proxy names.
pub const TRUSTED_CA_KEY: &str = "ca-bundle.crt";
/// The longest proxy value taken: the templates' bound on one input.
pub const MAX_PROXY_VALUE_BYTES: usize = mco_generate::template::MAX_VALUE_BYTES;
/// Registry bundles the daemon writes, both lists together (its `MAX_REGISTRY_BUNDLES`).
pub const MAX_REGISTRY_BUNDLES: usize = 500;
/// The reason of the Warning event on the ControllerConfig when a sync fails.
pub const SYNC_FAILED: &str = "ControllerConfigSyncFailed";
/// Upstream's operator namespace, where the release publishes its OS images.
pub const OPERATOR_NAMESPACE: &str = "openshift-machine-config-operator";
/// The release's OS images, rewritten by the CVO in an upgrade.
pub const OS_IMAGE_URLS: &str = "machine-config-osimageurl";
/// Its key naming the release the images come from.
pub const RELEASE_VERSION_KEY: &str = "releaseVersion";
/// Its keys taken into the ControllerConfig's spec fields of the same names.
pub const OS_IMAGE_KEYS: [&str; 3] = [
    "baseOSContainerImage",
    "baseOSExtensionsContainerImage",
    "osImageURL",
];
/// The longest OS image reference taken: a name (at most 255 bytes), a registry host, a tag
/// and a digest fit with room to spare.
pub const MAX_IMAGE_REF_BYTES: usize = 1024;
/// The longest release version taken: a DNS subdomain's length, far above any release's
/// (`4.16.0-0.nightly-2024-06-04-123456`).
pub const MAX_RELEASE_VERSION_BYTES: usize = 253;
/// The reason of the Normal event on the ControllerConfig when the release's OS images are
/// taken: the rollout that follows is explained by it.
pub const OS_IMAGE_FOLLOWED: &str = "OSImageFollowed";
/// The release's other images (upstream's operator's `images.json`), rewritten by the CVO in an
/// upgrade.
pub const RELEASE_IMAGES: &str = "machine-config-operator-images";
/// Its key: a JSON object naming each image.
pub const RELEASE_IMAGES_KEY: &str = "images.json";
/// The longest `images.json` taken: about twenty image references of [`MAX_IMAGE_REF_BYTES`]
/// and room for the release's other fields (a release's is under 4 KiB).
pub const MAX_RELEASE_IMAGES_BYTES: usize = 64 * 1024;
/// `images.json`'s fields and the keys of `spec.images` upstream's operator copies them to
/// (`syncRenderConfig`; the operator's own image serves two keys).
pub const RELEASE_IMAGE_KEYS: [(&str, &str); 9] = [
    ("machineConfigOperator", "machineConfigOperatorKey"),
    ("machineConfigOperator", "apiServerWatcherKey"),
    ("infraImage", INFRA_IMAGE_KEY),
    ("keepalivedImage", "keepalivedImage"),
    ("corednsImage", "corednsImage"),
    ("haproxyImage", "haproxyImage"),
    ("baremetalRuntimeCfgImage", "baremetalRuntimeCfgImage"),
    ("kubeRbacProxy", "kubeRbacProxyImage"),
    ("dockerRegistryImage", "dockerRegistryImage"),
];
/// The key of `spec.images` naming CRI-O's pause image.
pub const INFRA_IMAGE_KEY: &str = "infraImageKey";

/// What was read of the cluster; `None` for an object that does not exist.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `openshift-config-managed/kube-apiserver-client-ca`.
    pub client_ca: Option<ConfigMap>,
    /// `openshift-config-managed/image-registry-ca`.
    pub registry_ca: Option<ConfigMap>,
    /// `images.config.openshift.io/cluster`.
    pub image: Option<Image>,
    /// The ConfigMap of `openshift-config` it names, read by [`user_ca_name`]; ignored unless
    /// its name is that one.
    pub user_ca: Option<ConfigMap>,
    /// `proxies.config.openshift.io/cluster`.
    pub proxy: Option<Proxy>,
    /// `openshift-config/user-ca-bundle`.
    pub user_ca_bundle: Option<ConfigMap>,
    /// The ConfigMap of `openshift-config` the proxy names, read by [`proxy_ca_name`]; ignored
    /// unless its name is that one.
    pub proxy_ca: Option<ConfigMap>,
    /// `openshift-machine-config-operator/machine-config-osimageurl`.
    pub os_images: Option<ConfigMap>,
    /// `openshift-machine-config-operator/machine-config-operator-images`.
    pub release_images: Option<ConfigMap>,
}

/// Why the sources cannot be taken; nothing is changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("ConfigMap {configmap} has no key {key}")]
    MissingKey { configmap: String, key: String },
    #[error(
        "ConfigMap {configmap} key {key}: {bytes} bytes, more than the limit of {MAX_BUNDLE_BYTES}"
    )]
    TooLarge {
        configmap: String,
        key: String,
        bytes: usize,
    },
    #[error("ConfigMap {configmap} key {key} is not a PEM bundle: no certificate in it")]
    NotPem { configmap: String, key: String },
    #[error("proxies.config.openshift.io/{PROXY_NAME} status.{field}: {why}")]
    BadProxy { field: &'static str, why: String },
    #[error(
        "ConfigMap {configmap}: {count} registry bundles with those before, more than the {MAX_REGISTRY_BUNDLES} the daemon writes"
    )]
    TooMany { configmap: String, count: usize },
    #[error("ConfigMap {configmap} key {key}: {why}")]
    BadValue {
        configmap: String,
        key: &'static str,
        why: String,
    },
}

/// The outcome of [`plan`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The JSON merge patch of the ControllerConfig; `None` when it is as it should be.
    pub patch: Option<Value>,
    /// What the patch sets: spec fields by name, the annotation by its key.
    pub changed: Vec<&'static str>,
    /// What upstream says as a warning and goes on: the named user ConfigMap is missing.
    pub warnings: Vec<String>,
    /// The OS images the patch changes; `None` when it changes none.
    pub os_images: Option<OsImagesFollowed>,
}

/// The release's OS images taken into the spec: what starts a rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsImagesFollowed {
    /// Each field changed: its name, the value it had and the one it takes.
    pub fields: Vec<(&'static str, String, String)>,
    /// The ConfigMap's `releaseVersion`, when it has one.
    pub release: Option<String>,
}

impl OsImagesFollowed {
    /// The event's message: the release, where from, and each image's old and new value.
    pub fn message(&self) -> String {
        let release = match &self.release {
            Some(r) => format!("release {r}"),
            None => "a release without a releaseVersion".into(),
        };
        let fields: Vec<String> = self
            .fields
            .iter()
            .map(|(f, old, new)| format!("{f} {old:?} -> {new:?}"))
            .collect();
        format!(
            "OS images of {release} from ConfigMap {OPERATOR_NAMESPACE}/{OS_IMAGE_URLS}: {}",
            fields.join(", ")
        )
    }
}

/// The name of the administrator's registry CA ConfigMap the Image config names, if any.
pub fn user_ca_name(image: &Image) -> Option<&str> {
    image
        .spec
        .other
        .get("additionalTrustedCA")
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// Go's `base64.StdEncoding`: padded, lenient about the unused trailing bits.
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// A `data` value as upstream reads it: base64-decoded when it decodes (Go's decoder skips
/// `\r` and `\n`), else its bytes.
fn data_bytes(value: &str) -> Vec<u8> {
    let stripped: String;
    let text = if value.contains(['\r', '\n']) {
        stripped = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        &stripped
    } else {
        value
    };
    GO_STD
        .decode(text)
        .unwrap_or_else(|_| value.as_bytes().to_vec())
}

fn cm_name(cm: &ConfigMap, namespace: &str) -> String {
    format!("{namespace}/{}", cm.name_any())
}

fn bounded(configmap: &str, key: &str, bytes: Vec<u8>) -> Result<Vec<u8>, Refused> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(Refused::TooLarge {
            configmap: configmap.into(),
            key: key.into(),
            bytes: bytes.len(),
        });
    }
    Ok(bytes)
}

/// One key's bytes (upstream's `GetCAsFromConfigMap`: `binaryData` first).
fn key_bytes(cm: &ConfigMap, namespace: &str, key: &str) -> Result<Vec<u8>, Refused> {
    let name = cm_name(cm, namespace);
    let raw = if let Some(b) = cm.binary_data.as_ref().and_then(|d| d.get(key)) {
        b.0.clone()
    } else if let Some(d) = cm.data.as_ref().and_then(|d| d.get(key)) {
        data_bytes(d)
    } else {
        return Err(Refused::MissingKey {
            configmap: name,
            key: key.into(),
        });
    };
    bounded(&name, key, raw)
}

/// Every key's bundle, `data` keys sorted then `binaryData` keys sorted; `before` bundles
/// already taken count toward [`MAX_REGISTRY_BUNDLES`].
fn registry_bundles(
    cm: &ConfigMap,
    namespace: &str,
    before: usize,
) -> Result<Vec<ImageRegistryBundle>, Refused> {
    let name = cm_name(cm, namespace);
    let empty = BTreeMap::new();
    let data = cm.data.as_ref().unwrap_or(&empty);
    let empty_bin = BTreeMap::new();
    let binary = cm.binary_data.as_ref().unwrap_or(&empty_bin);
    let count = before + data.len() + binary.len();
    if count > MAX_REGISTRY_BUNDLES {
        return Err(Refused::TooMany {
            configmap: name,
            count,
        });
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = Vec::with_capacity(data.len() + binary.len());
    for (key, value) in data {
        let bytes = bounded(&name, key, data_bytes(value))?;
        out.push(ImageRegistryBundle {
            file: key.clone(),
            data: b64.encode(bytes),
        });
    }
    for (key, value) in binary {
        let bytes = bounded(&name, key, value.0.clone())?;
        out.push(ImageRegistryBundle {
            file: key.clone(),
            data: b64.encode(bytes),
        });
    }
    Ok(out)
}

/// Whether two bundle lists hold the same; an absent list is an empty one.
fn same_list(have: Option<&Vec<ImageRegistryBundle>>, want: &[ImageRegistryBundle]) -> bool {
    have.map_or(&[][..], Vec::as_slice) == want
}

/// The name of the proxy's CA ConfigMap in `openshift-config`, when it names one other than
/// [`USER_CA_BUNDLE`] (taken anyway), as upstream's `getTrustedBundle` reads it.
pub fn proxy_ca_name(proxy: &Proxy) -> Option<&str> {
    proxy
        .spec
        .trusted_ca
        .as_ref()
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty() && *n != USER_CA_BUNDLE)
}

/// `spec.proxy` as upstream's operator sets it: the Proxy's status, its empty values left
/// out; `None` (no field) when it has none. Each value is bounded and on one line, as the
/// templates take it.
fn proxy_spec(proxy: &Proxy) -> Result<Option<Value>, Refused> {
    let status = proxy.status.clone().unwrap_or_default();
    for (field, v) in [
        ("httpProxy", &status.http_proxy),
        ("httpsProxy", &status.https_proxy),
        ("noProxy", &status.no_proxy),
    ] {
        if v.len() > MAX_PROXY_VALUE_BYTES {
            return Err(Refused::BadProxy {
                field,
                why: format!(
                    "{} bytes, longer than the limit of {MAX_PROXY_VALUE_BYTES}",
                    v.len()
                ),
            });
        }
        if v.chars().any(char::is_control) {
            return Err(Refused::BadProxy {
                field,
                why: "contains a control character".into(),
            });
        }
    }
    if status == ProxyStatus::default() {
        return Ok(None);
    }
    Ok(Some(serde_json::to_value(status).unwrap_or_default()))
}

/// A stored `spec.proxy` as [`proxy_spec`] would write it, to compare: `None` when absent,
/// null or empty; a value that is no proxy status as it is.
fn stored_proxy(spec: &ControllerConfigSpec) -> Option<Value> {
    let v = spec.other.get("proxy").filter(|v| !v.is_null())?;
    match serde_json::from_value::<ProxyStatus>(v.clone()) {
        Ok(s) if s == ProxyStatus::default() => None,
        Ok(s) => Some(serde_json::to_value(s).unwrap_or_default()),
        Err(_) => Some(v.clone()),
    }
}

/// One trusted CA ConfigMap's bundle appended to `bundle`: its [`TRUSTED_CA_KEY`], a PEM
/// bundle (at least one certificate, as Go's `AppendCertsFromPEM` asks) when not empty, and
/// the whole within [`MAX_BUNDLE_BYTES`].
fn append_trusted(bundle: &mut Vec<u8>, cm: &ConfigMap) -> Result<(), Refused> {
    let name = cm_name(cm, USER_NAMESPACE);
    let bytes = key_bytes(cm, USER_NAMESPACE, TRUSTED_CA_KEY)?;
    if bytes.is_empty() {
        return Ok(());
    }
    let read = mco_pki::read(&bytes, &name, mco_pki::Leniency::Go, 1);
    if read.certificates.is_empty() {
        return Err(Refused::NotPem {
            configmap: name,
            key: TRUSTED_CA_KEY.into(),
        });
    }
    if bundle.len() + bytes.len() > MAX_BUNDLE_BYTES {
        return Err(Refused::TooLarge {
            configmap: name,
            key: TRUSTED_CA_KEY.into(),
            bytes: bundle.len() + bytes.len(),
        });
    }
    bundle.extend_from_slice(&bytes);
    Ok(())
}

/// One value of the OS images' ConfigMap, bounded, on no more than one word, and (for an
/// image) an image reference.
fn checked_value<'a>(
    configmap: &str,
    key: &'static str,
    value: &'a str,
    max: usize,
    image: bool,
) -> Result<&'a str, Refused> {
    let refuse = |why: String| Refused::BadValue {
        configmap: configmap.into(),
        key,
        why,
    };
    if value.len() > max {
        return Err(refuse(format!(
            "{} bytes, longer than the limit of {max}",
            value.len()
        )));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse("contains whitespace or a control character".into()));
    }
    if image && let Err(why) = mco_api::image_ref::parse(value) {
        return Err(refuse(format!(
            "{value:?} is not an image reference: {why}"
        )));
    }
    Ok(value)
}

/// The spec fields and the annotation the release's OS images ConfigMap sets, into `fields`
/// and `annotations`; every value is checked before any is taken.
fn follow_os_images(
    cc: &ControllerConfig,
    cm: &ConfigMap,
    out: &mut Plan,
    fields: &mut Map<String, Value>,
    annotations: &mut Map<String, Value>,
) -> Result<(), Refused> {
    let name = cm_name(cm, OPERATOR_NAMESPACE);
    // Upstream reads `data` only; an empty value is as good as none.
    let value = |key: &str| {
        cm.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    let spec = &cc.spec;
    let have = [
        &spec.base_os_container_image,
        &spec.base_os_extensions_container_image,
        &spec.os_image_url,
    ];
    let mut changes = vec![];
    for (key, have) in OS_IMAGE_KEYS.into_iter().zip(have) {
        if let Some(v) = value(key) {
            let v = checked_value(&name, key, v, MAX_IMAGE_REF_BYTES, true)?;
            if v != have {
                changes.push((key, have.clone(), v.to_string()));
            }
        }
    }
    let release = match value(RELEASE_VERSION_KEY) {
        Some(v) => Some(checked_value(
            &name,
            RELEASE_VERSION_KEY,
            v,
            MAX_RELEASE_VERSION_BYTES,
            false,
        )?),
        None => None,
    };
    for (key, _, new) in &changes {
        fields.insert((*key).into(), Value::String(new.clone()));
        out.changed.push(*key);
    }
    if let Some(r) = release
        && cc
            .annotations()
            .get(RELEASE_IMAGE_VERSION)
            .map(String::as_str)
            != Some(r)
    {
        annotations.insert(RELEASE_IMAGE_VERSION.into(), Value::String(r.into()));
        out.changed.push(RELEASE_IMAGE_VERSION);
    }
    if !changes.is_empty() {
        out.os_images = Some(OsImagesFollowed {
            fields: changes,
            release: release.map(str::to_string),
        });
    }
    Ok(())
}

/// The release a ConfigMap of OS images ([`OS_IMAGE_URLS`]) names; none when empty, or longer
/// than [`MAX_RELEASE_VERSION_BYTES`] (which [`plan`] refuses).
pub fn os_images_release(cm: &ConfigMap) -> Option<&str> {
    cm.data
        .as_ref()?
        .get(RELEASE_VERSION_KEY)
        .map(String::as_str)
        .filter(|v| !v.is_empty() && v.len() <= MAX_RELEASE_VERSION_BYTES)
}

/// [`RELEASE_IMAGES`]'s `images.json`, read once for both its release and its images: none
/// when absent or empty (upstream reads `data` only; an empty value is as good as none),
/// refused over its bound or when not a JSON object.
fn release_images(cm: &ConfigMap) -> Result<Option<Map<String, Value>>, Refused> {
    let Some(raw) = cm
        .data
        .as_ref()
        .and_then(|d| d.get(RELEASE_IMAGES_KEY))
        .filter(|v| !v.is_empty())
    else {
        return Ok(None);
    };
    let refuse = |why: String| Refused::BadValue {
        configmap: cm_name(cm, OPERATOR_NAMESPACE),
        key: RELEASE_IMAGES_KEY,
        why,
    };
    if raw.len() > MAX_RELEASE_IMAGES_BYTES {
        return Err(refuse(format!(
            "{} bytes, longer than the limit of {MAX_RELEASE_IMAGES_BYTES}",
            raw.len()
        )));
    }
    match serde_json::from_str(raw) {
        Ok(Value::Object(o)) => Ok(Some(o)),
        Ok(other) => Err(refuse(format!("is not a JSON object but {other}"))),
        Err(e) => Err(refuse(format!("is not JSON: {e}"))),
    }
}

/// The release an `images.json` names, if any.
fn release_images_release(images: &Map<String, Value>) -> Option<&str> {
    images
        .get(RELEASE_VERSION_KEY)?
        .as_str()
        .filter(|v| !v.is_empty())
}

/// The keys of `spec.images` the release's `images.json` (read by [`release_images`]) sets,
/// into `fields` (a merge patch of `spec.images` leaves its other keys); every image is checked
/// before any is taken.
fn follow_release_images(
    cc: &ControllerConfig,
    cm: &ConfigMap,
    images: &Map<String, Value>,
    out: &mut Plan,
    fields: &mut Map<String, Value>,
) -> Result<(), Refused> {
    let name = cm_name(cm, OPERATOR_NAMESPACE);
    let refuse = |why: String| Refused::BadValue {
        configmap: name.clone(),
        key: RELEASE_IMAGES_KEY,
        why,
    };
    let have = cc.spec.other.get("images").and_then(Value::as_object);
    let mut want = Map::new();
    for (field, key) in RELEASE_IMAGE_KEYS {
        let v = match images.get(field) {
            None | Some(Value::Null) => continue,
            Some(Value::String(v)) if v.is_empty() => continue,
            Some(Value::String(v)) => v,
            Some(other) => return Err(refuse(format!("{field}: is not a string but {other}"))),
        };
        let v = checked_value(&name, RELEASE_IMAGES_KEY, v, MAX_IMAGE_REF_BYTES, true).map_err(
            |e| match e {
                Refused::BadValue { why, .. } => refuse(format!("{field}: {why}")),
                other => other,
            },
        )?;
        if have.and_then(|h| h.get(key)).and_then(Value::as_str) != Some(v) {
            want.insert(key.into(), Value::String(v.into()));
        }
    }
    if !want.is_empty() {
        fields.insert("images".into(), Value::Object(want));
        out.changed.push("images");
    }
    Ok(())
}

/// The merge patch bringing the ControllerConfig to what `sources` say, or none. Pure.
pub fn plan(cc: &ControllerConfig, sources: &Sources) -> Result<Plan, Refused> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let spec = &cc.spec;
    let mut out = Plan::default();
    let mut fields = Map::new();
    let mut annotations = Map::new();

    // One release at a time: in an upgrade the CVO writes images.json before the OS images
    // (its manifests' order). Taken apart, each would start a rollout of its own and the first
    // nodes would reboot twice; so while the two name different releases neither is taken, as
    // upstream's operator refuses an images.json of a release other than its own.
    // A refused images.json holds back the OS images too, as it names no release to agree on.
    let images = match &sources.release_images {
        Some(cm) => release_images(cm)?.map(|images| (cm, images)),
        None => None,
    };
    let releases = (
        sources.os_images.as_ref().and_then(os_images_release),
        images
            .as_ref()
            .and_then(|(_, images)| release_images_release(images)),
    );
    if let (Some(os), Some(images)) = &releases
        && os != images
    {
        out.warnings.push(format!(
            "ConfigMap {OPERATOR_NAMESPACE}/{OS_IMAGE_URLS} is of release {os:?} and {OPERATOR_NAMESPACE}/{RELEASE_IMAGES} of release {images:?}; the release's images wait until both name one release"
        ));
    } else {
        if let Some(cm) = &sources.os_images {
            follow_os_images(cc, cm, &mut out, &mut fields, &mut annotations)?;
        }
        if let Some((cm, images)) = &images {
            follow_release_images(cc, cm, images, &mut out, &mut fields)?;
        }
    }

    if let Some(cm) = &sources.client_ca {
        let want = b64.encode(key_bytes(cm, MANAGED_NAMESPACE, CLIENT_CA_KEY)?);
        if spec.kube_api_server_serving_ca_data.as_deref() != Some(want.as_str()) {
            fields.insert("kubeAPIServerServingCAData".into(), Value::String(want));
            out.changed.push("kubeAPIServerServingCAData");
        }
    }

    let mut taken = 0;
    let managed = match &sources.registry_ca {
        Some(cm) => Some(registry_bundles(cm, MANAGED_NAMESPACE, 0)?),
        None => None,
    };
    if let Some(list) = &managed {
        taken = list.len();
    }
    let user = match &sources.image {
        None => None,
        Some(image) => match user_ca_name(image) {
            None => Some(vec![]),
            Some(name) => match sources.user_ca.as_ref().filter(|cm| cm.name_any() == name) {
                Some(cm) => Some(registry_bundles(cm, USER_NAMESPACE, taken)?),
                None => {
                    out.warnings.push(format!(
                        "ConfigMap {USER_NAMESPACE}/{name}, named by images.config.openshift.io/{IMAGE_CONFIG_NAME} spec.additionalTrustedCA, does not exist; no user registry bundles"
                    ));
                    Some(vec![])
                }
            },
        },
    };
    // Without the managed list in hand the bound counts the one stored.
    if let (None, Some(user)) = (&managed, &user) {
        let stored = spec.image_registry_bundle_data.as_ref().map_or(0, Vec::len);
        if stored + user.len() > MAX_REGISTRY_BUNDLES {
            return Err(Refused::TooMany {
                configmap: format!(
                    "{USER_NAMESPACE}/{}",
                    sources.image.as_ref().and_then(user_ca_name).unwrap_or("")
                ),
                count: stored + user.len(),
            });
        }
    }
    if let Some(want) = managed
        && !same_list(spec.image_registry_bundle_data.as_ref(), &want)
    {
        fields.insert(
            "imageRegistryBundleData".into(),
            serde_json::to_value(want).unwrap_or_default(),
        );
        out.changed.push("imageRegistryBundleData");
    }
    if let Some(want) = user
        && !same_list(spec.image_registry_bundle_user_data.as_ref(), &want)
    {
        fields.insert(
            "imageRegistryBundleUserData".into(),
            serde_json::to_value(want).unwrap_or_default(),
        );
        out.changed.push("imageRegistryBundleUserData");
    }

    if let Some(proxy) = &sources.proxy {
        let want = proxy_spec(proxy)?;
        if stored_proxy(spec) != want {
            fields.insert("proxy".into(), want.unwrap_or(Value::Null));
            out.changed.push("proxy");
        }
    }

    // Taken where OpenShift publishes either source; elsewhere the field is left as it is.
    if sources.proxy.is_some() || sources.user_ca_bundle.is_some() {
        let mut bundle = vec![];
        if let Some(cm) = &sources.user_ca_bundle {
            append_trusted(&mut bundle, cm)?;
        }
        if let Some(name) = sources.proxy.as_ref().and_then(proxy_ca_name) {
            match sources.proxy_ca.as_ref().filter(|cm| cm.name_any() == name) {
                Some(cm) => append_trusted(&mut bundle, cm)?,
                None => out.warnings.push(format!(
                    "ConfigMap {USER_NAMESPACE}/{name}, named by proxies.config.openshift.io/{PROXY_NAME} spec.trustedCA, does not exist; nothing taken from it"
                )),
            }
        }
        let want = (!bundle.is_empty()).then(|| b64.encode(&bundle));
        let have = spec
            .additional_trust_bundle
            .as_deref()
            .filter(|b| !b.is_empty());
        if have != want.as_deref() {
            fields.insert(
                "additionalTrustBundle".into(),
                want.map_or(Value::Null, Value::String),
            );
            out.changed.push("additionalTrustBundle");
        }
    }

    let mut patch = Map::new();
    if !annotations.is_empty() {
        patch.insert("metadata".into(), json!({ "annotations": annotations }));
    }
    if !fields.is_empty() {
        patch.insert("spec".into(), Value::Object(fields));
    }
    if !patch.is_empty() {
        out.patch = Some(Value::Object(patch));
    }
    Ok(out)
}

/// A reference to the ControllerConfig, for its events.
fn reference(cc: Option<&ControllerConfig>) -> ObjectReference {
    cc.map(|cc| cc.object_ref(&()))
        .unwrap_or_else(|| ObjectReference {
            api_version: Some("machineconfiguration.openshift.io/v1".into()),
            kind: Some("ControllerConfig".into()),
            name: Some(mco_api::constants::names::CONTROLLER_CONFIG.into()),
            ..Default::default()
        })
}

/// Why one sync failed: the API, or the sources refused.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error(transparent)]
    Api(#[from] Error),
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("{0}")]
    Watch(String),
}

impl From<kube::Error> for SyncError {
    fn from(e: kube::Error) -> Self {
        SyncError::Api(Error::Kube(e))
    }
}

/// The watch of a ConfigMap of `openshift-config` another object names, replaced when the name
/// changes.
struct NamedWatch {
    what: &'static str,
    watch: Option<(String, Slot<ConfigMap>, AbortOnDropHandle<()>)>,
}

impl NamedWatch {
    fn new(what: &'static str) -> NamedWatch {
        NamedWatch { what, watch: None }
    }

    /// Watches `name` (none: nothing) and says what was last seen of it.
    fn follow(
        &mut self,
        ctx: &Ctx,
        name: Option<&str>,
        wake: &futures::channel::mpsc::UnboundedSender<()>,
    ) -> Result<Option<ConfigMap>, Option<String>> {
        if self.watch.as_ref().map(|(n, _, _)| n.as_str()) != name {
            self.watch = name.map(|name| {
                let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), USER_NAMESPACE);
                let s = slot();
                let task = forward(follow(api, name, self.what, false, s.clone()), wake);
                (name.to_string(), s, task)
            });
        }
        match &self.watch {
            None => Ok(None),
            Some((_, s, _)) => seen(s, self.what),
        }
    }
}

/// A slot's object as the sync takes it: `Ok(None)` not listed yet, a watch's failure an error.
fn read<T>(r: Result<T, Option<String>>) -> Result<Option<T>, SyncError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(None) => Ok(None),
        Err(Some(why)) => Err(SyncError::Watch(why)),
    }
}

/// The sources' watches: the fixed ones, and those of the ConfigMaps the Image config names.
struct Watches {
    client_ca: Slot<ConfigMap>,
    registry_ca: Slot<ConfigMap>,
    image: Slot<Image>,
    user_ca: NamedWatch,
    proxy: Slot<Proxy>,
    user_ca_bundle: Slot<ConfigMap>,
    proxy_ca: NamedWatch,
    os_images: Slot<ConfigMap>,
    release_images: Slot<ConfigMap>,
    _tasks: Vec<AbortOnDropHandle<()>>,
}

impl Watches {
    fn start(ctx: &Ctx, wake: &futures::channel::mpsc::UnboundedSender<()>) -> Watches {
        let managed = || Api::<ConfigMap>::namespaced(ctx.client.clone(), MANAGED_NAMESPACE);
        let (client_ca, registry_ca, image) = (slot(), slot(), slot());
        let (proxy, user_ca_bundle, os_images) = (slot(), slot(), slot());
        let release_images = slot();
        let tasks = vec![
            forward(
                follow(
                    managed(),
                    CLIENT_CA,
                    "kube-apiserver client CA ConfigMap",
                    false,
                    client_ca.clone(),
                ),
                wake,
            ),
            forward(
                follow(
                    managed(),
                    REGISTRY_CA,
                    "image registry CA ConfigMap",
                    false,
                    registry_ca.clone(),
                ),
                wake,
            ),
            // A kind only OpenShift serves: missing elsewhere, so quiet.
            forward(
                follow(
                    Api::<Image>::all(ctx.client.clone()),
                    IMAGE_CONFIG_NAME,
                    "image config",
                    true,
                    image.clone(),
                ),
                wake,
            ),
            forward(
                follow(
                    Api::<Proxy>::all(ctx.client.clone()),
                    PROXY_NAME,
                    "proxy config",
                    true,
                    proxy.clone(),
                ),
                wake,
            ),
            forward(
                follow(
                    Api::<ConfigMap>::namespaced(ctx.client.clone(), USER_NAMESPACE),
                    USER_CA_BUNDLE,
                    "user CA bundle ConfigMap",
                    false,
                    user_ca_bundle.clone(),
                ),
                wake,
            ),
            forward(
                follow(
                    Api::<ConfigMap>::namespaced(ctx.client.clone(), OPERATOR_NAMESPACE),
                    OS_IMAGE_URLS,
                    "release OS images ConfigMap",
                    false,
                    os_images.clone(),
                ),
                wake,
            ),
            forward(
                follow(
                    Api::<ConfigMap>::namespaced(ctx.client.clone(), OPERATOR_NAMESPACE),
                    RELEASE_IMAGES,
                    "release images ConfigMap",
                    false,
                    release_images.clone(),
                ),
                wake,
            ),
            forward(crate::controllers::ticker(ctx.config.resync), wake),
        ];
        Watches {
            client_ca,
            registry_ca,
            image,
            user_ca: NamedWatch::new("user registry CA ConfigMap"),
            proxy,
            user_ca_bundle,
            proxy_ca: NamedWatch::new("proxy CA ConfigMap"),
            os_images,
            release_images,
            _tasks: tasks,
        }
    }

    /// The sources as last seen; `Ok(None)` while a watch has not listed its object yet.
    fn sources(
        &mut self,
        ctx: &Ctx,
        wake: &futures::channel::mpsc::UnboundedSender<()>,
    ) -> Result<Option<Sources>, SyncError> {
        let Some(image) = read(seen(&self.image, "image config"))? else {
            return Ok(None);
        };
        let user_name = image.as_ref().and_then(user_ca_name).map(str::to_string);
        let user_ca = read(self.user_ca.follow(ctx, user_name.as_deref(), wake))?;
        let client_ca = read(seen(&self.client_ca, "kube-apiserver client CA ConfigMap"))?;
        let registry_ca = read(seen(&self.registry_ca, "image registry CA ConfigMap"))?;
        let Some(proxy) = read(seen(&self.proxy, "proxy config"))? else {
            return Ok(None);
        };
        let proxy_ca_name = proxy.as_ref().and_then(proxy_ca_name).map(str::to_string);
        let proxy_ca = read(self.proxy_ca.follow(ctx, proxy_ca_name.as_deref(), wake))?;
        let user_ca_bundle = read(seen(&self.user_ca_bundle, "user CA bundle ConfigMap"))?;
        let os_images = read(seen(&self.os_images, "release OS images ConfigMap"))?;
        let release_images = read(seen(&self.release_images, "release images ConfigMap"))?;
        let (
            Some(user_ca),
            Some(client_ca),
            Some(registry_ca),
            Some(proxy_ca),
            Some(user_ca_bundle),
            Some(os_images),
            Some(release_images),
        ) = (
            user_ca,
            client_ca,
            registry_ca,
            proxy_ca,
            user_ca_bundle,
            os_images,
            release_images,
        )
        else {
            return Ok(None);
        };
        Ok(Some(Sources {
            client_ca,
            registry_ca,
            image,
            user_ca,
            proxy,
            user_ca_bundle,
            proxy_ca,
            os_images,
            release_images,
        }))
    }
}

/// Takes the sources as last seen and patches the ControllerConfig when they differ from its
/// spec. Nothing is read from the server: the ControllerConfig from the controller's cache,
/// the sources from their watches.
async fn sync_once(
    ctx: &Ctx,
    watches: &mut Watches,
    wake: &futures::channel::mpsc::UnboundedSender<()>,
    warned: &mut Vec<String>,
) -> Result<(), SyncError> {
    let name = mco_api::constants::names::CONTROLLER_CONFIG;
    let Some(cc) = ctx.ccs.get(&ObjectRef::new(name)) else {
        tracing::debug!("no ControllerConfig {name} yet; nothing to keep");
        return Ok(());
    };
    let Some(sources) = watches.sources(ctx, wake)? else {
        tracing::debug!("a source not listed yet; synced once it is");
        return Ok(());
    };
    let plan = plan(&cc, &sources)?;
    // Said once, not at every resync.
    if *warned != plan.warnings {
        for w in &plan.warnings {
            tracing::warn!("{w}");
        }
        *warned = plan.warnings.clone();
    }
    let Some(patch) = plan.patch else {
        return Ok(());
    };
    Api::<ControllerConfig>::all(ctx.client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tracing::info!(controllerconfig = name, changed = ?plan.changed, "ControllerConfig brought to the cluster's CA bundles, proxy and release");
    // The rollout this starts is explained on the ControllerConfig.
    if let Some(images) = &plan.os_images {
        let message = images.message();
        tracing::info!(controllerconfig = name, "{message}");
        ctx.publish(
            &reference(Some(&cc)),
            EventKind::Normal,
            OS_IMAGE_FOLLOWED,
            &message,
        )
        .await;
    }
    Ok(())
}

/// Keeps the ControllerConfig's CA bundles, proxy and OS images in step with the cluster's
/// until dropped: syncs at start, on every change of a source, and every `ctx.config.resync`
/// (a hand edit of the spec is undone then). A failed sync is retried with the controller's backoff, and reported as a
/// `ControllerConfigSyncFailed` event when its message changes.
pub async fn run(ctx: Arc<Ctx>) {
    let (wake, mut woken) = futures::channel::mpsc::unbounded::<()>();
    let mut watches = Watches::start(&ctx, &wake);
    let mut failures: u32 = 0;
    let mut reported: Option<String> = None;
    let mut warned = vec![];
    loop {
        let retry = match sync_once(&ctx, &mut watches, &wake, &mut warned).await {
            Ok(()) => {
                failures = 0;
                reported = None;
                None
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let message =
                    format!("syncing the CA bundles, proxy and OS images from the cluster: {e}");
                tracing::warn!(error = %e, failures, "ControllerConfig CA bundle sync failed");
                if reported.as_deref() != Some(message.as_str()) {
                    let cc = ctx.ccs.get(&ObjectRef::new(
                        mco_api::constants::names::CONTROLLER_CONFIG,
                    ));
                    ctx.publish(
                        &reference(cc.as_deref()),
                        EventKind::Warning,
                        SYNC_FAILED,
                        &message,
                    )
                    .await;
                    reported = Some(message);
                }
                Some(error_backoff(ctx.config.error_requeue, failures))
            }
        };
        if !wait_to_sync(&mut woken, retry).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use pretty_assertions::assert_eq;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    /// [`super::plan`] for a ControllerConfig with `spec` and no annotations.
    fn plan(spec: &ControllerConfigSpec, sources: &Sources) -> Result<Plan, Refused> {
        super::plan(&ControllerConfig::new(CC, spec.clone()), sources)
    }

    const CC: &str = mco_api::constants::names::CONTROLLER_CONFIG;

    fn cm(name: &str, data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: (!data.is_empty()).then(|| {
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            binary_data: (!binary.is_empty()).then(|| {
                binary
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect()
            }),
            ..Default::default()
        }
    }

    fn image(user_ca: Option<&str>) -> Image {
        let mut i = Image::new(IMAGE_CONFIG_NAME, Default::default());
        if let Some(n) = user_ca {
            i.spec
                .other
                .insert("additionalTrustedCA".into(), json!({ "name": n }));
        }
        i
    }

    fn bundle(file: &str, pem: &[u8]) -> ImageRegistryBundle {
        ImageRegistryBundle {
            file: file.into(),
            data: b64(pem),
        }
    }

    #[test]
    fn nothing_read_changes_nothing() {
        let spec = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some(b64(b"old")),
            image_registry_bundle_data: Some(vec![bundle("a", b"x")]),
            image_registry_bundle_user_data: Some(vec![bundle("b", b"y")]),
            ..Default::default()
        };
        assert_eq!(plan(&spec, &Sources::default()), Ok(Plan::default()));
    }

    #[test]
    fn the_client_ca_is_taken_from_its_key() {
        let spec = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some(b64(b"old")),
            ..Default::default()
        };
        let sources = Sources {
            client_ca: Some(cm(CLIENT_CA, &[(CLIENT_CA_KEY, PEM)], &[])),
            ..Default::default()
        };
        let p = plan(&spec, &sources).unwrap();
        assert_eq!(p.changed, ["kubeAPIServerServingCAData"]);
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"kubeAPIServerServingCAData": b64(PEM.as_bytes())}}))
        );
        // Applied, nothing more to do.
        let spec = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some(b64(PEM.as_bytes())),
            ..Default::default()
        };
        assert_eq!(plan(&spec, &sources), Ok(Plan::default()));
    }

    #[test]
    fn binary_data_wins_and_base64_data_is_decoded_as_go_does() {
        let both = cm(
            CLIENT_CA,
            &[(CLIENT_CA_KEY, "ignored")],
            &[(CLIENT_CA_KEY, b"bin")],
        );
        assert_eq!(
            key_bytes(&both, MANAGED_NAMESPACE, CLIENT_CA_KEY).unwrap(),
            b"bin"
        );
        // Base64 with line breaks decodes, as Go's StdEncoding skips them.
        let wrapped = format!(
            "{}\n{}\n",
            &b64(b"hello world")[..8],
            &b64(b"hello world")[8..]
        );
        assert_eq!(data_bytes(&wrapped), b"hello world");
        // Not base64 (a PEM, or unpadded): the bytes as they are.
        assert_eq!(data_bytes(PEM), PEM.as_bytes());
        assert_eq!(data_bytes("aGk"), b"aGk");
        assert_eq!(data_bytes("aGk="), b"hi");
    }

    #[test]
    fn a_missing_key_is_refused_by_name() {
        let sources = Sources {
            client_ca: Some(cm(CLIENT_CA, &[("other", PEM)], &[])),
            ..Default::default()
        };
        let e = plan(&ControllerConfigSpec::default(), &sources).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ConfigMap openshift-config-managed/kube-apiserver-client-ca has no key ca-bundle.crt"
        );
    }

    #[test]
    fn registry_bundles_in_key_order_data_first() {
        let sources = Sources {
            registry_ca: Some(cm(
                REGISTRY_CA,
                &[("z.example", PEM), ("a.example..5000", &b64(b"decoded"))],
                &[("b.example", b"binary")],
            )),
            image: Some(image(Some("user-ca"))),
            user_ca: Some(cm("user-ca", &[("quay.io", PEM)], &[])),
            ..Default::default()
        };
        let p = plan(&ControllerConfigSpec::default(), &sources).unwrap();
        assert_eq!(
            p.changed,
            ["imageRegistryBundleData", "imageRegistryBundleUserData"]
        );
        let want = json!({"spec": {
            "imageRegistryBundleData": [
                {"file": "a.example..5000", "data": b64(b"decoded")},
                {"file": "z.example", "data": b64(PEM.as_bytes())},
                {"file": "b.example", "data": b64(b"binary")},
            ],
            "imageRegistryBundleUserData": [{"file": "quay.io", "data": b64(PEM.as_bytes())}],
        }});
        assert_eq!(p.patch, Some(want));
    }

    #[test]
    fn the_user_list_follows_the_image_config() {
        let spec = ControllerConfigSpec {
            image_registry_bundle_user_data: Some(vec![bundle("quay.io", b"old")]),
            ..Default::default()
        };
        let emptied = json!({"spec": {"imageRegistryBundleUserData": []}});
        // Naming no ConfigMap: no user bundles.
        let none = Sources {
            image: Some(image(None)),
            ..Default::default()
        };
        assert_eq!(plan(&spec, &none).unwrap().patch, Some(emptied.clone()));
        // Naming one that does not exist (or another than the one read): none, and a warning.
        let missing = Sources {
            image: Some(image(Some("user-ca"))),
            user_ca: Some(cm("other", &[("quay.io", PEM)], &[])),
            ..Default::default()
        };
        let p = plan(&spec, &missing).unwrap();
        assert_eq!(p.patch, Some(emptied));
        assert_eq!(p.warnings.len(), 1);
        assert!(
            p.warnings[0].contains("openshift-config/user-ca"),
            "{:?}",
            p.warnings
        );
        // An absent list and an empty one are the same: nothing to write.
        assert_eq!(
            plan(&ControllerConfigSpec::default(), &none).unwrap().patch,
            None
        );
    }

    #[test]
    fn a_bundle_at_the_limit_is_taken_and_one_over_refused() {
        let at = "x".repeat(MAX_BUNDLE_BYTES);
        let over = "x".repeat(MAX_BUNDLE_BYTES + 1);
        let sources = |v: &str| Sources {
            client_ca: Some(cm(CLIENT_CA, &[(CLIENT_CA_KEY, v)], &[])),
            registry_ca: Some(cm(REGISTRY_CA, &[], &[("r.example", v.as_bytes())])),
            ..Default::default()
        };
        let p = plan(&ControllerConfigSpec::default(), &sources(&at)).unwrap();
        assert_eq!(p.changed.len(), 2);
        assert_eq!(
            plan(&ControllerConfigSpec::default(), &sources(&over)).unwrap_err(),
            Refused::TooLarge {
                configmap: "openshift-config-managed/kube-apiserver-client-ca".into(),
                key: CLIENT_CA_KEY.into(),
                bytes: MAX_BUNDLE_BYTES + 1,
            }
        );
        // Decoded size counts: base64 of MAX+1 bytes is refused too, in a registry bundle.
        let registry_over = Sources {
            registry_ca: Some(cm(
                REGISTRY_CA,
                &[("r.example", &b64(over.as_bytes()))],
                &[],
            )),
            ..Default::default()
        };
        let e = plan(&ControllerConfigSpec::default(), &registry_over).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "ConfigMap openshift-config-managed/image-registry-ca key r.example: {} bytes, more than the limit of {MAX_BUNDLE_BYTES}",
                MAX_BUNDLE_BYTES + 1
            )
        );
    }

    #[test]
    fn registry_bundles_at_the_limit_are_taken_and_one_more_refused() {
        let keys: Vec<String> = (0..MAX_REGISTRY_BUNDLES)
            .map(|i| format!("r{i:03}.example"))
            .collect();
        let managed: Vec<(&str, &str)> = keys[..MAX_REGISTRY_BUNDLES - 1]
            .iter()
            .map(|k| (k.as_str(), PEM))
            .collect();
        let sources = |user: &[(&str, &str)]| Sources {
            registry_ca: Some(cm(REGISTRY_CA, &managed, &[])),
            image: Some(image(Some("user-ca"))),
            user_ca: Some(cm("user-ca", user, &[])),
            ..Default::default()
        };
        let p = plan(
            &ControllerConfigSpec::default(),
            &sources(&[("last.example", PEM)]),
        )
        .unwrap();
        assert_eq!(p.changed.len(), 2);
        let e = plan(
            &ControllerConfigSpec::default(),
            &sources(&[("last.example", PEM), ("more.example", PEM)]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            Refused::TooMany {
                configmap: "openshift-config/user-ca".into(),
                count: MAX_REGISTRY_BUNDLES + 1
            }
        );
        // One ConfigMap alone over the limit.
        let all: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), PEM)).collect();
        let mut over = all.clone();
        over.push(("more.example", PEM));
        let alone = |data: &[(&str, &str)]| Sources {
            registry_ca: Some(cm(REGISTRY_CA, data, &[])),
            ..Default::default()
        };
        assert!(plan(&ControllerConfigSpec::default(), &alone(&all)).is_ok());
        assert!(matches!(
            plan(&ControllerConfigSpec::default(), &alone(&over)),
            Err(Refused::TooMany { count, .. }) if count == MAX_REGISTRY_BUNDLES + 1
        ));
        // The user's list alone, counted with the managed list stored when that ConfigMap is gone.
        let stored = ControllerConfigSpec {
            image_registry_bundle_data: Some(vec![bundle("a", b"x"); MAX_REGISTRY_BUNDLES - 1]),
            ..Default::default()
        };
        let user_only = |user: &[(&str, &str)]| Sources {
            image: Some(image(Some("user-ca"))),
            user_ca: Some(cm("user-ca", user, &[])),
            ..Default::default()
        };
        assert!(plan(&stored, &user_only(&[("one", PEM)])).is_ok());
        assert!(plan(&stored, &user_only(&[("one", PEM), ("two", PEM)])).is_err());
    }

    fn proxy(status: Option<ProxyStatus>, trusted_ca: Option<&str>) -> Proxy {
        let mut p = Proxy::new(PROXY_NAME, Default::default());
        p.spec.trusted_ca =
            trusted_ca.map(|n| mco_api::generators::ConfigMapNameReference { name: n.into() });
        p.status = status;
        p
    }

    fn status(http: &str, https: &str, no: &str) -> ProxyStatus {
        ProxyStatus {
            http_proxy: http.into(),
            https_proxy: https.into(),
            no_proxy: no.into(),
        }
    }

    #[test]
    fn spec_proxy_follows_the_proxys_status() {
        let set = status("http://p.example:3128", "", ".svc,10.0.0.0/16");
        let sources = |p: Option<Proxy>| Sources {
            proxy: p,
            ..Default::default()
        };
        // No Proxy (no kind, or no object): the field is left.
        let hand = ControllerConfigSpec {
            other: Map::from_iter([("proxy".into(), json!({"httpProxy": "http://hand:1"}))]),
            ..Default::default()
        };
        assert_eq!(plan(&hand, &sources(None)).unwrap().patch, None);
        // Its status, the empty values left out, as upstream's operator writes it.
        let p = plan(&hand, &sources(Some(proxy(Some(set.clone()), None)))).unwrap();
        assert_eq!(p.changed, ["proxy"]);
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"proxy": {
                "httpProxy": "http://p.example:3128", "noProxy": ".svc,10.0.0.0/16"
            }}}))
        );
        // In step: nothing, also when the stored one spells an unset value as "".
        let stored = ControllerConfigSpec {
            other: Map::from_iter([(
                "proxy".into(),
                json!({"httpProxy": "http://p.example:3128", "httpsProxy": "", "noProxy": ".svc,10.0.0.0/16"}),
            )]),
            ..Default::default()
        };
        assert_eq!(
            plan(&stored, &sources(Some(proxy(Some(set), None)))).unwrap(),
            Plan::default()
        );
        // A status emptied (or none yet): no field, as upstream leaves it out.
        for empty in [None, Some(ProxyStatus::default())] {
            let p = plan(&stored, &sources(Some(proxy(empty, None)))).unwrap();
            assert_eq!(p.patch, Some(json!({"spec": {"proxy": null}})));
            assert_eq!(
                plan(
                    &ControllerConfigSpec::default(),
                    &sources(Some(proxy(None, None)))
                )
                .unwrap(),
                Plan::default()
            );
        }
    }

    #[test]
    fn a_proxy_value_at_the_limit_is_taken_and_one_byte_more_refused() {
        let sources = |no: &str| Sources {
            proxy: Some(proxy(Some(status("", "", no)), None)),
            ..Default::default()
        };
        let at = "a".repeat(MAX_PROXY_VALUE_BYTES);
        let p = plan(&ControllerConfigSpec::default(), &sources(&at)).unwrap();
        assert_eq!(p.patch, Some(json!({"spec": {"proxy": {"noProxy": at}}})));
        let over = "a".repeat(MAX_PROXY_VALUE_BYTES + 1);
        assert_eq!(
            plan(&ControllerConfigSpec::default(), &sources(&over))
                .unwrap_err()
                .to_string(),
            format!(
                "proxies.config.openshift.io/cluster status.noProxy: {} bytes, longer than the limit of {MAX_PROXY_VALUE_BYTES}",
                MAX_PROXY_VALUE_BYTES + 1
            )
        );
        // A line break would add a line to /etc/mco/proxy.env.
        let e = plan(
            &ControllerConfigSpec::default(),
            &Sources {
                proxy: Some(proxy(Some(status("http://a\nHTTPS_PROXY=x", "", "")), None)),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "proxies.config.openshift.io/cluster status.httpProxy: contains a control character"
        );
    }

    fn real_ca(cn: &str) -> String {
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn the_trust_bundle_is_user_ca_bundle_then_the_proxys_ca() {
        let (user, corp) = (real_ca("user"), real_ca("corporate-proxy"));
        let user_cm = cm(USER_CA_BUNDLE, &[(TRUSTED_CA_KEY, &user)], &[]);
        let corp_cm = cm("proxy-ca", &[(TRUSTED_CA_KEY, &corp)], &[]);
        let want =
            |pem: &str| Some(json!({"spec": {"additionalTrustBundle": b64(pem.as_bytes())}}));
        // Both, in upstream's order.
        let both = Sources {
            proxy: Some(proxy(None, Some("proxy-ca"))),
            user_ca_bundle: Some(user_cm.clone()),
            proxy_ca: Some(corp_cm.clone()),
            ..Default::default()
        };
        let p = plan(&ControllerConfigSpec::default(), &both).unwrap();
        assert_eq!(p.changed, ["additionalTrustBundle"]);
        assert_eq!(p.patch, want(&format!("{user}{corp}")));
        // The proxy naming user-ca-bundle: taken once.
        let same = Sources {
            proxy: Some(proxy(None, Some(USER_CA_BUNDLE))),
            user_ca_bundle: Some(user_cm.clone()),
            ..Default::default()
        };
        assert_eq!(
            plan(&ControllerConfigSpec::default(), &same).unwrap().patch,
            want(&user)
        );
        // The ConfigMap the proxy names missing (or another read): nothing from it, a warning.
        let missing = Sources {
            proxy: Some(proxy(None, Some("proxy-ca"))),
            user_ca_bundle: Some(user_cm.clone()),
            proxy_ca: Some(cm("other", &[(TRUSTED_CA_KEY, &corp)], &[])),
            ..Default::default()
        };
        let p = plan(&ControllerConfigSpec::default(), &missing).unwrap();
        assert_eq!(p.patch, want(&user));
        assert!(
            p.warnings[0].contains("openshift-config/proxy-ca"),
            "{:?}",
            p.warnings
        );
        // The proxy's alone, without user-ca-bundle.
        let proxys = Sources {
            proxy: Some(proxy(None, Some("proxy-ca"))),
            proxy_ca: Some(corp_cm),
            ..Default::default()
        };
        assert_eq!(
            plan(&ControllerConfigSpec::default(), &proxys)
                .unwrap()
                .patch,
            want(&corp)
        );
        // Neither source on an OpenShift cluster (a Proxy): the field removed, as upstream's
        // empty bundle; without the Proxy and user-ca-bundle (not OpenShift): left.
        let stored = ControllerConfigSpec {
            additional_trust_bundle: Some(b64(user.as_bytes())),
            ..Default::default()
        };
        let bare = Sources {
            proxy: Some(proxy(None, None)),
            ..Default::default()
        };
        assert_eq!(
            plan(&stored, &bare).unwrap().patch,
            Some(json!({"spec": {"additionalTrustBundle": null}}))
        );
        assert_eq!(plan(&stored, &Sources::default()).unwrap(), Plan::default());
        // An empty key adds nothing; in step, nothing to write.
        let empty = Sources {
            user_ca_bundle: Some(cm(USER_CA_BUNDLE, &[(TRUSTED_CA_KEY, "")], &[])),
            ..Default::default()
        };
        assert_eq!(
            plan(&ControllerConfigSpec::default(), &empty).unwrap(),
            Plan::default()
        );
        let in_step = ControllerConfigSpec {
            additional_trust_bundle: Some(b64(format!("{user}{corp}").as_bytes())),
            ..Default::default()
        };
        assert_eq!(plan(&in_step, &both).unwrap(), Plan::default());
    }

    #[test]
    fn a_trusted_ca_configmap_without_a_certificate_or_its_key_is_refused_by_name() {
        let user = real_ca("user");
        let sources = |user_ca: ConfigMap, proxy_ca: ConfigMap| Sources {
            proxy: Some(proxy(None, Some("proxy-ca"))),
            user_ca_bundle: Some(user_ca),
            proxy_ca: Some(proxy_ca),
            ..Default::default()
        };
        let good = cm(USER_CA_BUNDLE, &[(TRUSTED_CA_KEY, &user)], &[]);
        let e = plan(
            &ControllerConfigSpec::default(),
            &sources(good.clone(), cm("proxy-ca", &[(TRUSTED_CA_KEY, PEM)], &[])),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ConfigMap openshift-config/proxy-ca key ca-bundle.crt is not a PEM bundle: no certificate in it"
        );
        let e = plan(
            &ControllerConfigSpec::default(),
            &sources(
                cm(USER_CA_BUNDLE, &[(TRUSTED_CA_KEY, "not pem")], &[]),
                good.clone(),
            ),
        )
        .unwrap_err();
        assert_eq!(
            e,
            Refused::NotPem {
                configmap: "openshift-config/user-ca-bundle".into(),
                key: TRUSTED_CA_KEY.into()
            }
        );
        let e = plan(
            &ControllerConfigSpec::default(),
            &sources(good, cm("proxy-ca", &[("other.crt", &user)], &[])),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ConfigMap openshift-config/proxy-ca has no key ca-bundle.crt"
        );
    }

    #[test]
    fn a_trust_bundle_at_the_limit_is_taken_and_one_byte_more_refused() {
        // Text around the PEM blocks is kept, as upstream concatenates the keys as they are.
        let (user, corp) = (real_ca("user"), real_ca("corporate-proxy"));
        let padded = |pem: &str, len: usize| format!("{pem}{}", "\n".repeat(len - pem.len()));
        let sources = |total: usize| {
            let first = padded(&user, MAX_BUNDLE_BYTES / 2);
            let second = padded(&corp, total - first.len());
            Sources {
                proxy: Some(proxy(None, Some("proxy-ca"))),
                user_ca_bundle: Some(cm(USER_CA_BUNDLE, &[(TRUSTED_CA_KEY, &first)], &[])),
                proxy_ca: Some(cm("proxy-ca", &[(TRUSTED_CA_KEY, &second)], &[])),
                ..Default::default()
            }
        };
        let p = plan(&ControllerConfigSpec::default(), &sources(MAX_BUNDLE_BYTES)).unwrap();
        let Some(Value::String(taken)) = p
            .patch
            .as_ref()
            .and_then(|p| p.pointer("/spec/additionalTrustBundle").cloned())
        else {
            panic!("{p:?}");
        };
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(taken)
                .unwrap()
                .len(),
            MAX_BUNDLE_BYTES
        );
        assert_eq!(
            plan(
                &ControllerConfigSpec::default(),
                &sources(MAX_BUNDLE_BYTES + 1)
            )
            .unwrap_err(),
            Refused::TooLarge {
                configmap: "openshift-config/proxy-ca".into(),
                key: TRUSTED_CA_KEY.into(),
                bytes: MAX_BUNDLE_BYTES + 1,
            }
        );
    }

    const IMAGE_A: &str = "quay.example.com/release/os@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const EXT_A: &str = "quay.example.com/release/os-extensions@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const IMAGE_B: &str = "quay.example.com/release/os:4.17.2";
    const EXT_B: &str = "quay.example.com/release/os-extensions:4.17.2";

    /// The release's ConfigMap with the keys given (upstream's has all four).
    fn release(keys: &[(&str, &str)]) -> Sources {
        let mut c = cm(OS_IMAGE_URLS, keys, &[]);
        c.metadata.namespace = Some(OPERATOR_NAMESPACE.into());
        Sources {
            os_images: Some(c),
            ..Default::default()
        }
    }

    fn release_a() -> Sources {
        release(&[
            (RELEASE_VERSION_KEY, "4.16.8"),
            ("baseOSContainerImage", IMAGE_A),
            ("baseOSExtensionsContainerImage", EXT_A),
            ("osImageURL", ""),
        ])
    }

    /// A ControllerConfig on release A's images, annotated with `version`.
    fn on_a(version: Option<&str>) -> ControllerConfig {
        let mut cc = ControllerConfig::new(
            CC,
            ControllerConfigSpec {
                base_os_container_image: IMAGE_A.into(),
                base_os_extensions_container_image: EXT_A.into(),
                ..Default::default()
            },
        );
        if let Some(v) = version {
            cc.metadata.annotations = Some(BTreeMap::from([(
                RELEASE_IMAGE_VERSION.to_string(),
                v.to_string(),
            )]));
        }
        cc
    }

    #[test]
    fn the_os_images_and_release_version_follow_the_release_configmap() {
        // In step: nothing to do.
        assert_eq!(
            super::plan(&on_a(Some("4.16.8")), &release_a()),
            Ok(Plan::default())
        );
        // A ControllerConfig not annotated yet (upstream's operator had stopped before): the
        // annotation alone, no image change and so no event.
        let p = super::plan(&on_a(None), &release_a()).unwrap();
        assert_eq!(p.changed, [RELEASE_IMAGE_VERSION]);
        assert_eq!(
            p.patch,
            Some(json!({"metadata": {"annotations": {RELEASE_IMAGE_VERSION: "4.16.8"}}}))
        );
        assert_eq!(p.os_images, None);
        // Release B: both images and the annotation, in one patch.
        let b = release(&[
            (RELEASE_VERSION_KEY, "4.17.2"),
            ("baseOSContainerImage", IMAGE_B),
            ("baseOSExtensionsContainerImage", EXT_B),
            ("osImageURL", ""),
        ]);
        let p = super::plan(&on_a(Some("4.16.8")), &b).unwrap();
        assert_eq!(
            p.changed,
            [
                "baseOSContainerImage",
                "baseOSExtensionsContainerImage",
                RELEASE_IMAGE_VERSION
            ]
        );
        assert_eq!(
            p.patch,
            Some(json!({
                "metadata": {"annotations": {RELEASE_IMAGE_VERSION: "4.17.2"}},
                "spec": {"baseOSContainerImage": IMAGE_B, "baseOSExtensionsContainerImage": EXT_B},
            }))
        );
        let images = p.os_images.unwrap();
        assert_eq!(
            images.message(),
            format!(
                "OS images of release 4.17.2 from ConfigMap openshift-machine-config-operator/machine-config-osimageurl: \
                 baseOSContainerImage \"{IMAGE_A}\" -> \"{IMAGE_B}\", \
                 baseOSExtensionsContainerImage \"{EXT_A}\" -> \"{EXT_B}\""
            )
        );
        // The legacy osImageURL is taken when the release sets it.
        let legacy = release(&[("osImageURL", IMAGE_B)]);
        let p = super::plan(&on_a(None), &legacy).unwrap();
        assert_eq!(p.patch, Some(json!({"spec": {"osImageURL": IMAGE_B}})));
        assert_eq!(
            p.os_images.unwrap().message(),
            format!(
                "OS images of a release without a releaseVersion from ConfigMap openshift-machine-config-operator/machine-config-osimageurl: \
                 osImageURL \"\" -> \"{IMAGE_B}\""
            )
        );
    }

    #[test]
    fn an_absent_or_empty_key_leaves_its_field_and_no_configmap_leaves_all() {
        // Not OpenShift: no ConfigMap, every field and the annotation as they are.
        assert_eq!(
            super::plan(&on_a(Some("hand")), &Sources::default()),
            Ok(Plan::default())
        );
        // Keys absent or empty: a set image is never blanked, the annotation never removed.
        for keys in [
            &[][..],
            &[
                (RELEASE_VERSION_KEY, ""),
                ("baseOSContainerImage", ""),
                ("baseOSExtensionsContainerImage", ""),
                ("osImageURL", ""),
            ][..],
        ] {
            assert_eq!(
                super::plan(&on_a(Some("4.16.8")), &release(keys)),
                Ok(Plan::default())
            );
        }
        // One key alone: its field alone.
        let p = super::plan(
            &on_a(Some("4.16.8")),
            &release(&[("baseOSContainerImage", IMAGE_B)]),
        )
        .unwrap();
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"baseOSContainerImage": IMAGE_B}}))
        );
        // binaryData is not read, as upstream reads data alone.
        let mut bin = cm(
            OS_IMAGE_URLS,
            &[],
            &[("baseOSContainerImage", IMAGE_B.as_bytes())],
        );
        bin.metadata.namespace = Some(OPERATOR_NAMESPACE.into());
        let only_binary = Sources {
            os_images: Some(bin),
            ..Default::default()
        };
        assert_eq!(super::plan(&on_a(None), &only_binary), Ok(Plan::default()));
    }

    #[test]
    fn os_image_values_at_the_limit_are_taken_and_one_byte_more_refused() {
        let prefix = "quay.example.com/os@sha256:";
        let at = format!("{prefix}{}", "a".repeat(MAX_IMAGE_REF_BYTES - prefix.len()));
        assert_eq!(at.len(), MAX_IMAGE_REF_BYTES);
        let over = format!("{at}a");
        for key in OS_IMAGE_KEYS {
            let p = super::plan(&on_a(None), &release(&[(key, &at)])).unwrap();
            assert_eq!(p.patch, Some(json!({"spec": {key: at}})), "{key}");
            let e = super::plan(&on_a(None), &release(&[(key, &over)])).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "ConfigMap openshift-machine-config-operator/machine-config-osimageurl key {key}: {} bytes, longer than the limit of {MAX_IMAGE_REF_BYTES}",
                    MAX_IMAGE_REF_BYTES + 1
                )
            );
        }
        let at = "4".repeat(MAX_RELEASE_VERSION_BYTES);
        let p = super::plan(&on_a(None), &release(&[(RELEASE_VERSION_KEY, &at)])).unwrap();
        assert_eq!(
            p.patch,
            Some(json!({"metadata": {"annotations": {RELEASE_IMAGE_VERSION: at}}}))
        );
        let over = format!("{at}4");
        assert_eq!(
            super::plan(&on_a(None), &release(&[(RELEASE_VERSION_KEY, &over)])).unwrap_err(),
            Refused::BadValue {
                configmap: "openshift-machine-config-operator/machine-config-osimageurl".into(),
                key: RELEASE_VERSION_KEY,
                why: format!(
                    "{} bytes, longer than the limit of {MAX_RELEASE_VERSION_BYTES}",
                    MAX_RELEASE_VERSION_BYTES + 1
                ),
            }
        );
    }

    #[test]
    fn a_refused_os_image_or_release_version_changes_nothing() {
        let why = |sources: &Sources| super::plan(&on_a(None), sources).unwrap_err().to_string();
        let named = "ConfigMap openshift-machine-config-operator/machine-config-osimageurl";
        // Whitespace or a control character, in an image or the version.
        for (key, bad) in [
            ("baseOSContainerImage", format!("{IMAGE_B} ")),
            (
                "baseOSExtensionsContainerImage",
                "quay.example.com/os\n:1".into(),
            ),
            (RELEASE_VERSION_KEY, "4.17.2 beta".into()),
            (RELEASE_VERSION_KEY, "4.17\u{7f}".into()),
        ] {
            assert_eq!(
                why(&release(&[(key, &bad)])),
                format!("{named} key {key}: contains whitespace or a control character")
            );
        }
        // No image reference.
        assert_eq!(
            why(&release(&[(
                "baseOSContainerImage",
                "quay.example.com/OS:1"
            )])),
            format!(
                "{named} key baseOSContainerImage: \"quay.example.com/OS:1\" is not an image reference: its name is not [host[:port]/]path, with lower case path components"
            )
        );
        // Every other change held back with it: the good image, the version, the client CA.
        let mut sources = release(&[
            (RELEASE_VERSION_KEY, "4.17.2"),
            ("baseOSContainerImage", IMAGE_B),
            ("baseOSExtensionsContainerImage", "quay.example.com/os-ext:"),
        ]);
        sources.client_ca = Some(cm(CLIENT_CA, &[(CLIENT_CA_KEY, PEM)], &[]));
        assert_eq!(
            why(&sources),
            format!(
                "{named} key baseOSExtensionsContainerImage: \"quay.example.com/os-ext:\" is not an image reference: its tag is not 1 to 128 letters, digits, '_', '.' or '-' (not first)"
            )
        );
    }

    const PAUSE_A: &str = "quay.example.com/release/pod@sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
    const PAUSE_B: &str = "quay.example.com/release/pod:4.17.2";

    /// The release's images ConfigMap with `images.json` holding `json` (none: no key).
    fn release_images(json: Option<&str>) -> Sources {
        let data: Vec<(&str, &str)> = json.map(|j| (RELEASE_IMAGES_KEY, j)).into_iter().collect();
        let mut c = cm(RELEASE_IMAGES, &data, &[]);
        c.metadata.namespace = Some(OPERATOR_NAMESPACE.into());
        Sources {
            release_images: Some(c),
            ..Default::default()
        }
    }

    /// A ControllerConfig whose `spec.images` is `images`.
    fn with_images(images: Value) -> ControllerConfig {
        let mut spec = ControllerConfigSpec::default();
        spec.other.insert("images".into(), images);
        ControllerConfig::new(CC, spec)
    }

    #[test]
    fn spec_images_follow_the_release_images_json_as_upstream_maps_them() {
        let json = json!({
            "releaseVersion": "4.17.2",
            "machineConfigOperator": "quay.example.com/release/mco:1",
            "infraImage": PAUSE_B,
            "keepalivedImage": "quay.example.com/release/keepalived:1",
            "corednsImage": "quay.example.com/release/coredns:1",
            "haproxyImage": "quay.example.com/release/haproxy:1",
            "baremetalRuntimeCfgImage": "quay.example.com/release/baremetal:1",
            "kubeRbacProxy": "quay.example.com/release/rbac-proxy:1",
            "dockerRegistryImage": "quay.example.com/release/registry:1",
            // Not copied by upstream's operator into spec.images.
            "oauthProxy": "quay.example.com/release/oauth:1",
            "baseOSContainerImage": IMAGE_B,
        })
        .to_string();
        let cc = with_images(json!({"infraImageKey": PAUSE_A, "extra": "kept"}));
        let p = super::plan(&cc, &release_images(Some(&json))).unwrap();
        assert_eq!(p.changed, ["images"]);
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"images": {
                "machineConfigOperatorKey": "quay.example.com/release/mco:1",
                "apiServerWatcherKey": "quay.example.com/release/mco:1",
                "infraImageKey": PAUSE_B,
                "keepalivedImage": "quay.example.com/release/keepalived:1",
                "corednsImage": "quay.example.com/release/coredns:1",
                "haproxyImage": "quay.example.com/release/haproxy:1",
                "baremetalRuntimeCfgImage": "quay.example.com/release/baremetal:1",
                "kubeRbacProxyImage": "quay.example.com/release/rbac-proxy:1",
                "dockerRegistryImage": "quay.example.com/release/registry:1",
            }}}))
        );
        // The OS images are not taken from here (they come from machine-config-osimageurl).
        assert_eq!(p.os_images, None);
        // In step: nothing.
        let cc = with_images(json!({"infraImageKey": PAUSE_B, "extra": "kept"}));
        let pause_only = json!({"infraImage": PAUSE_B}).to_string();
        assert_eq!(
            super::plan(&cc, &release_images(Some(&pause_only))),
            Ok(Plan::default())
        );
        // One image changed: that key alone; the merge patch leaves the others.
        let cc = with_images(json!({"infraImageKey": PAUSE_A, "corednsImage": "c:1"}));
        let p = super::plan(&cc, &release_images(Some(&pause_only))).unwrap();
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"images": {"infraImageKey": PAUSE_B}}}))
        );
        // A ControllerConfig without spec.images gets the key.
        let p = super::plan(
            &ControllerConfig::new(CC, ControllerConfigSpec::default()),
            &release_images(Some(&pause_only)),
        )
        .unwrap();
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"images": {"infraImageKey": PAUSE_B}}}))
        );
    }

    #[test]
    fn the_release_is_taken_only_once_both_configmaps_name_it() {
        // As the CVO upgrades: images.json of release B is written first, while the OS images
        // still name A. Nothing is taken, so the pause image starts no rollout of its own.
        let cc = on_a(Some("4.16.8"));
        let images_b = json!({"releaseVersion": "4.17.2", "infraImage": PAUSE_B}).to_string();
        let mut sources = release_a();
        sources.release_images = release_images(Some(&images_b)).release_images;
        let p = super::plan(&cc, &sources).unwrap();
        assert_eq!((p.patch, p.changed.len()), (None, 0));
        assert_eq!(
            p.warnings,
            [
                "ConfigMap openshift-machine-config-operator/machine-config-osimageurl is of release \"4.16.8\" and openshift-machine-config-operator/machine-config-operator-images of release \"4.17.2\"; the release's images wait until both name one release"
            ]
        );
        // Then the OS images of B: both are taken in one patch, so one render and one reboot.
        sources.os_images = release(&[
            (RELEASE_VERSION_KEY, "4.17.2"),
            ("baseOSContainerImage", IMAGE_B),
        ])
        .os_images;
        let p = super::plan(&cc, &sources).unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let patch = p.patch.unwrap();
        assert_eq!(patch["spec"]["baseOSContainerImage"], IMAGE_B);
        assert_eq!(patch["spec"]["images"]["infraImageKey"], PAUSE_B);
        assert_eq!(
            patch["metadata"]["annotations"][RELEASE_IMAGE_VERSION],
            "4.17.2"
        );
        // A ConfigMap naming no release is not held back by the other.
        let images_unversioned = json!({"infraImage": PAUSE_B}).to_string();
        let mut sources = release_a();
        sources.release_images = release_images(Some(&images_unversioned)).release_images;
        let p = super::plan(&cc, &sources).unwrap();
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"images": {"infraImageKey": PAUSE_B}}}))
        );
    }

    #[test]
    fn an_absent_release_images_configmap_key_or_image_leaves_spec_images() {
        let cc = with_images(json!({"infraImageKey": PAUSE_A}));
        // No ConfigMap (not OpenShift), no key, an empty key.
        for sources in [
            Sources::default(),
            release_images(None),
            release_images(Some("")),
        ] {
            assert_eq!(super::plan(&cc, &sources), Ok(Plan::default()));
        }
        // An image absent, null or empty: its key is never blanked.
        for json in [
            json!({"releaseVersion": "4.17.2"}),
            json!({"infraImage": null}),
            json!({"infraImage": ""}),
        ] {
            assert_eq!(
                super::plan(&cc, &release_images(Some(&json.to_string()))),
                Ok(Plan::default()),
                "{json}"
            );
        }
        // binaryData is not read, as upstream reads data alone.
        let mut bin = cm(
            RELEASE_IMAGES,
            &[],
            &[(RELEASE_IMAGES_KEY, br#"{"infraImage":"p:1"}"#.as_slice())],
        );
        bin.metadata.namespace = Some(OPERATOR_NAMESPACE.into());
        let only_binary = Sources {
            release_images: Some(bin),
            ..Default::default()
        };
        assert_eq!(super::plan(&cc, &only_binary), Ok(Plan::default()));
    }

    #[test]
    fn release_images_at_the_limits_are_taken_and_one_byte_more_refused() {
        let named = "ConfigMap openshift-machine-config-operator/machine-config-operator-images key images.json";
        let cc = with_images(json!({}));
        // An image reference of MAX_IMAGE_REF_BYTES, then one byte more.
        let prefix = "quay.example.com/pod@sha256:";
        let at = format!("{prefix}{}", "a".repeat(MAX_IMAGE_REF_BYTES - prefix.len()));
        assert_eq!(at.len(), MAX_IMAGE_REF_BYTES);
        let p = super::plan(
            &cc,
            &release_images(Some(&json!({"infraImage": at}).to_string())),
        )
        .unwrap();
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"images": {"infraImageKey": at}}}))
        );
        let over = format!("{at}a");
        assert_eq!(
            super::plan(
                &cc,
                &release_images(Some(&json!({"infraImage": over}).to_string()))
            )
            .unwrap_err()
            .to_string(),
            format!(
                "{named}: infraImage: {} bytes, longer than the limit of {MAX_IMAGE_REF_BYTES}",
                MAX_IMAGE_REF_BYTES + 1
            )
        );
        // images.json of MAX_RELEASE_IMAGES_BYTES (padded with a field upstream does not copy),
        // then one byte more.
        let sized = |len: usize| {
            let bare = json!({"infraImage": PAUSE_B, "pad": ""}).to_string();
            let j = json!({"infraImage": PAUSE_B, "pad": "x".repeat(len - bare.len())}).to_string();
            assert_eq!(j.len(), len);
            j
        };
        let p = super::plan(&cc, &release_images(Some(&sized(MAX_RELEASE_IMAGES_BYTES)))).unwrap();
        assert_eq!(
            p.patch,
            Some(json!({"spec": {"images": {"infraImageKey": PAUSE_B}}}))
        );
        assert_eq!(
            super::plan(
                &cc,
                &release_images(Some(&sized(MAX_RELEASE_IMAGES_BYTES + 1)))
            )
            .unwrap_err(),
            Refused::BadValue {
                configmap: "openshift-machine-config-operator/machine-config-operator-images"
                    .into(),
                key: RELEASE_IMAGES_KEY,
                why: format!(
                    "{} bytes, longer than the limit of {MAX_RELEASE_IMAGES_BYTES}",
                    MAX_RELEASE_IMAGES_BYTES + 1
                ),
            }
        );
    }

    #[test]
    fn a_refused_release_image_changes_nothing() {
        let named = "ConfigMap openshift-machine-config-operator/machine-config-operator-images key images.json";
        let cc = with_images(json!({"infraImageKey": PAUSE_A}));
        let why = |json: &str, sources: Option<Sources>| {
            let mut s = sources.unwrap_or_default();
            s.release_images = release_images(Some(json)).release_images;
            super::plan(&cc, &s).unwrap_err().to_string()
        };
        assert_eq!(
            why("{\"infraImage\":", None),
            format!("{named}: is not JSON: EOF while parsing a value at line 1 column 14")
        );
        assert_eq!(
            why("[\"p:1\"]", None),
            format!("{named}: is not a JSON object but [\"p:1\"]")
        );
        assert_eq!(
            why(r#"{"infraImage": 1}"#, None),
            format!("{named}: infraImage: is not a string but 1")
        );
        for bad in [format!("{PAUSE_B} "), "quay.example.com/pod\t:1".into()] {
            assert_eq!(
                why(&json!({"infraImage": bad}).to_string(), None),
                format!("{named}: infraImage: contains whitespace or a control character")
            );
        }
        // A quote would break CRI-O's TOML line: no image reference.
        assert_eq!(
            why(&json!({"infraImage": "pod\"x"}).to_string(), None),
            format!(
                "{named}: infraImage: \"pod\\\"x\" is not an image reference: its name is not [host[:port]/]path, with lower case path components"
            )
        );
        // A good pause image, the OS images and the client CA are held back with a bad other.
        let mut others = release(&[("baseOSContainerImage", IMAGE_B)]);
        others.client_ca = Some(cm(CLIENT_CA, &[(CLIENT_CA_KEY, PEM)], &[]));
        assert_eq!(
            why(
                &json!({"infraImage": PAUSE_B, "haproxyImage": "quay.example.com/HA:1"})
                    .to_string(),
                Some(others)
            ),
            format!(
                "{named}: haproxyImage: \"quay.example.com/HA:1\" is not an image reference: its name is not [host[:port]/]path, with lower case path components"
            )
        );
    }

    #[test]
    fn the_os_images_release_is_bounded() {
        let mut cm = ConfigMap::default();
        assert_eq!(os_images_release(&cm), None);
        cm.data = Some([(RELEASE_VERSION_KEY.to_string(), String::new())].into());
        assert_eq!(os_images_release(&cm), None);
        cm.data = Some([(RELEASE_VERSION_KEY.to_string(), "4.18.2".to_string())].into());
        assert_eq!(os_images_release(&cm), Some("4.18.2"));
        let longest = "4".repeat(MAX_RELEASE_VERSION_BYTES);
        cm.data = Some([(RELEASE_VERSION_KEY.to_string(), longest.clone())].into());
        assert_eq!(os_images_release(&cm), Some(longest.as_str()));
        cm.data = Some([(RELEASE_VERSION_KEY.to_string(), longest + "4")].into());
        assert_eq!(os_images_release(&cm), None);
    }
}
