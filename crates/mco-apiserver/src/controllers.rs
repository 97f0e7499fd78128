//! The server's own background loops: CRD status, PodDisruptionBudget status,
//! garbage collection of dependents, namespace cleanup and the root-CA ConfigMap.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::disruption::pdb_status;
use crate::objects::{Part, meta, meta_mut, meta_str, should_remove};
use crate::rest::{self, App, DeleteOpts, FOREGROUND, ORPHAN};
use crate::store::{Action, Event, EventType, Head, OwnerRef};

const CRD_GR: &str = "apiextensions.k8s.io/customresourcedefinitions";
const PDB_GR: &str = "policy/poddisruptionbudgets";

async fn refresh_pdbs(app: &App, ns: &str) {
    let (_, pdbs, _) = app.store.list(PDB_GR, Some(ns), None, None, &|_| true);
    for pdb in pdbs {
        let st = pdb_status(&app.store, &pdb);
        let cur = pdb.get("status").cloned().unwrap_or(Value::Null);
        let same = [
            "observedGeneration",
            "disruptionsAllowed",
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
        ]
        .iter()
        .all(|k| cur.get(*k) == st.get(*k));
        if same {
            continue;
        }
        let name = meta_str(&pdb, "name").unwrap_or("").to_string();
        let res = app
            .store
            .write(
                PDB_GR,
                ns,
                &name,
                false,
                Box::new(move |cur| match cur {
                    Some(c) => {
                        let mut v = (**c).clone();
                        v["status"] = st;
                        Ok(Action::Put(v))
                    }
                    None => Ok(Action::Keep),
                }),
            )
            .await;
        if let Err(e) = res {
            tracing::warn!(error = %e.message, "updating PodDisruptionBudget status");
        }
    }
}

/// Marks a CRD Established and NamesAccepted once it is served.
async fn crd_status(app: &App, crd: &Value) {
    let Some(spec) = crd.get("spec") else { return };
    let names = spec.get("names").cloned().unwrap_or(json!({}));
    let storage: Vec<Value> = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"] == true)
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let done = crd.pointer("/status/acceptedNames") == Some(&names)
        && crd
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
    if done {
        return;
    }
    let now = crate::objects::now_rfc3339();
    let name = meta_str(crd, "name").unwrap_or("").to_string();
    let res = app
        .store
        .write(
            CRD_GR,
            "",
            &name,
            false,
            Box::new(move |cur| {
                let Some(c) = cur else { return Ok(Action::Keep) };
                let mut v = (**c).clone();
                let mut stored: Vec<Value> = v.pointer("/status/storedVersions").and_then(Value::as_array).cloned().unwrap_or_default();
                for s in storage {
                    if !stored.contains(&s) {
                        stored.push(s);
                    }
                }
                v["status"] = json!({
                    "acceptedNames": names,
                    "storedVersions": stored,
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
                    ],
                });
                Ok(Action::Put(v))
            }),
        )
        .await;
    if let Err(e) = res {
        tracing::warn!(error = %e.message, "updating CRD status");
    }
}

async fn delete_quietly(app: &App, gr: &str, ns: &str, name: &str, policy: &str) {
    let Some((group, plural)) = gr.split_once('/') else {
        return;
    };
    let Some(info) = app.registry.by_gr(group, plural) else {
        // The resource is no longer served (its CRD is gone): remove the row directly.
        let _ = app
            .store
            .write(
                gr,
                ns,
                name,
                false,
                Box::new(|cur| {
                    Ok(if cur.is_some() {
                        Action::Delete
                    } else {
                        Action::Keep
                    })
                }),
            )
            .await;
        return;
    };
    let opts = DeleteOpts {
        propagation: Some(policy.into()),
        ..Default::default()
    };
    if let Err(e) = rest::delete(app, &info, ns, name, opts).await
        && e.code != 404
    {
        tracing::warn!(error = %e.message, gr, ns, name, "garbage collection");
    }
}

/// The field manager kube-controller-manager's garbage collector writes as.
const GC_MANAGER: &str = "kube-controller-manager";

