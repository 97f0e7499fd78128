//! Discovery documents (legacy and aggregated) and OpenAPI v3, generated from the registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use mco_apimachinery::openapi::{OpenApiResource, OpenApiV3, builtin_resources};
use serde_json::{Value, json};

use crate::registry::{Registry, ResourceInfo};

pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Kubernetes version ordering: GA before beta before alpha, higher numbers first.
pub fn version_rank(v: &str) -> (u8, i64, i64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (3, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major: i64 = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (0, -major, 0);
    }
    for (p, rank) in [("beta", 1u8), ("alpha", 2u8)] {
        if let Some(n) = tail.strip_prefix(p) {
            return (rank, -major, -n.parse::<i64>().unwrap_or(0));
        }
    }
    (3, 0, 0)
}

/// Which discovery format the client asked for, in its order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryFormat {
    Legacy,
    V2,
    V2Beta1,
}

pub fn negotiate(accept: &str) -> DiscoveryFormat {
    for part in accept.split(',') {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if has("g=apidiscovery.k8s.io") && has("as=APIGroupDiscoveryList") {
            if has("v=v2") {
                return DiscoveryFormat::V2;
            }
            if has("v=v2beta1") {
                return DiscoveryFormat::V2Beta1;
            }
        }
    }
    DiscoveryFormat::Legacy
}

pub fn content_type(f: DiscoveryFormat) -> &'static str {
    match f {
        DiscoveryFormat::V2 => {
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        }
        DiscoveryFormat::V2Beta1 => {
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        }
        DiscoveryFormat::Legacy => "application/json",
    }
}

type GroupVersions = (String, Vec<(String, Vec<ResourceInfo>)>);

/// Group name → versions (preferred first) → resources served in that version.
fn groups(reg: &Registry) -> Vec<GroupVersions> {
    let mut map: BTreeMap<String, BTreeMap<String, Vec<ResourceInfo>>> = BTreeMap::new();
    for r in reg.all() {
        for v in &r.versions {
            map.entry(r.group.clone())
                .or_default()
                .entry(v.clone())
                .or_default()
                .push(r.clone());
        }
    }
    let mut out: Vec<GroupVersions> = map
        .into_iter()
        .map(|(g, vs)| {
            let mut vs: Vec<(String, Vec<ResourceInfo>)> = vs.into_iter().collect();
            vs.sort_by_key(|(v, _)| version_rank(v));
            (g, vs)
        })
        .collect();
    // Built-in groups first, in a stable order, then custom groups by name.
    let order = [
        "",
        "apps",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "coordination.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
    ];
    out.sort_by_key(|(g, _)| {
        (
            order.iter().position(|o| o == g).unwrap_or(order.len()),
            g.clone(),
        )
    });
    out
}

/// The verbs a resource serves: only `create` for a review.
fn verbs(r: &ResourceInfo) -> &'static [&'static str] {
    if r.review { &["create"] } else { VERBS }
}

