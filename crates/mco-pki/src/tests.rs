use super::*;
use pretty_assertions::assert_eq;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyIdMethod, KeyPair, SanType,
    SerialNumber,
};

/// A CA named `cn` with key identifier `ski`, valid from `from` to `to` (years): its certificate
/// and what signs with it.
fn ca(cn: &str, ski: &[u8], from: i32, to: i32) -> (rcgen::Certificate, Issuer<'static, KeyPair>) {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_identifier_method = KeyIdMethod::PreSpecified(ski.to_vec());
    p.not_before = rcgen::date_time_ymd(from, 1, 1);
    p.not_after = rcgen::date_time_ymd(to, 1, 1);
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    (cert, Issuer::new(p, key))
}

/// A serving certificate for `sans` issued by `issuer`, carrying its authority key identifier.
fn leaf(sans: Vec<SanType>, issuer: &Issuer<'_, KeyPair>) -> rcgen::Certificate {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, "server");
    p.subject_alt_names = sans;
    p.serial_number = Some(SerialNumber::from(vec![0x01, 0x02, 0x03]));
    p.use_authority_key_identifier_extension = true;
    p.signed_by(&KeyPair::generate().unwrap(), issuer).unwrap()
}

fn one(pem: &str) -> Certificate {
    let r = read(pem.as_bytes(), "t", Leniency::Strict, 10);
    assert_eq!(r.error, None);
    assert_eq!(r.certificates.len(), 1);
    r.certificates.into_iter().next().unwrap()
}

const GARBAGE: &str =
    "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";

fn subjects(r: &Read) -> Vec<&str> {
    r.certificates
        .iter()
        .map(|c| c.subject.common_name.as_deref().unwrap())
        .collect()
}

#[test]
fn each_leniency_reads_a_bundle_with_a_key_garbage_and_an_expired_ca_its_own_way() {
    let (good, _) = ca("good", b"g", 2026, 2036);
    let (expired, _) = ca("expired", b"e", 2000, 2001);
    let text = format!("# a comment\n{}{KEY}{GARBAGE}{}", good.pem(), expired.pem());
    let strict = read(text.as_bytes(), "spec.rootCAData", Leniency::Strict, 10);
    assert_eq!(subjects(&strict), vec!["good"]);
    assert_eq!(
        strict.error.unwrap().to_string(),
        "spec.rootCAData: block 2 is a PRIVATE KEY, not a CERTIFICATE"
    );

    let skip = read(text.as_bytes(), "cm", Leniency::SkipOtherBlocks, 10);
    assert_eq!(subjects(&skip), vec!["good"]);
    assert!(
        matches!(&skip.error, Some(Error::Malformed { object, block: 3, .. }) if object == "cm"),
        "{:?}",
        skip.error
    );

    // Go's reading goes on past both, to the expired CA, and says what it skipped first.
    let go = read(text.as_bytes(), "bundle", Leniency::Go, 10);
    assert_eq!(subjects(&go), vec!["good", "expired"]);
    assert!(
        matches!(go.error, Some(Error::Malformed { block: 3, .. })),
        "{:?}",
        go.error
    );

    // Without the bad blocks, every reading reads both: expiry is not the reader's to judge.
    let clean = format!("{}{}", good.pem(), expired.pem());
    for l in [Leniency::Strict, Leniency::SkipOtherBlocks, Leniency::Go] {
        let r = read(clean.as_bytes(), "x", l, 10);
        assert_eq!((subjects(&r), &r.error), (vec!["good", "expired"], &None));
    }
    let expired = one(&expired.pem());
    assert_eq!(expired.not_after, "2001-01-01T00:00:00Z".parse().unwrap());
    assert_eq!(expired.not_before, "2000-01-01T00:00:00Z".parse().unwrap());
}

#[test]
fn text_that_is_not_pem_stops_every_reading_and_text_without_blocks_is_empty() {
    let (good, _) = ca("good", b"g", 2026, 2036);
    let text = format!("{}-----BEGIN CERTIFICATE-----\nAAAA\n", good.pem());
    for l in [Leniency::Strict, Leniency::SkipOtherBlocks, Leniency::Go] {
        let r = read(text.as_bytes(), "o", l, 10);
        assert_eq!(subjects(&r), vec!["good"]);
        assert!(
            matches!(r.error, Some(Error::NotPem { block: 2, .. })),
            "{l:?}: {:?}",
            r.error
        );
        assert_eq!(read(b"not PEM", "o", l, 10), Read::default());
        assert_eq!(read(b"", "o", l, 10), Read::default());
    }
}

#[test]
fn a_reading_stops_after_its_most_certificates() {
    let (good, _) = ca("good", b"g", 2026, 2036);
    let two = good.pem().repeat(2);
    assert_eq!(
        read(two.as_bytes(), "o", Leniency::Go, 2)
            .certificates
            .len(),
        2
    );
    let r = read(two.as_bytes(), "o", Leniency::Go, 1);
    assert_eq!(r.certificates.len(), 1);
    assert_eq!(r.error.unwrap().to_string(), "o: more than 1 certificates");
    assert!(
        read(two.as_bytes(), "o", Leniency::Strict, 1)
            .into_result()
            .is_err()
    );
}

