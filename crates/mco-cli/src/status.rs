//! `mco status`: per pool progress, the nodes updating now and in which phase, what is in the
//! way, and when the rollout should be done. Built from a [`Snapshot`] only, so it works against
//! any cluster.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use comfy_table::{ContentArrangement, Table, presets};
use mco_api::constants::{mcn_conditions, pool_conditions, states};
use mco_api::{MachineConfigNode, MachineConfigPool};

use crate::drain::{BlockedDrain, blocked_drains};
use crate::phase::{self, Phase};
use crate::snapshot::{NodeFacts, Snapshot, mcn_condition, name_of};

/// Width of the progress bar, in cells.
pub const BAR_WIDTH: usize = 20;

/// One pool's rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolProgress {
    pub name: String,
    pub updated: usize,
    pub total: usize,
    pub degraded_count: usize,
    /// The rendered config the pool moves its nodes to.
    pub target: String,
    pub paused: bool,
    pub degraded: bool,
    pub max_unavailable: usize,
    /// `None` until at least one node has completed an update to go by.
    pub eta: Option<Duration>,
    /// Completed updates the ETA is based on.
    pub samples: usize,
    /// How the ETA was computed, for the reader.
    pub eta_basis: String,
    /// The maintenance window of the pool's RolloutPolicy: `window open until …` or
    /// `next window …`.
    pub window: Option<String>,
    /// While the pool's PinnedImageSets are not pinned on every node: (nodes done, nodes), from
    /// its `PinnedImageSets` synchronizer.
    pub pinning: Option<(usize, usize)>,
    /// Why the pool, in on-cluster image mode, waits for the image of its rendered config (the
    /// node controller's `Updating` message, after the config's name).
    pub waiting_image: Option<String>,
}

/// A node moving to a new config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatingNode {
    pub node: String,
    pub pool: String,
    pub desired: String,
    /// `None` while the daemon has not reported a phase yet.
    pub phase: Option<Phase>,
    pub in_phase: Option<Duration>,
}

/// A degraded or unreconcilable node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DegradedNode {
    pub node: String,
    pub pool: String,
    pub state: String,
    pub reason: String,
}

/// Everything `mco status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusReport {
    pub pools: Vec<PoolProgress>,
    pub updating: Vec<UpdatingNode>,
    pub degraded: Vec<DegradedNode>,
    pub blocked: Vec<BlockedDrain>,
    /// Pools whose rendering failed, with the message.
    pub render_failures: Vec<(String, String)>,
    /// Pools a RolloutPolicy halted (`RolloutHalted`), with the message naming node, gate and
    /// output.
    pub halted: Vec<(String, String)>,
    /// Pools a rollback pins to a config their MachineConfigs no longer render
    /// (`RollbackPinned`), with the message.
    pub pinned: Vec<(String, String)>,
    /// Nodes whose PinnedImageSets failed (`PinnedImageSetsDegraded=True`), with the error of
    /// the first failed set.
    pub pin_failures: Vec<(String, String)>,
}

