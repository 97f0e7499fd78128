//! The `scale` subresource: the `autoscaling/v1` Scale kube-apiserver serves for Deployments and
//! ReplicaSets (their `ScaleREST`) and apiextensions-apiserver for a custom resource whose version
//! declares `subresources.scale`. A read builds the Scale from the stored object; a write (PUT,
//! and every patch type, apply included) is judged against the Scale and stores the object with
//! its new replicas through the object's own storage: its strategy (generation), its watch
//! events, and its managedFields moved between the two as kube's `ScaleHandler` moves them.

use std::sync::Arc;

use mco_apimachinery::apply::{self, ApplyOptions};
use mco_apimachinery::patch::PatchType;
use mco_apimachinery::selector::LabelSelector;
use mco_apimachinery::table::TableConvertor;
use serde_json::{Map, Value, json};

use super::write::{Modify, check_uid, finish};
use super::{App, Target};
use crate::error::{ApiError, Cause, ResRef};
use crate::machinery;
use crate::objects::{Part, meta, meta_mut, meta_str};
use crate::registry::ResourceInfo;
use crate::store::Action;

/// The Scale's own group and version, whatever the parent's.
const SCALE_API_VERSION: &str = "autoscaling/v1";
/// What a custom resource's old Scale holds when the object has no replicas yet
/// (apiextensions-apiserver's `invalidSpecReplicas`): a write must set them.
const UNSET_REPLICAS: i64 = i32::MIN as i64;

/// The Scale's `spec.replicas`, as a field path.
fn scale_replicas_path() -> Vec<String> {
    vec!["spec".into(), "replicas".into()]
}

/// Where a kind keeps what its Scale shows.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    spec: Vec<String>,
    /// As written in the CRD (`.spec.replicas`), for errors.
    spec_text: String,
    status: Vec<String>,
    selector: Selector,
}

#[derive(Debug, Clone)]
enum Selector {
    /// A workload's `spec.selector`, a label selector printed as text.
    Structured,
    /// A custom resource's `labelSelectorPath`: text already.
    Text(Vec<String>),
    None,
}

/// `.spec.replicas` as kube splits it: the leading dot dropped, then on every dot.
fn split(path: &str) -> Vec<String> {
    path.trim_start_matches('.')
        .split('.')
        .map(String::from)
        .collect()
}

fn is_builtin_scalable(info: &ResourceInfo) -> bool {
    !info.is_custom()
        && info.group == "apps"
        && matches!(info.plural.as_str(), "deployments" | "replicasets")
}

/// The Scale of `info` at `version`, if it serves one.
pub(crate) fn paths(info: &ResourceInfo, version: &str) -> Option<Paths> {
    if is_builtin_scalable(info) {
        return Some(Paths {
            spec: split(".spec.replicas"),
            spec_text: ".spec.replicas".into(),
            status: split(".status.replicas"),
            selector: Selector::Structured,
        });
    }
    let s = info.crd_version(version)?.scale.as_ref()?;
    Some(Paths {
        spec: split(&s.spec_replicas_path),
        spec_text: s.spec_replicas_path.clone(),
        status: split(&s.status_replicas_path),
        selector: match &s.label_selector_path {
            Some(p) => Selector::Text(split(p)),
            None => Selector::None,
        },
    })
}

/// Whether `info` serves `/scale` at `version`.
pub(crate) fn served(info: &ResourceInfo, version: &str) -> bool {
    paths(info, version).is_some()
}

/// kube's `ResourcePathMappings`: the replicas path of an object written in `api_version`.
/// `None` for a version the kind does not know (its managedFields entries are dropped by a
/// scale write, as kube drops them), `Some(None)` for a known one without a Scale.
fn replicas_path(info: &ResourceInfo, api_version: &str) -> Option<Option<Vec<String>>> {
    if is_builtin_scalable(info) {
        return (api_version == "apps/v1").then(|| Some(split(".spec.replicas")));
    }
    info.crd
        .as_ref()?
        .iter()
        .find(|v| info.api_version(&v.name) == api_version)
        .map(|v| v.scale.as_ref().map(|s| split(&s.spec_replicas_path)))
}

fn nested<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

fn set_nested(obj: &mut Value, path: &[String], value: Value) -> Result<(), ApiError> {
    let mut at = obj;
    for (i, k) in path.iter().enumerate() {
        let Some(m) = at.as_object_mut() else {
            return Err(ApiError::internal(format!(
                "value cannot be set because {} is not a map",
                path[..i].join(".")
            )));
        };
        if i + 1 == path.len() {
            m.insert(k.clone(), value);
            return Ok(());
        }
        at = m.entry(k.clone()).or_insert_with(|| json!({}));
    }
    Ok(())
}

