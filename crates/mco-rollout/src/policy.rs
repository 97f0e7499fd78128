//! Rollout policies (`RolloutPolicy`) as pure decisions: which policy governs which pool, whether
//! a policy is valid, and — given a pool's nodes, their gate results, the manual controls and the
//! clock — how many of the pool's nodes may be on their way to the target now, and why not more
//! (Halted, Soaking, WaitingForWindow).
//!
//! The answer is a cap on the nodes pointed at the target ([`Decision::cap`]), which the planner
//! applies inside the `maxUnavailable` budget: a policy only ever holds nodes back, so no halt,
//! resume or window can make a rollout exceed its budget.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use mco_api::rollouts::{
    Canary, Halt, NodeCheckResult, PoolRollout, RolloutPolicySpec, conditions as cond, limits,
};
use mco_apimachinery::selector::LabelSelector;

/// Gate timeouts when the policy names none.
pub const DEFAULT_GATE_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);
pub const DEFAULT_PROBE_TIMEOUT: SignedDuration = SignedDuration::from_secs(10);
/// How long past the check timeout a node Done on its target may go without a check result
/// before the `nodeChecks` gate fails.
pub const MISSING_CHECKS_MARGIN: SignedDuration = SignedDuration::from_secs(30);
/// Each node check's timeout when `nodeChecks` names none.
pub const DEFAULT_CHECK_TIMEOUT: SignedDuration =
    SignedDuration::from_secs(limits::DEFAULT_CHECK_TIMEOUT_SECS as i64);

/// Phases of a governed pool's rollout, as written to `status.pools[].phase`.
pub mod phases {
    pub const CANARY: &str = "Canary";
    pub const SOAKING: &str = "Soaking";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const HALTED: &str = "Halted";
    pub const WAITING_FOR_WINDOW: &str = "WaitingForWindow";
    pub const COMPLETE: &str = "Complete";
}

/// Gate names, as in `Halt.gate` and the condition messages.
pub mod gates {
    pub const MANUAL: &str = "manual";
    pub const NODE_READY: &str = "nodeReady";
    pub const NODE_CHECKS: &str = "nodeChecks";
    pub const PODS_READY: &str = "podsReady";
    pub const PDBS: &str = "pdbs";
    pub const HTTP: &str = "http";
}

/// One invalid field of a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The canary's size as the policy asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanarySize {
    Nodes(usize),
    Percent(usize),
}

impl CanarySize {
    /// Nodes in the canary of a pool of `members`: a percentage rounds up, so a non-zero one
    /// is at least one node; never more than the pool.
    pub fn of(self, members: usize) -> usize {
        match self {
            CanarySize::Nodes(n) => n.min(members),
            CanarySize::Percent(p) => (p * members).div_ceil(100).min(members),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub url: String,
    pub expect_status: u16,
    pub timeout: SignedDuration,
}

/// A maintenance window, parsed.
#[derive(Debug, Clone)]
pub struct Window {
    pub schedule: croner::Cron,
    pub duration: SignedDuration,
    pub time_zone: TimeZone,
}

/// Whether drain or reboot may start now under a policy's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowState {
    /// No windows, or one is open (until then).
    Open(Option<Timestamp>),
    /// Every window is closed; the next opens then (if any ever does).
    Closed(Option<Timestamp>),
}

/// A policy whose every field is valid.
#[derive(Debug, Clone)]
pub struct Validated {
    pub canary: Option<CanarySize>,
    pub soak: SignedDuration,
    pub node_ready: Option<SignedDuration>,
    pub pods_ready: Option<SignedDuration>,
    pub pdbs: bool,
    pub http: Vec<Probe>,
    pub node_checks: Option<SignedDuration>,
    pub windows: Vec<Window>,
    pub auto_rollback: bool,
}

/// A duration such as `90s`, `10m`, `1h30m` or ISO 8601 `PT10M`; not negative.
pub fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    let d = SignedDuration::from_str(text.trim()).map_err(|_| {
        format!("invalid duration {text:?}: use e.g. \"90s\", \"10m\" or \"1h30m\"")
    })?;
    if d.is_negative() {
        return Err(format!("must not be negative, got {text:?}"));
    }
    Ok(d)
}

