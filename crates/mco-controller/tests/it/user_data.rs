//! The Machine API's user-data Secrets, kept by the controller beside the server's certificates
//! against the embedded API server, in upstream's namespaces: pointed at the bundle, following
//! a renewed CA, the administrator's and labelled Secrets left alone, and no rewrite while the
//! served certificate's issuer is not in the bundle.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use mco_controller::server_certs::{BUNDLE_KEY, CA_NAME, NOT_AFTER, ServerCerts};
use mco_controller::user_data::{
    DERIVED_LABEL, REASON_UPDATED, REASON_WAITING, USER_DATA_KEY, UserData, data_url,
};
use serde_json::{Value, json};

use crate::common::*;

const CERTS_NS: &str = "openshift-machine-config-operator";
const MAPI_NS: &str = "openshift-machine-api";
const SERVING: &str = "machine-config-server-tls";
const PERIOD: Duration = Duration::from_millis(200);

async fn create_namespaces(c: &Client) {
    let namespaces: Api<Namespace> = Api::all(c.clone());
    for ns in [CERTS_NS, MAPI_NS] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
    }
}

/// A pointer Ignition as the installer writes it, trusting `source`.
fn pointer(source: &str) -> String {
    json!({
        "ignition": {
            "version": "3.2.0",
            "config": {"merge": [{"source": "https://api-int.c.example.com:22623/config/worker"}]},
            "security": {"tls": {"certificateAuthorities": [{"source": source}]}}
        }
    })
    .to_string()
}

async fn create_user_data(c: &Client, name: &str, source: &str, labels: Value) {
    let secrets: Api<Secret> = Api::namespaced(c.clone(), MAPI_NS);
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "stringData": {USER_DATA_KEY: pointer(source), "disableTemplating": "true"},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
}

/// The CA source a user-data Secret holds.
async fn ca_source(c: &Client, name: &str) -> Option<String> {
    let secrets: Api<Secret> = Api::namespaced(c.clone(), MAPI_NS);
    let s = secrets.get_opt(name).await.ok()??;
    let doc: Value = serde_json::from_slice(&s.data?.get(USER_DATA_KEY)?.0).ok()?;
    doc.pointer("/ignition/security/tls/certificateAuthorities/0/source")?
        .as_str()
        .map(str::to_string)
}

async fn bundle(c: &Client) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(c.clone(), CERTS_NS);
    let cm = maps.get_opt(CA_NAME).await.ok()??;
    cm.data?.get(BUNDLE_KEY).cloned()
}

async fn event_with(c: &Client, ns: &str, reason: &str) -> Option<Event> {
    let events: Api<Event> = Api::namespaced(c.clone(), ns);
    let list = events.list(&ListParams::default()).await.ok()?;
    list.items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
}

