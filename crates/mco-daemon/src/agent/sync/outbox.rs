//! The outbox of status writes: node annotations, MachineConfigNode conditions and events.
//! Phases and annotation changes that another write follows at once are held and ride in that
//! write, and a refused write puts them back, so an update costs a few round trips, not one
//! per phase.
//!
//! What rides with what: "needs an update" and Prepared with the next phase; Applying with
//! Applied when only files change (an OS change is written as Applying on its own, since it
//! takes minutes on a host); Applied with Rebooting; Rebooted and Resumed with the uncordon
//! request; `Working` with the drain request, and the `post-config-action` clear with the
//! uncordon request. Every sync ends by writing what is still held, so the phases reach the
//! MachineConfigNode in order and none is lost. The phases held for a drain or uncordon
//! request go to the MCN at the same moment as the request goes to the Node, and the answer is
//! awaited only once both are in: the drain controller writes only its own conditions, so
//! neither write can undo the other. A reboot update costs the daemon 4 MCN writes (Prepared,
//! Rebooting, Resumed, Updated) and 4 Node writes (the drain request, Rebooting, the uncordon
//! request, Done).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use mco_api::constants::{annotations as ann, drain, mcn_conditions as c, states};
use mco_render::actions::PostConfigAction;
use serde_json::json;

use super::{Inner, SyncError, annotation, rv, truncate_reason};
use crate::agent::mcn::{self, NodeFacts, Status, Write};
use crate::engine::{NodeEvent, Phase};

/// The field manager of every daemon write.
pub const FIELD_MANAGER: &str = "machine-config-daemon";

fn human(d: Duration) -> String {
    match d.as_secs() {
        3600 => "1 hour".into(),
        s if s % 60 == 0 && s > 0 => format!("{} minutes", s / 60),
        _ => format!("{:?}", d),
    }
}

/// The MachineConfigNode write for an engine phase.
pub fn phase_write(phase: &Phase) -> Option<Write> {
    Some(match phase {
        Phase::PrepareFailed { message } => {
            Write::parent(c::UPDATE_PREPARED, Status::Unknown, message.clone())
        }
        Phase::Prepared { message, .. } => Write::parent(
            c::UPDATE_PREPARED,
            Status::True,
            message.clone(),
        )
        .child(c::UPDATE_COMPATIBLE, Status::True, message.clone()),
        Phase::DrainNotRequired => {
            let m = "Node Drain Not required for this update.";
            Write::parent(c::UPDATE_EXECUTED, Status::Unknown, m).child(
                c::DRAINED,
                Status::False,
                m,
            )
        }
        Phase::Applying { message, .. } => Write::parent(
            c::UPDATE_EXECUTED,
            Status::Unknown,
            "Updating the Files and OS on disk as a part of the in progress phase",
        )
        .child(c::APPLIED_FILES_AND_OS, Status::Unknown, message.clone()),
        Phase::Applied { message, .. } => Write::parent(
            c::UPDATE_EXECUTED,
            Status::True,
            "Updated the Files and OS on disk as a part of the in progress phase",
        )
        .child(c::APPLIED_FILES_AND_OS, Status::True, message.clone()),
        Phase::Rebooting { .. } => {
            let m = "Upgrade requires a reboot.";
            Write::parent(c::UPDATE_POST_ACTION_COMPLETE, Status::Unknown, m).child(
                c::REBOOTED_NODE,
                Status::Unknown,
                m,
            )
        }
        Phase::PostActionComplete { actions } => post_action_write(actions),
    })
}

/// The most phases held for a MachineConfigNode that does not exist yet; the oldest go first.
pub(super) const MAX_HELD: usize = 64;

/// What became of a MachineConfigNode status write.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    Yes,
    /// The node has no MachineConfigNode yet.
    NoMachineConfigNode,
}

/// What stays held when a write finds no MachineConfigNode: `held`, then `ws`, with repeats
/// merged (each retry of an idle node repeats its `Updated` write) and at most the newest
/// [`MAX_HELD`].
fn still_held(mut held: Vec<Write>, ws: &[Write]) -> Vec<Write> {
    held.extend_from_slice(ws);
    held.dedup();
    let excess = held.len().saturating_sub(MAX_HELD);
    held.drain(..excess);
    held
}

