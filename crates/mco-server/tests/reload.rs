//! A rotated serving certificate is served from the next handshakes on, without a restart; a
//! pair that does not load is not. Over real TLS, with a client that records the certificate
//! it is shown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mco_server::tls::{Certificate, MAX_PEM_FILE};
use mco_server::{App, Limits, Source};
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Long enough for a slow machine; a served rotation takes about a second.
const DEADLINE: Duration = Duration::from_secs(20);

/// Accepts any certificate, but checks the handshake's signatures with it: a certificate
/// served with another one's key fails the handshake.
#[derive(Debug)]
struct AnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A new connection to `addr`.
async fn connect(addr: SocketAddr) -> Result<Tls, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())
}

/// The leaf certificate a connection was shown.
fn leaf_of(tls: &Tls) -> Vec<u8> {
    tls.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec()
}

/// The leaf certificate a new connection to `addr` is shown.
async fn served(addr: SocketAddr) -> Vec<u8> {
    leaf_of(&connect(addr).await.expect("a handshake"))
}

/// Waits until new connections are shown `want`.
async fn wait_served(addr: SocketAddr, want: &Pair, what: &str) {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Ok(tls) = connect(addr).await
            && leaf_of(&tls) == want.der
        {
            return;
        }
        assert!(
            Instant::now() < end,
            "{what}: not served within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A self-signed certificate and its key.
struct Pair {
    crt: String,
    key: String,
    der: Vec<u8>,
}

fn pair(name: &str) -> Pair {
    let k = rcgen::KeyPair::generate().unwrap();
    let c = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .self_signed(&k)
        .unwrap();
    let der = CertificateDer::from_pem_slice(c.pem().as_bytes())
        .unwrap()
        .to_vec();
    Pair {
        crt: c.pem(),
        key: k.serialize_pem(),
        der,
    }
}

/// Replaces `path` at once (a rename over it).
fn replace(path: &Path, contents: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The messages the server logs, in this test binary, one a line.
fn log() -> &'static Mutex<String> {
    static LOG: OnceLock<&'static Mutex<String>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static Mutex<String> = Box::leak(Box::default());
        tracing::subscriber::set_global_default(Recorder(log)).unwrap();
        log
    })
}

