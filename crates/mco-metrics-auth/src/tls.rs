//! The metrics port's certificate: the files given, reloaded when they change (as
//! controller-runtime's certwatcher reloads them, so that a rotated Secret needs no restart), or,
//! as controller-runtime's secure serving does without them, a self-signed one generated in
//! memory at start (scrapers then skip verification, or pin it).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::Error;

/// How often the certificate files are read again; certwatcher polls as often.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// A serving configuration, the leaf certificate it presents at start and, for files, what
/// reloads them.
pub struct Serving {
    pub config: Arc<rustls::ServerConfig>,
    pub certificate: CertificateDer<'static>,
    /// `None` for the self-signed certificate.
    pub reload: Option<Reload>,
}

/// From `cert_file` (PEM, leaf first) and `key_file`, or self-signed when `None`.
pub fn serving(files: Option<(&Path, &Path)>) -> Result<Serving, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (key, reload) = match files {
        Some((cert, key)) => {
            let seen = (read(cert)?, read(key)?);
            let certified = load(&provider, (cert, &seen.0), (key, &seen.1))?;
            let reload = |current| Reload {
                current,
                provider: provider.clone(),
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
                seen: (Some(seen.0), Some(seen.1)),
                interval: RELOAD_INTERVAL,
            };
            (certified, Some(reload))
        }
        None => (self_signed(&provider)?, None),
    };
    let certificate = key.cert[0].clone();
    let current = Arc::new(Current {
        key: RwLock::new(Arc::new(key)),
        loaded: AtomicU64::new(1),
        rejected: AtomicU64::new(0),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(current.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Serving {
        config: Arc::new(config),
        certificate,
        reload: reload.map(|r| r(current)),
    })
}

/// The certificate and key every handshake gets: the last pair that loaded.
#[derive(Debug)]
pub struct Current {
    key: RwLock<Arc<CertifiedKey>>,
    /// Pairs loaded, the first at start included.
    loaded: AtomicU64,
    /// Changed files that did not load.
    rejected: AtomicU64,
}

impl Current {
    /// The leaf certificate presented now.
    pub fn certificate(&self) -> CertificateDer<'static> {
        self.get().cert[0].clone()
    }

    /// Pairs loaded so far, the first at start included.
    pub fn loaded(&self) -> u64 {
        self.loaded.load(Ordering::SeqCst)
    }

    /// Changes to the files that did not load (the pair before them served on).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::SeqCst)
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.key.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, key: CertifiedKey) {
        *self.key.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        self.loaded.fetch_add(1, Ordering::SeqCst);
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// Reads the certificate files again and swaps in the pair they hold once it loads.
pub struct Reload {
    current: Arc<Current>,
    provider: Arc<CryptoProvider>,
    cert: PathBuf,
    key: PathBuf,
    /// The files' contents when last read (`None`: unreadable), loaded or not, so that each
    /// change is tried, and warned about, once.
    seen: (Option<Vec<u8>>, Option<Vec<u8>>),
    /// Between two reads of the files.
    pub interval: Duration,
}

impl Reload {
    /// What the handshakes present.
    pub fn current(&self) -> &Arc<Current> {
        &self.current
    }

    /// Reads both files: `Ok(false)` when they hold what they held last time, `Ok(true)` when
    /// they changed and the new pair now serves; an error naming the file when they changed
    /// but do not load (unreadable, not PEM, or a key not the certificate's), the pair before
    /// serving on.
    pub fn check(&mut self) -> Result<bool, Error> {
        let cert = read(&self.cert);
        let key = read(&self.key);
        let now = (cert.as_ref().ok().cloned(), key.as_ref().ok().cloned());
        if now == self.seen {
            return Ok(false);
        }
        self.seen = now;
        let loaded = cert.and_then(|c| {
            let k = key?;
            load(&self.provider, (&self.cert, &c), (&self.key, &k))
        });
        match loaded {
            Ok(certified) => {
                self.current.set(certified);
                Ok(true)
            }
            Err(e) => {
                self.current.rejected.fetch_add(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// Checks the files every [`Reload::interval`], for as long as it is polled.
    pub async fn run(mut self) -> Infallible {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is now, and the files were just read.
        ticks.tick().await;
        loop {
            ticks.tick().await;
            // Two files of a few kilobytes: read in place rather than on a blocking thread.
            match self.check() {
                Ok(false) => {}
                Ok(true) => tracing::info!(
                    cert = %self.cert.display(),
                    key = %self.key.display(),
                    "metrics: serving certificate reloaded"
                ),
                Err(e) => tracing::warn!(
                    error = %e,
                    "metrics: changed serving certificate not loaded; the previous one serves on"
                ),
            }
        }
    }
}

/// For `localhost` and the loopback addresses; nothing else can name a pod's address ahead.
fn self_signed(provider: &CryptoProvider) -> Result<CertifiedKey, Error> {
    let ck = rcgen::generate_simple_self_signed(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])?;
    let key = PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    Ok(CertifiedKey::from_der(
        vec![ck.cert.der().clone()],
        key,
        provider,
    )?)
}

/// The most either PEM file may hold: a Secret, where they come from, holds at most 1 MiB in
/// all, and they are read again every [`RELOAD_INTERVAL`].
pub const MAX_PEM_BYTES: u64 = 1 << 20;

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    use std::io::Read;
    let file = |error| Error::File {
        path: path.to_path_buf(),
        error,
    };
    let mut bytes = Vec::new();
    // One byte past the limit tells a file at the limit from one over it.
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM_BYTES + 1).read_to_end(&mut bytes))
        .map_err(file)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(file(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_PEM_BYTES} bytes"),
        )));
    }
    Ok(bytes)
}

