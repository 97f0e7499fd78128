//! The Machine API's user-data Secrets, kept pointing at the machine config server's CA bundle
//! as upstream's cert rotation controller keeps them: every Secret of the user-data namespace
//! whose `userData` is an Ignition config (JSON with an `ignition` object) gets the bundle of
//! the ConfigMap `machine-config-server-ca` ([`crate::server_certs`]) as the data URL of its one
//! `ignition.security.tls.certificateAuthorities` entry, so that new machines trust the server
//! they fetch their config from.
//!
//! Upstream's rules:
//! - a Secret labelled [`DERIVED_LABEL`] is someone else's and is left alone;
//! - a Secret without `userData`, or whose `userData` is not JSON with an `ignition` object, is
//!   not a user-data Secret and is left alone;
//! - more than one CA entry is refused ([`Refusal::AdditionalCas`], upstream's words): which
//!   one to replace cannot be told;
//! - the Secret is written only when its bytes change.
//!
//! Beyond upstream, a Secret is rewritten only while the bundle verifies the certificate the
//! server actually serves: the first certificate of the serving Secret's `tls.crt` must be
//! issued by a CA of the bundle, its signature verified ([`serving_issuer_in_bundle`]). Otherwise new machines would
//! trust a CA that did not issue the served certificate and could not join; that happens when
//! an administrator's serving Secret (one without the managed label, which
//! [`crate::server_certs`] serves as it is) was issued by another CA. The keeper then waits,
//! says why once, and rewrites nothing until the two agree.
//!
//! The decisions are pure ([`decide`], [`rewrite`], [`serving_issuer_in_bundle`]); [`run`]
//! watches the Secrets and the bundle, reads and writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures::{StreamExt, future};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use mco_pki::Leniency;
use serde_json::Value;

use mco_rollout::plan::EventKind;

use crate::Error;
use crate::ctx::Ctx;
use crate::server_certs::{BUNDLE_KEY, CA_NAME, reference};

/// The key of the Ignition config in a Machine API user-data Secret (upstream's `UserDataKey`).
pub const USER_DATA_KEY: &str = "userData";
/// Upstream's label of a user-data Secret whose CA someone else derives from a ConfigMap
/// (`MachineConfigServerCAManagedByConfigMapKey`); such a Secret is left alone.
pub const DERIVED_LABEL: &str =
    "machineconfiguration.openshift.io/managed-ca-bundle-derived-from-configmap";
/// The most `userData` bytes parsed. The API server refuses a Secret whose data exceeds 1 MiB,
/// so no real Secret is refused by this; it bounds what one object can make this keeper do.
pub const MAX_USER_DATA_BYTES: usize = 1024 * 1024;
/// The most certificates of the bundle read when checking the serving certificate.
pub const MAX_BUNDLE_CERTIFICATES: usize = crate::certs::MAX_CERTIFICATES;
/// How many times a rewrite that meets a conflict is read again and retried.
pub const CONFLICT_RETRIES: usize = 5;

/// The Event reasons: a Secret rewritten, a Secret refused, and the keeper waiting.
pub const REASON_UPDATED: &str = "UserDataCAUpdated";
pub const REASON_REFUSED: &str = "UserDataCARefused";
pub const REASON_WAITING: &str = "UserDataCAWaiting";

/// What the keeper keeps, and where it reads the bundle and the served certificate.
#[derive(Debug, Clone)]
pub struct UserData {
    /// The Machine API's namespace (`openshift-machine-api` on OpenShift).
    pub namespace: String,
    /// Where [`crate::server_certs`] keeps the CA bundle ConfigMap and the serving Secret.
    pub certs_namespace: String,
    /// The serving certificate's Secret, in `certs_namespace`.
    pub serving_secret: String,
    /// Every Secret is looked at again this often, so that a serving certificate replaced
    /// without a bundle change is seen.
    pub resync: Duration,
}

/// What to do with one Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Its CA entry already holds the bundle.
    Unchanged,
    /// The new `userData`.
    Rewrite(Vec<u8>),
    /// Not a user-data Secret this keeper may touch, and why.
    Skip(String),
}

