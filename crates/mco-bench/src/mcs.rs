//! The machine config server under a boot storm: a separate `mco server --bootstrap-dir`
//! process serves `/config/worker` (a rendered config of realistic size) to many concurrent
//! clients, each request on a fresh TLS connection as each booting machine makes one; the
//! figures are requests per second, latency, and the server's RSS from `/proc`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::procfs::{self, Mem};
use crate::stats::{Summary, mib, rate, summarize};

/// Goals: a thousand machines booting at once are served in seconds, in little memory.
pub const GOAL_RPS: f64 = 500.0;
pub const GOAL_RSS_KIB: u64 = 50 * 1024;

#[derive(Debug, Clone)]
pub struct McsOpts {
    pub mco_bin: PathBuf,
    pub clients: usize,
    pub duration: Duration,
    /// Files in the served rendered config (4 KiB each) and units.
    pub files: usize,
    pub work_dir: PathBuf,
}

#[derive(Debug)]
pub struct McsReport {
    pub clients: usize,
    pub requests: usize,
    pub errors: usize,
    pub elapsed: Duration,
    pub answer_bytes: usize,
    pub latency: Option<Summary>,
    pub idle: Mem,
    pub after: Mem,
}

impl fmt::Display for McsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rps = rate(self.requests, self.elapsed);
        writeln!(
            f,
            "mcs: {} clients, {} requests ({} errors) in {:.1} s, answer {} KiB",
            self.clients,
            self.requests,
            self.errors,
            self.elapsed.as_secs_f64(),
            self.answer_bytes / 1024
        )?;
        writeln!(
            f,
            "  throughput: {rps:.0} requests/s (goal >= {GOAL_RPS:.0}: {})",
            if rps >= GOAL_RPS { "met" } else { "NOT met" }
        )?;
        if let Some(l) = &self.latency {
            writeln!(f, "  latency: {l}")?;
        }
        writeln!(
            f,
            "  server RSS: idle {}, after {}, peak {} (goal <= {}: {})",
            mib(self.idle.rss_kib),
            mib(self.after.rss_kib),
            mib(self.after.hwm_kib),
            mib(GOAL_RSS_KIB),
            if self.after.hwm_kib <= GOAL_RSS_KIB {
                "met"
            } else {
                "NOT met"
            }
        )
    }
}

/// A bootstrap directory with pool `worker` on a rendered config of `files` files and units.
fn write_bootstrap(dir: &Path, files: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("machine-pools"))?;
    std::fs::create_dir_all(dir.join("machine-configs"))?;
    let chunk = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 3 * 1024]);
    let file_list: Vec<_> = (0..files)
        .map(|i| {
            json!({"path": format!("/etc/mco-bench/file-{i}.conf"), "mode": 420,
                   "overwrite": true, "contents": {"source": format!("data:;base64,{chunk}")}})
        })
        .collect();
    let units: Vec<_> = (0..files / 4)
        .map(|i| {
            json!({"name": format!("bench-{i}.service"), "enabled": true,
                   "contents": "[Unit]\nDescription=bench\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"})
        })
        .collect();
    let mc = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": "rendered-worker-bench"},
        "spec": {"osImageURL": "quay.io/example/os@sha256:0", "config": {
            "ignition": {"version": "3.5.0"},
            "storage": {"files": file_list}, "systemd": {"units": units},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA bench"]}]}}}});
    let pool = json!({"apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool", "metadata": {"name": "worker"}, "spec": {},
        "status": {"configuration": {"name": "rendered-worker-bench"}}});
    // JSON is YAML.
    std::fs::write(dir.join("machine-pools/worker.yaml"), pool.to_string())?;
    std::fs::write(
        dir.join("machine-configs/rendered-worker-bench.yaml"),
        mc.to_string(),
    )?;
    Ok(())
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One request on a fresh connection; the answer's size.
async fn fetch(
    tls: &tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
) -> anyhow::Result<usize> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let mut s = tls
        .connect(ServerName::try_from("localhost")?.to_owned(), tcp)
        .await?;
    s.write_all(b"GET /config/worker HTTP/1.1\r\nHost: localhost\r\nAccept: application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1\r\nConnection: close\r\n\r\n").await?;
    let mut buf = Vec::with_capacity(512 * 1024);
    // A server closing without close_notify is fine here: the length is checked instead.
    let _ = s.read_to_end(&mut buf).await;
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no response head"))?;
    let head = std::str::from_utf8(&buf[..head_end])?;
    if !head.starts_with("HTTP/1.1 200") {
        anyhow::bail!("{}", head.lines().next().unwrap_or_default());
    }
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .ok_or_else(|| anyhow::anyhow!("no content-length"))?
        .parse()?;
    if buf.len() - head_end - 4 != len {
        anyhow::bail!("short answer");
    }
    Ok(len)
}

pub async fn run(opts: McsOpts) -> anyhow::Result<McsReport> {
    let scratch = tempfile::Builder::new()
        .prefix("mco-bench-mcs-")
        .tempdir_in(&opts.work_dir)?;
    let boot = scratch.path().join("boot");
    write_bootstrap(&boot, opts.files)?;
    let certs = scratch.path().join("certs");
    let log = std::fs::File::create(scratch.path().join("server.log"))?;
    let child = Command::new(&opts.mco_bin)
        .arg("server")
        .arg("--bootstrap-dir")
        .arg(&boot)
        .arg("--cert-dir")
        .arg(&certs)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let server = Server(child);
    let pid = server.0.id();
    let log_path = scratch.path().join("server.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr: std::net::SocketAddr = loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some(a) = text
            .split("https://")
            .nth(1)
            .and_then(|r| r.split("/config/").next())
        {
            break a.parse()?;
        }
        if Instant::now() > deadline {
            anyhow::bail!("mco server did not start: {text}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(certs.join("ca.crt"))? {
        roots.add(c?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let idle = procfs::read_mem(pid)?;
    // One request first: the answer is assembled once, then served from memory.
    let answer_bytes = fetch(&tls, addr).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..opts.clients.max(1) {
        let (tls, stop) = (tls.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut lat, mut errors) = (Vec::new(), 0usize);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match fetch(&tls, addr).await {
                    Ok(_) => lat.push(t.elapsed()),
                    Err(_) => errors += 1,
                }
            }
            (lat, errors)
        }));
    }
    tokio::time::sleep(opts.duration).await;
    stop.store(true, Ordering::Relaxed);
    let (mut lat, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (l, e) = t.await?;
        lat.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed();
    let after = procfs::read_mem(pid)?;
    drop(server);
    Ok(McsReport {
        clients: opts.clients,
        requests: lat.len(),
        errors,
        elapsed,
        answer_bytes,
        latency: summarize(&mut lat),
        idle,
        after,
    })
}
