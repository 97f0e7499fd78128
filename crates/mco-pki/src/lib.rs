//! mco's one reader of X.509 certificates: the `CERTIFICATE` blocks of a PEM text ([`read`]),
//! the facts mco uses of each ([`Certificate`]), and whether a CA issued a certificate
//! ([`issued_by`], which verifies the signature).
//!
//! How forgiving a reading is, is the caller's explicit choice ([`Leniency`]), because the texts
//! mco reads come with different promises: a ControllerConfig bundle is refused at its first bad
//! block, library-go's readers skip blocks of other types, and a TLS client takes a bundle as Go's
//! `AppendCertsFromPEM` does.
//!
//! Pure: no I/O, no async runtime.

mod name;

use std::net::IpAddr;

use jiff::Timestamp;
use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::pem::Pem;
use x509_parser::prelude::FromDer;

use name::go_name;

/// How a reading treats a block that is not a certificate that parses. Every reading stops at
/// text that is not PEM (a block without its end, bad base64), as Go's `pem.Decode` does; text
/// around the blocks is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leniency {
    /// Every block is a `CERTIFICATE` that parses; the first that is not stops the reading with
    /// an error.
    Strict,
    /// Blocks of other types (a key beside the certificates) are skipped; every `CERTIFICATE`
    /// block must parse, as library-go's `CertsFromPEM` reads one.
    SkipOtherBlocks,
    /// As Go's `x509.CertPool.AppendCertsFromPEM`: blocks of other types and certificates that
    /// do not parse are skipped. The first one skipped is reported in [`Read::error`].
    Go,
}

/// Why a block was not read. `object` is what the caller named the text (a field, an object);
/// `block` counts the text's PEM blocks from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{object}: block {block} is not PEM: {reason}")]
    NotPem {
        object: String,
        block: usize,
        reason: String,
    },
    #[error("{object}: block {block} is a {label}, not a CERTIFICATE")]
    NotCertificate {
        object: String,
        block: usize,
        label: String,
    },
    #[error("{object}: malformed certificate {block}: {reason}")]
    Malformed {
        object: String,
        block: usize,
        reason: String,
    },
    #[error("{object}: more than {max} certificates")]
    TooMany { object: String, max: usize },
}

/// What a reading found: the certificates, in order, and the error that stopped it or (with
/// [`Leniency::Go`]) the first block it skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Read {
    pub certificates: Vec<Certificate>,
    pub error: Option<Error>,
}

impl Read {
    /// The certificates, or the error (dropping the certificates read before it).
    pub fn into_result(self) -> Result<Vec<Certificate>, Error> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.certificates),
        }
    }
}

/// The certificates of a PEM text, at most `max`: one more is [`Error::TooMany`], which stops
/// every reading. Nothing else is judged here: an expired certificate is read.
pub fn read(pem: &[u8], object: &str, leniency: Leniency, max: usize) -> Read {
    let mut out = Read::default();
    let object = || object.to_owned();
    for (i, block) in Pem::iter_from_buffer(pem).enumerate() {
        let block_no = i + 1;
        let block = match block {
            Ok(b) => b,
            Err(e) => {
                out.error.get_or_insert(Error::NotPem {
                    object: object(),
                    block: block_no,
                    reason: e.to_string(),
                });
                break;
            }
        };
        if block.label != "CERTIFICATE" {
            if leniency == Leniency::Strict {
                out.error = Some(Error::NotCertificate {
                    object: object(),
                    block: block_no,
                    label: block.label,
                });
                break;
            }
            continue;
        }
        let cert = match Certificate::from_der(block.contents) {
            Ok(c) => c,
            Err(reason) => {
                let e = Error::Malformed {
                    object: object(),
                    block: block_no,
                    reason,
                };
                if leniency == Leniency::Go {
                    out.error.get_or_insert(e);
                    continue;
                }
                out.error = Some(e);
                break;
            }
        };
        if out.certificates.len() == max {
            out.error = Some(Error::TooMany {
                object: object(),
                max,
            });
            break;
        }
        out.certificates.push(cert);
    }
    out
}

/// A name of a certificate (its subject or issuer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    /// The DER of the name, as chains compare names.
    pub raw: Vec<u8>,
    /// The first common name, where there is one that is a string.
    pub common_name: Option<String>,
    /// As Go's `pkix.Name.String()` prints it: `CN=x,O=y`.
    pub go: String,
    /// The attributes in the certificate's order, as x509-parser prints them: `O=y, CN=x`.
    pub text: String,
    /// Every attribute in the certificate's order: its dotted OID and its value where that is a
    /// string (Numeric, Printable, UTF8 or IA5), as Go's `pkix.Name.Names` holds them. A name
    /// may carry one attribute several times (two `O`s).
    pub attributes: Vec<(String, Option<String>)>,
}

