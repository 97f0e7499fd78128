//! Keeps the [`Fleet`] current from watches on pools, nodes, MachineConfigNodes,
//! PodDisruptionBudgets, RolloutPolicies and Events: each starts with a streaming list where the
//! server allows one, and nothing is listed again after the watches' first sync.
//! kube's reflector stores hold the objects; only the Event list, which is capped, has its own.
//! In `mco up` the controller lends its stores of pools, nodes, MachineConfigNodes and
//! RolloutPolicies, and only budgets and Events are watched here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use mco_api::caches::{Borrower, Caches};
use mco_api::mcn::client::{McnApi, typed};
use mco_api::watch::watch;
use mco_api::{MachineConfigNode, MachineConfigPool, RolloutPolicy};
use mco_cli::Snapshot;
use tokio::sync::{Notify, oneshot, watch};

use crate::view::{self, Fleet};

/// Events kept from the watch (the page shows the newest [`view::MAX_EVENTS`]).
pub const KEEP_EVENTS: usize = 4 * view::MAX_EVENTS;
/// The view is rebuilt at most this often: a burst of changes becomes one update.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// …and at least this often, so ETAs and ages advance.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The newest [`KEEP_EVENTS`] Events by `namespace/name`, as their watch leaves them.
#[derive(Default)]
struct Events {
    items: BTreeMap<String, Event>,
    /// The Events of a (re)list in progress; they replace `items` when it is done.
    init: Option<BTreeMap<String, Event>>,
}

