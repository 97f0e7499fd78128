//! What a sync does, decided from the Node's annotations, the on-disk config and the force file
//! alone: an explicit state machine without I/O, in zincati's style, so every transition is
//! tested without a cluster or a host. The sync loop reads the inputs, asks [`decide`], and
//! carries the step out.
//!
//! A node is on, and moves to, a [`Target`]: a rendered config and the image of upstream's
//! on-cluster image mode (`desiredImage`, empty outside it). A new image with the same config
//! is a change like a new config; so is the removal of `desiredImage` from a node on an image,
//! which goes back to the rendered config's own OS image.

use std::fmt;

use k8s_openapi::api::core::v1::Node;
use mco_api::MachineConfig;
use mco_api::constants::{annotations as ann, states};
use mco_render::diff::ConfigDiff;

use super::annotation;
use crate::engine::plan::ParsedConfig;

/// A rendered config and the on-cluster image mode image that goes with it: what a node is on
/// (`currentConfig`, `currentImage`) or moves to (`desiredConfig`, `desiredImage`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// The rendered MachineConfig's name.
    pub config: String,
    /// The image that replaces its `osImageURL`; empty outside image mode.
    pub image: String,
}

impl Target {
    /// `config` with `image` (empty for none).
    pub fn new(config: impl Into<String>, image: impl Into<String>) -> Target {
        Target {
            config: config.into(),
            image: image.into(),
        }
    }
}

impl fmt::Display for Target {
    /// The config's name, and the image when there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.image.is_empty() {
            f.write_str(&self.config)
        } else {
            write!(f, "{} / image {}", self.config, self.image)
        }
    }
}

/// What the disk says the node is on: the name of `currentconfig` and the image of
/// `currentimage` (empty when it is absent or empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnDisk<'a> {
    /// The on-disk config's name.
    pub config: &'a str,
    /// The on-disk image.
    pub image: &'a str,
}

/// The step one sync takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No desired config yet: nothing to do.
    Nothing,
    /// On the desired target and reported Done on it: only `Updated=True` is written again.
    InSync,
    /// On the desired target with the force file present: re-apply it completely, whatever the
    /// state. It is the one-step recovery from drift and from a never-adopted OS.
    Force {
        /// The desired (and current) target.
        target: Target,
    },
    /// The disk holds the desired target but the node is not reported Done on it (a finished
    /// update, a restart, a cleared drift, a `currentImage` not yet written): validate the
    /// disk, then complete.
    Complete {
        /// The desired (and current) target.
        target: Target,
        /// The node is Degraded: it stays so, under its reason, while the disk does not match.
        degraded: bool,
    },
    /// The node is on `from` and must move to `to`: adopted when their configs, each with its
    /// image embedded, are equal and the force file is absent ([`change`]), otherwise updated.
    Change {
        /// The current target: the on-disk one, else the node's annotations.
        from: Target,
        /// The desired target.
        to: Target,
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

/// The step for `node` (its `desiredConfig`, `desiredImage`, `currentConfig`, `currentImage`
/// and `state` annotations), given what the disk says the node is on (the source of truth
/// after a restart, and so preferred over the annotations) and whether the force file is
/// present.
pub fn decide(node: &Node, on_disk: Option<OnDisk<'_>>, force: bool) -> Step {
    let desired = Target::new(
        annotation(node, ann::DESIRED_CONFIG),
        annotation(node, ann::DESIRED_IMAGE),
    );
    if desired.config.is_empty() {
        return Step::Nothing;
    }
    let annotated = Target::new(
        annotation(node, ann::CURRENT_CONFIG),
        annotation(node, ann::CURRENT_IMAGE),
    );
    let current = match on_disk {
        Some(d) => Target::new(d.config, d.image),
        None => annotated.clone(),
    };
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
        return Step::Force { target: desired };
    }
    if state != states::DONE || annotated != desired {
        return Step::Complete {
            target: desired,
            degraded: state == states::DEGRADED,
        };
    }
    Step::InSync
}

