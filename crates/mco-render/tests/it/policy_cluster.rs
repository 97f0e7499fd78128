//! The `MachineConfiguration` policy: validation with upstream's messages, the merge over the
//! defaults, and the status round trip.

use mco_api::operator::NodeDisruptionPolicyConfig;
use mco_render::actions::{DisruptionPolicies, PostConfigAction as A, actions_with_policies};
use mco_render::diff::ConfigDiff;
use mco_render::policy::{from_status, merge, to_status};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn config(v: Value) -> NodeDisruptionPolicyConfig {
    serde_json::from_value(v).expect("policy")
}

fn error_of(v: Value) -> (String, String) {
    let e = merge(Some(&config(v))).expect_err("invalid policy accepted");
    (e.field, e.message)
}

fn changed(paths: &[&str]) -> ConfigDiff {
    let mut d = ConfigDiff::default();
    for p in paths {
        d.files.changed.push((*p).to_owned());
    }
    d
}

#[test]
fn no_policy_is_the_defaults_and_survives_the_status_round_trip() {
    let merged = merge(None).unwrap();
    assert_eq!(merged, DisruptionPolicies::default());
    assert_eq!(merge(Some(&config(json!({})))).unwrap(), merged);
    let status = to_status(&merged);
    assert_eq!(status.files.len(), merged.files.len());
    assert_eq!(
        serde_json::to_value(&status.files[1]).unwrap(),
        json!({"path": "/etc/machine-config-daemon/no-reboot/containers-gpg.pub",
               "actions": [{"type": "Reload", "reload": {"serviceName": "crio.service"}}]})
    );
    assert_eq!(from_status(&status).unwrap(), merged);
}

#[test]
fn the_documented_example_merges_over_the_defaults() {
    // The shape of upstream's documented example: a file restarting a service, a unit reloaded
    // after a daemon-reload, and SSH keys draining.
    let merged = merge(Some(&config(json!({
        "files": [
            {"path": "/etc/chrony.conf",
             "actions": [{"type": "Restart", "restart": {"serviceName": "chronyd.service"}}]},
            {"path": "/etc/containers/registries.conf", "actions": [{"type": "None"}]}
        ],
        "units": [
            {"name": "chronyd.service",
             "actions": [{"type": "DaemonReload"},
                         {"type": "Reload", "reload": {"serviceName": "chronyd.service"}}]}
        ],
        "sshkey": {"actions": [{"type": "Drain"}]}
    }))))
    .unwrap();
    let defaults = DisruptionPolicies::default();
    // Same path: replaced in place. New path: appended.
    assert_eq!(merged.files.len(), defaults.files.len() + 1);
    let registries = defaults
        .files
        .iter()
        .position(|f| f.path == "/etc/containers/registries.conf")
        .unwrap();
    assert_eq!(merged.files[registries].actions, vec![A::None]);
    assert_eq!(merged.files.last().unwrap().path, "/etc/chrony.conf");
    assert_eq!(
        merged.unit_actions("chronyd.service").unwrap(),
        [A::DaemonReload, A::reload("chronyd.service")]
    );
    assert_eq!(merged.ssh_key, vec![A::Drain]);
    assert_eq!(
        actions_with_policies(&changed(&["/etc/chrony.conf"]), &merged),
        vec![A::restart("chronyd.service")]
    );
    assert_eq!(from_status(&to_status(&merged)).unwrap(), merged);
}

#[test]
fn the_most_specific_path_wins_whoever_wrote_it() {
    let merged = merge(Some(&config(json!({
        "files": [{"path": "/etc/containers", "actions": [{"type": "Reboot"}]},
                  {"path": "/etc/app", "actions": [{"type": "None"}]},
                  {"path": "/etc/app/sub/x.conf",
                   "actions": [{"type": "Restart", "restart": {"serviceName": "app.service"}}]}]
    }))))
    .unwrap();
    let run = |p: &str| actions_with_policies(&changed(&[p]), &merged);
    // The default for the file itself is more specific than the user's directory.
    assert_eq!(
        run("/etc/containers/policy.json"),
        vec![A::reload("crio.service")]
    );
    assert_eq!(run("/etc/containers/other.conf"), vec![A::Reboot]);
    assert_eq!(run("/etc/app/a.conf"), vec![A::None]);
    assert_eq!(run("/etc/app/sub/x.conf"), vec![A::restart("app.service")]);
}

#[test]
fn invalid_policies_name_the_field() {
    assert_eq!(
        error_of(json!({"files": [{"path": "/etc/a", "actions": [{"type": "Explode"}]}]})),
        (
            "spec.nodeDisruptionPolicy.files[0].actions[0].type".into(),
            "Unsupported value: \"Explode\": supported values: \"Reboot\", \"Drain\", \"Reload\", \"Restart\", \"DaemonReload\", \"None\"".into()
        )
    );
    assert_eq!(
        error_of(json!({"files": [{"path": "etc/chrony.conf", "actions": [{"type": "None"}]}]})),
        (
            "spec.nodeDisruptionPolicy.files[0].path".into(),
            "Invalid value: \"etc/chrony.conf\": path must be absolute".into()
        )
    );
    assert_eq!(
        error_of(json!({"units": [{"name": "a.service", "actions": [{"type": "Restart"}]}]})),
        (
            "spec.nodeDisruptionPolicy.units[0].actions[0].restart".into(),
            "restart is required when type is Restart, and forbidden otherwise".into()
        )
    );
    let (field, _) = error_of(json!({"sshkey": {"actions": [{"type": "Special"}]}}));
    assert_eq!(field, "spec.nodeDisruptionPolicy.sshkey.actions[0].type");
    let (field, message) = error_of(json!({"files": [{"path": "/etc/a",
        "actions": [{"type": "Reboot"}, {"type": "Drain"}]}]}));
    assert_eq!(field, "spec.nodeDisruptionPolicy.files[0].actions");
    assert!(message.starts_with("Reboot action can only be specified standalone"));
    let (field, _) =
        error_of(json!({"units": [{"name": "nosuffix", "actions": [{"type": "None"}]}]}));
    assert_eq!(field, "spec.nodeDisruptionPolicy.units[0].name");
    let (field, _) = error_of(json!({"files": [
        {"path": "/etc/a", "actions": [{"type": "None"}]},
        {"path": "/etc/a", "actions": [{"type": "Drain"}]}]}));
    assert_eq!(field, "spec.nodeDisruptionPolicy.files[1]");
}

#[test]
fn limits_are_upstreams_and_hold_at_the_boundary() {
    let files = |n: usize| json!({"files": (0..n).map(|i| json!({"path": format!("/etc/f{i}"), "actions": [{"type": "None"}]})).collect::<Vec<_>>()});
    assert!(merge(Some(&config(files(50)))).is_ok());
    assert_eq!(error_of(files(51)).0, "spec.nodeDisruptionPolicy.files");

    let actions = |n: usize| json!({"units": [{"name": "a.service", "actions": (0..n).map(|_| json!({"type": "DaemonReload"})).collect::<Vec<_>>()}]});
    assert!(merge(Some(&config(actions(10)))).is_ok());
    assert_eq!(
        error_of(actions(11)).0,
        "spec.nodeDisruptionPolicy.units[0].actions"
    );

    let named = |len: usize| {
        let name = format!("{}.service", "a".repeat(len - ".service".len()));
        json!({"units": [{"name": name, "actions": [{"type": "None"}]}]})
    };
    assert!(merge(Some(&config(named(255)))).is_ok());
    assert_eq!(
        error_of(named(256)).0,
        "spec.nodeDisruptionPolicy.units[0].name"
    );
}
