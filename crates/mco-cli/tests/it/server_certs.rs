//! `mco doctor` on the machine config server's certificates: pure checks of the serving
//! certificate and its CA as new machines meet them, with certificates made by `rcgen`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mco_api::ControllerConfig;
use mco_cli::doctor::{self, Finding, ServerCertObjects};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, date_time_ymd};
use serde_json::json;

const NS: &str = "mco-system";
const HOST: &str = "api-int.cluster.example";

/// 2030-01-01T00:00:00Z: the tests' "now".
fn now() -> jiff::Timestamp {
    "2030-01-01T00:00:00Z".parse().unwrap()
}

/// A CA named `cn`, valid 2020 to 2040 (or to `until`): its PEM and its issuer.
pub fn ca(cn: &str, until: Option<(i32, u8, u8)>) -> (String, Issuer<'static, KeyPair>) {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    p.not_before = date_time_ymd(2020, 1, 1);
    let (y, m, d) = until.unwrap_or((2040, 1, 1));
    p.not_after = date_time_ymd(y, m, d);
    let key = KeyPair::generate().unwrap();
    let pem = p.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(p, key))
}

/// A serving certificate for `hosts` (DNS names or IPs), valid from 2020 to the given day.
pub fn serving(issuer: &Issuer<'_, KeyPair>, hosts: &[&str], until: (i32, u8, u8)) -> String {
    let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let mut p = CertificateParams::new(names).unwrap();
    p.distinguished_name.push(DnType::CommonName, hosts[0]);
    p.not_before = date_time_ymd(2020, 1, 1);
    p.not_after = date_time_ymd(until.0, until.1, until.2);
    let key = KeyPair::generate().unwrap();
    p.signed_by(&key, issuer).unwrap().pem()
}

/// A `kubernetes.io/tls` Secret holding `pem`, labelled as mco labels its own with `managed`.
pub fn tls_secret(name: &str, pem: &str, managed: Option<&str>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: managed.map(|v| {
                BTreeMap::from([(
                    mco_api::constants::server_certs::MANAGED_LABEL.into(),
                    v.into(),
                )])
            }),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(pem.as_bytes().to_vec())),
            ("tls.key".to_string(), ByteString(b"(key)".to_vec())),
        ])),
        ..Default::default()
    }
}

pub fn bundle(pems: &[&str], managed: bool) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("machine-config-server-ca".into()),
            namespace: Some(NS.into()),
            labels: managed.then(|| {
                BTreeMap::from([(
                    mco_api::constants::server_certs::MANAGED_LABEL.into(),
                    "ca-bundle".into(),
                )])
            }),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "ca-bundle.crt".to_string(),
            pems.concat(),
        )])),
        ..Default::default()
    }
}

pub fn controller_config(uri: &str) -> ControllerConfig {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "ControllerConfig",
        "metadata": {"name": "machine-config-controller"},
        "spec": {"infra": {"status": {"apiServerInternalURI": uri}}},
    }))
    .unwrap()
}

/// mco's three objects: a CA valid to 2040, its bundle, and a managed serving certificate for
/// `hosts` valid to `until`.
fn managed(hosts: &[&str], until: (i32, u8, u8)) -> ServerCertObjects {
    let (ca_pem, issuer) = ca("mco-system_machine-config-server-ca@1577836800", None);
    ServerCertObjects {
        namespace: NS.into(),
        ca: Some(tls_secret(
            "machine-config-server-ca",
            &ca_pem,
            Some("signer"),
        )),
        bundle: Some(bundle(&[&ca_pem], true)),
        serving: Some(tls_secret(
            "mco-server-tls",
            &serving(&issuer, hosts, until),
            Some("target"),
        )),
        ..Default::default()
    }
}

fn check(objects: &ServerCertObjects, uri: &str) -> Vec<Finding> {
    doctor::server_certificates(objects, Some(&controller_config(uri)), now())
}

fn text(found: &[Finding]) -> String {
    doctor::render(found, None)
}

#[test]
fn a_serving_certificate_with_31_days_left_is_not_named() {
    let mut objects = managed(&[HOST], (2030, 2, 1));
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert!(found.is_empty(), "{}", text(&found));
    // A bundle with text around its blocks, and a block that is no certificate, is read as a
    // TLS client reads it.
    let cm = objects.bundle.as_mut().unwrap();
    let pem = cm.data.as_mut().unwrap().get_mut("ca-bundle.crt").unwrap();
    *pem = format!(
        "# the server's CAs\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n{pem}\n\n"
    );
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert!(found.is_empty(), "{}", text(&found));
}

