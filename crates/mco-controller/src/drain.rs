//! The drain controller: acts when a node's `desiredDrain` differs from its `lastAppliedDrain`.
//! `drain-<mc>` cordons the node and evicts its pods (PodDisruptionBudgets are honoured by the
//! eviction API); `uncordon-<mc>` makes it schedulable again. Progress is written to the node's
//! MachineConfigNode, including which pods and which budget block a drain.
//!
//! Once its pods are evicted, a drain looks for them again after 20 ms, then at doubling
//! intervals up to a second (or `evict_retry`, when shorter): a pod without a grace period is
//! gone by the first look, and one that terminates takes its grace period.
//!
//! ## How the MCN conditions are written
//! The daemon owns most of an MCN's `status`; this controller owns only the drain-related
//! conditions (`UpdateExecuted`, `Cordoned`, `Drained`, `UpdateComplete`, `Uncordoned`). A write
//! is a JSON patch under its own field manager ([`FIELD_MANAGER`]) that replaces just the
//! conditions it changes, each at its index in the copy it started from, after testing that the
//! index still holds that condition with the status the copy shows ([`condition_patch`]). The
//! daemon never reorders the list, so its writes in between do not get in the way; a changed
//! condition fails the test, and the next attempt reads the MCN. Where a condition is still
//! missing from the list, the write sends the whole status instead, conditional on the copy's
//! resourceVersion as the daemon's writes are. A merge patch would replace the whole list
//! unconditionally; a server-side apply of the five conditions cost the server several times
//! an update.
//!
//! ## Few writes per drain
//! Cordoning writes its condition with the drain's first ones, and uncordoning rides in the
//! Node write that answers the daemon. A drain of a node with nothing to evict is then one MCN
//! write and two Node writes (cordon, answer), and an uncordon one of each.
//!
//! A finished drain's conditions go to the MCN at the same moment as the answer goes to the
//! Node, so the daemon does not wait for a status write before it goes on. The conditions may
//! then land after the daemon's next phase: a parent condition the daemon has already completed
//! (`UpdateExecuted=True`) is left as it is, and only the children are written ([`still_due`]).
//! Nothing later can be overtaken: the daemon's update ends only after its uncordon is answered,
//! and this controller never runs two reconciles of one node at once. An uncordon's conditions
//! go beside its answer too. The daemon's next write (`Updated=True`) resets them, so they must
//! not land after it: they are written only while the MCN's `Updated` is not True, and the
//! patch tests that it still is not ([`uncordon_due`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams, VersionMatch};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use mco_api::constants::{annotations, drain as drain_values, mcn_conditions};
use mco_rollout::drain::{
    Cond, GoneWait, condition_patch, describe_blocker, draining_message, go_duration,
    pods_to_evict, still_due, uncordon_due, with_conditions,
};
use mco_rollout::plan::EventKind;
use serde_json::json;

use crate::Error;
use crate::ctx::{Ctx, DrainProgress, node_ref};
use crate::metrics::NodeLabels;

/// The field manager of the drain conditions on MCN status.
pub const FIELD_MANAGER: &str = "machine-config-controller";

fn annotation<'a>(node: &'a Node, key: &str) -> &'a str {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .unwrap_or_default()
}

fn unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Which answer a condition write goes out beside: the write may then land after the daemon's
/// next one, and leaves alone what that one completed ([`still_due`], [`uncordon_due`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Beside {
    Nothing,
    DrainAnswer,
    UncordonAnswer,
}

