//! Garbage collection of rendered configs (beyond upstream, which keeps them forever).
//!
//! A rendered config is deleted only when nothing can still need it: no pool targets or reports
//! it, no node is on it or moving to it, no rollback pins it (`rollouts.mco.dev/rollback-to`), and
//! it is not among the newest `retain` of its pool. The pool's `status.configuration`, the config
//! `mco rollback` returns to by default, is referenced until the pool completes another.
//! Deleting one that a node still needs would brick that node (upstream issues #2010, #2635).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use mco_api::constants::names;
use mco_api::{MachineConfig, MachineConfigPool};

use crate::plan::{current_config, desired_config};

/// The pool a rendered config belongs to: it must carry a controller reference to that pool.
/// A user object that merely looks like a rendered config is never collected.
fn owner_pool(mc: &MachineConfig) -> Option<&str> {
    let name = mc.metadata.name.as_deref()?;
    if !name.starts_with(names::RENDERED_PREFIX) {
        return None;
    }
    let owner = mc
        .metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.kind == "MachineConfigPool" && o.controller == Some(true))?;
    name.starts_with(&format!("{}{}-", names::RENDERED_PREFIX, owner.name))
        .then_some(owner.name.as_str())
}

/// Every rendered config name still referenced by a pool or a node.
pub fn referenced<N: Borrow<Node>>(pools: &[MachineConfigPool], nodes: &[N]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in pools {
        if let Some(c) = &p.spec.configuration {
            out.insert(c.name.clone());
        }
        if let Some(c) = p.status.as_ref().and_then(|s| s.configuration.as_ref()) {
            out.insert(c.name.clone());
        }
        // A rollback's pin is the pool's target while it lasts.
        if let Some(pin) = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(mco_api::rollouts::annotations::ROLLBACK_TO))
        {
            out.insert(pin.clone());
        }
    }
    for n in nodes {
        let n = n.borrow();
        out.insert(current_config(n).to_string());
        out.insert(desired_config(n).to_string());
    }
    out.remove("");
    out
}

