//! Pinned image sets, as upstream's pinned-image-set and node controllers compute them: which
//! PinnedImageSets a pool lists in `spec.pinnedImageSets`, and what its status says of them
//! (`poolSynchronizersStatus`, the `PinnedImageSetsDegraded` condition).

use std::borrow::Borrow;

use mco_api::pinned::{POOL_DEGRADED, POOL_SYNCHRONIZER, PinnedImageSet};
use mco_api::pool::PoolSynchronizerStatus;
use mco_api::{MachineConfigNode, MachineConfigPool, MachineConfigPoolStatus, ObjectName};
use mco_apimachinery::selector::LabelSelector;

use crate::condition::set_condition;

/// The pool's `machineConfigSelector`, parsed; `None` when it is nil or empty, which picks no set
/// (upstream: "a pool with a nil or empty selector ... should match nothing").
fn selector(pool: &MachineConfigPool) -> Result<Option<LabelSelector>, String> {
    let parsed = mco_api::select::parse(pool.spec.machine_config_selector.as_ref())
        .map_err(|e| e.to_string())?;
    Ok(parsed.filter(|s| !s.is_empty()))
}

/// The `spec.pinnedImageSets` a pool gets: every set whose labels its `machineConfigSelector`
/// matches, by name, sorted. It replaces the pool's list, so a set listed by hand that the
/// selector does not match is dropped.
///
/// As upstream's controller: a nil selector selects nothing, so the list is emptied; an empty
/// one (`{}`) is skipped, and `Ok(None)` leaves the pool's list as it is. `Err`: the selector
/// is invalid; the reason, for [`degraded_message`].
pub fn pool_sets<S: Borrow<PinnedImageSet>>(
    pool: &MachineConfigPool,
    sets: &[S],
) -> Result<Option<Vec<ObjectName>>, String> {
    if pool.spec.machine_config_selector.is_none() {
        return Ok(Some(Vec::new()));
    }
    if selector(pool)?.is_none() {
        return Ok(None);
    }
    Ok(Some(
        mco_api::pinned::sets_for_pool(pool, sets.iter().map(Borrow::borrow))
            .into_iter()
            .map(|s| ObjectName {
                name: s.metadata.name.clone().unwrap_or_default(),
            })
            .collect(),
    ))
}

/// Why the pool's sets cannot be computed from its own spec (an invalid `machineConfigSelector`),
/// as the `PinnedImageSetsDegraded` message.
pub fn spec_failure(pool: &MachineConfigPool) -> Option<String> {
    pool.spec.machine_config_selector.as_ref()?;
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    selector(pool).err().map(|e| degraded_message(name, &e))
}

/// Upstream's `PinnedImageSetsDegraded` message for a pool whose sets could not be synced.
pub fn degraded_message(pool: &str, err: &str) -> String {
    format!("Failed to populate pinned image sets for pool {pool}: {err}")
}

/// Whether a node counts in the synchronizer's `updatedMachineCount`: every set its
/// MachineConfigNode reports is current (upstream's `isPinnedImageSetsUpdated`). A node that
/// reports no set counts.
pub fn mcn_updated(mcn: &MachineConfigNode) -> bool {
    mcn.status
        .as_ref()
        .and_then(|s| s.pinned_image_sets.as_ref())
        .is_none_or(|sets| sets.iter().all(|s| s.is_current()))
}

/// The pool's one synchronizer entry. `status` already holds the pool's counts;
/// `updated` is how many of its nodes' MachineConfigNodes are [`mcn_updated`].
pub fn synchronizer(status: &MachineConfigPoolStatus, updated: usize) -> PoolSynchronizerStatus {
    let machines = i64::from(status.machine_count);
    let unavailable = i64::from(status.unavailable_machine_count);
    PoolSynchronizerStatus {
        pool_synchronizer_type: POOL_SYNCHRONIZER.to_string(),
        machine_count: machines,
        updated_machine_count: i64::try_from(updated).unwrap_or(i64::MAX),
        ready_machine_count: i64::from(status.ready_machine_count),
        available_machine_count: machines - unavailable,
        unavailable_machine_count: unavailable,
        observed_generation: None,
    }
}

