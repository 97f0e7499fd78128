//! Client-certificate authentication with the real kubectl: who a certificate of the data
//! directory's CA is (`kubectl auth whoami`), what it may do (`kubectl auth can-i`), and the
//! certificates kube-apiserver refuses (another CA, expired, not for client authentication).

use std::path::Path;
use std::process::{Command, Output};

use mco_apiserver::{ClientCertificate, issue_client_certificate};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common;

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl on PATH")
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// kubectl's answer to a 401 (its words in parentheses vary by request).
fn assert_unauthorized(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("error: You must be logged in to the server"),
        "{what}: {stderr}"
    );
}

/// A client certificate issued by the test server's CA for 2024–2124.
fn issue(s: &common::TestServer, user: &str, groups: &[&str]) -> ClientCertificate {
    issue_client_certificate(
        s.handle.data_dir(),
        user,
        groups,
        rcgen::date_time_ymd(2024, 1, 1),
        rcgen::date_time_ymd(2124, 1, 1),
    )
    .unwrap()
}

/// Writes a kubeconfig for `cert` (and `token`, when given, beside it) into `dir`.
fn kubeconfig(
    s: &common::TestServer,
    dir: &Path,
    name: &str,
    cert: &ClientCertificate,
    token: Option<&str>,
) -> std::path::PathBuf {
    let mut text = s.handle.kubeconfig_for_certificate(name, cert);
    if let Some(t) = token {
        text = text.replace(
            "\n    client-key-data:",
            &format!("\n    token: {t}\n    client-key-data:"),
        );
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// kube's credential id of a certificate: the SHA-256 of its DER.
fn credential_id(cert: &ClientCertificate) -> String {
    let der = CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).unwrap();
    let hex: String = Sha256::digest(der.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("X509SHA256={hex}")
}

fn whoami(kubeconfig: &Path) -> Value {
    let out = kubectl(kubeconfig, &["auth", "whoami", "-o", "json"]);
    serde_json::from_str(&stdout_ok(&out)).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_auth_whoami_reports_a_client_certificates_user() {
    let s = common::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let alice = issue(&s, "alice", &["team-a"]);
    let k = kubeconfig(&s, tmp.path(), "alice", &alice, None);
    let review = whoami(&k);
    assert_eq!(review["kind"], "SelfSubjectReview");
    assert_eq!(
        review["status"]["userInfo"],
        serde_json::json!({
            "username": "alice",
            "groups": ["team-a", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": [credential_id(&alice)]},
        })
    );
    // RBAC governs her: nothing grants her secrets, and she may not impersonate.
    let out = kubectl(&k, &["auth", "can-i", "list", "secrets"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    let out = kubectl(&k, &["get", "secrets"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"User "alice" cannot list resource "secrets""#),
        "{stderr}"
    );
    let out = kubectl(&k, &["get", "secrets", "--as=jane"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(r#"User "alice" cannot impersonate"#),
        "{stderr}"
    );
    // Both a valid certificate and a token this server does not know: the certificate is
    // asked first and authenticates, as in kube-apiserver's union of authenticators.
    let both = kubeconfig(&s, tmp.path(), "alice-bogus-token", &alice, Some("bogus"));
    assert_eq!(whoami(&both)["status"]["userInfo"]["username"], "alice");
}

#[tokio::test(flavor = "multi_thread")]
async fn certificates_kube_refuses_are_401() {
    let s = common::start().await;
    let tmp = tempfile::tempdir().unwrap();

    // Another CA's certificate for the same subject.
    let other_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "mco-apiserver-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other = Issuer::new(ca, other_key);
    let leaf = |issuer: &Issuer<'_, KeyPair>, eku: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::OrganizationName, "team-a");
        p.distinguished_name.push(DnType::CommonName, "alice");
        p.extended_key_usages = vec![eku];
        ClientCertificate {
            cert_pem: p.signed_by(&key, issuer).unwrap().pem(),
            key_pem: key.serialize_pem(),
        }
    };
    let foreign = leaf(&other, ExtendedKeyUsagePurpose::ClientAuth);
    let k = kubeconfig(&s, tmp.path(), "foreign", &foreign, None);
    assert_unauthorized(&kubectl(&k, &["auth", "whoami"]), "another CA");
    // Even on /version, open to anonymous callers: a refused credential is not anonymous.
    assert_unauthorized(&kubectl(&k, &["version"]), "another CA on /version");

    // The server's own CA, but only for server authentication.
    let ca_key = std::fs::read_to_string(s.handle.data_dir().join("ca.key")).unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "mco-apiserver-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ours = Issuer::new(ca, KeyPair::from_pem(&ca_key).unwrap());
    let control = leaf(&ours, ExtendedKeyUsagePurpose::ClientAuth);
    let k = kubeconfig(&s, tmp.path(), "control", &control, None);
    assert_eq!(whoami(&k)["status"]["userInfo"]["username"], "alice");
    let serving = leaf(&ours, ExtendedKeyUsagePurpose::ServerAuth);
    let k = kubeconfig(&s, tmp.path(), "serving", &serving, None);
    assert_unauthorized(&kubectl(&k, &["auth", "whoami"]), "serverAuth only");

    // Expired at the end of 2025.
    let expired = issue_client_certificate(
        s.handle.data_dir(),
        "alice",
        &["team-a"],
        rcgen::date_time_ymd(2024, 1, 1),
        rcgen::date_time_ymd(2025, 12, 31),
    )
    .unwrap();
    let k = kubeconfig(&s, tmp.path(), "expired", &expired, None);
    assert_unauthorized(&kubectl(&k, &["auth", "whoami"]), "expired");

    // A refused certificate beside a valid token: the token authenticates.
    let token = s
        .handle
        .mint_token(mco_apiserver::Identity::Admin)
        .await
        .unwrap();
    let k = kubeconfig(&s, tmp.path(), "expired-token", &expired, Some(&token));
    assert_eq!(whoami(&k)["status"]["userInfo"]["username"], "admin");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_system_masters_certificate_may_do_anything() {
    let s = common::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let root = issue(&s, "root", &["system:masters"]);
    let k = kubeconfig(&s, tmp.path(), "root", &root, None);
    for args in [
        ["auth", "can-i", "*", "*"].as_slice(),
        &["auth", "can-i", "delete", "nodes"],
        &["auth", "can-i", "impersonate", "users"],
        &["auth", "can-i", "get", "/healthz"],
    ] {
        assert_eq!(stdout_ok(&kubectl(&k, args)).trim(), "yes", "{args:?}");
    }
    assert_eq!(
        whoami(&k)["status"]["userInfo"]["groups"],
        serde_json::json!(["system:masters", "system:authenticated"])
    );
    // It may impersonate, as kube's masters may.
    let out = stdout_ok(&kubectl(
        &k,
        &[
            "auth",
            "whoami",
            "--as=jane",
            "--as-group=devs",
            "-o",
            "json",
        ],
    ));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["userInfo"]["username"], "jane");
    assert_eq!(
        v["status"]["userInfo"]["groups"],
        serde_json::json!(["devs", "system:authenticated"])
    );
    stdout_ok(&kubectl(&k, &["create", "namespace", "made-by-cert"]));
    stdout_ok(&kubectl(&k, &["get", "namespace", "made-by-cert"]));
}
