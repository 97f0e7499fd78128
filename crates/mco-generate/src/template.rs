//! The template controller's output: each role's base MachineConfigs, `00-<role>`,
//! `01-<role>-kubelet` and `01-<role>-container-runtime`, from the ControllerConfig, the two
//! inputs upstream reads beside it ([`Cluster`]: the pull secret and `APIServer/cluster`'s TLS
//! profile) and mco's templates for platform `None`.
//!
//! The templates are text files under `templates/`, laid out as upstream's are
//! (`<role>/<name>/_base/{files,units}`, with `common/` for what every role gets), and compiled
//! into the binary, so the controller, `mco bootstrap` and the tests render the same text. They
//! are mco's own, modelled on upstream's: the kubelet config and unit, CRI-O's defaults,
//! `registries.conf`, `policy.json`, `storage.conf`, the proxy environment, the additional
//! trust bundle and a few sysctls.
//!
//! The kubelet CA (`/etc/kubernetes/kubelet-ca.crt`) is not a template file: as in current
//! upstream, the daemon's certificate writer writes it from the ControllerConfig, so a CA
//! rotation needs no new rendered config, drain or reboot. `kubelet.conf` only names it.
//!
//! The additional trust bundle (`spec.additionalTrustBundle`) lands in each role's `00-<role>`
//! at [`TRUST_BUNDLE_FILE`], mode 0600, as upstream's; the daemon applies a change of it with
//! `update-ca-trust` and a CRI-O restart, without a drain or reboot. Unlike upstream, which
//! writes the file empty when there is no bundle, mco writes it only when there is one: a
//! cluster without a bundle keeps the configs (and rendered config hash) it had before the
//! file was templated, so upgrading mco rolls nothing out to it. The bundle is read as the
//! ControllerConfig's other bundles are ([`trust_bundle`]).
//!
//! The templating is a small subset of Go's `text/template`, enough for these files:
//! `{{name}}` is replaced by an input; a line holding an input that is not set is left out; a
//! `{{if name}}` … `{{end}}` block (each on its own line) is kept only when the input is set.
//! A file or drop-in that renders to blank is not written.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use mco_api::constants::annotations;
use mco_api::generators::TlsSecurityProfile;
use mco_api::{ControllerConfig, ControllerConfigSpec, MachineConfig, MachineConfigSpec};
use serde_json::{Value, json};

use crate::{Error, IGNITION_VERSION, ROLE_LABEL};

/// The roles with templates. `arbiter` (the third control plane node of a two-node cluster) is
/// generated only for its topology ([`roles`]); custom pools select `worker`'s configs by label.
pub const ROLES: [&str; 3] = ["arbiter", "master", "worker"];

/// The role of an arbiter node, and the control plane topology that has one.
pub const ARBITER_ROLE: &str = "arbiter";
pub const ARBITER_TOPOLOGY: &str = "HighlyAvailableArbiter";

/// The longest value of one templated input, in bytes. A pull spec or a proxy URL is far
/// shorter; `noProxy` lists are the longest real values, at a few hundred bytes.
pub const MAX_VALUE_BYTES: usize = 4096;

/// The platform mco has templates for.
pub const PLATFORM_NONE: &str = "None";

/// Which of a role's three MachineConfigs a template belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mc {
    Base,
    Kubelet,
    ContainerRuntime,
}

impl Mc {
    fn name(self, role: &str) -> String {
        match self {
            Mc::Base => format!("00-{role}"),
            Mc::Kubelet => format!("01-{role}-kubelet"),
            Mc::ContainerRuntime => format!("01-{role}-container-runtime"),
        }
    }
}

/// What a template becomes in the Ignition config.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A file at this path, mode 0644.
    File(&'static str),
    /// A file at this path only root may read (mode 0600): credentials, and the trust bundle,
    /// as upstream's.
    SecretFile(&'static str),
    /// A whole unit, enabled.
    Unit(&'static str),
    /// A unit without contents of its own (`enabled` unset).
    UnitContents(&'static str),
    /// A drop-in: unit name, drop-in name.
    Dropin(&'static str, &'static str),
}

struct Template {
    /// Empty: every role.
    roles: &'static [&'static str],
    mc: Mc,
    kind: Kind,
    /// The path under `templates/`, for error messages.
    source: &'static str,
    text: &'static str,
}

macro_rules! t {
    ($roles:expr, $mc:expr, $kind:expr, $src:literal) => {
        Template {
            roles: $roles,
            mc: $mc,
            kind: $kind,
            source: $src,
            text: include_str!(concat!("../templates/", $src)),
        }
    };
}

const KUBELET_SERVICE: &str = "kubelet.service";
/// Where the pull secret lands: the kubelet's and CRI-O's credentials, and what the daemon
/// hands rpm-ostree for an OS image.
pub const PULL_SECRET_FILE: &str = "/var/lib/kubelet/config.json";
const CRIO_SERVICE: &str = "crio.service";
const DEFAULT_ENV_DROPIN: &str = "10-mco-default-env.conf";

const EVERY_ROLE: &[&str] = &[];
/// An arbiter's base and kubelet config are the master's, as upstream's are; only its kubelet
/// unit differs (its label and taint).
const CONTROL_PLANE: &[&str] = &["master", ARBITER_ROLE];

const TEMPLATES: &[Template] = &[
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::File("/etc/sysctl.d/inotify.conf"),
        "common/_base/files/sysctl-inotify.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::File("/etc/sysctl.d/vm-max-map.conf"),
        "common/_base/files/sysctl-vm-max-map.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::File("/etc/containers/storage.conf"),
        "common/_base/files/container-storage.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::SecretFile(PULL_SECRET_FILE),
        "common/_base/files/pull-secret.json"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::File("/etc/mco/proxy.env"),
        "common/_base/files/mco-proxy.env"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::SecretFile(TRUST_BUNDLE_FILE),
        "common/_base/files/additional-trust-bundle.crt"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::File("/etc/systemd/system/kubelet.service.d/20-logging.conf"),
        "common/_base/files/kubelet-log-level.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::UnitContents("kubelet-dependencies.target"),
        "common/_base/units/kubelet-dependencies.target"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::Dropin(CRIO_SERVICE, "05-mco-ordering.conf"),
        "common/_base/units/crio-ordering.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::Dropin(CRIO_SERVICE, DEFAULT_ENV_DROPIN),
        "common/_base/units/default-env.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::Base,
        Kind::Dropin(KUBELET_SERVICE, DEFAULT_ENV_DROPIN),
        "common/_base/units/default-env.conf"
    ),
    t!(
        CONTROL_PLANE,
        Mc::Base,
        Kind::File("/etc/systemd/system.conf.d/kubelet-cgroups.conf"),
        "master/00-master/_base/files/kubelet-cgroups.conf"
    ),
    t!(
        CONTROL_PLANE,
        Mc::Base,
        Kind::File("/etc/node-sizing-enabled.env"),
        "master/00-master/_base/files/node-sizing-enabled.env"
    ),
    t!(
        &["worker"],
        Mc::Base,
        Kind::File("/etc/systemd/system.conf.d/kubelet-cgroups.conf"),
        "worker/00-worker/_base/files/kubelet-cgroups.conf"
    ),
    t!(
        CONTROL_PLANE,
        Mc::Kubelet,
        Kind::File(crate::kubelet::KUBELET_CONF),
        "master/01-master-kubelet/_base/files/kubelet.conf"
    ),
    t!(
        &["master"],
        Mc::Kubelet,
        Kind::Unit(KUBELET_SERVICE),
        "master/01-master-kubelet/_base/units/kubelet.service"
    ),
    t!(
        &[ARBITER_ROLE],
        Mc::Kubelet,
        Kind::Unit(KUBELET_SERVICE),
        "arbiter/01-arbiter-kubelet/_base/units/kubelet.service"
    ),
    t!(
        &["worker"],
        Mc::Kubelet,
        Kind::File(crate::kubelet::KUBELET_CONF),
        "worker/01-worker-kubelet/_base/files/kubelet.conf"
    ),
    t!(
        &["worker"],
        Mc::Kubelet,
        Kind::Unit(KUBELET_SERVICE),
        "worker/01-worker-kubelet/_base/units/kubelet.service"
    ),
    t!(
        EVERY_ROLE,
        Mc::ContainerRuntime,
        Kind::File(CRIO_CONF),
        "common/01-container-runtime/_base/files/crio.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::ContainerRuntime,
        Kind::File(crate::registries::REGISTRIES_CONF),
        "common/01-container-runtime/_base/files/registries.conf"
    ),
    t!(
        EVERY_ROLE,
        Mc::ContainerRuntime,
        Kind::File(crate::registries::POLICY_JSON),
        "common/01-container-runtime/_base/files/policy.json"
    ),
];

/// The roles generated for a ControllerConfig: `master` and `worker`, and `arbiter` when
/// `spec.infra.status.controlPlaneTopology` is `HighlyAvailableArbiter`, as upstream's.
pub fn roles(spec: &ControllerConfigSpec) -> Vec<&'static str> {
    let topology = spec
        .other
        .get("infra")
        .and_then(|i| i.pointer("/status/controlPlaneTopology"))
        .and_then(Value::as_str);
    ROLES
        .into_iter()
        .filter(|r| *r != ARBITER_ROLE || topology == Some(ARBITER_TOPOLOGY))
        .collect()
}

/// Every name the template controller writes for a ControllerConfig, sorted.
pub fn names(spec: &ControllerConfigSpec) -> Vec<String> {
    names_of(&roles(spec))
}

/// Every name the template controller may write, for any topology, sorted.
pub fn all_names() -> Vec<String> {
    names_of(&ROLES)
}

fn names_of(roles: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = roles
        .iter()
        .flat_map(|r| [Mc::Base, Mc::Kubelet, Mc::ContainerRuntime].map(|m| m.name(r)))
        .collect();
    out.sort();
    out
}

/// Whether `name` is one the template controller writes.
pub fn is_template_name(name: &str) -> bool {
    ROLES.iter().any(|r| {
        [Mc::Base, Mc::Kubelet, Mc::ContainerRuntime]
            .iter()
            .any(|m| m.name(r) == name)
    })
}

/// The templates' inputs, read and checked from the ControllerConfig's spec.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inputs {
    /// `spec.clusterDNSIP`: the kubelet's `clusterDNS`.
    pub cluster_dns_ip: Option<String>,
    /// `spec.images.infraImageKey`: CRI-O's pause image.
    pub infra_image: Option<String>,
    /// `spec.proxy.httpProxy`, `httpsProxy`, `noProxy`.
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    /// `spec.ipFamilies`: `::` for an IPv6-first cluster, else `0.0.0.0`.
    pub node_ip: &'static str,
    /// The pull secret, compacted to one line.
    pub pull_secret: Option<String>,
    /// `spec.additionalTrustBundle`, decoded and checked ([`trust_bundle`]), trailing
    /// whitespace cut; `None` when there is none.
    pub additional_trust_bundle: Option<String>,
    /// The kubelet's `tlsMinVersion` and `tlsCipherSuites`, from the APIServer's profile.
    pub tls_min_version: String,
    pub tls_cipher_suites: Vec<String>,
}

/// The most bytes of a pull secret's `.dockerconfigjson`. Real ones hold a few registries in a
/// few KiB; the file lands in both roles' `00-<role>` and in every rendered config, percent
/// encoded, and a MachineConfig must stay well inside etcd's object limit.
pub const MAX_PULL_SECRET_BYTES: usize = 64 * 1024;

/// The Secret type upstream requires of a pull secret, and its key.
pub const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";

/// What the templates read from the cluster besides the ControllerConfig, as upstream's
/// template controller does.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cluster<'a> {
    /// The `.dockerconfigjson` of the Secret `spec.pullSecret` names; `None` when it names
    /// none, and then no pull secret file is written.
    pub pull_secret: Option<&'a [u8]>,
    /// `APIServer/cluster`'s `spec.tlsSecurityProfile`; `None` is upstream's default,
    /// `Intermediate`.
    pub tls_profile: Option<&'a TlsSecurityProfile>,
}

/// The Secret `spec.pullSecret` names, as (namespace, name); `None` when it names none. A
/// reference without a namespace or name is refused, naming the field.
pub fn pull_secret_ref(spec: &ControllerConfigSpec) -> Result<Option<(String, String)>, Error> {
    let spec = Value::Object(spec.other.clone());
    match spec.get("pullSecret") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(_)) => {}
        Some(other) => {
            return Err(Error::Refused(format!(
                "spec.pullSecret: must be an object reference, not {other}"
            )));
        }
    }
    let mut out = Vec::with_capacity(2);
    for key in ["namespace", "name"] {
        match string_at(&spec, &["pullSecret", key])? {
            Some(v) => out.push(v),
            None => {
                return Err(Error::Refused(format!(
                    "spec.pullSecret.{key}: required to name the pull secret"
                )));
            }
        }
    }
    let name = out.pop().unwrap_or_default();
    let namespace = out.pop().unwrap_or_default();
    Ok(Some((namespace, name)))
}

