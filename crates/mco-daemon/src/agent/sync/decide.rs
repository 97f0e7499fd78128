//! What a sync does, decided from the Node's annotations, the on-disk config and the force file
//! alone: an explicit state machine without I/O, in zincati's style, so every transition is
//! tested without a cluster or a host. The sync loop reads the inputs, asks [`decide`], and
//! carries the step out.

use k8s_openapi::api::core::v1::Node;
use mco_api::MachineConfig;
use mco_api::constants::{annotations as ann, states};
use mco_render::diff::ConfigDiff;

use super::annotation;
use crate::engine::plan::ParsedConfig;

/// The step one sync takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No desired config yet: nothing to do.
    Nothing,
    /// On the desired config and reported Done on it: only `Updated=True` is written again.
    InSync,
    /// On the desired config with the force file present: re-apply it completely, whatever the
    /// state. It is the one-step recovery from drift and from a never-adopted OS.
    Force {
        /// The desired (and current) config.
        config: String,
    },
    /// The disk holds the desired config but the node is not reported Done on it (a finished
    /// update, a restart, a cleared drift): validate the disk, then complete.
    Complete {
        /// The desired (and current) config.
        config: String,
        /// The node is Degraded: it stays so, under its reason, while the disk does not match.
        degraded: bool,
    },
    /// The node is on `from` and must move to `to`: adopted when the two are equal and the
    /// force file is absent ([`change`]), otherwise updated.
    Change {
        /// The current config: the on-disk one's name, else the node's annotation.
        from: String,
        /// The desired config.
        to: String,
        /// The force file is present: no adoption and no preflight validation of `from`.
        force: bool,
        /// Report the node `Working`; a Degraded or Unreconcilable node keeps its state until
        /// the update succeeds.
        working: bool,
    },
}

/// How a [`Step::Change`] is carried out, once both configs are fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Record the new config as current without an update: the node already runs its equal.
    Adopt,
    /// Drain, write, reboot or run the rebootless actions.
    Update,
}

/// The step for `node` (its `desiredConfig`, `currentConfig` and `state` annotations), given
/// the name of the on-disk `currentconfig` (the source of truth after a restart, and so
/// preferred over the annotation) and whether the force file is present.
pub fn decide(node: &Node, on_disk: Option<&str>, force: bool) -> Step {
    let desired = annotation(node, ann::DESIRED_CONFIG);
    if desired.is_empty() {
        return Step::Nothing;
    }
    let annotated = annotation(node, ann::CURRENT_CONFIG);
    let current = on_disk.map_or_else(|| annotated.clone(), str::to_string);
    let state = annotation(node, ann::STATE);
    if current != desired {
        return Step::Change {
            from: current,
            to: desired,
            force,
            working: state != states::DEGRADED && state != states::UNRECONCILABLE,
        };
    }
    if force {
        return Step::Force { config: desired };
    }
    if state != states::DONE || annotated != desired {
        return Step::Complete {
            config: desired,
            degraded: state == states::DEGRADED,
        };
    }
    Step::InSync
}

/// The refusal of a node in upstream's on-cluster image mode (its `desiredImage` is set): its OS
/// is an image a MachineOSConfig built, which mco neither builds nor applies. Rebasing it to
/// the rendered config's OS image would drop the layered content, and validating it against
/// that image would report a mismatch that is not one; the daemon leaves the node as it is.
pub fn image_mode(node: &Node) -> Option<String> {
    let image = annotation(node, ann::DESIRED_IMAGE);
    (!image.is_empty()).then(|| {
        format!(
            "node {} is in on-cluster image mode ({}={image}): mco does not apply images a MachineOSConfig builds, and leaves the node as it is",
            node.metadata.name.as_deref().unwrap_or_default(),
            ann::DESIRED_IMAGE
        )
    })
}

/// Whether a [`Step::Change`] from `old` to `new` is an adoption or an update.
pub fn change(old: &MachineConfig, new: &MachineConfig, force: bool) -> Change {
    if !force && semantically_equal(old, new) {
        Change::Adopt
    } else {
        Change::Update
    }
}

