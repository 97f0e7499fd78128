//! The `scale` subresource as kube-apiserver serves it: `kubectl scale` of Deployments,
//! ReplicaSets and a custom resource whose CRD declares `subresources.scale`, the
//! `autoscaling/v1` Scale read with `get --raw`, its preconditions (`--current-replicas`, a
//! resourceVersion, a uid), every patch type, and the write seen on the object itself: its
//! replicas, generation, managedFields (`subresource: scale`) and a watch event.

use crate::common::{Answer, Cluster, eventually, send};

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::{Value, json};

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: sc}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
    matchExpressions: [{key: tier, operator: In, values: [b, a]}]
  template:
    metadata: {labels: {app: web, tier: a}}
    spec: {containers: [{name: web, image: registry.example/web:1}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: cache, namespace: sc}
spec:
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec: {containers: [{name: cache, image: registry.example/cache:1}]}
"#;

const SCALE: &str = "/apis/apps/v1/namespaces/sc/deployments/web/scale";

/// The content type of a Scale PUT; every other one [`write_scale`] takes is a patch type.
const PUT: &str = "application/json";
const JSON_PATCH: &str = "application/json-patch+json";
const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

/// An `autoscaling/v1` Scale as a client writes it.
fn scale_of(metadata: Value, spec: Value) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": metadata, "spec": spec})
}

/// Writes the Scale at `path`: a PUT when `content_type` is [`PUT`], else a PATCH of that type
/// (an apply as the field manager `hpa`, forced). `Some(n)`: the write must succeed and answer
/// the Scale with `n` replicas.
async fn write_scale(
    client: &kube::Client,
    path: &str,
    content_type: &str,
    body: &Value,
    replicas: Option<i64>,
) -> Answer {
    let a = match content_type {
        PUT => send(client, "PUT", path, content_type, body).await,
        APPLY => {
            let path = format!("{path}?fieldManager=hpa&force=true");
            let yaml = Value::String(body.to_string());
            send(client, "PATCH", &path, content_type, &yaml).await
        }
        _ => send(client, "PATCH", path, content_type, body).await,
    };
    if let Some(n) = replicas {
        assert_eq!(
            (a.code, &a.body["kind"], &a.body["spec"]["replicas"]),
            (200, &json!("Scale"), &json!(n)),
            "{}",
            a.body
        );
    }
    a
}