/// A controller keeping the server's certificates in [`CERTS_NS`] and the user-data Secrets of
/// [`MAPI_NS`], as `mco manifests --openshift` runs it.
fn keeping_user_data() -> mco_controller::Config {
    mco_controller::Config {
        server_certs: Some(ServerCerts {
            namespace: CERTS_NS.into(),
            serving_secret: SERVING.into(),
            hostnames: vec!["api-int.c.example.com".into()],
            period: PERIOD,
        }),
        user_data: Some(UserData {
            namespace: MAPI_NS.into(),
            certs_namespace: CERTS_NS.into(),
            serving_secret: SERVING.into(),
            resync: PERIOD,
        }),
        ..fast_config("a")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_data_follows_the_bundle_and_labelled_secrets_stay() {
    let env = env().await;
    let c = &env.client;
    create_namespaces(c).await;
    create_user_data(c, "worker-user-data", "data:,old", json!({})).await;
    create_user_data(
        c,
        "custom-user-data",
        "data:,theirs",
        json!({DERIVED_LABEL: "true"}),
    )
    .await;
    let _ctl = start_controller(c, keeping_user_data());

    // Pointed at the bundle server_certs made.
    let first = eventually("worker-user-data trusting the bundle", 30, || async {
        let b = bundle(c).await?;
        (ca_source(c, "worker-user-data").await? == data_url(b.as_bytes())).then_some(b)
    })
    .await;
    let ev = eventually("the UserDataCAUpdated event", 20, || async {
        event_with(c, MAPI_NS, REASON_UPDATED).await
    })
    .await;
    assert!(
        ev.note
            .as_deref()
            .unwrap_or_default()
            .contains("worker-user-data"),
        "{ev:?}"
    );
    // The other fields are kept.
    let secrets: Api<Secret> = Api::namespaced(c.clone(), MAPI_NS);
    let s = secrets.get("worker-user-data").await.unwrap();
    let data = s.data.unwrap();
    assert_eq!(data["disableTemplating"].0, b"true");
    let doc: Value = serde_json::from_slice(&data[USER_DATA_KEY].0).unwrap();
    assert_eq!(
        doc["ignition"]["config"]["merge"][0]["source"],
        "https://api-int.c.example.com:22623/config/worker"
    );

    // A renewed CA: the bundle holds both, and the Secret follows.
    let ca_secrets: Api<Secret> = Api::namespaced(c.clone(), CERTS_NS);
    let expire = json!({"metadata": {"annotations": {NOT_AFTER: "2020-01-01T00:00:00Z"}}});
    ca_secrets
        .patch(CA_NAME, &PatchParams::default(), &Patch::Merge(&expire))
        .await
        .unwrap();
    let second = eventually(
        "worker-user-data trusting the renewed bundle",
        30,
        || async {
            let b = bundle(c).await?;
            (b != first && ca_source(c, "worker-user-data").await? == data_url(b.as_bytes()))
                .then_some(b)
        },
    )
    .await;
    assert_eq!(second.matches("BEGIN CERTIFICATE").count(), 2);

    // Replaced by hand: put back.
    let reverted = json!({"stringData": {USER_DATA_KEY: pointer("data:,reverted")}});
    secrets
        .patch(
            "worker-user-data",
            &PatchParams::default(),
            &Patch::Merge(&reverted),
        )
        .await
        .unwrap();
    eventually("worker-user-data put back", 30, || async {
        let b = bundle(c).await?;
        (ca_source(c, "worker-user-data").await? == data_url(b.as_bytes())).then_some(())
    })
    .await;

    // The labelled Secret is someone else's.
    assert_eq!(
        ca_source(c, "custom-user-data").await.as_deref(),
        Some("data:,theirs")
    );
}

/// The administrator's serving Secret (no managed label), issued by a CA the bundle does not
/// hold: the keeper waits and says why; once the served certificate is one the bundle
/// verifies, it points the Secrets at the bundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_data_waits_while_the_bundle_does_not_verify_the_served_certificate() {
    let env = env().await;
    let c = &env.client;
    create_namespaces(c).await;
    // The installer's CA and the certificate it issued, unlabelled.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "root-ca");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let served = rcgen::CertificateParams::new(vec!["api-int.c.example.com".into()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let theirs: Secret = serde_json::from_value(json!({
        "metadata": {"name": SERVING},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": served.pem(), "tls.key": key.serialize_pem()},
    }))
    .unwrap();
    let ca_secrets: Api<Secret> = Api::namespaced(c.clone(), CERTS_NS);
    ca_secrets
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    create_user_data(c, "worker-user-data", "data:,installers", json!({})).await;
    // Periods longer than the test: only the watches move either controller.
    let mut config = keeping_user_data();
    if let Some(s) = config.server_certs.as_mut() {
        s.period = Duration::from_secs(3600);
    }
    if let Some(u) = config.user_data.as_mut() {
        u.resync = Duration::from_secs(3600);
    }
    let _ctl = start_controller(c, config);

    // (Until server_certs has made the bundle, it waits for that.)
    let note = eventually(
        "the UserDataCAWaiting event naming their CA",
        30,
        || async {
            let events: Api<Event> = Api::namespaced(c.clone(), CERTS_NS);
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find_map(|e| {
                let note = e.note.filter(|n| n.contains("root-ca"))?;
                (e.reason.as_deref() == Some(REASON_WAITING)).then_some(note)
            })
        },
    )
    .await;
    assert!(note.contains(SERVING), "{note}");
    // Having said so, it has written nothing.
    assert_eq!(
        ca_source(c, "worker-user-data").await.as_deref(),
        Some("data:,installers")
    );
    assert!(event_with(c, MAPI_NS, REASON_UPDATED).await.is_none());

    // Their Secret gone, server_certs issues one from the bundle's CA; the keeper follows at
    // once, on the serving Secret's watch: the bundle did not change.
    ca_secrets
        .delete(SERVING, &Default::default())
        .await
        .unwrap();
    eventually("worker-user-data trusting the bundle", 30, || async {
        let b = bundle(c).await?;
        (ca_source(c, "worker-user-data").await? == data_url(b.as_bytes())).then_some(())
    })
    .await;
}
