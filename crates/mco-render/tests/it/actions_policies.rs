//! Post-config actions under upstream's default node disruption policies, and user overrides.

use mco_api::MachineConfigSpec;
use mco_render::actions::{
    ActionList, DisruptionPolicies, FilePolicy, PostConfigAction as A, UnitPolicy, actions_for,
    actions_with_policies, legacy_actions_for, requires_reboot, update_prepared_message,
};
use mco_render::diff::{ConfigDiff, ConfigView};
use mco_render::ignition::Ignition;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Cfg {
    spec: MachineConfigSpec,
    ign: Ignition,
}

impl Cfg {
    fn new(spec: Value, ign: Value) -> Self {
        let mut obj = json!({"ignition": {"version": "3.5.0"}});
        for (k, v) in ign.as_object().cloned().unwrap_or_default() {
            obj[k] = v;
        }
        Self {
            spec: serde_json::from_value(spec).expect("spec"),
            ign: serde_json::from_value(obj).expect("ignition"),
        }
    }
    fn view(&self) -> ConfigView<'_> {
        ConfigView::new(&self.spec, &self.ign)
    }
}

fn file(path: &str, data: &str) -> Value {
    json!({"path": path, "contents": {"source": format!("data:,{data}")}})
}

fn files(entries: &[(&str, &str)]) -> Value {
    json!({"storage": {"files": entries.iter().map(|(p, d)| file(p, d)).collect::<Vec<_>>()}})
}

fn diff(old: &Cfg, new: &Cfg) -> ConfigDiff {
    ConfigDiff::between(old.view(), new.view())
}

/// The diff of changing the contents of every listed path from "1" to "2".
fn changed_files(paths: &[&str]) -> ConfigDiff {
    let old: Vec<(&str, &str)> = paths.iter().map(|p| (*p, "1")).collect();
    let new: Vec<(&str, &str)> = paths.iter().map(|p| (*p, "2")).collect();
    diff(
        &Cfg::new(json!({}), files(&old)),
        &Cfg::new(json!({}), files(&new)),
    )
}

fn crio_reload() -> A {
    A::reload("crio.service")
}

#[test]
fn default_file_policies() {
    let cases: Vec<(&str, Vec<A>)> = vec![
        ("/var/lib/kubelet/config.json", vec![A::None]),
        (
            "/etc/machine-config-daemon/no-reboot/containers-gpg.pub",
            vec![crio_reload()],
        ),
        ("/etc/containers/policy.json", vec![crio_reload()]),
        ("/etc/containers/registries.conf", vec![A::Special]),
        (
            "/etc/containers/registries.d/quay.yaml",
            vec![crio_reload()],
        ),
        (
            "/etc/containers/registries.d/nested/deep.yaml",
            vec![crio_reload()],
        ),
        ("/etc/crio/policies/ns.json", vec![crio_reload()]),
        ("/etc/nmstate/openshift/br-ex.yml", vec![A::None]),
        (
            "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
            vec![
                A::restart("coreos-update-ca-trust.service"),
                A::restart("crio.service"),
            ],
        ),
        (
            "/etc/kubernetes/credential-providers/ecr-credential-provider.yaml",
            vec![A::restart("kubelet.service")],
        ),
        (
            "/etc/systemd/system/kubelet.service.d/40-kubelet-crio-image-credential-provider.conf",
            vec![A::DaemonReload, A::restart("kubelet.service")],
        ),
        (
            "/etc/iri-registry/config.yml",
            vec![A::restart("iri-registry.service")],
        ),
        (
            "/usr/local/bin/load-registry-image.sh",
            vec![A::restart("iri-registry.service")],
        ),
        (
            "/etc/pki/ca-trust/source/anchors/iri-root-ca.crt",
            vec![A::restart("coreos-update-ca-trust.service")],
        ),
        ("/etc/random-reboot-file", vec![A::Reboot]),
        ("/etc/kubernetes/kubelet-ca.crt", vec![A::Reboot]),
        ("/etc/containersfoo", vec![A::Reboot]),
        ("/etc/containers/registries.conf.d/x.conf", vec![A::Reboot]),
        (
            "/etc/pki/ca-trust/source/anchors/other.crt",
            vec![A::Reboot],
        ),
    ];
    for (path, want) in cases {
        assert_eq!(actions_for(&changed_files(&[path])), want, "{path}");
    }
}