/// Empties a held list, keeping its allocation out of the way.
fn take<T>(m: &Mutex<Vec<T>>) -> Vec<T> {
    m.lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default()
}

/// Puts back what a failed write took, ahead of anything held since.
fn restore<T>(m: &Mutex<Vec<T>>, mut held: Vec<T>) {
    if held.is_empty() {
        return;
    }
    if let Ok(mut v) = m.lock() {
        held.append(&mut v);
        *v = held;
    }
}

fn is_crio_reload(a: &PostConfigAction) -> bool {
    matches!(a, PostConfigAction::Special)
        || matches!(a, PostConfigAction::Reload(u) if u == "crio.service")
}

/// The `UpdatePostActionComplete` write: every action taken, in order, in upstream's words
/// (`Node has reloaded service <s>`, `Node has reloaded CRIO`); a restart, which upstream does
/// not record in the MachineConfigNode, reads `Node has restarted service <s>`.
fn post_action_write(actions: &[PostConfigAction]) -> Write {
    let mut parts: Vec<String> = Vec::new();
    for a in actions {
        let part = match a {
            a if is_crio_reload(a) => "Node has reloaded CRIO".to_owned(),
            PostConfigAction::Reload(u) => format!("Node has reloaded service {u}"),
            PostConfigAction::Restart(u) => format!("Node has restarted service {u}"),
            PostConfigAction::DaemonReload => "Node has reloaded service daemon-reload".to_owned(),
            _ => continue,
        };
        if !parts.contains(&part) {
            parts.push(part);
        }
    }
    if parts.is_empty() {
        return Write::parent(
            c::UPDATE_POST_ACTION_COMPLETE,
            Status::True,
            "Changes do not require a reboot",
        )
        .reason("None");
    }
    let m = parts.join(", ");
    let w = Write::parent(c::UPDATE_POST_ACTION_COMPLETE, Status::True, m.clone());
    if actions.iter().any(is_crio_reload) {
        return w.child(c::RELOADED_CRIO, Status::True, m);
    }
    w
}

/// The events of a rebootless update, one per action taken, with upstream's reasons and
/// messages: `SkipReboot`, `ServiceReload`, `ServiceRestart`.
pub fn post_action_events(actions: &[PostConfigAction]) -> Vec<(&'static str, String)> {
    const PREFIX: &str = "Config changes do not require reboot.";
    actions
        .iter()
        .filter_map(|a| {
            Some(match a {
                PostConfigAction::None => ("SkipReboot", PREFIX.to_owned()),
                PostConfigAction::Reload(u) => (
                    "ServiceReload",
                    format!("{PREFIX} Service {u} was reloaded."),
                ),
                PostConfigAction::Special => (
                    "ServiceReload",
                    format!("{PREFIX} Service crio.service was reloaded."),
                ),
                PostConfigAction::DaemonReload => (
                    "ServiceReload",
                    format!("{PREFIX} Service daemon-reload was reloaded."),
                ),
                PostConfigAction::Restart(u) => (
                    "ServiceRestart",
                    format!("{PREFIX} Service {u} was restarted."),
                ),
                PostConfigAction::Drain | PostConfigAction::Reboot => return None,
            })
        })
        .collect()
}

impl Inner {
    /// Queues a core/v1 Event on this Node; best effort, as upstream's recorder is, and off
    /// the update's path ([`crate::agent::events`]).
    pub(super) fn event(&self, event: NodeEvent) {
        let uid = self.known_node().and_then(|n| n.metadata.uid.clone());
        self.events.emit(&event, uid.as_deref());
    }

    /// Merge-patches annotations, after any held ones, and returns the Node as written.
    pub(super) async fn annotate(&self, pairs: &[(&str, Option<&str>)]) -> Result<Node, SyncError> {
        let held = take(&self.annotations_pending);
        let mut map = serde_json::Map::new();
        let held_pairs = held.iter().map(|(k, v)| (*k, v.as_deref()));
        for (k, v) in held_pairs.chain(pairs.iter().copied()) {
            map.insert(k.into(), v.map(|v| json!(v)).unwrap_or(json!(null)));
        }
        let patch = json!({"metadata": {"annotations": map}});
        let node = match self
            .nodes
            .patch(
                &self.opts.node,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(n) => n,
            Err(e) => {
                restore(&self.annotations_pending, held);
                return Err(e.into());
            }
        };
        if let Ok(mut w) = self.written.lock() {
            *w = Some(Arc::new(node.clone()));
        }
        Ok(node)
    }

