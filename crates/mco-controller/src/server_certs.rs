//! The machine config server's certificates, kept and rotated as upstream's cert rotation
//! controller keeps them (library-go's `certrotation`): a signing CA in the Secret
//! `machine-config-server-ca`, every CA still valid in the ConfigMap `machine-config-server-ca`
//! (`ca-bundle.crt`, what new machines' pointer Ignition trusts), and the serving certificate
//! in the server's Secret, for the host machines reach the server at.
//!
//! The rules are library-go's, with its annotations, so `oc` tooling and upstream's checks
//! read mco's objects alike:
//! - a certificate is renewed once past 80 % of its validity or past its refresh period
//!   (8 years of 10, as upstream's); a serving certificate waits a tenth of that period after
//!   its CA was renewed, so that new machines trust the new CA first;
//! - the bundle holds the current CA and every earlier one not yet expired, each once, sorted;
//! - a serving certificate is reissued when its CA is gone from the bundle or its hostnames
//!   are not the wanted ones.
//!
//! Unlike upstream, an object mco did not create (one without the
//! `auth.openshift.io/managed-certificate-type` label) is never rewritten: a CA Secret of the
//! administrator's signs the serving certificate as it is, and a serving Secret of theirs is
//! served as it is. The decisions are pure; [`run`] reads and writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use mco_pki::Leniency;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use mco_rollout::plan::EventKind;

use crate::ctx::Ctx;

/// The CA's Secret and the bundle's ConfigMap, upstream's name for both.
pub const CA_NAME: &str = mco_api::constants::names::SERVER_CA;
/// Upstream's validity of the CA and of the serving certificate (`mcsCAExpiry`, 10 years).
pub const VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Upstream's refresh period of both (`mcsCARefresh`, 8 years).
pub const REFRESH: Duration = Duration::from_secs(8 * 365 * 24 * 3600);
/// How often the objects are checked, as upstream's controller resyncs.
pub const PERIOD: Duration = Duration::from_secs(60);
/// The most hostnames one serving certificate names.
pub const MAX_HOSTNAMES: usize = 64;

/// library-go's label and annotations, and the bundle's key.
pub use mco_api::constants::server_certs::{
    BUNDLE_KEY, HOSTNAMES, ISSUER, MANAGED_LABEL, NOT_AFTER, NOT_BEFORE, REFRESH_PERIOD,
};
const OWNING_COMPONENT: &str = "openshift.io/owning-component";
const DESCRIPTION: &str = "openshift.io/description";
const COMPONENT: &str = "Machine Config Operator";

/// What the controller keeps: where, and for which hostnames.
#[derive(Debug, Clone)]
pub struct ServerCerts {
    pub namespace: String,
    /// The serving certificate's Secret, which the server mounts.
    pub serving_secret: String,
    /// The hostnames and IPs to serve; empty: the ControllerConfig's (see [`hostnames`]).
    pub hostnames: Vec<String>,
    pub period: Duration,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertError {
    #[error("{object}: {message}")]
    Invalid { object: String, message: String },
    #[error("issuing a certificate: {0}")]
    Issue(String),
}

impl From<rcgen::Error> for CertError {
    fn from(e: rcgen::Error) -> Self {
        CertError::Issue(e.to_string())
    }
}

/// A certificate and its key, as issued, with what the annotations record.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub common_name: String,
    pub issuer: String,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    /// DNS names and IPs, sorted (serving certificates only).
    pub hostnames: Vec<String>,
}

