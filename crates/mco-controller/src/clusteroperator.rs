//! The `machine-config` ClusterOperator's status on a cluster taken over from upstream's
//! operator, reported as upstream's operator reports it (`pkg/operator/status.go` and
//! `syncRequiredMachineConfigPools` in `pkg/operator/sync.go`), so that the cluster version
//! operator, which waits in every upgrade for `versions[name=operator]` to name the new
//! release, sees it reached once the pools are on it.
//!
//! [`report`] is pure: from the pools, the rendered configs they name, the ControllerConfig,
//! the release (`releaseVersion` of the ConfigMap `machine-config-osimageurl`) and the status
//! as it stands, the new status and the events to record. [`run`] feeds it and writes the
//! status; it runs only with `--sync-controller-config`, where mco stands in for upstream's
//! operator.
//!
//! The release X is reached, as upstream's `isMachineConfigPoolConfigurationValid` has it,
//! when no pool is degraded and every pool labelled
//! `operator.machineconfiguration.openshift.io/required-for-upgrade` is `Updated` at its
//! generation on a rendered config carrying the annotation
//! `machineconfiguration.openshift.io/release-image-version: X` and the ControllerConfig's OS
//! image (or one a MachineConfig overrode). Upstream also checks that each config was rendered
//! by its own controller build (`generated-by-controller-version`); mco's rendered configs
//! carry mco's version, so that check has no counterpart here.
//!
//! Where upstream waits (up to ten minutes per required node) before a degraded pool turns into
//! `Degraded=True`, this report says so at once: mco has no sync loop that blocks for the
//! pools, and a degraded pool is not transient. The message then has no
//! `context deadline exceeded` part.
//!
//! Not reported: upstream's boot image skew guard (`ClusterBootImageSkewError`), its cluster
//! fleet evaluations (`EvaluationConditionsDetected`, left as upstream last wrote it), and the
//! failures of upstream's other sync tasks, which mco does not run.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::Stream;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference as CoreObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use mco_api::clusteroperator::{
    ClusterOperator, ClusterOperatorStatus, ClusterOperatorStatusCondition, MACHINE_CONFIG,
    ObjectReference, OperandVersion,
};
use mco_api::constants::{annotations, pool_conditions};
use mco_api::{ControllerConfigSpec, MachineConfig, MachineConfigPool};
use mco_apimachinery::schema::go_quote;
use mco_rollout::plan::EventKind;

use crate::by_name::{Slot, follow, forward, seen, slot, wait_to_sync};
use crate::ctx::{Ctx, error_backoff};

// The release's ConfigMap of OS images, which [`crate::ccsync`] takes the ControllerConfig's
// OS images from: its `releaseVersion` is the release the cluster runs.
use crate::ccsync::{
    OPERATOR_NAMESPACE, OS_IMAGE_URLS as OSIMAGEURL_CONFIGMAP, RELEASE_VERSION_KEY,
    os_images_release,
};

/// The pool label upstream's operator waits on before it reports a release.
pub const REQUIRED_FOR_UPGRADE: &str =
    "operator.machineconfiguration.openshift.io/required-for-upgrade";
/// The Event reason of a version change, as upstream's operator records it.
pub const VERSION_CHANGED: &str = "OperatorVersionChanged";
/// The Upgradeable reason mco adds while it renders from upstream's kept base configs.
pub const BASE_CONFIGS_KEPT: &str = "BaseConfigsKept";
/// The longest condition message or extension entry, in characters: a pool's condition
/// message (a node's error) is copied into them, and the status stays small.
pub const MAX_MESSAGE_CHARS: usize = 1024;
/// The most pools listed in the status extension; the rest are counted under
/// [`MORE_POOLS_KEY`].
pub const MAX_EXTENSION_POOLS: usize = 100;
/// The extension key counting the pools left out.
pub const MORE_POOLS_KEY: &str = "morePools";
/// The most kept base configs named in the `BaseConfigsKept` message.
pub const MAX_KEPT_NAMED: usize = 10;

const AVAILABLE: &str = "Available";
const PROGRESSING: &str = "Progressing";
const DEGRADED: &str = "Degraded";
const UPGRADEABLE: &str = "Upgradeable";
const AS_EXPECTED: &str = "AsExpected";
/// Upstream's reason: the task name `RequiredPools` and `Failed`.
const REQUIRED_POOLS_FAILED: &str = "RequiredPoolsFailed";
const BUILD_INTERRUPTED: &str = "BuildInterrupted";
const PINNED_DEGRADED: &str = mco_api::pinned::POOL_DEGRADED;

/// What [`report`] reads.
pub struct Inputs<'a> {
    pub pools: &'a [Arc<MachineConfigPool>],
    /// A MachineConfig by name (the rendered configs the pools' status names).
    pub machine_config: &'a dyn Fn(&str) -> Option<Arc<MachineConfig>>,
    /// The ControllerConfig's spec, whose OS image the rendered configs must carry.
    pub controller_config: Option<&'a ControllerConfigSpec>,
    /// The release the cluster runs: `releaseVersion` of [`OSIMAGEURL_CONFIGMAP`].
    pub release: &'a str,
    /// The template configs kept as another controller (upstream's) generated them, with the
    /// version that stamped them: `00-worker (<commit>)`.
    pub kept_base_configs: &'a [String],
    /// The status as it stands.
    pub current: &'a ClusterOperatorStatus,
    pub now: Time,
}

/// An Event to record on the ClusterOperator.
#[derive(Debug, Clone, PartialEq)]
pub struct CoEvent {
    pub kind: EventKind,
    pub reason: String,
    /// The Event's `action`: events of one reason and action on one object are recorded as a
    /// series of the first, whose message stays; a start and an end of a version change are
    /// two actions, so that both messages are kept.
    pub action: &'static str,
    pub message: String,
}

/// The new status and the events that go with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub status: ClusterOperatorStatus,
    pub events: Vec<CoEvent>,
}

/// Why the release is not reached yet, or cannot be.
enum Wait {
    /// Not yet: upstream's `lastSyncError` while it waits.
    Pending(String),
    /// Cannot get there: upstream's Degraded.
    Failed(String),
}

