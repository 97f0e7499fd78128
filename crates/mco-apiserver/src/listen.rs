//! Accepting connections within limits: a cap on open connections (so descriptors remain
//! for the store and everything else in the process), a TLS handshake timeout, an idle
//! timeout for connections with no request in flight, and a backoff with one log line per
//! interval when `accept` fails. Without them, 20,000 silent TCP connections exhausted the
//! descriptors and the accept loop spun logging `Too many open files`.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::Limits;

/// Go's net/http schedule after a failed accept: 5 ms, doubling, at most 1 s.
const FIRST_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_secs(1);
/// At most one `accept failed` line per this interval.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What to do after each failed `accept`: wait, and now and then say so.
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff {
    delay: Option<Duration>,
    /// Failures not yet reported.
    unreported: u64,
    last_log: Option<Instant>,
}

impl AcceptBackoff {
    /// After a failure at `now`: how long to wait before the next accept, and the number of
    /// failures to report in one log line if one is due.
    pub(crate) fn failed(&mut self, now: Instant) -> (Duration, Option<u64>) {
        let delay = self.delay.map_or(FIRST_DELAY, |d| (d * 2).min(MAX_DELAY));
        self.delay = Some(delay);
        self.unreported += 1;
        let due = self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= LOG_INTERVAL);
        if !due {
            return (delay, None);
        }
        self.last_log = Some(now);
        (delay, Some(std::mem::take(&mut self.unreported)))
    }

    pub(crate) fn succeeded(&mut self) {
        self.delay = None;
    }
}

/// The default connection cap: half the process's soft descriptor limit, at least 64.
pub(crate) fn default_max_connections() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20);
    usize::try_from(soft / 2).unwrap_or(usize::MAX).max(64)
}

/// Requests in flight on one connection, and since when it has had none.
struct Activity {
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// When the connection turns idle, if it has nothing in flight.
    fn idle_since(&self) -> Option<Instant> {
        let since = *self.idle_since.lock().unwrap_or_else(|e| e.into_inner());
        (self.in_flight.load(Ordering::SeqCst) == 0).then_some(since)
    }
}

/// One request, in flight until its response body is finished or dropped (so a watch
/// keeps its connection from being idle for as long as it streams).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut since = self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner());
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *since = Instant::now();
        }
    }
}

/// A response body that holds its request's [`InFlight`].
struct Tracked<B> {
    inner: B,
    _req: InFlight,
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `router` on `listener` until `stop` changes, within `limits`; `slots` holds one
/// permit per connection that may be open.
pub(crate) async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    limits: Limits,
    slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = AcceptBackoff::default();
    loop {
        // At the cap, wait for a slot before accepting: further clients queue in the
        // kernel's backlog, which costs this process no descriptor.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stop.changed() => return,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => { backoff.succeeded(); tcp }
                Err(e) => {
                    let (delay, report) = backoff.failed(Instant::now());
                    if let Some(n) = report {
                        tracing::warn!(error = %e, failures = n, "accept failed");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => continue,
                        _ = stop.changed() => return,
                    }
                }
            },
            _ = stop.changed() => return,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let stop = stop.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(Ok(tls)) =
                tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(tcp)).await
            else {
                return;
            };
            connection(tls, router, limits.idle_timeout, stop).await;
        });
    }
}

async fn connection(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    router: axum::Router,
    idle_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity {
        in_flight: AtomicUsize::new(0),
        idle_since: Mutex::new(Instant::now()),
    });
    let act = activity.clone();
    // The chain the client sent in the handshake, judged on each request (`client_cert`).
    let peer = tls.get_ref().1.peer_certificates().map(|chain| {
        crate::client_cert::PeerChain(chain.iter().map(|c| c.clone().into_owned()).collect())
    });
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let req_guard = act.start();
        if let Some(p) = &peer {
            req.extensions_mut().insert(p.clone());
        }
        let fut = router.clone().oneshot(req.map(axum::body::Body::new));
        async move {
            let resp = fut.await?;
            Ok::<_, std::convert::Infallible>(resp.map(|b| Tracked {
                inner: b,
                _req: req_guard,
            }))
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
    tokio::pin!(conn);
    loop {
        let wake = match activity.idle_since() {
            Some(s) if s.elapsed() >= idle_timeout => break,
            Some(s) => s + idle_timeout,
            // Busy (a watch may stream for minutes): look again a timeout later.
            None => Instant::now() + idle_timeout,
        };
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = stop.changed() => break,
        }
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_second_and_resets() {
        let mut b = AcceptBackoff::default();
        let t = Instant::now();
        let delays: Vec<_> = (0..10).map(|_| b.failed(t).0.as_millis()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(t).0, FIRST_DELAY);
    }

    #[test]
    fn one_log_line_per_interval_counts_the_failures() {
        let mut b = AcceptBackoff::default();
        let t0 = Instant::now();
        assert_eq!(b.failed(t0).1, Some(1));
        let lines = (1..=1000u32)
            .filter(|i| {
                b.failed(t0 + LOG_INTERVAL * *i / 1000 - Duration::from_nanos(1))
                    .1
                    .is_some()
            })
            .count();
        assert_eq!(lines, 0, "no second line within the interval");
        assert_eq!(b.failed(t0 + LOG_INTERVAL).1, Some(1001));
    }

    #[test]
    fn the_default_cap_leaves_half_the_descriptors() {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap();
        let cap = default_max_connections() as u64;
        assert!(
            cap >= 64 && (cap <= soft / 2 || cap == 64),
            "{cap} of {soft}"
        );
    }
}
