//! The serving certificate: given as PEM files, reloaded when they change (a rotated Secret),
//! or issued at start from a CA kept in a directory (created there on first use, as `mco up`
//! does for its API server).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::InconsistentKeys;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Most bytes read of the certificate chain file and of the key file.
pub const MAX_PEM_FILE: u64 = 1 << 20;

/// How often, at most, a handshake looks whether the certificate files changed.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path}: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("{key}: the key does not match the certificate of {cert}")]
    Mismatch { key: PathBuf, cert: PathBuf },
    #[error("issuing a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Where the certificate comes from.
#[derive(Debug, Clone)]
pub enum Certificate {
    /// A certificate chain and its key, PEM; reloaded when the files change.
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

/// A serving certificate and its key issued from the CA of `dir`.
fn issue(
    dir: &Path,
    names: &[String],
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), TlsError> {
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
    Ok((
        c.der().clone(),
        PrivatePkcs8KeyDer::from(k.serialize_der()).into(),
    ))
}

/// The bytes of `path` (following links), at most [`MAX_PEM_FILE`] of them.
fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM_FILE + 1).read_to_end(&mut buf))
        .map_err(io(path))?;
    if buf.len() as u64 > MAX_PEM_FILE {
        return Err(TlsError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_PEM_FILE,
        });
    }
    Ok(buf)
}

/// The chain of `chain_pem` (read from `cert`) with the key of `key_pem` (read from `key`),
/// refused unless the key is the one of the chain's first certificate.
fn certified_key(
    chain_pem: &[u8],
    key_pem: &[u8],
    (cert, key): (&Path, &Path),
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let pem_err = |path: &Path, message: String| TlsError::Pem {
        path: path.to_path_buf(),
        message,
    };
    let chain = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(pem_err(cert, "holds no certificate".into()));
    }
    let der = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| pem_err(key, format!("the key: {e}")))?;
    let signer = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| pem_err(key, format!("the key: {e}")))?;
    let ck = CertifiedKey::new(chain, signer);
    // Strict, unlike `CertifiedKey::from_der`: ring's keys all tell their public key, so a
    // key that cannot be checked is refused rather than served unchecked.
    match ck.keys_match() {
        Ok(()) => Ok(ck),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::Mismatch {
                key: key.to_path_buf(),
                cert: cert.to_path_buf(),
            })
        }
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Err(pem_err(
            key,
            "the key: cannot tell its public key to check it against the certificate".into(),
        )),
        Err(e) => Err(pem_err(cert, format!("the certificate: {e}"))),
    }
}

/// What `stat` (following links) says of a file: the kubelet's swap of a Secret's `..data`
/// link, a rename over the file and a rewrite in place each change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Within this long of now, a file's times do not tell a later write apart (they tick with
/// the kernel's coarse clock): such a file is read again at the next look.
const SETTLE: i64 = 2;

/// The stamp of `path`, or `None` when it cannot be trusted to change with the contents (no
/// such file, or written within [`SETTLE`] seconds).
fn stamp(path: &Path, now: SystemTime) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    if now.saturating_sub(m.mtime().max(m.ctime())) < SETTLE {
        return None;
    }
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// What the files held at the last look: their bytes, or why they could not be read.
type Seen = Result<(Vec<u8>, Vec<u8>), String>;

/// What a look at the files did.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Look {
    /// Not yet time, or the files are as at the last look.
    Unchanged,
    /// A new pair is served.
    Loaded,
    /// The files changed but do not load; the previous pair is served still.
    Kept(String),
}

/// The chain and key of [`Certificate::Files`], reloaded when the files change.
///
/// Each handshake asks for the pair; at most once a [`RELOAD_INTERVAL`] that handshake `stat`s
/// both files first, and reads and loads them when that changed. Looking on handshakes, rather
/// than from a task polling every second, needs no runtime or thread of its own, costs an idle
/// server nothing, and a handshake after a rotation (plus at most the interval) gets the new
/// pair. The look is two `stat`s, a read only after a change: cheap enough for the handshake
/// path. Connections already open keep the certificate they were made with.
#[derive(Debug)]
struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<CertifiedKey>,
    seen: Seen,
    /// The files' stamps at the last read; `None`: read at the next look.
    stamps: Option<(Stamp, Stamp)>,
    next_look: Instant,
}

