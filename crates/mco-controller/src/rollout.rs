//! The node (rollout) controller: applies the planner's decisions for one pool — `desiredConfig`
//! on the chosen nodes and their MachineConfigNodes, the `UpdateInProgress` taint, pool status,
//! events and metrics.
//!
//! A pass taints every member still to be updated, but writes at most the candidates' taints
//! and 32 more at once; the rest follow in passes at most 100 ms apart, so a large pool's first
//! pass is not a burst of writes. A candidate still without the taint gets it in the same Node
//! write as its `desiredConfig`, conditional on the version the pass planned from (on a
//! conflict the two go out separately), so no node is ever targeted untainted. Candidates are
//! targeted one after another, so a wave's nodes start one write apart.
//!
//! The status written is the one the plan computed, which already counts the candidates as
//! targeted, with the pinned image sets' part (`poolSynchronizersStatus`,
//! `PinnedImageSetsDegraded`; see [`crate::pinned`]) in the same write. Only when another writer moved the pool's status or generation meanwhile is it
//! computed again, from the members the plan read with this pass's own writes laid over them.
//! Events are published without the pass waiting for them.
//!
//! A pool's next pass starts no sooner than `pass_spacing` (10) times the last one's planning
//! time after it started, and node events that arrive meanwhile fold into it ([`PassGate`]), so
//! planning takes at most about a tenth of a thread. What a pass reads of the nodes is kept
//! from one pass to the next ([`crate::nodeview`]), and pool membership until a label, a node
//! or a pool's selector changes ([`MembershipMemo`]).
//!
//! [`PassGate`]: crate::ctx::PassGate
//! [`MembershipMemo`]: crate::ctx::MembershipMemo

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use mco_api::MachineConfigPool;
use mco_api::constants::annotations;
use mco_api::image_mode::PoolBuild;
use mco_api::rollouts;
use mco_rollout::plan::{self, Member, Membership, PlanEvent};
use mco_rollout::policy;
use serde_json::json;

use crate::Error;
use crate::ctx::{Ctx, update_pool_status};
use crate::metrics::NodeLabels;
use crate::policies;

/// Taint writes in flight at once for one pool. (Candidates are targeted one at a time.)
const TAINT_WRITE_CONCURRENCY: usize = 16;

/// Taints a pass adds beyond its candidates'. A rollout's first pass would otherwise taint every
/// member at once: at a thousand nodes, a thousand writes landing on the first wave's drains.
/// Spread over the passes that follow, they land while that wave reboots. The taint only steers
/// the scheduler, so a second's delay costs nothing.
const TAINTS_AHEAD: usize = 32;

/// How soon a pass that left taints to add runs again, events or not.
const TAINTS_LEFT_REQUEUE: std::time::Duration = std::time::Duration::from_millis(100);

fn name_of(n: &Node) -> &str {
    n.metadata.name.as_deref().unwrap_or_default()
}

/// Report nodes that fit no pool (once each) and set `mcc_pool_alert`.
async fn report_membership(ctx: &Ctx, membership: &Membership) {
    let fresh: Vec<PlanEvent> = {
        let mut warned = ctx
            .warned_conflicts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        warned.retain(|n| membership.conflicts.contains_key(n));
        membership
            .conflict_events()
            .into_iter()
            .filter(|ev| match &ev.subject {
                plan::EventSubject::Node(n) => warned.insert(n.clone()),
                plan::EventSubject::Pool(_) => true,
            })
            .collect()
    };
    for ev in &fresh {
        ctx.publish_plan_event(ev).await;
    }
    ctx.metrics.pool_alert.clear();
    for node in &membership.pool_alerts {
        ctx.metrics
            .pool_alert
            .get_or_create(&NodeLabels { node: node.clone() })
            .set(1);
    }
}

