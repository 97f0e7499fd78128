//! Wiring: one reflector per kind, shared by every controller that reads it, and the
//! kube-runtime `Controller`s that call the reconcilers.
//!
//! Reconcilers are level-triggered: each reads the whole current state from the shared stores
//! and converges it, so a missed or repeated trigger is harmless. Deletions do not trigger the
//! subscribers of a shared store: the node controller hears of deleted nodes from the node watch
//! itself, and every controller also resyncs on a timer. A failed reconcile is retried after a
//! wait that doubles with the object's failures in a row ([`crate::ctx::error_backoff`]).
//!
//! The per-node controllers run at most 256 (MachineConfigNode) and 512 (drain) reconciles at
//! once. kube-runtime's default is unbounded, and an in-flight reconcile holds its request
//! futures: a resync of 5,000 nodes held about 100 MB. A drain reconcile can wait through PDB
//! retries, so its cap stays far above what pool budgets drain at once. The drain controller
//! is woken only by unanswered drain or uncordon requests, not by every node event.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::Node;
use kube::api::DynamicObject;
use kube::runtime::controller::{Action, Config as ControllerSettings};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use mco_api::{
    ControllerConfig, MachineConfig, MachineConfigNode, MachineConfigPool, RolloutPolicy,
};
use mco_rollout::plan;

use crate::ctx::{Ctx, Failures, MembershipMemo, PassGate, error_backoff};
use crate::metrics::Metrics;
use crate::nodeview::NodeDigests;
use crate::{Config, Error};

/// Time one reconcile of the object `name` and count it; a success resets the object's
/// backoff (see [`error_policy`]).
pub async fn timed<F>(
    ctx: &Ctx,
    controller: &'static str,
    name: &str,
    fut: F,
) -> Result<Action, Error>
where
    F: std::future::Future<Output = Result<Action, Error>>,
{
    let start = Instant::now();
    let r = fut.await;
    ctx.metrics.observe(
        controller,
        start.elapsed().as_secs_f64(),
        r.as_ref().err().map(Error::kind),
    );
    match &r {
        Ok(_) => ctx.failures.succeeded(controller, name),
        Err(e) => {
            tracing::warn!(controller, object = %name, kind = e.kind(), error = %e, "reconcile failed")
        }
    }
    r
}

/// Retries a failed reconcile after a wait that grows with the object's failures in a row.
fn error_policy<K: Resource>(
    controller: &'static str,
    obj: Arc<K>,
    _: &Error,
    ctx: Arc<Ctx>,
) -> Action {
    let failures = ctx.failures.failed(controller, &name_of(&*obj));
    Action::requeue(error_backoff(ctx.config.error_requeue, failures))
}

fn name_of<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

pub(crate) fn ticker(every: Duration) -> impl Stream<Item = ()> + Send {
    futures::stream::unfold(tokio::time::interval(every), |mut i| async move {
        i.tick().await;
        Some(((), i))
    })
    .skip(1)
}

fn drop_managed_fields<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Per-node reconciles in flight at once. kube-runtime runs every queued reconcile at once by
/// default, and an in-flight reconcile holds its request futures (kilobytes each): a resync of
/// 5,000 nodes held about 100 MB. MachineConfigNode reconciles are short bookkeeping writes,
/// but a fleet joining at once needs many of them: at 64, the MCNs of 1,000 joining nodes
/// trailed their nodes by about 7 s.
const MCN_CONCURRENCY: u16 = 256;
/// Drain reconciles wait through PDB retries (up to an attempt timeout), so the cap must stay
/// above the nodes any sane set of pool budgets drains at once; idle nodes return at once.
const DRAIN_CONCURRENCY: u16 = 512;

/// Trim a cached Node to what this controller reads. Of a Node's status only the conditions are
/// read (readiness in [`plan`]); images, nodeInfo, addresses, capacity and volumes are
/// often tens of kilobytes per node on a real cluster and nothing here reads them. Nodes are
/// only ever written with merge patches of named fields (annotations, taints, unschedulable), never
/// replaced from the cache, so a trimmed copy cannot erase anything on the server. Written Nodes
/// kept in [`Ctx::written_nodes`] are short-lived and not trimmed.
pub fn slim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(a) = node.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    if let Some(status) = node.status.take() {
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: status.conditions,
            ..Default::default()
        });
    }
}

/// A watch feeding a shared store; the future runs until dropped. `on_delete` sees each deleted
/// object in its final state, after the store has dropped it: the store's subscribers are told
/// only of objects that exist, so a controller that must react to deletions listens here.
///
/// `trim` runs on every object before it is cached; every kind drops managedFields, which no
/// reconciler reads and which on Nodes were the bulk of the cache's memory.
///
/// `changed` is notified after each change the store took (see [`mco_api::caches`]).
fn reflect<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    trim: impl FnMut(&mut K) + Send,
    on_delete: impl Fn(K) + Send,
    changed: Option<Arc<Notify>>,
) -> impl std::future::Future<Output = ()> + Send
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim)
        .reflect_shared(writer)
        .for_each(move |ev| {
            notify_change(changed.as_deref(), &ev);
            match ev {
                Ok(watcher::Event::Delete(obj)) => on_delete(obj),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "watch"),
            }
            future::ready(())
        })
}