/// The object's Scale, and whether it holds its spec replicas (a custom resource may not).
fn scale_of(paths: &Paths, obj: &Value) -> Result<(Value, bool), ApiError> {
    let int = |path: &[String]| -> Result<Option<i64>, ApiError> {
        match nested(obj, path) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| {
                ApiError::internal(format!(
                    ".{} accessor error: {v} is of the type {}, expected int64",
                    path.join("."),
                    json_type(v)
                ))
            }),
        }
    };
    let spec = int(&paths.spec)?;
    let status = int(&paths.status)?.unwrap_or(0);
    let selector = match &paths.selector {
        Selector::Structured => obj
            .pointer("/spec/selector")
            .map(|s| {
                LabelSelector::from_k8s(s)
                    .map(|s| s.map(|s| s.to_string()).unwrap_or_default())
                    .map_err(|e| ApiError::bad_request(e.to_string()))
            })
            .transpose()?
            .unwrap_or_default(),
        Selector::Text(p) => nested(obj, p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        Selector::None => String::new(),
    };
    let m = meta(obj);
    let mut metadata = Map::new();
    metadata.insert("name".into(), m.get("name").cloned().unwrap_or(json!("")));
    if let Some(ns) = meta_str(obj, "namespace").filter(|n| !n.is_empty()) {
        metadata.insert("namespace".into(), json!(ns));
    }
    for k in ["uid", "resourceVersion"] {
        if let Some(v) = meta_str(obj, k).filter(|v| !v.is_empty()) {
            metadata.insert(k.into(), json!(v));
        }
    }
    metadata.insert(
        "creationTimestamp".into(),
        m.get("creationTimestamp").cloned().unwrap_or(Value::Null),
    );
    let replicas = spec.unwrap_or(0);
    let mut spec_json = Map::new();
    // Go's `omitempty` on the Scale's int32.
    if replicas != 0 {
        spec_json.insert("replicas".into(), json!(replicas));
    }
    let mut status_json = Map::new();
    status_json.insert("replicas".into(), json!(status));
    if !selector.is_empty() {
        status_json.insert("selector".into(), json!(selector));
    }
    Ok((
        json!({"kind": "Scale", "apiVersion": SCALE_API_VERSION, "metadata": metadata,
            "spec": spec_json, "status": status_json}),
        spec.is_some(),
    ))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Null => "nil",
    }
}

/// The Scale of a stored object, as a GET of `/scale` and every write's answer serve it.
pub(super) fn served_scale(
    info: &ResourceInfo,
    version: &str,
    obj: &Value,
) -> Result<Value, ApiError> {
    let paths = paths(info, version).ok_or_else(ApiError::not_found_path)?;
    let (scale, found) = scale_of(&paths, obj)?;
    if !found && info.is_custom() {
        // kube's `NewInternalError`: the cause repeats the error.
        let cause = format!(
            "the spec replicas field {:?} does not exist",
            paths.spec_text
        );
        return Err(
            ApiError::internal(&cause).with_details(json!({"causes": [{"message": cause}]}))
        );
    }
    Ok(scale)
}

/// `GET .../NAME/scale`.
pub(super) fn get(app: &App, t: &Target) -> Result<Value, ApiError> {
    let name = t.name.as_deref().unwrap_or("");
    let obj = app
        .store
        .get(&t.info.gr(), t.ns_str(), name)
        .ok_or_else(|| ApiError::not_found(&t.info.rref(), name))?;
    served_scale(&t.info, &t.version, &obj)
}

/// The Scale as a one-row Table (`kubectl get --subresource=scale`), at the object's version.
pub(super) fn table(info: &ResourceInfo, scale: &Value, include: crate::tables::Include) -> Value {
    let rv = meta_str(scale, "resourceVersion").unwrap_or_default();
    let list = json!({"metadata": {"resourceVersion": rv}, "items": [scale]});
    TableConvertor::for_scale(info.is_custom()).list_table(
        &list,
        jiff::Timestamp::now(),
        include.into(),
    )
}

/// A write of the Scale.
#[derive(Clone)]
pub(super) enum ScaleWrite {
    /// A PUT's body.
    Put(Value),
    /// A patch document (an applied configuration for apply).
    Patch(PatchType, Value),
}

