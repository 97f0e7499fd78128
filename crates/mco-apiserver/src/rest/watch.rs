//! WATCH: the initial list or the replay from a resourceVersion, then committed events as
//! each watcher's selectors see them, with bookmarks and `410 Gone`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http::{HeaderMap, StatusCode, header};
use serde_json::{Value, json};

use super::encode::{Served, out, wants_table};
use super::list::Filter;
use super::{App, Target};
use crate::error::ApiError;
use crate::objects::meta_str;
use crate::registry::ResourceInfo;
use crate::store::{Event, EventType, WatchKey};
use crate::tables::{self, Include};

/// Decides whether (and as what) a committed event reaches a filtered watcher.
fn visible(e: &Event, gr: &str, ns: Option<&str>, f: &Filter) -> Option<(EventType, Arc<Value>)> {
    if e.gr != gr || ns.is_some_and(|ns| ns != e.ns) {
        return None;
    }
    match e.typ {
        EventType::Added => f.matches(&e.obj).then(|| (EventType::Added, e.obj.clone())),
        EventType::Deleted => f
            .matches(&e.obj)
            .then(|| (EventType::Deleted, e.obj.clone())),
        EventType::Modified => {
            let now = f.matches(&e.obj);
            match (e.old.as_ref().map(|o| f.matches(o)), now) {
                (Some(true), true) | (None, true) => Some((EventType::Modified, e.obj.clone())),
                (Some(true), false) => Some((EventType::Deleted, e.obj.clone())),
                (Some(false), true) => Some((EventType::Added, e.obj.clone())),
                _ => None,
            }
        }
    }
}

struct WatchFmt {
    info: ResourceInfo,
    version: String,
    /// `group/version`, the key of an event's shared lines: core and `events.k8s.io` Events
    /// share one event, not its line. Made once: a line is looked up per event and watcher.
    api_version: String,
    table: Option<Include>,
    slim: bool,
}

impl WatchFmt {
    fn line(&self, typ: &str, obj: &Value) -> Bytes {
        #[derive(serde::Serialize)]
        struct Line<'a, T> {
            r#type: &'a str,
            object: T,
        }
        let b = match self.table {
            Some(inc) => {
                let o = out(&self.info, &self.version, obj);
                let rv = meta_str(&o, "resourceVersion")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let object = tables::table(&self.info, &self.version, &[o], inc, rv, None);
                serde_json::to_vec(&Line {
                    r#type: typ,
                    object,
                })
            }
            None => serde_json::to_vec(&Line {
                r#type: typ,
                object: Served::new(&self.info, &self.version, obj).slim(self.slim),
            }),
        };
        let mut b = b.unwrap_or_default();
        b.push(b'\n');
        Bytes::from(b)
    }
    /// [`WatchFmt::line`] for a live event, shared with every other watcher that sends the
    /// same line for it. Tables carry the watcher's column choice and are written per watcher.
    fn event_line(&self, e: &Event, typ: EventType, obj: &Value) -> Bytes {
        if self.table.is_some() {
            return self.line(typ.as_str(), obj);
        }
        e.lines.get_or_make(typ, &self.api_version, self.slim, || {
            self.line(typ.as_str(), obj)
        })
    }
    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut m = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            m["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let o = json!({"kind": self.info.kind, "apiVersion": self.info.api_version(&self.version), "metadata": m});
        let mut b =
            serde_json::to_vec(&json!({"type": "BOOKMARK", "object": o})).unwrap_or_default();
        b.push(b'\n');
        Bytes::from(b)
    }
}