fn json_of(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

fn deployment(c: &Cluster) -> Value {
    json_of(&c.kubectl.ok(&[
        "get",
        "deploy",
        "web",
        "-n",
        "sc",
        "-o",
        "json",
        "--show-managed-fields",
    ]))
}

fn entry<'a>(obj: &'a Value, manager: &str, sub: Option<&str>) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["subresource"].as_str() == sub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_writes_the_replicas_through_the_objects_storage() {
    let c = Cluster::with_namespace("sc").await;
    let k = &c.kubectl;
    k.ok_with_stdin(&["apply", "-f", "-"], WEB);

    // The Scale, field by field as kube-apiserver serves it.
    let d = deployment(&c);
    let scale = json_of(&k.ok(&["get", "--raw", SCALE]));
    assert_eq!(
        scale,
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": "web", "namespace": "sc", "uid": d["metadata"]["uid"],
                "resourceVersion": d["metadata"]["resourceVersion"],
                "creationTimestamp": d["metadata"]["creationTimestamp"]},
            "spec": {"replicas": 2},
            "status": {"replicas": 0, "selector": "app=web,tier in (a,b)"}})
    );

    // `kubectl get --subresource=scale` reads it as a Table.
    let table = k.ok(&["get", "deploy", "web", "-n", "sc", "--subresource=scale"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "DESIRED", "AVAILABLE", "AGE"]);
    assert_eq!(lines[1][..3], ["web", "2", "0"]);

    // A watch from here sees the scale as the Deployment's own MODIFIED event.
    let deploys: Api<Deployment> = Api::namespaced(c.client.clone(), "sc");
    let rv = d["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut events = deploys
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();

    assert_eq!(
        k.ok(&["scale", "deploy/web", "-n", "sc", "--replicas=3"]),
        "deployment.apps/web scaled\n"
    );
    let ev = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
        .unwrap();
    match ev {
        WatchEvent::Modified(d) => assert_eq!(d.spec.unwrap().replicas, Some(3)),
        other => panic!("want MODIFIED, got {other:?}"),
    }

    let d = deployment(&c);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["generation"], 2, "a spec change bumps it");
    // kube moves the replicas to an entry of the Scale's writer, in the parent's version and
    // without a time, and takes them from the applier's.
    let mine = entry(&d, "kubectl", Some("scale"))
        .unwrap_or_else(|| panic!("no scale entry: {}", d["metadata"]));
    assert_eq!(
        mine,
        &json!({"apiVersion": "apps/v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:replicas": {}}}, "manager": "kubectl",
            "operation": "Update", "subresource": "scale"})
    );
    let applier = entry(&d, "kubectl-client-side-apply", None).unwrap();
    assert!(applier["fieldsV1"]["f:spec"].get("f:replicas").is_none());
    assert!(applier["fieldsV1"]["f:spec"].get("f:selector").is_some());
    assert_eq!(
        d["metadata"]["managedFields"][0]["subresource"], "scale",
        "kube's order: no time first"
    );

    // `--current-replicas` is checked against the Scale before the PUT.
    let err = k.fails(&[
        "scale",
        "deploy/web",
        "-n",
        "sc",
        "--current-replicas=5",
        "--replicas=1",
    ]);
    assert!(err.contains("Expected replicas to be 5, was 3"), "{err}");
    assert_eq!(deployment(&c)["spec"]["replicas"], 3);
    k.ok(&[
        "scale",
        "deploy/web",
        "-n",
        "sc",
        "--current-replicas=3",
        "--replicas=1",
    ]);
    assert_eq!(deployment(&c)["spec"]["replicas"], 1);

    // A server-side dry run answers and stores nothing.
    k.ok(&[
        "scale",
        "deploy/web",
        "-n",
        "sc",
        "--replicas=7",
        "--dry-run=server",
    ]);
    assert_eq!(deployment(&c)["spec"]["replicas"], 1);

    // Several objects at once; a ReplicaSet's Scale is the same.
    let out = k.ok(&[
        "scale",
        "deploy/web",
        "rs/cache",
        "-n",
        "sc",
        "--replicas=0",
    ]);
    assert_eq!(
        out,
        "deployment.apps/web scaled\nreplicaset.apps/cache scaled\n"
    );
    let rs = json_of(&k.ok(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/sc/replicasets/cache/scale",
    ]));
    assert_eq!(
        rs["spec"],
        json!({}),
        "0 replicas are omitted, as Go omits them"
    );
    assert_eq!(rs["status"]["selector"], "app=cache");
    assert_eq!(deployment(&c)["spec"]["replicas"], 0);

    // A missing object.
    let err = k.fails(&["scale", "deploy/nope", "-n", "sc", "--replicas=1"]);
    assert!(
        err.contains(r#"deployments.apps "nope" not found"#),
        "{err}"
    );
    let err = k.fails(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/sc/deployments/nope/scale",
    ]);
    assert!(
        err.contains(r#"deployments.apps "nope" not found"#),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_writes_are_judged_as_kube_judges_them() {
    let c = Cluster::with_namespace("sc").await;
    c.kubectl.ok_with_stdin(&["apply", "-f", "-"], WEB);
    let client = &c.client;

    let negative = json!({"spec": {"replicas": -1}});
    let a = write_scale(client, SCALE, MERGE, &negative, None).await;
    assert_eq!(a.code, 422);
    assert_eq!(
        a.message(),
        r#"Scale.autoscaling "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"#
    );
    assert_eq!(a.body["details"]["kind"], "Scale");
    assert_eq!(a.body["details"]["group"], "autoscaling");

    // A resourceVersion is a precondition on the Deployment's.
    let body = scale_of(
        json!({"name": "web", "namespace": "sc", "resourceVersion": "1"}),
        json!({"replicas": 4}),
    );
    let a = write_scale(client, SCALE, PUT, &body, None).await;
    assert_eq!(a.code, 409);
    assert_eq!(
        a.message(),
        r#"Operation cannot be fulfilled on deployments.apps "web": the object has been modified; please apply your changes to the latest version and try again"#
    );
    // So is a uid, worded by the storage as for a PUT of the object.
    let mut with_uid = body.clone();
    with_uid["metadata"] = json!({"name": "web", "namespace": "sc", "uid": "x"});
    let a = write_scale(client, SCALE, PUT, &with_uid, None).await;
    assert_eq!(a.code, 409);
    assert!(
        a.message().contains("Key: /registry/deployments/sc/web")
            && a.message()
                .contains("UID in precondition: x, UID in object meta: "),
        "{}",
        a.message()
    );
    // The body names the object of the URL, and its replicas are an int32.
    for (metadata, spec, message) in [
        (
            json!({}),
            json!({"replicas": 2}),
            "the name of the object (web based on URL) was undeterminable: name must be provided",
        ),
        (
            json!({"name": "other"}),
            json!({"replicas": 2}),
            "the name of the object (other) does not match the name on the URL (web)",
        ),
        (
            json!({"name": "web"}),
            json!({"replicas": "two"}),
            r#"Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal string into Go struct field ScaleSpec.spec.replicas of type int32"#,
        ),
        (
            json!({"name": "web"}),
            json!({"replicas": 2147483648u64}),
            r#"Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal number 2147483648 into Go struct field ScaleSpec.spec.replicas of type int32"#,
        ),
    ] {
        let a = write_scale(client, SCALE, PUT, &scale_of(metadata, spec), None).await;
        assert_eq!((a.code, a.message()), (400, message));
    }
    // At the limit: the largest int32.
    let largest = scale_of(json!({"name": "web"}), json!({"replicas": 2147483647}));
    write_scale(client, SCALE, PUT, &largest, Some(2147483647)).await;

    // Without either, a PUT replaces the replicas.
    let mut plain = body.clone();
    plain["metadata"] = json!({"name": "web", "namespace": "sc"});
    write_scale(client, SCALE, PUT, &plain, Some(4)).await;

    // Every patch type.
    let replace = json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]);
    write_scale(client, SCALE, JSON_PATCH, &replace, Some(5)).await;
    let strategic = json!({"spec": {"replicas": 6}});
    write_scale(client, SCALE, STRATEGIC, &strategic, Some(6)).await;
    let applied = scale_of(
        json!({"name": "web", "namespace": "sc"}),
        json!({"replicas": 7}),
    );
    write_scale(client, SCALE, APPLY, &applied, Some(7)).await;
    let d = deployment(&c);
    assert_eq!(d["spec"]["replicas"], 7);
    let hpa = entry(&d, "hpa", Some("scale")).expect("the applier's entry");
    assert_eq!(hpa["operation"], "Apply");
    assert_eq!(hpa["apiVersion"], "apps/v1");
    assert_eq!(hpa["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));

    // The subresource is listed where kube lists it, before `status`.
    let apps = json_of(&c.kubectl.ok(&["get", "--raw", "/apis/apps/v1"]));
    let names: Vec<&str> = apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names
            .windows(3)
            .any(|w| w == ["deployments", "deployments/scale", "deployments/status"]),
        "{names:?}"
    );
    let scale = apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "replicasets/scale")
        .unwrap();
    assert_eq!(
        (&scale["group"], &scale["version"], &scale["kind"]),
        (&json!("autoscaling"), &json!("v1"), &json!("Scale"))
    );
    assert!(
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["name"] != "daemonsets/scale"),
        "DaemonSets have no Scale"
    );
}

