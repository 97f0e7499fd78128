//! Watches that start with a streaming list (`sendInitialEvents=true`): one WATCH request
//! carries the initial state where a list-then-watch costs a LIST and a WATCH, and the objects
//! arrive one at a time instead of in list pages held whole.
//!
//! - The daemon starts its watches at every boot, so on a rollout that reboots each node this
//!   is a request saved per watch and per node update.
//! - The dashboard follows a thousand Nodes and MachineConfigNodes: a page of 500 of them,
//!   managedFields included, was most of its peak memory.
//!
//! A server that refuses streaming lists (Kubernetes 1.33 shipped with the `WatchList` gate off,
//! and older servers reject `sendInitialEvents`) answers the first watch with 400 or 422: the
//! watch then falls back to a list and a watch, for as long as it runs.

pub mod optional;

use futures::{Stream, StreamExt, future};
use kube::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

/// [`watcher::watcher`] over a streaming list, falling back to list-then-watch where the server
/// refuses streaming lists.
pub fn watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    futures::stream::once(async move {
        let mut streaming = watcher::watcher(api.clone(), cfg.clone().streaming_lists()).boxed();
        match streaming.next().await {
            Some(Err(e)) if refuses_streaming(&e) => {
                tracing::info!(error = %e, "the API server refuses streaming lists; listing, then watching");
                watcher::watcher(api, cfg).boxed()
            }
            Some(first) => futures::stream::once(future::ready(first))
                .chain(streaming)
                .boxed(),
            None => futures::stream::empty().boxed(),
        }
    })
    .flatten()
}

/// Whether the first watch's error is the server refusing `sendInitialEvents` (a bad request
/// or an invalid one), as opposed to a failure worth retrying the same way.
fn refuses_streaming(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 400 || s.code == 422)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("sendInitialEvents is forbidden", "Invalid")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_a_refused_first_watch_falls_back() {
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(
            status(422)
        )));
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(
            status(400)
        )));
        // Not a refusal of the request's form: the streaming watch is retried as it is.
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(
            status(403)
        )));
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(
            status(500)
        )));
        assert!(!refuses_streaming(&watcher::Error::WatchFailed(status(
            422
        ))));
    }
}
