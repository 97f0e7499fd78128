//! The pure half of an update: parse both configs, check reconcilability, diff them and derive
//! the post-config actions and the drain decision. No I/O, so every rule is unit-tested.

use std::sync::Arc;

use mco_api::MachineConfig;
use mco_render::actions::{self, DisruptionPolicies, PostConfigAction};
use mco_render::diff::{ConfigDiff, ConfigView, canonical_kernel_type};
use mco_render::ignition::{self, Ignition, IgnitionError};
use mco_render::reconcile::{self, ReconcileError, StorageOverrides};

use super::NodeEvent;

/// Upstream's name for the empty config an update starts from when there is none.
pub const EMPTY_CONFIG_NAME: &str = "mco-empty-mc";

/// A MachineConfig with its Ignition parsed once.
#[derive(Debug, Clone)]
pub struct ParsedConfig {
    /// `metadata.name`.
    pub name: String,
    /// The config as received.
    pub mc: MachineConfig,
    /// Its Ignition, translated to the internal spec version.
    pub ignition: Ignition,
}

impl ParsedConfig {
    /// Parses the Ignition of `mc`; an absent config is the empty one.
    pub fn new(mc: &MachineConfig) -> Result<ParsedConfig, IgnitionError> {
        let ignition = match mc.spec.config.as_ref() {
            Some(raw) => ignition::parse(raw)?,
            None => ignition::empty(),
        };
        Ok(ParsedConfig {
            name: mc.metadata.name.clone().unwrap_or_default(),
            mc: mc.clone(),
            ignition,
        })
    }

    /// The view the diff takes.
    pub fn view(&self) -> ConfigView<'_> {
        ConfigView::new(&self.mc.spec, &self.ignition)
    }

    /// The MachineConfig's kernel arguments, split like the kernel does.
    pub fn kernel_arguments(&self) -> Vec<String> {
        mco_render::diff::split_kernel_arguments(
            self.mc.spec.kernel_arguments.as_deref().unwrap_or_default(),
        )
    }
}

/// Which calculation of post-config actions runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ActionPolicy {
    /// Node-disruption policies with upstream's defaults (a running cluster without a
    /// published policy).
    #[default]
    Disruption,
    /// The cluster's merged node-disruption policies (`MachineConfiguration/cluster` status).
    Cluster(Arc<DisruptionPolicies>),
    /// Upstream's older calculation, used on first boot.
    Legacy,
}

/// Everything an update will do, decided before anything is touched.
#[derive(Debug, Clone)]
pub struct UpdatePlan {
    /// The config the node is in.
    pub old: ParsedConfig,
    /// The config it goes to.
    pub new: ParsedConfig,
    /// What differs.
    pub diff: ConfigDiff,
    /// What to do after writing (never empty).
    pub actions: Vec<PostConfigAction>,
    /// Whether to drain first.
    pub drain: bool,
    /// The force file asked for a complete re-apply with a reboot.
    pub force: bool,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The change cannot be applied in place; the node becomes Unreconcilable.
    #[error(transparent)]
    Unreconcilable(#[from] ReconcileError),
    /// A config whose Ignition does not parse (the render controller should have refused it).
    #[error("parsing Ignition of machineconfig {name:?}: {source}")]
    Parse {
        /// The config.
        name: String,
        /// Why.
        #[source]
        source: IgnitionError,
    },
}

impl UpdatePlan {
    /// Plans the update from `old` to `new`. `force` makes every part of `new` apply (files,
    /// units, OS rebase even when the URL is unchanged) and the post action a reboot, which is
    /// what the force file means.
    pub fn new(
        old: &MachineConfig,
        new: &MachineConfig,
        force: bool,
        policy: &ActionPolicy,
    ) -> Result<UpdatePlan, PlanError> {
        Self::with_overrides(old, new, force, policy, StorageOverrides::default())
    }

