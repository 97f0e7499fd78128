//! Watch dispatch and the retained event log: committed events go only to the watches keyed to
//! them, and a watch resumes from the log until its window has moved past it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;

use super::{Event, EventType, Json, LineCache, parse};

/// A retained event as the log keeps it: the object's JSON (shared with the cache
/// while it is the current version) and the previous object's selectable metadata.
pub(super) struct Logged {
    pub rv: u64,
    pub gr: String,
    pub ns: String,
    pub name: String,
    pub typ: EventType,
    pub json: Json,
    pub old: Option<Arc<Value>>,
    /// When it was committed.
    pub at: Instant,
}

impl Logged {
    pub(super) fn event(&self) -> Arc<Event> {
        Arc::new(Event {
            rv: self.rv,
            gr: self.gr.clone(),
            ns: self.ns.clone(),
            name: self.name.clone(),
            typ: self.typ,
            obj: parse(&self.json),
            old: self.old.clone(),
            lines: LineCache::default(),
        })
    }
}

pub(super) struct Ring {
    pub events: VecDeque<Logged>,
    /// Every event with rv > window_start is in `events`.
    pub window_start: u64,
    /// What `events` hold, by [`Logged::cost`].
    pub bytes: usize,
}

impl Logged {
    /// The memory an event holds: its object's text (counted even while the cache shares
    /// it, so the bound holds once it no longer does), its key and a fixed overhead.
    pub(super) fn cost(&self) -> usize {
        const OVERHEAD: usize = 160;
        self.json.len() + self.gr.len() + self.ns.len() + self.name.len() + OVERHEAD
    }
}

impl Ring {
    pub(super) fn new(events: VecDeque<Logged>, window_start: u64) -> Ring {
        let bytes = events.iter().map(Logged::cost).sum();
        Ring {
            events,
            window_start,
            bytes,
        }
    }

    pub(super) fn push(&mut self, e: Logged) {
        self.bytes += e.cost();
        self.events.push_back(e);
    }

    /// The resourceVersion from which a watch of `gr` may resume at `now`, as kube-apiserver's
    /// watch cache of one resource holds at least its last [`HISTORY_EVENTS`] events and every
    /// event of the last [`HISTORY_WINDOW`], and no more than it needs to: the oldest event held
    /// less one, or 0 when none of `gr`'s events would have been dropped.
    pub(super) fn history_start(&self, gr: &str, now: Instant) -> u64 {
        let mut held: Option<u64> = None;
        for (newer, e) in self.events.iter().rev().filter(|e| e.gr == gr).enumerate() {
            if newer >= HISTORY_EVENTS && now.saturating_duration_since(e.at) >= HISTORY_WINDOW {
                // Dropped, and so is every older one.
                return held.map_or(0, |rv| rv - 1);
            }
            held = Some(e.rv);
        }
        0
    }

    /// Drops the oldest events until at most `events` of them, holding at most `bytes`,
    /// remain; watches resuming from before them get 410 Gone and relist.
    pub(super) fn trim(&mut self, events: u64, bytes: usize) {
        while self.events.len() as u64 > events || self.bytes > bytes {
            let Some(e) = self.events.pop_front() else {
                break;
            };
            self.bytes -= e.cost();
            self.window_start = e.rv;
        }
    }
}

/// The fewest events of one resource kube-apiserver's watch cache holds, however old
/// (`defaultLowerBoundCapacity`).
pub const HISTORY_EVENTS: usize = 100;
/// How long kube-apiserver's watch cache holds every event of a resource, at the least
/// (`DefaultEventsHistoryWindow`, and the request timeout plus 15 s, 75 s by default too).
pub const HISTORY_WINDOW: Duration = Duration::from_secs(75);

/// Which events a watch can see: a resource, optionally one namespace and one name.
/// `None` means any.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatchKey {
    pub gr: String,
    pub ns: Option<String>,
    pub name: Option<String>,
}

struct WatchSlot {
    tx: mpsc::Sender<Arc<Event>>,
    overflowed: Arc<AtomicBool>,
}

/// Open watches by key, so a committed event is handed only to the watches that
/// could match it instead of waking every watch.
#[derive(Default)]
pub(super) struct Watchers {
    next: u64,
    by_key: HashMap<WatchKey, HashMap<u64, WatchSlot>>,
    /// The resourceVersion up to which every committed event has been pushed to its watches:
    /// a watch that has taken in its feed up to here has seen everything it could up to it.
    pub(super) dispatched: u64,
}

impl Watchers {
    /// No watches, with every event up to `rv` (a store's at open) taken as dispatched.
    pub(super) fn from(rv: u64) -> Watchers {
        Watchers {
            dispatched: rv,
            ..Watchers::default()
        }
    }

    /// How many watches are open.
    pub(super) fn open(&self) -> usize {
        self.by_key.values().map(HashMap::len).sum()
    }

