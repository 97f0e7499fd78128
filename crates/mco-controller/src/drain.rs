//! The drain controller: acts when a node's `desiredDrain` differs from its `lastAppliedDrain`.
//! `drain-<mc>` cordons the node and evicts its pods (PodDisruptionBudgets are honoured by the
//! eviction API); `uncordon-<mc>` makes it schedulable again. Progress is written to the node's
//! MachineConfigNode, including which pods and which budget block a drain.
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
//! still go before its answer, since the daemon's very next write (`Updated=True`) resets them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Api;
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use mco_api::constants::{annotations, drain as drain_values, mcn_conditions};
use mco_apimachinery::selector::LabelSelector;
use serde_json::json;

use crate::Error;
use crate::controllers::{Ctx, node_ref};
use crate::metrics::NodeLabels;
use crate::plan::EventKind;

/// The field manager of the drain conditions on MCN status.
pub const FIELD_MANAGER: &str = "machine-config-controller";

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// In-memory state of one node's drain, as upstream keeps it.
#[derive(Debug, Clone)]
pub struct DrainProgress {
    pub desired: String,
    pub started: Instant,
    pub threshold_reported: bool,
    pub failed_reported: bool,
    /// What blocked the last attempt, for the condition message.
    pub blockers: String,
}

/// Pods a drain must evict: everything on the node except DaemonSet-owned and mirror pods.
pub fn pods_to_evict(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| {
            let ds = p
                .metadata
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
            let mirror = p
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
            !ds && !mirror
        })
        .collect()
}

/// The PodDisruptionBudgets (by name) whose selector matches the pod.
pub fn budgets_for<'a>(pod: &Pod, pdbs: &'a [PodDisruptionBudget]) -> Vec<&'a str> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    pdbs.iter()
        .filter(|pdb| {
            let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                return false;
            };
            let Ok(v) = serde_json::to_value(sel) else {
                return false;
            };
            matches!(LabelSelector::from_k8s(&v), Ok(Some(s)) if !s.is_empty() && s.matches(&labels))
        })
        .filter_map(|pdb| pdb.metadata.name.as_deref())
        .collect()
}

/// Which pod blocks a drain and why, naming the budgets that cover it and their state.
pub fn describe_blocker(pod: &Pod, pdbs: &[PodDisruptionBudget], refusal: &str) -> String {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let budgets: Vec<String> = budgets_for(pod, pdbs)
        .into_iter()
        .map(|b| {
            let st = pdbs
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(b))
                .and_then(|p| p.status.as_ref());
            match st {
                Some(st) => format!(
                    "PodDisruptionBudget {ns}/{b} (allows {} disruptions; {} healthy, {} needed)",
                    st.disruptions_allowed, st.current_healthy, st.desired_healthy
                ),
                None => format!("PodDisruptionBudget {ns}/{b}"),
            }
        })
        .collect();
    if budgets.is_empty() {
        format!("pod {ns}/{name}: {refusal}")
    } else {
        format!("pod {ns}/{name} by {}: {refusal}", budgets.join(", "))
    }
}

/// Go's `time.Duration` text (`1h0m0s`, `10m0s`, `90s`), as upstream's messages print it.
pub fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Upstream's in-progress message, plus (beyond upstream) what blocks the drain.
pub fn draining_message(desired: &str, last: &str, blockers: &str) -> String {
    let base = format!(
        "Draining node. The drain will not be complete until desired drainer {desired} matches current drainer {last}"
    );
    if blockers.is_empty() {
        base
    } else {
        format!("{base}. Blocked by: {blockers}")
    }
}

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

/// One condition to apply: (type, status, reason, message).
pub type Cond<'a> = (&'a str, &'a str, &'a str, String);

/// The conditions the drain controller owns on an MCN.
const OWNED: [&str; 5] = [
    mcn_conditions::UPDATE_EXECUTED,
    mcn_conditions::CORDONED,
    mcn_conditions::DRAINED,
    mcn_conditions::UPDATE_COMPLETE,
    mcn_conditions::UNCORDONED,
];

