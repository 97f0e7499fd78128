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
//!   empty. A kept `00-<role>` writes both to the nodes ([`crate::templates`]).
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
//! control character, or more registry bundles than the daemon writes ([`MAX_REGISTRY_BUNDLES`]),
//! is refused, naming its object, and nothing is changed.
//!
//! [`plan`] is the pure decision: the JSON merge patch of the spec fields that differ. [`run`]
//! watches the sources by name and patches the ControllerConfig when the plan says so.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use mco_api::controllerconfig::MAX_BUNDLE_BYTES;
use mco_api::generators::{CLUSTER_CONFIG_NAME as PROXY_NAME, IMAGE_CONFIG_NAME, Image};
use mco_api::{ControllerConfig, ControllerConfigSpec, ImageRegistryBundle};
use mco_api::{Proxy, ProxyStatus};
use mco_rollout::plan::EventKind;
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use crate::Error;
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
}

/// The outcome of [`plan`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The JSON merge patch of the ControllerConfig; `None` when the spec is as it should be.
    pub patch: Option<Value>,
    /// The spec fields the patch sets.
    pub changed: Vec<&'static str>,
    /// What upstream says as a warning and goes on: the named user ConfigMap is missing.
    pub warnings: Vec<String>,
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

/// The merge patch bringing `spec` to what `sources` say, or none. Pure.
pub fn plan(spec: &ControllerConfigSpec, sources: &Sources) -> Result<Plan, Refused> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = Plan::default();
    let mut fields = Map::new();

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

    if !fields.is_empty() {
        out.patch = Some(json!({ "spec": fields }));
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

/// What a by-name watch last delivered of its object: the sync reads the sources from here, so
/// a wake costs no request.
#[derive(Debug, Clone)]
enum Seen<T> {
    /// Not listed yet: the sync waits for the first list, which wakes it.
    Unknown,
    /// Listed, and not there (or its kind is not served).
    Absent,
    Present(T),
    /// Never listed: the watch's error, the sync's failure until a list succeeds.
    Failed(String),
}

type Slot<T> = Arc<Mutex<Seen<T>>>;

fn slot<T>() -> Slot<T> {
    Arc::new(Mutex::new(Seen::Unknown))
}

/// The object a slot holds: `Ok(None)` absent, `Err(None)` not listed yet, `Err(Some(why))`
/// the watch could not list it.
fn seen<T: Clone>(slot: &Slot<T>, what: &str) -> Result<Option<T>, Option<String>> {
    match &*slot.lock().unwrap_or_else(|e| e.into_inner()) {
        Seen::Unknown => Err(None),
        Seen::Absent => Ok(None),
        Seen::Present(t) => Ok(Some(t.clone())),
        Seen::Failed(why) => Err(Some(format!("watching the {what}: {why}"))),
    }
}

/// Keeps `slot` at what the watch of the object `name` delivers, yielding a `()` each time it
/// changes (also at its deletion and each relist). A list refused as not found (a kind the
/// server does not serve) is an absent object; another failure before the first list is kept
/// for the sync to report, and after it the last object stays while the watch retries.
fn follow<T>(
    api: Api<T>,
    name: &str,
    what: &'static str,
    quiet: bool,
    slot: Slot<T>,
) -> impl Stream<Item = ()> + Send + 'static
where
    T: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let mut listing: Option<T> = None;
    crate::by_name::watch(api, name).filter_map(move |r| {
        if let Err(e) = &r {
            if quiet || no_kind(e) {
                tracing::debug!(error = %e, "{what} watch failed; retrying");
            } else {
                tracing::warn!(error = %e, "{what} watch failed; retrying");
            }
        }
        let mut seen = slot.lock().unwrap_or_else(|e| e.into_inner());
        future::ready(observe(&mut listing, &mut seen, r).then_some(()))
    })
}

/// A list refused as not found: the server does not serve the kind.
fn no_kind(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404)
}

/// Takes one item of a by-name watch into `seen` (`listing` holds the object of a relist until
/// it is done); whether `seen` changed. Pure.
fn observe<T>(
    listing: &mut Option<T>,
    seen: &mut Seen<T>,
    r: watcher::Result<watcher::Event<T>>,
) -> bool {
    let now = match r {
        Ok(watcher::Event::Init) => {
            *listing = None;
            return false;
        }
        Ok(watcher::Event::InitApply(o)) => {
            *listing = Some(o);
            return false;
        }
        Ok(watcher::Event::InitDone) => listing.take().map_or(Seen::Absent, Seen::Present),
        Ok(watcher::Event::Apply(o)) => Seen::Present(o),
        Ok(watcher::Event::Delete(_)) => Seen::Absent,
        Err(e) if no_kind(&e) => match seen {
            Seen::Absent => return false,
            _ => Seen::Absent,
        },
        // Before the first list the failure is the sync's; after it the last object stays
        // while the watch retries.
        Err(e) => match seen {
            Seen::Unknown => Seen::Failed(e.to_string()),
            Seen::Failed(was) if *was != e.to_string() => Seen::Failed(e.to_string()),
            _ => return false,
        },
    };
    *seen = now;
    true
}

/// Runs `changes` until dropped, waking the sync at each.
fn forward(
    changes: impl Stream<Item = ()> + Send + 'static,
    wake: &futures::channel::mpsc::UnboundedSender<()>,
) -> AbortOnDrop {
    let wake = wake.clone();
    AbortOnDrop(tokio::spawn(changes.for_each(move |()| {
        let _ = wake.unbounded_send(());
        future::ready(())
    })))
}

