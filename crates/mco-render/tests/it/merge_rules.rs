//! Selection, ordering and the merge rules (upstream MergeMachineConfigs + Ignition v3 merge).

use mco_api::{ControllerConfigSpec, MachineConfig};
use mco_render::ignition::{Ignition, parse};
use mco_render::merge::{self, SelectError, merge_fields, merge_ignition, order, select};
use mco_testkit::MachineConfigBuilder;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn mc_labels(name: &str, labels: Value, spec: Value) -> MachineConfig {
    MachineConfigBuilder::new(name)
        .merge(json!({"metadata": {"labels": labels}}))
        .spec(spec)
        .build()
}

fn mc(name: &str, role: &str, spec: Value) -> MachineConfig {
    MachineConfigBuilder::new(name)
        .role(role)
        .spec(spec)
        .build()
}

fn selector(v: Value) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    serde_json::from_value(v).unwrap()
}

fn names(mcs: &[&MachineConfig]) -> Vec<String> {
    mcs.iter()
        .map(|m| m.metadata.name.clone().unwrap())
        .collect()
}

fn ign(v: Value) -> Ignition {
    let mut v = v;
    v["ignition"] = json!({"version": "3.4.0"});
    parse(&v).unwrap()
}

fn config_json(cfg: &Ignition) -> Value {
    mco_render::render::canonical_config(cfg).unwrap()
}

#[test]
fn selection_has_full_label_selector_semantics() {
    let all = vec![
        mc_labels(
            "a",
            json!({"machineconfiguration.openshift.io/role": "worker", "tier": "gold"}),
            json!({}),
        ),
        mc_labels(
            "b",
            json!({"machineconfiguration.openshift.io/role": "infra"}),
            json!({}),
        ),
        mc_labels(
            "c",
            json!({"machineconfiguration.openshift.io/role": "master", "tier": "silver"}),
            json!({}),
        ),
        mc_labels("d", json!({}), json!({})),
        mc(
            "rendered-worker-0123456789abcdef0123456789abcdef",
            "worker",
            json!({}),
        ),
    ];
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}}),
            vec!["a"],
        ),
        (
            json!({"matchExpressions": [{"key": "machineconfiguration.openshift.io/role", "operator": "In", "values": ["worker", "infra"]}]}),
            vec!["a", "b"],
        ),
        (
            json!({"matchExpressions": [{"key": "machineconfiguration.openshift.io/role", "operator": "NotIn", "values": ["worker"]}]}),
            vec!["b", "c", "d"],
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
            vec!["a", "c"],
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
            vec!["b", "d"],
        ),
        (
            json!({"matchLabels": {"tier": "gold"}, "matchExpressions": [{"key": "machineconfiguration.openshift.io/role", "operator": "In", "values": ["worker"]}]}),
            vec!["a"],
        ),
    ];
    for (sel, want) in cases {
        let got = select(Some(&selector(sel.clone())), &all).unwrap();
        assert_eq!(names(&got), want, "{sel}");
    }
    assert!(
        select(None, &all).unwrap().is_empty(),
        "nil selects nothing"
    );
    assert_eq!(
        select(Some(&selector(json!({}))), &all).unwrap_err(),
        SelectError::SelectingAll
    );
    assert_eq!(
        select(Some(&selector(json!({"matchLabels": {}}))), &all).unwrap_err(),
        SelectError::SelectingAll
    );
    let bad = selector(json!({"matchExpressions": [{"key": "x", "operator": "Near"}]}));
    assert!(matches!(
        select(Some(&bad), &all).unwrap_err(),
        SelectError::Invalid(_)
    ));
}

#[test]
fn worker_role_mcs_merge_first_then_by_name() {
    let all = [
        mc("99-infra-b", "infra", json!({})),
        mc("00-worker", "worker", json!({})),
        mc("01-infra-a", "infra", json!({})),
        mc("99-worker-z", "worker", json!({})),
        mc_labels("50-unlabelled", json!({}), json!({})),
    ];
    let mut refs: Vec<&MachineConfig> = all.iter().collect();
    order(&mut refs);
    assert_eq!(
        names(&refs),
        [
            "00-worker",
            "99-worker-z",
            "01-infra-a",
            "50-unlabelled",
            "99-infra-b"
        ]
    );
}