impl Events {
    fn key(e: &Event) -> String {
        format!(
            "{}/{}",
            e.metadata.namespace.as_deref().unwrap_or_default(),
            e.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// Inserts `e`, dropping the oldest beyond the cap.
    fn insert(map: &mut BTreeMap<String, Event>, mut e: Event) {
        // Nothing reads them, and they are most of an Event's size.
        e.metadata.managed_fields = None;
        map.insert(Self::key(&e), e);
        if map.len() > KEEP_EVENTS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| view::event_time(e))
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
    }

    /// Returns whether the visible Events changed.
    fn apply(&mut self, ev: watcher::Event<Event>) -> bool {
        match ev {
            watcher::Event::Apply(e) => {
                Self::insert(&mut self.items, e);
                true
            }
            watcher::Event::Delete(e) => self.items.remove(&Self::key(&e)).is_some(),
            watcher::Event::Init => {
                self.init = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(e) => {
                Self::insert(self.init.get_or_insert_default(), e);
                false
            }
            watcher::Event::InitDone => {
                self.items = self.init.take().unwrap_or_default();
                true
            }
        }
    }
}

/// What a watch brought.
enum Change {
    /// A reflector store took it; whether what it shows changed (a relist shows at its end).
    Stored(bool),
    /// Boxed: Events are large.
    Event(Box<watcher::Event<Event>>),
}

fn shows<K>(e: &watcher::Event<K>) -> bool {
    !matches!(e, watcher::Event::Init | watcher::Event::InitApply(_))
}

/// A watch of `K` that fills a reflector store; yields whether the view may have changed.
fn reflected<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> (Store<K>, futures::stream::BoxStream<'static, Change>)
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = events
        .default_backoff()
        // Nothing reads them, and a node's are kilobytes: 1,000 nodes would keep megabytes.
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .filter_map(|e| async move { e.ok().map(|e| Change::Stored(shows(&e))) })
        .boxed();
    (store, stream)
}

/// Keeps only what a view reads of a Node: its labels (pool selectors may name any), mco's
/// annotations, `spec.unschedulable` and the Ready condition. A real node's status carries
/// tens of kilobytes of images, and its annotations kilobytes of network plugin state; a
/// thousand nodes would keep it all.
fn slim_node(n: &mut Node) {
    if let Some(a) = n.metadata.annotations.as_mut() {
        a.retain(|k, _| {
            k.strip_prefix(mco_api::constants::PREFIX)
                .is_some_and(|r| r.starts_with('/'))
                || k.starts_with(mco_api::rollouts::ANNOTATION_PREFIX)
        });
    }
    if let Some(s) = n.spec.as_mut() {
        *s = k8s_openapi::api::core::v1::NodeSpec {
            unschedulable: s.unschedulable,
            ..Default::default()
        };
    }
    if let Some(s) = n.status.as_mut() {
        let mut conditions = s.conditions.take();
        if let Some(c) = conditions.as_mut() {
            c.retain(|c| c.type_ == "Ready");
        }
        *s = k8s_openapi::api::core::v1::NodeStatus {
            conditions,
            ..Default::default()
        };
    }
}

/// Keeps only what a view reads of a MachineConfigNode: its name, creation time, spec and
/// conditions. A `False` condition is read by its status alone (seed 002's cells, a phase not
/// entered), so its message goes: most of a node's conditions are `False` at any time, each with
/// a sentence such as "This node has not yet entered the Drained phase". Its reason stays (the
/// ETA tells a phase not entered by `NotYetOccurred`).
fn slim_mcn(m: &mut MachineConfigNode) {
    let meta = &mut m.metadata;
    meta.labels = None;
    meta.annotations = None;
    meta.owner_references = None;
    if let Some(s) = m.status.as_mut() {
        for c in s.conditions.iter_mut().filter(|c| c.status == "False") {
            c.message = String::new();
        }
        s.pinned_image_sets = None;
        s.config_image = None;
        s.irreconcilable_changes = None;
        s.most_recent_error = String::new();
    }
}

/// Every object of a store, by name: the stores keep no order, the view's pools do. The
/// objects are shared with the store, not copied: a rebuild at a thousand nodes would otherwise
/// copy every Node and MachineConfigNode.
fn sorted<K: Resource<DynamicType = ()> + Clone + 'static>(store: &Store<K>) -> Vec<Arc<K>> {
    let mut all = store.state();
    all.sort_by(|a, b| {
        (&a.meta().namespace, &a.meta().name).cmp(&(&b.meta().namespace, &b.meta().name))
    });
    all
}

/// The watched objects; cheap to clone (the stores and the Event list are shared).
#[derive(Clone)]
struct Stores {
    pools: Store<MachineConfigPool>,
    nodes: Store<Node>,
    mcns: Store<MachineConfigNode>,
    pdbs: Store<PodDisruptionBudget>,
    policies: Store<RolloutPolicy>,
    events: Arc<Mutex<Events>>,
}

impl Stores {
    /// The view now, built after the builder's last.
    fn fleet(&self, builder: &mut view::Builder, now: jiff::Timestamp) -> Arc<Fleet> {
        let snap = Snapshot {
            now,
            pools: sorted(&self.pools),
            nodes: sorted(&self.nodes),
            mcns: sorted(&self.mcns),
            pdbs: sorted(&self.pdbs),
            policies: sorted(&self.policies),
            ..Snapshot::default()
        };
        // Only those the view shows are copied: a rebuild copying every kept Event, each with
        // its managed fields, held megabytes at once.
        let events: Vec<Event> = view::newest(lock(&self.events).items.values())
            .into_iter()
            .cloned()
            .collect();
        builder.build(&snap, &events)
    }
}

/// Follows the cluster of `client` and publishes every new [`Fleet`] on `tx`. Runs until the
/// receivers are gone.
///
/// Nodes, pools, MachineConfigNodes and RolloutPolicies are read from the caches `lent` holds
/// while it holds them (the controller's, in `mco up`; see [`mco_api::caches`]), and from
/// watches of the dashboard's own otherwise.
pub async fn run(client: Client, lent: Option<Borrower>, tx: watch::Sender<Arc<Fleet>>) {
    let Some(mut lent) = lent else {
        return follow(client, None, &tx).await;
    };
    loop {
        let caches = lent.borrow_and_update().clone();
        tokio::select! {
            _ = follow(client.clone(), caches, &tx) => return,
            gone = lent.changed() => if gone.is_err() {
                // The lender is gone, and its caches with it.
                return follow(client, None, &tx).await;
            },
        }
    }
}

/// The stores a view reads besides budgets and Events.
struct Fleetwide {
    pools: Store<MachineConfigPool>,
    nodes: Store<Node>,
    mcns: Store<MachineConfigNode>,
    policies: Store<RolloutPolicy>,
}

/// Stores of the dashboard's own, filled by watches it adds to `streams`.
async fn own_watches(
    client: &Client,
    cfg: &watcher::Config,
    streams: &mut Vec<futures::stream::BoxStream<'static, Change>>,
) -> Fleetwide {
    let (pools, pool_changes) = reflected(watch(
        Api::<MachineConfigPool>::all(client.clone()),
        cfg.clone(),
    ));
    let (nodes, node_changes) =
        reflected(watch(Api::<Node>::all(client.clone()), cfg.clone()).modify(slim_node));
    streams.extend([pool_changes, node_changes]);
    // MachineConfigNodes at whichever version the cluster serves (mco's CRD or upstream's).
    let mcns = match McnApi::new(client.clone()).dynamic().await {
        Ok(api) => {
            let (mcns, changes) = reflected(
                watch(api, cfg.clone())
                    .filter_map(|e| async move { e.map(typed_event).transpose() })
                    .modify(slim_mcn),
            );
            streams.push(changes);
            mcns
        }
        Err(e) => {
            tracing::warn!("dashboard: MachineConfigNodes not watched: {e}");
            reflector::store().0
        }
    };
    // RolloutPolicies are mco's own CRD: a cluster without it has none to show.
    let policy_api = Api::<RolloutPolicy>::all(client.clone());
    let policies = match policy_api.list(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::warn!("dashboard: RolloutPolicies not watched: the CRD is not served");
            reflector::store().0
        }
        // Served, or a passing error the watch's backoff rides out.
        _ => {
            let (policies, changes) = reflected(watch(policy_api, cfg.clone()));
            streams.push(changes);
            policies
        }
    };
    Fleetwide {
        pools,
        nodes,
        mcns,
        policies,
    }
}