    /// Pushes `e` to every watch keyed to it without waiting; a full watch is closed.
    pub(super) fn dispatch(&mut self, e: &Arc<Event>) {
        self.dispatched = self.dispatched.max(e.rv);
        let ns = Some(e.ns.clone());
        let name = Some(e.name.clone());
        for (kns, kname) in [(&None, &None), (&None, &name), (&ns, &None), (&ns, &name)] {
            let key = WatchKey {
                gr: e.gr.clone(),
                ns: kns.clone(),
                name: kname.clone(),
            };
            let Some(slots) = self.by_key.get_mut(&key) else {
                continue;
            };
            slots.retain(|_, slot| match slot.tx.try_send(e.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    slot.overflowed.store(true, Ordering::Release);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
            if slots.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }
}

pub(super) fn register(
    watchers: &Arc<Mutex<Watchers>>,
    key: WatchKey,
    buffer: usize,
) -> Subscription {
    let (tx, rx) = mpsc::channel(buffer);
    let overflowed = Arc::new(AtomicBool::new(false));
    let mut w = watchers.lock().unwrap_or_else(|e| e.into_inner());
    w.next += 1;
    let id = w.next;
    w.by_key.entry(key.clone()).or_default().insert(
        id,
        WatchSlot {
            tx,
            overflowed: overflowed.clone(),
        },
    );
    Subscription {
        rx,
        overflowed,
        key,
        id,
        watchers: watchers.clone(),
    }
}

/// One open watch's feed of committed events. Dropping it unregisters the watch.
pub struct Subscription {
    rx: mpsc::Receiver<Arc<Event>>,
    overflowed: Arc<AtomicBool>,
    key: WatchKey,
    id: u64,
    watchers: Arc<Mutex<Watchers>>,
}

impl Subscription {
    /// The next event, or `None` once the feed ended; then [`Subscription::overflowed`]
    /// says whether it ended because the watch fell too far behind.
    pub async fn recv(&mut self) -> Option<Arc<Event>> {
        self.rx.recv().await
    }

    /// The next event already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<Event>> {
        self.rx.try_recv().ok()
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slots) = w.by_key.get_mut(&self.key) {
            slots.remove(&self.id);
            if slots.is_empty() {
                w.by_key.remove(&self.key);
            }
        }
    }
}

/// What the retained event log keeps of an event's previous object: enough for label
/// and `metadata.*` field selectors to see transitions on resume, without holding a
/// second full copy of every recently changed object.
pub(super) fn metadata_only(v: &Value) -> Value {
    let m = &v["metadata"];
    let mut meta = serde_json::Map::new();
    for k in ["name", "namespace", "labels"] {
        if let Some(x) = m.get(k) {
            meta.insert(k.into(), x.clone());
        }
    }
    serde_json::json!({ "metadata": meta })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::event;

    fn register(w: &Arc<Mutex<Watchers>>, ns: Option<&str>, name: Option<&str>) -> Subscription {
        let key = WatchKey {
            gr: "/configmaps".into(),
            ns: ns.map(String::from),
            name: name.map(String::from),
        };
        super::register(w, key, 2)
    }

    /// A ring of `n` events of `gr` (rv 1..=n, the oldest `age` old at `now`, the others newer)
    /// with another resource's event between each two.
    fn ring(n: u64, age: Duration, now: Instant) -> Ring {
        let logged = |rv: u64, gr: &str, at: Instant| Logged {
            rv,
            gr: gr.into(),
            ns: String::new(),
            name: "x".into(),
            typ: EventType::Modified,
            json: Json::from("{}"),
            old: None,
            at,
        };
        let mut events = VecDeque::new();
        for i in 0..n {
            let at = if i == 0 { now - age } else { now };
            events.push_back(logged(2 * i + 1, "/nodes", at));
            events.push_back(logged(
                2 * i + 2,
                "/pods",
                now - age - Duration::from_secs(1),
            ));
        }
        Ring::new(events, 0)
    }

    #[test]
    fn a_resource_holds_its_last_100_events_and_every_one_of_the_last_75_s() {
        let now = Instant::now() + HISTORY_WINDOW + Duration::from_secs(10);
        let n = HISTORY_EVENTS as u64;
        // At the limit of both: the oldest event of the 101 is exactly 75 s old, so it goes,
        // and a watch may resume from the next one's version less one (as kube says "(rv)").
        assert_eq!(
            ring(n + 1, HISTORY_WINDOW, now).history_start("/nodes", now),
            2
        );
        // A moment younger, it is held.
        let fresh = HISTORY_WINDOW - Duration::from_millis(1);
        assert_eq!(ring(n + 1, fresh, now).history_start("/nodes", now), 0);
        // The last 100 are held however old; other resources' events do not count.
        assert_eq!(
            ring(n, HISTORY_WINDOW * 10, now).history_start("/nodes", now),
            0
        );
        // The other resource's 101 events are all old: its first goes.
        assert_eq!(ring(n + 1, fresh, now).history_start("/pods", now), 3);
    }

    #[test]
    fn events_reach_only_watches_keyed_to_them() {
        let w = Arc::new(Mutex::new(Watchers::default()));
        let mut all = register(&w, None, None);
        let mut in_ns = register(&w, Some("a"), None);
        let mut named = register(&w, Some("a"), Some("x"));
        let mut other = register(&w, None, Some("y"));
        w.lock().unwrap().dispatch(&event(1, "a", "x"));
        assert_eq!(all.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert_eq!(in_ns.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert_eq!(named.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert!(other.rx.try_recv().is_err(), "a watch on another name");
    }

    #[test]
    fn a_full_watch_is_closed_as_overflowed_and_dropping_unregisters() {
        let w = Arc::new(Mutex::new(Watchers::default()));
        let mut slow = register(&w, None, None);
        for rv in 1..=3 {
            w.lock().unwrap().dispatch(&event(rv, "a", "x"));
        }
        assert!(slow.overflowed());
        assert!(w.lock().unwrap().by_key.is_empty());
        assert_eq!(slow.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert_eq!(slow.rx.try_recv().map(|e| e.rv).ok(), Some(2));
        assert!(matches!(
            slow.rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        let live = register(&w, Some("a"), None);
        drop(live);
        assert!(w.lock().unwrap().by_key.is_empty());
    }
}