#[test]
fn a_serving_certificate_with_29_days_left_is_a_warning_and_the_controller_is_suspected() {
    let found = check(
        &managed(&[HOST], (2030, 1, 30)),
        "https://api-int.cluster.example:6443",
    );
    assert_eq!(found.len(), 1, "{}", text(&found));
    let f = &found[0];
    assert_eq!(f.subject, "secret mco-server-tls -n mco-system");
    assert_eq!(f.title, "machine config server certificate expires soon");
    assert!(
        f.cause
            .contains("expires at 2030-01-30T00:00:00Z, in 29 days"),
        "{}",
        f.cause
    );
    assert!(f.cause.contains("data.tls.crt"), "{}", f.cause);
    // Past 80 % of 2020..2030, still here: the controller is not renewing it.
    assert!(
        f.cause
            .contains("label auth.openshift.io/managed-certificate-type=target")
            && f.cause
                .contains("may not be running with --server-certs-namespace=mco-system"),
        "{}",
        f.cause
    );
    let commands: Vec<&str> = f.fixes.iter().map(|x| x.command.as_str()).collect();
    assert!(commands[0].contains("openssl x509 -noout"), "{commands:?}");
    assert!(
        commands
            .iter()
            .any(|c| c.contains("get deployment mco-controller")),
        "{commands:?}"
    );
    // mco's own Secret is not for the administrator to replace.
    assert!(
        !commands.iter().any(|c| c.contains("create secret tls")),
        "{commands:?}"
    );
}

#[test]
fn an_expired_serving_certificate_is_an_error() {
    let found = check(
        &managed(&[HOST], (2029, 12, 1)),
        "https://api-int.cluster.example:6443",
    );
    assert_eq!(found.len(), 1, "{}", text(&found));
    assert_eq!(found[0].title, "machine config server certificate expired");
    assert!(
        found[0]
            .cause
            .contains("expired at 2029-12-01T00:00:00Z, 31 days ago"),
        "{}",
        found[0].cause
    );
}

#[test]
fn a_ca_expiring_soon_is_named_on_its_own_secret() {
    let (ca_pem, issuer) = ca("my-ca", Some((2030, 1, 11)));
    let objects = ServerCertObjects {
        namespace: NS.into(),
        ca: Some(tls_secret("machine-config-server-ca", &ca_pem, None)),
        bundle: Some(bundle(&[&ca_pem], true)),
        serving: Some(tls_secret(
            "mco-server-tls",
            &serving(&issuer, &[HOST], (2030, 1, 11)),
            Some("target"),
        )),
        ..Default::default()
    };
    let found = check(&objects, "https://api-int.cluster.example:6443");
    let titles: Vec<&str> = found.iter().map(|f| f.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "machine config server certificate expires soon",
            "machine config server CA expires soon"
        ],
        "{}",
        text(&found)
    );
    let ca = &found[1];
    assert_eq!(ca.subject, "secret machine-config-server-ca -n mco-system");
    assert!(ca.cause.contains("in 10 days"), "{}", ca.cause);
    // The administrator's CA: theirs to replace, and the bundle must trust the new one.
    assert!(ca.cause.contains("administrator's own"), "{}", ca.cause);
    assert!(
        ca.fixes.iter().any(|x| x
            .how
            .contains("add it to ConfigMap mco-system/machine-config-server-ca")
            && x.command
                .contains("create secret tls machine-config-server-ca --cert=ca.crt")),
        "{:#?}",
        ca.fixes
    );
}

#[test]
fn the_administrators_own_serving_secret_is_theirs_to_replace() {
    let mut objects = managed(&[HOST], (2030, 1, 30));
    let serving = objects.serving.as_mut().unwrap();
    serving.metadata.labels = None;
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert_eq!(found.len(), 1, "{}", text(&found));
    let f = &found[0];
    assert_eq!(f.title, "machine config server certificate expires soon");
    assert!(
        f.cause.contains(
            "The Secret has no auth.openshift.io/managed-certificate-type label: it is the \
             administrator's own, which mco never rewrites; replace it."
        ),
        "{}",
        f.cause
    );
    assert!(!f.cause.contains("--server-certs-namespace"), "{}", f.cause);
    let commands: Vec<&str> = f.fixes.iter().map(|x| x.command.as_str()).collect();
    assert!(
        commands.contains(
            &"kubectl -n mco-system create secret tls mco-server-tls --cert=mcs.crt --key=mcs.key \
              --dry-run=client -o yaml | kubectl replace -f -"
        ),
        "{commands:?}"
    );
    assert!(
        commands.contains(&"kubectl -n mco-system delete secret mco-server-tls"),
        "{commands:?}"
    );
}

