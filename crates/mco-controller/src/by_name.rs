//! Watches of one object by name: a `metadata.name` field selector, which RBAC allows with a
//! rule for that name alone. The template controller's inputs and the cluster settings of the
//! `97-`/`98-` kubelet configs are watched so. A [`Slot`] keeps what such a watch last delivered,
//! so that a sync reads its sources without a request ([`follow`], [`seen`]).

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::{Stream, StreamExt, future};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::task::AbortOnDropHandle;

/// The watch of the object `name`, retried with backoff.
pub(crate) fn watch<T>(
    api: Api<T>,
    name: &str,
) -> impl Stream<Item = watcher::Result<watcher::Event<T>>> + Send + 'static
where
    T: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
}

/// One `()` per touched object. A failure (retried by the watch's backoff) is said as a warning,
/// so that a missing right is not a silent stall; at debug level when `quiet` (a kind only
/// OpenShift serves, missing elsewhere).
pub(crate) fn changes<T>(
    touched: impl Stream<Item = watcher::Result<T>> + Send + 'static,
    what: &'static str,
    quiet: bool,
) -> impl Stream<Item = ()> + Send + 'static {
    touched.filter_map(move |r| {
        future::ready(match r {
            Ok(_) => Some(()),
            Err(e) if quiet => {
                tracing::debug!(error = %e, "{what} watch failed; retrying");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "{what} watch failed; retrying");
                None
            }
        })
    })
}

/// What a by-name watch last delivered of its object: a sync reads its sources from here, so a
/// wake costs no request.
#[derive(Debug, Clone)]
pub(crate) enum Seen<T> {
    /// Not listed yet: the sync waits for the first list, which wakes it.
    Unknown,
    /// Listed, and not there (or its kind is not served).
    Absent,
    Present(T),
    /// Never listed: the watch's error, the sync's failure until a list succeeds.
    Failed(String),
}

pub(crate) type Slot<T> = Arc<Mutex<Seen<T>>>;

pub(crate) fn slot<T>() -> Slot<T> {
    Arc::new(Mutex::new(Seen::Unknown))
}

/// The object a slot holds: `Ok(None)` absent, `Err(None)` not listed yet, `Err(Some(why))`
/// the watch could not list it.
pub(crate) fn seen<T: Clone>(slot: &Slot<T>, what: &str) -> Result<Option<T>, Option<String>> {
    match &*slot.lock().unwrap_or_else(|e| e.into_inner()) {
        Seen::Unknown => Err(None),
        Seen::Absent => Ok(None),
        Seen::Present(t) => Ok(Some(t.clone())),
        Seen::Failed(why) => Err(Some(format!("watching the {what}: {why}"))),
    }
}

/// Keeps `slot` at what the watch of the object `name` delivers, yielding a `()` each time it
/// changes (also at its deletion and each relist). A list refused as not found (a kind the
/// server does not serve) is an absent object; another failure before the first list is kept
/// for the sync to report, and after it the last object stays while the watch retries. A
/// failure is said as a warning, at debug level when `quiet` or the kind is not served.
pub(crate) fn follow<T>(
    api: Api<T>,
    name: &str,
    what: &'static str,
    quiet: bool,
    slot: Slot<T>,
) -> impl Stream<Item = ()> + Send + 'static
where
    T: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut listing: Option<T> = None;
    watch(api, name).filter_map(move |r| {
        if let Err(e) = &r {
            if quiet || no_kind(e) {
                tracing::debug!(error = %e, "{what} watch failed; retrying");
            } else {
                tracing::warn!(error = %e, "{what} watch failed; retrying");
            }
        }
        let mut seen = slot.lock().unwrap_or_else(|e| e.into_inner());
        future::ready(observe(&mut listing, &mut seen, r).then_some(()))
    })
}

/// A list refused as not found: the server does not serve the kind.
fn no_kind(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404)
}

/// Takes one item of a by-name watch into `seen` (`listing` holds the object of a relist until
/// it is done); whether `seen` changed. Pure.
fn observe<T>(
    listing: &mut Option<T>,
    seen: &mut Seen<T>,
    r: watcher::Result<watcher::Event<T>>,
) -> bool {
    let now = match r {
        Ok(watcher::Event::Init) => {
            *listing = None;
            return false;
        }
        Ok(watcher::Event::InitApply(o)) => {
            *listing = Some(o);
            return false;
        }
        Ok(watcher::Event::InitDone) => listing.take().map_or(Seen::Absent, Seen::Present),
        Ok(watcher::Event::Apply(o)) => Seen::Present(o),
        Ok(watcher::Event::Delete(_)) => Seen::Absent,
        Err(e) if no_kind(&e) => match seen {
            Seen::Absent => return false,
            _ => Seen::Absent,
        },
        // Before the first list the failure is the sync's; after it the last object stays
        // while the watch retries.
        Err(e) => match seen {
            Seen::Unknown => Seen::Failed(e.to_string()),
            Seen::Failed(was) if *was != e.to_string() => Seen::Failed(e.to_string()),
            _ => return false,
        },
    };
    *seen = now;
    true
}

