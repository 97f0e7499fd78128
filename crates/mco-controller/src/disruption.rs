//! The node disruption policy: reads `MachineConfiguration/cluster`, merges the administrator's
//! `spec.nodeDisruptionPolicy` over upstream's defaults and publishes the result in
//! `status.nodeDisruptionPolicyStatus.clusterPolicies`, where every daemon reads it.
//!
//! An invalid policy sets `NodeDisruptionPolicyDegraded=True` with the field and the reason, and
//! leaves the published policy as it was, so nodes keep acting on the last valid one. An
//! `Unmanaged` or `Removed` object is left alone, as upstream's operator leaves it. The status is
//! written by merge patch of the fields mco owns; others (boot image status, upstream's
//! conditions) are kept.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client};
use mco_api::operator::{MACHINE_CONFIGURATION_NAME, NodeDisruptionPolicyStatus};
use mco_api::{MachineConfiguration, MachineConfigurationSpec, MachineConfigurationStatus};
use serde_json::json;

use crate::Error;

/// The condition this controller owns on the MachineConfiguration.
pub const DEGRADED: &str = "NodeDisruptionPolicyDegraded";
/// The field manager of the status writes.
pub const FIELD_MANAGER: &str = "machine-config-controller";

/// What the controller writes for one observed object: the status fields it owns, or `None`
/// when the object is not managed.
pub fn desired_status(mc: &MachineConfiguration, now: Time) -> Option<MachineConfigurationStatus> {
    if !mc.spec.managed() {
        return None;
    }
    let old = mc.status.clone().unwrap_or_default();
    let (status, reason, message, published) =
        match mco_render::policy::merge(mc.spec.node_disruption_policy.as_ref()) {
            Ok(merged) => (
                "False",
                "AsExpected",
                "The node disruption policy is valid and published in status.nodeDisruptionPolicyStatus".to_owned(),
                Some(NodeDisruptionPolicyStatus {
                    cluster_policies: mco_render::policy::to_status(&merged),
                }),
            ),
            Err(e) => (
                "True",
                "InvalidNodeDisruptionPolicy",
                format!("invalid node disruption policy, the previous one stays in force: {e}"),
                old.node_disruption_policy_status.clone(),
            ),
        };
    let generation = mc.metadata.generation;
    let mut conditions: Vec<Condition> = old
        .conditions
        .iter()
        .filter(|c| c.type_ != DEGRADED)
        .cloned()
        .collect();
    let previous = old.conditions.iter().find(|c| c.type_ == DEGRADED);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now,
    };
    conditions.push(Condition {
        type_: DEGRADED.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time,
        observed_generation: generation,
    });
    Some(MachineConfigurationStatus {
        observed_generation: generation,
        conditions,
        node_disruption_policy_status: published,
        other: Default::default(),
    })
}

/// Whether `want` differs from what the object's status holds in the fields mco owns.
fn changed(have: Option<&MachineConfigurationStatus>, want: &MachineConfigurationStatus) -> bool {
    let Some(have) = have else { return true };
    have.observed_generation != want.observed_generation
        || have.conditions != want.conditions
        || have.node_disruption_policy_status != want.node_disruption_policy_status
}

struct Ctx {
    api: Api<MachineConfiguration>,
}

