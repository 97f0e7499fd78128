//! Orphan deletion as kube-apiserver and kube-controller-manager's garbage collector do it:
//! the owner is marked and given the `orphan` finalizer, the collector takes the owner's
//! reference out of every dependent, then the finalizer off, and the owner goes. The state
//! is all stored, so a restart in the middle finishes the job instead of collecting the
//! dependents the user meant to keep.

use crate::common::{Cluster, eventually, send, status, text};

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use mco_apiserver::Identity;
use serde_json::{Value, json};

fn cm(name: &str, owners: &[&ConfigMap]) -> ConfigMap {
    let refs: Vec<Value> = owners
        .iter()
        .map(|o| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name,
                "uid": o.metadata.uid, "blockOwnerDeletion": true})
        })
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": refs},
        "data": {"k": name}}))
    .unwrap()
}

fn owner_uids(c: &ConfigMap) -> Vec<String> {
    c.metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.uid.clone())
        .collect()
}

fn uid(c: &ConfigMap) -> String {
    c.metadata.uid.clone().unwrap()
}

async fn gone(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get(name).await.is_err_and(|e| status(e).code == 404)
}

/// `kubectl delete --cascade=orphan`: it prints what kube's does and returns once the owner
/// is gone; by then each dependent has lost the owner's reference in a patch of its own (a
/// watch sees the owner marked, the dependents modified, then the owner deleted), a
/// dependent of two owners keeps the other reference, and the `orphan` finalizer shows on
/// the marked owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_cascade_orphan_keeps_the_dependents_without_the_owner() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let owner = cms.create(&pp, &cm("owner", &[])).await.unwrap();
    let other = cms.create(&pp, &cm("other", &[])).await.unwrap();
    let only = cms.create(&pp, &cm("only", &[&owner])).await.unwrap();
    let shared = cms
        .create(&pp, &cm("shared", &[&other, &owner]))
        .await
        .unwrap();
    let from = shared.metadata.resource_version.clone().unwrap();
    let mut events = cms
        .watch(&WatchParams::default().timeout(30), &from)
        .await
        .unwrap()
        .boxed();

    let o = cluster
        .kubectl
        .run(&["delete", "cm", "owner", "--cascade=orphan"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "configmap \"owner\" deleted\n");
    assert_eq!(text(&o.stderr), "");
    // kubectl waited for the owner to go.
    assert!(gone(&cms, "owner").await);

    let only_after = cms.get("only").await.unwrap();
    assert_eq!(only_after.metadata.owner_references, None);
    assert_ne!(
        only_after.metadata.resource_version,
        only.metadata.resource_version
    );
    assert_eq!(only_after.data, only.data);
    let shared_after = cms.get("shared").await.unwrap();
    assert_eq!(owner_uids(&shared_after), vec![uid(&other)]);
    // The collector's patch removed fields only: the creator no longer manages the owner's
    // reference, and the collector has no entry of its own.
    let managers: Vec<_> = only_after.metadata.managed_fields.clone().unwrap();
    assert_eq!(managers.len(), 1, "{managers:?}");
    let fields = serde_json::to_string(&managers[0].fields_v1).unwrap();
    assert!(!fields.contains("ownerReferences"), "{fields}");
    let shared_fields = serde_json::to_string(&shared_after.metadata.managed_fields).unwrap();
    assert!(shared_fields.contains(&uid(&other)), "{shared_fields}");
    assert!(!shared_fields.contains(&uid(&owner)), "{shared_fields}");

    let mut seen: Vec<(String, String, Value)> = Vec::new();
    while !seen.iter().any(|(t, n, _)| t == "DELETED" && n == "owner") {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the watch sees the owner deleted")
            .expect("the watch stays open")
            .unwrap();
        let (typ, obj) = match e {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            other => panic!("unexpected {other:?}"),
        };
        let name = obj.metadata.name.clone().unwrap();
        seen.push((
            typ.into(),
            name,
            serde_json::to_value(&obj.metadata).unwrap(),
        ));
    }
    let order: Vec<(&str, &str)> = seen
        .iter()
        .map(|(t, n, _)| (t.as_str(), n.as_str()))
        .collect();
    assert_eq!(order[0], ("MODIFIED", "owner"), "{order:?}");
    let mut middle = order[1..3].to_vec();
    middle.sort();
    assert_eq!(
        middle,
        [("MODIFIED", "only"), ("MODIFIED", "shared")],
        "{order:?}"
    );
    assert_eq!(order[3..], [("DELETED", "owner")], "{order:?}");
    let marked = &seen[0].2;
    assert_eq!(marked["finalizers"], json!(["orphan"]));
    assert_eq!(marked["deletionGracePeriodSeconds"], json!(0));
    assert!(marked["deletionTimestamp"].is_string());
    cluster.server.handle.shutdown().await;
}

