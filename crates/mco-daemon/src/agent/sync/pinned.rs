//! The pinned image set worker, beside the sync loop as upstream's `PinnedImageSetManager` is:
//! it watches the PinnedImageSets, works out which are for this node (the sets each pool that
//! selects the node is for, by upstream's controller rule: the pool's `machineConfigSelector`
//! matches the set's labels), pulls their images through CRI-O and pins them
//! ([`crate::engine::pinned`]), and reports each set in the MachineConfigNode's
//! `status.pinnedImageSets` with the `PinnedImageSetsProgressing` and `PinnedImageSetsDegraded`
//! conditions, in upstream's words.
//!
//! A pass runs while the watch is read: a change of the sets (or of the node's labels) stops
//! it asking CRI-O about or taking new images and kills the pulls in flight, and within about
//! a second a new pass starts from the new state, so a set deleted in the middle of its 500
//! presence checks or pulls is not worked through to the end.
//!
//! Costs: one watch per daemon start. The pools are read only while some set exists, at each
//! set change, at each change of the node's labels (signalled by the sync loop's Node watch,
//! without a request or watch of its own) and every [`RESYNC`] (a pool's selectors
//! change without an event here). A node already holding and pinning every image writes
//! nothing, so a daemon restarting after a reboot sends no status. Where the kind is not
//! served (an older cluster), the worker says so once and looks again every
//! [`ABSENT_RETRY`].

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use mco_api::pinned::{self, MachineConfigNodeStatusPinnedImageSet, PinnedImageSetSpec};
use mco_api::{MachineConfigPool, PinnedImageSet};
use tokio::time::Instant;

use super::{Inner, Labels, SyncError, blocking, due};
use crate::agent::mcn::{Status, Write};
use crate::engine::pinned::PinError;

/// The least ephemeral storage a node pins images with (upstream's
/// `MinFreeStorageAfterPrefetch`, 16Gi).
pub const MIN_STORAGE_BYTES: i64 = 16 << 30;
/// How often the pools are read again while sets exist (a pool's selectors change without a
/// set event).
pub const RESYNC: Duration = Duration::from_secs(300);
/// How long a daemon waits before looking again for a PinnedImageSet kind it was not served.
pub const ABSENT_RETRY: Duration = Duration::from_secs(600);
/// Set changes arriving this close together are worked on once.
const SETTLE: Duration = Duration::from_millis(200);
/// Upstream's limit on `lastFailedGenerationError`.
const MAX_ERROR_LEN: usize = 32768;

/// Upstream's messages and reasons.
const PROGRESSING_REASON: &str = "ImagePrefetch";
const AS_EXPECTED: &str = "AsExpected";
const FAILED_REASON: &str = "PrefetchFailed";
const COMPLETE: &str = "All pinned image sets complete";
const ALL_GOOD: &str = "All is good";
const FAILED: &str = "One or more PinnedImageSet is experiencing an error. See PinnedImageSet list for more details.";

/// Whether `node` may pull images: Ready, without disk pressure, with at least `min_bytes` of
/// allocatable ephemeral storage. Upstream's checks and messages.
pub fn check_node(node: &Node, min_bytes: i64) -> Result<(), String> {
    let name = node.name_any();
    let status = node.status.as_ref();
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if c.type_ == "Ready" && c.status != "True" {
            return Err(format!("node {name} is reporting NotReady={}", c.status));
        }
        if c.type_ == "DiskPressure" && c.status != "False" {
            return Err(format!("node {name} is reporting OutOfDisk={}", c.status));
        }
    }
    let Some(q) = status
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get("ephemeral-storage"))
    else {
        return Err(format!("node {name:?} has no ephemeral storage capacity"));
    };
    let capacity = mco_apimachinery::quantity::bytes(&q.0).unwrap_or(0);
    if capacity < min_bytes {
        return Err(format!(
            "storage available is less than minimum required capacity: {capacity}, required: {min_bytes}"
        ));
    }
    Ok(())
}

