//! Image registry policy → `99-<pool>-generated-registries`: `/etc/containers/registries.conf`
//! (containers-registries.conf(5) v2, written with the `toml` crate over the pool's base file)
//! and `/etc/containers/policy.json`.
//!
//! Sources: `ImageDigestMirrorSet`s, `ImageTagMirrorSet`s, `ImageContentSourcePolicy`s (read as
//! digest mirror sets, as upstream converts them) and `Image/cluster`'s allowed, blocked and
//! insecure registries. Mirrors by digest are written `pull-from-mirror = "digest-only"` and by
//! tag `"tag-only"`, so adding one is a change the daemon applies with a CRI-O reload and no
//! drain. `Image/cluster`'s `containerRuntimeSearchRegistries` go into a drop-in,
//! `/etc/containers/registries.conf.d/01-image-searchRegistries.conf`, as upstream writes them.
//! `ClusterImagePolicy`s add sigstore verification (see [`crate::sigstore`]). A refused input
//! is reported against the object it came from.

use std::collections::BTreeMap;

use mco_api::{
    ClusterImagePolicy, Image, ImageContentSourcePolicy, ImageDigestMirrorSet, ImagePolicy,
    ImageTagMirrorSet, image_ref,
};
use serde_json::{Value, json};
use toml::Table;

use crate::file;

pub const REGISTRIES_CONF: &str = "/etc/containers/registries.conf";
pub const POLICY_JSON: &str = "/etc/containers/policy.json";
/// Where `containerRuntimeSearchRegistries` go: a drop-in, read after registries.conf.
pub const SEARCH_REGISTRIES_DROPIN: &str =
    "/etc/containers/registries.conf.d/01-image-searchRegistries.conf";
/// The most search registries taken: each is tried in turn for every short-name pull.
pub const MAX_SEARCH_REGISTRIES: usize = 64;

/// Upstream's limit on how much the mirror sets may hold in total: registries.conf is read by
/// CRI-O on every pull, and the whole MachineConfig must stay under the render size limit.
pub const MAX_MIRROR_RULES: usize = 1000;

/// A refused input, and the object it came from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind} {name}: {message}")]
pub struct Refused {
    /// `ImageDigestMirrorSet`, `ImageTagMirrorSet`, `ImageContentSourcePolicy`,
    /// `ClusterImagePolicy` or `Image`.
    pub kind: &'static str,
    pub name: String,
    pub message: String,
}

/// Everything the generated registries config is made of.
#[derive(Debug, Default, Clone, Copy)]
pub struct Inputs<'a> {
    pub image: Option<&'a Image>,
    pub idms: &'a [ImageDigestMirrorSet],
    pub itms: &'a [ImageTagMirrorSet],
    pub icsp: &'a [ImageContentSourcePolicy],
    pub cips: &'a [ClusterImagePolicy],
    pub ips: &'a [ImagePolicy],
    /// The ControllerConfig's `spec.releaseImage`: the release payload, whose repository
    /// `Image/cluster` may not block (see [`Blocked`]). None or empty on a cluster without a
    /// release payload, and then nothing is guarded.
    pub release_image: Option<&'a str>,
}

impl Inputs<'_> {
    /// Whether there is anything to write. With nothing, no config is generated and the pool's
    /// base files stay as they are.
    pub fn is_empty(&self) -> bool {
        let sources = self
            .image
            .and_then(|i| i.spec.registry_sources.as_ref())
            .is_some_and(|s| {
                !(s.allowed_registries.is_empty()
                    && s.blocked_registries.is_empty()
                    && s.insecure_registries.is_empty()
                    && s.container_runtime_search_registries.is_empty())
            });
        !sources
            && self.idms.is_empty()
            && self.itms.is_empty()
            && self.icsp.is_empty()
            && self.cips.is_empty()
            && self.ips.is_empty()
    }
}

/// A registry scope as registries.conf accepts it: `host[:port][/path]` or `*.domain`.
fn valid_scope(s: &str) -> bool {
    let body = s.strip_prefix("*.").unwrap_or(s);
    !body.is_empty()
        && !body.contains("://")
        && !body.starts_with('/')
        && !body.ends_with('/')
        && !body.contains('*')
        && !body.contains(['@', ' ', '\t', '\n'])
        && !(s.starts_with("*.") && body.contains('/'))
}

/// One mirror rule: where it came from and what it says.
struct Rule<'a> {
    kind: &'static str,
    name: String,
    field: String,
    source: &'a str,
    mirrors: &'a [String],
    never_contact_source: bool,
    pull_from_mirror: &'static str,
}

fn rules<'a>(inputs: &Inputs<'a>) -> Vec<Rule<'a>> {
    let mut out = vec![];
    let name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.name.clone().unwrap_or_default()
    };
    for o in inputs.icsp {
        for (i, r) in o.spec.repository_digest_mirrors.iter().enumerate() {
            out.push(Rule {
                kind: "ImageContentSourcePolicy",
                name: name(&o.metadata),
                field: format!("spec.repositoryDigestMirrors[{i}]"),
                source: &r.source,
                mirrors: &r.mirrors,
                never_contact_source: false,
                pull_from_mirror: "digest-only",
            });
        }
    }
    for o in inputs.idms {
        for (i, r) in o.spec.image_digest_mirrors.iter().enumerate() {
            out.push(Rule {
                kind: "ImageDigestMirrorSet",
                name: name(&o.metadata),
                field: format!("spec.imageDigestMirrors[{i}]"),
                source: &r.source,
                mirrors: &r.mirrors,
                never_contact_source: r.mirror_source_policy == "NeverContactSource",
                pull_from_mirror: "digest-only",
            });
        }
    }
    for o in inputs.itms {
        for (i, r) in o.spec.image_tag_mirrors.iter().enumerate() {
            out.push(Rule {
                kind: "ImageTagMirrorSet",
                name: name(&o.metadata),
                field: format!("spec.imageTagMirrors[{i}]"),
                source: &r.source,
                mirrors: &r.mirrors,
                never_contact_source: r.mirror_source_policy == "NeverContactSource",
                pull_from_mirror: "tag-only",
            });
        }
    }
    out
}

fn check_policy(r: &Rule<'_>, policy: &str) -> Result<(), Refused> {
    if !["", "AllowContactingSource", "NeverContactSource"].contains(&policy) {
        return Err(Refused {
            kind: r.kind,
            name: r.name.clone(),
            message: format!(
                "{}.mirrorSourcePolicy: unsupported value {policy:?}: supported values: \"AllowContactingSource\", \"NeverContactSource\"",
                r.field
            ),
        });
    }
    Ok(())
}

