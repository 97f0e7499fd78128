//! Which pods and PodDisruptionBudgets hold up a node's drain: from what the drain controller
//! wrote on the MCN, and from the budgets that allow no disruption right now.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use mco_api::constants::{annotations, drain as drain_values, mcn_conditions};

use crate::snapshot::{NodeFacts, Snapshot, annotation, mcn_condition, name_of};

/// A pod that cannot be evicted, and the budgets that refuse it (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Blocker {
    pub pod: String,
    pub pdbs: Vec<String>,
}

/// A drain that is not making progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedDrain {
    pub node: String,
    pub blockers: Vec<Blocker>,
    /// When the drain phase last changed.
    pub since: Option<Timestamp>,
    /// The MCN `Drained` message, verbatim.
    pub message: String,
}

const BLOCKED_BY: &str = "Blocked by: ";
const PDB_WORD: &str = "PodDisruptionBudget ";

/// Parses the drain controller's `... Blocked by: pod ns/a (PodDisruptionBudget ns/p: msg); pod
/// ns/b (...)` suffix.
pub fn parse_blockers(message: &str) -> Vec<Blocker> {
    let Some((_, tail)) = message.split_once(BLOCKED_BY) else {
        return Vec::new();
    };
    tail.split("; ")
        .filter_map(|entry| {
            let rest = entry.trim().strip_prefix("pod ")?;
            let (pod, why) = match rest.split_once(' ') {
                Some((p, w)) => (p, w),
                None => (rest, ""),
            };
            let mut pdbs = Vec::new();
            let mut s = why;
            while let Some(i) = s.find(PDB_WORD) {
                s = &s[i + PDB_WORD.len()..];
                let end = s
                    .find(|ch: char| ch == ',' || ch == ':' || ch == ')' || ch.is_whitespace())
                    .unwrap_or(s.len());
                pdbs.push(s[..end].to_string());
                s = &s[end..];
            }
            Some(Blocker {
                pod: pod.to_string(),
                pdbs,
            })
        })
        .collect()
}

/// Whether the node is being drained right now: it asked for a drain not yet applied, or its
/// MCN says the drain is in progress.
fn draining(snap: &Snapshot, node: &str) -> bool {
    let asked = snap.node(node).is_some_and(|n| {
        let desired = annotation(n, annotations::DESIRED_DRAIN);
        desired.starts_with(drain_values::DRAIN_PREFIX)
            && desired != annotation(n, annotations::LAST_APPLIED_DRAIN)
    });
    let mcn_says = snap
        .mcn(node)
        .and_then(|m| mcn_condition(m, mcn_conditions::DRAINED))
        .is_some_and(|c| c.status == "Unknown");
    asked || mcn_says
}

fn evictable(pod: &Pod) -> bool {
    let ds = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let done = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !ds && !done && pod.metadata.deletion_timestamp.is_none()
}

/// Pods on a cordoned, draining node that a budget with `disruptionsAllowed == 0` protects.
pub fn pdb_blockers(snap: &Snapshot, node: &str) -> Vec<Blocker> {
    let cordoned = snap
        .node(node)
        .is_some_and(|n| NodeFacts::of(n).unschedulable);
    if !cordoned || !draining(snap, node) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for pod in snap.pods_on(node).filter(|p| evictable(p)) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let exhausted: Vec<_> = snap
            .pdbs
            .iter()
            .filter(|p| p.metadata.namespace.as_deref().unwrap_or_default() == ns)
            .filter(|p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.disruptions_allowed == 0)
            })
            .map(|p| p.as_ref().clone())
            .collect();
        let names = mco_rollout::drain::budgets_for(pod, &exhausted);
        if !names.is_empty() {
            out.push(Blocker {
                pod: format!("{ns}/{}", name_of(pod)),
                pdbs: names.iter().map(|n| format!("{ns}/{n}")).collect(),
            });
        }
    }
    out
}

/// Every node whose drain is held up, with the union of what the MCN names and what the
/// budgets show.
pub fn blocked_drains(snap: &Snapshot) -> Vec<BlockedDrain> {
    let mut out = Vec::new();
    for node in &snap.nodes {
        let name = name_of(node.as_ref());
        let cond = snap
            .mcn(name)
            .and_then(|m| mcn_condition(m, mcn_conditions::DRAINED))
            .filter(|c| c.status == "Unknown");
        let mut blockers: BTreeSet<Blocker> = cond
            .map(|c| parse_blockers(&c.message))
            .unwrap_or_default()
            .into_iter()
            .collect();
        for b in pdb_blockers(snap, name) {
            match blockers.iter().find(|x| x.pod == b.pod).cloned() {
                Some(mut existing) => {
                    blockers.remove(&existing);
                    for p in b.pdbs {
                        if !existing.pdbs.contains(&p) {
                            existing.pdbs.push(p);
                        }
                    }
                    blockers.insert(existing);
                }
                None => {
                    blockers.insert(b);
                }
            }
        }
        if blockers.is_empty() {
            continue;
        }
        out.push(BlockedDrain {
            node: name.to_string(),
            blockers: blockers.into_iter().collect(),
            since: cond.map(|c| c.last_transition_time.0),
            message: cond.map(|c| c.message.clone()).unwrap_or_default(),
        });
    }
    out
}

impl BlockedDrain {
    /// Every budget involved, `namespace/name`, once each.
    pub fn pdbs(&self) -> Vec<String> {
        let set: BTreeSet<&String> = self.blockers.iter().flat_map(|b| &b.pdbs).collect();
        set.into_iter().cloned().collect()
    }

    /// `pod ns/a (PDB ns/p), pod ns/b`.
    pub fn describe(&self) -> String {
        self.blockers
            .iter()
            .map(|b| {
                if b.pdbs.is_empty() {
                    format!("pod {}", b.pod)
                } else {
                    format!("pod {} (PDB {})", b.pod, b.pdbs.join(", "))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
