//! Lists read in pages: the objects of a list kept as they were at its first page, so the next
//! pages are read at that same resourceVersion after the resource has changed.
//!
//! kube-apiserver serves a continued list from etcd at the first page's revision, until etcd
//! compacts it (every 5 minutes). The store holds only the current version of each object, so a
//! list with pages still to come keeps its objects' texts: the texts are shared, so a kept list
//! costs its keys and whatever versions it alone still holds. Kept lists are bounded in number
//! and in age; a page of a list no longer kept is answered 410 Expired, unless its resource has
//! not changed since, when the current objects are that version.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Json;

/// How long a list's later pages stay readable at its first page's version: etcd's compaction
/// interval, after which kube-apiserver answers them 410 Expired.
pub const PAGED_LIST_TTL: Duration = Duration::from_secs(5 * 60);
/// How many lists with pages still to come are kept at once; the oldest goes first.
pub const PAGED_LISTS: usize = 16;

/// One resource's objects (in one namespace, or all) at one resourceVersion.
pub(super) type Objects = Arc<BTreeMap<(String, String), Json>>;

struct Kept {
    gr: String,
    ns: Option<String>,
    rv: u64,
    at: Instant,
    objects: Objects,
}

#[derive(Default)]
pub(super) struct KeptLists {
    kept: VecDeque<Kept>,
}

impl KeptLists {
    fn expire(&mut self, now: Instant) {
        self.kept
            .retain(|k| now.saturating_duration_since(k.at) < PAGED_LIST_TTL);
    }

    /// The objects of `gr` (in `ns`) at `rv`, if they are still kept at `now`.
    pub(super) fn get(
        &mut self,
        gr: &str,
        ns: Option<&str>,
        rv: u64,
        now: Instant,
    ) -> Option<Objects> {
        self.expire(now);
        self.kept
            .iter()
            .find(|k| k.rv == rv && k.gr == gr && k.ns.as_deref() == ns)
            .map(|k| k.objects.clone())
    }