#[test]
fn added_and_removed_files_count_as_changes() {
    let none = Cfg::new(json!({}), json!({}));
    let registries = Cfg::new(
        json!({}),
        files(&[("/etc/containers/registries.conf", "x")]),
    );
    assert_eq!(actions_for(&diff(&none, &registries)), vec![A::Special]);
    assert_eq!(actions_for(&diff(&registries, &none)), vec![A::Special]);

    let other = Cfg::new(json!({}), files(&[("/etc/motd", "x")]));
    assert_eq!(actions_for(&diff(&other, &none)), vec![A::Reboot]);
}

#[test]
fn units_reboot_unless_a_policy_names_them() {
    let old = Cfg::new(json!({}), json!({}));
    let iri = Cfg::new(
        json!({}),
        json!({"systemd": {"units": [{"name": "iri-registry.service", "contents": "[Unit]"}]}}),
    );
    assert_eq!(
        actions_for(&diff(&old, &iri)),
        vec![A::DaemonReload, A::restart("iri-registry.service")]
    );
    let other = Cfg::new(
        json!({}),
        json!({"systemd": {"units": [{"name": "chronyd.service", "enabled": true}]}}),
    );
    assert_eq!(actions_for(&diff(&old, &other)), vec![A::Reboot]);
    // Removal reboots too.
    assert_eq!(actions_for(&diff(&other, &old)), vec![A::Reboot]);
}

#[test]
fn ssh_key_and_password_changes_need_no_reboot() {
    // Upstream TestNoReboot: giving core a key and a password hash is applied without reboot.
    let old = Cfg::new(json!({}), json!({}));
    let new = Cfg::new(
        json!({}),
        json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA test"], "passwordHash": "$6$x"}]}}),
    );
    let d = diff(&old, &new);
    assert!(d.ssh_keys_changed && d.password_hash_changed);
    let actions = actions_for(&d);
    assert_eq!(actions, vec![A::None]);
    assert!(!requires_reboot(&actions));
    // Deleting the MC again is rebootless as well.
    assert_eq!(actions_for(&diff(&new, &old)), vec![A::None]);
}

#[test]
fn os_level_changes_always_reboot() {
    let base = json!({"osImageURL": "quay.io/os@sha256:1"});
    let cases = [
        ("os image", json!({"osImageURL": "quay.io/os@sha256:2"})),
        (
            "kernel arguments",
            json!({"osImageURL": "quay.io/os@sha256:1", "kernelArguments": ["nosmt"]}),
        ),
        (
            "kernel type",
            json!({"osImageURL": "quay.io/os@sha256:1", "kernelType": "realtime"}),
        ),
        (
            "extensions",
            json!({"osImageURL": "quay.io/os@sha256:1", "extensions": ["usbguard"]}),
        ),
        (
            "fips",
            json!({"osImageURL": "quay.io/os@sha256:1", "fips": true}),
        ),
    ];
    // Even alongside a change that alone would only reload crio.
    let old = Cfg::new(base, files(&[("/etc/containers/policy.json", "1")]));
    for (name, spec) in cases {
        let new = Cfg::new(spec, files(&[("/etc/containers/policy.json", "2")]));
        let actions = actions_for(&diff(&old, &new));
        assert_eq!(actions, vec![A::Reboot], "{name}");
        assert!(requires_reboot(&actions), "{name}");
    }
}

#[test]
fn no_change_means_none() {
    let c = Cfg::new(json!({"osImageURL": "x"}), files(&[("/etc/a", "1")]));
    assert_eq!(actions_for(&diff(&c, &c)), vec![A::None]);
}