fn count(field: &str, v: i64, max: i64, errors: &mut Vec<FieldError>) -> usize {
    if v < 0 {
        errors.push(FieldError {
            field: field.into(),
            message: format!("must not be negative, got {v}"),
        });
        0
    } else if v > max {
        errors.push(FieldError {
            field: field.into(),
            message: format!("must be at most {max}, got {v}"),
        });
        0
    } else {
        v as usize
    }
}

fn duration(
    field: &str,
    text: Option<&str>,
    default: SignedDuration,
    errors: &mut Vec<FieldError>,
) -> SignedDuration {
    match text.map(parse_duration) {
        None => default,
        Some(Ok(d)) => d,
        Some(Err(message)) => {
            errors.push(FieldError {
                field: field.into(),
                message,
            });
            default
        }
    }
}

/// Validate every field; all errors at once, each naming its field.
pub fn validate(spec: &RolloutPolicySpec) -> Result<Validated, Vec<FieldError>> {
    let mut errors = vec![];
    if let Err(e) = mco_api::select::parse(spec.pool_selector.as_ref()) {
        errors.push(FieldError {
            field: "spec.poolSelector".into(),
            message: e.to_string(),
        });
    }
    let canary = match &spec.canary {
        None => None,
        Some(Canary {
            nodes: Some(_),
            percent: Some(_),
        }) => {
            errors.push(FieldError {
                field: "spec.canary".into(),
                message: "set one of nodes and percent, not both".into(),
            });
            None
        }
        Some(Canary {
            nodes: Some(n),
            percent: None,
        }) => Some(CanarySize::Nodes(count(
            "spec.canary.nodes",
            *n,
            100_000,
            &mut errors,
        ))),
        Some(Canary {
            nodes: None,
            percent: Some(p),
        }) => Some(CanarySize::Percent(count(
            "spec.canary.percent",
            *p,
            100,
            &mut errors,
        ))),
        Some(Canary {
            nodes: None,
            percent: None,
        }) => {
            errors.push(FieldError {
                field: "spec.canary".into(),
                message: "set nodes or percent".into(),
            });
            None
        }
    };
    let soak = duration(
        "spec.soak",
        spec.soak.as_deref(),
        SignedDuration::ZERO,
        &mut errors,
    );
    let gates = spec.gates.clone().unwrap_or_default();
    let gate_timeout =
        |field: &str, g: &Option<mco_api::rollouts::TimeoutGate>, errors: &mut Vec<FieldError>| {
            g.as_ref()
                .map(|g| duration(field, g.timeout.as_deref(), DEFAULT_GATE_TIMEOUT, errors))
        };
    let node_ready = gate_timeout(
        "spec.gates.nodeReady.timeout",
        &gates.node_ready,
        &mut errors,
    );
    let pods_ready = gate_timeout(
        "spec.gates.podsReady.timeout",
        &gates.pods_ready,
        &mut errors,
    );
    // The daemon runs each check with this timeout: whole seconds, held to a limit.
    let node_checks = gates.node_checks.as_ref().map(|g| {
        let field = "spec.gates.nodeChecks.timeout";
        let d = duration(
            field,
            g.timeout.as_deref(),
            DEFAULT_CHECK_TIMEOUT,
            &mut errors,
        );
        let max = SignedDuration::from_secs(limits::MAX_CHECK_TIMEOUT_SECS as i64);
        if d < SignedDuration::from_secs(1) || d > max || d.subsec_nanos() != 0 {
            errors.push(FieldError {
                field: field.into(),
                message: format!("must be whole seconds from 1s to {max:#}, got {d:#}"),
            });
        }
        d
    });
    if gates.http.len() > limits::MAX_HTTP_PROBES {
        errors.push(FieldError {
            field: "spec.gates.http".into(),
            message: format!(
                "at most {} probes, got {}",
                limits::MAX_HTTP_PROBES,
                gates.http.len()
            ),
        });
    }
    let mut http = vec![];
    for (i, p) in gates.http.iter().enumerate().take(limits::MAX_HTTP_PROBES) {
        let field = format!("spec.gates.http[{i}]");
        let url_ok = p.url.len() <= limits::MAX_URL_BYTES
            && (p.url.starts_with("http://") || p.url.starts_with("https://"))
            && p.url.split("://").nth(1).is_some_and(|rest| {
                let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
                !host.is_empty() && !host.contains(char::is_whitespace)
            });
        if !url_ok {
            errors.push(FieldError {
                field: format!("{field}.url"),
                message: format!(
                    "must be an http:// or https:// URL with a host, at most {} bytes, got {:?}",
                    limits::MAX_URL_BYTES,
                    truncate(&p.url, 100)
                ),
            });
        }
        let expect = p.expect_status.unwrap_or(200);
        if !(100..=599).contains(&expect) {
            errors.push(FieldError {
                field: format!("{field}.expectStatus"),
                message: format!("must be an HTTP status between 100 and 599, got {expect}"),
            });
        }
        let timeout = duration(
            &format!("{field}.timeout"),
            p.timeout.as_deref(),
            DEFAULT_PROBE_TIMEOUT,
            &mut errors,
        );
        http.push(Probe {
            url: p.url.clone(),
            expect_status: expect.clamp(100, 599) as u16,
            timeout,
        });
    }
    if spec.windows.len() > limits::MAX_WINDOWS {
        errors.push(FieldError {
            field: "spec.windows".into(),
            message: format!(
                "at most {} windows, got {}",
                limits::MAX_WINDOWS,
                spec.windows.len()
            ),
        });
    }
    let mut windows = vec![];
    for (i, w) in spec.windows.iter().enumerate().take(limits::MAX_WINDOWS) {
        let field = format!("spec.windows[{i}]");
        let schedule = if w.schedule.len() > limits::MAX_SCHEDULE_BYTES {
            Err(format!("at most {} bytes", limits::MAX_SCHEDULE_BYTES))
        } else if w.schedule.split_whitespace().count() != 5 {
            Err(format!(
                "invalid cron schedule {:?}: want 5 fields (minute hour day-of-month month day-of-week)",
                w.schedule
            ))
        } else {
            croner::Cron::from_str(&w.schedule)
                .map_err(|e| format!("invalid cron schedule {:?}: {e}", w.schedule))
        };
        let schedule = schedule
            .map_err(|message| {
                errors.push(FieldError {
                    field: format!("{field}.schedule"),
                    message,
                })
            })
            .ok();
        let duration = duration(
            &format!("{field}.duration"),
            Some(&w.duration),
            SignedDuration::ZERO,
            &mut errors,
        );
        if duration.is_zero() && parse_duration(&w.duration).is_ok() {
            errors.push(FieldError {
                field: format!("{field}.duration"),
                message: "must be longer than zero".into(),
            });
        }
        let tz = match w.time_zone.as_deref().unwrap_or("UTC") {
            name if name.len() > 64 => Err(format!("unknown time zone {:?}", truncate(name, 64))),
            name => TimeZone::get(name).map_err(|_| format!("unknown time zone {name:?}")),
        };
        let tz = tz
            .map_err(|message| {
                errors.push(FieldError {
                    field: format!("{field}.timeZone"),
                    message,
                })
            })
            .ok();
        if let (Some(schedule), Some(time_zone)) = (schedule, tz) {
            windows.push(Window {
                schedule,
                duration,
                time_zone,
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Validated {
        canary,
        soak,
        node_ready,
        pods_ready,
        pdbs: gates.pdbs,
        http,
        node_checks,
        windows,
        auto_rollback: spec.auto_rollback,
    })
}

/// `text` cut to at most `max` bytes on a character boundary.
pub fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Whether a window is open at `now`, or when the next one opens. A window opened at an
/// occurrence `t` of its schedule is open over `[t, t + duration)`.
pub fn window_state(windows: &[Window], now: Timestamp) -> WindowState {
    if windows.is_empty() {
        return WindowState::Open(None);
    }
    let mut open_until: Option<Timestamp> = None;
    let mut next: Option<Timestamp> = None;
    for w in windows {
        let zoned = now.to_zoned(w.time_zone.clone());
        let Ok(from) = zoned.checked_sub(w.duration) else {
            continue;
        };
        // The first opening that could still be open: none before `now - duration` is.
        if let Ok(t) = w.schedule.find_next_occurrence(&from, false) {
            let t = t.timestamp();
            let end = t.checked_add(w.duration).unwrap_or(Timestamp::MAX);
            if t <= now && now < end {
                open_until = Some(open_until.map_or(end, |u| u.max(end)));
            }
        }
        if let Ok(t) = w.schedule.find_next_occurrence(&zoned, false) {
            let t = t.timestamp();
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    }
    match open_until {
        Some(until) => WindowState::Open(Some(until)),
        None => WindowState::Closed(next),
    }
}

/// A policy as the governance rule sees it: its name, selector, and whether it is valid.
#[derive(Debug, Clone)]
pub struct PolicyRef<'a> {
    pub name: &'a str,
    pub selector: Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    pub valid: bool,
}

/// Who governs a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Governance {
    Policy(String),
    /// More than one valid policy selects the pool: none governs it, each reports `Conflict`.
    Conflict(Vec<String>),
}

/// Which valid policy governs each pool (pools no policy selects are absent). An invalid policy
/// governs nothing and conflicts with nothing. An absent or empty selector selects no pool.
pub fn govern(
    pools: &[(&str, &BTreeMap<String, String>)],
    policies: &[PolicyRef<'_>],
) -> BTreeMap<String, Governance> {
    let selectors: Vec<(&str, LabelSelector)> = policies
        .iter()
        .filter(|p| p.valid)
        .filter_map(|p| {
            let s = mco_api::select::parse(p.selector).ok()??;
            (!s.is_empty()).then_some((p.name, s))
        })
        .collect();
    let mut out = BTreeMap::new();
    for (pool, labels) in pools {
        let mut by: Vec<String> = selectors
            .iter()
            .filter(|(_, s)| s.matches(labels))
            .map(|(n, _)| n.to_string())
            .collect();
        by.sort();
        match by.len() {
            0 => {}
            1 => {
                out.insert(pool.to_string(), Governance::Policy(by.remove(0)));
            }
            _ => {
                out.insert(pool.to_string(), Governance::Conflict(by));
            }
        }
    }
    out
}

/// One pool member as the gates see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeGateInput {
    pub name: String,
    /// `desiredConfig` names the target.
    pub targeted: bool,
    /// Done on the target.
    pub updated: bool,
    pub ready: bool,
    /// When the node's Ready condition last changed.
    pub ready_since: Option<Timestamp>,
    /// The daemon's last node-check result.
    pub checks: Option<NodeCheckResult>,
    /// Since when the node is known Done on the target without a check result for it.
    pub done_since: Option<Timestamp>,
}

/// A gate the controller evaluated itself (HTTP probes, PDBs, pods): failed with this message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalFailure {
    pub node: String,
    pub gate: &'static str,
    pub message: String,
}

/// Everything [`decide`] reads about one governed pool.
#[derive(Debug, Clone)]
pub struct PoolInput<'a> {
    pub pool: &'a str,
    pub target: &'a str,
    /// Sorted in rollout order is not needed: the canary is whichever nodes are targeted first.
    pub members: &'a [NodeGateInput],
    pub previous: Option<&'a PoolRollout>,
    pub halt_requested: bool,
    pub resumed_at: Option<Timestamp>,
    /// The rendered config `mco rollout promote` named.
    pub promote: Option<&'a str>,
    /// Whether moving to the target drains or reboots the nodes (windows apply only then).
    pub disruptive: bool,
    pub external: &'a [ExternalFailure],
    /// A gate the controller evaluated ([`pod_and_pdb_gates`]) is not passing yet; look again
    /// then.
    pub external_pending: Option<Timestamp>,
    pub now: Timestamp,
}