/// Borrowed stores, and their change signal as a stream.
fn borrowed(
    caches: Caches,
    streams: &mut Vec<futures::stream::BoxStream<'static, Change>>,
) -> Fleetwide {
    streams.push(
        futures::stream::unfold(caches.changed, |changed| async move {
            changed.notified().await;
            Some((Change::Stored(true), changed))
        })
        .boxed(),
    );
    Fleetwide {
        pools: caches.pools,
        nodes: caches.nodes,
        mcns: caches.mcns,
        policies: caches.policies,
    }
}

/// [`run`] with the stores of `lent`, or of watches of its own without it.
async fn follow(client: Client, lent: Option<Caches>, tx: &watch::Sender<Arc<Fleet>>) {
    let cfg = watcher::Config::default();
    // Budgets are few; pods are many and not watched: a blocked drain's message names them.
    let (pdbs, pdb_changes) = reflected(watch(
        Api::<PodDisruptionBudget>::all(client.clone()),
        cfg.clone(),
    ));
    let mut streams = vec![
        pdb_changes,
        watch(Api::<Event>::all(client.clone()), cfg.clone())
            .default_backoff()
            .filter_map(|e| async move { e.ok().map(|e| Change::Event(Box::new(e))) })
            .boxed(),
    ];
    let Fleetwide {
        pools,
        nodes,
        mcns,
        policies,
    } = match lent {
        Some(caches) => borrowed(caches, &mut streams),
        None => own_watches(&client, &cfg, &mut streams).await,
    };
    let mut changes = futures::stream::select_all(streams);
    let events = Arc::new(Mutex::new(Events::default()));
    let state = Stores {
        pools,
        nodes,
        mcns,
        pdbs,
        policies,
        events: events.clone(),
    };
    // The watches are read as fast as they come, beside the rebuild: an unread watch makes
    // the API server hold its events, and in `mco up` that server is this process.
    let dirty = Notify::new();
    let drain = async {
        while let Some(c) = changes.next().await {
            let shows = match c {
                Change::Stored(shows) => shows,
                Change::Event(e) => lock(&events).apply(*e),
            };
            if shows {
                dirty.notify_one();
            }
        }
    };
    let Ok(rebuilder) = Rebuilder::start() else {
        tracing::error!("dashboard: cannot start the thread that builds the view");
        return;
    };
    let rebuild = async {
        let mut tick = tokio::time::interval(REFRESH);
        loop {
            tokio::select! {
                _ = dirty.notified() => {},
                _ = tick.tick() => {},
            };
            // Let a burst arrive, then take all of it in one rebuild; changes during the
            // rebuild leave a permit in `dirty` for the next.
            tokio::time::sleep(MIN_INTERVAL).await;
            let stores = state.clone();
            let Some(fleet) = rebuilder.build(stores).await else {
                return;
            };
            tx.send_if_modified(|old| {
                if **old == *fleet {
                    false
                } else {
                    *old = fleet;
                    true
                }
            });
        }
    };
    tokio::select! {
        _ = drain => {},
        _ = rebuild => {},
        _ = tx.closed() => {},
    }
}

