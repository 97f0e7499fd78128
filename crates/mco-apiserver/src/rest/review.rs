//! The reviews: created to be answered, never stored. `authorization.k8s.io/v1`
//! SelfSubjectAccessReview, SubjectAccessReview and LocalSubjectAccessReview ask the
//! authorizer every request goes through (`auth::decide`) about the caller or a given user;
//! SelfSubjectRulesReview lists the caller's RBAC rules in a namespace as kube-apiserver's rule
//! resolver does; `authentication.k8s.io/v1` TokenReview says whom a bearer token of this
//! server stands for, as kube-apiserver's token authenticators word it, and SelfSubjectReview
//! whom the caller is (`kubectl auth whoami`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::response::Response;
use http::{HeaderMap, Method};
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{Value, json};

use super::encode::{decode_body, json_response};
use super::{App, Target};
use crate::auth::{Identity, NODE_NAME_EXTRA};
use crate::error::{ApiError, Cause};
use crate::impersonation::{MAX_VALUE_LEN, MAX_VALUES, go_quoted};
use crate::rbac::{self, User};
use crate::registry::ResourceInfo;

/// The longest attribute value an access review may carry (names are at most 253 bytes,
/// paths and selectors-free attributes stay far below this).
const MAX_ATTRIBUTE: usize = 1024;

/// The audience of this server's tokens: kube-apiserver's default API audience, its
/// ServiceAccount issuer (`https://kubernetes.default.svc.cluster.local`).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The longest token a TokenReview may carry: this server's tokens are 40 bytes, kube's
/// JWTs a few KiB, and delegating proxies read at most 8 KiB of `Authorization` header.
const MAX_TOKEN: usize = 8 * 1024;

/// kube's bearer-token authenticator's error for a token no authenticator accepts.
const INVALID_TOKEN: &str = "invalid bearer token";

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
    // A namespaced review is only created in a namespace.
    if t.info.namespaced && t.ns.is_none() {
        return Err(ApiError::not_found_path());
    }
    let obj = decode_body(headers, body)?;
    if t.info.kind == "SelfSubjectReview" {
        return Ok(self_subject_review(app, &t.info, &t.version, id, headers));
    }
    let metadata = review_metadata(t.ns.as_deref(), &obj)?;
    let asked = json!({
        "kind": t.info.kind,
        "apiVersion": t.info.api_version(&t.version),
        "metadata": metadata,
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
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    // Validation sees the metadata with the managed fields already recorded, as kube's does.
    let metadata = &answer["metadata"];
    let status = match t.info.kind.as_str() {
        "SelfSubjectAccessReview" => {
            let mut causes = Vec::new();
            let req = access_attributes(&t.info, spec, &mut causes)?;
            if !metadata_is_empty(metadata, false) {
                causes.push(metadata_not_empty(metadata, "must be empty"));
            }
            if !causes.is_empty() {
                return Err(validation_failed(&t.info, causes));
            }
            let (allowed, reason) = crate::auth::decide(&app.rbac, &app.store, id, &req);
            access_status(allowed, &reason)
        }
        "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let (subject, req) = subject_access(&t.info, metadata, spec)?;
            let (allowed, reason) = crate::auth::decide(&app.rbac, &app.store, &subject, &req);
            access_status(allowed, &reason)
        }
        "TokenReview" => token_review(app, &t.info, spec)?,
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
    answer["status"] = status;
    Ok(json_response(201, &answer))
}

/// A review's metadata as kube's create handler leaves it: a cluster-scoped review's namespace
/// is dropped, a namespaced one's is the URL's (400 in kube's words when the body names another).
fn review_metadata(ns: Option<&str>, obj: &Value) -> Result<Value, ApiError> {
    let mut meta = obj
        .get("metadata")
        .filter(|m| m.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let given = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    match ns {
        Some(ns) if !given.is_empty() && given != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        Some(ns) => {
            meta["namespace"] = json!(ns);
            Ok(meta)
        }
        None => {
            if let Some(m) = meta.as_object_mut() {
                m.remove("namespace");
            }
            Ok(meta)
        }
    }
}

/// kube's 422 for an access review its validation refuses. kube names the kind from the
/// decoded object, whose kind is already cleared, so the message starts with
/// `.authorization.k8s.io` and the details name no kind.
fn validation_failed(info: &ResourceInfo, causes: Vec<Cause>) -> ApiError {
    let unnamed = crate::error::ResRef {
        kind: "",
        ..info.rref()
    };
    ApiError::invalid(&unnamed, "", causes)
}

/// 422 for a value past this server's bounds, naming the review's kind and the field.
fn invalid(info: &ResourceInfo, field: &str, reason: &str, msg: String) -> ApiError {
    ApiError::invalid(&info.rref(), "", vec![Cause::new(reason, field, msg)])
}

fn check_len(info: &ResourceInfo, field: &str, v: &str) -> Result<(), ApiError> {
    check_len_at(info, field, v, MAX_ATTRIBUTE)
}

fn check_len_at(info: &ResourceInfo, field: &str, v: &str, max: usize) -> Result<(), ApiError> {
    if v.len() > max {
        return Err(invalid(
            info,
            field,
            "FieldValueTooLong",
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    Ok(())
}

fn check_count(info: &ResourceInfo, field: &str, n: usize) -> Result<(), ApiError> {
    if n > MAX_VALUES {
        return Err(invalid(
            info,
            field,
            "FieldValueTooMany",
            format!("Too many: {n}: must have at most {MAX_VALUES} items"),
        ));
    }
    Ok(())
}

fn type_error(info: &ResourceInfo, field: &str, v: &Value, want: &str) -> ApiError {
    invalid(
        info,
        field,
        "FieldValueTypeInvalid",
        format!("Invalid value: {v}: must be {want}"),
    )
}

/// A string field of `at`, empty when absent, bounded by `max` bytes.
fn string_at(
    info: &ResourceInfo,
    at: &Value,
    name: &str,
    path: &str,
    max: usize,
) -> Result<String, ApiError> {
    match at.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => {
            check_len_at(info, path, s, max)?;
            Ok(s.clone())
        }
        Some(other) => Err(type_error(info, path, other, "a string")),
    }
}

/// A list of strings (`spec.groups`, `spec.audiences`): at most [`MAX_VALUES`] items of at
/// most [`MAX_VALUE_LEN`] bytes.
fn string_list(
    info: &ResourceInfo,
    v: Option<&Value>,
    path: &str,
) -> Result<Vec<String>, ApiError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(other) => return Err(type_error(info, path, other, "a list of strings")),
    };
    check_count(info, path, items.len())?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("{path}[{i}]");
            let s = item
                .as_str()
                .ok_or_else(|| type_error(info, &at, item, "a string"))?;
            check_len_at(info, &at, s, MAX_VALUE_LEN)?;
            Ok(s.to_string())
        })
        .collect()
}