/// Runs `changes` on a task of its own until the handle is dropped, waking a sync at each.
pub(crate) fn forward(
    changes: impl Stream<Item = ()> + Send + 'static,
    wake: &UnboundedSender<()>,
) -> AbortOnDropHandle<()> {
    let wake = wake.clone();
    AbortOnDropHandle::new(tokio::spawn(changes.for_each(move |()| {
        let _ = wake.unbounded_send(());
        future::ready(())
    })))
}

/// Waits for a sync's next run: after a failure `retry` (the backoff; changes seen meanwhile are
/// taken by the retry), else the next wake, with every wake queued with it taken at once. False
/// once every sender of `woken` is gone.
pub(crate) async fn wait_to_sync(
    woken: &mut UnboundedReceiver<()>,
    retry: Option<Duration>,
) -> bool {
    match retry {
        Some(wait) => tokio::time::sleep(wait).await,
        None => {
            if woken.next().await.is_none() {
                return false;
            }
        }
    }
    while woken.try_recv().is_ok() {}
    true
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn cm(k: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                ..Default::default()
            },
            data: Some([("k".to_string(), k.to_string())].into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_sync_runs_once_for_the_wakes_queued_together_and_retries_without_one() {
        let (wake, mut woken) = futures::channel::mpsc::unbounded();
        for _ in 0..3 {
            wake.unbounded_send(()).unwrap();
        }
        assert!(wait_to_sync(&mut woken, None).await);
        assert!(woken.try_recv().is_err(), "a wake left for a second sync");
        // A retry waits for no wake, and takes those seen meanwhile.
        assert!(wait_to_sync(&mut woken, Some(Duration::ZERO)).await);
        wake.unbounded_send(()).unwrap();
        assert!(wait_to_sync(&mut woken, Some(Duration::ZERO)).await);
        assert!(woken.try_recv().is_err(), "a wake left after the retry");
        drop(wake);
        assert!(!wait_to_sync(&mut woken, None).await);
    }

    #[test]
    fn a_watch_keeps_the_last_object_it_delivered() {
        use watcher::Event;
        let status = |code: u16| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("x", "NotFound").with_code(code),
            ))
        };
        let a = cm("1");
        let b = cm("2");
        let mut listing = None;
        let mut seen: Seen<ConfigMap> = Seen::Unknown;
        let name = |s: &Seen<ConfigMap>| match s {
            Seen::Unknown => "unknown".to_owned(),
            Seen::Absent => "absent".to_owned(),
            Seen::Present(cm) => format!("present {:?}", cm.data.as_ref().unwrap()["k"]),
            Seen::Failed(why) => format!("failed {why}"),
        };
        // A failure before the first list is kept for the sync to report, once.
        let forbidden = || Err(watcher::Error::InitialListFailed(status(403)));
        assert!(observe(&mut listing, &mut seen, forbidden()));
        assert!(name(&seen).starts_with("failed "), "{}", name(&seen));
        assert!(!observe(&mut listing, &mut seen, forbidden()));
        // The list: nothing until it is done.
        assert!(!observe(&mut listing, &mut seen, Ok(Event::Init)));
        assert!(!observe(
            &mut listing,
            &mut seen,
            Ok(Event::InitApply(a.clone()))
        ));
        assert!(name(&seen).starts_with("failed "));
        assert!(observe(&mut listing, &mut seen, Ok(Event::InitDone)));
        assert_eq!(name(&seen), "present \"1\"");
        assert!(observe(
            &mut listing,
            &mut seen,
            Ok(Event::Apply(b.clone()))
        ));
        assert_eq!(name(&seen), "present \"2\"");
        // A failure after it: the last object stays while the watch retries.
        assert!(!observe(&mut listing, &mut seen, forbidden()));
        assert_eq!(name(&seen), "present \"2\"");
        assert!(observe(&mut listing, &mut seen, Ok(Event::Delete(b))));
        assert_eq!(name(&seen), "absent");
        // A relist finds it again; one that finds nothing makes it absent, as does a kind not
        // served.
        for r in [Ok(Event::Init), Ok(Event::InitApply(a))] {
            assert!(!observe(&mut listing, &mut seen, r));
        }
        assert!(observe(&mut listing, &mut seen, Ok(Event::InitDone)));
        assert_eq!(name(&seen), "present \"1\"");
        assert!(!observe(&mut listing, &mut seen, Ok(Event::Init)));
        assert!(observe(&mut listing, &mut seen, Ok(Event::InitDone)));
        assert_eq!(name(&seen), "absent");
        let mut unserved: Seen<ConfigMap> = Seen::Unknown;
        let not_found = || Err(watcher::Error::InitialListFailed(status(404)));
        assert!(observe(&mut None, &mut unserved, not_found()));
        assert_eq!(name(&unserved), "absent");
        assert!(!observe(&mut None, &mut unserved, not_found()));
    }
}