/// Deleting with `Orphan` marks the owner even without dependents (kube-apiserver cannot
/// know there are none), and the collector then lets it go; `orphanDependents: true` is the
/// same, `orphanDependents: false` deletes the dependents; Events take no part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_options_and_resources() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    cms.create(&pp, &cm("alone", &[])).await.unwrap();
    let marked = cms
        .delete("alone", &DeleteParams::orphan())
        .await
        .unwrap()
        .left()
        .expect("the owner comes back marked");
    assert_eq!(marked.metadata.finalizers, Some(vec!["orphan".to_string()]));
    assert!(marked.metadata.deletion_timestamp.is_some());
    eventually("the lone owner to go", 10, || async {
        gone(&cms, "alone").await.then_some(())
    })
    .await;

    // The deprecated field, in the body as kubectl of old sent it.
    let path = |name: &str| format!("/api/v1/namespaces/default/configmaps/{name}");
    let legacy = cms.create(&pp, &cm("legacy", &[])).await.unwrap();
    cms.create(&pp, &cm("legacy-dep", &[&legacy]))
        .await
        .unwrap();
    let a = send(
        &client,
        "DELETE",
        &path("legacy"),
        "application/json",
        &json!({"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": true}),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.body["metadata"]["finalizers"], json!(["orphan"]));
    eventually("the legacy owner to go", 10, || async {
        gone(&cms, "legacy").await.then_some(())
    })
    .await;
    assert_eq!(
        cms.get("legacy-dep")
            .await
            .unwrap()
            .metadata
            .owner_references,
        None
    );

    let collected = cms.create(&pp, &cm("collected", &[])).await.unwrap();
    cms.create(&pp, &cm("collected-dep", &[&collected]))
        .await
        .unwrap();
    let a = send(
        &client,
        "DELETE",
        &path("collected"),
        "application/json",
        &json!({"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": false}),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert!(
        gone(&cms, "collected").await,
        "no finalizer: deleted at once"
    );
    eventually("the dependent to be collected", 10, || async {
        gone(&cms, "collected-dep").await.then_some(())
    })
    .await;

    // `orphanDependents: false` that leaves the object in place is answered 202.
    let mut held = cm("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&pp, &held).await.unwrap();
    let a = send(
        &client,
        "DELETE",
        &path("held"),
        "application/json",
        &json!({"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": false}),
    )
    .await;
    assert_eq!(a.code, 202, "{}", a.body);
    assert_eq!(
        a.body["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    let a = send(
        &client,
        "DELETE",
        &path("held"),
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    cms.patch(
        "held",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(gone(&cms, "held").await);

    // The options are validated first, as apimachinery's ValidateDeleteOptions does.
    let a = send(
        &client,
        "DELETE",
        &format!("{}?propagationPolicy=Bogus", path("missing")),
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.message(),
        r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Bogus": supported values: "Foreground", "Background", "Orphan", "nil""#
    );
    let a = send(
        &client,
        "DELETE",
        &path("missing"),
        "application/json",
        &json!({"orphanDependents": true, "propagationPolicy": "Orphan"}),
    )
    .await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.causes(),
        vec![(
            "FieldValueInvalid".to_string(),
            "propagationPolicy".to_string(),
            r#"Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set"#
                .to_string()
        )]
    );

    // A kind that keeps a generation gets one more when first marked, as kube's
    // markAsDeleting gives it.
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let ds: DaemonSet = serde_json::from_value(json!({"metadata": {"name": "ds"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
    .unwrap();
    let ds = dss.create(&pp, &ds).await.unwrap();
    assert_eq!(ds.metadata.generation, Some(1));
    let marked = dss
        .delete("ds", &DeleteParams::orphan())
        .await
        .unwrap()
        .left()
        .expect("marked");
    assert_eq!(marked.metadata.generation, Some(2));

    // Events' garbage collection policy is Unsupported: no finalizer, deleted at once.
    let evs: Api<Event> = Api::namespaced(client.clone(), "default");
    let ev: Event = serde_json::from_value(json!({"metadata": {"name": "ev"},
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "default"}}))
    .unwrap();
    for dp in [DeleteParams::orphan(), DeleteParams::foreground()] {
        evs.create(&pp, &ev).await.unwrap();
        evs.delete("ev", &dp).await.unwrap();
        assert_eq!(status(evs.get("ev").await.unwrap_err()).code, 404);
    }
    cluster.server.handle.shutdown().await;
}

/// An owner already in foreground deletion: an orphan delete swaps its finalizer (the
/// dependents are then kept, unowned), and a background delete takes the foreground
/// finalizer off, so the owner goes at once and its dependents after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_delete_changes_the_propagation_of_an_owner_in_foreground_deletion() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    for (owner, dep) in [("to-orphan", "kept"), ("to-background", "collected")] {
        let o = cms.create(&pp, &cm(owner, &[])).await.unwrap();
        // The dependent's own finalizer keeps it, so the owner stays in foreground deletion.
        let mut d = cm(dep, &[&o]);
        d.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        cms.create(&pp, &d).await.unwrap();
        let marked = cms
            .delete(owner, &DeleteParams::foreground())
            .await
            .unwrap()
            .left()
            .unwrap();
        assert_eq!(
            marked.metadata.finalizers,
            Some(vec!["foregroundDeletion".to_string()])
        );
        eventually("the blocking dependent to be marked", 10, || async {
            cms.get(dep)
                .await
                .ok()?
                .metadata
                .deletion_timestamp
                .map(|_| ())
        })
        .await;
    }
    let switched = cms
        .delete("to-orphan", &DeleteParams::orphan())
        .await
        .unwrap()
        .left()
        .expect("the orphan finalizer holds it");
    assert_eq!(
        switched.metadata.finalizers,
        Some(vec!["orphan".to_string()])
    );
    eventually("the orphaned owner to go", 10, || async {
        gone(&cms, "to-orphan").await.then_some(())
    })
    .await;
    let kept = cms.get("kept").await.unwrap();
    assert_eq!(kept.metadata.owner_references, None);
    assert_eq!(
        kept.metadata.finalizers,
        Some(vec!["example.com/hold".to_string()])
    );

    cms.delete("to-background", &DeleteParams::background())
        .await
        .unwrap();
    // No finalizer left: deleted at once; its dependent, already marked, waits for its own.
    assert!(gone(&cms, "to-background").await);
    let held = cms.get("collected").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    cluster.server.handle.shutdown().await;
}

/// A restart between the delete and the collector's patches (here: the marked owner written
/// while the server is down, as the server's own dry-run delete answers it, with one
/// dependent already patched) ends as an uninterrupted one: the dependents are kept and
/// unowned, the other owner's reference stays, and the owner is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_delete_interrupted_by_a_restart_finishes_after_it() {
    let cluster = Cluster::start().await;
    let dir = cluster.server.dir.path().to_path_buf();
    let client = cluster.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let owner = cms.create(&pp, &cm("owner", &[])).await.unwrap();
    let other = cms.create(&pp, &cm("other", &[])).await.unwrap();
    cms.create(&pp, &cm("patched", &[&owner])).await.unwrap();
    cms.create(&pp, &cm("unpatched", &[&owner])).await.unwrap();
    cms.create(&pp, &cm("shared", &[&other, &owner]))
        .await
        .unwrap();
    // What the delete stores, without storing it.
    let marked = cms
        .delete("owner", &DeleteParams::orphan().dry_run())
        .await
        .unwrap()
        .left()
        .expect("a dry run answers the marked owner");
    assert_eq!(marked.metadata.finalizers, Some(vec!["orphan".to_string()]));
    let stored = cms.get("owner").await.unwrap();
    assert_eq!(stored.metadata.finalizers, None);
    assert_eq!(
        marked.metadata.resource_version,
        stored.metadata.resource_version
    );
    cluster.server.handle.shutdown().await;

    {
        let store = mco_apiserver::store::Store::open(
            &dir.join("state.db"),
            100,
            mco_apiserver::Durability::default(),
        )
        .unwrap();
        let mut marked = serde_json::to_value(&marked).unwrap();
        marked["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        let put = |v: Value| -> mco_apiserver::store::Op {
            Box::new(move |_| Ok(mco_apiserver::store::Action::Put(v)))
        };
        store
            .write("/configmaps", "default", "owner", false, put(marked))
            .await
            .unwrap();
        let mut patched = (*store.get("/configmaps", "default", "patched").unwrap()).clone();
        patched["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        store
            .write("/configmaps", "default", "patched", false, put(patched))
            .await
            .unwrap();
    }

    let h = mco_apiserver::Server::start(mco_apiserver::Config::new(
        &dir,
        "127.0.0.1:0".parse().unwrap(),
    ))
    .await
    .unwrap();
    let client = h.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    eventually("the orphaned owner to go after the restart", 10, || async {
        gone(&cms, "owner").await.then_some(())
    })
    .await;
    for name in ["patched", "unpatched"] {
        let c = cms.get(name).await.unwrap();
        assert_eq!(c.metadata.owner_references, None, "{name}");
    }
    assert_eq!(
        owner_uids(&cms.get("shared").await.unwrap()),
        vec![uid(&other)]
    );
    // Later sweeps (any deletion runs one) leave them be.
    cms.delete("other", &DeleteParams::orphan()).await.unwrap();
    eventually("the other owner to go", 10, || async {
        gone(&cms, "other").await.then_some(())
    })
    .await;
    for name in ["patched", "unpatched", "shared"] {
        let c = cms.get(name).await.unwrap();
        assert_eq!(c.metadata.owner_references, None, "{name}");
    }
    h.shutdown().await;
}
