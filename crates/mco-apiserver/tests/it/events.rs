//! Events validated as kube-apiserver validates them, through both served APIs: core `v1`
//! (the legacy rules) and `events.k8s.io/v1` (the legacy and the strict rules, and on update
//! only `series` may change). A refused create stores nothing; a refused update, patch of any
//! type or apply leaves the Event as it was. mco's own writers (the daemon's core Events and
//! its repeats' patches, the controller's `Recorder`) pass, in mco's namespace.

use crate::common;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn core_path(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/events")
}

fn events_path(ns: &str) -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")
}

use common::{Answer, send};

async fn post(client: &kube::Client, path: &str, body: Value) -> Answer {
    send(client, "POST", path, "application/json", &body).await
}

async fn get(client: &kube::Client, path: &str) -> Answer {
    send(client, "GET", path, "application/json", &Value::Null).await
}

/// Asserts a 422 Invalid with kube-apiserver's message and causes.
fn invalid(a: &Answer, message: &str, causes: &[(&str, &str, &str)]) {
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(a.body["reason"], "Invalid", "{}", a.body);
    assert_eq!(a.message(), message);
    let want: Vec<(String, String, String)> = causes
        .iter()
        .map(|(r, f, m)| (r.to_string(), f.to_string(), m.to_string()))
        .collect();
    assert_eq!(a.causes(), want);
}

async fn namespace(client: &kube::Client, name: &str) {
    let a = post(
        client,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await;
    assert_eq!(a.code, 201, "{}", a.body);
}

/// An old-style core Event about a Node, as mco's daemon writes it.
fn node_event(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
        "reason": "OSUpdateStarted", "message": "Changing OS", "type": "Normal",
        "source": {"component": "machineconfigdaemon", "host": "node-a"},
        "reportingComponent": "machineconfigdaemon", "reportingInstance": "node-a",
        "firstTimestamp": "2026-01-02T03:04:05Z", "lastTimestamp": "2026-01-02T03:04:05Z",
        "count": 1,
    })
}

/// A new-style Event as kube-runtime's `Recorder` writes it.
fn recorder_event(name: &str) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name},
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
        "eventTime": "2026-01-02T03:04:05.123456Z",
        "reportingController": "machineconfigcontroller", "reportingInstance": "mco-0",
        "action": "Reconcile", "reason": "RolloutStarted", "note": "rolling", "type": "Normal",
    })
}

const MISMATCH: &str = "Invalid value: \"\": does not match event.namespace";

#[tokio::test]
async fn a_core_event_must_be_in_its_objects_namespace() {
    let s = common::start().await;
    let c = s.admin().await;
    namespace(&c, "diff").await;
    let name = "node-a.18eec29322d9ccb2";
    let a = post(&c, &core_path("diff"), node_event(name)).await;
    invalid(
        &a,
        &format!("Event \"{name}\" is invalid: involvedObject.namespace: {MISMATCH}"),
        &[("FieldValueInvalid", "involvedObject.namespace", MISMATCH)],
    );
    assert_eq!(
        get(&c, &format!("{}/{name}", core_path("diff"))).await.code,
        404
    );
    let list = get(&c, &core_path("diff")).await;
    assert_eq!(list.body["items"], json!([]), "{}", list.body);
    // An Event about a Node belongs in default.
    let a = post(&c, &core_path("default"), node_event(name)).await;
    assert_eq!(a.code, 201, "{}", a.body);
    // An Event about an object of "diff" belongs there.
    let mut pod = node_event("p.1");
    pod["involvedObject"] =
        json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "diff"});
    assert_eq!(post(&c, &core_path("diff"), pod.clone()).await.code, 201);
    pod["metadata"]["name"] = json!("p.2");
    let a = post(&c, &core_path("default"), pod).await;
    assert_eq!(
        a.message(),
        "Event \"p.2\" is invalid: involvedObject.namespace: Invalid value: \"diff\": does not match event.namespace"
    );
    // A core Event's name need not be a DNS subdomain, only a path segment.
    assert_eq!(
        post(&c, &core_path("default"), node_event("Node_A.1"))
            .await
            .code,
        201
    );
    let a = post(&c, &core_path("default"), node_event("a%b")).await;
    invalid(
        &a,
        "Event \"a%b\" is invalid: metadata.name: Invalid value: \"a%b\": may not contain '%'",
        &[(
            "FieldValueInvalid",
            "metadata.name",
            "Invalid value: \"a%b\": may not contain '%'",
        )],
    );
    // A server-side apply that would create such an Event creates nothing.
    let a = send(
        &c,
        "PATCH",
        &format!("{}/applied?fieldManager=test", core_path("diff")),
        "application/apply-patch+yaml",
        &node_event("applied"),
    )
    .await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(a.causes()[0].1, "involvedObject.namespace");
    assert_eq!(
        get(&c, &format!("{}/applied", core_path("diff")))
            .await
            .code,
        404
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn a_core_event_refused_on_update_stays_as_it_was() {
    let s = common::start().await;
    let c = s.admin().await;
    namespace(&c, "diff").await;
    let path = format!("{}/node-a.1", core_path("default"));
    assert_eq!(
        post(&c, &core_path("default"), node_event("node-a.1"))
            .await
            .code,
        201
    );
    let before = get(&c, &path).await.body;
    let moved = json!({"involvedObject": {"namespace": "diff"}});
    let msg = "Event \"node-a.1\" is invalid: involvedObject.namespace: Invalid value: \"diff\": does not match event.namespace";
    for (ct, body) in [
        ("application/merge-patch+json", moved.clone()),
        ("application/strategic-merge-patch+json", moved.clone()),
        (
            "application/json-patch+json",
            json!([{"op": "add", "path": "/involvedObject/namespace", "value": "diff"}]),
        ),
    ] {
        let a = send(&c, "PATCH", &path, ct, &body).await;
        assert_eq!(a.message(), msg, "{ct}");
    }
    let mut put = before.clone();
    put["involvedObject"]["namespace"] = json!("diff");
    let a = send(&c, "PUT", &path, "application/json", &put).await;
    assert_eq!(a.message(), msg);
    let a = send(
        &c,
        "PATCH",
        &format!("{path}?fieldManager=test&force=true"),
        "application/apply-patch+yaml",
        &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "node-a.1"},
                "involvedObject": {"namespace": "diff"}}),
    )
    .await;
    assert_eq!(a.message(), msg);
    assert_eq!(get(&c, &path).await.body, before);
    // Through core v1 everything else may change, as upstream allows there.
    let a = send(
        &c,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &json!({"count": 2, "reason": "Other", "lastTimestamp": "2026-01-02T03:05:00Z"}),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    s.handle.shutdown().await;
}