impl Reloading {
    /// The pair of the files, or why it does not load: at start, that stops the server.
    fn new(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let stamps = stamp(cert, SystemTime::now()).zip(stamp(key, SystemTime::now()));
        let chain_pem = read_bounded(cert)?;
        let key_pem = read_bounded(key)?;
        let current = certified_key(&chain_pem, &key_pem, (cert, key), &provider)?;
        Ok(Reloading {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            state: Mutex::new(State {
                current: Arc::new(current),
                seen: Ok((chain_pem, key_pem)),
                stamps,
                next_look: Instant::now() + RELOAD_INTERVAL,
            }),
        })
    }

    /// Looks at the files if it is time at `now`, and takes a new pair that loads. A pair that
    /// does not is logged once for each change of the files.
    fn look(&self, state: &mut State, now: Instant) -> Look {
        if now < state.next_look {
            return Look::Unchanged;
        }
        state.next_look = now + RELOAD_INTERVAL;
        // Stamps before reading: a write in between is seen at the next look.
        let wall = SystemTime::now();
        let stamps = stamp(&self.cert, wall).zip(stamp(&self.key, wall));
        if stamps.is_some() && stamps == state.stamps {
            return Look::Unchanged;
        }
        state.stamps = stamps;
        let read = read_bounded(&self.cert).and_then(|c| Ok((c, read_bounded(&self.key)?)));
        let same = match (&read, &state.seen) {
            (Ok(read), Ok(seen)) => read == seen,
            (Err(read), Err(seen)) => read.to_string() == *seen,
            _ => false,
        };
        if same {
            return Look::Unchanged;
        }
        let (look, seen) = match read {
            Ok((c, k)) => {
                let look = match certified_key(&c, &k, (&self.cert, &self.key), &self.provider) {
                    Ok(ck) => {
                        state.current = Arc::new(ck);
                        tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                        Look::Loaded
                    }
                    Err(e) => Look::Kept(e.to_string()),
                };
                (look, Ok((c, k)))
            }
            Err(e) => (Look::Kept(e.to_string()), Err(e.to_string())),
        };
        if let Look::Kept(e) = &look {
            tracing::warn!("serving certificate not reloaded, the previous one is served: {e}");
        }
        state.seen = seen;
        look
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.look(&mut state, Instant::now());
        Some(state.current.clone())
    }
}

