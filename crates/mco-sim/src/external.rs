//! `mco up --kubeconfig FILE`: the controller and simulated nodes on an existing cluster.
//!
//! What differs from the embedded cluster, and why:
//!
//! - **Nothing is changed before every check passed**: the server answers, the kubeconfig may
//!   do everything the install and the simulation need (SelfSubjectAccessReview per
//!   permission), no other machine-config operator runs there, and no simulated node's name is
//!   a real node's.
//! - **The install is create-if-absent**: namespace, CRDs (waited for until Established), RBAC
//!   and admission policies from `mco manifests`, then the default pools, ControllerConfig and
//!   base MachineConfigs. Existing objects are left as they are: the cluster is not ours. The
//!   controller Deployment and daemon DaemonSet are not installed: `mco up` runs the controller
//!   and one daemon per simulated node itself.
//! - **Identities come from the TokenRequest API**: the controller gets an `mco-controller`
//!   token; each daemon an `mco-daemon` token bound to a pod scheduled on its node, as a
//!   DaemonSet pod's token is, so the API server puts the node-name claim into it and the
//!   shipped admission policies confine the daemon to its own node. The pods come from the
//!   DaemonSet [`TOKEN_DAEMONSET`], which selects simulated nodes only and whose containers
//!   never run (the simulated kubelet reports them Running): drains skip DaemonSet pods, so a
//!   daemon's token outlives its node's drain.
//! - **Nodes carry [`SIMULATED_LABEL`]**: mco never touches a Node without it, and the
//!   simulated kubelet ([`crate::kubelet`]) acts for those nodes only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, ListParams, PostParams, ResourceExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use mco_api::{MachineConfigPool, user_agent};
use serde_json::json;
use tokio::sync::watch;

use crate::error::{Result, SimError};
use crate::objects::SIMULATED_LABEL;
use crate::spec::NodeSpec;

/// The DaemonSet whose pods the daemons' tokens are bound to (see the module docs).
pub const TOKEN_DAEMONSET: &str = "mco-sim-daemon";
/// How long a minted token is valid. A run longer than this needs a restart of `mco up`.
const TOKEN_SECONDS: i64 = 24 * 3600;
/// How long the server gets to answer the first request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the CRDs get to become Established.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
/// The upstream operator's namespace and Deployments: their presence means another
/// machine-config operator runs on the cluster.
const UPSTREAM_NAMESPACE: &str = "openshift-machine-config-operator";
const UPSTREAM_DEPLOYMENTS: [&str; 2] = ["machine-config-operator", "machine-config-controller"];

/// An existing cluster, reached through an admin kubeconfig.
pub struct External {
    kubeconfig: PathBuf,
    server: String,
    /// The kubeconfig's cluster entry (server and CA), for the identities' kubeconfigs.
    cluster: serde_json::Value,
    /// The cluster's address and TLS settings without credentials.
    base: kube::Config,
    admin: kube::Client,
}

