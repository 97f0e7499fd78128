//! Patch, apply and schema steps. Each is a thin seam so the write path does not care
//! whether the work is done here or in `mco-apimachinery`.

use serde_json::{Map, Value};

use crate::error::Cause;

/// JSON merge patch (RFC 7386).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// JSON patch (RFC 6902), including `test`.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, String> {
    let p: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|e| e.to_string())?;
    let mut out = target.clone();
    json_patch::patch(&mut out, &p).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Merge keys of the built-in list fields that upstream merges element-wise.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" | "addresses" => "type",
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => "name",
        "volumeMounts" | "volumeDevices" => "mountPath",
        "ports" => "containerPort",
        "ownerReferences" => "uid",
        "taints" | "tolerations" => "key",
        _ => return None,
    })
}

/// Strategic merge patch for built-in kinds: a merge patch in which known list fields
/// merge by their key and `$patch: delete` / `$retainKeys` directives are honoured in
/// their simplest forms.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("object");
    for (k, pv) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(del)) = (t.get_mut(field), pv) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        match pv {
            Value::Null => {
                t.remove(k);
            }
            Value::Array(items) => match (merge_key(k), t.get_mut(k)) {
                (Some(key), Some(Value::Array(cur))) => {
                    for item in items {
                        let id = item.get(key).cloned();
                        let pos = id
                            .as_ref()
                            .and_then(|id| cur.iter().position(|c| c.get(key) == Some(id)));
                        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                        match (pos, delete) {
                            (Some(i), true) => {
                                cur.remove(i);
                            }
                            (Some(i), false) => strategic_merge_patch(&mut cur[i], item),
                            (None, false) => {
                                let mut fresh = Value::Object(Map::new());
                                strategic_merge_patch(&mut fresh, item);
                                cur.push(fresh);
                            }
                            (None, true) => {}
                        }
                    }
                }
                _ if k == "finalizers" => {
                    let cur = t.entry(k.clone()).or_insert_with(|| Value::Array(vec![]));
                    if let Value::Array(cur) = cur {
                        for i in items {
                            if !cur.contains(i) {
                                cur.push(i.clone());
                            }
                        }
                    }
                }
                _ => {
                    t.insert(k.clone(), pv.clone());
                }
            },
            Value::Object(_) => {
                let entry = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                strategic_merge_patch(entry, pv);
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

/// Drops `null`s so an applied configuration can be merged as a patch.
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Server-side apply: merges the applied configuration into the live object.
pub fn apply(live: &Value, applied: &Value) -> Value {
    let mut out = live.clone();
    strategic_merge_patch(&mut out, &strip_nulls(applied));
    out
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Prunes unknown fields, applies defaults and validates `obj` against a structural
/// schema, returning the causes upstream would report.
pub fn schema_admit(schema: &Value, obj: &mut Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    // metadata and apiVersion/kind are never pruned or validated by the CRD schema.
    let meta = obj.get("metadata").cloned();
    let av = obj.get("apiVersion").cloned();
    let kind = obj.get("kind").cloned();
    walk(schema, obj, "", &mut causes, true);
    if let Some(o) = obj.as_object_mut() {
        for (k, v) in [("metadata", meta), ("apiVersion", av), ("kind", kind)] {
            if let Some(v) = v {
                o.insert(k.into(), v);
            }
        }
    }
    causes
}

fn walk(s: &Value, v: &mut Value, path: &str, causes: &mut Vec<Cause>, root: bool) {
    let field = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    if v.is_null() && s.get("nullable").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let int_or_string = s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    if let Some(t) = s.get("type").and_then(Value::as_str)
        && !int_or_string
    {
        let actual = type_name(v);
        let ok = actual == t || (t == "number" && actual == "integer");
        if !ok {
            causes.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: {}: {} in body must be of type {}: \"{}\"",
                    short(v),
                    path,
                    t,
                    actual
                ),
            ));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let allowed: Vec<String> = e.iter().map(short).collect();
        causes.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                short(v),
                allowed.join(", ")
            ),
        ));
    }
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let preserve = s
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                == Some(true);
            if let Some(props) = props {
                for (k, ps) in props {
                    if !m.contains_key(k)
                        && let Some(d) = ps.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                }
            }
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if root && (k == "metadata" || k == "apiVersion" || k == "kind") {
                    continue;
                }
                match props.and_then(|p| p.get(&k)).or(additional) {
                    Some(ps) => {
                        if let Some(child) = m.get_mut(&k) {
                            walk(ps, child, &field(&k), causes, false);
                        }
                    }
                    None if preserve
                        || s.get("additionalProperties") == Some(&Value::Bool(true)) => {}
                    None => {
                        m.remove(&k);
                    }
                }
            }
            for r in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(r) = r.as_str()
                    && !m.contains_key(r)
                {
                    causes.push(Cause::new(
                        "FieldValueRequired",
                        &field(r),
                        "Required value",
                    ));
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                causes.push(Cause::new(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {}: must have at most {} items", items.len(), max),
                ));
            }
            if let Some(is) = s.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    walk(is, it, &format!("{path}[{i}]"), causes, false);
                }
            }
        }
        Value::String(st) => {
            if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
                && st.chars().count() as u64 > max
            {
                causes.push(Cause::new(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = s.get("minimum").and_then(Value::as_f64)
                && x < min
            {
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {n}: {path} in body should be greater than or equal to {min}")));
            }
            if let Some(max) = s.get("maximum").and_then(Value::as_f64)
                && x > max
            {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {n}: {path} in body should be less than or equal to {max}"
                    ),
                ));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn smp_merges_conditions_by_type() {
        let mut t = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]}});
        strategic_merge_patch(
            &mut t,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(
            t["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}])
        );
        strategic_merge_patch(&mut t, &json!({"spec": {"unschedulable": true}}));
        assert_eq!(t["spec"]["unschedulable"], true);
        strategic_merge_patch(&mut t, &json!({"spec": {"unschedulable": null}}));
        assert!(t["spec"].get("unschedulable").is_none());
    }

    #[test]
    fn json_patch_test_op_fails_on_mismatch() {
        let t = json!({"a": 1});
        assert!(json_patch(&t, &json!([{"op": "test", "path": "/a", "value": 2}])).is_err());
        assert_eq!(
            json_patch(&t, &json!([{"op": "replace", "path": "/a", "value": 2}])).unwrap(),
            json!({"a": 2})
        );
    }

    #[test]
    fn schema_prunes_defaults_and_validates() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["mode"], "properties": {
                "mode": {"type": "string", "enum": ["a", "b"]},
                "count": {"type": "integer", "default": 3, "maximum": 5},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        let mut obj =
            json!({"metadata": {"name": "x"}, "spec": {"mode": "a", "junk": 1, "free": {"y": 1}}});
        assert!(schema_admit(&schema, &mut obj).is_empty());
        assert_eq!(
            obj["spec"],
            json!({"mode": "a", "count": 3, "free": {"y": 1}})
        );
        let mut bad = json!({"spec": {"mode": "c", "count": "x"}});
        let causes = schema_admit(&schema, &mut bad);
        assert_eq!(causes.len(), 2);
        assert_eq!(causes[0].field, "spec.mode");
        assert!(causes[0].message.starts_with("Unsupported value: \"c\""));
        assert_eq!(
            causes[1].message,
            "Invalid value: \"x\": spec.count in body must be of type integer: \"string\""
        );
        let mut missing = json!({"spec": {}});
        assert_eq!(
            schema_admit(&schema, &mut missing)[0].message,
            "Required value"
        );
    }
}
