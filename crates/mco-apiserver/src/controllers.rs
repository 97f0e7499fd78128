//! The server's own background loops: CRD status, PodDisruptionBudget status,
//! garbage collection of dependents and namespace cleanup.

use std::collections::HashSet;
use std::sync::Arc;

use mco_apimachinery::selector::LabelSelector;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::objects::{meta, meta_str};
use crate::rest::{self, App, DeleteOpts};
use crate::store::{Action, Event, EventType, Store};

const CRD_GR: &str = "apiextensions.k8s.io/customresourcedefinitions";
const PDB_GR: &str = "policy/poddisruptionbudgets";

pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Whether a PDB's selector picks this pod (same namespace assumed). An empty selector
/// selects every pod in policy/v1.
pub fn pdb_selects(pdb: &Value, pod: &Value) -> bool {
    match LabelSelector::from_k8s_field(pdb.pointer("/spec/selector")) {
        Ok(Some(sel)) => sel.matches_object(pod),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// `GetScaledValueFromIntOrPercent` with round-up, as the disruption controller uses it.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.parse::<i64>().ok().map(|p| (p * total + 99) / 100),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// The status the disruption controller would compute for this PDB right now.
pub fn pdb_status(store: &Store, pdb: &Value) -> Value {
    let ns = meta_str(pdb, "namespace").unwrap_or("");
    let (_, pods, _) = store.list("/pods", Some(ns), None, None, &|p| {
        pdb_selects(pdb, p)
            && !matches!(
                p.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
    });
    let expected = pods.len() as i64;
    let healthy = pods
        .iter()
        .filter(|p| pod_ready(p) && meta(p).get("deletionTimestamp").is_none_or(Value::is_null))
        .count() as i64;
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        scaled(min, expected).unwrap_or(0)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - scaled(max, expected).unwrap_or(0)).max(0)
    } else {
        0
    };
    let allowed = (healthy - desired).max(0);
    let generation = meta(pdb)
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let prev_cond = pdb
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionAllowed"))
        .cloned();
    let status = if allowed > 0 { "True" } else { "False" };
    let reason = if allowed > 0 {
        "SufficientPods"
    } else {
        "InsufficientPods"
    };
    let ltt = prev_cond
        .as_ref()
        .filter(|c| c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(crate::objects::now_rfc3339()));
    json!({
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{"type": "DisruptionAllowed", "status": status, "reason": reason, "message": "",
            "observedGeneration": generation, "lastTransitionTime": ltt}],
    })
}

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

async fn delete_quietly(app: &App, gr: &str, ns: &str, name: &str) {
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
        propagation: Some("Background".into()),
        ..Default::default()
    };
    if let Err(e) = rest::delete(app, &info, ns, name, opts).await
        && e.code != 404
    {
        tracing::warn!(error = %e.message, gr, ns, name, "background deletion");
    }
}

/// Deletes objects all of whose owners are gone (unless an owner was orphaned).
async fn collect_garbage(app: &App) {
    let all = app.store.all_objects();
    let uids: HashSet<&str> = all.iter().filter_map(|(_, v)| meta_str(v, "uid")).collect();
    let orphaned = app
        .orphaned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut doomed = Vec::new();
    for (gr, v) in &all {
        let Some(refs) = meta(v)
            .get("ownerReferences")
            .and_then(Value::as_array)
            .filter(|r| !r.is_empty())
        else {
            continue;
        };
        if meta(v)
            .get("deletionTimestamp")
            .is_some_and(|d| !d.is_null())
        {
            continue;
        }
        let owner_uids: Vec<&str> = refs.iter().filter_map(|r| r["uid"].as_str()).collect();
        let any_alive = owner_uids.iter().any(|u| uids.contains(u));
        let any_orphaned = owner_uids.iter().any(|u| orphaned.contains(*u));
        if !any_alive && !any_orphaned {
            doomed.push((
                gr.clone(),
                meta_str(v, "namespace").unwrap_or("").to_string(),
                meta_str(v, "name").unwrap_or("").to_string(),
            ));
        }
    }
    for (gr, ns, name) in doomed {
        delete_quietly(app, &gr, &ns, &name).await;
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
                delete_quietly(app, &info.gr(), &e.name, meta_str(&v, "name").unwrap_or("")).await;
            }
        }
    }
    if e.typ == EventType::Deleted && meta_str(&e.obj, "uid").is_some() {
        collect_garbage(app).await;
    }
}

/// Runs until the store's event stream closes.
pub async fn run(app: Arc<App>) {
    let mut rx = app.store.subscribe();
    // Catch up on what a previous run may have left undone.
    for (gr, v) in app.store.all_objects() {
        if gr == CRD_GR {
            app.registry.upsert_crd(&v);
            crd_status(&app, &v).await;
        }
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
            Ok(e) => on_event(&app, &e).await,
            Err(RecvError::Lagged(_)) => {
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

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&json!("50%"), 3), Some(2));
        assert_eq!(scaled(&json!(2), 3), Some(2));
        assert_eq!(scaled(&json!("10%"), 0), Some(0));
    }

    #[test]
    fn selector_matching() {
        let pdb = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}});
        assert!(pdb_selects(
            &pdb,
            &json!({"metadata": {"labels": {"app": "web"}}})
        ));
        assert!(!pdb_selects(
            &pdb,
            &json!({"metadata": {"labels": {"app": "db"}}})
        ));
    }
}
