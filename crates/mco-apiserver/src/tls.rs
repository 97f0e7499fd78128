//! Certificates and kubeconfig files in the data directory, created once and reused.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::Error;

pub struct Certs {
    pub ca_pem: String,
    pub server_pem: String,
    pub server_key_pem: String,
}

fn read(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path.display(), e)),
    }
}

pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).map_err(|e| Error::io(tmp.display(), e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(tmp.display(), e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path.display(), e))
}

fn sans_for(listen: &SocketAddr) -> Vec<String> {
    let mut sans = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let ip = listen.ip();
    if !ip.is_unspecified() && !sans.contains(&ip.to_string()) {
        sans.push(ip.to_string());
    }
    sans
}

fn ca_params() -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "mco-apiserver-ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2124, 1, 1);
    Ok(params)
}

/// Loads `ca.crt`, `server.crt` and `server.key` from `dir`, creating them when missing
/// or when the serving certificate does not cover the listen address.
pub fn ensure_certs(dir: &Path, listen: &SocketAddr) -> Result<Certs, Error> {
    let sans = sans_for(listen);
    let sans_file = dir.join("server.sans");
    let ca_key_path = dir.join("ca.key");
    let (ca_pem, ca_key_pem) = match (read(&dir.join("ca.crt"))?, read(&ca_key_path)?) {
        (Some(c), Some(k)) => (c, k),
        _ => {
            let key = KeyPair::generate()?;
            let cert = ca_params()?.self_signed(&key)?;
            let (c, k) = (cert.pem(), key.serialize_pem());
            write_private(&ca_key_path, &k)?;
            write_private(&dir.join("ca.crt"), &c)?;
            let _ = std::fs::remove_file(&sans_file);
            (c, k)
        }
    };
    let covered = read(&sans_file)?
        .map(|s| sans.iter().all(|n| s.lines().any(|l| l == n)))
        .unwrap_or(false);
    let (server_pem, server_key_pem) = match (
        read(&dir.join("server.crt"))?,
        read(&dir.join("server.key"))?,
    ) {
        (Some(c), Some(k)) if covered => (c, k),
        _ => {
            let ca_key = KeyPair::from_pem(&ca_key_pem)?;
            // The issuer is rebuilt from the same parameters and key that made the CA.
            let issuer = Issuer::new(ca_params()?, ca_key);
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(sans.clone())?;
            params
                .distinguished_name
                .push(DnType::CommonName, "mco-apiserver");
            params.not_before = rcgen::date_time_ymd(2024, 1, 1);
            params.not_after = rcgen::date_time_ymd(2124, 1, 1);
            params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
            let cert = params.signed_by(&key, &issuer)?;
            let (c, k) = (cert.pem(), key.serialize_pem());
            write_private(&dir.join("server.key"), &k)?;
            write_private(&dir.join("server.crt"), &c)?;
            write_private(&sans_file, &sans.join("\n"))?;
            (c, k)
        }
    };
    Ok(Certs {
        ca_pem,
        server_pem,
        server_key_pem,
    })
}

