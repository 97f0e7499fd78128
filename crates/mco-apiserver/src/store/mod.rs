//! The object store: SQLite is the source of truth, an in-memory copy serves reads,
//! and one writer thread group-commits every queued write in a single transaction.
//!
//! [`Store`] and the types of its API are here; [`sqlite`] opens, migrates and loads the
//! database and runs its checkpoints, [`writer`] is the writer thread, [`watch`] hands committed
//! events to watches and keeps the log they resume from, [`cache`] holds what the in-memory
//! copy keeps beside each object's text (parses, watch lines, the pod index), and [`paging`]
//! keeps lists whose later pages are still to be read, at their first page's version.
//!
//! SQLite runs in write-ahead-log mode, and its checkpoints run on a thread of their own, off
//! the writer. Whether a commit is fsynced before its writes are answered is the
//! [`Durability`] the store is opened with: `PowerLoss` (the default, as etcd) or
//! `ProcessCrash`, which `mco up` uses, since its simulated node disks survive only a crash of
//! the process too.
//!
//! Reads hand out each object's stored text, so that it can be served without being parsed
//! whole. A write of an object updated lately starts from a parse kept beside its text, for the
//! last 1,024 such objects (as are the parses of reads of one object, such as the rendered
//! config every daemon reads after its reboot); pods are indexed by node for the drains' lists.

mod cache;
mod paging;
mod sqlite;
mod watch;
mod writer;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::error::{ApiError, Error};

pub use cache::LineCache;
pub use sqlite::{Durability, IssuedRow, TokenRow, token_digest};
pub use watch::{Subscription, WatchKey};

use cache::{PODS, Parsed, pod_index};
use watch::{Logged, Ring, Watchers};
use writer::Req;

/// How many past events stay available for watch resumption by default.
pub const RETAINED_EVENTS: u64 = 10_000;
/// Bytes the in-memory event log may hold by default (see [`Store::set_retained_bytes`]).
pub const RETAINED_BYTES: usize = 256 * 1024 * 1024;
/// Events a watch may have queued before it counts as too slow and is closed
/// (the client then relists), so a stalled client never holds up the writer.
pub const WATCH_BUFFER: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
    fn parse(s: &str) -> Self {
        match s {
            "ADDED" => EventType::Added,
            "DELETED" => EventType::Deleted,
            _ => EventType::Modified,
        }
    }
}

/// One committed change. `old` lets filtered watches turn a selector transition into
/// ADDED/DELETED as upstream does (absent for events reloaded after a restart).
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub gr: String,
    pub ns: String,
    pub name: String,
    pub typ: EventType,
    pub obj: Arc<Value>,
    pub old: Option<Arc<Value>>,
    /// The watch lines already written for this event (see [`LineCache`]).
    pub lines: LineCache,
}

/// What a write operation decided, given the current object.
#[derive(Debug)]
pub enum Action {
    Put(Value),
    Delete,
    /// Nothing changes (no-op write): no new resourceVersion.
    Keep,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Created(Arc<Value>),
    Updated(Arc<Value>),
    Deleted(Arc<Value>),
    Unchanged(Option<Arc<Value>>),
}

impl Outcome {
    pub fn object(&self) -> Option<&Arc<Value>> {
        match self {
            Outcome::Created(v) | Outcome::Updated(v) | Outcome::Deleted(v) => Some(v),
            Outcome::Unchanged(v) => v.as_ref(),
        }
    }
}

/// One version of an object as read by [`Store::snapshot`]: `None` fields mean it did not exist.
/// Its stored text identifies the version: every write stores a new text.
#[derive(Debug, Clone)]
pub struct Snapshot {
    json: Option<Json>,
    pub object: Option<Arc<Value>>,
}

/// The reason of the error a checked write replies with when its snapshot is no longer current.
const STALE: &str = "StaleSnapshot";

