//! Rendering a pool: the rendered MachineConfig, its name, its sources, and determinism.

use mco_api::{ControllerConfigSpec, MachineConfig, MachineConfigPool};
use mco_render::render::{
    RenderError, owner_reference, render_pool, rendered_name, source_reference,
};
use mco_testkit::{MachineConfigBuilder, PoolBuilder};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::{Value, json};

fn mc(name: &str, role: &str, spec: Value) -> MachineConfig {
    MachineConfigBuilder::new(name)
        .role(role)
        .spec(spec)
        .build()
}

fn pool(name: &str, selector: Value) -> MachineConfigPool {
    PoolBuilder::new(name)
        .uid("pool-uid")
        .config_selector(selector)
        .build()
}

fn role_pool(role: &str) -> MachineConfigPool {
    pool(
        role,
        json!({"matchLabels": {"machineconfiguration.openshift.io/role": role}}),
    )
}

fn cc() -> ControllerConfigSpec {
    ControllerConfigSpec {
        base_os_container_image: "quay.io/os@sha256:aaaa".into(),
        ..Default::default()
    }
}

fn file_mc(name: &str, role: &str, path: &str, text: &str) -> MachineConfig {
    mc(
        name,
        role,
        json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": [
            {"path": path, "mode": 420, "contents": {"source": format!("data:,{text}")}}
        ]}}}),
    )
}

fn is_rendered_name(name: &str, pool: &str) -> bool {
    let Some(hash) = name.strip_prefix(&format!("rendered-{pool}-")) else {
        return false;
    };
    hash.len() == 32
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn renders_the_selected_mcs() {
    let mcs = vec![
        file_mc("99-worker-b", "worker", "/etc/b", "b"),
        file_mc("00-worker-a", "worker", "/etc/a", "a"),
        file_mc("00-master", "master", "/etc/m", "m"),
        mc(
            "05-worker-kargs",
            "worker",
            json!({"kernelArguments": ["nosmt"]}),
        ),
    ];
    let r = render_pool(&role_pool("worker"), &mcs, &cc(), "v1.2.3").unwrap();
    let rendered = &r.machine_config;
    let name = rendered.metadata.name.as_deref().unwrap();
    assert!(is_rendered_name(name, "worker"), "{name}");
    let annotations = rendered.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        annotations["machineconfiguration.openshift.io/generated-by-controller-version"],
        "v1.2.3"
    );
    assert!(!annotations.contains_key("machineconfiguration.openshift.io/os-image-url-overridden"));
    assert!(rendered.metadata.labels.is_none());
    assert_eq!(rendered.spec.os_image_url, "quay.io/os@sha256:aaaa");
    assert_eq!(rendered.spec.kernel_type, "default");
    assert_eq!(
        rendered.spec.kernel_arguments,
        Some(vec!["nosmt".to_string()])
    );
    assert_eq!(rendered.spec.extensions, Some(vec![]));
    let paths: Vec<&str> = rendered.spec.config.as_ref().unwrap()["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/etc/a", "/etc/b"]);
    assert_eq!(
        rendered.spec.config.as_ref().unwrap()["ignition"]["version"],
        "3.5.0"
    );

    let sources: Vec<Value> = r
        .source
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
    assert_eq!(
        sources,
        [
            json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "name": "00-worker-a"}),
            json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "name": "05-worker-kargs"}),
            json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "name": "99-worker-b"}),
        ]
    );
    assert_eq!(r.source[0], source_reference(&mcs[1]));

    // The name is a function of the spec alone.
    assert_eq!(rendered_name("worker", &rendered.spec).unwrap(), name);
    let again = render_pool(&role_pool("worker"), &mcs, &cc(), "other-version").unwrap();
    assert_eq!(again.machine_config.metadata.name.as_deref(), Some(name));
    assert_eq!(again.machine_config.spec, rendered.spec);
}

