//! `meta.k8s.io/v1` Table rendering for `kubectl get`: CRD printer columns plus the
//! built-in printers kubectl no longer carries itself.

use mco_apimachinery::jsonpath::{JsonPath, print_value};
use serde_json::{Value, json};

use crate::registry::ResourceInfo;

/// What `rows[].object` holds (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(s: Option<&str>) -> Include {
        match s {
            Some("Object") => Include::Object,
            Some("None") => Include::None,
            _ => Include::Metadata,
        }
    }
}

/// kubectl's `duration.HumanDuration`, which Table AGE cells carry pre-rendered.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 60 * 2 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{}h", hours / 24, h)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{}d", hours / 24 / 365, dy)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age_of(ts: Option<&Value>, now: jiff::Timestamp) -> Value {
    match ts
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
    {
        Some(t) => Value::String(human_duration(now.duration_since(t).as_secs())),
        None => Value::String("<unknown>".into()),
    }
}

enum Col {
    Name,
    Age,
    Path { path: Option<JsonPath>, ty: String },
    Fn(fn(&Value) -> Value),
}

fn def(name: &str, ty: &str, format: &str, desc: &str, priority: i64) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": desc, "priority": priority})
}

fn name_def() -> Value {
    def(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated.",
        0,
    )
}

fn age_def() -> Value {
    def(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
    )
}

fn condition_status(obj: &Value, ty: &str) -> Option<String> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .and_then(|c| c["status"].as_str())
        .map(String::from)
}

fn node_status(o: &Value) -> Value {
    let mut s = match condition_status(o, "Ready").as_deref() {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        s.push_str(",SchedulingDisabled");
    }
    Value::String(s)
}

fn node_roles(o: &Value) -> Value {
    let mut roles: Vec<String> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| {
                    if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                        (!r.is_empty()).then(|| r.to_string())
                    } else if k == "kubernetes.io/role" {
                        v.as_str().map(String::from)
                    } else {
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    Value::String(if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    })
}

fn str_at(o: &Value, p: &str) -> Value {
    Value::String(
        o.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("<none>")
            .to_string(),
    )
}

fn node_address(o: &Value, ty: &str) -> Value {
    let a = o
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|x| x["type"] == ty))
        .and_then(|x| x["address"].as_str());
    Value::String(a.unwrap_or("<none>").to_string())
}

fn pod_ready(o: &Value) -> Value {
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map_or(0, |a| a.iter().filter(|c| c["ready"] == true).count());
    Value::String(format!("{ready}/{total}"))
}

fn pod_status(o: &Value) -> Value {
    if o.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Value::String("Terminating".into());
    }
    let s = o
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .or_else(|| o.pointer("/status/phase").and_then(Value::as_str))
        .unwrap_or("Pending");
    Value::String(s.to_string())
}

fn pod_restarts(o: &Value) -> Value {
    let n: i64 = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map_or(0, |a| {
            a.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
        });
    json!(n)
}

fn data_count(o: &Value) -> Value {
    let n = o
        .get("data")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len())
        + o.get("binaryData")
            .and_then(Value::as_object)
            .map_or(0, |m| m.len());
    json!(n)
}

