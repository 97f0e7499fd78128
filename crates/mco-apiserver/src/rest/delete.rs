//! DELETE and DELETECOLLECTION: preconditions, finalizers and propagation policies.

use std::collections::HashMap;

use axum::response::Response;
use http::HeaderMap;
use serde_json::{Value, json};

use super::encode::{json_response, out};
use super::list::Filter;
use super::write::after_write;
use super::{App, Target, dry_run};
use crate::error::{ApiError, ResRef};
use crate::objects::{self, meta, meta_mut, meta_str};
use crate::registry::ResourceInfo;
use crate::store::{Action, Outcome};

/// The finalizer that keeps an owner deleted with `propagationPolicy=Foreground`
/// visible until its blocking dependents are gone.
pub const FOREGROUND: &str = "foregroundDeletion";

/// The parts of DeleteOptions this server honours.
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    pub dry_run: bool,
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub rv: Option<String>,
}

impl DeleteOpts {
    /// Reads options from the query and a JSON body; other bodies (protobuf) are ignored.
    pub(super) fn parse(q: &HashMap<String, String>, body: &[u8]) -> DeleteOpts {
        let b: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let orphan = b.get("orphanDependents").and_then(Value::as_bool) == Some(true);
        DeleteOpts {
            dry_run: dry_run(q)
                || b.get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x == "All")),
            propagation: q
                .get("propagationPolicy")
                .cloned()
                .or_else(|| {
                    b.get("propagationPolicy")
                        .and_then(Value::as_str)
                        .map(String::from)
                })
                .or_else(|| orphan.then(|| "Orphan".to_string())),
            uid: b
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(String::from),
            rv: b
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
        }
    }
}

/// Deletes an object, or marks it for deletion while finalizers remain.
pub async fn delete(
    app: &App,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: DeleteOpts,
) -> Result<Outcome, ApiError> {
    if opts.propagation.as_deref() == Some("Orphan")
        && let Some(uid) = app
            .store
            .get(&info.gr(), ns, name)
            .and_then(|v| meta_str(&v, "uid").map(String::from))
    {
        app.orphaned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid);
    }
    let i2 = info.clone();
    let n2 = name.to_string();
    let o2 = opts.clone();
    let outcome = app
        .store
        .write(
            &info.gr(),
            ns,
            name,
            opts.dry_run,
            Box::new(move |cur| {
                let cur = cur.ok_or_else(|| ApiError::not_found(&i2.rref(), &n2))?;
                if let Some(uid) = &o2.uid
                    && Some(uid.as_str()) != meta_str(cur, "uid")
                {
                    // kube-apiserver names the kind, not the resource, in this conflict.
                    let by_kind = ResRef { plural: &i2.kind, ..i2.rref() };
                    return Err(ApiError::conflict_msg(&by_kind, &n2, &format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({}). \
                         The object might have been deleted and then recreated",
                        meta_str(cur, "uid").unwrap_or("")
                    )));
                }
                if let Some(rv) = &o2.rv
                    && Some(rv.as_str()) != meta_str(cur, "resourceVersion")
                {
                    let by_kind = ResRef { plural: &i2.kind, ..i2.rref() };
                    return Err(ApiError::conflict_msg(&by_kind, &n2, &format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the \
                         ResourceVersion in record ({}). The object might have been modified",
                        meta_str(cur, "resourceVersion").unwrap_or("")
                    )));
                }
                // Foreground: the owner stays, marked and holding the finalizer, until
                // the garbage collector has removed its blocking dependents.
                let foreground = o2.propagation.as_deref() == Some("Foreground");
                let finalizers = meta(cur).get("finalizers").and_then(Value::as_array);
                let has_finalizers = finalizers.is_some_and(|f| !f.is_empty());
                let has_foreground = finalizers.is_some_and(|f| f.iter().any(|x| x == FOREGROUND));
                if !has_finalizers && !foreground {
                    return Ok(Action::Delete);
                }
                let deleting = meta(cur).get("deletionTimestamp").is_some_and(|d| !d.is_null());
                if deleting && (!foreground || has_foreground) {
                    return Ok(Action::Keep);
                }
                let mut v = (**cur).clone();
                let m = meta_mut(&mut v);
                if !deleting {
                    m.insert("deletionTimestamp".into(), json!(objects::now_rfc3339()));
                    m.insert("deletionGracePeriodSeconds".into(), json!(0));
                }
                if foreground && !has_foreground {
                    match m.get_mut("finalizers").and_then(Value::as_array_mut) {
                        Some(f) => f.push(json!(FOREGROUND)),
                        None => {
                            m.insert("finalizers".into(), json!([FOREGROUND]));
                        }
                    }
                }
                m.remove("resourceVersion");
                Ok(Action::Put(v))
            }),
        )
        .await?;
    after_write(app, info, &outcome);
    Ok(outcome)
}

pub(super) async fn delete_collection(
    app: &App,
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let filter = Filter::parse(t, q)?;
    let (_, items, _) = app
        .store
        .list(&t.info.gr(), t.ns.as_deref(), None, None, &|v| {
            filter.matches(v)
        });
    let opts = DeleteOpts::parse(q, body);
    let mut deleted = Vec::new();
    for v in items {
        let ns = meta_str(&v, "namespace").unwrap_or("").to_string();
        let name = meta_str(&v, "name").unwrap_or("").to_string();
        match delete(app, &t.info, &ns, &name, opts.clone()).await {
            Ok(o) => deleted.extend(o.object().map(|v| out(&t.info, &t.version, v))),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let _ = headers;
    Ok(json_response(
        200,
        &json!({"kind": t.info.list_kind, "apiVersion": t.info.api_version(&t.version),
            "metadata": {"resourceVersion": app.store.current_rv().to_string()}, "items": deleted}),
    ))
}