#[test]
fn combining_actions() {
    let cases: Vec<(&str, Vec<&str>, Vec<A>)> = vec![
        (
            "None is dropped next to other actions",
            vec![
                "/etc/containers/registries.conf",
                "/var/lib/kubelet/config.json",
            ],
            vec![A::Special],
        ),
        (
            "only None collapses to one None",
            vec![
                "/var/lib/kubelet/config.json",
                "/etc/nmstate/openshift/a.yml",
            ],
            vec![A::None],
        ),
        (
            "any unmatched file reboots everything",
            vec!["/etc/containers/policy.json", "/etc/motd"],
            vec![A::Reboot],
        ),
        (
            "duplicates are removed",
            vec![
                "/etc/containers/registries.d/a.yaml",
                "/etc/containers/registries.d/b.yaml",
                "/etc/containers/policy.json",
            ],
            vec![crio_reload()],
        ),
        (
            "order follows the sorted paths, first occurrence wins",
            vec![
                "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt",
                "/etc/containers/policy.json",
                "/etc/containers/registries.conf",
            ],
            vec![
                crio_reload(),
                A::Special,
                A::restart("coreos-update-ca-trust.service"),
                A::restart("crio.service"),
            ],
        ),
    ];
    for (name, paths, want) in cases {
        assert_eq!(actions_for(&changed_files(&paths)), want, "{name}");
    }
}

#[test]
fn ssh_change_with_a_crio_file_keeps_only_the_reload() {
    let old = Cfg::new(
        json!({}),
        json!({"storage": {"files": [file("/etc/containers/policy.json", "1")]},
               "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1"]}]}}),
    );
    let new = Cfg::new(
        json!({}),
        json!({"storage": {"files": [file("/etc/containers/policy.json", "2")]},
               "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k2"]}]}}),
    );
    assert_eq!(actions_for(&diff(&old, &new)), vec![crio_reload()]);
}

#[test]
fn closest_policy_path_wins() {
    // Upstream TestFindClosestFilePolicyPathMatch.
    let p = |path: &str, actions: Vec<A>| FilePolicy {
        path: path.into(),
        actions,
    };
    let policies = DisruptionPolicies {
        files: vec![
            p("/etc/mco/f1", vec![A::None]),
            p("/etc/mco/f1/f2", vec![A::Reboot]),
            p("/etc/mco/f1/f2/f3", vec![crio_reload()]),
            p("/etc/mco/test1", vec![A::None]),
        ],
        units: vec![],
        ssh_key: vec![A::None],
    };
    let cases: Vec<(&str, Option<Vec<A>>)> = vec![
        ("/etc/mco/test", None),
        ("/etc/mco/test1", Some(vec![A::None])),
        ("/etc/mco/f1/f2/example", Some(vec![A::Reboot])),
        ("/etc/mco/f1/f2/f3", Some(vec![crio_reload()])),
        ("/etc/mco/f1/x", Some(vec![A::None])),
        ("/etc/mco/f1x", None),
    ];
    for (path, want) in cases {
        assert_eq!(
            policies.file_actions(path).map(<[A]>::to_vec),
            want,
            "{path}"
        );
    }
    let partial_only = DisruptionPolicies {
        files: vec![
            p("/etc/mco/f1/test", vec![A::None]),
            p("/etc/mco/f1/f2/f3/f4", vec![crio_reload()]),
        ],
        units: vec![],
        ssh_key: vec![],
    };
    assert_eq!(partial_only.file_actions("/etc/mco/f1/f2/f3"), None);
}