/// Runs a read-modify-write on the object if it is still the one with `uid`, recording it in
/// `managedFields` as the garbage collector's patch (which, only removing fields, takes them
/// out of their managers' sets and adds no entry of its own). False if the write failed.
async fn edit_if_uid(
    app: &App,
    gr: &str,
    ns: &str,
    name: &str,
    uid: &str,
    what: &str,
    edit: impl FnOnce(&mut Value) -> bool + Send + 'static,
) -> bool {
    let uid = uid.to_string();
    let info = gr
        .split_once('/')
        .and_then(|(group, plural)| app.registry.by_gr(group, plural));
    let res = app
        .store
        .write(
            gr,
            ns,
            name,
            false,
            Box::new(move |cur| {
                let Some(c) = cur.filter(|c| meta_str(c, "uid") == Some(uid.as_str())) else {
                    return Ok(Action::Keep);
                };
                let mut v = (**c).clone();
                if !edit(&mut v) {
                    return Ok(Action::Keep);
                }
                if should_remove(&v) {
                    return Ok(Action::Delete);
                }
                Ok(Action::Put(match info {
                    Some(info) => {
                        let version = c
                            .get("apiVersion")
                            .and_then(Value::as_str)
                            .and_then(|av| av.rsplit('/').next())
                            .unwrap_or("v1")
                            .to_string();
                        crate::machinery::record_update(
                            &info,
                            &version,
                            Part::Main,
                            Some(c),
                            v,
                            GC_MANAGER,
                        )
                    }
                    None => v,
                }))
            }),
        )
        .await;
    match res {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e.message, gr, ns, name, "garbage collection: {what}");
            false
        }
    }
}

/// What the garbage collector does to one object in a sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Delete it with this propagation policy.
    Delete(&'static str),
    /// Take out its references to these owners: owners being deleted with the `orphan`
    /// finalizer, and owners going in the foreground when another owner keeps it (so they
    /// stop waiting for it).
    DropRefs(Vec<String>),
    /// Every blocking dependent is gone: take the foreground finalizer off.
    Release,
    /// An owner deleted with `orphan`: once every dependent has lost its reference to it,
    /// take that finalizer off.
    Unorphan,
}

/// One sweep over every object's metadata, as upstream's garbage collector decides it:
/// a dependent all of whose owners are gone is deleted in the background; a dependent of
/// an owner deleted in the foreground is deleted too (itself in the foreground when it
/// blocks the owner), unless another owner that is staying keeps it, in which case only
/// the reference goes; an owner in foreground deletion is released once no dependent
/// with `blockOwnerDeletion: true` remains. An owner deleted with the `orphan` finalizer
/// still exists, so it keeps its dependents; every dependent (even one being deleted) loses
/// its reference to it, and then the owner its finalizer. All of it is read from the stored
/// objects, so a sweep after a restart finishes what one before it started.
fn sweep(heads: &[(String, Head)]) -> Vec<(&str, &Head, Verdict)> {
    let alive: HashSet<&str> = heads.iter().filter_map(|(_, h)| h.uid.as_deref()).collect();
    let uids_where = |f: &dyn Fn(&Head) -> bool| -> HashSet<&str> {
        heads
            .iter()
            .filter(|(_, h)| h.deleting() && f(h))
            .filter_map(|(_, h)| h.uid.as_deref())
            .collect()
    };
    // As kube's collector, an owner holding both finalizers is orphaned first.
    let orphaning = uids_where(&|h| h.has_finalizer(ORPHAN));
    let waiting = uids_where(&|h| h.has_finalizer(FOREGROUND) && !h.has_finalizer(ORPHAN));
    let mut blocked: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for (gr, h) in heads {
        let refs = h.owner_refs();
        if refs.is_empty() {
            continue;
        }
        for r in refs {
            if r.block_owner_deletion == Some(true) && waiting.contains(r.uid.as_str()) {
                blocked.insert(r.uid.as_str());
            }
        }
        let to_orphan = refs
            .iter()
            .filter(|r| orphaning.contains(r.uid.as_str()))
            .map(|r| r.uid.clone());
        if h.deleting() {
            let drop: Vec<String> = to_orphan.collect();
            if !drop.is_empty() {
                out.push((gr.as_str(), h, Verdict::DropRefs(drop)));
            }
            continue;
        }
        let is_waiting = |r: &&OwnerRef| waiting.contains(r.uid.as_str());
        let solid = refs
            .iter()
            .any(|r| alive.contains(r.uid.as_str()) && !waiting.contains(r.uid.as_str()));
        let to_waiting: Vec<&OwnerRef> = refs.iter().filter(is_waiting).collect();
        let verdict = if solid {
            let drop: Vec<String> = to_waiting
                .iter()
                .map(|r| r.uid.clone())
                .chain(to_orphan)
                .collect();
            if drop.is_empty() {
                continue;
            }
            Verdict::DropRefs(drop)
        } else if to_waiting
            .iter()
            .any(|r| r.block_owner_deletion == Some(true))
        {
            Verdict::Delete("Foreground")
        } else {
            Verdict::Delete("Background")
        };
        out.push((gr.as_str(), h, verdict));
    }
    for (gr, h) in heads {
        if let Some(uid) = h.uid.as_deref()
            && waiting.contains(uid)
            && !blocked.contains(uid)
        {
            out.push((gr.as_str(), h, Verdict::Release));
        }
        if h.uid.as_deref().is_some_and(|u| orphaning.contains(u)) {
            out.push((gr.as_str(), h, Verdict::Unorphan));
        }
    }
    out
}

