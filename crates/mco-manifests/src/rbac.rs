//! Least-privilege identities. Each rule names what a code path of the controller or daemon
//! does; tests pin the exact sets so that widening one is a deliberate, reviewed change.
//!
//! Only the controller is granted Secrets: the cluster's pull secret, `pull-secret`, by name, in
//! the install namespace and (with `--openshift`) in upstream's `openshift-config`; the machine
//! config server's CA and serving certificate, by name, in the install namespace (with
//! `--openshift`, upstream's, in `openshift-machine-config-operator`); and, with `--openshift`,
//! the Secrets of `openshift-machine-api`, whose user-data Secrets it keeps (which those are is
//! told by their content, so RBAC cannot name them). What RBAC cannot express (a daemon may
//! write only its own Node and MachineConfigNode) is enforced by the admission policies in
//! [`crate::admission`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use mco_api::constants::names;

use crate::{
    AUTH_DELEGATOR_BINDING, CONTROLLER, DAEMON, EVENTS_ROLE, METRICS_READER_ROLE,
    NODE_BOOTSTRAPPER, NODE_BOOTSTRAPPER_TOKEN, Options, SERVER,
};

const MCO_GROUP: &str = mco_api::GROUP;
const OPERATOR_GROUP: &str = mco_api::operator::OPERATOR_GROUP;
const CONFIG_GROUP: &str = "config.openshift.io";
const ROLLOUTS_GROUP: &str = mco_api::rollouts::GROUP;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..Default::default()
    }
}

fn named_rule(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        resource_names: Some(strings(names)),
        ..rule(groups, resources, verbs)
    }
}

/// `app.kubernetes.io/*` labels shared by every object mco installs.
pub(crate) fn labels(component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "mco".to_string()),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
    ])
}

fn cluster_meta(name: &str, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels(component)),
        ..Default::default()
    }
}

fn namespaced_meta(name: &str, namespace: &str, component: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.to_string()),
        ..cluster_meta(name, component)
    }
}

fn component_of(name: &str) -> &'static str {
    if name == DAEMON {
        "daemon"
    } else if name == SERVER || name == NODE_BOOTSTRAPPER {
        "server"
    } else {
        "controller"
    }
}

/// The workloads' ServiceAccounts, and `node-bootstrapper`, whose token new machines' kubelets
/// bootstrap with (no workload runs as it).
pub fn service_accounts(opts: &Options) -> Vec<ServiceAccount> {
    [CONTROLLER, DAEMON, SERVER, NODE_BOOTSTRAPPER]
        .into_iter()
        .map(|name| ServiceAccount {
            metadata: namespaced_meta(name, &opts.namespace, component_of(name)),
            ..Default::default()
        })
        .collect()
}

/// `node-bootstrapper`'s long-lived token, which Kubernetes fills in and the machine config
/// server mounts (it is never read through the API).
pub fn node_bootstrapper_token(opts: &Options) -> Secret {
    let mut meta = namespaced_meta(NODE_BOOTSTRAPPER_TOKEN, &opts.namespace, "server");
    meta.annotations = Some(BTreeMap::from([(
        "kubernetes.io/service-account.name".to_string(),
        NODE_BOOTSTRAPPER.to_string(),
    )]));
    Secret {
        metadata: meta,
        type_: Some("kubernetes.io/service-account-token".to_string()),
        ..Default::default()
    }
}