/// library-go's validity annotations, or why they are unusable.
fn validity(ann: &BTreeMap<String, String>) -> Result<(Timestamp, Timestamp), String> {
    let Some(not_after) = ann.get(NOT_AFTER).filter(|s| !s.is_empty()) else {
        return Err("missing notAfter".into());
    };
    let not_after: Timestamp = not_after
        .parse()
        .map_err(|_| format!("bad expiry: {not_after:?}"))?;
    let Some(not_before) = ann.get(NOT_BEFORE).filter(|s| !s.is_empty()) else {
        return Err("missing notBefore".into());
    };
    let not_before: Timestamp = not_before
        .parse()
        .map_err(|_| format!("bad expiry: {not_before:?}"))?;
    Ok((not_before, not_after))
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

/// Why a certificate with these annotations must be renewed by `now`, if it must: library-go's
/// time rules and reasons.
fn renewal_for_time(
    ann: &BTreeMap<String, String>,
    refresh: Duration,
    now: Timestamp,
) -> Result<Option<(Timestamp, String)>, String> {
    let (not_before, not_after) = validity(ann)?;
    if now > not_after {
        return Err("already expired".into());
    }
    let at_80 = not_after - (not_after.duration_since(not_before) / 5);
    if now > at_80 {
        return Err(format!("past refresh time (80% of validity): {at_80}"));
    }
    let refresh_at = not_before
        .saturating_add(signed(refresh))
        .unwrap_or(not_after);
    Ok((now > refresh_at).then(|| (refresh_at, format!("past its refresh time {refresh_at}"))))
}

/// Why the CA Secret needs a new CA by `now`, if it does.
pub fn signer_renewal(
    ann: &BTreeMap<String, String>,
    refresh: Duration,
    now: Timestamp,
) -> Option<String> {
    match renewal_for_time(ann, refresh, now) {
        Err(reason) => Some(reason),
        Ok(due) => due.map(|(_, reason)| reason),
    }
}

/// Why the serving Secret needs a new certificate by `now`, if it does: its times (past its
/// refresh period only once a tenth of that period has passed since the CA's own start), its
/// issuer no longer in the bundle, or hostnames other than `hostnames`.
pub fn serving_renewal(
    ann: &BTreeMap<String, String>,
    signer_not_before: Timestamp,
    bundle_names: &[String],
    hostnames: &[String],
    refresh: Duration,
    now: Timestamp,
) -> Option<String> {
    match renewal_for_time(ann, refresh, now) {
        Err(reason) => return Some(reason),
        Ok(Some((_, reason))) => {
            let trust = signer_not_before
                .saturating_add(signed(refresh / 10))
                .unwrap_or(Timestamp::MAX);
            if now > trust {
                return Some(reason);
            }
        }
        Ok(None) => {}
    }
    let issuer = ann.get(ISSUER).map(String::as_str).unwrap_or_default();
    if issuer.is_empty() {
        return Some("missing issuer name".into());
    }
    if !bundle_names.iter().any(|n| n == issuer) {
        return Some(format!(
            "issuer {issuer:?}, not in ca bundle: {}",
            bundle_names.join(", ")
        ));
    }
    let have: std::collections::BTreeSet<&str> = ann
        .get(HOSTNAMES)
        .map(|h| h.split(',').collect())
        .unwrap_or_default();
    let want: std::collections::BTreeSet<&str> = hostnames.iter().map(String::as_str).collect();
    if have != want {
        let join = |s: std::collections::BTreeSet<&&str>| {
            s.into_iter().copied().collect::<Vec<_>>().join(",")
        };
        return Some(format!(
            "{:?} are existing and not required, {:?} are required and not existing",
            join(have.difference(&want).collect()),
            join(want.difference(&have).collect()),
        ));
    }
    None
}

/// The hosts machines reach the server at: upstream's rule, the host of the ControllerConfig's
/// `spec.infra.status.apiServerInternalURI`, then the platform's `apiServerInternalIPs`.
pub fn hostnames(
    cc_spec_other: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<String>, String> {
    let (host, _) = mco_api::controllerconfig::api_server_internal_host(cc_spec_other)?;
    let status = &cc_spec_other.get("infra").and_then(|i| i.get("status"));
    let mut out = vec![host];
    let platform = status.and_then(|s| s.get("platformStatus"));
    let kind = platform
        .and_then(|p| p.get("type"))
        .and_then(|t| t.as_str())
        .unwrap_or_default();
    let key = match kind {
        "BareMetal" => "baremetal",
        "Ovirt" => "ovirt",
        "OpenStack" => "openstack",
        "VSphere" => "vsphere",
        "Nutanix" => "nutanix",
        _ => "",
    };
    if let Some(ips) = platform
        .and_then(|p| p.get(key))
        .and_then(|p| p.get("apiServerInternalIPs"))
        .and_then(|i| i.as_array())
    {
        out.extend(ips.iter().filter_map(|i| i.as_str()).map(str::to_string));
    }
    checked_hostnames(out)
}

/// `names` sorted and each once, at most [`MAX_HOSTNAMES`], none empty.
pub fn checked_hostnames(names: Vec<String>) -> Result<Vec<String>, String> {
    let set: std::collections::BTreeSet<String> = names
        .into_iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    if set.is_empty() {
        return Err("no hostnames set".into());
    }
    if set.len() > MAX_HOSTNAMES {
        return Err(format!(
            "{} hostnames, more than the {MAX_HOSTNAMES} one certificate names",
            set.len()
        ));
    }
    Ok(set.into_iter().collect())
}

fn odt(t: Timestamp) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(t.as_second())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A new CA, named as library-go names its signers (`<namespace>_<name>@<unix time>`).
pub fn new_signer(
    namespace: &str,
    name: &str,
    validity: Duration,
    now: Timestamp,
) -> Result<Issued, CertError> {
    let cn = format!("{namespace}_{name}@{}", now.as_second());
    let not_before = now - SignedDuration::from_secs(1);
    let not_after = now
        .saturating_add(signed(validity))
        .unwrap_or(Timestamp::MAX);
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn.clone());
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    p.not_before = odt(not_before);
    p.not_after = odt(not_after);
    let key = KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        common_name: cn.clone(),
        issuer: cn,
        not_before: truncate(not_before),
        not_after: truncate(not_after),
        hostnames: vec![],
    })
}

