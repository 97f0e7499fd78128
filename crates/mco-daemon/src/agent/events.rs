//! The daemon's Node events, sent as upstream's daemon sends them: core/v1 Events in mco's
//! namespace (upstream's recorder puts events about cluster-scoped objects in its own
//! namespace, `openshift-machine-config-operator`, never in `default`), with the Node's
//! reference carrying that namespace, named `<node>.<hex nanoseconds>`, from source
//! `machineconfigdaemon` on the node's host, in upstream's reasons and words.
//!
//! Sending is off the update's path: [`EventSink::emit`] queues and returns, and one task per
//! daemon sends in order, as client-go's recorder does, through its correlation
//! ([`crate::agent::correlate`]): a repeat is counted on the Event already recorded (a patch of
//! `count`, `lastTimestamp` and `message`), and alike events with many messages are combined,
//! so a Degraded daemon retrying every minute shows one Event with a growing count. Both limits
//! are client-go's: at most [`QUEUE`] events wait (more are dropped, as its broadcaster drops
//! when full), and a token bucket of [`BURST`] events refilled one per [`REFILL`] per daemon
//! process (`EventSourceObjectSpamFilter`), so a loop that fails and retries cannot flood the
//! server.
//! A reboot request first waits, briefly, for what is queued ([`EventSink::flush`]), so the
//! `Reboot` event is not lost with the process.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot};

use crate::agent::correlate::{Correlator, Send};
use crate::engine::NodeEvent;

/// Upstream's event source component for its daemon.
pub const COMPONENT: &str = "machineconfigdaemon";
/// Events waiting to be sent; more are dropped.
pub const QUEUE: usize = 64;
/// Events sent at once before the bucket limits them (client-go's `defaultSpamBurst`).
pub const BURST: u32 = 25;
/// One more event allowed per this long (client-go's `defaultSpamQPS`, 1/300).
pub const REFILL: Duration = Duration::from_secs(300);

/// A token bucket: [`BURST`] tokens, one more per [`REFILL`].
#[derive(Debug, Clone)]
pub struct Bucket {
    tokens: u32,
    since: Instant,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn new(now: Instant) -> Bucket {
        Bucket {
            tokens: BURST,
            since: now,
        }
    }

    /// Takes a token at `now`, if one is left.
    pub fn take(&mut self, now: Instant) -> bool {
        let refills = now.saturating_duration_since(self.since).as_secs() / REFILL.as_secs();
        if refills > 0 {
            self.tokens = self
                .tokens
                .saturating_add(u32::try_from(refills).unwrap_or(u32::MAX))
                .min(BURST);
            self.since += REFILL * u32::try_from(refills).unwrap_or(u32::MAX);
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// The Event upstream's recorder makes for `event` on Node `node` (with its `uid` when known)
/// at `now`, recorded in `namespace`, mco's own.
pub fn event_object(
    namespace: &str,
    node: &str,
    uid: Option<&str>,
    event: &NodeEvent,
    now: jiff::Timestamp,
) -> Event {
    let time = Time(now);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{node}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        // A core Event must be in its involved object's namespace (or, for one without, in
        // `default`): the Node's reference names mco's, as upstream's does.
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            namespace: Some(namespace.into()),
            uid: uid.map(str::to_owned),
            ..Default::default()
        },
        type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
        reason: Some(event.reason.into()),
        message: Some(event.message.clone()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.into()),
        }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.into()),
        first_timestamp: Some(time.clone()),
        last_timestamp: Some(time),
        count: Some(1),
        ..Default::default()
    }
}

enum Queued {
    Event(Box<Event>),
    Flush(oneshot::Sender<()>),
}

/// Queues a daemon's events for its sending task ([`EventSink::new`]).
#[derive(Clone)]
pub struct EventSink {
    namespace: String,
    node: String,
    tx: mpsc::Sender<Queued>,
}

/// The task that sends what an [`EventSink`] queues, until every sink is dropped.
pub struct EventTask {
    api: Api<Event>,
    rx: mpsc::Receiver<Queued>,
}

