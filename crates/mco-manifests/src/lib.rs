//! The objects that install mco on a cluster, generated from typed Kubernetes objects so that a
//! field cannot be misspelt and the permissions can be asserted by tests.
//!
//! Pure: options in, objects (and YAML) out. `mco manifests` prints them; the committed copy under
//! `manifests/install/` is checked against them by a test.

use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

pub mod admission;
pub mod defaults;
pub mod rbac;
pub mod workloads;

/// The namespace mco's workloads, ServiceAccounts and Lease live in.
pub const DEFAULT_NAMESPACE: &str = mco_api::constants::names::DEFAULT_NAMESPACE;
/// Where release images are published; `docs/deploy.md` documents the same name.
pub const IMAGE_REPOSITORY: &str = "ghcr.io/mco-rs/mco";
/// The controller's ServiceAccount, ClusterRole, Deployment and leader-election Lease.
pub const CONTROLLER: &str = "mco-controller";
/// The daemon's ServiceAccount, ClusterRole and DaemonSet.
pub const DAEMON: &str = "mco-daemon";
/// The machine config server's ServiceAccount, ClusterRole and DaemonSet.
pub const SERVER: &str = "mco-server";
/// The machine config server's port, upstream's: machines fetch their Ignition here.
pub const SERVER_PORT: i32 = 22623;
/// The ServiceAccount whose token new machines' kubelets bootstrap with (upstream's name): the
/// machine config server puts it into `/etc/kubernetes/kubeconfig`.
pub const NODE_BOOTSTRAPPER: &str = "node-bootstrapper";
/// Its long-lived token Secret (`kubernetes.io/service-account-token`), mounted into the server.
pub const NODE_BOOTSTRAPPER_TOKEN: &str = "node-bootstrapper-token";
/// The Secret (`kubernetes.io/tls`) holding the machine config server's certificate.
pub const SERVER_TLS_SECRET: &str = mco_api::constants::names::SERVER_TLS_SECRET;
/// The ClusterRole both identities use to record events, bound only where events are written.
pub const EVENTS_ROLE: &str = "mco-events";
/// What an administrator binds Prometheus's ServiceAccount to: `get` on `/metrics`.
pub const METRICS_READER_ROLE: &str = "mco-metrics-reader";
/// The binding of the controller's and the daemon's ServiceAccounts to Kubernetes'
/// `system:auth-delegator`, so their metrics ports can review their callers.
pub const AUTH_DELEGATOR_BINDING: &str = "mco-auth-delegator";
/// The metrics ports' `--metrics-auth`: TLS, the caller's token and access reviewed.
pub const METRICS_AUTH: &str = "delegated";
/// Serves the controller's `/metrics`, `/healthz` and `/readyz`.
pub const CONTROLLER_METRICS_PORT: i32 = 9797;
/// Serves the daemon's `/metrics` on the node's own address. The daemon runs on the host
/// network, so this port is taken on every node: 9101 is free of upstream's ports (9001, 8797,
/// 9192) and of the node exporter's 9100.
pub const DAEMON_METRICS_PORT: i32 = 9101;
/// The claim the API server adds to a pod-bound ServiceAccount token: the pod's node.
pub const NODE_NAME_CLAIM: &str = "authentication.kubernetes.io/node-name";

/// The image the manifests run when `--image` is not given: this release's tag.
pub fn default_image() -> String {
    format!("{IMAGE_REPOSITORY}:v{}", env!("CARGO_PKG_VERSION"))
}

/// What varies between installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub namespace: String,
    pub image: String,
    /// The OS image written to the ControllerConfig. Empty means rendered configs carry no OS
    /// image, so daemons never rebase a node; they manage files, units and SSH keys only.
    pub os_image: String,
    /// Add what OpenShift, OKD and UCCPS need on top (the `privileged` SCC for the daemon,
    /// SCC and monitoring annotations).
    pub openshift: bool,
    /// The API server URL new machines' kubelets bootstrap against (upstream's
    /// `https://api-int.<domain>:6443`). With it, the machine config server appends the
    /// bootstrap kubeconfig built from the `node-bootstrapper` token; without it, none.
    pub apiserver_url: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            namespace: DEFAULT_NAMESPACE.to_string(),
            image: default_image(),
            os_image: String::new(),
            openshift: false,
            apiserver_url: None,
        }
    }
}

impl Options {
    /// The user name the API server gives a ServiceAccount in the install namespace.
    pub fn service_account_user(&self, service_account: &str) -> String {
        format!("system:serviceaccount:{}:{service_account}", self.namespace)
    }
}

/// A group of objects, committed as one file and printable on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Namespace,
    Crds,
    Rbac,
    Admission,
    Controller,
    Daemon,
    Defaults,
    /// The machine config server DaemonSet on the masters (last: it needs a Secret made first).
    Server,
}

impl Part {
    /// Every part, in the order `kubectl apply` must see them.
    pub const ALL: [Part; 8] = [
        Part::Namespace,
        Part::Crds,
        Part::Rbac,
        Part::Admission,
        Part::Controller,
        Part::Daemon,
        Part::Defaults,
        Part::Server,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::Namespace => "namespace",
            Part::Crds => "crds",
            Part::Rbac => "rbac",
            Part::Admission => "admission",
            Part::Controller => "controller",
            Part::Daemon => "daemon",
            Part::Defaults => "defaults",
            Part::Server => "server",
        }
    }

    /// Numbered so that `kubectl apply -f manifests/install/` applies them in order.
    pub fn file_name(self) -> String {
        let index = Part::ALL.iter().position(|p| *p == self).unwrap_or(0);
        format!("{index:02}-{}.yaml", self.name())
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Part {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Part::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| Error::UnknownPart(s.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "unknown part {0:?}: expected one of namespace, crds, rbac, admission, controller, daemon, defaults"
    )]
    UnknownPart(String),
    #[error("serializing {what}: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
    #[error("writing YAML: {0}")]
    Yaml(#[from] mco_apimachinery::yaml::EncodeError),
}

/// One object of the install, kept as JSON so callers and tests can inspect any kind uniformly.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub part: Part,
    pub object: serde_json::Value,
}