/// A serving certificate for `hostnames` (sorted), signed by the CA in `signer`, valid for
/// `validity` or until the CA expires if sooner; its subject is the first hostname, as
/// library-go's.
pub fn new_serving(
    signer: &Signer,
    hostnames: &[String],
    validity: Duration,
    now: Timestamp,
) -> Result<Issued, CertError> {
    let hostnames = checked_hostnames(hostnames.to_vec()).map_err(CertError::Issue)?;
    let not_before = now - SignedDuration::from_secs(1);
    let wanted = now
        .saturating_add(signed(validity))
        .unwrap_or(Timestamp::MAX);
    let not_after = wanted.min(signer.not_after);
    let mut p = CertificateParams::new(hostnames.clone())?;
    p.distinguished_name
        .push(DnType::CommonName, hostnames[0].clone());
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.not_before = odt(not_before);
    p.not_after = odt(not_after);
    let key = KeyPair::generate()?;
    let ca_key = KeyPair::from_pem(&signer.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&signer.cert_pem, ca_key)?;
    let cert = p.signed_by(&key, &issuer)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        common_name: hostnames[0].clone(),
        issuer: signer.common_name.clone(),
        not_before: truncate(not_before),
        not_after: truncate(not_after),
        hostnames,
    })
}

/// Whole seconds, as the certificates and Go's RFC 3339 hold them.
fn truncate(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// A CA read from its Secret.
#[derive(Debug, Clone)]
pub struct Signer {
    pub cert_pem: String,
    pub key_pem: String,
    pub common_name: String,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
}

/// The certificates of a PEM text, as library-go's `CertsFromPEM` reads them: blocks of other
/// types are skipped, a certificate that does not parse is an error.
fn parse_all(pem: &str, object: &str) -> Result<Vec<mco_pki::Certificate>, CertError> {
    mco_pki::read(
        pem.as_bytes(),
        object,
        Leniency::SkipOtherBlocks,
        usize::MAX,
    )
    .into_result()
    .map_err(|e| {
        let message = match e {
            mco_pki::Error::NotPem { block, reason, .. } => format!("block {block}: {reason}"),
            mco_pki::Error::Malformed { block, reason, .. } => {
                format!("certificate {block}: {reason}")
            }
            // Not met here: there is no limit, and other blocks are skipped.
            e @ (mco_pki::Error::TooMany { .. } | mco_pki::Error::NotCertificate { .. }) => {
                e.to_string()
            }
        };
        CertError::Invalid {
            object: object.to_string(),
            message,
        }
    })
}

/// The CA a Secret holds: `tls.crt` (its first certificate) and `tls.key`.
pub fn signer_of(secret: &Secret) -> Result<Signer, CertError> {
    let object = format!(
        "Secret {}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    );
    let text = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| CertError::Invalid {
                object: object.clone(),
                message: format!("data.{key} is missing or empty"),
            })
    };
    let (cert_pem, key_pem) = (text("tls.crt")?, text("tls.key")?);
    let first = parse_all(&cert_pem, &object)?
        .into_iter()
        .next()
        .ok_or_else(|| CertError::Invalid {
            object: object.clone(),
            message: "data.tls.crt holds no certificate".into(),
        })?;
    if let Err(e) = KeyPair::from_pem(&key_pem) {
        return Err(CertError::Invalid {
            object,
            message: format!("data.tls.key: {e}"),
        });
    }
    Ok(Signer {
        cert_pem,
        key_pem,
        common_name: first.subject.common_name.unwrap_or_default(),
        not_before: first.not_before,
        not_after: first.not_after,
    })
}

/// library-go's bundle: the current CA first, then those already in `existing`, the expired
/// dropped, each once, sorted by their DER bytes; and the subject names it holds.
pub fn merged_bundle(
    existing: &str,
    signer: &Signer,
    now: Timestamp,
    object: &str,
) -> Result<(String, Vec<String>), CertError> {
    let mut certs = parse_all(&signer.cert_pem, object)?;
    certs.truncate(1);
    // A bundle that cannot be read is replaced: only valid CAs are worth keeping.
    certs.extend(parse_all(existing, object).unwrap_or_default());
    certs.retain(|c| c.not_after >= now);
    let mut seen = std::collections::HashSet::new();
    certs.retain(|c| seen.insert(c.der.clone()));
    certs.sort_by(|a, b| a.der.cmp(&b.der));
    let names = certs
        .iter()
        .map(|c| c.subject.common_name.clone().unwrap_or_default())
        .collect();
    let pem = certs.iter().map(|c| pem_block(&c.der)).collect::<String>();
    Ok((pem, names))
}

fn pem_block(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Go's `time.RFC3339` in UTC.
fn rfc3339(t: Timestamp) -> String {
    truncate(t).to_string()
}

/// Go's `time.Duration.String()` for whole hours, as library-go records the refresh period.
fn go_hours(d: Duration) -> String {
    format!("{}h0m0s", d.as_secs() / 3600)
}

/// Whether mco made this object (and so may rewrite it).
pub fn managed(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(MANAGED_LABEL))
}

