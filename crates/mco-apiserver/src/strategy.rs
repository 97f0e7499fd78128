//! What the registry strategy of each served kind decides beyond validation: whether the
//! server keeps the kind's `metadata.generation`, and whether a PUT of a missing object
//! creates it.
//!
//! Read from kube-apiserver v1.37: each built-in kind's `PrepareForCreate`, `PrepareForUpdate`
//! and `AllowCreateOnUpdate` in `k8s.io/kubernetes/pkg/registry/<group>/<kind>/strategy.go`,
//! and for CRDs and custom resources in `k8s.io/apiextensions-apiserver/pkg/registry/
//! {customresourcedefinition,customresource}/strategy.go`.

use mco_apimachinery::value::equal;
use serde_json::Value;

use crate::registry::ResourceInfo;

/// How a kind's `metadata.generation` is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// The strategy never sets it: a create stores what the client sent, an update keeps the
    /// stored value.
    Untracked,
    /// 1 on create, one more on an update that changes `spec`.
    Spec,
    /// 1 on create, one more on an update that changes `spec` or `metadata.annotations`
    /// (a Deployment copies its annotations to its ReplicaSets).
    SpecOrAnnotations,
    /// 1 on create, one more on an update that changes anything outside `metadata`: custom
    /// resources. With a status subresource the main endpoint cannot change `status`, and a
    /// status write changes nothing else, so neither moves it.
    AllButMetadata,
}

/// One kind's strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strategy {
    pub generation: Generation,
    /// `AllowCreateOnUpdate`: a PUT of a missing object creates it (201). Only the main
    /// resource: no served kind's status strategy allows it.
    pub create_on_update: bool,
}

const fn s(generation: Generation, create_on_update: bool) -> Strategy {
    Strategy {
        generation,
        create_on_update,
    }
}

use Generation::{Spec, SpecOrAnnotations, Untracked};

/// Every built-in kind the registry serves, by (group, plural).
const BUILTIN: &[(&str, &str, Strategy)] = &[
    ("", "namespaces", s(Untracked, false)),
    ("", "nodes", s(Untracked, false)),
    // PodObservedGenerationTracking (GA in 1.35): PrepareForCreate sets 1 unconditionally.
    ("", "pods", s(Spec, false)),
    ("", "events", s(Untracked, true)),
    ("", "configmaps", s(Untracked, false)),
    ("", "secrets", s(Untracked, false)),
    ("", "serviceaccounts", s(Untracked, false)),
    // Served from the core Event storage.
    ("events.k8s.io", "events", s(Untracked, true)),
    ("coordination.k8s.io", "leases", s(Untracked, true)),
    ("policy", "poddisruptionbudgets", s(Spec, false)),
    ("apps", "daemonsets", s(Spec, false)),
    ("apps", "deployments", s(SpecOrAnnotations, false)),
    ("apps", "replicasets", s(Spec, false)),
    ("rbac.authorization.k8s.io", "roles", s(Untracked, true)),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        s(Untracked, true),
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterroles",
        s(Untracked, true),
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        s(Untracked, true),
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        s(Spec, false),
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        s(Spec, false),
    ),
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        s(Spec, false),
    ),
];

const CUSTOM: Strategy = s(Generation::AllButMetadata, false);

/// The strategy of `info`'s kind. A built-in kind missing from the table (a test keeps the
/// table complete) is treated as one that sets nothing.
pub fn of(info: &ResourceInfo) -> Strategy {
    if info.is_custom() {
        return CUSTOM;
    }
    BUILTIN
        .iter()
        .find(|(g, p, _)| *g == info.group && *p == info.plural)
        .map_or(s(Untracked, false), |(_, _, st)| *st)
}

impl Generation {
    pub fn tracked(self) -> bool {
        self != Generation::Untracked
    }

    /// Whether an update from `old` to `new` moves the generation; `new` already carries the
    /// stored status where the kind has a status subresource.
    pub fn bumped(self, old: &Value, new: &Value) -> bool {
        match self {
            Generation::Untracked => false,
            Generation::Spec => differs(old.get("spec"), new.get("spec")),
            Generation::SpecOrAnnotations => {
                differs(old.get("spec"), new.get("spec"))
                    || differs(
                        old.pointer("/metadata/annotations"),
                        new.pointer("/metadata/annotations"),
                    )
            }
            Generation::AllButMetadata => outside_metadata_differs(old, new),
        }
    }
}