/// A managedFields entry's identity as kube's field manager keys it: for an update its API
/// version too, so a scale write's entries (`autoscaling/v1`) never match the parent's.
fn identity(e: &Value) -> (String, String, String, String) {
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let op = s("operation");
    let av = if op == "Apply" {
        String::new()
    } else {
        s("apiVersion")
    };
    (s("manager"), op, s("subresource"), av)
}

fn fields_path(path: &[String]) -> Vec<String> {
    path.iter().map(|p| format!("f:{p}")).collect()
}

fn owns(e: &Value, path: &[String]) -> bool {
    let mut at = match e.get("fieldsV1") {
        Some(f) => f,
        None => return false,
    };
    for k in fields_path(path) {
        match at.get(&k) {
            Some(v) => at = v,
            None => return false,
        }
    }
    true
}

/// `fields` without `path`, and the parents it leaves empty.
fn without(fields: &mut Value, path: &[String]) {
    fn go(at: &mut Value, path: &[String]) {
        let Some(m) = at.as_object_mut() else { return };
        match path {
            [] => {}
            [leaf] => {
                m.shift_remove(leaf);
            }
            [head, rest @ ..] => {
                if let Some(child) = m.get_mut(head) {
                    go(child, rest);
                    if child.as_object().is_some_and(Map::is_empty) {
                        m.shift_remove(head);
                    }
                }
            }
        }
    }
    go(fields, &fields_path(path));
}

fn fields_of(path: &[String]) -> Value {
    fields_path(path)
        .into_iter()
        .rev()
        .fold(json!({}), |inner, k| json!({ k: inner }))
}