#[test]
fn the_facts_of_a_serving_certificate_are_read() {
    let (root, issuer) = ca("root-ca", b"root-ski", 2026, 2036);
    let served = leaf(
        vec![
            SanType::DnsName("api-int.c.example.com".try_into().unwrap()),
            SanType::IpAddress("192.0.2.10".parse().unwrap()),
            SanType::IpAddress("2001:db8::1".parse().unwrap()),
        ],
        &issuer,
    );
    let c = one(&served.pem());
    assert_eq!(c.der, served.der().to_vec());
    assert_eq!(c.dns_names, vec!["api-int.c.example.com"]);
    assert_eq!(
        c.ip_addresses,
        vec![
            "192.0.2.10".parse::<IpAddr>().unwrap(),
            "2001:db8::1".parse().unwrap()
        ]
    );
    assert_eq!(c.serial, vec![0x01, 0x02, 0x03]);
    assert_eq!(c.subject.common_name.as_deref(), Some("server"));
    assert_eq!(c.subject.go, "CN=server");
    assert_eq!(c.subject.text, "CN=server");
    assert_eq!(c.issuer.go, "CN=root-ca");
    assert!(!c.is_ca);
    assert_eq!(c.authority_key_id.as_deref(), Some(&b"root-ski"[..]));
    let root = one(&root.pem());
    assert!(root.is_ca);
    assert_eq!(root.subject_key_id.as_deref(), Some(&b"root-ski"[..]));
    assert_eq!(root.issuer.raw, root.subject.raw);
    assert_eq!(c.issuer.raw, root.subject.raw);
}

#[test]
fn names_print_as_go_and_as_x509_parser_print_them() {
    let mut p = CertificateParams::default();
    // Given in the "wrong" order: Go regroups by attribute, then reverses.
    p.distinguished_name.push(DnType::CommonName, " lead#");
    p.distinguished_name
        .push(DnType::OrganizationName, "Red Hat");
    p.distinguished_name.push(DnType::CountryName, "US");
    let c = one(&p.self_signed(&KeyPair::generate().unwrap()).unwrap().pem());
    assert_eq!(c.subject.go, "CN=\\ lead#,O=Red Hat,C=US");
    assert_eq!(c.subject.text, "CN= lead#, O=Red Hat, C=US");
    assert_eq!(
        c.subject.attributes,
        [
            ("2.5.4.3".to_string(), Some(" lead#".to_string())),
            ("2.5.4.10".to_string(), Some("Red Hat".to_string())),
            ("2.5.4.6".to_string(), Some("US".to_string())),
        ]
    );
    assert_eq!(
        c.subject.values("2.5.4.10").collect::<Vec<_>>(),
        ["Red Hat"]
    );
    assert_eq!(c.subject.values("2.5.4.11").count(), 0);
}

#[test]
fn one_der_certificate_parses_or_names_what_it_is() {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, "alice");
    let cert = p.self_signed(&KeyPair::generate().unwrap()).unwrap();
    let c = Certificate::parse(cert.der().to_vec(), "peer").unwrap();
    assert_eq!(c.subject.common_name.as_deref(), Some("alice"));
    assert_eq!(c.der, cert.der().to_vec());
    let e = Certificate::parse(b"not a certificate".to_vec(), "peer").unwrap_err();
    assert!(
        matches!(&e, Error::Malformed { object, block: 1, .. } if object == "peer"),
        "{e}"
    );
}

#[test]
fn a_ca_issued_what_its_key_signed_and_nothing_else() {
    let (root, issuer) = ca("root-ca", b"same-ski", 2026, 2036);
    let served = one(&leaf(vec![], &issuer).pem());
    let root = one(&root.pem());
    assert!(issued_by(&served, &root));

    // A CA of the same name and the same key identifier, but another key: the names and the
    // identifiers agree, the signature does not.
    let (forged, _) = ca("root-ca", b"same-ski", 2026, 2036);
    let forged = one(&forged.pem());
    assert_eq!(
        (&forged.subject.raw, &forged.subject_key_id),
        (&root.subject.raw, &root.subject_key_id)
    );
    assert_eq!(signature(&served, &forged), Signature::Invalid);
    assert!(!issued_by(&served, &forged));

    // Another CA's name with the right key: the names decide.
    let (other, _) = ca("other-ca", b"same-ski", 2026, 2036);
    assert!(!issued_by(&served, &one(&other.pem())));

    // A certificate that is not a CA signed it: its key verifies, but it may not issue.
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, "not-a-ca");
    p.is_ca = IsCa::ExplicitNoCa;
    let key = KeyPair::generate().unwrap();
    let not_ca = one(&p.clone().self_signed(&key).unwrap().pem());
    let by_not_ca = one(&leaf(vec![], &Issuer::new(p, key)).pem());
    assert_eq!(signature(&by_not_ca, &not_ca), Signature::Verified);
    assert_eq!(by_not_ca.issuer.raw, not_ca.subject.raw);
    assert!(!not_ca.is_ca);
    assert!(!issued_by(&by_not_ca, &not_ca));
}