/// Whether a node may take `mine`: at most [`pinned::MAX_SETS_PER_NODE`], the most its
/// MachineConfigNode reports.
pub fn check_sets(mine: &[&PinnedImageSet]) -> Result<(), String> {
    if mine.len() > pinned::MAX_SETS_PER_NODE {
        return Err(format!(
            "{} PinnedImageSets select this node; at most {} can be pinned and reported",
            mine.len(),
            pinned::MAX_SETS_PER_NODE
        ));
    }
    Ok(())
}

/// The sets for a node with `labels`: those of every pool whose node selector matches it,
/// each once, by name.
pub fn sets_for_node<'a>(
    labels: Option<&BTreeMap<String, String>>,
    pools: &[MachineConfigPool],
    sets: &'a BTreeMap<String, PinnedImageSet>,
) -> Vec<&'a PinnedImageSet> {
    let mut mine = BTreeMap::new();
    for pool in pools {
        if mco_api::select::pool_rule_matches(pool.spec.node_selector.as_ref(), labels) {
            for s in pinned::sets_for_pool(pool, sets.values()) {
                mine.insert(s.name_any(), s);
            }
        }
    }
    mine.into_values().collect()
}

fn generation(set: &PinnedImageSet) -> i32 {
    set.metadata
        .generation
        .unwrap_or(1)
        .clamp(1, i64::from(i32::MAX)) as i32
}

/// What the worker remembers between syncs.
#[derive(Debug, Default)]
pub struct Pinned {
    /// Each set's generation as last pulled and pinned here.
    pub current: BTreeMap<String, i32>,
    /// Whether this node may hold pins or report sets from before: a sync with no set at all
    /// is then still worth one look (to unpin and clear the report); `None` until the disk
    /// was asked.
    pub maybe_pinned: Option<bool>,
}

/// The `status.pinnedImageSets` entries for `mine`: what is wanted, what is pinned, and the
/// failure when there is one.
pub fn entries(
    mine: &[&PinnedImageSet],
    current: &BTreeMap<String, i32>,
    failed: Option<&str>,
) -> Vec<MachineConfigNodeStatusPinnedImageSet> {
    mine.iter()
        .map(|s| {
            let name = s.name_any();
            let desired = generation(s);
            let current = current.get(&name).copied().filter(|g| *g <= desired);
            MachineConfigNodeStatusPinnedImageSet {
                current_generation: current,
                desired_generation: Some(desired),
                last_failed_generation: failed.map(|_| desired),
                last_failed_generation_error: failed
                    .map(|e| e.chars().take(MAX_ERROR_LEN).collect())
                    .unwrap_or_default(),
                name,
            }
        })
        .collect()
}

pub(super) async fn run(inner: Arc<Inner>) {
    loop {
        if serve(&inner).await.is_break() {
            return;
        }
        tokio::time::sleep(ABSENT_RETRY).await;
    }
}

/// What a watch event did to the sets.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// A set came, went, or changed in what a pass reads of it.
    Changed,
    /// A relist ended with the same sets.
    Relisted,
    /// Nothing a pass reads changed (a relist in progress, a status write, a transient error).
    Nothing,
    /// The watch ended.
    Ended,
    /// The kind is not served.
    NotServed,
}

/// What a pass reads of a set: its labels (the pools it is for), its images and its generation
/// (what is reported).
fn read_by_pass(
    s: &PinnedImageSet,
) -> (
    Option<&BTreeMap<String, String>>,
    &PinnedImageSetSpec,
    Option<i64>,
) {
    (s.metadata.labels.as_ref(), &s.spec, s.metadata.generation)
}