/// A read-modify-write step run on the writer thread, so it sees every earlier write.
pub type Op = Box<dyn FnOnce(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send>;

/// Which objects a list returns. `may_match` sees the stored JSON first, so a selective
/// filter can skip parsing most objects; any `Fn(&Value) -> bool` is a filter without it.
pub trait Select {
    /// A necessary condition on the object's JSON text; `true` when unsure.
    fn may_match(&self, _json: &str) -> bool {
        true
    }
    fn matches(&self, obj: &Value) -> bool;
    /// The node a pod list is limited to (`spec.nodeName=<node>`), answered from an index.
    fn pods_on_node(&self) -> Option<&str> {
        None
    }
    /// Whether every object matches (no selector): a paged list then counts what remains.
    fn is_everything(&self) -> bool {
        false
    }
}

/// Where a later page of a list starts: from a key (after the last one its previous page
/// returned), at the resourceVersion of its first page (`None`: at the current one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    pub rv: Option<u64>,
    pub start: Bound<(String, String)>,
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    /// The resourceVersion the page was read at.
    pub rv: u64,
    pub items: Vec<Arc<Value>>,
    /// The key of the page's last object, when more objects follow it.
    pub more_after: Option<(String, String)>,
    /// How many objects follow the page, when the list has no selector.
    pub remaining: Option<u64>,
}

/// A page asked for at a resourceVersion whose objects are no longer kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired;

impl<F: Fn(&Value) -> bool> Select for F {
    fn matches(&self, obj: &Value) -> bool {
        self(obj)
    }
}

/// Objects are kept as their serialised JSON: a parsed `Value` costs about ten
/// times its text, and most objects are read far less often than they are held.
pub type Json = Arc<str>;
type ObjMap = HashMap<String, BTreeMap<(String, String), Json>>;

fn parse(json: &str) -> Arc<Value> {
    // Only text this store serialised itself is held, so it parses: writes are refused past
    // `MAX_OBJECT_DEPTH`, and text stored before that limit is read past serde_json's
    // recursion limit by `read_back`. Only damaged text is left: it is reported, lists leave
    // it out, and reads and writes of it answer an error naming it (`Store::get_checked`).
    Arc::new(read_back(json).unwrap_or_else(|e| {
        let start: String = json.chars().take(160).collect();
        tracing::error!(error = %e, object = %start, "a stored object cannot be read back");
        Value::Null
    }))
}

/// The error for an object whose stored text cannot be read back, naming it.
pub fn unreadable(gr: &str, ns: &str, name: &str) -> ApiError {
    let at = if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    };
    ApiError::internal(format!(
        "the stored object {} {at} cannot be read back (see the server log); delete it and create it again",
        gr.trim_start_matches('/')
    ))
}

/// What a deletion event carries for an object whose text could not be read back.
fn stub(ns: &str, name: &str) -> Value {
    let mut meta = serde_json::Map::new();
    meta.insert("name".into(), Value::from(name));
    if !ns.is_empty() {
        meta.insert("namespace".into(), Value::from(ns));
    }
    serde_json::json!({ "metadata": meta })
}

/// The deepest nesting [`read_back`] parses: above what the write limit lets in with its
/// managedFields, and shallow enough for a thread's stack.
pub const MAX_READ_DEPTH: usize = 256;

/// Parses stored text. serde_json stops at 128 levels; an object written before the
/// write-time depth limit may be deeper once its managedFields mirror it, so such text is
/// parsed again without that limit when a scan shows it within [`MAX_READ_DEPTH`].
pub fn read_back<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, serde_json::Error> {
    match serde_json::from_str(json) {
        Ok(v) => Ok(v),
        Err(e) if e.is_syntax() && nesting(json) <= MAX_READ_DEPTH => {
            let mut de = serde_json::Deserializer::from_str(json);
            de.disable_recursion_limit();
            let v = T::deserialize(&mut de)?;
            de.end()?;
            Ok(v)
        }
        Err(e) => Err(e),
    }
}

