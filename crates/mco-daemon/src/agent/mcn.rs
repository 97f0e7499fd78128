//! The MachineConfigNode status the daemon writes, as pure transformations of a status value so
//! upstream's rules (fill every condition with `NotYetOccurred`, parent/child reasons, the
//! `Updated` reset, the no-op guard, health) are unit-tested without an API server.
//!
//! The daemon writes from the copy its last write returned, though the drain controller may
//! have written since, so a write is a JSON patch that replaces only the conditions it
//! changes, each at its index after a test of what it relies on ([`status_patch`]); a failed
//! test is a 422 and sends the daemon to read. Neither writer ever reorders the list, so the
//! other's writes in between cost nothing. An uncordon answer sets on the copy the conditions
//! the drain controller wrote before it ([`uncordoned`]), so the `Updated` reset that follows
//! needs no read.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use mco_api::constants::{health, mcn_conditions as c, mcn_reasons, names};
use mco_api::pinned::{self, MachineConfigNodeStatusPinnedImageSet};
use mco_api::{
    IrreconcilableChangeDiff, MachineConfigNodeStatus, MachineConfigNodeStatusConfigVersion,
};

/// A condition status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Completed.
    True,
    /// Not started or not applicable.
    False,
    /// In progress or errored.
    Unknown,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// One condition write: a parent phase, optionally with one child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Parent condition type.
    pub parent: &'static str,
    /// Parent status.
    pub status: Status,
    /// Parent reason override (upstream writes e.g. `None` for a no-op post action).
    pub reason: Option<&'static str>,
    /// Parent message.
    pub message: String,
    /// Child `(type, status, message)`.
    pub child: Option<(&'static str, Status, String)>,
    /// `status.irreconcilableChanges` as of this write (empty: none), when it says.
    pub irreconcilable: Option<Vec<IrreconcilableChangeDiff>>,
    /// A second condition with its own reason, `(type, status, reason, message)`: the pinned
    /// image sets' Progressing and Degraded go together.
    pub sibling: Option<(&'static str, Status, &'static str, String)>,
    /// `status.pinnedImageSets` as of this write (empty: none), when it says.
    pub pinned: Option<Vec<MachineConfigNodeStatusPinnedImageSet>>,
}

impl Write {
    /// A parent-only write.
    pub fn parent(parent: &'static str, status: Status, message: impl Into<String>) -> Write {
        Write {
            parent,
            status,
            reason: None,
            message: message.into(),
            child: None,
            irreconcilable: None,
            sibling: None,
            pinned: None,
        }
    }

    /// Adds the child condition.
    pub fn child(
        mut self,
        child: &'static str,
        status: Status,
        message: impl Into<String>,
    ) -> Write {
        self.child = Some((child, status, message.into()));
        self
    }

    /// Overrides the parent reason.
    pub fn reason(mut self, reason: &'static str) -> Write {
        self.reason = Some(reason);
        self
    }

    /// Sets a second condition with its own reason.
    pub fn sibling(
        mut self,
        type_: &'static str,
        status: Status,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Write {
        self.sibling = Some((type_, status, reason, message.into()));
        self
    }

    /// Sets `status.pinnedImageSets` too.
    pub fn pinned(mut self, sets: Vec<MachineConfigNodeStatusPinnedImageSet>) -> Write {
        self.pinned = Some(sets);
        self
    }

    /// Sets `status.irreconcilableChanges` too (`None`: leaves it as it is).
    pub fn irreconcilable(mut self, report: Option<Vec<IrreconcilableChangeDiff>>) -> Write {
        self.irreconcilable = report;
        self
    }
}

/// The node facts every status write carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node's `currentConfig` annotation.
    pub current: String,
    /// The node's `desiredConfig` annotation.
    pub desired: String,
    /// The MCN's `metadata.generation`.
    pub generation: Option<i64>,
}

fn set_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: Status,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    match conds.iter_mut().find(|x| x.type_ == type_) {
        Some(x) => {
            if x.status == status.as_str() && x.reason == reason && x.message == message {
                return false;
            }
            if x.status != status.as_str() {
                x.last_transition_time = now.clone();
            }
            x.status = status.as_str().into();
            x.reason = reason.into();
            x.message = message.into();
            true
        }
        None => {
            conds.push(Condition {
                type_: type_.into(),
                status: status.as_str().into(),
                reason: reason.into(),
                message: message.into(),
                last_transition_time: now.clone(),
                observed_generation: None,
            });
            true
        }
    }
}

