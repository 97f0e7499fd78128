//! The controller/daemon protocol: annotation keys, states, labels, taints, condition types and reasons.
//!
//! One place, so that the controller, the daemon and the tooling can never disagree on a spelling.

/// Prefix of every mco annotation and label.
pub const PREFIX: &str = "machineconfiguration.openshift.io";

/// Node annotations (upstream `pkg/daemon/constants`).
pub mod annotations {
    /// The rendered config the node is on; written by the daemon.
    pub const CURRENT_CONFIG: &str = "machineconfiguration.openshift.io/currentConfig";
    /// The rendered config the controller wants the node on.
    pub const DESIRED_CONFIG: &str = "machineconfiguration.openshift.io/desiredConfig";
    /// The daemon's state: one of [`super::states`].
    pub const STATE: &str = "machineconfiguration.openshift.io/state";
    /// Why the node is Degraded or Unreconcilable (at most [`super::MAX_REASON_LEN`] characters).
    pub const REASON: &str = "machineconfiguration.openshift.io/reason";
    /// The drain or uncordon the daemon asks for: `drain-<mc>` or `uncordon-<mc>`.
    pub const DESIRED_DRAIN: &str = "machineconfiguration.openshift.io/desiredDrain";
    /// The last drain or uncordon the drain controller completed.
    pub const LAST_APPLIED_DRAIN: &str = "machineconfiguration.openshift.io/lastAppliedDrain";
    /// Set to `Rebooting` before the daemon reboots the node for an update.
    pub const POST_CONFIG_ACTION: &str = "machineconfiguration.openshift.io/post-config-action";
    /// The mco version that generated a rendered MachineConfig.
    pub const GENERATED_BY_CONTROLLER_VERSION: &str =
        "machineconfiguration.openshift.io/generated-by-controller-version";
    /// The release a ControllerConfig's OS images come from (the `releaseVersion` of the
    /// release's `machine-config-osimageurl` ConfigMap), copied onto each rendered MachineConfig
    /// made from it; the ClusterOperator reports that release once every pool runs such a config.
    pub const RELEASE_IMAGE_VERSION: &str =
        "machineconfiguration.openshift.io/release-image-version";
    /// Set on a rendered MachineConfig whose OS image a user MachineConfig overrode.
    pub const OS_IMAGE_URL_OVERRIDDEN: &str =
        "machineconfiguration.openshift.io/os-image-url-overridden";
    /// Legacy: set when an SSH login was detected on the node.
    pub const SSH: &str = "machineconfiguration.openshift.io/ssh";
    /// On-cluster image mode: the image a MachineOSBuild built for the node's pool, which the
    /// controller sets together with [`DESIRED_CONFIG`] and the daemon boots in place of the
    /// rendered config's `osImageURL`. Absent for a node outside image mode.
    pub const DESIRED_IMAGE: &str = "machineconfiguration.openshift.io/desiredImage";
    /// The image-mode image the node runs, written by the daemon with [`CURRENT_CONFIG`];
    /// removed once the node has left image mode.
    pub const CURRENT_IMAGE: &str = "machineconfiguration.openshift.io/currentImage";
    /// On a MachineConfig with an image-mode image in its `osImageURL` (the daemon's target, as
    /// upstream's daemon builds it): the rendered config's own `osImageURL`.
    pub const ORIGINAL_OS_IMAGE_URL: &str = "machineconfiguration.openshift.io/original-osimageurl";
    /// On such a MachineConfig: the image-mode image it carries.
    pub const OCL_OS_IMAGE_URL: &str = "machineconfiguration.openshift.io/ocl-osimageurl";
}

/// Values of the [`annotations::STATE`] annotation.
pub mod states {
    pub const DONE: &str = "Done";
    pub const WORKING: &str = "Working";
    pub const DEGRADED: &str = "Degraded";
    pub const UNRECONCILABLE: &str = "Unreconcilable";
    /// Value of [`super::annotations::POST_CONFIG_ACTION`] while a reboot is under way.
    pub const REBOOTING: &str = "Rebooting";
}

/// Prefixes of the drain request values.
pub mod drain {
    pub const DRAIN_PREFIX: &str = "drain-";
    pub const UNCORDON_PREFIX: &str = "uncordon-";