/// Keeps the entries of the metadata list `key` that pass `keep`; true when any was removed.
/// An emptied list goes, as kube-apiserver omits empty `ownerReferences` and `finalizers`.
fn retain_in_metadata(v: &mut Value, key: &str, keep: impl FnMut(&Value) -> bool) -> bool {
    let m = meta_mut(v);
    let Some(list) = m.get_mut(key).and_then(Value::as_array_mut) else {
        return false;
    };
    let before = list.len();
    list.retain(keep);
    let (changed, empty) = (list.len() != before, list.is_empty());
    if changed && empty {
        m.remove(key);
    }
    changed
}

/// Deletes dependents whose owners are gone or going, releases owners deleted in the
/// foreground once nothing blocks them, and finishes orphaning: an owner's `orphan` finalizer
/// comes off only after every dependent's reference to it has, so a failed or interrupted
/// sweep leaves the finalizer for the next one (or the next start) to finish.
async fn collect_garbage(app: &App) {
    let heads = app.store.heads();
    // Owners being orphaned that a dependent still refers to after this sweep.
    let mut still_referred: HashSet<String> = HashSet::new();
    for (gr, h, verdict) in sweep(&heads) {
        let uid = h.uid.as_deref().unwrap_or("");
        match verdict {
            Verdict::Delete(policy) => delete_quietly(app, gr, h.ns(), &h.name, policy).await,
            Verdict::DropRefs(uids) => {
                let dropping = uids.clone();
                let done = edit_if_uid(
                    app,
                    gr,
                    h.ns(),
                    &h.name,
                    uid,
                    "dropping owner references",
                    move |v| {
                        retain_in_metadata(v, "ownerReferences", |r| {
                            !r["uid"]
                                .as_str()
                                .is_some_and(|u| dropping.iter().any(|x| x == u))
                        })
                    },
                )
                .await;
                if !done {
                    still_referred.extend(uids);
                }
            }
            Verdict::Unorphan if still_referred.contains(uid) => {}
            Verdict::Release | Verdict::Unorphan => {
                let (finalizer, why) = if matches!(verdict, Verdict::Release) {
                    (FOREGROUND, "releasing a foreground deletion")
                } else {
                    (ORPHAN, "finishing an orphan deletion")
                };
                edit_if_uid(app, gr, h.ns(), &h.name, uid, why, move |v| {
                    retain_in_metadata(v, "finalizers", |x| x != finalizer)
                })
                .await;
            }
        }
    }
}