/// Names of the rendered configs to delete, sorted.
pub fn to_delete<N: Borrow<Node>>(
    mcs: &[MachineConfig],
    pools: &[MachineConfigPool],
    nodes: &[N],
    retain: usize,
) -> Vec<String> {
    let keep = referenced(pools, nodes);
    let live_pools: BTreeSet<&str> = pools
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let mut by_pool: BTreeMap<&str, Vec<&MachineConfig>> = BTreeMap::new();
    for mc in mcs {
        if let Some(pool) = owner_pool(mc)
            && live_pools.contains(pool)
        {
            by_pool.entry(pool).or_default().push(mc);
        }
    }
    let mut out = vec![];
    for (_, mut group) in by_pool {
        // Newest first. Timestamps have one-second resolution, so the resourceVersion (rendered
        // configs are written once) breaks ties, then the name, so the choice is stable.
        let key = |m: &MachineConfig| {
            (
                m.metadata.creation_timestamp.as_ref().map(|t| t.0),
                m.metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok()),
            )
        };
        group.sort_by(|a, b| {
            key(b)
                .cmp(&key(a))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        for mc in group.into_iter().skip(retain) {
            let name = mc.metadata.name.clone().unwrap_or_default();
            if !keep.contains(&name) {
                out.push(name);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_NODES: &[Node] = &[];
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use mco_api::constants::annotations;
    use mco_api::{MachineConfigPoolSpec, MachineConfigPoolStatus, PoolConfiguration};

    fn rendered(pool: &str, n: i64) -> MachineConfig {
        let mut mc = MachineConfig::new(&format!("rendered-{pool}-{n:02}"), Default::default());
        mc.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(1_700_000_000 + n).unwrap(),
        ));
        mc.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "machineconfiguration.openshift.io/v1".into(),
            kind: "MachineConfigPool".into(),
            name: pool.into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        mc
    }

    fn pool(name: &str, spec: &str, status: &str) -> MachineConfigPool {
        let mut p = MachineConfigPool::new(
            name,
            MachineConfigPoolSpec {
                configuration: Some(PoolConfiguration {
                    name: spec.into(),
                    source: vec![],
                }),
                ..Default::default()
            },
        );
        p.status = Some(MachineConfigPoolStatus {
            configuration: Some(PoolConfiguration {
                name: status.into(),
                source: vec![],
            }),
            ..Default::default()
        });
        p
    }

    fn node_on(current: &str, desired: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n".into());
        n.metadata.annotations = Some(
            [
                (annotations::CURRENT_CONFIG.to_string(), current.to_string()),
                (annotations::DESIRED_CONFIG.to_string(), desired.to_string()),
            ]
            .into(),
        );
        n
    }

    #[test]
    fn keeps_newest_and_everything_referenced() {
        let mcs: Vec<MachineConfig> = (0..10).map(|i| rendered("worker", i)).collect();
        let pools = vec![pool("worker", "rendered-worker-09", "rendered-worker-01")];
        let nodes = vec![node_on("rendered-worker-02", "rendered-worker-03")];
        let gone = to_delete(&mcs, &pools, &nodes, 3);
        assert_eq!(
            gone,
            vec![
                "rendered-worker-00",
                "rendered-worker-04",
                "rendered-worker-05",
                "rendered-worker-06"
            ]
        );
    }

    #[test]
    fn keeps_a_rollback_pin_and_the_last_completed_config() {
        let mcs: Vec<MachineConfig> = (0..6).map(|i| rendered("worker", i)).collect();
        let mut p = pool("worker", "rendered-worker-05", "rendered-worker-02");
        p.metadata.annotations = Some(
            [(
                mco_api::rollouts::annotations::ROLLBACK_TO.to_string(),
                "rendered-worker-00".to_string(),
            )]
            .into(),
        );
        let gone = to_delete(&mcs, &[p], NO_NODES, 1);
        assert_eq!(
            gone,
            vec![
                "rendered-worker-01",
                "rendered-worker-03",
                "rendered-worker-04"
            ]
        );
    }

    #[test]
    fn resource_version_breaks_timestamp_ties() {
        let mcs: Vec<MachineConfig> = (0..3)
            .map(|i| {
                let mut m = rendered("worker", 0);
                m.metadata.name = Some(format!("rendered-worker-{}", ["b", "c", "a"][i]));
                m.metadata.resource_version = Some(format!("{}", 10 + i));
                m
            })
            .collect();
        let pools = vec![pool("worker", "", "")];
        assert_eq!(
            to_delete(&mcs, &pools, NO_NODES, 1),
            vec!["rendered-worker-b", "rendered-worker-c"]
        );
    }

    #[test]
    fn retain_counts_per_pool() {
        let mut mcs: Vec<MachineConfig> = (0..3).map(|i| rendered("worker", i)).collect();
        mcs.extend((0..3).map(|i| rendered("infra", i)));
        let pools = vec![
            pool("worker", "rendered-worker-02", ""),
            pool("infra", "rendered-infra-02", ""),
        ];
        let gone = to_delete(&mcs, &pools, NO_NODES, 2);
        assert_eq!(gone, vec!["rendered-infra-00", "rendered-worker-00"]);
    }

    #[test]
    fn never_touches_unowned_or_user_configs() {
        let mut fake = rendered("worker", 0);
        fake.metadata.owner_references = None;
        let user = MachineConfig::new("50-worker-chrony", Default::default());
        let mut foreign = rendered("worker", 1);
        foreign.metadata.owner_references.as_mut().unwrap()[0].name = "infra".into();
        let pools = vec![pool("worker", "x", ""), pool("infra", "y", "")];
        assert!(to_delete(&[fake, user, foreign], &pools, NO_NODES, 0).is_empty());
    }

    #[test]
    fn configs_of_deleted_pools_are_left_to_owner_gc() {
        let mcs: Vec<MachineConfig> = (0..3).map(|i| rendered("gone", i)).collect();
        assert!(to_delete(&mcs, &[], NO_NODES, 0).is_empty());
    }
}