/// The daemon reads its inputs, reports in MachineConfigNodes and annotates its Node.
pub fn daemon_rules(opts: &Options) -> Vec<PolicyRule> {
    let mut rules = vec![
        // Its Node: read, and merge-patch the currentConfig/state/reason/desiredDrain
        // annotations. RBAC cannot limit this to its own Node; `mco-node-guards` does.
        rule(&[""], &["nodes"], &["get", "list", "watch", "patch"]),
        // PinnedImageSets: which images to pull and pin for its pools.
        rule(
            &[MCO_GROUP],
            &[
                "machineconfigs",
                "machineconfigpools",
                "controllerconfigs",
                "pinnedimagesets",
            ],
            &["get", "list", "watch"],
        ),
        // The merged node disruption policy in `MachineConfiguration/cluster`'s status.
        rule(
            &[OPERATOR_GROUP],
            &["machineconfigurations"],
            &["get", "list", "watch"],
        ),
        // Its MachineConfigNode; `mco-mcn-guards` limits writes to the one named after its node.
        rule(
            &[MCO_GROUP],
            &["machineconfignodes", "machineconfignodes/status"],
            &["get", "list", "watch", "create", "update", "patch"],
        ),
    ];
    if opts.openshift {
        // hostPID, hostNetwork, privileged and a hostPath volume need the `privileged` SCC.
        rules.push(named_rule(
            &["security.openshift.io"],
            &["securitycontextconstraints"],
            &["privileged"],
            &["use"],
        ));
    }
    rules
}

/// The machine config server only reads: a pool's rendered config names, the config, the
/// ControllerConfig's CA bundles it appends, and in image mode the pool's built image.
pub fn server_rules() -> Vec<PolicyRule> {
    vec![rule(
        &[MCO_GROUP],
        &[
            "machineconfigs",
            "machineconfigpools",
            "controllerconfigs",
            "machineosconfigs",
            "machineosbuilds",
        ],
        &["get", "list", "watch"],
    )]
}