/// Whether an event can change what a garbage collection sweep decides.
fn concerns_gc(e: &Event) -> bool {
    let refs = |v: &Value| meta(v).get("ownerReferences").cloned();
    match e.typ {
        EventType::Deleted => meta_str(&e.obj, "uid").is_some(),
        // A sweep per created dependent would make bulk creates quadratic; a dependent
        // created after its owner went is picked up by the next sweep.
        EventType::Added => false,
        EventType::Modified => {
            let m = meta(&e.obj);
            let collecting = m.get("deletionTimestamp").is_some_and(|d| !d.is_null())
                && m.get("finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|x| x == FOREGROUND || x == ORPHAN));
            collecting || e.old.as_deref().is_some_and(|o| refs(o) != refs(&e.obj))
        }
    }
}

async fn on_event(app: &App, e: &Event) {
    if e.gr == CRD_GR {
        match e.typ {
            EventType::Deleted => {
                app.registry.remove_crd(&e.obj);
                if let (Some(g), Some(p)) = (
                    e.obj.pointer("/spec/group").and_then(Value::as_str),
                    e.obj.pointer("/spec/names/plural").and_then(Value::as_str),
                ) {
                    let gr = format!("{g}/{p}");
                    let (_, items, _) = app.store.list(&gr, None, None, None, &|_| true);
                    for v in items {
                        let ns = meta_str(&v, "namespace").unwrap_or("").to_string();
                        let name = meta_str(&v, "name").unwrap_or("").to_string();
                        let _ = app
                            .store
                            .write(
                                &gr,
                                &ns,
                                &name,
                                false,
                                Box::new(|cur| {
                                    Ok(if cur.is_some() {
                                        Action::Delete
                                    } else {
                                        Action::Keep
                                    })
                                }),
                            )
                            .await;
                    }
                }
            }
            _ => {
                app.registry.upsert_crd(&e.obj);
                crd_status(app, &e.obj).await;
            }
        }
    }
    if e.gr == "/pods" || e.gr == PDB_GR {
        refresh_pdbs(app, &e.ns).await;
    }
    if e.gr == "/namespaces" && e.typ == EventType::Deleted {
        for info in app.registry.all().into_iter().filter(|r| r.namespaced) {
            let (_, items, _) = app
                .store
                .list(&info.gr(), Some(&e.name), None, None, &|_| true);
            for v in items {
                let name = meta_str(&v, "name").unwrap_or("");
                delete_quietly(app, &info.gr(), &e.name, name, "Background").await;
            }
        }
    }
    if concerns_gc(e) {
        collect_garbage(app).await;
    }
}

const CM_GR: &str = "/configmaps";
const NS_GR: &str = "/namespaces";
/// kube-controller-manager's root-CA publisher's ConfigMap, in every namespace.
pub const ROOT_CA_NAME: &str = "kube-root-ca.crt";
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// What the root-CA publisher writes over `cur` (`None`: a new ConfigMap); `None` if `cur`
/// already carries the CA and the description.
fn root_ca_configmap(ns: &str, ca_pem: &str, cur: Option<&Value>) -> Option<Value> {
    let data = json!({"ca.crt": ca_pem});
    let Some(cur) = cur else {
        return Some(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": ROOT_CA_NAME,
                "namespace": ns,
                "uid": uuid::Uuid::new_v4().to_string(),
                "creationTimestamp": crate::objects::now_rfc3339(),
                "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION},
            },
            "data": data,
        }));
    };
    let described = cur
        .pointer("/metadata/annotations/kubernetes.io~1description")
        .and_then(Value::as_str)
        .is_some_and(|d| !d.is_empty());
    if cur.get("data") == Some(&data) && described {
        return None;
    }
    let mut v = cur.clone();
    v["data"] = data;
    let m = meta_mut(&mut v);
    if !m.get("annotations").is_some_and(Value::is_object) {
        m.insert("annotations".into(), json!({}));
    }
    m["annotations"]["kubernetes.io/description"] = json!(ROOT_CA_DESCRIPTION);
    Some(v)
}

/// Puts the CA ConfigMap back in `ns`, unless the namespace is gone or going.
async fn publish_root_ca(app: &App, ns: &str, ca_pem: &str) {
    let live = app
        .store
        .get(NS_GR, "", ns)
        .is_some_and(|n| meta(&n).get("deletionTimestamp").is_none_or(Value::is_null));
    if !live {
        return;
    }
    let Some(info) = app.registry.by_gr("", "configmaps") else {
        return;
    };
    let (ns2, ca) = (ns.to_string(), ca_pem.to_string());
    let res = app
        .store
        .write(
            CM_GR,
            ns,
            ROOT_CA_NAME,
            false,
            Box::new(move |cur| {
                let cur = cur.map(|c| c.as_ref());
                Ok(match root_ca_configmap(&ns2, &ca, cur) {
                    None => Action::Keep,
                    Some(v) => Action::Put(crate::machinery::record_update(
                        &info,
                        "v1",
                        crate::objects::Part::Main,
                        cur,
                        v,
                        "kube-controller-manager",
                    )),
                })
            }),
        )
        .await;
    if let Err(e) = res {
        tracing::warn!(error = %e.message, namespace = ns, "publishing {ROOT_CA_NAME}");
    }
}

/// The namespace whose root-CA ConfigMap an event may have removed or changed, or whose
/// creation needs one.
fn root_ca_namespace(e: &Event) -> Option<&str> {
    match (e.gr.as_str(), e.typ) {
        (NS_GR, EventType::Deleted) => None,
        (NS_GR, _) => Some(&e.name),
        (CM_GR, _) if e.name == ROOT_CA_NAME => Some(&e.ns),
        _ => None,
    }
}

