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
    ImageTagMirrorSet,
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
        if !s.allowed_registries.is_empty() && !s.blocked_registries.is_empty() {
            return Err(refuse(
                "invalid images config: only one of AllowedRegistries or BlockedRegistries may be specified"
                    .to_owned(),
            ));
        }
    }
    Ok(())
}

/// Whether `location` is `scope` or inside it (`*.example.com` covers `a.example.com/x`).
fn in_scope(location: &str, scope: &str) -> bool {
    if let Some(domain) = scope.strip_prefix("*.") {
        let host = location.split('/').next().unwrap_or_default();
        return host.ends_with(&format!(".{domain}"));
    }
    location == scope || location.starts_with(&format!("{scope}/"))
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

fn registries_conf(inputs: &Inputs<'_>, base: &str) -> Result<String, String> {
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
        for scope in &s.blocked_registries {
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
    inputs: &Inputs<'_>,
    base: Option<&str>,
    signed: &crate::sigstore::ScopePolicies,
) -> Result<String, String> {
    let mut policy: Value = serde_json::from_str(base.unwrap_or(DEFAULT_POLICY))
        .map_err(|e| format!("could not decode the pool's {POLICY_JSON}: {e}"))?;
    let mut scopes: serde_json::Map<String, Value> = serde_json::Map::new();
    if let Some(s) = inputs.image.and_then(|i| i.spec.registry_sources.as_ref()) {
        let (default, scoped, list) = if !s.allowed_registries.is_empty() {
            ("reject", "insecureAcceptAnything", &s.allowed_registries)
        } else {
            ("insecureAcceptAnything", "reject", &s.blocked_registries)
        };
        if !list.is_empty() {
            policy["default"] = json!([{"type": default}]);
            // An allowed registry a ClusterImagePolicy covers takes the signature
            // requirement alone, as upstream's does.
            for r in list.iter().filter(|r| !signed.contains_key(*r)) {
                scopes.insert(r.clone(), json!([{"type": scoped}]));
            }
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
    let sources = inputs.image.and_then(|i| i.spec.registry_sources.as_ref());
    let signed = crate::sigstore::scope_policies(
        inputs.cips,
        sources.map_or(&[][..], |s| &s.allowed_registries),
        sources.map_or(&[][..], |s| &s.blocked_registries),
    )?;
    let base_err = |message: String| Refused {
        kind: "Image",
        name: mco_api::generators::IMAGE_CONFIG_NAME.to_owned(),
        message,
    };
    let conf = registries_conf(inputs, base_registries.unwrap_or_default()).map_err(base_err)?;
    let policy = policy_json(inputs, base_policy, &signed).map_err(base_err)?;
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
    let sources = inputs.image.and_then(|i| i.spec.registry_sources.as_ref());
    let taken = inputs.cips.iter().map(|c| c.spec.scopes.len()).sum();
    crate::sigstore::namespace_policies(
        inputs.ips,
        signed,
        sources.map_or(&[][..], |s| &s.allowed_registries),
        sources.map_or(&[][..], |s| &s.blocked_registries),
        taken,
    )
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