/// The chain of `cert` and the key of `key`, each given as its path and its PEM, once the key
/// is known to be the certificate's.
fn load(
    provider: &CryptoProvider,
    (cert, cert_pem): (&Path, &[u8]),
    (key, key_pem): (&Path, &[u8]),
) -> Result<CertifiedKey, Error> {
    let pem = |path: &Path, what: String| Error::Pem {
        path: path.to_path_buf(),
        what,
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(pem(cert, "no CERTIFICATE block".into()));
    }
    let der = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| pem(key, format!("no private key: {e}")))?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| pem(key, e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key whose public half the provider cannot tell is taken as rustls takes it.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(Error::KeyMismatch {
                key: key.to_path_buf(),
                cert: cert.to_path_buf(),
            })
        }
        Err(e) => Err(pem(cert, e.to_string())),
    }
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
        let e = serving(Some((&empty, Path::new("/nonexistent/tls.key"))))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("/nonexistent/tls.key: "), "{e}");
        let key = dir.join("tls.key");
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let e = serving(Some((&empty, &key))).err().unwrap().to_string();
        assert_eq!(e, format!("{}: no CERTIFICATE block", empty.display()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pem_file_over_the_limit_is_refused_and_one_at_it_is_read() {
        let dir = std::env::temp_dir().join(format!("mco-metrics-auth-max-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let at = dir.join("at.crt");
        let over = dir.join("over.crt");
        std::fs::write(&at, vec![b'x'; MAX_PEM_BYTES as usize]).unwrap();
        std::fs::write(&over, vec![b'x'; MAX_PEM_BYTES as usize + 1]).unwrap();
        assert_eq!(read(&at).unwrap().len() as u64, MAX_PEM_BYTES);
        let e = read(&over).unwrap_err().to_string();
        assert_eq!(e, format!("{}: larger than 1048576 bytes", over.display()));
        // Refused before any parsing, when serving starts.
        let e = serving(Some((&over, &at))).err().unwrap().to_string();
        assert!(e.contains("larger than 1048576 bytes"), "{e}");
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

    #[test]
    fn a_changed_pair_is_swapped_in_only_once_it_loads() {
        let dir = std::env::temp_dir().join(format!("mco-metrics-auth-c-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        let pairs: Vec<_> = (0..2)
            .map(|_| rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap())
            .collect();
        std::fs::write(&c, pairs[0].cert.pem()).unwrap();
        std::fs::write(&k, pairs[0].signing_key.serialize_pem()).unwrap();
        let s = serving(Some((&c, &k))).unwrap();
        let mut reload = s.reload.unwrap();
        let current = reload.current().clone();
        assert_eq!(reload.interval, RELOAD_INTERVAL);
        assert!(!reload.check().unwrap(), "unchanged files");
        assert_eq!((current.loaded(), current.rejected()), (1, 0));

        // The new certificate before its key: refused, naming both files, once.
        std::fs::write(&c, pairs[1].cert.pem()).unwrap();
        let e = reload.check().unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: not the key of the certificate in {}",
                k.display(),
                c.display()
            )
        );
        assert!(
            !reload.check().unwrap(),
            "the same refused pair is not tried again"
        );
        assert_eq!(current.certificate().as_ref(), pairs[0].cert.der().as_ref());
        assert_eq!((current.loaded(), current.rejected()), (1, 1));

        // A key file gone: refused, naming it.
        std::fs::remove_file(&k).unwrap();
        let e = reload.check().unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: ", k.display())), "{e}");
        assert_eq!(current.certificate().as_ref(), pairs[0].cert.der().as_ref());

        // The key written: the new pair serves.
        std::fs::write(&k, pairs[1].signing_key.serialize_pem()).unwrap();
        assert!(reload.check().unwrap());
        assert_eq!(current.certificate().as_ref(), pairs[1].cert.der().as_ref());
        assert_eq!((current.loaded(), current.rejected()), (2, 2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_key_not_the_certificates_is_refused_at_start() {
        let pairs: Vec<_> = (0..2)
            .map(|_| rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap())
            .collect();
        let dir = std::env::temp_dir().join(format!("mco-metrics-auth-m-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, pairs[0].cert.pem()).unwrap();
        std::fs::write(&k, pairs[1].signing_key.serialize_pem()).unwrap();
        let e = serving(Some((&c, &k))).err().unwrap();
        assert!(matches!(e, Error::KeyMismatch { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