/// `spec.extra`: at most [`MAX_VALUES`] keys and as many values in all, each of at most
/// [`MAX_VALUE_LEN`] bytes.
fn extra_of(
    info: &ResourceInfo,
    v: Option<&Value>,
) -> Result<BTreeMap<String, Vec<String>>, ApiError> {
    let map = match v {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(type_error(
                info,
                "spec.extra",
                other,
                "a map of string lists",
            ));
        }
    };
    check_count(info, "spec.extra", map.len())?;
    let total = map.values().map(|v| v.as_array().map_or(0, Vec::len)).sum();
    check_count(info, "spec.extra", total)?;
    let mut extra = BTreeMap::new();
    for (key, values) in map {
        check_len_at(info, "spec.extra", key, MAX_VALUE_LEN)?;
        let path = format!("spec.extra[{key}]");
        extra.insert(key.clone(), string_list(info, Some(values), &path)?);
    }
    Ok(extra)
}

/// Go's `%v`-free JSON of kube's internal `NonResourceAttributes` (no JSON tags, so the
/// fields keep their Go names), as its validation errors print the value.
fn non_resource_value(n: &Value) -> String {
    let s = |k: &str| json!(n.get(k).and_then(Value::as_str).unwrap_or(""));
    format!("{{\"Path\":{},\"Verb\":{}}}", s("path"), s("verb"))
}

/// Whether `meta` holds anything but `managedFields` (and, for a local review, `namespace`):
/// kube's review validation requires it empty. Null and empty values count as absent.
fn metadata_is_empty(meta: &Value, local: bool) -> bool {
    meta.as_object().into_iter().flatten().all(|(k, v)| {
        k == "managedFields"
            || (local && k == "namespace")
            || match v {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Object(o) => o.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => false,
            }
    })
}