/// Makes every condition type exist, filling new ones with `NotYetOccurred`.
pub fn ensure_all(status: &mut MachineConfigNodeStatus, now: &Time) -> bool {
    let mut changed = false;
    for t in c::ALL {
        if status.condition(t).is_none() {
            status.conditions.push(Condition {
                type_: t.into(),
                status: "False".into(),
                reason: mcn_reasons::NOT_YET_OCCURRED.into(),
                message: mcn_reasons::not_yet_message(t),
                last_transition_time: now.clone(),
                observed_generation: None,
            });
            changed = true;
        }
    }
    changed
}

/// Conditions an update neither resets nor is disrupted by: the pinned image sets' own, which
/// the daemon writes beside updates, as upstream's second worker does.
fn outside_updates(type_: &str) -> bool {
    type_ == pinned::MCN_PROGRESSING || type_ == pinned::MCN_DEGRADED
}

/// Applies one write with upstream's rules. Returns whether anything changed (upstream's no-op
/// guard: an unchanged write is not sent).
pub fn apply(
    status: &mut MachineConfigNodeStatus,
    w: &Write,
    facts: &NodeFacts,
    now: &Time,
) -> bool {
    let mut changed = ensure_all(status, now);
    let reason = w
        .reason
        .unwrap_or_else(|| w.child.as_ref().map(|(t, _, _)| *t).unwrap_or(w.parent));
    if w.parent == c::UPDATED {
        // Upstream's reset: every other phase that is not False goes False, its message saying
        // which update it belonged to.
        let prefix = format!("Action during update to {}: ", facts.desired);
        for x in status.conditions.iter_mut() {
            if x.type_ == c::UPDATED
                || x.type_ == c::NODE_DEGRADED
                || outside_updates(&x.type_)
                || x.status == "False"
            {
                continue;
            }
            x.status = "False".into();
            x.last_transition_time = now.clone();
            if !x.message.starts_with("Action during update to ") {
                x.message = format!("{prefix}{}", x.message);
            }
            changed = true;
        }
    } else if w.parent != c::NODE_DEGRADED
        && w.parent != c::RESUMED
        && !outside_updates(w.parent)
        && status
            .condition(c::UPDATED)
            .is_some_and(|u| u.status == "True")
    {
        changed |= set_condition(
            &mut status.conditions,
            c::UPDATED,
            Status::False,
            c::UPDATED,
            "This node is not updated, sensed disruption via a manual update.",
            now,
        );
    }
    changed |= set_condition(
        &mut status.conditions,
        w.parent,
        w.status,
        reason,
        &w.message,
        now,
    );
    if let Some((child, st, msg)) = &w.child {
        let child_reason = format!("{}{}", w.parent, child);
        changed |= set_condition(&mut status.conditions, child, *st, &child_reason, msg, now);
    }
    if let Some((t, st, reason, msg)) = &w.sibling {
        changed |= set_condition(&mut status.conditions, t, *st, reason, msg, now);
    }
    if let Some(sets) = &w.pinned {
        let sets = (!sets.is_empty()).then(|| sets.clone());
        if status.pinned_image_sets != sets {
            status.pinned_image_sets = sets;
            changed = true;
        }
    }
    if let Some(report) = &w.irreconcilable {
        let report = (!report.is_empty()).then(|| report.clone());
        if status.irreconcilable_changes != report {
            status.irreconcilable_changes = report;
            changed = true;
        }
    }
    changed |= set_facts(status, facts);
    changed
}

/// Keeps `configVersion`, `health`, `mostRecentError` and `observedGeneration` current.
pub fn set_facts(status: &mut MachineConfigNodeStatus, facts: &NodeFacts) -> bool {
    let before = status.clone();
    let desired = if facts.desired.is_empty() {
        names::NOT_YET_SET.to_string()
    } else {
        facts.desired.clone()
    };
    status.config_version = Some(MachineConfigNodeStatusConfigVersion {
        current: facts.current.clone(),
        desired,
    });
    let degraded = status
        .condition(c::NODE_DEGRADED)
        .filter(|d| d.status == "True")
        .map(|d| d.message.clone());
    match degraded {
        Some(msg) => {
            status.health = health::UNHEALTHY.into();
            status.most_recent_error = msg;
        }
        None => {
            status.health = health::HEALTHY.into();
        }
    }
    if let Some(g) = facts.generation {
        status.observed_generation = Some(g);
    }
    *status != before
}