/// An event the controller publishes about the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What the policy allows for one pool now.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// At most this many members may have `desiredConfig` on the target after this pass;
    /// `None`: only the budget limits.
    pub cap: Option<usize>,
    pub state: PoolRollout,
    pub events: Vec<PolicyEvent>,
    /// Look again after this long (a soak ends, a window opens, a gate times out).
    pub requeue: Option<std::time::Duration>,
    /// A gate failed in the canary and the policy asks for an automatic rollback.
    pub rollback: bool,
}

fn ts(t: Timestamp) -> String {
    t.to_string()
}

fn parse_ts(s: Option<&str>) -> Option<Timestamp> {
    s.and_then(|s| s.parse().ok())
}

/// When a moved node came back from its update, for the `podsReady` gate: the later of its
/// Ready condition's last transition (back from a reboot) and when it was first seen Done on
/// the target. A rebootless update leaves Ready as it was, perhaps days old, and the node's
/// pods still get their timeout from the update.
pub fn returned_at(ready_since: Option<Timestamp>, first_done: Timestamp) -> Timestamp {
    ready_since.map_or(first_done, |r| r.max(first_done))
}

/// The `podsReady` and `pdbs` gates over the nodes a rollout moved (`moved`: names, each with
/// when it came back from its update, see [`returned_at`]).
///
/// - `podsReady`: every pod on a moved, updated, Ready node is Ready within the timeout of the
///   node's return; pods that finished (Succeeded, Failed) do not count.
/// - `pdbs`: every PodDisruptionBudget that covers the pool (its selector matches a pod of
///   `pdb_pods` in its namespace scheduled on one of `pool_nodes`) has at least its desired
///   healthy pods; one short of it for longer than the `podsReady` timeout (10 minutes without
///   one), measured from its `DisruptionAllowed` condition's last change, fails. A drain makes
///   a budget briefly short, which is why a short one only holds the soak. Budgets elsewhere
///   in the cluster are not the pool's business.
///
/// Returns the failures and, when a gate is not passing yet, when to look again.
pub fn pod_and_pdb_gates(
    policy: &Validated,
    moved: &[(&str, Option<Timestamp>)],
    pods: &[k8s_openapi::api::core::v1::Pod],
    pdbs: &[k8s_openapi::api::policy::v1::PodDisruptionBudget],
    pdb_pods: &[k8s_openapi::api::core::v1::Pod],
    pool_nodes: &[&str],
    now: Timestamp,
) -> (Vec<ExternalFailure>, Option<Timestamp>) {
    let mut failures = vec![];
    let mut pending: Option<Timestamp> = None;
    let mut soon = |t: Timestamp| pending = Some(pending.map_or(t, |p: Timestamp| p.min(t)));
    if let Some(timeout) = policy.pods_ready {
        for (node, since) in moved {
            let not_ready: Vec<String> = pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(*node))
                .filter(|p| {
                    let st = p.status.as_ref();
                    let phase = st.and_then(|s| s.phase.as_deref()).unwrap_or_default();
                    let ready = st.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                        c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                    });
                    !matches!(phase, "Succeeded" | "Failed") && !ready
                })
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or_default(),
                        p.metadata.name.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            if not_ready.is_empty() {
                continue;
            }
            let deadline = since
                .unwrap_or(now)
                .checked_add(timeout)
                .unwrap_or(Timestamp::MAX);
            if now >= deadline {
                failures.push(ExternalFailure {
                    node: node.to_string(),
                    gate: gates::PODS_READY,
                    message: truncate(
                        &format!(
                            "pods not Ready {timeout:#} after node {node} came back: {}",
                            not_ready.join(", ")
                        ),
                        limits::MAX_OUTPUT_BYTES,
                    )
                    .to_string(),
                });
            } else {
                soon(deadline);
            }
        }
    }
    if policy.pdbs {
        let grace = policy.pods_ready.unwrap_or(DEFAULT_GATE_TIMEOUT);
        for pdb in pdbs {
            let Some(st) = pdb.status.as_ref() else {
                continue;
            };
            if st.current_healthy >= st.desired_healthy || !covers_pool(pdb, pdb_pods, pool_nodes) {
                continue;
            }
            let since = st
                .conditions
                .as_ref()
                .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionAllowed"))
                .map(|c| c.last_transition_time.0)
                .unwrap_or(now);
            let deadline = since.checked_add(grace).unwrap_or(Timestamp::MAX);
            let name = format!(
                "{}/{}",
                pdb.metadata.namespace.as_deref().unwrap_or_default(),
                pdb.metadata.name.as_deref().unwrap_or_default()
            );
            if now >= deadline {
                failures.push(ExternalFailure {
                    node: String::new(),
                    gate: gates::PDBS,
                    message: format!(
                        "PodDisruptionBudget {name} has {} healthy pods of {} desired for longer than {grace:#}",
                        st.current_healthy, st.desired_healthy
                    ),
                });
            } else {
                soon(deadline);
            }
        }
    }
    (failures, pending)
}