/// Applies one watch event to `sets`; `listing` holds a relist in progress.
fn take(
    ev: Option<watcher::Result<watcher::Event<PinnedImageSet>>>,
    sets: &mut BTreeMap<String, PinnedImageSet>,
    listing: &mut BTreeMap<String, PinnedImageSet>,
) -> Seen {
    match ev {
        None => Seen::Ended,
        Some(Ok(watcher::Event::Init)) => {
            listing.clear();
            Seen::Nothing
        }
        Some(Ok(watcher::Event::InitApply(s))) => {
            listing.insert(s.name_any(), s);
            Seen::Nothing
        }
        Some(Ok(watcher::Event::InitDone)) => {
            let same = sets.len() == listing.len()
                && sets
                    .iter()
                    .zip(listing.iter())
                    .all(|((a, x), (b, y))| a == b && read_by_pass(x) == read_by_pass(y));
            *sets = std::mem::take(listing);
            if same { Seen::Relisted } else { Seen::Changed }
        }
        Some(Ok(watcher::Event::Apply(s))) => {
            let changed = sets
                .get(&s.name_any())
                .is_none_or(|old| read_by_pass(old) != read_by_pass(&s));
            sets.insert(s.name_any(), s);
            if changed {
                Seen::Changed
            } else {
                Seen::Nothing
            }
        }
        Some(Ok(watcher::Event::Delete(s))) => match sets.remove(&s.name_any()) {
            Some(_) => Seen::Changed,
            None => Seen::Nothing,
        },
        Some(Err(e)) if not_served(&e) => Seen::NotServed,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "PinnedImageSet watch");
            Seen::Nothing
        }
    }
}

/// Whether the node's labels moved from those a pass worked with (`None`: no copy of the node
/// was held): another pool's sets may now be the node's.
fn labels_moved(pass: Option<&Labels>, now: Option<&Labels>) -> bool {
    now.is_some() && now != pass
}

/// Watches and syncs until the watch ends (`Break`) or the kind turns out not to be served
/// (`Continue`: look again later). The watch is read while a pass runs: a change of the sets,
/// or of the node's labels, stops the pass taking new images and kills the pulls in flight,
/// and a new pass starts from the new state.
async fn serve(inner: &Arc<Inner>) -> ControlFlow<()> {
    let mut events = std::pin::pin!(
        mco_api::watch::watch(inner.pinned_sets.clone(), watcher::Config::default())
            .default_backoff()
    );
    let mut sets: BTreeMap<String, PinnedImageSet> = BTreeMap::new();
    let mut listing: BTreeMap<String, PinnedImageSet> = BTreeMap::new();
    let mut state = Pinned::default();
    let mut backoff = Duration::from_secs(1);
    let mut retry_at: Option<Instant> = None;
    // The labels the last pass started with, and their changes as the sync loop's Node watch
    // sees them.
    let mut pass_labels: Option<Labels> = None;
    let mut labels = inner.labels.subscribe();
    let soon = |retry_at: &mut Option<Instant>, backoff: &mut Duration| {
        if !matches!(*retry_at, Some(t) if t <= Instant::now() + SETTLE) {
            *retry_at = Some(Instant::now() + SETTLE);
            *backoff = Duration::from_secs(1);
        }
    };
    loop {
        let due = due(retry_at);
        tokio::select! {
            ev = events.next() => match take(ev, &mut sets, &mut listing) {
                Seen::Ended => return ControlFlow::Break(()),
                Seen::NotServed => return absent(),
                Seen::Nothing => {}
                Seen::Changed | Seen::Relisted => soon(&mut retry_at, &mut backoff),
            },
            Ok(()) = labels.changed(), if !sets.is_empty() => {
                if labels_moved(pass_labels.as_ref(), labels.borrow_and_update().as_ref()) {
                    soon(&mut retry_at, &mut backoff);
                }
            }
            _ = due => {
                retry_at = None;
                pass_labels = labels.borrow_and_update().clone();
                let work = sets.clone();
                let stop = Arc::new(AtomicBool::new(false));
                let mut ended = None;
                let result = {
                    let pass = sync(inner, &work, &mut state, &stop);
                    tokio::pin!(pass);
                    loop {
                        tokio::select! {
                            r = &mut pass => break r,
                            ev = events.next(), if ended.is_none() => {
                                match take(ev, &mut sets, &mut listing) {
                                    Seen::Relisted | Seen::Nothing => {}
                                    Seen::Changed => stop.store(true, Ordering::SeqCst),
                                    Seen::Ended => {
                                        ended = Some(ControlFlow::Break(()));
                                        stop.store(true, Ordering::SeqCst);
                                    }
                                    Seen::NotServed => {
                                        ended = Some(absent());
                                        stop.store(true, Ordering::SeqCst);
                                    }
                                }
                            }
                            Ok(()) = labels.changed(), if !work.is_empty() => {
                                if labels_moved(pass_labels.as_ref(), labels.borrow_and_update().as_ref()) {
                                    stop.store(true, Ordering::SeqCst);
                                }
                            }
                        }
                    }
                };
                if let Some(flow) = ended {
                    return flow;
                }
                if stop.load(Ordering::SeqCst) {
                    // Worked on a state that is gone: start over from the new one.
                    if let Err(e) = result {
                        tracing::info!(error = %e, "pinned image sets changed during a failed pass");
                    }
                    soon(&mut retry_at, &mut backoff);
                } else {
                    match result {
                        Ok(()) => {
                            backoff = Duration::from_secs(1);
                            if !sets.is_empty() {
                                retry_at = Some(Instant::now() + RESYNC);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "pinned image sets not synced");
                            retry_at = Some(Instant::now() + backoff);
                            backoff = (backoff * 2).min(inner.opts.max_backoff);
                        }
                    }
                }
            }
        }
    }
}

