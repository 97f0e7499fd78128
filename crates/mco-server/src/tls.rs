//! The serving certificate: given as PEM files, or issued at start from a CA kept in a
//! directory (created there on first use, as `mco up` does for its API server).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("issuing a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Where the certificate comes from.
#[derive(Debug, Clone)]
pub enum Certificate {
    /// A certificate chain and its key, PEM.
    Files { cert: PathBuf, key: PathBuf },
    /// `ca.crt`/`ca.key` in this directory (created if missing); a serving certificate for
    /// `localhost`, loopback and the given names is issued from it at each start.
    CaDir { dir: PathBuf, names: Vec<String> },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn write_private(path: &Path, contents: &str) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(contents.as_bytes()).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

fn ca_params() -> Result<CertificateParams, TlsError> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(DnType::CommonName, "machine-config-server-ca");
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = rcgen::date_time_ymd(2024, 1, 1);
    p.not_after = rcgen::date_time_ymd(2124, 1, 1);
    Ok(p)
}

/// The serving chain and key (PEM) for `cert`.
fn pem_pair(cert: &Certificate) -> Result<(String, String, PathBuf), TlsError> {
    match cert {
        Certificate::Files { cert, key } => Ok((
            std::fs::read_to_string(cert).map_err(io(cert))?,
            std::fs::read_to_string(key).map_err(io(key))?,
            cert.clone(),
        )),
        Certificate::CaDir { dir, names } => {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
            let ca_key = match std::fs::read_to_string(&key) {
                Ok(k) if crt.exists() => KeyPair::from_pem(&k)?,
                _ => {
                    let k = KeyPair::generate()?;
                    let c = ca_params()?.self_signed(&k)?;
                    write_private(&key, &k.serialize_pem())?;
                    write_private(&crt, &c.pem())?;
                    k
                }
            };
            let issuer = Issuer::new(ca_params()?, ca_key);
            let mut sans = vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
                "::1".to_string(),
            ];
            for n in names {
                if !sans.contains(n) {
                    sans.push(n.clone());
                }
            }
            let k = KeyPair::generate()?;
            let mut p = CertificateParams::new(sans)?;
            p.distinguished_name
                .push(DnType::CommonName, "machine-config-server");
            p.not_before = rcgen::date_time_ymd(2024, 1, 1);
            p.not_after = rcgen::date_time_ymd(2124, 1, 1);
            p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
            let c = p.signed_by(&k, &issuer)?;
            Ok((c.pem(), k.serialize_pem(), crt))
        }
    }
}

/// The rustls configuration: TLS 1.2 and later (as upstream's), HTTP/1.1 (what Ignition speaks).
pub fn server_config(cert: &Certificate) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (chain_pem, key_pem, path) = pem_pair(cert)?;
    let pem_err = |message: String| TlsError::Pem {
        path: path.clone(),
        message,
    };
    let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(pem_err("holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| pem_err(format!("the key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_dir_keeps_its_ca_across_starts() {
        let dir = tempfile::tempdir().unwrap();
        let c = Certificate::CaDir {
            dir: dir.path().to_path_buf(),
            names: vec!["api-int.example".into()],
        };
        server_config(&c).unwrap();
        let ca = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
        server_config(&c).unwrap();
        assert_eq!(
            ca,
            std::fs::read_to_string(dir.path().join("ca.crt")).unwrap()
        );
    }

    #[test]
    fn a_missing_certificate_file_is_named() {
        let c = Certificate::Files {
            cert: "/nonexistent/tls.crt".into(),
            key: "/nonexistent/tls.key".into(),
        };
        let e = server_config(&c).unwrap_err().to_string();
        assert!(e.starts_with("/nonexistent/tls.crt: "), "{e}");
    }
}
