//! `RolloutPolicy` (`rollouts.mco.dev/v1alpha1`): mco's own, cluster-scoped policy for how a
//! pool's rollout proceeds — canary, soak, health gates, maintenance windows, rollback.
//!
//! It lives in an API group of its own so that upstream's `MachineConfigPool` schema stays as it
//! is: a policy selects pools by label, and the controller reads both. The manual controls
//! (halt, resume, promote, rollback) are annotations on the pool ([`annotations`]), so `kubectl`
//! and `mco rollout` act the same way and the pool's schema is still untouched.
//!
//! Counts and durations are not constrained in the schema: the controller validates them and
//! reports a condition naming the field, which says more than a rejected `apply`.

// Every `printcolumn(...)` repeats the same keys; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of mco's own objects.
pub const GROUP: &str = "rollouts.mco.dev";

/// The prefix of every annotation in [`annotations`].
pub const ANNOTATION_PREFIX: &str = "rollouts.mco.dev/";

/// Annotations on a `MachineConfigPool` that steer its rollout, and on a Node the daemon's
/// node-check result.
pub mod annotations {
    /// `"true"`: target no new node in this pool (`mco rollout halt`). Removed by
    /// `mco rollout resume`.
    pub const HALT: &str = "rollouts.mco.dev/halt";
    /// An RFC 3339 time: gate failures observed before it no longer halt the pool
    /// (`mco rollout resume`).
    pub const RESUMED_AT: &str = "rollouts.mco.dev/resumed-at";
    /// A rendered config name: its canary and soak are skipped (`mco rollout promote`).
    pub const PROMOTE: &str = "rollouts.mco.dev/promote";
    /// A rendered config name the pool is rolled (back) to instead of `spec.configuration`
    /// (`mco rollback`). Dropped by the controller once `spec.configuration` names it again.
    pub const ROLLBACK_TO: &str = "rollouts.mco.dev/rollback-to";
    /// On a Node: the daemon's last node-check result, a JSON [`super::NodeCheckResult`].
    pub const NODE_CHECKS: &str = "rollouts.mco.dev/node-checks";
    /// On a Node: whole seconds the daemon gives each node check, from the governing policy's
    /// `nodeChecks.timeout`. The controller writes it with `desiredConfig`; absent, the daemon
    /// uses [`super::limits::DEFAULT_CHECK_TIMEOUT_SECS`].
    pub const NODE_CHECK_TIMEOUT: &str = "rollouts.mco.dev/node-check-timeout";
}

/// Condition types a policy reports per pool (and `RolloutHalted` / `RollbackPinned` on the pool).
pub mod conditions {
    /// The policy or one of its fields is invalid; it governs no pool.
    pub const INVALID: &str = "Invalid";
    /// Another policy selects the same pool; neither governs it.
    pub const CONFLICT: &str = "Conflict";
    pub const HALTED: &str = "Halted";
    pub const SOAKING: &str = "Soaking";
    pub const WAITING_FOR_WINDOW: &str = "WaitingForWindow";
    /// On the pool: a policy halted its rollout.
    pub const POOL_HALTED: &str = "RolloutHalted";
    /// On the pool: it is pinned by a rollback to a config other than `spec.configuration`.
    pub const POOL_PINNED: &str = "RollbackPinned";
}

/// Limits on what a policy may hold; each is checked, and a policy past one is `Invalid`.
pub mod limits {
    pub const MAX_WINDOWS: usize = 16;
    pub const MAX_HTTP_PROBES: usize = 8;
    /// Bytes of a node check's or probe's output kept in a message.
    pub const MAX_OUTPUT_BYTES: usize = 4096;
    pub const MAX_URL_BYTES: usize = 2048;
    pub const MAX_SCHEDULE_BYTES: usize = 256;
    /// A node check's timeout when the policy names none.
    pub const DEFAULT_CHECK_TIMEOUT_SECS: u64 = 60;
    /// The longest `nodeChecks.timeout`: the daemon reports Done only after its checks, so a
    /// longer one would hold an update that long per check.
    pub const MAX_CHECK_TIMEOUT_SECS: u64 = 600;
}

/// The per-check timeout a Node's [`annotations::NODE_CHECK_TIMEOUT`] asks for: whole seconds,
/// at least 1, at most [`limits::MAX_CHECK_TIMEOUT_SECS`]; absent or unreadable, the default.
pub fn check_timeout(annotation: Option<&str>) -> std::time::Duration {
    let secs = annotation
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(limits::DEFAULT_CHECK_TIMEOUT_SECS, |s| {
            s.min(limits::MAX_CHECK_TIMEOUT_SECS)
        });
    std::time::Duration::from_secs(secs)
}