/// Whom a SubjectAccessReview or LocalSubjectAccessReview asks about, and what: kube's
/// validation (all its errors in one 422, in its order and words), then the user with
/// exactly the given groups and extras (kube's `AuthorizationAttributesFrom`).
fn subject_access(
    info: &ResourceInfo,
    metadata: &Value,
    spec: &Value,
) -> Result<(Identity, rbac::Request), ApiError> {
    let mut causes = Vec::new();
    let req = access_attributes(info, spec, &mut causes)?;
    let name = string_at(info, spec, "user", "spec.user", MAX_VALUE_LEN)?;
    let uid = string_at(info, spec, "uid", "spec.uid", MAX_VALUE_LEN)?;
    let groups = string_list(info, spec.get("groups"), "spec.groups")?;
    let extra = extra_of(info, spec.get("extra"))?;
    if name.is_empty() && groups.is_empty() {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let local = info.kind == "LocalSubjectAccessReview";
    if !metadata_is_empty(metadata, local) {
        let want = if local {
            "must be empty except for namespace"
        } else {
            "must be empty"
        };
        causes.push(metadata_not_empty(metadata, want));
    }
    if local {
        let ns = metadata
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(r) = present(spec, "resourceAttributes") {
            let asked = r.get("namespace").and_then(Value::as_str).unwrap_or("");
            if asked != ns {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "spec.resourceAttributes.namespace",
                    format!(
                        "Invalid value: {}: must match metadata.namespace",
                        json!(asked)
                    ),
                ));
            }
        }
        if let Some(n) = present(spec, "nonResourceAttributes") {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.nonResourceAttributes",
                format!(
                    "Invalid value: {}: disallowed on this kind of request",
                    non_resource_value(n)
                ),
            ));
        }
    }
    if !causes.is_empty() {
        return Err(validation_failed(info, causes));
    }
    Ok((
        Identity::User {
            user: User { name, groups },
            uid,
            extra,
        },
        req,
    ))
}

/// kube's 422 cause for a review's metadata that must be empty: the value printed as Go's
/// `json.Marshal` prints an ObjectMeta (its fields in declaration order, map keys sorted,
/// managed fields included).
fn metadata_not_empty(metadata: &Value, want: &str) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        "metadata",
        format!("Invalid value: {}: {want}", go_object_meta(metadata)),
    )
}

/// ObjectMeta's JSON field order (`k8s.io/apimachinery/pkg/apis/meta/v1/types.go`).
const OBJECT_META_ORDER: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// ManagedFieldsEntry's JSON field order.
pub(crate) const MANAGED_FIELDS_ORDER: [&str; 7] = [
    "manager",
    "operation",
    "apiVersion",
    "time",
    "fieldsType",
    "fieldsV1",
    "subresource",
];

fn go_object_meta(meta: &Value) -> String {
    fn ordered(v: &Value, order: &[&str]) -> Value {
        let mut out = serde_json::Map::new();
        for k in order {
            if let Some(x) = v.get(*k).filter(|x| !is_empty_value(x)) {
                out.insert((*k).to_string(), x.clone());
            }
        }
        Value::Object(out)
    }
    let mut m = ordered(meta, &OBJECT_META_ORDER);
    for key in ["labels", "annotations"] {
        if let Some(Value::Object(map)) = m.get_mut(key) {
            map.sort_keys();
        }
    }
    if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
        for e in entries.iter_mut() {
            *e = ordered(e, &MANAGED_FIELDS_ORDER);
            if let Some(f) = e.get_mut("fieldsV1") {
                sort_field_set(f);
            }
        }
    }
    m.to_string()
}

/// A field set as kube serializes it: `.` first, then the members in byte order, at every
/// level.
fn sort_field_set(v: &mut Value) {
    if let Value::Object(map) = v {
        let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
        entries.sort_by(|(a, _), (b, _)| (a != ".", a.as_str()).cmp(&(b != ".", b.as_str())));
        for (k, mut child) in entries {
            sort_field_set(&mut child);
            map.insert(k, child);
        }
    }
}

/// What Go's `omitempty` leaves out.
fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
    }
}

fn present<'a>(spec: &'a Value, name: &str) -> Option<&'a Value> {
    spec.get(name).filter(|v| !v.is_null())
}

