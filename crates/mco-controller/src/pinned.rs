//! The pinned-image-set controller: each pool's `spec.pinnedImageSets`, and what the node
//! controller needs to report the sets in the pool's status.
//!
//! For every pool whose `machineConfigSelector` is not empty, the pool lists the PinnedImageSets
//! whose labels that selector matches, sorted by name ([`mco_rollout::pinned::pool_sets`]); the
//! list replaces the pool's, and none is no field. It is written by a merge patch of that field
//! alone, only when it differs. A pool's spec change, a set's change and the resync run it.
//!
//! The node controller writes the pool's `poolSynchronizersStatus` and `PinnedImageSetsDegraded`
//! in the status write it makes anyway ([`crate::rollout`]). For that it reads here
//! whether each node's MachineConfigNode has every set it reports current ([`McnTally`], kept
//! from the MachineConfigNode watch) and why a pool's list could not be written
//! ([`Pinned::failure`]). It is woken for a pool only when one of those changes: a
//! MachineConfigNode's status changes many times in an update, and its sets' part rarely.
//!
//! The PinnedImageSet CRD (OpenShift 4.19 and newer) may be missing. The kind is then looked up
//! again every other resync, quietly after one line at info, and pools are given no set.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use mco_api::{MachineConfigNode, MachineConfigPool, PinnedImageSet};
use mco_rollout::pinned;
use serde_json::json;

use crate::Error;
use crate::ctx::Ctx;

/// The field manager of the pool spec writes.
pub const FIELD_MANAGER: &str = "machine-config-controller";

const UNKNOWN: u8 = 0;
const SERVED: u8 = 1;
const ABSENT: u8 = 2;

/// What the controllers share about pinned image sets.
pub struct Pinned {
    sets: Store<PinnedImageSet>,
    /// [`UNKNOWN`] until the kind is found served and listed ([`SERVED`]) or not served
    /// ([`ABSENT`]).
    state: AtomicU8,
    /// Per pool, why its list could not be written.
    failures: Mutex<HashMap<String, String>>,
    tally: Mutex<McnTally>,
    /// Pools whose PinnedImageSets status may have changed, for the node controller; `""`
    /// stands for every pool.
    wake: UnboundedSender<String>,
}

impl Pinned {
    pub fn new(sets: Store<PinnedImageSet>, wake: UnboundedSender<String>) -> Self {
        Self {
            sets,
            state: AtomicU8::new(UNKNOWN),
            failures: Mutex::default(),
            tally: Mutex::default(),
            wake,
        }
    }

    /// Every set, or `None` while it is not known yet whether the kind is served. Where it is
    /// not, there is none.
    pub fn sets(&self) -> Option<Vec<Arc<PinnedImageSet>>> {
        match self.state.load(Ordering::Acquire) {
            SERVED => Some(self.sets.state()),
            ABSENT => Some(vec![]),
            _ => None,
        }
    }

    /// Why the pool's list could not be written, while that lasts.
    pub fn failure(&self, pool: &str) -> Option<String> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.is_empty() {
            return None;
        }
        failures.get(pool).cloned()
    }

    /// Records the outcome of writing the pool's list; the node controller is woken for the
    /// pool when it changes.
    fn record(&self, pool: &str, failure: Option<String>) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let changed = match failure {
            Some(f) => failures.insert(pool.to_string(), f.clone()) != Some(f),
            None => failures.remove(pool).is_some(),
        };
        if changed {
            let _ = self.wake.unbounded_send(pool.to_string());
        }
    }

    /// How many of `nodes` have a MachineConfigNode with every set it reports current.
    pub fn updated_among<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) -> usize {
        let tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        nodes.into_iter().filter(|n| tally.updated(n)).count()
    }

    /// Takes a MachineConfigNode watch event into the tally, waking the node controller for
    /// the pools whose count it moves.
    pub fn observe_mcn(&self, event: &watcher::Event<MachineConfigNode>) {
        let wake = self
            .tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(event);
        for pool in wake {
            let _ = self.wake.unbounded_send(pool);
        }
    }
}

/// Per MachineConfigNode, whether every set it reports is current
/// ([`pinned::mcn_updated`]), kept from the watch's events.
#[derive(Default)]
pub struct McnTally {
    updated: HashMap<String, bool>,
    /// During a relist: the objects seen so far, and the pools to wake at its end.
    relist: Option<(HashSet<String>, BTreeSet<String>)>,
}

impl McnTally {
    /// Whether the node's MachineConfigNode exists and counts as updated.
    pub fn updated(&self, node: &str) -> bool {
        self.updated.get(node).copied().unwrap_or(false)
    }