/// Apply drain conditions to the node's MCN (see the module docs for how the write is made).
///
/// The write starts from the MCN already held ([`Ctx::known_mcn`]) rather than a fresh read: a
/// [`condition_patch`] tests what it replaces, and a whole-status write carries the copy's
/// resourceVersion, so a copy the daemon has moved past is refused and the next attempt reads
/// the MCN. A held copy that shows nothing to change is confirmed by a read too.
async fn set_conditions(ctx: &Ctx, node: &str, conds: &[Cond<'_>]) -> Result<(), Error> {
    write_conditions(ctx, node, conds, Beside::Nothing).await
}

async fn write_conditions(
    ctx: &Ctx,
    node: &str,
    conds: &[Cond<'_>],
    beside: Beside,
) -> Result<(), Error> {
    let api = &ctx.mcn_api;
    let mut held = ctx.known_mcn(node);
    // Held while the write lands: an uncordon's conditions never go in after the `Updated`
    // reset that closes the update.
    let unchanged: &[&str] = match beside {
        Beside::UncordonAnswer => &[mcn_conditions::UPDATED],
        _ => &[],
    };
    for _ in 0..5 {
        let (live, from_memory) = match held.take() {
            Some(m) => (m, true),
            None => match api.get_opt(node).await? {
                Some(m) => (Arc::new(m), false),
                // No MCN yet: the MCN controller creates it; the drain goes on regardless.
                None => return Ok(()),
            },
        };
        let existing = live
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let due;
        let conds = match beside {
            Beside::Nothing => conds,
            Beside::DrainAnswer => {
                due = still_due(&existing, conds);
                &due[..]
            }
            Beside::UncordonAnswer => {
                due = uncordon_due(&existing, conds);
                &due[..]
            }
        };
        let unchanged_conds = conds.iter().all(|(t, st, r, m)| {
            existing
                .iter()
                .any(|c| c.type_ == *t && c.status == *st && c.reason == *r && c.message == *m)
        });
        if unchanged_conds {
            if from_memory {
                continue;
            }
            return Ok(());
        }
        let new = with_conditions(&existing, conds, &Time(jiff::Timestamp::now()));
        if let Some(ops) = condition_patch(&existing, &new, unchanged) {
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            let ops = serde_json::from_value(serde_json::to_value(ops)?)?;
            match api.json_patch_status(node, &pp, ops).await {
                Ok(written) => {
                    ctx.wrote_mcn(written);
                    return Ok(());
                }
                // A tested condition is not as the copy had it: read it.
                Err(kube::Error::Api(s)) if s.code == 422 => continue,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        let mut body = (*live).clone();
        body.metadata.managed_fields = None;
        body.status.get_or_insert_with(Default::default).conditions = new;
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match api.replace_status(node, &pp, &body).await {
            Ok(written) => {
                ctx.wrote_mcn(written);
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Stale(format!(
        "MachineConfigNode {node} kept changing; drain conditions not written"
    )))
}

/// Returns the resourceVersion the write left the node at.
async fn set_unschedulable(ctx: &Ctx, node: &str, value: bool) -> Result<Option<String>, Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"spec": {"unschedulable": value}});
    let n = api
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let rv = n.metadata.resource_version.clone();
    ctx.wrote_node(n);
    Ok(rv)
}

/// Sets `lastAppliedDrain` to `value`, the answer the daemon waits for, and `unschedulable`
/// with it when given.
async fn answer(
    ctx: &Ctx,
    node: &str,
    value: &str,
    unschedulable: Option<bool>,
) -> Result<(), Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let mut patch = json!({"metadata": {"annotations": {annotations::LAST_APPLIED_DRAIN: value}}});
    if let Some(u) = unschedulable {
        patch["spec"] = json!({"unschedulable": u});
    }
    let n = api
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    ctx.wrote_node(n);
    Ok(())
}

/// Answers an uncordon request: `lastAppliedDrain` and `unschedulable: false`, and, when the
/// request is for the node's desired config, the `UpdateInProgress` taint dropped in the same
/// write (see [`mco_rollout::plan::needs_update_taint`]). Taints are one list, so that write is
/// conditional on the version it starts from; a conflict is retried on a fresh read, and after
/// a few the answer goes without it, leaving the taint to the rollout controller.
async fn answer_uncordon(ctx: &Ctx, known: &Node, value: &str) -> Result<(), Error> {
    let name = known.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let mut node = known.clone();
    for _ in 0..3 {
        let on_target = value == drain_values::uncordon(mco_rollout::plan::desired_config(&node));
        if !on_target || !mco_rollout::plan::has_update_taint(&node) {
            break;
        }
        let kept = mco_rollout::plan::with_update_taint(&node, false);
        let patch = json!({
            "metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": {annotations::LAST_APPLIED_DRAIN: value},
            },
            "spec": {"unschedulable": false, "taints": kept},
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(n) => {
                ctx.wrote_node(n);
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(name).await? {
                Some(n) => node = n,
                None => break,
            },
            Err(e) => return Err(e.into()),
        }
    }
    answer(ctx, name, value, Some(false)).await
}

fn progress(ctx: &Ctx, node: &str, desired: &str) -> DrainProgress {
    let mut drains = ctx.drains.lock().unwrap_or_else(|e| e.into_inner());
    let entry = drains
        .entry(node.to_string())
        .or_insert_with(|| DrainProgress {
            desired: desired.to_string(),
            started: Instant::now(),
            threshold_reported: false,
            failed_reported: false,
            blockers: String::new(),
        });
    if entry.desired != desired {
        *entry = DrainProgress {
            desired: desired.to_string(),
            started: Instant::now(),
            threshold_reported: false,
            failed_reported: false,
            blockers: String::new(),
        };
    }
    entry.clone()
}

fn update_progress(ctx: &Ctx, node: &str, f: impl FnOnce(&mut DrainProgress)) {
    if let Some(p) = ctx
        .drains
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(node)
    {
        f(p);
    }
}

fn forget(ctx: &Ctx, node: &str) {
    ctx.drains
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(node);
    ctx.metrics
        .drain_err
        .remove(&NodeLabels { node: node.into() });
}

/// React to one node's drain request.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let node = ctx.known_node(node);
    let name = node.metadata.name.clone().unwrap_or_default();
    let desired = annotation(&node, annotations::DESIRED_DRAIN).to_string();
    let last = annotation(&node, annotations::LAST_APPLIED_DRAIN).to_string();
    if desired.is_empty() || desired == last {
        forget(&ctx, &name);
        return Ok(Action::await_change());
    }
    if desired.starts_with(drain_values::UNCORDON_PREFIX) {
        uncordon(&ctx, &node, &desired).await
    } else if desired.starts_with(drain_values::DRAIN_PREFIX) {
        drain(&ctx, &node, &desired, &last).await
    } else {
        tracing::warn!(node = %name, %desired, "unknown drain request");
        Ok(Action::await_change())
    }
}

/// Uncordons and answers in one Node write, with the MCN's conditions saying so beside it
/// rather than before it: one round trip less between the daemon's request and its `Done`.
/// The daemon's next status write (`Updated=True`) resets them; it tests them as written, so it
/// is refused until they have landed, and they are never written after it ([`uncordon_due`]).
async fn uncordon(ctx: &Ctx, known: &Node, desired: &str) -> Result<Action, Error> {
    let node = known.metadata.name.as_deref().unwrap_or_default();
    let uncordoned: Vec<Cond<'_>> = mco_api::constants::mcn_reasons::UNCORDONED
        .iter()
        .map(|(t, reason, message)| (*t, "True", *reason, message.to_string()))
        .collect();
    let (written, answered) = futures::future::join(
        write_conditions(ctx, node, &uncordoned, Beside::UncordonAnswer),
        answer_uncordon(ctx, known, desired),
    )
    .await;
    if let Err(e) = written {
        // The answer stands: the conditions are the record, not the signal.
        tracing::warn!(node, error = %e, "uncordon conditions not written");
    }
    if let Err(e) = answered {
        set_conditions(
            ctx,
            node,
            &[
                (
                    mcn_conditions::UPDATE_COMPLETE,
                    "Unknown",
                    "Uncordoned",
                    format!("Failed to Uncordon Node: {e}"),
                ),
                (
                    mcn_conditions::UNCORDONED,
                    "Unknown",
                    "UpdateCompleteUncordoned",
                    format!("Error: Failed to UnCordon node. Error is: {e}"),
                ),
            ],
        )
        .await?;
        return Err(e);
    }
    forget(ctx, node);
    Ok(Action::await_change())
}

async fn drain(ctx: &Ctx, node: &Node, desired: &str, last: &str) -> Result<Action, Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let t = ctx.config.drain.clone();
    let state = progress(ctx, &name, desired);
    let mut conds = vec![];
    // The node as cordoned: as it is seen when it already was, else as the cordon left it.
    let mut cordoned_at = node.metadata.resource_version.clone();
    if !unschedulable(node) {
        match set_unschedulable(ctx, &name, true).await {
            Ok(rv) => cordoned_at = rv,
            Err(e) => {
                set_conditions(
                    ctx,
                    &name,
                    &[
                        (
                            mcn_conditions::UPDATE_EXECUTED,
                            "Unknown",
                            "Cordoned",
                            format!("Error: Failed to Cordon node. Error is: {e}"),
                        ),
                        (
                            mcn_conditions::CORDONED,
                            "Unknown",
                            "UpdateExecutedCordoned",
                            format!("Error: Failed to Cordon node. Error is: {e}"),
                        ),
                    ],
                )
                .await?;
                return Err(e);
            }
        }
        // The drain starts at once: its conditions go in the same write, and UpdateExecuted
        // moves on from "Cordoned" to "Drained" there.
        conds.push((
            mcn_conditions::CORDONED,
            "True",
            "UpdateExecutedCordoned",
            "Cordoned node. The node is reporting Unschedulable = true".into(),
        ));
    }
    conds.push((
        mcn_conditions::UPDATE_EXECUTED,
        "Unknown",
        "Drained",
        "Draining Node as part of update executed phase".into(),
    ));
    // Listed after the cordon, so no pod can be placed on the node after it. A node with
    // nothing to evict is drained the moment it is cordoned: its conditions then go out in
    // the one write that says so, rather than an "in progress" write a moment before.
    let idle = pods_to_evict(&pods_on(ctx, &name, cordoned_at.as_deref()).await?).is_empty();
    let error = if idle {
        None
    } else {
        conds.push((
            mcn_conditions::DRAINED,
            "Unknown",
            "UpdateExecutedDrained",
            draining_message(desired, last, &state.blockers),
        ));
        set_conditions(ctx, &name, &std::mem::take(&mut conds)).await?;
        let attempt =
            tokio::time::timeout(t.attempt_timeout, evict_all(ctx, &name, desired, last)).await;
        match attempt {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "drain did not complete within {}",
                go_duration(t.attempt_timeout)
            )),
        }
    };
    let Some(error) = error else {
        // Upstream restarts if someone uncordoned the node during the drain. The watch (or our
        // own cordon, while the watch lags) tells; an uncordon it has not delivered yet could
        // as well have come a moment after a read.
        let fresh = match ctx.nodes.get(&ObjectRef::new(&name)) {
            Some(cached) => ctx.known_node(cached),
            None => Arc::new(Api::<Node>::all(ctx.client.clone()).get(&name).await?),
        };
        if !unschedulable(&fresh) {
            tracing::info!(node = %name, "node was uncordoned during the drain; starting over");
            return Ok(Action::requeue(Duration::from_millis(100)));
        }
        conds.push((
            mcn_conditions::DRAINED,
            "True",
            "UpdateExecutedDrained",
            format!(
                "Drained node. The drain is complete as the desired drainer matches current drainer: {desired}"
            ),
        ));
        let (written, answered) = futures::future::join(
            write_conditions(ctx, &name, &conds, Beside::DrainAnswer),
            answer(ctx, &name, desired, None),
        )
        .await;
        answered?;
        written?;
        forget(ctx, &name);
        tracing::info!(node = %name, "drain complete");
        return Ok(Action::await_change());
    };

    let state = progress(ctx, &name, desired);
    let elapsed = state.started.elapsed();
    tracing::warn!(node = %name, %error, "drain attempt failed");
    let detail = if state.blockers.is_empty() {
        format!("Error: Node Drain has not succeeded. Error is: {error}")
    } else {
        draining_message(desired, last, &state.blockers)
    };
    set_conditions(
        ctx,
        &name,
        &[(
            mcn_conditions::DRAINED,
            "Unknown",
            "UpdateExecutedDrained",
            detail,
        )],
    )
    .await?;
    if elapsed >= t.failed_after && !state.failed_reported {
        ctx.publish(
            &node_ref(ctx, &name),
            EventKind::Warning,
            "DrainFailed",
            &format!(
                "node {name}: drain exceeded timeout: {}. Will continue to retry.",
                go_duration(t.failed_after)
            ),
        )
        .await;
        ctx.metrics
            .drain_err
            .get_or_create(&NodeLabels { node: name.clone() })
            .set(1);
        update_progress(ctx, &name, |p| p.failed_reported = true);
    } else if elapsed >= t.slow_after && !state.threshold_reported {
        ctx.publish(
            &node_ref(ctx, &name),
            EventKind::Warning,
            "DrainThresholdExceeded",
            &format!(
                "Drain failed. Drain has been failing for more than {} minutes. Waiting {} minutes then retrying. Error message from drain: {error}",
                t.slow_after.as_secs() / 60,
                t.requeue_slow.as_secs() / 60
            ),
        )
        .await;
        update_progress(ctx, &name, |p| p.threshold_reported = true);
    }
    Ok(Action::requeue(if elapsed >= t.slow_after {
        t.requeue_slow
    } else {
        t.requeue
    }))
}