/// Upstream's checks of the inputs, each error naming the object and field it is about.
pub fn validate(inputs: &Inputs<'_>) -> Result<(), Refused> {
    let rules = rules(inputs);
    if rules.len() > MAX_MIRROR_RULES {
        let last = &rules[MAX_MIRROR_RULES];
        return Err(Refused {
            kind: last.kind,
            name: last.name.clone(),
            message: format!(
                "{}: too many mirror rules across all mirror sets: {} (at most {MAX_MIRROR_RULES})",
                last.field,
                rules.len()
            ),
        });
    }
    for o in inputs.idms {
        for (i, r) in o.spec.image_digest_mirrors.iter().enumerate() {
            let rule = Rule {
                kind: "ImageDigestMirrorSet",
                name: o.metadata.name.clone().unwrap_or_default(),
                field: format!("spec.imageDigestMirrors[{i}]"),
                source: &r.source,
                mirrors: &r.mirrors,
                never_contact_source: false,
                pull_from_mirror: "",
            };
            check_policy(&rule, &r.mirror_source_policy)?;
        }
    }
    for o in inputs.itms {
        for (i, r) in o.spec.image_tag_mirrors.iter().enumerate() {
            let rule = Rule {
                kind: "ImageTagMirrorSet",
                name: o.metadata.name.clone().unwrap_or_default(),
                field: format!("spec.imageTagMirrors[{i}]"),
                source: &r.source,
                mirrors: &r.mirrors,
                never_contact_source: false,
                pull_from_mirror: "",
            };
            check_policy(&rule, &r.mirror_source_policy)?;
        }
    }
    let mut policy_of: BTreeMap<&str, bool> = BTreeMap::new();
    for r in &rules {
        let refuse = |message: String| Refused {
            kind: r.kind,
            name: r.name.clone(),
            message: format!("{}: {message}", r.field),
        };
        if !valid_scope(r.source) {
            return Err(refuse(format!("invalid format for source {:?}", r.source)));
        }
        match policy_of.insert(r.source, r.never_contact_source) {
            Some(p) if p != r.never_contact_source => {
                return Err(refuse(format!(
                    "conflicting mirrorSourcePolicy is set for the same source {:?} in imagedigestmirrorsets, imagetagmirrorsets, or imagecontentsourcepolicies",
                    r.source
                )));
            }
            _ => {}
        }
        for m in r.mirrors {
            if !valid_scope(m) || m.starts_with("*.") {
                return Err(refuse(format!("invalid format for mirror {m:?}")));
            }
            if r.never_contact_source && m == r.source {
                return Err(refuse(format!(
                    "cannot set mirrorSourcePolicy: NeverContactSource if the source {:?} is one of the mirrors",
                    r.source
                )));
            }
        }
    }
    if let Some(image) = inputs.image
        && let Some(s) = &image.spec.registry_sources
    {
        let refuse = |message: String| Refused {
            kind: "Image",
            name: image.metadata.name.clone().unwrap_or_default(),
            message,
        };
        for (field, list, what) in [
            ("insecureRegistries", &s.insecure_registries, "insecure"),
            ("blockedRegistries", &s.blocked_registries, "blocked"),
            ("allowedRegistries", &s.allowed_registries, "allowed"),
        ] {
            if let Some(bad) = list.iter().find(|r| !valid_scope(r)) {
                return Err(refuse(format!(
                    "spec.registrySources.{field}: invalid entry for {what} registries {bad:?}"
                )));
            }
        }
        let search = &s.container_runtime_search_registries;
        if search.len() > MAX_SEARCH_REGISTRIES {
            return Err(refuse(format!(
                "spec.registrySources.containerRuntimeSearchRegistries: too many search registries: {} (at most {MAX_SEARCH_REGISTRIES})",
                search.len()
            )));
        }
        // A registry host (with an optional port): no path, no wildcard.
        if let Some(bad) = search
            .iter()
            .find(|r| !valid_scope(r) || r.contains('/') || r.starts_with("*."))
        {
            return Err(refuse(format!(
                "spec.registrySources.containerRuntimeSearchRegistries: invalid entry for search registries {bad:?}"
            )));
        }
        let b = blocked(inputs)?;
        // The payload repository alone may be allowed beside blocked registries: the guard
        // allows it when a mirror serves it.
        let payload = inputs
            .release_image
            .and_then(|r| payload_repo(r).ok())
            .map(|(repo, _)| repo);
        let only_payload = matches!(&b.allowed[..], [a] if Some(a.as_str()) == payload);
        if !b.allowed.is_empty() && !b.policy.is_empty() && !only_payload {
            return Err(refuse(
                "invalid images config: only one of AllowedRegistries or BlockedRegistries may be specified"
                    .to_owned(),
            ));
        }
    }
    Ok(())
}

/// Whether `location` is `scope` or inside it (`*.example.com` covers `a.example.com/x` and
/// `a.example.com:5000/x`), as upstream nests scopes.
fn in_scope(location: &str, scope: &str) -> bool {
    if location == scope || location.starts_with(&format!("{scope}/")) {
        return true;
    }
    let Some(domain) = scope.strip_prefix('*').filter(|d| d.starts_with('.')) else {
        return false;
    };
    let host = match location.split_once(':') {
        Some((h, _)) if h.contains('/') => return false,
        Some((h, _)) => h,
        None => location.split('/').next().unwrap_or_default(),
    };
    host.ends_with(domain)
}

fn entry<'t>(registries: &'t mut BTreeMap<String, Table>, scope: &str) -> &'t mut Table {
    registries.entry(scope.to_owned()).or_insert_with(|| {
        let mut t = Table::new();
        if scope.starts_with("*.") {
            t.insert("prefix".into(), scope.into());
        } else {
            t.insert("prefix".into(), "".into());
            t.insert("location".into(), scope.into());
        }
        t
    })
}