/// The full set of drain conditions to apply: the new ones, plus every other owned condition
/// as it stands now. An apply is the manager's whole intent, so a condition left out of it would
/// be removed by the server.
pub fn merged_conditions(existing: &[Condition], new: &[Cond<'_>], now: &Time) -> Vec<Condition> {
    OWNED
        .iter()
        .filter_map(|t| {
            let old = existing.iter().find(|c| c.type_ == *t);
            match new.iter().find(|(nt, ..)| nt == t) {
                Some((type_, status, reason, message)) => Some(Condition {
                    type_: type_.to_string(),
                    status: status.to_string(),
                    reason: reason.to_string(),
                    message: message.clone(),
                    last_transition_time: match old {
                        Some(o) if o.status == *status => o.last_transition_time.clone(),
                        _ => now.clone(),
                    },
                    observed_generation: None,
                }),
                None => old.cloned(),
            }
        })
        .collect()
}

/// `existing` with the drain conditions of `new` set in place (appended when absent), the
/// others kept as they are: the whole list a status write sends.
pub fn with_conditions(existing: &[Condition], new: &[Cond<'_>], now: &Time) -> Vec<Condition> {
    let owned = merged_conditions(existing, new, now);
    let mut out: Vec<Condition> = existing
        .iter()
        .map(|c| {
            owned
                .iter()
                .find(|o| o.type_ == c.type_)
                .unwrap_or(c)
                .clone()
        })
        .collect();
    out.extend(
        owned
            .into_iter()
            .filter(|o| !existing.iter().any(|c| c.type_ == o.type_)),
    );
    out
}

/// The conditions of a write that may land after the daemon's next phase (see the module docs):
/// all of `conds` but a parent the MCN already shows completed where `conds` would reopen it.
pub fn still_due<'a>(existing: &[Condition], conds: &[Cond<'a>]) -> Vec<Cond<'a>> {
    // The one parent a drain shares with the daemon's next phase (Applied).
    const PARENT: &str = mcn_conditions::UPDATE_EXECUTED;
    let completed = existing
        .iter()
        .any(|c| c.type_ == PARENT && c.status == "True");
    conds
        .iter()
        .filter(|(t, st, ..)| !(completed && *t == PARENT && *st != "True"))
        .cloned()
        .collect()
}

/// A JSON patch taking the MCN's conditions from `old` to `new`, when `new` only changes
/// conditions in place: each changed one is replaced at its index, after testing that the index
/// still holds that type with the status `old` gives it. The daemon's writes in between then
/// cost nothing, where a whole-status write conditional on the copy's resourceVersion met a
/// conflict and a read; a test that fails (a condition changed under us) is refused with 422
/// and leaves everything as it was. `None` when a condition is added: a JSON patch cannot test
/// that it is still absent.
pub fn condition_patch(old: &[Condition], new: &[Condition]) -> Option<json_patch::Patch> {
    if old.len() != new.len() {
        return None;
    }
    let mut ops = vec![];
    for (i, (o, n)) in old.iter().zip(new).enumerate() {
        if o == n {
            continue;
        }
        if o.type_ != n.type_ {
            return None;
        }
        let at = format!("/status/conditions/{i}");
        ops.push(json!({"op": "test", "path": format!("{at}/type"), "value": o.type_}));
        ops.push(json!({"op": "test", "path": format!("{at}/status"), "value": o.status}));
        ops.push(json!({"op": "replace", "path": at, "value": n}));
    }
    serde_json::from_value(serde_json::Value::Array(ops)).ok()
}