impl EventSink {
    /// A sink for Node `node`'s events, recorded in `namespace` through `client` by the
    /// returned task once it runs.
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        node: impl Into<String>,
    ) -> (EventSink, EventTask) {
        let namespace = namespace.into();
        let (tx, rx) = mpsc::channel(QUEUE);
        (
            EventSink {
                node: node.into(),
                tx,
                namespace: namespace.clone(),
            },
            EventTask {
                api: Api::namespaced(client, &namespace),
                rx,
            },
        )
    }

    /// Queues `event` about the Node (whose `uid` is given when known); false when the queue
    /// is full or its task gone, and the event dropped.
    pub fn emit(&self, event: &NodeEvent, uid: Option<&str>) -> bool {
        let ev = event_object(
            &self.namespace,
            &self.node,
            uid,
            event,
            jiff::Timestamp::now(),
        );
        match self.tx.try_send(Queued::Event(Box::new(ev))) {
            Ok(()) => true,
            Err(_) => {
                tracing::debug!(reason = event.reason, "event queue full; event dropped");
                false
            }
        }
    }

    /// Waits, at most `limit`, until everything queued before the call is sent (or refused).
    pub async fn flush(&self, limit: Duration) {
        let (done, sent) = oneshot::channel();
        let queued = tokio::time::timeout(limit, self.tx.send(Queued::Flush(done)));
        let start = Instant::now();
        if let Ok(Ok(())) = queued.await {
            let left = limit.saturating_sub(start.elapsed());
            let _ = tokio::time::timeout(left, sent).await;
        }
    }
}

impl EventTask {
    /// Sends in order until every sink is dropped. Refused events are logged, not retried: a
    /// recorder is best effort.
    pub async fn run(mut self) {
        let mut bucket = Bucket::new(Instant::now());
        let mut correlator = Correlator::default();
        while let Some(q) = self.rx.recv().await {
            match q {
                Queued::Flush(done) => {
                    let _ = done.send(());
                }
                Queued::Event(ev) => {
                    let reason = ev.reason.clone().unwrap_or_default();
                    // Correlated before the bucket, as client-go does: a dropped repeat still
                    // counts, and the next one sent carries it.
                    let send = correlator.correlate(*ev, jiff::Timestamp::now());
                    if !bucket.take(Instant::now()) {
                        tracing::debug!(%reason, "event rate limit reached; event dropped");
                        continue;
                    }
                    match self.send(send).await {
                        Ok(recorded) => correlator.recorded(&recorded),
                        Err(e) => tracing::debug!(error = %e, %reason, "event not recorded"),
                    }
                }
            }
        }
    }