/// A user-data Secret that cannot be rewritten; the messages are upstream's where upstream has
/// one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("additional CAs detected, cannot modify automatically. Aborting")]
    AdditionalCas,
    #[error("failed to find certificateauthorities field in ignition")]
    NoCertificateAuthorities,
    #[error(
        "no CA entry in ignition.security.tls.certificateAuthorities, cannot modify automatically. Aborting"
    )]
    NoCaEntry,
    #[error(
        "ignition.security.tls.certificateAuthorities[0] is not an object, cannot modify automatically. Aborting"
    )]
    CaEntryNotObject,
    #[error("userData is {len} bytes, more than the {MAX_USER_DATA_BYTES} read")]
    TooLarge { len: usize },
    #[error("failed to marshal updated ignition back to json: {0}")]
    Marshal(String),
}

/// The data URL upstream writes (`dataurl.EncodeBytes` of a PEM bundle, whose detected type is
/// `text/plain; charset=utf-8`, written without the space).
pub fn data_url(bundle: &[u8]) -> String {
    format!(
        "data:text/plain;charset=utf-8;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bundle)
    )
}

/// The bundle's bytes as upstream reads them (`GetCAsFromConfigMap`): `binaryData` first, else
/// `data`, base64-decoded if it decodes (Go's decoder skips line breaks), else as it is.
pub fn bundle_of(cm: &ConfigMap) -> Option<Vec<u8>> {
    if let Some(b) = cm.binary_data.as_ref().and_then(|d| d.get(BUNDLE_KEY)) {
        return Some(b.0.clone());
    }
    let text = cm.data.as_ref()?.get(BUNDLE_KEY)?;
    let joined: String = text.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    Some(
        base64::engine::general_purpose::STANDARD
            .decode(joined)
            .unwrap_or_else(|_| text.clone().into_bytes()),
    )
}

/// The `userData` of a Secret, pointed at `bundle`: upstream's rewrite of its one CA entry's
/// `source`. Every other field is kept, in its order.
pub fn rewrite(user_data: &[u8], bundle: &[u8]) -> Result<Decision, Refusal> {
    if user_data.len() > MAX_USER_DATA_BYTES {
        return Err(Refusal::TooLarge {
            len: user_data.len(),
        });
    }
    let mut doc: Value = match serde_json::from_slice(user_data) {
        Ok(v) => v,
        Err(e) => return Ok(Decision::Skip(format!("userData is not JSON: {e}"))),
    };
    let Some(ignition) = doc.get_mut("ignition").filter(|i| i.is_object()) else {
        return Ok(Decision::Skip("no ignition object in userData".into()));
    };
    let cas = ignition
        .pointer_mut("/security/tls/certificateAuthorities")
        .and_then(Value::as_array_mut)
        .ok_or(Refusal::NoCertificateAuthorities)?;
    if cas.len() > 1 {
        return Err(Refusal::AdditionalCas);
    }
    let entry = cas
        .first_mut()
        .ok_or(Refusal::NoCaEntry)?
        .as_object_mut()
        .ok_or(Refusal::CaEntryNotObject)?;
    let want = data_url(bundle);
    if entry.get("source").and_then(Value::as_str) == Some(want.as_str()) {
        return Ok(Decision::Unchanged);
    }
    entry.insert("source".into(), Value::String(want));
    let out = serde_json::to_vec(&doc).map_err(|e| Refusal::Marshal(e.to_string()))?;
    if out == user_data {
        return Ok(Decision::Unchanged);
    }
    Ok(Decision::Rewrite(out))
}

/// What to do with `secret` for `bundle`: upstream's choice of user-data Secrets, then
/// [`rewrite`].
pub fn decide(secret: &Secret, bundle: &[u8]) -> Result<Decision, Refusal> {
    if secret
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(DERIVED_LABEL))
    {
        return Ok(Decision::Skip(format!("labelled {DERIVED_LABEL}")));
    }
    let Some(user_data) = secret.data.as_ref().and_then(|d| d.get(USER_DATA_KEY)) else {
        return Ok(Decision::Skip(format!("no {USER_DATA_KEY}")));
    };
    rewrite(&user_data.0, bundle)
}