impl External {
    /// Reads the kubeconfig and checks that the server answers.
    pub async fn connect(kubeconfig: &Path) -> Result<External> {
        let kubeconfig = std::path::absolute(kubeconfig)
            .map_err(|e| SimError::io("resolving", kubeconfig, e))?;
        let kc = Kubeconfig::read_from(&kubeconfig).map_err(|e| {
            SimError::Invalid(format!("reading kubeconfig {}: {e}", kubeconfig.display()))
        })?;
        let cluster = cluster_entry(&kc, &kubeconfig)?;
        let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| SimError::Invalid(format!("kubeconfig {}: {e}", kubeconfig.display())))?;
        let server = config.cluster_url.to_string();
        let mut base = config.clone();
        base.auth_info = Default::default();
        config.headers.push(user_agent::header(user_agent::SIM));
        let admin = kube::Client::try_from(config)?;
        match tokio::time::timeout(CONNECT_TIMEOUT, admin.apiserver_version()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(SimError::Invalid(format!(
                    "the API server at {server} (from {}) did not answer: {e}",
                    kubeconfig.display()
                )));
            }
            Err(_) => {
                return Err(SimError::Invalid(format!(
                    "the API server at {server} (from {}) did not answer within {}s",
                    kubeconfig.display(),
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        }
        Ok(External {
            kubeconfig,
            server,
            cluster,
            base,
            admin,
        })
    }

    /// The admin kubeconfig (absolute).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The kubeconfig's own client, with the simulation's User-Agent ([`user_agent::SIM`]).
    pub fn admin(&self) -> kube::Client {
        self.admin.clone()
    }

    /// A client without credentials or User-Agent; a caller adds its own `Authorization` and
    /// `User-Agent` headers (a second `User-Agent` here would be appended, not replaced).
    pub fn transport(&self) -> Result<kube::Client> {
        Ok(kube::Client::try_from(self.base.clone())?)
    }

    /// A client that authenticates with `token` and sends `component`'s User-Agent
    /// ([`user_agent::for_component`]).
    pub fn client_for_token(&self, token: &str, component: &str) -> Result<kube::Client> {
        let mut cfg = self.base.clone();
        cfg.auth_info.token = Some(token.to_string().into());
        cfg.headers.push(user_agent::header(component));
        Ok(kube::Client::try_from(cfg)?)
    }

    /// A kubeconfig document for `token` (JSON, which is YAML).
    pub fn kubeconfig_for_token(&self, user: &str, token: &str) -> String {
        json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "mco", "cluster": self.cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "mco", "context": {"cluster": "mco", "user": user}}],
            "current-context": "mco",
        })
        .to_string()
    }

    /// Everything checked before anything is written; the first failure is returned.
    pub async fn preflight(&self, namespace: &str, specs: &[NodeSpec]) -> Result<()> {
        let denied = self.missing_rights(namespace).await?;
        if !denied.is_empty() {
            return Err(SimError::Invalid(format!(
                "the kubeconfig {} lacks rights mco up needs (nothing was changed): {}",
                self.kubeconfig.display(),
                denied.join(", ")
            )));
        }
        check_namespace(&self.admin, namespace).await?;
        if let Some(why) = self.foreign_operator(namespace).await? {
            return Err(SimError::Invalid(format!(
                "another machine-config operator runs on this cluster (nothing was changed): {why}"
            )));
        }
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let taken = self.real_nodes_named(&names).await?;
        if !taken.is_empty() {
            return Err(SimError::Invalid(format!(
                "simulated node names that real nodes of the cluster already have (nothing was changed): {}",
                taken.join(", ")
            )));
        }
        Ok(())
    }

    /// The permissions, as `verb group/resource[/subresource] [in namespace]`, that a
    /// SelfSubjectAccessReview denies.
    async fn missing_rights(&self, namespace: &str) -> Result<Vec<String>> {
        let ssar: Api<SelfSubjectAccessReview> = Api::all(self.admin.clone());
        let mut denied = Vec::new();
        for need in required_rights(namespace) {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(need.group.to_string()),
                        resource: Some(need.resource.to_string()),
                        subresource: need.subresource.map(str::to_string),
                        verb: Some(need.verb.to_string()),
                        namespace: need.namespace.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = ssar.create(&PostParams::default(), &review).await?;
            if !answer.status.is_some_and(|s| s.allowed) {
                denied.push(need.to_string());
            }
        }
        Ok(denied)
    }

    /// Why the cluster looks managed by another machine-config operator, if it does: the
    /// upstream operator's Deployments, or MachineConfigPools on a cluster where mco's
    /// controller never held its leader Lease.
    async fn foreign_operator(&self, namespace: &str) -> Result<Option<String>> {
        let deployments: Api<Deployment> = Api::namespaced(self.admin.clone(), UPSTREAM_NAMESPACE);
        for name in UPSTREAM_DEPLOYMENTS {
            if deployments.get_opt(name).await?.is_some() {
                return Ok(Some(format!(
                    "Deployment {UPSTREAM_NAMESPACE}/{name} exists (see docs/deploy.md for replacing the upstream operator)"
                )));
            }
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin.clone());
        if crds
            .get_opt("machineconfigpools.machineconfiguration.openshift.io")
            .await?
            .is_none()
        {
            return Ok(None);
        }
        let pools: Api<MachineConfigPool> = Api::all(self.admin.clone());
        let list = pools.list(&ListParams::default()).await?;
        if list.items.is_empty() {
            return Ok(None);
        }
        let leases: Api<Lease> = Api::namespaced(self.admin.clone(), namespace);
        if leases.get_opt(mco_manifests::CONTROLLER).await?.is_some() {
            return Ok(None);
        }
        let names: Vec<String> = list.items.iter().map(|p| p.name_any()).collect();
        Ok(Some(format!(
            "MachineConfigPools {} exist but mco's controller never held its Lease {namespace}/{}",
            names.join(", "),
            mco_manifests::CONTROLLER
        )))
    }

    /// Which of `names` are Nodes without [`SIMULATED_LABEL`].
    pub async fn real_nodes_named(&self, names: &[&str]) -> Result<Vec<String>> {
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let mut taken = Vec::new();
        for name in names {
            if let Some(n) = nodes.get_opt(name).await?
                && !is_simulated(&n)
            {
                taken.push(name.to_string());
            }
        }
        Ok(taken)
    }

    /// Creates what `mco manifests` ships and is absent (not the controller Deployment or
    /// the daemon DaemonSet): CRDs first, waiting until they are Established, then the
    /// rest; then the DaemonSet the daemons' tokens are bound to.
    pub async fn install(
        &self,
        opts: &mco_manifests::Options,
        crds: &[serde_json::Value],
    ) -> Result<()> {
        use mco_manifests::Part;
        let manifests = crate::cluster::with_crds(
            mco_manifests::generate(
                opts,
                &[Part::Namespace, Part::Crds, Part::Rbac, Part::Admission],
            )?,
            crds,
        );
        let (crds, rest): (Vec<_>, Vec<_>) = manifests
            .into_iter()
            .partition(|m| m.kind() == Some("CustomResourceDefinition"));
        for m in &crds {
            self.create_absent(m).await?;
        }
        self.wait_established(crds.iter().filter_map(|m| m.name()))
            .await?;
        for m in &rest {
            self.create_absent(m).await?;
        }
        let dss: Api<DaemonSet> = Api::namespaced(self.admin.clone(), &opts.namespace);
        let ds: DaemonSet = crate::objects::typed("daemonset", token_daemonset(&opts.namespace))?;
        if dss.get_opt(TOKEN_DAEMONSET).await?.is_none() {
            match dss.create(&PostParams::default(), &ds).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn create_absent(&self, m: &mco_manifests::Manifest) -> Result<()> {
        let (api, kind, name) = crate::cluster::manifest_api(&self.admin, m)?;
        if api.get_opt(name).await?.is_some() {
            return Ok(());
        }
        let obj: DynamicObject =
            serde_json::from_value(m.object.clone()).map_err(|e| SimError::Json {
                what: format!("{kind} {name}"),
                source: e,
            })?;
        tracing::info!(%kind, %name, "installing");
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn wait_established<'a>(&self, names: impl Iterator<Item = &'a str>) -> Result<()> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin.clone());
        let deadline = tokio::time::Instant::now() + CRD_TIMEOUT;
        for name in names {
            loop {
                let established = crds.get_opt(name).await?.is_some_and(|c| {
                    c.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                if established {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(SimError::Invalid(format!(
                        "CRD {name} was not Established within {}s",
                        CRD_TIMEOUT.as_secs()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// A token of ServiceAccount `namespace/name`, bound to `pod` (name, uid) if given.
    pub async fn token(
        &self,
        namespace: &str,
        name: &str,
        pod: Option<(&str, &str)>,
    ) -> Result<String> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), namespace);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(TOKEN_SECONDS),
                bound_object_ref: pod.map(|(pod, uid)| {
                    k8s_openapi::api::authentication::v1::BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(pod.into()),
                        uid: Some(uid.into()),
                    }
                }),
            },
            ..Default::default()
        };
        let answer = sas
            .create_token_request(name, &PostParams::default(), &req)
            .await?;
        answer.status.map(|s| s.token).ok_or_else(|| {
            SimError::Invalid(format!("TokenRequest for {namespace}/{name}: no token"))
        })
    }

    /// The `mco-daemon` token for `node`, bound to the [`TOKEN_DAEMONSET`] pod scheduled on it
    /// (waited for); `None` if asked to stop first.
    pub async fn daemon_token(
        &self,
        namespace: &str,
        node: &str,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<String>> {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), namespace);
        let lp = ListParams::default()
            .labels(&format!("app={TOKEN_DAEMONSET}"))
            .fields(&format!("spec.nodeName={node}"));
        loop {
            let list = pods.list(&lp).await?;
            if let Some(p) = list
                .items
                .iter()
                .find(|p| p.metadata.deletion_timestamp.is_none())
            {
                let (name, uid) = (p.name_any(), p.uid().unwrap_or_default());
                let token = self
                    .token(namespace, mco_manifests::DAEMON, Some((&name, &uid)))
                    .await?;
                return Ok(Some(token));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = stop.changed() => {}
            }
            if *stop.borrow() {
                return Ok(None);
            }
        }
    }

    /// The owner reference a simulated node's heartbeat Lease gets, as kubelet sets it.
    pub fn node_owner(node: &Node) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: node.name_any(),
            uid: node.uid().unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// Whether `node` carries [`SIMULATED_LABEL`]`=true`.
pub fn is_simulated(node: &Node) -> bool {
    node.labels().get(SIMULATED_LABEL).map(String::as_str) == Some("true")
}

/// The current context's cluster entry, a relative CA path made absolute.
fn cluster_entry(kc: &Kubeconfig, path: &Path) -> Result<serde_json::Value> {
    let invalid = |why: &str| SimError::Invalid(format!("kubeconfig {}: {why}", path.display()));
    let ctx_name = kc
        .current_context
        .as_deref()
        .ok_or_else(|| invalid("no current-context"))?;
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| invalid(&format!("no context {ctx_name}")))?;
    let mut cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| invalid(&format!("no cluster {}", ctx.cluster)))?;
    if let Some(ca) = cluster.certificate_authority.as_mut()
        && Path::new(ca).is_relative()
        && let Some(dir) = path.parent()
    {
        *ca = dir.join(&*ca).display().to_string();
    }
    serde_json::to_value(&cluster).map_err(|e| SimError::Json {
        what: "kubeconfig cluster".into(),
        source: e,
    })
}

