//! The drain decision, including upstream's registries.conf safety rules.

use base64::Engine;
use mco_api::MachineConfigSpec;
use mco_render::actions::{
    PostConfigAction as A, RegistriesError, actions_for, drain_required, legacy_actions_for,
    legacy_drain_required, registries_change_is_safe,
};
use mco_render::diff::{ConfigDiff, ConfigView};
use mco_render::ignition::Ignition;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

const REGISTRIES: &str = "/etc/containers/registries.conf";

struct Cfg {
    spec: MachineConfigSpec,
    ign: Ignition,
}

impl Cfg {
    fn files(files: Vec<Value>) -> Self {
        Self {
            spec: MachineConfigSpec::default(),
            ign: serde_json::from_value(json!({
                "ignition": {"version": "3.5.0"},
                "storage": {"files": files}
            }))
            .expect("ignition"),
        }
    }
    fn view(&self) -> ConfigView<'_> {
        ConfigView::new(&self.spec, &self.ign)
    }
}

fn percent_file(path: &str, text: &str) -> Value {
    let data = utf8_percent_encode(text, NON_ALPHANUMERIC);
    json!({"path": path, "contents": {"source": format!("data:,{data}")}})
}

fn registries(text: &str) -> Cfg {
    Cfg::files(vec![percent_file(REGISTRIES, text)])
}

fn diff(old: &Cfg, new: &Cfg) -> ConfigDiff {
    ConfigDiff::between(old.view(), new.view())
}

/// Actions and drain decision for a registries.conf change, as the daemon computes them.
fn decide(old: &str, new: &str) -> (Vec<A>, bool) {
    let d = diff(&registries(old), &registries(new));
    let actions = actions_for(&d);
    let drain = drain_required(&actions, &d);
    (actions, drain)
}

#[test]
fn action_kinds_decide_the_drain() {
    let empty = ConfigDiff::default();
    let cases: Vec<(Vec<A>, bool)> = vec![
        (vec![A::Reboot], true),
        (vec![A::Drain], true),
        (vec![A::Drain, A::reload("crio.service")], true),
        (vec![A::None], false),
        (vec![A::reload("crio.service")], false),
        (
            vec![
                A::restart("coreos-update-ca-trust.service"),
                A::restart("crio.service"),
            ],
            false,
        ),
        (vec![A::DaemonReload, A::restart("kubelet.service")], false),
        // Special with registries.conf untouched: nothing unsafe changed.
        (vec![A::Special], false),
    ];
    for (actions, want) in cases {
        assert_eq!(drain_required(&actions, &empty), want, "{actions:?}");
    }
}

const BASE: &str = r#"
unqualified-search-registries = ["registry.access.redhat.com", "docker.io"]
short-name-mode = "enforcing"

[[registry]]
prefix = ""
location = "quay.io/openshift-release-dev"
mirror-by-digest-only = true

[[registry.mirror]]
location = "mirror.example.com/release"
pull-from-mirror = "digest-only"

[[registry]]
location = "registry.example.com/team"
insecure = false
blocked = false

[[registry.mirror]]
location = "mirror.example.com/team"
pull-from-mirror = "all"
"#;

/// BASE with `from` replaced by `to` (which must occur exactly once).
fn edit(from: &str, to: &str) -> String {
    assert_eq!(BASE.matches(from).count(), 1, "{from:?}");
    BASE.replace(from, to)
}

