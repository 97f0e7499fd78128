//! Keeps the [`Fleet`] current from watches on pools, nodes, MachineConfigNodes and Events: no
//! listing of the fleet after the watches' first sync.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use mco_api::mcn::client::{McnApi, typed};
use mco_api::{MachineConfigNode, MachineConfigPool};
use mco_cli::Snapshot;
use tokio::sync::watch;

use crate::view::{self, Fleet};

/// Events kept from the watch (the page shows the newest [`view::MAX_EVENTS`]).
pub const KEEP_EVENTS: usize = 4 * view::MAX_EVENTS;
/// The view is rebuilt at most this often: a burst of changes becomes one update.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// …and at least this often, so ETAs and ages advance.
pub const REFRESH: Duration = Duration::from_secs(5);

/// At most this many objects, dropping the oldest by the function's timestamp.
type Cap<K> = Option<(usize, fn(&K) -> Option<jiff::Timestamp>)>;

/// Objects of one kind by `namespace/name`, as a watch leaves them.
struct Store<K> {
    items: BTreeMap<String, K>,
    /// The objects of a (re)list in progress; they replace `items` when it is done.
    init: Option<BTreeMap<String, K>>,
    /// Keep at most this many, dropping the oldest by `age`.
    cap: Cap<K>,
}

impl<K: Resource> Store<K> {
    fn new() -> Self {
        Store {
            items: BTreeMap::new(),
            init: None,
            cap: None,
        }
    }

    fn key(o: &K) -> String {
        format!(
            "{}/{}",
            o.meta().namespace.as_deref().unwrap_or_default(),
            o.meta().name.as_deref().unwrap_or_default()
        )
    }

    fn insert(map: &mut BTreeMap<String, K>, o: K, cap: Cap<K>) {
        map.insert(Self::key(&o), o);
        if let Some((max, age)) = cap
            && map.len() > max
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, o)| age(o))
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
    }

    /// Returns whether the visible objects changed.
    fn apply(&mut self, ev: watcher::Event<K>) -> bool {
        match ev {
            watcher::Event::Apply(o) => {
                Self::insert(&mut self.items, o, self.cap);
                true
            }
            watcher::Event::Delete(o) => self.items.remove(&Self::key(&o)).is_some(),
            watcher::Event::Init => {
                self.init = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                let cap = self.cap;
                Self::insert(self.init.get_or_insert_default(), o, cap);
                false
            }
            watcher::Event::InitDone => {
                self.items = self.init.take().unwrap_or_default();
                true
            }
        }
    }

    fn values(&self) -> Vec<K>
    where
        K: Clone,
    {
        self.items.values().cloned().collect()
    }
}

/// Boxed: the objects are large and of different sizes.
enum Change {
    Pool(Box<watcher::Event<MachineConfigPool>>),
    Node(Box<watcher::Event<Node>>),
    Mcn(Box<watcher::Event<MachineConfigNode>>),
    Event(Box<watcher::Event<Event>>),
}

struct Stores {
    pools: Store<MachineConfigPool>,
    nodes: Store<Node>,
    mcns: Store<MachineConfigNode>,
    events: Store<Event>,
}

impl Stores {
    fn new() -> Self {
        let mut events = Store::new();
        events.cap = Some((KEEP_EVENTS, view::event_time as fn(&Event) -> _));
        Stores {
            pools: Store::new(),
            nodes: Store::new(),
            mcns: Store::new(),
            events,
        }
    }

    fn apply(&mut self, c: Change) -> bool {
        match c {
            Change::Pool(e) => self.pools.apply(*e),
            Change::Node(e) => self.nodes.apply(*e),
            Change::Mcn(e) => self.mcns.apply(*e),
            Change::Event(e) => self.events.apply(*e),
        }
    }

    fn fleet(&self, now: jiff::Timestamp) -> Fleet {
        let snap = Snapshot {
            now,
            pools: self.pools.values(),
            nodes: self.nodes.values(),
            mcns: self.mcns.values(),
            ..Snapshot::default()
        };
        view::build(&snap, &self.events.values())
    }
}

