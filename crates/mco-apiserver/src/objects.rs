//! Object semantics shared by every write: metadata defaults, name rules, generation,
//! status separation and no-op detection.

use mco_apimachinery::value::{equal, identical};
use serde_json::{Map, Value, json};

use crate::error::{ApiError, Cause};
use crate::machinery;
use crate::registry::ResourceInfo;

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn meta(v: &Value) -> &Value {
    v.get("metadata").unwrap_or(&Value::Null)
}

pub fn meta_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    meta(v).get(key).and_then(Value::as_str)
}

pub fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    v["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Every kind's checks, as causes of a 422: its metadata (labels, annotations) as kube-apiserver's,
/// and how deep it nests (so that every stored object reads back; see
/// `mco_apimachinery::validation::MAX_OBJECT_DEPTH`).
pub fn validate_meta(obj: &Value) -> Vec<Cause> {
    use mco_apimachinery::validation;
    let deep = validation::too_deep(obj, validation::MAX_OBJECT_DEPTH)
        .map(|e| Cause::new(e.reason(), &e.field, e.body()));
    // Where `ValidateObjectMeta` checks it: before the labels.
    let generation = meta(obj)
        .get("generation")
        .and_then(Value::as_i64)
        .filter(|g| *g < 0)
        .map(|g| {
            Cause::new(
                "FieldValueInvalid",
                "metadata.generation",
                format!("Invalid value: {g}: must be greater than or equal to 0"),
            )
        });
    deep.into_iter()
        .chain(generation)
        .chain(
            validation::object_meta(obj)
                .into_iter()
                .map(|e| Cause::new(e.reason(), &e.field, e.body())),
        )
        .collect()
}

/// A new object's `metadata.generation`, before it is validated: 1 where the kind's strategy
/// keeps one, what the client sent otherwise (kube-apiserver stores it as sent, dropping a
/// zero as Go's `omitempty` does). A value that is no integer is refused as kube-apiserver's
/// decoder refuses it (a custom resource's is set whatever it was).
pub fn created_generation(
    info: &ResourceInfo,
    version: &str,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let m = meta_mut(obj);
    match m.get("generation") {
        _ if info.is_custom() => {}
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(other) => {
            let what = match other {
                Value::Number(n) => format!("number {n}"),
                v => json_kind(v).to_string(),
            };
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: json: cannot unmarshal {what} into Go struct field ObjectMeta.metadata.generation of type int64",
                kind = info.kind
            )));
        }
    }
    if crate::strategy::of(info).generation.tracked() {
        m.insert("generation".into(), json!(1));
    } else if m.get("generation").and_then(Value::as_i64).unwrap_or(0) == 0 {
        m.remove("generation");
    }
    template_generation(info, version, None, obj)
}

/// The annotation in which apps/v1 carries a DaemonSet's template generation.
pub const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// A DaemonSet's template generation, as kube-apiserver keeps it (the internal
/// `spec.templateGeneration`, served in apps/v1 as the annotation [`TEMPLATE_GENERATION`]): on
/// create what the client sent, at least 1; on an update the stored one, one more when the pod
/// template changes (a client cannot set it). `cur` is the stored object of an update. Other
/// kinds are left alone.
pub fn template_generation(
    info: &ResourceInfo,
    version: &str,
    cur: Option<&Value>,
    new: &mut Value,
) -> Result<(), ApiError> {
    if info.group != "apps" || info.plural != "daemonsets" {
        return Ok(());
    }
    let read = |obj: &Value| -> Result<Option<i64>, ApiError> {
        match obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(TEMPLATE_GENERATION))
            .and_then(Value::as_str)
        {
            None => Ok(None),
            // Go's conversion parses it, and its error is the decoder's.
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: strconv.ParseInt: parsing {}: invalid syntax",
                    crate::secret::go_quote(v),
                    kind = info.kind
                ))
            }),
        }
    };
    let sent = read(new)?;
    let generation = match cur {
        None => sent.filter(|g| *g >= 1).unwrap_or(1),
        Some(cur) => {
            let stored = read(cur).ok().flatten().unwrap_or(1);
            let differs = |a: Option<&Value>, b: Option<&Value>| a != b;
            if differs(cur.pointer("/spec/template"), new.pointer("/spec/template")) {
                stored + 1
            } else {
                stored
            }
        }
    };
    meta_mut(new)
        .entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(|a| a.insert(TEMPLATE_GENERATION.into(), json!(generation.to_string())));
    Ok(())
}