/// Whether `pdb` selects a pod in its namespace that runs on one of `pool_nodes`. A budget
/// without a selector selects nothing; an empty one every pod of its namespace.
pub fn covers_pool(
    pdb: &k8s_openapi::api::policy::v1::PodDisruptionBudget,
    pods: &[k8s_openapi::api::core::v1::Pod],
    pool_nodes: &[&str],
) -> bool {
    let selector = pdb
        .spec
        .as_ref()
        .and_then(|s| mco_api::select::parse(s.selector.as_ref()).ok().flatten());
    let Some(selector) = selector else {
        return false;
    };
    let empty = BTreeMap::new();
    pods.iter().any(|p| {
        p.metadata.namespace == pdb.metadata.namespace
            && p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| pool_nodes.contains(&n))
            && selector.matches(p.metadata.labels.as_ref().unwrap_or(&empty))
    })
}

/// Record the nodes a pass pointed at the target: while the canary is not through, they are
/// the canary.
pub fn note_targeted(state: &mut PoolRollout, candidates: &[String]) {
    if state.promoted {
        return;
    }
    for c in candidates {
        if !state.canary_nodes.contains(c) && !state.baseline_nodes.contains(c) {
            state.canary_nodes.push(c.clone());
        }
    }
}

pub use crate::condition::set_condition;