#[tokio::test]
async fn events_k8s_io_v1_is_strict_on_create() {
    let s = common::start().await;
    let c = s.admin().await;
    let path = events_path("default");
    let mut e = recorder_event("no-controller");
    e.as_object_mut().unwrap().remove("reportingController");
    let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let a = post(&c, &path, e).await;
    invalid(
        &a,
        &format!(
            "Event \"no-controller\" is invalid: [reportingController: Required value, reportingController: Invalid value: \"\": name part must be non-empty, reportingController: Invalid value: \"\": {name_part}]"
        ),
        &[
            (
                "FieldValueRequired",
                "reportingController",
                "Required value",
            ),
            (
                "FieldValueInvalid",
                "reportingController",
                "Invalid value: \"\": name part must be non-empty",
            ),
            (
                "FieldValueInvalid",
                "reportingController",
                &format!("Invalid value: \"\": {name_part}"),
            ),
        ],
    );
    assert_eq!(get(&c, &format!("{path}/no-controller")).await.code, 404);

    // The reason may be 128 bytes long, not 129.
    let mut e = recorder_event("reason-128");
    e["reason"] = json!("r".repeat(128));
    assert_eq!(post(&c, &path, e).await.code, 201);
    let mut e = recorder_event("reason-129");
    e["reason"] = json!("r".repeat(129));
    let a = post(&c, &path, e).await;
    invalid(
        &a,
        "Event \"reason-129\" is invalid: reason: Invalid value: \"\": can have at most 128 characters",
        &[(
            "FieldValueInvalid",
            "reason",
            "Invalid value: \"\": can have at most 128 characters",
        )],
    );

    // The old style is refused there; its fields are named as the internal Event names them.
    let mut e = recorder_event("old-style");
    e.as_object_mut().unwrap().remove("eventTime");
    e["deprecatedCount"] = json!(1);
    e["type"] = json!("Info");
    let a = post(&c, &path, e).await;
    assert_eq!(
        a.message(),
        "Event \"old-style\" is invalid: [eventTime: Required value, type: Invalid value: \"\": has invalid value: Info, count: Invalid value: \"\": needs to be unset]"
    );
    // Names are DNS subdomains there.
    let a = post(&c, &path, recorder_event("Node_A.1")).await;
    assert_eq!(a.causes()[0].1, "metadata.name", "{}", a.body);
    let list = get(&c, &path).await;
    let names: Vec<&str> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["reason-128"]);
    s.handle.shutdown().await;
}