/// The RBAC attributes an access review asks about (kube's `ResourceAttributesFrom` and
/// `NonResourceAttributesFrom`), each bounded (422 naming the field otherwise); unless exactly
/// one kind is given, kube's union error joins `causes`.
fn access_attributes(
    info: &ResourceInfo,
    spec: &Value,
    causes: &mut Vec<Cause>,
) -> Result<rbac::Request, ApiError> {
    let resource = present(spec, "resourceAttributes");
    let non_resource = present(spec, "nonResourceAttributes");
    let field = |at: &Value, section: &str, name: &str| {
        string_at(
            info,
            at,
            name,
            &format!("spec.{section}.{name}"),
            MAX_ATTRIBUTE,
        )
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
        _ => {
            // kube prints the nonResourceAttributes it was given (null when neither is).
            let value = non_resource.map_or_else(|| "null".to_string(), non_resource_value);
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec",
                format!(
                    "Invalid value: {value}: exactly one of nonResourceAttributes or resourceAttributes must be specified"
                ),
            ));
            Ok(rbac::Request::default())
        }
    }
}

/// A TokenReview's `status`: whom `spec.token` stands for on this server, for
/// `spec.audiences` (this server's audience when none are given). A token this server does
/// not know, or not for those audiences, is `authenticated: false` with kube's error; a
/// missing token is 400 in kube's words.
fn token_review(app: &App, info: &ResourceInfo, spec: &Value) -> Result<Value, ApiError> {
    let token = string_at(info, spec, "token", "spec.token", MAX_TOKEN)?;
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let requested = string_list(info, spec.get("audiences"), "spec.audiences")?;
    let Some(id) = app.tokens.identity_for(&token) else {
        return Ok(unauthenticated(INVALID_TOKEN));
    };
    let issued = app.tokens.issued(&token);
    let ours = issued
        .as_ref()
        .map_or_else(|| vec![API_AUDIENCE.to_string()], |t| t.audiences.clone());
    let audiences = match token_audiences(&id, &ours, &requested) {
        Ok(a) => a,
        Err(e) => return Ok(unauthenticated(&e)),
    };
    Ok(json!({
        "authenticated": true,
        "user": token_user(app, &id, &token),
        "audiences": audiences,
    }))
}

/// Whom a token of this server, standing for `id`, authenticates as: [`user_info`] with the
/// stored uids and its credential's id, and a Pod-bound token's Pod.
fn token_user(app: &App, id: &Identity, token: &str) -> Value {
    let issued = app.tokens.issued(token);
    let uid_of = |gr: &str, ns: &str, name: &str| {
        app.store
            .get(gr, ns, name)
            .and_then(|o| o.pointer("/metadata/uid")?.as_str().map(String::from))
    };
    let uids = match &id {
        Identity::ServiceAccount {
            namespace,
            name,
            node,
        } => Uids {
            service_account: uid_of("/serviceaccounts", namespace, name),
            node: node.as_deref().and_then(|n| uid_of("/nodes", "", n)),
        },
        _ => Uids::default(),
    };
    let digest = crate::store::token_digest(token);
    let credential = match &issued {
        Some(t) => t.credential_id.clone(),
        None => format!(
            "TokenSHA256={}",
            digest.strip_prefix("sha256:").unwrap_or(&digest)
        ),
    };
    let mut user = user_info(id, &uids, Some(&credential));
    // A token bound to a Pod names it, as kube's pod-bound tokens do.
    if let Some((_, r)) = issued.as_ref().and_then(|t| t.bound.as_ref())
        && r.kind == crate::token_request::BoundKind::Pod
    {
        user["extra"][POD_NAME_EXTRA] = json!([r.name]);
        user["extra"][POD_UID_EXTRA] = json!([r.uid]);
    }
    user
}

/// kube's SelfSubjectReview: the caller as it authenticated, in a new object whatever the body
/// held (only a creation timestamp in its metadata, no managed fields). A caller with a token
/// of this server is reported as a TokenReview of that token reports it; an impersonated one
/// as impersonation made it (no uid, the `Impersonate-Extra-*` extras).
fn self_subject_review(
    app: &App,
    info: &ResourceInfo,
    version: &str,
    id: &Identity,
    headers: &HeaderMap,
) -> Response {
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|s| s.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| app.tokens.identity_for(t).as_ref() == Some(id));
    let user = match token {
        Some(token) => token_user(app, id, token),
        None => user_info(id, &Uids::default(), None),
    };
    json_response(
        201,
        &json!({
            "kind": info.kind,
            "apiVersion": info.api_version(version),
            "metadata": {"creationTimestamp": crate::objects::now_rfc3339()},
            "status": {"userInfo": user},
        }),
    )
}