/// Whether the bundle holds the CA that issued the serving certificate (the first certificate of
/// `serving_crt`), by X.509's chain rules ([`mco_pki::issued_by`]): a CA certificate whose
/// subject is the serving certificate's issuer, byte for byte, and whose public key verifies the
/// serving certificate's signature. A CA of the same name (and key identifier) but another key
/// does not. `Err` says why not, naming the names.
pub fn serving_issuer_in_bundle(bundle: &[u8], serving_crt: &[u8]) -> Result<(), String> {
    if bundle.len() > crate::certs::MAX_BUNDLE_BYTES {
        return Err(format!(
            "the bundle is {} bytes, more than the {} read",
            bundle.len(),
            crate::certs::MAX_BUNDLE_BYTES
        ));
    }
    if serving_crt.len() > crate::certs::MAX_BUNDLE_BYTES {
        return Err(format!(
            "the serving certificate is {} bytes, more than the {} read",
            serving_crt.len(),
            crate::certs::MAX_BUNDLE_BYTES
        ));
    }
    // The first certificate is the served one; what follows it (a chain) is not read.
    let served = mco_pki::read(serving_crt, "", Leniency::SkipOtherBlocks, 1);
    let leaf = match (served.certificates.into_iter().next(), served.error) {
        (Some(leaf), _) => leaf,
        (None, Some(e)) => return Err(format!("the serving certificate: {}", reason(e))),
        (None, None) => return Err("the serving Secret's tls.crt holds no certificate".into()),
    };
    // A certificate of the bundle that does not parse is not the issuer; text that is not PEM
    // and too many certificates are the bundle's fault.
    let cas = mco_pki::read(bundle, "", Leniency::Go, MAX_BUNDLE_CERTIFICATES);
    if let Some(e @ (mco_pki::Error::NotPem { .. } | mco_pki::Error::TooMany { .. })) = cas.error {
        return Err(format!("the bundle: {}", reason(e)));
    }
    if cas
        .certificates
        .iter()
        .any(|ca| mco_pki::issued_by(&leaf, ca))
    {
        return Ok(());
    }
    let held = if cas.certificates.is_empty() {
        "no certificate".to_string()
    } else {
        cas.certificates
            .iter()
            .map(|c| format!("{:?}", c.subject.go))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same_name = if cas
        .certificates
        .iter()
        .any(|ca| ca.subject.raw == leaf.issuer.raw)
    {
        "; the CA of that name is not a CA or its key did not sign the serving certificate"
    } else {
        ""
    };
    Err(format!(
        "the serving certificate is issued by {:?}, and the bundle holds {held}{same_name}",
        leaf.issuer.go
    ))
}

/// Why a block was not read, in this module's words.
fn reason(e: mco_pki::Error) -> String {
    match e {
        mco_pki::Error::NotPem { block, reason, .. } => format!("block {block}: {reason}"),
        mco_pki::Error::Malformed { reason, .. } => reason,
        mco_pki::Error::TooMany { max, .. } => format!("more than {max} certificates"),
        e @ mco_pki::Error::NotCertificate { .. } => e.to_string(),
    }
}

/// The keeper's state between reconciles: what it last said, so each cause is said once.
struct Keeper {
    ctx: Arc<Ctx>,
    opts: UserData,
    secrets: Api<Secret>,
    /// The bundle ConfigMap and the serving Secret, as their watches (by name) last saw them:
    /// a reconcile reads them here, not from the API server.
    bundle: Store<ConfigMap>,
    serving: Store<Secret>,
    /// Why the keeper waits, while it does.
    waiting: Mutex<Option<String>>,
    /// Per Secret, the refusal last said.
    refused: Mutex<HashMap<String, String>>,
}

/// Why the keeper waits, and what about.
type Waiting = (ObjectReference, String);

impl Keeper {
    /// The bundle, if the serving certificate chains to it; else why the keeper waits, and the
    /// object the reason is about (the bundle's ConfigMap, or the serving Secret).
    fn verified_bundle(&self) -> Result<Vec<u8>, Box<Waiting>> {
        let ns = self.opts.certs_namespace.as_str();
        let bundle_ref = ObjectRef::<ConfigMap>::new(CA_NAME).within(ns);
        let bundle = match self.bundle.get(&bundle_ref).as_deref().and_then(bundle_of) {
            Some(b) if !b.iter().all(u8::is_ascii_whitespace) => b,
            _ => {
                return Err(Box::new((
                    reference::<ConfigMap>(ns, CA_NAME),
                    format!("ConfigMap {ns}/{CA_NAME} holds no {BUNDLE_KEY}"),
                )));
            }
        };
        let serving = self.opts.serving_secret.as_str();
        let secret = self
            .serving
            .get(&ObjectRef::<Secret>::new(serving).within(ns));
        let crt = secret
            .as_deref()
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get("tls.crt"));
        let about = reference::<Secret>(ns, serving);
        let Some(crt) = crt else {
            return Err(Box::new((
                about,
                format!("Secret {ns}/{serving} holds no tls.crt"),
            )));
        };
        serving_issuer_in_bundle(&bundle, &crt.0)
            .map(|()| bundle)
            .map_err(|e| {
                Box::new((about, format!("ConfigMap {ns}/{CA_NAME} does not verify the certificate of Secret {ns}/{serving}: {e}")))
            })
    }

    /// Says once why user-data Secrets keep their CA, in an Event about the object the reason
    /// is about (kube's recorder counts one object's later Events of one reason as a series of
    /// the first, keeping its note).
    async fn wait(&self, (about, why): Waiting) {
        let first = {
            let mut w = self.waiting.lock().expect("not poisoned");
            let first = w.as_deref() != Some(why.as_str());
            *w = Some(why.clone());
            first
        };
        if first {
            let message = format!(
                "user-data Secrets in {:?} keep their CA until the bundle verifies the served certificate: {why}",
                self.opts.namespace
            );
            self.ctx
                .publish(&about, EventKind::Warning, REASON_WAITING, &message)
                .await;
        }
    }

    fn verified(&self) {
        if self.waiting.lock().expect("not poisoned").take().is_some() {
            tracing::info!(
                namespace = %self.opts.namespace,
                "the CA bundle verifies the served certificate; user-data Secrets follow it"
            );
        }
    }

    /// Says once per Secret and cause why it is not rewritten.
    async fn refuse(&self, secret: &Secret, why: &Refusal) {
        let name = secret.name_any();
        let message = format!("Secret {}/{name}: {why}", self.opts.namespace);
        let first = self
            .refused
            .lock()
            .expect("not poisoned")
            .insert(name, message.clone())
            .as_deref()
            != Some(message.as_str());
        if first {
            self.ctx
                .publish(
                    &secret.object_ref(&()),
                    EventKind::Warning,
                    REASON_REFUSED,
                    &message,
                )
                .await;
        }
    }
}

