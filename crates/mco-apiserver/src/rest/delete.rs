//! DELETE and DELETECOLLECTION: preconditions, finalizers and propagation policies.

use std::collections::HashMap;

use axum::response::Response;
use http::HeaderMap;
use serde_json::{Value, json};

use super::encode::{json_response, out};
use super::list::Filter;
use super::write::after_write;
use super::{App, Target, dry_run};
use crate::error::{ApiError, Cause, ResRef};
use crate::objects::{self, meta, meta_mut, meta_str};
use crate::registry::ResourceInfo;
use crate::store::{Action, Outcome};

/// The finalizer that keeps an owner deleted with `propagationPolicy=Foreground`
/// visible until its blocking dependents are gone.
pub const FOREGROUND: &str = "foregroundDeletion";

/// The finalizer that keeps an owner deleted with `propagationPolicy=Orphan` (or
/// `orphanDependents=true`) until the garbage collector has taken its reference out of
/// every dependent.
pub const ORPHAN: &str = "orphan";

/// The parts of DeleteOptions this server honours.
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    pub dry_run: bool,
    pub propagation: Option<String>,
    /// The deprecated `orphanDependents`: when given, it decides over the policy and
    /// the object's finalizers, as kube-apiserver lets it.
    pub orphan_dependents: Option<bool>,
    pub uid: Option<String>,
    pub rv: Option<String>,
}

impl DeleteOpts {
    /// Reads options from the query and a JSON body; other bodies (protobuf) are ignored.
    pub(super) fn parse(q: &HashMap<String, String>, body: &[u8]) -> DeleteOpts {
        let b: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        DeleteOpts {
            dry_run: dry_run(q)
                || b.get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x == "All")),
            propagation: q.get("propagationPolicy").cloned().or_else(|| {
                b.get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(String::from)
            }),
            orphan_dependents: q
                .get("orphanDependents")
                .and_then(|v| v.parse().ok())
                .or_else(|| b.get("orphanDependents").and_then(Value::as_bool)),
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

impl DeleteOpts {
    /// apimachinery's `ValidateDeleteOptions` of the fields read here, checked before the
    /// object is looked up.
    fn validate(&self) -> Result<(), ApiError> {
        let Some(p) = &self.propagation else {
            return Ok(());
        };
        let mut causes = Vec::new();
        if self.orphan_dependents.is_some() {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "propagationPolicy",
                format!(
                    "Invalid value: {p:?}: orphanDependents and deletionPropagation cannot be both set"
                ),
            ));
        }
        if !["Foreground", "Background", "Orphan"].contains(&p.as_str()) {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                "propagationPolicy",
                format!(
                    "Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ));
        }
        if causes.is_empty() {
            return Ok(());
        }
        let options = ResRef {
            group: "meta.k8s.io",
            plural: "deleteoptions",
            kind: "DeleteOptions",
        };
        Err(ApiError::invalid(&options, "", causes))
    }
}

/// Whether deleting objects of `info` takes part in garbage collection. Events opt out
/// (their strategy's `DefaultGarbageCollectionPolicy` is `Unsupported`): their deletion
/// never adds the `orphan` or `foregroundDeletion` finalizer.
fn collects_garbage(info: &ResourceInfo) -> bool {
    !(info.plural == "events" && (info.group.is_empty() || info.group == "events.k8s.io"))
}

/// The finalizers an object keeps once deleted with `opts`, as kube-apiserver's
/// `deletionFinalizersForGarbageCollection` decides them: the options' word first
/// (`orphanDependents`, then `propagationPolicy`), else the finalizer the object already
/// holds, else the resource's default (collect the dependents: neither finalizer).
/// `None` when the set does not change.
fn gc_finalizers(current: &[Value], opts: &DeleteOpts) -> Option<Vec<Value>> {
    let held = || {
        current.iter().find_map(|f| match f.as_str() {
            Some(ORPHAN) => Some(ORPHAN),
            Some(FOREGROUND) => Some(FOREGROUND),
            _ => None,
        })
    };
    let chosen = match (opts.orphan_dependents, opts.propagation.as_deref()) {
        (Some(true), _) => Some(ORPHAN),
        (Some(false), _) | (None, Some("Background")) => None,
        (None, Some("Orphan")) => Some(ORPHAN),
        (None, Some("Foreground")) => Some(FOREGROUND),
        (None, _) => held(),
    };
    let mut next: Vec<Value> = current
        .iter()
        .filter(|f| *f != ORPHAN && *f != FOREGROUND)
        .cloned()
        .collect();
    next.extend(chosen.map(|f| json!(f)));
    let set = |l: &[Value]| -> std::collections::BTreeSet<String> {
        l.iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    };
    (set(current) != set(&next)).then_some(next)
}