    /// Takes one event; returns the pools whose count it changed (`""`: every pool). A relist
    /// returns them once, at its end.
    pub fn apply(&mut self, event: &watcher::Event<MachineConfigNode>) -> Vec<String> {
        use watcher::Event::*;
        let pool_of = |m: &MachineConfigNode| m.spec.pool.name.clone();
        match event {
            Apply(m) | InitApply(m) => {
                let name = m.name_any();
                let now = pinned::mcn_updated(m);
                let moved = self.updated.insert(name.clone(), now) != Some(now);
                match (&mut self.relist, event) {
                    (Some((seen, wake)), InitApply(_)) => {
                        seen.insert(name);
                        if moved {
                            wake.insert(pool_of(m));
                        }
                        vec![]
                    }
                    _ if moved => vec![pool_of(m)],
                    _ => vec![],
                }
            }
            Delete(m) => match self.updated.remove(&m.name_any()) {
                Some(_) => vec![pool_of(m)],
                None => vec![],
            },
            Init => {
                self.relist = Some(Default::default());
                vec![]
            }
            InitDone => {
                let Some((seen, mut wake)) = self.relist.take() else {
                    return vec![];
                };
                let before = self.updated.len();
                self.updated.retain(|name, _| seen.contains(name));
                if self.updated.len() != before {
                    // Gone while the watch was down; their pools are not known here.
                    wake.insert(String::new());
                }
                wake.into_iter().collect()
            }
        }
    }
}

/// Keeps `writer`'s store of PinnedImageSets, told through `changed` after each change. While
/// the kind is not served, the store is empty and the kind is looked up again every `retry`.
pub async fn watch_sets(
    api: Api<PinnedImageSet>,
    writer: reflector::store::Writer<PinnedImageSet>,
    pinned: Arc<Pinned>,
    changed: UnboundedSender<()>,
    retry: Duration,
) {
    use mco_api::watch::optional::Seen;
    mco_api::watch::optional::watch(
        api,
        writer,
        "PinnedImageSet",
        "pools get no pinned image sets (its CRD comes with OpenShift 4.19)",
        retry,
        |seen| {
            let wake = match seen {
                Seen::Absent => pinned.state.swap(ABSENT, Ordering::AcqRel) != ABSENT,
                Seen::Listed => {
                    pinned.state.store(SERVED, Ordering::Release);
                    true
                }
                Seen::Changed => true,
            };
            if wake {
                let _ = changed.unbounded_send(());
            }
        },
    )
    .await;
}

