//! This controller's own writes, laid over caches that have not seen them yet.
//!
//! A watch delivers a write some time after the server answered it. A reconcile that ran in
//! between on the cache alone would not see what this controller just did (a node it targeted
//! would not count as busy), so every part keeps the objects its writes returned, by name, and
//! reads the newer of that and the cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::Resource;

/// A resourceVersion as a number (the embedded server's and etcd's are); `None` when opaque.
pub fn resource_version<K: Resource>(o: &K) -> Option<u64> {
    o.meta().resource_version.as_deref()?.parse().ok()
}

/// The newer of a cached copy and this controller's own last write of one object; `None` when
/// both exist but their versions cannot be compared, so the caller reads the object instead.
pub fn newer<K: Resource>(cached: Option<Arc<K>>, written: Option<Arc<K>>) -> Option<Arc<K>> {
    match (cached, written) {
        (Some(c), Some(w)) => match (resource_version(&*c), resource_version(&*w)) {
            (Some(a), Some(b)) => Some(if b > a { w } else { c }),
            _ => None,
        },
        (c, w) => c.or(w),
    }
}

/// Whether the cached copy of a node shows this controller's own write `written` of it.
pub fn caught_up(cached: &Node, written: &Node) -> bool {
    match (resource_version(cached), resource_version(written)) {
        (Some(c), Some(w)) => c >= w,
        // Opaque versions: trust the cache once it shows our annotations.
        _ => {
            mco_rollout::plan::desired_config(cached) == mco_rollout::plan::desired_config(written)
        }
    }
}

/// Keeps an object as one of this controller's writes returned it, by name.
pub(crate) fn remember<K: Resource>(written: &Mutex<HashMap<String, Arc<K>>>, obj: K) {
    let name = obj.meta().name.clone().unwrap_or_default();
    written
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name, Arc::new(obj));
}

/// The newer of the cached copy of `name` and this controller's own last write of it; the
/// written copy is dropped once the cache has caught up with it.
pub(crate) fn known<K: Resource>(
    cached: Option<Arc<K>>,
    written: &Mutex<HashMap<String, Arc<K>>>,
    name: &str,
) -> Option<Arc<K>> {
    let mut written = written.lock().unwrap_or_else(|e| e.into_inner());
    let newest = newer(cached.clone(), written.get(name).cloned());
    if let (Some(n), Some(c)) = (&newest, &cached)
        && Arc::ptr_eq(n, c)
    {
        written.remove(name);
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_api::MachineConfigPool;

    fn pool(name: &str) -> MachineConfigPool {
        MachineConfigPool::new(name, Default::default())
    }

    #[test]
    fn newer_prefers_the_higher_resource_version() {
        let at = |rv: &str| {
            let mut p = pool("worker");
            p.metadata.resource_version = Some(rv.into());
            Arc::new(p)
        };
        let rv =
            |p: Option<Arc<MachineConfigPool>>| p.and_then(|p| p.metadata.resource_version.clone());
        assert_eq!(
            rv(newer(Some(at("5")), Some(at("7")))).as_deref(),
            Some("7")
        );
        assert_eq!(
            rv(newer(Some(at("7")), Some(at("5")))).as_deref(),
            Some("7")
        );
        assert_eq!(
            rv(newer(Some(at("7")), Some(at("7")))).as_deref(),
            Some("7")
        );
        assert_eq!(rv(newer(None, Some(at("5")))).as_deref(), Some("5"));
        assert_eq!(rv(newer(Some(at("5")), None)).as_deref(), Some("5"));
        // Opaque versions cannot be ordered: the caller must read the object.
        assert!(newer(Some(at("a")), Some(at("5"))).is_none());
    }
}