/// Whether a [`Step::Change`] from `old` to `new` is an adoption or an update. Both are the
/// configs as applied, each with its image embedded
/// ([`image_mode::embed`](crate::engine::image_mode::embed)): a new image is a new
/// `osImageURL`, never adopted.
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

    /// A Node with image-mode annotations as well; an empty value leaves the annotation out.
    fn node_img(desired: (&str, &str), current: (&str, &str), state: &str) -> Node {
        let mut n = node(desired.0, current.0, state);
        let a = n.metadata.annotations.get_or_insert_default();
        for (k, v) in [
            (ann::DESIRED_IMAGE, desired.1),
            (ann::CURRENT_IMAGE, current.1),
        ] {
            if !v.is_empty() {
                a.insert(k.into(), v.into());
            }
        }
        n
    }

    /// An on-disk config outside image mode.
    fn disk(config: &str) -> Option<OnDisk<'_>> {
        disk_img(config, "")
    }

    fn disk_img<'a>(config: &'a str, image: &'a str) -> Option<OnDisk<'a>> {
        Some(OnDisk { config, image })
    }

    fn t(config: &str, image: &str) -> Target {
        Target::new(config, image)
    }

    fn change(from: &str, to: &str, force: bool, working: bool) -> Step {
        change_img(t(from, ""), t(to, ""), force, working)
    }

    fn change_img(from: Target, to: Target, force: bool, working: bool) -> Step {
        Step::Change {
            from,
            to,
            force,
            working,
        }
    }

    fn complete(config: &str, degraded: bool) -> Step {
        Step::Complete {
            target: t(config, ""),
            degraded,
        }
    }

    fn force_step(config: &str) -> Step {
        Step::Force {
            target: t(config, ""),
        }
    }

    #[test]
    fn no_desired_config_is_nothing_whatever_else_holds() {
        assert_eq!(decide(&node("", "", ""), None, false), Step::Nothing);
        assert_eq!(
            decide(&node("", "a", states::DONE), disk("a"), true),
            Step::Nothing
        );
        assert_eq!(
            decide(&node("", "a", states::DEGRADED), disk("b"), false),
            Step::Nothing
        );
    }

    #[test]
    fn done_on_the_desired_config_is_in_sync() {
        assert_eq!(
            decide(&node("a", "a", states::DONE), disk("a"), false),
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
                decide(&node("a", "a", state), disk("a"), true),
                force_step("a"),
                "state {state:?}"
            );
        }
        assert_eq!(
            decide(&node("a", "a", states::DONE), None, true),
            force_step("a")
        );
    }

    #[test]
    fn on_the_desired_config_but_not_done_completes() {
        // After an update's reboot: the disk holds the new config, the annotations the old.
        assert_eq!(
            decide(&node("b", "a", states::WORKING), disk("b"), false),
            complete("b", false)
        );
        // Done, but on a current annotation other than the desired one.
        assert_eq!(
            decide(&node("b", "a", states::DONE), disk("b"), false),
            complete("b", false)
        );
        // No state yet.
        assert_eq!(
            decide(&node("a", "a", ""), disk("a"), false),
            complete("a", false)
        );
        // Only Degraded stays so while the disk does not match.
        assert_eq!(
            decide(&node("a", "a", states::DEGRADED), disk("a"), false),
            complete("a", true)
        );
        assert_eq!(
            decide(&node("a", "a", states::UNRECONCILABLE), disk("a"), false),
            complete("a", false)
        );
    }

    #[test]
    fn another_desired_config_is_a_change_from_the_current_one() {
        assert_eq!(
            decide(&node("b", "a", states::DONE), disk("a"), false),
            change("a", "b", false, true)
        );
        assert_eq!(
            decide(&node("b", "a", states::DONE), disk("a"), true),
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
            decide(&node("b", "b", states::DONE), disk("a"), false),
            change("a", "b", false, true)
        );
        // The annotation lags behind a disk that holds the desired config.
        assert_eq!(
            decide(&node("b", "a", states::DONE), disk("b"), true),
            force_step("b")
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
                decide(&node("b", "a", state), disk("a"), false),
                change("a", "b", false, working),
                "state {state:?}"
            );
        }
    }

    const I1: &str = "registry.example/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const I2: &str = "registry.example/os@sha256:2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn a_new_image_for_the_same_config_enters_image_mode() {
        let n = node_img(("a", I1), ("a", ""), states::DONE);
        assert_eq!(
            decide(&n, disk("a"), false),
            change_img(t("a", ""), t("a", I1), false, true)
        );
        // Without an on-disk config, the annotations say where the node is.
        assert_eq!(
            decide(&n, None, false),
            change_img(t("a", ""), t("a", I1), false, true)
        );
    }

    #[test]
    fn a_new_config_with_a_new_image_is_one_change() {
        let n = node_img(("b", I2), ("a", I1), states::DONE);
        assert_eq!(
            decide(&n, disk_img("a", I1), false),
            change_img(t("a", I1), t("b", I2), false, true)
        );
        // A new config alone keeps the image.
        let n = node_img(("b", I1), ("a", I1), states::DONE);
        assert_eq!(
            decide(&n, disk_img("a", I1), false),
            change_img(t("a", I1), t("b", I1), false, true)
        );
    }

    #[test]
    fn a_new_image_alone_is_a_change() {
        let n = node_img(("a", I2), ("a", I1), states::DONE);
        assert_eq!(
            decide(&n, disk_img("a", I1), false),
            change_img(t("a", I1), t("a", I2), false, true)
        );
        assert_eq!(
            decide(&n, disk_img("a", I1), true),
            change_img(t("a", I1), t("a", I2), true, true),
            "the force file does not turn a change into a re-apply"
        );
        let degraded = node_img(("a", I2), ("a", I1), states::DEGRADED);
        assert_eq!(
            decide(&degraded, disk_img("a", I1), false),
            change_img(t("a", I1), t("a", I2), false, false)
        );
    }

    #[test]
    fn removing_the_desired_image_leaves_image_mode() {
        let n = node_img(("a", ""), ("a", I1), states::DONE);
        assert_eq!(
            decide(&n, disk_img("a", I1), false),
            change_img(t("a", I1), t("a", ""), false, true)
        );
        assert_eq!(
            decide(&n, None, false),
            change_img(t("a", I1), t("a", ""), false, true)
        );
        // Back on the rendered OS image, only the stale currentImage is left to clear.
        assert_eq!(
            decide(&n, disk("a"), false),
            Step::Complete {
                target: t("a", ""),
                degraded: false
            }
        );
    }

    #[test]
    fn done_on_the_desired_config_and_image_is_in_sync() {
        let n = node_img(("a", I1), ("a", I1), states::DONE);
        assert_eq!(decide(&n, disk_img("a", I1), false), Step::InSync);
        assert_eq!(decide(&n, None, false), Step::InSync);
        assert_eq!(
            decide(&n, disk_img("a", I1), true),
            Step::Force { target: t("a", I1) }
        );
    }

    #[test]
    fn after_a_restart_the_on_disk_image_is_where_the_node_is() {
        // The image update's reboot: the disk holds the image, the annotations the old target.
        let n = node_img(("a", I1), ("a", ""), states::WORKING);
        assert_eq!(
            decide(&n, disk_img("a", I1), false),
            Step::Complete {
                target: t("a", I1),
                degraded: false
            }
        );
        // Done on the config, but currentImage not written yet (a takeover of upstream's node).
        let n = node_img(("a", I1), ("a", ""), states::DONE);
        assert_eq!(
            decide(&n, disk_img("a", I1), false),
            Step::Complete {
                target: t("a", I1),
                degraded: false
            }
        );
        // The annotations claim the image, the disk does not hold it: the disk wins.
        let n = node_img(("a", I1), ("a", I1), states::DONE);
        assert_eq!(
            decide(&n, disk("a"), false),
            change_img(t("a", ""), t("a", I1), false, true)
        );
        let n = node_img(("a", I2), ("a", I2), states::DONE);
        assert_eq!(
            decide(&n, disk_img("a", I1), false),
            change_img(t("a", I1), t("a", I2), false, true)
        );
    }

    #[test]
    fn a_desired_image_without_a_desired_config_is_nothing() {
        let n = node_img(("", I1), ("a", ""), states::DONE);
        assert_eq!(decide(&n, disk("a"), false), Step::Nothing);
    }

    #[test]
    fn a_target_shows_its_image_when_it_has_one() {
        assert_eq!(t("a", "").to_string(), "a");
        assert_eq!(t("a", I1).to_string(), format!("a / image {I1}"));
    }

    #[test]
    fn a_change_of_the_embedded_image_is_an_update_never_an_adoption() {
        use crate::engine::image_mode::embed;
        let a = mc("rendered-worker-a", "3.5.0", "x", "img:1");
        for (old, new) in [
            (a.clone(), embed(&a, I1)),
            (embed(&a, I1), embed(&a, I2)),
            (embed(&a, I1), a.clone()),
        ] {
            assert!(!semantically_equal(&old, &new));
            assert_eq!(super::change(&old, &new, false), Change::Update);
        }
        // The same image under another name of the same config is adopted.
        let theirs = mc("rendered-worker-5d41", "3.4.0", "x", "img:1");
        assert_eq!(
            super::change(&embed(&theirs, I1), &embed(&a, I1), false),
            Change::Adopt
        );
        assert_eq!(
            super::change(&embed(&theirs, I1), &embed(&a, I1), true),
            Change::Update
        );
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