/// The rustls server configuration, offering HTTP/2 and HTTP/1.1, asking clients for a
/// certificate as `client_auth` says.
pub fn server_config(
    certs: &Certs,
    client_auth: Arc<dyn rustls::server::danger::ClientCertVerifier>,
) -> Result<Arc<rustls::ServerConfig>, Error> {
    let invalid = |path, e| Error::io(path, std::io::Error::new(ErrorKind::InvalidData, e));
    let chain = CertificateDer::pem_slice_iter(certs.server_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("server.crt", e))?;
    let key = match PrivateKeyDer::from_pem_slice(certs.server_key_pem.as_bytes()) {
        Ok(key) => key,
        Err(pem::Error::NoItemsFound) => {
            return Err(Error::Data("server.key holds no private key".into()));
        }
        Err(e) => return Err(invalid("server.key", e)),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(client_auth)
        .with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A client certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Issues a client certificate for `user` in `groups` (Subject CN and O, as kube reads them)
/// from the CA in `dir` (`ca.crt`, `ca.key`, as [`ensure_certs`] made them), valid from
/// `not_before` to `not_after` for client authentication. At most one group.
pub fn issue_client_certificate(
    dir: &Path,
    user: &str,
    groups: &[&str],
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<ClientCertificate, Error> {
    let ca_key = read(&dir.join("ca.key"))?
        .ok_or_else(|| Error::Data(format!("{}: no ca.key", dir.display())))?;
    let issuer = Issuer::new(ca_params()?, KeyPair::from_pem(&ca_key)?);
    let key = KeyPair::generate()?;
    // rcgen writes one value per attribute type: a second group would replace the first.
    if groups.len() > 1 {
        return Err(Error::Data(format!(
            "a client certificate issued here names at most one group, not {}",
            groups.len()
        )));
    }
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    for g in groups {
        params.distinguished_name.push(DnType::OrganizationName, *g);
    }
    params.distinguished_name.push(DnType::CommonName, user);
    params.not_before = not_before;
    params.not_after = not_after;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(ClientCertificate {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A kubeconfig for one token against this server.
pub fn kubeconfig(addr: &SocketAddr, ca_pem: &str, user: &str, token: &str) -> String {
    kubeconfig_with(addr, ca_pem, user, &format!("token: {token}"))
}

/// A kubeconfig for a client certificate against this server.
pub fn kubeconfig_for_certificate(
    addr: &SocketAddr,
    ca_pem: &str,
    user: &str,
    cert: &ClientCertificate,
) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let credentials = format!(
        "client-certificate-data: {}\n    client-key-data: {}",
        b64(&cert.cert_pem),
        b64(&cert.key_pem)
    );
    kubeconfig_with(addr, ca_pem, user, &credentials)
}

/// A kubeconfig whose user holds `credentials` (YAML lines under `user:`).
fn kubeconfig_with(addr: &SocketAddr, ca_pem: &str, user: &str, credentials: &str) -> String {
    let host = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    };
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: mco\n  cluster:\n    server: https://{host}:{port}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    {credentials}\ncontexts:\n- name: mco\n  context:\n    cluster: mco\n    user: {user}\n    namespace: default\ncurrent-context: mco\n",
        port = addr.port()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certs_are_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = ensure_certs(dir.path(), &addr).unwrap();
        let b = ensure_certs(dir.path(), &addr).unwrap();
        assert_eq!(a.ca_pem, b.ca_pem);
        assert_eq!(a.server_pem, b.server_pem);
        let ca = crate::client_cert::ClientCa::new(&a.ca_pem).unwrap();
        assert!(server_config(&a, ca.handshake_verifier()).is_ok());
        // A new listen address that the certificate does not cover gets a new serving cert from the same CA.
        let other: SocketAddr = "10.1.2.3:6443".parse().unwrap();
        let c = ensure_certs(dir.path(), &other).unwrap();
        assert_eq!(a.ca_pem, c.ca_pem);
        assert_ne!(a.server_pem, c.server_pem);
    }

    #[test]
    fn client_certificates_are_issued_by_the_data_dirs_ca() {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = "127.0.0.1:6443".parse().unwrap();
        let certs = ensure_certs(dir.path(), &addr).unwrap();
        let (from, to) = (
            rcgen::date_time_ymd(2024, 1, 1),
            rcgen::date_time_ymd(2124, 1, 1),
        );
        let c = issue_client_certificate(dir.path(), "alice", &["team-a"], from, to).unwrap();
        let der = CertificateDer::from_pem_slice(c.cert_pem.as_bytes()).unwrap();
        let ca = crate::client_cert::ClientCa::new(&certs.ca_pem).unwrap();
        let Some(crate::Identity::User { user, .. }) = ca.authenticate(&[der]).unwrap() else {
            panic!("no user");
        };
        assert_eq!((user.name.as_str(), user.groups.len()), ("alice", 2));
        // The one group rcgen can write; a second would silently replace it.
        let two = issue_client_certificate(dir.path(), "a", &["x", "y"], from, to).unwrap_err();
        assert!(
            two.to_string().contains("at most one group, not 2"),
            "{two}"
        );
        let k = kubeconfig_for_certificate(&addr, &certs.ca_pem, "alice", &c);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&c.cert_pem);
        assert!(k.contains(&format!("\n    client-certificate-data: {b64}\n")));
        assert!(k.contains("\n    client-key-data: ") && !k.contains("token:"));
    }

    #[test]
    fn kubeconfig_points_at_loopback() {
        let k = kubeconfig(&"0.0.0.0:6443".parse().unwrap(), "PEM", "admin", "tok");
        assert!(k.contains("server: https://127.0.0.1:6443"));
        assert!(k.contains("token: tok"));
    }
}