/// The status upstream's operator would report for `inputs`. Pure.
pub fn report(inputs: &Inputs) -> Report {
    let x = inputs.release;
    let current = inputs.current;
    let mut status = current.clone();
    let mut events = vec![];
    let want = wanted_versions(&current.versions, x);
    let was_at_release = same_versions(&current.versions, &want);
    let mut pools: Vec<&MachineConfigPool> = inputs.pools.iter().map(|p| &**p).collect();
    pools.sort_by_key(|p| p.name_any());

    let wait = wait_for_pools(&pools, inputs);
    let was_progressing = is_true(&current.conditions, PROGRESSING);

    match &wait {
        Some(Wait::Failed(err)) => {
            let message = if was_at_release {
                format!("Failed to resync {x} because: {err}")
            } else {
                format!("Unable to apply {x}: {err}")
            };
            let message = bounded(&message);
            let old = find(&current.conditions, DEGRADED);
            if old.is_none_or(|o| o.message != message || o.reason != REQUIRED_POOLS_FAILED) {
                events.push(CoEvent {
                    kind: EventKind::Warning,
                    reason: format!("OperatorDegraded: {REQUIRED_POOLS_FAILED}"),
                    action: "Degrade",
                    message: message.clone(),
                });
            }
            set(
                &mut status,
                &inputs.now,
                DEGRADED,
                "True",
                REQUIRED_POOLS_FAILED,
                message,
            );
            // Upstream keeps Progressing as it was, with its own words for each.
            if was_progressing {
                set(
                    &mut status,
                    &inputs.now,
                    PROGRESSING,
                    "True",
                    "",
                    format!("Unable to apply {x}"),
                );
            } else {
                set(
                    &mut status,
                    &inputs.now,
                    PROGRESSING,
                    "False",
                    "",
                    format!("Error while reconciling {x}"),
                );
            }
        }
        reached_or_pending => {
            set(
                &mut status,
                &inputs.now,
                DEGRADED,
                "False",
                "",
                String::new(),
            );
            if reached_or_pending.is_none() {
                if !was_at_release {
                    events.push(CoEvent {
                        kind: EventKind::Normal,
                        reason: VERSION_CHANGED.into(),
                        action: "ChangeVersion",
                        message: format!(
                            "clusteroperator/machine-config version changed from {} to {}",
                            go_versions(&current.versions),
                            go_versions(&want)
                        ),
                    });
                }
                status.versions = want.clone();
                set(
                    &mut status,
                    &inputs.now,
                    PROGRESSING,
                    "False",
                    "",
                    format!("Cluster version is {x}"),
                );
            } else {
                if !was_progressing {
                    events.push(CoEvent {
                        kind: EventKind::Normal,
                        reason: VERSION_CHANGED.into(),
                        action: "StartVersionChange",
                        message: format!(
                            "clusteroperator/machine-config started a version change from {} to {}",
                            go_versions(&current.versions),
                            go_versions(&want)
                        ),
                    });
                }
                set(
                    &mut status,
                    &inputs.now,
                    PROGRESSING,
                    "True",
                    "",
                    format!("Working towards {x}"),
                );
            }
        }
    }

    let deployed = format!("Cluster has deployed {}", go_versions(&status.versions));
    set(
        &mut status,
        &inputs.now,
        AVAILABLE,
        "True",
        AS_EXPECTED,
        deployed,
    );
    let (u_status, u_reason, u_message) = upgradeable(&pools, inputs.kept_base_configs);
    set(
        &mut status,
        &inputs.now,
        UPGRADEABLE,
        u_status,
        u_reason,
        u_message,
    );
    status.related_objects = related_objects();
    let last_error = match &wait {
        Some(Wait::Pending(e) | Wait::Failed(e)) => Some(e.as_str()),
        None => None,
    };
    status.extension = Some(extension(&pools, last_error));
    Report { status, events }
}

/// `operator` at the release, and `operator-image` as it stands (mco has no image of
/// upstream's operator to report): the versions upstream's operator reports once there.
fn wanted_versions(current: &[OperandVersion], release: &str) -> Vec<OperandVersion> {
    let mut want = vec![OperandVersion {
        name: "operator".into(),
        version: release.into(),
    }];
    want.extend(
        current
            .iter()
            .filter(|v| v.name == "operator-image")
            .take(1)
            .cloned(),
    );
    want
}

/// Whether two version lists say the same, in any order.
fn same_versions(a: &[OperandVersion], b: &[OperandVersion]) -> bool {
    let map = |l: &[OperandVersion]| -> BTreeMap<String, String> {
        l.iter()
            .map(|v| (v.name.clone(), v.version.clone()))
            .collect()
    };
    a.len() == b.len() && map(a) == map(b)
}

/// Go's `%v` of a version list, as upstream's messages print it: `[{operator 4.18.1}]`.
fn go_versions(versions: &[OperandVersion]) -> String {
    let items: Vec<String> = versions
        .iter()
        .map(|v| format!("{{{} {}}}", v.name, v.version))
        .collect();
    format!("[{}]", items.join(" "))
}

