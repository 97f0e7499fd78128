//! The object store: SQLite is the source of truth, an in-memory copy serves reads,
//! and one writer thread group-commits every queued write in a single transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::auth::Identity;
use crate::error::{ApiError, Error};

/// How many past events stay available for watch resumption by default.
pub const RETAINED_EVENTS: u64 = 10_000;
/// Most writes folded into one transaction.
const MAX_BATCH: usize = 2048;
/// Events a watch may have queued before it counts as too slow and is closed
/// (the client then relists), so a stalled client never holds up the writer.
pub const WATCH_BUFFER: usize = 4096;

/// What a write the server has answered survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A power cut or a kernel crash: each commit is fsynced before its writes are answered,
    /// as etcd does.
    #[default]
    PowerLoss,
    /// The server's own death (a kill, a panic): commits reach the OS before they are answered,
    /// and SQLite's write-ahead log fsyncs only when it checkpoints. A power cut keeps the
    /// database whole but may roll back its last commits. The embedded cluster's simulated node
    /// disks promise no more, and the fsync on every commit was the slowest step of each write.
    ProcessCrash,
}

impl Durability {
    fn synchronous(self) -> &'static str {
        match self {
            Durability::PowerLoss => "FULL",
            Durability::ProcessCrash => "NORMAL",
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::PowerLoss => "power-loss",
            Durability::ProcessCrash => "process-crash",
        })
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "power-loss" => Ok(Durability::PowerLoss),
            "process-crash" => Ok(Durability::ProcessCrash),
            other => Err(format!(
                "unknown durability {other:?}: expected power-loss or process-crash"
            )),
        }
    }
}

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

/// Watch lines of one event, by what makes them differ: the type the watcher sees, the version
/// it is served at, and whether managedFields are left out. A Node event reaches the
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

enum Req {
    Write {
        gr: String,
        ns: String,
        name: String,
        dry_run: bool,
        /// Run `op` only if the object is still the version this snapshot read; else the
        /// reply is [`STALE`] and nothing is written.
        expect: Option<Snapshot>,
        op: Op,
        reply: oneshot::Sender<Result<Outcome, ApiError>>,
    },
    Token {
        token: String,
        identity: String,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

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
}

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
    // Only text this store serialised itself is held, so it always parses.
    Arc::new(serde_json::from_str(json).unwrap_or(Value::Null))
}

const PODS: &str = "/pods";

/// A pod's `spec.nodeName`, if bound.
fn node_of_pod(pod: &Value) -> Option<&str> {
    pod.get("spec")?
        .get("nodeName")?
        .as_str()
        .filter(|n| !n.is_empty())
}

fn index_pod(
    index: &mut HashMap<String, BTreeSet<(String, String)>>,
    node: &str,
    key: (String, String),
) {
    index.entry(node.to_string()).or_default().insert(key);
}