#[test]
fn a_serving_certificate_for_another_host_is_an_error() {
    let found = check(
        &managed(&["api-int.other.example"], (2035, 1, 1)),
        "https://api-int.cluster.example:6443",
    );
    assert_eq!(found.len(), 1, "{}", text(&found));
    let f = &found[0];
    assert_eq!(
        f.title,
        "machine config server certificate not valid for api-int.cluster.example"
    );
    assert!(
        f.cause.contains(
            "spec.infra.status.apiServerInternalURI (https://api-int.cluster.example:6443)"
        ) && f.cause.contains("is for api-int.other.example"),
        "{}",
        f.cause
    );
    assert!(
        f.cause.contains(
            "they refuse it (x509: certificate is valid for api-int.other.example, not \
             api-int.cluster.example)"
        ),
        "{}",
        f.cause
    );
    assert!(
        f.cause
            .contains("or its --server-cert-hostnames may name other hosts"),
        "{}",
        f.cause
    );
}

#[test]
fn a_host_named_by_an_ip_san_or_a_wildcard_is_enough() {
    let ipv4 = check(
        &managed(&["10.0.0.5"], (2035, 1, 1)),
        "https://10.0.0.5:6443",
    );
    assert!(ipv4.is_empty(), "{}", text(&ipv4));
    let ipv6 = check(
        &managed(&["fd00::5"], (2035, 1, 1)),
        "https://[fd00::5]:6443",
    );
    assert!(ipv6.is_empty(), "{}", text(&ipv6));
    let wildcard = check(
        &managed(&["*.cluster.example"], (2035, 1, 1)),
        "https://API-INT.cluster.example:6443",
    );
    assert!(wildcard.is_empty(), "{}", text(&wildcard));
    // An IP the certificate does not name, though its DNS name spells it.
    let other = check(
        &managed(&["10.0.0.5"], (2035, 1, 1)),
        "https://10.0.0.6:6443",
    );
    assert_eq!(other.len(), 1, "{}", text(&other));
    assert!(
        other[0].cause.contains("is for 10.0.0.5"),
        "{}",
        other[0].cause
    );
}

#[test]
fn a_serving_certificate_no_ca_of_the_bundle_signed_is_an_error() {
    let mut objects = managed(&[HOST], (2035, 1, 1));
    let (other_pem, _) = ca("someone-else", None);
    objects.bundle = Some(bundle(&[&other_pem], true));
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert_eq!(found.len(), 1, "{}", text(&found));
    let f = &found[0];
    assert_eq!(
        f.title,
        "machine config server certificate not signed by a CA of the bundle"
    );
    assert!(
        f.cause.contains(
            "ConfigMap mco-system/machine-config-server-ca (ca-bundle.crt: CN=someone-else)"
        ) && f
            .cause
            .contains("issuer CN=mco-system_machine-config-server-ca@1577836800")
            && f.cause
                .contains("x509: certificate signed by unknown authority"),
        "{}",
        f.cause
    );
    // mco's bundle: not the administrator's to edit.
    assert!(
        !f.fixes.iter().any(|x| x.command.contains("edit configmap")),
        "{:#?}",
        f.fixes
    );

    // A CA of the same name but another key did not sign it either.
    let (twin_pem, _) = ca("mco-system_machine-config-server-ca@1577836800", None);
    objects.bundle = Some(bundle(&[&twin_pem], false));
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert_eq!(found.len(), 1, "{}", text(&found));
    assert!(
        found[0]
            .fixes
            .iter()
            .any(|x| x.command == "kubectl -n mco-system edit configmap machine-config-server-ca"),
        "{:#?}",
        found[0].fixes
    );

    // Signed by an intermediate CA the server sends along, which a CA of the bundle signed.
    let (root_pem, root) = ca("root", None);
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(DnType::CommonName, "intermediate");
    let key = KeyPair::generate().unwrap();
    let mid_pem = p.signed_by(&key, &root).unwrap().pem();
    let mid = Issuer::new(p, key);
    let chain = serving(&mid, &[HOST], (2035, 1, 1)) + &mid_pem;
    objects.serving = Some(tls_secret("mco-server-tls", &chain, Some("target")));
    objects.bundle = Some(bundle(&[&root_pem], true));
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert!(found.is_empty(), "{}", text(&found));
}