    /// [`UpdatePlan::new`], accepting changes to the storage sections `overrides` names
    /// (`MachineConfiguration/cluster`'s `spec.irreconcilableValidationOverrides`). Nothing
    /// writes those sections on a running node, so accepting them leaves the disk as it is.
    pub fn with_overrides(
        old: &MachineConfig,
        new: &MachineConfig,
        force: bool,
        policy: &ActionPolicy,
        overrides: StorageOverrides,
    ) -> Result<UpdatePlan, PlanError> {
        reconcile::check_machine_configs(old, new, overrides)?;
        let parse = |mc: &MachineConfig| {
            ParsedConfig::new(mc).map_err(|source| PlanError::Parse {
                name: mc.metadata.name.clone().unwrap_or_default(),
                source,
            })
        };
        let old = parse(old)?;
        let new = parse(new)?;
        let diff = ConfigDiff::between(old.view(), new.view());
        let (actions, drain) = if force {
            (vec![PostConfigAction::Reboot], true)
        } else {
            match policy {
                ActionPolicy::Disruption => {
                    let a = actions::actions_for(&diff);
                    let d = actions::drain_required(&a, &diff);
                    (a, d)
                }
                ActionPolicy::Cluster(policies) => {
                    let a = actions::actions_with_policies(&diff, policies);
                    let d = actions::drain_required(&a, &diff);
                    (a, d)
                }
                ActionPolicy::Legacy => {
                    let a = actions::legacy_actions_for(&diff);
                    let d = actions::legacy_drain_required(&a, &diff);
                    (a, d)
                }
            }
        };
        Ok(UpdatePlan {
            old,
            new,
            diff,
            actions,
            drain,
            force,
        })
    }

    /// Whether the post action is a reboot.
    pub fn reboots(&self) -> bool {
        actions::requires_reboot(&self.actions)
    }

    /// Whether the OS (image, kernel arguments, kernel type, extensions) is touched.
    pub fn os_update(&self) -> bool {
        self.force
            || self.diff.os_image_changed
            || self.diff.kernel_arguments_changed
            || self.diff.kernel_type_changed
            || self.diff.extensions_changed
    }

    /// Whether the `core` user's SSH keys or password are touched.
    pub fn ssh_update(&self) -> bool {
        self.diff.ssh_keys_changed || self.diff.password_hash_changed
    }

    /// Upstream's Node events as the OS part starts (`applyOSChanges`): `InClusterUpgrade` when
    /// the OS image, the extensions or the kernel type change, then `OSUpdateStarted` naming
    /// the changes. Upstream sends them from the diff alone, whatever the host installs.
    pub fn os_started_events(&self) -> Vec<NodeEvent> {
        let d = &self.diff;
        let mut events = vec![];
        if d.os_image_changed || d.extensions_changed || d.kernel_type_changed {
            events.push(NodeEvent::normal(
                "InClusterUpgrade",
                format!(
                    "Updating from oscontainer {}",
                    self.new.mc.spec.os_image_url
                ),
            ));
        }
        let changes: Vec<&str> = [
            (d.os_image_changed, "Upgrading OS"),
            (d.extensions_changed, "Installing extensions"),
            (d.kernel_type_changed, "Changing kernel type"),
            (d.kernel_arguments_changed, "Changing kernel arguments"),
        ]
        .into_iter()
        .filter_map(|(changed, what)| changed.then_some(what))
        .collect();
        let reason = if changes.is_empty() {
            // A forced re-apply changes nothing, and upstream says which kernel it stays on.
            format!(
                "Updating to a target config with {} kernel",
                canonical_kernel_type(&self.new.mc.spec.kernel_type)
            )
        } else {
            changes.join("; ")
        };
        events.push(NodeEvent::normal("OSUpdateStarted", reason));
        events
    }

    /// Upstream's Node events once the OS part is staged: `OSUpgradeApplied` for a new OS
    /// image, else `OSUpgradeSkipped`, then `OSUpdateStaged`.
    pub fn os_staged_events(&self) -> Vec<NodeEvent> {
        let (old, new) = (&self.old.mc, &self.new.mc);
        let new_name = new.metadata.name.as_deref().unwrap_or_default();
        let url = &new.spec.os_image_url;
        let upgrade = if self.diff.os_image_changed {
            NodeEvent::normal(
                "OSUpgradeApplied",
                format!(
                    "OS upgrade applied; new MachineConfig ({new_name}) has new OS image ({url})"
                ),
            )
        } else {
            NodeEvent::normal(
                "OSUpgradeSkipped",
                format!(
                    "OS upgrade skipped; new MachineConfig ({new_name}) has same OS image ({url}) as old MachineConfig ({})",
                    old.metadata.name.as_deref().unwrap_or_default()
                ),
            )
        };
        vec![
            upgrade,
            NodeEvent::normal("OSUpdateStaged", "Changes to OS staged"),
        ]
    }