fn entries(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// kube's `ScaleHandler.ToSubresource`: the parent's entries that own its replicas, each
/// owning the Scale's `spec.replicas` in `autoscaling/v1`.
fn to_subresource(info: &ResourceInfo, parent: &[Value]) -> Vec<Value> {
    parent
        .iter()
        .filter_map(|e| {
            let av = e.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let path = replicas_path(info, av)??;
            if !owns(e, &path) {
                return None;
            }
            let mut out = e.as_object()?.clone();
            out.insert("apiVersion".into(), json!(SCALE_API_VERSION));
            out.insert("fieldsV1".into(), fields_of(&scale_replicas_path()));
            Some(Value::Object(out))
        })
        .collect()
}

/// kube's `ScaleHandler.ToParent`: the parent's entries after a Scale write whose entries are
/// `scale`. A parent entry owning the replicas keeps them only if the Scale kept its identity
/// (an applier's); otherwise they are taken from it, and every Scale entry owning
/// `spec.replicas` comes back as an entry of `parent_api_version` owning the parent's replicas,
/// without a time (kube takes it from a parent entry of the same identity, which an update's
/// never has). Entries are then in kube's order.
fn to_parent(
    info: &ResourceInfo,
    parent_api_version: &str,
    parent: &[Value],
    scale: &[Value],
) -> Vec<Value> {
    let mut scale: Vec<Value> = scale.to_vec();
    let mut out: Vec<Value> = Vec::new();
    for e in parent {
        let av = e.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let Some(path) = replicas_path(info, av) else {
            continue;
        };
        let Some(path) = path.filter(|p| owns(e, p)) else {
            out.push(e.clone());
            continue;
        };
        let id = identity(e);
        if let Some(at) = scale.iter().position(|s| identity(s) == id) {
            scale.remove(at);
            out.push(e.clone());
            continue;
        }
        let mut kept = e.clone();
        if let Some(f) = kept.get_mut("fieldsV1") {
            without(f, &path);
        }
        if kept
            .get("fieldsV1")
            .and_then(Value::as_object)
            .is_some_and(|f| !f.is_empty())
        {
            out.push(kept);
        }
    }
    let parent_path = replicas_path(info, parent_api_version)
        .flatten()
        .unwrap_or_else(|| split(".spec.replicas"));
    for s in scale {
        if !owns(&s, &scale_replicas_path()) {
            continue;
        }
        let times = parent
            .iter()
            .find(|p| identity(p) == identity(&s))
            .and_then(|p| p.get("time").cloned());
        let mut e = Map::new();
        // ManagedFieldsEntry's field order, as every other write path stores an entry.
        for k in super::review::MANAGED_FIELDS_ORDER {
            let v = match k {
                "apiVersion" => Some(json!(parent_api_version)),
                "fieldsType" => Some(json!("FieldsV1")),
                "fieldsV1" => Some(fields_of(&parent_path)),
                "time" => times.clone(),
                _ => s.get(k).cloned(),
            };
            if let Some(v) = v.filter(|v| v.as_str() != Some("")) {
                e.insert(k.into(), v);
            }
        }
        out.push(Value::Object(e));
    }
    sort_entries(&mut out);
    out
}

/// kube's order of managedFields entries: operation, time (none first), manager, API version,
/// subresource.
fn sort_entries(entries: &mut [Value]) {
    let key = |e: &Value| {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        (
            s("operation"),
            s("time"),
            s("manager"),
            s("apiVersion"),
            s("subresource"),
        )
    };
    entries.sort_by_key(key);
}

/// kube's answer to a Scale whose `spec.replicas` Go cannot decode into its int32.
fn not_int32(v: &Value) -> ApiError {
    let what = match v {
        Value::String(_) => "string".to_string(),
        Value::Bool(_) => "bool".to_string(),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "object".to_string(),
        Value::Number(n) => format!("number {n}"),
        Value::Null => "null".to_string(),
    };
    ApiError::bad_request(format!(
        "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal {what} into Go struct field ScaleSpec.spec.replicas of type int32"
    ))
}

/// Judges `req` against the object's Scale and returns what to store.
fn decide(
    m: &Modify,
    ns: Option<&str>,
    cur: &Arc<Value>,
    req: &ScaleWrite,
) -> Result<Action, ApiError> {
    let (info, version, name, ctx) = (&m.info, m.version.as_str(), m.name.as_str(), &m.ctx);
    let paths = paths(info, version).ok_or_else(ApiError::not_found_path)?;
    let (mut old, found) = scale_of(&paths, cur)?;
    if !found {
        old["spec"]["replicas"] = json!(UNSET_REPLICAS);
    }
    let parent = entries(cur);
    let carried = to_subresource(info, &parent);
    if !carried.is_empty() {
        meta_mut(&mut old).insert("managedFields".into(), Value::Array(carried));
    }
    let time = crate::objects::now_rfc3339();
    let keys = machinery::metadata_keys();
    let opts = ApplyOptions::new(&time, keys.as_ref())
        .with_api_version(SCALE_API_VERSION)
        .with_subresource("scale");
    let new = match req {
        ScaleWrite::Put(body) => {
            check_uid(info, ns, name, body, Some(cur))?;
            let mut body = body.clone();
            // A body without managedFields keeps the Scale's, as kube's field manager does.
            if body.pointer("/metadata/managedFields").is_none()
                && let Some(mf) = old.pointer("/metadata/managedFields").cloned()
            {
                meta_mut(&mut body).insert("managedFields".into(), mf);
            }
            apply::record_update_owned(Some(&old), body, &ctx.manager, opts)
        }
        ScaleWrite::Patch(PatchType::Apply, doc) => {
            machinery::apply_with(Some(&old), doc, &ctx.manager, ctx.force, opts)?
        }
        ScaleWrite::Patch(pt, doc) => {
            let patched = machinery::patch(old.clone(), *pt, doc, &keys)?;
            apply::record_update_owned(Some(&old), patched, &ctx.manager, opts)
        }
    };
    let replicas = match new.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .filter(|r| i32::try_from(*r).is_ok())
            .ok_or_else(|| not_int32(v))?,
    };
    if info.is_custom() && replicas == UNSET_REPLICAS {
        return Err(ApiError::bad_request(format!(
            "the spec replicas field {:?} cannot be empty",
            paths.spec_text
        )));
    }
    if !info.is_custom() && replicas < 0 {
        let scale = ResRef {
            group: "autoscaling",
            plural: "scales",
            kind: "Scale",
        };
        return Err(ApiError::invalid(
            &scale,
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.replicas",
                format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            )],
        ));
    }
    // The Scale's resourceVersion is a precondition on the object's (a patch's keeps the one
    // it was read at).
    if let Some(rv) = meta_str(&new, "resourceVersion").filter(|rv| !rv.is_empty())
        && Some(rv) != meta_str(cur, "resourceVersion")
    {
        return Err(ApiError::conflict(&info.rref(), name));
    }
    let mut obj = (**cur).clone();
    set_nested(&mut obj, &paths.spec, json!(replicas))?;
    let mf = to_parent(info, &info.api_version(version), &parent, &entries(&new));
    let changed_mf = mf != parent;
    if mf.is_empty() {
        meta_mut(&mut obj).shift_remove("managedFields");
    } else {
        meta_mut(&mut obj).insert("managedFields".into(), Value::Array(mf.clone()));
    }
    match finish(info, version, cur, obj, Part::Main, ctx, false)? {
        // Only the owners changed (another manager's replicas taken): kube stores that.
        Action::Keep if changed_mf => {
            let mut kept = (**cur).clone();
            meta_mut(&mut kept).insert("managedFields".into(), Value::Array(mf));
            Ok(Action::Put(kept))
        }
        other => Ok(other),
    }
}