/// Upstream's name validation: DNS-1123 labels for namespaces, subdomains otherwise. An Event's
/// name is judged with the Event, in upstream's order, by `crate::event`: a core one needs only
/// be a path segment.
pub fn validate_name(info: &ResourceInfo, name: &str) -> Option<Cause> {
    if crate::event::is_event(info) {
        return None;
    }
    let label = info.group.is_empty() && info.plural == "namespaces";
    if label && !is_dns_label(name) {
        return Some(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ),
        ));
    }
    if !label && !is_dns_subdomain(name) {
        return Some(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ));
    }
    None
}

/// The random suffix of `generateName`, from upstream's alphabet.
pub fn name_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Equality that ignores what every write rewrites anyway.
pub fn same_object(a: &Value, b: &Value) -> bool {
    // Compared in place: this runs on every update, and copying both objects to strip two
    // fields was a visible share of the writer's time.
    const IGNORED: [&str; 2] = ["resourceVersion", MF];
    let same_meta = |x: Option<&Value>, y: Option<&Value>| match (x, y) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let kept = |m: &'_ serde_json::Map<String, Value>| {
                m.iter()
                    .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
                    .count()
            };
            kept(x) == kept(y)
                && x.iter()
                    .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
                    .all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        (x, y) => x == y,
    };
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| match y.get(k) {
                    None => false,
                    Some(w) if k == "metadata" => same_meta(Some(v), Some(w)),
                    Some(w) => equal(v, w),
                })
        }
        _ => a == b,
    }
}

/// Admits a custom resource through its version's schema: prune, default, validate.
/// With `strict` (`fieldValidation=Strict`), pruned fields are an error, as upstream.
pub fn admit_custom(
    info: &ResourceInfo,
    version: &str,
    obj: &mut Value,
    name: &str,
    strict: bool,
) -> Result<(), ApiError> {
    let Some(schema) = info.crd_version(version).and_then(|v| v.structural.clone()) else {
        return Ok(());
    };
    let (pruned, causes) = machinery::schema_admit(&schema, obj);
    if strict && !pruned.is_empty() {
        let fields: Vec<String> = pruned
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect();
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            fields.join(", "),
            kind = info.kind
        )));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.rref(), name, causes));
    }
    Ok(())
}

/// Minimal checks of a CRD object, so that a broken one cannot be registered.
pub fn validate_crd(obj: &Value, name: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let group = obj
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = obj
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    if group.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.group",
            "Required value",
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    }
    if obj
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let versions = obj.pointer("/spec/versions").and_then(Value::as_array);
    match versions {
        None => causes.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value",
        )),
        Some(vs) => {
            // kube-apiserver reports a schema shared by every version under `spec.validation`.
            let schemas: Vec<Option<&Value>> = vs
                .iter()
                .map(|v| v.pointer("/schema/openAPIV3Schema"))
                .collect();
            let shared = schemas.windows(2).all(|w| w[0] == w[1]);
            for (i, schema) in schemas.iter().enumerate() {
                let Some(schema) = schema else { continue };
                let at = if shared {
                    "spec.validation.openAPIV3Schema".to_owned()
                } else {
                    format!("spec.versions[{i}].schema.openAPIV3Schema")
                };
                untyped_fields(schema, &at, &mut causes);
                invalid_defaults(schema, &at, &mut causes);
                if shared {
                    break;
                }
            }
            let storage = vs
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .count();
            if storage != 1 {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "spec.versions",
                    format!("Invalid value: {}: must have exactly one version marked as storage version", json!(vs.iter().map(|v| v["name"].clone()).collect::<Vec<_>>())),
                ));
            }
        }
    }
    causes
}

/// kube-apiserver's structural-schema rule for a CRD: every field and array item names its
/// `type`, unless it is `x-kubernetes-int-or-string` or keeps unknown fields. A schema without
/// it is refused, in kube-apiserver's words, rather than stored and served unvalidated.
fn untyped_fields(schema: &Value, at: &str, causes: &mut Vec<Cause>) {
    let exempt = |s: &Value| {
        s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            || s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
    };
    let check = |s: &Value, path: String, what: &str, causes: &mut Vec<Cause>| {
        if s.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
            && !exempt(s)
        {
            causes.push(Cause::new(
                "FieldValueRequired",
                &format!("{path}.type"),
                format!("Required value: must not be empty for specified {what}"),
            ));
        }
        untyped_fields(s, &path, causes);
    };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        // In name order, as kube-apiserver lists them.
        let mut props: Vec<(&String, &Value)> = props.iter().collect();
        props.sort_by_key(|(name, _)| *name);
        for (name, s) in props {
            check(
                s,
                format!("{at}.properties[{name}]"),
                "object fields",
                causes,
            );
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        check(items, format!("{at}.items"), "array items", causes);
    }
}