/// One permission `mco up --kubeconfig` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub namespace: Option<String>,
}

impl std::fmt::Display for Right {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ", self.verb)?;
        if !self.group.is_empty() {
            write!(f, "{}/", self.group)?;
        }
        f.write_str(self.resource)?;
        if let Some(s) = self.subresource {
            write!(f, "/{s}")?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        Ok(())
    }
}

/// What the install and the simulation do with the kubeconfig's identity: install the
/// shipped objects, mint the identities' tokens, and play kubelet for the simulated nodes.
pub fn required_rights(namespace: &str) -> Vec<Right> {
    let r = |verb, group, resource, subresource, ns: Option<&str>| Right {
        verb,
        group,
        resource,
        subresource,
        namespace: ns.map(str::to_string),
    };
    let ns = Some(namespace);
    vec![
        // What the checks before the install read.
        r("get", "", "namespaces", None, None),
        r("get", "apps", "deployments", None, Some(UPSTREAM_NAMESPACE)),
        r("get", "coordination.k8s.io", "leases", None, ns),
        r("list", "", "nodes", None, None),
        r("create", "", "namespaces", None, None),
        r(
            "create",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
            None,
        ),
        r(
            "create",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            None,
        ),
        r(
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None,
            None,
        ),
        r("create", "rbac.authorization.k8s.io", "roles", None, ns),
        r(
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            None,
            ns,
        ),
        r("create", "", "serviceaccounts", None, ns),
        r("create", "", "serviceaccounts", Some("token"), ns),
        r(
            "create",
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
            None,
            None,
        ),
        r(
            "create",
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
            None,
            None,
        ),
        r("create", "apps", "daemonsets", None, ns),
        r(
            "create",
            "machineconfiguration.openshift.io",
            "machineconfigpools",
            None,
            None,
        ),
        r(
            "create",
            "machineconfiguration.openshift.io",
            "machineconfigs",
            None,
            None,
        ),
        r(
            "create",
            "machineconfiguration.openshift.io",
            "controllerconfigs",
            None,
            None,
        ),
        r("create", "", "nodes", None, None),
        r("delete", "", "nodes", None, None),
        r("patch", "", "nodes", Some("status"), None),
        r("list", "", "pods", None, None),
        r("patch", "", "pods", Some("status"), None),
        r("delete", "", "pods", None, None),
        r(
            "create",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-node-lease"),
        ),
        r(
            "update",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-node-lease"),
        ),
        r(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            None,
            None,
        ),
    ]
}