/// One Secret: rewritten when it is a user-data Secret not pointing at a verified bundle; a
/// conflict is read again and retried.
async fn reconcile(secret: Arc<Secret>, k: Arc<Keeper>) -> Result<Action, Error> {
    // Nothing to read for a Secret that is not a user-data one (most of the namespace).
    if let Ok(Decision::Skip(_)) = decide(&secret, b"") {
        return Ok(Action::await_change());
    }
    let name = secret.name_any();
    let pp = PostParams {
        field_manager: Some(crate::drain::FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut current = (*secret).clone();
    for _ in 0..CONFLICT_RETRIES {
        let bundle = match k.verified_bundle() {
            Ok(b) => b,
            Err(why) => {
                k.wait(*why).await;
                return Ok(Action::await_change());
            }
        };
        k.verified();
        let user_data = match decide(&current, &bundle) {
            Ok(Decision::Rewrite(bytes)) => bytes,
            Ok(Decision::Unchanged) | Ok(Decision::Skip(_)) => {
                k.refused.lock().expect("not poisoned").remove(&name);
                return Ok(Action::await_change());
            }
            Err(why) => {
                k.refuse(&current, &why).await;
                return Ok(Action::await_change());
            }
        };
        current.metadata.managed_fields = None;
        current
            .data
            .get_or_insert_default()
            .insert(USER_DATA_KEY.into(), ByteString(user_data));
        match k.secrets.replace(&name, &pp, &current).await {
            Ok(_) => {
                k.refused.lock().expect("not poisoned").remove(&name);
                let message = format!(
                    "Secret {}/{name}: ignition.security.tls.certificateAuthorities[0] now holds the bundle of ConfigMap {}/{CA_NAME}",
                    k.opts.namespace, k.opts.certs_namespace
                );
                k.ctx
                    .publish(
                        &secret.object_ref(&()),
                        EventKind::Normal,
                        REASON_UPDATED,
                        &message,
                    )
                    .await;
                return Ok(Action::await_change());
            }
            Err(kube::Error::Api(e)) if e.code == 409 => match k.secrets.get_opt(&name).await? {
                Some(s) => current = s,
                None => return Ok(Action::await_change()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Stale(format!(
        "Secret {}/{name}: {CONFLICT_RETRIES} conflicting writes",
        k.opts.namespace
    )))
}

/// Keeps the user-data Secrets of `opts.namespace` while this controller leads: each on its own
/// change, every one on a change of the bundle ConfigMap or of the serving Secret (each watched
/// by name, and read from its watch) and every `opts.resync`.
pub async fn run(ctx: Arc<Ctx>, opts: UserData) {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &opts.namespace);
    let ns = opts.certs_namespace.as_str();
    let (bundle, bundle_w) = reflector::store();
    let (serving, serving_w) = reflector::store();
    let bundle_changes = crate::by_name::changes(
        reflector::reflector(
            bundle_w,
            crate::by_name::watch(
                Api::<ConfigMap>::namespaced(ctx.client.clone(), ns),
                CA_NAME,
            ),
        )
        .touched_objects(),
        "machine config server CA bundle",
        false,
    );
    let serving_changes = crate::by_name::changes(
        reflector::reflector(
            serving_w,
            crate::by_name::watch(
                Api::<Secret>::namespaced(ctx.client.clone(), ns),
                &opts.serving_secret,
            ),
        )
        .touched_objects(),
        "machine config server certificate",
        false,
    );
    // The watches run beside the controller, which starts once both have listed: before, a
    // Secret would be judged against a bundle not yet seen.
    let (changed, changes) = futures::channel::mpsc::unbounded::<()>();
    let watches = futures::stream::select(bundle_changes, serving_changes).for_each(move |()| {
        let _ = changed.unbounded_send(());
        future::ready(())
    });
    let keeper = Arc::new(Keeper {
        ctx,
        secrets: secrets.clone(),
        opts: opts.clone(),
        bundle: bundle.clone(),
        serving: serving.clone(),
        waiting: Mutex::new(None),
        refused: Mutex::new(HashMap::new()),
    });
    let keep = async move {
        if bundle.wait_until_ready().await.is_err() || serving.wait_until_ready().await.is_err() {
            return;
        }
        Controller::new(secrets, watcher::Config::default())
            .reconcile_all_on(futures::stream::select(
                changes,
                crate::controllers::ticker(opts.resync),
            ))
            .run(
                reconcile,
                |s, e, _| {
                    tracing::warn!(secret = %s.name_any(), error = %e, "user-data Secret");
                    Action::requeue(Duration::from_secs(5))
                },
                keeper,
            )
            .for_each(|_| future::ready(()))
            .await;
    };
    future::join(watches, keep).await;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    use super::*;
    use crate::server_certs::{REFRESH, VALIDITY, new_serving, new_signer, signer_of, tls_secret};

    const BUNDLE: &[u8] = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    /// A pointer Ignition as the installer writes it, with one CA entry.
    fn pointer(source: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "ignition": {
                "version": "3.2.0",
                "config": {"merge": [{"source": "https://api-int.c.example.com:22623/config/worker"}]},
                "security": {"tls": {"certificateAuthorities": [{"source": source}]}}
            }
        }))
        .unwrap()
    }

    fn secret(user_data: &[u8], labels: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("worker-user-data".into()),
                namespace: Some("openshift-machine-api".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                USER_DATA_KEY.to_string(),
                ByteString(user_data.to_vec()),
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn the_data_url_is_upstreams() {
        assert_eq!(
            data_url(b"pem"),
            "data:text/plain;charset=utf-8;base64,cGVt"
        );
    }

    #[test]
    fn the_one_ca_entry_is_rewritten_and_every_other_field_kept_in_order() {
        let old = br#"{"ignition":{"version":"3.2.0","config":{"merge":[{"source":"https://x:22623/config/worker"}]},"security":{"tls":{"certificateAuthorities":[{"source":"data:text/plain;charset=utf-8;base64,b2xk","verification":{}}]}},"zz":1},"extra":true}"#;
        let Decision::Rewrite(new) = rewrite(old, BUNDLE).unwrap() else {
            panic!("not rewritten")
        };
        let want = format!(
            r#"{{"ignition":{{"version":"3.2.0","config":{{"merge":[{{"source":"https://x:22623/config/worker"}}]}},"security":{{"tls":{{"certificateAuthorities":[{{"source":"{}","verification":{{}}}}]}}}},"zz":1}},"extra":true}}"#,
            data_url(BUNDLE)
        );
        assert_eq!(String::from_utf8(new).unwrap(), want);
    }

    #[test]
    fn a_current_entry_is_unchanged_whatever_its_formatting() {
        assert_eq!(
            rewrite(&pointer(&data_url(BUNDLE)), BUNDLE),
            Ok(Decision::Unchanged)
        );
        // Spaces upstream's marshalling would drop are no reason to write.
        let spaced = serde_json::to_vec_pretty(
            &serde_json::from_slice::<Value>(&pointer(&data_url(BUNDLE))).unwrap(),
        )
        .unwrap();
        assert_eq!(rewrite(&spaced, BUNDLE), Ok(Decision::Unchanged));
        // A new bundle is a change.
        assert!(matches!(
            rewrite(&pointer(&data_url(BUNDLE)), b"other"),
            Ok(Decision::Rewrite(_))
        ));
    }

    #[test]
    fn two_ca_entries_are_refused_in_upstreams_words() {
        let two = serde_json::to_vec(&json!({"ignition": {"security": {"tls": {
            "certificateAuthorities": [{"source": "data:,a"}, {"source": "data:,b"}]
        }}}}))
        .unwrap();
        let e = rewrite(&two, BUNDLE).unwrap_err();
        assert_eq!(e, Refusal::AdditionalCas);
        assert_eq!(
            e.to_string(),
            "additional CAs detected, cannot modify automatically. Aborting"
        );
    }

    #[test]
    fn an_ignition_without_its_ca_list_or_entry_is_refused() {
        let no_list = br#"{"ignition":{"version":"3.2.0"}}"#;
        assert_eq!(
            rewrite(no_list, BUNDLE),
            Err(Refusal::NoCertificateAuthorities)
        );
        let empty = br#"{"ignition":{"security":{"tls":{"certificateAuthorities":[]}}}}"#;
        assert_eq!(rewrite(empty, BUNDLE), Err(Refusal::NoCaEntry));
        let not_object = br#"{"ignition":{"security":{"tls":{"certificateAuthorities":["x"]}}}}"#;
        assert_eq!(rewrite(not_object, BUNDLE), Err(Refusal::CaEntryNotObject));
    }

    #[test]
    fn not_json_or_no_ignition_is_skipped() {
        assert!(matches!(
            rewrite(b"#cloud-config\n", BUNDLE),
            Ok(Decision::Skip(r)) if r.starts_with("userData is not JSON")
        ));
        assert!(matches!(
            rewrite(br#"{"kind":"x"}"#, BUNDLE),
            Ok(Decision::Skip(_))
        ));
        assert!(matches!(
            rewrite(br#"{"ignition":"3.2.0"}"#, BUNDLE),
            Ok(Decision::Skip(_))
        ));
        assert!(matches!(rewrite(b"[1]", BUNDLE), Ok(Decision::Skip(_))));
    }

    #[test]
    fn a_secret_labelled_derived_from_a_configmap_or_without_user_data_is_skipped() {
        let s = secret(&pointer("data:,old"), &[(DERIVED_LABEL, "")]);
        assert_eq!(
            decide(&s, BUNDLE),
            Ok(Decision::Skip(format!("labelled {DERIVED_LABEL}")))
        );
        let mut s = secret(b"", &[]);
        s.data = Some(BTreeMap::from([(
            "disableTemplating".into(),
            ByteString(b"true".to_vec()),
        )]));
        assert_eq!(decide(&s, BUNDLE), Ok(Decision::Skip("no userData".into())));
        // Unlabelled, it is rewritten.
        let s = secret(&pointer("data:,old"), &[("other", "x")]);
        assert!(matches!(decide(&s, BUNDLE), Ok(Decision::Rewrite(_))));
    }

    #[test]
    fn user_data_over_one_mebibyte_is_not_parsed() {
        let mut big = pointer("data:,old");
        big.truncate(big.len() - 1);
        big.extend(std::iter::repeat_n(b' ', MAX_USER_DATA_BYTES));
        big.push(b'}');
        assert_eq!(
            rewrite(&big, BUNDLE),
            Err(Refusal::TooLarge { len: big.len() })
        );
        // At the limit, it is read.
        let mut at = pointer("data:,old");
        let pad = MAX_USER_DATA_BYTES - at.len();
        at.splice(1..1, std::iter::repeat_n(b' ', pad));
        assert_eq!(at.len(), MAX_USER_DATA_BYTES);
        assert!(matches!(rewrite(&at, BUNDLE), Ok(Decision::Rewrite(_))));
    }

    #[test]
    fn the_bundle_is_read_as_upstream_reads_it() {
        let cm = |data: Option<&str>, binary: Option<&[u8]>| ConfigMap {
            data: data.map(|d| BTreeMap::from([(BUNDLE_KEY.to_string(), d.to_string())])),
            binary_data: binary
                .map(|b| BTreeMap::from([(BUNDLE_KEY.to_string(), ByteString(b.to_vec()))])),
            ..Default::default()
        };
        let pem = std::str::from_utf8(BUNDLE).unwrap();
        assert_eq!(bundle_of(&cm(Some(pem), None)), Some(BUNDLE.to_vec()));
        assert_eq!(bundle_of(&cm(Some("cGVt\n"), None)), Some(b"pem".to_vec()));
        assert_eq!(
            bundle_of(&cm(Some(pem), Some(b"bin"))),
            Some(b"bin".to_vec())
        );
        assert_eq!(bundle_of(&cm(None, None)), None);
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn signer(
        ns: &str,
        now: Timestamp,
    ) -> (crate::server_certs::Issued, crate::server_certs::Signer) {
        let ca = new_signer(ns, CA_NAME, VALIDITY, now).unwrap();
        let secret = tls_secret(
            ObjectMeta {
                name: Some(CA_NAME.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            &ca,
            "signer",
            "",
            REFRESH,
        );
        let s = signer_of(&secret).unwrap();
        (ca, s)
    }

    #[test]
    fn a_bundle_that_does_not_hold_the_serving_certificates_issuer_waits() {
        let now = at("2026-12-06T12:00:00Z");
        let (ours, ours_signer) = signer("openshift-machine-config-operator", now);
        // The installer's CA, of another name, issued the served certificate.
        let (theirs, theirs_signer) = signer("installer", now);
        let served = new_serving(
            &theirs_signer,
            &["api-int.c.example.com".into()],
            VALIDITY,
            now,
        )
        .unwrap();
        let err = serving_issuer_in_bundle(ours.cert_pem.as_bytes(), served.cert_pem.as_bytes())
            .unwrap_err();
        assert!(err.contains(&theirs.common_name), "{err}");
        assert!(err.contains(&ours.common_name), "{err}");
        // Both CAs in the bundle: verified.
        let both = format!("{}{}", ours.cert_pem, theirs.cert_pem);
        assert_eq!(
            serving_issuer_in_bundle(both.as_bytes(), served.cert_pem.as_bytes()),
            Ok(())
        );
        // Issued by ours: verified.
        let ours_served = new_serving(
            &ours_signer,
            &["api-int.c.example.com".into()],
            VALIDITY,
            now,
        )
        .unwrap();
        assert_eq!(
            serving_issuer_in_bundle(ours.cert_pem.as_bytes(), ours_served.cert_pem.as_bytes()),
            Ok(())
        );
        // No certificate at all.
        assert_eq!(
            serving_issuer_in_bundle(ours.cert_pem.as_bytes(), b"").unwrap_err(),
            "the serving Secret's tls.crt holds no certificate"
        );
        assert!(
            serving_issuer_in_bundle(b"", served.cert_pem.as_bytes())
                .unwrap_err()
                .ends_with("the bundle holds no certificate")
        );
    }

    #[test]
    fn a_ca_of_the_same_name_and_key_identifier_but_another_key_does_not_verify() {
        use rcgen::KeyPair;
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyIdMethod};
        // Two CAs alike in every name and identifier a chain is matched by; only the key differs.
        let ca = |key: &KeyPair| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, "root-ca");
            p.key_identifier_method = KeyIdMethod::PreSpecified(b"root-ca-key-id".to_vec());
            (p.clone().self_signed(key).unwrap(), p)
        };
        let (k1, k2) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        let ((ca1, p1), (ca2, _)) = (ca(&k1), ca(&k2));
        let mut leaf = CertificateParams::new(vec!["api-int.c.example.com".into()]).unwrap();
        leaf.use_authority_key_identifier_extension = true;
        let leaf = leaf
            .signed_by(&KeyPair::generate().unwrap(), &Issuer::new(p1, k1))
            .unwrap();
        // What the check compared before it verified signatures: all equal.
        let one = |pem: String| {
            let r = mco_pki::read(pem.as_bytes(), "t", Leniency::Strict, 1);
            r.into_result().unwrap().remove(0)
        };
        let (c1, c2, l) = (one(ca1.pem()), one(ca2.pem()), one(leaf.pem()));
        assert_eq!(c2.subject.raw, l.issuer.raw);
        assert_eq!(c2.subject_key_id, l.authority_key_id);
        assert_eq!(c1.subject_key_id, c2.subject_key_id);
        assert!(c2.is_ca);

        assert_eq!(
            serving_issuer_in_bundle(ca1.pem().as_bytes(), leaf.pem().as_bytes()),
            Ok(())
        );
        assert_eq!(
            serving_issuer_in_bundle(ca2.pem().as_bytes(), leaf.pem().as_bytes()).unwrap_err(),
            "the serving certificate is issued by \"CN=root-ca\", and the bundle holds \
             \"CN=root-ca\"; the CA of that name is not a CA or its key did not sign the \
             serving certificate"
        );
        // The forged CA beside the real one: the real one verifies.
        let both = format!("{}{}", ca2.pem(), ca1.pem());
        assert_eq!(
            serving_issuer_in_bundle(both.as_bytes(), leaf.pem().as_bytes()),
            Ok(())
        );
    }

    #[test]
    fn the_first_certificate_of_the_serving_chain_is_checked() {
        let now = at("2026-12-06T12:00:00Z");
        let (ours, ours_signer) = signer("openshift-machine-config-operator", now);
        let served = new_serving(
            &ours_signer,
            &["api-int.c.example.com".into()],
            VALIDITY,
            now,
        )
        .unwrap();
        // The serving certificate, then its CA, as a chain is sent.
        let chain = format!("{}{}", served.cert_pem, ours.cert_pem);
        assert_eq!(
            serving_issuer_in_bundle(ours.cert_pem.as_bytes(), chain.as_bytes()),
            Ok(())
        );
    }

    #[test]
    fn a_bundle_over_its_limit_is_not_read() {
        let big = vec![b' '; crate::certs::MAX_BUNDLE_BYTES + 1];
        assert!(
            serving_issuer_in_bundle(&big, b"")
                .unwrap_err()
                .contains("more than")
        );
    }
}