#[test]
fn user_policies_override_defaults_and_extend_them() {
    let policies = DisruptionPolicies::default().with_user_policies(
        vec![
            FilePolicy {
                path: "/etc/containers/policy.json".into(),
                actions: vec![A::restart("crio.service")],
            },
            FilePolicy {
                path: "/etc/chrony.conf".into(),
                actions: vec![A::restart("chronyd.service")],
            },
        ],
        vec![UnitPolicy {
            name: "chronyd.service".into(),
            actions: vec![A::DaemonReload, A::restart("chronyd.service")],
        }],
        vec![A::reload("sshd.service")],
    );
    let defaults = DisruptionPolicies::default();
    assert_eq!(policies.files.len(), defaults.files.len() + 1);

    let run = |paths: &[&str]| actions_with_policies(&changed_files(paths), &policies);
    assert_eq!(
        run(&["/etc/containers/policy.json"]),
        vec![A::restart("crio.service")]
    );
    assert_eq!(
        run(&["/etc/chrony.conf"]),
        vec![A::restart("chronyd.service")]
    );
    // Defaults not overridden still apply.
    assert_eq!(run(&["/etc/containers/registries.conf"]), vec![A::Special]);

    let old = Cfg::new(
        json!({}),
        json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["a"]}]}}),
    );
    let new = Cfg::new(
        json!({}),
        json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["b"]}]},
               "systemd": {"units": [{"name": "chronyd.service", "enabled": true}]}}),
    );
    assert_eq!(
        actions_with_policies(&diff(&old, &new), &policies),
        vec![
            A::DaemonReload,
            A::restart("chronyd.service"),
            A::reload("sshd.service")
        ]
    );

    // An empty user SSH policy keeps the default.
    let kept = DisruptionPolicies::default().with_user_policies(vec![], vec![], vec![]);
    assert_eq!(kept, defaults);
}

#[test]
fn actions_display_like_the_mcn_message() {
    assert_eq!(A::None.to_string(), "None");
    assert_eq!(A::Reboot.to_string(), "Reboot");
    assert_eq!(A::Drain.to_string(), "Drain");
    assert_eq!(A::Special.to_string(), "Special");
    assert_eq!(A::DaemonReload.to_string(), "DaemonReload");
    assert_eq!(crio_reload().to_string(), "Reload crio.service");
    assert_eq!(
        A::restart("kubelet.service").to_string(),
        "Restart kubelet.service"
    );
    assert_eq!(ActionList(&[]).to_string(), "[]");
    assert_eq!(
        ActionList(&[A::DaemonReload, A::restart("kubelet.service")]).to_string(),
        "[DaemonReload, Restart kubelet.service]"
    );
    assert_eq!(
        update_prepared_message(&[A::Reboot], true),
        "Update Compatible. Post Cfg Actions: [Reboot] Drain Required: true"
    );
    assert_eq!(
        update_prepared_message(&[A::Special], false),
        "Update Compatible. Post Cfg Actions: [Special] Drain Required: false"
    );
}

#[test]
fn requires_reboot_only_for_reboot() {
    assert!(requires_reboot(&[A::Reboot]));
    for a in [
        A::None,
        A::Drain,
        A::Special,
        A::DaemonReload,
        crio_reload(),
        A::restart("crio.service"),
    ] {
        assert!(!requires_reboot(std::slice::from_ref(&a)), "{a}");
    }
}

#[test]
fn actions_use_the_operator_api_wire_shape() {
    let cases = vec![
        (A::None, json!({"type": "None"})),
        (A::Reboot, json!({"type": "Reboot"})),
        (A::Drain, json!({"type": "Drain"})),
        (A::DaemonReload, json!({"type": "DaemonReload"})),
        (A::Special, json!({"type": "Special"})),
        (
            crio_reload(),
            json!({"type": "Reload", "reload": {"serviceName": "crio.service"}}),
        ),
        (
            A::restart("kubelet.service"),
            json!({"type": "Restart", "restart": {"serviceName": "kubelet.service"}}),
        ),
    ];
    for (action, wire) in cases {
        assert_eq!(serde_json::to_value(&action).unwrap(), wire, "{action}");
        assert_eq!(serde_json::from_value::<A>(wire).unwrap(), action);
    }
    for bad in [
        json!({"type": "Reload"}),
        json!({"type": "Restart", "reload": {"serviceName": "x.service"}}),
        json!({"type": "Explode"}),
    ] {
        assert!(serde_json::from_value::<A>(bad.clone()).is_err(), "{bad}");
    }
    let policy: FilePolicy = serde_json::from_value(json!({
        "path": "/etc/chrony.conf",
        "actions": [{"type": "Restart", "restart": {"serviceName": "chronyd.service"}}]
    }))
    .unwrap();
    assert_eq!(policy.actions, vec![A::restart("chronyd.service")]);
}

