//! The object store: SQLite is the source of truth, an in-memory copy serves reads,
//! and one writer thread group-commits every queued write in a single transaction.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::auth::Identity;
use crate::error::{ApiError, Error};

/// How many past events stay available for watch resumption by default.
pub const RETAINED_EVENTS: u64 = 10_000;
/// Most writes folded into one transaction.
const MAX_BATCH: usize = 2048;

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

/// A read-modify-write step run on the writer thread, so it sees every earlier write.
pub type Op = Box<dyn FnOnce(Option<&Arc<Value>>) -> Result<Action, ApiError> + Send>;

enum Req {
    Write {
        gr: String,
        ns: String,
        name: String,
        dry_run: bool,
        op: Op,
        reply: oneshot::Sender<Result<Outcome, ApiError>>,
    },
    Token {
        token: String,
        identity: String,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

type ObjMap = HashMap<String, BTreeMap<(String, String), Arc<Value>>>;

struct State {
    rv: u64,
    objects: ObjMap,
}

struct Ring {
    events: VecDeque<Arc<Event>>,
    /// Every event with rv > window_start is in `events`.
    window_start: u64,
}

/// Shared handle to the store.
pub struct Store {
    state: RwLock<State>,
    ring: Mutex<Ring>,
    tx: broadcast::Sender<Arc<Event>>,
    writer: mpsc::UnboundedSender<Req>,
    tokens: RwLock<HashMap<String, Identity>>,
    retain: u64,
}

fn open(path: &Path) -> Result<Connection, Error> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS objects (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
             rv INTEGER NOT NULL, json TEXT NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS events (rv INTEGER PRIMARY KEY, gr TEXT NOT NULL, ns TEXT NOT NULL,
             name TEXT NOT NULL, type TEXT NOT NULL, json TEXT NOT NULL);
         CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS tokens (token TEXT PRIMARY KEY, identity TEXT NOT NULL);",
    )?;
    Ok(conn)
}

impl Store {
    /// Opens (or creates) the database and starts the writer thread.
    pub fn open(path: &Path, retain: u64) -> Result<Arc<Store>, Error> {
        let retain = retain.max(1);
        let conn = open(path)?;
        let rv: u64 = conn
            .query_row("SELECT v FROM meta WHERE k = 'rv'", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
            .unwrap_or(0) as u64;
        let mut objects: ObjMap = HashMap::new();
        {
            let mut stmt = conn.prepare("SELECT gr, ns, name, json FROM objects")?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })?;
            for row in rows {
                let (gr, ns, name, json) = row?;
                let v: Value =
                    serde_json::from_str(&json).map_err(|e| Error::Data(e.to_string()))?;
                objects
                    .entry(gr)
                    .or_default()
                    .insert((ns, name), Arc::new(v));
            }
        }
        let mut events = VecDeque::new();
        {
            let mut stmt =
                conn.prepare("SELECT rv, gr, ns, name, type, json FROM events ORDER BY rv")?;
            let rows = stmt.query_map([], |r| {
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
                // The latest event of a live object is that object: share it rather
                // than hold a second parsed copy.
                let rv_text = erv.to_string();
                let current = objects
                    .get(&gr)
                    .and_then(|m| m.get(&(ns.clone(), name.clone())))
                    .filter(|o| {
                        o.pointer("/metadata/resourceVersion")
                            .and_then(Value::as_str)
                            == Some(rv_text.as_str())
                    })
                    .cloned();
                let obj = match current {
                    Some(o) => o,
                    None => Arc::new(
                        serde_json::from_str(&json).map_err(|e| Error::Data(e.to_string()))?,
                    ),
                };
                events.push_back(Arc::new(Event {
                    rv: erv as u64,
                    gr,
                    ns,
                    name,
                    typ: EventType::parse(&typ),
                    obj,
                    old: None,
                }));
            }
        }
        let window_start = match events.front() {
            Some(e) if e.rv > 1 => e.rv - 1,
            Some(_) => 0,
            None => rv,
        };
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
            state: RwLock::new(State { rv, objects }),
            ring: Mutex::new(Ring {
                events,
                window_start,
            }),
            tx,
            writer: wtx,
            tokens: RwLock::new(tokens),
            retain,
        });
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

