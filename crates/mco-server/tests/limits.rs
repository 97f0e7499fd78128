//! The server's limits at their edges, over real TLS with `curl`, on a bootstrap directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mco_server::tls::Certificate;
use mco_server::{App, Limits, Source};
use serde_json::json;
use tokio::io::AsyncReadExt;

fn bootstrap_dir(dir: &Path) {
    std::fs::create_dir_all(dir.join("machine-pools")).unwrap();
    std::fs::create_dir_all(dir.join("machine-configs")).unwrap();
    // JSON is YAML.
    let pool = json!({"apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool", "metadata": {"name": "worker"}, "spec": {},
        "status": {"configuration": {"name": "rendered-worker-1"}}});
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig", "metadata": {"name": "rendered-worker-1"},
        "spec": {"osImageURL": "", "config": {"ignition": {"version": "3.5.0"}}}});
    std::fs::write(dir.join("machine-pools/worker.yaml"), pool.to_string()).unwrap();
    std::fs::write(
        dir.join("machine-configs/rendered-worker-1.yaml"),
        mc.to_string(),
    )
    .unwrap();
}

async fn start(dir: &Path, limits: Limits) -> (mco_server::Handle, PathBuf) {
    bootstrap_dir(&dir.join("boot"));
    let certs = dir.join("certs");
    let tls = mco_server::tls::server_config(&Certificate::CaDir {
        dir: certs.clone(),
        names: vec![],
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = App::new(Source::Dir(dir.join("boot")), None);
    let h = mco_server::start(listener, tls, app, limits).unwrap();
    (h, certs.join("ca.crt"))
}

/// curl's HTTP status (0 when it got none) for `/config/worker`.
async fn status(h: &mco_server::Handle, ca: &Path, extra: &[&str]) -> u16 {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(ca)
        .args(extra)
        .arg(format!("https://{}/config/worker", h.addr()))
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits::default();
    let max = limits.max_header_bytes;
    let (h, ca) = start(dir.path(), limits).await;
    assert_eq!(status(&h, &ca, &[]).await, 200);
    // Headers just under the limit are read; over it, 431.
    let under = format!("X-Pad: {}", "a".repeat(max - 1024));
    assert_eq!(status(&h, &ca, &["-H", &under]).await, 200);
    let over = format!("X-Pad: {}", "a".repeat(max + 1));
    assert_eq!(status(&h, &ca, &["-H", &over]).await, 431);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_the_connection_cap_waits_for_a_slot() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_connections: 1,
        handshake_timeout: Duration::from_secs(120),
        ..Limits::default()
    };
    let (h, ca) = start(dir.path(), limits).await;
    // One silent connection holds the only slot: a client waits and times out.
    let held = tokio::net::TcpStream::connect(h.addr()).await.unwrap();
    assert_eq!(status(&h, &ca, &["--max-time", "2"]).await, 0);
    drop(held);
    assert_eq!(status(&h, &ca, &["--max-time", "30"]).await, 200);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        handshake_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (h, _) = start(dir.path(), limits).await;
    let mut tcp = tokio::net::TcpStream::connect(h.addr()).await.unwrap();
    let mut buf = [0u8; 16];
    // The server closes the connection: EOF, well before this deadline.
    let n = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf))
        .await
        .expect("closed by the server")
        .unwrap_or(0);
    assert_eq!(n, 0);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_dir_serves_and_404s_as_upstream_bootstrap_server() {
    let dir = tempfile::tempdir().unwrap();
    let (h, ca) = start(dir.path(), Limits::default()).await;
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "--cacert"])
        .arg(&ca)
        .arg(format!("https://{}/config/infra", h.addr()))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n404"), "{text}");
    assert!(
        text.starts_with("pool infra: could not find file"),
        "{text}"
    );
    h.shutdown().await;
}