fn error_line(e: &ApiError) -> Bytes {
    let mut b =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// The oldest resourceVersion a watch of `t` may resume from. kube-apiserver's watch cache of a
/// resource holds its events only since the cache started: when the server started, and for a
/// custom resource when its definition last changed (its storage is then made anew); and of
/// those, the last 100 and those of the last 75 s (see [`crate::store::Store::history_start`]).
/// Before that, or before the store's retained events, a watch is answered 410 Expired and its
/// client relists, as it would against kube-apiserver.
fn resumable_from(app: &App, t: &Target) -> u64 {
    let defined = t
        .info
        .crd_object
        .as_deref()
        .and_then(|crd| meta_str(crd, "resourceVersion"))
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    defined
        .max(app.store.opened_rv())
        .max(app.store.history_start(&t.info.gr()))
        .max(app.store.window_start())
}

pub(super) fn watch(
    app: &Arc<App>,
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let filter = Filter::parse(t, q)?;
    let gr = t.info.gr();
    let ns = t.ns.clone();
    let fmt = WatchFmt {
        info: t.info.clone(),
        version: t.version.clone(),
        api_version: t.info.api_version(&t.version),
        table: wants_table(headers)
            .then(|| Include::parse(q.get("includeObject").map(String::as_str))),
        slim: t.slim,
    };
    let bookmarks = q
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(1800);
    let key = WatchKey {
        gr: gr.clone(),
        ns: ns.clone(),
        name: filter.only_name(),
    };
    let mut rx = app.store.watch(key.clone());
    let rv_param = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let mut first: Vec<Bytes> = Vec::new();
    let mut last: u64;
    let mut end_now = false;
    if rv_param.is_empty() || rv_param == "0" || send_initial {
        let (rv, items, _) =
            app.store
                .list_named(&gr, ns.as_deref(), key.name.as_deref(), None, None, &filter);
        first.extend(items.iter().map(|v| fmt.line("ADDED", v)));
        last = rv;
        if send_initial && bookmarks {
            first.push(fmt.bookmark(rv, true));
        }
    } else {
        let from: u64 = rv_param
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param}")))?;
        last = from;
        let start = resumable_from(app, t);
        match app.store.events_since(from, &key).filter(|_| from >= start) {
            None => {
                let e = ApiError::gone(format!("too old resource version: {from} ({start})"));
                first.push(error_line(&e));
                end_now = true;
            }
            Some(evs) => {
                for e in evs {
                    last = last.max(e.rv);
                    if let Some((typ, obj)) = visible(&e, &gr, ns.as_deref(), &filter) {
                        first.push(fmt.line(typ.as_str(), &obj));
                    }
                }
            }
        }
    }
    let (tx, brx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let store = app.store.clone();
    tokio::spawn(async move {
        for b in first {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        if end_now {
            return;
        }
        // Sends one event if this watch has not sent it yet and may see it; false once the
        // client is gone.
        let send = async |e: Arc<Event>, last: &mut u64| -> bool {
            if e.rv <= *last {
                return true;
            }
            *last = e.rv;
            match visible(&e, &gr, ns.as_deref(), &filter) {
                Some((typ, obj)) => tx.send(fmt.event_line(&e, typ, &obj)).await.is_ok(),
                None => true,
            }
        };
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        // As kube-apiserver's watch cache, a bookmark 2 s before the timeout as well as
        // periodically, so a client resumes from as close to now as can be.
        let pre_deadline = tokio::time::sleep(Duration::from_secs(timeout.saturating_sub(2)));
        tokio::pin!(pre_deadline);
        let mut pre_sent = !bookmarks || timeout <= 2;
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        loop {
            let progress = tokio::select! {
                _ = &mut deadline => return,
                _ = tick.tick(), if bookmarks => true,
                _ = &mut pre_deadline, if !pre_sent => {
                    pre_sent = true;
                    true
                }
                _ = tx.closed() => return,
                ev = rx.recv() => match ev {
                    Some(e) => {
                        if !send(e, &mut last).await {
                            return;
                        }
                        false
                    }
                    None => {
                        if rx.overflowed() {
                            let _ = tx.send(error_line(&ApiError::gone("too old resource version: watcher fell behind"))).await;
                        }
                        return;
                    }
                }
            };
            if progress {
                // The store's progress, not only this watch's last event: once the events
                // queued for it are sent, it has seen all it can up to there.
                let mark = store.dispatched_rv();
                while let Some(e) = rx.try_recv() {
                    if !send(e, &mut last).await {
                        return;
                    }
                }
                last = last.max(mark);
                if tx.send(fmt.bookmark(last, false)).await.is_err() {
                    return;
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(brx).map(Ok::<_, Infallible>);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}