    /// Writes one MCN phase. A missing MCN (created by the controller) is logged and skipped.
    ///
    /// An update writes several phases in a row: each write starts from the MCN our previous
    /// write returned, instead of reading it again. The Node facts come from the newest Node
    /// we hold (the watch keeps it current); it is read only when we hold none.
    /// From a held copy the write is a JSON patch that tests what it relies on
    /// ([`mcn::status_patch`]): the controller's writes in between (its spec, the drain
    /// conditions) leave it valid, and a failed test sends it to read. A read copy, or one a
    /// patch cannot express, is written whole, conditional on its resourceVersion. An uncordon
    /// answer sets on the copy the conditions the drain controller wrote before it (see
    /// [`Inner::answered`]).
    pub(super) async fn mcn(&self, w: &Write) -> Result<(), SyncError> {
        self.mcn_all(std::slice::from_ref(w)).await
    }

    /// Holds `w` for the next MCN write, which the caller knows follows at once. Whatever path
    /// the sync takes, it ends with [`Inner::flush`], so a held phase is never lost.
    pub(super) fn mcn_later(&self, w: Write) {
        if let Ok(mut p) = self.mcn_pending.lock() {
            p.push(w);
        }
    }

    /// Holds an annotation change for the next Node write (see [`Inner::mcn_later`]).
    pub(super) fn annotate_later(&self, key: &'static str, value: Option<&str>) {
        if let Ok(mut p) = self.annotations_pending.lock() {
            p.push((key, value.map(str::to_string)));
        }
    }

    /// Writes the held annotation changes, if any.
    pub(super) async fn flush_annotations(&self) -> Result<(), SyncError> {
        if !self.annotations_pending.lock().is_ok_and(|p| p.is_empty()) {
            self.annotate(&[]).await?;
        }
        Ok(())
    }

    /// Writes the held phases, if any.
    pub(super) async fn flush_mcn(&self) -> Result<(), SyncError> {
        if !self.mcn_pending.lock().is_ok_and(|p| p.is_empty()) {
            self.mcn_all(&[]).await?;
        }
        Ok(())
    }

    /// Writes whatever is still held.
    pub(super) async fn flush(&self) -> Result<(), SyncError> {
        self.flush_annotations().await?;
        self.flush_mcn().await
    }

    /// Writes the held phases and then `ws`, in order, as one MCN status write. Without a
    /// MachineConfigNode to write to (the controller makes it, and a booting node can be
    /// first), all of them stay held for the next write: the sync loop retries while any is.
    pub(super) async fn mcn_all(&self, ws: &[Write]) -> Result<(), SyncError> {
        let held = take(&self.mcn_pending);
        match self.write_mcn(&held, ws).await {
            Ok(Written::Yes) => Ok(()),
            Ok(Written::NoMachineConfigNode) => {
                restore(&self.mcn_pending, still_held(held, ws));
                Ok(())
            }
            Err(e) => {
                restore(&self.mcn_pending, held);
                Err(e)
            }
        }
    }

    /// Writes `w` alone, now, leaving the held phases to the sync loop that holds them: for
    /// the workers beside it ([`super::pinned`]). No MachineConfigNode yet is an error, so the
    /// worker tries again later.
    pub(super) async fn mcn_now(&self, w: &Write) -> Result<(), SyncError> {
        match self.write_mcn(&[], std::slice::from_ref(w)).await? {
            Written::Yes => Ok(()),
            Written::NoMachineConfigNode => Err(SyncError::Pinned(format!(
                "no MachineConfigNode {} yet",
                self.opts.node
            ))),
        }
    }

    /// Whether phases are held that a write has yet to carry.
    pub(super) fn mcn_held(&self) -> bool {
        self.mcn_pending.lock().is_ok_and(|p| !p.is_empty())
    }