const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.scale.example.com}
spec:
  group: scale.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.ready, labelSelectorPath: .status.selector}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer, maximum: 10}, color: {type: string}}}
          status: {type: object, properties: {ready: {type: integer}, selector: {type: string}}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_scales_by_its_crds_paths() {
    let c = Cluster::with_namespace("sc").await;
    let k = &c.kubectl;
    k.ok_with_stdin(&["apply", "-f", "-"], WIDGETS);
    eventually("widgets served", 20, || async {
        k.run(&["get", "widgets", "-n", "sc"])
            .status
            .success()
            .then_some(())
    })
    .await;
    k.ok_with_stdin(
        &["apply", "-f", "-"],
        "apiVersion: scale.example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: sc}\nspec: {size: 1, color: red}\n---\napiVersion: scale.example.com/v1\nkind: Widget\nmetadata: {name: bare, namespace: sc}\nspec: {color: blue}\n",
    );
    k.ok(&[
        "patch",
        "widget",
        "w",
        "-n",
        "sc",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":1,"selector":"app=w"}}"#,
    ]);
    let path = "/apis/scale.example.com/v1/namespaces/sc/widgets/w/scale";
    let scale = json_of(&k.ok(&["get", "--raw", path]));
    assert_eq!(scale["spec"], json!({"replicas": 1}));
    assert_eq!(scale["status"], json!({"replicas": 1, "selector": "app=w"}));

    let table = k.ok(&["get", "widget", "w", "-n", "sc", "--subresource=scale"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..3], ["w", "1", "1"], "{table}");
    assert_eq!(
        k.ok(&["scale", "widget/w", "-n", "sc", "--replicas=4"]),
        "widget.scale.example.com/w scaled\n"
    );
    let w = json_of(&k.ok(&[
        "get",
        "widget",
        "w",
        "-n",
        "sc",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    assert_eq!(w["spec"], json!({"size": 4, "color": "red"}));
    assert_eq!(w["status"], json!({"ready": 1, "selector": "app=w"}));
    assert_eq!(w["metadata"]["generation"], 2);
    assert_eq!(
        entry(&w, "kubectl", Some("scale")).unwrap()["fieldsV1"],
        json!({"f:spec": {"f:size": {}}})
    );

    // The object's own schema still judges it.
    let err = k.fails(&["scale", "widget/w", "-n", "sc", "--replicas=11"]);
    assert!(err.contains("spec.size"), "{err}");

    // An object without replicas has no Scale to read, and a write must set them.
    let bare = "/apis/scale.example.com/v1/namespaces/sc/widgets/bare/scale";
    let a = send(&c.client, "GET", bare, "application/json", &Value::Null).await;
    assert_eq!(a.code, 500);
    assert_eq!(
        a.message(),
        r#"Internal error occurred: the spec replicas field ".spec.size" does not exist"#
    );
    let labels = json!({"metadata": {"labels": {"x": "y"}}});
    let a = write_scale(&c.client, bare, MERGE, &labels, None).await;
    assert_eq!(a.code, 400);
    assert_eq!(
        a.message(),
        r#"the spec replicas field ".spec.size" cannot be empty"#
    );
    let two = json!({"spec": {"replicas": 2}});
    write_scale(&c.client, bare, MERGE, &two, Some(2)).await;
    let b = json_of(&k.ok(&["get", "widget", "bare", "-n", "sc", "-o", "json"]));
    assert_eq!(b["spec"], json!({"color": "blue", "size": 2}));

    // A custom resource takes no strategic merge patch, on its Scale neither.
    let a = write_scale(&c.client, path, STRATEGIC, &two, None).await;
    assert_eq!(a.code, 415);
}