/// What deleting `cur` with `opts` does: kube-apiserver's `Store.Delete` for a resource
/// without graceful deletion. An object left with finalizers is marked (`deletionTimestamp`,
/// grace 0, `generation` one more on the first mark) and kept; one without is deleted.
fn deletion(info: &ResourceInfo, cur: &Value, opts: &DeleteOpts) -> Action {
    let current: Vec<Value> = meta(cur)
        .get("finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let changed = collects_garbage(info)
        .then(|| gc_finalizers(&current, opts))
        .flatten();
    let finalizers = changed.as_deref().unwrap_or(&current);
    if finalizers.is_empty() {
        return Action::Delete;
    }
    let mut v = cur.clone();
    let m = meta_mut(&mut v);
    if let Some(f) = &changed {
        m.insert("finalizers".into(), json!(f));
    }
    if m.get("deletionTimestamp").is_none_or(Value::is_null) {
        if let Some(g) = m
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
        {
            m.insert("generation".into(), json!(g + 1));
        }
        m.insert("deletionTimestamp".into(), json!(objects::now_rfc3339()));
    }
    m.insert("deletionGracePeriodSeconds".into(), json!(0));
    // The resourceVersion stays: a commit stamps its own, and a dry run answers the
    // stored one, as kube-apiserver's does.
    if v == *cur {
        return Action::Keep;
    }
    Action::Put(v)
}

/// Deletes an object, or marks it for deletion while finalizers remain.
pub async fn delete(
    app: &App,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: DeleteOpts,
) -> Result<Outcome, ApiError> {
    opts.validate()?;
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
                Ok(deletion(&i2, cur, &o2))
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
    let opts = DeleteOpts::parse(q, body);
    opts.validate()?;
    let (_, items, _) = app
        .store
        .list(&t.info.gr(), t.ns.as_deref(), None, None, &|v| {
            filter.matches(v)
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn opts(orphan_dependents: Option<bool>, propagation: Option<&str>) -> DeleteOpts {
        DeleteOpts {
            orphan_dependents,
            propagation: propagation.map(String::from),
            ..Default::default()
        }
    }

    fn fins(l: &[&str]) -> Vec<Value> {
        l.iter().map(|f| json!(f)).collect()
    }

    #[test]
    fn the_options_then_the_held_finalizer_decide_as_kube_apiserver() {
        // (finalizers held, orphanDependents, propagationPolicy, finalizers after if changed)
        type Case<'a> = (
            &'a [&'a str],
            Option<bool>,
            Option<&'a str>,
            Option<&'a [&'a str]>,
        );
        let cases: &[Case] = &[
            // No word from the options or the object: collect the dependents, no finalizer.
            (&[], None, None, None),
            (&["x"], None, Some("Background"), None),
            (&[], None, Some("Orphan"), Some(&[ORPHAN])),
            (&["x"], None, Some("Foreground"), Some(&["x", FOREGROUND])),
            (&[], Some(true), None, Some(&[ORPHAN])),
            // The deprecated field decides over the finalizer held.
            (&[FOREGROUND], Some(true), None, Some(&[ORPHAN])),
            (&[ORPHAN], Some(false), None, Some(&[])),
            // A later delete switches or drops the finalizer the object holds.
            (
                &[FOREGROUND, "x"],
                None,
                Some("Orphan"),
                Some(&["x", ORPHAN]),
            ),
            (&[FOREGROUND], None, Some("Background"), Some(&[])),
            (&[ORPHAN], None, Some("Foreground"), Some(&[FOREGROUND])),
            // Without options the held one stays; the first of the two decides.
            (&[ORPHAN], None, None, None),
            (&[FOREGROUND, ORPHAN], None, None, Some(&[FOREGROUND])),
            (&[ORPHAN], None, Some("Orphan"), None),
        ];
        for (held, od, policy, want) in cases {
            let got = gc_finalizers(&fins(held), &opts(*od, *policy));
            assert_eq!(
                got,
                want.map(fins),
                "held {held:?}, orphanDependents {od:?}, policy {policy:?}"
            );
        }
    }

    #[test]
    fn a_marked_object_gets_a_timestamp_a_zero_grace_and_one_more_generation_once() {
        let reg = Registry::new();
        let ds = reg.by_gr("apps", "daemonsets").unwrap();
        let cur = json!({"metadata": {"name": "d", "generation": 3, "resourceVersion": "7"}});
        let Action::Put(marked) = deletion(&ds, &cur, &opts(None, Some("Orphan"))) else {
            panic!("marked, not deleted");
        };
        let m = meta(&marked);
        assert_eq!(m["finalizers"], json!([ORPHAN]));
        assert_eq!(m["generation"], json!(4));
        assert_eq!(m["deletionGracePeriodSeconds"], json!(0));
        assert_eq!(m["resourceVersion"], json!("7"));
        assert!(m["deletionTimestamp"].is_string());
        // Deleting it again changes nothing; a Background delete removes it.
        assert!(matches!(
            deletion(&ds, &marked, &opts(None, Some("Orphan"))),
            Action::Keep
        ));
        assert!(matches!(
            deletion(&ds, &marked, &opts(None, Some("Background"))),
            Action::Delete
        ));
        // Events take no part: no finalizer, deleted at once.
        let ev = reg.by_gr("events.k8s.io", "events").unwrap();
        assert!(matches!(
            deletion(&ev, &cur, &opts(None, Some("Foreground"))),
            Action::Delete
        ));
        assert!(!collects_garbage(&reg.by_gr("", "events").unwrap()));
        assert!(collects_garbage(&reg.by_gr("", "configmaps").unwrap()));
    }

    #[test]
    fn invalid_options_are_refused_as_apimachinery_refuses_them() {
        assert!(opts(None, Some("Orphan")).validate().is_ok());
        assert!(opts(Some(true), None).validate().is_ok());
        let e = opts(Some(false), Some("Sideways")).validate().unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: [propagationPolicy: Invalid value: \
             \"Sideways\": orphanDependents and deletionPropagation cannot be both set, \
             propagationPolicy: Unsupported value: \"Sideways\": supported values: \
             \"Foreground\", \"Background\", \"Orphan\", \"nil\"]"
        );
    }
}