/// What keeps the release from being reported: none when every pool is there. Upstream's
/// `syncRequiredMachineConfigPools`, one pass of its loop: a degraded pool fails it, a required
/// pool not on the release waits, and a required pool that is paused before its update fails.
fn wait_for_pools(pools: &[&MachineConfigPool], inputs: &Inputs) -> Option<Wait> {
    let status = |p: &MachineConfigPool| p.status.clone().unwrap_or_default();
    if let Some(p) = pools
        .iter()
        .find(|p| pool_true(p, pool_conditions::DEGRADED))
    {
        let s = status(p);
        let reason = s
            .condition(pool_conditions::DEGRADED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        return Some(Wait::Failed(format!(
            "during syncRequiredMachineConfigPools: MachineConfigPool {} is not ready, retrying. Status: (pool degraded: true total: {}, ready {}, updated: {}, unavailable: {}, reason: {})",
            p.name_any(),
            s.machine_count,
            s.ready_machine_count,
            s.updated_machine_count,
            s.unavailable_machine_count,
            reason
        )));
    }
    for p in pools
        .iter()
        .filter(|p| p.labels().contains_key(REQUIRED_FOR_UPGRADE))
    {
        if let Err(e) = configuration_valid(p, inputs) {
            return Some(Wait::Pending(format!(
                "MachineConfigPool {} has not progressed to latest configuration: {e}, retrying",
                p.name_any()
            )));
        }
        let s = status(p);
        let observed = s.observed_generation.unwrap_or(0);
        if p.metadata.generation.unwrap_or(0) <= observed && s.is_true(pool_conditions::UPDATED) {
            continue;
        }
        if p.spec.paused {
            // Upstream returns these at once, not after its wait: a paused pool cannot get there.
            return Some(Wait::Failed(if s.is_true(pool_conditions::UPDATED) {
                format!(
                    "the required MachineConfigPool {} was paused with no pending updates; no further syncing will occur until it is unpaused",
                    p.name_any()
                )
            } else {
                format!(
                    "required MachineConfigPool {} is paused and cannot sync until it is unpaused",
                    p.name_any()
                )
            }));
        }
        return Some(Wait::Pending(format!(
            "required MachineConfigPool {} is not ready, retrying. Status: (total: {}, ready {}, updated: {}, unavailable: {}, degraded: {})",
            p.name_any(),
            s.machine_count,
            s.ready_machine_count,
            s.updated_machine_count,
            s.unavailable_machine_count,
            s.degraded_machine_count
        )));
    }
    None
}

/// Upstream's `isMachineConfigPoolConfigurationValid`, without the controller build check
/// (see the module doc): the pool's rendered config carries the release and the OS image.
fn configuration_valid(pool: &MachineConfigPool, inputs: &Inputs) -> Result<(), String> {
    let name = pool.name_any();
    let said = || pool_status(pool);
    if pool
        .spec
        .configuration
        .as_ref()
        .is_none_or(|c| c.name.is_empty())
    {
        return Err(format!(
            "configuration spec for pool {name} is empty: {}",
            said()
        ));
    }
    let configuration = pool.status.as_ref().and_then(|s| s.configuration.as_ref());
    let Some(configuration) = configuration.filter(|c| !c.name.is_empty()) else {
        return Err(format!(
            "configuration status for pool {name} is empty: {}",
            said()
        ));
    };
    if configuration.source.is_empty() {
        return Err(format!(
            "list of MachineConfigs that were used to generate configuration for pool {name} is empty: {}",
            said()
        ));
    }
    let rendered_name = &configuration.name;
    let Some(rendered) = (inputs.machine_config)(rendered_name) else {
        return Err(format!(
            "machineconfig.machineconfiguration.openshift.io \"{rendered_name}\" not found"
        ));
    };
    let Some(cc) = inputs.controller_config else {
        return Err(format!(
            "controllerconfig.machineconfiguration.openshift.io \"{}\" not found",
            mco_api::constants::names::CONTROLLER_CONFIG
        ));
    };
    let os_url = cc.default_os_image();
    let rendered_annotations = rendered.annotations();
    if rendered.spec.os_image_url != os_url
        && !rendered_annotations.contains_key(annotations::OS_IMAGE_URL_OVERRIDDEN)
    {
        return Err(format!(
            "osImageURL mismatch for {name} in {rendered_name} expected: {os_url} got: {}",
            rendered.spec.os_image_url
        ));
    }
    let release = inputs.release;
    match rendered_annotations.get(annotations::RELEASE_IMAGE_VERSION) {
        Some(rv) if rv != release => Err(format!(
            "release image version mismatch for {name} in {rendered_name} expected: {release} got: {rv}"
        )),
        Some(_) => Ok(()),
        None => Err(format!(
            "unable to access annotation {} for {rendered_name} expected: {release}",
            annotations::RELEASE_IMAGE_VERSION
        )),
    }
}

fn pool_true(pool: &MachineConfigPool, type_: &str) -> bool {
    pool.status.as_ref().is_some_and(|s| s.is_true(type_))
}

/// Upstream's `machineConfigPoolStatus`: one line on the pool, for messages and the extension.
fn pool_status(pool: &MachineConfigPool) -> String {
    let s = pool.status.clone().unwrap_or_default();
    let cond = |t: &str| s.condition(t).filter(|c| c.status == "True");
    let status_name = s
        .configuration
        .as_ref()
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let spec_name = pool
        .spec
        .configuration
        .as_ref()
        .map(|c| c.name.clone())
        .unwrap_or_default();
    if let Some(c) = cond(pool_conditions::RENDER_DEGRADED) {
        return format!(
            "pool is degraded because rendering fails with {}: {}",
            go_quote(&c.reason),
            go_quote(&c.message)
        );
    }
    if let Some(c) = cond(pool_conditions::NODE_DEGRADED) {
        return format!(
            "pool is degraded because nodes fail with {}: {}",
            go_quote(&c.reason),
            go_quote(&c.message)
        );
    }
    if cond(pool_conditions::UPDATED).is_some() {
        return format!(
            "all {} nodes are at latest configuration {status_name}",
            s.machine_count
        );
    }
    if cond(pool_conditions::UPDATING).is_some() {
        return format!(
            "{} (ready {}) out of {} nodes are updating to latest configuration {spec_name}",
            s.updated_machine_count, s.ready_machine_count, s.machine_count
        );
    }
    if let Some(c) = cond(PINNED_DEGRADED) {
        return format!(
            "pool is degraded because pinned image sets failed with {}: {}",
            go_quote(&c.reason),
            go_quote(&c.message)
        );
    }
    "<unknown>".into()
}

/// Upstream's Upgradeable, and mco's own reason after it: a degraded pool first, then an
/// interrupted image build, then base configs kept from upstream. Those were rendered by
/// upstream's templates for the release it last ran; a minor upgrade would boot the new OS
/// with that release's kubelet and CRI-O configuration, so minor upgrades are refused
/// (Upgradeable=False does not hold back z-stream upgrades) until upstream's operator is back.
fn upgradeable(
    pools: &[&MachineConfigPool],
    kept: &[String],
) -> (&'static str, &'static str, String) {
    if pools
        .iter()
        .any(|p| pool_true(p, pool_conditions::DEGRADED))
    {
        return (
            "False",
            "DegradedPool",
            "One or more machine config pools are degraded, please see `oc get mcp` for further details and resolve before upgrading".into(),
        );
    }
    if pools.iter().any(|p| pool_true(p, BUILD_INTERRUPTED)) {
        return (
            "False",
            "InterruptedBuild",
            "One or more machine config pools' builds have been interrupted, please see `oc get mcp` for further details and resolve before upgrading".into(),
        );
    }
    if !kept.is_empty() {
        let mut named: Vec<&str> = kept
            .iter()
            .take(MAX_KEPT_NAMED)
            .map(String::as_str)
            .collect();
        let more = kept.len() - named.len();
        let more_said = format!("{more} more");
        if more > 0 {
            named.push(&more_said);
        }
        return (
            "False",
            BASE_CONFIGS_KEPT,
            bounded(&format!(
                "mco renders from the base configs upstream's operator generated for the release it last ran ({}); a minor upgrade would boot the new OS with that release's kubelet and CRI-O configuration. Hand the cluster back to upstream's operator for a minor upgrade; z-stream upgrades are not blocked",
                named.join(", ")
            )),
        );
    }
    ("True", AS_EXPECTED, String::new())
}

/// Upstream's `relatedObjects`, for must-gather.
fn related_objects() -> Vec<ObjectReference> {
    let r = |group: &str, resource: &str, name: &str| ObjectReference {
        group: group.into(),
        resource: resource.into(),
        namespace: String::new(),
        name: name.into(),
    };
    let mc = "machineconfiguration.openshift.io";
    let rbac = "rbac.authorization.k8s.io";
    let mut out = vec![
        r("", "namespaces", OPERATOR_NAMESPACE),
        r(mc, "machineconfigpools", ""),
        r(mc, "controllerconfigs", ""),
        r(mc, "kubeletconfigs", ""),
        r(mc, "containerruntimeconfigs", ""),
        r(mc, "machineconfigs", ""),
        r("operator.openshift.io", "machineconfigurations", ""),
        r("", "nodes", ""),
    ];
    for ns in [
        "kni",
        "openstack",
        "ovirt",
        "vsphere",
        "nutanix",
        "cloud-platform",
    ] {
        out.push(r("", "namespaces", &format!("openshift-{ns}-infra")));
    }
    for name in [
        "machine-config-controller",
        "machine-config-controller-events",
        "machine-config-daemon",
        "machine-config-daemon-events",
        "machine-config-server",
        "machine-os-builder",
        "machine-os-builder-events",
        "system:openshift:machine-config-operator:cluster-reader",
    ] {
        out.push(r(rbac, "clusterroles", name));
    }
    for name in [
        "machine-config-controller",
        "machine-config-daemon",
        "machine-config-server",
        "machine-os-builder",
        "machine-os-builder-anyuid",
        "custom-account-openshift-machine-config-operator",
        "system-bootstrap-node-bootstrapper",
        "system-bootstrap-node-renewal",
    ] {
        out.push(r(rbac, "clusterrolebindings", name));
    }
    out
}

/// Upstream's extension: each pool's status line by name, and `lastSyncError` while the
/// release waits; at most [`MAX_EXTENSION_POOLS`] pools (by name), the rest counted.
fn extension(pools: &[&MachineConfigPool], last_error: Option<&str>) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for p in pools.iter().take(MAX_EXTENSION_POOLS) {
        map.insert(p.name_any(), bounded(&pool_status(p)).into());
    }
    if pools.len() > MAX_EXTENSION_POOLS {
        map.insert(
            MORE_POOLS_KEY.into(),
            format!(
                "{} more pools; see `oc get mcp`",
                pools.len() - MAX_EXTENSION_POOLS
            )
            .into(),
        );
    }
    if let Some(e) = last_error {
        map.insert("lastSyncError".into(), bounded(e).into());
    }
    serde_json::Value::Object(map)
}

