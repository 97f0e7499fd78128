//! Adapters from the write path to `mco-apimachinery`: patches, server-side apply,
//! field ownership and CRD schemas, with their errors turned into Status answers.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use mco_apimachinery::apply::{self, ApplyError, ApplyOptions, CONFLICT_CAUSE_REASON};
use mco_apimachinery::patch::{self, MergeKeyTable, PatchError, PatchType};
use mco_apimachinery::schema::Structural;
use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::objects::Part;
use crate::registry::ResourceInfo;

/// List semantics for merges and ownership: upstream's table for built-ins, the
/// schema's `x-kubernetes-list-*` for custom resources. Built once per kind: every write
/// reads them, and building one is a few dozen allocations.
pub fn merge_keys(info: &ResourceInfo, version: &str) -> Option<Arc<MergeKeyTable>> {
    match info.crd_version(version) {
        Some(v) => Some(Arc::clone(&v.merge_keys)),
        None => builtin_keys(&info.group, &info.kind),
    }
}

/// [`merge_keys`], or the metadata's alone where there are none.
pub fn merge_keys_or_metadata(info: &ResourceInfo, version: &str) -> Arc<MergeKeyTable> {
    merge_keys(info, version).unwrap_or_else(metadata_keys)
}

/// The list semantics of `metadata` alone, for kinds without a table of their own.
pub fn metadata_keys() -> Arc<MergeKeyTable> {
    static METADATA_ONLY: LazyLock<Arc<MergeKeyTable>> =
        LazyLock::new(|| Arc::new(MergeKeyTable::metadata_only()));
    Arc::clone(&METADATA_ONLY)
}

fn builtin_keys(group: &str, kind: &str) -> Option<Arc<MergeKeyTable>> {
    type Tables = HashMap<(String, String), Option<Arc<MergeKeyTable>>>;
    static BUILTIN: LazyLock<Mutex<Tables>> = LazyLock::new(Mutex::default);
    let mut tables = BUILTIN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = tables.get(&(group.to_string(), kind.to_string())) {
        return t.clone();
    }
    let t = MergeKeyTable::builtin(group, kind).map(Arc::new);
    tables.insert((group.to_string(), kind.to_string()), t.clone());
    t
}

fn patch_error(e: PatchError) -> ApiError {
    match e {
        // kube-apiserver answers a JSON patch that does not apply with its generic 422, which
        // names neither the operation nor the reason (kubectl prints "The request is invalid:
        // the server rejected our request due to an error in our request").
        PatchError::JsonPatchFailed { .. } => ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({})),
        _ => ApiError::bad_request(e.to_string()),
    }
}

/// Applies a merge, JSON or strategic merge patch.
pub fn patch(
    doc: Value,
    pt: PatchType,
    body: &Value,
    keys: &MergeKeyTable,
) -> Result<Value, ApiError> {
    patch::apply_patch(doc, pt, body, keys).map_err(patch_error)
}

fn options<'a>(
    time: &'a str,
    keys: &'a MergeKeyTable,
    api_version: &'a str,
    info: &ResourceInfo,
    version: &str,
    part: Part,
) -> ApplyOptions<'a> {
    match part {
        Part::Status => ApplyOptions::for_status(time, keys)
            .with_api_version(api_version)
            .with_reset_fields(apply::status_reset_fields(
                &info.group,
                &info.kind,
                info.is_custom(),
            )),
        Part::Main if info.has_status(version) => ApplyOptions::new(time, keys)
            .with_api_version(api_version)
            .with_reset_fields(&["status"]),
        Part::Main => ApplyOptions::new(time, keys).with_api_version(api_version),
    }
}

