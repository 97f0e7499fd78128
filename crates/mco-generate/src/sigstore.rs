//! `ClusterImagePolicy` → sigstore signature verification, as upstream's container runtime config
//! controller writes it into the registries config:
//!
//! - each scope's `sigstoreSigned` requirement in `/etc/containers/policy.json` (`docker` and,
//!   for scopes of at most two path components, `atomic`), in the containers-policy.json(5)
//!   shape: `keyData`, `fulcio`, `pki`, `rekorPublicKeyData`, `signedIdentity`;
//! - `use-sigstore-attachments: true` in `/etc/containers/registries.d/sigstore-registries.yaml`
//!   for each scope and every endpoint it is pulled from (its registry's mirrors included), so
//!   CRI-O fetches the signatures wherever it fetches the image.
//!
//! Refusals name the policy and the field. A scope must lie inside `Image/cluster`'s allowed
//! registries when those are set, and outside its blocked ones (upstream's messages).

use std::collections::BTreeMap;

use base64::Engine as _;
use mco_api::generators::ImageSigstoreVerificationPolicy;
use mco_api::{ClusterImagePolicy, ImagePolicy};
use serde_json::{Value, json};

use crate::registries::Refused;

pub const SIGSTORE_REGISTRIES: &str = "/etc/containers/registries.d/sigstore-registries.yaml";

/// The most scopes across all policies: each is a policy.json entry CRI-O evaluates on every
/// pull, and a registries.d entry. Upstream's API allows 256 per policy.
pub const MAX_POLICY_SCOPES: usize = 1000;

const KIND: &str = "ClusterImagePolicy";

/// Each scope's requirements, in policy order, keyed by scope.
pub type ScopePolicies = BTreeMap<String, Vec<Value>>;

fn refuse(cip: &ClusterImagePolicy, message: String) -> Refused {
    Refused {
        kind: KIND,
        name: cip.metadata.name.clone().unwrap_or_default(),
        message,
    }
}

/// A base64 field: decoded to check it, passed on as the API serves it (policy.json takes the
/// same base64).
fn data<'a>(field: &str, v: &'a str) -> Result<&'a str, String> {
    if v.is_empty() {
        return Err(format!("{field}: required"));
    }
    match base64::engine::general_purpose::STANDARD.decode(v) {
        Ok(d) if !d.is_empty() => Ok(v),
        _ => Err(format!("{field}: not base64-encoded data")),
    }
}

/// Puts `value` (checked as base64 data, the API field `<at>.<field>`) under `key`; an empty
/// optional value is left out.
fn put_data(
    map: &mut serde_json::Map<String, Value>,
    key: &str,
    at: &str,
    field: &str,
    value: &str,
    optional: bool,
) -> Result<(), String> {
    if !(optional && value.is_empty()) {
        map.insert(key.into(), json!(data(&format!("{at}.{field}"), value)?));
    }
    Ok(())
}

fn required<'a>(field: &str, v: &'a str) -> Result<&'a str, String> {
    if v.is_empty() {
        Err(format!("{field}: required"))
    } else {
        Ok(v)
    }
}

