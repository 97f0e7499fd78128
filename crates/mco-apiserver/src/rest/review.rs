//! `authorization.k8s.io/v1` SelfSubjectAccessReview and SelfSubjectRulesReview: created to be
//! answered, never stored. An access review asks the authorizer every request goes through
//! (`auth::decide`); a rules review lists the caller's RBAC rules in a namespace as
//! kube-apiserver's rule resolver does.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::response::Response;
use http::{HeaderMap, Method};
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{Value, json};

use super::encode::{decode_body, json_response};
use super::{App, Target};
use crate::auth::Identity;
use crate::error::{ApiError, Cause};
use crate::rbac;

/// The longest attribute value an access review may carry (names are at most 253 bytes,
/// paths and selectors-free attributes stay far below this).
const MAX_ATTRIBUTE: usize = 1024;

pub(super) async fn review(
    app: &Arc<App>,
    method: &Method,
    t: &Target,
    id: &Identity,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    if *method != Method::POST || t.name.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let obj = decode_body(headers, body)?;
    let status = match t.info.kind.as_str() {
        "SelfSubjectAccessReview" => {
            let req = access_attributes(&t.info, &obj)?;
            let (allowed, reason) = crate::auth::decide(&app.rbac, &app.store, id, &req);
            access_status(allowed, &reason)
        }
        _ => {
            let ns = obj
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            if ns.is_empty() {
                return Err(ApiError::bad_request("no namespace on request"));
            }
            check_len(&t.info, "spec.namespace", ns)?;
            rules_status(&rules_of(app, id, ns))
        }
    };
    let asked = json!({
        "kind": t.info.kind,
        "apiVersion": t.info.api_version(&t.version),
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "spec": obj.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    // kube-apiserver's create handler records the caller's fields before the review is
    // answered, so the answer names its manager for the spec it was sent.
    let manager = super::WriteCtx::from_request(q, headers, id).manager;
    let mut answer = if manager.is_empty() {
        asked
    } else {
        crate::machinery::record_update(
            &t.info,
            &t.version,
            crate::objects::Part::Main,
            None,
            asked,
            &manager,
        )
    };
    // `spec` is a struct value in the Go type, not a pointer, so kube's field set has no
    // `.` entry for it (its members still have theirs).
    for entry in answer
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(spec) = entry
            .pointer_mut("/fieldsV1/f:spec")
            .and_then(Value::as_object_mut)
        {
            spec.remove(".");
        }
    }
    answer["status"] = status;
    Ok(json_response(201, &answer))
}

fn invalid(
    info: &crate::registry::ResourceInfo,
    field: &str,
    reason: &str,
    msg: String,
) -> ApiError {
    ApiError::invalid(&info.rref(), "", vec![Cause::new(reason, field, msg)])
}

fn check_len(info: &crate::registry::ResourceInfo, field: &str, v: &str) -> Result<(), ApiError> {
    if v.len() > MAX_ATTRIBUTE {
        return Err(invalid(
            info,
            field,
            "FieldValueTooLong",
            format!("Too long: may not be more than {MAX_ATTRIBUTE} bytes"),
        ));
    }
    Ok(())
}

/// The RBAC attributes a SelfSubjectAccessReview asks about (kube's `ResourceAttributesFrom`
/// and `NonResourceAttributesFrom`), each bounded; 422 naming the field otherwise.
fn access_attributes(
    info: &crate::registry::ResourceInfo,
    obj: &Value,
) -> Result<rbac::Request, ApiError> {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let field = |at: &Value, section: &str, name: &str| -> Result<String, ApiError> {
        let path = format!("spec.{section}.{name}");
        match at.get(name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => {
                check_len(info, &path, s)?;
                Ok(s.clone())
            }
            Some(other) => Err(invalid(
                info,
                &path,
                "FieldValueTypeInvalid",
                format!("Invalid value: {other}: must be a string"),
            )),
        }
    };
    match (resource, non_resource) {
        (Some(r), None) => {
            let a = |name: &str| field(r, "resourceAttributes", name);
            let sub = a("subresource")?;
            // Version is not part of an RBAC decision, but it is still bounded.
            a("version")?;
            Ok(rbac::Request {
                verb: a("verb")?,
                api_group: a("group")?,
                resource: a("resource")?,
                subresource: (!sub.is_empty()).then_some(sub),
                name: a("name")?,
                namespace: a("namespace")?,
                path: None,
            })
        }
        (None, Some(n)) => Ok(rbac::Request {
            verb: field(n, "nonResourceAttributes", "verb")?,
            path: Some(field(n, "nonResourceAttributes", "path")?),
            ..Default::default()
        }),
        _ => Err(invalid(
            info,
            "spec",
            "FieldValueInvalid",
            "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
        )),
    }
}

/// `status` of an access review: `denied` and `reason` only when set, as kube omits them.
fn access_status(allowed: bool, reason: &str) -> Value {
    let mut s = json!({"allowed": allowed});
    if !reason.is_empty() {
        s["reason"] = json!(reason);
    }
    s
}

/// What a rules review reports: the rules and the resolver's error (then incomplete).
struct Rules {
    rules: Vec<PolicyRule>,
    error: String,
}

/// The caller's rules in `ns`. Identities RBAC does not govern hold every right, which kube
/// reports for `system:masters` through the `cluster-admin` binding.
fn rules_of(app: &App, id: &Identity, ns: &str) -> Rules {
    match id.rbac_user() {
        Some(user) => {
            let (rules, error) = rbac::rules_for(&app.rbac.get(&app.store), &user, ns);
            Rules { rules, error }
        }
        None => {
            let all = vec!["*".to_string()];
            Rules {
                rules: vec![
                    PolicyRule {
                        api_groups: Some(all.clone()),
                        resources: Some(all.clone()),
                        verbs: all.clone(),
                        ..Default::default()
                    },
                    PolicyRule {
                        non_resource_urls: Some(all.clone()),
                        verbs: all,
                        ..Default::default()
                    },
                ],
                error: String::new(),
            }
        }
    }
}

/// `status` of a rules review, as kube's RBAC `RulesFor` splits rules: those naming
/// resources, then those naming URLs; empty lists are kept, as kube serves them.
fn rules_status(r: &Rules) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in &r.rules {
        if rule.resources.as_ref().is_some_and(|v| !v.is_empty()) {
            let mut e = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups.clone().unwrap_or_default(),
                "resources": rule.resources});
            if let Some(names) = rule.resource_names.as_ref().filter(|n| !n.is_empty()) {
                e["resourceNames"] = json!(names);
            }
            resource_rules.push(e);
        }
        if let Some(urls) = rule.non_resource_urls.as_ref().filter(|u| !u.is_empty()) {
            non_resource_rules.push(json!({"verbs": rule.verbs, "nonResourceURLs": urls}));
        }
    }
    let mut s = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": !r.error.is_empty(),
    });
    if !r.error.is_empty() {
        s["evaluationError"] = json!(r.error);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(kind: &str) -> crate::registry::ResourceInfo {
        let reg = crate::registry::Registry::new();
        let plural = format!("{}s", kind.to_lowercase());
        reg.lookup("authorization.k8s.io", "v1", &plural).unwrap()
    }

    #[test]
    fn access_attributes_are_read_and_bounded() {
        let i = info("SelfSubjectAccessReview");
        let r = access_attributes(
            &i,
            &json!({"spec": {"resourceAttributes": {"verb": "patch", "resource": "nodes", "subresource": "status"}}}),
        )
        .unwrap();
        assert_eq!(r.verb, "patch");
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let n = access_attributes(
            &i,
            &json!({"spec": {"nonResourceAttributes": {"verb": "get", "path": "/api"}}}),
        )
        .unwrap();
        assert_eq!(n.path.as_deref(), Some("/api"));
        let e = access_attributes(&i, &json!({"spec": {}})).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("exactly one of nonResourceAttributes or resourceAttributes")
        );
        let long = "x".repeat(MAX_ATTRIBUTE + 1);
        let e = access_attributes(
            &i,
            &json!({"spec": {"resourceAttributes": {"verb": "get", "name": long}}}),
        )
        .unwrap_err();
        assert!(
            e.message.contains(
                "spec.resourceAttributes.name: Too long: may not be more than 1024 bytes"
            ),
            "{}",
            e.message
        );
    }

    #[test]
    fn rules_are_split_by_kind_and_errors_mark_them_incomplete() {
        let r = Rules {
            rules: vec![
                PolicyRule {
                    api_groups: Some(vec!["".into()]),
                    resources: Some(vec!["nodes".into()]),
                    verbs: vec!["get".into()],
                    ..Default::default()
                },
                PolicyRule {
                    non_resource_urls: Some(vec!["/api".into()]),
                    verbs: vec!["get".into()],
                    ..Default::default()
                },
            ],
            error: "clusterrole.rbac.authorization.k8s.io \"x\" not found".into(),
        };
        let s = rules_status(&r);
        assert_eq!(s["resourceRules"][0]["resources"], json!(["nodes"]));
        assert_eq!(s["nonResourceRules"][0]["nonResourceURLs"], json!(["/api"]));
        assert_eq!(s["incomplete"], json!(true));
        assert_eq!(access_status(false, ""), json!({"allowed": false}));
    }
}