#[test]
fn content_changes_change_the_name() {
    let base = vec![file_mc("00-worker", "worker", "/etc/a", "a")];
    let name = |mcs: &[MachineConfig]| {
        render_pool(&role_pool("worker"), mcs, &cc(), "v")
            .unwrap()
            .machine_config
            .metadata
            .name
            .unwrap()
    };
    let n0 = name(&base);
    assert_ne!(n0, name(&[file_mc("00-worker", "worker", "/etc/a", "b")]));
    let mut with_karg = base.clone();
    with_karg.push(mc("01-worker", "worker", json!({"kernelArguments": ["x"]})));
    assert_ne!(n0, name(&with_karg));
    // Renaming an MC without changing content keeps the name.
    assert_eq!(n0, name(&[file_mc("10-renamed", "worker", "/etc/a", "a")]));
    // Same content for another pool: same hash, different prefix.
    let master = render_pool(
        &role_pool("master"),
        &[file_mc("00-master", "master", "/etc/a", "a")],
        &cc(),
        "v",
    )
    .unwrap();
    let master_name = master.machine_config.metadata.name.unwrap();
    assert_eq!(
        master_name.trim_start_matches("rendered-master-"),
        n0.trim_start_matches("rendered-worker-")
    );
}

#[test]
fn custom_pools_put_their_own_mcs_after_worker_mcs() {
    let mcs = vec![
        file_mc("00-infra", "infra", "/etc/role", "infra"),
        file_mc("99-worker", "worker", "/etc/role", "worker"),
    ];
    let infra = pool(
        "infra",
        json!({"matchExpressions": [{"key": "machineconfiguration.openshift.io/role", "operator": "In", "values": ["worker", "infra"]}]}),
    );
    let r = render_pool(&infra, &mcs, &cc(), "v").unwrap();
    let cfg = r.machine_config.spec.config.unwrap();
    assert_eq!(
        cfg["storage"]["files"][0]["contents"]["source"],
        "data:,infra"
    );
    let order: Vec<&str> = r
        .source
        .iter()
        .map(|s| s.name.as_deref().unwrap())
        .collect();
    assert_eq!(order, ["99-worker", "00-infra"]);
}

#[test]
fn os_image_override_is_annotated() {
    let mcs = vec![mc(
        "99-worker-os",
        "worker",
        json!({"osImageURL": "quay.io/custom@sha256:bbbb"}),
    )];
    let r = render_pool(&role_pool("worker"), &mcs, &cc(), "v").unwrap();
    assert_eq!(
        r.machine_config.spec.os_image_url,
        "quay.io/custom@sha256:bbbb"
    );
    assert_eq!(
        r.machine_config.metadata.annotations.unwrap()["machineconfiguration.openshift.io/os-image-url-overridden"],
        "true"
    );
}

#[test]
fn rendered_mcs_are_never_inputs() {
    let mcs = vec![
        file_mc("00-worker", "worker", "/etc/a", "a"),
        file_mc(
            "rendered-worker-00000000000000000000000000000000",
            "worker",
            "/etc/stale",
            "x",
        ),
    ];
    let r = render_pool(&role_pool("worker"), &mcs, &cc(), "v").unwrap();
    assert_eq!(r.source.len(), 1);
    let only = render_pool(&role_pool("worker"), &mcs[1..], &cc(), "v").unwrap_err();
    assert!(matches!(only, RenderError::NoneSelected { .. }), "{only:?}");
}