    pub fn get(&self, gr: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.state()
            .objects
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
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
            for ((ons, oname), v) in map.range((lower, Bound::Unbounded)) {
                if let Some(ns) = ns
                    && ons != ns
                {
                    if ons.as_str() > ns {
                        break;
                    }
                    continue;
                }
                if !keep(v) {
                    continue;
                }
                if let Some(l) = limit
                    && out.len() >= l
                {
                    next = Some((ons.clone(), oname.clone()));
                    break;
                }
                out.push(v.clone());
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

    /// Every object of every resource (for garbage collection sweeps).
    pub fn all_objects(&self) -> Vec<(String, Arc<Value>)> {
        let st = self.state();
        st.objects
            .iter()
            .flat_map(|(gr, m)| m.values().map(move |v| (gr.clone(), v.clone())))
            .collect()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Events after `rv`, or `None` when part of that range is no longer retained.
    pub fn events_since(&self, rv: u64) -> Option<Vec<Arc<Event>>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if rv < ring.window_start {
            return None;
        }
        let start = ring.events.partition_point(|e| e.rv <= rv);
        Some(ring.events.iter().skip(start).cloned().collect())
    }

    /// Oldest resourceVersion a watch may still resume from.
    pub fn window_start(&self) -> u64 {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .window_start
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
        let (reply, rx) = oneshot::channel();
        self.writer
            .send(Req::Write {
                gr: gr.into(),
                ns: ns.into(),
                name: name.into(),
                dry_run,
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
                    op,
                    reply,
                } => {
                    let key = (gr, ns, name);
                    let cur = match overlay.get(&key) {
                        Some(v) => v.clone(),
                        None => store.get(&key.0, &key.1, &key.2),
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
                            }));
                            overlay.insert(key, None);
                            replies.push((reply, Ok(Outcome::Deleted(obj)), true));
                        }
                    }
                }
            }
        }
        let commit = if events.is_empty() && token_writes.is_empty() {
            Ok(())
        } else {
            commit_batch(&mut conn, &events, &token_writes, base_rv, rv, store.retain)
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
            for e in &events {
                let map = st.objects.entry(e.gr.clone()).or_default();
                let k = (e.ns.clone(), e.name.clone());
                if e.typ == EventType::Deleted {
                    map.remove(&k);
                } else {
                    map.insert(k, e.obj.clone());
                }
            }
            st.rv = rv;
        }
        {
            let mut ring = store.ring.lock().unwrap_or_else(|e| e.into_inner());
            for e in &events {
                ring.events.push_back(Arc::new(Event {
                    rv: e.rv,
                    gr: e.gr.clone(),
                    ns: e.ns.clone(),
                    name: e.name.clone(),
                    typ: e.typ,
                    obj: e.obj.clone(),
                    old: e.old.as_deref().map(|o| Arc::new(metadata_only(o))),
                }));
            }
            while ring.events.len() as u64 > store.retain {
                if let Some(e) = ring.events.pop_front() {
                    ring.window_start = e.rv;
                }
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
    tokens: &[TokenWrite],
    base_rv: u64,
    rv: u64,
    retain: u64,
) -> Result<(), rusqlite::Error> {
    let tx = conn.transaction()?;
    {
        let mut put = tx.prepare_cached(
            "INSERT OR REPLACE INTO objects (gr, ns, name, rv, json) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut del =
            tx.prepare_cached("DELETE FROM objects WHERE gr = ?1 AND ns = ?2 AND name = ?3")?;
        let mut ev = tx.prepare_cached(
            "INSERT INTO events (rv, gr, ns, name, type, json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for e in events {
            let json = serde_json::to_string(&*e.obj).unwrap_or_default();
            if e.typ == EventType::Deleted {
                del.execute(params![e.gr, e.ns, e.name])?;
            } else {
                put.execute(params![e.gr, e.ns, e.name, e.rv as i64, json])?;
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
        // Prune the event log every so often rather than on every write.
        let every = retain.clamp(1, 1000);
        if rv / every != base_rv / every && rv > retain {
            tx.execute(
                "DELETE FROM events WHERE rv <= ?1",
                params![(rv - retain) as i64],
            )?;
        }
    }
    tx.commit()
}
