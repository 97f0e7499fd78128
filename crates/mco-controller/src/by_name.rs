//! Watches of one object by name: a `metadata.name` field selector, which RBAC allows with a
//! rule for that name alone. The template controller's inputs and the cluster settings of the
//! `97-`/`98-` kubelet configs are watched so.

use std::fmt::Debug;

use futures::{Stream, StreamExt, future};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

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