/// The deepest bracket nesting of JSON text, strings skipped.
fn nesting(json: &str) -> usize {
    let (mut depth, mut max, mut in_str, mut escaped) = (0usize, 0usize, false, false);
    for b in json.bytes() {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// An object's key across resources: (resource, namespace, name).
type ObjKey = (String, String, String);

struct State {
    rv: u64,
    objects: ObjMap,
    /// Locked apart from the state: readers holding the state's read lock keep their parses
    /// here too.
    parsed: Mutex<Parsed>,
    /// Pods by `spec.nodeName`, as kube-apiserver's watch cache indexes them: a drain lists
    /// the pods of one node, and scanning every pod's text for it was most of that list.
    pods_by_node: HashMap<String, BTreeSet<(String, String)>>,
    /// The resourceVersion of each resource's last change since start (absent: none yet),
    /// so derived views such as the RBAC policy are rebuilt only when their inputs move.
    changed: HashMap<String, u64>,
}

impl State {
    /// The current text of one object.
    fn text(&self, gr: &str, ns: &str, name: &str) -> Option<&Json> {
        self.objects
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// The kept parse of `json`, a text current in this state.
    fn peek(&self, json: &Json) -> Option<Arc<Value>> {
        self.parsed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(json)
    }

    /// The parsed object of `json`, a text current in this state, kept for the next reader.
    /// Only a text current under the caller's lock may be kept: the writer forgets a text's
    /// parse when it replaces the text, and its address may then name another.
    fn object(&self, json: &Json) -> Arc<Value> {
        if let Some(v) = self.peek(json) {
            return v;
        }
        let v = parse(json);
        self.parsed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(json, Arc::clone(&v));
        v
    }
}

/// The metadata of an object that garbage collection looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Head {
    pub name: String,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub owner_references: Option<Vec<OwnerRef>>,
    pub deletion_timestamp: Option<String>,
    pub finalizers: Option<Vec<String>>,
}

/// The part of an `ownerReferences` entry garbage collection uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerRef {
    pub uid: String,
    pub block_owner_deletion: Option<bool>,
}

impl Head {
    /// Reads only `metadata` (other than `managedFields`) out of an object's JSON; the
    /// rest is skipped without being built.
    pub fn parse(json: &str) -> Option<Head> {
        #[derive(Deserialize)]
        struct Doc {
            #[serde(default)]
            metadata: Head,
        }
        read_back::<Doc>(json).ok().map(|d| d.metadata)
    }

    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    pub fn deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    pub fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().flatten().any(|x| x == f)
    }

    pub fn owner_refs(&self) -> &[OwnerRef] {
        self.owner_references.as_deref().unwrap_or(&[])
    }
}

/// Shared handle to the store.
pub struct Store {
    state: RwLock<State>,
    ring: Mutex<Ring>,
    /// Every event, for the server's own controllers (one receiver).
    tx: broadcast::Sender<Arc<Event>>,
    watchers: Arc<Mutex<Watchers>>,
    writer: mpsc::UnboundedSender<Req>,
    /// The token table as it was at open, until [`Store::take_tokens`] hands it over: the
    /// store only persists tokens; authentication keeps and reads them.
    tokens: Mutex<Vec<TokenRow>>,
    /// The unexpired issued tokens as they were at open, until [`Store::take_issued`].
    issued: Mutex<Vec<IssuedRow>>,
    /// This start's number: 1 on the first, one more on each after it.
    boot: u64,
    retain: u64,
    /// The most the in-memory event log may hold, in bytes.
    retain_bytes: AtomicUsize,
    /// The resourceVersion at open: whatever changed before it, changed no later.
    opened_rv: u64,
    /// Lists with pages still to come, as their first pages read them.
    paged: Mutex<paging::KeptLists>,
}