/// Point a node at the target: the annotation (which the daemon acts on) and the MCN spec. The
/// two writes are independent, so they go out together.
///
/// `untainted` is the node as last seen when it still lacks the `UpdateInProgress` taint: the
/// taint then goes in the same write as the annotation, conditional on that version, so a
/// rollout's first wave is not written twice at once. If the node moved meanwhile, only the
/// annotation is written here and the pass's taint writes add the taint, as for any other node.
/// Returns the node's name when its taint went out with the annotation.
///
/// `check_timeout` (whole seconds) is the governing policy's `nodeChecks.timeout`, which the
/// daemon reads from the Node when it runs its checks; `None` removes it (the daemon's default).
async fn set_desired(
    ctx: &Ctx,
    node: &str,
    target: &str,
    image: Option<&str>,
    check_timeout: Option<String>,
    untainted: Option<Arc<Node>>,
) -> Result<Option<String>, Error> {
    // The image goes with the config in one write (upstream's `SetDesiredStateFromMachineOSConfig`);
    // outside image mode a null removes any image left from it.
    let annotations = json!({
        annotations::DESIRED_CONFIG: target,
        annotations::DESIRED_IMAGE: image,
        rollouts::annotations::NODE_CHECK_TIMEOUT: check_timeout,
    });
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node_write = async {
        // Without a version to hold it to, the taint list could overwrite a newer one.
        if let Some(seen) = untainted
            .as_ref()
            .filter(|n| n.metadata.resource_version.is_some())
        {
            let patch = json!({
                "metadata": {
                    "resourceVersion": seen.metadata.resource_version,
                    "annotations": annotations,
                },
                "spec": {"taints": plan::with_update_taint(seen, true)},
            });
            match nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                done => return done.map(|n| (n, true)),
            }
        }
        let patch = json!({"metadata": {"annotations": annotations}});
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|n| (n, false))
    };
    let mcn_patch = json!({"spec": {"configVersion": {"desired": target}}});
    let (written, mcn) = futures::future::join(
        node_write,
        ctx.mcn_api
            .merge_patch(node, &PatchParams::default(), mcn_patch),
    )
    .await;
    let (written, tainted) = written?;
    ctx.wrote_node(written);
    let tainted = tainted.then(|| node.to_string());
    match mcn {
        Ok(m) => {
            ctx.wrote_mcn(m);
            Ok(tainted)
        }
        // The MCN controller creates it with the node's desiredConfig.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(tainted),
        Err(e) => Err(e.into()),
    }
}

