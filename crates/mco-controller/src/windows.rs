//! Whether a pool's update drains or reboots its nodes: maintenance windows hold only those.
//!
//! The answer diffs the config the nodes are on against the target, under upstream's default
//! node disruption policies (a cluster's own policy may make more changes rebootless; the
//! default errs toward waiting for a window). It is computed once per pair of configs.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::runtime::reflector::ObjectRef;
use mco_api::MachineConfig;
use mco_render::actions;
use mco_render::diff::{ConfigDiff, ConfigView};
use mco_render::ignition;
use mco_rollout::plan;
use mco_rollout::policy::NodeGateInput;

use crate::ctx::Ctx;

/// Pairs of configs remembered; past this the memo starts again.
const MEMO_MAX: usize = 64;

static MEMO: Mutex<Option<HashMap<(String, String), bool>>> = Mutex::new(None);

/// Whether moving `from` to `to` drains or reboots. `None` when either cannot be read.
pub fn drains_or_reboots(from: &MachineConfig, to: &MachineConfig) -> Option<bool> {
    let parse = |mc: &MachineConfig| match mc.spec.config.as_ref() {
        Some(raw) => ignition::parse(raw).ok(),
        None => Some(ignition::empty()),
    };
    let (a, b) = (parse(from)?, parse(to)?);
    let diff = ConfigDiff::between(
        ConfigView::new(&from.spec, &a),
        ConfigView::new(&to.spec, &b),
    );
    let acts = actions::actions_for(&diff);
    Some(actions::requires_reboot(&acts) || actions::drain_required(&acts, &diff))
}

/// Whether any member still to update would drain or reboot to reach `target`. Unknown
/// configs count as disruptive.
pub fn disruptive(ctx: &Ctx, target: &str, members: &[NodeGateInput]) -> bool {
    let Some(to) = ctx.mcs.get(&ObjectRef::new(target)) else {
        return true;
    };
    let mut froms: Vec<String> = ctx
        .nodes
        .state()
        .iter()
        .filter(|n| {
            members
                .iter()
                .any(|m| !m.updated && Some(m.name.as_str()) == n.metadata.name.as_deref())
        })
        .map(|n| plan::current_config(n).to_string())
        .filter(|c| !c.is_empty() && c != target)
        .collect();
    froms.sort();
    froms.dedup();
    froms.iter().any(|from| {
        let key = (from.clone(), target.to_string());
        if let Some(known) = MEMO
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .get(&key)
        {
            return *known;
        }
        let answer = ctx
            .mcs
            .get(&ObjectRef::new(from))
            .and_then(|f| drains_or_reboots(&f, &to))
            .unwrap_or(true);
        let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        let memo = memo.get_or_insert_with(HashMap::new);
        if memo.len() >= MEMO_MAX {
            memo.clear();
        }
        memo.insert(key, answer);
        answer
    })
}