fn registries_conf(inputs: &Inputs<'_>, blocked: &Blocked, base: &str) -> Result<String, String> {
    let mut conf: Table = toml::from_str(base)
        .map_err(|e| format!("could not decode the pool's {REGISTRIES_CONF}: {e}"))?;
    // The base's own registries stay; ours are added or merged by scope.
    let mut registries: BTreeMap<String, Table> = BTreeMap::new();
    if let Some(toml::Value::Array(old)) = conf.remove("registry") {
        for r in old {
            if let toml::Value::Table(t) = r {
                let scope = t
                    .get("prefix")
                    .and_then(|p| p.as_str())
                    .filter(|p| !p.is_empty())
                    .or_else(|| t.get("location").and_then(|l| l.as_str()))
                    .unwrap_or_default()
                    .to_owned();
                registries.insert(scope, t);
            }
        }
    }
    for r in rules(inputs) {
        let reg = entry(&mut registries, r.source);
        if r.never_contact_source {
            reg.insert("blocked".into(), true.into());
        }
        let mirrors = reg
            .entry("mirror")
            .or_insert_with(|| toml::Value::Array(vec![]));
        let toml::Value::Array(mirrors) = mirrors else {
            continue;
        };
        for m in r.mirrors {
            let exists = mirrors.iter().any(|x| {
                x.get("location").and_then(|l| l.as_str()) == Some(m.as_str())
                    && x.get("pull-from-mirror").and_then(|p| p.as_str())
                        == Some(r.pull_from_mirror)
            });
            if !exists {
                let mut t = Table::new();
                t.insert("location".into(), m.as_str().into());
                t.insert("pull-from-mirror".into(), r.pull_from_mirror.into());
                mirrors.push(toml::Value::Table(t));
            }
        }
    }
    if let Some(s) = inputs.image.and_then(|i| i.spec.registry_sources.as_ref()) {
        for scope in &s.insecure_registries {
            entry(&mut registries, scope).insert("insecure".into(), true.into());
        }
        for scope in &blocked.registries {
            entry(&mut registries, scope).insert("blocked".into(), true.into());
        }
        // Mirrors inside an insecure scope are insecure too, as upstream marks them.
        for reg in registries.values_mut() {
            if let Some(toml::Value::Array(mirrors)) = reg.get_mut("mirror") {
                for m in mirrors {
                    let loc = m
                        .get("location")
                        .and_then(|l| l.as_str())
                        .unwrap_or_default();
                    if s.insecure_registries.iter().any(|sc| in_scope(loc, sc))
                        && let toml::Value::Table(t) = m
                    {
                        t.insert("insecure".into(), true.into());
                    }
                }
            }
        }
    }
    if !registries.is_empty() {
        conf.insert(
            "registry".into(),
            toml::Value::Array(registries.into_values().map(toml::Value::Table).collect()),
        );
    }
    toml::to_string(&conf).map_err(|e| format!("could not encode {REGISTRIES_CONF}: {e}"))
}

/// What upstream's template ships when a pool has no policy.json of its own.
const DEFAULT_POLICY: &str = r#"{"default":[{"type":"insecureAcceptAnything"}],"transports":{"docker-daemon":{"":[{"type":"insecureAcceptAnything"}]}}}"#;

fn policy_json(
    blocked: &Blocked,
    base: Option<&str>,
    signed: &crate::sigstore::ScopePolicies,
) -> Result<String, String> {
    let mut policy: Value = serde_json::from_str(base.unwrap_or(DEFAULT_POLICY))
        .map_err(|e| format!("could not decode the pool's {POLICY_JSON}: {e}"))?;
    let mut scopes: serde_json::Map<String, Value> = serde_json::Map::new();
    // Allowed registries, then blocked ones: with both (the payload repository allowed beside
    // blocked registries), the default accepts, as upstream's does.
    if !blocked.allowed.is_empty() {
        if blocked.allow_list {
            policy["default"] = json!([{"type": "reject"}]);
        }
        // An allowed registry a ClusterImagePolicy covers takes the signature requirement
        // alone, as upstream's does.
        for r in blocked.allowed.iter().filter(|r| !signed.contains_key(*r)) {
            scopes.insert(r.clone(), json!([{"type": "insecureAcceptAnything"}]));
        }
    }
    if !blocked.policy.is_empty() {
        policy["default"] = json!([{"type": "insecureAcceptAnything"}]);
        for r in blocked.policy.iter().filter(|r| !signed.contains_key(*r)) {
            scopes.insert(r.clone(), json!([{"type": "reject"}]));
        }
    }
    for (scope, requirements) in signed {
        let slot = scopes.entry(scope.clone()).or_insert_with(|| json!([]));
        if let Value::Array(a) = slot {
            a.extend(requirements.iter().cloned());
        }
    }
    if !scopes.is_empty() {
        // atomic takes at most two path components below the host.
        let atomic: serde_json::Map<String, Value> = scopes
            .iter()
            .filter(|(r, _)| r.matches('/').count() < 3)
            .map(|(r, v)| (r.clone(), v.clone()))
            .collect();
        if !policy["transports"].is_object() {
            policy["transports"] = json!({});
        }
        policy["transports"]["docker"] = Value::Object(scopes);
        policy["transports"]["atomic"] = Value::Object(atomic);
    }
    let mut out = serde_json::to_string_pretty(&policy).map_err(|e| e.to_string())?;
    out.push('\n');
    Ok(out)
}

/// The files of the generated config, over the pool's base `registries.conf` and `policy.json`.
/// An error in a base file is attributed to `Image/cluster`, which asked for the rewrite.
pub fn files(
    inputs: &Inputs<'_>,
    base_registries: Option<&str>,
    base_policy: Option<&str>,
) -> Result<Vec<Value>, Refused> {
    validate(inputs)?;
    // Upstream bounds the policies' scopes by the lists the guard leaves.
    let b = blocked(inputs)?;
    let signed = crate::sigstore::scope_policies(inputs.cips, &b.allowed, &b.policy)?;
    let base_err = |message: String| Refused {
        kind: "Image",
        name: mco_api::generators::IMAGE_CONFIG_NAME.to_owned(),
        message,
    };
    let conf =
        registries_conf(inputs, &b, base_registries.unwrap_or_default()).map_err(base_err)?;
    let policy = policy_json(&b, base_policy, &signed).map_err(base_err)?;
    let mut out = vec![file(REGISTRIES_CONF, &conf), file(POLICY_JSON, &policy)];
    if let Some(search) = search_registries(inputs) {
        out.push(file(SEARCH_REGISTRIES_DROPIN, &search));
    }
    let (by_namespace, _) = namespace_policies(inputs, &signed)?;
    for (namespace, scopes) in &by_namespace {
        let text = crate::sigstore::namespace_policy_json(&policy, scopes).map_err(base_err)?;
        let path = format!("{}/{namespace}.json", crate::sigstore::CRIO_POLICIES_DIR);
        out.push(file(&path, &text));
    }
    let all_scopes = signed
        .keys()
        .chain(by_namespace.values().flat_map(|s| s.keys()));
    if let Some(attachments) = crate::sigstore::registries_d(all_scopes, &conf) {
        out.push(file(crate::sigstore::SIGSTORE_REGISTRIES, &attachments));
    }
    Ok(out)
}

/// The ImagePolicies' requirements by namespace, and those whose scopes a ClusterImagePolicy
/// covers (for their status).
pub fn namespace_policies(
    inputs: &Inputs<'_>,
    signed: &crate::sigstore::ScopePolicies,
) -> Result<
    (
        crate::sigstore::NamespacePolicies,
        Vec<crate::sigstore::Conflict>,
    ),
    Refused,