/// Says once that the kind is not served, and asks to look again later.
fn absent() -> ControlFlow<()> {
    tracing::info!(
        "the PinnedImageSet kind is not served; pinned images are not managed (looking again in {} minutes)",
        ABSENT_RETRY.as_secs() / 60
    );
    ControlFlow::Continue(())
}

fn not_served(e: &watcher::Error) -> bool {
    let api = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return false,
    };
    api.code == 404
}

/// One pass: the node's sets, pulled and pinned, and the MachineConfigNode told. Once `stop`
/// is set no new image is pulled, the pulls in flight are killed and the pass ends without a
/// word: the next pass reports.
async fn sync(
    inner: &Arc<Inner>,
    sets: &BTreeMap<String, PinnedImageSet>,
    state: &mut Pinned,
    stop: &Arc<AtomicBool>,
) -> Result<(), SyncError> {
    if sets.is_empty() && state.maybe_pinned == Some(false) {
        return Ok(());
    }
    if !sets.is_empty() {
        // Until this pass ends well, whatever it pulls, pins or reports is worth a look
        // once the sets are gone.
        state.maybe_pinned = Some(true);
    }
    if sets.is_empty() && state.maybe_pinned.is_none() {
        let engine = Arc::clone(&inner.engine);
        // No image to ask about, only the drop-in to read: nothing to stop.
        let held =
            blocking(move || Ok::<_, SyncError>(engine.pinned_held(&[], &AtomicBool::new(false))))
                .await?
                .map_err(host_error)?
                .up_to_date();
        state.maybe_pinned = Some(!held);
        if held {
            return Ok(());
        }
    }
    let node = match inner.known_node() {
        Some(n) => n,
        None => Arc::new(inner.node().await?),
    };
    let pools = if sets.is_empty() {
        Vec::new()
    } else {
        inner.pools.list(&ListParams::default()).await?.items
    };
    let mut mine = sets_for_node(node.metadata.labels.as_ref(), &pools, sets);
    if let Err(why) = check_sets(&mine) {
        mine.truncate(pinned::MAX_SETS_PER_NODE);
        return fail(inner, &mine, state, why).await;
    }
    let images = pinned::unique_sorted_images(mine.iter().copied());
    let engine = Arc::clone(&inner.engine);
    let wanted = images.clone();
    let stop_checks = Arc::clone(stop);
    let held = match blocking(move || Ok::<_, SyncError>(engine.pinned_held(&wanted, &stop_checks)))
        .await?
    {
        Ok(held) => held,
        Err(PinError::Stopped) => {
            tracing::info!("the pinned image sets changed; presence checks stopped");
            return Ok(());
        }
        Err(e @ PinError::Host(_)) => return Err(host_error(e)),
        Err(e) => return fail(inner, &mine, state, e.to_string()).await,
    };
    if !held.up_to_date() {
        if let Err(why) = check_node(&node, MIN_STORAGE_BYTES) {
            return fail(inner, &mine, state, why).await;
        }
        tracing::info!(
            sets = ?mine.iter().map(|s| s.name_any()).collect::<Vec<_>>(),
            images = images.len(),
            "pulling and pinning images"
        );
        let w = Write::parent(
            pinned::MCN_PROGRESSING,
            Status::True,
            format!("node is prefetching images: {}", inner.name()),
        )
        .reason(PROGRESSING_REASON);
        let w = with_entries(inner, w, entries(&mine, &state.current, None)).await;
        inner.mcn_now(&w).await?;
        let engine = Arc::clone(&inner.engine);
        let wanted = images.clone();
        let stop = Arc::clone(stop);
        match blocking(move || Ok::<_, SyncError>(engine.pin_images(&wanted, &held, &stop))).await?
        {
            Ok(reloaded) => {
                if reloaded {
                    tracing::info!("CRI-O reloaded with {} pinned images", images.len());
                }
            }
            Err(PinError::Stopped) => {
                tracing::info!("the pinned image sets changed; pulling stopped");
                return Ok(());
            }
            Err(e) => return fail(inner, &mine, state, e.to_string()).await,
        }
    }
    state.current = mine.iter().map(|s| (s.name_any(), generation(s))).collect();
    state.maybe_pinned = Some(!mine.is_empty() || !images.is_empty());
    let w = Write::parent(pinned::MCN_PROGRESSING, Status::False, COMPLETE)
        .reason(AS_EXPECTED)
        .sibling(pinned::MCN_DEGRADED, Status::False, AS_EXPECTED, ALL_GOOD);
    let w = with_entries(inner, w, entries(&mine, &state.current, None)).await;
    inner.mcn_now(&w).await
}

