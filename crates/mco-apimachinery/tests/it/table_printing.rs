//! Table output as kube-apiserver renders it for kubectl.

use jiff::Timestamp;
use mco_apimachinery::table::{IncludeObject, PrinterColumn, TableConvertor};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn now() -> Timestamp {
    "2026-11-30T10:00:00Z".parse().unwrap()
}

fn cond_column(name: &str, priority: i64) -> Value {
    json!({
        "name": name,
        "type": "string",
        "jsonPath": format!(".status.conditions[?(@.type==\"{name}\")].status"),
        "priority": priority
    })
}

fn mcn_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "machineconfignodes.machineconfiguration.openshift.io"},
        "spec": {
            "group": "machineconfiguration.openshift.io",
            "versions": [{
                "name": "v1alpha1",
                "additionalPrinterColumns": [
                    cond_column("Updated", 0),
                    cond_column("UpdatePrepared", 0),
                    cond_column("UpdateCompatible", 1),
                    {"name": "Pool", "type": "string", "jsonPath": ".spec.pool.name", "description": "The pool"},
                    {"name": "Count", "type": "integer", "jsonPath": ".status.count"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ]
            }]
        }
    })
}

fn mcn(name: &str, updated: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1",
        "kind": "MachineConfigNode",
        "metadata": {
            "name": name,
            "uid": "39e06294-2876-5528-ad66-de63c0281ee9",
            "resourceVersion": rv,
            "creationTimestamp": "2026-11-27T06:42:48Z",
            "labels": {"machineconfiguration.openshift.io/pool": "worker"}
        },
        "spec": {"pool": {"name": "worker"}},
        "status": {
            "count": 3,
            "conditions": [
                {"type": "Updated", "status": updated},
                {"type": "UpdatePrepared", "status": "False"},
                {"type": "UpdateCompatible", "status": "True"}
            ]
        }
    })
}

fn mcn_convertor() -> TableConvertor {
    let cols = PrinterColumn::from_crd(&mcn_crd(), "v1alpha1");
    TableConvertor::for_crd(&cols).expect("columns parse")
}

#[test]
fn crd_list_table_has_name_first_and_all_columns() {
    let list = json!({
        "kind": "MachineConfigNodeList",
        "metadata": {"resourceVersion": "1019", "continue": "abc"},
        "items": [mcn("worker-0", "True", "1004"), mcn("worker-1", "False", "1005")]
    });
    let table = mcn_convertor().list_table(&list, now(), IncludeObject::Metadata);
    let name_desc = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
    let expected = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "1019", "continue": "abc"},
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": name_desc, "priority": 0},
            {"name": "Updated", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type==\"Updated\")].status", "priority": 0},
            {"name": "UpdatePrepared", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type==\"UpdatePrepared\")].status", "priority": 0},
            {"name": "UpdateCompatible", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type==\"UpdateCompatible\")].status", "priority": 1},
            {"name": "Pool", "type": "string", "format": "", "description": "The pool", "priority": 0},
            {"name": "Count", "type": "integer", "format": "", "description": "Custom resource definition column (in JSONPath format): .status.count", "priority": 0},
            {"name": "Age", "type": "date", "format": "", "description": "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp", "priority": 0}
        ],
        "rows": [
            {
                "cells": ["worker-0", "True", "False", "True", "worker", 3, "3d3h"],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": mcn("worker-0", "True", "1004")["metadata"]
                }
            },
            {
                "cells": ["worker-1", "False", "False", "True", "worker", 3, "3d3h"],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": mcn("worker-1", "False", "1005")["metadata"]
                }
            }
        ]
    });
    assert_eq!(table, expected);
}

#[test]
fn missing_and_mistyped_values_are_null_cells() {
    let mut o = mcn("worker-2", "True", "7");
    o["status"] = json!({"count": "three"});
    o["spec"] = json!({});
    let cells = mcn_convertor().cells(&o, now());
    assert_eq!(
        cells,
        vec![
            json!("worker-2"),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            json!("3d3h")
        ]
    );
}

