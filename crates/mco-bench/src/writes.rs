//! Durable write throughput: concurrent kube-rs clients creating ConfigMaps over HTTPS,
//! against raw SQLite inserts with the same sync settings, in the same run.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::Error;
use crate::floor::{self, FloorRun, Sharing};
use crate::stats::{self, Summary, ratio};
use crate::support::{LocalServer, scratch_dir, typed};

/// Goal: writes per second on the reference 2-core machine.
pub const GOAL_WRITES_PER_SEC: f64 = 2000.0;
/// Goal: the server's rate as a fraction of the raw-SQLite per-commit floor.
pub const GOAL_FLOOR_RATIO: f64 = 0.25;

#[derive(Debug, Clone)]
pub struct WritesOpts {
    /// Concurrent writers (kube-rs clients, and SQLite threads for the floor).
    pub clients: usize,
    /// Writes in total, for the server and for each floor variant.
    pub count: usize,
    /// Size of the one data value of each ConfigMap.
    pub value_bytes: usize,
    /// One `kube::Client` shared by every writer instead of one each.
    pub shared_client: bool,
    /// Rows per transaction in the batched floor.
    pub batch: usize,
    /// Hard time bound of each phase.
    pub max: Duration,
    /// Where the databases go (the disk under test).
    pub work_dir: PathBuf,
}

impl Default for WritesOpts {
    fn default() -> Self {
        WritesOpts {
            clients: 32,
            count: 20_000,
            value_bytes: 256,
            shared_client: false,
            batch: 256,
            max: Duration::from_secs(120),
            work_dir: std::env::temp_dir(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WritesReport {
    pub opts: WritesOpts,
    /// Bytes of one stored row (the object's JSON as the server returned it).
    pub row_bytes: usize,
    pub server: FloorRun,
    pub latency: Option<Summary>,
    pub floor_own: FloorRun,
    pub floor_shared: FloorRun,
    pub floor_batched: FloorRun,
}

impl WritesReport {
    pub fn server_rate(&self) -> f64 {
        self.server.per_sec()
    }

    /// The floor the server is held to: the better of the two per-commit variants, since
    /// each acknowledged server write is durable too.
    pub fn floor_rate(&self) -> f64 {
        self.floor_own.per_sec().max(self.floor_shared.per_sec())
    }

    pub fn ratio(&self) -> f64 {
        ratio(self.server_rate(), self.floor_rate())
    }

    pub fn goal_met(&self) -> bool {
        self.server_rate() >= GOAL_WRITES_PER_SEC && self.ratio() >= GOAL_FLOOR_RATIO
    }
}

fn line(f: &mut fmt::Formatter<'_>, what: &str, r: &FloorRun) -> fmt::Result {
    writeln!(
        f,
        "  {what:<44} {:>9.0} writes/s  ({} writes in {:.2} s)",
        r.per_sec(),
        r.writes,
        r.elapsed.as_secs_f64()
    )
}

impl fmt::Display for WritesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.opts;
        writeln!(
            f,
            "durable writes: {} clients ({}), {} ConfigMaps, row {} bytes, data in {}",
            o.clients,
            if o.shared_client {
                "one shared kube::Client"
            } else {
                "one kube::Client each"
            },
            o.count,
            self.row_bytes,
            o.work_dir.display()
        )?;
        line(f, "server (kube-rs create over HTTPS)", &self.server)?;
        if let Some(l) = &self.latency {
            writeln!(f, "  server create latency: {l}")?;
        }
        line(
            f,
            &format!("raw SQLite, commit per insert, {} conns", o.clients),
            &self.floor_own,
        )?;
        line(
            f,
            &format!("raw SQLite, commit per insert, 1 conn/{} thr", o.clients),
            &self.floor_shared,
        )?;
        line(
            f,
            &format!("raw SQLite, {} rows per commit (ceiling)", o.batch),
            &self.floor_batched,
        )?;
        writeln!(
            f,
            "  server / per-commit floor = {:.2}; server / batched ceiling = {:.2}",
            self.ratio(),
            ratio(self.server_rate(), self.floor_batched.per_sec())
        )?;
        write!(
            f,
            "  goal (>= {GOAL_WRITES_PER_SEC:.0} writes/s and >= {:.0}% of floor): {}",
            GOAL_FLOOR_RATIO * 100.0,
            if self.goal_met() { "MET" } else { "MISSED" }
        )
    }
}

fn configmap(name: &str, value: &str) -> Result<ConfigMap, Error> {
    typed(json!({"metadata": {"name": name}, "data": {"payload": value}}))
}

pub async fn run(opts: WritesOpts) -> Result<WritesReport, Error> {
    let clients = opts.clients.max(1);
    let value = "v".repeat(opts.value_bytes);
    let server = LocalServer::start(&opts.work_dir).await?;
    let mut apis = Vec::with_capacity(clients);
    let shared = server.admin().await?;
    for _ in 0..clients {
        let c = if opts.shared_client {
            shared.clone()
        } else {
            server.admin().await?
        };
        apis.push(Api::<ConfigMap>::namespaced(c, "default"));
    }
    // Warm up: each writer opens its connection before the clock starts.
    let mut row_bytes = 0;
    for (i, api) in apis.iter().enumerate() {
        let created = api
            .create(
                &PostParams::default(),
                &configmap(&format!("warm-{i}"), &value)?,
            )
            .await?;
        row_bytes = serde_json::to_string(&created)
            .map(|s| s.len())
            .unwrap_or(0);
    }
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let deadline = start + opts.max;
    let tasks: Vec<_> = apis
        .into_iter()
        .map(|api| {
            let (next, value, count) = (next.clone(), value.clone(), opts.count);
            tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= count || Instant::now() >= deadline {
                        return Ok::<_, Error>(lat);
                    }
                    let cm = configmap(&format!("bench-{n}"), &value)?;
                    let t = Instant::now();
                    api.create(&PostParams::default(), &cm).await?;
                    lat.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(
            t.await
                .map_err(|e| Error::Bench(format!("writer task: {e}")))??,
        );
    }
    let server_run = FloorRun {
        writes: lat.len(),
        elapsed: start.elapsed(),
    };
    server.handle.shutdown().await;

    let row = "r".repeat(row_bytes);
    let dir = scratch_dir(&opts.work_dir, "floor")?;
    let own = floor::per_commit(
        dir.path(),
        clients,
        opts.count,
        &row,
        Sharing::OwnConnection,
        opts.max,
    )?;
    let shared = floor::per_commit(
        dir.path(),
        clients,
        opts.count,
        &row,
        Sharing::SharedConnection,
        opts.max,
    )?;
    let batched = floor::batched(dir.path(), opts.count, opts.batch, &row, opts.max)?;
    let latency = stats::summarize(&mut lat);
    Ok(WritesReport {
        opts,
        row_bytes,
        server: server_run,
        latency,
        floor_own: own,
        floor_shared: shared,
        floor_batched: batched,
    })
}