/// Writes the pinned image sets' part of a pool status whose counts are computed:
/// `poolSynchronizersStatus` (exactly one entry) and `PinnedImageSetsDegraded`, `True` with
/// `failure` as its message, else `False` with neither reason nor message.
pub fn set_status(
    status: &mut MachineConfigPoolStatus,
    updated: usize,
    failure: Option<&str>,
    now: &str,
) {
    status.pool_synchronizers_status = vec![synchronizer(status, updated)];
    set_condition(
        &mut status.conditions,
        POOL_DEGRADED,
        failure.is_some(),
        "",
        failure.unwrap_or_default(),
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as K8sSelector, LabelSelectorRequirement,
    };
    use mco_api::pinned::PinnedImageSetSpec;
    use mco_api::{MachineConfigNodeStatus, MachineConfigPoolSpec};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    const ROLE: &str = "machineconfiguration.openshift.io/role";

    fn pool(name: &str, selector: Option<K8sSelector>) -> MachineConfigPool {
        MachineConfigPool::new(
            name,
            MachineConfigPoolSpec {
                machine_config_selector: selector,
                ..Default::default()
            },
        )
    }

    fn role(role: &str) -> Option<K8sSelector> {
        Some(K8sSelector {
            match_labels: Some([(ROLE.to_string(), role.to_string())].into()),
            match_expressions: None,
        })
    }

    fn set(name: &str, labels: &[(&str, &str)]) -> PinnedImageSet {
        let mut s = PinnedImageSet::new(name, PinnedImageSetSpec::default());
        s.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s
    }

    fn names(list: &[ObjectName]) -> Vec<&str> {
        list.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn a_pool_lists_the_sets_its_selector_matches_by_name() {
        let sets = [
            set("b-worker", &[(ROLE, "worker")]),
            set("a-worker", &[(ROLE, "worker"), ("extra", "x")]),
            set("master", &[(ROLE, "master")]),
            set("unlabelled", &[]),
        ];
        let worker = pool_sets(&pool("worker", role("worker")), &sets)
            .unwrap()
            .unwrap();
        assert_eq!(names(&worker), ["a-worker", "b-worker"]);
        let master = pool_sets(&pool("master", role("master")), &sets)
            .unwrap()
            .unwrap();
        assert_eq!(names(&master), ["master"]);
        // No set matches: an empty list, which the controller writes as no field.
        let infra = pool_sets(&pool("infra", role("infra")), &sets)
            .unwrap()
            .unwrap();
        assert!(infra.is_empty());
        // Expressions match as everywhere else.
        let either = pool(
            "either",
            Some(K8sSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: ROLE.into(),
                    operator: "In".into(),
                    values: Some(vec!["master".into(), "worker".into()]),
                }]),
            }),
        );
        let either = pool_sets(&either, &sets).unwrap().unwrap();
        assert_eq!(names(&either), ["a-worker", "b-worker", "master"]);
    }

    #[test]
    fn the_computed_list_replaces_one_written_by_hand() {
        let mut p = pool("worker", role("worker"));
        p.spec.pinned_image_sets = vec![ObjectName {
            name: "by-hand".into(),
        }];
        let sets = [
            set("by-hand", &[(ROLE, "master")]),
            set("w", &[(ROLE, "worker")]),
        ];
        assert_eq!(names(&pool_sets(&p, &sets).unwrap().unwrap()), ["w"]);
    }

    #[test]
    fn a_nil_selector_empties_the_list_and_an_empty_one_leaves_it() {
        let sets = [set("a", &[(ROLE, "worker")]), set("b", &[])];
        assert_eq!(pool_sets(&pool("nil", None), &sets), Ok(Some(vec![])));
        let empty = pool("empty", Some(K8sSelector::default()));
        assert_eq!(pool_sets(&empty, &sets), Ok(None));
        assert_eq!(spec_failure(&empty), None);
    }

    #[test]
    fn an_invalid_selector_is_a_failure_with_upstreams_message() {
        let bad = pool(
            "worker",
            Some(K8sSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: ROLE.into(),
                    operator: "Sometimes".into(),
                    values: None,
                }]),
            }),
        );
        let err = pool_sets(&bad, &[set("a", &[(ROLE, "worker")])]).unwrap_err();
        assert!(err.contains("Sometimes"), "{err}");
        let message = spec_failure(&bad).expect("a failure");
        assert_eq!(
            message,
            format!("Failed to populate pinned image sets for pool worker: {err}")
        );
        assert_eq!(spec_failure(&pool("worker", role("worker"))), None);
    }

    fn mcn(sets: Option<serde_json::Value>) -> MachineConfigNode {
        let mut m: MachineConfigNode = serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigNode",
            "metadata": {"name": "n"},
            "spec": {"pool": {"name": "worker"}, "configVersion": {"desired": "r"}},
        }))
        .unwrap();
        if let Some(sets) = sets {
            m.status = Some(MachineConfigNodeStatus {
                pinned_image_sets: Some(serde_json::from_value(sets).unwrap()),
                ..Default::default()
            });
        }
        m
    }

    #[test]
    fn a_node_is_updated_when_every_set_it_reports_is_current() {
        assert!(mcn_updated(&mcn(None)), "no status");
        assert!(mcn_updated(&mcn(Some(json!([])))), "no set");
        assert!(mcn_updated(&mcn(Some(json!([
            {"name": "a", "desiredGeneration": 2, "currentGeneration": 2},
            {"name": "b", "desiredGeneration": 1, "currentGeneration": 1},
        ])))));
        for lagging in [
            json!([{"name": "a", "desiredGeneration": 2, "currentGeneration": 1}]),
            json!([{"name": "a", "desiredGeneration": 2}]),
            json!([{"name": "a"}]),
            json!([{"name": "a", "desiredGeneration": 1, "currentGeneration": 1},
                   {"name": "b", "desiredGeneration": 3, "currentGeneration": 2,
                    "lastFailedGeneration": 3, "lastFailedGenerationError": "pull"}]),
        ] {
            assert!(!mcn_updated(&mcn(Some(lagging.clone()))), "{lagging}");
        }
    }

    #[test]
    fn the_status_has_one_synchronizer_from_the_pools_counts_and_the_condition() {
        let mut status = MachineConfigPoolStatus {
            machine_count: 5,
            updated_machine_count: 2,
            ready_machine_count: 3,
            unavailable_machine_count: 1,
            pool_synchronizers_status: vec![PoolSynchronizerStatus {
                pool_synchronizer_type: "Upstream's".into(),
                observed_generation: Some(7),
                ..Default::default()
            }],
            ..Default::default()
        };
        set_status(&mut status, 4, None, "2026-01-01T00:00:00Z");
        assert_eq!(
            serde_json::to_value(&status.pool_synchronizers_status).unwrap(),
            json!([{"poolSynchronizerType": "PinnedImageSets", "machineCount": 5,
                    "updatedMachineCount": 4, "readyMachineCount": 3,
                    "availableMachineCount": 4, "unavailableMachineCount": 1}])
        );
        let c = status.condition(POOL_DEGRADED).unwrap().clone();
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"type": "PinnedImageSetsDegraded", "status": "False",
                   "lastTransitionTime": "2026-01-01T00:00:00Z"})
        );

        // Failing: True with the message; the transition time moves once.
        set_status(&mut status, 4, Some("no"), "2026-01-02T00:00:00Z");
        set_status(&mut status, 4, Some("no"), "2026-01-03T00:00:00Z");
        let c = status.condition(POOL_DEGRADED).unwrap();
        assert_eq!((c.status.as_str(), c.message.as_str()), ("True", "no"));
        assert_eq!(
            c.last_transition_time.as_deref(),
            Some("2026-01-02T00:00:00Z")
        );
        assert_eq!(status.conditions.len(), 1);

        // Nothing else of the status moves.
        assert_eq!((status.machine_count, status.updated_machine_count), (5, 2));
    }
}
