//! `/openapi/v3` documents: what kubectl's `apply` checks, and cache hashes.

use mco_apimachinery::openapi::{
    OpenApiResource, OpenApiV3, builtin_resources, document_hash, gv_path,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn machineconfig_crd(extra_property: Option<&str>) -> Value {
    let mut spec_props = json!({
        "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "kernelArguments": {"type": "array", "items": {"type": "string"}},
        "kernelType": {"type": "string", "enum": ["default", "realtime"]}
    });
    if let Some(p) = extra_property {
        spec_props[p] = json!({"type": "string"});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "machineconfigs.machineconfiguration.openshift.io"},
        "spec": {
            "group": "machineconfiguration.openshift.io",
            "names": {"kind": "MachineConfig", "plural": "machineconfigs", "listKind": "MachineConfigList"},
            "scope": "Cluster",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": spec_props}}
                }}
            }]
        }
    })
}

fn mcn_crd() -> Value {
    json!({
        "spec": {
            "group": "machineconfiguration.openshift.io",
            "names": {"kind": "MachineConfigNode", "plural": "machineconfignodes"},
            "scope": "Cluster",
            "versions": [
                {"name": "v1alpha1", "served": true, "subresources": {"status": {}},
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v1beta1", "served": false}
            ]
        }
    })
}

fn server(extra_property: Option<&str>) -> OpenApiV3 {
    let mut resources = builtin_resources();
    resources.extend(OpenApiResource::from_crd(&machineconfig_crd(
        extra_property,
    )));
    resources.extend(OpenApiResource::from_crd(&mcn_crd()));
    OpenApiV3::build(&resources)
}

/// kubectl's `supportsQueryParamV3`: some PATCH operation with the kind's GVK
/// must list the parameter, in the query.
fn kubectl_supports(doc: &Value, group: &str, version: &str, kind: &str, param: &str) -> bool {
    let want = json!({"group": group, "version": version, "kind": kind});
    doc["paths"]
        .as_object()
        .expect("paths")
        .values()
        .filter_map(|item| item.get("patch"))
        .filter(|op| op["x-kubernetes-group-version-kind"] == want)
        .any(|op| {
            op["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == param && p["in"] == "query"))
        })
}

#[test]
fn root_points_at_every_group_version_with_its_hash() {
    let api = server(None);
    let root = api.root();
    let keys: Vec<&str> = root["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        vec![
            "api/v1",
            "apis/admissionregistration.k8s.io/v1",
            "apis/apiextensions.k8s.io/v1",
            "apis/apps/v1",
            "apis/coordination.k8s.io/v1",
            "apis/events.k8s.io/v1",
            "apis/machineconfiguration.openshift.io/v1",
            "apis/machineconfiguration.openshift.io/v1alpha1",
            "apis/policy/v1",
            "apis/rbac.authorization.k8s.io/v1",
        ]
    );
    for key in keys {
        let doc = api.document(key).expect("document exists");
        let hash = document_hash(doc);
        assert_eq!(hash.len(), 128);
        assert!(
            hash.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        );
        assert_eq!(api.hash(key), Some(hash.as_str()));
        // The JSON served is the document, encoded as the hash was taken.
        let served = api.document_json(key).expect("served JSON");
        assert_eq!(
            &serde_json::from_slice::<serde_json::Value>(served).unwrap(),
            doc
        );
        assert_eq!(served, serde_json::to_vec(doc).unwrap().as_slice());
        assert_eq!(
            root["paths"][key]["serverRelativeURL"],
            json!(format!("/openapi/v3/{key}?hash={hash}"))
        );
    }
    assert!(
        api.document("apis/machineconfiguration.openshift.io/v1beta1")
            .is_none(),
        "unserved"
    );
    assert!(
        api.document("/apis/apps/v1").is_some(),
        "leading slash tolerated"
    );
}

#[test]
fn apply_field_validation_check_passes_for_crds_and_builtins() {
    let api = server(None);
    let mc = api
        .document(&gv_path("machineconfiguration.openshift.io", "v1"))
        .unwrap();
    assert!(kubectl_supports(
        mc,
        "machineconfiguration.openshift.io",
        "v1",
        "MachineConfig",
        "fieldValidation"
    ));
    let core = api.document("api/v1").unwrap();
    for kind in ["ConfigMap", "Node", "Pod", "Namespace", "Secret"] {
        assert!(
            kubectl_supports(core, "", "v1", kind, "fieldValidation"),
            "{kind}"
        );
    }
    let mcn = api
        .document("apis/machineconfiguration.openshift.io/v1alpha1")
        .unwrap();
    assert!(kubectl_supports(
        mcn,
        "machineconfiguration.openshift.io",
        "v1alpha1",
        "MachineConfigNode",
        "fieldValidation"
    ));
    assert!(!kubectl_supports(
        mc,
        "machineconfiguration.openshift.io",
        "v1",
        "MachineConfigPool",
        "fieldValidation"
    ));
}

#[test]
fn machineconfig_operations() {
    let api = server(None);
    let doc = api
        .document("apis/machineconfiguration.openshift.io/v1")
        .unwrap();
    assert_eq!(doc["openapi"], "3.0.0");
    let item = &doc["paths"]["/apis/machineconfiguration.openshift.io/v1/machineconfigs/{name}"];
    let patch = &item["patch"];
    assert_eq!(
        patch["operationId"],
        "patchMachineconfigurationOpenshiftIoV1MachineConfig"
    );
    assert_eq!(patch["x-kubernetes-action"], "patch");
    let content: Vec<&str> = patch["requestBody"]["content"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        content,
        vec![
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml"
        ],
        "no strategic-merge-patch"
    );
    let param_names = |op: &Value| -> Vec<String> {
        op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        param_names(patch),
        vec!["dryRun", "fieldManager", "fieldValidation", "force"]
    );
    assert_eq!(
        param_names(&item["put"]),
        vec!["dryRun", "fieldManager", "fieldValidation"]
    );
    let collection = &doc["paths"]["/apis/machineconfiguration.openshift.io/v1/machineconfigs"];
    assert_eq!(
        param_names(&collection["post"]),
        vec!["dryRun", "fieldManager", "fieldValidation"]
    );
    assert_eq!(
        collection["post"]["x-kubernetes-group-version-kind"],
        json!({"group": "machineconfiguration.openshift.io", "version": "v1", "kind": "MachineConfig"})
    );
    assert_eq!(
        collection["delete"]["operationId"],
        "deleteMachineconfigurationOpenshiftIoV1CollectionMachineConfig"
    );
    assert!(
        doc["paths"]
            .get("/apis/machineconfiguration.openshift.io/v1/machineconfigs/{name}/status")
            .is_none(),
        "no status subresource"
    );

    let schema =
        &doc["components"]["schemas"]["io.openshift.machineconfiguration.v1.MachineConfig"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "machineconfiguration.openshift.io", "version": "v1", "kind": "MachineConfig"}])
    );
    assert_eq!(
        schema["properties"]["spec"]["properties"]["kernelType"]["enum"],
        json!(["default", "realtime"])
    );
    assert_eq!(
        schema["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
}

#[test]
fn namespaced_and_status_paths() {
    let api = server(None);
    let core = api.document("api/v1").unwrap();
    let paths = core["paths"].as_object().unwrap();
    let cm = &paths["/api/v1/namespaces/{namespace}/configmaps/{name}"];
    assert_eq!(cm["patch"]["operationId"], "patchCoreV1NamespacedConfigMap");
    let params: Vec<&str> = cm["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, vec!["name", "namespace"]);
    assert_eq!(
        paths["/api/v1/configmaps"]["get"]["operationId"],
        "listCoreV1ConfigMapForAllNamespaces"
    );
    assert_eq!(
        paths["/api/v1/nodes/{name}/status"]["patch"]["operationId"],
        "patchCoreV1NodeStatus"
    );
    assert!(paths.contains_key("/api/v1/namespaces/{namespace}/pods/{name}/status"));
    let mcn = api
        .document("apis/machineconfiguration.openshift.io/v1alpha1")
        .unwrap();
    assert!(
        mcn["paths"]
            .get(
                "/apis/machineconfiguration.openshift.io/v1alpha1/machineconfignodes/{name}/status"
            )
            .is_some()
    );
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r.clone());
            }
            m.values().for_each(|x| collect_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

#[test]
fn every_reference_resolves() {
    let api = server(None);
    for key in api.keys() {
        let doc = api.document(key).unwrap();
        let mut refs = Vec::new();
        collect_refs(doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let name = r.strip_prefix("#/components/schemas/").expect("local ref");
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "{key}: dangling {r}"
            );
        }
    }
}

#[test]
fn hash_is_stable_and_changes_with_the_schema() {
    let key = "apis/machineconfiguration.openshift.io/v1";
    let a = server(None);
    let b = server(None);
    assert_eq!(a.hash(key), b.hash(key));
    assert_eq!(a.root(), b.root());
    let c = server(Some("osImageURL"));
    assert_ne!(a.hash(key), c.hash(key));
    assert_eq!(
        a.hash("api/v1"),
        c.hash("api/v1"),
        "other documents keep their hash"
    );
}