pub fn legacy_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    let mut any = false;
    for r in reg
        .all()
        .into_iter()
        .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
    {
        any = true;
        let mut e = json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs(&r)});
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        resources.push(e);
        let scale = crate::rest::scale_served(&r, version).then(|| {
            json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]})
        });
        let status = r.has_status(version).then(|| {
            json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"]})
        });
        resources.extend(subresources_in_order(&r, scale, status));
        if r.eviction {
            resources.push(json!({"name": format!("{}/eviction", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
        }
        if issues_tokens(&r) {
            resources.push(json!({"name": format!("{}/token", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
        }
    }
    any.then(|| {
        let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
    })
}

/// `scale` and `status` in the order kube lists them: a built-in kind's by name (kube-apiserver
/// sorts its storage paths), a custom resource's status first (apiextensions-apiserver's order).
fn subresources_in_order(
    r: &ResourceInfo,
    scale: Option<Value>,
    status: Option<Value>,
) -> impl Iterator<Item = Value> {
    let (first, second) = if r.is_custom() {
        (status, scale)
    } else {
        (scale, status)
    };
    first.into_iter().chain(second)
}

pub fn legacy_api(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn group_entry(g: &str, vs: &[(String, Vec<ResourceInfo>)]) -> Value {
    let versions: Vec<Value> = vs
        .iter()
        .map(|(v, _)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
}

pub fn legacy_apis(reg: &Registry) -> Value {
    let groups: Vec<Value> = groups(reg)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn legacy_group(reg: &Registry, group: &str) -> Option<Value> {
    groups(reg).iter().find(|(g, _)| g == group).map(|(g, vs)| {
        let mut e = group_entry(g, vs);
        e["kind"] = json!("APIGroup");
        e["apiVersion"] = json!("v1");
        e
    })
}

fn aggregated_resource(r: &ResourceInfo, version: &str) -> Value {
    let kind = json!({"group": r.group, "version": version, "kind": r.kind});
    let mut e = json!({"resource": r.plural, "responseKind": kind, "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular, "verbs": verbs(r)});
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    let scale = crate::rest::scale_served(r, version).then(|| {
        json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]})
    });
    let status = r.has_status(version).then(|| {
        json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]})
    });
    let mut subs: Vec<Value> = subresources_in_order(r, scale, status).collect();
    if r.eviction {
        subs.push(json!({"subresource": "eviction", "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"}, "verbs": ["create"]}));
    }
    if issues_tokens(r) {
        subs.push(json!({"subresource": "token", "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}, "verbs": ["create"]}));
    }
    if !subs.is_empty() {
        e["subresources"] = json!(subs);
    }
    e
}

/// `/api` (core only) or `/apis` (every other group) as an APIGroupDiscoveryList.
pub fn aggregated(reg: &Registry, core: bool, f: DiscoveryFormat) -> Value {
    let api_version = if f == DiscoveryFormat::V2Beta1 {
        "apidiscovery.k8s.io/v2beta1"
    } else {
        "apidiscovery.k8s.io/v2"
    };
    let items: Vec<Value> = groups(reg)
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|(v, rs)| {
                    json!({"version": v, "freshness": "Current",
                    "resources": rs.iter().map(|r| aggregated_resource(r, v)).collect::<Vec<_>>()})
                })
                .collect();
            let metadata = if g.is_empty() {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": g, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items})
}

pub fn version_info() -> Value {
    json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
        "platform": "linux/amd64"})
}

/// Every OpenAPI v3 document for what is served right now, built again only when the set
/// of resources changed.
/// ServiceAccounts serve `token` (TokenRequest), as `kubectl create token` uses it.
pub(crate) fn issues_tokens(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "serviceaccounts"
}

pub fn openapi(reg: &Registry) -> Arc<OpenApiV3> {
    reg.openapi(|all| {
        let mut resources = builtin_resources();
        for r in all {
            if let Some(crd) = &r.crd_object {
                resources.extend(OpenApiResource::from_crd(crd));
            }
        }
        OpenApiV3::build(&resources)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_respects_client_preference() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(v2), DiscoveryFormat::V2);
        let b1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(b1), DiscoveryFormat::V2Beta1);
        assert_eq!(negotiate("application/json, */*"), DiscoveryFormat::Legacy);
    }

    #[test]
    fn version_ranking_prefers_ga() {
        let mut vs = vec!["v1alpha1", "v1beta1", "v1", "v2"];
        vs.sort_by_key(|v| version_rank(v));
        assert_eq!(vs, ["v2", "v1", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn core_lists_eviction_and_status() {
        let r = Registry::new();
        let l = legacy_resource_list(&r, "", "v1").unwrap();
        let names: Vec<&str> = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"pods/eviction")
                && names.contains(&"serviceaccounts/token")
                && names.contains(&"nodes/status")
                && names.contains(&"configmaps")
        );
        let agg = aggregated(&r, false, DiscoveryFormat::V2Beta1);
        assert_eq!(agg["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        assert!(
            agg["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "policy")
        );
    }

    #[test]
    fn scale_is_listed_where_kube_lists_it() {
        let r = Registry::new();
        let names = |l: &Value| -> Vec<String> {
            l["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_string())
                .collect()
        };
        let apps = legacy_resource_list(&r, "apps", "v1").unwrap();
        let apps = names(&apps);
        let at = apps.iter().position(|n| n == "deployments").unwrap();
        assert_eq!(
            apps[at..at + 3],
            ["deployments", "deployments/scale", "deployments/status"]
        );
        assert!(apps.contains(&"replicasets/scale".to_string()));
        assert!(!apps.contains(&"daemonsets/scale".to_string()));
        let crd = json!({"metadata": {"name": "ws.x.io"}, "spec": {"group": "x.io", "scope": "Namespaced",
            "names": {"plural": "ws", "kind": "W"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.n", "statusReplicasPath": ".status.n"}}}]}});
        r.upsert_crd(&crd).unwrap();
        let custom = legacy_resource_list(&r, "x.io", "v1").unwrap();
        assert_eq!(names(&custom), ["ws", "ws/status", "ws/scale"]);
        assert_eq!(custom["resources"][2]["group"], "autoscaling");
        let agg = aggregated(&r, false, DiscoveryFormat::V2);
        let group = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "x.io")
            .unwrap();
        let subs: Vec<&str> = group["versions"][0]["resources"][0]["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["subresource"].as_str().unwrap())
            .collect();
        assert_eq!(subs, ["status", "scale"]);
    }

    #[test]
    fn openapi_includes_crds() {
        let r = Registry::new();
        let crd = json!({"metadata": {"name": "ws.x.io"}, "spec": {"group": "x.io", "scope": "Cluster", "names": {"plural": "ws", "kind": "W"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        r.upsert_crd(&crd).unwrap();
        let o = openapi(&r);
        assert!(
            o.root()["paths"]["apis/x.io/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .contains("?hash=")
        );
        assert!(o.document("api/v1").is_some());
    }

    #[test]
    fn openapi_documents_are_built_again_only_when_the_resources_change() {
        let r = Registry::new();
        let first = openapi(&r);
        assert!(
            Arc::ptr_eq(&first, &openapi(&r)),
            "unchanged: the same build"
        );
        let crd = |plural: &str| {
            json!({"metadata": {"name": format!("{plural}.x.io")}, "spec": {"group": "x.io", "scope": "Cluster",
                "names": {"plural": plural, "kind": "W"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
        };
        r.upsert_crd(&crd("ws")).unwrap();
        let added = openapi(&r);
        assert!(!Arc::ptr_eq(&first, &added));
        assert!(first.document("apis/x.io/v1").is_none());
        assert!(
            added.document("apis/x.io/v1").is_some(),
            "a new CRD shows at once"
        );
        assert!(Arc::ptr_eq(&added, &openapi(&r)));
        r.remove_crd(&crd("ws")).unwrap();
        assert!(
            openapi(&r).document("apis/x.io/v1").is_none(),
            "a removed CRD is gone at once"
        );
        assert!(r.remove_crd(&crd("ws")).is_none());
    }
}