/// Apply drain conditions to the node's MCN (see the module docs for how the write is made).
///
/// The write starts from the MCN already held ([`Ctx::known_mcn`]) rather than a fresh read: a
/// [`condition_patch`] tests what it replaces, and a whole-status write carries the copy's
/// resourceVersion, so a copy the daemon has moved past is refused and the next attempt reads
/// the MCN. A held copy that shows nothing to change is confirmed by a read too.
async fn set_conditions(ctx: &Ctx, node: &str, conds: &[Cond<'_>]) -> Result<(), Error> {
    write_conditions(ctx, node, conds, false).await
}

/// [`set_conditions`] for a write sent beside the answer: see [`still_due`].
async fn set_conditions_beside_answer(
    ctx: &Ctx,
    node: &str,
    conds: &[Cond<'_>],
) -> Result<(), Error> {
    write_conditions(ctx, node, conds, true).await
}

async fn write_conditions(
    ctx: &Ctx,
    node: &str,
    conds: &[Cond<'_>],
    beside_answer: bool,
) -> Result<(), Error> {
    let api: Api<mco_api::MachineConfigNode> = Api::all(ctx.client.clone());
    let mut held = ctx.known_mcn(node);
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
        let conds = if beside_answer {
            due = still_due(&existing, conds);
            &due[..]
        } else {
            conds
        };
        let unchanged = conds.iter().all(|(t, st, r, m)| {
            existing
                .iter()
                .any(|c| c.type_ == *t && c.status == *st && c.reason == *r && c.message == *m)
        });
        if unchanged {
            if from_memory {
                continue;
            }
            return Ok(());
        }
        let new = with_conditions(&existing, conds, &Time(jiff::Timestamp::now()));
        if let Some(ops) = condition_patch(&existing, &new) {
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match api.patch_status(node, &pp, &Patch::Json::<()>(ops)).await {
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

async fn set_unschedulable(ctx: &Ctx, node: &str, value: bool) -> Result<(), Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"spec": {"unschedulable": value}});
    let n = api
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    ctx.wrote_node(n);
    Ok(())
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
/// write (see [`crate::plan::needs_update_taint`]). Taints are one list, so that write is
/// conditional on the version it starts from; a conflict is retried on a fresh read, and after
/// a few the answer goes without it, leaving the taint to the rollout controller.
async fn answer_uncordon(ctx: &Ctx, known: &Node, value: &str) -> Result<(), Error> {
    let name = known.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let mut node = known.clone();
    for _ in 0..3 {
        let on_target = value == drain_values::uncordon(crate::plan::desired_config(&node));
        if !on_target || !crate::plan::has_update_taint(&node) {
            break;
        }
        let kept = crate::plan::with_update_taint(&node, false);
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

/// Whether a node asks for a drain or an uncordon not yet answered: the only node events the
/// drain controller acts on. The others (about ten per node in a rollout) are not worth a
/// reconcile each; a drain in progress requeues itself, and the resync covers the rest.
pub fn requested(node: &Node) -> bool {
    let desired = annotation(node, annotations::DESIRED_DRAIN);
    !desired.is_empty() && desired != annotation(node, annotations::LAST_APPLIED_DRAIN)
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

/// Uncordons and answers in one Node write, after the MCN says so: the daemon acts on the
/// answer at once, and a condition written after it would race the daemon's next status write.
async fn uncordon(ctx: &Ctx, known: &Node, desired: &str) -> Result<Action, Error> {
    let node = known.metadata.name.as_deref().unwrap_or_default();
    let uncordoned: Vec<Cond<'_>> = mco_api::constants::mcn_reasons::UNCORDONED
        .iter()
        .map(|(t, reason, message)| (*t, "True", *reason, message.to_string()))
        .collect();
    set_conditions(ctx, node, &uncordoned).await?;
    if let Err(e) = answer_uncordon(ctx, known, desired).await {
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
    if !unschedulable(node) {
        if let Err(e) = set_unschedulable(ctx, &name, true).await {
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
    let idle = pods_to_evict(&pods_on(ctx, &name).await?).is_empty();
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
            set_conditions_beside_answer(ctx, &name, &conds),
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

/// Pods on the node, by field selector where the server supports it.
async fn pods_on(ctx: &Ctx, node: &str) -> Result<Vec<Pod>, Error> {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let items = match api.list(&lp).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 400 => api.list(&ListParams::default()).await?.items,
        Err(e) => return Err(e.into()),
    };
    Ok(items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect())
}

/// Evict until no evictable pod is left. A 429 (a PodDisruptionBudget says no) is retried every
/// `evict_retry`, and the MCN says which pods and budgets are in the way.
async fn evict_all(ctx: &Ctx, node: &str, desired: &str, last: &str) -> Result<(), Error> {
    let poll = ctx.config.drain.evict_retry.min(Duration::from_secs(1));
    let mut gone_wait = GoneWait::new(poll);
    loop {
        let pods = pods_on(ctx, node).await?;
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
            // bounding the call keeps a refusal visible either way.
            let call = tokio::time::timeout(
                ctx.config.drain.evict_retry.max(Duration::from_secs(1)),
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

/// How long to wait before looking again for pods that were evicted or are terminating.
/// A pod without a grace period is gone by the next look, and one that terminates takes its
/// grace period: the first looks come soon, so a drain does not sit out a whole `poll` (a
/// second) for a pod that left at once, and later ones come every `poll`.
struct GoneWait {
    next: Duration,
    cap: Duration,
}

impl GoneWait {
    const FIRST: Duration = Duration::from_millis(20);

    fn new(cap: Duration) -> Self {
        Self {
            next: Self::FIRST.min(cap),
            cap,
        }
    }

    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.cap);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as K8sSel, OwnerReference};

    fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn evicted_pods_are_looked_for_soon_then_every_poll() {
        let mut w = GoneWait::new(Duration::from_secs(1));
        let waits: Vec<u64> = (0..8).map(|_| w.next().as_millis() as u64).collect();
        assert_eq!(waits, [20, 40, 80, 160, 320, 640, 1000, 1000]);
        // A poll shorter than the first look is never exceeded.
        let mut w = GoneWait::new(Duration::from_millis(5));
        assert_eq!(w.next(), Duration::from_millis(5));
        assert_eq!(w.next(), Duration::from_millis(5));
    }

    #[test]
    fn only_an_unanswered_request_wakes_the_drain_controller() {
        let node = |pairs: &[(&str, &str)]| {
            let mut n = Node::default();
            n.metadata.annotations = Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            n
        };
        let (d, l) = (annotations::DESIRED_DRAIN, annotations::LAST_APPLIED_DRAIN);
        assert!(!requested(&node(&[])), "never asked");
        assert!(requested(&node(&[(d, "drain-rendered-a")])));
        assert!(requested(&node(&[
            (d, "uncordon-rendered-a"),
            (l, "drain-rendered-a")
        ])));
        assert!(!requested(&node(&[
            (d, "drain-rendered-a"),
            (l, "drain-rendered-a")
        ])));
    }

    #[test]
    fn skips_daemonset_and_mirror_pods() {
        let mut ds = pod("ds", &[]);
        ds.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DaemonSet".into(),
            name: "d".into(),
            api_version: "apps/v1".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let mut mirror = pod("static", &[]);
        mirror.metadata.annotations =
            Some([(MIRROR_ANNOTATION.to_string(), "x".to_string())].into());
        let mut rs = pod("web-1", &[]);
        rs.metadata.owner_references = Some(vec![OwnerReference {
            kind: "ReplicaSet".into(),
            name: "web".into(),
            api_version: "apps/v1".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let bare = pod("bare", &[]);
        let pods = [ds, mirror, rs, bare];
        let names: Vec<_> = pods_to_evict(&pods)
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, vec!["web-1", "bare"]);
    }

    #[test]
    fn finds_the_budget_covering_a_pod() {
        let pdb = |name: &str, app: &str| PodDisruptionBudget {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(K8sSel {
                    match_labels: Some([("app".to_string(), app.to_string())].into()),
                    match_expressions: None,
                }),
                ..Default::default()
            }),
            status: None,
        };
        let pdbs = [pdb("web-pdb", "web"), pdb("db-pdb", "db")];
        assert_eq!(
            budgets_for(&pod("w", &[("app", "web")]), &pdbs),
            vec!["web-pdb"]
        );
        assert!(budgets_for(&pod("x", &[("app", "other")]), &pdbs).is_empty());
        let mut with_status = pdbs.clone();
        with_status[0].status = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
            disruptions_allowed: 0,
            current_healthy: 2,
            desired_healthy: 2,
            expected_pods: 2,
            ..Default::default()
        });
        assert_eq!(
            describe_blocker(&pod("w", &[("app", "web")]), &with_status, "refused"),
            "pod default/w by PodDisruptionBudget default/web-pdb (allows 0 disruptions; 2 healthy, 2 needed): refused"
        );
        assert_eq!(
            describe_blocker(&pod("x", &[]), &with_status, "refused"),
            "pod default/x: refused"
        );
    }

    /// A condition of `type_` and `status`, set at `at`.
    fn condition(type_: &str, status: &str, at: &Time) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "r".into(),
            message: "m".into(),
            last_transition_time: at.clone(),
            observed_generation: None,
        }
    }

    #[test]
    fn merged_conditions_keep_other_owned_ones_and_transition_times() {
        let t0 = Time(jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let t1 = Time(jiff::Timestamp::from_second(1_700_000_100).unwrap());
        let cond = |t: &str, s: &str| condition(t, s, &t0);
        let existing = vec![
            cond(mcn_conditions::CORDONED, "True"),
            cond(mcn_conditions::DRAINED, "Unknown"),
            cond(mcn_conditions::UPDATED, "False"),
        ];
        let out = merged_conditions(
            &existing,
            &[(mcn_conditions::DRAINED, "Unknown", "x", "blocked".into())],
            &t1,
        );
        let types: Vec<&str> = out.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            vec![mcn_conditions::CORDONED, mcn_conditions::DRAINED]
        );
        assert_eq!(out[1].message, "blocked");
        assert_eq!(
            out[1].last_transition_time, t0,
            "same status keeps its time"
        );
        let out = merged_conditions(
            &existing,
            &[(mcn_conditions::DRAINED, "True", "x", "done".into())],
            &t1,
        );
        assert_eq!(out[1].last_transition_time, t1);

        // The whole list a status write sends: the daemon's conditions untouched and in place,
        // the drain's set where they are, a new one appended.
        let out = with_conditions(
            &existing,
            &[
                (mcn_conditions::DRAINED, "True", "x", "done".into()),
                (
                    mcn_conditions::UNCORDONED,
                    "True",
                    "y",
                    "schedulable".into(),
                ),
            ],
            &t1,
        );
        let types: Vec<&str> = out.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            vec![
                mcn_conditions::CORDONED,
                mcn_conditions::DRAINED,
                mcn_conditions::UPDATED,
                mcn_conditions::UNCORDONED
            ]
        );
        assert_eq!(out[0], existing[0]);
        assert_eq!(out[2], existing[2]);
        assert_eq!(
            (out[1].status.as_str(), out[1].message.as_str()),
            ("True", "done")
        );
        assert_eq!(out[3].last_transition_time, t1);
    }

    #[test]
    fn a_late_drain_write_never_reopens_a_phase_the_daemon_completed() {
        let cond = |t: &str, s: &str| condition(t, s, &Time(jiff::Timestamp::UNIX_EPOCH));
        let drained: Vec<Cond<'static>> = vec![
            (mcn_conditions::CORDONED, "True", "c", "cordoned".into()),
            (
                mcn_conditions::UPDATE_EXECUTED,
                "Unknown",
                "Drained",
                "draining".into(),
            ),
            (mcn_conditions::DRAINED, "True", "d", "drained".into()),
        ];
        fn types(cs: Vec<Cond<'static>>) -> Vec<&'static str> {
            cs.into_iter().map(|c| c.0).collect()
        }
        // Landing before the daemon's next phase: all of it.
        let before = [cond(mcn_conditions::UPDATE_EXECUTED, "False")];
        assert_eq!(types(still_due(&before, &drained)), types(drained.clone()));
        // After the daemon applied the update: the children only.
        let after = [
            cond(mcn_conditions::UPDATE_EXECUTED, "True"),
            cond(mcn_conditions::APPLIED_FILES_AND_OS, "True"),
        ];
        assert_eq!(
            types(still_due(&after, &drained)),
            vec![mcn_conditions::CORDONED, mcn_conditions::DRAINED]
        );
        // A parent set to True is written whatever the MCN says.
        let done: Vec<Cond<'static>> = vec![(
            mcn_conditions::UPDATE_COMPLETE,
            "True",
            "Uncordoned",
            "uncordoned".into(),
        )];
        let complete = [cond(mcn_conditions::UPDATE_COMPLETE, "True")];
        assert_eq!(types(still_due(&complete, &done)), types(done.clone()));
    }

    #[test]
    fn a_condition_patch_replaces_in_place_and_tests_what_it_replaces() {
        let t0 = Time(jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let t1 = Time(jiff::Timestamp::from_second(1_700_000_100).unwrap());
        let cond = |t: &str, s: &str| condition(t, s, &t0);
        let old = vec![
            cond(mcn_conditions::UPDATED, "False"),
            cond(mcn_conditions::DRAINED, "False"),
            cond(mcn_conditions::APPLIED_FILES_AND_OS, "False"),
        ];
        let drained = [(mcn_conditions::DRAINED, "True", "x", "drained".into())];
        let new = with_conditions(&old, &drained, &t1);
        let patch = condition_patch(&old, &new).expect("an in-place change");
        let doc = |conds: &[Condition]| json!({"status": {"conditions": conds}});

        // On the copy it was made from, and on one the daemon has written to since.
        let mut same = doc(&old);
        json_patch::patch(&mut same, &patch).unwrap();
        assert_eq!(same, doc(&new));
        let mut moved = old.clone();
        moved[2] = cond(mcn_conditions::APPLIED_FILES_AND_OS, "True");
        let mut theirs = doc(&moved);
        json_patch::patch(&mut theirs, &patch).unwrap();
        assert_eq!(theirs["status"]["conditions"][1], json!(new[1]));
        assert_eq!(
            theirs["status"]["conditions"][2],
            json!(moved[2]),
            "the daemon's, kept"
        );

        // Refused where the condition changed, or the list was reordered.
        let mut changed = old.clone();
        changed[1] = cond(mcn_conditions::DRAINED, "Unknown");
        assert!(json_patch::patch(&mut doc(&changed), &patch).is_err());
        let mut reordered = old.clone();
        reordered.swap(0, 1);
        assert!(json_patch::patch(&mut doc(&reordered), &patch).is_err());

        // An added condition cannot be tested for: no patch.
        let added = with_conditions(
            &old,
            &[(mcn_conditions::UNCORDONED, "True", "y", "uncordoned".into())],
            &t1,
        );
        assert!(condition_patch(&old, &added).is_none());
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_secs(600)), "10m0s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(5)), "5s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn draining_message_names_blockers() {
        assert_eq!(
            draining_message("drain-a", "uncordon-b", ""),
            "Draining node. The drain will not be complete until desired drainer drain-a matches current drainer uncordon-b"
        );
        assert!(
            draining_message(
                "drain-a",
                "",
                "pod default/web-1 (PodDisruptionBudget default/web-pdb: no)"
            )
            .ends_with("Blocked by: pod default/web-1 (PodDisruptionBudget default/web-pdb: no)")
        );
    }
}
