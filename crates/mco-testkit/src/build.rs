//! Chained builders for Nodes, MachineConfigPools and MachineConfigs.
//!
//! Each builder holds the object as JSON and sets only what it is asked to, so `json()` gives
//! exactly the document a test means (the API machinery tests compare documents) and `build()`
//! the typed object. `merge` deep-merges any further fields, for the odd test that needs them.

use k8s_openapi::api::core::v1::Node;
use mco_api::{MachineConfig, MachineConfigPool};
use serde_json::{Map, Value, json};

/// The label a MachineConfig's role is selected by.
const MC_ROLE_LABEL: &str = "machineconfiguration.openshift.io/role";
/// The annotations the daemon and the controller speak through.
const CURRENT_CONFIG: &str = "machineconfiguration.openshift.io/currentConfig";
const DESIRED_CONFIG: &str = "machineconfiguration.openshift.io/desiredConfig";
const STATE: &str = "machineconfiguration.openshift.io/state";
const REASON: &str = "machineconfiguration.openshift.io/reason";

fn node_role_label(role: &str) -> String {
    format!("node-role.kubernetes.io/{role}")
}

/// Deep-merges `patch` into `into`: objects merge key by key, anything else replaces.
fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// The object at `path` under `v`, created (as `{}`) where missing.
fn object_at<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut cur = v;
    for key in path {
        cur = cur
            .as_object_mut()
            .expect("builder paths are objects")
            .entry(*key)
            .or_insert_with(|| json!({}));
    }
    cur.as_object_mut().expect("builder paths are objects")
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("builder made a bad object: {e}: {v}"))
}

/// The metadata setters every builder has.
macro_rules! metadata_setters {
    () => {
        /// Sets a label.
        pub fn label(mut self, key: &str, value: &str) -> Self {
            object_at(&mut self.0, &["metadata", "labels"]).insert(key.into(), value.into());
            self
        }

        /// Sets an annotation.
        pub fn annotation(mut self, key: &str, value: &str) -> Self {
            object_at(&mut self.0, &["metadata", "annotations"]).insert(key.into(), value.into());
            self
        }

        /// Sets `metadata.uid`.
        pub fn uid(mut self, uid: &str) -> Self {
            object_at(&mut self.0, &["metadata"]).insert("uid".into(), uid.into());
            self
        }

        /// Deep-merges `patch` (objects key by key, anything else replaced) into the object.
        pub fn merge(mut self, patch: Value) -> Self {
            merge(&mut self.0, patch);
            self
        }

        /// The object as JSON, exactly as built.
        pub fn json(self) -> Value {
            self.0
        }
    };
}

/// A Node: `NodeBuilder::new("w0").role("worker").current_config(c).ready(true).build()`.
///
/// Starts as `apiVersion`, `kind`, `metadata.name` and an empty `spec`.
#[derive(Clone, Debug)]
pub struct NodeBuilder(Value);

impl NodeBuilder {
    pub fn new(name: &str) -> Self {
        NodeBuilder(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {},
        }))
    }

    metadata_setters!();

    /// Labels the node `node-role.kubernetes.io/<role>` (empty value), as pools select it.
    pub fn role(self, role: &str) -> Self {
        self.label(&node_role_label(role), "")
    }

    /// The `currentConfig` annotation.
    pub fn current_config(self, config: &str) -> Self {
        self.annotation(CURRENT_CONFIG, config)
    }

    /// The `desiredConfig` annotation.
    pub fn desired_config(self, config: &str) -> Self {
        self.annotation(DESIRED_CONFIG, config)
    }

    /// The daemon's `state` annotation (`Done`, `Working`, `Degraded`).
    pub fn state(self, state: &str) -> Self {
        self.annotation(STATE, state)
    }

    /// The daemon's `reason` annotation.
    pub fn reason(self, reason: &str) -> Self {
        self.annotation(REASON, reason)
    }

    /// Sets `spec.unschedulable` (cordoned).
    pub fn unschedulable(mut self, unschedulable: bool) -> Self {
        object_at(&mut self.0, &["spec"]).insert("unschedulable".into(), unschedulable.into());
        self
    }

    /// The `Ready` condition, `True` or `False`.
    pub fn ready(self, ready: bool) -> Self {
        self.condition("Ready", if ready { "True" } else { "False" })
    }

    /// Sets the status condition of `type_`, replacing one of that type, else appending.
    pub fn condition(mut self, type_: &str, status: &str) -> Self {
        let conditions = object_at(&mut self.0, &["status"])
            .entry("conditions")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .expect("conditions is a list");
        let c = json!({"type": type_, "status": status});
        match conditions.iter_mut().find(|c| c["type"] == type_) {
            Some(old) => *old = c,
            None => conditions.push(c),
        }
        self
    }

    pub fn build(self) -> Node {
        typed(self.0)
    }
}

