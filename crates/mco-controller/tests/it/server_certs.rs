//! The machine config server's CA and serving certificate, kept by the controller against the
//! embedded API server: made from the ControllerConfig's api-int host, reissued for a new host,
//! a renewed CA kept beside the old one in the bundle, a Secret of the administrator's left as
//! it is, and a deleted one made again.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mco_api::ControllerConfig;
use mco_api::constants::names;
use mco_controller::server_certs::{
    BUNDLE_KEY, CA_NAME, HOSTNAMES, ISSUER, MANAGED_LABEL, NOT_AFTER, ServerCerts,
};
use serde_json::json;

use crate::common::*;

/// mco's namespace, which [`env`] makes.
const NS: &str = "mco-system";
const SERVING: &str = "mco-server-tls";

async fn set_api_int(c: &Client, uri: &str) {
    let ccs: Api<ControllerConfig> = Api::all(c.clone());
    let p = json!({"spec": {"infra": {"status": {"apiServerInternalURI": uri}}}});
    ccs.patch(
        names::CONTROLLER_CONFIG,
        &PatchParams::default(),
        &Patch::Merge(&p),
    )
    .await
    .unwrap();
}

fn ann(s: &Secret, key: &str) -> String {
    s.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_default()
}

fn crt(s: &Secret) -> Vec<u8> {
    s.data.as_ref().unwrap()["tls.crt"].0.clone()
}

fn certs_in(cm: &ConfigMap) -> usize {
    cm.data.as_ref().unwrap()[BUNDLE_KEY]
        .matches("BEGIN CERTIFICATE")
        .count()
}

