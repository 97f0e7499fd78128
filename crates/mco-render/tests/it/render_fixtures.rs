//! The repository's fixture MachineConfigs (`tests/fixtures/machineconfigs/`): the good ones render
//! together, and each bad one fails with its rule's message.

use std::path::PathBuf;

use mco_api::{ControllerConfigSpec, MachineConfig, MachineConfigPool};
use mco_render::render::{render_pool, validate_machine_config};
use mco_testkit::PoolBuilder;
use pretty_assertions::assert_eq;
use serde_json::json;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/machineconfigs")
}

fn load(path: &std::path::Path) -> MachineConfig {
    let text = std::fs::read_to_string(path).unwrap();
    mco_apimachinery::yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn worker_pool() -> MachineConfigPool {
    PoolBuilder::new("worker").config_role("worker").build()
}

#[test]
fn good_fixtures_render_together() {
    let mcs: Vec<MachineConfig> = yaml_files(&dir()).iter().map(|p| load(p)).collect();
    let versions: Vec<&str> = mcs.iter().filter_map(|m| m.ignition_version()).collect();
    for v in ["2.2.0", "3.2.0", "3.4.0"] {
        assert!(versions.contains(&v), "no {v} fixture");
    }
    let r = render_pool(&worker_pool(), &mcs, &ControllerConfigSpec::default(), "v").unwrap();
    let sources: Vec<&str> = r
        .source
        .iter()
        .map(|s| s.name.as_deref().unwrap())
        .collect();
    assert_eq!(
        sources,
        ["40-worker-legacy", "50-worker-chrony", "60-worker-tuning"]
    );
    let spec = &r.machine_config.spec;
    let cfg = spec.config.as_ref().unwrap();
    let paths: Vec<&str> = cfg["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/etc/chrony.conf",
            "/etc/legacy.conf",
            "/etc/motd.d/gzipped",
            "/etc/sysctl.d/99-tuning.conf"
        ]
    );
    assert_eq!(
        cfg["storage"]["files"][1]["contents"]["source"],
        "data:,second%0A"
    );
    assert_eq!(
        cfg["storage"]["files"][2]["contents"]["compression"],
        "gzip"
    );
    let units: Vec<&str> = cfg["systemd"]["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        units,
        [
            "chronyd.service",
            "kubelet.service",
            "legacy.service",
            "tuning-report.service"
        ]
    );
    assert_eq!(
        cfg["passwd"]["users"][0]["sshAuthorizedKeys"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        spec.kernel_arguments.as_deref().unwrap(),
        ["nosmt", "mitigations=auto"]
    );
}

#[test]
fn bad_fixtures_fail_with_their_rule() {
    let expected: &[(&str, &str)] = &[
        (
            "99-bad-append",
            "spec.config.storage.files[0].append: append is not supported: \"/etc/hosts\"",
        ),
        (
            "99-bad-compression",
            "spec.config.storage.files[0].contents.compression: unsupported compression type \"xz\"",
        ),
        (
            "99-bad-dropin-name",
            "spec.config.systemd.units[0].dropins[0].name: invalid dropin name \"10-override\": must end with \".conf\" and contain no '/'",
        ),
        (
            "99-bad-extension",
            "spec.extensions: invalid extensions found: [wasm vim]",
        ),
        (
            "99-bad-force-file",
            "spec.config.storage.files[0].path: \"/run/machine-config-daemon-force\" is reserved for forcing a re-apply and may not be written by a MachineConfig",
        ),
        (
            "99-bad-gzip",
            "spec.config.storage.files[0].contents.source: failed decompressing: invalid gzip header",
        ),
        (
            "99-bad-kernel-devel-realtime",
            "spec.extensions: installing kernel-devel extension is not supported with kernelType: realtime",
        ),
        (
            "99-bad-kernel-type",
            "spec.kernelType: kernelType=lowlatency is invalid",
        ),
        (
            "99-bad-mode",
            "spec.config.storage.files[0].mode: invalid mode 04755 for /usr/local/bin/setuid-tool, cannot exceed 0777",
        ),
        (
            "99-bad-path-dotdot",
            "spec.config.storage.directories[0].path: must be absolute and normalised: \"/etc/../var/x\"",
        ),
        (
            "99-bad-path-relative",
            "spec.config.storage.files[2].path: must be absolute and normalised: \"etc/../x\"",
        ),
        (
            "99-bad-path-trailing-slash",
            "spec.config.storage.links[0].path: must be absolute and normalised: \"/etc/localtime/\"",
        ),
        (
            "99-bad-source-base64",
            "spec.config.storage.files[0].contents.source: could not decode file content string: invalid base64 data: Invalid symbol 42, offset 3.",
        ),
        (
            "99-bad-source-remote",
            "spec.config.storage.files[0].contents.source: could not decode file content string: only data: URLs are supported, got \"https://example.com/remote.conf\"",
        ),
        (
            "99-bad-unit-name",
            "spec.config.systemd.units[0].name: invalid unit name \"my-daemon\": missing unit type suffix",
        ),
        (
            "99-bad-v22-filesystem",
            "spec.config: translating Ignition config spec v2.2 to v3 failed: file \"/var/data/x\" is on filesystem \"data\"; only \"root\" can be translated",
        ),
        (
            "99-bad-v22-user",
            "spec.config: translating Ignition config spec v2.2 to v3 failed: unexpected user with name: admin. Only core user is supported",
        ),
        (
            "99-bad-version-invalid",
            "spec.config.ignition.version: parsing Ignition config failed: invalid version. Supported spec versions: 2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5",
        ),
        (
            "99-bad-version-unknown",
            "spec.config.ignition.version: parsing Ignition config failed: unknown version. Supported spec versions: 2.2, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5",
        ),
    ];
    let files = yaml_files(&dir().join("bad"));
    assert_eq!(
        files.len(),
        expected.len(),
        "one expectation per bad fixture"
    );
    for (path, (name, message)) in files.iter().zip(expected) {
        let mc = load(path);
        assert_eq!(mc.metadata.name.as_deref(), Some(*name));
        let err = validate_machine_config(&mc).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("MachineConfig \"{name}\": {message}")
        );
    }
}

#[test]
fn examples_render_for_both_pools() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mcs: Vec<MachineConfig> = yaml_files(&dir)
        .iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.contains("\nkind: MachineConfig\n")
        })
        .map(|p| load(p))
        .collect();
    assert!(mcs.len() >= 5);
    let worker = render_pool(&worker_pool(), &mcs, &ControllerConfigSpec::default(), "v").unwrap();
    assert_eq!(worker.source.len(), 5);
    let mut master_pool = worker_pool();
    master_pool.metadata.name = Some("master".into());
    master_pool.spec.machine_config_selector = serde_json::from_value(
        json!({"matchLabels": {"machineconfiguration.openshift.io/role": "master"}}),
    )
    .unwrap();
    let master = render_pool(&master_pool, &mcs, &ControllerConfigSpec::default(), "v").unwrap();
    assert_eq!(master.source.len(), 1);
}