/// Writes the pool's `spec.pinnedImageSets` when it differs from the sets its selector matches.
pub async fn reconcile(pool: Arc<MachineConfigPool>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let done = Ok(Action::requeue(ctx.config.resync));
    if pool.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Until the sets are listed, an empty store would clear every pool's list.
    let Some(sets) = ctx.pinned.sets() else {
        return done;
    };
    let name = pool.name_any();
    let want = match pinned::pool_sets(&pool, &sets) {
        Ok(Some(want)) => want,
        // An empty selector: left alone. An invalid one: the node controller reads that from
        // the pool's spec.
        Ok(None) | Err(_) => {
            ctx.pinned.record(&name, None);
            return done;
        }
    };
    if want == pool.spec.pinned_image_sets {
        ctx.pinned.record(&name, None);
        return done;
    }
    let value = if want.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::to_value(&want)?
    };
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let api: Api<MachineConfigPool> = Api::all(ctx.client.clone());
    match api
        .patch(
            &name,
            &params,
            &Patch::Merge(&json!({"spec": {"pinnedImageSets": value}})),
        )
        .await
    {
        Ok(_) => {
            let listed: Vec<&str> = want.iter().map(|s| s.name.as_str()).collect();
            tracing::info!(pool = %name, sets = ?listed, "pinned image sets");
            ctx.pinned.record(&name, None);
            done
        }
        Err(e) if mco_api::watch::optional::not_served(&e) => Ok(Action::await_change()),
        Err(e) => {
            let message = pinned::degraded_message(&name, &e.to_string());
            ctx.pinned.record(&name, Some(message));
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn mcn(name: &str, pool: &str, sets: serde_json::Value) -> MachineConfigNode {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigNode",
            "metadata": {"name": name},
            "spec": {"pool": {"name": pool}, "configVersion": {"desired": "r"}},
            "status": {"pinnedImageSets": sets},
        }))
        .unwrap()
    }

    fn current(name: &str, pool: &str) -> MachineConfigNode {
        mcn(
            name,
            pool,
            json!([{"name": "s", "desiredGeneration": 1, "currentGeneration": 1}]),
        )
    }

    fn lagging(name: &str, pool: &str) -> MachineConfigNode {
        mcn(
            name,
            pool,
            json!([{"name": "s", "desiredGeneration": 2, "currentGeneration": 1}]),
        )
    }

    #[test]
    fn the_tally_wakes_a_pool_only_when_a_nodes_count_moves() {
        use watcher::Event::*;
        let mut t = McnTally::default();
        // A new object counts (or not): its pool's count moved.
        assert_eq!(t.apply(&Apply(current("a", "worker"))), ["worker"]);
        assert_eq!(t.apply(&Apply(lagging("b", "infra"))), ["infra"]);
        assert!(t.updated("a") && !t.updated("b") && !t.updated("nobody"));
        // The daemon's other status writes: no wake.
        assert!(t.apply(&Apply(current("a", "worker"))).is_empty());
        assert!(t.apply(&Apply(lagging("b", "infra"))).is_empty());
        // Sets current now: a wake.
        assert_eq!(t.apply(&Apply(current("b", "infra"))), ["infra"]);
        assert_eq!(t.apply(&Apply(lagging("a", "worker"))), ["worker"]);
        // A deletion.
        assert_eq!(t.apply(&Delete(lagging("a", "worker"))), ["worker"]);
        assert!(!t.updated("a"));
        assert!(t.apply(&Delete(lagging("a", "worker"))).is_empty());
    }

    #[test]
    fn a_relist_wakes_once_at_its_end_and_forgets_what_is_gone() {
        use watcher::Event::*;
        let mut t = McnTally::default();
        t.apply(&Apply(current("a", "worker")));
        t.apply(&Apply(current("b", "worker")));
        t.apply(&Apply(current("c", "infra")));
        // Relisted: a unchanged, b lagging, c gone, d new.
        assert!(t.apply(&Init).is_empty());
        assert!(t.apply(&InitApply(current("a", "worker"))).is_empty());
        assert!(t.apply(&InitApply(lagging("b", "worker"))).is_empty());
        assert!(t.apply(&InitApply(current("d", "master"))).is_empty());
        let mut woken = t.apply(&InitDone);
        woken.sort();
        assert_eq!(woken, ["", "master", "worker"]);
        assert!(t.updated("a") && !t.updated("b") && !t.updated("c") && t.updated("d"));
        // A relist that changes nothing wakes nobody.
        t.apply(&Init);
        for m in [
            current("a", "worker"),
            lagging("b", "worker"),
            current("d", "master"),
        ] {
            t.apply(&InitApply(m));
        }
        assert!(t.apply(&InitDone).is_empty());
    }

    #[test]
    fn counted_nodes_are_those_with_every_set_current() {
        let (tx, _rx) = futures::channel::mpsc::unbounded();
        let (store, _w) = reflector::store::<PinnedImageSet>();
        let p = Pinned::new(store, tx);
        p.observe_mcn(&watcher::Event::Apply(current("a", "worker")));
        p.observe_mcn(&watcher::Event::Apply(lagging("b", "worker")));
        p.observe_mcn(&watcher::Event::Apply(mcn("c", "worker", json!([]))));
        // "d" has no MachineConfigNode yet: not counted.
        assert_eq!(p.updated_among(["a", "b", "c", "d"]), 2);
        assert_eq!(p.updated_among(["b"]), 0);
    }

    #[test]
    fn a_failure_wakes_the_pool_when_it_comes_and_when_it_goes() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let (store, _w) = reflector::store::<PinnedImageSet>();
        let p = Pinned::new(store, tx);
        let mut woken = || {
            let mut out = vec![];
            while let Ok(pool) = rx.try_recv() {
                out.push(pool);
            }
            out
        };
        p.record("worker", None);
        assert!(woken().is_empty());
        p.record("worker", Some("refused".into()));
        p.record("worker", Some("refused".into()));
        assert_eq!(woken(), ["worker"]);
        assert_eq!(p.failure("worker").as_deref(), Some("refused"));
        assert_eq!(p.failure("master"), None);
        p.record("worker", None);
        assert_eq!(woken(), ["worker"]);
        assert_eq!(p.failure("worker"), None);
    }

    #[test]
    fn sets_are_unknown_until_listed_and_none_where_not_served() {
        let (tx, _rx) = futures::channel::mpsc::unbounded();
        let (store, _w) = reflector::store::<PinnedImageSet>();
        let p = Pinned::new(store, tx);
        assert!(p.sets().is_none());
        p.state.store(ABSENT, Ordering::Release);
        assert_eq!(p.sets().map(|s| s.len()), Some(0));
    }
}