/// A JSON patch taking the MCN's status from `old`, a copy that may be behind the server's, to
/// `new`, computed on it. The daemon holds the MCN its last write returned, and the drain
/// controller writes its own conditions between the daemon's writes: a whole-status write
/// conditional on the copy's resourceVersion then met a conflict and cost a read, and did so
/// twice in every update, each time on the update's path.
///
/// Conditions are replaced in place, after testing that their index still holds their type.
/// What a replaced condition keeps from the copy is tested too: its status when it keeps its
/// transition time, and all of it when the `Updated` reset carries its message. The reset also
/// tests that every condition it leaves False still is False. A failed test is refused with 422
/// and changes nothing. `observedGeneration` is copied from the object's own generation, which
/// the controller's spec writes move without the daemon seeing them.
///
/// `None` when a condition is added or the list differs in order: a JSON patch cannot test that
/// an index is still absent, so only a whole-status write can say it.
pub fn status_patch(
    old: &MachineConfigNodeStatus,
    new: &MachineConfigNodeStatus,
    reset: bool,
) -> Option<Vec<serde_json::Value>> {
    use serde_json::json;
    if old.conditions.len() != new.conditions.len() || new.health.is_empty() {
        return None;
    }
    let mut ops = vec![];
    for (i, (o, n)) in old.conditions.iter().zip(&new.conditions).enumerate() {
        if o.type_ != n.type_ {
            return None;
        }
        let at = format!("/status/conditions/{i}");
        let exempt =
            o.type_ == c::UPDATED || o.type_ == c::NODE_DEGRADED || outside_updates(&o.type_);
        if o == n {
            if reset && !exempt {
                ops.push(json!({"op": "test", "path": format!("{at}/status"), "value": o.status}));
            }
            continue;
        }
        if reset && !exempt {
            // All the reset keeps or derives from: not the transition time, which it replaces
            // and which the daemon cannot know for a condition another writer set.
            for (field, value) in [
                ("type", &o.type_),
                ("status", &o.status),
                ("reason", &o.reason),
                ("message", &o.message),
            ] {
                ops.push(json!({"op": "test", "path": format!("{at}/{field}"), "value": value}));
            }
        } else {
            ops.push(json!({"op": "test", "path": format!("{at}/type"), "value": o.type_}));
            if o.status == n.status {
                ops.push(json!({"op": "test", "path": format!("{at}/status"), "value": o.status}));
            }
        }
        ops.push(json!({"op": "replace", "path": at, "value": n}));
    }
    if old.config_version != new.config_version {
        ops.push(
            json!({"op": "add", "path": "/status/configVersion", "value": new.config_version}),
        );
    }
    if old.health != new.health {
        ops.push(json!({"op": "add", "path": "/status/health", "value": new.health}));
    }
    if old.most_recent_error != new.most_recent_error {
        ops.push(
            json!({"op": "add", "path": "/status/mostRecentError", "value": new.most_recent_error}),
        );
    }
    if old.irreconcilable_changes != new.irreconcilable_changes {
        ops.push(match &new.irreconcilable_changes {
            Some(v) => json!({"op": "add", "path": "/status/irreconcilableChanges", "value": v}),
            None => json!({"op": "remove", "path": "/status/irreconcilableChanges"}),
        });
    }
    if old.pinned_image_sets != new.pinned_image_sets {
        ops.push(match &new.pinned_image_sets {
            Some(v) => json!({"op": "add", "path": "/status/pinnedImageSets", "value": v}),
            None => json!({"op": "remove", "path": "/status/pinnedImageSets"}),
        });
    }
    ops.push(
        json!({"op": "copy", "from": "/metadata/generation", "path": "/status/observedGeneration"}),
    );
    Some(ops)
}

/// Sets the conditions the drain controller writes before it answers an uncordon
/// ([`mcn_reasons::UNCORDONED`]) on a copy of the status, as that controller does: True, with
/// its reason and message, the transition time moved only when the status changes.
pub fn uncordoned(status: &mut MachineConfigNodeStatus) {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    for (t, reason, message) in mcn_reasons::UNCORDONED {
        set_condition(
            &mut status.conditions,
            t,
            Status::True,
            reason,
            message,
            &now,
        );
    }
}