/// `s`, cut to [`MAX_MESSAGE_CHARS`] characters (the last one `…`) when longer.
fn bounded(s: &str) -> String {
    if s.chars().count() <= MAX_MESSAGE_CHARS {
        return s.to_string();
    }
    let mut out: String = s.chars().take(MAX_MESSAGE_CHARS - 1).collect();
    out.push('…');
    out
}

fn find<'a>(
    conditions: &'a [ClusterOperatorStatusCondition],
    type_: &str,
) -> Option<&'a ClusterOperatorStatusCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(conditions: &[ClusterOperatorStatusCondition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// library-go's `SetStatusCondition`: the transition time moves only with the status.
fn set(
    status: &mut ClusterOperatorStatus,
    now: &Time,
    type_: &str,
    value: &str,
    reason: &str,
    message: String,
) {
    match status.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.status = value.into();
                c.last_transition_time = Some(now.clone());
            }
            c.reason = reason.into();
            c.message = message;
        }
        None => status.conditions.push(ClusterOperatorStatusCondition {
            type_: type_.into(),
            status: value.into(),
            last_transition_time: Some(now.clone()),
            reason: reason.into(),
            message,
        }),
    }
}

/// The template configs another controller generated and mco keeps, with their stamp.
fn kept_base_configs(ctx: &Ctx) -> Vec<String> {
    let ours = &ctx.config.controller_version;
    let mut kept: Vec<String> = ctx
        .mcs
        .state()
        .iter()
        .filter(|mc| mco_generate::template::is_template_name(&mc.name_any()))
        .filter_map(|mc| {
            mco_generate::generated_elsewhere(mc, ours).map(|v| format!("{} ({v})", mc.name_any()))
        })
        .collect();
    kept.sort();
    kept
}

/// What the report's watches are called in their logs.
const CO_WATCH: &str = "ClusterOperator";
const CM_WATCH: &str = "release OS images ConfigMap";