/// The pull secret's `.dockerconfigjson`, checked as upstream checks it (the type; its
/// message) and for presence.
pub fn pull_secret_data(secret: &Secret) -> Result<&[u8], Error> {
    let what = format!(
        "spec.pullSecret: Secret {}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    );
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != DOCKER_CONFIG_JSON_TYPE {
        return Err(Error::Refused(format!(
            "{what}: expected secret type {DOCKER_CONFIG_JSON_TYPE} found {type_}"
        )));
    }
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(DOCKER_CONFIG_JSON_KEY))
        .map(|b| b.0.as_slice())
        .ok_or_else(|| Error::Refused(format!("{what}: data.{DOCKER_CONFIG_JSON_KEY} is missing")))
}

/// The pull secret as one line of JSON, as upstream compacts it. Never quotes the secret in
/// an error: the message lands in the ControllerConfig's status.
fn compact_pull_secret(raw: &[u8]) -> Result<String, Error> {
    let field = format!("spec.pullSecret: data.{DOCKER_CONFIG_JSON_KEY}");
    if raw.len() > MAX_PULL_SECRET_BYTES {
        return Err(Error::Refused(format!(
            "{field}: {} bytes, longer than the limit of {MAX_PULL_SECRET_BYTES}",
            raw.len()
        )));
    }
    // serde_json's own nesting limit (128) bounds the depth.
    let v: Value = serde_json::from_slice(raw).map_err(|e| {
        Error::Refused(format!(
            "{field}: not JSON: {} at line {} column {}",
            match e.classify() {
                serde_json::error::Category::Eof => "unexpected end of input",
                serde_json::error::Category::Io => "unreadable",
                _ => "invalid or too deeply nested JSON",
            },
            e.line(),
            e.column()
        ))
    })?;
    if !v.is_object() {
        return Err(Error::Refused(format!(
            "{field}: must be a JSON object, as in {{\"auths\": {{...}}}}"
        )));
    }
    Ok(v.to_string())
}

/// A string at `path` of the spec (`None` when absent, null or empty), checked against
/// [`MAX_VALUE_BYTES`] and for control characters, which would break the line it lands on.
fn string_at(spec: &Value, path: &[&str]) -> Result<Option<String>, Error> {
    let field = format!("spec.{}", path.join("."));
    let mut v = spec;
    for p in path {
        match v.get(p) {
            Some(next) => v = next,
            None => return Ok(None),
        }
    }
    let s = match v {
        Value::Null => return Ok(None),
        Value::String(s) => s,
        other => {
            return Err(Error::Refused(format!(
                "{field}: must be a string, not {other}"
            )));
        }
    };
    if s.len() > MAX_VALUE_BYTES {
        return Err(Error::Refused(format!(
            "{field}: {} bytes, longer than the limit of {MAX_VALUE_BYTES}",
            s.len()
        )));
    }
    if s.chars().any(char::is_control) {
        return Err(Error::Refused(format!(
            "{field}: {s:?} contains a control character"
        )));
    }
    Ok((!s.is_empty()).then(|| s.clone()))
}

fn proxy_url(spec: &Value, key: &str) -> Result<Option<String>, Error> {
    let v = string_at(spec, &["proxy", key])?;
    if let Some(u) = &v {
        let ok = (u.starts_with("http://") || u.starts_with("https://"))
            && u.len() > "https://".len()
            && !u.contains(char::is_whitespace);
        if !ok {
            return Err(Error::Refused(format!(
                "spec.proxy.{key}: {u:?} is not an http:// or https:// URL"
            )));
        }
    }
    Ok(v)
}

/// Reads the inputs from `spec` and `cluster`; a bad value is refused naming its field.
pub fn inputs(spec: &ControllerConfigSpec, cluster: &Cluster) -> Result<Inputs, Error> {
    let pull_secret = cluster.pull_secret.map(compact_pull_secret).transpose()?;
    let additional_trust_bundle = trust_bundle(spec)?;
    let additional_trust_bundle = additional_trust_bundle.trim_end();
    if !additional_trust_bundle.is_empty() {
        check_pem(TRUST_BUNDLE_FIELD, additional_trust_bundle.as_bytes())?;
    }
    let additional_trust_bundle =
        (!additional_trust_bundle.is_empty()).then(|| additional_trust_bundle.to_owned());
    let (tls_min_version, tls_cipher_suites) = match cluster.tls_profile {
        None => crate::kubelet::tls_profile(&TlsSecurityProfile::default())?,
        Some(p) => crate::kubelet::tls_profile(p)
            .map_err(|e| Error::Refused(format!("APIServer cluster: {e}")))?,
    };
    let spec = Value::Object(spec.other.clone());
    // mco has templates for platform None only; an absent platform is taken as None.
    if let Some(p) = string_at(&spec, &["infra", "status", "platformStatus", "type"])?
        && p != PLATFORM_NONE
    {
        return Err(Error::Refused(format!(
            "spec.infra.status.platformStatus.type: mco has templates for platform {PLATFORM_NONE} only, not {p:?}"
        )));
    }
    let cluster_dns_ip = string_at(&spec, &["clusterDNSIP"])?;
    if let Some(ip) = &cluster_dns_ip
        && ip.parse::<IpAddr>().is_err()
    {
        return Err(Error::Refused(format!(
            "spec.clusterDNSIP: {ip:?} is not an IP address"
        )));
    }
    let infra_image = infra_image(&spec)?;
    let node_ip = match string_at(&spec, &["ipFamilies"])?.as_deref() {
        None | Some("IPv4") | Some("DualStack") => "0.0.0.0",
        Some("IPv6") | Some("DualStackIPv6Primary") => "::",
        Some(other) => {
            return Err(Error::Refused(format!(
                "spec.ipFamilies: {other:?} is not one of IPv4, IPv6, DualStack, DualStackIPv6Primary"
            )));
        }
    };
    Ok(Inputs {
        cluster_dns_ip,
        infra_image,
        http_proxy: proxy_url(&spec, "httpProxy")?,
        https_proxy: proxy_url(&spec, "httpsProxy")?,
        no_proxy: string_at(&spec, &["proxy", "noProxy"])?,
        node_ip,
        pull_secret,
        additional_trust_bundle,
        tls_min_version,
        tls_cipher_suites,
    })
}

/// `spec.images.infraImageKey` (`spec`: the spec as JSON), CRI-O's pause image, checked to
/// stay within the quoted TOML string it lands in.
fn infra_image(spec: &Value) -> Result<Option<String>, Error> {
    let infra_image = string_at(spec, &["images", INFRA_IMAGE_KEY])?;
    if let Some(img) = &infra_image
        && img.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\')
    {
        return Err(Error::Refused(format!(
            "spec.images.{INFRA_IMAGE_KEY}: {img:?} is not an image pull spec"
        )));
    }
    Ok(infra_image)
}

/// The ControllerConfig field of the additional trust bundle, as errors name it.
const TRUST_BUNDLE_FIELD: &str = "spec.additionalTrustBundle";

/// `spec.additionalTrustBundle` as text: base64-decoded, at most
/// [`MAX_BUNDLE_BYTES`](mco_api::controllerconfig::MAX_BUNDLE_BYTES), UTF-8; empty when unset.
/// The PEM is not checked here ([`check_pem`]): a kept config follows what upstream's template
/// would write, unchecked.
pub fn trust_bundle(spec: &ControllerConfigSpec) -> Result<String, Error> {
    use base64::Engine as _;
    let field = TRUST_BUNDLE_FIELD;
    let raw = match spec.additional_trust_bundle.as_deref() {
        None | Some("") => vec![],
        Some(b) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| Error::Refused(format!("{field}: not base64: {e}")))?,
    };
    if raw.len() > mco_api::controllerconfig::MAX_BUNDLE_BYTES {
        return Err(Error::Refused(format!(
            "{field}: {} bytes, longer than the limit of {}",
            raw.len(),
            mco_api::controllerconfig::MAX_BUNDLE_BYTES
        )));
    }
    String::from_utf8(raw)
        .map_err(|_| Error::Refused(format!("{field}: not UTF-8 text, so not PEM")))
}

/// Refuses `pem` unless it reads as the controller reads the ControllerConfig's bundles for its
/// status: PEM `CERTIFICATE` blocks that parse, at least one, text around them ignored. The
/// message names `field` and is the status condition's.
fn check_pem(field: &str, pem: &[u8]) -> Result<(), Error> {
    let read = mco_pki::read(pem, field, mco_pki::Leniency::Strict, usize::MAX);
    if let Some(e) = read.error {
        return Err(Error::Refused(e.to_string()));
    }
    if read.certificates.is_empty() {
        return Err(Error::Refused(format!(
            "{field}: no PEM certificate in the bundle"
        )));
    }
    Ok(())
}

impl Inputs {
    fn vars(&self) -> BTreeMap<&'static str, Option<String>> {
        let proxy = self.http_proxy.is_some() || self.https_proxy.is_some();
        BTreeMap::from([
            ("clusterDNSIP", self.cluster_dns_ip.clone()),
            ("infraImage", self.infra_image.clone()),
            ("httpProxy", self.http_proxy.clone()),
            ("httpsProxy", self.https_proxy.clone()),
            ("noProxy", self.no_proxy.clone()),
            ("proxy", proxy.then(|| "true".to_owned())),
            ("nodeIP", Some(self.node_ip.to_owned())),
            ("pullSecret", self.pull_secret.clone()),
            (
                "additionalTrustBundle",
                self.additional_trust_bundle.clone(),
            ),
            ("tlsMinVersion", Some(self.tls_min_version.clone())),
            (
                "tlsCipherSuites",
                Some(self.tls_cipher_suites.join(", ")).filter(|s| !s.is_empty()),
            ),
        ])
    }
}

/// Renders one template: see the module's documentation for the syntax. An unknown input or
/// an unbalanced block is an error in the template itself.
fn render(text: &str, vars: &BTreeMap<&str, Option<String>>) -> Result<String, String> {
    let set = |name: &str| -> Result<Option<&String>, String> {
        match vars.get(name) {
            Some(v) => Ok(v.as_ref().filter(|s| !s.is_empty())),
            None => Err(format!("unknown input {name:?}")),
        }
    };
    let mut out = String::new();
    // Whether each open block is kept.
    let mut blocks: Vec<bool> = Vec::new();
    'lines: for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if let Some(name) = trimmed
            .strip_prefix("{{if ")
            .and_then(|r| r.strip_suffix("}}"))
        {
            blocks.push(set(name.trim())?.is_some());
            continue;
        }
        if trimmed == "{{end}}" {
            blocks.pop().ok_or("{{end}} without {{if}}")?;
            continue;
        }
        if blocks.contains(&false) {
            continue;
        }
        let mut rendered = String::with_capacity(line.len());
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            let end = rest[start..]
                .find("}}")
                .ok_or_else(|| format!("unclosed {{{{ in {line:?}"))?;
            let name = rest[start + 2..start + end].trim();
            rendered.push_str(&rest[..start]);
            match set(name)? {
                Some(v) => rendered.push_str(v),
                None => continue 'lines,
            }
            rest = &rest[start + end + 2..];
        }
        rendered.push_str(rest);
        out.push_str(&rendered);
    }
    if !blocks.is_empty() {
        return Err("{{if}} without {{end}}".into());
    }
    Ok(out)
}