fn columns(info: &ResourceInfo, version: &str) -> (Vec<Value>, Vec<Col>) {
    if let Some(v) = info.crd_version(version) {
        let mut defs = vec![name_def()];
        let mut cols = vec![Col::Name];
        if v.printer_columns.is_empty() {
            defs.push(age_def());
            cols.push(Col::Age);
        }
        for c in &v.printer_columns {
            let name = c["name"].as_str().unwrap_or("");
            let ty = c["type"].as_str().unwrap_or("string").to_string();
            defs.push(def(
                name,
                &ty,
                c["format"].as_str().unwrap_or(""),
                c["description"].as_str().unwrap_or(name),
                c["priority"].as_i64().unwrap_or(0),
            ));
            let path = c["jsonPath"].as_str().and_then(|p| JsonPath::parse(p).ok());
            cols.push(Col::Path { path, ty });
        }
        return (defs, cols);
    }
    let mut defs = vec![name_def()];
    let mut cols = vec![Col::Name];
    let mut add = |d: Value, c: Col| {
        defs.push(d);
        cols.push(c);
    };
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "nodes") => {
            add(
                def("Status", "string", "", "The status of the node", 0),
                Col::Fn(node_status),
            );
            add(
                def("Roles", "string", "", "The roles of the node", 0),
                Col::Fn(node_roles),
            );
            add(age_def(), Col::Age);
            add(
                def(
                    "Version",
                    "string",
                    "",
                    "Kubelet Version reported by the node.",
                    0,
                ),
                Col::Fn(|o| str_at(o, "/status/nodeInfo/kubeletVersion")),
            );
            add(
                def(
                    "Internal-IP",
                    "string",
                    "",
                    "List of addresses reachable to the node.",
                    1,
                ),
                Col::Fn(|o| node_address(o, "InternalIP")),
            );
            add(
                def(
                    "External-IP",
                    "string",
                    "",
                    "List of addresses reachable to the node.",
                    1,
                ),
                Col::Fn(|o| node_address(o, "ExternalIP")),
            );
            add(
                def(
                    "OS-Image",
                    "string",
                    "",
                    "OS Image reported by the node.",
                    1,
                ),
                Col::Fn(|o| str_at(o, "/status/nodeInfo/osImage")),
            );
            add(
                def(
                    "Kernel-Version",
                    "string",
                    "",
                    "Kernel Version reported by the node.",
                    1,
                ),
                Col::Fn(|o| str_at(o, "/status/nodeInfo/kernelVersion")),
            );
            add(
                def(
                    "Container-Runtime",
                    "string",
                    "",
                    "Container Runtime Version reported by the node.",
                    1,
                ),
                Col::Fn(|o| str_at(o, "/status/nodeInfo/containerRuntimeVersion")),
            );
        }
        ("", "pods") => {
            add(
                def(
                    "Ready",
                    "string",
                    "",
                    "The aggregate readiness state of this pod for accepting traffic.",
                    0,
                ),
                Col::Fn(pod_ready),
            );
            add(
                def(
                    "Status",
                    "string",
                    "",
                    "The aggregate status of the containers in this pod.",
                    0,
                ),
                Col::Fn(pod_status),
            );
            add(
                def(
                    "Restarts",
                    "string",
                    "",
                    "The number of times the containers in this pod have been restarted.",
                    0,
                ),
                Col::Fn(pod_restarts),
            );
            add(age_def(), Col::Age);
            add(
                def("IP", "string", "", "IP address allocated to the pod.", 1),
                Col::Fn(|o| str_at(o, "/status/podIP")),
            );
            add(
                def(
                    "Node",
                    "string",
                    "",
                    "Name of the Node this pod runs on.",
                    1,
                ),
                Col::Fn(|o| str_at(o, "/spec/nodeName")),
            );
        }
        ("", "configmaps") => {
            add(
                def("Data", "integer", "", "Number of data entries.", 0),
                Col::Fn(data_count),
            );
            add(age_def(), Col::Age);
        }
        ("", "secrets") => {
            add(
                def("Type", "string", "", "The type of the secret", 0),
                Col::Fn(|o| str_at(o, "/type")),
            );
            add(
                def("Data", "integer", "", "Number of data entries.", 0),
                Col::Fn(data_count),
            );
            add(age_def(), Col::Age);
        }
        ("", "namespaces") => {
            add(
                def("Status", "string", "", "The status of the namespace", 0),
                Col::Fn(|o| str_at(o, "/status/phase")),
            );
            add(age_def(), Col::Age);
        }
        ("policy", "poddisruptionbudgets") => {
            add(
                def(
                    "Min Available",
                    "string",
                    "",
                    "The minimum number of pods that must be available.",
                    0,
                ),
                Col::Fn(|o| int_or_str(o.pointer("/spec/minAvailable"))),
            );
            add(
                def(
                    "Max Unavailable",
                    "string",
                    "",
                    "The maximum number of pods that may be unavailable.",
                    0,
                ),
                Col::Fn(|o| int_or_str(o.pointer("/spec/maxUnavailable"))),
            );
            add(
                def(
                    "Allowed Disruptions",
                    "integer",
                    "",
                    "Number of pod disruptions that are currently allowed.",
                    0,
                ),
                Col::Fn(|o| {
                    json!(
                        o.pointer("/status/disruptionsAllowed")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                    )
                }),
            );
            add(age_def(), Col::Age);
        }
        _ => add(age_def(), Col::Age),
    }
    (defs, cols)
}

