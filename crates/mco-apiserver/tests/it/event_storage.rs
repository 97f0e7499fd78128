//! One storage behind both Event APIs, as kube-apiserver has it: an Event written through
//! `events.k8s.io/v1` is read, listed, selected, watched, patched and deleted through core `v1`
//! and the other way round, converted field by field (`note`/`message`,
//! `regarding`/`involvedObject`, `reportingController`/`reportingComponent`,
//! `deprecatedSource`/`source`, ...), with one resourceVersion sequence. Real kubectl reads the
//! controller's Events (kube-rs's `Recorder` writes them through `events.k8s.io/v1`) with
//! `get events` and `describe`. A data directory of a server that kept the two apart still
//! serves its Events.

use crate::common;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use mco_apiserver::Identity;
use serde_json::{Value, json};

use common::{Answer, Cluster, Kubectl, send};

fn json_of(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

async fn get(client: &kube::Client, path: &str) -> Answer {
    send(client, "GET", path, "application/json", &Value::Null).await
}

async fn node(client: &kube::Client, name: &str) -> String {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let n = Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap();
    n.metadata.uid.unwrap()
}

/// Now, as a `MicroTime`.
fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

fn now_second() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// An Event as kube-rs's `Recorder` writes it, through `events.k8s.io/v1`.
fn recorder_event(name: &str, node: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid},
        "eventTime": now_micro(),
        "reportingController": "machineconfigcontroller", "reportingInstance": "mco-0",
        "action": "Reconcile", "reason": "RenderedConfigGenerated", "note": "rendered-worker-1 made",
        "type": "Normal",
    })
}

/// An old-style core Event as mco's daemon writes it.
fn daemon_event(name: &str, node: &str) -> Value {
    let now = now_second();
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": "OSUpdateStarted", "message": "Changing OS", "type": "Normal",
        "source": {"component": "machineconfigdaemon", "host": node},
        "firstTimestamp": now, "lastTimestamp": now, "count": 3,
    })
}