/// `[########------------]`: `width` cells, filled in proportion, never full before the end.
pub fn progress_bar(done: usize, total: usize, width: usize) -> String {
    let filled = if total == 0 {
        0
    } else if done >= total {
        width
    } else {
        (done * width / total).min(width.saturating_sub(1))
    };
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

/// `rendered-worker-0123456789…` for long rendered names; others unchanged.
pub fn short_config(name: &str) -> String {
    const KEEP: usize = 10;
    match name.rfind('-') {
        Some(i) if name.len() - i - 1 > KEEP + 1 => format!("{}…", &name[..i + 1 + KEEP]),
        _ => name.to_string(),
    }
}

fn pool_target(pool: &MachineConfigPool) -> String {
    pool.spec
        .configuration
        .as_ref()
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

/// Builds the report.
pub fn build(snap: &Snapshot) -> StatusReport {
    let membership = snap.membership();
    let pool_of = |node: &str| membership.primary.get(node).cloned().unwrap_or_default();
    let mut report = StatusReport::default();

    for pool in &snap.pools {
        let name = name_of(pool.as_ref()).to_string();
        let status = pool.status.clone().unwrap_or_default();
        let members: Vec<&str> = membership
            .primary
            .iter()
            .filter(|(_, p)| **p == name)
            .map(|(n, _)| n.as_str())
            .collect();
        let target = pool_target(pool);
        // The controller's counts when it has written them; otherwise our own count.
        let (total, updated) = if pool.status.is_some() {
            (
                status.machine_count.max(0) as usize,
                status.updated_machine_count.max(0) as usize,
            )
        } else {
            let updated = members
                .iter()
                .filter_map(|n| snap.node(n))
                .map(NodeFacts::of)
                .filter(|f| {
                    f.current == target
                        && f.desired == target
                        && f.desired_image == f.current_image
                        && f.state == states::DONE
                })
                .count();
            (members.len(), updated)
        };
        let max_unavailable = mco_rollout::plan::max_unavailable(
            pool.spec.max_unavailable.as_ref(),
            total.max(members.len()),
        );
        let samples: Vec<Duration> = members
            .iter()
            .filter_map(|n| snap.mcn(n))
            .filter(|m| {
                m.status
                    .as_ref()
                    .and_then(|s| s.config_version.as_ref())
                    .is_some_and(|v| v.current == target)
            })
            .filter_map(phase::completed_update_duration)
            .collect();
        let remaining = total.saturating_sub(updated);
        let (eta, eta_basis, samples) = if samples.is_empty() {
            // Per-node spans are gone once a node finishes (upstream's reset); go by the
            // pace: when the pool started updating and when its nodes reached the target.
            let started = status
                .condition(pool_conditions::UPDATING)
                .filter(|c| c.status == "True")
                .and_then(|c| c.last_transition_time.as_deref())
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            let completions: Vec<jiff::Timestamp> = members
                .iter()
                .filter_map(|n| snap.mcn(n))
                .filter(|m| {
                    m.status
                        .as_ref()
                        .and_then(|s| s.config_version.as_ref())
                        .is_some_and(|v| v.current == target)
                })
                .filter_map(|m| mcn_condition(m, mcn_conditions::UPDATED))
                .filter(|c| c.status == "True")
                .map(|c| c.last_transition_time.0)
                .collect();
            match phase::pace_eta(started, &completions, remaining) {
                Some((eta, per_node)) => (
                    Some(eta),
                    format!("1 node per {} so far", phase::human_duration(per_node)),
                    completions.len(),
                ),
                None => ((remaining == 0).then_some(Duration::ZERO), String::new(), 0),
            }
        } else {
            (
                phase::eta(&samples, remaining, max_unavailable),
                format!(
                    "{} waves of {}",
                    remaining.div_ceil(max_unavailable.max(1)),
                    max_unavailable
                ),
                samples.len(),
            )
        };
        let (window, wait) = window_of(snap, pool);
        let (eta, eta_basis) = match (eta, wait) {
            (Some(eta), Some(wait)) if remaining > 0 => (
                Some(eta + wait),
                format!("{eta_basis}, after the window opens"),
            ),
            _ => (eta, eta_basis),
        };
        if let Some(c) = status.condition(pool_conditions::RENDER_DEGRADED)
            && c.status == "True"
        {
            report
                .render_failures
                .push((name.clone(), c.message.clone()));
        }
        for (ty, list) in [
            (
                mco_api::rollouts::conditions::POOL_HALTED,
                &mut report.halted,
            ),
            (
                mco_api::rollouts::conditions::POOL_PINNED,
                &mut report.pinned,
            ),
        ] {
            if let Some(c) = status.condition(ty).filter(|c| c.status == "True") {
                list.push((name.clone(), c.message.clone()));
            }
        }
        let pinning = status
            .pool_synchronizers_status
            .iter()
            .find(|s| s.pool_synchronizer_type == mco_api::pinned::POOL_SYNCHRONIZER)
            .filter(|s| {
                !pool.spec.pinned_image_sets.is_empty() && s.updated_machine_count < s.machine_count
            })
            .map(|s| {
                (
                    s.updated_machine_count.max(0) as usize,
                    s.machine_count.max(0) as usize,
                )
            });
        let waiting_image = status
            .condition(pool_conditions::UPDATING)
            .filter(|c| c.status == "True")
            .and_then(|c| c.message.strip_prefix(mco_rollout::plan::WAITING_FOR_IMAGE))
            .and_then(|rest| rest.split_once(": "))
            .map(|(_, why)| why.to_string());
        report.pools.push(PoolProgress {
            pinning,
            waiting_image,
            degraded_count: status.degraded_machine_count.max(0) as usize,
            degraded: status.is_true(pool_conditions::DEGRADED),
            paused: pool.spec.paused,
            eta,
            eta_basis,
            window,
            samples,
            name,
            updated,
            total,
            target,
            max_unavailable,
        });
    }
    report.pools.sort_by(|a, b| a.name.cmp(&b.name));

    for node in &snap.nodes {
        let name = name_of(node.as_ref());
        let facts = NodeFacts::of(node);
        let pool = pool_of(name);
        let mcn = snap.mcn(name);
        if is_degraded(&facts) {
            report.degraded.push(DegradedNode {
                node: name.to_string(),
                pool: pool.clone(),
                state: facts.state.clone(),
                reason: degraded_reason(&facts, mcn),
            });
        }
        if let Some(why) = mcn.and_then(pin_failure) {
            report.pin_failures.push((name.to_string(), why));
        }
        let moving = is_moving(&facts, mcn);
        if moving {
            let phase = mcn.and_then(phase::current_phase);
            report.updating.push(UpdatingNode {
                node: name.to_string(),
                pool,
                desired: facts.desired.clone(),
                in_phase: phase.as_ref().and_then(|p| p.elapsed(snap.now)),
                phase,
            });
        }
    }
    report.blocked = blocked_drains(snap);
    report
}

/// Why the node's PinnedImageSets failed, when its MachineConfigNode says they did: the first
/// failed set's error, or the condition's message.
pub fn pin_failure(mcn: &MachineConfigNode) -> Option<String> {
    let c = mcn_condition(mcn, mco_api::pinned::MCN_DEGRADED).filter(|c| c.status == "True")?;
    let failed = mcn
        .status
        .as_ref()
        .and_then(|s| s.pinned_image_sets.as_ref())
        .into_iter()
        .flatten()
        .find(|e| e.failed());
    Some(match failed {
        Some(e) => format!(
            "PinnedImageSet {}: {}",
            e.name, e.last_failed_generation_error
        ),
        None => c.message.clone(),
    })
}

/// Whether a node is degraded or unreconcilable.
pub fn is_degraded(facts: &NodeFacts) -> bool {
    facts.state == states::DEGRADED || facts.state == states::UNRECONCILABLE
}

/// Why a degraded node is degraded: the daemon's reason annotation, else its MachineConfigNode's
/// `NodeDegraded` message.
pub fn degraded_reason(facts: &NodeFacts, mcn: Option<&MachineConfigNode>) -> String {
    if !facts.reason.is_empty() {
        return facts.reason.clone();
    }
    mcn.and_then(|m| mcn_condition(m, mcn_conditions::NODE_DEGRADED))
        .filter(|c| c.status == "True")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Whether a node is moving to a new config (`mco status` lists it as updating): its desired
/// config or image differs, its daemon is working, or its MachineConfigNode is in a phase short
/// of `Updated`.
pub fn is_moving(facts: &NodeFacts, mcn: Option<&MachineConfigNode>) -> bool {
    (!facts.desired.is_empty() && facts.desired != facts.current)
        || facts.desired_image != facts.current_image
        || facts.state == states::WORKING
        || mcn.is_some_and(|m| !mcn_updated(m) && phase::current_phase(m).is_some())
}

/// Whether a MachineConfigNode's `Updated` condition is true.
pub fn mcn_updated(mcn: &MachineConfigNode) -> bool {
    mcn_condition(mcn, mcn_conditions::UPDATED).is_some_and(|c| c.status == "True")
}

/// The RolloutPolicy that governs `pool`: the one valid policy whose selector matches it, as the
/// controller decides (none when two conflict).
pub fn governing_policy<'a>(
    snap: &'a Snapshot,
    pool: &MachineConfigPool,
) -> Option<&'a mco_api::RolloutPolicy> {
    use mco_rollout::policy::{self, Governance, PolicyRef};
    let name = name_of(pool);
    let labels = pool.metadata.labels.clone().unwrap_or_default();
    let refs: Vec<PolicyRef<'_>> = snap
        .policies
        .iter()
        .map(|p| PolicyRef {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            selector: p.spec.pool_selector.as_ref(),
            valid: policy::validate(&p.spec).is_ok(),
        })
        .collect();
    let Some(Governance::Policy(governing)) =
        policy::govern(&[(name, &labels)], &refs).remove(name)
    else {
        return None;
    };
    snap.policies
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(governing.as_str()))
        .map(Arc::as_ref)
}

