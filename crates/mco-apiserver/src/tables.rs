//! `meta.k8s.io/v1` Table rendering for `kubectl get`: CRD printer columns plus the
//! built-in printers kubectl no longer carries itself.

use mco_apimachinery::table::{IncludeObject, PrinterColumn, TableConvertor};
use serde_json::{Value, json};

use crate::registry::ResourceInfo;

/// What `rows[].object` holds (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl From<Include> for IncludeObject {
    fn from(i: Include) -> IncludeObject {
        match i {
            Include::None => IncludeObject::None,
            Include::Metadata => IncludeObject::Metadata,
            Include::Object => IncludeObject::Object,
        }
    }
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

/// The Table convertor of a resource: printer columns for CRDs, upstream's printers
/// (or `Name`/`Age`) for built-ins.
fn convertor(info: &ResourceInfo, version: &str) -> TableConvertor {
    if let Some(crd) = &info.crd_object {
        let cols = PrinterColumn::from_crd(crd, version);
        match TableConvertor::for_crd(&cols) {
            Ok(c) => return c,
            Err(e) => tracing::warn!(error = %e, "bad printer column; using the default columns"),
        }
    }
    TableConvertor::for_builtin(&info.group, &info.plural)
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
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = Value::String(c);
    }
    let list = json!({"metadata": meta, "items": objs});
    convertor(info, version).list_table(&list, jiff::Timestamp::now(), include.into())
}

/// The one-row Table of a watch event.
pub fn event_table(info: &ResourceInfo, version: &str, obj: &Value, include: Include) -> Value {
    convertor(info, version).watch_event_table(obj, jiff::Timestamp::now(), include.into(), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

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
        // Go's encoder writes the empty RawExtension of includeObject=None as null.
        assert_eq!(t["rows"][0].get("object"), Some(&Value::Null));
    }
}