fn rv(v: &Value) -> &str {
    v["metadata"]["resourceVersion"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_each_apis_events_through_the_other() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let uid = node(&client, "worker-0").await;
    let k = |args: &[&str]| cluster.kubectl.ok(args);
    let file = cluster.kubectl.home.path().join("ev.json");

    // The controller's Event, through events.k8s.io/v1, read through core v1.
    std::fs::write(
        &file,
        recorder_event("worker-0.rendered", "worker-0", &uid).to_string(),
    )
    .unwrap();
    k(&["create", "-f", file.to_str().unwrap()]);
    let core = json_of(&k(&["get", "event", "worker-0.rendered", "-o", "json"]));
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["kind"], "Event");
    assert_eq!(
        core["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Node", "name": "worker-0", "uid": uid})
    );
    assert_eq!(core["message"], "rendered-worker-1 made");
    assert_eq!(core["reportingComponent"], "machineconfigcontroller");
    assert_eq!(core["reportingInstance"], "mco-0");
    // Unset in the new API, and written as Go writes the core type.
    assert_eq!(core["source"], json!({}));
    assert_eq!(core["firstTimestamp"], Value::Null);
    assert_eq!(core["lastTimestamp"], Value::Null);
    assert!(core.get("note").is_none() && core.get("regarding").is_none());
    let new = json_of(&k(&[
        "get",
        "events.events.k8s.io",
        "worker-0.rendered",
        "-o",
        "json",
    ]));
    assert_eq!(new["apiVersion"], "events.k8s.io/v1");
    assert_eq!(new["note"], "rendered-worker-1 made");
    assert_eq!(rv(&new), rv(&core), "one object, one resourceVersion");

    // The old-style daemon Event, through core v1, read through events.k8s.io/v1.
    std::fs::write(
        &file,
        daemon_event("worker-0.osupdate", "worker-0").to_string(),
    )
    .unwrap();
    k(&["create", "-f", file.to_str().unwrap()]);
    let new = json_of(&k(&[
        "get",
        "events.events.k8s.io",
        "worker-0.osupdate",
        "-o",
        "json",
    ]));
    assert_eq!(new["regarding"]["name"], "worker-0");
    assert_eq!(new["note"], "Changing OS");
    assert_eq!(
        new["deprecatedSource"],
        json!({"component": "machineconfigdaemon", "host": "worker-0"})
    );
    assert_eq!(new["deprecatedCount"], 3);
    assert_eq!(new["eventTime"], Value::Null);
    assert!(new.get("message").is_none() && new.get("source").is_none());

    // `kubectl get events` (core, the server's Table) lists both, the controller's with a
    // LAST SEEN from its eventTime.
    let table = k(&["get", "events", "-n", "default"]);
    let mut lines = table.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    let row = lines
        .find(|l| l.contains("RenderedConfigGenerated"))
        .unwrap_or_else(|| panic!("the controller's event is listed: {table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(
        cells[0].ends_with('s') && cells[0][..cells[0].len() - 1].parse::<u32>().is_ok(),
        "seen seconds ago: {row}"
    );
    assert_eq!(
        &cells[1..],
        [
            "Normal",
            "RenderedConfigGenerated",
            "node/worker-0",
            "rendered-worker-1",
            "made"
        ]
    );
    assert!(table.contains("OSUpdateStarted"), "{table}");
    // Listed the other way too.
    let names = k(&["get", "events.events.k8s.io", "-n", "default", "-o", "name"]);
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "event.events.k8s.io/worker-0.osupdate",
            "event.events.k8s.io/worker-0.rendered"
        ]
    );

    // `describe node` lists core Events by involvedObject (kind, name, namespace, uid): the
    // controller's is among them.
    let described = k(&["describe", "node", "worker-0"]);
    let events = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("{described}"));
    assert!(
        events.contains("RenderedConfigGenerated")
            && events.contains("machineconfigcontroller")
            && events.contains("rendered-worker-1 made"),
        "{events}"
    );

    // Patched through the other API, each time the next resourceVersion of the one sequence.
    let before = rv(&core).parse::<u64>().unwrap();
    let patched = json_of(&k(&[
        "patch",
        "event",
        "worker-0.rendered",
        "--type=merge",
        "-p",
        r#"{"count":2}"#,
        "-o",
        "json",
    ]));
    assert_eq!(patched["count"], 2);
    let new = json_of(&k(&[
        "get",
        "events.events.k8s.io",
        "worker-0.rendered",
        "-o",
        "json",
    ]));
    assert_eq!(new["deprecatedCount"], 2);
    assert_eq!(new["note"], "rendered-worker-1 made");
    assert!(rv(&new).parse::<u64>().unwrap() > before);
    let series = format!(
        r#"{{"series":{{"count":2,"lastObservedTime":"{}"}}}}"#,
        now_micro()
    );
    k(&[
        "patch",
        "events.events.k8s.io",
        "worker-0.osupdate",
        "--type=merge",
        "-p",
        &series,
    ]);
    let core = json_of(&k(&["get", "event", "worker-0.osupdate", "-o", "json"]));
    assert_eq!(core["series"]["count"], 2);
    assert_eq!(core["count"], 3, "the rest as it was");
    // events.k8s.io/v1's rules still judge a change made through it.
    let o = cluster.kubectl.run(&[
        "patch",
        "events.events.k8s.io",
        "worker-0.osupdate",
        "--type=merge",
        "-p",
        r#"{"note":"other"}"#,
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("message: Invalid value: \"other\": field is immutable"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // Deleted through the other API: gone from both.
    k(&["delete", "events.events.k8s.io", "worker-0.osupdate"]);
    k(&["delete", "event", "worker-0.rendered"]);
    assert_eq!(k(&["get", "events", "-n", "default", "-o", "name"]), "");
    assert_eq!(k(&["get", "events.events.k8s.io", "-A", "-o", "name"]), "");
}

fn events_v1() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
        "events",
    )
}