/// The policy's `sigstoreSigned` requirement; an error names the field under `spec.policy`.
pub fn requirement(policy: &ImageSigstoreVerificationPolicy) -> Result<Value, String> {
    let root = &policy.root_of_trust;
    let f = "spec.policy.rootOfTrust";
    let mut req = serde_json::Map::new();
    req.insert("type".into(), json!("sigstoreSigned"));
    let missing = |member: &str| {
        format!(
            "{f}.{member}: required when policyType is {:?}",
            root.policy_type
        )
    };
    match root.policy_type.as_str() {
        "PublicKey" => {
            let k = root
                .public_key
                .as_ref()
                .ok_or_else(|| missing("publicKey"))?;
            let g = format!("{f}.publicKey");
            put_data(&mut req, "keyData", &g, "keyData", &k.key_data, false)?;
            let rekor = &k.rekor_key_data;
            put_data(
                &mut req,
                "rekorPublicKeyData",
                &g,
                "rekorKeyData",
                rekor,
                true,
            )?;
        }
        "FulcioCAWithRekor" => {
            let c = root
                .fulcio_ca_with_rekor
                .as_ref()
                .ok_or_else(|| missing("fulcioCAWithRekor"))?;
            let g = format!("{f}.fulcioCAWithRekor");
            req.insert(
                "fulcio".into(),
                json!({
                    "caData": data(&format!("{g}.fulcioCAData"), &c.fulcio_ca_data)?,
                    "oidcIssuer": required(&format!("{g}.fulcioSubject.oidcIssuer"), &c.fulcio_subject.oidc_issuer)?,
                    "subjectEmail": required(&format!("{g}.fulcioSubject.signedEmail"), &c.fulcio_subject.signed_email)?,
                }),
            );
            let rekor = &c.rekor_key_data;
            put_data(
                &mut req,
                "rekorPublicKeyData",
                &g,
                "rekorKeyData",
                rekor,
                false,
            )?;
        }
        "PKI" => {
            let p = root.pki.as_ref().ok_or_else(|| missing("pki"))?;
            let g = format!("{f}.pki");
            let mut pki = serde_json::Map::new();
            put_data(
                &mut pki,
                "caRootsData",
                &g,
                "caRootsData",
                &p.ca_roots_data,
                false,
            )?;
            let intermediates = &p.ca_intermediates_data;
            put_data(
                &mut pki,
                "caIntermediatesData",
                &g,
                "caIntermediatesData",
                intermediates,
                true,
            )?;
            let s = &p.pki_certificate_subject;
            if s.email.is_empty() && s.hostname.is_empty() {
                return Err(format!(
                    "{g}.pkiCertificateSubject: at least one of email or hostname is required"
                ));
            }
            if !s.email.is_empty() {
                pki.insert("subjectEmail".into(), json!(s.email));
            }
            if !s.hostname.is_empty() {
                pki.insert("subjectHostname".into(), json!(s.hostname));
            }
            req.insert("pki".into(), Value::Object(pki));
        }
        other => {
            return Err(format!(
                "{f}.policyType: unsupported value {other:?}: supported values: \"PublicKey\", \"FulcioCAWithRekor\", \"PKI\""
            ));
        }
    }
    let g = "spec.policy.signedIdentity";
    let identity = match &policy.signed_identity {
        None => json!({"type": "matchRepoDigestOrExact"}),
        Some(i) => match i.match_policy.as_str() {
            "MatchRepoDigestOrExact" => json!({"type": "matchRepoDigestOrExact"}),
            "MatchRepository" => json!({"type": "matchRepository"}),
            "ExactRepository" => {
                let r = i.exact_repository.as_ref().ok_or_else(|| {
                    format!("{g}.exactRepository: required when matchPolicy is \"ExactRepository\"")
                })?;
                json!({
                    "type": "exactRepository",
                    "dockerRepository": repository(&format!("{g}.exactRepository.repository"), &r.repository)?,
                })
            }
            "RemapIdentity" => {
                let r = i.remap_identity.as_ref().ok_or_else(|| {
                    format!("{g}.remapIdentity: required when matchPolicy is \"RemapIdentity\"")
                })?;
                json!({
                    "type": "remapIdentity",
                    "prefix": repository(&format!("{g}.remapIdentity.prefix"), &r.prefix)?,
                    "signedPrefix": repository(&format!("{g}.remapIdentity.signedPrefix"), &r.signed_prefix)?,
                })
            }
            other => {
                return Err(format!(
                    "{g}.matchPolicy: unsupported value {other:?}: supported values: \"MatchRepoDigestOrExact\", \"MatchRepository\", \"ExactRepository\", \"RemapIdentity\""
                ));
            }
        },
    };
    req.insert("signedIdentity".into(), identity);
    Ok(Value::Object(req))
}

/// A repository or prefix named in a signed identity: `host[:port][/path]`, no tag or digest.
fn repository<'a>(field: &str, v: &'a str) -> Result<&'a str, String> {
    if scope_problem(v).is_some() || v.starts_with("*.") {
        return Err(format!("{field}: {v:?} is not a repository"));
    }
    Ok(v)
}

