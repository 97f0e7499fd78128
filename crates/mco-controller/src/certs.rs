//! The certificates of a ControllerConfig's CA bundles, as upstream's template controller lists
//! them in `status.controllerCertificates`: pure parsing, no I/O.
//!
//! Bundles are read in upstream's order: `KubeAPIServerServingCAData`, `CloudProviderCAData`,
//! `RootCAData`, `AdditionalTrustBundle`, then each registry bundle (named by its `file`), each
//! strictly ([`mco_pki::Leniency::Strict`]). Each
//! certificate's subject and issuer are printed as Go's `pkix.Name.String()` prints them, so
//! `mco` and upstream report the same text. Where upstream only logs a malformed bundle, mco
//! also returns the error, naming the field, so the controller can put it in a condition; the
//! certificates before the bad block are still listed, as upstream lists them.

use base64::Engine as _;
use mco_api::{ControllerCertificate, ControllerConfigSpec};
use mco_pki::Leniency;

pub use mco_api::controllerconfig::MAX_BUNDLE_BYTES;
/// Certificates listed in status, over every bundle: each entry is a few hundred bytes of the
/// object's status, which must fit next to the spec.
pub const MAX_CERTIFICATES: usize = 1000;

/// The `bundleFile` of the kube-apiserver serving CA; the pool's `certExpirys` list only these.
pub const KUBE_APISERVER_SERVING_CA: &str = "KubeAPIServerServingCAData";

/// Why a bundle could not be read; `field` is the spec path, as an administrator would write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("{field}: not base64: {reason}")]
    NotBase64 { field: String, reason: String },
    #[error("{field}: {len} bytes of PEM, more than the limit of {MAX_BUNDLE_BYTES}")]
    TooLarge { field: String, len: usize },
    #[error(
        "{field}: more than {MAX_CERTIFICATES} certificates in the ControllerConfig's bundles; the rest are not listed"
    )]
    TooMany { field: String },
    #[error("{field}: block {block} is not PEM: {reason}")]
    NotPem {
        field: String,
        block: usize,
        reason: String,
    },
    #[error("{field}: block {block} is a {label}, not a CERTIFICATE")]
    NotCertificate {
        field: String,
        block: usize,
        label: String,
    },
    #[error("{field}: no PEM certificate in the bundle")]
    NoCertificates { field: String },
    #[error("{field}: malformed certificate {block}: {reason}")]
    Malformed {
        field: String,
        block: usize,
        reason: String,
    },
}

/// One CA bundle of the spec: its `bundleFile`, its spec path and its base64 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle<'a> {
    pub name: String,
    pub field: String,
    pub data: &'a str,
}

/// The spec's bundles in upstream's order; absent and empty ones are left out.
pub fn bundles(spec: &ControllerConfigSpec) -> Vec<Bundle<'_>> {
    let fixed = [
        (
            KUBE_APISERVER_SERVING_CA,
            "spec.kubeAPIServerServingCAData",
            &spec.kube_api_server_serving_ca_data,
        ),
        (
            "CloudProviderCAData",
            "spec.cloudProviderCAData",
            &spec.cloud_provider_ca_data,
        ),
        ("RootCAData", "spec.rootCAData", &spec.root_ca_data),
        (
            "AdditionalTrustBundle",
            "spec.additionalTrustBundle",
            &spec.additional_trust_bundle,
        ),
    ];
    let mut out: Vec<Bundle<'_>> = fixed
        .into_iter()
        .filter_map(|(name, field, data)| {
            let data = data.as_deref().filter(|d| !d.is_empty())?;
            Some(Bundle {
                name: name.to_owned(),
                field: field.to_owned(),
                data,
            })
        })
        .collect();
    for (list, field) in [
        (&spec.image_registry_bundle_data, "imageRegistryBundleData"),
        (
            &spec.image_registry_bundle_user_data,
            "imageRegistryBundleUserData",
        ),
    ] {
        for (i, b) in list.iter().flatten().enumerate() {
            if b.data.is_empty() {
                continue;
            }
            out.push(Bundle {
                name: b.file.clone(),
                field: format!("spec.{field}[{i}] ({})", b.file),
                data: &b.data,
            });
        }
    }
    out
}

/// What the spec's bundles hold: the certificates to list, and each bundle that could not be
/// read in full.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub certificates: Vec<ControllerCertificate>,
    pub errors: Vec<CertError>,
}