> {
    let b = blocked(inputs)?;
    let taken = inputs.cips.iter().map(|c| c.spec.scopes.len()).sum();
    crate::sigstore::namespace_policies(inputs.ips, signed, &b.allowed, &b.policy, taken)
}

/// `Image/cluster`'s blocked registries as the release payload's guard leaves them.
///
/// A blocked scope the payload repository (the ControllerConfig's `spec.releaseImage`) is
/// nested in is dropped, since blocking it leaves the nodes unable to pull the release's
/// images, unless a digest mirror (`ImageDigestMirrorSet` or `ImageContentSourcePolicy`,
/// not `ImageTagMirrorSet`: the release is pulled by digest) gives the repository a pull
/// source that is not itself blocked. Then it stays blocked in registries.conf, and
/// policy.json accepts the payload repository by scope so that the mirrors are used. Without
/// a release image (a cluster with no release payload) nothing is guarded.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Blocked {
    /// The scopes registries.conf blocks.
    pub registries: Vec<String>,
    /// The scopes policy.json rejects: those of `registries` other than the payload
    /// repository itself.
    pub policy: Vec<String>,
    /// The scopes policy.json accepts: the payload repository when a mirror serves it, then
    /// `allowedRegistries`.
    pub allowed: Vec<String>,
    /// The blocked scopes dropped, in the order given.
    pub dropped: Vec<String>,
    /// Whether `allowedRegistries` is set, so that policy.json rejects what it does not
    /// accept. The payload repository accepted for its mirrors does not make an allow list:
    /// upstream's does, and so rejects every other registry when exactly the mirrored payload
    /// repository is blocked, which no administrator asked for.
    pub allow_list: bool,
}

impl Blocked {
    /// Upstream's message for the dropped scopes, if any.
    pub fn warning(&self) -> Option<String> {
        if self.dropped.is_empty() {
            return None;
        }
        let quoted: Vec<String> = self
            .dropped
            .iter()
            .map(|s| mco_apimachinery::schema::go_quote(s))
            .collect();
        Some(format!(
            "error adding [{}] to blocked registries, cannot block the repository being used by the payload",
            quoted.join(" ")
        ))
    }
}

/// Why a release image is not taken: not an image reference, or not in the canonical form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum PayloadRefError {
    #[error(transparent)]
    Grammar(#[from] image_ref::Error),
    #[error("its name does not start with a registry host")]
    NoRegistryHost,
    #[error("a docker.io name is canonical only with its namespace")]
    DockerIoNamespace,
    #[error("index.docker.io is canonical only as docker.io")]
    LegacyDockerHost,
}

/// The repository of a release image, `host[:port]/path[:tag][@digest]`, and whether the
/// reference is by digest. Upstream takes only the canonical form: the host is required,
/// `docker.io` needs its `library/` namespace, and its legacy host `index.docker.io` (which
/// normalization turns into `docker.io`) is refused.
fn payload_repo(image: &str) -> Result<(&str, bool), PayloadRefError> {
    let r = image_ref::parse(image)?;
    // What normalization takes for a registry rather than a first path component.
    let registry = r
        .host
        .filter(|h| h.contains(['.', ':']) || *h == "localhost");
    let Some(host) = registry else {
        return Err(PayloadRefError::NoRegistryHost);
    };
    if host == "docker.io" && !r.path.contains('/') {
        return Err(PayloadRefError::DockerIoNamespace);
    }
    if host == "index.docker.io" {
        return Err(PayloadRefError::LegacyDockerHost);
    }
    Ok((r.repository, r.digest.is_some()))
}

/// How long a prefix of `name` a registries.conf `prefix` matches, as containers/image
/// matches one (`-1` for none): the whole of it, or up to a `/`, `:` or `@`.
fn prefix_match(name: &str, prefix: &str) -> Option<usize> {
    if let Some(domain) = prefix.strip_prefix('*') {
        let at = name.find(domain)?;
        if name[..at].contains('/') {
            return None;
        }
        let end = at + domain.len();
        return (end == name.len() || name[end..].starts_with([':', '/', '@'])).then_some(end);
    }
    let rest = name.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with([':', '/', '@'])).then_some(prefix.len())
}

/// Whether a pull source of the payload repository other than the repository itself is
/// outside every blocked scope: the mirrors of the registries.conf entry the repository
/// resolves to (its longest matching scope), as upstream resolves them from the digest
/// mirrors alone.
fn payload_has_unblocked_mirror(inputs: &Inputs<'_>, repo: &str, digested: bool) -> bool {
    let Some(s) = inputs.image.and_then(|i| i.spec.registry_sources.as_ref()) else {
        return false;
    };
    // Digest mirrors by source; a set whose mirrors only repeat its source is none.
    let mut mirrors: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in rules(inputs)
        .into_iter()
        .filter(|r| r.pull_from_mirror == "digest-only")
    {
        if r.mirrors.iter().any(|m| m != r.source) {
            let set = mirrors.entry(r.source).or_default();
            for m in r.mirrors.iter().filter(|m| *m != r.source) {
                if !set.contains(&m.as_str()) {
                    set.push(m);
                }
            }
        }
    }
    let scopes = mirrors
        .keys()
        .copied()
        .chain(s.blocked_registries.iter().map(String::as_str))
        .chain(s.insecure_registries.iter().map(String::as_str));
    let mut best: Option<&str> = None;
    for scope in scopes {
        if prefix_match(repo, scope).is_some() && best.is_none_or(|b| scope.len() > b.len()) {
            best = Some(scope);
        }
    }
    let Some(scope) = best else {
        return false;
    };
    // An entry without mirrors of its own takes those of the first source it is nested in.
    let found: Vec<String> = match mirrors.get(scope) {
        Some(own) => own.iter().map(|m| m.to_string()).collect(),
        None if scope.starts_with("*.") => vec![],
        None => mirrors
            .iter()
            .find(|(src, _)| in_scope(scope, src))
            .map(|(src, ms)| {
                ms.iter()
                    .map(|m| format!("{m}{}", &scope[src.len()..]))
                    .collect()
            })
            .unwrap_or_default(),
    };
    // Digest mirrors serve only a reference by digest.
    if !digested {
        return false;
    }
    let at = prefix_match(repo, scope).unwrap_or_default();
    found.iter().any(|m| {
        let source = format!("{m}{}", &repo[at..]);
        !s.blocked_registries.iter().any(|b| in_scope(&source, b))
    })
}