    /// The `UpdatePrepared=True` message.
    pub fn prepared_message(&self) -> String {
        actions::update_prepared_message(&self.actions, self.drain)
    }
}

/// The placeholder upstream prints where an update will or will not do something: `""` or
/// `"not "`.
pub fn not_if(done: bool) -> &'static str {
    if done { "" } else { "not " }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mc(name: &str, url: &str, config: serde_json::Value) -> MachineConfig {
        let mut m = MachineConfig::new(name, Default::default());
        m.spec.os_image_url = url.into();
        m.spec.config = Some(config);
        m
    }

    fn ign(files: serde_json::Value) -> serde_json::Value {
        json!({"ignition": {"version": "3.2.0"}, "storage": {"files": files}})
    }

    #[test]
    fn file_change_outside_policies_reboots_and_drains() {
        let old = mc("a", "img", ign(json!([])));
        let new = mc(
            "b",
            "img",
            ign(json!([{"path": "/etc/x", "contents": {"source": "data:,x"}}])),
        );
        let p = UpdatePlan::new(&old, &new, false, &ActionPolicy::Disruption).unwrap();
        assert!(p.reboots());
        assert!(p.drain);
        assert!(!p.os_update());
        assert_eq!(p.diff.files.added, vec!["/etc/x".to_string()]);
    }

    #[test]
    fn the_cluster_policy_replaces_the_reboot_with_its_actions() {
        let old = mc("a", "img", ign(json!([])));
        let new = mc(
            "b",
            "img",
            ign(json!([{"path": "/etc/chrony.conf", "contents": {"source": "data:,x"}}])),
        );
        let policies = DisruptionPolicies::default().with_user_policies(
            vec![actions::FilePolicy {
                path: "/etc/chrony.conf".into(),
                actions: vec![PostConfigAction::restart("chronyd.service")],
            }],
            vec![],
            vec![],
        );
        let p = UpdatePlan::new(
            &old,
            &new,
            false,
            &ActionPolicy::Cluster(Arc::new(policies)),
        )
        .unwrap();
        assert_eq!(
            p.actions,
            vec![PostConfigAction::restart("chronyd.service")]
        );
        assert!(!p.reboots());
        assert!(!p.drain);
        // Without the cluster's policy the same change reboots.
        let p = UpdatePlan::new(&old, &new, false, &ActionPolicy::Disruption).unwrap();
        assert!(p.reboots());
    }

    fn reasons(events: &[NodeEvent]) -> Vec<(&str, &str)> {
        events
            .iter()
            .map(|e| (e.reason, e.message.as_str()))
            .collect()
    }

    #[test]
    fn os_events_name_the_os_changes_in_upstreams_words() {
        let old = mc("rendered-a", "quay.io/os@sha256:1", ign(json!([])));
        let mut new = mc("rendered-b", "quay.io/os@sha256:2", ign(json!([])));
        new.spec.kernel_arguments = Some(vec!["nosmt".into()]);
        let p = UpdatePlan::new(&old, &new, false, &ActionPolicy::Disruption).unwrap();
        assert_eq!(
            reasons(&p.os_started_events()),
            vec![
                (
                    "InClusterUpgrade",
                    "Updating from oscontainer quay.io/os@sha256:2"
                ),
                ("OSUpdateStarted", "Upgrading OS; Changing kernel arguments"),
            ]
        );
        assert_eq!(
            reasons(&p.os_staged_events()),
            vec![
                (
                    "OSUpgradeApplied",
                    "OS upgrade applied; new MachineConfig (rendered-b) has new OS image (quay.io/os@sha256:2)"
                ),
                ("OSUpdateStaged", "Changes to OS staged"),
            ]
        );

        // Kernel arguments alone: no new oscontainer, and the upgrade is skipped.
        let mut new = mc("rendered-c", "quay.io/os@sha256:1", ign(json!([])));
        new.spec.kernel_arguments = Some(vec!["nosmt".into()]);
        let p = UpdatePlan::new(&old, &new, false, &ActionPolicy::Disruption).unwrap();
        assert_eq!(
            reasons(&p.os_started_events()),
            vec![("OSUpdateStarted", "Changing kernel arguments")]
        );
        assert_eq!(
            reasons(&p.os_staged_events())[0],
            (
                "OSUpgradeSkipped",
                "OS upgrade skipped; new MachineConfig (rendered-c) has same OS image (quay.io/os@sha256:1) as old MachineConfig (rendered-a)"
            )
        );

        // A forced re-apply of the same config names the kernel it stays on.
        let mut same = old.clone();
        same.spec.kernel_type = "realtime".into();
        let p = UpdatePlan::new(&same, &same, true, &ActionPolicy::Disruption).unwrap();
        assert_eq!(
            reasons(&p.os_started_events()),
            vec![(
                "OSUpdateStarted",
                "Updating to a target config with realtime kernel"
            )]
        );
    }