    /// Creates or patches, as `send` says; a repeat of an Event deleted meanwhile (404) is
    /// created again, as client-go does.
    async fn send(&self, send: Send) -> Result<Event, kube::Error> {
        match send {
            Send::Create(ev) => self.api.create(&PostParams::default(), &ev).await,
            Send::Patch { name, body, event } => {
                let patched = self
                    .api
                    .patch(&name, &PatchParams::default(), &Patch::Strategic(&body))
                    .await;
                match patched {
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        self.api.create(&PostParams::default(), &event).await
                    }
                    other => other,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_one_per_refill() {
        let t0 = Instant::now();
        let mut b = Bucket::new(t0);
        for i in 0..BURST {
            assert!(b.take(t0), "event {i} of the burst");
        }
        assert!(!b.take(t0), "the burst is {BURST}");
        assert!(!b.take(t0 + REFILL - Duration::from_secs(1)));
        assert!(b.take(t0 + REFILL));
        assert!(!b.take(t0 + REFILL));
        // A long quiet spell refills the whole burst, no more.
        let later = t0 + REFILL * 1000;
        for _ in 0..BURST {
            assert!(b.take(later));
        }
        assert!(!b.take(later));
    }

    #[test]
    fn events_are_named_and_sourced_as_upstreams_recorder_does() {
        let now: jiff::Timestamp = "2026-12-06T20:00:00.123456789Z".parse().unwrap();
        let ev = event_object(
            "mco-system",
            "worker-0",
            Some("uid-1"),
            &NodeEvent::normal("Reboot", "Node will reboot into config rendered-worker-1"),
            now,
        );
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(
            v["metadata"]["name"],
            format!("worker-0.{:x}", now.as_nanosecond())
        );
        assert_eq!(v["metadata"]["namespace"], "mco-system");
        assert_eq!(
            v["involvedObject"],
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": "worker-0",
                               "namespace": "mco-system", "uid": "uid-1"})
        );
        assert_eq!(v["type"], "Normal");
        assert_eq!(v["reason"], "Reboot");
        assert_eq!(
            v["source"],
            serde_json::json!({"component": "machineconfigdaemon", "host": "worker-0"})
        );
        assert_eq!(v["reportingComponent"], "machineconfigdaemon");
        assert_eq!(v["reportingInstance"], "worker-0");
        assert_eq!(v["count"], 1);
        assert_eq!(v["firstTimestamp"], v["lastTimestamp"]);
        let warning = event_object(
            "ns",
            "n",
            None,
            &NodeEvent::warning("FailedToDrain", "x"),
            now,
        );
        assert_eq!(warning.type_.as_deref(), Some("Warning"));
        assert!(warning.involved_object.uid.is_none());
    }

    /// Against the API server: the same event twice is one Event with `count: 2`, and a
    /// repeat of one deleted meanwhile creates it again with its count.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repeat_is_counted_on_the_recorded_event() {
        let server = mco_testkit::server::start().await;
        let admin = server.admin().await;
        mco_testkit::server::install_namespace(&admin).await;
        let ns = mco_api::constants::names::DEFAULT_NAMESPACE;
        let node = server
            .handle
            .client_for(mco_apiserver::Identity::Node("worker-0".into()))
            .await
            .unwrap();
        let (sink, task) = EventSink::new(node, ns, "worker-0");
        let task = tokio::spawn(task.run());
        let failed = NodeEvent::warning(
            "OnDiskStateValidationFailed",
            "unexpected on-disk state validating against rendered-worker-1",
        );
        let events: Api<Event> = Api::namespaced(admin, ns);
        let mut name = None;
        for count in [1, 2] {
            assert!(sink.emit(&failed, Some("uid-1")));
            sink.flush(Duration::from_secs(30)).await;
            let list = events.list(&Default::default()).await.unwrap().items;
            assert_eq!(list.len(), 1, "{list:#?}");
            assert_eq!(list[0].count, Some(count), "{list:#?}");
            assert_eq!(list[0].message.as_deref(), Some(failed.message.as_str()));
            name.get_or_insert(list[0].metadata.name.clone().unwrap());
            assert_eq!(list[0].metadata.name.as_ref(), name.as_ref());
        }
        let name = name.unwrap();
        events.delete(&name, &Default::default()).await.unwrap();
        assert!(sink.emit(&failed, Some("uid-1")));
        sink.flush(Duration::from_secs(30)).await;
        let list = events.list(&Default::default()).await.unwrap().items;
        assert_eq!(list.len(), 1, "{list:#?}");
        assert_eq!(list[0].metadata.name.as_deref(), Some(name.as_str()));
        assert_eq!(list[0].count, Some(3));
        drop(sink);
        task.await.unwrap();
        server.handle.shutdown().await;
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_says_so() {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        // No task runs: nothing leaves the queue.
        let (sink, _task) = EventSink::new(client, "mco-system", "worker-0");
        let ev = NodeEvent::normal("Drain", "Draining node to update config.");
        for i in 0..QUEUE {
            assert!(sink.emit(&ev, None), "event {i} fits");
        }
        assert!(!sink.emit(&ev, None), "the queue holds {QUEUE}");
        // A flush with nothing sending gives up at its limit.
        let start = Instant::now();
        sink.flush(Duration::from_millis(100)).await;
        assert!(start.elapsed() >= Duration::from_millis(100));
    }
}