#[test]
fn files_links_and_directories_merge_by_path() {
    let merged = merge_ignition([
        ign(json!({"storage": {
            "files": [
                {"path": "/etc/a", "mode": 420, "user": {"name": "root"}, "contents": {"source": "data:,one"}},
                {"path": "/etc/b", "contents": {"source": "data:,b"}},
                {"path": "/etc/gz", "contents": {"compression": "gzip", "source": "data:;base64,H4sIAAAAAAACA8tIzcnJV0grys9VSFRIr8osKEhNUUjLzEnlAgBGv4XmGgAAAA=="}}
            ],
            "directories": [{"path": "/etc/d", "mode": 493}]
        }})),
        ign(json!({"storage": {
            "files": [
                {"path": "/etc/a", "contents": {"source": "data:,two"}, "overwrite": false},
                {"path": "/etc/gz", "mode": 384}
            ],
            "links": [{"path": "/etc/b", "target": "/etc/a"}, {"path": "/etc/d", "target": "/x"}]
        }})),
        ign(
            json!({"storage": {"files": [{"path": "/etc/gz", "contents": {"source": "data:,plain"}}]}}),
        ),
    ]);
    assert_eq!(
        config_json(&merged)["storage"],
        json!({
            "files": [
                // Later contents win; mode and user set only earlier are kept.
                {"path": "/etc/a", "mode": 420, "overwrite": false, "user": {"name": "root"}, "contents": {"source": "data:,two"}},
                // A later uncompressed source does not inherit the earlier gzip.
                {"path": "/etc/gz", "mode": 384, "overwrite": true, "contents": {"source": "data:,plain"}}
            ],
            // A link at a file's or a directory's path replaces it.
            "links": [{"path": "/etc/b", "target": "/etc/a"}, {"path": "/etc/d", "target": "/x"}]
        })
    );
}

#[test]
fn a_later_file_without_contents_keeps_earlier_contents_and_compression() {
    let src = "data:;base64,H4sIAAAAAAACA8tIzcnJV0grys9VSFRIr8osKEhNUUjLzEnlAgBGv4XmGgAAAA==";
    let merged = merge_ignition([
        ign(
            json!({"storage": {"files": [{"path": "/gz", "contents": {"compression": "gzip", "source": src}}]}}),
        ),
        ign(json!({"storage": {"files": [{"path": "/gz", "mode": 256}]}})),
    ]);
    assert_eq!(
        config_json(&merged)["storage"]["files"][0],
        json!({"path": "/gz", "mode": 256, "overwrite": true, "contents": {"compression": "gzip", "source": src}})
    );
}

#[test]
fn units_and_dropins_merge_by_name() {
    let merged = merge_ignition([
        ign(json!({"systemd": {"units": [
            {"name": "b.service", "enabled": true, "contents": "B1", "dropins": [{"name": "10.conf", "contents": "x"}, {"name": "20.conf", "contents": "y"}]},
            {"name": "a.service", "mask": true}
        ]}})),
        ign(json!({"systemd": {"units": [
            {"name": "b.service", "contents": "B2", "dropins": [{"name": "20.conf", "contents": "Y"}, {"name": "05.conf", "contents": "z"}]}
        ]}})),
    ]);
    assert_eq!(
        config_json(&merged)["systemd"],
        json!({"units": [
            {"name": "a.service", "mask": true},
            {"name": "b.service", "enabled": true, "contents": "B2", "dropins": [
                {"name": "05.conf", "contents": "z"},
                {"name": "10.conf", "contents": "x"},
                {"name": "20.conf", "contents": "Y"}
            ]}
        ]})
    );
}

#[test]
fn users_merge_by_name_and_ssh_keys_union() {
    let merged = merge_ignition([
        ign(
            json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2"], "passwordHash": "h1"}]}}),
        ),
        ign(json!({"passwd": {"users": [
            {"name": "core", "sshAuthorizedKeys": ["k3", "k1"]},
            {"name": "alice", "sshAuthorizedKeys": ["ka"]}
        ]}})),
    ]);
    assert_eq!(
        config_json(&merged)["passwd"],
        json!({"users": [
            {"name": "alice", "sshAuthorizedKeys": ["ka"]},
            {"name": "core", "passwordHash": "h1", "sshAuthorizedKeys": ["k1", "k2", "k3"]}
        ]})
    );
}