    /// `drain-<mc>`.
    pub fn drain(config: &str) -> String {
        format!("{DRAIN_PREFIX}{config}")
    }

    /// `uncordon-<mc>`.
    pub fn uncordon(config: &str) -> String {
        format!("{UNCORDON_PREFIX}{config}")
    }
}

/// Labels.
pub mod labels {
    /// Pool membership label on user MachineConfigs: `machineconfiguration.openshift.io/role: <pool>`.
    pub const ROLE: &str = "machineconfiguration.openshift.io/role";
    /// Node role label prefix: `node-role.kubernetes.io/<role>`.
    pub const NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
    pub const NODE_ROLE_MASTER: &str = "node-role.kubernetes.io/master";
    pub const NODE_ROLE_WORKER: &str = "node-role.kubernetes.io/worker";
    /// Zone label used to order rollout candidates.
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    pub const MCO_BUILT_IN: &str = "machineconfiguration.openshift.io/mco-built-in";
}

/// The taint carried by nodes that are not yet at their pool's target config.
pub mod taints {
    pub const UPDATE_IN_PROGRESS_KEY: &str = "UpdateInProgress";
    pub const UPDATE_IN_PROGRESS_EFFECT: &str = "PreferNoSchedule";
}

/// Names of well-known objects.
/// library-go's certrotation label and annotations, on the machine config server's CA, bundle
/// and serving certificate (upstream's cert rotation controller writes them; mco's controller
/// writes and `mco doctor` reads them).
pub mod server_certs {
    /// `signer`, `ca-bundle` or `target`; an object without it is the administrator's own.
    pub const MANAGED_LABEL: &str = "auth.openshift.io/managed-certificate-type";
    pub const NOT_BEFORE: &str = "auth.openshift.io/certificate-not-before";
    pub const NOT_AFTER: &str = "auth.openshift.io/certificate-not-after";
    pub const ISSUER: &str = "auth.openshift.io/certificate-issuer";
    pub const HOSTNAMES: &str = "auth.openshift.io/certificate-hostnames";
    pub const REFRESH_PERIOD: &str = "certificates.openshift.io/refresh-period";
    /// The bundle's key in ConfigMap `machine-config-server-ca`.
    pub const BUNDLE_KEY: &str = "ca-bundle.crt";
}

pub mod names {
    /// The singleton ControllerConfig.
    pub const CONTROLLER_CONFIG: &str = "machine-config-controller";
    pub const MASTER_POOL: &str = "master";
    pub const WORKER_POOL: &str = "worker";
    /// Prefix of rendered MachineConfig names: `rendered-<pool>-<hash>`.
    pub const RENDERED_PREFIX: &str = "rendered-";
    /// The machine config server's CA: a Secret (the signing pair) and a ConfigMap (every CA
    /// still valid, `ca-bundle.crt`), upstream's name for both.
    pub const SERVER_CA: &str = "machine-config-server-ca";
    /// The Secret holding the machine config server's serving certificate, which its DaemonSet
    /// mounts.
    pub const SERVER_TLS_SECRET: &str = "mco-server-tls";
    /// Sentinel for an MCN whose desired config the controller has not set yet.
    pub const NOT_YET_SET: &str = "not-yet-set";
    /// The field manager mco uses for server-side apply of MCN status.
    pub const FIELD_MANAGER: &str = "machine-config-operator";
    /// Where upstream's operator points the ControllerConfig's `spec.pullSecret`: the one
    /// Secret the controller may read.
    pub const PULL_SECRET_NAMESPACE: &str = "openshift-config";
    pub const PULL_SECRET: &str = "pull-secret";
    /// The namespace mco is installed in unless told otherwise (`mco manifests --namespace`).
    /// Events about cluster-scoped objects (Nodes, pools) are recorded there, as upstream
    /// records them in `openshift-machine-config-operator`, never in `default`.
    pub const DEFAULT_NAMESPACE: &str = "mco-system";
    /// The variable the controller and the daemon learn their namespace from when no
    /// `--namespace` is given; the shipped workloads set it from the downward API
    /// (`metadata.namespace`).
    pub const NAMESPACE_ENV: &str = "POD_NAMESPACE";
}