fn meta(namespace: &str, name: &str, kind: &str, description: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([(
            MANAGED_LABEL.to_string(),
            kind.to_string(),
        )])),
        annotations: Some(BTreeMap::from([
            (OWNING_COMPONENT.to_string(), COMPONENT.to_string()),
            (DESCRIPTION.to_string(), description.to_string()),
        ])),
        ..Default::default()
    }
}

/// The Secret holding `issued`, labelled `kind` (`signer` or `target`), over `base` (whose
/// resourceVersion makes the write conditional).
pub fn tls_secret(
    base: ObjectMeta,
    issued: &Issued,
    kind: &str,
    description: &str,
    refresh: Duration,
) -> Secret {
    let ns = base.namespace.clone().unwrap_or_default();
    let name = base.name.clone().unwrap_or_default();
    let mut m = meta(&ns, &name, kind, description);
    m.resource_version = base.resource_version;
    let ann = m.annotations.get_or_insert_default();
    ann.insert(NOT_BEFORE.into(), rfc3339(issued.not_before));
    ann.insert(NOT_AFTER.into(), rfc3339(issued.not_after));
    ann.insert(REFRESH_PERIOD.into(), go_hours(refresh));
    if kind == "target" {
        ann.insert(ISSUER.into(), issued.issuer.clone());
        ann.insert(HOSTNAMES.into(), issued.hostnames.join(","));
    }
    // Keep whatever else the object carried.
    for (k, v) in base.labels.into_iter().flatten() {
        m.labels.get_or_insert_default().entry(k).or_insert(v);
    }
    for (k, v) in base.annotations.into_iter().flatten() {
        m.annotations.get_or_insert_default().entry(k).or_insert(v);
    }
    Secret {
        metadata: m,
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_string(),
                ByteString(issued.cert_pem.clone().into_bytes()),
            ),
            (
                "tls.key".to_string(),
                ByteString(issued.key_pem.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    }
}

/// Keeps the three objects while this controller leads: checked on every change of one of them
/// (each watched by name, so a deleted serving Secret is made again at once) and every
/// `opts.period`, for the renewals that time alone brings.
pub async fn run(ctx: Arc<Ctx>, opts: ServerCerts) {
    use futures::{FutureExt, StreamExt, TryStreamExt};
    use kube::runtime::watcher::Event;
    let ns = opts.namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    // The events that can change a decision: a watch's (re)start lists the object again.
    fn changed<T>(e: &Event<T>) -> bool {
        matches!(e, Event::Apply(_) | Event::Delete(_) | Event::InitDone)
    }
    let watched = |s: futures::stream::BoxStream<'static, _>| {
        crate::by_name::changes(s, "machine config server certificates", false).boxed()
    };
    let mut changes = futures::stream::select_all([
        watched(
            crate::by_name::watch(secrets.clone(), CA_NAME)
                .try_filter(|e| std::future::ready(changed(e)))
                .map_ok(drop)
                .boxed(),
        ),
        watched(
            crate::by_name::watch(secrets, &opts.serving_secret)
                .try_filter(|e| std::future::ready(changed(e)))
                .map_ok(drop)
                .boxed(),
        ),
        watched(
            crate::by_name::watch(maps, CA_NAME)
                .try_filter(|e| std::future::ready(changed(e)))
                .map_ok(drop)
                .boxed(),
        ),
    ]);
    let mut tick = tokio::time::interval(opts.period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Some(()) = changes.next() => {
                // One check for a burst: the three watches' starts, or this check's own writes.
                while let Some(Some(())) = changes.next().now_or_never() {}
            }
        }
        match check(&ctx, &opts, Timestamp::now()).await {
            Ok(_) => last_error = None,
            Err(e) => {
                let e = e.to_string();
                // Said once per cause, not once a minute.
                if last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(error = %e, "machine config server certificates");
                    last_error = Some(e);
                }
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    NoHostnames(String),
}

/// A reference to the object `name` of kind `K` in `ns`, for an Event about it.
pub(crate) fn reference<K: Resource<DynamicType = ()>>(ns: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        namespace: Some(ns.to_string()),
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// One check of the CA, the bundle and the serving certificate at `now`. A write that meets a
/// conflict is left to the next check.
pub async fn check(ctx: &Ctx, opts: &ServerCerts, now: Timestamp) -> Result<(), CheckError> {
    let ns = opts.namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let pp = PostParams {
        field_manager: Some(crate::drain::FIELD_MANAGER.into()),
        ..Default::default()
    };

    // The CA.
    let ca_secret = secrets.get_opt(CA_NAME).await?;
    let signer_due = match &ca_secret {
        None => Some("secret doesn't exist".to_string()),
        Some(s) if managed(&s.metadata) => signer_renewal(
            s.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new()),
            REFRESH,
            now,
        ),
        Some(_) => None,
    };
    let ca_secret = match signer_due {
        None => ca_secret.expect("present when not renewed"),
        Some(reason) => {
            let issued = new_signer(ns, CA_NAME, VALIDITY, now)?;
            let written = renew(
                ctx, &secrets, &pp, ca_secret, CA_NAME, &issued, SIGNER, &reason,
            )
            .await?;
            match written {
                Some(s) => s,
                None => return Ok(()),
            }
        }
    };
    let signer = signer_of(&ca_secret)?;
    expires(ctx, CA_NAME, signer.not_after);

    // The bundle.
    let object = format!("ConfigMap {ns}/{CA_NAME}");
    let cm = maps.get_opt(CA_NAME).await?;
    let names = match &cm {
        Some(c) if !managed(&c.metadata) => {
            let text = c
                .data
                .as_ref()
                .and_then(|d| d.get(BUNDLE_KEY))
                .cloned()
                .unwrap_or_default();
            parse_all(&text, &object)?
                .into_iter()
                .map(|c| c.subject.common_name.unwrap_or_default())
                .collect()
        }
        _ => {
            let existing = cm
                .as_ref()
                .and_then(|c| c.data.as_ref())
                .and_then(|d| d.get(BUNDLE_KEY))
                .cloned()
                .unwrap_or_default();
            let (pem, names) = merged_bundle(&existing, &signer, now, &object)?;
            if pem != existing || cm.is_none() {
                let reason = match &cm {
                    None => "configmap doesn't exist".to_string(),
                    Some(_) if existing.is_empty() => "configmap is empty".to_string(),
                    Some(_) => format!("signer update {ns}/{CA_NAME}"),
                };
                let message = format!("{CA_NAME:?} in {ns:?} requires a new cert: {reason}");
                ctx.publish(
                    &reference::<ConfigMap>(ns, CA_NAME),
                    EventKind::Normal,
                    "CABundleUpdateRequired",
                    &message,
                )
                .await;
                let mut m = meta(
                    ns,
                    CA_NAME,
                    "ca-bundle",
                    "CA bundle that stores all valid CAs for the MachineConfigServer TLS certificate",
                );
                let mut data = BTreeMap::new();
                if let Some(c) = &cm {
                    m.resource_version = c.metadata.resource_version.clone();
                    data = c.data.clone().unwrap_or_default();
                    for (k, v) in c.metadata.annotations.clone().into_iter().flatten() {
                        m.annotations.get_or_insert_default().entry(k).or_insert(v);
                    }
                    for (k, v) in c.metadata.labels.clone().into_iter().flatten() {
                        m.labels.get_or_insert_default().entry(k).or_insert(v);
                    }
                }
                data.insert(BUNDLE_KEY.to_string(), pem);
                let body = ConfigMap {
                    metadata: m,
                    data: Some(data),
                    ..Default::default()
                };
                let written = match &cm {
                    None => maps.create(&pp, &body).await,
                    Some(_) => maps.replace(CA_NAME, &pp, &body).await,
                };
                match written {
                    Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                    Err(e) => return Err(e.into()),
                    Ok(_) => {}
                }
            }
            names
        }
    };

    // The serving certificate.
    let serving = secrets.get_opt(&opts.serving_secret).await?;
    // Whoever made it, it is what the server serves.
    if let Some(not_after) = serving.as_ref().and_then(not_after_of) {
        expires(ctx, &opts.serving_secret, not_after);
    }
    if serving.as_ref().is_some_and(|s| !managed(&s.metadata)) {
        return Ok(());
    }
    let hostnames = if opts.hostnames.is_empty() {
        let cc = ctx.ccs.get(&kube::runtime::reflector::ObjectRef::new(
            mco_api::constants::names::CONTROLLER_CONFIG,
        ));
        match cc {
            Some(cc) => hostnames(&cc.spec.other).map_err(CheckError::NoHostnames)?,
            None => return Err(CheckError::NoHostnames("no ControllerConfig yet".into())),
        }
    } else {
        checked_hostnames(opts.hostnames.clone()).map_err(CheckError::NoHostnames)?
    };
    let reason = match &serving {
        None => Some("secret doesn't exist".to_string()),
        Some(s) => serving_renewal(
            s.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new()),
            signer.not_before,
            &names,
            &hostnames,
            REFRESH,
            now,
        ),
    };
    let Some(reason) = reason else {
        return Ok(());
    };
    let issued = new_serving(&signer, &hostnames, VALIDITY, now)?;
    let name = opts.serving_secret.as_str();
    if renew(ctx, &secrets, &pp, serving, name, &issued, TARGET, &reason)
        .await?
        .is_some()
    {
        expires(ctx, name, issued.not_after);
    }
    Ok(())
}