/// The maintenance window of the RolloutPolicy that governs `pool`, as text, and how long the
/// rollout waits for it (when the policy reports the pool `WaitingForWindow`).
fn window_of(
    snap: &Snapshot,
    pool: &mco_api::MachineConfigPool,
) -> (Option<String>, Option<Duration>) {
    use mco_rollout::policy::{self, WindowState};
    let name = name_of(pool);
    let Some(p) = governing_policy(snap, pool) else {
        return (None, None);
    };
    let Ok(v) = policy::validate(&p.spec) else {
        return (None, None);
    };
    if v.windows.is_empty() {
        return (None, None);
    }
    let text = match policy::window_state(&v.windows, snap.now) {
        WindowState::Open(Some(until)) => {
            format!("window open until {}", until.strftime("%Y-%m-%d %H:%MZ"))
        }
        WindowState::Open(None) => "window open".to_string(),
        WindowState::Closed(Some(next)) => {
            format!("next window {}", next.strftime("%Y-%m-%d %H:%MZ"))
        }
        WindowState::Closed(None) => "no window opens again".to_string(),
    };
    let waiting = p
        .status
        .as_ref()
        .and_then(|s| s.pools.iter().find(|e| e.pool == name))
        .filter(|e| e.phase == policy::phases::WAITING_FOR_WINDOW);
    let wait = match (waiting, policy::window_state(&v.windows, snap.now)) {
        (Some(_), WindowState::Closed(Some(next))) => {
            Duration::try_from(snap.now.duration_until(next)).ok()
        }
        _ => None,
    };
    (Some(text), wait)
}