/// Builds each new [`Fleet`] on a thread of its own. At a thousand nodes a rebuild takes a
/// while and must not hold up the runtime's workers, which in `mco up` also serve the API. One
/// thread rather than the blocking pool: an allocator keeps what a thread freed for that
/// thread's next allocations, so rebuilds spread over many pool threads would leave each one
/// holding a rebuild's worth of memory.
struct Rebuilder {
    tx: std::sync::mpsc::Sender<(Stores, oneshot::Sender<Arc<Fleet>>)>,
}

impl Rebuilder {
    fn start() -> std::io::Result<Rebuilder> {
        let (tx, rx) = std::sync::mpsc::channel::<(Stores, oneshot::Sender<Arc<Fleet>>)>();
        // Ends when the sender, owned by `run`, is dropped.
        std::thread::Builder::new()
            .name("dashboard-view".into())
            .spawn(move || {
                // Each view is built after the last: unchanged nodes keep their views.
                let mut builder = view::Builder::default();
                for (stores, reply) in rx {
                    let _ = reply.send(stores.fleet(&mut builder, jiff::Timestamp::now()));
                }
            })?;
        Ok(Rebuilder { tx })
    }

    /// The view of `stores` now; `None` if the thread is gone.
    async fn build(&self, stores: Stores) -> Option<Arc<Fleet>> {
        let (reply, fleet) = oneshot::channel();
        self.tx.send((stores, reply)).ok()?;
        fleet.await.ok()
    }
}