/// The pods bound to `node` (by field selector where the server supports it): as of a
/// resourceVersion not older than `cordoned_at` when given, else as of now.
///
/// Every pod bound before the cordon is in a list not older than it, and kube-apiserver serves
/// such a list from its watch cache once the cache holds the cordon. A list as of now makes it
/// first ask etcd for its newest revision and wait for the cache to reach it: in a 100-worker
/// rollout that was the slowest request of a node's update (36 ms at p50, 106 ms at p90, from
/// the server's audit log), and it stands between the cordon and the drain's answer.
async fn pods_on(ctx: &Ctx, node: &str, cordoned_at: Option<&str>) -> Result<Vec<Pod>, Error> {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let items = match api.list(&pods_on_params(node, cordoned_at)).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 400 => api.list(&ListParams::default()).await?.items,
        Err(e) => return Err(e.into()),
    };
    Ok(items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect())
}

fn pods_on_params(node: &str, cordoned_at: Option<&str>) -> ListParams {
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    match cordoned_at.filter(|rv| !rv.is_empty()) {
        Some(rv) => lp.at(rv).matching(VersionMatch::NotOlderThan),
        None => lp,
    }
}

/// The least time one eviction call (with the client's own retries of 429s) may take.
const EVICT_CALL_BOUND: Duration = Duration::from_secs(10);