/// Server-side apply by `manager`; conflicts become upstream's 409.
pub fn server_side_apply(
    info: &ResourceInfo,
    version: &str,
    part: Part,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApiError> {
    let keys = merge_keys_or_metadata(info, version);
    let time = crate::objects::now_rfc3339();
    let av = info.api_version(version);
    let opts = options(&time, &keys, &av, info, version, part);
    apply_with(live, applied, manager, force, opts)
}

/// Server-side apply with the caller's options (a Scale's); conflicts become upstream's 409.
pub fn apply_with(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    opts: ApplyOptions<'_>,
) -> Result<Value, ApiError> {
    apply::apply(live, applied, manager, force, opts).map_err(|e| match e {
        ApplyError::Conflict(cs) => {
            let causes: Vec<Value> = cs
                .iter()
                .map(|c| json!({"reason": CONFLICT_CAUSE_REASON, "field": c.field, "message": c.message()}))
                .collect();
            ApiError::new(409, "Conflict", ApplyError::Conflict(cs).to_string()).with_details(json!({"causes": causes}))
        }
        ApplyError::Invalid(m) => ApiError::new(422, "Invalid", m),
    })
}

/// Records a non-apply write in `managedFields`.
pub fn record_update(
    info: &ResourceInfo,
    version: &str,
    part: Part,
    before: Option<&Value>,
    after: Value,
    manager: &str,
) -> Value {
    let keys = merge_keys_or_metadata(info, version);
    let time = crate::objects::now_rfc3339();
    let av = info.api_version(version);
    let opts = options(&time, &keys, &av, info, version, part);
    apply::record_update_owned(before, after, manager, opts)
}

/// The manager name of a non-apply write: `fieldManager`, else the User-Agent's program, else
/// (no User-Agent, or one starting with `/`) `unknown`, as kube-apiserver names it.
pub fn manager_for(field_manager: Option<&str>, user_agent: &str) -> String {
    match field_manager.filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => match apply::manager_from_user_agent(user_agent) {
            m if m.is_empty() => "unknown".to_string(),
            m => m,
        },
    }
}

/// Prunes, defaults and validates a custom resource as kube-apiserver does;
/// returns the paths pruning removed and the validation causes.
pub fn schema_admit(schema: &Structural, obj: &mut Value) -> (Vec<String>, Vec<Cause>) {
    let pruned = schema.prune(obj);
    schema.apply_defaults(obj);
    let causes = schema
        .validate(obj)
        .into_iter()
        .map(|e| Cause::new(e.type_.reason(), &e.field, e.body()))
        .collect();
    (pruned, causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    /// As kube-apiserver's `managerOrUserAgent`, then `unknown` for an empty name.
    #[test]
    fn managers_of_writes_without_field_manager() {
        let ua = "machine-config-daemon/v0.1.0 (linux/amd64) mco/v0.1.0";
        assert_eq!(manager_for(None, ua), "machine-config-daemon");
        assert_eq!(manager_for(Some(""), ua), "machine-config-daemon");
        assert_eq!(manager_for(Some("m"), ua), "m");
        assert_eq!(manager_for(None, ""), "unknown");
        assert_eq!(manager_for(None, "/x"), "unknown");
    }

    #[test]
    fn builtins_patch_strategically_and_customs_do_not() {
        let r = Registry::new();
        let node = r.lookup("", "v1", "nodes").unwrap();
        assert!(merge_keys(&node, "v1").is_some());
        let crd = json!({"spec": {"group": "x.io", "names": {"plural": "ws", "kind": "W"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let w = r.upsert_crd(&crd).unwrap();
        assert!(merge_keys(&w, "v1").is_some());
        let keys = merge_keys(&node, "v1").unwrap();
        let doc = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]}});
        let out = patch(
            doc,
            PatchType::StrategicMerge,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            &keys,
        )
        .unwrap();
        assert_eq!(out["status"]["conditions"][1]["type"], "X");
        assert_eq!(out["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn json_patch_test_failure_is_422() {
        let keys = MergeKeyTable::metadata_only();
        let e = patch(
            json!({"a": 1}),
            PatchType::Json,
            &json!([{"op": "test", "path": "/a", "value": 2}]),
            &keys,
        )
        .unwrap_err();
        assert_eq!(
            e.to_status(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "code": 422, "reason": "Invalid", "details": {},
                "message": "the server rejected our request due to an error in our request"
            })
        );
    }

    #[test]
    fn apply_conflict_is_409_with_causes() {
        let r = Registry::new();
        let cm = r.lookup("", "v1", "configmaps").unwrap();
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"a": "1"}});
        let live = server_side_apply(&cm, "v1", Part::Main, None, &body, "one", false).unwrap();
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"a": "2"}});
        let e = server_side_apply(&cm, "v1", Part::Main, Some(&live), &changed, "two", false)
            .unwrap_err();
        assert_eq!(e.code, 409);
        assert!(e.message.starts_with("Apply failed with 1 conflict"));
        assert!(
            server_side_apply(&cm, "v1", Part::Main, Some(&live), &changed, "two", true).is_ok()
        );
    }

    #[test]
    fn schema_reports_pruned_fields() {
        let s = Structural::parse(&json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "integer"}}}}})).unwrap();
        let mut obj = json!({"metadata": {"name": "x"}, "spec": {"a": 1, "b": 2}});
        let (pruned, causes) = schema_admit(&s, &mut obj);
        assert_eq!(pruned, vec!["spec.b"]);
        assert!(causes.is_empty());
        let mut bad = json!({"spec": {"a": "x"}});
        let (_, causes) = schema_admit(&s, &mut bad);
        assert_eq!(causes[0].field, "spec.a");
    }
}
