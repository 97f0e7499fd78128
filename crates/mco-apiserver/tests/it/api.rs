//! The server driven by kube-rs: typed and dynamic APIs, watches, SSA, auth.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{eventually, status};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use mco_apiserver::Identity;
use serde_json::{Value, json};

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
        "data": {"a": "1"}
    }))
    .unwrap()
}

fn mcn_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "machineconfiguration.openshift.io",
            "v1alpha1",
            "MachineConfigNode",
        ),
        "machineconfignodes",
    )
}

async fn install_mcn_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = mco_apimachinery::yaml::from_str(common::MCN_CRD).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    eventually("CRD established", 10, || async {
        let c = crds
            .get("machineconfignodes.machineconfiguration.openshift.io")
            .await
            .ok()?;
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

fn mcn(name: &str, pool: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1", "kind": "MachineConfigNode",
        "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/pool": pool}},
        "spec": {"node": {"name": name}, "pool": {"name": pool}}
    }))
    .unwrap()
}

/// The field managers recorded in an object's managedFields.
fn managers_of(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// A fresh server, an admin client (in-process if `local`) and ConfigMap `name` in `default`.
async fn with_configmap(name: &str, local: bool) -> (common::TestServer, kube::Client, ConfigMap) {
    let s = common::start().await;
    let client = if local {
        s.handle.local_client(Identity::Admin).await.unwrap()
    } else {
        s.handle.client_for(Identity::Admin).await.unwrap()
    };
    let created = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm(name, &[]))
        .await
        .unwrap();
    (s, client, created)
}

#[tokio::test]
async fn configmap_crud_conflicts_and_noops() {
    let (s, client, created) = with_configmap("demo", false).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = created.metadata.resource_version.clone().unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let again = status(
        cms.create(&PostParams::default(), &cm("demo", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(again.message, "configmaps \"demo\" already exists");

    // Optimistic concurrency.
    let mut stale = created.clone();
    cms.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .unwrap();
    stale.data = Some(BTreeMap::from([("a".to_string(), "3".to_string())]));
    let conflict = status(
        cms.replace("demo", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(conflict.code, 409);
    assert_eq!(
        conflict.message,
        "Operation cannot be fulfilled on configmaps \"demo\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(cms.get("demo").await.unwrap().data.unwrap()["a"], "2");

    // A no-op patch keeps the resourceVersion.
    let cur = cms.get("demo").await.unwrap();
    let same = cms
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        cur.metadata.resource_version
    );
    assert_ne!(cur.metadata.resource_version.as_deref(), Some(rv.as_str()));

    // JSON patch with a failing test op changes nothing.
    let e = status(
        cms.patch("demo", &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(json!([{"op": "test", "path": "/data/a", "value": "9"}, {"op": "replace", "path": "/data/a", "value": "9"}])).unwrap()))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(cms.get("demo").await.unwrap().data.unwrap()["a"], "2");

    // generateName, dry run, missing namespace.
    let mut g = cm("", &[]);
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let gen_obj = cms.create(&PostParams::default(), &g).await.unwrap();
    assert!(gen_obj.metadata.name.unwrap().starts_with("gen-"));
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    cms.create(&dry, &cm("dry", &[])).await.unwrap();
    assert_eq!(status(cms.get("dry").await.unwrap_err()).code, 404);
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    let e = status(
        nowhere
            .create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );

    cms.delete("demo", &DeleteParams::default()).await.unwrap();
    let gone = status(cms.get("demo").await.unwrap_err());
    assert_eq!(
        (gone.code, gone.message.as_str()),
        (404, "configmaps \"demo\" not found")
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn list_paging_and_selectors() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..5 {
        let tier = if i % 2 == 0 { "a" } else { "b" };
        cms.create(
            &PostParams::default(),
            &cm(&format!("cm-{i}"), &[("tier", tier)]),
        )
        .await
        .unwrap();
    }
    let mut names = Vec::new();
    // Every namespace also holds the root-CA ConfigMap, as on a real cluster.
    let mut lp = ListParams::default()
        .limit(2)
        .fields("metadata.name!=kube-root-ca.crt");
    let mut pages = 0;
    loop {
        let page = cms.list(&lp).await.unwrap();
        pages += 1;
        names.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    let count = |lp: ListParams| {
        let cms = cms.clone();
        async move { cms.list(&lp).await.unwrap().items.len() }
    };
    assert_eq!(count(ListParams::default().labels("tier=a")).await, 3);
    assert_eq!(
        count(ListParams::default().labels("tier in (a,b),tier!=a")).await,
        2
    );
    assert_eq!(
        count(ListParams::default().labels("!tier")).await,
        1,
        "kube-root-ca.crt"
    );
    assert_eq!(
        count(ListParams::default().fields("metadata.name=cm-3")).await,
        1
    );
    assert_eq!(
        count(ListParams::default().fields("metadata.name!=cm-3,metadata.namespace=default")).await,
        5,
        "cm-0, cm-1, cm-2, cm-4 and kube-root-ca.crt"
    );
    let bad = status(
        cms.list(&ListParams::default().fields("data.a=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 400);

    // Pods by node and phase, as drain and describe node ask.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (n, node) in [("p1", "worker-0"), ("p2", "worker-1")] {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": n}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})).unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let all_pods: Api<Pod> = Api::all(client.clone());
    let on0 = all_pods
        .list(&ListParams::default().fields("spec.nodeName=worker-0,status.phase!=Succeeded"))
        .await
        .unwrap();
    assert_eq!(on0.items.len(), 1);
    assert_eq!(on0.items[0].metadata.name.as_deref(), Some("p1"));

    // Discovery and /version too, as kube-apiserver counts non-resource requests.
    for path in ["/apis", "/version", "/openapi/v1"] {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        let _ = client.request_text(req).await;
    }

    // Every request above is counted, as kube-apiserver's apiserver_request_total.
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    for line in [
        r#"apiserver_request_total{verb="LIST",group="",resource="pods",subresource="",code="200"} 1"#,
        r#"apiserver_request_total{verb="POST",group="",resource="configmaps",subresource="",code="201"} 5"#,
        r#"apiserver_request_total{verb="LIST",group="",resource="configmaps",subresource="",code="400"} 1"#,
        r#"apiserver_request_total{verb="GET",group="",resource="",subresource="/apis",code="200"} 1"#,
        r#"apiserver_request_total{verb="GET",group="",resource="",subresource="/version",code="200"} 1"#,
        r#"apiserver_request_total{verb="GET",group="",resource="",subresource="/openapi/v1",code="404"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    s.handle.shutdown().await;
}

#[tokio::test]
async fn watch_resumes_and_expires() {
    let s = common::start_with(|mut c| {
        c.retained_events = 5;
        c
    })
    .await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("w0", &[]))
        .await
        .unwrap();
    let rv0 = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    cms.create(&PostParams::default(), &cm("w1", &[]))
        .await
        .unwrap();
    cms.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("w1", &DeleteParams::default()).await.unwrap();

    // Resume from rv0: exactly the three later events, in order.
    let wp = WatchParams::default().timeout(2);
    let events: Vec<_> = cms
        .watch(&wp, &rv0)
        .await
        .unwrap()
        .take(3)
        .try_collect()
        .await
        .unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark(_) => "BOOKMARK",
            WatchEvent::Error(_) => "ERROR",
        })
        .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);

    // Push rv0 out of the retained window: the watch answers 410 Gone.
    for i in 0..8 {
        cms.create(&PostParams::default(), &cm(&format!("x{i}"), &[]))
            .await
            .unwrap();
    }
    let first = cms
        .watch(&wp, &rv0)
        .await
        .unwrap()
        .boxed()
        .next()
        .await
        .unwrap();
    match first {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        Ok(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }

    // Label-filtered watches see a selector transition as ADDED/DELETED.
    let filtered = WatchParams::default().labels("app=web").timeout(3);
    let cur = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = cms.watch(&filtered, &cur).await.unwrap().boxed();
    cms.patch(
        "x1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    cms.patch(
        "x1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": null}}})),
    )
    .await
    .unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::Deleted(_)))
    ));
    s.handle.shutdown().await;
}

