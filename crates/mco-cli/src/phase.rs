//! Where a node is in its update, read from its MachineConfigNode conditions, and how long
//! updates take.

use std::time::Duration;

use jiff::Timestamp;
use mco_api::MachineConfigNode;
use mco_api::constants::{mcn_conditions as c, mcn_reasons};

/// Upstream's phase order, each child right after its parent, so that "the latest phase that has
/// started" is also the most specific one.
pub const PHASE_ORDER: [&str; 13] = [
    c::UPDATE_PREPARED,
    c::UPDATE_COMPATIBLE,
    c::UPDATE_EXECUTED,
    c::CORDONED,
    c::DRAINED,
    c::APPLIED_FILES_AND_OS,
    c::UPDATE_POST_ACTION_COMPLETE,
    c::RELOADED_CRIO,
    c::REBOOTED_NODE,
    c::UPDATE_COMPLETE,
    c::UNCORDONED,
    c::RESUMED,
    c::UPDATED,
];

/// The phase a node is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    /// Condition type, e.g. `Drained`.
    pub name: String,
    /// `Unknown` while in progress (or failing: read the message), `True` once done.
    pub status: String,
    /// When the condition last changed.
    pub since: Option<Timestamp>,
    pub message: String,
}

impl Phase {
    pub fn in_progress(&self) -> bool {
        self.status == "Unknown"
    }

    /// Time spent in this phase at `now`.
    pub fn elapsed(&self, now: Timestamp) -> Option<Duration> {
        let since = self.since?;
        let secs = now.as_second() - since.as_second();
        Some(Duration::from_secs(secs.max(0) as u64))
    }
}

/// The latest phase, in upstream order, whose condition is `Unknown` or `True`; `None` before
/// the node has reported anything.
pub fn current_phase(mcn: &MachineConfigNode) -> Option<Phase> {
    let status = mcn.status.as_ref()?;
    PHASE_ORDER.iter().rev().find_map(|t| {
        let cond = status.condition(t)?;
        (cond.status == "Unknown" || cond.status == "True").then(|| Phase {
            name: cond.type_.clone(),
            status: cond.status.clone(),
            since: Some(cond.last_transition_time.0),
            message: cond.message.clone(),
        })
    })
}

/// How long a node that finished its update took, from `UpdatePrepared` to `Updated=True`.
/// `None` when the node is not updated or the start was not recorded (a condition never
/// entered, or one reset at the end of the update).
pub fn completed_update_duration(mcn: &MachineConfigNode) -> Option<Duration> {
    let status = mcn.status.as_ref()?;
    let updated = status.condition(c::UPDATED)?;
    if updated.status != "True" {
        return None;
    }
    let prepared = status.condition(c::UPDATE_PREPARED)?;
    if prepared.reason == mcn_reasons::NOT_YET_OCCURRED || prepared.reason == "NotYetOccured" {
        return None;
    }
    let secs =
        updated.last_transition_time.0.as_second() - prepared.last_transition_time.0.as_second();
    (secs > 0).then(|| Duration::from_secs(secs as u64))
}

/// The median of observed durations, `None` without any.
pub fn median(samples: &[Duration]) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort();
    let mid = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[mid]
    } else {
        (s[mid - 1] + s[mid]) / 2
    })
}

/// Time left for `remaining` nodes updated `max_unavailable` at a time, each taking the median
/// of `samples`. `Some(0)` when nothing remains; `None` when there is no sample to go by.
pub fn eta(samples: &[Duration], remaining: usize, max_unavailable: usize) -> Option<Duration> {
    if remaining == 0 {
        return Some(Duration::ZERO);
    }
    let per_node = median(samples)?;
    let waves = remaining.div_ceil(max_unavailable.max(1));
    Some(per_node * waves as u32)
}

/// Time left at the pace the rollout has kept so far: `completions` are when nodes reached the
/// target, `start` when the pool began moving to it. Used when per-node spans are not
/// recorded (the MCN reset at the end of an update clears them). `None` without a pace.
pub fn pace_eta(
    start: Option<Timestamp>,
    completions: &[Timestamp],
    remaining: usize,
) -> Option<(Duration, Duration)> {
    let mut done: Vec<i64> = completions.iter().map(|t| t.as_second()).collect();
    done.sort();
    let last = *done.last()?;
    let (from, count) = match start.map(|s| s.as_second()) {
        Some(s) if s < last => (s, done.iter().filter(|t| **t > s).count()),
        _ if done.len() >= 2 => (done[0], done.len() - 1),
        _ => return None,
    };
    if count == 0 {
        return None;
    }
    let per_node = Duration::from_secs(((last - from) as u64).div_ceil(count as u64));
    Some((per_node * remaining as u32, per_node))
}

/// `45s`, `3m05s`, `1h02m`: short enough for a table cell.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}