/// PUT or PATCH of `.../NAME/scale`: the stored object's Scale after the write.
pub(super) async fn write(
    app: &App,
    t: &Target,
    m: &Modify,
    req: ScaleWrite,
) -> Result<Value, ApiError> {
    // The body names the object of the URL, as for any PUT or apply.
    match &req {
        ScaleWrite::Put(body) => m.check_put(body, t.ns.as_deref())?,
        ScaleWrite::Patch(PatchType::Apply, doc) => m.check_name(doc)?,
        ScaleWrite::Patch(..) => {}
    }
    let ns = t.ns.clone();
    let m2 = m.clone();
    let (_, v) = m
        .write(app, t, "scale", move |cur| {
            let Some(cur) = cur else {
                return Err(ApiError::not_found(&m2.info.rref(), &m2.name));
            };
            decide(&m2, ns.as_deref(), cur, &req)
        })
        .await?;
    served_scale(&t.info, &t.version, &v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn deployments() -> ResourceInfo {
        Registry::new().lookup("apps", "v1", "deployments").unwrap()
    }

    #[test]
    fn a_deployments_scale_is_kubes() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"a": "b"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]}},
            "status": {"replicas": 2}});
        let s = served_scale(&deployments(), "v1", &d).unwrap();
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"web","namespace":"ns","uid":"u","resourceVersion":"7","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"replicas":3},"status":{"replicas":2,"selector":"app=web,tier in (a,b)"}}"#
        );
        let mut zero = d.clone();
        zero["spec"]["replicas"] = json!(0);
        zero.as_object_mut().unwrap().remove("status");
        let s = served_scale(&deployments(), "v1", &zero).unwrap();
        assert_eq!(
            s["spec"],
            json!({}),
            "replicas 0 is omitted, as Go omits it"
        );
        assert_eq!(s["status"]["replicas"], 0);
    }

    #[test]
    fn a_scale_write_takes_the_replicas_from_their_owner_without_a_time() {
        let info = deployments();
        let csa = json!({"apiVersion": "apps/v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:paused": {}, "f:replicas": {}}},
            "manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-01-01T00:00:00Z"});
        let parent = vec![csa.clone()];
        let carried = to_subresource(&info, &parent);
        assert_eq!(carried.len(), 1);
        assert_eq!(carried[0]["apiVersion"], "autoscaling/v1");
        assert_eq!(
            carried[0]["fieldsV1"],
            json!({"f:spec": {"f:replicas": {}}})
        );
        // The Scale write by kubectl took the replicas from the applier.
        let scale = vec![
            json!({"apiVersion": "autoscaling/v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:replicas": {}}}, "manager": "kubectl",
            "operation": "Update", "subresource": "scale", "time": "2026-01-02T00:00:00Z"}),
        ];
        let out = to_parent(&info, "apps/v1", &parent, &scale);
        assert_eq!(
            out,
            vec![
                json!({"apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}}, "manager": "kubectl",
                    "operation": "Update", "subresource": "scale"}),
                json!({"apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:paused": {}}},
                    "manager": "kubectl-client-side-apply", "operation": "Update",
                    "time": "2026-01-01T00:00:00Z"}),
            ]
        );
        // A write that left the replicas alone still splits the owner's entry, as kube does.
        let out = to_parent(&info, "apps/v1", &parent, &carried);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["manager"], "kubectl-client-side-apply");
        assert!(out[0].get("time").is_none());
        assert_eq!(out[0]["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(out[1]["fieldsV1"], json!({"f:spec": {"f:paused": {}}}));
    }

    #[test]
    fn an_entry_of_an_unknown_version_is_dropped_and_one_without_replicas_kept() {
        let info = deployments();
        let other = json!({"apiVersion": "apps/v1beta9", "fieldsV1": {"f:spec": {"f:replicas": {}}},
            "manager": "old", "operation": "Update"});
        let status = json!({"apiVersion": "apps/v1", "fieldsV1": {"f:status": {"f:replicas": {}}},
            "manager": "c", "operation": "Update", "subresource": "status", "time": "t"});
        let out = to_parent(&info, "apps/v1", &[other, status.clone()], &[]);
        assert_eq!(out, vec![status]);
    }
}