/// A watch whose objects stay quiet while others change is kept current by bookmarks of the
/// server's progress (the last one 2 s before its timeout), so its client resumes from there
/// instead of from a version the retained window has left behind.
#[tokio::test]
async fn quiet_watch_resumes_from_progress_bookmark() {
    let s = common::start_with(|mut c| {
        c.retained_events = 5;
        c
    })
    .await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let quiet = WatchParams::default()
        .fields("metadata.name=quiet")
        .timeout(4);
    let rv0 = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = cms.watch(&quiet, &rv0).await.unwrap().boxed();
    let mut rv_last = 0u64;
    for i in 0..8 {
        let c = cms
            .create(&PostParams::default(), &cm(&format!("busy-{i}"), &[]))
            .await
            .unwrap();
        rv_last = c.metadata.resource_version.unwrap().parse().unwrap();
    }
    let mut bookmark = None;
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            WatchEvent::Bookmark(b) => bookmark = Some(b.metadata.resource_version),
            other => panic!("the quiet watch saw {other:?}"),
        }
    }
    let bookmark = bookmark.expect("no bookmark before the timeout");
    assert!(
        bookmark.parse::<u64>().unwrap() >= rv_last,
        "bookmark {bookmark} behind the last write {rv_last}"
    );
    // rv0 has left the window; the bookmark has not.
    let first = |rv: String| {
        let cms = cms.clone();
        async move {
            let wp = WatchParams::default()
                .fields("metadata.name=quiet")
                .timeout(1);
            cms.watch(&wp, &rv).await.unwrap().boxed().next().await
        }
    };
    match first(rv0).await {
        Some(Err(kube::Error::Api(s))) => assert_eq!(s.code, 410),
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected 410 from the start version, got {other:?}"),
    }
    match first(bookmark).await {
        None | Some(Ok(WatchEvent::Bookmark(_))) => {}
        other => panic!("expected the resumed watch to run, got {other:?}"),
    }
    s.handle.shutdown().await;
}