    #[test]
    fn an_extensions_change_is_an_os_change_in_upstreams_words() {
        let old = mc("rendered-a", "quay.io/os@sha256:1", ign(json!([])));
        let mut new = mc("rendered-b", "quay.io/os@sha256:1", ign(json!([])));
        new.spec.extensions = Some(vec!["usbguard".into()]);
        let p = UpdatePlan::new(&old, &new, false, &ActionPolicy::Disruption).unwrap();
        assert!(p.os_update());
        assert!(p.reboots() && p.drain);
        assert_eq!(
            reasons(&p.os_started_events()),
            vec![
                (
                    "InClusterUpgrade",
                    "Updating from oscontainer quay.io/os@sha256:1"
                ),
                ("OSUpdateStarted", "Installing extensions"),
            ]
        );
        // With a new image and kernel arguments, in upstream's order.
        let mut newer = mc("rendered-c", "quay.io/os@sha256:2", ign(json!([])));
        newer.spec.extensions = Some(vec!["usbguard".into()]);
        newer.spec.kernel_arguments = Some(vec!["nosmt".into()]);
        let p = UpdatePlan::new(&old, &newer, false, &ActionPolicy::Disruption).unwrap();
        assert_eq!(
            reasons(&p.os_started_events())[1],
            (
                "OSUpdateStarted",
                "Upgrading OS; Installing extensions; Changing kernel arguments"
            )
        );
        // The same extensions: no extension change.
        let p = UpdatePlan::new(&new, &new, false, &ActionPolicy::Disruption).unwrap();
        assert!(!p.os_update());
    }

    #[test]
    fn ssh_key_is_rebootless_without_drain() {
        let old = mc("a", "img", ign(json!([])));
        let mut cfg = ign(json!([]));
        cfg["passwd"] =
            json!({"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAA"]}]});
        let new = mc("b", "img", cfg);
        let p = UpdatePlan::new(&old, &new, false, &ActionPolicy::Disruption).unwrap();
        assert!(!p.reboots());
        assert!(!p.drain);
        assert!(p.ssh_update());
        assert_eq!(p.actions, vec![PostConfigAction::None]);
    }

    #[test]
    fn force_reboots_even_when_equal() {
        let old = mc("a", "img", ign(json!([])));
        let p = UpdatePlan::new(&old, &old, true, &ActionPolicy::Disruption).unwrap();
        assert!(p.diff.is_empty());
        assert!(p.reboots());
        assert!(p.os_update());
    }

    #[test]
    fn unreconcilable_change_is_refused() {
        let old = mc("a", "img", ign(json!([])));
        let mut cfg = ign(json!([]));
        cfg["storage"]["directories"] = json!([{"path": "/etc/d"}]);
        let new = mc("b", "img", cfg);
        let err = UpdatePlan::new(&old, &new, false, &ActionPolicy::Disruption).unwrap_err();
        assert!(matches!(err, PlanError::Unreconcilable(_)), "{err}");
        assert!(
            err.to_string()
                .contains("ignition directories section contains changes"),
            "{err}"
        );
    }

    #[test]
    fn a_disks_change_is_accepted_only_where_the_overrides_name_disks() {
        let old = mc("a", "img", ign(json!([])));
        let mut cfg = ign(json!([]));
        cfg["storage"]["disks"] = json!([{"device": "/dev/vdb", "wipeTable": true}]);
        let new = mc("b", "img", cfg);
        let plan = |names: &[&str]| {
            UpdatePlan::with_overrides(
                &old,
                &new,
                false,
                &ActionPolicy::Disruption,
                StorageOverrides::from_names(names),
            )
        };
        let err = plan(&[]).unwrap_err();
        assert!(
            err.to_string().contains("disks section contains changes"),
            "{err}"
        );
        assert!(plan(&["FileSystems", "Raid"]).is_err());
        let p = plan(&["Disks"]).unwrap();
        // Nothing on a running node writes disks: no file changes, so nothing to reboot for.
        assert!(p.diff.files.is_empty(), "{:?}", p.diff);
    }

    #[test]
    fn placeholder() {
        assert_eq!(not_if(true), "");
        assert_eq!(not_if(false), "not ");
    }
}