/// The failure of one node's own gates, if any, and when a pending gate next needs a look.
fn node_gates(
    policy: &Validated,
    node: &NodeGateInput,
    target: &str,
    now: Timestamp,
) -> (Option<(Halt, Timestamp)>, bool, Option<Timestamp>) {
    // (failure with its time, all passing, when to look again)
    let mut passing = node.updated;
    let mut wake = None;
    if !node.updated {
        return (None, false, None);
    }
    if let Some(timeout) = policy.node_ready
        && !node.ready
    {
        passing = false;
        let since = node.ready_since.unwrap_or(now);
        let deadline = since.checked_add(timeout).unwrap_or(Timestamp::MAX);
        if now >= deadline {
            let halt = Halt {
                node: node.name.clone(),
                gate: gates::NODE_READY.into(),
                message: format!(
                    "node {} is not Ready {} after its update to {target} (timeout {timeout:#})",
                    node.name,
                    since
                        .duration_until(now)
                        .round(jiff::Unit::Second)
                        .map(|d| format!("{d:#}"))
                        .unwrap_or_default()
                ),
                time: Some(ts(deadline)),
            };
            return (Some((halt, deadline)), false, None);
        }
        wake = Some(deadline);
    }
    if policy.node_checks.is_some() {
        match node.checks.as_ref().filter(|c| c.config == target) {
            Some(c) if !c.passed => {
                let at = parse_ts(Some(&c.time)).unwrap_or(now);
                let output = truncate(&c.output, limits::MAX_OUTPUT_BYTES);
                let halt = Halt {
                    node: node.name.clone(),
                    gate: gates::NODE_CHECKS.into(),
                    message: format!(
                        "node {}: health check {} failed after the update to {target}: {output}",
                        node.name, c.check
                    ),
                    time: Some(ts(at)),
                };
                return (Some((halt, at)), false, None);
            }
            Some(_) => {}
            // The daemon writes the result in the same write as Done; a node updated without
            // one runs a daemon that does not check, or its write was lost. Past the check
            // timeout and a margin the gate fails, so the pool halts visibly, not forever.
            None => {
                passing = false;
                let timeout = policy.node_checks.unwrap_or(DEFAULT_CHECK_TIMEOUT);
                let since = node.done_since.unwrap_or(now);
                let deadline = since
                    .checked_add(timeout)
                    .and_then(|t| t.checked_add(MISSING_CHECKS_MARGIN))
                    .unwrap_or(Timestamp::MAX);
                if now >= deadline {
                    let waited = since
                        .duration_until(now)
                        .round(jiff::Unit::Second)
                        .map(|d| format!("{d:#}"))
                        .unwrap_or_default();
                    let halt = Halt {
                        node: node.name.clone(),
                        gate: gates::NODE_CHECKS.into(),
                        message: format!(
                            "node {}: no health check result for {target} after {waited} \
                             (its daemon reports none, or its report was lost)",
                            node.name
                        ),
                        time: Some(ts(deadline)),
                    };
                    return (Some((halt, deadline)), false, None);
                }
                wake = Some(wake.map_or(deadline, |w: Timestamp| w.min(deadline)));
            }
        }
    }
    (None, passing, wake)
}