/// Why a scope is not one (`None`: it is): `host[:port][/path]` with a fully qualified host or
/// `localhost`, or `*.domain`; no tag, digest, scheme or space.
fn scope_problem(s: &str) -> Option<&'static str> {
    let body = s.strip_prefix("*.").unwrap_or(s);
    if body.is_empty()
        || body.contains("://")
        || body.contains(['*', ' ', '\t', '\n'])
        || body.starts_with('/')
        || body.ends_with('/')
    {
        return Some("not a registry, repository or image");
    }
    if s.starts_with("*.") && body.contains('/') {
        return Some("a wildcard scope names a domain only");
    }
    let (host, path) = body.split_once('/').unwrap_or((body, ""));
    if body.contains('@') || path.contains(':') {
        return Some("a scope can't have a tag or digest");
    }
    let name = host.split(':').next().unwrap_or_default();
    if !s.starts_with("*.") && name != "localhost" && !name.contains('.') {
        return Some("a scope must begin with a fully qualified domain name or 'localhost'");
    }
    None
}

/// A policy's requirement and checked scopes. `word` is upstream's name for the kind in its
/// messages; `count` is the scopes taken so far, across all policies of both kinds.
fn checked<'p>(
    scopes: &'p [String],
    policy: &ImageSigstoreVerificationPolicy,
    word: &str,
    bounds: (&[String], &[String]),
    count: &mut usize,
) -> Result<(Value, &'p [String]), String> {
    let req = requirement(policy)?;
    if scopes.is_empty() {
        return Err("spec.scopes: at least one scope is required".into());
    }
    let (allowed, blocked) = bounds;
    for (i, scope) in scopes.iter().enumerate() {
        *count += 1;
        if *count > MAX_POLICY_SCOPES {
            return Err(format!(
                "spec.scopes[{i}]: too many scopes across all ClusterImagePolicies and ImagePolicies (at most {MAX_POLICY_SCOPES})"
            ));
        }
        if let Some(why) = scope_problem(scope) {
            return Err(format!(
                "spec.scopes[{i}]: invalid image scope {scope:?}: {why}"
            ));
        }
        if !allowed.is_empty() && !allowed.iter().any(|a| nested(scope, a)) {
            return Err(format!(
                "{word} configured for the scope {scope} is not nested inside allowedRegistries"
            ));
        }
        if blocked.iter().any(|b| nested(scope, b)) {
            return Err(format!(
                "{word} configured for the scope {scope} is nested inside blockedRegistries"
            ));
        }
    }
    Ok((req, scopes))
}

/// Every policy's requirement under each of its scopes, checked; `Image/cluster`'s allowed and
/// blocked registries bound the scopes as upstream bounds them.
pub fn scope_policies(
    cips: &[ClusterImagePolicy],
    allowed: &[String],
    blocked: &[String],
) -> Result<ScopePolicies, Refused> {
    let mut out = ScopePolicies::new();
    let mut count = 0;
    for cip in cips {
        let (req, scopes) = checked(
            &cip.spec.scopes,
            &cip.spec.policy,
            "clusterimagePolicy",
            (allowed, blocked),
            &mut count,
        )
        .map_err(|m| refuse(cip, m))?;
        for scope in scopes {
            out.entry(scope.clone()).or_default().push(req.clone());
        }
    }
    Ok(out)
}

/// Where CRI-O reads a namespace's own policy: `<dir>/<namespace>.json`.
pub const CRIO_POLICIES_DIR: &str = "/etc/crio/policies";

/// Each namespace's requirements by scope.
pub type NamespacePolicies = BTreeMap<String, ScopePolicies>;

/// An ImagePolicy some of whose scopes a ClusterImagePolicy also covers: they are left to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub namespace: String,
    pub name: String,
    pub scopes: Vec<String>,
}

impl Conflict {
    /// Upstream's message for the `Pending` condition (reason `ConflictScopes`), with the scopes
    /// quoted as Go's `%q` prints a list.
    pub fn message(&self) -> String {
        let quoted: Vec<String> = self.scopes.iter().map(|s| format!("{s:?}")).collect();
        format!(
            "has conflicting scope(s) [{}] that equal to or nest inside existing clusterimagepolicy, only policy from clusterimagepolicy scope(s) will be applied",
            quoted.join(" ")
        )
    }
}

