//! Rollout policies in the controller: which policy governs a pool, the policy's decision for a
//! pool pass (from `mco_rollout::policy`), and the policy's status.
//!
//! Two writers share a policy's status, each with merge patches of its own field: the policy
//! controller ([`reconcile`]) writes `conditions` (`Valid`, `Conflict`) and drops `pools`
//! entries of pools it no longer governs; the node controller writes one `pools` entry per pool
//! pass ([`record`]). Pool passes of one policy write one after another under [`Ctx::policy_writes`],
//! which holds the entries as last written, so two pools never overwrite each other's entry.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use mco_api::rollouts::{PolicyCondition, PoolRollout, RolloutPolicy, annotations};
use mco_api::{MachineConfigPool, MachineConfigPoolStatus};
use mco_rollout::plan::{self, Member};
use mco_rollout::policy::{self, Governance, NodeGateInput, PolicyRef, Validated};
use serde_json::json;

use crate::Error;
use crate::ctx::Ctx;

/// The status `pools` entries as this controller last wrote them, per policy.
pub type PolicyWrites = tokio::sync::Mutex<HashMap<String, BTreeMap<String, PoolRollout>>>;

fn name_of<K: kube::Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or_default()
}

fn labels_of<K: kube::Resource>(o: &K) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    o.meta().labels.as_ref().unwrap_or(&EMPTY)
}

/// Every pool's governance, from the cached pools and policies.
pub fn governance(ctx: &Ctx) -> BTreeMap<String, Governance> {
    let pools = ctx.pools.state();
    let policies = ctx.policies.state();
    let pool_refs: Vec<(&str, &BTreeMap<String, String>)> = pools
        .iter()
        .map(|p| (name_of(&**p), labels_of(&**p)))
        .collect();
    let refs: Vec<PolicyRef<'_>> = policies
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PolicyRef {
            name: name_of(&**p),
            selector: p.spec.pool_selector.as_ref(),
            valid: policy::validate(&p.spec).is_ok(),
        })
        .collect();
    policy::govern(&pool_refs, &refs)
}

/// The valid policy that governs `pool`, if one alone does.
pub fn governing(ctx: &Ctx, pool: &str) -> Option<(Arc<RolloutPolicy>, Validated)> {
    let Some(Governance::Policy(name)) = governance(ctx).remove(pool) else {
        return None;
    };
    let p = ctx
        .policies
        .get(&kube::runtime::reflector::ObjectRef::new(&name))?;
    let v = policy::validate(&p.spec).ok()?;
    Some((p, v))
}

fn annotation<'a>(pool: &'a MachineConfigPool, key: &str) -> Option<&'a str> {
    pool.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// The rendered config a rollback pins the pool to, when it differs from `spec.configuration`.
pub fn rollback_pin(pool: &MachineConfigPool) -> Option<&str> {
    let pin = annotation(pool, annotations::ROLLBACK_TO)?;
    let target = pool.spec.configuration.as_ref().map(|c| c.name.as_str());
    (Some(pin) != target).then_some(pin)
}

/// What one node tells the gates.
pub fn gate_input<N: Member>(
    member: &N,
    target: &str,
    image: plan::ImageTarget<'_>,
) -> NodeGateInput {
    let node = member.facts().node();
    let ready_since = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let checks = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::NODE_CHECKS))
        .and_then(|s| serde_json::from_str(s).ok());
    NodeGateInput {
        name: member.name().to_string(),
        targeted: plan::is_targeted_for(node, target, image),
        updated: plan::is_updated_for(node, target, image),
        ready: plan::is_ready(node),
        ready_since,
        checks,
        done_since: None,
    }
}

/// See [`Ctx::missing_checks`].
pub type MissingChecks = std::sync::Mutex<HashMap<String, (String, jiff::Timestamp)>>;

/// Fill in [`NodeGateInput::done_since`]: when this controller first saw each member Done on
/// the target without a check result for it. The daemon writes the result with Done, so the
/// wait starts when the controller sees the node so; after a controller restart it starts
/// again, which only delays the halt.
pub fn note_missing_checks(
    ctx: &Ctx,
    inputs: &mut [NodeGateInput],
    target: &str,
    now: jiff::Timestamp,
) {
    let mut seen = ctx.missing_checks.lock().unwrap_or_else(|e| e.into_inner());
    for n in inputs.iter_mut() {
        let missing = n.updated && n.checks.as_ref().is_none_or(|c| c.config != target);
        n.done_since = first_seen(&mut seen, &n.name, missing, target, now);
    }
}