fn lock(events: &Mutex<Events>) -> std::sync::MutexGuard<'_, Events> {
    events.lock().unwrap_or_else(|e| e.into_inner())
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
            "metadata": {"name": name, "namespace": "default", "managedFields": [
                {"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:message": {}}}]},
            "involvedObject": {},
            "lastTimestamp": jiff::Timestamp::from_second(secs).unwrap().to_string(),
        }))
        .unwrap()
    }

    #[test]
    fn a_relist_replaces_the_events_and_they_stay_capped() {
        let mut s = Events::default();
        for i in 0..KEEP_EVENTS as i64 + 2 {
            assert!(s.apply(watcher::Event::Apply(ev(&format!("e{i:04}"), 1_000 + i))));
        }
        assert_eq!(s.items.len(), KEEP_EVENTS, "capped at the limit");
        assert!(
            s.items
                .values()
                .all(|e| e.metadata.managed_fields.is_none()),
            "kept without their managed fields"
        );
        let first = s.items.keys().next().unwrap();
        assert_eq!(first, "default/e0002", "the two oldest were dropped");
        assert!(!s.apply(watcher::Event::Init));
        assert!(!s.apply(watcher::Event::InitApply(ev("x", 5))));
        assert_eq!(
            s.items.len(),
            KEEP_EVENTS,
            "the old Events stay until the relist is done"
        );
        assert!(s.apply(watcher::Event::InitDone));
        assert_eq!(s.items.keys().collect::<Vec<_>>(), ["default/x"]);
        assert!(s.apply(watcher::Event::Delete(ev("x", 5))));
        assert!(!s.apply(watcher::Event::Delete(ev("x", 5))));
    }

    #[test]
    fn a_node_keeps_only_what_a_view_reads() {
        let mut n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w0", "labels": {"node-role.kubernetes.io/worker": ""}, "annotations": {
                "machineconfiguration.openshift.io/state": "Done",
                "rollouts.mco.dev/node-checks": "{}",
                "k8s.ovn.org/node-subnets": "{\"default\":[\"10.128.2.0/23\"]}",
                "machineconfiguration.openshift.io.evil/x": "",
            }},
            "spec": {"unschedulable": true, "podCIDR": "10.128.2.0/23",
                "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True"}],
                "images": [{"names": ["quay.io/a@sha256:0"], "sizeBytes": 1}],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                    "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                    "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""},
            },
        }))
        .unwrap();
        let facts = mco_cli::snapshot::NodeFacts::of(&n);
        slim_node(&mut n);
        assert_eq!(
            mco_cli::snapshot::NodeFacts::of(&n),
            facts,
            "what the views read is unchanged"
        );
        let status = n.status.as_ref().unwrap();
        let types: Vec<_> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| &c.type_)
            .collect();
        assert_eq!(types, ["Ready"]);
        assert!(status.images.is_none() && status.node_info.is_none());
        let spec = n.spec.unwrap();
        assert_eq!(spec.unschedulable, Some(true));
        assert!(spec.taints.is_none() && spec.pod_cidr.is_none());
        let kept: Vec<_> = n.metadata.annotations.unwrap().into_keys().collect();
        assert_eq!(
            kept,
            [
                "machineconfiguration.openshift.io/state",
                "rollouts.mco.dev/node-checks"
            ]
        );
        assert_eq!(n.metadata.labels.unwrap().len(), 1);
    }

    #[test]
    fn a_machine_config_node_keeps_only_what_a_view_reads() {
        let cond = |t: &str, s: &str, r: &str, at: i64| {
            serde_json::json!({"type": t, "status": s, "reason": r,
                "message": format!("{t} is {s}: a sentence of its own"),
                "lastTransitionTime": jiff::Timestamp::from_second(1_000 + at).unwrap().to_string()})
        };
        let mut m: MachineConfigNode = serde_json::from_value(serde_json::json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
            "metadata": {"name": "w0", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"a": "b"}, "annotations": {"c": "d"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "w0", "uid": "u"}]},
            "spec": {"node": {"name": "w0"}, "pool": {"name": "worker"},
                "configVersion": {"desired": "rendered-worker-2"}},
            "status": {
                "conditions": [
                    cond("Updated", "False", "Updated", 0),
                    cond("UpdatePrepared", "True", "UpdatePrepared", 10),
                    cond("UpdateExecuted", "Unknown", "UpdateExecuted", 20),
                    cond("Cordoned", "True", "Cordoned", 30),
                    cond("Drained", "Unknown", "Drained", 40),
                    cond("RebootedNode", "False", "NotYetOccurred", 0),
                    cond("NodeDegraded", "True", "NodeDegraded", 50),
                ],
                "configVersion": {"current": "rendered-worker-1", "desired": "rendered-worker-2"},
                "health": "Healthy", "mostRecentError": "x", "observedGeneration": 3,
                "pinnedImageSets": [{"name": "p"}],
                "irreconcilableChanges": [{"fieldPath": "spec.config.storage.disks", "diff": "+ []"}],
            },
        }))
        .unwrap();
        let now = jiff::Timestamp::from_second(2_000).unwrap();
        let facts = mco_cli::snapshot::NodeFacts::of(&Node::default());
        let columns = {
            use mco_apimachinery::table::{PrinterColumn, TableConvertor};
            let crd = serde_json::to_value(mco_api::mcn::crd()).unwrap();
            TableConvertor::for_crd(&PrinterColumn::from_crd(&crd, "v1")).unwrap()
        };
        let read = |m: &MachineConfigNode| {
            (
                mco_cli::phase::current_phase(m),
                view::timeline(m, now),
                mco_cli::phase::completed_update_duration(m),
                mco_cli::status::degraded_reason(&facts, Some(m)),
                columns.cells(&serde_json::to_value(m).unwrap(), now),
                m.spec.clone(),
            )
        };
        let before = read(&m);
        slim_mcn(&mut m);
        assert_eq!(read(&m), before, "what the views read is unchanged");
        let status = m.status.as_ref().unwrap();
        let kept: Vec<_> = status
            .conditions
            .iter()
            .filter(|c| !c.message.is_empty())
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            kept,
            [
                "UpdatePrepared",
                "UpdateExecuted",
                "Cordoned",
                "Drained",
                "NodeDegraded"
            ],
            "only a False condition loses its message"
        );
        assert_eq!(status.conditions.len(), 7, "every condition stays");
        assert!(status.pinned_image_sets.is_none() && status.irreconcilable_changes.is_none());
        assert!(m.metadata.labels.is_none() && m.metadata.owner_references.is_none());
        assert_eq!(m.metadata.name.as_deref(), Some("w0"));
    }

    #[test]
    fn a_relist_shows_once_it_is_done() {
        let n = || k8s_openapi::api::core::v1::Node::default();
        assert!(!shows(&watcher::Event::Init::<Node>));
        assert!(!shows(&watcher::Event::InitApply(n())));
        assert!(shows(&watcher::Event::InitDone::<Node>));
        assert!(shows(&watcher::Event::Apply(n())));
        assert!(shows(&watcher::Event::Delete(n())));
    }
}