/// A TokenReview's `status` for a token that is not accepted.
fn unauthenticated(error: &str) -> Value {
    json!({"user": {}, "error": error})
}

/// The audiences a token of `id` is good for among `requested` (this server's when none are):
/// every token here is for [`API_AUDIENCE`]. None in common is kube's error: a ServiceAccount
/// token's authenticator names the audiences, the others (audience-agnostic) only refuse.
fn token_audiences(
    id: &Identity,
    ours: &[String],
    requested: &[String],
) -> Result<Vec<String>, String> {
    let server = [API_AUDIENCE.to_string()];
    let requested = if requested.is_empty() {
        &server[..]
    } else {
        requested
    };
    let common: Vec<String> = ours
        .iter()
        .filter(|a| requested.contains(a))
        .cloned()
        .collect();
    if !common.is_empty() {
        return Ok(common);
    }
    Err(match id {
        Identity::ServiceAccount { .. } => format!(
            "[{INVALID_TOKEN}, token audiences {} is invalid for the target audiences {}]",
            go_quoted(ours),
            go_quoted(requested)
        ),
        _ => INVALID_TOKEN.to_string(),
    })
}

/// The stored objects' uids a ServiceAccount token's user names, where they exist.
#[derive(Default)]
struct Uids {
    service_account: Option<String>,
    node: Option<String>,
}

/// `status.user` of a TokenReview, as kube fills it for a bound ServiceAccount token: the
/// ServiceAccount's uid, its credential's id and the node it is bound to (name, and uid when
/// the Node is stored). A TokenRequest's Pod-bound token adds `pod-name` and `pod-uid`
/// ([`token_review`]). `extra` is left out when empty, as kube's `omitempty` does.
fn user_info(id: &Identity, uids: &Uids, credential: Option<&str>) -> Value {
    let User { name, groups } = id.user();
    let mut extra = BTreeMap::new();
    let mut uid = None;
    match id {
        Identity::ServiceAccount { node, .. } => {
            uid = uids.service_account.clone();
            if let Some(c) = credential {
                extra.insert(CREDENTIAL_ID_EXTRA.to_string(), vec![c.to_string()]);
            }
            if let Some(n) = node {
                extra.insert(NODE_NAME_EXTRA.to_string(), vec![n.clone()]);
                if let Some(u) = &uids.node {
                    extra.insert(NODE_UID_EXTRA.to_string(), vec![u.clone()]);
                }
            }
        }
        Identity::User {
            uid: u, extra: e, ..
        } => {
            uid = Some(u.clone()).filter(|u| !u.is_empty());
            extra = e.clone();
        }
        _ => {}
    }
    let mut user = json!({"username": name, "groups": groups});
    if let Some(uid) = uid {
        user["uid"] = json!(uid);
    }
    if !extra.is_empty() {
        user["extra"] = json!(extra);
    }
    user
}