/// When the first certificate of a Secret's `tls.crt` expires, if it holds one.
fn not_after_of(secret: &Secret) -> Option<Timestamp> {
    let text = secret.data.as_ref()?.get("tls.crt")?;
    let first = parse_all(&String::from_utf8_lossy(&text.0), "").ok()?;
    first.first().map(|c| c.not_after)
}

/// Records when a Secret's certificate expires, for an alert ahead of it.
fn expires(ctx: &Ctx, secret: &str, not_after: Timestamp) {
    ctx.metrics
        .server_cert_not_after
        .get_or_create(&crate::metrics::SecretLabels {
            secret: secret.to_string(),
        })
        .set(not_after.as_second());
}

/// What library-go records of each kind of Secret: its label value, the Event's reason and
/// words, and the description annotation.
struct Kind {
    label: &'static str,
    reason: &'static str,
    needs: &'static str,
    description: &'static str,
}

const SIGNER: Kind = Kind {
    label: "signer",
    reason: "SignerUpdateRequired",
    needs: "a new signing cert/key pair",
    description: "CA used to sign the MachineConfigServer TLS certificate",
};

const TARGET: Kind = Kind {
    label: "target",
    reason: "TargetUpdateRequired",
    needs: "a new target cert/key pair",
    description: "Secret containing the MachineConfigServer TLS certificate and key",
};