#[tokio::test]
async fn an_events_k8s_io_v1_event_changes_only_its_series() {
    let s = common::start().await;
    let c = s.admin().await;
    let path = format!("{}/node-a.1", events_path("default"));
    assert_eq!(
        post(&c, &events_path("default"), recorder_event("node-a.1"))
            .await
            .code,
        201
    );
    let before = get(&c, &path).await.body;
    let msg = "Event \"node-a.1\" is invalid: reason: Invalid value: \"Other\": field is immutable";
    let cause = (
        "FieldValueInvalid",
        "reason",
        "Invalid value: \"Other\": field is immutable",
    );
    for (ct, body) in [
        ("application/merge-patch+json", json!({"reason": "Other"})),
        (
            "application/strategic-merge-patch+json",
            json!({"reason": "Other"}),
        ),
        (
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/reason", "value": "Other"}]),
        ),
    ] {
        let a = send(&c, "PATCH", &path, ct, &body).await;
        // Upstream reports a changed reason twice, and says it once.
        invalid(&a, msg, &[cause, cause]);
    }
    let mut put = before.clone();
    put["reason"] = json!("Other");
    assert_eq!(
        send(&c, "PUT", &path, "application/json", &put)
            .await
            .message(),
        msg
    );
    let a = send(
        &c,
        "PATCH",
        &format!("{path}?fieldManager=test&force=true"),
        "application/apply-patch+yaml",
        &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "node-a.1"}, "note": "changed"}),
    )
    .await;
    assert_eq!(
        a.message(),
        "Event \"node-a.1\" is invalid: message: Invalid value: \"changed\": field is immutable"
    );
    let a = send(
        &c,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &json!({"series": {"count": 1, "lastObservedTime": "2026-01-02T03:05:00.000000Z"}}),
    )
    .await;
    assert_eq!(
        a.message(),
        "Event \"node-a.1\" is invalid: series.count: Invalid value: \"\": should be at least 2"
    );
    assert_eq!(get(&c, &path).await.body, before);
    s.handle.shutdown().await;
}

#[tokio::test]
async fn mcos_own_event_writers_pass() {
    let s = common::start().await;
    let c = s.admin().await;
    // Both record Events about cluster-scoped objects in mco's namespace, with the reference
    // naming it, as upstream's recorders do in theirs.
    let ns = "mco-system";
    namespace(&c, ns).await;
    // The daemon's core Event about its Node, then a repeat of it folded into its count by a
    // strategic merge patch, as client-go's correlator sends it.
    let daemon: Api<core::Event> = Api::namespaced(c.clone(), ns);
    let mut e = node_event("node-a.18eec29322d9ccb2");
    e["involvedObject"]["namespace"] = json!(ns);
    let e: core::Event = serde_json::from_value(e).unwrap();
    daemon.create(&PostParams::default(), &e).await.unwrap();
    let repeat =
        json!({"count": 2, "lastTimestamp": "2026-01-02T03:09:05Z", "message": "Changing OS"});
    let patched = daemon
        .patch(
            "node-a.18eec29322d9ccb2",
            &PatchParams::default(),
            &Patch::Strategic(repeat),
        )
        .await
        .unwrap();
    assert_eq!(patched.count, Some(2));
    assert_eq!(
        patched.last_timestamp.unwrap().0,
        "2026-01-02T03:09:05Z".parse::<jiff::Timestamp>().unwrap()
    );
    assert_eq!(patched.involved_object.namespace.as_deref(), Some(ns));
    // The same Event without the reference's namespace is refused there, as kube-apiserver
    // refuses it.
    let a = post(&c, &core_path(ns), node_event("node-a.18eec29322d9ccb4")).await;
    assert_eq!(a.code, 422, "{}", a.body);
    // The controller's Recorder: a create, then a repeat patched in as a series.
    let recorder: Api<events::Event> = Api::namespaced(c.clone(), ns);
    let mut e = recorder_event("node-a.18eec29322d9ccb3");
    e["regarding"]["namespace"] = json!(ns);
    let mut e: events::Event = serde_json::from_value(e).unwrap();
    recorder.create(&PostParams::default(), &e).await.unwrap();
    e.series = Some(events::EventSeries {
        count: 2,
        last_observed_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            "2026-01-02T03:05:00.000001Z".parse().unwrap(),
        ),
    });
    let patched = recorder
        .patch(
            "node-a.18eec29322d9ccb3",
            &PatchParams::default(),
            &Patch::Merge(&e),
        )
        .await
        .unwrap();
    assert_eq!(patched.series.unwrap().count, 2);
    s.handle.shutdown().await;
}
