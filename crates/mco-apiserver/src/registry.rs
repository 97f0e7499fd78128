//! Which resources are served: the built-in kinds plus whatever CRDs are stored.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use mco_apimachinery::openapi::OpenApiV3;
use mco_apimachinery::patch::MergeKeyTable;
use mco_apimachinery::schema::Structural;
use serde_json::Value;

use crate::error::ResRef;

/// One served version of a custom resource.
#[derive(Debug, Clone, Default)]
pub struct CrdVersion {
    pub name: String,
    pub storage: bool,
    pub schema: Option<Value>,
    /// The parsed schema; `None` when absent or unusable (then nothing is validated).
    pub structural: Option<Arc<Structural>>,
    /// The schema's list semantics, read once: every write of the resource consults them.
    pub merge_keys: Arc<MergeKeyTable>,
    pub printer_columns: Vec<Value>,
    pub selectable_fields: Vec<String>,
    pub status: bool,
    /// `subresources.scale`, when the version serves `/scale`.
    pub scale: Option<CrdScale>,
}

/// A CRD version's `subresources.scale`: where its replicas and selector are (`.spec.replicas`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrdScale {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// A served resource, keyed by (group, plural); all versions share storage.
#[derive(Debug, Clone, Default)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions, the preferred (storage) one first.
    pub versions: Vec<String>,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    pub status: bool,
    pub eviction: bool,
    /// A review (`authorization.k8s.io` access reviews, `authentication.k8s.io` TokenReview and
    /// SelfSubjectReview): created to be answered, never stored; the only verb is `create`.
    pub review: bool,
    /// Set for custom resources: per-version schema and printer columns. Shared, because
    /// every request clones its resource's info.
    pub crd: Option<Arc<[CrdVersion]>>,
    /// The CRD object a custom resource comes from.
    pub crd_object: Option<Arc<Value>>,
}

impl ResourceInfo {
    /// The storage key: `group/plural` (`/configmaps` for core). `events.k8s.io` Events are
    /// kept with core `v1`'s, as kube-apiserver keeps both APIs' Events in one storage.
    pub fn gr(&self) -> String {
        if crate::event::converts(self) {
            return "/events".into();
        }
        format!("{}/{}", self.group, self.plural)
    }
    pub fn rref(&self) -> ResRef<'_> {
        ResRef {
            group: &self.group,
            plural: &self.plural,
            kind: &self.kind,
        }
    }
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }
    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }
    pub fn crd_version(&self, version: &str) -> Option<&CrdVersion> {
        self.crd.as_ref()?.iter().find(|v| v.name == version)
    }
    /// Status-subresource flag for one version (CRDs may differ per version).
    pub fn has_status(&self, version: &str) -> bool {
        match self.crd_version(version) {
            Some(v) => v.status,
            None => self.status,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    short: &[&str],
    categories: &[&str],
    namespaced: bool,
    status: bool,
) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        versions: vec![version.into()],
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        namespaced,
        status,
        eviction: false,
        review: false,
        crd: None,
        crd_object: None,
    }
}