/// Add or remove the `UpdateInProgress:PreferNoSchedule` taint. Taints are one atomic list, so
/// each write is conditional on the version it was computed from, and a conflict (someone else
/// changed the node) is retried on a fresh read. `Ok(false)`: it kept conflicting.
async fn set_taint(ctx: &Ctx, node: &Node, present: bool) -> Result<bool, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let mut node = node.clone();
    for _ in 0..5 {
        if plan::has_update_taint(&node) == present {
            return Ok(true);
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": plan::with_update_taint(&node, present)},
        });
        match nodes
            .patch(
                name_of(&node),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(n) => {
                ctx.wrote_node(n);
                return Ok(true);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                match nodes.get_opt(name_of(&node)).await? {
                    Some(n) => node = n,
                    None => return Ok(true),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(false)
}

/// The planner's image for a pool in `build`.
fn image_target(build: &PoolBuild) -> plan::ImageTarget<'_> {
    match build {
        PoolBuild::NotLayered => plan::ImageTarget::None,
        PoolBuild::Ready { image, .. } => plan::ImageTarget::Image(image),
        PoolBuild::Waiting(why) => plan::ImageTarget::Waiting(why),
    }
}

/// Apply the plan for one pool.
pub async fn reconcile(pool: Arc<MachineConfigPool>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let called = Instant::now();
    let turn = ctx
        .passes
        .book(&name, Instant::now(), ctx.config.pass_spacing);
    if turn > Instant::now() {
        tokio::time::sleep_until(turn.into()).await;
    }
    // The pool handed over is as old as the wait, and the cache can be behind this controller's
    // own last status write: the status planned here starts from the newest.
    let Some(pool) = ctx
        .known_pool(&name)
        .or_else(|| ctx.pools.get(&ObjectRef::from_obj(&*pool)))
    else {
        return Ok(Action::await_change());
    };
    if pool.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let planning = Instant::now();
    let pools = ctx.pools.state();
    let now_ts = jiff::Timestamp::now();
    let now = now_ts.to_string();
    let (view, positions, membership) = ctx.pass_nodes(&name, &pools);
    let members = view.pick(&positions);
    // The pool as set by users; `pool` below is the one planned, its target pinned by a rollback.
    let set_pool = Arc::clone(&pool);
    let pin = pinned(&ctx, &pool).await;
    let pool = match &pin {
        Some(pin) => {
            let mut p = (*pool).clone();
            if let Some(c) = p.spec.configuration.as_mut() {
                c.name.clone_from(pin);
            }
            Arc::new(p)
        }
        None => pool,
    };
    let build = ctx.image_mode.pool_build(
        &name,
        pool.spec
            .configuration
            .as_ref()
            .map(|c| c.name.as_str())
            .unwrap_or_default(),
        pin.is_some(),
    );
    let image = image_target(&build);
    let mut decision = decide(&ctx, &name, &set_pool, &pool, &members, image, now_ts).await;
    let cap = decision.as_ref().and_then(|(_, d)| d.cap);
    let the_plan = plan::plan_members_for(
        &pool,
        &members,
        ctx.config.own_node.as_deref(),
        &now,
        cap,
        image,
    );
    let planned = planning.elapsed();
    ctx.passes.planned(&name, planned);
    // After the planning is timed: reporting a new conflict waits on the API.
    report_membership(&ctx, &membership).await;
    if let Some(own) = &the_plan.deferred {
        tracing::debug!(pool = %name, node = %own, "deferring the update of the controller's own node");
    }

    if plan::selects_all_nodes(&pool) {
        for ev in &the_plan.events {
            ctx.publish_plan_event(ev).await;
        }
        return Ok(Action::requeue(ctx.config.resync));
    }

    // Candidates are targeted one after another, as upstream's node controller does, so a
    // wave's nodes start one write apart. Targeted together, a hundred nodes drained, rebooted
    // and came back within the same few hundred milliseconds, every later wave inherited that
    // bunching, and the machine stood half idle while they all rebooted: a 1,000-node `mco up`
    // rollout with 1-s reboots took about 12.2 s instead of 11.8 s. The write's own latency
    // paces the wave, so a busier machine spreads it further.
    // Each write future is made only when it is started: a request future is kilobytes, and a
    // rollout's first pass taints every member, so making them all up front cost megabytes per
    // pool at thousands of nodes. The futures own what they use: borrowing the plan from a
    // lazily mapped stream does not satisfy the controller's higher-ranked `Send` bound.
    let mut tainted_with_target: HashSet<String> = HashSet::new();
    if let Some(target) = the_plan.target.clone() {
        // Past a rollout's first passes every member is tainted, and this is empty.
        let untainted: HashSet<&str> = the_plan.taint_add.iter().map(String::as_str).collect();
        let seen: HashMap<&str, &Arc<Node>> = if untainted.is_empty() {
            HashMap::new()
        } else {
            members
                .iter()
                .filter(|d| untainted.contains(d.name()))
                .map(|d| (d.name(), d.shared_node()))
                .collect()
        };
        let writes: Vec<(String, Option<Arc<Node>>)> = the_plan
            .candidates
            .iter()
            .map(|c| (c.clone(), seen.get(c.as_str()).map(|n| Arc::clone(n))))
            .collect();
        let check_timeout = policies::governing(&ctx, &name)
            .and_then(|(_, v)| v.node_checks)
            .map(|t| t.as_secs().to_string());
        let writes = writes.into_iter().map(|(c, untainted)| {
            let (ctx, target, timeout) = (Arc::clone(&ctx), target.clone(), check_timeout.clone());
            let image = the_plan.image.clone();
            async move {
                set_desired(&ctx, &c, &target, image.as_deref(), timeout, untainted).await
            }
        });
        tainted_with_target = futures::stream::iter(writes)
            .then(|write| write)
            .try_filter_map(|n| futures::future::ready(Ok(n)))
            .try_collect()
            .await?;
    }
    // Each taint write is conditional on the node's version: the base includes the desired
    // configs just written, or every candidate's taint would meet a conflict and a read.
    // Most passes have none to write, and then no need of this index of every node.
    let after_desired = if the_plan.taint_add.is_empty() && the_plan.taint_remove.is_empty() {
        vec![]
    } else {
        ctx.fresh_nodes()
    };
    let by_name: HashMap<&str, &Arc<Node>> =
        after_desired.iter().map(|n| (name_of(n), n)).collect();
    let adds_now = the_plan
        .taint_add
        .len()
        .min(the_plan.candidates.len() + TAINTS_AHEAD);
    let taints_left = adds_now < the_plan.taint_add.len();
    let taint_writes: Vec<(Arc<Node>, bool)> = the_plan.taint_add[..adds_now]
        .iter()
        .filter(|n| !tainted_with_target.contains(n.as_str()))
        .map(|n| (n, true))
        .chain(the_plan.taint_remove.iter().map(|n| (n, false)))
        .filter_map(|(n, present)| {
            by_name
                .get(n.as_str())
                .map(|node| (Arc::clone(node), present))
        })
        .collect();
    let taint_writes = taint_writes.into_iter().map(|(node, present)| {
        let ctx = Arc::clone(&ctx);
        async move { set_taint(&ctx, &node, present).await }
    });
    let complete = futures::stream::iter(taint_writes)
        .buffer_unordered(TAINT_WRITE_CONCURRENCY)
        .try_fold(true, |all, one| futures::future::ready(Ok(all && one)))
        .await?;

    let wrote = Instant::now();
    // The plan's status already counts its candidates as targeted. It is the one to write
    // unless the pool's status or generation moved since the plan read them (another writer:
    // the render's conditions); then it is computed again from the members the plan read, with
    // this pass's own writes laid over them. Reading every node again for it cost as much as
    // the plan, and a node that changed meanwhile brings another pass anyway.
    let (mut events, planned_status_events): (Vec<PlanEvent>, Vec<PlanEvent>) =
        the_plan.events.into_iter().partition(|e| {
            e.reason == plan::SET_DESIRED_CONFIG || e.reason == plan::SET_DESIRED_CONFIG_AND_IMAGE
        });
    let targeted: HashSet<&str> = the_plan.candidates.iter().map(String::as_str).collect();
    let status_events: Mutex<Vec<PlanEvent>> = Mutex::new(vec![]);
    if let Some((_, d)) = decision.as_mut() {
        policy::note_targeted(&mut d.state, &the_plan.candidates);
    }
    let entry = decision.as_ref().map(|(_, d)| &d.state);
    let rendered = set_pool
        .spec
        .configuration
        .as_ref()
        .map(|c| c.name.as_str())
        .unwrap_or_default();
    let pin_condition = pin.as_deref().map(|p| (p, rendered));
    // The pinned image sets' part: how many members have every set current, and why the pool's
    // list cannot be written (its own selector first: that needs no other controller's pass).
    let pinned_updated = ctx.pinned.updated_among(members.iter().map(|d| d.name()));
    let pinned_failure =
        mco_rollout::pinned::spec_failure(&set_pool).or_else(|| ctx.pinned.failure(&name));
    let pinned_failure = pinned_failure.as_deref();
    let written = update_pool_status(&ctx, &name, |live| {
        if live.spec.configuration != set_pool.spec.configuration
            || live.spec.paused != set_pool.spec.paused
        {
            // The spec moved under us; the pool watch brings a new reconcile.
            return None;
        }
        let mut events = status_events.lock().unwrap_or_else(|e| e.into_inner());
        if live.status == pool.status && live.metadata.generation == pool.metadata.generation {
            events.clone_from(&planned_status_events);
            let mut status = the_plan.status.clone();
            policies::pool_conditions(&mut status, entry, pin_condition, &now);
            mco_rollout::pinned::set_status(&mut status, pinned_updated, pinned_failure, &now);
            return Some(status);
        }
        let members: Vec<Arc<plan::Digest>> = members
            .iter()
            .map(|d| {
                if targeted.contains(d.name()) {
                    ctx.rewritten(d)
                } else {
                    Arc::clone(d)
                }
            })
            .collect();
        let mut p = (*pool).clone();
        p.status = live.status.clone();
        p.metadata.generation = live.metadata.generation;
        let (mut status, evs) = plan::calculate_status_for(&p, &members, &now, image);
        policies::pool_conditions(&mut status, entry, pin_condition, &now);
        mco_rollout::pinned::set_status(&mut status, pinned_updated, pinned_failure, &now);
        *events = evs;
        Some(status)
    })
    .await?;
    let status = written
        .and_then(|p| p.status)
        .unwrap_or_else(|| the_plan.status.clone());
    ctx.metrics.set_pool(&name, &status);
    // Where a pass's time went: its wait for its turn, the plan, the node writes, the status.
    tracing::debug!(
        pool = %name,
        waited = ?planning - called,
        planned = ?planned,
        writes = ?wrote - planning - planned,
        status = ?wrote.elapsed(),
        candidates = the_plan.candidates.len(),
        "pool pass"
    );

    events.append(&mut status_events.lock().unwrap_or_else(|e| e.into_inner()));
    let mut requeue = ctx.config.resync;
    if let Some((policy, d)) = decision {
        if let Some(r) = d.requeue {
            // A soak's end or a window's opening is acted on to the second.
            requeue = requeue.min(r + std::time::Duration::from_millis(200));
        }
        for ev in &d.events {
            let metric = match ev.reason {
                "RolloutHalted" => Some("halt"),
                "Promoted" => Some("promote"),
                "WaitingForWindow" => Some("window_wait"),
                _ => None,
            };
            if let Some(m) = metric {
                ctx.metrics.rollout_event(&name, m);
            }
            events.push(PlanEvent {
                kind: if ev.warning {
                    plan::EventKind::Warning
                } else {
                    plan::EventKind::Normal
                },
                subject: plan::EventSubject::Pool(name.clone()),
                reason: ev.reason,
                message: ev.message.clone(),
            });
        }
        if d.rollback
            && let Some(ev) = auto_rollback(&ctx, &set_pool, &pool).await?
        {
            events.push(ev);
        }
        policies::record(&ctx, &policy, d.state).await?;
    }
    if !events.is_empty() {
        // Events are for people: the pass does not wait for them, so a node freed meanwhile
        // is targeted by the next pass one round trip sooner. One task keeps their order.
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            for ev in &events {
                ctx.publish_plan_event(ev).await;
            }
        });
    }
    if !complete {
        return Err(Error::Stale(format!(
            "pool {name}: a node changed while its taint was written"
        )));
    }
    if taints_left {
        return Ok(Action::requeue(TAINTS_LEFT_REQUEUE));
    }
    Ok(Action::requeue(requeue))
}