#[test]
fn include_object_variants() {
    let conv = mcn_convertor();
    let o = mcn("worker-0", "True", "1004");
    let full = conv.object_table(&o, now(), IncludeObject::Object);
    assert_eq!(full["rows"][0]["object"], o);
    assert_eq!(full["metadata"], json!({"resourceVersion": "1004"}));
    let none = conv.object_table(&o, now(), IncludeObject::None);
    assert_eq!(none["rows"][0].get("object"), Some(&Value::Null));
    assert_eq!(none["rows"][0]["cells"][0], "worker-0");
}

#[test]
fn watch_event_tables() {
    let conv = mcn_convertor();
    let o = mcn("worker-1", "False", "1020");
    let first = conv.watch_event_table(&o, now(), IncludeObject::Metadata, true);
    assert_eq!(first["metadata"]["resourceVersion"], "1020");
    assert_eq!(first["columnDefinitions"].as_array().map(Vec::len), Some(7));
    assert_eq!(first["rows"].as_array().map(Vec::len), Some(1));
    let later = conv.watch_event_table(&o, now(), IncludeObject::Metadata, false);
    assert_eq!(later["columnDefinitions"], Value::Null);
    assert_eq!(later["rows"], first["rows"]);
    assert_eq!(later["kind"], "Table");
    assert_eq!(later["apiVersion"], "meta.k8s.io/v1");
}

#[test]
fn machineconfig_columns_with_escaped_annotation_key() {
    let crd = json!({"spec": {"versions": [{"name": "v1", "additionalPrinterColumns": [
        {"name": "GeneratedByController", "type": "string",
         "jsonPath": ".metadata.annotations.machineconfiguration\\.openshift\\.io/generated-by-controller-version"},
        {"name": "IgnitionVersion", "type": "string", "jsonPath": ".spec.config.ignition.version"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]}]}});
    let conv = TableConvertor::for_crd(&PrinterColumn::from_crd(&crd, "v1")).unwrap();
    let rendered = json!({
        "metadata": {
            "name": "rendered-worker-1",
            "creationTimestamp": "2026-11-30T09:58:30Z",
            "annotations": {"machineconfiguration.openshift.io/generated-by-controller-version": "abc123"}
        },
        "spec": {"config": {"ignition": {"version": "3.4.0"}}}
    });
    let user = json!({"metadata": {"name": "99-user", "creationTimestamp": "2026-11-30T09:59:00Z"}, "spec": {"config": {}}});
    assert_eq!(
        conv.cells(&rendered, now()),
        vec![
            json!("rendered-worker-1"),
            json!("abc123"),
            json!("3.4.0"),
            json!("90s")
        ]
    );
    assert_eq!(
        conv.cells(&user, now()),
        vec![json!("99-user"), Value::Null, Value::Null, json!("60s")]
    );
}

#[test]
fn crd_without_columns_gets_age() {
    let crd = json!({"spec": {"versions": [{"name": "v1"}]}});
    let cols = PrinterColumn::from_crd(&crd, "v1");
    assert_eq!(cols.len(), 1);
    assert_eq!(
        (cols[0].name.as_str(), cols[0].type_.as_str()),
        ("Age", "date")
    );
    let conv = TableConvertor::for_crd(&cols).unwrap();
    let names: Vec<&str> = conv
        .column_definitions()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, vec!["Name", "Age"]);
    let o = json!({"metadata": {"name": "x", "creationTimestamp": "2026-11-28T10:00:00Z"}});
    assert_eq!(conv.cells(&o, now()), vec![json!("x"), json!("2d")]);
}