    async fn write_mcn(&self, held: &[Write], ws: &[Write]) -> Result<Written, SyncError> {
        let mut remembered = self.mcn_written.lock().ok().and_then(|mut m| m.take());
        // A patch tests all it relies on, so it suits a copy just read as well as a remembered
        // one, at a fraction of a whole-status write's cost to the server. Should one be
        // refused on a copy just read, the whole status is written instead.
        let mut patch_fresh = true;
        for _ in 0..5 {
            let (obj, from_memory) = match remembered.take() {
                Some(obj) => (obj, true),
                None => match self.mcns.get_opt(&self.opts.node).await? {
                    Some(obj) => (obj, false),
                    None => {
                        tracing::info!(node = %self.opts.node, "no MachineConfigNode yet; status held");
                        return Ok(Written::NoMachineConfigNode);
                    }
                },
            };
            let node = match self.known_node() {
                Some(n) => n,
                None => Arc::new(self.node().await?),
            };
            let facts = NodeFacts {
                current: annotation(&node, ann::CURRENT_CONFIG),
                desired: annotation(&node, ann::DESIRED_CONFIG),
                generation: obj.metadata.generation,
            };
            // The controller moves the MCN's spec (and generation) when it moves the node's
            // desiredConfig: a remembered copy from before that is behind.
            let spec_moved = from_memory
                && !facts.desired.is_empty()
                && obj.spec.config_version.desired != facts.desired;
            let base = obj.status.clone().unwrap_or_default();
            let mut status = base.clone();
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let mut changed = false;
            let mut reset = false;
            for w in held.iter().chain(ws) {
                changed |= mcn::apply(&mut status, w, &facts, &now);
                reset |= w.parent == c::UPDATED;
            }
            if !changed {
                if spec_moved {
                    // Only a read can tell whether its observedGeneration moved.
                    continue;
                }
                // Nothing to write. The copy is kept for the next write: a read one is the
                // freshest there is, and a remembered one can only be behind the controller,
                // which patches leave valid.
                if let Ok(mut m) = self.mcn_written.lock() {
                    *m = Some(obj);
                }
                return Ok(Written::Yes);
            }
            if (from_memory || patch_fresh)
                && let Some(ops) = mcn::status_patch(&base, &status, reset)
            {
                let pp = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                match self.mcns.json_patch_status(&self.opts.node, &pp, ops).await {
                    Ok(written) => {
                        if let Ok(mut m) = self.mcn_written.lock() {
                            *m = Some(written);
                        }
                        return Ok(Written::Yes);
                    }
                    // A failed test: the copy was behind on something the write relies on.
                    Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => {
                        patch_fresh &= from_memory;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if spec_moved {
                // A whole-status write on it would only meet a 409.
                continue;
            }
            // The whole status, conditional on the base's resourceVersion, as upstream's
            // `UpdateStatus`: a server-side apply of the same content cost the server several
            // times as much, and the precondition already settles who wins.
            let mut body = obj.clone();
            body.metadata.managed_fields = None;
            body.status = Some(status);
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match self.mcns.replace_status(&self.opts.node, &pp, &body).await {
                Ok(written) => {
                    if let Ok(mut m) = self.mcn_written.lock() {
                        *m = Some(written);
                    }
                    return Ok(Written::Yes);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SyncError::Timeout(format!(
            "MachineConfigNode {} kept changing; status not written",
            self.opts.node
        )))
    }

    /// The drain controller writes its uncordon conditions beside its answer, and the
    /// `Updated` reset that follows tests every condition it changes or leaves False: the copy
    /// our last status write returned takes those conditions as the drain controller writes
    /// them, so that the reset is not refused and read again. Should they differ on the server
    /// (not landed yet, or not written at all), the test fails and the daemon reads; the drain
    /// controller writes them only while `Updated` is not True, so they never follow. A
    /// drain answer changes nothing in the copy: the phases after it replace only the daemon's
    /// own conditions.
    pub(super) fn answered(&self, value: &str) {
        if value.starts_with(drain::UNCORDON_PREFIX)
            && let Ok(mut m) = self.mcn_written.lock()
            && let Some(status) = m.as_mut().and_then(|o| o.status.as_mut())
        {
            mcn::uncordoned(status);
        }
    }

    /// Sets `desiredDrain` and waits for the drain controller's `lastAppliedDrain`.
    ///
    /// The node watch wakes the wait as soon as the answer is written. A watched Node counts
    /// only when it is at least as new as our own write (by resourceVersion), so an old event
    /// from a lagging watch cannot answer a repeated request; otherwise it is confirmed with a
    /// GET. A GET every `poll_interval` remains, so a broken watch only slows the wait down.
    pub(super) async fn request_drain(&self, value: &str, what: &str) -> Result<(), SyncError> {
        // The watched value is checked before every wait, so an answer that arrives between
        // the write and the wait is not missed.
        let mut watched = self.watched.clone();
        let mut watch_open = true;
        // Writing the request returns the Node as it is now: no read first. A request already
        // made leaves the Node unchanged. The phases held for it go to the MCN alongside: the
        // drain controller writes only its own conditions there, so neither write can undo the
        // other, and the answer is awaited only once both are in.
        let (written, held) = futures::future::join(
            self.annotate(&[(ann::DESIRED_DRAIN, Some(value))]),
            self.flush_mcn(),
        )
        .await;
        let written = written?;
        held?;
        if annotation(&written, ann::LAST_APPLIED_DRAIN) == value {
            tracing::info!("{what} is already completed on this node");
            return Ok(());
        }
        if what == "drain" {
            // Upstream's daemon says so as it asks the drain controller.
            self.event(NodeEvent::normal("Cordon", "Cordoned node to apply update"));
            self.event(NodeEvent::normal(
                "Drain",
                "Draining node to update config.",
            ));
        }
        let written_rv = rv(&written);
        let deadline = Instant::now() + self.opts.drain_timeout;
        let mut next_get = Instant::now() + self.opts.poll_interval;
        let mut shutdown = self.shutdown.subscribe();
        loop {
            if *shutdown.borrow_and_update() {
                return Err(SyncError::Shutdown);
            }
            let seen = watched.borrow_and_update().clone();
            let answered = seen
                .as_deref()
                .filter(|n| annotation(n, ann::LAST_APPLIED_DRAIN) == value);
            if answered.is_some_and(|n| matches!((rv(n), written_rv), (Some(a), Some(b)) if a >= b))
            {
                self.answered(value);
                return Ok(());
            }
            if answered.is_some() || Instant::now() >= next_get {
                if annotation(&self.node().await?, ann::LAST_APPLIED_DRAIN) == value {
                    self.answered(value);
                    return Ok(());
                }
                next_get = Instant::now() + self.opts.poll_interval;
            }
            if Instant::now() >= deadline {
                let message = format!(
                    "failed to {what} node: {} after {}. Please see machine-config-controller logs for more information",
                    self.opts.node,
                    human(self.opts.drain_timeout)
                );
                let reason = if what == "drain" {
                    "FailedToDrain"
                } else {
                    "FailedToUncordon"
                };
                self.event(NodeEvent::warning(reason, message.clone()));
                return Err(SyncError::Timeout(message));
            }
            let wake = tokio::time::Instant::from_std(next_get.min(deadline));
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = shutdown.changed() => {}
                r = watched.changed(), if watch_open => watch_open = r.is_ok(),
            }
        }
    }

    pub(super) async fn report(&self, phase: &Phase) -> Result<(), SyncError> {
        let Some(w) = phase_write(phase) else {
            return Ok(());
        };
        match phase {
            // The drain request, or the write saying none is needed, follows at once and
            // carries it.
            Phase::Prepared { .. } => self.mcn_later(w),
            // Files alone are written in milliseconds: the Applied write follows and carries
            // it. An OS change takes minutes on a host, and the MCN says so while it lasts.
            Phase::Applying { os: false, .. } => self.mcn_later(w),
            // The Rebooting phase follows at once and carries it.
            Phase::Applied { reboot: true, .. } => self.mcn_later(w),
            Phase::Rebooting { rationale } => {
                // The update has succeeded once the reboot is requested, which is next: the
                // same write says so, rather than a write racing the reboot. A failed request
                // is written over with its error. The Node and its MCN are separate objects,
                // so the two writes go together: each is a round trip before the reboot. So
                // does the wait for the queued events, the `Reboot` one last, which the
                // reboot would otherwise take with the process. Nothing is left to hold SIGTERM
                // off for, as upstream's `reboot` says first.
                self.cancel_sigterm();
                self.event(NodeEvent::normal("Reboot", rationale.clone()));
                let degraded = mcn::degraded(self.name(), None);
                let (node, status, ()) = futures::future::join3(
                    self.annotate(&[(ann::POST_CONFIG_ACTION, Some(states::REBOOTING))]),
                    self.mcn_all(&[w, degraded]),
                    self.events.flush(super::REBOOT_FLUSH),
                )
                .await;
                node?;
                status?;
            }
            Phase::DrainNotRequired => {
                self.event(NodeEvent::normal("Drain", "Drain not required, skipping"));
                // `Working` waited for the drain request, and none comes. Separate objects:
                // the two writes go together.
                let (node, status) =
                    futures::future::join(self.flush_annotations(), self.mcn(&w)).await;
                node?;
                status?;
            }
            Phase::PostActionComplete { actions } => {
                self.mcn(&w).await?;
                for (reason, message) in post_action_events(actions) {
                    self.event(NodeEvent::normal(reason, message));
                }
            }
            _ => self.mcn(&w).await?,
        }
        Ok(())
    }

    pub(super) async fn mark_failed(&self, e: &SyncError) {
        let state = if e.is_unreconcilable() {
            states::UNRECONCILABLE
        } else {
            states::DEGRADED
        };
        let reason = truncate_reason(&e.to_string());
        tracing::error!("Marking {state} due to: {reason:?}");
        self.metrics.set_state(state, &reason);
        if let Err(w) = self
            .annotate(&[(ann::STATE, Some(state)), (ann::REASON, Some(&reason))])
            .await
        {
            tracing::error!(error = %w, "could not mark the node");
        }
        if let Err(w) = self.mcn(&mcn::degraded(self.name(), Some(&reason))).await {
            tracing::error!(error = %w, "could not write NodeDegraded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PostConfigAction as A;

    #[test]
    fn writes_held_for_a_missing_mcn_merge_repeats_and_keep_the_newest() {
        let w = |m: &str| Write::parent(c::UPDATED, crate::agent::mcn::Status::True, m);
        let held = still_held(vec![w("a"), w("b")], &[w("b"), w("b")]);
        assert_eq!(held, [w("a"), w("b")], "repeats merged, order kept");
        let many: Vec<Write> = (0..MAX_HELD + 3).map(|i| w(&i.to_string())).collect();
        let held = still_held(many, &[w("last")]);
        assert_eq!(held.len(), MAX_HELD, "held up to the limit");
        assert_eq!(held[0], w("4"), "the oldest went first");
        assert_eq!(held[MAX_HELD - 1], w("last"));
    }

    #[test]
    fn every_rebootless_action_is_recorded_in_the_mcn_and_as_an_event() {
        let actions = [A::DaemonReload, A::restart("chronyd.service")];
        let w = post_action_write(&actions);
        assert_eq!(
            w.message,
            "Node has reloaded service daemon-reload, Node has restarted service chronyd.service"
        );
        assert!(w.child.is_none());
        assert_eq!(
            post_action_events(&actions),
            vec![
                (
                    "ServiceReload",
                    "Config changes do not require reboot. Service daemon-reload was reloaded."
                        .to_owned()
                ),
                (
                    "ServiceRestart",
                    "Config changes do not require reboot. Service chronyd.service was restarted."
                        .to_owned()
                ),
            ]
        );
        let crio = post_action_write(&[A::Special]);
        assert_eq!(crio.message, "Node has reloaded CRIO");
        assert_eq!(crio.child.unwrap().0, c::RELOADED_CRIO);
        let none = post_action_write(&[A::None]);
        assert_eq!(none.reason, Some("None"));
        assert_eq!(
            post_action_events(&[A::None]),
            vec![(
                "SkipReboot",
                "Config changes do not require reboot.".to_owned()
            )]
        );
    }
}