/// Follows the cluster of `client` and publishes every new [`Fleet`] on `tx`. Runs until the
/// receivers are gone.
pub async fn run(client: Client, tx: watch::Sender<Arc<Fleet>>) {
    let cfg = watcher::Config::default();
    let mut streams = vec![
        watcher(Api::<MachineConfigPool>::all(client.clone()), cfg.clone())
            .default_backoff()
            .filter_map(|e| async move { e.ok().map(|e| Change::Pool(Box::new(e))) })
            .boxed(),
        watcher(Api::<Node>::all(client.clone()), cfg.clone())
            .default_backoff()
            .filter_map(|e| async move { e.ok().map(|e| Change::Node(Box::new(e))) })
            .boxed(),
        watcher(Api::<Event>::all(client.clone()), cfg.clone())
            .default_backoff()
            .filter_map(|e| async move { e.ok().map(|e| Change::Event(Box::new(e))) })
            .boxed(),
    ];
    // MachineConfigNodes at whichever version the cluster serves (mco's CRD or upstream's).
    match McnApi::new(client.clone()).dynamic().await {
        Ok(api) => streams.push(
            watcher(api, cfg)
                .default_backoff()
                .filter_map(|e| async move {
                    e.ok()
                        .and_then(typed_event)
                        .map(|e| Change::Mcn(Box::new(e)))
                })
                .boxed(),
        ),
        Err(e) => tracing::warn!("dashboard: MachineConfigNodes not watched: {e}"),
    }
    let mut changes = futures::stream::select_all(streams);
    let mut state = Stores::new();
    let mut tick = tokio::time::interval(REFRESH);
    loop {
        let mut dirty = tokio::select! {
            c = changes.next() => match c {
                Some(c) => state.apply(c),
                None => return,
            },
            _ = tick.tick() => true,
            _ = tx.closed() => return,
        };
        // Let a burst arrive, then take all of it in one rebuild.
        tokio::time::sleep(MIN_INTERVAL).await;
        while let Some(Some(c)) = changes.next().now_or_never() {
            dirty |= state.apply(c);
        }
        if !dirty {
            continue;
        }
        let fleet = state.fleet(jiff::Timestamp::now());
        tx.send_if_modified(|old| {
            if **old == fleet {
                false
            } else {
                *old = Arc::new(fleet);
                true
            }
        });
    }
}

/// A watch event of a MachineConfigNode at the served version, typed; `None` for one that does
/// not parse (logged).
fn typed_event(
    e: watcher::Event<kube::api::DynamicObject>,
) -> Option<watcher::Event<MachineConfigNode>> {
    let ok = |o| {
        typed(o)
            .map_err(|e| tracing::warn!("dashboard: skipping a MachineConfigNode: {e}"))
            .ok()
    };
    Some(match e {
        watcher::Event::Apply(o) => watcher::Event::Apply(ok(o)?),
        watcher::Event::Delete(o) => watcher::Event::Delete(ok(o)?),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(ok(o)?),
        watcher::Event::InitDone => watcher::Event::InitDone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, secs: i64) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {},
            "lastTimestamp": jiff::Timestamp::from_second(secs).unwrap().to_string(),
        }))
        .unwrap()
    }

    #[test]
    fn a_relist_replaces_the_store_and_events_stay_capped() {
        let mut s = Store::<Event>::new();
        s.cap = Some((3, view::event_time));
        for i in 0..5 {
            assert!(s.apply(watcher::Event::Apply(ev(&format!("e{i}"), 1_000 + i))));
        }
        let names: Vec<&String> = s.items.keys().collect();
        assert_eq!(names, ["default/e2", "default/e3", "default/e4"]);
        assert!(!s.apply(watcher::Event::Init));
        assert!(!s.apply(watcher::Event::InitApply(ev("x", 5))));
        assert_eq!(
            s.items.len(),
            3,
            "the old objects stay until the relist is done"
        );
        assert!(s.apply(watcher::Event::InitDone));
        assert_eq!(s.items.keys().collect::<Vec<_>>(), ["default/x"]);
        assert!(s.apply(watcher::Event::Delete(ev("x", 5))));
        assert!(!s.apply(watcher::Event::Delete(ev("x", 5))));
    }
}
