//! The MachineConfigNode schema a cluster serves, and what mco may write under it.
//!
//! A cluster may have mco's CRD or one of upstream's: `v1alpha1` naming the node in `nodeRef`
//! (the shape the first documentation showed) or in `node` (OpenShift 4.15 to 4.18), or `v1`
//! (4.19 and newer). mco writes its own shape, which carries the fields of all of them, and
//! [`Served::prune`] removes what the installed schema lacks before anything is sent: a field
//! the schema lacks is never written, and one it requires is always among mco's.

use serde_json::Value;

use crate::GROUP;

/// The kind in the group.
pub const KIND: &str = "MachineConfigNode";
/// The resource.
pub const PLURAL: &str = "machineconfignodes";

/// The served version mco talks to, and its schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Served {
    /// `v1` or `v1alpha1`.
    pub version: String,
    /// The version's `openAPIV3Schema`; `None` when the server did not publish it, and then
    /// nothing is pruned here (the API server prunes unknown fields itself).
    schema: Option<Value>,
}

impl Served {
    /// `version` with `schema`.
    pub fn new(version: impl Into<String>, schema: Option<Value>) -> Served {
        Served {
            version: version.into(),
            schema,
        }
    }

    /// mco's own CRD, at its storage version.
    pub fn mco() -> Served {
        let crd = serde_json::to_value(super::crd()).unwrap_or_default();
        Served::from_crd(&crd).unwrap_or_else(|| Served::new("v1", None))
    }

    /// What a CRD serves: `v1` when served, else `v1alpha1` (kube-apiserver's order of
    /// preference), with that version's schema.
    pub fn from_crd(crd: &Value) -> Option<Served> {
        let versions = crd.pointer("/spec/versions")?.as_array()?;
        ["v1", "v1alpha1"].iter().find_map(|want| {
            let v = versions
                .iter()
                .find(|v| v["name"] == *want && v["served"] != false)?;
            Some(Served::new(
                *want,
                v.pointer("/schema/openAPIV3Schema").cloned(),
            ))
        })
    }

    /// The version's schema from the text of the server's `/openapi/v3/apis/<group>/<version>`
    /// document: the component whose group-version-kind is MachineConfigNode's, the only one
    /// built. The group's document holds every kind of the group (434 KB on OpenShift),
    /// and a daemon reads it at every start, so at every update that reboots. Parsed whole
    /// into a tree it was the largest single cost of a simulated cluster's rollout; here each
    /// component is only scanned for its group-version-kind. Text that is not such a document
    /// gives no schema.
    pub fn from_openapi_text(version: &str, text: &str) -> Served {
        use serde::Deserialize;
        use serde_json::value::RawValue;
        use std::collections::HashMap;

        #[derive(Deserialize)]
        struct Doc<'a> {
            #[serde(borrow, default)]
            components: Option<Components<'a>>,
        }
        #[derive(Deserialize)]
        struct Components<'a> {
            #[serde(borrow, default)]
            schemas: HashMap<std::borrow::Cow<'a, str>, &'a RawValue>,
        }
        #[derive(Deserialize)]
        struct Head<'a> {
            #[serde(borrow, default, rename = "x-kubernetes-group-version-kind")]
            gvks: Vec<Gvk<'a>>,
        }
        #[derive(Deserialize)]
        struct Gvk<'a> {
            #[serde(borrow, default)]
            group: std::borrow::Cow<'a, str>,
            #[serde(borrow, default)]
            kind: std::borrow::Cow<'a, str>,
            #[serde(borrow, default)]
            version: std::borrow::Cow<'a, str>,
        }
        let schema = serde_json::from_str::<Doc>(text)
            .ok()
            .and_then(|d| d.components)
            .and_then(|c| {
                c.schemas.into_values().find(|raw| {
                    serde_json::from_str::<Head>(raw.get()).is_ok_and(|h| {
                        h.gvks
                            .iter()
                            .any(|g| g.group == GROUP && g.kind == KIND && g.version == version)
                    })
                })
            })
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok());
        Served::new(version, schema)
    }

    /// `machineconfiguration.openshift.io/<version>`.
    pub fn api_version(&self) -> String {
        format!("{GROUP}/{}", self.version)
    }

    /// Whether the schema has the field at `path` (JSON Pointer segments; array indexes and
    /// `-` step into the items). Without a schema, every field.
    pub fn has(&self, path: &[&str]) -> bool {
        let Some(mut node) = self.schema.as_ref() else {
            return true;
        };
        for seg in path {
            match step(node, seg) {
                Step::Into(next) => node = next,
                Step::Open => return true,
                Step::Missing => return false,
            }
        }
        true
    }

    /// Removes from `v`, a whole object, a patch body or a part of one at `at`, every field the
    /// schema lacks.
    pub fn prune_at(&self, at: &[&str], v: &mut Value) {
        let Some(mut node) = self.schema.as_ref() else {
            return;
        };
        for seg in at {
            match step(node, seg) {
                Step::Into(next) => node = next,
                Step::Open | Step::Missing => return,
            }
        }
        prune(node, v);
    }

    /// [`Served::prune_at`] from the root.
    pub fn prune(&self, v: &mut Value) {
        self.prune_at(&[], v)
    }

    /// A JSON patch with the ops on fields the schema lacks left out, and the values it
    /// writes pruned.
    pub fn prune_ops(&self, ops: Vec<Value>) -> Vec<Value> {
        ops.into_iter()
            .filter_map(|mut op| {
                let path = pointer(op["path"].as_str()?);
                let path: Vec<&str> = path.iter().map(String::as_str).collect();
                if !self.has(&path) {
                    return None;
                }
                if let Some(v) = op.get_mut("value") {
                    self.prune_at(&path, v);
                }
                Some(op)
            })
            .collect()
    }
}