/// The ImagePolicies' requirements by namespace, with the scopes a cluster policy covers left
/// out (and reported). A refused policy is named `<namespace>/<name>`. `taken` is the scopes
/// the ClusterImagePolicies hold, counted against [`MAX_POLICY_SCOPES`].
pub fn namespace_policies(
    ips: &[ImagePolicy],
    cluster: &ScopePolicies,
    allowed: &[String],
    blocked: &[String],
    taken: usize,
) -> Result<(NamespacePolicies, Vec<Conflict>), Refused> {
    let mut out = NamespacePolicies::new();
    let mut conflicts = vec![];
    let mut count = taken;
    for ip in ips {
        let namespace = ip.metadata.namespace.clone().unwrap_or_default();
        let name = ip.metadata.name.clone().unwrap_or_default();
        let refused = |message: String| Refused {
            kind: "ImagePolicy",
            name: format!("{namespace}/{name}"),
            message,
        };
        // A file name under the policies directory: a DNS label, as the API guarantees.
        let label = !namespace.is_empty()
            && namespace.len() <= 63
            && namespace
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !namespace.starts_with('-')
            && !namespace.ends_with('-');
        if !label {
            return Err(refused(format!(
                "metadata.namespace: {namespace:?} is not a namespace name"
            )));
        }
        let (req, scopes) = checked(
            &ip.spec.scopes,
            &ip.spec.policy,
            "imagePolicy",
            (allowed, blocked),
            &mut count,
        )
        .map_err(refused)?;
        let mut conflict = vec![];
        for scope in scopes {
            if cluster.keys().any(|c| nested(scope, c)) {
                conflict.push(scope.clone());
                continue;
            }
            out.entry(namespace.clone())
                .or_default()
                .entry(scope.clone())
                .or_default()
                .push(req.clone());
        }
        if !conflict.is_empty() {
            conflicts.push(Conflict {
                namespace: namespace.clone(),
                name: name.clone(),
                scopes: conflict,
            });
        }
    }
    Ok((out, conflicts))
}

/// A namespace's policy: the cluster's `policy.json` with the namespace's scopes added, each
/// taking its signature requirements alone (in `docker`, and in `atomic` when short enough).
pub fn namespace_policy_json(
    cluster_policy: &str,
    scopes: &ScopePolicies,
) -> Result<String, String> {
    let mut policy: Value = serde_json::from_str(cluster_policy)
        .map_err(|e| format!("could not decode the cluster's policy.json: {e}"))?;
    if !policy["transports"].is_object() {
        policy["transports"] = json!({});
    }
    for transport in ["docker", "atomic"] {
        if !policy["transports"][transport].is_object() {
            policy["transports"][transport] = json!({});
        }
    }
    for (scope, reqs) in scopes {
        policy["transports"]["docker"][scope] = json!(reqs);
        if scope.matches('/').count() < 3 {
            policy["transports"]["atomic"][scope] = json!(reqs);
        }
    }
    let mut out = serde_json::to_string_pretty(&policy).map_err(|e| e.to_string())?;
    out.push('\n');
    Ok(out)
}

/// Whether `scope` is `outer` or inside it (upstream's `ScopeIsNestedInsideScope`).
pub(crate) fn nested(scope: &str, outer: &str) -> bool {
    if scope == outer {
        return true;
    }
    if let Some(domain) = outer.strip_prefix("*.") {
        let host = scope
            .strip_prefix("*.")
            .unwrap_or(scope)
            .split('/')
            .next()
            .unwrap_or_default();
        return host.ends_with(&format!(".{domain}"));
    }
    !outer.starts_with("*.") && !scope.starts_with("*.") && scope.starts_with(&format!("{outer}/"))
}

/// One registries.conf entry: its scope (prefix, else location), location and mirror locations.
struct Entry {
    scope: String,
    location: String,
    mirrors: Vec<String>,
}