fn unindex_pod(
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
struct Parsed {
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
    fn get(&self, json: &Json) -> Option<Arc<Value>> {
        self.by_text.get(&text_addr(json)).map(|(_, v)| v.clone())
    }

    fn forget(&mut self, json: &Json) {
        self.by_text.remove(&text_addr(json));
    }

    fn current(&self, (addr, n): (usize, u64)) -> bool {
        self.by_text.get(&addr).is_some_and(|(m, _)| *m == n)
    }

    fn insert(&mut self, json: &Json, obj: Arc<Value>) {
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

/// A retained event as the log keeps it: the object's JSON (shared with the cache
/// while it is the current version) and the previous object's selectable metadata.
struct Logged {
    rv: u64,
    gr: String,
    ns: String,
    name: String,
    typ: EventType,
    json: Json,
    old: Option<Arc<Value>>,
}

impl Logged {
    fn event(&self) -> Arc<Event> {
        Arc::new(Event {
            rv: self.rv,
            gr: self.gr.clone(),
            ns: self.ns.clone(),
            name: self.name.clone(),
            typ: self.typ,
            obj: parse(&self.json),
            old: self.old.clone(),
            lines: LineCache::default(),
        })
    }
}

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

struct Ring {
    events: VecDeque<Logged>,
    /// Every event with rv > window_start is in `events`.
    window_start: u64,
}

/// Which events a watch can see: a resource, optionally one namespace and one name.
/// `None` means any.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatchKey {
    pub gr: String,
    pub ns: Option<String>,
    pub name: Option<String>,
}

struct WatchSlot {
    tx: mpsc::Sender<Arc<Event>>,
    overflowed: Arc<AtomicBool>,
}

/// Open watches by key, so a committed event is handed only to the watches that
/// could match it instead of waking every watch.
#[derive(Default)]
struct Watchers {
    next: u64,
    by_key: HashMap<WatchKey, HashMap<u64, WatchSlot>>,
}

impl Watchers {
    /// Pushes `e` to every watch keyed to it without waiting; a full watch is closed.
    fn dispatch(&mut self, e: &Arc<Event>) {
        let ns = Some(e.ns.clone());
        let name = Some(e.name.clone());
        for (kns, kname) in [(&None, &None), (&None, &name), (&ns, &None), (&ns, &name)] {
            let key = WatchKey {
                gr: e.gr.clone(),
                ns: kns.clone(),
                name: kname.clone(),
            };
            let Some(slots) = self.by_key.get_mut(&key) else {
                continue;
            };
            slots.retain(|_, slot| match slot.tx.try_send(e.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    slot.overflowed.store(true, Ordering::Release);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
            if slots.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }
}

fn register(watchers: &Arc<Mutex<Watchers>>, key: WatchKey, buffer: usize) -> Subscription {
    let (tx, rx) = mpsc::channel(buffer);
    let overflowed = Arc::new(AtomicBool::new(false));
    let mut w = watchers.lock().unwrap_or_else(|e| e.into_inner());
    w.next += 1;
    let id = w.next;
    w.by_key.entry(key.clone()).or_default().insert(
        id,
        WatchSlot {
            tx,
            overflowed: overflowed.clone(),
        },
    );
    Subscription {
        rx,
        overflowed,
        key,
        id,
        watchers: watchers.clone(),
    }
}

/// One open watch's feed of committed events. Dropping it unregisters the watch.
pub struct Subscription {
    rx: mpsc::Receiver<Arc<Event>>,
    overflowed: Arc<AtomicBool>,
    key: WatchKey,
    id: u64,
    watchers: Arc<Mutex<Watchers>>,
}

impl Subscription {
    /// The next event, or `None` once the feed ended; then [`Subscription::overflowed`]
    /// says whether it ended because the watch fell too far behind.
    pub async fn recv(&mut self) -> Option<Arc<Event>> {
        self.rx.recv().await
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slots) = w.by_key.get_mut(&self.key) {
            slots.remove(&self.id);
            if slots.is_empty() {
                w.by_key.remove(&self.key);
            }
        }
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
        serde_json::from_str::<Doc>(json).ok().map(|d| d.metadata)
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

/// The pod index of the objects loaded at start-up.
fn pod_index(objects: &ObjMap) -> HashMap<String, BTreeSet<(String, String)>> {
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

/// Shared handle to the store.
pub struct Store {
    state: RwLock<State>,
    ring: Mutex<Ring>,
    /// Every event, for the server's own controllers (one receiver).
    tx: broadcast::Sender<Arc<Event>>,
    watchers: Arc<Mutex<Watchers>>,
    writer: mpsc::UnboundedSender<Req>,
    tokens: RwLock<HashMap<String, Identity>>,
    retain: u64,
}

/// The schema. An object's text is stored once, in the `events` row of the write that made its
/// current version; `objects` maps each live object to that row. Pruning the log keeps the rows
/// live objects point at, so `meta.window` marks where the complete log begins: every event
/// with a greater resourceVersion is there. (The first schema kept a second copy of every
/// object's text in `objects`, which was a quarter of the cost of each write.)
const SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS events (rv INTEGER PRIMARY KEY, gr TEXT NOT NULL, ns TEXT NOT NULL,
         name TEXT NOT NULL, type TEXT NOT NULL, json TEXT NOT NULL);
     CREATE TABLE IF NOT EXISTS objects (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
         rv INTEGER NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;
     CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
     CREATE TABLE IF NOT EXISTS tokens (token TEXT PRIMARY KEY, identity TEXT NOT NULL);";

fn open(path: &Path, durability: Durability) -> Result<Connection, Error> {
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", durability.synchronous())?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let first_schema = conn.prepare("SELECT json FROM objects LIMIT 0").is_ok();
    if first_schema {
        migrate_from_first_schema(&mut conn)?;
    }
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

/// Write-ahead log frames (pages) after which the log is copied into the database: SQLite's own
/// auto-checkpoint threshold.
const CHECKPOINT_FRAMES: i32 = 1000;

/// Hands the write-ahead log's checkpoints to a thread of their own.
///
/// SQLite runs its auto-checkpoint inside the commit that crosses the threshold, on the writer:
/// the copy of a thousand pages into the database and, at either durability, two fsyncs. In a
/// thousand-node rollout that came several times a second and was about a seventh of the
/// writer's CPU, and every write queued behind the batch waited for it. A second connection's
/// passive checkpoint never blocks the writer, and it changes nothing about what a commit has
/// made durable: the log already holds it.
fn checkpoint_elsewhere(
    writer: &mut Connection,
    path: &Path,
    durability: Durability,
) -> Result<(), Error> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "synchronous", durability.synchronous())?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    // One pending request is enough: a checkpoint copies whatever the log holds when it runs.
    let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("store-checkpoint".into())
        .spawn(move || {
            // Ends when the writer's connection, and with it the hook's sender, is gone.
            while rx.recv().is_ok() {
                if let Err(err) =
                    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0))
                {
                    tracing::warn!(%err, "write-ahead log checkpoint failed");
                }
            }
        })
        .map_err(|e| Error::io("store checkpoint thread", e))?;
    // Replaces SQLite's auto-checkpoint, which is itself a hook on the same callback.
    writer.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, frames: i32| {
        if frames >= CHECKPOINT_FRAMES {
            let _ = tx.try_send(());
        }
        Ok(())
    }))?;
    Ok(())
}

/// Moves a database of the first schema (each object's text in `objects` as well) to
/// [`SCHEMA`], in one transaction: an object whose event was pruned gets its text back in
/// `events`, under its own resourceVersion, which lies before the log's window and so is never
/// replayed to a watch.
fn migrate_from_first_schema(conn: &mut Connection) -> Result<(), Error> {
    let tx = conn.transaction()?;
    let rv: i64 = tx
        .query_row("SELECT v FROM meta WHERE k = 'rv'", [], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let first_event: Option<i64> = tx.query_row("SELECT MIN(rv) FROM events", [], |r| r.get(0))?;
    let window = match first_event {
        Some(e) => (e - 1).max(0),
        None => rv,
    };
    tx.execute_batch(
        "INSERT INTO events (rv, gr, ns, name, type, json)
             SELECT rv, gr, ns, name, 'MODIFIED', json FROM objects
             WHERE rv NOT IN (SELECT rv FROM events);
         CREATE TABLE objects_v2 (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
             rv INTEGER NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;
         INSERT INTO objects_v2 (gr, ns, name, rv) SELECT gr, ns, name, rv FROM objects;
         DROP TABLE objects;
         ALTER TABLE objects_v2 RENAME TO objects;",
    )?;
    tx.execute(
        "INSERT OR REPLACE INTO meta (k, v) VALUES ('window', ?1)",
        params![window],
    )?;
    tx.commit()?;
    Ok(())
}

impl Store {
    /// Opens (or creates) the database and starts the writer thread.
    pub fn open(path: &Path, retain: u64, durability: Durability) -> Result<Arc<Store>, Error> {
        let retain = retain.max(1);
        let conn = open(path, durability)?;
        let rv: u64 = conn
            .query_row("SELECT v FROM meta WHERE k = 'rv'", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
            .unwrap_or(0) as u64;
        let window_start: u64 = conn
            .query_row("SELECT v FROM meta WHERE k = 'window'", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
            .unwrap_or(0) as u64;
        let mut objects: ObjMap = HashMap::new();
        let mut object_rvs: HashMap<ObjKey, i64> = HashMap::new();
        {
            let stored: i64 = conn.query_row("SELECT COUNT(*) FROM objects", [], |r| r.get(0))?;
            let mut stmt = conn.prepare(
                "SELECT o.gr, o.ns, o.name, o.rv, e.json FROM objects o JOIN events e ON e.rv = o.rv",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })?;
            for row in rows {
                let (gr, ns, name, orv, json) = row?;
                serde_json::from_str::<serde::de::IgnoredAny>(&json)
                    .map_err(|e| Error::Data(e.to_string()))?;
                objects
                    .entry(gr.clone())
                    .or_default()
                    .insert((ns.clone(), name.clone()), Arc::from(json));
                object_rvs.insert((gr, ns, name), orv);
            }
            if object_rvs.len() as i64 != stored {
                return Err(Error::Data(format!(
                    "{} stored objects have no text in the event log",
                    stored - object_rvs.len() as i64
                )));
            }
        }
        let mut events = VecDeque::new();
        {
            let mut stmt = conn.prepare(
                "SELECT rv, gr, ns, name, type, json FROM events WHERE rv > ?1 ORDER BY rv",
            )?;
            let rows = stmt.query_map([window_start as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })?;
            for row in rows {
                let (erv, gr, ns, name, typ, json) = row?;
                // The latest event of a live object is that object: share its text
                // rather than hold a second copy.
                let key = (gr, ns, name);
                let current = (object_rvs.get(&key) == Some(&erv))
                    .then(|| {
                        objects
                            .get(&key.0)
                            .and_then(|m| m.get(&(key.1.clone(), key.2.clone())))
                            .cloned()
                    })
                    .flatten();
                let json = match current {
                    Some(o) => o,
                    None => {
                        serde_json::from_str::<serde::de::IgnoredAny>(&json)
                            .map_err(|e| Error::Data(e.to_string()))?;
                        Arc::from(json)
                    }
                };
                let (gr, ns, name) = key;
                events.push_back(Logged {
                    rv: erv as u64,
                    gr,
                    ns,
                    name,
                    typ: EventType::parse(&typ),
                    json,
                    old: None,
                });
            }
        }
        let mut tokens = HashMap::new();
        {
            let mut stmt = conn.prepare("SELECT token, identity FROM tokens")?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            for row in rows {
                let (t, i) = row?;
                if let Some(id) = Identity::parse(&i) {
                    tokens.insert(t, id);
                }
            }
        }
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
            ring: Mutex::new(Ring {
                events,
                window_start,
            }),
            tx,
            watchers: Arc::default(),
            writer: wtx,
            tokens: RwLock::new(tokens),
            retain,
        });
        let mut conn = conn;
        checkpoint_elsewhere(&mut conn, path, durability)?;
        let weak = Arc::downgrade(&store);
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer_loop(conn, wrx, weak))
            .map_err(|e| Error::io("store writer thread", e))?;
        Ok(store)
    }

    fn state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.state().rv
    }

    /// The resourceVersion of the last change to `gr` since this store opened; 0 if none.
    pub fn changed_at(&self, gr: &str) -> u64 {
        self.state().changed.get(gr).copied().unwrap_or(0)
    }

    pub fn get(&self, gr: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let st = self.state();
        Some(st.object(st.text(gr, ns, name)?))
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
        let st = self.state();
        let mut out = Vec::new();
        let mut next = None;
        if let Some(map) = st.objects.get(gr) {
            let lower = match after {
                Some(k) => Bound::Excluded(k),
                None => match ns {
                    Some(ns) => Bound::Included((ns.to_string(), String::new())),
                    None => Bound::Unbounded,
                },
            };
            let indexed = match keep.pods_on_node() {
                Some(node) if gr == PODS => Some(st.pods_by_node.get(node)),
                _ => None,
            };
            let targeted = indexed.is_some() || name.is_some();
            let entries: Box<dyn Iterator<Item = (&(String, String), &Json)>> = match indexed {
                Some(Some(keys)) => Box::new(
                    keys.range((lower, Bound::Unbounded))
                        .filter_map(|k| map.get_key_value(k)),
                ),
                Some(None) => Box::new(std::iter::empty()),
                None => Box::new(map.range((lower, Bound::Unbounded))),
            };
            for ((ons, oname), json) in entries {
                if let Some(ns) = ns
                    && ons != ns
                {
                    if ons.as_str() > ns {
                        break;
                    }
                    continue;
                }
                if name.is_some_and(|n| n != oname) {
                    continue;
                }
                if !keep.may_match(json) {
                    continue;
                }
                // A read of a few named objects keeps its parses (the one rendered config a
                // thousand daemons read after their reboots, the pods of a node being drained);
                // a read of a whole resource does not flush the kept copies of hot objects.
                let v = if targeted {
                    st.object(json)
                } else {
                    st.peek(json).unwrap_or_else(|| parse(json))
                };
                if !keep.matches(&v) {
                    continue;
                }
                if let Some(l) = limit
                    && out.len() >= l
                {
                    next = Some((ons.clone(), oname.clone()));
                    break;
                }
                out.push(v);
            }
        }
        // `next` marks the first object not returned; continue after the last returned.
        let cont = next.and_then(|_| {
            out.last().map(|v| {
                let m = &v["metadata"];
                (
                    m["namespace"].as_str().unwrap_or("").to_string(),
                    m["name"].as_str().unwrap_or("").to_string(),
                )
            })
        });
        (st.rv, out, cont)
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
        register(&self.watchers, key, WATCH_BUFFER)
    }

    /// How many watches are open, so a caller can tell that a client's watch started.
    pub fn open_watches(&self) -> usize {
        let w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        w.by_key.values().map(HashMap::len).sum()
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

    pub fn identity_for(&self, token: &str) -> Option<Identity> {
        self.tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
    }

    /// Any stored token for this identity (used to reuse the admin token across restarts).
    pub fn token_of(&self, id: &Identity) -> Option<String> {
        let t = self.tokens.read().unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<&String> = t.iter().filter(|(_, i)| *i == id).map(|(k, _)| k).collect();
        found.sort();
        found.first().map(|s| s.to_string())
    }

    /// Stores a token durably, then makes it usable.
    pub async fn add_token(&self, token: String, identity: Identity) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.writer
            .send(Req::Token {
                token: token.clone(),
                identity: identity.to_string(),
                reply,
            })
            .map_err(|_| Error::WriterGone)?;
        rx.await.map_err(|_| Error::WriterGone)??;
        self.tokens
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token, identity);
        Ok(())
    }
}

type ObjKey = (String, String, String);
type WriteReply = oneshot::Sender<Result<Outcome, ApiError>>;
/// A reply, its result, and whether the result depends on the commit succeeding.
type PendingReply = (WriteReply, Result<Outcome, ApiError>, bool);
type TokenWrite = (String, String, oneshot::Sender<Result<(), Error>>);

/// What the retained event log keeps of an event's previous object: enough for label
/// and `metadata.*` field selectors to see transitions on resume, without holding a
/// second full copy of every recently changed object.
fn metadata_only(v: &Value) -> Value {
    let m = &v["metadata"];
    let mut meta = serde_json::Map::new();
    for k in ["name", "namespace", "labels"] {
        if let Some(x) = m.get(k) {
            meta.insert(k.into(), x.clone());
        }
    }
    serde_json::json!({ "metadata": meta })
}

fn set_rv(v: &mut Value, rv: u64) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Req>,
    store: std::sync::Weak<Store>,
) {
    while let Some(first) = rx.blocking_recv() {
        let Some(store) = store.upgrade() else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let base_rv = store.current_rv();
        let mut rv = base_rv;
        let mut overlay: HashMap<ObjKey, Option<Arc<Value>>> = HashMap::new();
        let mut events: Vec<Arc<Event>> = Vec::new();
        let mut replies: Vec<PendingReply> = Vec::new();
        let mut token_writes: Vec<TokenWrite> = Vec::new();
        for req in batch {
            match req {
                Req::Token {
                    token,
                    identity,
                    reply,
                } => token_writes.push((token, identity, reply)),
                Req::Write {
                    gr,
                    ns,
                    name,
                    dry_run,
                    expect,
                    op,
                    reply,
                } => {
                    let key = (gr, ns, name);
                    let cur = match expect {
                        Some(seen) => {
                            let current = !overlay.contains_key(&key)
                                && match (store.text(&key.0, &key.1, &key.2), &seen.json) {
                                    (Some(a), Some(b)) => Arc::ptr_eq(&a, b),
                                    (None, None) => true,
                                    _ => false,
                                };
                            if !current {
                                let stale = ApiError::new(409, STALE, "the object changed");
                                replies.push((reply, Err(stale), false));
                                continue;
                            }
                            seen.object
                        }
                        None => match overlay.get(&key) {
                            Some(v) => v.clone(),
                            None => store.get(&key.0, &key.1, &key.2),
                        },
                    };
                    let res =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(cur.as_ref())))
                            .unwrap_or_else(|_| {
                                Err(ApiError::internal("write operation panicked"))
                            });
                    match res {
                        Err(e) => replies.push((reply, Err(e), false)),
                        Ok(Action::Keep) => {
                            replies.push((reply, Ok(Outcome::Unchanged(cur)), false))
                        }
                        Ok(Action::Put(v)) => {
                            if dry_run {
                                let v = Arc::new(v);
                                let o = if cur.is_some() {
                                    Outcome::Updated(v)
                                } else {
                                    Outcome::Created(v)
                                };
                                replies.push((reply, Ok(o), false));
                                continue;
                            }
                            rv += 1;
                            let mut v = v;
                            set_rv(&mut v, rv);
                            let obj = Arc::new(v);
                            let typ = if cur.is_some() {
                                EventType::Modified
                            } else {
                                EventType::Added
                            };
                            let out = if cur.is_some() {
                                Outcome::Updated(obj.clone())
                            } else {
                                Outcome::Created(obj.clone())
                            };
                            events.push(Arc::new(Event {
                                rv,
                                gr: key.0.clone(),
                                ns: key.1.clone(),
                                name: key.2.clone(),
                                typ,
                                obj: obj.clone(),
                                old: cur,
                                lines: LineCache::default(),
                            }));
                            overlay.insert(key, Some(obj));
                            replies.push((reply, Ok(out), true));
                        }
                        Ok(Action::Delete) => {
                            let Some(cur) = cur else {
                                replies.push((
                                    reply,
                                    Err(ApiError::internal("delete of a missing object")),
                                    false,
                                ));
                                continue;
                            };
                            if dry_run {
                                replies.push((reply, Ok(Outcome::Deleted(cur)), false));
                                continue;
                            }
                            rv += 1;
                            let mut v = (*cur).clone();
                            set_rv(&mut v, rv);
                            let obj = Arc::new(v);
                            events.push(Arc::new(Event {
                                rv,
                                gr: key.0.clone(),
                                ns: key.1.clone(),
                                name: key.2.clone(),
                                typ: EventType::Deleted,
                                obj: obj.clone(),
                                old: Some(cur),
                                lines: LineCache::default(),
                            }));
                            overlay.insert(key, None);
                            replies.push((reply, Ok(Outcome::Deleted(obj)), true));
                        }
                    }
                }
            }
        }
        let jsons: Vec<Json> = events
            .iter()
            .map(|e| Arc::from(serde_json::to_string(&*e.obj).unwrap_or_default()))
            .collect();
        let commit = if events.is_empty() && token_writes.is_empty() {
            Ok(())
        } else {
            commit_batch(
                &mut conn,
                &events,
                &jsons,
                &token_writes,
                base_rv,
                rv,
                store.retain,
            )
        };
        if let Err(err) = commit {
            tracing::error!(%err, "commit failed");
            for (reply, res, wrote) in replies {
                let res = if wrote {
                    Err(ApiError::internal(format!("storage commit failed: {err}")))
                } else {
                    res
                };
                let _ = reply.send(res);
            }
            for (_, _, reply) in token_writes {
                let _ = reply.send(Err(Error::Data(format!("storage commit failed: {err}"))));
            }
            continue;
        }
        {
            let mut st = store.state.write().unwrap_or_else(|e| e.into_inner());
            for (e, json) in events.iter().zip(&jsons) {
                match st.changed.get_mut(&e.gr) {
                    Some(at) => *at = rv,
                    None => {
                        st.changed.insert(e.gr.clone(), rv);
                    }
                }
                let map = st.objects.entry(e.gr.clone()).or_default();
                let k = (e.ns.clone(), e.name.clone());
                let old = if e.typ == EventType::Deleted {
                    map.remove(&k)
                } else {
                    map.insert(k, json.clone())
                };
                if let Some(old) = old {
                    st.parsed
                        .get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .forget(&old);
                }
                if e.gr == PODS {
                    let key = (e.ns.clone(), e.name.clone());
                    if let Some(node) = e.old.as_deref().and_then(node_of_pod) {
                        unindex_pod(&mut st.pods_by_node, node, &key);
                    }
                    if e.typ != EventType::Deleted
                        && let Some(node) = node_of_pod(&e.obj)
                    {
                        index_pod(&mut st.pods_by_node, node, key);
                    }
                }
                // Only updates: most created objects (events, pods) are never written again.
                if e.typ == EventType::Modified {
                    st.parsed
                        .get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(json, e.obj.clone());
                }
            }
            st.rv = rv;
        }
        {
            let mut ring = store.ring.lock().unwrap_or_else(|e| e.into_inner());
            for (e, json) in events.iter().zip(jsons) {
                ring.events.push_back(Logged {
                    rv: e.rv,
                    gr: e.gr.clone(),
                    ns: e.ns.clone(),
                    name: e.name.clone(),
                    typ: e.typ,
                    json,
                    old: e.old.as_deref().map(|o| Arc::new(metadata_only(o))),
                });
            }
            while ring.events.len() as u64 > store.retain {
                if let Some(e) = ring.events.pop_front() {
                    ring.window_start = e.rv;
                }
            }
        }
        {
            let mut w = store.watchers.lock().unwrap_or_else(|e| e.into_inner());
            for e in &events {
                w.dispatch(e);
            }
        }
        for e in events {
            let _ = store.tx.send(e);
        }
        for (reply, res, _) in replies {
            let _ = reply.send(res);
        }
        for (_, _, reply) in token_writes {
            let _ = reply.send(Ok(()));
        }
    }
}

