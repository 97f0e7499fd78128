//! Where each node update's time goes: every version of every Node a watch delivers, stamped
//! as it arrived, turned into the time between the steps of each update.
//!
//! [`Recorder`] compares each version of a Node with the one before and notes the steps of an
//! update it shows for the first time (a [`Transition`]); [`Phases::of`] groups those of one
//! target per node and update and summarises the time between consecutive steps, the whole
//! update, and how long a slot stays free between one node's `Done` and the pool's next target.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use mco_api::constants::{annotations as ann, drain, states};
use serde::Deserialize;

use crate::stats::percentile;

/// The steps of one node's update, in the order they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// The controller set `desiredConfig` to a new config.
    Target,
    /// The daemon set `state=Working` (with its drain request).
    Working,
    /// The controller set `spec.unschedulable`.
    Cordoned,
    /// The controller answered the drain request: `lastAppliedDrain=drain-…`.
    Drained,
    /// The node's Ready condition left True: the reboot began.
    RebootStarted,
    /// Ready again: the node is back and its daemon starting.
    Rebooted,
    /// The restarted daemon asked for its uncordon: `desiredDrain=uncordon-…`.
    UncordonAsked,
    /// The controller answered it: `lastAppliedDrain=uncordon-…` with `spec.unschedulable` cleared.
    Uncordoned,
    /// The daemon set `state=Done` with `currentConfig` the target.
    Done,
}

impl Step {
    pub const ALL: [Step; 9] = [
        Step::Target,
        Step::Working,
        Step::Cordoned,
        Step::Drained,
        Step::RebootStarted,
        Step::Rebooted,
        Step::UncordonAsked,
        Step::Uncordoned,
        Step::Done,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// The phases, each from the step before it to its own, named with the Node field that ends it.
pub const PHASES: [&str; 8] = [
    "desiredConfig → state=Working",
    "→ cordoned (spec.unschedulable)",
    "→ drained (lastAppliedDrain=drain-…)",
    "→ reboot starts (Ready=False)",
    "→ reboot ends (Ready=True)",
    "→ uncordon asked (desiredDrain=uncordon-…)",
    "→ uncordoned (lastAppliedDrain=uncordon-…)",
    "→ state=Done",
];
/// The whole update, target to `Done`.
pub const UPDATE: &str = "whole update (desiredConfig → Done)";
/// A slot's free time: a node's `Done` to the pool's next target.
pub const SLOT_IDLE: &str = "slot idle (Done → next desiredConfig)";

/// What the phases read of one version of a Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeState {
    pub desired: Option<String>,
    pub current: Option<String>,
    pub state: Option<String>,
    pub desired_drain: Option<String>,
    pub last_applied_drain: Option<String>,
    pub unschedulable: bool,
    /// The Ready condition is True.
    pub ready: bool,
}

fn starts(v: &Option<String>, prefix: &str) -> bool {
    v.as_deref().is_some_and(|v| v.starts_with(prefix))
}

impl NodeState {
    fn uncordoned(&self) -> bool {
        starts(&self.last_applied_drain, drain::UNCORDON_PREFIX) && !self.unschedulable
    }

    fn done(&self) -> bool {
        self.state.as_deref() == Some(states::DONE)
            && self.current.is_some()
            && self.current == self.desired
    }