/// MachineConfigPool condition types.
pub mod pool_conditions {
    pub const UPDATED: &str = "Updated";
    pub const UPDATING: &str = "Updating";
    pub const NODE_DEGRADED: &str = "NodeDegraded";
    pub const RENDER_DEGRADED: &str = "RenderDegraded";
    pub const DEGRADED: &str = "Degraded";
}

/// ControllerConfig condition types (upstream's template controller).
pub mod cc_conditions {
    pub const RUNNING: &str = "TemplateControllerRunning";
    pub const COMPLETED: &str = "TemplateControllerCompleted";
    pub const FAILING: &str = "TemplateControllerFailing";
}

/// MachineConfigNode condition types (v1alpha1, as in the seed documentation).
pub mod mcn_conditions {
    pub const UPDATED: &str = "Updated";
    pub const UPDATE_PREPARED: &str = "UpdatePrepared";
    pub const UPDATE_EXECUTED: &str = "UpdateExecuted";
    pub const UPDATE_POST_ACTION_COMPLETE: &str = "UpdatePostActionComplete";
    pub const UPDATE_COMPLETE: &str = "UpdateComplete";
    pub const RESUMED: &str = "Resumed";
    pub const UPDATE_COMPATIBLE: &str = "UpdateCompatible";
    pub const APPLIED_FILES_AND_OS: &str = "AppliedFilesAndOS";
    pub const DRAINED: &str = "Drained";
    pub const CORDONED: &str = "Cordoned";
    pub const REBOOTED_NODE: &str = "RebootedNode";
    pub const RELOADED_CRIO: &str = "ReloadedCRIO";
    pub const UNCORDONED: &str = "Uncordoned";
    pub const NODE_DEGRADED: &str = "NodeDegraded";

    /// Every condition type an MCN carries from its first status write, in display order.
    pub const ALL: [&str; 14] = [
        UPDATED,
        UPDATE_PREPARED,
        UPDATE_EXECUTED,
        UPDATE_POST_ACTION_COMPLETE,
        UPDATE_COMPLETE,
        RESUMED,
        UPDATE_COMPATIBLE,
        APPLIED_FILES_AND_OS,
        DRAINED,
        CORDONED,
        REBOOTED_NODE,
        RELOADED_CRIO,
        UNCORDONED,
        NODE_DEGRADED,
    ];

    /// The parent phase of a child condition, which upstream writes together with it.
    pub fn parent_of(child: &str) -> Option<&'static str> {
        match child {
            UPDATE_COMPATIBLE => Some(UPDATE_PREPARED),
            APPLIED_FILES_AND_OS | DRAINED | CORDONED => Some(UPDATE_EXECUTED),
            RELOADED_CRIO | REBOOTED_NODE => Some(UPDATE_POST_ACTION_COMPLETE),
            UNCORDONED => Some(UPDATE_COMPLETE),
            _ => None,
        }
    }
}

/// MachineConfigNode condition reasons and the filler message.
pub mod mcn_reasons {
    /// Upstream's spelling of the reason carried by conditions not reached yet.
    pub const NOT_YET_OCCURRED: &str = "NotYetOccurred";

    /// The filler message of a condition not reached yet.
    pub fn not_yet_message(condition_type: &str) -> String {
        format!("This node has not yet entered the {condition_type} phase")
    }

    /// The conditions the drain controller sets True on uncordoning a node, before it answers
    /// the request: type, reason and message. Shared so that the daemon, once it sees the
    /// answer, can hold its copy of the MCN as the drain controller left it.
    pub const UNCORDONED: [(&str, &str, &str); 2] = [
        (
            super::mcn_conditions::UPDATE_COMPLETE,
            "Uncordoned",
            "Uncordoned Node as part of completing upgrade phase",
        ),
        (
            super::mcn_conditions::UNCORDONED,
            "UpdateCompleteUncordoned",
            "UnCordoned node. The node is reporting Unschedulable = false",
        ),
    ];
}

/// Values of an MCN's `status.health`.
pub mod health {
    pub const HEALTHY: &str = "Healthy";
    pub const UNHEALTHY: &str = "Unhealthy";
}

/// Upstream truncates the reason annotation to this many characters.
pub const MAX_REASON_LEN: usize = 2000;

/// Upstream's legacy custom-origin description for pivot-era deployments.
pub const PIVOT_CUSTOM_ORIGIN_DESCRIPTION: &str = "Managed by machine-config-operator";