/// The owner reference every generated config carries: the ControllerConfig, as controller
/// (a ControllerConfig read from a file, with no uid yet, gets an empty one, as upstream's
/// bootstrap does).
pub fn owner_reference(cc: &ControllerConfig) -> OwnerReference {
    OwnerReference {
        api_version: "machineconfiguration.openshift.io/v1".to_owned(),
        kind: "ControllerConfig".to_owned(),
        name: cc.metadata.name.clone().unwrap_or_default(),
        uid: cc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The three MachineConfigs of every role of `cc` ([`roles`]), sorted by name: each with
/// the role label, `generated-by-controller-version: controller_version` and an owner
/// reference to `cc`. A bad input refuses the whole set, naming its field.
pub fn generate(
    cc: &ControllerConfig,
    cluster: &Cluster,
    controller_version: &str,
) -> Result<Vec<MachineConfig>, Error> {
    let vars = inputs(&cc.spec, cluster)?.vars();
    let owner = owner_reference(cc);
    let mut out = Vec::new();
    for role in roles(&cc.spec) {
        for mc in [Mc::Base, Mc::Kubelet, Mc::ContainerRuntime] {
            let mut files: BTreeMap<&str, Value> = BTreeMap::new();
            // unit name → (enabled, contents, drop-ins by name)
            type Unit = (Option<bool>, Option<String>, BTreeMap<&'static str, String>);
            let mut units: BTreeMap<&str, Unit> = BTreeMap::new();
            for t in TEMPLATES
                .iter()
                .filter(|t| t.mc == mc && (t.roles.is_empty() || t.roles.contains(&role)))
            {
                let text = render(t.text, &vars)
                    .map_err(|e| Error::Base(format!("template {}: {e}", t.source)))?;
                if text.trim().is_empty() {
                    continue;
                }
                match t.kind {
                    Kind::File(path) => {
                        files.insert(path, crate::file(path, &text));
                    }
                    Kind::SecretFile(path) => {
                        let mut f = crate::file(path, &text);
                        f["mode"] = json!(0o600);
                        files.insert(path, f);
                    }
                    Kind::Unit(name) => {
                        let u = units.entry(name).or_default();
                        u.0 = Some(true);
                        u.1 = Some(text);
                    }
                    Kind::UnitContents(name) => units.entry(name).or_default().1 = Some(text),
                    Kind::Dropin(unit, name) => {
                        units.entry(unit).or_default().2.insert(name, text);
                    }
                }
            }
            let units: Vec<Value> = units
                .into_iter()
                .map(|(name, (enabled, contents, dropins))| {
                    let mut u = json!({"name": name});
                    if let Some(e) = enabled {
                        u["enabled"] = json!(e);
                    }
                    if let Some(c) = contents {
                        u["contents"] = json!(c);
                    }
                    if !dropins.is_empty() {
                        u["dropins"] = dropins
                            .into_iter()
                            .map(|(n, c)| json!({"name": n, "contents": c}))
                            .collect();
                    }
                    u
                })
                .collect();
            let mut config = json!({"ignition": {"version": IGNITION_VERSION}});
            if !files.is_empty() {
                config["storage"] = json!({"files": files.into_values().collect::<Vec<_>>()});
            }
            if !units.is_empty() {
                config["systemd"] = json!({"units": units});
            }
            out.push(MachineConfig {
                metadata: ObjectMeta {
                    name: Some(mc.name(role)),
                    labels: Some(BTreeMap::from([(ROLE_LABEL.to_owned(), role.to_owned())])),
                    annotations: Some(BTreeMap::from([(
                        annotations::GENERATED_BY_CONTROLLER_VERSION.to_owned(),
                        controller_version.to_owned(),
                    )])),
                    owner_references: Some(vec![owner.clone()]),
                    ..Default::default()
                },
                spec: MachineConfigSpec {
                    config: Some(config),
                    ..Default::default()
                },
            });
        }
    }
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(out)
}

/// Whether `have` (the stored object) already is `want`: the same spec, and every label,
/// annotation and owner reference of `want` present. Others a user or tool added are kept, as
/// upstream's apply keeps them.
pub fn up_to_date(have: &MachineConfig, want: &MachineConfig) -> bool {
    let contains = |have: &Option<BTreeMap<String, String>>,
                    want: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    have.spec == want.spec
        && contains(&have.metadata.labels, &want.metadata.labels)
        && contains(&have.metadata.annotations, &want.metadata.annotations)
        && want.metadata.owner_references.iter().flatten().all(|o| {
            have.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|h| h == o)
        })
}

/// `want` as a replacement of `have`: `have`'s extra labels, annotations and owner references
/// kept, its resourceVersion carried for the compare-and-swap.
pub fn merged_over(have: &MachineConfig, want: &MachineConfig) -> MachineConfig {
    let mut out = want.clone();
    let merge = |have: &Option<BTreeMap<String, String>>,
                 out: &mut Option<BTreeMap<String, String>>| {
        let mut m = have.clone().unwrap_or_default();
        m.extend(out.take().unwrap_or_default());
        *out = (!m.is_empty()).then_some(m);
    };
    merge(&have.metadata.labels, &mut out.metadata.labels);
    merge(&have.metadata.annotations, &mut out.metadata.annotations);
    let mut owners = out.metadata.owner_references.take().unwrap_or_default();
    for o in have.metadata.owner_references.iter().flatten() {
        // A stale reference to a ControllerConfig of the same name is replaced, not kept.
        if !owners
            .iter()
            .any(|w| w == o || (w.kind == o.kind && w.name == o.name))
        {
            owners.push(o.clone());
        }
    }
    out.metadata.owner_references = (!owners.is_empty()).then_some(owners);
    out.metadata.resource_version = have.metadata.resource_version.clone();
    out
}

/// Annotation on a base config another controller generated ([`crate::generated_elsewhere`]),
/// kept, holding the pull secret file: the SHA-256 of the compacted pull secret its file follows.
pub const PULL_SECRET_FOLLOWED: &str = "mco.dev/pull-secret-sha256";

/// Annotation on a kept base config holding the kubelet's configuration: the SHA-256 of the
/// TLS settings (`tlsMinVersion`, `tlsCipherSuites`) from `APIServer/cluster` it follows.
pub const TLS_PROFILE_FOLLOWED: &str = "mco.dev/tls-profile-sha256";

/// The proxy environment upstream's `00-<role>` writes (its `etc-mco-proxy.yaml` template).
pub const PROXY_FILE: &str = "/etc/mco/proxy.env";

/// Annotation on a kept base config holding [`PROXY_FILE`]: the SHA-256 of the ControllerConfig's
/// `spec.proxy` values it follows.
pub const PROXY_FOLLOWED: &str = "mco.dev/proxy-sha256";

/// The additional trust bundle upstream's `00-<role>` writes (its `additional-trust-bundle.yaml`
/// template); the daemon restarts `coreos-update-ca-trust.service` and CRI-O when it changes.
pub const TRUST_BUNDLE_FILE: &str =
    "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt";

/// Annotation on a kept base config holding [`TRUST_BUNDLE_FILE`]: the SHA-256 of the
/// ControllerConfig's `spec.additionalTrustBundle` it follows.
pub const TRUST_BUNDLE_FOLLOWED: &str = "mco.dev/trust-bundle-sha256";

/// CRI-O's configuration upstream's `01-<role>-container-runtime` writes (its `crio.yaml`
/// template), naming the pause image (`pause_image`).
pub const CRIO_CONF: &str = "/etc/crio/crio.conf.d/00-default";

/// The key of `spec.images` naming CRI-O's pause image (upstream's `InfraImageKey`).
pub const INFRA_IMAGE_KEY: &str = "infraImageKey";

/// Annotation on a kept base config holding [`CRIO_CONF`]: the SHA-256 of the
/// ControllerConfig's `spec.images.infraImageKey` its `pause_image` follows.
pub const PAUSE_IMAGE_FOLLOWED: &str = "mco.dev/pause-image-sha256";

/// What following an input does to a kept base config ([`follow_pull_secret`],
/// [`follow_tls_profile`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Follow {
    /// Nothing to write.
    Nothing,
    /// Record the input it is in step with (an annotation); the spec is unchanged.
    Mark(MachineConfig),
    /// One file now says what the input says; a new rendered config rolls it out.
    Rewrite(MachineConfig),
}

/// The follow of one file of a kept config to one input, whose digest is `digest`: unchanged
/// while the mark `key` holds `digest`; at first sight (no mark) only marked when
/// `in_step(contents)`, else rewritten with `rewrite(contents)`, as after a change of the input.
/// Only that file's contents change: the rest is another controller's and stays byte for byte.
fn follow_file(
    kept: &MachineConfig,
    path: &str,
    key: &str,
    digest: String,
    in_step: impl FnOnce(&str) -> bool,
    rewrite: impl FnOnce(&str) -> Result<String, Error>,
) -> Result<Follow, Error> {
    let Some(have) = crate::file_contents(kept, path)? else {
        return Ok(Follow::Nothing);
    };
    let mark = kept.metadata.annotations.as_ref().and_then(|a| a.get(key));
    if mark == Some(&digest) {
        return Ok(Follow::Nothing);
    }
    let mut out = kept.clone();
    out.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), digest);
    if mark.is_none() && in_step(&have) {
        return Ok(Follow::Mark(out));
    }
    let source = crate::data_url(&rewrite(&have)?);
    let files = out
        .spec
        .config
        .as_mut()
        .and_then(|c| c.pointer_mut("/storage/files"))
        .and_then(Value::as_array_mut);
    for f in files.into_iter().flatten() {
        if f["path"] == path {
            // A hash or compression of the old contents would not match the new.
            f["contents"] = json!({ "source": source });
        }
    }
    Ok(Follow::Rewrite(out))
}

/// The files of a kept base config that follow an input ([`follow_pull_secret`],
/// [`follow_tls_profile`], [`follow_proxy`], [`follow_trust_bundle`], [`follow_pause_image`]).
pub const FOLLOWED_FILES: &[&str] = &[
    PULL_SECRET_FILE,
    crate::kubelet::KUBELET_CONF,
    PROXY_FILE,
    TRUST_BUNDLE_FILE,
    CRIO_CONF,
];