/// `Image/cluster`'s blocked and allowed registries after the release payload's guard (see
/// [`Blocked`]). A release image that does not parse is refused.
pub fn blocked(inputs: &Inputs<'_>) -> Result<Blocked, Refused> {
    let Some(s) = inputs.image.and_then(|i| i.spec.registry_sources.as_ref()) else {
        return Ok(Blocked::default());
    };
    let release = inputs.release_image.filter(|r| !r.is_empty());
    let Some(release) = release else {
        return Ok(Blocked {
            registries: s.blocked_registries.clone(),
            policy: s.blocked_registries.clone(),
            allowed: s.allowed_registries.clone(),
            dropped: vec![],
            allow_list: !s.allowed_registries.is_empty(),
        });
    };
    let (repo, digested) = payload_repo(release).map_err(|why| Refused {
        kind: "ControllerConfig",
        name: mco_api::constants::names::CONTROLLER_CONFIG.to_owned(),
        message: format!(
            "spec.releaseImage: error parsing reference of release image {release:?}: {why}"
        ),
    })?;
    let mut out = Blocked::default();
    for scope in &s.blocked_registries {
        if !in_scope(repo, scope) {
            out.registries.push(scope.clone());
            out.policy.push(scope.clone());
        } else if payload_has_unblocked_mirror(inputs, repo, digested) {
            out.registries.push(scope.clone());
            // The repository itself stays pullable by policy, through its mirrors.
            if scope != repo {
                out.policy.push(scope.clone());
            }
            out.allowed.push(repo.to_owned());
        } else {
            out.dropped.push(scope.clone());
        }
    }
    out.allowed.extend(s.allowed_registries.iter().cloned());
    out.allow_list = !s.allowed_registries.is_empty();
    Ok(out)
}

/// The files for a pool whose own MachineConfigs, in merge order, are `pool_mcs`: [`files`]
/// over the pool's base `registries.conf` and `policy.json`.
pub fn pool_files(
    inputs: &Inputs<'_>,
    pool_mcs: &[&mco_api::MachineConfig],
) -> Result<Vec<Value>, Refused> {
    let base = |path| crate::base_file(pool_mcs, path).ok().flatten();
    files(
        inputs,
        base(REGISTRIES_CONF).as_deref(),
        base(POLICY_JSON).as_deref(),
    )
}