/// Longest message shown in the table; `mco doctor` and `kubectl describe` show the rest.
pub const MESSAGE_WIDTH: usize = 72;

/// `text` cut to `max` characters with `…`.
pub fn ellipsize(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

fn table() -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    t
}

fn trimmed(t: &Table) -> String {
    t.to_string()
        .lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line per pool, e.g.
/// `worker  [##########----------] 3/6 updated  target rendered-worker-abc…  paused`.
pub fn pool_line(p: &PoolProgress) -> Vec<String> {
    let mut flags = Vec::new();
    if p.paused {
        flags.push("paused".to_string());
    }
    if p.degraded {
        flags.push(format!("degraded ({} nodes)", p.degraded_count));
    }
    let eta = if p.updated >= p.total {
        "done".to_string()
    } else {
        match p.eta {
            Some(d) => format!("ETA {} ({})", phase::human_duration(d), p.eta_basis),
            None => "ETA unknown (no node finished yet)".to_string(),
        }
    };
    if let Some(w) = &p.window {
        flags.push(w.clone());
    }
    if let Some((done, of)) = p.pinning {
        flags.push(format!("pinning images {done}/{of}"));
    }
    if let Some(why) = &p.waiting_image {
        flags.push(format!("waiting for its image ({why})"));
    }
    vec![
        p.name.clone(),
        progress_bar(p.updated, p.total, BAR_WIDTH),
        format!("{}/{} updated", p.updated, p.total),
        format!("target {}", short_config(&p.target)),
        eta,
        flags.join(" "),
    ]
}

/// The text of `mco status`; looks the same on a terminal and in a log.
pub fn render(r: &StatusReport) -> String {
    let mut out = String::new();
    if r.pools.is_empty() {
        out.push_str("No MachineConfigPools.\n");
    } else {
        let mut t = table();
        for p in &r.pools {
            t.add_row(pool_line(p));
        }
        let _ = writeln!(out, "{}", trimmed(&t));
    }

    out.push('\n');
    if r.updating.is_empty() {
        out.push_str("No node is updating.\n");
    } else {
        let mut t = table();
        t.set_header(vec!["NODE", "POOL", "PHASE", "FOR", "TARGET", "MESSAGE"]);
        let mut rows = r.updating.clone();
        rows.sort_by(|a, b| (&a.pool, &a.node).cmp(&(&b.pool, &b.node)));
        for u in &rows {
            let (phase, message) = match &u.phase {
                Some(p) if p.in_progress() => (format!("{} (in progress)", p.name), &p.message),
                Some(p) => (format!("{} (done)", p.name), &p.message),
                None => ("waiting".to_string(), &String::new()),
            };
            t.add_row(vec![
                u.node.clone(),
                u.pool.clone(),
                phase,
                u.in_phase.map(phase::human_duration).unwrap_or_default(),
                short_config(&u.desired),
                ellipsize(message, MESSAGE_WIDTH),
            ]);
        }
        let _ = writeln!(out, "Updating:\n{}", trimmed(&t));
    }

    if !r.degraded.is_empty()
        || !r.blocked.is_empty()
        || !r.render_failures.is_empty()
        || !r.halted.is_empty()
        || !r.pinned.is_empty()
        || !r.pin_failures.is_empty()
    {
        out.push('\n');
        out.push_str("Trouble:\n");
        let mut t = table();
        t.set_header(vec!["WHAT", "WHERE", "WHY"]);
        for (pool, msg) in &r.halted {
            t.add_row(vec![
                "rollout halted".into(),
                format!("pool {pool}"),
                msg.clone(),
            ]);
        }
        for (pool, msg) in &r.pinned {
            t.add_row(vec![
                "rolled back".into(),
                format!("pool {pool}"),
                msg.clone(),
            ]);
        }
        for (pool, msg) in &r.render_failures {
            t.add_row(vec![
                "render failed".into(),
                format!("pool {pool}"),
                msg.clone(),
            ]);
        }
        for (node, why) in &r.pin_failures {
            t.add_row(vec![
                "pinning failed".into(),
                format!("node {node}"),
                ellipsize(why, MESSAGE_WIDTH),
            ]);
        }
        for d in &r.degraded {
            t.add_row(vec![
                d.state.to_lowercase(),
                format!("node {}", d.node),
                d.reason.clone(),
            ]);
        }
        for b in &r.blocked {
            let since = b
                .since
                .map(|s| format!(" since {}", s.strftime("%H:%M:%SZ")))
                .unwrap_or_default();
            t.add_row(vec![
                "drain blocked".into(),
                format!("node {}", b.node),
                format!("{}{since}", b.describe()),
            ]);
        }
        let _ = writeln!(out, "{}", trimmed(&t));
        out.push_str("Run `mco doctor` for causes and fixes.\n");
    }
    out
}