/// Evict until no evictable pod is left. A 429 (a PodDisruptionBudget says no) is retried every
/// `evict_retry`, and the MCN says which pods and budgets are in the way.
async fn evict_all(ctx: &Ctx, node: &str, desired: &str, last: &str) -> Result<(), Error> {
    let poll = ctx.config.drain.evict_retry.min(Duration::from_secs(1));
    let mut gone_wait = GoneWait::new(poll);
    loop {
        // As of now: a pod evicted a moment ago must not look present in an older list.
        let pods = pods_on(ctx, node, None).await?;
        let targets = pods_to_evict(&pods);
        if targets.is_empty() {
            return Ok(());
        }
        let mut blocked = vec![];
        for pod in targets
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let pname = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            // kube-rs clients retry 429s by themselves unless built with `default_retry = false`;
            // bounding the call keeps a refusal visible either way. The bound is generous: a
            // busy kube-apiserver may take over a second to admit an eviction, and cutting it
            // then can leave the pod in the budget's `disruptedPods` (counted as gone, for two
            // minutes) although it was never deleted, holding every drain on that budget.
            let call = tokio::time::timeout(
                ctx.config.drain.evict_retry.max(EVICT_CALL_BOUND),
                api.evict(&pname, &EvictParams::default()),
            )
            .await;
            let refusal = match call {
                Ok(Ok(_)) => {
                    tracing::info!(node, pod = %format!("{ns}/{pname}"), "evicted");
                    continue;
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => continue,
                Ok(Err(kube::Error::Api(s))) if s.code == 429 => s.message.clone(),
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => "the eviction was not admitted".to_string(),
            };
            let pdbs = Api::<PodDisruptionBudget>::namespaced(ctx.client.clone(), &ns)
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            blocked.push(describe_blocker(pod, &pdbs, &refusal));
        }
        if blocked.is_empty() {
            tokio::time::sleep(gone_wait.next()).await;
            continue;
        }
        gone_wait = GoneWait::new(poll);
        let blockers = blocked.join("; ");
        let changed = {
            let mut drains = ctx.drains.lock().unwrap_or_else(|e| e.into_inner());
            match drains.get_mut(node) {
                Some(p) if p.blockers != blockers => {
                    p.blockers = blockers.clone();
                    true
                }
                _ => false,
            }
        };
        if changed {
            tracing::info!(node, %blockers, "drain blocked");
            set_conditions(
                ctx,
                node,
                &[(
                    mcn_conditions::DRAINED,
                    "Unknown",
                    "UpdateExecutedDrained",
                    draining_message(desired, last, &blockers),
                )],
            )
            .await?;
        }
        tokio::time::sleep(ctx.config.drain.evict_retry).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_list_after_a_cordon_is_not_older_than_it() {
        let after = pods_on_params("w1", Some("812"));
        assert_eq!(after.field_selector.as_deref(), Some("spec.nodeName=w1"));
        assert_eq!(after.resource_version.as_deref(), Some("812"));
        assert_eq!(after.version_match, Some(VersionMatch::NotOlderThan));
        // Without a version (or an empty one), as of now: a consistent list.
        for none in [None, Some("")] {
            let now = pods_on_params("w1", none);
            assert_eq!(now.field_selector.as_deref(), Some("spec.nodeName=w1"));
            assert_eq!(now.resource_version, None);
            assert_eq!(now.version_match, None);
        }
    }
}