/// Upstream TestCalculatePostConfigChangeAction, for the first-boot path.
#[test]
fn legacy_first_boot_actions() {
    let restart_crio = vec![
        A::restart("coreos-update-ca-trust.service"),
        A::restart("crio.service"),
    ];
    let ca = "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt";
    let cases: Vec<(&str, Vec<&str>, Vec<A>)> = vec![
        (
            "normal file",
            vec!["/etc/random-reboot-file"],
            vec![A::Reboot],
        ),
        (
            "pull secret",
            vec!["/var/lib/kubelet/config.json"],
            vec![A::None],
        ),
        (
            "kubelet CA",
            vec!["/etc/kubernetes/kubelet-ca.crt"],
            vec![A::None],
        ),
        (
            "nmstate",
            vec!["/etc/nmstate/openshift/a.yml"],
            vec![A::None],
        ),
        (
            "nmstate is matched on the direct parent only",
            vec!["/etc/nmstate/openshift/sub/a.yml"],
            vec![A::Reboot],
        ),
        (
            "registries",
            vec!["/etc/containers/registries.conf"],
            vec![crio_reload()],
        ),
        (
            "registries.d",
            vec!["/etc/containers/registries.d/a.yaml"],
            vec![crio_reload()],
        ),
        (
            "registries.d is matched on the direct parent only",
            vec!["/etc/containers/registries.d/sub/a.yaml"],
            vec![A::Reboot],
        ),
        (
            "crio policies need a reboot here",
            vec!["/etc/crio/policies/a.json"],
            vec![A::Reboot],
        ),
        (
            "policy.json",
            vec!["/etc/containers/policy.json"],
            vec![crio_reload()],
        ),
        (
            "gpg key",
            vec!["/etc/machine-config-daemon/no-reboot/containers-gpg.pub"],
            vec![crio_reload()],
        ),
        (
            "registries overrides pull secret",
            vec![
                "/etc/containers/registries.conf",
                "/var/lib/kubelet/config.json",
            ],
            vec![crio_reload()],
        ),
        ("user CA bundle", vec![ca], restart_crio.clone()),
        (
            "restart is not overridden by a later reload",
            vec![
                ca,
                "/etc/machine-config-daemon/no-reboot/containers-gpg.pub",
            ],
            restart_crio,
        ),
    ];
    for (name, paths, want) in cases {
        assert_eq!(legacy_actions_for(&changed_files(&paths)), want, "{name}");
    }
}

#[test]
fn legacy_path_reboots_for_any_unit_or_os_change() {
    let old = Cfg::new(json!({}), json!({}));
    let iri = Cfg::new(
        json!({}),
        json!({"systemd": {"units": [{"name": "iri-registry.service", "contents": "[Unit]"}]}}),
    );
    assert_eq!(legacy_actions_for(&diff(&old, &iri)), vec![A::Reboot]);
    let kargs = Cfg::new(json!({"kernelArguments": ["karg1"]}), json!({}));
    assert_eq!(legacy_actions_for(&diff(&old, &kargs)), vec![A::Reboot]);
    let ssh = Cfg::new(
        json!({}),
        json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k"]}]}}),
    );
    assert_eq!(legacy_actions_for(&diff(&old, &ssh)), vec![A::None]);
    assert_eq!(legacy_actions_for(&diff(&old, &old)), vec![A::None]);
}