#[test]
fn registries_conf_changes_reload_crio_and_drain_only_when_unsafe() {
    let cases: Vec<(&str, String, bool)> = vec![
        // Upstream TestNodeDisruptionPolicySpecialAction: appending a search registry skips the
        // drain.
        (
            "append unqualified search registry",
            edit(r#""docker.io"]"#, r#""docker.io", "test.io"]"#),
            false,
        ),
        (
            "remove unqualified search registry",
            edit(r#", "docker.io"]"#, "]"),
            true,
        ),
        (
            "reorder unqualified search registries",
            edit(
                r#"["registry.access.redhat.com", "docker.io"]"#,
                r#"["docker.io", "registry.access.redhat.com"]"#,
            ),
            true,
        ),
        (
            "insert unqualified search registry in front",
            edit(r#"["registry.access"#, r#"["test.io", "registry.access"#),
            true,
        ),
        (
            "add digest-only mirror",
            format!(
                "{BASE}\n[[registry.mirror]]\nlocation = \"m2.example.com/team\"\npull-from-mirror = \"digest-only\"\n"
            ),
            false,
        ),
        (
            "add mirror pulling tags",
            format!(
                "{BASE}\n[[registry.mirror]]\nlocation = \"m3.example.com/team\"\npull-from-mirror = \"all\"\n"
            ),
            true,
        ),
        (
            "add mirror without pull-from-mirror",
            format!("{BASE}\n[[registry.mirror]]\nlocation = \"m3.example.com/team\"\n"),
            true,
        ),
        (
            "add mirror under a mirror-by-digest-only registry",
            edit(
                "pull-from-mirror = \"digest-only\"\n",
                "pull-from-mirror = \"digest-only\"\n\n[[registry.mirror]]\nlocation = \"m4.example.com/release\"\n",
            ),
            false,
        ),
        (
            "remove mirror",
            edit(
                "\n[[registry.mirror]]\nlocation = \"mirror.example.com/team\"\npull-from-mirror = \"all\"\n",
                "\n",
            ),
            true,
        ),
        (
            "tighten mirror to digest-only",
            edit(
                r#"pull-from-mirror = "all""#,
                r#"pull-from-mirror = "digest-only""#,
            ),
            false,
        ),
        (
            "loosen mirror from digest-only",
            edit(
                "location = \"mirror.example.com/release\"\npull-from-mirror = \"digest-only\"",
                "location = \"mirror.example.com/release\"\npull-from-mirror = \"tag-only\"",
            ),
            true,
        ),
        (
            "block a registry",
            edit("blocked = false", "blocked = true"),
            true,
        ),
        (
            "make a registry insecure",
            edit("insecure = false", "insecure = true"),
            true,
        ),
        (
            "mark a mirror insecure only",
            edit(
                "location = \"mirror.example.com/team\"\n",
                "location = \"mirror.example.com/team\"\ninsecure = true\n",
            ),
            false,
        ),
        (
            "remove a registry",
            edit(
                "[[registry]]\nlocation = \"registry.example.com/team\"\ninsecure = false\nblocked = false\n\n[[registry.mirror]]\nlocation = \"mirror.example.com/team\"\npull-from-mirror = \"all\"\n",
                "",
            ),
            true,
        ),
        (
            "relocate a registry under the same prefix",
            edit(
                "prefix = \"\"\nlocation = \"quay.io/openshift-release-dev\"",
                "prefix = \"quay.io/openshift-release-dev\"\nlocation = \"quay.io/elsewhere\"",
            ),
            true,
        ),
        (
            "add registry whose mirrors are all digest-only",
            format!(
                "{BASE}\n[[registry]]\nlocation = \"new.example.com\"\n[[registry.mirror]]\nlocation = \"m.example.com/new\"\npull-from-mirror = \"digest-only\"\n"
            ),
            false,
        ),
        (
            "add registry with a tag mirror",
            format!(
                "{BASE}\n[[registry]]\nlocation = \"new.example.com\"\n[[registry.mirror]]\nlocation = \"m.example.com/new\"\npull-from-mirror = \"digest-only\"\n[[registry.mirror]]\nlocation = \"m2.example.com/new\"\n"
            ),
            true,
        ),
        (
            "add mirrorless digest-only registry",
            format!(
                "{BASE}\n[[registry]]\nlocation = \"new.example.com\"\nmirror-by-digest-only = true\n"
            ),
            false,
        ),
        (
            "add blocked registry",
            format!("{BASE}\n[[registry]]\nlocation = \"bad.example.com\"\nblocked = true\n"),
            true,
        ),
        (
            "only unrelated keys change",
            edit(
                r#"short-name-mode = "enforcing""#,
                r#"short-name-mode = "permissive""#,
            ),
            false,
        ),
    ];
    for (name, new, want_drain) in cases {
        let (actions, drain) = decide(BASE, &new);
        assert_eq!(actions, vec![A::Special], "{name}");
        assert_eq!(drain, want_drain, "{name}:\n{new}");
    }
}

#[test]
fn first_registries_conf_with_search_list_only_is_safe() {
    let d = diff(
        &Cfg::files(vec![]),
        &registries("unqualified-search-registries = [\"docker.io\"]\n"),
    );
    assert!(!drain_required(&[A::Special], &d));
}

#[test]
fn removing_registries_conf_with_registries_drains() {
    let d = diff(&registries(BASE), &Cfg::files(vec![]));
    let actions = actions_for(&d);
    assert_eq!(actions, vec![A::Special]);
    assert!(drain_required(&actions, &d));
}

#[test]
fn special_next_to_a_reload_still_decides_by_content() {
    let old = Cfg::files(vec![
        percent_file(REGISTRIES, BASE),
        percent_file("/etc/containers/policy.json", "{}"),
    ]);
    let new = Cfg::files(vec![
        percent_file(
            REGISTRIES,
            &edit(r#""docker.io"]"#, r#""docker.io", "x.io"]"#),
        ),
        percent_file("/etc/containers/policy.json", r#"{"default":[]}"#),
    ]);
    let d = diff(&old, &new);
    let actions = actions_for(&d);
    assert_eq!(actions, vec![A::reload("crio.service"), A::Special]);
    assert!(!drain_required(&actions, &d));
}

#[test]
fn base64_and_gzip_contents_are_decoded() {
    use std::io::Write;
    let new_text = edit(r#""docker.io"]"#, r#""docker.io", "test.io"]"#);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(new_text.as_bytes()).unwrap();
    let gzipped = gz.finish().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let old = Cfg::files(vec![json!({
        "path": REGISTRIES,
        "contents": {"source": format!("data:;base64,{}", b64.encode(BASE))}
    })]);
    let new = Cfg::files(vec![json!({
        "path": REGISTRIES,
        "contents": {"source": format!("data:;base64,{}", b64.encode(&gzipped)), "compression": "gzip"}
    })]);
    let d = diff(&old, &new);
    let change = d.registries_conf.as_ref().expect("changed");
    assert_eq!(registries_change_is_safe(change), Ok(true));
    assert!(!drain_required(&[A::Special], &d));
}

#[test]
fn unparsable_registries_conf_drains() {
    let d = diff(&registries(BASE), &registries("this is [not toml"));
    let change = d.registries_conf.as_ref().expect("changed");
    let err = registries_change_is_safe(change).unwrap_err();
    assert!(matches!(err, RegistriesError::Toml { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(
            "failed decoding TOML content from file /etc/containers/registries.conf: "
        ),
        "{err}"
    );
    assert!(drain_required(&[A::Special], &d));
}

#[test]
fn undecodable_data_url_drains() {
    let old = registries(BASE);
    let new = Cfg::files(vec![
        json!({"path": REGISTRIES, "contents": {"source": "https://example.com/r.conf"}}),
    ]);
    let d = diff(&old, &new);
    let err = registries_change_is_safe(d.registries_conf.as_ref().unwrap()).unwrap_err();
    assert!(matches!(err, RegistriesError::Decode(_)), "{err:?}");
    assert!(drain_required(&[A::Special], &d));
}

#[test]
fn legacy_drain_follows_the_first_boot_rules() {
    let safe = diff(
        &registries(BASE),
        &registries(&edit(r#""docker.io"]"#, r#""docker.io", "test.io"]"#)),
    );
    let unsafe_ = diff(
        &registries(BASE),
        &registries(&edit(r#", "docker.io"]"#, "]")),
    );
    let actions = legacy_actions_for(&safe);
    assert_eq!(actions, vec![A::reload("crio.service")]);
    assert!(!legacy_drain_required(&actions, &safe));
    let actions = legacy_actions_for(&unsafe_);
    assert!(legacy_drain_required(&actions, &unsafe_));

    let none = ConfigDiff::default();
    assert!(legacy_drain_required(&[A::Reboot], &none));
    assert!(!legacy_drain_required(&[A::None], &none));
    // A crio restart for the CA bundle alone does not drain.
    assert!(!legacy_drain_required(
        &[
            A::restart("coreos-update-ca-trust.service"),
            A::restart("crio.service")
        ],
        &none
    ));
}