/// A failure to read the node (its drop-in, its image store) is the pass's error, as any host
/// error is; only what the sets ask for that cannot be done is reported as theirs.
fn host_error(e: PinError) -> SyncError {
    match e {
        PinError::Host(e) => e.into(),
        e => SyncError::Pinned(e.to_string()),
    }
}

/// `w` with the sets' entries, where the served MachineConfigNode has the field (upstream's
/// first `v1alpha1` shape has not): a write of what the server prunes would be sent again at
/// every pass.
async fn with_entries(
    inner: &Inner,
    w: Write,
    entries: Vec<MachineConfigNodeStatusPinnedImageSet>,
) -> Write {
    match inner.mcns.served().await {
        Ok(s) if s.has(&["status", "pinnedImageSets"]) => w.pinned(entries),
        _ => w,
    }
}

/// Reports a failed pass and returns it as the error that schedules the retry.
async fn fail(
    inner: &Arc<Inner>,
    mine: &[&PinnedImageSet],
    state: &Pinned,
    why: String,
) -> Result<(), SyncError> {
    let w = Write::parent(pinned::MCN_DEGRADED, Status::True, FAILED).reason(FAILED_REASON);
    let w = with_entries(inner, w, entries(mine, &state.current, Some(&why))).await;
    inner.mcn_now(&w).await?;
    Err(SyncError::Pinned(why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn set(name: &str, role: &str, generation: i64) -> PinnedImageSet {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "PinnedImageSet",
            "metadata": {"name": name, "generation": generation,
                         "labels": {"machineconfiguration.openshift.io/role": role}},
            "spec": {"pinnedImages": [{"name": format!("quay.io/x/{name}@sha256:{}", "0".repeat(64))}]}
        }))
        .unwrap()
    }

    fn pool(name: &str, node_role: &str, mc_roles: &[&str]) -> MachineConfigPool {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": {format!("node-role.kubernetes.io/{node_role}"): ""}},
                "machineConfigSelector": {"matchExpressions": [{
                    "key": "machineconfiguration.openshift.io/role",
                    "operator": "In", "values": mc_roles}]}
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_node_gets_the_sets_of_every_pool_that_selects_it() {
        let sets: BTreeMap<String, PinnedImageSet> = [
            set("for-workers", "worker", 1),
            set("for-infra", "infra", 1),
            set("for-masters", "master", 1),
        ]
        .into_iter()
        .map(|s| (s.name_any(), s))
        .collect();
        let pools = [
            pool("worker", "worker", &["worker"]),
            pool("infra", "infra", &["worker", "infra"]),
            pool("master", "master", &["master"]),
        ];
        let labels = |roles: &[&str]| -> BTreeMap<String, String> {
            roles
                .iter()
                .map(|r| (format!("node-role.kubernetes.io/{r}"), String::new()))
                .collect()
        };
        let names = |v: Vec<&PinnedImageSet>| v.iter().map(|s| s.name_any()).collect::<Vec<_>>();
        assert_eq!(
            names(sets_for_node(Some(&labels(&["worker"])), &pools, &sets)),
            ["for-workers"]
        );
        assert_eq!(
            names(sets_for_node(
                Some(&labels(&["worker", "infra"])),
                &pools,
                &sets
            )),
            ["for-infra", "for-workers"]
        );
        assert!(sets_for_node(None, &pools, &sets).is_empty());
    }

    #[test]
    fn a_node_takes_at_most_a_hundred_sets() {
        let sets: Vec<PinnedImageSet> = (0..=pinned::MAX_SETS_PER_NODE)
            .map(|i| set(&format!("s{i:03}"), "worker", 1))
            .collect();
        let refs: Vec<&PinnedImageSet> = sets.iter().collect();
        assert_eq!(check_sets(&refs[..pinned::MAX_SETS_PER_NODE]), Ok(()));
        assert_eq!(
            check_sets(&refs).unwrap_err(),
            "101 PinnedImageSets select this node; at most 100 can be pinned and reported"
        );
    }

    #[test]
    fn entries_say_what_is_wanted_pinned_and_failed() {
        let a = set("a", "worker", 3);
        let b = set("b", "worker", 1);
        let current = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]);
        let ok = entries(&[&a, &b], &current, None);
        assert_eq!(ok[0].desired_generation, Some(3));
        assert_eq!(ok[0].current_generation, Some(2));
        assert!(!ok[0].is_current() && ok[1].is_current());
        let long = "x".repeat(MAX_ERROR_LEN + 10);
        let failed = entries(&[&a], &current, Some(&long));
        assert_eq!(failed[0].last_failed_generation, Some(3));
        assert_eq!(failed[0].last_failed_generation_error.len(), MAX_ERROR_LEN);
    }

    #[test]
    fn a_node_pulls_only_when_ready_with_room() {
        let ok = node(json!({"metadata": {"name": "w"}, "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}],
            "allocatable": {"ephemeral-storage": "16Gi"}}}));
        assert_eq!(check_node(&ok, MIN_STORAGE_BYTES), Ok(()));
        let small = node(json!({"metadata": {"name": "w"}, "status": {
            "allocatable": {"ephemeral-storage": "10Gi"}}}));
        assert_eq!(
            check_node(&small, MIN_STORAGE_BYTES).unwrap_err(),
            format!(
                "storage available is less than minimum required capacity: {}, required: {MIN_STORAGE_BYTES}",
                10i64 << 30
            )
        );
        let none = node(json!({"metadata": {"name": "w"}, "status": {}}));
        assert_eq!(
            check_node(&none, MIN_STORAGE_BYTES).unwrap_err(),
            "node \"w\" has no ephemeral storage capacity"
        );
        let pressed = node(json!({"metadata": {"name": "w"}, "status": {
            "conditions": [{"type": "DiskPressure", "status": "True"}],
            "allocatable": {"ephemeral-storage": "100Gi"}}}));
        assert_eq!(
            check_node(&pressed, MIN_STORAGE_BYTES).unwrap_err(),
            "node w is reporting OutOfDisk=True"
        );
        let down = node(json!({"metadata": {"name": "w"}, "status": {
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "allocatable": {"ephemeral-storage": "100Gi"}}}));
        assert_eq!(
            check_node(&down, MIN_STORAGE_BYTES).unwrap_err(),
            "node w is reporting NotReady=Unknown"
        );
    }

    #[test]
    fn only_what_a_pass_reads_of_the_sets_is_a_change() {
        use watcher::Event;
        let (mut sets, mut listing) = (BTreeMap::new(), BTreeMap::new());
        let mut seen = |ev: Event<PinnedImageSet>| take(Some(Ok(ev)), &mut sets, &mut listing);
        let a = set("a", "worker", 1);
        assert_eq!(seen(Event::Init), Seen::Nothing);
        assert_eq!(
            seen(Event::InitDone),
            Seen::Relisted,
            "none before, none now"
        );
        assert_eq!(seen(Event::Init), Seen::Nothing);
        assert_eq!(seen(Event::InitApply(a.clone())), Seen::Nothing);
        assert_eq!(seen(Event::InitDone), Seen::Changed);
        assert_eq!(seen(Event::Init), Seen::Nothing);
        assert_eq!(seen(Event::InitApply(a.clone())), Seen::Nothing);
        assert_eq!(
            seen(Event::InitDone),
            Seen::Relisted,
            "a relist of the same set"
        );

        let mut written = a.clone();
        written.metadata.resource_version = Some("7".into());
        written
            .annotations_mut()
            .insert("example.com/note".into(), "x".into());
        assert_eq!(seen(Event::Apply(written)), Seen::Nothing);
        assert_eq!(seen(Event::Apply(set("a", "worker", 2))), Seen::Changed);
        assert_eq!(seen(Event::Apply(set("a", "infra", 2))), Seen::Changed);
        let mut more = set("a", "infra", 2);
        more.spec.pinned_images.push(pinned::PinnedImageRef {
            name: format!("quay.io/x/more@sha256:{}", "1".repeat(64)),
        });
        assert_eq!(seen(Event::Apply(more)), Seen::Changed, "an image added");
        assert_eq!(seen(Event::Apply(set("b", "worker", 1))), Seen::Changed);
        assert_eq!(seen(Event::Delete(set("c", "worker", 1))), Seen::Nothing);
        assert_eq!(seen(Event::Delete(set("b", "worker", 1))), Seen::Changed);
        assert_eq!(take(None, &mut sets, &mut listing), Seen::Ended);
        assert_eq!(sets.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_pass_follows_the_nodes_labels_once_a_copy_of_the_node_is_held() {
        let worker: Labels = Some(BTreeMap::from([(
            "node-role.kubernetes.io/worker".to_string(),
            String::new(),
        )]));
        let mut infra = worker.clone();
        infra
            .as_mut()
            .unwrap()
            .insert("node-role.kubernetes.io/infra".into(), String::new());
        assert!(!labels_moved(Some(&worker), Some(&worker)));
        assert!(labels_moved(Some(&worker), Some(&infra)));
        assert!(
            labels_moved(Some(&worker), Some(&None)),
            "every label removed"
        );
        assert!(labels_moved(None, Some(&worker)), "the first copy held");
        assert!(!labels_moved(Some(&worker), None), "no copy held now");
    }
}
