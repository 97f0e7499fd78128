//! Client certificates, as kube-apiserver's x509 authenticator takes them (`--client-ca-file`):
//! the TLS handshake asks for a certificate without requiring one and accepts any chain whose
//! key signed the handshake (Go's `RequestClientCert`); each request then verifies the chain
//! against the client CA (the data directory's `ca.crt`) for client authentication, now. A
//! chain that verifies authenticates as the leaf's Subject: user = its CommonName, groups = its
//! Organization values (and `system:authenticated`), uid = its
//! `1.3.6.1.4.1.57683.2` attribute if any, and the extra
//! `authentication.kubernetes.io/credential-id` = `X509SHA256=<hex SHA-256 of its DER>`.
//!
//! The chain a client may send is bounded by rustls: one handshake message, at most 64 KiB.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::auth::Identity;
use crate::error::Error;
use crate::impersonation::{ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED};
use crate::rbac::User;

/// kube's `user.CredentialIDKey`.
pub const CREDENTIAL_ID_EXTRA: &str = "authentication.kubernetes.io/credential-id";
const COMMON_NAME: &str = "2.5.4.3";
const ORGANIZATION: &str = "2.5.4.10";
/// kube's `asn1util.X509UID()`: a user's uid in a certificate's subject (read since 1.33).
const UID: &str = "1.3.6.1.4.1.57683.2";

/// The certificates a client sent in its TLS handshake, leaf first: a request extension set by
/// the listener (never from anything a client sends in HTTP), judged per request.
#[derive(Debug, Clone)]
pub struct PeerChain(pub Arc<[CertificateDer<'static>]>);

/// The client CA: verifies chains for client authentication.
#[derive(Debug, Clone)]
pub struct ClientCa {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl ClientCa {
    /// The CA of `ca_pem` (every certificate in it is trusted).
    pub fn new(ca_pem: &str) -> Result<ClientCa, Error> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let c = c.map_err(|e| Error::Data(format!("ca.crt: {e}")))?;
            roots.add(c)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| Error::Data(format!("ca.crt: {e}")))?;
        Ok(ClientCa { verifier })
    }

    /// What the TLS handshake uses: ask for a certificate, hinting this CA, and take any chain
    /// whose key signs the handshake; [`ClientCa::authenticate`] judges it per request.
    pub fn handshake_verifier(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::new(RequestClientCert(self.verifier.clone()))
    }

    /// kube's x509 authenticator: `Ok(None)` when the leaf has no CommonName (the next
    /// authenticator is asked), an error (401 unless another authenticator succeeds) when the
    /// chain does not verify now or the subject cannot be read.
    pub fn authenticate(&self, chain: &[CertificateDer<'_>]) -> Result<Option<Identity>, String> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Ok(None);
        };
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| format!("verifying certificate failed: {e}"))?;
        let cert = mco_pki::Certificate::parse(leaf.to_vec(), "client certificate")
            .map_err(|e| e.to_string())?;
        user_of(&cert.subject, &cert.der)
    }
}

/// The user a verified certificate with `subject` and DER `der` stands for, as kube's
/// `CommonNameUserConversion` and `AuthenticatedGroupAdder` make it. Go keeps the last
/// CommonName of a subject, every Organization in order, and only string values of either.
pub(crate) fn user_of(subject: &mco_pki::Name, der: &[u8]) -> Result<Option<Identity>, String> {
    let Some(name) = subject.values(COMMON_NAME).last().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let uids: Vec<&Option<String>> = subject
        .attributes
        .iter()
        .filter(|(oid, _)| oid == UID)
        .map(|(_, v)| v)
        .collect();
    let uid = match uids.as_slice() {
        [] => String::new(),
        [Some(u)] if !u.is_empty() => u.clone(),
        [Some(_)] => return Err("UID cannot be an empty string".into()),
        _ if uids.iter().any(|u| u.is_none()) => {
            return Err("unable to parse UID into a string".into());
        }
        _ => {
            let all: Vec<&str> = uids.iter().filter_map(|u| u.as_deref()).collect();
            return Err(format!(
                "expected 1 UID, but found multiple: [{}]",
                all.join(" ")
            ));
        }
    };
    let mut groups: Vec<String> = subject.values(ORGANIZATION).map(String::from).collect();
    if name != ANONYMOUS
        && !groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
    {
        groups.push(AUTHENTICATED.into());
    }
    let digest = Sha256::digest(der);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Some(Identity::User {
        user: User {
            name: name.to_string(),
            groups,
        },
        uid,
        extra: BTreeMap::from([(
            CREDENTIAL_ID_EXTRA.to_string(),
            vec![format!("X509SHA256={hex}")],
        )]),
    }))
}