fn entries(registries_conf: &str) -> Vec<Entry> {
    let conf: toml::Table = toml::from_str(registries_conf).unwrap_or_default();
    let Some(toml::Value::Array(regs)) = conf.get("registry") else {
        return vec![];
    };
    let s = |t: &toml::Value, k: &str| {
        t.get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    regs.iter()
        .map(|r| {
            let location = s(r, "location");
            let prefix = s(r, "prefix");
            let mirrors = match r.get("mirror") {
                Some(toml::Value::Array(ms)) => ms.iter().map(|m| s(m, "location")).collect(),
                _ => vec![],
            };
            Entry {
                scope: if prefix.is_empty() {
                    location.clone()
                } else {
                    prefix
                },
                location,
                mirrors,
            }
        })
        .collect()
}

/// `registries.d`'s file: `use-sigstore-attachments` for each scope, and for every endpoint its
/// images are pulled from per `registries_conf` (the mirrors of the registry entry that holds
/// the scope, and of the entries inside it). `None` without scopes.
pub fn registries_d<'s>(
    scopes: impl IntoIterator<Item = &'s String>,
    registries_conf: &str,
) -> Option<String> {
    let entries = entries(registries_conf);
    let mut endpoints: BTreeMap<String, Value> = BTreeMap::new();
    let attach = json!({"use-sigstore-attachments": true});
    for scope in scopes {
        endpoints.insert(scope.clone(), attach.clone());
        // The entry that holds the scope: the longest that contains it, as containers/image
        // picks it. A wildcard entry has no location to rewrite into a mirror.
        if let Some(parent) = entries
            .iter()
            .filter(|e| !e.scope.starts_with("*.") && nested(scope, &e.scope))
            .max_by_key(|e| e.scope.len())
        {
            let rest = &scope[parent.scope.len()..];
            for m in parent.mirrors.iter().chain([&parent.location]) {
                if !m.is_empty() {
                    endpoints.insert(format!("{m}{rest}"), attach.clone());
                }
            }
        }
        for inner in entries
            .iter()
            .filter(|e| e.scope != *scope && nested(&e.scope, scope))
        {
            for m in inner.mirrors.iter().chain([&inner.location]) {
                if !m.is_empty() {
                    endpoints.insert(m.clone(), attach.clone());
                }
            }
        }
    }
    if endpoints.is_empty() {
        return None;
    }
    mco_apimachinery::yaml::to_string(&json!({ "docker": endpoints })).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registries::{Inputs, POLICY_JSON, files};
    use mco_api::{Image, ImageDigestMirrorSet};
    use pretty_assertions::assert_eq;

    // base64 of short PEM-like text: only decodability is checked.
    pub(super) const KEY: &str = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K";
    const REKOR: &str = "cmVrb3Ita2V5Cg==";

    pub(super) fn cip(name: &str, scopes: &[&str], policy: Value) -> ClusterImagePolicy {
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ClusterImagePolicy",
            "metadata": {"name": name},
            "spec": {"scopes": scopes, "policy": policy},
        }))
        .unwrap()
    }

    pub(super) fn public_key() -> Value {
        json!({"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": KEY, "rekorKeyData": REKOR}}})
    }

    fn policy(v: Value) -> ImageSigstoreVerificationPolicy {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn each_root_of_trust_becomes_a_sigstore_requirement() {
        assert_eq!(
            requirement(&policy(public_key())).unwrap(),
            json!({"type": "sigstoreSigned", "keyData": KEY, "rekorPublicKeyData": REKOR,
                   "signedIdentity": {"type": "matchRepoDigestOrExact"}})
        );
        let fulcio = policy(json!({
            "rootOfTrust": {"policyType": "FulcioCAWithRekor", "fulcioCAWithRekor": {
                "fulcioCAData": KEY, "rekorKeyData": REKOR,
                "fulcioSubject": {"oidcIssuer": "https://oidc.example.com", "signedEmail": "release@example.com"}}},
            "signedIdentity": {"matchPolicy": "RemapIdentity",
                "remapIdentity": {"prefix": "mirror.example.net/ocp", "signedPrefix": "quay.io/openshift-release-dev"}},
        }));
        assert_eq!(
            requirement(&fulcio).unwrap(),
            json!({"type": "sigstoreSigned",
                   "fulcio": {"caData": KEY, "oidcIssuer": "https://oidc.example.com", "subjectEmail": "release@example.com"},
                   "rekorPublicKeyData": REKOR,
                   "signedIdentity": {"type": "remapIdentity", "prefix": "mirror.example.net/ocp", "signedPrefix": "quay.io/openshift-release-dev"}})
        );
        let pki = policy(json!({
            "rootOfTrust": {"policyType": "PKI", "pki": {
                "caRootsData": KEY, "pkiCertificateSubject": {"hostname": "signer.example.com"}}},
            "signedIdentity": {"matchPolicy": "ExactRepository", "exactRepository": {"repository": "quay.io/team/app"}},
        }));
        assert_eq!(
            requirement(&pki).unwrap(),
            json!({"type": "sigstoreSigned",
                   "pki": {"caRootsData": KEY, "subjectHostname": "signer.example.com"},
                   "signedIdentity": {"type": "exactRepository", "dockerRepository": "quay.io/team/app"}})
        );
        let repo = policy(json!({
            "rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": KEY}},
            "signedIdentity": {"matchPolicy": "MatchRepository"},
        }));
        assert_eq!(
            requirement(&repo).unwrap(),
            json!({"type": "sigstoreSigned", "keyData": KEY, "signedIdentity": {"type": "matchRepository"}})
        );
    }

    fn refused(cips: &[ClusterImagePolicy], allowed: &[&str], blocked: &[&str]) -> String {
        let s = |l: &[&str]| l.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        scope_policies(cips, &s(allowed), &s(blocked))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_policies_are_refused_naming_the_policy_and_field() {
        let cases = [
            (
                json!({"rootOfTrust": {"policyType": "PublicKey"}}),
                "ClusterImagePolicy p: spec.policy.rootOfTrust.publicKey: required when policyType is \"PublicKey\"",
            ),
            (
                json!({"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": "not base64!"}}}),
                "ClusterImagePolicy p: spec.policy.rootOfTrust.publicKey.keyData: not base64-encoded data",
            ),
            (
                json!({"rootOfTrust": {"policyType": "GPG"}}),
                "ClusterImagePolicy p: spec.policy.rootOfTrust.policyType: unsupported value \"GPG\": supported values: \"PublicKey\", \"FulcioCAWithRekor\", \"PKI\"",
            ),
            (
                json!({"rootOfTrust": {"policyType": "PKI", "pki": {"caRootsData": KEY}}}),
                "ClusterImagePolicy p: spec.policy.rootOfTrust.pki.pkiCertificateSubject: at least one of email or hostname is required",
            ),
            (
                json!({"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": KEY}},
                       "signedIdentity": {"matchPolicy": "ExactRepository"}}),
                "ClusterImagePolicy p: spec.policy.signedIdentity.exactRepository: required when matchPolicy is \"ExactRepository\"",
            ),
        ];
        for (policy, want) in cases {
            assert_eq!(refused(&[cip("p", &["quay.io/a"], policy)], &[], &[]), want);
        }
        for (scope, why) in [
            ("quay.io/app:latest", "a scope can't have a tag or digest"),
            (
                "quay.io/app@sha256:0123",
                "a scope can't have a tag or digest",
            ),
            (
                "registry/app",
                "a scope must begin with a fully qualified domain name or 'localhost'",
            ),
            ("https://quay.io/app", "not a registry, repository or image"),
            ("*.example.com/app", "a wildcard scope names a domain only"),
        ] {
            assert_eq!(
                refused(&[cip("p", &["quay.io/ok", scope], public_key())], &[], &[]),
                format!(
                    "ClusterImagePolicy p: spec.scopes[1]: invalid image scope {scope:?}: {why}"
                )
            );
        }
        assert_eq!(
            refused(&[cip("p", &[], public_key())], &[], &[]),
            "ClusterImagePolicy p: spec.scopes: at least one scope is required"
        );
        // Fine: localhost, a port, a wildcard domain.
        let ok = [cip(
            "p",
            &["localhost:5000/app", "quay.io:443/team", "*.example.com"],
            public_key(),
        )];
        assert_eq!(scope_policies(&ok, &[], &[]).unwrap().len(), 3);
    }

    #[test]
    fn scopes_must_respect_the_allowed_and_blocked_registries() {
        let p = [cip(
            "release",
            &["quay.io/openshift-release-dev/ocp-release"],
            public_key(),
        )];
        assert_eq!(
            refused(&p, &["registry.example.com"], &[]),
            "ClusterImagePolicy release: clusterimagePolicy configured for the scope quay.io/openshift-release-dev/ocp-release is not nested inside allowedRegistries"
        );
        assert_eq!(
            refused(&p, &[], &["quay.io"]),
            "ClusterImagePolicy release: clusterimagePolicy configured for the scope quay.io/openshift-release-dev/ocp-release is nested inside blockedRegistries"
        );
        assert!(scope_policies(&p, &["quay.io".into()], &[]).is_ok());
        assert!(scope_policies(&p, &["*.io".into()], &[]).is_ok());
        assert!(scope_policies(&p, &[], &["quay.io/other".into()]).is_ok());
    }

    #[test]
    fn scopes_at_the_limit_are_taken_and_one_more_is_refused() {
        let scopes: Vec<String> = (0..MAX_POLICY_SCOPES)
            .map(|i| format!("quay.io/team/app{i}"))
            .collect();
        let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let at = [cip("many", &refs, public_key())];
        assert_eq!(
            scope_policies(&at, &[], &[]).unwrap().len(),
            MAX_POLICY_SCOPES
        );
        let over = [
            at[0].clone(),
            cip("one-more", &["quay.io/extra"], public_key()),
        ];
        assert_eq!(
            refused(&over, &[], &[]),
            format!(
                "ClusterImagePolicy one-more: spec.scopes[0]: too many scopes across all ClusterImagePolicies and ImagePolicies (at most {MAX_POLICY_SCOPES})"
            )
        );
    }

    pub(super) fn text(files: &[Value], path: &str) -> Option<String> {
        files
            .iter()
            .find(|f| f["path"] == path)
            .map(|f| crate::decode_data_url(f["contents"]["source"].as_str().unwrap()).unwrap())
    }

    #[test]
    fn the_registries_config_carries_the_requirements_and_the_attachments() {
        let idms: ImageDigestMirrorSet = serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ImageDigestMirrorSet",
            "metadata": {"name": "release"},
            "spec": {"imageDigestMirrors": [
                {"source": "quay.io/openshift-release-dev", "mirrors": ["mirror.example.net/ocp"]},
                {"source": "quay.io/team/app/sub", "mirrors": ["mirror.example.net/sub"]},
            ]},
        }))
        .unwrap();
        let image: Image = serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Image", "metadata": {"name": "cluster"},
            "spec": {"registrySources": {"allowedRegistries": ["quay.io", "quay.io/team/app", "mirror.example.net"]}},
        }))
        .unwrap();
        let cips = [
            cip(
                "release",
                &["quay.io/openshift-release-dev/ocp-release"],
                public_key(),
            ),
            cip(
                "apps",
                &["quay.io/team/app"],
                json!({"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": KEY}}}),
            ),
        ];
        let inputs = Inputs {
            image: Some(&image),
            idms: std::slice::from_ref(&idms),
            cips: &cips,
            ..Default::default()
        };
        let out = files(&inputs, Some(""), None).unwrap();
        let policy: Value = serde_json::from_str(&text(&out, POLICY_JSON).unwrap()).unwrap();
        let docker = &policy["transports"]["docker"];
        assert_eq!(policy["default"], json!([{"type": "reject"}]));
        assert_eq!(
            docker["quay.io"],
            json!([{"type": "insecureAcceptAnything"}])
        );
        // An allowed registry a policy covers takes the signature requirement alone.
        assert_eq!(docker["quay.io/team/app"][0]["type"], "sigstoreSigned");
        assert_eq!(docker["quay.io/team/app"].as_array().unwrap().len(), 1);
        assert_eq!(
            docker["quay.io/openshift-release-dev/ocp-release"][0]["rekorPublicKeyData"],
            REKOR
        );
        // atomic: at most two path components below the host.
        let atomic = &policy["transports"]["atomic"];
        assert!(atomic.get("quay.io/team/app").is_some());
        assert!(
            atomic
                .get("quay.io/openshift-release-dev/ocp-release")
                .is_some()
        );

        let attachments = text(&out, SIGSTORE_REGISTRIES).unwrap();
        assert_eq!(
            attachments,
            "docker:
  mirror.example.net/ocp/ocp-release:
    use-sigstore-attachments: true
  mirror.example.net/sub:
    use-sigstore-attachments: true
  quay.io/openshift-release-dev/ocp-release:
    use-sigstore-attachments: true
  quay.io/team/app:
    use-sigstore-attachments: true
  quay.io/team/app/sub:
    use-sigstore-attachments: true
"
        );

        // Without policies: no attachments file.
        let none = Inputs {
            image: Some(&image),
            ..Default::default()
        };
        assert_eq!(
            text(&files(&none, Some(""), None).unwrap(), SIGSTORE_REGISTRIES),
            None
        );
    }
}