#[test]
fn pool_level_errors() {
    let mcs = vec![file_mc("00-worker", "worker", "/etc/a", "a")];
    assert_eq!(
        render_pool(&role_pool("infra"), &mcs, &cc(), "v")
            .unwrap_err()
            .to_string(),
        "MachineConfigPool \"infra\": no MachineConfigs found matching selector machineconfiguration.openshift.io/role=infra"
    );
    assert_eq!(
        render_pool(&pool("all", json!({})), &mcs, &cc(), "v")
            .unwrap_err()
            .to_string(),
        "MachineConfigPool \"all\": machineConfigSelector is empty: it would select all MachineConfigs"
    );
    let no_selector: MachineConfigPool = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": "none"},
        "spec": {}
    }))
    .unwrap();
    assert_eq!(
        render_pool(&no_selector, &mcs, &cc(), "v")
            .unwrap_err()
            .to_string(),
        "MachineConfigPool \"none\": no MachineConfigs found matching selector <none>"
    );
    // kernel-devel from one MC and realtime from another.
    let mixed = vec![
        mc("10-worker-rt", "worker", json!({"kernelType": "realtime"})),
        mc(
            "20-worker-devel",
            "worker",
            json!({"extensions": ["kernel-devel"]}),
        ),
    ];
    assert_eq!(
        render_pool(&role_pool("worker"), &mixed, &cc(), "v")
            .unwrap_err()
            .to_string(),
        "MachineConfig \"20-worker-devel\": spec.extensions: installing kernel-devel extension is not supported with kernelType: realtime"
    );
    // The first invalid MC in merge order is reported.
    let bad = vec![
        file_mc("00-worker", "worker", "/etc/a", "a"),
        file_mc("50-worker", "worker", "relative", "a"),
    ];
    let e = render_pool(&role_pool("worker"), &bad, &cc(), "v").unwrap_err();
    assert_eq!(e.machine_config(), Some("50-worker"));
}

#[test]
fn owner_reference_points_at_the_pool() {
    let o = owner_reference(&role_pool("worker"));
    assert_eq!(
        serde_json::to_value(o).unwrap(),
        json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigPool",
            "name": "worker",
            "uid": "pool-uid",
            "controller": true,
            "blockOwnerDeletion": true
        })
    );
}