/// Says why `name` is renewed, then writes `issued` into it: created when `existing` is
/// `None`, else replaced at its resourceVersion. `None` when the write met a conflict (left to
/// the next check).
#[allow(clippy::too_many_arguments)]
async fn renew(
    ctx: &Ctx,
    secrets: &Api<Secret>,
    pp: &PostParams,
    existing: Option<Secret>,
    name: &str,
    issued: &Issued,
    kind: Kind,
    why: &str,
) -> Result<Option<Secret>, CheckError> {
    let ns = secrets.namespace().unwrap_or_default();
    let message = format!("{name:?} in {ns:?} requires {}: {why}", kind.needs);
    ctx.publish(
        &reference::<Secret>(ns, name),
        EventKind::Normal,
        kind.reason,
        &message,
    )
    .await;
    let base = existing.map(|s| s.metadata).unwrap_or_else(|| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    });
    let fresh = base.resource_version.is_none();
    let body = tls_secret(base, issued, kind.label, kind.description, REFRESH);
    let written = if fresh {
        secrets.create(pp, &body).await
    } else {
        secrets.replace(name, pp, &body).await
    };
    match written {
        Ok(s) => Ok(Some(s)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
    use serde_json::json;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn signer(issued: &Issued) -> Signer {
        let secret = tls_secret(
            ObjectMeta {
                name: Some(CA_NAME.into()),
                namespace: Some("mco-system".into()),
                ..Default::default()
            },
            issued,
            "signer",
            "",
            REFRESH,
        );
        signer_of(&secret).unwrap()
    }

    /// Whether `leaf` chains to `ca` for `host` at `now`, as a TLS client checks it.
    fn verifies(ca: &str, leaf: &str, host: &str, now: Timestamp) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(leaf.as_bytes()).unwrap();
        verifier
            .verify_server_cert(
                &leaf,
                &[],
                &ServerName::try_from(host.to_string()).unwrap(),
                &[],
                UnixTime::since_unix_epoch(Duration::from_secs(now.as_second() as u64)),
            )
            .map(drop)
    }

    #[test]
    fn a_serving_certificate_chains_to_its_ca_for_each_hostname_and_no_other() {
        let now = at("2026-12-06T12:00:00Z");
        let ca = new_signer("mco-system", CA_NAME, VALIDITY, now).unwrap();
        assert_eq!(
            ca.common_name,
            format!("mco-system_{CA_NAME}@{}", now.as_second())
        );
        let hosts = vec!["api-int.example.com".to_string(), "192.0.2.10".to_string()];
        let s = new_serving(&signer(&ca), &hosts, VALIDITY, now).unwrap();
        // Sorted, as library-go's sets list them; the subject is the first.
        assert_eq!(s.hostnames, vec!["192.0.2.10", "api-int.example.com"]);
        assert_eq!(s.common_name, "192.0.2.10");
        assert_eq!(s.issuer, ca.common_name);
        for host in &hosts {
            verifies(&ca.cert_pem, &s.cert_pem, host, now).unwrap();
        }
        assert!(verifies(&ca.cert_pem, &s.cert_pem, "api.example.com", now).is_err());
        // Another CA's certificate does not chain.
        let other = new_signer("mco-system", CA_NAME, VALIDITY, now).unwrap();
        assert!(verifies(&other.cert_pem, &s.cert_pem, "api-int.example.com", now).is_err());
    }

    #[test]
    fn a_serving_certificate_ends_no_later_than_its_ca() {
        let now = at("2026-12-06T12:00:00Z");
        let ca = new_signer("ns", CA_NAME, 30 * DAY, now).unwrap();
        let s = new_serving(&signer(&ca), &["h".into()], VALIDITY, now).unwrap();
        assert_eq!(s.not_after, ca.not_after);
        let s = new_serving(&signer(&ca), &["h".into()], DAY, now).unwrap();
        assert_eq!(s.not_after, at("2026-12-07T12:00:00Z"));
        assert_eq!(s.not_before, at("2026-12-06T11:59:59Z"));
    }

    #[test]
    fn the_secrets_carry_library_gos_label_and_annotations() {
        let now = at("2026-12-06T12:00:00Z");
        let ca = new_signer("ns", CA_NAME, VALIDITY, now).unwrap();
        let s = new_serving(&signer(&ca), &["b".into(), "a".into()], VALIDITY, now).unwrap();
        let base = ObjectMeta {
            name: Some("mco-server-tls".into()),
            namespace: Some("ns".into()),
            resource_version: Some("7".into()),
            annotations: Some(BTreeMap::from([("kept".into(), "yes".into())])),
            ..Default::default()
        };
        let secret = tls_secret(base, &s, "target", "d", REFRESH);
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(secret.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(secret.metadata.labels.unwrap()[MANAGED_LABEL], "target");
        let a = secret.metadata.annotations.unwrap();
        assert_eq!(a[NOT_BEFORE], "2026-12-06T11:59:59Z");
        assert_eq!(a[NOT_AFTER], "2036-12-03T12:00:00Z");
        assert_eq!(a[REFRESH_PERIOD], "70080h0m0s");
        assert_eq!(a[ISSUER], ca.common_name);
        assert_eq!(a[HOSTNAMES], "a,b");
        assert_eq!(a["kept"], "yes");
        let data = secret.data.unwrap();
        assert_eq!(data["tls.crt"].0, s.cert_pem.as_bytes());
        assert_eq!(data["tls.key"].0, s.key_pem.as_bytes());
    }

    #[test]
    fn a_ca_is_renewed_by_library_gos_time_rules() {
        let now = at("2026-12-06T12:00:00Z");
        let valid = |from: &str, to: &str| ann(&[(NOT_BEFORE, from), (NOT_AFTER, to)]);
        let r = |a: &BTreeMap<String, String>, refresh| signer_renewal(a, refresh, now);
        assert_eq!(r(&ann(&[]), REFRESH).as_deref(), Some("missing notAfter"));
        assert_eq!(
            r(&ann(&[(NOT_AFTER, "soon")]), REFRESH).as_deref(),
            Some("bad expiry: \"soon\"")
        );
        assert_eq!(
            r(&ann(&[(NOT_AFTER, "2030-01-01T00:00:00Z")]), REFRESH).as_deref(),
            Some("missing notBefore")
        );
        // Ten days' validity: renewed past day 8, its 80 %.
        let ten = valid("2026-11-27T12:00:00Z", "2026-12-07T12:00:00Z");
        assert_eq!(
            r(&ten, REFRESH).as_deref(),
            Some("past refresh time (80% of validity): 2026-12-05T12:00:00Z")
        );
        let ten = valid("2026-11-30T12:00:00Z", "2026-12-10T12:00:00Z");
        assert_eq!(r(&ten, REFRESH), None);
        // ... or past its refresh period, when that comes first.
        assert_eq!(
            r(&ten, 5 * DAY).as_deref(),
            Some("past its refresh time 2026-12-05T12:00:00Z")
        );
        let expired = valid("2026-01-01T00:00:00Z", "2026-12-01T00:00:00Z");
        assert_eq!(r(&expired, REFRESH).as_deref(), Some("already expired"));
    }

    #[test]
    fn a_serving_certificate_is_renewed_for_its_issuer_its_hostnames_and_its_times() {
        let now = at("2026-12-06T12:00:00Z");
        let ca_from = at("2026-11-06T12:00:00Z");
        let bundle = vec!["ca-1".to_string(), "ca-2".to_string()];
        let hosts = vec!["a".to_string(), "b".to_string()];
        let ok = ann(&[
            (NOT_BEFORE, "2026-12-01T00:00:00Z"),
            (NOT_AFTER, "2036-12-01T00:00:00Z"),
            (ISSUER, "ca-2"),
            (HOSTNAMES, "b,a"),
        ]);
        let r = |a: &BTreeMap<String, String>, hosts: &[String], refresh, ca_from| {
            serving_renewal(a, ca_from, &bundle, hosts, refresh, now)
        };
        assert_eq!(r(&ok, &hosts, REFRESH, ca_from), None);
        let mut other = ok.clone();
        other.insert(ISSUER.into(), "ca-0".into());
        assert_eq!(
            r(&other, &hosts, REFRESH, ca_from).as_deref(),
            Some("issuer \"ca-0\", not in ca bundle: ca-1, ca-2")
        );
        other.remove(ISSUER);
        assert_eq!(
            r(&other, &hosts, REFRESH, ca_from).as_deref(),
            Some("missing issuer name")
        );
        let moved = vec!["a".to_string(), "c".to_string()];
        assert_eq!(
            r(&ok, &moved, REFRESH, ca_from).as_deref(),
            Some("\"b\" are existing and not required, \"c\" are required and not existing")
        );
        // Past its refresh period (2 days from Dec 1), but its CA is only a day old: it waits a
        // tenth of the period (a fifth of a day here: 4.8 hours), so that machines trust the
        // new CA first.
        let fresh_ca = at("2026-12-06T08:00:00Z");
        assert_eq!(r(&ok, &hosts, 2 * DAY, fresh_ca), None);
        let older_ca = at("2026-12-06T07:00:00Z");
        assert_eq!(
            r(&ok, &hosts, 2 * DAY, older_ca).as_deref(),
            Some("past its refresh time 2026-12-03T00:00:00Z")
        );
    }

    #[test]
    fn the_hostnames_are_upstreams_api_int_host_and_platform_ips() {
        let spec = |infra: serde_json::Value| {
            json!({"infra": {"status": infra}})
                .as_object()
                .unwrap()
                .clone()
        };
        assert_eq!(
            hostnames(&spec(
                json!({"apiServerInternalURI": "https://api-int.c.example.com:6443"})
            )),
            Ok(vec!["api-int.c.example.com".to_string()])
        );
        assert_eq!(
            hostnames(&spec(json!({
                "apiServerInternalURI": "https://api-int.c.example.com:6443",
                "platformStatus": {"type": "BareMetal", "baremetal": {"apiServerInternalIPs": ["192.0.2.5", "2001:db8::5"]}}
            }))),
            Ok(vec![
                "192.0.2.5".to_string(),
                "2001:db8::5".to_string(),
                "api-int.c.example.com".to_string()
            ])
        );
        // Another platform's IPs are not read.
        assert_eq!(
            hostnames(&spec(json!({
                "apiServerInternalURI": "https://[2001:db8::1]:6443",
                "platformStatus": {"type": "AWS", "baremetal": {"apiServerInternalIPs": ["192.0.2.5"]}}
            }))),
            Ok(vec!["2001:db8::1".to_string()])
        );
        assert_eq!(
            hostnames(&spec(json!({}))),
            Err("no APIServerInternalURL found in cluster infrastructure resource".to_string())
        );
        assert!(
            hostnames(&spec(json!({"apiServerInternalURI": "not a url"})))
                .unwrap_err()
                .contains("spec.infra.status.apiServerInternalURI")
        );
    }

    #[test]
    fn a_certificate_names_at_most_64_hostnames() {
        let names = |n: usize| (0..n).map(|i| format!("h{i}")).collect::<Vec<_>>();
        assert_eq!(checked_hostnames(names(MAX_HOSTNAMES)).unwrap().len(), 64);
        assert_eq!(
            checked_hostnames(names(MAX_HOSTNAMES + 1)).unwrap_err(),
            "65 hostnames, more than the 64 one certificate names"
        );
        assert_eq!(
            checked_hostnames(vec![" ".into()]).unwrap_err(),
            "no hostnames set"
        );
    }

    #[test]
    fn the_bundle_keeps_every_valid_ca_once_sorted_and_drops_the_expired() {
        let now = at("2026-12-06T12:00:00Z");
        let old = new_signer("ns", CA_NAME, VALIDITY, at("2025-01-01T00:00:00Z")).unwrap();
        let gone = new_signer("ns", CA_NAME, DAY, at("2025-01-01T00:00:00Z")).unwrap();
        let cur = new_signer("ns", CA_NAME, VALIDITY, now).unwrap();
        let existing = format!("{}{}{}", old.cert_pem, gone.cert_pem, old.cert_pem);
        let (pem, names) = merged_bundle(&existing, &signer(&cur), now, "cm").unwrap();
        let mut want = vec![old.common_name.clone(), cur.common_name.clone()];
        let ders: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .map(|c| c.unwrap().to_vec())
            .collect();
        assert_eq!(ders.len(), 2);
        assert!(ders[0] < ders[1], "sorted by DER");
        want.sort_by_key(|n| {
            let i = if *n == old.common_name { &old } else { &cur };
            CertificateDer::from_pem_slice(i.cert_pem.as_bytes())
                .unwrap()
                .to_vec()
        });
        assert_eq!(names, want);
        // Merging again changes nothing: the controller writes only on a change.
        let (again, _) = merged_bundle(&pem, &signer(&cur), now, "cm").unwrap();
        assert_eq!(again, pem);
        // An unreadable bundle is replaced by the current CA.
        let (fresh, names) = merged_bundle("garbage", &signer(&cur), now, "cm").unwrap();
        assert_eq!(names, vec![cur.common_name.clone()]);
        assert!(fresh.starts_with("-----BEGIN CERTIFICATE-----\n"));
    }

    #[test]
    fn a_ca_secret_without_its_key_is_named() {
        let now = at("2026-12-06T12:00:00Z");
        let ca = new_signer("ns", CA_NAME, VALIDITY, now).unwrap();
        let mut secret = tls_secret(
            ObjectMeta {
                name: Some(CA_NAME.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            &ca,
            "signer",
            "",
            REFRESH,
        );
        secret.data.as_mut().unwrap().remove("tls.key");
        assert_eq!(
            signer_of(&secret).unwrap_err().to_string(),
            format!("Secret ns/{CA_NAME}: data.tls.key is missing or empty")
        );
    }
}