#[cfg(test)]
mod namespace_tests {
    use super::tests::{KEY, cip, public_key, text};
    use super::*;
    use crate::registries::{Inputs, POLICY_JSON, files};
    use pretty_assertions::assert_eq;

    fn policy_spec(scopes: &[&str]) -> Value {
        json!({"scopes": scopes, "policy": {"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": KEY}}}})
    }

    fn ip(namespace: &str, name: &str, scopes: &[&str]) -> ImagePolicy {
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ImagePolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": policy_spec(scopes),
        }))
        .unwrap()
    }

    #[test]
    fn each_namespace_gets_the_cluster_policy_with_its_own_scopes() {
        let cips = [cip(
            "release",
            &["quay.io/openshift-release-dev"],
            public_key(),
        )];
        let ips = [
            ip(
                "team-a",
                "apps",
                &[
                    "quay.io/team-a",
                    "quay.io/openshift-release-dev/ocp-release",
                ],
            ),
            ip("team-b", "apps", &["registry.example.com/b/c/d"]),
        ];
        let inputs = Inputs {
            cips: &cips,
            ips: &ips,
            ..Default::default()
        };
        let out = files(&inputs, Some(""), None).unwrap();
        let cluster: Value = serde_json::from_str(&text(&out, POLICY_JSON).unwrap()).unwrap();
        // The cluster's policy has no namespace scope.
        assert!(
            cluster["transports"]["docker"]
                .get("quay.io/team-a")
                .is_none()
        );
        let a: Value =
            serde_json::from_str(&text(&out, "/etc/crio/policies/team-a.json").unwrap()).unwrap();
        let docker = &a["transports"]["docker"];
        assert_eq!(docker["quay.io/team-a"][0]["keyData"], KEY);
        // The cluster's scopes are there; the namespace's conflicting one is not.
        assert!(docker.get("quay.io/openshift-release-dev").is_some());
        assert!(
            docker
                .get("quay.io/openshift-release-dev/ocp-release")
                .is_none()
        );
        let b: Value =
            serde_json::from_str(&text(&out, "/etc/crio/policies/team-b.json").unwrap()).unwrap();
        // Three path components: docker only.
        assert!(
            b["transports"]["docker"]
                .get("registry.example.com/b/c/d")
                .is_some()
        );
        assert!(
            b["transports"]["atomic"]
                .get("registry.example.com/b/c/d")
                .is_none()
        );
        let attachments = text(&out, SIGSTORE_REGISTRIES).unwrap();
        for scope in [
            "quay.io/openshift-release-dev:",
            "quay.io/team-a:",
            "registry.example.com/b/c/d:",
        ] {
            assert!(attachments.contains(scope), "{attachments}");
        }

        let signed = scope_policies(&cips, &[], &[]).unwrap();
        let (_, conflicts) = crate::registries::namespace_policies(&inputs, &signed).unwrap();
        assert_eq!(conflicts.len(), 1);
        assert_eq!(
            conflicts[0].message(),
            "has conflicting scope(s) [\"quay.io/openshift-release-dev/ocp-release\"] that equal to or nest inside existing clusterimagepolicy, only policy from clusterimagepolicy scope(s) will be applied"
        );
        assert_eq!(
            (conflicts[0].namespace.as_str(), conflicts[0].name.as_str()),
            ("team-a", "apps")
        );
    }

    #[test]
    fn a_bad_image_policy_is_refused_naming_its_namespace() {
        let image: mco_api::Image = serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Image", "metadata": {"name": "cluster"},
            "spec": {"registrySources": {"blockedRegistries": ["quay.io"]}},
        }))
        .unwrap();
        let refused = |policy: ImagePolicy, image: Option<&mco_api::Image>| {
            let ips = [policy];
            let inputs = Inputs {
                image,
                ips: &ips,
                ..Default::default()
            };
            files(&inputs, Some(""), None).unwrap_err().to_string()
        };
        assert_eq!(
            refused(ip("team-a", "apps", &["quay.io/app:v1"]), None),
            "ImagePolicy team-a/apps: spec.scopes[0]: invalid image scope \"quay.io/app:v1\": a scope can't have a tag or digest"
        );
        assert_eq!(
            refused(ip("../etc", "apps", &["quay.io/app"]), None),
            "ImagePolicy ../etc/apps: metadata.namespace: \"../etc\" is not a namespace name"
        );
        assert_eq!(
            refused(ip("team-a", "apps", &["quay.io/app"]), Some(&image)),
            "ImagePolicy team-a/apps: imagePolicy configured for the scope quay.io/app is nested inside blockedRegistries"
        );
    }
}