/// The rendered config a rollback pins the pool to, when it exists. A pin that
/// `spec.configuration` names again has done its job and is removed, so the next change of the
/// pool's MachineConfigs rolls out as usual.
async fn pinned(ctx: &Ctx, pool: &MachineConfigPool) -> Option<String> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let annotated = pool
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(rollouts::annotations::ROLLBACK_TO))
        .filter(|s| !s.is_empty());
    let pin = policies::rollback_pin(pool);
    if annotated.is_some() && pin.is_none() {
        let api: Api<MachineConfigPool> = Api::all(ctx.client.clone());
        let patch =
            json!({"metadata": {"annotations": {rollouts::annotations::ROLLBACK_TO: null}}});
        if let Err(e) = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(pool = %name, error = %e, "could not remove the finished rollback pin");
        }
        return None;
    }
    let pin = pin?;
    if ctx.mcs.get(&ObjectRef::new(pin)).is_none() {
        tracing::warn!(pool = %name, config = %pin, "rollback pin names no rendered config; ignored");
        return None;
    }
    Some(pin.to_string())
}

/// The governing policy's decision for this pass, if a valid policy alone governs the pool and
/// it has a target.
async fn decide<N: plan::Member>(
    ctx: &Ctx,
    name: &str,
    set_pool: &MachineConfigPool,
    pool: &MachineConfigPool,
    members: &[&N],
    image: plan::ImageTarget<'_>,
    now: jiff::Timestamp,
) -> Option<(Arc<mco_api::RolloutPolicy>, policy::Decision)> {
    let target = pool
        .spec
        .configuration
        .as_ref()
        .map(|c| c.name.as_str())
        .filter(|t| !t.is_empty())?;
    let (governing, validated) = policies::governing(ctx, name)?;
    let mut inputs: Vec<policy::NodeGateInput> = members
        .iter()
        .map(|m| policies::gate_input(*m, target, image))
        .collect();
    if validated.node_checks.is_some() {
        policies::note_missing_checks(ctx, &mut inputs, target, now);
    }
    if validated.pods_ready.is_some() {
        policies::note_returns(ctx, &mut inputs, target, now);
    }
    let previous = policies::previous(ctx, &governing, name).await;
    let controls = policies::controls(set_pool);
    let windows = policy::window_state(&validated.windows, now);
    // Diffing configs costs a parse: only a policy with windows asks.
    let disruptive =
        !validated.windows.is_empty() && crate::windows::disruptive(ctx, target, &inputs);
    let (external, external_pending) =
        external_gates(ctx, &validated, target, &inputs, previous.as_ref(), now).await;
    let d = policy::decide(
        &validated,
        windows,
        &policy::PoolInput {
            pool: name,
            target,
            members: &inputs,
            previous: previous.as_ref(),
            halt_requested: controls.halt,
            resumed_at: controls.resumed_at,
            promote: controls.promote,
            disruptive,
            external: &external,
            external_pending,
            now,
        },
    );
    Some((governing, d))
}

