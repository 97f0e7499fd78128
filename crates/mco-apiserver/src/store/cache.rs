//! What the in-memory copy keeps beside each object's text: parses of lately updated objects,
//! the watch lines already written for an event, and pods indexed by node.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{EventType, Json, ObjMap};

/// Watch lines of one event, by what makes them differ: the type the watcher sees, the API
/// version it is served at (`apiVersion`: core and `events.k8s.io` Events share events), and whether managedFields are left out. A Node event reaches the
/// controller's, the simulated kubelet's and the node's own daemon's watches alike; the first
/// to send it writes the line and the others send the same bytes.
#[derive(Debug, Default)]
pub struct LineCache(Mutex<Vec<(EventType, String, bool, bytes::Bytes)>>);

impl LineCache {
    /// The line for this key, written by `make` the first time it is asked for.
    pub fn get_or_make(
        &self,
        typ: EventType,
        version: &str,
        slim: bool,
        make: impl FnOnce() -> bytes::Bytes,
    ) -> bytes::Bytes {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((.., b)) = lines
            .iter()
            .find(|(t, v, s, _)| *t == typ && v == version && *s == slim)
        {
            return b.clone();
        }
        let b = make();
        lines.push((typ, version.to_string(), slim, b.clone()));
        b
    }
}

pub(super) const PODS: &str = "/pods";

/// A pod's `spec.nodeName`, if bound.
pub(super) fn node_of_pod(pod: &Value) -> Option<&str> {
    pod.get("spec")?
        .get("nodeName")?
        .as_str()
        .filter(|n| !n.is_empty())
}

pub(super) fn index_pod(
    index: &mut HashMap<String, BTreeSet<(String, String)>>,
    node: &str,
    key: (String, String),
) {
    index.entry(node.to_string()).or_default().insert(key);
}

pub(super) fn unindex_pod(
    index: &mut HashMap<String, BTreeSet<(String, String)>>,
    node: &str,
    key: &(String, String),
) {
    if let Some(keys) = index.get_mut(node) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(node);
        }
    }
}

/// The pod index of the objects loaded at start-up.
pub(super) fn pod_index(objects: &ObjMap) -> HashMap<String, BTreeSet<(String, String)>> {
    #[derive(serde::Deserialize)]
    struct Pod {
        spec: Option<Spec>,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(rename = "nodeName")]
        node_name: Option<String>,
    }
    let mut index = HashMap::new();
    for (key, json) in objects.get(PODS).into_iter().flatten() {
        if let Ok(Pod {
            spec: Some(Spec {
                node_name: Some(node),
            }),
        }) = serde_json::from_str(json)
            && !node.is_empty()
        {
            index_pod(&mut index, &node, key.clone());
        }
    }
    index
}

/// How many objects keep a parsed copy beside their text (see [`Parsed`]).
const PARSED_OBJECTS: usize = 1024;

/// Parsed copies of the current versions of objects that were updated lately.
///
/// A write parses the object it changes, and an object updated once is usually updated again
/// soon (a node in a rollout is written a dozen times in a few seconds): keeping the writer's
/// own parsed copy saves that parse, about 6 % of the whole `mco up` process's CPU in a rollout.
/// Bounded in count, so its memory does not grow with the cluster. Entries are keyed by the
/// address of the text they parse: that text is held by the object map while it is current,
/// and an entry is removed when its text stops being current, so an address never names two
/// texts at once.
#[derive(Default)]
pub(super) struct Parsed {
    /// Text address → (insertion number, parsed object).
    by_text: HashMap<usize, (u64, Arc<Value>)>,
    /// (address, insertion number) in insertion order, for eviction. A slot whose number no
    /// longer matches its entry is stale: the text was replaced and its address reused.
    order: VecDeque<(usize, u64)>,
    inserted: u64,
}

fn text_addr(json: &Json) -> usize {
    Arc::as_ptr(json).cast::<u8>() as usize
}

impl Parsed {
    pub(super) fn get(&self, json: &Json) -> Option<Arc<Value>> {
        self.by_text.get(&text_addr(json)).map(|(_, v)| v.clone())
    }

    pub(super) fn forget(&mut self, json: &Json) {
        self.by_text.remove(&text_addr(json));
    }

    fn current(&self, (addr, n): (usize, u64)) -> bool {
        self.by_text.get(&addr).is_some_and(|(m, _)| *m == n)
    }

