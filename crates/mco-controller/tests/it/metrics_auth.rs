//! The controller's metrics port with `--metrics-auth=delegated` against the embedded API
//! server, which answers TokenReviews and SubjectAccessReviews as kube-apiserver does: with the
//! shipped RBAC, run as its ServiceAccount, the controller serves `/metrics` over TLS to a
//! token bound to `mco-metrics-reader` and refuses another ServiceAccount's (the same scenario
//! runs on kube-apiserver in `crates/mco/tests/it/e2e_real.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use mco_apiserver::Identity;
use mco_controller::Metrics;
use mco_controller::metrics_auth::{Mode, Settings};
use mco_manifests::{Options, rbac};
use mco_testkit::server::{TestServer, install_namespace};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = mco_api::constants::names::DEFAULT_NAMESPACE;

async fn install_shipped_rbac(s: &TestServer) {
    let admin = s.admin().await;
    install_namespace(&admin).await;
    let opts = Options::default();
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    for sa in rbac::service_accounts(&opts) {
        sas.create(&pp, &sa).await.expect("ServiceAccount");
    }
    for name in ["mco-e2e-reader", "mco-e2e-nobody"] {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        sas.create(&pp, &sa).await.expect("ServiceAccount");
    }
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    for r in rbac::cluster_roles(&opts) {
        roles.create(&pp, &r).await.expect("ClusterRole");
    }
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    for b in rbac::cluster_role_bindings(&opts) {
        bindings.create(&pp, &b).await.expect("ClusterRoleBinding");
    }
    let reader = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("mco-e2e-reader".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: mco_manifests::METRICS_READER_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "mco-e2e-reader".into(),
            namespace: Some(NS.into()),
            ..Default::default()
        }]),
    };
    bindings
        .create(&pp, &reader)
        .await
        .expect("ClusterRoleBinding");
}

fn sa(name: &str) -> Identity {
    Identity::ServiceAccount {
        namespace: NS.into(),
        name: name.into(),
        node: None,
    }
}

/// `(status, body)` of a GET over TLS that trusts only `cert` (issued for `localhost`).
async fn get(
    addr: SocketAddr,
    cert: &CertificateDer<'static>,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS with the given certificate");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    let _ = tls.read_to_string(&mut out).await;
    let status = out
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {out:?}"));
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn metrics_are_read_with_a_token_bound_to_the_reader_role_only() {
    let s = TestServer::start().await;
    install_shipped_rbac(&s).await;

    // A certificate of our own, so the client verifies what it talks to.
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_file, ck.cert.pem()).unwrap();
    std::fs::write(&key_file, ck.signing_key.serialize_pem()).unwrap();
    let settings = Settings {
        mode: Mode::Delegated,
        cert_file: Some(cert_file),
        key_file: Some(key_file),
    };
    let controller = s.service_account(NS, "mco-controller").await;
    let metrics = Arc::new(Metrics::new());
    metrics.leader.set(1);
    let (addr, serving) = mco_controller::metrics::serve(
        "127.0.0.1:0".parse().unwrap(),
        metrics,
        &settings,
        controller,
    )
    .await
    .unwrap();
    let task = tokio::spawn(serving);
    let cert = ck.cert.der().clone();

    assert_eq!(get(addr, &cert, "/healthz", None).await, (200, "ok".into()));
    assert_eq!(
        get(addr, &cert, "/metrics", None).await,
        (401, "Unauthorized\n".into())
    );
    let forged = get(addr, &cert, "/metrics", Some("not-a-token")).await;
    assert_eq!(forged, (401, "Unauthorized\n".into()));

    let nobody = s.handle.mint_token(sa("mco-e2e-nobody")).await.unwrap();
    let (status, body) = get(addr, &cert, "/metrics", Some(&nobody)).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.starts_with(&format!(
            "Authorization denied for user system:serviceaccount:{NS}:mco-e2e-nobody"
        )),
        "{body}"
    );

    let reader = s.handle.mint_token(sa("mco-e2e-reader")).await.unwrap();
    let (status, body) = get(addr, &cert, "/metrics", Some(&reader)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("mcc_leader 1"), "{body}");
    task.abort();
}
