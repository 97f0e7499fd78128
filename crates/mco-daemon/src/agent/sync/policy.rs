//! The node disruption policy an update acts on: the merged policies the controller publishes in
//! `MachineConfiguration/cluster`'s `status.nodeDisruptionPolicyStatus.clusterPolicies`, read
//! when an update is planned, as upstream's daemon does. Without a readable published policy
//! (no CRD, no object, no status yet, or a status that does not parse) the update uses
//! upstream's defaults and says so in the log.
//!
//! The same object's `spec.irreconcilableValidationOverrides` says which storage changes an
//! existing node accepts; upstream's daemon reads it from the spec, and so does this one.

use std::sync::Arc;

use mco_api::MachineConfiguration;
use mco_api::operator::MACHINE_CONFIGURATION_NAME;
use mco_render::reconcile::StorageOverrides;

use super::Inner;
use crate::engine::plan::ActionPolicy;

/// What an update is planned with from `MachineConfiguration/cluster`.
#[derive(Debug)]
pub(super) struct ClusterSettings {
    pub policy: ActionPolicy,
    pub storage_overrides: StorageOverrides,
}

impl Inner {
    /// The action policy and the storage overrides an update is planned with. Callers read it
    /// alongside the target config: each is a round trip between the new `desiredConfig` and
    /// the drain request.
    pub(super) async fn cluster_settings(&self) -> ClusterSettings {
        let object = match self
            .machine_configurations
            .get_opt(MACHINE_CONFIGURATION_NAME)
            .await
        {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "reading MachineConfiguration/cluster; using the default node disruption policies");
                return ClusterSettings {
                    policy: ActionPolicy::Disruption,
                    storage_overrides: StorageOverrides::default(),
                };
            }
        };
        let overrides = object
            .as_ref()
            .and_then(|o| o.spec.irreconcilable_validation_overrides.as_ref())
            .map_or_else(StorageOverrides::default, |o| {
                StorageOverrides::from_names(&o.storage)
            });
        ClusterSettings {
            policy: action_policy(object),
            storage_overrides: overrides,
        }
    }
}

/// The merged policy the controller published, or upstream's defaults.
fn action_policy(object: Option<MachineConfiguration>) -> ActionPolicy {
    let published = object
        .and_then(|o| o.status)
        .and_then(|s| s.node_disruption_policy_status);
    let Some(published) = published else {
        tracing::info!("no node disruption policy published; using the defaults");
        return ActionPolicy::Disruption;
    };
    match mco_render::policy::from_status(&published.cluster_policies) {
        Ok(p) => ActionPolicy::Cluster(Arc::new(p)),
        Err(e) => {
            tracing::warn!(error = %e, "published node disruption policy unreadable; using the defaults");
            ActionPolicy::Disruption
        }
    }
}