async fn reconcile(mc: Arc<MachineConfiguration>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let Some(want) = desired_status(&mc, now) else {
        tracing::info!(
            state = %mc.spec.management_state,
            "MachineConfiguration/cluster is not Managed; its status is left alone"
        );
        return Ok(Action::await_change());
    };
    if !changed(mc.status.as_ref(), &want) {
        return Ok(Action::await_change());
    }
    if let Some(c) = want.conditions.iter().find(|c| c.type_ == DEGRADED)
        && c.status == "True"
    {
        tracing::warn!(message = %c.message, "node disruption policy refused");
    } else {
        tracing::info!("Updating MachineConfiguration status");
    }
    let patch = json!({"status": {
        "observedGeneration": want.observed_generation,
        "conditions": want.conditions,
        "nodeDisruptionPolicyStatus": want.node_disruption_policy_status,
    }});
    ctx.api
        .patch_status(
            MACHINE_CONFIGURATION_NAME,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(Action::await_change())
}

/// Creates `cluster` when it is missing, as upstream's operator does; a cluster without the CRD
/// is told so in the log and retried later.
async fn ensure_object(api: &Api<MachineConfiguration>) -> Result<(), kube::Error> {
    if api.get_opt(MACHINE_CONFIGURATION_NAME).await?.is_some() {
        return Ok(());
    }
    tracing::info!("MachineConfiguration object doesn't exist; a new one will be created");
    let obj = MachineConfiguration::new(
        MACHINE_CONFIGURATION_NAME,
        MachineConfigurationSpec {
            management_state: "Managed".into(),
            ..Default::default()
        },
    );
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs until dropped.
pub async fn run(client: Client) {
    let api: Api<MachineConfiguration> = Api::all(client);
    let mut retry = Duration::from_secs(1);
    while let Err(e) = ensure_object(&api).await {
        tracing::warn!(error = %e, "MachineConfiguration/cluster not readable (is its CRD installed?); retrying");
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(300));
    }
    let ctx = Arc::new(Ctx { api: api.clone() });
    Controller::new(
        api,
        watcher::Config::default().fields(&format!("metadata.name={MACHINE_CONFIGURATION_NAME}")),
    )
    .run(
        reconcile,
        |_, e, _| {
            tracing::warn!(error = %e, "node disruption policy");
            Action::requeue(Duration::from_secs(5))
        },
        ctx,
    )
    .for_each(|_| futures::future::ready(()))
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn object(spec: serde_json::Value, status: serde_json::Value) -> MachineConfiguration {
        serde_json::from_value(json!({
            "apiVersion": "operator.openshift.io/v1",
            "kind": "MachineConfiguration",
            "metadata": {"name": "cluster", "generation": 3},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn a_valid_policy_is_published_with_the_generation() {
        let mc = object(
            json!({"managementState": "Managed", "nodeDisruptionPolicy": {"files": [
                {"path": "/etc/chrony.conf", "actions": [{"type": "Restart", "restart": {"serviceName": "chronyd.service"}}]}]}}),
            json!({"conditions": [{"type": "BootImageUpdateDegraded", "status": "False",
                "reason": "x", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        let s = desired_status(&mc, t("2026-02-01T00:00:00Z")).unwrap();
        assert_eq!(s.observed_generation, Some(3));
        let files = &s
            .node_disruption_policy_status
            .unwrap()
            .cluster_policies
            .files;
        assert_eq!(files.last().unwrap().path, "/etc/chrony.conf");
        // Upstream's own conditions are kept.
        assert_eq!(s.conditions[0].type_, "BootImageUpdateDegraded");
        assert_eq!(s.conditions[1].type_, DEGRADED);
        assert_eq!(s.conditions[1].status, "False");
    }

    #[test]
    fn an_invalid_policy_keeps_the_published_one_and_names_the_field() {
        let published = json!({"clusterPolicies": {"files": [{"path": "/etc/a", "actions": [{"type": "None"}]}]}});
        let mc = object(
            json!({"nodeDisruptionPolicy": {"units": [{"name": "a.service", "actions": [{"type": "Restart"}]}]}}),
            json!({"nodeDisruptionPolicyStatus": published, "observedGeneration": 2,
                   "conditions": [{"type": DEGRADED, "status": "True", "reason": "InvalidNodeDisruptionPolicy",
                                   "message": "old", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        let s = desired_status(&mc, t("2026-02-01T00:00:00Z")).unwrap();
        assert_eq!(
            serde_json::to_value(s.node_disruption_policy_status).unwrap(),
            published
        );
        let c = &s.conditions[0];
        assert_eq!(c.status, "True");
        assert!(
            c.message
                .contains("spec.nodeDisruptionPolicy.units[0].actions[0].restart"),
            "{}",
            c.message
        );
        // Still True: the transition time stays.
        assert_eq!(c.last_transition_time, t("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn unmanaged_and_removed_objects_are_left_alone() {
        for state in ["Unmanaged", "Removed"] {
            let mc = object(json!({"managementState": state}), json!({}));
            assert_eq!(desired_status(&mc, t("2026-02-01T00:00:00Z")), None);
        }
        let mc = object(json!({}), json!({}));
        assert!(desired_status(&mc, t("2026-02-01T00:00:00Z")).is_some());
    }
}