#[test]
fn typed_columns_follow_cell_for_json_value() {
    let crd = json!({"spec": {"versions": [{"name": "v1", "additionalPrinterColumns": [
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
        {"name": "Whole", "type": "number", "jsonPath": ".spec.whole"},
        {"name": "Truncated", "type": "integer", "jsonPath": ".spec.ratio"},
        {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused"},
        {"name": "Args", "type": "string", "jsonPath": ".spec.args"},
        {"name": "FirstArg", "type": "string", "jsonPath": ".spec.args[*]"},
        {"name": "Count", "type": "string", "jsonPath": ".spec.whole"},
        {"name": "When", "type": "date", "jsonPath": ".status.when"}
    ]}]}});
    let conv = TableConvertor::for_crd(&PrinterColumn::from_crd(&crd, "v1")).unwrap();
    let o = json!({
        "metadata": {"name": "p"},
        "spec": {"ratio": 2.5, "whole": 4, "paused": true, "args": ["a", "b"]},
        "status": {"when": "not a time"}
    });
    assert_eq!(
        conv.cells(&o, now()),
        vec![
            json!("p"),
            json!(2.5),
            json!(4),
            json!(2),
            json!(true),
            json!(r#"["a","b"]"#),
            json!("a"),
            json!("4"),
            json!("<invalid>")
        ],
        "first match only; strings printed as client-go prints them"
    );
    let mistyped = json!({"metadata": {"name": "q"}, "spec": {"ratio": "x", "paused": "yes"}});
    let cells = conv.cells(&mistyped, now());
    assert_eq!(cells[1], Value::Null);
    assert_eq!(cells[3], Value::Null);
    assert_eq!(cells[4], Value::Null);
}

#[test]
fn bad_printer_column_path_is_an_error() {
    let col =
        PrinterColumn::parse(&json!({"name": "X", "type": "string", "jsonPath": ".a[?(@.b=="}))
            .unwrap();
    assert!(TableConvertor::for_crd(&[col]).is_err());
}

fn node(labels: Value, ready: Option<&str>, unschedulable: bool) -> Value {
    let conditions = match ready {
        Some(s) => {
            json!([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": s}])
        }
        None => json!([]),
    };
    json!({
        "metadata": {"name": "worker-0", "labels": labels, "creationTimestamp": "2026-11-27T10:00:00Z", "resourceVersion": "5"},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "worker-0"}],
            "nodeInfo": {"kubeletVersion": "v1.32.4", "osImage": "Fedora CoreOS 41", "kernelVersion": "6.11.4", "containerRuntimeVersion": ""}
        }
    })
}

#[test]
fn node_printer() {
    let conv = TableConvertor::for_builtin("", "nodes");
    let headers: Vec<(&str, i32)> = conv
        .column_definitions()
        .iter()
        .map(|c| (c.name.as_str(), c.priority))
        .collect();
    assert_eq!(
        headers,
        vec![
            ("Name", 0),
            ("Status", 0),
            ("Roles", 0),
            ("Age", 0),
            ("Version", 0),
            ("Internal-IP", 1),
            ("External-IP", 1),
            ("OS-Image", 1),
            ("Kernel-Version", 1),
            ("Container-Runtime", 1)
        ]
    );
    assert_eq!(conv.column_definitions()[0].format, "name");

    let labels = json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/infra": "", "kubernetes.io/hostname": "w"});
    assert_eq!(
        conv.cells(&node(labels, Some("True"), false), now()),
        vec![
            json!("worker-0"),
            json!("Ready"),
            json!("infra,worker"),
            json!("3d"),
            json!("v1.32.4"),
            json!("10.0.0.5"),
            json!("<none>"),
            json!("Fedora CoreOS 41"),
            json!("6.11.4"),
            json!("<unknown>")
        ]
    );
    let status_cases = [
        (Some("True"), true, "Ready,SchedulingDisabled"),
        (Some("False"), false, "NotReady"),
        (Some("Unknown"), true, "NotReady,SchedulingDisabled"),
        (None, false, "Unknown"),
    ];
    for (ready, unsched, want) in status_cases {
        let cells = conv.cells(&node(json!({}), ready, unsched), now());
        assert_eq!(cells[1], json!(want), "{ready:?} {unsched}");
        assert_eq!(cells[2], json!("<none>"));
    }
    let legacy_role = node(json!({"kubernetes.io/role": "master"}), Some("True"), false);
    assert_eq!(conv.cells(&legacy_role, now())[2], json!("master"));
}

fn pod(status: Value) -> Value {
    json!({
        "metadata": {"name": "web-1", "namespace": "default", "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": {"nodeName": "worker-0", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": status
    })
}

fn running(name: &str, ready: bool, restarts: i64) -> Value {
    json!({"name": name, "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": "2026-11-30T09:00:00Z"}}})
}

#[test]
fn pod_printer() {
    let conv = TableConvertor::for_builtin("", "pods");
    let headers: Vec<&str> = conv
        .column_definitions()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        headers,
        vec![
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );

    let healthy = pod(json!({
        "phase": "Running",
        "podIPs": [{"ip": "10.128.0.7"}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [running("a", true, 0), running("b", true, 0)]
    }));
    assert_eq!(
        conv.cells(&healthy, now()),
        vec![
            json!("web-1"),
            json!("2/2"),
            json!("Running"),
            json!("0"),
            json!("60m"),
            json!("10.128.0.7"),
            json!("worker-0"),
            json!("<none>"),
            json!("<none>")
        ]
    );

    let mut crashing_b = running("b", false, 4);
    crashing_b["state"] = json!({"waiting": {"reason": "CrashLoopBackOff"}});
    crashing_b["lastState"] =
        json!({"terminated": {"exitCode": 1, "finishedAt": "2026-11-30T09:55:00Z"}});
    let crashing =
        pod(json!({"phase": "Running", "containerStatuses": [running("a", true, 1), crashing_b]}));
    let cells = conv.cells(&crashing, now());
    assert_eq!(
        (&cells[1], &cells[2], &cells[3], &cells[5]),
        (
            &json!("1/2"),
            &json!("CrashLoopBackOff"),
            &json!("5 (5m ago)"),
            &json!("<none>")
        )
    );

    let mut init = pod(json!({
        "phase": "Pending",
        "initContainerStatuses": [{"name": "setup", "restartCount": 0, "state": {"running": {}}}]
    }));
    init["spec"]["initContainers"] = json!([{"name": "setup"}]);
    assert_eq!(
        conv.cells(&init, now())[1..3],
        [json!("0/2"), json!("Init:0/1")]
    );

    let done = pod(json!({
        "phase": "Succeeded",
        "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "b", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        ]
    }));
    let row = conv.row(&done, now(), IncludeObject::None);
    assert_eq!(row["cells"][2], "Completed");
    assert_eq!(
        row["conditions"],
        json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
    );

    let mut terminating = healthy.clone();
    terminating["metadata"]["deletionTimestamp"] = json!("2026-11-30T09:59:00Z");
    assert_eq!(conv.cells(&terminating, now())[2], "Terminating");

    let mut gated = healthy.clone();
    gated["spec"]["readinessGates"] =
        json!([{"conditionType": "example.com/lb"}, {"conditionType": "example.com/x"}]);
    gated["status"]["conditions"] =
        json!([{"type": "Ready", "status": "True"}, {"type": "example.com/lb", "status": "True"}]);
    assert_eq!(conv.cells(&gated, now())[8], "1/2");
}

#[test]
fn other_builtin_printers() {
    let cm = json!({"metadata": {"name": "demo", "creationTimestamp": "2026-11-30T09:59:50Z"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}});
    assert_eq!(
        TableConvertor::for_builtin("", "configmaps").cells(&cm, now()),
        vec![json!("demo"), json!(3), json!("10s")]
    );
    let generic = TableConvertor::for_builtin("rbac.authorization.k8s.io", "roles");
    let names: Vec<&str> = generic
        .column_definitions()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, vec!["Name", "Age"]);
    assert_eq!(generic.cells(&cm, now()), vec![json!("demo"), json!("10s")]);
    let pdb = json!({"metadata": {"name": "p"}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
    assert_eq!(
        TableConvertor::for_builtin("policy", "poddisruptionbudgets").cells(&pdb, now()),
        vec![
            json!("p"),
            json!("50%"),
            json!("N/A"),
            json!(1),
            json!("<unknown>")
        ]
    );
    let ns = json!({"metadata": {"name": "default", "creationTimestamp": "2026-11-30T09:00:00Z"}, "status": {"phase": "Active"}});
    assert_eq!(
        TableConvertor::for_builtin("", "namespaces").cells(&ns, now()),
        vec![json!("default"), json!("Active"), json!("60m")]
    );
}

#[test]
fn event_printer_core_and_events_api() {
    let core = TableConvertor::for_builtin("", "events");
    let headers: Vec<(&str, i32)> = core
        .column_definitions()
        .iter()
        .map(|c| (c.name.as_str(), c.priority))
        .collect();
    assert_eq!(
        headers,
        vec![
            ("Last Seen", 0),
            ("Type", 0),
            ("Reason", 0),
            ("Object", 0),
            ("Subobject", 1),
            ("Source", 1),
            ("Message", 0),
            ("First Seen", 1),
            ("Count", 1),
            ("Name", 1)
        ]
    );
    let ev = json!({
        "metadata": {"name": "worker-0.1789"},
        "involvedObject": {"kind": "MachineConfigNode", "name": "worker-0"},
        "reason": "UpdatePrepared",
        "message": "Node worker-0 prepared for update\n",
        "source": {"component": "machineconfigdaemon", "host": "worker-0"},
        "type": "Normal",
        "count": 2,
        "firstTimestamp": "2026-11-30T09:50:00Z",
        "lastTimestamp": "2026-11-30T09:58:00Z"
    });
    assert_eq!(
        core.cells(&ev, now()),
        vec![
            json!("2m"),
            json!("Normal"),
            json!("UpdatePrepared"),
            json!("machineconfignode/worker-0"),
            json!(""),
            json!("machineconfigdaemon, worker-0"),
            json!("Node worker-0 prepared for update"),
            json!("10m"),
            json!(2),
            json!("worker-0.1789")
        ]
    );

    let new_api = TableConvertor::for_builtin("events.k8s.io", "events");
    let ev2 = json!({
        "metadata": {"name": "e2"},
        "regarding": {"kind": "Node", "name": "worker-1"},
        "reason": "Drain",
        "note": "draining",
        "type": "Warning",
        "eventTime": "2026-11-30T09:59:30.123456Z",
        "reportingController": "mco",
        "series": {"count": 5, "lastObservedTime": "2026-11-30T09:59:50.000000Z"}
    });
    assert_eq!(
        new_api.cells(&ev2, now()),
        vec![
            json!("10s"),
            json!("Warning"),
            json!("Drain"),
            json!("node/worker-1"),
            json!(""),
            json!("mco"),
            json!("draining"),
            json!("29s"),
            json!(5),
            json!("e2")
        ]
    );
}

#[test]
fn workload_printers() {
    let template = json!({"spec": {
        "nodeSelector": {"b": "2", "a": "1"},
        "containers": [{"name": "web", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]
    }});
    let deploy = json!({
        "metadata": {"name": "web", "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
            "template": template
        },
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
    });
    assert_eq!(
        TableConvertor::for_builtin("apps", "deployments").cells(&deploy, now()),
        vec![
            json!("web"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("60m"),
            json!("web,side"),
            json!("nginx:1,busybox"),
            json!("app=web,tier in (a,b)")
        ]
    );
    let ds = json!({
        "metadata": {"name": "mcd"},
        "spec": {"template": template},
        "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}
    });
    assert_eq!(
        TableConvertor::for_builtin("apps", "daemonsets").cells(&ds, now()),
        vec![
            json!("mcd"),
            json!(3),
            json!(3),
            json!(3),
            json!(3),
            json!(3),
            json!("a=1,b=2"),
            json!("<unknown>"),
            json!("web,side"),
            json!("nginx:1,busybox"),
            json!("<none>")
        ]
    );
    let rs = json!({"metadata": {"name": "web-5d4f"}, "spec": {"replicas": 1, "template": {"spec": {"containers": []}}}, "status": {"replicas": 1}});
    assert_eq!(
        TableConvertor::for_builtin("apps", "replicasets").cells(&rs, now()),
        vec![
            json!("web-5d4f"),
            json!(1),
            json!(1),
            json!(0),
            json!("<unknown>"),
            json!(""),
            json!(""),
            json!("<none>")
        ]
    );
}