/// Whether `mc` writes a file that follows an input when kept: an entry for its path with
/// contents. Nothing is decoded; the follows decode the file they change.
pub fn writes_followed_file(mc: &MachineConfig) -> bool {
    crate::storage_files(mc).any(|f| {
        f.pointer("/contents/source").is_some_and(Value::is_string)
            && f["path"]
                .as_str()
                .is_some_and(|p| FOLLOWED_FILES.contains(&p))
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(bytes))
}

/// Brings a kept base config's pull secret file to the Secret the ControllerConfig names
/// (`raw`: its `.dockerconfigjson`), as upstream's template controller would when it
/// regenerates the config, so a rotated pull secret reaches the nodes on a cluster taken over
/// from upstream without rolling mco's templates out over upstream's.
///
/// A file already in step at first sight is only marked, so taking over a cluster rolls
/// nothing out. In step is equal to the compacted secret, or holding every registry of the
/// secret with the same credentials and more besides: another controller merged credentials
/// in (upstream 4.22's internal registry), kept until the secret changes. After that, the mark
/// says whether the secret changed since, and a change rewrites the file.
pub fn follow_pull_secret(kept: &MachineConfig, raw: &[u8]) -> Result<Follow, Error> {
    let compact = compact_pull_secret(raw)?;
    let digest = sha256_hex(compact.as_bytes());
    follow_file(
        kept,
        PULL_SECRET_FILE,
        PULL_SECRET_FOLLOWED,
        digest,
        |have| have.trim_end() == compact || holds_every_registry(have, &compact),
        // As the template writes it: one line and a newline.
        |_| Ok(format!("{compact}\n")),
    )
}

/// Brings a kept base config's kubelet configuration to `APIServer/cluster`'s TLS profile
/// (`None`: the default, `Intermediate`), as upstream's template controller would when it
/// regenerates `01-<role>-kubelet`: `tlsMinVersion` and `tlsCipherSuites` are set as a
/// KubeletConfig's profile sets them, and the rest of the file is kept (as YAML, key order
/// and values unchanged).
///
/// At first sight the config is only marked with the profile it sees: the TLS settings
/// upstream wrote for that profile are left as they are, so a takeover rolls nothing out, and
/// a profile changed after it is followed.
pub fn follow_tls_profile(
    kept: &MachineConfig,
    profile: Option<&TlsSecurityProfile>,
) -> Result<Follow, Error> {
    let (min, ciphers) = match profile {
        None => crate::kubelet::tls_profile(&TlsSecurityProfile::default())?,
        Some(p) => crate::kubelet::tls_profile(p)
            .map_err(|e| Error::Refused(format!("APIServer cluster: {e}")))?,
    };
    let digest = sha256_hex(json!([min, ciphers]).to_string().as_bytes());
    let path = crate::kubelet::KUBELET_CONF;
    let name = kept.metadata.name.as_deref().unwrap_or_default();
    follow_file(
        kept,
        path,
        TLS_PROFILE_FOLLOWED,
        digest,
        |_| true,
        |have| {
            let mut conf: Value = mco_apimachinery::yaml::from_str(have).map_err(|e| {
                Error::Base(format!(
                    "MachineConfig {name}: could not decode {path}: {e}"
                ))
            })?;
            let Some(o) = conf.as_object_mut() else {
                return Err(Error::Base(format!(
                    "MachineConfig {name}: {path} is not a mapping"
                )));
            };
            o.insert("tlsMinVersion".into(), Value::String(min));
            o.insert("tlsCipherSuites".into(), ciphers.into());
            mco_apimachinery::yaml::to_string(&conf).map_err(|e| {
                Error::Base(format!(
                    "MachineConfig {name}: could not encode {path}: {e}"
                ))
            })
        },
    )
}

/// The comment upstream's proxy template opens `/etc/mco/proxy.env` with.
const UPSTREAM_PROXY_HEADER: &str = "\
# Proxy environment variables will be populated in this file. Properly
# url encoded passwords with special characters will use '%<HEX><HEX>'.
# Systemd requires that any % used in a password be represented as
# %% in a unit file since % is a prefix for macros; this restriction does not
# apply for environment files. Templates that need the proxy set should use
# 'EnvironmentFile=/etc/mco/proxy.env'.
";

/// The assignments of an environment file: `NAME=value` lines, comments and blank lines
/// skipped, unset (empty) values left out.
fn assignments(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

/// Brings a kept base config's `/etc/mco/proxy.env` to the ControllerConfig's `spec.proxy`, as
/// upstream's template controller would when it regenerates `00-<role>` after the operator
/// copied a changed proxy in: upstream's comment, then `HTTP_PROXY=`, `HTTPS_PROXY=` and
/// `NO_PROXY=` for the values set. The values are checked as the templates check them.
///
/// At first sight a file whose assignments are the spec's is only marked (taking over rolls
/// nothing out); one that differs is rewritten, as after a change.
pub fn follow_proxy(kept: &MachineConfig, spec: &ControllerConfigSpec) -> Result<Follow, Error> {
    let spec_json = Value::Object(spec.other.clone());
    let values = [
        ("HTTP_PROXY", proxy_url(&spec_json, "httpProxy")?),
        ("HTTPS_PROXY", proxy_url(&spec_json, "httpsProxy")?),
        ("NO_PROXY", string_at(&spec_json, &["proxy", "noProxy"])?),
    ];
    let want: BTreeMap<&str, &str> = values
        .iter()
        .filter_map(|(k, v)| Some((*k, v.as_deref()?)))
        .collect();
    let mut text = UPSTREAM_PROXY_HEADER.to_owned();
    for (k, v) in values.iter() {
        if let Some(v) = v {
            text.push_str(&format!("{k}={v}\n"));
        }
    }
    let digest = sha256_hex(
        json!(values.each_ref().map(|(_, v)| v))
            .to_string()
            .as_bytes(),
    );
    follow_file(
        kept,
        PROXY_FILE,
        PROXY_FOLLOWED,
        digest,
        |have| assignments(have) == want,
        |_| Ok(text),
    )
}

/// Brings a kept base config's additional trust bundle file to the ControllerConfig's
/// `spec.additionalTrustBundle` (base64 PEM; none is an empty file), as upstream's template
/// controller writes it: the bundle with one final newline. At first sight a file holding the
/// same bundle, trailing whitespace aside, is only marked; one that differs is rewritten.
/// Bounded and decoded as [`trust_bundle`] reads it, but its PEM is not checked, as upstream's
/// template does not check it: a refusal here would stop every other follow of the config (a
/// rotated pull secret) for a bundle upstream's nodes take; the ControllerConfig's status
/// still reports a malformed one.
pub fn follow_trust_bundle(
    kept: &MachineConfig,
    spec: &ControllerConfigSpec,
) -> Result<Follow, Error> {
    let bundle = trust_bundle(spec)?;
    let digest = sha256_hex(bundle.as_bytes());
    let want = bundle.trim_end();
    let text = if want.is_empty() {
        String::new()
    } else {
        format!("{want}\n")
    };
    follow_file(
        kept,
        TRUST_BUNDLE_FILE,
        TRUST_BUNDLE_FOLLOWED,
        digest,
        |have| have.trim_end() == want,
        |_| Ok(text),
    )
}

/// The value of a `pause_image = "..."` line (TOML key, any spacing, a basic string, a comment
/// after it allowed), or `None` for another line.
fn pause_image_value(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("pause_image")?;
    let rest = rest.trim_start().strip_prefix('=')?;
    let rest = rest.trim_start().strip_prefix('"')?;
    let (value, after) = rest.split_once('"')?;
    let after = after.trim_start();
    (after.is_empty() || after.starts_with('#')).then_some(value)
}

/// Brings the `pause_image` of a kept `01-<role>-container-runtime`'s CRI-O configuration
/// ([`CRIO_CONF`]) to the ControllerConfig's `spec.images.infraImageKey`, as upstream's
/// template controller would when it regenerates the config after the operator copied a new
/// release's pause image in: only that line is rewritten (`pause_image = "<image>"`, its
/// indentation kept), every other byte of the file stays.
///
/// At first sight a file already naming that image is only marked (taking over rolls nothing
/// out); one naming another is rewritten, as after a change. A spec without the key, or a file
/// without a `pause_image` line, is left alone. The image is checked as the templates check
/// it: a quote or whitespace would break CRI-O's TOML.
pub fn follow_pause_image(
    kept: &MachineConfig,
    spec: &ControllerConfigSpec,
) -> Result<Follow, Error> {
    let Some(image) = infra_image(&Value::Object(spec.other.clone()))? else {
        return Ok(Follow::Nothing);
    };
    let Some(have) = crate::file_contents(kept, CRIO_CONF)? else {
        return Ok(Follow::Nothing);
    };
    if !have.lines().any(|l| pause_image_value(l).is_some()) {
        return Ok(Follow::Nothing);
    }
    let digest = sha256_hex(image.as_bytes());
    follow_file(
        kept,
        CRIO_CONF,
        PAUSE_IMAGE_FOLLOWED,
        digest,
        |have| {
            have.lines()
                .filter_map(pause_image_value)
                .all(|v| v == image)
        },
        |have| {
            let mut out = String::with_capacity(have.len() + image.len());
            for line in have.split_inclusive('\n') {
                let (body, end) = match line.strip_suffix("\r\n") {
                    Some(b) => (b, "\r\n"),
                    None => match line.strip_suffix('\n') {
                        Some(b) => (b, "\n"),
                        None => (line, ""),
                    },
                };
                if pause_image_value(body).is_some() {
                    let indent = &body[..body.len() - body.trim_start().len()];
                    out.push_str(&format!("{indent}pause_image = \"{image}\"{end}"));
                } else {
                    out.push_str(line);
                }
            }
            Ok(out)
        },
    )
}

/// Whether the docker config `have` holds each of `want`'s registries with the same entry.
fn holds_every_registry(have: &str, want: &str) -> bool {
    let (Ok(have), Ok(want)) = (
        serde_json::from_str::<Value>(have),
        serde_json::from_str::<Value>(want),
    ) else {
        return false;
    };
    let (Some(have), Some(want)) = (have["auths"].as_object(), want["auths"].as_object()) else {
        return false;
    };
    want.iter()
        .all(|(registry, entry)| have.get(registry) == Some(entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden;
    use pretty_assertions::assert_eq;

    fn cc(other: Value) -> ControllerConfig {
        let mut cc = ControllerConfig::new(
            "machine-config-controller",
            ControllerConfigSpec {
                other: other.as_object().cloned().unwrap_or_default(),
                ..Default::default()
            },
        );
        cc.metadata.uid = Some("cc-uid-1".into());
        cc
    }

    /// A self-signed CA (EC P-256, valid until 2126), as an administrator's proxy CA.
    const TRUST_CA: &str = "\
-----BEGIN CERTIFICATE-----
MIIBsTCCAVegAwIBAgIUKUd/sFR12xAAwB/+u7fYtxODKfwwCgYIKoZIzj0EAwIw
LTEQMA4GA1UECwwHZXhhbXBsZTEZMBcGA1UEAwwQZXhhbXBsZS1wcm94eS1jYTAg
Fw0yNjEyMDcxNjI4MTNaGA8yMTI2MTExMzE2MjgxM1owLTEQMA4GA1UECwwHZXhh
bXBsZTEZMBcGA1UEAwwQZXhhbXBsZS1wcm94eS1jYTBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABLOcIAW6k+O2/uv3x7k23muq8jPskaknFy3c38qwRd2/H+mL0o4g
+mYDf+TJUFE65cU/vIOrwVNWz83hzaVfQkijUzBRMB0GA1UdDgQWBBSYvkANp4kU
8FCeC76pIRkhHoRa8TAfBgNVHSMEGDAWgBSYvkANp4kU8FCeC76pIRkhHoRa8TAP
BgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIQCEYf5tk0fVtcEwpO7e
PPe3ocbm6P7p/F8D9EeFjibELQIgOoxOKm9cCqj2W/sUzJFGWqTA6Yp191kk/5UW
YcbPA7A=
-----END CERTIFICATE-----
";

    fn b64(s: &str) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// A cluster with every input the templates read.
    fn full() -> ControllerConfig {
        let mut cc = full_without_bundle();
        cc.spec.additional_trust_bundle = Some(b64(TRUST_CA));
        cc
    }

    fn full_without_bundle() -> ControllerConfig {
        cc(json!({
            "clusterDNSIP": "172.30.0.10",
            "images": {"infraImageKey": "quay.example.com/ocp/pause@sha256:0123"},
            "proxy": {
                "httpProxy": "http://proxy.example.com:3128",
                "httpsProxy": "https://proxy.example.com:3129",
                "noProxy": ".cluster.local,.svc,10.0.0.0/16",
            },
            "ipFamilies": "IPv4",
            "infra": {"status": {"platformStatus": {"type": "None"}}},
        }))
    }

    const PULL_SECRET: &[u8] = br#"{
  "auths": {
    "quay.example.com": {"auth": "dXNlcjpwYXNz", "email": "ops@example.com"}
  }
}"#;

    /// The cluster inputs: a pull secret, and the APIServer's default profile.
    fn full_cluster() -> Cluster<'static> {
        Cluster {
            pull_secret: Some(PULL_SECRET),
            tls_profile: None,
        }
    }

    fn file_text(mc: &MachineConfig, path: &str) -> Option<String> {
        crate::base_file(&[mc], path).unwrap()
    }

    fn by_name<'a>(mcs: &'a [MachineConfig], name: &str) -> &'a MachineConfig {
        mcs.iter()
            .find(|m| m.metadata.name.as_deref() == Some(name))
            .unwrap()
    }

    #[test]
    fn golden_configs_of_each_role() {
        let mcs = generate(&full(), &full_cluster(), "v0.0.0-test").unwrap();
        for mc in &mcs {
            let name = mc.metadata.name.clone().unwrap();
            golden::check(&format!("template-{name}.yaml"), &golden::render(mc));
        }
    }

    #[test]
    fn three_configs_per_role_with_the_annotation_label_and_owner() {
        let mcs = generate(&full(), &Cluster::default(), "v9").unwrap();
        let names: Vec<&str> = mcs
            .iter()
            .filter_map(|m| m.metadata.name.as_deref())
            .collect();
        assert_eq!(
            names,
            [
                "00-master",
                "00-worker",
                "01-master-container-runtime",
                "01-master-kubelet",
                "01-worker-container-runtime",
                "01-worker-kubelet",
            ]
        );
        assert_eq!(names, super::names(&full().spec));
        for mc in &mcs {
            let name = mc.metadata.name.as_deref().unwrap();
            assert!(is_template_name(name));
            let role = if name.contains("master") {
                "master"
            } else {
                "worker"
            };
            assert_eq!(mc.metadata.labels.as_ref().unwrap()[ROLE_LABEL], role);
            assert_eq!(
                mc.metadata.annotations.as_ref().unwrap()
                    [annotations::GENERATED_BY_CONTROLLER_VERSION],
                "v9"
            );
            let owners = mc.metadata.owner_references.as_ref().unwrap();
            assert_eq!(owners.len(), 1);
            assert_eq!(owners[0].kind, "ControllerConfig");
            assert_eq!(owners[0].name, "machine-config-controller");
            assert_eq!(owners[0].uid, "cc-uid-1");
            assert_eq!(owners[0].controller, Some(true));
            assert_eq!(mc.ignition_version(), Some(IGNITION_VERSION));
            // Generated configs never carry an OS image: the render's comes from the
            // ControllerConfig.
            assert_eq!(mc.spec.os_image_url, "");
        }
        assert!(!is_template_name("00-infra") && !is_template_name("99-worker-ssh"));
    }

    /// `full()` with a control plane topology.
    fn with_topology(topology: &str) -> ControllerConfig {
        let mut cc = full();
        cc.spec.other["infra"]["status"]["controlPlaneTopology"] = json!(topology);
        cc
    }

    #[test]
    fn an_arbiter_cluster_gets_the_arbiter_role_with_the_masters_configs_and_its_own_label() {
        for other in [
            "HighlyAvailable",
            "SingleReplica",
            "DualReplica",
            "External",
        ] {
            let mcs = generate(&with_topology(other), &full_cluster(), "v").unwrap();
            assert_eq!(mcs.len(), 6, "{other}");
        }
        let cc = with_topology(ARBITER_TOPOLOGY);
        assert_eq!(roles(&cc.spec), ["arbiter", "master", "worker"]);
        let mcs = generate(&cc, &full_cluster(), "v").unwrap();
        let names: Vec<&str> = mcs
            .iter()
            .filter_map(|m| m.metadata.name.as_deref())
            .collect();
        assert_eq!(names.len(), 9);
        assert_eq!(names, super::names(&cc.spec));
        assert_eq!(super::names(&cc.spec), all_names());
        for name in [
            "00-arbiter",
            "01-arbiter-kubelet",
            "01-arbiter-container-runtime",
        ] {
            let mc = by_name(&mcs, name);
            assert!(is_template_name(name));
            assert_eq!(mc.metadata.labels.as_ref().unwrap()[ROLE_LABEL], "arbiter");
            // The same contents as the master's, but for the kubelet unit.
            let master = by_name(&mcs, &name.replace("arbiter", "master"));
            if name != "01-arbiter-kubelet" {
                assert_eq!(mc.spec, master.spec, "{name}");
            }
        }
        let (arbiter, master) = (
            by_name(&mcs, "01-arbiter-kubelet"),
            by_name(&mcs, "01-master-kubelet"),
        );
        let kubelet_conf = crate::kubelet::KUBELET_CONF;
        assert_eq!(
            file_text(arbiter, kubelet_conf),
            file_text(master, kubelet_conf)
        );
        let unit = |mc: &MachineConfig| {
            mc.spec.config.as_ref().unwrap()["systemd"]["units"][0]["contents"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let text = unit(arbiter);
        assert!(
            text.contains(
                "--node-labels=node-role.kubernetes.io/arbiter,node.openshift.io/os_id=${ID} \\"
            ) && text
                .contains("--register-with-taints=node-role.kubernetes.io/arbiter=:NoSchedule \\"),
            "{text}"
        );
        // Nothing else differs from the master's unit.
        let master_text = unit(master)
            .replace(
                "node-role.kubernetes.io/control-plane,node-role.kubernetes.io/master",
                "node-role.kubernetes.io/arbiter",
            )
            .replace(
                "node-role.kubernetes.io/master=",
                "node-role.kubernetes.io/arbiter=",
            );
        assert_eq!(text, master_text);
    }

    #[test]
    fn inputs_land_where_the_templates_put_them() {
        let mcs = generate(&full(), &Cluster::default(), "v").unwrap();
        let kubelet = file_text(
            by_name(&mcs, "01-worker-kubelet"),
            crate::kubelet::KUBELET_CONF,
        )
        .unwrap();
        assert!(kubelet.contains("clusterDNS: [172.30.0.10]\n"), "{kubelet}");
        assert!(kubelet.contains("clientCAFile: /etc/kubernetes/kubelet-ca.crt"));
        let crio = file_text(
            by_name(&mcs, "01-master-container-runtime"),
            "/etc/crio/crio.conf.d/00-default",
        )
        .unwrap();
        assert!(crio.contains("pause_image = \"quay.example.com/ocp/pause@sha256:0123\"\n"));
        let proxy = file_text(by_name(&mcs, "00-worker"), "/etc/mco/proxy.env").unwrap();
        assert!(
            proxy.contains("HTTP_PROXY=http://proxy.example.com:3128\n"),
            "{proxy}"
        );
        assert!(
            proxy.contains("NO_PROXY=.cluster.local,.svc,10.0.0.0/16\n"),
            "{proxy}"
        );
        let units = &by_name(&mcs, "00-worker").spec.config.as_ref().unwrap()["systemd"]["units"];
        let crio_unit = units
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == "crio.service")
            .unwrap();
        assert_eq!(crio_unit["dropins"][1]["name"], DEFAULT_ENV_DROPIN);
        // The kubelet CA is the certificate writer's, not a template file.
        for mc in &mcs {
            assert_eq!(file_text(mc, "/etc/kubernetes/kubelet-ca.crt"), None);
        }

        // IPv6 first: the kubelet binds ::.
        let mut v6 = full();
        v6.spec
            .other
            .insert("ipFamilies".into(), json!("DualStackIPv6Primary"));
        let mcs = generate(&v6, &Cluster::default(), "v").unwrap();
        let unit = by_name(&mcs, "01-worker-kubelet")
            .spec
            .config
            .as_ref()
            .unwrap()["systemd"]["units"][0]["contents"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            unit.contains("Environment=\"KUBELET_NODE_IP=::\"\n"),
            "{unit}"
        );
    }

    #[test]
    fn unset_inputs_leave_their_lines_and_blocks_out() {
        let mcs = generate(&cc(json!({})), &Cluster::default(), "v").unwrap();
        let kubelet = file_text(
            by_name(&mcs, "01-master-kubelet"),
            crate::kubelet::KUBELET_CONF,
        )
        .unwrap();
        assert!(!kubelet.contains("clusterDNS"), "{kubelet}");
        let crio = file_text(
            by_name(&mcs, "01-worker-container-runtime"),
            "/etc/crio/crio.conf.d/00-default",
        )
        .unwrap();
        assert!(!crio.contains("pause_image ="), "{crio}");
        let proxy = file_text(by_name(&mcs, "00-worker"), "/etc/mco/proxy.env").unwrap();
        assert!(!proxy.contains("PROXY="), "{proxy}");
        // No proxy: no drop-in pointing at it, so kubelet.service is not in 00-worker at all.
        let units = &by_name(&mcs, "00-worker").spec.config.as_ref().unwrap()["systemd"]["units"];
        let names: Vec<&str> = units
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["crio.service", "kubelet-dependencies.target"]);
        assert_eq!(units[0]["dropins"].as_array().unwrap().len(), 1);
        // No pull secret named: no credentials file.
        for mc in &mcs {
            assert_eq!(file_text(mc, PULL_SECRET_FILE), None);
        }
        // Every template rendered completely.
        for mc in &mcs {
            assert!(
                !serde_json::to_string(mc).unwrap().contains("%7B%7B"),
                "{mc:?}"
            );
        }
    }

    /// The workers' kubelet config as a KubeletConfig raising `maxPods` generates it over the
    /// templates' base.
    fn generated_worker_kubelet(mcs: &[MachineConfig]) -> String {
        let worker: Vec<&MachineConfig> = mcs
            .iter()
            .filter(|m| m.metadata.labels.as_ref().unwrap()[ROLE_LABEL] == "worker")
            .collect();
        let base = crate::base_file(&worker, crate::kubelet::KUBELET_CONF)
            .unwrap()
            .unwrap();
        let spec: mco_api::KubeletConfigSpec =
            serde_json::from_value(json!({"kubeletConfig": {"maxPods": 300}})).unwrap();
        let files = crate::kubelet::files(&spec, &base).unwrap();
        crate::decode_data_url(files[0]["contents"]["source"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn the_generators_read_their_bases_from_the_templates() {
        let mcs = generate(&full(), &Cluster::default(), "v").unwrap();
        let worker: Vec<&MachineConfig> = mcs
            .iter()
            .filter(|m| m.metadata.labels.as_ref().unwrap()[ROLE_LABEL] == "worker")
            .collect();
        let text = generated_worker_kubelet(&mcs);
        assert!(
            text.contains("maxPods: 300") && text.contains("cgroupDriver: systemd"),
            "{text}"
        );
        assert!(text.contains("172.30.0.10"), "{text}");

        let registries = crate::base_file(&worker, crate::registries::REGISTRIES_CONF)
            .unwrap()
            .unwrap();
        let parsed: toml::Table = toml::from_str(&registries).unwrap();
        assert!(parsed.contains_key("unqualified-search-registries"));
        let policy = crate::base_file(&worker, crate::registries::POLICY_JSON)
            .unwrap()
            .unwrap();
        serde_json::from_str::<Value>(&policy).unwrap();
        let storage = crate::base_file(&worker, crate::crio::STORAGE_CONF)
            .unwrap()
            .unwrap();
        toml::from_str::<toml::Table>(&storage).unwrap();
    }

    fn refused(other: Value) -> String {
        match generate(&cc(other), &Cluster::default(), "v") {
            Err(Error::Refused(m)) => m,
            r => panic!("not refused: {r:?}"),
        }
    }

    #[test]
    fn bad_inputs_are_refused_naming_the_field() {
        assert_eq!(
            refused(json!({"clusterDNSIP": "dns.example.com"})),
            "spec.clusterDNSIP: \"dns.example.com\" is not an IP address"
        );
        assert_eq!(
            refused(json!({"clusterDNSIP": 10})),
            "spec.clusterDNSIP: must be a string, not 10"
        );
        assert_eq!(
            refused(json!({"images": {"infraImageKey": "pause\" evil = \"1"}})),
            "spec.images.infraImageKey: \"pause\\\" evil = \\\"1\" is not an image pull spec"
        );
        assert_eq!(
            refused(json!({"proxy": {"httpsProxy": "proxy.example.com:3128"}})),
            "spec.proxy.httpsProxy: \"proxy.example.com:3128\" is not an http:// or https:// URL"
        );
        assert_eq!(
            refused(json!({"proxy": {"noProxy": "a\nHTTP_PROXY=http://evil"}})),
            "spec.proxy.noProxy: \"a\\nHTTP_PROXY=http://evil\" contains a control character"
        );
        assert_eq!(
            refused(json!({"ipFamilies": "IPv5"})),
            "spec.ipFamilies: \"IPv5\" is not one of IPv4, IPv6, DualStack, DualStackIPv6Primary"
        );
        assert_eq!(
            refused(json!({"infra": {"status": {"platformStatus": {"type": "AWS"}}}})),
            "spec.infra.status.platformStatus.type: mco has templates for platform None only, not \"AWS\""
        );
    }

    #[test]
    fn a_value_at_the_limit_is_taken_and_one_byte_more_is_refused() {
        let at = "a".repeat(MAX_VALUE_BYTES);
        let mcs = generate(
            &cc(json!({"proxy": {"noProxy": at}})),
            &Cluster::default(),
            "v",
        )
        .unwrap();
        let proxy = file_text(by_name(&mcs, "00-master"), "/etc/mco/proxy.env").unwrap();
        assert!(proxy.contains(&format!("NO_PROXY={at}\n")));
        let over = "a".repeat(MAX_VALUE_BYTES + 1);
        assert_eq!(
            refused(json!({"proxy": {"noProxy": over}})),
            format!("spec.proxy.noProxy: 4097 bytes, longer than the limit of {MAX_VALUE_BYTES}")
        );
    }

    #[test]
    fn the_template_syntax() {
        let vars = BTreeMap::from([("a", Some("A".to_owned())), ("b", None)]);
        assert_eq!(render("x={{a}} y={{ a }}\n", &vars).unwrap(), "x=A y=A\n");
        assert_eq!(
            render("keep\nb={{b}}\nend\n", &vars).unwrap(),
            "keep\nend\n"
        );
        assert_eq!(
            render("{{if a}}\nin a\n{{end}}\n{{if b}}\nin b\n{{if a}}\nnested\n{{end}}\n{{end}}\nout\n", &vars)
                .unwrap(),
            "in a\nout\n"
        );
        assert_eq!(render("{{c}}", &vars).unwrap_err(), "unknown input \"c\"");
        assert!(render("{{if a}}\n", &vars).is_err());
        assert!(render("{{end}}\n", &vars).is_err());
        assert!(render("x {{a\n", &vars).is_err());
    }

    #[test]
    fn a_stored_config_is_up_to_date_with_extra_metadata_and_not_with_an_edit() {
        let want = generate(&full(), &Cluster::default(), "v")
            .unwrap()
            .remove(0);
        let mut have = want.clone();
        have.metadata.resource_version = Some("7".into());
        have.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "a".into());
        assert!(up_to_date(&have, &want));

        // A hand edit of the spec, or a dropped annotation or owner: not up to date, and the
        // replacement keeps what the user added.
        let mut edited = have.clone();
        edited.spec.kernel_arguments = Some(vec!["nosmt".into()]);
        assert!(!up_to_date(&edited, &want));
        let fixed = merged_over(&edited, &want);
        assert_eq!(fixed.spec, want.spec);
        assert_eq!(fixed.metadata.labels.as_ref().unwrap()["team"], "a");
        assert_eq!(fixed.metadata.resource_version.as_deref(), Some("7"));
        assert!(up_to_date(&fixed, &want));

        let mut unowned = have.clone();
        unowned.metadata.owner_references = None;
        assert!(!up_to_date(&unowned, &want));
        let mut stale = have.clone();
        stale.metadata.owner_references.as_mut().unwrap()[0].uid = "old".into();
        let fixed = merged_over(&stale, &want);
        assert_eq!(
            fixed.metadata.owner_references,
            want.metadata.owner_references
        );
        let mut unannotated = have;
        unannotated.metadata.annotations = None;
        assert!(!up_to_date(&unannotated, &want));
    }

    fn file_entry<'a>(mc: &'a MachineConfig, path: &str) -> Option<&'a Value> {
        mc.spec.config.as_ref()?["storage"]["files"]
            .as_array()?
            .iter()
            .find(|f| f["path"] == path)
    }

    #[test]
    fn the_pull_secret_lands_compacted_and_private_in_each_roles_base() {
        let mcs = generate(&full(), &full_cluster(), "v").unwrap();
        for mc in &mcs {
            let name = mc.metadata.name.as_deref().unwrap();
            let entry = file_entry(mc, PULL_SECRET_FILE);
            if !name.starts_with("00-") {
                assert!(entry.is_none(), "{name}");
                continue;
            }
            assert_eq!(entry.unwrap()["mode"], 0o600, "{name}");
            // One line, keys in the Secret's order, as upstream's json.Compact leaves them.
            assert_eq!(
                file_text(mc, PULL_SECRET_FILE).unwrap(),
                "{\"auths\":{\"quay.example.com\":{\"auth\":\"dXNlcjpwYXNz\",\"email\":\"ops@example.com\"}}}\n"
            );
        }
    }

    #[test]
    fn the_trust_bundle_lands_private_in_each_roles_base_only_when_there_is_one() {
        let mcs = generate(&full(), &full_cluster(), "v").unwrap();
        for mc in &mcs {
            let name = mc.metadata.name.as_deref().unwrap();
            let entry = file_entry(mc, TRUST_BUNDLE_FILE);
            if !name.starts_with("00-") {
                assert!(entry.is_none(), "{name}");
                continue;
            }
            assert_eq!(entry.unwrap()["mode"], 0o600, "{name}");
            assert_eq!(
                file_text(mc, TRUST_BUNDLE_FILE).unwrap(),
                TRUST_CA,
                "{name}"
            );
        }
        // Trailing whitespace is cut to one newline, as a kept config's follow writes it.
        let mut spaced = full();
        spaced.spec.additional_trust_bundle = Some(b64(&format!("{TRUST_CA}\n \n")));
        let mcs = generate(&spaced, &full_cluster(), "v").unwrap();
        assert_eq!(
            file_text(by_name(&mcs, "00-worker"), TRUST_BUNDLE_FILE).unwrap(),
            TRUST_CA
        );

        // None, empty or blank: no file, and nothing else differs, so a cluster without a
        // bundle keeps its configs (and rendered config) across an upgrade that adds the file.
        let without = generate(&full_without_bundle(), &full_cluster(), "v").unwrap();
        for bundle in [None, Some(String::new()), Some(b64(" \n\n"))] {
            let mut cc = full();
            cc.spec.additional_trust_bundle = bundle.clone();
            let mcs = generate(&cc, &full_cluster(), "v").unwrap();
            assert_eq!(mcs, without, "{bundle:?}");
            for mc in &mcs {
                assert!(file_entry(mc, TRUST_BUNDLE_FILE).is_none(), "{bundle:?}");
            }
        }
        // With one, only the file is added to each base config.
        let with = generate(&full(), &full_cluster(), "v").unwrap();
        for (w, o) in with.iter().zip(&without) {
            let mut w = w.clone();
            if let Some(files) = w
                .spec
                .config
                .as_mut()
                .and_then(|c| c.pointer_mut("/storage/files"))
                .and_then(Value::as_array_mut)
            {
                files.retain(|f| f["path"] != TRUST_BUNDLE_FILE);
            }
            assert_eq!(&w, o);
        }
    }

    fn refused_bundle(raw: &[u8]) -> String {
        use base64::Engine as _;
        let mut cc = full();
        cc.spec.additional_trust_bundle =
            Some(base64::engine::general_purpose::STANDARD.encode(raw));
        match generate(&cc, &full_cluster(), "v") {
            Err(Error::Refused(m)) => m,
            r => panic!("not refused: {r:?}"),
        }
    }

    #[test]
    fn a_trust_bundle_that_is_not_pem_certificates_is_refused_naming_the_field() {
        let field = "spec.additionalTrustBundle";
        assert_eq!(
            refused_bundle(b"not a certificate"),
            format!("{field}: no PEM certificate in the bundle")
        );
        assert_eq!(
            refused_bundle(b"-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n"),
            format!("{field}: block 1 is a PRIVATE KEY, not a CERTIFICATE")
        );
        // The second block is bad: the whole bundle is refused, as the status reports it.
        let m = refused_bundle(
            format!("{TRUST_CA}-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n")
                .as_bytes(),
        );
        assert!(
            m.starts_with(&format!("{field}: malformed certificate 2: ")),
            "{m}"
        );
        let m = refused_bundle(b"-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n");
        assert!(
            m.starts_with(&format!("{field}: block 1 is not PEM: ")),
            "{m}"
        );
        assert_eq!(
            refused_bundle(&[0xff, 0xfe]),
            format!("{field}: not UTF-8 text, so not PEM")
        );
        let mut cc = full();
        cc.spec.additional_trust_bundle = Some("%%%".into());
        match generate(&cc, &full_cluster(), "v") {
            Err(Error::Refused(m)) => {
                assert!(m.starts_with(&format!("{field}: not base64: ")), "{m}")
            }
            r => panic!("not refused: {r:?}"),
        }
        // Text around the blocks is ignored, as the status reads it, and written as it is.
        let commented = format!("# proxy CA\n{TRUST_CA}");
        let mut cc = full();
        cc.spec.additional_trust_bundle = Some(b64(&commented));
        let mcs = generate(&cc, &full_cluster(), "v").unwrap();
        assert_eq!(
            file_text(by_name(&mcs, "00-master"), TRUST_BUNDLE_FILE).unwrap(),
            commented
        );
    }

    #[test]
    fn a_trust_bundle_at_the_limit_is_written_and_one_byte_more_is_refused() {
        let max = mco_api::controllerconfig::MAX_BUNDLE_BYTES;
        // A comment fills the bundle up to the limit; the certificate ends it.
        let padded = |len: usize| {
            let pad = len - TRUST_CA.len() - 1;
            format!("{}\n{TRUST_CA}", "#".repeat(pad))
        };
        let at = padded(max);
        assert_eq!(at.len(), max);
        let mut cc = full();
        cc.spec.additional_trust_bundle = Some(b64(&at));
        let mcs = generate(&cc, &full_cluster(), "v").unwrap();
        assert_eq!(
            file_text(by_name(&mcs, "00-worker"), TRUST_BUNDLE_FILE).unwrap(),
            at
        );
        assert_eq!(
            refused_bundle(padded(max + 1).as_bytes()),
            format!(
                "spec.additionalTrustBundle: {} bytes, longer than the limit of {max}",
                max + 1
            )
        );
    }

    #[test]
    fn a_kept_config_follows_a_bundle_the_templates_refuse() {
        // Upstream's template writes what it is given; refusing here would hold back the
        // config's other follows.
        let kept = kept_with(TRUST_BUNDLE_FILE, "");
        let Follow::Rewrite(out) =
            follow_trust_bundle(&kept, &spec_with_bundle("not a certificate")).unwrap()
        else {
            panic!("not rewritten");
        };
        assert_eq!(
            file_text(&out, TRUST_BUNDLE_FILE).unwrap(),
            "not a certificate\n"
        );
    }

    fn refused_secret(raw: &[u8]) -> String {
        let cluster = Cluster {
            pull_secret: Some(raw),
            tls_profile: None,
        };
        match generate(&full(), &cluster, "v") {
            Err(Error::Refused(m)) => m,
            r => panic!("not refused: {r:?}"),
        }
    }

    #[test]
    fn a_bad_pull_secret_is_refused_without_quoting_it() {
        let field = "spec.pullSecret: data..dockerconfigjson";
        let m = refused_secret(b"{\"auths\": {\"r\": {\"auth\": \"c2VjcmV0\"}");
        assert!(m.starts_with(&format!("{field}: not JSON: ")), "{m}");
        assert!(!m.contains("c2VjcmV0"), "the secret is quoted: {m}");
        assert_eq!(
            refused_secret(b"[\"c2VjcmV0\"]"),
            format!("{field}: must be a JSON object, as in {{\"auths\": {{...}}}}")
        );
        // Deeper than serde_json's limit of 128: refused, not a stack overflow.
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(10_000), "]".repeat(10_000));
        let m = refused_secret(deep.as_bytes());
        assert!(m.contains("too deeply nested"), "{m}");
    }

    #[test]
    fn a_pull_secret_at_the_limit_is_taken_and_one_byte_more_is_refused() {
        let padded = |len: usize| {
            let frame = "{\"auths\":{},\"pad\":\"\"}".len();
            format!("{{\"auths\":{{}},\"pad\":\"{}\"}}", "a".repeat(len - frame)).into_bytes()
        };
        let at = padded(MAX_PULL_SECRET_BYTES);
        assert_eq!(at.len(), MAX_PULL_SECRET_BYTES);
        let cluster = Cluster {
            pull_secret: Some(&at),
            tls_profile: None,
        };
        let mcs = generate(&full(), &cluster, "v").unwrap();
        assert_eq!(
            file_text(by_name(&mcs, "00-worker"), PULL_SECRET_FILE)
                .unwrap()
                .len(),
            MAX_PULL_SECRET_BYTES + 1
        );
        assert_eq!(
            refused_secret(&padded(MAX_PULL_SECRET_BYTES + 1)),
            format!(
                "spec.pullSecret: data..dockerconfigjson: 65537 bytes, longer than the limit of {MAX_PULL_SECRET_BYTES}"
            )
        );
    }

    #[test]
    fn the_pull_secret_reference_and_secret_are_read_as_upstream_reads_them() {
        let spec = |v: Value| ControllerConfigSpec {
            other: v.as_object().cloned().unwrap(),
            ..Default::default()
        };
        assert_eq!(pull_secret_ref(&spec(json!({}))).unwrap(), None);
        assert_eq!(
            pull_secret_ref(&spec(
                json!({"pullSecret": {"namespace": "openshift-config", "name": "pull-secret"}})
            ))
            .unwrap(),
            Some(("openshift-config".to_owned(), "pull-secret".to_owned()))
        );
        let e = pull_secret_ref(&spec(
            json!({"pullSecret": {"namespace": "openshift-config"}}),
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.pullSecret.name: required to name the pull secret"
        );
        let e = pull_secret_ref(&spec(json!({"pullSecret": "pull-secret"}))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.pullSecret: must be an object reference, not \"pull-secret\""
        );

        let secret = |type_: Option<&str>, data: Option<&[u8]>| Secret {
            metadata: ObjectMeta {
                namespace: Some("openshift-config".into()),
                name: Some("pull-secret".into()),
                ..Default::default()
            },
            type_: type_.map(str::to_owned),
            data: data.map(|d| {
                BTreeMap::from([(
                    DOCKER_CONFIG_JSON_KEY.to_owned(),
                    k8s_openapi::ByteString(d.to_vec()),
                )])
            }),
            ..Default::default()
        };
        assert_eq!(
            pull_secret_data(&secret(Some(DOCKER_CONFIG_JSON_TYPE), Some(PULL_SECRET))).unwrap(),
            PULL_SECRET
        );
        // Upstream's message, after the field and the object.
        assert_eq!(
            pull_secret_data(&secret(None, Some(PULL_SECRET)))
                .unwrap_err()
                .to_string(),
            "spec.pullSecret: Secret openshift-config/pull-secret: expected secret type kubernetes.io/dockerconfigjson found Opaque"
        );
        assert_eq!(
            pull_secret_data(&secret(Some(DOCKER_CONFIG_JSON_TYPE), None))
                .unwrap_err()
                .to_string(),
            "spec.pullSecret: Secret openshift-config/pull-secret: data..dockerconfigjson is missing"
        );
    }

    #[test]
    fn the_apiserver_tls_profile_reaches_both_kubelet_configs() {
        let kubelet_confs = |cluster: &Cluster| -> Vec<String> {
            let mcs = generate(&full(), cluster, "v").unwrap();
            ["01-master-kubelet", "01-worker-kubelet"]
                .map(|n| file_text(by_name(&mcs, n), crate::kubelet::KUBELET_CONF).unwrap())
                .to_vec()
        };
        // No profile: upstream's default, Intermediate.
        for conf in kubelet_confs(&Cluster::default()) {
            assert!(conf.contains("tlsMinVersion: VersionTLS12\n"), "{conf}");
            assert!(
                conf.contains(
                    "tlsCipherSuites: [TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
                ),
                "{conf}"
            );
            let parsed: Value = mco_apimachinery::yaml::from_str(&conf).unwrap();
            assert!(parsed["tlsCipherSuites"].as_array().unwrap().len() > 3);
        }
        let modern: TlsSecurityProfile =
            serde_json::from_value(json!({"type": "Modern", "modern": {}})).unwrap();
        let cluster = Cluster {
            pull_secret: None,
            tls_profile: Some(&modern),
        };
        for conf in kubelet_confs(&cluster) {
            assert!(conf.contains("tlsMinVersion: VersionTLS13\n"), "{conf}");
            assert!(
                conf.contains("tlsCipherSuites: [TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256]\n"),
                "{conf}"
            );
        }
        // A KubeletConfig without a profile of its own keeps the APIServer's, as upstream's.
        let text = generated_worker_kubelet(&generate(&full(), &cluster, "v").unwrap());
        assert!(text.contains("VersionTLS13"), "{text}");

        let custom: TlsSecurityProfile = serde_json::from_value(
            json!({"type": "Custom", "custom": {"minTLSVersion": "VersionTLS14", "ciphers": []}}),
        )
        .unwrap();
        let bad = Cluster {
            pull_secret: None,
            tls_profile: Some(&custom),
        };
        match generate(&full(), &bad, "v") {
            Err(Error::Refused(m)) => assert_eq!(
                m,
                "APIServer cluster: spec.tlsSecurityProfile.custom.minTLSVersion: unsupported value \"VersionTLS14\""
            ),
            r => panic!("not refused: {r:?}"),
        }
    }

    /// Upstream's `00-worker` as a cluster taken over holds it: its stamp, a unit file, and
    /// the pull secret file as `contents` (percent-encoded).
    fn kept_base(contents: &str) -> MachineConfig {
        let mut mc = MachineConfig::new("00-worker", MachineConfigSpec::default());
        mc.metadata.annotations = Some(BTreeMap::from([(
            annotations::GENERATED_BY_CONTROLLER_VERSION.to_owned(),
            "1d7c5a1e9f2b".to_owned(),
        )]));
        mc.spec.config = Some(json!({
            "ignition": {"version": "3.5.0"},
            "storage": {"files": [
                {"path": "/etc/mco/proxy.env", "mode": 420, "contents": {"source": "data:,%23%20upstream%0A"}},
                {"path": PULL_SECRET_FILE, "mode": 384, "overwrite": true,
                 "contents": {"source": crate::data_url(contents), "compression": ""}},
            ]},
        }));
        mc
    }

    fn followed(mc: &MachineConfig) -> Option<&str> {
        mc.metadata
            .annotations
            .as_ref()?
            .get(PULL_SECRET_FOLLOWED)
            .map(String::as_str)
    }

    #[test]
    fn a_kept_base_config_follows_the_pull_secret_and_nothing_else() {
        let secret = br#"{"auths": {"quay.example.com": {"auth": "b3BzOnMzY3JldA=="}}}"#;
        let compact = r#"{"auths":{"quay.example.com":{"auth":"b3BzOnMzY3JldA=="}}}"#;

        // In step at first sight (upstream wrote it): only marked, so a takeover rolls nothing.
        let in_step = kept_base(&format!("{compact}\n"));
        let Follow::Mark(marked) = follow_pull_secret(&in_step, secret).unwrap() else {
            panic!("not marked");
        };
        assert_eq!(marked.spec, in_step.spec);
        let digest = followed(&marked).unwrap().to_owned();
        assert_eq!(digest.len(), 64);
        assert_eq!(
            follow_pull_secret(&marked, secret).unwrap(),
            Follow::Nothing
        );

        // Credentials another controller merged in are in step until the secret changes.
        let merged = kept_base(
            r#"{"auths":{"quay.example.com":{"auth":"b3BzOnMzY3JldA=="},"iri.local:22625":{"auth":"eA=="}}}"#,
        );
        assert!(matches!(
            follow_pull_secret(&merged, secret).unwrap(),
            Follow::Mark(_)
        ));

        // Rotated: the file alone is rewritten, the stamp and the other file stay.
        let rotated = br#"{"auths":{"quay.example.com":{"auth":"bmV3"}}}"#;
        let Follow::Rewrite(out) = follow_pull_secret(&marked, rotated).unwrap() else {
            panic!("not rewritten");
        };
        assert_eq!(
            crate::file_contents(&out, PULL_SECRET_FILE)
                .unwrap()
                .as_deref(),
            Some("{\"auths\":{\"quay.example.com\":{\"auth\":\"bmV3\"}}}\n")
        );
        let files =
            |mc: &MachineConfig| mc.spec.config.as_ref().unwrap()["storage"]["files"].clone();
        assert_eq!(files(&out)[0], files(&marked)[0]);
        assert_eq!(files(&out)[1]["mode"], 384);
        assert_eq!(files(&out)[1]["overwrite"], true);
        assert_eq!(files(&out)[1]["contents"].as_object().unwrap().len(), 1);
        assert_ne!(followed(&out), Some(digest.as_str()));
        assert_eq!(
            out.metadata.annotations.as_ref().unwrap()
                [annotations::GENERATED_BY_CONTROLLER_VERSION],
            "1d7c5a1e9f2b"
        );
        assert_eq!(follow_pull_secret(&out, rotated).unwrap(), Follow::Nothing);

        // Out of step at first sight (an empty file, a missing registry): rewritten.
        for stale in ["{}", r#"{"auths":{"other.example.com":{"auth":"eA=="}}}"#] {
            assert!(
                matches!(
                    follow_pull_secret(&kept_base(stale), secret).unwrap(),
                    Follow::Rewrite(_)
                ),
                "{stale}"
            );
        }
    }

    #[test]
    fn a_followed_file_is_found_by_its_path_without_decoding() {
        let with = |path: &str, source: Value| {
            let mut mc = kept_base("{}");
            mc.spec.config = Some(json!({"storage": {"files": [
                {"path": "/etc/other", "contents": {"source": "data:,x"}},
                {"path": path, "contents": {"source": source}},
            ]}}));
            mc
        };
        for path in FOLLOWED_FILES {
            assert!(
                writes_followed_file(&with(path, json!("data:,x"))),
                "{path}"
            );
            // Not decoded here: a follow that reads it says it cannot be decoded.
            assert!(
                writes_followed_file(&with(path, json!("data:;base64,%%%"))),
                "{path}"
            );
            // No contents: nothing written there.
            assert!(!writes_followed_file(&with(path, Value::Null)), "{path}");
        }
        assert!(!writes_followed_file(&with("/etc/other", json!("data:,x"))));
        assert!(!writes_followed_file(&MachineConfig::new(
            "00-worker",
            MachineConfigSpec::default()
        )));
    }

    #[test]
    fn following_needs_the_file_and_a_valid_secret() {
        let mut without = kept_base("{}");
        without.spec.config.as_mut().unwrap()["storage"]["files"]
            .as_array_mut()
            .unwrap()
            .pop();
        assert_eq!(
            follow_pull_secret(&without, b"{}").unwrap(),
            Follow::Nothing
        );
        // Refused as the templates refuse it, never quoting the secret.
        match follow_pull_secret(&kept_base("{}"), b"[\"s3cret\"]") {
            Err(Error::Refused(m)) => {
                assert!(
                    m.starts_with("spec.pullSecret: data..dockerconfigjson: must be a JSON object"),
                    "{m}"
                );
                assert!(!m.contains("s3cret"));
            }
            r => panic!("not refused: {r:?}"),
        }
        // At the size limit it is taken; one byte more is refused.
        let at = format!(
            "{{\"auths\":{{}},\"pad\":\"{}\"}}",
            "x".repeat(MAX_PULL_SECRET_BYTES - 21)
        );
        assert_eq!(at.len(), MAX_PULL_SECRET_BYTES);
        assert!(follow_pull_secret(&kept_base("{}"), at.as_bytes()).is_ok());
        let over = format!(
            "{{\"auths\":{{}},\"pad\":\"{}\"}}",
            "x".repeat(MAX_PULL_SECRET_BYTES - 20)
        );
        match follow_pull_secret(&kept_base("{}"), over.as_bytes()) {
            Err(Error::Refused(m)) => assert!(
                m.ends_with("65537 bytes, longer than the limit of 65536"),
                "{m}"
            ),
            r => panic!("not refused: {r:?}"),
        }
    }

    #[test]
    fn a_kept_kubelet_config_follows_a_changed_tls_profile() {
        // Upstream's kubelet.conf, with a field mco's template does not write.
        let conf = "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: 250\ntlsMinVersion: VersionTLS12\ntlsCipherSuites:\n- TLS_AES_128_GCM_SHA256\nsystemCgroups: /system.slice\n";
        let mut kept = kept_base("{}");
        kept.metadata.name = Some("01-worker-kubelet".into());
        kept.spec.config.as_mut().unwrap()["storage"]["files"][1]["path"] =
            json!(crate::kubelet::KUBELET_CONF);
        kept.spec.config.as_mut().unwrap()["storage"]["files"][1]["contents"] =
            json!({"source": crate::data_url(conf)});
        let mark = |mc: &MachineConfig| {
            mc.metadata
                .annotations
                .as_ref()
                .unwrap()
                .get(TLS_PROFILE_FOLLOWED)
                .cloned()
        };

        // First sight: the profile is recorded, the file left as upstream wrote it.
        let Follow::Mark(marked) = follow_tls_profile(&kept, None).unwrap() else {
            panic!("not marked");
        };
        assert_eq!(marked.spec, kept.spec);
        assert_eq!(follow_tls_profile(&marked, None).unwrap(), Follow::Nothing);
        let intermediate: TlsSecurityProfile =
            serde_json::from_value(json!({"type": "Intermediate", "intermediate": {}})).unwrap();
        assert_eq!(
            follow_tls_profile(&marked, Some(&intermediate)).unwrap(),
            Follow::Nothing,
            "the default is Intermediate"
        );

        // Changed to Modern: both settings rewritten, every other key kept in its place.
        let modern: TlsSecurityProfile =
            serde_json::from_value(json!({"type": "Modern", "modern": {}})).unwrap();
        let Follow::Rewrite(out) = follow_tls_profile(&marked, Some(&modern)).unwrap() else {
            panic!("not rewritten");
        };
        let text = crate::file_contents(&out, crate::kubelet::KUBELET_CONF)
            .unwrap()
            .unwrap();
        assert_eq!(
            text,
            "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: 250\ntlsMinVersion: VersionTLS13\ntlsCipherSuites:\n- TLS_AES_128_GCM_SHA256\n- TLS_AES_256_GCM_SHA384\n- TLS_CHACHA20_POLY1305_SHA256\nsystemCgroups: /system.slice\n"
        );
        let files =
            |mc: &MachineConfig| mc.spec.config.as_ref().unwrap()["storage"]["files"].clone();
        assert_eq!(files(&out)[0], files(&marked)[0]);
        assert_ne!(mark(&out), mark(&marked));
        assert_eq!(
            follow_tls_profile(&out, Some(&modern)).unwrap(),
            Follow::Nothing
        );

        // A profile the kubelet cannot take is refused, naming the object; a config without
        // the file is left alone.
        let bad: TlsSecurityProfile = serde_json::from_value(
            json!({"type": "Custom", "custom": {"minTLSVersion": "VersionTLS14", "ciphers": []}}),
        )
        .unwrap();
        match follow_tls_profile(&out, Some(&bad)) {
            Err(Error::Refused(m)) => assert!(m.starts_with("APIServer cluster: "), "{m}"),
            r => panic!("not refused: {r:?}"),
        }
        assert_eq!(
            follow_tls_profile(&kept_base("{}"), Some(&modern)).unwrap(),
            Follow::Nothing
        );
    }

    fn kept_with(path: &str, contents: &str) -> MachineConfig {
        let mut mc = kept_base("{}");
        mc.spec.config = Some(json!({
            "ignition": {"version": "3.4.0"},
            "storage": {"files": [
                {"path": PULL_SECRET_FILE, "contents": {"source": "data:,%7B%7D"}},
                {"path": path, "mode": 420, "contents": {"source": crate::data_url(contents)}},
            ]},
        }));
        mc
    }

    fn spec_with_proxy(proxy: Value) -> ControllerConfigSpec {
        ControllerConfigSpec {
            other: serde_json::Map::from_iter([("proxy".to_owned(), proxy)]),
            ..Default::default()
        }
    }

    fn mark<'a>(mc: &'a MachineConfig, key: &str) -> Option<&'a str> {
        mc.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    #[test]
    fn a_kept_proxy_env_follows_spec_proxy_and_nothing_else() {
        let none = ControllerConfigSpec::default();
        // Upstream's file without a proxy: in step with none, only marked.
        let kept = kept_with(PROXY_FILE, UPSTREAM_PROXY_HEADER);
        let Follow::Mark(marked) = follow_proxy(&kept, &none).unwrap() else {
            panic!("not marked");
        };
        assert_eq!(marked.spec, kept.spec);
        assert_eq!(mark(&marked, PROXY_FOLLOWED).unwrap().len(), 64);
        assert_eq!(follow_proxy(&marked, &none).unwrap(), Follow::Nothing);
        // A proxy set: upstream's text for it, the rest of the config as it was.
        let set = spec_with_proxy(json!({
            "httpProxy": "http://proxy.example.com:3128",
            "noProxy": ".cluster.local,10.0.0.0/16",
        }));
        let Follow::Rewrite(out) = follow_proxy(&marked, &set).unwrap() else {
            panic!("not rewritten");
        };
        assert_eq!(
            file_text(&out, PROXY_FILE).unwrap(),
            format!(
                "{UPSTREAM_PROXY_HEADER}HTTP_PROXY=http://proxy.example.com:3128\nNO_PROXY=.cluster.local,10.0.0.0/16\n"
            )
        );
        assert_eq!(file_text(&out, PULL_SECRET_FILE).unwrap(), "{}");
        assert_eq!(
            mark(&out, annotations::GENERATED_BY_CONTROLLER_VERSION),
            Some("1d7c5a1e9f2b")
        );
        assert_ne!(mark(&out, PROXY_FOLLOWED), mark(&marked, PROXY_FOLLOWED));
        assert_eq!(follow_proxy(&out, &set).unwrap(), Follow::Nothing);
        // Back to none: the assignments go, the comment stays.
        let Follow::Rewrite(back) = follow_proxy(&out, &none).unwrap() else {
            panic!("not rewritten");
        };
        assert_eq!(file_text(&back, PROXY_FILE).unwrap(), UPSTREAM_PROXY_HEADER);
        // First sight: the same assignments in other words are in step; others are rewritten.
        let same = kept_with(
            PROXY_FILE,
            "# mine\nNO_PROXY=.cluster.local,10.0.0.0/16\nHTTPS_PROXY=\nHTTP_PROXY=http://proxy.example.com:3128\n",
        );
        assert!(matches!(
            follow_proxy(&same, &set).unwrap(),
            Follow::Mark(_)
        ));
        let stale = kept_with(PROXY_FILE, "HTTP_PROXY=http://old.example.com:3128\n");
        assert!(matches!(
            follow_proxy(&stale, &set).unwrap(),
            Follow::Rewrite(_)
        ));
        // A config without the file: nothing.
        assert_eq!(
            follow_proxy(&kept_with("/etc/other", ""), &set).unwrap(),
            Follow::Nothing
        );
    }

    #[test]
    fn a_followed_proxy_is_checked_as_the_templates_check_it() {
        let kept = kept_with(PROXY_FILE, UPSTREAM_PROXY_HEADER);
        let refused = |proxy: Value| match follow_proxy(&kept, &spec_with_proxy(proxy)) {
            Err(Error::Refused(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(json!({"httpsProxy": "proxy.example.com:3128"})),
            "spec.proxy.httpsProxy: \"proxy.example.com:3128\" is not an http:// or https:// URL"
        );
        let at = "a".repeat(MAX_VALUE_BYTES);
        let Follow::Rewrite(out) =
            follow_proxy(&kept, &spec_with_proxy(json!({"noProxy": at}))).unwrap()
        else {
            panic!("not rewritten");
        };
        assert!(
            file_text(&out, PROXY_FILE)
                .unwrap()
                .ends_with(&format!("NO_PROXY={at}\n"))
        );
        let over = "a".repeat(MAX_VALUE_BYTES + 1);
        assert_eq!(
            refused(json!({"noProxy": over})),
            format!("spec.proxy.noProxy: 4097 bytes, longer than the limit of {MAX_VALUE_BYTES}")
        );
    }

    fn spec_with_bundle(pem: &str) -> ControllerConfigSpec {
        use base64::Engine as _;
        ControllerConfigSpec {
            additional_trust_bundle: Some(base64::engine::general_purpose::STANDARD.encode(pem)),
            ..Default::default()
        }
    }

    #[test]
    fn a_kept_trust_bundle_follows_spec_additional_trust_bundle() {
        let old = "-----BEGIN CERTIFICATE-----\nOLD\n-----END CERTIFICATE-----\n";
        let new = "-----BEGIN CERTIFICATE-----\nNEW\n-----END CERTIFICATE-----";
        // First sight: the same bundle, trailing whitespace aside, is only marked.
        let kept = kept_with(TRUST_BUNDLE_FILE, &format!("{old}\n\n"));
        let Follow::Mark(marked) = follow_trust_bundle(&kept, &spec_with_bundle(old)).unwrap()
        else {
            panic!("not marked");
        };
        assert_eq!(marked.spec, kept.spec);
        assert_eq!(mark(&marked, TRUST_BUNDLE_FOLLOWED).unwrap().len(), 64);
        assert_eq!(
            follow_trust_bundle(&marked, &spec_with_bundle(old)).unwrap(),
            Follow::Nothing
        );
        // A new bundle: the file holds it with one final newline; the rest stays.
        let Follow::Rewrite(out) = follow_trust_bundle(&marked, &spec_with_bundle(new)).unwrap()
        else {
            panic!("not rewritten");
        };
        assert_eq!(
            file_text(&out, TRUST_BUNDLE_FILE).unwrap(),
            format!("{new}\n")
        );
        assert_eq!(file_text(&out, PULL_SECRET_FILE).unwrap(), "{}");
        assert_eq!(
            mark(&out, annotations::GENERATED_BY_CONTROLLER_VERSION),
            Some("1d7c5a1e9f2b")
        );
        assert_eq!(
            follow_trust_bundle(&out, &spec_with_bundle(new)).unwrap(),
            Follow::Nothing
        );
        // None: an empty file, as upstream's template writes it.
        let Follow::Rewrite(empty) =
            follow_trust_bundle(&out, &ControllerConfigSpec::default()).unwrap()
        else {
            panic!("not rewritten");
        };
        assert_eq!(file_text(&empty, TRUST_BUNDLE_FILE).unwrap(), "");
        // First sight of a stale file: rewritten.
        assert!(matches!(
            follow_trust_bundle(&kept, &spec_with_bundle(new)).unwrap(),
            Follow::Rewrite(_)
        ));
        // Not base64: refused, naming the field.
        let bad = ControllerConfigSpec {
            additional_trust_bundle: Some("%%%".into()),
            ..Default::default()
        };
        match follow_trust_bundle(&kept, &bad) {
            Err(Error::Refused(m)) => assert!(
                m.starts_with("spec.additionalTrustBundle: not base64"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_trust_bundle_at_the_limit_is_followed_and_one_byte_more_refused() {
        let max = mco_api::controllerconfig::MAX_BUNDLE_BYTES;
        let kept = kept_with(TRUST_BUNDLE_FILE, "");
        let at = "a".repeat(max);
        let Follow::Rewrite(out) = follow_trust_bundle(&kept, &spec_with_bundle(&at)).unwrap()
        else {
            panic!("not rewritten");
        };
        assert_eq!(file_text(&out, TRUST_BUNDLE_FILE).unwrap().len(), max + 1);
        match follow_trust_bundle(&kept, &spec_with_bundle(&"a".repeat(max + 1))) {
            Err(Error::Refused(m)) => assert_eq!(
                m,
                format!(
                    "spec.additionalTrustBundle: {} bytes, longer than the limit of {max}",
                    max + 1
                )
            ),
            other => panic!("{other:?}"),
        }
    }

    /// Upstream's CRI-O configuration around its `pause_image` line, naming `image`.
    fn upstream_crio(image: &str) -> String {
        format!(
            "[crio.image]\nglobal_auth_file = \"/var/lib/kubelet/config.json\"\npause_image = \"{image}\"\npause_image_auth_file = \"/var/lib/kubelet/config.json\"\npause_command = \"/usr/bin/pod\"\n\n[crio.network]\n"
        )
    }

    fn spec_with_images(images: Value) -> ControllerConfigSpec {
        ControllerConfigSpec {
            other: serde_json::Map::from_iter([("images".to_owned(), images)]),
            ..Default::default()
        }
    }

    const PAUSE_A: &str = "quay.example.com/ocp/pod@sha256:aaaa";
    const PAUSE_B: &str = "quay.example.com/ocp/pod:4.17.2";

    #[test]
    fn a_kept_crio_conf_follows_spec_images_infra_image_key_on_its_pause_image_line() {
        let a = spec_with_images(json!({INFRA_IMAGE_KEY: PAUSE_A, "corednsImage": "c:1"}));
        let b = spec_with_images(json!({INFRA_IMAGE_KEY: PAUSE_B}));
        // First sight of a file naming the image: only marked.
        let kept = kept_with(CRIO_CONF, &upstream_crio(PAUSE_A));
        let Follow::Mark(marked) = follow_pause_image(&kept, &a).unwrap() else {
            panic!("not marked");
        };
        assert_eq!(marked.spec, kept.spec);
        assert_eq!(mark(&marked, PAUSE_IMAGE_FOLLOWED).unwrap().len(), 64);
        assert_eq!(follow_pause_image(&marked, &a).unwrap(), Follow::Nothing);
        // A new pause image: that line alone, every other byte and the other files as they were.
        let Follow::Rewrite(out) = follow_pause_image(&marked, &b).unwrap() else {
            panic!("not rewritten");
        };
        assert_eq!(file_text(&out, CRIO_CONF).unwrap(), upstream_crio(PAUSE_B));
        assert_eq!(file_text(&out, PULL_SECRET_FILE).unwrap(), "{}");
        assert_eq!(
            mark(&out, annotations::GENERATED_BY_CONTROLLER_VERSION),
            Some("1d7c5a1e9f2b")
        );
        assert_ne!(
            mark(&out, PAUSE_IMAGE_FOLLOWED),
            mark(&marked, PAUSE_IMAGE_FOLLOWED)
        );
        assert_eq!(follow_pause_image(&out, &b).unwrap(), Follow::Nothing);
        // First sight of a file naming another image: rewritten, as after a change.
        assert!(matches!(
            follow_pause_image(&kept, &b).unwrap(),
            Follow::Rewrite(_)
        ));
        // Indentation, spacing, a comment and CRLF line ends: the line's indentation and end
        // are kept, the other lines (a comment naming pause_image too) byte for byte.
        let odd = format!(
            "# pause_image = \"{PAUSE_A}\"\r\n  pause_image=\"{PAUSE_A}\"  # pinned\r\npause_image_auth_file = \"x\"\r\n"
        );
        let Follow::Rewrite(out) = follow_pause_image(&kept_with(CRIO_CONF, &odd), &b).unwrap()
        else {
            panic!("not rewritten");
        };
        assert_eq!(
            file_text(&out, CRIO_CONF).unwrap(),
            format!(
                "# pause_image = \"{PAUSE_A}\"\r\n  pause_image = \"{PAUSE_B}\"\r\npause_image_auth_file = \"x\"\r\n"
            )
        );
    }

    #[test]
    fn a_pause_image_follow_without_the_line_or_the_key_does_nothing() {
        let b = spec_with_images(json!({INFRA_IMAGE_KEY: PAUSE_B}));
        // A file without a pause_image line (pause_image_auth_file is another key).
        let without = kept_with(
            CRIO_CONF,
            "[crio.image]\npause_image_auth_file = \"/var/lib/kubelet/config.json\"\n",
        );
        assert_eq!(follow_pause_image(&without, &b).unwrap(), Follow::Nothing);
        // A config without the file.
        assert_eq!(
            follow_pause_image(&kept_with("/etc/other", ""), &b).unwrap(),
            Follow::Nothing
        );
        // A spec without the key, with it empty, or without spec.images: nothing.
        let kept = kept_with(CRIO_CONF, &upstream_crio(PAUSE_A));
        for spec in [
            spec_with_images(json!({"corednsImage": "c:1"})),
            spec_with_images(json!({INFRA_IMAGE_KEY: ""})),
            ControllerConfigSpec::default(),
        ] {
            assert_eq!(follow_pause_image(&kept, &spec).unwrap(), Follow::Nothing);
        }
    }

    #[test]
    fn a_followed_pause_image_is_checked_as_the_templates_check_it() {
        let kept = kept_with(CRIO_CONF, &upstream_crio(PAUSE_A));
        let refused = |image: &str| match follow_pause_image(
            &kept,
            &spec_with_images(json!({INFRA_IMAGE_KEY: image})),
        ) {
            Err(Error::Refused(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused("pod\" evil = \"1"),
            "spec.images.infraImageKey: \"pod\\\" evil = \\\"1\" is not an image pull spec"
        );
        assert_eq!(
            refused("pod 1"),
            "spec.images.infraImageKey: \"pod 1\" is not an image pull spec"
        );
        // At the templates' bound on one value, then one byte more.
        let at = "p".repeat(MAX_VALUE_BYTES);
        let Follow::Rewrite(out) =
            follow_pause_image(&kept, &spec_with_images(json!({INFRA_IMAGE_KEY: at}))).unwrap()
        else {
            panic!("not rewritten");
        };
        assert_eq!(file_text(&out, CRIO_CONF).unwrap(), upstream_crio(&at));
        assert_eq!(
            refused(&"p".repeat(MAX_VALUE_BYTES + 1)),
            format!(
                "spec.images.infraImageKey: {} bytes, longer than the limit of {MAX_VALUE_BYTES}",
                MAX_VALUE_BYTES + 1
            )
        );
    }
}
