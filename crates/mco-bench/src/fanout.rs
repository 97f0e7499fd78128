//! Watch fan-out: many watchers, each with its own `metadata.name` field selector (as
//! the daemons watch their own node), while updates spread over their objects land.
//! Latency runs from the update's acknowledgement (and, for reference, from just
//! before it was sent) to the matching watcher receiving the event.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::stats::{self, Summary, rate};
use crate::support::{LocalServer, poll, typed};
use crate::{Error, procfs};

/// Goal: p99 delivery latency.
pub const GOAL_P99: Duration = Duration::from_millis(100);
/// Annotation carrying the send time, in nanoseconds since the run's shared epoch.
const SENT: &str = "bench.mco/sent-ns";

#[derive(Debug, Clone)]
pub struct FanoutOpts {
    pub watchers: usize,
    pub updates: usize,
    /// Concurrent updaters, each with its own client.
    pub writers: usize,
    /// Hard time bound of each phase.
    pub max: Duration,
    pub work_dir: PathBuf,
}

impl Default for FanoutOpts {
    fn default() -> Self {
        FanoutOpts {
            watchers: 1000,
            updates: 10_000,
            writers: 32,
            max: Duration::from_secs(120),
            work_dir: std::env::temp_dir(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct FanoutReport {
    pub opts: FanoutOpts,
    pub open_files_limit: String,
    /// Time to open every watch stream.
    pub setup: Duration,
    pub updates_acked: usize,
    pub update_phase: Duration,
    pub expected: usize,
    pub delivered: usize,
    /// Events that reached their watcher before the updater saw the acknowledgement.
    pub before_ack: usize,
    pub from_ack: Option<Summary>,
    pub from_send: Option<Summary>,
}

impl FanoutReport {
    pub fn goal_met(&self) -> bool {
        self.delivered == self.expected && self.from_ack.is_some_and(|s| s.p99 < GOAL_P99)
    }
}

impl fmt::Display for FanoutReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.opts;
        writeln!(
            f,
            "watch fan-out: {} watchers (field selector metadata.name=<own>, HTTP/1.1, one TLS connection each), {} updates from {} writers; open files limit {}",
            o.watchers, o.updates, o.writers, self.open_files_limit
        )?;
        writeln!(f, "  watches opened in {:.2} s", self.setup.as_secs_f64())?;
        writeln!(
            f,
            "  {} updates acknowledged in {:.2} s ({:.0} updates/s)",
            self.updates_acked,
            self.update_phase.as_secs_f64(),
            rate(self.updates_acked, self.update_phase)
        )?;
        writeln!(
            f,
            "  delivered {}/{} events ({} before the updater saw its acknowledgement)",
            self.delivered, self.expected, self.before_ack
        )?;
        let show = |s: &Option<Summary>| {
            s.map(|s| s.to_string())
                .unwrap_or_else(|| "no samples".into())
        };
        writeln!(f, "  latency ack -> event:  {}", show(&self.from_ack))?;
        writeln!(f, "  latency send -> event: {}", show(&self.from_send))?;
        write!(
            f,
            "  goal (every event delivered, p99 ack -> event < {}): {}",
            stats::ms(GOAL_P99),
            if self.goal_met() { "MET" } else { "MISSED" }
        )
    }
}

fn name(i: usize) -> String {
    format!("fan-{i:05}")
}

/// Updates `j` with `j % watchers == i` go to object `i`.
fn expected_for(i: usize, watchers: usize, updates: usize) -> usize {
    updates / watchers + usize::from(i < updates % watchers)
}

/// One received event: object index, resourceVersion, receive and send times (ns).
type Sample = (usize, u64, u64, u64);

fn rv_of(cm: &ConfigMap) -> u64 {
    cm.metadata
        .resource_version
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn nanos(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

pub async fn run(opts: FanoutOpts) -> Result<FanoutReport, Error> {
    let n = opts.watchers.max(1);
    let max_secs = opts.max.as_secs().max(1);
    let server = LocalServer::start(&opts.work_dir).await?;
    let admin = server.admin().await?;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm: ConfigMap =
                    typed(json!({"metadata": {"name": name(i)}, "data": {"i": i.to_string()}}))?;
                api.create(&PostParams::default(), &cm).await?;
                Ok::<_, Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    let rv0 = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();

    let epoch = Instant::now();
    let opened = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let delivered = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Bounds concurrent TLS handshakes while the streams open.
    let connecting = Arc::new(tokio::sync::Semaphore::new(64));
    let watch_timeout = (max_secs * 2 + 30).min(290) as u32;
    let setup_start = Instant::now();
    let watchers: Vec<_> = (0..n)
        .map(|i| {
            let (api, rv0) = (api.clone(), rv0.clone());
            let (opened, failed, delivered) = (opened.clone(), failed.clone(), delivered.clone());
            let (connecting, mut stopped) = (connecting.clone(), stopped.clone());
            let want = expected_for(i, n, opts.updates);
            tokio::spawn(async move {
                let wp = WatchParams::default()
                    .fields(&format!("metadata.name={}", name(i)))
                    .timeout(watch_timeout);
                let stream = {
                    let _permit = connecting.acquire().await;
                    match api.watch(&wp, &rv0).await {
                        Ok(s) => s,
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            return Err(Error::from(e));
                        }
                    }
                };
                opened.fetch_add(1, Ordering::Relaxed);
                let mut stream = std::pin::pin!(stream);
                let mut got: Vec<Sample> = Vec::with_capacity(want);
                while got.len() < want {
                    tokio::select! {
                        ev = stream.next() => match ev {
                            Some(Ok(WatchEvent::Modified(cm))) => {
                                let recv = nanos(epoch);
                                let sent = cm.metadata.annotations.as_ref()
                                    .and_then(|a| a.get(SENT)?.parse().ok())
                                    .unwrap_or(recv);
                                got.push((i, rv_of(&cm), recv, sent));
                                delivered.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(Ok(WatchEvent::Error(s))) => {
                                return Err(Error::Bench(format!("watch {}: {}", name(i), s.message)));
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return Err(e.into()),
                            None => break,
                        },
                        _ = stopped.changed() => break,
                    }
                }
                Ok(got)
            })
        })
        .collect();
    poll("every watch stream to open", max_secs, || {
        let done = opened.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed);
        async move { (done >= n).then_some(()) }
    })
    .await?;
    let setup = setup_start.elapsed();
    if failed.load(Ordering::Relaxed) > 0 {
        let _ = stop.send(true);
        for w in watchers {
            if let Ok(Err(e)) = w.await {
                return Err(e);
            }
        }
        return Err(Error::Bench("a watch failed to open".into()));
    }

    let writers = opts.writers.max(1);
    let update_start = Instant::now();
    let deadline = update_start + opts.max;
    let mut writer_tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let api: Api<ConfigMap> = Api::namespaced(server.admin().await?, "default");
        let updates = opts.updates;
        writer_tasks.push(tokio::spawn(async move {
            let mut acks: Vec<(usize, u64, u64)> = Vec::new();
            for j in (w..updates).step_by(writers) {
                if Instant::now() >= deadline {
                    break;
                }
                let i = j % n;
                let patch = json!({"metadata": {"annotations": {SENT: nanos(epoch).to_string()}}});
                let cm = api
                    .patch(&name(i), &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                acks.push((i, rv_of(&cm), nanos(epoch)));
            }
            Ok::<_, Error>(acks)
        }));
    }
    let mut acked: HashMap<(usize, u64), u64> = HashMap::new();
    for t in writer_tasks {
        let acks = t
            .await
            .map_err(|e| Error::Bench(format!("writer task: {e}")))??;
        acked.extend(acks.into_iter().map(|(i, rv, at)| ((i, rv), at)));
    }
    let update_phase = update_start.elapsed();
    let expected = acked.len();
    // Events still in flight when the last acknowledgement came back get a bounded grace.
    let _ = poll("every event to be delivered", max_secs, || {
        let d = delivered.load(Ordering::Relaxed);
        async move { (d >= expected).then_some(()) }
    })
    .await;
    let _ = stop.send(true);

    let mut samples: Vec<Sample> = Vec::new();
    for w in watchers {
        samples.extend(
            w.await
                .map_err(|e| Error::Bench(format!("watcher task: {e}")))??,
        );
    }
    server.handle.shutdown().await;

    let mut from_ack = Vec::with_capacity(samples.len());
    let mut from_send = Vec::with_capacity(samples.len());
    let mut before_ack = 0;
    for (i, rv, recv, sent) in &samples {
        from_send.push(Duration::from_nanos(recv.saturating_sub(*sent)));
        if let Some(ack) = acked.get(&(*i, *rv)) {
            if recv < ack {
                before_ack += 1;
            }
            from_ack.push(Duration::from_nanos(recv.saturating_sub(*ack)));
        }
    }
    Ok(FanoutReport {
        open_files_limit: procfs::open_files_limit(),
        setup,
        updates_acked: expected,
        update_phase,
        expected,
        delivered: samples.len(),
        before_ack,
        from_ack: stats::summarize(&mut from_ack),
        from_send: stats::summarize(&mut from_send),
        opts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_spread_evenly_over_objects() {
        let per: Vec<usize> = (0..4).map(|i| expected_for(i, 4, 10)).collect();
        assert_eq!(per, vec![3, 3, 2, 2]);
        assert_eq!(
            (0..1000)
                .map(|i| expected_for(i, 1000, 10_000))
                .sum::<usize>(),
            10_000
        );
    }
}