/// The DaemonSet whose pods hold the daemons' token bindings: on simulated nodes only,
/// tolerating every taint as the shipped DaemonSet does, never started (no kubelet runs them).
pub fn token_daemonset(namespace: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": TOKEN_DAEMONSET, "namespace": namespace,
                     "labels": {"app": TOKEN_DAEMONSET}},
        "spec": {
            "selector": {"matchLabels": {"app": TOKEN_DAEMONSET}},
            "template": {
                "metadata": {"labels": {"app": TOKEN_DAEMONSET}},
                "spec": {
                    "serviceAccountName": mco_manifests::DAEMON,
                    "automountServiceAccountToken": false,
                    "nodeSelector": {SIMULATED_LABEL: "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "daemon",
                        // Never pulled: only simulated nodes run it, and their kubelet is mco.
                        "image": "mco.invalid/simulated-daemon:none",
                    }]
                }
            }
        }
    })
}

/// Names of the simulated Nodes on the cluster.
pub async fn simulated_nodes(admin: &kube::Client) -> Result<BTreeSet<String>> {
    let nodes: Api<Node> = Api::all(admin.clone());
    let list = nodes
        .list(&ListParams::default().labels(&format!("{SIMULATED_LABEL}=true")))
        .await?;
    Ok(list.items.iter().map(|n| n.name_any()).collect())
}

/// Returns an error if `namespace` is terminating: the install would fail half way.
async fn check_namespace(admin: &kube::Client, namespace: &str) -> Result<()> {
    let nss: Api<Namespace> = Api::all(admin.clone());
    if let Some(ns) = nss.get_opt(namespace).await?
        && ns.metadata.deletion_timestamp.is_some()
    {
        return Err(SimError::Invalid(format!(
            "namespace {namespace} is being deleted; wait until it is gone"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_read_as_kubectl_auth_can_i_would() {
        let rights = required_rights("mco-system");
        let shown: Vec<String> = rights.iter().map(ToString::to_string).collect();
        assert!(shown.contains(&"create apiextensions.k8s.io/customresourcedefinitions".into()));
        assert!(shown.contains(&"create serviceaccounts/token in mco-system".into()));
        assert!(shown.contains(&"patch nodes/status".into()));
    }

    #[test]
    fn the_token_daemonset_runs_on_simulated_nodes_as_the_daemon_account() {
        let ds: DaemonSet = crate::objects::typed("ds", token_daemonset("ns1")).unwrap();
        let spec = ds.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some(mco_manifests::DAEMON)
        );
        assert_eq!(spec.node_selector.unwrap()[SIMULATED_LABEL], "true");
    }
}