/// Go's `tls.RequestClientCert`: asks for a certificate, requires none, and leaves judging the
/// chain to the request (so a refused certificate is kube's 401, not a failed handshake). The
/// handshake signature is still checked: the client holds the leaf's key.
#[derive(Debug)]
struct RequestClientCert(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(attrs: &[(&str, Option<&str>)]) -> mco_pki::Name {
        mco_pki::Name {
            raw: vec![],
            common_name: None,
            go: String::new(),
            text: String::new(),
            attributes: attrs
                .iter()
                .map(|(o, v)| (o.to_string(), v.map(String::from)))
                .collect(),
        }
    }

    fn user(id: Option<Identity>) -> (String, Vec<String>, String, BTreeMap<String, Vec<String>>) {
        match id {
            Some(Identity::User { user, uid, extra }) => (user.name, user.groups, uid, extra),
            other => panic!("not a user: {other:?}"),
        }
    }

    #[test]
    fn the_subject_maps_as_kube_maps_it() {
        let s = subject(&[
            (ORGANIZATION, Some("team-a")),
            (COMMON_NAME, Some("first")),
            (ORGANIZATION, Some("team-b")),
            (ORGANIZATION, None),
            (COMMON_NAME, Some("alice")),
        ]);
        let (name, groups, uid, extra) = user(user_of(&s, b"der").unwrap());
        // Go keeps the last CommonName, and every string Organization in order.
        assert_eq!(name, "alice");
        assert_eq!(groups, ["team-a", "team-b", AUTHENTICATED]);
        assert_eq!(uid, "");
        // The SHA-256 of the DER, `printf der | sha256sum`.
        assert_eq!(
            extra[CREDENTIAL_ID_EXTRA],
            ["X509SHA256=5050d80d22ecd471ea55df7034042c1e041341ff4066e7f6ff38e20b720df8ea"]
        );
        assert_eq!(extra.len(), 1);
    }

    #[test]
    fn system_authenticated_is_added_as_kube_adds_it() {
        let groups =
            |attrs: &[(&str, Option<&str>)]| user(user_of(&subject(attrs), b"").unwrap()).1;
        let masters = [
            (COMMON_NAME, Some("admin")),
            (ORGANIZATION, Some("system:masters")),
        ];
        assert_eq!(groups(&masters), ["system:masters", AUTHENTICATED]);
        let already = [
            (COMMON_NAME, Some("a")),
            (ORGANIZATION, Some(AUTHENTICATED)),
        ];
        assert_eq!(groups(&already), [AUTHENTICATED]);
        let unauth = [
            (COMMON_NAME, Some("a")),
            (ORGANIZATION, Some(UNAUTHENTICATED)),
        ];
        assert_eq!(groups(&unauth), [UNAUTHENTICATED]);
        assert!(groups(&[(COMMON_NAME, Some(ANONYMOUS))]).is_empty());
    }

    #[test]
    fn no_common_name_is_no_user() {
        assert_eq!(
            user_of(&subject(&[(ORGANIZATION, Some("g"))]), b""),
            Ok(None)
        );
        assert_eq!(user_of(&subject(&[(COMMON_NAME, Some(""))]), b""), Ok(None));
        // A CommonName that is not a string is not read.
        assert_eq!(user_of(&subject(&[(COMMON_NAME, None)]), b""), Ok(None));
    }

    #[test]
    fn one_string_uid_is_read_and_anything_else_refused() {
        let with = |uids: &[Option<&str>]| {
            let mut attrs = vec![(COMMON_NAME, Some("alice"))];
            attrs.extend(uids.iter().map(|u| (UID, *u)));
            user_of(&subject(&attrs), b"")
        };
        assert_eq!(user(with(&[Some("u-1")]).unwrap()).2, "u-1");
        assert_eq!(
            with(&[Some("")]).unwrap_err(),
            "UID cannot be an empty string"
        );
        assert_eq!(
            with(&[None]).unwrap_err(),
            "unable to parse UID into a string"
        );
        assert_eq!(
            with(&[Some("a"), Some("b")]).unwrap_err(),
            "expected 1 UID, but found multiple: [a b]"
        );
    }
}
