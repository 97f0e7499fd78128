//! Watches of kinds a cluster may not serve: PinnedImageSet (OpenShift 4.19 and newer),
//! MachineOSConfig and MachineOSBuild (on-cluster image mode, 4.19 and newer; behind a feature
//! gate before). While the kind is not served the store is empty, the kind is looked up again
//! every `retry`, and that is said once at info.

use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};

/// What [`watch`] tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The kind is not served: the store was emptied.
    Absent,
    /// The kind was listed: the store holds every object.
    Listed,
    /// An object changed or went.
    Changed,
}

/// Keeps `writer`'s store of `kind`, telling `on` of each change. `absent` completes the line
/// said when the kind is not served (what the controllers do without it).
pub async fn watch<K>(
    api: Api<K>,
    mut writer: reflector::store::Writer<K>,
    kind: &'static str,
    absent: &'static str,
    retry: Duration,
    mut on: impl FnMut(Seen) + Send,
) where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let mut said_absent = false;
    let mut said_failing = false;
    loop {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => {
                if said_absent {
                    tracing::info!("{kind} is served now");
                }
                said_absent = false;
                said_failing = false;
            }
            Err(e) if not_served(&e) => {
                if !said_absent {
                    tracing::info!(
                        "{kind} is not served; {absent}, and the kind is looked up again every {retry:?}"
                    );
                    said_absent = true;
                }
                writer.apply_watcher_event(&watcher::Event::Init);
                writer.apply_watcher_event(&watcher::Event::InitDone);
                on(Seen::Absent);
                tokio::time::sleep(retry).await;
                continue;
            }
            Err(e) => {
                // Not readable (a missing right, an API server in trouble): what depends on it
                // is left as it is until it is.
                if said_failing {
                    tracing::debug!(error = %e, "listing {kind}");
                } else {
                    tracing::warn!(error = %e, "listing {kind}; retrying");
                    said_failing = true;
                }
                tokio::time::sleep(retry).await;
                continue;
            }
        }
        let mut events = watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .modify(|o: &mut K| o.meta_mut().managed_fields = None)
            .boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(ev) => {
                    writer.apply_watcher_event(&ev);
                    match ev {
                        watcher::Event::InitDone => on(Seen::Listed),
                        watcher::Event::Apply(_) | watcher::Event::Delete(_) => on(Seen::Changed),
                        _ => {}
                    }
                }
                // The CRD was removed: look the kind up again.
                Err(watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e))
                    if not_served(&e) =>
                {
                    break;
                }
                Err(e) => tracing::warn!(error = %e, "{kind} watch"),
            }
        }
    }
}

/// A 404 on the kind's collection: not served.
pub fn not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