/// Records each event's message: enough to see the server's warnings.
struct Recorder(&'static Mutex<String>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = event.metadata().level().to_string();
        event.record(&mut Message(&mut line));
        let mut log = self.0.lock().unwrap();
        log.push_str(&line);
        log.push('\n');
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// How many logged lines hold `needle`.
fn logged(needle: &str) -> usize {
    log()
        .lock()
        .unwrap()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// Waits until the server has logged a line holding `needle` (it has looked at the files and
/// refused them), checking that every connection meanwhile and then is shown `old`.
async fn wait_refused(addr: SocketAddr, needle: &str, old: &Pair) {
    let end = Instant::now() + DEADLINE;
    while logged(needle) == 0 {
        assert!(
            Instant::now() < end,
            "not logged within {DEADLINE:?}: {needle}"
        );
        assert_eq!(served(addr).await, old.der, "served before the refusal");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served(addr).await, old.der, "served after the refusal");
}

/// A server of `crt` and `key`; new connections look at the files.
async fn start(crt: &Path, key: &Path) -> mco_server::Handle {
    log();
    let tls = mco_server::tls::server_config(&Certificate::Files {
        cert: crt.to_path_buf(),
        key: key.to_path_buf(),
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = App::new(Source::Dir("/nonexistent".into()), None);
    mco_server::start(listener, tls, app, Limits::default()).unwrap()
}

/// A server of pair `a` from `crt` and `key` in a temporary directory (kept while the first
/// value lives), and pair `b` to rotate to.
async fn serving_a() -> (
    tempfile::TempDir,
    PathBuf,
    PathBuf,
    Pair,
    Pair,
    mco_server::Handle,
) {
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let (a, b) = (pair("a.example"), pair("b.example"));
    std::fs::write(&crt, &a.crt).unwrap();
    std::fs::write(&key, &a.key).unwrap();
    let h = start(&crt, &key).await;
    (dir, crt, key, a, b, h)
}

/// The status line of `GET /healthz` on an open connection.
async fn healthz(tls: &mut Tls) -> String {
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tls.read(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_rewritten_in_place_are_served_by_new_connections() {
    let (_dir, crt, key, a, b, h) = serving_a().await;
    let mut open = connect(h.addr()).await.unwrap();
    assert_eq!(leaf_of(&open), a.der);
    assert_eq!(healthz(&mut open).await, "HTTP/1.1 200 OK");
    // Rewritten in place, the key after the certificate, as a non-atomic writer does.
    std::fs::write(&crt, &b.crt).unwrap();
    std::fs::write(&key, &b.key).unwrap();
    wait_served(h.addr(), &b, "the rewritten pair").await;
    // The connection made before goes on with its certificate.
    assert_eq!(healthz(&mut open).await, "HTTP/1.1 200 OK");
    assert_eq!(leaf_of(&open), a.der);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_volume_swapped_by_the_kubelet_is_served() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b) = (pair("a.example"), pair("b.example"));
    // The kubelet's layout: names linking into `..data`, a link to a timestamped directory.
    let first = d.join("..2026_01_01_00_00_00.1");
    std::fs::create_dir(&first).unwrap();
    std::fs::write(first.join("tls.crt"), &a.crt).unwrap();
    std::fs::write(first.join("tls.key"), &a.key).unwrap();
    symlink("..2026_01_01_00_00_00.1", d.join("..data")).unwrap();
    symlink("..data/tls.crt", d.join("tls.crt")).unwrap();
    symlink("..data/tls.key", d.join("tls.key")).unwrap();
    let h = start(&d.join("tls.crt"), &d.join("tls.key")).await;
    assert_eq!(served(h.addr()).await, a.der);
    // Its update: a new directory, then `..data` renamed over at once.
    let second = d.join("..2026_01_01_01_00_00.2");
    std::fs::create_dir(&second).unwrap();
    std::fs::write(second.join("tls.crt"), &b.crt).unwrap();
    std::fs::write(second.join("tls.key"), &b.key).unwrap();
    symlink("..2026_01_01_01_00_00.2", d.join("..data_tmp")).unwrap();
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    std::fs::remove_dir_all(&first).unwrap();
    wait_served(h.addr(), &b, "the swapped Secret").await;
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_without_its_key_is_not_served_until_the_key_lands() {
    let (_dir, crt, key, a, b, h) = serving_a().await;
    assert_eq!(served(h.addr()).await, a.der);
    // The new certificate, the key still the old one.
    replace(&crt, &b.crt);
    let refused = format!("{}: the key does not match the certificate", key.display());
    wait_refused(h.addr(), &refused, &a).await;
    // Later handshakes look again, find the files as they were, and are shown the old pair.
    let looks = Instant::now() + mco_server::tls::RELOAD_INTERVAL * 5 / 2;
    while Instant::now() < looks {
        assert_eq!(served(h.addr()).await, a.der);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    replace(&key, &b.key);
    wait_served(h.addr(), &b, "the pair once the key landed").await;
    assert_eq!(logged(&refused), 1, "one warning for the one change");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_certificate_file_is_not_served() {
    let (_dir, crt, key, a, b, h) = serving_a().await;
    assert_eq!(served(h.addr()).await, a.der);
    // The new pair, its chain file one byte over the limit.
    let pad = "#".repeat(MAX_PEM_FILE as usize + 1 - b.crt.len());
    replace(&key, &b.key);
    replace(&crt, &format!("{}{pad}", b.crt));
    let refused = format!("{}: larger than {MAX_PEM_FILE} bytes", crt.display());
    wait_refused(h.addr(), &refused, &a).await;
    // At the limit, it is served.
    replace(&crt, &format!("{}{}", b.crt, &pad[1..]));
    wait_served(h.addr(), &b, "the pair at the limit").await;
    h.shutdown().await;
}