/// kube's user extras of a bound ServiceAccount token.
use crate::client_cert::CREDENTIAL_ID_EXTRA;
const NODE_UID_EXTRA: &str = "authentication.kubernetes.io/node-uid";
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

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
        let mut causes = Vec::new();
        let r = access_attributes(
            &i,
            &json!({"resourceAttributes": {"verb": "patch", "resource": "nodes", "subresource": "status"}}),
            &mut causes,
        )
        .unwrap();
        assert_eq!(r.verb, "patch");
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let n = access_attributes(
            &i,
            &json!({"nonResourceAttributes": {"verb": "get", "path": "/api"}}),
            &mut causes,
        )
        .unwrap();
        assert_eq!(n.path.as_deref(), Some("/api"));
        assert!(causes.is_empty());
        access_attributes(&i, &json!({}), &mut causes).unwrap();
        access_attributes(
            &i,
            &json!({"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get", "path": "/metrics"}}),
            &mut causes,
        )
        .unwrap();
        let messages: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                "Invalid value: {\"Path\":\"/metrics\",\"Verb\":\"get\"}: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ]
        );
        let long = "x".repeat(MAX_ATTRIBUTE + 1);
        let e = access_attributes(
            &i,
            &json!({"resourceAttributes": {"verb": "get", "name": long}}),
            &mut causes,
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

    fn subject(
        kind: &str,
        ns: Option<&str>,
        spec: Value,
    ) -> Result<(Identity, rbac::Request), ApiError> {
        let meta = review_metadata(ns, &json!({"spec": spec})).unwrap();
        subject_access(&info(kind), &meta, &spec)
    }

    #[test]
    fn a_subject_access_review_asks_about_exactly_the_given_user() {
        let (id, req) = subject(
            "SubjectAccessReview",
            None,
            json!({"user": "bob", "groups": ["g"], "uid": "u", "extra": {"k": ["v"]},
                "nonResourceAttributes": {"verb": "get", "path": "/metrics"}}),
        )
        .unwrap();
        let Identity::User { user, extra, .. } = id else {
            panic!("{id:?}")
        };
        // No system:authenticated is added: kube authorizes the groups as given.
        assert_eq!(
            (user.name.as_str(), user.groups),
            ("bob", vec!["g".to_string()])
        );
        assert_eq!(extra["k"], ["v"]);
        assert_eq!(req.path.as_deref(), Some("/metrics"));
        let e = subject("SubjectAccessReview", None, json!({})).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            ".authorization.k8s.io \"\" is invalid: [spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: \"\": at least one of user or group must be specified]"
        );
    }

    #[test]
    fn a_local_review_stays_in_its_namespace() {
        let (_, req) = subject(
            "LocalSubjectAccessReview",
            Some("a"),
            json!({"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "a"}}),
        )
        .unwrap();
        assert_eq!(req.namespace, "a");
        let e = subject(
            "LocalSubjectAccessReview",
            Some("a"),
            json!({"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "b"}}),
        )
        .unwrap_err();
        assert!(
            e.message.ends_with(
                "spec.resourceAttributes.namespace: Invalid value: \"b\": must match metadata.namespace"
            ),
            "{}",
            e.message
        );
        let e = subject(
            "LocalSubjectAccessReview",
            Some("a"),
            json!({"user": "bob", "nonResourceAttributes": {"verb": "get", "path": "/metrics"}}),
        )
        .unwrap_err();
        assert!(
            e.message.ends_with(
                "spec.nonResourceAttributes: Invalid value: {\"Path\":\"/metrics\",\"Verb\":\"get\"}: disallowed on this kind of request"
            ),
            "{}",
            e.message
        );
        let e = review_metadata(Some("a"), &json!({"metadata": {"namespace": "b"}})).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            review_metadata(None, &json!({"metadata": {"name": "x", "namespace": "b"}})).unwrap(),
            json!({"name": "x"})
        );
        let e = subject(
            "SubjectAccessReview",
            None,
            json!({"user": "bob", "resourceAttributes": {"verb": "get"}}),
        );
        assert!(e.is_ok());
        assert!(!metadata_is_empty(&json!({"name": "x"}), false));
        assert!(metadata_is_empty(
            &json!({"creationTimestamp": null, "managedFields": [{}]}),
            false
        ));
    }

    #[test]
    fn groups_and_extras_are_bounded() {
        let groups = |n: usize, len: usize| -> Vec<String> {
            (0..n).map(|i| format!("{i:0>len$}")).collect()
        };
        let at_limit = json!({"groups": groups(MAX_VALUES, MAX_VALUE_LEN),
            "extra": {"k": groups(MAX_VALUES, MAX_VALUE_LEN)},
            "resourceAttributes": {"verb": "get"}});
        subject("SubjectAccessReview", None, at_limit).unwrap();
        let e = subject(
            "SubjectAccessReview",
            None,
            json!({"groups": groups(MAX_VALUES + 1, 1), "resourceAttributes": {"verb": "get"}}),
        )
        .unwrap_err();
        assert!(
            e.message
                .ends_with("spec.groups: Too many: 65: must have at most 64 items"),
            "{}",
            e.message
        );
        let e = subject(
            "SubjectAccessReview",
            None,
            json!({"groups": groups(1, MAX_VALUE_LEN + 1), "resourceAttributes": {"verb": "get"}}),
        )
        .unwrap_err();
        assert!(
            e.message
                .ends_with("spec.groups[0]: Too long: may not be more than 1024 bytes"),
            "{}",
            e.message
        );
        let e = subject(
            "SubjectAccessReview",
            None,
            json!({"user": "u", "extra": {"a": groups(MAX_VALUES, 1), "b": ["x"]},
                "resourceAttributes": {"verb": "get"}}),
        )
        .unwrap_err();
        assert!(
            e.message
                .ends_with("spec.extra: Too many: 65: must have at most 64 items"),
            "{}",
            e.message
        );
        let e = subject(
            "SubjectAccessReview",
            None,
            json!({"user": "u", "extra": {"a": [1]}, "resourceAttributes": {"verb": "get"}}),
        )
        .unwrap_err();
        assert!(
            e.message
                .ends_with("spec.extra[a][0]: Invalid value: 1: must be a string"),
            "{}",
            e.message
        );
    }

    #[test]
    fn tokens_are_for_this_servers_audience() {
        let sa = Identity::service_account("ns", "x", None);
        let ours = [API_AUDIENCE.to_string()];
        assert_eq!(token_audiences(&sa, &ours, &[]).unwrap(), [API_AUDIENCE]);
        let both = vec!["foo".to_string(), API_AUDIENCE.to_string()];
        assert_eq!(token_audiences(&sa, &ours, &both).unwrap(), [API_AUDIENCE]);
        let foo = vec!["foo".to_string(), "bar".to_string()];
        assert_eq!(
            token_audiences(&sa, &ours, &foo).unwrap_err(),
            "[invalid bearer token, token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"foo\" \"bar\"]]"
        );
        assert_eq!(
            token_audiences(&Identity::Admin, &ours, &foo).unwrap_err(),
            "invalid bearer token"
        );
        // A TokenRequest's token is for the audiences it was issued for.
        let vault = ["vault".to_string()];
        assert_eq!(token_audiences(&sa, &vault, &vault).unwrap(), ["vault"]);
        assert_eq!(
            token_audiences(&sa, &vault, &[]).unwrap_err(),
            "[invalid bearer token, token audiences [\"vault\"] is invalid for the target audiences [\"https://kubernetes.default.svc.cluster.local\"]]"
        );
    }

    #[test]
    fn metadata_prints_as_go_marshals_an_object_meta() {
        let meta = json!({"labels": {"b": "2", "a": "1"}, "managedFields": [{"fieldsV1": {"f:spec": {"f:user": {}, "f:resourceAttributes": {"f:verb": {}, ".": {}}}},
            "time": "2026-01-01T00:00:00Z", "manager": "kubectl", "operation": "Update",
            "fieldsType": "FieldsV1", "apiVersion": "authorization.k8s.io/v1"}],
            "generation": 0, "name": "x", "uid": ""});
        assert_eq!(
            go_object_meta(&meta),
            r#"{"name":"x","labels":{"a":"1","b":"2"},"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"authorization.k8s.io/v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:resourceAttributes":{".":{},"f:verb":{}},"f:user":{}}}}]}"#
        );
        assert!(metadata_is_empty(
            &json!({"managedFields": [{}], "name": ""}),
            false
        ));
        assert!(!metadata_is_empty(&json!({"name": "x"}), false));
    }

    #[test]
    fn token_users_are_filled_as_kube_fills_them() {
        let uids = Uids {
            service_account: Some("sa-uid".into()),
            node: Some("node-uid".into()),
        };
        let bound = Identity::service_account("mco-system", "mco-daemon", Some("worker-0"));
        assert_eq!(
            user_info(&bound, &uids, Some("TokenSHA256=ab")),
            json!({"username": "system:serviceaccount:mco-system:mco-daemon", "uid": "sa-uid",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:mco-system", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/credential-id": ["TokenSHA256=ab"],
                    "authentication.kubernetes.io/node-name": ["worker-0"],
                    "authentication.kubernetes.io/node-uid": ["node-uid"]}})
        );
        let unbound = Identity::service_account("ns", "x", None);
        let u = user_info(&unbound, &Uids::default(), Some("TokenSHA256=ab"));
        assert_eq!(u.get("uid"), None);
        assert_eq!(
            u["extra"],
            json!({"authentication.kubernetes.io/credential-id": ["TokenSHA256=ab"]})
        );
        assert_eq!(
            user_info(&Identity::Admin, &uids, Some("c")),
            json!({"username": "admin", "groups": ["system:masters", "system:authenticated"]})
        );
        assert_eq!(
            user_info(&Identity::Node("w".into()), &uids, Some("c")),
            json!({"username": "node-w", "groups": ["system:authenticated"]})
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
