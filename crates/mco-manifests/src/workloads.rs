//! The controller Deployment and the daemon DaemonSet.
//!
//! Resource requests are upstream's (cpu 20m, memory 50Mi for each), a placeholder until mco's
//! own footprint has been measured on a real cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, Deployment, DeploymentSpec,
    DeploymentStrategy, RollingUpdateDaemonSet, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    HostPathVolumeSource, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, Toleration, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use mco_api::constants::names::NAMESPACE_ENV;

use crate::rbac::labels;
use crate::{
    CONTROLLER, CONTROLLER_METRICS_PORT, DAEMON, DAEMON_METRICS_PORT, NODE_BOOTSTRAPPER_TOKEN,
    Options, SERVER, SERVER_PORT, SERVER_TLS_SECRET,
};

/// The daemon's executable in the image (the Containerfile installs it beside `/usr/bin/mco`).
pub const DAEMON_BIN: &str = "/usr/bin/mco-daemon";

/// Where the daemon container sees the host's `/`.
pub const HOST_ROOT: &str = "/rootfs";

fn requests(cpu: &str, memory: &str) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.to_string())),
            ("memory".to_string(), Quantity(memory.to_string())),
        ])),
        ..Default::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            // The server fills in `apiVersion: v1` when absent; leaving it out makes a later
            // server-side apply conflict with a client-side one over that field.
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".to_string()),
                field_path: path.to_string(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn metrics_port(port: i32) -> Vec<ContainerPort> {
    vec![ContainerPort {
        name: Some("metrics".to_string()),
        container_port: port,
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }]
}

/// The kubelet's probe of an open path of the metrics port, which serves TLS.
fn http_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String("metrics".to_string()),
            scheme: Some("HTTPS".to_string()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Default::default()
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_string(),
        ..Default::default()
    }
}

fn toleration(key: &str, effect: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some(effect.to_string()),
        toleration_seconds: seconds,
        ..Default::default()
    }
}

fn selector(component: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(component)),
        ..Default::default()
    }
}

/// Two replicas behind a Lease: the standby takes over when the leader's node goes away.
pub fn controller(opts: &Options) -> Deployment {
    let mut pod_annotations = BTreeMap::new();
    if opts.openshift {
        pod_annotations.insert(
            "openshift.io/required-scc".to_string(),
            "restricted-v2".to_string(),
        );
    }
    let container = Container {
        name: "controller".to_string(),
        image: Some(opts.image.clone()),
        args: Some(controller_args(opts)),
        // NODE_NAME lets the controller update the node it runs on last, so a rollout does not
        // drain its own leader before the other nodes are done; POD_NAMESPACE is where it
        // records Events about cluster-scoped objects.
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("NODE_NAME", "spec.nodeName"),
            field_env(NAMESPACE_ENV, "metadata.namespace"),
        ]),
        ports: Some(metrics_port(CONTROLLER_METRICS_PORT)),
        liveness_probe: Some(http_probe("/healthz", 10, 3)),
        readiness_probe: Some(http_probe("/readyz", 5, 3)),
        resources: Some(requests("20m", "50Mi")),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                ..Default::default()
            }),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..Default::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Default::default()
    };
    Deployment {
        metadata: ObjectMeta {
            name: Some(CONTROLLER.to_string()),
            namespace: Some(opts.namespace.clone()),
            labels: Some(labels("controller")),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: selector("controller"),
            // A new replica is ready before an old one goes, so a standby always exists.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_string()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels("controller")),
                    annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(CONTROLLER.to_string()),
                    priority_class_name: Some("system-cluster-critical".to_string()),
                    node_selector: Some(BTreeMap::from([(
                        "kubernetes.io/os".to_string(),
                        "linux".to_string(),
                    )])),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(runtime_default_seccomp()),
                        ..Default::default()
                    }),
                    // Replicas on different nodes, so a drain of one node leaves a standby.
                    affinity: Some(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![
                                WeightedPodAffinityTerm {
                                    weight: 100,
                                    pod_affinity_term: PodAffinityTerm {
                                        label_selector: Some(selector("controller")),
                                        topology_key: "kubernetes.io/hostname".to_string(),
                                        ..Default::default()
                                    },
                                },
                            ]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    // May run on the control plane (as upstream does), and moves off a lost
                    // node after two minutes, as upstream's controller does.
                    tolerations: Some(vec![
                        toleration("node-role.kubernetes.io/control-plane", "NoSchedule", None),
                        toleration("node-role.kubernetes.io/master", "NoSchedule", None),
                        toleration("node.kubernetes.io/unreachable", "NoExecute", Some(120)),
                        toleration("node.kubernetes.io/not-ready", "NoExecute", Some(120)),
                    ]),
                    containers: vec![container],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// Drains (mco's own included) evict one controller replica at a time, so a standby survives.
pub fn controller_disruption_budget(opts: &Options) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(CONTROLLER.to_string()),
            namespace: Some(opts.namespace.clone()),
            labels: Some(labels("controller")),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(selector("controller")),
            ..Default::default()
        }),
        status: None,
    }
}

