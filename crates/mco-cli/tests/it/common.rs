//! Hand-built objects for report tests: the shapes the controller and daemon write, in this
//! crate's words; Nodes, pools and MachineConfigs come from the kit's builders.
#![allow(dead_code)]

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use mco_api::{MachineConfig, MachineConfigNode, MachineConfigPool};
use mco_cli::Snapshot;
use mco_testkit::{MachineConfigBuilder, NodeBuilder, PoolBuilder};
use serde_json::{Value, json};

pub const T0: i64 = 1_760_000_000;

pub fn ts(secs: i64) -> String {
    Timestamp::from_second(T0 + secs).unwrap().to_string()
}

pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(T0 + secs).unwrap()
}

pub fn snapshot(now: i64) -> Snapshot {
    Snapshot {
        now: at(now),
        ..Snapshot::default()
    }
}

/// A pool selecting `node-role.kubernetes.io/<name>`, targeting `target`.
pub fn pool(name: &str, target: &str, total: i32, updated: i32) -> MachineConfigPool {
    PoolBuilder::new(name)
        .role(name)
        .target(target)
        .status(json!({
            "configuration": {"name": "rendered-old"},
            "machineCount": total,
            "updatedMachineCount": updated,
            "readyMachineCount": updated,
            "conditions": [],
        }))
        .build()
}

pub fn with_sources(
    mut p: MachineConfigPool,
    target: &[&str],
    current: &[&str],
) -> MachineConfigPool {
    let refs = |names: &[&str]| -> Vec<k8s_openapi::api::core::v1::ObjectReference> {
        names
            .iter()
            .map(|n| k8s_openapi::api::core::v1::ObjectReference {
                name: Some(n.to_string()),
                kind: Some("MachineConfig".into()),
                ..Default::default()
            })
            .collect()
    };
    p.spec.configuration.as_mut().unwrap().source = refs(target);
    p.status
        .as_mut()
        .unwrap()
        .configuration
        .as_mut()
        .unwrap()
        .source = refs(current);
    p
}

pub fn pool_condition(
    mut p: MachineConfigPool,
    type_: &str,
    status: &str,
    message: &str,
) -> MachineConfigPool {
    p.status
        .as_mut()
        .unwrap()
        .conditions
        .push(mco_api::MachineConfigPoolCondition {
            type_: type_.into(),
            status: status.into(),
            message: message.into(),
            ..Default::default()
        });
    p
}

/// A Ready node with the role label of `role` and the given daemon annotations.
pub fn node(
    name: &str,
    role: &str,
    current: &str,
    desired: &str,
    state: &str,
    reason: &str,
) -> Node {
    NodeBuilder::new(name)
        .role(role)
        .current_config(current)
        .desired_config(desired)
        .state(state)
        .reason(reason)
        .ready(true)
        .build()
}

pub fn cordon(mut n: Node, desired_drain: &str, last_applied: &str) -> Node {
    n.spec.get_or_insert_default().unschedulable = Some(true);
    let a = n.metadata.annotations.get_or_insert_default();
    a.insert(
        "machineconfiguration.openshift.io/desiredDrain".into(),
        desired_drain.into(),
    );
    a.insert(
        "machineconfiguration.openshift.io/lastAppliedDrain".into(),
        last_applied.into(),
    );
    n
}

pub fn label(mut n: Node, key: &str) -> Node {
    n.metadata
        .labels
        .get_or_insert_default()
        .insert(key.into(), String::new());
    n
}

/// An MCN with `(type, status, message, seconds after T0)` conditions.
pub fn mcn(
    name: &str,
    pool: &str,
    current: &str,
    desired: &str,
    conds: &[(&str, &str, &str, i64)],
) -> MachineConfigNode {
    let conditions: Vec<Value> = conds
        .iter()
        .map(|(t, s, m, at)| {
            json!({"type": t, "status": s, "message": m, "reason": t, "lastTransitionTime": ts(*at)})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1alpha1",
        "kind": "MachineConfigNode",
        "metadata": {"name": name},
        "spec": {"nodeRef": {"name": name}, "pool": {"name": pool}, "configVersion": {"desired": desired}},
        "status": {"conditions": conditions, "configVersion": {"current": current, "desired": desired}}
    }))
    .unwrap()
}

pub fn pod(ns: &str, name: &str, node: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

pub fn pdb(ns: &str, name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"namespace": ns, "name": name},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 3}
    }))
    .unwrap()
}

pub fn mc(name: &str, spec: Value) -> MachineConfig {
    MachineConfigBuilder::new(name).spec(spec).build()
}

/// Upstream's full, in-order condition set of a node that finished an update that started at
/// `start` and ended at `end`.
pub fn completed(name: &str, pool: &str, cfg: &str, start: i64, end: i64) -> MachineConfigNode {
    mcn(
        name,
        pool,
        cfg,
        cfg,
        &[
            ("UpdatePrepared", "True", "Update Compatible.", start),
            ("UpdateExecuted", "True", "", start + 1),
            ("UpdatePostActionComplete", "True", "", start + 2),
            ("UpdateComplete", "True", "", end - 1),
            ("Resumed", "True", "", end - 1),
            ("Updated", "True", "Node Updated", end),
        ],
    )
}