enum Step<'a> {
    Into(&'a Value),
    /// Anything goes below: preserved unknown fields, or a `$ref` this module does not follow.
    Open,
    Missing,
}

fn step<'a>(node: &'a Value, seg: &str) -> Step<'a> {
    if node["x-kubernetes-preserve-unknown-fields"] == true
        || node.get("$ref").is_some()
        || node.get("allOf").is_some()
    {
        return Step::Open;
    }
    if let Some(items) = node.get("items") {
        return Step::Into(items);
    }
    match (node.get("properties"), node.get("additionalProperties")) {
        (Some(props), _) if props.get(seg).is_some() => Step::Into(&props[seg]),
        (_, Some(extra)) if extra.is_object() => Step::Into(extra),
        (Some(_), _) => Step::Missing,
        // An object without properties (`metadata` in a CRD): the server keeps it whole.
        (None, _) => Step::Open,
    }
}

fn prune(node: &Value, v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, child| match step(node, k) {
                Step::Into(n) => {
                    prune(n, child);
                    true
                }
                Step::Open => true,
                Step::Missing => false,
            });
        }
        Value::Array(items) => {
            if let Some(n) = node.get("items") {
                for item in items {
                    prune(n, item);
                }
            }
        }
        _ => {}
    }
}

/// The segments of a JSON Pointer, unescaped.
fn pointer(p: &str) -> Vec<String> {
    p.split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upstream_v1() -> Served {
        Served::new(
            "v1",
            Some(json!({"type": "object", "properties": {
                "metadata": {"type": "object"},
                "spec": {"type": "object", "required": ["node"], "properties": {
                    "node": {"type": "object", "properties": {"name": {"type": "string"}}},
                    "pool": {"type": "object", "properties": {"name": {"type": "string"}}}}},
                "status": {"type": "object", "properties": {
                    "conditions": {"type": "array", "items": {"type": "object", "properties": {
                        "type": {"type": "string"}, "status": {"type": "string"}}}},
                    "observedGeneration": {"type": "integer"}}}}})),
        )
    }

    #[test]
    fn fields_the_schema_lacks_are_pruned_and_metadata_is_kept() {
        let mut v = json!({
            "apiVersion": "x", "metadata": {"name": "n", "ownerReferences": [{"uid": "u"}]},
            "spec": {"node": {"name": "n"}, "nodeRef": {"name": "n"}, "pool": {"name": "w"}},
            "status": {"health": "Healthy", "conditions": [{"type": "Updated", "status": "True", "x": 1}]}
        });
        upstream_v1().prune(&mut v);
        assert_eq!(
            v,
            json!({
                "metadata": {"name": "n", "ownerReferences": [{"uid": "u"}]},
                "spec": {"node": {"name": "n"}, "pool": {"name": "w"}},
                "status": {"conditions": [{"type": "Updated", "status": "True"}]}
            })
        );
    }

    #[test]
    fn patch_ops_on_missing_fields_are_left_out() {
        let ops = vec![
            json!({"op": "test", "path": "/status/conditions/3/type", "value": "Updated"}),
            json!({"op": "add", "path": "/status/health", "value": "Healthy"}),
            json!({"op": "copy", "from": "/metadata/generation", "path": "/status/observedGeneration"}),
        ];
        let kept = upstream_v1().prune_ops(ops.clone());
        assert_eq!(kept, vec![ops[0].clone(), ops[2].clone()]);
    }

    #[test]
    fn mco_serves_v1_with_both_node_fields() {
        let s = Served::mco();
        assert_eq!(s.api_version(), "machineconfiguration.openshift.io/v1");
        assert!(s.has(&["spec", "node", "name"]) && s.has(&["spec", "nodeRef", "name"]));
        assert!(s.has(&["status", "health"]) && s.has(&["status", "pinnedImageSets", "0", "name"]));
        assert!(!s.has(&["spec", "bogus"]));
    }

    #[test]
    fn a_crd_serving_only_v1alpha1_is_talked_to_as_v1alpha1() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1alpha1", "served": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        assert_eq!(Served::from_crd(&crd).unwrap().version, "v1alpha1");
        let crd = json!({"spec": {"versions": [
            {"name": "v1alpha1", "served": true}, {"name": "v1", "served": true}]}});
        assert_eq!(Served::from_crd(&crd).unwrap().version, "v1");
    }

    #[test]
    fn the_openapi_component_of_the_kind_is_the_schema() {
        let doc = json!({"components": {"schemas": {
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object"},
            "io.openshift.machineconfiguration.v1alpha1.MachineConfigNode": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": KIND, "version": "v1alpha1"}],
                "properties": {"spec": {"type": "object", "properties": {"nodeRef": {"type": "object"}}}}}}}});
        let s = Served::from_openapi_text("v1alpha1", &doc.to_string());
        assert!(s.has(&["spec", "nodeRef"]));
        assert!(!s.has(&["spec", "node"]));
        let component = &doc["components"]["schemas"]["io.openshift.machineconfiguration.v1alpha1.MachineConfigNode"];
        assert_eq!(s, Served::new("v1alpha1", Some(component.clone())));
    }

    #[test]
    fn the_openapi_text_finds_only_the_version_asked_and_survives_junk() {
        let doc = json!({"components": {"schemas": {
            "a.v1.MachineConfigNode": {
                "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": KIND, "version": "v1"}],
                "properties": {"spec": {"type": "object", "properties": {"node": {"type": "object"}}}}},
            "a.v1.MachineConfigPool": {
                "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "MachineConfigPool", "version": "v1alpha1"}]}}}})
        .to_string();
        assert!(Served::from_openapi_text("v1", &doc).has(&["spec", "node"]));
        assert!(!Served::from_openapi_text("v1", &doc).has(&["spec", "nodeRef"]));
        // No component for v1alpha1: no schema, so nothing is pruned.
        assert_eq!(
            Served::from_openapi_text("v1alpha1", &doc),
            Served::new("v1alpha1", None)
        );
        for junk in [
            "",
            "[]",
            "{\"components\": 3}",
            "{\"components\": {\"schemas\": []}}",
        ] {
            assert_eq!(
                Served::from_openapi_text("v1", junk),
                Served::new("v1", None),
                "{junk}"
            );
        }
    }
}