#[tokio::test]
async fn watcher_relists_after_gone() {
    let s = common::start_with(|mut c| {
        c.retained_events = 3;
        c
    })
    .await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("seen-0", &[("app", "web")]))
        .await
        .unwrap();
    let cfg = watcher::Config::default()
        .labels("app=web")
        .timeout(1)
        .disable_bookmarks();
    let mut events = watcher(cms.clone(), cfg).boxed();
    let mut inits = 0;
    let mut seen = std::collections::BTreeSet::new();
    let mut pushed = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.contains("seen-1") {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("watcher stalled")
            .unwrap();
        match ev {
            Ok(watcher::Event::Init) => inits += 1,
            Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                seen.insert(o.metadata.name.unwrap());
            }
            Ok(watcher::Event::InitDone) if !pushed => {
                // Unrelated writes push the watcher's last resourceVersion out of the window.
                pushed = true;
                for i in 0..6 {
                    cms.create(&PostParams::default(), &cm(&format!("other-{i}"), &[]))
                        .await
                        .unwrap();
                }
            }
            Ok(watcher::Event::InitDone) if inits >= 2 => {
                cms.create(&PostParams::default(), &cm("seen-1", &[("app", "web")]))
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
    assert!(
        inits >= 2,
        "the watcher relisted after 410 (inits = {inits})"
    );
    assert!(seen.contains("seen-0"));
    s.handle.shutdown().await;
}

#[tokio::test]
async fn crd_schema_status_and_tables() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    install_mcn_crd(&client).await;
    let ar = mcn_resource();
    let mcns: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let created = mcns
        .create(&PostParams::default(), &mcn("worker-0", "worker"))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));

    // Schema violations are 422 with upstream's causes, and nothing is stored.
    let mut bad = mcn("worker-9", "worker");
    bad.data["spec"]["kernelType"] = json!("bogus");
    let e = status(mcns.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "MachineConfigNode.machineconfiguration.openshift.io \"worker-9\" is invalid: spec.kernelType: Unsupported value: \"bogus\": supported values: \"default\", \"realtime\", \"64k-pages\""
    );
    assert_eq!(e.details.unwrap().causes[0].field, "spec.kernelType");
    assert_eq!(status(mcns.get("worker-9").await.unwrap_err()).code, 404);

    // Unknown fields are pruned; Strict validation rejects them.
    let mut extra = mcn("worker-1", "worker");
    extra.data["spec"]["junk"] = json!(1);
    let stored = mcns.create(&PostParams::default(), &extra).await.unwrap();
    assert!(stored.data["spec"].get("junk").is_none());

    // Server-side apply on status: status changes, generation does not.
    let status_patch = json!({"apiVersion": "machineconfiguration.openshift.io/v1alpha1", "kind": "MachineConfigNode",
        "metadata": {"name": "worker-0"},
        "status": {"conditions": [{"type": "Updated", "status": "True", "reason": "r", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let after = mcns
        .patch_status(
            "worker-0",
            &PatchParams::apply("machine-config-daemon").force(),
            &Patch::Apply(&status_patch),
        )
        .await
        .unwrap();
    assert_eq!(after.data["status"]["conditions"][0]["status"], "True");
    assert_eq!(after.metadata.generation, Some(1));
    let managers = managers_of(&after.metadata);
    assert!(
        managers.contains(&"machine-config-daemon".to_string()),
        "{managers:?}"
    );
    // The main endpoint ignores status; a spec change bumps generation.
    let spec_patch = json!({"spec": {"configVersion": {"desired": "rendered-worker-2"}}, "status": {"conditions": []}});
    let after = mcns
        .patch(
            "worker-0",
            &PatchParams::default(),
            &Patch::Merge(&spec_patch),
        )
        .await
        .unwrap();
    assert_eq!(after.metadata.generation, Some(2));
    assert_eq!(after.data["status"]["conditions"][0]["type"], "Updated");
    // Strategic merge patch is not for custom resources.
    let e = status(
        mcns.patch(
            "worker-0",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 415);

    // Field selectors from selectableFields.
    let lp = ListParams::default().fields("spec.pool.name=worker");
    assert_eq!(mcns.list(&lp).await.unwrap().items.len(), 2);

    // Tables with the printer columns.
    let req = http::Request::get(
        "/apis/machineconfiguration.openshift.io/v1alpha1/machineconfignodes?limit=500",
    )
    .header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .body(vec![])
    .unwrap();
    let table: Value = client.request(req).await.unwrap();
    let headers: Vec<String> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["priority"] == 0)
        .map(|c| c["name"].as_str().unwrap().to_uppercase())
        .collect();
    assert_eq!(
        headers.join(" "),
        "NAME UPDATED UPDATEPREPARED UPDATEEXECUTED UPDATEPOSTACTIONCOMPLETED UPDATECOMPLETED RESUMED"
    );
    assert_eq!(table["rows"][0]["cells"][1], "True");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    // Discovery lists the CRD with its short name.
    let disc = kube::Discovery::new(client.clone()).run().await.unwrap();
    let group = disc
        .get("machineconfiguration.openshift.io")
        .expect("group discovered");
    assert!(
        group
            .recommended_resources()
            .iter()
            .any(|(r, _)| r.plural == "machineconfignodes")
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn auth_and_mcn_owner_guard() {
    let s = common::start().await;
    let admin = s.handle.client_for(Identity::Admin).await.unwrap();
    install_mcn_crd(&admin).await;
    let ar = mcn_resource();
    Api::<DynamicObject>::all_with(admin.clone(), &ar)
        .create(&PostParams::default(), &mcn("worker-1", "worker"))
        .await
        .unwrap();

    let node = s
        .handle
        .client_for(Identity::Node("worker-0".into()))
        .await
        .unwrap();
    let mine: Api<DynamicObject> = Api::all_with(node.clone(), &ar);
    mine.create(&PostParams::default(), &mcn("worker-0", "worker"))
        .await
        .unwrap();
    let st = json!({"status": {"observedGeneration": 1}});
    mine.patch_status("worker-0", &PatchParams::default(), &Patch::Merge(&st))
        .await
        .unwrap();
    let e = status(
        mine.patch_status("worker-1", &PatchParams::default(), &Patch::Merge(&st))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            "machineconfignodes.machineconfiguration.openshift.io \"worker-1\" is forbidden: ValidatingAdmissionPolicy 'mco-mcn-guards' with binding 'mco-mcn-guards-binding' denied request: updates to MCN worker-1 can only be done from the MCN's owner node"
        )
    );
    let e = status(
        mine.delete("worker-1", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    // Reads are not restricted.
    assert!(mine.get("worker-1").await.is_ok());

    // Unknown and missing tokens get 401.
    let doc = s.handle.kubeconfig_for_token("x", "not-a-token");
    let kc = kube::config::Kubeconfig::from_yaml(&doc).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let bad = kube::Client::try_from(cfg.clone()).unwrap();
    let e = status(
        Api::<ConfigMap>::namespaced(bad, "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"));
    let mut anon_cfg = cfg;
    anon_cfg.auth_info = Default::default();
    let anon = kube::Client::try_from(anon_cfg).unwrap();
    let e = status(
        Api::<ConfigMap>::namespaced(anon.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 401);
    // /version stays public, as upstream's discovery role allows.
    assert_eq!(anon.apiserver_version().await.unwrap().minor, "32");
    s.handle.shutdown().await;
}

#[tokio::test]
async fn finalizers_and_owner_garbage_collection() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut f = cm("held", &[]);
    f.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &f).await.unwrap();
    let deleted = cms.delete("held", &DeleteParams::default()).await.unwrap();
    let held = deleted
        .left()
        .expect("the object comes back while finalizers remain");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status(cms.get("held").await.unwrap_err()).code, 404);

    // Deleting a Node removes the MachineConfigNode it owns.
    install_mcn_crd(&client).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let n: Node = serde_json::from_value(json!({"metadata": {"name": "worker-0"}})).unwrap();
    let n = nodes.create(&PostParams::default(), &n).await.unwrap();
    let mut m = mcn("worker-0", "worker");
    m.metadata.owner_references = Some(vec![serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "name": "worker-0", "uid": n.metadata.uid.unwrap()})).unwrap()]);
    let mcns: Api<DynamicObject> = Api::all_with(client.clone(), &mcn_resource());
    mcns.create(&PostParams::default(), &m).await.unwrap();
    nodes
        .delete("worker-0", &DeleteParams::default())
        .await
        .unwrap();
    eventually("MCN garbage-collected", 10, || async {
        mcns.get("worker-0").await.is_err().then_some(())
    })
    .await;
    s.handle.shutdown().await;
}

fn owned_by(name: &str, owner: &ConfigMap, block: bool) -> ConfigMap {
    let mut c = cm(name, &[]);
    c.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "name": owner.metadata.name, "uid": owner.metadata.uid, "blockOwnerDeletion": block}))
        .unwrap(),
    ]);
    c
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let owner = cms.create(&pp, &cm("fg-owner", &[])).await.unwrap();
    // A blocking dependent that its own finalizer keeps around for a while, and a
    // non-blocking one the owner does not wait for.
    let mut blocking = owned_by("fg-blocking", &owner, true);
    blocking.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&pp, &blocking).await.unwrap();
    cms.create(&pp, &owned_by("fg-loose", &owner, false))
        .await
        .unwrap();

    let marked = cms
        .delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .expect("the owner stays while dependents remain");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(
        marked.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_string()][..])
    );
    eventually("the dependents to be deleted", 10, || async {
        let held = cms.get("fg-blocking").await.ok()?;
        let loose_gone = cms.get("fg-loose").await.is_err();
        (held.metadata.deletion_timestamp.is_some() && loose_gone).then_some(())
    })
    .await;
    let still = cms.get("fg-owner").await.unwrap();
    assert!(
        still
            .metadata
            .finalizers
            .is_some_and(|f| f.iter().any(|f| f == "foregroundDeletion")),
        "the owner waits for its blocking dependent"
    );

    cms.patch(
        "fg-blocking",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually(
        "the owner to go after its blocking dependent",
        10,
        || async {
            let gone = |r: Result<ConfigMap, kube::Error>| r.is_err_and(|e| status(e).code == 404);
            (gone(cms.get("fg-blocking").await) && gone(cms.get("fg-owner").await)).then_some(())
        },
    )
    .await;

    // Without dependents the owner goes as soon as the collector has looked.
    cms.create(&pp, &cm("fg-alone", &[])).await.unwrap();
    cms.delete("fg-alone", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually("a lone owner to go", 10, || async {
        cms.get("fg-alone").await.is_err().then_some(())
    })
    .await;
    s.handle.shutdown().await;
}

fn ready_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "worker-0", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn evictions_honour_disruption_budgets() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    for n in ["web-1", "web-2"] {
        pods.create(&PostParams::default(), &ready_pod(n))
            .await
            .unwrap();
    }
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    eventually("PDB status", 10, || async {
        let st = pdbs.get("web").await.ok()?.status?;
        (st.current_healthy == 2
            && st.desired_healthy == 2
            && st.disruptions_allowed == 0
            && st.expected_pods == 2)
            .then_some(())
    })
    .await;
    let e = status(
        pods.evict("web-1", &EvictParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(
        e.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(
        e.details.unwrap().causes[0].message,
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    assert!(pods.get("web-1").await.is_ok());

    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": "50%"}})),
    )
    .await
    .unwrap();
    eventually("PDB allows one", 10, || async {
        (pdbs.get("web").await.ok()?.status?.disruptions_allowed == 1).then_some(())
    })
    .await;
    pods.evict("web-1", &EvictParams::default()).await.unwrap();
    assert_eq!(status(pods.get("web-1").await.unwrap_err()).code, 404);
    eventually("PDB recomputed", 10, || async {
        let st = pdbs.get("web").await.ok()?.status?;
        (st.current_healthy == 1 && st.disruptions_allowed == 0).then_some(())
    })
    .await;
    assert_eq!(
        status(
            pods.evict("web-2", &EvictParams::default())
                .await
                .unwrap_err()
        )
        .code,
        429
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_rejected_and_not_stored() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let post = |body: Vec<u8>| {
        http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("Content-Type", "application/json")
            .body(body)
            .unwrap()
    };
    let e = status(
        client
            .request_text(post(br#"{"metadata": {"name": "x"}, "data": {"#.to_vec()))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        r#"the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: unexpected end of JSON input ({"metadata": {"name": "x"}, "d ...)"#
    );

    let big = json!({"metadata": {"name": "big"}, "data": {"a": "x".repeat(4 * 1024 * 1024)}});
    let e = status(
        client
            .request_text(post(serde_json::to_vec(&big).unwrap()))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 413);

    let e = status(
        client
            .request_text(post(br#"{"metadata": {"name": "Bad_Name"}}"#.to_vec()))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", e.message);

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(
        cms.list(&ListParams::default().fields("metadata.name!=kube-root-ca.crt"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn restart_serves_everything_that_was_there() {
    let s = common::start().await;
    let dir = s.dir.path().to_path_buf();
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    install_mcn_crd(&client).await;
    let before = Api::<DynamicObject>::all_with(client.clone(), &mcn_resource())
        .create(&PostParams::default(), &mcn("worker-0", "worker"))
        .await
        .unwrap();
    let kubeconfig = std::fs::read_to_string(s.handle.kubeconfig_path()).unwrap();
    s.handle.shutdown().await;

    let h = mco_apiserver::Server::start(mco_apiserver::Config::new(
        &dir,
        "127.0.0.1:0".parse().unwrap(),
    ))
    .await
    .unwrap();
    let again = std::fs::read_to_string(h.kubeconfig_path()).unwrap();
    let token = |k: &str| {
        k.lines()
            .find(|l| l.trim_start().starts_with("token:"))
            .map(str::to_string)
    };
    assert_eq!(
        token(&kubeconfig),
        token(&again),
        "the admin token survives a restart"
    );
    let client = h.client_for(Identity::Admin).await.unwrap();
    let after = Api::<DynamicObject>::all_with(client, &mcn_resource())
        .get("worker-0")
        .await
        .unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.metadata.uid, before.metadata.uid);
    h.shutdown().await;
}

#[tokio::test]
async fn a_small_controller_reconciles() {
    use kube::runtime::controller::{Action, Controller};
    use std::sync::Arc;
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Controller).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("ctl", &[]))
        .await
        .unwrap();
    let api = cms.clone();
    let ctl = Controller::new(cms.clone(), watcher::Config::default())
        .run(
            |obj: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>| async move {
                let name = obj.metadata.name.clone().unwrap();
                let p = json!({"metadata": {"annotations": {"reconciled": "yes"}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&p))
                    .await?;
                Ok::<_, kube::Error>(Action::await_change())
            },
            |_, _: &kube::Error, _| Action::requeue(Duration::from_secs(1)),
            Arc::new(api),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(ctl);
    eventually("reconciled annotation", 10, || async {
        let c = cms.get("ctl").await.ok()?;
        (c.metadata
            .annotations?
            .get("reconciled")
            .map(String::as_str)
            == Some("yes"))
        .then_some(())
    })
    .await;
    task.abort();
    s.handle.shutdown().await;
}

/// The in-process client is the same API without the network: CRUD, watches, conflicts,
/// authentication and the owner-node guard all behave as over HTTPS, and it stops working
/// when the server shuts down.
#[tokio::test]
async fn local_client_is_the_same_api_in_process() {
    let s = common::start().await;
    let admin = s.handle.local_client(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let mut w = cms
        .watch(
            &WatchParams::default().fields("metadata.name!=kube-root-ca.crt"),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    let made = cms
        .create(&PostParams::default(), &cm("a", &[("k", "v")]))
        .await
        .unwrap();
    assert_eq!(made.metadata.name.as_deref(), Some("a"));
    let event = tokio::time::timeout(Duration::from_secs(10), w.try_next())
        .await
        .expect("a watch event in time")
        .unwrap();
    assert!(matches!(event, Some(WatchEvent::Added(c)) if c.metadata.name.as_deref() == Some("a")));
    let listed = cms
        .list(&ListParams::default().labels("k=v"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let mut stale = made.clone();
    let mut changed = made.clone();
    changed.data = Some(BTreeMap::from([("a".into(), "2".into())]));
    cms.replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    stale.data = Some(BTreeMap::from([("b".into(), "2".into())]));
    assert_eq!(
        status(
            cms.replace("a", &PostParams::default(), &stale)
                .await
                .unwrap_err()
        )
        .code,
        409
    );

    // Authentication: no token is 401, and a node may write only its own MCN.
    let anon = s.handle.local_transport(None);
    let e = status(
        Api::<ConfigMap>::namespaced(anon, "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 401);
    install_mcn_crd(&admin).await;
    let node = s
        .handle
        .local_client(Identity::Node("worker-0".into()))
        .await
        .unwrap();
    let mine: Api<DynamicObject> = Api::all_with(node, &mcn_resource());
    Api::<DynamicObject>::all_with(admin.clone(), &mcn_resource())
        .create(&PostParams::default(), &mcn("worker-1", "worker"))
        .await
        .unwrap();
    let st = json!({"status": {"observedGeneration": 1}});
    assert_eq!(
        status(
            mine.patch_status("worker-1", &PatchParams::default(), &Patch::Merge(&st))
                .await
                .unwrap_err()
        )
        .code,
        403
    );

    s.handle.shutdown().await;
    let err = cms.get("a").await.expect_err("no requests after shutdown");
    assert!(!matches!(err, kube::Error::Api(_)), "{err:?}");
}

/// In-process clients get objects without `managedFields` (they never read them); the server
/// still records them, and an HTTP client sees them as kube-apiserver serves them.
#[tokio::test]
async fn in_process_clients_are_served_without_managed_fields() {
    let s = common::start().await;
    let local = s.handle.local_client(Identity::Admin).await.unwrap();
    let http = s.handle.client_for(Identity::Admin).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(local, "default");
    let not_ca = "metadata.name!=kube-root-ca.crt";
    let mut w = cms
        .watch(&WatchParams::default().fields(not_ca), "0")
        .await
        .unwrap()
        .boxed();
    let made = cms
        .create(&PostParams::default(), &cm("slim", &[("k", "v")]))
        .await
        .unwrap();
    let patched = cms
        .patch(
            "slim",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "1"}})),
        )
        .await
        .unwrap();
    let got = cms.get("slim").await.unwrap();
    let listed = cms
        .list(&ListParams::default().fields(not_ca))
        .await
        .unwrap();
    // Watched until the patch is seen (the first event may already show it).
    let mut watched = vec![];
    while !watched
        .last()
        .is_some_and(|c: &ConfigMap| c.data.as_ref().is_some_and(|d| d.contains_key("a")))
    {
        match tokio::time::timeout(Duration::from_secs(10), w.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(c) | WatchEvent::Modified(c)))) => watched.push(c),
            Ok(Ok(Some(WatchEvent::Bookmark(_)))) => {}
            other => panic!("expected the patched object watched, got {other:?}"),
        }
    }
    for c in [&made, &patched, &got, &listed.items[0]]
        .into_iter()
        .chain(&watched)
    {
        assert_eq!(c.metadata.managed_fields, None, "{c:?}");
        assert_eq!(c.metadata.name.as_deref(), Some("slim"));
    }

    let seen = Api::<ConfigMap>::namespaced(http, "default")
        .get("slim")
        .await
        .unwrap();
    let managers: Vec<_> = seen
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.operation.unwrap_or_default())
        .collect();
    assert_eq!(
        managers,
        ["Update"],
        "both writes recorded under one manager"
    );
}

/// Patches are decided off the store's writer and committed only if the object did not change
/// meanwhile: many concurrent patches and applies to one object must all land, none lost.
#[tokio::test]
async fn concurrent_patches_to_one_object_all_land() {
    let (s, admin, first) = with_configmap("hot", true).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin, "default");
    let rv0: u64 = first.metadata.resource_version.unwrap().parse().unwrap();
    let n = 40;
    let writes = (0..n).map(|i| {
        let cms = cms.clone();
        async move {
            if i % 2 == 0 {
                let p = json!({"metadata": {"labels": {format!("merge-{i}"): "x"}}});
                cms.patch("hot", &PatchParams::default(), &Patch::Merge(&p))
                    .await
            } else {
                let p = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "hot", "labels": {format!("apply-{i}"): "x"}}});
                cms.patch(
                    "hot",
                    &PatchParams::apply(&format!("m{i}")),
                    &Patch::Apply(&p),
                )
                .await
            }
        }
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    // Read over HTTP: in-process clients are served without managed fields.
    let http = s.handle.client_for(Identity::Admin).await.unwrap();
    let last = Api::<ConfigMap>::namespaced(http, "default")
        .get("hot")
        .await
        .unwrap();
    let labels = last.metadata.labels.clone().unwrap_or_default();
    for i in 0..n {
        let k = if i % 2 == 0 {
            format!("merge-{i}")
        } else {
            format!("apply-{i}")
        };
        assert!(labels.contains_key(&k), "label {k} lost: {labels:?}");
    }
    let rv: u64 = last
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(rv - rv0, n as u64, "one new version per write");
    let managers = managers_of(&last.metadata);
    assert_eq!(
        managers.iter().filter(|m| m.starts_with('m')).count(),
        n / 2,
        "{managers:?}"
    );
}

/// A resourceVersion in an applied configuration is a precondition, as in kube-apiserver: a
/// stale one is refused with 409 and changes nothing; the current one, or none, applies.
#[tokio::test]
async fn apply_with_a_stale_resource_version_conflicts() {
    let (_s, admin, first) = with_configmap("pre", true).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin, "default");
    let rv0 = first.metadata.resource_version.clone().unwrap();
    let apply = |rv: Option<&str>, v: &str| {
        let mut body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "pre"}, "data": {"k": v}});
        if let Some(rv) = rv {
            body["metadata"]["resourceVersion"] = json!(rv);
        }
        body
    };
    let pp = PatchParams::apply("tester").force();
    let second = cms
        .patch("pre", &pp, &Patch::Apply(&apply(Some(&rv0), "1")))
        .await
        .expect("the current resourceVersion applies");
    let e = status(
        cms.patch("pre", &pp, &Patch::Apply(&apply(Some(&rv0), "2")))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409, "{e:?}");
    let now = cms.get("pre").await.unwrap();
    assert_eq!(
        now.data.unwrap()["k"],
        "1",
        "a refused apply changes nothing"
    );
    assert_eq!(
        now.metadata.resource_version,
        second.metadata.resource_version
    );
    cms.patch("pre", &pp, &Patch::Apply(&apply(None, "3")))
        .await
        .expect("no resourceVersion, no precondition");
}

/// A PUT of a missing object creates it where kube-apiserver's strategy allows it (Events,
/// Leases), judged as a create is and only for a caller that may create; other kinds answer
/// 404. Only kinds whose strategy keeps `metadata.generation` get one.
#[tokio::test]
async fn a_put_creates_where_the_kind_allows_it() {
    let s = common::start().await;
    let admin = s.admin().await;
    let put = |c: &kube::Client, path: &str, body: Value| {
        let (c, path) = (c.clone(), path.to_string());
        async move { common::send(&c, "PUT", &path, "application/json", &body).await }
    };
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let lease = |name: &str, holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "resourceVersion": "999", "generation": 3},
            "spec": {"holderIdentity": holder}})
    };
    // Created (the resourceVersion has nothing to match), as sent: a Lease has no generation
    // of the server's.
    let a = put(&admin, &format!("{leases}/l1"), lease("l1", "a")).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert!(a.body["metadata"]["uid"].is_string());
    assert_eq!(a.body["metadata"]["generation"], 3);
    let mut again = lease("l1", "b");
    again["metadata"]["resourceVersion"] = a.body["metadata"]["resourceVersion"].clone();
    let a = put(&admin, &format!("{leases}/l1"), again).await;
    assert_eq!(
        (a.code, &a.body["spec"]["holderIdentity"]),
        (200, &json!("b"))
    );
    assert_eq!(a.body["metadata"]["generation"], 3);

    // A ConfigMap is not created by a PUT.
    let a = put(
        &admin,
        "/api/v1/namespaces/default/configmaps/c1",
        json!({"metadata": {"name": "c1"}, "data": {"a": "1"}}),
    )
    .await;
    assert_eq!((a.code, a.message()), (404, "configmaps \"c1\" not found"));
    // Nor anything without a name, or in a namespace that does not exist.
    let a = put(&admin, &format!("{leases}/l2"), json!({"spec": {}})).await;
    assert_eq!(
        (a.code, a.message()),
        (
            400,
            "the name of the object (l2 based on URL) was undeterminable: name must be provided"
        )
    );
    let a = put(
        &admin,
        "/apis/coordination.k8s.io/v1/namespaces/nowhere/leases/l2",
        lease("l2", "a"),
    )
    .await;
    assert_eq!(
        (a.code, a.message()),
        (404, "namespaces \"nowhere\" not found")
    );

    // An Event is validated as on create: refused, nothing is stored; valid, it is created.
    let events = "/api/v1/namespaces/default/events";
    let event = json!({"metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"},
        "reason": "R", "message": "m", "type": "Normal", "source": {"component": "c"}});
    let a = put(&admin, &format!("{events}/e1"), event.clone()).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.causes(),
        [(
            "FieldValueInvalid".to_string(),
            "involvedObject.namespace".to_string(),
            "Invalid value: \"other\": does not match event.namespace".to_string()
        )]
    );
    let mut ok = event;
    ok["involvedObject"]["namespace"] = json!("default");
    let a = put(&admin, &format!("{events}/e1"), ok).await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert_eq!(a.body["metadata"].get("generation"), None);

    // A caller that may update Leases but not create them cannot create one by a PUT.
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    let post = |path: String, body: Value| {
        let c = admin.clone();
        async move { common::send(&c, "POST", &path, "application/json", &body).await }
    };
    let a = post(
        format!("{rbac}/roles"),
        json!({"metadata": {"name": "renew"}, "rules": [{"apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"], "verbs": ["get", "update"]}]}),
    )
    .await;
    assert_eq!(a.code, 201, "{}", a.body);
    let a = post(
        format!("{rbac}/rolebindings"),
        json!({"metadata": {"name": "renew"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "renew"},
            "subjects": [{"kind": "ServiceAccount", "name": "renewer", "namespace": "default"}]}),
    )
    .await;
    assert_eq!(a.code, 201, "{}", a.body);
    let renewer = s
        .handle
        .client_for(Identity::service_account("default", "renewer", None))
        .await
        .unwrap();
    let mut renewal = lease("l1", "c");
    renewal["metadata"]["resourceVersion"] = json!("");
    let a = put(&renewer, &format!("{leases}/l1"), renewal).await;
    assert_eq!(a.code, 200, "{}", a.body);
    let a = put(&renewer, &format!("{leases}/l3"), lease("l3", "c")).await;
    assert_eq!(
        (a.code, a.message()),
        (
            403,
            "leases.coordination.k8s.io \"l3\" is forbidden: User \"system:serviceaccount:default:renewer\" cannot create resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"default\""
        )
    );
    s.handle.shutdown().await;
}

