//! Rendering from JSON text (`render_pool_raw`) must be indistinguishable from rendering typed
//! MachineConfigs (`render_pool`): same rendered config and name, same sources, same errors.

use std::path::{Path, PathBuf};

use mco_api::{ControllerConfigSpec, MachineConfig, MachineConfigPool};
use mco_render::render::{
    RawMachineConfig, render_pool, render_pool_raw, validate_machine_config,
    validate_raw_machine_config,
};
use mco_testkit::PoolBuilder;
use pretty_assertions::assert_eq;
use serde_json::json;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/machineconfigs")
}

fn yaml_mcs(dir: &Path) -> Vec<MachineConfig> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| mco_apimachinery::yaml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

fn pool(role: &str) -> MachineConfigPool {
    PoolBuilder::new(role).config_role(role).build()
}

fn to_json(mcs: &[MachineConfig]) -> Vec<Vec<u8>> {
    mcs.iter()
        .map(|mc| serde_json::to_vec(mc).unwrap())
        .collect()
}

fn raws(docs: &[Vec<u8>]) -> Vec<RawMachineConfig<'_>> {
    docs.iter()
        .map(|d| RawMachineConfig::from_slice(d).unwrap())
        .collect()
}

#[test]
fn fixtures_render_the_same_from_text() {
    let mcs = yaml_mcs(&fixtures());
    let docs = to_json(&mcs);
    let raw = raws(&docs);
    for role in ["worker", "master"] {
        let cc = ControllerConfigSpec::default();
        let typed = render_pool(&pool(role), &mcs, &cc, "v").unwrap();
        let from_text = render_pool_raw(&pool(role), &raw, &cc, "v").unwrap();
        assert_eq!(from_text, typed, "{role}");
    }
}

#[test]
fn shuffled_input_renders_the_same_name_from_text() {
    let mut mcs = yaml_mcs(&fixtures());
    let docs = to_json(&mcs);
    let first = render_pool_raw(&pool("worker"), &raws(&docs), &Default::default(), "v")
        .unwrap()
        .machine_config
        .metadata
        .name;
    mcs.reverse();
    let docs = to_json(&mcs);
    let again = render_pool_raw(&pool("worker"), &raws(&docs), &Default::default(), "v")
        .unwrap()
        .machine_config
        .metadata
        .name;
    assert_eq!(first, again);
    assert!(first.unwrap().starts_with("rendered-worker-"));
}

#[test]
fn bad_fixtures_fail_the_same_from_text() {
    let mcs = yaml_mcs(&fixtures().join("bad"));
    assert!(mcs.len() >= 15);
    for (mc, doc) in mcs.iter().zip(to_json(&mcs)) {
        let typed = validate_machine_config(mc).unwrap_err();
        let raw = RawMachineConfig::from_slice(&doc).unwrap();
        let from_text = validate_raw_machine_config(&raw).unwrap_err();
        assert_eq!(from_text, typed, "{:?}", mc.metadata.name);
    }
}

#[test]
fn configs_the_typed_read_refuses_fail_as_in_parse() {
    // Each goes through the fallback: the errors (and texts) are `parse`'s.
    for config in [
        json!({}),
        json!(null),
        json!([{"version": "3.2.0"}]),
        json!({"ignition": {"version": "3.6.0"}}),
        json!({"ignition": {"version": "3.2"}}),
        json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "/a", "mode": "x"}]}}),
        json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"filesystem": "root", "path": "/a", "contents": {"source": "data:,x"}}]}}),
        json!("text"),
    ] {
        let mc = MachineConfig {
            metadata: serde_json::from_value(json!({"name": "99-x"})).unwrap(),
            spec: mco_api::MachineConfigSpec {
                config: Some(config.clone()),
                ..Default::default()
            },
        };
        let doc = serde_json::to_vec(&mc).unwrap();
        let raw = RawMachineConfig::from_slice(&doc).unwrap();
        assert_eq!(
            validate_raw_machine_config(&raw),
            validate_machine_config(&mc),
            "{config}"
        );
    }
}

#[test]
fn duplicate_keys_read_as_the_value_tree_reads_them() {
    // A `Value` keeps the last of duplicate keys; the typed read refuses them, and falls back.
    let doc = br#"{"metadata": {"name": "99-dup"}, "spec": {"config":
        {"ignition": {"version": "3.2.0"}, "storage": {"files": [
            {"path": "/a", "mode": 420, "mode": 384, "contents": {"source": "data:,x"}}]}}}}"#;
    let typed: MachineConfig = serde_json::from_slice(doc).unwrap();
    let raw = RawMachineConfig::from_slice(doc).unwrap();
    let from_text = validate_raw_machine_config(&raw).unwrap();
    assert_eq!(from_text, validate_machine_config(&typed).unwrap());
    assert_eq!(from_text.storage.unwrap().files.unwrap()[0].mode, Some(384));
}

#[test]
fn every_spec_field_survives_the_text_read() {
    let mc: MachineConfig = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": "50-all", "labels": {"machineconfiguration.openshift.io/role": "worker"},
            "annotations": {"a": "b"}},
        "spec": {
            "osImageURL": "quay.io/os@sha256:1",
            "baseOSExtensionsContainerImage": "quay.io/ext@sha256:2",
            "config": {"ignition": {"version": "3.4.0"}},
            "kernelArguments": ["a=1"],
            "extensions": ["usbguard"],
            "fips": true,
            "kernelType": "realtime"
        }
    }))
    .unwrap();
    let doc = serde_json::to_vec(&mc).unwrap();
    let raw = RawMachineConfig::from_slice(&doc).unwrap();
    let mut without_config = mc.clone();
    let config = without_config.spec.config.take();
    assert_eq!(raw.machine_config, without_config);
    let text: serde_json::Value = serde_json::from_str(raw.config.unwrap().get()).unwrap();
    assert_eq!(Some(text), config);
}
