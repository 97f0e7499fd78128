//! The writer thread: it takes every queued write, runs each read-modify-write against the
//! latest state, commits the batch in one transaction and only then publishes it to the
//! in-memory copy, the event log and the watches.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{Connection, params};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::cache::{index_pod, node_of_pod, unindex_pod};
use super::watch::{Logged, metadata_only};
use super::{Action, Event, EventType, Json, LineCache, ObjKey, Op, Outcome, PODS, STALE};
use super::{IssuedRow, Snapshot, Store, TokenRow};
use crate::error::{ApiError, Error};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 2048;

/// What the writer thread is asked to do.
pub(super) enum Req {
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
        row: TokenRow,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// An issued token; rows expired by `now` are deleted in the same commit.
    Issued {
        row: IssuedRow,
        now: i64,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

type WriteReply = oneshot::Sender<Result<Outcome, ApiError>>;
/// A reply, its result, and whether the result depends on the commit succeeding.
type PendingReply = (WriteReply, Result<Outcome, ApiError>, bool);
type TokenWrite = (TokenRow, oneshot::Sender<Result<(), Error>>);
type IssuedWrite = (IssuedRow, i64, oneshot::Sender<Result<(), Error>>);

fn set_rv(v: &mut Value, rv: u64) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

pub(super) fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Req>,
    store: std::sync::Weak<Store>,
) {
    // Where the log on disk was last pruned to; the memory window's start at open.
    let mut pruned = store.upgrade().map_or(0, |s| s.window_start());
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
        let mut issued_writes: Vec<IssuedWrite> = Vec::new();
        for req in batch {
            match req {
                Req::Token { row, reply } => token_writes.push((row, reply)),
                Req::Issued { row, now, reply } => issued_writes.push((row, now, reply)),
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
                    // Text that cannot be read back is never overwritten from its `null`
                    // reading (that stored objects without metadata); it may be deleted.
                    let res = match res {
                        Ok(Action::Put(_)) if cur.as_ref().is_some_and(|c| c.is_null()) => {
                            Err(super::unreadable(&key.0, &key.1, &key.2))
                        }
                        other => other,
                    };
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
                            let mut v = if cur.is_null() {
                                super::stub(&key.1, &key.2)
                            } else {
                                (*cur).clone()
                            };
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
        let commit = if events.is_empty() && token_writes.is_empty() && issued_writes.is_empty() {
            Ok(())
        } else {
            commit_batch(
                &mut conn,
                &events,
                &jsons,
                &token_writes,
                &issued_writes,
                Window {
                    base_rv,
                    rv,
                    retain: store.retain,
                    floor: store.window_start(),
                    pruned: &mut pruned,
                },
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
            for (_, reply) in token_writes {
                let _ = reply.send(Err(Error::Data(format!("storage commit failed: {err}"))));
            }
            for (_, _, reply) in issued_writes {
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
            let now = std::time::Instant::now();
            for (e, json) in events.iter().zip(jsons) {
                ring.push(Logged {
                    rv: e.rv,
                    gr: e.gr.clone(),
                    ns: e.ns.clone(),
                    name: e.name.clone(),
                    typ: e.typ,
                    json,
                    old: e.old.as_deref().map(|o| Arc::new(metadata_only(o))),
                    at: now,
                });
            }
            ring.trim(store.retain, store.retained_bytes());
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
        for (_, reply) in token_writes {
            let _ = reply.send(Ok(()));
        }
        for (_, _, reply) in issued_writes {
            let _ = reply.send(Ok(()));
        }
    }
}

/// What decides how far a commit prunes the event log on disk.
struct Window<'a> {
    base_rv: u64,
    rv: u64,
    /// Events kept by count.
    retain: u64,
    /// The memory window's start: past its byte cap, older events can no longer be served,
    /// so the disk need not hold them either.
    floor: u64,
    /// Where the last prune left the log; moved by a prune.
    pruned: &'a mut u64,
}

fn commit_batch(
    conn: &mut Connection,
    events: &[Arc<Event>],
    jsons: &[Json],
    tokens: &[TokenWrite],
    issued: &[IssuedWrite],
    w: Window<'_>,
) -> Result<(), rusqlite::Error> {
    let Window {
        base_rv,
        rv,
        retain,
        floor,
        pruned,
    } = w;
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
        let mut revoke =
            tx.prepare_cached("DELETE FROM tokens WHERE identity = ?1 AND boot < ?2")?;
        let mut tok = tx.prepare_cached(
            "INSERT OR REPLACE INTO tokens (token, identity, boot) VALUES (?1, ?2, ?3)",
        )?;
        for (t, _) in tokens {
            if t.replace {
                revoke.execute(params![t.identity, t.boot as i64])?;
            }
            tok.execute(params![t.token, t.identity, t.boot as i64])?;
        }
        if let Some(now) = issued.iter().map(|(_, now, _)| *now).max() {
            // Indexed by expiry: only the rows that expired are visited.
            tx.prepare_cached("DELETE FROM issued_tokens WHERE expires_at <= ?1")?
                .execute(params![now])?;
        }
        let mut put_issued = tx.prepare_cached(
            "INSERT OR REPLACE INTO issued_tokens (token, expires_at, json) VALUES (?1, ?2, ?3)",
        )?;
        for (t, _, _) in issued {
            put_issued.execute(params![t.token, t.expires_at, t.json])?;
        }
    }
    if rv != base_rv {
        tx.execute(
            "INSERT OR REPLACE INTO meta (k, v) VALUES ('rv', ?1)",
            params![rv as i64],
        )?;
        // Prune the event log every so often rather than on every write, keeping the events
        // that hold live objects' text: by count, or as soon as the memory window has let go
        // of events by bytes (large objects would otherwise fill the disk between prunes).
        let every = retain.clamp(1, 1000);
        let by_count = if rv / every != base_rv / every && rv > retain {
            rv - retain
        } else {
            0
        };
        // The memory window trims by count too; only its byte trims run ahead of the count.
        let by_bytes = if floor > rv.saturating_sub(retain) {
            floor
        } else {
            0
        };
        let window = by_count.max(by_bytes);
        if window > *pruned {
            *pruned = window;
            let window = window as i64;
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
    use crate::store::testing::put;
    use crate::store::{Durability, WatchKey};

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
}