fn builtins() -> Vec<ResourceInfo> {
    let mut pods = builtin("", "v1", "Pod", "pods", &["po"], &["all"], true, true);
    pods.eviction = true;
    let review = |group: &str, kind: &str, plural: &str, namespaced: bool| ResourceInfo {
        review: true,
        ..builtin(group, "v1", kind, plural, &[], &[], namespaced, false)
    };
    let authz = "authorization.k8s.io";
    vec![
        review(
            authz,
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            false,
        ),
        review(
            authz,
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            false,
        ),
        review(authz, "SubjectAccessReview", "subjectaccessreviews", false),
        review(
            authz,
            "LocalSubjectAccessReview",
            "localsubjectaccessreviews",
            true,
        ),
        review(
            "authentication.k8s.io",
            "TokenReview",
            "tokenreviews",
            false,
        ),
        review(
            "authentication.k8s.io",
            "SelfSubjectReview",
            "selfsubjectreviews",
            false,
        ),
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            &["ns"],
            &[],
            false,
            true,
        ),
        builtin("", "v1", "Node", "nodes", &["no"], &[], false, true),
        pods,
        builtin("", "v1", "Event", "events", &["ev"], &[], true, false),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            &["cm"],
            &[],
            true,
            false,
        ),
        builtin("", "v1", "Secret", "secrets", &[], &[], true, false),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            &["sa"],
            &[],
            true,
            false,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            &["ev"],
            &[],
            true,
            false,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            &[],
            &[],
            true,
            false,
        ),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            &["pdb"],
            &[],
            true,
            true,
        ),
        builtin(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            &["ds"],
            &["all"],
            true,
            true,
        ),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            &["deploy"],
            &["all"],
            true,
            true,
        ),
        builtin(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            &["rs"],
            &["all"],
            true,
            true,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            &[],
            &[],
            true,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            &[],
            &[],
            true,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            &[],
            &[],
            false,
            false,
        ),
        // Stored and served so the shipped install applies with plain kubectl; not
        // evaluated (no CEL): the owner-node guards they express are built in.
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            &[],
            &["api-extensions"],
            false,
            true,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            &[],
            &["api-extensions"],
            false,
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            &["crd", "crds"],
            &["api-extensions"],
            false,
            true,
        ),
    ]
}

/// The live set of served resources.
#[derive(Debug)]
pub struct Registry {
    inner: RwLock<Served>,
    /// The OpenAPI documents of the set at a generation: a daemon reads its group's document
    /// after every reboot, and building them all (the CRDs' schemas, serialized and hashed)
    /// per request cost more CPU in a 1,000-node rollout than any other step.
    openapi: Mutex<Option<(u64, Arc<OpenApiV3>)>>,
}

/// The resources by (group, plural), and a generation that every change of them bumps.
#[derive(Debug, Default)]
struct Served {
    map: BTreeMap<(String, String), ResourceInfo>,
    generation: u64,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        let map = builtins()
            .into_iter()
            .map(|r| ((r.group.clone(), r.plural.clone()), r))
            .collect();
        Registry {
            inner: RwLock::new(Served { map, generation: 0 }),
            openapi: Mutex::new(None),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Served> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Served> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The OpenAPI documents of what is served now, built by `build` from every resource
    /// only when the set changed since the last build.
    pub fn openapi(&self, build: impl FnOnce(&[ResourceInfo]) -> OpenApiV3) -> Arc<OpenApiV3> {
        let mut cache = self.openapi.lock().unwrap_or_else(|e| e.into_inner());
        // The generation and the resources are read together, so a build is never filed
        // under a generation other than its own.
        let (generation, all) = {
            let served = self.read();
            if let Some((g, docs)) = cache.as_ref()
                && *g == served.generation
            {
                return docs.clone();
            }
            let all: Vec<ResourceInfo> = served.map.values().cloned().collect();
            (served.generation, all)
        };
        let docs = Arc::new(build(&all));
        *cache = Some((generation, docs.clone()));
        docs
    }

    /// Resolves a URL's group, version and plural to a served resource.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResourceInfo> {
        let served = self.read();
        let r = served.map.get(&(group.to_string(), plural.to_string()))?;
        r.versions.iter().any(|v| v == version).then(|| r.clone())
    }

    pub fn by_gr(&self, group: &str, plural: &str) -> Option<ResourceInfo> {
        self.read()
            .map
            .get(&(group.to_string(), plural.to_string()))
            .cloned()
    }

    pub fn all(&self) -> Vec<ResourceInfo> {
        self.read().map.values().cloned().collect()
    }

    /// Registers (or refreshes) a CRD from its stored JSON; returns the resource it serves.
    pub fn upsert_crd(&self, crd: &Value) -> Option<ResourceInfo> {
        let info = crd_to_info(crd)?;
        let mut served = self.write();
        let key = (info.group.clone(), info.plural.clone());
        if let Some(existing) = served.map.get(&key)
            && existing.crd.is_none()
        {
            return None;
        }
        served.map.insert(key, info.clone());
        served.generation += 1;
        Some(info)
    }