/// A MachineConfigPool: `PoolBuilder::new("worker").role("worker").target(rendered).build()`.
///
/// Starts as `apiVersion`, `kind`, `metadata.name` and an empty `spec`.
#[derive(Clone, Debug)]
pub struct PoolBuilder(Value);

impl PoolBuilder {
    pub fn new(name: &str) -> Self {
        PoolBuilder(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigPool",
            "metadata": {"name": name},
            "spec": {},
        }))
    }

    metadata_setters!();

    /// Selects the MachineConfigs labelled with `role` and the nodes labelled
    /// `node-role.kubernetes.io/<role>`: a pool as upstream's `master` and `worker` are.
    pub fn role(self, role: &str) -> Self {
        self.config_role(role).node_role(role)
    }

    /// Selects the MachineConfigs whose role label is `role`.
    pub fn config_role(self, role: &str) -> Self {
        self.config_selector(json!({"matchLabels": {MC_ROLE_LABEL: role}}))
    }

    /// Selects the nodes labelled `node-role.kubernetes.io/<role>`.
    pub fn node_role(self, role: &str) -> Self {
        self.node_selector(json!({"matchLabels": {node_role_label(role): ""}}))
    }

    /// `spec.machineConfigSelector`, a LabelSelector as JSON.
    pub fn config_selector(mut self, selector: Value) -> Self {
        object_at(&mut self.0, &["spec"]).insert("machineConfigSelector".into(), selector);
        self
    }

    /// `spec.nodeSelector`, a LabelSelector as JSON.
    pub fn node_selector(mut self, selector: Value) -> Self {
        object_at(&mut self.0, &["spec"]).insert("nodeSelector".into(), selector);
        self
    }

    /// The rendered config the pool targets, `spec.configuration.name`.
    pub fn target(mut self, rendered: &str) -> Self {
        object_at(&mut self.0, &["spec", "configuration"]).insert("name".into(), rendered.into());
        self
    }

    /// `spec.maxUnavailable`: a number or a percentage such as `"50%"`.
    pub fn max_unavailable(mut self, max: impl Into<Value>) -> Self {
        object_at(&mut self.0, &["spec"]).insert("maxUnavailable".into(), max.into());
        self
    }

    /// `spec.paused`.
    pub fn paused(mut self, paused: bool) -> Self {
        object_at(&mut self.0, &["spec"]).insert("paused".into(), paused.into());
        self
    }

    /// Replaces `status`.
    pub fn status(mut self, status: Value) -> Self {
        self.0["status"] = status;
        self
    }

    pub fn build(self) -> MachineConfigPool {
        typed(self.0)
    }
}

/// A MachineConfig: `MachineConfigBuilder::new("99-worker-x").role("worker").config(ign).build()`.
///
/// Starts as `apiVersion`, `kind`, `metadata.name` and an empty `spec`.
#[derive(Clone, Debug)]
pub struct MachineConfigBuilder(Value);