fn core_v1() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Event"), "events")
}

/// The next ADDED or MODIFIED object of a watch, within a deadline.
async fn next_object(
    w: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin),
) -> (String, Value) {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("a watch event within 10 s")
            .expect("the watch goes on")
            .unwrap();
        let (typ, obj) = match e {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("{e:?}"),
        };
        return (typ.to_string(), serde_json::to_value(obj).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_and_watches_of_each_api_see_the_others_writes() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let uid = node(&client, "worker-1").await;
    let core = Api::<DynamicObject>::namespaced_with(client.clone(), "default", &core_v1());
    let new = Api::<DynamicObject>::namespaced_with(client.clone(), "default", &events_v1());
    let wp = |f: &str| WatchParams::default().fields(f).timeout(20);
    let mut core_watch = core
        .watch(
            &wp("involvedObject.name=worker-1,involvedObject.kind=Node"),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    let mut new_watch = new
        .watch(
            &wp("regarding.name=worker-1,reportingController=machineconfigcontroller"),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    let start_rv =
        get(&client, "/api/v1/namespaces/default/events").await.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();

    let pp = PostParams::default();
    let created: DynamicObject =
        serde_json::from_value(recorder_event("worker-1.a", "worker-1", &uid)).unwrap();
    new.create(&pp, &created).await.unwrap();
    let (typ, seen) = next_object(&mut core_watch).await;
    assert_eq!(typ, "ADDED");
    assert_eq!(seen["apiVersion"], "v1");
    assert_eq!(seen["involvedObject"]["uid"], uid.as_str());
    assert_eq!(seen["message"], "rendered-worker-1 made");
    let (typ, seen) = next_object(&mut new_watch).await;
    assert_eq!(
        (typ.as_str(), seen["apiVersion"].as_str()),
        ("ADDED", Some("events.k8s.io/v1"))
    );

    // A core Event with the controller's reportingComponent reaches the events.k8s.io watch
    // that selects reportingController.
    let mut daemon = daemon_event("worker-1.b", "worker-1");
    daemon["reportingComponent"] = json!("machineconfigcontroller");
    daemon["reportingInstance"] = json!("mco-0");
    core.create(&pp, &serde_json::from_value(daemon).unwrap())
        .await
        .unwrap();
    let (typ, seen) = next_object(&mut new_watch).await;
    assert_eq!(typ, "ADDED");
    assert_eq!(seen["apiVersion"], "events.k8s.io/v1");
    assert_eq!(seen["metadata"]["name"], "worker-1.b");
    assert_eq!(seen["regarding"]["name"], "worker-1");
    assert_eq!(seen["reportingController"], "machineconfigcontroller");
    assert_eq!(seen["deprecatedCount"], 3);
    let (_, seen) = next_object(&mut core_watch).await;
    assert_eq!(seen["metadata"]["name"], "worker-1.b");
    // One not about worker-1 reaches neither.
    core.create(
        &pp,
        &serde_json::from_value(daemon_event("worker-2.c", "worker-2")).unwrap(),
    )
    .await
    .unwrap();
    // A patch through events.k8s.io is a MODIFIED core event.
    let series = json!({"series": {"count": 2, "lastObservedTime": now_micro()}});
    new.patch(
        "worker-1.a",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(series),
    )
    .await
    .unwrap();
    let (typ, seen) = next_object(&mut core_watch).await;
    assert_eq!(
        (typ.as_str(), seen["metadata"]["name"].as_str()),
        ("MODIFIED", Some("worker-1.a"))
    );
    assert_eq!(seen["series"]["count"], 2);

    // Lists by each API's field labels.
    let names = |a: &Answer| -> Vec<String> {
        assert_eq!(a.code, 200, "{}", a.body);
        a.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let list = |api: &str, sel: &str| {
        let prefix = if api == "core" {
            "/api/v1".to_string()
        } else {
            "/apis/events.k8s.io/v1".to_string()
        };
        format!("{prefix}/namespaces/default/events?fieldSelector={sel}")
    };
    let a = get(&client, &list("events", "regarding.name%3Dworker-1")).await;
    assert_eq!(names(&a), ["worker-1.a", "worker-1.b"]);
    assert_eq!(a.body["kind"], "EventList");
    assert_eq!(a.body["apiVersion"], "events.k8s.io/v1");
    assert!(a.body["items"][1]["regarding"].is_object(), "{}", a.body);
    let a = get(
        &client,
        &list(
            "events",
            "reportingController%3Dmachineconfigcontroller,type%3DNormal",
        ),
    )
    .await;
    assert_eq!(names(&a), ["worker-1.a", "worker-1.b"]);
    let a = get(&client, &list("events", &format!("regarding.uid%3D{uid}"))).await;
    assert_eq!(names(&a), ["worker-1.a"]);
    let a = get(
        &client,
        &list(
            "events",
            "regarding.name!%3Dworker-1,reason%3DOSUpdateStarted",
        ),
    )
    .await;
    assert_eq!(names(&a), ["worker-2.c"]);
    let a = get(
        &client,
        &list("core", "reportingComponent%3Dmachineconfigcontroller"),
    )
    .await;
    assert_eq!(names(&a), ["worker-1.a", "worker-1.b"]);
    let a = get(&client, &list("core", "source%3Dmachineconfigdaemon")).await;
    assert_eq!(names(&a), ["worker-1.b", "worker-2.c"]);
    // Each API supports its own labels only, as kube-apiserver's conversions do.
    for (api, label) in [
        ("events", "source"),
        ("events", "deprecatedSource.component"),
        ("events", "involvedObject.name"),
        ("events", "note"),
        ("core", "regarding.name"),
        ("core", "reportingController"),
    ] {
        let a = get(&client, &list(api, &format!("{label}%3Dx"))).await;
        assert_eq!(a.code, 400, "{api} {label}: {}", a.body);
        assert_eq!(a.message(), format!("field label not supported: {label}"));
    }

    // A watch resumed from before the writes replays them through the other API too.
    let replay: Vec<WatchEvent<DynamicObject>> = new
        .watch(&WatchParams::default().timeout(1), &start_rv)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let seen: Vec<(&str, String, String)> = replay
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Added(o) => Some(("ADDED", o)),
            WatchEvent::Modified(o) => Some(("MODIFIED", o)),
            _ => None,
        })
        .map(|(t, o)| {
            let v = serde_json::to_value(o).unwrap();
            (
                t,
                v["metadata"]["name"].as_str().unwrap().to_string(),
                v["apiVersion"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let v1 = "events.k8s.io/v1".to_string();
    assert_eq!(
        seen,
        [
            ("ADDED", "worker-1.a".into(), v1.clone()),
            ("ADDED", "worker-1.b".into(), v1.clone()),
            ("ADDED", "worker-2.c".into(), v1.clone()),
            ("MODIFIED", "worker-1.a".into(), v1),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_with_events_k8s_io_events_kept_apart_is_served_after_the_upgrade() {
    let cluster = Cluster::start().await;
    let dir = cluster.server.dir.path().to_path_buf();
    let client = cluster.client.clone();
    let uid = node(&client, "worker-0").await;
    let post = |path: &'static str, body: Value| {
        let client = client.clone();
        async move {
            let a = send(&client, "POST", path, "application/json", &body).await;
            assert_eq!(a.code, 201, "{}", a.body);
            a.body
        }
    };
    let kept = post(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        recorder_event("worker-0.kept", "worker-0", &uid),
    )
    .await;
    let deleted = post(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        recorder_event("worker-0.deleted", "worker-0", &uid),
    )
    .await;
    post(
        "/api/v1/namespaces/default/events",
        daemon_event("worker-0.core", "worker-0"),
    )
    .await;
    let a = send(
        &client,
        "DELETE",
        "/apis/events.k8s.io/v1/namespaces/default/events/worker-0.deleted",
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    cluster.server.handle.shutdown().await;

    // As an older server left it: the events.k8s.io Events under their own key, in their own
    // schema, as they were sent, their log rows too; no mark that they were moved.
    let db = dir.join("state.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        for (obj, name) in [(&kept, "worker-0.kept"), (&deleted, "worker-0.deleted")] {
            let old_rows = conn
                .execute(
                    "UPDATE events SET gr = 'events.k8s.io/events', json = ?1 WHERE gr = '/events' AND name = ?2",
                    rusqlite::params![obj.to_string(), name],
                )
                .unwrap();
            assert!(old_rows >= 1, "{name}");
        }
        let moved = conn
            .execute(
                "UPDATE objects SET gr = 'events.k8s.io/events' WHERE name = 'worker-0.kept'",
                [],
            )
            .unwrap();
        assert_eq!(moved, 1);
        assert_eq!(
            conn.execute("DELETE FROM meta WHERE k = 'events'", [])
                .unwrap(),
            1,
            "a new data dir is marked"
        );
    }

    let h = mco_apiserver::Server::start(mco_apiserver::Config::new(
        &dir,
        "127.0.0.1:0".parse().unwrap(),
    ))
    .await
    .unwrap();
    let client = h.client_for(Identity::Admin).await.unwrap();
    let a = get(&client, "/api/v1/namespaces/default/events/worker-0.kept").await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.body["message"], "rendered-worker-1 made");
    assert_eq!(a.body["involvedObject"]["uid"], uid.as_str());
    assert_eq!(rv(&a.body), rv(&kept), "its resourceVersion kept");
    let a = get(
        &client,
        "/apis/events.k8s.io/v1/namespaces/default/events/worker-0.kept",
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.body["note"], "rendered-worker-1 made");
    assert_eq!(a.body["eventTime"], kept["eventTime"]);
    let a = get(&client, "/apis/events.k8s.io/v1/namespaces/default/events").await;
    let names: Vec<&str> = a.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["worker-0.core", "worker-0.kept"]);
    let described = Kubectl::for_handle(&h).ok(&["describe", "node", "worker-0"]);
    assert!(described.contains("RenderedConfigGenerated"), "{described}");
    h.shutdown().await;
    // Moved once: the old key holds nothing, the mark is set.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let old: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE gr = 'events.k8s.io/events'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(old, 0);
}

/// A PUT is decoded into the typed Event, as kube-apiserver decodes it: the body an API serves,
/// or the one its client first sent, sent back changes nothing (no new resourceVersion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_of_the_same_event_changes_nothing_through_either_api() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let uid = node(&client, "worker-0").await;
    let put = |path: String, body: Value| {
        let client = client.clone();
        async move {
            let a = send(&client, "PUT", &path, "application/json", &body).await;
            assert_eq!(a.code, 200, "{}", a.body);
            a.body
        }
    };
    let core = |name: &str| format!("/api/v1/namespaces/default/events/{name}");
    let v1 = |name: &str| format!("/apis/events.k8s.io/v1/namespaces/default/events/{name}");
    for (sent, path) in [
        (recorder_event("a", "worker-0", &uid), v1("a")),
        (daemon_event("b", "worker-0"), core("b")),
    ] {
        let created = send(&client, "PUT", &path, "application/json", &sent).await;
        assert_eq!(created.code, 201, "{}", created.body);
        let before = rv(&created.body).to_string();
        // What the client sent (without the zero values Go writes), then what it was served,
        // each through its own API and through the other.
        let again = put(path.clone(), sent).await;
        assert_eq!(rv(&again), before, "{again}");
        let other = if path.starts_with("/api/") {
            v1("b")
        } else {
            core("a")
        };
        let served = get(&client, &other).await.body;
        let again = put(other, served).await;
        assert_eq!(rv(&again), before, "{again}");
    }
}