/// The `podsReady` and `pdbs` gates, read from the API only when the policy has them. A read
/// that fails counts as not passing yet, and is tried again in 10 seconds.
async fn external_gates(
    ctx: &Ctx,
    validated: &policy::Validated,
    target: &str,
    inputs: &[policy::NodeGateInput],
    previous: Option<&rollouts::PoolRollout>,
    now: jiff::Timestamp,
) -> (Vec<policy::ExternalFailure>, Option<jiff::Timestamp>) {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::ListParams;
    if validated.pods_ready.is_none() && !validated.pdbs && validated.http.is_empty() {
        return (vec![], None);
    }
    // The nodes this rollout moved: as `decide` counts them, a rollout first seen now has
    // moved none of the nodes already on its target.
    let baseline: Vec<&str> = match previous {
        Some(p) if p.target == target => p.baseline_nodes.iter().map(String::as_str).collect(),
        _ => inputs
            .iter()
            .filter(|n| n.targeted)
            .map(|n| n.name.as_str())
            .collect(),
    };
    // A finished rollout has nothing left to halt.
    if inputs.iter().all(|n| n.updated) {
        return (vec![], None);
    }
    let moved: Vec<(&str, Option<jiff::Timestamp>)> = inputs
        .iter()
        .filter(|n| n.targeted && n.updated && n.ready && !baseline.contains(&n.name.as_str()))
        .map(|n| (n.name.as_str(), n.ready_since))
        .collect();
    // HTTP probes judge the service, once some node has been moved; a failure names no node.
    let mut http_failures = vec![];
    if !moved.is_empty() {
        for p in &validated.http {
            if let Err(message) = crate::probes::probe(p).await {
                http_failures.push(policy::ExternalFailure {
                    node: String::new(),
                    gate: policy::gates::HTTP,
                    message,
                });
            }
        }
    }
    if validated.pods_ready.is_none() && !validated.pdbs {
        return (http_failures, None);
    }
    let retry = now.checked_add(jiff::SignedDuration::from_secs(10)).ok();
    let mut pods = vec![];
    if let Some(timeout) = validated.pods_ready {
        // The gate is about a node's return from its update: a node back for more than twice
        // the timeout was judged already, and is not listed on every pass again.
        let recent = |since: &Option<jiff::Timestamp>| {
            since
                .and_then(|s| s.checked_add(timeout * 2).ok())
                .is_none_or(|until| now < until)
        };
        for (node, _) in moved.iter().filter(|(_, since)| recent(since)) {
            let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
            match Api::<Pod>::all(ctx.client.clone()).list(&lp).await {
                Ok(l) => pods.extend(l.items),
                Err(e) => {
                    tracing::warn!(node, error = %e, "podsReady gate: listing pods");
                    return (vec![], retry);
                }
            }
        }
    }
    let pdbs = if validated.pdbs {
        match Api::<PodDisruptionBudget>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(error = %e, "pdbs gate: listing PodDisruptionBudgets");
                return (vec![], retry);
            }
        }
    } else {
        vec![]
    };
    // Only a short budget needs its pods, to see whether it covers the pool: those of its
    // namespace, listed once per namespace.
    let mut pdb_pods = vec![];
    let short_namespaces: std::collections::BTreeSet<&str> = pdbs
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.current_healthy < s.desired_healthy)
        })
        .filter_map(|p| p.metadata.namespace.as_deref())
        .collect();
    for ns in short_namespaces {
        match Api::<Pod>::namespaced(ctx.client.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            Ok(l) => pdb_pods.extend(l.items),
            Err(e) => {
                tracing::warn!(namespace = ns, error = %e, "pdbs gate: listing pods");
                return (vec![], retry);
            }
        }
    }
    let pool_nodes: Vec<&str> = inputs.iter().map(|n| n.name.as_str()).collect();
    let (mut failures, pending) =
        policy::pod_and_pdb_gates(validated, &moved, &pods, &pdbs, &pdb_pods, &pool_nodes, now);
    failures.extend(http_failures);
    (failures, pending)
}

/// A canary failed under a policy with `autoRollback`: pin the pool to the config it was on.
async fn auto_rollback(
    ctx: &Ctx,
    set_pool: &MachineConfigPool,
    pool: &MachineConfigPool,
) -> Result<Option<PlanEvent>, Error> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let target = pool.spec.configuration.as_ref().map(|c| c.name.as_str());
    let Some(previous) = set_pool
        .status
        .as_ref()
        .and_then(|s| s.configuration.as_ref())
        .map(|c| c.name.clone())
        .filter(|p| Some(p.as_str()) != target && !p.is_empty())
    else {
        return Ok(None);
    };
    let api: Api<MachineConfigPool> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"annotations": {
        rollouts::annotations::ROLLBACK_TO: previous,
        rollouts::annotations::RESUMED_AT: jiff::Timestamp::now().to_string(),
    }}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    ctx.metrics.rollout_event(&name, "rollback");
    Ok(Some(PlanEvent {
        kind: plan::EventKind::Warning,
        subject: plan::EventSubject::Pool(name.clone()),
        reason: "RolledBack",
        message: format!(
            "Pool {name}: the canary failed a gate; rolling back to {previous} (autoRollback)"
        ),
    }))
}