/// The search registries drop-in, when `Image/cluster` names any: tried in order for an image
/// named without a registry.
fn search_registries(inputs: &Inputs<'_>) -> Option<String> {
    let search = &inputs
        .image?
        .spec
        .registry_sources
        .as_ref()?
        .container_runtime_search_registries;
    if search.is_empty() {
        return None;
    }
    let mut t = Table::new();
    t.insert(
        "unqualified-search-registries".into(),
        toml::Value::Array(search.iter().map(|r| r.as_str().into()).collect()),
    );
    toml::to_string(&t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{golden, machine_config, managed_name};
    use serde_json::json;

    const BASE: &str =
        "unqualified-search-registries = [\"registry.example.com\"]\nshort-name-mode = \"\"\n";

    fn obj<T: serde::de::DeserializeOwned>(kind: &str, api: &str, name: &str, spec: Value) -> T {
        serde_json::from_value(
            json!({"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec}),
        )
        .unwrap()
    }

    fn idms(name: &str, spec: Value) -> ImageDigestMirrorSet {
        obj("ImageDigestMirrorSet", "config.openshift.io/v1", name, spec)
    }

    #[test]
    fn all_sources_together() {
        let idms = [idms(
            "mirrors",
            json!({"imageDigestMirrors": [
                {"source": "quay.io/openshift-release-dev/ocp-release", "mirrors": ["mirror.example.net/ocp/release"]},
                {"source": "registry.redhat.io", "mirrors": ["mirror.example.net/redhat"], "mirrorSourcePolicy": "NeverContactSource"}
            ]}),
        )];
        let itms: [ImageTagMirrorSet; 1] = [obj(
            "ImageTagMirrorSet",
            "config.openshift.io/v1",
            "tags",
            json!({"imageTagMirrors": [
                {"source": "docker.io/library", "mirrors": ["mirror.example.net/dockerhub"]}
            ]}),
        )];
        let icsp: [ImageContentSourcePolicy; 1] = [obj(
            "ImageContentSourcePolicy",
            "operator.openshift.io/v1alpha1",
            "legacy",
            json!({"repositoryDigestMirrors": [
                {"source": "quay.io/openshift-release-dev/ocp-v4.0-art-dev", "mirrors": ["mirror.example.net/ocp/art"]}
            ]}),
        )];
        let image: Image = obj(
            "Image",
            "config.openshift.io/v1",
            "cluster",
            json!({"registrySources": {
                "insecureRegistries": ["mirror.example.net"],
                "blockedRegistries": ["untrusted.example.com", "docker.io/evil/one/two"]
            }}),
        );
        let inputs = Inputs {
            image: Some(&image),
            idms: &idms,
            itms: &itms,
            icsp: &icsp,
            cips: &[],
            ips: &[],
            release_image: None,
        };
        let mc = machine_config(
            &managed_name("worker", "registries", ""),
            "worker",
            "v0.0.0-test",
            files(&inputs, Some(BASE), None).unwrap(),
        );
        golden::check("registries-all-sources.yaml", &golden::render(&mc));
    }

    #[test]
    fn allowed_registries_reject_everything_else() {
        let image: Image = obj(
            "Image",
            "config.openshift.io/v1",
            "cluster",
            json!({"registrySources": {
                "allowedRegistries": ["quay.io", "registry.example.com/team"]
            }}),
        );
        let inputs = Inputs {
            image: Some(&image),
            ..Default::default()
        };
        let mc = machine_config(
            "99-worker-generated-registries",
            "worker",
            "v0.0.0-test",
            files(&inputs, Some(BASE), None).unwrap(),
        );
        golden::check("registries-allowed.yaml", &golden::render(&mc));
    }

    #[test]
    fn conflicting_source_policies_name_the_later_object() {
        let sets = [
            idms(
                "a",
                json!({"imageDigestMirrors": [{"source": "quay.io/x", "mirrors": ["m.example.net/x"]}]}),
            ),
            idms(
                "b",
                json!({"imageDigestMirrors": [{"source": "quay.io/x", "mirrors": ["n.example.net/x"], "mirrorSourcePolicy": "NeverContactSource"}]}),
            ),
        ];
        let e = files(
            &Inputs {
                idms: &sets,
                ..Default::default()
            },
            Some(BASE),
            None,
        )
        .unwrap_err();
        assert_eq!(e.kind, "ImageDigestMirrorSet");
        assert_eq!(e.name, "b");
        assert_eq!(
            e.to_string(),
            "ImageDigestMirrorSet b: spec.imageDigestMirrors[0]: conflicting mirrorSourcePolicy is set for the same source \"quay.io/x\" in imagedigestmirrorsets, imagetagmirrorsets, or imagecontentsourcepolicies"
        );
    }

    #[test]
    fn bad_inputs_are_refused_naming_object_and_field() {
        let cases = [
            (
                json!({"imageDigestMirrors": [{"source": "https://quay.io/x", "mirrors": ["m.example.net"]}]}),
                "spec.imageDigestMirrors[0]: invalid format for source \"https://quay.io/x\"",
            ),
            (
                json!({"imageDigestMirrors": [{"source": "quay.io/x", "mirrors": ["m example"]}]}),
                "spec.imageDigestMirrors[0]: invalid format for mirror \"m example\"",
            ),
            (
                json!({"imageDigestMirrors": [{"source": "quay.io/x", "mirrors": ["quay.io/x"], "mirrorSourcePolicy": "NeverContactSource"}]}),
                "cannot set mirrorSourcePolicy: NeverContactSource if the source \"quay.io/x\" is one of the mirrors",
            ),
            (
                json!({"imageDigestMirrors": [{"source": "quay.io/x", "mirrorSourcePolicy": "Sometimes"}]}),
                "spec.imageDigestMirrors[0].mirrorSourcePolicy: unsupported value \"Sometimes\"",
            ),
        ];
        for (spec, want) in cases {
            let sets = [idms("bad", spec.clone())];
            let e = files(
                &Inputs {
                    idms: &sets,
                    ..Default::default()
                },
                Some(BASE),
                None,
            )
            .unwrap_err();
            assert_eq!(e.name, "bad");
            assert!(e.message.contains(want), "{spec}: {e}");
        }
        let image: Image = obj(
            "Image",
            "config.openshift.io/v1",
            "cluster",
            json!({"registrySources": {
            "allowedRegistries": ["quay.io"], "blockedRegistries": ["docker.io"]}}),
        );
        let e = files(
            &Inputs {
                image: Some(&image),
                ..Default::default()
            },
            Some(BASE),
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Image cluster: invalid images config: only one of AllowedRegistries or BlockedRegistries may be specified"
        );
        let image: Image = obj(
            "Image",
            "config.openshift.io/v1",
            "cluster",
            json!({"registrySources": {
            "insecureRegistries": ["*.example.com/path"]}}),
        );
        let e = validate(&Inputs {
            image: Some(&image),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            e.message.contains(
                "spec.registrySources.insecureRegistries: invalid entry for insecure registries"
            ),
            "{e}"
        );
    }

    #[test]
    fn mirror_rules_are_limited() {
        let many: Vec<Value> = (0..=MAX_MIRROR_RULES)
            .map(|i| json!({"source": format!("quay.io/r{i}"), "mirrors": ["m.example.net/x"]}))
            .collect();
        let at_limit = [idms(
            "big",
            json!({"imageDigestMirrors": many[..MAX_MIRROR_RULES]}),
        )];
        validate(&Inputs {
            idms: &at_limit,
            ..Default::default()
        })
        .unwrap();
        let over = [idms("big", json!({"imageDigestMirrors": many}))];
        let e = validate(&Inputs {
            idms: &over,
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.message.contains("too many mirror rules"), "{e}");
    }

    #[test]
    fn nothing_to_write_without_inputs() {
        assert!(Inputs::default().is_empty());
        let image: Image = obj("Image", "config.openshift.io/v1", "cluster", json!({}));
        assert!(
            Inputs {
                image: Some(&image),
                ..Default::default()
            }
            .is_empty()
        );
    }

    fn image(sources: Value) -> Image {
        obj(
            "Image",
            "config.openshift.io/v1",
            "cluster",
            json!({ "registrySources": sources }),
        )
    }

    const RELEASE: &str = "quay.io/openshift-release-dev/ocp-release@sha256:4207ba569ff014931f1b5d125fe3751936a768e119546683c899eb09f3cdceb0";
    const PAYLOAD_REPO: &str = "quay.io/openshift-release-dev/ocp-release";

    /// The generated registries.conf's blocked scopes and policy.json, for `sources` and
    /// digest mirrors `mirrors` (source, mirror) under release image `release`.
    fn guarded(
        sources: Value,
        mirrors: &[(&str, &str)],
        release: Option<&str>,
    ) -> (Result<Vec<Value>, Refused>, Blocked) {
        let image = image(sources);
        let rules: Vec<Value> = mirrors
            .iter()
            .map(|(src, m)| json!({"source": src, "mirrors": [m]}))
            .collect();
        let sets = [idms("mirrors", json!({ "imageDigestMirrors": rules }))];
        let inputs = Inputs {
            image: Some(&image),
            idms: &sets,
            release_image: release,
            ..Default::default()
        };
        let b = blocked(&inputs).unwrap_or_default();
        (files(&inputs, Some(BASE), None), b)
    }

    fn file_of(out: &[Value], path: &str) -> String {
        let mc = machine_config("x", "worker", "v", out.to_vec());
        crate::base_file(&[&mc], path).unwrap().unwrap()
    }

    fn blocked_in_conf(out: &[Value]) -> Vec<String> {
        let conf: Table = toml::from_str(&file_of(out, REGISTRIES_CONF)).unwrap();
        let regs = conf.get("registry").and_then(|r| r.as_array()).cloned();
        regs.unwrap_or_default()
            .iter()
            .filter(|r| r.get("blocked").and_then(|b| b.as_bool()) == Some(true))
            .map(|r| {
                let prefix = r["prefix"].as_str().unwrap_or_default();
                let location = r.get("location").and_then(|l| l.as_str());
                location
                    .filter(|_| prefix.is_empty())
                    .unwrap_or(prefix)
                    .to_owned()
            })
            .collect()
    }

    fn policy_of(out: &[Value]) -> Value {
        serde_json::from_str(&file_of(out, POLICY_JSON)).unwrap()
    }

    #[test]
    fn blocking_the_payload_registry_without_a_mirror_is_dropped_with_upstreams_message() {
        let (out, b) = guarded(
            json!({"blockedRegistries": ["quay.io", "untrusted.example.com"]}),
            // A mirror of another repository does not serve the payload.
            &[("quay.io/other", "mirror.example.net/other")],
            Some(RELEASE),
        );
        let out = out.unwrap();
        assert_eq!(b.dropped, ["quay.io"]);
        assert_eq!(
            b.warning().unwrap(),
            "error adding [\"quay.io\"] to blocked registries, cannot block the repository being used by the payload"
        );
        assert_eq!(blocked_in_conf(&out), ["untrusted.example.com"]);
        assert_eq!(
            policy_of(&out)["transports"]["docker"],
            json!({"untrusted.example.com": [{"type": "reject"}]})
        );
        assert_eq!(
            policy_of(&out)["default"],
            json!([{"type": "insecureAcceptAnything"}])
        );
    }

    #[test]
    fn every_scope_covering_the_payload_is_dropped_and_named() {
        let (out, b) = guarded(
            json!({"blockedRegistries": [PAYLOAD_REPO, "*.example.com", "quay.io/openshift-release-dev", "quay.io"]}),
            &[],
            Some(RELEASE),
        );
        assert_eq!(
            b.dropped,
            [PAYLOAD_REPO, "quay.io/openshift-release-dev", "quay.io"]
        );
        assert_eq!(
            b.warning().unwrap(),
            format!(
                "error adding [\"{PAYLOAD_REPO}\" \"quay.io/openshift-release-dev\" \"quay.io\"] to blocked registries, cannot block the repository being used by the payload"
            )
        );
        // *.example.com does not cover quay.io.
        assert_eq!(blocked_in_conf(&out.unwrap()), ["*.example.com"]);
    }

    #[test]
    fn a_payload_registry_with_an_unblocked_digest_mirror_stays_blocked_and_the_payload_allowed() {
        let (out, b) = guarded(
            json!({"blockedRegistries": ["quay.io", "untrusted.example.com"]}),
            &[(PAYLOAD_REPO, "mirror.example.net/ocp/release")],
            Some(RELEASE),
        );
        let out = out.unwrap();
        assert_eq!(b.warning(), None);
        assert_eq!(b.registries, ["quay.io", "untrusted.example.com"]);
        assert_eq!(b.policy, ["quay.io", "untrusted.example.com"]);
        assert_eq!(b.allowed, [PAYLOAD_REPO]);
        assert_eq!(blocked_in_conf(&out), ["quay.io", "untrusted.example.com"]);
        // Upstream's "block registry of payload image": accept by default, reject the
        // blocked scopes, accept the payload repository.
        let docker = json!({
            "quay.io": [{"type": "reject"}],
            "untrusted.example.com": [{"type": "reject"}],
            PAYLOAD_REPO: [{"type": "insecureAcceptAnything"}],
        });
        let policy = policy_of(&out);
        assert_eq!(
            policy["default"],
            json!([{"type": "insecureAcceptAnything"}])
        );
        assert_eq!(policy["transports"]["docker"], docker);
        assert_eq!(policy["transports"]["atomic"], docker);
        let mc = machine_config(
            "99-worker-generated-registries",
            "worker",
            "v0.0.0-test",
            out,
        );
        golden::check("registries-payload-mirrored.yaml", &golden::render(&mc));
    }

    #[test]
    fn blocking_exactly_the_mirrored_payload_repository_keeps_it_out_of_the_rejected_scopes() {
        let (out, b) = guarded(
            json!({"blockedRegistries": [PAYLOAD_REPO]}),
            &[("quay.io/openshift-release-dev", "mirror.example.net/ocp")],
            Some(RELEASE),
        );
        assert_eq!(b.registries, [PAYLOAD_REPO]);
        assert!(b.policy.is_empty());
        assert_eq!(b.allowed, [PAYLOAD_REPO]);
        let out = out.unwrap();
        assert_eq!(blocked_in_conf(&out), [PAYLOAD_REPO]);
        // Only blocked registries were asked for: the default still accepts. (Upstream's takes
        // the payload repository accepted for its mirrors for an allow list, and rejects every
        // other registry.)
        let policy = policy_of(&out);
        assert_eq!(
            policy["default"],
            json!([{"type": "insecureAcceptAnything"}])
        );
        assert_eq!(
            policy["transports"]["docker"],
            json!({PAYLOAD_REPO: [{"type": "insecureAcceptAnything"}]})
        );
    }

    #[test]
    fn a_mirror_that_is_itself_blocked_does_not_save_the_payload_scope() {
        // Upstream's cases: the mirror's own repository blocked, and its registry blocked.
        for (mirrors, also_blocked) in [
            (
                ("quay.io", "block.io"),
                "block.io/openshift-release-dev/ocp-release",
            ),
            ((PAYLOAD_REPO, "block.io/ocp"), "block.io"),
            ((PAYLOAD_REPO, "a.block.io:5000/ocp"), "*.block.io"),
        ] {
            let (out, b) = guarded(
                json!({"blockedRegistries": ["quay.io", also_blocked]}),
                &[mirrors],
                Some(RELEASE),
            );
            assert_eq!(b.dropped, ["quay.io"], "{mirrors:?}");
            assert_eq!(b.registries, [also_blocked]);
            assert!(b.allowed.is_empty());
            assert_eq!(blocked_in_conf(&out.unwrap()).len(), 1);
        }
    }

    #[test]
    fn a_tag_mirror_or_a_release_by_tag_is_no_way_around_the_block() {
        let image = image(json!({"blockedRegistries": ["quay.io"]}));
        let tags: [ImageTagMirrorSet; 1] = [obj(
            "ImageTagMirrorSet",
            "config.openshift.io/v1",
            "tags",
            json!({"imageTagMirrors": [{"source": PAYLOAD_REPO, "mirrors": ["mirror.example.net/ocp"]}]}),
        )];
        let by_tag = Inputs {
            image: Some(&image),
            itms: &tags,
            release_image: Some(RELEASE),
            ..Default::default()
        };
        assert_eq!(blocked(&by_tag).unwrap().dropped, ["quay.io"]);
        let (_, b) = guarded(
            json!({"blockedRegistries": ["quay.io"]}),
            &[(PAYLOAD_REPO, "mirror.example.net/ocp")],
            Some("quay.io/openshift-release-dev/ocp-release:4.18.0-x86_64"),
        );
        assert_eq!(b.dropped, ["quay.io"]);
    }

    #[test]
    fn a_mirror_of_a_parent_scope_serves_a_nested_blocked_entry() {
        // The payload resolves to the blocked entry quay.io/openshift-release-dev, which
        // takes the mirrors of quay.io, its parent, as upstream's registries.conf has it.
        let (_, b) = guarded(
            json!({"blockedRegistries": ["quay.io/openshift-release-dev"]}),
            &[("quay.io", "mirror.example.net/quay")],
            Some(RELEASE),
        );
        assert!(b.dropped.is_empty());
        assert_eq!(b.allowed, [PAYLOAD_REPO]);
    }

    #[test]
    fn a_blocked_scope_not_covering_the_payload_is_kept() {
        let (out, b) = guarded(
            json!({"blockedRegistries": ["quay.io/openshift-release-dev/ocp-release-nightly", "quay.io/other", "*.quay.io", "untrusted.example.com"]}),
            &[],
            Some(RELEASE),
        );
        assert!(b.dropped.is_empty());
        assert!(b.allowed.is_empty());
        assert_eq!(
            blocked_in_conf(&out.unwrap()),
            [
                "*.quay.io",
                "quay.io/openshift-release-dev/ocp-release-nightly",
                "quay.io/other",
                "untrusted.example.com"
            ]
        );
        assert_eq!(b.policy.len(), 4);
    }

    #[test]
    fn without_a_release_image_nothing_is_guarded() {
        for release in [None, Some("")] {
            let (out, b) = guarded(json!({"blockedRegistries": ["quay.io"]}), &[], release);
            assert!(b.dropped.is_empty());
            assert_eq!(blocked_in_conf(&out.unwrap()), ["quay.io"]);
        }
    }

    #[test]
    fn allowed_beside_blocked_only_when_it_is_the_payload_repository() {
        let (out, _) = guarded(
            json!({"allowedRegistries": [PAYLOAD_REPO], "blockedRegistries": ["untrusted.example.com"]}),
            &[],
            Some(RELEASE),
        );
        let policy = policy_of(&out.unwrap());
        assert_eq!(
            policy["default"],
            json!([{"type": "insecureAcceptAnything"}])
        );
        assert_eq!(
            policy["transports"]["docker"],
            json!({
                PAYLOAD_REPO: [{"type": "insecureAcceptAnything"}],
                "untrusted.example.com": [{"type": "reject"}],
            })
        );
        let refused = [
            (
                json!({"allowedRegistries": ["quay.io"], "blockedRegistries": ["untrusted.example.com"]}),
                Some(RELEASE),
            ),
            (
                json!({"allowedRegistries": [PAYLOAD_REPO], "blockedRegistries": ["untrusted.example.com"]}),
                None,
            ),
            (
                json!({"allowedRegistries": [PAYLOAD_REPO, "registry.example.com"], "blockedRegistries": ["untrusted.example.com"]}),
                Some(RELEASE),
            ),
        ];
        for (sources, release) in refused {
            let (out, _) = guarded(sources.clone(), &[], release);
            assert_eq!(
                out.unwrap_err().to_string(),
                "Image cluster: invalid images config: only one of AllowedRegistries or BlockedRegistries may be specified",
                "{sources}"
            );
        }
    }

    #[test]
    fn a_release_image_that_does_not_parse_is_refused() {
        for (bad, why) in [
            (
                "ocp-release@sha256:4207ba569ff014931f1b5d125fe3751936a768e119546683c899eb09f3cdceb0",
                "its name does not start with a registry host",
            ),
            // A first component without `.` or `:` is a path component, not a registry.
            (
                "ocp/release:4.18",
                "its name does not start with a registry host",
            ),
            ("quay.io", "its name does not start with a registry host"),
            (
                "docker.io/ubuntu:24.04",
                "a docker.io name is canonical only with its namespace",
            ),
            (
                "index.docker.io/library/ubuntu:24.04",
                "index.docker.io is canonical only as docker.io",
            ),
            // The grammar's refusals, in the grammar's words.
            (
                "quay.io/Upper/case",
                "its name is not [host[:port]/]path, with lower case path components",
            ),
            (
                "quay.io/x@sha256:abc",
                "its digest is not <algorithm>:<hex, at least 32 digits>",
            ),
            (
                "quay.io/x:-bad",
                "its tag is not 1 to 128 letters, digits, '_', '.' or '-' (not first)",
            ),
        ] {
            let (out, _) = guarded(json!({"blockedRegistries": ["quay.io"]}), &[], Some(bad));
            let e = out.unwrap_err();
            assert_eq!(e.kind, "ControllerConfig");
            assert_eq!(e.name, "machine-config-controller");
            assert_eq!(
                e.message,
                format!(
                    "spec.releaseImage: error parsing reference of release image {bad:?}: {why}"
                ),
            );
        }
        for good in [
            RELEASE,
            "localhost/ocp:4.18",
            "registry.example.com:5000/ocp/release:4.18.0",
            "docker.io/library/ubuntu",
            "[::1]:5000/ocp/release",
        ] {
            assert!(payload_repo(good).is_ok(), "{good}");
        }
        assert_eq!(payload_repo(RELEASE), Ok((PAYLOAD_REPO, true)));
        assert_eq!(
            payload_repo("registry.example.com:5000/ocp/release:4.18.0"),
            Ok(("registry.example.com:5000/ocp/release", false))
        );
    }

    #[test]
    fn search_registries_go_into_their_drop_in_alone() {
        let image = image(
            json!({"containerRuntimeSearchRegistries": ["quay.io", "registry.example.com:5000"]}),
        );
        let inputs = Inputs {
            image: Some(&image),
            ..Default::default()
        };
        assert!(!inputs.is_empty());
        let out = files(&inputs, Some(BASE), None).unwrap();
        let paths: Vec<&str> = out.iter().map(|f| f["path"].as_str().unwrap()).collect();
        assert_eq!(
            paths,
            [REGISTRIES_CONF, POLICY_JSON, SEARCH_REGISTRIES_DROPIN]
        );
        let mc = machine_config("x", "worker", "v", out);
        assert_eq!(
            crate::base_file(&[&mc], SEARCH_REGISTRIES_DROPIN)
                .unwrap()
                .as_deref(),
            Some("unqualified-search-registries = [\"quay.io\", \"registry.example.com:5000\"]\n")
        );
        // registries.conf keeps the base's own search list; the drop-in is read after it.
        let conf = crate::base_file(&[&mc], REGISTRIES_CONF).unwrap().unwrap();
        assert_eq!(
            toml::from_str::<Table>(&conf).unwrap(),
            toml::from_str::<Table>(BASE).unwrap()
        );
    }

    #[test]
    fn a_search_registry_with_a_path_a_wildcard_or_past_the_limit_is_refused() {
        for bad in ["quay.io/team", "*.example.com", "https://quay.io", ""] {
            let image = image(json!({"containerRuntimeSearchRegistries": ["quay.io", bad]}));
            let inputs = Inputs {
                image: Some(&image),
                ..Default::default()
            };
            let e = files(&inputs, Some(BASE), None).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "Image cluster: spec.registrySources.containerRuntimeSearchRegistries: invalid entry for search registries {bad:?}"
                )
            );
        }
        let at_limit: Vec<String> = (0..MAX_SEARCH_REGISTRIES)
            .map(|i| format!("r{i}.example.com"))
            .collect();
        let image_ok = image(json!({ "containerRuntimeSearchRegistries": at_limit }));
        let ok = Inputs {
            image: Some(&image_ok),
            ..Default::default()
        };
        assert!(files(&ok, Some(BASE), None).is_ok());
        let mut over = at_limit.clone();
        over.push("one-more.example.com".into());
        let image_over = image(json!({ "containerRuntimeSearchRegistries": over }));
        let e = files(
            &Inputs {
                image: Some(&image_over),
                ..Default::default()
            },
            Some(BASE),
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .ends_with("too many search registries: 65 (at most 64)"),
            "{e}"
        );
    }
}