impl MachineConfigBuilder {
    pub fn new(name: &str) -> Self {
        MachineConfigBuilder(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "metadata": {"name": name},
            "spec": {},
        }))
    }

    metadata_setters!();

    /// The role label pools select MachineConfigs by.
    pub fn role(self, role: &str) -> Self {
        self.label(MC_ROLE_LABEL, role)
    }

    /// Replaces the whole `spec`.
    pub fn spec(mut self, spec: Value) -> Self {
        self.0["spec"] = spec;
        self
    }

    /// `spec.config`, the Ignition config.
    pub fn config(mut self, ignition: Value) -> Self {
        object_at(&mut self.0, &["spec"]).insert("config".into(), ignition);
        self
    }

    /// `spec.osImageURL`.
    pub fn os_image_url(mut self, url: &str) -> Self {
        object_at(&mut self.0, &["spec"]).insert("osImageURL".into(), url.into());
        self
    }

    /// `spec.kernelArguments`.
    pub fn kernel_arguments(mut self, args: &[&str]) -> Self {
        object_at(&mut self.0, &["spec"]).insert("kernelArguments".into(), json!(args));
        self
    }

    pub fn build(self) -> MachineConfig {
        typed(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_sets_only_what_it_is_asked() {
        let v = NodeBuilder::new("w0")
            .role("worker")
            .current_config("rendered-a")
            .desired_config("rendered-b")
            .state("Working")
            .ready(false)
            .ready(true)
            .json();
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {
                    "name": "w0",
                    "labels": {"node-role.kubernetes.io/worker": ""},
                    "annotations": {
                        "machineconfiguration.openshift.io/currentConfig": "rendered-a",
                        "machineconfiguration.openshift.io/desiredConfig": "rendered-b",
                        "machineconfiguration.openshift.io/state": "Working",
                    },
                },
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            })
        );
    }

    #[test]
    fn node_builds_typed() {
        let n = NodeBuilder::new("w1")
            .unschedulable(true)
            .condition("MemoryPressure", "False")
            .ready(true)
            .build();
        assert_eq!(n.metadata.name.as_deref(), Some("w1"));
        assert_eq!(n.spec.unwrap().unschedulable, Some(true));
        let types: Vec<String> = n
            .status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| format!("{}={}", c.type_, c.status))
            .collect();
        assert_eq!(types, ["MemoryPressure=False", "Ready=True"]);
    }

    #[test]
    fn pool_role_selects_configs_and_nodes() {
        let p = PoolBuilder::new("infra")
            .role("infra")
            .target("rendered-infra-1")
            .max_unavailable("50%")
            .paused(true)
            .build();
        let labels = |s: Option<_>| -> Vec<(String, String)> {
            let s: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector = s.unwrap();
            s.match_labels.unwrap().into_iter().collect()
        };
        assert_eq!(
            labels(p.spec.machine_config_selector.clone()),
            [(MC_ROLE_LABEL.to_string(), "infra".to_string())]
        );
        assert_eq!(
            labels(p.spec.node_selector.clone()),
            [("node-role.kubernetes.io/infra".to_string(), String::new())]
        );
        assert_eq!(p.spec.configuration.unwrap().name, "rendered-infra-1");
        assert!(p.spec.paused);
    }

    #[test]
    fn machine_config_json_and_merge() {
        let v = MachineConfigBuilder::new("99-worker-custom")
            .role("worker")
            .config(json!({"ignition": {"version": "3.4.0"}}))
            .kernel_arguments(&["nosmt"])
            .merge(json!({"metadata": {"labels": {"extra": "x"}}}))
            .json();
        assert_eq!(
            v,
            json!({
                "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                "metadata": {"name": "99-worker-custom", "labels": {MC_ROLE_LABEL: "worker", "extra": "x"}},
                "spec": {"config": {"ignition": {"version": "3.4.0"}}, "kernelArguments": ["nosmt"]},
            })
        );
        let mc = MachineConfigBuilder::new("00-a")
            .os_image_url("quay.io/os:1")
            .build();
        assert_eq!(mc.spec.os_image_url, "quay.io/os:1");
    }
}