/// Render, roll out, drain and report; leader election is in [`controller_lease_role`].
pub fn controller_rules() -> Vec<PolicyRule> {
    vec![
        // Rollout: desiredConfig annotation and the UpdateInProgress taint. Drain: cordon and
        // uncordon. All merge patches.
        rule(&[""], &["nodes"], &["get", "list", "watch", "patch"]),
        // Drain: the node's pods (field selector), evicted (never deleted, so budgets hold).
        rule(&[""], &["pods"], &["list"]),
        rule(&[""], &["pods/eviction"], &["create"]),
        // Drain: name the PodDisruptionBudgets that block an eviction.
        rule(&["policy"], &["poddisruptionbudgets"], &["list"]),
        // Drain: whether the DaemonSet owning a pod still exists (kubectl drain's rule).
        rule(&["apps"], &["daemonsets"], &["get"]),
        // Render: create rendered configs, garbage-collect old ones.
        rule(
            &[MCO_GROUP],
            &["machineconfigs"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        // PinnedImageSets: listed in the spec of the pools their labels select.
        // MachineOSConfigs and MachineOSBuilds: the image a pool in image mode goes to.
        rule(
            &[MCO_GROUP],
            &["pinnedimagesets", "machineosconfigs", "machineosbuilds"],
            &["get", "list", "watch"],
        ),
        // Render: spec.configuration and spec.pinnedImageSets; status: counts and conditions.
        rule(
            &[MCO_GROUP],
            &["machineconfigpools"],
            &["get", "list", "watch", "update", "patch"],
        ),
        rule(
            &[MCO_GROUP],
            &["machineconfigpools/status"],
            &["get", "update", "patch"],
        ),
        // MachineConfigNode lifecycle: created with the node, deleted after it.
        rule(
            &[MCO_GROUP],
            &["machineconfignodes"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        rule(
            &[MCO_GROUP],
            &["machineconfignodes/status"],
            &["get", "update", "patch"],
        ),
        rule(
            &[MCO_GROUP],
            &["controllerconfigs"],
            &["get", "list", "watch"],
        ),
        // Conditions and controllerCertificates, as upstream's template controller writes them.
        rule(
            &[MCO_GROUP],
            &["controllerconfigs/status"],
            &["get", "update", "patch"],
        ),
        // Node disruption policy: created when missing (as upstream), merged into its status.
        rule(
            &[OPERATOR_GROUP],
            &["machineconfigurations"],
            &["get", "list", "watch", "create"],
        ),
        rule(
            &[OPERATOR_GROUP],
            &["machineconfigurations/status"],
            &["get", "update", "patch"],
        ),
        // Generators: the suffix annotation and the finalizers naming their MachineConfigs,
        // and the Success/Failure condition.
        rule(
            &[MCO_GROUP],
            &["kubeletconfigs", "containerruntimeconfigs"],
            &["get", "list", "watch", "update", "patch"],
        ),
        rule(
            &[MCO_GROUP],
            &["kubeletconfigs/status", "containerruntimeconfigs/status"],
            &["get", "update", "patch"],
        ),
        // Registries: read only; a refused input is reported in an event.
        rule(
            &[CONFIG_GROUP],
            &["images", "imagedigestmirrorsets", "imagetagmirrorsets"],
            &["get", "list", "watch"],
        ),
        // Templates: the TLS profile of the kubelet's serving endpoint.
        rule(&[CONFIG_GROUP], &["apiservers"], &["get", "list", "watch"]),
        // The 97- and 98- kubelet configs: the cluster's node settings, its feature gates and
        // the release whose gates apply.
        rule(
            &[CONFIG_GROUP],
            &["nodes", "featuregates", "clusterversions"],
            &["get", "list", "watch"],
        ),
        // Registries: signature verification policies; an ImagePolicy's status says which of
        // its scopes a ClusterImagePolicy covers.
        rule(
            &[CONFIG_GROUP],
            &["clusterimagepolicies", "imagepolicies"],
            &["get", "list", "watch"],
        ),
        rule(&[CONFIG_GROUP], &["imagepolicies/status"], &["patch"]),
        rule(
            &[OPERATOR_GROUP],
            &["imagecontentsourcepolicies"],
            &["get", "list", "watch"],
        ),
        // Rollout policies: read, and their status (validity, conflicts, each pool's phase).
        rule(
            &[ROLLOUTS_GROUP],
            &["rolloutpolicies"],
            &["get", "list", "watch"],
        ),
        rule(
            &[ROLLOUTS_GROUP],
            &["rolloutpolicies/status"],
            &["get", "update", "patch"],
        ),
    ]
}

/// Events on Nodes and pools (cluster-scoped objects, recorded in the install namespace, as
/// upstream records them in its own) and on objects in the install namespace.
pub fn events_rules() -> Vec<PolicyRule> {
    vec![
        rule(&[""], &["events"], &["create", "patch"]),
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
    ]
}

/// The namespaces the events role is bound in for both identities: the install namespace
/// only, where both record the Events about cluster-scoped objects. The controller alone also
/// has it in [`controller_event_namespaces`].
pub fn event_namespaces(opts: &Options) -> Vec<String> {
    vec![opts.namespace.clone()]
}

/// [`controller_rules`], and with `--openshift` the merge patch of the ControllerConfig's CA
/// bundles and proxy, which the controller keeps in step with the cluster's
/// ([`ca_bundle_sync`]): the one ControllerConfig, by name; and the cluster's proxy it reads,
/// `proxies.config.openshift.io/cluster`, by name (`list` and `watch` with a `metadata.name`
/// field selector for it); and the status of the ClusterOperator
/// [`CLUSTER_OPERATOR`], by name, which it reports.
pub fn controller_cluster_rules(opts: &Options) -> Vec<PolicyRule> {
    let mut rules = controller_rules();
    if ca_bundle_sync(opts) {
        rules.push(named_rule(
            &[MCO_GROUP],
            &["controllerconfigs"],
            &[names::CONTROLLER_CONFIG],
            &["patch"],
        ));
        rules.push(named_rule(
            &[CONFIG_GROUP],
            &["proxies"],
            &[PROXY_NAME],
            &["get", "list", "watch"],
        ));
        // The `machine-config` ClusterOperator, reported as upstream's operator reported it:
        // read by name, its status written; never created (the CVO creates it).
        rules.push(named_rule(
            &[CONFIG_GROUP],
            &["clusteroperators"],
            &[CLUSTER_OPERATOR],
            &["get", "list", "watch"],
        ));
        rules.push(named_rule(
            &[CONFIG_GROUP],
            &["clusteroperators/status"],
            &[CLUSTER_OPERATOR],
            &["update", "patch"],
        ));
    }
    rules
}

pub fn cluster_roles(opts: &Options) -> Vec<ClusterRole> {
    vec![
        ClusterRole {
            metadata: cluster_meta(CONTROLLER, "controller"),
            rules: Some(controller_cluster_rules(opts)),
            ..Default::default()
        },
        ClusterRole {
            metadata: cluster_meta(DAEMON, "daemon"),
            rules: Some(daemon_rules(opts)),
            ..Default::default()
        },
        ClusterRole {
            metadata: cluster_meta(SERVER, "server"),
            rules: Some(server_rules()),
            ..Default::default()
        },
        ClusterRole {
            metadata: cluster_meta(EVENTS_ROLE, "events"),
            rules: Some(events_rules()),
            ..Default::default()
        },
        ClusterRole {
            metadata: cluster_meta(METRICS_READER_ROLE, "metrics"),
            rules: Some(metrics_reader_rules()),
            ..Default::default()
        },
    ]
}

/// What reading the metrics ports takes (`--metrics-auth=delegated` asks the API server
/// exactly this); bound to nobody: the administrator binds Prometheus's ServiceAccount.
pub fn metrics_reader_rules() -> Vec<PolicyRule> {
    vec![PolicyRule {
        non_resource_urls: Some(strings(&["/metrics"])),
        verbs: strings(&["get"]),
        ..Default::default()
    }]
}

fn sa_subject(opts: &Options, name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".to_string(),
        name: name.to_string(),
        namespace: Some(opts.namespace.clone()),
        ..Default::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
    }
}

/// Each workload's ServiceAccount to its own ClusterRole; `node-bootstrapper` to Kubernetes'
/// `system:node-bootstrapper` (request kubelet client certificates), as upstream binds it.
pub fn cluster_role_bindings(opts: &Options) -> Vec<ClusterRoleBinding> {
    let mut out: Vec<ClusterRoleBinding> = [CONTROLLER, DAEMON, SERVER]
        .into_iter()
        .map(|name| ClusterRoleBinding {
            metadata: cluster_meta(name, component_of(name)),
            role_ref: role_ref("ClusterRole", name),
            subjects: Some(vec![sa_subject(opts, name)]),
        })
        .collect();
    // The metrics ports review their callers: create TokenReviews and SubjectAccessReviews,
    // with Kubernetes' own role for it, as kube-rbac-proxy deployments bind it.
    out.push(ClusterRoleBinding {
        metadata: cluster_meta(AUTH_DELEGATOR_BINDING, "metrics"),
        role_ref: role_ref("ClusterRole", "system:auth-delegator"),
        subjects: Some(vec![sa_subject(opts, CONTROLLER), sa_subject(opts, DAEMON)]),
    });
    out.push(ClusterRoleBinding {
        metadata: cluster_meta(NODE_BOOTSTRAPPER, "server"),
        role_ref: role_ref("ClusterRole", "system:node-bootstrapper"),
        subjects: Some(vec![sa_subject(opts, NODE_BOOTSTRAPPER)]),
    });
    out
}

/// Leader election: one Lease in the install namespace. `create` cannot be limited by name.
pub fn controller_lease_rules() -> Vec<PolicyRule> {
    vec![
        rule(&["coordination.k8s.io"], &["leases"], &["create"]),
        named_rule(
            &["coordination.k8s.io"],
            &["leases"],
            &[CONTROLLER],
            &["get", "update"],
        ),
    ]
}

/// The pull secret the templates write to every node: one Secret, by name. `list` and `watch`
/// are allowed only with a `metadata.name` field selector for it.
pub fn controller_pull_secret_rules() -> Vec<PolicyRule> {
    vec![named_rule(
        &[""],
        &["secrets"],
        &[names::PULL_SECRET],
        &["get", "list", "watch"],
    )]
}

/// The name of the Role and RoleBinding that grant [`controller_pull_secret_rules`].
pub const PULL_SECRET_ROLE: &str = "mco-controller-pull-secret";

/// Where the controller may read the pull secret: the install namespace, and upstream's
/// `openshift-config` on OpenShift, OKD and UCCPS, where that namespace exists.
pub fn pull_secret_namespaces(opts: &Options) -> Vec<String> {
    let mut out = vec![opts.namespace.clone()];
    if opts.openshift && opts.namespace != names::PULL_SECRET_NAMESPACE {
        out.push(names::PULL_SECRET_NAMESPACE.to_string());
    }
    out
}

pub fn controller_pull_secret_roles(opts: &Options) -> Vec<Role> {
    pull_secret_namespaces(opts)
        .iter()
        .map(|ns| Role {
            metadata: namespaced_meta(PULL_SECRET_ROLE, ns, "controller"),
            rules: Some(controller_pull_secret_rules()),
        })
        .collect()
}

/// The name of the Role and RoleBinding that grant [`controller_server_certs_rules`].
pub const SERVER_CERTS_ROLE: &str = "mco-controller-server-certs";

/// Upstream's namespace of the machine config server's certificates, where the controller keeps
/// them with `--openshift`.
pub const OPENSHIFT_SERVER_CERTS_NAMESPACE: &str = "openshift-machine-config-operator";
/// Upstream's serving Secret, which upstream's machine config server mounts.
pub const OPENSHIFT_SERVER_TLS_SECRET: &str = "machine-config-server-tls";
/// The Machine API's namespace, whose user-data Secrets the controller keeps with
/// `--openshift`.
pub const OPENSHIFT_USER_DATA_NAMESPACE: &str = "openshift-machine-api";

/// Where the controller keeps the machine config server's certificates: the install namespace,
/// or upstream's with `--openshift`, where upstream's server serves them.
pub fn server_certs_namespace(opts: &Options) -> String {
    if opts.openshift {
        OPENSHIFT_SERVER_CERTS_NAMESPACE.to_string()
    } else {
        opts.namespace.clone()
    }
}

/// The serving certificate's Secret: mco's, or upstream's with `--openshift`.
pub fn server_tls_secret(opts: &Options) -> &'static str {
    if opts.openshift {
        OPENSHIFT_SERVER_TLS_SECRET
    } else {
        names::SERVER_TLS_SECRET
    }
}

/// Where the controller keeps the Machine API's user-data Secrets pointing at the server's CA
/// bundle: with `--openshift` only, as upstream's cert rotation controller does.
pub fn user_data_namespace(opts: &Options) -> Option<&'static str> {
    opts.openshift.then_some(OPENSHIFT_USER_DATA_NAMESPACE)
}

/// The machine config server's CA and serving certificate (`serving_secret`), which the
/// controller keeps and rotates: read, watch (by a `metadata.name` field selector, which RBAC
/// allows with a rule for that name) and rewrite the three objects by name; `create` cannot be
/// limited to names.
pub fn controller_server_certs_rules(serving_secret: &str) -> Vec<PolicyRule> {
    vec![
        rule(&[""], &["secrets", "configmaps"], &["create"]),
        named_rule(
            &[""],
            &["secrets"],
            &[names::SERVER_CA, serving_secret],
            &["get", "list", "watch", "update"],
        ),
        named_rule(
            &[""],
            &["configmaps"],
            &[names::SERVER_CA],
            &["get", "list", "watch", "update"],
        ),
    ]
}

pub fn controller_server_certs_role(opts: &Options) -> Role {
    Role {
        metadata: namespaced_meta(
            SERVER_CERTS_ROLE,
            &server_certs_namespace(opts),
            "controller",
        ),
        rules: Some(controller_server_certs_rules(server_tls_secret(opts))),
    }
}

/// The name of the Roles and RoleBindings that grant [`controller_user_data_roles`].
pub const USER_DATA_ROLE: &str = "mco-controller-user-data";

/// What the user-data keeper needs beyond [`controller_server_certs_rules`] (which let it
/// watch the bundle), with `--openshift`: in the Machine API's namespace, the Secrets, watched
/// and rewritten (which are user-data Secrets is told by their content, so RBAC cannot name
/// them).
pub fn controller_user_data_roles(opts: &Options) -> Vec<Role> {
    let Some(ns) = user_data_namespace(opts) else {
        return vec![];
    };
    vec![Role {
        metadata: namespaced_meta(USER_DATA_ROLE, ns, "controller"),
        rules: Some(vec![rule(
            &[""],
            &["secrets"],
            &["get", "list", "watch", "update"],
        )]),
    }]
}

/// Whether the controller keeps the ControllerConfig's CA bundles in step with the cluster's
/// (`--sync-controller-config`), as upstream's operator does: with `--openshift`, where that
/// operator is scaled to 0 and the sources exist.
pub fn ca_bundle_sync(opts: &Options) -> bool {
    opts.openshift
}

/// The name of the Roles and RoleBindings that grant [`controller_ca_bundle_roles`].
pub const CA_BUNDLES_ROLE: &str = "mco-controller-ca-bundles";
/// Where the cluster publishes its CA bundles.
pub const OPENSHIFT_CONFIG_MANAGED_NAMESPACE: &str = "openshift-config-managed";
/// The published bundles the controller reads there: the kube-apiserver's client CA and the
/// image registry CAs.
pub const PUBLISHED_CA_BUNDLES: [&str; 2] = ["kube-apiserver-client-ca", "image-registry-ca"];
/// The cluster's proxy config the CA bundle sync reads (`proxies.config.openshift.io`).
pub const PROXY_NAME: &str = "cluster";
/// The ClusterOperator whose status the controller reports with `--openshift`.
pub const CLUSTER_OPERATOR: &str = mco_api::clusteroperator::MACHINE_CONFIG;
/// Where the administrator's registry CA ConfigMap lives.
pub const OPENSHIFT_CONFIG_NAMESPACE: &str = "openshift-config";
/// The release's OS images, which the ControllerConfig follows (rewritten in an upgrade).
pub const OS_IMAGE_URLS: &str = "machine-config-osimageurl";
/// The release's other images (`images.json`: CRI-O's pause image among them), which the
/// ControllerConfig's `spec.images` follows (rewritten in an upgrade).
pub const RELEASE_IMAGES: &str = "machine-config-operator-images";

/// What the ControllerConfig sync reads, with `--openshift`: the two published bundles by name
/// in `openshift-config-managed` (`list` and `watch` are allowed only with a `metadata.name`
/// field selector for one of them), the ConfigMaps of `openshift-config`, where the Image
/// config names one of the administrator's choice (RBAC cannot name it), and the release's OS
/// images and other images by name in `openshift-machine-config-operator`.
pub fn controller_ca_bundle_roles(opts: &Options) -> Vec<Role> {
    if !ca_bundle_sync(opts) {
        return vec![];
    }
    vec![
        Role {
            metadata: namespaced_meta(
                CA_BUNDLES_ROLE,
                OPENSHIFT_CONFIG_MANAGED_NAMESPACE,
                "controller",
            ),
            rules: Some(vec![named_rule(
                &[""],
                &["configmaps"],
                &PUBLISHED_CA_BUNDLES,
                &["get", "list", "watch"],
            )]),
        },
        Role {
            metadata: namespaced_meta(CA_BUNDLES_ROLE, OPENSHIFT_CONFIG_NAMESPACE, "controller"),
            rules: Some(vec![rule(
                &[""],
                &["configmaps"],
                &["get", "list", "watch"],
            )]),
        },
        Role {
            metadata: namespaced_meta(
                CA_BUNDLES_ROLE,
                OPENSHIFT_SERVER_CERTS_NAMESPACE,
                "controller",
            ),
            rules: Some(vec![named_rule(
                &[""],
                &["configmaps"],
                &[OS_IMAGE_URLS, RELEASE_IMAGES],
                &["get", "list", "watch"],
            )]),
        },
    ]
}

/// Namespaces outside [`event_namespaces`] where the controller records Events about the
/// objects it keeps there: upstream's certificates' and the Machine API's, with `--openshift`.
pub fn controller_event_namespaces(opts: &Options) -> Vec<String> {
    let shared = event_namespaces(opts);
    let mut out = vec![];
    if opts.openshift {
        for ns in [
            server_certs_namespace(opts),
            OPENSHIFT_USER_DATA_NAMESPACE.to_string(),
        ] {
            if !shared.contains(&ns) && !out.contains(&ns) {
                out.push(ns);
            }
        }
    }
    out
}

pub fn controller_lease_role(opts: &Options) -> Role {
    Role {
        metadata: namespaced_meta(
            &format!("{CONTROLLER}-leader-election"),
            &opts.namespace,
            "controller",
        ),
        rules: Some(controller_lease_rules()),
    }
}

pub fn role_bindings(opts: &Options) -> Vec<RoleBinding> {
    let mut out = vec![RoleBinding {
        metadata: namespaced_meta(
            &format!("{CONTROLLER}-leader-election"),
            &opts.namespace,
            "controller",
        ),
        role_ref: role_ref("Role", &format!("{CONTROLLER}-leader-election")),
        subjects: Some(vec![sa_subject(opts, CONTROLLER)]),
    }];
    for ns in pull_secret_namespaces(opts) {
        out.push(RoleBinding {
            metadata: namespaced_meta(PULL_SECRET_ROLE, &ns, "controller"),
            role_ref: role_ref("Role", PULL_SECRET_ROLE),
            subjects: Some(vec![sa_subject(opts, CONTROLLER)]),
        });
    }
    out.push(RoleBinding {
        metadata: namespaced_meta(
            SERVER_CERTS_ROLE,
            &server_certs_namespace(opts),
            "controller",
        ),
        role_ref: role_ref("Role", SERVER_CERTS_ROLE),
        subjects: Some(vec![sa_subject(opts, CONTROLLER)]),
    });
    for role in controller_user_data_roles(opts) {
        out.push(RoleBinding {
            metadata: role.metadata,
            role_ref: role_ref("Role", USER_DATA_ROLE),
            subjects: Some(vec![sa_subject(opts, CONTROLLER)]),
        });
    }
    for role in controller_ca_bundle_roles(opts) {
        out.push(RoleBinding {
            metadata: role.metadata,
            role_ref: role_ref("Role", CA_BUNDLES_ROLE),
            subjects: Some(vec![sa_subject(opts, CONTROLLER)]),
        });
    }
    for ns in event_namespaces(opts) {
        out.push(RoleBinding {
            metadata: namespaced_meta(EVENTS_ROLE, &ns, "events"),
            role_ref: role_ref("ClusterRole", EVENTS_ROLE),
            subjects: Some(vec![sa_subject(opts, CONTROLLER), sa_subject(opts, DAEMON)]),
        });
    }
    for ns in controller_event_namespaces(opts) {
        out.push(RoleBinding {
            metadata: namespaced_meta(EVENTS_ROLE, &ns, "events"),
            role_ref: role_ref("ClusterRole", EVENTS_ROLE),
            subjects: Some(vec![sa_subject(opts, CONTROLLER)]),
        });
    }
    out
}