/// How a pool's rollout proceeds.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "rollouts.mco.dev",
    version = "v1alpha1",
    kind = "RolloutPolicy",
    plural = "rolloutpolicies",
    singular = "rolloutpolicy",
    shortname = "rp",
    status = "RolloutPolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "RolloutPolicy gates the rollouts of the MachineConfigPools it selects: canary, soak, health gates, maintenance windows and rollback.",
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Valid")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicySpec {
    /// The pools this policy governs, by their labels. Absent or empty selects no pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_selector: Option<LabelSelector>,
    /// The nodes that update first; the rest wait for them and the soak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
    /// How long the updated canary must pass every gate before the rest go on, e.g. `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,
    /// Checked on each node after its update; a failure halts the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<Gates>,
    /// When updates that drain or reboot may start. Empty: at any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Window>,
    /// Roll the pool back to its previous config when a gate fails.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_rollback: bool,
}

/// The canary's size: `nodes`, or `percent` of the pool rounded up. Exactly one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Gates {
    /// The node is Ready again after its update, within the timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ready: Option<TimeoutGate>,
    /// Every pod on the node is Ready within the timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_ready: Option<TimeoutGate>,
    /// The pool's PodDisruptionBudgets allow disruptions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pdbs: bool,
    /// HTTP probes that must answer the expected status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<HttpProbe>,
    /// The executables in the node's `/etc/mco/health.d/`, run by the daemon after the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_checks: Option<TimeoutGate>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutGate {
    /// e.g. `5m`; default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpProbe {
    /// `http://` or `https://`.
    pub url: String,
    /// Default 200.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<i64>,
    /// Default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// A maintenance window: it opens at each time `schedule` (5-field cron) names, in `timeZone`
/// (IANA, default UTC), and stays open for `duration`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    pub schedule: String,
    pub duration: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// A condition, in the shape of `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Valid`, `Conflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PolicyCondition>,
    /// One entry per pool this policy governs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolRollout>,
}

/// Where one pool's rollout stands under the policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolRollout {
    pub pool: String,
    /// The rendered config this rollout moves to.
    #[serde(default)]
    pub target: String,
    /// `Canary`, `Soaking`, `RollingOut`, `Halted`, `WaitingForWindow`, `Complete`.
    #[serde(default)]
    pub phase: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canary_nodes: Vec<String>,
    /// Nodes already pointed at the target when this rollout began (the nodes a rollback
    /// leaves where they are): neither canary nor gated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_start_time: Option<String>,
    /// Set once the canary is through (soaked or promoted) for `target`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub promoted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt: Option<Halt>,
    /// When the next maintenance window opens, while the rollout waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PolicyCondition>,
}

/// Why a pool's rollout is halted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Halt {
    /// Empty for a manual halt.
    #[serde(default)]
    pub node: String,
    /// `manual`, `nodeReady`, `nodeChecks`, `podsReady`, `pdbs`, `http`.
    pub gate: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// What the daemon records on its Node after running `/etc/mco/health.d/`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeCheckResult {
    /// The config the node had just updated to.
    pub config: String,
    pub passed: bool,
    /// The first failing check's file name; empty when all passed.
    #[serde(default)]
    pub check: String,
    /// Its output, cut to [`limits::MAX_OUTPUT_BYTES`].
    #[serde(default)]
    pub output: String,
    /// RFC 3339.
    #[serde(default)]
    pub time: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn check_timeout_defaults_and_is_held_to_its_limit() {
        assert_eq!(check_timeout(None), Duration::from_secs(60));
        assert_eq!(check_timeout(Some("")), Duration::from_secs(60));
        assert_eq!(check_timeout(Some("0")), Duration::from_secs(60));
        assert_eq!(check_timeout(Some("-5")), Duration::from_secs(60));
        assert_eq!(check_timeout(Some("90s")), Duration::from_secs(60));
        assert_eq!(check_timeout(Some(" 5 ")), Duration::from_secs(5));
        assert_eq!(check_timeout(Some("600")), Duration::from_secs(600));
        assert_eq!(check_timeout(Some("601")), Duration::from_secs(600));
        assert_eq!(
            check_timeout(Some("99999999999999999999999")),
            Duration::from_secs(60)
        );
    }
}