/// When `node` was first seen with `now_so` true for `target`, remembered in `seen`; `None`
/// (and forgotten) while it is not so.
fn first_seen(
    seen: &mut HashMap<String, (String, jiff::Timestamp)>,
    node: &str,
    now_so: bool,
    target: &str,
    now: jiff::Timestamp,
) -> Option<jiff::Timestamp> {
    if !now_so {
        seen.remove(node);
        return None;
    }
    let entry = seen
        .entry(node.to_string())
        .or_insert_with(|| (target.to_string(), now));
    if entry.0 != target {
        *entry = (target.to_string(), now);
    }
    Some(entry.1)
}

/// Set each updated member's `ready_since` to when it came back from its update to `target`
/// ([`policy::returned_at`]), for the `podsReady` gate. When this controller first saw it Done
/// is kept in memory: after a restart the wait starts again, which only delays a halt.
pub fn note_returns(ctx: &Ctx, inputs: &mut [NodeGateInput], target: &str, now: jiff::Timestamp) {
    let mut seen = ctx.first_done.lock().unwrap_or_else(|e| e.into_inner());
    for n in inputs.iter_mut() {
        if let Some(done) = first_seen(&mut seen, &n.name, n.updated, target, now) {
            n.ready_since = Some(policy::returned_at(n.ready_since, done));
        }
    }
}

/// The pool's controls, read from its annotations.
pub struct Controls<'a> {
    pub halt: bool,
    pub resumed_at: Option<jiff::Timestamp>,
    pub promote: Option<&'a str>,
}

pub fn controls(pool: &MachineConfigPool) -> Controls<'_> {
    Controls {
        halt: annotation(pool, annotations::HALT) == Some("true"),
        resumed_at: annotation(pool, annotations::RESUMED_AT).and_then(|s| s.parse().ok()),
        promote: annotation(pool, annotations::PROMOTE),
    }
}

/// The entry last written for `pool` under `policy`, or the cached status's.
pub async fn previous(ctx: &Ctx, policy: &RolloutPolicy, pool: &str) -> Option<PoolRollout> {
    let writes = ctx.policy_writes.lock().await;
    if let Some(e) = writes.get(name_of(policy)).and_then(|m| m.get(pool)) {
        return Some(e.clone());
    }
    policy
        .status
        .as_ref()?
        .pools
        .iter()
        .find(|p| p.pool == pool)
        .cloned()
}

/// Write `entry` as the policy's status entry for its pool, when it changed.
pub async fn record(ctx: &Ctx, policy: &RolloutPolicy, entry: PoolRollout) -> Result<(), Error> {
    let name = name_of(policy).to_string();
    let mut writes = ctx.policy_writes.lock().await;
    let known = writes.entry(name.clone()).or_insert_with(|| {
        policy
            .status
            .as_ref()
            .map(|s| {
                s.pools
                    .iter()
                    .map(|p| (p.pool.clone(), p.clone()))
                    .collect()
            })
            .unwrap_or_default()
    });
    if known.get(&entry.pool) == Some(&entry) {
        return Ok(());
    }
    known.insert(entry.pool.clone(), entry);
    let pools: Vec<&PoolRollout> = known.values().collect();
    let api: Api<RolloutPolicy> = Api::all(ctx.client.clone());
    let patch = json!({"status": {"pools": pools}});
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            writes.remove(&name);
            Ok(())
        }
        Err(e) => {
            // Written again on the next pass.
            writes.remove(&name);
            Err(e.into())
        }
    }
}