/// `check` holds for every look over `window`: what the controller must leave alone.
async fn stays<F, Fut>(what: &str, window: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        assert!(check().await, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How often the controller checks, in these tests.
const PERIOD: Duration = Duration::from_millis(200);

/// A controller keeping the server's certificates in [`NS`] every [`PERIOD`].
fn keeping_certs() -> mco_controller::Config {
    mco_controller::Config {
        server_certs: Some(ServerCerts {
            namespace: NS.into(),
            serving_secret: SERVING.into(),
            hostnames: vec![],
            period: PERIOD,
        }),
        ..fast_config("a")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_certificates_are_made_rotated_and_left_alone_when_not_ours() {
    let env = env().await;
    let c = &env.client;
    set_api_int(c, "https://api-int.one.example.com:6443").await;
    let config = keeping_certs();
    let ctl = start_controller(c, config);
    let secrets: Api<Secret> = Api::namespaced(c.clone(), NS);
    let maps: Api<ConfigMap> = Api::namespaced(c.clone(), NS);

    // Made: the CA, the bundle holding it, and a serving certificate it signed for api-int.
    let serving = eventually("the serving certificate", 20, || async {
        secrets.get_opt(SERVING).await.ok().flatten()
    })
    .await;
    let ca = secrets.get(CA_NAME).await.unwrap();
    assert_eq!(
        ca.metadata.labels.as_ref().unwrap()[MANAGED_LABEL],
        "signer"
    );
    assert_eq!(ca.type_.as_deref(), Some("kubernetes.io/tls"));
    let ca_cn = {
        let pem = String::from_utf8(crt(&ca)).unwrap();
        let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let cert = p.parse_x509().unwrap();
        cert.subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(ca_cn.starts_with(&format!("{NS}_{CA_NAME}@")), "{ca_cn}");
    assert_eq!(
        serving.metadata.labels.as_ref().unwrap()[MANAGED_LABEL],
        "target"
    );
    assert_eq!(ann(&serving, HOSTNAMES), "api-int.one.example.com");
    assert_eq!(ann(&serving, ISSUER), ca_cn);
    let bundle = eventually("the bundle", 20, || async {
        maps.get_opt(CA_NAME).await.ok().flatten()
    })
    .await;
    assert_eq!(certs_in(&bundle), 1);
    // Their expiry, for an alert ahead of it.
    let not_after: jiff::Timestamp = ann(&serving, NOT_AFTER).parse().unwrap();
    let metric = format!(
        "mcc_server_certificate_not_after_seconds{{secret=\"{SERVING}\"}} {}",
        not_after.as_second()
    );
    eventually("the serving certificate's expiry exported", 20, || async {
        ctl.metrics.encode().contains(&metric).then_some(())
    })
    .await;
    assert!(
        ctl.metrics.encode().contains(&format!(
            "mcc_server_certificate_not_after_seconds{{secret=\"{CA_NAME}\"}}"
        )),
        "{}",
        ctl.metrics.encode()
    );
    assert!(
        bundle.data.as_ref().unwrap()[BUNDLE_KEY].contains(
            &String::from_utf8(crt(&ca))
                .unwrap()
                .lines()
                .nth(1)
                .unwrap()
                .to_string()
        )
    );
    // Each step said so in upstream's words.
    let events: Api<Event> = Api::namespaced(c.clone(), NS);
    eventually("the TargetUpdateRequired event", 20, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("TargetUpdateRequired")
                    && e.note.as_deref()
                        == Some("\"mco-server-tls\" in \"mco-system\" requires a new target cert/key pair: secret doesn't exist")
            })
            .then_some(())
    })
    .await;

    // A new api-int host: a new serving certificate, from the same CA.
    set_api_int(c, "https://api-int.two.example.com:6443").await;
    let serving = eventually("reissued for the new host", 20, || async {
        let s = secrets.get(SERVING).await.ok()?;
        (ann(&s, HOSTNAMES) == "api-int.two.example.com").then_some(s)
    })
    .await;
    assert_eq!(crt(&secrets.get(CA_NAME).await.unwrap()), crt(&ca));

    // A CA past its time: renewed, the bundle keeps the old one beside it (machines trust
    // both), and the serving certificate, whose issuer is still in the bundle, stays.
    let expire = json!({"metadata": {"annotations": {NOT_AFTER: "2020-01-01T00:00:00Z"}}});
    secrets
        .patch(CA_NAME, &PatchParams::default(), &Patch::Merge(&expire))
        .await
        .unwrap();
    eventually("a new CA in the bundle beside the old", 20, || async {
        let cm = maps.get(CA_NAME).await.ok()?;
        (certs_in(&cm) == 2).then_some(())
    })
    .await;
    assert_ne!(crt(&secrets.get(CA_NAME).await.unwrap()), crt(&ca));
    stays("the serving certificate kept", 5 * PERIOD, || async {
        crt(&secrets.get(SERVING).await.unwrap()) == crt(&serving)
    })
    .await;

    // The administrator's own Secret (no managed label) is served as it is.
    let theirs = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
    secrets
        .patch(SERVING, &PatchParams::default(), &Patch::Merge(&theirs))
        .await
        .unwrap();
    set_api_int(c, "https://api-int.three.example.com:6443").await;
    stays("their Secret untouched", 5 * PERIOD, || async {
        let s = secrets.get(SERVING).await.unwrap();
        ann(&s, HOSTNAMES) == "api-int.two.example.com" && crt(&s) == crt(&serving)
    })
    .await;

    // Deleted: made again.
    secrets.delete(SERVING, &Default::default()).await.unwrap();
    let made = eventually("made again", 20, || async {
        secrets.get_opt(SERVING).await.ok().flatten()
    })
    .await;
    assert_eq!(ann(&made, HOSTNAMES), "api-int.three.example.com");
    let labels: BTreeMap<String, String> = made.metadata.labels.unwrap();
    assert_eq!(labels[MANAGED_LABEL], "target");
}

/// Without a host to serve, the CA and its bundle are made and no serving certificate is. A CA
/// Secret of the administrator's (no managed label) is never renewed, and signs the serving
/// certificate once a host is known; the bundle holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_host_no_serving_certificate_and_an_administrators_ca_signs_it() {
    let env = env().await;
    let c = &env.client;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), NS);
    let maps: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    // The administrator's CA, before the controller starts.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "admins-own-ca");
    let ca_pem = params.self_signed(&key).unwrap().pem();
    let theirs: Secret = serde_json::from_value(json!({
        "metadata": {"name": CA_NAME},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": ca_pem, "tls.key": key.serialize_pem()},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let config = keeping_certs();
    let _ctl = start_controller(c, config);

    // The bundle, holding their CA; no host yet, so no serving certificate.
    eventually("the bundle with their CA", 20, || async {
        let cm = maps.get_opt(CA_NAME).await.ok().flatten()?;
        (certs_in(&cm) == 1 && cm.data.as_ref()?[BUNDLE_KEY].contains(ca_pem.lines().nth(1)?))
            .then_some(())
    })
    .await;
    stays(
        "no serving certificate without a host",
        5 * PERIOD,
        || async { secrets.get_opt(SERVING).await.unwrap().is_none() },
    )
    .await;

    // A host: their CA signs the serving certificate, and stays as they made it.
    set_api_int(c, "https://api-int.one.example.com:6443").await;
    let serving = eventually("the serving certificate", 20, || async {
        secrets.get_opt(SERVING).await.ok().flatten()
    })
    .await;
    assert_eq!(ann(&serving, ISSUER), "admins-own-ca");
    assert_eq!(ann(&serving, HOSTNAMES), "api-int.one.example.com");
    let ca = secrets.get(CA_NAME).await.unwrap();
    assert_eq!(crt(&ca), ca_pem.as_bytes());
    assert!(ca.metadata.labels.is_none(), "{:?}", ca.metadata.labels);
}

/// The three objects are watched: with a period of an hour, a deleted serving Secret and a
/// deleted bundle are made again at once, not at the next period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_object_is_made_again_at_once_not_at_the_next_period() {
    let env = env().await;
    let c = &env.client;
    set_api_int(c, "https://api-int.one.example.com:6443").await;
    let mut config = keeping_certs();
    config.server_certs.as_mut().unwrap().period = Duration::from_secs(3600);
    let _ctl = start_controller(c, config);
    let secrets: Api<Secret> = Api::namespaced(c.clone(), NS);
    let maps: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    // The first check runs at the start.
    let first = eventually("the serving certificate", 20, || async {
        secrets.get_opt(SERVING).await.ok().flatten()
    })
    .await;
    eventually("the bundle", 20, || async {
        maps.get_opt(CA_NAME).await.ok().flatten()
    })
    .await;

    secrets.delete(SERVING, &Default::default()).await.unwrap();
    let made = eventually("the serving certificate made again", 10, || async {
        secrets.get_opt(SERVING).await.ok().flatten()
    })
    .await;
    assert_ne!(crt(&made), crt(&first), "a new certificate");

    maps.delete(CA_NAME, &Default::default()).await.unwrap();
    let bundle = eventually("the bundle made again", 10, || async {
        maps.get_opt(CA_NAME).await.ok().flatten()
    })
    .await;
    assert_eq!(certs_in(&bundle), 1);
}