    pub fn remove_crd(&self, crd: &Value) -> Option<ResourceInfo> {
        let group = crd.pointer("/spec/group")?.as_str()?;
        let plural = crd.pointer("/spec/names/plural")?.as_str()?;
        let mut served = self.write();
        let key = (group.to_string(), plural.to_string());
        if served.map.get(&key).is_some_and(|r| r.crd.is_some()) {
            served.generation += 1;
            served.map.remove(&key)
        } else {
            None
        }
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Builds the resource description of a CRD's `spec`.
pub fn crd_to_info(crd: &Value) -> Option<ResourceInfo> {
    let spec = crd.get("spec")?;
    let names = spec.get("names")?;
    let group = spec.get("group")?.as_str()?.to_string();
    let plural = names.get("plural")?.as_str()?.to_string();
    let kind = names.get("kind")?.as_str()?.to_string();
    let mut versions: Vec<CrdVersion> = Vec::new();
    for v in spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let Some(name) = v.get("name").and_then(Value::as_str) else {
            continue;
        };
        versions.push(CrdVersion {
            name: name.to_string(),
            storage: v.get("storage").and_then(Value::as_bool).unwrap_or(false),
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            merge_keys: Arc::new(
                v.pointer("/schema/openAPIV3Schema")
                    .map(MergeKeyTable::from_openapi_schema)
                    .unwrap_or_else(MergeKeyTable::metadata_only),
            ),
            structural: v.pointer("/schema/openAPIV3Schema").and_then(|s| match Structural::parse(s) {
                Ok(s) => Some(Arc::new(s)),
                Err(e) => {
                    tracing::warn!(error = %e, "unusable CRD schema; objects are stored unvalidated");
                    None
                }
            }),
            printer_columns: v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            selectable_fields: v
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                        .map(|p| p.trim_start_matches('.').to_string())
                        .collect()
                })
                .unwrap_or_default(),
            status: v.pointer("/subresources/status").is_some(),
            scale: v.pointer("/subresources/scale").map(|s| {
                let path = |k: &str| s.get(k).and_then(Value::as_str).map(String::from);
                CrdScale {
                    spec_replicas_path: path("specReplicasPath").unwrap_or_default(),
                    status_replicas_path: path("statusReplicasPath").unwrap_or_default(),
                    label_selector_path: path("labelSelectorPath").filter(|p| !p.is_empty()),
                }
            }),
        });
    }
    if versions.is_empty() {
        return None;
    }
    // Preferred version first: upstream sorts by Kube version priority; the storage
    // version is a close, simple approximation (documented in docs/apiserver.md).
    versions.sort_by_key(|v| !v.storage);
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let list_kind = names
        .get("listKind")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| format!("{kind}List"));
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| kind.to_lowercase());
    let status = versions.iter().any(|v| v.status);
    Some(ResourceInfo {
        group,
        versions: versions.iter().map(|v| v.name.clone()).collect(),
        kind,
        list_kind,
        plural,
        singular,
        short_names: strings(names.get("shortNames")),
        categories: strings(names.get("categories")),
        namespaced,
        status,
        eviction: false,
        review: false,
        crd: Some(versions.into()),
        crd_object: Some(Arc::new(crd.clone())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_registration_prefers_storage_version() {
        let r = Registry::new();
        let crd = json!({"spec": {"group": "x.io", "scope": "Cluster",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1alpha1", "served": true, "storage": false},
                         {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
        let info = r.upsert_crd(&crd).expect("registered");
        assert_eq!(info.versions, vec!["v1", "v1alpha1"]);
        assert!(!info.namespaced);
        assert!(info.has_status("v1") && !info.has_status("v1alpha1"));
        assert!(r.lookup("x.io", "v1alpha1", "widgets").is_some());
        assert!(r.remove_crd(&crd).is_some());
        assert!(r.lookup("x.io", "v1", "widgets").is_none());
    }

    #[test]
    fn crd_cannot_shadow_builtin() {
        let r = Registry::new();
        let crd = json!({"spec": {"group": "", "names": {"plural": "pods", "kind": "Pod"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
        assert!(r.upsert_crd(&crd).is_none());
        assert!(r.lookup("", "v1", "pods").unwrap().crd.is_none());
    }
}