/// kube-apiserver's rule that every `default` in a CRD's schema validates against the schema
/// it sits in: a CRD whose default breaks its own `pattern` or `minLength` is refused, naming the
/// default (`...properties[spec].properties[x].default.y`), rather than stored and its objects
/// defaulted to something the schema refuses.
fn invalid_defaults(schema: &Value, at: &str, causes: &mut Vec<Cause>) {
    if let Some(default) = schema.get("default")
        && let Ok(structural) = mco_apimachinery::schema::Structural::parse(schema)
    {
        for e in structural.validate(default) {
            let field = if e.field.is_empty() {
                format!("{at}.default")
            } else {
                format!("{at}.default.{}", e.field)
            };
            causes.push(Cause::new(e.type_.reason(), &field, e.body()));
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let mut props: Vec<(&String, &Value)> = props.iter().collect();
        props.sort_by_key(|(name, _)| *name);
        for (name, s) in props {
            invalid_defaults(s, &format!("{at}.properties[{name}]"), causes);
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        invalid_defaults(items, &format!("{at}.items"), causes);
    }
}

/// A Secret's `stringData` folded into `data`, as kube-apiserver's conversion of a `v1.Secret`
/// does on every write: each value base64-encoded, over a `data` entry of the same key. The
/// field itself is never stored or returned. A value that is not a string is refused in
/// kube-apiserver's words.
pub fn fold_string_data(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    use base64::Engine as _;
    if !crate::secret::is_secret(info) {
        return Ok(());
    }
    let Some(sd) = obj.as_object_mut().and_then(|o| o.remove("stringData")) else {
        return Ok(());
    };
    let refused = |what: &str, into: &str| {
        ApiError::bad_request(format!(
            "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal {what} into Go struct field Secret.stringData of type {into}"
        ))
    };
    let sd = match sd {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => return Err(refused(json_kind(&other), "map[string]string")),
    };
    let mut folded = Map::new();
    for (k, v) in sd {
        let Value::String(text) = v else {
            return Err(refused(json_kind(&v), "string"));
        };
        folded.insert(
            k,
            Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
    if folded.is_empty() {
        return Ok(());
    }
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    if let Some(data) = obj["data"].as_object_mut() {
        data.extend(folded);
    }
    Ok(())
}

/// How Go's `encoding/json` names a JSON value's kind in an unmarshal error.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The defaults kube-apiserver gives a decoded core/v1 Node or Pod, or an apps/v1 workload, on
/// every write.
pub fn default_core(info: &ResourceInfo, obj: &mut Value) {
    if info.group.is_empty() || info.group == "apps" {
        mco_apimachinery::defaults::on_decode(&info.kind, obj);
    }
}

/// Fills in what the server owns on create.
pub fn prepare_create(info: &ResourceInfo, version: &str, obj: &mut Value) {
    let has_status = info.has_status(version);
    let m = meta_mut(obj);
    m.insert(
        "uid".into(),
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    for k in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        m.remove(k);
    }
    if info.is_custom()
        && has_status
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    if info.group.is_empty() && info.plural == "namespaces" {
        obj["status"] = json!({"phase": "Active"});
        if obj.pointer("/spec/finalizers").is_none() {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
    }
    if info.group.is_empty() && info.plural == "pods" && obj.pointer("/status/phase").is_none() {
        if !obj.get("status").is_some_and(Value::is_object) {
            obj["status"] = json!({});
        }
        obj["status"]["phase"] = json!("Pending");
    }
}

/// Which part of the object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// Turns a proposed new object into what is stored, given the current one: keeps
/// server-owned metadata, separates status, bumps generation where the kind keeps one
/// ([`crate::strategy`]), and reports no-ops.
/// `None` means nothing changes.
pub fn finish_update(
    info: &ResourceInfo,
    version: &str,
    cur: &Value,
    mut new: Value,
    part: Part,
    strict: bool,
) -> Result<Option<Value>, ApiError> {
    let has_status = info.has_status(version);
    let name = meta_str(cur, "name").unwrap_or("").to_string();
    if !new.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be an object",
        ));
    }
    match part {
        Part::Status => {
            let mut status = new.get_mut("status").map(Value::take);
            let managed = meta_mut(&mut new).remove(MF);
            let mut sent = match new {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            // The stored object with the request's status, in the stored key order. The old
            // status is not copied only to be replaced: for a MachineConfigNode it is most of
            // the object, and status writes are most of a rollout's writes. Nor is what the
            // request carries unchanged (a patch starts from the stored object): it is moved.
            let mut fresh = Map::new();
            for (k, v) in cur.as_object().into_iter().flatten() {
                if k == "status" {
                    if let Some(s) = status.take() {
                        fresh.insert(k.clone(), s);
                    }
                    continue;
                }
                let mine = sent.remove(k);
                let kept = if k == "metadata" && info.is_custom() {
                    status_write_metadata(v, mine, managed.is_some())
                } else if k == "metadata" {
                    builtin_status_metadata(info, v, mine, managed.is_some())
                } else {
                    match mine {
                        Some(m) if identical(&m, v) => m,
                        _ => v.clone(),
                    }
                };
                fresh.insert(k.clone(), kept);
            }
            if let Some(s) = status {
                fresh.insert("status".into(), s);
            }
            let mut fresh = Value::Object(fresh);
            if let Some(mf) = managed {
                meta_mut(&mut fresh).insert(MF.into(), mf);
            }
            new = fresh;
        }
        Part::Main if has_status => match cur.get("status") {
            // A write of the main part that left the status alone (nearly all) keeps it
            // without a copy.
            Some(s) if new.get("status").is_some_and(|n| equal(n, s)) => {}
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        },
        Part::Main => {}
    }
    if let Some(av) = cur.get("apiVersion") {
        new["apiVersion"] = av.clone();
    }
    if let Some(k) = cur.get("kind") {
        new["kind"] = k.clone();
    }
    let cm = meta(cur);
    let nm = meta_mut(&mut new);
    for k in [
        "uid",
        "creationTimestamp",
        "name",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match cm.get(k) {
            Some(v) => {
                nm.insert(k.into(), v.clone());
            }
            None => {
                nm.remove(k);
            }
        }
    }
    nm.remove("resourceVersion");
    if info.is_custom() {
        admit_custom(info, version, &mut new, &name, strict && part == Part::Main)?;
    }
    template_generation(info, version, Some(cur), &mut new)?;
    // Status strategies never move it: a status write changes nothing it counts.
    if part == Part::Main && crate::strategy::of(info).generation.bumped(cur, &new) {
        let g = meta(cur)
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    if same_object(cur, &new) {
        return Ok(None);
    }
    Ok(Some(new))
}

/// The managed fields a request brings when they differ from the stored ones (a PUT or a
/// patch of `metadata.managedFields`); a request without them keeps the stored ones.
pub fn sent_managed_fields(cur: &Value, new: &Value) -> Option<Value> {
    let sent = new.pointer("/metadata/managedFields")?;
    (cur.pointer("/metadata/managedFields") != Some(sent)).then(|| sent.clone())
}

/// The metadata key of an object's field managers.
const MF: &str = "managedFields";

/// `out` with the stored managedFields (`Null` where the caller replaces them) at the place they
/// have in `stored`, as a status write keeps them.
fn with_stored_managed_fields(
    stored: &Map<String, Value>,
    mut out: Map<String, Value>,
    replaced: bool,
) -> Value {
    if let Some(at) = stored.keys().position(|k| k == MF) {
        let mf = if replaced {
            Value::Null
        } else {
            stored[MF].clone()
        };
        out.shift_insert(at.min(out.len()), MF.into(), mf);
    }
    Value::Object(out)
}

/// The metadata of a built-in kind's status write: the request's, as its status strategy
/// resets only `spec` (a Node, a PodDisruptionBudget) and a few metadata fields (a Pod's owner
/// references, a Deployment's labels), which come back from `stored`. The fields no update
/// changes are restored by the caller; the stored managedFields keep their place, as in
/// [`status_write_metadata`].
fn builtin_status_metadata(
    info: &ResourceInfo,
    stored: &Value,
    sent: Option<Value>,
    replaced: bool,
) -> Value {
    let (Some(cm), Some(Value::Object(mut out))) = (stored.as_object(), sent) else {
        return status_write_metadata(stored, None, replaced);
    };
    out.shift_remove(MF);
    let reset = mco_apimachinery::apply::status_reset_fields(&info.group, &info.kind, false);
    for field in reset.iter().filter_map(|f| f.strip_prefix("metadata.")) {
        match cm.get(field) {
            Some(v) => {
                out.insert(field.into(), v.clone());
            }
            None => {
                out.shift_remove(field);
            }
        }
    }
    with_stored_managed_fields(cm, out, replaced)
}

/// The stored metadata for a custom resource's status write, which keeps it: the request's
/// copy where it is the stored one but for managedFields, keys in the same order (a patch's
/// is), the stored one otherwise. The stored managedFields are copied only when the request
/// brings none, and keep their place either way: the caller's insert of the request's entries
/// replaces them where they stand.
fn status_write_metadata(stored: &Value, sent: Option<Value>, replaced: bool) -> Value {
    let Some(cm) = stored.as_object() else {
        return stored.clone();
    };
    let same = |m: &Map<String, Value>| {
        cm.iter().filter(|(k, _)| *k != MF).count() == m.len()
            && cm
                .iter()
                .filter(|(k, _)| *k != MF)
                .zip(m)
                .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
    };
    let out = match sent {
        Some(Value::Object(m)) if same(&m) => m,
        _ => cm
            .iter()
            .filter(|(k, _)| *k != MF)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    with_stored_managed_fields(cm, out, replaced)
}

/// An object whose deletion was requested and whose last finalizer is gone is removed.
pub fn should_remove(v: &Value) -> bool {
    meta(v)
        .get("deletionTimestamp")
        .is_some_and(|d| !d.is_null())
        && meta(v)
            .get("finalizers")
            .and_then(Value::as_array)
            .is_none_or(|f| f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn sent_managed_fields_are_those_that_differ() {
        let cur = json!({"metadata": {"name": "n", "managedFields": [{"manager": "a"}]}});
        let moved = json!({"metadata": {"name": "n", "managedFields": [{"manager": "b"}]}});
        assert_eq!(
            sent_managed_fields(&cur, &moved),
            Some(json!([{"manager": "b"}]))
        );
        assert_eq!(sent_managed_fields(&cur, &cur), None);
        assert_eq!(
            sent_managed_fields(&cur, &json!({"metadata": {"name": "n"}})),
            None
        );
    }

    #[test]
    fn same_object_ignores_only_resource_version_and_managed_fields() {
        let a = json!({"metadata": {"name": "n", "resourceVersion": "1",
            "managedFields": [{"manager": "a"}]}, "spec": {"x": 1}});
        let b = json!({"metadata": {"resourceVersion": "2", "name": "n"}, "spec": {"x": 1}});
        assert!(same_object(&a, &b));
        let c = json!({"metadata": {"name": "n", "labels": {}}, "spec": {"x": 1}});
        assert!(!same_object(&a, &c), "an added metadata field is a change");
        let d = json!({"metadata": {"name": "n"}, "spec": {"x": 2}});
        assert!(!same_object(&a, &d));
        let e = json!({"metadata": {"name": "n"}, "spec": {"x": 1}, "status": {}});
        assert!(!same_object(&a, &e), "an added top-level field is a change");
        assert!(!same_object(
            &json!({"spec": {}}),
            &json!({"metadata": {}, "spec": {}})
        ));
    }

    #[test]
    fn a_crd_default_its_own_schema_refuses_is_refused_as_kube_apiserver_refuses_it() {
        // The messages kube-apiserver gave for the first MachineOSConfig CRD mco generated.
        let crd = json!({"spec": {"group": "g.example.com", "names": {"plural": "xs", "kind": "X"},
        "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object", "properties": {
                    "builder": {"type": "object", "default": {"kind": ""},
                        "properties": {"kind": {"type": "string", "pattern": "^Job$"}}},
                    "push": {"type": "string", "minLength": 1, "default": ""},
                    "fine": {"type": "string", "default": ""},
                }}}}}}]}});
        let got: Vec<(String, String)> = validate_crd(&crd, "xs.g.example.com")
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect();
        let at = "spec.validation.openAPIV3Schema.properties[spec]";
        assert_eq!(
            got,
            [
                (
                    format!("{at}.properties[builder].default.kind"),
                    "Invalid value: \"\": kind in body should match '^Job$'".to_string()
                ),
                (
                    format!("{at}.properties[push].default"),
                    "Invalid value: \"\":  in body should be at least 1 chars long".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_crd_field_without_a_type_is_refused_as_kube_apiserver_refuses_it() {
        let crd = |schema: Value, versions: usize| {
            let v: Vec<Value> = (0..versions)
                .map(|i| {
                    json!({"name": format!("v{i}"), "served": true, "storage": i == 0,
                    "schema": {"openAPIV3Schema": schema}})
                })
                .collect();
            json!({"spec": {"group": "g.example.com", "names": {"plural": "xs", "kind": "X"},
                "versions": v}})
        };
        let fields = |c: Vec<Cause>| -> Vec<(String, String)> {
            c.into_iter().map(|c| (c.field, c.message)).collect()
        };
        let bad = json!({"type": "object", "properties": {
            "status": {"nullable": true},
            "spec": {"type": "object", "properties": {"list": {"type": "array", "items": {"description": "x"}}}},
        }});
        assert_eq!(
            fields(validate_crd(&crd(bad.clone(), 1), "xs.g.example.com")),
            [
                (
                    "spec.validation.openAPIV3Schema.properties[spec].properties[list].items.type"
                        .to_owned(),
                    "Required value: must not be empty for specified array items".to_owned()
                ),
                (
                    "spec.validation.openAPIV3Schema.properties[status].type".to_owned(),
                    "Required value: must not be empty for specified object fields".to_owned()
                ),
            ]
        );
        // Each version's own schema is named by its index when they differ.
        let mut two = crd(bad, 2);
        two["spec"]["versions"][1]["schema"]["openAPIV3Schema"] = json!({"type": "object"});
        let causes = fields(validate_crd(&two, "xs.g.example.com"));
        assert_eq!(causes.len(), 2);
        assert!(
            causes[0]
                .0
                .starts_with("spec.versions[0].schema.openAPIV3Schema.")
        );
        // Typed, int-or-string and preserved fields are fine.
        let good = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"x-kubernetes-int-or-string": true},
            "c": {"x-kubernetes-preserve-unknown-fields": true},
        }});
        assert!(validate_crd(&crd(good, 1), "xs.g.example.com").is_empty());
    }

    #[test]
    fn names_follow_dns_rules() {
        let r = Registry::new();
        let cm = r.lookup("", "v1", "configmaps").unwrap();
        let ns = r.lookup("", "v1", "namespaces").unwrap();
        assert!(validate_name(&cm, "a.b-c").is_none());
        assert!(
            validate_name(&cm, "Bad_Name")
                .unwrap()
                .message
                .contains("RFC 1123 subdomain")
        );
        assert!(
            validate_name(&ns, "a.b")
                .unwrap()
                .message
                .contains("RFC 1123 label")
        );
    }

    #[test]
    fn generation_moves_only_on_spec_with_status_subresource() {
        let r = Registry::new();
        let pod = r.lookup("", "v1", "pods").unwrap();
        let cur = json!({"metadata": {"name": "n", "generation": 1, "uid": "u", "resourceVersion": "5"}, "spec": {}, "status": {"a": 1}});
        // status change through the main endpoint is ignored: a no-op
        let same = finish_update(
            &pod,
            "v1",
            &cur,
            json!({"metadata": {"name": "n"}, "spec": {}, "status": {"a": 2}}),
            Part::Main,
            false,
        )
        .unwrap();
        assert!(same.is_none());
        let st = finish_update(
            &pod,
            "v1",
            &cur,
            json!({"metadata": {"name": "n"}, "status": {"a": 2}}),
            Part::Status,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(st["status"]["a"], 2);
        assert_eq!(st["metadata"]["generation"], 1);
        let sp = finish_update(
            &pod,
            "v1",
            &cur,
            json!({"metadata": {"name": "n", "labels": {"x": "y"}}, "spec": {"nodeName": "a"}}),
            Part::Main,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(sp["metadata"]["generation"], 2);
        assert_eq!(sp["status"]["a"], 1);
        assert_eq!(sp["metadata"]["uid"], "u");
    }

    #[test]
    fn a_kind_without_a_generation_keeps_what_it_has() {
        let r = Registry::new();
        let node = r.lookup("", "v1", "nodes").unwrap();
        let body = json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}});
        let bare = json!({"metadata": {"name": "n", "uid": "u"}, "spec": {}});
        let new = finish_update(&node, "v1", &bare, body.clone(), Part::Main, false)
            .unwrap()
            .unwrap();
        assert_eq!(new["metadata"].get("generation"), None);
        // One stored with a generation (sent on create) keeps it, whatever an update sends.
        let sent = json!({"metadata": {"name": "n", "uid": "u", "generation": 5}, "spec": {}});
        let mut body = body;
        body["metadata"]["generation"] = json!(9);
        let new = finish_update(&node, "v1", &sent, body, Part::Main, false)
            .unwrap()
            .unwrap();
        assert_eq!(new["metadata"]["generation"], 5);
    }

    #[test]
    fn a_created_generation_is_one_where_the_kind_keeps_it_and_as_sent_elsewhere() {
        let r = Registry::new();
        let cm = r.lookup("", "v1", "configmaps").unwrap();
        let pdb = r.lookup("policy", "v1", "poddisruptionbudgets").unwrap();
        let created = |info: &ResourceInfo, g: Value| {
            let mut obj = json!({"metadata": {"name": "n", "generation": g}});
            created_generation(info, "v1", &mut obj)
                .map(|()| obj["metadata"].get("generation").cloned())
        };
        assert_eq!(created(&cm, Value::Null).unwrap(), None);
        assert_eq!(created(&cm, json!(0)).unwrap(), None);
        assert_eq!(created(&cm, json!(7)).unwrap(), Some(json!(7)));
        assert_eq!(created(&pdb, Value::Null).unwrap(), Some(json!(1)));
        assert_eq!(created(&pdb, json!(7)).unwrap(), Some(json!(1)));
        assert_eq!(
            created(&cm, json!(1.5)).unwrap_err().message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number 1.5 into Go struct field ObjectMeta.metadata.generation of type int64"
        );
        assert!(
            created(&cm, json!("x"))
                .unwrap_err()
                .message
                .contains("unmarshal string into")
        );
        // A negative one is stored by no kind.
        let causes = validate_meta(&json!({"metadata": {"name": "n", "generation": -1}}));
        assert_eq!(
            causes
                .iter()
                .map(|c| (c.field.as_str(), c.message.as_str()))
                .collect::<Vec<_>>(),
            [(
                "metadata.generation",
                "Invalid value: -1: must be greater than or equal to 0"
            )]
        );
    }

    #[test]
    fn a_status_write_takes_only_the_status_and_keeps_the_stored_order() {
        let r = Registry::new();
        let node = r.lookup("", "v1", "nodes").unwrap();
        let cur = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "uid": "u", "resourceVersion": "5", "labels": {"a": "b"}},
            "spec": {"unschedulable": true}, "status": {"phase": "old"}, "zz": 1});
        let write = |body: Value| {
            finish_update(&node, "v1", &cur, body, Part::Status, false)
                .unwrap()
                .unwrap()
        };
        // The request's spec is not taken; its labels (a Node's status strategy resets only
        // the spec) and its status are, the status where the old one stood.
        let st = write(json!({"metadata": {"name": "n", "labels": {"a": "c"}},
            "spec": {"unschedulable": false}, "status": {"phase": "new"}}));
        let keys: Vec<&str> = st.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["apiVersion", "kind", "metadata", "spec", "status", "zz"]
        );
        assert_eq!(st["status"], json!({"phase": "new"}));
        assert_eq!(st["spec"], cur["spec"]);
        assert_eq!(st["metadata"]["labels"], json!({"a": "c"}));
        assert_eq!(st["metadata"]["uid"], cur["metadata"]["uid"]);
        // A write without a status clears it; one to an object without a status adds it last.
        assert!(
            write(json!({"metadata": {"name": "n"}}))
                .get("status")
                .is_none()
        );
        let bare = json!({"metadata": {"name": "n", "uid": "u"}, "spec": {}});
        let added = finish_update(
            &node,
            "v1",
            &bare,
            json!({"status": {"phase": "x"}}),
            Part::Status,
            false,
        )
        .unwrap()
        .unwrap();
        let keys: Vec<&str> = added
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["metadata", "spec", "status"]);
    }

    #[test]
    fn a_status_write_keeps_the_stored_metadata_and_the_place_of_its_managed_fields() {
        let r = Registry::new();
        let node = r.lookup("", "v1", "nodes").unwrap();
        let cur = json!({"metadata": {"name": "n", "managedFields": [{"manager": "old"}],
            "labels": {"a": "b"}}, "spec": {}, "status": {"phase": "old"}});
        let write = |body: Value| {
            finish_update(&node, "v1", &cur, body, Part::Status, false)
                .unwrap()
                .unwrap()
        };
        let keys = |v: &Value| -> Vec<String> {
            v["metadata"].as_object().unwrap().keys().cloned().collect()
        };
        // A patch's body: the stored object, its status changed.
        let mut patched = cur.clone();
        patched["status"]["phase"] = json!("new");
        let st = write(patched.clone());
        assert_eq!(st["metadata"], cur["metadata"]);
        assert_eq!(keys(&st), ["name", "managedFields", "labels"]);
        // Entries of its own replace the stored ones where they stood.
        patched["metadata"]["managedFields"] = json!([{"manager": "new"}]);
        let st = write(patched);
        assert_eq!(st["metadata"]["managedFields"], json!([{"manager": "new"}]));
        assert_eq!(keys(&st), ["name", "managedFields", "labels"]);
        // A Node's metadata in another order, with other labels, is taken (its status strategy
        // resets only the spec), the entries still where the stored ones stood.
        let st = write(json!({"metadata": {"labels": {"a": "c"}, "name": "n",
            "managedFields": [{"manager": "new"}]}, "status": {"phase": "new"}}));
        assert_eq!(st["metadata"]["labels"], json!({"a": "c"}));
        assert_eq!(st["metadata"]["managedFields"], json!([{"manager": "new"}]));
        assert_eq!(keys(&st), ["labels", "managedFields", "name"]);
        // Without entries of its own, the stored ones stay; labels it leaves out go, as a PUT
        // to kube-apiserver's `nodes/status` drops them.
        let st = write(json!({"metadata": {"name": "n"}, "status": {"phase": "new"}}));
        assert_eq!(
            st["metadata"],
            json!({"name": "n", "managedFields": [{"manager": "old"}]})
        );
    }

    #[test]
    fn removal_waits_for_finalizers() {
        assert!(!should_remove(
            &json!({"metadata": {"deletionTimestamp": "x", "finalizers": ["a"]}})
        ));
        assert!(should_remove(
            &json!({"metadata": {"deletionTimestamp": "x", "finalizers": []}})
        ));
        assert!(!should_remove(&json!({"metadata": {}})));
    }

    #[test]
    fn a_daemonsets_template_generation_is_kept_as_kube_apiserver_keeps_it() {
        let r = Registry::new();
        let ds = r.lookup("apps", "v1", "daemonsets").unwrap();
        let gen_of = |o: &Value| o["metadata"]["annotations"][TEMPLATE_GENERATION].clone();
        let with = |ann: Option<&str>, image: &str| {
            let mut o = json!({"metadata": {"name": "d"},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
            if let Some(a) = ann {
                o["metadata"]["annotations"] = json!({TEMPLATE_GENERATION: a});
            }
            o
        };
        // Create: what was sent, at least 1.
        for (sent, want) in [
            (None, "1"),
            (Some("5"), "5"),
            (Some("0"), "1"),
            (Some("-3"), "1"),
        ] {
            let mut o = with(sent, "a");
            template_generation(&ds, "v1", None, &mut o).unwrap();
            assert_eq!(gen_of(&o), json!(want), "{sent:?}");
        }
        let mut bad = with(Some("two"), "a");
        let e = template_generation(&ds, "v1", None, &mut bad).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "DaemonSet in version \"v1\" cannot be handled as a DaemonSet: strconv.ParseInt: parsing \"two\": invalid syntax"
        );
        // Update: the stored one, whatever is sent; one more for a new template.
        let stored = with(Some("4"), "a");
        let mut same = with(Some("9"), "a");
        template_generation(&ds, "v1", Some(&stored), &mut same).unwrap();
        assert_eq!(gen_of(&same), json!("4"));
        let mut dropped = with(None, "a");
        template_generation(&ds, "v1", Some(&stored), &mut dropped).unwrap();
        assert_eq!(gen_of(&dropped), json!("4"));
        let mut changed = with(Some("4"), "b");
        template_generation(&ds, "v1", Some(&stored), &mut changed).unwrap();
        assert_eq!(gen_of(&changed), json!("5"));
        // Other kinds never get it.
        let deploy = r.lookup("apps", "v1", "deployments").unwrap();
        let mut d = with(None, "a");
        template_generation(&deploy, "v1", None, &mut d).unwrap();
        assert_eq!(d["metadata"].get("annotations"), None);
    }
}