impl Manifest {
    fn new(part: Part, object: &impl Serialize) -> Result<Manifest, Error> {
        let object = serde_json::to_value(object).map_err(|source| Error::Json {
            what: format!("a {part} object"),
            source,
        })?;
        Ok(Manifest { part, object })
    }

    fn str_at(&self, pointer: &str) -> Option<&str> {
        self.object.pointer(pointer).and_then(|v| v.as_str())
    }

    pub fn api_version(&self) -> Option<&str> {
        self.str_at("/apiVersion")
    }

    pub fn kind(&self) -> Option<&str> {
        self.str_at("/kind")
    }

    pub fn name(&self) -> Option<&str> {
        self.str_at("/metadata/name")
    }

    pub fn namespace(&self) -> Option<&str> {
        self.str_at("/metadata/namespace")
    }
}

/// The install namespace. Pod security admission must allow the privileged daemon in it.
pub fn namespace(opts: &Options) -> Namespace {
    let mut labels = std::collections::BTreeMap::new();
    for mode in ["enforce", "audit", "warn"] {
        labels.insert(
            format!("pod-security.kubernetes.io/{mode}"),
            "privileged".to_string(),
        );
    }
    if opts.openshift {
        labels.insert(
            "openshift.io/cluster-monitoring".to_string(),
            "true".to_string(),
        );
    }
    Namespace {
        metadata: ObjectMeta {
            name: Some(opts.namespace.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The objects of the given parts, in [`Part::ALL`] order whatever the order asked for.
pub fn generate(opts: &Options, parts: &[Part]) -> Result<Vec<Manifest>, Error> {
    let mut out = vec![];
    for part in Part::ALL.into_iter().filter(|p| parts.contains(p)) {
        match part {
            Part::Namespace => out.push(Manifest::new(part, &namespace(opts))?),
            Part::Crds => {
                for crd in mco_api::crds::all() {
                    out.push(Manifest::new(part, &crd)?);
                }
            }
            Part::Rbac => {
                for sa in rbac::service_accounts(opts) {
                    out.push(Manifest::new(part, &sa)?);
                }
                out.push(Manifest::new(part, &rbac::node_bootstrapper_token(opts))?);
                for role in rbac::cluster_roles(opts) {
                    out.push(Manifest::new(part, &role)?);
                }
                for binding in rbac::cluster_role_bindings(opts) {
                    out.push(Manifest::new(part, &binding)?);
                }
                out.push(Manifest::new(part, &rbac::controller_lease_role(opts))?);
                for role in rbac::controller_pull_secret_roles(opts) {
                    out.push(Manifest::new(part, &role)?);
                }
                out.push(Manifest::new(
                    part,
                    &rbac::controller_server_certs_role(opts),
                )?);
                for role in rbac::controller_user_data_roles(opts) {
                    out.push(Manifest::new(part, &role)?);
                }
                for role in rbac::controller_ca_bundle_roles(opts) {
                    out.push(Manifest::new(part, &role)?);
                }
                for binding in rbac::role_bindings(opts) {
                    out.push(Manifest::new(part, &binding)?);
                }
            }
            Part::Admission => {
                for (policy, binding) in admission::policies(opts) {
                    out.push(Manifest::new(part, &policy)?);
                    out.push(Manifest::new(part, &binding)?);
                }
            }
            Part::Controller => {
                out.push(Manifest::new(part, &workloads::controller(opts))?);
                out.push(Manifest::new(
                    part,
                    &workloads::controller_disruption_budget(opts),
                )?);
            }
            Part::Daemon => out.push(Manifest::new(part, &workloads::daemon(opts))?),
            Part::Server => out.push(Manifest::new(part, &workloads::server(opts))?),
            Part::Defaults => {
                for pool in defaults::pools() {
                    out.push(Manifest::new(part, &pool)?);
                }
                out.push(Manifest::new(part, &defaults::controller_config(opts))?);
                out.push(Manifest::new(part, &defaults::machine_configuration())?);
            }
        }
    }
    Ok(out)
}

/// A multi-document YAML stream, each document introduced by `---`.
pub fn to_yaml(manifests: &[Manifest]) -> Result<String, Error> {
    let mut out = String::new();
    for m in manifests {
        out.push_str("---\n");
        out.push_str(&mco_apimachinery::yaml::to_string(&m.object)?);
    }
    Ok(out)
}

/// One YAML stream per part, committed under `manifests/install/` as [`Part::file_name`].
pub fn files(opts: &Options) -> Result<Vec<(Part, String)>, Error> {
    let all = generate(opts, &Part::ALL)?;
    let mut out = vec![];
    for part in Part::ALL {
        let of_part: Vec<Manifest> = all.iter().filter(|m| m.part == part).cloned().collect();
        out.push((part, to_yaml(&of_part)?));
    }
    Ok(out)
}