    /// Keeps `objects` as `gr` (in `ns`) at `rv`, unless they already are.
    pub(super) fn keep(
        &mut self,
        gr: &str,
        ns: Option<&str>,
        rv: u64,
        now: Instant,
        objects: impl FnOnce() -> Objects,
    ) {
        if self.get(gr, ns, rv, now).is_some() {
            return;
        }
        while self.kept.len() >= PAGED_LISTS {
            self.kept.pop_front();
        }
        self.kept.push_back(Kept {
            gr: gr.to_string(),
            ns: ns.map(str::to_string),
            rv,
            at: now,
            objects: objects(),
        });
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(n: &str) -> Objects {
        let mut m = BTreeMap::new();
        m.insert((String::new(), n.to_string()), Json::from("{}"));
        Arc::new(m)
    }

    #[test]
    fn kept_lists_are_bounded_in_number_and_age() {
        let mut k = KeptLists::default();
        let t0 = Instant::now();
        for rv in 1..=PAGED_LISTS as u64 {
            k.keep("/configmaps", None, rv, t0, || objects("a"));
        }
        assert_eq!(k.len(), PAGED_LISTS);
        assert!(
            k.get("/configmaps", None, 1, t0).is_some(),
            "at the limit, all kept"
        );
        // Keeping the same list again keeps one copy.
        k.keep("/configmaps", None, 1, t0, || objects("b"));
        assert_eq!(k.len(), PAGED_LISTS);
        let first = k.get("/configmaps", None, 1, t0).unwrap();
        assert!(first.contains_key(&(String::new(), "a".to_string())));
        // One more: the oldest goes.
        k.keep("/configmaps", None, 99, t0, || objects("c"));
        assert_eq!(k.len(), PAGED_LISTS);
        assert!(k.get("/configmaps", None, 1, t0).is_none());
        assert!(k.get("/configmaps", None, 2, t0).is_some());
        // Another namespace or resource is another list.
        assert!(k.get("/configmaps", Some("a"), 2, t0).is_none());
        assert!(k.get("/secrets", None, 2, t0).is_none());
        // Readable until the TTL, not at it.
        let almost = t0 + PAGED_LIST_TTL - Duration::from_millis(1);
        assert!(k.get("/configmaps", None, 2, almost).is_some());
        assert!(k.get("/configmaps", None, 2, t0 + PAGED_LIST_TTL).is_none());
        assert_eq!(k.len(), 0);
    }

    use crate::store::testing::put;
    use crate::store::{Action, Durability, Expired, Resume, Select, Store};
    use serde_json::{Value, json};
    use std::ops::Bound;

    /// A list without selectors.
    struct Everything;

    impl Select for Everything {
        fn matches(&self, _: &Value) -> bool {
            true
        }
        fn is_everything(&self) -> bool {
            true
        }
    }

    const CM: &str = "/configmaps";

    fn cm(name: &str, v: u32) -> Value {
        json!({"metadata": {"name": name, "namespace": "n"}, "data": {"v": v.to_string()}})
    }

    fn names(items: &[Arc<Value>]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                    o["data"]["v"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn at(rv: u64, after: &str) -> Option<Resume> {
        Some(Resume {
            rv: Some(rv),
            start: Bound::Excluded(("n".to_string(), after.to_string())),
        })
    }

    #[tokio::test]
    async fn later_pages_read_the_first_pages_version_until_it_is_no_longer_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), 100, Durability::PowerLoss).unwrap();
        for n in ["a", "b", "c"] {
            store.write(CM, "n", n, false, put(cm(n, 1))).await.unwrap();
        }
        let first = store
            .list_page(CM, Some("n"), None, None, Some(2), &Everything)
            .unwrap();
        assert_eq!(
            names(&first.items),
            [("a".into(), "1".into()), ("b".into(), "1".into())]
        );
        assert_eq!(first.more_after, Some(("n".into(), "b".into())));
        assert_eq!(first.remaining, Some(1));
        // A selector leaves the count out, as kube-apiserver does.
        let any = |_: &Value| true;
        let filtered = store
            .list_page(CM, Some("n"), None, None, Some(2), &any)
            .unwrap();
        assert_eq!(filtered.remaining, None);
        assert!(filtered.more_after.is_some());

        // The resource changes between the pages: the next page is still the first's version.
        store
            .write(CM, "n", "c", false, put(cm("c", 2)))
            .await
            .unwrap();
        store
            .write(CM, "n", "d", false, put(cm("d", 1)))
            .await
            .unwrap();
        store
            .write(CM, "n", "a", false, Box::new(|_| Ok(Action::Delete)))
            .await
            .unwrap();
        let second = store
            .list_page(CM, Some("n"), None, at(first.rv, "b"), Some(2), &Everything)
            .unwrap();
        assert_eq!(second.rv, first.rv);
        assert_eq!(names(&second.items), [("c".into(), "1".into())]);
        assert_eq!((second.more_after, second.remaining), (None, None));
        // A limit the page fills exactly leaves nothing to continue.
        let exact = store
            .list_page(CM, Some("n"), None, at(first.rv, "a"), Some(2), &Everything)
            .unwrap();
        assert_eq!(names(&exact.items).len(), 2);
        assert_eq!(exact.more_after, None);
        // The current version has every change.
        let now = store
            .list_page(CM, Some("n"), None, None, None, &Everything)
            .unwrap();
        assert_eq!(
            names(&now.items),
            [
                ("b".into(), "1".into()),
                ("c".into(), "2".into()),
                ("d".into(), "1".into())
            ]
        );

        // Once no longer kept, a changed resource cannot be read at the old version.
        store.paged.lock().unwrap().kept.clear();
        assert_eq!(
            store
                .list_page(CM, Some("n"), None, at(first.rv, "b"), Some(2), &Everything)
                .unwrap_err(),
            Expired
        );
        // A version at or after the resource's last change is its current objects, kept or not;
        // other resources' changes do not count.
        let last_change = store.current_rv();
        store
            .write("/secrets", "n", "s", false, put(cm("s", 1)))
            .await
            .unwrap();
        let unchanged = store
            .list_page(CM, Some("n"), None, at(last_change, "b"), None, &Everything)
            .unwrap();
        assert_eq!(unchanged.rv, last_change);
        assert_eq!(names(&unchanged.items).len(), 2);
    }
}