impl Name {
    fn of(n: &x509_parser::x509::X509Name<'_>) -> Name {
        Name {
            raw: n.as_raw().to_vec(),
            common_name: n
                .iter_common_name()
                .next()
                .and_then(|a| a.as_str().ok())
                .map(str::to_owned),
            go: go_name(n),
            text: n.to_string(),
            attributes: n
                .iter_attributes()
                .map(|a| {
                    let value = a.as_str().ok().map(str::to_owned);
                    (a.attr_type().to_id_string(), value)
                })
                .collect(),
        }
    }

    /// The string values of the attribute `oid` (dotted), in order.
    pub fn values<'a>(&'a self, oid: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.attributes
            .iter()
            .filter(move |(o, _)| o == oid)
            .filter_map(|(_, v)| v.as_deref())
    }
}

/// What mco uses of one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    /// The certificate's DER, as its PEM block holds it.
    pub der: Vec<u8>,
    pub subject: Name,
    pub issuer: Name,
    /// The validity, in whole seconds (the Unix epoch where a time is out of jiff's range).
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    /// The serial number's bytes, big-endian, as encoded.
    pub serial: Vec<u8>,
    /// `basicConstraints` says `CA:TRUE`.
    pub is_ca: bool,
    pub subject_key_id: Option<Vec<u8>>,
    pub authority_key_id: Option<Vec<u8>>,
    /// The subject alternative names, in order: DNS names and IP addresses.
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
}

impl Certificate {
    /// One certificate's DER (a TLS peer's, say), named `object` in the error.
    pub fn parse(der: Vec<u8>, object: &str) -> Result<Certificate, Error> {
        Certificate::from_der(der).map_err(|reason| Error::Malformed {
            object: object.to_owned(),
            block: 1,
            reason,
        })
    }

    fn from_der(der: Vec<u8>) -> Result<Certificate, String> {
        let (_, c) = X509Certificate::from_der(&der).map_err(|e| e.to_string())?;
        let ts = |s: i64| Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH);
        let (mut ski, mut aki) = (None, None);
        for ext in c.iter_extensions() {
            match ext.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => {
                    ski.get_or_insert_with(|| k.0.to_vec());
                }
                ParsedExtension::AuthorityKeyIdentifier(a) => {
                    if let Some(k) = &a.key_identifier {
                        aki.get_or_insert_with(|| k.0.to_vec());
                    }
                }
                _ => {}
            }
        }
        let (mut dns_names, mut ip_addresses) = (vec![], vec![]);
        if let Ok(Some(san)) = c.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                    GeneralName::IPAddress(b) => {
                        if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                            ip_addresses.push(v4.into());
                        } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                            ip_addresses.push(v6.into());
                        }
                    }
                    _ => {}
                }
            }
        }
        let validity = c.validity();
        let (not_before, not_after) = (
            ts(validity.not_before.timestamp()),
            ts(validity.not_after.timestamp()),
        );
        let (subject, issuer) = (Name::of(c.subject()), Name::of(c.issuer()));
        let (serial, is_ca) = (c.raw_serial().to_vec(), c.is_ca());
        Ok(Certificate {
            der,
            subject,
            issuer,
            not_before,
            not_after,
            serial,
            is_ca,
            subject_key_id: ski,
            authority_key_id: aki,
            dns_names,
            ip_addresses,
        })
    }
}

/// What `issuer`'s public key says of `child`'s signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    Verified,
    /// Signed with an algorithm ring cannot check.
    Unsupported,
    /// Not made by `issuer`'s key, or either certificate does not parse.
    Invalid,
}

/// Whether `issuer`'s key made `child`'s signature (names are not compared).
pub fn signature(child: &Certificate, issuer: &Certificate) -> Signature {
    let (Ok((_, c)), Ok((_, p))) = (
        X509Certificate::from_der(&child.der),
        X509Certificate::from_der(&issuer.der),
    ) else {
        return Signature::Invalid;
    };
    match c.verify_signature(Some(p.public_key())) {
        Ok(()) => Signature::Verified,
        Err(X509Error::SignatureUnsupportedAlgorithm) => Signature::Unsupported,
        Err(_) => Signature::Invalid,
    }
}

/// Whether `ca` issued `child`, by X.509's chain rules: `child`'s issuer is `ca`'s subject byte
/// for byte, `ca` is a CA, and `ca`'s public key verifies `child`'s signature. A CA of the same
/// name (and the same key identifier) but another key did not issue it.
pub fn issued_by(child: &Certificate, ca: &Certificate) -> bool {
    child.issuer.raw == ca.subject.raw && ca.is_ca && signature(child, ca) == Signature::Verified
}

#[cfg(test)]
mod tests;