/// Publishes the CA ConfigMap in every namespace.
pub async fn publish_root_ca_everywhere(app: &App, ca_pem: &str) {
    let (_, nss, _) = app.store.list(NS_GR, None, None, None, &|_| true);
    for n in nss {
        if let Some(ns) = meta_str(&n, "name") {
            publish_root_ca(app, ns, ca_pem).await;
        }
    }
}

/// Runs until the store's event stream closes. `ca_pem` is the cluster CA the root-CA
/// publisher hands every namespace.
pub async fn run(app: Arc<App>, ca_pem: String) {
    let mut rx = app.store.subscribe();
    publish_root_ca_everywhere(&app, &ca_pem).await;
    // Catch up on what a previous run may have left undone.
    let (_, crds, _) = app.store.list(CRD_GR, None, None, None, &|_| true);
    for v in crds {
        app.registry.upsert_crd(&v);
        crd_status(&app, &v).await;
    }
    collect_garbage(&app).await;
    let (_, pdbs, _) = app.store.list(PDB_GR, None, None, None, &|_| true);
    let nss: HashSet<String> = pdbs
        .iter()
        .filter_map(|p| meta_str(p, "namespace").map(String::from))
        .collect();
    for ns in nss {
        refresh_pdbs(&app, &ns).await;
    }
    loop {
        match rx.recv().await {
            Ok(e) => {
                on_event(&app, &e).await;
                if let Some(ns) = root_ca_namespace(&e) {
                    publish_root_ca(&app, ns, &ca_pem).await;
                }
            }
            Err(RecvError::Lagged(_)) => {
                publish_root_ca_everywhere(&app, &ca_pem).await;
                collect_garbage(&app).await;
                let (_, pdbs, _) = app.store.list(PDB_GR, None, None, None, &|_| true);
                let nss: HashSet<String> = pdbs
                    .iter()
                    .filter_map(|p| meta_str(p, "namespace").map(String::from))
                    .collect();
                for ns in nss {
                    refresh_pdbs(&app, &ns).await;
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(name: &str, uid: &str, owners: &[(&str, bool)], foreground: bool) -> (String, Head) {
        deleting(
            name,
            uid,
            owners,
            if foreground { &[FOREGROUND] } else { &[] },
        )
    }

    /// An object being deleted (with `finalizers`), or not when there are none.
    fn deleting(
        name: &str,
        uid: &str,
        owners: &[(&str, bool)],
        finalizers: &[&str],
    ) -> (String, Head) {
        let refs: Vec<Value> = owners
            .iter()
            .map(|(u, b)| json!({"uid": u, "blockOwnerDeletion": b}))
            .collect();
        let mut m = json!({"name": name, "uid": uid, "ownerReferences": refs});
        if !finalizers.is_empty() {
            m["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            m["finalizers"] = json!(finalizers);
        }
        let text = json!({"metadata": m, "spec": {"big": [1, 2, 3]}}).to_string();
        ("/configmaps".into(), Head::parse(&text).unwrap())
    }

    fn verdicts(heads: &[(String, Head)]) -> Vec<(String, Verdict)> {
        sweep(heads)
            .into_iter()
            .map(|(_, h, v)| (h.name.clone(), v))
            .collect()
    }

    #[test]
    fn the_root_ca_configmap_is_written_until_it_carries_the_ca_and_description() {
        let new = root_ca_configmap("n", "CA", None).unwrap();
        assert_eq!(new["data"], json!({"ca.crt": "CA"}));
        assert_eq!(
            new.pointer("/metadata/annotations/kubernetes.io~1description"),
            Some(&json!(ROOT_CA_DESCRIPTION))
        );
        assert_eq!(root_ca_configmap("n", "CA", Some(&new)), None);
        let mut changed = new.clone();
        changed["data"]["extra"] = json!("x");
        changed["metadata"]["annotations"] = json!({"a": "b"});
        let fixed = root_ca_configmap("n", "CA", Some(&changed)).unwrap();
        assert_eq!(fixed["data"], json!({"ca.crt": "CA"}));
        assert_eq!(fixed["metadata"]["annotations"]["a"], json!("b"));
        assert_eq!(root_ca_configmap("n", "CA", Some(&fixed)), None);
    }

    #[test]
    fn dependents_of_a_vanished_owner_go_in_the_background() {
        let heads = vec![head("dep", "d", &[("gone", true)], false)];
        assert_eq!(
            verdicts(&heads),
            vec![("dep".into(), Verdict::Delete("Background"))]
        );
    }

    #[test]
    fn a_foreground_owner_waits_only_for_blocking_dependents() {
        let heads = vec![
            head("owner", "o", &[], true),
            head("blocking", "b", &[("o", true)], false),
            head("loose", "l", &[("o", false)], false),
        ];
        assert_eq!(
            verdicts(&heads),
            vec![
                ("blocking".into(), Verdict::Delete("Foreground")),
                ("loose".into(), Verdict::Delete("Background")),
            ]
        );
        // Only a non-blocking dependent left: the owner is released.
        let heads = vec![
            head("owner", "o", &[], true),
            head("loose", "l", &[("o", false)], false),
        ];
        assert_eq!(
            verdicts(&heads),
            vec![
                ("loose".into(), Verdict::Delete("Background")),
                ("owner".into(), Verdict::Release),
            ]
        );
    }

    #[test]
    fn a_dependent_kept_by_another_owner_only_drops_the_reference() {
        let heads = vec![
            head("owner", "o", &[], true),
            head("other", "x", &[], false),
            head("shared", "s", &[("o", true), ("x", false)], false),
        ];
        assert_eq!(
            verdicts(&heads),
            vec![("shared".into(), Verdict::DropRefs(vec!["o".into()]))]
        );
    }

    #[test]
    fn an_orphaned_owner_loses_its_dependents_references_then_its_finalizer() {
        let heads = vec![
            deleting("owner", "o", &[], &[ORPHAN]),
            head("only", "a", &[("o", true)], false),
            head("shared", "s", &[("x", false), ("o", false)], false),
            head("other", "x", &[], false),
            // Being deleted itself: it still loses the reference, and is not deleted.
            deleting("held", "h", &[("o", false)], &["example.com/hold"]),
            head("unrelated", "u", &[("x", false)], false),
        ];
        assert_eq!(
            verdicts(&heads),
            vec![
                ("only".into(), Verdict::DropRefs(vec!["o".into()])),
                ("shared".into(), Verdict::DropRefs(vec!["o".into()])),
                ("held".into(), Verdict::DropRefs(vec!["o".into()])),
                ("owner".into(), Verdict::Unorphan),
            ]
        );
        // Without dependents (or once they are all done) only the finalizer goes.
        let heads = vec![
            deleting("owner", "o", &[], &[ORPHAN, "example.com/hold"]),
            head("only", "a", &[], false),
        ];
        assert_eq!(verdicts(&heads), vec![("owner".into(), Verdict::Unorphan)]);
        // Not yet deleted: an `orphan` finalizer alone does nothing.
        let mut idle = head("owner", "o", &[], false);
        idle.1.finalizers = Some(vec![ORPHAN.into()]);
        let heads = vec![idle, head("only", "a", &[("o", true)], false)];
        assert!(verdicts(&heads).is_empty());
    }

    #[test]
    fn an_orphaned_owner_is_no_foreground_owner_and_keeps_a_shared_dependent() {
        let heads = vec![
            head("fg", "f", &[], true),
            deleting("orphaned", "o", &[], &[ORPHAN]),
            head("shared", "s", &[("f", true), ("o", false)], false),
            // Both finalizers (set by an update): orphaned first, as kube's collector does.
            deleting("both", "b", &[], &[FOREGROUND, ORPHAN]),
            head("of-both", "d", &[("b", true)], false),
        ];
        assert_eq!(
            verdicts(&heads),
            vec![
                (
                    "shared".into(),
                    Verdict::DropRefs(vec!["f".into(), "o".into()])
                ),
                ("of-both".into(), Verdict::DropRefs(vec!["b".into()])),
                ("orphaned".into(), Verdict::Unorphan),
                ("both".into(), Verdict::Unorphan),
            ]
        );
    }

    #[test]
    fn heads_read_metadata_and_skip_the_rest() {
        let text = r#"{"spec":{"x":1},"metadata":{"name":"a","namespace":"n","uid":"u",
            "deletionTimestamp":null,"finalizers":["f"],"managedFields":[{"manager":"m"}],
            "ownerReferences":[{"uid":"o","kind":"Node","name":"n1"}]}}"#;
        let h = Head::parse(text).unwrap();
        assert_eq!(
            (h.name.as_str(), h.ns(), h.uid.as_deref()),
            ("a", "n", Some("u"))
        );
        assert!(!h.deleting());
        assert!(h.has_finalizer("f"));
        assert_eq!(h.owner_refs().len(), 1);
        assert_eq!(h.owner_refs()[0].block_owner_deletion, None);
    }
}