/// MCs with distinct names whose contents overlap (same paths, units, users), so order matters
/// to the merge and only the name sort can make the result stable.
fn overlapping_mcs() -> Vec<MachineConfig> {
    (0..12)
        .map(|i| {
            let role = if i % 3 == 0 { "infra" } else { "worker" };
            mc(
                &format!("{:02}-mc-{i}", (i * 7) % 12),
                role,
                json!({
                    "config": {"ignition": {"version": if i % 2 == 0 { "3.2.0" } else { "3.4.0" }},
                        "storage": {"files": [
                            {"path": format!("/etc/shared-{}", i % 4), "mode": 400 + i, "contents": {"source": format!("data:,v{i}")}},
                            {"path": format!("/etc/own-{i}"), "contents": {"source": "data:,x"}}
                        ]},
                        "systemd": {"units": [{"name": "shared.service", "contents": format!("c{i}"),
                            "dropins": [{"name": format!("{}.conf", i % 3), "contents": format!("d{i}")}]}]},
                        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": [format!("key-{}", i % 5)]}]}
                    },
                    "kernelArguments": [format!("arg{i}")],
                    "kernelType": if i == 5 { "realtime" } else { "" }
                }),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn input_order_never_changes_the_render(shuffled in Just(overlapping_mcs()).prop_shuffle()) {
        let infra = pool("infra", json!({"matchExpressions": [
            {"key": "machineconfiguration.openshift.io/role", "operator": "In", "values": ["worker", "infra"]}
        ]}));
        let reference = render_pool(&infra, &overlapping_mcs(), &cc(), "v").unwrap();
        let again = render_pool(&infra, &shuffled, &cc(), "v").unwrap();
        prop_assert_eq!(&again.machine_config, &reference.machine_config);
        prop_assert_eq!(&again.source, &reference.source);
    }
}

#[test]
fn consuming_canonical_form_equals_the_generic_one() {
    use mco_render::render::{canonical_config, into_canonical_config, is_canonical};
    let res = json!({"source": "data:,x", "compression": "gzip", "httpHeaders": [{"name": "a", "value": "b"}, {"name": "c"}], "verification": {"hash": "sha512-00"}});
    let raw = json!({
        "ignition": {"version": "3.5.0"},
        "storage": {
            "directories": [{"path": "/d", "mode": 493}],
            "files": [
                {"path": "/f", "mode": 420, "overwrite": true, "contents": res.clone(), "append": [res.clone(), {}],
                 "user": {"id": 0, "name": "root"}, "group": {"name": "wheel"}},
                {"path": "/g", "contents": {"verification": {}}},
                {"path": "/h"}
            ],
            "links": [{"path": "/l", "target": "/f"}]
        },
        "systemd": {"units": [{"name": "u.service", "enabled": true}]}
    });
    let cfg = mco_render::ignition::parse(&raw).unwrap();
    let generic = canonical_config(&cfg).unwrap();
    let moved = into_canonical_config(cfg).unwrap();
    assert!(is_canonical(&moved));
    assert_eq!(moved, generic);
    assert_eq!(
        serde_json::to_string(&moved).unwrap(),
        serde_json::to_string(&generic).unwrap(),
        "same key order too"
    );
}

fn gzip_url(data: &[u8]) -> String {
    use base64::Engine as _;
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    format!(
        "data:;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap())
    )
}

/// A small MachineConfig whose gzip file inflates past the file limit is refused by render,
/// naming the MachineConfig and the path (the pool then reports `RenderDegraded` with this
/// text, and no rendered config exists to roll out).
#[test]
fn a_decompression_bomb_is_refused_naming_the_mc_and_path() {
    use mco_render::ignition::{MAX_CONFIG_BYTES, MAX_FILE_BYTES};
    let bomb = gzip_url(&vec![0u8; MAX_FILE_BYTES as usize + 1]);
    let mcs = vec![
        file_mc("00-worker-a", "worker", "/etc/a", "a"),
        mc(
            "50-worker-bomb",
            "worker",
            json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": [
                {"path": "/etc/bomb", "mode": 420, "contents": {"source": bomb, "compression": "gzip"}}
            ]}}}),
        ),
    ];
    let e = render_pool(&role_pool("worker"), &mcs, &cc(), "v").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "MachineConfig \"50-worker-bomb\": spec.config.storage.files[0].contents.source: the decoded contents of /etc/bomb exceed the limit of {MAX_FILE_BYTES} bytes"
        )
    );

    // Three files under the file limit that together pass the config limit.
    let each = (MAX_CONFIG_BYTES / 3 + 1) as usize;
    assert!(each as u64 <= MAX_FILE_BYTES);
    let part = gzip_url(&vec![0u8; each]);
    let files: Vec<Value> = (0..3)
        .map(|i| json!({"path": format!("/etc/part{i}"), "mode": 420, "contents": {"source": part, "compression": "gzip"}}))
        .collect();
    let mcs = vec![mc(
        "60-worker-parts",
        "worker",
        json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": files}}}),
    )];
    let e = render_pool(&role_pool("worker"), &mcs, &cc(), "v").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "MachineConfig \"60-worker-parts\": spec.config.storage.files[2].contents.source: the decoded files of the config exceed the limit of {MAX_CONFIG_BYTES} bytes at /etc/part2"
        )
    );
}

/// MachineConfigs each under the config limit whose merge passes it: the render names the
/// MachineConfig and path of the file where the rendered total passes the limit.
#[test]
fn a_rendered_config_past_the_total_limit_is_refused() {
    use mco_render::ignition::MAX_CONFIG_BYTES;
    let each = (MAX_CONFIG_BYTES / 3 + 1) as usize;
    let part = gzip_url(&vec![0u8; each]);
    let mcs: Vec<MachineConfig> = (0..3)
        .map(|i| {
            mc(
                &format!("7{i}-worker-part"),
                "worker",
                json!({"config": {"ignition": {"version": "3.2.0"}, "storage": {"files": [
                    {"path": format!("/etc/part{i}"), "mode": 420, "contents": {"source": part, "compression": "gzip"}}
                ]}}}),
            )
        })
        .collect();
    // Two of them render.
    assert!(render_pool(&role_pool("worker"), &mcs[..2], &cc(), "v").is_ok());
    let e = render_pool(&role_pool("worker"), &mcs, &cc(), "v").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "MachineConfig \"72-worker-part\": spec.config.storage.files: the decoded files of the rendered config exceed the limit of {MAX_CONFIG_BYTES} bytes at /etc/part2"
        )
    );
}