/// Writes the report for the ClusterOperator as last seen, when it changes the status.
async fn sync_once(
    ctx: &Ctx,
    co: &Slot<ClusterOperator>,
    cm: &Slot<ConfigMap>,
    idle: &mut Option<String>,
) -> Result<(), crate::Error> {
    // Not listed yet, or the watch cannot list it (said at debug level by the watch): wait.
    let (Ok(co), Ok(cm)) = (seen(co, CO_WATCH), seen(cm, CM_WATCH)) else {
        return Ok(());
    };
    // Never created here: the CVO creates it from the release's manifest, with the versions it
    // waits for. Upstream's operator creates a bare one when absent, for a cluster installed
    // without the CVO's copy; mco reports only where the CVO asks for a report, and without the
    // kind (not OpenShift) there is no one to report to.
    let why_idle = match (&co, &cm) {
        (None, _) => Some(format!(
            "no ClusterOperator {MACHINE_CONFIG} (not OpenShift, or the kind is not served); nothing to report"
        )),
        (_, None) => Some(format!(
            "no ConfigMap {OPERATOR_NAMESPACE}/{OSIMAGEURL_CONFIGMAP}; the ClusterOperator {MACHINE_CONFIG} is not reported"
        )),
        (_, Some(cm)) if os_images_release(cm).is_none() => Some(format!(
            "the ConfigMap {OPERATOR_NAMESPACE}/{OSIMAGEURL_CONFIGMAP} has no usable {RELEASE_VERSION_KEY}; the ClusterOperator {MACHINE_CONFIG} is not reported"
        )),
        _ => None,
    };
    if let Some(why) = why_idle {
        // Said once, not at every resync.
        if idle.as_deref() != Some(why.as_str()) {
            tracing::info!("{why}");
            *idle = Some(why);
        }
        return Ok(());
    }
    *idle = None;
    let (Some(co), Some(cm)) = (co, cm) else {
        return Ok(());
    };
    let release = os_images_release(&cm).unwrap_or_default();
    let cc = ctx.ccs.get(&ObjectRef::new(
        mco_api::constants::names::CONTROLLER_CONFIG,
    ));
    let pools = ctx.pools.state();
    let mcs = |name: &str| ctx.mcs.get(&ObjectRef::new(name));
    let kept = kept_base_configs(ctx);
    let current = co.status.clone().unwrap_or_default();
    let out = report(&Inputs {
        pools: &pools,
        machine_config: &mcs,
        controller_config: cc.as_ref().map(|cc| &cc.spec),
        release,
        kept_base_configs: &kept,
        current: &current,
        now: Time(jiff::Timestamp::now()),
    });
    if out.status == current {
        return Ok(());
    }
    let mut status = serde_json::to_value(&out.status)?;
    // A merge patch merges objects: an extension key no longer reported is removed by a null.
    if let (Some(serde_json::Value::Object(old)), Some(serde_json::Value::Object(new))) =
        (&current.extension, status.get_mut("extension"))
    {
        for key in old.keys() {
            new.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": co.metadata.resource_version },
        "status": status,
    });
    Api::<ClusterOperator>::all(ctx.client.clone())
        .patch_status(
            MACHINE_CONFIG,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    tracing::info!(
        clusteroperator = MACHINE_CONFIG,
        release,
        "ClusterOperator status reported"
    );
    // Recorded in mco's namespace, as every Event about a cluster-scoped object.
    let reference = crate::ctx::in_namespace(&co.object_ref(&()), &ctx.config.namespace);
    for e in &out.events {
        publish(ctx, &reference, e).await;
    }
    Ok(())
}

/// Records `e` (best effort, as [`Ctx::publish`]), with its own action.
async fn publish(ctx: &Ctx, reference: &CoreObjectReference, e: &CoEvent) {
    let ev = kube::runtime::events::Event {
        type_: match e.kind {
            EventKind::Normal => kube::runtime::events::EventType::Normal,
            EventKind::Warning => kube::runtime::events::EventType::Warning,
        },
        reason: e.reason.clone(),
        note: Some(e.message.clone()),
        action: e.action.into(),
        secondary: None,
    };
    tracing::info!(clusteroperator = MACHINE_CONFIG, reason = %e.reason, message = %e.message);
    if let Err(err) = ctx.recorder.publish(&ev, reference).await {
        tracing::debug!(error = %err, reason = %e.reason, "publishing event");
    }
}

/// Reports the `machine-config` ClusterOperator's status until dropped: at start, on every
/// change of `changes` (pools, the ControllerConfig, MachineConfigs), of the ClusterOperator or of the
/// release's ConfigMap, and every `ctx.config.resync`. A failed write (a conflict with another
/// writer) is retried with the controller's backoff against the object as watched.
pub async fn run(ctx: Arc<Ctx>, changes: impl Stream<Item = ()> + Send + 'static) {
    let (wake, mut woken) = futures::channel::mpsc::unbounded::<()>();
    let (co, cm) = (slot(), slot());
    // Failures are quiet: off OpenShift the kind is not served, and the report waits.
    let _tasks = [
        forward(
            follow(
                Api::<ClusterOperator>::all(ctx.client.clone()),
                MACHINE_CONFIG,
                CO_WATCH,
                true,
                co.clone(),
            ),
            &wake,
        ),
        forward(
            follow(
                Api::<ConfigMap>::namespaced(ctx.client.clone(), OPERATOR_NAMESPACE),
                OSIMAGEURL_CONFIGMAP,
                CM_WATCH,
                true,
                cm.clone(),
            ),
            &wake,
        ),
        forward(changes, &wake),
        forward(crate::controllers::ticker(ctx.config.resync), &wake),
    ];
    let mut failures: u32 = 0;
    let mut idle = None;
    loop {
        let retry = match sync_once(&ctx, &co, &cm, &mut idle).await {
            Ok(()) => {
                failures = 0;
                None
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::warn!(error = %e, failures, "ClusterOperator report failed");
                Some(error_backoff(ctx.config.error_requeue, failures))
            }
        };
        if !wait_to_sync(&mut woken, retry).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference as Source;
    use mco_api::{
        MachineConfigPoolCondition, MachineConfigPoolSpec, MachineConfigPoolStatus,
        PoolConfiguration,
    };
    use pretty_assertions::assert_eq;

    const X: &str = "4.18.2";
    const OLD: &str = "4.18.1";
    const OS: &str = "quay.io/ocp/rhcos@sha256:new";
    const IMG: &str = "quay.io/ocp/mco@sha256:upstream";

    fn at(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> MachineConfigPoolCondition {
        MachineConfigPoolCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }
    }

    /// A pool of 3 on `rendered`, Updated, at its generation.
    fn pool(name: &str, required: bool, rendered: &str) -> MachineConfigPool {
        let conf = PoolConfiguration {
            name: rendered.into(),
            source: vec![Source {
                name: Some(format!("00-{name}")),
                ..Default::default()
            }],
        };
        let mut p = MachineConfigPool::new(
            name,
            MachineConfigPoolSpec {
                configuration: Some(conf.clone()),
                ..Default::default()
            },
        );
        if required {
            p.metadata.labels = Some([(REQUIRED_FOR_UPGRADE.to_string(), String::new())].into());
        }
        p.metadata.generation = Some(2);
        p.status = Some(MachineConfigPoolStatus {
            observed_generation: Some(2),
            configuration: Some(conf),
            machine_count: 3,
            updated_machine_count: 3,
            ready_machine_count: 3,
            conditions: vec![
                cond(pool_conditions::UPDATED, "True", "", ""),
                cond(pool_conditions::UPDATING, "False", "", ""),
                cond(pool_conditions::DEGRADED, "False", "", ""),
            ],
            ..Default::default()
        });
        p
    }

    fn set_cond(p: &mut MachineConfigPool, c: MachineConfigPoolCondition) {
        let s = p.status.as_mut().unwrap();
        s.conditions.retain(|o| o.type_ != c.type_);
        s.conditions.push(c);
    }

    fn degrade(p: &mut MachineConfigPool, message: &str) {
        set_cond(p, cond(pool_conditions::DEGRADED, "True", "", message));
        set_cond(
            p,
            cond(
                pool_conditions::NODE_DEGRADED,
                "True",
                "1 nodes are reporting degraded status on sync",
                message,
            ),
        );
        set_cond(p, cond(pool_conditions::UPDATED, "False", "", ""));
    }

    fn rendered(name: &str, release: Option<&str>, os: &str) -> Arc<MachineConfig> {
        let mut mc = MachineConfig::new(name, Default::default());
        mc.spec.os_image_url = os.into();
        if let Some(r) = release {
            mc.metadata.annotations = Some(
                [(
                    annotations::RELEASE_IMAGE_VERSION.to_string(),
                    r.to_string(),
                )]
                .into(),
            );
        }
        Arc::new(mc)
    }

    fn cc() -> ControllerConfigSpec {
        ControllerConfigSpec {
            os_image_url: OS.into(),
            ..Default::default()
        }
    }

    /// The status the CVO's manifest leaves: the old release, reached.
    fn upstream_status() -> ClusterOperatorStatus {
        ClusterOperatorStatus {
            versions: vec![
                OperandVersion {
                    name: "operator".into(),
                    version: OLD.into(),
                },
                OperandVersion {
                    name: "operator-image".into(),
                    version: IMG.into(),
                },
            ],
            ..Default::default()
        }
    }

    struct World {
        pools: Vec<Arc<MachineConfigPool>>,
        mcs: BTreeMap<String, Arc<MachineConfig>>,
        cc: Option<ControllerConfigSpec>,
        kept: Vec<String>,
    }

    impl World {
        /// master (required) and worker, both on rendered configs carrying X and the OS image.
        fn settled() -> World {
            World {
                pools: vec![
                    Arc::new(pool("master", true, "rendered-master-a")),
                    Arc::new(pool("worker", false, "rendered-worker-a")),
                ],
                mcs: [
                    (
                        "rendered-master-a".to_string(),
                        rendered("rendered-master-a", Some(X), OS),
                    ),
                    (
                        "rendered-worker-a".to_string(),
                        rendered("rendered-worker-a", Some(X), OS),
                    ),
                ]
                .into(),
                cc: Some(cc()),
                kept: vec![],
            }
        }

        fn pool(&mut self, name: &str) -> &mut MachineConfigPool {
            Arc::make_mut(
                self.pools
                    .iter_mut()
                    .find(|p| p.name_any() == name)
                    .unwrap(),
            )
        }

        /// The report from the status the CVO's manifest leaves, at `T0`.
        fn report_upstream(&self) -> Report {
            self.report(&upstream_status(), T0)
        }

        fn set_rendered(&mut self, name: &str, release: Option<&str>, os: &str) {
            self.mcs.insert(name.into(), rendered(name, release, os));
        }

        fn report(&self, current: &ClusterOperatorStatus, now: &str) -> Report {
            let get = |n: &str| self.mcs.get(n).cloned();
            report(&Inputs {
                pools: &self.pools,
                machine_config: &get,
                controller_config: self.cc.as_ref(),
                release: X,
                kept_base_configs: &self.kept,
                current,
                now: at(now),
            })
        }
    }

    fn condition<'a>(s: &'a ClusterOperatorStatus, t: &str) -> &'a ClusterOperatorStatusCondition {
        find(&s.conditions, t).unwrap_or_else(|| panic!("no {t} in {s:?}"))
    }

    fn said(s: &ClusterOperatorStatus, t: &str) -> (String, String, String) {
        let c = condition(s, t);
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn extension<'a>(s: &'a ClusterOperatorStatus, key: &str) -> &'a serde_json::Value {
        &s.extension
            .as_ref()
            .unwrap_or_else(|| panic!("no extension in {s:?}"))[key]
    }

    fn sync_error(s: &ClusterOperatorStatus) -> &str {
        extension(s, "lastSyncError")
            .as_str()
            .unwrap_or_else(|| panic!("no lastSyncError in {s:?}"))
    }

    fn triple(s: &str, r: &str, m: &str) -> (String, String, String) {
        (s.into(), r.into(), m.into())
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T01:00:00Z";

    #[test]
    fn pools_on_the_release_report_it_reached_keeping_the_operator_image() {
        let out = World::settled().report(&upstream_status(), T0);
        let s = &out.status;
        assert_eq!(
            s.versions,
            vec![
                OperandVersion {
                    name: "operator".into(),
                    version: X.into()
                },
                OperandVersion {
                    name: "operator-image".into(),
                    version: IMG.into()
                },
            ]
        );
        assert_eq!(
            said(s, PROGRESSING),
            triple("False", "", "Cluster version is 4.18.2")
        );
        assert_eq!(
            said(s, AVAILABLE),
            triple(
                "True",
                "AsExpected",
                &format!("Cluster has deployed [{{operator 4.18.2}} {{operator-image {IMG}}}]")
            )
        );
        assert_eq!(said(s, DEGRADED), triple("False", "", ""));
        assert_eq!(said(s, UPGRADEABLE), triple("True", "AsExpected", ""));
        assert_eq!(
            out.events,
            vec![CoEvent {
                kind: EventKind::Normal,
                reason: VERSION_CHANGED.into(),
                action: "ChangeVersion",
                message: format!(
                    "clusteroperator/machine-config version changed from [{{operator 4.18.1}} {{operator-image {IMG}}}] to [{{operator 4.18.2}} {{operator-image {IMG}}}]"
                ),
            }]
        );
        assert_eq!(
            s.extension,
            Some(serde_json::json!({
                "master": "all 3 nodes are at latest configuration rendered-master-a",
                "worker": "all 3 nodes are at latest configuration rendered-worker-a",
            }))
        );
    }

    #[test]
    fn a_second_report_of_the_same_cluster_changes_nothing_and_says_nothing() {
        let w = World::settled();
        let first = w.report_upstream();
        let second = w.report(&first.status, T1);
        assert_eq!(second.status, first.status);
        assert!(second.events.is_empty());
    }

    #[test]
    fn a_required_pool_on_the_old_release_is_worked_towards_and_versions_stay() {
        let mut w = World::settled();
        w.set_rendered("rendered-master-a", Some(OLD), OS);
        let out = w.report_upstream();
        let s = &out.status;
        assert_eq!(s.versions, upstream_status().versions);
        assert_eq!(
            said(s, PROGRESSING),
            triple("True", "", "Working towards 4.18.2")
        );
        assert_eq!(said(s, DEGRADED), triple("False", "", ""));
        assert_eq!(
            out.events,
            vec![CoEvent {
                kind: EventKind::Normal,
                reason: VERSION_CHANGED.into(),
                action: "StartVersionChange",
                message: format!(
                    "clusteroperator/machine-config started a version change from [{{operator 4.18.1}} {{operator-image {IMG}}}] to [{{operator 4.18.2}} {{operator-image {IMG}}}]"
                ),
            }]
        );
        assert_eq!(
            sync_error(s),
            "MachineConfigPool master has not progressed to latest configuration: release image version mismatch for master in rendered-master-a expected: 4.18.2 got: 4.18.1, retrying"
        );
        // Still working: no second "started" event, and the transition time stays.
        let again = w.report(&out.status, T1);
        assert!(again.events.is_empty());
        assert_eq!(
            condition(&again.status, PROGRESSING).last_transition_time,
            Some(at(T0))
        );
        // There: the lastSyncError goes, Progressing turns False at the new time.
        let w = World::settled();
        let done = w.report(&again.status, T1);
        assert_eq!(
            said(&done.status, PROGRESSING),
            triple("False", "", "Cluster version is 4.18.2")
        );
        assert_eq!(
            condition(&done.status, PROGRESSING).last_transition_time,
            Some(at(T1))
        );
        assert_eq!(
            condition(&done.status, AVAILABLE).last_transition_time,
            Some(at(T0))
        );
        assert!(
            done.status
                .extension
                .as_ref()
                .unwrap()
                .get("lastSyncError")
                .is_none()
        );
    }

    #[test]
    fn a_rendered_config_without_the_release_annotation_is_not_there() {
        let mut w = World::settled();
        w.set_rendered("rendered-master-a", None, OS);
        let out = w.report_upstream();
        assert_eq!(said(&out.status, PROGRESSING).0, "True");
        assert_eq!(
            sync_error(&out.status),
            "MachineConfigPool master has not progressed to latest configuration: unable to access annotation machineconfiguration.openshift.io/release-image-version for rendered-master-a expected: 4.18.2, retrying"
        );
    }

    #[test]
    fn the_os_image_must_be_the_controllerconfigs_unless_overridden() {
        let mut w = World::settled();
        w.set_rendered("rendered-master-a", Some(X), "quay.io/old");
        let out = w.report_upstream();
        assert_eq!(
            sync_error(&out.status),
            format!(
                "MachineConfigPool master has not progressed to latest configuration: osImageURL mismatch for master in rendered-master-a expected: {OS} got: quay.io/old, retrying"
            )
        );
        let mut mc = (*rendered("rendered-master-a", Some(X), "quay.io/mine")).clone();
        mc.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(annotations::OS_IMAGE_URL_OVERRIDDEN.into(), "true".into());
        w.mcs.insert("rendered-master-a".into(), Arc::new(mc));
        let out = w.report_upstream();
        assert_eq!(
            said(&out.status, PROGRESSING),
            triple("False", "", "Cluster version is 4.18.2")
        );
        // No ControllerConfig: nothing to compare with, not there.
        w.cc = None;
        let out = w.report_upstream();
        assert_eq!(said(&out.status, PROGRESSING).0, "True");
    }

    #[test]
    fn only_required_pools_are_waited_for() {
        let mut w = World::settled();
        w.set_rendered("rendered-worker-a", Some(OLD), "quay.io/old");
        let worker = w.pool("worker");
        set_cond(worker, cond(pool_conditions::UPDATED, "False", "", ""));
        set_cond(worker, cond(pool_conditions::UPDATING, "True", "", ""));
        worker.status.as_mut().unwrap().updated_machine_count = 1;
        let out = w.report_upstream();
        assert_eq!(
            said(&out.status, PROGRESSING),
            triple("False", "", "Cluster version is 4.18.2")
        );
        assert_eq!(
            extension(&out.status, "worker"),
            "1 (ready 3) out of 3 nodes are updating to latest configuration rendered-worker-a"
        );
    }

    #[test]
    fn a_required_pool_not_updated_at_its_generation_is_waited_for() {
        let mut w = World::settled();
        w.pool("master").metadata.generation = Some(3);
        let out = w.report_upstream();
        assert_eq!(said(&out.status, PROGRESSING).0, "True");
        assert_eq!(
            sync_error(&out.status),
            "required MachineConfigPool master is not ready, retrying. Status: (total: 3, ready 3, updated: 3, unavailable: 0, degraded: 0)"
        );
        // Paused so: it cannot get there, upstream's Degraded.
        w.pool("master").spec.paused = true;
        let out = w.report_upstream();
        assert_eq!(
            said(&out.status, DEGRADED),
            triple(
                "True",
                "RequiredPoolsFailed",
                "Unable to apply 4.18.2: the required MachineConfigPool master was paused with no pending updates; no further syncing will occur until it is unpaused"
            )
        );
        set_cond(
            w.pool("master"),
            cond(pool_conditions::UPDATED, "False", "", ""),
        );
        let out = w.report_upstream();
        assert_eq!(
            said(&out.status, DEGRADED).2,
            "Unable to apply 4.18.2: required MachineConfigPool master is paused and cannot sync until it is unpaused"
        );
    }

    #[test]
    fn an_empty_pool_configuration_is_said_with_the_pools_status() {
        let mut w = World::settled();
        w.pool("master").status.as_mut().unwrap().configuration = None;
        let out = w.report_upstream();
        assert_eq!(
            sync_error(&out.status),
            "MachineConfigPool master has not progressed to latest configuration: configuration status for pool master is empty: all 3 nodes are at latest configuration , retrying"
        );
        let mut w = World::settled();
        w.pool("master")
            .status
            .as_mut()
            .unwrap()
            .configuration
            .as_mut()
            .unwrap()
            .source
            .clear();
        let out = w.report_upstream();
        assert!(sync_error(&out.status)            .contains("list of MachineConfigs that were used to generate configuration for pool master is empty"));
        let mut w = World::settled();
        w.mcs.remove("rendered-master-a");
        let out = w.report_upstream();
        assert!(sync_error(&out.status).contains(
            "machineconfig.machineconfiguration.openshift.io \"rendered-master-a\" not found"
        ));
    }

    #[test]
    fn a_degraded_pool_degrades_the_operator_and_blocks_upgrades() {
        let mut w = World::settled();
        degrade(w.pool("worker"), "Node w1 is reporting: \"missing file\"");
        // From a cluster working towards X: Progressing stays True.
        let mut working = upstream_status();
        working.conditions.push(ClusterOperatorStatusCondition {
            type_: PROGRESSING.into(),
            status: "True".into(),
            last_transition_time: Some(at(T0)),
            ..Default::default()
        });
        let out = w.report(&working, T1);
        let s = &out.status;
        let message = "Unable to apply 4.18.2: during syncRequiredMachineConfigPools: MachineConfigPool worker is not ready, retrying. Status: (pool degraded: true total: 3, ready 3, updated: 3, unavailable: 0, reason: Node w1 is reporting: \"missing file\")";
        assert_eq!(
            said(s, DEGRADED),
            triple("True", "RequiredPoolsFailed", message)
        );
        assert_eq!(
            said(s, PROGRESSING),
            triple("True", "", "Unable to apply 4.18.2")
        );
        assert_eq!(condition(s, PROGRESSING).last_transition_time, Some(at(T0)));
        assert_eq!(
            said(s, UPGRADEABLE),
            triple(
                "False",
                "DegradedPool",
                "One or more machine config pools are degraded, please see `oc get mcp` for further details and resolve before upgrading"
            )
        );
        assert_eq!(s.versions, upstream_status().versions);
        assert_eq!(
            out.events,
            vec![CoEvent {
                kind: EventKind::Warning,
                reason: "OperatorDegraded: RequiredPoolsFailed".into(),
                action: "Degrade",
                message: message.into(),
            }]
        );
        assert_eq!(
            extension(s, "worker"),
            "pool is degraded because nodes fail with \"1 nodes are reporting degraded status on sync\": \"Node w1 is reporting: \\\"missing file\\\"\""
        );
        // Said once.
        assert!(w.report(&out.status, T1).events.is_empty());
    }

    #[test]
    fn a_degraded_pool_at_the_release_is_a_failed_resync_not_progressing() {
        let w = World::settled();
        let there = w.report_upstream().status;
        let mut w = World::settled();
        degrade(w.pool("worker"), "boom");
        let out = w.report(&there, T1);
        let (status, reason, message) = said(&out.status, DEGRADED);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "RequiredPoolsFailed")
        );
        assert!(message.starts_with("Failed to resync 4.18.2 because: during syncRequiredMachineConfigPools: MachineConfigPool worker is not ready"), "{message}");
        assert_eq!(
            said(&out.status, PROGRESSING),
            triple("False", "", "Error while reconciling 4.18.2")
        );
        assert_eq!(out.status.versions, there.versions);
        assert_eq!(
            condition(&out.status, DEGRADED).last_transition_time,
            Some(at(T1))
        );
        // Cleared: Degraded False, its transition at the new time.
        let back = World::settled().report(&out.status, T1);
        assert_eq!(said(&back.status, DEGRADED), triple("False", "", ""));
        assert_eq!(
            said(&back.status, UPGRADEABLE),
            triple("True", "AsExpected", "")
        );
    }

    #[test]
    fn a_render_degraded_pool_is_said_as_upstream_says_it() {
        let mut p = pool("worker", false, "rendered-worker-a");
        set_cond(
            &mut p,
            cond(
                pool_conditions::RENDER_DEGRADED,
                "True",
                "RenderFailed",
                "bad ignition",
            ),
        );
        assert_eq!(
            pool_status(&p),
            "pool is degraded because rendering fails with \"RenderFailed\": \"bad ignition\""
        );
        let mut p = pool("worker", false, "rendered-worker-a");
        p.status.as_mut().unwrap().conditions.clear();
        assert_eq!(pool_status(&p), "<unknown>");
        set_cond(
            &mut p,
            cond(PINNED_DEGRADED, "True", "PrefetchFailed", "no space"),
        );
        assert_eq!(
            pool_status(&p),
            "pool is degraded because pinned image sets failed with \"PrefetchFailed\": \"no space\""
        );
    }

    #[test]
    fn an_interrupted_build_blocks_upgrades_after_a_degraded_pool() {
        let mut w = World::settled();
        set_cond(w.pool("worker"), cond(BUILD_INTERRUPTED, "True", "", ""));
        let out = w.report_upstream();
        assert_eq!(said(&out.status, UPGRADEABLE).1, "InterruptedBuild");
        degrade(w.pool("master"), "x");
        let out = w.report_upstream();
        assert_eq!(said(&out.status, UPGRADEABLE).1, "DegradedPool");
    }

    #[test]
    fn kept_base_configs_refuse_minor_upgrades_after_upstreams_reasons() {
        let mut w = World::settled();
        w.kept = vec!["00-master (abc123)".into(), "00-worker (abc123)".into()];
        let out = w.report_upstream();
        let (status, reason, message) = said(&out.status, UPGRADEABLE);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", BASE_CONFIGS_KEPT)
        );
        assert!(
            message.contains("(00-master (abc123), 00-worker (abc123))"),
            "{message}"
        );
        assert!(message.contains("Hand the cluster back to upstream's operator for a minor upgrade; z-stream upgrades are not blocked"), "{message}");
        // The release is still reported: Upgradeable does not hold the version back.
        assert_eq!(said(&out.status, PROGRESSING).0, "False");
        degrade(w.pool("worker"), "x");
        assert_eq!(
            said(&w.report_upstream().status, UPGRADEABLE).1,
            "DegradedPool"
        );
    }

    #[test]
    fn the_kept_configs_named_are_bounded() {
        let mut w = World::settled();
        w.kept = (0..MAX_KEPT_NAMED)
            .map(|i| format!("00-pool{i:02} (c)"))
            .collect();
        let message = said(&w.report_upstream().status, UPGRADEABLE).2;
        assert!(message.contains("00-pool09 (c))"), "{message}");
        w.kept.push("00-pool10 (c)".into());
        let message = said(&w.report_upstream().status, UPGRADEABLE).2;
        assert!(message.contains("00-pool09 (c), 1 more)"), "{message}");
        assert!(!message.contains("00-pool10"), "{message}");
    }

    #[test]
    fn related_objects_are_upstreams() {
        let out = World::settled().report(&upstream_status(), T0);
        let r = &out.status.related_objects;
        assert_eq!(r.len(), 30);
        assert_eq!(
            r[0],
            ObjectReference {
                group: "".into(),
                resource: "namespaces".into(),
                namespace: "".into(),
                name: OPERATOR_NAMESPACE.into()
            }
        );
        assert_eq!(r[8].name, "openshift-kni-infra");
        assert_eq!(r[29].name, "system-bootstrap-node-renewal");
        assert_eq!(r[29].resource, "clusterrolebindings");
    }

    #[test]
    fn other_conditions_are_kept() {
        let mut current = upstream_status();
        current.conditions.push(ClusterOperatorStatusCondition {
            type_: "EvaluationConditionsDetected".into(),
            status: "False".into(),
            reason: "AsExpected".into(),
            ..Default::default()
        });
        let out = World::settled().report(&current, T0);
        assert_eq!(
            said(&out.status, "EvaluationConditionsDetected"),
            triple("False", "AsExpected", "")
        );
    }

    #[test]
    fn the_extension_lists_at_most_the_limit_of_pools() {
        let mut w = World::settled();
        w.pools = (0..MAX_EXTENSION_POOLS)
            .map(|i| Arc::new(pool(&format!("p{i:03}"), false, "r")))
            .collect();
        let ext = w.report_upstream().status.extension.unwrap();
        assert_eq!(ext.as_object().unwrap().len(), MAX_EXTENSION_POOLS);
        assert!(ext.get(MORE_POOLS_KEY).is_none());
        w.pools.push(Arc::new(pool("p999", false, "r")));
        let ext = w.report_upstream().status.extension.unwrap();
        assert_eq!(ext.as_object().unwrap().len(), MAX_EXTENSION_POOLS + 1);
        assert_eq!(ext[MORE_POOLS_KEY], "1 more pools; see `oc get mcp`");
        assert!(ext.get("p999").is_none());
    }

    #[test]
    fn messages_are_cut_at_the_limit() {
        let exact = "é".repeat(MAX_MESSAGE_CHARS);
        assert_eq!(bounded(&exact), exact);
        let over = "é".repeat(MAX_MESSAGE_CHARS + 1);
        let cut = bounded(&over);
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS);
        assert!(cut.ends_with('…'));
        // A node's long message reaches the Degraded message and the extension cut.
        let mut w = World::settled();
        degrade(w.pool("worker"), &"x".repeat(5000));
        let out = w.report_upstream();
        assert_eq!(
            said(&out.status, DEGRADED).2.chars().count(),
            MAX_MESSAGE_CHARS
        );
        let ext = out.status.extension.unwrap();
        assert_eq!(
            ext["worker"].as_str().unwrap().chars().count(),
            MAX_MESSAGE_CHARS
        );
        assert_eq!(
            ext["lastSyncError"].as_str().unwrap().chars().count(),
            MAX_MESSAGE_CHARS
        );
    }

    #[test]
    fn a_status_without_operator_image_reports_the_operator_alone() {
        let out = World::settled().report(&ClusterOperatorStatus::default(), T0);
        assert_eq!(
            out.status.versions,
            vec![OperandVersion {
                name: "operator".into(),
                version: X.into()
            }]
        );
        assert_eq!(
            out.events[0].message,
            "clusteroperator/machine-config version changed from [] to [{operator 4.18.2}]"
        );
    }
}
