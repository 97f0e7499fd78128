//! The drain controller's choices, as pure functions: which pods a drain evicts, which
//! PodDisruptionBudgets are in its way and how that reads, the MachineConfigNode conditions it
//! writes and the JSON patch that writes them in place, and which nodes ask for a drain at all.
//! The controller that cordons, evicts and writes is `mco_controller::drain`; its docs say how
//! and why the conditions are written this way.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use mco_api::constants::{annotations, mcn_conditions};
use serde_json::json;

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

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
            let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
            mco_api::select::pool_rule_matches(sel, Some(&labels))
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

/// The conditions of a write that may land after the daemon's next phase (see
/// `mco_controller::drain`): all of `conds` but a parent the MCN already shows completed where
/// `conds` would reopen it.
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

/// The conditions of an uncordon's write sent beside its answer: none once the daemon has
/// reported the node `Updated`, since that write reset them to False and they belong to the
/// update it closed. Otherwise all of `conds`, and the write tests that `Updated` is still not
/// True ([`condition_patch`]'s `unchanged`), so it cannot land after the reset either.
pub fn uncordon_due<'a>(existing: &[Condition], conds: &[Cond<'a>]) -> Vec<Cond<'a>> {
    let updated = existing
        .iter()
        .any(|c| c.type_ == mcn_conditions::UPDATED && c.status == "True");
    if updated { vec![] } else { conds.to_vec() }
}

/// A JSON patch taking the MCN's conditions from `old` to `new`, when `new` only changes
/// conditions in place: each changed one is replaced at its index, after testing that the index
/// still holds that type with the status `old` gives it, and so is each condition named in
/// `unchanged`. The daemon's writes in between then cost nothing, where a whole-status write
/// conditional on the copy's resourceVersion met a conflict and a read; a test that fails (a
/// condition changed under us) is refused with 422 and leaves everything as it was. `None` when
/// a condition is added, or one in `unchanged` is missing: a JSON patch cannot test that a
/// condition is still absent.
pub fn condition_patch(
    old: &[Condition],
    new: &[Condition],
    unchanged: &[&str],
) -> Option<json_patch::Patch> {
    if old.len() != new.len() {
        return None;
    }
    let mut ops = vec![];
    for t in unchanged {
        let i = old.iter().position(|c| c.type_ == *t)?;
        let at = format!("/status/conditions/{i}");
        ops.push(json!({"op": "test", "path": format!("{at}/type"), "value": t}));
        ops.push(json!({"op": "test", "path": format!("{at}/status"), "value": old[i].status}));
    }
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

/// Whether a node asks for a drain or an uncordon not yet answered: the only node events the
/// drain controller acts on. The others (about ten per node in a rollout) are not worth a
/// reconcile each; a drain in progress requeues itself, and the resync covers the rest.
pub fn requested(node: &Node) -> bool {
    let desired = annotation(node, annotations::DESIRED_DRAIN);
    !desired.is_empty() && desired != annotation(node, annotations::LAST_APPLIED_DRAIN)
}

/// How long to wait before looking again for pods that were evicted or are terminating.
/// A pod without a grace period is gone by the next look, and one that terminates takes its
/// grace period: the first looks come soon, so a drain does not sit out a whole `poll` (a
/// second) for a pod that left at once, and later ones come every `poll`.
pub struct GoneWait {
    next: Duration,
    cap: Duration,
}

impl GoneWait {
    const FIRST: Duration = Duration::from_millis(20);

    pub fn new(cap: Duration) -> Self {
        Self {
            next: Self::FIRST.min(cap),
            cap,
        }
    }

    /// The next wait. (Not an `Iterator`: it never ends, and the drain loop wants a Duration.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Duration {
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
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
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
        let patch = condition_patch(&old, &new, &[]).expect("an in-place change");
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
        assert!(condition_patch(&old, &added, &[]).is_none());
    }

    #[test]
    fn a_late_uncordon_write_never_lands_after_the_updated_reset() {
        let t0 = Time(jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let t1 = Time(jiff::Timestamp::from_second(1_700_000_100).unwrap());
        let cond = |t: &str, s: &str| condition(t, s, &t0);
        let uncordon: Vec<Cond<'static>> = vec![
            (
                mcn_conditions::UPDATE_COMPLETE,
                "True",
                "Uncordoned",
                "u".into(),
            ),
            (
                mcn_conditions::UNCORDONED,
                "True",
                "UpdateCompleteUncordoned",
                "u".into(),
            ),
        ];
        let during = vec![
            cond(mcn_conditions::UPDATED, "False"),
            cond(mcn_conditions::UPDATE_COMPLETE, "False"),
            cond(mcn_conditions::UNCORDONED, "False"),
        ];
        assert_eq!(uncordon_due(&during, &uncordon).len(), 2);
        let mut reset = during.clone();
        reset[0] = cond(mcn_conditions::UPDATED, "True");
        assert!(
            uncordon_due(&reset, &uncordon).is_empty(),
            "the update is closed"
        );

        // Made while the update was open, the patch is refused once the daemon has reset.
        let new = with_conditions(&during, &uncordon, &t1);
        let patch = condition_patch(&during, &new, &[mcn_conditions::UPDATED]).unwrap();
        let doc = |conds: &[Condition]| json!({"status": {"conditions": conds}});
        let mut open = doc(&during);
        json_patch::patch(&mut open, &patch).unwrap();
        assert_eq!(open, doc(&new));
        assert!(json_patch::patch(&mut doc(&reset), &patch).is_err());
        // A guard the copy lacks cannot be tested: no patch.
        assert!(condition_patch(&during[1..], &new[1..], &[mcn_conditions::UPDATED]).is_none());
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