fn commit_batch(
    conn: &mut Connection,
    events: &[Arc<Event>],
    jsons: &[Json],
    tokens: &[TokenWrite],
    base_rv: u64,
    rv: u64,
    retain: u64,
) -> Result<(), rusqlite::Error> {
    let tx = conn.transaction()?;
    {
        let mut put = tx.prepare_cached(
            "INSERT OR REPLACE INTO objects (gr, ns, name, rv) VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut del =
            tx.prepare_cached("DELETE FROM objects WHERE gr = ?1 AND ns = ?2 AND name = ?3")?;
        let mut ev = tx.prepare_cached(
            "INSERT INTO events (rv, gr, ns, name, type, json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (e, json) in events.iter().zip(jsons) {
            let json: &str = json;
            if e.typ == EventType::Deleted {
                del.execute(params![e.gr, e.ns, e.name])?;
            } else {
                put.execute(params![e.gr, e.ns, e.name, e.rv as i64])?;
            }
            ev.execute(params![
                e.rv as i64,
                e.gr,
                e.ns,
                e.name,
                e.typ.as_str(),
                json
            ])?;
        }
        let mut tok =
            tx.prepare_cached("INSERT OR REPLACE INTO tokens (token, identity) VALUES (?1, ?2)")?;
        for (t, i, _) in tokens {
            tok.execute(params![t, i])?;
        }
    }
    if rv != base_rv {
        tx.execute(
            "INSERT OR REPLACE INTO meta (k, v) VALUES ('rv', ?1)",
            params![rv as i64],
        )?;
        // Prune the event log every so often rather than on every write, keeping the events
        // that hold live objects' text.
        let every = retain.clamp(1, 1000);
        if rv / every != base_rv / every && rv > retain {
            let window = (rv - retain) as i64;
            tx.execute(
                "DELETE FROM events WHERE rv <= ?1 AND rv NOT IN (SELECT rv FROM objects)",
                params![window],
            )?;
            tx.execute(
                "INSERT OR REPLACE INTO meta (k, v) VALUES ('window', ?1)",
                params![window],
            )?;
        }
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(rv: u64, ns: &str, name: &str) -> Arc<Event> {
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

    fn register(w: &Arc<Mutex<Watchers>>, ns: Option<&str>, name: Option<&str>) -> Subscription {
        let key = WatchKey {
            gr: "/configmaps".into(),
            ns: ns.map(String::from),
            name: name.map(String::from),
        };
        super::register(w, key, 2)
    }

    #[test]
    fn events_reach_only_watches_keyed_to_them() {
        let w = Arc::new(Mutex::new(Watchers::default()));
        let mut all = register(&w, None, None);
        let mut in_ns = register(&w, Some("a"), None);
        let mut named = register(&w, Some("a"), Some("x"));
        let mut other = register(&w, None, Some("y"));
        w.lock().unwrap().dispatch(&event(1, "a", "x"));
        assert_eq!(all.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert_eq!(in_ns.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert_eq!(named.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert!(other.rx.try_recv().is_err(), "a watch on another name");
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

    fn put(v: Value) -> Op {
        Box::new(move |_| Ok(Action::Put(v)))
    }

    fn names(evs: &[Arc<Event>]) -> Vec<(u64, &str, &str)> {
        evs.iter()
            .map(|e| (e.rv, e.name.as_str(), e.typ.as_str()))
            .collect()
    }

    #[test]
    fn durability_picks_whether_each_commit_is_fsynced() {
        let dir = tempfile::tempdir().unwrap();
        let synchronous = |d: Durability| -> i64 {
            let conn = open(&dir.path().join(d.to_string()), d).unwrap();
            conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap()
        };
        // SQLite's numbers: 2 is FULL (fsync at each commit), 1 NORMAL (at checkpoints).
        assert_eq!(synchronous(Durability::PowerLoss), 2);
        assert_eq!(synchronous(Durability::ProcessCrash), 1);
        assert_eq!(Durability::default(), Durability::PowerLoss);
        for d in [Durability::PowerLoss, Durability::ProcessCrash] {
            assert_eq!(d.to_string().parse::<Durability>(), Ok(d));
        }
        let err = "fsync".parse::<Durability>().unwrap_err();
        assert!(err.contains("power-loss or process-crash"), "{err}");
    }

    #[tokio::test]
    async fn the_log_is_checkpointed_into_the_database_off_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = Store::open(&path, 100, Durability::ProcessCrash).unwrap();
        let db_size = || std::fs::metadata(&path).map_or(0, |m| m.len());
        let before = db_size();
        // Each object takes a page or more of the log: well past one checkpoint's worth.
        let text = "x".repeat(6000);
        for i in 0..2 * CHECKPOINT_FRAMES {
            let v = serde_json::json!({"metadata": {"name": format!("o{i}")}, "data": text});
            store
                .write("/configmaps", "n", &format!("o{i}"), false, put(v))
                .await
                .unwrap();
        }
        // The writer's hook replaces SQLite's own auto-checkpoint: without the checkpoint
        // thread, the log would take every page and the database file none.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while db_size() < before + 6000 * CHECKPOINT_FRAMES as u64 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file stayed at {} bytes",
                db_size()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        drop(store);
        let store = Store::open(&path, 100, Durability::ProcessCrash).unwrap();
        let last = format!("o{}", 2 * CHECKPOINT_FRAMES - 1);
        assert_eq!(store.get("/configmaps", "n", &last).unwrap()["data"], text);
    }

    #[tokio::test]
    async fn a_database_of_the_first_schema_opens_with_everything_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            // As the first schema left it: "a" unchanged since its event was pruned, "c"
            // deleted, "b" written last.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                r#"CREATE TABLE objects (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
                       rv INTEGER NOT NULL, json TEXT NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;
                   CREATE TABLE events (rv INTEGER PRIMARY KEY, gr TEXT NOT NULL, ns TEXT NOT NULL,
                       name TEXT NOT NULL, type TEXT NOT NULL, json TEXT NOT NULL);
                   CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
                   CREATE TABLE tokens (token TEXT PRIMARY KEY, identity TEXT NOT NULL);
                   INSERT INTO objects VALUES ('/configmaps', 'n', 'a', 2, '{"metadata":{"name":"a"}}');
                   INSERT INTO objects VALUES ('/configmaps', 'n', 'b', 5, '{"metadata":{"name":"b"},"v":2}');
                   INSERT INTO events VALUES (4, '/configmaps', 'n', 'c', 'DELETED', '{"metadata":{"name":"c"}}');
                   INSERT INTO events VALUES (5, '/configmaps', 'n', 'b', 'MODIFIED', '{"metadata":{"name":"b"},"v":2}');
                   INSERT INTO meta VALUES ('rv', 5);"#,
            )
            .unwrap();
        }
        for _ in 0..2 {
            let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
            assert_eq!(store.current_rv(), 5);
            assert_eq!(
                store.get("/configmaps", "n", "a").unwrap()["metadata"]["name"],
                "a"
            );
            assert_eq!(store.get("/configmaps", "n", "b").unwrap()["v"], 2);
            assert!(store.get("/configmaps", "n", "c").is_none());
            assert_eq!(store.window_start(), 3);
            let all = WatchKey {
                gr: "/configmaps".into(),
                ns: None,
                name: None,
            };
            let replay = store.events_since(3, &all).unwrap();
            assert_eq!(names(&replay), [(4, "c", "DELETED"), (5, "b", "MODIFIED")]);
            assert!(store.events_since(2, &all).is_none(), "before the window");
        }
        let conn = Connection::open(&path).unwrap();
        assert!(
            conn.prepare("SELECT json FROM objects").is_err(),
            "one copy of each object's text"
        );
    }

    #[tokio::test]
    async fn pruning_the_log_keeps_the_text_of_objects_never_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let obj = |name: &str, v: u32| serde_json::json!({"metadata": {"name": name}, "v": v});
        {
            let store = Store::open(&path, 3, Durability::PowerLoss).unwrap();
            store
                .write("/configmaps", "n", "still", false, put(obj("still", 0)))
                .await
                .unwrap();
            for v in 1..=20 {
                store
                    .write("/configmaps", "n", "busy", false, put(obj("busy", v)))
                    .await
                    .unwrap();
            }
        }
        let store = Store::open(&path, 3, Durability::PowerLoss).unwrap();
        assert_eq!(store.get("/configmaps", "n", "still").unwrap()["v"], 0);
        assert_eq!(store.get("/configmaps", "n", "busy").unwrap()["v"], 20);
        // The window is where the last prune left it; everything after it replays in order.
        let window = store.window_start();
        assert!((17..21).contains(&window), "window at {window}");
        let all = WatchKey {
            gr: "/configmaps".into(),
            ns: None,
            name: None,
        };
        let replay = store.events_since(window, &all).unwrap();
        let rvs: Vec<u64> = replay.iter().map(|e| e.rv).collect();
        assert_eq!(rvs, ((window + 1)..=21).collect::<Vec<_>>());
        let conn = Connection::open(&path).unwrap();
        let logged: i64 = conn
            .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            logged as u64,
            1 + (21 - window),
            "pruned but for the live object's text"
        );
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

    #[test]
    fn a_full_watch_is_closed_as_overflowed_and_dropping_unregisters() {
        let w = Arc::new(Mutex::new(Watchers::default()));
        let mut slow = register(&w, None, None);
        for rv in 1..=3 {
            w.lock().unwrap().dispatch(&event(rv, "a", "x"));
        }
        assert!(slow.overflowed());
        assert!(w.lock().unwrap().by_key.is_empty());
        assert_eq!(slow.rx.try_recv().map(|e| e.rv).ok(), Some(1));
        assert_eq!(slow.rx.try_recv().map(|e| e.rv).ok(), Some(2));
        assert!(matches!(
            slow.rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        let live = register(&w, Some("a"), None);
        drop(live);
        assert!(w.lock().unwrap().by_key.is_empty());
    }
}