/// `NodeDegraded` after an update attempt, with upstream's messages.
pub fn degraded(node: &str, error: Option<&str>) -> Write {
    match error {
        None => Write::parent(
            c::NODE_DEGRADED,
            Status::False,
            format!("Node {node} upgrade succeeded"),
        ),
        Some(e) => Write::parent(
            c::NODE_DEGRADED,
            Status::True,
            format!("Node {node} upgrade failure. {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn facts() -> NodeFacts {
        NodeFacts {
            current: "rendered-worker-0".into(),
            desired: "rendered-worker-1".into(),
            generation: Some(3),
        }
    }

    #[test]
    fn first_write_fills_every_condition() {
        let mut s = MachineConfigNodeStatus::default();
        assert!(apply(
            &mut s,
            &Write::parent(c::UPDATED, Status::False, "Node n needs an update"),
            &facts(),
            &now()
        ));
        assert_eq!(s.conditions.len(), c::ALL.len());
        let p = s.condition(c::UPDATE_PREPARED).unwrap();
        assert_eq!(p.reason, "NotYetOccurred");
        assert_eq!(
            p.message,
            "This node has not yet entered the UpdatePrepared phase"
        );
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.health, "Healthy");
        let cv = s.config_version.clone().unwrap();
        assert_eq!(
            (cv.current.as_str(), cv.desired.as_str()),
            ("rendered-worker-0", "rendered-worker-1")
        );
    }

    #[test]
    fn parent_child_reasons_and_noop_guard() {
        let mut s = MachineConfigNodeStatus::default();
        let w = Write::parent(
            c::UPDATE_EXECUTED,
            Status::Unknown,
            "Updating the Files and OS on disk as a part of the in progress phase",
        )
        .child(c::APPLIED_FILES_AND_OS, Status::Unknown, "Applying files");
        assert!(apply(&mut s, &w, &facts(), &now()));
        let p = s.condition(c::UPDATE_EXECUTED).unwrap();
        assert_eq!(
            (p.status.as_str(), p.reason.as_str()),
            ("Unknown", "AppliedFilesAndOS")
        );
        let ch = s.condition(c::APPLIED_FILES_AND_OS).unwrap();
        assert_eq!(ch.reason, "UpdateExecutedAppliedFilesAndOS");
        assert!(
            !apply(&mut s, &w, &facts(), &now()),
            "unchanged write is a no-op"
        );
    }

    #[test]
    fn updated_resets_the_others_and_a_new_phase_flips_updated() {
        let mut s = prepared();
        apply(
            &mut s,
            &Write::parent(c::UPDATED, Status::True, "Node n Updated"),
            &facts(),
            &now(),
        );
        let p = s.condition(c::UPDATE_PREPARED).unwrap();
        assert_eq!(p.status, "False");
        assert_eq!(
            p.message,
            "Action during update to rendered-worker-1: Update Compatible."
        );
        assert_eq!(s.condition(c::UPDATED).unwrap().status, "True");
        apply(
            &mut s,
            &Write::parent(c::UPDATE_PREPARED, Status::True, "again"),
            &facts(),
            &now(),
        );
        let u = s.condition(c::UPDATED).unwrap();
        assert_eq!(u.status, "False");
        assert_eq!(
            u.message,
            "This node is not updated, sensed disruption via a manual update."
        );
    }

    /// An MCN as the server holds it, at `generation`.
    fn object(status: &MachineConfigNodeStatus, generation: i64) -> serde_json::Value {
        serde_json::json!({"metadata": {"generation": generation}, "status": status})
    }

    fn patched(
        doc: &serde_json::Value,
        ops: Vec<serde_json::Value>,
    ) -> Result<MachineConfigNodeStatus, json_patch::PatchError> {
        let p: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops)).unwrap();
        let mut doc = doc.clone();
        json_patch::patch(&mut doc, &p)?;
        Ok(serde_json::from_value(doc["status"].clone()).unwrap())
    }

    /// `s` with condition `t` changed by `f`, as another writer would leave it.
    fn changed(
        s: &MachineConfigNodeStatus,
        t: &str,
        f: impl FnOnce(&mut Condition),
    ) -> MachineConfigNodeStatus {
        let mut s = s.clone();
        f(s.conditions.iter_mut().find(|x| x.type_ == t).unwrap());
        s
    }

    fn later() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(60).unwrap())
    }

    /// The daemon's copy after its first write of an update.
    fn prepared() -> MachineConfigNodeStatus {
        let mut s = MachineConfigNodeStatus::default();
        apply(
            &mut s,
            &Write::parent(c::UPDATE_PREPARED, Status::True, "Update Compatible."),
            &facts(),
            &now(),
        );
        s
    }

    /// What the drain controller writes while the daemon waits for its drain.
    fn drained(s: &MachineConfigNodeStatus) -> MachineConfigNodeStatus {
        let mut s = s.clone();
        for (t, st) in [
            (c::UPDATE_EXECUTED, "Unknown"),
            (c::CORDONED, "True"),
            (c::DRAINED, "True"),
        ] {
            s = changed(&s, t, |x| {
                x.status = st.into();
                x.message = format!("{t} by the controller");
                x.last_transition_time = later();
            });
        }
        s
    }

    #[test]
    fn a_phase_written_on_a_copy_behind_the_drain_controller_keeps_its_conditions() {
        let copy = prepared();
        let server = drained(&copy);
        let mut new = copy.clone();
        let w = Write::parent(c::UPDATE_EXECUTED, Status::True, "Updated the files").child(
            c::APPLIED_FILES_AND_OS,
            Status::True,
            "Applied",
        );
        assert!(apply(&mut new, &w, &facts(), &later()));
        let ops = status_patch(&copy, &new, false).expect("conditions only change in place");
        let got = patched(&object(&server, 7), ops).expect("nothing tested changed");
        for t in [c::CORDONED, c::DRAINED] {
            assert_eq!(
                got.condition(t),
                server.condition(t),
                "{t} is the controller's"
            );
        }
        for t in [
            c::UPDATE_EXECUTED,
            c::APPLIED_FILES_AND_OS,
            c::UPDATE_PREPARED,
        ] {
            assert_eq!(got.condition(t), new.condition(t), "{t} is the daemon's");
        }
        assert_eq!(
            got.observed_generation,
            Some(7),
            "the object's own generation"
        );
        assert_eq!(got.config_version, new.config_version);
    }

    #[test]
    fn a_status_kept_with_its_time_is_tested() {
        let copy = prepared();
        let mut new = copy.clone();
        let w = Write::parent(c::UPDATE_PREPARED, Status::True, "Compatible again");
        assert!(apply(&mut new, &w, &facts(), &later()));
        let ops = status_patch(&copy, &new, false).unwrap();
        let server = changed(&copy, c::UPDATE_PREPARED, |x| x.status = "Unknown".into());
        assert!(patched(&object(&server, 1), ops.clone()).is_err());
        let got = patched(&object(&copy, 1), ops).unwrap();
        assert_eq!(got.conditions, new.conditions);
    }

    #[test]
    fn the_updated_reset_applies_only_to_the_conditions_it_saw() {
        let copy = drained(&prepared());
        let mut new = copy.clone();
        let w = Write::parent(c::UPDATED, Status::True, "Node n Updated");
        assert!(apply(&mut new, &w, &facts(), &later()));
        let ops = status_patch(&copy, &new, true).unwrap();

        let got = patched(&object(&copy, 2), ops.clone()).expect("the copy is the server's");
        assert_eq!(got.conditions, new.conditions);

        // The controller uncordoned meanwhile: the reset must not leave that True.
        let server = changed(&copy, c::UNCORDONED, |x| x.status = "True".into());
        assert!(patched(&object(&server, 2), ops.clone()).is_err());

        // A condition it resets changed its message: the reset would carry a stale one.
        let server = changed(&copy, c::DRAINED, |x| x.message = "Drained again".into());
        assert!(patched(&object(&server, 2), ops).is_err());
    }

    /// The drain controller's uncordon conditions as the server holds them: the daemon's copy
    /// takes their texts from the same constants, but not their transition time.
    fn uncordoned_on_server(s: &MachineConfigNodeStatus) -> MachineConfigNodeStatus {
        let mut s = s.clone();
        for (t, reason, message) in mcn_reasons::UNCORDONED {
            s = changed(&s, t, |x| {
                x.status = "True".into();
                x.reason = reason.into();
                x.message = message.into();
                x.last_transition_time = later();
            });
        }
        s
    }

    #[test]
    fn the_reset_after_an_uncordon_answer_goes_from_the_copy_without_a_read() {
        let server = uncordoned_on_server(&drained(&prepared()));
        // The copy from the daemon's last write, behind the uncordon, then the answer seen.
        let mut copy = drained(&prepared());
        uncordoned(&mut copy);
        let mut new = copy.clone();
        let w = Write::parent(c::UPDATED, Status::True, "Node n Updated");
        assert!(apply(&mut new, &w, &facts(), &later()));
        let ops = status_patch(&copy, &new, true).unwrap();
        let got = patched(&object(&server, 2), ops.clone()).expect("the copy holds what it tests");
        let complete = got.condition(c::UPDATE_COMPLETE).unwrap();
        assert_eq!(complete.status, "False");
        assert_eq!(
            complete.message,
            format!(
                "Action during update to rendered-worker-1: {}",
                mcn_reasons::UNCORDONED[0].2
            )
        );
        assert_eq!(got.condition(c::UPDATED).unwrap().status, "True");

        // The drain controller could not write them (an uncordon that failed): the reset must
        // not stand on texts the server does not hold.
        let failed = changed(&server, c::UNCORDONED, |x| {
            x.status = "Unknown".into();
            x.message = "Error: Failed to UnCordon node".into();
        });
        assert!(patched(&object(&failed, 2), ops).is_err());
    }

    #[test]
    fn an_added_or_moved_condition_needs_the_whole_status() {
        let empty = MachineConfigNodeStatus::default();
        assert_eq!(status_patch(&empty, &prepared(), false), None);
        let copy = prepared();
        let mut moved = copy.clone();
        moved.conditions.swap(0, 1);
        assert_eq!(status_patch(&copy, &moved, false), None);
    }

    #[test]
    fn degraded_sets_health() {
        let mut s = MachineConfigNodeStatus::default();
        apply(&mut s, &degraded("n", Some("boom")), &facts(), &now());
        assert_eq!(s.health, "Unhealthy");
        assert_eq!(s.most_recent_error, "Node n upgrade failure. boom");
        apply(&mut s, &degraded("n", None), &facts(), &now());
        assert_eq!(s.health, "Healthy");
        assert_eq!(
            s.condition(c::NODE_DEGRADED).unwrap().message,
            "Node n upgrade succeeded"
        );
    }

    #[test]
    fn the_irreconcilable_report_rides_in_a_write_and_an_empty_one_clears_it() {
        let copy = prepared();
        let diff = IrreconcilableChangeDiff {
            field_path: "spec.config.storage.disks".into(),
            diff: "+ [{\"device\":\"/dev/vdb\"}]\n".into(),
        };
        let updated = || Write::parent(c::UPDATED, Status::True, "Node n Updated");
        let mut new = copy.clone();
        assert!(apply(
            &mut new,
            &updated().irreconcilable(Some(vec![diff.clone()])),
            &facts(),
            &later()
        ));
        assert_eq!(new.irreconcilable_changes, Some(vec![diff.clone()]));
        let ops = status_patch(&copy, &new, true).unwrap();
        let got = patched(&object(&copy, 2), ops).unwrap();
        assert_eq!(got.irreconcilable_changes, Some(vec![diff]));

        // The same report again is no change; a write that does not say leaves it alone.
        let mut again = new.clone();
        assert!(!apply(
            &mut again,
            &updated().irreconcilable(new.irreconcilable_changes.clone()),
            &facts(),
            &later()
        ));
        let mut silent = new.clone();
        apply(
            &mut silent,
            &Write::parent(c::UPDATE_PREPARED, Status::True, "p"),
            &facts(),
            &later(),
        );
        assert!(silent.irreconcilable_changes.is_some());

        // Nothing differs any more: the field goes.
        let mut cleared = new.clone();
        assert!(apply(
            &mut cleared,
            &updated().irreconcilable(Some(vec![])),
            &facts(),
            &later()
        ));
        assert_eq!(cleared.irreconcilable_changes, None);
        let ops = status_patch(&new, &cleared, true).unwrap();
        assert!(
            ops.iter()
                .any(|o| o["op"] == "remove" && o["path"] == "/status/irreconcilableChanges"),
            "{ops:?}"
        );
        let got = patched(&object(&new, 2), ops).unwrap();
        assert_eq!(got.irreconcilable_changes, None);
    }
}
