//! The machinery applied to mco's own CRD manifests (`manifests/crds/`).

use std::path::PathBuf;

use jiff::Timestamp;
use mco_apimachinery::openapi::{OpenApiResource, OpenApiV3};
use mco_apimachinery::schema::Structural;
use mco_apimachinery::table::{IncludeObject, PrinterColumn, TableConvertor};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn crd(plural: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../manifests/crds")
        .join(format!("{plural}.machineconfiguration.openshift.io.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    mco_apimachinery::yaml::from_str(&text).expect("CRD manifest is YAML")
}

fn all_crds() -> Vec<Value> {
    [
        "machineconfigs",
        "machineconfigpools",
        "machineconfignodes",
        "controllerconfigs",
    ]
    .into_iter()
    .map(crd)
    .collect()
}

#[test]
fn every_served_version_has_a_usable_schema_and_columns() {
    for c in all_crds() {
        let name = c["metadata"]["name"].as_str().unwrap().to_string();
        for v in c["spec"]["versions"].as_array().unwrap() {
            let version = v["name"].as_str().unwrap();
            let s = Structural::from_crd(&c, version)
                .unwrap_or_else(|e| panic!("{name}/{version}: {e}"))
                .unwrap_or_else(|| panic!("{name}/{version} has no schema"));
            assert_eq!(s.type_.as_deref(), Some("object"), "{name}/{version}");
            let cols = PrinterColumn::from_crd(&c, version);
            TableConvertor::for_crd(&cols).unwrap_or_else(|e| panic!("{name}/{version}: {e}"));
        }
    }
}

#[test]
fn machineconfig_admission_pipeline() {
    let schema = Structural::from_crd(&crd("machineconfigs"), "v1")
        .unwrap()
        .unwrap();
    let mut mc = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": "99-worker-custom", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
        "spec": {
            "config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/etc/x", "mode": 420}]}},
            "kernelArguments": ["nosmt"],
            "notAField": true
        }
    });
    let pruned = schema.prune(&mut mc);
    assert_eq!(pruned, vec!["spec.notAField"]);
    schema.apply_defaults(&mut mc);
    assert_eq!(mc["spec"]["osImageURL"], "", "schema default applied");
    assert_eq!(
        mc["spec"]["config"]["storage"]["files"][0]["mode"], 420,
        "Ignition kept verbatim"
    );
    assert!(schema.validate(&mc).is_empty());

    mc["spec"]["kernelType"] = json!("rt");
    let errs: Vec<String> = schema
        .validate(&mc)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec![
            r#"spec.kernelType: Unsupported value: "rt": supported values: "", "default", "realtime", "64k-pages""#
        ]
    );

    let missing_spec = json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "metadata": {"name": "x"}});
    let errs: Vec<String> = schema
        .validate(&missing_spec)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(errs, vec!["spec: Required value"]);
}

#[test]
fn pool_max_unavailable_is_int_or_string() {
    let schema = Structural::from_crd(&crd("machineconfigpools"), "v1")
        .unwrap()
        .unwrap();
    for ok in [json!(1), json!("10%"), Value::Null] {
        let pool = json!({"metadata": {"name": "worker"}, "spec": {"maxUnavailable": ok}});
        assert!(schema.validate(&pool).is_empty(), "{ok}");
    }
    let bad = json!({"metadata": {"name": "worker"}, "spec": {"maxUnavailable": true}});
    let errs: Vec<String> = schema
        .validate(&bad)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec![
            r#"spec.maxUnavailable: Invalid value: "boolean": spec.maxUnavailable in body must be of type integer,string: "boolean""#
        ]
    );
}

#[test]
fn pool_table_matches_kubectl_get_mcp() {
    let c = crd("machineconfigpools");
    let conv = TableConvertor::for_crd(&PrinterColumn::from_crd(&c, "v1")).unwrap();
    let names: Vec<&str> = conv
        .column_definitions()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "Name",
            "Config",
            "Updated",
            "Updating",
            "Degraded",
            "MachineCount",
            "ReadyMachineCount",
            "UpdatedMachineCount",
            "DegradedMachineCount",
            "Age"
        ]
    );
    let pool = json!({
        "metadata": {"name": "worker", "creationTimestamp": "2026-11-30T08:00:00Z", "resourceVersion": "42"},
        "status": {
            "configuration": {"name": "rendered-worker-abc"},
            "conditions": [
                {"type": "Updated", "status": "True"},
                {"type": "Updating", "status": "False"},
                {"type": "Degraded", "status": "False"}
            ],
            "machineCount": 2,
            "readyMachineCount": 2,
            "updatedMachineCount": 2,
            "degradedMachineCount": 0
        }
    });
    let now: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
    let table = conv.object_table(&pool, now, IncludeObject::Metadata);
    assert_eq!(
        table["rows"][0]["cells"],
        json!([
            "worker",
            "rendered-worker-abc",
            "True",
            "False",
            "False",
            2,
            2,
            2,
            0,
            "120m"
        ])
    );
    assert_eq!(table["metadata"]["resourceVersion"], "42");
}

#[test]
fn openapi_documents_for_mco_crds() {
    let mut resources = Vec::new();
    for c in all_crds() {
        resources.extend(OpenApiResource::from_crd(&c));
    }
    let api = OpenApiV3::build(&resources);
    let doc = api
        .document("apis/machineconfiguration.openshift.io/v1")
        .expect("v1 document");
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for kind in ["MachineConfig", "MachineConfigPool", "ControllerConfig"] {
        assert!(
            schemas.contains_key(&format!("io.openshift.machineconfiguration.v1.{kind}")),
            "{kind}"
        );
    }
    assert!(
        doc["paths"]
            .get("/apis/machineconfiguration.openshift.io/v1/machineconfigpools/{name}/status")
            .is_some()
    );
}