/// One privileged daemon per node, acting on the host through its root at [`HOST_ROOT`].
pub fn daemon(opts: &Options) -> DaemonSet {
    let mut pod_annotations = BTreeMap::new();
    if opts.openshift {
        pod_annotations.insert(
            "openshift.io/required-scc".to_string(),
            "privileged".to_string(),
        );
    }
    let container = Container {
        name: "daemon".to_string(),
        image: Some(opts.image.clone()),
        // The daemon-only executable: an idle daemon's resident memory is mostly the pages of
        // the executable it runs, and `mco` also carries the API server and controller.
        command: Some(vec![DAEMON_BIN.to_string()]),
        args: Some(vec![
            "--node=$(NODE_NAME)".to_string(),
            format!("--root={HOST_ROOT}"),
            "--host=real".to_string(),
            // On the host network the pod IP is the node's: reachable by Prometheus, but not
            // on every other interface of the host, as 0.0.0.0 would be.
            format!("--metrics-listen=$(POD_IP):{DAEMON_METRICS_PORT}"),
            // Only callers the API server authenticates and authorizes for `get` on /metrics,
            // over TLS: the port is on the host network, where NetworkPolicies do not reach.
            format!("--metrics-auth={}", crate::METRICS_AUTH),
        ]),
        // POD_NAMESPACE: where the daemon records its Node's Events.
        env: Some(vec![
            field_env("NODE_NAME", "spec.nodeName"),
            field_env("POD_IP", "status.podIP"),
            field_env(NAMESPACE_ENV, "metadata.namespace"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("metrics".to_string()),
            container_port: DAEMON_METRICS_PORT,
            // What the API server defaults to on the host network; explicit so the scheduler's
            // port check and a reader see that the node's port is taken.
            host_port: Some(DAEMON_METRICS_PORT),
            protocol: Some("TCP".to_string()),
            ..Default::default()
        }]),
        resources: Some(requests("20m", "50Mi")),
        security_context: Some(SecurityContext {
            privileged: Some(true),
            run_as_user: Some(0),
            read_only_root_filesystem: Some(false),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "rootfs".to_string(),
            mount_path: HOST_ROOT.to_string(),
            // Mounts the host makes later (new deployments, /run) become visible inside.
            mount_propagation: Some("HostToContainer".to_string()),
            ..Default::default()
        }]),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Default::default()
    };
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(DAEMON.to_string()),
            namespace: Some(opts.namespace.clone()),
            labels: Some(labels("daemon")),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: selector("daemon"),
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".to_string()),
                rolling_update: Some(RollingUpdateDaemonSet {
                    // No surge: two daemons on one node would both act on it.
                    max_surge: Some(IntOrString::Int(0)),
                    max_unavailable: Some(IntOrString::String("10%".to_string())),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels("daemon")),
                    annotations: (!pod_annotations.is_empty()).then_some(pod_annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(DAEMON.to_string()),
                    host_network: Some(true),
                    host_pid: Some(true),
                    // Cluster DNS from the host network namespace.
                    dns_policy: Some("ClusterFirstWithHostNet".to_string()),
                    priority_class_name: Some("system-node-critical".to_string()),
                    // An update in progress (rpm-ostree staging) finishes before the pod dies.
                    termination_grace_period_seconds: Some(600),
                    node_selector: Some(BTreeMap::from([(
                        "kubernetes.io/os".to_string(),
                        "linux".to_string(),
                    )])),
                    // Every node, whatever its taints: the daemon is how a node gets fixed.
                    tolerations: Some(vec![Toleration {
                        operator: Some("Exists".to_string()),
                        ..Default::default()
                    }]),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "rootfs".to_string(),
                        host_path: Some(HostPathVolumeSource {
                            path: "/".to_string(),
                            type_: Some("Directory".to_string()),
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn controller_args(opts: &Options) -> Vec<String> {
    let mut args = vec![
        "controller".to_string(),
        format!("--metrics-addr=0.0.0.0:{CONTROLLER_METRICS_PORT}"),
        format!("--metrics-auth={}", crate::METRICS_AUTH),
        format!("--lease-namespace={}", opts.namespace),
        format!("--lease-name={CONTROLLER}"),
        "--identity=$(POD_NAME)".to_string(),
    ];
    // The server's CA and certificate, for the host of the ControllerConfig's
    // apiServerInternalURI (which `--apiserver-url` sets in a fresh install); on OpenShift,
    // upstream's, which upstream's server serves, and the Machine API's user-data Secrets that
    // point new machines at their bundle.
    args.push(format!(
        "--server-certs-namespace={}",
        crate::rbac::server_certs_namespace(opts)
    ));
    args.push(format!(
        "--server-tls-secret={}",
        crate::rbac::server_tls_secret(opts)
    ));
    if let Some(ns) = crate::rbac::user_data_namespace(opts) {
        args.push(format!("--user-data-namespace={ns}"));
    }
    // On OpenShift, upstream's operator (scaled to 0) no longer copies the cluster's CA bundles
    // into the ControllerConfig: the controller does.
    if crate::rbac::ca_bundle_sync(opts) {
        args.push("--sync-controller-config".to_string());
    }
    args
}

/// Where the server container sees its certificate Secret.
const SERVER_TLS_DIR: &str = "/etc/mcs/tls";
/// Where the server reads `node-bootstrapper`'s token, as upstream's mounts it.
const BOOTSTRAP_TOKEN_DIR: &str = "/etc/mcs/bootstrap-token";

/// The machine config server on every master, on the host network as upstream's, so machines
/// reach it at `https://<api-int>:22623` before any pod network exists. Its certificate is the
/// Secret [`SERVER_TLS_SECRET`], made by the installer (docs/server.md).
pub fn server(opts: &Options) -> DaemonSet {
    let mut args = vec![
        "server".to_string(),
        format!("--listen=0.0.0.0:{SERVER_PORT}"),
        format!("--tls-cert={SERVER_TLS_DIR}/tls.crt"),
        format!("--tls-key={SERVER_TLS_DIR}/tls.key"),
    ];
    let mut mounts = vec![VolumeMount {
        name: "tls".to_string(),
        mount_path: SERVER_TLS_DIR.to_string(),
        read_only: Some(true),
        ..Default::default()
    }];
    let mut volumes = vec![Volume {
        name: "tls".to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(SERVER_TLS_SECRET.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }];
    // The machines' bootstrap kubeconfig: node-bootstrapper's token, and the URL they reach.
    if let Some(url) = &opts.apiserver_url {
        args.push(format!("--apiserver-url={url}"));
        args.push(format!("--bootstrap-token-dir={BOOTSTRAP_TOKEN_DIR}"));
        mounts.push(VolumeMount {
            name: "bootstrap-token".to_string(),
            mount_path: BOOTSTRAP_TOKEN_DIR.to_string(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name: "bootstrap-token".to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(NODE_BOOTSTRAPPER_TOKEN.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let container = Container {
        name: "server".to_string(),
        image: Some(opts.image.clone()),
        command: Some(vec!["/usr/bin/mco".to_string()]),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some("ignition".to_string()),
            container_port: SERVER_PORT,
            host_port: Some(SERVER_PORT),
            protocol: Some("TCP".to_string()),
            ..Default::default()
        }]),
        resources: Some(requests("20m", "50Mi")),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(65534),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                ..Default::default()
            }),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Default::default()
    };
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(SERVER.to_string()),
            namespace: Some(opts.namespace.clone()),
            labels: Some(labels("server")),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: selector("server"),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels("server")),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(SERVER.to_string()),
                    host_network: Some(true),
                    dns_policy: Some("ClusterFirstWithHostNet".to_string()),
                    priority_class_name: Some("system-cluster-critical".to_string()),
                    node_selector: Some(BTreeMap::from([
                        ("kubernetes.io/os".to_string(), "linux".to_string()),
                        ("node-role.kubernetes.io/master".to_string(), String::new()),
                    ])),
                    tolerations: Some(vec![
                        toleration("node-role.kubernetes.io/master", "NoSchedule", None),
                        toleration("node-role.kubernetes.io/control-plane", "NoSchedule", None),
                    ]),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_path<'a>(c: &'a Container, name: &str) -> Option<&'a str> {
        c.env
            .as_deref()?
            .iter()
            .find(|e| e.name == name)?
            .value_from
            .as_ref()?
            .field_ref
            .as_ref()
            .map(|f| f.field_path.as_str())
    }

    fn container<T>(spec: Option<T>, pod: impl Fn(T) -> Option<PodSpec>) -> Container {
        pod(spec.unwrap()).unwrap().containers.remove(0)
    }

    #[test]
    fn controller_knows_its_own_node() {
        let c = container(controller(&Options::default()).spec, |s| s.template.spec);
        assert_eq!(env_path(&c, "NODE_NAME"), Some("spec.nodeName"));
        assert_eq!(env_path(&c, "POD_NAME"), Some("metadata.name"));
    }

    #[test]
    fn controller_and_daemon_know_their_namespace() {
        let opts = Options::default();
        let controller = container(controller(&opts).spec, |s| s.template.spec);
        let daemon = container(daemon(&opts).spec, |s| s.template.spec);
        for c in [controller, daemon] {
            assert_eq!(
                env_path(&c, "POD_NAMESPACE"),
                Some("metadata.namespace"),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn daemon_serves_metrics_on_the_node_address() {
        let c = container(daemon(&Options::default()).spec, |s| s.template.spec);
        let args = c.args.clone().unwrap();
        assert!(args.contains(&"--metrics-listen=$(POD_IP):9101".to_string()));
        assert!(args.contains(&"--metrics-auth=delegated".to_string()));
        assert_eq!(env_path(&c, "POD_IP"), Some("status.podIP"));
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.container_port, port.host_port),
            (Some("metrics"), 9101, Some(9101))
        );
    }

    #[test]
    fn daemon_runs_the_daemon_only_executable_without_the_role_word() {
        let c = container(daemon(&Options::default()).spec, |s| s.template.spec);
        assert_eq!(c.command, Some(vec!["/usr/bin/mco-daemon".to_string()]));
        let args = c.args.unwrap();
        assert_eq!(args[0], "--node=$(NODE_NAME)");
        assert!(!args.contains(&"daemon".to_string()));
    }
}