#[test]
fn ignition_kernel_arguments_union() {
    let merged = merge_ignition([
        ign(json!({"kernelArguments": {"shouldExist": ["a", "b"]}})),
        ign(json!({"kernelArguments": {"shouldExist": ["b", "c"], "shouldNotExist": ["d"]}})),
    ]);
    assert_eq!(
        config_json(&merged)["kernelArguments"],
        json!({"shouldExist": ["a", "b", "c"], "shouldNotExist": ["d"]})
    );
}

#[test]
fn empty_merge_is_the_empty_config() {
    let merged = merge_ignition(Vec::<Ignition>::new());
    assert_eq!(
        config_json(&merged),
        json!({"ignition": {"version": "3.5.0"}})
    );
}

fn cc(image: &str) -> ControllerConfigSpec {
    ControllerConfigSpec {
        base_os_container_image: image.into(),
        base_os_extensions_container_image: "quay.io/ext:default".into(),
        ..Default::default()
    }
}

#[test]
fn non_ignition_fields() {
    let all = [
        mc(
            "00-worker",
            "worker",
            json!({"kernelArguments": ["a", "b"], "extensions": ["usbguard"]}),
        ),
        mc(
            "10-worker",
            "worker",
            json!({"kernelArguments": ["b"], "fips": true, "kernelType": "realtime"}),
        ),
        mc(
            "20-worker",
            "worker",
            json!({"kernelType": "64k-pages", "extensions": ["sysstat"]}),
        ),
        mc("30-worker", "worker", json!({"kernelType": "default"})),
        mc("40-worker", "worker", json!({})),
    ];
    let refs: Vec<&MachineConfig> = all.iter().collect();
    let f = merge_fields(&refs, &cc("quay.io/os:default"));
    assert_eq!(f.kernel_arguments, ["a", "b", "b"], "duplicates kept");
    assert_eq!(f.extensions, ["usbguard", "sysstat"]);
    assert!(f.fips);
    assert_eq!(f.kernel_type, "64k-pages", "last non-default wins");
    assert_eq!(f.os_image_url, "quay.io/os:default");
    assert_eq!(f.base_os_extensions_container_image, "quay.io/ext:default");
    assert!(!f.os_image_url_overridden);

    let plain = [mc("00-worker", "worker", json!({}))];
    let refs: Vec<&MachineConfig> = plain.iter().collect();
    let f = merge_fields(&refs, &cc("quay.io/os:default"));
    assert_eq!(f.kernel_type, merge::KERNEL_TYPE_DEFAULT);
    assert!(!f.fips);
    assert!(f.kernel_arguments.is_empty());
}

#[test]
fn os_image_url_override_comes_only_from_user_mcs() {
    let mut generated = mc(
        "00-worker",
        "worker",
        json!({"osImageURL": "quay.io/os:from-template"}),
    );
    generated.metadata.annotations = Some(
        [(
            "machineconfiguration.openshift.io/generated-by-controller-version".to_string(),
            "abc".to_string(),
        )]
        .into(),
    );
    let refs_generated = [&generated];
    let f = merge_fields(&refs_generated, &cc("quay.io/os:default"));
    assert_eq!(f.os_image_url, "quay.io/os:default");
    assert!(!f.os_image_url_overridden);

    let user1 = mc(
        "50-worker-os",
        "worker",
        json!({"osImageURL": "quay.io/os:custom1"}),
    );
    let mut user2 = mc(
        "60-worker-os",
        "worker",
        json!({"osImageURL": "quay.io/os:custom2"}),
    );
    user2.spec.base_os_extensions_container_image = "quay.io/ext:custom".into();
    let f = merge_fields(&[&generated, &user1, &user2], &cc("quay.io/os:default"));
    assert_eq!(f.os_image_url, "quay.io/os:custom2", "last user MC wins");
    assert_eq!(f.base_os_extensions_container_image, "quay.io/ext:custom");
    assert!(f.os_image_url_overridden);

    // The default falls back to the old-format osImageURL.
    let old = ControllerConfigSpec {
        os_image_url: "quay.io/os:old".into(),
        ..Default::default()
    };
    assert_eq!(
        merge_fields(&[&generated], &old).os_image_url,
        "quay.io/os:old"
    );
}