/// The rustls configuration: TLS 1.2 and later (as upstream's), HTTP/1.1 (what Ignition speaks).
pub fn server_config(cert: &Certificate) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth();
    let mut cfg = match cert {
        Certificate::Files { cert, key } => {
            builder.with_cert_resolver(Arc::new(Reloading::new(cert, key, provider)?))
        }
        Certificate::CaDir { dir, names } => {
            let (cert, key) = issue(dir, names)?;
            builder.with_single_cert(vec![cert], key)?
        }
    };
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

    /// A self-signed certificate for `name` and its key, PEM.
    fn pair(name: &str) -> (String, String) {
        let k = KeyPair::generate().unwrap();
        let c = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&k)
            .unwrap();
        (c.pem(), k.serialize_pem())
    }

    fn leaf(r: &Reloading) -> Vec<u8> {
        let s = r.state.lock().unwrap();
        s.current.end_entity_cert().unwrap().to_vec()
    }

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    /// Looks as a handshake does once the interval is up.
    fn look(r: &Reloading) -> Look {
        let mut s = r.state.lock().unwrap();
        let at = s.next_look;
        r.look(&mut s, at)
    }

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn a_pair_that_does_not_load_is_kept_out_once_per_change() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let (a_crt, a_key) = pair("a.example");
        let (b_crt, b_key) = pair("b.example");
        std::fs::write(&crt, &a_crt).unwrap();
        std::fs::write(&key, &a_key).unwrap();
        let r = Reloading::new(&crt, &key, provider()).unwrap();
        assert_eq!(leaf(&r), der(&a_crt));
        // Before the interval is up, a change is not looked at.
        std::fs::write(&crt, &b_crt).unwrap();
        let mut s = r.state.lock().unwrap();
        let early = s.next_look - Duration::from_millis(1);
        assert_eq!(r.look(&mut s, early), Look::Unchanged);
        drop(s);
        assert_eq!(leaf(&r), der(&a_crt));
        // The new certificate with the old key: refused, naming the key, once.
        let Look::Kept(e) = look(&r) else {
            panic!("a mismatched pair was taken")
        };
        assert!(
            e.starts_with(&format!("{}: the key does not match", key.display())),
            "{e}"
        );
        assert_eq!(look(&r), Look::Unchanged);
        assert_eq!(leaf(&r), der(&a_crt));
        // A key file that is no key: refused, naming it.
        std::fs::write(&key, "not a key\n").unwrap();
        let Look::Kept(e) = look(&r) else {
            panic!("a pair without a key was taken")
        };
        assert!(e.starts_with(&format!("{}: the key", key.display())), "{e}");
        assert_eq!(look(&r), Look::Unchanged);
        // A missing file: refused, naming it.
        std::fs::remove_file(&key).unwrap();
        let Look::Kept(e) = look(&r) else {
            panic!("a pair without a key file was taken")
        };
        assert!(e.starts_with(&format!("{}: ", key.display())), "{e}");
        assert_eq!(look(&r), Look::Unchanged);
        assert_eq!(leaf(&r), der(&a_crt));
        // The matching key lands: the new pair is served.
        std::fs::write(&key, &b_key).unwrap();
        assert_eq!(look(&r), Look::Loaded);
        assert_eq!(leaf(&r), der(&b_crt));
        assert_eq!(look(&r), Look::Unchanged);
        // A chain file without a certificate: refused, naming it.
        std::fs::write(&crt, &b_key).unwrap();
        let Look::Kept(e) = look(&r) else {
            panic!("a pair without a certificate was taken")
        };
        assert_eq!(e, format!("{}: holds no certificate", crt.display()));
        assert_eq!(leaf(&r), der(&b_crt));
    }

    #[test]
    fn the_files_are_read_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let (a_crt, a_key) = pair("a.example");
        let (b_crt, b_key) = pair("b.example");
        // Lines outside a PEM section are skipped: pad to the size wanted.
        let padded = |pem: &str, len: u64| format!("{pem}{}", "#".repeat(len as usize - pem.len()));
        std::fs::write(&crt, padded(&a_crt, MAX_PEM_FILE)).unwrap();
        std::fs::write(&key, padded(&a_key, MAX_PEM_FILE)).unwrap();
        let r = Reloading::new(&crt, &key, provider()).unwrap();
        assert_eq!(leaf(&r), der(&a_crt));
        // One byte over: refused at start, naming the file.
        std::fs::write(&key, padded(&a_key, MAX_PEM_FILE + 1)).unwrap();
        let c = Certificate::Files {
            cert: crt.clone(),
            key: key.clone(),
        };
        let e = server_config(&c).unwrap_err().to_string();
        assert_eq!(e, format!("{}: larger than 1048576 bytes", key.display()));
        // And at a reload, the previous pair stays.
        std::fs::write(&crt, padded(&b_crt, MAX_PEM_FILE + 1)).unwrap();
        std::fs::write(&key, &b_key).unwrap();
        let Look::Kept(e) = look(&r) else {
            panic!("an oversized file was taken")
        };
        assert_eq!(e, format!("{}: larger than 1048576 bytes", crt.display()));
        assert_eq!(leaf(&r), der(&a_crt));
        std::fs::write(&crt, padded(&b_crt, MAX_PEM_FILE)).unwrap();
        assert_eq!(look(&r), Look::Loaded);
        assert_eq!(leaf(&r), der(&b_crt));
    }
}