/// Whether a node on `old` already is on `new`: their mco diff is empty (files, units, SSH keys,
/// password, OS image, kernel arguments and type, extensions, FIPS). The Ignition version and the
/// metadata (name, annotations, owner) do not count, so a config another controller rendered
/// under its own name is recognised. A config that does not parse is never equal.
pub fn semantically_equal(old: &MachineConfig, new: &MachineConfig) -> bool {
    match (ParsedConfig::new(old), ParsedConfig::new(new)) {
        (Ok(o), Ok(n)) => ConfigDiff::between(o.view(), n.view()).is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mc(name: &str, version: &str, file: &str, image: &str) -> MachineConfig {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "metadata": {"name": name, "annotations": {
                "machineconfiguration.openshift.io/generated-by-controller-version": name,
            }},
            "spec": {
                "osImageURL": image,
                "kernelArguments": ["nosmt"],
                "config": {
                    "ignition": {"version": version},
                    "storage": {"files": [{
                        "path": "/etc/a", "mode": 420,
                        "contents": {"source": format!("data:,{file}")},
                    }]},
                    "systemd": {"units": [{"name": "a.service", "enabled": true,
                        "contents": "[Unit]\n"}]},
                },
            },
        }))
        .unwrap()
    }

    /// A Node with the given annotations; an empty value leaves the annotation out.
    fn node(desired: &str, current: &str, state: &str) -> Node {
        let mut a = serde_json::Map::new();
        for (k, v) in [
            (ann::DESIRED_CONFIG, desired),
            (ann::CURRENT_CONFIG, current),
            (ann::STATE, state),
        ] {
            if !v.is_empty() {
                a.insert(k.into(), json!(v));
            }
        }
        serde_json::from_value(json!({"metadata": {"name": "w", "annotations": a}})).unwrap()
    }

    fn change(from: &str, to: &str, force: bool, working: bool) -> Step {
        Step::Change {
            from: from.into(),
            to: to.into(),
            force,
            working,
        }
    }

    fn complete(config: &str, degraded: bool) -> Step {
        Step::Complete {
            config: config.into(),
            degraded,
        }
    }

    #[test]
    fn a_node_in_image_mode_is_refused_and_others_are_not() {
        let mut n = node("rendered-a", "rendered-a", "Done");
        assert_eq!(image_mode(&n), None);
        let a = n.metadata.annotations.get_or_insert_default();
        a.insert(
            ann::CURRENT_IMAGE.into(),
            "registry.example/os@sha256:1".into(),
        );
        assert_eq!(
            image_mode(&n),
            None,
            "running a layered image alone: leaving image mode"
        );
        let a = n.metadata.annotations.get_or_insert_default();
        a.insert(
            ann::DESIRED_IMAGE.into(),
            "registry.example/os@sha256:2".into(),
        );
        assert_eq!(
            image_mode(&n).unwrap(),
            "node w is in on-cluster image mode (machineconfiguration.openshift.io/desiredImage=registry.example/os@sha256:2): mco does not apply images a MachineOSConfig builds, and leaves the node as it is"
        );
    }

    #[test]
    fn no_desired_config_is_nothing_whatever_else_holds() {
        assert_eq!(decide(&node("", "", ""), None, false), Step::Nothing);
        assert_eq!(
            decide(&node("", "a", states::DONE), Some("a"), true),
            Step::Nothing
        );
        assert_eq!(
            decide(&node("", "a", states::DEGRADED), Some("b"), false),
            Step::Nothing
        );
    }

    #[test]
    fn done_on_the_desired_config_is_in_sync() {
        assert_eq!(
            decide(&node("a", "a", states::DONE), Some("a"), false),
            Step::InSync
        );
        // A node that keeps no on-disk config goes by its annotation.
        assert_eq!(
            decide(&node("a", "a", states::DONE), None, false),
            Step::InSync
        );
    }

    #[test]
    fn the_force_file_on_the_desired_config_forces_whatever_the_state() {
        for state in [
            "",
            states::DONE,
            states::WORKING,
            states::DEGRADED,
            states::UNRECONCILABLE,
        ] {
            assert_eq!(
                decide(&node("a", "a", state), Some("a"), true),
                Step::Force { config: "a".into() },
                "state {state:?}"
            );
        }
        assert_eq!(
            decide(&node("a", "a", states::DONE), None, true),
            Step::Force { config: "a".into() }
        );
    }

    #[test]
    fn on_the_desired_config_but_not_done_completes() {
        // After an update's reboot: the disk holds the new config, the annotations the old.
        assert_eq!(
            decide(&node("b", "a", states::WORKING), Some("b"), false),
            complete("b", false)
        );
        // Done, but on a current annotation other than the desired one.
        assert_eq!(
            decide(&node("b", "a", states::DONE), Some("b"), false),
            complete("b", false)
        );
        // No state yet.
        assert_eq!(
            decide(&node("a", "a", ""), Some("a"), false),
            complete("a", false)
        );
        // Only Degraded stays so while the disk does not match.
        assert_eq!(
            decide(&node("a", "a", states::DEGRADED), Some("a"), false),
            complete("a", true)
        );
        assert_eq!(
            decide(&node("a", "a", states::UNRECONCILABLE), Some("a"), false),
            complete("a", false)
        );
    }

    #[test]
    fn another_desired_config_is_a_change_from_the_current_one() {
        assert_eq!(
            decide(&node("b", "a", states::DONE), Some("a"), false),
            change("a", "b", false, true)
        );
        assert_eq!(
            decide(&node("b", "a", states::DONE), Some("a"), true),
            change("a", "b", true, true)
        );
        // Without an on-disk config, the annotation names the current config.
        assert_eq!(
            decide(&node("b", "a", states::WORKING), None, false),
            change("a", "b", false, true)
        );
        // With neither, the change is from no config at all (the fetch of "" then fails).
        assert_eq!(
            decide(&node("b", "", ""), None, false),
            change("", "b", false, true)
        );
    }

    #[test]
    fn the_on_disk_config_overrides_the_annotation() {
        // The annotation claims the desired config, the disk does not hold it.
        assert_eq!(
            decide(&node("b", "b", states::DONE), Some("a"), false),
            change("a", "b", false, true)
        );
        // The annotation lags behind a disk that holds the desired config.
        assert_eq!(
            decide(&node("b", "a", states::DONE), Some("b"), true),
            Step::Force { config: "b".into() }
        );
    }

    #[test]
    fn a_degraded_or_unreconcilable_node_is_not_reported_working() {
        for (state, working) in [
            ("", true),
            (states::DONE, true),
            (states::WORKING, true),
            (states::DEGRADED, false),
            (states::UNRECONCILABLE, false),
        ] {
            assert_eq!(
                decide(&node("b", "a", state), Some("a"), false),
                change("a", "b", false, working),
                "state {state:?}"
            );
        }
    }

    #[test]
    fn an_equal_config_is_adopted_unless_forced() {
        let ours = mc("rendered-worker-0123", "3.5.0", "x", "img:1");
        let theirs = mc("rendered-worker-5d41", "3.4.0", "x", "img:1");
        assert_eq!(super::change(&theirs, &ours, false), Change::Adopt);
        assert_eq!(super::change(&theirs, &ours, true), Change::Update);
        let other = mc("rendered-worker-4567", "3.5.0", "y", "img:1");
        assert_eq!(super::change(&other, &ours, false), Change::Update);
        assert_eq!(super::change(&other, &ours, true), Change::Update);
    }

    #[test]
    fn an_upstream_render_of_the_same_config_is_equal() {
        let ours = mc("rendered-worker-0123", "3.5.0", "x", "img:1");
        let theirs = mc(
            "rendered-worker-5d41402abc4b2a76b9719d911017c592",
            "3.4.0",
            "x",
            "img:1",
        );
        assert!(semantically_equal(&theirs, &ours));
        assert!(semantically_equal(&ours, &theirs));
    }

    #[test]
    fn any_node_visible_difference_is_not_equal() {
        let ours = mc("a", "3.5.0", "x", "img:1");
        assert!(!semantically_equal(&mc("b", "3.4.0", "y", "img:1"), &ours));
        assert!(!semantically_equal(&mc("b", "3.4.0", "x", "img:2"), &ours));
        let mut kargs = mc("b", "3.4.0", "x", "img:1");
        kargs.spec.kernel_arguments = Some(vec![]);
        assert!(!semantically_equal(&kargs, &ours));
    }

    #[test]
    fn an_unparsable_config_is_never_equal() {
        let ours = mc("a", "3.5.0", "x", "img:1");
        let bad = mc("b", "9.9.9", "x", "img:1");
        assert!(!semantically_equal(&bad, &ours));
    }
}