/// The `RolloutHalted` and `RollbackPinned` conditions a governed or pinned pool carries.
pub fn pool_conditions(
    status: &mut MachineConfigPoolStatus,
    entry: Option<&PoolRollout>,
    pin: Option<(&str, &str)>,
    now: &str,
) {
    use mco_api::rollouts::conditions as c;
    let halted = entry.and_then(|e| e.halt.as_ref());
    match halted {
        Some(h) => {
            let message = if h.node.is_empty() {
                h.message.clone()
            } else {
                format!("gate {} failed on node {}: {}", h.gate, h.node, h.message)
            };
            plan::set_condition(
                &mut status.conditions,
                c::POOL_HALTED,
                true,
                if h.gate == policy::gates::MANUAL {
                    "HaltedByHand"
                } else {
                    "GateFailed"
                },
                &message,
                now,
            );
        }
        None if status.condition(c::POOL_HALTED).is_some() => {
            plan::set_condition(&mut status.conditions, c::POOL_HALTED, false, "", "", now);
        }
        None => {}
    }
    match pin {
        Some((pin, rendered)) => plan::set_condition(
            &mut status.conditions,
            c::POOL_PINNED,
            true,
            "RolledBack",
            &format!(
                "the pool is rolled back to {pin}; its MachineConfigs render {rendered}. Fix or remove the MachineConfigs until they render {pin} again, or remove the annotation {}",
                annotations::ROLLBACK_TO
            ),
            now,
        ),
        None if status.condition(c::POOL_PINNED).is_some() => {
            plan::set_condition(&mut status.conditions, c::POOL_PINNED, false, "", "", now);
        }
        None => {}
    }
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
    old: &[PolicyCondition],
) -> PolicyCondition {
    let mut list: Vec<PolicyCondition> = old.iter().filter(|c| c.type_ == type_).cloned().collect();
    policy::set_condition(&mut list, type_, status, reason, message, now);
    list.remove(0)
}

/// The policy controller: `Valid` (or the invalid fields), `Conflict` with the other policies
/// selecting the same pools, and no `pools` entries for pools it does not govern.
pub async fn reconcile(p: Arc<RolloutPolicy>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    use mco_api::rollouts::conditions as c;
    let name = name_of(&*p).to_string();
    if p.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = jiff::Timestamp::now().to_string();
    let old = p.status.clone().unwrap_or_default();
    let valid = match policy::validate(&p.spec) {
        Ok(_) => condition("Valid", true, "Valid", "", &now, &old.conditions),
        Err(errors) => {
            let message = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            let message = format!("{message}; the policy governs no pool");
            condition("Valid", false, c::INVALID, &message, &now, &old.conditions)
        }
    };
    let gov = governance(&ctx);
    let mut conflicts: Vec<String> = vec![];
    let mut governed: Vec<&str> = vec![];
    for (pool, g) in &gov {
        match g {
            Governance::Conflict(names) if names.contains(&name) => {
                let others: Vec<&str> = names
                    .iter()
                    .filter(|n| **n != name)
                    .map(String::as_str)
                    .collect();
                conflicts.push(format!(
                    "pool {pool} is also selected by {}",
                    others.join(", ")
                ));
            }
            Governance::Policy(n) if *n == name => governed.push(pool),
            _ => {}
        }
    }
    let conflict = if conflicts.is_empty() {
        condition(c::CONFLICT, false, "", "", &now, &old.conditions)
    } else {
        let message = format!(
            "{}; one policy per pool: neither policy governs these pools until only one selects each",
            conflicts.join("; ")
        );
        condition(
            c::CONFLICT,
            true,
            "OverlappingSelectors",
            &message,
            &now,
            &old.conditions,
        )
    };
    let conditions = vec![valid, conflict];
    let mut writes = ctx.policy_writes.lock().await;
    let stale: Vec<String> = old
        .pools
        .iter()
        .filter(|e| !governed.contains(&e.pool.as_str()))
        .map(|e| e.pool.clone())
        .collect();
    let changed = conditions != old.conditions
        || old.observed_generation != p.metadata.generation
        || !stale.is_empty();
    if changed {
        let mut patch = json!({"status": {
            "conditions": conditions,
            "observedGeneration": p.metadata.generation,
        }});
        if !stale.is_empty() {
            let keep: Vec<&PoolRollout> = old
                .pools
                .iter()
                .filter(|e| governed.contains(&e.pool.as_str()))
                .collect();
            patch["status"]["pools"] = json!(keep);
            writes.remove(&name);
        }
        let api: Api<RolloutPolicy> = Api::all(ctx.client.clone());
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::requeue(ctx.config.resync))
}