fn int_or_str(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Number(n)) => Value::String(n.to_string()),
        Some(Value::String(s)) => Value::String(s.clone()),
        _ => Value::String("N/A".into()),
    }
}

fn cell(col: &Col, obj: &Value, now: jiff::Timestamp) -> Value {
    match col {
        Col::Name => obj
            .pointer("/metadata/name")
            .cloned()
            .unwrap_or(Value::Null),
        Col::Age => age_of(obj.pointer("/metadata/creationTimestamp"), now),
        Col::Fn(f) => f(obj),
        Col::Path { path, ty } => {
            let Some(found) = path.as_ref().and_then(|p| p.find_first(obj)) else {
                return Value::Null;
            };
            match (ty.as_str(), found) {
                ("date", v) => age_of(Some(v), now),
                ("integer" | "number", Value::Number(n)) => Value::Number(n.clone()),
                ("boolean", Value::Bool(b)) => Value::Bool(*b),
                (_, Value::String(s)) => Value::String(s.clone()),
                (_, v) => Value::String(print_value(v)),
            }
        }
    }
}

fn row_object(obj: &Value, include: Include) -> Option<Value> {
    match include {
        Include::None => None,
        Include::Object => Some(obj.clone()),
        Include::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })),
    }
}

/// Renders `objs` (already in the requested version) as one Table.
pub fn table(
    info: &ResourceInfo,
    version: &str,
    objs: &[Value],
    include: Include,
    rv: u64,
    cont: Option<String>,
) -> Value {
    let now = jiff::Timestamp::now();
    let (defs, cols) = columns(info, version);
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut row =
                json!({"cells": cols.iter().map(|c| cell(c, o, now)).collect::<Vec<_>>()});
            if let Some(obj) = row_object(o, include) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = Value::String(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn human_durations_match_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 120), "3h2m");
        assert_eq!(human_duration(10 * 3600), "10h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(30 * 86400), "30d");
    }

    #[test]
    fn node_table_has_kubectl_columns() {
        let r = Registry::new();
        let info = r.lookup("", "v1", "nodes").unwrap();
        let node = json!({"metadata": {"name": "w0", "creationTimestamp": "2020-01-01T00:00:00Z",
            "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.0"}}});
        let t = table(&info, "v1", &[node], Include::Metadata, 7, None);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Status", "Roles", "Age", "Version"]);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "worker");
        assert_eq!(cells[4], "v1.32.0");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn crd_columns_follow_printer_columns() {
        let r = Registry::new();
        let crd = json!({"spec": {"group": "x.io", "scope": "Cluster", "names": {"plural": "ws", "kind": "W"},
            "versions": [{"name": "v1", "served": true, "storage": true, "additionalPrinterColumns": [
                {"name": "Updated", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Updated\")].status"},
                {"name": "Extra", "type": "string", "priority": 1, "jsonPath": ".spec.x"}]}]}});
        let info = r.upsert_crd(&crd).unwrap();
        let obj = json!({"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Updated", "status": "True"}]}});
        let t = table(&info, "v1", &[obj], Include::None, 1, None);
        assert_eq!(t["rows"][0]["cells"], json!(["a", "True", null]));
        assert_eq!(t["columnDefinitions"][2]["priority"], 1);
        assert!(t["rows"][0].get("object").is_none());
    }
}