/// The policy's decision for one pool. Pure: every input is in `input`.
pub fn decide(policy: &Validated, windows_now: WindowState, input: &PoolInput<'_>) -> Decision {
    let now = input.now;
    let now_s = ts(now);
    let fresh = PoolRollout {
        pool: input.pool.into(),
        target: input.target.into(),
        ..PoolRollout::default()
    };
    let previous = input.previous.filter(|p| p.target == input.target).cloned();
    let is_new = previous.is_none();
    let mut state = previous.clone().unwrap_or(fresh);
    if is_new {
        state.baseline_nodes = input
            .members
            .iter()
            .filter(|n| n.targeted)
            .map(|n| n.name.clone())
            .collect();
    }
    // Conditions carry over across targets, so their transition times stay honest.
    if let Some(p) = input.previous {
        state.conditions = p.conditions.clone();
    }
    state.pool = input.pool.into();
    let mut events = vec![];
    let mut wake: Option<Timestamp> = None;
    let soon = |w: &mut Option<Timestamp>, t: Timestamp| {
        *w = Some(w.map_or(t, |x: Timestamp| x.min(t)));
    };

    let total = input.members.len();
    let targeted: Vec<&NodeGateInput> = input.members.iter().filter(|n| n.targeted).collect();
    let all_updated = input.members.iter().all(|n| n.updated);
    let baseline = |n: &str| state.baseline_nodes.iter().any(|b| b == n);
    let baseline_targeted = targeted.iter().filter(|n| baseline(&n.name)).count();
    let to_move = total - baseline_targeted;

    // Gates, on the nodes this rollout moves; failures a resume forgave are left out.
    let mut failure: Option<Halt> = None;
    let mut all_passing = true;
    for n in targeted.iter().filter(|n| !baseline(&n.name)) {
        let (fail, passing, w) = node_gates(policy, n, input.target, now);
        if let Some(t) = w {
            soon(&mut wake, t);
        }
        all_passing &= passing;
        if let Some((halt, at)) = fail {
            if input.resumed_at.is_some_and(|r| r >= at) {
                continue;
            }
            failure.get_or_insert(halt);
        }
    }
    if let Some(t) = input.external_pending {
        all_passing = false;
        soon(&mut wake, t);
    }
    for f in input.external {
        all_passing = false;
        failure.get_or_insert(Halt {
            node: f.node.clone(),
            gate: f.gate.into(),
            message: f.message.clone(),
            time: Some(now_s.clone()),
        });
    }

    let canary_size = policy.canary.map(|c| c.of(total)).unwrap_or(0).min(to_move);
    let promoted_by_hand = input.promote == Some(input.target);
    if !state.promoted && (canary_size == 0 || promoted_by_hand) {
        if promoted_by_hand && canary_size > 0 {
            events.push(PolicyEvent {
                warning: false,
                reason: "Promoted",
                message: format!(
                    "Pool {} promoted to {} by hand: canary and soak skipped",
                    input.pool, input.target
                ),
            });
        }
        state.promoted = true;
        state.soak_start_time = None;
    }

    let mut cap: Option<usize> = None;
    let mut phase = phases::ROLLING_OUT;
    let mut soaking = false;
    let mut rollback = false;

    if !state.promoted {
        // The canary: the first nodes this rollout points at the target ([`note_targeted`]),
        // and any found pointed there since (a pass whose record was lost).
        for n in &targeted {
            if !baseline(&n.name) && !state.canary_nodes.contains(&n.name) {
                state.canary_nodes.push(n.name.clone());
            }
        }
        cap = Some(baseline_targeted + canary_size);
        phase = phases::CANARY;
        let canary_done = state.canary_nodes.len() >= canary_size
            && state.canary_nodes.iter().all(|c| {
                input
                    .members
                    .iter()
                    .any(|m| &m.name == c && m.updated && m.targeted)
            });
        if canary_done && all_passing && failure.is_none() {
            let start = parse_ts(state.soak_start_time.as_deref()).unwrap_or(now);
            state.soak_start_time = Some(ts(start));
            let end = start.checked_add(policy.soak).unwrap_or(Timestamp::MAX);
            if now >= end {
                state.promoted = true;
                state.soak_start_time = None;
                cap = None;
                phase = phases::ROLLING_OUT;
                events.push(PolicyEvent {
                    warning: false,
                    reason: "Promoted",
                    message: format!(
                        "Pool {}: canary {} passed every gate for {:#}; rolling out {} to the rest",
                        input.pool,
                        state.canary_nodes.join(", "),
                        policy.soak,
                        input.target
                    ),
                });
            } else {
                phase = phases::SOAKING;
                soaking = true;
                soon(&mut wake, end);
            }
        } else {
            // Soak time counts only with every gate passing.
            state.soak_start_time = None;
        }
    }

    // A halt, by hand or by a gate, holds every node not yet targeted.
    let halt = if input.halt_requested {
        Some(Halt {
            node: String::new(),
            gate: gates::MANUAL.into(),
            message: format!(
                "halted by hand (annotation {})",
                mco_api::rollouts::annotations::HALT
            ),
            time: Some(now_s.clone()),
        })
    } else {
        failure
    };
    match &halt {
        Some(h) => {
            let same = state
                .halt
                .as_ref()
                .is_some_and(|p| p.node == h.node && p.gate == h.gate);
            if !same {
                events.push(PolicyEvent {
                    warning: true,
                    reason: "RolloutHalted",
                    message: format!("Pool {} halted: {}", input.pool, h.message),
                });
                if h.gate != gates::MANUAL && policy.auto_rollback && !state.promoted {
                    rollback = true;
                }
            }
            if !same || state.halt.is_none() {
                state.halt = Some(h.clone());
            }
            cap = Some(targeted.len());
            phase = phases::HALTED;
        }
        None => {
            if state.halt.take().is_some() {
                events.push(PolicyEvent {
                    warning: false,
                    reason: "RolloutResumed",
                    message: format!("Pool {} resumed", input.pool),
                });
            }
        }
    }

    // Windows: a disruptive update starts on no new node while every window is closed.
    state.next_window = None;
    let mut waiting = false;
    if input.disruptive && halt.is_none() && !all_updated {
        match windows_now {
            WindowState::Open(Some(until)) => soon(&mut wake, until),
            WindowState::Open(None) => {}
            WindowState::Closed(next) => {
                let held = cap.is_none_or(|c| c > targeted.len());
                if held && targeted.len() < total {
                    waiting = true;
                    phase = phases::WAITING_FOR_WINDOW;
                    cap = Some(targeted.len());
                    state.next_window = next.map(ts);
                    if let Some(n) = next {
                        soon(&mut wake, n);
                    }
                    let was = input
                        .previous
                        .is_some_and(|p| p.phase == phases::WAITING_FOR_WINDOW);
                    if !was {
                        events.push(PolicyEvent {
                            warning: false,
                            reason: "WaitingForWindow",
                            message: format!(
                                "Pool {}: {} needs a drain or reboot; waiting for the maintenance window{}",
                                input.pool,
                                input.target,
                                next.map(|n| format!(" opening at {n}")).unwrap_or_default()
                            ),
                        });
                    }
                }
            }
        }
    }

    if all_updated && halt.is_none() {
        phase = phases::COMPLETE;
        cap = None;
    }
    state.phase = phase.into();

    let c = &mut state.conditions;
    match &state.halt {
        Some(h) => {
            let reason = match h.gate.as_str() {
                gates::MANUAL => "HaltedByHand",
                _ => "GateFailed",
            };
            let message = if h.node.is_empty() {
                h.message.clone()
            } else {
                format!("gate {} failed on node {}: {}", h.gate, h.node, h.message)
            };
            set_condition(c, cond::HALTED, true, reason, &message, &now_s);
        }
        None => set_condition(c, cond::HALTED, false, "", "", &now_s),
    }
    let soak_msg = if soaking {
        format!(
            "canary {} updated to {}; soaking {:#} since {}",
            state.canary_nodes.join(", "),
            input.target,
            policy.soak,
            state.soak_start_time.clone().unwrap_or_default()
        )
    } else {
        String::new()
    };
    set_condition(
        c,
        cond::SOAKING,
        soaking,
        if soaking { "Soaking" } else { "" },
        &soak_msg,
        &now_s,
    );
    let window_msg = if waiting {
        match &state.next_window {
            Some(n) => format!("the update drains or reboots; the next window opens at {n}"),
            None => "the update drains or reboots; no window opens again".into(),
        }
    } else {
        String::new()
    };
    set_condition(
        c,
        cond::WAITING_FOR_WINDOW,
        waiting,
        if waiting { "WindowClosed" } else { "" },
        &window_msg,
        &now_s,
    );

    let requeue = wake.and_then(|w| {
        let d = now.duration_until(w);
        std::time::Duration::try_from(d).ok()
    });
    Decision {
        cap,
        state,
        events,
        requeue,
        rollback,
    }
}

#[cfg(test)]
mod tests;