impl Store {
    /// Opens (or creates) the database and starts the writer thread.
    pub fn open(path: &Path, retain: u64, durability: Durability) -> Result<Arc<Store>, Error> {
        let retain = retain.max(1);
        sqlite::check_file(path)?;
        if let Some(warning) = sqlite::check_wal(path) {
            tracing::warn!("{warning}");
        }
        let mut conn = sqlite::open(path, durability).map_err(|e| sqlite::unusable(path, e))?;
        let sqlite::Loaded {
            rv,
            window_start,
            objects,
            events,
            tokens,
            issued,
            boot,
        } = sqlite::load(&conn).map_err(|e| sqlite::unusable(path, e))?;
        let (tx, _) = broadcast::channel(1 << 16);
        let (wtx, wrx) = mpsc::unbounded_channel();
        let store = Arc::new(Store {
            state: RwLock::new(State {
                rv,
                pods_by_node: pod_index(&objects),
                objects,
                parsed: Mutex::default(),
                changed: HashMap::new(),
            }),
            ring: Mutex::new(Ring::new(events, window_start)),
            tx,
            watchers: Arc::new(Mutex::new(Watchers::from(rv))),
            writer: wtx,
            tokens: Mutex::new(tokens),
            issued: Mutex::new(issued),
            boot,
            retain,
            retain_bytes: AtomicUsize::new(RETAINED_BYTES),
            opened_rv: rv,
            paged: Mutex::default(),
        });
        sqlite::checkpoint_elsewhere(&mut conn, path, durability)?;
        let weak = Arc::downgrade(&store);
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer::writer_loop(conn, wrx, weak))
            .map_err(|e| Error::io("store writer thread", e))?;
        Ok(store)
    }

    fn state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.state().rv
    }

    /// The resourceVersion the store opened at (0 for a new database).
    pub fn opened_rv(&self) -> u64 {
        self.opened_rv
    }

    /// The resourceVersion of the last change to `gr` since this store opened; 0 if none.
    pub fn changed_at(&self, gr: &str) -> u64 {
        self.state().changed.get(gr).copied().unwrap_or(0)
    }

    pub fn get(&self, gr: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let st = self.state();
        Some(st.object(st.text(gr, ns, name)?))
    }

    /// [`Store::get`], with an object whose text cannot be read back named in an error
    /// rather than returned as `null`.
    pub fn get_checked(
        &self,
        gr: &str,
        ns: &str,
        name: &str,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        match self.get(gr, ns, name) {
            Some(v) if v.is_null() => Err(unreadable(gr, ns, name)),
            other => Ok(other),
        }
    }

    /// The stored text of one object's current version.
    pub fn text(&self, gr: &str, ns: &str, name: &str) -> Option<Json> {
        self.state().text(gr, ns, name).cloned()
    }

    /// Lists objects of `gr` (in `ns` if given) in key order, starting after `after`,
    /// keeping those `keep` accepts, at most `limit`. Returns the list's resourceVersion
    /// and the key to continue from when more remain.
    pub fn list(
        &self,
        gr: &str,
        ns: Option<&str>,
        after: Option<(String, String)>,
        limit: Option<usize>,
        keep: &dyn Fn(&Value) -> bool,
    ) -> (u64, Vec<Arc<Value>>, Option<(String, String)>) {
        self.list_named(gr, ns, None, after, limit, &keep)
    }

    /// [`Store::list`] restricted to objects called `name`, which skips parsing the
    /// others (a `metadata.name=` field selector).
    pub fn list_named(
        &self,
        gr: &str,
        ns: Option<&str>,
        name: Option<&str>,
        after: Option<(String, String)>,
        limit: Option<usize>,
        keep: &dyn Select,
    ) -> (u64, Vec<Arc<Value>>, Option<(String, String)>) {
        let from = after.map(|k| Resume {
            rv: None,
            start: Bound::Excluded(k),
        });
        match self.list_page(gr, ns, name, from, limit, keep) {
            Ok(p) => (p.rv, p.items, p.more_after),
            // Only a list at a past version can be too old.
            Err(Expired) => (self.current_rv(), Vec::new(), None),
        }
    }

    /// One page of a list: objects of `gr` (in `ns`, called `name` if given) in key order,
    /// those `keep` accepts, at most `limit`, from `from.start`. With `from.rv`, the page is
    /// read at that resourceVersion (a later page of a list first read there): from the
    /// current objects if the resource has not changed since, else from the objects kept
    /// when that first page was read, or [`Expired`] when they are no longer kept.
    ///
    /// As kube-apiserver's watch cache, more remain when any object of the range follows the
    /// page's last one, matching or not, and the count of those is given when no selector
    /// narrows the list (`count_remaining`).
    pub fn list_page(
        &self,
        gr: &str,
        ns: Option<&str>,
        name: Option<&str>,
        from: Option<Resume>,
        limit: Option<usize>,
        keep: &dyn Select,
    ) -> Result<Page, Expired> {
        let st = self.state();
        let (start, at) = match from {
            Some(Resume { rv, start }) => (Some(start), rv),
            None => (None, None),
        };
        let mut kept = None;
        let rv = match at {
            Some(at) if at < self.changed_since_open(&st, gr) => {
                let now = std::time::Instant::now();
                let mut lists = self.paged.lock().unwrap_or_else(|e| e.into_inner());
                kept = Some(lists.get(gr, ns, at, now).ok_or(Expired)?);
                at
            }
            Some(at) => at,
            None => st.rv,
        };
        let empty = BTreeMap::new();
        let map = match &kept {
            Some(k) => &**k,
            None => st.objects.get(gr).unwrap_or(&empty),
        };
        let lower = match start {
            Some(k) => k,
            None => match ns {
                Some(ns) => Bound::Included((ns.to_string(), String::new())),
                None => Bound::Unbounded,
            },
        };
        let in_range = |ons: &String| ns.is_none_or(|ns| ons == ns);
        // The pods of one node are read from their index, at the current version only.
        let indexed = match keep.pods_on_node() {
            Some(node) if gr == PODS && kept.is_none() => Some(st.pods_by_node.get(node)),
            _ => None,
        };
        let targeted = indexed.is_some() || name.is_some();
        let keys: Box<dyn Iterator<Item = (&(String, String), &Json)>> = match indexed {
            Some(Some(keys)) => Box::new(
                keys.range((lower, Bound::Unbounded))
                    .filter_map(|k| map.get_key_value(k)),
            ),
            Some(None) => Box::new(std::iter::empty()),
            None => Box::new(map.range((lower, Bound::Unbounded))),
        };
        // Past the namespace's last key (keys sort by namespace first), nothing more is in range.
        let mut entries = keys
            .take_while(|((ons, _), _)| ns.is_none_or(|ns| ons.as_str() <= ns))
            .filter(|((ons, oname), _)| in_range(ons) && name.is_none_or(|n| n == oname))
            .peekable();
        let mut items = Vec::new();
        let mut last = None;
        for ((ons, oname), json) in entries.by_ref() {
            if !keep.may_match(json) {
                continue;
            }
            // A read of a few named objects keeps its parses (the one rendered config a
            // thousand daemons read after their reboots, the pods of a node being drained);
            // a read of a whole resource does not flush the kept copies of hot objects, nor
            // does a read of a kept list, whose texts may no longer be current.
            let v = if targeted && kept.is_none() {
                st.object(json)
            } else {
                st.peek(json).unwrap_or_else(|| parse(json))
            };
            if v.is_null() {
                tracing::error!(resource = gr, namespace = %ons, name = %oname, "left out of a list: its stored JSON cannot be read back");
                continue;
            }
            if !keep.matches(&v) {
                continue;
            }
            items.push(v);
            last = Some((ons.clone(), oname.clone()));
            // Stop at the limit, with the range's next key (if any) still unread.
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        let more = limit.is_some() && entries.peek().is_some();
        let remaining = if more && keep.is_everything() {
            Some(entries.count() as u64)
        } else {
            None
        };
        let more_after = if more { last } else { None };
        // The first page of a list with more to read keeps its objects for the next pages, so
        // that they are read at its version even once the resource changes.
        if more_after.is_some() && kept.is_none() {
            let now = std::time::Instant::now();
            let mut lists = self.paged.lock().unwrap_or_else(|e| e.into_inner());
            lists.keep(gr, ns, rv, now, || {
                let range: BTreeMap<(String, String), Json> = match ns {
                    Some(ns) => map
                        .range((ns.to_string(), String::new())..)
                        .take_while(|((ons, _), _)| ons == ns)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    None => map.clone(),
                };
                Arc::new(range)
            });
        }
        Ok(Page {
            rv,
            items,
            more_after,
            remaining,
        })
    }

    /// The resourceVersion from which the objects of `gr` are current: its last change since
    /// the store opened, or the store's version at open. A list at that version or later reads
    /// the current objects.
    fn changed_since_open(&self, st: &State, gr: &str) -> u64 {
        st.changed.get(gr).copied().unwrap_or(self.opened_rv)
    }

    /// The metadata of every object of every resource, for garbage collection sweeps.
    ///
    /// Only the few metadata fields in [`Head`] are built: parsing whole objects here
    /// would briefly hold every object as a `Value` (about ten times its text), and the
    /// allocator keeps those pages long after they are freed.
    pub fn heads(&self) -> Vec<(String, Head)> {
        // Clone the shared texts under the lock and parse after releasing it, so
        // writers are not held up by the scan.
        let texts: Vec<(String, Json)> = {
            let st = self.state();
            st.objects
                .iter()
                .flat_map(|(gr, m)| m.values().map(move |v| (gr.clone(), v.clone())))
                .collect()
        };
        texts
            .into_iter()
            .filter_map(|(gr, json)| Head::parse(&json).map(|h| (gr, h)))
            .collect()
    }

    /// Every committed event, for in-process consumers that want them all.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Registers a watch that receives only the events matching `key`. Register
    /// before reading the current state so no event falls between the two.
    pub fn watch(&self, key: WatchKey) -> Subscription {
        watch::register(&self.watchers, key, WATCH_BUFFER)
    }

    /// The resourceVersion up to which every committed event has been handed to the watches
    /// keyed to it. A watch that reads this and then drains its queued events has seen all it
    /// can up to here, so it may tell its client so with a bookmark of this version (as
    /// kube-apiserver's watch cache sends its own progress), even when nothing it watches
    /// changed: a client resuming from it is not sent back to relist by a quiet resource.
    pub fn dispatched_rv(&self) -> u64 {
        let w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        w.dispatched
    }

    /// How many watches are open, so a caller can tell that a client's watch started.
    pub fn open_watches(&self) -> usize {
        let w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        w.open()
    }

    /// Events after `rv` that `key` can see, or `None` when part of that range is no
    /// longer retained.
    pub fn events_since(&self, rv: u64, key: &WatchKey) -> Option<Vec<Arc<Event>>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if rv < ring.window_start {
            return None;
        }
        let start = ring.events.partition_point(|e| e.rv <= rv);
        Some(
            ring.events
                .iter()
                .skip(start)
                .filter(|e| {
                    e.gr == key.gr
                        && key.ns.as_ref().is_none_or(|ns| *ns == e.ns)
                        && key.name.as_ref().is_none_or(|n| *n == e.name)
                })
                .map(Logged::event)
                .collect(),
        )
    }

    /// Oldest resourceVersion a watch may still resume from.
    /// Bounds the in-memory event log by bytes as well as by count (default
    /// [`RETAINED_BYTES`]): a thousand writes of a 3 MiB object would otherwise hold 3 GiB.
    /// Trims at once.
    pub fn set_retained_bytes(&self, bytes: usize) {
        self.retain_bytes.store(bytes, Ordering::Relaxed);
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.trim(self.retain, bytes);
    }

    pub(super) fn retained_bytes(&self) -> usize {
        self.retain_bytes.load(Ordering::Relaxed)
    }

    /// What the in-memory event log holds now, as it is bounded.
    pub fn event_log_bytes(&self) -> usize {
        self.ring.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// The resourceVersion from which a watch of `gr` may resume, as kube-apiserver's watch cache
    /// holds each resource's events (see [`watch::HISTORY_EVENTS`] and [`watch::HISTORY_WINDOW`]);
    /// 0 when every retained event of it is held. Resuming from before gets 410 Expired.
    pub fn history_start(&self, gr: &str) -> u64 {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.history_start(gr, std::time::Instant::now())
    }

    pub fn window_start(&self) -> u64 {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .window_start
    }

    /// The current version of one object, for [`Store::write_if_current`].
    pub fn snapshot(&self, gr: &str, ns: &str, name: &str) -> Snapshot {
        let st = self.state();
        let json = st.text(gr, ns, name).cloned();
        let object = json.as_ref().map(|j| st.object(j));
        Snapshot { json, object }
    }

    /// Queues a read-modify-write and waits until it is durable (or rejected).
    pub async fn write(
        &self,
        gr: &str,
        ns: &str,
        name: &str,
        dry_run: bool,
        op: Op,
    ) -> Result<Outcome, ApiError> {
        self.send_write(gr, ns, name, dry_run, None, op).await
    }

    /// Commits `action`, decided from `seen`, if the object is still that version; `Ok(None)`
    /// if it changed meanwhile. Callers decide off the writer thread and retry on `None`:
    /// the single writer then only checks, stamps and commits, which kept it from being the
    /// bottleneck of busy clusters (patches and applies are most of a write's cost).
    pub async fn write_if_current(
        &self,
        gr: &str,
        ns: &str,
        name: &str,
        dry_run: bool,
        seen: Snapshot,
        action: Action,
    ) -> Result<Option<Outcome>, ApiError> {
        match self
            .send_write(
                gr,
                ns,
                name,
                dry_run,
                Some(seen),
                Box::new(move |_| Ok(action)),
            )
            .await
        {
            Err(e) if e.reason == STALE => Ok(None),
            other => other.map(Some),
        }
    }

    async fn send_write(
        &self,
        gr: &str,
        ns: &str,
        name: &str,
        dry_run: bool,
        expect: Option<Snapshot>,
        op: Op,
    ) -> Result<Outcome, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.writer
            .send(Req::Write {
                gr: gr.into(),
                ns: ns.into(),
                name: name.into(),
                dry_run,
                expect,
                op,
                reply,
            })
            .map_err(|_| ApiError::internal("storage is shutting down"))?;
        rx.await
            .map_err(|_| ApiError::internal("storage writer stopped"))?
    }

    /// The stored tokens, as read at open; empty after the first call.
    pub fn take_tokens(&self) -> Vec<TokenRow> {
        std::mem::take(&mut *self.tokens.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The issued tokens that had not expired at open, at most
    /// [`crate::token_request::MAX_ISSUED`]; empty after the first call.
    pub fn take_issued(&self) -> Vec<IssuedRow> {
        std::mem::take(&mut *self.issued.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Stores an issued token's row durably, deleting in the same commit the rows that expired
    /// by `now`, so the table holds no more than authentication does.
    pub async fn save_issued(&self, row: IssuedRow, now: i64) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.writer
            .send(Req::Issued { row, now, reply })
            .map_err(|_| Error::WriterGone)?;
        rx.await.map_err(|_| Error::WriterGone)?
    }

    /// This start's number (1 on a new database), which tokens minted now are stamped with.
    pub fn boot(&self) -> u64 {
        self.boot
    }

    /// Stores a token row durably, committed with the writes queued beside it; with
    /// `row.replace`, the same identity's rows from earlier starts go in the same commit.
    pub async fn save_token(&self, row: TokenRow) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.writer
            .send(Req::Token { row, reply })
            .map_err(|_| Error::WriterGone)?;
        rx.await.map_err(|_| Error::WriterGone)?
    }
}

#[cfg(test)]
mod testing {
    //! Helpers the tests of the store's modules share.

    use super::*;

    pub(super) fn event(rv: u64, ns: &str, name: &str) -> Arc<Event> {
        Arc::new(Event {
            rv,
            gr: "/configmaps".into(),
            ns: ns.into(),
            name: name.into(),
            typ: EventType::Modified,
            obj: Arc::new(Value::Null),
            old: None,
            lines: LineCache::default(),
        })
    }

    pub(super) fn put(v: Value) -> Op {
        Box::new(move |_| Ok(Action::Put(v)))
    }

    pub(super) fn names(evs: &[Arc<Event>]) -> Vec<(u64, &str, &str)> {
        evs.iter()
            .map(|e| (e.rv, e.name.as_str(), e.typ.as_str()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `levels` nested objects, the innermost holding a string with brackets in it.
    fn nested(levels: usize) -> String {
        let open = "{\"a\":".repeat(levels - 1);
        format!("{open}{{\"x\":\"[{{\\\"\"{}", "}".repeat(levels))
    }

    #[test]
    fn stored_text_reads_back_to_the_read_depth_and_no_further() {
        // Brackets inside strings do not count.
        let at = nested(MAX_READ_DEPTH);
        assert_eq!(nesting(&at), MAX_READ_DEPTH);
        let v: Value = read_back(&at).unwrap();
        assert!(v.is_object());
        let over = nested(MAX_READ_DEPTH + 1);
        assert!(read_back::<Value>(&over).is_err());
        // Within serde_json's own limit nothing changes, and damage is still an error.
        assert!(read_back::<Value>(&nested(10)).is_ok());
        assert!(read_back::<Value>(&at[..at.len() - 1]).is_err());
    }
}