/// Every certificate of the spec's bundles, at most [`MAX_CERTIFICATES`].
pub fn controller_certificates(spec: &ControllerConfigSpec) -> Parsed {
    let mut parsed = Parsed::default();
    for b in bundles(spec) {
        let pem = match base64::engine::general_purpose::STANDARD.decode(b.data) {
            Ok(p) => p,
            Err(e) => {
                parsed.errors.push(CertError::NotBase64 {
                    field: b.field,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let room = MAX_CERTIFICATES - parsed.certificates.len();
        let (certs, err) = parse_bundle(&b.name, &b.field, &pem, room);
        parsed.certificates.extend(certs);
        parsed.errors.extend(err);
    }
    parsed
}

/// The certificates of one PEM bundle, at most `room` of them, and the error that stopped the
/// reading, if any. PEM blocks are read as Go's `pem.Decode` reads them: text around the blocks
/// is ignored.
pub fn parse_bundle(
    name: &str,
    field: &str,
    pem: &[u8],
    room: usize,
) -> (Vec<ControllerCertificate>, Option<CertError>) {
    let field = field.to_owned();
    if pem.len() > MAX_BUNDLE_BYTES {
        let len = pem.len();
        return (vec![], Some(CertError::TooLarge { field, len }));
    }
    let read = mco_pki::read(pem, &field, Leniency::Strict, room);
    let certs: Vec<ControllerCertificate> = read
        .certificates
        .iter()
        .map(|c| ControllerCertificate {
            subject: c.subject.go.clone(),
            signer: c.issuer.go.clone(),
            // Whole seconds, as `metav1.Time` prints them.
            not_before: Some(c.not_before.to_string()),
            not_after: Some(c.not_after.to_string()),
            bundle_file: name.to_owned(),
        })
        .collect();
    let err = read.error.map(|e| match e {
        mco_pki::Error::NotPem {
            object,
            block,
            reason,
        } => CertError::NotPem {
            field: object,
            block,
            reason,
        },
        mco_pki::Error::NotCertificate {
            object,
            block,
            label,
        } => CertError::NotCertificate {
            field: object,
            block,
            label,
        },
        mco_pki::Error::Malformed {
            object,
            block,
            reason,
        } => CertError::Malformed {
            field: object,
            block,
            reason,
        },
        mco_pki::Error::TooMany { object, .. } => CertError::TooMany { field: object },
    });
    if err.is_none() && certs.is_empty() && !pem.iter().all(u8::is_ascii_whitespace) {
        return (certs, Some(CertError::NoCertificates { field }));
    }
    (certs, err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_api::ImageRegistryBundle;
    use pretty_assertions::assert_eq;
    use rcgen::{CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};

    /// A self-signed CA valid from `from` to `to` (years), PEM.
    fn ca(cn: &str, ou: Option<&str>, from: i32, to: i32) -> String {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        if let Some(ou) = ou {
            dn.push(DnType::OrganizationalUnitName, ou);
        }
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(to, 1, 1);
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn every_bundle_is_listed_in_upstreams_order_with_gos_names_and_times() {
        let kube = ca("kube-apiserver-lb-signer", Some("openshift"), 2026, 2036);
        let root = ca("root-ca", Some("openshift"), 2025, 2035);
        let reg = ca("registry, inc.", None, 2026, 2027);
        let spec = ControllerConfigSpec {
            // Two certificates in one bundle, as during a rotation.
            kube_api_server_serving_ca_data: Some(b64(&format!("{kube}{root}"))),
            root_ca_data: Some(b64(&root)),
            image_registry_bundle_user_data: Some(vec![ImageRegistryBundle {
                file: "registry.example.com..5000".into(),
                data: b64(&reg),
            }]),
            ..Default::default()
        };
        let parsed = controller_certificates(&spec);
        assert_eq!(parsed.errors, vec![]);
        let got: Vec<(&str, &str, &str)> = parsed
            .certificates
            .iter()
            .map(|c| {
                (
                    c.bundle_file.as_str(),
                    c.subject.as_str(),
                    c.not_after.as_deref().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "KubeAPIServerServingCAData",
                    "CN=kube-apiserver-lb-signer,OU=openshift",
                    "2036-01-01T00:00:00Z"
                ),
                (
                    "KubeAPIServerServingCAData",
                    "CN=root-ca,OU=openshift",
                    "2035-01-01T00:00:00Z"
                ),
                (
                    "RootCAData",
                    "CN=root-ca,OU=openshift",
                    "2035-01-01T00:00:00Z"
                ),
                (
                    "registry.example.com..5000",
                    "CN=registry\\, inc.",
                    "2027-01-01T00:00:00Z"
                ),
            ]
        );
        let first = &parsed.certificates[0];
        assert_eq!(first.signer, first.subject, "self-signed");
        assert_eq!(first.not_before.as_deref(), Some("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn a_malformed_bundle_is_an_error_naming_its_field_and_keeps_what_came_before() {
        let good = ca("good", None, 2026, 2036);
        // A certificate block whose DER is garbage.
        let bad =
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        let spec = ControllerConfigSpec {
            kube_api_server_serving_ca_data: Some(b64(&format!("{good}{bad}"))),
            additional_trust_bundle: Some("%%% not base64".into()),
            image_registry_bundle_data: Some(vec![ImageRegistryBundle {
                file: "quay.io".into(),
                data: b64("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
            }]),
            ..Default::default()
        };
        let parsed = controller_certificates(&spec);
        assert_eq!(parsed.certificates.len(), 1);
        assert_eq!(parsed.certificates[0].subject, "CN=good");
        let messages: Vec<String> = parsed.errors.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(
            messages[0].starts_with("spec.kubeAPIServerServingCAData: malformed certificate 2:"),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].starts_with("spec.additionalTrustBundle: not base64"),
            "{}",
            messages[1]
        );
        assert_eq!(
            messages[2],
            "spec.imageRegistryBundleData[0] (quay.io): block 1 is a PRIVATE KEY, not a CERTIFICATE"
        );
    }

    #[test]
    fn text_without_any_block_is_refused() {
        let (certs, err) = parse_bundle("RootCAData", "spec.rootCAData", b"not PEM", 10);
        assert!(certs.is_empty());
        assert_eq!(
            err.unwrap().to_string(),
            "spec.rootCAData: no PEM certificate in the bundle"
        );
    }

    #[test]
    fn a_block_without_its_end_is_not_pem() {
        let (certs, err) = parse_bundle(
            "RootCAData",
            "spec.rootCAData",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n",
            10,
        );
        assert!(certs.is_empty());
        assert!(
            matches!(err, Some(CertError::NotPem { block: 1, .. })),
            "{err:?}"
        );
    }

    #[test]
    fn text_around_blocks_and_empty_bundles_are_ignored() {
        let c = ca("x", None, 2026, 2036);
        let (certs, err) = parse_bundle("b", "f", format!("# a comment\n{c}\n\n").as_bytes(), 10);
        assert_eq!((certs.len(), err), (1, None));
        let spec = ControllerConfigSpec {
            root_ca_data: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(controller_certificates(&spec), Parsed::default());
    }

    #[test]
    fn a_bundle_at_the_byte_limit_is_read_and_one_byte_more_is_refused() {
        let c = ca("x", None, 2026, 2036);
        let mut at_limit = c.clone().into_bytes();
        at_limit.resize(MAX_BUNDLE_BYTES, b'\n');
        let (certs, err) = parse_bundle("b", "spec.rootCAData", &at_limit, MAX_CERTIFICATES);
        assert_eq!((certs.len(), err), (1, None));
        at_limit.push(b'\n');
        let (certs, err) = parse_bundle("b", "spec.rootCAData", &at_limit, MAX_CERTIFICATES);
        assert!(certs.is_empty());
        assert_eq!(
            err.unwrap().to_string(),
            format!(
                "spec.rootCAData: {} bytes of PEM, more than the limit of {MAX_BUNDLE_BYTES}",
                MAX_BUNDLE_BYTES + 1
            )
        );
    }

    #[test]
    fn certificates_are_listed_up_to_the_limit_over_every_bundle() {
        let c = ca("x", None, 2026, 2036);
        let half = c.repeat(MAX_CERTIFICATES / 2);
        let at_limit = ControllerConfigSpec {
            root_ca_data: Some(b64(&half)),
            additional_trust_bundle: Some(b64(&half)),
            ..Default::default()
        };
        let parsed = controller_certificates(&at_limit);
        assert_eq!(parsed.certificates.len(), MAX_CERTIFICATES);
        assert_eq!(parsed.errors, vec![]);

        let over = ControllerConfigSpec {
            image_registry_bundle_data: Some(vec![ImageRegistryBundle {
                file: "quay.io".into(),
                data: b64(&c),
            }]),
            ..at_limit
        };
        let parsed = controller_certificates(&over);
        assert_eq!(parsed.certificates.len(), MAX_CERTIFICATES);
        assert_eq!(
            parsed.errors,
            vec![CertError::TooMany {
                field: "spec.imageRegistryBundleData[0] (quay.io)".into()
            }]
        );
    }

    #[test]
    fn names_print_as_go_prints_them() {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        // Given in the "wrong" order: Go regroups by attribute, then reverses.
        dn.push(DnType::CommonName, " lead#");
        dn.push(DnType::OrganizationName, "Red Hat");
        dn.push(DnType::CountryName, "US");
        params.distinguished_name = dn;
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        let (certs, _) = parse_bundle("b", "f", pem.as_bytes(), 1);
        assert_eq!(certs[0].subject, "CN=\\ lead#,O=Red Hat,C=US");
    }
}