/// Upstream compares typed values, where a field left out and an empty one are the same.
fn differs(a: Option<&Value>, b: Option<&Value>) -> bool {
    let empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        _ => false,
    };
    let same = match (a, b) {
        (Some(x), Some(y)) => equal(x, y),
        _ => false,
    };
    !(same || (empty(a) && empty(b)))
}

/// Any top-level field but `metadata` (and `apiVersion` and `kind`, which an update keeps
/// from the stored object) differs. Compared in place: custom resources are most writes.
fn outside_metadata_differs(a: &Value, b: &Value) -> bool {
    let counts = |k: &&String| !matches!(k.as_str(), "metadata" | "apiVersion" | "kind");
    let (Some(x), Some(y)) = (a.as_object(), b.as_object()) else {
        return a != b;
    };
    x.keys().filter(counts).count() != y.keys().filter(counts).count()
        || x.iter()
            .filter(|(k, _)| counts(k))
            .any(|(k, v)| !y.get(k).is_some_and(|w| equal(v, w)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn every_served_built_in_kind_is_in_the_table() {
        let r = Registry::new();
        for info in r.all() {
            // Access reviews are never stored, so no strategy applies.
            if info.is_custom() || info.review {
                continue;
            }
            assert!(
                BUILTIN
                    .iter()
                    .any(|(g, p, _)| *g == info.group && *p == info.plural),
                "{} has no strategy entry",
                info.gr()
            );
        }
    }

    #[test]
    fn only_the_kinds_whose_strategy_sets_it_have_a_generation() {
        let r = Registry::new();
        let kind = |g: &str, p: &str| of(&r.lookup(g, "v1", p).unwrap());
        for (g, p) in [
            ("", "configmaps"),
            ("", "nodes"),
            ("", "namespaces"),
            ("", "events"),
            ("coordination.k8s.io", "leases"),
            ("", "serviceaccounts"),
        ] {
            assert_eq!(kind(g, p).generation, Untracked, "{g}/{p}");
        }
        for (g, p) in [
            ("", "pods"),
            ("policy", "poddisruptionbudgets"),
            ("apps", "daemonsets"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicies",
            ),
        ] {
            assert_eq!(kind(g, p).generation, Spec, "{g}/{p}");
        }
        assert_eq!(kind("apps", "deployments").generation, SpecOrAnnotations);
    }

    #[test]
    fn a_put_creates_only_where_upstream_allows_it() {
        let r = Registry::new();
        let kind = |g: &str, p: &str| of(&r.lookup(g, "v1", p).unwrap());
        assert!(kind("", "events").create_on_update);
        assert!(kind("events.k8s.io", "events").create_on_update);
        assert!(kind("coordination.k8s.io", "leases").create_on_update);
        assert!(kind("rbac.authorization.k8s.io", "roles").create_on_update);
        assert!(!kind("", "configmaps").create_on_update);
        assert!(!kind("", "nodes").create_on_update);
        assert!(!kind("policy", "poddisruptionbudgets").create_on_update);
    }

    #[test]
    fn what_moves_the_generation() {
        let old = json!({"metadata": {"name": "n", "annotations": {"a": "1"}},
            "spec": {"x": 1}, "status": {"s": 1}, "data": {"k": "v"}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = old.clone();
            f(&mut v);
            v
        };
        let spec = with(&|v| v["spec"]["x"] = json!(2));
        let ann = with(&|v| v["metadata"]["annotations"]["a"] = json!("2"));
        let label = with(&|v| v["metadata"]["labels"] = json!({"l": "x"}));
        let other = with(&|v| v["data"]["k"] = json!("w"));
        assert!(!Untracked.bumped(&old, &spec));
        assert!(Spec.bumped(&old, &spec));
        assert!(!Spec.bumped(&old, &ann));
        assert!(
            !Spec.bumped(&old, &other),
            "only spec counts for a built-in kind"
        );
        assert!(SpecOrAnnotations.bumped(&old, &ann));
        assert!(!SpecOrAnnotations.bumped(&old, &label));
        let ca = Generation::AllButMetadata;
        assert!(ca.bumped(&old, &other));
        assert!(ca.bumped(&old, &spec));
        assert!(!ca.bumped(&old, &ann));
        assert!(!ca.bumped(&old, &label));
        // A spec or annotations left out equal empty ones, as typed values do.
        let bare = json!({"metadata": {"name": "n"}});
        let empty = json!({"metadata": {"name": "n", "annotations": {}}, "spec": {}});
        assert!(!SpecOrAnnotations.bumped(&bare, &empty));
        assert!(Spec.bumped(&bare, &spec));
    }
}