/// Requests kube-apiserver refuses before looking at the object, answered in its words.
#[tokio::test]
async fn unserved_subresources_options_and_selectors_answer_as_upstream() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    install_mcn_crd(&client).await;
    let mcns: Api<DynamicObject> = Api::all_with(client.clone(), &mcn_resource());
    mcns.create(&PostParams::default(), &mcn("worker-0", "worker"))
        .await
        .unwrap();
    let path = "/apis/machineconfiguration.openshift.io/v1alpha1/machineconfignodes/worker-0";

    // A custom object's unserved subresource is the object not found, for every verb.
    for (method, ct) in [
        ("GET", "application/json"),
        ("PATCH", "application/merge-patch+json"),
        ("PUT", "application/json"),
    ] {
        let a = common::send(&client, method, &format!("{path}/scale"), ct, &json!({})).await;
        assert_eq!(a.code, 404, "{method}");
        assert_eq!(
            a.body["details"],
            json!({"group": "machineconfiguration.openshift.io", "kind": "machineconfignodes", "name": "worker-0"}),
            "{method}"
        );
        assert_eq!(
            a.message(),
            "machineconfignodes.machineconfiguration.openshift.io \"worker-0\" not found"
        );
    }
    // A built-in kind's unknown subresource is an unknown path.
    let a = common::send(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps/x/scale",
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(
        (a.code, a.message()),
        (404, "the server could not find the requested resource")
    );

    // An apply names its field manager; the options are checked before the body.
    let a = common::send(
        &client,
        "PATCH",
        path,
        "application/apply-patch+yaml",
        &json!("{"),
    )
    .await;
    assert_eq!(a.code, 422);
    assert_eq!(
        a.message(),
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(a.body["details"]["kind"], "PatchOptions");
    assert!(a.body["details"].get("name").is_none());

    let a = common::send(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        "application/merge-patch+json",
        &json!("{\"data\": "),
    )
    .await;
    assert_eq!((a.code, a.message()), (400, "invalid JSON patch"));

    let a = common::send(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(b",
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(a.code, 400);
    assert_eq!(
        a.message(),
        "unable to parse requirement: found '', expected: ',' or ')'"
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn nodes_and_pods_are_stored_with_kube_apiservers_defaults() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let pp = PostParams::default();

    let nodes: Api<Node> = Api::all(client.clone());
    let n: Node = serde_json::from_value(json!({"metadata": {"name": "defaulted"}})).unwrap();
    let n = nodes.create(&pp, &n).await.unwrap();
    assert!(n.spec.is_some(), "spec: {{}} is always written");
    let port = n
        .status
        .and_then(|st| st.daemon_endpoints)
        .and_then(|d| d.kubelet_endpoint)
        .map(|k| k.port);
    assert_eq!(port, Some(0));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "defaulted"},
        "spec": {"containers": [{"name": "c", "image": "web:latest"}]}}))
    .unwrap();
    let p = pods.create(&pp, &p).await.unwrap();
    let spec = p.spec.clone().unwrap();
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    assert_eq!(spec.priority, Some(0));
    assert_eq!(spec.tolerations.map(|t| t.len()), Some(2));
    let c = &spec.containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    let volume = spec.volumes.unwrap()[0].name.clone();
    assert!(volume.starts_with("kube-api-access-"), "{volume}");
    let mounts = c.volume_mounts.clone().unwrap();
    assert_eq!(mounts[0].name, volume);
    assert_eq!(
        p.status.clone().and_then(|st| st.qos_class).as_deref(),
        Some("BestEffort")
    );
    // The defaulted object sent back unchanged is a no-op.
    let again = pods.replace("defaulted", &pp, &p).await.unwrap();
    assert_eq!(again.metadata.resource_version, p.metadata.resource_version);
    s.handle.shutdown().await;
}

#[tokio::test]
async fn every_namespace_keeps_the_root_ca_configmap() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let ca = s.handle.ca_pem().to_string();
    let holds_ca = |cm: &ConfigMap| {
        cm.data.as_ref().and_then(|d| d.get("ca.crt")) == Some(&ca)
            && cm
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("kubernetes.io/description"))
    };
    let default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(holds_ca(&default.get("kube-root-ca.crt").await.unwrap()));

    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let fresh: Api<ConfigMap> = Api::namespaced(client.clone(), "fresh");
    eventually("the CA in a new namespace", 10, || async {
        holds_ca(&fresh.get("kube-root-ca.crt").await.ok()?).then_some(())
    })
    .await;

    // Changed or deleted, it is put back.
    fresh
        .patch(
            "kube-root-ca.crt",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": "other"}})),
        )
        .await
        .unwrap();
    eventually("the CA restored", 10, || async {
        holds_ca(&fresh.get("kube-root-ca.crt").await.ok()?).then_some(())
    })
    .await;
    fresh
        .delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the CA recreated", 10, || async {
        holds_ca(&fresh.get("kube-root-ca.crt").await.ok()?).then_some(())
    })
    .await;
    s.handle.shutdown().await;
}