    /// The steps this version shows that `prev` did not: each a change, so a version written
    /// again unchanged, or one that changed something else, shows none.
    pub fn steps_since(&self, prev: &NodeState) -> Vec<Step> {
        let working = |s: &NodeState| s.state.as_deref() == Some(states::WORKING);
        let mut steps = Vec::new();
        let mut mark = |cond: bool, step| {
            if cond {
                steps.push(step);
            }
        };
        mark(
            self.desired.is_some() && self.desired != prev.desired,
            Step::Target,
        );
        mark(working(self) && !working(prev), Step::Working);
        mark(self.unschedulable && !prev.unschedulable, Step::Cordoned);
        mark(
            starts(&self.last_applied_drain, drain::DRAIN_PREFIX)
                && self.last_applied_drain != prev.last_applied_drain,
            Step::Drained,
        );
        mark(!self.ready && prev.ready, Step::RebootStarted);
        mark(self.ready && !prev.ready, Step::Rebooted);
        mark(
            starts(&self.desired_drain, drain::UNCORDON_PREFIX)
                && self.desired_drain != prev.desired_drain,
            Step::UncordonAsked,
        );
        mark(
            self.uncordoned()
                && !(prev.uncordoned() && prev.last_applied_drain == self.last_applied_drain),
            Step::Uncordoned,
        );
        mark(
            self.done() && !(prev.done() && prev.current == self.current),
            Step::Done,
        );
        steps
    }
}

/// One step of one node's update, as the watch delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub node: String,
    pub step: Step,
    /// The node's `desiredConfig` then: the update it belongs to.
    pub config: String,
    /// When the watch delivered it, from any fixed instant.
    pub at: Duration,
}

/// Follows every Node's versions and notes each step they show.
#[derive(Debug, Default)]
pub struct Recorder {
    last: HashMap<String, NodeState>,
    transitions: Vec<Transition>,
}

impl Recorder {
    /// Takes the version of `node` delivered at `at`. The first version of a node is where
    /// it starts from: it shows no step.
    pub fn observe(&mut self, node: &str, state: NodeState, at: Duration) {
        if let Some(prev) = self.last.get(node) {
            let config = state.desired.clone().unwrap_or_default();
            for step in state.steps_since(prev) {
                self.transitions.push(Transition {
                    node: node.to_string(),
                    step,
                    config: config.clone(),
                    at,
                });
            }
        }
        self.last.insert(node.to_string(), state);
    }

    /// A deleted node: seen again, it starts afresh.
    pub fn forget(&mut self, node: &str) {
        self.last.remove(node);
    }

    /// Whether every node that was given `target` has been seen `Done` on it since.
    pub fn complete(&self, target: &str) -> bool {
        let mut open: HashMap<&str, bool> = HashMap::new();
        for t in self.transitions.iter().filter(|t| t.config == target) {
            match t.step {
                Step::Target => {
                    open.insert(&t.node, true);
                }
                Step::Done => {
                    open.insert(&t.node, false);
                }
                _ => {}
            }
        }
        !open.values().any(|o| *o)
    }

    pub fn transitions(&self) -> &[Transition] {
        &self.transitions
    }
}

/// Percentiles and mean of one set of durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub count: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub max: Duration,
    pub mean: Duration,
}

impl Stats {
    /// `None` when there are no samples.
    pub fn of(samples: &mut [Duration]) -> Option<Stats> {
        samples.sort_unstable();
        let sum: Duration = samples.iter().sum();
        Some(Stats {
            count: samples.len(),
            p50: percentile(samples, 50.0)?,
            p90: percentile(samples, 90.0)?,
            max: *samples.last()?,
            mean: sum / u32::try_from(samples.len()).unwrap_or(u32::MAX),
        })
    }
}

/// Where the updates to one target spent their time.
#[derive(Debug, Clone, PartialEq)]
pub struct Phases {
    /// Each of [`PHASES`]: the time from the step before to its own, over the updates that
    /// have both steps in order.
    pub phases: [Option<Stats>; 8],
    /// Target to `Done`, over the updates that have both.
    pub update: Option<Stats>,
    /// From each `Done` to the next target given on the pool, the first wave's targets
    /// (given while no slot had been freed) and the last wave's `Done`s left out.
    pub slot_idle: Option<Stats>,
    /// The reboot the cluster was asked for: what an update would take with no overhead.
    pub reboot: Duration,
    /// Nodes with a step of the target.
    pub nodes: usize,
    /// Updates: a node's steps from one target to the next.
    pub updates: usize,
    /// Updates with a step never seen (the watch resumed over it, or the update does not
    /// have it, as a reboot of zero seconds).
    pub incomplete: usize,
    /// Phases whose end arrived before their start, left out of [`Phases::phases`].
    pub out_of_order: usize,
}