#[test]
fn without_a_serving_secret_nothing_is_said() {
    let mut objects = managed(&["elsewhere.example"], (2029, 1, 1));
    let (old_ca, _) = ca("old", Some((2029, 1, 1)));
    objects.ca = Some(tls_secret(
        "machine-config-server-ca",
        &old_ca,
        Some("signer"),
    ));
    objects.serving = None;
    assert!(check(&objects, "https://api-int.cluster.example:6443").is_empty());
    // Nor without a ControllerConfig, or one without apiServerInternalURI, about the host.
    let objects = managed(&["elsewhere.example"], (2035, 1, 1));
    assert!(doctor::server_certificates(&objects, None, now()).is_empty());
    let bare: ControllerConfig = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "ControllerConfig",
        "metadata": {"name": "machine-config-controller"},
        "spec": {},
    }))
    .unwrap();
    assert!(doctor::server_certificates(&objects, Some(&bare), now()).is_empty());
}

#[test]
fn a_serving_secret_without_a_certificate_is_an_error() {
    let mut objects = managed(&[HOST], (2035, 1, 1));
    objects.serving = Some(tls_secret("mco-server-tls", "", None));
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert_eq!(found.len(), 1, "{}", text(&found));
    assert_eq!(
        found[0].title,
        "machine config server certificate unreadable"
    );
    assert!(
        found[0].cause.contains("data.tls.crt holds no certificate"),
        "{}",
        found[0].cause
    );
    // mco's own: the controller does not notice, and makes it again once deleted.
    objects.serving = Some(tls_secret("mco-server-tls", "garbage", Some("target")));
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert_eq!(found.len(), 1, "{}", text(&found));
    assert!(
        found[0].cause.contains("does not notice"),
        "{}",
        found[0].cause
    );
    assert_eq!(
        found[0].fixes[0].command,
        "kubectl -n mco-system delete secret mco-server-tls"
    );
}

/// The serving Secret read and absent, where the server is installed (its bundle, or its
/// DaemonSet, is there): named, with the controller's side and the administrator's.
#[test]
fn an_absent_serving_secret_is_named_where_the_server_is_installed() {
    let mut objects = managed(&[HOST], (2035, 1, 1));
    objects.serving = None;
    objects.serving_missing = true;
    objects.serving_name = "machine-config-server-tls".into();
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert_eq!(found.len(), 1, "{}", text(&found));
    let f = &found[0];
    assert_eq!(f.subject, "secret machine-config-server-tls -n mco-system");
    assert_eq!(f.title, "machine config server certificate missing");
    assert_eq!(
        f.cause,
        "Secret mco-system/machine-config-server-tls does not exist, but the machine config \
         server is installed (ConfigMap mco-system/machine-config-server-ca): it has no \
         certificate to serve (a server pod that starts waits for it: secret \
         \"machine-config-server-tls\" not found), so new machines cannot fetch their config and \
         cannot join. A controller running with --server-certs-namespace=mco-system makes it at \
         its next check."
    );
    let commands: Vec<&str> = f.fixes.iter().map(|x| x.command.as_str()).collect();
    assert!(
        commands[0].contains("get deployment mco-controller"),
        "{commands:?}"
    );
    assert_eq!(
        commands.last().copied(),
        Some(
            "kubectl -n mco-system create secret tls machine-config-server-tls \
             --cert=mcs.crt --key=mcs.key"
        )
    );

    // The DaemonSet alone shows it too.
    objects.bundle = None;
    objects.server_daemonset = Some("mco-server".into());
    let found = check(&objects, "https://api-int.cluster.example:6443");
    assert_eq!(found.len(), 1, "{}", text(&found));
    assert!(
        found[0]
            .cause
            .contains("installed (DaemonSet mco-system/mco-server)"),
        "{}",
        found[0].cause
    );

    // Nothing of the server: nothing to say. Nor where the Secret could not be read.
    objects.server_daemonset = None;
    assert!(check(&objects, "https://api-int.cluster.example:6443").is_empty());
    let mut unreadable = managed(&[HOST], (2035, 1, 1));
    unreadable.serving = None;
    assert!(check(&unreadable, "https://api-int.cluster.example:6443").is_empty());
}
