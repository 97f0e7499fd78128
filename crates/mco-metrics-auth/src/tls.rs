//! The metrics port's certificate: the files given, or, as controller-runtime's secure serving
//! does without them, a self-signed one generated in memory at start (scrapers then skip
//! verification, or pin it).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;

/// A serving configuration and the leaf certificate it presents.
pub struct Serving {
    pub config: Arc<rustls::ServerConfig>,
    pub certificate: CertificateDer<'static>,
}

/// From `cert_file` (PEM, leaf first) and `key_file`, or self-signed when `None`.
pub fn serving(files: Option<(&Path, &Path)>) -> Result<Serving, Error> {
    let (chain, key) = match files {
        Some((cert, key)) => (read_chain(cert)?, read_key(key)?),
        None => self_signed()?,
    };
    let certificate = chain[0].clone();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Serving {
        config: Arc::new(config),
        certificate,
    })
}

type Pair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// For `localhost` and the loopback addresses; nothing else can name a pod's address ahead.
fn self_signed() -> Result<Pair, Error> {
    let ck = rcgen::generate_simple_self_signed(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])?;
    let key = PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    Ok((vec![ck.cert.der().clone()], key))
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|error| Error::File {
        path: path.to_path_buf(),
        error,
    })
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Pem {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(Error::Pem {
            path: path.to_path_buf(),
            what: "no CERTIFICATE block".into(),
        });
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| Error::Pem {
        path: path.to_path_buf(),
        what: format!("no private key: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_file_is_named() {
        let e = serving(Some((Path::new("/nonexistent/tls.crt"), Path::new("/k"))))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("/nonexistent/tls.crt: "), "{e}");
        let dir = std::env::temp_dir().join(format!("mco-metrics-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.crt");
        std::fs::write(&empty, "").unwrap();
        let e = serving(Some((&empty, Path::new("/k"))))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(e, format!("{}: no CERTIFICATE block", empty.display()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn given_files_are_served() {
        let ck = rcgen::generate_simple_self_signed(vec!["metrics.example".to_string()]).unwrap();
        let dir = std::env::temp_dir().join(format!("mco-metrics-auth-f-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, ck.cert.pem()).unwrap();
        std::fs::write(&k, ck.signing_key.serialize_pem()).unwrap();
        let s = serving(Some((&c, &k))).unwrap();
        assert_eq!(s.certificate.as_ref(), ck.cert.der().as_ref());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