impl Phases {
    /// The phases of the updates to `target` among `transitions`, in any order.
    pub fn of(transitions: &[Transition], target: &str, reboot: Duration) -> Phases {
        let mut by_node: BTreeMap<&str, Vec<&Transition>> = BTreeMap::new();
        for t in transitions.iter().filter(|t| t.config == target) {
            by_node.entry(&t.node).or_default().push(t);
        }
        // One node's updates: each target starts one, and steps seen before any target
        // make one of their own; a step seen twice in an update counts once, the first time.
        let mut updates: Vec<[Option<Duration>; 9]> = Vec::new();
        for steps in by_node.values_mut() {
            steps.sort_by_key(|t| (t.at, t.step));
            let first = updates.len();
            for t in steps.iter() {
                if t.step == Step::Target || updates.len() == first {
                    updates.push([None; 9]);
                }
                if let Some(times) = updates.last_mut() {
                    times[t.step.index()].get_or_insert(t.at);
                }
            }
        }
        let mut samples: [Vec<Duration>; 8] = Default::default();
        let mut whole = Vec::new();
        let mut out_of_order = 0;
        for times in &updates {
            for (i, s) in samples.iter_mut().enumerate() {
                if let (Some(from), Some(to)) = (times[i], times[i + 1]) {
                    match to.checked_sub(from) {
                        Some(d) => s.push(d),
                        None => out_of_order += 1,
                    }
                }
            }
            if let (Some(from), Some(to)) = (times[0], times[8]) {
                whole.extend(to.checked_sub(from));
            }
        }
        let targets: Vec<Duration> = updates.iter().filter_map(|t| t[0]).collect();
        let dones: Vec<Duration> = updates.iter().filter_map(|t| t[8]).collect();
        Phases {
            phases: samples.map(|mut s| Stats::of(&mut s)),
            update: Stats::of(&mut whole),
            slot_idle: Stats::of(&mut slot_idle(&dones, &targets)),
            reboot,
            nodes: by_node.len(),
            incomplete: updates.iter().filter(|t| t.contains(&None)).count(),
            updates: updates.len(),
            out_of_order,
        }
    }

    /// Mean update less the reboot: what each update costs beyond the ideal.
    pub fn overhead(&self) -> Option<Duration> {
        self.update.map(|u| u.mean.saturating_sub(self.reboot))
    }

    /// Every row of the report: the phases, the whole update, the slot's idle time.
    pub fn rows(&self) -> Vec<(&'static str, Option<Stats>)> {
        PHASES
            .iter()
            .copied()
            .zip(self.phases)
            .chain([(UPDATE, self.update), (SLOT_IDLE, self.slot_idle)])
            .collect()
    }
}

/// Each `Done` paired with the first target given at or after it and not yet paired, oldest
/// `Done` first: the time that slot stood free.
fn slot_idle(dones: &[Duration], targets: &[Duration]) -> Vec<Duration> {
    let mut events: Vec<(Duration, bool)> = dones
        .iter()
        .map(|d| (*d, false))
        .chain(targets.iter().map(|t| (*t, true)))
        .collect();
    // At the same instant a `Done` comes first: its slot was given at once.
    events.sort();
    let mut free = VecDeque::new();
    let mut gaps = Vec::new();
    for (at, is_target) in events {
        if !is_target {
            free.push_back(at);
        } else if let Some(done) = free.pop_front() {
            gaps.push(at - done);
        }
    }
    gaps
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn cell(s: Option<Stats>, f: impl Fn(Stats) -> Duration) -> String {
    s.map_or("-".into(), |s| ms(f(s)))
}

impl fmt::Display for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  per worker update, from a Node watch: {} updates of {} nodes ({} with a step unseen, {} phases out of order)",
            self.updates, self.nodes, self.incomplete, self.out_of_order
        )?;
        writeln!(f, "  | phase | n | p50 | p90 | max | mean |")?;
        writeln!(f, "  |---|---|---|---|---|---|")?;
        for (name, s) in self.rows() {
            writeln!(
                f,
                "  | {name} | {} | {} | {} | {} | {} |",
                s.map_or(0, |s| s.count),
                cell(s, |s| s.p50),
                cell(s, |s| s.p90),
                cell(s, |s| s.max),
                cell(s, |s| s.mean),
            )?;
        }
        match (self.update, self.overhead()) {
            (Some(u), Some(o)) => write!(
                f,
                "  mean update {} = reboot {} + overhead {}",
                ms(u.mean),
                ms(self.reboot),
                ms(o)
            ),
            _ => write!(f, "  no update seen from its target to Done"),
        }
    }
}