/// Tells the borrower of the caches that a store changed; a relist tells it once, at its end.
fn notify_change<K>(changed: Option<&Notify>, ev: &watcher::Result<watcher::Event<K>>) {
    if let Some(changed) = changed
        && matches!(
            ev,
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
        )
    {
        changed.notify_one();
    }
}

/// [`reflect`] for MachineConfigNodes, watched at the version the cluster serves (found first,
/// retried until the CRD is there) and cached as mco's type.
///
/// Each event also goes to the tally of which nodes have their pinned image sets current
/// ([`crate::pinned::Pinned::observe_mcn`]).
async fn reflect_mcns(
    api: mco_api::mcn::client::McnApi,
    writer: reflector::store::Writer<MachineConfigNode>,
    changed: Arc<Notify>,
    pinned: Arc<crate::pinned::Pinned>,
) {
    let dynamic = loop {
        match api.dynamic().await {
            Ok(d) => break d,
            Err(e) => {
                tracing::warn!(error = %e, "finding the served MachineConfigNode version");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
        }
    };
    watcher(dynamic, watcher::Config::default())
        .default_backoff()
        .map(|ev| ev.map(typed_event))
        .modify(drop_managed_fields)
        .reflect_shared(writer)
        .for_each(|ev| {
            notify_change(Some(&changed), &ev);
            match ev {
                Ok(ev) => pinned.observe_mcn(&ev),
                Err(e) => tracing::warn!(error = %e, "watch"),
            }
            future::ready(())
        })
        .await
}

fn typed_event(ev: watcher::Event<DynamicObject>) -> watcher::Event<MachineConfigNode> {
    let typed = |o: DynamicObject| {
        let metadata = o.metadata.clone();
        mco_api::mcn::client::typed(o).unwrap_or_else(|e| {
            tracing::warn!(name = ?metadata.name, error = %e, "unreadable MachineConfigNode");
            MachineConfigNode {
                metadata,
                spec: Default::default(),
                status: None,
            }
        })
    };
    use watcher::Event::*;
    match ev {
        Apply(o) => Apply(typed(o)),
        Delete(o) => Delete(typed(o)),
        Init => Init,
        InitApply(o) => InitApply(typed(o)),
        InitDone => InitDone,
    }
}

/// The pools a node counts toward, for a node that is gone: its primary pool by the same rules as
/// the planner, or every pool when it had none (a conflict leaves no single owner).
fn pools_of_node(
    node: &Node,
    pools: &Store<MachineConfigPool>,
) -> Vec<ObjectRef<MachineConfigPool>> {
    let membership = plan::assign_pools(std::slice::from_ref(node), &pools.state());
    match membership.primary.values().next() {
        Some(pool) => vec![ObjectRef::new(pool)],
        None => all_pools(pools),
    }
}

fn all_pools(pools: &Store<MachineConfigPool>) -> Vec<ObjectRef<MachineConfigPool>> {
    pools
        .state()
        .iter()
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// The pools a changed node affects: the one it is in now and the one it was last seen in, so
/// a wave of node updates reconciles only their own pool rather than every pool. A node in no
/// single pool (a conflict, or no match) affects every pool.
fn pools_touched_by(
    node: &Node,
    pools: &Store<MachineConfigPool>,
    last_pool: &Mutex<HashMap<String, String>>,
) -> Vec<ObjectRef<MachineConfigPool>> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let membership = plan::assign_pools(std::slice::from_ref(node), &pools.state());
    let now = membership.primary.get(&name).cloned();
    let mut last = last_pool.lock().unwrap_or_else(|e| e.into_inner());
    let before = match &now {
        Some(p) => last.insert(name, p.clone()),
        None => last.remove(&name),
    };
    match (now, before) {
        (Some(now), Some(before)) if now == before => vec![ObjectRef::new(&now)],
        (Some(now), Some(before)) => vec![ObjectRef::new(&now), ObjectRef::new(&before)],
        // First sighting, or no single pool: every pool, as membership may have shifted.
        _ => all_pools(pools),
    }
}

/// The pool changes its reconcilers act on: a pool come, a new spec (its generation) and a
/// deletion begun. A status write is not one. The node controller writes the pool's status
/// several times a second in a rollout, and each write restarted the render's debounce, so a
/// MachineConfig created mid-rollout was rendered only once the rollout paused; each also woke
/// the node controller for a pass with nothing new to plan. Both read only a pool's spec, and
/// the conditions others set are each written whole by their writer.
///
/// The same holds for the ControllerConfig, whose status the ccstatus controller writes.
fn spec_changes<K, S>(pools: S) -> impl Stream<Item = Arc<K>> + Send
where
    K: Resource + Send + Sync,
    S: Stream<Item = Arc<K>> + Send,
{
    // The rollout controls (`rollouts.mco.dev/` annotations: halt, resume, promote, rollback)
    // count as spec: they steer the node controller.
    type Seen = (Option<String>, Option<i64>, bool, Vec<(String, String)>);
    let mut seen: HashMap<String, Seen> = HashMap::new();
    pools.filter(move |p| {
        let m = p.meta();
        let controls: Vec<(String, String)> = m
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(mco_api::rollouts::ANNOTATION_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let now: Seen = (
            m.uid.clone(),
            m.generation,
            m.deletion_timestamp.is_some(),
            controls,
        );
        // Without a generation a spec change cannot be told apart: every change counts.
        let changed = m.generation.is_none()
            || seen.insert(m.name.clone().unwrap_or_default(), now.clone()) != Some(now);
        future::ready(changed)
    })
}

/// Drop a deleted node's remembered pool, so the map holds only nodes that exist.
fn forget_node(node: &Node, last_pool: &Mutex<HashMap<String, String>>) {
    if let Some(name) = node.metadata.name.as_deref() {
        last_pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }
}

/// Run every controller until one of them stops (they only stop on shutdown).
pub async fn run_all(
    client: Client,
    config: Config,
    metrics: Arc<Metrics>,
    identity: String,
) -> Result<(), Error> {
    const BUF: usize = 1024;
    let (nodes, nodes_w) = reflector::store_shared::<Node>(BUF);
    let (pools, pools_w) = reflector::store_shared::<MachineConfigPool>(BUF);
    let (mcs, mcs_w) = reflector::store_shared::<MachineConfig>(BUF);
    let (mcns, mcns_w) = reflector::store_shared::<MachineConfigNode>(BUF);
    let (ccs, ccs_w) = reflector::store_shared::<ControllerConfig>(BUF);
    let (policies, policies_w) = reflector::store_shared::<RolloutPolicy>(BUF);

    let subscribe = |what: &str| Error::Stale(format!("cannot subscribe to the {what} store"));
    let nodes_for_rollout = nodes_w.subscribe().ok_or_else(|| subscribe("node"))?;
    let nodes_for_mcn = nodes_w.subscribe().ok_or_else(|| subscribe("node"))?;
    let nodes_for_drain = nodes_w.subscribe().ok_or_else(|| subscribe("node"))?;
    let pools_for_render = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
    let pools_for_rollout = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
    let mcs_for_render = mcs_w
        .subscribe()
        .ok_or_else(|| subscribe("MachineConfig"))?;
    let ccs_for_render = ccs_w
        .subscribe()
        .ok_or_else(|| subscribe("ControllerConfig"))?;
    let ccs_for_status = ccs_w
        .subscribe()
        .ok_or_else(|| subscribe("ControllerConfig"))?;
    let pools_for_status = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
    let mcs_for_templates = mcs_w
        .subscribe()
        .ok_or_else(|| subscribe("MachineConfig"))?;
    let pools_for_policies = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
    let pools_for_registries = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
    let pools_for_kubelet_defaults = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
    let mcs_for_kubelet_defaults = mcs_w
        .subscribe()
        .ok_or_else(|| subscribe("MachineConfig"))?;
    let policies_for_rollout = policies_w
        .subscribe()
        .ok_or_else(|| subscribe("RolloutPolicy"))?;
    let policies_for_status = policies_w
        .subscribe()
        .ok_or_else(|| subscribe("RolloutPolicy"))?;
    let policies_for_conflicts = policies_w
        .subscribe()
        .ok_or_else(|| subscribe("RolloutPolicy"))?;
    let pools_for_pinned = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
    // Only where mco stands in for upstream's operator: an unread subscription holds its store.
    let co_changes = if config.sync_controller_config {
        let pools = pools_w.subscribe().ok_or_else(|| subscribe("pool"))?;
        let ccs = ccs_w
            .subscribe()
            .ok_or_else(|| subscribe("ControllerConfig"))?;
        // A rendered config may take the release annotation in place, its pool unchanged.
        let mcs = mcs_w
            .subscribe()
            .ok_or_else(|| subscribe("MachineConfig"))?;
        Some(futures::stream::select(
            futures::stream::select(pools.map(|_| ()), ccs.map(|_| ())),
            mcs.map(|_| ()),
        ))
    } else {
        None
    };

    let mcn_api = mco_api::mcn::client::McnApi::new(client.clone());
    // A deleted node changes its pool's machine counts: tell the node controller at once rather
    // than at the next resync.
    let (deleted_tx, deleted_nodes) = futures::channel::mpsc::unbounded::<Arc<Node>>();
    // A deleted template config is written again at once, not at the next resync.
    let (deleted_mc_tx, deleted_mcs) = futures::channel::mpsc::unbounded::<Arc<MachineConfig>>();
    // The template controller wakes every pool's render once its configs are written.
    let (wake_render, render_wakeups) = futures::channel::mpsc::unbounded::<()>();
    // A deleted MachineConfig leaves its pools' render at once, as upstream's render controller
    // enqueues them on a delete: the render's shared-store subscription sees no deletions, and
    // without this the config would stay rendered in until the next resync.
    let render_on_delete = wake_render.clone();
    // The template controller's watch of the pull secret wakes the ControllerConfig's reconcile.
    let (wake_cc, cc_wakeups) = futures::channel::mpsc::unbounded::<()>();
    // A pool whose PinnedImageSets status may have changed (a node's sets current or not, a
    // failed write of its list) wakes the node controller, which writes the pool's status.
    let (wake_pinned_status, pinned_status_wakeups) = futures::channel::mpsc::unbounded::<String>();
    // A PinnedImageSet's change (or the kind found missing) wakes every pool's list.
    let (sets_changed, set_changes) = futures::channel::mpsc::unbounded::<()>();
    let (sets, sets_w) = reflector::store::<mco_api::PinnedImageSet>();
    // A MachineOSConfig's or MachineOSBuild's change wakes every pool's node controller.
    let wake_image_mode = wake_pinned_status.clone();
    let pinned = Arc::new(crate::pinned::Pinned::new(sets, wake_pinned_status));
    let (mosc, mosc_w) = reflector::store::<mco_api::MachineOSConfig>();
    let (mosb, mosb_w) = reflector::store::<mco_api::MachineOSBuild>();
    // The caches a reader in this process may borrow, lent while this term lasts.
    let changed = Arc::new(Notify::new());
    let _lent = config.lend_caches.as_ref().map(|lender| {
        mco_api::caches::Lent::new(
            lender,
            mco_api::caches::Caches {
                nodes: nodes.clone(),
                pools: pools.clone(),
                mcns: mcns.clone(),
                policies: policies.clone(),
                changed: changed.clone(),
            },
        )
    });
    let watches = future::join5(
        reflect(
            Api::<Node>::all(client.clone()),
            nodes_w,
            slim_node,
            move |n| {
                let _ = deleted_tx.unbounded_send(Arc::new(n));
            },
            Some(changed.clone()),
        ),
        reflect(
            Api::<MachineConfigPool>::all(client.clone()),
            pools_w,
            drop_managed_fields,
            |_| {},
            Some(changed.clone()),
        ),
        reflect(
            Api::<MachineConfig>::all(client.clone()),
            mcs_w,
            drop_managed_fields,
            move |mc| {
                let _ = render_on_delete.unbounded_send(());
                if crate::templates::concerns(&mc) {
                    let _ = deleted_mc_tx.unbounded_send(Arc::new(mc));
                }
            },
            None,
        ),
        // MCN status stays whole: the drain controller merges into its conditions.
        reflect_mcns(mcn_api.clone(), mcns_w, changed.clone(), pinned.clone()),
        reflect(
            Api::<ControllerConfig>::all(client.clone()),
            ccs_w,
            drop_managed_fields,
            |_| {},
            None,
        ),
    );

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "machineconfigcontroller".into(),
            instance: Some(identity),
        },
    );
    let ctx = Arc::new(Ctx {
        client,
        config: config.clone(),
        metrics,
        recorder,
        nodes: nodes.clone(),
        pools: pools.clone(),
        mcs: mcs.clone(),
        mcns: mcns.clone(),
        mcn_api: mcn_api.clone(),
        ccs,
        policies: policies.clone(),
        policy_writes: Default::default(),
        missing_checks: Default::default(),
        first_done: Default::default(),
        written_nodes: Mutex::new(HashMap::new()),
        written_pools: Mutex::new(HashMap::new()),
        written_mcns: Mutex::new(HashMap::new()),
        digests: Mutex::new(NodeDigests::default()),
        membership: MembershipMemo::default(),
        warned_conflicts: Mutex::new(BTreeSet::new()),
        drains: Mutex::new(HashMap::new()),
        passes: PassGate::default(),
        failures: Failures::default(),
        templates: crate::templates::Templates::new(wake_render, wake_cc),
        pinned: pinned.clone(),
        image_mode: crate::image_mode::ImageMode::new(mosc, mosb),
    });

    let controllers = async {
        // Reconcilers read several stores; start them only once every cache is filled.
        let ready = future::join5(
            ctx.nodes.wait_until_ready(),
            ctx.pools.wait_until_ready(),
            ctx.mcs.wait_until_ready(),
            ctx.mcns.wait_until_ready(),
            ctx.ccs.wait_until_ready(),
        )
        .await;
        if ready.0.is_err() || ready.1.is_err() || ready.2.is_err() || ready.3.is_err() {
            return;
        }
        tracing::info!("caches synced; controllers running");

        let p1 = pools.clone();
        let p2 = pools.clone();
        let render = Controller::for_shared_stream(spec_changes(pools_for_render), pools.clone())
            .watches_shared_stream(mcs_for_render, move |_| all_pools(&p1))
            .watches_shared_stream(spec_changes(ccs_for_render), move |_| all_pools(&p2))
            .reconcile_all_on(futures::stream::select(
                ticker(config.resync),
                render_wakeups,
            ))
            .with_config(ControllerSettings::default().debounce(config.render_debounce))
            .run(
                |pool, ctx| async move {
                    let (c, name) = (ctx.clone(), name_of(&*pool));
                    timed(&c, "render", &name, crate::render::reconcile(pool, ctx)).await
                },
                |pool, e, ctx| error_policy("render", pool, e, ctx),
                ctx.clone(),
            )
            .for_each(|_| future::ready(()));

        let p3 = pools.clone();
        let p4 = pools.clone();
        let p5 = pools.clone();
        let p6 = pools.clone();
        let pinned_status = pinned_status_wakeups.flat_map(move |pool| {
            futures::stream::iter(if pool.is_empty() {
                all_pools(&p6)
            } else {
                vec![ObjectRef::new(&pool)]
            })
        });
        let last_pool = Arc::new(Mutex::new(HashMap::<String, String>::new()));
        let last_pool_del = Arc::clone(&last_pool);
        let rollout = Controller::for_shared_stream(spec_changes(pools_for_rollout), pools.clone())
            .watches_shared_stream(nodes_for_rollout, move |n| {
                pools_touched_by(&n, &p3, &last_pool)
            })
            .watches_shared_stream(deleted_nodes, move |n| {
                forget_node(&n, &last_pool_del);
                pools_of_node(&n, &p4)
            })
            .watches_shared_stream(spec_changes(policies_for_rollout), move |_| all_pools(&p5))
            .reconcile_on(pinned_status)
            .reconcile_all_on(ticker(config.resync))
            .run(
                |pool, ctx| async move {
                    let (c, name) = (ctx.clone(), name_of(&*pool));
                    timed(&c, "node", &name, crate::rollout::reconcile(pool, ctx)).await
                },
                |pool, e, ctx| error_policy("node", pool, e, ctx),
                ctx.clone(),
            )
            .for_each(|_| future::ready(()));

        let mcn = Controller::for_shared_stream(nodes_for_mcn, nodes.clone())
            .reconcile_all_on(ticker(config.resync))
            .with_config(ControllerSettings::default().concurrency(MCN_CONCURRENCY))
            .run(
                |node, ctx| async move {
                    let (c, name) = (ctx.clone(), name_of(&*node));
                    timed(
                        &c,
                        "machineconfignode",
                        &name,
                        crate::mcn::reconcile(node, ctx),
                    )
                    .await
                },
                |node, e, ctx| error_policy("machineconfignode", node, e, ctx),
                ctx.clone(),
            )
            .for_each(|_| future::ready(()));

        // Drain requests live in node annotations; the resync serves one whose event was
        // missed (a watch gap, a restart of the controller) instead of leaving the daemon waiting.
        let drain_requests =
            nodes_for_drain.filter(|n| future::ready(mco_rollout::drain::requested(n)));
        let drain = Controller::for_shared_stream(drain_requests, nodes.clone())
            .reconcile_all_on(ticker(config.resync))
            .with_config(ControllerSettings::default().concurrency(DRAIN_CONCURRENCY))
            .run(
                |node, ctx| async move {
                    let (c, name) = (ctx.clone(), name_of(&*node));
                    timed(&c, "drain", &name, crate::drain::reconcile(node, ctx)).await
                },
                |node, e, ctx| error_policy("drain", node, e, ctx),
                ctx.clone(),
            )
            .for_each(|_| future::ready(()));

        // The ControllerConfig's own status, and each pool's certExpirys (a new pool gets them
        // at once).
        let cc_status = Controller::for_shared_stream(ccs_for_status, ctx.ccs.clone())
            .watches_shared_stream(spec_changes(pools_for_status), |_| {
                Some(ObjectRef::<ControllerConfig>::new(
                    mco_api::constants::names::CONTROLLER_CONFIG,
                ))
            })
            // The template configs: an edit or a deletion is undone at once.
            .watches_shared_stream(
                mcs_for_templates.filter(|mc| future::ready(crate::templates::concerns(mc))),
                |_| {
                    Some(ObjectRef::<ControllerConfig>::new(
                        mco_api::constants::names::CONTROLLER_CONFIG,
                    ))
                },
            )
            .watches_shared_stream(deleted_mcs, |_| {
                Some(ObjectRef::<ControllerConfig>::new(
                    mco_api::constants::names::CONTROLLER_CONFIG,
                ))
            })
            .reconcile_all_on(ticker(config.resync))
            // The pull secret and the APIServer's TLS profile: a change is taken at once.
            .reconcile_all_on(futures::stream::select(
                cc_wakeups,
                if config.templates {
                    crate::templates::inputs_changed(ctx.client.clone()).boxed()
                } else {
                    futures::stream::pending().boxed()
                },
            ))
            .run(
                |cc, ctx| async move {
                    let (c, name) = (ctx.clone(), name_of(&*cc));
                    timed(
                        &c,
                        "controllerconfig",
                        &name,
                        crate::ccstatus::reconcile(cc, ctx),
                    )
                    .await
                },
                |cc, e, ctx| error_policy("controllerconfig", cc, e, ctx),
                ctx.clone(),
            )
            .for_each(|_| future::ready(()));

        // Rollout policies' own status: validity and conflicts, on a policy's or a pool's change.
        // A pool's labels or another policy's selector can make or end a conflict.
        let every_policy = {
            let pol = policies.clone();
            move || {
                pol.state()
                    .iter()
                    .map(|p| ObjectRef::from_obj(&**p))
                    .collect::<Vec<_>>()
            }
        };
        let every_policy2 = every_policy.clone();
        let policy_status = Controller::for_shared_stream(policies_for_status, policies.clone())
            .watches_shared_stream(spec_changes(pools_for_policies), move |_| every_policy())
            .watches_shared_stream(spec_changes(policies_for_conflicts), move |_| {
                every_policy2()
            })
            .reconcile_all_on(ticker(config.resync))
            .run(
                |p, ctx| async move {
                    let (c, name) = (ctx.clone(), name_of(&*p));
                    timed(
                        &c,
                        "rolloutpolicy",
                        &name,
                        crate::policies::reconcile(p, ctx),
                    )
                    .await
                },
                |p, e, ctx| error_policy("rolloutpolicy", p, e, ctx),
                ctx.clone(),
            )
            .for_each(|_| future::ready(()));

        // Each pool's spec.pinnedImageSets: on a new pool spec (its selector, or the list
        // edited by hand) and on a set's change.
        let pinned_sets =
            Controller::for_shared_stream(spec_changes(pools_for_pinned), pools.clone())
                .reconcile_all_on(futures::stream::select(ticker(config.resync), set_changes))
                .run(
                    |pool, ctx| async move {
                        let (c, name) = (ctx.clone(), name_of(&*pool));
                        timed(
                            &c,
                            "pinnedimageset",
                            &name,
                            crate::pinned::reconcile(pool, ctx),
                        )
                        .await
                    },
                    |pool, e, ctx| error_policy("pinnedimageset", pool, e, ctx),
                    ctx.clone(),
                )
                .for_each(|_| future::ready(()));

        let sweep = crate::mcn::sweep_orphans(ctx.clone());
        // Its own watch of one object: a cluster without the MachineConfiguration CRD keeps
        // every other controller running.
        let disruption = crate::disruption::run(ctx.client.clone());
        // Their own watches too, for the same reason: the input CRDs may be missing.
        let generators = crate::generators::run(
            ctx.clone(),
            spec_changes(pools_for_registries),
            spec_changes(pools_for_kubelet_defaults),
            mcs_for_kubelet_defaults,
        );
        // Its own loop of reads: three objects in one namespace, checked every minute.
        let server_certs = match config.server_certs.clone() {
            Some(opts) => future::Either::Left(crate::server_certs::run(ctx.clone(), opts)),
            None => future::Either::Right(future::pending()),
        };
        // Its own watches: the user-data Secrets of one namespace and the bundle by name.
        let user_data = match config.user_data.clone() {
            Some(opts) => future::Either::Left(crate::user_data::run(ctx.clone(), opts)),
            None => future::Either::Right(future::pending()),
        };
        // Its own watches: the source ConfigMaps and the Image config, each by name.
        let cc_sync = if config.sync_controller_config {
            future::Either::Left(crate::ccsync::run(ctx.clone()))
        } else {
            future::Either::Right(future::pending())
        };
        // Its own watches: the ClusterOperator and the release's ConfigMap, each by name.
        let co_report = match co_changes {
            Some(changes) => {
                future::Either::Left(crate::clusteroperator::run(ctx.clone(), changes))
            }
            None => future::Either::Right(future::pending()),
        };
        future::join(
            future::join5(
                future::join5(render, rollout, mcn, drain, sweep),
                future::join5(disruption, pinned_sets, server_certs, user_data, cc_sync),
                generators,
                cc_status,
                policy_status,
            ),
            co_report,
        )
        .await;
    };

    // Its own watch: without the RolloutPolicy CRD the store stays empty and every pool is
    // ungoverned, and no other controller waits for it.
    let policy_watch = reflect(
        Api::<RolloutPolicy>::all(ctx.client.clone()),
        policies_w,
        drop_managed_fields,
        |_| {},
        Some(changed),
    );
    // Its own watch too: the PinnedImageSet CRD may be missing (before OpenShift 4.19), and is
    // looked up again every other resync.
    let set_watch = crate::pinned::watch_sets(
        Api::all(ctx.client.clone()),
        sets_w,
        pinned,
        sets_changed,
        config.resync * 2,
    );
    // And the image-mode kinds, which may be missing too.
    let image_mode_watch = crate::image_mode::watch(
        (Api::all(ctx.client.clone()), mosc_w),
        (Api::all(ctx.client.clone()), mosb_w),
        wake_image_mode,
        config.resync * 2,
    );
    let watches = future::join4(watches, policy_watch, set_watch, image_mode_watch);
    tokio::select! {
        _ = watches => Err(Error::Stale("watches ended".into())),
        _ = controllers => Err(Error::Stale("controllers ended".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerImage, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ManagedFieldsEntry};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use mco_api::constants::{annotations, states, taints};
    use mco_api::{MachineConfigPoolSpec, PoolConfiguration};

    fn pool(name: &str, target: &str) -> MachineConfigPool {
        MachineConfigPool::new(
            name,
            MachineConfigPoolSpec {
                node_selector: Some(LabelSelector {
                    match_labels: Some(
                        [(format!("node-role.kubernetes.io/{name}"), String::new())].into(),
                    ),
                    match_expressions: None,
                }),
                configuration: Some(PoolConfiguration {
                    name: target.into(),
                    source: vec![],
                }),
                max_unavailable: Some(IntOrString::Int(3)),
                ..Default::default()
            },
        )
    }

    #[tokio::test]
    async fn pools_trigger_on_a_new_spec_a_new_pool_and_a_deletion_not_on_status() {
        let at = |uid: &str, generation: i64, status: i32, deleting: bool| {
            let mut p = pool("worker", "rendered-worker-1");
            p.metadata.uid = Some(uid.into());
            p.metadata.generation = Some(generation);
            p.status = Some(mco_api::MachineConfigPoolStatus {
                updated_machine_count: status,
                ..Default::default()
            });
            if deleting {
                p.metadata.deletion_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
                );
            }
            Arc::new(p)
        };
        let mut no_generation = pool("infra", "rendered-infra-1");
        no_generation.metadata.uid = Some("c".into());
        let no_generation = Arc::new(no_generation);
        let seen: Vec<(String, i32, bool)> = spec_changes(futures::stream::iter(vec![
            at("a", 1, 0, false),
            at("a", 1, 1, false), // status only
            at("a", 2, 1, false), // new spec
            at("a", 2, 2, false), // status only
            at("a", 2, 2, false), // the same again (a relist)
            at("a", 2, 2, true),  // deletion begun
            at("b", 1, 0, false), // the same name, a new pool
            Arc::clone(&no_generation),
            no_generation,
        ]))
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p.metadata.uid.as_deref().unwrap(),
                    p.metadata.generation.unwrap_or(0)
                ),
                p.status.as_ref().map_or(-1, |s| s.updated_machine_count),
                p.metadata.deletion_timestamp.is_some(),
            )
        })
        .collect()
        .await;
        let expected = vec![
            ("a/1".to_string(), 0, false),
            ("a/2".to_string(), 1, false),
            ("a/2".to_string(), 2, true),
            ("b/1".to_string(), 0, false),
            ("c/0".to_string(), -1, false),
            ("c/0".to_string(), -1, false),
        ];
        assert_eq!(seen, expected);
    }

    /// A worker node as a real cluster reports it: images, nodeInfo, managedFields and a
    /// last-applied copy besides what the planner reads.
    fn full_node(name: &str, current: &str, ready: &str, tainted: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels =
            Some([("node-role.kubernetes.io/worker".to_string(), String::new())].into());
        n.metadata.annotations = Some(
            [
                (annotations::CURRENT_CONFIG.to_string(), current.to_string()),
                (annotations::DESIRED_CONFIG.to_string(), current.to_string()),
                (annotations::STATE.to_string(), states::DONE.to_string()),
                (LAST_APPLIED.to_string(), "{\"big\":true}".to_string()),
            ]
            .into(),
        );
        n.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        n.spec = Some(NodeSpec {
            taints: tainted.then(|| {
                vec![Taint {
                    key: taints::UPDATE_IN_PROGRESS_KEY.into(),
                    effect: taints::UPDATE_IN_PROGRESS_EFFECT.into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                ..Default::default()
            }]),
            images: Some(vec![ContainerImage {
                names: Some(vec!["quay.io/example/image@sha256:0".into()]),
                size_bytes: Some(1),
            }]),
            node_info: Some(NodeSystemInfo {
                machine_id: "m".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        n
    }

    #[test]
    fn slim_node_keeps_what_the_planner_reads() {
        let pools = [pool("worker", "rendered-new")];
        let full = vec![
            full_node("a", "rendered-old", "True", false),
            full_node("b", "rendered-new", "True", true),
            full_node("c", "rendered-old", "False", false),
            full_node("d", "rendered-old", "True", true),
        ];
        let slim: Vec<Node> = full
            .iter()
            .cloned()
            .map(|mut n| {
                slim_node(&mut n);
                n
            })
            .collect();
        let now = "2026-01-01T00:00:00Z";
        let want = plan::plan(&pools[0], &full, &pools, now);
        assert!(!want.candidates.is_empty() && !want.taint_remove.is_empty());
        assert_eq!(plan::plan(&pools[0], &slim, &pools, now), want);
        for (f, s) in full.iter().zip(&slim) {
            assert_eq!(
                crate::mcn::desired_spec(s, &pools),
                crate::mcn::desired_spec(f, &pools)
            );
        }

        let n = &slim[0];
        let status = n.status.as_ref().expect("status");
        assert!(status.images.is_none() && status.node_info.is_none());
        assert!(n.metadata.managed_fields.is_none());
        assert!(
            !n.metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key(LAST_APPLIED)
        );
        assert_eq!(
            status.conditions,
            full[0].status.as_ref().unwrap().conditions
        );
        assert_eq!(n.spec, full[0].spec);
    }

    #[test]
    fn membership_is_computed_again_only_when_labels_nodes_or_selectors_change() {
        use crate::nodeview::NodeView;
        let memo = MembershipMemo::default();
        let digests = Mutex::new(NodeDigests::default());
        let (store, mut w) = reflector::store::<Node>();
        let apply = |w: &mut reflector::store::Writer<Node>, n: Node| {
            w.apply_watcher_event(&watcher::Event::Apply(n));
        };
        let pools = vec![Arc::new(pool("worker", "r")), Arc::new(pool("master", "m"))];
        apply(&mut w, full_node("a", "r", "True", false));
        apply(&mut w, full_node("b", "r", "True", false));
        let read = || -> NodeView {
            digests
                .lock()
                .unwrap()
                .read(&store, &mut HashMap::new(), &memo.labels_epoch)
        };
        let pass = |pools: &[Arc<MachineConfigPool>]| {
            let view = read();
            memo.get(view.epoch, || view.cached_nodes(), pools)
        };
        let first = pass(&pools);
        assert_eq!(first.primary.get("a").map(String::as_str), Some("worker"));

        // A new version of a node with the same labels (a rollout's annotations): reused.
        apply(&mut w, full_node("a", "r2", "False", true));
        assert!(Arc::ptr_eq(&first, &pass(&pools)));

        // New labels: computed again.
        let mut master = full_node("a", "r2", "True", false);
        master.metadata.labels =
            Some([("node-role.kubernetes.io/master".to_string(), String::new())].into());
        apply(&mut w, master);
        let relabelled = pass(&pools);
        assert_eq!(
            relabelled.primary.get("a").map(String::as_str),
            Some("master")
        );

        // A node gone, then a node come.
        w.apply_watcher_event(&watcher::Event::Delete(full_node("b", "r", "True", false)));
        let fewer = pass(&pools);
        assert!(!fewer.primary.contains_key("b"));
        apply(&mut w, full_node("c", "r", "True", false));
        let more = pass(&pools);
        assert_eq!(more.primary.get("c").map(String::as_str), Some("worker"));

        // A pool's selector changed.
        let mut narrow = pool("worker", "r");
        narrow.spec.node_selector = Some(LabelSelector {
            match_labels: Some([("only".to_string(), "this".to_string())].into()),
            match_expressions: None,
        });
        let pools = vec![Arc::new(narrow), Arc::new(pool("master", "m"))];
        let narrowed = pass(&pools);
        assert!(!narrowed.primary.contains_key("c"));
        assert!(Arc::ptr_eq(&narrowed, &pass(&pools)));

        // A pass over nodes read before a relabel, racing one over nodes read after it: what
        // the older pass computes is never filed where the newer pass finds it.
        let before = read();
        let mut moved = full_node("c", "r", "True", false);
        moved.metadata.labels = Some([("only".to_string(), "this".to_string())].into());
        apply(&mut w, moved);
        let after = read();
        assert_ne!(before.epoch, after.epoch);
        let stale = memo.get(before.epoch, || before.cached_nodes(), &pools);
        assert!(!stale.primary.contains_key("c"));
        let fresh = memo.get(after.epoch, || after.cached_nodes(), &pools);
        assert_eq!(fresh.primary.get("c").map(String::as_str), Some("worker"));
    }

    #[test]
    fn pool_memory_of_a_deleted_node_is_dropped() {
        let pools: Store<MachineConfigPool> = {
            let (store, mut w) = reflector::store::<MachineConfigPool>();
            w.apply_watcher_event(&watcher::Event::Apply(pool("worker", "r")));
            store
        };
        let last = Mutex::new(HashMap::new());
        let n = full_node("a", "r", "True", false);
        pools_touched_by(&n, &pools, &last);
        assert_eq!(
            last.lock().unwrap().get("a").map(String::as_str),
            Some("worker")
        );
        forget_node(&n, &last);
        assert!(last.lock().unwrap().is_empty());
    }
}
