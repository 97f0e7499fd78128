//! managedFields through the server's write paths: an Event's `involvedObject` is owned whole
//! and replaced whole by a server-side apply, and a status write owns and keeps what its
//! kind's status strategy lets it change.

use crate::common;

use common::send;
use mco_apiserver::Identity;
use serde_json::{Value, json};

const EVENTS: &str = "/api/v1/namespaces/default/events";

/// The `fieldsV1` of `manager`'s entry in `obj`.
fn fields_of(obj: &Value, manager: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager)
        .unwrap_or_else(|| panic!("no entry of {manager} in {obj}"))["fieldsV1"]
        .clone()
}

#[tokio::test]
async fn an_events_involved_object_is_owned_and_applied_whole() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "atomic.1"},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "cm"},
        "reason": "Created", "message": "m", "type": "Normal",
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"});
    let created = send(
        &client,
        "POST",
        &format!("{EVENTS}?fieldManager=creator"),
        "application/json",
        &event,
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(
        fields_of(&created.body, "creator")["f:involvedObject"],
        json!({})
    );

    let reference =
        json!({"kind": "ConfigMap", "namespace": "default", "name": "cm", "fieldPath": "data.k"});
    let applied = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "atomic.1"},
        "involvedObject": reference});
    let path = format!("{EVENTS}/atomic.1?fieldManager=applier");
    let refused = send(
        &client,
        "PATCH",
        &path,
        "application/apply-patch+yaml",
        &applied,
    )
    .await;
    assert_eq!(refused.code, 409, "{}", refused.body);
    assert_eq!(
        refused.causes(),
        [(
            "FieldManagerConflict".to_string(),
            ".involvedObject".to_string(),
            "conflict with \"creator\" using v1".to_string()
        )]
    );
    let forced = send(
        &client,
        "PATCH",
        &format!("{path}&force=true"),
        "application/apply-patch+yaml",
        &applied,
    )
    .await;
    assert_eq!(forced.code, 200, "{}", forced.body);
    assert_eq!(forced.body["involvedObject"], reference);
    assert_eq!(
        fields_of(&forced.body, "applier"),
        json!({"f:involvedObject": {}})
    );
    assert!(
        fields_of(&forced.body, "creator")
            .get("f:involvedObject")
            .is_none()
    );
}

/// A Node's status strategy resets only its spec: a label sent to `nodes/status` is kept and
/// owned by the status writer, while a custom resource's status write keeps no label.
#[tokio::test]
async fn a_node_status_write_keeps_and_owns_its_label() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    let created = send(&client, "POST", "/api/v1/nodes", "application/json", &node).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let patched = send(
        &client,
        "PATCH",
        "/api/v1/nodes/n1/status?fieldManager=kubelet",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"zone": "a"}}, "spec": {"unschedulable": true},
                "status": {"phase": "Running"}}),
    )
    .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    assert_eq!(patched.body["metadata"]["labels"], json!({"zone": "a"}));
    assert_eq!(
        patched
            .body
            .get("spec")
            .and_then(|s| s.get("unschedulable")),
        None
    );
    assert_eq!(
        fields_of(&patched.body, "kubelet"),
        json!({"f:metadata": {"f:labels": {".": {}, "f:zone": {}}}, "f:status": {"f:phase": {}}})
    );
}

/// A Pod's status strategy resets its owner references: a status write cannot change them.
#[tokio::test]
async fn a_pod_status_write_keeps_the_stored_owner_references() {
    let s = common::start().await;
    let client = s.handle.client_for(Identity::Admin).await.unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let pods = "/api/v1/namespaces/default/pods";
    let created = send(&client, "POST", pods, "application/json", &pod).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let patched = send(
        &client,
        "PATCH",
        &format!("{pods}/p1/status?fieldManager=kubelet"),
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"l": "x"}, "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}]},
                "status": {"phase": "Running"}}),
    )
    .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    assert_eq!(patched.body["metadata"]["labels"], json!({"l": "x"}));
    assert_eq!(patched.body["metadata"].get("ownerReferences"), None);
    assert_eq!(
        fields_of(&patched.body, "kubelet"),
        json!({"f:metadata": {"f:labels": {".": {}, "f:l": {}}}, "f:status": {"f:phase": {}}})
    );
}