/// The rows (phases and slot idle, not the whole update, their sum) where `b` spends more
/// time than `a` by mean, with how much more, most first.
pub fn costlier(a: &Phases, b: &Phases) -> Vec<(&'static str, Duration)> {
    let mut more: Vec<(&'static str, Duration)> = a
        .rows()
        .into_iter()
        .zip(b.rows())
        .filter(|((name, _), _)| *name != UPDATE)
        .filter_map(|((name, a), (_, b))| {
            let d = b?.mean.checked_sub(a?.mean)?;
            (!d.is_zero()).then_some((name, d))
        })
        .collect();
    more.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(y.0)));
    more
}

/// Two runs' phases side by side (p50 each, and the mean difference), and the phases where
/// the second spends the most time more.
pub fn side_by_side(a_name: &str, a: &Phases, b_name: &str, b: &Phases) -> String {
    let mut out = format!(
        "| phase | {a_name} p50 | {b_name} p50 | {b_name} − {a_name}, mean |\n|---|---|---|---|\n"
    );
    for ((name, x), (_, y)) in a.rows().into_iter().zip(b.rows()) {
        let diff = match (x, y) {
            (Some(x), Some(y)) => {
                let ms = (y.mean.as_secs_f64() - x.mean.as_secs_f64()) * 1e3;
                format!("{ms:+.1} ms")
            }
            _ => "-".into(),
        };
        out.push_str(&format!(
            "| {name} | {} | {} | {diff} |\n",
            cell(x, |s| s.p50),
            cell(y, |s| s.p50)
        ));
    }
    let more = costlier(a, b);
    match more.first() {
        Some((name, d)) => {
            out.push_str(&format!(
                "costliest on {b_name} against {a_name}: {name} (+{} per update by mean)",
                ms(*d)
            ));
            let next: Vec<String> = more[1..]
                .iter()
                .take(2)
                .map(|(n, d)| format!("{n} (+{})", ms(*d)))
                .collect();
            if !next.is_empty() {
                out.push_str(&format!("; then {}", next.join(", ")));
            }
        }
        None => out.push_str(&format!(
            "no phase takes longer on {b_name} than on {a_name}"
        )),
    }
    out
}

/// The fields of a Node the phases read; the rest of the object (managed fields, images,
/// addresses) is skipped unparsed, so following every Node costs the bench little CPU on a
/// machine it shares with the cluster it measures.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeFields {
    metadata: NodeMeta,
    #[serde(default)]
    spec: Option<NodeSpec>,
    #[serde(default)]
    status: Option<NodeStatus>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: Option<HashMap<String, String>>,
}