    pub(super) fn insert(&mut self, json: &Json, obj: Arc<Value>) {
        let addr = text_addr(json);
        self.inserted += 1;
        self.by_text.insert(addr, (self.inserted, obj));
        self.order.push_back((addr, self.inserted));
        while self.by_text.len() > PARSED_OBJECTS {
            let Some(slot) = self.order.pop_front() else {
                break;
            };
            if self.current(slot) {
                self.by_text.remove(&slot.0);
            }
        }
        if self.order.len() > 2 * PARSED_OBJECTS + 64 {
            let order = std::mem::take(&mut self.order);
            self.order = order.into_iter().filter(|s| self.current(*s)).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{event, put};
    use crate::store::{Action, Durability, Select, Store, parse};

    #[test]
    fn an_event_line_is_written_once_per_type_version_and_slimness() {
        let e = event(1, "default", "a");
        let made = std::cell::Cell::new(0);
        let line = |typ, version: &str, slim| {
            e.lines.get_or_make(typ, version, slim, || {
                made.set(made.get() + 1);
                bytes::Bytes::from(format!("{typ:?} {version} {slim}"))
            })
        };
        let first = line(EventType::Modified, "v1", true);
        assert_eq!(line(EventType::Modified, "v1", true), first);
        assert_eq!(
            made.get(),
            1,
            "the second watcher sends the first one's bytes"
        );
        // Any difference in what the watcher is sent is a line of its own.
        assert_eq!(line(EventType::Added, "v1", true), "Added v1 true");
        assert_eq!(
            line(EventType::Modified, "v1beta1", true),
            "Modified v1beta1 true"
        );
        assert_eq!(line(EventType::Modified, "v1", false), "Modified v1 false");
        assert_eq!(made.get(), 4);
    }

    #[test]
    fn kept_parses_are_bounded_and_forgotten_with_their_text() {
        let mut p = Parsed::default();
        let texts: Vec<Json> = (0..PARSED_OBJECTS + 10)
            .map(|i| Arc::from(format!("{{\"i\":{i}}}")))
            .collect();
        for (i, t) in texts.iter().enumerate() {
            p.insert(t, Arc::new(serde_json::json!({ "i": i })));
        }
        assert_eq!(p.by_text.len(), PARSED_OBJECTS);
        assert!(p.get(&texts[0]).is_none(), "the oldest is evicted first");
        let last = texts.last().unwrap();
        assert_eq!(p.get(last).unwrap()["i"], PARSED_OBJECTS + 9);
        p.forget(last);
        assert!(p.get(last).is_none());
        // Replaced entries leave stale order slots; they are compacted, not kept forever.
        for _ in 0..4 * PARSED_OBJECTS {
            let t: Json = Arc::from("{}");
            p.insert(&t, Arc::new(Value::Null));
            p.forget(&t);
        }
        assert!(p.order.len() <= 2 * PARSED_OBJECTS + 64);
        assert_eq!(p.by_text.len(), PARSED_OBJECTS - 1);
    }

    #[tokio::test]
    async fn an_updated_object_is_read_as_the_writer_parsed_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), 100, Durability::PowerLoss).unwrap();
        let obj = |v: u32| serde_json::json!({"metadata": {"name": "x"}, "data": {"v": v}});
        store
            .write("/configmaps", "a", "x", false, put(obj(1)))
            .await
            .unwrap();
        let created = store.snapshot("/configmaps", "a", "x");
        let updated = store
            .write("/configmaps", "a", "x", false, put(obj(2)))
            .await
            .unwrap();
        let updated = updated.object().unwrap().clone();
        let seen = store.snapshot("/configmaps", "a", "x");
        let seen_obj = seen.object.clone().unwrap();
        assert!(Arc::ptr_eq(&seen_obj, &updated), "the writer's own parse");
        assert_eq!(*seen_obj, *parse(&seen.json.clone().unwrap()));
        assert_eq!(seen_obj["data"]["v"], 2);
        assert!(!Arc::ptr_eq(created.object.as_ref().unwrap(), &updated));
        // A list reads the same copy.
        let (_, listed, _) = store.list("/configmaps", Some("a"), None, None, &|_: &Value| true);
        assert!(Arc::ptr_eq(&listed[0], &updated));
        store
            .write(
                "/configmaps",
                "a",
                "x",
                false,
                Box::new(|_| Ok(Action::Delete)),
            )
            .await
            .unwrap();
        assert!(store.get("/configmaps", "a", "x").is_none());
        assert!(store.state().parsed.lock().unwrap().by_text.is_empty());
    }

    #[tokio::test]
    async fn a_named_read_keeps_its_parse_and_a_whole_list_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), 100, Durability::PowerLoss).unwrap();
        let obj = |n: &str, v: u32| serde_json::json!({"metadata": {"name": n}, "data": {"v": v}});
        for n in ["x", "y"] {
            store
                .write("/configmaps", "a", n, false, put(obj(n, 1)))
                .await
                .unwrap();
        }
        let kept = || store.state().parsed.lock().unwrap().by_text.len();
        // Created objects keep no parse: most are never read or written again.
        assert_eq!(kept(), 0);

        // A whole list parses without keeping.
        let (_, all, _) = store.list("/configmaps", Some("a"), None, None, &|_: &Value| true);
        assert_eq!(all.len(), 2);
        assert_eq!(kept(), 0);

        // A get keeps its parse: the next get and a named list read that same copy.
        let first = store.get("/configmaps", "a", "x").unwrap();
        assert!(Arc::ptr_eq(
            &first,
            &store.get("/configmaps", "a", "x").unwrap()
        ));
        let all = |_: &Value| true;
        let (_, named, _) = store.list_named("/configmaps", Some("a"), Some("x"), None, None, &all);
        assert!(Arc::ptr_eq(&first, &named[0]));
        assert_eq!(kept(), 1);

        // A write replaces the kept parse with the writer's own.
        let updated = store
            .write("/configmaps", "a", "x", false, put(obj("x", 2)))
            .await
            .unwrap();
        let now = store.get("/configmaps", "a", "x").unwrap();
        assert!(Arc::ptr_eq(&now, updated.object().unwrap()));
        assert_eq!(now["data"]["v"], 2);
        assert_eq!(kept(), 1);
    }

    /// `spec.nodeName=<node>`, as the REST layer's filter offers it.
    struct OnNode(&'static str);

    impl Select for OnNode {
        fn matches(&self, v: &Value) -> bool {
            node_of_pod(v) == Some(self.0)
        }
        fn pods_on_node(&self) -> Option<&str> {
            Some(self.0)
        }
    }

    fn pod_names(store: &Store, node: &'static str) -> Vec<String> {
        let (_, pods, _) = store.list_named(PODS, None, None, None, None, &OnNode(node));
        pods.iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[tokio::test]
    async fn pods_are_listed_by_node_from_an_index_that_follows_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let pod = |name: &str, node: &str| serde_json::json!({"metadata": {"name": name, "namespace": "a"}, "spec": {"nodeName": node}});
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        for (name, node) in [("p1", "n1"), ("p2", "n2"), ("p3", "n1"), ("p4", "")] {
            store
                .write(PODS, "a", name, false, put(pod(name, node)))
                .await
                .unwrap();
        }
        assert_eq!(pod_names(&store, "n1"), ["p1", "p3"]);
        assert_eq!(pod_names(&store, "n2"), ["p2"]);
        assert!(pod_names(&store, "n3").is_empty());
        // Moved, then deleted.
        store
            .write(PODS, "a", "p1", false, put(pod("p1", "n2")))
            .await
            .unwrap();
        assert_eq!(pod_names(&store, "n1"), ["p3"]);
        assert_eq!(pod_names(&store, "n2"), ["p1", "p2"]);
        store
            .write(PODS, "a", "p2", false, Box::new(|_| Ok(Action::Delete)))
            .await
            .unwrap();
        assert_eq!(pod_names(&store, "n2"), ["p1"]);
        // A list in one namespace, and a continued list, go through the index too.
        store
            .write(PODS, "b", "p5", false, put(pod("p5", "n1")))
            .await
            .unwrap();
        let (_, in_b, _) = store.list_named(PODS, Some("b"), None, None, None, &OnNode("n1"));
        assert_eq!(in_b.len(), 1);
        let (_, first, next) = store.list_named(PODS, None, None, None, Some(1), &OnNode("n1"));
        assert_eq!(first.len(), 1);
        let (_, rest, _) = store.list_named(PODS, None, None, next, None, &OnNode("n1"));
        assert_eq!(rest.len(), 1);
        drop(store);
        // Rebuilt from disk.
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        assert_eq!(pod_names(&store, "n1"), ["p3", "p5"]);
        assert_eq!(pod_names(&store, "n2"), ["p1"]);
    }
}