/// The watch of a ConfigMap of `openshift-config` another object names, replaced when the name
/// changes.
struct NamedWatch {
    what: &'static str,
    watch: Option<(String, Slot<ConfigMap>, AbortOnDrop)>,
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
    _tasks: Vec<AbortOnDrop>,
}

impl Watches {
    fn start(ctx: &Ctx, wake: &futures::channel::mpsc::UnboundedSender<()>) -> Watches {
        let managed = || Api::<ConfigMap>::namespaced(ctx.client.clone(), MANAGED_NAMESPACE);
        let (client_ca, registry_ca, image) = (slot(), slot(), slot());
        let (proxy, user_ca_bundle) = (slot(), slot());
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
        let (
            Some(user_ca),
            Some(client_ca),
            Some(registry_ca),
            Some(proxy_ca),
            Some(user_ca_bundle),
        ) = (user_ca, client_ca, registry_ca, proxy_ca, user_ca_bundle)
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
    let plan = plan(&cc.spec, &sources)?;
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
    tracing::info!(controllerconfig = name, changed = ?plan.changed, "ControllerConfig CA bundles and proxy brought to the cluster's");
    Ok(())
}

/// Keeps the ControllerConfig's CA bundles in step with the cluster's until dropped: syncs at
/// start, on every change of a source, and every `ctx.config.resync` (a hand edit of the spec
/// is undone then). A failed sync is retried with the controller's backoff, and reported as a
/// `ControllerConfigSyncFailed` event when its message changes.
pub async fn run(ctx: Arc<Ctx>) {
    let (wake, mut woken) = futures::channel::mpsc::unbounded::<()>();
    let mut watches = Watches::start(&ctx, &wake);
    let mut failures: u32 = 0;
    let mut reported: Option<String> = None;
    let mut warned = vec![];
    loop {
        match sync_once(&ctx, &mut watches, &wake, &mut warned).await {
            Ok(()) => {
                failures = 0;
                reported = None;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let message = format!("syncing the CA bundles and proxy from the cluster: {e}");
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
                let wait = error_backoff(ctx.config.error_requeue, failures);
                tokio::time::sleep(wait).await;
                // Changes seen meanwhile are taken by the retry.
                while woken.try_recv().is_ok() {}
                continue;
            }
        }
        // Wait for a change, then take every change queued with it in one sync.
        if woken.next().await.is_none() {
            return;
        }
        while woken.try_recv().is_ok() {}
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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

    #[test]
    fn a_watch_keeps_the_last_object_it_delivered() {
        use watcher::Event;
        let status = |code: u16| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("x", "NotFound").with_code(code),
            ))
        };
        let a = cm("a", &[("k", "1")], &[]);
        let b = cm("a", &[("k", "2")], &[]);
        let mut listing = None;
        let mut seen: Seen<ConfigMap> = Seen::Unknown;
        let name = |s: &Seen<ConfigMap>| match s {
            Seen::Unknown => "unknown".to_owned(),
            Seen::Absent => "absent".to_owned(),
            Seen::Present(cm) => format!("present {:?}", cm.data.as_ref().unwrap()["k"]),
            Seen::Failed(why) => format!("failed {why}"),
        };
        // A failure before the first list is kept for the sync to report, once.
        let forbidden = || Err(watcher::Error::InitialListFailed(status(403)));
        assert!(observe(&mut listing, &mut seen, forbidden()));
        assert!(name(&seen).starts_with("failed "), "{}", name(&seen));
        assert!(!observe(&mut listing, &mut seen, forbidden()));
        // The list: nothing until it is done.
        assert!(!observe(&mut listing, &mut seen, Ok(Event::Init)));
        assert!(!observe(
            &mut listing,
            &mut seen,
            Ok(Event::InitApply(a.clone()))
        ));
        assert!(name(&seen).starts_with("failed "));
        assert!(observe(&mut listing, &mut seen, Ok(Event::InitDone)));
        assert_eq!(name(&seen), "present \"1\"");
        assert!(observe(
            &mut listing,
            &mut seen,
            Ok(Event::Apply(b.clone()))
        ));
        assert_eq!(name(&seen), "present \"2\"");
        // A failure after it: the last object stays while the watch retries.
        assert!(!observe(&mut listing, &mut seen, forbidden()));
        assert_eq!(name(&seen), "present \"2\"");
        assert!(observe(&mut listing, &mut seen, Ok(Event::Delete(b))));
        assert_eq!(name(&seen), "absent");
        // A relist finds it again; one that finds nothing makes it absent, as does a kind not
        // served.
        for r in [Ok(Event::Init), Ok(Event::InitApply(a))] {
            assert!(!observe(&mut listing, &mut seen, r));
        }
        assert!(observe(&mut listing, &mut seen, Ok(Event::InitDone)));
        assert_eq!(name(&seen), "present \"1\"");
        assert!(!observe(&mut listing, &mut seen, Ok(Event::Init)));
        assert!(observe(&mut listing, &mut seen, Ok(Event::InitDone)));
        assert_eq!(name(&seen), "absent");
        let mut unserved: Seen<ConfigMap> = Seen::Unknown;
        let not_found = || Err(watcher::Error::InitialListFailed(status(404)));
        assert!(observe(&mut None, &mut unserved, not_found()));
        assert_eq!(name(&unserved), "absent");
        assert!(!observe(&mut None, &mut unserved, not_found()));
    }
}