#[derive(Debug, Clone, Deserialize)]
struct NodeSpec {
    #[serde(default)]
    unschedulable: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
struct NodeStatus {
    #[serde(default)]
    conditions: Option<Vec<NodeCondition>>,
}

#[derive(Debug, Clone, Deserialize)]
struct NodeCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// A list of Nodes, each as [`NodeFields`].
#[derive(Debug, Clone, Deserialize)]
pub struct NodeFieldsList {
    pub metadata: ListVersion,
    pub items: Vec<NodeFields>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListVersion {
    #[serde(default)]
    pub resource_version: Option<String>,
}

impl NodeFields {
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    pub fn state(&self) -> NodeState {
        let a = |key: &str| self.metadata.annotations.as_ref()?.get(key).cloned();
        NodeState {
            desired: a(ann::DESIRED_CONFIG),
            current: a(ann::CURRENT_CONFIG),
            state: a(ann::STATE),
            desired_drain: a(ann::DESIRED_DRAIN),
            last_applied_drain: a(ann::LAST_APPLIED_DRAIN),
            unschedulable: self
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            ready: self
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const NEW: &str = "rendered-worker-new";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn t(node: &str, step: Step, at: u64) -> Transition {
        Transition {
            node: node.into(),
            step,
            config: NEW.into(),
            at: ms(at),
        }
    }

    /// One whole update of `node` from `start`: every step `gap` ms after the one before, the
    /// reboot 1,000 ms.
    pub(crate) fn update(node: &str, start: u64, gap: u64) -> Vec<Transition> {
        let mut at = start;
        Step::ALL
            .iter()
            .map(|s| {
                if *s != Step::Target {
                    at += if *s == Step::Rebooted { 1000 } else { gap };
                }
                t(node, *s, at)
            })
            .collect()
    }

    #[test]
    fn whole_updates_give_every_phase_and_the_slot_idle_time() {
        // Two slots: a and b start at 0 and 5; c takes a's slot 30 ms after a's Done, d takes
        // b's 10 ms after.
        let mut all = update("a", 0, 10);
        all.extend(update("b", 5, 20));
        let a_done = 1070;
        let b_done = 5 + 1140;
        all.extend(update("c", a_done + 30, 10));
        all.extend(update("d", b_done + 10, 10));
        let p = Phases::of(&all, NEW, ms(1000));
        assert_eq!(
            (p.nodes, p.updates, p.incomplete, p.out_of_order),
            (4, 4, 0, 0)
        );
        let working = p.phases[0].unwrap();
        assert_eq!(
            (working.count, working.p50, working.max),
            (4, ms(10), ms(20))
        );
        assert_eq!(working.mean, ms(12) + Duration::from_micros(500));
        let reboot = p.phases[4].unwrap();
        assert_eq!(
            (reboot.p50, reboot.p90, reboot.max),
            (ms(1000), ms(1000), ms(1000))
        );
        let u = p.update.unwrap();
        assert_eq!((u.count, u.p50, u.max), (4, ms(1070), ms(1140)));
        assert_eq!(p.overhead(), Some(ms(87) + Duration::from_micros(500)));
        let idle = p.slot_idle.unwrap();
        assert_eq!((idle.count, idle.p50, idle.max), (2, ms(10), ms(30)));
        assert_eq!(p.rows().len(), 10);
    }

    #[test]
    fn a_missing_step_drops_only_its_two_phases() {
        let mut all = update("a", 0, 10);
        all.retain(|t| t.step != Step::Drained);
        all.extend(update("b", 0, 10));
        let p = Phases::of(&all, NEW, ms(1000));
        assert_eq!((p.updates, p.incomplete), (2, 1));
        assert_eq!(p.phases[1].unwrap().count, 2, "Working → cordoned");
        assert_eq!(p.phases[2].unwrap().count, 1, "→ drained");
        assert_eq!(p.phases[3].unwrap().count, 1, "drained → reboot");
        assert_eq!(
            p.update.unwrap().count,
            2,
            "the whole update needs only its ends"
        );
    }

    #[test]
    fn the_order_of_the_list_does_not_matter_and_a_step_before_its_cause_is_left_out() {
        let ordered = update("a", 0, 10);
        let mut shuffled = ordered.clone();
        shuffled.reverse();
        shuffled.rotate_left(4);
        assert_eq!(
            Phases::of(&shuffled, NEW, ms(1000)),
            Phases::of(&ordered, NEW, ms(1000))
        );
        // The cordon arrived before the daemon's Working: that phase is no time, the next is
        // from the cordon, and the update still counts whole.
        let mut early = ordered;
        early[2].at = ms(5);
        let p = Phases::of(&early, NEW, ms(1000));
        assert_eq!((p.updates, p.incomplete, p.out_of_order), (1, 0, 1));
        assert_eq!(p.phases[1], None, "Working → cordoned");
        assert_eq!(p.phases[2].unwrap().p50, ms(25), "cordoned → drained");
        assert_eq!(p.update.unwrap().p50, ms(1070));
    }

    #[test]
    fn a_node_updated_twice_counts_two_updates_and_other_targets_none() {
        let mut all = update("a", 0, 10);
        all.extend(update("a", 2000, 20));
        // Another target's steps on another node are not this rollout's.
        all.extend(update("b", 0, 500).into_iter().map(|mut t| {
            t.config = "rendered-worker-old".into();
            t
        }));
        let p = Phases::of(&all, NEW, ms(1000));
        assert_eq!((p.nodes, p.updates, p.incomplete), (1, 2, 0));
        let u = p.update.unwrap();
        assert_eq!((u.count, u.p50, u.max), (2, ms(1070), ms(1140)));
        // The node's own second target is the slot's next: 930 ms after its first Done.
        assert_eq!(p.slot_idle.unwrap().max, ms(930));
        // Steps seen before any target of an update (the watch resumed over it) make an
        // update of their own, incomplete.
        let tail: Vec<Transition> = update("c", 0, 10)
            .into_iter()
            .filter(|t| t.step >= Step::Rebooted)
            .collect();
        let p = Phases::of(&tail, NEW, ms(1000));
        assert_eq!((p.updates, p.incomplete), (1, 1));
        assert_eq!(p.update, None);
        assert_eq!(p.phases[7].unwrap().p50, ms(10));
        assert_eq!(
            p.slot_idle, None,
            "a Done with no target after it frees no measured slot"
        );
        assert!(
            p.to_string()
                .ends_with("no update seen from its target to Done")
        );
    }

    #[test]
    fn nothing_seen_is_no_figure() {
        let p = Phases::of(&[], NEW, ms(1000));
        assert_eq!(
            (p.nodes, p.updates, p.update, p.overhead()),
            (0, 0, None, None)
        );
        assert!(p.phases.iter().all(Option::is_none));
    }

    #[test]
    fn a_slot_is_given_at_once_when_done_and_target_share_an_instant() {
        assert_eq!(slot_idle(&[ms(10)], &[ms(10)]), vec![ms(0)]);
        // First-wave targets pair with nothing; the oldest Done gets the first target after it.
        assert_eq!(
            slot_idle(&[ms(100), ms(120)], &[ms(0), ms(1), ms(130), ms(150)]),
            vec![ms(30), ms(30)]
        );
        assert_eq!(slot_idle(&[ms(100)], &[]), Vec::<Duration>::new());
    }

    fn node(desired: &str) -> NodeState {
        NodeState {
            desired: Some(desired.into()),
            current: Some(desired.into()),
            state: Some("Done".into()),
            desired_drain: Some("uncordon-old".into()),
            last_applied_drain: Some("uncordon-old".into()),
            unschedulable: false,
            ready: true,
        }
    }

    #[test]
    fn the_recorder_notes_each_step_once_from_the_versions_it_sees() {
        let mut r = Recorder::default();
        let mut s = node("old");
        let mut at = 0;
        let mut see = |r: &mut Recorder, s: &NodeState| {
            at += 10;
            r.observe("w1", s.clone(), ms(at));
        };
        see(&mut r, &s);
        assert!(r.transitions().is_empty(), "the first version is the start");
        s.desired = Some(NEW.into());
        see(&mut r, &s);
        assert!(!r.complete(NEW));
        // Working and the drain request in one write.
        s.state = Some("Working".into());
        s.desired_drain = Some(format!("drain-{NEW}"));
        see(&mut r, &s);
        see(&mut r, &s.clone());
        s.unschedulable = true;
        see(&mut r, &s);
        s.last_applied_drain = Some(format!("drain-{NEW}"));
        see(&mut r, &s);
        s.ready = false;
        see(&mut r, &s);
        s.ready = true;
        see(&mut r, &s);
        s.desired_drain = Some(format!("uncordon-{NEW}"));
        see(&mut r, &s);
        // The controller's answer and its uncordon in one write.
        s.last_applied_drain = Some(format!("uncordon-{NEW}"));
        s.unschedulable = false;
        see(&mut r, &s);
        s.current = Some(NEW.into());
        s.state = Some("Done".into());
        see(&mut r, &s);
        see(&mut r, &s.clone());
        let steps: Vec<Step> = r.transitions().iter().map(|t| t.step).collect();
        assert_eq!(steps, Step::ALL.to_vec());
        assert!(r.transitions().iter().all(|t| t.config == NEW));
        assert!(r.complete(NEW));
        let p = Phases::of(r.transitions(), NEW, ms(0));
        assert_eq!(p.update.unwrap().p50, ms(90));
        assert_eq!(p.phases.iter().flatten().count(), 8);
        // A deleted node starts afresh: its next version shows nothing.
        r.forget("w1");
        r.observe("w1", node("other"), ms(500));
        assert_eq!(r.transitions().len(), 9);
    }

    #[test]
    fn a_node_is_read_from_its_json_and_the_rest_skipped() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "worker-7",
                "resourceVersion": "42",
                "managedFields": [{"manager": "x", "fieldsV1": {"f:spec": {}}}],
                "annotations": {
                    (ann::DESIRED_CONFIG): NEW,
                    (ann::CURRENT_CONFIG): "rendered-worker-old",
                    (ann::STATE): "Working",
                    (ann::DESIRED_DRAIN): "drain-x",
                    (ann::LAST_APPLIED_DRAIN): "uncordon-y"
                }
            },
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            ], "images": [{"names": ["a"], "sizeBytes": 1}]}
        });
        let n: NodeFields = serde_json::from_value(json).unwrap();
        assert_eq!((n.name(), n.resource_version()), ("worker-7", Some("42")));
        let s = n.state();
        assert_eq!(s.desired.as_deref(), Some(NEW));
        assert_eq!(s.current.as_deref(), Some("rendered-worker-old"));
        assert_eq!(s.state.as_deref(), Some("Working"));
        assert_eq!(s.desired_drain.as_deref(), Some("drain-x"));
        assert_eq!(s.last_applied_drain.as_deref(), Some("uncordon-y"));
        assert!(s.unschedulable && s.ready);
        let bare: NodeFields =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!(bare.state(), NodeState::default());
    }

    fn phases(gap: u64, idle: u64) -> Phases {
        let mut all = update("a", 0, gap);
        let done = all.last().unwrap().at;
        all.extend(update("b", done.as_millis() as u64 + idle, gap));
        Phases::of(&all, NEW, ms(1000))
    }

    #[test]
    fn the_comparison_names_the_phase_that_costs_the_most() {
        let fast = phases(10, 5);
        let mut slow = phases(10, 40);
        // The real server's drains: 60 ms more each.
        slow.phases[2] = Some(Stats {
            mean: ms(70),
            p50: ms(70),
            ..slow.phases[2].unwrap()
        });
        let more = costlier(&fast, &slow);
        assert_eq!(more, vec![(PHASES[2], ms(60)), (SLOT_IDLE, ms(35))]);
        let text = side_by_side("embedded", &fast, "kube-apiserver", &slow);
        assert!(
            text.contains(
                "| → drained (lastAppliedDrain=drain-…) | 10.0 ms | 70.0 ms | +60.0 ms |"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "costliest on kube-apiserver against embedded: → drained (lastAppliedDrain=drain-…) (+60.0 ms per update by mean); then slot idle (Done → next desiredConfig) (+35.0 ms)"
            ),
            "{text}"
        );
        assert!(
            side_by_side("a", &slow, "b", &fast).ends_with("no phase takes longer on b than on a")
        );
    }

    #[test]
    fn the_table_has_a_row_per_phase() {
        let text = phases(10, 5).to_string();
        assert_eq!(text.lines().filter(|l| l.starts_with("  | ")).count(), 11);
        assert!(
            text.contains("  | → reboot ends (Ready=True) | 2 | 1000.0 ms | 1000.0 ms | 1000.0 ms | 1000.0 ms |"),
            "{text}"
        );
        assert!(
            text.contains("| slot idle (Done → next desiredConfig) | 1 | 5.0 ms |"),
            "{text}"
        );
        assert!(
            text.ends_with("  mean update 1070.0 ms = reboot 1000.0 ms + overhead 70.0 ms"),
            "{text}"
        );
    }
}
